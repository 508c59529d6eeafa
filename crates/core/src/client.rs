//! Building the Kubernetes client: kube's standard config inference (or an
//! explicit kubeconfig/context), a User-Agent naming this program, and the
//! client-side QPS/burst limit.

use std::path::PathBuf;

use http::{HeaderValue, header};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::ratelimit::RateLimitLayer;

/// Where the client comes from and how hard it may push.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// `--kubeconfig`; `None` = kube's inference (KUBECONFIG, ~/.kube/config,
    /// in-cluster service account).
    pub kubeconfig: Option<PathBuf>,
    /// `--context` within the kubeconfig.
    pub context: Option<String>,
    /// Requests per second; `<= 0` disables client-side limiting.
    pub qps: f64,
    pub burst: u32,
    /// `User-Agent`, e.g. `protection-manager/0.3.0`.
    pub user_agent: String,
}

/// A client that could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("loading client configuration: {0}")]
    Config(String),
    #[error("building client: {0}")]
    Build(#[from] kube::Error),
    #[error("invalid user agent {0:?}")]
    UserAgent(String),
}

/// Resolves the client configuration.
pub async fn load_config(opts: &ClientOptions) -> Result<kube::Config, ClientError> {
    let kco = KubeConfigOptions {
        context: opts.context.clone(),
        ..Default::default()
    };
    match &opts.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kco)
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })
        }
        None if opts.context.is_some() => kube::Config::from_kubeconfig(&kco)
            .await
            .map_err(|e| ClientError::Config(e.to_string())),
        None => kube::Config::infer()
            .await
            .map_err(|e| ClientError::Config(e.to_string())),
    }
}

/// Builds the client from a resolved configuration.
pub fn build_client(
    config: kube::Config,
    opts: &ClientOptions,
) -> Result<kube::Client, ClientError> {
    build_client_observed(config, opts, None)
}

/// [`build_client`], recording the client's requests and rate-limiter waits
/// (see [`crate::client_metrics`]) when `metrics` is given.
pub fn build_client_observed(
    mut config: kube::Config,
    opts: &ClientOptions,
    metrics: Option<&crate::client_metrics::ClientMetrics>,
) -> Result<kube::Client, ClientError> {
    if !opts.user_agent.is_empty() {
        let ua = HeaderValue::from_str(&opts.user_agent)
            .map_err(|_| ClientError::UserAgent(opts.user_agent.clone()))?;
        config.headers.retain(|(k, _)| k != header::USER_AGENT);
        config.headers.push((header::USER_AGENT, ua));
    }
    let builder =
        ClientBuilder::try_from(config)?.with_layer(&RateLimitLayer::new(opts.qps, opts.burst));
    Ok(match metrics {
        Some(m) => builder.with_layer(&m.layer()).build(),
        None => builder.build(),
    })
}

//! Building the Kubernetes client: kube's standard config inference (or an
//! explicit kubeconfig/context), a User-Agent naming this program, the
//! client-side QPS/burst limit, a bound on each call (`--request-timeout`)
//! and a health signal for the client's worker.
//!
//! kube's [`kube::Client`] runs its service stack in one buffer worker task.
//! If that task dies (a panic in a layer), the process stays up but every
//! call fails with "buffer's worker closed unexpectedly". [`ClientHealth`]
//! notices: a guard in our layer is dropped with the stack, so liveness can
//! fail and the process restart.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, header};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::Notify;
use tower::{Layer, Service};

use crate::ratelimit::{RateLimitError, RateLimitLayer};
use protection_core::duration::format_duration;
use protection_core::redact::redact_url_credentials;

/// The default of `--request-timeout`. kube-rs lists in pages of 500
/// objects, so no single call of ours legitimately takes long; 30 s is half
/// of kube-apiserver's own bound on a non-watch request (its
/// `--request-timeout`, 1 min), so a server that accepts connections and
/// never answers is reported within 30 s instead of never.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the client comes from and how hard it may push.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// `--kubeconfig`; `None` = kube's inference (KUBECONFIG, ~/.kube/config,
    /// in-cluster service account).
    pub kubeconfig: Option<PathBuf>,
    /// `--context` within the kubeconfig.
    pub context: Option<String>,
    /// Requests per second; 0 disables client-side limiting (see
    /// [`crate::ratelimit::validate_qps`]).
    pub qps: f64,
    pub burst: u32,
    /// `User-Agent`, e.g. `protection-manager/0.3.0`.
    pub user_agent: String,
    /// Bound on each call until the response headers arrive (a watch is
    /// bounded until it is open, not for its life). `None`: no bound.
    pub request_timeout: Option<Duration>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            kubeconfig: None,
            context: None,
            qps: 0.0,
            burst: 1,
            user_agent: String::new(),
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
        }
    }
}

/// A client that could not be configured. Each variant's text says what
/// failed and leaves the cause to the error chain (`{:#}` prints both once).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("loading the kubeconfig (context {context:?})")]
    Context {
        context: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("inferring the client configuration (KUBECONFIG, ~/.kube/config, in-cluster)")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building client for {server}")]
    Build {
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error("invalid user agent {0:?}")]
    UserAgent(String),
    #[error("client-side rate limit")]
    RateLimit(#[source] RateLimitError),
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
        None => {
            match &opts.context {
                Some(context) => kube::Config::from_kubeconfig(&kco).await.map_err(|source| {
                    ClientError::Context {
                        context: context.clone(),
                        source,
                    }
                }),
                None => kube::Config::infer().await.map_err(ClientError::Infer),
            }
        }
    }
}

/// The API server's URL as it may be shown (credentials redacted).
pub fn server_url(config: &kube::Config) -> String {
    redact_url_credentials(&config.cluster_url.to_string())
}

/// Builds the client from a resolved configuration; the [`ClientHealth`]
/// tells whether its worker still runs.
pub fn build_client(
    config: kube::Config,
    opts: &ClientOptions,
) -> Result<(kube::Client, ClientHealth), ClientError> {
    build_client_observed(config, opts, None)
}

/// [`build_client`], recording the client's requests and rate-limiter waits
/// (see [`crate::client_metrics`]) when `metrics` is given.
pub fn build_client_observed(
    mut config: kube::Config,
    opts: &ClientOptions,
    metrics: Option<&crate::client_metrics::ClientMetrics>,
) -> Result<(kube::Client, ClientHealth), ClientError> {
    if !opts.user_agent.is_empty() {
        let ua = HeaderValue::from_str(&opts.user_agent)
            .map_err(|_| ClientError::UserAgent(opts.user_agent.clone()))?;
        config.headers.retain(|(k, _)| k != header::USER_AGENT);
        config.headers.push((header::USER_AGENT, ua));
    }
    let server = server_url(&config);
    let builder = client_builder(config).map_err(|source| ClientError::Build {
        server: server.clone(),
        source,
    })?;
    layered(builder, opts, server, metrics)
}

/// The most a connection's read buffer grows to. hyper's default (~400 KiB)
/// is reached by every large LIST page, and a pooled connection keeps its
/// grown buffer for life: the watches that reuse those connections held
/// 1.5-2 MiB of buffers at 2,000 objects of each kind, a tenth of the
/// manager's memory there (issue 11). 64 KiB still reads a list page in a
/// handful of reads.
pub const READ_BUFFER_MAX: usize = 64 * 1024;

/// The service type of kube's standard stack (kube's own `GenericService`,
/// which it does not export).
type GenericService = tower::util::BoxService<
    http::Request<kube::client::Body>,
    http::Response<Box<kube::client::DynBody>>,
    tower::BoxError,
>;

/// kube's standard stack (`ClientBuilder::try_from`), with the connection
/// read buffer capped at [`READ_BUFFER_MAX`], which kube gives no way to set.
/// The layers are kube 5.0's, in its order: base URI, retry of server errors
/// (`Config::default_retry`), auth, extra headers (our User-Agent), tracing;
/// and the connector's connect/read/write timeouts. kube's stack also records
/// when an exec plugin's client certificate expires (`Client::valid_until`,
/// informational, which nothing here reads). With a proxy configured,
/// kube's own stack is used unchanged (it implements the proxy kinds).
fn client_builder(config: kube::Config) -> Result<ClientBuilder<GenericService>, kube::Error> {
    use http_body_util::BodyExt;
    use hyper_util::client::legacy::connect::HttpConnector;
    use kube::client::{ConfigExt, DynBody};
    use tower::{BoxError, ServiceBuilder, ServiceExt};

    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER_MAX)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .map_err(BoxError::from)
        .service(hyper)
        .map_response(|res| {
            res.map(|body| Box::new(BodyExt::map_err(body, BoxError::from)) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// Puts our layers on a kube client stack and builds the client.
pub fn layered<S, B>(
    builder: ClientBuilder<S>,
    opts: &ClientOptions,
    server: String,
    metrics: Option<&crate::client_metrics::ClientMetrics>,
) -> Result<(kube::Client, ClientHealth), ClientError>
where
    S: Service<http::Request<kube::client::Body>, Response = http::Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<tower::BoxError>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    // The rate-limiter wait is measured by the metrics layer outside it
    // (`client_metrics`), so the limiter needs no observer here.
    let rate = RateLimitLayer::new(opts.qps, opts.burst).map_err(ClientError::RateLimit)?;
    let health = ClientHealth::new();
    let guard = GuardLayer {
        health: health.clone(),
    };
    let limited = builder
        .with_layer(&TimeoutLayer {
            timeout: opts.request_timeout.filter(|d| !d.is_zero()),
            server: Arc::from(server),
        })
        .with_layer(&rate);
    // The metrics layer sits outside the rate limiter, so the time its
    // `poll_ready` stays pending is the request's rate-limiter wait.
    let client = match metrics {
        Some(m) => limited.with_layer(&m.layer()).with_layer(&guard).build(),
        None => limited.with_layer(&guard).build(),
    };
    Ok((client, health))
}

// ---- health of the client's worker -----------------------------------------

#[derive(Debug, Default)]
struct HealthState {
    closed: AtomicBool,
    notify: Notify,
}

/// Whether the client's buffer worker (which owns the request stack) is
/// still running.
#[derive(Clone, Debug, Default)]
pub struct ClientHealth {
    state: Arc<HealthState>,
}

impl ClientHealth {
    fn new() -> Self {
        Self::default()
    }

    /// `Ok` while the worker runs; the shape of a health check
    /// (`admin::DynamicCheck`), for `/healthz`.
    pub fn check(&self) -> Result<(), String> {
        if self.state.closed.load(Ordering::SeqCst) {
            Err("the Kubernetes client's worker has stopped: every API call fails until the process restarts".into())
        } else {
            Ok(())
        }
    }

    /// Resolves once the worker has stopped.
    pub async fn closed(&self) {
        loop {
            let notified = self.state.notify.notified();
            if self.state.closed.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// Marks the worker closed when the stack (owned by the worker) is dropped.
struct Guard(ClientHealth);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.state.closed.store(true, Ordering::SeqCst);
        self.0.state.notify.notify_waiters();
    }
}

struct GuardLayer {
    health: ClientHealth,
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded {
            inner,
            _guard: Guard(self.health.clone()),
        }
    }
}

/// The outermost service of our stack, carrying the guard.
pub struct Guarded<S> {
    inner: S,
    _guard: Guard,
}

impl<S: Service<R>, R> Service<R> for Guarded<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.inner.call(req)
    }
}

// ---- --request-timeout -------------------------------------------------------

/// No reply within `--request-timeout`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the API server {server} did not answer within {} (--request-timeout)",
    format_duration(*timeout)
)]
pub struct RequestTimeout {
    pub server: Arc<str>,
    pub timeout: Duration,
}

struct TimeoutLayer {
    timeout: Option<Duration>,
    server: Arc<str>,
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeout {
            inner,
            timeout: self.timeout,
            server: self.server.clone(),
        }
    }
}

/// Bounds each call's response future (until the headers arrive).
pub struct Timeout<S> {
    inner: S,
    timeout: Option<Duration>,
    server: Arc<str>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, R> Service<R> for Timeout<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
    S::Error: Into<tower::BoxError>,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = BoxFuture<Result<S::Response, tower::BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let fut = self.inner.call(req);
        let Some(timeout) = self.timeout else {
            return Box::pin(async move { fut.await.map_err(Into::into) });
        };
        let server = self.server.clone();
        Box::pin(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(r) => r.map_err(Into::into),
                Err(_) => Err(RequestTimeout { server, timeout }.into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Req = http::Request<kube::client::Body>;
    type Resp = http::Response<http_body_util::Full<bytes::Bytes>>;

    /// A stack whose worker panics on the first request.
    #[derive(Clone)]
    struct PanicsWhenPolled;

    impl Service<Req> for PanicsWhenPolled {
        type Response = Resp;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Resp, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            panic!("a layer panicked in the client's worker");
        }

        fn call(&mut self, _: Req) -> Self::Future {
            unreachable!()
        }
    }

    #[tokio::test]
    async fn a_dead_worker_fails_the_health_check() {
        let (client, health) = layered(
            ClientBuilder::new(PanicsWhenPolled, "default"),
            &ClientOptions::default(),
            "https://127.0.0.1:6443/".into(),
            None,
        )
        .unwrap();
        assert_eq!(health.check(), Ok(()));
        let err = client.apiserver_version().await.unwrap_err().to_string();
        assert!(err.contains("closed"), "{err}");
        tokio::time::timeout(Duration::from_secs(30), health.closed())
            .await
            .expect("closed() resolves once the worker is gone");
        let e = health.check().unwrap_err();
        assert!(e.contains("worker has stopped"), "{e}");
    }

    /// Never answers.
    #[derive(Clone)]
    struct Silent;

    impl Service<Req> for Silent {
        type Response = Resp;
        type Error = std::convert::Infallible;
        type Future = std::future::Pending<Result<Resp, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Req) -> Self::Future {
            std::future::pending()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_server_is_named_after_the_request_timeout() {
        let opts = ClientOptions {
            request_timeout: Some(Duration::from_secs(7)),
            ..Default::default()
        };
        let (client, health) = layered(
            ClientBuilder::new(Silent, "default"),
            &opts,
            redact_url_credentials("https://admin:hunter2@10.0.0.1:6443/"),
            None,
        )
        .unwrap();
        let err = client.apiserver_version().await.unwrap_err();
        let text = format!("{err}");
        assert!(
            text.contains(
                "the API server https://admin:***@10.0.0.1:6443/ did not answer within 7s (--request-timeout)"
            ),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(health.check(), Ok(()));
    }

    #[test]
    fn bad_rate_limits_are_refused_not_panicked_on() {
        let opts = ClientOptions {
            qps: 1e-300,
            ..Default::default()
        };
        let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        let Err(e) = build_client(config, &opts) else {
            panic!("qps 1e-300 must be refused");
        };
        assert!(matches!(e, ClientError::RateLimit(_)), "{e}");
    }

    /// Serves one HTTP/1.1 connection: reads a request (headers only) and
    /// answers `body`, then returns the request's head.
    async fn serve_once(listener: tokio::net::TcpListener, body: Vec<u8>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client closed before sending a request");
            head.extend_from_slice(&buf[..n]);
        }
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(answer.as_bytes()).await.unwrap();
        conn.write_all(&body).await.unwrap();
        conn.flush().await.unwrap();
        String::from_utf8_lossy(&head).into_owned()
    }

    #[tokio::test]
    async fn a_list_page_far_larger_than_the_read_buffer_arrives_whole_with_our_headers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // A 1 MiB list page: 16 times the read buffer's cap.
        let items: Vec<serde_json::Value> = (0..4096)
            .map(|i| serde_json::json!({"metadata": {"name": format!("cm-{i:05}")}, "data": {"v": "x".repeat(240)}}))
            .collect();
        let page = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "7"}, "items": items
        }))
        .unwrap();
        assert!(page.len() > 16 * READ_BUFFER_MAX, "{}", page.len());
        let server = tokio::spawn(serve_once(listener, page));

        let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        config.auth_info.token = Some("t0ken".to_string().into());
        let opts = ClientOptions {
            user_agent: "protection-manager/test".into(),
            ..Default::default()
        };
        let (client, _) = build_client(config, &opts).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let list = api.list(&Default::default()).await.unwrap();
        assert_eq!(list.items.len(), 4096);
        assert_eq!(list.items[4095].metadata.name.as_deref(), Some("cm-04095"));
        let head = server.await.unwrap().to_ascii_lowercase();
        assert!(
            head.starts_with("get /api/v1/namespaces/default/configmaps"),
            "{head}"
        );
        assert!(
            head.contains("user-agent: protection-manager/test"),
            "{head}"
        );
        assert!(head.contains("authorization: bearer t0ken"), "{head}");
    }
}

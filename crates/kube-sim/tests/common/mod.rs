//! Shared test harness: a kube-sim instance, or a real cluster when
//! `KUBE_SIM_CONFORMANCE_KUBECONFIG` names a kubeconfig.
#![allow(dead_code)]

pub mod cluster;
pub mod real;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::{KubeSim, SimConfig};

pub const REAL_CLUSTER_ENV: &str = "KUBE_SIM_CONFORMANCE_KUBECONFIG";

/// What a test runs against.
pub struct Target {
    pub client: Client,
    pub sim: Option<KubeSim>,
    pub kubeconfig: PathBuf,
}

impl Target {
    /// A kube-sim with the default configuration, or the real cluster.
    pub async fn new() -> Target {
        Target::with(SimConfig::default()).await
    }

    /// A kube-sim with `cfg`, or the real cluster (then `cfg` is ignored).
    pub async fn with(cfg: SimConfig) -> Target {
        if let Ok(path) = std::env::var(REAL_CLUSTER_ENV) {
            let path = PathBuf::from(path);
            let kc = kube::config::Kubeconfig::read_from(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
            let client = Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"));
            return Target {
                client,
                sim: None,
                kubeconfig: path,
            };
        }
        let sim = KubeSim::start(cfg)
            .await
            .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
        let client = sim.client().await;
        let kubeconfig = sim.kubeconfig_path().to_path_buf();
        Target {
            client,
            sim: Some(sim),
            kubeconfig,
        }
    }

    /// The simulator; tests that need its controls call this and, against a
    /// real cluster, say so and stop.
    pub fn sim(&self) -> Option<&KubeSim> {
        if self.sim.is_none() {
            eprintln!("NOTE: this check needs kube-sim's controls; not run against a real cluster");
        }
        self.sim.as_ref()
    }

    /// Creates a fresh namespace for the test.
    pub async fn namespace(&self, prefix: &str) -> String {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let mut ns = Namespace::default();
        ns.metadata.generate_name = Some(format!("{prefix}-"));
        let created = api
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating a test namespace: {e}"));
        created.metadata.name.unwrap_or_default()
    }

    pub async fn cleanup_namespace(&self, ns: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(ns, &DeleteParams::default()).await;
    }
}

/// Polls `f` until it returns `Some`, for up to 30 s.
pub async fn eventually<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    test_support::eventually(Duration::from_secs(30), what, f).await
}

/// The API Status of a failed call.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A unique suffix for cluster-scoped names.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!(
        "{prefix}-{:x}-{}",
        t & 0xffffff,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub use test_support::kubectl::tool;

/// A plain HTTP/1.1 request to the simulator (no client-side retries),
/// answering (status code, body).
pub async fn raw(
    sim: &KubeSim,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(sim.addr())
        .await
        .unwrap_or_else(|e| panic!("connecting to kube-sim: {e}"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: kube-sim\r\nAuthorization: Bearer admin\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("writing request: {e}"));
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .await
        .unwrap_or_else(|e| panic!("reading response: {e}"));
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, dechunk(&body))
}

/// Undoes chunked transfer encoding when present.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((len, tail)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(n) = usize::from_str_radix(len.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 {
            return out;
        }
        if tail.len() < n {
            return body.to_string();
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
}

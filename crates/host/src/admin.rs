//! The admin HTTP server: `/metrics` (Prometheus text), `/healthz` and
//! `/livez` (the process is alive), `/readyz` (ready only once every readiness
//! check passes: the API server answers, leader election is healthy, and the
//! leader's controllers have synced their caches).
//!
//! Bodies follow kube-apiserver's healthz conventions: `ok` on success;
//! `?verbose` lists each check as `[+]name ok` / `[-]name failed: reason`, and a
//! failure always lists the checks followed by `readyz check failed`.
//!
//! The admin server is plain HTTP without authentication, so the binary binds
//! it to loopback by default ([`DEFAULT_ADDRESS`]); a pod sets its address
//! explicitly for the kubelet's probes. When the secure metrics server runs
//! ([`crate::metrics_server`]), `/metrics` is served there only and answers
//! 404 here, naming where it moved.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use protection_core::metrics::Metrics;

/// The admin server's default address: loopback, since nothing on it is
/// authenticated (kube-controller-manager's insecure port was loopback-only
/// too).
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:8080";

/// A check evaluated at request time.
pub type DynamicCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A detail shown next to a passing check (`[+]name ok: detail`), evaluated
/// at request time: something an operator should know that does not make
/// the manager unready (a controller idle because the cluster lacks its API).
pub type DynamicNote = Arc<dyn Fn() -> Option<String> + Send + Sync>;

#[derive(Clone)]
enum Check {
    Static(Result<(), String>),
    Dynamic(DynamicCheck),
}

impl Check {
    fn eval(&self) -> Result<(), String> {
        match self {
            Check::Static(r) => r.clone(),
            Check::Dynamic(f) => f(),
        }
    }
}

/// Named readiness checks, updated by the host as things change.
#[derive(Clone, Default)]
pub struct Health {
    checks: Arc<Mutex<BTreeMap<String, Check>>>,
    notes: Arc<Mutex<BTreeMap<String, DynamicNote>>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("checks", &self.evaluate())
            .finish()
    }
}

impl Health {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets (or adds) a check.
    pub fn set(&self, name: &str, state: Result<(), String>) {
        self.checks
            .lock()
            .insert(name.to_string(), Check::Static(state));
    }

    /// Adds a check computed on every request.
    pub fn set_dynamic(&self, name: &str, check: DynamicCheck) {
        self.checks
            .lock()
            .insert(name.to_string(), Check::Dynamic(check));
    }

    fn evaluate(&self) -> BTreeMap<String, Result<(), String>> {
        let checks = self.checks.lock().clone();
        checks.into_iter().map(|(k, c)| (k, c.eval())).collect()
    }

    /// Adds a detail to the check `name`, shown while it passes.
    pub fn set_note(&self, name: &str, note: DynamicNote) {
        self.notes.lock().insert(name.to_string(), note);
    }

    fn note(&self, name: &str) -> Option<String> {
        let f = self.notes.lock().get(name).cloned();
        f.and_then(|f| f())
    }

    /// Removes a check.
    pub fn remove(&self, name: &str) {
        self.checks.lock().remove(name);
        self.notes.lock().remove(name);
    }

    /// Whether every check passes (and at least one exists).
    pub fn is_ready(&self) -> bool {
        let c = self.evaluate();
        !c.is_empty() && c.values().all(Result::is_ok)
    }

    /// The `/readyz` answer.
    pub fn readyz(&self, verbose: bool) -> (StatusCode, String) {
        let checks = self.evaluate();
        let ready = !checks.is_empty() && checks.values().all(Result::is_ok);
        if ready && !verbose {
            return (StatusCode::OK, "ok".into());
        }
        let mut body = String::new();
        if checks.is_empty() {
            body.push_str("[-]startup failed: no readiness check registered yet\n");
        }
        for (name, state) in &checks {
            match state {
                Ok(()) => match self.note(name) {
                    Some(n) => body.push_str(&format!("[+]{name} ok: {n}\n")),
                    None => body.push_str(&format!("[+]{name} ok\n")),
                },
                Err(reason) => body.push_str(&format!("[-]{name} failed: {reason}\n")),
            }
        }
        if ready {
            body.push_str("readyz check passed\n");
            (StatusCode::OK, body)
        } else {
            body.push_str("readyz check failed\n");
            (StatusCode::INTERNAL_SERVER_ERROR, body)
        }
    }
}

#[derive(Clone)]
struct AdminState {
    metrics: Arc<Metrics>,
    health: Health,
}

#[derive(serde::Deserialize)]
struct VerboseQuery {
    verbose: Option<String>,
}

async fn metrics_handler(State(s): State<AdminState>) -> Response {
    if let Some(url) = s.metrics.served_elsewhere() {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!(
                "/metrics is served by the secure metrics server at {url} (--metrics-bind-address), with authentication\n"
            ),
        )
            .into_response();
    }
    match s.metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn alive() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<AdminState>, Query(q): Query<VerboseQuery>) -> Response {
    let (code, body) = s.health.readyz(q.verbose.is_some());
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The admin server's router (exposed for tests).
pub fn router(metrics: Arc<Metrics>, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(alive))
        .route("/livez", get(alive))
        .route("/readyz", get(readyz))
        .with_state(AdminState { metrics, health })
}

/// Errors starting the admin server.
#[derive(Debug, thiserror::Error)]
#[error("admin server on {addr}: {source}")]
pub struct AdminError {
    pub addr: String,
    #[source]
    pub source: std::io::Error,
}

/// Binds the admin address (so a port clash fails the start, loudly).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, AdminError> {
    TcpListener::bind(addr).await.map_err(|source| AdminError {
        addr: addr.to_string(),
        source,
    })
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), AdminError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    axum::serve(listener, router(metrics, health))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(|source| AdminError { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_address_is_loopback() {
        let addr: SocketAddr = DEFAULT_ADDRESS.parse().unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_eq!(addr.port(), 8080);
    }

    #[tokio::test]
    async fn metrics_move_to_the_secure_server() {
        let metrics = Metrics::new().unwrap();
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            metrics.clone(),
            Health::new(),
            stop.clone(),
        ));
        let get = |path: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let before = get("/metrics").await;
        assert!(before.starts_with("HTTP/1.1 200"), "{before}");
        assert!(before.contains("protection_manager_leader"), "{before}");
        metrics.set_served_elsewhere("https://0.0.0.0:8443/metrics".into());
        let after = get("/metrics").await;
        assert!(after.starts_with("HTTP/1.1 404"), "{after}");
        assert!(after.contains("https://0.0.0.0:8443/metrics"), "{after}");
        assert!(!after.contains("protection_manager_leader"), "{after}");
        let health = get("/healthz").await;
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        stop.cancel();
        server.await.unwrap().unwrap();
    }

    #[test]
    fn readyz_bodies_follow_kube_conventions() {
        let h = Health::new();
        let (code, body) = h.readyz(false);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("readyz check failed"), "{body}");

        h.set("ping", Ok(()));
        h.set("informer-sync", Err("pvc-protection has not synced".into()));
        let (code, body) = h.readyz(false);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body,
            "[-]informer-sync failed: pvc-protection has not synced\n[+]ping ok\nreadyz check failed\n"
        );

        h.set("informer-sync", Ok(()));
        assert_eq!(h.readyz(false), (StatusCode::OK, "ok".to_string()));
        let (code, body) = h.readyz(true);
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            body,
            "[+]informer-sync ok\n[+]ping ok\nreadyz check passed\n"
        );
        assert!(h.is_ready());

        h.set_note("ping", Arc::new(|| Some("vac-protection idle".into())));
        assert_eq!(
            h.readyz(true).1,
            "[+]informer-sync ok\n[+]ping ok: vac-protection idle\nreadyz check passed\n"
        );
        assert_eq!(h.readyz(false), (StatusCode::OK, "ok".to_string()));
    }
}

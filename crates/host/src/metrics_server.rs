//! The secure metrics server, as kube-controller-manager and
//! controller-runtime serve metrics: `/metrics` over HTTPS (a certificate
//! generated at start, or one mounted from files), each request
//! authenticated by a `TokenReview` of its bearer token and authorized by a
//! `SubjectAccessReview` of `get` on the non-resource URL `/metrics`, both
//! asked of the API server and cached for a short time. Health endpoints stay
//! on the plain admin server ([`crate::admin`]).
//!
//! `secure: false` serves `/metrics` on this port in plain HTTP without
//! authentication (controller-runtime's `--metrics-secure=false`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use protection_core::metrics::Metrics;

/// The path served and authorized.
pub const METRICS_PATH: &str = "/metrics";
/// How long a review's answer is reused (kube-controller-manager's
/// delegated authentication and authorization caches default to 10s).
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(10);
/// Bound on the cache's entries; past it, expired entries are dropped, then
/// all of them.
const CACHE_CAPACITY: usize = 4096;
/// Bound on a TLS handshake and on the wait for a request's headers, so that
/// a silent client cannot hold a task.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum TlsSource {
    /// A self-signed certificate generated at start for these names (DNS
    /// names or IP addresses).
    SelfSigned { names: Vec<String> },
    /// PEM files (e.g. a mounted cert-manager Secret): the certificate chain
    /// and its private key (PKCS#8, PKCS#1 or SEC1). Read once at start.
    Files { cert: PathBuf, key: PathBuf },
}

/// Errors setting up the secure metrics server.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServerError {
    #[error("metrics server on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS certificate file {path}: {reason}")]
    Cert { path: String, reason: String },
    #[error("TLS private key file {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Binds the metrics address (a port clash fails the start, loudly).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, MetricsServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsServerError::Bind {
            addr: addr.to_string(),
            source,
        })
}

/// The rustls server configuration (HTTP/1.1 only: controller-runtime turns
/// HTTP/2 off on its metrics server by default, for the rapid-reset CVEs).
pub fn tls_config(source: &TlsSource) -> Result<Arc<ServerConfig>, MetricsServerError> {
    let (certs, key) = match source {
        TlsSource::SelfSigned { names } => {
            let generated = rcgen::generate_simple_self_signed(names.clone())?;
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                generated.signing_key.serialize_der(),
            ));
            (vec![generated.cert.der().clone()], key)
        }
        TlsSource::Files { cert, key } => {
            let cert_path = cert.display().to_string();
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| MetricsServerError::Cert {
                    path: cert_path.clone(),
                    reason: e.to_string(),
                })?;
            if certs.is_empty() {
                return Err(MetricsServerError::Cert {
                    path: cert_path,
                    reason: "no PEM certificate in it".into(),
                });
            }
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| MetricsServerError::Key {
                path: key.display().to_string(),
                reason: e.to_string(),
            })?;
            (certs, key)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A request's standing after authentication and authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed to `get` `/metrics`.
    Allowed { user: String },
    /// No bearer token, or the API server does not know it.
    Unauthenticated,
    /// Authenticated as `user`, not allowed; `reason` from the review.
    Forbidden { user: String, reason: String },
}

/// A review that could not be asked (not cached).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] kube::Error),
    #[error("SubjectAccessReview failed: {0}")]
    SubjectAccessReview(#[source] kube::Error),
}

/// Delegated authentication and authorization (TokenReview +
/// SubjectAccessReview) with a short cache keyed by the token's SHA-256.
pub struct DelegatingAuth {
    client: kube::Client,
    ttl: Duration,
    cache: Mutex<HashMap<Vec<u8>, (Decision, Instant)>>,
}

impl std::fmt::Debug for DelegatingAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegatingAuth")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl DelegatingAuth {
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        DelegatingAuth {
            client,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Decides on the `Authorization` header's bearer token.
    pub async fn decide(&self, token: Option<&str>) -> Result<Decision, ReviewError> {
        let Some(token) = token else {
            return Ok(Decision::Unauthenticated);
        };
        let key = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .to_vec();
        let now = Instant::now();
        if let Some((d, at)) = self.cache.lock().get(&key)
            && now.duration_since(*at) < self.ttl
        {
            return Ok(d.clone());
        }
        let decision = self.review(token).await?;
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_CAPACITY {
            let ttl = self.ttl;
            cache.retain(|_, (_, at)| now.duration_since(*at) < ttl);
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
        }
        cache.insert(key, (decision.clone(), now));
        Ok(decision)
    }

    async fn review(&self, token: &str) -> Result<Decision, ReviewError> {
        let tr = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let tr = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &tr)
            .await
            .map_err(ReviewError::TokenReview)?;
        let status = tr.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => return Ok(Decision::Unauthenticated),
        };
        let name = user.username.clone().unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_string()),
                    verb: Some("get".to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let sar = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &sar)
            .await
            .map_err(ReviewError::SubjectAccessReview)?;
        let status = sar.status.unwrap_or_default();
        if status.allowed && status.denied != Some(true) {
            Ok(Decision::Allowed { user: name })
        } else {
            Ok(Decision::Forbidden {
                user: name,
                reason: status.reason.unwrap_or_default(),
            })
        }
    }
}

/// How the metrics server serves.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// HTTPS when set.
    pub tls: Option<Arc<ServerConfig>>,
    /// TokenReview + SubjectAccessReview when set; anyone may read otherwise.
    pub auth: Option<Arc<DelegatingAuth>>,
}

#[derive(Clone)]
struct ServerState {
    metrics: Arc<Metrics>,
    auth: Option<Arc<DelegatingAuth>>,
}

/// The bearer token of an `Authorization` header (scheme case-insensitive,
/// as the API server's bearer-token authenticator reads it).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn text(code: StatusCode, body: String) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn metrics_handler(State(s): State<ServerState>, headers: HeaderMap) -> Response {
    if let Some(auth) = &s.auth {
        match auth.decide(bearer(&headers)).await {
            Ok(Decision::Allowed { user }) => {
                tracing::debug!(%user, "metrics scrape allowed");
            }
            Ok(Decision::Unauthenticated) => {
                return text(StatusCode::UNAUTHORIZED, "Unauthorized\n".into());
            }
            Ok(Decision::Forbidden { user, reason }) => {
                tracing::debug!(%user, %reason, "metrics scrape forbidden");
                let mut body =
                    format!("forbidden: User {user:?} cannot get path \"{METRICS_PATH}\"");
                if !reason.is_empty() {
                    body.push_str(&format!(": {reason}"));
                }
                body.push('\n');
                return text(StatusCode::FORBIDDEN, body);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot authorize a metrics scrape");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal Server Error: the API server could not review the request\n".into(),
                );
            }
        }
    }
    match s.metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The metrics server's router (exposed for tests).
pub fn router(metrics: Arc<Metrics>, auth: Option<Arc<DelegatingAuth>>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(metrics_handler))
        .with_state(ServerState { metrics, auth })
}

/// Serves until `shutdown` is cancelled (open connections are closed then).
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    opts: ServeOptions,
    shutdown: CancellationToken,
) {
    let app = router(metrics, opts.auth);
    let acceptor = opts.tls.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off, go on.
                    tracing::warn!(error = %e, "metrics server cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let acceptor = acceptor.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let served = async {
                match acceptor {
                    Some(acceptor) => {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(tls)) => serve_connection(TokioIo::new(tls), app).await,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "metrics TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%peer, "metrics TLS handshake timed out"),
                        }
                    }
                    None => serve_connection(TokioIo::new(tcp), app).await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = served => {}
            }
        });
    }
}

async fn serve_connection<I>(io: I, app: Router)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = TowerToHyperService::new(app);
    // A client that opens a connection (or keeps one alive) without sending
    // a request does not hold it for ever.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT);
    if let Err(e) = builder.serve_connection(io, svc).await {
        tracing::debug!(error = %e, "metrics connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_as_the_api_server_reads_them() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::AUTHORIZATION, v.parse().unwrap());
            m
        };
        assert_eq!(bearer(&h("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&h("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&h("Basic abc")), None);
        assert_eq!(bearer(&h("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    /// A kube client answering reviews from memory, counting them.
    fn review_client(
        allowed: bool,
    ) -> (
        kube::Client,
        Arc<std::sync::atomic::AtomicUsize>,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let token_reviews = Arc::new(AtomicUsize::new(0));
        let access_reviews = Arc::new(AtomicUsize::new(0));
        let (tr, sar) = (token_reviews.clone(), access_reviews.clone());
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (tr, sar) = (tr.clone(), sar.clone());
            async move {
                let body = if req.uri().path().ends_with("/tokenreviews") {
                    tr.fetch_add(1, Ordering::SeqCst);
                    serde_json::json!({
                        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "metadata": {}, "spec": {},
                        "status": {"authenticated": true, "user": {"username": "u", "groups": ["g"]}}
                    })
                } else {
                    sar.fetch_add(1, Ordering::SeqCst);
                    serde_json::json!({
                        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                        "metadata": {}, "spec": {},
                        "status": {"allowed": allowed, "reason": "because"}
                    })
                };
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    body.to_string().into_bytes(),
                )))
            }
        });
        (
            kube::Client::new(svc, "default"),
            token_reviews,
            access_reviews,
        )
    }

    #[tokio::test]
    async fn decisions_are_cached_per_token_for_the_ttl() {
        use std::sync::atomic::Ordering;
        let (client, tr, sar) = review_client(false);
        let auth = DelegatingAuth::new(client, Duration::from_secs(3600));
        let forbidden = Decision::Forbidden {
            user: "u".into(),
            reason: "because".into(),
        };
        for _ in 0..3 {
            assert_eq!(auth.decide(Some("t")).await.unwrap(), forbidden);
        }
        assert_eq!(
            (tr.load(Ordering::SeqCst), sar.load(Ordering::SeqCst)),
            (1, 1)
        );
        assert_eq!(auth.decide(Some("t2")).await.unwrap(), forbidden);
        assert_eq!(tr.load(Ordering::SeqCst), 2);
        assert_eq!(auth.decide(None).await.unwrap(), Decision::Unauthenticated);
        assert_eq!(tr.load(Ordering::SeqCst), 2);

        let (client, tr, _) = review_client(true);
        let auth = DelegatingAuth::new(client, Duration::ZERO);
        for _ in 0..3 {
            assert_eq!(
                auth.decide(Some("t")).await.unwrap(),
                Decision::Allowed { user: "u".into() }
            );
        }
        assert_eq!(tr.load(Ordering::SeqCst), 3, "a zero TTL caches nothing");
    }

    /// A connection that sends nothing is closed (after the handshake or
    /// header timeout), with and without TLS.
    #[tokio::test(start_paused = true)]
    async fn silent_connections_are_closed() {
        use tokio::io::AsyncReadExt;
        let metrics = Metrics::new().unwrap();
        for tls in [
            None,
            Some(
                tls_config(&TlsSource::SelfSigned {
                    names: vec!["localhost".into()],
                })
                .unwrap(),
            ),
        ] {
            let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let addr = listener.local_addr().unwrap();
            let stop = CancellationToken::new();
            let server = tokio::spawn(serve(
                listener,
                metrics.clone(),
                ServeOptions { tls, auth: None },
                stop.clone(),
            ));
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut buf = Vec::new();
            // EOF or a reset (the server closed it) within the (paused,
            // auto-advancing) clock's 10 minutes; a held connection times out.
            let read =
                tokio::time::timeout(Duration::from_secs(600), conn.read_to_end(&mut buf)).await;
            assert!(read.is_ok(), "a silent connection was kept open");
            assert!(buf.is_empty(), "{buf:?}");
            stop.cancel();
            server.await.unwrap();
        }
    }

    #[test]
    fn self_signed_and_file_certificates_load() {
        let cfg = tls_config(&TlsSource::SelfSigned {
            names: vec!["localhost".into(), "127.0.0.1".into()],
        });
        assert!(cfg.is_ok(), "{cfg:?}");

        let dir = std::env::temp_dir().join(format!("pm-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["pm".to_string()]).unwrap();
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
        let ok = tls_config(&TlsSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        });
        assert!(ok.is_ok(), "{ok:?}");

        // Bad input names the file.
        std::fs::write(&key, "not a key").unwrap();
        let err = tls_config(&TlsSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains(&key.display().to_string()), "{err}");
        let missing = dir.join("missing.crt");
        let err = tls_config(&TlsSource::Files {
            cert: missing.clone(),
            key,
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

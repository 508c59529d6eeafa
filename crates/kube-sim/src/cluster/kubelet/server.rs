//! The process kubelet's API (the real kubelet's port 10250), over HTTPS
//! with a self-signed certificate, for the API server and the test harness:
//!
//! | method & path | what |
//! |---|---|
//! | `GET /healthz` | `ok` |
//! | `GET /containerLogs/{ns}/{pod}/{container}?previous&tailLines&limitBytes&follow` | the container's log: what kube-apiserver proxies `pods/log` (`kubectl logs`) to, at the Node's InternalIP and `daemonEndpoints.kubeletEndpoint.Port` |
//! | `GET /_sim/pods`, `POST /_sim/pods/{ns}/{name}/signal?sig=&container=` | as kube-sim's admin API: the pods this kubelet runs (pids, restarts, logs) and a signal to a container's process |
//!
//! Unlike a real kubelet it authenticates no one: it listens on loopback
//! (kube-apiserver's kubelet client sends no client certificate unless
//! given `--kubelet-client-certificate`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;

use crate::cluster::logs::{self, LogError, LogOptions};
use crate::cluster::runtime::{PodRuntimes, pods_endpoint};
use crate::http::RespBody;

/// Errors starting the kubelet API.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding the kubelet API to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the kubelet API's serving certificate: {0}")]
    Tls(String),
}

fn reply(code: u16, content_type: &'static str, body: impl Into<Bytes>) -> Response<RespBody> {
    let mut r = Response::new(RespBody::Full(Some(body.into())));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

fn handle(
    runtimes: &Arc<PodRuntimes>,
    shutdown: &CancellationToken,
    req: &Request<Incoming>,
) -> Response<RespBody> {
    let path = req.uri().path().trim_end_matches('/');
    let query = req.uri().query().unwrap_or("");
    if let Some((code, body)) = pods_endpoint(runtimes, req.method(), path, query) {
        return reply(code, "application/json", body.to_string());
    }
    if req.method() != Method::GET {
        return reply(405, "text/plain", "method not allowed");
    }
    if path == "/healthz" {
        return reply(200, "text/plain", "ok");
    }
    let Some(rest) = path.strip_prefix("/containerLogs/") else {
        return reply(404, "text/plain", format!("404 page not found: {path}"));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let [ns, pod, container] = parts.as_slice() else {
        return reply(
            400,
            "text/plain",
            "expected /containerLogs/{namespace}/{pod}/{container}",
        );
    };
    let mut opts = LogOptions::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "previous" => opts.previous = v == "true" || v == "1",
            "follow" => opts.follow = v == "true" || v == "1",
            "tailLines" => opts.tail_lines = v.parse().ok(),
            "limitBytes" => opts.limit_bytes = v.parse().ok(),
            _ => {}
        }
    }
    let Some(p) = runtimes.get(ns, pod) else {
        return reply(
            404,
            "text/plain",
            format!("pod {ns}/{pod} is not running on this kubelet"),
        );
    };
    match logs::container_log(runtimes, &p.uid, container, &opts, shutdown) {
        Ok(r) => r,
        Err(LogError::NotRunning) => reply(
            404,
            "text/plain",
            format!("container {container:?} in pod {ns}/{pod} has not started"),
        ),
        Err(LogError::NoPrevious) => reply(
            404,
            "text/plain",
            format!("previous terminated container {container:?} in pod {pod:?} not found"),
        ),
    }
}

/// A self-signed serving certificate for `ip`.
fn tls_config(ip: std::net::IpAddr) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let tls = |e: String| ServerError::Tls(e);
    let key = rcgen::KeyPair::generate().map_err(|e| tls(e.to_string()))?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .map_err(|e| tls(e.to_string()))?;
    params.subject_alt_names.push(rcgen::SanType::IpAddress(ip));
    let cert = params.self_signed(&key).map_err(|e| tls(e.to_string()))?;
    let der_key = rustls_pki_types::PrivateKeyDer::Pkcs8(
        rustls_pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
    );
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], der_key)
        .map_err(|e| tls(e.to_string()))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Binds the kubelet API on `addr` (port 0: any free port); returns the
/// bound address. Serves until `shutdown`.
pub async fn start(
    addr: SocketAddr,
    runtimes: Arc<PodRuntimes>,
    shutdown: CancellationToken,
) -> Result<SocketAddr, ServerError> {
    let tls = tls_config(addr.ip())?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServerError::Bind { addr, source })?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "kubelet API: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = shutdown.cancelled() => return,
            };
            let acceptor = acceptor.clone();
            let runtimes = runtimes.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req| {
                    let r = handle(&runtimes, &shutdown, &req);
                    async move { Ok::<_, std::convert::Infallible>(r) }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                if let Err(e) = builder
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await
                {
                    tracing::debug!(error = %e, "kubelet API connection ended with an error");
                }
            });
        }
    });
    Ok(bound)
}

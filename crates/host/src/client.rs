//! Building the Kubernetes client: kube's standard config inference (or an
//! explicit kubeconfig/context), a User-Agent naming this program, the
//! client-side QPS/burst limit, a bound on each call (`--request-timeout`),
//! HTTP/2 with pings as client-go speaks it ([`https_connector`]) and a
//! health signal for the client's worker.
//!
//! kube's [`kube::Client`] runs its service stack in one buffer worker task.
//! If that task dies (a panic in a layer), the process stays up but every
//! call fails with "buffer's worker closed unexpectedly". [`ClientHealth`]
//! notices: a guard in our layer is dropped with the stack, so liveness can
//! fail and the process restart.
//!
//! A 429 or 503 is retried (kube's server-aware retry), waiting what the
//! server's `Retry-After` asks, but never longer than [`retry_cap`] (the
//! request timeout, at most a minute): with `--request-timeout=0` a 429
//! carrying a huge `Retry-After` made the watches sleep for days while
//! `/readyz` passed.

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
    /// Offer HTTP/2 to an `https://` server ([`https_connector`]); false
    /// with `DISABLE_HTTP2` set ([`http2_from_env`]).
    pub http2: bool,
    /// HTTP/2 connections the calls are spread over, round robin
    /// ([`HTTP2_CONNECTIONS`] unless a client's calls are few, as the
    /// Events client's; at least 1).
    pub http2_connections: usize,
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
            http2: http2_from_env(),
            http2_connections: HTTP2_CONNECTIONS,
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
    /// A path KUBECONFIG lists that does not exist (kube's own error
    /// quotes the path twice).
    #[error("KUBECONFIG names {path}, which does not exist")]
    KubeconfigEnvMissing { path: String },
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
    /// A kubeconfig, or a file it names, that is not a regular file or is
    /// larger than what it holds: refused before anything reads it.
    #[error(transparent)]
    File(#[from] token_file::FileError),
}

/// The most a kubeconfig may weigh (one with many clusters and inline
/// certificates is a few hundred kilobytes).
pub const MAX_KUBECONFIG_BYTES: u64 = 16 * 1024 * 1024;
/// The most a certificate, key or CA bundle file may weigh (a system CA
/// bundle is about 200 KiB).
pub const MAX_CERTIFICATE_BYTES: u64 = 4 * 1024 * 1024;

/// The kubeconfig files kube's inference reads: `KUBECONFIG`'s, else
/// `~/.kube/config` when it exists.
fn inferred_kubeconfigs() -> Vec<PathBuf> {
    match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        Some(v) => std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        None => std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".kube").join("config"))
            .filter(|p| p.exists())
            .into_iter()
            .collect(),
    }
}

/// Checks the files a kubeconfig names (certificate authority, client
/// certificate and key, token file) before kube reads them.
fn check_referenced_files(kc: &Kubeconfig) -> Result<(), token_file::FileError> {
    for c in kc.clusters.iter().filter_map(|c| c.cluster.as_ref()) {
        if let Some(p) = &c.certificate_authority {
            token_file::check_file(
                p.as_ref(),
                MAX_CERTIFICATE_BYTES,
                "certificate authority file",
            )?;
        }
    }
    for a in kc.auth_infos.iter().filter_map(|a| a.auth_info.as_ref()) {
        if let Some(p) = &a.client_certificate {
            token_file::check_file(p.as_ref(), MAX_CERTIFICATE_BYTES, "client certificate file")?;
        }
        if let Some(p) = &a.client_key {
            token_file::check_file(p.as_ref(), MAX_CERTIFICATE_BYTES, "client key file")?;
        }
        if let Some(p) = &a.token_file {
            token_file::check_file(p.as_ref(), token_file::MAX_TOKEN_BYTES, "token file")?;
        }
    }
    Ok(())
}

/// The longest wait a server may ask for (`Retry-After`) before a request
/// is sent again: the request timeout, and at most a minute (also with no
/// request timeout).
pub const MAX_SERVER_WAIT: Duration = Duration::from_secs(60);

/// [`MAX_SERVER_WAIT`] or the request timeout, the shorter.
pub fn retry_cap(request_timeout: Option<Duration>) -> Duration {
    request_timeout
        .filter(|d| !d.is_zero())
        .map_or(MAX_SERVER_WAIT, |t| t.min(MAX_SERVER_WAIT))
}

/// kube's server-aware retry (`RetryPolicy::server_retry`: 429, 503 and
/// 504, up to 15 times, exponential backoff or the server's `Retry-After`,
/// whichever is later), with every wait capped at `cap`.
#[derive(Clone)]
pub struct CappedRetry {
    /// `None` only if the parameters were refused (they cannot be: the cap
    /// is at least 10 ms, the first delay 5 ms): then every wait is the cap.
    backoff: Option<tower::retry::backoff::ExponentialBackoff>,
    attempt: u32,
    cap: Duration,
}

impl CappedRetry {
    const MAX_RETRIES: u32 = 15;

    pub fn new(cap: Duration) -> Self {
        use tower::retry::backoff::{ExponentialBackoffMaker, MakeBackoff};
        let cap = cap.max(Duration::from_millis(10));
        let backoff = ExponentialBackoffMaker::new(
            Duration::from_millis(5),
            cap,
            2.0,
            tower::util::rng::HasherRng::new(),
        )
        .ok()
        .map(|mut m| m.make_backoff());
        CappedRetry {
            backoff,
            attempt: 0,
            cap,
        }
    }

    /// How long to wait before the next try, given the server's
    /// `Retry-After` (seconds) and the backoff's own delay.
    fn wait(&self, retry_after: Option<&http::HeaderValue>, backoff: Duration) -> Duration {
        let server = retry_after
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or_default();
        server.max(backoff).min(self.cap)
    }
}

impl<Res>
    tower::retry::Policy<http::Request<kube::client::Body>, http::Response<Res>, tower::BoxError>
    for CappedRetry
{
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut http::Request<kube::client::Body>,
        result: &mut Result<http::Response<Res>, tower::BoxError>,
    ) -> Option<Self::Future> {
        use tower::retry::backoff::Backoff;
        let Ok(response) = result else {
            return None;
        };
        let retryable = matches!(
            response.status(),
            http::StatusCode::TOO_MANY_REQUESTS
                | http::StatusCode::SERVICE_UNAVAILABLE
                | http::StatusCode::GATEWAY_TIMEOUT
        );
        if !retryable || self.attempt >= Self::MAX_RETRIES {
            return None;
        }
        self.attempt += 1;
        let backoff = match &mut self.backoff {
            Some(b) => b
                .next_backoff()
                .deadline()
                .saturating_duration_since(tokio::time::Instant::now()),
            None => self.cap,
        };
        let wait = self.wait(response.headers().get(http::header::RETRY_AFTER), backoff);
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(
        &mut self,
        req: &http::Request<kube::client::Body>,
    ) -> Option<http::Request<kube::client::Body>> {
        let body = req.body().try_clone()?;
        let mut builder = http::Request::builder()
            .method(req.method().clone())
            .uri(req.uri().clone())
            .version(req.version());
        if let Some(headers) = builder.headers_mut() {
            headers.extend(req.headers().clone());
        }
        builder.body(body).ok().map(|mut new| {
            *new.extensions_mut() = req.extensions().clone();
            new
        })
    }
}

/// Resolves the client configuration.
pub async fn load_config(opts: &ClientOptions) -> Result<kube::Config, ClientError> {
    let kco = KubeConfigOptions {
        context: opts.context.clone(),
        ..Default::default()
    };
    match &opts.kubeconfig {
        Some(path) => {
            // Checked first: kube reads it whole, and its error quotes the
            // path twice.
            token_file::check_file(path, MAX_KUBECONFIG_BYTES, "kubeconfig")?;
            let kc = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            check_referenced_files(&kc)?;
            kube::Config::from_custom_kubeconfig(kc, &kco)
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })
        }
        None => {
            let inferred = inferred_kubeconfigs();
            for p in &inferred {
                if p.exists() {
                    token_file::check_file(p, MAX_KUBECONFIG_BYTES, "kubeconfig")?;
                } else {
                    return Err(ClientError::KubeconfigEnvMissing {
                        path: p.display().to_string(),
                    });
                }
            }
            if !inferred.is_empty()
                && let Ok(kc) = Kubeconfig::read()
            {
                check_referenced_files(&kc)?;
            }
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

/// When the server answered, but not as a Kubernetes API server does (an
/// HTML page, a reply that is not JSON): what to tell the user instead of
/// "unreachable" (a wrong URL in the kubeconfig, a proxy's login page).
pub fn not_the_kubernetes_api(e: &kube::Error) -> Option<String> {
    const HINT: &str = "is the kubeconfig's server URL that of a Kubernetes API server?";
    match e {
        kube::Error::SerdeError(e) => Some(format!(
            "the server answered, but not as the Kubernetes API does (its reply is not JSON: {e}); {HINT}"
        )),
        kube::Error::Api(s)
            if s.message.trim_start().starts_with('<')
                || s.reason == "Failed to parse error data" =>
        {
            let snippet: String = s
                .message
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(80)
                .collect();
            Some(format!(
                "the server answered HTTP {} with a page that is not the Kubernetes API's ({snippet}...); {HINT}",
                s.code
            ))
        }
        _ => None,
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
    let retry = retry_cap(opts.request_timeout);
    let http2 = opts.http2.then_some(Http2 {
        connections: opts.http2_connections.max(1),
        ..Http2::CLIENT_GO
    });
    let builder = client_builder(config, retry, http2).map_err(|source| ClientError::Build {
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
/// kube's own stack is used (it implements the proxy kinds) without its
/// retry, whose waits have no cap. The retry is [`CappedRetry`].
fn client_builder(
    mut config: kube::Config,
    retry_cap: Duration,
    http2: Option<Http2>,
) -> Result<ClientBuilder<GenericService>, kube::Error> {
    use http_body_util::BodyExt;
    use hyper_util::client::legacy::connect::HttpConnector;
    use kube::client::{ConfigExt, DynBody};
    use tower::{BoxError, ServiceBuilder, ServiceExt};

    if config.proxy_url.is_some() {
        config.default_retry = false;
        return ClientBuilder::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // HTTP/2 frames a request in several writes; without TCP_NODELAY each
    // waits on the peer's delayed ACK (as Go's net package, client-go's
    // transport sets it).
    http.set_nodelay(true);
    // TCP keep-alive as client-go's dialer sets it (30 s idle, 30 s between
    // probes): over HTTP/1.1 (`DISABLE_HTTP2`) a watch whose connection the
    // network lost silently is noticed only this way; over HTTP/2 the
    // pings notice it sooner.
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_keepalive_interval(Some(TCP_KEEPALIVE));
    let https = https_connector(&config, http, http2.is_some())?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let mut hyper = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new());
    hyper.http1_max_buf_size(READ_BUFFER_MAX);
    if let Some(h2) = http2 {
        hyper
            .timer(hyper_util::rt::TokioTimer::new())
            .http2_keep_alive_interval(h2.ping_interval)
            .http2_keep_alive_timeout(h2.ping_timeout)
            .http2_keep_alive_while_idle(true);
    }
    // One pool per connection wanted: a pool keeps one HTTP/2 connection.
    // An `http://` server gets HTTP/1.1, whose pool grows by itself.
    let tls = config.cluster_url.scheme_str() == Some("https");
    let n = http2.filter(|_| tls).map_or(1, |h2| h2.connections.max(1));
    let hyper = Spread::new((0..n).map(|_| hyper.build(connector.clone())).collect());
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(CappedRetry::new(retry_cap))),
        )
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

/// How the client keeps an HTTP/2 connection honest: it pings every
/// `ping_interval` and drops the connection when a ping goes unanswered for
/// `ping_timeout`, failing the calls on it (the controllers retry, kube's
/// watcher re-watches, each on a new connection). Many calls and watches
/// share each connection, so a connection the network silently lost must be
/// noticed by the client itself: the request timeout alone would fail every
/// call on it, forever, and a watch on it would just go quiet.
#[derive(Clone, Copy, Debug)]
struct Http2 {
    ping_interval: Duration,
    ping_timeout: Duration,
    /// HTTP/2 connections the calls are spread over, round robin.
    connections: usize,
}

impl Http2 {
    /// client-go's `ReadIdleTimeout` (30 s) and `PingTimeout` (15 s).
    const CLIENT_GO: Http2 = Http2 {
        ping_interval: Duration::from_secs(30),
        ping_timeout: Duration::from_secs(15),
        connections: HTTP2_CONNECTIONS,
    };
}

/// TCP keep-alive idle time and probe interval (Go's `net.Dialer`
/// `KeepAlive`, which client-go sets to 30 s).
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// HTTP/2 connections per client by default. kube-apiserver serves each connection's
/// frames from one goroutine, which a busy server schedules late: every
/// call on one connection waits its turn there.
pub const HTTP2_CONNECTIONS: usize = 4;

/// Calls go to `inner[i]` in turn.
#[derive(Clone)]
struct Spread<S> {
    inner: Arc<[S]>,
    next: Arc<std::sync::atomic::AtomicUsize>,
}

impl<S> Spread<S> {
    fn new(inner: Vec<S>) -> Self {
        Spread {
            inner: inner.into(),
            next: Arc::default(),
        }
    }
}

impl<S, R> Service<R> for Spread<S>
where
    S: Service<R> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    /// hyper's client is always ready (it queues for a connection).
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> Self::Future {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.inner.len();
        self.inner[i].clone().call(req)
    }
}

/// `DISABLE_HTTP2`, as client-go reads it: set to anything, the client
/// speaks HTTP/1.1 only (one connection per call in flight), for a proxy or
/// load balancer in front of the API server that mishandles HTTP/2.
pub const DISABLE_HTTP2_ENV: &str = "DISABLE_HTTP2";

pub fn http2_from_env() -> bool {
    http2_unless(std::env::var_os(DISABLE_HTTP2_ENV))
}

/// HTTP/2 unless `disable` (the value of `DISABLE_HTTP2`) is set and not
/// empty.
fn http2_unless(disable: Option<std::ffi::OsString>) -> bool {
    disable.is_none_or(|v| v.is_empty())
}

/// kube's rustls connector (its TLS config: CA, client identity, exec
/// plugin certificates; `tls-server-name`, which kube's own connector
/// handles the same way), offering HTTP/2 by ALPN when `http2`. The server
/// picks: kube-apiserver takes HTTP/2, as with client-go, so every call and
/// watch is a stream on one of a few connections instead of a connection
/// each. That is what holds memory flat when many writes
/// are in flight: an HTTP/1.1 connection costs ~40 KiB of buffers and task
/// state here, and 64 writes in flight held ~70 of them (issue 23). Plain
/// `http://` servers are spoken to in HTTP/1.1.
fn https_connector<H>(
    config: &kube::Config,
    http: H,
    http2: bool,
) -> Result<hyper_rustls::HttpsConnector<H>, kube::Error> {
    use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
    use kube::client::ConfigExt;

    let mut builder = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls_pki_types::ServerName::try_from(name.clone()).map_err(|e| {
            kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
        })?;
        builder = builder.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let builder = builder.enable_http1();
    Ok(if http2 {
        builder.enable_http2().wrap_connector(http)
    } else {
        builder.wrap_connector(http)
    })
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
mod retry_tests {
    use super::*;

    /// Issue 27, bug 6: a `Retry-After` of days is waited at most the cap.
    #[test]
    fn a_server_given_wait_is_capped() {
        let r = CappedRetry::new(retry_cap(None));
        let days = http::HeaderValue::from_static("1000000");
        assert_eq!(r.wait(Some(&days), Duration::ZERO), MAX_SERVER_WAIT);
        let r = CappedRetry::new(retry_cap(Some(Duration::from_secs(5))));
        assert_eq!(r.wait(Some(&days), Duration::ZERO), Duration::from_secs(5));
        let two = http::HeaderValue::from_static("2");
        assert_eq!(r.wait(Some(&two), Duration::ZERO), Duration::from_secs(2));
        assert_eq!(
            r.wait(None, Duration::from_millis(40)),
            Duration::from_millis(40)
        );
        assert_eq!(retry_cap(Some(Duration::ZERO)), MAX_SERVER_WAIT);
        assert_eq!(retry_cap(Some(Duration::from_secs(600))), MAX_SERVER_WAIT);
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

#[cfg(test)]
#[path = "client_http2_tests.rs"]
mod http2_tests;

//! The `http` provider: a client of the JSON/HTTP load-balancer contract
//! (`docs/lb-provider-http-contract.md`).
//!
//! It does not retry: each trait call is one HTTP request, and failures are
//! mapped to [`ProviderError`] for the controller to requeue.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use protection_core::redact::{REDACTED, redact_loosely, redact_url_credentials};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::{Deserialize, Serialize};
use token_file::TokenFile;

use super::{LbIngress, LbNode, LbRef, LbSpec, LbStatus, LoadBalancerProvider, ProviderError};

/// Default time to establish a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time for a whole request, reply body included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Delay used for a 202 reply to DELETE that carries no `Retry-After`.
pub const DEFAULT_DELETE_POLL: Duration = Duration::from_secs(5);
/// `Retry-After` values are clamped to 1 s ..= 1 h.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Largest reply body read for one load balancer.
const MAX_REPLY: usize = 1024 * 1024;
/// Largest reply body read for the inventory.
const MAX_INVENTORY_REPLY: usize = 256 * 1024 * 1024;
/// How much of a bad reply an error message quotes.
const QUOTE_LIMIT: usize = 200;

/// The `User-Agent` of every request.
pub const USER_AGENT: &str = concat!("protection-manager/", env!("CARGO_PKG_VERSION"));

/// How to reach a load-balancer API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpProviderConfig {
    /// Base URL, e.g. `https://lb.example.com/` or
    /// `https://api.example.com/lb/` (paths are appended to it).
    pub endpoint: String,
    /// File holding the bearer token (e.g. a mounted Secret key); re-read
    /// when it changes. `None` sends no `Authorization` header.
    pub token_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

impl HttpProviderConfig {
    /// An endpoint with default timeouts and no token.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            token_file: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    pub fn with_token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.token_file = Some(path.into());
        self
    }

    pub fn with_timeouts(mut self, connect: Duration, request: Duration) -> Self {
        self.connect_timeout = connect;
        self.request_timeout = request;
        self
    }
}

/// The bearer token as the `Authorization` header, re-read whenever the
/// file changes (a Secret volume swaps a symlink, which changes the inode).
struct TokenHeader(TokenFile<HeaderValue>);

impl TokenHeader {
    fn header(&self) -> Result<HeaderValue, ProviderError> {
        let cfg = |what: String| ProviderError::Config {
            message: format!("bearer token file {}: {what}", self.0.path().display()),
        };
        self.0
            .get(|token| {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))?;
                value.set_sensitive(true);
                Ok::<_, reqwest::header::InvalidHeaderValue>(value)
            })
            .map_err(|e| match e {
                token_file::Error::Read { source, .. } => cfg(format!("cannot read it: {source}")),
                token_file::Error::Empty { .. } => cfg("it is empty".to_owned()),
                // Not a regular file, or larger than a token: the error
                // names the file and why.
                token_file::Error::File(f) => ProviderError::Config {
                    message: f.to_string(),
                },
                token_file::Error::Convert(_) => {
                    cfg("the token has characters that cannot go in an HTTP header".to_owned())
                }
            })
    }
}

/// A client of the HTTP load-balancer contract.
///
/// Credentials in the endpoint URL (`https://user:password@host/`) are sent
/// (as HTTP basic authentication, by reqwest) but never shown: every URL in
/// an error, a log line or `Debug` output is redacted
/// ([`redact_url_credentials`]), and so is every error text reqwest builds.
pub struct HttpProvider {
    base: Url,
    client: reqwest::Client,
    token: Option<TokenHeader>,
    request_timeout: Duration,
}

impl std::fmt::Debug for HttpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProvider")
            .field("endpoint", &self.endpoint())
            .field("token_file", &self.token.as_ref().map(|t| t.0.path()))
            .finish()
    }
}

/// One load balancer of the inventory (`GET /v1/loadbalancers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbRecord {
    pub uid: String,
    pub name: String,
    pub service_namespace: String,
    pub service_name: String,
    pub status: LbStatus,
    /// As the provider wrote it (RFC 3339 in the contract).
    pub created_at: Option<String>,
}

// ---- wire types -----------------------------------------------------------

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireService<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnsureBody<'a> {
    name: &'a str,
    service: WireService<'a>,
    spec: &'a LbSpec,
    nodes: &'a [LbNode],
}

#[derive(Serialize)]
struct HostsBody<'a> {
    nodes: &'a [LbNode],
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplyIngress {
    ip: Option<String>,
    hostname: Option<String>,
    ip_mode: Option<String>,
}

#[derive(Deserialize)]
struct ReplyStatus {
    ingress: Vec<ReplyIngress>,
}

#[derive(Deserialize)]
struct ReplyService {
    namespace: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplyLb {
    uid: String,
    #[serde(default)]
    name: String,
    service: Option<ReplyService>,
    status: ReplyStatus,
    created_at: Option<String>,
}

#[derive(Deserialize)]
struct ReplyInventory {
    items: Vec<ReplyLb>,
}

#[derive(Deserialize)]
struct ReplyErrorDetail {
    code: Option<String>,
    message: Option<String>,
}

#[derive(Deserialize)]
struct ReplyError {
    error: ReplyErrorDetail,
}

// ---- helpers --------------------------------------------------------------

/// The start of a body, escaped, for error messages (URL credentials
/// redacted, should the server echo one).
fn quote(body: &[u8]) -> String {
    // Only the start is shown; redact a generous prefix of it, so that a URL
    // straddling the cut is still seen whole.
    let head = &body[..body.len().min(QUOTE_LIMIT * 64)];
    let redacted = redact_url_credentials(&String::from_utf8_lossy(head));
    let mut cut: String = redacted.chars().take(QUOTE_LIMIT).collect();
    if redacted.chars().count() > QUOTE_LIMIT || head.len() < body.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// The whole chain of an error, `a: b: c`, URL credentials redacted
/// (reqwest's errors quote the request URL).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    redact_url_credentials(&protection_core::errors::display_chain(e))
}

/// Parses `Retry-After`: delay-seconds or an HTTP date (IMF-fixdate, and the
/// obsolete RFC 850 and asctime forms), relative to `now`. The result is
/// clamped to 1 s ..= [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    let v = value.trim();
    let raw = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Very long digit strings saturate at the maximum.
        Duration::from_secs(
            v.parse::<u64>()
                .unwrap_or(u64::MAX)
                .min(MAX_RETRY_AFTER.as_secs()),
        )
    } else {
        let at = parse_http_date(v)?;
        let secs = at.duration_since(now).as_secs_f64().max(0.0);
        Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64()))
    };
    Some(raw.clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER))
}

/// An HTTP date in any of RFC 9110's three forms (IMF-fixdate, RFC 850,
/// asctime), by the `httpdate` crate (hyper's).
fn parse_http_date(v: &str) -> Option<jiff::Timestamp> {
    let at = httpdate::parse_http_date(v).ok()?;
    jiff::Timestamp::try_from(at).ok()
}

/// A URL as it may be shown: the password (or a user-only userinfo, often a
/// token) replaced by `***`, by the URL's own parts rather than its text.
fn shown(url: &Url) -> String {
    let mut u = url.clone();
    // Both setters only fail for URLs that cannot have credentials.
    if u.password().is_some() {
        let _ = u.set_password(Some(REDACTED));
    } else if !u.username().is_empty() {
        let _ = u.set_username(REDACTED);
    }
    u.to_string()
}

fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.parse::<IpAddr>().is_err()
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn status_from_reply(s: ReplyStatus) -> Result<LbStatus, String> {
    let mut ingress = Vec::with_capacity(s.ingress.len());
    for (i, ing) in s.ingress.into_iter().enumerate() {
        let ip = match ing.ip.as_deref() {
            None | Some("") => None,
            Some(text) => Some(
                text.parse::<IpAddr>()
                    .map_err(|_| format!("status.ingress[{i}].ip {text:?} is not an IP address"))?,
            ),
        };
        let hostname = match ing.hostname {
            None => None,
            Some(h) if h.is_empty() => None,
            Some(h) if valid_hostname(&h) => Some(h),
            Some(h) => {
                return Err(format!(
                    "status.ingress[{i}].hostname {h:?} is not a DNS name (lowercase, not an IP)"
                ));
            }
        };
        if ip.is_none() && hostname.is_none() {
            return Err(format!("status.ingress[{i}] has neither ip nor hostname"));
        }
        if let Some(mode) = &ing.ip_mode {
            if mode != "VIP" && mode != "Proxy" {
                return Err(format!(
                    "status.ingress[{i}].ipMode {mode:?} is neither \"VIP\" nor \"Proxy\""
                ));
            }
            if ip.is_none() {
                return Err(format!("status.ingress[{i}].ipMode is set without an ip"));
            }
        }
        ingress.push(LbIngress {
            ip,
            hostname,
            ip_mode: ing.ip_mode,
        });
    }
    Ok(LbStatus { ingress })
}

/// A reply: status, headers, body.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn error_detail(&self) -> Option<ReplyErrorDetail> {
        serde_json::from_slice::<ReplyError>(&self.body)
            .ok()
            .map(|e| e.error)
    }

    fn has_code(&self, code: &str) -> bool {
        self.error_detail()
            .and_then(|d| d.code)
            .is_some_and(|c| c == code)
    }

    /// The server's message, or a quote of the body.
    fn message(&self) -> String {
        match self.error_detail() {
            Some(ReplyErrorDetail {
                code,
                message: Some(m),
            }) => match code {
                Some(c) => format!("{m} [{c}]"),
                None => m,
            },
            _ if self.body.is_empty() => "empty body".to_owned(),
            _ => format!("body {}", quote(&self.body)),
        }
    }

    fn retry_after(&self) -> Result<Option<Duration>, String> {
        let Some(v) = self.headers.get(reqwest::header::RETRY_AFTER) else {
            return Ok(None);
        };
        let text = v.to_str().map_err(|_| format!("{v:?}"))?;
        parse_retry_after(text, jiff::Timestamp::now())
            .map(Some)
            .ok_or_else(|| format!("{text:?}"))
    }
}

impl HttpProvider {
    /// Checks the endpoint URL and, when configured, that the token file can
    /// be read and is not empty.
    pub fn new(config: HttpProviderConfig) -> Result<Self, ProviderError> {
        let cfg = |message: String| ProviderError::Config { message };
        // A URL that does not parse may still hold a password: redact all
        // that could be userinfo.
        let shown = redact_loosely(&config.endpoint);
        let mut base = Url::parse(config.endpoint.trim()).map_err(|e| {
            cfg(format!(
                "load-balancer endpoint {shown:?} is not a URL: {e}"
            ))
        })?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(cfg(format!(
                "load-balancer endpoint {shown:?} must be an http:// or https:// URL"
            )));
        }
        base.set_query(None);
        base.set_fragment(None);
        let token = config
            .token_file
            .map(|path| TokenHeader(TokenFile::new(path)));
        if let Some(t) = &token {
            t.header()?;
        }
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .user_agent(USER_AGENT)
            // Never send the token to wherever a redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| cfg(format!("cannot build the HTTP client: {}", chain(&e))))?;
        Ok(Self {
            base,
            client,
            token,
            request_timeout: config.request_timeout,
        })
    }

    /// The endpoint URL as it may be shown (credentials redacted).
    pub fn endpoint(&self) -> String {
        shown(&self.base)
    }

    /// Whether the endpoint URL carries credentials (userinfo).
    pub fn endpoint_has_credentials(&self) -> bool {
        !self.base.username().is_empty() || self.base.password().is_some()
    }

    /// Whether the endpoint is plain `http://`.
    pub fn endpoint_is_plain_http(&self) -> bool {
        self.base.scheme() == "http"
    }

    /// `METHOD url` for messages, credentials redacted.
    fn what(method: &Method, url: &Url) -> String {
        format!("{method} {}", shown(url))
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        // `new` rejected URLs that cannot be a base, so this always succeeds.
        if let Ok(mut p) = url.path_segments_mut() {
            p.pop_if_empty().extend(segments);
        }
        url
    }

    fn lb_url(&self, uid: &str) -> Url {
        self.url(&["v1", "loadbalancers", uid])
    }

    async fn call(
        &self,
        method: Method,
        url: &Url,
        body: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<Reply, ProviderError> {
        let what = Self::what(&method, url);
        let mut req = self
            .client
            .request(method, url.clone())
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(t) = &self.token {
            req = req.header(reqwest::header::AUTHORIZATION, t.header()?);
        }
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b);
        }
        let send_err = |e: reqwest::Error| {
            if e.is_timeout() {
                ProviderError::Timeout {
                    message: format!(
                        "{what}: no reply within {:?} (the call may or may not have taken effect)",
                        self.request_timeout
                    ),
                }
            } else if e.is_connect() {
                ProviderError::Transient {
                    status: None,
                    message: format!("{what}: cannot connect: {}", chain(&e)),
                }
            } else {
                ProviderError::Transient {
                    status: None,
                    message: format!("{what}: {}", chain(&e)),
                }
            }
        };
        let mut resp = req.send().await.map_err(send_err)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(send_err)? {
            if body.len() + chunk.len() > limit {
                return Err(ProviderError::InvalidReply {
                    message: format!("{what}: {status}: the reply is larger than {limit} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        tracing::debug!(call = %what, status = status.as_u16(), bytes = body.len(), "load-balancer API replied");
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// Maps a reply that is not a success of its operation.
    fn failure(&self, what: &str, r: &Reply) -> ProviderError {
        let status = r.status.as_u16();
        let head = format!("{what}: {}", r.status);
        if r.has_code("ImplementedElsewhere") {
            return ProviderError::ImplementedElsewhere;
        }
        let retry_after = r.retry_after();
        match status {
            401 | 403 => {
                let hint = match &self.token {
                    Some(t) => format!("check the bearer token in {}", t.0.path().display()),
                    None => "no bearer token file is configured".to_owned(),
                };
                ProviderError::Unauthorized {
                    status,
                    message: format!("{head}: {}; {hint}", r.message()),
                }
            }
            404 if r.has_code("NotFound") => ProviderError::NotFound {
                message: format!("{head}: {}", r.message()),
            },
            404 => ProviderError::InvalidReply {
                message: format!(
                    "{head} without the contract's NotFound error code ({}); is the endpoint URL right?",
                    r.message()
                ),
            },
            409 => ProviderError::Conflict {
                message: format!("{head}: {}", r.message()),
            },
            429 | 503 => match retry_after {
                Ok(Some(after)) => ProviderError::RetryAfter {
                    after,
                    message: format!("{head}: {}", r.message()),
                },
                Ok(None) => ProviderError::Transient {
                    status: Some(status),
                    message: format!("{head}: {}", r.message()),
                },
                Err(bad) => ProviderError::Transient {
                    status: Some(status),
                    message: format!(
                        "{head}: {}; ignoring an unparsable Retry-After {bad}",
                        r.message()
                    ),
                },
            },
            500..=599 => ProviderError::Transient {
                status: Some(status),
                message: format!("{head}: {}", r.message()),
            },
            400..=499 => ProviderError::InvalidRequest {
                status,
                message: format!("{head}: {}", r.message()),
            },
            _ => ProviderError::InvalidReply {
                message: format!(
                    "{head} is not a status this call can answer ({})",
                    r.message()
                ),
            },
        }
    }

    fn parse_lb(&self, what: &str, r: &Reply, uid: &str) -> Result<ReplyLb, ProviderError> {
        let invalid = |why: String| ProviderError::InvalidReply {
            message: format!(
                "{what}: {}: invalid reply: {why}; body {}",
                r.status,
                quote(&r.body)
            ),
        };
        let lb: ReplyLb = serde_json::from_slice(&r.body)
            .map_err(|e| invalid(format!("not a load balancer: {e}")))?;
        if lb.uid != uid {
            return Err(invalid(format!(
                "it describes load balancer {:?}, not {uid:?}",
                lb.uid
            )));
        }
        Ok(lb)
    }

    fn status_of(&self, what: &str, r: &Reply, lb: ReplyLb) -> Result<LbStatus, ProviderError> {
        status_from_reply(lb.status).map_err(|why| ProviderError::InvalidReply {
            message: format!(
                "{what}: {}: invalid reply: {why}; body {}",
                r.status,
                quote(&r.body)
            ),
        })
    }

    /// Every load balancer the API holds (`GET /v1/loadbalancers`).
    pub async fn inventory(&self) -> Result<Vec<LbRecord>, ProviderError> {
        let url = self.url(&["v1", "loadbalancers"]);
        let what = Self::what(&Method::GET, &url);
        let r = self
            .call(Method::GET, &url, None, MAX_INVENTORY_REPLY)
            .await?;
        self.decode_inventory(&what, &r)
    }

    /// The inventory in a reply.
    fn decode_inventory(&self, what: &str, r: &Reply) -> Result<Vec<LbRecord>, ProviderError> {
        if r.status != StatusCode::OK {
            return Err(self.failure(what, r));
        }
        let inv: ReplyInventory =
            serde_json::from_slice(&r.body).map_err(|e| ProviderError::InvalidReply {
                message: format!(
                    "{what}: invalid reply: not an inventory: {e}; body {}",
                    quote(&r.body)
                ),
            })?;
        inv.items
            .into_iter()
            .map(|lb| {
                let (service_namespace, service_name) = lb
                    .service
                    .map(|s| (s.namespace, s.name))
                    .unwrap_or_default();
                let uid = lb.uid;
                let status =
                    status_from_reply(lb.status).map_err(|why| ProviderError::InvalidReply {
                        message: format!("{what}: invalid reply: item {uid:?}: {why}"),
                    })?;
                Ok(LbRecord {
                    uid,
                    name: lb.name,
                    service_namespace,
                    service_name,
                    status,
                    created_at: lb.created_at,
                })
            })
            .collect()
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(value).map_err(|e| ProviderError::Config {
        message: format!("cannot encode the request: {e}"),
    })
}

#[async_trait]
impl LoadBalancerProvider for HttpProvider {
    fn name(&self) -> &str {
        "http"
    }

    async fn get(&self, lb: &LbRef) -> Result<Option<LbStatus>, ProviderError> {
        let url = self.lb_url(&lb.uid);
        let what = Self::what(&Method::GET, &url);
        let r = self.call(Method::GET, &url, None, MAX_REPLY).await?;
        self.decode_get(&what, &r, &lb.uid)
    }

    async fn ensure(
        &self,
        lb: &LbRef,
        spec: &LbSpec,
        nodes: &[LbNode],
    ) -> Result<LbStatus, ProviderError> {
        let url = self.lb_url(&lb.uid);
        let what = Self::what(&Method::PUT, &url);
        let body = encode(&EnsureBody {
            name: &lb.lb_name,
            service: WireService {
                namespace: &lb.namespace,
                name: &lb.name,
                uid: &lb.uid,
            },
            spec,
            nodes,
        })?;
        let r = self.call(Method::PUT, &url, Some(body), MAX_REPLY).await?;
        self.decode_ensure(&what, &r, &lb.uid)
    }

    async fn update_hosts(
        &self,
        lb: &LbRef,
        _spec: &LbSpec,
        nodes: &[LbNode],
    ) -> Result<(), ProviderError> {
        let url = self.url(&["v1", "loadbalancers", &lb.uid, "hosts"]);
        let what = Self::what(&Method::PUT, &url);
        let body = encode(&HostsBody { nodes })?;
        let r = self.call(Method::PUT, &url, Some(body), MAX_REPLY).await?;
        self.decode_update_hosts(&what, &r)
    }

    async fn ensure_deleted(&self, lb: &LbRef) -> Result<(), ProviderError> {
        let url = self.lb_url(&lb.uid);
        let what = Self::what(&Method::DELETE, &url);
        let r = self.call(Method::DELETE, &url, None, MAX_REPLY).await?;
        self.decode_delete(&what, &r)
    }
}

/// What each call makes of its reply (pure, so that any reply can be
/// tested without a server).
impl HttpProvider {
    fn decode_get(
        &self,
        what: &str,
        r: &Reply,
        uid: &str,
    ) -> Result<Option<LbStatus>, ProviderError> {
        match r.status {
            StatusCode::OK => {
                let reply = self.parse_lb(what, r, uid)?;
                self.status_of(what, r, reply).map(Some)
            }
            StatusCode::NOT_FOUND if r.has_code("NotFound") => Ok(None),
            _ => Err(self.failure(what, r)),
        }
    }

    fn decode_ensure(&self, what: &str, r: &Reply, uid: &str) -> Result<LbStatus, ProviderError> {
        match r.status {
            StatusCode::OK | StatusCode::CREATED => {
                let reply = self.parse_lb(what, r, uid)?;
                self.status_of(what, r, reply)
            }
            s if s.is_success() => Err(ProviderError::InvalidReply {
                message: format!(
                    "{what}: {s}: PUT must answer 200 or 201 with the load balancer ({})",
                    r.message()
                ),
            }),
            _ => Err(self.failure(what, r)),
        }
    }

    fn decode_update_hosts(&self, what: &str, r: &Reply) -> Result<(), ProviderError> {
        match r.status {
            StatusCode::OK | StatusCode::NO_CONTENT => Ok(()),
            s if s.is_success() => Err(ProviderError::InvalidReply {
                message: format!(
                    "{what}: {s}: hosts must answer 200 or 204 ({})",
                    r.message()
                ),
            }),
            _ => Err(self.failure(what, r)),
        }
    }

    fn decode_delete(&self, what: &str, r: &Reply) -> Result<(), ProviderError> {
        match r.status {
            StatusCode::OK | StatusCode::NO_CONTENT => Ok(()),
            StatusCode::NOT_FOUND if r.has_code("NotFound") => Ok(()),
            StatusCode::ACCEPTED => {
                let after = r
                    .retry_after()
                    .ok()
                    .flatten()
                    .unwrap_or(DEFAULT_DELETE_POLL);
                Err(ProviderError::RetryAfter {
                    after,
                    message: format!("{what}: 202 Accepted: deletion in progress"),
                })
            }
            s if s.is_success() => Err(ProviderError::InvalidReply {
                message: format!(
                    "{what}: {s}: DELETE must answer 200, 202 or 204 ({})",
                    r.message()
                ),
            }),
            _ => Err(self.failure(what, r)),
        }
    }
}

/// Where the provider reads its token, for messages.
impl HttpProvider {
    pub fn token_file(&self) -> Option<&Path> {
        self.token.as_ref().map(|t| t.0.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(parse_retry_after("7", now()), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 120 ", now()),
            Some(Duration::from_secs(120))
        );
        // Clamped: 0 would spin, huge values would stall for ever.
        assert_eq!(parse_retry_after("0", now()), Some(MIN_RETRY_AFTER));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now()),
            Some(MAX_RETRY_AFTER)
        );
    }

    #[test]
    fn retry_after_http_dates_in_all_three_forms() {
        for v in [
            "Fri, 01 May 2026 12:01:30 GMT",
            "Friday, 01-May-26 12:01:30 GMT",
            "Fri May  1 12:01:30 2026",
        ] {
            assert_eq!(
                parse_retry_after(v, now()),
                Some(Duration::from_secs(90)),
                "{v}"
            );
        }
        // A date in the past means "now", clamped to the minimum.
        assert_eq!(
            parse_retry_after("Fri, 01 May 2026 11:00:00 GMT", now()),
            Some(MIN_RETRY_AFTER)
        );
    }

    #[test]
    fn retry_after_garbage_is_none() {
        for v in ["", "soon", "-5", "1.5", "Fri, 99 May 2026 12:01:30 GMT"] {
            assert_eq!(parse_retry_after(v, now()), None, "{v:?}");
        }
    }

    #[test]
    fn ingress_validation() {
        let st = |ip: Option<&str>, hostname: Option<&str>, mode: Option<&str>| ReplyStatus {
            ingress: vec![ReplyIngress {
                ip: ip.map(str::to_owned),
                hostname: hostname.map(str::to_owned),
                ip_mode: mode.map(str::to_owned),
            }],
        };
        assert!(status_from_reply(st(Some("192.0.2.1"), None, Some("VIP"))).is_ok());
        assert!(status_from_reply(st(Some("2001:db8::1"), None, None)).is_ok());
        assert!(status_from_reply(st(None, Some("lb-1.example.com"), None)).is_ok());
        for (s, needle) in [
            (
                st(Some("192.0.2.300"), None, None),
                "status.ingress[0].ip \"192.0.2.300\" is not an IP address",
            ),
            (st(None, Some("Bad_Host"), None), "hostname \"Bad_Host\""),
            (st(None, Some("192.0.2.1"), None), "hostname \"192.0.2.1\""),
            (st(None, None, None), "neither ip nor hostname"),
            (
                st(Some("192.0.2.1"), None, Some("Direct")),
                "ipMode \"Direct\"",
            ),
            (
                st(None, Some("a.example"), Some("VIP")),
                "ipMode is set without an ip",
            ),
        ] {
            let e = status_from_reply(s).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn endpoint_must_be_an_http_url() {
        for bad in ["not a url", "ftp://lb.example.com/", "mailto:x@example.com"] {
            let e = HttpProvider::new(HttpProviderConfig::new(bad)).unwrap_err();
            assert!(matches!(e, ProviderError::Config { .. }), "{e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn paths_are_appended_and_uids_encoded() {
        let p =
            HttpProvider::new(HttpProviderConfig::new("https://api.example.com/lb?x=1")).unwrap();
        assert_eq!(
            p.lb_url("abc-1").as_str(),
            "https://api.example.com/lb/v1/loadbalancers/abc-1"
        );
        let p = HttpProvider::new(HttpProviderConfig::new("http://127.0.0.1:9/")).unwrap();
        assert_eq!(
            p.lb_url("a/b c").as_str(),
            "http://127.0.0.1:9/v1/loadbalancers/a%2Fb%20c"
        );
        assert_eq!(
            p.url(&["v1", "loadbalancers", "u", "hosts"]).as_str(),
            "http://127.0.0.1:9/v1/loadbalancers/u/hosts"
        );
    }

    #[test]
    fn user_agent_carries_the_version() {
        assert_eq!(
            USER_AGENT,
            format!("protection-manager/{}", env!("CARGO_PKG_VERSION"))
        );
    }
}

/// Property tests: whatever a load-balancer API answers (any status, any
/// bytes, any JSON, any `Retry-After`), decoding never panics, and an error
/// names the call it answers.
#[cfg(test)]
mod reply_properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const UID: &str = "7c1e9a5e-uid";

    fn provider() -> HttpProvider {
        HttpProvider::new(HttpProviderConfig::new("https://u:s3cret@lb.example/api/"))
            .expect("provider")
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
                .map(Value::Number)),
            ".{0,24}".prop_map(Value::from),
            Just(Value::from(UID)),
            Just(Value::from("192.0.2.7")),
            Just(Value::from("VIP")),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            let key = prop_oneof![
                Just("uid".to_owned()),
                Just("name".to_owned()),
                Just("status".to_owned()),
                Just("ingress".to_owned()),
                Just("ip".to_owned()),
                Just("hostname".to_owned()),
                Just("ipMode".to_owned()),
                Just("items".to_owned()),
                Just("service".to_owned()),
                Just("error".to_owned()),
                Just("code".to_owned()),
                Just("message".to_owned()),
                "[a-zA-Z]{1,8}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key, inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// A load balancer that is nearly right: the contract's shape with
    /// arbitrary values in it.
    fn near_valid_lb() -> impl Strategy<Value = Value> {
        let text = prop_oneof![
            Just(Value::Null),
            Just(Value::from("")),
            Just(Value::from("192.0.2.1")),
            Just(Value::from("2001:db8::1")),
            Just(Value::from("lb-1.example.com")),
            Just(Value::from("VIP")),
            Just(Value::from("Proxy")),
            ".{0,16}".prop_map(Value::from),
        ];
        let ingress = (text.clone(), text.clone(), text).prop_map(
            |(ip, hostname, mode)| json!({"ip": ip, "hostname": hostname, "ipMode": mode}),
        );
        (
            prop_oneof![Just(UID.to_owned()), ".{0,12}"],
            prop::collection::vec(ingress, 0..4),
        )
            .prop_map(|(uid, ingress)| json!({"uid": uid, "status": {"ingress": ingress}}))
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            json_value().prop_map(|v| v.to_string().into_bytes()),
            near_valid_lb().prop_map(|v| v.to_string().into_bytes()),
            near_valid_lb().prop_map(|v| json!({"items": [v]}).to_string().into_bytes()),
            (".{0,12}", ".{0,40}").prop_map(|(code, message)| {
                json!({"error": {"code": code, "message": message}})
                    .to_string()
                    .into_bytes()
            }),
            Just(br#"{"error":{"code":"NotFound","message":"gone"}}"#.to_vec()),
            Just(br#"{"error":{"code":"ImplementedElsewhere"}}"#.to_vec()),
        ]
    }

    fn retry_after() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            "[0-9]{1,30}".prop_map(Some),
            "[ -~]{0,40}".prop_map(Some),
            Just(Some("Fri, 01 May 2026 12:01:30 GMT".to_owned())),
            Just(Some("Friday, 01-May-26 12:01:30 GMT".to_owned())),
        ]
    }

    fn reply(status: u16, body: Vec<u8>, retry_after: Option<String>) -> Option<Reply> {
        let status = StatusCode::from_u16(status).ok()?;
        let mut headers = HeaderMap::new();
        if let Some(v) = retry_after {
            headers.insert(
                reqwest::header::RETRY_AFTER,
                HeaderValue::from_str(&v).ok()?,
            );
        }
        Some(Reply {
            status,
            headers,
            body,
        })
    }

    fn names_the_call<T: std::fmt::Debug>(
        r: &Result<T, ProviderError>,
        what: &str,
    ) -> Result<(), TestCaseError> {
        if let Err(e) = r
            && *e != ProviderError::ImplementedElsewhere
        {
            let text = e.to_string();
            prop_assert!(text.contains(what), "{text}");
            prop_assert!(!text.contains("s3cret"), "{text}");
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn any_reply_is_decoded_or_refused_naming_the_call(
            status in prop_oneof![100u16..=599, 100u16..=999, Just(200u16), Just(404u16), Just(202u16)],
            body in body(),
            retry_after in retry_after(),
        ) {
            let Some(r) = reply(status, body, retry_after) else { return Ok(()) };
            let p = provider();
            let url = p.lb_url(UID);
            let what = HttpProvider::what(&Method::GET, &url);
            prop_assert!(what.contains("u:***@"), "{what}");
            names_the_call(&p.decode_get(&what, &r, UID), &what)?;
            names_the_call(&p.decode_ensure(&what, &r, UID), &what)?;
            names_the_call(&p.decode_update_hosts(&what, &r), &what)?;
            names_the_call(&p.decode_delete(&what, &r), &what)?;
            names_the_call(&p.decode_inventory(&what, &r), &what)?;
        }

        #[test]
        fn any_retry_after_is_parsed_or_ignored(v in any::<String>(), secs in any::<u64>()) {
            let now = jiff::Timestamp::now();
            if let Some(d) = parse_retry_after(&v, now) {
                prop_assert!((MIN_RETRY_AFTER..=MAX_RETRY_AFTER).contains(&d));
            }
            let d = parse_retry_after(&secs.to_string(), now);
            prop_assert_eq!(d, Some(Duration::from_secs(secs).clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)));
        }

        #[test]
        fn any_endpoint_is_accepted_or_refused_without_its_password(
            scheme in prop_oneof![
                Just("http".to_owned()),
                Just("https".to_owned()),
                Just("ftp".to_owned()),
                "[a-z]{1,5}"
            ],
            rest in "[ -~]{0,40}",
        ) {
            let endpoint = format!("{scheme}://admin:pw-{rest}@lb.example/");
            match HttpProvider::new(HttpProviderConfig::new(endpoint)) {
                Ok(p) => {
                    prop_assert!(!p.endpoint().contains("pw-"), "{}", p.endpoint());
                }
                Err(e) => {
                    prop_assert!(!e.to_string().contains("pw-"), "{e}");
                }
            }
        }
    }
}

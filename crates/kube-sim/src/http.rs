//! The HTTP front end: routing of Kubernetes API paths, request decoding,
//! response encoding, watch streaming, accounting and fault injection.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::error::{ApiError, FieldError};
use crate::faults::{Decision, Faults, Target};
use crate::negotiate::{Want, negotiate};
use crate::object;
use crate::patch::PatchKind;
use crate::requests::{RequestRecord, Requests};
use crate::resources::{self, ResId, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, DeleteOutcome, ListOptions, Store, Stored, WriteOptions};
use crate::{discovery, openapi, table};

/// Response body: a whole buffer or a stream of chunks (watch).
pub enum RespBody {
    Full(Option<Bytes>),
    Chan(tokio::sync::mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for RespBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            RespBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            RespBody::Chan(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }
    fn is_end_stream(&self) -> bool {
        matches!(self, RespBody::Full(None))
    }
}

/// Shared server state.
pub(crate) struct State {
    pub store: Arc<Store>,
    pub faults: Faults,
    /// The opt-in cost model (`--cost-model`).
    pub cost: Option<crate::cost::CostModel>,
    pub requests: Requests,
    pub server_address: parking_lot::Mutex<String>,
    pub bookmark_interval: Duration,
    pub shutdown: CancellationToken,
    /// What the emulated kubelets run (`pods/log`, `/_sim/pods`).
    pub runtimes: Arc<crate::cluster::PodRuntimes>,
    /// Group versions not served (`SimConfig::disabled_group_versions`).
    pub disabled_group_versions: Vec<String>,
    /// How requests are authorized (`SimConfig::authorization`).
    pub authorization: crate::authz::Authorization,
    /// The impersonation mode that last succeeded per requester.
    pub impersonation_modes: crate::authz::ModeIndexCache,
}

const JSON: &str = "application/json";

fn json_response(code: u16, body: Bytes, content_type: &str) -> Response<RespBody> {
    let mut r = Response::new(RespBody::Full(Some(body)));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

/// A JSON answer as the API server's serializer writes it:
/// `json.NewEncoder(w).Encode`, HTML-safe and ending in a newline.
fn value_response(code: u16, v: &Value) -> Response<RespBody> {
    json_response(code, encoded(crate::gojson::to_vec(v)), JSON)
}

/// JSON bytes with the newline `json.Encoder.Encode` ends them with.
fn encoded(mut bytes: Vec<u8>) -> Bytes {
    bytes.push(b'\n');
    Bytes::from(bytes)
}

pub(crate) fn error_response(e: &ApiError) -> Response<RespBody> {
    let mut r = value_response(e.code, &e.status());
    if let Some(s) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

fn not_found_path() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
    .with_details(json!({}))
}

/// What a request addresses.
#[derive(Debug, Clone, Default)]
struct Target2 {
    rid: Option<ResId>,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
    watch_path: bool,
    /// `/api/v1/namespaces/x/pods` vs `/api/v1/pods`: the namespace given in the path.
    ns_in_path: bool,
}

/// Parses `/api/v1/...` and `/apis/g/v/...` resource paths. `Err` = 404.
fn route(store: &Store, path: &str) -> Result<Option<Target2>, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => ("", "v1", rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return Ok(None),
    };
    let mut t = Target2 {
        group: group.into(),
        version: version.into(),
        ..Default::default()
    };
    let mut rest = rest;
    if rest.first() == Some(&"watch") {
        t.watch_path = true;
        rest = &rest[1..];
    }
    let (ns, rest) = match rest {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty()
                && group.is_empty()
                && matches!(tail, ["status"] | ["finalize"]) =>
        {
            t.resource = "namespaces".into();
            t.name = (*ns).into();
            t.subresource = tail[0].into();
            t.rid = resources::find("", "v1", "namespaces");
            return Ok(Some(t));
        }
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(*ns), tail),
        other => (None, other),
    };
    let (res, name, sub) = match rest {
        [r] => (*r, "", ""),
        [r, n] => (*r, *n, ""),
        [r, n, s] => (*r, *n, *s),
        _ => return Err(not_found_path()),
    };
    let rid = store.find(group, version, res).ok_or_else(not_found_path)?;
    let def = crate::resources::def(rid);
    if ns.is_some() && !def.namespaced {
        return Err(not_found_path());
    }
    if ns.is_none() && def.namespaced && !name.is_empty() {
        return Err(not_found_path());
    }
    match sub {
        "" => {}
        "status" if def.has_status => {}
        "scale" if def.group == "apps" && matches!(def.resource, "deployments" | "replicasets") => {
        }
        "binding" | "log" if def.group.is_empty() && def.resource == "pods" => {}
        "finalize" if def.group.is_empty() && def.resource == "namespaces" => {}
        _ => return Err(not_found_path()),
    }
    t.rid = Some(rid);
    t.resource = res.into();
    t.name = name.into();
    t.subresource = sub.into();
    if let Some(n) = ns {
        t.namespace = n.into();
        t.ns_in_path = true;
    }
    Ok(Some(t))
}

fn query_map(q: Option<&str>) -> Vec<(String, String)> {
    q.map(|q| {
        form_urlencoded::parse(q.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    })
    .unwrap_or_default()
}

pub(crate) struct Query(pub(crate) Vec<(String, String)>);

impl Query {
    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(qk, _)| qk == k)
            .map(|(_, v)| v.as_str())
    }
    pub(crate) fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

fn header_str(req: &Request<Incoming>, h: header::HeaderName) -> Option<&str> {
    req.headers().get(h).and_then(|v| v.to_str().ok())
}

/// The user a request authenticates as: its client certificate's, or the
/// bearer token, which is the user name.
fn user_of(req: &Request<Incoming>) -> String {
    if let Some(p) = req.extensions().get::<crate::tls::PeerCert>() {
        return p.user.clone();
    }
    header_str(req, header::AUTHORIZATION)
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "system:anonymous".to_string())
}

/// The authorizer's verb for a resource request (an empty string for a
/// method the API server gives no verb).
fn k8s_verb(method: &Method, has_name: bool, watch: bool) -> &'static str {
    let target = if has_name {
        request_verb::Target::Named
    } else {
        request_verb::Target::Collection
    };
    request_verb::verb(method, target, watch).unwrap_or("")
}

/// The request path as Go's `url.ParseRequestURI` unescapes it into
/// `URL.Path` (what kube-apiserver splits into a namespace, resource and
/// name): every `%XX` is the byte XX (`%2F` a `/` that splits the path),
/// `+` stays a `+`; `None` for a `%` not followed by two hex digits.
fn unescape_path(raw: &str) -> Option<Vec<u8>> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let hi = b.get(i + 1).copied().and_then(hex)?;
            let lo = b.get(i + 2).copied().and_then(hex)?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Bytes as a string, each byte that is no part of valid UTF-8 U+FFFD, as
/// encoding/json writes it (a name from an unescaped path in a Status).
fn lossy_per_byte(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        s.push_str(chunk.valid());
        for _ in chunk.invalid() {
            s.push('\u{fffd}');
        }
    }
    s
}

/// What Go's net/http answers a request line whose URI does not parse (an
/// invalid `%` escape), before any handler: no Status, no audit record.
fn unparsable_uri() -> Response<RespBody> {
    let mut r = json_response(
        400,
        Bytes::from_static(b"400 Bad Request"),
        "text/plain; charset=utf-8",
    );
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// `e` with the name of the request quoted from its bytes when they are not
/// UTF-8: upstream's `%q` of the name writes `\xff` where kube-sim's name
/// (as encoding/json writes it) has U+FFFD.
fn quote_raw_name(mut e: ApiError, name: &str, path: &[u8]) -> ApiError {
    if !name.contains('\u{fffd}') {
        return e;
    }
    let raw = path
        .split(|c| *c == b'/')
        .find(|seg| std::str::from_utf8(seg).is_err() && lossy_per_byte(seg) == name);
    if let Some(raw) = raw {
        let (lossy, exact) = (
            crate::goquote::quote(name),
            crate::goquote::quote_bytes(raw),
        );
        e.message = e.message.replacen(&lossy, &exact, 1);
    }
    e
}

/// Entry point for one HTTP request.
pub(crate) async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<RespBody> {
    let raw_path = req.uri().path();
    if raw_path == "/_sim" || raw_path.starts_with("/_sim/") {
        return crate::admin::handle(state, req).await;
    }
    let Some(path_bytes) = unescape_path(raw_path) else {
        return unparsable_uri();
    };
    let path = lossy_per_byte(&path_bytes);
    let started = Instant::now();
    let time = jiff::Timestamp::now().to_string();
    let user = user_of(&req);
    let ua = header_str(&req, header::USER_AGENT)
        .unwrap_or("")
        .to_string();
    let method = req.method().clone();
    let query = Query(query_map(req.uri().query()));
    let routed = match route(&state.store, &path) {
        Ok(Some(t)) if discovery::is_off(&state.disabled_group_versions, &t.group, &t.version) => {
            Err(not_found_path())
        }
        r => r,
    };
    let mut rec = RequestRecord {
        seq: 0,
        time,
        user: user.clone(),
        user_agent: ua.clone(),
        method: method.to_string(),
        verb: method.as_str().to_ascii_lowercase(),
        api_group: String::new(),
        api_version: String::new(),
        resource: String::new(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        path: path.clone(),
        code: 0,
        latency_ms: 0.0,
    };
    let review = crate::reviews::Review::of_path(&path);
    if let Some(r) = &review {
        rec.verb = k8s_verb(&method, false, false).to_string();
        rec.api_group = r.group().to_string();
        rec.api_version = "v1".to_string();
        rec.resource = r.resource().to_string();
        rec.namespace = r.namespace().to_string();
    }
    let target = match &routed {
        Ok(Some(t)) => {
            // `?watch` watches a collection; a named object's GET is a get
            // (RequestInfoFactory); `/watch/.../<name>` watches the object.
            let watch = t.watch_path || (t.name.is_empty() && query.flag("watch"));
            rec.verb = k8s_verb(&method, !t.name.is_empty(), watch).to_string();
            rec.api_group = t.group.clone();
            rec.api_version = t.version.clone();
            rec.resource = t.resource.clone();
            rec.subresource = t.subresource.clone();
            rec.namespace = t.namespace.clone();
            rec.name = t.name.clone();
            Some(t.clone())
        }
        _ => None,
    };
    // The authorization filter runs before any handler (and before a
    // resource is looked up: a refused user learns nothing of it).
    let (acting, denied) = match crate::authz::authorize_request(&state, &req, &path) {
        Ok(identity) => (identity, None),
        Err(e) => (
            Default::default(),
            Some(quote_raw_name(e, &rec.name, &path_bytes)),
        ),
    };
    state.faults.wait_unpaused().await;
    let decision = state.faults.decide(&Target {
        verb: &rec.verb,
        resource: &rec.resource,
        subresource: &rec.subresource,
        user: &rec.user,
        namespace: &rec.namespace,
        name: &rec.name,
    });
    if let Some(d) = decision.latency {
        tokio::time::sleep(d).await;
    }
    if let Some(c) = &state.cost {
        c.charge(&rec.verb, &rec.resource).await;
    }
    let resp = if let Some(e) = &denied {
        error_response(e)
    } else if let Some((code, retry, message)) = &decision.error {
        error_response(&injected_error(*code, *retry, message.as_deref(), &rec))
    } else if let Some(r) = review {
        crate::reviews::handle(&state, req, r, &acting)
            .await
            .unwrap_or_else(|e| error_response(&e))
    } else {
        match (routed, target) {
            (Err(e), _) => error_response(&e),
            (Ok(None), _) => non_resource(&state, &req, &path).await,
            (Ok(Some(_)), Some(t)) => {
                let manager = field_manager(&query, &ua);
                let request = Request2 {
                    t,
                    q: query,
                    manager,
                    acting,
                };
                let name = request.t.name.clone();
                match resource_request(&state, req, request, &decision, &mut rec.name).await {
                    Ok(r) => r,
                    Err(e) => error_response(&quote_raw_name(e, &name, &path_bytes)),
                }
            }
            (Ok(Some(_)), None) => error_response(&not_found_path()),
        }
    };
    rec.code = resp.status().as_u16();
    rec.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    state.requests.record(rec);
    resp
}

fn injected_error(
    code: u16,
    retry: Option<u64>,
    message: Option<&str>,
    rec: &RequestRecord,
) -> ApiError {
    let gr = crate::error::GroupResource::new(&rec.api_group, &rec.resource);
    let mut e = match code {
        409 => ApiError::stale(&gr, &rec.name),
        429 => ApiError::too_many_requests(
            message.unwrap_or("Too many requests, please try again later."),
            retry.unwrap_or(1),
        ),
        503 => ApiError::service_unavailable(
            message
                .unwrap_or("The server is currently unable to handle the request (injected fault)"),
        ),
        500 => ApiError::internal(message.unwrap_or("injected fault")),
        410 => ApiError::expired(message.unwrap_or("injected fault")),
        404 => ApiError::not_found(&gr, &rec.name),
        other => ApiError::new(other, "", message.unwrap_or("injected fault")),
    };
    if let Some(r) = retry {
        e.retry_after = Some(r);
    }
    e
}

/// `fieldManager` or, like upstream's prefixFromUserAgent, the user agent up
/// to the first '/'.
fn field_manager(q: &Query, ua: &str) -> String {
    let m = match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => crate::patch::manager_from_user_agent(ua),
    };
    // buildManagerInfo: a manager without a name is "unknown".
    if m.is_empty() {
        "unknown".to_string()
    } else {
        m
    }
}

async fn non_resource(
    state: &Arc<State>,
    req: &Request<Incoming>,
    path: &str,
) -> Response<RespBody> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return error_response(&ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ));
    }
    let accept = header_str(req, header::ACCEPT);
    let trimmed = path.trim_end_matches('/');
    match trimmed {
        "/version" => value_response(200, &discovery::version()),
        "/healthz" | "/livez" | "/readyz" => {
            json_response(200, Bytes::from_static(b"ok"), "text/plain; charset=utf-8")
        }
        "/api" | "/apis" => {
            let core = trimmed == "/api";
            match negotiate(accept, true) {
                Some(Want::Discovery(v)) => {
                    let doc = discovery::aggregated(
                        core,
                        &v,
                        &state.store.custom_resources(),
                        &state.disabled_group_versions,
                    );
                    let mut r = value_response(200, &doc);
                    let ct = format!(
                        "application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"
                    );
                    if let Ok(h) = HeaderValue::from_str(&ct) {
                        r.headers_mut().insert(header::CONTENT_TYPE, h);
                    }
                    r.headers_mut()
                        .insert(header::VARY, HeaderValue::from_static("Accept"));
                    r
                }
                Some(_) => {
                    let doc = if core {
                        discovery::api_versions(&state.server_address.lock())
                    } else {
                        discovery::api_group_list(
                            &state.store.custom_resources(),
                            &state.disabled_group_versions,
                        )
                    };
                    let mut r = value_response(200, &doc);
                    r.headers_mut()
                        .insert(header::VARY, HeaderValue::from_static("Accept"));
                    r
                }
                None => error_response(&not_acceptable()),
            }
        }
        "/openapi/v2" => {
            if accept.is_some_and(|a| !a.contains("json") && !a.contains("*/*")) {
                return error_response(&not_acceptable());
            }
            json_response(200, Bytes::from_static(openapi::v2_document()), JSON)
        }
        "/openapi/v3" => value_response(200, &openapi::crd::v3_index(&state.store, true)),
        p if p.starts_with("/openapi/v3/") => {
            let gv = &p["/openapi/v3/".len()..];
            match openapi::crd::v3_document(&state.store, gv) {
                Some(doc) => json_response(200, doc, JSON),
                None => error_response(&not_found_path()),
            }
        }
        p => {
            let segs: Vec<&str> = p.trim_matches('/').split('/').collect();
            match segs.as_slice() {
                ["api", v] => {
                    match discovery::resource_list("", v, &[], &state.disabled_group_versions) {
                        Some(d) => value_response(200, &d),
                        None => error_response(&not_found_path()),
                    }
                }
                ["apis", g] => match discovery::api_group(
                    g,
                    &state.store.custom_resources(),
                    &state.disabled_group_versions,
                ) {
                    Some(d) => value_response(200, &d),
                    None => error_response(&not_found_path()),
                },
                ["apis", g, v] => {
                    match discovery::resource_list(
                        g,
                        v,
                        &state.store.custom_resources(),
                        &state.disabled_group_versions,
                    ) {
                        Some(d) => value_response(200, &d),
                        None => error_response(&not_found_path()),
                    }
                }
                _ => error_response(&not_found_path()),
            }
        }
    }
}

fn not_acceptable() -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
    )
}

/// The apiserver's `MaxRequestBodyBytes` default (3 MiB).
pub(crate) const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// `errors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))`
/// as `limitedReadBody` (endpoints/handlers/rest.go) answers it.
fn entity_too_large() -> ApiError {
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {MAX_BODY_BYTES}"),
    )
}

/// Reads a request body of at most [`MAX_BODY_BYTES`]: a larger
/// `Content-Length` is refused before reading anything, and a chunked body
/// is read only up to the limit, so a large body never sits in memory.
pub(crate) async fn read_limited(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(entity_too_large());
    }
    match http_body_util::Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(entity_too_large()),
        Err(e) => Err(ApiError::bad_request(format!(
            "error reading request body: {e}"
        ))),
    }
}

async fn read_body(req: Request<Incoming>) -> Result<(Option<String>, Bytes), ApiError> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok((ct, read_limited(req).await?))
}

/// Decodes a create/update body (JSON or YAML).
fn decode_object(ct: Option<&str>, body: &[u8]) -> Result<Value, ApiError> {
    let media = crate::negotiate::media_type(ct.unwrap_or(JSON));
    match media.as_str() {
        "application/json" | "" | "*/*" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        }),
        "application/yaml" => serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}"))),
        "application/vnd.kubernetes.protobuf" => {
            crate::protobuf::decode_body(body).map_err(|e| match e {
                crate::protobuf::ProtoError::UnsupportedKind(_) => ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "kube-sim cannot decode this protobuf body ({e}); send application/json"
                    ),
                ),
                other => ApiError::bad_request(format!("decoding protobuf body: {other}")),
            })
        }
        _ => Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )),
    }
}

fn write_options(q: &Query, manager: String) -> Result<WriteOptions, ApiError> {
    let dry_run = match q.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "CreateOptions",
                "",
                &[FieldError::not_supported(
                    "dryRun",
                    json!([other]),
                    &["All"],
                )],
            ));
        }
    };
    if manager.len() > 128 {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "CreateOptions",
            "",
            &[FieldError {
                named: false,
                kind: crate::error::FieldErrorType::TooLong,
                field: "fieldManager".into(),
                value: None,
                detail: "may not be more than 128 bytes".into(),
            }],
        ));
    }
    Ok(WriteOptions {
        field_manager: manager,
        dry_run,
        force: q.flag("force"),
        strict_fields: q.get("fieldValidation") == Some("Strict"),
        ..WriteOptions::default()
    })
}

fn list_options(q: &Query, def: &ResourceDef) -> Result<ListOptions, ApiError> {
    let limit = match q.get("limit") {
        None | Some("") => None,
        Some(l) => Some(
            l.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
    };
    Ok(ListOptions {
        label_selector: LabelSelector::parse(q.get("labelSelector").unwrap_or(""))?,
        field_selector: FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), def)?,
        limit: limit.filter(|l| *l > 0).map(|l| l as usize),
        continue_token: q.get("continue").map(str::to_string),
        resource_version: q.get("resourceVersion").map(str::to_string),
        resource_version_match: q.get("resourceVersionMatch").map(str::to_string),
    })
}

fn stored_response(
    code: u16,
    s: &Stored,
    want: &Want,
    def: &ResourceDef,
    q: &Query,
) -> Response<RespBody> {
    match want {
        Want::Json | Want::Discovery(_) => json_response(code, encoded(s.bytes.to_vec()), JSON),
        Want::PartialMetadata => value_response(code, &partial_meta(&s.value)),
        Want::Table => {
            let t = table::to_table(
                def.resource,
                def.group,
                &[&s.value],
                q.get("includeObject").unwrap_or("Metadata"),
                json!({"resourceVersion": s.rv.to_string()}),
                jiff::Timestamp::now(),
            );
            value_response(code, &t)
        }
    }
}

fn partial_meta(v: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": v.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A resource request once routed and authorized.
struct Request2 {
    t: Target2,
    q: Query,
    /// The field manager of its writes.
    manager: String,
    /// The user it acts as (after impersonation).
    acting: crate::authz::Acting,
}

async fn resource_request(
    state: &Arc<State>,
    req: Request<Incoming>,
    request: Request2,
    decision: &Decision,
    created_name: &mut String,
) -> Result<Response<RespBody>, ApiError> {
    let Request2 {
        t,
        q,
        manager,
        acting,
    } = request;
    let rid = t.rid.ok_or_else(not_found_path)?;
    let def = crate::resources::def(rid);
    let store = &state.store;
    let want = negotiate(header_str(&req, header::ACCEPT), false).ok_or_else(not_acceptable)?;
    // Who writes, for admission policies (`request.userInfo`).
    let user = Some(Arc::new(crate::admission::UserInfo {
        username: acting.id.0,
        groups: acting.id.1,
        uid: acting.uid,
        extra: acting.extra,
    }));
    let method = req.method().clone();
    let ns = t.namespace.clone();
    let name = t.name.clone();
    let sub = if t.subresource.is_empty() {
        None
    } else {
        Some(t.subresource.as_str())
    };
    // `?watch` of a named object is a get (RequestInfoFactory makes a watch
    // of a GET without a name only); `/watch/.../<name>` watches it.
    let watch = t.watch_path || (name.is_empty() && q.flag("watch"));
    if sub == Some("scale") && !watch {
        let opts = WriteOptions {
            user,
            ..write_options(&q, manager)?
        };
        let (ct, body) = read_body(req).await?;
        let scale =
            crate::scale::handle(store, rid, &ns, &name, &method, ct.as_deref(), &body, &opts)?;
        return Ok(value_response(200, &scale));
    }
    if sub.is_none()
        && !def
            .verbs()
            .contains(&k8s_verb(&method, !name.is_empty(), watch))
    {
        // The registry does not implement the verb: no route (go-restful).
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ));
    }
    if sub == Some("binding") {
        return bind_pod(store, &method, req, &ns, Some(&name), &q).await;
    }
    if def.group.is_empty() && def.resource == "bindings" {
        // POST namespaces/<ns>/bindings: the pod is the Binding's name.
        return bind_pod(store, &method, req, &ns, None, &q).await;
    }
    if sub == Some("log") {
        return crate::cluster::logs::serve(state, &method, &ns, &name, &q).await;
    }
    match method {
        Method::GET | Method::HEAD if watch => {
            let mut opts = list_options(&q, def)?;
            if !name.is_empty() {
                // listOpts: the name is the selector, or a field selector
                // given too must require exactly it.
                if opts.field_selector.is_empty() {
                    opts.field_selector = FieldSelector::name(&name);
                } else if opts.field_selector.requires_exact_match("metadata.name")
                    != Some(name.as_str())
                {
                    return Err(ApiError::bad_request(
                        "fieldSelector metadata.name doesn't match requested name",
                    ));
                }
            }
            let ns = if def.namespaced && t.ns_in_path {
                Some(ns)
            } else {
                None
            };
            crate::watch::serve(state.clone(), rid, ns, opts, &q, want, decision)
        }
        Method::GET | Method::HEAD if name.is_empty() => {
            let opts = list_options(&q, def)?;
            let ns = if def.namespaced && t.ns_in_path {
                Some(ns.as_str())
            } else {
                None
            };
            let res = store.list(rid, ns, &opts).await?;
            Ok(list_response(def, &res, &want, &q))
        }
        Method::GET | Method::HEAD => {
            if let Some(rv) = q
                .get("resourceVersion")
                .filter(|r| !r.is_empty() && *r != "0")
            {
                let want_rv = rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {rv:?}"))
                })?;
                store.wait_for_rv(want_rv).await?;
            }
            let s = store.get(rid, &ns, &name)?;
            Ok(stored_response(200, &s, &want, def, &q))
        }
        Method::POST => {
            if !name.is_empty() {
                return Err(ApiError::method_not_supported(
                    &def.group_resource(),
                    "create",
                ));
            }
            if def.namespaced && !t.ns_in_path {
                return Err(ApiError::method_not_supported(
                    &def.group_resource(),
                    "create",
                ));
            }
            let opts = WriteOptions {
                user,
                ..write_options(&q, manager)?
            };
            let (ct, body) = read_body(req).await?;
            let mut obj = decode_object(ct.as_deref(), &body)
                .map_err(|e| overflowing_literal(def, ct.as_deref(), &body).unwrap_or(e))?;
            if store.custom(rid).is_some() {
                custom_body_has_type(def, &obj, &body)?;
            }
            decodes_as(def, &mut obj, ct.as_deref(), &body)?;
            let mut warnings = field_validation(def, &q, &obj, store.custom(rid).as_deref())?;
            let s = store.create(rid, &ns, obj, &opts)?;
            warnings.extend(opts.warnings.take());
            // Like the audit log's objectRef, name the created object.
            *created_name = object::meta_str(&s.value, "name").to_string();
            Ok(with_warnings(
                stored_response(201, &s, &want, def, &q),
                &warnings,
            ))
        }
        Method::PUT => {
            if name.is_empty() {
                return Err(ApiError::method_not_supported(
                    &def.group_resource(),
                    "update",
                ));
            }
            let opts = WriteOptions {
                user,
                ..write_options(&q, manager)?
            };
            let (ct, body) = read_body(req).await?;
            let mut obj = decode_object(ct.as_deref(), &body)
                .map_err(|e| overflowing_literal(def, ct.as_deref(), &body).unwrap_or(e))?;
            if store.custom(rid).is_some() {
                custom_body_has_type(def, &obj, &body)?;
            }
            decodes_as(def, &mut obj, ct.as_deref(), &body)?;
            let mut warnings = field_validation(def, &q, &obj, store.custom(rid).as_deref())?;
            let (s, created) = store.update(rid, &ns, &name, sub, obj, &opts)?;
            warnings.extend(opts.warnings.take());
            Ok(with_warnings(
                stored_response(if created { 201 } else { 200 }, &s, &want, def, &q),
                &warnings,
            ))
        }
        Method::PATCH => {
            if name.is_empty() {
                return Err(ApiError::method_not_supported(
                    &def.group_resource(),
                    "patch",
                ));
            }
            if sub == Some("finalize") {
                return Err(ApiError::method_not_supported(
                    &def.group_resource(),
                    "patch",
                ));
            }
            let mut opts = WriteOptions {
                user,
                ..write_options(&q, manager)?
            };
            let (ct, body) = read_body(req).await?;
            let ct = ct.unwrap_or_default();
            // The PATCH handler answers a content type that is no patch
            // type with a generic 415.
            let kind = PatchKind::from_content_type(&ct).ok_or_else(|| {
                ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
                    .with_details(json!({}))
            })?;
            if kind == PatchKind::Apply {
                if q.get("fieldManager").is_none_or(str::is_empty) {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "PatchOptions",
                        "",
                        &[FieldError::required(
                            "fieldManager",
                            "is required for apply patch",
                        )],
                    ));
                }
            } else if q.get("force").is_some() {
                return Err(ApiError::invalid(
                    "meta.k8s.io",
                    "PatchOptions",
                    "",
                    &[FieldError::forbidden(
                        "force",
                        "may not be specified for non-apply patch",
                    )],
                ));
            }
            opts.force = q.flag("force");
            let mut warnings = patch_warnings(def, &q, kind, &body);
            let (s, created) = store
                .patch(rid, &ns, &name, sub, kind, &body, &opts)
                .map_err(|e| overflowing_patch_literal(&q, kind, &body).unwrap_or(e))?;
            warnings.extend(opts.warnings.take());
            Ok(with_warnings(
                stored_response(if created { 201 } else { 200 }, &s, &want, def, &q),
                &warnings,
            ))
        }
        Method::DELETE => {
            let (_, body) = read_body(req).await?;
            let opts = DeleteOptions {
                user,
                ..delete_options(&q, &body)?
            };
            if name.is_empty() {
                let lo = list_options(&q, def)?;
                let ns = if def.namespaced && t.ns_in_path {
                    Some(ns.as_str())
                } else {
                    None
                };
                let items = store.delete_collection(
                    rid,
                    ns,
                    &lo.label_selector,
                    &lo.field_selector,
                    &opts,
                )?;
                let res = crate::store::ListResult {
                    items,
                    resource_version: store.current_rv(),
                    continue_token: None,
                    remaining: None,
                };
                return Ok(with_warnings(
                    list_response(def, &res, &Want::Json, &q),
                    &opts.warnings.take(),
                ));
            }
            if def.group.is_empty()
                && def.resource == "namespaces"
                && matches!(name.as_str(), "default" | "kube-system" | "kube-public")
            {
                // NamespaceLifecycle admission: immortal namespaces.
                return Err(ApiError::new(
                    403,
                    "Forbidden",
                    format!(
                        "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
                    ),
                )
                .with_details(json!({"name": name, "kind": "namespaces"})));
            }
            let outcome = store.delete(rid, &ns, &name, &opts)?;
            let warnings = opts.warnings.take();
            let resp = match outcome {
                DeleteOutcome::Pending(s) => Ok(stored_response(200, &s, &want, def, &q)),
                DeleteOutcome::Deleted(s) => {
                    if returns_deleted_object(def) {
                        Ok(stored_response(200, &s, &want, def, &q))
                    } else {
                        let mut d = Map::new();
                        d.insert("name".into(), json!(name));
                        if !def.group.is_empty() {
                            d.insert("group".into(), json!(def.group));
                        }
                        d.insert("kind".into(), json!(def.resource));
                        d.insert("uid".into(), json!(object::meta_str(&s.value, "uid")));
                        Ok(value_response(
                            200,
                            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d}),
                        ))
                    }
                }
            };
            resp.map(|r| with_warnings(r, &warnings))
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    }
}

/// POST `pods/<name>/binding` or `bindings` (BindingREST.Create): answers
/// `201` with a Success `Status`. `url_name`: the pod named in the path.
async fn bind_pod(
    store: &Store,
    method: &Method,
    req: Request<Incoming>,
    ns: &str,
    url_name: Option<&str>,
    q: &Query,
) -> Result<Response<RespBody>, ApiError> {
    let gr = crate::error::GroupResource::new("", "pods/binding");
    if *method != Method::POST {
        return Err(ApiError::method_not_supported(
            &gr,
            &method.as_str().to_ascii_lowercase(),
        ));
    }
    let (ct, body) = read_body(req).await?;
    let binding = decode_object(ct.as_deref(), &body)?;
    if let Some(k) = binding.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != "Binding"
    {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type Binding): {k}"
        )));
    }
    let body_name = object::meta_str(&binding, "name");
    let name = url_name.unwrap_or(body_name);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    // ValidatePodBinding.
    let target = binding.get("target").cloned().unwrap_or(Value::Null);
    let target_name = target.get("name").and_then(Value::as_str).unwrap_or("");
    let target_kind = target.get("kind").and_then(Value::as_str).unwrap_or("");
    let mut errs = Vec::new();
    if target_name.is_empty() {
        errs.push(FieldError::required("target.name", ""));
    }
    if !target_kind.is_empty() && target_kind != "Node" {
        errs.push(FieldError::not_supported(
            "target.kind",
            json!(target_kind),
            &["Node", "<empty>"],
        ));
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid("", "Binding", name, &errs));
    }
    let annotations = object::meta(&binding)
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    let uid = object::meta_str(&binding, "uid");
    store.bind_pod(
        ns,
        name,
        target_name,
        annotations,
        Some(uid),
        q.get("dryRun") == Some("All"),
    )?;
    Ok(value_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// A custom resource's body is decoded as unstructured JSON, which needs
/// its `kind` and `apiVersion`: without, upstream's 400 quotes the body.
fn custom_body_has_type(def: &ResourceDef, obj: &Value, body: &[u8]) -> Result<(), ApiError> {
    let missing = ["kind", "apiVersion"].into_iter().find(|k| {
        obj.get(*k)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    });
    let Some(missing) = missing else {
        return Ok(());
    };
    let data = match std::str::from_utf8(body) {
        Ok(s) if s.trim_start().starts_with('{') => s.to_string(),
        _ => obj.to_string(),
    };
    // summarizeData(body, 30)
    let summary = if data.len() > 30 {
        let mut end = 30;
        while !data.is_char_boundary(end) {
            end -= 1;
        }
        format!("{} ...", &data[..end])
    } else {
        data.clone()
    };
    let field = if missing == "kind" {
        "Kind"
    } else {
        "apiVersion"
    };
    Err(ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {}): Object '{field}' is missing in '{data}' ({summary})",
        def.kind
    )))
}

/// A JSON body serde_json does not read because a number overflows a
/// float (`1e400`), where Go's decoder reads the literal: when the literal
/// is in an integer field, the decoder's error for it (see [`decodes_as`]).
fn overflowing_literal(def: &ResourceDef, ct: Option<&str>, body: &[u8]) -> Option<ApiError> {
    let written = crate::patch::gojson::Node::parse(body)?;
    let mut obj = written.to_value_lossy();
    decodes_as(def, &mut obj, ct, body).err()
}

/// A JSON or merge patch body serde_json does not read because a number
/// overflows a float (`1e400`): under `fieldValidation` `Warn` (the default)
/// or `Strict`, upstream's applyJSPatch first decodes the patch strictly
/// (a merge patch into a `map[string]interface{}`, a JSON patch into
/// `[]jsonPatchOp`), and the first such literal where a number is decoded is
/// its 400 `error decoding patch: json: cannot unmarshal number 1e400 into
/// Go value of type float64` (`Go struct field jsonPatchOp.value` in an
/// operation's value).
fn overflowing_patch_literal(q: &Query, kind: PatchKind, body: &[u8]) -> Option<ApiError> {
    if q.get("fieldValidation").unwrap_or("Warn") == "Ignore"
        || serde_json::from_slice::<Value>(body).is_ok()
    {
        return None;
    }
    let doc = crate::patch::gojson::Node::parse(body)?;
    let why = match (kind, &doc) {
        (PatchKind::Merge, crate::patch::gojson::Node::Obj { .. }) => format!(
            "number {} into Go value of type float64",
            doc.first_overflowing_literal()?
        ),
        (PatchKind::Json, crate::patch::gojson::Node::Arr(ops)) => {
            // Only an operation's value is decoded as a number; an unknown
            // member is skipped.
            let lit = ops.iter().find_map(|op| {
                op.members()
                    .iter()
                    .filter(|m| m.key == "value")
                    .find_map(|m| m.value.first_overflowing_literal())
            })?;
            format!("number {lit} into Go struct field jsonPatchOp.value of type float64")
        }
        _ => return None,
    };
    Some(ApiError::bad_request(format!(
        "error decoding patch: json: cannot unmarshal {why}"
    )))
}

/// Decoding a create or update body into the kind's Go type: a value an
/// integer field cannot hold is upstream's 400 (`Lease in version "v1"
/// cannot be handled as a Lease: json: cannot unmarshal number 2147483648
/// into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32`),
/// the number quoted as a JSON body wrote it (`1e3`). A quantity that does
/// not parse aborts decoding, so its error wins over an integer's (which
/// the decoder saves and reports at the end).
fn decodes_as(
    def: &ResourceDef,
    obj: &mut Value,
    ct: Option<&str>,
    body: &[u8],
) -> Result<(), ApiError> {
    let json = matches!(
        crate::negotiate::media_type(ct.unwrap_or(JSON)).as_str(),
        "application/json" | "" | "*/*"
    );
    // The body is parsed again for its literals only when a number is not
    // a plain integer (`decode_integers` asks only then): not on every write.
    let written = std::cell::OnceCell::new();
    // A YAML body reaches the decoder as the JSON Go marshals of what it
    // read (sigs.k8s.io/yaml): a float as encoding/json writes a float64.
    let read = (!json).then(|| obj.clone());
    let literal = |pointer: &str| -> Option<String> {
        let written = written.get_or_init(|| {
            json.then(|| crate::patch::gojson::Node::parse(body))
                .flatten()
        });
        match (written, &read) {
            (Some(w), _) => w.literal_at(pointer).map(str::to_string),
            (None, Some(r)) => r
                .pointer(pointer)
                .and_then(Value::as_number)
                .map(crate::patch::gojson::go_number),
            (None, None) => None,
        }
    };
    if let Some(e) = openapi::schema::quantity_decode_error(def.group, def.version, def.kind, obj) {
        return Err(ApiError::bad_request(openapi::schema::undecodable_message(
            def.kind,
            def.version,
            &e,
        )));
    }
    openapi::schema::decode_integers(def.group, def.version, def.kind, obj, None, &literal).map_err(
        |e| {
            ApiError::bad_request(openapi::schema::undecodable_message(
                def.kind,
                def.version,
                &e,
            ))
        },
    )
}

/// `fieldValidation` for create/update: unknown fields are an error under
/// `Strict` (kubectl's default), a `Warning` header under `Warn` (the server
/// default), silent under `Ignore`; the store drops them in every case, as
/// decoding into the typed object does.
fn field_validation(
    def: &ResourceDef,
    q: &Query,
    obj: &Value,
    custom: Option<&crate::crd::Served>,
) -> Result<Vec<String>, ApiError> {
    let mode = q.get("fieldValidation").unwrap_or("Warn");
    if !matches!(mode, "Strict" | "Warn" | "Ignore") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {mode:?}"
        )));
    }
    if mode == "Ignore" {
        return Ok(Vec::new());
    }
    let unknown = openapi::crd::unknown_fields(custom, def, obj);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if mode == "Strict" {
        return Err(ApiError::bad_request(
            openapi::schema::strict_create_update_message(def.kind, def.version, &unknown),
        ));
    }
    Ok(unknown
        .iter()
        .map(|f| openapi::schema::unknown_field_warning(f))
        .collect())
}

/// `fieldValidation=Warn` (the default) for merge and strategic patches:
/// warn about fields of the patch the schema does not declare (patch
/// directives such as `$patch` aside); the store drops them.
fn patch_warnings(def: &ResourceDef, q: &Query, kind: PatchKind, body: &[u8]) -> Vec<String> {
    if q.get("fieldValidation").unwrap_or("Warn") != "Warn"
        || !matches!(kind, PatchKind::Merge | PatchKind::Strategic)
    {
        return Vec::new();
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    openapi::schema::unknown_fields(def.group, def.version, def.kind, &v)
        .into_iter()
        .filter(|f| !f.contains('$'))
        .map(|f| openapi::schema::unknown_field_warning(&f))
        .collect()
}

/// Adds `Warning: 299 - "..."` headers, as the apiserver's warning recorder.
fn with_warnings(mut r: Response<RespBody>, warnings: &[String]) -> Response<RespBody> {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

/// Registries with `ReturnDeletedObject: true`
/// (pkg/registry/core/{pod,serviceaccount,persistentvolume,
/// persistentvolumeclaim,service,namespace}/storage/storage.go).
fn returns_deleted_object(def: &ResourceDef) -> bool {
    def.group.is_empty()
        && matches!(
            def.resource,
            "pods"
                | "serviceaccounts"
                | "persistentvolumes"
                | "persistentvolumeclaims"
                | "services"
                | "namespaces"
        )
}

fn delete_options(q: &Query, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let mut o = DeleteOptions::default();
    if body.starts_with(b"k8s\x00") {
        let v = crate::protobuf::decode_body(body)
            .map_err(|e| ApiError::bad_request(format!("decoding protobuf DeleteOptions: {e}")))?;
        return delete_options(q, v.to_string().as_bytes());
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?;
        o.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.propagation_policy = v
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true)
            && o.propagation_policy.is_none()
        {
            o.propagation_policy = Some("Orphan".into());
        }
        if let Some(p) = v.get("preconditions") {
            o.precondition_uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
            o.precondition_rv = p
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        o.dry_run = v
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"));
    }
    if let Some(g) = q.get("gracePeriodSeconds") {
        o.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    if let Some(p) = q.get("propagationPolicy") {
        o.propagation_policy = Some(p.to_string());
    }
    if q.get("dryRun") == Some("All") {
        o.dry_run = true;
    }
    Ok(o)
}

fn list_response(
    def: &ResourceDef,
    res: &crate::store::ListResult,
    want: &Want,
    q: &Query,
) -> Response<RespBody> {
    let mut meta = Map::new();
    meta.insert(
        "resourceVersion".into(),
        json!(res.resource_version.to_string()),
    );
    if let Some(c) = &res.continue_token {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = res.remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    match want {
        Want::Table => {
            let objs: Vec<&Value> = res.items.iter().map(|s| &s.value).collect();
            let t = table::to_table(
                def.resource,
                def.group,
                &objs,
                q.get("includeObject").unwrap_or("Metadata"),
                Value::Object(meta),
                jiff::Timestamp::now(),
            );
            value_response(200, &t)
        }
        Want::PartialMetadata => {
            let items: Vec<Value> = res.items.iter().map(|s| partial_meta(&s.value)).collect();
            value_response(
                200,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items}),
            )
        }
        _ => {
            // Splice the stored bytes: no re-serialisation per list.
            let head = crate::gojson::to_string(
                &json!({"kind": def.list_kind(), "apiVersion": def.api_version(), "metadata": meta}),
            );
            let mut out = Vec::with_capacity(
                head.len() + res.items.iter().map(|s| s.bytes.len() + 1).sum::<usize>() + 16,
            );
            out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
            out.extend_from_slice(b",\"items\":[");
            for (i, s) in res.items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&s.bytes);
            }
            out.extend_from_slice(b"]}");
            json_response(200, encoded(out), JSON)
        }
    }
}

/// Encodes one watch event line in the wire format
/// (`{"type":"ADDED","object":{...}}\n`).
pub(crate) fn event_line(ty: &str, obj: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(obj.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(obj);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// The object of a watch event in the representation the client asked for.
pub(crate) fn event_object(
    def: &ResourceDef,
    value: &Value,
    bytes: &Bytes,
    want: &Want,
    include: &str,
) -> Bytes {
    match want {
        Want::Json | Want::Discovery(_) => bytes.clone(),
        Want::PartialMetadata => Bytes::from(crate::gojson::to_vec(&partial_meta(value))),
        Want::Table => {
            let rv = object::meta_str(value, "resourceVersion").to_string();
            let t = table::to_table(
                def.resource,
                def.group,
                &[value],
                include,
                json!({"resourceVersion": rv}),
                jiff::Timestamp::now(),
            );
            Bytes::from(crate::gojson::to_vec(&t))
        }
    }
}

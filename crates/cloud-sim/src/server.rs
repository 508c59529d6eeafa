//! The HTTP API: the contract endpoints under `/v1/` and the simulator's own
//! endpoints under `/_sim/`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde::Serialize;
use tokio::sync::watch;

use crate::auth::Authenticator;
use crate::faults::{ErrorFault, FaultSet, Faults, GarbageFault, HangFault, OpFaults, Operation};
use crate::model::{EnsureRequest, ErrorBody, ErrorDetail, HostsRequest, Inventory, codes};
use crate::stats::{AddressStats, Counters, Outcome, Stats};
use crate::store::{ApiError, Applied, Store};

/// Largest request body accepted (a PUT carries the node list).
pub(crate) const BODY_LIMIT: usize = 16 * 1024 * 1024;

pub(crate) struct Shared {
    pub store: Store,
    pub faults: Faults,
    pub counters: Counters,
    pub auth: Authenticator,
    pub shutdown: watch::Receiver<bool>,
}

impl Shared {
    pub fn stats(&self) -> Stats {
        let range = self.store.range();
        Stats {
            operations: self.counters.snapshot(),
            load_balancers: self.store.count(),
            addresses: AddressStats {
                range: range.to_string(),
                capacity: range.capacity(),
                allocated: self.store.allocated(),
            },
            state_writes: self.store.state_writes(),
        }
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/loadbalancers", get(list))
        .route(
            "/v1/loadbalancers/{uid}",
            put(ensure).get(get_one).delete(delete),
        )
        .route("/v1/loadbalancers/{uid}/hosts", put(hosts))
        .route(
            "/_sim/faults",
            get(get_faults).put(put_faults).delete(clear_faults),
        )
        .route("/_sim/faults/{op}", put(put_op_faults))
        .route("/_sim/stats", get(get_stats).delete(reset_stats))
        .fallback(|| async {
            error_response(
                StatusCode::NOT_FOUND,
                "UnknownPath",
                "no such path in the load-balancer API; the contract's paths start with /v1/loadbalancers"
                    .into(),
            )
        })
        .with_state(shared)
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(body),
        )
            .into_response(),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            codes::INTERNAL,
            format!("cannot encode the reply: {e}"),
        ),
    }
}

fn error_response(status: StatusCode, code: &str, message: String) -> Response {
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.to_owned(),
            message,
        },
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(bytes),
    )
        .into_response()
}

fn api_error(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error_response(status, e.code, e.message.clone())
}

/// Counts a call from start to outcome; a call dropped before its outcome
/// (the client went away) counts as abandoned.
struct Recorder {
    shared: Arc<Shared>,
    op: Operation,
    done: bool,
}

impl Recorder {
    fn new(shared: Arc<Shared>, op: Operation) -> Self {
        shared.counters.started(op);
        Self {
            shared,
            op,
            done: false,
        }
    }

    fn finish(mut self, outcome: Outcome, resp: Response) -> Response {
        self.done = true;
        self.shared.counters.finished(self.op, outcome);
        tracing::debug!(op = %self.op, ?outcome, status = resp.status().as_u16(), "call finished");
        resp
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if !self.done {
            self.shared.counters.finished(self.op, Outcome::Abandoned);
            tracing::debug!(op = %self.op, "client went away before the reply");
        }
    }
}

enum Action {
    Ensure(String, Bytes),
    Hosts(String, Bytes),
    Get(String),
    Delete(String),
    List,
}

impl Action {
    fn op(&self) -> Operation {
        match self {
            Action::Ensure(..) => Operation::Put,
            Action::Hosts(..) => Operation::Hosts,
            Action::Get(_) => Operation::Get,
            Action::Delete(_) => Operation::Delete,
            Action::List => Operation::List,
        }
    }
}

/// `Some` rejection when the caller is not authorized.
fn authorize(shared: &Shared, headers: &HeaderMap) -> Option<(Outcome, Response)> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match shared.auth.check(presented) {
        Ok(true) => None,
        Ok(false) => {
            let mut resp = error_response(
                StatusCode::UNAUTHORIZED,
                codes::UNAUTHORIZED,
                "missing or wrong bearer token".into(),
            );
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            Some((Outcome::Unauthorized, resp))
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot check the bearer token");
            Some((
                Outcome::InternalError,
                error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    codes::INTERNAL,
                    format!("the server cannot check tokens: {e}"),
                ),
            ))
        }
    }
}

fn retry_after_value(e: &ErrorFault) -> Option<HeaderValue> {
    let secs = e.retry_after_seconds?;
    let text = match e.retry_after_format {
        crate::faults::RetryAfterFormat::Seconds => secs.to_string(),
        crate::faults::RetryAfterFormat::HttpDate => {
            let at = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(i64::try_from(secs).ok()?))
                .ok()?;
            jiff::fmt::rfc2822::DateTimePrinter::new()
                .timestamp_to_rfc9110_string(&at)
                .ok()?
        }
    };
    HeaderValue::from_str(&text).ok()
}

fn injected_error(op: Operation, e: &ErrorFault) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let code = match e.status {
        202 => codes::DELETION_IN_PROGRESS,
        429 => codes::RATE_LIMITED,
        _ => codes::INJECTED,
    };
    let message = e
        .message
        .clone()
        .unwrap_or_else(|| format!("cloud-sim injected fault: {} on {op}", e.status));
    let mut resp = error_response(status, code, message);
    if let Some(v) = retry_after_value(e) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn garbage(g: &GarbageFault) -> Response {
    let status = StatusCode::from_u16(g.status).unwrap_or(StatusCode::OK);
    let mut resp = (status, Body::from(g.body.clone())).into_response();
    if let Ok(v) = HeaderValue::from_str(&g.content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// Waits out a hang. `None`: released (faults changed), go on with the call.
async fn hang(
    shared: &Shared,
    op: Operation,
    h: &HangFault,
    mut changed: watch::Receiver<u64>,
) -> Option<(Outcome, Response)> {
    shared.counters.hung(op);
    tracing::debug!(%op, "call hangs");
    let mut shutdown = shared.shutdown.clone();
    let max = async {
        match h.max_ms {
            Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = changed.changed() => None,
        _ = shutdown.wait_for(|down| *down) => Some((
            Outcome::ShuttingDown,
            error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::UNAVAILABLE,
                "cloud-sim is shutting down".into(),
            ),
        )),
        () = max => Some((
            Outcome::HangTimeout,
            error_response(
                StatusCode::GATEWAY_TIMEOUT,
                codes::HANG_TIMEOUT,
                format!("cloud-sim injected hang on {op} reached its maxMs"),
            ),
        )),
    }
}

fn too_large() -> ApiError {
    ApiError {
        status: 413,
        code: codes::REQUEST_TOO_LARGE,
        message: format!("the request body is larger than the limit of {BODY_LIMIT} bytes"),
        outcome: Outcome::BadRequest,
    }
}

/// Reads a request body of at most [`BODY_LIMIT`] bytes: a larger
/// `Content-Length` is refused before reading, a chunked body is read only
/// up to the limit. Called after the caller is authorized, so an
/// unauthenticated client cannot make the server read anything.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return Err(too_large());
    }
    match http_body_util::Limited::new(body, BODY_LIMIT)
        .collect()
        .await
    {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ApiError {
            status: 400,
            code: codes::INVALID_REQUEST,
            message: format!("cannot read the request body: {e}"),
            outcome: Outcome::BadRequest,
        }),
    }
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError {
        status: 400,
        code: codes::INVALID_REQUEST,
        message: format!("the request body is not valid: {e}"),
        outcome: Outcome::BadRequest,
    })
}

async fn durable(shared: &Shared, applied: &Applied) -> Result<(), (Outcome, Response)> {
    shared
        .store
        .make_durable(applied.version)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "cannot persist the state");
            (
                Outcome::PersistFailed,
                error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    codes::INTERNAL,
                    format!("the change could not be persisted: {e}"),
                ),
            )
        })
}

async fn perform(shared: &Shared, action: Action) -> (Outcome, Response) {
    let result = match action {
        Action::Ensure(uid, body) => match parse_body::<EnsureRequest>(&body)
            .and_then(|req| shared.store.ensure(&uid, req))
        {
            Ok(applied) => match durable(shared, &applied).await {
                Ok(()) => {
                    let status = if applied.outcome == Outcome::Created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    Ok((applied.outcome, json(status, &applied.lb)))
                }
                Err(e) => Err(e),
            },
            Err(e) => Err((e.outcome, api_error(&e))),
        },
        Action::Hosts(uid, body) => match parse_body::<HostsRequest>(&body)
            .and_then(|req| shared.store.update_hosts(&uid, req.nodes))
        {
            Ok(applied) => durable(shared, &applied)
                .await
                .map(|()| (applied.outcome, json(StatusCode::OK, &applied.lb))),
            Err(e) => Err((e.outcome, api_error(&e))),
        },
        Action::Get(uid) => match shared.store.get(&uid) {
            Some(lb) => Ok((Outcome::Ok, json(StatusCode::OK, &lb))),
            None => {
                let e = Store::not_found(&uid);
                Err((e.outcome, api_error(&e)))
            }
        },
        Action::Delete(uid) => match shared.store.delete(&uid) {
            Ok(applied) => durable(shared, &applied)
                .await
                .map(|()| (Outcome::Deleted, StatusCode::NO_CONTENT.into_response())),
            Err(e) => Err((e.outcome, api_error(&e))),
        },
        Action::List => Ok((
            Outcome::Ok,
            json(
                StatusCode::OK,
                &Inventory {
                    items: shared.store.list(),
                },
            ),
        )),
    };
    result.unwrap_or_else(|e| e)
}

/// A call as routed: the body, if the operation has one, is not read yet.
enum Call {
    Ensure(String, Body),
    Hosts(String, Body),
    Plain(Action),
}

impl Call {
    fn op(&self) -> Operation {
        match self {
            Call::Ensure(..) => Operation::Put,
            Call::Hosts(..) => Operation::Hosts,
            Call::Plain(a) => a.op(),
        }
    }
}

async fn run(shared: Arc<Shared>, headers: HeaderMap, call: Call) -> Response {
    let op = call.op();
    let rec = Recorder::new(shared.clone(), op);
    if let Some((outcome, resp)) = authorize(&shared, &headers) {
        return rec.finish(outcome, resp);
    }
    let action = match call {
        Call::Plain(a) => a,
        Call::Ensure(uid, body) | Call::Hosts(uid, body) => {
            let bytes = match read_body(&headers, body).await {
                Ok(b) => b,
                Err(e) => return rec.finish(e.outcome, api_error(&e)),
            };
            if op == Operation::Put {
                Action::Ensure(uid, bytes)
            } else {
                Action::Hosts(uid, bytes)
            }
        }
    };
    // Subscribe before drawing, so that a clear right after the draw still
    // releases a hang.
    let changed = shared.faults.subscribe();
    let d = shared.faults.decide(op);
    if let Some(latency) = d.latency {
        shared.counters.delayed(op);
        tokio::time::sleep(latency).await;
    }
    if let Some(h) = d.hang.as_ref().filter(|h| !h.after_commit)
        && let Some((outcome, resp)) = hang(&shared, op, h, changed.clone()).await
    {
        return rec.finish(outcome, resp);
    }
    if let Some(e) = d.error.as_ref().filter(|e| !e.after_commit) {
        return rec.finish(Outcome::InjectedError, injected_error(op, e));
    }
    if let Some(g) = &d.garbage {
        return rec.finish(Outcome::InjectedGarbage, garbage(g));
    }
    // In its own task: like a real cloud API, an operation that has started
    // completes (and is persisted) even if the client goes away.
    let task = tokio::spawn({
        let shared = shared.clone();
        async move { perform(&shared, action).await }
    });
    let (outcome, resp) = match task.await {
        Ok(done) => done,
        Err(e) => (
            Outcome::InternalError,
            error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                codes::INTERNAL,
                format!("the operation failed: {e}"),
            ),
        ),
    };
    if let Some(h) = d.hang.as_ref().filter(|h| h.after_commit)
        && let Some((outcome, resp)) = hang(&shared, op, h, changed).await
    {
        return rec.finish(outcome, resp);
    }
    if let Some(e) = d.error.as_ref().filter(|e| e.after_commit) {
        return rec.finish(Outcome::InjectedError, injected_error(op, e));
    }
    rec.finish(outcome, resp)
}

async fn ensure(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(shared, headers, Call::Ensure(uid, body)).await
}

async fn hosts(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(shared, headers, Call::Hosts(uid, body)).await
}

async fn get_one(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    headers: HeaderMap,
) -> Response {
    run(shared, headers, Call::Plain(Action::Get(uid))).await
}

async fn delete(
    State(shared): State<Arc<Shared>>,
    Path(uid): Path<String>,
    headers: HeaderMap,
) -> Response {
    run(shared, headers, Call::Plain(Action::Delete(uid))).await
}

async fn list(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    run(shared, headers, Call::Plain(Action::List)).await
}

fn admin_auth(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    authorize(shared, headers).map(|(_, resp)| resp)
}

async fn get_faults(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(resp) = admin_auth(&shared, &headers) {
        return resp;
    }
    json(StatusCode::OK, &shared.faults.get())
}

async fn put_faults(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    if let Some(resp) = admin_auth(&shared, &headers) {
        return resp;
    }
    let body = match read_body(&headers, body).await {
        Ok(b) => b,
        Err(e) => return api_error(&e),
    };
    let set = match parse_body::<FaultSet>(&body) {
        Ok(s) => s,
        Err(e) => return api_error(&e),
    };
    match shared.faults.set(set) {
        Ok(()) => {
            tracing::info!(faults = ?shared.faults.get(), "faults replaced");
            json(StatusCode::OK, &shared.faults.get())
        }
        Err(e) => error_response(
            StatusCode::BAD_REQUEST,
            codes::INVALID_REQUEST,
            e.to_string(),
        ),
    }
}

async fn put_op_faults(
    State(shared): State<Arc<Shared>>,
    Path(op): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Some(resp) = admin_auth(&shared, &headers) {
        return resp;
    }
    let body = match read_body(&headers, body).await {
        Ok(b) => b,
        Err(e) => return api_error(&e),
    };
    let op: Operation = match op.parse() {
        Ok(op) => op,
        Err(e) => {
            return error_response(StatusCode::NOT_FOUND, "UnknownPath", format!("{e}"));
        }
    };
    let faults = match parse_body::<OpFaults>(&body) {
        Ok(f) => f,
        Err(e) => return api_error(&e),
    };
    match shared.faults.set_operation(op, faults) {
        Ok(()) => {
            tracing::info!(%op, faults = ?shared.faults.get(), "faults of one operation replaced");
            json(StatusCode::OK, &shared.faults.get())
        }
        Err(e) => error_response(
            StatusCode::BAD_REQUEST,
            codes::INVALID_REQUEST,
            e.to_string(),
        ),
    }
}

async fn clear_faults(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(resp) = admin_auth(&shared, &headers) {
        return resp;
    }
    shared.faults.clear();
    tracing::info!("faults cleared");
    json(StatusCode::OK, &shared.faults.get())
}

async fn get_stats(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(resp) = admin_auth(&shared, &headers) {
        return resp;
    }
    json(StatusCode::OK, &shared.stats())
}

async fn reset_stats(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(resp) = admin_auth(&shared, &headers) {
        return resp;
    }
    shared.counters.reset();
    StatusCode::NO_CONTENT.into_response()
}

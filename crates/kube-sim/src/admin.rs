//! The admin API under `/_sim/` (JSON). Not recorded in the request log and
//! never paused or faulted.
//!
//! | method & path | effect |
//! |---|---|
//! | `GET /_sim/requests?user=&userAgent=&verb=&resource=&subresource=&namespace=&name=&code=&since=` | recorded requests (oldest first) and `lastSeq` |
//! | `GET /_sim/requests/count?...` | `{"count": n}` with the same filters |
//! | `GET /_sim/counters` | counts by verb, resource, code, user agent |
//! | `POST /_sim/requests/reset` | clears log and counters |
//! | `GET /_sim/faults` | the fault rules (with how often each fired) |
//! | `POST /_sim/faults` (a FaultRule) | adds a rule, answers `{"id": n}` |
//! | `DELETE /_sim/faults/<id>` / `DELETE /_sim/faults` | removes one / all (also resumes) |
//! | `POST /_sim/faults/seed` `{"seed": n}` | reseeds the fraction decisions |
//! | `POST /_sim/pause`, `POST /_sim/resume` | hang / release every API request |
//! | `POST /_sim/watches/cut` | ends every open watch now |
//! | `POST /_sim/watches/gone?count=n` | the next n watches get 410 Gone |
//! | `GET/POST /_sim/admission/storage-protection` `{"enabled": b}` | the StorageObjectInUseProtection switch |
//! | `GET /_sim/state` | current resourceVersion, paused, admission switch |
//! | `GET /_sim/pods` | pods the emulated kubelets run: containers, pids, restarts, host ports, logs |
//! | `POST /_sim/pods/{ns}/{name}/signal?sig=KILL&container=c` | sends a signal to the pod's process(es) |

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::faults::FaultRule;
use crate::http::{RespBody, State};
use crate::requests::RequestFilter;

fn reply(code: u16, v: Value) -> Response<RespBody> {
    let mut r = Response::new(RespBody::Full(Some(Bytes::from(v.to_string()))));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn bad(msg: impl std::fmt::Display) -> Response<RespBody> {
    reply(400, json!({"error": msg.to_string()}))
}

fn filter_from_query(q: Option<&str>) -> Result<RequestFilter, String> {
    let mut f = RequestFilter::default();
    for (k, v) in form_urlencoded::parse(q.unwrap_or("").as_bytes()) {
        let v = v.into_owned();
        match k.as_ref() {
            "user" => f.user = Some(v),
            "userAgent" => f.user_agent = Some(v),
            "verb" => f.verb = Some(v),
            "resource" => f.resource = Some(v),
            "subresource" => f.subresource = Some(v),
            "namespace" => f.namespace = Some(v),
            "name" => f.name = Some(v),
            "code" => {
                f.code = Some(
                    v.parse()
                        .map_err(|_| format!("code: not a number: {v:?}"))?,
                )
            }
            "since" => {
                f.since = Some(
                    v.parse()
                        .map_err(|_| format!("since: not a number: {v:?}"))?,
                )
            }
            other => return Err(format!("unknown filter {other:?}")),
        }
    }
    Ok(f)
}

pub(crate) async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<RespBody> {
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_string();
    let query = req.uri().query().map(str::to_string);
    let body = match crate::http::read_limited(req).await {
        Ok(b) => b,
        Err(e) => return crate::http::error_response(&e),
    };
    let json_body = || -> Result<Value, String> {
        if body.iter().all(u8::is_ascii_whitespace) {
            Ok(json!({}))
        } else {
            serde_json::from_slice(&body).map_err(|e| format!("request body is not JSON: {e}"))
        }
    };
    match (method, path.as_str()) {
        (Method::GET, "/_sim/requests") => match filter_from_query(query.as_deref()) {
            Ok(f) => reply(
                200,
                json!({"items": state.requests.records(&f), "lastSeq": state.requests.last_seq()}),
            ),
            Err(e) => bad(e),
        },
        (Method::GET, "/_sim/requests/count") => match filter_from_query(query.as_deref()) {
            Ok(f) => reply(200, json!({"count": state.requests.count(&f)})),
            Err(e) => bad(e),
        },
        (Method::GET, "/_sim/counters") => reply(200, json!({"items": state.requests.counters()})),
        (Method::POST, "/_sim/requests/reset") | (Method::DELETE, "/_sim/requests") => {
            state.requests.reset();
            reply(200, json!({}))
        }
        (Method::GET, "/_sim/faults") => reply(200, json!({"items": state.faults.rules()})),
        (Method::POST, "/_sim/faults") => {
            let v = match json_body() {
                Ok(v) => v,
                Err(e) => return bad(e),
            };
            match serde_json::from_value::<FaultRule>(v) {
                Ok(rule) => reply(201, json!({"id": state.faults.add(rule)})),
                Err(e) => bad(format!("invalid fault rule: {e}")),
            }
        }
        (Method::DELETE, "/_sim/faults") => {
            state.faults.clear();
            reply(200, json!({}))
        }
        (Method::POST, "/_sim/faults/seed") => match json_body() {
            Ok(v) => match v.get("seed").and_then(Value::as_u64) {
                Some(s) => {
                    state.faults.reseed(s);
                    reply(200, json!({}))
                }
                None => bad("body needs {\"seed\": <u64>}"),
            },
            Err(e) => bad(e),
        },
        (Method::DELETE, p) if p.starts_with("/_sim/faults/") => {
            match p["/_sim/faults/".len()..].parse::<u64>() {
                Ok(id) if state.faults.remove(id) => reply(200, json!({})),
                Ok(id) => reply(404, json!({"error": format!("no fault rule {id}")})),
                Err(_) => bad("fault id must be a number"),
            }
        }
        (Method::POST, "/_sim/pause") => {
            state.faults.pause();
            reply(200, json!({"paused": true}))
        }
        (Method::POST, "/_sim/resume") => {
            state.faults.resume();
            reply(200, json!({"paused": false}))
        }
        (Method::POST, "/_sim/watches/cut") => {
            state.faults.cut_watches();
            reply(200, json!({}))
        }
        (Method::POST, "/_sim/watches/gone") => {
            let mut n = 1u64;
            for (k, v) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
                if k == "count" {
                    match v.parse() {
                        Ok(c) => n = c,
                        Err(_) => return bad("count must be a number"),
                    }
                }
            }
            state.faults.gone_next_watches(n);
            reply(200, json!({}))
        }
        (Method::GET, "/_sim/admission/storage-protection") => {
            reply(200, json!({"enabled": state.store.storage_protection()}))
        }
        (Method::POST, "/_sim/admission/storage-protection") => match json_body() {
            Ok(v) => match v.get("enabled").and_then(Value::as_bool) {
                Some(on) => {
                    state.store.set_storage_protection(on);
                    reply(200, json!({"enabled": on}))
                }
                None => bad("body needs {\"enabled\": <bool>}"),
            },
            Err(e) => bad(e),
        },
        (Method::GET, "/_sim/state") => reply(
            200,
            json!({
                "resourceVersion": state.store.current_rv().to_string(),
                "paused": state.faults.is_paused(),
                "storageProtectionAdmission": state.store.storage_protection(),
            }),
        ),
        (m, p) if p.starts_with("/_sim/pods") => {
            match crate::cluster::runtime::pods_endpoint(
                &state.runtimes,
                &m,
                p,
                query.as_deref().unwrap_or(""),
            ) {
                Some((code, body)) => reply(code, body),
                None => reply(404, json!({"error": format!("no admin endpoint {path}")})),
            }
        }
        _ => reply(404, json!({"error": format!("no admin endpoint {path}")})),
    }
}

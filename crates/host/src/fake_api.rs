//! An in-memory API server for unit tests of the host and leader election
//! under paused tokio time (no sockets: a tower service behind
//! `kube::Client`). It answers `GET /version`, and keeps Leases: GET, POST,
//! and PATCH (strategic-merge and apply patches of a Lease are flat, so a
//! JSON merge is exact for them). Tests can stop it answering, and edit the
//! stored Lease as another replica would.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use parking_lot::Mutex;
use serde_json::{Value, json};

#[derive(Default)]
struct State {
    leases: HashMap<String, Value>,
    rv: u64,
    down: bool,
}

/// A handle on the fake server's state.
#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn status(code: u16, reason: &str, message: &str) -> (StatusCode, Value) {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

impl FakeApi {
    pub fn new() -> Self {
        Self::default()
    }

    /// A client talking to this server.
    pub fn client(&self) -> kube::Client {
        let me = self.clone();
        let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
            let me = me.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let (code, value) = me.handle(&parts.method, parts.uri.path(), &body);
                let bytes = serde_json::to_vec(&value).unwrap_or_default();
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(Bytes::from(bytes)))
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
            }
        });
        kube::Client::new(svc, "default")
    }

    /// While down, every request answers 503.
    pub fn set_down(&self, down: bool) {
        self.state.lock().down = down;
    }

    /// The stored Lease `namespace/name`.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .leases
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    /// Merges `spec` into the stored Lease, as another writer would.
    pub fn patch_lease(&self, namespace: &str, name: &str, spec: Value) {
        let mut st = self.state.lock();
        st.rv += 1;
        let rv = st.rv.to_string();
        if let Some(l) = st.leases.get_mut(&format!("{namespace}/{name}")) {
            merge(
                l,
                &json!({"spec": spec, "metadata": {"resourceVersion": rv}}),
            );
        }
    }

    fn handle(&self, method: &Method, path: &str, body: &[u8]) -> (StatusCode, Value) {
        let mut st = self.state.lock();
        if st.down {
            return status(503, "ServiceUnavailable", "the fake API server is down");
        }
        if path == "/version" {
            return (
                StatusCode::OK,
                json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0",
                       "gitCommit": "", "gitTreeState": "", "buildDate": "",
                       "goVersion": "", "compiler": "", "platform": "linux/amd64"}),
            );
        }
        let Some(rest) = path.strip_prefix("/apis/coordination.k8s.io/v1/namespaces/") else {
            return status(404, "NotFound", "not served by the fake API server");
        };
        let segs: Vec<&str> = rest.split('/').collect();
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        match (method, segs.as_slice()) {
            (&Method::GET, [ns, "leases", name]) => match st.leases.get(&format!("{ns}/{name}")) {
                Some(l) => (StatusCode::OK, l.clone()),
                None => status(404, "NotFound", &format!("leases \"{name}\" not found")),
            },
            (&Method::POST, [ns, "leases"]) => {
                let name = body
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let key = format!("{ns}/{name}");
                if st.leases.contains_key(&key) {
                    return status(409, "AlreadyExists", "already exists");
                }
                st.rv += 1;
                let mut l = body;
                merge(
                    &mut l,
                    &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"namespace": ns, "resourceVersion": st.rv.to_string(),
                                         "uid": format!("uid-{name}")}}),
                );
                st.leases.insert(key, l.clone());
                (StatusCode::CREATED, l)
            }
            (&Method::PATCH, [ns, "leases", name]) => {
                st.rv += 1;
                let rv = st.rv.to_string();
                match st.leases.get_mut(&format!("{ns}/{name}")) {
                    Some(l) => {
                        merge(l, &body);
                        merge(l, &json!({"metadata": {"resourceVersion": rv}}));
                        (StatusCode::OK, l.clone())
                    }
                    None => status(404, "NotFound", &format!("leases \"{name}\" not found")),
                }
            }
            _ => status(405, "MethodNotAllowed", "not served by the fake API server"),
        }
    }
}

//! Differential conformance (issue 23): a scenario sends the same requests
//! to kube-sim and to a real kube-apiserver 1.36 and records what each
//! answers (status, reason, message, causes, field paths, the objects'
//! final state) in a [`Transcript`]; the two transcripts must be equal after
//! [`normalize`] has masked what legitimately differs (uids,
//! resourceVersions, timestamps, random names and addresses). The real
//! server is the oracle: its answers are asked for, never kept in the test.
//!
//! The real server: etcd + kube-apiserver v1.36.3 started by the
//! `control-plane` crate, one per test binary (no kube-controller-manager,
//! so nothing but the requests changes the objects), or the cluster of the
//! kubeconfig named by `KUBE_SIM_REAL_KUBECONFIG`.

use std::future::Future;
use std::path::{Path, PathBuf};

use kube::Client;
use kube::client::Body;
use kube_sim::{KubeSim, SimConfig};
use serde_json::{Map, Value, json};

pub const REAL_ENV: &str = "KUBE_SIM_REAL_KUBECONFIG";

/// The real API server of this test binary.
pub struct RealServer {
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// The control plane this binary started (none for `KUBE_SIM_REAL_KUBECONFIG`).
    pub control_plane: Option<std::sync::Arc<control_plane::ControlPlane>>,
}

/// An admin client from a kubeconfig file.
pub async fn client_from(path: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
    Client::try_from(config).unwrap_or_else(|e| panic!("client for {}: {e}", path.display()))
}

/// The real API server: `KUBE_SIM_REAL_KUBECONFIG`'s cluster, or the
/// control plane this test binary shares (started on first use).
pub async fn real_server() -> RealServer {
    if let Ok(path) = std::env::var(REAL_ENV) {
        let kubeconfig = PathBuf::from(path);
        return RealServer {
            client: client_from(&kubeconfig).await,
            kubeconfig,
            control_plane: None,
        };
    }
    // The namespace controller and the garbage collector clean up after the
    // tests (and some tests check them); the admission plugins that need
    // other controllers stay off, as on kube-sim by default.
    // The beta versions kube-sim serves by default are served here too.
    let config = || {
        let mut c = control_plane::Config::default()
            .with_kcm(["namespace-controller", "garbage-collector-controller"])
            .disable_admission("ServiceAccount")
            .disable_admission("StorageObjectInUseProtection");
        c.runtime_config = vec![
            "admissionregistration.k8s.io/v1beta1=true".into(),
            "storage.k8s.io/v1beta1=true".into(),
        ];
        c
    };
    let cp = control_plane::ControlPlane::shared("kube-sim-judge", config)
        .await
        .unwrap_or_else(|e| panic!("starting the real control plane: {e}"));
    let client = cp
        .client()
        .await
        .unwrap_or_else(|e| panic!("a client of the real control plane: {e}"));
    RealServer {
        client,
        kubeconfig: cp.kubeconfig_path().to_path_buf(),
        control_plane: Some(cp),
    }
}

/// One answer: the HTTP status and the body (JSON, or the text as a string).
#[derive(Debug, Clone)]
pub struct Reply {
    pub code: u16,
    pub body: Value,
}

impl Reply {
    /// The answer as the transcript records it.
    pub fn record(&self) -> Value {
        json!({"code": self.code, "body": self.body})
    }
}

/// Sends one request as is (no client-side retries or decoding).
pub async fn call(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Reply {
    call_with(client, method, path, content_type, body, &[]).await
}

/// [`call`] with extra request headers (e.g. `Impersonate-User`).
pub async fn call_with(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Body::from(body.as_bytes().to_vec()))
        .unwrap_or_else(|e| panic!("building {method} {path}: {e}"));
    let resp = client
        .send(req)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let code = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect_bytes()
        .await
        .unwrap_or_else(|e| panic!("reading the answer to {method} {path}: {e}"));
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Reply { code, body }
}

pub async fn get(client: &Client, path: &str) -> Reply {
    call(client, "GET", path, "application/json", "").await
}

pub async fn post(client: &Client, path: &str, body: &Value) -> Reply {
    call(client, "POST", path, "application/json", &body.to_string()).await
}

pub async fn put(client: &Client, path: &str, body: &Value) -> Reply {
    call(client, "PUT", path, "application/json", &body.to_string()).await
}

pub async fn delete(client: &Client, path: &str) -> Reply {
    call(client, "DELETE", path, "application/json", "").await
}

/// PATCH with a patch type: `json`, `merge`, `strategic` or `apply`
/// (server-side apply, `fieldManager` and `force` in `path`).
pub async fn patch(client: &Client, path: &str, kind: &str, body: &str) -> Reply {
    let ct = match kind {
        "json" => "application/json-patch+json",
        "merge" => "application/merge-patch+json",
        "strategic" => "application/strategic-merge-patch+json",
        "apply" => "application/apply-patch+yaml",
        other => panic!("unknown patch type {other}"),
    };
    call(client, "PATCH", path, ct, body).await
}

/// What a scenario saw, in order, with the strings it declared volatile.
#[derive(Debug, Default)]
pub struct Transcript {
    entries: Vec<(String, Value)>,
    volatile: Vec<(String, String)>,
}

impl Transcript {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `value` under `label`.
    pub fn note(&mut self, label: &str, value: Value) {
        self.entries.push((label.to_string(), value));
    }

    /// Records an answer.
    pub fn reply(&mut self, label: &str, r: &Reply) {
        self.note(label, r.record());
    }

    /// `s` (e.g. a dynamically allocated IP) differs between servers:
    /// replace it with `token` everywhere.
    pub fn volatile(&mut self, s: &str, token: &str) {
        if !s.is_empty() {
            self.volatile.push((s.to_string(), token.to_string()));
        }
    }

    fn normalized(&self) -> Vec<(String, Value)> {
        self.entries
            .iter()
            .map(|(l, v)| {
                let mut v = v.clone();
                for (s, token) in &self.volatile {
                    replace_strings(&mut v, s, token);
                }
                normalize(&mut v);
                (l.clone(), v)
            })
            .collect()
    }
}

/// `s` with each whole occurrence of `from` (not part of a longer name,
/// number or address) replaced by `to`.
fn replace_token(s: &str, from: &str, to: &str) -> String {
    let part = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-');
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + from.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(part) || after.is_some_and(part) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

fn replace_strings(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s.contains(from) => *s = replace_token(s, from, to),
        Value::Number(n) if n.to_string() == from => *v = Value::String(to.to_string()),
        Value::Array(a) => a.iter_mut().for_each(|x| replace_strings(x, from, to)),
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if let Some(mut x) = m.shift_remove(&k) {
                    replace_strings(&mut x, from, to);
                    m.insert(replace_token(&k, from, to), x);
                }
            }
        }
        _ => {}
    }
}

const TIME_KEYS: &[&str] = &[
    "creationTimestamp",
    "deletionTimestamp",
    "lastTransitionTime",
    "time",
    "renewTime",
    "acquireTime",
    "lastPhaseTransitionTime",
];

/// Masks what differs between two servers that answer alike: uids,
/// resourceVersions, timestamps, table ages; sorts object keys (key order is
/// not part of the API); a JSON document quoted in a message (the patched
/// object of a patch that does not decode) has the same values masked, but
/// its text is compared ([`normalize_quoted_json`]).
pub fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match k.as_str() {
                    "uid" | "resourceVersion" if x.is_string() => *x = json!("<masked>"),
                    k if TIME_KEYS.contains(&k) && x.is_string() => *x = json!("<time>"),
                    // Entries are sorted by their second first
                    // (apimachinery's encodeManagedFields, as kube-sim's
                    // `encode_entries`): two runs of one scenario that
                    // straddle a second differently order the same entries
                    // differently. Compared as a set, in a canonical order.
                    "managedFields" if x.is_array() => {
                        normalize(x);
                        if let Value::Array(a) = x {
                            a.sort_by_cached_key(|e| e.to_string());
                        }
                    }
                    "message" | "reason" => {
                        if let Value::String(s) = x {
                            *s = normalize_message(s);
                        }
                        normalize(x)
                    }
                    _ => normalize(x),
                }
            }
            if m.get("kind").and_then(Value::as_str) == Some("Table") {
                mask_table_ages(m);
            }
            let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            m.extend(entries);
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn mask_table_ages(m: &mut Map<String, Value>) {
    let age_cols: Vec<usize> = m
        .get("columnDefinitions")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .enumerate()
                .filter(|(_, c)| c.get("name").and_then(Value::as_str) == Some("Age"))
                .map(|(i, _)| i)
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Array(rows)) = m.get_mut("rows") else {
        return;
    };
    for row in rows {
        let Some(Value::Array(cells)) = row.get_mut("cells") else {
            continue;
        };
        let n = cells.len();
        for (i, c) in cells.iter_mut().enumerate() {
            // Upstream's IPAddress printer adds an age cell without a column.
            if age_cols.contains(&i) || (i == n - 1 && i >= age_cols.len().max(1) && is_age(c)) {
                *c = json!("<age>");
            }
        }
    }
}

fn is_age(c: &Value) -> bool {
    c.as_str().is_some_and(|s| {
        !s.is_empty()
            && s.chars().next().is_some_and(|ch| ch.is_ascii_digit())
            && s.chars().last().is_some_and(|ch| "smhdy".contains(ch))
    })
}

/// What a message may legitimately differ in: uids and resourceVersions
/// of the objects it names. (The diff upstream appends to a `spec is
/// immutable` error is compared whole: apimachinery's `diff.Diff` is a
/// unified diff of indented JSON, deterministic, not go-cmp's.)
fn normalize_message(s: &str) -> String {
    let s = mask_uuids(s);
    let s = mask_number_after(&s, "in record (");
    let s = mask_number_after(&s, "resource version: ");
    let s = mask_number_after(&s, "current: ");
    normalize_quoted_json(&s)
}

/// Every `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` as `<uid>`.
fn mask_uuids(s: &str) -> String {
    let b = s.as_bytes();
    let is_uuid = |w: &[u8]| {
        w.len() == 36
            && w.iter().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            })
    };
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if i + 36 <= b.len() && is_uuid(&b[i..i + 36]) && s.is_char_boundary(i) {
            out.push_str("<uid>");
            i += 36;
        } else {
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The digits after each `marker` as `<n>`.
fn mask_number_after(s: &str, marker: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(marker) {
        out.push_str(&rest[..i + marker.len()]);
        rest = &rest[i + marker.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("<n>");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// A Go-quoted JSON object inside a message (`Invalid value: "{\"a\":1}"`,
/// the patched object of a patch that does not decode) with the values of
/// uids, resourceVersions and timestamps masked as [`normalize`] masks them,
/// and nothing else changed: its key order and number literals are what
/// upstream's patch library and encoder make of the request, and are
/// compared.
fn normalize_quoted_json(s: &str) -> String {
    const MARK: &str = "Invalid value: \"{";
    let Some(start) = s.find(MARK) else {
        return s.to_string();
    };
    let quoted_start = start + MARK.len() - 2;
    let Some((inner, end)) = unquote(&s[quoted_start..]) else {
        return s.to_string();
    };
    let mut doc = inner;
    for key in ["uid", "resourceVersion"] {
        doc = mask_string_values(&doc, key, "<masked>");
    }
    for key in TIME_KEYS {
        doc = mask_string_values(&doc, key, "<time>");
    }
    format!(
        "{}{}{}",
        &s[..quoted_start],
        Value::String(doc),
        &s[quoted_start + end..]
    )
}

/// JSON text `doc` with the string value of each member named `key`
/// replaced by `token`.
fn mask_string_values(doc: &str, key: &str, token: &str) -> String {
    let marker = format!("\"{key}\":\"");
    let mut out = String::new();
    let mut rest = doc;
    while let Some(i) = rest.find(&marker) {
        out.push_str(&rest[..i + marker.len()]);
        rest = &rest[i + marker.len()..];
        let mut escaped = false;
        let Some(close) = rest.char_indices().find_map(|(j, c)| match c {
            '"' if !escaped => Some(j),
            '\\' => {
                escaped = !escaped;
                None
            }
            _ => {
                escaped = false;
                None
            }
        }) else {
            break;
        };
        out.push_str(token);
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// Reads a quoted string at the start of `s`; (its text, bytes consumed).
fn unquote(s: &str) -> Option<(String, usize)> {
    let mut chars = s.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => {
                let (_, e) = chars.next()?;
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    other => other,
                });
            }
            c => out.push(c),
        }
    }
    None
}

/// Where a scenario runs: a client and the names it may use, the same on
/// both servers.
pub struct Ctx {
    pub client: Client,
    /// A namespace created for the scenario.
    pub ns: String,
    /// A suffix unique to this run, for cluster-scoped names.
    pub run: String,
    /// Whether this is the real server.
    pub real: bool,
}

impl Ctx {
    /// `name-<run>`: a cluster-scoped name unique to this run.
    pub fn unique(&self, name: &str) -> String {
        format!("{name}-{}", self.run)
    }
}

/// A short id unique to this run (names built from it are the same on both
/// servers of one comparison).
pub fn run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!("{:x}{}", t & 0xff_ffff, N.fetch_add(1, Ordering::Relaxed))
}

async fn make_namespace(client: &Client, name: &str) {
    let r = post(
        client,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": name}}),
    )
    .await;
    assert_eq!(r.code, 201, "creating namespace {name}: {:?}", r.body);
}

/// Runs `scenario` against kube-sim (configured by `configure` from what the
/// real server answers, when there is one) and against the real server, and
/// asserts that the normalised transcripts are equal.
pub async fn differential<C, CF, S, F>(name: &str, configure: C, scenario: S)
where
    C: FnOnce(Client) -> CF,
    CF: Future<Output = SimConfig>,
    S: Fn(Ctx) -> F,
    F: Future<Output = Transcript>,
{
    let real = real_server().await.client;
    let cfg = configure(real.clone()).await;
    let run = run_id();
    let ns = format!("{name}-{run}");
    let sim = KubeSim::start(cfg)
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
    let sim_client = sim.client().await;
    make_namespace(&sim_client, &ns).await;
    let sim_t = scenario(Ctx {
        client: sim_client,
        ns: ns.clone(),
        run: run.clone(),
        real: false,
    })
    .await;
    sim.shutdown().await;
    make_namespace(&real, &ns).await;
    let real_t = scenario(Ctx {
        client: real.clone(),
        ns: ns.clone(),
        run,
        real: true,
    })
    .await;
    let _ = delete(&real, &format!("/api/v1/namespaces/{ns}")).await;
    assert_same(name, &sim_t, &real_t);
}

/// Panics listing every entry where kube-sim answered differently.
pub fn assert_same(name: &str, sim: &Transcript, real: &Transcript) {
    let (s, r) = (sim.normalized(), real.normalized());
    let mut diffs = Vec::new();
    for i in 0..s.len().max(r.len()) {
        match (s.get(i), r.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => diffs.push(format!(
                "#{i} {}:\n  kube-sim: {}\n  real:     {}",
                a.or(b).map(|x| x.0.as_str()).unwrap_or(""),
                a.map(|x| x.1.to_string())
                    .unwrap_or_else(|| "(nothing)".into()),
                b.map(|x| x.1.to_string())
                    .unwrap_or_else(|| "(nothing)".into()),
            )),
        }
    }
    assert!(
        diffs.is_empty(),
        "{name}: kube-sim differs from the real API server in {} of {} answers:\n{}",
        diffs.len(),
        r.len(),
        diffs.join("\n")
    );
}

/// A kube-sim configuration whose service range is the real server's (its
/// `kubernetes` ServiceCIDR).
pub async fn same_service_range(real: Client) -> SimConfig {
    let mut cfg = SimConfig::default();
    let r = get(&real, "/apis/networking.k8s.io/v1/servicecidrs/kubernetes").await;
    if let Some(c) = r.body.pointer("/spec/cidrs/0").and_then(Value::as_str) {
        cfg.service_cluster_ip_range = c.to_string();
    }
    cfg
}

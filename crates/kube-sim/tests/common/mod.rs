//! Shared test harness: a kube-sim instance, or a real cluster when
//! `KUBE_SIM_CONFORMANCE_KUBECONFIG` names a kubeconfig.
#![allow(dead_code)]

pub mod cluster;
pub mod differential;
pub mod real;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::{KubeSim, SimConfig};

pub const REAL_CLUSTER_ENV: &str = "KUBE_SIM_CONFORMANCE_KUBECONFIG";

/// What a test runs against.
pub struct Target {
    pub client: Client,
    pub sim: Option<KubeSim>,
    pub kubeconfig: PathBuf,
    /// Names made by [`Target::namespace`] and [`Target::unique`]: the same
    /// sequence on both servers of a [`conform`] run.
    run: String,
    counter: std::sync::atomic::AtomicU64,
    /// What the test saw (errors through [`Target::status`], values through
    /// [`Target::record`]), compared across servers by [`conform`].
    transcript: std::sync::Arc<std::sync::Mutex<differential::Transcript>>,
    /// Set when a check needed kube-sim's controls on the real server (the
    /// rest of that test is not compared).
    sim_only: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The real control plane, when this is it and this binary started it.
    control_plane: Option<std::sync::Arc<control_plane::ControlPlane>>,
}

impl Target {
    /// A kube-sim with the default configuration, or the real cluster.
    pub async fn new() -> Target {
        Target::with(SimConfig::default()).await
    }

    /// A kube-sim with `cfg`, or the real cluster (then `cfg` is ignored).
    pub async fn with(cfg: SimConfig) -> Target {
        if let Ok(path) = std::env::var(REAL_CLUSTER_ENV) {
            let path = PathBuf::from(path);
            let client = differential::client_from(&path).await;
            return Target::real(client, path, &differential::run_id());
        }
        Target::simulator(cfg, &differential::run_id()).await
    }

    async fn simulator(cfg: SimConfig, run: &str) -> Target {
        let sim = KubeSim::start(cfg)
            .await
            .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
        let client = sim.client().await;
        let kubeconfig = sim.kubeconfig_path().to_path_buf();
        Target::make(client, Some(sim), kubeconfig, run)
    }

    fn real(client: Client, kubeconfig: PathBuf, run: &str) -> Target {
        Target::make(client, None, kubeconfig, run)
    }

    fn make(client: Client, sim: Option<KubeSim>, kubeconfig: PathBuf, run: &str) -> Target {
        Target {
            client,
            sim,
            kubeconfig,
            run: run.to_string(),
            counter: Default::default(),
            transcript: Default::default(),
            sim_only: Default::default(),
            control_plane: None,
        }
    }

    /// A client authenticated as `user`: kube-sim's token, or on the real
    /// control plane a client certificate with the groups its authenticator
    /// would give (a ServiceAccount's `system:serviceaccounts` and
    /// `system:serviceaccounts:<namespace>`, a node's `system:nodes`).
    pub async fn client_as(&self, user: &str) -> Client {
        if let Some(sim) = &self.sim {
            return sim.client_as(user).await;
        }
        let Some(cp) = &self.control_plane else {
            panic!("a client as {user}: only on kube-sim or the control plane this binary started");
        };
        let groups = real_groups(user);
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        cp.client_for(user, &groups)
            .await
            .unwrap_or_else(|e| panic!("a client of the real control plane as {user}: {e}"))
    }

    /// The kubeconfig [`Target::client_as`] would use for `user`: kube-sim's
    /// (a token, or with `SimConfig::client_certificates` a client
    /// certificate kube-sim issued), or on the real control plane a new
    /// client certificate with the same groups.
    pub fn kubeconfig_as(&self, user: &str) -> PathBuf {
        if let Some(sim) = &self.sim {
            return sim
                .kubeconfig_for(user)
                .unwrap_or_else(|e| panic!("a kubeconfig as {user}: {e}"));
        }
        let Some(cp) = &self.control_plane else {
            panic!(
                "a kubeconfig as {user}: only on kube-sim or the control plane this binary started"
            );
        };
        let groups = real_groups(user);
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        let file: String = user
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        cp.write_kubeconfig_for(&file, user, &groups)
            .unwrap_or_else(|e| panic!("a kubeconfig of the real control plane as {user}: {e}"))
    }

    /// Whether this is kube-sim (not the real server).
    pub fn is_sim(&self) -> bool {
        self.sim.is_some()
    }

    /// The simulator; tests that need its controls call this and, against a
    /// real cluster, say so and stop.
    pub fn sim(&self) -> Option<&KubeSim> {
        if self.sim.is_none() {
            eprintln!("NOTE: this check needs kube-sim's controls; not run against a real cluster");
            self.sim_only
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.sim.as_ref()
    }

    /// `prefix-<run>-<n>`: a name unique to this run, the same on both
    /// servers of a [`conform`] run.
    pub fn unique(&self, prefix: &str) -> String {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{prefix}-{}-{n}", self.run)
    }

    /// Creates a fresh namespace for the test.
    pub async fn namespace(&self, prefix: &str) -> String {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let mut ns = Namespace::default();
        ns.metadata.name = Some(self.unique(prefix));
        let created = api
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating a test namespace: {e}"));
        created.metadata.name.unwrap_or_default()
    }

    pub async fn cleanup_namespace(&self, ns: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(ns, &DeleteParams::default()).await;
    }

    /// The API Status of a failed call, recorded for [`conform`]'s
    /// comparison.
    pub fn status(&self, e: kube::Error) -> kube::core::Status {
        let s = status(e);
        let v = serde_json::to_value(&s).unwrap_or_default();
        self.record("error", v);
        s
    }

    /// Records `value` under `label` for [`conform`]'s comparison.
    pub fn record(&self, label: &str, value: serde_json::Value) {
        if let Ok(mut t) = self.transcript.lock() {
            t.note(label, value);
        }
    }

    /// `s` differs between the servers (e.g. an allocated address).
    pub fn volatile(&self, s: &str, token: &str) {
        if let Ok(mut t) = self.transcript.lock() {
            t.volatile(s, token);
        }
    }
}

/// The groups of `user`'s client certificate on the real control plane:
/// those kube-sim's authenticator gives (a ServiceAccount's
/// `system:serviceaccounts` and `system:serviceaccounts:<namespace>`, a
/// node's `system:nodes`).
fn real_groups(user: &str) -> Vec<String> {
    match user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, _)) => vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ],
        None if user.starts_with("system:node:") => vec!["system:nodes".to_string()],
        None => vec![],
    }
}

/// Runs `test` against kube-sim (configured by `cfg`) and against the real
/// kube-apiserver 1.36 of this test binary (see [`differential`]), then
/// asserts that they answered the same: every error Status the test took
/// through [`Target::status`] and every value it [`Target::record`]ed. Each
/// run's own assertions hold on its server, so a claim about "what the real
/// server answers" is checked on the real server.
pub async fn conform(name: &str, cfg: SimConfig, test: impl AsyncFn(Target)) {
    let run = differential::run_id();
    let sim = Target::simulator(cfg, &run).await;
    let sim_t = sim.transcript.clone();
    eprintln!("conform {name}: against kube-sim");
    test(sim).await;
    let real = differential::real_server().await;
    let mut target = Target::real(real.client, real.kubeconfig, &run);
    target.control_plane = real.control_plane;
    let real_t = target.transcript.clone();
    let sim_only = target.sim_only.clone();
    eprintln!("conform {name}: against the real API server");
    test(target).await;
    if sim_only.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("NOTE: {name}: needs kube-sim's controls; the answers were not compared");
        return;
    }
    let (Ok(s), Ok(r)) = (sim_t.lock(), real_t.lock()) else {
        panic!("{name}: a transcript lock was poisoned");
    };
    differential::assert_same(name, &s, &r);
}

/// Polls `f` until it returns `Some`, for up to 30 s.
pub async fn eventually<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    test_support::eventually(Duration::from_secs(30), what, f).await
}

/// The API Status of a failed call.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A unique suffix for cluster-scoped names.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!(
        "{prefix}-{:x}-{}",
        t & 0xffffff,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub use test_support::kubectl::tool;

/// A plain HTTP/1.1 request to the simulator (no client-side retries),
/// answering (status code, body).
pub async fn raw(
    sim: &KubeSim,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(sim.addr())
        .await
        .unwrap_or_else(|e| panic!("connecting to kube-sim: {e}"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: kube-sim\r\nAuthorization: Bearer admin\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("writing request: {e}"));
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .await
        .unwrap_or_else(|e| panic!("reading response: {e}"));
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, dechunk(&body))
}

/// Undoes chunked transfer encoding when present.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((len, tail)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(n) = usize::from_str_radix(len.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 {
            return out;
        }
        if tail.len() < n {
            return body.to_string();
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
}

//! `make bench-real`: ours beside upstream on one real kube-apiserver.
//!
//! What the three benchmarks (pv-protection's `bench_real_pv`,
//! lb-cleanup's `bench_real_lb`, vac-protection's `bench_real_vac`) share:
//! the control plane; the contenders, each its own process (KCM with a
//! chosen `--controllers` list and client QPS, the upstream service
//! controller, our manager binary), with their peak RSS and CPU seconds;
//! a watch that records when each object became "done" and when it was
//! deleted; bulk writes at a fixed number in flight (the population, the
//! finalizer-PATCH ceiling, the resets between contenders); the audit log
//! tallied by user and verb; and ratios printed with their goals.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use control_plane::ControlPlane;
use control_plane::process::{Proc, Spec};
use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use protection_core::controllers::PolicyRule;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::{Bed, Mark, Options, Request, Server};

/// The real control plane of one benchmark: etcd + kube-apiserver, no KCM
/// (each contender starts its own), StorageObjectInUseProtection off so
/// that objects are created without finalizers and the back-fill is
/// measured.
pub struct RealBench {
    pub server: Server,
    /// The admin (`system:masters`) by a client certificate.
    pub admin: kube::Client,
    /// The admin by a static bearer token (`admin-token`, also in
    /// `system:masters`).
    pub admin_token: kube::Client,
    n: AtomicU32,
}

impl RealBench {
    pub async fn start(name: &str) -> Result<RealBench> {
        let t = Instant::now();
        let options = Options {
            profiling: true,
            ..Options::named(name)
        };
        let server = Server::start(Bed::Real, options).await?;
        let admin = server.client().await?;
        let admin_token = server.real().token_client().await?;
        println!(
            "control plane {name}: kube-apiserver v1.36.3 + etcd 3.6.8 ready in {:.1}s ({})",
            t.elapsed().as_secs_f64(),
            server.real().dir().display()
        );
        Ok(RealBench {
            server,
            admin,
            admin_token,
            n: AtomicU32::new(0),
        })
    }

    pub fn cp(&self) -> &ControlPlane {
        self.server.real()
    }

    fn next(&self) -> u32 {
        self.n.fetch_add(1, Ordering::Relaxed)
    }

    /// kube-controller-manager v1.36.3 running only `controllers`, as the
    /// launcher starts it (service-account credentials per controller), at
    /// its default client QPS/burst (20/30) or `qps`/`burst`.
    pub fn start_kcm(
        &self,
        label: &str,
        controllers: &[&str],
        qps: Option<(u32, u32)>,
    ) -> Result<Contender> {
        let cp = self.cp();
        let bins = control_plane::binaries::binaries()?;
        let n = self.next();
        let kc = cp.write_kubeconfig_for(
            &format!("bench-kcm-{n}"),
            "system:kube-controller-manager",
            &[],
        )?;
        let dir = cp.dir();
        let s = |p: &Path| p.display().to_string();
        let mut args = vec![
            format!("--kubeconfig={}", s(&kc)),
            format!("--authentication-kubeconfig={}", s(&kc)),
            format!("--authorization-kubeconfig={}", s(&kc)),
            "--bind-address=127.0.0.1".into(),
            // No serving: the benchmark reads /proc, not /metrics.
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            format!("--controllers={}", controllers.join(",")),
            "--use-service-account-credentials=true".into(),
            format!(
                "--service-account-private-key-file={}",
                s(&dir.join("sa.key"))
            ),
            format!("--root-ca-file={}", s(&dir.join("ca.crt"))),
        ];
        if let Some((q, b)) = qps {
            args.push(format!("--kube-api-qps={q}"));
            args.push(format!("--kube-api-burst={b}"));
        }
        let proc = Proc::start(Spec {
            name: format!("kube-controller-manager ({label})"),
            program: bins.kube_controller_manager(),
            args,
            env: Vec::new(),
            log: dir.join(format!("bench-kcm-{n}.log")),
        })?;
        Ok(Contender::new(
            label,
            proc,
            Who::UserSuffixes(
                controllers
                    .iter()
                    .map(|c| format!(":{}", kcm_service_account(c)))
                    .collect(),
            ),
        ))
    }

    /// A program started with `args` and `--kubeconfig=<a kubeconfig for
    /// user>`; its requests are the user's: a ServiceAccount's by its token
    /// (as in a pod), any other user's by a client certificate.
    pub async fn start_program(
        &self,
        label: &str,
        program: &Path,
        user: &str,
        args: &[String],
    ) -> Result<Contender> {
        let n = self.next();
        let kc = match self.service_account_token(user).await? {
            Some(token) => self
                .cp()
                .write_token_kubeconfig(&format!("bench-{n}"), &token)?,
            None => self
                .cp()
                .write_kubeconfig_for(&format!("bench-{n}"), user, &[])?,
        };
        let mut all = args.to_vec();
        all.push(format!("--kubeconfig={}", kc.display()));
        let proc = Proc::start(Spec {
            name: label.into(),
            program: program.to_path_buf(),
            args: all,
            env: Vec::new(),
            log: self.cp().dir().join(format!("bench-{n}.log")),
        })?;
        Ok(Contender::new(label, proc, Who::User(user.into())))
    }

    /// Our manager (`bin run ARGS`) as [`MANAGER_USER`], granted `rules`,
    /// Events and its release record (what the chart grants).
    pub async fn start_manager(
        &self,
        label: &str,
        bin: &Path,
        rules: &[PolicyRule],
        args: &[String],
    ) -> Result<Contender> {
        let user = MANAGER_USER;
        let mut grant: Vec<Value> = rules
            .iter()
            .map(|r| json!({"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs}))
            .collect();
        grant.push(json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}));
        grant.push(json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get", "update", "patch"]}));
        self.server.grant(user, &Value::Array(grant)).await?;
        let mut all = vec![
            "run".to_string(),
            "--leader-elect=false".into(),
            "--log-level=warn".into(),
        ];
        all.extend(args.iter().cloned());
        self.start_program(label, bin, user, &all).await
    }

    /// Brings the server to the same state before each measurement that
    /// is compared with another, and says what that took: etcd's history
    /// compacted to its present revision (what kube-apiserver does every
    /// 5 minutes), then a full garbage collection in kube-apiserver (Go's
    /// pprof `heap?gc=1`, which returns once it has ended). Between two
    /// measurements the bench writes tens of thousands of revisions, and
    /// the server's pace for one client moved by up to 1.7x within minutes:
    /// a measurement that etcd's history or a collection of the server's
    /// ~1.5 GiB heap fell into paid for it.
    pub async fn settle(&self) -> Result<Settled> {
        let t = Instant::now();
        let etcd = self.cp().etcd_url().trim_start_matches("http://");
        let range = http_call(
            etcd,
            "POST",
            "/v3/kv/range",
            Some(&json!({"key": "AA==", "limit": 1})),
        )
        .await
        .context("etcd's present revision")?;
        let revision: String = serde_json::from_str::<Value>(&range)?["header"]["revision"]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("no header.revision in etcd's answer: {range}"))?;
        http_call(
            etcd,
            "POST",
            "/v3/kv/compaction",
            Some(&json!({"revision": revision, "physical": true})),
        )
        .await
        .with_context(|| format!("compacting etcd to revision {revision}"))?;
        let compacted = t.elapsed();

        use http_body_util::BodyExt;
        let t = Instant::now();
        let req = http::Request::get("/debug/pprof/heap?gc=1")
            .body(kube::client::Body::empty())
            .context("a GET of /debug/pprof/heap")?;
        let res = self
            .admin
            .send(req)
            .await
            .context("GET /debug/pprof/heap?gc=1 (kube-apiserver's forced GC)")?;
        let status = res.status();
        res.into_body()
            .collect()
            .await
            .context("reading /debug/pprof/heap")?;
        if !status.is_success() {
            bail!("GET /debug/pprof/heap?gc=1: {status} (is --profiling on?)");
        }
        Ok(Settled {
            compacted,
            collected: t.elapsed(),
        })
    }

    /// A client as the manager's identity ([`MANAGER_USER`]), with the
    /// same credentials as the manager's (its ServiceAccount's token).
    pub async fn manager_client(&self) -> Result<kube::Client> {
        let token = self
            .service_account_token(MANAGER_USER)
            .await?
            .context("the manager's user is a ServiceAccount")?;
        Ok(self.cp().client_with_token(&token).await?)
    }

    /// For a ServiceAccount's user name (`system:serviceaccount:NS:NAME`), a
    /// token of that ServiceAccount from the TokenRequest API (the namespace
    /// and ServiceAccount are created if missing): a program in a pod
    /// authenticates so, and the server checks a token once and then caches
    /// it, where a client certificate's chain is verified on every request.
    /// `None` for any other user.
    async fn service_account_token(&self, user: &str) -> Result<Option<String>> {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
        use kube::api::{PostParams, ResourceExt};
        let Some((ns, name)) = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|r| r.split_once(':'))
        else {
            return Ok(None);
        };
        let create = async |r: kube::Result<()>| match r {
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            r => r,
        };
        let pp = PostParams::default();
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        create(
            Api::all(self.admin.clone())
                .create(&pp, &namespace)
                .await
                .map(drop),
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
        let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), ns);
        create(sas.create(&pp, &sa).await.map(drop))
            .await
            .with_context(|| format!("creating ServiceAccount {ns}/{name}"))?;
        let req: TokenRequest =
            serde_json::from_value(json!({"spec": {"expirationSeconds": 86400}}))?;
        let got: TokenRequest = sas
            .create_subresource("token", name, &pp, &req)
            .await
            .with_context(|| format!("a token for ServiceAccount {ns}/{name}"))?;
        let token = got
            .status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .with_context(|| format!("no token in the TokenRequest of {}", sa.name_any()))?;
        Ok(Some(token))
    }

    /// A mark once the audit log holds at least `n` writes (create,
    /// update, patch, delete) of `who` to each of `resources` since `from`,
    /// or after 5 s. kube-apiserver writes a request's audit entry after its
    /// handler has answered, so the last writes a watch has just shown may
    /// not be in the log yet: a mark taken at once counted two of 1,000
    /// back-fill PATCHes in the next phase (0.998 and 1.020 writes per
    /// transition where each phase made exactly 1.000).
    pub async fn mark_after_writes(
        &self,
        from: Mark,
        who: &Who,
        resources: &[&str],
        n: u64,
    ) -> Mark {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let m = self.mark();
            let seen = self.requests(from, m, who);
            if resources.iter().all(|r| seen.writes(r) >= n) || Instant::now() > deadline {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The audit log's requests between two marks by `who`.
    pub fn requests(&self, from: Mark, to: Mark, who: &Who) -> Tally {
        Tally::of(
            self.server
                .requests_between(from, to)
                .into_iter()
                .filter(|r| who.matches(&r.user)),
        )
    }

    pub fn mark(&self) -> Mark {
        self.server.mark()
    }

    /// How the server held `who`'s `verb` requests between two marks
    /// (from the audit log's timestamps).
    pub fn served(&self, from: Mark, to: Mark, who: &Who, verb: &str) -> Served {
        Served::of(
            self.server
                .requests_between(from, to)
                .into_iter()
                .filter(|r| r.verb == verb && who.matches(&r.user))
                .filter_map(|r| r.served),
        )
    }
}

/// What [`RealBench::settle`] took.
#[derive(Clone, Copy, Debug)]
pub struct Settled {
    /// etcd's compaction to its present revision.
    pub compacted: Duration,
    /// kube-apiserver's full garbage collection.
    pub collected: Duration,
}

impl std::fmt::Display for Settled {
    /// `after etcd's compaction (0.2s) and a forced GC (0.5s)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "after etcd's compaction ({:.1}s) and a forced GC ({:.1}s)",
            self.compacted.as_secs_f64(),
            self.collected.as_secs_f64()
        )
    }
}

/// Requests as the server held them: how many, how long each on average,
/// and how many were in the server at once on average (Little's law over
/// the first receipt to the last answer). A client that keeps N calls in
/// flight shows fewer here by what its own side of each call takes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Served {
    pub n: usize,
    pub mean_ms: f64,
    pub in_flight: f64,
}

impl Served {
    /// From each request's receipt and hold (microseconds).
    pub fn of(held: impl Iterator<Item = (i64, u64)>) -> Served {
        let (mut n, mut sum, mut first, mut last) = (0usize, 0u64, i64::MAX, i64::MIN);
        for (at, took) in held {
            n += 1;
            sum += took;
            first = first.min(at);
            last = last.max(at.saturating_add(took as i64));
        }
        if n == 0 || last <= first {
            return Served::default();
        }
        Served {
            n,
            mean_ms: sum as f64 / n as f64 / 1e3,
            in_flight: sum as f64 / (last - first) as f64,
        }
    }

    /// `N in the server at once on average, each held M ms`.
    pub fn line(&self) -> String {
        format!(
            "{:.1} in the server at once on average, each held {:.1} ms (audit log)",
            self.in_flight, self.mean_ms
        )
    }
}

/// The mean of a histogram in a Prometheus text exposition: `_sum` over
/// `_count` of the series of `name` whose labels contain every one of
/// `labels` (e.g. `verb="patch"`), summed over the matching series.
pub fn histogram_mean(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let (mut sum, mut count) = (0.0, 0.0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, lbls) = series.split_once('{').unwrap_or((series, ""));
        if !labels.iter().all(|l| lbls.contains(l)) {
            continue;
        }
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        match metric.strip_prefix(name) {
            Some("_sum") => sum += v,
            Some("_count") => count += v,
            _ => {}
        }
    }
    (count > 0.0).then(|| sum / count)
}

/// `GET path` from a plain-HTTP server at `addr` (a manager's admin
/// address): the body.
pub async fn http_get(addr: &str, path: &str) -> Result<String> {
    http_call(addr, "GET", path, None).await
}

/// `method path` to a plain-HTTP server at `addr`, with a JSON `body` if
/// any: the answer's body, or an error naming the call unless it is 200.
async fn http_call(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if let Some(b) = body {
        let b = b.to_string();
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ));
    } else {
        req.push_str("\r\n");
    }
    conn.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .with_context(|| format!("{method} http://{addr}{path}: no HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "{method} http://{addr}{path}: {}: {}",
            head.lines().next().unwrap_or_default(),
            body.trim()
        );
    }
    Ok(body.to_string())
}

/// Who the manager is in a benchmark: the ServiceAccount the chart runs it
/// as (here in `protection-system`), with a token of that ServiceAccount
/// (TokenRequest API), as its pod's would be. API Priority and Fairness
/// classifies it as it would the chart's pod: FlowSchema `service-accounts`,
/// priority level `workload-low` (KCM's controllers, ServiceAccounts in
/// kube-system, are in `workload-high`). A plain user would be in
/// `global-default`, whose 49 seats (of the server's 600) queue the large
/// back-fill's 64 writes in flight.
pub const MANAGER_USER: &str = "system:serviceaccount:protection-system:protection-manager";

/// The ServiceAccount KCM runs `controller` as (`NewClient` in
/// cmd/kube-controller-manager/app).
fn kcm_service_account(controller: &str) -> &str {
    match controller {
        "persistentvolume-protection-controller" => "pv-protection-controller",
        "persistentvolumeclaim-protection-controller" => "pvc-protection-controller",
        other => other,
    }
}

/// Whose requests a contender's are.
#[derive(Clone, Debug)]
pub enum Who {
    User(String),
    /// Users ending in one of these (KCM's per-controller ServiceAccounts).
    UserSuffixes(Vec<String>),
}

impl Who {
    pub fn matches(&self, user: &str) -> bool {
        match self {
            Who::User(u) => u == user,
            Who::UserSuffixes(s) => s.iter().any(|x| user.ends_with(x.as_str())),
        }
    }
}

/// One contender's process.
pub struct Contender {
    pub label: String,
    pub who: Who,
    pub started: Instant,
    proc: Proc,
}

/// Peak RSS and CPU seconds of a process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub peak_rss_mib: f64,
    pub cpu_s: f64,
}

impl Contender {
    fn new(label: &str, proc: Proc, who: Who) -> Contender {
        Contender {
            label: label.into(),
            who,
            started: Instant::now(),
            proc,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    /// Fails if the process has exited (with its log's tail).
    pub fn check_running(&self) -> Result<()> {
        if let Some(status) = self.proc.exited() {
            bail!(
                "{} exited ({status}):\n{}",
                self.label,
                self.proc.log_tail(30)
            );
        }
        Ok(())
    }

    pub fn usage(&self) -> Usage {
        let pid = self.pid().unwrap_or(0);
        Usage {
            peak_rss_mib: test_support::bench::vm_hwm_kib(pid).unwrap_or(0) as f64 / 1024.0,
            cpu_s: test_support::bench::cpu_seconds(pid).unwrap_or(f64::NAN),
        }
    }

    pub fn log(&self) -> &Path {
        &self.proc.spec.log
    }

    /// SIGTERM, then SIGKILL after 10 s; returns its usage first.
    pub fn stop(self) -> Usage {
        let u = self.usage();
        self.proc.stop(Duration::from_secs(10));
        u
    }
}

/// Requests counted by (verb, resource[/subresource]).
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub by: BTreeMap<(String, String), u64>,
}

impl Tally {
    pub fn of(requests: impl Iterator<Item = Request>) -> Tally {
        let mut by = BTreeMap::new();
        for r in requests {
            let res = if r.resource.is_empty() {
                "(non-resource)".to_string()
            } else if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            *by.entry((r.verb, res)).or_insert(0) += 1;
        }
        Tally { by }
    }

    pub fn total(&self) -> u64 {
        self.by.values().sum()
    }

    /// Writes (create, update, patch, delete) to resources whose name
    /// starts with `resource` (`services` counts `services/status`).
    pub fn writes(&self, resource: &str) -> u64 {
        self.by
            .iter()
            .filter(|((v, r), _)| {
                matches!(v.as_str(), "create" | "update" | "patch" | "delete")
                    && (r == resource || r.starts_with(&format!("{resource}/")))
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// `verb resource: per-object` for each, per `objects`.
    pub fn per_object(&self, objects: usize) -> String {
        let n = objects.max(1) as f64;
        self.by
            .iter()
            .map(|((v, r), c)| format!("{v} {r} {:.3}", *c as f64 / n))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// When each object (`namespace/name`) was first seen done, and when it
/// was seen deleted, from one watch.
pub struct Tracker {
    state: Arc<Mutex<TrackState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct TrackState {
    done: HashMap<String, Instant>,
    gone: HashMap<String, Instant>,
    ready: bool,
}

impl Tracker {
    /// Watches `api` (every namespace for a namespaced kind); `done` says
    /// when an object counts as done (e.g. carries the finalizer).
    pub fn start<K>(api: Api<K>, done: impl Fn(&K) -> bool + Send + Sync + 'static) -> Tracker
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let state: Arc<Mutex<TrackState>> = Arc::default();
        let st = state.clone();
        let task = tokio::spawn(async move {
            let key = |o: &K| {
                let m = o.meta();
                format!(
                    "{}/{}",
                    m.namespace.as_deref().unwrap_or_default(),
                    m.name.as_deref().unwrap_or_default()
                )
            };
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                let now = Instant::now();
                let mut s = st.lock().await;
                match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        let k = key(&o);
                        s.gone.remove(&k);
                        if done(&o) {
                            s.done.entry(k).or_insert(now);
                        } else {
                            s.done.remove(&k);
                        }
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        let k = key(&o);
                        s.done.remove(&k);
                        s.gone.insert(k, now);
                    }
                    Ok(watcher::Event::InitDone) => s.ready = true,
                    Ok(watcher::Event::Init) | Err(_) => {}
                }
            }
        });
        Tracker { state, task }
    }

    pub async fn wait_ready(&self) {
        while !self.state.lock().await.ready {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn done_count(&self) -> usize {
        self.state.lock().await.done.len()
    }

    /// Waits until `n` objects are done (at most `limit`); the first and
    /// the last instant an object became done among them.
    pub async fn wait_done(&self, n: usize, limit: Duration) -> Result<(Instant, Instant)> {
        let deadline = Instant::now() + limit;
        loop {
            {
                let s = self.state.lock().await;
                if s.done.len() >= n {
                    let first = s.done.values().min().copied().unwrap_or_else(Instant::now);
                    let last = s.done.values().max().copied().unwrap_or_else(Instant::now);
                    return Ok((first, last));
                }
                if Instant::now() > deadline {
                    bail!("only {} of {n} done after {limit:?}", s.done.len());
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every key in `keys` was seen deleted (at most `limit`);
    /// the instants, in `keys`' order (None: not gone in time).
    pub async fn wait_gone(&self, keys: &[String], limit: Duration) -> Vec<Option<Instant>> {
        let deadline = Instant::now() + limit;
        loop {
            {
                let s = self.state.lock().await;
                let at: Vec<Option<Instant>> =
                    keys.iter().map(|k| s.gone.get(k).copied()).collect();
                if at.iter().all(Option::is_some) || Instant::now() > deadline {
                    return at;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn gone_count(&self, keys: &[String]) -> usize {
        let s = self.state.lock().await;
        keys.iter().filter(|k| s.gone.contains_key(*k)).count()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `f(i)` for `i in 0..n` with `in_flight` at once; the first error
/// stops it. Returns the wall time.
pub async fn bulk<F, Fut>(n: usize, in_flight: usize, f: F) -> Result<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let t = Instant::now();
    test_support::bench::concurrently(n, in_flight, f).await?;
    Ok(t.elapsed())
}

/// Release latencies: per object trigger → gone (ms, sorted) and the last
/// trigger → the last gone.
#[derive(Clone, Debug, Default)]
pub struct Release {
    pub n: usize,
    pub gone: usize,
    pub latency_ms: Vec<f64>,
    pub whole_s: f64,
}

impl Release {
    pub fn of(triggers: &[Instant], gone: &[Option<Instant>]) -> Release {
        let mut latency_ms: Vec<f64> = triggers
            .iter()
            .zip(gone)
            .filter_map(|(t, g)| g.map(|g| g.saturating_duration_since(*t).as_secs_f64() * 1e3))
            .collect();
        latency_ms.sort_by(f64::total_cmp);
        let last_trigger = triggers.iter().max().copied();
        let last_gone = gone.iter().flatten().max().copied();
        let whole_s = match (last_trigger, last_gone) {
            (Some(t), Some(g)) if gone.iter().all(Option::is_some) => {
                g.saturating_duration_since(t).as_secs_f64()
            }
            _ => f64::NAN,
        };
        Release {
            n: triggers.len(),
            gone: latency_ms.len(),
            latency_ms,
            whole_s,
        }
    }

    pub fn p(&self, q: f64) -> f64 {
        test_support::bench::percentile(&self.latency_ms, q)
    }

    pub fn line(&self) -> String {
        format!(
            "{}/{} gone; trigger → gone p50 {:.0} ms, p99 {:.0} ms; last trigger → last gone {:.2} s",
            self.gone,
            self.n,
            self.p(50.0),
            self.p(99.0),
            self.whole_s
        )
    }
}

/// `what: ours X vs upstream Y → ratio R (goal ≥ G) ok|MISSED`, for a
/// figure where bigger is better (`speed`), or a time where smaller is
/// better (the ratio is upstream/ours, so ≥ 1.0 means ours is faster).
pub fn ratio_line(
    what: &str,
    ours: f64,
    upstream: f64,
    unit: &str,
    smaller_is_better: bool,
    goal: f64,
) -> String {
    let r = if smaller_is_better {
        upstream / ours
    } else {
        ours / upstream
    };
    format!(
        "{what}: ours {ours:.3}{unit} vs upstream {upstream:.3}{unit} → {r:.2} {}",
        test_support::bench::at_least(r, goal, "")
    )
}

/// The release manager binary beside this example
/// (`$PROTECTION_MANAGER_BIN` overrides).
pub fn manager_bin() -> Result<PathBuf> {
    test_support::bench::manager_bin("bench-real").map_err(anyhow::Error::msg)
}

/// A free port for a contender's admin or metrics server, outside the
/// range the bench's own connections take theirs from (`free_port`).
pub fn free_port() -> Result<u16> {
    free_port::free_port().context("finding a free port")
}

/// CPU seconds used so far by kube-apiserver, etcd, this process (the
/// bench: its fast client, its trackers' watches) and a contender, and the
/// seconds each one's threads waited for a core: marks taken around a
/// phase give each one's CPU, and its wait for CPU, per write in it.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuMark {
    cpu: [f64; 4],
    waited: [f64; 4],
    /// The machine's CPU seconds taken by the hypervisor so far.
    steal: f64,
}

impl CpuMark {
    /// Now, with `contender`'s process (if any).
    pub fn now(cp: &ControlPlane, contender: Option<&Contender>) -> CpuMark {
        let pids = [
            cp.pid(control_plane::Component::ApiServer),
            cp.pid(control_plane::Component::Etcd),
            Some(std::process::id()),
            contender.and_then(Contender::pid),
        ];
        let mut m = CpuMark {
            steal: test_support::bench::steal_seconds().unwrap_or(0.0),
            ..CpuMark::default()
        };
        for (i, pid) in pids.into_iter().enumerate() {
            m.cpu[i] = pid
                .and_then(test_support::bench::cpu_seconds)
                .unwrap_or(0.0);
            m.waited[i] = pid
                .and_then(test_support::bench::run_queue_seconds)
                .unwrap_or(0.0);
        }
        m
    }

    /// kube-apiserver's CPU milliseconds per write from this mark to
    /// `later`.
    pub fn apiserver_ms_per_write(&self, later: &CpuMark, writes: usize) -> f64 {
        1e3 * (later.cpu[0] - self.cpu[0]) / writes.max(1) as f64
    }

    /// CPU milliseconds per write from `self` to `later`, by process, and
    /// the milliseconds per write its threads waited for a core:
    /// `kube-apiserver 1.23, etcd 0.12, the bench 0.10[, <who> 0.20] CPU ms
    /// per write (waited for a core 0.40, 0.05, 0.10[, 0.30]; stolen by the
    /// host 0.01)`: the last is the machine's CPU time per write that the
    /// hypervisor gave to other guests.
    pub fn per_write(&self, later: &CpuMark, writes: usize, who: Option<&str>) -> String {
        let ms = |a: f64, b: f64| 1e3 * (b - a) / writes.max(1) as f64;
        let n = if who.is_some() { 4 } else { 3 };
        let names = [
            "kube-apiserver",
            "etcd",
            "the bench",
            who.unwrap_or_default(),
        ];
        let cpu: Vec<String> = (0..n)
            .map(|i| format!("{} {:.2}", names[i], ms(self.cpu[i], later.cpu[i])))
            .collect();
        let waited: Vec<String> = (0..n)
            .map(|i| format!("{:.2}", ms(self.waited[i], later.waited[i])))
            .collect();
        format!(
            "{} CPU ms per write (waited for a core {}; stolen by the host {:.2})",
            cpu.join(", "),
            waited.join(", "),
            ms(self.steal, later.steal)
        )
    }
}

/// The control plane's own processes' peak RSS, for context.
pub fn apiserver_usage(cp: &ControlPlane) -> Usage {
    let pid = cp
        .pid(control_plane::Component::ApiServer)
        .unwrap_or_default();
    Usage {
        peak_rss_mib: test_support::bench::vm_hwm_kib(pid).unwrap_or(0) as f64 / 1024.0,
        cpu_s: test_support::bench::cpu_seconds(pid).unwrap_or(f64::NAN),
    }
}

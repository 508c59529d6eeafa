//! The harness: a cluster to run scenarios on, the tools to drive it, and a
//! record of what each scenario verified.
//!
//! **sim** (default): kube-sim in-process with its cluster emulation on
//! (two Ready nodes, scheduler, PV binder with a default StorageClass,
//! Deployment/ReplicaSet and Job controllers, and kubelets that run the
//! manager image as the workspace's binary), plus cloud-sim in-process. The
//! chart is installed with real helm, so the manager runs exactly as the
//! rendered Deployment says. Every API request is in kube-sim's request log,
//! attributed to its user (the manager is
//! `system:serviceaccount:<namespace>:<service account>`).
//!
//! **cluster** (`E2E_KUBECONFIG`): the same scenarios against a real
//! cluster; sim-only steps (kube-sim faults, forced 410s, request
//! accounting) are skipped with a printed note.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, LogParams, PostParams};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;

use crate::binaries::{self, BinaryInfo, NEW_TAG, OLD_TAG};
use crate::cloud::Cloud;
use crate::error::{Error, IoContext, KubeContext, Result};
use crate::mode::{ClusterTarget, ImageRef, MANAGER_REPOSITORY, Mode};
use crate::objects::RUN_LABEL;
use crate::tools::{Helm, HelmVersion, Kubectl};

/// What the cluster mode cannot check: kube-sim records every request
/// (who wrote which object, how often); a cluster's API server does not
/// tell a client.
const REQUEST_ACCOUNTING: &str =
    "request accounting (the manager's writes to the user's objects counted)";

/// With kube-sim authorizing as Node,RBAC (`KUBE_SIM_AUTHORIZATION=Node,RBAC`),
/// grants what the harness's own tools use, as a cluster's administrator
/// would: helm and kubectl send no credentials over kube-sim's plain HTTP
/// (they are `system:anonymous`), so the group `system:unauthenticated` is
/// bound to `cluster-admin`; the observer may read everything. The manager
/// gets only what the chart grants its ServiceAccount.
async fn grant_tools(admin: &Client) -> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "e2e:observer"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
    }))
    .map_err(|e| Error::Sim(format!("the observer's ClusterRole: {e}")))?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .ctx(|| "creating the ClusterRole e2e:observer".into())?;
    let bindings = [
        (
            "e2e:observer",
            "e2e:observer",
            json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": OBSERVER_USER}),
        ),
        (
            "e2e:helm-and-kubectl",
            "cluster-admin",
            json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:unauthenticated"}),
        ),
    ];
    for (name, role, subject) in bindings {
        let b: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject],
        }))
        .map_err(|e| Error::Sim(format!("the ClusterRoleBinding {name}: {e}")))?;
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&PostParams::default(), &b)
            .await
            .ctx(|| format!("creating the ClusterRoleBinding {name}"))?;
    }
    Ok(())
}

/// The nodes kube-sim registers in sim mode.
pub const SIM_NODES: [&str; 2] = ["node-1", "node-2"];
/// cloud-sim's bearer token in sim mode (mounted from a Secret by the chart).
pub const SIM_CLOUD_TOKEN: &str = "e2e-cloud-token";
/// kube-sim's admin user (helm, kubectl and the scenarios' client).
pub const ADMIN_USER: &str = "admin";
/// The user the observer watches as on kube-sim (never faulted).
pub const OBSERVER_USER: &str = "e2e-observer";

/// Settings of a harness.
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    /// Short scenario name (a namespace prefix: lowercase, digits, '-').
    pub name: String,
    /// Seed of kube-sim's random choices (uids, names, fault fractions).
    pub seed: u64,
    /// kube-sim's retained events per resource (watch resumption window).
    pub history_window: usize,
}

impl HarnessOptions {
    pub fn new(name: &str) -> HarnessOptions {
        HarnessOptions {
            name: name.to_string(),
            seed: 0x6532_6520,
            history_window: 100_000,
        }
    }
}

/// How a manager pod was killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillHow {
    /// SIGKILL to the process through the emulated kubelet (sim).
    Signal { pids: Vec<u32> },
    /// `kubectl delete pod --grace-period=0 --force` (cluster mode: the
    /// nearest a test can get to SIGKILL without node access).
    ForceDelete,
}

/// A running harness. Call [`Harness::finish`] at the end.
pub struct Harness {
    pub mode: Mode,
    /// Cluster-admin client (kube-sim user `admin`).
    pub client: Client,
    /// The client the observer uses (its own user on kube-sim).
    pub observer_client: Client,
    pub kubeconfig: PathBuf,
    pub context: Option<String>,
    sim: Option<kube_sim::KubeSim>,
    pub cloud: std::sync::Arc<Cloud>,
    /// cloud-sim's token, if it has one (the chart mounts it from a Secret).
    pub cloud_token: Option<String>,
    /// Scratch directory (helm homes, values files).
    pub dir: PathBuf,
    /// Unique id of this run (label value, namespace prefix).
    pub run: String,
    /// The manager image the chart installs (tag empty: the chart's).
    pub manager_image: ImageRef,
    pub image_pull_policy: String,
    /// The image of user pods.
    pub pod_image: String,
    /// What the manager binary says of itself (sim mode).
    pub binary: Option<BinaryInfo>,
    /// E2E_OLD_BIN / E2E_NEW_BIN (sim mode), as `(old, new)`.
    pub cross_build: Option<(PathBuf, PathBuf)>,
    verified: Mutex<Vec<String>>,
    namespaces: Mutex<Vec<String>>,
    releases: Mutex<Vec<String>>,
    /// Cluster mode: held for the whole run (see [`CLUSTER_TURN`]).
    _cluster_turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// The real cluster this process started ([`crate::real`]), when the
    /// scenarios run on one: its processes can be signalled and restarted.
    real: Option<std::sync::Arc<crate::real::RealCluster>>,
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// One scenario at a time on a shared cluster. The managers a scenario
/// installs are cluster-wide controllers: a 0.2 manager of one test would add
/// finalizers to the objects of a test asserting that 0.0 adds none (each
/// sim-mode run has its own kube-sim, so only cluster mode waits here). Test
/// threads use their own runtimes; a tokio mutex works across them.
static CLUSTER_TURN: std::sync::LazyLock<std::sync::Arc<tokio::sync::Mutex<()>>> =
    std::sync::LazyLock::new(Default::default);

fn run_id(name: &str) -> String {
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let suffix = (u64::from(std::process::id()) * 7919 + n * 104_729 + u64::from(nanos)) % 46_656;
    let alphabet: Vec<char> = "0123456789abcdefghijklmnopqrstuvwxyz".chars().collect();
    let mut s = String::new();
    let mut x = suffix;
    for _ in 0..3 {
        s.push(alphabet[(x % 36) as usize]);
        x /= 36;
    }
    format!("{name}-{s}")
}

impl Harness {
    /// Brings up the cluster for `opts.name` (sim or cluster by the
    /// environment).
    pub async fn start(opts: HarnessOptions) -> Result<Harness> {
        let mode = Mode::from_env()?;
        let run = run_id(&opts.name);
        let dir = std::env::temp_dir().join(format!("protection-e2e-{run}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).io_ctx(|| format!("creating {}", dir.display()))?;
        match &mode {
            Mode::Sim => Harness::start_sim(opts, mode.clone(), run, dir).await,
            Mode::Cluster(t) => {
                let t = t.clone();
                Harness::start_cluster(mode.clone(), t, run, dir).await
            }
        }
    }

    async fn start_sim(
        opts: HarnessOptions,
        mode: Mode,
        run: String,
        dir: PathBuf,
    ) -> Result<Harness> {
        let bin = binaries::manager_binary()?;
        let binary = binaries::inspect(&bin).await?;
        let cross_build = binaries::cross_build()?;
        let mut images = vec![kube_sim::cluster::ImageMapping {
            image: MANAGER_REPOSITORY.to_string(),
            binary: bin.clone(),
        }];
        if let Some((old, new)) = &cross_build {
            binaries::inspect(old).await?;
            binaries::inspect(new).await?;
            images.push(kube_sim::cluster::ImageMapping {
                image: format!("{MANAGER_REPOSITORY}:{OLD_TAG}"),
                binary: old.clone(),
            });
            images.push(kube_sim::cluster::ImageMapping {
                image: format!("{MANAGER_REPOSITORY}:{NEW_TAG}"),
                binary: new.clone(),
            });
        }
        let mut cluster = kube_sim::cluster::ClusterConfig::all();
        cluster.nodes = SIM_NODES.iter().map(|s| s.to_string()).collect();
        cluster.kubelet_config.images = images;
        cluster.kubelet_config.root_dir = Some(dir.join("kubelet"));
        let cfg = kube_sim::SimConfig {
            seed: opts.seed,
            history_window: opts.history_window,
            bookmark_interval: Duration::from_secs(1),
            pod_graceful_deletion: true,
            cluster,
            ..kube_sim::SimConfig::default()
        };
        let sim = kube_sim::KubeSim::start(cfg)
            .await
            .map_err(|e| Error::Sim(format!("starting kube-sim: {e}")))?;
        let client = sim
            .try_client_as(ADMIN_USER)
            .await
            .map_err(|e| Error::Sim(e.to_string()))?;
        let observer_client = sim
            .try_client_as(OBSERVER_USER)
            .await
            .map_err(|e| Error::Sim(e.to_string()))?;
        if sim.authorization() == kube_sim::Authorization::NodeRbac {
            grant_tools(&client).await?;
        }
        let kubeconfig = sim.kubeconfig_path().to_path_buf();
        let cloud = std::sync::Arc::new(Cloud::start_local(SIM_CLOUD_TOKEN).await?);
        let h = Harness {
            mode,
            client,
            observer_client,
            kubeconfig,
            context: None,
            sim: Some(sim),
            cloud,
            cloud_token: Some(SIM_CLOUD_TOKEN.to_string()),
            _cluster_turn: None,
            real: None,
            dir,
            run,
            manager_image: ImageRef {
                repository: MANAGER_REPOSITORY.to_string(),
                tag: String::new(),
            },
            image_pull_policy: "IfNotPresent".into(),
            pod_image: crate::mode::DEFAULT_POD_IMAGE.into(),
            binary: Some(binary),
            cross_build,
            verified: Mutex::new(Vec::new()),
            namespaces: Mutex::new(Vec::new()),
            releases: Mutex::new(Vec::new()),
        };
        h.wait_nodes_ready().await?;
        Ok(h)
    }

    /// Brings up the harness on `real` (cluster mode, with its processes at
    /// hand for faults), whatever the environment says.
    pub async fn start_real(
        opts: HarnessOptions,
        real: std::sync::Arc<crate::real::RealCluster>,
    ) -> Result<Harness> {
        let target = real.target();
        let mode = Mode::Cluster(target.clone());
        let run = run_id(&opts.name);
        let dir = std::env::temp_dir().join(format!("protection-e2e-{run}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).io_ctx(|| format!("creating {}", dir.display()))?;
        let mut h = Harness::start_cluster(mode, target, run, dir).await?;
        h.real = Some(real);
        Ok(h)
    }

    /// The real cluster, when this process started it.
    pub fn real(&self) -> Option<&crate::real::RealCluster> {
        self.real.as_deref()
    }

    /// The same, shared (for tasks that outlive a borrow).
    pub fn real_cluster(&self) -> Option<std::sync::Arc<crate::real::RealCluster>> {
        self.real.clone()
    }

    async fn start_cluster(
        mode: Mode,
        t: ClusterTarget,
        run: String,
        dir: PathBuf,
    ) -> Result<Harness> {
        let turn = match CLUSTER_TURN.clone().try_lock_owned() {
            Ok(t) => t,
            Err(_) => {
                println!("{run}: waiting for the other scenario on the cluster to finish");
                CLUSTER_TURN.clone().lock_owned().await
            }
        };
        let kc = kube::config::Kubeconfig::read_from(&t.kubeconfig).map_err(|e| {
            Error::Config(format!("E2E_KUBECONFIG={}: {e}", t.kubeconfig.display()))
        })?;
        let opts = kube::config::KubeConfigOptions {
            context: t.context.clone(),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| {
                Error::Config(format!("E2E_KUBECONFIG={}: {e}", t.kubeconfig.display()))
            })?;
        let client =
            Client::try_from(config).ctx(|| "building a client for E2E_KUBECONFIG".into())?;
        let cloud =
            std::sync::Arc::new(Cloud::connect(&t.cloud_sim_url, t.cloud_sim_token.clone()).await?);
        let h = Harness {
            _cluster_turn: Some(turn),
            real: None,
            mode,
            observer_client: client.clone(),
            client,
            kubeconfig: t.kubeconfig.clone(),
            context: t.context.clone(),
            sim: None,
            cloud,
            cloud_token: t.cloud_sim_token.clone(),
            dir,
            run,
            manager_image: t.image.clone(),
            image_pull_policy: t.image_pull_policy.clone(),
            pod_image: t.pod_image.clone(),
            binary: None,
            cross_build: None,
            verified: Mutex::new(Vec::new()),
            namespaces: Mutex::new(Vec::new()),
            releases: Mutex::new(Vec::new()),
        };
        h.wait_nodes_ready().await?;
        Ok(h)
    }

    async fn wait_nodes_ready(&self) -> Result<()> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        crate::wait::until_true(
            "a node is Ready",
            self.timeout(Duration::from_secs(60)),
            || {
                let nodes = nodes.clone();
                async move {
                    let list = nodes
                        .list(&Default::default())
                        .await
                        .ctx(|| "listing nodes".into())?;
                    Ok(list.items.iter().any(|n| {
                        n.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| {
                                cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                    }))
                }
            },
            || async { "no Ready node".to_string() },
        )
        .await
    }

    /// The release the installed image runs as without `emulatedVersion`:
    /// what the binary says of itself (sim), else the chart's appVersion
    /// (cluster mode installs the image of the chart's release).
    pub fn own_release(&self) -> Result<String> {
        if let Some(b) = &self.binary {
            return Ok(b.release.clone());
        }
        let path = crate::tools::chart_dir().join("Chart.yaml");
        let text =
            std::fs::read_to_string(&path).io_ctx(|| format!("reading {}", path.display()))?;
        let chart: serde_json::Value = serde_yaml::from_str(&text)
            .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        let app = chart["appVersion"].as_str().unwrap_or_default();
        let mut parts = app.split('.');
        match (parts.next(), parts.next()) {
            (Some(major), Some(minor)) if !major.is_empty() && !minor.is_empty() => {
                Ok(format!("{major}.{minor}"))
            }
            _ => Err(Error::Config(format!(
                "{}: appVersion {app:?} is not major.minor.patch",
                path.display()
            ))),
        }
    }

    /// The simulator (sim mode only).
    pub fn sim(&self) -> Option<&kube_sim::KubeSim> {
        self.sim.as_ref()
    }

    pub fn is_sim(&self) -> bool {
        self.sim.is_some()
    }

    /// Whether the nodes run every tag of the manager image's repository as
    /// the manager binary (kube-sim's kubelet, the process kubelet of
    /// `make e2e-real`).
    pub fn runs_any_image_tag(&self) -> bool {
        match &self.mode {
            Mode::Sim => true,
            Mode::Cluster(t) => t.image_any_tag,
        }
    }

    /// In cluster mode, prints why a sim-only step is skipped and returns
    /// true.
    pub fn skip_in_cluster(&self, what: &str) -> bool {
        if self.is_sim() {
            return false;
        }
        let line = format!("NOTE (cluster mode): skipped {what}: needs kube-sim");
        let mut verified = self.verified.lock();
        // Said once per run: a step repeated by a scenario skips the same.
        if !verified.contains(&line) {
            println!("{line}");
            verified.push(line);
        }
        true
    }

    /// A deadline scaled for the mode (real clusters pull images and
    /// schedule more slowly).
    pub fn timeout(&self, base: Duration) -> Duration {
        if self.is_sim() { base } else { base * 3 }
    }

    /// Records (and prints) one thing a scenario verified.
    pub fn verified(&self, what: impl Into<String>) {
        let what = what.into();
        println!("  verified: {what}");
        self.verified.lock().push(what);
    }

    /// Everything verified so far.
    pub fn verified_lines(&self) -> Vec<String> {
        self.verified.lock().clone()
    }

    /// helm of the given major on this cluster.
    pub async fn helm(&self, version: HelmVersion) -> Result<Helm> {
        Helm::new(
            version,
            &self.kubeconfig,
            self.context.as_deref(),
            &self.dir,
        )
        .await
    }

    pub fn kubectl(&self) -> Result<Kubectl> {
        Kubectl::new(&self.kubeconfig, self.context.as_deref())
    }

    /// Creates a namespace `<run>-<suffix>` labelled with the run (deleted
    /// by [`Harness::finish`] in cluster mode).
    pub async fn namespace(&self, suffix: &str) -> Result<String> {
        let name = format!("{}-{suffix}", self.run);
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run}}
        }))
        .map_err(|e| Error::Check(format!("namespace object: {e}")))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .ctx(|| format!("creating namespace {name}"))?;
        self.namespaces.lock().push(name.clone());
        Ok(name)
    }

    /// Records a helm release of this run (its cluster-scoped objects are
    /// removed by [`Harness::finish`] in cluster mode).
    pub fn track_release(&self, name: &str) {
        self.releases.lock().push(name.to_string());
    }

    /// Namespaces this run created.
    pub fn namespaces(&self) -> Vec<String> {
        self.namespaces.lock().clone()
    }

    /// kube-sim's recorded requests of `user` since `since` (sim only).
    pub fn requests(&self, user: &str, since: u64) -> Option<Vec<kube_sim::RequestRecord>> {
        if self.skip_in_cluster(REQUEST_ACCOUNTING) {
            return None;
        }
        let sim = self.sim.as_ref()?;
        Some(sim.requests().records(&kube_sim::RequestFilter {
            user: Some(user.to_string()),
            since: Some(since),
            ..kube_sim::RequestFilter::default()
        }))
    }

    /// Every recorded request since `since` (sim only). (helm and kubectl
    /// requests carry no bearer token over kube-sim's plain HTTP and are
    /// recorded as `system:anonymous`.)
    pub fn all_requests(&self, since: u64) -> Option<Vec<kube_sim::RequestRecord>> {
        if self.skip_in_cluster(REQUEST_ACCOUNTING) {
            return None;
        }
        let sim = self.sim.as_ref()?;
        Some(sim.requests().records(&kube_sim::RequestFilter {
            since: Some(since),
            ..kube_sim::RequestFilter::default()
        }))
    }

    /// The request log's current sequence number (sim only; 0 otherwise).
    pub fn request_seq(&self) -> u64 {
        self.sim.as_ref().map_or(0, |s| s.requests().last_seq())
    }

    /// Writes by `user` since `since`, as `verb resource[/sub] ns/name`
    /// (sim only).
    pub fn writes_by(&self, user: &str, since: u64) -> Option<Vec<String>> {
        Some(
            self.requests(user, since)?
                .into_iter()
                .filter(|r| {
                    matches!(
                        r.verb.as_str(),
                        "create" | "update" | "patch" | "delete" | "deletecollection"
                    )
                })
                .filter(|r| (200..300).contains(&r.code))
                .map(|r| {
                    let sub = if r.subresource.is_empty() {
                        String::new()
                    } else {
                        format!("/{}", r.subresource)
                    };
                    format!(
                        "{} {}{} {}/{}",
                        r.verb, r.resource, sub, r.namespace, r.name
                    )
                })
                .collect(),
        )
    }

    /// A pod's log (`pods/log`), optionally of the previous container run.
    pub async fn pod_log(&self, ns: &str, pod: &str, previous: bool) -> Result<String> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .logs(
                pod,
                &LogParams {
                    previous,
                    ..LogParams::default()
                },
            )
            .await
            .ctx(|| format!("reading the log of pod {ns}/{pod}"))
    }

    /// Kills the process of a pod's container at once: SIGKILL through the
    /// emulated kubelet (sim) or the process kubelet (a real cluster this
    /// process started), or a forced deletion (another cluster).
    pub async fn kill_pod(&self, ns: &str, pod: &str, container: &str) -> Result<KillHow> {
        if let Some(real) = &self.real {
            let pids = real.signal_pod(ns, pod, container, "KILL").await?;
            return Ok(KillHow::Signal { pids });
        }
        match &self.sim {
            Some(sim) => {
                let pids = sim
                    .signal_pod(ns, pod, Some(container), kube_sim::Signal::Kill)
                    .map_err(|e| Error::Sim(format!("SIGKILL to {ns}/{pod}: {e}")))?;
                Ok(KillHow::Signal { pids })
            }
            None => {
                Api::<Pod>::namespaced(self.client.clone(), ns)
                    .delete(pod, &DeleteParams::default().grace_period(0))
                    .await
                    .ctx(|| format!("force-deleting pod {ns}/{pod}"))?;
                Ok(KillHow::ForceDelete)
            }
        }
    }

    /// Creates the Secret holding cloud-sim's token in `ns` (as a user
    /// would: `kubectl create secret generic lb-token --from-literal=...`).
    pub async fn create_token_secret(&self, ns: &str, name: &str) -> Result<bool> {
        let Some(token) = &self.cloud_token else {
            return Ok(false);
        };
        self.kubectl()?
            .ok(&[
                "--namespace",
                ns,
                "create",
                "secret",
                "generic",
                name,
                &format!("--from-literal=token={token}"),
            ])
            .await?;
        Ok(true)
    }

    /// A scratch file in the harness directory.
    pub fn write_file(&self, name: &str, content: &str) -> Result<PathBuf> {
        let p = self.dir.join(name);
        std::fs::write(&p, content).io_ctx(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Prints the summary of what was verified; in cluster mode deletes the
    /// run's namespaces; stops kube-sim and cloud-sim.
    pub async fn finish(self) {
        let lines = self.verified.lock().clone();
        println!(
            "== {} ({} mode): {} checks verified",
            self.run,
            self.mode.name(),
            lines.len()
        );
        if !self.is_sim() {
            let api: Api<Namespace> = Api::all(self.client.clone());
            let namespaces = self.namespaces.lock().clone();
            // The releases' create-time policies first: left behind, they
            // would put this run's finalizers on every later run's claims
            // and volumes (the namespaces do not hold them).
            let releases = self.releases.lock().clone();
            for r in &releases {
                self.remove_release_policies_and_rules(r).await;
            }
            // A failed scenario can leave objects with the manager's
            // finalizers; once its namespace is gone nothing would remove
            // them (the README's uninstall step, done here).
            for ns in &namespaces {
                self.strip_project_finalizers(ns).await;
            }
            for ns in &namespaces {
                if let Err(e) = api.delete(ns, &DeleteParams::background()).await {
                    tracing::warn!(namespace = %ns, error = %e, "deleting the run's namespace");
                }
            }
            // The next scenario starts when this one's managers are gone
            // (their namespaces hold them), not merely asked to go.
            let deadline = Instant::now() + self.timeout(Duration::from_secs(60));
            for ns in &namespaces {
                while matches!(api.get_opt(ns).await, Ok(Some(_))) {
                    if Instant::now() > deadline {
                        println!(
                            "NOTE: namespace {ns} is still terminating; the next scenario starts anyway"
                        );
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            // What the namespaces do not hold: the charts' cluster-scoped
            // RBAC and the run's PVs.
            let releases = self.releases.lock().clone();
            for r in &releases {
                let lp = kube::api::ListParams::default()
                    .labels(&format!("app.kubernetes.io/instance={r}"));
                let dp = DeleteParams::background();
                let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> =
                    Api::all(self.client.clone());
                let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> =
                    Api::all(self.client.clone());
                if let Err(e) = roles.delete_collection(&dp, &lp).await {
                    tracing::warn!(release = %r, error = %e, "deleting the release's ClusterRoles");
                }
                if let Err(e) = bindings.delete_collection(&dp, &lp).await {
                    tracing::warn!(release = %r, error = %e, "deleting the release's ClusterRoleBindings");
                }
            }
            let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> =
                Api::all(self.client.clone());
            let lp = kube::api::ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run));
            if let Err(e) = pvs
                .delete_collection(&DeleteParams::background(), &lp)
                .await
            {
                tracing::warn!(error = %e, "deleting the run's PersistentVolumes");
            }
            let classes: Api<crate::observer::VolumeAttributesClass> =
                Api::all(self.client.clone());
            if let Err(e) = classes
                .delete_collection(&DeleteParams::background(), &lp)
                .await
            {
                tracing::debug!(error = %e, "deleting the run's VolumeAttributesClasses");
            }
            // The run's ServiceCIDRs (a failed chaos run's): asked to go,
            // then freed of the finalizer no manager removes now (its
            // managers are gone with their namespaces). Left Terminating, a
            // range would keep containing addresses for every later run.
            let cidrs: Api<k8s_openapi::api::networking::v1::ServiceCIDR> =
                Api::all(self.client.clone());
            if let Err(e) = cidrs
                .delete_collection(&DeleteParams::background(), &lp)
                .await
            {
                tracing::debug!(error = %e, "deleting the run's ServiceCIDRs");
            }
            strip(cidrs, &lp).await;
        }
        match std::sync::Arc::try_unwrap(self.cloud) {
            Ok(c) => c.shutdown().await,
            Err(_) => tracing::warn!("cloud-sim still in use at the end of the run; not stopped"),
        }
        if let Some(sim) = self.sim {
            sim.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Harness {
    /// What `helm uninstall` would remove of release `r` outside its
    /// namespace that its scenario may have left (cluster mode): the
    /// create-time MutatingAdmissionPolicies and their bindings, and its
    /// ProtectionRules (their finalizers stripped first: no manager runs to
    /// clear them).
    async fn remove_release_policies_and_rules(&self, r: &str) {
        use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
        let lp =
            kube::api::ListParams::default().labels(&format!("app.kubernetes.io/instance={r}"));
        let dynamic = |group: &str, version: &str, kind: &str, plural: &str| {
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            );
            Api::<DynamicObject>::all_with(self.client.clone(), &ar)
        };
        for version in ["v1", "v1beta1"] {
            for (kind, plural) in [
                (
                    "MutatingAdmissionPolicyBinding",
                    "mutatingadmissionpolicybindings",
                ),
                ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
            ] {
                let api = dynamic("admissionregistration.k8s.io", version, kind, plural);
                if let Err(e) = api
                    .delete_collection(&DeleteParams::background(), &lp)
                    .await
                {
                    tracing::debug!(release = %r, %kind, %version, error = %e, "deleting the release's policies");
                }
            }
        }
        let rules = dynamic(
            "protection-manager.io",
            "v1alpha1",
            "ProtectionRule",
            "protectionrules",
        );
        strip(rules.clone(), &lp).await;
        if let Err(e) = rules
            .delete_collection(&DeleteParams::background(), &lp)
            .await
        {
            tracing::debug!(release = %r, error = %e, "deleting the release's ProtectionRules");
        }
    }

    /// Removes the `protection-manager.io/*` finalizers from the run's PVCs,
    /// Services and Secrets in `ns` and from its PVs and
    /// VolumeAttributesClasses (cluster mode clean-up).
    async fn strip_project_finalizers(&self, ns: &str) {
        use k8s_openapi::api::core::v1::{
            PersistentVolume, PersistentVolumeClaim, Secret, Service,
        };
        let lp = kube::api::ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run));
        strip(
            Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), ns),
            &lp,
        )
        .await;
        strip(Api::<Service>::namespaced(self.client.clone(), ns), &lp).await;
        strip(Api::<Secret>::namespaced(self.client.clone(), ns), &lp).await;
        strip(Api::<PersistentVolume>::all(self.client.clone()), &lp).await;
        strip(
            Api::<crate::observer::VolumeAttributesClass>::all(self.client.clone()),
            &lp,
        )
        .await;
    }
}

/// Removes the `protection-manager.io/*` finalizers from the objects `lp`
/// selects.
async fn strip<K>(api: Api<K>, lp: &kube::api::ListParams)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Ok(list) = api.list(lp).await else { return };
    for o in list.items {
        let fins = o.meta().finalizers.clone().unwrap_or_default();
        let keep: Vec<&String> = fins
            .iter()
            .filter(|f| !f.starts_with("protection-manager.io/"))
            .collect();
        if keep.len() == fins.len() {
            continue;
        }
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": fins},
            {"op": "replace", "path": "/metadata/finalizers", "value": keep},
        ]);
        let name = o.meta().name.clone().unwrap_or_default();
        if let Ok(p) = serde_json::from_value::<json_patch::Patch>(patch) {
            let _ = api
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Json::<()>(p),
                )
                .await;
        }
    }
}

/// `key=value` pairs as a sorted map (for printing values).
pub fn pairs(sets: &[&str]) -> BTreeMap<String, String> {
    sets.iter()
        .filter_map(|s| s.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

//! A real cluster on this machine, without a container engine: the real
//! control plane of [`control_plane`] (etcd, kube-apiserver with the Node
//! authorizer and NodeRestriction, kube-controller-manager with its default
//! controllers but its service-cidr-controller: see [`KCM_CONTROLLERS`],
//! kube-scheduler), two nodes run by the process kubelet
//! (`kube-sim kubelet`, one process per node, restarted after a crash as
//! systemd restarts a kubelet), kube-sim's hostPath provisioner for the
//! default StorageClass `standard`, and cloud-sim. The manager image
//! `protection-manager:<appVersion>` runs as the workspace's manager binary.
//!
//! Used three ways: `make e2e-real` (the `real-cluster` binary holds one up
//! while the suite runs in cluster mode against its kubeconfig),
//! `tests/real.rs` in `make test`, and `make chaos-real` (which also
//! injects its faults: SIGKILL of a manager process or of a kubelet,
//! kube-apiserver and etcd restarts, SIGSTOP/SIGCONT stalls).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use control_plane::process::{Proc, Spec};
use control_plane::{Component, ControlPlane};
use serde_json::Value;

use crate::error::{Error, IoContext, Result};
use crate::mode::{ClusterTarget, DEFAULT_POD_IMAGE, ImageRef};

/// The nodes, one kubelet process each.
pub const NODES: [&str; 2] = ["node-1", "node-2"];
/// cloud-sim's token.
pub const CLOUD_TOKEN: &str = "e2e-real-cloud-token";
/// The manager image's repository on the real cluster (the kubelet maps it
/// to the manager binary; any tag).
pub const IMAGE_REPOSITORY: &str = "protection-manager";
/// How long a crashed kubelet stays down before it is started again
/// (systemd's `RestartSec` in kubeadm's unit file is 10 s; shorter here).
pub const KUBELET_RESTART_DELAY: Duration = Duration::from_secs(1);

/// kube-controller-manager's `--controllers`: its defaults but its own
/// `service-cidr-controller`, so that the ServiceCIDRs of the chaos churn
/// are held by the manager's service-cidr-protection alone. The runs keep
/// the project finalizer profile (the other kinds' checks stay on the
/// manager's own names, where the upstream profile would share
/// `kubernetes.io/pvc-protection` and `kubernetes.io/pv-protection` with
/// KCM's controllers); with KCM's controller on, its
/// `networking.k8s.io/service-cidr-finalizer` would hold every ServiceCIDR
/// beside ours and the invariant "no ServiceCIDR disappears while the only
/// range of an allocated IPAddress" would be only partly ours. Nothing
/// else needs KCM's: kube-apiserver sets the default `kubernetes`
/// ServiceCIDR Ready itself, and its allocator takes a ServiceCIDR without
/// a Ready condition as ready (upstream `ipallocator.isReady`, for clusters
/// without KCM). What KCM's controller does against ours is compared in
/// crates/service-cidr-protection/tests/differential.rs.
pub const KCM_CONTROLLERS: [&str; 2] = ["*", "-service-cidr-controller"];

fn real(msg: impl Into<String>) -> Error {
    Error::Real(msg.into())
}

/// One node's kubelet process.
pub struct Kubelet {
    pub node: String,
    proc: Arc<Proc>,
    /// The kubelet API (`https://127.0.0.1:PORT`), for signals to pods.
    pub api_url: String,
    /// Restarts after the process ended.
    pub restarts: AtomicU64,
}

/// A running real cluster (see the module docs). Dropping it stops
/// everything it started.
pub struct RealCluster {
    pub cp: ControlPlane,
    pub kubelets: Vec<Arc<Kubelet>>,
    cloud: Proc,
    pub cloud_url: String,
    /// The manager image (`protection-manager:<appVersion>`).
    pub image: ImageRef,
    pub dir: PathBuf,
    /// From the start of the control plane until both nodes were Ready.
    pub ready_after: Duration,
    stopping: Arc<AtomicBool>,
    http: reqwest::Client,
}

/// A port nobody listens on now, outside the range outgoing connections
/// take theirs from (`free_port`): a kubelet that exits is restarted on
/// its port.
fn free_port() -> Result<u16> {
    free_port::free_port().io_ctx(|| "finding a free port".into())
}

/// The chart's appVersion (the manager image's tag).
pub fn app_version() -> Result<String> {
    let path = crate::tools::chart_dir().join("Chart.yaml");
    let text = std::fs::read_to_string(&path).io_ctx(|| format!("reading {}", path.display()))?;
    let chart: Value = serde_yaml::from_str(&text)
        .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
    chart["appVersion"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| Error::Config(format!("{}: no appVersion", path.display())))
}

impl RealCluster {
    /// Starts everything and waits until both nodes are Ready and the
    /// default StorageClass exists; prints how long it took.
    pub async fn start(name: &str) -> Result<RealCluster> {
        let t0 = Instant::now();
        let kube_sim = crate::binaries::locate("kube-sim", "KUBE_SIM_BIN", "kube-sim")?;
        let cloud_sim = crate::binaries::locate("cloud-sim", "CLOUD_SIM_BIN", "cloud-sim")?;
        let manager = crate::binaries::manager_binary()?;
        let mut config = control_plane::Config::default()
            .with_kcm(KCM_CONTROLLERS)
            .with_scheduler()
            .named(name);
        // `kubectl logs` reaches the process kubelet at the Node's
        // InternalIP (127.0.0.1); the default order tries the Hostname first.
        config
            .apiserver_args
            .push("--kubelet-preferred-address-types=InternalIP,Hostname".into());
        let cp = ControlPlane::start(config)
            .await
            .map_err(|e| real(format!("starting the control plane: {e}")))?;
        let dir = cp.dir().join("cluster");
        std::fs::create_dir_all(&dir).io_ctx(|| format!("creating {}", dir.display()))?;
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| real(format!("building an HTTP client: {e}")))?;

        // cloud-sim.
        let cloud_port = free_port()?;
        let cloud = Proc::start(Spec {
            name: "cloud-sim".into(),
            program: cloud_sim,
            args: vec![
                "--port".into(),
                cloud_port.to_string(),
                "--token".into(),
                CLOUD_TOKEN.into(),
                "--state-file".into(),
                dir.join("cloud-sim.json").display().to_string(),
            ],
            env: vec![("RUST_LOG".into(), "warn".into())],
            log: dir.join("cloud-sim.log"),
        })
        .map_err(|e| real(e.to_string()))?;
        let cloud_url = format!("http://127.0.0.1:{cloud_port}");

        // The kubelets: one process per node; node-1's also provisions.
        let image = ImageRef {
            repository: IMAGE_REPOSITORY.into(),
            tag: app_version()?,
        };
        let mut kubelets = Vec::new();
        for (i, node) in NODES.iter().enumerate() {
            let port = free_port()?;
            let mut args = vec![
                "kubelet".to_string(),
                "--kubeconfig".into(),
                cp.kubeconfig_path().display().to_string(),
                "--nodes".into(),
                node.to_string(),
                "--first-index".into(),
                i.to_string(),
                "--port".into(),
                port.to_string(),
                "--root-dir".into(),
                dir.join(format!("kubelet-{node}")).display().to_string(),
                "--run-image".into(),
                format!("{IMAGE_REPOSITORY}={}", manager.display()),
            ];
            if i == 0 {
                args.push("--provisioner".into());
            }
            let proc = Proc::start(Spec {
                name: format!("kubelet {node}"),
                program: kube_sim.clone(),
                args,
                env: vec![(
                    "RUST_LOG".into(),
                    std::env::var("E2E_KUBELET_LOG").unwrap_or_else(|_| "info".into()),
                )],
                log: dir.join(format!("kubelet-{node}.log")),
            })
            .map_err(|e| real(e.to_string()))?;
            kubelets.push(Arc::new(Kubelet {
                node: node.to_string(),
                proc: Arc::new(proc),
                api_url: format!("https://127.0.0.1:{port}"),
                restarts: AtomicU64::new(0),
            }));
        }
        let stopping = Arc::new(AtomicBool::new(false));
        supervise(kubelets.clone(), stopping.clone());
        let mut cluster = RealCluster {
            cp,
            kubelets,
            cloud,
            cloud_url,
            image,
            dir,
            ready_after: Duration::ZERO,
            stopping,
            http,
        };
        cluster.wait_ready().await?;
        cluster.ready_after = t0.elapsed();
        eprintln!(
            "real cluster {name}: control plane and {} nodes ready in {:.1}s (control plane alone {:.1}s); kubeconfig {}",
            NODES.len(),
            cluster.ready_after.as_secs_f64(),
            cluster.cp.start_times().total.as_secs_f64(),
            cluster.cp.kubeconfig_path().display()
        );
        Ok(cluster)
    }

    /// One real cluster per test binary, started by the first test that
    /// asks (tests take it one at a time: see the harness's cluster turn).
    pub async fn shared() -> Result<Arc<RealCluster>> {
        static SHARED: tokio::sync::OnceCell<Arc<RealCluster>> = tokio::sync::OnceCell::const_new();
        SHARED
            .get_or_try_init(|| async { RealCluster::start("e2e-real").await.map(Arc::new) })
            .await
            .cloned()
    }

    async fn wait_ready(&self) -> Result<()> {
        let client = self.client().await?;
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
        let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
            kube::Api::all(client);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ready = nodes
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|n| {
                            n.status
                                .as_ref()
                                .and_then(|s| s.conditions.as_ref())
                                .is_some_and(|cs| {
                                    cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                                })
                        })
                        .count()
                })
                .unwrap_or(0);
            let class = matches!(classes.get_opt("standard").await, Ok(Some(_)));
            let cloud = self
                .http
                .get(format!("{}/v1/loadbalancers", self.cloud_url))
                .bearer_auth(CLOUD_TOKEN)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready == NODES.len() && class && cloud {
                return Ok(());
            }
            for k in &self.kubelets {
                if let Some(status) = k.proc.exited() {
                    return Err(real(format!(
                        "the kubelet of {} exited ({status}):\n{}",
                        k.node,
                        k.proc.log_tail(30)
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(real(format!(
                    "not ready after 120s: {ready} of {} nodes Ready, default StorageClass {}, cloud-sim {}\n--- kubelet {} ---\n{}",
                    NODES.len(),
                    if class { "present" } else { "missing" },
                    if cloud { "up" } else { "down" },
                    NODES[0],
                    self.kubelets[0].proc.log_tail(30)
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// An admin client (a new one per call).
    pub async fn client(&self) -> Result<kube::Client> {
        self.cp
            .client()
            .await
            .map_err(|e| real(format!("an admin client: {e}")))
    }

    pub fn kubeconfig(&self) -> &Path {
        self.cp.kubeconfig_path()
    }

    /// What the harness needs to run the scenarios in cluster mode here.
    pub fn target(&self) -> ClusterTarget {
        ClusterTarget {
            kubeconfig: self.kubeconfig().to_path_buf(),
            context: None,
            image: self.image.clone(),
            image_pull_policy: "IfNotPresent".into(),
            cloud_sim_url: self.cloud_url.clone(),
            cloud_sim_token: Some(CLOUD_TOKEN.into()),
            pod_image: DEFAULT_POD_IMAGE.into(),
            image_any_tag: true,
        }
    }

    /// The variables `make e2e` reads to run against this cluster.
    pub fn env(&self) -> Vec<(String, String)> {
        let t = self.target();
        vec![
            ("E2E_KUBECONFIG".into(), t.kubeconfig.display().to_string()),
            ("E2E_IMAGE".into(), t.image.to_string()),
            ("E2E_CLOUD_SIM_URL".into(), t.cloud_sim_url),
            ("E2E_CLOUD_SIM_TOKEN".into(), CLOUD_TOKEN.into()),
            ("E2E_IMAGE_ANY_TAG".into(), "1".into()),
        ]
    }

    /// Sends `sig` to a container's process of pod `ns/name`, through the
    /// kubelet API of the node that runs it; the pids signalled.
    pub async fn signal_pod(
        &self,
        ns: &str,
        name: &str,
        container: &str,
        sig: &str,
    ) -> Result<Vec<u32>> {
        let mut last = String::from("no kubelet runs it");
        for k in &self.kubelets {
            let url = format!(
                "{}/_sim/pods/{ns}/{name}/signal?sig={sig}&container={container}",
                k.api_url
            );
            match self.http.post(&url).send().await {
                Ok(r) if r.status().is_success() => {
                    let v: Value = r
                        .json()
                        .await
                        .map_err(|e| real(format!("the answer of {url}: {e}")))?;
                    return Ok(v["pids"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|p| p.as_u64())
                                .map(|p| p as u32)
                                .collect()
                        })
                        .unwrap_or_default());
                }
                Ok(r) => last = format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => last = e.to_string(),
            }
        }
        Err(real(format!("signal {sig} to {ns}/{name}: {last}")))
    }

    /// SIGKILL to the kubelet process of `node` (the supervisor starts it
    /// again after [`KUBELET_RESTART_DELAY`]).
    pub fn kill_kubelet(&self, node: &str) -> Result<()> {
        let k = self
            .kubelets
            .iter()
            .find(|k| k.node == node)
            .ok_or_else(|| real(format!("no kubelet for node {node}")))?;
        k.proc
            .signal(control_plane::Signal::SIGKILL)
            .map_err(|e| real(e.to_string()))
    }

    /// Kubelet restarts so far.
    pub fn kubelet_restarts(&self) -> u64 {
        self.kubelets
            .iter()
            .map(|k| k.restarts.load(Ordering::Relaxed))
            .sum()
    }

    /// Restarts a control-plane component (etcd keeps its data); the time
    /// until it answers again.
    pub async fn restart(&self, c: Component) -> Result<Duration> {
        self.cp
            .restart(c)
            .await
            .map_err(|e| real(format!("restarting {}: {e}", c.name())))
    }

    /// Stops kube-apiserver for `pause` (SIGSTOP, then SIGCONT): every
    /// request and watch hangs, as behind a network partition.
    pub async fn stall_apiserver(&self, pause: Duration) -> Result<()> {
        self.cp
            .signal(Component::ApiServer, control_plane::Signal::SIGSTOP)
            .map_err(|e| real(e.to_string()))?;
        tokio::time::sleep(pause).await;
        self.cp
            .signal(Component::ApiServer, control_plane::Signal::SIGCONT)
            .map_err(|e| real(e.to_string()))
    }
}

/// Restarts a kubelet whose process ended (as systemd's `Restart=always`),
/// on its own thread: the cluster may outlive the runtime of the test that
/// started it.
fn supervise(kubelets: Vec<Arc<Kubelet>>, stopping: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("kubelet-supervisor".into())
        .spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                for k in &kubelets {
                    if let Some(status) = k.proc.exited() {
                        std::thread::sleep(KUBELET_RESTART_DELAY);
                        if stopping.load(Ordering::Relaxed) {
                            return;
                        }
                        tracing::info!(node = %k.node, %status, "the kubelet ended; starting it again");
                        match k.proc.restart() {
                            Ok(()) => {
                                k.restarts.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => tracing::warn!(node = %k.node, error = %e, "restarting the kubelet"),
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the kubelet supervisor; crashed kubelets stay down");
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        // The kubelets stop their pods on SIGTERM.
        for k in &self.kubelets {
            k.proc.stop(Duration::from_secs(20));
        }
        self.cloud.stop(Duration::from_secs(5));
    }
}

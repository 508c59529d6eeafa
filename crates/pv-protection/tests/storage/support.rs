//! Harness: a server (kube-sim, or the real control plane: see the
//! `test-bed` crate), the controllers of this crate running in-process
//! against it as user `protection-manager` (on the real server with only the
//! RBAC rules their descriptors declare), and helpers to build objects, wait,
//! and read the server's request record (kube-sim's log or the audit log).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kube_sim::KubeSim;
use protection_core::release::gates_at;
use protection_core::{ControllerResult, FinalizerProfile, Metrics, ReadySignal, Version};
use pv_protection::{PV_INFO, PVC_INFO, Settings, finalizer_names, pv_controller, pvc_controller};
use serde_json::json;
use test_bed::{Bed, Mark, Options, Server};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use test_support::objects::{pod, pv, pvc};

/// The user the controllers authenticate as (the request log's `user`).
pub const USER: &str = "protection-manager";
/// Generous deadline for anything a controller should do "at once".
pub const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Pv,
    Pvc,
}

/// How a test runs the controllers.
#[derive(Clone, Debug)]
pub struct Setup {
    pub emulated: Version,
    pub feature_gates: String,
    pub profile: FinalizerProfile,
    pub resync: Duration,
    pub concurrency: u16,
    pub admission: bool,
    /// kube-sim keeps scheduled pods Terminating for their grace period
    /// (the real server always does).
    pub pod_graceful_deletion: bool,
    /// Real server only: kube-controller-manager with these `--controllers`.
    pub kcm: Option<Vec<String>>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            emulated: Version::new(0, 3),
            feature_gates: String::new(),
            profile: FinalizerProfile::Project,
            resync: Duration::ZERO,
            concurrency: 4,
            admission: false,
            pod_graceful_deletion: false,
            kcm: None,
        }
    }
}

/// One running controller.
pub struct Running {
    pub which: Which,
    pub shutdown: CancellationToken,
    pub ready: ReadySignal,
    pub metrics: protection_core::ControllerMetrics,
    pub handle: Option<JoinHandle<ControllerResult>>,
}

impl Running {
    /// Stops it and waits for it to return.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(h) = self.handle.take() {
            let r = tokio::time::timeout(DEADLINE, h)
                .await
                .expect("controller stops within the deadline")
                .expect("controller task");
            r.expect("controller returns Ok on shutdown");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub struct Harness {
    pub server: Server,
    /// The test's own client (user `admin`).
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub setup: Setup,
    pub pv_finalizer: String,
    pub pvc_finalizer: String,
}

impl Harness {
    /// On kube-sim.
    pub async fn new(setup: Setup) -> Harness {
        Harness::on(Bed::Sim, setup).await
    }

    /// On `bed`.
    pub async fn on(bed: Bed, setup: Setup) -> Harness {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
        let server = Server::start(
            bed,
            Options {
                storage_protection_admission: setup.admission,
                pod_graceful_deletion: setup.pod_graceful_deletion,
                kcm: setup.kcm.clone(),
                ..Options::named("pv-protection")
            },
        )
        .await
        .unwrap_or_else(|e| panic!("start {}: {e:#}", bed.name()));
        let client = server.client().await.expect("admin client");
        let (pv_finalizer, pvc_finalizer) = finalizer_names(setup.profile);
        Harness {
            server,
            client,
            metrics: Metrics::new().expect("metrics"),
            setup,
            pv_finalizer,
            pvc_finalizer,
        }
    }

    /// Starts one controller and waits until it reports ready.
    pub async fn start(&self, which: Which) -> Running {
        let r = self.spawn(which).await;
        let ready = r.ready.clone();
        wait_until("the controller reports ready", || {
            let ready = ready.clone();
            async move { ready.is_ready() }
        })
        .await;
        r
    }

    /// kube-sim (faults, its request log).
    pub fn sim(&self) -> &KubeSim {
        self.server.sim()
    }

    /// Starts one controller without waiting for it to be ready.
    pub async fn spawn(&self, which: Which) -> Running {
        let rbac = match which {
            Which::Pv => PV_INFO.rbac,
            Which::Pvc => PVC_INFO.rbac,
        };
        let client = self
            .server
            .controller_client(USER, rbac)
            .await
            .expect("controller client");
        let mut gates =
            gates_at(self.setup.emulated, pv_protection::GATES).expect("emulated version");
        gates
            .set_from_flag(&self.setup.feature_gates)
            .expect("--feature-gates");
        let (name, finalizer) = match which {
            Which::Pv => (pv_controller::NAME, self.pv_finalizer.clone()),
            Which::Pvc => (pvc_controller::NAME, self.pvc_finalizer.clone()),
        };
        let t = test_support::controller_context(
            name,
            client,
            gates,
            &self.metrics,
            self.setup.concurrency,
        );
        let (ctx, shutdown, ready) = (t.ctx, t.shutdown, t.ready);
        let metrics = ctx.metrics.clone();
        let settings = Settings {
            finalizer,
            resync_period: self.setup.resync,
        };
        let handle = match which {
            Which::Pv => tokio::spawn(pv_controller::run(ctx, settings)),
            Which::Pvc => tokio::spawn(pvc_controller::run(ctx, settings)),
        };
        Running {
            which,
            shutdown,
            ready,
            metrics,
            handle: Some(handle),
        }
    }

    pub fn pvcs(&self, ns: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn pvs(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    pub async fn namespace(&self, ns: &str) {
        self.server
            .namespace(ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {ns}: {e:#}"));
    }

    pub async fn create_pvc(
        &self,
        ns: &str,
        name: &str,
        finalizers: &[&str],
    ) -> PersistentVolumeClaim {
        self.pvcs(ns)
            .create(&PostParams::default(), &pvc(ns, name, finalizers))
            .await
            .unwrap_or_else(|e| panic!("create PVC {ns}/{name}: {e}"))
    }

    pub async fn create_pod(&self, ns: &str, name: &str, claim: &str, node: Option<&str>) -> Pod {
        self.pods(ns)
            .create(&PostParams::default(), &pod(ns, name, claim, node))
            .await
            .unwrap_or_else(|e| panic!("create pod {ns}/{name}: {e}"))
    }

    pub async fn create_pv(&self, name: &str, finalizers: &[&str]) -> PersistentVolume {
        self.pvs()
            .create(&PostParams::default(), &pv(name, finalizers))
            .await
            .unwrap_or_else(|e| panic!("create PV {name}: {e}"))
    }

    /// Sets a PV's `status.phase` (what the PV binder does).
    pub async fn set_pv_phase(&self, name: &str, phase: &str) {
        self.pvs()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": phase}})),
            )
            .await
            .unwrap_or_else(|e| panic!("set PV {name} phase {phase}: {e}"));
    }

    pub async fn delete_pvc(&self, ns: &str, name: &str) {
        self.pvcs(ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete PVC {ns}/{name}: {e}"));
    }

    /// Deletes a pod until it is gone: where it is left Terminating (a
    /// scheduled pod on the real server), the emulated kubelet's final
    /// DELETE follows.
    pub async fn delete_pod(&self, ns: &str, name: &str) {
        self.server
            .delete_pod(ns, name)
            .await
            .unwrap_or_else(|e| panic!("delete pod {ns}/{name}: {e:#}"));
    }

    pub async fn delete_pv(&self, name: &str) {
        self.pvs()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete PV {name}: {e}"));
    }

    pub async fn get_pvc(&self, ns: &str, name: &str) -> Option<PersistentVolumeClaim> {
        self.pvcs(ns).get_opt(name).await.expect("get PVC")
    }

    pub async fn get_pv(&self, name: &str) -> Option<PersistentVolume> {
        self.pvs().get_opt(name).await.expect("get PV")
    }

    pub async fn wait_pvc_gone(&self, ns: &str, name: &str) {
        wait_until(&format!("PVC {ns}/{name} is gone"), || async {
            self.get_pvc(ns, name).await.is_none()
        })
        .await;
    }

    pub async fn wait_pv_gone(&self, name: &str) {
        wait_until(&format!("PV {name} is gone"), || async {
            self.get_pv(name).await.is_none()
        })
        .await;
    }

    pub async fn wait_pvc_finalizer(&self, ns: &str, name: &str) {
        let f = self.pvc_finalizer.clone();
        wait_until(&format!("PVC {ns}/{name} has {f}"), || async {
            self.get_pvc(ns, name)
                .await
                .is_some_and(|p| p.finalizers().contains(&f))
        })
        .await;
    }

    pub async fn wait_pv_finalizer(&self, name: &str) {
        let f = self.pv_finalizer.clone();
        wait_until(&format!("PV {name} has {f}"), || async {
            self.get_pv(name)
                .await
                .is_some_and(|p| p.finalizers().contains(&f))
        })
        .await;
    }

    /// Events (events.k8s.io/v1) in `ns` regarding `name`, oldest first.
    pub async fn events_for(&self, ns: &str, name: &str) -> Vec<Event> {
        let api: Api<Event> = if ns.is_empty() {
            Api::namespaced(self.client.clone(), "default")
        } else {
            Api::namespaced(self.client.clone(), ns)
        };
        let mut evs: Vec<Event> = api
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        evs.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        evs
    }

    /// Requests of the controllers' user matching `verb` and `resource`
    /// after `since` (from [`Harness::seq`]).
    pub fn count(&self, verb: &str, resource: &str, since: u64) -> usize {
        self.server.count(USER, verb, resource, Mark(since))
    }

    /// [`Harness::count`] once it reaches `n` (or at the deadline): the
    /// count of writes a test has just seen land, whose audit entries
    /// kube-apiserver may not have written yet.
    pub async fn wait_count(&self, verb: &str, resource: &str, since: u64, n: usize) -> usize {
        let start = Instant::now();
        loop {
            let count = self.count(verb, resource, since);
            if count >= n || start.elapsed() > DEADLINE {
                return count;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Writes (create/update/patch/delete) of the controllers' user to
    /// `resource` after `since`.
    pub fn writes(&self, resource: &str, since: u64) -> usize {
        ["create", "update", "patch", "delete", "deletecollection"]
            .iter()
            .map(|v| self.count(v, resource, since))
            .sum()
    }

    /// The present end of the server's request record (kube-sim's last
    /// sequence number, or the audit log's length).
    pub fn seq(&self) -> u64 {
        self.server.mark().0
    }

    /// [`Harness::seq`] once the request record holds at least `n` Event
    /// creates of the controllers' user. kube-apiserver writes a request's
    /// audit entry after its handler returns, so an Event a test has just
    /// read through the API may not be in the audit log yet: a mark taken
    /// then would count that create as a later write.
    pub async fn seq_after_events(&self, n: usize) -> u64 {
        wait_until(
            &format!("the audit log holds {n} Event creates"),
            || async { self.count("create", "events", 0) >= n },
        )
        .await;
        self.seq()
    }
}

/// Polls `f` until it holds, or panics naming `what` after [`DEADLINE`].
pub async fn wait_until(what: &str, f: impl AsyncFnMut() -> bool) {
    test_support::until(DEADLINE, what, f).await
}

/// Prints what a test verifies (visible with `--nocapture`, and in failures).
pub fn verifies(what: &str) {
    eprintln!("VERIFIES: {what}");
}

impl Harness {
    /// A metric sample from the exposition, e.g.
    /// `protection_manager_reconcile_total{controller="pvc-protection",result="success"}`.
    pub fn metric(&self, series: &str) -> f64 {
        let text = self.metrics.encode().expect("encode metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.trim().parse().ok()))
            .unwrap_or(0.0)
    }

    /// Waits until the metric sample reads `value`: the manager updates a
    /// gauge when its watch delivers the change, which may come after the
    /// server already answers it.
    pub async fn wait_metric(&self, series: &str, value: f64) {
        wait_until(&format!("{series} reads {value}"), || async {
            self.metric(series) == value
        })
        .await;
    }

    pub fn reconciles(&self, controller: &str) -> f64 {
        self.metric(&format!(
            "protection_manager_reconcile_total{{controller=\"{controller}\",result=\"success\"}}"
        )) + self.metric(&format!(
            "protection_manager_reconcile_total{{controller=\"{controller}\",result=\"error\"}}"
        ))
    }

    /// Waits until the controller has finished at least `n` more reconciles
    /// than `before`.
    pub async fn wait_reconciles(&self, controller: &str, before: f64, n: f64) {
        wait_until(
            &format!("{controller} reconciled {n} more time(s)"),
            || async { self.reconciles(controller) >= before + n },
        )
        .await;
    }

    /// Waits for a `reason` event regarding `name`; returns its note.
    pub async fn wait_event(&self, ns: &str, name: &str, reason: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some(e) = self
                .events_for(ns, name)
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
            {
                return e.note.unwrap_or_default();
            }
            if start.elapsed() > DEADLINE {
                panic!("timed out after {DEADLINE:?} waiting for a {reason} event for {name}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

//! Runs the service-lb-cleanup controller in-process against a server
//! (kube-sim, or the real kube-apiserver v1.36.3 with the controller's RBAC
//! rules only; see the `test-bed` crate) and cloud-sim.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use cloud_sim::{CloudSim, Config as CloudConfig};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_sim::KubeSim;
use lb_cleanup::Options;
use protection_core::controllers::ReadySignal;
use protection_core::metrics::Metrics;
use protection_core::release;
use protection_core::version::Version;
use protection_core::{ControllerResult, FinalizerProfile};
use serde_json::Value;
use test_bed::{Bed, Mark, Request, Server};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const CLASS: &str = "protection-manager.io/load-balancer";
pub const FINALIZER: &str = "protection-manager.io/load-balancer-cleanup";
/// The user the controller's requests are attributed to.
pub const USER: &str = "lb-controller";
pub const NS: &str = "default";
/// Generous: a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How to start the controller.
#[derive(Clone, Debug)]
pub struct Ctl {
    pub version: Version,
    pub gates: String,
    pub profile: FinalizerProfile,
    pub resync: Duration,
    pub concurrency: u16,
    pub include_unclassed: bool,
}

impl Default for Ctl {
    fn default() -> Self {
        Self {
            version: release::BINARY_VERSION,
            gates: String::new(),
            profile: FinalizerProfile::Project,
            resync: Duration::from_secs(30),
            concurrency: 4,
            include_unclassed: false,
        }
    }
}

impl Ctl {
    pub fn at(v: &str) -> Self {
        Self {
            version: v.parse().expect("version"),
            ..Self::default()
        }
    }
}

struct Running {
    stop: CancellationToken,
    task: JoinHandle<ControllerResult>,
    ready: ReadySignal,
}

/// A server + cloud-sim + (optionally) a running controller.
pub struct Env {
    pub server: Server,
    pub cloud: CloudSim,
    pub admin: kube::Client,
    pub metrics: Arc<Metrics>,
    running: Option<Running>,
}

pub async fn wait_for(what: &str, f: impl AsyncFnMut() -> bool) {
    test_support::until(DEADLINE, what, f).await
}

pub fn lb_service(name: &str, class: Option<&str>) -> Service {
    test_support::objects::lb_service(NS, name, class)
}

pub use test_support::objects::node;

/// Whether the manager wrote `e`. On the real server others report about
/// Services too: kube-apiserver's ClusterIP repair loop writes
/// `ClusterIPNotAllocated` when its IPAddress informer is behind its Service
/// informer.
fn by_us(e: &k8s_openapi::api::events::v1::Event) -> bool {
    e.reporting_controller
        .as_deref()
        .is_some_and(|c| c.starts_with("protection-manager/"))
}

pub fn finalizers(s: &Service) -> Vec<String> {
    s.metadata.finalizers.clone().unwrap_or_default()
}

pub fn ingress_ips(s: &Service) -> Vec<String> {
    s.status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|i| i.iter().filter_map(|x| x.ip.clone()).collect())
        .unwrap_or_default()
}

impl Env {
    /// On kube-sim.
    pub async fn new() -> Self {
        Self::on(Bed::Sim).await
    }

    pub async fn on(bed: Bed) -> Self {
        Self::with_cloud_on(bed, CloudConfig::default()).await
    }

    pub async fn with_cloud_on(bed: Bed, cfg: CloudConfig) -> Self {
        // RUST_LOG=lb_cleanup=debug shows the controller's decisions.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let server = Server::start(bed, test_bed::Options::named("lb-cleanup"))
            .await
            .unwrap_or_else(|e| panic!("start {}: {e:#}", bed.name()));
        let cloud = CloudSim::start(cfg).await.expect("start cloud-sim");
        let admin = server.client().await.expect("admin client");
        Self {
            server,
            cloud,
            admin,
            metrics: Metrics::new().expect("metrics"),
            running: None,
        }
    }

    /// kube-sim (faults, its request log).
    pub fn kube(&self) -> &KubeSim {
        self.server.sim()
    }

    /// The present end of the server's request record.
    pub fn mark(&self) -> u64 {
        self.server.mark().0
    }

    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.admin.clone(), NS)
    }

    pub async fn add_nodes(&self, names: &[&str]) {
        let api: Api<Node> = Api::all(self.admin.clone());
        for n in names {
            api.create(&PostParams::default(), &node(n))
                .await
                .expect("create node");
        }
    }

    pub async fn create(&self, svc: &Service) -> Service {
        self.services()
            .create(&PostParams::default(), svc)
            .await
            .expect("create service")
    }

    /// Creates the LoadBalancer Service `name` of our class and waits until
    /// it has our finalizer and an ingress; its uid.
    pub async fn create_ready(&self, name: &str) -> String {
        let uid = self
            .create(&lb_service(name, Some(CLASS)))
            .await
            .metadata
            .uid
            .expect("uid");
        self.wait_service(name, "is ready", |s| {
            s.is_some_and(|s| {
                finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty()
            })
        })
        .await;
        uid
    }

    /// Changes the Service `name` to ClusterIP as upstream's e2e jig does
    /// (GET, set the type and ports[0].nodePort = 0, PUT); the API server
    /// drops the fields only a LoadBalancer may have.
    pub async fn make_cluster_ip(&self, name: &str) {
        let mut s = self.get(name).await.expect("service");
        if let Some(spec) = s.spec.as_mut() {
            spec.type_ = Some("ClusterIP".into());
            if let Some(p) = spec.ports.as_mut().and_then(|p| p.first_mut()) {
                p.node_port = Some(0);
            }
        }
        self.services()
            .replace(name, &Default::default(), &s)
            .await
            .expect("update the Service to ClusterIP");
    }

    pub async fn get(&self, name: &str) -> Option<Service> {
        self.services().get_opt(name).await.expect("get service")
    }

    pub async fn merge(&self, name: &str, patch: Value) -> Service {
        self.services()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch service")
    }

    pub async fn delete(&self, name: &str) {
        self.services()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete service");
    }

    /// Starts the controller (stopping a running one first) and waits until
    /// its caches synced.
    pub async fn start(&mut self, ctl: Ctl) {
        self.stop().await;
        let mut gates = release::gates_at(ctl.version, lb_cleanup::GATES).expect("version");
        gates.set_from_flag(&ctl.gates).expect("gates");
        let client = self
            .server
            .controller_client(USER, lb_cleanup::INFO.rbac)
            .await
            .expect("controller client");
        let opts = Options {
            lb_provider_endpoint: Some(self.cloud.url()),
            lb_include_unclassed: ctl.include_unclassed,
            lb_resync_period: ctl.resync,
            ..Options::default()
        };
        let mut descriptors = lb_cleanup::descriptors(&opts, ctl.profile).expect("descriptors");
        let d = descriptors.remove(0);
        let t =
            test_support::controller_context(d.name, client, gates, &self.metrics, ctl.concurrency);
        let (ctx, stop, ready) = (t.ctx, t.shutdown, t.ready);
        let task = tokio::spawn((d.run)(ctx));
        let r = ready.clone();
        wait_for("the controller's caches synced", || {
            let r = r.clone();
            async move { r.is_ready() }
        })
        .await;
        self.running = Some(Running { stop, task, ready });
    }

    /// Graceful stop (SIGTERM).
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.stop.cancel();
            let res = tokio::time::timeout(DEADLINE, r.task)
                .await
                .expect("controller stops after shutdown");
            res.expect("controller task").expect("controller result");
        }
    }

    /// Abrupt stop: the task is dropped wherever it is (in-process SIGKILL).
    pub async fn kill(&mut self) {
        if let Some(r) = self.running.take() {
            r.task.abort();
            let _ = r.task.await;
            r.stop.cancel();
        }
    }

    pub fn is_ready(&self) -> bool {
        self.running.as_ref().is_some_and(|r| r.ready.is_ready())
    }

    /// Writes (create/update/patch/delete) by the controller on Services
    /// after `since` ([`Env::mark`]).
    pub fn service_writes(&self, since: u64) -> Vec<Request> {
        self.server
            .requests_since(Mark(since))
            .into_iter()
            .filter(|r| r.user == USER && r.resource == "services" && r.is_write())
            .collect()
    }

    /// Load balancers in cloud-sim whose Service no longer exists.
    pub async fn orphans(&self) -> Vec<cloud_sim::LoadBalancer> {
        let live: Vec<String> = self
            .services()
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.uid)
            .collect();
        self.cloud.orphans(live.iter().map(String::as_str))
    }

    /// Events (events.k8s.io) about the Service `name`: (type, reason, note).
    pub async fn events(&self, name: &str) -> Vec<(String, String, String)> {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(self.admin.clone(), NS);
        let mut out: Vec<_> = api
            .list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name) && by_us(e)
            })
            .map(|e| {
                (
                    e.event_time.as_ref().map(|t| t.0),
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect();
        out.sort_by_key(|e| e.0);
        out.into_iter().map(|(_, t, r, n)| (t, r, n)).collect()
    }

    /// How many times the manager reported `reason` about `name` (events.k8s.io
    /// series fold repeats into one Event with `series.count`).
    pub async fn event_count(&self, name: &str, reason: &str) -> i32 {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(self.admin.clone(), NS);
        api.list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.reason.as_deref() == Some(reason)
                    && by_us(e)
            })
            .map(|e| e.series.map_or(1, |s| s.count))
            .sum()
    }

    /// The Service once `f` holds for it (`None` = NotFound).
    pub async fn wait_service(
        &self,
        name: &str,
        what: &str,
        mut f: impl FnMut(Option<&Service>) -> bool,
    ) -> Option<Service> {
        let start = Instant::now();
        loop {
            let s = self.get(name).await;
            if f(s.as_ref()) {
                return s;
            }
            if start.elapsed() > DEADLINE {
                panic!("timed out waiting until {name} {what}; last seen: {s:#?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

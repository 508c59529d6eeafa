//! The real control plane with one process kubelet (`kube-sim kubelet`),
//! shared by the tests of a binary, and [`Bed`]: kube-sim with its
//! in-process kubelets or that real cluster, for differential tests.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use control_plane::process::{Proc, Spec};
use control_plane::{Config, ControlPlane};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};
use kube_sim::{KubeSim, PodProcess};
use serde_json::{Value, json};

use super::cluster::{kube_sim_bin, within};

pub const NODE: &str = "kubelet-test-node";

/// The tests share one kubelet; the one that kills it runs alone.
pub static KUBELET: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The real control plane with one process kubelet, shared by the tests of
/// this binary (each in its own namespace).
pub struct Real {
    pub cp: Arc<ControlPlane>,
    pub kubelet: Proc,
    pub api: String,
    pub http: reqwest::Client,
}

pub async fn real() -> Arc<Real> {
    static REAL: tokio::sync::OnceCell<Arc<Real>> = tokio::sync::OnceCell::const_new();
    REAL.get_or_init(|| async {
        let cp = ControlPlane::shared("process-kubelet", || {
            let mut c = Config::default().with_kcm(["*"]).with_scheduler();
            c.apiserver_args
                .push("--kubelet-preferred-address-types=InternalIP,Hostname".into());
            c
        })
        .await
        .unwrap_or_else(|e| panic!("starting the control plane: {e}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("a free port: {e}"));
        let root = cp.dir().join("kubelet");
        let kubelet = Proc::start(Spec {
            name: "kubelet".into(),
            program: kube_sim_bin(),
            args: vec![
                "kubelet".into(),
                "--kubeconfig".into(),
                cp.kubeconfig_path().display().to_string(),
                "--nodes".into(),
                NODE.into(),
                "--port".into(),
                port.to_string(),
                "--root-dir".into(),
                root.display().to_string(),
                "--run-image".into(),
                format!("kube-sim={}", kube_sim_bin().display()),
                "--run-image".into(),
                "sh=/bin/sh".into(),
                // The default StorageClass, as kube-sim's cluster() has.
                "--provisioner".into(),
            ],
            env: vec![("RUST_LOG".into(), "info".into())],
            log: cp.dir().join("kubelet.log"),
        })
        .unwrap_or_else(|e| panic!("starting the kubelet: {e}"));
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let real = Real {
            cp,
            kubelet,
            api: format!("https://127.0.0.1:{port}"),
            http,
        };
        let client = real.client().await;
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
        within(60, "the node to be Ready", || async {
            nodes.get_opt(NODE).await.ok().flatten().filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
        })
        .await;
        Arc::new(real)
    })
    .await
    .clone()
}

impl Real {
    pub async fn client(&self) -> Client {
        self.cp
            .client()
            .await
            .unwrap_or_else(|e| panic!("an admin client: {e}"))
    }

    /// The pods the kubelet runs (none while it is down or starting).
    pub async fn pods(&self) -> Vec<PodProcess> {
        let r = self
            .http
            .get(format!("{}/_sim/pods", self.api))
            .send()
            .await;
        let v: Value = match r {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => return Vec::new(),
        };
        serde_json::from_value(v["items"].clone()).unwrap_or_default()
    }
}

/// Where a scenario runs: kube-sim with its in-process kubelets, or the
/// real control plane with the process kubelet.
pub enum Bed {
    Sim(KubeSim),
    Real(Arc<Real>),
}

impl Bed {
    pub fn name(&self) -> &'static str {
        match self {
            Bed::Sim(_) => "kube-sim",
            Bed::Real(_) => "real control plane",
        }
    }

    pub async fn client(&self) -> Client {
        match self {
            Bed::Sim(s) => s.client().await,
            Bed::Real(r) => r.client().await,
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        match self {
            Bed::Sim(s) => s.kubeconfig_path().to_path_buf(),
            Bed::Real(r) => r.cp.kubeconfig_path().to_path_buf(),
        }
    }

    pub async fn pod_process(&self, ns: &str, name: &str) -> Option<PodProcess> {
        match self {
            Bed::Sim(s) => s.pod_process(ns, name),
            Bed::Real(r) => r
                .pods()
                .await
                .into_iter()
                .rev()
                .find(|p| p.namespace == ns && p.name == name),
        }
    }

    pub async fn kill(&self, ns: &str, name: &str) -> Vec<u32> {
        match self {
            Bed::Sim(s) => s
                .signal_pod(ns, name, None, kube_sim::Signal::Kill)
                .unwrap_or_else(|e| panic!("SIGKILL {ns}/{name}: {e}")),
            Bed::Real(r) => {
                let v: Value = r
                    .http
                    .post(format!("{}/_sim/pods/{ns}/{name}/signal?sig=KILL", r.api))
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("signal: {e}"))
                    .json()
                    .await
                    .unwrap_or_else(|e| panic!("signal: {e}"));
                serde_json::from_value(v["pids"].clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
            }
        }
    }

    /// A namespace whose `default` ServiceAccount exists (KCM creates it on
    /// the real server; kube-sim needs none).
    pub async fn namespace(&self, prefix: &str) -> String {
        let client = self.client().await;
        let ns = super::unique(prefix);
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap_or_default(),
        )
        .await
        .unwrap_or_else(|e| panic!("creating namespace {ns}: {e}"));
        if let Bed::Real(_) = self {
            let sas: Api<ServiceAccount> = Api::namespaced(client, &ns);
            within(60, "the default ServiceAccount", || async {
                sas.get_opt("default").await.ok().flatten()
            })
            .await;
        }
        ns
    }
}

//! Opt-in emulation of the cluster components a user's cluster runs outside
//! the API server, so that what a user observes through the API (pods
//! appearing for a Deployment, a pod getting scheduled and running, a PVC
//! binding, a PV being released) happens on kube-sim too:
//!
//! * a kube-controller-manager subset ([`deployment`], [`replicaset`],
//!   [`job`], [`pvbinder`]) sharing informers as `system:kube-controller-manager`
//!   and writing as `system:serviceaccount:kube-system:<controller>` (the
//!   `--use-service-account-credentials` setup);
//! * a scheduler ([`scheduler`]) as `system:kube-scheduler`;
//! * one node agent per node ([`kubelet`]) as `system:node:<name>`, which
//!   registers its Node, runs pods whose image maps to a local binary as
//!   processes and the other pods "fakely".
//!
//! Every loop is a [`kube::Client`] of the simulator: its requests are in the
//! request log under its user, and faults apply to it as they would to the
//! real component. Everything is off by default ([`ClusterConfig::default`]).

pub mod deployment;
pub mod events;
pub mod informer;
pub mod job;
pub mod kubelet;
pub mod logs;
pub mod provisioner;
pub mod pvbinder;
pub mod replicaset;
pub mod runtime;
pub mod scheduler;
pub(crate) mod util;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use runtime::{Launcher, PodProcess, PodRuntimes, Signal, SignalError};

/// The users the emulated components authenticate as.
pub mod users {
    /// Shared informers of the controller manager.
    pub const CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
    pub const SCHEDULER: &str = "system:kube-scheduler";
    pub const DEPLOYMENT_CONTROLLER: &str =
        "system:serviceaccount:kube-system:deployment-controller";
    pub const REPLICASET_CONTROLLER: &str =
        "system:serviceaccount:kube-system:replicaset-controller";
    pub const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";
    pub const TTL_AFTER_FINISHED_CONTROLLER: &str =
        "system:serviceaccount:kube-system:ttl-after-finished-controller";
    pub const PV_BINDER: &str = "system:serviceaccount:kube-system:persistent-volume-binder";

    /// The kubelet of `node`.
    pub fn node(node: &str) -> String {
        format!("system:node:{node}")
    }
}

/// The provisioner name of kube-sim's hostPath dynamic provisioner.
pub const HOSTPATH_PROVISIONER: &str = "kube-sim.io/hostpath";

/// Errors in the cluster emulation configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "unknown emulation {0:?}: expected a comma-separated list of scheduler, pv-binder, deployments, jobs, kubelet, provisioner (or all, none)"
    )]
    UnknownLoop(String),
    #[error(
        "invalid --run-image {0:?}: expected IMAGE=PATH (e.g. protection-manager=/usr/local/bin/protection-manager)"
    )]
    RunImage(String),
    #[error("invalid node name {0:?}: {1}")]
    NodeName(String, String),
}

/// Which cluster components kube-sim emulates. All off by default.
#[derive(Debug, Clone, Default)]
pub struct ClusterConfig {
    /// Node names. When any loop is on and this is empty, one node named
    /// [`DEFAULT_NODE`] is used. Nodes are registered (and Ready) whenever
    /// the scheduler or the kubelet is on, or when names are given.
    pub nodes: Vec<String>,
    /// Binds Pending pods to nodes (`pods/binding`).
    pub scheduler: bool,
    /// PV/PVC binding, Released/Lost/Failed phases (kube-controller-manager's
    /// persistentvolume-binder).
    pub pv_binder: bool,
    /// Deployment and ReplicaSet controllers.
    pub deployments: bool,
    /// Job and ttl-after-finished controllers.
    pub jobs: bool,
    /// Node agents that run the pods bound to their node.
    pub kubelet: bool,
    /// A default StorageClass `standard` (WaitForFirstConsumer) served by
    /// kube-sim's hostPath provisioner (its volumes are bound by `pv_binder`).
    pub provisioner: bool,
    pub kubelet_config: KubeletConfig,
}

/// The node name used when none are configured.
pub const DEFAULT_NODE: &str = "kube-sim-node";

impl ClusterConfig {
    /// Every loop on, one node.
    pub fn all() -> ClusterConfig {
        ClusterConfig {
            scheduler: true,
            pv_binder: true,
            deployments: true,
            jobs: true,
            kubelet: true,
            provisioner: true,
            ..Default::default()
        }
    }

    /// Parses the `--emulate` list: `scheduler,pv-binder,deployments,jobs,kubelet,provisioner`,
    /// `all` or `none`.
    pub fn parse_emulate(list: &str) -> Result<ClusterConfig, ConfigError> {
        let mut c = ClusterConfig::default();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item {
                "all" => {
                    let keep = std::mem::take(&mut c.nodes);
                    c = ClusterConfig::all();
                    c.nodes = keep;
                }
                "none" => {}
                "scheduler" => c.scheduler = true,
                "pv-binder" | "pvbinder" => c.pv_binder = true,
                "deployments" | "deployment" | "replicasets" => c.deployments = true,
                "jobs" | "job" => c.jobs = true,
                "kubelet" | "kubelets" => c.kubelet = true,
                "provisioner" => c.provisioner = true,
                other => return Err(ConfigError::UnknownLoop(other.to_string())),
            }
        }
        Ok(c)
    }

    /// Whether any loop runs.
    pub fn any(&self) -> bool {
        self.scheduler
            || self.pv_binder
            || self.deployments
            || self.jobs
            || self.kubelet
            || self.provisioner
            || !self.nodes.is_empty()
    }

    /// The nodes to register (empty when no node is needed).
    pub fn node_names(&self) -> Vec<String> {
        if !self.nodes.is_empty() {
            return self.nodes.clone();
        }
        if self.scheduler || self.kubelet {
            vec![DEFAULT_NODE.to_string()]
        } else {
            Vec::new()
        }
    }

    /// Checks node names (DNS-1123 subdomains, unique).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for n in &self.nodes {
            if let Some(m) = crate::validation::dns1123_subdomain(n).into_iter().next() {
                return Err(ConfigError::NodeName(n.clone(), m));
            }
            if !seen.insert(n) {
                return Err(ConfigError::NodeName(n.clone(), "given twice".into()));
            }
        }
        Ok(())
    }
}

/// Settings of the emulated kubelets.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Images run as local processes (the rest run "fakely").
    pub images: Vec<ImageMapping>,
    /// Where pod directories (volumes, logs, kubeconfigs) go; a directory in
    /// the simulator's temp dir when None.
    pub root_dir: Option<PathBuf>,
    /// CrashLoopBackOff: first delay (upstream 10 s), doubled up to
    /// `crash_loop_max` (upstream 300 s).
    pub crash_loop_initial: Duration,
    pub crash_loop_max: Duration,
    /// How often the node Lease is renewed (upstream 10 s).
    pub lease_interval: Duration,
    /// Each node's `pods` capacity (the kubelet's `--max-pods`, upstream
    /// 110); the scheduler answers "Too many pods" beyond it.
    pub max_pods: u32,
    /// How container processes are started.
    pub launcher: Launcher,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        KubeletConfig {
            images: Vec::new(),
            root_dir: None,
            crash_loop_initial: Duration::from_secs(10),
            crash_loop_max: Duration::from_secs(300),
            lease_interval: Duration::from_secs(10),
            max_pods: 110,
            launcher: Launcher::Direct,
        }
    }
}

/// An image → local binary mapping (`--run-image IMAGE=PATH`).
///
/// `IMAGE` is a repository, optionally with a `:tag`. It matches a pod's
/// image when the repositories are equal or `IMAGE`'s repository is a
/// trailing path of the pod's (`protection-manager` matches
/// `ghcr.io/acme/protection-manager:0.3.0`), and, when it has a tag, the
/// tags are equal. A tagged mapping wins over an untagged one, so
/// `pm:0.2.0=/old/bin` and `pm=/new/bin` run 0.2.0 pods with the old binary
/// and every other tag with the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMapping {
    pub image: String,
    pub binary: PathBuf,
}

impl std::str::FromStr for ImageMapping {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((i, p)) if !i.trim().is_empty() && !p.trim().is_empty() => Ok(ImageMapping {
                image: i.trim().to_string(),
                binary: PathBuf::from(p.trim()),
            }),
            _ => Err(ConfigError::RunImage(s.to_string())),
        }
    }
}

/// Splits an image reference into (repository, tag); without a tag, the
/// digest counts as the tag (`repo@sha256:...`); `repo:tag@digest` gives the
/// tag.
pub fn split_image(image: &str) -> (&str, Option<&str>) {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last_slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, digest),
    }
}

impl ImageMapping {
    /// How well this mapping matches `image`: None (no match), Some(1)
    /// repository only, Some(2) repository and tag.
    pub fn score(&self, image: &str) -> Option<u8> {
        let (want_repo, want_tag) = split_image(&self.image);
        let (repo, tag) = split_image(image);
        let repo_ok = repo == want_repo
            || (repo.len() > want_repo.len()
                && repo.ends_with(want_repo)
                && repo.as_bytes()[repo.len() - want_repo.len() - 1] == b'/');
        if !repo_ok {
            return None;
        }
        match want_tag {
            None => Some(1),
            Some(t) if Some(t) == tag => Some(2),
            Some(_) => None,
        }
    }
}

/// The binary an image runs as, if any mapping matches.
pub fn binary_for<'a>(images: &'a [ImageMapping], image: &str) -> Option<&'a ImageMapping> {
    let mut best: Option<(&ImageMapping, u8)> = None;
    for m in images {
        if let Some(s) = m.score(image)
            && best.is_none_or(|(_, b)| s > b)
        {
            best = Some((m, s));
        }
    }
    best.map(|(m, _)| m)
}

/// Builds clients for the emulated components.
#[derive(Clone)]
pub(crate) struct Clients {
    pub url: String,
    pub dir: PathBuf,
}

impl Clients {
    /// A client authenticated as `user` (bearer token = user name).
    pub(crate) async fn client(&self, user: &str) -> Result<kube::Client, String> {
        let safe = crate::file_safe(user);
        let path = self.dir.join(format!("kubeconfig-component-{safe}"));
        std::fs::write(&path, crate::kubeconfig_yaml(&self.url, user))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        crate::client_from_kubeconfig(&path).await
    }
}

/// Starts the configured loops. Each runs until `stop` fires.
pub(crate) async fn start(
    cfg: &ClusterConfig,
    clients: Clients,
    runtimes: Arc<PodRuntimes>,
    kubelet_root: PathBuf,
    stop: CancellationToken,
) -> Result<(), String> {
    let nodes = cfg.node_names();
    for (i, n) in nodes.iter().enumerate() {
        let client = clients.client(&users::node(n)).await?;
        kubelet::register_node(&client, n, i, cfg.kubelet_config.max_pods, None).await?;
    }
    if cfg.provisioner {
        let client = clients.client(provisioner::PROVISIONER_USER).await?;
        provisioner::ensure_default_storage_class(&client).await?;
        tokio::spawn(provisioner::run(
            client,
            kubelet_root.join("provisioned"),
            stop.clone(),
        ));
    }
    if cfg.deployments || cfg.jobs || cfg.pv_binder {
        let kcm = informer::ControllerManager::start(
            &clients,
            cfg.deployments,
            cfg.jobs,
            cfg.pv_binder,
            stop.clone(),
        )
        .await?;
        if cfg.deployments {
            let rs_client = clients.client(users::REPLICASET_CONTROLLER).await?;
            tokio::spawn(replicaset::run(kcm.clone(), rs_client, stop.clone()));
            let d_client = clients.client(users::DEPLOYMENT_CONTROLLER).await?;
            tokio::spawn(deployment::run(kcm.clone(), d_client, stop.clone()));
        }
        if cfg.jobs {
            let j_client = clients.client(users::JOB_CONTROLLER).await?;
            tokio::spawn(job::run(kcm.clone(), j_client, stop.clone()));
            let t_client = clients.client(users::TTL_AFTER_FINISHED_CONTROLLER).await?;
            tokio::spawn(job::run_ttl(kcm.clone(), t_client, stop.clone()));
        }
        if cfg.pv_binder {
            let p_client = clients.client(users::PV_BINDER).await?;
            tokio::spawn(pvbinder::run(kcm.clone(), p_client, stop.clone()));
        }
    }
    if cfg.scheduler {
        let client = clients.client(users::SCHEDULER).await?;
        tokio::spawn(scheduler::run(client, stop.clone()));
    }
    if cfg.kubelet {
        for (i, n) in nodes.iter().enumerate() {
            let client = clients.client(&users::node(n)).await?;
            tokio::spawn(kubelet::run(
                kubelet::NodeAgent {
                    node: n.clone(),
                    index: i,
                    client,
                    config: cfg.kubelet_config.clone(),
                    root: kubelet_root.join(n),
                    runtimes: runtimes.clone(),
                    api: kubelet::ApiAccess::sim(&clients.url),
                    address: None,
                },
                stop.clone(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> ImageMapping {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn image_mappings_match_by_repository_and_tag() {
        let maps = vec![
            m("protection-manager=/new"),
            m("protection-manager:0.2.0=/old"),
        ];
        let pick = |i: &str| binary_for(&maps, i).map(|m| m.binary.display().to_string());
        assert_eq!(
            pick("ghcr.io/acme/protection-manager:0.3.0").as_deref(),
            Some("/new")
        );
        assert_eq!(
            pick("ghcr.io/acme/protection-manager:0.2.0").as_deref(),
            Some("/old")
        );
        assert_eq!(pick("protection-manager").as_deref(), Some("/new"));
        assert_eq!(pick("ghcr.io/acme/my-protection-manager:1"), None);
        assert_eq!(pick("nginx:1.27"), None);
        assert_eq!(
            split_image("localhost:5000/a/b:1.0"),
            ("localhost:5000/a/b", Some("1.0"))
        );
        assert_eq!(
            split_image("localhost:5000/a/b"),
            ("localhost:5000/a/b", None)
        );
        assert_eq!(split_image("a/b:1.0@sha256:ab"), ("a/b", Some("1.0")));
        assert_eq!(split_image("a/b@sha256:ab"), ("a/b", Some("sha256:ab")));
        assert_eq!(
            pick("ghcr.io/acme/protection-manager:0.2.0@sha256:0123").as_deref(),
            Some("/old")
        );
        assert!("nope".parse::<ImageMapping>().is_err());
    }

    #[test]
    fn emulate_list() {
        let c = ClusterConfig::parse_emulate("scheduler, kubelet").unwrap_or_default();
        assert!(c.scheduler && c.kubelet && !c.deployments);
        assert_eq!(c.node_names(), vec![DEFAULT_NODE.to_string()]);
        assert!(ClusterConfig::parse_emulate("all").is_ok_and(|c| c.jobs && c.pv_binder));
        assert!(ClusterConfig::parse_emulate("kubelett").is_err());
        assert!(!ClusterConfig::default().any());
    }
}

//! The node agent ("kubelet"): an API client as `system:node:<node>` that
//! registers its Node, renews its Lease in `kube-node-lease`, watches the
//! pods bound to it (`fieldSelector=spec.nodeName=<node>`) and runs them.
//!
//! Pods whose image maps to a local binary ([`super::ImageMapping`]) run as
//! processes ([`container`]); the others run "fakely" (Running and Ready at
//! once; with restartPolicy OnFailure/Never their containers exit 0 after a
//! second so that Jobs complete). See the crate README for the rules
//! (command, env, volumes, ports, probes, restarts, graceful deletion).

pub mod bootstrap;
pub mod container;
pub mod pod;
pub mod probe;
pub mod process;
pub mod rewrite;
pub mod server;
pub mod shim;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::KubeletConfig;
use super::events::Recorder;
use super::informer::{self, Changes};
use super::runtime::PodRuntimes;

/// Where a pod's service-account tokens come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// kube-sim: a token is the ServiceAccount's user name.
    SimUserName,
    /// The TokenRequest API (`serviceaccounts/token`), as the node, bound to
    /// the pod (a real API server; NodeRestriction requires the binding).
    TokenRequest,
}

/// How the pods of a node reach the API server.
#[derive(Debug, Clone)]
pub struct ApiAccess {
    /// The server URL in the pods' kubeconfig.
    pub server_url: String,
    /// The cluster CA (PEM) a pod's `ca.crt` holds; None for kube-sim
    /// (plain HTTP).
    pub ca_pem: Option<String>,
    /// `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT` of the pods.
    pub service: Option<(String, u16)>,
    pub tokens: TokenSource,
}

impl ApiAccess {
    /// kube-sim at `url` (plain HTTP, user-name tokens).
    pub fn sim(url: &str) -> ApiAccess {
        ApiAccess {
            server_url: url.to_string(),
            ca_pem: None,
            service: None,
            tokens: TokenSource::SimUserName,
        }
    }
}

/// One emulated node: its kubelet acts as `client` (the node's own
/// identity, `system:node:<node>`).
pub struct NodeAgent {
    pub node: String,
    /// The node's position (its pod CIDR `10.244.<index>.0/24` and, without
    /// `address`, its address `172.18.0.<index + 2>`).
    pub index: usize,
    pub client: Client,
    pub config: KubeletConfig,
    /// The node's pod directories (`<root>/pods/<ns>_<name>_<uid>`).
    pub root: PathBuf,
    pub runtimes: Arc<PodRuntimes>,
    pub api: ApiAccess,
    /// The node's InternalIP and kubelet port (`status.daemonEndpoints`),
    /// when its kubelet API is served (the process kubelet).
    pub address: Option<(String, u16)>,
}

/// What pod workers share.
pub(crate) struct AgentCtx {
    pub node: String,
    pub node_ip: String,
    pub client: Client,
    pub config: KubeletConfig,
    pub root: PathBuf,
    pub runtimes: Arc<PodRuntimes>,
    pub api: ApiAccess,
    pub recorder: Recorder,
    pub stop: CancellationToken,
    ips: Mutex<IpPool>,
}

struct IpPool {
    prefix: String,
    used: HashSet<u8>,
    next: u8,
}

impl AgentCtx {
    pub(crate) fn alloc_ip(&self) -> String {
        let mut p = self.ips.lock();
        for _ in 0..253 {
            let n = p.next;
            p.next = if p.next >= 254 { 2 } else { p.next + 1 };
            if p.used.insert(n) {
                return format!("{}.{n}", p.prefix);
            }
        }
        format!("{}.254", p.prefix)
    }

    /// Takes `ip` (a pod's address before a kubelet restart) if it is this
    /// node's and free.
    pub(crate) fn claim_ip(&self, ip: &str) -> bool {
        let mut p = self.ips.lock();
        let Some(n) = ip
            .strip_prefix(&format!("{}.", p.prefix))
            .and_then(|n| n.parse::<u8>().ok())
        else {
            return false;
        };
        p.used.insert(n)
    }

    pub(crate) fn release_ip(&self, ip: &str) {
        if let Some(n) = ip.rsplit('.').next().and_then(|n| n.parse::<u8>().ok()) {
            self.ips.lock().used.remove(&n);
        }
    }
}

fn node_ip(index: usize) -> String {
    format!("172.18.0.{}", (index % 250) + 2)
}

fn node_object(name: &str, index: usize, max_pods: u32, address: Option<&(String, u16)>) -> Node {
    let now = crate::object::now_string();
    let ip = address.map_or_else(|| node_ip(index), |(ip, _)| ip.clone());
    let kubelet_port = address.map_or(10250, |(_, p)| *p);
    let cidr = format!("10.244.{}.0/24", index % 256);
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let resources = json!({"cpu": "8", "memory": "16Gi", "ephemeral-storage": "100Gi", "hugepages-2Mi": "0", "pods": max_pods.to_string()});
    let v = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": format!("kube-sim://{name}")},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "machineID": format!("{:032x}", crate::cluster::util::fnv32a(name.as_bytes())),
                "systemUUID": format!("{:08x}-0000-0000-0000-000000000000", crate::cluster::util::fnv32a(name.as_bytes())),
                "bootID": format!("{:08x}-0000-0000-0000-000000000001", crate::cluster::util::fnv32a(name.as_bytes())),
                "kernelVersion": "6.0.0-kube-sim",
                "osImage": "kube-sim",
                "containerRuntimeVersion": "kube-sim://1.0.0",
                "kubeletVersion": crate::discovery::KUBE_GIT_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    });
    serde_json::from_value(v).unwrap_or_default()
}

/// Registers (creates, if absent) the Node and its Lease as its kubelet
/// does, with the node's own client.
pub async fn register_node(
    client: &Client,
    node: &str,
    index: usize,
    max_pods: u32,
    address: Option<&(String, u16)>,
) -> Result<(), String> {
    let api: Api<Node> = Api::all(client.clone());
    let obj = node_object(node, index, max_pods, address);
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(format!("registering node {node}: {e}")),
    }
    // The create keeps status on a real server; write it once more
    // through nodes/status, as the kubelet's status loop does (and after a
    // restart: addresses, kubelet port, Ready).
    let status = json!({"status": serde_json::to_value(&obj.status).unwrap_or_default()});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| format!("writing the status of node {node}: {e}"))?;
    renew_lease(client, node).await;
    Ok(())
}

/// Reports the node's conditions again (the kubelet's status report, every
/// `nodeStatusReportFrequency` when nothing changed).
async fn report_node_status(client: &Client, node: &str) {
    let api: Api<Node> = Api::all(client.clone());
    let now = crate::object::now_string();
    let Ok(current) = api.get_status(node).await else {
        return;
    };
    let conditions: Vec<serde_json::Value> = current
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            let mut v = serde_json::to_value(&c).unwrap_or_default();
            v["lastHeartbeatTime"] = json!(now);
            v
        })
        .collect();
    if conditions.is_empty() {
        return;
    }
    let p = json!({"status": {"conditions": conditions}});
    if let Err(e) = api
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&p))
        .await
    {
        tracing::debug!(node, error = %e, "reporting the node status failed");
    }
}

async fn renew_lease(client: &Client, node: &str) {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string();
    let body = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now},
    });
    let r = match api.get_opt(node).await {
        Ok(Some(_)) => api
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"renewTime": now}})),
            )
            .await
            .map(|_| ()),
        Ok(None) => match serde_json::from_value::<Lease>(body) {
            Ok(l) => api.create(&PostParams::default(), &l).await.map(|_| ()),
            Err(e) => Err(kube::Error::SerdeError(e)),
        },
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        tracing::debug!(node, error = %e, "renewing the node lease failed");
    }
}

/// Kills the containers and removes the directories of pods a previous
/// kubelet ran that are no longer bound to this node (the kubelet's
/// housekeeping of orphaned pods after a restart).
fn remove_orphans(root: &std::path::Path, pods: &[Arc<Pod>]) {
    let live: HashSet<PathBuf> = pods
        .iter()
        .map(|p| {
            pod::pod_dir(
                root,
                p.metadata.namespace.as_deref().unwrap_or(""),
                p.metadata.name.as_deref().unwrap_or(""),
                p.metadata.uid.as_deref().unwrap_or(""),
            )
        })
        .collect();
    let Ok(entries) = std::fs::read_dir(root.join("pods")) else {
        return;
    };
    for e in entries.flatten() {
        let dir = e.path();
        if live.contains(&dir) {
            continue;
        }
        for (pid, _) in container::leftover_processes(&dir) {
            tracing::info!(pod_dir = %dir.display(), pid, "killing a container of a pod that is gone");
            let _ = super::runtime::send_signal(pid, super::runtime::Signal::Kill);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

struct Worker {
    tx: watch::Sender<Option<Arc<Pod>>>,
    done: tokio::task::JoinHandle<()>,
}

/// Runs the node agent until `stop`.
pub async fn run(agent: NodeAgent, stop: CancellationToken) {
    let NodeAgent {
        node,
        index,
        client,
        config,
        root,
        runtimes,
        api,
        address,
    } = agent;
    if let Err(e) = std::fs::create_dir_all(&root) {
        tracing::error!(node = %node, dir = %root.display(), error = %e, "cannot create the kubelet directory; not running pods");
        return;
    }
    let ctx = Arc::new(AgentCtx {
        recorder: Recorder::new(client.clone(), "kubelet", Some(&node)),
        node: node.clone(),
        node_ip: address.map_or_else(|| node_ip(index), |(ip, _)| ip),
        client: client.clone(),
        config: config.clone(),
        root,
        runtimes,
        api,
        stop: stop.clone(),
        ips: Mutex::new(IpPool {
            prefix: format!("10.244.{}", index % 256),
            used: HashSet::new(),
            next: 2,
        }),
    });
    // Heartbeat: the node Lease.
    {
        let client = client.clone();
        let node = node.clone();
        let stop = stop.clone();
        let every = config.lease_interval.max(Duration::from_millis(100));
        tokio::spawn(async move {
            let mut last_report = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(every) => renew_lease(&client, &node).await,
                }
                if last_report.elapsed() >= Duration::from_secs(300) {
                    report_node_status(&client, &node).await;
                    last_report = tokio::time::Instant::now();
                }
            }
        });
    }
    let changes = Changes::default();
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let pods = informer::spawn(
        Api::<Pod>::all(client.clone()),
        cfg,
        changes.clone(),
        stop.clone(),
    );
    if !informer::ready(&pods, &stop).await {
        return;
    }
    remove_orphans(&ctx.root, &pods.state());
    tracing::info!(node = %node, "emulated kubelet running");
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let mut rx = changes.subscribe();
    loop {
        let current: BTreeMap<String, Arc<Pod>> = pods
            .state()
            .into_iter()
            .filter_map(|p| p.metadata.uid.clone().map(|u| (u, p)))
            .collect();
        for (uid, p) in &current {
            match workers.get(uid) {
                Some(w) => {
                    // Wake the worker only when its pod changed.
                    let changed = w.tx.borrow().as_ref().is_none_or(|old| {
                        old.metadata.resource_version != p.metadata.resource_version
                    });
                    if changed {
                        w.tx.send_replace(Some(p.clone()));
                    }
                }
                None => {
                    let (tx, rx) = watch::channel(Some(p.clone()));
                    let done = tokio::spawn(pod::run(ctx.clone(), rx));
                    workers.insert(uid.clone(), Worker { tx, done });
                }
            }
        }
        for (uid, w) in workers.iter() {
            if !current.contains_key(uid) {
                w.tx.send_replace(None);
            }
        }
        workers.retain(|uid, w| !w.done.is_finished() || current.contains_key(uid));
        let idle = if workers.keys().any(|u| !current.contains_key(u)) {
            Some(Duration::from_millis(200))
        } else {
            Some(Duration::from_secs(5))
        };
        if !informer::wait(&mut rx, idle, &stop).await {
            break;
        }
    }
    // Shutting down: stop every pod now.
    for w in workers.values() {
        w.tx.send_replace(None);
    }
    for (_, w) in workers {
        let _ = tokio::time::timeout(Duration::from_secs(5), w.done).await;
    }
}

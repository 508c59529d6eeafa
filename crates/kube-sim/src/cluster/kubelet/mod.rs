//! The node agent ("kubelet"): an API client as `system:node:<node>` that
//! registers its Node, renews its Lease in `kube-node-lease`, watches the
//! pods bound to it (`fieldSelector=spec.nodeName=<node>`) and runs them.
//!
//! Pods whose image maps to a local binary ([`super::ImageMapping`]) run as
//! processes ([`container`]); the others run "fakely" (Running and Ready at
//! once; with restartPolicy OnFailure/Never their containers exit 0 after a
//! second so that Jobs complete). See the crate README for the rules
//! (command, env, volumes, ports, probes, restarts, graceful deletion).

pub mod container;
pub mod pod;
pub mod probe;
pub mod rewrite;

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

use super::events::Recorder;
use super::informer::{self, Changes};
use super::runtime::PodRuntimes;
use super::{Clients, KubeletConfig};

/// One emulated node.
pub(crate) struct NodeAgent {
    pub node: String,
    pub index: usize,
    pub client: Client,
    pub config: KubeletConfig,
    pub root: PathBuf,
    pub runtimes: Arc<PodRuntimes>,
    pub server_url: String,
}

/// What pod workers share.
pub(crate) struct AgentCtx {
    pub node: String,
    pub node_ip: String,
    pub client: Client,
    pub config: KubeletConfig,
    pub root: PathBuf,
    pub runtimes: Arc<PodRuntimes>,
    pub server_url: String,
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

    pub(crate) fn release_ip(&self, ip: &str) {
        if let Some(n) = ip.rsplit('.').next().and_then(|n| n.parse::<u8>().ok()) {
            self.ips.lock().used.remove(&n);
        }
    }
}

fn node_ip(index: usize) -> String {
    format!("172.18.0.{}", (index % 250) + 2)
}

fn node_object(name: &str, index: usize, max_pods: u32) -> Node {
    let now = crate::object::now_string();
    let ip = node_ip(index);
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
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
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

/// Registers (creates, if absent) the Nodes and their Leases, each as its
/// kubelet would.
pub(crate) async fn register_nodes(
    clients: &Clients,
    nodes: &[String],
    max_pods: u32,
) -> Result<(), String> {
    for (i, n) in nodes.iter().enumerate() {
        let client = clients.client(&super::users::node(n)).await?;
        let api: Api<Node> = Api::all(client.clone());
        let node = node_object(n, i, max_pods);
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(format!("registering node {n}: {e}")),
        }
        // The create keeps status on a real server; write it once more
        // through nodes/status, as the kubelet's status loop does.
        let status = json!({"status": serde_json::to_value(&node.status).unwrap_or_default()});
        api.patch_status(n, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| format!("writing the status of node {n}: {e}"))?;
        renew_lease(&client, n).await;
    }
    Ok(())
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

struct Worker {
    tx: watch::Sender<Option<Arc<Pod>>>,
    done: tokio::task::JoinHandle<()>,
}

/// Runs the node agent until `stop`.
pub(crate) async fn run(agent: NodeAgent, stop: CancellationToken) {
    let NodeAgent {
        node,
        index,
        client,
        config,
        root,
        runtimes,
        server_url,
    } = agent;
    if let Err(e) = std::fs::create_dir_all(&root) {
        tracing::error!(node = %node, dir = %root.display(), error = %e, "cannot create the kubelet directory; not running pods");
        return;
    }
    let ctx = Arc::new(AgentCtx {
        recorder: Recorder::new(client.clone(), "kubelet", Some(&node)),
        node: node.clone(),
        node_ip: node_ip(index),
        client: client.clone(),
        config: config.clone(),
        root,
        runtimes,
        server_url,
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
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(every) => renew_lease(&client, &node).await,
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

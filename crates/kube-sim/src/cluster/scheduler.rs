//! A kube-scheduler subset: binds Pending pods of `default-scheduler` to a
//! feasible node through `pods/binding`, as user `system:kube-scheduler`.
//!
//! Filters (pkg/scheduler/framework/plugins): VolumeBinding's PreFilter
//! (a missing claim, a claim being deleted, unbound Immediate claims make the
//! pod unschedulable without looking at nodes), NodeUnschedulable,
//! TaintToleration (a NotReady node counts as tainted
//! `node.kubernetes.io/not-ready:NoSchedule`, as the node lifecycle
//! controller would taint it), NodeAffinity (nodeSelector and required
//! affinity), VolumeBinding's node affinity of bound PVs, and the node's
//! `pods` capacity. Among feasible nodes the one with the fewest pods wins
//! (ties by name). A pod that fits nowhere gets `PodScheduled=False`
//! reason `Unschedulable` with the scheduler's `FitError` message and a
//! `FailedScheduling` event, and is retried with a backoff (1 s doubling to
//! 10 s). Claims of a `WaitForFirstConsumer` class get the
//! `volume.kubernetes.io/selected-node` annotation and the pod is bound once
//! they are. Not emulated: preemption, resource requests, inter-pod
//! affinity, topology spread, host ports.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, PersistentVolume, PersistentVolumeClaim, Pod,
    Taint, Toleration,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::events::{EventType, Recorder};
use super::informer::{self, Changes};
use super::util;

const SCHEDULER_NAME: &str = "default-scheduler";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

struct Backoff {
    attempts: u32,
    next: Instant,
}

struct Scheduler {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    pvcs: Store<PersistentVolumeClaim>,
    pvs: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    recorder: Recorder,
    backoff: HashMap<String, Backoff>,
    /// Pods bound in this process whose binding the cache has not shown yet.
    assumed: HashMap<String, (String, Instant)>,
}

/// Why a pod cannot be scheduled now.
enum Unfit {
    /// Unschedulable: the FitError message.
    Fit(String),
    /// Waiting for claims of WaitForFirstConsumer classes to bind.
    WaitingForVolumes,
}

pub(crate) async fn run(client: Client, stop: CancellationToken) {
    let changes = Changes::default();
    let cfg = watcher::Config::default;
    let pods = informer::spawn(
        Api::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    let nodes = informer::spawn(
        Api::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    let pvcs = informer::spawn(
        Api::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    let pvs = informer::spawn(
        Api::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    let classes = informer::spawn(
        Api::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    for ok in [
        informer::ready(&pods, &stop).await,
        informer::ready(&nodes, &stop).await,
        informer::ready(&pvcs, &stop).await,
        informer::ready(&pvs, &stop).await,
        informer::ready(&classes, &stop).await,
    ] {
        if !ok {
            return;
        }
    }
    let mut s = Scheduler {
        recorder: Recorder::new(client.clone(), SCHEDULER_NAME, None),
        client,
        pods,
        nodes,
        pvcs,
        pvs,
        classes,
        backoff: HashMap::new(),
        assumed: HashMap::new(),
    };
    let mut rx = changes.subscribe();
    tracing::info!("emulated scheduler running");
    loop {
        let requeue = s.pass().await;
        if !informer::wait(&mut rx, requeue, &stop).await {
            return;
        }
    }
}

fn pending(p: &Pod) -> bool {
    let spec = match &p.spec {
        Some(s) => s,
        None => return false,
    };
    spec.node_name.as_deref().unwrap_or("").is_empty()
        && spec.scheduler_name.as_deref().unwrap_or(SCHEDULER_NAME) == SCHEDULER_NAME
        && spec.scheduling_gates.as_ref().is_none_or(|g| g.is_empty())
        && !util::deleting(&p.metadata)
        && !matches!(util::phase(p), "Succeeded" | "Failed")
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `v1helper.TolerationsTolerateTaint`.
fn tolerates(tols: &[Toleration], taint: &Taint) -> bool {
    tols.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or("");
        let op = t.operator.as_deref().unwrap_or("Equal");
        let key_ok = if key.is_empty() {
            op == "Exists"
        } else {
            key == taint.key
        };
        let value_ok = match op {
            "Exists" => true,
            _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        };
        effect_ok && key_ok && value_ok
    })
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.clone().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(x)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|x| x.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" { v > x } else { v < x }
        }
        _ => false,
    }
}

/// `NodeSelector` (terms ORed, requirements ANDed) against a node.
pub(crate) fn node_selector_matches(sel: &NodeSelector, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or("");
    sel.node_selector_terms.iter().any(|t| {
        let exprs = t.match_expressions.as_deref().unwrap_or(&[]);
        let fields = t.match_fields.as_deref().unwrap_or(&[]);
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs
            .iter()
            .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
            && fields.iter().all(|r| {
                let v = (r.key == "metadata.name").then_some(name);
                requirement_matches(r, v)
            })
    })
}

fn claim_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .map(|vs| {
            vs.iter()
                .filter_map(|v| {
                    v.persistent_volume_claim
                        .as_ref()
                        .map(|c| c.claim_name.clone())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The FitError of a pod a PreFilter plugin rejected (VolumeBinding's
/// claim checks), as kube-scheduler 1.34+ words it: with DynamicResources
/// in the default profile (DRA on by default), its PostFilter runs before
/// DefaultPreemption and, its own PreFilter never having run, fails to read
/// its cycle state; that error ("not found") is the PostFilter message
/// (pkg/scheduler/framework/types.go FitError.Error, schedule_one.go).
fn prefilter_msg(n: usize, msg: &str) -> String {
    format!("0/{n} nodes are available: {msg}. not found")
}

/// The PostFilter message after a Filter failure: DynamicResources ("no new
/// claims to deallocate" for a pod without ResourceClaims), then
/// DefaultPreemption, joined as a Status joins its reasons.
fn postfilter_msg(n: usize, preemption: &str) -> String {
    format!("no new claims to deallocate, preemption: 0/{n} nodes are available: {preemption}.")
}

impl Scheduler {
    /// One scheduling pass over every pending pod. Returns when to look again.
    async fn pass(&mut self) -> Option<Duration> {
        let now = Instant::now();
        let mut requeue: Option<Duration> = None;
        let soon = |d: Duration, r: &mut Option<Duration>| {
            *r = Some(r.map_or(d, |x| x.min(d)));
        };
        self.assumed
            .retain(|_, (_, at)| now.duration_since(*at) < Duration::from_secs(30));
        let mut pods: Vec<Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| pending(p))
            .collect();
        let live: std::collections::HashSet<String> = pods.iter().map(|p| uid(p)).collect();
        self.backoff.retain(|k, _| live.contains(k));
        // A binding the cache shows is no longer assumed.
        self.assumed.retain(|k, _| live.contains(k));
        pods.sort_by(|a, b| {
            let pa = a.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            let pb = b.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            pb.cmp(&pa).then_with(|| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            })
        });
        for pod in pods {
            let id = uid(&pod);
            if self.assumed.contains_key(&id) {
                continue;
            }
            if let Some(b) = self.backoff.get(&id)
                && b.next > now
            {
                soon(b.next - now, &mut requeue);
                continue;
            }
            match self.try_schedule(&pod).await {
                Ok(node) => match self.bind(&pod, &node).await {
                    Ok(()) => {
                        self.backoff.remove(&id);
                        self.assumed.insert(id, (node, Instant::now()));
                    }
                    Err(e) => {
                        tracing::debug!(pod = ?pod.metadata.name, error = %e, "binding failed");
                        self.back_off(&id);
                        soon(Duration::from_secs(1), &mut requeue);
                    }
                },
                Err(Unfit::WaitingForVolumes) => soon(Duration::from_millis(500), &mut requeue),
                Err(Unfit::Fit(msg)) => {
                    self.unschedulable(&pod, &msg).await;
                    let d = self.back_off(&id);
                    soon(d, &mut requeue);
                }
            }
        }
        requeue
    }

    fn back_off(&mut self, id: &str) -> Duration {
        let b = self.backoff.entry(id.to_string()).or_insert(Backoff {
            attempts: 0,
            next: Instant::now(),
        });
        b.attempts += 1;
        let d = Duration::from_secs((1u64 << (b.attempts - 1).min(4)).min(10));
        b.next = Instant::now() + d;
        d
    }

    fn pods_on(&self, node: &str) -> usize {
        let cached = self
            .pods
            .state()
            .iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                    && !matches!(util::phase(p), "Succeeded" | "Failed")
            })
            .count();
        cached + self.assumed.values().filter(|(n, _)| n == node).count()
    }

    async fn try_schedule(&self, pod: &Pod) -> Result<String, Unfit> {
        let mut nodes: Vec<Arc<Node>> = self.nodes.state();
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let n = nodes.len();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        // VolumeBinding PreFilter.
        let mut bound_pvs: Vec<Arc<PersistentVolume>> = Vec::new();
        let mut delayed: Vec<Arc<PersistentVolumeClaim>> = Vec::new();
        let mut unbound_immediate = false;
        for claim in claim_names(pod) {
            let Some(pvc) = self.pvcs.get(&ObjectRef::new(&claim).within(&ns)) else {
                return Err(Unfit::Fit(prefilter_msg(
                    n,
                    &format!("persistentvolumeclaim {claim:?} not found"),
                )));
            };
            if util::deleting(&pvc.metadata) {
                return Err(Unfit::Fit(prefilter_msg(
                    n,
                    &format!("persistentvolumeclaim {claim:?} is being deleted"),
                )));
            }
            let volume = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default();
            let phase = pvc
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("");
            if phase == "Lost" {
                return Err(Unfit::Fit(prefilter_msg(
                    n,
                    &format!(
                        "persistentvolumeclaim {claim:?} bound to non-existent persistentvolume {volume:?}"
                    ),
                )));
            }
            if volume.is_empty() || phase != "Bound" {
                let class = pvc
                    .spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default();
                let wffc = !class.is_empty()
                    && self
                        .classes
                        .get(&ObjectRef::new(&class))
                        .and_then(|c| c.volume_binding_mode.clone())
                        .as_deref()
                        == Some("WaitForFirstConsumer");
                if wffc && volume.is_empty() {
                    delayed.push(pvc);
                } else {
                    unbound_immediate = true;
                }
            } else if let Some(pv) = self.pvs.get(&ObjectRef::new(&volume)) {
                bound_pvs.push(pv);
            }
        }
        if unbound_immediate {
            return Err(Unfit::Fit(prefilter_msg(
                n,
                "pod has unbound immediate PersistentVolumeClaims",
            )));
        }
        if n == 0 {
            return Err(Unfit::Fit("no nodes available to schedule pods".into()));
        }
        let spec = pod.spec.clone().unwrap_or_default();
        let tols = spec.tolerations.clone().unwrap_or_default();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut feasible: Vec<(usize, String)> = Vec::new();
        for node in &nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let nspec = node.spec.clone().unwrap_or_default();
            let mut taints = nspec.taints.clone().unwrap_or_default();
            if !node_ready(node) {
                taints.push(Taint {
                    key: "node.kubernetes.io/not-ready".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                });
            }
            let unschedulable_taint = Taint {
                key: "node.kubernetes.io/unschedulable".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            };
            let reason =
                if nspec.unschedulable == Some(true) && !tolerates(&tols, &unschedulable_taint) {
                    Some("node(s) were unschedulable".to_string())
                } else if let Some(t) = taints.iter().find(|t| {
                    (t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerates(&tols, t)
                }) {
                    Some(format!(
                        "node(s) had untolerated taint {{{}: {}}}",
                        t.key,
                        t.value.as_deref().unwrap_or("")
                    ))
                } else if !self.affinity_ok(&spec, node) {
                    Some("node(s) didn't match Pod's node affinity/selector".to_string())
                } else if bound_pvs.iter().any(|pv| {
                    pv.spec
                        .as_ref()
                        .and_then(|s| s.node_affinity.as_ref())
                        .and_then(|a| a.required.as_ref())
                        .is_some_and(|sel| !node_selector_matches(sel, node))
                }) {
                    Some("node(s) had volume node affinity conflict".to_string())
                } else {
                    let cap = node
                        .status
                        .as_ref()
                        .and_then(|s| s.allocatable.as_ref())
                        .and_then(|a| a.get("pods"))
                        .and_then(|q| crate::quantity::value(&q.0))
                        .unwrap_or(110.0) as usize;
                    let count = self.pods_on(&name);
                    if count >= cap {
                        Some("Too many pods".to_string())
                    } else {
                        feasible.push((count, name.clone()));
                        None
                    }
                };
            if let Some(r) = reason {
                *reasons.entry(r).or_default() += 1;
            }
        }
        feasible.sort();
        let Some((_, node)) = feasible.into_iter().next() else {
            let mut parts: Vec<String> = reasons.iter().map(|(r, c)| format!("{c} {r}")).collect();
            parts.sort();
            let helpful = reasons.get("Too many pods").copied().unwrap_or(0);
            let mut pre: Vec<String> = Vec::new();
            if n - helpful > 0 {
                pre.push(format!(
                    "{} Preemption is not helpful for scheduling",
                    n - helpful
                ));
            }
            if helpful > 0 {
                pre.push(format!(
                    "{helpful} No preemption victims found for incoming pod"
                ));
            }
            return Err(Unfit::Fit(format!(
                "0/{n} nodes are available: {}. {}",
                parts.join(", "),
                postfilter_msg(n, &pre.join(", "))
            )));
        };
        if !delayed.is_empty() {
            for pvc in delayed {
                let has = pvc
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(SELECTED_NODE))
                    .is_some();
                if has {
                    continue;
                }
                let name = pvc.metadata.name.clone().unwrap_or_default();
                let p = json!({"metadata": {"annotations": {SELECTED_NODE: node}}});
                let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
                if let Err(e) = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&p))
                    .await
                {
                    tracing::debug!(claim = %name, error = %e, "annotating the selected node failed");
                }
            }
            return Err(Unfit::WaitingForVolumes);
        }
        Ok(node)
    }

    fn affinity_ok(&self, spec: &k8s_openapi::api::core::v1::PodSpec, node: &Node) -> bool {
        if let Some(sel) = &spec.node_selector {
            let empty = BTreeMap::new();
            let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
            if sel.iter().any(|(k, v)| labels.get(k) != Some(v)) {
                return false;
            }
        }
        if let Some(req) = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            && !node_selector_matches(req, node)
        {
            return false;
        }
        true
    }

    async fn bind(&self, pod: &Pod, node: &str) -> Result<(), kube::Error> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let _: serde_json::Value = api
            .create_subresource("binding", &name, &PostParams::default(), &binding)
            .await?;
        self.recorder.event(
            &pod.object_ref(&()),
            EventType::Normal,
            "Scheduled",
            &format!("Successfully assigned {ns}/{name} to {node}"),
        );
        Ok(())
    }

    async fn unschedulable(&self, pod: &Pod, msg: &str) {
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
        let same = current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(msg)
        });
        if !same {
            let transition = match current {
                Some(c) if c.status == "False" => c
                    .last_transition_time
                    .clone()
                    .unwrap_or_else(util::now_time),
                _ => util::now_time(),
            };
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let p = json!({"status": {"conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": msg,
                "lastProbeTime": null,
                "lastTransitionTime": transition,
            }]}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&p))
                .await
            {
                tracing::debug!(pod = %name, error = %e, "updating PodScheduled failed");
            }
        }
        self.recorder.event(
            &pod.object_ref(&()),
            EventType::Warning,
            "FailedScheduling",
            msg,
        );
    }
}

//! The ReplicaSet controller (pkg/controller/replicaset), as user
//! `system:serviceaccount:kube-system:replicaset-controller`: keeps
//! `spec.replicas` active pods (created from the template with
//! `generateName: <rs>-` and a controller ownerReference; surplus pods
//! deleted in upstream's order: unscheduled, pending, not ready, recently
//! ready, most restarts, newest first), adopts matching orphans, and writes
//! `status` (replicas, fullyLabeledReplicas, readyReplicas,
//! availableReplicas after `minReadySeconds`, observedGeneration, a
//! `ReplicaFailure` condition when creating fails). Expectations keep it
//! from acting twice on a stale cache, as upstream's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::events::{EventType, Recorder};
use super::informer::{self, ControllerManager};
use super::util;

/// What the controller did and has not seen in its cache yet.
struct Expect {
    created: Vec<(String, String)>,
    deleted: HashSet<String>,
    at: Instant,
}

pub(crate) async fn run(kcm: ControllerManager, client: Client, stop: CancellationToken) {
    let recorder = Recorder::new(client.clone(), "replicaset-controller", None);
    let mut rx = kcm.changes.subscribe();
    let mut exp: HashMap<String, Expect> = HashMap::new();
    tracing::info!("emulated replicaset controller running");
    loop {
        let requeue = pass(&kcm, &client, &recorder, &mut exp).await;
        if !informer::wait(&mut rx, requeue, &stop).await {
            return;
        }
    }
}

fn satisfied(kcm: &ControllerManager, e: &Expect) -> bool {
    if e.at.elapsed() > Duration::from_secs(60) {
        return true;
    }
    let created = e
        .created
        .iter()
        .all(|(ns, n)| kcm.pods.get(&ObjectRef::new(n).within(ns)).is_some());
    let deleted = kcm
        .pods
        .state()
        .iter()
        .filter(|p| {
            p.metadata
                .uid
                .as_ref()
                .is_some_and(|u| e.deleted.contains(u))
        })
        .all(|p| util::deleting(&p.metadata));
    created && deleted
}

/// Sort key for choosing pods to delete (controller.ActivePods ranking):
/// (assigned, phase, ready, ready since, restarts, created), each ordered so
/// that smaller is deleted first.
type Rank = (
    u8,
    u8,
    u8,
    std::cmp::Reverse<Option<jiff::Timestamp>>,
    std::cmp::Reverse<i32>,
    std::cmp::Reverse<Option<jiff::Timestamp>>,
);

fn deletion_rank(p: &Pod) -> Rank {
    let assigned = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = match util::phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        _ => 2,
    };
    let ready = util::ready_since(p);
    let restarts = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0);
    (
        assigned as u8,
        phase,
        ready.is_some() as u8,
        std::cmp::Reverse(ready),
        std::cmp::Reverse(restarts),
        std::cmp::Reverse(p.metadata.creation_timestamp.as_ref().map(|t| t.0)),
    )
}

/// A pod from a template (controller.GetPodFromTemplate).
pub(crate) fn pod_from_template(
    template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
    ns: &str,
    generate_name: &str,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Pod {
    let t = template.cloned().unwrap_or_default();
    let tm = t.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name.to_string()),
            namespace: Some(ns.to_string()),
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: t.spec,
        status: None,
    }
}

async fn pass(
    kcm: &ControllerManager,
    client: &Client,
    recorder: &Recorder,
    exp: &mut HashMap<String, Expect>,
) -> Option<Duration> {
    let now = jiff::Timestamp::now();
    let mut requeue: Option<Duration> = None;
    let soon = |d: Duration, r: &mut Option<Duration>| *r = Some(r.map_or(d, |x| x.min(d)));
    let all_pods = kcm.pods.state();
    let sets = kcm.replicasets.state();
    let live: HashSet<String> = sets.iter().filter_map(|r| r.metadata.uid.clone()).collect();
    exp.retain(|k, _| live.contains(k));
    for rs in sets {
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let spec = rs.spec.clone().unwrap_or_default();
        let want = spec.replicas.unwrap_or(1).max(0) as usize;
        let ns_pods: Vec<&Arc<Pod>> = all_pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
            .collect();
        // Adopt orphans that match the selector.
        if !util::deleting(&rs.metadata) {
            for p in ns_pods.iter().filter(|p| {
                util::controller_of(&p.metadata).is_none()
                    && !util::deleting(&p.metadata)
                    && util::pod_active(p)
                    && util::selector_matches(Some(&spec.selector), p.metadata.labels.as_ref())
            }) {
                let pname = p.metadata.name.clone().unwrap_or_default();
                let owner = util::controller_ref("apps/v1", "ReplicaSet", &rs.metadata);
                let patch =
                    json!({"metadata": {"ownerReferences": [owner], "uid": p.metadata.uid}});
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                if let Err(e) = api
                    .patch(&pname, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    tracing::debug!(pod = %pname, error = %e, "adopting a pod failed");
                }
            }
        }
        let owned: Vec<&Arc<Pod>> = ns_pods
            .iter()
            .filter(|p| util::controlled_by(&p.metadata, &uid))
            .copied()
            .collect();
        let mut active: Vec<&Arc<Pod>> = owned
            .iter()
            .copied()
            .filter(|p| util::pod_active(p))
            .collect();
        let mut failure: Option<String> = None;
        let ready_to_act = exp.get(&uid).is_none_or(|e| satisfied(kcm, e));
        if !ready_to_act {
            soon(Duration::from_secs(1), &mut requeue);
        }
        if ready_to_act && !util::deleting(&rs.metadata) {
            exp.remove(&uid);
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            if active.len() < want {
                let diff = (want - active.len()).min(500);
                let mut created = Vec::new();
                let mut batch = 1usize;
                let mut done = 0usize;
                'slow: while done < diff {
                    let n = batch.min(diff - done);
                    for _ in 0..n {
                        let owner = util::controller_ref("apps/v1", "ReplicaSet", &rs.metadata);
                        let pod = pod_from_template(
                            spec.template.as_ref(),
                            &ns,
                            &format!("{name}-"),
                            owner,
                        );
                        match api.create(&PostParams::default(), &pod).await {
                            Ok(p) => {
                                let pn = p.metadata.name.clone().unwrap_or_default();
                                recorder.event(
                                    &rs.object_ref(&()),
                                    EventType::Normal,
                                    "SuccessfulCreate",
                                    &format!("Created pod: {pn}"),
                                );
                                created.push((ns.clone(), pn));
                            }
                            Err(e) => {
                                let msg = match &e {
                                    kube::Error::Api(s) => s.message.clone(),
                                    other => other.to_string(),
                                };
                                recorder.event(
                                    &rs.object_ref(&()),
                                    EventType::Warning,
                                    "FailedCreate",
                                    &format!("Error creating: {msg}"),
                                );
                                failure = Some(msg);
                                soon(Duration::from_secs(1), &mut requeue);
                                break 'slow;
                            }
                        }
                    }
                    done += n;
                    batch *= 2;
                }
                if !created.is_empty() {
                    exp.insert(
                        uid.clone(),
                        Expect {
                            created,
                            deleted: HashSet::new(),
                            at: Instant::now(),
                        },
                    );
                }
            } else if active.len() > want {
                let diff = active.len() - want;
                active.sort_by_key(|p| deletion_rank(p));
                let mut deleted = HashSet::new();
                for p in active.iter().take(diff) {
                    let pn = p.metadata.name.clone().unwrap_or_default();
                    let dp = DeleteParams {
                        preconditions: Some(kube::api::Preconditions {
                            uid: p.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    match api.delete(&pn, &dp).await {
                        Ok(_) => {
                            recorder.event(
                                &rs.object_ref(&()),
                                EventType::Normal,
                                "SuccessfulDelete",
                                &format!("Deleted pod: {pn}"),
                            );
                            deleted.insert(p.metadata.uid.clone().unwrap_or_default());
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                        Err(e) => {
                            tracing::debug!(pod = %pn, error = %e, "deleting a pod failed");
                            soon(Duration::from_secs(1), &mut requeue);
                        }
                    }
                }
                if !deleted.is_empty() {
                    exp.insert(
                        uid.clone(),
                        Expect {
                            created: Vec::new(),
                            deleted,
                            at: Instant::now(),
                        },
                    );
                }
                active.truncate(0);
                active.extend(owned.iter().copied().filter(|p| util::pod_active(p)));
            }
        }
        // Status (calculateStatus).
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        let template_labels = spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let mut st = ReplicaSetStatus {
            replicas: active.len() as i32,
            observed_generation: rs.metadata.generation,
            ..Default::default()
        };
        let mut fully = 0;
        let mut ready = 0;
        let mut available = 0;
        for p in &active {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            if template_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            {
                fully += 1;
            }
            if util::pod_ready(p) {
                ready += 1;
                let (ok, wait) = util::pod_available(p, min_ready, now);
                if ok {
                    available += 1;
                } else if let Some(w) = wait {
                    soon(w, &mut requeue);
                }
            }
        }
        // terminatingReplicas (DeploymentReplicaSetTerminatingReplicas, on
        // by default since 1.35): the RS's pods being deleted and not yet
        // terminal, always reported, 0 included.
        st.terminating_replicas = Some(
            owned
                .iter()
                .filter(|p| {
                    util::deleting(&p.metadata) && !matches!(util::phase(p), "Succeeded" | "Failed")
                })
                .count() as i32,
        );
        // omitempty counts (replicas is the only required one).
        st.fully_labeled_replicas = (fully != 0).then_some(fully);
        st.ready_replicas = (ready != 0).then_some(ready);
        st.available_replicas = (available != 0).then_some(available);
        let old = rs.status.clone().unwrap_or_default();
        let mut conds: Vec<ReplicaSetCondition> = old
            .conditions
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ != "ReplicaFailure")
            .collect();
        match (
            &failure,
            old.conditions
                .as_ref()
                .and_then(|cs| cs.iter().find(|c| c.type_ == "ReplicaFailure")),
        ) {
            (Some(msg), _) => conds.push(ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some("FailedCreate".into()),
                message: Some(msg.clone()),
                last_transition_time: Some(util::now_time()),
            }),
            (None, Some(c)) if active.len() < want => conds.push(c.clone()),
            _ => {}
        }
        st.conditions = (!conds.is_empty()).then_some(conds);
        let norm = |s: &ReplicaSetStatus| {
            let mut s = s.clone();
            for v in [
                &mut s.fully_labeled_replicas,
                &mut s.ready_replicas,
                &mut s.available_replicas,
            ] {
                if *v == Some(0) {
                    *v = None;
                }
            }
            s
        };
        if norm(&st) != norm(&old) {
            let mut new = (*rs).clone();
            new.status = Some(st);
            let api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
            if let Err(e) = api
                .replace_status(&name, &PostParams::default(), &new)
                .await
            {
                tracing::debug!(replicaset = %name, error = %e, "status update failed");
                soon(Duration::from_millis(500), &mut requeue);
            }
        }
    }
    requeue
}

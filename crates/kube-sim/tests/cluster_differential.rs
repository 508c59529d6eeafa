//! kube-sim's emulated controllers against the real ones: the same steps on
//! kube-sim (its Job, Deployment/ReplicaSet, scheduler, garbage collection)
//! and on the real control plane (kube-controller-manager and
//! kube-scheduler v1.36.3, the process kubelet), and what a user can see of
//! them (conditions, reasons, messages, counts, finalizers, events) must be
//! the same. Names, uids and times differ and are left out.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::cluster::{cluster, within};
use common::real::{Bed, KUBELET, real};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn obj<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `scenario` on kube-sim and on the real control plane and asserts
/// that both saw the same.
macro_rules! differential {
    ($name:literal, $scenario:ident) => {{
        let _shared = KUBELET.read().await;
        let sim = Bed::Sim(cluster().await);
        let real = Bed::Real(real().await);
        let on_real = $scenario(&real).await;
        let on_sim = $scenario(&sim).await;
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
        assert_eq!(
            pretty(&on_sim),
            pretty(&on_real),
            "{}: kube-sim (left) vs the real control plane (right)",
            $name
        );
        println!("verified: {} the same on both: {}", $name, on_real);
        if let Bed::Sim(s) = sim {
            s.shutdown().await;
        }
    }};
}

fn conditions(v: &Value) -> Value {
    let cs = v.as_array().cloned().unwrap_or_default();
    Value::Array(
        cs.iter()
            .map(|c| {
                json!({
                    "type": c["type"], "status": c["status"],
                    "reason": c["reason"], "message": c["message"],
                })
            })
            .collect(),
    )
}

/// The Job's status without times and uids, and what its pod looked like
/// when the Job finished.
async fn finished_job(bed: &Bed, script: &str) -> Value {
    let ns = bed.namespace("job").await;
    let client = bed.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(
        &PostParams::default(),
        &obj(json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "check"},
            "spec": {
                "backoffLimit": 0,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "sh", "command": ["sh", "-c", script]}],
                }},
            },
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("{}: creating the Job: {e}", bed.name()));
    let job = within(120, "the Job to finish", || async {
        jobs.get("check").await.ok().filter(|j| {
            j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"
                    })
                })
        })
    })
    .await;
    // The tracking finalizer goes once the pod is counted.
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let pod = within(60, "the pod to lose its tracking finalizer", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|p| {
            p.finalizers().is_empty()
                && p.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .is_some_and(|ph| ph == "Succeeded" || ph == "Failed")
        })
    })
    .await;
    let st = serde_json::to_value(job.status.clone().unwrap_or_default()).unwrap_or_default();
    let p = serde_json::to_value(&pod).unwrap_or_default();
    let owner = &p["metadata"]["ownerReferences"][0];
    let mut labels: Vec<String> = pod.labels().keys().cloned().collect();
    labels.sort();
    json!({
        "conditions": conditions(&st["conditions"]),
        "succeeded": st["succeeded"], "failed": st["failed"], "active": st["active"],
        "ready": st["ready"], "terminating": st["terminating"],
        "uncountedTerminatedPods": st["uncountedTerminatedPods"],
        "startTime": st["startTime"].is_string(),
        "completionTime": st["completionTime"].is_string(),
        "pod": {
            "phase": p["status"]["phase"],
            "generateName": p["metadata"]["generateName"],
            "labels": labels,
            "owner": {"kind": owner["kind"], "controller": owner["controller"], "blockOwnerDeletion": owner["blockOwnerDeletion"]},
        },
    })
}

async fn job_that_succeeds(bed: &Bed) -> Value {
    finished_job(bed, "exit 0").await
}

async fn job_that_fails(bed: &Bed) -> Value {
    finished_job(bed, "exit 3").await
}

/// A Job's pod finishing: conditions, counts, the tracking finalizer gone,
/// the pod's labels and owner reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_succeeds() {
    differential!("a Job whose pod exits 0", job_that_succeeds);
}

/// Watches Job `name` until it is gone: the finalizers it carried while
/// being deleted, and whether its pods went too. With `delete`, deletes the
/// Job so once the watch has listed it (a Job without finalizers can be
/// gone before a watch started after the delete would see it).
async fn job_until_gone(
    bed: &Bed,
    jobs: &Api<Job>,
    pods: &Api<Pod>,
    name: &str,
    delete: Option<DeleteParams>,
) -> Value {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let stream = watcher(
        jobs.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff();
    futures::pin_mut!(stream);
    let mut while_deleting: Vec<String> = Vec::new();
    let mut delete = delete;
    let until = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Ok(Some(Ok(watcher::Event::InitDone))) => {
                if let Some(dp) = delete.take() {
                    jobs.delete(name, &dp)
                        .await
                        .unwrap_or_else(|e| panic!("{}: deleting Job {name}: {e}", bed.name()));
                }
            }
            Ok(Some(Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)))) => {
                if j.metadata.deletion_timestamp.is_some() {
                    for f in j.finalizers() {
                        if !while_deleting.contains(f) {
                            while_deleting.push(f.clone());
                        }
                    }
                }
            }
            Ok(Some(Ok(watcher::Event::Delete(_)))) => break,
            Ok(Some(_)) => {}
            _ => panic!("{}: Job {name} was not deleted within 120s", bed.name()),
        }
    }
    let left = within(60, "the Job's pods to go", || async {
        let n = pods.list(&ListParams::default()).await.ok()?.items.len();
        (n == 0).then_some(n)
    })
    .await;
    json!({"finalizersWhileDeleting": while_deleting, "podsLeft": left})
}

/// A finished Job with `ttlSecondsAfterFinished: 0`: the
/// ttl-after-finished controller deletes it (foreground) and its pod.
async fn job_ttl(bed: &Bed) -> Value {
    let (jobs, pods) = succeeding_job(bed, "ttl", Some(0)).await;
    job_until_gone(bed, &jobs, &pods, "ttl", None).await
}

/// A Job `name` (in a namespace of its own) whose pod exits 0, with
/// `ttlSecondsAfterFinished` if given; the Jobs and pods of its namespace.
async fn succeeding_job(bed: &Bed, name: &str, ttl: Option<i32>) -> (Api<Job>, Api<Pod>) {
    let ns = bed.namespace(name).await;
    let client = bed.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    jobs.create(
        &PostParams::default(),
        &obj(json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {
                "ttlSecondsAfterFinished": ttl,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "sh", "command": ["sh", "-c", "exit 0"]}]}},
            },
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("{}: creating Job {name}: {e}", bed.name()));
    (jobs, pods)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_with_a_ttl() {
    differential!("a finished Job with ttlSecondsAfterFinished 0", job_ttl);
}

/// A finished Job deleted as helm deletes a hook (propagation Background):
/// the garbage collector deletes its pod.
async fn job_deleted_in_background(bed: &Bed) -> Value {
    let (jobs, pods) = succeeding_job(bed, "hook", None).await;
    within(120, "the Job to complete", || async {
        let j = jobs.get("hook").await.ok()?;
        j.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
            .then_some(())
    })
    .await;
    job_until_gone(bed, &jobs, &pods, "hook", Some(DeleteParams::background())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_deleted_in_the_background() {
    differential!(
        "a finished Job deleted in the background",
        job_deleted_in_background
    );
}

/// backoffLimit 0 and a pod that exits 3: FailureTarget, then Failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fails() {
    differential!("a Job whose pod exits 3", job_that_fails);
}

/// The Deployment controller's rolling update of two replicas with the
/// default strategy (maxSurge 25%, maxUnavailable 25%: one pod over, none
/// under): its events in order (ReplicaSets named by age), the
/// ReplicaSets' replicas and revisions at the end, the Deployment's
/// conditions and counts.
async fn rolling_update(bed: &Bed) -> Value {
    let ns = bed.namespace("deploy").await;
    let client = bed.client().await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deps.create(
        &PostParams::default(),
        &obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("{}: {e}", bed.name()));
    let done = |generation: i64| {
        let deps = deps.clone();
        async move {
            deps.get("web").await.ok().filter(|d| {
                let st = d.status.clone().unwrap_or_default();
                st.observed_generation == Some(generation)
                    && st.updated_replicas == Some(2)
                    && st.available_replicas == Some(2)
                    && st.replicas == Some(2)
            })
        }
    };
    within(120, "the first rollout", || done(1)).await;
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let d = within(120, "the second rollout", || done(2)).await;
    // Events of the Deployment, oldest first, ReplicaSets by age.
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let mut sets = rss
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items;
    sets.sort_by_key(|r| {
        r.annotations()
            .get("deployment.kubernetes.io/revision")
            .cloned()
            .unwrap_or_default()
    });
    let alias: BTreeMap<String, String> = sets
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name_any(), format!("rs{}", i + 1)))
        .collect();
    let events: Api<Event> = Api::namespaced(client, &ns);
    let ev = within(30, "the scaling events", || async {
        let mut list = events.list(&ListParams::default()).await.ok()?.items;
        list.retain(|e| e.involved_object.kind.as_deref() == Some("Deployment"));
        (list.len() >= 4).then_some(list)
    })
    .await;
    let mut ev = ev;
    ev.sort_by_key(|e| {
        (
            e.first_timestamp.clone().map(|t| t.0),
            e.metadata.creation_timestamp.clone().map(|t| t.0),
            e.metadata
                .resource_version
                .clone()
                .and_then(|v| v.parse::<u64>().ok()),
        )
    });
    let messages: Vec<String> = ev
        .iter()
        .map(|e| {
            let mut m = e.message.clone().unwrap_or_default();
            for (name, a) in &alias {
                m = m.replace(name, a);
            }
            format!("{}: {m}", e.reason.clone().unwrap_or_default())
        })
        .collect();
    let st = serde_json::to_value(d.status.clone().unwrap_or_default()).unwrap_or_default();
    let mut conds = conditions(&st["conditions"]);
    if let Some(a) = conds.as_array_mut() {
        for c in a.iter_mut() {
            if let Some(m) = c["message"].as_str() {
                let mut m = m.to_string();
                for (name, al) in &alias {
                    m = m.replace(name, al);
                }
                c["message"] = json!(m);
            }
        }
        a.sort_by_key(|c| c["type"].as_str().unwrap_or("").to_string());
    }
    json!({
        "events": messages,
        "replicaSets": sets.iter().map(|r| json!({
            "alias": alias.get(&r.name_any()),
            "revision": r.annotations().get("deployment.kubernetes.io/revision"),
            "replicas": r.spec.as_ref().and_then(|s| s.replicas),
            "hashLabel": r.labels().contains_key("pod-template-hash"),
            "terminatingReplicasReported": r.status.as_ref().and_then(|s| s.terminating_replicas).is_some(),
        })).collect::<Vec<_>>(),
        "deployment": {
            "revision": d.annotations().get("deployment.kubernetes.io/revision"),
            "conditions": conds,
            "replicas": st["replicas"], "updatedReplicas": st["updatedReplicas"],
            "readyReplicas": st["readyReplicas"], "availableReplicas": st["availableReplicas"],
            "unavailableReplicas": st["unavailableReplicas"],
            // How many are still terminating depends on timing; that they
            // are counted does not.
            "terminatingReplicasReported": st["terminatingReplicas"].is_number(),
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolling_update() {
    differential!("a Deployment's rolling update", rolling_update);
}

/// Pods the scheduler cannot place: a node selector no node matches, and a
/// claim being deleted; the PodScheduled condition a user reads.
async fn unschedulable(bed: &Bed) -> Value {
    let ns = bed.namespace("sched").await;
    let client = bed.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &ns);
    claims
        .create(
            &PostParams::default(),
            &obj(json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "going", "finalizers": ["example.com/hold"]},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    claims
        .delete("going", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for (name, spec) in [
        (
            "nowhere",
            json!({"nodeSelector": {"disk": "none"}, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}),
        ),
        (
            "claim-going",
            json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                   "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "going"}}]}),
        ),
    ] {
        pods.create(
            &PostParams::default(),
            &obj(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut out = serde_json::Map::new();
    for name in ["nowhere", "claim-going"] {
        let p = within(60, "the PodScheduled condition", || async {
            let p = pods.get(name).await.ok()?;
            let c = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "PodScheduled")?
                .clone();
            Some(c)
        })
        .await;
        out.insert(
            name.to_string(),
            json!({"status": p.status, "reason": p.reason, "message": p.message}),
        );
    }
    let _ = claims
        .patch(
            "going",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    Value::Object(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_the_scheduler_cannot_place() {
    differential!("unschedulable pods", unschedulable);
}

/// Foreground deletion of a Deployment: the garbage collector's
/// `foregroundDeletion` finalizer on the owner until its ReplicaSet and
/// pods are gone.
async fn foreground_deletion(bed: &Bed) -> Value {
    let ns = bed.namespace("gc").await;
    let client = bed.client().await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deps.create(
        &PostParams::default(),
        &obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    within(120, "the pod to run", || async {
        let d = deps.get("web").await.ok()?;
        (d.status?.available_replicas == Some(1)).then_some(())
    })
    .await;
    deps.delete("web", &DeleteParams::foreground())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let deleting = deps.get("web").await.unwrap_or_else(|e| panic!("{e}"));
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    within(120, "the Deployment to go", || async {
        deps.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    json!({
        "finalizersWhileDeleting": deleting.finalizers(),
        "replicaSetsLeft": rss.list(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(99),
        "podsLeft": pods.list(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(99),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_deleted_in_the_foreground() {
    differential!("foreground deletion", foreground_deletion);
}

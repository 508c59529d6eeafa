//! Upstream's storage and scheduling scenarios driven through the emulated
//! scheduler, PV binder, provisioner, kubelet and Job controller, with
//! kubectl where a user would use it (test/e2e/storage/pvc_protection.go,
//! pv_protection.go; the scheduler's VolumeBinding, NodeAffinity,
//! NodeUnschedulable filters).

mod common;

use common::cluster::{cluster, cluster_with, kubectl, ok, within};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::ClusterConfig;
use serde_json::json;

fn phase_pv(pv: &PersistentVolume) -> String {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn phase_pvc(pvc: &PersistentVolumeClaim) -> String {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn scheduled_cond(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

fn pod_yaml(name: &str, claim: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers: [{{name: c, image: busybox:1.36}}]\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]\n"
    )
}

async fn events_for(client: &kube::Client, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default().fields(&format!("involvedObject.name={name},reason={reason}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// PV → Available; a PVC selecting it binds (both sides, with upstream's
/// annotations); a pod using it is scheduled and runs; once the claim is
/// Terminating a new pod using it stays Pending with PodScheduled=False
/// reason Unschedulable and a FailedScheduling event; when the claim goes,
/// the Retain PV becomes Released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_binding_terminating_claim_unschedulable_and_released_volume() {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    let client = sim.client().await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv-1, labels: {suite: storage}}\nspec:\n  capacity: {storage: 1Gi}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain\n  hostPath: {path: /tmp/kube-sim-pv-1}\n",
    )).await;
    within(30, "pv-1 Available", || async {
        pvs.get("pv-1")
            .await
            .ok()
            .filter(|p| phase_pv(p) == "Available")
    })
    .await;
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: claim, finalizers: [example.com/hold]}\nspec:\n  storageClassName: \"\"\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 500Mi}}\n  selector: {matchLabels: {suite: storage}}\n",
    )).await;
    let pvc = within(30, "the claim to be Bound", || async {
        pvcs.get("claim")
            .await
            .ok()
            .filter(|c| phase_pvc(c) == "Bound")
    })
    .await;
    assert_eq!(
        pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("pv-1")
    );
    let ann = pvc.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("pv.kubernetes.io/bind-completed")
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        ann.get("pv.kubernetes.io/bound-by-controller")
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        pvc.status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .map(|q| q.0.as_str()),
        Some("1Gi")
    );
    let pv = within(30, "pv-1 Bound", || async {
        pvs.get("pv-1")
            .await
            .ok()
            .filter(|p| phase_pv(p) == "Bound")
    })
    .await;
    let r = pv.spec.and_then(|s| s.claim_ref).unwrap_or_default();
    assert_eq!(r.name.as_deref(), Some("claim"));
    assert_eq!(r.uid, pvc.metadata.uid);
    println!(
        "verified: PV Available, PVC bound by selector (claimRef, bind-completed, bound-by-controller, capacity)"
    );

    ok(
        &k,
        &kc,
        None,
        &["apply", "-f", "-"],
        Some(&pod_yaml("user-1", "claim")),
    )
    .await;
    ok(
        &k,
        &kc,
        None,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/user-1",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    ok(
        &k,
        &kc,
        None,
        &["delete", "pvc", "claim", "--wait=false"],
        None,
    )
    .await;
    let pvc = pvcs.get("claim").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        pvc.metadata.deletion_timestamp.is_some(),
        "the claim is Terminating"
    );
    ok(
        &k,
        &kc,
        None,
        &["apply", "-f", "-"],
        Some(&pod_yaml("user-2", "claim")),
    )
    .await;
    let (status, reason, message) = within(30, "user-2 to be Unschedulable", || async {
        pods.get("user-2")
            .await
            .ok()
            .and_then(|p| scheduled_cond(&p))
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(
        message.contains("persistentvolumeclaim \"claim\" is being deleted"),
        "{message}"
    );
    assert!(message.starts_with("0/1 nodes are available"), "{message}");
    let ev = within(30, "a FailedScheduling event", || async {
        let e = events_for(&client, "user-2", "FailedScheduling").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(ev[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        ev[0].source.as_ref().and_then(|s| s.component.as_deref()),
        Some("default-scheduler")
    );
    let p2 = pods.get("user-2").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p2.spec.and_then(|s| s.node_name), None);
    assert_eq!(p2.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    println!("verified: a pod using a Terminating claim stays Pending, Unschedulable: {message}");

    // An unscheduled pod goes at once; a running one after its containers stop.
    ok(&k, &kc, None, &["delete", "pod", "user-2"], None).await;
    ok(&k, &kc, None, &["delete", "pod", "user-1"], None).await;
    assert!(
        pods.get_opt("user-1")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );
    // The protection controller's part: the claim is no longer in use.
    pvcs.patch(
        "claim",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "remove", "path": "/metadata/finalizers"}
            ]))
            .unwrap_or_else(|e| panic!("{e}")),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    within(30, "pv-1 Released", || async {
        pvs.get("pv-1")
            .await
            .ok()
            .filter(|p| phase_pv(p) == "Released")
    })
    .await;
    println!("verified: the claim gone, the Retain PV is Released");
    sim.shutdown().await;
}

/// A pod whose claim does not exist is Unschedulable (`not found`) and is
/// scheduled once the claim exists and binds; a PVC bound to a Delete-policy
/// static PV leaves it Failed (no deleter for hostPath) when it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_claim_then_bound_and_delete_policy_without_deleter_fails() {
    let sim = cluster().await;
    let client = sim.client().await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod =
        serde_yaml::from_str(&pod_yaml("waiter", "later")).unwrap_or_else(|e| panic!("{e}"));
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, reason, message) = within(30, "waiter Unschedulable", || async {
        pods.get("waiter")
            .await
            .ok()
            .and_then(|p| scheduled_cond(&p))
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.contains("persistentvolumeclaim \"later\" not found"),
        "{message}"
    );
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-del"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": "/tmp/kube-sim-pv-del"}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    pvs.create(&PostParams::default(), &pv)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "later"},
        "spec": {"storageClassName": "", "volumeName": "pv-del", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let running = within(60, "waiter Running", || async {
        pods.get("waiter")
            .await
            .ok()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    assert_eq!(
        scheduled_cond(&running).map(|c| c.0),
        Some("True".to_string())
    );
    let claim = pvcs.get("later").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(phase_pvc(&claim), "Bound");
    // Pre-bound by the user: no bound-by-controller annotation on the claim.
    assert!(
        !claim
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("pv.kubernetes.io/bound-by-controller")
    );
    println!(
        "verified: missing claim → Unschedulable; created and bound (pre-bound volumeName) → scheduled and Running"
    );
    pods.delete("waiter", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    within(60, "waiter gone", || async {
        pods.get_opt("waiter")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    pvcs.delete("later", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let failed = within(30, "pv-del Failed", || async {
        pvs.get("pv-del")
            .await
            .ok()
            .filter(|p| phase_pv(p) == "Failed")
    })
    .await;
    let msg = failed.status.and_then(|s| s.message).unwrap_or_default();
    assert!(msg.contains("no deletable volume plugin matched"), "{msg}");
    println!("verified: Delete policy on a static hostPath PV → Failed ({msg})");
    sim.shutdown().await;
}

/// DefaultStorageClass admission and the hostPath provisioner: a claim
/// without a class gets `standard`, waits for its first consumer, is
/// provisioned on the node the scheduler picked (selected-node annotation,
/// PV node affinity), binds, and its PV is deleted with the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_provisioning_waits_for_first_consumer() {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    let client = sim.client().await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let sc = ok(&k, &kc, None, &["get", "storageclass"], None).await;
    assert!(
        sc.contains("standard (default)")
            && sc.contains("kube-sim.io/hostpath")
            && sc.contains("WaitForFirstConsumer"),
        "{sc}"
    );
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: dyn}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n",
    )).await;
    let claim = pvcs.get("dyn").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref()),
        Some("standard")
    );
    within(30, "a WaitForFirstConsumer event", || async {
        (!events_for(&client, "dyn", "WaitForFirstConsumer")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert_eq!(
        phase_pvc(&pvcs.get("dyn").await.unwrap_or_else(|e| panic!("{e}"))),
        "Pending"
    );
    ok(
        &k,
        &kc,
        None,
        &["apply", "-f", "-"],
        Some(&pod_yaml("consumer", "dyn")),
    )
    .await;
    ok(
        &k,
        &kc,
        None,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/consumer",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    let claim = pvcs.get("dyn").await.unwrap_or_else(|e| panic!("{e}"));
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let ann = claim.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("volume.kubernetes.io/selected-node")
            .map(String::as_str),
        Some(kube_sim::cluster::DEFAULT_NODE)
    );
    assert_eq!(
        claim.spec.and_then(|s| s.volume_name),
        Some(format!("pvc-{uid}"))
    );
    let pv = pvs
        .get(&format!("pvc-{uid}"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let affinity = serde_json::to_string(&pv.spec.as_ref().and_then(|s| s.node_affinity.clone()))
        .unwrap_or_default();
    assert!(
        affinity.contains(kube_sim::cluster::DEFAULT_NODE),
        "{affinity}"
    );
    let path = pv
        .spec
        .as_ref()
        .and_then(|s| s.host_path.as_ref())
        .map(|h| h.path.clone())
        .unwrap_or_default();
    assert!(std::path::Path::new(&path).is_dir(), "{path}");
    println!(
        "verified: default class, WaitForFirstConsumer, provisioned {} on the selected node",
        pv.metadata.name.unwrap_or_default()
    );
    ok(&k, &kc, None, &["delete", "pod", "consumer"], None).await;
    ok(&k, &kc, None, &["delete", "pvc", "dyn"], None).await;
    within(30, "the provisioned PV to be deleted", || async {
        pvs.get_opt(&format!("pvc-{uid}"))
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(!std::path::Path::new(&path).exists(), "{path} removed");
    assert!(
        pods.get_opt("consumer")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none()
    );
    println!("verified: deleting the claim deletes its provisioned PV (reclaim Delete)");
    sim.shutdown().await;
}

/// Two nodes: nodeSelector picks one; a selector no node matches and a
/// cordoned node make the pod Unschedulable with the scheduler's messages;
/// uncordoning lets it schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selection_affinity_and_cordon() {
    let mut c = ClusterConfig::all();
    c.nodes = vec!["node-a".into(), "node-b".into()];
    let sim = cluster_with(c).await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes = ok(&k, &kc, None, &["get", "nodes"], None).await;
    assert!(
        nodes.contains("node-a") && nodes.contains("node-b") && nodes.contains("Ready"),
        "{nodes}"
    );
    let pod = |name: &str, node: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [{"name": "c", "image": "busybox:1.36"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    };
    pods.create(&PostParams::default(), &pod("on-b", "node-b"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let p = within(30, "on-b scheduled", || async {
        pods.get("on-b").await.ok().filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some()
        })
    })
    .await;
    assert_eq!(p.spec.and_then(|s| s.node_name).as_deref(), Some("node-b"));
    pods.create(&PostParams::default(), &pod("nowhere", "node-z"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, reason, message) = within(30, "nowhere Unschedulable", || async {
        pods.get("nowhere")
            .await
            .ok()
            .and_then(|p| scheduled_cond(&p))
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.starts_with(
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        ),
        "{message}"
    );
    ok(&k, &kc, None, &["cordon", "node-b"], None).await;
    pods.create(&PostParams::default(), &pod("cordoned", "node-b"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, _, message) = within(30, "cordoned Unschedulable", || async {
        pods.get("cordoned")
            .await
            .ok()
            .and_then(|p| scheduled_cond(&p))
            .filter(|c| c.0 == "False")
    })
    .await;
    assert!(
        message.contains("1 node(s) were unschedulable")
            && message.contains("1 node(s) didn't match Pod's node affinity/selector"),
        "{message}"
    );
    ok(&k, &kc, None, &["uncordon", "node-b"], None).await;
    within(60, "cordoned to be scheduled after uncordon", || async {
        pods.get("cordoned")
            .await
            .ok()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("node-b"))
    })
    .await;
    println!("verified: nodeSelector, affinity mismatch and cordon messages, uncordon schedules");
    sim.shutdown().await;
}

/// Job controller: pods carry the tracking finalizer until counted; a
/// failing pod past backoffLimit 0 fails the Job (FailureTarget, Failed
/// BackoffLimitExceeded); a succeeding Job completes (SuccessCriteriaMet,
/// Complete, completionTime) and ttlSecondsAfterFinished deletes it and its
/// pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_fail_and_expire() {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    let client = sim.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let job = |name: &str, script: &str, ttl: Option<i32>| -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": ttl,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "sh", "command": ["sh", "-c", script]}]}}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let has = |j: &Job, ty: &str| {
        j.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == ty && c.status == "True"))
    };
    jobs.create(
        &PostParams::default(),
        &job("fails", "echo failing; exit 3", None),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let failed = within(60, "the failing Job to fail", || async {
        jobs.get("fails").await.ok().filter(|j| has(j, "Failed"))
    })
    .await;
    assert!(has(&failed, "FailureTarget"));
    let st = failed.status.clone().unwrap_or_default();
    assert_eq!(st.failed, Some(1));
    let cond = st
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .unwrap_or_default();
    assert_eq!(cond.reason.as_deref(), Some("BackoffLimitExceeded"));
    let jp = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=fails"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items;
    assert_eq!(jp.len(), 1);
    assert_eq!(
        jp[0].status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    assert!(
        jp[0]
            .metadata
            .finalizers
            .as_ref()
            .is_none_or(|f| f.is_empty()),
        "tracking finalizer removed after counting"
    );
    let logs = ok(
        &k,
        &kc,
        None,
        &["logs", jp[0].metadata.name.as_deref().unwrap_or("")],
        None,
    )
    .await;
    assert_eq!(logs.trim(), "failing");
    let listing = ok(&k, &kc, None, &["get", "jobs"], None).await;
    assert!(
        listing.contains("fails") && listing.contains("Failed") && listing.contains("0/1"),
        "{listing}"
    );
    println!(
        "verified: backoffLimit 0 → Failed BackoffLimitExceeded; `kubectl get jobs`:\n{listing}"
    );

    jobs.create(&PostParams::default(), &job("works", "echo ok", Some(1)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = within(60, "the Job to complete", || async {
        jobs.get_opt("works")
            .await
            .ok()
            .flatten()
            .filter(|j| has(j, "Complete"))
    })
    .await;
    assert!(has(&done, "SuccessCriteriaMet"));
    let st = done.status.unwrap_or_default();
    assert_eq!(st.succeeded, Some(1));
    assert!(st.completion_time.is_some() && st.start_time.is_some());
    within(
        60,
        "ttlSecondsAfterFinished to delete the Job and its pod",
        || async {
            let j = jobs.get_opt("works").await.ok()?;
            let p = pods
                .list(&ListParams::default().labels("batch.kubernetes.io/job-name=works"))
                .await
                .ok()?;
            (j.is_none() && p.items.is_empty()).then_some(())
        },
    )
    .await;
    println!(
        "verified: Job Complete (SuccessCriteriaMet, completionTime), deleted with its pod after ttlSecondsAfterFinished"
    );
    sim.shutdown().await;
}

/// Deleting a running Job in the background orphans its pods; the Job
/// controller removes their tracking finalizer and they go (handleOrphanPod).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_job_pods_lose_their_tracking_finalizer() {
    let sim = cluster().await;
    let client = sim.client().await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "long"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "sh", "command": ["sh", "-c", "while true; do sleep 1; done"]}]}}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    jobs.create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let running = within(60, "the Job's pod to run", || async {
        let l = pods
            .list(&ListParams::default().labels("batch.kubernetes.io/job-name=long"))
            .await
            .ok()?;
        l.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    assert!(
        running
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"batch.kubernetes.io/job-tracking".to_string())
    );
    jobs.delete("long", &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    within(60, "the orphaned pod to be deleted and go", || async {
        let l = pods
            .list(&ListParams::default().labels("batch.kubernetes.io/job-name=long"))
            .await
            .ok()?;
        l.items.is_empty().then_some(())
    })
    .await;
    println!(
        "verified: background deletion of a running Job: pod killed, tracking finalizer removed, pod gone"
    );
    sim.shutdown().await;
}

/// A node's `pods` capacity (`max_pods`): beyond it the scheduler answers
/// "Too many pods" (resources-fit, so preemption would need victims).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_beyond_node_capacity_are_unschedulable() {
    let mut c = ClusterConfig::all();
    c.kubelet_config.max_pods = 1;
    let sim = cluster_with(c).await;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    for name in ["first", "second"] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        pods.create(&PostParams::default(), &p)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if name == "first" {
            within(30, "first scheduled", || async {
                pods.get("first").await.ok().filter(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some()
                })
            })
            .await;
        }
    }
    let (_, reason, message) = within(30, "second Unschedulable", || async {
        pods.get("second")
            .await
            .ok()
            .and_then(|p| scheduled_cond(&p))
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "0/1 nodes are available: 1 Too many pods. no new claims to deallocate, preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
    pods.delete("first", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    within(60, "second scheduled once first is gone", || async {
        pods.get("second").await.ok().filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some()
        })
    })
    .await;
    println!("verified: max_pods 1 → {message}; freed capacity schedules the pod");
    sim.shutdown().await;
}

//! test/e2e/storage/pvc_protection.go and pv_protection.go, ported; each
//! runs on kube-sim and on the real kube-apiserver (`NAME::kube_sim`,
//! `NAME::real`).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use test_bed::Bed;

use crate::support::{Harness, Setup, Which, verifies};

test_bed::on_both_beds!(
    pvc_not_in_active_use_is_deleted_immediately,
    pvc_in_active_use_is_not_removed_until_the_pod_is_deleted,
    unscheduled_pod_for_a_terminating_pvc_neither_blocks_nor_frees_it,
    pv_not_bound_is_deleted_immediately,
    bound_pv_is_not_removed_until_the_claim_is_deleted_and_it_leaves_bound,
    a_terminating_pod_keeps_its_claim_until_it_is_gone,
);

/// pvc_protection.go BeforeEach: a PVC and a running (scheduled) pod using
/// it; the PVC gets the finalizer.
async fn pvc_in_use(h: &Harness, ns: &str) {
    h.namespace(ns).await;
    h.create_pvc(ns, "pvc-protection", &[]).await;
    h.create_pod(ns, "pod-1", "pvc-protection", Some("node-1"))
        .await;
    h.wait_pvc_finalizer(ns, "pvc-protection").await;
}

fn terminating(p: &Option<PersistentVolumeClaim>) -> bool {
    p.as_ref()
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
}

async fn pvc_not_in_active_use_is_deleted_immediately(bed: Bed) {
    verifies("e2e 'Verify \"immediate\" deletion of a PVC that is not in active use by a pod'");
    let h = Harness::on(bed, Setup::default()).await;
    let _c = h.start(Which::Pvc).await;
    pvc_in_use(&h, "e2e").await;
    h.delete_pod("e2e", "pod-1").await;
    h.delete_pvc("e2e", "pvc-protection").await;
    h.wait_pvc_gone("e2e", "pvc-protection").await;
}

async fn pvc_in_active_use_is_not_removed_until_the_pod_is_deleted(bed: Bed) {
    verifies("e2e 'Verify that PVC in active use by a pod is not removed immediately'");
    let h = Harness::on(bed, Setup::default()).await;
    let _c = h.start(Which::Pvc).await;
    pvc_in_use(&h, "e2e").await;
    h.delete_pvc("e2e", "pvc-protection").await;
    let note = h.wait_event("e2e", "pvc-protection", "FinalizerHeld").await;
    assert_eq!(
        note,
        "PersistentVolumeClaim e2e/pvc-protection is in use by pod e2e/pod-1 (scheduled on node-1); deletion waits until no scheduled pod uses it"
    );
    let p = h.get_pvc("e2e", "pvc-protection").await;
    assert!(
        terminating(&p),
        "the PVC is Terminating while the pod exists"
    );
    assert!(p.unwrap().finalizers().contains(&h.pvc_finalizer));
    h.delete_pod("e2e", "pod-1").await;
    h.wait_pvc_gone("e2e", "pvc-protection").await;
    let note = h
        .wait_event("e2e", "pvc-protection", "FinalizerReleased")
        .await;
    assert!(
        note.contains("is no longer used by any scheduled pod"),
        "{note}"
    );
}

async fn unscheduled_pod_for_a_terminating_pvc_neither_blocks_nor_frees_it(bed: Bed) {
    verifies(
        "e2e 'Verify that scheduling of a pod that uses PVC that is being deleted fails and the pod becomes Unschedulable': \
         an unscheduled pod does not keep the PVC, and does not free it while the scheduled pod exists",
    );
    let h = Harness::on(bed, Setup::default()).await;
    let _c = h.start(Which::Pvc).await;
    pvc_in_use(&h, "e2e").await;
    h.delete_pvc("e2e", "pvc-protection").await;
    h.wait_event("e2e", "pvc-protection", "FinalizerHeld").await;
    // The second pod stays Pending/unscheduled (no scheduler in kube-sim, as
    // the real scheduler refuses a pod whose PVC is being deleted). Its
    // creation enqueues the PVC (upstream: unscheduled pods are enqueued).
    let before = h.reconciles("pvc-protection");
    h.create_pod("e2e", "pod-2", "pvc-protection", None).await;
    h.wait_reconciles("pvc-protection", before, 1.0).await;
    assert!(
        terminating(&h.get_pvc("e2e", "pvc-protection").await),
        "still Terminating: pod-1 uses it"
    );
    h.delete_pod("e2e", "pod-2").await;
    let before = h.reconciles("pvc-protection");
    h.create_pod("e2e", "pod-3", "pvc-protection", None).await;
    h.wait_reconciles("pvc-protection", before, 1.0).await;
    assert!(terminating(&h.get_pvc("e2e", "pvc-protection").await));
    // The scheduled pod goes: the unscheduled pod-3 does not keep the PVC.
    h.delete_pod("e2e", "pod-1").await;
    h.wait_pvc_gone("e2e", "pvc-protection").await;
    assert!(h.pods("e2e").get_opt("pod-3").await.unwrap().is_some());
}

async fn pv_not_bound_is_deleted_immediately(bed: Bed) {
    verifies("e2e 'Verify \"immediate\" deletion of a PV that is not bound to a PVC'");
    let h = Harness::on(bed, Setup::default()).await;
    let _c = h.start(Which::Pv).await;
    h.create_pv("pv-e2e", &[]).await;
    h.set_pv_phase("pv-e2e", "Available").await;
    h.wait_pv_finalizer("pv-e2e").await;
    h.delete_pv("pv-e2e").await;
    h.wait_pv_gone("pv-e2e").await;
}

async fn bound_pv_is_not_removed_until_the_claim_is_deleted_and_it_leaves_bound(bed: Bed) {
    verifies("e2e 'Verify that PV bound to a PVC is not removed immediately'");
    let h = Harness::on(bed, Setup::default()).await;
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    h.namespace("e2e").await;
    h.create_pv("pv-e2e", &[]).await;
    h.set_pv_phase("pv-e2e", "Available").await;
    h.wait_pv_finalizer("pv-e2e").await;
    h.create_pvc("e2e", "pvc-e2e", &[]).await;
    // The binder (emulated by the test): claimRef + Bound.
    h.pvs()
        .patch(
            "pv-e2e",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"claimRef": {
                "kind": "PersistentVolumeClaim", "namespace": "e2e", "name": "pvc-e2e"}}})),
        )
        .await
        .unwrap();
    h.set_pv_phase("pv-e2e", "Bound").await;
    h.delete_pv("pv-e2e").await;
    let note = h.wait_event("", "pv-e2e", "FinalizerHeld").await;
    assert_eq!(
        note,
        "PersistentVolume pv-e2e is in use: it is Bound to claim e2e/pvc-e2e; deletion waits until the volume is no longer Bound"
    );
    let pv = h.get_pv("pv-e2e").await.expect("PV still there");
    assert!(pv.metadata.deletion_timestamp.is_some(), "Terminating");
    // Delete the claim; the binder then moves the PV to Released.
    h.delete_pvc("e2e", "pvc-e2e").await;
    h.wait_pvc_gone("e2e", "pvc-e2e").await;
    assert!(h.get_pv("pv-e2e").await.is_some(), "still Bound: kept");
    h.set_pv_phase("pv-e2e", "Released").await;
    h.wait_pv_gone("pv-e2e").await;
    h.wait_event("", "pv-e2e", "FinalizerReleased").await;
}

async fn a_terminating_pod_keeps_its_claim_until_it_is_gone(bed: Bed) {
    verifies(
        "with graceful pod deletion, a pod that is Terminating (deletionTimestamp set, grace \
         period running) still keeps its PVC; the PVC goes once the kubelet's final delete \
         removes the pod",
    );
    let h = Harness::on(
        bed,
        Setup {
            pod_graceful_deletion: true,
            ..Setup::default()
        },
    )
    .await;
    let _c = h.start(Which::Pvc).await;
    h.namespace("grace").await;
    h.create_pvc("grace", "data", &[]).await;
    let mut p = crate::support::pod("grace", "web-0", "data", Some("node-1"));
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(2);
    h.pods("grace")
        .create(&Default::default(), &p)
        .await
        .expect("create pod");
    h.wait_pvc_finalizer("grace", "data").await;
    h.delete_pvc("grace", "data").await;
    h.wait_event("grace", "data", "FinalizerHeld").await;
    let before = h.reconciles("pvc-protection");
    h.pods("grace")
        .delete("web-0", &kube::api::DeleteParams::default())
        .await
        .expect("delete pod");
    let pod = h
        .pods("grace")
        .get_opt("web-0")
        .await
        .unwrap()
        .expect("pod kept");
    assert!(
        pod.metadata.deletion_timestamp.is_some(),
        "pod is Terminating"
    );
    // The pod's Terminating update re-checks the claim (no container runs,
    // so upstream's IsPodTerminated holds): still in use.
    h.wait_reconciles("pvc-protection", before, 1.0).await;
    assert!(
        h.get_pvc("grace", "data").await.is_some(),
        "the PVC outlives its Terminating pod"
    );
    // The kubelet (emulated) finishes: DELETE with gracePeriodSeconds=0.
    h.pods("grace")
        .delete("web-0", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .expect("final delete");
    h.wait_pvc_gone("grace", "data").await;
    assert!(h.pods("grace").get_opt("web-0").await.unwrap().is_none());
}

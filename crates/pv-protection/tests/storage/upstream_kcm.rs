//! The upstream profile in place of KCM's own controllers, on the real
//! control plane: kube-controller-manager v1.36.3 runs every controller but
//! its pv-protection and pvc-protection (and volumeattributesclass-protection),
//! the real `StorageObjectInUseProtection` admission plugin adds the
//! `kubernetes.io/...` finalizers, and ours remove them beside KCM's PV
//! binder, ephemeral-volume controller and garbage collector.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use protection_core::FinalizerProfile;
use serde_json::json;
use test_bed::{Bed, Mark};

use crate::support::{Harness, Setup, USER, Which, verifies, wait_until};

/// KCM 1.36's names for its controllers that ours replace
/// (cmd/kube-controller-manager/names/controller_names.go).
const KCM_WITHOUT_OURS: [&str; 4] = [
    "*",
    "-persistentvolume-protection-controller",
    "-persistentvolumeclaim-protection-controller",
    "-volumeattributesclass-protection-controller",
];

async fn upstream_beside_kcm() -> Harness {
    let h = Harness::on(
        Bed::Real,
        Setup {
            profile: FinalizerProfile::Upstream,
            admission: true,
            kcm: Some(KCM_WITHOUT_OURS.iter().map(|s| s.to_string()).collect()),
            ..Setup::default()
        },
    )
    .await;
    h.server.node("node-1").await.expect("create node-1");
    h
}

async fn phase_of_pv(h: &Harness, name: &str) -> Option<String> {
    h.get_pv(name)
        .await
        .and_then(|p| p.status.and_then(|s| s.phase))
}

/// Requests any of KCM's own storage-protection controllers made: none may
/// have run.
fn kcm_protection_requests(h: &Harness, since: u64) -> Vec<String> {
    h.server
        .requests_since(Mark(since))
        .into_iter()
        .filter(|r| {
            r.user.ends_with(":pvc-protection-controller")
                || r.user.ends_with(":pv-protection-controller")
                || r.user
                    .ends_with(":volumeattributesclass-protection-controller")
        })
        .map(|r| format!("{} {} {}/{}", r.user, r.verb, r.resource, r.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_binder_binds_and_releases_while_ours_hold_and_remove_the_upstream_finalizers() {
    verifies(
        "real kube-apiserver + KCM (--controllers=*,-persistentvolume-protection-controller,\
         -persistentvolumeclaim-protection-controller,-volumeattributesclass-protection-controller): \
         the admission plugin adds kubernetes.io/pv-protection and kubernetes.io/pvc-protection; \
         KCM's binder binds the claim; deleting the Bound volume and the used claim leaves both \
         Terminating; once the pod is gone ours release the claim, the binder moves the volume to \
         Released, and ours release it; one PATCH each, all from us, none from KCM",
    );
    let h = upstream_beside_kcm().await;
    assert_eq!(h.pvc_finalizer, "kubernetes.io/pvc-protection");
    assert_eq!(h.pv_finalizer, "kubernetes.io/pv-protection");
    h.namespace("up").await;
    let since = h.seq();
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;

    let v = h.create_pv("vol", &[]).await;
    assert_eq!(v.finalizers(), ["kubernetes.io/pv-protection"], "admission");
    let c = h.create_pvc("up", "data", &[]).await;
    assert_eq!(
        c.finalizers(),
        ["kubernetes.io/pvc-protection"],
        "admission"
    );
    wait_until("KCM's binder binds vol to up/data", || async {
        phase_of_pv(&h, "vol").await.as_deref() == Some("Bound")
            && h.get_pvc("up", "data")
                .await
                .and_then(|c| c.status.and_then(|s| s.phase))
                .as_deref()
                == Some("Bound")
    })
    .await;
    h.create_pod("up", "web-0", "data", Some("node-1")).await;

    h.delete_pv("vol").await;
    let note = h.wait_event("", "vol", "FinalizerHeld").await;
    assert_eq!(
        note,
        "PersistentVolume vol is in use: it is Bound to claim up/data; deletion waits until the volume is no longer Bound"
    );
    h.delete_pvc("up", "data").await;
    let note = h.wait_event("up", "data", "FinalizerHeld").await;
    assert!(
        note.contains("in use by pod up/web-0 (scheduled on node-1)"),
        "{note}"
    );
    // Held for real: a binder resync later, both are still there.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pvc = h.get_pvc("up", "data").await.expect("claim kept");
    assert!(pvc.metadata.deletion_timestamp.is_some());
    assert_eq!(phase_of_pv(&h, "vol").await.as_deref(), Some("Bound"));

    h.delete_pod("up", "web-0").await;
    h.wait_pvc_gone("up", "data").await;
    // The binder sees the claim gone: Released (reclaim policy Retain).
    h.wait_pv_gone("vol").await;
    h.wait_event("", "vol", "FinalizerReleased").await;

    assert_eq!(
        h.wait_count("patch", "persistentvolumeclaims", since, 1)
            .await,
        1
    );
    assert_eq!(
        h.wait_count("patch", "persistentvolumes", since, 1).await,
        1
    );
    assert_eq!(
        kcm_protection_requests(&h, 0),
        Vec::<String>::new(),
        "KCM's own protection controllers are off"
    );
    // KCM's binder did its part: it wrote the PV (claimRef, phases).
    let binder_writes = h
        .server
        .requests_since(Mark(since))
        .into_iter()
        .filter(|r| r.user.ends_with(":persistent-volume-binder") && r.is_write())
        .count();
    assert!(
        binder_writes > 0,
        "the binder bound and released the volume"
    );
}

fn ephemeral_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "app", "image": "busybox",
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}
            }}}}]
        }
    }))
    .expect("pod manifest")
}

async fn wait_ephemeral_claim(h: &Harness, ns: &str, claim: &str) -> PersistentVolumeClaim {
    test_support::eventually(
        Duration::from_secs(60),
        &format!("KCM's ephemeral-volume controller creates {ns}/{claim}"),
        async || h.get_pvc(ns, claim).await,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collector_and_ours_release_a_generic_ephemeral_volume_both_ways() {
    verifies(
        "real KCM's ephemeral-volume controller creates a pod's claim (owned by the pod) and \
         the admission plugin protects it; (1) background: the pod's deletion (graceful, then \
         the kubelet's final delete) lets the garbage collector delete the claim and ours \
         release it; (2) foreground with grace 0, the cycle upstream's podIsShutDown breaks: the \
         garbage collector deletes the claim first while the pod waits for it, ours release it \
         because the pod is shut down, and then the pod goes",
    );
    let h = upstream_beside_kcm().await;
    h.namespace("eph").await;
    let _pvc = h.start(Which::Pvc).await;
    let pods = h.pods("eph");

    // (1) Background (kubectl's default).
    pods.create(&PostParams::default(), &ephemeral_pod("bg"))
        .await
        .expect("create pod bg");
    let claim = wait_ephemeral_claim(&h, "eph", "bg-scratch").await;
    assert_eq!(claim.finalizers(), ["kubernetes.io/pvc-protection"]);
    assert_eq!(
        claim
            .owner_references()
            .iter()
            .map(|o| (o.kind.as_str(), o.name.as_str(), o.controller))
            .collect::<Vec<_>>(),
        [("Pod", "bg", Some(true))]
    );
    h.delete_pod("eph", "bg").await;
    h.wait_pvc_gone("eph", "bg-scratch").await;

    // (2) Foreground, grace 0: the pod keeps a foregroundDeletion finalizer
    // until its claim is gone.
    pods.create(&PostParams::default(), &ephemeral_pod("fg"))
        .await
        .expect("create pod fg");
    wait_ephemeral_claim(&h, "eph", "fg-scratch").await;
    pods.delete(
        "fg",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete pod fg");
    h.wait_pvc_gone("eph", "fg-scratch").await;
    wait_until("pod fg is gone once its claim is", || async {
        pods.get_opt("fg").await.expect("get pod").is_none()
    })
    .await;
    assert!(
        h.server
            .requests_since(Mark(0))
            .iter()
            .any(|r| r.user == USER && r.verb == "patch" && r.name == "fg-scratch"),
        "ours removed the finalizer of fg-scratch"
    );
    assert_eq!(kcm_protection_requests(&h, 0), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_created_by_the_admin_carries_the_plugins_finalizer_and_ours_release_it() {
    verifies(
        "with KCM beside: a PV and a PVC that were never bound are released at once on delete \
         (the admission plugin's finalizer, removed by ours)",
    );
    let h = upstream_beside_kcm().await;
    h.namespace("free").await;
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    // A claim for a class nothing provisions stays Pending; a volume of a
    // class no claim asks for stays Available.
    let mut pvc = crate::support::pvc("free", "pending", &[]);
    pvc.spec.as_mut().expect("spec").storage_class_name = Some("nothing".into());
    h.pvcs("free")
        .create(&PostParams::default(), &pvc)
        .await
        .expect("create PVC");
    let mut pv: PersistentVolume = crate::support::pv("avail", &[]);
    pv.spec.as_mut().expect("spec").storage_class_name = Some("other".into());
    h.pvs()
        .create(&PostParams::default(), &pv)
        .await
        .expect("create PV");
    wait_until("the binder marks avail Available", || async {
        phase_of_pv(&h, "avail").await.as_deref() == Some("Available")
    })
    .await;
    h.delete_pvc("free", "pending").await;
    h.delete_pv("avail").await;
    h.wait_pvc_gone("free", "pending").await;
    h.wait_pv_gone("avail").await;
}

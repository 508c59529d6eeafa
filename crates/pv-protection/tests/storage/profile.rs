//! The `upstream` finalizer profile beside an API server that runs the
//! StorageObjectInUseProtection admission plugin: kube-sim's emulation, and
//! the real plugin in kube-apiserver v1.36.3.

use kube::ResourceExt;
use test_bed::Bed;

use crate::support::{Harness, Setup, Which, verifies};

test_bed::on_both_beds!(
    upstream_profile_with_admission_plugin,
    project_profile_leaves_upstream_finalizers_alone,
);

async fn upstream_profile_with_admission_plugin(bed: Bed) {
    verifies(
        "upstream profile: the admission plugin adds kubernetes.io/pvc-protection and \
         kubernetes.io/pv-protection on create (the controllers send no add), and the \
         controllers remove them with upstream's rules",
    );
    let h = Harness::on(
        bed,
        Setup {
            profile: protection_core::FinalizerProfile::Upstream,
            admission: true,
            ..Setup::default()
        },
    )
    .await;
    assert_eq!(h.pvc_finalizer, "kubernetes.io/pvc-protection");
    assert_eq!(h.pv_finalizer, "kubernetes.io/pv-protection");
    h.namespace("up").await;
    let since = h.seq();
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    let c = h.create_pvc("up", "data", &[]).await;
    assert_eq!(
        c.finalizers(),
        ["kubernetes.io/pvc-protection"],
        "added by admission"
    );
    let v = h.create_pv("vol", &[]).await;
    assert_eq!(v.finalizers(), ["kubernetes.io/pv-protection"]);
    h.create_pod("up", "web-0", "data", Some("node-1")).await;
    h.delete_pvc("up", "data").await;
    h.wait_event("up", "data", "FinalizerHeld").await;
    h.delete_pod("up", "web-0").await;
    h.wait_pvc_gone("up", "data").await;
    h.delete_pv("vol").await;
    h.wait_pv_gone("vol").await;
    assert_eq!(
        h.wait_count("patch", "persistentvolumeclaims", since, 1)
            .await,
        1,
        "removal only"
    );
    assert_eq!(
        h.wait_count("patch", "persistentvolumes", since, 1).await,
        1,
        "removal only"
    );
}

async fn project_profile_leaves_upstream_finalizers_alone(bed: Bed) {
    verifies(
        "project profile beside the admission plugin: our finalizer is added next to \
         kubernetes.io/pvc-protection, and only ours is removed",
    );
    let h = Harness::on(
        bed,
        Setup {
            admission: true,
            ..Setup::default()
        },
    )
    .await;
    h.namespace("side").await;
    let _pvc = h.start(Which::Pvc).await;
    h.create_pvc("side", "data", &[]).await;
    h.wait_pvc_finalizer("side", "data").await;
    let p = h.get_pvc("side", "data").await.unwrap();
    assert_eq!(
        p.finalizers(),
        [
            "kubernetes.io/pvc-protection",
            "protection-manager.io/pvc-protection"
        ]
    );
    h.delete_pvc("side", "data").await;
    crate::support::wait_until("our finalizer is removed", || async {
        h.get_pvc("side", "data")
            .await
            .is_some_and(|p| p.finalizers() == ["kubernetes.io/pvc-protection"])
    })
    .await;
}

//! StorageObjectInUseProtection across emulated releases: the add phase is
//! gated (Alpha/off at 0.1, Beta/on at 0.2, GA at 0.3), removal never is;
//! objects that existed before the manager started are back-filled.

use std::time::Duration;

use kube::ResourceExt;
use protection_core::Version;

use crate::support::{Harness, Setup, Which, verifies};

fn at(emulated: Version, gates: &str) -> Setup {
    Setup {
        emulated,
        feature_gates: gates.to_string(),
        resync: Duration::ZERO,
        ..Setup::default()
    }
}

/// Creates objects without finalizers (and one PVC/PV with ours, to be
/// deleted) before the controllers start.
async fn preexisting(h: &Harness) {
    h.namespace("gates").await;
    for i in 0..5 {
        h.create_pvc("gates", &format!("old-{i}"), &[]).await;
        h.create_pv(&format!("old-pv-{i}"), &[]).await;
    }
    h.create_pvc("gates", "had-it", &[&h.pvc_finalizer]).await;
    h.create_pv("had-it-pv", &[&h.pv_finalizer]).await;
}

#[tokio::test]
async fn alpha_at_0_1_adds_nothing_but_still_removes() {
    verifies(
        "at --emulated-version=0.1 (gate Alpha, off) new and existing objects get no finalizer, \
         and finalizers already present are still removed once unused",
    );
    let h = Harness::new(at(Version::new(0, 1), "")).await;
    preexisting(&h).await;
    let since = h.seq();
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    h.create_pvc("gates", "new", &[]).await;
    h.create_pv("new-pv", &[]).await;
    // Removal runs: deleting the objects that carry our finalizer
    // completes. The watch delivers events in order, so once these are
    // processed the earlier objects have been seen too.
    h.delete_pvc("gates", "had-it").await;
    h.delete_pv("had-it-pv").await;
    h.wait_pvc_gone("gates", "had-it").await;
    h.wait_pv_gone("had-it-pv").await;
    for i in 0..5 {
        let p = h.get_pvc("gates", &format!("old-{i}")).await.unwrap();
        assert!(
            p.finalizers().is_empty(),
            "no back-fill at 0.1: {:?}",
            p.finalizers()
        );
        let v = h.get_pv(&format!("old-pv-{i}")).await.unwrap();
        assert!(v.finalizers().is_empty());
    }
    assert!(
        h.get_pvc("gates", "new")
            .await
            .unwrap()
            .finalizers()
            .is_empty()
    );
    assert!(h.get_pv("new-pv").await.unwrap().finalizers().is_empty());
    // Exactly the two removals were written.
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 1);
    assert_eq!(h.count("patch", "persistentvolumes", since), 1);
}

#[tokio::test]
async fn alpha_gate_turned_on_at_0_1_adds() {
    verifies(
        "at 0.1 with --feature-gates=StorageObjectInUseProtection=true the finalizers are added",
    );
    let h = Harness::new(at(Version::new(0, 1), "StorageObjectInUseProtection=true")).await;
    preexisting(&h).await;
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    for i in 0..5 {
        h.wait_pvc_finalizer("gates", &format!("old-{i}")).await;
        h.wait_pv_finalizer(&format!("old-pv-{i}")).await;
    }
}

async fn backfills_and_adds(emulated: Version) {
    let h = Harness::new(at(emulated, "")).await;
    preexisting(&h).await;
    let since = h.seq();
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    for i in 0..5 {
        h.wait_pvc_finalizer("gates", &format!("old-{i}")).await;
        h.wait_pv_finalizer(&format!("old-pv-{i}")).await;
    }
    h.create_pvc("gates", "new", &[]).await;
    h.create_pv("new-pv", &[]).await;
    h.wait_pvc_finalizer("gates", "new").await;
    h.wait_pv_finalizer("new-pv").await;
    // The objects that already had it were not written.
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 6);
    assert_eq!(h.count("patch", "persistentvolumes", since), 6);
    h.delete_pvc("gates", "new").await;
    h.wait_pvc_gone("gates", "new").await;
}

#[tokio::test]
async fn beta_at_0_2_backfills_existing_objects_and_adds_to_new_ones() {
    verifies(
        "at --emulated-version=0.2 (Beta, on) existing objects are back-filled and new ones get the finalizer",
    );
    backfills_and_adds(Version::new(0, 2)).await;
}

#[tokio::test]
async fn ga_at_0_3_backfills_existing_objects_and_adds_to_new_ones() {
    verifies(
        "at --emulated-version=0.3 (GA) existing objects are back-filled and new ones get the finalizer",
    );
    backfills_and_adds(Version::new(0, 3)).await;
}

#[tokio::test]
async fn beta_gate_turned_off_at_0_2_adds_nothing() {
    verifies("at 0.2 with StorageObjectInUseProtection=false nothing is added; removal still runs");
    let h = Harness::new(at(Version::new(0, 2), "StorageObjectInUseProtection=false")).await;
    preexisting(&h).await;
    let since = h.seq();
    let _pvc = h.start(Which::Pvc).await;
    h.delete_pvc("gates", "had-it").await;
    h.wait_pvc_gone("gates", "had-it").await;
    assert!(
        h.get_pvc("gates", "old-0")
            .await
            .unwrap()
            .finalizers()
            .is_empty()
    );
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 1);
}

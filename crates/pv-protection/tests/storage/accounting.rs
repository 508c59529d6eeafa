//! Request accounting: one write to add and one to remove per object, and
//! none while idle across resync rounds, counted in kube-sim's request log
//! and in the real kube-apiserver's audit log; a lagging cache sends
//! nothing (kube-sim: its faults stall the watch).

use std::time::Duration;

use test_bed::Bed;

use crate::support::{Harness, Setup, Which, verifies};

test_bed::on_both_beds!(
    one_write_to_add_and_one_to_remove_per_object,
    no_writes_and_no_lists_across_resync_rounds_while_idle,
);

async fn one_write_to_add_and_one_to_remove_per_object(bed: Bed) {
    verifies(
        "exactly one PATCH adds and one PATCH removes each finalizer (PVs, PVCs, with pod \
         events racing the adds), and nothing else is written to PVs or PVCs",
    );
    let h = Harness::on(bed, Setup::default()).await;
    h.namespace("acct").await;
    const N: usize = 30;
    for i in 0..N {
        h.create_pvc("acct", &format!("c-{i}"), &[]).await;
        h.create_pv(&format!("v-{i}"), &[]).await;
    }
    let since = h.seq();
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    // Unscheduled pods enqueue their claims while the adds are in flight.
    for i in 0..N {
        h.create_pod("acct", &format!("p-{i}"), &format!("c-{i}"), None)
            .await;
    }
    for i in 0..N {
        h.wait_pvc_finalizer("acct", &format!("c-{i}")).await;
        h.wait_pv_finalizer(&format!("v-{i}")).await;
    }
    assert_eq!(
        h.wait_count("patch", "persistentvolumeclaims", since, N)
            .await,
        N,
        "one add per PVC"
    );
    assert_eq!(
        h.wait_count("patch", "persistentvolumes", since, N).await,
        N,
        "one add per PV"
    );

    // Half of the claims are used by a scheduled pod while being deleted.
    for i in 0..N / 2 {
        h.create_pod(
            "acct",
            &format!("run-{i}"),
            &format!("c-{i}"),
            Some("node-1"),
        )
        .await;
    }
    let since = h.seq();
    for i in 0..N {
        h.delete_pvc("acct", &format!("c-{i}")).await;
        h.delete_pv(&format!("v-{i}")).await;
    }
    for i in N / 2..N {
        h.wait_pvc_gone("acct", &format!("c-{i}")).await;
    }
    for i in 0..N / 2 {
        h.wait_event("acct", &format!("c-{i}"), "FinalizerHeld")
            .await;
        h.delete_pod("acct", &format!("run-{i}")).await;
    }
    for i in 0..N {
        h.wait_pvc_gone("acct", &format!("c-{i}")).await;
        h.wait_pv_gone(&format!("v-{i}")).await;
    }
    assert_eq!(
        h.wait_count("patch", "persistentvolumeclaims", since, N)
            .await,
        N,
        "one removal per PVC"
    );
    assert_eq!(
        h.wait_count("patch", "persistentvolumes", since, N).await,
        N,
        "one removal per PV"
    );
    for verb in ["update", "create", "delete"] {
        assert_eq!(h.count(verb, "persistentvolumeclaims", 0), 0, "{verb} PVC");
        assert_eq!(h.count(verb, "persistentvolumes", 0), 0, "{verb} PV");
    }
}

async fn no_writes_and_no_lists_across_resync_rounds_while_idle(bed: Bed) {
    verifies(
        "with a 100ms resync, ten rounds over kept (in use) and settled objects cause zero \
         writes (no patch, no repeated event) and zero live pod LISTs; the Terminating gauge \
         counts the kept objects",
    );
    let h = Harness::on(
        bed,
        Setup {
            resync: Duration::from_millis(100),
            ..Setup::default()
        },
    )
    .await;
    h.namespace("idle").await;
    let _pv = h.start(Which::Pv).await;
    let _pvc = h.start(Which::Pvc).await;
    for i in 0..5 {
        h.create_pvc("idle", &format!("settled-{i}"), &[]).await;
        h.wait_pvc_finalizer("idle", &format!("settled-{i}")).await;
    }
    h.create_pvc("idle", "held", &[]).await;
    h.create_pod("idle", "user", "held", Some("node-1")).await;
    h.wait_pvc_finalizer("idle", "held").await;
    h.delete_pvc("idle", "held").await;
    h.wait_event("idle", "held", "FinalizerHeld").await;
    h.create_pv("bound", &[]).await;
    h.wait_pv_finalizer("bound").await;
    h.set_pv_phase("bound", "Bound").await;
    h.delete_pv("bound").await;
    h.wait_event("", "bound", "FinalizerHeld").await;

    // The two FinalizerHeld events are the controllers' last writes.
    let since = h.seq_after_events(2).await;
    let pvc_before = h.reconciles("pvc-protection");
    let pv_before = h.reconciles("pv-protection");
    // Each round re-checks the two kept objects: ten rounds.
    h.wait_reconciles("pvc-protection", pvc_before, 10.0).await;
    h.wait_reconciles("pv-protection", pv_before, 10.0).await;
    for resource in [
        "persistentvolumeclaims",
        "persistentvolumes",
        "events",
        "pods",
    ] {
        assert_eq!(
            h.writes(resource, since),
            0,
            "writes to {resource} while idle"
        );
    }
    assert_eq!(
        h.count("list", "pods", since),
        0,
        "kept PVCs are confirmed from the cache"
    );
    assert_eq!(
        h.events_for("idle", "held").await.len(),
        1,
        "the held event is not repeated"
    );
    assert_eq!(h.events_for("", "bound").await.len(), 1);
    assert_eq!(
        h.metric("protection_manager_terminating_objects{controller=\"pvc-protection\"}"),
        1.0
    );
    assert_eq!(
        h.metric("protection_manager_terminating_objects{controller=\"pv-protection\"}"),
        1.0
    );
    // Release both: the gauge drops to zero.
    h.delete_pod("idle", "user").await;
    h.set_pv_phase("bound", "Released").await;
    h.wait_pvc_gone("idle", "held").await;
    h.wait_pv_gone("bound").await;
    h.wait_metric(
        "protection_manager_terminating_objects{controller=\"pvc-protection\"}",
        0.0,
    )
    .await;
    h.wait_metric(
        "protection_manager_terminating_objects{controller=\"pv-protection\"}",
        0.0,
    )
    .await;
}

#[tokio::test]
async fn a_reconcile_on_a_cache_that_lags_our_own_write_sends_nothing() {
    verifies(
        "when a pod event re-checks a PVC whose cached copy predates our finalizer removal \
         (PVC watch stalled), no second LIST and no second PATCH is sent",
    );
    let h = Harness::new(Setup::default()).await;
    h.namespace("lag").await;
    let _pvc = h.start(Which::Pvc).await;
    h.create_pvc("lag", "x", &[]).await;
    h.create_pod("lag", "user", "x", Some("node-1")).await;
    h.wait_pvc_finalizer("lag", "x").await;
    h.delete_pvc("lag", "x").await;
    h.wait_event("lag", "x", "FinalizerHeld").await;

    // Stall the PVC watch: it is cut and every re-watch fails (no re-list,
    // so the cached copy stays as it is).
    let faults = h.sim().faults();
    let rule = faults.add(
        kube_sim::FaultRule::error(500)
            .verb("watch")
            .resource("persistentvolumeclaims"),
    );
    faults.cut_watches();
    let since = h.seq();
    h.delete_pod("lag", "user").await;
    h.wait_pvc_gone("lag", "x").await;
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 1);
    // A new (unscheduled) pod naming the claim re-checks it from the stale
    // cache, which still shows it Terminating with our finalizer.
    let before = h.reconciles("pvc-protection");
    h.create_pod("lag", "late", "x", None).await;
    h.wait_reconciles("pvc-protection", before, 1.0).await;
    faults.remove(rule);
    assert_eq!(
        h.count("patch", "persistentvolumeclaims", since),
        1,
        "no second removal"
    );
    assert_eq!(h.count("list", "pods", since), 1, "no second live LIST");
}

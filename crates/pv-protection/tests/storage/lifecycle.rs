//! Readiness waits for the pod index; shutdown is graceful.

use kube::ResourceExt;
use kube_sim::{FaultAction, FaultRule, RequestFilter};

use crate::support::{Harness, Setup, USER, Which, verifies, wait_until};

#[tokio::test]
async fn pvc_protection_is_ready_only_once_the_pod_index_has_synced() {
    verifies(
        "pvc-protection reports ready only after both the PVC list and the pod list are \
         complete (the pod LIST is held back by 4 s of injected latency)",
    );
    let h = Harness::new(Setup::default()).await;
    let mut rule = FaultRule::new(FaultAction::Latency { millis: 4000 })
        .verb("list")
        .resource("pods")
        .user(USER);
    rule.namespace = Some(String::new());
    h.sim().faults().add(rule);
    let c = h.spawn(Which::Pvc).await;
    let pvc_listed = || {
        h.sim().requests().count(
            &RequestFilter::default()
                .user(USER)
                .verb("list")
                .resource("persistentvolumeclaims"),
        ) > 0
    };
    wait_until("the PVC list was answered", || async { pvc_listed() }).await;
    let pods_listed = h.sim().requests().count(
        &RequestFilter::default()
            .user(USER)
            .verb("list")
            .resource("pods"),
    );
    assert_eq!(pods_listed, 0, "the pod LIST is still held back");
    assert!(!c.ready.is_ready(), "not ready before the pod index synced");
    let ready = c.ready.clone();
    wait_until("ready after the pod list", || {
        let ready = ready.clone();
        async move { ready.is_ready() }
    })
    .await;
    assert_eq!(
        h.metric("protection_manager_controller_ready{controller=\"pvc-protection\"}"),
        1.0
    );
}

#[tokio::test]
async fn back_fill_starts_before_the_pod_index_but_a_used_claim_waits_for_it() {
    verifies(
        "with the pod LIST held back (4 s of injected latency), a new claim gets its \
         finalizer before the pod index has synced, while a deleting claim used by a \
         scheduled pod keeps its finalizer: it is decided only from the synced index, \
         and held",
    );
    let h = Harness::new(Setup::default()).await;
    h.namespace("early").await;
    h.create_pod("early", "user", "used", Some("node-1")).await;
    h.create_pvc("early", "used", &[&h.pvc_finalizer]).await;
    h.delete_pvc("early", "used").await;
    h.create_pvc("early", "fresh", &[]).await;
    let mut rule = FaultRule::new(FaultAction::Latency { millis: 4000 })
        .verb("list")
        .resource("pods")
        .user(USER);
    rule.namespace = Some(String::new());
    h.sim().faults().add(rule);
    let c = h.spawn(Which::Pvc).await;

    h.wait_pvc_finalizer("early", "fresh").await;
    let pods_listed = h.sim().requests().count(
        &RequestFilter::default()
            .user(USER)
            .verb("list")
            .resource("pods"),
    );
    assert_eq!(pods_listed, 0, "the finalizer came before the pod list");
    assert!(!c.ready.is_ready(), "the pod index has not synced yet");
    let used = h.get_pvc("early", "used").await.expect("the used claim");
    assert!(
        used.finalizers().contains(&h.pvc_finalizer),
        "a deleting claim is not released before the pod index has synced"
    );

    let note = h.wait_event("early", "used", "FinalizerHeld").await;
    assert!(note.contains("early/user"), "{note}");
    let used = h.get_pvc("early", "used").await.expect("the used claim");
    assert!(
        used.finalizers().contains(&h.pvc_finalizer),
        "held once the index has synced"
    );
    c.stop().await;
}

#[tokio::test]
async fn both_controllers_stop_cleanly_on_shutdown() {
    verifies("on shutdown both controllers return Ok promptly and report not ready");
    let h = Harness::new(Setup::default()).await;
    h.namespace("stop").await;
    let pv = h.start(Which::Pv).await;
    let pvc = h.start(Which::Pvc).await;
    h.create_pvc("stop", "data", &[]).await;
    h.wait_pvc_finalizer("stop", "data").await;
    let (pv_ready, pvc_ready) = (pv.ready.clone(), pvc.ready.clone());
    pv.stop().await;
    pvc.stop().await;
    assert!(!pv_ready.is_ready() && !pvc_ready.is_ready());
}

//! upstream's "fails -> controller retries" rows, on kube-sim: each failed
//! attempt is retried with per-object backoff, and a removal retry repeats
//! the live LIST (upstream: LIST, UPDATE × 3).

use kube_sim::FaultRule;

use crate::support::{Harness, Setup, Which, verifies};

#[tokio::test]
async fn saving_pvc_finalizer_fails_then_controller_retries() {
    verifies(
        "upstream row 'saving PVC finalizer fails -> controller retries': 2 × 403, then success = 3 PATCHes",
    );
    let h = Harness::new(Setup::default()).await;
    h.namespace("retry").await;
    h.sim().faults().add(
        FaultRule::error(403)
            .verb("patch")
            .resource("persistentvolumeclaims")
            .times(2),
    );
    let since = h.seq();
    let _pvc = h.start(Which::Pvc).await;
    h.create_pvc("retry", "pvc1", &[]).await;
    h.wait_pvc_finalizer("retry", "pvc1").await;
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 3);
}

#[tokio::test]
async fn pvc_finalizer_removal_fails_then_controller_retries() {
    verifies("upstream row 'finalizer removal fails -> controller retries': (LIST, PATCH) × 3");
    let h = Harness::new(Setup::default()).await;
    h.namespace("retry").await;
    h.create_pvc("retry", "pvc1", &[&h.pvc_finalizer]).await;
    let _pvc = h.start(Which::Pvc).await;
    h.sim().faults().add(
        FaultRule::error(403)
            .verb("patch")
            .resource("persistentvolumeclaims")
            .times(2),
    );
    let since = h.seq();
    h.delete_pvc("retry", "pvc1").await;
    h.wait_pvc_gone("retry", "pvc1").await;
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 3);
    assert_eq!(h.count("list", "pods", since), 3);
}

#[tokio::test]
async fn pv_finalizer_add_and_removal_fail_then_controller_retries() {
    verifies(
        "upstream rows 'saving PVC finalizer fails -> controller retries' and 'finalizer removal \
         fails -> controller retries' of TestPVProtectionController: 3 PATCHes each",
    );
    let h = Harness::new(Setup::default()).await;
    let faults = h.sim().faults();
    faults.add(
        FaultRule::error(403)
            .verb("patch")
            .resource("persistentvolumes")
            .times(2),
    );
    let since = h.seq();
    let _pv = h.start(Which::Pv).await;
    h.create_pv("pv1", &[]).await;
    h.wait_pv_finalizer("pv1").await;
    assert_eq!(h.count("patch", "persistentvolumes", since), 3);
    faults.add(
        FaultRule::error(500)
            .verb("patch")
            .resource("persistentvolumes")
            .times(2),
    );
    let since = h.seq();
    h.delete_pv("pv1").await;
    h.wait_pv_gone("pv1").await;
    assert_eq!(h.count("patch", "persistentvolumes", since), 3);
}

#[tokio::test]
async fn failing_live_list_is_retried_and_never_removes() {
    verifies("a failing live pod LIST keeps the finalizer and is retried until it succeeds");
    let h = Harness::new(Setup::default()).await;
    h.namespace("retry").await;
    h.create_pvc("retry", "pvc1", &[&h.pvc_finalizer]).await;
    let _pvc = h.start(Which::Pvc).await;
    let mut rule = FaultRule::error(503).verb("list").resource("pods").times(3);
    rule.namespace = Some("retry".into());
    h.sim().faults().add(rule);
    let since = h.seq();
    h.delete_pvc("retry", "pvc1").await;
    h.wait_pvc_gone("retry", "pvc1").await;
    assert_eq!(
        h.count("list", "pods", since),
        4,
        "3 failures, then success"
    );
    assert_eq!(
        h.count("patch", "persistentvolumeclaims", since),
        1,
        "removed once, after the successful LIST"
    );
}

#[tokio::test]
async fn failed_adds_are_retries_not_a_fight() {
    verifies(
        "four refused finalizer PATCHes in a row (403) are retried to success with no \
         FinalizerFight: a write the server refused is not a write another writer undid",
    );
    let h = Harness::new(Setup::default()).await;
    h.namespace("retry").await;
    h.sim().faults().add(
        FaultRule::error(403)
            .verb("patch")
            .resource("persistentvolumeclaims")
            .times(4),
    );
    let since = h.seq();
    let _pvc = h.start(Which::Pvc).await;
    h.create_pvc("retry", "pvc1", &[]).await;
    h.wait_pvc_finalizer("retry", "pvc1").await;
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 5);
    let fights: Vec<_> = h
        .events_for("retry", "pvc1")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FinalizerFight"))
        .collect();
    assert!(fights.is_empty(), "no fight was reported: {fights:?}");
    assert_eq!(
        h.metric(
            "protection_manager_finalizer_fight_backoffs_total{controller=\"pvc-protection\"}"
        ),
        0.0
    );
}

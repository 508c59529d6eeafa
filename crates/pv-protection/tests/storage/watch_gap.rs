//! kubernetes #120041: a pod deleted while the pod watch was down must not
//! leave its PVC Terminating. The index's re-list sees the pod vanished and
//! re-checks its claims.

use kube_sim::{FaultAction, FaultRule, RequestFilter};

use crate::support::{Harness, Setup, USER, Which, verifies};

#[tokio::test]
async fn pod_deleted_during_a_watch_gap_releases_its_pvc_after_the_relist() {
    verifies(
        "#120041: with resync off, a pod deleted while the pod watch is down (re-watch answered \
         410, so the watcher re-lists) releases its PVC through the index re-list, without the \
         PVC watch re-listing; a pod that is still there keeps its PVC",
    );
    let h = Harness::new(Setup::default()).await;
    h.namespace("gap").await;
    let _pvc = h.start(Which::Pvc).await;
    for (pvc, pod) in [("freed", "goes"), ("kept", "stays")] {
        h.create_pvc("gap", pvc, &[]).await;
        h.create_pod("gap", pod, pvc, Some("node-1")).await;
        h.wait_pvc_finalizer("gap", pvc).await;
        h.delete_pvc("gap", pvc).await;
        h.wait_event("gap", pvc, "FinalizerHeld").await;
    }
    let faults = h.sim().faults();
    let down = faults.add(FaultRule::error(500).verb("watch").resource("pods"));
    faults.cut_watches();
    let since = h.seq();
    h.delete_pod("gap", "goes").await;
    // The watch comes back only with 410 Gone: its resourceVersion is too
    // old, the watcher must re-list (no delete event is ever delivered).
    faults.add(
        FaultRule::new(FaultAction::Gone)
            .verb("watch")
            .resource("pods")
            .times(1),
    );
    faults.remove(down);
    h.wait_pvc_gone("gap", "freed").await;
    let pvc_lists = h.sim().requests().count(
        &RequestFilter::default()
            .user(USER)
            .verb("list")
            .resource("persistentvolumeclaims")
            .since(since),
    );
    assert_eq!(
        pvc_lists, 0,
        "the PVC watch did not re-list: the pod re-list freed it"
    );
    assert!(
        h.get_pvc("gap", "kept").await.is_some(),
        "the other PVC is still in use"
    );
}

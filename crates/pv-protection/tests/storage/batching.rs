//! Live confirmation: at most one pod LIST per namespace batch (upstream
//! #126745's per-namespace batching), never one per PVC.

use kube_sim::{FaultAction, FaultRule, RequestFilter};

use crate::support::{Harness, Setup, USER, Which, verifies};

fn live_lists(h: &Harness, ns: &str) -> usize {
    h.sim.requests().count(&RequestFilter {
        namespace: Some(ns.to_string()),
        ..RequestFilter::default()
            .user(USER)
            .verb("list")
            .resource("pods")
    })
}

#[tokio::test]
async fn one_live_pod_list_per_namespace_batch() {
    verifies(
        "150 Terminating unused PVCs in two namespaces are confirmed with one live pod LIST per \
         namespace batch (here at most 2 per namespace: the first batch, and everything that \
         queued while its LIST was in flight), and the LIST count equals the batch count",
    );
    let h = Harness::new(Setup::default()).await;
    let spaces = [("batch-a", 100), ("batch-b", 50)];
    for (ns, n) in spaces {
        h.namespace(ns).await;
        for i in 0..n {
            h.create_pvc(ns, &format!("c-{i}"), &[&h.pvc_finalizer])
                .await;
            h.delete_pvc(ns, &format!("c-{i}")).await;
        }
        // An unrelated scheduled pod, so the LISTs have something to scan.
        h.create_pod(ns, "other", "unrelated", Some("node-1")).await;
    }
    // Every live LIST takes 2 s, so whatever is reconciled while the first
    // batch's LIST is in flight lands in the second batch.
    let faults = h.sim.faults();
    for (ns, _) in spaces {
        let mut rule = FaultRule::new(FaultAction::Latency { millis: 2000 })
            .verb("list")
            .resource("pods")
            .user(USER);
        rule.namespace = Some(ns.to_string());
        faults.add(rule);
    }
    let _pvc = h.start(Which::Pvc).await;
    for (ns, n) in spaces {
        for i in 0..n {
            h.wait_pvc_gone(ns, &format!("c-{i}")).await;
        }
    }
    let (a, b) = (live_lists(&h, "batch-a"), live_lists(&h, "batch-b"));
    let batches =
        h.metric("protection_manager_live_list_batch_size_count{controller=\"pvc-protection\"}");
    let confirmed =
        h.metric("protection_manager_live_list_batch_size_sum{controller=\"pvc-protection\"}");
    eprintln!(
        "live LISTs: batch-a {a}, batch-b {b}; batches {batches}; PVCs confirmed {confirmed}"
    );
    assert!((1..=2).contains(&a), "batch-a: {a} LISTs for 100 PVCs");
    assert!((1..=2).contains(&b), "batch-b: {b} LISTs for 50 PVCs");
    assert_eq!((a + b) as f64, batches, "one LIST per batch");
    assert_eq!(
        h.metric("protection_manager_live_lists_total{controller=\"pvc-protection\"}"),
        batches
    );
    assert_eq!(confirmed, 150.0, "every PVC confirmed by a batch");
}

#[tokio::test]
async fn pvc_kept_by_a_pod_the_cache_has_not_seen_yet() {
    verifies(
        "upstream row 'pod with the PVC exists but is not in the Informer's cache yet -> \
         finalizer is not removed': one LIST, no removal",
    );
    let h = Harness::new(Setup::default()).await;
    h.namespace("late").await;
    h.create_pvc("late", "pvc1", &[&h.pvc_finalizer]).await;
    let _pvc = h.start(Which::Pvc).await;
    // Stall the pod watch so the index does not learn about the new pod.
    let faults = h.sim.faults();
    faults.add(FaultRule::error(500).verb("watch").resource("pods"));
    faults.cut_watches();
    h.create_pod("late", "pod1", "pvc1", Some("node1")).await;
    let since = h.seq();
    h.delete_pvc("late", "pvc1").await;
    let note = h.wait_event("late", "pvc1", "FinalizerHeld").await;
    assert!(note.contains("late/pod1 (scheduled on node1)"), "{note}");
    assert_eq!(live_lists_since(&h, "late", since), 1);
    assert_eq!(h.count("patch", "persistentvolumeclaims", since), 0);
    assert!(h.get_pvc("late", "pvc1").await.is_some());
}

fn live_lists_since(h: &Harness, ns: &str, since: u64) -> usize {
    h.sim.requests().count(&RequestFilter {
        namespace: Some(ns.to_string()),
        ..RequestFilter::default()
            .user(USER)
            .verb("list")
            .resource("pods")
            .since(since)
    })
}

//! Issue 27, weak spot "fights never back off": a second writer that keeps
//! removing the PVC finalizer got a re-add from us on every watch event
//! (~55 writes/s for ever). Now the third quick add starts a per-object
//! back-off (5 s, doubling), one Warning names the other field manager, and
//! the back-off is counted.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::{Harness, Setup, Which, verifies, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_keeps_removing_our_finalizer_meets_a_back_off_and_one_warning() {
    verifies(
        "a janitor removing the PVC finalizer as fast as it can for 3 s gets one re-add (the \
         third add in 30 s waits 5 s), one Warning FinalizerFight naming it, and the back-off \
         counted",
    );
    let h = Harness::new(Setup::default()).await;
    h.namespace("fight").await;
    let pvc = h.start(Which::Pvc).await;
    h.create_pvc("fight", "data", &[]).await;
    h.wait_pvc_finalizer("fight", "data").await;
    // managedFields times have whole seconds and the server orders equal
    // times by manager name (as kube-apiserver does), so the creator
    // ("unknown", no field manager given) would tie with the janitor: let a
    // second pass so the janitor's entry is the latest.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let since = h.seq();
    let janitor = PatchParams {
        field_manager: Some("finalizer-janitor".into()),
        ..PatchParams::default()
    };
    let api = h.pvcs("fight");
    let mut removals = 0;
    let start = tokio::time::Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let live: PersistentVolumeClaim = api.get("data").await.expect("get");
        if live.finalizers().contains(&h.pvc_finalizer) {
            api.patch(
                "data",
                &janitor,
                // It marks what it cleaned: the annotation keeps it in
                // managedFields (a pure removal leaves no owner there).
                &Patch::Merge(json!({"metadata": {
                    "finalizers": null,
                    "annotations": {"janitor.example.com/cleaned": removals.to_string()},
                }})),
            )
            .await
            .expect("janitor removes the finalizer");
            removals += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let readds = h.count("patch", "persistentvolumeclaims", since);
    println!("{removals} removals by the janitor in 3 s, {readds} re-adds by the controller");
    assert_eq!(
        readds, 1,
        "one quick re-add, then the back-off holds the next (the third add in the window)"
    );
    assert_eq!(
        removals, 2,
        "the janitor removed the first add and the re-add"
    );
    wait_until("the fight is reported", || async {
        h.events_for("fight", "data")
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("FinalizerFight"))
    })
    .await;
    let fights: Vec<_> = h
        .events_for("fight", "data")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FinalizerFight"))
        .collect();
    assert_eq!(fights.len(), 1, "one Warning per fight");
    assert_eq!(fights[0].type_.as_deref(), Some("Warning"));
    let note = fights[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("field manager \"finalizer-janitor\""),
        "{note}"
    );
    assert_eq!(
        h.metric(
            "protection_manager_finalizer_fight_backoffs_total{controller=\"pvc-protection\"}"
        ),
        1.0
    );
    // The back-off ends: the finalizer comes back once the janitor stops.
    h.wait_pvc_finalizer("fight", "data").await;
    pvc.stop().await;
}

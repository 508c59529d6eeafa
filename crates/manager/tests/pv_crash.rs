//! pvc-protection survives a crash: the manager binary is SIGKILLed while 500
//! PVCs of one namespace are being deleted and their pods removed; after a
//! restart every unused PVC is gone and no in-use PVC lost its finalizer.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use kube_sim::{KubeSim, RequestFilter, SimConfig};
use serde_json::json;
use support::{Manager, free_port, http_get};

const USER: &str = "protection-manager";
const NS: &str = "crash";
const N: usize = 500;
/// Pods 0..FREED are removed (their PVCs become unused); the rest stay.
const FREED: usize = 350;
const FINALIZER: &str = "protection-manager.io/pvc-protection";
const DEADLINE: Duration = Duration::from_secs(120);

fn start_manager(sim: &KubeSim, admin: u16) -> Manager {
    let kubeconfig = sim.kubeconfig_for(USER).expect("kubeconfig");
    let args = [
        "run".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect=false".into(),
        "--controllers=pv-protection,pvc-protection".into(),
        "--kube-api-qps=0".into(),
        "--ping-interval=1s".into(),
    ];
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Manager::start(&refs)
}

async fn wait_for(what: &str, m: &Manager, f: impl AsyncFnMut() -> bool) {
    m.wait_for(DEADLINE, Duration::from_millis(200), what, f)
        .await;
}

async fn metric(admin: u16, series: &str) -> Option<f64> {
    let series = series.to_string();
    tokio::task::spawn_blocking(move || {
        let (_, body) = http_get(&format!("http://127.0.0.1:{admin}/metrics"))?;
        body.lines().find_map(|l| {
            l.strip_prefix(series.as_str())
                .and_then(|r| r.trim().parse().ok())
        })
    })
    .await
    .ok()
    .flatten()
}

async fn pvcs(client: &Client) -> Vec<PersistentVolumeClaim> {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("list PVCs")
        .items
}

fn index(name: &str) -> usize {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_500_pvcs_are_deleted_loses_no_protection() {
    eprintln!(
        "VERIFIES: after a SIGKILL during the deletion of {N} PVCs (pods of {FREED} removed), a \
         restarted manager removes every unused PVC and keeps every in-use PVC's finalizer, and \
         no removal was ever sent for an in-use PVC"
    );
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let client = sim.client().await;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    let pvc_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    stream::iter(0..N)
        .map(|i| {
            let (pvc_api, pod_api) = (pvc_api.clone(), pod_api.clone());
            async move {
                let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
                    "metadata": {"name": format!("data-{i}")},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
                }))?;
                pvc_api.create(&PostParams::default(), &pvc).await?;
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("web-{i}")},
                    "spec": {"nodeName": format!("node-{}", i % 7),
                             "containers": [{"name": "app", "image": "busybox"}],
                             "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{i}")}}]}
                }))?;
                pod_api.create(&PostParams::default(), &pod).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("create PVCs and pods");

    let admin = free_port();
    let m = start_manager(&sim, admin);
    wait_for("every PVC has the finalizer", &m, async || {
        pvcs(&client)
            .await
            .iter()
            .filter(|p| p.finalizers().iter().any(|f| f == FINALIZER))
            .count()
            == N
    })
    .await;

    // Delete every PVC (all held: every one is in use), then remove pods;
    // the manager is killed part-way through the pod removals.
    let since = sim.requests().last_seq();
    stream::iter(0..N)
        .map(|i| {
            let api = pvc_api.clone();
            async move {
                api.delete(&format!("data-{i}"), &DeleteParams::default())
                    .await
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("delete PVCs");
    let mut m = Some(m);
    for i in 0..FREED {
        if i == FREED / 3 {
            // SIGKILL (Child::kill) while deletions and pod removals are in flight.
            drop(m.take());
            eprintln!("manager killed after {i} pod removals");
        }
        pod_api
            .delete(&format!("web-{i}"), &DeleteParams::default())
            .await
            .expect("delete pod");
    }

    let m = start_manager(&sim, admin);
    wait_for("every unused PVC is gone", &m, async || {
        pvcs(&client)
            .await
            .iter()
            .all(|p| index(&p.name_any()) >= FREED)
    })
    .await;
    // The restarted manager has seen every PVC and holds the in-use ones.
    wait_for(
        "the manager counts the in-use PVCs as Terminating",
        &m,
        async || {
            metric(
                admin,
                "protection_manager_terminating_objects{controller=\"pvc-protection\"}",
            )
            .await
                == Some((N - FREED) as f64)
        },
    )
    .await;
    let left = pvcs(&client).await;
    assert_eq!(left.len(), N - FREED, "exactly the in-use PVCs remain");
    for p in &left {
        assert!(
            p.metadata.deletion_timestamp.is_some(),
            "{} is Terminating",
            p.name_any()
        );
        assert!(
            p.finalizers().iter().any(|f| f == FINALIZER),
            "in-use {} kept its finalizer",
            p.name_any()
        );
    }
    // No removal was ever sent for an in-use PVC, by either incarnation.
    let patches = sim.requests().records(
        &RequestFilter::default()
            .user(USER)
            .verb("patch")
            .resource("persistentvolumeclaims")
            .since(since),
    );
    let bad: Vec<_> = patches
        .iter()
        .filter(|r| index(&r.name) >= FREED)
        .map(|r| r.name.clone())
        .collect();
    assert!(bad.is_empty(), "removals sent for in-use PVCs: {bad:?}");
    eprintln!(
        "{} removal PATCHes for {FREED} unused PVCs across the crash",
        patches.len()
    );
    drop(m);
    sim.shutdown().await;
}

//! Issue 27, bug 6: with `--request-timeout=0`, a 429 carrying a huge
//! `Retry-After` made the watches sleep for days while `/readyz` passed.
//! Every server-given wait is now capped (the request timeout, at most a
//! minute), and `/readyz` fails once a controller's watches have been down
//! longer than a bound.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};
use kube_sim::{FaultAction, FaultRule, KubeSim, SimConfig};
use support::{Manager, free_port, http_get};

const FIN: &str = "protection-manager.io/pvc-protection";

fn start(sim: &KubeSim, admin: u16, request_timeout: &str) -> Manager {
    let kubeconfig = sim.kubeconfig_path();
    Manager::start(&[
        "run",
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect=false",
        "--controllers=pvc-protection",
        &format!("--request-timeout={request_timeout}"),
        "--ping-interval=1s",
    ])
}

async fn readyz(admin: u16) -> Option<(u16, String)> {
    tokio::task::spawn_blocking(move || {
        http_get(&format!("http://127.0.0.1:{admin}/readyz?verbose"))
    })
    .await
    .ok()
    .flatten()
}

async fn has_finalizer(pvcs: &Api<PersistentVolumeClaim>, name: &str) -> bool {
    pvcs.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|p| p.metadata.finalizers)
        .is_some_and(|f| f.iter().any(|f| f == FIN))
}

fn throttle_pvc_watches(retry_after_seconds: u64) -> FaultRule {
    FaultRule::new(FaultAction::Error {
        code: 429,
        retry_after_seconds: Some(retry_after_seconds),
        message: Some("too many requests".into()),
    })
    .resource("persistentvolumeclaims")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_of_days_is_waited_at_most_a_minute() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await;
    let admin = free_port();
    let m = start(&sim, admin, "0");
    m.wait_for(
        Duration::from_secs(60),
        Duration::from_millis(200),
        "the manager is ready",
        async || readyz(admin).await.is_some_and(|(c, _)| c == 200),
    )
    .await;
    // The claims' watches, cut, are answered 429 with Retry-After: 12 days
    // (every one of them, until the claim below exists).
    let id = sim
        .faults()
        .add(throttle_pvc_watches(1_000_000).verb("watch"));
    sim.faults().cut_watches();
    let throttled = kube_sim::RequestFilter::default()
        .verb("watch")
        .resource("persistentvolumeclaims");
    m.wait_for(
        Duration::from_secs(30),
        Duration::from_millis(100),
        "a claims' watch is throttled",
        async || {
            sim.requests()
                .records(&throttled)
                .iter()
                .any(|r| r.code == 429)
        },
    )
    .await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    pvcs.create(
        &PostParams::default(),
        &test_support::objects::pvc("default", "late", &[]),
    )
    .await
    .expect("pvc");
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.faults().remove(id);
    m.wait_for(
        Duration::from_secs(150),
        Duration::from_millis(500),
        "the claim created after the throttled watch gets its finalizer (within the one-minute cap)",
        async || has_finalizer(&pvcs, "late").await,
    )
    .await;
    println!("verified: a Retry-After of 1,000,000 s was waited at most a minute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_while_a_controllers_watches_are_down() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("sim");
    let admin = free_port();
    // A 5 s request timeout: waits capped at 5 s, watches may be down 30 s.
    let m = start(&sim, admin, "5s");
    m.wait_for(
        Duration::from_secs(60),
        Duration::from_millis(200),
        "the manager is ready",
        async || readyz(admin).await.is_some_and(|(c, _)| c == 200),
    )
    .await;
    let id = sim.faults().add(throttle_pvc_watches(1));
    sim.faults().cut_watches();
    m.wait_for(
        Duration::from_secs(120),
        Duration::from_millis(500),
        "/readyz fails naming the claims' watches",
        async || {
            readyz(admin).await.is_some_and(|(c, body)| {
                c != 200
                    && body.contains("[-]watches failed: watches down for more than 30s: /api/v1/persistentvolumeclaims")
            })
        },
    )
    .await;
    println!("verified: /readyz fails while the claims' watches are refused");
    sim.faults().remove(id);
    m.wait_for(
        Duration::from_secs(120),
        Duration::from_millis(500),
        "/readyz passes again once the watches are back",
        async || readyz(admin).await.is_some_and(|(c, _)| c == 200),
    )
    .await;
    println!("verified: /readyz passes again once they are back");
}

//! The host against kube-sim: readiness, leader election on a Lease (and its
//! release on SIGTERM), failover after SIGKILL, and the release guard.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kube_sim::{KubeSim, SimConfig};
use support::{Manager, free_port, http_get};
use test_support::until as wait_for;

const SA_USER: &str = "system:serviceaccount:default:protection-manager";

async fn sim() -> KubeSim {
    KubeSim::start(SimConfig::default())
        .await
        .expect("start kube-sim")
}

fn manager_args(sim: &KubeSim, admin: u16, extra: &[&str]) -> Vec<String> {
    let kubeconfig = sim.kubeconfig_for(SA_USER).expect("kubeconfig");
    let mut v = vec![
        "run".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect-resource-namespace=default".into(),
        "--ping-interval=1s".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn start(args: &[String]) -> Manager {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Manager::start(&refs)
}

async fn ready(admin: u16) -> bool {
    tokio::task::spawn_blocking(move || http_get(&format!("http://127.0.0.1:{admin}/readyz")))
        .await
        .ok()
        .flatten()
        .is_some_and(|(code, _)| code == 200)
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("protection-manager")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn becomes_ready_leads_records_its_release_and_releases_the_lease_on_sigterm() {
    let sim = sim().await;
    let client = sim.client().await;
    let admin = free_port();
    let mut m = start(&manager_args(&sim, admin, &["--leader-elect=true"]));
    wait_for(
        Duration::from_secs(60),
        "the manager is ready",
        async || ready(admin).await,
    )
    .await;

    // Ready does not mean leading: a replica waiting for the Lease is ready
    // too (a standby), so the lease and the record are waited for.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    wait_for(
        Duration::from_secs(60),
        "the lease has a holder",
        async || holder(&leases).await.is_some(),
    )
    .await;
    let h = holder(&leases).await.expect("the lease has a holder");
    println!("verified: /readyz passes and the lease is held by {h}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    wait_for(
        Duration::from_secs(60),
        "the leader recorded its release",
        async || {
            cms.get_opt("protection-manager-release")
                .await
                .ok()
                .flatten()
                .is_some()
        },
    )
    .await;
    let rec = cms
        .get("protection-manager-release")
        .await
        .expect("release record");
    assert_eq!(
        rec.data
            .unwrap_or_default()
            .get("release")
            .map(String::as_str),
        Some("0.5")
    );
    println!("verified: the release record says 0.5");

    let metrics =
        tokio::task::spawn_blocking(move || http_get(&format!("http://127.0.0.1:{admin}/metrics")))
            .await
            .unwrap()
            .expect("metrics");
    assert!(
        metrics.1.contains("protection_manager_leader 1"),
        "{}",
        metrics.1
    );

    let status = tokio::task::spawn_blocking(move || {
        let st = m.terminate(Duration::from_secs(60));
        (st, m.stderr())
    })
    .await
    .unwrap();
    assert_eq!(
        status.0.code(),
        Some(0),
        "exit code after SIGTERM; stderr:\n{}",
        status.1
    );
    assert_eq!(
        holder(&leases).await,
        None,
        "the lease is released on SIGTERM"
    );
    println!("verified: SIGTERM exits 0 and releases the lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_is_ready_and_takes_over_after_the_leader_is_killed() {
    let sim = sim().await;
    let client = sim.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let timings = [
        "--leader-elect=true",
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ];
    let (a1, a2) = (free_port(), free_port());
    let first = start(&manager_args(&sim, a1, &timings));
    wait_for(
        Duration::from_secs(60),
        "the first replica leads",
        async || holder(&leases).await.is_some(),
    )
    .await;
    let leader = holder(&leases).await.unwrap_or_default();
    let mut second = start(&manager_args(&sim, a2, &timings));
    wait_for(
        Duration::from_secs(60),
        "both replicas are ready",
        async || ready(a1).await && ready(a2).await,
    )
    .await;
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(leader.as_str()),
        "the standby must not steal the lease"
    );

    // SIGKILL: no release; the standby must wait for expiry, then lead.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &first.pid().to_string()])
        .status();
    let killed = Instant::now();
    wait_for(
        Duration::from_secs(60),
        "the standby takes over",
        async || holder(&leases).await.is_some_and(|h| h != leader),
    )
    .await;
    println!(
        "verified: leadership moved {:.1}s after SIGKILL of the leader (lease duration 4s)",
        killed.elapsed().as_secs_f64()
    );
    let st = tokio::task::spawn_blocking(move || second.terminate(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(st.code(), Some(0));
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_two_releases_away_is_refused_unless_overridden() {
    let sim = sim().await;
    let client = sim.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("protection-manager-release".into());
    cm.data = Some([("release".to_string(), "0.2".to_string())].into());
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("seed record");

    let admin = free_port();
    let args = manager_args(
        &sim,
        admin,
        &["--leader-elect=false", "--emulated-version=0.0"],
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(support::BIN)
            .args(&args)
            .output()
            .expect("run")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a skip by two must be refused");
    assert!(
        stderr.contains("refusing to run as release 0.0: this cluster last ran protection-manager as release 0.2"),
        "{stderr}"
    );
    assert!(stderr.contains("--skip-release-check"), "{stderr}");
    println!(
        "verified: 0.2 -> 0.0 is refused with: {}",
        stderr.lines().last().unwrap_or_default()
    );

    // The one-shot command the chart's hooks run says the same.
    let kubeconfig = sim.kubeconfig_for(SA_USER).expect("kubeconfig");
    let check = |v: &str| {
        let out = std::process::Command::new(support::BIN)
            .args([
                "release-check",
                "-n",
                "default",
                &format!("--emulated-version={v}"),
            ])
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .output()
            .expect("run release-check");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, text) = tokio::task::block_in_place(|| check("0.0"));
    assert!(
        !ok && text.contains("refusing to run as release 0.0"),
        "{text}"
    );
    let (ok, text) = tokio::task::block_in_place(|| check("0.1"));
    assert!(
        ok && text.contains("release check passed: this cluster last ran release 0.2"),
        "{text}"
    );
    println!("verified: release-check refuses 0.0 and passes 0.1 after 0.2");

    // The override starts, and records the new release.
    let admin = free_port();
    let mut m = start(&manager_args(
        &sim,
        admin,
        &[
            "--leader-elect=false",
            "--emulated-version=0.0",
            "--skip-release-check",
        ],
    ));
    wait_for(
        Duration::from_secs(60),
        "the overridden manager is ready",
        async || ready(admin).await,
    )
    .await;
    // Readiness does not wait for the leader's write of the record.
    wait_for(
        Duration::from_secs(60),
        "the overridden manager records 0.0",
        async || {
            cms.get("protection-manager-release")
                .await
                .ok()
                .and_then(|rec| rec.data)
                .and_then(|d| d.get("release").cloned())
                .as_deref()
                == Some("0.0")
        },
    )
    .await;
    let st = tokio::task::spawn_blocking(move || m.terminate(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(st.code(), Some(0));
    println!("verified: --skip-release-check overrides the guard and records 0.0");
}

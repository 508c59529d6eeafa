//! A real API server defaults a status ingress `{ip}` to `{ip, ipMode:
//! VIP}` (SetDefaults_Service, LoadBalancerIPMode), and kube-sim does the
//! same (both are asked: `NAME::kube_sim`, `NAME::real`). The controller
//! must not take a defaulted `ipMode` for a difference and rewrite the
//! status on every sync.

mod common;

use std::time::Duration;

use cloud_sim::Operation;
use common::*;
use serde_json::json;
use test_bed::{Bed, Request};

test_bed::on_both_beds!(
    no_status_rewrite_when_the_provider_reports_ip_mode,
    no_status_rewrite_when_the_server_defaults_ip_mode,
);

fn puts(env: &Env) -> u64 {
    env.cloud
        .stats()
        .operations
        .get(&Operation::Put)
        .map_or(0, |o| o.total)
}

/// Provisions one Service with a provider that reports `ip_mode`, checks
/// the stored status, then drives four syncs (annotation changes, each
/// synced with the provider: a PUT) and answers the controller's Service
/// writes during them. A sync that took the stored status for stale would
/// write it again.
async fn writes_after_provisioning(bed: Bed, ip_mode: Option<&str>) -> Vec<Request> {
    let mut env = Env::with_cloud_on(
        bed,
        cloud_sim::Config::default().with_ingress_ip_mode(ip_mode),
    )
    .await;
    env.add_nodes(&["node-a"]).await;
    env.start(Ctl {
        resync: Duration::from_secs(1),
        ..Ctl::default()
    })
    .await;
    let since = env.mark();
    env.create(&lb_service("web", Some(CLASS))).await;
    let svc = env
        .wait_service("web", "has its finalizer and ingress", |s| {
            s.is_some_and(|s| {
                finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty()
            })
        })
        .await
        .unwrap_or_else(|| panic!("the Service is gone"));
    let lbs = env.cloud.inventory();
    assert_eq!(lbs.len(), 1);
    assert_eq!(lbs[0].status.ingress[0].ip_mode.as_deref(), ip_mode);
    // Whatever the provider reported, the server stores `ipMode: VIP`.
    let ingress = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0].ip_mode.as_deref(), Some("VIP"));
    // Provisioning: add the finalizer, write the ingress.
    let provisioning = env.service_writes(since);
    assert_eq!(provisioning.len(), 2, "{provisioning:#?}");

    let steady = env.mark();
    for i in 0..4 {
        let p0 = puts(&env);
        env.merge(
            "web",
            json!({"metadata": {"annotations": {"sync": i.to_string()}}}),
        )
        .await;
        wait_for("the change was synced with the provider", || {
            let p = puts(&env);
            async move { p > p0 }
        })
        .await;
    }
    // The syncs of one Service are serialized: once a PUT was made, every
    // earlier sync had finished, its writes included.
    let writes = env.service_writes(steady);
    env.stop().await;
    writes
}

/// A provider that reports `ipMode: VIP` (cloud-sim's default): the stored
/// status equals the written one; syncs write nothing.
async fn no_status_rewrite_when_the_provider_reports_ip_mode(bed: Bed) {
    let writes = writes_after_provisioning(bed, Some("VIP")).await;
    assert!(
        writes.is_empty(),
        "status rewritten after provisioning: {writes:#?}"
    );
}

/// A provider that reports no `ipMode`: the controller writes `{ip}`, the
/// server stores `{ip, ipMode: VIP}`.
async fn no_status_rewrite_when_the_server_defaults_ip_mode(bed: Bed) {
    let writes = writes_after_provisioning(bed, None).await;
    assert!(
        writes.is_empty(),
        "status rewritten after provisioning: {writes:#?}"
    );
}

//! service-cidr-protection against kube-sim, which serves ServiceCIDR and
//! IPAddress and allocates Service ClusterIPs from the ranges as the real
//! API server does: a range gets the finalizer and `Ready=True`; deleted
//! while it is the only range of a Service's address it is held with
//! `Ready=False`/`Terminating` and an event naming the address; released
//! once the Service goes (and not before the 10 s grace), or at once
//! (after the grace) when another range contains it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Service};
use k8s_openapi::api::networking::v1::ServiceCIDR;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use kube_sim::{KubeSim, SimConfig};
use protection_core::featuregate::FeatureGates;
use protection_core::{FinalizerProfile, Metrics, Version};
use serde_json::json;
use service_cidr_protection::controller::{
    DELETION_GRACE, NAME, READY_MESSAGE, REASON_TERMINATING, TERMINATING_MESSAGE,
};
use service_cidr_protection::{GATES, INFO, Settings};
use test_support::{eventually, until};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

struct Env {
    _sim: KubeSim,
    client: Client,
    finalizer: String,
    shutdown: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// kube-sim and the controller as release 0.5 with its gate on.
async fn start() -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let client = sim.client().await;
    let registry = protection_core::release::registry(GATES).expect("registry");
    let mut gates = FeatureGates::new(registry, Version::new(0, 5));
    gates
        .set_from_flag("MultiCIDRServiceAllocator=true")
        .expect("gate");
    let metrics: Arc<Metrics> = Metrics::new().expect("metrics");
    let t = test_support::controller_context(NAME, client.clone(), gates, &metrics, 4);
    let finalizer = INFO.finalizer.get(FinalizerProfile::Project).to_string();
    let settings = Settings {
        finalizer: finalizer.clone(),
        resync_period: Duration::ZERO,
    };
    let shutdown = t.shutdown.clone();
    tokio::spawn(service_cidr_protection::controller::run(t.ctx, settings));
    Env {
        _sim: sim,
        client,
        finalizer,
        shutdown,
    }
}

fn cidrs(c: &Client) -> Api<ServiceCIDR> {
    Api::all(c.clone())
}

async fn create_cidr(c: &Client, name: &str, cidr: &str) {
    let s: ServiceCIDR =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"cidrs": [cidr]}}))
            .expect("servicecidr");
    cidrs(c)
        .create(&PostParams::default(), &s)
        .await
        .expect("create servicecidr");
}

async fn create_service(c: &Client, name: &str, ip: &str) {
    let s: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"clusterIP": ip, "ports": [{"port": 80}]},
    }))
    .expect("service");
    Api::<Service>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &s)
        .await
        .expect("create service");
}

/// (finalizers, Ready status, reason, message) of `name`, if it exists.
async fn state(c: &Client, name: &str) -> Option<(Vec<String>, String, String, String)> {
    let s = cidrs(c).get_opt(name).await.expect("get servicecidr")?;
    let ready = s
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    let (status, reason, message) =
        ready.map_or_else(Default::default, |r| (r.status, r.reason, r.message));
    Some((
        s.metadata.finalizers.unwrap_or_default(),
        status,
        reason,
        message,
    ))
}

async fn ready(env: &Env, name: &str) {
    until(WAIT, "the finalizer and Ready=True", async || {
        state(&env.client, name)
            .await
            .is_some_and(|(f, status, _, message)| {
                f.contains(&env.finalizer) && status == "True" && message == READY_MESSAGE
            })
    })
    .await;
}

async fn held_events(c: &Client, name: &str) -> Vec<String> {
    Api::<Event>::all(c.clone())
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref() == Some("FinalizerHeld")
        })
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_is_held_while_it_is_the_only_range_of_a_services_address() {
    let env = start().await;
    let c = &env.client;
    // The default range gets the finalizer too, as upstream's.
    create_cidr(c, "extra", "10.200.0.0/24").await;
    ready(&env, "extra").await;
    ready(&env, "kubernetes").await;
    create_service(c, "web", "10.200.0.10").await;
    cidrs(c)
        .delete("extra", &DeleteParams::default())
        .await
        .expect("delete");
    let deleted_at = cidrs(c)
        .get("extra")
        .await
        .expect("get")
        .metadata
        .deletion_timestamp
        .expect("being deleted")
        .0;
    let (f, _, reason, message) = eventually(WAIT, "Ready=False, Terminating", async || {
        state(c, "extra")
            .await
            .filter(|(_, status, _, _)| status == "False")
    })
    .await;
    assert!(f.contains(&env.finalizer), "{f:?}");
    assert_eq!(
        (reason.as_str(), message.as_str()),
        (REASON_TERMINATING, TERMINATING_MESSAGE)
    );
    let notes = eventually(WAIT, "a FinalizerHeld event", async || {
        Some(held_events(c, "extra").await).filter(|e| !e.is_empty())
    })
    .await;
    assert!(notes[0].contains("10.200.0.10"), "{notes:?}");
    // The Service goes, its address with it: the range is released, not
    // before the grace.
    Api::<Service>::namespaced(c.clone(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete service");
    until(WAIT, "the range is gone", async || {
        state(c, "extra").await.is_none()
    })
    .await;
    // Upstream's grace: never released before deletionTimestamp + 10 s.
    let waited = Timestamp::now().duration_since(deleted_at);
    assert!(
        waited >= k8s_openapi::jiff::SignedDuration::try_from(DELETION_GRACE).expect("grace"),
        "released {waited:?} after the deletionTimestamp"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_another_range_contains_goes_after_the_grace_whatever_its_addresses() {
    let env = start().await;
    let c = &env.client;
    create_cidr(c, "parent", "10.200.0.0/16").await;
    create_cidr(c, "child", "10.200.1.0/24").await;
    ready(&env, "child").await;
    create_service(c, "web", "10.200.1.10").await;
    cidrs(c)
        .delete("child", &DeleteParams::default())
        .await
        .expect("delete");
    until(WAIT, "the contained range is gone", async || {
        state(c, "child").await.is_none()
    })
    .await;
    assert!(held_events(c, "child").await.is_empty());
    // The parent, now the address's only range, is held.
    cidrs(c)
        .delete("parent", &DeleteParams::default())
        .await
        .expect("delete parent");
    let (_, _, reason, _) = eventually(WAIT, "the parent held", async || {
        state(c, "parent")
            .await
            .filter(|(_, status, _, _)| status == "False")
    })
    .await;
    assert_eq!(reason, REASON_TERMINATING);
    assert!(
        cidrs(c)
            .get_opt("parent")
            .await
            .expect("get")
            .is_some_and(|p| p.name_any() == "parent")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_api_leaves_it_idle_and_ready() {
    let sim = KubeSim::start(SimConfig {
        disabled_group_versions: vec!["networking.k8s.io/v1".into()],
        ..SimConfig::default()
    })
    .await
    .expect("kube-sim");
    let registry = protection_core::release::registry(GATES).expect("registry");
    let gates = FeatureGates::new(registry, Version::new(0, 5));
    let metrics: Arc<Metrics> = Metrics::new().expect("metrics");
    let t = test_support::controller_context(NAME, sim.client().await, gates, &metrics, 4);
    let ready = t.ready.clone();
    let settings = Settings {
        finalizer: INFO.finalizer.get(FinalizerProfile::Project).to_string(),
        resync_period: Duration::ZERO,
    };
    let shutdown = t.shutdown.clone();
    let run = tokio::spawn(service_cidr_protection::controller::run(t.ctx, settings));
    until(WAIT, "ready while idle", async || ready.is_ready()).await;
    assert_eq!(
        ready.note().as_deref(),
        Some(service_cidr_protection::controller::NO_API_NOTE)
    );
    shutdown.cancel();
    run.await.expect("task").expect("Ok on shutdown");
}

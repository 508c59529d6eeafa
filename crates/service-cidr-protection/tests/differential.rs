//! service-cidr-protection against upstream (issue 25, "tested against
//! upstream"): the same ServiceCIDR and Service operations on two real
//! control planes (kube-apiserver 1.36.3, crate `control-plane`), one where
//! kube-controller-manager runs its own `service-cidr-controller`, one where
//! ours runs instead with the upstream finalizer profile, end in the same
//! ServiceCIDRs, finalizers and Ready conditions (status, reason, message)
//! at every settled step.
//!
//! What is not compared: the conditions' lastTransitionTime, the field
//! manager of the status (ours is our own), and events (upstream emits
//! none; ours says why a deletion is held).

use std::collections::BTreeMap;
use std::time::Duration;

use control_plane::{Config, ControlPlane};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use protection_core::featuregate::FeatureGates;
use protection_core::{FinalizerProfile, Metrics, Version};
use serde_json::json;
use service_cidr_protection::controller::NAME;
use service_cidr_protection::{GATES, INFO, Settings};
use test_support::until;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

/// ServiceCIDR name → (finalizers, Ready status, reason, message).
type Snapshot = BTreeMap<String, (Vec<String>, String, String, String)>;

struct Side {
    what: &'static str,
    client: Client,
    _cp: ControlPlane,
    _stop: Option<CancellationToken>,
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(s) = &self._stop {
            s.cancel();
        }
    }
}

/// KCM's own controller.
async fn upstream() -> Side {
    let cp = ControlPlane::start(
        Config::default()
            .with_kcm(["service-cidr-controller"])
            .named("scidr-kcm"),
    )
    .await
    .expect("control plane with KCM");
    let client = cp.client().await.expect("client");
    Side {
        what: "kcm",
        client,
        _cp: cp,
        _stop: None,
    }
}

/// Ours, as release 0.5 with its gate on and upstream's finalizer.
async fn ours() -> Side {
    let cp = ControlPlane::start(Config::default().named("scidr-ours"))
        .await
        .expect("control plane");
    let client = cp.client().await.expect("client");
    let registry = protection_core::release::registry(GATES).expect("registry");
    let mut gates = FeatureGates::new(registry, Version::new(0, 5));
    gates
        .set_from_flag("MultiCIDRServiceAllocator=true")
        .expect("gate");
    let metrics = Metrics::new().expect("metrics");
    let t = test_support::controller_context(NAME, client.clone(), gates, &metrics, 4);
    let settings = Settings {
        finalizer: INFO.finalizer.get(FinalizerProfile::Upstream).to_string(),
        resync_period: Duration::ZERO,
    };
    let stop = t.shutdown.clone();
    tokio::spawn(service_cidr_protection::controller::run(t.ctx, settings));
    Side {
        what: "ours",
        client,
        _cp: cp,
        _stop: Some(stop),
    }
}

impl Side {
    fn cidrs(&self) -> Api<ServiceCIDR> {
        Api::all(self.client.clone())
    }

    async fn snapshot(&self) -> Snapshot {
        let list = self
            .cidrs()
            .list(&ListParams::default())
            .await
            .expect("list servicecidrs");
        list.items
            .into_iter()
            .map(|s| {
                let ready = s
                    .status
                    .clone()
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "Ready");
                let (st, reason, message) =
                    ready.map_or_else(Default::default, |r| (r.status, r.reason, r.message));
                let mut f = s.metadata.finalizers.clone().unwrap_or_default();
                f.sort();
                (s.name_any(), (f, st, reason, message))
            })
            .collect()
    }

    /// Waits until `settled` holds for this side's snapshot, and returns it.
    async fn settle(&self, what: &str, settled: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let mut last = Snapshot::new();
        let done = tokio::time::timeout(WAIT, async {
            loop {
                last = self.snapshot().await;
                if settled(&last) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        assert!(
            done.is_ok(),
            "{}: {what} never settled; last {last:#?}",
            self.what
        );
        last
    }

    async fn create_cidr(&self, name: &str, cidr: &str) {
        let s: ServiceCIDR =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"cidrs": [cidr]}}))
                .expect("servicecidr");
        self.cidrs()
            .create(&PostParams::default(), &s)
            .await
            .expect("create servicecidr");
    }

    /// A Service with `ip`, once the API server's allocator serves the
    /// range (it learns new ranges from its informer).
    async fn create_service(&self, name: &str, ip: &str) {
        let s: Service = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]},
        }))
        .expect("service");
        let api = Api::<Service>::namespaced(self.client.clone(), "default");
        until(WAIT, "the Service gets its address", async || {
            api.create(&PostParams::default(), &s).await.is_ok()
        })
        .await;
    }

    async fn delete_cidr(&self, name: &str) {
        self.cidrs()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete servicecidr");
    }

    async fn delete_service(&self, name: &str) {
        Api::<Service>::namespaced(self.client.clone(), "default")
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete service");
    }
}

fn ready(s: &Snapshot, name: &str) -> bool {
    s.get(name)
        .is_some_and(|(f, st, _, _)| !f.is_empty() && st == "True")
}

fn held(s: &Snapshot, name: &str) -> bool {
    s.get(name).is_some_and(|(_, st, _, _)| st == "False")
}

/// Runs one step on both sides and compares what they settle to.
async fn both(
    sides: &[Side; 2],
    what: &str,
    settled: impl Fn(&Snapshot) -> bool + Copy,
) -> Snapshot {
    let (a, b) = tokio::join!(
        sides[0].settle(what, settled),
        sides[1].settle(what, settled)
    );
    assert_eq!(
        a, b,
        "{what}: {} and {} differ",
        sides[0].what, sides[1].what
    );
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcm_and_ours_end_in_the_same_servicecidrs_finalizers_and_conditions() {
    let (kcm, ours) = tokio::join!(upstream(), ours());
    let sides = [kcm, ours];
    for s in &sides {
        s.create_cidr("extra", "10.200.0.0/24").await;
        s.create_cidr("parent", "10.201.0.0/16").await;
        s.create_cidr("child", "10.201.1.0/24").await;
    }
    let snap = both(&sides, "created", |s| {
        ["kubernetes", "extra", "parent", "child"]
            .iter()
            .all(|n| ready(s, n))
    })
    .await;
    assert_eq!(
        snap["extra"].0,
        ["networking.k8s.io/service-cidr-finalizer"]
    );
    for s in &sides {
        s.create_service("in-extra", "10.200.0.10").await;
        s.create_service("in-child", "10.201.1.10").await;
        s.delete_cidr("extra").await;
        s.delete_cidr("child").await;
    }
    // extra is the only range of its Service's address: held; child is
    // contained in parent: gone.
    let snap = both(&sides, "deleted", |s| {
        held(s, "extra") && !s.contains_key("child")
    })
    .await;
    assert_eq!(snap["extra"].2, "Terminating");
    for s in &sides {
        s.delete_cidr("parent").await;
    }
    // parent is now the only range of in-child's address.
    both(&sides, "parent deleted", |s| held(s, "parent")).await;
    for s in &sides {
        s.delete_service("in-extra").await;
        s.delete_service("in-child").await;
    }
    let snap = both(&sides, "services gone", |s| {
        !s.contains_key("extra") && !s.contains_key("parent")
    })
    .await;
    assert_eq!(snap.keys().collect::<Vec<_>>(), ["kubernetes"]);
}

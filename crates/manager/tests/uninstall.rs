//! `protection-manager strip-finalizers --all` with no manager running (the
//! path after `helm uninstall --no-hooks`, or the hook once the manager is
//! gone), on kube-sim and on the real kube-apiserver v1.36.3: every
//! `protection-manager.io/*` finalizer goes from the objects not being
//! deleted and from the deleted ones nothing uses; a claim being deleted
//! while a pod uses it keeps its finalizer, and the command fails naming it
//! and the pod. Run again once the pod is gone, it releases the claim.
//! (The chart's hook with a running manager: e2e `uninstall_leaves_nothing_stuck`.)

mod support;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_protection-manager");
const PVC_F: &str = "protection-manager.io/pvc-protection";
const LB_F: &str = "protection-manager.io/load-balancer-cleanup";

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug,
{
    let o: K = serde_json::from_value(v).unwrap_or_else(|e| panic!("literal: {e}"));
    api.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("creating: {e}"))
}

fn strip_all(kubeconfig: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(BIN)
        .args([
            "strip-finalizers",
            "--all",
            "--namespace",
            "protection-manager",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("running {BIN}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn finalizers<K: Resource>(o: &K) -> Vec<String> {
    o.meta().finalizers.clone().unwrap_or_default()
}

async fn scenario(server: &str, client: Client, kubeconfig: &std::path::Path) {
    let ns = "shop";
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": ns}}),
    )
    .await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claim = |name: &str| {
        json!({"metadata": {"name": name, "finalizers": [PVC_F]}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    };
    for c in ["held", "free", "going"] {
        create(&pvcs, claim(c)).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for (pod, c) in [("db", "held"), ("busy", "going")] {
        create(
            &pods,
            json!({"metadata": {"name": pod}, "spec": {
                "nodeName": "node-1",
                "automountServiceAccountToken": false,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": c}}]}}),
        )
        .await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    create(
        &services,
        json!({"metadata": {"name": "web", "finalizers": [LB_F]}, "spec": {
            "type": "LoadBalancer", "loadBalancerClass": "protection-manager.io/load-balancer",
            "ports": [{"port": 80, "protocol": "TCP"}]}}),
    )
    .await;
    pvcs.delete("going", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{server}: deleting going: {e}"));

    let (ok, out) = strip_all(kubeconfig);
    assert!(!ok, "{server}: a claim in use is left, so it fails:\n{out}");
    assert!(
        out.contains("persistentvolumeclaims/shop/going (being deleted): held by pvc-protection: the claim is in use by pod shop/busy"),
        "{server}: names the claim and its pod:\n{out}"
    );
    assert!(
        out.contains("No manager runs to release them"),
        "{server}:\n{out}"
    );
    for c in ["held", "free"] {
        let p = pvcs.get(c).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !finalizers(&p).contains(&PVC_F.to_string()) && p.meta().deletion_timestamp.is_none(),
            "{server}: {c} is cleared and kept: {:?}",
            p.meta()
        );
    }
    let going = pvcs.get("going").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(finalizers(&going), [PVC_F], "{server}: going stays held");
    let web = services.get("web").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        finalizers(&web).is_empty(),
        "{server}: {:?}",
        finalizers(&web)
    );

    // The pod goes: the claim is released by the next run.
    pods.delete("busy", &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|e| panic!("{server}: deleting busy: {e}"));
    test_support::eventually(
        std::time::Duration::from_secs(30),
        &format!("{server}: pod busy is gone"),
        async || {
            pods.get_opt("busy")
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let (ok, out) = strip_all(kubeconfig);
    assert!(ok, "{server}: nothing is left:\n{out}");
    assert!(
        out.contains("persistentvolumeclaims/shop/going: removed protection-manager.io/pvc-protection (being deleted, nothing uses it)"),
        "{server}:\n{out}"
    );
    assert!(
        pvcs.get_opt("going")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "{server}: going is deleted once released"
    );
    assert!(pvcs.get_opt("held").await.ok().flatten().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn strip_all_without_a_manager_clears_what_nothing_uses_and_names_what_it_left() {
    let sim = kube_sim::KubeSim::start(kube_sim::SimConfig::default())
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
    scenario("kube-sim", sim.client().await, sim.kubeconfig_path()).await;
    let cp = control_plane::ControlPlane::start(control_plane::Config::default())
        .await
        .unwrap_or_else(|e| panic!("starting the real control plane: {e}"));
    let client = cp
        .client()
        .await
        .unwrap_or_else(|e| panic!("admin client: {e}"));
    scenario("kube-apiserver", client, cp.kubeconfig_path()).await;
}

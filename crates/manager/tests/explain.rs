//! `protection-manager explain` against kube-sim with a running manager.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_sim::{KubeSim, SimConfig};
use support::{Manager, free_port};
use test_support::eventually;
use test_support::objects::{pod, pvc};

const SA_USER: &str = "system:serviceaccount:default:protection-manager";

fn explain(sim: &KubeSim, args: &[&str]) -> String {
    let out = std::process::Command::new(support::BIN)
        .arg("explain")
        .args(args)
        .arg(format!("--kubeconfig={}", sim.kubeconfig_path().display()))
        .output()
        .expect("run explain");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "explain {args:?} failed:\n{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explains_a_claim_held_by_a_pod_and_a_claim_that_is_free() {
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let client = sim.client().await;
    let kubeconfig = sim.kubeconfig_for(SA_USER).expect("kubeconfig");
    let admin = free_port();
    let _m = Manager::start(&[
        "run",
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect=true",
        "--leader-elect-resource-namespace=default",
        "--controllers=pvc-protection",
    ]);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pvcs.create(&PostParams::default(), &pvc("default", "data", &[]))
        .await
        .expect("create pvc");
    pods.create(
        &PostParams::default(),
        &pod("default", "web-0", "data", Some("node-1")),
    )
    .await
    .expect("create pod");
    eventually(
        Duration::from_secs(60),
        "the claim has its finalizer",
        async || {
            let p = pvcs.get("data").await.ok()?;
            p.metadata.finalizers.filter(|f| !f.is_empty()).map(|_| ())
        },
    )
    .await;

    // Not deleting yet: explain says what would hold it.
    let text = explain(&sim, &["pvc/data", "-n", "default"]);
    assert!(text.contains("State:       not being deleted"), "{text}");
    assert!(
        text.contains("If deleted:  pvc-protection would hold it while pod default/web-0"),
        "{text}"
    );
    assert!(
        text.contains("protection-manager.io/pvc-protection (protection-manager pvc-protection)"),
        "{text}"
    );
    assert!(text.contains("Manager:     leader "), "{text}");
    println!("verified: explain on a live claim:\n{text}");

    pvcs.delete("data", &DeleteParams::default())
        .await
        .expect("delete pvc");
    let text = explain(&sim, &["persistentvolumeclaim/data", "-n", "default"]);
    assert!(text.contains("Terminating for"), "{text}");
    assert!(
        text.contains(
            "held by pvc-protection: the claim is in use by pod default/web-0 (scheduled on node-1)"
        ),
        "{text}"
    );
    println!("verified: explain on a held claim:\n{text}");

    pods.delete("web-0", &DeleteParams::default())
        .await
        .expect("delete pod");
    eventually(Duration::from_secs(60), "the claim is gone", async || {
        pvcs.get_opt("data")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    let out = std::process::Command::new(support::BIN)
        .args(["explain", "pvc/data"])
        .arg(format!("--kubeconfig={}", sim.kubeconfig_path().display()))
        .output()
        .expect("run explain");
    assert!(
        !out.status.success(),
        "explain of a missing object must fail"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "PersistentVolumeClaim default/data does not exist (already deleted, or never created)."
    );
    let out = std::process::Command::new(support::BIN)
        .args(["explain", "deployment/x"])
        .arg(format!("--kubeconfig={}", sim.kubeconfig_path().display()))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown kind \"deployment\""));
    println!("verified: explain after release and on a bad kind");
}

/// `explain vac/NAME` and the manager's vac-protection end to end: the
/// binary at 0.4 with the Alpha gate on adds the finalizer, holds the
/// deletion while a claim refers to the class, and explain says by whom.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explains_a_class_held_by_a_claim() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let client = sim.client().await;
    let kubeconfig = sim.kubeconfig_for(SA_USER).expect("kubeconfig");
    let admin = free_port();
    let _m = Manager::start(&[
        "run",
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect=false",
        "--controllers=vac-protection",
        "--feature-gates=VolumeAttributesClass=true",
    ]);
    let gvk = GroupVersionKind::gvk("storage.k8s.io", "v1", "VolumeAttributesClass");
    let vacs: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
    );
    let gold: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
        "metadata": {"name": "gold"}, "driverName": "csi.example.com", "parameters": {"iops": "3000"}
    }))
    .unwrap();
    vacs.create(&PostParams::default(), &gold)
        .await
        .expect("create class");
    let mut claim = pvc("default", "data", &[]);
    claim
        .spec
        .get_or_insert_with(Default::default)
        .volume_attributes_class_name = Some("gold".into());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    pvcs.create(&PostParams::default(), &claim)
        .await
        .expect("create pvc");
    eventually(
        Duration::from_secs(60),
        "the class has its finalizer",
        async || {
            let v = vacs.get("gold").await.ok()?;
            v.metadata
                .finalizers
                .filter(|f| {
                    f.iter()
                        .any(|f| f == "protection-manager.io/vac-protection")
                })
                .map(|_| ())
        },
    )
    .await;
    let text = explain(&sim, &["vac/gold"]);
    assert!(
        text.contains("If deleted:  vac-protection would hold it while PersistentVolumeClaim default/data (spec.volumeAttributesClassName) refers to it."),
        "{text}"
    );
    vacs.delete("gold", &DeleteParams::default())
        .await
        .expect("delete class");
    eventually(Duration::from_secs(60), "the deletion is held", async || {
        let text = explain(&sim, &["vac/gold"]);
        text.contains("held by vac-protection: the class is in use by PersistentVolumeClaim default/data (spec.volumeAttributesClassName)")
            .then_some(())
    })
    .await;
    println!(
        "verified: explain on a held class:\n{}",
        explain(&sim, &["vac/gold"])
    );
    pvcs.delete("data", &DeleteParams::default())
        .await
        .expect("delete pvc");
    eventually(Duration::from_secs(60), "the class is gone", async || {
        vacs.get_opt("gold").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A ServiceCIDR through service-cidr-protection's explain hook (no
/// manager needed: explain reads live): the IPAddresses it is the only range
/// of, with their Services; what would hold it before it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explains_a_servicecidr_held_by_a_services_address() {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::networking::v1::ServiceCIDR;
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let client = sim.client().await;
    let cidrs: Api<ServiceCIDR> = Api::all(client.clone());
    let range: ServiceCIDR = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "extra", "finalizers": ["protection-manager.io/service-cidr-protection"]},
        "spec": {"cidrs": ["10.200.0.0/24"]},
    }))
    .expect("servicecidr");
    cidrs
        .create(&PostParams::default(), &range)
        .await
        .expect("create servicecidr");
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"clusterIP": "10.200.0.10", "ports": [{"port": 80}]},
    }))
    .expect("service");
    Api::<Service>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    let text = explain(&sim, &["servicecidr/extra"]);
    assert!(text.contains("ServiceCIDR extra"), "{text}");
    assert!(text.contains("CIDRs:       10.200.0.0/24"), "{text}");
    assert!(
        text.contains("If deleted:  service-cidr-protection would hold it: the range is the only one of IPAddress 10.200.0.10 (services default/web)"),
        "{text}"
    );
    cidrs
        .delete("extra", &DeleteParams::default())
        .await
        .expect("delete");
    let text = explain(&sim, &["servicecidrs/extra"]);
    assert!(text.contains("Terminating for"), "{text}");
    assert!(
        text.contains("Why:         held by service-cidr-protection: the range is the only one of IPAddress 10.200.0.10 (services default/web)"),
        "{text}"
    );
    assert!(
        text.contains("protection-manager.io/service-cidr-protection (protection-manager service-cidr-protection)"),
        "{text}"
    );
}

/// A Service through service-lb-cleanup's explain hook (no manager: explain
/// reads live): a LoadBalancer Service being deleted with the cleanup
/// finalizer waits for the controller, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explains_a_service_waiting_for_its_load_balancer_cleanup() {
    use k8s_openapi::api::core::v1::Service;
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let client = sim.client().await;
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "finalizers": ["protection-manager.io/load-balancer-cleanup"]},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    }))
    .expect("service");
    svcs.create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    let text = explain(&sim, &["svc/web"]);
    assert!(text.starts_with("Service default/web\n"), "{text}");
    assert!(
        text.contains("Type:        LoadBalancer (loadBalancerClass none)"),
        "{text}"
    );
    assert!(!text.contains("If deleted"), "{text}");
    svcs.delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    let text = explain(&sim, &["services/web"]);
    assert!(
        text.contains("Why:         held by service-lb-cleanup: waiting for the controller to delete the load balancer"),
        "{text}"
    );
    assert!(
        text.contains(
            "protection-manager.io/load-balancer-cleanup (protection-manager service-lb-cleanup)"
        ),
        "{text}"
    );
}

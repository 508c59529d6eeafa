//! helm 4.1 (server-side apply by default) and helm 3.18 (client-side
//! three-way merge) install, upgrade, rollback and uninstall a `helm create`
//! chart against kube-sim, with OpenAPI validation on.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::tool;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use kube::api::{Api, ListParams};
use kube_sim::{KubeSim, SimConfig};

async fn helm(bin: &Path, kubeconfig: &Path, cwd: &Path, args: &[&str]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(bin)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HELM_CACHE_HOME", cwd.join("cache"))
            .env("HELM_CONFIG_HOME", cwd.join("config"))
            .env("HELM_DATA_HOME", cwd.join("data"))
            .current_dir(cwd)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("helm {args:?} did not finish in 120s"))
    .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{} {args:?} failed:\nstdout: {stdout}\nstderr: {stderr}",
        bin.display()
    );
    stdout
}

fn workdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kube-sim-helm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
    d
}

async fn replicas(api: &Api<Deployment>) -> Option<i32> {
    api.get("demo").await.unwrap().spec.and_then(|s| s.replicas)
}

async fn lifecycle(bin: PathBuf, tag: &str, expect_apply: bool) {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let kc = sim.kubeconfig_path().to_path_buf();
    let dir = workdir(tag);
    helm(&bin, &kc, &dir, &["create", "demo"]).await;
    let client = sim.client().await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let release_secrets = ListParams::default().labels("owner=helm,name=demo");

    helm(&bin, &kc, &dir, &["install", "demo", "./demo"]).await;
    assert_eq!(replicas(&deps).await, Some(1));
    Api::<Service>::namespaced(client.clone(), "default")
        .get("demo")
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .get("demo")
        .await
        .unwrap();
    let d = deps.get("demo").await.unwrap();
    let ops: Vec<String> = d
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.operation)
        .collect();
    if expect_apply {
        assert!(
            ops.iter().any(|o| o == "Apply"),
            "helm 4 applies server-side: {ops:?}"
        );
    } else {
        assert!(ops.iter().all(|o| o == "Update"), "helm 3 updates: {ops:?}");
    }

    helm(
        &bin,
        &kc,
        &dir,
        &["upgrade", "demo", "./demo", "--set", "replicaCount=2"],
    )
    .await;
    assert_eq!(replicas(&deps).await, Some(2));
    helm(&bin, &kc, &dir, &["rollback", "demo", "1"]).await;
    assert_eq!(replicas(&deps).await, Some(1));
    let history = helm(&bin, &kc, &dir, &["history", "demo"]).await;
    assert_eq!(history.lines().count(), 4, "{history}");
    assert_eq!(secrets.list(&release_secrets).await.unwrap().items.len(), 3);

    helm(&bin, &kc, &dir, &["uninstall", "demo"]).await;
    assert!(deps.get_opt("demo").await.unwrap().is_none());
    assert!(
        Api::<Service>::namespaced(client.clone(), "default")
            .get_opt("demo")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        secrets
            .list(&release_secrets)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let _ = std::fs::remove_dir_all(&dir);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm4_install_upgrade_rollback_uninstall() {
    lifecycle(tool("HELM4", ".tools/bin/helm4"), "4", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm3_install_upgrade_rollback_uninstall() {
    lifecycle(tool("HELM3", ".tools/bin/helm3"), "3", false).await;
}

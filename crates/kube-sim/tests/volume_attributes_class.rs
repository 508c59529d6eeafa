//! storage.k8s.io VolumeAttributesClass on kube-sim: served as v1 and as
//! v1beta1 (one storage, two versions), in discovery, with the PVC and PV
//! fields that refer to it, through kubectl (apply, get, delete) and with a
//! group version switched off (`SimConfig::disabled_group_versions`, as
//! kube-apiserver's `--runtime-config`).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{conform, tool};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube_sim::{KubeSim, SimConfig};
use serde_json::json;

fn vacs(client: &Client, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("storage.k8s.io", version, "VolumeAttributesClass");
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
    )
}

fn vac(name: &str, version: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("storage.k8s.io/{version}"),
        "kind": "VolumeAttributesClass",
        "metadata": {"name": name},
        "driverName": "csi.example.com",
        "parameters": {"iops": "3000"}
    }))
    .unwrap()
}

async fn served(client: &Client, gv: &str) -> bool {
    client.list_api_group_resources(gv).await.is_ok_and(|l| {
        l.resources
            .iter()
            .any(|r| r.name == "volumeattributesclasses")
    })
}

/// Judged by the real kube-apiserver 1.36 too (`common::conform`, with
/// storage.k8s.io/v1beta1 on): every object read is compared whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_class_through_v1_and_v1beta1_with_its_finalizers() {
    conform(
        "one_class_through_v1_and_v1beta1_with_its_finalizers",
        SimConfig::default(),
        async |t| {
            let client = t.client.clone();
            let record = |label: &str, o: &DynamicObject| {
                t.record(label, serde_json::to_value(o).unwrap_or_default());
            };
            assert!(served(&client, "storage.k8s.io/v1").await);
            assert!(served(&client, "storage.k8s.io/v1beta1").await);
            let gold = t.unique("gold");

            let created = vacs(&client, "v1")
                .create(&PostParams::default(), &vac(&gold, "v1"))
                .await
                .unwrap();
            record("created", &created);
            let beta = vacs(&client, "v1beta1").get(&gold).await.unwrap();
            assert_eq!(
                beta.types.as_ref().map(|t| t.api_version.as_str()),
                Some("storage.k8s.io/v1beta1")
            );
            assert_eq!(
                beta.metadata.uid, created.metadata.uid,
                "one object, two versions"
            );
            assert_eq!(beta.data["driverName"], "csi.example.com");
            record("read through v1beta1", &beta);

            // A finalizer added through v1beta1 holds the v1 object's deletion.
            let o = vacs(&client, "v1beta1")
                .patch(
                    &gold,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": ["kubernetes.io/vac-protection"]}})),
                )
                .await
                .unwrap();
            record("finalizer through v1beta1", &o);
            vacs(&client, "v1")
                .delete(&gold, &DeleteParams::default())
                .await
                .unwrap();
            let held = vacs(&client, "v1").get(&gold).await.unwrap();
            assert!(held.metadata.deletion_timestamp.is_some(), "Terminating");
            record("held", &held);
            vacs(&client, "v1")
                .patch(
                    &gold,
                    &PatchParams::default(),
                    &Patch::Json::<()>(
                        serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
                            .unwrap(),
                    ),
                )
                .await
                .unwrap();
            assert!(vacs(&client, "v1").get_opt(&gold).await.unwrap().is_none());

            // The claim and volume fields that refer to a class are stored as sent.
            let ns = t.namespace("vac").await;
            let pvcs: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                &ns,
                &ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&()),
            );
            let pvc: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                         "volumeAttributesClassName": "gold", "storageClassName": ""}
            }))
            .unwrap();
            pvcs.create(&PostParams::default(), &pvc).await.unwrap();
            pvcs.patch_status(
                "data",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "currentVolumeAttributesClassName": "silver",
                    "modifyVolumeStatus": {"targetVolumeAttributesClassName": "gold", "status": "InProgress"}
                }})),
            )
            .await
            .unwrap();
            let got = pvcs.get("data").await.unwrap();
            assert_eq!(got.data["spec"]["volumeAttributesClassName"], "gold");
            assert_eq!(
                got.data["status"]["currentVolumeAttributesClassName"],
                "silver"
            );
            assert_eq!(
                got.data["status"]["modifyVolumeStatus"]["targetVolumeAttributesClassName"],
                "gold"
            );
            record("the claim", &got);
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switched_off_version_is_gone_from_discovery_and_its_paths() {
    let sim = KubeSim::start(SimConfig {
        disabled_group_versions: vec!["storage.k8s.io/v1beta1".into()],
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let client = sim.client().await;
    assert!(served(&client, "storage.k8s.io/v1").await);
    assert!(!served(&client, "storage.k8s.io/v1beta1").await);
    let e = vacs(&client, "v1beta1")
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{e}");
    assert!(vacs(&client, "v1").list(&Default::default()).await.is_ok());
    // StorageClass (storage.k8s.io/v1) is untouched by switching v1beta1 off.
    let sim = KubeSim::start(SimConfig {
        disabled_group_versions: vec!["storage.k8s.io/v1".into(), "storage.k8s.io/v1beta1".into()],
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let client = sim.client().await;
    assert!(!served(&client, "storage.k8s.io/v1").await);
    let groups = client.list_api_groups().await.unwrap();
    assert!(
        !groups.groups.iter().any(|g| g.name == "storage.k8s.io"),
        "a group with no served version is not listed"
    );
}

/// kubectl applies, lists (by its short name) and deletes a class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_gets_and_deletes_a_class() {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let kc = sim.kubeconfig_path().to_path_buf();
    let manifest = "apiVersion: storage.k8s.io/v1\nkind: VolumeAttributesClass\nmetadata:\n  name: gold\ndriverName: csi.example.com\nparameters:\n  iops: \"3000\"\n";
    let path = std::env::temp_dir().join(format!("vac-{}.yaml", std::process::id()));
    std::fs::write(&path, manifest).unwrap();
    let kubectl: PathBuf = tool("KUBECTL_PINNED", ".tools/bin/kubectl");
    let run = |args: &[&str]| {
        let out = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", kubectl.display()));
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let p = path.to_string_lossy().to_string();
    let out = run(&["apply", "-f", &p]);
    assert!(
        out.contains("volumeattributesclass.storage.k8s.io/gold created"),
        "{out}"
    );
    let out = run(&["get", "vac", "-o", "name"]);
    assert_eq!(out.trim(), "volumeattributesclass.storage.k8s.io/gold");
    let out = run(&[
        "get",
        "volumeattributesclasses.v1beta1.storage.k8s.io",
        "gold",
        "-o",
        "jsonpath={.apiVersion}",
    ]);
    assert_eq!(out, "storage.k8s.io/v1beta1");
    run(&["delete", "vac", "gold"]);
    let _ = std::fs::remove_file(&path);
}

//! kube-sim's hostPath dynamic provisioner ([`super::HOSTPATH_PROVISIONER`]),
//! an external provisioner as sig-storage-lib-external-provisioner runs
//! one, against any API server: the default StorageClass `standard`
//! (`WaitForFirstConsumer`, as kind's), and for every claim the
//! persistentvolume controller handed to it (annotation
//! `volume.kubernetes.io/storage-provisioner` naming it; for a
//! `WaitForFirstConsumer` class once the scheduler chose a node,
//! `volume.kubernetes.io/selected-node`) a hostPath PV `pvc-<claim uid>`
//! pre-bound to the claim, with node affinity to that node. The controller
//! binds it (kube-sim's [`super::pvbinder`] or kube-controller-manager's).
//! A volume it made that is `Released` with reclaim policy `Delete` is
//! deleted with its directory (the controller leaves external volumes to
//! their provisioner).
//!
//! kube-sim runs it as
//! `system:serviceaccount:kube-system:kube-sim-hostpath-provisioner`; the
//! process kubelet (`kube-sim kubelet --provisioner`) with its bootstrap
//! credentials, for a real cluster, which has no provisioner of its own.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::events::{EventType, Recorder};
use super::informer::{self, Changes};
use super::pvbinder::{
    BETA_STORAGE_PROVISIONER, PROVISIONED_BY, SELECTED_NODE, STORAGE_PROVISIONER,
};
use super::{HOSTPATH_PROVISIONER, util};

/// The user kube-sim runs the provisioner as.
pub const PROVISIONER_USER: &str =
    "system:serviceaccount:kube-system:kube-sim-hostpath-provisioner";

/// The default StorageClass's name.
pub const DEFAULT_CLASS: &str = "standard";

/// Creates the default StorageClass `standard` of the hostPath provisioner
/// (as kind's installer creates its `standard` class).
pub async fn ensure_default_storage_class(client: &Client) -> Result<(), String> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let sc: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": DEFAULT_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": HOSTPATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .map_err(|e| e.to_string())?;
    match api.create(&PostParams::default(), &sc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("creating the default StorageClass: {e}")),
    }
}

fn annotation<'a>(
    m: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    k: &str,
) -> Option<&'a str> {
    m.annotations.as_ref()?.get(k).map(String::as_str)
}

/// Runs the provisioner until `stop`; volumes' directories go under `root`.
pub async fn run(client: Client, root: PathBuf, stop: CancellationToken) {
    let changes = Changes::default();
    let cfg = watcher::Config::default;
    let pvcs = informer::spawn(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    let pvs = informer::spawn(
        Api::<PersistentVolume>::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    let classes = informer::spawn(
        Api::<StorageClass>::all(client.clone()),
        cfg(),
        changes.clone(),
        stop.clone(),
    );
    for ready in [
        informer::ready(&pvcs, &stop).await,
        informer::ready(&pvs, &stop).await,
        informer::ready(&classes, &stop).await,
    ] {
        if !ready {
            return;
        }
    }
    let p = Provisioner {
        recorder: Recorder::new(client.clone(), HOSTPATH_PROVISIONER, None),
        client,
        root,
    };
    let mut rx = changes.subscribe();
    tracing::info!(
        provisioner = HOSTPATH_PROVISIONER,
        "hostPath provisioner running"
    );
    loop {
        let mut requeue = None;
        for pvc in pvcs.state() {
            let class = pvc
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.clone())
                .unwrap_or_default();
            let Some(sc) = classes.get(&ObjectRef::new(&class)) else {
                continue;
            };
            if let Err(e) = p.sync_claim(&pvc, &sc).await {
                tracing::debug!(pvc = ?pvc.metadata.name, error = %e, "provisioning failed");
                requeue = Some(Duration::from_millis(500));
            }
        }
        for pv in pvs.state() {
            if let Err(e) = p.sync_volume(&pv).await {
                tracing::debug!(pv = ?pv.metadata.name, error = %e, "deleting a volume failed");
                requeue = Some(Duration::from_millis(500));
            }
        }
        if !informer::wait(&mut rx, requeue.or(Some(Duration::from_secs(15))), &stop).await {
            return;
        }
    }
}

struct Provisioner {
    client: Client,
    recorder: Recorder,
    root: PathBuf,
}

impl Provisioner {
    /// `shouldProvision`, then `provisionClaimOperation`.
    async fn sync_claim(
        &self,
        pvc: &Arc<PersistentVolumeClaim>,
        sc: &StorageClass,
    ) -> Result<(), kube::Error> {
        if sc.provisioner != HOSTPATH_PROVISIONER || util::deleting(&pvc.metadata) {
            return Ok(());
        }
        let spec = pvc.spec.clone().unwrap_or_default();
        if spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) {
            return Ok(());
        }
        let handed = [STORAGE_PROVISIONER, BETA_STORAGE_PROVISIONER]
            .iter()
            .any(|k| annotation(&pvc.metadata, k) == Some(HOSTPATH_PROVISIONER));
        if !handed {
            return Ok(());
        }
        let wffc = sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
        let node = annotation(&pvc.metadata, SELECTED_NODE);
        if wffc && node.is_none() {
            return Ok(());
        }
        let uid = pvc.metadata.uid.clone().unwrap_or_default();
        let name = format!("pvc-{uid}");
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        if api.get_opt(&name).await?.is_some() {
            return Ok(());
        }
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let cname = pvc.metadata.name.clone().unwrap_or_default();
        self.recorder.event(
            &pvc.object_ref(&()),
            EventType::Normal,
            "Provisioning",
            &format!("External provisioner is provisioning volume for claim \"{ns}/{cname}\""),
        );
        let path = self.root.join(&name);
        let _ = std::fs::create_dir_all(&path);
        let storage = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "1Gi".into());
        let mut pv = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: HOSTPATH_PROVISIONER}},
            "spec": {
                "capacity": {"storage": storage},
                "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                "persistentVolumeReclaimPolicy": sc.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
                "storageClassName": sc.metadata.name,
                "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                "hostPath": {"path": path.display().to_string(), "type": "DirectoryOrCreate"},
                "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns, "name": cname, "uid": uid, "resourceVersion": pvc.metadata.resource_version},
            },
        });
        if let Some(n) = node {
            pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [n]}]}]}});
        }
        let pv: PersistentVolume = serde_json::from_value(pv).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &pv).await {
            Ok(_) => {
                self.recorder.event(
                    &pvc.object_ref(&()),
                    EventType::Normal,
                    "ProvisioningSucceeded",
                    &format!("Successfully provisioned volume {name}"),
                );
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `shouldDelete`, then `deleteVolumeOperation`: a volume this
    /// provisioner made, Released, with reclaim policy Delete.
    async fn sync_volume(&self, pv: &Arc<PersistentVolume>) -> Result<(), kube::Error> {
        if annotation(&pv.metadata, PROVISIONED_BY) != Some(HOSTPATH_PROVISIONER)
            || util::deleting(&pv.metadata)
        {
            return Ok(());
        }
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        let policy = pv
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
        if phase != Some("Released") || policy != Some("Delete") {
            return Ok(());
        }
        let name = pv.metadata.name.clone().unwrap_or_default();
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        if let Some(path) = pv
            .spec
            .as_ref()
            .and_then(|s| s.host_path.as_ref())
            .map(|h| PathBuf::from(&h.path))
            && path.starts_with(&self.root)
        {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(())
    }
}

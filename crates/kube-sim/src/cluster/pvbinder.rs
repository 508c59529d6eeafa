//! kube-controller-manager's persistentvolume-binder subset
//! (pkg/controller/volume/persistentvolume/pv_controller.go), as
//! `system:serviceaccount:kube-system:persistent-volume-binder`. Dynamic
//! provisioning is an external provisioner's ([`super::provisioner`]): the
//! binder hands a claim to it with the storage-provisioner annotations and
//! binds the volume it creates.
//!
//! * A PV without claimRef (or pre-bound by name only) is `Available`.
//! * A PVC without `volumeName` binds to the smallest Available PV that
//!   matches (storage class, volumeMode, access modes, capacity, selector;
//!   for a `WaitForFirstConsumer` class only once the scheduler chose a node,
//!   and then only to PVs whose node affinity allows it); a PVC with
//!   `volumeName` binds to that PV. Binding writes, in upstream's order: the
//!   PV's `claimRef` (+ `pv.kubernetes.io/bound-by-controller`), the PV's
//!   phase `Bound`, the PVC's `volumeName` (+ `pv.kubernetes.io/bind-completed`,
//!   `pv.kubernetes.io/bound-by-controller`), the PVC's status (Bound,
//!   accessModes, capacity).
//! * No match: an event (`FailedBinding` "no persistent volumes available
//!   for this claim and no storage class is set", `WaitForFirstConsumer`,
//!   `ProvisioningFailed`, `ExternalProvisioning`).
//! * A PV whose claim is gone becomes `Released`; with reclaim policy Delete
//!   it is left to its external provisioner if one made it
//!   (`pv.kubernetes.io/provisioned-by`), else it turns `Failed`
//!   (`VolumeFailedDelete`, as for a hostPath PV without a deleter plugin).
//! * A bound PVC whose PV is gone becomes `Lost` (`ClaimLost`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use super::events::{EventType, Recorder};
use super::informer::{self, ControllerManager};
use super::util;

pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
struct Binder {
    client: Client,
    recorder: Recorder,
    /// Last event per claim uid (events are emitted once per change).
    told: BTreeMap<String, String>,
}

pub(crate) async fn run(kcm: ControllerManager, client: Client, stop: CancellationToken) {
    let mut b = Binder {
        recorder: Recorder::new(client.clone(), "persistentvolume-controller", None),
        client,
        told: BTreeMap::new(),
    };
    let mut rx = kcm.changes.subscribe();
    tracing::info!("emulated persistent volume binder running");
    loop {
        let mut requeue: Option<Duration> = None;
        for pv in kcm.pvs.state() {
            if let Err(e) = b.sync_volume(&kcm, &pv).await {
                tracing::debug!(pv = ?pv.metadata.name, error = %e, "volume sync failed");
                requeue = Some(Duration::from_millis(500));
            }
        }
        for pvc in kcm.pvcs.state() {
            if let Err(e) = b.sync_claim(&kcm, &pvc).await {
                tracing::debug!(pvc = ?pvc.metadata.name, error = %e, "claim sync failed");
                requeue = Some(Duration::from_millis(500));
            }
        }
        if !informer::wait(&mut rx, requeue.or(Some(Duration::from_secs(15))), &stop).await {
            return;
        }
    }
}

fn claim_class(pvc: &PersistentVolumeClaim) -> String {
    let spec = pvc
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    storage_class(&pvc.metadata, spec)
}

fn volume_class(pv: &PersistentVolume) -> String {
    let spec = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref());
    storage_class(&pv.metadata, spec)
}

/// The class of a volume or claim: the beta annotation before
/// `spec.storageClassName`.
fn storage_class(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: Option<&str>,
) -> String {
    annotation(m, "volume.beta.kubernetes.io/storage-class")
        .or(spec)
        .unwrap_or_default()
        .to_string()
}

fn pv_phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pvc_phase(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn annotation<'a>(
    m: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    k: &str,
) -> Option<&'a str> {
    m.annotations.as_ref()?.get(k).map(String::as_str)
}

fn requested(pvc: &PersistentVolumeClaim) -> f64 {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| crate::quantity::value(&q.0))
        .unwrap_or(0.0)
}

fn capacity(pv: &PersistentVolume) -> f64 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| crate::quantity::value(&q.0))
        .unwrap_or(0.0)
}

/// Whether `pv.spec.claimRef` names `pvc` (`IsVolumeBoundToClaim`).
fn bound_to(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    r.name == pvc.metadata.name
        && r.namespace == pvc.metadata.namespace
        && r.uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || Some(u) == pvc.metadata.uid.as_deref())
}

impl Binder {
    /// FailedBinding: nothing to bind the claim to, nothing to provision it.
    fn tell_no_volumes(&mut self, pvc: &PersistentVolumeClaim) {
        self.tell(
            pvc,
            EventType::Normal,
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set",
        );
    }

    fn tell(&mut self, pvc: &PersistentVolumeClaim, ty: EventType, reason: &str, msg: &str) {
        let key = pvc.metadata.uid.clone().unwrap_or_default();
        let what = format!("{reason}:{msg}");
        if self.told.get(&key) == Some(&what) {
            return;
        }
        self.told.insert(key, what);
        self.recorder.event(&pvc.object_ref(&()), ty, reason, msg);
    }

    async fn set_pv_phase(
        &self,
        pv: &PersistentVolume,
        phase: &str,
        message: Option<&str>,
    ) -> Result<PersistentVolume, kube::Error> {
        let mut new = pv.clone();
        let st = new.status.get_or_insert_with(Default::default);
        st.phase = Some(phase.to_string());
        st.message = message.map(str::to_string);
        let name = pv.metadata.name.clone().unwrap_or_default();
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        api.replace_status(&name, &PostParams::default(), &new)
            .await
    }

    async fn sync_volume(
        &mut self,
        kcm: &ControllerManager,
        pv: &Arc<PersistentVolume>,
    ) -> Result<(), kube::Error> {
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
        let phase = pv_phase(pv).to_string();
        let Some(r) = claim_ref else {
            if phase != "Available" && phase != "Failed" {
                self.set_pv_phase(pv, "Available", None).await?;
            }
            return Ok(());
        };
        let uid = r.uid.clone().unwrap_or_default();
        if uid.is_empty() {
            // Pre-bound by name: waits for the claim.
            if phase != "Available" && phase != "Bound" {
                self.set_pv_phase(pv, "Available", None).await?;
            }
            return Ok(());
        }
        let ns = r.namespace.clone().unwrap_or_default();
        let cname = r.name.clone().unwrap_or_default();
        let claim = kcm.pvcs.get(&ObjectRef::new(&cname).within(&ns));
        let claim = match claim {
            Some(c) if c.metadata.uid.as_deref() == Some(uid.as_str()) => Some(c),
            Some(_) => None,
            None => {
                // Not in the cache: make sure it is really gone.
                let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
                match api.get_opt(&cname).await? {
                    Some(c) if c.metadata.uid.as_deref() == Some(uid.as_str()) => Some(Arc::new(c)),
                    _ => None,
                }
            }
        };
        let Some(claim) = claim else {
            // The claim is gone: Released, then reclaim.
            let policy = pv
                .spec
                .as_ref()
                .and_then(|s| s.persistent_volume_reclaim_policy.clone())
                .unwrap_or_else(|| "Retain".into());
            let mut cur = (**pv).clone();
            if phase != "Released" && phase != "Failed" {
                cur = self.set_pv_phase(pv, "Released", None).await?;
            }
            if policy == "Delete" && pv_phase(&cur) == "Released" {
                let name = pv.metadata.name.clone().unwrap_or_default();
                if annotation(&pv.metadata, PROVISIONED_BY).is_some() {
                    // "External deleter for volume requested, ignoring":
                    // its provisioner deletes it.
                } else {
                    let msg = format!(
                        "error getting deleter volume plugin for volume {name:?}: no deletable volume plugin matched"
                    );
                    self.set_pv_phase(&cur, "Failed", Some(&msg)).await?;
                    self.recorder.event(
                        &pv.object_ref(&()),
                        EventType::Warning,
                        "VolumeFailedDelete",
                        &msg,
                    );
                }
            } else if policy == "Recycle" && pv_phase(&cur) == "Released" {
                let msg = "No recycler plugin found for the volume!";
                self.set_pv_phase(&cur, "Failed", Some(msg)).await?;
                self.recorder.event(
                    &pv.object_ref(&()),
                    EventType::Warning,
                    "VolumeFailedRecycle",
                    msg,
                );
            }
            return Ok(());
        };
        let claim_volume = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        let name = pv.metadata.name.clone().unwrap_or_default();
        if claim_volume == name {
            if phase != "Bound" {
                self.set_pv_phase(pv, "Bound", None).await?;
            }
        } else if !claim_volume.is_empty()
            && annotation(&pv.metadata, BOUND_BY_CONTROLLER) == Some("yes")
        {
            // The claim went to another volume: unbind this one.
            let mut new = (**pv).clone();
            if let Some(s) = new.spec.as_mut() {
                s.claim_ref = None;
            }
            let api: Api<PersistentVolume> = Api::all(self.client.clone());
            let updated = api.replace(&name, &PostParams::default(), &new).await?;
            self.set_pv_phase(&updated, "Available", None).await?;
        }
        Ok(())
    }

    async fn sync_claim(
        &mut self,
        kcm: &ControllerManager,
        pvc: &Arc<PersistentVolumeClaim>,
    ) -> Result<(), kube::Error> {
        let volume = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        if volume.is_empty() {
            if let Some(pv) = self.find_match(kcm, pvc).await? {
                return self.bind(&pv, pvc).await;
            }
            if util::deleting(&pvc.metadata) {
                return Ok(());
            }
            let class = claim_class(pvc);
            if class.is_empty() {
                self.tell_no_volumes(pvc);
                return Ok(());
            }
            let Some(sc) = kcm.storageclasses.get(&ObjectRef::new(&class)) else {
                self.tell(
                    pvc,
                    EventType::Warning,
                    "ProvisioningFailed",
                    &format!("storageclass.storage.k8s.io {class:?} not found"),
                );
                return Ok(());
            };
            let wffc = sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
            let selected = annotation(&pvc.metadata, SELECTED_NODE).map(str::to_string);
            if wffc && selected.is_none() {
                self.tell(
                    pvc,
                    EventType::Normal,
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding",
                );
                return Ok(());
            }
            if sc.provisioner == "kubernetes.io/no-provisioner" {
                self.tell_no_volumes(pvc);
                return Ok(());
            }
            // The controller hands the claim to the provisioner.
            if annotation(&pvc.metadata, STORAGE_PROVISIONER) != Some(sc.provisioner.as_str()) {
                let ns = pvc.metadata.namespace.clone().unwrap_or_default();
                let name = pvc.metadata.name.clone().unwrap_or_default();
                let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
                // An update, as upstream's binder writes claims (its role
                // may update claims, not patch them).
                let mut claim = PersistentVolumeClaim::clone(pvc);
                let annotations = claim
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                for key in [STORAGE_PROVISIONER, BETA_STORAGE_PROVISIONER] {
                    annotations.insert(key.to_string(), sc.provisioner.clone());
                }
                api.replace(&name, &PostParams::default(), &claim).await?;
                self.tell(pvc, EventType::Normal, "ExternalProvisioning", &format!("Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.", sc.provisioner));
                return Ok(());
            }
            // The external provisioner creates the volume.
            return Ok(());
        }
        let pv = kcm.pvs.get(&ObjectRef::new(&volume));
        let pv = match pv {
            Some(pv) => Some(pv),
            None => Api::<PersistentVolume>::all(self.client.clone())
                .get_opt(&volume)
                .await?
                .map(Arc::new),
        };
        let Some(pv) = pv else {
            let was_bound =
                pvc_phase(pvc) == "Bound" || annotation(&pvc.metadata, BIND_COMPLETED).is_some();
            if was_bound && pvc_phase(pvc) != "Lost" {
                self.set_claim_status(pvc, "Lost", None).await?;
                self.recorder.event(
                    &pvc.object_ref(&()),
                    EventType::Warning,
                    "ClaimLost",
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                );
            }
            return Ok(());
        };
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
        match claim_ref {
            None => self.bind(&pv, pvc).await,
            Some(_) if bound_to(&pv, pvc) => self.bind(&pv, pvc).await,
            Some(_) => {
                if annotation(&pvc.metadata, BIND_COMPLETED).is_some() {
                    if pvc_phase(pvc) != "Lost" {
                        self.set_claim_status(pvc, "Lost", None).await?;
                        self.recorder.event(&pvc.object_ref(&()), EventType::Warning, "ClaimMisbound", "Two claims are bound to the same volume, this one is bound incorrectly");
                    }
                } else {
                    self.tell(
                        pvc,
                        EventType::Warning,
                        "FailedBinding",
                        &format!("volume {volume:?} already bound to a different claim."),
                    );
                }
                Ok(())
            }
        }
    }

    /// findBestMatchForClaim: the smallest matching PV.
    async fn find_match(
        &self,
        kcm: &ControllerManager,
        pvc: &PersistentVolumeClaim,
    ) -> Result<Option<Arc<PersistentVolume>>, kube::Error> {
        let class = claim_class(pvc);
        let want = requested(pvc);
        let spec = pvc.spec.clone().unwrap_or_default();
        let mode = spec
            .volume_mode
            .clone()
            .unwrap_or_else(|| "Filesystem".into());
        let modes = spec.access_modes.clone().unwrap_or_default();
        let wffc = !class.is_empty()
            && kcm
                .storageclasses
                .get(&ObjectRef::new(&class))
                .and_then(|c| c.volume_binding_mode.clone())
                .as_deref()
                == Some("WaitForFirstConsumer");
        let selected = annotation(&pvc.metadata, SELECTED_NODE).map(str::to_string);
        if wffc && selected.is_none() {
            return Ok(None);
        }
        let node: Option<Node> = match (&selected, wffc) {
            // Upstream reads the node from the shared informer: a list
            // as the controller manager's identity (which may list and
            // watch everything), not a get as the binder's ServiceAccount,
            // which may not read nodes.
            (Some(n), true) => Api::<Node>::all(kcm.lister.clone())
                .list(&ListParams::default().fields(&format!("metadata.name={n}")))
                .await?
                .items
                .into_iter()
                .next(),
            _ => None,
        };
        let mut best: Option<(f64, Arc<PersistentVolume>)> = None;
        for pv in kcm.pvs.state() {
            let ps = pv.spec.clone().unwrap_or_default();
            let prebound = bound_to(&pv, pvc);
            if ps.claim_ref.is_some() && !prebound {
                continue;
            }
            if !prebound && pv_phase(&pv) != "Available" {
                continue;
            }
            if util::deleting(&pv.metadata) && !prebound {
                continue;
            }
            if volume_class(&pv) != class
                || ps
                    .volume_mode
                    .clone()
                    .unwrap_or_else(|| "Filesystem".into())
                    != mode
            {
                continue;
            }
            let pv_modes = ps.access_modes.clone().unwrap_or_default();
            if !modes.iter().all(|m| pv_modes.contains(m)) {
                continue;
            }
            let cap = capacity(&pv);
            if cap < want {
                continue;
            }
            if let Some(sel) = &spec.selector
                && !util::selector_matches(Some(sel), pv.metadata.labels.as_ref())
            {
                continue;
            }
            if let (Some(n), Some(req)) = (
                &node,
                ps.node_affinity.as_ref().and_then(|a| a.required.as_ref()),
            ) && !super::scheduler::node_selector_matches(req, n)
            {
                continue;
            }
            if prebound {
                return Ok(Some(pv));
            }
            if best.as_ref().is_none_or(|(c, _)| cap < *c) {
                best = Some((cap, pv));
            }
        }
        Ok(best.map(|(_, p)| p))
    }

    async fn set_claim_status(
        &self,
        pvc: &PersistentVolumeClaim,
        phase: &str,
        pv: Option<&PersistentVolume>,
    ) -> Result<PersistentVolumeClaim, kube::Error> {
        let mut new = pvc.clone();
        let mut st = new.status.take().unwrap_or_default();
        st.phase = Some(phase.to_string());
        if let Some(pv) = pv {
            st.access_modes = pv.spec.as_ref().and_then(|s| s.access_modes.clone());
            st.capacity = pv.spec.as_ref().and_then(|s| s.capacity.clone());
        }
        new.status = Some(st);
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let name = pvc.metadata.name.clone().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        api.replace_status(&name, &PostParams::default(), &new)
            .await
    }

    /// bind: volume → claim, volume Bound, claim → volume, claim Bound.
    async fn bind(
        &mut self,
        pv: &PersistentVolume,
        pvc: &PersistentVolumeClaim,
    ) -> Result<(), kube::Error> {
        let pv_api: Api<PersistentVolume> = Api::all(self.client.clone());
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let cname = pvc.metadata.name.clone().unwrap_or_default();
        let pvc_api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let pv_name = pv.metadata.name.clone().unwrap_or_default();
        let mut pv = pv.clone();
        let want_ref = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some(ns.clone()),
            name: Some(cname.clone()),
            uid: pvc.metadata.uid.clone(),
            resource_version: pvc.metadata.resource_version.clone(),
            field_path: None,
        };
        let cur_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
        let ref_ok = cur_ref.as_ref().is_some_and(|r| {
            r.name == want_ref.name && r.namespace == want_ref.namespace && r.uid == want_ref.uid
        });
        if !ref_ok {
            let mut new = pv.clone();
            if cur_ref.is_none() {
                new.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
            }
            if let Some(s) = new.spec.as_mut() {
                s.claim_ref = Some(want_ref);
            }
            pv = pv_api
                .replace(&pv_name, &PostParams::default(), &new)
                .await?;
        }
        if pv_phase(&pv) != "Bound" {
            pv = self.set_pv_phase(&pv, "Bound", None).await?;
        }
        let mut pvc = pvc.clone();
        let vol = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        let ann = pvc.metadata.annotations.clone().unwrap_or_default();
        if vol != pv_name || !ann.contains_key(BIND_COMPLETED) {
            let mut new = pvc.clone();
            let a = new.metadata.annotations.get_or_insert_with(BTreeMap::new);
            a.insert(BIND_COMPLETED.into(), "yes".into());
            if vol.is_empty() {
                a.insert(BOUND_BY_CONTROLLER.into(), "yes".into());
            }
            if let Some(s) = new.spec.as_mut() {
                s.volume_name = Some(pv_name.clone());
            }
            pvc = pvc_api
                .replace(&cname, &PostParams::default(), &new)
                .await?;
        }
        let st: PersistentVolumeClaimStatus = pvc.status.clone().unwrap_or_default();
        let modes = pv.spec.as_ref().and_then(|s| s.access_modes.clone());
        let cap = pv.spec.as_ref().and_then(|s| s.capacity.clone());
        if st.phase.as_deref() != Some("Bound") || st.access_modes != modes || st.capacity != cap {
            self.set_claim_status(&pvc, "Bound", Some(&pv)).await?;
        }
        Ok(())
    }
}

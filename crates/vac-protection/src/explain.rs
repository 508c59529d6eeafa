//! `explain` for vac-protection, on the controller's own rule: the users of
//! a class in live lists of PVCs and PVs ([`live_users`]), read the way the
//! controller's watches read them — the rule its live confirmation applies
//! before it removes a finalizer.
//!
//! An object that cannot be read is reported, never skipped: a class is only
//! free when every PVC and PV was read.

use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use protection_core::explain::{
    ExplainError, ExplainKind, Explained, Hold, NameRule, failed, in_use_holds,
};

use crate::controller::NAME;
use crate::index::{VacUse, live_users};
use crate::objects::{PvRefs, PvcRefs};

/// The kind vac-protection explains.
pub const KIND: ExplainKind = ExplainKind {
    controller: NAME,
    group: "storage.k8s.io",
    title: "VolumeAttributesClass",
    names: &[
        "vac",
        "vacs",
        "volumeattributesclass",
        "volumeattributesclasses",
    ],
    namespaced: false,
    name_rule: NameRule::Dns1123Subdomain,
    explain: |client, _, name| explain(client, name).boxed(),
    explain_many: Some(|client, names| {
        explain_many(client, names.into_iter().map(|(_, n)| n).collect()).boxed()
    }),
};

/// A PVC or PV that could not be read as the controller reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// `PersistentVolumeClaim ns/name` or `PersistentVolume name`.
    pub object: String,
    pub error: String,
}

/// What vac-protection says about a VolumeAttributesClass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VacExplanation {
    /// The claims and volumes that refer to it, and through which field.
    pub users: Vec<VacUse>,
    pub unreadable: Vec<Unreadable>,
}

impl VacExplanation {
    /// Whether vac-protection holds the class's deletion.
    pub fn in_use(&self) -> bool {
        !self.users.is_empty()
    }

    /// No known user, but some objects could not be read.
    pub fn undecided(&self) -> bool {
        self.users.is_empty() && !self.unreadable.is_empty()
    }

    /// Why vac-protection holds the class (or would): its users, else the
    /// objects it could not read.
    pub fn holds(&self) -> Vec<Hold> {
        let users: Vec<String> = self.users.iter().map(VacUse::describe).collect();
        let unreadable: Vec<String> = self
            .unreadable
            .iter()
            .map(|o| format!("{} ({})", o.object, o.error))
            .collect();
        in_use_holds(
            &users,
            &unreadable,
            |who| Hold {
                why: format!(
                    "held by {NAME}: the class is in use by {who}. It goes once no claim or volume refers to it: delete them or change them to another class (a pending modification counts until it finishes)."
                ),
                if_deleted: Some(format!("{NAME} would hold it while {who} refers to it.")),
            },
            |who| {
                format!(
                    "{NAME} cannot tell whether the class is free: no readable claim or volume uses it, but {who} could not be read."
                )
            },
        )
    }
}

fn read<T: serde::de::DeserializeOwned>(kind: &str, v: serde_json::Value) -> Result<T, Unreadable> {
    let ns = v.pointer("/metadata/namespace").and_then(|n| n.as_str());
    let name = v
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("<unnamed>");
    let object = match ns {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    };
    serde_json::from_value(v).map_err(|e| Unreadable {
        object,
        error: e.to_string(),
    })
}

/// The PVCs and PVs of live lists, read as the controller's watches read
/// them.
struct LiveUsers {
    claims: Vec<PvcRefs>,
    volumes: Vec<PvRefs>,
    unreadable: Vec<Unreadable>,
}

impl LiveUsers {
    fn read(
        pvcs: impl IntoIterator<Item = serde_json::Value>,
        pvs: impl IntoIterator<Item = serde_json::Value>,
    ) -> LiveUsers {
        let mut unreadable = Vec::new();
        let mut claims = Vec::new();
        for v in pvcs {
            match read::<PvcRefs>("PersistentVolumeClaim", v) {
                Ok(p) => claims.push(p),
                Err(u) => unreadable.push(u),
            }
        }
        let mut volumes = Vec::new();
        for v in pvs {
            match read::<PvRefs>("PersistentVolume", v) {
                Ok(p) => volumes.push(p),
                Err(u) => unreadable.push(u),
            }
        }
        LiveUsers {
            claims,
            volumes,
            unreadable,
        }
    }

    fn explain(&self, name: &str) -> VacExplanation {
        VacExplanation {
            users: live_users(&self.claims, &self.volumes, name),
            unreadable: self.unreadable.clone(),
        }
    }

    /// Every PVC and PV, listed live.
    async fn list(client: &kube::Client) -> Result<LiveUsers, ExplainError> {
        let list = |r: ApiResource, what: &'static str| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &r);
            async move {
                api.list(&ListParams::default())
                    .await
                    .map_err(failed(what))
                    .map(|l| {
                        l.items
                            .into_iter()
                            .filter_map(|o| serde_json::to_value(o).ok())
                            .collect::<Vec<_>>()
                    })
            }
        };
        let pvcs = list(
            ApiResource::erase::<PersistentVolumeClaim>(&()),
            "listing persistentvolumeclaims",
        )
        .await?;
        let pvs = list(
            ApiResource::erase::<PersistentVolume>(&()),
            "listing persistentvolumes",
        )
        .await?;
        Ok(LiveUsers::read(pvcs, pvs))
    }
}

/// Explains the class `name` from live lists of PVCs and PVs (any JSON the
/// API server sent).
pub fn explain_vac(
    name: &str,
    pvcs: impl IntoIterator<Item = serde_json::Value>,
    pvs: impl IntoIterator<Item = serde_json::Value>,
) -> VacExplanation {
    LiveUsers::read(pvcs, pvs).explain(name)
}

/// The class `name` and the version it was read at (v1, else v1beta1);
/// `None` when it does not exist.
async fn get_vac(
    client: &kube::Client,
    name: &str,
) -> Result<Option<(ObjectMeta, &'static str)>, ExplainError> {
    for version in ["v1", "v1beta1"] {
        let gvk = GroupVersionKind::gvk("storage.k8s.io", version, "VolumeAttributesClass");
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
        );
        match api.get_opt(name).await {
            Ok(Some(o)) => return Ok(Some((o.metadata, version))),
            Ok(None) => return Ok(None),
            // This version is not served: try the next one.
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(failed(format!("reading vac {name}"))(e)),
        }
    }
    Err(ExplainError {
        what: format!("reading vac {name}"),
        source: "the cluster serves no VolumeAttributesClass API (storage.k8s.io/v1 or v1beta1)"
            .into(),
    })
}

fn explained(meta: ObjectMeta, version: &str, users: &LiveUsers, name: &str) -> Explained {
    Explained {
        meta,
        facts: vec![format!("API:         storage.k8s.io/{version}")],
        held: users.explain(name).holds(),
    }
}

/// Explains VolumeAttributesClass `name`, read live with every PVC and PV.
pub async fn explain(
    client: kube::Client,
    name: String,
) -> Result<Option<Explained>, ExplainError> {
    let Some((meta, version)) = get_vac(&client, &name).await? else {
        return Ok(None);
    };
    let users = LiveUsers::list(&client).await?;
    Ok(Some(explained(meta, version, &users, &name)))
}

/// Explains the classes `names` from one live list of the classes and one
/// of every PVC and PV (`None` for a class that does not exist).
pub async fn explain_many(
    client: kube::Client,
    names: Vec<String>,
) -> Result<Vec<Option<Explained>>, ExplainError> {
    let (mut classes, version) = list_vacs(&client).await?;
    let users = LiveUsers::list(&client).await?;
    Ok(names
        .iter()
        .map(|name| {
            classes
                .remove(name)
                .map(|meta| explained(meta, version, &users, name))
        })
        .collect())
}

/// Every class by name, and the version they were read at (v1, else
/// v1beta1).
async fn list_vacs(
    client: &kube::Client,
) -> Result<(std::collections::HashMap<String, ObjectMeta>, &'static str), ExplainError> {
    for version in ["v1", "v1beta1"] {
        let gvk = GroupVersionKind::gvk("storage.k8s.io", version, "VolumeAttributesClass");
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
        );
        match api.list(&ListParams::default()).await {
            Ok(l) => {
                let classes = l
                    .items
                    .into_iter()
                    .filter_map(|o| Some((o.metadata.name.clone()?, o.metadata)))
                    .collect();
                return Ok((classes, version));
            }
            // This version is not served: try the next one.
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(failed("listing volumeattributesclasses")(e)),
        }
    }
    Err(ExplainError {
        what: "listing volumeattributesclasses".into(),
        source: "the cluster serves no VolumeAttributesClass API (storage.k8s.io/v1 or v1beta1)"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn users_in_any_field_hold_the_class_and_an_unreadable_object_leaves_it_undecided() {
        let pvcs = [
            json!({"metadata": {"name": "data", "namespace": "shop"},
                   "spec": {"volumeAttributesClassName": "silver"},
                   "status": {"modifyVolumeStatus": {"targetVolumeAttributesClassName": "gold"}}}),
            json!({"metadata": {"name": "logs", "namespace": "shop"}, "spec": {}}),
        ];
        let pvs =
            [json!({"metadata": {"name": "pv-1"}, "spec": {"volumeAttributesClassName": "gold"}})];
        let e = explain_vac("gold", pvcs.clone(), pvs.clone());
        assert!(e.in_use());
        let named: Vec<String> = e.users.iter().map(VacUse::describe).collect();
        assert_eq!(
            named,
            vec![
                "PersistentVolumeClaim shop/data (status.modifyVolumeStatus.targetVolumeAttributesClassName)",
                "PersistentVolume pv-1 (spec.volumeAttributesClassName)"
            ]
        );
        let free = explain_vac("bronze", pvcs, pvs);
        assert!(!free.in_use() && !free.undecided());
        let bad = json!({"metadata": {"name": "odd", "namespace": "shop"}, "spec": {"volumeAttributesClassName": 7}});
        let e = explain_vac("bronze", [bad], []);
        assert!(e.undecided(), "{e:?}");
        assert_eq!(e.unreadable[0].object, "PersistentVolumeClaim shop/odd");
    }

    #[test]
    fn a_class_in_use_names_its_users_and_what_frees_it() {
        let pvcs = [json!({"metadata": {"name": "data", "namespace": "default"},
                           "spec": {"volumeAttributesClassName": "gold"}})];
        assert_eq!(
            explain_vac("gold", pvcs.clone(), []).holds(),
            vec![Hold {
                why: "held by vac-protection: the class is in use by PersistentVolumeClaim default/data (spec.volumeAttributesClassName). It goes once no claim or volume refers to it: delete them or change them to another class (a pending modification counts until it finishes).".into(),
                if_deleted: Some("vac-protection would hold it while PersistentVolumeClaim default/data (spec.volumeAttributesClassName) refers to it.".into()),
            }]
        );
        assert!(explain_vac("silver", pvcs, []).holds().is_empty());
        let bad = json!({"metadata": {"name": "pv-x"}, "spec": {"volumeAttributesClassName": 7}});
        let holds = explain_vac("gold", [], [bad]).holds();
        assert!(
            holds[0].why.starts_with("vac-protection cannot tell whether the class is free: no readable claim or volume uses it, but PersistentVolume pv-x (invalid type"),
            "{holds:?}"
        );
    }
}

//! `explain` for vac-protection, on the controller's own rule: the users of
//! a class in live lists of PVCs and PVs ([`live_users`]), read the way the
//! controller's watches read them — the rule its live confirmation applies
//! before it removes a finalizer.
//!
//! An object that cannot be read is reported, never skipped: a class is only
//! free when every PVC and PV was read.

use crate::index::{VacUse, live_users};
use crate::objects::{PvRefs, PvcRefs};

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

/// Explains the class `name` from live lists of PVCs and PVs (any JSON the
/// API server sent).
pub fn explain_vac(
    name: &str,
    pvcs: impl IntoIterator<Item = serde_json::Value>,
    pvs: impl IntoIterator<Item = serde_json::Value>,
) -> VacExplanation {
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
    VacExplanation {
        users: live_users(&claims, &volumes, name),
        unreadable,
    }
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
}

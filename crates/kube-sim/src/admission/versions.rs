//! admissionregistration.k8s.io serves MutatingAdmissionPolicy and
//! MutatingAdmissionPolicyBinding as v1 (GA, Kubernetes 1.36) and v1beta1
//! (1.34-1.35); the two versions have the same fields, so a real API server
//! stores one form and converts by apiVersion only. kube-sim stores v1 and
//! serves v1beta1 as a view (the mechanism of [`crate::event_versions`]): the
//! same names, uids, resourceVersions and watch history through both.
//!
//! storage.k8s.io VolumeAttributesClass is served the same way: v1 (GA,
//! Kubernetes 1.34) stored, v1beta1 (1.31-1.33) a view of it.

use serde_json::{Value, json};

use crate::resources::{self, ResId};

pub const GROUP: &str = "admissionregistration.k8s.io";
pub const POLICIES: &str = "mutatingadmissionpolicies";
pub const BINDINGS: &str = "mutatingadmissionpolicybindings";
/// storage.k8s.io, for VolumeAttributesClass.
pub const STORAGE_GROUP: &str = "storage.k8s.io";
/// The kinds stored as v1 and served as v1beta1 too, with their group.
const VIEWED: &[(&str, &str)] = &[
    (GROUP, "MutatingAdmissionPolicy"),
    (GROUP, "MutatingAdmissionPolicyBinding"),
    (STORAGE_GROUP, "VolumeAttributesClass"),
];

fn viewed_resource(group: &str, resource: &str) -> bool {
    VIEWED.iter().any(|(g, k)| {
        *g == group
            && resources::find_kind(g, k).is_some_and(|r| resources::def(r).resource == resource)
    })
}

/// The stored (v1) resource of a v1beta1 view.
pub fn storage_of(rid: ResId) -> Option<ResId> {
    let def = resources::def(rid);
    if def.version != "v1beta1" || !viewed_resource(def.group, def.resource) {
        return None;
    }
    resources::find(def.group, "v1", def.resource)
}

/// The group of a viewed kind's object.
fn viewed_group(v: &Value) -> Option<&'static str> {
    let kind = v.get("kind").and_then(Value::as_str)?;
    let group = v
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|a| a.split_once('/'))
        .map(|(g, _)| g);
    VIEWED
        .iter()
        .find(|(g, k)| *k == kind && group.is_none_or(|ag| ag == *g))
        .map(|(g, _)| *g)
}

fn with_version(v: &Value, group: &str, version: &str) -> Value {
    let mut out = v.clone();
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), json!(format!("{group}/{version}")));
    }
    out
}

/// A stored v1 object of a viewed kind as v1beta1; None for any other kind.
pub fn to_view(v: &Value) -> Option<Value> {
    viewed_group(v).map(|g| with_version(v, g, "v1beta1"))
}

/// A v1beta1 object of a viewed kind as v1 for storage; None for any other kind.
pub fn to_storage(v: &Value) -> Option<Value> {
    viewed_group(v).map(|g| with_version(v, g, "v1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1beta1_is_a_view_of_v1() {
        let beta = resources::find(GROUP, "v1beta1", POLICIES);
        let v1 = resources::find(GROUP, "v1", POLICIES);
        assert!(beta.is_some() && v1.is_some());
        assert_eq!(beta.and_then(storage_of), v1);
        assert_eq!(v1.and_then(storage_of), None);
        let obj = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy", "spec": {}});
        let view = to_view(&obj).unwrap_or_default();
        assert_eq!(view["apiVersion"], "admissionregistration.k8s.io/v1beta1");
        assert_eq!(to_storage(&view), Some(obj));
        assert_eq!(to_view(&json!({"kind": "Event"})), None);
    }

    #[test]
    fn volume_attributes_class_v1beta1_is_a_view_of_v1() {
        let beta = resources::find(STORAGE_GROUP, "v1beta1", "volumeattributesclasses");
        let v1 = resources::find(STORAGE_GROUP, "v1", "volumeattributesclasses");
        assert!(beta.is_some() && v1.is_some());
        assert_eq!(beta.and_then(storage_of), v1);
        let obj = json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass", "driverName": "d"});
        let view = to_view(&obj).unwrap_or_default();
        assert_eq!(view["apiVersion"], "storage.k8s.io/v1beta1");
        assert_eq!(to_storage(&view), Some(obj));
        assert_eq!(
            resources::find(STORAGE_GROUP, "v1", "storageclasses").and_then(storage_of),
            None
        );
    }
}

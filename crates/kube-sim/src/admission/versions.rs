//! admissionregistration.k8s.io serves MutatingAdmissionPolicy and
//! MutatingAdmissionPolicyBinding as v1 (GA, Kubernetes 1.36) and v1beta1
//! (1.34-1.35); the two versions have the same fields, so a real API server
//! stores one form and converts by apiVersion only. kube-sim stores v1 and
//! serves v1beta1 as a view (the mechanism of [`crate::event_versions`]): the
//! same names, uids, resourceVersions and watch history through both.

use serde_json::{Value, json};

use crate::resources::{self, ResId};

pub const GROUP: &str = "admissionregistration.k8s.io";
pub const POLICIES: &str = "mutatingadmissionpolicies";
pub const BINDINGS: &str = "mutatingadmissionpolicybindings";
const KINDS: &[&str] = &["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"];

/// The stored (v1) resource of a v1beta1 view.
pub fn storage_of(rid: ResId) -> Option<ResId> {
    let def = resources::def(rid);
    if def.group != GROUP || def.version != "v1beta1" {
        return None;
    }
    resources::find(GROUP, "v1", def.resource)
}

fn is_policy_kind(v: &Value) -> bool {
    v.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| KINDS.contains(&k))
}

fn with_version(v: &Value, version: &str) -> Value {
    let mut out = v.clone();
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), json!(format!("{GROUP}/{version}")));
    }
    out
}

/// A stored v1 policy object as v1beta1; None for any other kind.
pub fn to_view(v: &Value) -> Option<Value> {
    is_policy_kind(v).then(|| with_version(v, "v1beta1"))
}

/// A v1beta1 policy object as v1 for storage; None for any other kind.
pub fn to_storage(v: &Value) -> Option<Value> {
    is_policy_kind(v).then(|| with_version(v, "v1"))
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
}

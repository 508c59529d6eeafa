//! The ProtectionRule custom resource (`protection-manager.io/v1alpha1`,
//! cluster-scoped): its spec as the controller reads it, and the checks the
//! controller repeats after the API server's schema (a rule that slipped
//! past them, or came from a server without CEL validation, is refused with
//! a status condition naming the field, never a crash).

use kube::core::ApiResource;
use serde::{Deserialize, Serialize};

use crate::cel::{self, Expr};

pub const GROUP: &str = "protection-manager.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "ProtectionRule";
pub const PLURAL: &str = "protectionrules";

/// The CustomResourceDefinition, as the chart ships it.
pub const CRD_YAML: &str = include_str!(
    "../../../charts/protection-manager/crds/protectionrules.protection-manager.io.yaml"
);

/// The ProtectionRule resource for `Api<DynamicObject>`.
pub fn api_resource() -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.into(),
        plural: PLURAL.into(),
    }
}

/// `spec.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Hold deletions with the finalizer.
    #[default]
    Enforce,
    /// Hold nothing; report (events, status) what would have been held.
    Audit,
}

/// `spec.protected`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protected {
    #[serde(default)]
    pub group: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// One entry of `spec.users`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub resource: String,
    #[serde(default = "yes")]
    pub namespaced: bool,
    pub reference: String,
    #[serde(rename = "while", default, skip_serializing_if = "Option::is_none")]
    pub while_: Option<String>,
}

fn yes() -> bool {
    true
}

/// `spec` of a ProtectionRule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSpec {
    pub protected: Protected,
    pub users: Vec<User>,
    pub finalizer: String,
    #[serde(default)]
    pub mode: Mode,
    /// Why the rule protects (one line), shown wherever a hold is
    /// explained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A user entry with its expressions compiled.
#[derive(Debug)]
pub struct CompiledUser {
    pub spec: User,
    pub reference: Expr,
    pub while_: Option<Expr>,
}

/// Upstream finalizers a rule may reuse (a rule that reproduces
/// pvc-protection for clusters that disabled kube-controller-manager's).
pub const UPSTREAM_FINALIZERS: &[&str] = &[
    "kubernetes.io/pvc-protection",
    "kubernetes.io/pv-protection",
];

/// Checks the finalizer name: qualified, and not in `kubernetes.io` unless
/// it is an upstream one.
pub fn check_finalizer(name: &str) -> Result<(), String> {
    protection_core::finalizer::validate_finalizer_name(name).map_err(|e| e.to_string())?;
    let domain = name.split('/').next().unwrap_or("");
    if !domain.contains('.') {
        return Err(format!(
            "finalizer {name:?} must be domain-qualified (e.g. example.com/secret-in-use)"
        ));
    }
    let reserved = domain == "kubernetes.io" || domain.ends_with(".kubernetes.io");
    if reserved && !UPSTREAM_FINALIZERS.contains(&name) {
        return Err(format!(
            "finalizer {name:?} is in the reserved kubernetes.io domain and is not an upstream one ({})",
            UPSTREAM_FINALIZERS.join(", ")
        ));
    }
    Ok(())
}

/// Parses `spec` and compiles its expressions; the error names the field.
pub fn compile(spec: &serde_json::Value) -> Result<(RuleSpec, Vec<CompiledUser>), String> {
    let spec: RuleSpec = serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
    check_finalizer(&spec.finalizer).map_err(|e| format!("spec.finalizer: {e}"))?;
    if spec.protected.resource.is_none() && spec.protected.kind.is_none() {
        return Err("spec.protected: one of resource or kind is required".into());
    }
    if spec.users.is_empty() {
        return Err("spec.users: at least one user is required".into());
    }
    if let Some(r) = &spec.reason
        && (r.len() > 256 || r.contains(['\n', '\r']))
    {
        return Err("spec.reason: must be one line of at most 256 characters".into());
    }
    let mut users = Vec::new();
    for (i, u) in spec.users.iter().enumerate() {
        let reference =
            cel::compile(&u.reference).map_err(|e| format!("spec.users[{i}].reference: {e}"))?;
        let while_ = match &u.while_ {
            Some(w) if !w.trim().is_empty() => {
                Some(cel::compile(w).map_err(|e| format!("spec.users[{i}].while: {e}"))?)
            }
            _ => None,
        };
        users.push(CompiledUser {
            spec: u.clone(),
            reference,
            while_,
        });
    }
    Ok((spec, users))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finalizers_must_be_qualified_and_not_borrow_kubernetes_io() {
        assert!(check_finalizer("example.com/secret-in-use").is_ok());
        assert!(check_finalizer("kubernetes.io/pvc-protection").is_ok());
        let e = check_finalizer("kubernetes.io/secret-protection").unwrap_err();
        assert!(e.contains("reserved kubernetes.io domain"), "{e}");
        let e = check_finalizer("example/x").unwrap_err();
        assert!(e.contains("domain-qualified"), "{e}");
        assert!(check_finalizer("no-slash").is_err());
    }

    #[test]
    fn compile_names_the_bad_field() {
        let e = compile(&json!({
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{"version": "v1", "resource": "pods", "reference": "object.("}],
            "finalizer": "example.com/x"
        }))
        .unwrap_err();
        assert!(e.starts_with("spec.users[0].reference: "), "{e}");
        let (s, u) = compile(&json!({
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{"version": "v1", "resource": "pods", "reference": "'a'", "while": "true"}],
            "finalizer": "example.com/x"
        }))
        .unwrap();
        assert_eq!(s.mode, Mode::Enforce);
        assert_eq!(s.reason, None);
        assert!(u[0].while_.is_some());
        let (s, _) = compile(&json!({
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{"version": "v1", "resource": "pods", "reference": "'a'"}],
            "finalizer": "example.com/x",
            "reason": "mounted credentials"
        }))
        .unwrap();
        assert_eq!(s.reason.as_deref(), Some("mounted credentials"));
        let e = compile(&json!({
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{"version": "v1", "resource": "pods", "reference": "'a'"}],
            "finalizer": "example.com/x",
            "reason": "two\nlines"
        }))
        .unwrap_err();
        assert!(e.starts_with("spec.reason: "), "{e}");
    }

    #[test]
    fn the_shipped_crd_parses() {
        let v: serde_json::Value = serde_yaml::from_str(CRD_YAML).unwrap();
        assert_eq!(v["spec"]["group"], GROUP);
        assert_eq!(v["spec"]["versions"][0]["name"], VERSION);
    }
}

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
    /// Refuse the delete while in use: the objects in use carry the label
    /// `protection-manager.io/in-use: "true"` and an annotation naming
    /// their users and the rule, which the chart's ValidatingAdmissionPolicy
    /// refuses the DELETE of; the finalizer stays on as in `Enforce`, the
    /// backstop for deletes the policy lets through.
    Deny,
}

impl Mode {
    /// Whether the rule holds deletions with its finalizer (`Enforce` and
    /// `Deny`).
    pub fn holds(self) -> bool {
        matches!(self, Mode::Enforce | Mode::Deny)
    }
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
    /// Protect a kind whose objects the cluster itself must be able to
    /// delete (pods, nodes, namespaces, leases,
    /// customresourcedefinitions): refused unless set.
    #[serde(
        rename = "allowCriticalKind",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub allow_critical_kind: bool,
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

/// The manager's own domain: its controllers' finalizers live there.
pub const MANAGER_DOMAIN: &str = "protection-manager.io";

/// The finalizers the manager's own controllers write (project profile),
/// and the rules controller's own clean-up finalizer. A rule may not use
/// them: its release would free objects another controller still holds
/// (issue 27, bug 2). Other names in the manager's domain stay a rule's to
/// use: the chart's example rules have been `protection-manager.io/<name>-in-use`
/// since 0.3, and a rule's finalizer is immutable, so refusing the whole
/// domain would strand those rules on upgrade.
pub const MANAGER_FINALIZERS: &[&str] = &[
    "protection-manager.io/pv-protection",
    "protection-manager.io/pvc-protection",
    "protection-manager.io/vac-protection",
    "protection-manager.io/service-cidr-protection",
    "protection-manager.io/load-balancer-cleanup",
    "protection-manager.io/rule-cleanup",
];

/// Checks the finalizer name: qualified, not one of the manager's own
/// controllers' finalizers, and not in `kubernetes.io` unless it is an
/// upstream one.
pub fn check_finalizer(name: &str) -> Result<(), String> {
    protection_core::finalizer::validate_finalizer_name(name).map_err(|e| e.to_string())?;
    let domain = name.split('/').next().unwrap_or("");
    if !domain.contains('.') {
        return Err(format!(
            "finalizer {name:?} must be domain-qualified (e.g. example.com/secret-in-use)"
        ));
    }
    if MANAGER_FINALIZERS.contains(&name) {
        return Err(format!(
            "finalizer {name:?} is one the manager's own controllers use ({}); a rule must use its own",
            MANAGER_FINALIZERS.join(", ")
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

/// Kinds whose objects the cluster must be able to delete for its own
/// work (group, resource): a finalizer on them can stall a node drain, a
/// namespace deletion, leader election or an API's removal. A rule may
/// protect them only with `allowCriticalKind: true`.
pub const CRITICAL_KINDS: &[(&str, &str)] = &[
    ("", "pods"),
    ("", "nodes"),
    ("", "namespaces"),
    ("coordination.k8s.io", "leases"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
];

/// Refuses a protected kind the cluster must be able to delete (unless
/// `allow`), and ProtectionRules themselves (always: a rule holding rules
/// would hold its own clean-up).
pub fn check_protected_kind(group: &str, plural: &str, allow: bool) -> Result<(), String> {
    let shown = if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    };
    if group == GROUP && plural == PLURAL {
        return Err(format!(
            "spec.protected: {shown} cannot be protected by a rule (a rule holding rules would hold their clean-up)"
        ));
    }
    if !allow && CRITICAL_KINDS.contains(&(group, plural)) {
        return Err(format!(
            "spec.protected: {shown} are objects the cluster must be able to delete (a held one can stall node drains, namespace deletion, leader election or an API's removal); set spec.allowCriticalKind: true to protect them anyway"
        ));
    }
    Ok(())
}

/// Whether two `spec.protected` name the same kind as written (same group,
/// version-independent, same resource or kind).
pub fn same_protected(a: &Protected, b: &Protected) -> bool {
    a.group == b.group
        && ((a.resource.is_some() && a.resource == b.resource)
            || (a.kind.is_some() && a.kind == b.kind))
}

/// `secrets`, `widgets.example.com`: `spec.protected` as messages name it.
pub fn protected_display(p: &Protected) -> String {
    let what = p
        .resource
        .clone()
        .or_else(|| p.kind.clone())
        .unwrap_or_default();
    if p.group.is_empty() {
        what
    } else {
        format!("{what}.{}", p.group)
    }
}

/// Why a rule is refused: the condition's reason and a message naming the
/// field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RuleError {
    /// `InvalidRule`, or `ExpressionTooExpensive` for an expression whose
    /// estimated cost is past the budget.
    pub reason: &'static str,
    pub message: String,
}

impl From<String> for RuleError {
    fn from(message: String) -> Self {
        RuleError {
            reason: "InvalidRule",
            message,
        }
    }
}

impl From<&str> for RuleError {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

fn expression(field: String, source: &str) -> Result<Expr, RuleError> {
    cel::compile(source).map_err(|e| RuleError {
        reason: match e {
            cel::CompileError::Invalid(_) => "InvalidRule",
            cel::CompileError::TooExpensive(_) => "ExpressionTooExpensive",
        },
        message: format!("{field}: {e}"),
    })
}

/// Parses `spec` and compiles its expressions; the error names the field.
pub fn compile(spec: &serde_json::Value) -> Result<(RuleSpec, Vec<CompiledUser>), RuleError> {
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
        let reference = expression(format!("spec.users[{i}].reference"), &u.reference)?;
        let while_ = match &u.while_ {
            Some(w) if !w.trim().is_empty() => {
                Some(expression(format!("spec.users[{i}].while"), w)?)
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
        // The manager's own controllers' names are not a rule's (issue 27,
        // bug 2: a rule with pvc-protection's finalizer removed it from
        // claims pods still used).
        let e = check_finalizer("protection-manager.io/pvc-protection").unwrap_err();
        assert!(e.contains("the manager's own controllers use"), "{e}");
        let e = check_finalizer("protection-manager.io/rule-cleanup").unwrap_err();
        assert!(e.contains("the manager's own controllers use"), "{e}");
        // The chart's example rules' names stay allowed.
        assert!(check_finalizer("protection-manager.io/secrets-in-use").is_ok());
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
        assert!(e.message.starts_with("spec.users[0].reference: "), "{e}");
        assert_eq!(e.reason, "InvalidRule");
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
        assert!(e.message.starts_with("spec.reason: "), "{e}");
    }

    /// Bug 1 of issue 27: an expression whose work grows with the square of
    /// a user object's size pinned a core per rule; it is refused when the
    /// rule is compiled, naming the field and the budget.
    #[test]
    fn an_expression_quadratic_in_the_object_is_refused_as_too_expensive() {
        let e = compile(&json!({
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{"version": "v1", "resource": "pods",
                "reference": "object.spec.containers.map(a, object.spec.containers.map(b, b.name)).flatten()"}],
            "finalizer": "example.com/x"
        }))
        .unwrap_err();
        assert_eq!(e.reason, "ExpressionTooExpensive");
        assert!(
            e.message.starts_with(
                "spec.users[0].reference: estimated cost exceeds budget by factor of more than 100x"
            ),
            "{e}"
        );
        let e = compile(&json!({
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{"version": "v1", "resource": "pods", "reference": "'a'",
                "while": "has(lists.range(2000).map(i, object)[0].metadata)"}],
            "finalizer": "example.com/x"
        }))
        .unwrap_err();
        assert_eq!(e.reason, "ExpressionTooExpensive");
        assert!(
            e.message
                .starts_with("spec.users[0].while: estimated memory exceeds budget"),
            "{e}"
        );
    }

    #[test]
    fn critical_kinds_need_an_opt_in_and_rules_cannot_hold_rules() {
        for (g, r) in CRITICAL_KINDS {
            let e = check_protected_kind(g, r, false).unwrap_err();
            assert!(e.contains("set spec.allowCriticalKind: true"), "{e}");
            assert!(check_protected_kind(g, r, true).is_ok());
        }
        assert!(check_protected_kind("", "secrets", false).is_ok());
        let e = check_protected_kind(GROUP, PLURAL, true).unwrap_err();
        assert!(e.contains("cannot be protected by a rule"), "{e}");
    }

    #[test]
    fn the_shipped_crd_parses() {
        let v: serde_json::Value = serde_yaml::from_str(CRD_YAML).unwrap();
        assert_eq!(v["spec"]["group"], GROUP);
        assert_eq!(v["spec"]["versions"][0]["name"], VERSION);
    }
}

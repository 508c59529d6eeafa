//! Upstream's bootstrap RBAC policy
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy: policy.go,
//! controller_policy.go, namespace_policy.go), stored at start as
//! kube-apiserver's `rbac/bootstrap-roles` post-start hook stores it: the
//! ClusterRoles (`cluster-admin`, `system:basic-user`, `system:discovery`,
//! `system:node`, the `system:controller:*` roles, the aggregated `admin`,
//! `edit` and `view`, ...), their ClusterRoleBindings, and the Roles and
//! RoleBindings of kube-system and kube-public. Each is written by the
//! manager `kube-apiserver` (an `Update` entry in managedFields, as the real
//! hook's create leaves it).
//!
//! The objects come from `k8s-v1.36-bootstrap-rbac.json`: what a fresh real
//! kube-apiserver v1.36.3 serves, without kube-controller-manager (so the
//! aggregated roles keep `rules: null`; KCM's clusterrole-aggregation
//! controller would fill them). The file is generated from the real server
//! by `regenerate_the_bootstrap_policy_file` in
//! `crates/kube-sim/tests/bootstrap_rbac.rs`
//! (`cargo test -p kube-sim --test bootstrap_rbac -- --ignored regenerate`),
//! and that test binary checks it against the real server on every run.
//!
//! Nothing else knows the policy: the authorizer ([`crate::reviews`])
//! decides from the stored objects (but for the Node authorizer's static
//! rules, compiled into the real server: [`node_rules`]), so deleting the ClusterRoleBinding
//! `system:basic-user` revokes what it granted, as on a real server (whose
//! hook recreates it only at the next start).

use serde_json::Value;

use crate::error::ApiError;
use crate::resources;
use crate::store::{Store, WriteOptions};

/// The policy as a real kube-apiserver v1.36.3 serves it (see the module
/// docs for its provenance).
const POLICY_JSON: &str = include_str!("k8s-v1.36-bootstrap-rbac.json");

/// The manager the real hook's writes are recorded under.
const MANAGER: &str = "kube-apiserver";

/// The rules of the ClusterRole `system:node` of the policy (none if the
/// file does not parse: [`seed`] reports that at start).
pub(crate) fn node_rules() -> Vec<Value> {
    let Ok(doc) = serde_json::from_str::<Value>(POLICY_JSON) else {
        return Vec::new();
    };
    doc["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "system:node")
        .and_then(|o| o["rules"].as_array().cloned())
        .unwrap_or_default()
}

/// Stores every object of the bootstrap policy, in the file's order
/// (ClusterRoles, ClusterRoleBindings, Roles, RoleBindings), as the
/// bootstrap hook creates them. The namespaces must exist.
pub(crate) fn seed(store: &Store) -> Result<(), ApiError> {
    let doc: Value = serde_json::from_str(POLICY_JSON).map_err(|e| {
        ApiError::internal(format!(
            "the bootstrap RBAC policy (k8s-v1.36-bootstrap-rbac.json) does not parse: {e}"
        ))
    })?;
    let opts = WriteOptions::manager(MANAGER);
    for item in doc["items"].as_array().into_iter().flatten() {
        let kind = item["kind"].as_str().unwrap_or("");
        let rid = match kind {
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            "Role" => "roles",
            "RoleBinding" => "rolebindings",
            other => {
                return Err(ApiError::internal(format!(
                    "the bootstrap RBAC policy names an unknown kind {other:?}"
                )));
            }
        };
        let rid = resources::find("rbac.authorization.k8s.io", "v1", rid).ok_or_else(|| {
            ApiError::internal(format!(
                "kube-sim does not serve {rid}.rbac.authorization.k8s.io"
            ))
        })?;
        let ns = item["metadata"]["namespace"].as_str().unwrap_or("");
        store.create(rid, ns, item.clone(), &opts)?;
    }
    Ok(())
}

/// The RBAC a hostPath provisioner's installation brings (kube-sim's
/// [`crate::cluster::provisioner`], as kind's local-path-provisioner
/// manifest binds its ServiceAccount): the ClusterRole and
/// ClusterRoleBinding `kube-sim:hostpath-provisioner`, stored when the
/// provisioner runs so that it may do its work under
/// [`crate::Authorization::NodeRbac`].
pub(crate) fn seed_provisioner(store: &Store) -> Result<(), ApiError> {
    const NAME: &str = "kube-sim:hostpath-provisioner";
    let rbac = |r: &str| {
        resources::find("rbac.authorization.k8s.io", "v1", r)
            .ok_or_else(|| ApiError::internal(format!("kube-sim does not serve {r}")))
    };
    let opts = WriteOptions::manager("kube-sim");
    let role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": NAME},
        "rules": [
            {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "watch", "create", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch", "create"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        ],
    });
    store.create(rbac("clusterroles")?, "", role, &opts)?;
    let (ns, sa) = crate::cluster::provisioner::PROVISIONER_USER
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
        .unwrap_or(("kube-system", "kube-sim-hostpath-provisioner"));
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": NAME},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
    });
    store.create(rbac("clusterrolebindings")?, "", binding, &opts)?;
    Ok(())
}

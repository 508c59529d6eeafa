//! Object builders for tests: the manifests the suites create, each as an
//! API server would accept it.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use serde_json::{Value, json};

/// A 1Gi ReadWriteOnce PVC manifest.
pub fn pvc(ns: &str, name: &str, finalizers: &[&str]) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "finalizers": finalizers},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap_or_else(|e| panic!("PVC manifest: {e}"))
}

/// A pod manifest mounting `claim`; scheduled on `node` when given.
pub fn pod(ns: &str, name: &str, claim: &str, node: Option<&str>) -> Pod {
    let mut v: Value = json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "containers": [{"name": "app", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        }
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("pod manifest: {e}"))
}

/// A 1Gi hostPath PV manifest.
pub fn pv(name: &str, finalizers: &[&str]) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": format!("/tmp/{name}")}
        }
    }))
    .unwrap_or_else(|e| panic!("PV manifest: {e}"))
}

/// A `type: LoadBalancer` Service manifest (port 80 → 8080), of `class`
/// when given.
pub fn lb_service(ns: &str, name: &str, class: Option<&str>) -> Service {
    let mut spec = json!({
        "type": "LoadBalancer",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
        "selector": {"app": name},
    });
    if let Some(c) = class {
        spec["loadBalancerClass"] = json!(c);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("service manifest: {e}"))
}

/// A Node with providerID `sim://<name>` (what cloud-sim expects).
pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"providerID": format!("sim://{name}")},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
    }))
    .unwrap_or_else(|e| panic!("node manifest: {e}"))
}

/// Grants `subject` the RBAC `rules` cluster-wide, through a ClusterRole
/// and a ClusterRoleBinding both named `name`. `subject` is a user name, or
/// `system:serviceaccount:<namespace>:<name>` for a ServiceAccount.
pub async fn grant_cluster(
    client: &kube::Client,
    name: &str,
    subject: &str,
    rules: Value,
) -> anyhow::Result<()> {
    use anyhow::Context;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Api, PostParams};
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": rules,
    }))
    .with_context(|| format!("ClusterRole {name}"))?;
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .with_context(|| format!("creating ClusterRole {name}"))?;
    let subject = match subject
        .strip_prefix("system:serviceaccount:")
        .and_then(|s| s.split_once(':'))
    {
        Some((ns, sa)) => json!({"kind": "ServiceAccount", "name": sa, "namespace": ns}),
        None => json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": subject}),
    };
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [subject],
    }))
    .with_context(|| format!("ClusterRoleBinding {name}"))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .with_context(|| format!("creating ClusterRoleBinding {name}"))?;
    Ok(())
}

//! Upstream's bootstrap RBAC policy (the ClusterRoles, ClusterRoleBindings,
//! Roles and RoleBindings that kube-apiserver's `rbac/bootstrap-roles`
//! post-start hook writes): kube-sim stores the same objects at start, from
//! `src/k8s-v1.36-bootstrap-rbac.json`, and its authorizer decides from the
//! stored objects, so deleting or editing one changes what RBAC allows.
//!
//! Judged by the real kube-apiserver 1.36 (`common::conform`), which also
//! regenerates the data file (`regenerate_the_bootstrap_policy_file`). What
//! RBAC decides once a bootstrap object is deleted or edited is in
//! `bootstrap_rbac_effects.rs` (its own binary, so its own real server: the
//! objects here are compared as the bootstrap hook left them).

mod common;

use common::conform;
use common::differential::get;
use kube::Client;
use kube_sim::SimConfig;
use serde_json::{Value, json};

/// The data file kube-sim seeds its store from.
const POLICY_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/k8s-v1.36-bootstrap-rbac.json"
);

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// The four kinds, in the order the file lists them.
const KINDS: [(&str, &str); 4] = [
    ("clusterroles", "ClusterRole"),
    ("clusterrolebindings", "ClusterRoleBinding"),
    ("roles", "Role"),
    ("rolebindings", "RoleBinding"),
];

/// The label upstream's bootstrap policy puts on every object it writes.
const BOOTSTRAP_LABEL: &str = "kubernetes.io/bootstrapping=rbac-defaults";

/// The bootstrap policy as `client`'s server serves it: every object with
/// the bootstrap label, in LIST order, kind by kind, with what a client
/// sees of it (name, namespace, labels, annotations, rules,
/// aggregationRule, roleRef, subjects) and none of what the server sets
/// (uid, resourceVersion, creationTimestamp, managedFields).
async fn served_policy(client: &Client) -> Vec<Value> {
    let mut out = Vec::new();
    for (resource, kind) in KINDS {
        let r = get(
            client,
            &format!("{RBAC}/{resource}?labelSelector={BOOTSTRAP_LABEL}"),
        )
        .await;
        assert_eq!(r.code, 200, "LIST {resource}: {:?}", r.body);
        for item in r.body["items"].as_array().into_iter().flatten() {
            let mut o = serde_json::Map::new();
            o.insert("apiVersion".into(), json!("rbac.authorization.k8s.io/v1"));
            o.insert("kind".into(), json!(kind));
            let m = &item["metadata"];
            let mut meta = serde_json::Map::new();
            for k in ["name", "namespace", "labels", "annotations"] {
                if let Some(v) = m.get(k) {
                    meta.insert(k.into(), v.clone());
                }
            }
            o.insert("metadata".into(), Value::Object(meta));
            for k in ["rules", "aggregationRule", "roleRef", "subjects"] {
                if let Some(v) = item.get(k) {
                    o.insert(k.into(), v.clone());
                }
            }
            out.push(Value::Object(o));
        }
    }
    out
}

/// The policy file's contents for `items`.
fn policy_document(items: Vec<Value>) -> Value {
    json!({
        "source": format!(
            "the bootstrap RBAC objects of a fresh kube-apiserver {} (no kube-controller-manager), by crates/kube-sim/tests/bootstrap_rbac.rs regenerate_the_bootstrap_policy_file",
            control_plane::KUBERNETES_VERSION
        ),
        "items": items,
    })
}

/// Rewrites `src/k8s-v1.36-bootstrap-rbac.json` from a fresh real
/// kube-apiserver (etcd and kube-apiserver alone, as upstream's bootstrap
/// hook leaves the objects without the clusterrole-aggregation controller
/// of kube-controller-manager: `admin`, `edit` and `view` keep
/// `rules: null`). Run it after moving to a new Kubernetes version:
/// `cargo test -p kube-sim --test bootstrap_rbac -- --ignored regenerate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "rewrites a source file; run by hand on a new Kubernetes version"]
async fn regenerate_the_bootstrap_policy_file() {
    let cp = control_plane::ControlPlane::start(
        control_plane::Config::default().named("bootstrap-rbac"),
    )
    .await
    .unwrap_or_else(|e| panic!("starting the real control plane: {e}"));
    let client = cp
        .client()
        .await
        .unwrap_or_else(|e| panic!("a client of the real control plane: {e}"));
    let items = served_policy(&client).await;
    assert!(
        !items.is_empty(),
        "the real server served no bootstrap RBAC objects"
    );
    let text = serde_json::to_string_pretty(&policy_document(items))
        .unwrap_or_else(|e| panic!("encoding the policy: {e}"));
    std::fs::write(POLICY_FILE, text + "\n")
        .unwrap_or_else(|e| panic!("writing {POLICY_FILE}: {e}"));
    eprintln!("wrote {POLICY_FILE}");
}

/// The bootstrap objects a client reads: a sample by GET (every kind, the
/// aggregated `admin` without rules, a controller's role, a binding without
/// subjects), the names a LIST shows, and every bootstrap object as the
/// data file keeps it, the same on kube-sim as on the real server (which
/// also tells when the data file is stale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_policy_is_stored_as_the_real_server_stores_it() {
    conform(
        "the_bootstrap_policy_is_stored_as_the_real_server_stores_it",
        SimConfig::default(),
        async |t| {
            for path in [
                "clusterroles/system:basic-user",
                "clusterroles/system:discovery",
                "clusterroles/cluster-admin",
                "clusterroles/admin",
                "clusterroles/system:node",
                "clusterroles/system:controller:namespace-controller",
                "clusterrolebindings/system:basic-user",
                "clusterrolebindings/system:node",
                "clusterrolebindings/system:controller:namespace-controller",
                "namespaces/kube-system/roles/system::leader-locking-kube-scheduler",
                "namespaces/kube-system/rolebindings/system::leader-locking-kube-scheduler",
                "namespaces/kube-public/roles/system:controller:bootstrap-signer",
            ] {
                let r = get(&t.client, &format!("{RBAC}/{path}")).await;
                assert_eq!(r.code, 200, "GET {path}: {:?}", r.body);
                assert_eq!(
                    r.body.pointer("/metadata/managedFields/0/manager"),
                    Some(&json!("kube-apiserver")),
                    "{path}"
                );
                t.record(path, r.record());
            }
            for (resource, _) in KINDS {
                let r = get(&t.client, &format!("{RBAC}/{resource}")).await;
                assert_eq!(r.code, 200, "LIST {resource}: {:?}", r.body);
                let names: Vec<String> = r.body["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|i| {
                        let m = &i["metadata"];
                        match m["namespace"].as_str() {
                            Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap_or("")),
                            None => m["name"].as_str().unwrap_or("").to_string(),
                        }
                    })
                    .collect();
                assert!(!names.is_empty(), "no {resource}");
                t.record(&format!("LIST {resource}"), json!(names));
            }
            t.record(
                "every bootstrap object",
                json!(served_policy(&t.client).await),
            );
        },
    )
    .await;
}

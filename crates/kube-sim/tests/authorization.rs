//! kube-sim authorizes requests as `--authorization-mode=Node,RBAC` does
//! (`SimConfig::authorization`, `src/authz.rs`), checked against the real
//! kube-apiserver 1.36 (`common::conform`: the real server's answers are
//! the oracle, none is written here). Its own test binary, so its own real
//! server: these tests delete and restore bootstrap bindings.

mod common;

use common::conform;
use common::differential::{Reply, call, call_with, delete, get, post};
use kube::Client;
use kube_sim::{Authorization, SimConfig};
use serde_json::{Value, json};

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

fn authorizing() -> SimConfig {
    SimConfig {
        authorization: Some(Authorization::NodeRbac),
        ..SimConfig::default()
    }
}

/// A request with a content type fitting its method (merge patch for PATCH).
async fn send(
    client: &Client,
    method: &str,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Reply {
    let ct = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    call_with(client, method, path, ct, &body, headers).await
}

/// A plain user (in `system:authenticated` only) is refused, with the real
/// server's 403, every read and write RBAC does not grant it: namespaced
/// and cluster-scoped objects, lists, watches, a list narrowed to one name,
/// subresources (also of an object that does not exist: the authorizer
/// runs before the lookup) and non-resource paths. What the bootstrap
/// policy grants everyone (discovery, /version, /healthz) it is allowed;
/// `system:anonymous` only /version and the health checks. Impersonating
/// needs the `impersonate` verb. A RoleBinding grants what it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_authorized_as_node_rbac_authorizes_them() {
    conform(
        "requests_are_authorized_as_node_rbac_authorizes_them",
        authorizing(),
        async |t| {
            let ns = t.namespace("authz").await;
            let user = "authz-plain-user";
            let plain = t.client_as(user).await;
            let secrets = format!("/api/v1/namespaces/{ns}/secrets");
            let r = post(
                &t.client,
                &secrets,
                &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                    "stringData": {"k": "v"}}),
            )
            .await;
            assert_eq!(r.code, 201, "the admin creates a secret: {:?}", r.body);

            let refused: Vec<(&str, &str, String, Value)> = vec![
                ("get a namespaced object", "GET", format!("{secrets}/db"), Value::Null),
                ("list a namespace", "GET", secrets.clone(), Value::Null),
                (
                    "list narrowed to one name",
                    "GET",
                    format!("{secrets}?fieldSelector=metadata.name%3Ddb"),
                    Value::Null,
                ),
                ("watch every namespace", "GET", "/api/v1/pods?watch=1".into(), Value::Null),
                ("list cluster-scoped", "GET", "/api/v1/nodes".into(), Value::Null),
                (
                    "get a cluster-scoped object",
                    "GET",
                    format!("{RBAC}/clusterroles/cluster-admin"),
                    Value::Null,
                ),
                (
                    "patch a namespaced object",
                    "PATCH",
                    format!("{secrets}/db"),
                    json!({"metadata": {"labels": {"a": "b"}}}),
                ),
                (
                    "patch a cluster-scoped object's finalizers",
                    "PATCH",
                    format!("/api/v1/namespaces/{ns}"),
                    json!({"metadata": {"finalizers": ["example.com/keep"]}}),
                ),
                (
                    "patch a subresource",
                    "PATCH",
                    format!("/api/v1/namespaces/{ns}/status"),
                    json!({"status": {}}),
                ),
                (
                    "patch a missing object's subresource",
                    "PATCH",
                    format!("/apis/apps/v1/namespaces/{ns}/deployments/web/status"),
                    json!({"status": {}}),
                ),
                (
                    "delete a collection",
                    "DELETE",
                    format!("/api/v1/namespaces/{ns}/configmaps"),
                    Value::Null,
                ),
                ("create", "POST", secrets.clone(), json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})),
                ("a non-resource path", "GET", "/metrics".into(), Value::Null),
            ];
            for (label, method, path, body) in &refused {
                let r = send(&plain, method, path, body, &[]).await;
                assert_eq!(r.code, 403, "{label}: {method} {path}: {:?}", r.body);
                t.record(label, r.record());
            }

            let anonymous = [("Impersonate-User", "system:anonymous")];
            for path in ["/version", "/healthz", "/livez", "/readyz", "/api", "/apis", "/apis/apps/v1", "/openapi/v2"] {
                let r = get(&plain, path).await;
                assert_eq!(r.code, 200, "{user} GET {path}: {:?}", r.body);
                t.record(&format!("{user} GET {path}"), json!(r.code));
                let r = send(&t.client, "GET", path, &Value::Null, &anonymous).await;
                let what = format!("system:anonymous GET {path}");
                if r.code == 200 {
                    t.record(&what, json!(r.code));
                } else {
                    t.record(&what, r.record());
                }
            }
            let r = send(&t.client, "GET", &secrets, &Value::Null, &anonymous).await;
            assert_eq!(r.code, 403, "{:?}", r.body);
            t.record("system:anonymous lists secrets", r.record());

            // Impersonation is authorized first, then the impersonated user.
            let r = send(&plain, "GET", "/version", &Value::Null, &[("Impersonate-User", "someone-else")]).await;
            assert_eq!(r.code, 403, "{:?}", r.body);
            t.record("a plain user impersonates a user", r.record());
            let sa = [("Impersonate-User", "system:serviceaccount:kube-system:default")];
            let r = send(&plain, "GET", "/version", &Value::Null, &sa).await;
            t.record("a plain user impersonates a service account", r.record());
            let r = send(&t.client, "GET", &secrets, &Value::Null, &[("Impersonate-User", user)]).await;
            assert_eq!(r.code, 403, "{:?}", r.body);
            t.record("the admin as a plain user", r.record());
            let r = send(&t.client, "GET", "/version", &Value::Null, &[("Impersonate-Group", "g")]).await;
            t.record("a group without a user", r.record());

            // A RoleBinding grants what its role names, in its namespace.
            let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "read-secrets"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]});
            let r = post(&t.client, &format!("{RBAC}/namespaces/{ns}/roles"), &role).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "read-secrets"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-secrets"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
            let r = post(&t.client, &format!("{RBAC}/namespaces/{ns}/rolebindings"), &binding).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            let granted = common::eventually("the RoleBinding is in effect", async || {
                let r = get(&plain, &format!("{secrets}/db")).await;
                (r.code == 200).then_some(r.code)
            })
            .await;
            t.record("get after the grant", json!(granted));
            let r = get(&plain, &secrets).await;
            assert_eq!(r.code, 403, "get does not grant list: {:?}", r.body);
            t.record("list after a grant of get", r.record());
            let r = get(&plain, &format!("/api/v1/namespaces/{ns}/configmaps/db")).await;
            t.record("another resource after the grant", r.record());
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// The bootstrap binding `system:basic-user` is what lets every user
/// create its own reviews: without it, a plain user's
/// SelfSubjectAccessReview and SelfSubjectRulesReview are refused (403),
/// and allowed again once it is put back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_system_basic_user_a_user_may_not_review_itself() {
    conform(
        "without_system_basic_user_a_user_may_not_review_itself",
        authorizing(),
        async |t| {
            let plain = t.client_as("authz-reviewer").await;
            let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
            let ssar_body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default"}}});
            let ssrr = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
            let ssrr_body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": "default"}});
            let r = post(&plain, ssar, &ssar_body).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.record("a review with system:basic-user", json!(r.code));

            let basic = format!("{RBAC}/clusterrolebindings/system:basic-user");
            let saved = get(&t.client, &basic).await;
            assert_eq!(saved.code, 200, "{:?}", saved.body);
            let r = delete(&t.client, &basic).await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            let refused = common::eventually("the basic-user binding is gone", async || {
                let r = post(&plain, ssar, &ssar_body).await;
                (r.code == 403).then_some(r)
            })
            .await;
            t.record("a SelfSubjectAccessReview without system:basic-user", refused.record());
            let r = post(&plain, ssrr, &ssrr_body).await;
            t.record("a SelfSubjectRulesReview without system:basic-user", r.record());
            let r = call(&plain, "GET", ssar, "application/json", "").await;
            t.record("a GET of the reviews", r.record());

            let mut restored = saved.body.clone();
            if let Some(m) = restored["metadata"].as_object_mut() {
                for k in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
                    m.remove(k);
                }
            }
            let r = post(&t.client, &format!("{RBAC}/clusterrolebindings"), &restored).await;
            assert_eq!(r.code, 201, "restoring system:basic-user: {:?}", r.body);
            let back = common::eventually("system:basic-user is back", async || {
                let r = post(&plain, ssar, &ssar_body).await;
                (r.code == 201).then_some(r.code)
            })
            .await;
            t.record("a review once it is back", json!(back));
        },
    )
    .await;
}

/// kube-sim only (it has no graph of what is a node's, so the real Node
/// authorizer's narrower answers are not compared): a node (`system:node:<name>`
/// in `system:nodes`) may do what the Node authorizer's static rules allow,
/// such as registering its Node, and nothing RBAC alone would refuse it
/// beyond them (deleting a namespace); with authorization off, everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_may_do_what_the_node_rules_allow() {
    let node_json = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "authz-node"}});
    for (mode, want_delete) in [
        (Authorization::NodeRbac, 403),
        (Authorization::AlwaysAllow, 200),
    ] {
        let sim = kube_sim::KubeSim::start(SimConfig {
            authorization: Some(mode),
            ..SimConfig::default()
        })
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
        let admin = sim.client().await;
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "authz-ns"}});
        let r = post(&admin, "/api/v1/namespaces", &ns).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        let node = sim.client_as("system:node:authz-node").await;
        let r = post(&node, "/api/v1/nodes", &node_json).await;
        assert_eq!(
            r.code, 201,
            "{mode:?}: a node registers itself: {:?}",
            r.body
        );
        let r = delete(&node, "/api/v1/namespaces/authz-ns").await;
        assert_eq!(
            r.code, want_delete,
            "{mode:?}: a node deletes a namespace: {:?}",
            r.body
        );
        sim.shutdown().await;
    }
}

//! kube-sim authorizes requests as `--authorization-mode=Node,RBAC` does
//! (`SimConfig::authorization`, `src/authz.rs`), checked against the real
//! kube-apiserver 1.36 (`common::conform`: the real server's answers are
//! the oracle, none is written here). Its own test binary, so its own real
//! server: these tests delete and restore bootstrap bindings.

mod common;

use common::conform;
use common::differential::{Reply, call, call_with, delete, get, post, put};
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

/// kube-sim only (its authorization modes; the real Node authorizer is
/// compared by `a_node_reads_only_what_the_pods_bound_to_it_use` and
/// `node_authorizer_reviews_answer_as_upstream`): a node
/// (`system:node:<name>` in `system:nodes`) may register its Node, and
/// not what neither the Node authorizer nor RBAC allows it (deleting a
/// namespace); with authorization off, everything.
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

/// `code` alone for a success (the object read is not what is compared),
/// the whole answer for a refusal.
fn answer(r: &Reply) -> Value {
    if (200..300).contains(&r.code) {
        json!(r.code)
    } else {
        r.record()
    }
}

/// Impersonating node `node` (`system:node:<node>` in `system:nodes`).
fn node_headers(user: &str) -> [(&str, &str); 2] {
    [
        ("Impersonate-User", user),
        ("Impersonate-Group", "system:nodes"),
    ]
}

/// The status of a SubjectAccessReview of `attrs` for `user` in `groups`
/// (the whole answer if it was not created).
async fn review(client: &Client, user: &str, groups: &[&str], attrs: Value) -> Value {
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, "resourceAttributes": attrs}});
    let r = post(
        client,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &body,
    )
    .await;
    if r.code == 201 {
        r.body["status"].clone()
    } else {
        r.record()
    }
}

/// Creates `body` at `path` as the admin, asserting it was created.
async fn create(t: &common::Target, path: &str, body: Value) {
    let r = post(&t.client, path, &body).await;
    assert_eq!(r.code, 201, "creating at {path}: {:?}", r.body);
}

/// Waits until node `user` may get the secret `ns/name`, which the pod the
/// test created last uses: upstream's Node authorizer reads its graph from
/// informers, so it lags the store; the pod informer delivers in order, so
/// once the last pod's secret is readable every earlier pod event (and
/// deletion) is in the graph.
async fn barrier(t: &common::Target, user: &str, ns: &str, name: &str) {
    let path = format!("/api/v1/namespaces/{ns}/secrets/{name}");
    common::eventually("the Node authorizer's graph has the last pod", async || {
        let r = send(&t.client, "GET", &path, &Value::Null, &node_headers(user)).await;
        (r.code == 200).then_some(())
    })
    .await;
}

/// A namespace, two node names, the first node's user and the
/// namespace's path.
struct Scene {
    ns: String,
    node_a: String,
    node_b: String,
    user_a: String,
    api: String,
}

async fn scene(t: &common::Target, prefix: &str) -> Scene {
    let ns = t.namespace(prefix).await;
    let node_a = t.unique("node-a");
    Scene {
        api: format!("/api/v1/namespaces/{ns}"),
        ns,
        node_b: t.unique("node-b"),
        user_a: format!("system:node:{node_a}"),
        node_a,
    }
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"k": "v"}})
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

fn claim(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
}

/// A pod bound to `node` that only mounts the secret `barrier`.
fn barrier_pod(name: &str, node: &str, barrier: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "b", "secret": {"secretName": barrier}}]}})
}

/// The Node authorizer's graph (plugin/pkg/auth/authorizer/node): a node
/// may get the secrets, configmaps, claims, PersistentVolumes (through
/// their `claimRef`) and PersistentVolumes' kubelet-visible secrets that
/// the pods bound to it use, through volumes, env, envFrom, image pull
/// secrets, init containers, projected and inline CSI volumes and the
/// claims of ephemeral volumes, and nothing of another node's pods, of an
/// unbound pod, of a mirror pod or of no pod; not a list or watch of
/// secrets but one narrowed to a name; and once the pod is deleted,
/// nothing it gave. As the node itself (its credential) and impersonated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reads_only_what_the_pods_bound_to_it_use() {
    conform(
        "a_node_reads_only_what_the_pods_bound_to_it_use",
        authorizing(),
        async |t| {
            let Scene { ns, node_a, node_b, user_a, api } = scene(&t, "nodeauthz").await;
            let secrets = [
                "vol", "env", "env-from", "pull", "projected", "csi-inline", "init-env", "unused",
                "other-node", "mirror", "unbound", "pv-publish", "pv-stage", "pv-controller",
                "pv-rbd", "pv-unused", "barrier", "barrier-2",
            ];
            for s in secrets {
                create(&t, &format!("{api}/secrets"), secret(s)).await;
            }
            let configmaps = ["cm-vol", "cm-env", "cm-env-from", "cm-projected", "cm-unused", "cm-other-node"];
            for c in configmaps {
                create(&t, &format!("{api}/configmaps"), configmap(c)).await;
            }
            let claims = ["claim-a", "claim-rbd", "claim-unused", "claim-b", "claim-named"];
            for c in claims {
                create(&t, &format!("{api}/persistentvolumeclaims"), claim(c)).await;
            }
            // The claim names its volume, but only a PV's claimRef is an
            // edge of the graph.
            let pv_named = t.unique("pv-named");
            let r = send(&t.client, "PATCH", &format!("{api}/persistentvolumeclaims/claim-named"),
                &json!({"spec": {"volumeName": pv_named}}), &[]).await;
            t.record("a claim names its volume", answer(&r));
            let pv = |name: &str, claim: Option<&str>, source: Value| {
                let mut spec = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]});
                if let Some(c) = claim {
                    spec["claimRef"] = json!({"namespace": ns, "name": c});
                }
                for (k, v) in source.as_object().into_iter().flatten() {
                    spec[k] = v.clone();
                }
                json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec})
            };
            let csi = |publish: &str| {
                json!({"csi": {"driver": "csi.example.com", "volumeHandle": "h",
                    "nodePublishSecretRef": {"namespace": ns, "name": publish},
                    "nodeStageSecretRef": {"namespace": ns, "name": "pv-stage"},
                    "controllerPublishSecretRef": {"namespace": ns, "name": "pv-controller"}}})
            };
            let pv_a = t.unique("pv-a");
            let pv_rbd = t.unique("pv-rbd");
            let pv_unused = t.unique("pv-unused");
            let pv_b = t.unique("pv-b");
            let pv_free = t.unique("pv-free");
            let pvs = [
                (pv_a.clone(), Some("claim-a"), csi("pv-publish")),
                // No namespace on the secret ref: the claim's.
                (pv_rbd.clone(), Some("claim-rbd"),
                    json!({"rbd": {"monitors": ["10.0.0.1:6789"], "image": "i", "secretRef": {"name": "pv-rbd"}}})),
                (pv_unused.clone(), Some("claim-unused"), csi("pv-unused")),
                (pv_b.clone(), Some("claim-b"), csi("pv-unused")),
                (pv_free.clone(), None, csi("pv-unused")),
                (pv_named.clone(), None, csi("pv-unused")),
            ];
            for (name, claim, source) in &pvs {
                create(&t, "/api/v1/persistentvolumes", pv(name, *claim, source.clone())).await;
            }
            for sa in ["sa-a", "sa-b"] {
                create(&t, &format!("{api}/serviceaccounts"),
                    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})).await;
            }
            let pod_a = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-a"},
                "spec": {
                    "nodeName": node_a,
                    "serviceAccountName": "sa-a",
                    "imagePullSecrets": [{"name": "pull"}],
                    "initContainers": [{"name": "init", "image": "busybox",
                        "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "init-env", "key": "k"}}}]}],
                    "containers": [{"name": "c", "image": "busybox",
                        "env": [
                            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}},
                            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}}
                        ],
                        "envFrom": [{"secretRef": {"name": "env-from"}}, {"configMapRef": {"name": "cm-env-from"}}]}],
                    "volumes": [
                        {"name": "s", "secret": {"secretName": "vol"}},
                        {"name": "cm", "configMap": {"name": "cm-vol"}},
                        {"name": "p", "projected": {"sources": [
                            {"secret": {"name": "projected"}}, {"configMap": {"name": "cm-projected"}}]}},
                        {"name": "inline", "csi": {"driver": "inline.example.com",
                            "nodePublishSecretRef": {"name": "csi-inline"}}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "claim-a"}},
                        {"name": "rbd", "persistentVolumeClaim": {"claimName": "claim-rbd"}},
                        {"name": "named", "persistentVolumeClaim": {"claimName": "claim-named"}},
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}
                    ]}});
            create(&t, &format!("{api}/pods"), pod_a).await;
            let pod_b = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-b"},
                "spec": {"nodeName": node_b, "serviceAccountName": "sa-b",
                    "containers": [{"name": "c", "image": "busybox",
                        "envFrom": [{"configMapRef": {"name": "cm-other-node"}}]}],
                    "volumes": [
                        {"name": "s", "secret": {"secretName": "other-node"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "claim-b"}}]}});
            create(&t, &format!("{api}/pods"), pod_b).await;
            let unbound = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unbound"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}],
                    "volumes": [{"name": "s", "secret": {"secretName": "unbound"}}]}});
            create(&t, &format!("{api}/pods"), unbound).await;
            let mut mirror = barrier_pod("mirror", &node_a, "mirror");
            mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "m"});
            let r = post(&t.client, &format!("{api}/pods"), &mirror).await;
            t.record("a mirror pod", answer(&r));
            create(&t, &format!("{api}/pods"), barrier_pod("barrier", &node_a, "barrier")).await;
            barrier(&t, &user_a, &ns, "barrier").await;

            let as_a = node_headers(&user_a);
            let node_client = t.client_as(&user_a).await;
            let mut reads: Vec<String> = Vec::new();
            reads.extend(secrets.iter().map(|s| format!("{api}/secrets/{s}")));
            reads.push(format!("{api}/secrets/missing"));
            reads.extend(configmaps.iter().map(|c| format!("{api}/configmaps/{c}")));
            reads.extend(claims.iter().map(|c| format!("{api}/persistentvolumeclaims/{c}")));
            // The ephemeral volume's claim `<pod>-<volume>` (no such claim).
            reads.push(format!("{api}/persistentvolumeclaims/pod-a-scratch"));
            reads.extend(pvs.iter().map(|(name, _, _)| format!("/api/v1/persistentvolumes/{name}")));
            reads.extend(["sa-a", "sa-b"].iter().map(|s| format!("{api}/serviceaccounts/{s}")));
            reads.extend(["pod-a", "pod-b", "unbound"].iter().map(|p| format!("{api}/pods/{p}")));
            reads.push(format!("{api}/secrets"));
            // Bounded: a watch a node were allowed would stream until then.
            reads.push(format!("{api}/secrets?watch=1&timeoutSeconds=1"));
            reads.push("/api/v1/secrets".into());
            reads.push(format!("{api}/secrets?fieldSelector=metadata.name%3Dvol"));
            reads.push(format!("{api}/secrets?fieldSelector=metadata.name%3Dunused"));
            reads.push(format!("{api}/configmaps?fieldSelector=metadata.name%3Dcm-vol"));
            reads.push(format!("{api}/persistentvolumeclaims?fieldSelector=metadata.name%3Dclaim-a"));
            reads.push(format!("{api}/pods?fieldSelector=spec.nodeName%3D{node_a}"));
            reads.push(format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node_b}"));
            reads.push(format!("/api/v1/nodes/{node_a}"));
            reads.push(format!("/api/v1/nodes/{node_b}"));
            for path in &reads {
                let r = send(&t.client, "GET", path, &Value::Null, &as_a).await;
                t.record(&format!("impersonated {user_a} GET {path}"), answer(&r));
            }
            for path in [format!("{api}/secrets/vol"), format!("{api}/secrets/other-node"), format!("{api}/secrets")] {
                let r = get(&node_client, &path).await;
                t.record(&format!("{user_a} itself GET {path}"), answer(&r));
            }

            // Once the pod is gone, so is what it gave.
            let r = send(&t.client, "DELETE", &format!("{api}/pods/pod-a"),
                &json!({"gracePeriodSeconds": 0}), &[]).await;
            assert_eq!(r.code, 200, "deleting pod-a: {:?}", r.body);
            create(&t, &format!("{api}/pods"), barrier_pod("barrier-2", &node_a, "barrier-2")).await;
            barrier(&t, &user_a, &ns, "barrier-2").await;
            for path in [
                format!("{api}/secrets/vol"),
                format!("{api}/configmaps/cm-vol"),
                format!("{api}/persistentvolumeclaims/claim-a"),
                format!("/api/v1/persistentvolumes/{pv_a}"),
                format!("{api}/secrets/pv-publish"),
                format!("{api}/secrets/barrier"),
            ] {
                let r = send(&t.client, "GET", &path, &Value::Null, &as_a).await;
                t.record(&format!("after pod-a is deleted: GET {path}"), answer(&r));
            }
            t.cleanup_namespace(&ns).await;
            for (name, _, _) in &pvs {
                let _ = delete(&t.client, &format!("/api/v1/persistentvolumes/{name}")).await;
            }
        },
    )
    .await;
}

/// The Node authorizer's decisions as SubjectAccessReviews show them, with
/// their reasons: the verbs each graph-checked resource allows (get only,
/// or get/list/watch of one named secret or configmap; a PVC's status
/// update; a ServiceAccount's get and token), its own Node, Lease, CSINode
/// and pods (by name or a `spec.nodeName` field selector, raw or as
/// requirements), ResourceSlices by selector, what the static rules allow,
/// and an unknown node name; what it refuses falls through to RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_authorizer_reviews_answer_as_upstream() {
    conform(
        "node_authorizer_reviews_answer_as_upstream",
        authorizing(),
        async |t| {
            let Scene { ns, node_a, node_b, user_a, api } = scene(&t, "nodereview").await;
            for s in ["vol", "barrier"] {
                create(&t, &format!("{api}/secrets"), secret(s)).await;
            }
            create(&t, &format!("{api}/persistentvolumeclaims"), claim("data")).await;
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-a"},
                "spec": {"nodeName": node_a, "serviceAccountName": "sa-a",
                    "containers": [{"name": "c", "image": "busybox"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "claim-gpu"}],
                    "volumes": [
                        {"name": "s", "secret": {"secretName": "vol"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}});
            create(&t, &format!("{api}/pods"), pod).await;
            create(&t, &format!("{api}/pods"), barrier_pod("pod-b", &node_b, "vol")).await;
            create(&t, &format!("{api}/pods"), barrier_pod("barrier", &node_a, "barrier")).await;
            barrier(&t, &user_a, &ns, "barrier").await;

            // `verb group resource subresource namespace name`, `-` for
            // empty, `NS` the test's namespace, `A` and `B` the nodes; then
            // an optional field selector (`raw:<selector>` or `in:<field>=<value>`).
            let cases = "
                get a used secret: get - secrets - NS vol
                watch a used secret by name: watch - secrets - NS vol
                list secrets: list - secrets - NS -
                update a used secret: update - secrets - NS vol
                get a used secret's subresource: get - secrets x NS vol
                get a secret without a namespace: get - secrets - - vol
                get an unused secret: get - secrets - NS nope
                get a used claim: get - persistentvolumeclaims - NS data
                list a used claim by name: list - persistentvolumeclaims - NS data
                patch a used claim's status: patch - persistentvolumeclaims status NS data
                get a used claim's status: get - persistentvolumeclaims status NS data
                update an unused claim's status: update - persistentvolumeclaims status NS nope
                list persistentvolumes: list - persistentvolumes - - -
                get a used resource claim: get resource.k8s.io resourceclaims - NS claim-gpu
                get another resource claim: get resource.k8s.io resourceclaims - NS nope
                get a volume attachment: get storage.k8s.io volumeattachments - - va
                create a used service account's token: create - serviceaccounts token NS sa-a
                create another service account's token: create - serviceaccounts token NS sa-b
                get a used service account: get - serviceaccounts - NS sa-a
                list service accounts: list - serviceaccounts - NS -
                create a service account: create - serviceaccounts - NS sa-a
                get its pod: get - pods - NS pod-a
                get another node's pod: get - pods - NS pod-b
                watch its pod by name: watch - pods - NS pod-a
                list pods: list - pods - - -
                list its pods by a raw selector: list - pods - - - raw:spec.nodeName=A
                watch its pods by requirements: watch - pods - - - in:spec.nodeName=A
                list another node's pods: list - pods - - - raw:spec.nodeName=B
                list pods not on it: list - pods - - - raw:spec.nodeName!=A
                list its pods by == and a name: list - pods - - - raw:spec.nodeName==A,metadata.name=x
                list its pods by a selector that does not parse: list - pods - - - raw:spec.nodeName=A=B
                watch its pods by a namespace too: watch - pods - NS - raw:spec.nodeName=A
                list its node by name: list - nodes - - - raw:metadata.name=A
                watch its node by requirements: watch - nodes - - - in:metadata.name=A
                create a pod: create - pods - NS -
                update a pod: update - pods - NS pod-a
                patch a pod's status: patch - pods status NS pod-b
                evict a pod: create - pods eviction NS pod-b
                get its node: get - nodes - - A
                get another node: get - nodes - - B
                list nodes: list - nodes - - -
                delete its node: delete - nodes - - A
                patch a node's status: patch - nodes status - B
                get its lease: get coordination.k8s.io leases - kube-node-lease A
                update another node's lease: update coordination.k8s.io leases - kube-node-lease B
                get a lease elsewhere: get coordination.k8s.io leases - NS A
                list leases: list coordination.k8s.io leases - kube-node-lease -
                get its CSINode: get storage.k8s.io csinodes - - A
                get another CSINode: get storage.k8s.io csinodes - - B
                list its resource slices: list resource.k8s.io resourceslices - - - raw:spec.nodeName=A
                list resource slices: list resource.k8s.io resourceslices - - -
                get a resource slice: get resource.k8s.io resourceslices - - slice
                create a pod certificate request: create certificates.k8s.io podcertificaterequests - NS -
                create an event (static rules): create - events - NS -
                get a storage class (static rules): get storage.k8s.io storageclasses - - x
                delete a namespace: delete - namespaces - - NS";
            let ns = ns.as_str();
            let word = |w: &str| match w {
                "-" => String::new(),
                "NS" => ns.to_string(),
                "A" => node_a.clone(),
                "B" => node_b.clone(),
                w => w.replace("=A", &format!("={node_a}")).replace("=B", &format!("={node_b}")),
            };
            let cases: Vec<(&str, Value)> = cases
                .lines()
                .filter_map(|l| l.trim().split_once(": "))
                .map(|(label, spec)| {
                    let w: Vec<String> = spec.split(' ').map(word).collect();
                    let mut attrs = json!({"verb": w[0], "group": w[1], "resource": w[2],
                        "subresource": w[3], "namespace": w[4], "name": w[5]});
                    if let Some(fs) = w.get(6) {
                        attrs["fieldSelector"] = match fs.split_once(':') {
                            Some(("in", req)) => {
                                let (k, v) = req.split_once('=').unwrap_or((req, ""));
                                json!({"requirements": [{"key": k, "operator": "In", "values": [v]}]})
                            }
                            _ => json!({"rawSelector": fs.trim_start_matches("raw:")}),
                        };
                    }
                    (label, attrs)
                })
                .collect();
            assert_eq!(cases.len(), 56, "every case parses");
            for (label, attrs) in &cases {
                let status = review(&t.client, &user_a, &["system:nodes"], attrs.clone()).await;
                t.record(label, status);
            }
            let secret_vol = cases[0].1.clone();
            let status = review(&t.client, "system:node:", &["system:nodes"], secret_vol.clone()).await;
            t.record("a node without a name", status);
            let status = review(&t.client, &user_a, &[], secret_vol.clone()).await;
            t.record("a node's name without system:nodes", status);
            let status = review(&t.client, "someone", &["system:nodes"], secret_vol).await;
            t.record("system:nodes without a node's name", status);
            t.cleanup_namespace(ns).await;
        },
    )
    .await;
}

/// A requester of this run (`<prefix>-...`), the name of its ClusterRole
/// and binding, and its client.
async fn impersonator(t: &common::Target, prefix: &str) -> (String, String, Client) {
    let requester = t.unique(prefix);
    let client = t.client_as(&requester).await;
    (requester.clone(), format!("{requester}-role"), client)
}

/// A ClusterRole `name` with `rules`, bound to the user `user`.
async fn grant(t: &common::Target, name: &str, rules: Value, user: &str) {
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules});
    create(t, &format!("{RBAC}/clusterroles"), role).await;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
    create(t, &format!("{RBAC}/clusterrolebindings"), binding).await;
}

/// Deletes what [`grant`] made.
async fn revoke(t: &common::Target, name: &str) {
    let _ = delete(&t.client, &format!("{RBAC}/clusterrolebindings/{name}")).await;
    let _ = delete(&t.client, &format!("{RBAC}/clusterroles/{name}")).await;
}

/// A SelfSubjectReview sent with `headers`.
async fn who_am_i(client: &Client, headers: &[(&str, &str)]) -> Reply {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    send(
        client,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &body,
        headers,
    )
    .await
}

/// The user info of a SelfSubjectReview sent with `headers` once one is
/// created (RBAC's informers lag its writes).
async fn who_once_allowed(client: &Client, what: &str, headers: &[(&str, &str)]) -> Value {
    common::eventually(what, async || {
        let r = who_am_i(client, headers).await;
        (r.code == 201).then_some(r.body["status"]["userInfo"].clone())
    })
    .await
}

/// `Impersonate-Uid` and `Impersonate-Extra-<key>` (endpoints/filters/
/// impersonation): each needs the `impersonate` verb on `uids` and on
/// `userextras/<key>` in `authentication.k8s.io`, beside the user's; the
/// impersonated user then has them (a SelfSubjectReview shows them), the
/// key %-decoded and its values in order; without a user they are a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonating_a_uid_and_extras_needs_their_verbs() {
    conform(
        "impersonating_a_uid_and_extras_needs_their_verbs",
        authorizing(),
        async |t| {
            let (requester, role, client) = impersonator(&t, "impersonator").await;
            let rules = |extra: bool| {
                let mut rules = vec![json!({"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]})];
                if extra {
                    rules.push(json!({"apiGroups": ["authentication.k8s.io"],
                        "resources": ["uids", "userextras/scopes", "userextras/example.com/team"],
                        "verbs": ["impersonate"]}));
                }
                json!(rules)
            };
            grant(&t, &role, rules(false), &requester).await;
            let who = async |client: &Client, headers: &[(&str, &str)]| {
                let r = who_am_i(client, headers).await;
                if r.code == 201 {
                    r.body["status"]["userInfo"].clone()
                } else {
                    r.record()
                }
            };
            let user = [("Impersonate-User", "someone")];
            let granted = who_once_allowed(&client, "the impersonator's binding is in effect", &user).await;
            t.record("impersonating a user", granted);
            let uid = [("Impersonate-User", "someone"), ("Impersonate-Uid", "uid-1")];
            t.record("a UID without its verb", who(&client, &uid).await);
            let extra = [("Impersonate-User", "someone"), ("Impersonate-Extra-Scopes", "read")];
            t.record("an extra without its verb", who(&client, &extra).await);

            let role_json = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role}, "rules": rules(true)});
            let r = put(&t.client, &format!("{RBAC}/clusterroles/{role}"), &role_json).await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            let all = [
                ("Impersonate-User", "someone"),
                ("Impersonate-Uid", "uid-1"),
                ("Impersonate-Extra-Scopes", "read"),
                ("Impersonate-Extra-Scopes", "write"),
                ("Impersonate-Extra-Example.com%2fteam", "storage"),
            ];
            let granted = who_once_allowed(&client, "the uid and extras are granted", &all).await;
            t.record("a UID and extras with their verbs", granted);
            let other = [("Impersonate-User", "someone"), ("Impersonate-Extra-Other", "x")];
            t.record("an extra key not granted", who(&client, &other).await);
            let other = [("Impersonate-User", "someone"), ("Impersonate-Extra-Scopes", "x"), ("Impersonate-Group", "g")];
            t.record("a group not granted with extras", who(&client, &other).await);

            for (label, headers) in [
                ("a UID without a user", vec![("Impersonate-Uid", "uid-1")]),
                ("extras without a user", vec![("Impersonate-Extra-Scopes", "a"), ("Impersonate-Extra-Scopes", "b")]),
            ] {
                let r = who_am_i(&t.client, &headers).await;
                t.record(label, r.record());
            }
            revoke(&t, &role).await;
        },
    )
    .await;
}

/// Constrained impersonation (1.36, KEP 5284) checks the impersonated
/// user, node and groups in `authentication.k8s.io` (the legacy verb in
/// the core group): a requester with `impersonate:user-info` on users and
/// `impersonate:arbitrary-node` on nodes there, and the matching
/// `impersonate-on:<mode>:create` on selfsubjectreviews, impersonates a
/// user and a node (which gets `system:nodes`; a `system:node:` name that
/// is not a DNS subdomain is a plain user), but not a group it was not
/// granted; four or more groups by one check of the group `*`; never the
/// empty group or `system:masters`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constrained_impersonation_is_authorized_in_authentication_k8s_io() {
    conform(
        "constrained_impersonation_is_authorized_in_authentication_k8s_io",
        authorizing(),
        async |t| {
            let (requester, role, client) = impersonator(&t, "constrained").await;
            let authn = |resource: &str, verb: &str| {
                json!({"apiGroups": ["authentication.k8s.io"], "resources": [resource], "verbs": [verb]})
            };
            let rules = json!([
                authn("users", "impersonate:user-info"),
                authn("nodes", "impersonate:arbitrary-node"),
                authn("selfsubjectreviews", "impersonate-on:user-info:create"),
                authn("selfsubjectreviews", "impersonate-on:arbitrary-node:create"),
                // Groups only as the one check of `*` that stands for
                // four or more.
                {"apiGroups": ["authentication.k8s.io"], "resources": ["groups"],
                    "resourceNames": ["*"], "verbs": ["impersonate:user-info"]},
            ]);
            grant(&t, &role, rules, &requester).await;
            let user = [("Impersonate-User", "someone")];
            let granted = who_once_allowed(&client, "the constrained binding is in effect", &user).await;
            t.record("a user by user-info", granted);
            let node = [("Impersonate-User", "system:node:n1")];
            let r = who_am_i(&client, &node).await;
            t.record("a node by arbitrary-node", answer(&r));
            t.record("the node's user info", r.body["status"]["userInfo"].clone());
            // Not a node's name (not a DNS subdomain): a user by user-info.
            let r = who_am_i(&client, &[("Impersonate-User", "system:node:Not_A_Node")]).await;
            t.record("a user named like a node", answer(&r));
            t.record("that user's info", r.body["status"]["userInfo"].clone());
            let group = [("Impersonate-User", "someone"), ("Impersonate-Group", "g")];
            let r = who_am_i(&client, &group).await;
            t.record("a group not granted", r.record());
            let four: Vec<(&str, &str)> = std::iter::once(("Impersonate-User", "someone"))
                .chain(["a", "b", "c", "d"].map(|g| ("Impersonate-Group", g)))
                .collect();
            let r = who_am_i(&client, &four).await;
            t.record("four groups by the check of *", answer(&r));
            t.record("the four groups' user info", r.body["status"]["userInfo"].clone());
            for g in ["system:masters", ""] {
                let r = who_am_i(&client, &[("Impersonate-User", "someone"), ("Impersonate-Group", g)]).await;
                t.record(&format!("the group {g:?}"), r.record());
            }
            revoke(&t, &role).await;
        },
    )
    .await;
}

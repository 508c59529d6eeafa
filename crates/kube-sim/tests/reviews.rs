//! TokenReview (authentication.k8s.io/v1) and SubjectAccessReview
//! (authorization.k8s.io/v1), as a component delegating its authentication
//! and authorization (kube-controller-manager's secure port, controller-runtime's
//! metrics filter) asks them: kube-sim's tokens (the token is the user name)
//! and RBAC over the stored roles and bindings.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube_sim::{RequestFilter, SimConfig};

mod common;

use common::conform;
use serde_json::json;

async fn token_review(client: &kube::Client, token: &str) -> Result<TokenReview, kube::Error> {
    Api::<TokenReview>::all(client.clone())
        .create(
            &PostParams::default(),
            &TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    audiences: None,
                },
                ..Default::default()
            },
        )
        .await
}

fn metrics_review(user: &str, groups: &[&str]) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/metrics".into()),
                verb: Some("get".into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn review(
    client: &kube::Client,
    sar: &SubjectAccessReview,
) -> Result<(bool, String), kube::Error> {
    let out = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), sar)
        .await?;
    let status = out.status.unwrap_or_default();
    Ok((status.allowed, status.reason.unwrap_or_default()))
}

/// kube-sim's tokens (the token is the user name) are kube-sim's own; what
/// upstream answers for a token it does not know and for an empty one is
/// judged by the real kube-apiserver 1.36 (`common::conform`).
#[tokio::test]
async fn token_review_authenticates_kube_sim_tokens() {
    conform(
        "token_review_authenticates_kube_sim_tokens",
        SimConfig::default(),
        async |t| {
            if let Some(sim) = t.sim.as_ref() {
                // A component reviews with its own credentials.
                let client = sim
                    .try_client_as("system:serviceaccount:pm:manager")
                    .await
                    .expect("client");
                let tr = token_review(&client, "system:serviceaccount:monitoring:prometheus")
                    .await
                    .expect("review");
                let status = tr.status.expect("status");
                assert_eq!(status.authenticated, Some(true));
                let user = status.user.expect("user");
                assert_eq!(
                    user.username.as_deref(),
                    Some("system:serviceaccount:monitoring:prometheus")
                );
                assert_eq!(
                    user.groups.unwrap_or_default(),
                    vec![
                        "system:serviceaccounts",
                        "system:serviceaccounts:monitoring",
                        "system:authenticated"
                    ]
                );
                assert_eq!(
                    status.audiences.unwrap_or_default(),
                    vec!["https://kubernetes.default.svc.cluster.local"]
                );
                // Create-only: recorded as a create.
                let creates = sim.requests().records(&RequestFilter {
                    user: Some("system:serviceaccount:pm:manager".into()),
                    ..RequestFilter::default()
                });
                assert!(
                    creates.iter().any(|r| r.verb == "create"
                        && r.api_group == "authentication.k8s.io"
                        && r.resource == "tokenreviews"),
                    "{creates:?}"
                );
            }

            // A token the server does not know: answered, not authenticated.
            let tr = token_review(&t.client, "two words").await.expect("review");
            let status = tr.status.clone().expect("status");
            assert_ne!(status.authenticated, Some(true));
            assert!(
                status
                    .error
                    .is_some_and(|e| e.contains("invalid bearer token")),
                "{tr:?}"
            );
            t.record(
                "an unknown token",
                serde_json::to_value(&tr.status).unwrap_or_default(),
            );

            // pkg/registry/authentication/tokenreview: an empty token is a 400.
            let s = t.status(token_review(&t.client, "").await.unwrap_err());
            assert_eq!(
                (s.code, s.message.as_str()),
                (400, "token is required for TokenReview in authentication")
            );
        },
    )
    .await;
}

/// RBAC evaluation as upstream's authorizer answers it, judged by the real
/// kube-apiserver 1.36 (`common::conform`): allowed or not, the reasons,
/// the validation errors.
#[tokio::test]
async fn subject_access_review_evaluates_rbac() {
    conform("subject_access_review_evaluates_rbac", SimConfig::default(), async |t| {
        let admin = t.client.clone();
        let prometheus = "system:serviceaccount:monitoring:prometheus";
        let sa_groups = [
            "system:serviceaccounts",
            "system:serviceaccounts:monitoring",
            "system:authenticated",
        ];

        // Nothing bound yet: denied.
        let denied = review(&admin, &metrics_review(prometheus, &sa_groups))
            .await
            .expect("review");
        assert!(!denied.0);
        t.record("nothing bound", json!(denied));

        let name = t.unique("metrics-reader");
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": name},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
        }))
        .expect("role");
        Api::<ClusterRole>::all(admin.clone())
            .create(&PostParams::default(), &role)
            .await
            .expect("create role");
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
        }))
        .expect("binding");
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("create binding");

        // (The real authorizer learns bindings from its informer.)
        let (allowed, reason) = common::eventually("the binding is in effect", async || {
            let r = review(&admin, &metrics_review(prometheus, &sa_groups))
                .await
                .expect("review");
            r.0.then_some(r)
        })
        .await;
        assert!(allowed);
        // describeSubject writes a ServiceAccount "name/namespace".
        assert_eq!(
            reason,
            format!("RBAC: allowed by ClusterRoleBinding \"{name}\" of ClusterRole \"{name}\" to ServiceAccount \"prometheus/monitoring\"")
        );
        t.record("bound", json!(reason));
        // Another verb, another path, another account: denied.
        let mut post = metrics_review(prometheus, &sa_groups);
        if let Some(n) = post.spec.non_resource_attributes.as_mut() {
            n.verb = Some("post".into());
        }
        // (Not /healthz: upstream's bootstrap policy lets every
        // authenticated user read it, system:public-info-viewer, which
        // kube-sim does not seed.)
        let mut logs = metrics_review(prometheus, &sa_groups);
        if let Some(n) = logs.spec.non_resource_attributes.as_mut() {
            n.path = Some("/logs".into());
        }
        let other = metrics_review("system:serviceaccount:monitoring:other", &sa_groups);
        for (label, sar) in [("another verb", post), ("another path", logs), ("another account", other)] {
            let r = review(&admin, &sar).await.expect("review");
            assert!(!r.0, "{label}: {r:?}");
            t.record(label, json!(r));
        }
        // system:masters may do everything.
        let r = review(&admin, &metrics_review("admin", &["system:masters"]))
            .await
            .expect("review");
        assert!(r.0);
        t.record("system:masters", json!(r));

        // Resource attributes: a Role in a namespace, by name.
        let shop = t.namespace("shop").await;
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "status-writer", "namespace": shop},
            "rules": [{"apiGroups": [""], "resources": ["services/status"], "resourceNames": ["web"], "verbs": ["patch"]}]
        }))
        .expect("role");
        Api::<Role>::namespaced(admin.clone(), &shop)
            .create(&PostParams::default(), &role)
            .await
            .expect("create role");
        let rb: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "status-writer", "namespace": shop},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status-writer"},
            "subjects": [{"kind": "User", "name": "alice"}]
        }))
        .expect("rb");
        Api::<RoleBinding>::namespaced(admin.clone(), &shop)
            .create(&PostParams::default(), &rb)
            .await
            .expect("create rolebinding");
        let resource = |ns: &str, name: &str| SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some("alice".into()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(ns.into()),
                    verb: Some("patch".into()),
                    group: Some(String::new()),
                    resource: Some("services".into()),
                    subresource: Some("status".into()),
                    name: Some(name.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        // The reason names a RoleBinding "name/namespace", as upstream's
        // roleBindingDescriber does.
        let (allowed, reason) = common::eventually("the role binding is in effect", async || {
            let r = review(&admin, &resource(&shop, "web")).await.expect("review");
            r.0.then_some(r)
        })
        .await;
        assert!(allowed);
        assert_eq!(
            reason,
            format!("RBAC: allowed by RoleBinding \"status-writer/{shop}\" of Role \"status-writer\" to User \"alice\"")
        );
        t.record("by a role binding", json!(reason));
        for (label, ns, n) in [("another name", shop.as_str(), "api"), ("another namespace", "other", "web")] {
            let r = review(&admin, &resource(ns, n)).await.expect("review");
            assert!(!r.0, "{label}: {r:?}");
            t.record(label, json!(r));
        }

        // pkg/apis/authorization/validation.
        let neither = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some("alice".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let s = t.status(review(&admin, &neither).await.unwrap_err());
        assert_eq!(s.code, 422);
        assert!(
            s.message.contains(
                "exactly one of nonResourceAttributes or resourceAttributes must be specified"
            ),
            "{}",
            s.message
        );
        let nobody = metrics_review("", &[]);
        let s = t.status(review(&admin, &nobody).await.unwrap_err());
        assert_eq!(s.code, 422);
        assert!(
            s.message.contains("at least one of user or group must be specified"),
            "{}",
            s.message
        );
        for p in [
            format!("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}"),
            format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}"),
        ] {
            let _ = common::differential::delete(&admin, &p).await;
        }
        t.cleanup_namespace(&shop).await;
    })
    .await;
}

/// A SubjectAccessReview for `user` in `groups` on a non-resource path.
fn path_review(user: &str, groups: &[&str], verb: &str, path: &str) -> SubjectAccessReview {
    let mut sar = metrics_review(user, groups);
    sar.spec.non_resource_attributes = Some(NonResourceAttributes {
        path: Some(path.into()),
        verb: Some(verb.into()),
    });
    sar
}

/// A SubjectAccessReview for `user` in `groups` on a cluster-wide resource.
fn resource_review(
    user: &str,
    groups: &[&str],
    verb: &str,
    group: &str,
    resource: &str,
) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Upstream's bootstrap RBAC policy, as a real 1.36 server answers it
/// (judged by it, `common::conform`): every authenticated user may read the
/// health and version endpoints and discovery and create its own reviews,
/// anonymous users the health and version endpoints, service accounts the
/// OIDC discovery documents, `system:monitoring` the metrics; a binding of a
/// bootstrap ClusterRole works; a binding of a missing role is the reason
/// of a denial.
#[tokio::test]
async fn subject_access_review_applies_the_bootstrap_policy() {
    conform(
        "subject_access_review_applies_the_bootstrap_policy",
        SimConfig::default(),
        async |t| {
            let admin = t.client.clone();
            let authenticated = ["system:authenticated"];
            // Granted by both system:discovery and system:public-info-viewer:
            // the real authorizer visits the ClusterRoleBindings in its
            // informer's (map) order, so the reason names either.
            for path in ["/healthz", "/livez", "/readyz", "/version"] {
                let (allowed, reason) = review(&admin, &path_review("alice", &authenticated, "get", path))
                    .await
                    .expect("review");
                assert!(allowed, "{path}");
                let either = ["system:discovery", "system:public-info-viewer"].map(|b| {
                    format!("RBAC: allowed by ClusterRoleBinding \"{b}\" of ClusterRole \"{b}\" to Group \"system:authenticated\"")
                });
                assert!(either.contains(&reason), "{path}: {reason}");
                t.record(path, json!(allowed));
            }
            let cases: [(&str, &str, &[&str], &str, &str); 9] = [
                ("discovery", "alice", &authenticated, "get", "/apis/apps/v1"),
                ("the core group", "alice", &authenticated, "get", "/api/v1"),
                ("openapi", "alice", &authenticated, "get", "/openapi/v3"),
                ("not another verb", "alice", &authenticated, "post", "/healthz"),
                ("not the metrics", "alice", &authenticated, "get", "/metrics"),
                ("anonymous health", "system:anonymous", &["system:unauthenticated"], "get", "/healthz"),
                ("no anonymous discovery", "system:anonymous", &["system:unauthenticated"], "get", "/apis"),
                (
                    "service-account issuer discovery",
                    "system:serviceaccount:monitoring:prometheus",
                    &["system:serviceaccounts", "system:serviceaccounts:monitoring"],
                    "get",
                    "/openid/v1/jwks",
                ),
                ("monitoring", "scraper", &["system:monitoring"], "get", "/metrics/slis"),
            ];
            for (label, user, groups, verb, path) in cases {
                let r = review(&admin, &path_review(user, groups, verb, path))
                    .await
                    .expect("review");
                t.record(label, json!(r));
            }
            for (label, group, resource) in [
                ("self access reviews", "authorization.k8s.io", "selfsubjectaccessreviews"),
                ("self rules reviews", "authorization.k8s.io", "selfsubjectrulesreviews"),
                ("self reviews", "authentication.k8s.io", "selfsubjectreviews"),
                ("not subject access reviews", "authorization.k8s.io", "subjectaccessreviews"),
            ] {
                let r = review(&admin, &resource_review("alice", &authenticated, "create", group, resource))
                    .await
                    .expect("review");
                t.record(label, json!(r));
            }
            // The components' own bindings (each allowed by one only).
            for (label, user, groups, verb, group, resource) in [
                ("the scheduler binds pods", "system:kube-scheduler", &authenticated[..], "create", "", "pods/binding"),
                ("the volume scheduler", "system:kube-scheduler", &authenticated[..], "update", "", "persistentvolumes"),
                ("the controller manager", "system:kube-controller-manager", &authenticated[..], "create", "", "serviceaccounts/token"),
                ("kube-proxy", "system:kube-proxy", &authenticated[..], "list", "networking.k8s.io", "servicecidrs"),
                (
                    "kube-dns",
                    "system:serviceaccount:kube-system:kube-dns",
                    &["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"][..],
                    "watch",
                    "",
                    "endpoints",
                ),
                ("not the scheduler in another group", "system:kube-scheduler", &authenticated[..], "list", "apps", "deployments"),
            ] {
                let r = review(&admin, &resource_review(user, groups, verb, group, resource))
                    .await
                    .expect("review");
                t.record(label, json!(r));
            }
            let r = review(
                &admin,
                &resource_review("scraper", &["system:monitoring"], "get", "", "nodes"),
            )
            .await
            .expect("review");
            assert!(!r.0, "nodes, not nodes/metrics: {r:?}");
            t.record("monitoring: not the nodes", json!(r));

            // Stored bindings: one of a bootstrap ClusterRole (to a user
            // in no group, whom no bootstrap binding names), one of a
            // ClusterRole that does not exist.
            let (viewer, broken, missing) = (t.unique("info"), t.unique("broken"), t.unique("missing"));
            for (name, role, user) in [
                (&viewer, "system:public-info-viewer", "carol"),
                (&broken, missing.as_str(), "dave"),
            ] {
                let binding: ClusterRoleBinding = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"kind": "User", "name": user}]
                }))
                .expect("binding");
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .create(&PostParams::default(), &binding)
                    .await
                    .expect("create binding");
            }
            let carol = common::eventually("carol's binding is in effect", async || {
                let r = review(&admin, &path_review("carol", &[], "get", "/version"))
                    .await
                    .expect("review");
                r.0.then_some(r)
            })
            .await;
            t.record("a binding of a bootstrap role", json!(carol));
            let dave = common::eventually("dave's binding is seen", async || {
                let r = review(&admin, &path_review("dave", &[], "get", "/version"))
                    .await
                    .expect("review");
                (!r.1.is_empty()).then_some(r)
            })
            .await;
            assert!(!dave.0, "{dave:?}");
            t.record("a binding of a missing role", json!(dave));
            for name in [&viewer, &broken] {
                let _ = common::differential::delete(
                    &admin,
                    &format!("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}"),
                )
                .await;
            }
        },
    )
    .await;
}

/// LocalSubjectAccessReview (pkg/registry/authorization/
/// localsubjectaccessreview): a SubjectAccessReview posted to a namespace,
/// whose resource attributes must name that namespace. The answers (the
/// whole object), the 422s and the 400 are judged by the real server.
#[tokio::test]
async fn local_subject_access_review_is_namespaced() {
    use common::differential::post;
    conform(
        "local_subject_access_review_is_namespaced",
        SimConfig::default(),
        async |t| {
            let admin = t.client.clone();
            let ns = t.namespace("lsar").await;
            let role: Role = serde_json::from_value(json!({
                "metadata": {"name": "reader", "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
            }))
            .expect("role");
            Api::<Role>::namespaced(admin.clone(), &ns)
                .create(&PostParams::default(), &role)
                .await
                .expect("create role");
            let rb: RoleBinding = serde_json::from_value(json!({
                "metadata": {"name": "reader", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                "subjects": [{"kind": "User", "name": "alice"}]
            }))
            .expect("rb");
            Api::<RoleBinding>::namespaced(admin.clone(), &ns)
                .create(&PostParams::default(), &rb)
                .await
                .expect("create rolebinding");
            let path = format!("/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews");
            let lsar = |spec: serde_json::Value| {
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview", "spec": spec})
            };
            let get_configmaps = |namespace: &str| {
                json!({"user": "alice", "resourceAttributes": {"namespace": namespace, "verb": "get", "resource": "configmaps"}})
            };
            let allowed = common::eventually("the role binding is in effect", async || {
                let r = post(&admin, &path, &lsar(get_configmaps(&ns))).await;
                (r.body.pointer("/status/allowed") == Some(&json!(true))).then_some(r)
            })
            .await;
            assert_eq!(allowed.code, 201, "{:?}", allowed.body);
            assert_eq!(allowed.body["metadata"]["namespace"], json!(ns));
            t.record("allowed", allowed.record());
            let mut list = get_configmaps(&ns);
            list["resourceAttributes"]["verb"] = json!("list");
            let denied = post(&admin, &path, &lsar(list)).await;
            assert_eq!(denied.body.pointer("/status/allowed"), Some(&json!(false)));
            t.record("another verb", denied.record());

            let metrics = json!({"path": "/metrics", "verb": "get"});
            let refused = [
                ("another namespace", lsar(get_configmaps("other"))),
                ("no namespace", lsar(get_configmaps(""))),
                ("non-resource attributes", lsar(json!({"user": "alice", "nonResourceAttributes": metrics}))),
                (
                    "both attributes",
                    lsar(json!({"user": "alice", "nonResourceAttributes": metrics,
                        "resourceAttributes": get_configmaps(&ns)["resourceAttributes"]})),
                ),
                ("neither attribute", lsar(json!({"user": "alice"}))),
                ("nobody", lsar(json!({"resourceAttributes": get_configmaps(&ns)["resourceAttributes"]}))),
            ];
            for (label, body) in refused {
                let r = post(&admin, &path, &body).await;
                assert_eq!(r.code, 422, "{label}: {:?}", r.body);
                t.record(label, r.record());
            }
            // The object's namespace is not the path's: the create handler's 400.
            let mut elsewhere = lsar(get_configmaps(&ns));
            elsewhere["metadata"] = json!({"namespace": "other"});
            let r = post(&admin, &path, &elsewhere).await;
            assert_eq!(r.code, 400, "{:?}", r.body);
            t.record("the object in another namespace", r.record());
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// The `"time":"…"` of a managedFields entry quoted in a message (the
/// `metadata` a review must not have is printed whole, with the entry the
/// create handler added): the servers answer at different times.
fn mask_quoted_times(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(i) = rest.find("\"time\":\"") {
                let start = i + "\"time\":\"".len();
                out.push_str(&rest[..start]);
                rest = &rest[start..];
                let end = rest.find('"').unwrap_or(rest.len());
                out.push_str("<time>");
                rest = &rest[end..];
            }
            out.push_str(rest);
            *s = out;
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(mask_quoted_times),
        serde_json::Value::Object(m) => m.values_mut().for_each(mask_quoted_times),
        _ => {}
    }
}

/// pkg/apis/authorization/validation: a SubjectAccessReview's and a
/// SelfSubjectAccessReview's `metadata` must be empty (a
/// LocalSubjectAccessReview's but for its namespace; the create handler
/// wipes the system fields and a cluster-scoped review's namespace
/// first); a field or label selector of the resource attributes needs its
/// rawSelector or its requirements, not both, and each requirement is
/// checked (an unknown operator is allowed). A selector that does not
/// parse is ignored by the authorizer and named in `evaluationError`
/// (`BuildEvaluationError`). Every answer is judged by the real server.
#[tokio::test]
async fn review_metadata_and_selectors_are_validated_as_upstream() {
    use common::differential::post;
    conform(
        "review_metadata_and_selectors_are_validated_as_upstream",
        SimConfig::default(),
        async |t| {
            let admin = t.client.clone();
            let ns = t.namespace("review-meta").await;
            let sar_path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
            let ssar_path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
            let lsar_path =
                format!("/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews");
            let attrs = |extra: serde_json::Value| {
                let mut ra = json!({"namespace": ns, "verb": "list", "resource": "pods"});
                if let (Some(ra), Some(extra)) = (ra.as_object_mut(), extra.as_object()) {
                    ra.extend(extra.clone());
                }
                ra
            };
            let sar = |kind: &str, meta: serde_json::Value, extra: serde_json::Value| {
                let mut spec = json!({"resourceAttributes": attrs(extra)});
                if kind != "SelfSubjectAccessReview" {
                    spec["user"] = json!("alice");
                }
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind,
                    "metadata": meta, "spec": spec})
            };
            let none = json!({});
            let field = |sel: serde_json::Value| json!({"fieldSelector": sel});
            let label = |sel: serde_json::Value| json!({"labelSelector": sel});
            let req = |key: &str, op: &str, values: &[&str]| {
                json!({"key": key, "operator": op, "values": values})
            };
            let cases: Vec<(&str, serde_json::Value)> = vec![
                ("a name", json!({"name": "x"})),
                (
                    "labels, annotations, generateName, finalizers",
                    json!({"labels": {"b": "1", "a": "2"}, "annotations": {"z": "1", "a": "2"},
                        "generateName": "g-", "finalizers": ["example.com/f"]}),
                ),
                ("a resourceVersion and a generation", json!({"resourceVersion": "5", "generation": 3})),
                (
                    "an owner",
                    json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o",
                        "uid": "6a3f7a52-7d5e-4bfa-9a43-1b2f34c3a111", "controller": true}]}),
                ),
                // Wiped or cleared by the create handler: allowed.
                (
                    "system fields",
                    json!({"uid": "6a3f7a52-7d5e-4bfa-9a43-1b2f34c3a111",
                        "creationTimestamp": "2024-01-01T00:00:00Z", "selfLink": "/x",
                        "deletionGracePeriodSeconds": 5}),
                ),
                ("a namespace", json!({"namespace": ns})),
                ("empty maps", json!({"labels": {}, "annotations": {}, "name": ""})),
            ];
            for kind in ["SubjectAccessReview", "SelfSubjectAccessReview"] {
                let path = if kind == "SubjectAccessReview" { sar_path } else { ssar_path };
                for (label, meta) in &cases {
                    let mut r = post(&admin, path, &sar(kind, meta.clone(), none.clone())).await;
                    mask_quoted_times(&mut r.body);
                    t.record(&format!("{kind} with {label}"), r.record());
                }
            }
            let lsar = |meta: serde_json::Value, extra: serde_json::Value| {
                sar("LocalSubjectAccessReview", meta, extra)
            };
            for (label, meta) in &cases {
                let mut r = post(&admin, &lsar_path, &lsar(meta.clone(), none.clone())).await;
                mask_quoted_times(&mut r.body);
                t.record(&format!("LocalSubjectAccessReview with {label}"), r.record());
            }

            let selectors: Vec<(&str, serde_json::Value)> = vec![
                ("an empty field selector", field(json!({}))),
                ("an empty label selector", label(json!({}))),
                (
                    "a field selector with both",
                    field(json!({"rawSelector": "spec.nodeName=n1",
                        "requirements": [req("spec.nodeName", "In", &["n1"])]})),
                ),
                (
                    "a label selector with both",
                    label(json!({"rawSelector": "a=b", "requirements": [req("a", "In", &["b"])]})),
                ),
                (
                    "field requirements without key or values",
                    field(json!({"requirements": [req("", "In", &[]), req("x", "NotIn", &[]),
                        req("y", "Exists", &["v"]), req("", "DoesNotExist", &["v"])]})),
                ),
                (
                    "label requirements with bad keys and values",
                    label(json!({"requirements": [req("bad key!", "In", &["not valid!", "ok"]),
                        req("example.com/", "NotIn", &[]), req("a", "Exists", &["v"]),
                        req("x/y/z", "DoesNotExist", &[])]})),
                ),
                // Allowed, but not (wholly) understood by the authorizer.
                ("a field selector that does not parse", field(json!({"rawSelector": "a=b=c"}))),
                ("a field selector that parses", field(json!({"rawSelector": "spec.nodeName=n1"}))),
                (
                    "field requirements the authorizer ignores",
                    field(json!({"requirements": [req("spec.nodeName", "Exists", &[]),
                        req("a", "Gt", &["1"]), req("b", "In", &["1", "2"])]})),
                ),
                (
                    "field requirements partly ignored",
                    field(json!({"requirements": [req("spec.nodeName", "In", &["n1"]),
                        req("a", "DoesNotExist", &[])]})),
                ),
                ("a label selector that does not parse", label(json!({"rawSelector": "a in ("}))),
                ("a label selector that parses", label(json!({"rawSelector": "a in (b),!c"}))),
                (
                    "label requirements the authorizer ignores",
                    label(json!({"requirements": [req("a", "Gt", &["1"])]})),
                ),
                (
                    "label requirements partly ignored",
                    label(json!({"requirements": [req("a", "Exists", &[]), req("b", "Lt", &["1"])]})),
                ),
                (
                    "both selectors ignored",
                    json!({"fieldSelector": {"rawSelector": "x"}, "labelSelector": {"rawSelector": "!!"}}),
                ),
            ];
            for (label, extra) in &selectors {
                for (kind, path) in [
                    ("SubjectAccessReview", sar_path),
                    ("SelfSubjectAccessReview", ssar_path),
                    ("LocalSubjectAccessReview", lsar_path.as_str()),
                ] {
                    let r = post(&admin, path, &sar(kind, none.clone(), extra.clone())).await;
                    t.record(&format!("{kind}: {label}"), r.record());
                }
            }
            // Every error at once: the spec's first, then the metadata's.
            let mut all = sar(
                "SubjectAccessReview",
                json!({"name": "x"}),
                field(json!({})),
            );
            all["spec"]["nonResourceAttributes"] = json!({"path": "/x", "verb": "get"});
            all["spec"]["user"] = json!("");
            let mut r = post(&admin, sar_path, &all).await;
            mask_quoted_times(&mut r.body);
            t.record("every error", r.record());
            let mut local = lsar(json!({"name": "x"}), label(json!({})));
            local["spec"]["resourceAttributes"]["namespace"] = json!("other");
            let mut r = post(&admin, &lsar_path, &local).await;
            mask_quoted_times(&mut r.body);
            t.record("every local error", r.record());
            // A TokenReview's metadata is not validated: answered as the
            // create handler left it (system fields wiped, namespace
            // cleared), the spec as decoded.
            let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "metadata": {"name": "kept", "namespace": ns, "labels": {"a": "b"}, "annotations": {},
                    "uid": "6a3f7a52-7d5e-4bfa-9a43-1b2f34c3a111", "generation": 2},
                "spec": {"token": "two words", "audiences": [], "unknown": 1}});
            let r = post(&admin, "/apis/authentication.k8s.io/v1/tokenreviews", &tr).await;
            t.record("a TokenReview with metadata", r.record());
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

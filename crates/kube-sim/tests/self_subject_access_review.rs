//! SelfSubjectAccessReview (authorization.k8s.io/v1): "may I?", answered
//! for the user the request authenticates as, by the stored RBAC objects;
//! listed in discovery as upstream lists it.

mod common;

use common::conform;
use common::differential::{delete, get, post};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube_sim::SimConfig;
use serde_json::json;

const MANAGER: &str = "system:serviceaccount:pm:manager";

async fn may(client: &kube::Client, verb: &str, resource: &str) -> (bool, String) {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let out = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("create the review");
    let s = out.status.expect("status");
    (s.allowed, s.reason.unwrap_or_default())
}

/// Judged by the real kube-apiserver 1.36 too (`common::conform`): the
/// answers, the reasons and the 422 must be the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_access_review_answers_for_the_requester() {
    conform(
        "self_subject_access_review_answers_for_the_requester",
        SimConfig::default(),
        async |t| {
            let admin = t.client.clone();
            let manager = t.client_as(MANAGER).await;
            let denied = may(&manager, "list", "secrets").await;
            assert!(!denied.0, "{denied:?}");
            t.record("nothing bound", json!(denied));
            assert!(may(&admin, "list", "secrets").await.0, "system:masters");

            let (role_name, binding_name) = (t.unique("read-secrets"), t.unique("manager-reads"));
            let role: ClusterRole = serde_json::from_value(json!({
                "metadata": {"name": role_name},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
            }))
            .unwrap();
            Api::<ClusterRole>::all(admin.clone())
                .create(&PostParams::default(), &role)
                .await
                .unwrap();
            let binding: ClusterRoleBinding = serde_json::from_value(json!({
                "metadata": {"name": binding_name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
                "subjects": [{"kind": "ServiceAccount", "name": "manager", "namespace": "pm"}],
            }))
            .unwrap();
            Api::<ClusterRoleBinding>::all(admin.clone())
                .create(&PostParams::default(), &binding)
                .await
                .unwrap();
            // RBAC bindings reach the real authorizer through its informer.
            let (allowed, reason) = common::eventually("the binding is in effect", async || {
                let r = may(&manager, "list", "secrets").await;
                r.0.then_some(r)
            })
            .await;
            assert!(
                reason.starts_with(&format!(
                    r#"RBAC: allowed by ClusterRoleBinding "{binding_name}" of ClusterRole "{role_name}" to ServiceAccount "#
                )),
                "{reason}"
            );
            t.record("bound", json!([allowed, reason]));
            let other = may(&manager, "patch", "secrets").await;
            assert!(!other.0);
            t.record("another verb", json!(other));

            // Neither attribute: refused as upstream's validation refuses it.
            let r = post(
                &t.client,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}),
            )
            .await;
            assert_eq!(r.code, 422, "{:?}", r.body);
            assert_eq!(
                r.body["message"],
                r#".authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"#
            );
            t.record("neither attribute", r.record());
            for p in [
                format!("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding_name}"),
                format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{role_name}"),
            ] {
                let _ = delete(&t.client, &p).await;
            }
        },
    )
    .await;
}

/// The discovery entry of `resource` in an APIResourceList.
fn entry(list: &serde_json::Value, resource: &str) -> serde_json::Value {
    list["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == resource))
        .cloned()
        .unwrap_or_else(|| panic!("{resource} is not listed: {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_the_review_resources_as_create_only() {
    conform(
        "discovery_lists_the_review_resources_as_create_only",
        SimConfig::default(),
        async |t| {
            let r = get(&t.client, "/apis/authorization.k8s.io/v1").await;
            assert_eq!(r.code, 200, "{:?}", r.body);
            let ssar = entry(&r.body, "selfsubjectaccessreviews");
            assert_eq!(ssar["kind"], "SelfSubjectAccessReview");
            assert_eq!(ssar["namespaced"], false);
            assert_eq!(ssar["verbs"], json!(["create"]));
            // The entries of the resources kube-sim serves that nothing
            // stores.
            for (gv, resource) in [
                ("/apis/authorization.k8s.io/v1", "selfsubjectaccessreviews"),
                ("/apis/authorization.k8s.io/v1", "subjectaccessreviews"),
                ("/apis/authorization.k8s.io/v1", "localsubjectaccessreviews"),
                ("/apis/authorization.k8s.io/v1", "selfsubjectrulesreviews"),
                ("/apis/authentication.k8s.io/v1", "tokenreviews"),
                ("/apis/authentication.k8s.io/v1", "selfsubjectreviews"),
                ("/api/v1", "bindings"),
                ("/api/v1", "componentstatuses"),
            ] {
                let r = get(&t.client, gv).await;
                assert_eq!(r.code, 200, "{gv}: {:?}", r.body);
                t.record(resource, entry(&r.body, resource));
            }
            // The order of a group's resources, too.
            for gv in [
                "/apis/authorization.k8s.io/v1",
                "/apis/authentication.k8s.io/v1",
            ] {
                let r = get(&t.client, gv).await;
                let names: Vec<&serde_json::Value> = r.body["resources"]
                    .as_array()
                    .map(|rs| rs.iter().map(|e| &e["name"]).collect())
                    .unwrap_or_default();
                t.record(gv, json!(names));
            }
        },
    )
    .await;
}

/// A SelfSubjectAccessReview answered by the bootstrap policy: every
/// authenticated user may create its own reviews and read `/healthz` (the
/// reason of the latter names either of two bindings on the real server,
/// whose authorizer visits them in its informer's order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_access_review_applies_the_bootstrap_policy() {
    conform(
        "self_subject_access_review_applies_the_bootstrap_policy",
        SimConfig::default(),
        async |t| {
            let manager = t.client_as(MANAGER).await;
            let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
            let ssar = |attrs: serde_json::Value| {
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": attrs})
            };
            for (label, attrs) in [
                ("create self rules reviews", json!({"resourceAttributes": {"verb": "create",
                    "group": "authorization.k8s.io", "resource": "selfsubjectrulesreviews"}})),
                ("create self reviews", json!({"resourceAttributes": {"verb": "create",
                    "group": "authentication.k8s.io", "resource": "selfsubjectreviews"}})),
                ("get /apis", json!({"nonResourceAttributes": {"verb": "get", "path": "/apis"}})),
                ("get /.well-known/openid-configuration", json!({"nonResourceAttributes":
                    {"verb": "get", "path": "/.well-known/openid-configuration"}})),
                ("not get /metrics", json!({"nonResourceAttributes": {"verb": "get", "path": "/metrics"}})),
            ] {
                let r = post(&manager, path, &ssar(attrs)).await;
                assert_eq!(r.code, 201, "{label}: {:?}", r.body);
                t.record(label, r.body["status"].clone());
            }
            let r = post(&manager, path, &ssar(json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}}))).await;
            assert_eq!(r.body.pointer("/status/allowed"), Some(&json!(true)), "{:?}", r.body);
            t.record("get /healthz", r.body["status"]["allowed"].clone());
            // Both attributes: upstream's validation prints the internal struct.
            let r = post(
                &manager,
                path,
                &ssar(json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"},
                    "resourceAttributes": {"verb": "get", "resource": "pods"}})),
            )
            .await;
            assert_eq!(r.code, 422, "{:?}", r.body);
            t.record("both attributes", r.record());
        },
    )
    .await;
}

/// The rules of a SelfSubjectRulesReview, sorted: their order is not part
/// of the answer (the real server visits ClusterRoleBindings in its
/// informer's map order).
fn sorted_rules(mut status: serde_json::Value) -> serde_json::Value {
    for k in ["resourceRules", "nonResourceRules"] {
        if let Some(rules) = status[k].as_array_mut() {
            rules.sort_by_key(|r| r.to_string());
        }
    }
    status
}

/// SelfSubjectRulesReview (pkg/registry/authorization/
/// selfsubjectrulesreview): the rules RBAC gives the requester in a
/// namespace (the bootstrap policy's, its ClusterRoleBindings' and the
/// namespace's RoleBindings'), a missing role as an evaluation error, not
/// incomplete; a new object (no spec, no metadata) as the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_rules_review_lists_the_requesters_rules() {
    conform(
        "self_subject_rules_review_lists_the_requesters_rules",
        SimConfig::default(),
        async |t| {
            let admin = t.client.clone();
            let ns = t.namespace("rules").await;
            let user = format!("system:serviceaccount:{ns}:reader");
            let reader = t.client_as(&user).await;
            let path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
            let review = |namespace: &str| {
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                    "metadata": {"name": "ignored"}, "spec": {"namespace": namespace}})
            };
            let before = post(&reader, path, &review(&ns)).await;
            assert_eq!(before.code, 201, "{:?}", before.body);
            assert_eq!(before.body["status"]["incomplete"], json!(false));
            let mut before_record = before.record();
            before_record["body"]["status"] = sorted_rules(before.body["status"].clone());
            t.record("only the bootstrap policy", before_record);

            let rbac = "/apis/rbac.authorization.k8s.io/v1";
            for (p, body) in [
                (format!("{rbac}/namespaces/{ns}/roles"), json!({"metadata": {"name": "reader"},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "resourceNames": ["a"], "verbs": ["get", "watch"]},
                              {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]}]})),
                (format!("{rbac}/namespaces/{ns}/rolebindings"), json!({"metadata": {"name": "reader"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                    "subjects": [{"kind": "ServiceAccount", "name": "reader"}]})),
                (format!("{rbac}/namespaces/{ns}/rolebindings"), json!({"metadata": {"name": "metrics"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:monitoring"},
                    "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]})),
                (format!("{rbac}/namespaces/{ns}/rolebindings"), json!({"metadata": {"name": "broken"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "missing"},
                    "subjects": [{"kind": "ServiceAccount", "name": "reader"}]})),
            ] {
                let r = post(&admin, &p, &body).await;
                assert_eq!(r.code, 201, "{p}: {:?}", r.body);
            }
            let after = common::eventually("the role bindings are in effect", async || {
                let r = post(&reader, path, &review(&ns)).await;
                let rules = r.body["status"]["resourceRules"].as_array().map_or(0, Vec::len);
                let seen = r.body["status"]["evaluationError"].is_string()
                    && rules > before.body["status"]["resourceRules"].as_array().map_or(0, Vec::len) + 2;
                seen.then_some(r)
            })
            .await;
            let mut after_record = after.record();
            after_record["body"]["status"] = sorted_rules(after.body["status"].clone());
            t.record("with the role bindings", after_record);
            // Another namespace: none of the RoleBindings.
            let other = post(&reader, path, &review("default")).await;
            t.record("another namespace", json!(sorted_rules(other.body["status"].clone())));
            // system:masters: cluster-admin's rules.
            let admin_rules = post(&admin, path, &review(&ns)).await;
            t.record("system:masters", json!(sorted_rules(admin_rules.body["status"].clone())));

            // A node: the Node authorizer cannot list its rules.
            let node = t.client_as("system:node:rules-node").await;
            let r = post(&node, path, &review(&ns)).await;
            assert_eq!(r.body["status"]["incomplete"], json!(true), "{:?}", r.body);
            t.record("a node", json!(sorted_rules(r.body["status"].clone())));

            let r = post(&reader, path, &review("")).await;
            assert_eq!(r.code, 400, "{:?}", r.body);
            t.record("no namespace", r.record());
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// The bootstrap bindings of the components' users (kube-proxy, the
/// controller manager, the scheduler, kube-dns' service account): the rules
/// each has, as the real server lists them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_rules_review_lists_the_components_bootstrap_rules() {
    conform(
        "self_subject_rules_review_lists_the_components_bootstrap_rules",
        SimConfig::default(),
        async |t| {
            let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": "default"}});
            for user in [
                "system:kube-proxy",
                "system:kube-controller-manager",
                "system:kube-scheduler",
                "system:serviceaccount:kube-system:kube-dns",
            ] {
                let client = t.client_as(user).await;
                let r = post(
                    &client,
                    "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                    &review,
                )
                .await;
                assert_eq!(r.code, 201, "{user}: {:?}", r.body);
                t.record(user, sorted_rules(r.body["status"].clone()));
            }
        },
    )
    .await;
}

/// The credential id upstream's x509 authenticator gives the client
/// certificate of `kubeconfig` (`X509SHA256=` and the hex SHA-256 of its
/// DER).
fn x509_credential_id(kubeconfig: &std::path::Path) -> String {
    use base64::Engine as _;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let yaml = std::fs::read_to_string(kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    let data = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-certificate-data: "))
        .unwrap_or_else(|| panic!("{} has no client certificate", kubeconfig.display()));
    let pem = String::from_utf8(b64.decode(data.trim()).expect("base64")).expect("PEM");
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let der = b64.decode(body).expect("the certificate's base64");
    let digest = ring::digest::digest(&ring::digest::SHA256, &der);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("X509SHA256={hex}")
}

/// SelfSubjectReview (authentication.k8s.io/v1): the requester's user
/// info, in a new object (the request's metadata is not kept). Both
/// servers authenticate a client certificate (kube-sim's
/// `SimConfig::client_certificates`), and `extra` holds its credential id,
/// the SHA-256 of the certificate each server's client presented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_review_answers_the_requesters_user_info() {
    conform(
        "self_subject_review_answers_the_requesters_user_info",
        SimConfig {
            client_certificates: true,
            ..SimConfig::default()
        },
        async |t| {
            let path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
            let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                "metadata": {"name": "ignored", "labels": {"a": "b"}}});
            for (label, kubeconfig) in [
                ("a service account", t.kubeconfig_as(MANAGER)),
                ("a user", t.kubeconfig_as("alice")),
                ("a node", t.kubeconfig_as("system:node:who-am-i")),
                ("system:masters", t.kubeconfig.clone()),
            ] {
                let client = common::differential::client_from(&kubeconfig).await;
                let mut r = post(&client, path, &body).await;
                assert_eq!(r.code, 201, "{label}: {:?}", r.body);
                let id = x509_credential_id(&kubeconfig);
                let extra = &mut r.body["status"]["userInfo"]["extra"];
                assert_eq!(
                    *extra,
                    json!({"authentication.kubernetes.io/credential-id": [id]}),
                    "{label}"
                );
                // Each server's client has a certificate of its own.
                *extra = json!({"authentication.kubernetes.io/credential-id":
                    ["X509SHA256=<the SHA-256 of the client certificate>"]});
                t.record(label, r.record());
            }
        },
    )
    .await;
}

/// The authenticator's extra reaches admission: a ValidatingAdmissionPolicy
/// sees the client certificate's credential id in `request.userInfo.extra`
/// (an impersonated user has only the extra it asks for: here none, and
/// `request.userInfo` then has no `extra` at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_sees_the_client_certificates_credential_id() {
    conform(
        "admission_sees_the_client_certificates_credential_id",
        SimConfig {
            client_certificates: true,
            ..SimConfig::default()
        },
        async |t| {
            let admin = common::differential::client_from(&t.kubeconfig).await;
            let ns = t.namespace("credential-id").await;
            let (policy, binding) = (t.unique("credential-id"), t.unique("credential-id"));
            let key = "authentication.kubernetes.io/credential-id";
            let r = post(&admin, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
                &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                    "metadata": {"name": policy},
                    "spec": {"failurePolicy": "Fail",
                        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                            "operations": ["CREATE"], "resources": ["configmaps"]}]},
                        "validations": [{
                            "expression": format!("!has(request.userInfo.extra) || !('{key}' in request.userInfo.extra)"),
                            "messageExpression": format!("'a credential id of ' + string(size(request.userInfo.extra['{key}'][0])) + ' characters, starting ' + request.userInfo.extra['{key}'][0].substring(0, 11)"),
                        }]}})).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            let r = post(&admin, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
                &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": binding},
                    "spec": {"policyName": policy, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}})).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            let path = format!("/api/v1/namespaces/{ns}/configmaps");
            let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
            // The real server's policy informer takes a moment.
            let mut n = 0;
            common::eventually("the policy is in effect", async || {
                n += 1;
                let r = post(&admin, &path, &cm(&format!("probe-{n}"))).await;
                (r.code != 201).then_some(())
            })
            .await;
            let r = post(&admin, &path, &cm("by-certificate")).await;
            let message = r.body["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("a credential id of 75 characters, starting X509SHA256="),
                "{:?}",
                r.body
            );
            t.record("the certificate's requester", r.record());
            let r = common::differential::call_with(&admin, "POST", &path, "application/json",
                &cm("impersonated").to_string(),
                &[("Impersonate-User", "someone"), ("Impersonate-Group", "system:masters")]).await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.record("an impersonated user", json!({"code": r.code, "name": r.body["metadata"]["name"]}));
            let _ = delete(&admin, &format!("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{binding}")).await;
            let _ = delete(&admin, &format!("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{policy}")).await;
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

/// A length-delimited protobuf field (every length here is below 128).
fn pb(n: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![(n << 3) | 2, payload.len() as u8];
    v.extend_from_slice(payload);
    v
}

/// A `k8s\0`-enveloped protobuf body of `kind`: empty metadata, then `spec`
/// (field 2) unless it is empty.
fn pb_body(api_version: &str, kind: &str, spec: &[u8]) -> String {
    let type_meta = [pb(1, api_version.as_bytes()), pb(2, kind.as_bytes())].concat();
    let mut object = pb(1, &[]);
    if !spec.is_empty() {
        object.extend(pb(2, spec));
    }
    let body = [b"k8s\x00".to_vec(), pb(1, &type_meta), pb(2, &object)].concat();
    String::from_utf8(body).expect("short protobuf bodies are ASCII")
}

/// What kubectl auth can-i sends: the reviews as protobuf (the answers in
/// JSON, as asked). Judged by the real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_sent_as_protobuf_are_answered_alike() {
    use common::differential::call;
    conform(
        "reviews_sent_as_protobuf_are_answered_alike",
        SimConfig::default(),
        async |t| {
            let manager = t.client_as(MANAGER).await;
            let proto = "application/vnd.kubernetes.protobuf";
            // kubectl auth can-i create selfsubjectreviews.authentication.k8s.io
            let attrs = [
                pb(2, b"create"),
                pb(3, b"authentication.k8s.io"),
                pb(5, b"selfsubjectreviews"),
            ]
            .concat();
            let body = pb_body(
                "authorization.k8s.io/v1",
                "SelfSubjectAccessReview",
                &pb(1, &attrs),
            );
            let r = call(
                &manager,
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                proto,
                &body,
            )
            .await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.record("can-i", r.body["status"].clone());
            // kubectl auth can-i --list -n default
            let body = pb_body(
                "authorization.k8s.io/v1",
                "SelfSubjectRulesReview",
                &pb(1, b"default"),
            );
            let r = call(
                &manager,
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
                proto,
                &body,
            )
            .await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            t.record("can-i --list", sorted_rules(r.body["status"].clone()));
            // kubectl auth whoami
            let body = pb_body("authentication.k8s.io/v1", "SelfSubjectReview", &[]);
            let mut r = call(
                &manager,
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                proto,
                &body,
            )
            .await;
            assert_eq!(r.code, 201, "{:?}", r.body);
            if let Some(u) = r.body["status"]["userInfo"].as_object_mut() {
                u.remove("extra");
            }
            t.record("whoami", r.record());
        },
    )
    .await;
}

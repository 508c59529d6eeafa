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
            // stores (kube-sim serves neither LocalSubjectAccessReview,
            // SelfSubjectRulesReview nor SelfSubjectReview).
            for (gv, resource) in [
                ("/apis/authorization.k8s.io/v1", "selfsubjectaccessreviews"),
                ("/apis/authorization.k8s.io/v1", "subjectaccessreviews"),
                ("/apis/authentication.k8s.io/v1", "tokenreviews"),
                ("/api/v1", "bindings"),
                ("/api/v1", "componentstatuses"),
            ] {
                let r = get(&t.client, gv).await;
                assert_eq!(r.code, 200, "{gv}: {:?}", r.body);
                t.record(resource, entry(&r.body, resource));
            }
        },
    )
    .await;
}

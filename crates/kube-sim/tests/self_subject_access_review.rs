//! SelfSubjectAccessReview (authorization.k8s.io/v1): "may I?", answered
//! for the user the request authenticates as, by the stored RBAC objects;
//! listed in discovery as upstream lists it.

mod common;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use kube_sim::{KubeSim, SimConfig};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_subject_access_review_answers_for_the_requester() {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let admin = sim.client().await;
    let manager = sim.client_as(MANAGER).await;
    assert_eq!(
        may(&manager, "list", "secrets").await,
        (false, String::new())
    );
    assert!(may(&admin, "list", "secrets").await.0, "system:masters");

    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "read-secrets"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "manager-reads-secrets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "read-secrets"},
        "subjects": [{"kind": "ServiceAccount", "name": "manager", "namespace": "pm"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let (allowed, reason) = may(&manager, "list", "secrets").await;
    assert!(allowed);
    assert!(
        reason.starts_with(
            r#"RBAC: allowed by ClusterRoleBinding "manager-reads-secrets" of ClusterRole "read-secrets" to ServiceAccount "#
        ),
        "{reason}"
    );
    assert!(!may(&manager, "patch", "secrets").await.0);

    // Neither attribute: refused as upstream's validation refuses it.
    let (code, body) = common::raw(
        &sim,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "application/json",
        r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{}}"#,
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status["message"],
        r#".authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified"#
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_the_review_resources_as_create_only() {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let (code, body) = common::raw(
        &sim,
        "GET",
        "/apis/authorization.k8s.io/v1",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ssar = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "selfsubjectaccessreviews")
        .cloned()
        .expect("listed");
    assert_eq!(ssar["kind"], "SelfSubjectAccessReview");
    assert_eq!(ssar["namespaced"], false);
    assert_eq!(ssar["verbs"], json!(["create"]));
    sim.shutdown().await;
}

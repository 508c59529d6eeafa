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
use kube_sim::{KubeSim, RequestFilter, SimConfig};
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

fn api_error(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn token_review_authenticates_kube_sim_tokens() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("start");
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

    // Not a kube-sim token: answered, not authenticated.
    let tr = token_review(&client, "two words").await.expect("review");
    let status = tr.status.expect("status");
    assert_ne!(status.authenticated, Some(true));
    assert!(
        status
            .error
            .is_some_and(|e| e.contains("invalid bearer token"))
    );

    // pkg/registry/authentication/tokenreview: an empty token is a 400.
    let (code, message) = api_error(token_review(&client, "").await.unwrap_err());
    assert_eq!(
        (code, message.as_str()),
        (400, "token is required for TokenReview in authentication")
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
    sim.shutdown().await;
}

#[tokio::test]
async fn subject_access_review_evaluates_rbac() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("start");
    let admin = sim.client().await;
    let prometheus = "system:serviceaccount:monitoring:prometheus";
    let sa_groups = [
        "system:serviceaccounts",
        "system:serviceaccounts:monitoring",
        "system:authenticated",
    ];

    // Nothing bound yet: denied.
    let (allowed, _) = review(&admin, &metrics_review(prometheus, &sa_groups))
        .await
        .expect("review");
    assert!(!allowed);

    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    }))
    .expect("role");
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");

    let (allowed, reason) = review(&admin, &metrics_review(prometheus, &sa_groups))
        .await
        .expect("review");
    assert!(allowed);
    // describeSubject writes a ServiceAccount "name/namespace".
    assert_eq!(
        reason,
        "RBAC: allowed by ClusterRoleBinding \"metrics-reader\" of ClusterRole \"metrics-reader\" to ServiceAccount \"prometheus/monitoring\""
    );
    // Another verb, another path, another account: denied.
    let mut post = metrics_review(prometheus, &sa_groups);
    if let Some(n) = post.spec.non_resource_attributes.as_mut() {
        n.verb = Some("post".into());
    }
    assert!(!review(&admin, &post).await.expect("review").0);
    let mut healthz = metrics_review(prometheus, &sa_groups);
    if let Some(n) = healthz.spec.non_resource_attributes.as_mut() {
        n.path = Some("/healthz".into());
    }
    assert!(!review(&admin, &healthz).await.expect("review").0);
    let other = metrics_review("system:serviceaccount:monitoring:other", &sa_groups);
    assert!(!review(&admin, &other).await.expect("review").0);
    // system:masters may do everything.
    assert!(
        review(&admin, &metrics_review("admin", &["system:masters"]))
            .await
            .expect("review")
            .0
    );

    // Resource attributes: a Role in a namespace, by name.
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "shop"}})).expect("ns");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "status-writer", "namespace": "shop"},
        "rules": [{"apiGroups": [""], "resources": ["services/status"], "resourceNames": ["web"], "verbs": ["patch"]}]
    }))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), "shop")
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "status-writer", "namespace": "shop"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status-writer"},
        "subjects": [{"kind": "User", "name": "alice"}]
    }))
    .expect("rb");
    Api::<RoleBinding>::namespaced(admin.clone(), "shop")
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
    let (allowed, reason) = review(&admin, &resource("shop", "web"))
        .await
        .expect("review");
    assert!(allowed);
    assert_eq!(
        reason,
        "RBAC: allowed by RoleBinding \"status-writer/shop\" of Role \"status-writer\" to User \"alice\""
    );
    assert!(
        !review(&admin, &resource("shop", "api"))
            .await
            .expect("review")
            .0
    );
    assert!(
        !review(&admin, &resource("other", "web"))
            .await
            .expect("review")
            .0
    );

    // pkg/apis/authorization/validation.
    let neither = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("alice".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let (code, message) = api_error(review(&admin, &neither).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(
        message.contains(
            "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        ),
        "{message}"
    );
    let nobody = metrics_review("", &[]);
    let (code, message) = api_error(review(&admin, &nobody).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(
        message.contains("at least one of user or group must be specified"),
        "{message}"
    );
    sim.shutdown().await;
}

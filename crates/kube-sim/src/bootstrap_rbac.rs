//! The part of upstream's bootstrap RBAC policy
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go) that applies
//! to the users kube-sim authenticates: the ClusterRoleBindings to groups
//! (`system:authenticated`, `system:unauthenticated`,
//! `system:serviceaccounts`, `system:masters`, `system:monitoring`) and their
//! ClusterRoles. A real kube-apiserver stores them at start; kube-sim does
//! not store them (a list of ClusterRoles shows only what was created) but
//! its authorizer evaluates them before the stored bindings, so a
//! SubjectAccessReview, SelfSubjectAccessReview or SelfSubjectRulesReview
//! answers as the real server's does (every authenticated user may get
//! `/healthz`, `/version`, the discovery paths and create its own reviews).
//!
//! Not here: the bindings to single users or service accounts
//! (`system:kube-controller-manager`, `system:kube-scheduler`,
//! `system:volume-scheduler`, `system:node-proxier`, `system:kube-dns`,
//! the `system:controller:*` roles), the aggregated `admin`, `edit`, `view`
//! and the roles nothing binds.

use std::sync::LazyLock;

use serde_json::{Value, json};

/// A bootstrap ClusterRoleBinding of the ClusterRole of the same name.
pub(crate) struct Binding {
    pub name: &'static str,
    /// `Group` subjects, in upstream's order.
    pub groups: &'static [&'static str],
    /// The ClusterRole's rules, as `RuleOrDie` builds them (every list sorted).
    pub rules: Vec<Value>,
}

fn urls(verb: &str, urls: &[&str]) -> Value {
    let mut urls = urls.to_vec();
    urls.sort_unstable();
    json!({"verbs": [verb], "nonResourceURLs": urls})
}

/// The bootstrap ClusterRoleBindings to groups, in policy.go's order.
pub(crate) static BINDINGS: LazyLock<Vec<Binding>> = LazyLock::new(|| {
    vec![
        Binding {
            name: "cluster-admin",
            groups: &["system:masters"],
            rules: vec![
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                urls("*", &["*"]),
            ],
        },
        Binding {
            name: "system:monitoring",
            groups: &["system:monitoring"],
            rules: vec![
                // ComponentFlagz and ComponentStatusz are on by default in 1.36.
                urls(
                    "get",
                    &[
                        "/metrics",
                        "/metrics/slis",
                        "/livez",
                        "/readyz",
                        "/healthz",
                        "/livez/*",
                        "/readyz/*",
                        "/healthz/*",
                        "/flagz",
                        "/statusz",
                    ],
                ),
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["nodes/metrics"]}),
            ],
        },
        Binding {
            name: "system:discovery",
            groups: &["system:authenticated"],
            rules: vec![urls(
                "get",
                &[
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/version",
                    "/version/",
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
            )],
        },
        Binding {
            name: "system:basic-user",
            groups: &["system:authenticated"],
            rules: vec![
                json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
                json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"]}),
            ],
        },
        Binding {
            name: "system:public-info-viewer",
            groups: &["system:authenticated", "system:unauthenticated"],
            rules: vec![urls(
                "get",
                &["/livez", "/readyz", "/healthz", "/version", "/version/"],
            )],
        },
        Binding {
            name: "system:service-account-issuer-discovery",
            groups: &["system:serviceaccounts"],
            rules: vec![urls(
                "get",
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
            )],
        },
    ]
});

/// The rules of the bootstrap ClusterRole `name`, if kube-sim knows it.
pub(crate) fn cluster_role_rules(name: &str) -> Option<&'static [Value]> {
    BINDINGS
        .iter()
        .find(|b| b.name == name)
        .map(|b| b.rules.as_slice())
}

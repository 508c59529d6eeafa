//! Upstream's bootstrap ClusterRoleBindings
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go
//! `ClusterRoleBindings`, with the feature gates of 1.36 at their defaults)
//! and their ClusterRoles: to groups (`system:authenticated`,
//! `system:unauthenticated`, `system:serviceaccounts`, `system:masters`,
//! `system:monitoring`) and to the components' users (`system:kube-proxy`,
//! `system:kube-controller-manager`, `system:kube-scheduler`, the
//! `kube-system/kube-dns` service account). A real kube-apiserver stores them
//! at start; kube-sim does not store them (a list of ClusterRoles shows only
//! what was created) but its authorizer evaluates them before the stored
//! bindings, so a SubjectAccessReview, SelfSubjectAccessReview or
//! SelfSubjectRulesReview answers as the real server's does (every
//! authenticated user may get `/healthz`, `/version`, the discovery paths and
//! create its own reviews).
//!
//! Not here: the controllers' roles and bindings (controller_policy.go,
//! `system:controller:*`), the namespaced bootstrap roles (kube-system,
//! kube-public), the aggregated `admin`, `edit`, `view` and the roles
//! nothing binds.

use std::sync::LazyLock;

use serde_json::{Value, json};

/// A bootstrap ClusterRoleBinding of the ClusterRole of the same name.
pub(crate) struct Binding {
    pub name: &'static str,
    /// Its subjects, in upstream's order.
    pub subjects: Value,
    /// The ClusterRole's rules, as `RuleOrDie` builds them (every list sorted).
    pub rules: Vec<Value>,
}

fn groups(names: &[&str]) -> Value {
    names
        .iter()
        .map(|g| json!({"kind": "Group", "name": g}))
        .collect()
}

fn user(name: &str) -> Value {
    json!([{"kind": "User", "name": name}])
}

fn sorted(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort_unstable();
    v
}

fn urls(verb: &str, urls: &[&str]) -> Value {
    json!({"verbs": [verb], "nonResourceURLs": sorted(urls)})
}

/// `NewRule(verbs...).Groups(groups...).Resources(resources...)`.
fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": sorted(verbs), "apiGroups": sorted(groups), "resources": sorted(resources)})
}

/// The same with `.Names(names...)`.
fn named(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Value {
    let mut r = rule(verbs, groups, resources);
    r["resourceNames"] = json!(sorted(names));
    r
}

const READ: &[&str] = &["get", "list", "watch"];
const READ_UPDATE: &[&str] = &["get", "list", "watch", "update", "patch"];
const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// controller_policy.go `eventsRule`.
fn events() -> Value {
    rule(
        &["create", "update", "patch"],
        &["", "events.k8s.io"],
        &["events"],
    )
}

/// The bootstrap ClusterRoleBindings, in policy.go's order (but the
/// `system:node` binding, which has no subjects).
pub(crate) static BINDINGS: LazyLock<Vec<Binding>> = LazyLock::new(|| {
    vec![
        Binding {
            name: "cluster-admin",
            subjects: groups(&["system:masters"]),
            rules: vec![rule(&["*"], &["*"], &["*"]), urls("*", &["*"])],
        },
        Binding {
            name: "system:monitoring",
            subjects: groups(&["system:monitoring"]),
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
                rule(&["get"], &[""], &["nodes/metrics"]),
            ],
        },
        Binding {
            name: "system:discovery",
            subjects: groups(&["system:authenticated"]),
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
            subjects: groups(&["system:authenticated"]),
            rules: vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        },
        Binding {
            name: "system:public-info-viewer",
            subjects: groups(&["system:authenticated", "system:unauthenticated"]),
            rules: vec![urls(
                "get",
                &["/livez", "/readyz", "/healthz", "/version", "/version/"],
            )],
        },
        Binding {
            name: "system:node-proxier",
            subjects: user("system:kube-proxy"),
            rules: vec![
                rule(&["list", "watch"], &[""], &["services", "endpoints"]),
                rule(READ, &[""], &["nodes"]),
                events(),
                // MultiCIDRServiceAllocator is GA.
                rule(
                    &["list", "watch"],
                    &["networking.k8s.io"],
                    &["servicecidrs"],
                ),
                rule(
                    &["list", "watch"],
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                ),
            ],
        },
        Binding {
            name: "system:kube-controller-manager",
            subjects: user("system:kube-controller-manager"),
            rules: vec![
                events(),
                rule(&["create"], &["coordination.k8s.io"], &["leases"]),
                named(
                    &["get", "update"],
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["kube-controller-manager"],
                ),
                rule(&["create"], &[""], &["secrets", "serviceaccounts"]),
                rule(&["delete"], &[""], &["secrets"]),
                rule(
                    &["get"],
                    &[""],
                    &["namespaces", "secrets", "serviceaccounts", "configmaps"],
                ),
                rule(&["update"], &[""], &["secrets", "serviceaccounts"]),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
            ],
        },
        Binding {
            name: "system:kube-dns",
            subjects: json!([{"kind": "ServiceAccount", "name": "kube-dns", "namespace": "kube-system"}]),
            rules: vec![rule(&["list", "watch"], &[""], &["endpoints", "services"])],
        },
        Binding {
            name: "system:kube-scheduler",
            subjects: user("system:kube-scheduler"),
            rules: vec![
                events(),
                rule(&["create"], &["coordination.k8s.io"], &["leases"]),
                named(
                    &["get", "update", "list", "watch"],
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["kube-scheduler"],
                ),
                rule(READ_WRITE, &["coordination.k8s.io"], &["leasecandidates"]),
                rule(READ, &[""], &["nodes"]),
                rule(&["get", "list", "watch", "delete"], &[""], &["pods"]),
                rule(&["create"], &[""], &["pods/binding", "bindings"]),
                rule(&["patch", "update"], &[""], &["pods/status"]),
                rule(READ, &[""], &["services", "replicationcontrollers"]),
                rule(READ, &["apps", "extensions"], &["replicasets"]),
                rule(READ, &["apps"], &["statefulsets"]),
                rule(READ, &["policy"], &["poddisruptionbudgets"]),
                rule(
                    READ,
                    &[""],
                    &["persistentvolumeclaims", "persistentvolumes"],
                ),
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
                rule(READ, &["storage.k8s.io"], &["csinodes"]),
                rule(READ, &["storage.k8s.io"], &["volumeattachments"]),
                rule(READ, &[""], &["namespaces"]),
                rule(READ, &["storage.k8s.io"], &["csidrivers"]),
                rule(READ, &["storage.k8s.io"], &["csistoragecapacities"]),
                // DynamicResourceAllocation is GA, DRAExtendedResource and
                // DRAResourceClaimGranularStatusAuthorization beta and on;
                // DRADeviceTaintRules and GenericWorkload are off.
                rule(READ, &["resource.k8s.io"], &["deviceclasses"]),
                rule(READ_UPDATE, &["resource.k8s.io"], &["resourceclaims"]),
                rule(
                    READ_UPDATE,
                    &["resource.k8s.io"],
                    &["resourceclaims/status"],
                ),
                rule(&["update"], &[""], &["pods/finalizers"]),
                rule(READ, &["resource.k8s.io"], &["resourceslices"]),
                rule(
                    &["create", "delete"],
                    &["resource.k8s.io"],
                    &["resourceclaims"],
                ),
                rule(
                    &["update", "patch"],
                    &["resource.k8s.io"],
                    &["resourceclaims/binding"],
                ),
            ],
        },
        Binding {
            name: "system:volume-scheduler",
            subjects: user("system:kube-scheduler"),
            rules: vec![
                rule(READ_UPDATE, &[""], &["persistentvolumes"]),
                rule(READ, &["storage.k8s.io"], &["storageclasses"]),
                rule(READ_UPDATE, &[""], &["persistentvolumeclaims"]),
            ],
        },
        Binding {
            name: "system:service-account-issuer-discovery",
            subjects: groups(&["system:serviceaccounts"]),
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

//! A small RBAC authorizer: decides whether a ServiceAccount may make a
//! request, from ClusterRoles, Roles and their bindings, with the matching
//! rules of kube-apiserver (plugin/pkg/auth/authorizer/rbac/rbac.go and
//! pkg/apis/rbac/v1/evaluation_helpers.go: VerbMatches, APIGroupMatches,
//! ResourceMatches incl. `*/subresource`, ResourceNameMatches,
//! NonResourceURLMatches with a trailing `*`; a RoleBinding grants only in its
//! namespace, a ClusterRoleBinding everywhere) plus the bootstrap roles every
//! authenticated user holds.

use serde_json::{Value, json};

/// One PolicyRule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Rule {
    pub fn from_json(v: &Value) -> Rule {
        Rule {
            verbs: strings(&v["verbs"]),
            api_groups: strings(&v["apiGroups"]),
            resources: strings(&v["resources"]),
            resource_names: strings(&v["resourceNames"]),
            non_resource_urls: strings(&v["nonResourceURLs"]),
        }
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    fn allows(&self, a: &Access) -> bool {
        if !self.verb_matches(&a.verb) {
            return false;
        }
        if a.is_resource_request() {
            let combined = if a.subresource.is_empty() {
                a.resource.clone()
            } else {
                format!("{}/{}", a.resource, a.subresource)
            };
            self.api_groups
                .iter()
                .any(|g| g == "*" || *g == a.api_group)
                && self.resources.iter().any(|r| {
                    r == "*"
                        || *r == combined
                        || (!a.subresource.is_empty()
                            && r.strip_prefix("*/") == Some(a.subresource.as_str()))
                })
                && (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
        } else {
            self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == a.path
                    || u.strip_suffix('*')
                        .is_some_and(|prefix| a.path.starts_with(prefix))
            })
        }
    }
}

/// One request as the authorizer sees it (kube-apiserver's RequestInfo).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// Path without the query, for non-resource requests.
    pub path: String,
}

impl Access {
    /// A resource request, e.g. `Access::resource("patch", "", "services/status", "ns", "web")`.
    pub fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Access {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Access {
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    pub fn non_resource(verb: &str, path: &str) -> Access {
        Access {
            verb: verb.into(),
            api_group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.into(),
        }
    }

    pub fn from_record(r: &kube_sim::RequestRecord) -> Access {
        Access {
            verb: r.verb.clone(),
            api_group: r.api_group.clone(),
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            path: r.path.split('?').next().unwrap_or_default().to_string(),
        }
    }

    pub fn is_resource_request(&self) -> bool {
        !self.resource.is_empty()
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.is_resource_request() {
            return write!(f, "{} {}", self.verb, self.path);
        }
        let group = if self.api_group.is_empty() {
            "core"
        } else {
            &self.api_group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        if !self.name.is_empty() {
            write!(f, " {:?}", self.name)?;
        }
        if self.namespace.is_empty() {
            write!(f, " (cluster scope)")
        } else {
            write!(f, " in namespace {}", self.namespace)
        }
    }
}

/// Rules granted through one binding: everywhere, or in one namespace.
#[derive(Debug, Clone)]
struct Grant {
    source: String,
    namespace: Option<String>,
    rules: Vec<Rule>,
}

/// What one ServiceAccount may do.
#[derive(Debug, Clone)]
pub struct Authorizer {
    user: String,
    grants: Vec<Grant>,
}

/// The bootstrap ClusterRoles bound to `system:authenticated`
/// (bootstrappolicy/policy.go: system:discovery, system:public-info-viewer,
/// system:basic-user).
fn bootstrap_rules() -> Vec<Rule> {
    [
        json!({"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"]}),
        json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
        json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]}),
    ]
    .iter()
    .map(Rule::from_json)
    .collect()
}

impl Authorizer {
    /// The grants of ServiceAccount `namespace/name` in `objects` (any mix of
    /// kinds; only RBAC kinds are read), plus the bootstrap roles.
    pub fn for_service_account<'a>(
        objects: impl IntoIterator<Item = &'a Value>,
        namespace: &str,
        name: &str,
    ) -> Authorizer {
        let objects: Vec<&Value> = objects.into_iter().collect();
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let groups = [
            "system:authenticated".to_string(),
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
        ];
        let applies = |binding: &Value| {
            let binding_ns = binding["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default();
            binding["subjects"].as_array().is_some_and(|subjects| {
                subjects.iter().any(|s| match s["kind"].as_str() {
                    Some("ServiceAccount") => {
                        // A RoleBinding's ServiceAccount subject defaults to
                        // the binding's namespace.
                        let ns = s["namespace"].as_str().unwrap_or(binding_ns);
                        s["name"] == name && ns == namespace
                    }
                    Some("User") => s["name"] == user.as_str(),
                    Some("Group") => groups.iter().any(|g| s["name"] == g.as_str()),
                    _ => false,
                })
            })
        };
        let role_rules = |kind: &str, role: &str, ns: Option<&str>| -> Vec<Rule> {
            objects
                .iter()
                .filter(|o| {
                    o["kind"] == kind
                        && o["metadata"]["name"] == role
                        && ns.is_none_or(|ns| o["metadata"]["namespace"] == ns)
                })
                .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
                .map(|r| Rule::from_json(&r))
                .collect()
        };
        let mut grants = vec![Grant {
            source: "bootstrap roles of system:authenticated".into(),
            namespace: None,
            rules: bootstrap_rules(),
        }];
        for b in &objects {
            let kind = b["kind"].as_str().unwrap_or_default();
            if kind != "ClusterRoleBinding" && kind != "RoleBinding" {
                continue;
            }
            if !applies(b) {
                continue;
            }
            let role_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
            let role = b["roleRef"]["name"].as_str().unwrap_or_default();
            let binding_name = b["metadata"]["name"].as_str().unwrap_or_default();
            if kind == "ClusterRoleBinding" {
                if role_kind == "ClusterRole" {
                    grants.push(Grant {
                        source: format!("ClusterRoleBinding {binding_name} -> ClusterRole {role}"),
                        namespace: None,
                        rules: role_rules("ClusterRole", role, None),
                    });
                }
            } else {
                let ns = b["metadata"]["namespace"].as_str().unwrap_or_default();
                let rules = match role_kind {
                    "Role" => role_rules("Role", role, Some(ns)),
                    "ClusterRole" => role_rules("ClusterRole", role, None),
                    _ => Vec::new(),
                };
                grants.push(Grant {
                    source: format!("RoleBinding {ns}/{binding_name} -> {role_kind} {role}"),
                    namespace: Some(ns.to_string()),
                    // Non-resource rules in a RoleBinding grant nothing.
                    rules: rules
                        .into_iter()
                        .filter(|r| r.non_resource_urls.is_empty())
                        .collect(),
                });
            }
        }
        Authorizer { user, grants }
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    /// The binding that allows `a`, or None.
    pub fn allowed_by(&self, a: &Access) -> Option<String> {
        self.grants
            .iter()
            .filter(|g| {
                g.namespace
                    .as_deref()
                    .is_none_or(|ns| a.is_resource_request() && a.namespace == ns)
            })
            .find(|g| g.rules.iter().any(|r| r.allows(a)))
            .map(|g| g.source.clone())
    }

    pub fn allows(&self, a: &Access) -> bool {
        self.allowed_by(a).is_some()
    }
}

//! `TokenReview` (authentication.k8s.io/v1) and `SubjectAccessReview`
//! (authorization.k8s.io/v1): the create-only review resources a component
//! uses to delegate authentication and authorization to the API server
//! (kube-controller-manager's and controller-runtime's secure metrics).
//!
//! Authentication is kube-sim's own: the bearer token is the user name
//! (printable ASCII without spaces; anything else is not a kube-sim token).
//! Every user is in `system:authenticated`; `system:serviceaccount:<ns>:<sa>`
//! also in `system:serviceaccounts` and `system:serviceaccounts:<ns>`; the
//! user `admin` of kube-sim's own kubeconfig in `system:masters`.
//!
//! Authorization is RBAC over the stored ClusterRoles, Roles and their
//! bindings (pkg/registry/rbac/validation: `appliesTo`, `RuleAllows`), plus
//! `system:masters`, which may do everything. kube-sim itself does not enforce
//! RBAC on requests; a SubjectAccessReview answers what a real server would.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::http::{RespBody, State};
use crate::resources;

/// Bound on a review's body (a token and a few attributes).
const MAX_BODY: usize = 1 << 20;
/// The audiences of kube-sim's tokens (the API server's default).
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The review resources kube-sim serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Review {
    Token,
    SubjectAccess,
    SelfSubjectAccess,
}

impl Review {
    /// The review a path addresses (`/apis/<group>/v1/<resource>`).
    pub(crate) fn of_path(path: &str) -> Option<Review> {
        match path.trim_end_matches('/') {
            "/apis/authentication.k8s.io/v1/tokenreviews" => Some(Review::Token),
            "/apis/authorization.k8s.io/v1/subjectaccessreviews" => Some(Review::SubjectAccess),
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" => {
                Some(Review::SelfSubjectAccess)
            }
            _ => None,
        }
    }

    pub(crate) fn group(self) -> &'static str {
        match self {
            Review::Token => "authentication.k8s.io",
            Review::SubjectAccess | Review::SelfSubjectAccess => "authorization.k8s.io",
        }
    }

    pub(crate) fn resource(self) -> &'static str {
        match self {
            Review::Token => "tokenreviews",
            Review::SubjectAccess => "subjectaccessreviews",
            Review::SelfSubjectAccess => "selfsubjectaccessreviews",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Review::Token => "TokenReview",
            Review::SubjectAccess => "SubjectAccessReview",
            Review::SelfSubjectAccess => "SelfSubjectAccessReview",
        }
    }
}

/// Serves a POST of a review (anything else: 405, as upstream's create-only
/// storage answers).
pub(crate) async fn handle(
    state: &Arc<State>,
    req: Request<Incoming>,
    review: Review,
) -> Result<Response<RespBody>, ApiError> {
    if req.method() != http::Method::POST {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({})",
                review.resource()
            ),
        ));
    }
    let requester = crate::self_review::requester(&req);
    // The create handler's field manager: `fieldManager` or the user
    // agent's program name, "unknown" without either.
    let query = form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "fieldManager")
        .map(|(_, v)| v.into_owned());
    let ua = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let manager = query
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| crate::patch::manager_from_user_agent(ua));
    let manager = if manager.is_empty() {
        "unknown".to_string()
    } else {
        manager
    };
    let body = http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::new(413, "RequestEntityTooLarge", e.to_string()))?
        .to_bytes();
    let mut obj: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            400,
            "BadRequest",
            format!("the body of the request was in an unknown format: {e}"),
        )
    })?;
    let want_version = format!("{}/v1", review.group());
    if let Some(v) = obj.get("apiVersion").and_then(Value::as_str)
        && v != want_version
    {
        return Err(ApiError::new(
            400,
            "BadRequest",
            format!(
                "the API version in the data ({v}) does not match the expected API version ({want_version})"
            ),
        ));
    }
    let status = match review {
        Review::Token => token_review(&obj)?,
        Review::SubjectAccess => subject_access_review(state, &obj)?,
        Review::SelfSubjectAccess => {
            crate::self_review::self_subject_access_review(state, &requester, &obj)?
        }
    };
    let meta = obj
        .get("metadata")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(want_version));
        m.insert("kind".into(), json!(review.kind()));
        m.insert("metadata".into(), meta);
        m.remove("status");
    }
    // As for any create, the answer carries the managedFields of the
    // request (the status is the server's).
    crate::patch::track_update(
        None,
        &mut obj,
        &manager,
        None,
        &crate::object::now_string(),
        &want_version,
    );
    if let Some(m) = obj.as_object_mut() {
        m.insert("status".into(), status);
    }
    let mut r = Response::new(RespBody::Full(Some(Bytes::from(obj.to_string()))));
    *r.status_mut() = http::StatusCode::CREATED;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

/// The user a kube-sim token names, with its groups; `None` if it is not a
/// kube-sim token.
pub(crate) fn authenticate(token: &str) -> Option<(String, Vec<String>)> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let mut groups = Vec::new();
    if token == "admin" {
        groups.push("system:masters".to_string());
    }
    if let Some(rest) = token.strip_prefix("system:serviceaccount:")
        && let Some((ns, sa)) = rest.split_once(':')
        && !ns.is_empty()
        && !sa.is_empty()
    {
        groups.push("system:serviceaccounts".to_string());
        groups.push(format!("system:serviceaccounts:{ns}"));
    }
    groups.push("system:authenticated".to_string());
    Some((token.to_string(), groups))
}

fn token_review(obj: &Value) -> Result<Value, ApiError> {
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        // pkg/registry/authentication/tokenreview/storage.go
        return Err(ApiError::new(
            400,
            "BadRequest",
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences = strings(&spec, "audiences");
    match authenticate(token) {
        Some((user, groups)) => {
            let audiences = if audiences.is_empty() {
                vec![API_AUDIENCE.to_string()]
            } else {
                audiences
            };
            Ok(json!({
                "authenticated": true,
                "user": {"username": user, "groups": groups},
                "audiences": audiences,
            }))
        }
        None => Ok(json!({
            "user": {},
            // What a 1.36 server whose authenticators do not know the
            // token answers (its union authenticator's error).
            "error": "invalid bearer token",
        })),
    }
}

/// What a SubjectAccessReview asks about.
#[derive(Debug, Default)]
struct Attributes {
    verb: String,
    /// Resource requests.
    resource: Option<ResourceAttrs>,
    /// Non-resource requests.
    path: String,
}

#[derive(Debug, Default)]
struct ResourceAttrs {
    namespace: String,
    group: String,
    resource: String,
    subresource: String,
    name: String,
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn strings(v: &Value, k: &str) -> Vec<String> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn subject_access_review(state: &Arc<State>, obj: &Value) -> Result<Value, ApiError> {
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let user = s(&spec, "user");
    let groups = strings(&spec, "groups");
    let ra = spec.get("resourceAttributes").filter(|v| v.is_object());
    let nra = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    // pkg/apis/authorization/validation: ValidateSubjectAccessReviewSpec.
    let mut errs = Vec::new();
    if ra.is_some() == nra.is_some() {
        errs.push(FieldError::invalid(
            "spec.resourceAttributes",
            spec.get("resourceAttributes")
                .cloned()
                .unwrap_or(Value::Null),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    if user.is_empty() && groups.is_empty() {
        errs.push(FieldError::invalid(
            "spec.user",
            json!(""),
            "at least one of user or group must be specified",
        ));
    }
    if !errs.is_empty() {
        // The registry's NewInvalid names the group only:
        // `.authorization.k8s.io "" is invalid: ...`.
        return Err(ApiError::invalid("authorization.k8s.io", "", "", &errs));
    }
    let attrs = match (ra, nra) {
        (Some(ra), _) => Attributes {
            verb: s(ra, "verb"),
            resource: Some(ResourceAttrs {
                namespace: s(ra, "namespace"),
                group: s(ra, "group"),
                resource: s(ra, "resource"),
                subresource: s(ra, "subresource"),
                name: s(ra, "name"),
            }),
            path: String::new(),
        },
        (None, Some(nra)) => Attributes {
            verb: s(nra, "verb"),
            resource: None,
            path: s(nra, "path"),
        },
        (None, None) => Attributes::default(),
    };
    if groups.iter().any(|g| g == "system:masters") {
        return Ok(json!({"allowed": true}));
    }
    match rbac_allows(state, &user, &groups, &attrs) {
        Some(reason) => Ok(json!({"allowed": true, "reason": reason})),
        None => Ok(json!({"allowed": false})),
    }
}

fn rid(group: &str, resource: &str) -> Option<resources::ResId> {
    resources::find(group, "v1", resource)
}

/// Whether a binding's subjects include the user (rbac/validation
/// `appliesTo`).
fn applies_to(subjects: &Value, user: &str, groups: &[String], binding_ns: &str) -> Option<String> {
    for subj in subjects.as_array()? {
        let kind = s(subj, "kind");
        let name = s(subj, "name");
        match kind.as_str() {
            "User" if name == user => return Some(format!("User {user:?}")),
            "Group" if groups.contains(&name) => return Some(format!("Group {name:?}")),
            "ServiceAccount" => {
                let ns = match s(subj, "namespace") {
                    n if n.is_empty() => binding_ns.to_string(),
                    n => n,
                };
                if user == format!("system:serviceaccount:{ns}:{name}") {
                    // describeSubject (rbac/validation/rule.go) writes a
                    // ServiceAccount as "name/namespace", the reverse of the
                    // usual order; the reason text is a real server's.
                    return Some(format!("ServiceAccount \"{name}/{ns}\""));
                }
            }
            _ => {}
        }
    }
    None
}

fn has(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// `RuleAllows` of rbac/validation: verbs, then resources or non-resource URLs.
fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    if !has(&strings(rule, "verbs"), &attrs.verb) {
        return false;
    }
    match &attrs.resource {
        Some(r) => {
            let combined = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let resources = strings(rule, "resources");
            let names = strings(rule, "resourceNames");
            has(&strings(rule, "apiGroups"), &r.group)
                && (resources.iter().any(|x| {
                    x == "*"
                        || *x == combined
                        || (!r.subresource.is_empty() && *x == format!("*/{}", r.subresource))
                }))
                && (names.is_empty() || names.contains(&r.name))
        }
        None => strings(rule, "nonResourceURLs").iter().any(|u| {
            u == "*"
                || *u == attrs.path
                || u.strip_suffix('*')
                    .is_some_and(|p| attrs.path.starts_with(p))
        }),
    }
}

/// The rules of a role reference (`ClusterRole` or a `Role` in `ns`).
fn role_rules(state: &Arc<State>, role_ref: &Value, ns: &str) -> Vec<Value> {
    let kind = s(role_ref, "kind");
    let name = s(role_ref, "name");
    let (rid, ns) = match kind.as_str() {
        "ClusterRole" => (rid("rbac.authorization.k8s.io", "clusterroles"), ""),
        "Role" => (rid("rbac.authorization.k8s.io", "roles"), ns),
        _ => (None, ""),
    };
    let Some(rid) = rid else {
        return Vec::new();
    };
    state
        .store
        .get(rid, ns, &name)
        .ok()
        .and_then(|o| o.value.get("rules").and_then(Value::as_array).cloned())
        .unwrap_or_default()
}

/// The reason an RBAC binding allows the request, if one does.
fn rbac_allows(
    state: &Arc<State>,
    user: &str,
    groups: &[String],
    attrs: &Attributes,
) -> Option<String> {
    let mut bindings: Vec<(&str, Arc<crate::store::Stored>)> = Vec::new();
    if let Some(crb) = rid("rbac.authorization.k8s.io", "clusterrolebindings") {
        let (items, _) = state.store.snapshot(crb, None);
        bindings.extend(items.into_iter().map(|b| ("ClusterRoleBinding", b)));
    }
    if let Some(r) = &attrs.resource
        && !r.namespace.is_empty()
        && let Some(rb) = rid("rbac.authorization.k8s.io", "rolebindings")
    {
        let (items, _) = state.store.snapshot(rb, Some(&r.namespace));
        bindings.extend(items.into_iter().map(|b| ("RoleBinding", b)));
    }
    for (kind, b) in bindings {
        let b = &b.value;
        let binding_ns = b["metadata"]["namespace"].as_str().unwrap_or("");
        let Some(subject) = applies_to(&b["subjects"], user, groups, binding_ns) else {
            continue;
        };
        let role_ref = &b["roleRef"];
        if role_rules(state, role_ref, binding_ns)
            .iter()
            .any(|rule| rule_allows(rule, attrs))
        {
            // clusterRoleBindingDescriber / roleBindingDescriber: a
            // RoleBinding is named "name/namespace".
            let name = b["metadata"]["name"].as_str().unwrap_or("");
            let name = if binding_ns.is_empty() {
                name.to_string()
            } else {
                format!("{name}/{binding_ns}")
            };
            return Some(format!(
                "RBAC: allowed by {kind} {name:?} of {} {:?} to {subject}",
                s(role_ref, "kind"),
                s(role_ref, "name")
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_sim_tokens_name_their_user_and_groups() {
        assert_eq!(
            authenticate("system:serviceaccount:monitoring:prometheus"),
            Some((
                "system:serviceaccount:monitoring:prometheus".to_string(),
                vec![
                    "system:serviceaccounts".to_string(),
                    "system:serviceaccounts:monitoring".to_string(),
                    "system:authenticated".to_string()
                ]
            ))
        );
        assert_eq!(
            authenticate("admin").map(|(_, g)| g),
            Some(vec![
                "system:masters".to_string(),
                "system:authenticated".to_string()
            ])
        );
        assert_eq!(authenticate("two words"), None);
        assert_eq!(authenticate(""), None);
    }

    #[test]
    fn rules_match_as_rbac_does() {
        let get_metrics = Attributes {
            verb: "get".into(),
            resource: None,
            path: "/metrics".into(),
        };
        let rule = json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]});
        assert!(rule_allows(&rule, &get_metrics));
        let star = json!({"verbs": ["*"], "nonResourceURLs": ["/met*"]});
        assert!(rule_allows(&star, &get_metrics));
        let other = json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]});
        assert!(!rule_allows(&other, &get_metrics));
        let post = Attributes {
            verb: "post".into(),
            ..get_metrics
        };
        assert!(!rule_allows(&rule, &post));

        let patch_status = Attributes {
            verb: "patch".into(),
            resource: Some(ResourceAttrs {
                namespace: "shop".into(),
                group: String::new(),
                resource: "services".into(),
                subresource: "status".into(),
                name: "web".into(),
            }),
            path: String::new(),
        };
        let services = json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["services"]});
        assert!(!rule_allows(&services, &patch_status));
        let status = json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["services/status"], "resourceNames": ["web"]});
        assert!(rule_allows(&status, &patch_status));
        let other_name = json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["*/status"], "resourceNames": ["api"]});
        assert!(!rule_allows(&other_name, &patch_status));
    }
}

//! The create-only review resources: `TokenReview` and `SubjectAccessReview`,
//! which a component uses to delegate authentication and authorization to
//! the API server (kube-controller-manager's and controller-runtime's secure
//! metrics); `LocalSubjectAccessReview` (a SubjectAccessReview in a
//! namespace); and the requester's own: `SelfSubjectReview` (who am I),
//! `SelfSubjectAccessReview` ([`crate::self_review`]) and
//! `SelfSubjectRulesReview` (what may I do in a namespace).
//!
//! Authentication is kube-sim's own: the bearer token is the user name
//! (printable ASCII without spaces; anything else is not a kube-sim token).
//! Every user is in `system:authenticated`; `system:serviceaccount:<ns>:<sa>`
//! also in `system:serviceaccounts` and `system:serviceaccounts:<ns>`;
//! `system:node:<name>` in `system:nodes` (as a kubelet's certificate); the
//! user `admin` of kube-sim's own kubeconfig in `system:masters`.
//!
//! Authorization is RBAC over the stored ClusterRoles, Roles and their
//! bindings, upstream's bootstrap policy among them
//! ([`crate::bootstrap_rbac`]; pkg/registry/rbac/validation:
//! `VisitRulesFor`, `appliesTo`, `RuleAllows`), after `system:masters`,
//! which may do everything, and the Node authorizer for a node
//! ([`crate::node_authz`], [`authorize`]). The same decision authorizes kube-sim's requests
//! when [`crate::Authorization::NodeRbac`] is on ([`crate::authz`]).

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Review {
    Token,
    SelfSubject,
    SubjectAccess,
    SelfSubjectAccess,
    SelfSubjectRules,
    /// In the namespace of its path.
    LocalSubjectAccess(String),
}

impl Review {
    /// The review a path addresses (`/apis/<group>/v1/<resource>`, or
    /// `/apis/authorization.k8s.io/v1/namespaces/<ns>/localsubjectaccessreviews`).
    pub(crate) fn of_path(path: &str) -> Option<Review> {
        let path = path.trim_end_matches('/');
        if let Some(ns) = path
            .strip_prefix("/apis/authorization.k8s.io/v1/namespaces/")
            .and_then(|r| r.strip_suffix("/localsubjectaccessreviews"))
            .filter(|ns| !ns.is_empty() && !ns.contains('/'))
        {
            return Some(Review::LocalSubjectAccess(ns.to_string()));
        }
        match path {
            "/apis/authentication.k8s.io/v1/tokenreviews" => Some(Review::Token),
            "/apis/authentication.k8s.io/v1/selfsubjectreviews" => Some(Review::SelfSubject),
            "/apis/authorization.k8s.io/v1/subjectaccessreviews" => Some(Review::SubjectAccess),
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" => {
                Some(Review::SelfSubjectAccess)
            }
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews" => {
                Some(Review::SelfSubjectRules)
            }
            _ => None,
        }
    }

    pub(crate) fn group(&self) -> &'static str {
        match self {
            Review::Token | Review::SelfSubject => "authentication.k8s.io",
            _ => "authorization.k8s.io",
        }
    }

    pub(crate) fn resource(&self) -> &'static str {
        match self {
            Review::Token => "tokenreviews",
            Review::SelfSubject => "selfsubjectreviews",
            Review::SubjectAccess => "subjectaccessreviews",
            Review::SelfSubjectAccess => "selfsubjectaccessreviews",
            Review::SelfSubjectRules => "selfsubjectrulesreviews",
            Review::LocalSubjectAccess(_) => "localsubjectaccessreviews",
        }
    }

    /// The namespace of a namespaced review's path.
    pub(crate) fn namespace(&self) -> &str {
        match self {
            Review::LocalSubjectAccess(ns) => ns,
            _ => "",
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Review::Token => "TokenReview",
            Review::SelfSubject => "SelfSubjectReview",
            Review::SubjectAccess => "SubjectAccessReview",
            Review::SelfSubjectAccess => "SelfSubjectAccessReview",
            Review::SelfSubjectRules => "SelfSubjectRulesReview",
            Review::LocalSubjectAccess(_) => "LocalSubjectAccessReview",
        }
    }
}

/// Serves a POST of a review (anything else: 405, as upstream's create-only
/// storage answers).
pub(crate) async fn handle(
    state: &Arc<State>,
    req: Request<Incoming>,
    review: Review,
    acting: &crate::authz::Acting,
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
    // The user the request acts as (impersonated, or the token's).
    let requester = acting.id.clone();
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
    let protobuf = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            crate::negotiate::media_type(ct) == "application/vnd.kubernetes.protobuf"
        });
    let body = http_body_util::Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::new(413, "RequestEntityTooLarge", e.to_string()))?
        .to_bytes();
    // Go clients (kubectl auth can-i, whoami) send protobuf.
    let decoded = if protobuf {
        crate::protobuf::decode_body(&body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    };
    let mut obj: Value = decoded.map_err(|e| {
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
    let mut meta = obj
        .get("metadata")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    // The create handler's WipeObjectMetaSystemFields.
    if let Some(m) = meta.as_object_mut() {
        for k in [
            "creationTimestamp",
            "uid",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            m.remove(k);
        }
    }
    // The decoded ObjectMeta: its fields, the empty ones dropped.
    let mut meta = go_object_meta(&meta);
    // The create handler's EnsureObjectNamespaceMatchesRequestNamespace:
    // a cluster-scoped review loses its namespace.
    match &review {
        Review::LocalSubjectAccess(ns) => match meta.get("namespace").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::new(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => meta["namespace"] = json!(ns),
        },
        _ => {
            if let Some(m) = meta.as_object_mut() {
                m.remove("namespace");
            }
        }
    }
    // The object the registry gets (and validates): the request's, with
    // the managedFields of the create (the status is the server's).
    let spec = go_spec(&review, obj.get("spec").unwrap_or(&Value::Null));
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(want_version));
        m.insert("kind".into(), json!(review.kind()));
        m.insert("metadata".into(), meta);
        if let Some(spec) = spec {
            m.insert("spec".into(), spec);
        }
        m.remove("status");
    }
    crate::patch::track_update(
        None,
        &mut obj,
        &manager,
        None,
        &crate::object::now_string(),
        &want_version,
    );
    let (user, groups) = &requester;
    let status = match &review {
        Review::Token => token_review(&obj)?,
        Review::SubjectAccess => subject_access_review(state, &obj)?,
        Review::LocalSubjectAccess(ns) => local_subject_access_review(state, ns, &obj)?,
        Review::SelfSubjectAccess => {
            crate::self_review::self_subject_access_review(state, &requester, &obj)?
        }
        // Both registries answer a new object, not the request's: a
        // SelfSubjectRulesReview with empty metadata and spec, a
        // SelfSubjectReview with only its creation time.
        Review::SelfSubjectRules => {
            let namespace = obj
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            if namespace.is_empty() {
                return Err(ApiError::new(400, "BadRequest", "no namespace on request"));
            }
            let status = self_subject_rules(state, user, groups, namespace);
            return Ok(created(json!({
                "kind": review.kind(), "apiVersion": want_version,
                "metadata": {}, "spec": {}, "status": status,
            })));
        }
        Review::SelfSubject => {
            return Ok(created(json!({
                "kind": review.kind(), "apiVersion": want_version,
                "metadata": {"creationTimestamp": crate::object::now_string()},
                "status": {"userInfo": self_user_info(acting)},
            })));
        }
    };
    if let Some(m) = obj.as_object_mut() {
        m.insert("status".into(), status);
    }
    Ok(created(obj))
}

/// A 201 with `obj`.
fn created(obj: Value) -> Response<RespBody> {
    // As the serializer writes it: HTML-safe, ending in a newline.
    let mut bytes = crate::gojson::to_vec(&obj);
    bytes.push(b'\n');
    let mut r = Response::new(RespBody::Full(Some(Bytes::from(bytes))));
    *r.status_mut() = http::StatusCode::CREATED;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
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
    // A kubelet's client certificate: `O=system:nodes`.
    if token
        .strip_prefix("system:node:")
        .is_some_and(|n| !n.is_empty())
    {
        groups.push("system:nodes".to_string());
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

/// What a SubjectAccessReview asks about, or what a request does.
#[derive(Debug, Default, Clone)]
pub(crate) struct Attributes {
    pub(crate) verb: String,
    /// Resource requests.
    pub(crate) resource: Option<ResourceAttrs>,
    /// Non-resource requests.
    pub(crate) path: String,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct ResourceAttrs {
    pub(crate) namespace: String,
    pub(crate) group: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) name: String,
    /// The field selector's requirements (`GetFieldSelector`; none when
    /// there is none or it does not parse).
    pub(crate) field_selector: Vec<FieldRequirement>,
}

/// A field selector's operator (`selection.Equals` for `=` and `==`,
/// `selection.NotEquals` for `!=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldOp {
    Equals,
    NotEquals,
}

/// One requirement of a field selector (`fields.Requirement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldRequirement {
    pub(crate) field: String,
    pub(crate) op: FieldOp,
    pub(crate) value: String,
}

/// `fields.ParseSelector(s).Requirements()` (the terms sorted, each split
/// at its first `!=`, `==` or `=`, the value unescaped; the list and watch
/// path's own parser). `None` when it does not parse.
pub(crate) fn parse_field_selector(s: &str) -> Option<Vec<FieldRequirement>> {
    let terms = crate::selector::parse_field_terms(s).ok()?;
    Some(
        terms
            .into_iter()
            .map(|(field, equals, value)| FieldRequirement {
                field,
                op: if equals {
                    FieldOp::Equals
                } else {
                    FieldOp::NotEquals
                },
                value,
            })
            .collect(),
    )
}

/// The field selector of a review's `resourceAttributes.fieldSelector`
/// (pkg/registry/authorization/util `ResourceAttributesFrom`): the parsed
/// `rawSelector`, or, when given, the `requirements` (`In` as equals and
/// `NotIn` as not-equals with one value each; the others are errors,
/// dropped, the valid ones kept); and whether any was an error.
fn review_field_selector(ra: &Value) -> (Vec<FieldRequirement>, bool) {
    let Some(fs) = ra.get("fieldSelector").filter(|v| v.is_object()) else {
        return (Vec::new(), false);
    };
    let reqs: Vec<&Value> = fs
        .get("requirements")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if reqs.is_empty() {
        let raw = s(fs, "rawSelector");
        if raw.is_empty() {
            return (Vec::new(), false);
        }
        return match parse_field_selector(&raw) {
            Some(r) => (r, false),
            None => (Vec::new(), true),
        };
    }
    let mut failed = false;
    let kept = reqs
        .into_iter()
        .filter_map(|r| {
            let values = strings(r, "values");
            let op = match s(r, "operator").as_str() {
                "In" => FieldOp::Equals,
                "NotIn" => FieldOp::NotEquals,
                _ => {
                    failed = true;
                    return None;
                }
            };
            match values.as_slice() {
                [v] => Some(FieldRequirement {
                    field: s(r, "key"),
                    op,
                    value: v.clone(),
                }),
                _ => {
                    failed = true;
                    None
                }
            }
        })
        .collect();
    (kept, failed)
}

/// Whether a review's `resourceAttributes.labelSelector` fails to become
/// requirements (`labels.Parse` of the `rawSelector`; an operator of the
/// `requirements` that is not In, NotIn, Exists or DoesNotExist — the
/// other errors of `labels.NewRequirement` are refused by validation
/// first): `Some(partially)` when it does, `partially` when requirements
/// were kept.
fn review_label_selector_error(ra: &Value) -> Option<bool> {
    let ls = ra.get("labelSelector").filter(|v| v.is_object())?;
    let reqs: Vec<&Value> = ls
        .get("requirements")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if reqs.is_empty() {
        let raw = s(ls, "rawSelector");
        return (!raw.is_empty() && crate::selector::LabelSelector::parse(&raw).is_err())
            .then_some(false);
    }
    let kept = reqs
        .iter()
        .filter(|r| {
            matches!(
                s(r, "operator").as_str(),
                "In" | "NotIn" | "Exists" | "DoesNotExist"
            )
        })
        .count();
    (kept < reqs.len()).then_some(kept > 0)
}

/// `BuildEvaluationError`'s part for the selectors of a review's resource
/// attributes: what was ignored as it did not parse.
fn selector_evaluation_errors(spec: &Value) -> Vec<String> {
    let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let (kept, failed) = review_field_selector(ra);
    let ignored = |partially: bool, what: &str| {
        format!(
            "spec.resourceAttributes.{what} {}ignored due to parse error",
            if partially { "partially " } else { "" }
        )
    };
    if failed {
        out.push(ignored(!kept.is_empty(), "fieldSelector"));
    }
    if let Some(partially) = review_label_selector_error(ra) {
        out.push(ignored(partially, "labelSelector"));
    }
    out
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

/// `ValidateSubjectAccessReviewSpec` / `ValidateSelfSubjectAccessReviewSpec`
/// (pkg/apis/authorization/validation): exactly one of the attributes, and
/// (not for a self review) a user or a group. A value is printed as the
/// internal Go struct marshals (its field names, no JSON tags).
pub(crate) fn validate_spec(spec: &Value, self_review: bool) -> Vec<FieldError> {
    let ra = spec.get("resourceAttributes").filter(|v| v.is_object());
    let nra = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    let mut errs = Vec::new();
    match (ra, nra) {
        (Some(_), Some(nra)) => errs.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            go_non_resource(nra),
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => errs.push(FieldError::invalid(
            "spec.resourceAttributes",
            Value::Null,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    if !self_review && s(spec, "user").is_empty() && strings(spec, "groups").is_empty() {
        errs.push(FieldError::invalid(
            "spec.user",
            json!(""),
            "at least one of user or group must be specified",
        ));
    }
    errs.extend(validate_selectors(spec));
    errs
}

/// `fields` of `v` that are set (what `omitempty` keeps).
fn omit_empty(v: &Value, fields: &[&str]) -> serde_json::Map<String, Value> {
    fields
        .iter()
        .filter_map(|&k| {
            v.get(k)
                .filter(|x| !is_go_empty(x))
                .map(|x| (k.to_string(), x.clone()))
        })
        .collect()
}

/// A review's spec as the API server has it once decoded into its Go type
/// (and so answers and records it in managedFields): the fields it knows,
/// the empty `omitempty` ones dropped, a pointer to a struct kept when
/// set even if empty. `None` for a review whose spec is not kept.
fn go_spec(review: &Review, spec: &Value) -> Option<Value> {
    let selector = |sel: &Value| {
        let mut out = omit_empty(sel, &["rawSelector"]);
        let reqs: Vec<Value> = sel
            .get("requirements")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|r| {
                        let mut o = serde_json::Map::new();
                        o.insert("key".into(), json!(s(r, "key")));
                        o.insert("operator".into(), json!(s(r, "operator")));
                        o.extend(omit_empty(r, &["values"]));
                        Value::Object(o)
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !reqs.is_empty() {
            out.insert("requirements".into(), Value::Array(reqs));
        }
        Value::Object(out)
    };
    let mut out = serde_json::Map::new();
    match review {
        Review::Token => out = omit_empty(spec, &["token", "audiences"]),
        Review::SubjectAccess | Review::LocalSubjectAccess(_) | Review::SelfSubjectAccess => {
            if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
                let mut r = omit_empty(
                    ra,
                    &[
                        "namespace",
                        "verb",
                        "group",
                        "version",
                        "resource",
                        "subresource",
                        "name",
                    ],
                );
                for k in ["fieldSelector", "labelSelector"] {
                    if let Some(sel) = ra.get(k).filter(|v| v.is_object()) {
                        r.insert(k.into(), selector(sel));
                    }
                }
                out.insert("resourceAttributes".into(), Value::Object(r));
            }
            if let Some(nra) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
                out.insert(
                    "nonResourceAttributes".into(),
                    Value::Object(omit_empty(nra, &["path", "verb"])),
                );
            }
            if *review != Review::SelfSubjectAccess {
                out.extend(omit_empty(spec, &["user", "groups", "extra", "uid"]));
            }
        }
        _ => return None,
    }
    Some(Value::Object(out))
}

/// The `ObjectMeta` of a review as encoding/json writes it (the value of
/// a `metadata` error): its fields in Go's order, the empty ones omitted
/// (`omitempty`), maps with their keys sorted.
fn go_object_meta(meta: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let Some(m) = meta.as_object() else {
        return Value::Object(out);
    };
    for &k in crate::object::META_ORDER {
        let Some(v) = m.get(k).filter(|v| !is_go_empty(v)) else {
            continue;
        };
        let v = match (k, v) {
            ("labels" | "annotations", Value::Object(map)) => {
                let mut sorted: Vec<(&String, &Value)> = map.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    sorted
                        .into_iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                )
            }
            ("ownerReferences", Value::Array(refs)) => Value::Array(
                refs.iter()
                    .map(|r| {
                        let mut o = serde_json::Map::new();
                        for f in ["apiVersion", "kind", "name", "uid"] {
                            o.insert(f.into(), json!(s(r, f)));
                        }
                        for f in ["controller", "blockOwnerDeletion"] {
                            if let Some(b) = r.get(f).filter(|b| b.is_boolean()) {
                                o.insert(f.into(), b.clone());
                            }
                        }
                        Value::Object(o)
                    })
                    .collect(),
            ),
            (_, v) => v.clone(),
        };
        out.insert(k.to_string(), v);
    }
    Value::Object(out)
}

/// What `omitempty` (and `Semantic.DeepEqual` against an empty
/// `ObjectMeta`) takes for unset: null, `""`, 0, false, an empty list or map.
fn is_go_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// `ValidateSubjectAccessReview` and `ValidateSelfSubjectAccessReview`
/// (`local`: `ValidateLocalSubjectAccessReview`): the metadata of the
/// object the create handler passes on must be empty but for its
/// managedFields (and a local review's namespace). The value is the whole
/// `ObjectMeta`.
pub(crate) fn validate_review_meta(obj: &Value, local: bool) -> Option<FieldError> {
    let meta = obj.get("metadata")?;
    let set = meta.as_object()?.iter().any(|(k, v)| {
        !is_go_empty(v)
            && match k.as_str() {
                "managedFields" => false,
                "namespace" => !local,
                k => crate::object::META_ORDER.contains(&k),
            }
    });
    if !set {
        return None;
    }
    let detail = if local {
        "must be empty except for namespace"
    } else {
        "must be empty"
    };
    Some(FieldError::invalid(
        "metadata",
        go_object_meta(meta),
        detail,
    ))
}

/// `validateResourceAttributes`: a field or label selector of
/// `spec.resourceAttributes` needs its `rawSelector` or its `requirements`,
/// not both; each requirement is checked as `ValidateFieldSelectorRequirement`
/// / `ValidateLabelSelectorRequirement` do (an unknown operator allowed, for
/// newer clients).
fn validate_selectors(spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) else {
        return errs;
    };
    for (key, label) in [("fieldSelector", false), ("labelSelector", true)] {
        let Some(sel) = ra.get(key).filter(|v| v.is_object()) else {
            continue;
        };
        let path = format!("spec.resourceAttributes.{key}");
        let raw = s(sel, "rawSelector");
        let reqs: Vec<Value> = sel
            .get("requirements")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !raw.is_empty() && !reqs.is_empty() {
            errs.push(FieldError::invalid(
                &format!("{path}.rawSelector"),
                json!(raw),
                "may not specified at the same time as requirements",
            ));
        }
        if raw.is_empty() && reqs.is_empty() {
            errs.push(FieldError::required(
                &format!("{path}.requirements"),
                format!("when {path} is specified, requirements or rawSelector is required"),
            ));
        }
        for (i, r) in reqs.iter().enumerate() {
            let at = format!("{path}.requirements[{i}]");
            let k = s(r, "key");
            let values = strings(r, "values");
            if !label && k.is_empty() {
                errs.push(FieldError::required(
                    &format!("{at}.key"),
                    "must be specified",
                ));
            }
            match s(r, "operator").as_str() {
                "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                    &format!("{at}.values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                )),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    errs.push(FieldError::forbidden(
                        &format!("{at}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ))
                }
                _ => {}
            }
            if label {
                for m in crate::validation::qualified_name(&k) {
                    errs.push(FieldError::invalid(&format!("{at}.key"), json!(k), m));
                }
                for (j, v) in values.iter().enumerate() {
                    for m in crate::validation::label_value(v) {
                        errs.push(FieldError::invalid(
                            &format!("{at}.values[{j}]"),
                            json!(v),
                            m,
                        ));
                    }
                }
            }
        }
    }
    errs
}

/// The internal `NonResourceAttributes` as encoding/json writes it.
fn go_non_resource(nra: &Value) -> Value {
    json!({"Path": s(nra, "path"), "Verb": s(nra, "verb")})
}

/// The attributes a review's spec asks about.
fn attributes(spec: &Value) -> Attributes {
    let ra = spec.get("resourceAttributes").filter(|v| v.is_object());
    let nra = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    match (ra, nra) {
        (Some(ra), _) => Attributes {
            verb: s(ra, "verb"),
            resource: Some(ResourceAttrs {
                namespace: s(ra, "namespace"),
                group: s(ra, "group"),
                resource: s(ra, "resource"),
                subresource: s(ra, "subresource"),
                name: s(ra, "name"),
                field_selector: review_field_selector(ra).0,
            }),
            path: String::new(),
        },
        (None, Some(nra)) => Attributes {
            verb: s(nra, "verb"),
            resource: None,
            path: s(nra, "path"),
        },
        (None, None) => Attributes::default(),
    }
}

/// An authorizer's answer: allowed or not, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) allowed: bool,
    pub(crate) reason: Option<String>,
}

/// The decision of `--authorization-mode=Node,RBAC` for `user` in `groups`
/// (the union authorizer): the privileged group `system:masters` may do
/// everything (no reason), then the Node authorizer
/// ([`crate::node_authz`]), then RBAC over the stored objects. The reason
/// of a refusal is every authorizer's reason, one a line (the Node
/// authorizer's first).
pub(crate) fn authorize(
    state: &Arc<State>,
    user: &str,
    groups: &[String],
    attrs: &Attributes,
) -> Decision {
    if groups.iter().any(|g| g == "system:masters") {
        return Decision {
            allowed: true,
            reason: None,
        };
    }
    let node_reason = match crate::node_authz::authorize(state, user, groups, attrs) {
        crate::node_authz::NodeDecision::Allow => {
            return Decision {
                allowed: true,
                reason: None,
            };
        }
        crate::node_authz::NodeDecision::NoOpinion(reason) => reason,
    };
    let rbac = rbac_decision(state, user, groups, attrs);
    if rbac.allowed || node_reason.is_empty() {
        return rbac;
    }
    let reason = match rbac.reason {
        Some(r) => format!("{node_reason}\n{r}"),
        None => node_reason,
    };
    Decision {
        allowed: false,
        reason: Some(reason),
    }
}

/// Whether the rules of the bootstrap ClusterRole `system:node`, which the
/// Node authorizer applies to a node's requests for what its graph does
/// not cover (`bootstrappolicy.NodeRules()`, compiled in: editing the
/// stored role changes RBAC, not these), allow `attrs`.
pub(crate) fn node_rules_allow(attrs: &Attributes) -> bool {
    static RULES: std::sync::LazyLock<Vec<Value>> =
        std::sync::LazyLock::new(crate::bootstrap_rbac::node_rules);
    RULES.iter().any(|r| rule_allows(r, attrs))
}

/// A SelfSubjectReview's `status.userInfo`: the user the request acts as,
/// its UID and extra only when it has them (`omitempty`).
fn self_user_info(acting: &crate::authz::Acting) -> Value {
    let mut info = json!({"username": acting.id.0, "groups": acting.id.1});
    if !acting.uid.is_empty() {
        info["uid"] = json!(acting.uid);
    }
    if !acting.extra.is_empty() {
        info["extra"] = json!(acting.extra);
    }
    info
}

/// The decision for `spec`'s user and groups, as a review's status.
fn decide(state: &Arc<State>, spec: &Value) -> Value {
    let d = authorize(
        state,
        &s(spec, "user"),
        &strings(spec, "groups"),
        &attributes(spec),
    );
    let mut status = match d.reason {
        Some(reason) => json!({"allowed": d.allowed, "reason": reason}),
        None => json!({"allowed": d.allowed}),
    };
    let errors = selector_evaluation_errors(spec);
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join("; "));
    }
    status
}

pub(crate) fn subject_access_review(state: &Arc<State>, obj: &Value) -> Result<Value, ApiError> {
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut errs = validate_spec(&spec, false);
    errs.extend(validate_review_meta(obj, false));
    if !errs.is_empty() {
        // The registry's NewInvalid names the group only:
        // `.authorization.k8s.io "" is invalid: ...`.
        return Err(ApiError::invalid("authorization.k8s.io", "", "", &errs));
    }
    Ok(decide(state, &spec))
}

/// A LocalSubjectAccessReview in `ns` (pkg/registry/authorization/
/// localsubjectaccessreview): a SubjectAccessReview whose resource
/// attributes name the namespace of its path (`ValidateLocalSubjectAccessReview`;
/// the create handler has set `metadata.namespace` to it).
fn local_subject_access_review(
    state: &Arc<State>,
    ns: &str,
    obj: &Value,
) -> Result<Value, ApiError> {
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut errs = validate_spec(&spec, false);
    errs.extend(validate_review_meta(obj, true));
    if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object())
        && s(ra, "namespace") != ns
    {
        errs.push(FieldError::invalid(
            "spec.resourceAttributes.namespace",
            json!(s(ra, "namespace")),
            "must match metadata.namespace",
        ));
    }
    if let Some(nra) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        errs.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            go_non_resource(nra),
            "disallowed on this kind of request",
        ));
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid("authorization.k8s.io", "", "", &errs));
    }
    Ok(decide(state, &spec))
}

fn rid(group: &str, resource: &str) -> Option<resources::ResId> {
    resources::find(group, "v1", resource)
}

/// Whether a binding's subjects include the user (rbac/validation
/// `appliesTo`): how the reason names the subject that matched.
fn applies_to(subjects: &Value, user: &str, groups: &[String], binding_ns: &str) -> Option<String> {
    for subj in subjects.as_array()? {
        let kind = s(subj, "kind");
        let name = s(subj, "name");
        match kind.as_str() {
            "User" if name == user => return Some(format!("User {}", crate::goquote::quote(user))),
            "Group" if groups.contains(&name) => {
                return Some(format!("Group {}", crate::goquote::quote(&name)));
            }
            "ServiceAccount" => {
                let ns = match s(subj, "namespace") {
                    n if n.is_empty() => binding_ns.to_string(),
                    n => n,
                };
                if !ns.is_empty() && user == format!("system:serviceaccount:{ns}:{name}") {
                    // describeSubject (rbac/validation/rule.go) writes a
                    // ServiceAccount as "name/namespace", the reverse of the
                    // usual order; the reason text is a real server's.
                    return Some(format!(
                        "ServiceAccount {}",
                        crate::goquote::quote(&format!("{name}/{ns}"))
                    ));
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

/// The rules of a role reference (`ClusterRole` or a `Role` in `ns`), or
/// the error upstream's `GetRoleReferenceRules` reports (the listers'
/// NotFound).
fn role_rules(state: &Arc<State>, role_ref: &Value, ns: &str) -> Result<Vec<Value>, String> {
    let kind = s(role_ref, "kind");
    let name = s(role_ref, "name");
    let (resource, singular, ns) = match kind.as_str() {
        "ClusterRole" => ("clusterroles", "clusterrole", ""),
        "Role" => ("roles", "role", ns),
        other => return Err(format!("unsupported role reference kind: {other:?}")),
    };
    let stored = rid("rbac.authorization.k8s.io", resource)
        .and_then(|rid| state.store.get(rid, ns, &name).ok());
    match stored {
        Some(o) => Ok(o
            .value
            .get("rules")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()),
        None => Err(format!(
            "{singular}.rbac.authorization.k8s.io {} not found",
            crate::goquote::quote(&name)
        )),
    }
}

/// `VisitRulesFor` of rbac/validation: every rule RBAC gives the user,
/// with its source (`ClusterRoleBinding "b" of ClusterRole "r" to Group
/// "g"`), through the stored ClusterRoleBindings (the bootstrap policy's
/// among them, [`crate::bootstrap_rbac`]) and then the RoleBindings of `namespace`,
/// until `visit` answers false. Answers the errors met (roles not found).
fn visit_rules(
    state: &Arc<State>,
    user: &str,
    groups: &[String],
    namespace: &str,
    mut visit: impl FnMut(&str, &Value) -> bool,
) -> Vec<String> {
    let mut errors = Vec::new();
    let mut bindings: Vec<(&str, Arc<crate::store::Stored>)> = Vec::new();
    if let Some(crb) = rid("rbac.authorization.k8s.io", "clusterrolebindings") {
        let (items, _) = state.store.snapshot(crb, None);
        bindings.extend(items.into_iter().map(|b| ("ClusterRoleBinding", b)));
    }
    if !namespace.is_empty()
        && let Some(rb) = rid("rbac.authorization.k8s.io", "rolebindings")
    {
        let (items, _) = state.store.snapshot(rb, Some(namespace));
        bindings.extend(items.into_iter().map(|b| ("RoleBinding", b)));
    }
    for (kind, b) in bindings {
        let b = &b.value;
        let binding_ns = b["metadata"]["namespace"].as_str().unwrap_or("");
        let Some(subject) = applies_to(&b["subjects"], user, groups, binding_ns) else {
            continue;
        };
        let role_ref = &b["roleRef"];
        let rules = match role_rules(state, role_ref, binding_ns) {
            Ok(rules) => rules,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        // clusterRoleBindingDescriber / roleBindingDescriber: a
        // RoleBinding is named "name/namespace".
        let name = b["metadata"]["name"].as_str().unwrap_or("");
        let name = if binding_ns.is_empty() {
            name.to_string()
        } else {
            format!("{name}/{binding_ns}")
        };
        let source = format!(
            "{kind} {} of {} {} to {subject}",
            crate::goquote::quote(&name),
            s(role_ref, "kind"),
            crate::goquote::quote(&s(role_ref, "name"))
        );
        for rule in &rules {
            if !visit(&source, rule) {
                return errors;
            }
        }
    }
    errors
}

/// `utilerrors.NewAggregate(errs).Error()`: each distinct message once, in
/// brackets when there are several.
fn aggregate(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The RBAC authorizer's decision: allowed with the rule's source, or not
/// allowed with the errors met (`RBAC: <errors>`, or no reason).
fn rbac_decision(
    state: &Arc<State>,
    user: &str,
    groups: &[String],
    attrs: &Attributes,
) -> Decision {
    let namespace = attrs
        .resource
        .as_ref()
        .map(|r| r.namespace.as_str())
        .unwrap_or("");
    let mut reason = None;
    let errors = visit_rules(state, user, groups, namespace, |source, rule| {
        if rule_allows(rule, attrs) {
            reason = Some(format!("RBAC: allowed by {source}"));
            return false;
        }
        true
    });
    match reason {
        Some(reason) => Decision {
            allowed: true,
            reason: Some(reason),
        },
        None if errors.is_empty() => Decision {
            allowed: false,
            reason: None,
        },
        None => Decision {
            allowed: false,
            reason: Some(format!("RBAC: {}", aggregate(&errors))),
        },
    }
}

/// The status of a SelfSubjectRulesReview (pkg/registry/authorization/
/// selfsubjectrulesreview): the union of the Node and RBAC rule resolvers.
/// The Node authorizer cannot enumerate a node's rules: for a node
/// identity (`system:node:<name>` in `system:nodes`) the answer is
/// incomplete, with its error. RBAC lists every rule with resources as a
/// resource rule and every rule with non-resource URLs as a non-resource
/// rule; a role it cannot find is an evaluation error, not incompleteness.
pub(crate) fn self_subject_rules(
    state: &Arc<State>,
    user: &str,
    groups: &[String],
    namespace: &str,
) -> Value {
    let mut errors = Vec::new();
    let node = crate::node_authz::node_identity(user, groups).is_some();
    if node {
        errors.push("node authorizer does not support user rule resolution".to_string());
    }
    let (mut resource_rules, mut non_resource_rules) = (Vec::new(), Vec::new());
    errors.extend(visit_rules(state, user, groups, namespace, |_, rule| {
        if !strings(rule, "resources").is_empty() {
            let mut r = json!({"verbs": strings(rule, "verbs")});
            for k in ["apiGroups", "resources", "resourceNames"] {
                let v = strings(rule, k);
                if !v.is_empty() {
                    r[k] = json!(v);
                }
            }
            resource_rules.push(r);
        }
        let urls = strings(rule, "nonResourceURLs");
        if !urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": strings(rule, "verbs"), "nonResourceURLs": urls}));
        }
        true
    }));
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": node,
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(aggregate(&errors));
    }
    status
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
        assert_eq!(
            authenticate("system:node:n1").map(|(_, g)| g),
            Some(vec![
                "system:nodes".to_string(),
                "system:authenticated".to_string()
            ])
        );
        assert_eq!(authenticate("two words"), None);
        assert_eq!(authenticate(""), None);
    }

    #[test]
    fn field_selectors_parse_as_fields_parse_selector() {
        let req = |field: &str, op, value: &str| FieldRequirement {
            field: field.into(),
            op,
            value: value.into(),
        };
        assert_eq!(
            parse_field_selector("spec.nodeName=n1,metadata.name!=x,a==b"),
            Some(vec![
                req("a", FieldOp::Equals, "b"),
                req("metadata.name", FieldOp::NotEquals, "x"),
                req("spec.nodeName", FieldOp::Equals, "n1"),
            ])
        );
        assert_eq!(
            parse_field_selector(r"k=a\,b\=c,,"),
            Some(vec![req("k", FieldOp::Equals, "a,b=c")])
        );
        assert_eq!(parse_field_selector(""), Some(vec![]));
        for bad in ["novalue", "k=a=b", r"k=a\x", r"k=a\"] {
            assert_eq!(parse_field_selector(bad), None, "{bad}");
        }
        let ra = json!({"fieldSelector": {"requirements": [
            {"key": "spec.nodeName", "operator": "In", "values": ["n1"]},
            {"key": "x", "operator": "Exists"},
            {"key": "y", "operator": "NotIn", "values": ["a", "b"]}
        ]}});
        assert_eq!(
            review_field_selector(&ra),
            (vec![req("spec.nodeName", FieldOp::Equals, "n1")], true)
        );
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
                field_selector: Vec::new(),
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

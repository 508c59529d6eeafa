//! `SelfSubjectAccessReview` (authorization.k8s.io/v1): "may I do this?",
//! answered for the user the request authenticates as
//! (pkg/registry/authorization/selfsubjectaccessreview), with the same RBAC
//! evaluation as a SubjectAccessReview ([`crate::reviews`]); and the
//! discovery entries of the create-only review resources kube-sim serves
//! (TokenReview, SelfSubjectReview, SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview).

use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::http::State;
use crate::resources::{NameRule, ResourceDef};

const fn review(
    group: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> ResourceDef {
    ResourceDef {
        group,
        version: "v1",
        resource,
        kind,
        singular,
        namespaced,
        short_names: &[],
        categories: &[],
        has_status: false,
        name_rule: NameRule::DnsSubdomain,
        generation: false,
        allow_create_on_update: false,
        field_labels: &[],
        delete_collection: false,
    }
}

/// The review resources, as discovery lists them (upstream: verbs
/// `["create"]`, a singular name, no storageVersionHash as nothing is
/// stored; all cluster-scoped but LocalSubjectAccessReview; in name order).
/// Their paths are served by [`crate::reviews::handle`].
pub static REVIEW_RESOURCES: &[ResourceDef] = &[
    review(
        "authentication.k8s.io",
        "selfsubjectreviews",
        "selfsubjectreview",
        "SelfSubjectReview",
        false,
    ),
    review(
        "authentication.k8s.io",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        false,
    ),
    review(
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        "LocalSubjectAccessReview",
        true,
    ),
    review(
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
        false,
    ),
    review(
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        "SelfSubjectRulesReview",
        false,
    ),
    review(
        "authorization.k8s.io",
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
        false,
    ),
];

/// The user a request authenticates as, with its groups: a client
/// certificate kube-sim issued (x509 comes before tokens in the API
/// server's union of authenticators: the CN, the O's and
/// `system:authenticated`), or the bearer token, a kube-sim user name; no
/// (or no valid) credential is `system:anonymous`.
pub(crate) fn requester(req: &Request<Incoming>) -> (String, Vec<String>) {
    if let Some(p) = req.extensions().get::<crate::tls::PeerCert>() {
        let mut groups = p.groups.clone();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".to_string());
        }
        return (p.user.clone(), groups);
    }
    req.headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.strip_prefix("Bearer "))
        .and_then(|t| crate::reviews::authenticate(t.trim()))
        .unwrap_or_else(|| {
            (
                "system:anonymous".to_string(),
                vec!["system:unauthenticated".to_string()],
            )
        })
}

/// The status of a SelfSubjectAccessReview `obj` sent by `requester`.
pub(crate) fn self_subject_access_review(
    state: &Arc<State>,
    requester: &(String, Vec<String>),
    obj: &Value,
) -> Result<Value, ApiError> {
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let ra = spec.get("resourceAttributes").filter(|v| v.is_object());
    let nra = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    // pkg/apis/authorization/validation: ValidateSelfSubjectAccessReviewSpec.
    let mut errs = crate::reviews::validate_spec(&spec, true);
    errs.extend(crate::reviews::validate_review_meta(obj, false));
    if !errs.is_empty() {
        // NewInvalid(authorizationapi.Kind(selfSAR.Kind)): the decoded
        // object's kind is empty, so the group alone is named.
        return Err(ApiError::invalid("authorization.k8s.io", "", "", &errs));
    }
    let (user, groups) = requester;
    let mut sar = json!({"user": user, "groups": groups});
    if let Some(ra) = ra {
        sar["resourceAttributes"] = ra.clone();
    }
    if let Some(nra) = nra {
        sar["nonResourceAttributes"] = nra.clone();
    }
    crate::reviews::subject_access_review(state, &json!({"spec": sar}))
}

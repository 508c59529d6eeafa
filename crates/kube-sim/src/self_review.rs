//! `SelfSubjectAccessReview` (authorization.k8s.io/v1): "may I do this?",
//! answered for the user the request authenticates as
//! (pkg/registry/authorization/selfsubjectaccessreview), with the same RBAC
//! evaluation as a SubjectAccessReview ([`crate::reviews`]); and the
//! discovery entries of the create-only review resources kube-sim serves.

use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::http::State;
use crate::resources::{NameRule, ResourceDef};

const fn review(
    group: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
) -> ResourceDef {
    ResourceDef {
        group,
        version: "v1",
        resource,
        kind,
        singular,
        namespaced: false,
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

/// The review resources, as discovery lists them (upstream: cluster-scoped,
/// verbs `["create"]`, a singular name, no storageVersionHash as nothing is
/// stored). Their paths are served by [`crate::reviews::handle`].
pub static REVIEW_RESOURCES: &[ResourceDef] = &[
    review(
        "authentication.k8s.io",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
    ),
    review(
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
    ),
    review(
        "authorization.k8s.io",
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
    ),
];

/// The user a request authenticates as, with its groups: the bearer token
/// is a kube-sim user name; no (or no valid) token is `system:anonymous`.
pub(crate) fn requester(req: &Request<Incoming>) -> (String, Vec<String>) {
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
    if ra.is_some() == nra.is_some() {
        // NewInvalid(authorizationapi.Kind(selfSAR.Kind)): the decoded
        // object's kind is empty, so the group alone is named.
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "",
            "",
            &[FieldError::invalid(
                "spec.resourceAttributes",
                ra.cloned().unwrap_or(Value::Null),
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )],
        ));
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

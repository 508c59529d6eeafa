//! API errors in the real kube-apiserver wire format (`metav1.Status`).
//!
//! Mirrors `k8s.io/apimachinery/pkg/api/errors/errors.go` (NewNotFound,
//! NewAlreadyExists, NewConflict, NewInvalid, NewBadRequest, ...) and
//! `k8s.io/apimachinery/pkg/util/validation/field/errors.go` for the text of
//! field errors.

use serde_json::{Map, Value, json};

/// The group/resource an error is about (`pods`, `deployments.apps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// The type of a field error (`field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    Required,
    Invalid,
    /// `field.TypeInvalid` (a value of the wrong JSON type).
    TypeInvalid,
    Forbidden,
    Duplicate,
    NotSupported,
    TooLong,
    TooMany,
}

impl FieldErrorType {
    fn cause_reason(self) -> &'static str {
        match self {
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::TooLong => "FieldValueTooLong",
            FieldErrorType::TooMany => "FieldValueTooMany",
        }
    }
    fn text(self) -> &'static str {
        match self {
            FieldErrorType::Required => "Required value",
            FieldErrorType::Invalid | FieldErrorType::TypeInvalid => "Invalid value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::TooLong => "Too long",
            FieldErrorType::TooMany => "Too many",
        }
    }
}

/// One validation error (`field.Error`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorType,
    pub field: String,
    /// The offending value, for Invalid/Duplicate/NotSupported.
    pub value: Option<Value>,
    pub detail: String,
    /// The value is of a named Go string type (`core.ServiceType`,
    /// `core.PersistentVolumeAccessMode`, ...), not `string`: ErrorBody's
    /// type switch does not match `string`, and the value is written by
    /// `json.Marshal` (`"a\u003cb"`, `"\u001b"`) instead of `%q`.
    pub named: bool,
}

impl FieldError {
    pub fn invalid(field: &str, value: Value, detail: impl Into<String>) -> Self {
        FieldError {
            named: false,
            kind: FieldErrorType::Invalid,
            field: field.to_string(),
            value: Some(value),
            detail: detail.into(),
        }
    }
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        FieldError {
            named: false,
            kind: FieldErrorType::Required,
            field: field.to_string(),
            value: None,
            detail: detail.into(),
        }
    }
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        FieldError {
            named: false,
            kind: FieldErrorType::Forbidden,
            field: field.to_string(),
            value: None,
            detail: detail.into(),
        }
    }
    pub fn not_supported(field: &str, value: Value, valid: &[&str]) -> Self {
        let quoted: Vec<String> = valid.iter().map(|v| crate::goquote::quote(v)).collect();
        FieldError {
            named: false,
            kind: FieldErrorType::NotSupported,
            field: field.to_string(),
            value: Some(value),
            detail: format!("supported values: {}", quoted.join(", ")),
        }
    }

    /// Marks the value as one of a named string type (see `named`).
    pub fn named(mut self) -> Self {
        self.named = true;
        self
    }

    /// `field.Error.ErrorBody()`.
    pub fn body(&self) -> String {
        let mut s = self.kind.text().to_string();
        match self.kind {
            FieldErrorType::Required | FieldErrorType::Forbidden | FieldErrorType::TooLong => {}
            _ => {
                if let Some(v) = &self.value {
                    s.push_str(": ");
                    match v {
                        Value::String(_) if self.named => s.push_str(&crate::gojson::to_string(v)),
                        _ => s.push_str(&go_value(v)),
                    }
                }
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// How Go's `%#v`/`%q` render the values that appear in field errors.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => crate::goquote::quote(s),
        Value::Null => "null".to_string(),
        // json.Marshal of a map or a list.
        other => crate::gojson::to_string(other),
    }
}

/// An API error: HTTP code plus the `Status` body the real server sends.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// `details` of the Status (omitted when `None`).
    pub details: Option<Value>,
    /// `metadata` of the Status (e.g. a fresh `continue` token on 410).
    pub metadata: Option<Value>,
    /// `Retry-After` header, seconds.
    pub retry_after: Option<u64>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn details(name: &str, gr: &GroupResource) -> Value {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !gr.group.is_empty() {
        d.insert("group".into(), json!(gr.group));
    }
    d.insert("kind".into(), json!(gr.resource));
    Value::Object(d)
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
            metadata: None,
            retry_after: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `errors.NewNotFound`.
    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        let message = if name.is_empty() {
            format!("{gr} not found")
        } else {
            format!("{gr} {} not found", crate::goquote::quote(name))
        };
        ApiError::new(404, "NotFound", message).with_details(details(name, gr))
    }

    /// `errors.NewAlreadyExists`.
    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{gr} {} already exists", crate::goquote::quote(name)),
        )
        .with_details(details(name, gr))
    }

    /// `errors.NewGenerateNameConflict` (retry after 1 s).
    pub fn generate_name_conflict(gr: &GroupResource, name: &str) -> Self {
        let mut d = details(name, gr);
        d["retryAfterSeconds"] = json!(1);
        let mut e = ApiError::new(
            409,
            "AlreadyExists",
            format!(
                "{gr} {} already exists, the server was not able to generate a unique name for the object",
                crate::goquote::quote(name)
            ),
        )
        .with_details(d);
        e.retry_after = Some(1);
        e
    }

    /// `errors.NewConflict`.
    pub fn conflict(gr: &GroupResource, name: &str, err: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {gr} {}: {err}",
                crate::goquote::quote(name)
            ),
        )
        .with_details(details(name, gr))
    }

    /// The optimistic-lock conflict of `registry.OptimisticLockErrorMsg`.
    pub fn stale(gr: &GroupResource, name: &str) -> Self {
        ApiError::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `errors.NewInvalid(qualifiedKind, name, errs)`; `kind` is `Pod` or
    /// `Deployment.apps` (GroupKind.String()).
    pub fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        // ErrorList.ToAggregate: the message names each distinct error once
        // (the causes keep every one).
        let mut parts: Vec<String> = Vec::new();
        for e in errs {
            let m = e.to_string();
            if !parts.contains(&m) {
                parts.push(m);
            }
        }
        let agg = if parts.len() == 1 {
            parts.remove(0)
        } else {
            format!("[{}]", parts.join(", "))
        };
        let causes: Vec<Value> = errs
            .iter()
            .map(|e| {
                json!({
                    "reason": e.kind.cause_reason(),
                    "message": e.body(),
                    "field": e.field,
                })
            })
            .collect();
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        if !kind.is_empty() {
            d.insert("kind".into(), json!(kind));
        }
        d.insert("causes".into(), Value::Array(causes));
        ApiError::new(
            422,
            "Invalid",
            format!(
                "{qualified} {} is invalid: {agg}",
                crate::goquote::quote(name)
            ),
        )
        .with_details(Value::Object(d))
    }

    /// `errors.NewBadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// `errors.NewMethodNotSupported`.
    pub fn method_not_supported(gr: &GroupResource, action: &str) -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind {}",
                crate::goquote::quote(&gr.to_string())
            ),
        )
        .with_details(details("", gr))
    }

    /// `errors.NewResourceExpired` (410 Gone).
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// `errors.NewInternalError`.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {err}"),
        )
        .with_details(json!({"causes": [{"message": err.to_string()}]}))
    }

    /// `errors.NewGenericServerResponse(422, ...)` as the PATCH handler
    /// answers a JSON patch that does not apply (a failed `test`, a bad path):
    /// staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go.
    pub fn unprocessable_patch(server_message: &str) -> Self {
        ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(
            json!({"causes": [{"reason": "UnexpectedServerResponse", "message": server_message}]}),
        )
    }

    /// `errors.NewTooManyRequests` / the 429 of the priority-and-fairness
    /// filter.
    pub fn too_many_requests(message: &str, retry_after: u64) -> Self {
        let mut e = ApiError::new(429, "TooManyRequests", message)
            .with_details(json!({"retryAfterSeconds": retry_after}));
        e.retry_after = Some(retry_after);
        e
    }

    /// `errors.NewServiceUnavailable`.
    pub fn service_unavailable(message: &str) -> Self {
        ApiError::new(503, "ServiceUnavailable", message)
    }

    /// 504 for a resourceVersion newer than the server has
    /// (`storage.NewTooLargeResourceVersionError`).
    pub fn too_large_rv(requested: u64, current: u64) -> Self {
        let mut e = ApiError::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1
        }));
        e.retry_after = Some(1);
        e
    }

    /// Rebuilds an error from a `Status` body (as the patch module renders
    /// its errors).
    pub fn from_status(code: u16, status: Value) -> Self {
        let get = |k: &str| {
            status
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        ApiError {
            code,
            reason: get("reason"),
            message: get("message"),
            details: status.get("details").cloned(),
            metadata: None,
            retry_after: None,
        }
    }

    /// The `Status` object, as JSON.
    pub fn status(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert(
            "metadata".into(),
            self.metadata.clone().unwrap_or_else(|| json!({})),
        );
        m.insert("status".into(), json!("Failure"));
        m.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_message_names_group_resource() {
        let e = ApiError::not_found(&GroupResource::new("apps", "deployments"), "web");
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        assert_eq!(
            e.status()["details"],
            json!({"name":"web","group":"apps","kind":"deployments"})
        );
    }

    #[test]
    fn invalid_message_matches_upstream_aggregate() {
        let e = ApiError::invalid(
            "",
            "Pod",
            "x",
            &[FieldError::forbidden(
                "metadata.finalizers",
                "no new finalizers can be added if the object is being deleted, found new finalizers []string{\"x\"}",
            )],
        );
        assert_eq!(
            e.message,
            "Pod \"x\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"x\"}"
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.status()["details"]["causes"][0]["reason"],
            "FieldValueForbidden"
        );
    }
}

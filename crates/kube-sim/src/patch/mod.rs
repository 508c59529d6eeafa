//! Patch application for kube-sim: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386), strategic merge patch and server-side apply, plus the
//! `metadata.managedFields` bookkeeping the real kube-apiserver does.
//!
//! Pure functions: no I/O, no server state. The server calls [`apply_patch`]
//! for PATCH requests (it returns the patched object with managedFields
//! already updated) and [`track_update`] for create and update (PUT).
//!
//! Upstream references: k8s.io/apiserver `pkg/endpoints/handlers/patch.go`
//! (error mapping), k8s.io/apimachinery `pkg/util/strategicpatch/patch.go`
//! (SMP), `pkg/util/managedfields/internal` and
//! sigs.k8s.io/structured-merge-diff (SSA), gopkg.in/evanphx/json-patch.v4
//! (JSON and merge patch).

use serde_json::{Map, Value, json};

pub mod fieldpath;
pub mod gojson;
mod json;
mod ssa;

pub(crate) use ssa::merge_apply_configuration;
pub use ssa::track_update;
mod strategic;

/// The message upstream's `NewGenericServerResponse(422, ...)` puts in the
/// Status (it drops the underlying error text), e.g. for a failed JSON-patch
/// `test`.
pub const GENERIC_INVALID_MESSAGE: &str =
    "the server rejected our request due to an error in our request";

/// The patch type, selected by the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchKind {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply; JSON is valid YAML).
    Apply,
}

impl PatchKind {
    /// Maps a request `Content-Type` to a patch type; `None` means the server
    /// answers `415 Unsupported Media Type` (see [`unsupported_media_type`]).
    /// Parameters (`; charset=utf-8`) are ignored, as upstream's content
    /// negotiation does.
    pub fn from_content_type(ct: &str) -> Option<PatchKind> {
        match crate::negotiate::media_type(ct).as_str() {
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" => Some(PatchKind::Apply),
            _ => None,
        }
    }

    /// The media type this kind is sent with.
    pub fn content_type(&self) -> &'static str {
        match self {
            PatchKind::Json => "application/json-patch+json",
            PatchKind::Merge => "application/merge-patch+json",
            PatchKind::Strategic => "application/strategic-merge-patch+json",
            PatchKind::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Group, version and kind of the object being patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gvk<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
}

impl Gvk<'_> {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether kube-sim has type information (strategic merge metadata) for
    /// this kind; upstream answers SMP on kinds without it (CRDs) with 415.
    pub fn has_schema(&self) -> bool {
        crate::openapi::schema::schemas()
            .root(self.group, self.version, self.kind)
            .is_some()
    }
}

/// One PATCH request, as the server has parsed it.
#[derive(Debug, Clone)]
pub struct PatchRequest<'a> {
    /// The stored object; `None` only for Apply creating an object.
    pub live: Option<&'a Value>,
    pub body: &'a [u8],
    pub kind: PatchKind,
    pub gvk: Gvk<'a>,
    /// `?fieldManager=`, or for non-apply patches the manager the server
    /// derived from the user agent (upstream: the part before the first `/`).
    pub field_manager: &'a str,
    /// Server-side apply `?force=true`.
    pub force: bool,
    /// e.g. `Some("status")`.
    pub subresource: Option<&'a str>,
    /// RFC 3339 time stamped into managedFields.
    pub now: &'a str,
}

/// Why a patch could not be applied; each maps to one HTTP status and one
/// upstream `Status` body ([`PatchError::to_status`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400 BadRequest: malformed patch body.
    #[error("{0}")]
    BadRequest(String),
    /// 422 Invalid: e.g. a failed JSON-patch `test`, a bad path (message
    /// [`GENERIC_INVALID_MESSAGE`], as upstream), or invalid PatchOptions.
    #[error("{0}")]
    Invalid(String),
    /// 409 Conflict: server-side apply conflicts; causes are
    /// (field path, manager as upstream prints it).
    #[error("{message}")]
    Conflict {
        message: String,
        causes: Vec<(String, String)>,
    },
    /// 415: the patch type is not supported for this object.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 500 with no reason: upstream returns a plain Go error here (e.g. an
    /// applied field not in the schema, a list item without its merge key),
    /// which the apiserver answers as `code: 500` with the error text.
    #[error("{0}")]
    ServerError(String),
    /// 413: more than 10,000 JSON-patch operations.
    #[error("{0}")]
    RequestEntityTooLarge(String),
    /// 422 Invalid naming the field `patch`: the patched object does not
    /// decode into the kind's type (handlers/patch.go
    /// `NewInvalid(GroupKind{}, "", field.Invalid("patch", value, err))`);
    /// `value` is the patched JSON (JSON and merge patches) or the patch as
    /// Go prints a map (strategic merge patch).
    #[error("patch: {detail}")]
    Undecodable { value: String, detail: String },
}

impl PatchError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Invalid(_) => 422,
            PatchError::Conflict { .. } => 409,
            PatchError::UnsupportedMediaType(_) => 415,
            PatchError::ServerError(_) => 500,
            PatchError::RequestEntityTooLarge(_) => 413,
            PatchError::Undecodable { .. } => 422,
        }
    }

    /// The `Status` body the real server sends for this error.
    pub fn to_status(&self) -> Value {
        if let PatchError::Undecodable { value, detail } = self {
            let e = crate::error::FieldError::invalid("patch", json!(value), detail.clone());
            return crate::error::ApiError::invalid("", "", "", &[e]).status();
        }
        let mut s = Map::new();
        s.insert("kind".into(), json!("Status"));
        s.insert("apiVersion".into(), json!("v1"));
        s.insert("metadata".into(), json!({}));
        s.insert("status".into(), json!("Failure"));
        let (message, reason, details): (&str, Option<&str>, Option<Value>) = match self {
            PatchError::BadRequest(m) => (m, Some("BadRequest"), None),
            PatchError::Invalid(m) => (m, Some("Invalid"), Some(json!({}))),
            PatchError::Conflict { message, causes } => (
                message,
                Some("Conflict"),
                Some(json!({
                    "causes": causes.iter().map(|(field, manager)| json!({
                        "reason": "FieldManagerConflict",
                        "message": format!("conflict with {manager}"),
                        "field": field,
                    })).collect::<Vec<_>>()
                })),
            ),
            PatchError::UnsupportedMediaType(m) => (m, Some("UnsupportedMediaType"), None),
            PatchError::ServerError(m) => (m, None, None),
            PatchError::RequestEntityTooLarge(m) => (m, Some("RequestEntityTooLarge"), None),
            PatchError::Undecodable { .. } => unreachable!("rendered above"),
        };
        s.insert("message".into(), json!(message));
        if let Some(r) = reason {
            s.insert("reason".into(), json!(r));
        }
        if let Some(d) = details {
            s.insert("details".into(), d);
        }
        s.insert("code".into(), json!(self.code()));
        Value::Object(s)
    }
}

/// The 415 answer for an unsupported patch `Content-Type` (or for strategic
/// merge patch on a kind without a schema), with upstream's message listing
/// the accepted media types.
pub fn unsupported_media_type(strategic_allowed: bool) -> PatchError {
    let types: Vec<&str> = [
        PatchKind::Json,
        PatchKind::Merge,
        PatchKind::Strategic,
        PatchKind::Apply,
    ]
    .iter()
    .filter(|k| strategic_allowed || **k != PatchKind::Strategic)
    .map(PatchKind::content_type)
    .collect();
    PatchError::UnsupportedMediaType(format!(
        "the body of the request was in an unknown format - accepted media types include: {}",
        types.join(", ")
    ))
}

/// Applies the patch to `live` and returns the new full object, with
/// `metadata.managedFields` updated (operation `Apply` for server-side
/// apply, `Update` otherwise). The caller then applies its own object rules
/// (immutable fields, status/spec split, finalizer rules, resourceVersion).
pub fn apply_patch(req: &PatchRequest) -> Result<Value, PatchError> {
    let mut patched = apply_patch_untracked(req)?;
    if req.kind != PatchKind::Apply {
        track_update(
            req.live,
            &mut patched,
            req.field_manager,
            req.subresource,
            req.now,
            &req.gvk.api_version(),
        );
    }
    Ok(patched)
}

/// [`apply_patch`] without the managedFields of a non-apply patch, which the
/// caller adds with [`track_update`] once the patched object decodes
/// ([`check_decodes`]).
pub fn apply_patch_untracked(req: &PatchRequest) -> Result<Value, PatchError> {
    // k8s.io/apiserver ValidatePatchOptions.
    if req.kind == PatchKind::Apply && req.field_manager.is_empty() {
        return Err(PatchError::Invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
                .to_string(),
        ));
    }
    if req.kind != PatchKind::Apply && req.force {
        return Err(PatchError::Invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
                .to_string(),
        ));
    }
    let live = || {
        req.live
            .ok_or_else(|| PatchError::BadRequest("no object to patch".to_string()))
    };
    let patched = match req.kind {
        PatchKind::Apply => {
            let config = parse_apply_body(req.body)?;
            return ssa::apply(
                req.live,
                &config,
                &req.gvk,
                req.field_manager,
                req.force,
                req.subresource,
                req.now,
            );
        }
        PatchKind::Json => json::apply_json_patch(live()?, req.body)?,
        PatchKind::Merge => json::apply_merge_patch(live()?, req.body)?,
        PatchKind::Strategic => {
            let Some(root) = crate::openapi::schema::schemas().root(
                req.gvk.group,
                req.gvk.version,
                req.gvk.kind,
            ) else {
                return Err(unsupported_media_type(false));
            };
            strategic::apply(live()?, req.body, root)?
        }
    };
    Ok(patched)
}

/// Decoding the patched object into the kind's Go type, as the PATCH
/// handler does before admission: an integer field that cannot hold its
/// value fails a JSON or merge patch (422 naming `patch`, with the patched
/// JSON) and is converted with Go's truncation by a strategic merge patch or
/// server-side apply (which decode through the unstructured converter); an
/// unknown field under `fieldValidation=Strict` fails the same way
/// (`unknown` lists them, as [`crate::openapi::schema::unknown_fields`]).
/// `written` is the patched document as upstream's patch library writes
/// it ([`Written`]), which the message quotes.
pub fn check_decodes(
    req: &PatchRequest,
    patched: &mut Value,
    written: &Written,
    unknown: &[String],
) -> Result<(), PatchError> {
    let g = &req.gvk;
    let root = crate::openapi::schema::schemas().root(g.group, g.version, g.kind);
    let shown = |patched: &Value| match (req.kind, written.get()) {
        (PatchKind::Strategic, _) => serde_json::from_slice::<Value>(req.body)
            .map(|p| go_print(&p))
            .unwrap_or_default(),
        (_, Some(doc)) => doc.to_go_string(),
        _ if root.is_none() => crate::gojson::to_string(&sorted_keys(patched)),
        _ => crate::gojson::to_string(patched),
    };
    let quantity_error =
        crate::openapi::schema::quantity_decode_error(g.group, g.version, g.kind, patched);
    match req.kind {
        PatchKind::Json | PatchKind::Merge => {
            let literal = |pointer: &str| -> Option<String> {
                written.get()?.literal_at(pointer).map(str::to_string)
            };
            let decode = |patched: &mut Value, order: Option<&Value>| {
                crate::openapi::schema::decode_integers(
                    g.group, g.version, g.kind, patched, order, &literal,
                )
            };
            if let Some(detail) = quantity_error.clone() {
                // A quantity that does not parse aborts decoding: its error
                // wins over an integer's.
                return Err(PatchError::Undecodable {
                    value: shown(patched),
                    detail,
                });
            }
            if decode(patched, None).is_err() {
                // The error upstream reports is the first in the order of
                // the document it decodes.
                let order = written.get().map(gojson::Node::to_value_lossy);
                let detail = decode(patched, order.as_ref()).err().unwrap_or_default();
                return Err(PatchError::Undecodable {
                    value: shown(patched),
                    detail,
                });
            }
        }
        PatchKind::Strategic => {
            if let Err(detail) = quantity_error.clone().map_or_else(
                || crate::openapi::schema::coerce_integers(g.group, g.version, g.kind, patched),
                Err,
            ) {
                return Err(PatchError::Undecodable {
                    value: shown(patched),
                    detail,
                });
            }
        }
        PatchKind::Apply => {
            if let Err(e) = quantity_error.map_or_else(
                || crate::openapi::schema::coerce_integers(g.group, g.version, g.kind, patched),
                Err,
            ) {
                // The object named is the applied configuration.
                let config = parse_apply_body(req.body).unwrap_or_default();
                let meta = |k: &str| {
                    config
                        .pointer(&format!("/metadata/{k}"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                // GroupVersionKind.String(): `/v1, Kind=Pod` for the core group.
                let gvk = format!("{}/{}, Kind={}", g.group, g.version, g.kind);
                return Err(PatchError::ServerError(format!(
                    "failed to convert new object ({}/{}; {gvk}) to proper version: unable to convert unstructured object to {gvk}: {e}",
                    meta("namespace"),
                    meta("name"),
                )));
            }
        }
    }
    if !unknown.is_empty() && req.kind != PatchKind::Apply {
        return Err(PatchError::Undecodable {
            value: shown(patched),
            detail: crate::openapi::schema::strict_decoding_error(unknown),
        });
    }
    // The decoded object's quantities, as they marshal again.
    crate::openapi::schema::canonicalize_quantities(g.group, g.version, g.kind, patched);
    Ok(())
}

/// The patched document that upstream's JSON patch library
/// (gopkg.in/evanphx/json-patch.v4) makes of a JSON or merge patch, which
/// the apiserver decodes and, when that fails, quotes (see [`gojson`]),
/// made when first asked for (a patch that decodes does not need it).
pub struct Written<'r, 'a> {
    req: &'r PatchRequest<'a>,
    doc: std::cell::OnceCell<Option<gojson::Node>>,
}

impl<'r, 'a> Written<'r, 'a> {
    pub fn new(req: &'r PatchRequest<'a>) -> Self {
        Written {
            req,
            doc: std::cell::OnceCell::new(),
        }
    }

    /// The document; None for other patch types, or a patch kube-sim's
    /// replay does not follow.
    pub fn get(&self) -> Option<&gojson::Node> {
        self.doc.get_or_init(|| written_document(self.req)).as_ref()
    }
}

/// [`Written`]'s document: the live object as encoded (a custom resource,
/// without a Go type here, is unstructured JSON, which Go marshals with
/// sorted keys) and the patch with its literals as written.
fn written_document(req: &PatchRequest) -> Option<gojson::Node> {
    let g = &req.gvk;
    let root = crate::openapi::schema::schemas().root(g.group, g.version, g.kind);
    let encoded = gojson::Node::encoded(req.live?, root);
    let body = gojson::Node::parse(req.body)?;
    match req.kind {
        PatchKind::Json => gojson::json_patch(encoded, &body),
        PatchKind::Merge => gojson::merge_patch(encoded, body),
        _ => None,
    }
}

/// `v` with every object's keys in order, as Go's json.Marshal writes a
/// `map[string]interface{}`.
fn sorted_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, x)| (k.clone(), sorted_keys(x)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted_keys).collect()),
        other => other.clone(),
    }
}

/// Go's `fmt.Sprintf("%v", x)` of a decoded JSON value (maps with sorted
/// keys, `map[k:v k2:v2]`, lists `[a b]`, strings bare, floats as `%g`).
pub fn go_print(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => go_float(f),
            _ => n.to_string(),
        },
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_print).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_print(&m[k.as_str()])))
                .collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the
/// shortest digits, in exponent form when the exponent is below -4 or at
/// least 6: `1.5`, `100000.5`, `1e+06`, `1.234567e+06`.
fn go_float(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.5e6".
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

fn parse_apply_body(body: &[u8]) -> Result<Value, PatchError> {
    // JSON is YAML; parse JSON first for exact number handling.
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return match v {
            Value::Object(_) => Ok(v),
            _ => Err(PatchError::BadRequest(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal non-object into Go value of type map[string]interface {}".to_string(),
            )),
        };
    }
    match serde_yaml::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(PatchError::BadRequest(
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal non-object into Go value of type map[string]interface {}".to_string(),
        )),
        Err(e) => Err(PatchError::BadRequest(format!("error decoding YAML: {e}"))),
    }
}

/// The manager name upstream derives from a `User-Agent` when no
/// `fieldManager` is given: the part before the first `/`
/// (`kubectl/v1.33.0 (linux/amd64) ...` -> `kubectl`).
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let s = user_agent.split('/').next().unwrap_or("");
    // ValidateFieldManager: at most 128 characters.
    s.chars().take(128).collect()
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

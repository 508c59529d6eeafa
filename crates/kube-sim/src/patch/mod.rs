//! Patch application for kube-sim: JSON patch (RFC 6902), JSON merge patch
//! (RFC 7386), strategic merge patch and server-side apply, plus the
//! `metadata.managedFields` bookkeeping the real kube-apiserver does.
//!
//! Pure functions: no I/O, no server state. The server calls [`apply_patch`]
//! for PATCH requests and [`track_update`] for create/update.

use serde_json::Value;

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
    /// answers `415 Unsupported Media Type`. Parameters (`; charset=utf-8`)
    /// are ignored, as upstream's content negotiation does.
    pub fn from_content_type(ct: &str) -> Option<PatchKind> {
        let media = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchKind::Apply)
            }
            _ => None,
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

/// One PATCH request, as the server has parsed it.
#[derive(Debug, Clone)]
pub struct PatchRequest<'a> {
    /// The stored object; `None` only for Apply creating an object.
    pub live: Option<&'a Value>,
    pub body: &'a [u8],
    pub kind: PatchKind,
    pub gvk: Gvk<'a>,
    pub field_manager: &'a str,
    /// Server-side apply `?force=true`.
    pub force: bool,
    /// e.g. `Some("status")`.
    pub subresource: Option<&'a str>,
    /// RFC 3339 time stamped into managedFields.
    pub now: &'a str,
}

/// Why a patch could not be applied; each maps to one HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400: malformed patch body.
    #[error("{0}")]
    BadRequest(String),
    /// 422: e.g. a failed JSON-patch `test`, a bad path.
    #[error("{0}")]
    Invalid(String),
    /// 409: server-side apply conflicts (field path, conflicting manager).
    #[error("{message}")]
    Conflict {
        message: String,
        causes: Vec<(String, String)>,
    },
    /// 415: the patch type is not supported for this object.
    #[error("{0}")]
    UnsupportedMediaType(String),
}

/// Applies the patch to `live` and returns the new full object.
pub fn apply_patch(req: &PatchRequest) -> Result<Value, PatchError> {
    let live = match req.live {
        Some(v) => v,
        None => {
            return Err(PatchError::BadRequest(
                "no live object to patch".to_string(),
            ));
        }
    };
    match req.kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(req.body)
                .map_err(|e| PatchError::BadRequest(e.to_string()))?;
            let mut doc = live.clone();
            json_patch::patch(&mut doc, &ops).map_err(|e| PatchError::Invalid(e.to_string()))?;
            Ok(doc)
        }
        PatchKind::Merge => {
            let patch: Value = serde_json::from_slice(req.body)
                .map_err(|e| PatchError::BadRequest(e.to_string()))?;
            let mut doc = live.clone();
            json_patch::merge(&mut doc, &patch);
            Ok(doc)
        }
        PatchKind::Strategic | PatchKind::Apply => Err(PatchError::UnsupportedMediaType(
            "strategic merge patch and apply: being implemented".to_string(),
        )),
    }
}

/// Maintains `metadata.managedFields` for an Update operation (create, PUT,
/// non-apply PATCH). Initial version: leaves managedFields as they are.
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
    api_version: &str,
) {
    let _ = (old, new, manager, subresource, now, api_version);
}

//! OpenAPI v2 and v3 documents served by kube-sim (`/openapi/v2`,
//! `/openapi/v3`, `/openapi/v3/<group-version path>`).

pub mod schema;

use serde_json::Value;

const V2_MINIMAL: &[u8] =
    br#"{"swagger":"2.0","info":{"title":"Kubernetes","version":"v1.33.0"},"paths":{},"definitions":{}}"#;

/// The OpenAPI v2 document (JSON bytes).
pub fn v2_document() -> &'static [u8] {
    V2_MINIMAL
}

/// The `/openapi/v3` discovery index.
pub fn v3_index(base_url_independent: bool) -> Value {
    let _ = base_url_independent;
    serde_json::json!({ "paths": {} })
}

/// The OpenAPI v3 document for `group_version_path` (e.g. `api/v1`,
/// `apis/apps/v1`), or `None` when kube-sim serves no such group-version.
pub fn v3_document(group_version_path: &str) -> Option<&'static [u8]> {
    let _ = group_version_path;
    None
}

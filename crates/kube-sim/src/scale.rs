//! The `deployments/scale` subresource (autoscaling/v1 Scale), as
//! pkg/registry/apps/deployment/storage/storage.go ScaleREST serves it:
//! reads and writes `spec.replicas` of the Deployment (`kubectl scale`).

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::object;
use crate::patch::{self, PatchKind, PatchRequest};
use crate::resources::ResId;
use crate::store::{Store, WriteOptions};

/// `metav1.LabelSelectorAsSelector(spec.selector).String()` for the
/// matchLabels/matchExpressions a Deployment carries.
fn selector_string(sel: Option<&Value>) -> String {
    let Some(sel) = sel else { return String::new() };
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let mut values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            values.sort_unstable();
            match e
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or_default()
            {
                "In" => parts.push(format!("{key} in ({})", values.join(","))),
                "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
                "Exists" => parts.push(key.to_string()),
                "DoesNotExist" => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.sort();
    parts.join(",")
}

/// The Scale view of a Deployment.
pub fn to_scale(dep: &Value) -> Value {
    let m = object::meta(dep).cloned().unwrap_or_default();
    let mut meta = serde_json::Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = m.get(k) {
            meta.insert(k.into(), v.clone());
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": meta,
        "spec": {"replicas": dep.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
        "status": {
            "replicas": dep.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector_string(dep.pointer("/spec/selector")),
        }
    })
}

fn write_replicas(
    store: &Store,
    rid: ResId,
    ns: &str,
    name: &str,
    scale: &Value,
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let def = crate::resources::def(rid);
    let live = store.get(rid, ns, name)?;
    let rv = object::meta_str(scale, "resourceVersion");
    if !rv.is_empty() && rv != live.rv.to_string() {
        return Err(ApiError::stale(&def.group_resource(), name));
    }
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if replicas < 0 {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            name,
            &[crate::error::FieldError::invalid(
                "spec.replicas",
                json!(replicas),
                "must be greater than or equal to 0",
            )],
        ));
    }
    let mut dep = live.value.clone();
    dep["spec"]["replicas"] = json!(replicas);
    let (s, _) = store.update(rid, ns, name, None, dep, opts)?;
    Ok(to_scale(&s.value))
}

/// GET, PUT or PATCH on `deployments/<name>/scale`.
#[allow(clippy::too_many_arguments)]
pub fn handle(
    store: &Store,
    rid: ResId,
    ns: &str,
    name: &str,
    method: &http::Method,
    content_type: Option<&str>,
    body: &[u8],
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let live = store.get(rid, ns, name)?;
    match *method {
        http::Method::GET | http::Method::HEAD => Ok(to_scale(&live.value)),
        http::Method::PUT => {
            let scale: Value = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
            })?;
            write_replicas(store, rid, ns, name, &scale, opts)
        }
        http::Method::PATCH => {
            let kind = PatchKind::from_content_type(content_type.unwrap_or_default()).ok_or_else(
                || {
                    ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type")
                        .with_details(serde_json::json!({}))
                },
            )?;
            let current = to_scale(&live.value);
            let now = object::now_string();
            let req = PatchRequest {
                live: Some(&current),
                body,
                kind,
                gvk: patch::Gvk {
                    group: "autoscaling",
                    version: "v1",
                    kind: "Scale",
                },
                field_manager: &opts.field_manager,
                force: opts.force,
                subresource: Some("scale"),
                now: &now,
            };
            let patched = patch::apply_patch(&req)
                .map_err(|e| ApiError::from_status(e.code(), e.to_status()))?;
            write_replicas(store, rid, ns, name, &patched, opts)
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    }
}

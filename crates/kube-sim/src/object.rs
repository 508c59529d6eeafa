//! Helpers over schemaless objects: metadata access, canonical field order,
//! timestamps.

use serde_json::{Map, Value};

/// RFC 3339 with second precision, as `metav1.Time` serialises.
pub fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn now_string() -> String {
    format_time(jiff::Timestamp::now())
}

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    meta(obj)
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

/// `ObjectMeta`'s fields, in the order Go serialises them (what else
/// `metadata` holds, the decoder drops).
pub(crate) const META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Rewrites an object into the field order the real server emits (`kind`,
/// `apiVersion`, `metadata` in ObjectMeta order, then the rest), and drops
/// empty/null metadata fields the way Go's `omitempty` does.
pub fn canonicalize(obj: Value, kind: &str, api_version: &str) -> Value {
    let Value::Object(mut m) = obj else {
        return obj;
    };
    let mut out = Map::new();
    m.remove("kind");
    m.remove("apiVersion");
    out.insert("kind".into(), Value::String(kind.into()));
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    let meta = match m.remove("metadata") {
        Some(Value::Object(mm)) => mm,
        _ => Map::new(),
    };
    let mut meta = meta;
    let mut om = Map::new();
    for k in META_ORDER {
        if *k == "resourceVersion" && !meta.contains_key("resourceVersion") {
            // Keep its slot: the store fills it in when committing.
            om.insert("resourceVersion".into(), Value::Null);
            continue;
        }
        if let Some(v) = meta.remove(*k) {
            let empty = match &v {
                Value::Null => *k != "resourceVersion",
                Value::String(s) => s.is_empty() && *k != "resourceVersion",
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                Value::Number(n) => n.as_i64() == Some(0) && *k == "generation",
                _ => false,
            };
            if !empty {
                om.insert((*k).into(), v);
            }
        }
    }
    for (k, v) in meta {
        om.insert(k, v);
    }
    out.insert("metadata".into(), Value::Object(om));
    for (k, v) in m {
        out.insert(k, v);
    }
    Value::Object(out)
}

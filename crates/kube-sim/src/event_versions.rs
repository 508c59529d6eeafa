//! core/v1 Event and events.k8s.io/v1 Event are two versions of one stored
//! resource on a real API server (pkg/apis/core Event, served as
//! events.k8s.io/v1 with pkg/apis/events/v1/conversion.go). kube-sim stores
//! Events once, in core/v1 form, and serves events.k8s.io/v1 as a converted
//! view: same names, uids and resourceVersions, one history.
//!
//! Field mapping (v1 ↔ core): regarding ↔ involvedObject, note ↔ message,
//! reportingController ↔ reportingComponent, deprecatedSource ↔ source,
//! deprecatedFirstTimestamp ↔ firstTimestamp, deprecatedLastTimestamp ↔
//! lastTimestamp, deprecatedCount ↔ count; eventTime, series, action,
//! reason, related, reportingInstance and type are the same.

use serde_json::{Map, Value};

use crate::resources::{self, ResId};

/// (events.k8s.io/v1 name, core/v1 name).
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Go field order of events.k8s.io/v1 Event.
const V1_ORDER: &[&str] = &[
    "metadata",
    "eventTime",
    "series",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
];

/// Go field order of core/v1 Event.
const CORE_ORDER: &[&str] = &[
    "metadata",
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
];

pub fn core_rid() -> Option<ResId> {
    resources::find("", "v1", "events")
}

pub fn v1_rid() -> Option<ResId> {
    resources::find("events.k8s.io", "v1", "events")
}

/// The resource whose storage `rid` uses, if it is a view of another
/// (events.k8s.io/v1 Events; the admissionregistration v1beta1 policy kinds,
/// see [`crate::admission::versions`]).
pub fn storage_of(rid: ResId) -> Option<ResId> {
    (Some(rid) == v1_rid())
        .then(core_rid)
        .flatten()
        .or_else(|| crate::admission::versions::storage_of(rid))
}

fn reorder(m: Map<String, Value>, kind: &str, api_version: &str, order: &[&str]) -> Value {
    let mut m = m;
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(kind.into()));
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    m.remove("kind");
    m.remove("apiVersion");
    for k in order {
        if let Some(v) = m.remove(*k) {
            out.insert((*k).to_string(), v);
        }
    }
    for (k, v) in m {
        out.insert(k, v);
    }
    Value::Object(out)
}

/// `m` with its keys renamed by [`RENAMES`]: `direction` turns a pair
/// `(v1, core)` into `(from, to)`.
fn renamed(
    m: &Map<String, Value>,
    direction: fn(&(&'static str, &'static str)) -> (&'static str, &'static str),
) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, val) in m {
        let name = RENAMES
            .iter()
            .map(direction)
            .find(|(from, _)| from == k)
            .map_or(k.as_str(), |(_, to)| to);
        out.insert(name.to_string(), val.clone());
    }
    out
}

/// A stored core/v1 Event as events.k8s.io/v1.
pub fn core_to_v1(v: &Value) -> Value {
    if let Some(view) = crate::admission::versions::to_view(v) {
        return view;
    }
    let Value::Object(m) = v else {
        return v.clone();
    };
    let mut out = renamed(m, |&(v1, core)| (core, v1));
    out.entry("eventTime").or_insert(Value::Null);
    reorder(out, "Event", "events.k8s.io/v1", V1_ORDER)
}

/// An events.k8s.io/v1 Event as core/v1 (for storage).
pub fn v1_to_core(v: &Value) -> Value {
    if let Some(stored) = crate::admission::versions::to_storage(v) {
        return stored;
    }
    let Value::Object(m) = v else {
        return v.clone();
    };
    reorder(renamed(m, |&pair| pair), "Event", "v1", CORE_ORDER)
}

/// A field selector label of events.k8s.io/v1 as the core/v1 one.
pub fn v1_field_to_core(field: &str) -> String {
    if let Some(rest) = field.strip_prefix("regarding.") {
        return format!("involvedObject.{rest}");
    }
    match field {
        "reportingController" => "reportingComponent".into(),
        "deprecatedSource" => "source".into(),
        other => other.into(),
    }
}

/// `ValidateEventUpdate` for an update through events.k8s.io/v1 (not for
/// core/v1, which keeps the legacy rules): the event's fields are
/// immutable. `new` and `old` are in core form; the paths are the internal
/// type's (`message`, `reportingController`). The error's kind is `Event`.
pub fn validate_v1_update(new: &Value, old: &Value) -> Vec<crate::error::FieldError> {
    // (path, core/v1 JSON name), in upstream's order (reason twice, as there).
    const IMMUTABLE: &[(&str, &str)] = &[
        ("involvedObject", "involvedObject"),
        ("reason", "reason"),
        ("message", "message"),
        ("source", "source"),
        ("firstTimestamp", "firstTimestamp"),
        ("lastTimestamp", "lastTimestamp"),
        ("count", "count"),
        ("reason", "reason"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
    ];
    let get = |v: &Value, k: &str| v.get(k).filter(|x| !x.is_null()).cloned();
    // Times compare as instants (to the microsecond, as MicroTime keeps).
    let same = |k: &str| match (get(new, k), get(old, k)) {
        (Some(Value::String(a)), Some(Value::String(b))) => {
            match (a.parse::<jiff::Timestamp>(), b.parse::<jiff::Timestamp>()) {
                (Ok(x), Ok(y)) => x.as_microsecond() == y.as_microsecond(),
                _ => a == b,
            }
        }
        (a, b) => a == b,
    };
    IMMUTABLE
        .iter()
        .filter(|(_, k)| !same(k))
        .map(|(path, k)| {
            // A Go zero value where the field is absent.
            let v = get(new, k).unwrap_or_else(|| match *k {
                "count" => Value::from(0),
                "involvedObject" | "source" => Value::Object(Map::new()),
                "related" | "eventTime" | "firstTimestamp" | "lastTimestamp" => Value::Null,
                _ => Value::String(String::new()),
            });
            crate::error::FieldError::invalid(path, v, "field is immutable")
        })
        .collect()
}

/// Rewrites an error about the core resource as one about the view.
pub fn view_error(mut e: crate::error::ApiError) -> crate::error::ApiError {
    e.message = e
        .message
        .replacen("events \"", "events.events.k8s.io \"", 1);
    if let Some(d) = e.details.as_mut().and_then(Value::as_object_mut)
        && d.get("kind").and_then(Value::as_str) == Some("events")
    {
        d.insert("group".into(), Value::String("events.k8s.io".into()));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_and_order() {
        let v1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"},
            "note": "n", "reason": "R", "type": "Normal", "action": "A",
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "c", "reportingInstance": "i",
            "deprecatedCount": 2,
        });
        let core = v1_to_core(&v1);
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "n");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["count"], 2);
        assert_eq!(core["apiVersion"], "v1");
        let keys: Vec<&str> = core
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            &keys[..4],
            ["kind", "apiVersion", "metadata", "involvedObject"]
        );
        let back = core_to_v1(&core);
        assert_eq!(
            back,
            v1.clone()
                .as_object()
                .map(|m| reorder(m.clone(), "Event", "events.k8s.io/v1", V1_ORDER))
                .unwrap_or_default()
        );
        assert_eq!(
            core_to_v1(&json!({"metadata": {}}))["eventTime"],
            Value::Null
        );
        assert_eq!(v1_field_to_core("regarding.name"), "involvedObject.name");
        assert_eq!(
            v1_field_to_core("reportingController"),
            "reportingComponent"
        );
    }
}

//! `meta.k8s.io/v1` Table rendering (server-side printing for `kubectl get`).

use serde_json::{Value, json};

/// Renders `objects` as a `meta.k8s.io/v1` Table for
/// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
/// `include_object` is `None`, `Metadata` or `Object` (default `Metadata`).
pub fn to_table(
    resource: &str,
    group: &str,
    objects: &[&Value],
    include_object: &str,
    list_meta: Value,
    now: jiff::Timestamp,
) -> Value {
    let _ = (resource, group);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let name = o
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or(Value::String(String::new()));
            let age = o
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                .map(|t| format!("{}s", now.duration_since(t).as_secs().max(0)))
                .unwrap_or_else(|| "<unknown>".to_string());
            let object = match include_object {
                "None" => Value::Null,
                "Object" => (*o).clone(),
                _ => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or(json!({})),
                }),
            };
            json!({ "cells": [name, age], "object": object })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0},
        ],
        "rows": rows,
    })
}

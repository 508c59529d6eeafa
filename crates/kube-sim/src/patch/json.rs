//! JSON patch and JSON merge patch with the real server's error mapping
//! (k8s.io/apiserver `handlers/patch.go` `applyJSPatch`) and the semantics
//! of the library it uses, gopkg.in/evanphx/json-patch.v4.

use serde_json::Value;

use super::{GENERIC_INVALID_MESSAGE, PatchError};

/// upstream `maxJSONPatchOperations`.
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

pub(crate) fn apply_json_patch(live: &Value, body: &[u8]) -> Result<Value, PatchError> {
    // jsonpatch.DecodePatch failures are 400s with the decoder's message.
    let ops: Value =
        serde_json::from_slice(body).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    let Value::Array(ops) = ops else {
        return Err(PatchError::BadRequest(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".to_string(),
        ));
    };
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::RequestEntityTooLarge(format!(
            "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let mut doc = live.clone();
    for op in &ops {
        // Any failure while applying is a 422 whose message upstream's
        // NewGenericServerResponse replaces with the generic text.
        apply_one(&mut doc, op).map_err(|why| {
            tracing::debug!(%why, "json patch operation failed");
            PatchError::Invalid(GENERIC_INVALID_MESSAGE.to_string())
        })?;
    }
    Ok(doc)
}

fn apply_one(doc: &mut Value, op: &Value) -> Result<(), String> {
    if op.get("op").and_then(Value::as_str) == Some("test") {
        return test(doc, op);
    }
    let parsed: json_patch::PatchOperation =
        serde_json::from_value(op.clone()).map_err(|e| e.to_string())?;
    json_patch::patch(doc, std::slice::from_ref(&parsed)).map_err(|e| e.to_string())
}

/// evanphx/json-patch v4 `test`: the container must exist; a missing member
/// matches a `null` value (kube-rs's finalizer helper relies on this with
/// `test /metadata/finalizers == null`).
fn test(doc: &Value, op: &Value) -> Result<(), String> {
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or("test operation missing path")?;
    let expected = op.get("value").unwrap_or(&Value::Null);
    if path.is_empty() {
        return if doc == expected {
            Ok(())
        } else {
            Err(format!("testing value {path} failed: test failed"))
        };
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("invalid path {path}"));
    };
    let tokens: Vec<String> = rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens.split_last().ok_or("empty path")?;
    let mut container = doc;
    for t in parents {
        container = match container {
            Value::Object(m) => m.get(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        }
        .ok_or_else(|| format!("test operation could not find container for path {path}"))?;
    }
    let actual = match container {
        Value::Object(m) => m.get(last),
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => a.get(i),
            _ => return Err(format!("error in test for path: '{path}'")),
        },
        _ => {
            return Err(format!(
                "test operation could not find container for path {path}"
            ));
        }
    };
    match actual {
        None if expected.is_null() => Ok(()),
        Some(v) if v == expected => Ok(()),
        _ => Err(format!("testing value {path} failed: test failed")),
    }
}

/// RFC 7386 merge patch; a body that is not a JSON object answers
/// `400 Invalid JSON Patch` (evanphx `ErrBadJSONPatch`).
pub(crate) fn apply_merge_patch(live: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let bad = || PatchError::BadRequest("Invalid JSON Patch".to_string());
    let patch: Value = serde_json::from_slice(body).map_err(|_| bad())?;
    if !patch.is_object() {
        return Err(bad());
    }
    let mut doc = live.clone();
    merge_docs(&mut doc, patch);
    Ok(doc)
}

/// evanphx/json-patch v4 `mergeDocs`, which upstream's merge patch is: a
/// null member deletes; a member new to the document (or null there) is
/// set with its nulls pruned, through arrays too (RFC 7386 would keep
/// the nulls inside arrays); an object merges into an object.
fn merge_docs(doc: &mut Value, patch: Value) {
    let (Some(d), Value::Object(p)) = (doc.as_object_mut(), patch) else {
        return;
    };
    for (k, v) in p {
        if v.is_null() {
            d.shift_remove(&k);
            continue;
        }
        match d.get_mut(&k) {
            Some(cur) if !cur.is_null() => *cur = merge(std::mem::take(cur), v),
            _ => {
                let mut v = v;
                prune_nulls(&mut v);
                d.insert(k, v);
            }
        }
    }
}

/// evanphx `merge`: a patch onto a non-object replaces it, pruned; a
/// non-object patch replaces an object as it is.
fn merge(mut cur: Value, mut patch: Value) -> Value {
    if !cur.is_object() {
        prune_nulls(&mut patch);
        return patch;
    }
    if !patch.is_object() {
        return patch;
    }
    merge_docs(&mut cur, patch);
    cur
}

/// evanphx `pruneNulls`: null members of objects go, at any depth and
/// through arrays (whose null elements stay).
fn prune_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(prune_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc() -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "finalizers": ["a", "b"]}, "spec": {"type": "LoadBalancer"}})
    }

    /// Each case names the upstream behaviour it checks.
    #[test]
    fn json_patch_table() {
        struct Case {
            name: &'static str,
            patch: Value,
            want: Result<Value, PatchError>,
        }
        let invalid = Err(PatchError::Invalid(GENERIC_INVALID_MESSAGE.to_string()));
        let cases = [
            Case {
                name: "kube-rs finalizer add on an object without finalizers: test null on a missing member passes",
                patch: json!([{"op": "test", "path": "/metadata/labels", "value": null},
                              {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]),
                want: Ok({
                    let mut v = svc();
                    v["metadata"]["labels"] = json!({"x": "y"});
                    v
                }),
            },
            Case {
                name: "kube-rs finalizer removal guarded by test on the element",
                patch: json!([{"op": "test", "path": "/metadata/finalizers/1", "value": "b"},
                              {"op": "remove", "path": "/metadata/finalizers/1"}]),
                want: Ok({
                    let mut v = svc();
                    v["metadata"]["finalizers"] = json!(["a"]);
                    v
                }),
            },
            Case {
                name: "failed test answers 422 with the generic message (NewGenericServerResponse)",
                patch: json!([{"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
                              {"op": "add", "path": "/metadata/finalizers/-", "value": "c"}]),
                want: invalid.clone(),
            },
            Case {
                name: "test of a non-null value against a missing member fails",
                patch: json!([{"op": "test", "path": "/metadata/labels", "value": {}}]),
                want: invalid.clone(),
            },
            Case {
                name: "test whose container is missing fails",
                patch: json!([{"op": "test", "path": "/status/loadBalancer/ingress", "value": null}]),
                want: invalid.clone(),
            },
            Case {
                name: "remove of a missing path is 422",
                patch: json!([{"op": "remove", "path": "/metadata/annotations"}]),
                want: invalid.clone(),
            },
            Case {
                name: "unknown op is 422",
                patch: json!([{"op": "frobnicate", "path": "/spec"}]),
                want: invalid.clone(),
            },
            Case {
                name: "a patch that is not a list is 400 with the Go decoder's message",
                patch: json!({"op": "add"}),
                want: Err(PatchError::BadRequest(
                    "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into(),
                )),
            },
            Case {
                name: "replace and add in order, RFC 6902",
                patch: json!([{"op": "replace", "path": "/spec/type", "value": "ClusterIP"},
                              {"op": "add", "path": "/metadata/finalizers/0", "value": "z"}]),
                want: Ok({
                    let mut v = svc();
                    v["spec"]["type"] = json!("ClusterIP");
                    v["metadata"]["finalizers"] = json!(["z", "a", "b"]);
                    v
                }),
            },
        ];
        for c in cases {
            let body = serde_json::to_vec(&c.patch).expect("serialize");
            assert_eq!(apply_json_patch(&svc(), &body), c.want, "{}", c.name);
        }
    }

    #[test]
    fn too_many_operations_is_413() {
        let ops: Vec<Value> = (0..10_001)
            .map(|_| json!({"op": "test", "path": "/kind", "value": "Service"}))
            .collect();
        let body = serde_json::to_vec(&ops).expect("serialize");
        let err = apply_json_patch(&svc(), &body).expect_err("too large");
        assert_eq!(err.code(), 413);
    }

    #[test]
    fn merge_patch_table() {
        let cases: [(&str, &[u8], Result<Value, PatchError>); 4] = [
            (
                "null deletes a member (RFC 7386)",
                br#"{"metadata":{"finalizers":null},"spec":{"type":"ClusterIP"}}"#,
                Ok(
                    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"type": "ClusterIP"}}),
                ),
            ),
            (
                "lists are replaced whole",
                br#"{"metadata":{"finalizers":["c"]}}"#,
                Ok({
                    let mut v = svc();
                    v["metadata"]["finalizers"] = json!(["c"]);
                    v
                }),
            ),
            (
                "a non-object patch is 400 Invalid JSON Patch",
                b"[1]",
                Err(PatchError::BadRequest("Invalid JSON Patch".into())),
            ),
            (
                "malformed JSON is 400 Invalid JSON Patch",
                b"{",
                Err(PatchError::BadRequest("Invalid JSON Patch".into())),
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(apply_merge_patch(&svc(), body), want, "{name}");
        }
    }
}

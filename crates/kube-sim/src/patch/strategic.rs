//! Strategic merge patch, ported from k8s.io/apimachinery
//! `pkg/util/strategicpatch/patch.go` (`StrategicMergeMapPatch` with
//! `MergeParallelList: true, IgnoreUnmatchedNulls: true`, as the apiserver
//! calls it), with the patch metadata of the vendored OpenAPI schema.
//! Error mapping follows apiserver's `interpretStrategicMergePatchError`.

use serde_json::{Map, Value};

use super::{GENERIC_INVALID_MESSAGE, PatchError};
use crate::openapi::schema::TypeRef;

const DIRECTIVE_MARKER: &str = "$patch";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const RETAIN_KEYS: &str = "$retainKeys";

type Obj = Map<String, Value>;

/// SMP failures, mapped to the status upstream answers.
#[derive(Debug)]
enum SmpError {
    /// mergepatch.ErrBadPatchFormatFor* / ErrBadJSONDoc: 400.
    BadRequest(&'static str),
    /// mergepatch.ErrNoListOfLists, ErrPatchContentNotMatchRetainKeys: 422.
    Invalid,
    /// Any other error: a plain Go error, answered 500.
    Other(String),
}

impl From<SmpError> for PatchError {
    fn from(e: SmpError) -> PatchError {
        match e {
            SmpError::BadRequest(m) => PatchError::BadRequest(m.to_string()),
            SmpError::Invalid => PatchError::Invalid(GENERIC_INVALID_MESSAGE.to_string()),
            SmpError::Other(m) => PatchError::ServerError(m),
        }
    }
}

const ERR_PRIMITIVE_LIST: SmpError = SmpError::BadRequest("invalid patch format of primitive list");
const ERR_RETAIN_KEYS: SmpError = SmpError::BadRequest("invalid patch format of retainKeys");
const ERR_SET_ELEMENT_ORDER: SmpError =
    SmpError::BadRequest("invalid patch format of setElementOrder list");

/// Patch metadata lookup; `None` for fields without schema (no strategy).
#[derive(Clone, Copy)]
struct Meta<'a>(Option<TypeRef<'a>>);

impl<'a> Meta<'a> {
    fn field(&self, k: &str) -> Meta<'a> {
        Meta(self.0.and_then(|t| t.field(k)))
    }
    fn items(&self) -> Meta<'a> {
        Meta(self.0.and_then(|t| t.items()))
    }
    fn strategy(&self) -> Option<&'a str> {
        // extractRetainKeysPatchStrategy: "retainKeys" alone or with one other.
        let s = self.0.map(|t| t.patch_strategies()).unwrap_or_default();
        s.into_iter().find(|s| *s != "retainKeys")
    }
    fn merge_key(&self) -> &'a str {
        self.0.and_then(|t| t.patch_merge_key()).unwrap_or("")
    }
}

pub(crate) fn apply(live: &Value, body: &[u8], root: TypeRef<'_>) -> Result<Value, PatchError> {
    // UnmarshalCaseSensitivePreserveInts failures are 400 with the decoder text.
    let patch: Value =
        serde_json::from_slice(body).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    let Value::Object(patch) = patch else {
        return Err(PatchError::BadRequest(
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
                .to_string(),
        ));
    };
    let original = match live {
        Value::Object(m) => m.clone(),
        _ => Obj::new(),
    };
    let mut merged = merge_map(original, patch, Meta(Some(root)))?;
    // Decoding into the typed object drops anything that is not a field,
    // e.g. directives left in new subtrees.
    strip_directive_keys(&mut merged);
    Ok(Value::Object(merged))
}

fn strip_directive_keys(m: &mut Obj) {
    m.retain(|k, _| !k.starts_with('$'));
    for v in m.values_mut() {
        strip_value(v);
    }
}

fn strip_value(v: &mut Value) {
    match v {
        Value::Object(m) => strip_directive_keys(m),
        Value::Array(a) => a.iter_mut().for_each(strip_value),
        _ => {}
    }
}

/// Go's `%v` formatting of decoded JSON, for the messages that embed values.
fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_fmt(&m[*k])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

fn err_no_merge_key(m: &Obj, key: &str) -> SmpError {
    SmpError::Other(format!(
        "map: {} does not contain declared merge key: {key}",
        go_fmt(&Value::Object(m.clone()))
    ))
}

fn err_bad_patch_type(t: &Value, m: &Obj) -> SmpError {
    SmpError::Other(format!(
        "unknown patch type: {} in map: {}",
        go_fmt(t),
        go_fmt(&Value::Object(m.clone()))
    ))
}

fn extract_key(s: &str, prefix: &'static str) -> Result<String, SmpError> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ => Err(match prefix {
            DELETE_FROM_PRIMITIVE_LIST => ERR_PRIMITIVE_LIST,
            _ => ERR_SET_ELEMENT_ORDER,
        }),
    }
}

/// removeDirectives: drops `$patch` maps (and the fields holding them).
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            let mut out = Obj::new();
            for (k, c) in m {
                if let Some(c) = remove_directives(c) {
                    out.insert(k, c);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(discard_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn merge_map(mut original: Obj, mut patch: Obj, schema: Meta<'_>) -> Result<Obj, SmpError> {
    if let Some(d) = patch.get(DIRECTIVE_MARKER).cloned() {
        return match d.as_str() {
            Some("replace") => {
                patch.shift_remove(DIRECTIVE_MARKER);
                Ok(patch)
            }
            Some("delete") => Ok(Obj::new()),
            _ => Err(err_bad_patch_type(&d, &patch)),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_patch_into_original(&mut original, &mut patch, schema)?;

    for (key, patch_v) in patch {
        let (k, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            (extract_key(&key, DELETE_FROM_PRIMITIVE_LIST)?, true)
        } else {
            (key, false)
        };
        if patch_v.is_null() {
            original.shift_remove(&k);
            continue;
        }
        let Some(orig_v) = original.get(&k) else {
            if !is_delete_list {
                let mut v = patch_v;
                discard_nulls(&mut v);
                if let Some(v) = remove_directives(v) {
                    original.insert(k, v);
                }
            }
            continue;
        };
        if !same_type(orig_v, &patch_v) {
            if !is_delete_list {
                let mut v = patch_v;
                discard_nulls(&mut v);
                match remove_directives(v) {
                    Some(v) => {
                        original.insert(k, v);
                    }
                    None => {
                        original.shift_remove(&k);
                    }
                }
            }
            continue;
        }
        let field = schema.field(&k);
        let orig_v = original
            .get_mut(&k)
            .map(std::mem::take)
            .unwrap_or(Value::Null);
        let merged = match (orig_v, patch_v) {
            (Value::Object(o), Value::Object(p)) => {
                if field.strategy() == Some("replace") {
                    Some(Value::Object(p))
                } else {
                    Some(Value::Object(merge_map(o, p, field)?))
                }
            }
            (Value::Array(o), Value::Array(p)) => Some(Value::Array(merge_slice_handler(
                o,
                p,
                field,
                is_delete_list,
            )?)),
            (_, p) => remove_directives(p),
        };
        match merged {
            Some(m) => {
                original.insert(k, m);
            }
            None => {
                original.shift_remove(&k);
            }
        }
    }
    Ok(original)
}

fn apply_retain_keys(original: &mut Obj, patch: &mut Obj) -> Result<(), SmpError> {
    let Some(retain) = patch.shift_remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(list) = retain else {
        return Err(ERR_RETAIN_KEYS);
    };
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !list.iter().any(|x| x.as_str() == Some(k)) {
            return Err(ERR_RETAIN_KEYS);
        }
    }
    original.retain(|k, _| list.iter().any(|x| x.as_str() == Some(k)));
    Ok(())
}

/// A list of a `$setElementOrder` directive, the original or the patch:
/// upstream answers anything but a list with its Go type.
fn list_of(v: Option<&Value>) -> Result<Option<Vec<Value>>, SmpError> {
    match v {
        Some(Value::Array(a)) => Ok(Some(a.clone())),
        Some(other) => Err(SmpError::Other(format!(
            "expected a []interface {{}}, but received a {}",
            go_type(other)
        ))),
        None => Ok(None),
    }
}

fn merge_patch_into_original(
    original: &mut Obj,
    patch: &mut Obj,
    schema: Meta<'_>,
) -> Result<(), SmpError> {
    let order_keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in order_keys {
        let Some(order) = patch.shift_remove(&key) else {
            continue;
        };
        let order = list_of(Some(&order))?.unwrap_or_default();
        let original_key = extract_key(&key, SET_ELEMENT_ORDER)?;
        let orig_list = list_of(original.get(&original_key))?;
        let patch_list = list_of(patch.get(&original_key))?;
        let field = schema.field(&original_key);
        let merge_key = field.merge_key();
        validate_patch_with_set_order_list(
            patch_list.as_deref().unwrap_or(&[]),
            &order,
            merge_key,
        )?;
        let merged = match (&orig_list, &patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => match remove_directives(Value::Array(p.clone())) {
                Some(Value::Array(a)) => a,
                _ => continue,
            },
            (Some(o), Some(p)) => merge_slice_handler(o.clone(), p.clone(), field, false)?,
            (None, None) => continue,
        };
        let (patch_items, server_only) = partition(&merged, &order, merge_key)?;
        let kind = slice_element_kind(&[
            orig_list.as_deref().unwrap_or(&[]),
            patch_list.as_deref().unwrap_or(&[]),
        ])?;
        let both = normalize_element_order(
            patch_items,
            server_only,
            &order,
            orig_list.as_deref().unwrap_or(&[]),
            merge_key,
            kind,
        )?;
        original.insert(original_key.clone(), Value::Array(both));
        patch.shift_remove(&original_key);
    }
    Ok(())
}

fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, SmpError> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let (Some(l), Some(r)) = (left.as_object(), right.as_object()) else {
        return Err(SmpError::Other(format!(
            "expected a map[string]interface {{}}, but received a {}",
            go_type(if left.is_object() { right } else { left })
        )));
    };
    let lv = l
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(l, merge_key))?;
    let rv = r
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(r, merge_key))?;
    Ok(lv == rv)
}

fn is_delete_item(v: &Value) -> bool {
    v.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some("delete")
}

fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    order: &[Value],
    merge_key: &str,
) -> Result<(), SmpError> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if merge_key.is_empty() {
        patch_list.iter().collect()
    } else {
        for v in patch_list {
            if !v.is_object() {
                return Err(SmpError::Other(format!(
                    "expected a map[string]interface {{}}, but received a {}",
                    go_type(v)
                )));
            }
        }
        patch_list.iter().filter(|v| !is_delete_item(v)).collect()
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        if non_delete[pi].get(DIRECTIVE_MARKER).is_some() {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(non_delete[pi], &order[oi], merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(SmpError::Other(format!(
            "the order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}",
            go_fmt(&Value::Array(patch_list.to_vec())),
            go_fmt(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: Meta<'_>,
    is_delete_list: bool,
) -> Result<Vec<Value>, SmpError> {
    if field.strategy() == Some("merge") || is_delete_list {
        merge_slice(original, patch, field, is_delete_list)
    } else {
        Ok(patch)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ElemKind {
    Map,
    Other,
}

fn slice_element_kind(slices: &[&[Value]]) -> Result<ElemKind, SmpError> {
    let mut prev: Option<&Value> = None;
    for s in slices {
        for v in *s {
            match prev {
                None => {
                    if v.is_array() {
                        return Err(SmpError::Invalid);
                    }
                    prev = Some(v);
                }
                Some(p) if !same_type(p, v) => {
                    return Err(SmpError::Other(format!(
                        "list element types are not identical: {}",
                        slices
                            .iter()
                            .map(|s| go_fmt(&Value::Array(s.to_vec())))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )));
                }
                _ => {}
            }
        }
    }
    match prev {
        None => Err(SmpError::Other(
            "no elements in any of the given slices".into(),
        )),
        Some(Value::Object(_)) => Ok(ElemKind::Map),
        Some(_) => Ok(ElemKind::Other),
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: Meta<'_>,
    is_delete_list: bool,
) -> Result<Vec<Value>, SmpError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_kind(&[&original, &patch])?;
    let merge_key = field.merge_key();
    let (original, patch, merged) = if kind != ElemKind::Map {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut both: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !both.contains(v) {
                both.push(v.clone());
            }
        }
        (original, patch, both)
    } else {
        if merge_key.is_empty() {
            let name = field.0.and_then(|t| t.definition()).unwrap_or("unknown");
            return Err(SmpError::Other(format!(
                "cannot merge lists without merge key for {name}"
            )));
        }
        let (original, patch) = merge_slice_with_special_elements(original, patch, merge_key)?;
        let merged = merge_slice_without_special_elements(
            original.clone(),
            &patch,
            merge_key,
            field.items(),
        )?;
        (original, patch, merged)
    };
    let (patch_items, server_only) = partition(&merged, &patch, merge_key)?;
    normalize_element_order(patch_items, server_only, &patch, &original, merge_key, kind)
}

fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut without = Vec::new();
    let mut replace = false;
    for v in patch {
        let Some(m) = v.as_object() else {
            without.push(v);
            continue;
        };
        match m.get(DIRECTIVE_MARKER) {
            None => without.push(v),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let mv = m
                        .get(merge_key)
                        .ok_or_else(|| err_no_merge_key(m, merge_key))?;
                    original.retain(|o| o.get(merge_key) != Some(mv));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(SmpError::Other(
                        "merging lists cannot yet be specified in the patch".into(),
                    ));
                }
                _ => return Err(err_bad_patch_type(d, m)),
            },
        }
    }
    if replace {
        return Ok((without, Vec::new()));
    }
    Ok((original, without))
}

fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    items: Meta<'_>,
) -> Result<Vec<Value>, SmpError> {
    for v in patch {
        let Some(pm) = v.as_object() else {
            return Err(SmpError::Other(format!(
                "expected a map[string]interface {{}}, but received a {}",
                go_type(v)
            )));
        };
        let mv = pm
            .get(merge_key)
            .ok_or_else(|| err_no_merge_key(pm, merge_key))?;
        let found = original
            .iter()
            .position(|o| o.as_object().and_then(|o| o.get(merge_key)) == Some(mv));
        match found {
            Some(i) => {
                let om = match std::mem::take(&mut original[i]) {
                    Value::Object(o) => o,
                    _ => Obj::new(),
                };
                original[i] = Value::Object(merge_map(om, pm.clone(), items)?);
            }
            None => original.push(v.clone()),
        }
    }
    Ok(original)
}

fn merge_key_of<'v>(v: &'v Value, merge_key: &str) -> Option<&'v Value> {
    v.as_object().and_then(|m| m.get(merge_key))
}

/// partitionPrimitivesByPresentInList / partitionMapsByPresentInList.
fn partition(
    merged: &[Value],
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut in_patch = Vec::new();
    let mut server_only = Vec::new();
    for v in merged {
        let present = if merge_key.is_empty() {
            by.contains(v)
        } else {
            let m = v.as_object().ok_or_else(|| {
                SmpError::Other(format!(
                    "expected a map[string]interface {{}}, but received a {}",
                    go_type(v)
                ))
            })?;
            let kv = m
                .get(merge_key)
                .ok_or_else(|| err_no_merge_key(m, merge_key))?;
            by.iter().any(|b| merge_key_of(b, merge_key) == Some(kv))
        };
        if present {
            in_patch.push(v.clone())
        } else {
            server_only.push(v.clone())
        }
    }
    Ok((in_patch, server_only))
}

fn index_of(list: &[Value], v: &Value, merge_key: &str, kind: ElemKind) -> Option<usize> {
    match kind {
        ElemKind::Map => {
            let key = merge_key_of(v, merge_key);
            list.iter().position(|x| merge_key_of(x, merge_key) == key)
        }
        ElemKind::Other => list.iter().position(|x| x == v),
    }
}

/// normalizeSliceOrder: Go's `sort.SliceStable` (an insertion sort for short
/// lists) with upstream's comparator, which treats items missing from
/// `order` as "less".
fn normalize_slice_order(
    mut to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<Vec<Value>, SmpError> {
    let mut to_delete = Vec::new();
    if kind == ElemKind::Map {
        for v in to_sort.iter().chain(order.iter()) {
            let m = v.as_object().ok_or_else(|| {
                SmpError::Other(format!(
                    "expected a map[string]interface {{}}, but received a {}",
                    go_type(v)
                ))
            })?;
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
        let (keep, del): (Vec<Value>, Vec<Value>) =
            to_sort.into_iter().partition(|v| !is_delete_item(v));
        to_sort = keep;
        to_delete = del;
    }
    let less = |a: &Value, b: &Value| -> bool {
        match (
            index_of(order, a, merge_key, kind),
            index_of(order, b, merge_key, kind),
        ) {
            (Some(i), Some(j)) => i < j,
            _ => true,
        }
    };
    for i in 1..to_sort.len() {
        let mut j = i;
        while j > 0 && less(&to_sort[j], &to_sort[j - 1]) {
            to_sort.swap(j, j - 1);
            j -= 1;
        }
    }
    to_sort.extend(to_delete);
    Ok(to_sort)
}

fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<Vec<Value>, SmpError> {
    let patch = normalize_slice_order(patch, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted_slice(
        server_only,
        patch,
        server_order,
        merge_key,
        kind,
    ))
}

/// mergeSortedSlice: interleave server-only items (left) into patch items
/// (right) by their position in the live list.
fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut i, mut j) = (0, 0);
    while i < left.len() || j < right.len() {
        if i >= left.len() {
            out.push(right[j].clone());
            j += 1;
        } else if j >= right.len() {
            out.push(left[i].clone());
            i += 1;
        } else {
            let li = index_of(server_order, &left[i], merge_key, kind);
            let ri = index_of(server_order, &right[j], merge_key, kind);
            match (li, ri) {
                (Some(a), Some(b)) if a < b => {
                    out.push(left[i].clone());
                    i += 1;
                }
                _ => {
                    out.push(right[j].clone());
                    j += 1;
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "strategic_tests.rs"]
mod tests;

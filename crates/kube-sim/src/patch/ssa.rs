//! Server-side apply and managedFields tracking, following
//! sigs.k8s.io/structured-merge-diff (typed `Merge`, `Compare`, `ToFieldSet`,
//! `merge.Updater.Apply/Update`) and k8s.io/apimachinery
//! `pkg/util/managedfields/internal` (manager identity, stripped fields,
//! conflict messages, entry ordering, timestamps).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::fieldpath::{Path, PathElement, Set, path_string};
use super::{Gvk, PatchError};
use crate::openapi::schema::{ListType, Shape, TypeRef, schemas};

// ---------------------------------------------------------------------------
// Typed view over a JSON value: the schema type when the kind has one,
// otherwise structured-merge-diff's "deduced" type (maps granular, lists
// atomic).

#[derive(Clone, Copy)]
pub(crate) enum Ty<'a> {
    Schema(TypeRef<'a>),
    Deduced,
    /// A whole object of a kind without a schema here (a custom resource):
    /// deduced, but its `metadata` is ObjectMeta, as upstream's CRD type
    /// converter adds it (finalizers a set, labels a map, ...).
    DeducedObject,
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

impl<'a> Ty<'a> {
    pub(crate) fn root(group: &str, version: &str, kind: &str) -> Ty<'static> {
        match schemas().root(group, version, kind) {
            Some(t) => Ty::Schema(t),
            None => Ty::DeducedObject,
        }
    }

    fn shape(&self, v: Option<&Value>) -> Shape {
        match self {
            Ty::Schema(t) => t.shape(),
            Ty::Deduced | Ty::DeducedObject => match v {
                Some(Value::Object(_)) => Shape::Map,
                Some(Value::Array(_)) => Shape::List,
                _ => Shape::Scalar,
            },
        }
    }

    /// Field type; `None` for a field the schema does not declare.
    fn field(&self, name: &str) -> Option<Ty<'a>> {
        match self {
            Ty::Schema(t) => t.field(name).map(Ty::Schema),
            Ty::DeducedObject if name == "metadata" => Some(
                schemas()
                    .definition_type(OBJECT_META)
                    .map_or(Ty::Deduced, Ty::Schema),
            ),
            Ty::Deduced | Ty::DeducedObject => Some(Ty::Deduced),
        }
    }

    fn is_pointer_field(&self, name: &str) -> bool {
        match self {
            Ty::Schema(t) => t.is_pointer_field(name),
            Ty::Deduced | Ty::DeducedObject => false,
        }
    }

    fn is_struct_field(&self, name: &str) -> bool {
        match self {
            Ty::Schema(t) => t.has_field(name),
            Ty::Deduced | Ty::DeducedObject => false,
        }
    }

    fn items(&self) -> Ty<'a> {
        match self {
            Ty::Schema(t) => t.items().map(Ty::Schema).unwrap_or(Ty::Deduced),
            Ty::Deduced | Ty::DeducedObject => Ty::Deduced,
        }
    }

    fn list_type(&self) -> ListType {
        match self {
            Ty::Schema(t) => t.list_type(),
            Ty::Deduced | Ty::DeducedObject => ListType::Atomic,
        }
    }

    fn map_atomic(&self) -> bool {
        match self {
            Ty::Schema(t) => t.map_is_atomic(),
            Ty::Deduced | Ty::DeducedObject => false,
        }
    }

    /// Atomic values are owned and replaced as a whole.
    fn is_leaf(&self, v: Option<&Value>) -> bool {
        match self.shape(v) {
            Shape::Scalar | Shape::Untyped => true,
            Shape::List => self.list_type() == ListType::Atomic,
            Shape::Struct | Shape::Map => self.map_atomic(),
        }
    }
}

/// The path element identifying a list item.
fn item_pe(list: &ListType, index: usize, item: &Value) -> Result<PathElement, String> {
    match list {
        ListType::Atomic => Ok(PathElement::Index(index)),
        ListType::Set => Ok(PathElement::value(item)),
        ListType::Map(keys) => {
            let obj = item.as_object().ok_or_else(|| {
                format!("element {index}: associative list with keys may not have non-map elements")
            })?;
            let mut fields = Vec::with_capacity(keys.len());
            for k in keys {
                match obj.get(k) {
                    Some(v) => fields.push((k.clone(), v.clone())),
                    // The v3 schema defaults `protocol` to TCP, and
                    // structured-merge-diff uses key defaults (ports lists).
                    None if k == "protocol" => fields.push((k.clone(), json!("TCP"))),
                    None => {
                        return Err(format!(
                            "element {index}: associative list with keys has an element that omits key field {k:?} (and doesn't have default value)"
                        ));
                    }
                }
            }
            Ok(PathElement::key(&fields))
        }
    }
}

fn child_path(path: &Path, pe: PathElement) -> Path {
    let mut p = path.clone();
    p.push(pe);
    p
}

fn is_empty_value(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// ToFieldSet

/// The set of fields a value (an applied configuration) specifies.
pub(crate) fn to_field_set(ty: Ty<'_>, v: &Value) -> Result<Set, String> {
    let mut set = Set::new();
    fs_walk(ty, v, &Vec::new(), &mut set)?;
    Ok(set)
}

fn fs_walk(ty: Ty<'_>, v: &Value, path: &Path, set: &mut Set) -> Result<(), String> {
    if ty.is_leaf(Some(v)) {
        set.insert(path);
        return Ok(());
    }
    match (ty.shape(Some(v)), v) {
        (Shape::List, Value::Array(items)) => {
            let lt = ty.list_type();
            let it = ty.items();
            let mut seen = std::collections::HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe =
                    item_pe(&lt, i, item).map_err(|e| format!("{}: {e}", path_string(path)))?;
                if !seen.insert(pe.clone()) {
                    return Err(format!(
                        "{}: duplicate entries for key {pe}",
                        path_string(path)
                    ));
                }
                let p = child_path(path, pe);
                fs_walk(it, item, &p, set)?;
                set.insert(&p);
            }
            Ok(())
        }
        (Shape::Struct | Shape::Map, Value::Object(m)) => {
            for (k, cv) in m {
                let p = child_path(path, PathElement::Field(k.clone()));
                let Some(ft) = ty.field(k) else {
                    return Err(format!("{}: field not declared in schema", path_string(&p)));
                };
                fs_walk(ft, cv, &p, set)?;
                if cv.is_null()
                    || cv.as_object().is_some_and(Map::is_empty)
                    || !ty.is_struct_field(k)
                {
                    set.insert(&p);
                }
            }
            Ok(())
        }
        // A list or a map given as another JSON type: structured-merge-diff
        // refuses to build the typed object (typed/helpers.go listValue,
        // mapValue).
        (Shape::List, _) if !v.is_null() => Err(format!(
            "{}: expected list, got &{{{}}}",
            path_string(path),
            go_format(v)
        )),
        (Shape::Struct | Shape::Map, _) if !v.is_null() => Err(format!(
            "{}: expected map, got &{{{}}}",
            path_string(path),
            go_format(v)
        )),
        // null or a scalar: owned as a leaf.
        _ => {
            if !v.is_null() {
                set.insert(path);
            }
            Ok(())
        }
    }
}

/// How Go's `%v` prints a decoded JSON value (maps with sorted keys).
fn go_format(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(go_format).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(m) => {
            let mut kv: Vec<(&String, &Value)> = m.iter().collect();
            kv.sort_by(|a, b| a.0.cmp(b.0));
            format!(
                "map[{}]",
                kv.iter()
                    .map(|(k, v)| format!("{k}:{}", go_format(v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
    }
}

// ---------------------------------------------------------------------------
// Merge (rhs wins), as structured-merge-diff's mergingWalker.

pub(crate) fn merge(ty: Ty<'_>, lhs: Option<&Value>, rhs: Option<&Value>) -> Option<Value> {
    let (l, r) = match (lhs, rhs) {
        (None, None) => return None,
        (Some(l), None) => return Some(l.clone()),
        (None, Some(r)) => return Some(r.clone()),
        (Some(l), Some(r)) => (l, r),
    };
    if ty.is_leaf(Some(r)) {
        return Some(r.clone());
    }
    match (l, r) {
        (Value::Object(lm), Value::Object(rm)) => {
            let mut out = Map::new();
            for (k, lv) in lm {
                let ft = ty.field(k).unwrap_or(Ty::Deduced);
                if let Some(v) = merge(ft, Some(lv), rm.get(k)) {
                    out.insert(k.clone(), v);
                }
            }
            for (k, rv) in rm {
                if !lm.contains_key(k) {
                    out.insert(k.clone(), rv.clone());
                }
            }
            Some(Value::Object(out))
        }
        (Value::Array(la), Value::Array(ra)) => {
            if la.is_empty() && ra.is_empty() {
                return Some(r.clone());
            }
            Some(Value::Array(merge_list(ty, la, ra)))
        }
        _ => Some(r.clone()),
    }
}

/// structured-merge-diff's `visitListItems` interleaving: shared items follow
/// the RHS order; LHS-only items keep their place relative to them.
fn merge_list(ty: Ty<'_>, lhs: &[Value], rhs: &[Value]) -> Vec<Value> {
    let lt = ty.list_type();
    let it = ty.items();
    let pes = |items: &[Value]| -> Vec<PathElement> {
        items
            .iter()
            .enumerate()
            .map(|(i, v)| item_pe(&lt, i, v).unwrap_or(PathElement::Index(i)))
            .collect()
    };
    let lpes = pes(lhs);
    let rpes = pes(rhs);
    let lidx: BTreeMap<&PathElement, usize> =
        lpes.iter().enumerate().rev().map(|(i, p)| (p, i)).collect();
    let ridx: BTreeMap<&PathElement, usize> =
        rpes.iter().enumerate().rev().map(|(i, p)| (p, i)).collect();
    let mut shared: std::collections::VecDeque<&PathElement> =
        rpes.iter().filter(|p| lidx.contains_key(p)).collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let item = |pe: &PathElement, l: Option<&Value>| -> Option<Value> {
        let r = ridx.get(pe).map(|&i| &rhs[i]);
        merge(it, l, r)
    };
    let (mut li, mut ri) = (0usize, 0usize);
    while li < lpes.len() || ri < rpes.len() {
        if li < lpes.len() && ri < rpes.len() {
            let pe = &lpes[li];
            if *pe == rpes[ri] {
                merged_rhs.insert(pe.clone());
                out.extend(item(pe, lidx.get(pe).map(|&i| &lhs[i])));
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if ridx.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lpes.len() {
            let pe = &lpes[li];
            if !ridx.contains_key(pe) {
                out.extend(merge(it, Some(&lhs[li]), None));
                li += 1;
                continue;
            } else if merged_rhs.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ri < rpes.len() {
            let pe = &rpes[ri];
            merged_rhs.insert(pe.clone());
            out.extend(item(pe, lidx.get(pe).map(|&i| &lhs[i])));
            ri += 1;
            if next_shared.is_some_and(|n| n == pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Compare

#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub added: Set,
    pub modified: Set,
    pub removed: Set,
}

pub(crate) fn compare(ty: Ty<'_>, lhs: Option<&Value>, rhs: Option<&Value>) -> Comparison {
    let mut c = Comparison::default();
    cmp_walk(ty, lhs, rhs, &Vec::new(), [Held::No; 2], &mut c);
    c
}

fn cmp_leaf(lhs: Option<&Value>, rhs: Option<&Value>, path: &Path, c: &mut Comparison) {
    match (lhs, rhs) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(l), Some(r)) if l != r => c.modified.insert(path),
        _ => {}
    }
}

/// What the typed object (a Go object through
/// `runtime.DefaultUnstructuredConverter`) holds where the JSON has
/// nothing: a value struct is always there (`{}`), a pointer, slice or map
/// field without omitempty is there as null, as long as the struct holding
/// it is there; anything else is absent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    No,
    Empty,
    Null,
}

impl Held {
    fn value(self) -> Option<&'static Value> {
        static EMPTY: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!({}));
        match self {
            Held::No => None,
            Held::Empty => Some(&EMPTY),
            Held::Null => Some(&Value::Null),
        }
    }

    /// What a struct `ty`, there or not (`present`), holds as field `name`.
    fn field(ty: Ty<'_>, present: bool, name: &str) -> Held {
        if !present || !ty.is_struct_field(name) {
            return Held::No;
        }
        let value_struct = !ty.is_pointer_field(name)
            && ty
                .field(name)
                .is_some_and(|ft| ft.shape(None) == Shape::Struct);
        match (value_struct, ty) {
            (true, _) => Held::Empty,
            (false, Ty::Schema(t)) if t.is_null_field(name) => Held::Null,
            _ => Held::No,
        }
    }
}

/// `held`: what each side's typed object holds here when its JSON has
/// nothing (structured-merge-diff's compare counts a node as added or
/// removed only when the typed object on the other side lacks it).
fn cmp_walk(
    ty: Ty<'_>,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &Path,
    held: [Held; 2],
    c: &mut Comparison,
) {
    // JSON null is "absent" for typed objects.
    let lhs = lhs.filter(|v| !v.is_null());
    let rhs = rhs.filter(|v| !v.is_null());
    if lhs.is_none() && rhs.is_none() {
        return;
    }
    let probe = rhs.or(lhs);
    if ty.is_leaf(probe) || (is_empty_value(lhs) && is_empty_value(rhs)) {
        if !path.is_empty() {
            cmp_leaf(lhs.or(held[0].value()), rhs.or(held[1].value()), path, c);
        }
        return;
    }
    let shape = ty.shape(probe);
    match shape {
        Shape::List => {
            let lt = ty.list_type();
            let it = ty.items();
            let empty = Vec::new();
            let la = lhs.and_then(Value::as_array).unwrap_or(&empty);
            let ra = rhs.and_then(Value::as_array).unwrap_or(&empty);
            let index = |a: &[Value]| -> BTreeMap<PathElement, usize> {
                let mut m = BTreeMap::new();
                for (i, v) in a.iter().enumerate() {
                    let pe = item_pe(&lt, i, v).unwrap_or(PathElement::Index(i));
                    m.entry(pe).or_insert(i);
                }
                m
            };
            let lm = index(la);
            let rm = index(ra);
            let mut all: Vec<&PathElement> = lm.keys().collect();
            all.extend(rm.keys().filter(|k| !lm.contains_key(*k)));
            for pe in all {
                let p = child_path(path, pe.clone());
                cmp_walk(
                    it,
                    lm.get(pe).map(|&i| &la[i]),
                    rm.get(pe).map(|&i| &ra[i]),
                    &p,
                    [Held::No; 2],
                    c,
                );
            }
        }
        Shape::Struct | Shape::Map => {
            let empty = Map::new();
            let lm = lhs.and_then(Value::as_object).unwrap_or(&empty);
            let rm = rhs.and_then(Value::as_object).unwrap_or(&empty);
            let keys: Vec<&String> = lm
                .keys()
                .chain(rm.keys().filter(|k| !lm.contains_key(*k)))
                .collect();
            // Whether each side's typed object holds this node.
            let there = [
                lhs.is_some() || held[0] != Held::No,
                rhs.is_some() || held[1] != Held::No,
            ];
            for k in keys {
                let ft = ty.field(k).unwrap_or(Ty::Deduced);
                let p = child_path(path, PathElement::Field(k.clone()));
                let child_held = if shape == Shape::Struct {
                    [Held::field(ty, there[0], k), Held::field(ty, there[1], k)]
                } else {
                    [Held::No; 2]
                };
                cmp_walk(ft, lm.get(k), rm.get(k), &p, child_held, c);
            }
        }
        Shape::Scalar | Shape::Untyped => {}
    }
    // A node one side's typed object lacks is added or removed as a whole
    // (a "." member in FieldsV1): a list item, a map entry, a pointer
    // field, a field set with omitempty, anything below a node that was
    // not there; not a value struct or a field without omitempty of a
    // struct that was there.
    if !path.is_empty() {
        match (lhs, rhs) {
            (None, Some(_)) if held[0] == Held::No => c.added.insert(path),
            (Some(_), None) if held[1] == Held::No => c.removed.insert(path),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------
// RemoveItems

/// Removes the member paths of `set` from `v`, keeping any item that
/// `keep` still owns something below.
fn remove_items(ty: Ty<'_>, v: &mut Value, set: &Set, keep: &Set) {
    match v {
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let pe = PathElement::Field(k.clone());
                let ft = ty.field(&k).unwrap_or(Ty::Deduced);
                let sub_keep = keep.child(&pe).cloned().unwrap_or_default();
                if set.has(std::slice::from_ref(&pe)) && sub_keep.is_empty() {
                    m.shift_remove(&k);
                    continue;
                }
                if let (Some(sub), Some(cv)) = (set.child(&pe), m.get_mut(&k)) {
                    remove_items(ft, cv, sub, &sub_keep);
                    // A map emptied by pruning disappears, as an omitempty
                    // Go map does when the object is encoded.
                    let emptied_map =
                        cv.as_object().is_some_and(Map::is_empty) && !ft.is_struct_like();
                    if emptied_map || cv.as_array().is_some_and(Vec::is_empty) {
                        m.shift_remove(&k);
                    }
                }
            }
        }
        Value::Array(items) => {
            let lt = ty.list_type();
            let it = ty.items();
            let mut i = 0;
            let mut idx = 0;
            while i < items.len() {
                let pe = item_pe(&lt, idx, &items[i]).unwrap_or(PathElement::Index(idx));
                idx += 1;
                let sub_keep = keep.child(&pe).cloned().unwrap_or_default();
                if set.has(std::slice::from_ref(&pe)) && sub_keep.is_empty() {
                    items.remove(i);
                    continue;
                }
                if let Some(sub) = set.child(&pe) {
                    remove_items(it, &mut items[i], sub, &sub_keep);
                }
                i += 1;
            }
        }
        _ => {}
    }
}

impl Ty<'_> {
    fn is_struct_like(&self) -> bool {
        matches!(self, Ty::Schema(t) if t.shape() == Shape::Struct)
    }
}

// ---------------------------------------------------------------------------
// managedFields

/// One manager's entry, keyed as apimachinery's BuildManagerIdentifier does
/// (manager, operation, apiVersion for Update only, subresource).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ManagerKey {
    pub manager: String,
    pub operation: String,
    /// Empty for Apply.
    pub api_version: String,
    pub subresource: String,
}

impl ManagerKey {
    /// apimachinery's `printManager`.
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {:?}", self.subresource);
        }
        if self.operation == "Update" {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub api_version: String,
    pub time: Option<String>,
    pub set: Set,
}

pub(crate) type Managed = BTreeMap<ManagerKey, Entry>;

fn decode_entries(v: Option<&Value>) -> Option<Managed> {
    let arr = v?.as_array()?;
    let mut out = Managed::new();
    for e in arr {
        let o = e.as_object()?;
        let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = s("operation");
        let api_version = s("apiVersion");
        let key = ManagerKey {
            manager: s("manager"),
            operation: operation.clone(),
            api_version: if operation == "Apply" {
                String::new()
            } else {
                api_version.clone()
            },
            subresource: s("subresource"),
        };
        let set = match o.get("fieldsV1") {
            Some(f) => Set::from_fields_v1(f)?,
            None => Set::new(),
        };
        out.insert(
            key,
            Entry {
                api_version,
                time: o.get("time").and_then(Value::as_str).map(str::to_string),
                set,
            },
        );
    }
    Some(out)
}

/// `[{}]` asks the server to reset managedFields.
fn is_reset(v: Option<&Value>) -> bool {
    matches!(v.and_then(Value::as_array), Some(a) if a.len() == 1 && a[0].as_object().is_some_and(Map::is_empty))
}

fn encode_entries(managed: &Managed) -> Vec<Value> {
    let mut entries: Vec<(&ManagerKey, &Entry)> =
        managed.iter().filter(|(_, e)| !e.set.is_empty()).collect();
    let secs = |t: &Option<String>| -> i64 {
        t.as_deref()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
            .unwrap_or(0)
    };
    // apimachinery's encodeManagedFields sort order.
    entries.sort_by(|(ka, ea), (kb, eb)| {
        ka.operation
            .cmp(&kb.operation)
            .then(secs(&ea.time).cmp(&secs(&eb.time)))
            .then(ka.manager.cmp(&kb.manager))
            .then(ea.api_version.cmp(&eb.api_version))
            .then(ka.subresource.cmp(&kb.subresource))
    });
    entries
        .into_iter()
        .map(|(k, e)| {
            let mut m = Map::new();
            m.insert("manager".into(), json!(k.manager));
            m.insert("operation".into(), json!(k.operation));
            m.insert("apiVersion".into(), json!(e.api_version));
            if let Some(t) = &e.time {
                m.insert("time".into(), json!(t));
            }
            m.insert("fieldsType".into(), json!("FieldsV1"));
            m.insert("fieldsV1".into(), e.set.to_fields_v1());
            if !k.subresource.is_empty() {
                m.insert("subresource".into(), json!(k.subresource));
            }
            Value::Object(m)
        })
        .collect()
}

fn set_managed_fields(obj: &mut Value, managed: &Managed) {
    let entries = encode_entries(managed);
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        if entries.is_empty() {
            meta.shift_remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

fn without_managed_fields(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.shift_remove("managedFields");
        // ObjectMeta's lists and maps are omitempty: an emptied one is gone
        // from the typed object (so its owner no longer owns it).
        meta.retain(|_, v| match v {
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::Null => false,
            _ => true,
        });
    }
    c
}

/// Fields never recorded in managedFields (see [`ignored_fields`]).
struct Ignored {
    set: Set,
    /// The status strategy resets the whole of `metadata`
    /// (`metav1.ResetObjectMetaForStatus` kinds whose GetResetFields lists
    /// it, e.g. ServiceCIDR).
    whole_metadata: bool,
}

/// Fields never recorded in managedFields (apimachinery's stripMetaManager),
/// plus the fields the subresource's strategy resets.
fn ignored_fields(group: &str, kind: &str, subresource: Option<&str>) -> Ignored {
    let f = |s: &str| PathElement::Field(s.to_string());
    let mut s = Set::new();
    s.insert(&[f("apiVersion")]);
    s.insert(&[f("kind")]);
    s.insert(&[f("metadata")]);
    for m in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[f("metadata"), f(m)]);
    }
    // Strategies' GetResetFields: the main resource resets status, the
    // status subresource resets spec (kinds with a status subresource,
    // custom resources whose CRD declares one included).
    let has_status_subresource = crate::resources::has_status_subresource(group, kind);
    match subresource {
        None | Some("") if has_status_subresource => s.insert(&[f("status")]),
        Some("status") => s.insert(&[f("spec")]),
        _ => {}
    }
    Ignored {
        set: s,
        whole_metadata: subresource == Some("status") && kind == "ServiceCIDR",
    }
}

/// Removes `ignore`'s members (and everything below them) from `set`.
fn filter_ignored(set: &Set, ignore: &Ignored) -> Set {
    let mut out = set.difference(&ignore.set);
    for p in ignore.set.paths() {
        // Everything below an ignored field goes too, except the stripped
        // "metadata" member itself, whose children are real fields.
        if p.len() == 1 && p[0] == PathElement::Field("metadata".into()) && !ignore.whole_metadata {
            continue;
        }
        let mut below = Set::new();
        for q in out.paths() {
            if q.len() > p.len() && q[..p.len()] == p[..] {
                below.insert(&q);
            }
        }
        out = out.difference(&below);
    }
    out
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

fn conflict_error(conflicts: &[(ManagerKey, Path)]) -> PatchError {
    let causes: Vec<(String, String)> = conflicts
        .iter()
        .map(|(k, p)| (path_string(p), k.describe()))
        .collect();
    let message = if conflicts.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            causes[0].1, causes[0].0
        )
    } else {
        let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (field, manager) in &causes {
            by_manager
                .entry(manager.clone())
                .or_default()
                .push(field.clone());
        }
        let mut lines = Vec::new();
        for (manager, fields) in by_manager {
            lines.push(format!("conflicts with {manager}:"));
            for f in fields {
                lines.push(format!("- {f}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    PatchError::Conflict { message, causes }
}

/// The shared half of Updater.Apply / Updater.Update: drop from every other
/// manager what this operation changed or removed; report conflicts.
fn update_managers(
    managers: &mut Managed,
    cmp: &Comparison,
    workflow: Option<&ManagerKey>,
    force: bool,
) -> Result<(), PatchError> {
    let changed = cmp.modified.union(&cmp.added);
    let mut conflicts: Vec<(ManagerKey, Path)> = Vec::new();
    let mut to_strip: Vec<(ManagerKey, Set)> = Vec::new();
    for (k, e) in managers.iter() {
        if Some(k) == workflow {
            continue;
        }
        let c = e.set.intersection(&changed);
        if !c.is_empty() {
            conflicts.extend(c.paths().into_iter().map(|p| (k.clone(), p)));
        }
        to_strip.push((k.clone(), c.union(&cmp.removed)));
    }
    if !force && !conflicts.is_empty() {
        return Err(conflict_error(&conflicts));
    }
    for (k, strip) in to_strip {
        if let Some(e) = managers.get_mut(&k) {
            e.set = e.set.difference(&strip);
        }
    }
    managers.retain(|_, e| !e.set.is_empty());
    Ok(())
}

/// Maintains `metadata.managedFields` on `new` for an Update operation
/// (create with `old = None`, update/PUT, and — done inside [`super::apply_patch`] —
/// JSON/merge/strategic patches), as the real server does:
///
/// * fields that changed are owned by `manager` (an `Update` entry keyed by
///   manager, `api_version` and `subresource`, timestamped `now` when it
///   changed something) and taken away from every other manager;
/// * fields that were removed are taken away from everyone;
/// * managedFields sent in `new` replace the stored ones (a client may edit
///   them), `[{}]` resets them, and an absent/empty list keeps the stored
///   ones; on a subresource the stored ones are always used;
/// * `apiVersion`, `kind` and server-set metadata (name, namespace, uid,
///   resourceVersion, generation, creationTimestamp, managedFields) are never
///   recorded; `status` is not recorded for writes to the main resource of
///   kinds with a status subresource, nor `spec` for writes to `/status`.
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
    api_version: &str,
) {
    let (group, version) = split_api_version(api_version);
    let kind = new
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let ty = Ty::root(group, version, &kind);
    let sub = subresource.unwrap_or("");

    let old_mf = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let new_mf = new.pointer("/metadata/managedFields");
    let mut managers = if !sub.is_empty() {
        decode_entries(old_mf).unwrap_or_default()
    } else if is_reset(new_mf) {
        Managed::new()
    } else {
        match decode_entries(new_mf) {
            Some(m) if !m.is_empty() => m,
            _ => decode_entries(old_mf).unwrap_or_default(),
        }
    };

    let old_clean = old.map(without_managed_fields).unwrap_or_else(|| json!({}));
    // The fields of the object as it is stored: upstream's field manager
    // sees the decoded Go struct, which has no empty slices or maps in its
    // omitempty fields.
    let mut new_clean = without_managed_fields(new);
    crate::openapi::schema::drop_empty_omitempty(group, version, &kind, &mut new_clean);
    let ignore = ignored_fields(group, &kind, subresource);
    let raw = compare(ty, Some(&old_clean), Some(&new_clean));
    let cmp = Comparison {
        added: filter_ignored(&raw.added, &ignore),
        modified: filter_ignored(&raw.modified, &ignore),
        removed: filter_ignored(&raw.removed, &ignore),
    };
    // Update operations are always forced.
    let _ = update_managers(&mut managers, &cmp, None, true);
    let current = cmp.modified.union(&cmp.added);
    if !current.is_empty() {
        let key = ManagerKey {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            subresource: sub.to_string(),
        };
        let previous = managers
            .get(&key)
            .map(|e| e.set.clone())
            .unwrap_or_default();
        managers.insert(
            key,
            Entry {
                api_version: api_version.to_string(),
                time: Some(now.to_string()),
                set: previous.union(&current),
            },
        );
    }
    set_managed_fields(new, &managers);
}

/// Server-side apply (`application/apply-patch+yaml`).
pub(crate) fn apply(
    live: Option<&Value>,
    config: &Value,
    gvk: &Gvk<'_>,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    now: &str,
) -> Result<Value, PatchError> {
    let gv = if gvk.group.is_empty() {
        gvk.version.to_string()
    } else {
        format!("{}/{}", gvk.group, gvk.version)
    };
    let Some(cfg) = config.as_object() else {
        return Err(PatchError::BadRequest(
            "error decoding YAML: apply patch must be a YAML or JSON object".to_string(),
        ));
    };
    let patch_gv = cfg.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if patch_gv != gv {
        return Err(PatchError::BadRequest(format!(
            "Incorrect version specified in apply patch. Specified patch version: {}, expected: {gv}",
            if patch_gv.is_empty() { "/" } else { patch_gv }
        )));
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(PatchError::BadRequest(
            "metadata.managedFields must be nil".to_string(),
        ));
    }
    let ty = Ty::root(gvk.group, gvk.version, gvk.kind);
    let sub = subresource.unwrap_or("");
    let ns = config
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = config
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let config_set = to_field_set(ty, config).map_err(|e| {
        PatchError::ServerError(format!(
            // schema.GroupVersionKind.String(): `group/version, Kind=kind`.
            "failed to create typed patch object ({ns}/{name}; {}/{}, Kind={}): {e}",
            gvk.group, gvk.version, gvk.kind
        ))
    })?;

    let live_clean = live
        .map(without_managed_fields)
        .unwrap_or_else(|| json!({}));
    let mut managers =
        decode_entries(live.and_then(|l| l.pointer("/metadata/managedFields"))).unwrap_or_default();
    let ignore = ignored_fields(gvk.group, gvk.kind, subresource);
    let key = ManagerKey {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: String::new(),
        subresource: sub.to_string(),
    };
    let last = managers.get(&key).map(|e| e.set.clone());
    let new_set = filter_ignored(&config_set, &ignore);
    managers.insert(
        key.clone(),
        Entry {
            api_version: gv.clone(),
            time: Some(now.to_string()),
            set: new_set,
        },
    );

    let mut merged = merge(ty, Some(&live_clean), Some(config)).unwrap_or_else(|| json!({}));
    strip_nulls(&mut merged);

    // Prune what this manager applied last time, no longer applies, and
    // nobody else owns.
    if let Some(last) = last.filter(|l| !l.is_empty()) {
        let owned = managers
            .values()
            .fold(Set::new(), |acc, e| acc.union(&e.set));
        let to_remove = last.difference(&owned);
        if !to_remove.is_empty() {
            remove_items(ty, &mut merged, &to_remove, &owned);
        }
    }

    let raw = compare(ty, Some(&live_clean), Some(&merged));
    let cmp = Comparison {
        added: filter_ignored(&raw.added, &ignore),
        modified: filter_ignored(&raw.modified, &ignore),
        removed: filter_ignored(&raw.removed, &ignore),
    };
    update_managers(&mut managers, &cmp, Some(&key), force)?;
    if let Some(e) = managers.get_mut(&key) {
        e.time = Some(now.to_string());
    }
    set_managed_fields(&mut merged, &managers);
    Ok(merged)
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            for c in m.values_mut() {
                strip_nulls(c);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The merge of a MutatingAdmissionPolicy `ApplyConfiguration` mutation:
/// structured-merge-diff's typed merge of `config` over `obj`. As upstream,
/// a configuration may not set an atomic list, map or struct (it would
/// replace values it does not name); the error names the first one.
pub(crate) fn merge_apply_configuration(
    gvk: &Gvk<'_>,
    obj: &Value,
    config: &Value,
) -> Result<Value, String> {
    fn check_atomic(ty: Ty<'_>, v: &Value, path: &str) -> Result<(), String> {
        match v {
            Value::Object(m) => {
                if ty.is_leaf(Some(v)) {
                    return Err(format!(
                        "may not mutate atomic arrays, maps or structs: {path}"
                    ));
                }
                for (k, fv) in m {
                    let ft = ty.field(k).unwrap_or(Ty::Deduced);
                    check_atomic(ft, fv, &format!("{path}.{k}"))?;
                }
                Ok(())
            }
            Value::Array(items) => {
                if ty.is_leaf(Some(v)) {
                    return Err(format!(
                        "may not mutate atomic arrays, maps or structs: {path}"
                    ));
                }
                let it = ty.items();
                for (i, item) in items.iter().enumerate() {
                    check_atomic(it, item, &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    let ty = Ty::root(gvk.group, gvk.version, gvk.kind);
    if let Value::Object(m) = config {
        for (k, v) in m {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            let ft = ty.field(k).unwrap_or(Ty::Deduced);
            check_atomic(ft, v, &format!(".{k}"))
                .map_err(|e| format!("invalid ApplyConfiguration: {e}"))?;
        }
    }
    Ok(merge(ty, Some(obj), Some(config)).unwrap_or_else(|| obj.clone()))
}

#[cfg(test)]
#[path = "ssa_tests.rs"]
mod tests;

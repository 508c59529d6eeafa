//! The Kubernetes v1.33 type schema kube-sim serves, parsed from the vendored
//! OpenAPI v2 definitions (`k8s-v1.33-definitions.json`, see
//! `vendor/trim_definitions.py` for its provenance).
//!
//! This is the one source of truth for: the OpenAPI documents, strategic
//! merge patch metadata (`x-kubernetes-patch-strategy`,
//! `x-kubernetes-patch-merge-key`), server-side apply list/map semantics
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-map-type`) and unknown-field detection.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Map, Value};

/// The vendored definitions (upstream swagger form).
pub(crate) const DEFINITIONS_JSON: &str = include_str!("k8s-v1.33-definitions.json");

/// The MutatingAdmissionPolicy types of admissionregistration.k8s.io v1 and
/// v1beta1 (Kubernetes v1.36.0, newer than the rest of the schema; see
/// `vendor/trim_admission_definitions.py`), merged into the same index.
pub(crate) const ADMISSION_DEFINITIONS_JSON: &str =
    include_str!("k8s-v1.36-admissionregistration.json");

/// VolumeAttributesClass of storage.k8s.io v1 and v1beta1 (Kubernetes
/// v1.34 types; the v1.33 file was trimmed without them), merged likewise.
pub(crate) const VAC_DEFINITIONS_JSON: &str = include_str!("k8s-v1.34-storage-vac.json");

/// Kubernetes version the vendored schema comes from.
pub const SCHEMA_KUBERNETES_VERSION: &str = "v1.33.0";

/// All definitions, indexed by name and by group/version/kind.
#[derive(Debug)]
pub struct Schemas {
    defs: Map<String, Value>,
    by_gvk: HashMap<(String, String, String), String>,
}

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| Schemas::parse(DEFINITIONS_JSON));

/// The process-wide parsed schema.
pub fn schemas() -> &'static Schemas {
    &SCHEMAS
}

impl Schemas {
    fn parse(text: &str) -> Schemas {
        let mut defs = Self::definitions_of(text);
        if !defs.is_empty() {
            defs.extend(Self::definitions_of(ADMISSION_DEFINITIONS_JSON));
            defs.extend(Self::definitions_of(VAC_DEFINITIONS_JSON));
        }
        if defs.is_empty() {
            tracing::error!(
                "kube-sim: vendored OpenAPI definitions did not parse; schema-aware features are off"
            );
        }
        let mut by_gvk = HashMap::new();
        for (name, def) in &defs {
            if let Some(Value::Array(gvks)) = def.get("x-kubernetes-group-version-kind") {
                for gvk in gvks {
                    let g = gvk.get("group").and_then(Value::as_str).unwrap_or("");
                    let v = gvk.get("version").and_then(Value::as_str).unwrap_or("");
                    let k = gvk.get("kind").and_then(Value::as_str).unwrap_or("");
                    // Meta kinds (Status, WatchEvent, DeleteOptions) list many
                    // group-versions; the first definition found wins, which is
                    // fine because they are the same type.
                    by_gvk
                        .entry((g.to_string(), v.to_string(), k.to_string()))
                        .or_insert_with(|| name.clone());
                }
            }
        }
        Schemas { defs, by_gvk }
    }

    fn definitions_of(text: &str) -> Map<String, Value> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(mut root)) => match root.remove("definitions") {
                Some(Value::Object(defs)) => defs,
                _ => Map::new(),
            },
            _ => Map::new(),
        }
    }

    /// All definitions (name -> upstream swagger schema).
    pub fn definitions(&self) -> &Map<String, Value> {
        &self.defs
    }

    /// The definition name for a kind, e.g. `("apps","v1","Deployment")` ->
    /// `io.k8s.api.apps.v1.Deployment`.
    pub fn definition_name(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.by_gvk
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
            .map(String::as_str)
    }

    /// The type of a whole object of the given kind.
    pub fn root(&self, group: &str, version: &str, kind: &str) -> Option<TypeRef<'_>> {
        let name = self.definition_name(group, version, kind)?;
        let def = self.defs.get(name)?;
        Some(TypeRef {
            schemas: self,
            node: def,
            resolved: def,
        })
    }

    fn resolve<'a>(&'a self, node: &'a Value) -> &'a Value {
        let mut cur = node;
        // Definitions never chain more than a couple of refs; bound the walk anyway.
        for _ in 0..8 {
            match cur.get("$ref").and_then(Value::as_str) {
                Some(r) => match self.defs.get(r.rsplit('/').next().unwrap_or(r)) {
                    Some(next) => cur = next,
                    None => return cur,
                },
                None => return cur,
            }
        }
        cur
    }
}

/// The shape of a type, as structured-merge-diff sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// An object with declared properties (a Go struct).
    Struct,
    /// An object with `additionalProperties` (a Go map).
    Map,
    /// An array.
    List,
    /// A string, number, boolean or int-or-string.
    Scalar,
    /// An object with no declared shape (RawExtension, FieldsV1): kept as is.
    Untyped,
}

/// How server-side apply treats a list (structured-merge-diff's element
/// relationship, derived as kube-openapi's schemaconv does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// A set of scalars, items identified by value.
    Set,
    /// A list of objects identified by these key fields.
    Map(Vec<String>),
}

/// A position in the schema: the (unresolved) property node, which carries
/// the field-level extensions, and the resolved type.
#[derive(Debug, Clone, Copy)]
pub struct TypeRef<'a> {
    schemas: &'a Schemas,
    node: &'a Value,
    resolved: &'a Value,
}

impl<'a> TypeRef<'a> {
    fn new(schemas: &'a Schemas, node: &'a Value) -> TypeRef<'a> {
        TypeRef {
            schemas,
            node,
            resolved: schemas.resolve(node),
        }
    }

    fn ext(&self, key: &str) -> Option<&'a Value> {
        self.node.get(key).or_else(|| self.resolved.get(key))
    }

    /// The definition name when this type is a `$ref` (or a root definition).
    pub fn definition(&self) -> Option<&'a str> {
        self.node
            .get("$ref")
            .and_then(Value::as_str)
            .map(|r| r.rsplit('/').next().unwrap_or(r))
    }

    /// The shape of the type.
    pub fn shape(&self) -> Shape {
        let r = self.resolved;
        match r.get("type").and_then(Value::as_str) {
            Some("array") => Shape::List,
            Some("object") | None => {
                if r.get("properties").is_some() {
                    Shape::Struct
                } else if r.get("additionalProperties").is_some() {
                    Shape::Map
                } else if r.get("type").is_none() && r.get("format").is_some() {
                    Shape::Scalar
                } else {
                    Shape::Untyped
                }
            }
            Some(_) => Shape::Scalar,
        }
    }

    /// The type of struct field `name`, or of any map value for maps.
    pub fn field(&self, name: &str) -> Option<TypeRef<'a>> {
        if let Some(p) = self.resolved.get("properties").and_then(|p| p.get(name)) {
            return Some(TypeRef::new(self.schemas, p));
        }
        match self.resolved.get("additionalProperties") {
            Some(ap) if ap.is_object() => Some(TypeRef::new(self.schemas, ap)),
            _ => None,
        }
    }

    /// Whether `name` is a declared struct field (not a map key).
    pub fn has_field(&self, name: &str) -> bool {
        self.resolved
            .get("properties")
            .and_then(|p| p.get(name))
            .is_some()
    }

    /// Declared struct fields, in schema order.
    pub fn field_names(&self) -> Vec<&'a str> {
        match self.resolved.get("properties").and_then(Value::as_object) {
            Some(p) => p.keys().map(String::as_str).collect(),
            None => Vec::new(),
        }
    }

    /// Required struct fields.
    pub fn required(&self) -> Vec<&'a str> {
        match self.resolved.get("required").and_then(Value::as_array) {
            Some(r) => r.iter().filter_map(Value::as_str).collect(),
            None => Vec::new(),
        }
    }

    /// The element type of a list.
    pub fn items(&self) -> Option<TypeRef<'a>> {
        self.resolved
            .get("items")
            .map(|i| TypeRef::new(self.schemas, i))
    }

    /// `x-kubernetes-patch-strategy`, split on commas (e.g. `merge,retainKeys`).
    pub fn patch_strategies(&self) -> Vec<&'a str> {
        match self
            .ext("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
        {
            Some(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect(),
            None => Vec::new(),
        }
    }

    /// `x-kubernetes-patch-merge-key`.
    pub fn patch_merge_key(&self) -> Option<&'a str> {
        self.ext("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
    }

    /// Server-side apply list semantics, as kube-openapi's schemaconv derives
    /// them: an explicit `x-kubernetes-list-type` wins; otherwise patch
    /// strategy `merge` means a map keyed by the merge key (or a set for
    /// scalars); everything else is atomic.
    pub fn list_type(&self) -> ListType {
        match self.ext("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("atomic") => return ListType::Atomic,
            Some("set") => return ListType::Set,
            Some("map") => {
                let keys = self
                    .ext("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| {
                        k.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                return ListType::Map(keys);
            }
            _ => {}
        }
        if self.patch_strategies().contains(&"merge") {
            return match self.patch_merge_key() {
                Some(k) => ListType::Map(vec![k.to_string()]),
                None => ListType::Set,
            };
        }
        ListType::Atomic
    }

    /// `x-kubernetes-map-type: atomic` (on the field or its type).
    pub fn map_is_atomic(&self) -> bool {
        self.ext("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }
}

/// Finds every field of `obj` that the schema of `gvk` does not declare, as
/// upstream's strict decoding names them (`.spec.foo`, `.spec.containers[0].bar`).
/// Returns an empty list for kinds without a schema.
pub fn unknown_fields(group: &str, version: &str, kind: &str, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(root) = schemas().root(group, version, kind) {
        walk_unknown(root, obj, String::new(), &mut out, false);
    }
    out
}

/// Removes every field the schema of `gvk` does not declare (what decoding
/// into the typed object does on a real server) and returns their paths.
pub fn prune_unknown_fields(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(root) = schemas().root(group, version, kind) {
        prune_walk(root, obj, String::new(), &mut out);
    }
    out
}

/// upstream's `runtime.NewStrictDecodingError` text for unknown fields, e.g.
/// `strict decoding error: unknown field "dataa", unknown field "spec.foo"`
/// (paths as [`unknown_fields`] returns them).
pub fn strict_decoding_error(unknown: &[String]) -> String {
    let parts: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {:?}", f.trim_start_matches('.')))
        .collect();
    format!("strict decoding error: {}", parts.join(", "))
}

/// The 400 BadRequest message a real server gives a create or update with
/// `fieldValidation=Strict` (kubectl's default) and unknown fields:
/// `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "dataa"`.
pub fn strict_create_update_message(kind: &str, version: &str, unknown: &[String]) -> String {
    undecodable_message(kind, version, &strict_decoding_error(unknown))
}

/// The 400 BadRequest message of a create or update whose body does not
/// decode into the kind's type: `{kind} in version "v1" cannot be handled as
/// a {kind}: {why}`.
pub fn undecodable_message(kind: &str, version: &str, why: &str) -> String {
    format!("{kind} in version {version:?} cannot be handled as a {kind}: {why}")
}

/// The `Warning` header text for one unknown field under
/// `fieldValidation=Warn` (the default): `unknown field "spec.foo"`.
pub fn unknown_field_warning(field: &str) -> String {
    format!("unknown field {:?}", field.trim_start_matches('.'))
}

fn walk_unknown(t: TypeRef<'_>, v: &Value, path: String, out: &mut Vec<String>, _in_map: bool) {
    match (t.shape(), v) {
        (Shape::Struct, Value::Object(m)) => {
            for (k, child) in m {
                let p = format!("{path}.{k}");
                match t.field(k) {
                    Some(ft) if t.has_field(k) => walk_unknown(ft, child, p, out, false),
                    _ => out.push(p),
                }
            }
        }
        (Shape::Map, Value::Object(m)) => {
            if let Some(et) = t.field("") {
                for (k, child) in m {
                    walk_unknown(et, child, format!("{path}.{k}"), out, true);
                }
            }
        }
        (Shape::List, Value::Array(items)) => {
            if let Some(it) = t.items() {
                for (i, child) in items.iter().enumerate() {
                    walk_unknown(it, child, format!("{path}[{i}]"), out, false);
                }
            }
        }
        _ => {}
    }
}

fn prune_walk(t: TypeRef<'_>, v: &mut Value, path: String, out: &mut Vec<String>) {
    match (t.shape(), v) {
        (Shape::Struct, Value::Object(m)) => {
            // Report in document order, as the strict decoder does.
            let mut unknown = Vec::new();
            for (k, child) in m.iter_mut() {
                match t.field(k).filter(|_| t.has_field(k)) {
                    Some(ft) => prune_walk(ft, child, format!("{path}.{k}"), out),
                    None => {
                        out.push(format!("{path}.{k}"));
                        unknown.push(k.clone());
                    }
                }
            }
            for k in unknown {
                m.shift_remove(&k);
            }
        }
        (Shape::Map, Value::Object(m)) => {
            if let Some(et) = t.field("") {
                for (k, child) in m.iter_mut() {
                    prune_walk(et, child, format!("{path}.{k}"), out);
                }
            }
        }
        (Shape::List, Value::Array(items)) => {
            if let Some(it) = t.items() {
                for (i, child) in items.iter_mut().enumerate() {
                    prune_walk(it, child, format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The first integer field of `obj` whose value its Go type cannot hold
/// (an `int32` past its range, a fraction in an integer), as decoding into
/// the typed object refuses it: `json: cannot unmarshal number 2147483648
/// into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32`.
/// `None` when every integer fits, or for kinds without a schema.
pub fn integer_decode_error(group: &str, version: &str, kind: &str, obj: &Value) -> Option<String> {
    let root = schemas().root(group, version, kind)?;
    let struct_name = root
        .definition()
        .or_else(|| schemas().definition_name(group, version, kind))
        .unwrap_or(kind);
    integer_walk(root, obj, struct_name, &mut Vec::new())
}

fn integer_walk<'a>(
    t: TypeRef<'a>,
    v: &'a Value,
    struct_name: &str,
    fields: &mut Vec<&'a str>,
) -> Option<String> {
    match (t.shape(), v) {
        (Shape::Struct, Value::Object(m)) => {
            let own = t.definition().unwrap_or(struct_name).to_string();
            for (k, child) in m {
                let Some(ft) = t.field(k).filter(|_| t.has_field(k)) else {
                    continue;
                };
                fields.push(k);
                let found = integer_walk(ft, child, &own, fields);
                fields.pop();
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        (Shape::Map, Value::Object(m)) => {
            let et = t.field("")?;
            m.values()
                .find_map(|child| integer_walk(et, child, struct_name, fields))
        }
        (Shape::List, Value::Array(items)) => {
            let it = t.items()?;
            items
                .iter()
                .find_map(|child| integer_walk(it, child, struct_name, fields))
        }
        (Shape::Scalar, Value::Number(n)) => {
            if t.resolved.get("type").and_then(Value::as_str) != Some("integer") {
                return None;
            }
            let go_type = match t.resolved.get("format").and_then(Value::as_str) {
                Some("int32") => "int32",
                _ => "int64",
            };
            let fits = match (n.as_i64(), go_type) {
                (Some(i), "int32") => i32::try_from(i).is_ok(),
                (Some(_), _) => true,
                (None, _) => false,
            };
            if fits {
                return None;
            }
            let short = struct_name.rsplit('.').next().unwrap_or(struct_name);
            Some(format!(
                "json: cannot unmarshal number {n} into Go struct field {short}.{} of type {go_type}",
                fields.join(".")
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vendored_definitions_parse_and_cover_every_served_kind() {
        let kinds = [
            ("", "v1", "Namespace"),
            ("", "v1", "Pod"),
            ("", "v1", "Service"),
            ("", "v1", "PersistentVolume"),
            ("", "v1", "PersistentVolumeClaim"),
            ("", "v1", "Secret"),
            ("", "v1", "ConfigMap"),
            ("", "v1", "ServiceAccount"),
            ("", "v1", "Endpoints"),
            ("", "v1", "Event"),
            ("", "v1", "Node"),
            ("events.k8s.io", "v1", "Event"),
            ("coordination.k8s.io", "v1", "Lease"),
            ("apps", "v1", "Deployment"),
            ("rbac.authorization.k8s.io", "v1", "Role"),
            ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
            ("policy", "v1", "PodDisruptionBudget"),
        ];
        for (g, v, k) in kinds {
            let root = schemas().root(g, v, k);
            assert!(root.is_some(), "no schema for {g}/{v} {k}");
            assert_eq!(root.map(|r| r.shape()), Some(Shape::Struct), "{k}");
        }
        assert!(schemas().root("example.com", "v1", "Widget").is_none());
    }

    /// Each case: a path from a kind's root and the patch/list metadata the
    /// upstream k8s.io/api struct tags declare for it.
    #[test]
    fn patch_and_list_metadata_match_upstream_struct_tags() {
        struct Case {
            gvk: (&'static str, &'static str, &'static str),
            path: &'static [&'static str],
            strategies: &'static [&'static str],
            merge_key: Option<&'static str>,
            list: ListType,
        }
        let cases = [
            Case {
                gvk: ("", "v1", "Service"),
                path: &["metadata", "finalizers"],
                strategies: &["merge"],
                merge_key: None,
                list: ListType::Set,
            },
            Case {
                gvk: ("", "v1", "Pod"),
                path: &["spec", "containers"],
                strategies: &["merge"],
                merge_key: Some("name"),
                list: ListType::Map(vec!["name".into()]),
            },
            Case {
                gvk: ("", "v1", "Service"),
                path: &["spec", "ports"],
                strategies: &["merge"],
                merge_key: Some("port"),
                list: ListType::Map(vec!["port".into(), "protocol".into()]),
            },
            Case {
                gvk: ("", "v1", "Pod"),
                path: &["spec", "volumes"],
                strategies: &["merge", "retainKeys"],
                merge_key: Some("name"),
                list: ListType::Map(vec!["name".into()]),
            },
            Case {
                gvk: ("", "v1", "Service"),
                path: &["status", "loadBalancer", "ingress"],
                strategies: &[],
                merge_key: None,
                list: ListType::Atomic,
            },
            Case {
                gvk: ("", "v1", "Pod"),
                path: &["metadata", "ownerReferences"],
                strategies: &["merge"],
                merge_key: Some("uid"),
                list: ListType::Map(vec!["uid".into()]),
            },
            Case {
                gvk: ("", "v1", "Pod"),
                path: &["status", "conditions"],
                strategies: &["merge"],
                merge_key: Some("type"),
                list: ListType::Map(vec!["type".into()]),
            },
            Case {
                gvk: ("apps", "v1", "Deployment"),
                path: &["spec", "strategy"],
                strategies: &["retainKeys"],
                merge_key: None,
                list: ListType::Atomic,
            },
        ];
        for c in cases {
            let mut t = schemas()
                .root(c.gvk.0, c.gvk.1, c.gvk.2)
                .expect("kind has a schema");
            for p in c.path {
                t = t
                    .field(p)
                    .unwrap_or_else(|| panic!("no field {p} in {:?}", c.path));
            }
            assert_eq!(t.patch_strategies(), c.strategies, "{:?}", c.path);
            assert_eq!(t.patch_merge_key(), c.merge_key, "{:?}", c.path);
            if t.shape() == Shape::List {
                assert_eq!(t.list_type(), c.list, "{:?}", c.path);
            }
        }
    }

    #[test]
    fn label_selector_is_an_atomic_map_and_labels_a_granular_one() {
        let d = schemas().root("apps", "v1", "Deployment").expect("schema");
        let sel = d
            .field("spec")
            .and_then(|s| s.field("selector"))
            .expect("selector");
        assert!(sel.map_is_atomic());
        let labels = d
            .field("metadata")
            .and_then(|m| m.field("labels"))
            .expect("labels");
        assert_eq!(labels.shape(), Shape::Map);
        assert!(!labels.map_is_atomic());
    }

    #[test]
    fn unknown_fields_are_named_like_strict_decoding_and_pruned() {
        let mut obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "labels": {"a": "b"}, "bogus": 1},
            "data": {"k": "v"},
            "dataa": {"k": "v"}
        });
        assert_eq!(
            unknown_fields("", "v1", "ConfigMap", &obj),
            vec![".metadata.bogus".to_string(), ".dataa".to_string()]
        );
        let pruned = prune_unknown_fields("", "v1", "ConfigMap", &mut obj);
        assert_eq!(pruned.len(), 2);
        assert!(obj.get("dataa").is_none());
        assert_eq!(obj.pointer("/metadata/labels/a"), Some(&json!("b")));
        assert_eq!(
            strict_create_update_message("ConfigMap", "v1", &pruned),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"metadata.bogus\", unknown field \"dataa\""
        );
        assert_eq!(
            unknown_field_warning(".spec.foo"),
            "unknown field \"spec.foo\""
        );
        let pod = json!({"spec": {"containers": [{"name": "a", "imagee": "x"}]}});
        assert_eq!(
            unknown_fields("", "v1", "Pod", &pod),
            vec![".spec.containers[0].imagee".to_string()]
        );
    }
}

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

/// ServiceCIDR and IPAddress of networking.k8s.io/v1 (upstream's v1.36.3
/// swagger; see `vendor/trim_networking_definitions.py`), merged likewise.
pub(crate) const NETWORKING_DEFINITIONS_JSON: &str = include_str!("k8s-v1.36-networking.json");

/// Kubernetes version the vendored schema comes from.
pub const SCHEMA_KUBERNETES_VERSION: &str = "v1.33.0";

/// All definitions, indexed by name and by group/version/kind.
#[derive(Debug)]
pub struct Schemas {
    defs: Map<String, Value>,
    by_gvk: HashMap<(String, String, String), String>,
    /// Struct fields whose Go type is a pointer to a struct, by definition
    /// (`vendor/pointer_fields.py`).
    pointer_fields: HashMap<String, Vec<String>>,
    /// Pointer, slice and map fields without omitempty, by definition
    /// (`vendor/pointer_fields.py`): encoded as null when nil.
    null_fields: HashMap<String, Vec<String>>,
    /// Fields tagged omitempty, by definition (`vendor/pointer_fields.py`):
    /// encoding/json leaves such a slice or map out when it is empty.
    omitempty_fields: HashMap<String, Vec<String>>,
    /// Struct fields in Go's order, where that is not the sorted order
    /// (`vendor/field_order.py`).
    field_order: HashMap<String, Vec<String>>,
}

/// The pointer-to-struct fields of the served definitions (see
/// `vendor/pointer_fields.py`).
pub(crate) const POINTER_FIELDS_JSON: &str = include_str!("k8s-v1.36-pointer-fields.json");

/// The Go field order of the served struct definitions whose order is not
/// the sorted one (see `vendor/field_order.py`): how the apiserver's JSON
/// encoding of a built-in object orders its keys.
pub(crate) const FIELD_ORDER_JSON: &str = include_str!("k8s-v1.36-field-order.json");

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
            defs.extend(Self::definitions_of(NETWORKING_DEFINITIONS_JSON));
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
        let fields_of = |key: &str| -> HashMap<String, Vec<String>> {
            serde_json::from_str::<Value>(POINTER_FIELDS_JSON)
                .ok()
                .and_then(|v| v.get(key).cloned())
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default()
        };
        let pointer_fields = fields_of("pointerFields");
        let null_fields = fields_of("nullFields");
        let omitempty_fields = fields_of("omitemptyFields");
        let field_order = serde_json::from_str::<Value>(FIELD_ORDER_JSON)
            .ok()
            .and_then(|v| v.get("fieldOrder").and_then(Value::as_object).cloned())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(name, fields)| {
                let fields = fields.as_str()?.split(' ').map(str::to_string).collect();
                Some((name, fields))
            })
            .collect();
        Schemas {
            defs,
            by_gvk,
            pointer_fields,
            null_fields,
            omitempty_fields,
            field_order,
        }
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
            name: Some(name),
        })
    }

    /// The type of definition `name` (e.g. ObjectMeta's).
    pub fn definition_type(&self, name: &str) -> Option<TypeRef<'_>> {
        let (name, def) = self.defs.get_key_value(name)?;
        Some(TypeRef {
            schemas: self,
            node: def,
            resolved: def,
            name: Some(name.as_str()),
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
    /// The definition this type is (a `$ref`'s target or a root kind).
    name: Option<&'a str>,
}

impl<'a> TypeRef<'a> {
    fn new(schemas: &'a Schemas, node: &'a Value) -> TypeRef<'a> {
        TypeRef {
            schemas,
            node,
            resolved: schemas.resolve(node),
            name: node
                .get("$ref")
                .and_then(Value::as_str)
                .map(|r| r.rsplit('/').next().unwrap_or(r)),
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

    /// Whether struct field `name` is a pointer to a struct in the Go type
    /// (so it may be absent from a typed object).
    pub fn is_pointer_field(&self, name: &str) -> bool {
        self.name
            .and_then(|d| self.schemas.pointer_fields.get(d))
            .is_some_and(|fields| fields.iter().any(|f| f == name))
    }

    /// Whether struct field `name` is a pointer, slice or map without
    /// omitempty in the Go type (so a typed object holds it, null, when nil).
    pub fn is_null_field(&self, name: &str) -> bool {
        self.name
            .and_then(|d| self.schemas.null_fields.get(d))
            .is_some_and(|fields| fields.iter().any(|f| f == name))
    }

    /// Whether struct field `name` is tagged omitempty in the Go type.
    pub fn is_omitempty_field(&self, name: &str) -> bool {
        self.name
            .and_then(|d| self.schemas.omitempty_fields.get(d))
            .is_some_and(|fields| fields.iter().any(|f| f == name))
    }

    /// A struct's fields in the order Go's encoding/json writes them (its
    /// struct field order), or None when that is the sorted order.
    pub fn go_field_order(&self) -> Option<&'a [String]> {
        let name = self.name.or_else(|| self.definition())?;
        self.schemas.field_order.get(name).map(Vec::as_slice)
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

    /// The width of an integer type (`format: int32` is 32, `int64` or none
    /// 64), or None for other types.
    pub fn integer_bits(&self) -> Option<u8> {
        (self.resolved.get("type").and_then(Value::as_str) == Some("integer")).then(|| {
            match self.resolved.get("format").and_then(Value::as_str) {
                Some("int32") => 32,
                _ => 64,
            }
        })
    }

    /// The Go type name of a struct type (`LeaseSpec` for
    /// `io.k8s.api.coordination.v1.LeaseSpec`).
    fn go_struct_name(&self) -> Option<&'a str> {
        self.definition().map(|d| d.rsplit('.').next().unwrap_or(d))
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

/// Removes the empty slices and maps (`[]`, `{}`) of omitempty fields
/// from a built-in object, as decoding it into the Go struct and encoding
/// that again does (encoding/json's omitempty leaves out an empty slice or
/// map). A kind without a vendored schema (a custom resource) keeps them.
pub fn drop_empty_omitempty(group: &str, version: &str, kind: &str, obj: &mut Value) {
    if let Some(root) = schemas().root(group, version, kind) {
        omitempty_walk(root, obj);
    }
}

fn omitempty_walk(t: TypeRef<'_>, v: &mut Value) {
    match (t.shape(), v) {
        (Shape::Struct, Value::Object(m)) => {
            let mut empty = Vec::new();
            for (k, child) in m.iter_mut() {
                let Some(ft) = t.field(k).filter(|_| t.has_field(k)) else {
                    continue;
                };
                omitempty_walk(ft, child);
                let is_empty = match (ft.shape(), &*child) {
                    (Shape::List, Value::Array(a)) => a.is_empty(),
                    (Shape::Map, Value::Object(o)) => o.is_empty(),
                    _ => false,
                };
                if is_empty && t.is_omitempty_field(k) {
                    empty.push(k.clone());
                }
            }
            for k in empty {
                m.shift_remove(&k);
            }
        }
        (Shape::Map, Value::Object(m)) => {
            if let Some(et) = t.field("") {
                for child in m.values_mut() {
                    omitempty_walk(et, child);
                }
            }
        }
        (Shape::List, Value::Array(items)) => {
            if let Some(it) = t.items() {
                for child in items.iter_mut() {
                    omitempty_walk(it, child);
                }
            }
        }
        _ => {}
    }
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

/// The definition of `resource.Quantity`.
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// Where `v` has a `resource.Quantity` value (JSON pointers, document
/// order), and whether each is a map value (a null there decodes as zero).
fn quantity_sites(
    t: TypeRef<'_>,
    v: &Value,
    pointer: &str,
    in_map: bool,
    out: &mut Vec<(String, bool)>,
) {
    if t.definition() == Some(QUANTITY) {
        out.push((pointer.to_string(), in_map));
        return;
    }
    match (t.shape(), v) {
        (Shape::Struct, Value::Object(m)) => {
            for (k, child) in m {
                if let Some(ft) = t.field(k).filter(|_| t.has_field(k)) {
                    let ptr = format!("{pointer}/{}", pointer_key(k));
                    quantity_sites(ft, child, &ptr, false, out);
                }
            }
        }
        (Shape::Map, Value::Object(m)) => {
            if let Some(et) = t.field("") {
                for (k, child) in m {
                    let ptr = format!("{pointer}/{}", pointer_key(k));
                    quantity_sites(et, child, &ptr, true, out);
                }
            }
        }
        (Shape::List, Value::Array(items)) => {
            if let Some(it) = t.items() {
                for (i, child) in items.iter().enumerate() {
                    quantity_sites(it, child, &format!("{pointer}/{i}"), false, out);
                }
            }
        }
        _ => {}
    }
}

fn kind_quantity_sites(group: &str, version: &str, kind: &str, obj: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    if let Some(root) = schemas().root(group, version, kind) {
        quantity_sites(root, obj, "", false, &mut out);
    }
    out
}

/// `Quantity.UnmarshalJSON` of a JSON value (its text: a string unquoted,
/// anything else as written), then, for a map value (a core/v1
/// `ResourceList`'s), `SetDefaults_ResourceList`'s round-up to milli units;
/// None for null.
fn decode_quantity(
    v: &Value,
    in_map: bool,
) -> Option<Result<String, crate::quantity::QuantityError>> {
    let text = match v {
        Value::Null => return None,
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Some(if in_map {
        crate::quantity::marshal_resource_list_value(&text)
    } else {
        crate::quantity::marshal(&text)
    })
}

/// What the decoder says of the first `resource.Quantity` field of a
/// built-in kind that does not parse (`quantities must match the regular
/// expression ...`); None when all do. Custom resources are unstructured:
/// their quantities are strings like any other.
pub fn quantity_decode_error(
    group: &str,
    version: &str,
    kind: &str,
    obj: &Value,
) -> Option<String> {
    kind_quantity_sites(group, version, kind, obj)
        .into_iter()
        .find_map(
            |(ptr, in_map)| match decode_quantity(obj.pointer(&ptr)?, in_map)? {
                Ok(_) => None,
                Err(e) => Some(e.message().to_string()),
            },
        )
}

/// Every `resource.Quantity` field of a built-in kind as it is stored and
/// answered: decoded and marshalled again (`1.5Gi` is `1536Mi`, see
/// [`crate::quantity`]; a `ResourceList`'s rounded up to milli units); a
/// null map value is a zero quantity, `"0"`. What
/// does not parse is left (the decoder rejected it before).
pub fn canonicalize_quantities(group: &str, version: &str, kind: &str, obj: &mut Value) {
    for (ptr, in_map) in kind_quantity_sites(group, version, kind, obj) {
        let Some(v) = obj.pointer_mut(&ptr) else {
            continue;
        };
        match decode_quantity(v, in_map) {
            Some(Ok(s)) => *v = Value::String(s),
            None if in_map => *v = Value::String("0".into()),
            _ => {}
        }
    }
}

/// An integer field met while walking an object with its schema: the Go
/// struct that declares it, the JSON path from the root without list
/// indices or map keys (sigs.k8s.io/json's error context), its width and
/// where the value is (a JSON pointer).
struct IntSite {
    strukt: String,
    path: String,
    bits: u8,
    pointer: String,
}

impl IntSite {
    fn go_type(&self) -> &'static str {
        if self.bits == 32 { "int32" } else { "int64" }
    }
}

/// JSON pointer escaping of one key.
fn pointer_key(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// Every integer-typed value of `v`, in document order.
fn int_sites(
    t: TypeRef<'_>,
    strukt: &str,
    path: &str,
    pointer: &str,
    v: &Value,
    out: &mut Vec<IntSite>,
) {
    if let Some(bits) = t.integer_bits() {
        out.push(IntSite {
            strukt: strukt.to_string(),
            path: path.to_string(),
            bits,
            pointer: pointer.to_string(),
        });
        return;
    }
    match (t.shape(), v) {
        (Shape::Struct, Value::Object(m)) => {
            for (k, child) in m {
                let Some(ft) = t.field(k).filter(|_| t.has_field(k)) else {
                    continue;
                };
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                // An integer field names the struct declaring it; a nested
                // struct's fields name that struct.
                let inner = if ft.integer_bits().is_some() {
                    strukt
                } else {
                    ft.go_struct_name().unwrap_or(strukt)
                };
                let ptr = format!("{pointer}/{}", pointer_key(k));
                int_sites(ft, inner, &p, &ptr, child, out);
            }
        }
        (Shape::Map, Value::Object(m)) => {
            if let Some(et) = t.field("") {
                let inner = et.go_struct_name().unwrap_or(strukt);
                for (k, child) in m {
                    let ptr = format!("{pointer}/{}", pointer_key(k));
                    int_sites(et, inner, path, &ptr, child, out);
                }
            }
        }
        (Shape::List, Value::Array(items)) => {
            if let Some(it) = t.items() {
                let inner = it.go_struct_name().unwrap_or(strukt);
                for (i, child) in items.iter().enumerate() {
                    int_sites(it, inner, path, &format!("{pointer}/{i}"), child, out);
                }
            }
        }
        _ => {}
    }
}

fn kind_int_sites(group: &str, version: &str, kind: &str, obj: &Value) -> Vec<IntSite> {
    let mut out = Vec::new();
    if let Some(root) = schemas().root(group, version, kind) {
        int_sites(root, kind, "", "", obj, &mut out);
    }
    out
}

/// What the API server's JSON decoder (sigs.k8s.io/json, as
/// encoding/json's `UnmarshalTypeError`) says of the first integer field
/// whose value its Go type cannot hold, e.g.
/// `json: cannot unmarshal number 2147483648 into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32`.
/// None when every integer decodes. (A number is printed as serde_json
/// read it; [`decode_integers`] prints the literal the request wrote.)
pub fn integer_decode_error(group: &str, version: &str, kind: &str, obj: &Value) -> Option<String> {
    decode_integers(group, version, kind, &mut obj.clone(), None, &|_| None).err()
}

/// Decodes every integer field of `obj` as the API server's JSON decoder
/// does: the number literal the document wrote there (`literal`, by JSON
/// pointer; serde_json's reading when it has none) must be an integer
/// (`strconv.ParseInt`) its Go type holds, or it is the decoder's error,
/// quoting the literal (`json: cannot unmarshal number 1e3 into Go struct
/// field ...`). A literal that decodes is stored as the integer it is
/// (`-0`, which serde_json reads as a float, is 0). The first error in
/// the document's order is the one reported: `order`'s, when the document
/// decoded is not `obj` in `obj`'s order (a patched document as upstream's
/// patch library writes it).
pub fn decode_integers(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
    order: Option<&Value>,
    literal: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let mut sites = order
        .map(|o| kind_int_sites(group, version, kind, o))
        .unwrap_or_default();
    for site in kind_int_sites(group, version, kind, obj) {
        if !sites.iter().any(|s| s.pointer == site.pointer) {
            sites.push(site);
        }
    }
    for site in sites {
        let Some(v) = obj.pointer_mut(&site.pointer) else {
            continue;
        };
        let what = match v {
            Value::Null => continue,
            Value::Number(n) => {
                let fits = |i: i64| site.bits != 32 || i32::try_from(i).is_ok();
                // serde_json reads only a literal of digits as an integer,
                // which ParseInt reads the same: no need to look it up.
                if n.as_i64().is_some_and(fits) {
                    continue;
                }
                let lit = literal(&site.pointer).unwrap_or_else(|| n.to_string());
                let fits = lit.parse::<i64>().is_ok_and(fits);
                if fits {
                    if let Ok(i) = lit.parse::<i64>() {
                        *v = Value::from(i);
                    }
                    continue;
                }
                format!("number {lit}")
            }
            Value::String(_) => "string".to_string(),
            Value::Bool(_) => "bool".to_string(),
            Value::Array(_) => "array".to_string(),
            Value::Object(_) => "object".to_string(),
        };
        return Err(format!(
            "json: cannot unmarshal {what} into Go struct field {}.{} of type {}",
            site.strukt,
            site.path,
            site.go_type()
        ));
    }
    Ok(())
}

/// What the unstructured converter (`runtime.DefaultUnstructuredConverter`,
/// used by strategic merge patch and server-side apply) does with integer
/// fields: an integer (or a float with no fraction) is converted with Go's
/// truncating conversion (`9999999999` becomes `1410065407` in an int32);
/// a fraction is `cannot convert float64 to int32`; any other type
/// `unrecognized type: int32`.
pub fn coerce_integers(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
) -> Result<(), String> {
    for site in kind_int_sites(group, version, kind, obj) {
        let Some(v) = obj.pointer_mut(&site.pointer) else {
            continue;
        };
        let wide: i64 = match v {
            Value::Null => continue,
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => i,
                (None, Some(u), _) => u as i64,
                (None, None, Some(f)) if f.fract() == 0.0 => f as i64,
                _ => return Err(format!("cannot convert float64 to {}", site.go_type())),
            },
            _ => return Err(format!("unrecognized type: {}", site.go_type())),
        };
        let narrowed = if site.bits == 32 {
            i64::from(wide as i32)
        } else {
            wide
        };
        *v = Value::from(narrowed);
    }
    Ok(())
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

    #[test]
    fn integer_fields_decode_as_the_go_decoder_takes_them() {
        let lease = |spec: serde_json::Value| serde_json::json!({"spec": spec});
        assert_eq!(
            integer_decode_error(
                "coordination.k8s.io",
                "v1",
                "Lease",
                &lease(serde_json::json!({"leaseDurationSeconds": 2147483648_u64}))
            )
            .as_deref(),
            Some(
                "json: cannot unmarshal number 2147483648 into Go struct field LeaseSpec.spec.leaseDurationSeconds of type int32"
            )
        );
        assert_eq!(
            integer_decode_error(
                "coordination.k8s.io",
                "v1",
                "Lease",
                &lease(serde_json::json!({"leaseTransitions": "1"}))
            )
            .as_deref(),
            Some(
                "json: cannot unmarshal string into Go struct field LeaseSpec.spec.leaseTransitions of type int32"
            )
        );
        assert!(
            integer_decode_error(
                "coordination.k8s.io",
                "v1",
                "Lease",
                &lease(serde_json::json!({"leaseDurationSeconds": 2147483647}))
            )
            .is_none()
        );
        // Nested structs in lists name the innermost struct; the path has no
        // indices.
        let pod = serde_json::json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 4294967296_u64}]}]}});
        assert_eq!(
            integer_decode_error("", "v1", "Pod", &pod).as_deref(),
            Some(
                "json: cannot unmarshal number 4294967296 into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
            )
        );
        let mut l = lease(
            serde_json::json!({"leaseDurationSeconds": 9999999999_u64, "leaseTransitions": 1e3}),
        );
        coerce_integers("coordination.k8s.io", "v1", "Lease", &mut l).expect("converts");
        assert_eq!(
            l,
            lease(
                serde_json::json!({"leaseDurationSeconds": 1410065407, "leaseTransitions": 1000})
            )
        );
        let mut l = lease(serde_json::json!({"leaseDurationSeconds": 1.5}));
        assert_eq!(
            coerce_integers("coordination.k8s.io", "v1", "Lease", &mut l),
            Err("cannot convert float64 to int32".to_string())
        );
    }
}

//! The OpenAPI v3 documents a store adds to the built-in ones:
//! `apis/apiextensions.k8s.io/v1` (CustomResourceDefinitions) and one per
//! group-version its established CRDs serve, built from each version's
//! `openAPIV3Schema` as apiextensions-apiserver's openapi builder does
//! (`io.<reversed group>.<version>.<Kind>` and `...<Kind>List` components,
//! paths whose PATCH carries `x-kubernetes-group-version-kind` and
//! `fieldValidation`, which is what client-go's `queryParamVerifierV3`
//! looks for before kubectl and helm validate server-side). A CRD's document
//! appears when it is established and goes when it is deleted; its hash
//! changes with its schema.
//!
//! Also: the unknown fields of a custom resource under its structural
//! schema, for `fieldValidation=Strict`.
//!
//! Simplified against a real server: the CustomResourceDefinition schema is
//! written here, not vendored (upstream's `JSONSchemaProps` is recursive and
//! long; here `openAPIV3Schema` is an object that preserves unknown fields,
//! and the other types list their fields with shorter descriptions);
//! custom resources' `metadata` is not checked for unknown fields.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{ServedResource, V3, gv_prefix, hash, v3_for};
use crate::crd::{Node, Served};
use crate::resources::ResourceDef;
use crate::store::Store;

const CRD_PREFIX: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1";
const OBJECT_META: &str = "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string", "default": ""}, "description": description, "x-kubernetes-list-type": "atomic"})
}

fn local(name: &str) -> Value {
    json!({"$ref": format!("#/definitions/{CRD_PREFIX}.{name}")})
}

fn type_meta() -> (Value, Value) {
    (
        string(
            "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.",
        ),
        string(
            "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to.",
        ),
    )
}

/// The apiextensions.k8s.io/v1 definitions (simplified: see the module doc).
fn crd_definitions() -> Map<String, Value> {
    let (api_version, kind) = type_meta();
    let gvk = |k: &str| json!([{"group": "apiextensions.k8s.io", "kind": k, "version": "v1"}]);
    let defs = json!({
        "CustomResourceDefinition": {
            "description": "CustomResourceDefinition represents a resource that should be exposed on the API server.  Its name MUST be in the format <.spec.name>.<.spec.group>.",
            "type": "object",
            "required": ["spec"],
            "properties": {
                "apiVersion": api_version, "kind": kind,
                "metadata": {"$ref": OBJECT_META, "default": {}},
                "spec": local("CustomResourceDefinitionSpec"),
                "status": local("CustomResourceDefinitionStatus"),
            },
            "x-kubernetes-group-version-kind": gvk("CustomResourceDefinition"),
        },
        "CustomResourceDefinitionList": {
            "description": "CustomResourceDefinitionList is a list of CustomResourceDefinition objects.",
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": api_version, "kind": kind,
                "items": {"type": "array", "items": local("CustomResourceDefinition"), "description": "items list individual CustomResourceDefinition objects"},
                "metadata": {"$ref": LIST_META, "default": {}},
            },
            "x-kubernetes-group-version-kind": gvk("CustomResourceDefinitionList"),
        },
        "CustomResourceDefinitionSpec": {
            "description": "CustomResourceDefinitionSpec describes how a user wants their resource to appear",
            "type": "object",
            "required": ["group", "names", "scope", "versions"],
            "properties": {
                "conversion": local("CustomResourceConversion"),
                "group": string("group is the API group of the defined custom resource."),
                "names": local("CustomResourceDefinitionNames"),
                "preserveUnknownFields": {"type": "boolean", "description": "preserveUnknownFields indicates that object fields which are not specified in the OpenAPI schema should be preserved when persisting to storage."},
                "scope": string("scope indicates whether the defined custom resource is cluster- or namespace-scoped. Allowed values are `Cluster` and `Namespaced`."),
                "versions": {"type": "array", "items": local("CustomResourceDefinitionVersion"), "description": "versions is the list of all API versions of the defined custom resource.", "x-kubernetes-list-type": "atomic"},
            },
        },
        "CustomResourceConversion": {
            "description": "CustomResourceConversion describes how to convert different versions of a CR.",
            "type": "object",
            "required": ["strategy"],
            "properties": {
                "strategy": string("strategy specifies how custom resources are converted between versions. Allowed values are: - `\"None\"` - `\"Webhook\"`"),
                "webhook": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "webhook describes how to call the conversion webhook."},
            },
        },
        "CustomResourceDefinitionNames": {
            "description": "CustomResourceDefinitionNames indicates the names to serve this CustomResourceDefinition",
            "type": "object",
            "required": ["plural", "kind"],
            "properties": {
                "categories": strings("categories is a list of grouped resources this custom resource belongs to (e.g. 'all')."),
                "kind": string("kind is the serialized kind of the resource. It is normally CamelCase and singular."),
                "listKind": string("listKind is the serialized kind of the list for this resource. Defaults to \"`kind`List\"."),
                "plural": string("plural is the plural name of the resource to serve."),
                "shortNames": strings("shortNames are short names for the resource, exposed in API discovery documents."),
                "singular": string("singular is the singular name of the resource. It must be all lowercase. Defaults to lowercased `kind`."),
            },
        },
        "CustomResourceDefinitionVersion": {
            "description": "CustomResourceDefinitionVersion describes a version for CRD.",
            "type": "object",
            "required": ["name", "served", "storage"],
            "properties": {
                "additionalPrinterColumns": {"type": "array", "items": local("CustomResourceColumnDefinition"), "description": "additionalPrinterColumns specifies additional columns returned in Table output.", "x-kubernetes-list-type": "atomic"},
                "deprecated": {"type": "boolean", "description": "deprecated indicates this version of the custom resource API is deprecated."},
                "deprecationWarning": string("deprecationWarning overrides the default warning returned to API clients."),
                "name": string("name is the version name, e.g. \u{201c}v1\u{201d}, \u{201c}v2beta1\u{201d}, etc."),
                "schema": local("CustomResourceValidation"),
                "selectableFields": {"type": "array", "items": local("SelectableField"), "description": "selectableFields specifies paths to fields that may be used as field selectors.", "x-kubernetes-list-type": "atomic"},
                "served": {"type": "boolean", "default": false, "description": "served is a flag enabling/disabling this version from being served via REST APIs"},
                "storage": {"type": "boolean", "default": false, "description": "storage indicates this version should be used when persisting custom resources to storage."},
                "subresources": local("CustomResourceSubresources"),
            },
        },
        "CustomResourceColumnDefinition": {
            "description": "CustomResourceColumnDefinition specifies a column for server side printing.",
            "type": "object",
            "required": ["name", "type", "jsonPath"],
            "properties": {
                "description": string("description is a human readable description of this column."),
                "format": string("format is an optional OpenAPI type definition for this column."),
                "jsonPath": string("jsonPath is a simple JSON path (i.e. with array notation) which is evaluated against each custom resource to produce the value for this column."),
                "name": string("name is a human readable name for the column."),
                "priority": {"type": "integer", "format": "int32", "description": "priority is an integer defining the relative importance of this column compared to others."},
                "type": string("type is an OpenAPI type definition for this column."),
            },
        },
        "CustomResourceValidation": {
            "description": "CustomResourceValidation is a list of validation methods for CustomResources.",
            "type": "object",
            "properties": {
                // Simplified: upstream's recursive JSONSchemaProps.
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "openAPIV3Schema is the OpenAPI v3 schema to use for validation and pruning."},
            },
        },
        "SelectableField": {
            "description": "SelectableField specifies the JSON path of a field that may be used with field selectors.",
            "type": "object",
            "required": ["jsonPath"],
            "properties": {"jsonPath": string("jsonPath is a simple JSON path which is evaluated against each custom resource to produce a field selector value.")},
        },
        "CustomResourceSubresources": {
            "description": "CustomResourceSubresources defines the status and scale subresources for CustomResources.",
            "type": "object",
            "properties": {
                "scale": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "scale indicates the custom resource should serve a `/scale` subresource."},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": "status indicates the custom resource should serve a `/status` subresource."},
            },
        },
        "CustomResourceDefinitionStatus": {
            "description": "CustomResourceDefinitionStatus indicates the state of the CustomResourceDefinition",
            "type": "object",
            "properties": {
                "acceptedNames": local("CustomResourceDefinitionNames"),
                "conditions": {"type": "array", "items": local("CustomResourceDefinitionCondition"), "description": "conditions indicate state for particular aspects of a CustomResourceDefinition", "x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map"},
                "storedVersions": strings("storedVersions lists all versions of CustomResources that were ever persisted."),
            },
        },
        "CustomResourceDefinitionCondition": {
            "description": "CustomResourceDefinitionCondition contains details for the current condition of this pod.",
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "lastTransitionTime": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Time"},
                "message": string("message is a human-readable message indicating details about last transition."),
                "reason": string("reason is a unique, one-word, CamelCase reason for the condition's last transition."),
                "status": string("status is the status of the condition. Can be True, False, Unknown."),
                "type": string("type is the type of the condition. Types include Established, NamesAccepted and Terminating."),
            },
        },
    });
    defs.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (format!("{CRD_PREFIX}.{k}"), v.clone()))
        .collect()
}

static CRD_RESOURCE: ServedResource = ServedResource {
    group: "apiextensions.k8s.io",
    version: "v1",
    kind: "CustomResourceDefinition",
    plural: "customresourcedefinitions",
    namespaced: false,
    status: true,
};

static APIEXTENSIONS: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    crate::gojson::to_vec(&without_strategic_merge(v3_for(
        &[CRD_RESOURCE],
        &crd_definitions(),
    )))
});

/// Drops strategic merge patch from the PATCH operations: custom resources
/// do not support it (upstream's documents do not list it, so kubectl apply
/// sends a JSON merge patch). A real server does take it for CRDs
/// themselves; kube-sim has no CRD schema to merge with, so it refuses it
/// and its document says so, which makes kubectl fall back the same way.
fn without_strategic_merge(mut doc: Value) -> Value {
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flatten()
        .map(|(_, v)| v)
    {
        if let Some(Value::Object(content)) = item.pointer_mut("/patch/requestBody/content") {
            content.remove("application/strategic-merge-patch+json");
        }
    }
    doc
}

/// `protection-manager.io` -> `io.protection-manager` (upstream's
/// definition-name prefix of a CRD's group).
fn reversed_group(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// The v2 definitions of one served CRD version: the object (its
/// `openAPIV3Schema` with `metadata` as ObjectMeta and its GVK) and its list.
fn cr_definitions(def: &ResourceDef, schema: &Value) -> Map<String, Value> {
    let prefix = format!("{}.{}", reversed_group(def.group), def.version);
    let gvk = |k: &str| json!([{"group": def.group, "kind": k, "version": def.version}]);
    let (api_version, kind) = type_meta();
    let mut obj = schema.clone();
    if !obj.is_object() {
        obj = json!({"type": "object"});
    }
    obj["type"] = json!("object");
    let props = obj
        .as_object_mut()
        .map(|m| m.entry("properties").or_insert_with(|| json!({})));
    if let Some(Value::Object(p)) = props {
        p.insert("apiVersion".into(), api_version.clone());
        p.insert("kind".into(), kind.clone());
        p.insert("metadata".into(), json!({"$ref": OBJECT_META}));
    }
    obj["x-kubernetes-group-version-kind"] = gvk(def.kind);
    let list_kind = format!("{}List", def.kind);
    let list = json!({
        "description": format!("{list_kind} is a list of {}", def.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": api_version, "kind": kind,
            "items": {"type": "array", "items": {"$ref": format!("#/definitions/{prefix}.{}", def.kind)}, "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", def.resource)},
            "metadata": {"$ref": LIST_META},
        },
        "x-kubernetes-group-version-kind": gvk(&list_kind),
    });
    let mut out = Map::new();
    out.insert(format!("{prefix}.{}", def.kind), obj);
    out.insert(format!("{prefix}.{list_kind}"), list);
    out
}

/// The served resources of one CRD group-version and their definitions.
type GroupVersion = (Vec<ServedResource>, Map<String, Value>);

/// (document path, bytes) of every group-version `store` serves: the
/// built-in ones, apiextensions.k8s.io/v1, and its CRDs' versions.
fn documents(store: &Store) -> Vec<(String, Bytes)> {
    let mut out: Vec<(String, Bytes)> = V3
        .iter()
        .map(|(p, d)| (p.clone(), Bytes::from_static(d.as_slice())))
        .collect();
    out.push((
        "apis/apiextensions.k8s.io/v1".into(),
        Bytes::from_static(APIEXTENSIONS.as_slice()),
    ));
    let mut by_gv: std::collections::BTreeMap<(&str, &str), GroupVersion> = Default::default();
    for def in store.custom_resources() {
        let Some(served) = store
            .find(def.group, def.version, def.resource)
            .and_then(|rid| store.custom(rid))
        else {
            continue;
        };
        let e = by_gv.entry((def.group, def.version)).or_default();
        e.0.push(ServedResource {
            group: def.group,
            version: def.version,
            kind: def.kind,
            plural: def.resource,
            namespaced: def.namespaced,
            status: def.has_status,
        });
        e.1.extend(cr_definitions(def, &served.schema.raw));
    }
    for ((g, v), (served, defs)) in by_gv {
        let path = gv_prefix(g, v).trim_start_matches('/').to_string();
        let doc = without_strategic_merge(v3_for(&served, &defs));
        out.push((path, Bytes::from(crate::gojson::to_vec(&doc))));
    }
    out
}

/// The `/openapi/v3` index of `store` (see [`super::v3_index`]).
pub fn v3_index(store: &Store, base_url_independent: bool) -> Value {
    let mut paths = Map::new();
    for (path, doc) in documents(store) {
        let url = if base_url_independent {
            format!("/openapi/v3/{path}?hash={}", hash(&doc))
        } else {
            format!("/openapi/v3/{path}")
        };
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// The v3 document of `group_version_path` in `store` (see
/// [`super::v3_document`]), or `None` when it serves no such group-version.
pub fn v3_document(store: &Store, group_version_path: &str) -> Option<Bytes> {
    let p = super::document_path(group_version_path);
    documents(store)
        .into_iter()
        .find(|(path, _)| path == p)
        .map(|(_, doc)| doc)
}

/// The fields of `obj` that the kind does not declare, as strict decoding
/// names them (`.spec.foo`): under the structural schema of `custom` for a
/// custom resource, else under the vendored schema of the built-in kind.
pub fn unknown_fields(custom: Option<&Served>, def: &ResourceDef, obj: &Value) -> Vec<String> {
    let Some(c) = custom else {
        return super::schema::unknown_fields(def.group, def.version, def.kind, obj);
    };
    let mut out = Vec::new();
    walk_unknown(&c.schema, obj, String::new(), true, &mut out);
    out
}

fn walk_unknown(node: &Node, v: &Value, path: String, root: bool, out: &mut Vec<String>) {
    let preserve = node.raw.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    match v {
        Value::Object(m) => {
            if let Some(ap) = &node.additional {
                for (k, c) in m {
                    walk_unknown(ap, c, format!("{path}.{k}"), false, out);
                }
                return;
            }
            for (k, c) in m {
                if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match node.properties.iter().find(|(n, _)| n == k) {
                    Some((_, child)) => walk_unknown(child, c, format!("{path}.{k}"), false, out),
                    None if !preserve => out.push(format!("{path}.{k}")),
                    None => {}
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = &node.items {
                for (i, c) in a.iter().enumerate() {
                    walk_unknown(items, c, format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_document_lets_clients_validate_server_side() {
        let doc: Value = serde_json::from_slice(&APIEXTENSIONS).expect("json");
        let patch = &doc["paths"]["/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"]
            ["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "CustomResourceDefinition"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .expect("params")
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        let content = patch["requestBody"]["content"]
            .as_object()
            .expect("content");
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(!content.contains_key("application/strategic-merge-patch+json"));
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let mut refs = std::collections::BTreeSet::new();
        super::super::collect_refs(&doc, &mut refs);
        for r in &refs {
            assert!(schemas.contains_key(r), "dangling ref {r}");
        }
    }

    #[test]
    fn a_crd_group_reverses_into_definition_names() {
        assert_eq!(
            reversed_group("protection-manager.io"),
            "io.protection-manager"
        );
        assert_eq!(reversed_group("stable.example.com"), "com.example.stable");
    }
}

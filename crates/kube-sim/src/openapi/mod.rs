//! OpenAPI v2 and v3 documents served by kube-sim (`/openapi/v2`,
//! `/openapi/v3`, `/openapi/v3/<group-version path>`).
//!
//! The schemas are upstream's (Kubernetes v1.33.0, vendored, see
//! [`schema`]); the paths are generated for the resources kube-sim serves,
//! in upstream's shape (operation ids, `x-kubernetes-action`,
//! `x-kubernetes-group-version-kind`, the query parameters). kubectl and helm
//! read the v3 documents to find out whether PATCH supports
//! `fieldValidation` (client-go `queryParamVerifierV3`): it does here, so
//! they validate server-side (`fieldValidation=Strict`); the server uses
//! [`schema::unknown_fields`] to answer like upstream.
//!
//! Not served: the protobuf form of `/openapi/v2` (client-go's
//! `OpenAPISchema()` asks for protobuf; the server should answer that
//! `Accept` with 406), the deprecated `/watch/` paths, and subresources other
//! than `status`.

pub mod crd;
pub mod schema;

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use schema::{SCHEMA_KUBERNETES_VERSION, schemas};

/// A resource kube-sim serves, as the OpenAPI documents describe it.
#[derive(Debug, Clone, Copy)]
pub struct ServedResource {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// Upstream has a `status` subresource for it.
    pub status: bool,
}

/// The resources of issue 3, by group, version and plural in the order the
/// documents list them. Kind, scope and status subresource are those of
/// [`crate::resources::RESOURCES`].
const SERVED: &[(&str, &str, &[&str])] = &[
    (
        "",
        "v1",
        &[
            "namespaces",
            "pods",
            "services",
            "persistentvolumes",
            "persistentvolumeclaims",
            "secrets",
            "configmaps",
            "serviceaccounts",
            "endpoints",
            "events",
            "nodes",
        ],
    ),
    ("events.k8s.io", "v1", &["events"]),
    ("coordination.k8s.io", "v1", &["leases"]),
    ("apps", "v1", &["deployments", "replicasets"]),
    ("batch", "v1", &["jobs"]),
    (
        "storage.k8s.io",
        "v1",
        &["storageclasses", "volumeattributesclasses"],
    ),
    ("storage.k8s.io", "v1beta1", &["volumeattributesclasses"]),
    (
        "rbac.authorization.k8s.io",
        "v1",
        &[
            "roles",
            "rolebindings",
            "clusterroles",
            "clusterrolebindings",
        ],
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        &[
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
        ],
    ),
    (
        "admissionregistration.k8s.io",
        "v1beta1",
        &[
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
        ],
    ),
    ("policy", "v1", &["poddisruptionbudgets"]),
    ("networking.k8s.io", "v1", &["servicecidrs", "ipaddresses"]),
];

/// The resources of issue 3, with upstream scope and status subresources.
pub static SERVED_RESOURCES: LazyLock<Vec<ServedResource>> = LazyLock::new(|| {
    SERVED
        .iter()
        .flat_map(|(group, version, plurals)| plurals.iter().map(move |p| (*group, *version, *p)))
        .map(|(group, version, plural)| {
            let id = crate::resources::find(group, version, plural)
                .unwrap_or_else(|| panic!("{group}/{version} {plural} is a built-in resource"));
            let d = crate::resources::def(id);
            ServedResource {
                group: d.group,
                version: d.version,
                kind: d.kind,
                plural: d.resource,
                namespaced: d.namespaced,
                status: d.has_status,
            }
        })
        .collect()
});

const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
const PRODUCES: [&str; 3] = [
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];

/// `/api/v1` or `/apis/apps/v1`.
fn gv_prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// The group as operation ids and tags name it: `core`, `apps`,
/// `rbac.authorization`.
fn short_group(group: &str) -> &str {
    if group.is_empty() {
        "core"
    } else {
        group.trim_end_matches(".k8s.io")
    }
}

/// Appends `s` with its first letter upper-case.
fn push_capitalized(out: &mut String, s: &str) {
    let mut c = s.chars();
    if let Some(f) = c.next() {
        out.extend(f.to_uppercase());
        out.push_str(c.as_str());
    }
}

/// Operation-id fragment: `CoreV1`, `AppsV1`, `RbacAuthorizationV1`.
fn gv_camel(group: &str, version: &str) -> String {
    let mut out = String::new();
    for part in short_group(group).split('.') {
        push_capitalized(&mut out, part);
    }
    push_capitalized(&mut out, version);
    out
}

/// Tag: `core_v1`, `rbacAuthorization_v1`.
fn gv_tag(group: &str, version: &str) -> String {
    let mut out = String::new();
    for (i, part) in short_group(group).split('.').enumerate() {
        if i == 0 {
            out.push_str(part);
        } else {
            push_capitalized(&mut out, part);
        }
    }
    format!("{out}_{version}")
}

fn def_ref(group: &str, version: &str, kind: &str) -> Value {
    let name = schemas()
        .definition_name(group, version, kind)
        .unwrap_or(kind);
    json!({"$ref": format!("#/definitions/{name}")})
}

fn q(name: &str, ty: &str, description: &str) -> Value {
    json!({"description": description, "in": "query", "name": name, "type": ty, "uniqueItems": true})
}

fn p_dry_run() -> Value {
    q(
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
    )
}
fn p_field_manager(patch: bool) -> Value {
    if patch {
        q(
            "fieldManager",
            "string",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint. This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).",
        )
    } else {
        q(
            "fieldManager",
            "string",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
        )
    }
}
fn p_field_validation() -> Value {
    q(
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
    )
}
fn p_body(schema: Value) -> Value {
    json!({"in": "body", "name": "body", "required": true, "schema": schema})
}
fn list_params() -> Vec<Value> {
    vec![
        q(
            "allowWatchBookmarks",
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
        ),
        q(
            "continue",
            "string",
            "The continue option should be set when retrieving more results from the server.",
        ),
        q(
            "fieldSelector",
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        q(
            "labelSelector",
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        q(
            "limit",
            "integer",
            "limit is a maximum number of responses to return for a list call.",
        ),
        q(
            "resourceVersion",
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        q(
            "resourceVersionMatch",
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        q(
            "sendInitialEvents",
            "boolean",
            "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection.",
        ),
        q(
            "timeoutSeconds",
            "integer",
            "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
        ),
        q(
            "watch",
            "boolean",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
        ),
    ]
}
fn delete_params() -> Vec<Value> {
    vec![
        p_body(json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"})),
        p_dry_run(),
        q(
            "gracePeriodSeconds",
            "integer",
            "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
        ),
        q(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            "boolean",
            "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error.",
        ),
        q(
            "orphanDependents",
            "boolean",
            "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
        ),
        q(
            "propagationPolicy",
            "string",
            "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
        ),
    ]
}
fn path_param(name: &str, description: &str) -> Value {
    json!({"description": description, "in": "path", "name": name, "required": true, "type": "string", "uniqueItems": true})
}
fn p_pretty() -> Value {
    q(
        "pretty",
        "string",
        "If 'true', then the output is pretty printed. Defaults to 'false' unless the user agent indicates a browser or command-line HTTP client (curl and wget).",
    )
}

struct OpSpec<'a> {
    res: &'a ServedResource,
    action: &'static str,
    op_id: String,
    description: String,
    params: Vec<Value>,
    consumes: Vec<&'static str>,
    responses: Value,
}

fn operation(o: OpSpec<'_>) -> Value {
    let res = o.res;
    json!({
        "consumes": o.consumes,
        "description": o.description,
        "operationId": o.op_id,
        "parameters": o.params,
        "produces": PRODUCES,
        "responses": o.responses,
        "schemes": ["https"],
        "tags": [gv_tag(res.group, res.version)],
        "x-kubernetes-action": o.action,
        "x-kubernetes-group-version-kind": {"group": res.group, "kind": res.kind, "version": res.version},
    })
}

fn ok(schema: Value) -> Value {
    json!({"description": "OK", "schema": schema})
}

/// The v2 `paths` for one resource.
fn resource_paths(res: &ServedResource, paths: &mut Map<String, Value>) {
    let gv = gv_camel(res.group, res.version);
    let obj = def_ref(res.group, res.version, res.kind);
    let list = def_ref(res.group, res.version, &format!("{}List", res.kind));
    let status = json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Status"});
    let patch_schema = json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"});
    let scope = if res.namespaced { "Namespaced" } else { "" };
    let prefix = gv_prefix(res.group, res.version);
    let collection = if res.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", res.plural)
    } else {
        format!("{prefix}/{}", res.plural)
    };
    let kind = res.kind;
    let unauthorized = json!({"description": "Unauthorized"});
    let mut scope_params = Vec::new();
    if res.namespaced {
        scope_params.push(path_param(
            "namespace",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    scope_params.push(p_pretty());

    let mut coll = Map::new();
    coll.insert(
        "delete".into(),
        operation(OpSpec {
            res,
            action: "deletecollection",
            op_id: format!("delete{gv}Collection{scope}{kind}"),
            description: format!("delete collection of {kind}"),
            params: {
                let mut p = delete_params();
                p.extend(
                    list_params()
                        .into_iter()
                        .filter(|x| x["name"] != "allowWatchBookmarks" && x["name"] != "watch"),
                );
                p
            },
            consumes: vec!["*/*"],
            responses: json!({"200": ok(status.clone()), "401": unauthorized}),
        }),
    );
    let list_op = |op_id: String| {
        operation(OpSpec {
            res,
            action: "list",
            op_id,
            description: format!("list or watch objects of kind {kind}"),
            params: list_params(),
            consumes: vec!["*/*"],
            responses: json!({"200": ok(list.clone()), "401": unauthorized}),
        })
    };
    coll.insert("get".into(), list_op(format!("list{gv}{scope}{kind}")));
    coll.insert("parameters".into(), Value::Array(scope_params.clone()));
    coll.insert("post".into(), operation(OpSpec {
        res, action: "post",
        op_id: format!("create{gv}{scope}{kind}"),
        description: format!("create {}", article(kind)),
        params: vec![p_body(obj.clone()), p_dry_run(), p_field_manager(false), p_field_validation()],
        consumes: vec!["*/*"],
        responses: json!({"200": ok(obj.clone()), "201": {"description": "Created", "schema": obj.clone()},
                          "202": {"description": "Accepted", "schema": obj.clone()}, "401": unauthorized}),
    }));
    paths.insert(collection.clone(), Value::Object(coll));

    let mut item_params = vec![path_param("name", &format!("name of the {kind}"))];
    item_params.extend(scope_params.clone());
    let mut item = Map::new();
    item.insert("delete".into(), operation(OpSpec {
        res, action: "delete",
        op_id: format!("delete{gv}{scope}{kind}"),
        description: format!("delete {}", article(kind)),
        params: delete_params(),
        consumes: vec!["*/*"],
        responses: json!({"200": ok(status.clone()), "202": {"description": "Accepted", "schema": status.clone()}, "401": unauthorized}),
    }));
    let rw = |sub: &str, item: &mut Map<String, Value>| {
        let (suffix, what) = if sub.is_empty() {
            (String::new(), format!("the specified {kind}"))
        } else {
            (
                "Status".to_string(),
                format!("status of the specified {kind}"),
            )
        };
        item.insert(
            "get".into(),
            operation(OpSpec {
                res,
                action: "get",
                op_id: format!("read{gv}{scope}{kind}{suffix}"),
                description: format!("read {what}"),
                params: vec![],
                consumes: vec!["*/*"],
                responses: json!({"200": ok(obj.clone()), "401": unauthorized}),
            }),
        );
        item.insert("patch".into(), operation(OpSpec {
            res, action: "patch",
            op_id: format!("patch{gv}{scope}{kind}{suffix}"),
            description: format!("partially update {what}"),
            params: vec![
                p_body(patch_schema.clone()), p_dry_run(), p_field_manager(true), p_field_validation(),
                q("force", "boolean", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests."),
            ],
            consumes: PATCH_TYPES.to_vec(),
            responses: json!({"200": ok(obj.clone()), "201": {"description": "Created", "schema": obj.clone()}, "401": unauthorized}),
        }));
        item.insert("put".into(), operation(OpSpec {
            res, action: "put",
            op_id: format!("replace{gv}{scope}{kind}{suffix}"),
            description: format!("replace {what}"),
            params: vec![p_body(obj.clone()), p_dry_run(), p_field_manager(false), p_field_validation()],
            consumes: vec!["*/*"],
            responses: json!({"200": ok(obj.clone()), "201": {"description": "Created", "schema": obj.clone()}, "401": unauthorized}),
        }));
    };
    rw("", &mut item);
    item.insert("parameters".into(), Value::Array(item_params.clone()));
    paths.insert(format!("{collection}/{{name}}"), Value::Object(item));
    if res.status {
        let mut st = Map::new();
        rw("status", &mut st);
        st.insert("parameters".into(), Value::Array(item_params));
        paths.insert(format!("{collection}/{{name}}/status"), Value::Object(st));
    }
    if res.namespaced {
        let mut all = Map::new();
        all.insert(
            "get".into(),
            list_op(format!("list{gv}{kind}ForAllNamespaces")),
        );
        all.insert("parameters".into(), json!([p_pretty()]));
        paths.insert(format!("{prefix}/{}", res.plural), Value::Object(all));
    }
}

fn article(kind: &str) -> String {
    match kind.chars().next() {
        Some('A' | 'E' | 'I' | 'O' | 'U') => format!("an {kind}"),
        _ => format!("a {kind}"),
    }
}

fn collect_refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.insert(r.rsplit('/').next().unwrap_or(r).to_string());
            }
            m.values().for_each(|c| collect_refs(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| collect_refs(c, out)),
        _ => {}
    }
}

/// Definitions reachable from `roots`.
fn closure(roots: BTreeSet<String>) -> BTreeSet<String> {
    let defs = schemas().definitions();
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = roots.into_iter().collect();
    while let Some(n) = todo.pop() {
        if !seen.insert(n.clone()) {
            continue;
        }
        if let Some(d) = defs.get(&n) {
            let mut refs = BTreeSet::new();
            collect_refs(d, &mut refs);
            todo.extend(refs.into_iter().filter(|r| !seen.contains(r)));
        }
    }
    seen
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": SCHEMA_KUBERNETES_VERSION})
}

fn build_v2() -> Value {
    let mut paths = Map::new();
    for res in SERVED_RESOURCES.iter() {
        resource_paths(res, &mut paths);
    }
    json!({
        "definitions": schemas().definitions(),
        "info": info(),
        "paths": paths,
        "security": [{"BearerToken": []}],
        "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "in": "header", "name": "authorization", "type": "apiKey"}},
        "swagger": "2.0",
    })
}

/// Written once. Upstream's v2 handler does not HTML-escape (`<`, `>`,
/// `&` stay raw), unlike its v3 documents.
static V2: LazyLock<Vec<u8>> = LazyLock::new(|| build_v2().to_string().into_bytes());

/// The OpenAPI v2 document (JSON bytes) for `GET /openapi/v2` with
/// `Accept: application/json`.
pub fn v2_document() -> &'static [u8] {
    &V2
}

/// Rewrites v2 refs and bodies into their v3 form.
fn to_v3_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, c) in m {
                if let (true, Some(s)) = (k == "$ref", c.as_str()) {
                    let v3_ref = s.replace("#/definitions/", "#/components/schemas/");
                    out.insert(k.clone(), json!(v3_ref));
                    continue;
                }
                out.insert(k.clone(), to_v3_schema(c));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_v3_schema).collect()),
        other => other.clone(),
    }
}

fn to_v3_operation(op: &Value) -> Value {
    let mut out = Map::new();
    let consumes: Vec<String> = op["consumes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for (k, v) in op.as_object().into_iter().flatten() {
        match k.as_str() {
            "consumes" | "produces" | "schemes" => {}
            "parameters" => {
                let mut params = Vec::new();
                for p in v.as_array().into_iter().flatten() {
                    if p["in"] == "body" {
                        let schema = to_v3_schema(&p["schema"]);
                        let content: Map<String, Value> = consumes
                            .iter()
                            .map(|c| (c.clone(), json!({"schema": schema.clone()})))
                            .collect();
                        out.insert(
                            "requestBody".into(),
                            json!({"content": content, "required": true}),
                        );
                        continue;
                    }
                    params.push(v3_param(p));
                }
                out.insert("parameters".into(), Value::Array(params));
            }
            "responses" => {
                let mut rs = Map::new();
                for (code, r) in v.as_object().into_iter().flatten() {
                    let mut resp = Map::new();
                    resp.insert("description".into(), r["description"].clone());
                    if let Some(s) = r.get("schema") {
                        let s = to_v3_schema(s);
                        let content: Map<String, Value> = PRODUCES
                            .iter()
                            .map(|c| (c.to_string(), json!({"schema": s.clone()})))
                            .collect();
                        resp.insert("content".into(), Value::Object(content));
                    }
                    rs.insert(code.clone(), Value::Object(resp));
                }
                out.insert("responses".into(), Value::Object(rs));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

fn v3_param(p: &Value) -> Value {
    let mut schema = Map::new();
    schema.insert("type".into(), p["type"].clone());
    if p.get("uniqueItems").is_some() {
        schema.insert("uniqueItems".into(), json!(true));
    }
    let mut out = Map::new();
    out.insert("description".into(), p["description"].clone());
    out.insert("in".into(), p["in"].clone());
    out.insert("name".into(), p["name"].clone());
    if p.get("required").is_some() {
        out.insert("required".into(), json!(true));
    }
    out.insert("schema".into(), Value::Object(schema));
    Value::Object(out)
}

fn build_v3(group: &str, version: &str) -> Option<Value> {
    let served: Vec<ServedResource> = SERVED_RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .copied()
        .collect();
    (!served.is_empty()).then(|| v3_for(&served, &Map::new()))
}

/// The v3 document of `served` (one group-version): their paths, and the
/// vendored definitions they reach plus `extra` ones (full definition name
/// to v2 schema; a resource whose kind has no vendored definition refers to
/// `extra[<kind>]`/`extra[<kind>List]` by the name ending in `.<kind>`).
fn v3_for(served: &[ServedResource], extra: &Map<String, Value>) -> Value {
    let mut v2_paths = Map::new();
    for res in served {
        resource_paths(res, &mut v2_paths);
    }
    let mut v2_paths = Value::Object(v2_paths);
    for name in extra.keys() {
        let kind = name.rsplit('.').next().unwrap_or(name);
        rename_ref(
            &mut v2_paths,
            &format!("#/definitions/{kind}"),
            &format!("#/definitions/{name}"),
        );
    }
    let mut paths = Map::new();
    for (path, item) in v2_paths.as_object().into_iter().flatten() {
        let mut out = Map::new();
        for (k, v) in item.as_object().into_iter().flatten() {
            if k == "parameters" {
                out.insert(
                    k.clone(),
                    Value::Array(v.as_array().into_iter().flatten().map(v3_param).collect()),
                );
            } else {
                out.insert(k.clone(), to_v3_operation(v));
            }
        }
        paths.insert(path.clone(), Value::Object(out));
    }
    let mut roots = BTreeSet::new();
    collect_refs(&v2_paths, &mut roots);
    for d in extra.values() {
        collect_refs(d, &mut roots);
    }
    let defs = schemas().definitions();
    let mut components: Map<String, Value> = closure(roots)
        .into_iter()
        .filter_map(|n| defs.get(&n).map(|d| (n, to_v3_schema(d))))
        .collect();
    for (n, d) in extra {
        components.insert(n.clone(), to_v3_schema(d));
    }
    json!({
        "components": {
            "schemas": components,
            "securitySchemes": {"BearerToken": {"description": "Bearer Token authentication", "in": "header", "name": "authorization", "type": "apiKey"}},
        },
        "info": info(),
        "openapi": "3.0.0",
        "paths": paths,
    })
}

/// Replaces every `$ref` equal to `from` with `to`.
fn rename_ref(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::Object(m) => {
            if m.get("$ref").and_then(Value::as_str) == Some(from) {
                m.insert("$ref".into(), json!(to));
            }
            m.values_mut().for_each(|c| rename_ref(c, from, to));
        }
        Value::Array(a) => a.iter_mut().for_each(|c| rename_ref(c, from, to)),
        _ => {}
    }
}

/// (`api/v1` or `apis/<group>/<version>`, document bytes) for every served
/// group-version, written once as Go's encoding/json writes them (`<`, `>`,
/// `&` as `\u003c`, `\u003e`, `\u0026`), as upstream's v3 handler does.
static V3: LazyLock<Vec<(String, Vec<u8>)>> = LazyLock::new(|| {
    let gvs: BTreeSet<(&str, &str)> = SERVED_RESOURCES
        .iter()
        .map(|r| (r.group, r.version))
        .collect();
    gvs.into_iter()
        .filter_map(|(g, v)| {
            let path = gv_prefix(g, v).trim_start_matches('/').to_string();
            build_v3(g, v).map(|doc| (path, crate::gojson::to_vec(&doc)))
        })
        .collect()
});

/// An opaque, stable content hash (upstream uses SHA-512; clients only
/// compare it).
fn hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016X}")
}

/// The `/openapi/v3` discovery index: `{"paths": {"api/v1":
/// {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}, ...}}`. With
/// `base_url_independent` the URLs carry upstream's `?hash=` query (clients
/// then cache the documents; the server must accept and ignore `hash`);
/// without it they are the plain document paths.
pub fn v3_index(base_url_independent: bool) -> Value {
    let mut paths = Map::new();
    for (path, doc) in V3.iter() {
        let url = if base_url_independent {
            format!("/openapi/v3/{path}?hash={}", hash(doc))
        } else {
            format!("/openapi/v3/{path}")
        };
        paths.insert(path.clone(), json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// `api/v1` or `apis/<group>/<version>` of a document request path (a
/// leading `/`, an `openapi/v3/` prefix and a `?hash=` query dropped).
pub(crate) fn document_path(group_version_path: &str) -> &str {
    let p = group_version_path
        .split('?')
        .next()
        .unwrap_or("")
        .trim_matches('/');
    p.strip_prefix("openapi/v3/").unwrap_or(p)
}

/// The OpenAPI v3 document for `group_version_path` (`api/v1`,
/// `apis/apps/v1`; a leading `/` and a `?hash=` query are ignored), or
/// `None` when kube-sim serves no such group-version.
pub fn v3_document(group_version_path: &str) -> Option<&'static [u8]> {
    let p = document_path(group_version_path);
    V3.iter()
        .find(|(path, _)| path == p)
        .map(|(_, doc)| doc.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v3(path: &str) -> Value {
        serde_json::from_slice(v3_document(path).expect("served")).expect("json")
    }

    #[test]
    fn v2_is_valid_json_with_upstream_definitions_and_paths() {
        let doc: Value = serde_json::from_slice(v2_document()).expect("json");
        assert_eq!(doc["swagger"], "2.0");
        let gvk =
            &doc["definitions"]["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"];
        assert_eq!(
            gvk,
            &json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
        );
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["operationId"], "patchAppsV1NamespacedDeployment");
        assert_eq!(patch["x-kubernetes-action"], "patch");
        assert_eq!(patch["consumes"], json!(PATCH_TYPES));
        assert_eq!(
            doc["paths"]["/api/v1/persistentvolumes/{name}/status"]["put"]["operationId"],
            "replaceCoreV1PersistentVolumeStatus"
        );
        assert_eq!(
            doc["paths"]["/apis/rbac.authorization.k8s.io/v1/clusterroles"]["get"]["operationId"],
            "listRbacAuthorizationV1ClusterRole"
        );
        assert_eq!(
            doc["paths"]["/api/v1/pods"]["get"]["operationId"],
            "listCoreV1PodForAllNamespaces"
        );
    }

    #[test]
    fn v3_index_lists_every_served_group_version() {
        let idx = v3_index(true);
        let paths = idx["paths"].as_object().expect("paths");
        let mut keys: Vec<&str> = paths.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            vec![
                "api/v1",
                "apis/admissionregistration.k8s.io/v1",
                "apis/admissionregistration.k8s.io/v1beta1",
                "apis/apps/v1",
                "apis/batch/v1",
                "apis/coordination.k8s.io/v1",
                "apis/events.k8s.io/v1",
                "apis/networking.k8s.io/v1",
                "apis/policy/v1",
                "apis/rbac.authorization.k8s.io/v1",
                "apis/storage.k8s.io/v1",
                "apis/storage.k8s.io/v1beta1",
            ]
        );
        let url = paths["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .expect("url");
        assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="), "{url}");
        assert_eq!(
            v3_index(false)["paths"]["api/v1"]["serverRelativeURL"],
            "/openapi/v3/api/v1"
        );
        assert!(v3_document(url).is_some(), "the index URL resolves");
        assert!(v3_document("apis/networking.k8s.io/v1beta1").is_none());
    }

    /// client-go's queryParamVerifierV3: a PATCH operation carrying the
    /// kind's x-kubernetes-group-version-kind must list `fieldValidation` as a
    /// query parameter, or kubectl/helm fall back to client-side validation.
    #[test]
    fn every_patch_operation_supports_field_validation_for_its_kind() {
        for res in SERVED_RESOURCES.iter() {
            let path = gv_prefix(res.group, res.version)
                .trim_start_matches('/')
                .to_string();
            let doc = v3(&path);
            let mut patch_ops = 0;
            for (_, item) in doc["paths"].as_object().expect("paths") {
                let Some(op) = item.get("patch") else {
                    continue;
                };
                let gvk = &op["x-kubernetes-group-version-kind"];
                if gvk["kind"] != res.kind {
                    continue;
                }
                patch_ops += 1;
                assert_eq!(gvk["group"], res.group);
                let params = op["parameters"].as_array().expect("params");
                assert!(
                    params
                        .iter()
                        .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
                    "{}",
                    res.kind
                );
                assert!(op["requestBody"]["content"]["application/apply-patch+yaml"].is_object());
            }
            assert_eq!(
                patch_ops,
                if res.status { 2 } else { 1 },
                "{} {}",
                path,
                res.kind
            );
        }
    }

    #[test]
    fn v3_components_are_closed_and_keep_list_extensions() {
        let doc = v3("api/v1");
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let mut refs = BTreeSet::new();
        collect_refs(&doc, &mut refs);
        for r in &refs {
            assert!(schemas.contains_key(r), "dangling ref {r}");
        }
        let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-list-type"], "map");
        assert_eq!(
            containers["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Container"
        );
        // apps/v1 does not carry core-only kinds it does not reference.
        let apps = v3("apis/apps/v1");
        assert!(
            apps["components"]["schemas"]
                .get("io.k8s.api.core.v1.Service")
                .is_none()
        );
        assert!(
            apps["components"]["schemas"]
                .get("io.k8s.api.apps.v1.Deployment")
                .is_some()
        );
    }

    #[test]
    fn operation_id_fragments_follow_upstream() {
        assert_eq!(gv_camel("", "v1"), "CoreV1");
        assert_eq!(
            gv_camel("rbac.authorization.k8s.io", "v1"),
            "RbacAuthorizationV1"
        );
        assert_eq!(gv_camel("events.k8s.io", "v1"), "EventsV1");
        assert_eq!(
            gv_tag("rbac.authorization.k8s.io", "v1"),
            "rbacAuthorization_v1"
        );
        assert_eq!(gv_tag("", "v1"), "core_v1");
    }
}

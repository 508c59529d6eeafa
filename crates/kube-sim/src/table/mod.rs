//! `meta.k8s.io/v1` Table rendering (server-side printing for `kubectl get`),
//! following kubernetes `pkg/printers/internalversion/printers.go` (the
//! server always prints "wide": clients hide priority-1 columns) and the
//! apiserver's default table convertor (`Name`, `Created At`) for kinds
//! without a printer. Column descriptions come from the vendored schema, as
//! upstream takes them from the types' swagger docs.

use serde_json::{Map, Value, json};

use crate::openapi::schema::schemas;

/// Renders `objects` as a `meta.k8s.io/v1` Table for
/// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
/// `include_object` is `None`, `Metadata` (also the default for `""`) or
/// `Object`; check it first with [`validate_include_object`].
/// `list_meta` becomes the Table's `metadata` (resourceVersion, continue).
pub fn to_table(
    resource: &str,
    group: &str,
    objects: &[&Value],
    include_object: &str,
    list_meta: Value,
    now: jiff::Timestamp,
) -> Value {
    if let Some(cols) = crate::crd::printer_columns(group, resource) {
        return custom_table(&cols, objects, include_object, list_meta, now);
    }
    let printer = printer_for(resource, group);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let (cells, conditions) = (printer.row)(o, now);
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            if let Some(c) = conditions {
                row.insert("conditions".into(), c);
            }
            row.insert("object".into(), row_object(o, include_object));
            Value::Object(row)
        })
        .collect();
    let columns: Vec<Value> = printer.columns.iter().map(Column::to_json).collect();
    table(list_meta, columns, rows)
}

/// The table of a custom resource: `Name` and the CRD's printer columns
/// (apiextensions-apiserver `tableconvertor`).
fn custom_table(
    cols: &[Value],
    objects: &[&Value],
    include_object: &str,
    list_meta: Value,
    now: jiff::Timestamp,
) -> Value {
    let mut columns = vec![NAME.to_json()];
    for c in cols {
        // The CRD table convertor's description of an undescribed column.
        let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
        let description = c
            .get("description")
            .filter(|d| d.as_str().is_some_and(|d| !d.is_empty()))
            .cloned()
            .unwrap_or_else(|| {
                json!(format!(
                    "Custom resource definition column (in JSONPath format): {path}"
                ))
            });
        columns.push(json!({
            "name": c.get("name").cloned().unwrap_or(json!("")),
            "type": c.get("type").cloned().unwrap_or(json!("string")),
            "format": c.get("format").cloned().unwrap_or(json!("")),
            "description": description,
            "priority": c.get("priority").cloned().unwrap_or(json!(0)),
        }));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = vec![name(o)];
            for c in cols {
                let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
                let ty = c.get("type").and_then(Value::as_str).unwrap_or("string");
                let v = crate::crd::column_value(o, path);
                // The CRD table convertor prints dates as ages.
                let age = (ty == "date")
                    .then(|| v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()))
                    .flatten()
                    .map(|t| json!(human_duration(now.as_second() - t.as_second())));
                cells.push(age.unwrap_or_else(|| crate::crd::column_cell(v, ty)));
            }
            json!({"cells": cells, "object": row_object(o, include_object)})
        })
        .collect();
    table(list_meta, columns, rows)
}

/// The `meta.k8s.io/v1` Table of `columns` and `rows`.
fn table(list_meta: Value, columns: Vec<Value>, rows: Vec<Value>) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// upstream answers an unknown `includeObject` with 400 and this message.
pub fn validate_include_object(include_object: &str) -> Result<(), String> {
    match include_object {
        "" | "None" | "Metadata" | "Object" => Ok(()),
        other => Err(format!("unrecognized includeObject value: {other:?}")),
    }
}

fn row_object(o: &Value, include_object: &str) -> Value {
    match include_object {
        "None" => Value::Null,
        "Object" => o.clone(),
        _ => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

struct Column {
    name: &'static str,
    ty: &'static str,
    format: &'static str,
    description: Desc,
    priority: i32,
}

impl Column {
    fn to_json(&self) -> Value {
        json!({"name": self.name, "type": self.ty, "format": self.format, "description": self.description.text(), "priority": self.priority})
    }
}

/// Where a column's description comes from.
#[derive(Clone, Copy)]
enum Desc {
    /// The swagger description of a definition's field (see [`doc`]).
    Doc(&'static str, &'static str),
    Text(&'static str),
}
use Desc::{Doc, Text};

mod admission;

impl Desc {
    fn text(self) -> String {
        match self {
            Doc(definition, field) => doc(definition, field),
            Text(t) => t.to_string(),
        }
    }
}

type RowFn = fn(&Value, jiff::Timestamp) -> (Vec<Value>, Option<Value>);

struct Printer {
    columns: &'static [Column],
    row: RowFn,
}

fn printer_for(resource: &str, group: &str) -> Printer {
    let p = |columns: &'static [Column], row: RowFn| Printer { columns, row };
    match (group, resource) {
        ("", "pods") => p(POD_COLUMNS, pod_row),
        ("", "services") => p(SERVICE_COLUMNS, service_row),
        ("", "persistentvolumes") => p(PV_COLUMNS, pv_row),
        ("", "persistentvolumeclaims") => p(PVC_COLUMNS, pvc_row),
        ("", "namespaces") => p(NAMESPACE_COLUMNS, namespace_row),
        ("", "nodes") => p(NODE_COLUMNS, node_row),
        ("", "events") | ("events.k8s.io", "events") => p(EVENT_COLUMNS, event_row),
        ("", "configmaps") => p(CONFIGMAP_COLUMNS, configmap_row),
        ("", "secrets") => p(SECRET_COLUMNS, secret_row),
        ("", "serviceaccounts") => p(SERVICEACCOUNT_COLUMNS, serviceaccount_row),
        ("", "endpoints") => p(ENDPOINTS_COLUMNS, endpoints_row),
        ("apps", "deployments") => p(DEPLOYMENT_COLUMNS, deployment_row),
        ("apps", "replicasets") => p(REPLICASET_COLUMNS, replicaset_row),
        ("batch", "jobs") => p(JOB_COLUMNS, job_row),
        ("storage.k8s.io", "storageclasses") => p(STORAGECLASS_COLUMNS, storageclass_row),
        ("coordination.k8s.io", "leases") => p(LEASE_COLUMNS, lease_row),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            p(BINDING_COLUMNS, binding_row)
        }
        ("policy", "poddisruptionbudgets") => p(PDB_COLUMNS, pdb_row),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            p(admission::VAP_COLUMNS, admission::vap_row)
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            p(admission::VAP_BINDING_COLUMNS, admission::vap_binding_row)
        }
        ("networking.k8s.io", "servicecidrs") => p(SERVICECIDR_COLUMNS, servicecidr_row),
        ("networking.k8s.io", "ipaddresses") => p(IPADDRESS_COLUMNS, ipaddress_row),
        // roles and clusterroles print like the default convertor upstream.
        _ => p(DEFAULT_COLUMNS, default_row),
    }
}

// ---------------------------------------------------------------------------
// helpers

/// The swagger description of `definition.field`, as upstream's
/// `SwaggerDoc()` gives it.
fn doc(definition: &str, field: &str) -> String {
    schemas()
        .definitions()
        .get(definition)
        .and_then(|d| d.pointer(&format!("/properties/{field}/description")))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

const fn col(name: &'static str, description: Desc) -> Column {
    Column {
        name,
        ty: "string",
        format: "",
        description,
        priority: 0,
    }
}
const fn wide(name: &'static str, description: Desc) -> Column {
    Column {
        priority: 1,
        ..col(name, description)
    }
}
const fn int_col(name: &'static str, description: Desc) -> Column {
    Column {
        ty: "integer",
        ..col(name, description)
    }
}
const NAME: Column = Column {
    format: "name",
    ..col("Name", Doc(OBJECT_META, "name"))
};
const AGE: Column = col("Age", Doc(OBJECT_META, "creationTimestamp"));
/// The wide columns of [`container_cells`].
const CONTAINERS: Column = wide(
    "Containers",
    Text("Names of each container in the template."),
);
const IMAGES: Column = wide(
    "Images",
    Text("Images referenced by each container in the template."),
);

fn s<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}
fn i(o: &Value, ptr: &str) -> i64 {
    o.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}
fn or_none(v: &str) -> String {
    or_else("<none>", v)
}
/// `v`, or `placeholder` where it is empty.
fn or_else(placeholder: &str, v: &str) -> String {
    if v.is_empty() {
        placeholder.into()
    } else {
        v.to_string()
    }
}
fn name(o: &Value) -> Value {
    json!(s(o, "/metadata/name"))
}
fn age(o: &Value, now: jiff::Timestamp) -> Value {
    json!(since(s(o, "/metadata/creationTimestamp"), now))
}
fn deleting(o: &Value) -> bool {
    o.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}
/// `status.phase`, "Terminating" while the object is being deleted.
fn phase_or_terminating(o: &Value) -> &str {
    if deleting(o) {
        "Terminating"
    } else {
        s(o, "/status/phase")
    }
}

/// `translateTimestampSince`: `<unknown>` for a zero time.
fn since(ts: &str, now: jiff::Timestamp) -> String {
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => human_duration(now.as_second() - t.as_second()),
        Err(_) => "<unknown>".into(),
    }
}

/// k8s.io/apimachinery `duration.HumanDuration`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let sec = seconds % 60;
        return if sec == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{sec}s")
        };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn selector_string(m: Option<&Value>) -> String {
    let Some(Value::Object(m)) = m else {
        return "<none>".into();
    };
    if m.is_empty() {
        return "<none>".into();
    }
    let mut parts: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    parts.sort();
    parts.join(",")
}

/// `metav1.FormatLabelSelector`.
fn label_selector_string(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|v| !v.is_null()) else {
        return "<none>".into();
    };
    let mut parts = Vec::new();
    if let Some(Value::Object(ml)) = sel.get("matchLabels") {
        let mut l: Vec<String> = ml
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        l.sort();
        parts.extend(l);
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = s(e, "/key");
        let vals: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match s(e, "/operator") {
            "In" => parts.push(format!("{key} in ({})", vals.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", vals.join(","))),
            "Exists" => parts.push(key.to_string()),
            "DoesNotExist" => parts.push(format!("!{key}")),
            op => parts.push(format!("{key} {op} ({})", vals.join(","))),
        }
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

// ---------------------------------------------------------------------------
// default convertor

const DEFAULT_COLUMNS: &[Column] = &[
    NAME,
    Column {
        ty: "date",
        ..col("Created At", Doc(OBJECT_META, "creationTimestamp"))
    },
];
fn default_row(o: &Value, _now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let created = s(o, "/metadata/creationTimestamp")
        .parse::<jiff::Timestamp>()
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "0001-01-01T00:00:00Z".into());
    (vec![name(o), json!(created)], None)
}

// ---------------------------------------------------------------------------
// pods

const POD_SPEC: &str = "io.k8s.api.core.v1.PodSpec";
const POD_STATUS: &str = "io.k8s.api.core.v1.PodStatus";
const POD_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Ready",
        Text("The aggregate readiness state of this pod for accepting traffic."),
    ),
    col(
        "Status",
        Text("The aggregate status of the containers in this pod."),
    ),
    col(
        "Restarts",
        Text(
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        ),
    ),
    AGE,
    wide("IP", Doc(POD_STATUS, "podIP")),
    wide("Node", Doc(POD_SPEC, "nodeName")),
    wide("Nominated Node", Doc(POD_STATUS, "nominatedNodeName")),
    wide("Readiness Gates", Doc(POD_SPEC, "readinessGates")),
];

fn pod_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let phase = s(o, "/status/phase");
    let mut reason = if s(o, "/status/reason").is_empty() {
        phase.to_string()
    } else {
        s(o, "/status/reason").to_string()
    };
    let conditions = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let total = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    let mut ready = 0;
    let mut restarts = 0i64;
    let mut last_restart: Option<jiff::Timestamp> = None;
    let mut has_running = false;
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in statuses.iter().rev() {
        restarts += i(c, "/restartCount");
        let finished = s(c, "/lastState/terminated/finishedAt")
            .parse::<jiff::Timestamp>()
            .ok();
        if let Some(t) = finished.filter(|t| last_restart.is_none_or(|l| l < *t)) {
            last_restart = Some(t);
        }
        if !s(c, "/state/waiting/reason").is_empty() {
            reason = s(c, "/state/waiting/reason").to_string();
        } else if !s(c, "/state/terminated/reason").is_empty() {
            reason = s(c, "/state/terminated/reason").to_string();
        } else if c.pointer("/state/terminated").is_some() {
            let signal = i(c, "/state/terminated/signal");
            reason = if signal != 0 {
                format!("Signal:{signal}")
            } else {
                format!("ExitCode:{}", i(c, "/state/terminated/exitCode"))
            };
        } else if c["ready"] == true && c.pointer("/state/running").is_some() {
            has_running = true;
            ready += 1;
        }
    }
    if reason == "Completed" && has_running {
        let pod_ready = conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        reason = if pod_ready {
            "Running".into()
        } else {
            "NotReady".into()
        };
    }
    let terminal = phase == "Succeeded" || phase == "Failed";
    if deleting(o) && s(o, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting(o) && !terminal {
        reason = "Terminating".into();
    }
    let restarts_str = match last_restart {
        Some(t) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.as_second() - t.as_second())
        ),
        _ => restarts.to_string(),
    };
    let ip = o
        .pointer("/status/podIPs/0/ip")
        .and_then(Value::as_str)
        .unwrap_or("");
    let gates = o
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let gates_str = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let t = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{t}/{}", gates.len())
    };
    let row_conditions = match phase {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };
    (
        vec![
            name(o),
            json!(format!("{ready}/{total}")),
            json!(reason),
            json!(restarts_str),
            age(o, now),
            json!(or_none(ip)),
            json!(or_none(s(o, "/spec/nodeName"))),
            json!(or_none(s(o, "/status/nominatedNodeName"))),
            json!(gates_str),
        ],
        row_conditions,
    )
}

// ---------------------------------------------------------------------------
// services

const SERVICE_SPEC: &str = "io.k8s.api.core.v1.ServiceSpec";
const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    col("Type", Doc(SERVICE_SPEC, "type")),
    col("Cluster-IP", Doc(SERVICE_SPEC, "clusterIP")),
    col("External-IP", Doc(SERVICE_SPEC, "externalIPs")),
    col("Port(s)", Doc(SERVICE_SPEC, "ports")),
    AGE,
    wide("Selector", Doc(SERVICE_SPEC, "selector")),
];

fn service_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let ty = s(o, "/spec/type");
    let external_ips: Vec<&str> = o
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let external = match ty {
        "ClusterIP" | "NodePort" | "" => or_none(&external_ips.join(",")),
        "LoadBalancer" => {
            let mut ips: Vec<String> = o
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|ing| {
                    let ip = s(ing, "/ip");
                    let host = s(ing, "/hostname");
                    if !ip.is_empty() {
                        Some(ip.to_string())
                    } else if !host.is_empty() {
                        Some(host.to_string())
                    } else {
                        None
                    }
                })
                .collect();
            ips.extend(external_ips.iter().map(|s| s.to_string()));
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => s(o, "/spec/externalName").to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = o
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let proto = if s(p, "/protocol").is_empty() {
                "TCP"
            } else {
                s(p, "/protocol")
            };
            match i(p, "/nodePort") {
                0 => format!("{}/{proto}", i(p, "/port")),
                np => format!("{}:{np}/{proto}", i(p, "/port")),
            }
        })
        .collect();
    let cluster_ip = s(o, "/spec/clusterIP");
    (
        vec![
            name(o),
            json!(ty),
            json!(or_none(cluster_ip)),
            json!(external),
            json!(or_none(&ports.join(","))),
            age(o, now),
            json!(selector_string(o.pointer("/spec/selector"))),
        ],
        None,
    )
}

// ---------------------------------------------------------------------------
// persistent volumes and claims

fn access_modes(v: Option<&Value>) -> String {
    let modes: Vec<&str> = v
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = Vec::new();
    // storage/util GetAccessModesAsString order.
    for (mode, short) in [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ] {
        if modes.contains(&mode) {
            out.push(short);
        }
    }
    out.join(",")
}

const PV_SPEC: &str = "io.k8s.api.core.v1.PersistentVolumeSpec";
const PV_STATUS: &str = "io.k8s.api.core.v1.PersistentVolumeStatus";
const PV_COLUMNS: &[Column] = &[
    NAME,
    col("Capacity", Doc(PV_SPEC, "capacity")),
    col("Access Modes", Doc(PV_SPEC, "accessModes")),
    col(
        "Reclaim Policy",
        Doc(PV_SPEC, "persistentVolumeReclaimPolicy"),
    ),
    col("Status", Doc(PV_STATUS, "phase")),
    col("Claim", Doc(PV_SPEC, "claimRef")),
    col("StorageClass", Text("StorageClass of the pv")),
    col(
        "VolumeAttributesClass",
        Text("VolumeAttributesClass of the pv"),
    ),
    col("Reason", Doc(PV_STATUS, "reason")),
    AGE,
    wide("VolumeMode", Doc(PV_SPEC, "volumeMode")),
];

fn pv_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let claim = match (
        s(o, "/spec/claimRef/namespace"),
        s(o, "/spec/claimRef/name"),
    ) {
        (_, "") => String::new(),
        (ns, n) => format!("{ns}/{n}"),
    };
    (
        vec![
            name(o),
            json!(s(o, "/spec/capacity/storage")),
            json!(access_modes(o.pointer("/spec/accessModes"))),
            json!(s(o, "/spec/persistentVolumeReclaimPolicy")),
            json!(phase_or_terminating(o)),
            json!(claim),
            json!(s(o, "/spec/storageClassName")),
            json!(or_else("<unset>", s(o, "/spec/volumeAttributesClassName"))),
            json!(s(o, "/status/reason")),
            age(o, now),
            json!(or_else("<unset>", s(o, "/spec/volumeMode"))),
        ],
        None,
    )
}

const PVC_SPEC: &str = "io.k8s.api.core.v1.PersistentVolumeClaimSpec";
const PVC_STATUS: &str = "io.k8s.api.core.v1.PersistentVolumeClaimStatus";
const PVC_COLUMNS: &[Column] = &[
    NAME,
    col("Status", Doc(PVC_STATUS, "phase")),
    col("Volume", Doc(PVC_SPEC, "volumeName")),
    col("Capacity", Doc(PVC_STATUS, "capacity")),
    col("Access Modes", Doc(PVC_STATUS, "accessModes")),
    col("StorageClass", Text("StorageClass of the pvc")),
    col(
        "VolumeAttributesClass",
        Text("VolumeAttributesClass of the pvc"),
    ),
    AGE,
    wide("VolumeMode", Doc(PVC_SPEC, "volumeMode")),
];

fn pvc_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let bound = !s(o, "/spec/volumeName").is_empty();
    let (modes, capacity) = if bound {
        (
            access_modes(o.pointer("/status/accessModes")),
            s(o, "/status/capacity/storage").to_string(),
        )
    } else {
        (String::new(), String::new())
    };
    (
        vec![
            name(o),
            json!(phase_or_terminating(o)),
            json!(s(o, "/spec/volumeName")),
            json!(capacity),
            json!(modes),
            json!(s(o, "/spec/storageClassName")),
            json!(or_else("<unset>", s(o, "/spec/volumeAttributesClassName"))),
            age(o, now),
            json!(or_else("<unset>", s(o, "/spec/volumeMode"))),
        ],
        None,
    )
}

// ---------------------------------------------------------------------------
// namespaces, nodes

const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", Text("The status of the namespace")),
    AGE,
];
fn namespace_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    (
        vec![name(o), json!(s(o, "/status/phase")), age(o, now)],
        None,
    )
}

const NODE_INFO: &str = "io.k8s.api.core.v1.NodeSystemInfo";
const NODE_STATUS: &str = "io.k8s.api.core.v1.NodeStatus";
const NODE_COLUMNS: &[Column] = &[
    NAME,
    col("Status", Text("The status of the node")),
    col("Roles", Text("The roles of the node")),
    AGE,
    col("Version", Doc(NODE_INFO, "kubeletVersion")),
    wide("Internal-IP", Doc(NODE_STATUS, "addresses")),
    wide("External-IP", Doc(NODE_STATUS, "addresses")),
    wide("OS-Image", Doc(NODE_INFO, "osImage")),
    wide("Kernel-Version", Doc(NODE_INFO, "kernelVersion")),
    wide(
        "Container-Runtime",
        Doc(NODE_INFO, "containerRuntimeVersion"),
    ),
];

fn node_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let conditions = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut status: Vec<String> = Vec::new();
    match conditions.iter().find(|c| c["type"] == "Ready") {
        Some(c) if c["status"] == "True" => status.push("Ready".into()),
        Some(_) => status.push("NotReady".into()),
        None => status.push("Unknown".into()),
    }
    if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(Value::Object(labels)) = o.pointer("/metadata/labels") {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role.to_string());
                }
            } else if let Some(r) = v
                .as_str()
                .filter(|r| k == "kubernetes.io/role" && !r.is_empty())
            {
                roles.push(r.to_string());
            }
        }
    }
    roles.sort();
    roles.dedup();
    let addr = |ty: &str| -> String {
        o.pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == ty))
            .map(|x| s(x, "/address").to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    (
        vec![
            name(o),
            json!(status.join(",")),
            json!(if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            }),
            age(o, now),
            json!(s(o, "/status/nodeInfo/kubeletVersion")),
            json!(addr("InternalIP")),
            json!(addr("ExternalIP")),
            json!(or_else("<unknown>", s(o, "/status/nodeInfo/osImage"))),
            json!(or_else("<unknown>", s(o, "/status/nodeInfo/kernelVersion"))),
            json!(or_else(
                "<unknown>",
                s(o, "/status/nodeInfo/containerRuntimeVersion")
            )),
        ],
        None,
    )
}

// ---------------------------------------------------------------------------
// events (core/v1 and events.k8s.io/v1 print alike upstream)

const EVENT: &str = "io.k8s.api.core.v1.Event";
const EVENT_COLUMNS: &[Column] = &[
    col("Last Seen", Doc(EVENT, "lastTimestamp")),
    col("Type", Doc(EVENT, "type")),
    col("Reason", Doc(EVENT, "reason")),
    col("Object", Doc(EVENT, "involvedObject")),
    wide(
        "Subobject",
        Doc("io.k8s.api.core.v1.ObjectReference", "fieldPath"),
    ),
    wide("Source", Doc(EVENT, "source")),
    col("Message", Doc(EVENT, "message")),
    wide("First Seen", Doc(EVENT, "firstTimestamp")),
    wide("Count", Doc(EVENT, "count")),
    Column {
        priority: 1,
        ..NAME
    },
];

fn event_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let events_v1 = s(o, "/apiVersion") == "events.k8s.io/v1";
    let pick = |core: &str, v1: &str| if events_v1 { s(o, v1) } else { s(o, core) };
    let first_ts = pick("/firstTimestamp", "/deprecatedFirstTimestamp");
    let first = if first_ts.is_empty() {
        since(s(o, "/eventTime"), now)
    } else {
        since(first_ts, now)
    };
    let last_ts = pick("/lastTimestamp", "/deprecatedLastTimestamp");
    let mut last = if last_ts.is_empty() {
        first.clone()
    } else {
        since(last_ts, now)
    };
    let mut count = if events_v1 {
        i(o, "/deprecatedCount")
    } else {
        i(o, "/count")
    };
    if o.get("series").is_some_and(|v| !v.is_null()) {
        last = since(s(o, "/series/lastObservedTime"), now);
        count = i(o, "/series/count");
    } else if count == 0 {
        count = 1;
    }
    let obj_ptr = if events_v1 {
        "/regarding"
    } else {
        "/involvedObject"
    };
    let kind = s(o, &format!("{obj_ptr}/kind")).to_lowercase();
    let obj_name = s(o, &format!("{obj_ptr}/name"));
    let target = if obj_name.is_empty() {
        kind
    } else {
        format!("{kind}/{obj_name}")
    };
    let component = [
        pick("/source/component", "/deprecatedSource/component"),
        s(o, "/reportingController"),
    ]
    .into_iter()
    .find(|x| !x.is_empty())
    .unwrap_or("");
    let instance = [
        pick("/source/host", "/deprecatedSource/host"),
        s(o, "/reportingInstance"),
    ]
    .into_iter()
    .find(|x| !x.is_empty())
    .unwrap_or("");
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    let message = if events_v1 {
        s(o, "/note")
    } else {
        s(o, "/message")
    };
    (
        vec![
            json!(last),
            json!(s(o, "/type")),
            json!(s(o, "/reason")),
            json!(target),
            json!(s(o, &format!("{obj_ptr}/fieldPath"))),
            json!(source),
            json!(message.trim()),
            json!(first),
            json!(count),
            name(o),
        ],
        None,
    )
}

// ---------------------------------------------------------------------------
// config, secrets, service accounts, endpoints

fn count_map(o: &Value, ptr: &str) -> usize {
    o.pointer(ptr)
        .and_then(Value::as_object)
        .map(Map::len)
        .unwrap_or(0)
}

const CONFIGMAP_COLUMNS: &[Column] = &[
    NAME,
    col("Data", Doc("io.k8s.api.core.v1.ConfigMap", "data")),
    AGE,
];
fn configmap_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let n = count_map(o, "/data") + count_map(o, "/binaryData");
    (vec![name(o), json!(n), age(o, now)], None)
}

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    col("Type", Doc("io.k8s.api.core.v1.Secret", "type")),
    col("Data", Doc("io.k8s.api.core.v1.Secret", "data")),
    AGE,
];
fn secret_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let n = count_map(o, "/data") + count_map(o, "/stringData");
    (
        vec![name(o), json!(s(o, "/type")), json!(n), age(o, now)],
        None,
    )
}

const SERVICEACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Secrets",
        Doc("io.k8s.api.core.v1.ServiceAccount", "secrets"),
    ),
    AGE,
];
fn serviceaccount_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let n = o
        .pointer("/secrets")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    (vec![name(o), json!(n), age(o, now)], None)
}

const ENDPOINTS_COLUMNS: &[Column] = &[
    NAME,
    col("Endpoints", Doc("io.k8s.api.core.v1.Endpoints", "subsets")),
    AGE,
];
/// `formatEndpoints` with the default limit of 3 entries.
fn endpoints_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let mut list: Vec<String> = Vec::new();
    let mut total = 0;
    for ss in o
        .pointer("/subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ports: Vec<&Value> = ss
            .get("ports")
            .and_then(Value::as_array)
            .map(|p| p.iter().collect())
            .unwrap_or_default();
        for a in ss
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ip = s(a, "/ip");
            if ports.is_empty() {
                total += 1;
                if list.len() < 3 {
                    list.push(ip.to_string());
                }
            }
            for p in &ports {
                total += 1;
                if list.len() < 3 {
                    list.push(format!("{ip}:{}", i(p, "/port")));
                }
            }
        }
    }
    let mut ret = list.join(",");
    if total > list.len() {
        ret = format!("{ret} + {} more...", total - list.len());
    }
    (vec![name(o), json!(or_none(&ret)), age(o, now)], None)
}

// ---------------------------------------------------------------------------
// apps, coordination, rbac, policy

const DEPLOYMENT_STATUS: &str = "io.k8s.api.apps.v1.DeploymentStatus";
const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    col("Ready", Text("Number of the pod with ready state")),
    col("Up-to-date", Doc(DEPLOYMENT_STATUS, "updatedReplicas")),
    col("Available", Doc(DEPLOYMENT_STATUS, "availableReplicas")),
    AGE,
    CONTAINERS,
    IMAGES,
    wide(
        "Selector",
        Doc("io.k8s.api.apps.v1.DeploymentSpec", "selector"),
    ),
];
fn deployment_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let (names, images) = container_cells(o);
    (
        vec![
            name(o),
            json!(format!("{}/{}", i(o, "/status/readyReplicas"), desired(o))),
            json!(i(o, "/status/updatedReplicas")),
            json!(i(o, "/status/availableReplicas")),
            age(o, now),
            names,
            images,
            json!(label_selector_string(o.pointer("/spec/selector"))),
        ],
        None,
    )
}

/// `spec.replicas`, 1 when unset.
fn desired(o: &Value) -> i64 {
    o.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// `layoutContainerCells`: container names and images, comma-joined.
fn container_cells(o: &Value) -> (Value, Value) {
    let containers: Vec<&Value> = o
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    let names: Vec<&str> = containers.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| s(c, "/image")).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

const REPLICASET_SPEC: &str = "io.k8s.api.apps.v1.ReplicaSetSpec";
const REPLICASET_STATUS: &str = "io.k8s.api.apps.v1.ReplicaSetStatus";
const REPLICASET_COLUMNS: &[Column] = &[
    NAME,
    int_col("Desired", Doc(REPLICASET_SPEC, "replicas")),
    int_col("Current", Doc(REPLICASET_STATUS, "replicas")),
    int_col("Ready", Doc(REPLICASET_STATUS, "readyReplicas")),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", Doc(REPLICASET_SPEC, "selector")),
];
fn replicaset_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let (names, images) = container_cells(o);
    (
        vec![
            name(o),
            json!(desired(o)),
            json!(i(o, "/status/replicas")),
            json!(i(o, "/status/readyReplicas")),
            age(o, now),
            names,
            images,
            json!(label_selector_string(o.pointer("/spec/selector"))),
        ],
        None,
    )
}

const JOB_COLUMNS: &[Column] = &[
    NAME,
    col("Status", Text("Status of the job.")),
    col(
        "Completions",
        Doc("io.k8s.api.batch.v1.JobStatus", "succeeded"),
    ),
    col("Duration", Text("Time required to complete the job.")),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", Doc("io.k8s.api.batch.v1.JobSpec", "selector")),
];
fn has_job_condition(o: &Value, ty: &str) -> bool {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| s(c, "/type") == ty && s(c, "/status") == "True")
        })
}
/// `printJob` (pkg/printers/internalversion/printers.go).
fn job_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let succeeded = i(o, "/status/succeeded");
    let completions = match o.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = i(o, "/spec/parallelism");
            if parallelism > 1 {
                format!("{succeeded}/1 of {parallelism}")
            } else {
                format!("{succeeded}/1")
            }
        }
    };
    let start = s(o, "/status/startTime").parse::<jiff::Timestamp>().ok();
    let end = s(o, "/status/completionTime")
        .parse::<jiff::Timestamp>()
        .ok();
    let duration = match (start, end) {
        (None, _) => String::new(),
        (Some(st), None) => human_duration(now.as_second() - st.as_second()),
        (Some(st), Some(e)) => human_duration(e.as_second() - st.as_second()),
    };
    let status = if has_job_condition(o, "Complete") {
        "Complete"
    } else if has_job_condition(o, "Failed") {
        "Failed"
    } else if deleting(o) {
        "Terminating"
    } else if has_job_condition(o, "Suspended") {
        "Suspended"
    } else if has_job_condition(o, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = container_cells(o);
    (
        vec![
            name(o),
            json!(status),
            json!(completions),
            json!(duration),
            age(o, now),
            names,
            images,
            json!(label_selector_string(o.pointer("/spec/selector"))),
        ],
        None,
    )
}

const STORAGECLASS: &str = "io.k8s.api.storage.v1.StorageClass";
const STORAGECLASS_COLUMNS: &[Column] = &[
    NAME,
    col("Provisioner", Doc(STORAGECLASS, "provisioner")),
    col("ReclaimPolicy", Doc(STORAGECLASS, "reclaimPolicy")),
    col("VolumeBindingMode", Doc(STORAGECLASS, "volumeBindingMode")),
    col(
        "AllowVolumeExpansion",
        Doc(STORAGECLASS, "allowVolumeExpansion"),
    ),
    AGE,
];
/// Whether a StorageClass is marked default (`storageutil.IsDefaultAnnotation`).
pub fn is_default_storage_class(o: &Value) -> bool {
    [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|a| {
        o.pointer("/metadata/annotations")
            .and_then(|m| m.get(*a))
            .and_then(Value::as_str)
            == Some("true")
    })
}
fn storageclass_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let mut n = s(o, "/metadata/name").to_string();
    if is_default_storage_class(o) {
        n.push_str(" (default)");
    }
    let reclaim = o
        .get("reclaimPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Delete");
    let mode = o
        .get("volumeBindingMode")
        .and_then(Value::as_str)
        .unwrap_or("Immediate");
    let expand = o
        .get("allowVolumeExpansion")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    (
        vec![
            json!(n),
            json!(s(o, "/provisioner")),
            json!(reclaim),
            json!(mode),
            json!(expand),
            age(o, now),
        ],
        None,
    )
}

const LEASE_COLUMNS: &[Column] = &[
    NAME,
    col(
        "Holder",
        Doc("io.k8s.api.coordination.v1.LeaseSpec", "holderIdentity"),
    ),
    AGE,
];
fn lease_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    (
        vec![name(o), json!(s(o, "/spec/holderIdentity")), age(o, now)],
        None,
    )
}

const SERVICECIDR_COLUMNS: &[Column] = &[
    NAME,
    col(
        "CIDRs",
        Doc("io.k8s.api.networking.v1.ServiceCIDRSpec", "cidrs"),
    ),
    AGE,
];
fn servicecidr_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let cidrs: Vec<&str> = o
        .pointer("/spec/cidrs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    (vec![name(o), json!(cidrs.join(",")), age(o, now)], None)
}

/// Upstream declares two columns for IPAddresses but prints three cells
/// (the age has no column), and so does kube-sim.
const IPADDRESS_COLUMNS: &[Column] = &[
    NAME,
    col(
        "ParentRef",
        Doc("io.k8s.api.networking.v1.IPAddressSpec", "parentRef"),
    ),
];
fn ipaddress_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    (
        vec![
            name(o),
            json!(crate::networking::parent_ref_column(o)),
            age(o, now),
        ],
        None,
    )
}

const BINDING_COLUMNS: &[Column] = &[
    NAME,
    col("Role", Doc("io.k8s.api.rbac.v1.RoleBinding", "roleRef")),
    AGE,
    wide("Users", Text("Users in the roleBinding")),
    wide("Groups", Text("Groups in the roleBinding")),
    wide(
        "ServiceAccounts",
        Text("ServiceAccounts in the roleBinding"),
    ),
];
fn binding_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let role = format!("{}/{}", s(o, "/roleRef/kind"), s(o, "/roleRef/name"));
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for sub in o
        .pointer("/subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match s(sub, "/kind") {
            "User" => users.push(s(sub, "/name").to_string()),
            "Group" => groups.push(s(sub, "/name").to_string()),
            "ServiceAccount" => sas.push(format!("{}/{}", s(sub, "/namespace"), s(sub, "/name"))),
            _ => {}
        }
    }
    (
        vec![
            name(o),
            json!(role),
            age(o, now),
            json!(users.join(", ")),
            json!(groups.join(", ")),
            json!(sas.join(", ")),
        ],
        None,
    )
}

const PDB_SPEC: &str = "io.k8s.api.policy.v1.PodDisruptionBudgetSpec";
const PDB_COLUMNS: &[Column] = &[
    NAME,
    col("Min Available", Doc(PDB_SPEC, "minAvailable")),
    col("Max Unavailable", Doc(PDB_SPEC, "maxUnavailable")),
    col(
        "Allowed Disruptions",
        Doc(
            "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
            "disruptionsAllowed",
        ),
    ),
    AGE,
];
fn pdb_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let int_or_str = |p: &str| match o.pointer(p) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(x)) => x.clone(),
        _ => "N/A".into(),
    };
    (
        vec![
            name(o),
            json!(int_or_str("/spec/minAvailable")),
            json!(int_or_str("/spec/maxUnavailable")),
            json!(i(o, "/status/disruptionsAllowed")),
            age(o, now),
        ],
        None,
    )
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;

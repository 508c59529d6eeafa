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
    let columns: Vec<Value> = (printer.columns)()
        .into_iter()
        .map(|c| {
            json!({"name": c.name, "type": c.ty, "format": c.format, "description": c.description, "priority": c.priority})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
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
    let mut columns = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": doc(OBJECT_META, "name"), "priority": 0})];
    for c in cols {
        columns.push(json!({
            "name": c.get("name").cloned().unwrap_or(json!("")),
            "type": c.get("type").cloned().unwrap_or(json!("string")),
            "format": c.get("format").cloned().unwrap_or(json!("")),
            "description": c.get("description").cloned().unwrap_or(json!("")),
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
    description: String,
    priority: i32,
}

type RowFn = fn(&Value, jiff::Timestamp) -> (Vec<Value>, Option<Value>);

struct Printer {
    columns: fn() -> Vec<Column>,
    row: RowFn,
}

fn printer_for(resource: &str, group: &str) -> Printer {
    let p = |columns: fn() -> Vec<Column>, row: RowFn| Printer { columns, row };
    match (group, resource) {
        ("", "pods") => p(pod_columns, pod_row),
        ("", "services") => p(service_columns, service_row),
        ("", "persistentvolumes") => p(pv_columns, pv_row),
        ("", "persistentvolumeclaims") => p(pvc_columns, pvc_row),
        ("", "namespaces") => p(namespace_columns, namespace_row),
        ("", "nodes") => p(node_columns, node_row),
        ("", "events") | ("events.k8s.io", "events") => p(event_columns, event_row),
        ("", "configmaps") => p(configmap_columns, configmap_row),
        ("", "secrets") => p(secret_columns, secret_row),
        ("", "serviceaccounts") => p(serviceaccount_columns, serviceaccount_row),
        ("", "endpoints") => p(endpoints_columns, endpoints_row),
        ("apps", "deployments") => p(deployment_columns, deployment_row),
        ("apps", "replicasets") => p(replicaset_columns, replicaset_row),
        ("batch", "jobs") => p(job_columns, job_row),
        ("storage.k8s.io", "storageclasses") => p(storageclass_columns, storageclass_row),
        ("coordination.k8s.io", "leases") => p(lease_columns, lease_row),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            p(binding_columns, binding_row)
        }
        ("policy", "poddisruptionbudgets") => p(pdb_columns, pdb_row),
        // roles and clusterroles print like the default convertor upstream.
        _ => p(default_columns, default_row),
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

fn col(name: &'static str, description: String) -> Column {
    Column {
        name,
        ty: "string",
        format: "",
        description,
        priority: 0,
    }
}
fn wide(name: &'static str, description: String) -> Column {
    Column {
        name,
        ty: "string",
        format: "",
        description,
        priority: 1,
    }
}
fn name_col() -> Column {
    Column {
        name: "Name",
        ty: "string",
        format: "name",
        description: doc(OBJECT_META, "name"),
        priority: 0,
    }
}
fn age_col() -> Column {
    col("Age", doc(OBJECT_META, "creationTimestamp"))
}

fn s<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}
fn i(o: &Value, ptr: &str) -> i64 {
    o.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}
fn or_none(v: &str) -> String {
    if v.is_empty() {
        "<none>".into()
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

fn default_columns() -> Vec<Column> {
    vec![
        name_col(),
        Column {
            name: "Created At",
            ty: "date",
            format: "",
            description: doc(OBJECT_META, "creationTimestamp"),
            priority: 0,
        },
    ]
}
fn default_row(o: &Value, _now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let created = s(o, "/metadata/creationTimestamp")
        .parse::<jiff::Timestamp>()
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "0001-01-01T00:00:00Z".into());
    (vec![name(o), json!(created)], None)
}

// ---------------------------------------------------------------------------
// pods

fn pod_columns() -> Vec<Column> {
    vec![
        name_col(),
        col("Ready", "The aggregate readiness state of this pod for accepting traffic.".into()),
        col("Status", "The aggregate status of the containers in this pod.".into()),
        col("Restarts", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.".into()),
        age_col(),
        wide("IP", doc("io.k8s.api.core.v1.PodStatus", "podIP")),
        wide("Node", doc("io.k8s.api.core.v1.PodSpec", "nodeName")),
        wide("Nominated Node", doc("io.k8s.api.core.v1.PodStatus", "nominatedNodeName")),
        wide("Readiness Gates", doc("io.k8s.api.core.v1.PodSpec", "readinessGates")),
    ]
}

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

fn service_columns() -> Vec<Column> {
    let d = |f| doc("io.k8s.api.core.v1.ServiceSpec", f);
    vec![
        name_col(),
        col("Type", d("type")),
        col("Cluster-IP", d("clusterIP")),
        col("External-IP", d("externalIPs")),
        col("Port(s)", d("ports")),
        age_col(),
        wide("Selector", d("selector")),
    ]
}

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

fn pv_columns() -> Vec<Column> {
    let d = |f| doc("io.k8s.api.core.v1.PersistentVolumeSpec", f);
    vec![
        name_col(),
        col("Capacity", d("capacity")),
        col("Access Modes", d("accessModes")),
        col("Reclaim Policy", d("persistentVolumeReclaimPolicy")),
        col(
            "Status",
            doc("io.k8s.api.core.v1.PersistentVolumeStatus", "phase"),
        ),
        col("Claim", d("claimRef")),
        col("StorageClass", "StorageClass of the pv".into()),
        col(
            "VolumeAttributesClass",
            "VolumeAttributesClass of the pv".into(),
        ),
        col(
            "Reason",
            doc("io.k8s.api.core.v1.PersistentVolumeStatus", "reason"),
        ),
        age_col(),
        wide("VolumeMode", d("volumeMode")),
    ]
}

fn pv_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let claim = match (
        s(o, "/spec/claimRef/namespace"),
        s(o, "/spec/claimRef/name"),
    ) {
        (_, "") => String::new(),
        (ns, n) => format!("{ns}/{n}"),
    };
    let status = if deleting(o) {
        "Terminating".to_string()
    } else {
        s(o, "/status/phase").to_string()
    };
    let unset = |v: &str| {
        if v.is_empty() {
            "<unset>".to_string()
        } else {
            v.to_string()
        }
    };
    (
        vec![
            name(o),
            json!(s(o, "/spec/capacity/storage")),
            json!(access_modes(o.pointer("/spec/accessModes"))),
            json!(s(o, "/spec/persistentVolumeReclaimPolicy")),
            json!(status),
            json!(claim),
            json!(s(o, "/spec/storageClassName")),
            json!(unset(s(o, "/spec/volumeAttributesClassName"))),
            json!(s(o, "/status/reason")),
            age(o, now),
            json!(unset(s(o, "/spec/volumeMode"))),
        ],
        None,
    )
}

fn pvc_columns() -> Vec<Column> {
    let d = |f| doc("io.k8s.api.core.v1.PersistentVolumeClaimSpec", f);
    vec![
        name_col(),
        col(
            "Status",
            doc("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "phase"),
        ),
        col("Volume", d("volumeName")),
        col(
            "Capacity",
            doc("io.k8s.api.core.v1.PersistentVolumeClaimStatus", "capacity"),
        ),
        col(
            "Access Modes",
            doc(
                "io.k8s.api.core.v1.PersistentVolumeClaimStatus",
                "accessModes",
            ),
        ),
        col("StorageClass", "StorageClass of the pvc".into()),
        col(
            "VolumeAttributesClass",
            "VolumeAttributesClass of the pvc".into(),
        ),
        age_col(),
        wide("VolumeMode", d("volumeMode")),
    ]
}

fn pvc_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let phase = if deleting(o) {
        "Terminating".to_string()
    } else {
        s(o, "/status/phase").to_string()
    };
    let bound = !s(o, "/spec/volumeName").is_empty();
    let (modes, capacity) = if bound {
        (
            access_modes(o.pointer("/status/accessModes")),
            s(o, "/status/capacity/storage").to_string(),
        )
    } else {
        (String::new(), String::new())
    };
    let unset = |v: &str| {
        if v.is_empty() {
            "<unset>".to_string()
        } else {
            v.to_string()
        }
    };
    (
        vec![
            name(o),
            json!(phase),
            json!(s(o, "/spec/volumeName")),
            json!(capacity),
            json!(modes),
            json!(s(o, "/spec/storageClassName")),
            json!(unset(s(o, "/spec/volumeAttributesClassName"))),
            age(o, now),
            json!(unset(s(o, "/spec/volumeMode"))),
        ],
        None,
    )
}

// ---------------------------------------------------------------------------
// namespaces, nodes

fn namespace_columns() -> Vec<Column> {
    vec![
        name_col(),
        col("Status", "The status of the namespace".into()),
        age_col(),
    ]
}
fn namespace_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    (
        vec![name(o), json!(s(o, "/status/phase")), age(o, now)],
        None,
    )
}

fn node_columns() -> Vec<Column> {
    let ni = |f| doc("io.k8s.api.core.v1.NodeSystemInfo", f);
    vec![
        name_col(),
        col("Status", "The status of the node".into()),
        col("Roles", "The roles of the node".into()),
        age_col(),
        col("Version", ni("kubeletVersion")),
        wide(
            "Internal-IP",
            doc("io.k8s.api.core.v1.NodeStatus", "addresses"),
        ),
        wide(
            "External-IP",
            doc("io.k8s.api.core.v1.NodeStatus", "addresses"),
        ),
        wide("OS-Image", ni("osImage")),
        wide("Kernel-Version", ni("kernelVersion")),
        wide("Container-Runtime", ni("containerRuntimeVersion")),
    ]
}

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
    let unknown = |v: &str| {
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v.to_string()
        }
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
            json!(unknown(s(o, "/status/nodeInfo/osImage"))),
            json!(unknown(s(o, "/status/nodeInfo/kernelVersion"))),
            json!(unknown(s(o, "/status/nodeInfo/containerRuntimeVersion"))),
        ],
        None,
    )
}

// ---------------------------------------------------------------------------
// events (core/v1 and events.k8s.io/v1 print alike upstream)

fn event_columns() -> Vec<Column> {
    let d = |f| doc("io.k8s.api.core.v1.Event", f);
    vec![
        col("Last Seen", d("lastTimestamp")),
        col("Type", d("type")),
        col("Reason", d("reason")),
        col("Object", d("involvedObject")),
        wide(
            "Subobject",
            doc("io.k8s.api.core.v1.ObjectReference", "fieldPath"),
        ),
        wide("Source", d("source")),
        col("Message", d("message")),
        wide("First Seen", d("firstTimestamp")),
        wide("Count", d("count")),
        Column {
            name: "Name",
            ty: "string",
            format: "name",
            description: doc(OBJECT_META, "name"),
            priority: 1,
        },
    ]
}

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

fn configmap_columns() -> Vec<Column> {
    vec![
        name_col(),
        col("Data", doc("io.k8s.api.core.v1.ConfigMap", "data")),
        age_col(),
    ]
}
fn configmap_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let n = count_map(o, "/data") + count_map(o, "/binaryData");
    (vec![name(o), json!(n), age(o, now)], None)
}

fn secret_columns() -> Vec<Column> {
    vec![
        name_col(),
        col("Type", doc("io.k8s.api.core.v1.Secret", "type")),
        col("Data", doc("io.k8s.api.core.v1.Secret", "data")),
        age_col(),
    ]
}
fn secret_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let n = count_map(o, "/data") + count_map(o, "/stringData");
    (
        vec![name(o), json!(s(o, "/type")), json!(n), age(o, now)],
        None,
    )
}

fn serviceaccount_columns() -> Vec<Column> {
    vec![
        name_col(),
        col(
            "Secrets",
            doc("io.k8s.api.core.v1.ServiceAccount", "secrets"),
        ),
        age_col(),
    ]
}
fn serviceaccount_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let n = o
        .pointer("/secrets")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    (vec![name(o), json!(n), age(o, now)], None)
}

fn endpoints_columns() -> Vec<Column> {
    vec![
        name_col(),
        col("Endpoints", doc("io.k8s.api.core.v1.Endpoints", "subsets")),
        age_col(),
    ]
}
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

fn deployment_columns() -> Vec<Column> {
    let st = |f| doc("io.k8s.api.apps.v1.DeploymentStatus", f);
    vec![
        name_col(),
        col("Ready", "Number of the pod with ready state".into()),
        col("Up-to-date", st("updatedReplicas")),
        col("Available", st("availableReplicas")),
        age_col(),
        wide(
            "Containers",
            "Names of each container in the template.".into(),
        ),
        wide(
            "Images",
            "Images referenced by each container in the template.".into(),
        ),
        wide(
            "Selector",
            doc("io.k8s.api.apps.v1.DeploymentSpec", "selector"),
        ),
    ]
}
fn deployment_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let desired = o
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let containers: Vec<&Value> = o
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    let names: Vec<&str> = containers.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| s(c, "/image")).collect();
    (
        vec![
            name(o),
            json!(format!("{}/{desired}", i(o, "/status/readyReplicas"))),
            json!(i(o, "/status/updatedReplicas")),
            json!(i(o, "/status/availableReplicas")),
            age(o, now),
            json!(names.join(",")),
            json!(images.join(",")),
            json!(label_selector_string(o.pointer("/spec/selector"))),
        ],
        None,
    )
}

fn int_col(name: &'static str, description: String) -> Column {
    Column {
        name,
        ty: "integer",
        format: "",
        description,
        priority: 0,
    }
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

fn replicaset_columns() -> Vec<Column> {
    vec![
        name_col(),
        int_col(
            "Desired",
            doc("io.k8s.api.apps.v1.ReplicaSetSpec", "replicas"),
        ),
        int_col(
            "Current",
            doc("io.k8s.api.apps.v1.ReplicaSetStatus", "replicas"),
        ),
        int_col(
            "Ready",
            doc("io.k8s.api.apps.v1.ReplicaSetStatus", "readyReplicas"),
        ),
        age_col(),
        wide(
            "Containers",
            "Names of each container in the template.".into(),
        ),
        wide(
            "Images",
            "Images referenced by each container in the template.".into(),
        ),
        wide(
            "Selector",
            doc("io.k8s.api.apps.v1.ReplicaSetSpec", "selector"),
        ),
    ]
}
fn replicaset_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    let desired = o
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let (names, images) = container_cells(o);
    (
        vec![
            name(o),
            json!(desired),
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

fn job_columns() -> Vec<Column> {
    vec![
        name_col(),
        col("Status", "Status of the job.".into()),
        col(
            "Completions",
            doc("io.k8s.api.batch.v1.JobStatus", "succeeded"),
        ),
        col("Duration", "Time required to complete the job.".into()),
        age_col(),
        wide(
            "Containers",
            "Names of each container in the template.".into(),
        ),
        wide(
            "Images",
            "Images referenced by each container in the template.".into(),
        ),
        wide("Selector", doc("io.k8s.api.batch.v1.JobSpec", "selector")),
    ]
}
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

fn storageclass_columns() -> Vec<Column> {
    let d = |f| doc("io.k8s.api.storage.v1.StorageClass", f);
    vec![
        name_col(),
        col("Provisioner", d("provisioner")),
        col("ReclaimPolicy", d("reclaimPolicy")),
        col("VolumeBindingMode", d("volumeBindingMode")),
        col("AllowVolumeExpansion", d("allowVolumeExpansion")),
        age_col(),
    ]
}
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

fn lease_columns() -> Vec<Column> {
    vec![
        name_col(),
        col(
            "Holder",
            doc("io.k8s.api.coordination.v1.LeaseSpec", "holderIdentity"),
        ),
        age_col(),
    ]
}
fn lease_row(o: &Value, now: jiff::Timestamp) -> (Vec<Value>, Option<Value>) {
    (
        vec![name(o), json!(s(o, "/spec/holderIdentity")), age(o, now)],
        None,
    )
}

fn binding_columns() -> Vec<Column> {
    vec![
        name_col(),
        col("Role", doc("io.k8s.api.rbac.v1.RoleBinding", "roleRef")),
        age_col(),
        wide("Users", "Users in the roleBinding".into()),
        wide("Groups", "Groups in the roleBinding".into()),
        wide(
            "ServiceAccounts",
            "ServiceAccounts in the roleBinding".into(),
        ),
    ]
}
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

fn pdb_columns() -> Vec<Column> {
    let d = |f| doc("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", f);
    vec![
        name_col(),
        col("Min Available", d("minAvailable")),
        col("Max Unavailable", d("maxUnavailable")),
        col(
            "Allowed Disruptions",
            doc(
                "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
                "disruptionsAllowed",
            ),
        ),
        age_col(),
    ]
}
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

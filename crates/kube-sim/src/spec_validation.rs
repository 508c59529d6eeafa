//! A subset of the per-kind spec validation of pkg/apis/<group>/validation
//! (ValidatePodCreate, ValidatePersistentVolume(Claim), ValidateService,
//! ValidateDeployment): the required fields a client most easily forgets,
//! with upstream's field paths and messages. Everything else is accepted.

use serde_json::{Value, json};

use crate::error::{FieldError, FieldErrorType};
use crate::resources::ResourceDef;

fn required(field: &str, detail: &str) -> FieldError {
    FieldError::required(field, detail)
}

fn is_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// `%#v` of a map[string]string, as field errors print label maps.
fn go_string_map(v: Option<&Value>) -> String {
    let mut parts: Vec<(String, String)> = v
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    parts.sort();
    let inner: Vec<String> = parts
        .iter()
        .map(|(k, v)| format!("{}:{}", crate::goquote::quote(k), crate::goquote::quote(v)))
        .collect();
    format!("map[string]string{{{}}}", inner.join(", "))
}

fn containers(spec: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let list = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let Some(list) = list.filter(|l| !l.is_empty()) else {
        errs.push(required(&format!("{path}.containers"), ""));
        return;
    };
    let mut seen = std::collections::HashSet::new();
    for (i, c) in list.iter().enumerate() {
        let p = format!("{path}.containers[{i}]");
        match c
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            None => errs.push(required(&format!("{p}.name"), "")),
            Some(n) => {
                for m in crate::validation::dns1123_label(n) {
                    errs.push(FieldError::invalid(&format!("{p}.name"), json!(n), m));
                }
                if !seen.insert(n.to_string()) {
                    errs.push(FieldError {
                        named: false,
                        kind: FieldErrorType::Duplicate,
                        field: format!("{p}.name"),
                        value: Some(json!(n)),
                        detail: String::new(),
                    });
                }
            }
        }
        if is_empty(c.get("image")) {
            errs.push(required(&format!("{p}.image"), ""));
        }
        // validatePullPolicy (a `core.PullPolicy`, written as JSON).
        const PULL: &[&str] = &["Always", "IfNotPresent", "Never"];
        if let Some(policy) = c.get("imagePullPolicy").and_then(Value::as_str)
            && !policy.is_empty()
            && !PULL.contains(&policy)
        {
            errs.push(
                FieldError::not_supported(&format!("{p}.imagePullPolicy"), json!(policy), PULL)
                    .named(),
            );
        }
    }
}

/// The access modes of a claim's or a volume's spec: each a supported
/// `core.PersistentVolumeAccessMode` (written as JSON), ReadWriteOncePod
/// alone.
fn access_modes(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    const SUPPORTED: &[&str] = &[
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOnce",
        "ReadWriteOncePod",
    ];
    let modes = spec
        .and_then(|s| s.get("accessModes"))
        .and_then(Value::as_array);
    let (mut rwop, mut other) = (false, false);
    for mode in modes.into_iter().flatten() {
        let m = mode.as_str().unwrap_or_default();
        if !SUPPORTED.contains(&m) {
            errs.push(FieldError::not_supported("spec.accessModes", json!(m), SUPPORTED).named());
        } else if m == "ReadWriteOncePod" {
            rwop = true;
        } else {
            other = true;
        }
    }
    if rwop && other {
        errs.push(FieldError::forbidden(
            "spec.accessModes",
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

const PV_SOURCES: &[&str] = &[
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "hostPath",
    "glusterfs",
    "nfs",
    "rbd",
    "iscsi",
    "cinder",
    "cephfs",
    "fc",
    "flocker",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];

/// Spec validation on create.
pub fn validate_create(def: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec");
    match (def.group, def.resource) {
        ("coordination.k8s.io", "leases") => lease_spec(obj, &mut errs),
        ("", "pods") => pod_spec(spec, &mut errs),
        ("", "persistentvolumeclaims") => claim_spec(spec, &mut errs),
        ("", "persistentvolumes") => volume_spec(spec, &mut errs),
        ("", "services") => {
            let ty = spec
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP");
            let headless = spec
                .and_then(|s| s.get("clusterIP"))
                .and_then(Value::as_str)
                == Some("None");
            if ty != "ExternalName" && !headless && is_empty(spec.and_then(|s| s.get("ports"))) {
                errs.push(required("spec.ports", ""));
            }
            service_type(spec, &mut errs);
        }
        ("batch", "jobs") => job_spec(spec, &mut errs),
        ("apps", "deployments" | "replicasets") => {
            selector_and_template(spec, &mut errs);
        }
        ("", "replicationcontrollers") => controller_spec(spec, &mut errs),
        ("", "podtemplates") => {
            pod_spec_at(obj.pointer("/template/spec"), "template.spec", &mut errs)
        }
        _ => {}
    }
    errs.extend(data_size(def, obj));
    errs
}

/// `validateService`'s rule on `spec.type` (a `core.ServiceType`, so the
/// value is written as JSON). An empty type is defaulted to ClusterIP.
fn service_type(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    const SUPPORTED: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if let Some(ty) = spec.and_then(|s| s.get("type")).and_then(Value::as_str)
        && !ty.is_empty()
        && !SUPPORTED.contains(&ty)
    {
        errs.push(FieldError::not_supported("spec.type", json!(ty), SUPPORTED).named());
    }
}

/// `core.MaxSecretSize`: what a ConfigMap's or a Secret's data may total.
pub const MAX_DATA_SIZE: usize = 1024 * 1024;

/// The length of a base64 `[]byte` field once decoded (an undecodable one
/// counts as its text; the decoder refuses it elsewhere).
fn decoded_len(v: &Value) -> usize {
    use base64::Engine;
    let s = v.as_str().unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map(|b| b.len())
        .unwrap_or(s.len())
}

/// `ValidatePersistentVolumeClaimSpec`'s emulated part (on create and, as
/// `ValidatePersistentVolumeClaimUpdate` runs it first, on update).
fn claim_spec(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    if is_empty(spec.and_then(|s| s.get("accessModes"))) {
        errs.push(required(
            "spec.accessModes",
            "at least 1 access mode is required",
        ));
    }
    access_modes(spec, errs);
    let storage = spec.and_then(|s| s.pointer("/resources/requests/storage"));
    if is_empty(storage) {
        errs.push(required("spec.resources[storage]", ""));
    } else if let Some(q) = storage.and_then(Value::as_str)
        && crate::quantity::value(q).is_some_and(|v| v <= 0.0)
    {
        // ValidatePositiveQuantityValue, the quantity as it marshals.
        errs.push(FieldError::invalid(
            "spec.resources[storage]",
            json!(q),
            "must be greater than zero",
        ));
    }
    claim_data_sources(spec, errs);
}

/// `ValidatePersistentVolumeSpec`'s emulated part (on create and, as
/// `ValidatePersistentVolumeUpdate` runs it first, on update).
fn volume_spec(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    let capacity = spec
        .and_then(|s| s.get("capacity"))
        .and_then(Value::as_object);
    if capacity.is_none_or(|c| c.is_empty()) {
        errs.push(required("spec.capacity", ""));
    }
    if capacity.is_none_or(|c| !c.contains_key("storage") || c.len() > 1) {
        // The value is the map as JSON (keys sorted), null when empty.
        let value = match capacity {
            Some(c) if !c.is_empty() => {
                let mut keys: Vec<&String> = c.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), c[k].clone()))
                        .collect(),
                )
            }
            _ => Value::Null,
        };
        errs.push(FieldError::not_supported(
            "spec.capacity",
            value,
            &["storage"],
        ));
    }
    if is_empty(spec.and_then(|s| s.get("accessModes"))) {
        errs.push(required("spec.accessModes", ""));
    }
    access_modes(spec, errs);
    let sources = PV_SOURCES
        .iter()
        .filter(|k| spec.and_then(|s| s.get(**k)).is_some_and(|v| !v.is_null()))
        .count();
    if sources == 0 {
        errs.push(required("spec", "must specify a volume type"));
    }
}

/// The size limits of `ValidateConfigMap` (data plus binaryData, the error
/// on the whole object, path `[]`) and `ValidateSecret` (data, path `data`).
fn data_size(def: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    let sum = |key: &str, f: &dyn Fn(&Value) -> usize| -> usize {
        obj.get(key)
            .and_then(Value::as_object)
            .map(|m| m.values().map(f).sum())
            .unwrap_or(0)
    };
    let (total, field) = match (def.group, def.resource) {
        ("", "configmaps") => (
            sum("data", &|v| v.as_str().map(str::len).unwrap_or(0))
                + sum("binaryData", &decoded_len),
            "[]",
        ),
        ("", "secrets") => (sum("data", &decoded_len), "data"),
        _ => return Vec::new(),
    };
    if total <= MAX_DATA_SIZE {
        return Vec::new();
    }
    vec![FieldError {
        named: false,
        kind: FieldErrorType::TooLong,
        field: field.into(),
        value: None,
        detail: format!("may not be more than {MAX_DATA_SIZE} bytes"),
    }]
}

/// Spec validation of an update of the main resource
/// (`ValidatePersistentVolumeClaimUpdate`, `ValidateServiceUpdate`'s
/// loadBalancerClass rule, and the data size limits).
pub fn validate_update(def: &ResourceDef, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (def.group, def.resource) {
        ("coordination.k8s.io", "leases") => lease_spec(new, &mut errs),
        ("", "persistentvolumeclaims") => pvc_update(new, old, &mut errs),
        ("", "persistentvolumes") => pv_update(new, old, &mut errs),
        ("", "pods") => pod_update(new, old, &mut errs),
        // ValidateDeploymentUpdate, ValidateReplicaSetUpdate,
        // ValidateReplicationControllerUpdate and ValidatePodTemplateUpdate
        // run the create's spec validation on the new object. (Their
        // selector immutability is not emulated; nor is a Job's template's.)
        ("apps", "deployments" | "replicasets") => {
            selector_and_template(new.get("spec"), &mut errs);
        }
        ("", "replicationcontrollers") => controller_spec(new.get("spec"), &mut errs),
        ("", "podtemplates") => {
            pod_spec_at(new.pointer("/template/spec"), "template.spec", &mut errs)
        }
        ("", "services") => {
            // validateService of the new object comes first.
            service_type(new.get("spec"), &mut errs);
            let lb =
                |s: &Value| s.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer");
            let class = |s: &Value| {
                s.pointer("/spec/loadBalancerClass")
                    .filter(|v| !v.is_null())
                    .cloned()
            };
            if lb(old) && lb(new) && class(old) != class(new) {
                // A nil *string renders as null in a field error.
                errs.push(FieldError::invalid(
                    "spec.loadBalancerClass",
                    class(new).unwrap_or(Value::Null),
                    "may not change once set",
                ));
            }
        }
        _ => {}
    }
    errs.extend(data_size(def, new));
    errs
}

/// `ValidateLeaseSpec` (pkg/apis/coordination/validation): a positive
/// duration, a non-negative transition count. (The strategy and
/// preferredHolder fields of CoordinatedLeaderElection are not checked.)
fn lease_spec(obj: &Value, errs: &mut Vec<FieldError>) {
    if let Some(d) = obj
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        && d <= 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseDurationSeconds",
            json!(d),
            "must be greater than 0",
        ));
    }
    if let Some(t) = obj
        .pointer("/spec/leaseTransitions")
        .and_then(Value::as_i64)
        && t < 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseTransitions",
            json!(t),
            "must be greater than or equal to 0",
        ));
    }
}

/// Validation of a `/status` write beyond the metadata
/// (`ValidateServiceStatusUpdate` → `ValidateLoadBalancerStatus`, with the
/// StrictIPCIDRValidation gate on as in 1.36).
pub fn validate_status_update(def: &ResourceDef, new: &Value, old: &Value) -> Vec<FieldError> {
    if !(def.group.is_empty() && def.resource == "services") {
        return Vec::new();
    }
    load_balancer_status(new, old)
}

fn load_balancer_status(new: &Value, old: &Value) -> Vec<FieldError> {
    const PATH: &str = "status.loadBalancer.ingress";
    let ingress = new
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let lb = new.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer");
    if !lb && !ingress.is_empty() {
        return vec![FieldError::forbidden(
            PATH,
            "may only be used when `spec.type` is 'LoadBalancer'",
        )];
    }
    let old_ips: Vec<&str> = old
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| i.get("ip").and_then(Value::as_str))
                .filter(|ip| !ip.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let mut errs = Vec::new();
    for (i, ing) in ingress.iter().enumerate() {
        let path = format!("{PATH}[{i}]");
        let ip = ing.get("ip").and_then(Value::as_str).unwrap_or_default();
        if !ip.is_empty() {
            for m in crate::netaddr::valid_ip_for_legacy_field(ip, &old_ips) {
                errs.push(FieldError::invalid(&format!("{path}.ip"), json!(ip), m));
            }
        }
        match ing.get("ipMode").filter(|m| !m.is_null()) {
            None if !ip.is_empty() => errs.push(required(
                &format!("{path}.ipMode"),
                "must be specified when `ip` is set",
            )),
            None => {}
            Some(_) if ip.is_empty() => errs.push(FieldError::forbidden(
                &format!("{path}.ipMode"),
                "may not be specified when `ip` is not set",
            )),
            Some(mode) if !matches!(mode.as_str(), Some("Proxy" | "VIP")) => {
                errs.push(FieldError::not_supported(
                    &format!("{path}.ipMode"),
                    mode.clone(),
                    &["Proxy", "VIP"],
                ))
            }
            Some(_) => {}
        }
        let host = ing
            .get("hostname")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !host.is_empty() {
            for m in crate::validation::dns1123_subdomain(host) {
                errs.push(FieldError::invalid(
                    &format!("{path}.hostname"),
                    json!(host),
                    m,
                ));
            }
            if crate::netaddr::parse_ip_sloppy(host).is_some() {
                errs.push(FieldError::invalid(
                    &format!("{path}.hostname"),
                    json!(host),
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
    errs
}

/// A spec with quantities compared by value and nulls, empty slices and
/// empty maps as absent (a selector or resources left empty too), as
/// `apiequality.Semantic.DeepEqual` compares them.
fn semantic_spec(spec: Option<&Value>) -> serde_json::Map<String, Value> {
    let mut m = spec.and_then(Value::as_object).cloned().unwrap_or_default();
    m.retain(|_, v| !v.is_null());
    if let Some(Value::Object(res)) = m.get_mut("resources") {
        for list in ["requests", "limits"] {
            if let Some(Value::Object(q)) = res.get_mut(list) {
                for v in q.values_mut() {
                    if let Some(n) = v
                        .as_str()
                        .and_then(crate::quantity::value)
                        .and_then(serde_json::Number::from_f64)
                    {
                        *v = Value::Number(n);
                    }
                }
            }
        }
        // Semantic.DeepEqual: an empty map or slice is a nil one, and
        // ResourceRequirements is a value struct.
        res.retain(|_, v| !crate::internal_diff::is_go_empty(v));
        if res.is_empty() {
            m.remove("resources");
        }
    }
    if let Some(Value::Object(sel)) = m.get_mut("selector") {
        sel.retain(|_, v| !crate::internal_diff::is_go_empty(v));
    }
    m.retain(|_, v| !v.as_array().is_some_and(Vec::is_empty));
    m
}

fn storage_request(pvc: &Value) -> Option<f64> {
    pvc.pointer("/spec/resources/requests/storage")
        .and_then(Value::as_str)
        .and_then(crate::quantity::value)
}

/// `ValidatePersistentVolumeClaimUpdate`: the new claim's spec validation,
/// then the spec is immutable except
/// a first `volumeName`, a first `storageClassName`, and for a bound claim
/// its storage request and `volumeAttributesClassName`; a request may
/// shrink only down to above `status.capacity`; `volumeMode` is immutable.
/// The immutability error ends with `diff.Diff` of the two internal specs
/// as upstream compares them (after those exceptions).
fn pvc_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
    // ValidatePersistentVolumeClaim of the new claim comes first.
    claim_spec(new.get("spec"), errs);
    // The clones upstream compares, as v1 JSON, nulls as absent.
    let raw = |v: &Value| {
        let mut m = v
            .get("spec")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        m.retain(|_, v| !v.is_null());
        m
    };
    let mut old_c = raw(old);
    let mut new_c = raw(new);
    let absent = |m: &serde_json::Map<String, Value>, k: &str| {
        m.get(k).is_none_or(|v| v.as_str() == Some(""))
    };
    if absent(&old_c, "volumeName") {
        match new_c.get("volumeName") {
            Some(v) => old_c.insert("volumeName".into(), v.clone()),
            None => old_c.remove("volumeName"),
        };
    }
    let old_ann = old
        .pointer(&format!(
            "/metadata/annotations/{}",
            BETA_CLASS.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let new_ann = new
        .pointer(&format!(
            "/metadata/annotations/{}",
            BETA_CLASS.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let old_sc = old_c.get("storageClassName").and_then(Value::as_str);
    let new_sc = new_c.get("storageClassName").and_then(Value::as_str);
    let from_annotation = old_ann.is_some()
        && old_sc.is_none()
        && new_sc.is_some()
        && new_sc == old_ann
        && (new_ann.is_none() || new_ann == old_ann);
    let from_nil = new_sc.is_some() && old_sc.is_none() && (old_ann.is_none() || new_sc == old_ann);
    if from_annotation || from_nil {
        new_c.remove("storageClassName");
    }
    let bound = new.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    if bound
        && let Some(Value::Object(req)) = new_c
            .get_mut("resources")
            .and_then(|r| r.get_mut("requests"))
    {
        // A missing old request is a zero Quantity.
        let old_req = old.pointer("/spec/resources/requests/storage");
        req.insert(
            "storage".into(),
            old_req.cloned().unwrap_or_else(|| json!("0")),
        );
    }
    if bound {
        match old_c.get("volumeAttributesClassName") {
            Some(v) => new_c.insert("volumeAttributesClassName".into(), v.clone()),
            None => new_c.remove("volumeAttributesClassName"),
        };
    }
    let semantic =
        |m: &serde_json::Map<String, Value>| semantic_spec(Some(&Value::Object(m.clone())));
    if semantic(&old_c) != semantic(&new_c) {
        errs.push(FieldError::forbidden(
            "spec",
            format!(
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n{}",
                crate::internal_diff::diff(
                    "core.PersistentVolumeClaimSpec",
                    &Value::Object(old_c),
                    &Value::Object(new_c)
                )
            ),
        ));
    }
    let status_size = old
        .pointer("/status/capacity/storage")
        .and_then(Value::as_str)
        .and_then(crate::quantity::value)
        .unwrap_or(0.0);
    // A missing request is a zero Quantity.
    let (new_size, old_size) = (
        storage_request(new).unwrap_or(0.0),
        storage_request(old).unwrap_or(0.0),
    );
    if new_size < old_size && new_size <= status_size {
        // RecoverVolumeExpansionFailure (GA): down to above the capacity.
        errs.push(FieldError::forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        ));
    }
    volume_mode_immutable(new, old, errs);
}

/// `updatablePodSpecFields` as the spec error lists them.
const UPDATABLE_POD_SPEC_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `ValidatePodSpec`'s emulated part, of a pod's spec at `spec` or a pod
/// template's at `path` (`ValidatePodTemplateSpec` runs the same): the
/// containers' required fields, the affinity, `activeDeadlineSeconds` from
/// 1 to MaxInt32, the tolerations, in upstream's order.
fn pod_spec_at(spec: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    containers(spec, path, errs);
    if let Some(a) = spec
        .and_then(|s| s.get("affinity"))
        .filter(|a| a.is_object())
    {
        affinity(a, &format!("{path}.affinity"), errs);
    }
    if let Some(d) = spec
        .and_then(|s| s.get("activeDeadlineSeconds"))
        .and_then(Value::as_i64)
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.push(FieldError::invalid(
            &format!("{path}.activeDeadlineSeconds"),
            json!(d),
            format!("must be between 1 and {}, inclusive", i32::MAX),
        ));
    }
    if let Some(spec) = spec {
        tolerations(spec, path, errs);
    }
}

/// `validatePodMetadataAndSpec`'s emulated part, on create and update:
/// `ValidatePodSpec`'s ([`pod_spec_at`]), and images without surrounding
/// whitespace (validateContainersOnlyForPod: not for templates).
fn pod_spec(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    pod_spec_at(spec, "spec", errs);
    for key in ["containers", "initContainers"] {
        let list = spec.and_then(|s| s.get(key)).and_then(Value::as_array);
        for (i, c) in list.into_iter().flatten().enumerate() {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            if image.trim().len() != image.len() {
                errs.push(FieldError::invalid(
                    &format!("spec.{key}[{i}].image"),
                    json!(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
}

/// The items of a list field (none where it is absent or null).
fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A `[]string` field's entries.
fn string_items<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    items(v, key)
        .iter()
        .map(|s| s.as_str().unwrap_or_default())
        .collect()
}

/// An object field that is set (a nil pointer upstream otherwise).
fn set<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|v| v.is_object())
}

/// `ValidateLabelName`: a qualified name.
fn label_name(key: &str, path: &str, errs: &mut Vec<FieldError>) {
    for m in crate::validation::qualified_name(key) {
        errs.push(FieldError::invalid(path, json!(key), m));
    }
}

/// `validateAffinity` (ValidatePodSpec) of a pod's `spec.affinity` (or a
/// pod template's, at `path`): node
/// affinity's required selector (at least one term; each requirement's
/// operator, values and key, a label value in each value) and preferred
/// terms (a weight of 1-100, any label value), then pod affinity's and
/// anti-affinity's required and weighted terms (label and namespace
/// selectors, namespaces, matchLabelKeys and mismatchLabelKeys — on by
/// default in 1.36 — and a topologyKey that is a label name). A pod's
/// affinity can only have been stored valid, so the options that let an
/// update keep invalid label values are never on.
fn affinity(a: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let affinity_path = path;
    if let Some(na) = set(a, "nodeAffinity") {
        let path = format!("{affinity_path}.nodeAffinity");
        if let Some(req) = set(na, "requiredDuringSchedulingIgnoredDuringExecution") {
            let terms_path =
                format!("{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
            let terms = items(req, "nodeSelectorTerms");
            if terms.is_empty() {
                errs.push(required(
                    &terms_path,
                    "must have at least one node selector term",
                ));
            }
            for (i, term) in terms.iter().enumerate() {
                node_selector_term(term, false, &format!("{terms_path}[{i}]"), errs);
            }
        }
        let preferred_path = format!("{path}.preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in items(na, "preferredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let p = format!("{preferred_path}[{i}]");
            weight(t, &p, errs);
            let empty = json!({});
            let preference = set(t, "preference").unwrap_or(&empty);
            node_selector_term(preference, true, &format!("{p}.preference"), errs);
        }
    }
    for key in ["podAffinity", "podAntiAffinity"] {
        let Some(pa) = set(a, key) else { continue };
        let path = format!("{affinity_path}.{key}");
        for (i, t) in items(pa, "requiredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let p = format!("{path}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
            pod_affinity_term(t, &p, errs);
        }
        for (i, t) in items(pa, "preferredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .enumerate()
        {
            let p = format!("{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            weight(t, &p, errs);
            let empty = json!({});
            let term = set(t, "podAffinityTerm").unwrap_or(&empty);
            pod_affinity_term(term, &format!("{p}.podAffinityTerm"), errs);
        }
    }
}

/// A preferred term's weight: 1-100.
fn weight(t: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let w = t.get("weight").and_then(Value::as_i64).unwrap_or(0);
    if !(1..=100).contains(&w) {
        errs.push(FieldError::invalid(
            &format!("{path}.weight"),
            json!(w),
            "must be in the range 1-100",
        ));
    }
}

/// `ValidateNodeSelectorTerm`: its match expressions
/// (`ValidateNodeSelectorRequirement`), then its match fields
/// (`ValidateNodeFieldSelectorRequirement`: `In` or `NotIn` one
/// `metadata.name` that is a node name).
fn node_selector_term(term: &Value, any_value: bool, path: &str, errs: &mut Vec<FieldError>) {
    for (j, rq) in items(term, "matchExpressions").iter().enumerate() {
        let p = format!("{path}.matchExpressions[{j}]");
        let values = selector_requirement(rq, &p, true, errs);
        let key = rq.get("key").and_then(Value::as_str).unwrap_or("");
        label_name(key, &format!("{p}.key"), errs);
        if !any_value {
            label_values(&values, &format!("{p}.values"), errs);
        }
    }
    for (j, rq) in items(term, "matchFields").iter().enumerate() {
        let p = format!("{path}.matchFields[{j}]");
        let op = rq.get("operator").and_then(Value::as_str).unwrap_or("");
        let values = string_items(rq, "values");
        match op {
            "In" | "NotIn" => {
                if values.len() != 1 {
                    errs.push(required(
                        &format!("{p}.values"),
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    ));
                }
            }
            _ => errs.push(FieldError::invalid(
                &format!("{p}.operator"),
                json!(op),
                "not a valid selector operator",
            )),
        }
        let key = rq.get("key").and_then(Value::as_str).unwrap_or("");
        if key == "metadata.name" {
            for (i, v) in values.iter().enumerate() {
                for m in crate::validation::dns1123_subdomain(v) {
                    errs.push(FieldError::invalid(
                        &format!("{p}.values[{i}]"),
                        json!(v),
                        m,
                    ));
                }
            }
        } else {
            errs.push(FieldError::invalid(
                &format!("{p}.key"),
                json!(key),
                "not a valid field selector key",
            ));
        }
    }
}

/// A selector requirement's operator and the values it takes (a label
/// selector's `ValidateLabelSelectorRequirement`; a node selector's
/// `ValidateNodeSelectorRequirement`, which also takes `Gt` and `Lt` with
/// one value): its errors, and its values for the caller's own checks.
fn selector_requirement<'a>(
    rq: &'a Value,
    p: &str,
    node: bool,
    errs: &mut Vec<FieldError>,
) -> Vec<&'a str> {
    let op = rq.get("operator").and_then(Value::as_str).unwrap_or("");
    let values = string_items(rq, "values");
    match op {
        "In" | "NotIn" if values.is_empty() => errs.push(required(
            &format!("{p}.values"),
            "must be specified when `operator` is 'In' or 'NotIn'",
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
            &format!("{p}.values"),
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )),
        "Gt" | "Lt" if node && values.len() != 1 => errs.push(required(
            &format!("{p}.values"),
            "must be specified single value when `operator` is 'Lt' or 'Gt'",
        )),
        "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
        "Gt" | "Lt" if node => {}
        _ => errs.push(FieldError::invalid(
            &format!("{p}.operator"),
            json!(op),
            "not a valid selector operator",
        )),
    }
    values
}

/// Each value a label value.
fn label_values(values: &[&str], path: &str, errs: &mut Vec<FieldError>) {
    for (i, v) in values.iter().enumerate() {
        for m in crate::validation::label_value(v) {
            errs.push(FieldError::invalid(&format!("{path}[{i}]"), json!(v), m));
        }
    }
}

/// `ValidateLabelSelector` (apimachinery): its matchLabels (a label name and
/// value each), then its match expressions.
fn label_selector(sel: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let labels_path = format!("{path}.matchLabels");
    for (k, v) in sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        label_name(k, &labels_path, errs);
        let v = v.as_str().unwrap_or_default();
        for m in crate::validation::label_value(v) {
            errs.push(FieldError::invalid(&labels_path, json!(v), m));
        }
    }
    for (i, rq) in items(sel, "matchExpressions").iter().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let values = selector_requirement(rq, &p, false, errs);
        let key = rq.get("key").and_then(Value::as_str).unwrap_or("");
        label_name(key, &format!("{p}.key"), errs);
        label_values(&values, &format!("{p}.values"), errs);
    }
}

/// `validatePodAffinityTerm`: the label and namespace selectors, the
/// namespaces (each a DNS label, reported at `namespace`), matchLabelKeys
/// and mismatchLabelKeys (`ValidateMatchLabelKeysAndMismatchLabelKeys`),
/// and the topologyKey.
fn pod_affinity_term(term: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let selector = set(term, "labelSelector");
    if let Some(sel) = selector {
        label_selector(sel, &format!("{path}.labelSelector"), errs);
    }
    if let Some(sel) = set(term, "namespaceSelector") {
        label_selector(sel, &format!("{path}.namespaceSelector"), errs);
    }
    for ns in string_items(term, "namespaces") {
        for m in crate::validation::dns1123_label(ns) {
            errs.push(FieldError::invalid(
                &format!("{path}.namespace"),
                json!(ns),
                m,
            ));
        }
    }
    let match_keys = string_items(term, "matchLabelKeys");
    let mismatch_keys = string_items(term, "mismatchLabelKeys");
    for (key, keys) in [
        ("matchLabelKeys", &match_keys),
        ("mismatchLabelKeys", &mismatch_keys),
    ] {
        if keys.is_empty() {
            continue;
        }
        let p = format!("{path}.{key}");
        if selector.is_none() {
            errs.push(FieldError::forbidden(
                &p,
                "must not be specified when labelSelector is not set",
            ));
            continue;
        }
        for (i, k) in keys.iter().enumerate() {
            label_name(k, &format!("{p}[{i}]"), errs);
        }
    }
    if let Some(sel) = selector {
        // A key of matchLabelKeys (its last index) that a match expression
        // names after matchLabels or an earlier expression has: reported
        // at `<term>[i]`, as upstream's path is.
        let mut index = std::collections::HashMap::new();
        for (i, k) in match_keys.iter().enumerate() {
            index.insert(*k, i);
        }
        let mut seen: std::collections::HashSet<&str> = sel
            .get("matchLabels")
            .and_then(Value::as_object)
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for rq in items(sel, "matchExpressions") {
            let key = rq.get("key").and_then(Value::as_str).unwrap_or("");
            if let Some(i) = index.get(key)
                && seen.contains(key)
            {
                errs.push(FieldError::invalid(
                    &format!("{path}[{i}]"),
                    json!(key),
                    "exists in both matchLabelKeys and labelSelector",
                ));
            }
            seen.insert(key);
        }
    }
    for (i, k) in match_keys.iter().enumerate() {
        if mismatch_keys.contains(k) {
            errs.push(FieldError::invalid(
                &format!("{path}.matchLabelKeys[{i}]"),
                json!(k),
                "exists in both matchLabelKeys and mismatchLabelKeys",
            ));
        }
    }
    let topology_key = term
        .get("topologyKey")
        .and_then(Value::as_str)
        .unwrap_or("");
    let p = format!("{path}.topologyKey");
    if topology_key.is_empty() {
        errs.push(required(&p, "can not be empty"));
    }
    label_name(topology_key, &p, errs);
}

/// `ValidateTolerations` of a pod's `spec.tolerations` (a pod template's
/// at `<path>.tolerations`): a key that is a
/// label key (a toleration without one must be `Exists`), a value that is a
/// label value for `Equal` and none for `Exists`, `tolerationSeconds` only
/// with the `NoExecute` effect, and the known operators and effects. The
/// TaintTolerationComparisonOperators gate is off (alpha in 1.36), so `Lt`
/// and `Gt` are refused, as a pod could not have been created with them.
/// An operator and an effect are named string types, which a field error
/// writes as JSON (`.named()`); a toleration's value is a `string`.
fn tolerations(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let list = spec.get("tolerations").and_then(Value::as_array);
    for (i, t) in list.into_iter().flatten().enumerate() {
        let p = format!("{path}.tolerations[{i}]");
        let s = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("");
        let (key, op, value, effect) = (s("key"), s("operator"), s("value"), s("effect"));
        if !key.is_empty() {
            for m in crate::validation::qualified_name(key) {
                errs.push(FieldError::invalid(&format!("{p}.key"), json!(key), m));
            }
        }
        let op_path = format!("{p}.operator");
        if key.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(
                &op_path,
                json!(op),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ).named());
        }
        if t.get("tolerationSeconds").is_some_and(|v| !v.is_null()) && effect != "NoExecute" {
            errs.push(
                FieldError::invalid(
                    &format!("{p}.effect"),
                    json!(effect),
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
                .named(),
            );
        }
        match op {
            "Equal" | "" => {
                let msgs = crate::validation::label_value(value);
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(&op_path, json!(value), msgs.join(";")));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        &op_path,
                        json!(value),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            "Lt" | "Gt" => errs.push(
                FieldError::not_supported(&op_path, json!(op), &["Equal", "Exists", "Lt", "Gt"])
                    .named(),
            ),
            _ => errs
                .push(FieldError::not_supported(&op_path, json!(op), &["Equal", "Exists"]).named()),
        }
        if !effect.is_empty() && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect)
        {
            errs.push(
                FieldError::not_supported(
                    &format!("{p}.effect"),
                    json!(effect),
                    &["NoSchedule", "PreferNoSchedule", "NoExecute"],
                )
                .named(),
            );
        }
    }
}

/// A v1 object's fields with the nulls dropped (an absent field and a null
/// one are the same nil in the internal struct).
fn without_nulls(v: &Value) -> serde_json::Map<String, Value> {
    let mut m = v.as_object().cloned().unwrap_or_default();
    m.retain(|_, v| !v.is_null());
    m
}

/// `ValidatePodUpdate` (pkg/apis/core/validation) past the metadata: the
/// containers' required fields, no container added or removed, images
/// without surrounding whitespace, `activeDeadlineSeconds` only set or
/// lowered, tolerations only added (or their seconds changed) and valid,
/// scheduling gates only removed, and for a gated pod nodeSelector entries
/// only added and its required node affinity terms only added to; any
/// other change to the spec is refused with `diff.Diff` of the old spec
/// and the new one with those fields taken from the old.
fn pod_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    const SPEC: &str = "core.PodSpec";
    let empty = json!({});
    let new_spec = new.get("spec").filter(|s| s.is_object()).unwrap_or(&empty);
    let old_spec = old.get("spec").filter(|s| s.is_object()).unwrap_or(&empty);
    pod_spec(Some(new_spec), errs);
    let list = |s: &Value, k: &str| -> Vec<Value> {
        s.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    // ValidateContainerUpdates.
    for key in ["containers", "initContainers"] {
        let (n, o) = (list(new_spec, key), list(old_spec, key));
        if n.len() != o.len() {
            errs.push(FieldError::forbidden(
                &format!("spec.{key}"),
                "pod updates may not add or remove containers",
            ));
            return;
        }
        for (i, c) in n.iter().enumerate() {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            let path = format!("spec.{key}[{i}].image");
            if image.is_empty() {
                errs.push(required(&path, ""));
            }
            if image.trim().len() != image.len() {
                errs.push(FieldError::invalid(
                    &path,
                    json!(image),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    const ADS: &str = "spec.activeDeadlineSeconds";
    let deadline = |s: &Value| s.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match (deadline(new_spec), deadline(old_spec)) {
        (Some(n), _) if n < 0 || n > i64::from(i32::MAX) => {
            errs.push(FieldError::invalid(
                ADS,
                json!(n),
                format!("must be between 0 and {}, inclusive", i32::MAX),
            ));
            return;
        }
        (Some(n), Some(o)) if o < n => {
            errs.push(FieldError::invalid(
                ADS,
                json!(n),
                "must be less than or equal to previous value",
            ));
            return;
        }
        (None, Some(_)) => errs.push(FieldError::invalid(
            ADS,
            Value::Null,
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    // validateOnlyAddedTolerations: each old toleration is still there,
    // but for its tolerationSeconds.
    let new_tolerations = list(new_spec, "tolerations");
    // Compared as internal structs: an absent string is an empty one.
    let toleration = |t: &Value| {
        let mut m = without_nulls(t);
        m.retain(|_, v| v.as_str() != Some(""));
        m.remove("tolerationSeconds");
        m
    };
    if list(old_spec, "tolerations").iter().any(|o| {
        !new_tolerations
            .iter()
            .any(|n| toleration(n) == toleration(o))
    }) {
        errs.push(FieldError::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    } else {
        // Then ValidateTolerations again, after ValidatePodSpec's run: an
        // error comes twice in the causes, once in the message.
        tolerations(new_spec, "spec", errs);
    }
    // validateOnlyDeletedSchedulingGates.
    let gate_names = |s: &Value| -> Vec<String> {
        list(s, "schedulingGates")
            .iter()
            .map(|g| {
                g.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    let old_gates = gate_names(old_spec);
    let mut added: Vec<(usize, String)> = Vec::new();
    for (i, g) in gate_names(new_spec).into_iter().enumerate() {
        // A name given twice counts at its last index (a Go map).
        added.retain(|(_, n)| *n != g);
        if !old_gates.contains(&g) {
            added.push((i, g));
        }
    }
    for (i, g) in added {
        errs.push(FieldError::forbidden(
            &format!("spec.schedulingGates[{i}].name"),
            format!("only deletion is allowed, but found new scheduling gate '{g}'"),
        ));
    }
    if crate::internal_diff::semantically_equal(SPEC, new_spec, old_spec) {
        return;
    }
    // The new spec with the mutable fields taken from the old one.
    let mut munged = without_nulls(new_spec);
    let old_m = without_nulls(old_spec);
    for key in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = munged.get_mut(key) {
            let olds = list(old_spec, key);
            for (c, o) in cs.iter_mut().zip(olds.iter()) {
                if let Some(c) = c.as_object_mut() {
                    match o.get("image") {
                        Some(i) => c.insert("image".into(), i.clone()),
                        None => c.remove("image"),
                    };
                }
            }
        }
    }
    // Copied from the old object: absent where the old one is empty (a
    // nil slice, as decoded from storage).
    let take_old = |munged: &mut serde_json::Map<String, Value>, key: &str| {
        match old_m
            .get(key)
            .filter(|v| !crate::internal_diff::is_go_empty(v))
        {
            Some(v) => munged.insert(key.into(), v.clone()),
            None => munged.remove(key),
        };
    };
    for key in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        take_old(&mut munged, key);
    }
    let tgps = |m: &serde_json::Map<String, Value>| {
        m.get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    if tgps(&old_m).is_some_and(|o| o < 0) && tgps(&munged) == Some(1) {
        take_old(&mut munged, "terminationGracePeriodSeconds");
    }
    if !old_gates.is_empty() {
        // A gated pod: additions to nodeSelector are allowed, and to its
        // node affinity's required terms.
        let selector = |m: &serde_json::Map<String, Value>| {
            m.get("nodeSelector")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let (new_sel, old_sel) = (selector(&munged), selector(&old_m));
        if new_sel != old_sel {
            if old_sel.iter().any(|(k, v)| new_sel.get(k) != Some(v)) {
                // Printed as JSON, keys sorted as encoding/json sorts a map's.
                let mut sorted: Vec<(&String, &Value)> = new_sel.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                errs.push(FieldError::invalid(
                    "spec.nodeSelector",
                    Value::Object(
                        sorted
                            .into_iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    ),
                    "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                ));
            }
            take_old(&mut munged, "nodeSelector");
        }
        let old_na = old_m
            .get("affinity")
            .and_then(|a| a.get("nodeAffinity"))
            .filter(|v| !v.is_null());
        let new_affinity = munged.get("affinity").filter(|v| !v.is_null()).cloned();
        let new_na = new_affinity
            .as_ref()
            .and_then(|a| a.get("nodeAffinity"))
            .filter(|v| !v.is_null());
        if old_na != new_na {
            node_affinity_mutation(new_na, old_na, errs);
            let other = |a: &Value| {
                ["podAffinity", "podAntiAffinity"]
                    .iter()
                    .any(|k| a.get(*k).is_some_and(|v| !v.is_null()))
            };
            match (&new_affinity, old_na) {
                (None, None) => {}
                (None, Some(o)) => {
                    munged.insert("affinity".into(), json!({"nodeAffinity": o}));
                }
                (Some(a), _) if old_m.get("affinity").is_none() && !other(a) => {
                    munged.remove("affinity");
                }
                (Some(a), o) => {
                    let mut a = without_nulls(a);
                    match o {
                        Some(o) => a.insert("nodeAffinity".into(), o.clone()),
                        None => a.remove("nodeAffinity"),
                    };
                    munged.insert("affinity".into(), Value::Object(a));
                }
            }
        }
    }
    let munged = Value::Object(munged);
    if !crate::internal_diff::semantically_equal(SPEC, &munged, old_spec) {
        errs.push(FieldError::forbidden(
            "spec",
            format!(
                "pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{}",
                crate::internal_diff::diff(SPEC, old_spec, &munged)
            ),
        ));
    }
}

/// `validateNodeAffinityMutation`, for a gated pod: where the old node
/// affinity has required node selector terms, the new one has as many, each
/// with the old one's match expressions and fields first (a term that had
/// none gets none). Preferred terms, and required ones where there were
/// none, may change in any way.
fn node_affinity_mutation(new: Option<&Value>, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    const PATH: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    fn required(a: Option<&Value>) -> Option<&Value> {
        a.and_then(|a| a.get("requiredDuringSchedulingIgnoredDuringExecution"))
            .filter(|r| !r.is_null())
    }
    let Some(old_required) = required(old) else {
        return;
    };
    let terms = |r: Option<&Value>| {
        r.and_then(|r| r.get("nodeSelectorTerms"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let old_terms = terms(Some(old_required));
    let new_required = required(new);
    let new_terms = terms(new_required);
    // A field error prints its value as json.Marshal of the internal struct.
    let marshal = |ty: &str, v: &Value| -> Value {
        serde_json::from_str(&crate::internal_diff::marshal_indent(
            ty,
            v,
            crate::internal_diff::Side::New,
        ))
        .unwrap_or(Value::Null)
    };
    if !old_terms.is_empty() && old_terms.len() != new_terms.len() {
        // newTerms: nil without a required node selector.
        let value = new_required
            .and_then(|r| r.get("nodeSelectorTerms"))
            .map_or(Value::Null, |t| marshal("[]core.NodeSelectorTerm", t));
        errs.push(FieldError::invalid(
            PATH,
            value,
            "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
        ));
        return;
    }
    let reqs = |t: &Value, k: &str| -> Vec<Value> {
        t.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for (i, (new_t, old_t)) in new_terms.iter().zip(&old_terms).enumerate() {
        let (old_e, old_f) = (reqs(old_t, "matchExpressions"), reqs(old_t, "matchFields"));
        let (new_e, new_f) = (reqs(new_t, "matchExpressions"), reqs(new_t, "matchFields"));
        // validateNodeSelectorTermHasOnlyAdditions.
        let prefix = |new: &[Value], old: &[Value]| {
            old.is_empty()
                || (new.len() >= old.len()
                    && crate::internal_diff::semantically_equal(
                        "[]core.NodeSelectorRequirement",
                        &Value::Array(new[..old.len()].to_vec()),
                        &Value::Array(old.to_vec()),
                    ))
        };
        let was_empty = old_e.is_empty() && old_f.is_empty();
        let only_added = !(was_empty && (!new_e.is_empty() || !new_f.is_empty()))
            && prefix(&new_e, &old_e)
            && prefix(&new_f, &old_f);
        if !only_added {
            errs.push(FieldError::invalid(
                &format!("{PATH}[{i}]"),
                marshal("core.NodeSelectorTerm", new_t),
                "only additions are allowed (no mutations or deletions)",
            ));
        }
    }
}

/// `ValidatePersistentVolumeUpdate`: the new volume's spec validation, then
/// the volume source is immutable (but for a first
/// `csi.controllerExpandSecretRef`), with `diff.Diff` of the internal
/// `PersistentVolumeSource`s; `volumeMode` is immutable, so is a node
/// affinity once set, and a volumeAttributesClassName may not be removed.
fn pv_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    // The strategy's ValidateUpdate runs ValidatePersistentVolume of the
    // new volume, and ValidatePersistentVolumeUpdate runs it again: its
    // errors come twice (the message names each once).
    volume_spec(new.get("spec"), errs);
    volume_spec(new.get("spec"), errs);
    let source = |v: &Value| {
        let mut m = serde_json::Map::new();
        if let Some(spec) = v.get("spec").and_then(Value::as_object) {
            for k in PV_SOURCES {
                if let Some(x) = spec.get(*k).filter(|x| !x.is_null()) {
                    m.insert((*k).to_string(), x.clone());
                }
            }
        }
        m
    };
    let (old_s, mut new_s) = (source(old), source(new));
    let expand = |m: &serde_json::Map<String, Value>| {
        m.get("csi").map(|c| {
            c.get("controllerExpandSecretRef")
                .is_some_and(|r| !r.is_null())
        })
    };
    if expand(&old_s) == Some(false)
        && expand(&new_s) == Some(true)
        && let Some(Value::Object(csi)) = new_s.get_mut("csi")
    {
        csi.remove("controllerExpandSecretRef");
    }
    const SOURCE: &str = "core.PersistentVolumeSource";
    let (old_s, new_s) = (Value::Object(old_s), Value::Object(new_s));
    if !crate::internal_diff::semantically_equal(SOURCE, &old_s, &new_s) {
        errs.push(FieldError::forbidden(
            "spec.persistentvolumesource",
            format!(
                "spec.persistentvolumesource is immutable after creation\n{}",
                crate::internal_diff::diff(SOURCE, &old_s, &new_s)
            ),
        ));
    }
    volume_mode_immutable(new, old, errs);
    // The MutablePVNodeAffinity gate is off (alpha in 1.36): a node
    // affinity once set may only move its requirements' keys from a beta
    // label to the GA one.
    let affinity = |v: &Value| {
        v.pointer("/spec/nodeAffinity")
            .filter(|a| !a.is_null())
            .cloned()
    };
    if let Some(old_a) = affinity(old) {
        const AFFINITY: &str = "core.VolumeNodeAffinity";
        let new_a = affinity(new);
        let equal = new_a.as_ref().is_some_and(|n| {
            crate::internal_diff::semantically_equal(AFFINITY, n, &beta_keys_to_ga(&old_a, n))
        });
        if !equal {
            // The value is json.Marshal of the internal struct.
            let value = match &new_a {
                None => Value::Null,
                Some(n) => serde_json::from_str(&crate::internal_diff::marshal_indent(
                    AFFINITY,
                    n,
                    crate::internal_diff::Side::New,
                ))
                .unwrap_or(Value::Null),
            };
            errs.push(FieldError::invalid(
                "nodeAffinity",
                value,
                "field is immutable, except for updating from beta label to GA",
            ));
        }
    }
    let class = |v: &Value| {
        v.pointer("/spec/volumeAttributesClassName")
            .filter(|c| !c.is_null())
            .cloned()
    };
    if class(old).is_some() && class(new).is_none() {
        errs.push(FieldError::forbidden(
            "spec.volumeAttributesClassName",
            "update from non-nil value to nil is forbidden",
        ));
    }
}

/// The old volume node affinity with each requirement's key replaced by
/// the new one's at the same place where that is its GA label
/// (`getMaskNodeSelectorLabelChangeEqualities`).
fn beta_keys_to_ga(old: &Value, new: &Value) -> Value {
    const BETA_TO_GA: &[(&str, &str)] = &[
        (
            "failure-domain.beta.kubernetes.io/zone",
            "topology.kubernetes.io/zone",
        ),
        (
            "failure-domain.beta.kubernetes.io/region",
            "topology.kubernetes.io/region",
        ),
        ("beta.kubernetes.io/os", "kubernetes.io/os"),
        ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
        (
            "beta.kubernetes.io/instance-type",
            "node.kubernetes.io/instance-type",
        ),
    ];
    let mut out = old.clone();
    let terms = |v: &Value| {
        v.pointer("/required/nodeSelectorTerms")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let new_terms = terms(new);
    if let Some(Value::Array(ts)) = out.pointer_mut("/required/nodeSelectorTerms") {
        for (t, nt) in ts.iter_mut().zip(new_terms.iter()) {
            for list in ["matchExpressions", "matchFields"] {
                let new_reqs = nt.get(list).and_then(Value::as_array);
                let Some(Value::Array(reqs)) = t.get_mut(list) else {
                    continue;
                };
                for (r, nr) in reqs.iter_mut().zip(new_reqs.into_iter().flatten()) {
                    let (Some(ok), Some(nk)) = (
                        r.get("key").and_then(Value::as_str),
                        nr.get("key").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    if ok != nk && BETA_TO_GA.iter().any(|(b, g)| *b == ok && *g == nk) {
                        r["key"] = json!(nk);
                    }
                }
            }
        }
    }
    out
}

/// `ValidatePersistentVolumeClaimSpec`'s data source rules: `dataSource`
/// may not be set beside a `dataSourceRef` to another namespace, and must
/// otherwise match it. (The value upstream reports is a `*field.Path`,
/// which prints as `{}`.)
fn claim_data_sources(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    let get = |k: &str| spec.and_then(|s| s.get(k)).filter(|v| !v.is_null());
    let (Some(ds), Some(r)) = (get("dataSource"), get("dataSourceRef")) else {
        return;
    };
    let s = |v: &Value, k: &str| v.get(k).filter(|v| !v.is_null()).cloned();
    let detail = if s(r, "namespace").is_some_and(|n| n.as_str() != Some("")) {
        "may not be specified when dataSourceRef.namespace is specified"
    } else if s(ds, "apiGroup") != s(r, "apiGroup")
        || ds.get("kind").and_then(Value::as_str).unwrap_or("")
            != r.get("kind").and_then(Value::as_str).unwrap_or("")
        || ds.get("name").and_then(Value::as_str).unwrap_or("")
            != r.get("name").and_then(Value::as_str).unwrap_or("")
    {
        "must match dataSourceRef"
    } else {
        return;
    };
    errs.push(FieldError::invalid("spec", json!({}), detail));
}

/// The selector must be set; the template's labels must match it
/// (ValidateDeploymentSpec, ValidateReplicaSetSpec); the template's pod
/// spec is validated (`ValidatePodTemplateSpecForReplicaSet`), its restart
/// policy `Always` and without `activeDeadlineSeconds`.
fn selector_and_template(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    let sel = spec.and_then(|s| s.get("selector"));
    if is_empty(sel) {
        errs.push(required("spec.selector", ""));
    } else {
        let sel = crate::selector::LabelSelector::from_label_selector(sel.unwrap_or(&Value::Null));
        template_labels_match(spec, |labels| sel.matches(labels), errs);
    }
    replicated_template(spec, "ReplicaSet", errs);
}

/// The template's labels match the selector, or `spec.template.metadata.labels`
/// is invalid (the value the map upstream prints).
fn template_labels_match(
    spec: Option<&Value>,
    matches: impl Fn(Option<&serde_json::Map<String, Value>>) -> bool,
    errs: &mut Vec<FieldError>,
) {
    let labels = spec.and_then(|s| s.pointer("/template/metadata/labels"));
    if !matches(labels.and_then(Value::as_object)) {
        errs.push(FieldError {
            named: false,
            kind: FieldErrorType::Invalid,
            field: "spec.template.metadata.labels".into(),
            value: None,
            detail: format!(
                "{}: `selector` does not match template `labels`",
                go_string_map(labels)
            ),
        });
    }
}

/// A ReplicaSet's (a Deployment's) or a ReplicationController's template:
/// its pod spec, a restart policy of `Always`, no `activeDeadlineSeconds`
/// (`ValidatePodTemplateSpecForReplicaSet`, `ValidatePodTemplateSpecForRC`).
fn replicated_template(spec: Option<&Value>, owner: &str, errs: &mut Vec<FieldError>) {
    let pod = spec.and_then(|s| s.pointer("/template/spec"));
    pod_spec_at(pod, "spec.template.spec", errs);
    let policy = pod
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if policy != "Always" {
        errs.push(
            FieldError::not_supported(
                "spec.template.spec.restartPolicy",
                json!(policy),
                &["Always"],
            )
            .named(),
        );
    }
    if pod
        .and_then(|s| s.get("activeDeadlineSeconds"))
        .is_some_and(|d| !d.is_null())
    {
        errs.push(FieldError::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
}

/// `ValidateReplicationControllerSpec`'s emulated part: a selector (a map,
/// defaulted from the template's labels), and the template
/// (`ValidatePodTemplateSpecForRC`): its labels matching the selector, its
/// pod spec, restart policy and no `activeDeadlineSeconds`.
fn controller_spec(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    let sel = spec
        .and_then(|s| s.get("selector"))
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty());
    if sel.is_none() {
        errs.push(required("spec.selector", ""));
    }
    if spec
        .and_then(|s| s.get("template"))
        .is_none_or(Value::is_null)
    {
        errs.push(required("spec.template", ""));
        return;
    }
    if let Some(sel) = sel {
        template_labels_match(
            spec,
            |labels| {
                sel.iter().all(|(k, v)| {
                    labels.and_then(|l| l.get(k)).and_then(Value::as_str) == v.as_str()
                })
            },
            errs,
        );
    }
    replicated_template(spec, "ReplicationController", errs);
}

/// `ValidateJobSpec`'s emulated part: the template's pod spec
/// (`validateJobSpec` runs `ValidatePodTemplateSpec`), its restart policy
/// `OnFailure` or `Never`, then the selector, set and matching the
/// template's labels.
fn job_spec(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    let pod = spec.and_then(|s| s.pointer("/template/spec"));
    pod_spec_at(pod, "spec.template.spec", errs);
    let policy = pod
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str)
        .unwrap_or("");
    match policy {
        "OnFailure" | "Never" => {}
        "Always" | "" => errs.push(required(
            "spec.template.spec.restartPolicy",
            "valid values: \"OnFailure\", \"Never\"",
        )),
        other => errs.push(
            FieldError::not_supported(
                "spec.template.spec.restartPolicy",
                json!(other),
                &["OnFailure", "Never"],
            )
            .named(),
        ),
    }
    let sel = spec.and_then(|s| s.get("selector"));
    if is_empty(sel) {
        errs.push(required("spec.selector", ""));
    } else {
        let sel = crate::selector::LabelSelector::from_label_selector(sel.unwrap_or(&Value::Null));
        template_labels_match(spec, |labels| sel.matches(labels), errs);
    }
}

/// A claim's or a volume's `spec.volumeMode` may not change (upstream's
/// path for this one is `volumeMode`, without `spec.`).
fn volume_mode_immutable(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let mode = |v: &Value| v.pointer("/spec/volumeMode").cloned();
    if mode(new) != mode(old) {
        errs.push(FieldError::invalid(
            "volumeMode",
            mode(new).unwrap_or_else(|| json!("null")),
            "field is immutable",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{RESOURCES, find};

    fn def(g: &str, r: &str) -> &'static ResourceDef {
        &RESOURCES[find(g, "v1", r).unwrap_or(0)]
    }

    #[test]
    fn pod_without_containers_or_image() {
        let e = validate_create(def("", "pods"), &json!({"spec": {}}));
        assert_eq!(e[0].to_string(), "spec.containers: Required value");
        let e = validate_create(
            def("", "pods"),
            &json!({"spec": {"containers": [{"name": "c"}, {"name": "c", "image": "x"}]}}),
        );
        let texts: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "spec.containers[0].image: Required value",
                "spec.containers[1].name: Duplicate value: \"c\""
            ]
        );
    }

    #[test]
    fn pvc_and_pv_required_fields() {
        let e = validate_create(def("", "persistentvolumeclaims"), &json!({"spec": {}}));
        assert_eq!(
            e[0].to_string(),
            "spec.accessModes: Required value: at least 1 access mode is required"
        );
        assert_eq!(e[1].to_string(), "spec.resources[storage]: Required value");
        let e = validate_create(
            def("", "persistentvolumes"),
            &json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}}),
        );
        assert_eq!(
            e[0].to_string(),
            "spec: Required value: must specify a volume type"
        );
    }

    #[test]
    fn deployment_selector_must_match_template() {
        let d = json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let e = validate_create(def("apps", "deployments"), &d);
        assert_eq!(
            e[0].to_string(),
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"b\"}: `selector` does not match template `labels`"
        );
    }

    fn pvc(storage: &str, extra: Value) -> Value {
        let mut v = json!({"metadata": {"name": "c"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}, "volumeMode": "Filesystem"}});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            for (k, x) in e {
                if k == "spec" {
                    if let (Some(Value::Object(s)), Value::Object(xs)) = (m.get_mut("spec"), x) {
                        s.extend(xs);
                    }
                } else {
                    m.insert(k, x);
                }
            }
        }
        v
    }

    fn texts(e: Vec<FieldError>) -> Vec<String> {
        e.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn bound_claim_requests_may_grow_and_shrink_only_above_capacity() {
        let d = def("", "persistentvolumeclaims");
        let bound = json!({"spec": {"volumeName": "pv"}, "status": {"phase": "Bound", "capacity": {"storage": "2Gi"}}});
        let old = pvc("2Gi", bound.clone());
        assert!(validate_update(d, &pvc("3Gi", bound.clone()), &old).is_empty());
        let expanded = pvc("3Gi", bound.clone());
        // Back from a failed expansion, down to above the capacity: fine.
        assert!(validate_update(d, &pvc("2560Mi", bound.clone()), &expanded).is_empty());
        assert_eq!(
            texts(validate_update(d, &pvc("1Gi", bound.clone()), &expanded)),
            [
                "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
            ]
        );
        // The same quantity in another unit is no change.
        assert!(validate_update(d, &pvc("2048Mi", bound), &old).is_empty());
    }

    #[test]
    fn claim_spec_allows_a_first_volume_name_and_class_only() {
        let d = def("", "persistentvolumeclaims");
        let old = pvc("1Gi", json!({}));
        let named = pvc("1Gi", json!({"spec": {"volumeName": "pv-1"}}));
        assert!(validate_update(d, &named, &old).is_empty());
        let classed = pvc("1Gi", json!({"spec": {"storageClassName": "fast"}}));
        assert!(validate_update(d, &classed, &old).is_empty());
        let renamed = pvc("1Gi", json!({"spec": {"volumeName": "pv-2"}}));
        let e = texts(validate_update(d, &renamed, &named));
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n"),
            "{e:?}"
        );
        assert!(
            e[0].contains("\n- \"VolumeName\": \"pv-1\",\n+ \"VolumeName\": \"pv-2\",\n"),
            "{e:?}"
        );
        let block = pvc("1Gi", json!({"spec": {"volumeMode": "Block"}}));
        let e = texts(validate_update(d, &block, &old));
        assert_eq!(
            e.last().map(String::as_str),
            Some("volumeMode: Invalid value: \"Block\": field is immutable")
        );
    }
}

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
    let inner: Vec<String> = parts.iter().map(|(k, v)| format!("{k:?}:{v:?}")).collect();
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
        ("", "pods") => containers(spec, "spec", &mut errs),
        ("", "persistentvolumeclaims") => {
            if is_empty(spec.and_then(|s| s.get("accessModes"))) {
                errs.push(required(
                    "spec.accessModes",
                    "at least 1 access mode is required",
                ));
            }
            if is_empty(spec.and_then(|s| s.pointer("/resources/requests/storage"))) {
                errs.push(required("spec.resources[storage]", ""));
            }
        }
        ("", "persistentvolumes") => {
            if is_empty(spec.and_then(|s| s.get("capacity"))) {
                errs.push(required("spec.capacity", ""));
            }
            if is_empty(spec.and_then(|s| s.get("accessModes"))) {
                errs.push(required("spec.accessModes", ""));
            }
            let sources = PV_SOURCES
                .iter()
                .filter(|k| spec.and_then(|s| s.get(**k)).is_some_and(|v| !v.is_null()))
                .count();
            if sources == 0 {
                errs.push(required("spec", "must specify a volume type"));
            }
        }
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
        }
        ("batch", "jobs") => {
            // ValidateJobSpec / validateJobTemplate: only these restart policies.
            let policy = spec
                .and_then(|s| s.pointer("/template/spec/restartPolicy"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if policy != "OnFailure" && policy != "Never" {
                errs.push(FieldError::not_supported(
                    "spec.template.spec.restartPolicy",
                    json!(policy),
                    &["OnFailure", "Never"],
                ));
            }
            selector_and_template(spec, &mut errs);
        }
        ("apps", "deployments" | "replicasets") => {
            selector_and_template(spec, &mut errs);
        }
        _ => {}
    }
    errs
}

/// The selector must be set and match the template's labels; the template
/// needs containers (ValidateDeploymentSpec, ValidateReplicaSetSpec,
/// ValidateJobSpec).
fn selector_and_template(spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    let sel = spec.and_then(|s| s.get("selector"));
    if is_empty(sel) {
        errs.push(required("spec.selector", ""));
    } else {
        let labels = spec.and_then(|s| s.pointer("/template/metadata/labels"));
        let sel = crate::selector::LabelSelector::from_label_selector(sel.unwrap_or(&Value::Null));
        if !sel.matches(labels.and_then(Value::as_object)) {
            errs.push(FieldError {
                kind: FieldErrorType::Invalid,
                field: "spec.template.metadata.labels".into(),
                value: Some(Value::String(String::new())),
                detail: String::new(),
            });
            // Rendered below with the map value upstream prints.
            if let Some(e) = errs.last_mut() {
                e.value = None;
                e.detail = format!(
                    "{}: `selector` does not match template `labels`",
                    go_string_map(labels)
                );
            }
        }
    }
    containers(
        spec.and_then(|s| s.pointer("/template/spec")),
        "spec.template.spec",
        errs,
    );
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
}

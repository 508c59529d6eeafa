//! The user's objects the scenarios create: claims, volumes, pods and
//! load-balancer Services, as a user would write them. Every object carries
//! the run label so that the observer (and a shared real cluster) can tell
//! the run's objects from others.

use serde_json::{Value, json};

/// Label on every object a run creates (value: the run id).
pub const RUN_LABEL: &str = "e2e.protection-manager.io/run";

/// A 1Gi ReadWriteOnce claim of the default StorageClass (dynamically
/// provisioned: kube-sim's hostPath provisioner, kind's local-path), as
/// upstream's PVC-protection e2e creates it.
pub fn dynamic_pvc(run: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}
        }
    })
}

/// A hostPath PV labelled for a selector (upstream's PV-protection e2e:
/// `storageClassName: ""`, Retain).
pub fn host_path_pv(run: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {RUN_LABEL: run, "e2e.protection-manager.io/pv": name}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": format!("/tmp/protection-e2e/{name}"), "type": "DirectoryOrCreate"}
        }
    })
}

/// A claim that selects the PV `pv` (empty storageClassName, so no
/// provisioning).
pub fn pvc_for_pv(run: &str, name: &str, pv: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "selector": {"matchLabels": {"e2e.protection-manager.io/pv": pv}},
            "resources": {"requests": {"storage": "1Gi"}}
        }
    })
}

/// A pod mounting `claims` (left to the scheduler: no nodeName).
pub fn pod_with_claims(run: &str, name: &str, image: &str, claims: &[&str]) -> Value {
    let volumes: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(
            |(i, c)| json!({"name": format!("vol-{i}"), "persistentVolumeClaim": {"claimName": c}}),
        )
        .collect();
    let mounts: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, _)| json!({"name": format!("vol-{i}"), "mountPath": format!("/mnt/vol-{i}")}))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": image, "volumeMounts": mounts}],
            "volumes": volumes
        }
    })
}

/// A TCP `type: LoadBalancer` Service of the manager's class.
pub fn lb_service(run: &str, name: &str, class: &str) -> Value {
    tcp_service(
        run,
        name,
        json!({"type": "LoadBalancer", "loadBalancerClass": class}),
    )
}

/// A TCP Service on port 80 selecting `app: <name>`, with `spec` fields.
fn tcp_service(run: &str, name: &str, spec: Value) -> Value {
    let mut svc = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
        }
    });
    if let (Some(into), Value::Object(fields)) = (svc["spec"].as_object_mut(), spec) {
        into.extend(fields);
    }
    svc
}

/// A VolumeAttributesClass (storage.k8s.io/v1) of a made-up CSI driver.
pub fn vac(run: &str, name: &str) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttributesClass",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "driverName": "csi.e2e.protection-manager.io",
        "parameters": {"iops": "3000"}
    })
}

/// A claim of `class` (spec.volumeAttributesClassName) that stays Pending
/// (empty storageClassName and no matching volume): a Pending claim still
/// holds its class (docs/upstream-semantics.md §10.3).
pub fn pending_pvc_with_vac(run: &str, name: &str, class: Option<&str>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "selector": {"matchLabels": {"e2e.protection-manager.io/pv": format!("{name}-none")}},
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeAttributesClassName": class
        }
    })
}

/// An Available PV naming a VolumeAttributesClass. kube-apiserver accepts
/// `volumeAttributesClassName` only on a CSI volume ("spec.csi: Required
/// value: has to be specified when using volumeAttributesClassName"), so it
/// is one, of a driver no node runs (nothing mounts it).
pub fn csi_pv_with_vac(run: &str, name: &str, class: &str) -> Value {
    let mut v = host_path_pv(run, name);
    let spec = &mut v["spec"];
    if let Some(m) = spec.as_object_mut() {
        m.remove("hostPath");
    }
    spec["csi"] = json!({"driver": "csi.e2e.protection-manager.io", "volumeHandle": name});
    spec["volumeAttributesClassName"] = json!(class);
    v
}

/// A ServiceCIDR (networking.k8s.io/v1) of one range.
pub fn service_cidr(run: &str, name: &str, cidr: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {"cidrs": [cidr]}
    })
}

/// A TCP `type: ClusterIP` Service asking for the cluster IP `ip` (the API
/// server allocates it from the ServiceCIDR that contains it, or refuses).
pub fn cluster_ip_service(run: &str, name: &str, ip: &str) -> Value {
    tcp_service(run, name, json!({"type": "ClusterIP", "clusterIP": ip}))
}

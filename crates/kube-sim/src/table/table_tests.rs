//! Table rendering cases; each names the upstream printer behaviour.

use super::*;

fn now() -> jiff::Timestamp {
    "2026-01-01T01:00:00Z".parse().expect("timestamp")
}
const HOUR_AGO: &str = "2026-01-01T00:00:00Z";

fn cells(resource: &str, group: &str, o: Value) -> Vec<Value> {
    let t = to_table(resource, group, &[&o], "None", json!({}), now());
    t["rows"][0]["cells"].as_array().cloned().expect("cells")
}

fn column_names(resource: &str, group: &str) -> Vec<String> {
    let t = to_table(
        resource,
        group,
        &[],
        "",
        json!({"resourceVersion": "7"}),
        now(),
    );
    t["columnDefinitions"]
        .as_array()
        .expect("cols")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn columns_match_upstream_printers() {
    let cases: [(&str, &str, &[&str]); 10] = [
        (
            "pods",
            "",
            &[
                "Name",
                "Ready",
                "Status",
                "Restarts",
                "Age",
                "IP",
                "Node",
                "Nominated Node",
                "Readiness Gates",
            ],
        ),
        (
            "services",
            "",
            &[
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age",
                "Selector",
            ],
        ),
        (
            "persistentvolumes",
            "",
            &[
                "Name",
                "Capacity",
                "Access Modes",
                "Reclaim Policy",
                "Status",
                "Claim",
                "StorageClass",
                "VolumeAttributesClass",
                "Reason",
                "Age",
                "VolumeMode",
            ],
        ),
        (
            "persistentvolumeclaims",
            "",
            &[
                "Name",
                "Status",
                "Volume",
                "Capacity",
                "Access Modes",
                "StorageClass",
                "VolumeAttributesClass",
                "Age",
                "VolumeMode",
            ],
        ),
        (
            "deployments",
            "apps",
            &[
                "Name",
                "Ready",
                "Up-to-date",
                "Available",
                "Age",
                "Containers",
                "Images",
                "Selector",
            ],
        ),
        ("leases", "coordination.k8s.io", &["Name", "Holder", "Age"]),
        (
            "events",
            "",
            &[
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name",
            ],
        ),
        (
            "nodes",
            "",
            &[
                "Name",
                "Status",
                "Roles",
                "Age",
                "Version",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime",
            ],
        ),
        ("namespaces", "", &["Name", "Status", "Age"]),
        (
            "clusterroles",
            "rbac.authorization.k8s.io",
            &["Name", "Created At"],
        ),
    ];
    for (res, group, want) in cases {
        assert_eq!(
            column_names(res, group),
            want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{res}"
        );
    }
    let t = to_table("pods", "", &[], "", json!({"resourceVersion": "7"}), now());
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(t["metadata"]["resourceVersion"], "7");
    assert_eq!(t["columnDefinitions"][0]["format"], "name");
    assert_eq!(t["columnDefinitions"][5]["priority"], 1);
    assert!(
        t["columnDefinitions"][0]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Name must be unique"))
    );
}

#[test]
fn rows_match_upstream_printers() {
    struct Case {
        name: &'static str,
        resource: &'static str,
        group: &'static str,
        obj: Value,
        want: Value,
    }
    let cases = [
        Case {
            name: "a PV being deleted shows Terminating and its claim",
            resource: "persistentvolumes",
            group: "",
            obj: json!({"metadata": {"name": "pv1", "creationTimestamp": HOUR_AGO, "deletionTimestamp": HOUR_AGO},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast",
                         "claimRef": {"namespace": "ns", "name": "c"}},
                "status": {"phase": "Bound"}}),
            want: json!([
                "pv1",
                "1Gi",
                "RWO,RWX",
                "Retain",
                "Terminating",
                "ns/c",
                "fast",
                "<unset>",
                "",
                "60m",
                "<unset>"
            ]),
        },
        Case {
            name: "a bound PVC shows capacity and modes from status",
            resource: "persistentvolumeclaims",
            group: "",
            obj: json!({"metadata": {"name": "c", "creationTimestamp": HOUR_AGO},
                "spec": {"volumeName": "pv1", "storageClassName": "fast", "volumeMode": "Filesystem"},
                "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}}),
            want: json!([
                "c",
                "Bound",
                "pv1",
                "1Gi",
                "RWO",
                "fast",
                "<unset>",
                "60m",
                "Filesystem"
            ]),
        },
        Case {
            name: "a LoadBalancer service without ingress is <pending>",
            resource: "services",
            group: "",
            obj: json!({"metadata": {"name": "s", "creationTimestamp": HOUR_AGO},
                "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1", "selector": {"b": "2", "a": "1"},
                         "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]}}),
            want: json!([
                "s",
                "LoadBalancer",
                "10.0.0.1",
                "<pending>",
                "80:30080/TCP,53/UDP",
                "60m",
                "a=1,b=2"
            ]),
        },
        Case {
            name: "a LoadBalancer service shows its ingress IPs",
            resource: "services",
            group: "",
            obj: json!({"metadata": {"name": "s", "creationTimestamp": HOUR_AGO},
                "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1", "ports": [{"port": 443, "protocol": "TCP"}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example"}]}}}),
            want: json!([
                "s",
                "LoadBalancer",
                "10.0.0.1",
                "203.0.113.7,lb.example",
                "443/TCP",
                "60m",
                "<none>"
            ]),
        },
        Case {
            name: "a running pod with one restart",
            resource: "pods",
            group: "",
            obj: json!({"metadata": {"name": "p", "creationTimestamp": HOUR_AGO},
                "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
                "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.5"}], "containerStatuses": [
                    {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}},
                     "lastState": {"terminated": {"finishedAt": "2026-01-01T00:55:00Z"}}},
                    {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}),
            want: json!([
                "p",
                "1/2",
                "CrashLoopBackOff",
                "1 (5m ago)",
                "60m",
                "10.1.0.5",
                "n1",
                "<none>",
                "<none>"
            ]),
        },
        Case {
            name: "a pod being deleted is Terminating",
            resource: "pods",
            group: "",
            obj: json!({"metadata": {"name": "p", "creationTimestamp": HOUR_AGO, "deletionTimestamp": HOUR_AGO},
                "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending"}}),
            want: json!([
                "p",
                "0/1",
                "Terminating",
                "0",
                "60m",
                "<none>",
                "<none>",
                "<none>",
                "<none>"
            ]),
        },
        Case {
            name: "deployment ready/desired, containers, images and selector",
            resource: "deployments",
            group: "apps",
            obj: json!({"metadata": {"name": "d", "creationTimestamp": HOUR_AGO},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}},
                "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
            want: json!(["d", "2/3", 3, 2, "60m", "web", "nginx:1", "app=web"]),
        },
        Case {
            name: "lease holder",
            resource: "leases",
            group: "coordination.k8s.io",
            obj: json!({"metadata": {"name": "l", "creationTimestamp": HOUR_AGO}, "spec": {"holderIdentity": "pod-a"}}),
            want: json!(["l", "pod-a", "60m"]),
        },
        Case {
            name: "core event with a count",
            resource: "events",
            group: "",
            obj: json!({"metadata": {"name": "e.1", "creationTimestamp": HOUR_AGO},
                "involvedObject": {"kind": "Service", "name": "s"}, "type": "Normal", "reason": "EnsuredLoadBalancer",
                "message": "Ensured load balancer ", "source": {"component": "service-controller"},
                "firstTimestamp": HOUR_AGO, "lastTimestamp": "2026-01-01T00:59:00Z", "count": 2}),
            want: json!([
                "60s",
                "Normal",
                "EnsuredLoadBalancer",
                "service/s",
                "",
                "service-controller",
                "Ensured load balancer",
                "60m",
                2,
                "e.1"
            ]),
        },
        Case {
            name: "events.k8s.io event (regarding/note/reportingController, singleton count 1)",
            resource: "events",
            group: "events.k8s.io",
            obj: json!({"apiVersion": "events.k8s.io/v1", "metadata": {"name": "e.2", "creationTimestamp": HOUR_AGO},
                "regarding": {"kind": "PersistentVolume", "name": "pv1"}, "type": "Warning", "reason": "Stuck",
                "note": "in use", "reportingController": "pv-protection", "reportingInstance": "m-1",
                "eventTime": "2026-01-01T00:58:00.000000Z"}),
            want: json!([
                "2m",
                "Warning",
                "Stuck",
                "persistentvolume/pv1",
                "",
                "pv-protection, m-1",
                "in use",
                "2m",
                1,
                "e.2"
            ]),
        },
        Case {
            name: "node status, roles and addresses",
            resource: "nodes",
            group: "",
            obj: json!({"metadata": {"name": "n1", "creationTimestamp": HOUR_AGO,
                    "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/hostname": "n1"}},
                "spec": {"unschedulable": true},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "192.168.0.2"}],
                    "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian", "kernelVersion": "6.1", "containerRuntimeVersion": "containerd://2"}}}),
            want: json!([
                "n1",
                "Ready,SchedulingDisabled",
                "control-plane",
                "60m",
                "v1.33.0",
                "192.168.0.2",
                "<none>",
                "Debian",
                "6.1",
                "containerd://2"
            ]),
        },
        Case {
            name: "kinds without a printer get the default convertor's Created At",
            resource: "roles",
            group: "rbac.authorization.k8s.io",
            obj: json!({"metadata": {"name": "r", "creationTimestamp": HOUR_AGO}}),
            want: json!(["r", HOUR_AGO]),
        },
        Case {
            name: "configmap data count",
            resource: "configmaps",
            group: "",
            obj: json!({"metadata": {"name": "c", "creationTimestamp": HOUR_AGO}, "data": {"a": "1", "b": "2"}}),
            want: json!(["c", 2, "60m"]),
        },
    ];
    for c in cases {
        assert_eq!(
            Value::Array(cells(c.resource, c.group, c.obj)),
            c.want,
            "{}",
            c.name
        );
    }
}

#[test]
fn include_object_modes() {
    let o = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "uid": "u"}, "status": {"phase": "Active"}});
    let row = |mode: &str| {
        to_table("namespaces", "", &[&o], mode, json!({}), now())["rows"][0]["object"].clone()
    };
    assert_eq!(row("None"), Value::Null);
    assert_eq!(row("Object"), o);
    let partial = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "ns", "uid": "u"}});
    assert_eq!(row("Metadata"), partial);
    assert_eq!(row(""), partial, "Metadata is the default");
    assert!(validate_include_object("Metadata").is_ok());
    assert_eq!(
        validate_include_object("All"),
        Err("unrecognized includeObject value: \"All\"".to_string())
    );
}

#[test]
fn human_duration_matches_apimachinery() {
    let cases = [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (8 * 3600, "8h"),
        (48 * 3600, "2d"),
        (49 * 3600, "2d1h"),
        (8 * 86400, "8d"),
        (730 * 86400, "2y"),
        (731 * 86400, "2y1d"),
        (8 * 365 * 86400, "8y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_duration(secs), want, "{secs}s");
    }
}

//! Strategic merge patch cases; each names the upstream behaviour
//! (k8s.io/apimachinery strategicpatch, k8s.io/api patch tags).

use super::*;
use crate::openapi::schema::schemas;
use serde_json::json;

fn smp(kind: (&str, &str, &str), live: Value, patch: Value) -> Result<Value, PatchError> {
    let root = schemas().root(kind.0, kind.1, kind.2).expect("schema");
    apply(&live, patch.to_string().as_bytes(), root)
}

const SVC: (&str, &str, &str) = ("", "v1", "Service");
const POD: (&str, &str, &str) = ("", "v1", "Pod");
const DEPLOY: (&str, &str, &str) = ("apps", "v1", "Deployment");
const LB_FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

fn service(finalizers: &[&str]) -> Value {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "lb", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]},
        "status": {"loadBalancer": {}}
    });
    if !finalizers.is_empty() {
        v["metadata"]["finalizers"] = json!(finalizers);
    }
    v
}

#[test]
fn service_controller_finalizer_patches() {
    struct Case {
        name: &'static str,
        live: Value,
        patch: Value,
        want_finalizers: Option<Value>,
    }
    let cases = [
        Case {
            name: "addFinalizer on a service without finalizers (two-way patch of services/status)",
            live: service(&[]),
            patch: json!({"metadata": {"finalizers": [LB_FINALIZER]}}),
            want_finalizers: Some(json!([LB_FINALIZER])),
        },
        Case {
            name: "addFinalizer next to another finalizer keeps it ($setElementOrder)",
            live: service(&["example.com/other"]),
            patch: json!({"metadata": {
                "$setElementOrder/finalizers": ["example.com/other", LB_FINALIZER],
                "finalizers": [LB_FINALIZER]}}),
            want_finalizers: Some(json!(["example.com/other", LB_FINALIZER])),
        },
        Case {
            name: "a concurrent writer's finalizer (not in the patch) survives an add",
            live: service(&["example.com/concurrent", "example.com/other"]),
            patch: json!({"metadata": {
                "$setElementOrder/finalizers": ["example.com/other", LB_FINALIZER],
                "finalizers": [LB_FINALIZER]}}),
            want_finalizers: Some(json!([
                "example.com/concurrent",
                "example.com/other",
                LB_FINALIZER
            ])),
        },
        Case {
            name: "removeFinalizer with $deleteFromPrimitiveList, last finalizer",
            live: service(&[LB_FINALIZER]),
            patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [LB_FINALIZER]}}),
            want_finalizers: Some(json!([])),
        },
        Case {
            name: "removeFinalizer keeps the others in order",
            live: service(&["a", LB_FINALIZER, "b"]),
            patch: json!({"metadata": {
                "$setElementOrder/finalizers": ["a", "b"],
                "$deleteFromPrimitiveList/finalizers": [LB_FINALIZER]}}),
            want_finalizers: Some(json!(["a", "b"])),
        },
        Case {
            name: "$deleteFromPrimitiveList on an absent list adds nothing",
            live: service(&[]),
            patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [LB_FINALIZER]}}),
            want_finalizers: None,
        },
        Case {
            name: "merge strategy on a primitive list deduplicates",
            live: service(&["a"]),
            patch: json!({"metadata": {"finalizers": ["a", "b"]}}),
            want_finalizers: Some(json!(["a", "b"])),
        },
        Case {
            name: "null deletes the list",
            live: service(&["a"]),
            patch: json!({"metadata": {"finalizers": null}}),
            want_finalizers: None,
        },
    ];
    for c in cases {
        let got = smp(SVC, c.live, c.patch).unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
        assert_eq!(
            got.pointer("/metadata/finalizers").cloned(),
            c.want_finalizers,
            "{}",
            c.name
        );
        assert!(
            !got.to_string().contains('$'),
            "{}: directives leaked: {got}",
            c.name
        );
        assert_eq!(
            got["spec"]["type"], "LoadBalancer",
            "{}: spec untouched",
            c.name
        );
    }
}

#[test]
fn merge_key_lists() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "app", "image": "app:1", "ports": [{"containerPort": 80, "name": "http"}],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "side", "image": "side:1"}
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "k", "operator": "Exists"}]
        }
    });
    struct Case {
        name: &'static str,
        patch: Value,
        check: fn(&Value) -> bool,
    }
    let cases = [
        Case {
            name: "containers merge by name: one field of one container changes",
            patch: json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}}),
            check: |v| {
                v.pointer("/spec/containers/0/image") == Some(&json!("app:2"))
                    && v.pointer("/spec/containers/0/ports/0/containerPort") == Some(&json!(80))
                    && v.pointer("/spec/containers/1/name") == Some(&json!("side"))
            },
        },
        Case {
            // mergeSortedSlice: a patch item absent from the live list is
            // placed before the server-only items.
            name: "a new container lands before the existing ones, as upstream's mergeSortedSlice orders it",
            patch: json!({"spec": {"containers": [{"name": "new", "image": "n"}]}}),
            check: |v| {
                v["spec"]["containers"].as_array().map(Vec::len) == Some(3)
                    && v.pointer("/spec/containers/0/name") == Some(&json!("new"))
                    && v.pointer("/spec/containers/2/name") == Some(&json!("side"))
            },
        },
        Case {
            name: "$patch: delete removes a container by merge key",
            patch: json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
            check: |v| v["spec"]["containers"].as_array().map(Vec::len) == Some(1),
        },
        Case {
            name: "$patch: replace replaces the whole list",
            patch: json!({"spec": {"containers": [{"name": "only", "image": "o"}, {"$patch": "replace"}]}}),
            check: |v| v["spec"]["containers"] == json!([{"name": "only", "image": "o"}]),
        },
        Case {
            name: "env merges by name inside a container",
            patch: json!({"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}),
            check: |v| {
                v.pointer("/spec/containers/0/env")
                    == Some(&json!([
                {"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]))
            },
        },
        Case {
            name: "container ports merge by containerPort",
            patch: json!({"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 443, "name": "https"}]}]}}),
            check: |v| {
                v.pointer("/spec/containers/0/ports")
                    .and_then(Value::as_array)
                    .map(Vec::len)
                    == Some(2)
            },
        },
        Case {
            name: "volumes merge by name; retainKeys drops the old volume source",
            patch: json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}),
            check: |v| {
                v.pointer("/spec/volumes/0")
                    == Some(&json!({"name": "data", "hostPath": {"path": "/x"}}))
            },
        },
        Case {
            name: "tolerations have no merge strategy: replaced whole",
            patch: json!({"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}}),
            check: |v| v["spec"]["tolerations"] == json!([{"key": "other", "operator": "Exists"}]),
        },
        Case {
            name: "$patch: delete on a map clears it",
            patch: json!({"spec": {"volumes": [{"name": "data", "emptyDir": {"$patch": "delete"}}]}}),
            check: |v| v.pointer("/spec/volumes/0/emptyDir") == Some(&json!({})),
        },
    ];
    for c in cases {
        let got = smp(POD, pod.clone(), c.patch).unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
        assert!((c.check)(&got), "{}: got {got}", c.name);
        assert!(
            !got.to_string().contains("\"$"),
            "{}: directives leaked: {got}",
            c.name
        );
    }
}

#[test]
fn service_ports_merge_by_port_and_ingress_is_atomic() {
    let live = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}]}}
    });
    let got = smp(
        SVC,
        live,
        json!({
            "spec": {"ports": [{"port": 443, "name": "https"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "3.3.3.3"}]}}
        }),
    )
    .expect("patch applies");
    assert_eq!(
        got.pointer("/spec/ports/1"),
        Some(&json!({"port": 443, "protocol": "TCP", "name": "https"}))
    );
    assert_eq!(got.pointer("/spec/ports/0/port"), Some(&json!(80)));
    assert_eq!(
        got.pointer("/status/loadBalancer/ingress"),
        Some(&json!([{"ip": "3.3.3.3"}]))
    );
}

#[test]
fn deployment_strategy_retain_keys() {
    let live = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
    let got = smp(
        DEPLOY,
        live,
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    )
    .expect("patch applies");
    assert_eq!(
        got.pointer("/spec/strategy"),
        Some(&json!({"type": "Recreate"}))
    );
}

#[test]
fn errors_map_to_upstream_codes() {
    struct Case {
        name: &'static str,
        patch: &'static str,
        code: u16,
    }
    let cases = [
        Case {
            name: "malformed JSON is 400",
            patch: "{",
            code: 400,
        },
        Case {
            name: "a list body is 400",
            patch: "[]",
            code: 400,
        },
        Case {
            name: "bad $deleteFromPrimitiveList key format is 400 (ErrBadPatchFormatForPrimitiveList)",
            patch: r#"{"metadata":{"$deleteFromPrimitiveListfinalizers":["a"]}}"#,
            code: 400,
        },
        Case {
            name: "$retainKeys not listing a patched key is 400 (ErrBadPatchFormatForRetainKeys)",
            patch: r#"{"spec":{"$retainKeys":["type"],"ports":[]}}"#,
            code: 400,
        },
        Case {
            name: "a merge-key list item without its key is a plain error, 500",
            patch: r#"{"spec":{"ports":[{"name":"x"}]}}"#,
            code: 500,
        },
        Case {
            name: "unknown $patch directive is a plain error, 500",
            patch: r#"{"spec":{"$patch":"frob"}}"#,
            code: 500,
        },
        Case {
            name: "$setElementOrder not matching the patch list is a plain error, 500",
            patch: r#"{"metadata":{"$setElementOrder/finalizers":["a"],"finalizers":["b"]}}"#,
            code: 500,
        },
    ];
    for c in cases {
        let root = schemas().root("", "v1", "Service").expect("schema");
        let err = apply(&service(&["a"]), c.patch.as_bytes(), root).expect_err(c.name);
        assert_eq!(err.code(), c.code, "{}: {err:?}", c.name);
    }
}

#[test]
fn go_formatting_of_values_in_messages() {
    assert_eq!(
        go_fmt(&json!({"b": [1, "x"], "a": null})),
        "map[a:<nil> b:[1 x]]"
    );
}

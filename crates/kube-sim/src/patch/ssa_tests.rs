//! Server-side apply and managedFields cases; each names the upstream
//! behaviour (structured-merge-diff Updater, apimachinery managedfields).

use super::*;
use serde_json::json;

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";

fn gvk_cm() -> Gvk<'static> {
    Gvk {
        group: "",
        version: "v1",
        kind: "ConfigMap",
    }
}
fn gvk_deploy() -> Gvk<'static> {
    Gvk {
        group: "apps",
        version: "v1",
        kind: "Deployment",
    }
}

fn entries(v: &Value) -> Vec<Value> {
    v.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn entry<'a>(v: &'a Value, manager: &str, op: &str) -> Option<&'a Value> {
    v.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == op)
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image, "ports": [{"containerPort": 80}]}]}
            }
        }
    })
}

#[test]
fn apply_creates_an_object_with_an_apply_entry() {
    // kubectl apply --server-side / helm 4 install: live = None.
    let cfg = deployment(2, "nginx:1");
    let got = apply(None, &cfg, &gvk_deploy(), "helm", false, None, T0).expect("create via apply");
    assert_eq!(got["spec"]["replicas"], 2);
    let mf = entries(&got);
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0]["manager"], "helm");
    assert_eq!(mf[0]["operation"], "Apply");
    assert_eq!(mf[0]["apiVersion"], "apps/v1");
    assert_eq!(mf[0]["time"], T0);
    assert_eq!(mf[0]["fieldsType"], "FieldsV1");
    let f = &mf[0]["fieldsV1"];
    // Apply sets record leaves; list items get "."; maps and structs do not.
    assert_eq!(
        f.pointer("/f:metadata/f:labels"),
        Some(&json!({"f:app": {}}))
    );
    assert_eq!(f.pointer("/f:spec/f:replicas"), Some(&json!({})));
    assert_eq!(
        f.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"web\"}"),
        Some(&json!({".": {}, "f:image": {}, "f:name": {},
            "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}))
    );
    // The selector is an atomic map: owned as a whole.
    assert_eq!(f.pointer("/f:spec/f:selector"), Some(&json!({})));
    // Stripped metadata is never recorded.
    assert!(f.pointer("/f:metadata/f:name").is_none());
    assert!(f.get("f:apiVersion").is_none());
}

#[test]
fn reapplying_the_same_config_is_idempotent() {
    let cfg = deployment(2, "nginx:1");
    let a = apply(None, &cfg, &gvk_deploy(), "helm", false, None, T0).expect("first");
    let b = apply(Some(&a), &cfg, &gvk_deploy(), "helm", false, None, T1).expect("second");
    let strip = |v: &Value| {
        let mut v = v.clone();
        v["metadata"]
            .as_object_mut()
            .map(|m| m.shift_remove("managedFields"));
        v
    };
    assert_eq!(strip(&a), strip(&b));
    assert_eq!(entries(&b).len(), 1);
}

#[test]
fn conflicts_with_an_update_manager_unless_forced() {
    let cfg = deployment(2, "nginx:1");
    let created = apply(None, &cfg, &gvk_deploy(), "kubectl", false, None, T0).expect("create");
    // Another client scales with a merge patch (operation Update).
    let mut scaled = created.clone();
    scaled["spec"]["replicas"] = json!(5);
    track_update(
        Some(&created),
        &mut scaled,
        "kubectl-scale",
        None,
        T1,
        "apps/v1",
    );
    let upd = entry(&scaled, "kubectl-scale", "Update").expect("update entry");
    assert_eq!(upd["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    // The applier no longer owns replicas (taken by the update).
    let ap = entry(&scaled, "kubectl", "Apply").expect("apply entry");
    assert!(ap["fieldsV1"].pointer("/f:spec/f:replicas").is_none());

    // Re-applying replicas: 3 conflicts with kubectl-scale.
    let cfg3 = deployment(3, "nginx:1");
    let err = apply(
        Some(&scaled),
        &cfg3,
        &gvk_deploy(),
        "kubectl",
        false,
        None,
        T1,
    )
    .expect_err("conflict");
    assert_eq!(err.code(), 409);
    match &err {
        PatchError::Conflict { message, causes } => {
            assert_eq!(
                message,
                "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
            );
            assert_eq!(
                causes,
                &vec![(
                    ".spec.replicas".to_string(),
                    "\"kubectl-scale\" using apps/v1".to_string()
                )]
            );
        }
        other => panic!("want conflict, got {other:?}"),
    }
    let status = err.to_status();
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    assert_eq!(status["details"]["causes"][0]["field"], ".spec.replicas");

    // Applying the value the other manager set is not a conflict (shared ownership).
    let same = apply(
        Some(&scaled),
        &deployment(5, "nginx:1"),
        &gvk_deploy(),
        "kubectl",
        false,
        None,
        T1,
    )
    .expect("same value shares ownership");
    assert!(entry(&same, "kubectl-scale", "Update").is_some());

    // --force-conflicts takes ownership away.
    let forced = apply(
        Some(&scaled),
        &cfg3,
        &gvk_deploy(),
        "kubectl",
        true,
        None,
        T1,
    )
    .expect("forced");
    assert_eq!(forced["spec"]["replicas"], 3);
    assert!(
        entry(&forced, "kubectl-scale", "Update").is_none(),
        "{}",
        forced["metadata"]["managedFields"]
    );
}

#[test]
fn conflicts_between_two_appliers_list_every_field() {
    let a = apply(
        None,
        &deployment(1, "a:1"),
        &gvk_deploy(),
        "alpha",
        false,
        None,
        T0,
    )
    .expect("alpha");
    let err = apply(
        Some(&a),
        &deployment(2, "b:1"),
        &gvk_deploy(),
        "beta",
        false,
        None,
        T1,
    )
    .expect_err("conflict");
    match err {
        PatchError::Conflict { message, causes } => {
            assert_eq!(causes.len(), 2, "{causes:?}");
            assert_eq!(
                message,
                "Apply failed with 2 conflicts: conflicts with \"alpha\":\n- .spec.replicas\n- .spec.template.spec.containers[name=\"web\"].image"
            );
        }
        other => panic!("want conflict, got {other:?}"),
    }
}

#[test]
fn fields_no_longer_applied_are_removed_unless_someone_else_owns_them() {
    let mut cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"},
        "data": {"a": "1", "b": "2"}});
    let v1 = apply(None, &cfg, &gvk_cm(), "helm", false, None, T0).expect("v1");
    // Someone else co-owns b with an update.
    let mut edited = v1.clone();
    edited["data"]["c"] = json!("3");
    track_update(Some(&v1), &mut edited, "kubectl-edit", None, T1, "v1");
    // helm upgrade drops a and c was never applied by helm.
    cfg["data"] = json!({"b": "2"});
    let v2 = apply(Some(&edited), &cfg, &gvk_cm(), "helm", false, None, T1).expect("v2");
    assert_eq!(v2["data"], json!({"b": "2", "c": "3"}));
    // Dropping every data key removes the map field.
    cfg.as_object_mut().map(|m| m.shift_remove("data"));
    let v3 = apply(Some(&v1), &cfg, &gvk_cm(), "helm", false, None, T1).expect("v3");
    assert!(v3.get("data").is_none(), "{v3}");
    assert!(
        entry(&v3, "helm", "Apply").is_none(),
        "an applier owning nothing has no entry"
    );
}

#[test]
fn apply_errors_match_upstream() {
    struct Case {
        name: &'static str,
        cfg: Value,
        code: u16,
        message: &'static str,
    }
    let cases = [
        Case {
            name: "an unknown field is a plain error from ObjectToTyped (500, no reason)",
            cfg: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "dataa": {}}),
            code: 500,
            message: "failed to create typed patch object (ns/c; /v1, Kind=ConfigMap): .dataa: field not declared in schema",
        },
        Case {
            name: "wrong apiVersion is 400",
            cfg: json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            code: 400,
            message: "Incorrect version specified in apply patch. Specified patch version: v2, expected: v1",
        },
        Case {
            name: "managedFields in the applied config is 400",
            cfg: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "managedFields": []}}),
            code: 400,
            message: "metadata.managedFields must be nil",
        },
    ];
    for c in cases {
        let err = apply(None, &c.cfg, &gvk_cm(), "m", false, None, T0).expect_err(c.name);
        assert_eq!(
            (err.code(), err.to_string().as_str()),
            (c.code, c.message),
            "{}",
            c.name
        );
    }
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"ports": [{"name": "x"}]}});
    let err = apply(
        None,
        &svc,
        &Gvk {
            group: "",
            version: "v1",
            kind: "Service",
        },
        "m",
        false,
        None,
        T0,
    )
    .expect_err("port without key");
    assert!(
        err.to_string().contains("omits key field \"port\""),
        "{err}"
    );
}

#[test]
fn lease_renewal_by_kube_lease_manager_style_apply() {
    let gvk = Gvk {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
    };
    let lease = |holder: &str, renew: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l", "namespace": "ns"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew}})
    };
    let a = apply(
        None,
        &lease("a", "2026-01-01T00:00:00.000000Z"),
        &gvk,
        "a-mgr",
        false,
        None,
        T0,
    )
    .expect("acquire");
    let b = apply(
        Some(&a),
        &lease("a", "2026-01-01T00:00:05.000000Z"),
        &gvk,
        "a-mgr",
        false,
        None,
        T1,
    )
    .expect("renew");
    assert_eq!(b["spec"]["renewTime"], "2026-01-01T00:00:05.000000Z");
    // Another candidate taking over without force conflicts; with force it wins.
    assert_eq!(
        apply(Some(&b), &lease("b", "x"), &gvk, "b-mgr", false, None, T1).map_err(|e| e.code()),
        Err(409)
    );
    let c =
        apply(Some(&b), &lease("b", "x"), &gvk, "b-mgr", true, None, T1).expect("forced takeover");
    assert_eq!(c["spec"]["holderIdentity"], "b");
}

#[test]
fn track_update_on_create_records_maps_with_dot_and_skips_server_fields() {
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "d", "uid": "u", "resourceVersion": "1", "creationTimestamp": T0,
                     "labels": {"a": "b"}},
        "data": {"k": "v"}});
    track_update(None, &mut obj, "kubectl-create", None, T0, "v1");
    let mf = entries(&obj);
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0]["operation"], "Update");
    assert_eq!(
        mf[0]["fieldsV1"],
        json!({
            "f:data": {".": {}, "f:k": {}},
            "f:metadata": {"f:labels": {".": {}, "f:a": {}}}
        })
    );
}

#[test]
fn track_update_status_subresource_and_reset_fields() {
    let old = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}});
    // The service controller adds its finalizer and the ingress through /status.
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!(["service.kubernetes.io/load-balancer-cleanup"]);
    new["status"]["loadBalancer"]["ingress"] = json!([{"ip": "1.2.3.4"}]);
    new["spec"]["type"] = json!("ClusterIP"); // reset by the status strategy: never recorded
    track_update(
        Some(&old),
        &mut new,
        "service-controller",
        Some("status"),
        T0,
        "v1",
    );
    let e = entry(&new, "service-controller", "Update").expect("entry");
    assert_eq!(e["subresource"], "status");
    assert_eq!(
        e["fieldsV1"],
        json!({
            "f:metadata": {"f:finalizers": {".": {}, "v:\"service.kubernetes.io/load-balancer-cleanup\"": {}}},
            "f:status": {"f:loadBalancer": {"f:ingress": {}}}
        })
    );
    // On the main resource, status is not recorded for kinds with a status subresource.
    let mut main = old.clone();
    main["status"]["loadBalancer"]["ingress"] = json!([{"ip": "1.2.3.4"}]);
    track_update(Some(&old), &mut main, "x", None, T0, "v1");
    assert!(main.pointer("/metadata/managedFields").is_none(), "{main}");
}

#[test]
fn track_update_keeps_timestamps_of_no_op_writes_and_honours_client_managed_fields() {
    let mut a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
    track_update(None, &mut a, "m", None, T0, "v1");
    let mut b = a.clone();
    track_update(Some(&a), &mut b, "m", None, T1, "v1");
    assert_eq!(
        entries(&b)[0]["time"],
        T0,
        "a no-op update does not touch the entry"
    );
    // A client sending managedFields: [{}] resets them.
    let mut c = a.clone();
    c["metadata"]["managedFields"] = json!([{}]);
    c["data"]["k2"] = json!("v2");
    track_update(Some(&a), &mut c, "n", None, T1, "v1");
    let mf = entries(&c);
    assert_eq!(mf.len(), 1, "{mf:?}");
    assert_eq!(mf[0]["manager"], "n");
    // Entries sort by operation then time: Apply before Update.
    let applied = apply(Some(&a), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"z": "1"}}),
        &gvk_cm(), "ssa", false, None, T1).expect("apply");
    let ops: Vec<&str> = entries(&applied)
        .iter()
        .map(|e| e["operation"].as_str().unwrap_or(""))
        .map(|s| if s == "Apply" { "Apply" } else { "Update" })
        .collect();
    assert_eq!(ops, vec!["Apply", "Update"]);
}

#[test]
fn list_merge_follows_structured_merge_diff_ordering() {
    // Shared items follow the applied order; live-only items keep their place.
    let gvk = Gvk {
        group: "",
        version: "v1",
        kind: "Pod",
    };
    let ty = Ty::root(gvk.group, gvk.version, gvk.kind);
    let lhs = json!({"spec": {"containers": [{"name": "a"}, {"name": "x"}, {"name": "b"}]}});
    let rhs = json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}, {"name": "c"}]}});
    let got = merge(ty, Some(&lhs), Some(&rhs)).expect("merged");
    let names: Vec<&str> = got["spec"]["containers"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, vec!["x", "b", "a", "c"]);
}

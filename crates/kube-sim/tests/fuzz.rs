//! Property tests of what a client can feed kube-sim: label and field
//! selectors, the four patch appliers (JSON patch, merge patch, strategic
//! merge patch, server-side apply) and the validators the results go
//! through. Arbitrary input must give a result or an error, never a panic.
//! `make test` runs proptest's default 256 cases per property; `make fuzz`
//! runs `FUZZ_CASES` (PROPTEST_CASES) of them.

use kube_sim::patch::{Gvk, PatchKind, PatchRequest, apply_patch};
use kube_sim::resources::{RESOURCES, ResourceDef, find};
use kube_sim::selector::{FieldSelector, LabelSelector};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn def(group: &str, resource: &str) -> &'static ResourceDef {
    let id = find(group, "v1", resource).unwrap_or_else(|| panic!("{group}/{resource} not served"));
    &RESOURCES[id]
}

/// Text rich in the characters the selector grammars care about.
fn selector_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9=!(),<> \t./_\\\\-]{0,40}",
        "[a-z]{1,5}( ?(=|==|!=|<|>|in|notin) ?[a-z0-9(),]{0,8})?(,[!a-z]{0,5}(=|!=)?[a-z]{0,4}){0,3}",
        any::<String>(),
        // Multi-byte characters next to escapes and operators.
        "[aé\\\\=!,ß€]{0,20}",
    ]
}

fn labels() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z]{1,3}", "[a-z0-9]{0,3}", 0..4)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

/// Field names of the kinds below, patch directives and random keys.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "metadata",
            "name",
            "namespace",
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
            "spec",
            "status",
            "containers",
            "image",
            "ports",
            "port",
            "containerPort",
            "env",
            "value",
            "volumes",
            "replicas",
            "selector",
            "matchLabels",
            "template",
            "data",
            "type",
            "loadBalancer",
            "ingress",
            "ip",
            "$patch",
            "$retainKeys",
            "$setElementOrder/containers",
            "$setElementOrder/finalizers",
            "$deleteFromPrimitiveList/finalizers",
            "apiVersion",
            "kind",
        ])
        .prop_map(str::to_string),
        "[a-z$/]{1,8}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        prop::sample::select(vec!["c", "merge", "replace", "delete", "x.io/f", "1Gi", ""])
            .prop_map(|s| Value::String(s.to_string())),
        "[a-zA-Z0-9 ./:-]{0,10}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A JSON pointer over the objects below.
fn pointer() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            key(),
            prop::sample::select(vec!["0", "1", "-", "~0", "~1", "", "99", "-1", "01"])
                .prop_map(str::to_string),
        ],
        0..5,
    )
    .prop_map(|segs| segs.iter().map(|s| format!("/{s}")).collect())
}

fn json_patch() -> impl Strategy<Value = Vec<u8>> {
    let op = (
        prop::sample::select(vec![
            "add", "remove", "replace", "move", "copy", "test", "bogus",
        ]),
        pointer(),
        pointer(),
        json_value(),
    )
        .prop_map(
            |(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}),
        );
    prop::collection::vec(op, 0..6).prop_map(|ops| Value::Array(ops).to_string().into_bytes())
}

/// Live objects of a few kinds with lists, maps and nested structs.
fn live_objects() -> Vec<(Gvk<'static>, Value)> {
    vec![
        (
            Gvk {
                group: "",
                version: "v1",
                kind: "Pod",
            },
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}, "finalizers": ["x.io/f"]},
                   "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                            "env": [{"name": "E", "value": "1"}]}],
                            "volumes": [{"name": "v", "emptyDir": {}}]}}),
        ),
        (
            Gvk {
                group: "apps",
                version: "v1",
                kind: "Deployment",
            },
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "d", "namespace": "ns"},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                            "template": {"metadata": {"labels": {"a": "b"}},
                                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        ),
        (
            Gvk {
                group: "",
                version: "v1",
                kind: "ConfigMap",
            },
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm", "namespace": "ns", "annotations": {"k": "v"}},
                   "data": {"a": "1"}}),
        ),
        (
            Gvk {
                group: "",
                version: "v1",
                kind: "Service",
            },
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "s", "namespace": "ns"},
                   "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
                   "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}}),
        ),
    ]
}

fn patch_kind() -> impl Strategy<Value = PatchKind> {
    prop::sample::select(vec![
        PatchKind::Json,
        PatchKind::Merge,
        PatchKind::Strategic,
        PatchKind::Apply,
    ])
}

/// A body for `kind`: well-formed for it, any JSON, or any bytes.
fn body_for(kind: PatchKind, gvk: Gvk<'static>) -> BoxedStrategy<Vec<u8>> {
    let any_json = json_value().prop_map(|v| v.to_string().into_bytes());
    let bytes = prop::collection::vec(any::<u8>(), 0..64);
    match kind {
        PatchKind::Json => prop_oneof![4 => json_patch(), 1 => any_json, 1 => bytes].boxed(),
        PatchKind::Apply => {
            let api_version = gvk.api_version();
            let k = gvk.kind;
            let applied = (json_value(), json_value()).prop_map(move |(meta, rest)| {
                let mut obj = match rest {
                    Value::Object(m) => m,
                    other => Map::from_iter([("spec".to_string(), other)]),
                };
                obj.insert("apiVersion".into(), json!(api_version));
                obj.insert("kind".into(), json!(k));
                let mut meta = match meta {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                meta.insert("name".into(), json!("p"));
                obj.insert("metadata".into(), Value::Object(meta));
                Value::Object(obj).to_string().into_bytes()
            });
            prop_oneof![4 => applied, 1 => any_json, 1 => bytes].boxed()
        }
        _ => prop_oneof![5 => any_json, 1 => bytes].boxed(),
    }
}

fn patch_case() -> impl Strategy<Value = (usize, PatchKind, Vec<u8>, bool, Option<&'static str>)> {
    (0..live_objects().len(), patch_kind()).prop_flat_map(|(i, kind)| {
        let gvk = live_objects()[i].0;
        (
            Just(i),
            Just(kind),
            body_for(kind, gvk),
            any::<bool>(),
            prop::sample::select(vec![None, Some("status")]),
        )
    })
}

proptest! {
    #[test]
    fn label_selectors_parse_or_fail_cleanly(s in selector_text(), l in labels()) {
        if let Ok(sel) = LabelSelector::parse(&s) {
            let _ = sel.matches(Some(&l));
        }
    }

    #[test]
    fn field_selectors_parse_or_fail_cleanly(s in selector_text(), obj in json_value()) {
        for d in [def("", "pods"), def("", "events"), def("", "namespaces")] {
            if let Ok(sel) = FieldSelector::parse(&s, d) {
                let _ = sel.matches(&obj);
                let _ = sel.single_name();
            }
        }
    }

    #[test]
    fn patches_apply_or_fail_cleanly(case in patch_case()) {
        let (i, kind, body, force, subresource) = case;
        let (gvk, live) = &live_objects()[i];
        let req = PatchRequest {
            live: Some(live),
            body: &body,
            kind,
            gvk: *gvk,
            field_manager: "fuzz",
            force,
            subresource,
            now: "2026-01-01T00:00:00Z",
        };
        if let Ok(patched) = apply_patch(&req) {
            // What a patch produced goes through validation next.
            let d = def(gvk.group, &format!("{}s", gvk.kind.to_ascii_lowercase()));
            let meta = patched.get("metadata").cloned().unwrap_or(Value::Null);
            let _ = kube_sim::validation::validate_object_meta(&meta, d.name_rule, d.namespaced);
            let _ = kube_sim::spec_validation::validate_create(d, &patched);
            let _ = kube_sim::spec_validation::validate_update(d, &patched, live);
        }
    }

    #[test]
    fn apply_creates_or_fails_cleanly(case in patch_case()) {
        // Server-side apply without a live object (create).
        let (i, _, body, force, _) = case;
        let (gvk, _) = &live_objects()[i];
        let req = PatchRequest {
            live: None,
            body: &body,
            kind: PatchKind::Apply,
            gvk: *gvk,
            field_manager: "fuzz",
            force,
            subresource: None,
            now: "2026-01-01T00:00:00Z",
        };
        let _ = apply_patch(&req);
    }

    #[test]
    fn validators_accept_any_object(meta in json_value(), obj in json_value(), old in json_value()) {
        for d in RESOURCES {
            let _ = kube_sim::validation::validate_object_meta(&meta, d.name_rule, d.namespaced);
            let _ = kube_sim::spec_validation::validate_create(d, &obj);
            let _ = kube_sim::spec_validation::validate_update(d, &obj, &old);
        }
    }
}

proptest! {
    /// Issue 27 bug 8: any integer (or fraction) in a Lease's int32 fields
    /// is refused exactly when Go's decoder would refuse it, naming the
    /// field as it does; integers in an int64 field fit.
    #[test]
    fn lease_integers_decode_as_go_decodes_them(
        n in prop_oneof![
            any::<i64>(),
            (i32::MIN as i64 - 2)..(i32::MIN as i64 + 2),
            (i32::MAX as i64 - 2)..(i32::MAX as i64 + 2),
        ],
        fraction in any::<bool>(),
        field in prop_oneof![Just("leaseDurationSeconds"), Just("leaseTransitions")],
    ) {
        use kube_sim::openapi::schema::integer_decode_error;
        let value = if fraction { json!(n as f64 + 0.5) } else { json!(n) };
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "generation": n}, "spec": {field: value}});
        let err = integer_decode_error("coordination.k8s.io", "v1", "Lease", &lease);
        let fits = !fraction && i32::try_from(n).is_ok();
        prop_assert_eq!(err.is_none(), fits, "{} = {}: {:?}", field, value, err);
        if let Some(e) = err {
            let want = format!("into Go struct field LeaseSpec.spec.{field} of type int32");
            prop_assert!(e.ends_with(&want), "{}", e);
        }
    }
}

//! apply_patch dispatch, option validation and Status bodies.

use super::*;
use serde_json::json;

const NOW: &str = "2026-01-01T00:00:00Z";

fn req<'a>(
    live: Option<&'a Value>,
    body: &'a [u8],
    kind: PatchKind,
    gvk: Gvk<'a>,
) -> PatchRequest<'a> {
    PatchRequest {
        live,
        body,
        kind,
        gvk,
        field_manager: "tester",
        force: false,
        subresource: None,
        now: NOW,
    }
}

const PV: Gvk<'static> = Gvk {
    group: "",
    version: "v1",
    kind: "PersistentVolume",
};

fn pv() -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv1", "finalizers": ["kubernetes.io/pv-protection"]},
        "spec": {"capacity": {"storage": "1Gi"}}})
}

#[test]
fn content_types_map_to_patch_kinds() {
    let cases = [
        ("application/json-patch+json", Some(PatchKind::Json)),
        (
            "application/merge-patch+json; charset=utf-8",
            Some(PatchKind::Merge),
        ),
        (
            "Application/Strategic-Merge-Patch+JSON",
            Some(PatchKind::Strategic),
        ),
        ("application/apply-patch+yaml", Some(PatchKind::Apply)),
        ("application/json", None),
        ("application/apply-patch+cbor", None),
        ("", None),
    ];
    for (ct, want) in cases {
        assert_eq!(PatchKind::from_content_type(ct), want, "{ct}");
    }
}

#[test]
fn every_patch_kind_removes_a_finalizer_and_records_an_update_entry() {
    let live = pv();
    let bodies: [(PatchKind, &[u8]); 3] = [
        (PatchKind::Json, br#"[{"op":"test","path":"/metadata/finalizers/0","value":"kubernetes.io/pv-protection"},{"op":"remove","path":"/metadata/finalizers/0"}]"#),
        (PatchKind::Merge, br#"{"metadata":{"finalizers":null}}"#),
        (PatchKind::Strategic, br#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["kubernetes.io/pv-protection"]}}"#),
    ];
    for (kind, body) in bodies {
        let got = apply_patch(&req(Some(&live), body, kind, PV))
            .unwrap_or_else(|e| panic!("{kind:?}: {e:?}"));
        let fins = got
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(Vec::len)
            .unwrap_or(0);
        assert_eq!(fins, 0, "{kind:?}: {got}");
        // Removing a field owned by nobody records no entry for the patcher.
        assert!(
            got.pointer("/metadata/managedFields").is_none(),
            "{kind:?}: {got}"
        );
    }
    // A patch that sets something records an Update entry for the manager.
    let got = apply_patch(&req(
        Some(&live),
        br#"{"metadata":{"labels":{"a":"b"}}}"#,
        PatchKind::Merge,
        PV,
    ))
    .expect("merge");
    assert_eq!(
        got.pointer("/metadata/managedFields/0/manager"),
        Some(&json!("tester"))
    );
    assert_eq!(
        got.pointer("/metadata/managedFields/0/operation"),
        Some(&json!("Update"))
    );
}

#[test]
fn patch_options_are_validated_like_upstream() {
    let live = pv();
    let mut r = req(
        None,
        br#"{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv1"}}"#,
        PatchKind::Apply,
        PV,
    );
    r.field_manager = "";
    let err = apply_patch(&r).expect_err("fieldManager required");
    assert_eq!(err.code(), 422);
    assert_eq!(err.to_status()["reason"], "Invalid");
    let mut r = req(Some(&live), b"{}", PatchKind::Merge, PV);
    r.force = true;
    assert_eq!(apply_patch(&r).map_err(|e| e.code()), Err(422));
}

#[test]
fn apply_accepts_yaml_bodies() {
    let body =
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: d\ndata:\n  k: v\n";
    let gvk = Gvk {
        group: "",
        version: "v1",
        kind: "ConfigMap",
    };
    let got = apply_patch(&req(None, body, PatchKind::Apply, gvk)).expect("yaml apply");
    assert_eq!(got["data"]["k"], "v");
    assert_eq!(
        got.pointer("/metadata/managedFields/0/operation"),
        Some(&json!("Apply"))
    );
    let err = apply_patch(&req(None, b"- a\n- b\n", PatchKind::Apply, gvk)).expect_err("list body");
    assert_eq!(err.code(), 400);
}

#[test]
fn strategic_merge_patch_on_kinds_without_schema_is_415() {
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let gvk = Gvk {
        group: "example.com",
        version: "v1",
        kind: "Widget",
    };
    let err = apply_patch(&req(Some(&widget), b"{}", PatchKind::Strategic, gvk)).expect_err("415");
    assert_eq!(err.code(), 415);
    assert_eq!(
        err.to_string(),
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    // Merge patch still works on such kinds.
    assert!(
        apply_patch(&req(
            Some(&widget),
            br#"{"spec":{"a":1}}"#,
            PatchKind::Merge,
            gvk
        ))
        .is_ok()
    );
}

#[test]
fn status_bodies_match_upstream_wire_format() {
    let cases = [
        (
            PatchError::Invalid(GENERIC_INVALID_MESSAGE.into()),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": GENERIC_INVALID_MESSAGE, "reason": "Invalid", "details": {}, "code": 422}),
        ),
        (
            PatchError::ServerError("boom".into()),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "boom", "code": 500}),
        ),
        (
            PatchError::BadRequest("bad".into()),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "bad", "reason": "BadRequest", "code": 400}),
        ),
    ];
    for (err, want) in cases {
        assert_eq!(err.to_status(), want);
    }
}

#[test]
fn manager_names_come_from_the_user_agent_program() {
    assert_eq!(
        manager_from_user_agent("kubectl/v1.33.0 (linux/amd64) kubernetes/abc"),
        "kubectl"
    );
    assert_eq!(manager_from_user_agent("Helm/4.1.0"), "Helm");
    assert_eq!(manager_from_user_agent(""), "");
}

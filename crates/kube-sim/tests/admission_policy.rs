//! MutatingAdmissionPolicy (admissionregistration.k8s.io v1 / v1beta1) on
//! kube-sim: the create-time finalizer policy as a table (create with and
//! without finalizers, with other finalizers, update and subresource writes
//! do not add, dry-run), both patch types, match conditions and selectors,
//! failurePolicy, reinvocation, ordering before the "no new finalizers while
//! deleting" rule, and the 422 for what kube-sim cannot evaluate. Runs
//! against the real kube-apiserver 1.36 too, and both must answer alike
//! (see `common::conform`): every policy is bound to the test's own
//! namespace or labelled objects.

mod common;

use common::{Target, conform};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::core::ObjectMeta;
use serde_json::{Value, json};

const GROUP: &str = "admissionregistration.k8s.io";
const PVC_FINALIZER: &str = "protection-manager.io/pvc-protection";
const PV_FINALIZER: &str = "protection-manager.io/pv-protection";

fn policy_api(client: &Client, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, kind);
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

fn policies(client: &Client, version: &str) -> Api<DynamicObject> {
    policy_api(
        client,
        version,
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
    )
}

fn bindings(client: &Client, version: &str) -> Api<DynamicObject> {
    policy_api(
        client,
        version,
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    )
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("object literal: {e}"))
}

/// Creates a policy with `spec` (reinvocationPolicy Never unless it says)
/// and a binding limited by `match_resources`.
async fn install(client: &Client, name: &str, mut spec: Value, match_resources: Value) {
    if spec.get("reinvocationPolicy").is_none() {
        spec["reinvocationPolicy"] = json!("Never");
    }
    policies(client, "v1")
        .create(
            &PostParams::default(),
            &dynamic(json!({
                "apiVersion": format!("{GROUP}/v1"), "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name}, "spec": spec,
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("creating policy {name}: {e}"));
    let mut bspec = json!({"policyName": name});
    if !match_resources.is_null() {
        bspec["matchResources"] = match_resources;
    }
    bindings(client, "v1")
        .create(
            &PostParams::default(),
            &dynamic(json!({
                "apiVersion": format!("{GROUP}/v1"), "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name}, "spec": bspec,
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("creating binding {name}: {e}"));
    settle(client).await;
}

async fn uninstall(client: &Client, name: &str) {
    let _ = bindings(client, "v1")
        .delete(name, &DeleteParams::default())
        .await;
    let _ = policies(client, "v1")
        .delete(name, &DeleteParams::default())
        .await;
    settle(client).await;
}

/// Waits until the admission plugin sees every policy and binding written
/// so far. kube-sim applies them at once; a real API server learns them
/// from informers, in order: once a sentinel policy written after them
/// mutates a dry-run create, they are in effect too.
async fn settle(client: &Client) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "settle-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let spec = json!({
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}],
            "objectSelector": {"matchLabels": {"settle": name}},
        },
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": "Object{metadata: Object.metadata{annotations: {\"settled\": \"yes\"}}}"}}],
    });
    for (api, kind, body) in [
        (policies(client, "v1"), "MutatingAdmissionPolicy", spec),
        (
            bindings(client, "v1"),
            "MutatingAdmissionPolicyBinding",
            json!({"policyName": name}),
        ),
    ] {
        api.create(
            &PostParams::default(),
            &dynamic(json!({"apiVersion": format!("{GROUP}/v1"), "kind": kind,
                "metadata": {"name": name}, "spec": body})),
        )
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let probe: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"settle": name}}}))
            .unwrap_or_else(|e| panic!("{e}"));
    common::eventually("the admission plugin sees the policies", async || {
        let got = cms
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await
            .ok()?;
        got.metadata
            .annotations
            .filter(|a| a.contains_key("settled"))
    })
    .await;
    let _ = bindings(client, "v1")
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = policies(client, "v1")
        .delete(&name, &DeleteParams::default())
        .await;
}

/// The upstream StorageObjectInUseProtection plugin as a policy (what the
/// chart renders): CREATE of the main resource only, no duplicate.
fn finalizer_policy(resource: &str, finalizer: &str) -> Value {
    json!({
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource],
        }]},
        "matchConditions": [{
            "name": "finalizer-missing",
            "expression": format!("!has(object.metadata.finalizers) || !object.metadata.finalizers.exists(f, f == \"{finalizer}\")"),
        }],
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": format!(
            "has(object.metadata.finalizers) ? [JSONPatch{{op: \"add\", path: \"/metadata/finalizers/-\", value: \"{finalizer}\"}}] : [JSONPatch{{op: \"add\", path: \"/metadata/finalizers\", value: [\"{finalizer}\"]}}]"
        )}}],
    })
}

/// A namespace labelled so that bindings can select it.
async fn labelled_namespace(t: &Target, prefix: &str) -> String {
    let ns = t.namespace(prefix).await;
    Api::<Namespace>::all(t.client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"admission-test": ns}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling {ns}: {e}"));
    ns
}

fn ns_selector(ns: &str) -> Value {
    json!({"namespaceSelector": {"matchLabels": {"admission-test": ns}}})
}

fn pvc(name: &str, finalizers: Option<&[&str]>) -> PersistentVolumeClaim {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    if let Some(f) = finalizers {
        v["metadata"]["finalizers"] = json!(f);
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("pvc literal: {e}"))
}

fn fins(meta: &ObjectMeta) -> Vec<String> {
    meta.finalizers.clone().unwrap_or_default()
}

#[tokio::test]
async fn finalizer_policy_adds_on_create_only_like_the_admission_plugin() {
    conform("finalizer_policy_adds_on_create_only_like_the_admission_plugin", kube_sim::SimConfig::default(), async |t| {
    let client = &t.client;
    let ns = labelled_namespace(&t, "map-table").await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);

    // A claim that exists before the policy: updates must not add.
    pvcs.create(&PostParams::default(), &pvc("before", None))
        .await
        .unwrap_or_else(|e| panic!("create before: {e}"));

    let name = t.unique("pvc-protection");
    install(
        client,
        &name,
        finalizer_policy("persistentvolumeclaims", PVC_FINALIZER),
        ns_selector(&ns),
    )
    .await;

    // Served under both versions, one object.
    let v1 = policies(client, "v1")
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("get v1: {e}"));
    let beta = policies(client, "v1beta1")
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("get v1beta1: {e}"));
    assert_eq!(v1.metadata.uid, beta.metadata.uid);
    assert_eq!(
        beta.types.as_ref().map(|t| t.api_version.as_str()),
        Some("admissionregistration.k8s.io/v1beta1")
    );
    // Defaults as the API server sets them.
    assert_eq!(
        v1.data["spec"]["matchConstraints"]["matchPolicy"],
        "Equivalent"
    );
    assert_eq!(
        v1.data["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
        "*"
    );

    // (name, finalizers given, finalizers wanted)
    type Case<'a> = (&'a str, Option<&'a [&'a str]>, &'a [&'a str]);
    let cases: &[Case<'_>] = &[
        ("none", None, &[PVC_FINALIZER]),
        ("empty", Some(&[]), &[PVC_FINALIZER]),
        ("present", Some(&[PVC_FINALIZER]), &[PVC_FINALIZER]),
        (
            "other",
            Some(&["example.com/keep"]),
            &["example.com/keep", PVC_FINALIZER],
        ),
        (
            "both",
            Some(&[PVC_FINALIZER, "example.com/keep"]),
            &[PVC_FINALIZER, "example.com/keep"],
        ),
    ];
    for (case, given, want) in cases {
        let created = pvcs
            .create(&PostParams::default(), &pvc(case, *given))
            .await
            .unwrap_or_else(|e| panic!("create {case}: {e}"));
        assert_eq!(fins(&created.metadata), *want, "case {case}: response");
        let stored = pvcs
            .get(case)
            .await
            .unwrap_or_else(|e| panic!("get {case}: {e}"));
        assert_eq!(fins(&stored.metadata), *want, "case {case}: stored");
    }

    // Dry-run: the answer shows the mutation, nothing is stored.
    let dry = pvcs
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &pvc("dry", None),
        )
        .await
        .unwrap_or_else(|e| panic!("dry-run create: {e}"));
    assert_eq!(fins(&dry.metadata), [PVC_FINALIZER]);
    assert!(pvcs.get_opt("dry").await.ok().flatten().is_none());

    // UPDATE does not add.
    let updated = pvcs
        .patch(
            "before",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("update before: {e}"));
    assert_eq!(fins(&updated.metadata), Vec::<String>::new(), "update");
    // A subresource write does not add.
    let status = pvcs
        .patch_status(
            "before",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Pending"}})),
        )
        .await
        .unwrap_or_else(|e| panic!("status update: {e}"));
    assert_eq!(fins(&status.metadata), Vec::<String>::new(), "status");

    // Outside the bound namespace nothing happens.
    let other_ns = t.namespace("map-unbound").await;
    let unbound = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &other_ns)
        .create(&PostParams::default(), &pvc("free", None))
        .await
        .unwrap_or_else(|e| panic!("create unbound: {e}"));
    assert_eq!(
        fins(&unbound.metadata),
        Vec::<String>::new(),
        "unbound namespace"
    );

    // PersistentVolumes (cluster-scoped), selected by label.
    let pv_policy = t.unique("pv-protection");
    install(
        client,
        &pv_policy,
        finalizer_policy("persistentvolumes", PV_FINALIZER),
        json!({"objectSelector": {"matchLabels": {"admission-test": ns}}}),
    )
    .await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv_name = t.unique("pv");
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name, "labels": {"admission-test": ns}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/x"}},
    }))
    .unwrap_or_else(|e| panic!("pv literal: {e}"));
    let created = pvs
        .create(&PostParams::default(), &pv)
        .await
        .unwrap_or_else(|e| panic!("create pv: {e}"));
    assert_eq!(fins(&created.metadata), [PV_FINALIZER]);

    // Removing the binding ends it.
    uninstall(client, &name).await;
    let after = pvcs
        .create(&PostParams::default(), &pvc("after", None))
        .await
        .unwrap_or_else(|e| panic!("create after: {e}"));
    assert_eq!(
        fins(&after.metadata),
        Vec::<String>::new(),
        "after uninstall"
    );

    uninstall(client, &pv_policy).await;
    let _ = pvs
        .patch(
            &pv_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let _ = pvs.delete(&pv_name, &DeleteParams::default()).await;
    t.cleanup_namespace(&ns).await;
    t.cleanup_namespace(&other_ns).await;
    })
    .await;
}

async fn create_policy_err(t: &Target, version: &str, spec: Value) -> kube::core::Status {
    let name = t.unique("bad");
    let err = policies(&t.client, version)
        .create(
            &PostParams::default(),
            &dynamic(json!({
                "apiVersion": format!("{GROUP}/{version}"), "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name}, "spec": spec,
            })),
        )
        .await
        .map(|_| ())
        .err()
        .unwrap_or_else(|| panic!("policy {spec} was accepted"));
    t.status(err)
}

#[tokio::test]
async fn a_policy_kube_sim_cannot_run_is_refused_with_422() {
    conform("a_policy_kube_sim_cannot_run_is_refused_with_422", kube_sim::SimConfig::default(), async |t| {
    if t.sim().is_none() {
        return; // the unsupported features are kube-sim's own
    }
    let rules = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]});
    let jp = |e: &str| json!({"matchConstraints": rules, "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": e}}]});
    for version in ["v1", "v1beta1"] {
        for (spec, field, want) in [
            (
                jp("authorizer.group('').resource('x').check('get').allowed() ? [] : []"),
                "spec.mutations[0].jsonPatch.expression",
                "kube-sim does not support the CEL variable 'authorizer'",
            ),
            (
                jp("quantity('1Gi').isLessThan(quantity('2Gi')) ? [] : []"),
                "spec.mutations[0].jsonPatch.expression",
                "kube-sim does not support the CEL function 'quantity'",
            ),
            (
                jp("[JSONPatch{op: 'add', path: '/x', valu: 1}]"),
                "spec.mutations[0].jsonPatch.expression",
                "JSONPatch has no field 'valu'",
            ),
            (
                jp("[JSONPatch{op: 'add'"),
                "spec.mutations[0].jsonPatch.expression",
                "compilation failed",
            ),
            (
                json!({"matchConstraints": rules, "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]}),
                "spec.paramKind",
                "parameter resources",
            ),
            (
                json!({"matchConstraints": rules, "matchConditions": [{"name": "c", "expression": "nope > 1"}],
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]}),
                "spec.matchConditions[0].expression",
                "undeclared reference to 'nope'",
            ),
            (
                json!({"matchConstraints": rules, "mutations": []}),
                "spec.mutations",
                "Required value",
            ),
            (
                json!({"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["configmaps"]}]},
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]}),
                "spec.matchConstraints.resourceRules[0].operations[0]",
                "Unsupported value: \"DELETE\"",
            ),
            (
                json!({"matchConstraints": rules, "failurePolicy": "Sometimes",
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]}),
                "spec.failurePolicy",
                "Unsupported value: \"Sometimes\"",
            ),
        ] {
            let s = create_policy_err(&t, version, spec.clone()).await;
            assert_eq!(s.code, 422, "{version} {spec}: {s:?}");
            assert!(
                s.message.contains(field) && s.message.contains(want),
                "{version} {spec}: {}",
                s.message
            );
        }
    }
    // A binding needs its policy's name.
    let err = bindings(&t.client, "v1")
        .create(
            &PostParams::default(),
            &dynamic(json!({"apiVersion": format!("{GROUP}/v1"), "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "b"}, "spec": {}})),
        )
        .await
        .err()
        .map(|e| t.status(e));
    assert!(
        err.as_ref()
            .is_some_and(|s| s.code == 422 && s.message.contains("spec.policyName: Required value")),
        "{err:?}"
    );
    })
    .await;
}

async fn configmap(client: &Client, ns: &str, name: &str, labels: Value) -> kube::Result<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        ),
    );
    api.create(
        &PostParams::default(),
        &dynamic(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}})),
    )
    .await
    .map(|o| serde_json::to_value(o).unwrap_or_default())
}

#[tokio::test]
async fn apply_configuration_conditions_variables_and_failure_policy() {
    conform("apply_configuration_conditions_variables_and_failure_policy", kube_sim::SimConfig::default(), async |t| {
    let client = &t.client;
    let ns = labelled_namespace(&t, "map-apply").await;
    let rules = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]);

    // ApplyConfiguration with a variable, a match condition and namespaceObject.
    let apply = t.unique("apply");
    install(
        client,
        &apply,
        json!({
            "matchConstraints": {"resourceRules": rules},
            "variables": [{"name": "team", "expression": "namespaceObject.metadata.labels['admission-test']"}],
            "matchConditions": [{"name": "opted-in", "expression": "object.metadata.name.startsWith('yes-')"}],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{labels: {'team': variables.team, 'op': request.operation.lowerAscii()}}}"}}],
        }),
        ns_selector(&ns),
    )
    .await;
    let yes = configmap(client, &ns, "yes-a", json!({"keep": "1"}))
        .await
        .unwrap_or_else(|e| panic!("create yes-a: {e}"));
    assert_eq!(
        yes["metadata"]["labels"],
        json!({"keep": "1", "team": ns, "op": "create"})
    );
    let no = configmap(client, &ns, "no-a", json!({"keep": "1"}))
        .await
        .unwrap_or_else(|e| panic!("create no-a: {e}"));
    assert_eq!(no["metadata"]["labels"], json!({"keep": "1"}));
    uninstall(client, &apply).await;

    // A runtime error: Fail rejects the request, Ignore lets it through
    // unchanged.
    let broken = |policy: &str| {
        json!({
            "failurePolicy": policy,
            "matchConstraints": {"resourceRules": rules},
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: object.metadata.annotations['missing']}]"}}],
        })
    };
    let fail = t.unique("fail");
    install(client, &fail, broken("Fail"), ns_selector(&ns)).await;
    let err = configmap(client, &ns, "rejected", json!({}))
        .await
        .err()
        .map(|e| t.status(e))
        .unwrap_or_else(|| panic!("failurePolicy Fail let the create through"));
    assert!(
        err.message.contains(&fail),
        "the error names the policy: {err:?}"
    );
    assert!(
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
            .get_opt("rejected")
            .await
            .ok()
            .flatten()
            .is_none()
    );
    uninstall(client, &fail).await;
    let ignore = t.unique("ignore");
    install(client, &ignore, broken("Ignore"), ns_selector(&ns)).await;
    let through = configmap(client, &ns, "through", json!({"a": "b"}))
        .await
        .unwrap_or_else(|e| panic!("failurePolicy Ignore rejected: {e}"));
    assert_eq!(through["metadata"]["labels"], json!({"a": "b"}));
    uninstall(client, &ignore).await;

    // An apply configuration may not set an atomic list (it would drop
    // values it does not name): an error, here under Fail.
    let atomic = t.unique("atomic");
    install(
        client,
        &atomic,
        json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["persistentvolumeclaims"]}]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{spec: Object.spec{accessModes: ['ReadOnlyMany']}}"}}],
        }),
        ns_selector(&ns),
    )
    .await;
    let err = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pvc("atomic", None))
        .await
        .err()
        .map(|e| t.status(e))
        .unwrap_or_else(|| panic!("an apply configuration replaced an atomic list"));
    assert!(err.message.contains("atomic"), "{err:?}");
    uninstall(client, &atomic).await;
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

#[tokio::test]
async fn reinvocation_if_needed_restores_what_a_later_policy_removed() {
    conform("reinvocation_if_needed_restores_what_a_later_policy_removed", kube_sim::SimConfig::default(), async |t| {
    let client = &t.client;
    // Upstream runs the bound policies in Go map order (any order; kube-sim:
    // by name), so only IfNeeded has one outcome: whichever runs first,
    // the adder's finalizer ends up beside the other. Under Never, the
    // adder running first loses it.
    for (reinvocation, want) in [
        ("IfNeeded", vec![vec!["example.com/other", PVC_FINALIZER]]),
        (
            "Never",
            vec![
                vec!["example.com/other"],
                vec!["example.com/other", PVC_FINALIZER],
            ],
        ),
    ] {
        let ns = labelled_namespace(&t, "map-reinvoke").await;
        // Policies run in name order: "a-..." adds the finalizer, "b-..."
        // replaces the whole list afterwards.
        let a = t.unique("a-add");
        let mut spec = finalizer_policy("persistentvolumeclaims", PVC_FINALIZER);
        spec["reinvocationPolicy"] = json!(reinvocation);
        install(client, &a, spec, ns_selector(&ns)).await;
        let b = t.unique("b-replace");
        install(
            client,
            &b,
            json!({
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["persistentvolumeclaims"]}]},
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: has(object.metadata.finalizers) ? 'replace' : 'add', path: '/metadata/finalizers', value: ['example.com/other']}]"}}],
            }),
            ns_selector(&ns),
        )
        .await;
        let created = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &pvc("c", None))
            .await
            .unwrap_or_else(|e| panic!("create ({reinvocation}): {e}"));
        let got = fins(&created.metadata);
        assert!(
            want.iter().any(|w| *w == got),
            "reinvocationPolicy {reinvocation}: {got:?}"
        );
        uninstall(client, &a).await;
        uninstall(client, &b).await;
        t.cleanup_namespace(&ns).await;
    }
    })
    .await;
}

#[tokio::test]
async fn update_admission_runs_before_the_no_new_finalizers_while_deleting_rule() {
    conform("update_admission_runs_before_the_no_new_finalizers_while_deleting_rule", kube_sim::SimConfig::default(), async |t| {
    let client = &t.client;
    let ns = labelled_namespace(&t, "map-update").await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    pvcs.create(&PostParams::default(), &pvc("live", None))
        .await
        .unwrap_or_else(|e| panic!("create live: {e}"));
    pvcs.create(
        &PostParams::default(),
        &pvc("deleting", Some(&["example.com/hold"])),
    )
    .await
    .unwrap_or_else(|e| panic!("create deleting: {e}"));
    pvcs.delete("deleting", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    let late = t.unique("late");
    install(
        client,
        &late,
        json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["persistentvolumeclaims"]}]},
            "matchConditions": [{"name": "missing", "expression": "!has(object.metadata.finalizers) || !('example.com/late' in object.metadata.finalizers)"}],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{finalizers: ['example.com/late']}}"}}],
        }),
        ns_selector(&ns),
    )
    .await;
    let label = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    // An update of a live claim gets the finalizer (finalizers is a set:
    // merged, not replaced).
    let live = pvcs
        .patch("live", &PatchParams::default(), &label)
        .await
        .unwrap_or_else(|e| panic!("update live: {e}"));
    assert_eq!(fins(&live.metadata), ["example.com/late"]);
    // On a claim being deleted the added finalizer meets the rule.
    let err = pvcs
        .patch("deleting", &PatchParams::default(), &label)
        .await
        .err()
        .map(|e| t.status(e))
        .unwrap_or_else(|| panic!("a finalizer was added to an object being deleted"));
    assert_eq!(err.code, 422, "{err:?}");
    assert!(
        err.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{err:?}"
    );
    uninstall(client, &late).await;
    pvcs.patch(
        "deleting",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap_or_else(|e| panic!("release deleting: {e}"));
    t.cleanup_namespace(&ns).await;
    })
    .await;
}

/// The API server's own writes pass admission as `system:apiserver` (its
/// loopback client): the IPAddress the ClusterIP allocator creates for a
/// Service is mutated by a policy that sees that user and its groups.
#[tokio::test]
async fn the_allocators_ipaddress_is_admitted_as_the_api_server() {
    conform("the_allocators_ipaddress_is_admitted_as_the_api_server", kube_sim::SimConfig::default(), async |t| {
    let client = &t.client;
    let ns = labelled_namespace(&t, "map-ip").await;
    let name = t.unique("ip");
    // Cluster-scoped IPAddresses: only those of this namespace's Services.
    install(
        client,
        &name,
        json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["ipaddresses"]}]},
            "matchConditions": [{"name": "this-test", "expression": format!("object.spec.parentRef.namespace == '{ns}'")}],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{annotations: {'created-by': request.userInfo.username, 'groups': request.userInfo.groups.join(',')}}}"}}],
        }),
        Value::Null,
    )
    .await;
    let svc: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}))
            .unwrap_or_else(|e| panic!("service literal: {e}"));
    let created = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap_or_else(|e| panic!("create web: {e}"));
    let ip = created
        .spec
        .and_then(|s| s.cluster_ip)
        .unwrap_or_else(|| panic!("web has no clusterIP"));
    let addr = Api::<k8s_openapi::api::networking::v1::IPAddress>::all(client.clone())
        .get(&ip)
        .await
        .unwrap_or_else(|e| panic!("IPAddress {ip}: {e}"));
    t.record(
        "the allocator's IPAddress, annotated by the policy",
        json!(addr.metadata.annotations),
    );
    uninstall(client, &name).await;
    })
    .await;
}

//! Create-time protection (createTimeProtection): the chart's
//! MutatingAdmissionPolicy and binding, with helm 3.18 and 4.1. Rendered
//! with `--api-versions` for the `auto` detection (what a 1.36 / 1.34-1.35 /
//! 1.33 cluster serves), per finalizer profile, release, gate and controller
//! set; then installed into kube-sim and into the real kube-apiserver v1.36.3
//! (admissionregistration.k8s.io/v1, its own CEL and policy plugin), where a
//! claim and a volume created while no manager runs carry the finalizer, and
//! an upgrade that turns the gate off (or an uninstall) takes the policy
//! away.

mod chart_support;
mod support;

use chart_support::{Helm, HelmVersion, Rendered, chart_dir};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use test_bed::{Bed, Options, Server};

const V1: &str = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy";
const V1BETA1: &str = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy";
const PVC_FINALIZER: &str = "protection-manager.io/pvc-protection";
const PV_FINALIZER: &str = "protection-manager.io/pv-protection";

fn helms() -> Vec<Helm> {
    HelmVersion::ALL.into_iter().map(Helm::new).collect()
}

fn args(api: Option<&str>, pairs: &[&str]) -> Vec<String> {
    let mut a = Vec::new();
    if let Some(api) = api {
        a.extend(["--api-versions".to_string(), api.to_string()]);
    }
    for p in pairs {
        a.extend(["--set".to_string(), p.to_string()]);
    }
    a
}

fn template(helm: &Helm, api: Option<&str>, pairs: &[&str]) -> Result<Rendered, String> {
    let a = args(api, pairs);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    helm.template("pm", "protection", &a)
}

/// (apiVersion, policy name, resource, finalizer) of a rendered policy.
type PolicyRow = (String, String, String, String);

/// A render case: name, the API version the cluster serves, `--set` pairs,
/// the policies wanted.
type Case<'a> = (&'a str, Option<&'a str>, Vec<&'a str>, Vec<PolicyRow>);

/// The rows of each rendered policy.
fn policies(r: &Rendered) -> Vec<PolicyRow> {
    let bindings = r.of_kind("MutatingAdmissionPolicyBinding");
    r.of_kind("MutatingAdmissionPolicy")
        .into_iter()
        .map(|p| {
            let name = p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            assert!(
                bindings
                    .iter()
                    .any(|b| b["spec"]["policyName"] == name.as_str()
                        && b["apiVersion"] == p["apiVersion"]),
                "policy {name} has a binding of the same apiVersion"
            );
            let expr = p["spec"]["mutations"][0]["jsonPatch"]["expression"]
                .as_str()
                .unwrap_or_default();
            let finalizer = [PVC_FINALIZER, PV_FINALIZER]
                .into_iter()
                .find(|f| expr.contains(f))
                .unwrap_or("none")
                .to_string();
            (
                p["apiVersion"].as_str().unwrap_or_default().to_string(),
                name,
                p["spec"]["matchConstraints"]["resourceRules"][0]["resources"][0]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                finalizer,
            )
        })
        .collect()
}

fn both(api: &str) -> Vec<PolicyRow> {
    vec![
        (
            api.to_string(),
            "pm-protection-manager-pvc-protection".into(),
            "persistentvolumeclaims".into(),
            PVC_FINALIZER.into(),
        ),
        (
            api.to_string(),
            "pm-protection-manager-pv-protection".into(),
            "persistentvolumes".into(),
            PV_FINALIZER.into(),
        ),
    ]
}

#[test]
fn rendered_per_api_profile_release_gate_and_controller() {
    let v1 = "admissionregistration.k8s.io/v1";
    let beta = "admissionregistration.k8s.io/v1beta1";
    let none: Vec<PolicyRow> = Vec::new();
    let pvc_only = vec![both(v1).remove(0)];
    let cases: Vec<Case<'_>> = vec![
        ("1.36: v1, auto", Some(V1), vec![], both(v1)),
        (
            "1.34-1.35: v1beta1, auto",
            Some(V1BETA1),
            vec![],
            both(beta),
        ),
        ("1.33: neither, auto", None, vec![], none.clone()),
        (
            "enabled=false",
            Some(V1),
            vec!["createTimeProtection.enabled=false"],
            none.clone(),
        ),
        (
            "enabled=true",
            Some(V1),
            vec!["createTimeProtection.enabled=true"],
            both(v1),
        ),
        (
            "upstream profile",
            Some(V1),
            vec!["finalizerProfile=upstream"],
            none.clone(),
        ),
        (
            "0.1: gate off",
            Some(V1),
            vec!["emulatedVersion=0.1"],
            none.clone(),
        ),
        (
            "0.1 with the gate on",
            Some(V1),
            vec![
                "emulatedVersion=0.1",
                "featureGates.StorageObjectInUseProtection=true",
            ],
            both(v1),
        ),
        (
            "0.1 with AllAlpha",
            Some(V1),
            vec!["emulatedVersion=0.1", "featureGates.AllAlpha=true"],
            both(v1),
        ),
        (
            "0.2: gate on",
            Some(V1),
            vec!["emulatedVersion=0.2"],
            both(v1),
        ),
        (
            "0.2 with the gate off",
            Some(V1),
            vec![
                "emulatedVersion=0.2",
                "featureGates.StorageObjectInUseProtection=false",
            ],
            none.clone(),
        ),
        (
            "0.0: no gate yet",
            Some(V1),
            vec!["emulatedVersion=0.0"],
            none.clone(),
        ),
        (
            "pvc-protection only",
            Some(V1),
            vec!["controllers={*,-pv-protection}"],
            pvc_only,
        ),
        (
            "no storage controller",
            Some(V1),
            vec!["controllers={*,-pv-protection,-pvc-protection}"],
            none.clone(),
        ),
    ];
    for helm in helms() {
        for (case, api, pairs, want) in &cases {
            let r = template(&helm, *api, pairs)
                .unwrap_or_else(|e| panic!("{:?} {case}: {e}", helm.version));
            assert_eq!(policies(&r), *want, "{:?} {case}", helm.version);
        }
        // The policy is what the upstream plugin does: CREATE of the main
        // resource only, no duplicate, and it fails closed.
        let r = template(&helm, Some(V1), &[]).unwrap_or_else(|e| panic!("{e}"));
        let p = r
            .of_kind("MutatingAdmissionPolicy")
            .into_iter()
            .find(|p| p["metadata"]["name"] == "pm-protection-manager-pvc-protection")
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(
            p["spec"]["matchConstraints"]["resourceRules"],
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["persistentvolumeclaims"]}])
        );
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        assert_eq!(p["spec"]["reinvocationPolicy"], "IfNeeded");
        assert_eq!(
            p["metadata"]["labels"]["app.kubernetes.io/instance"], "pm",
            "labelled with the release"
        );

        for (pairs, want) in [
            (
                vec!["createTimeProtection.enabled=true"],
                "createTimeProtection.enabled=true: this cluster serves neither admissionregistration.k8s.io/v1",
            ),
            (
                vec![
                    "createTimeProtection.enabled=true",
                    "finalizerProfile=upstream",
                ],
                "createTimeProtection.enabled=true needs finalizerProfile=project",
            ),
            (
                vec!["createTimeProtection.enabled=maybe"],
                // helm 3 and 4 word the schema error differently.
                "createTimeProtection",
            ),
        ] {
            let api = if pairs.contains(&"finalizerProfile=upstream") {
                Some(V1)
            } else {
                None
            };
            match template(&helm, api, &pairs) {
                Ok(_) => panic!("{:?} {pairs:?} rendered", helm.version),
                Err(e) => assert!(
                    e.contains(want) && (!pairs[0].ends_with("maybe") || e.contains("auto")),
                    "{:?} {pairs:?}: {e}",
                    helm.version
                ),
            }
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn helm_ok(helm: &Helm, args: Vec<String>) -> String {
    let helm = helm.clone();
    tokio::task::spawn_blocking(move || helm.ok(&args))
        .await
        .expect("helm task")
}

fn policy_names(list: &[DynamicObject]) -> Vec<String> {
    let mut n: Vec<String> = list
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    n.sort();
    n
}

/// Waits until a dry-run CREATE of a claim comes back with the chart's
/// finalizer (`want`) or without it: a real API server takes a policy (or
/// its removal) up from its informers shortly after the write that made it.
async fn wait_policy_in_effect(pvcs: &Api<PersistentVolumeClaim>, want: bool, what: &str) {
    let probe: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("pvc json");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    test_support::until(std::time::Duration::from_secs(60), what, async || {
        pvcs.create(&dry, &probe).await.is_ok_and(|c| {
            c.metadata
                .finalizers
                .unwrap_or_default()
                .contains(&PVC_FINALIZER.to_string())
                == want
        })
    })
    .await;
}

fn installed(version: HelmVersion, bed: Bed) {
    let rt = runtime();
    rt.block_on(async {
        let server = Server::start(bed, Options::named("chart-policy"))
            .await
            .unwrap_or_else(|e| panic!("start {}: {e:#}", bed.name()));
        let client = server.client().await.expect("admin client");
        let helm = Helm::new(version).with_kubeconfig(server.kubeconfig_path());
        let chart = chart_dir().to_string_lossy().into_owned();
        let ns = "pm-system";
        let base = |extra: &[&str]| -> Vec<String> {
            let mut a: Vec<String> = [
                "--namespace",
                ns,
                "--set",
                "controllers={*,-service-lb-cleanup}",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            for e in extra {
                a.extend(["--set".to_string(), e.to_string()]);
            }
            a
        };
        // auto: both serve admissionregistration.k8s.io/v1.
        let mut install = vec![
            "install".to_string(),
            "pm".to_string(),
            chart.clone(),
            "--create-namespace".to_string(),
        ];
        install.extend(base(&[]));
        helm_ok(&helm, install).await;
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicy");
        let policies: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "mutatingadmissionpolicies"),
        );
        let list = policies.list(&Default::default()).await.expect("list policies");
        assert_eq!(
            policy_names(&list.items),
            [
                "pm-protection-manager-pv-protection",
                "pm-protection-manager-pvc-protection"
            ],
            "{version:?}"
        );

        // No manager runs (no kubelet, and no KCM to make its pod): the
        // finalizer is there from the first write.
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
        wait_policy_in_effect(&pvcs, true, "the policy mutates claims").await;
        let claim = |name: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }))
            .expect("pvc json")
        };
        let created = pvcs
            .create(&PostParams::default(), &claim("data"))
            .await
            .expect("create pvc");
        assert_eq!(
            created.metadata.finalizers.clone().unwrap_or_default(),
            [PVC_FINALIZER],
            "{version:?}"
        );
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "vol"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/x"}},
        }))
        .expect("pv json");
        let created = Api::<PersistentVolume>::all(client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .expect("create pv");
        assert_eq!(
            created.metadata.finalizers.clone().unwrap_or_default(),
            [PV_FINALIZER],
            "{version:?}"
        );
        // Deleting it leaves it Terminating until a manager removes the
        // finalizer: the creation window is closed.
        pvcs.delete("data", &DeleteParams::default())
            .await
            .expect("delete pvc");
        let terminating = pvcs.get("data").await.expect("pvc still there");
        assert!(terminating.metadata.deletion_timestamp.is_some());

        // Upgrade with the gate off (as at 0.1): the policy goes with it.
        let mut upgrade = vec![
            "upgrade".to_string(),
            "--no-hooks".to_string(),
            "pm".to_string(),
            chart.clone(),
        ];
        upgrade.extend(base(&["emulatedVersion=0.2", "featureGates.StorageObjectInUseProtection=false"]));
        helm_ok(&helm, upgrade).await;
        let list = policies.list(&Default::default()).await.expect("list policies");
        assert!(list.items.is_empty(), "{version:?}: {:?}", policy_names(&list.items));
        wait_policy_in_effect(&pvcs, false, "the policy's removal is in effect").await;
        let created = pvcs
            .create(&PostParams::default(), &claim("later"))
            .await
            .expect("create pvc");
        assert_eq!(created.metadata.finalizers, None, "{version:?}");

        // Back on, then uninstall: nothing of it stays.
        let mut upgrade = vec![
            "upgrade".to_string(),
            "--no-hooks".to_string(),
            "pm".to_string(),
            chart.clone(),
        ];
        upgrade.extend(base(&[]));
        helm_ok(&helm, upgrade).await;
        assert_eq!(
            policies.list(&Default::default()).await.expect("list").items.len(),
            2
        );
        wait_policy_in_effect(&pvcs, true, "the policy is back in effect").await;
        helm_ok(
            &helm,
            vec![
                "uninstall".into(),
                "--no-hooks".into(),
                "pm".into(),
                "--namespace".into(),
                ns.into(),
            ],
        )
        .await;
        assert!(policies.list(&Default::default()).await.expect("list").items.is_empty());
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicyBinding");
        let bindings: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "mutatingadmissionpolicybindings"),
        );
        assert!(bindings.list(&Default::default()).await.expect("list").items.is_empty());
        wait_policy_in_effect(&pvcs, false, "nothing mutates claims after the uninstall").await;
        server.shutdown().await;
    });
}

#[test]
fn helm3_installs_the_policy_and_a_claim_created_without_a_manager_is_protected() {
    installed(HelmVersion::V3, Bed::Sim);
}

#[test]
fn helm4_installs_the_policy_and_a_claim_created_without_a_manager_is_protected() {
    installed(HelmVersion::V4, Bed::Sim);
}

#[test]
fn helm3_policy_on_the_real_api_server_protects_a_claim_created_without_a_manager() {
    installed(HelmVersion::V3, Bed::Real);
}

#[test]
fn helm4_policy_on_the_real_api_server_protects_a_claim_created_without_a_manager() {
    installed(HelmVersion::V4, Bed::Real);
}

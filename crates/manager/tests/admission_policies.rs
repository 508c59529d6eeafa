//! The chart's ValidatingAdmissionPolicies, end to end, on kube-sim and on
//! the real kube-apiserver v1.36.3 (with kube-controller-manager) of the
//! test bed, with the chart installed by helm and no manager pod running
//! (neither policy needs one to refuse). Where both servers show text (the
//! refusal, kubectl's and the CLI's output) it must be the same.
//!
//! Liens: `protection-manager lien add|list|remove`, and `kubectl delete`
//! refused while a lien stands, naming the holders and reasons, and allowed
//! after; concurrent `lien add`s of several holders keep every entry (the
//! guarded patch); a lien on a namespace refuses its deletion, a lien on an
//! object holds its namespace's deletion until removed; the CLI warns when
//! no lien policy covers a kind.
//!
//! Deny mode: an object the rules controller labelled in use is refused
//! with its users, rule and reason; the namespace controller (the object's
//! namespace being deleted) and the garbage collector get through.
//!
//! A namespace holding a Deny-protected Secret, a claim in use and a liened
//! object, with the manager running, deletes cleanly: nothing in use goes
//! before its pod, the lien holds the namespace (named in its conditions)
//! until removed, then the namespace is gone.

mod chart_support;
mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chart_support::{Helm, HelmVersion, chart_dir};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use test_support::kubectl;

const BIN: &str = env!("CARGO_BIN_EXE_protection-manager");

/// A name unique to this run, the same on both servers.
fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..8])
}
const RELEASE: &str = "pm";

struct Server {
    name: &'static str,
    client: Client,
    kubeconfig: PathBuf,
    _sim: Option<kube_sim::KubeSim>,
    _cp: Option<Arc<control_plane::ControlPlane>>,
}

fn kubectl_bin() -> PathBuf {
    kubectl::tool("KUBECTL_PINNED", ".tools/bin/kubectl")
}

/// Installs the chart (release `pm` in `protection-manager`): the lien
/// policy is rendered because the server serves ValidatingAdmissionPolicy
/// v1 (`liens.enabled: auto`).
async fn install(kubeconfig: &Path) {
    let helm = Helm::new(HelmVersion::ALL[HelmVersion::ALL.len() - 1]).with_kubeconfig(kubeconfig);
    let chart = chart_dir().to_string_lossy().into_owned();
    let args: Vec<String> = [
        "install",
        RELEASE,
        &chart,
        "--namespace",
        "protection-manager",
        "--create-namespace",
        "--set",
        "controllers={*,-service-lb-cleanup}",
        "--set",
        "featureGates.InUseProtectionRules=true",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    tokio::task::spawn_blocking(move || helm.ok(&args))
        .await
        .unwrap_or_else(|e| panic!("helm task: {e}"));
}

/// Tests that run a manager take the servers one at a time: every rule is
/// cluster-wide, so on the shared real server one test's rule (and manager)
/// would hold the other test's objects too.
static MANAGER_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn sim() -> Server {
    // A deleted scheduled pod stays Terminating until its kubelet (here:
    // the test) finishes it, as on the real server.
    let cfg = kube_sim::SimConfig {
        pod_graceful_deletion: true,
        ..kube_sim::SimConfig::default()
    };
    let sim = kube_sim::KubeSim::start(cfg)
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
    install(sim.kubeconfig_path()).await;
    Server {
        name: "kube-sim",
        client: sim.client().await,
        kubeconfig: sim.kubeconfig_path().to_path_buf(),
        _sim: Some(sim),
        _cp: None,
    }
}

async fn real() -> Server {
    let cp = control_plane::ControlPlane::shared("admission-policies", || {
        control_plane::Config::default().with_kcm(["*"])
    })
    .await
    .unwrap_or_else(|e| panic!("starting the real control plane: {e}"));
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| install(cp.kubeconfig_path()))
        .await;
    Server {
        name: "kube-apiserver",
        client: cp
            .client()
            .await
            .unwrap_or_else(|e| panic!("admin client: {e}")),
        kubeconfig: cp.kubeconfig_path().to_path_buf(),
        _sim: None,
        _cp: Some(cp),
    }
}

impl Server {
    async fn kubectl(&self, args: &[&str]) -> String {
        let (ok, text) = kubectl::run_text(&kubectl_bin(), &self.kubeconfig, args, None).await;
        format!("ok={ok} {}", text.trim())
    }

    /// `protection-manager <args> --kubeconfig ...`: (success, output).
    async fn cli(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new(BIN)
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .output()
            .await
            .unwrap_or_else(|e| panic!("running {BIN}: {e}"));
        format!(
            "ok={} {}{}",
            out.status.success(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .trim()
        .to_string()
    }

    async fn namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
            .unwrap_or_else(|e| panic!("literal: {e}"));
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("{}: creating namespace {name}: {e}", self.name));
    }

    async fn secret(&self, ns: &str, name: &str) {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let s: Secret = serde_json::from_value(json!({"metadata": {"name": name}}))
            .unwrap_or_else(|e| panic!("literal: {e}"));
        api.create(&PostParams::default(), &s)
            .await
            .unwrap_or_else(|e| panic!("{}: creating secret {ns}/{name}: {e}", self.name));
    }

    /// Polls until a server-side dry-run `kubectl delete <args>` is refused
    /// (the real API server picks the chart's new policy up
    /// asynchronously).
    async fn until_refused(&self, args: &[&str]) {
        let mut a = vec!["delete"];
        a.extend_from_slice(args);
        a.push("--dry-run=server");
        test_support::eventually(
            Duration::from_secs(30),
            &format!(
                "{}: the lien policy refuses kubectl delete {args:?}",
                self.name
            ),
            async || self.kubectl(&a).await.starts_with("ok=false").then_some(()),
        )
        .await;
    }
}

/// Runs `scenario` on both servers and compares every observation.
async fn differential<F>(prefix: &str, scenario: F)
where
    F: AsyncFn(&Server, &str) -> Vec<(&'static str, String)>,
{
    let tag = unique(prefix);
    let (sim, real) = tokio::join!(sim(), real());
    let (on_sim, on_real) = tokio::join!(scenario(&sim, &tag), scenario(&real, &tag));
    assert_eq!(on_sim.len(), on_real.len());
    for ((what, s), (_, r)) in on_sim.iter().zip(&on_real) {
        eprintln!("--- {what}\n{s}");
        assert_eq!(
            s, r,
            "{what}: kube-sim (left) and kube-apiserver v1.36.3 (right) differ"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lien_refuses_the_delete_naming_holders_and_reasons_until_removed() {
    differential("lien", async |s, ns| {
        s.namespace(ns).await;
        s.secret(ns, "db").await;
        let mut out = vec![
            (
                "add",
                s.cli(&[
                    "lien",
                    "add",
                    "secrets/db",
                    "-n",
                    ns,
                    "--holder",
                    "backup",
                    "--reason",
                    "nightly snapshot",
                ])
                .await,
            ),
            (
                "add another",
                s.cli(&[
                    "lien",
                    "add",
                    "secret/db",
                    "-n",
                    ns,
                    "--holder",
                    "team-a/migration",
                    "--reason",
                    "moving to v2",
                ])
                .await,
            ),
            (
                "add again (idempotent)",
                s.cli(&[
                    "lien",
                    "add",
                    "secrets/db",
                    "-n",
                    ns,
                    "--holder",
                    "backup",
                    "--reason",
                    "nightly snapshot",
                ])
                .await,
            ),
            (
                "list",
                s.cli(&["lien", "list", "secrets/db", "-n", ns]).await,
            ),
        ];
        s.until_refused(&["secret", "db", "-n", ns]).await;
        out.push((
            "kubectl delete --dry-run=server",
            s.kubectl(&["delete", "secret", "db", "-n", ns, "--dry-run=server"])
                .await,
        ));
        out.push((
            "kubectl delete",
            s.kubectl(&["delete", "secret", "db", "-n", ns]).await,
        ));
        out.push((
            "remove one",
            s.cli(&[
                "lien",
                "remove",
                "secrets/db",
                "-n",
                ns,
                "--holder",
                "backup",
            ])
            .await,
        ));
        out.push((
            "still refused by the other",
            s.kubectl(&["delete", "secret", "db", "-n", ns]).await,
        ));
        out.push((
            "remove a holder that holds none",
            s.cli(&[
                "lien",
                "remove",
                "secrets/db",
                "-n",
                ns,
                "--holder",
                "backup",
            ])
            .await,
        ));
        out.push((
            "remove the last",
            s.cli(&[
                "lien",
                "remove",
                "secrets/db",
                "-n",
                ns,
                "--holder",
                "team-a/migration",
            ])
            .await,
        ));
        out.push((
            "then it deletes",
            s.kubectl(&["delete", "secret", "db", "-n", ns]).await,
        ));
        out.push((
            "a bad holder",
            s.cli(&[
                "lien",
                "add",
                "secrets/x",
                "-n",
                ns,
                "--holder",
                "a b",
                "--reason",
                "r",
            ])
            .await,
        ));
        out.push((
            "an unknown kind",
            s.cli(&[
                "lien",
                "add",
                "widgets/x",
                "-n",
                ns,
                "--holder",
                "a",
                "--reason",
                "r",
            ])
            .await,
        ));
        out.push(("a kind no policy covers", {
            s.kubectl(&["create", "serviceaccount", "robot", "-n", ns])
                .await;
            s.cli(&[
                "lien", "add", "sa/robot", "-n", ns, "--holder", "a", "--reason", "r",
            ])
            .await
        }));
        let _ = s
            .kubectl(&["delete", "namespace", ns, "--wait=false"])
            .await;
        out
    })
    .await;
}

/// Eight `lien add`s of eight holders at once on one object: every entry
/// is kept (each patch tests what it read; the losers read again).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_lien_adds_keep_every_entry() {
    differential("lien-race", async |s, ns| {
        s.namespace(ns).await;
        let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), ns);
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "shared"}}))
            .unwrap_or_else(|e| panic!("literal: {e}"));
        cms.create(&PostParams::default(), &cm)
            .await
            .unwrap_or_else(|e| panic!("{}: creating the configmap: {e}", s.name));
        let holders: Vec<String> = (0..8).map(|i| format!("holder-{i}")).collect();
        let runs = holders.iter().map(|h| async move {
            s.cli(&[
                "lien",
                "add",
                "configmaps/shared",
                "-n",
                ns,
                "--holder",
                h,
                "--reason",
                "racing",
            ])
            .await
        });
        let results = futures::future::join_all(runs).await;
        for r in &results {
            assert!(r.starts_with("ok=true"), "{}: {r}", s.name);
        }
        let cm = cms
            .get("shared")
            .await
            .unwrap_or_else(|e| panic!("{}: reading the configmap: {e}", s.name));
        let raw = cm
            .metadata
            .annotations
            .unwrap_or_default()
            .remove("protection-manager.io/liens")
            .unwrap_or_default();
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{}: {raw}: {e}", s.name));
        let mut got: Vec<String> = list
            .iter()
            .map(|l| l["holder"].as_str().unwrap_or_default().to_string())
            .collect();
        got.sort();
        assert_eq!(got, holders, "{}: an entry was lost", s.name);
        let _ = s
            .kubectl(&["delete", "namespace", ns, "--wait=false"])
            .await;
        vec![("holders", got.join(","))]
    })
    .await;
}

/// A lien on a namespace refuses the namespace's deletion outright; a lien
/// on an object in a namespace being deleted holds the namespace
/// (Terminating, the object kept) until the lien goes; a lien on a
/// cluster-scoped object names no namespace in its message.
#[tokio::test(flavor = "multi_thread")]
async fn liens_and_namespaces() {
    differential("lien-ns", async |s, ns| {
        s.namespace(ns).await;
        s.secret(ns, "kept").await;
        s.secret(ns, "free").await;
        let mut out = Vec::new();
        let target = format!("namespaces/{ns}");
        out.push((
            "a lien on the namespace",
            s.cli(&["lien", "add", &target, "--holder", "platform", "--reason", "shared by three teams"])
                .await,
        ));
        s.until_refused(&["namespace", ns]).await;
        out.push((
            "deleting the namespace",
            s.kubectl(&["delete", "namespace", ns, "--wait=false"]).await,
        ));
        s.cli(&["lien", "remove", &target, "--holder", "platform"]).await;
        out.push((
            "a lien on a secret in it",
            s.cli(&["lien", "add", "secrets/kept", "-n", ns, "--holder", "backup", "--reason", "last copy"])
                .await,
        ));
        out.push((
            "the namespace deletion starts",
            s.kubectl(&["delete", "namespace", ns, "--wait=false"]).await,
        ));
        let secrets: Api<Secret> = Api::namespaced(s.client.clone(), ns);
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the namespace controller deletes what is free", s.name),
            async || secrets.get_opt("free").await.ok().flatten().is_none().then_some(()),
        )
        .await;
        let namespaces: Api<Namespace> = Api::all(s.client.clone());
        out.push((
            "the liened secret stays, the namespace Terminating",
            format!(
                "secret kept: {}, namespace phase: {:?}",
                secrets.get_opt("kept").await.ok().flatten().is_some(),
                namespaces
                    .get(ns)
                    .await
                    .ok()
                    .and_then(|n| n.status)
                    .and_then(|st| st.phase)
            ),
        ));
        out.push((
            "the lien goes",
            s.cli(&["lien", "remove", "secrets/kept", "-n", ns, "--holder", "backup"]).await,
        ));
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the namespace goes", s.name),
            async || namespaces.get_opt(ns).await.ok().flatten().is_none().then_some(()),
        )
        .await;
        out.push(("and so does the namespace", "gone".into()));
        let pv = format!("{ns}-pv");
        let pv_yaml = format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {pv}}}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  hostPath: {{path: /tmp/{pv}}}\n"
        );
        kubectl::ok(&kubectl_bin(), &s.kubeconfig, &["create", "-f", "-"], Some(&pv_yaml)).await;
        let pv_target = format!("pv/{pv}");
        out.push((
            "a lien on a volume",
            s.cli(&["lien", "add", &pv_target, "--holder", "dba", "--reason", "restore pending"])
                .await,
        ));
        s.until_refused(&["pv", &pv]).await;
        out.push((
            "deleting the volume",
            s.kubectl(&["delete", "pv", &pv, "--wait=false"]).await,
        ));
        s.cli(&["lien", "remove", &pv_target, "--holder", "dba"]).await;
        let _ = s.kubectl(&["delete", "pv", &pv, "--wait=false"]).await;
        out
    })
    .await;
}

/// The lien policy is rendered where the cluster serves
/// ValidatingAdmissionPolicy v1 (`auto`), always with `true` (failing the
/// install where the API is missing), never with `false` or without kinds;
/// its rules follow `liens.resources` and `exemptUsers` adds a condition.
#[test]
fn the_lien_policy_follows_the_api_and_the_values() {
    const VAP: &str = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";
    for version in HelmVersion::ALL {
        let helm = Helm::new(version);
        let render = |api: bool, sets: &[&str]| {
            let mut args: Vec<&str> = Vec::new();
            if api {
                args.extend(["--api-versions", VAP]);
            }
            for s in sets {
                args.extend(["--set", s]);
            }
            helm.template("pm", "protection", &args)
        };
        let kinds = |r: &chart_support::Rendered| {
            let p = r.of_kind("ValidatingAdmissionPolicy");
            let b = r.of_kind("ValidatingAdmissionPolicyBinding");
            (p.len(), b.len())
        };
        let on = render(true, &[]).unwrap_or_else(|e| panic!("{version:?}: {e}"));
        assert_eq!(kinds(&on), (1, 1), "{version:?}: auto with the API");
        let policy = on.one("ValidatingAdmissionPolicy");
        assert_eq!(policy["metadata"]["name"], "pm-protection-manager-liens");
        let resources: Vec<String> = policy["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "{}/{}",
                    r["apiGroups"][0].as_str().unwrap_or("?"),
                    r["resources"][0].as_str().unwrap_or("?")
                )
            })
            .collect();
        assert_eq!(
            resources,
            [
                "/persistentvolumeclaims",
                "/persistentvolumes",
                "/secrets",
                "/configmaps",
                "/namespaces",
                "apps/deployments",
                "apps/statefulsets"
            ]
        );
        let off = render(false, &[]).unwrap_or_else(|e| panic!("{version:?}: {e}"));
        assert_eq!(kinds(&off), (0, 0), "{version:?}: auto without the API");
        let err = render(false, &["liens.enabled=true"]).expect_err("true without the API fails");
        assert!(
            err.contains("liens.enabled=true: this cluster does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy"),
            "{version:?}: {err}"
        );
        let never = render(true, &["liens.enabled=false"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kinds(&never), (0, 0));
        let none = render(true, &["liens.resources=null"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kinds(&none), (0, 0));
        let one = render(
            true,
            &[
                "liens.resources[0].apiGroup=example.com",
                "liens.resources[0].resource=widgets",
                "liens.exemptUsers[0]=system:serviceaccount:kube-system:namespace-controller",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let p = one.one("ValidatingAdmissionPolicy");
        assert_eq!(
            p["spec"]["matchConstraints"]["resourceRules"],
            json!([{"apiGroups": ["example.com"], "apiVersions": ["*"], "operations": ["DELETE"], "resources": ["widgets"]}])
        );
        assert_eq!(
            p["spec"]["matchConditions"][1]["expression"],
            "!(request.userInfo.username in [\"system:serviceaccount:kube-system:namespace-controller\"])"
        );
        let bad = render(true, &["liens.resources[0].resource=Widgets"]).expect_err("schema");
        assert!(
            bad.contains("liens.resources.0.resource")
                || bad.contains("/liens/resources/0/resource"),
            "{version:?}: {bad}"
        );
    }
}

/// The Deny-mode policy, with the label and annotation the rules controller
/// keeps written by hand (no manager runs): the delete is refused naming
/// the users, the rule and its reason (with and without `--dry-run=server`);
/// without the label it goes through; deleting the namespace gets through
/// (the namespace controller's deletes see the namespace terminating); so
/// does the garbage collector's delete of an owned object.
#[tokio::test(flavor = "multi_thread")]
async fn the_deny_policy_refuses_objects_in_use_but_not_namespace_or_gc_deletes() {
    differential("deny", async |s, ns| {
        s.namespace(ns).await;
        let in_use = |name: &str| {
            json!({"metadata": {
                "name": name,
                "labels": {"protection-manager.io/in-use": "true"},
                "annotations": {"protection-manager.io/in-use-by": "pods/web (rule secrets-used-by-pods: mounted credentials)"},
            }})
        };
        let secrets: Api<Secret> = Api::namespaced(s.client.clone(), ns);
        for name in ["db", "spare"] {
            let obj: Secret =
                serde_json::from_value(in_use(name)).unwrap_or_else(|e| panic!("literal: {e}"));
            secrets
                .create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("{}: creating {name}: {e}", s.name));
        }
        let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), ns);
        let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}}))
            .unwrap_or_else(|e| panic!("literal: {e}"));
        let owner = cms
            .create(&PostParams::default(), &owner)
            .await
            .unwrap_or_else(|e| panic!("{}: creating the owner: {e}", s.name));
        let mut owned = in_use("owned");
        owned["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.unwrap_or_default(),
        }]);
        owned["metadata"]["annotations"] = json!({});
        let owned: ConfigMap =
            serde_json::from_value(owned).unwrap_or_else(|e| panic!("literal: {e}"));
        cms.create(&PostParams::default(), &owned)
            .await
            .unwrap_or_else(|e| panic!("{}: creating the owned object: {e}", s.name));
        s.until_refused(&["secret", "db", "-n", ns]).await;
        let mut out = vec![
            (
                "kubectl delete --dry-run=server",
                s.kubectl(&["delete", "secret", "db", "-n", ns, "--dry-run=server"]).await,
            ),
            (
                "kubectl delete",
                s.kubectl(&["delete", "secret", "db", "-n", ns]).await,
            ),
            (
                "without the annotation",
                s.kubectl(&["delete", "configmap", "owned", "-n", ns]).await,
            ),
        ];
        s.kubectl(&["label", "secret", "db", "-n", ns, "protection-manager.io/in-use-"]).await;
        out.push((
            "no longer labelled in use, it deletes",
            s.kubectl(&["delete", "secret", "db", "-n", ns]).await,
        ));
        cms.delete("owner", &Default::default())
            .await
            .unwrap_or_else(|e| panic!("{}: deleting the owner: {e}", s.name));
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the garbage collector deletes the owned object", s.name),
            async || cms.get_opt("owned").await.ok().flatten().is_none().then_some(()),
        )
        .await;
        out.push(("the garbage collector got through", "yes".into()));
        s.kubectl(&["delete", "namespace", ns, "--wait=false"]).await;
        let namespaces: Api<Namespace> = Api::all(s.client.clone());
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the namespace goes, in-use secret and all", s.name),
            async || namespaces.get_opt(ns).await.ok().flatten().is_none().then_some(()),
        )
        .await;
        out.push(("the namespace controller got through", "yes".into()));
        out
    })
    .await;
}

/// The Deny-mode policy is rendered while the rules controller runs (its
/// gate on) where the cluster serves ValidatingAdmissionPolicy v1; `true`
/// fails where it does not, `false` never renders it; `exemptUsers` is its
/// matchCondition.
#[test]
fn the_deny_policy_follows_the_rules_gate_the_api_and_the_values() {
    const VAP: &str = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";
    const GATE: &str = "featureGates.InUseProtectionRules=true";
    for version in HelmVersion::ALL {
        let helm = Helm::new(version);
        let render = |api: bool, sets: &[&str]| {
            let mut args: Vec<&str> = Vec::new();
            if api {
                args.extend(["--api-versions", VAP]);
            }
            for s in sets {
                args.extend(["--set", s]);
            }
            helm.template("pm", "protection", &args)
        };
        let deny = |r: &chart_support::Rendered| {
            r.of_kind("ValidatingAdmissionPolicy")
                .into_iter()
                .filter(|p| p["metadata"]["name"] == "pm-protection-manager-deny")
                .count()
        };
        let on = render(true, &[GATE]).unwrap_or_else(|e| panic!("{version:?}: {e}"));
        assert_eq!(deny(&on), 1, "{version:?}: gate on, API served");
        let p = on
            .of_kind("ValidatingAdmissionPolicy")
            .into_iter()
            .find(|p| p["metadata"]["name"] == "pm-protection-manager-deny")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            p["spec"]["matchConstraints"]["objectSelector"],
            json!({"matchLabels": {"protection-manager.io/in-use": "true"}})
        );
        assert_eq!(
            p["spec"]["matchConditions"][0]["expression"],
            "!(request.userInfo.username in [\"system:serviceaccount:kube-system:generic-garbage-collector\",\"system:kube-controller-manager\"])"
        );
        assert_eq!(
            on.of_kind("ValidatingAdmissionPolicyBinding")
                .iter()
                .filter(|b| b["spec"]["policyName"] == "pm-protection-manager-deny")
                .count(),
            1
        );
        let gate_off = render(true, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            deny(&gate_off),
            0,
            "{version:?}: the rules controller is off"
        );
        let no_api = render(false, &[GATE]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(deny(&no_api), 0, "{version:?}: auto without the API");
        let err =
            render(false, &[GATE, "rules.deny.enabled=true"]).expect_err("true without the API");
        assert!(
            err.contains("rules.deny.enabled=true: this cluster does not serve"),
            "{err}"
        );
        let off =
            render(true, &[GATE, "rules.deny.enabled=false"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(deny(&off), 0);
        let none =
            render(true, &[GATE, "rules.deny.exemptUsers=null"]).unwrap_or_else(|e| panic!("{e}"));
        let p = none
            .of_kind("ValidatingAdmissionPolicy")
            .into_iter()
            .find(|p| p["metadata"]["name"] == "pm-protection-manager-deny")
            .cloned()
            .unwrap_or_default();
        assert!(p["spec"].get("matchConditions").is_none(), "{p}");
    }
}

/// Deny mode end to end, with the manager running its rules controller: a
/// Deny rule labels a Secret a pod mounts, so `kubectl delete` (and
/// `--dry-run=server`) is refused naming the pod, the rule and its reason;
/// once the pod is gone the label goes and the Secret deletes.
#[tokio::test(flavor = "multi_thread")]
async fn a_deny_rule_run_by_the_manager_refuses_deleting_a_secret_in_use() {
    differential("deny-run", async |s, ns| {
        let _one_at_a_time = MANAGER_TESTS.lock().await;
        let admin = support::free_port();
        let mut manager = support::Manager::start(&[
            "run",
            &format!("--kubeconfig={}", s.kubeconfig.display()),
            &format!("--admin-address=127.0.0.1:{admin}"),
            &format!("--metrics-bind-address=127.0.0.1:{}", support::free_port()),
            "--leader-elect=false",
            "--controllers=rules",
            "--feature-gates=InUseProtectionRules=true",
        ]);
        s.namespace(ns).await;
        s.secret(ns, "db").await;
        let mut spec =
            protection_rules::examples::spec("secrets-used-by-pods", "example.com/secret-in-use")
                .unwrap_or_else(|| panic!("the shipped example"));
        spec["mode"] = json!("Deny");
        spec["reason"] = json!("mounted credentials");
        let rule_name = ns.to_string();
        let rules: Api<kube::api::DynamicObject> =
            Api::all_with(s.client.clone(), &protection_rules::spec::api_resource());
        let rule: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "protection-manager.io/v1alpha1",
            "kind": "ProtectionRule",
            "metadata": {"name": rule_name},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("literal: {e}"));
        rules
            .create(&PostParams::default(), &rule)
            .await
            .unwrap_or_else(|e| panic!("{}: creating the rule: {e}", s.name));
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {
                "automountServiceAccountToken": false,
                "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
                "volumes": [{"name": "creds", "secret": {"secretName": "db"}}],
            },
        }))
        .unwrap_or_else(|e| panic!("literal: {e}"));
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(s.client.clone(), ns);
        // The real server admits pods once the namespace's default
        // ServiceAccount exists (kube-controller-manager creates it).
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the pod is created", s.name),
            async || {
                pods.create(&PostParams::default(), &pod)
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
        let secrets: Api<Secret> = Api::namespaced(s.client.clone(), ns);
        manager
            .wait_for(
                Duration::from_secs(60),
                Duration::from_millis(200),
                &format!("{}: the manager labels db in use", s.name),
                async || {
                    secrets.get("db").await.is_ok_and(|o| {
                        o.metadata
                            .labels
                            .is_some_and(|l| l.contains_key("protection-manager.io/in-use"))
                    })
                },
            )
            .await;
        s.until_refused(&["secret", "db", "-n", ns]).await;
        let mut out = vec![
            (
                "kubectl delete --dry-run=server",
                s.kubectl(&["delete", "secret", "db", "-n", ns, "--dry-run=server"])
                    .await,
            ),
            (
                "kubectl delete",
                s.kubectl(&["delete", "secret", "db", "-n", ns]).await,
            ),
        ];
        s.kubectl(&["delete", "pod", "web", "-n", ns, "--wait=true"])
            .await;
        manager
            .wait_for(
                Duration::from_secs(60),
                Duration::from_millis(200),
                &format!("{}: the label goes with the pod", s.name),
                async || {
                    secrets.get("db").await.is_ok_and(|o| {
                        o.metadata
                            .labels
                            .is_none_or(|l| !l.contains_key("protection-manager.io/in-use"))
                    })
                },
            )
            .await;
        out.push((
            "unused, it deletes",
            s.kubectl(&["delete", "secret", "db", "-n", ns]).await,
        ));
        manager
            .wait_for(
                Duration::from_secs(60),
                Duration::from_millis(200),
                &format!("{}: db is gone", s.name),
                async || secrets.get_opt("db").await.is_ok_and(|o| o.is_none()),
            )
            .await;
        let _ = rules.delete(&rule_name, &Default::default()).await;
        manager.terminate(Duration::from_secs(20));
        out
    })
    .await;
}

/// A namespace holding protected objects deletes cleanly with the manager
/// running: a Secret a pod mounts under a Deny-mode rule (labelled in use,
/// so a user's delete is refused), a claim the pod uses (pvc-protection)
/// and a ConfigMap with a lien. `kubectl delete namespace` is not refused;
/// while the pod terminates nothing it uses is deleted (the namespace
/// controller takes pods first); once the pod is gone the Secret and the
/// claim are deleted and released; the lien holds the namespace, named in
/// its conditions, until its holder removes it; then the namespace goes.
#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_with_protected_objects_deletes_cleanly() {
    use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
    differential("ns-clean", async |s, ns| {
        let _one_at_a_time = MANAGER_TESTS.lock().await;
        let mut manager = support::Manager::start(&[
            "run",
            &format!("--kubeconfig={}", s.kubeconfig.display()),
            &format!("--admin-address=127.0.0.1:{}", support::free_port()),
            &format!("--metrics-bind-address=127.0.0.1:{}", support::free_port()),
            "--leader-elect=false",
            "--controllers=rules,pvc-protection",
            "--feature-gates=InUseProtectionRules=true",
        ]);
        let node = format!("{ns}-node");
        let nodes: Api<Node> = Api::all(s.client.clone());
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": node}}))
                    .unwrap_or_else(|e| panic!("literal: {e}")),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: creating the node: {e}", s.name));
        s.namespace(ns).await;
        s.secret(ns, "db").await;
        let mut spec =
            protection_rules::examples::spec("secrets-used-by-pods", "example.com/secret-in-use")
                .unwrap_or_else(|| panic!("the shipped example"));
        spec["mode"] = json!("Deny");
        let rules: Api<kube::api::DynamicObject> =
            Api::all_with(s.client.clone(), &protection_rules::spec::api_resource());
        let rule: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "protection-manager.io/v1alpha1",
            "kind": "ProtectionRule",
            "metadata": {"name": ns},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("literal: {e}"));
        rules
            .create(&PostParams::default(), &rule)
            .await
            .unwrap_or_else(|e| panic!("{}: creating the rule: {e}", s.name));
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), ns);
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data"},
            "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap_or_else(|e| panic!("literal: {e}"));
        pvcs.create(&PostParams::default(), &claim)
            .await
            .unwrap_or_else(|e| panic!("{}: creating the claim: {e}", s.name));
        let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), ns);
        let settings: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "settings"}}))
                .unwrap_or_else(|e| panic!("literal: {e}"));
        cms.create(&PostParams::default(), &settings)
            .await
            .unwrap_or_else(|e| panic!("{}: creating settings: {e}", s.name));
        // After settings by name: the namespace controller's collection
        // delete stops at the refused settings and never reaches it.
        let zzz: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "zzz"}}))
            .unwrap_or_else(|e| panic!("literal: {e}"));
        cms.create(&PostParams::default(), &zzz)
            .await
            .unwrap_or_else(|e| panic!("{}: creating zzz: {e}", s.name));
        let mut out = vec![(
            "a lien on settings",
            s.cli(&[
                "lien", "add", "configmaps/settings", "-n", ns, "--holder", "backup",
                "--reason", "last copy",
            ])
            .await,
        )];
        // Scheduled on a node without a kubelet: deleted, it stays
        // Terminating until the test finishes it as a kubelet would.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": false,
                "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
                "volumes": [
                    {"name": "creds", "secret": {"secretName": "db"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                ],
            },
        }))
        .unwrap_or_else(|e| panic!("literal: {e}"));
        let pods: Api<Pod> = Api::namespaced(s.client.clone(), ns);
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the pod is created", s.name),
            async || pods.create(&PostParams::default(), &pod).await.ok().map(|_| ()),
        )
        .await;
        let secrets: Api<Secret> = Api::namespaced(s.client.clone(), ns);
        let in_use = async || {
            secrets.get("db").await.is_ok_and(|o| {
                o.metadata
                    .labels
                    .is_some_and(|l| l.contains_key("protection-manager.io/in-use"))
            })
        };
        let claim_held = async || {
            pvcs.get("data").await.is_ok_and(|c| {
                c.metadata
                    .finalizers
                    .unwrap_or_default()
                    .iter()
                    .any(|f| f == "protection-manager.io/pvc-protection")
            })
        };
        manager
            .wait_for(
                Duration::from_secs(60),
                Duration::from_millis(200),
                &format!("{}: db labelled in use, the claim held", s.name),
                async || in_use().await && claim_held().await,
            )
            .await;
        s.until_refused(&["secret", "db", "-n", ns]).await;
        out.push((
            "the user's delete of db",
            s.kubectl(&["delete", "secret", "db", "-n", ns, "--dry-run=server"]).await,
        ));
        out.push((
            "kubectl delete namespace",
            s.kubectl(&["delete", "namespace", ns, "--wait=false"]).await,
        ));
        let namespaces: Api<Namespace> = Api::all(s.client.clone());
        let condition = async |ty: &str| {
            namespaces
                .get(ns)
                .await
                .ok()
                .and_then(|n| n.status)
                .and_then(|st| st.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == ty && c.status == "True")
                .map(|c| c.message.unwrap_or_default())
        };
        let state = async || {
            let p = pods.get_opt("web").await.ok().flatten();
            let db = secrets.get_opt("db").await.ok().flatten();
            let data = pvcs.get_opt("data").await.ok().flatten();
            let cm = cms.get_opt("settings").await.ok().flatten();
            let after = cms.get_opt("zzz").await.ok().flatten();
            let st = |deleting: Option<bool>| match deleting {
                None => "gone",
                Some(true) => "Terminating",
                Some(false) => "kept",
            };
            format!(
                "pod web {}; secret db {} (in use: {}); claim data {} (held: {}); configmap settings {}; configmap zzz {}",
                st(p.map(|p| p.metadata.deletion_timestamp.is_some())),
                st(db.map(|o| o.metadata.deletion_timestamp.is_some())),
                in_use().await,
                st(data.map(|o| o.metadata.deletion_timestamp.is_some())),
                claim_held().await,
                st(cm.map(|o| o.metadata.deletion_timestamp.is_some())),
                st(after.map(|o| o.metadata.deletion_timestamp.is_some())),
            )
        };
        // Past its grace period the pod is what the namespace waits for.
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the namespace waits for its pod", s.name),
            async || {
                condition("NamespaceDeletionContentFailure")
                    .await
                    .filter(|m| m.contains("Resource=pods"))
            },
        )
        .await;
        let before = state().await;
        assert_eq!(
            before,
            "pod web Terminating; secret db kept (in use: true); claim data kept (held: true); configmap settings kept; configmap zzz kept",
            "{}: nothing the pod uses is deleted before it goes",
            s.name
        );
        out.push(("while the pod terminates", before));
        // The kubelet's last word.
        pods.delete("web", &kube::api::DeleteParams::default().grace_period(0))
            .await
            .unwrap_or_else(|e| panic!("{}: finishing the pod: {e}", s.name));
        test_support::eventually(
            Duration::from_secs(60),
            &format!("{}: the secret and the claim go, the lien holds", s.name),
            async || {
                let gone = secrets.get_opt("db").await.is_ok_and(|o| o.is_none())
                    && pvcs.get_opt("data").await.is_ok_and(|o| o.is_none());
                let held = condition("NamespaceDeletionContentFailure")
                    .await
                    .filter(|m| m.contains("has liens"));
                held.filter(|_| gone)
            },
        )
        .await;
        let after = state().await;
        assert_eq!(
            after,
            "pod web gone; secret db gone (in use: false); claim data gone (held: false); configmap settings kept; configmap zzz kept",
            "{}: released after the pod; the lien keeps settings (and the collection delete stops there)",
            s.name
        );
        out.push(("once the pod is gone", after));
        out.push((
            "the namespace's conditions name the lien",
            condition("NamespaceDeletionContentFailure")
                .await
                .unwrap_or_default(),
        ));
        out.push((
            "the holder removes its lien",
            s.cli(&["lien", "remove", "configmaps/settings", "-n", ns, "--holder", "backup"])
                .await,
        ));
        test_support::eventually(
            Duration::from_secs(90),
            &format!("{}: the namespace goes", s.name),
            async || namespaces.get_opt(ns).await.ok().flatten().is_none().then_some(()),
        )
        .await;
        out.push(("the namespace", "gone".into()));
        let _ = rules.delete(ns, &Default::default()).await;
        let _ = nodes.delete(&node, &Default::default()).await;
        manager.terminate(Duration::from_secs(20));
        out
    })
    .await;
}

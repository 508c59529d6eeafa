//! Issue 14's user story with the real kubectls (the pinned one,
//! `KUBECTL_PINNED` or .tools/bin/kubectl, and the machine's,
//! `KUBECTL_SYSTEM` or /usr/bin/kubectl) on kube-sim: the chart's CRD and
//! its example rule `secrets-used-by-pods` applied with kubectl (validated
//! server-side, as kubectl does by default); a Secret mounted by a running
//! pod survives `kubectl delete secret --wait=false` until the pod is gone.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use kube_sim::{KubeSim, SimConfig};
use protection_core::featuregate::FeatureGates;
use protection_core::release;
use protection_core::{Metrics, Version};
use protection_rules::examples;
use serde_json::json;
use test_support::until;

const WAIT: Duration = Duration::from_secs(30);
const FIN: &str = "example.com/secret-in-use";
const CRD_FILE: &str = "charts/protection-manager/crds/protectionrules.protection-manager.io.yaml";

/// What the chart's `rules.allowedResources` grants for this rule.
const RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pm-rules}
rules:
  - {apiGroups: [\"\"], resources: [secrets], verbs: [get, list, watch, patch]}
  - {apiGroups: [\"\"], resources: [pods], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: pm-rules}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pm-rules}
subjects: [{kind: ServiceAccount, name: manager, namespace: pm}]
";

const WORKLOAD: &str = "apiVersion: v1
kind: Secret
metadata: {name: db-password, namespace: default}
stringData: {password: hunter2}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, image: nginx}]
  volumes: [{name: creds, secret: {secretName: db-password}}]
";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tool(var: &str, fallback: &str) -> PathBuf {
    let p = std::env::var(var).map(PathBuf::from).unwrap_or_else(|_| {
        if fallback.starts_with('/') {
            PathBuf::from(fallback)
        } else {
            workspace().join(fallback)
        }
    });
    assert!(
        p.exists(),
        "{} not found (env {var}); run `make tools`",
        p.display()
    );
    p
}

async fn kubectl(bin: &Path, kc: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(kc)
        .args(args)
        .current_dir(workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    if let Some(mut si) = child.stdin.take() {
        if let Some(text) = stdin {
            si.write_all(text.as_bytes()).await.unwrap();
        }
        drop(si);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 60s"))
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

async fn ok(bin: &Path, kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let (success, out) = kubectl(bin, kc, args, stdin).await;
    assert!(success, "{} {args:?} failed:\n{out}", bin.display());
    out
}

/// The rules controller, as the manager runs it, with the gate on.
async fn controller(sim: &KubeSim) -> tokio_util::sync::CancellationToken {
    let registry = release::registry(protection_rules::GATES).expect("registry");
    let mut gates = FeatureGates::new(registry, Version::new(0, 4));
    gates
        .set_from_flag("InUseProtectionRules=true")
        .expect("gate");
    let metrics: Arc<Metrics> = Metrics::new().expect("metrics");
    let t = test_support::controller_context(
        protection_rules::controller::NAME,
        sim.client_as("system:serviceaccount:pm:manager").await,
        gates,
        &metrics,
        1,
    );
    let shutdown = t.shutdown.clone();
    tokio::spawn(protection_rules::controller::run(t.ctx));
    shutdown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_secret_waits_for_the_pod_that_mounts_it() {
    for bin in [
        tool("KUBECTL_PINNED", ".tools/bin/kubectl"),
        tool("KUBECTL_SYSTEM", "/usr/bin/kubectl"),
    ] {
        let sim = KubeSim::start(SimConfig::default()).await.expect("start");
        let kc = sim.kubeconfig_path().to_path_buf();
        ok(&bin, &kc, &["apply", "-f", CRD_FILE], None).await;
        ok(&bin, &kc, &["apply", "-f", "-"], Some(RBAC)).await;
        let rule = json!({
            "apiVersion": "protection-manager.io/v1alpha1",
            "kind": "ProtectionRule",
            "metadata": {"name": "secrets-used-by-pods"},
            "spec": examples::spec("secrets-used-by-pods", FIN).expect("example"),
        });
        ok(&bin, &kc, &["apply", "-f", "-"], Some(&rule.to_string())).await;
        let shutdown = controller(&sim).await;
        ok(&bin, &kc, &["apply", "-f", "-"], Some(WORKLOAD)).await;
        ok(
            &bin,
            &kc,
            &[
                "patch",
                "pod",
                "web",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Running"}}"#,
            ],
            None,
        )
        .await;
        let secret_fins = async || {
            let (found, out) = kubectl(
                &bin,
                &kc,
                &[
                    "get",
                    "secret",
                    "db-password",
                    "-o",
                    "jsonpath={.metadata.finalizers}",
                ],
                None,
            )
            .await;
            found.then_some(out)
        };
        until(
            WAIT,
            "the Secret carries the rule's finalizer",
            async || secret_fins().await.is_some_and(|f| f.contains(FIN)),
        )
        .await;
        let out = ok(
            &bin,
            &kc,
            &["delete", "secret", "db-password", "--wait=false"],
            None,
        )
        .await;
        // kubectl 1.37 adds " from default namespace".
        assert!(out.starts_with("secret \"db-password\" deleted"), "{out}");
        until(WAIT, "the rule holds the Secret", async || {
            ok(
                &bin,
                &kc,
                &[
                    "get",
                    "protectionrule",
                    "secrets-used-by-pods",
                    "-o",
                    "jsonpath={.status.heldNow}",
                ],
                None,
            )
            .await
                == "1"
        })
        .await;
        // Still there, terminating, with the finalizer.
        let ts = ok(
            &bin,
            &kc,
            &[
                "get",
                "secret",
                "db-password",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
            None,
        )
        .await;
        assert!(!ts.is_empty(), "the Secret is terminating");
        assert!(secret_fins().await.is_some_and(|f| f.contains(FIN)));
        ok(&bin, &kc, &["delete", "pod", "web", "--wait=false"], None).await;
        until(WAIT, "the Secret is gone with the pod", async || {
            let (found, out) = kubectl(&bin, &kc, &["get", "secret", "db-password"], None).await;
            !found && out.contains("NotFound")
        })
        .await;
        shutdown.cancel();
        sim.shutdown().await;
    }
}

//! Issue 14's user story with the real kubectls (the pinned one,
//! `KUBECTL_PINNED` or .tools/bin/kubectl, and the machine's,
//! `KUBECTL_SYSTEM` or /usr/bin/kubectl) on kube-sim: the chart's CRD and
//! its example rule `secrets-used-by-pods` applied with kubectl (validated
//! server-side, as kubectl does by default); a Secret mounted by a running
//! pod survives `kubectl delete secret --wait=false` until the pod is gone.

use std::sync::Arc;
use std::time::Duration;

use kube_sim::{KubeSim, SimConfig};
use protection_core::featuregate::FeatureGates;
use protection_core::release;
use protection_core::{Metrics, Version};
use protection_rules::examples;
use serde_json::json;
use test_support::kubectl::{kubectls, ok, run_text};
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
    for bin in kubectls() {
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
            let (found, out) = run_text(
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
            let (found, out) = run_text(&bin, &kc, &["get", "secret", "db-password"], None).await;
            !found && out.contains("NotFound")
        })
        .await;
        shutdown.cancel();
        sim.shutdown().await;
    }
}

//! `spec.reason` of a ProtectionRule as kubectl shows it, on kube-sim and
//! on the real kube-apiserver v1.36.3 (the test bed's control plane): the
//! chart's CRD applied, a rule with a reason listed with its REASON column,
//! and a reason of two lines refused by the CRD's own validation, with the
//! same text on both servers.

use std::path::Path;

use kube_sim::{KubeSim, SimConfig};
use test_support::kubectl::{ok, run_text, tool};

const CRD_FILE: &str = "charts/protection-manager/crds/protectionrules.protection-manager.io.yaml";

fn rule(name: &str, reason: &str) -> String {
    format!(
        "apiVersion: protection-manager.io/v1alpha1
kind: ProtectionRule
metadata:
  name: {name}
spec:
  protected: {{version: v1, resource: secrets}}
  users:
    - version: v1
      resource: pods
      reference: object.spec.?volumes.orValue([]).filter(v, has(v.secret)).map(v, v.secret.secretName)
  finalizer: example.com/secret-in-use
  reason: {reason}
"
    )
}

/// What kubectl shows on the server behind `kc`: the table without AGE,
/// and the refusal of a two-line reason.
async fn shown(kc: &Path) -> Vec<String> {
    let bin = tool("KUBECTL_PINNED", ".tools/bin/kubectl");
    ok(&bin, kc, &["apply", "--server-side", "-f", CRD_FILE], None).await;
    test_support::eventually(
        std::time::Duration::from_secs(30),
        "the CRD is established",
        async || {
            run_text(&bin, kc, &["get", "protectionrules"], None)
                .await
                .0
                .then_some(())
        },
    )
    .await;
    ok(
        &bin,
        kc,
        &["apply", "-f", "-"],
        Some(&rule("secrets-used-by-pods", "\"mounted credentials\"")),
    )
    .await;
    let table = ok(
        &bin,
        kc,
        &["get", "protectionrules", "secrets-used-by-pods"],
        None,
    )
    .await;
    let rows: Vec<String> = table
        .lines()
        .map(|l| {
            let mut w: Vec<&str> = l.split_whitespace().collect();
            w.pop();
            w.join(" ")
        })
        .collect();
    let (applied, refusal) = run_text(
        &bin,
        kc,
        &["apply", "-f", "-"],
        Some(&rule("two-lines", "\"one\\ntwo\"")),
    )
    .await;
    let _ = run_text(&bin, kc, &["delete", "protectionrules", "--all"], None).await;
    let _ = run_text(&bin, kc, &["delete", "-f", CRD_FILE], None).await;
    vec![
        rows.join("\n"),
        format!("applied={applied} {}", refusal.trim()),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_shows_the_reason_and_the_crd_refuses_two_lines_on_both_servers() {
    let sim = KubeSim::start(SimConfig::default())
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
    let cp = control_plane::ControlPlane::start(control_plane::Config::default())
        .await
        .unwrap_or_else(|e| panic!("starting the real control plane: {e}"));
    let on_sim = shown(sim.kubeconfig_path()).await;
    let on_real = shown(cp.kubeconfig_path()).await;
    assert_eq!(
        on_sim[0],
        "NAME PROTECTED MODE READY OBJECTS HELD REASON\nsecrets-used-by-pods secrets Enforce mounted credentials",
        "kube-sim's table"
    );
    assert!(
        on_sim[1].starts_with("applied=false") && on_sim[1].contains("must be one line"),
        "{}",
        on_sim[1]
    );
    assert_eq!(
        on_sim, on_real,
        "kube-sim (left) and kube-apiserver (right) differ"
    );
    sim.shutdown().await;
}

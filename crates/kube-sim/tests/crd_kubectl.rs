//! Custom resources with both real kubectls, validating as they do by
//! default (no `--validate=false`): kubectl finds the CRD's and the custom
//! resource's group-versions in `/openapi/v3`, sees that PATCH takes
//! `fieldValidation`, and lets the server validate with
//! `fieldValidation=Strict`.

mod common;

use common::conform;
use kube_sim::{KubeSim, SimConfig};
use serde_json::json;
use test_support::kubectl::{kubectls, ok, run_text, tool};

const CRD: &str = include_str!(
    "../../../charts/protection-manager/crds/protectionrules.protection-manager.io.yaml"
);

const RULE: &str = "apiVersion: protection-manager.io/v1alpha1
kind: ProtectionRule
metadata:
  name: secrets-used-by-pods
spec:
  protected: {version: v1, resource: secrets}
  users:
    - version: v1
      resource: pods
      reference: object.spec.?volumes.orValue([]).filter(v, has(v.secret)).map(v, v.secret.secretName)
  finalizer: example.com/secret-in-use
  mode: Enforce
";

/// Judged by the real kube-apiserver 1.36 too (`common::conform`): what
/// each kubectl prints must be the same against both servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_crd_and_its_custom_resources_validating_server_side() {
    for bin in kubectls() {
        conform(
            "kubectl_applies_a_crd_and_its_custom_resources_validating_server_side",
            SimConfig::default(),
            async |t| {
                let kc = t.kubeconfig.clone();
                let out = ok(&bin, &kc, &["apply", "-f", "-"], Some(CRD)).await;
                assert_eq!(
                    out.trim(),
                    "customresourcedefinition.apiextensions.k8s.io/protectionrules.protection-manager.io created"
                );
                // Applying it again patches it, still validated server-side.
                let out = ok(&bin, &kc, &["apply", "-f", "-"], Some(CRD)).await;
                assert!(out.contains("unchanged"), "{out}");
                t.record("the CRD applied again", json!(out));
                // (The real server serves the custom resource once its CRD
                // is established.)
                let out = common::eventually("the custom resource is served", async || {
                    let (done, out) =
                        run_text(&bin, &kc, &["apply", "-f", "-"], Some(RULE)).await;
                    done.then_some(out)
                })
                .await;
                assert_eq!(
                    out.trim(),
                    "protectionrule.protection-manager.io/secrets-used-by-pods created"
                );
                let table = ok(&bin, &kc, &["get", "protectionrules"], None).await;
                let header: Vec<&str> = table
                    .lines()
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .collect();
                assert_eq!(header[..3], ["NAME", "PROTECTED", "MODE"], "{table}");
                assert!(
                    table.contains("secrets-used-by-pods") && table.contains("Enforce"),
                    "{table}"
                );
                t.record("header", json!(header));

                // An unknown field: refused with the API server's wording.
                let typo = RULE
                    .replace("name: secrets-used-by-pods", "name: typo")
                    .replace("  mode: Enforce\n", "  mode: Enforce\n  modee: Audit\n");
                let (success, out) = run_text(&bin, &kc, &["apply", "-f", "-"], Some(&typo)).await;
                assert!(!success, "{out}");
                assert!(
                    out.contains(
                        r#"Error from server (BadRequest): error when creating "STDIN": ProtectionRule in version "v1alpha1" cannot be handled as a ProtectionRule: strict decoding error: unknown field "spec.modee""#
                    ),
                    "{out}"
                );
                t.record("an unknown field on create", json!(out));
                let (found, out) = run_text(&bin, &kc, &["get", "protectionrule", "typo"], None).await;
                assert!(!found && out.contains("NotFound"), "{out}");
                t.record("not created", json!(out));
                // The same field on an existing rule: the patch is refused too.
                let typo = RULE.replace("  mode: Enforce\n", "  mode: Enforce\n  modee: Audit\n");
                let (success, out) = run_text(&bin, &kc, &["apply", "-f", "-"], Some(&typo)).await;
                assert!(!success, "{out}");
                assert!(
                    out.contains(r#"strict decoding error: unknown field "spec.modee""#),
                    "{out}"
                );
                // The patched custom resource is quoted as Go marshals
                // unstructured JSON: keys sorted.
                assert!(
                    out.contains(r#"patch: Invalid value: "{\"apiVersion\":"#),
                    "{out}"
                );
                // (uids, resourceVersions and times masked in the quoted object.)
                t.record("an unknown field on patch", json!({"message": out}));
                // The next kubectl starts from nothing on the real server too.
                ok(&bin, &kc, &["delete", "crd", "protectionrules.protection-manager.io", "--wait=true"], None).await;
            },
        )
        .await;
    }
}

/// The `/openapi/v3` index follows the CRDs: a CRD's group-version appears
/// once it is established, its hash changes with its schema, and it goes
/// with the CRD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_v3_index_follows_crds() {
    let bin = tool("KUBECTL_PINNED", ".tools/bin/kubectl");
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let kc = sim.kubeconfig_path().to_path_buf();
    let gv = "apis/protection-manager.io/v1alpha1";
    let index = async || -> serde_json::Value {
        let raw = ok(&bin, &kc, &["get", "--raw", "/openapi/v3"], None).await;
        serde_json::from_str(&raw).unwrap()
    };
    let before = index().await;
    assert!(before["paths"]["apis/apiextensions.k8s.io/v1"].is_object());
    assert!(before["paths"].get(gv).is_none());
    ok(&bin, &kc, &["apply", "-f", "-"], Some(CRD)).await;
    let url = index().await["paths"][gv]["serverRelativeURL"]
        .as_str()
        .expect("listed once established")
        .to_string();
    let doc: serde_json::Value =
        serde_json::from_str(&ok(&bin, &kc, &["get", "--raw", &url], None).await).unwrap();
    let schema = &doc["components"]["schemas"]["io.protection-manager.v1alpha1.ProtectionRule"];
    assert!(schema["properties"]["spec"]["properties"]["finalizer"].is_object());
    assert_eq!(
        doc["paths"]["/apis/protection-manager.io/v1alpha1/protectionrules/{name}"]["patch"]["x-kubernetes-group-version-kind"]
            ["kind"],
        "ProtectionRule"
    );
    // A changed schema changes the hash.
    let changed = CRD.replacen(
        "properties:",
        "properties:\n            extra: {type: string}",
        1,
    );
    assert_ne!(changed, CRD);
    ok(&bin, &kc, &["apply", "-f", "-"], Some(&changed)).await;
    let url2 = index().await["paths"][gv]["serverRelativeURL"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_ne!(url, url2, "the hash follows the schema");
    ok(
        &bin,
        &kc,
        &["delete", "crd", "protectionrules.protection-manager.io"],
        None,
    )
    .await;
    assert!(
        index().await["paths"].get(gv).is_none(),
        "gone with the CRD"
    );
    sim.shutdown().await;
}

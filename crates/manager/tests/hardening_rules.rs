//! Issue 27, bug 1: ProtectionRules whose CEL is expensive. Two rules whose
//! references loop over a ConfigMap's data squared pinned a core each on
//! the async workers: `/healthz` and `/readyz` stopped answering, a new PVC
//! got no finalizer and SIGTERM hung. Now such an expression is refused
//! when the rule is compiled (`Ready=False`, reason
//! `ExpressionTooExpensive`), and one that passes the estimate but runs
//! past its per-evaluation budget on some object is stopped (off the async
//! workers), named in the rule's `lastError` and counted in
//! `protection_manager_cel_evaluations_aborted_total`.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube_sim::{KubeSim, SimConfig};
use protection_rules::spec::{self, CRD_YAML};
use serde_json::json;
use support::{Manager, free_port, http_get};
use test_support::until;

const USER: &str = "system:serviceaccount:default:protection-manager";
const WAIT: Duration = Duration::from_secs(120);

fn rule(name: &str, reference: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "protection-manager.io/v1alpha1",
        "kind": "ProtectionRule",
        "metadata": {"name": name},
        "spec": {
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{"version": "v1", "resource": "configmaps", "reference": reference}],
            "finalizer": format!("example.com/{name}"),
        },
    }))
    .expect("rule")
}

async fn get(url: String) -> Option<(u16, String)> {
    tokio::task::spawn_blocking(move || http_get(&url))
        .await
        .ok()
        .flatten()
}

async fn status(rules: &Api<DynamicObject>, name: &str) -> serde_json::Value {
    rules
        .get(name)
        .await
        .ok()
        .and_then(|r| r.data.get("status").cloned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expensive_rules_starve_neither_the_probes_nor_other_controllers_nor_shutdown() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await;
    let crd: CustomResourceDefinition = serde_yaml::from_str(CRD_YAML).expect("crd");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create the CRD");
    test_support::objects::grant_cluster(
        &client,
        "rules-test",
        USER,
        json!([
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}
        ]),
    )
    .await
    .expect("grant");

    // Users: one ConfigMap with 2,000 keys (about 30 KB), and a few small.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let big: std::collections::BTreeMap<String, String> = (0..2000)
        .map(|i| (format!("key-{i:04}"), "v".repeat(10)))
        .collect();
    let mut cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "big"}})).expect("cm");
    cm.data = Some(big);
    cms.create(&PostParams::default(), &cm).await.expect("big");
    for i in 0..5 {
        let small: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("small-{i}")}, "data": {"a": "b"}}),
        )
        .expect("cm");
        cms.create(&PostParams::default(), &small)
            .await
            .expect("small");
    }

    let rules: Api<DynamicObject> = Api::all_with(client.clone(), &spec::api_resource());
    // Quadratic in the object: refused when compiled.
    let square = "object.data.map(a, object.data.map(b, a + b)).flatten()";
    // Linear, admitted, but a million iterations: past the budget on every
    // object.
    let busy = "lists.range(1000000).filter(i, i < 0).map(i, string(i))";
    // Admitted (a thousand copies of an object), but on the big ConfigMap
    // past the memory an evaluation may create.
    let copies = "lists.range(1000).map(i, object.data).size() > 0 ? [] : ['none']";
    for (name, reference) in [
        ("square-1", square),
        ("square-2", square),
        ("busy", busy),
        ("copies", copies),
    ] {
        rules
            .create(&PostParams::default(), &rule(name, reference))
            .await
            .expect("create rule");
    }

    let admin = free_port();
    let kubeconfig = sim.kubeconfig_for(USER).expect("kubeconfig");
    let mut m = Manager::start(&[
        "run",
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect=false",
        "--controllers=rules,pvc-protection",
        "--feature-gates=InUseProtectionRules=true",
        "--log-level=info",
    ]);
    let base = format!("http://127.0.0.1:{admin}");

    // The quadratic rules are refused with a reason and the estimate.
    for name in ["square-1", "square-2"] {
        m.wait_for(
            WAIT,
            Duration::from_millis(300),
            &format!("rule {name} is refused as too expensive"),
            async || {
                let s = status(&rules, name).await;
                s.pointer("/conditions/0/reason") == Some(&json!("ExpressionTooExpensive"))
            },
        )
        .await;
        let s = status(&rules, name).await;
        let msg = s
            .pointer("/conditions/0/message")
            .and_then(|m| m.as_str())
            .unwrap_or_default()
            .to_string();
        assert!(
            msg.starts_with(
                "spec.users[0].reference: estimated cost exceeds budget by factor of more than 100x"
            ),
            "{msg}"
        );
    }
    println!("verified: two rules quadratic in the object are refused (ExpressionTooExpensive)");

    // The others run, and are stopped on the objects they are too
    // expensive for: named in lastError, counted in the metric.
    m.wait_for(
        WAIT,
        Duration::from_millis(300),
        "rule copies names the memory abort",
        async || {
            status(&rules, "copies")
                .await
                .get("lastError")
                .and_then(|e| e.as_str())
                .is_some_and(|e| {
                    e.contains("configmaps/big")
                        && e.contains("operation cancelled: memory limit exceeded")
                })
        },
    )
    .await;
    m.wait_for(
        WAIT,
        Duration::from_millis(300),
        "rule busy names the cost abort",
        async || {
            status(&rules, "busy")
                .await
                .get("lastError")
                .and_then(|e| e.as_str())
                .is_some_and(|e| e.contains("operation cancelled: "))
        },
    )
    .await;
    let (_, metrics) = get(format!("{base}/metrics")).await.expect("metrics");
    let aborted = |reason: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("protection_manager_cel_evaluations_aborted_total")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert!(aborted("memory") >= 1.0, "{metrics}");
    assert!(aborted("cost") + aborted("time") >= 1.0, "{metrics}");
    println!(
        "verified: expensive evaluations are stopped and counted (memory {}, cost {}, time {})",
        aborted("memory"),
        aborted("cost"),
        aborted("time")
    );

    // Meanwhile the probes answer and another controller works: a new PVC
    // gets its finalizer, while the busy rule still has objects to go.
    for path in ["healthz", "readyz"] {
        let (code, body) = get(format!("{base}/{path}")).await.expect(path);
        assert_eq!(code, 200, "/{path}: {body}");
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    pvcs.create(
        &PostParams::default(),
        &test_support::objects::pvc("default", "data", &[]),
    )
    .await
    .expect("pvc");
    until(WAIT, "the new PVC gets its finalizer", async || {
        pvcs.get("data")
            .await
            .ok()
            .and_then(|p| p.metadata.finalizers)
            .is_some_and(|f| {
                f.iter()
                    .any(|f| f == "protection-manager.io/pvc-protection")
            })
    })
    .await;
    println!("verified: /healthz and /readyz answer and a new PVC gets its finalizer");

    // A Secret (protected by the running rules) is unaffected by the others'
    // refusal; and SIGTERM ends the process promptly.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let _ = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}})).expect("secret"),
        )
        .await;
    let status = m.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit {status:?}\n{}", m.stderr());
    println!("verified: SIGTERM ends the manager");
}

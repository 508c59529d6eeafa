//! The rules controller end to end on kube-sim: the ProtectionRule CRD is
//! created through the API, rules are custom resources validated by its
//! schema and CEL rules, and the controller protects Secrets mounted by
//! running pods.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{KubeSim, SimConfig};
use protection_core::featuregate::FeatureGates;
use protection_core::release;
use protection_core::{Metrics, Version};
use protection_rules::examples;
use protection_rules::spec::{self, CRD_YAML};
use serde_json::{Value, json};
use test_support::{eventually, until};

const WAIT: Duration = Duration::from_secs(30);
const FIN: &str = "example.com/secret-in-use";

struct H {
    _sim: KubeSim,
    client: kube::Client,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Drop for H {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The controller with the rights the chart grants for the example rule.
async fn harness(gate: bool) -> H {
    start(gate, true).await
}

/// The manager's identity: kube-sim answers its SelfSubjectAccessReviews
/// from the stored RBAC objects.
const MANAGER: &str = "system:serviceaccount:pm:manager";

/// Grants `MANAGER` `verbs` on `resources` (core group) through a
/// ClusterRole and a ClusterRoleBinding named `name`.
async fn grant(c: &kube::Client, name: &str, resources: &[&str], verbs: &[&str]) {
    test_support::objects::grant_cluster(
        c,
        name,
        MANAGER,
        json!([{"apiGroups": [""], "resources": resources, "verbs": verbs}]),
    )
    .await
    .expect("grant");
}

/// The controller running as `MANAGER`, granted the rights the example
/// rule needs (`rights`) or none.
async fn start(gate: bool, rights: bool) -> H {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let sim = KubeSim::start(SimConfig::default()).await.expect("start");
    let client = sim.client().await;
    let crd: CustomResourceDefinition = serde_yaml::from_str(CRD_YAML).expect("crd yaml");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create the CRD");
    if rights {
        grant(
            &client,
            "pm-secrets",
            &["secrets"],
            &["get", "list", "watch", "patch"],
        )
        .await;
        grant(&client, "pm-pods", &["pods"], &["list", "watch"]).await;
    }
    let registry = release::registry(protection_rules::GATES).expect("registry");
    let mut gates = FeatureGates::new(registry, Version::new(0, 4));
    if gate {
        gates
            .set_from_flag("InUseProtectionRules=true")
            .expect("gate");
    }
    let metrics: Arc<Metrics> = Metrics::new().expect("metrics");
    let t = test_support::controller_context(
        protection_rules::controller::NAME,
        sim.client_as(MANAGER).await,
        gates,
        &metrics,
        // The manager's default --concurrency.
        4,
    );
    let shutdown = t.shutdown.clone();
    tokio::spawn(protection_rules::controller::run(t.ctx));
    H {
        _sim: sim,
        client,
        shutdown,
    }
}

fn rules(c: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(c.clone(), &spec::api_resource())
}

/// The chart's `secrets-used-by-pods` example (pods refer to Secrets
/// through volumes, env, envFrom, imagePullSecrets and projected volumes,
/// while not finished) under `name`, `mode` and `finalizer`.
fn rule(name: &str, mode: &str, finalizer: &str) -> DynamicObject {
    let mut spec = examples::spec("secrets-used-by-pods", finalizer).expect("example");
    spec["mode"] = json!(mode);
    serde_json::from_value(json!({
        "apiVersion": "protection-manager.io/v1alpha1",
        "kind": "ProtectionRule",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("rule")
}

async fn secret(c: &kube::Client, name: &str) {
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Secret>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &s)
        .await
        .expect("create secret");
}

async fn running_pod(c: &kube::Client, name: &str, spec: Value) {
    let pods = Api::<Pod>::namespaced(c.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create pod");
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("pod status");
}

async fn delete_pod(c: &kube::Client, name: &str) {
    Api::<Pod>::namespaced(c.clone(), "default")
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete pod");
}

async fn delete_secret(c: &kube::Client, name: &str) {
    Api::<Secret>::namespaced(c.clone(), "default")
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete secret");
}

/// Whether Secret `name` exists and carries the rule's finalizer.
async fn protected(c: &kube::Client, name: &str) -> bool {
    finalizers(c, name)
        .await
        .is_some_and(|f| f.contains(&FIN.to_string()))
}

async fn finalizers(c: &kube::Client, name: &str) -> Option<Vec<String>> {
    Api::<Secret>::namespaced(c.clone(), "default")
        .get_opt(name)
        .await
        .expect("get secret")
        .map(|s| s.metadata.finalizers.unwrap_or_default())
}

async fn status(c: &kube::Client, rule: &str) -> Value {
    rules(c)
        .get(rule)
        .await
        .map(|r| r.data.get("status").cloned().unwrap_or(Value::Null))
        .unwrap_or(Value::Null)
}

async fn events_for(c: &kube::Client, name: &str, reason: &str) -> Vec<String> {
    Api::<CoreEvent>::namespaced(c.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_secret_mounted_by_a_running_pod_survives_delete_until_the_pod_is_gone() {
    let h = harness(true).await;
    let c = &h.client;
    rules(c)
        .create(
            &PostParams::default(),
            &rule("secrets-in-pods", "Enforce", FIN),
        )
        .await
        .expect("create rule");
    for s in ["mounted", "env", "pull", "projected", "unused"] {
        secret(c, s).await;
    }
    running_pod(
        c,
        "web",
        json!({
            "containers": [{"name": "c", "image": "x",
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}]}],
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [
                {"name": "a", "secret": {"secretName": "mounted"}},
                {"name": "b", "projected": {"sources": [{"secret": {"name": "projected"}}]}}
            ]
        }),
    )
    .await;
    // Every Secret gets the finalizer (the add phase is on).
    for s in ["mounted", "env", "pull", "projected", "unused"] {
        until(WAIT, &format!("{s} carries {FIN}"), async || {
            protected(c, s).await
        })
        .await;
    }
    for s in ["mounted", "env", "pull", "projected", "unused"] {
        delete_secret(c, s).await;
    }
    // The unused one goes; the four the pod uses stay.
    until(WAIT, "the unused secret is gone", async || {
        finalizers(c, "unused").await.is_none()
    })
    .await;
    let st = eventually(WAIT, "status counts the four held", async || {
        let st = status(c, "secrets-in-pods").await;
        (st["heldNow"] == json!(4)).then_some(st)
    })
    .await;
    assert_eq!(st["protected"], json!(4));
    assert_eq!(st["conditions"][0]["type"], "Ready");
    assert_eq!(st["conditions"][0]["status"], "True");
    for s in ["mounted", "env", "pull", "projected"] {
        assert!(finalizers(c, s).await.is_some(), "{s} is held");
    }
    let held = eventually(WAIT, "a FinalizerHeld event", async || {
        let e = events_for(c, "mounted", "FinalizerHeld").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        held[0],
        "rule secrets-in-pods holds this deletion: in use by pods/web in default"
    );
    // The pod finishing releases them (its `while` no longer holds).
    Api::<Pod>::namespaced(c.clone(), "default")
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .expect("pod done");
    for s in ["mounted", "env", "pull", "projected"] {
        until(WAIT, &format!("{s} is gone"), async || {
            finalizers(c, s).await.is_none()
        })
        .await;
    }
}

#[tokio::test]
async fn deleting_the_pod_releases_and_deleting_the_rule_leaves_no_finalizer() {
    let h = harness(true).await;
    let c = &h.client;
    rules(c)
        .create(&PostParams::default(), &rule("r", "Enforce", FIN))
        .await
        .expect("create rule");
    secret(c, "a").await;
    secret(c, "b").await;
    running_pod(
        c,
        "p",
        json!({"containers": [{"name": "c", "image": "x", "envFrom": [{"secretRef": {"name": "a"}}]}]}),
    )
    .await;
    until(WAIT, "a and b carry the finalizer", async || {
        protected(c, "a").await && protected(c, "b").await
    })
    .await;
    until(
        WAIT,
        "the rule carries its clean-up finalizer",
        async || {
            rules(c).get("r").await.is_ok_and(|r| {
                r.metadata.finalizers.unwrap_or_default()
                    == vec![protection_rules::controller::RULE_FINALIZER.to_string()]
            })
        },
    )
    .await;
    delete_secret(c, "a").await;
    until(WAIT, "a is held", async || {
        status(c, "r").await["heldNow"] == json!(1)
    })
    .await;
    delete_pod(c, "p").await;
    until(WAIT, "a is gone once the pod is", async || {
        finalizers(c, "a").await.is_none()
    })
    .await;
    assert_eq!(events_for(c, "a", "FinalizerReleased").await.len(), 1);

    // Deleting the rule removes its finalizer from b, then the rule goes.
    rules(c)
        .delete("r", &DeleteParams::default())
        .await
        .expect("delete rule");
    until(WAIT, "the rule is gone", async || {
        rules(c).get_opt("r").await.expect("get").is_none()
    })
    .await;
    assert_eq!(finalizers(c, "b").await, Some(vec![]));
}

#[tokio::test]
async fn an_audit_rule_holds_nothing_and_reports_what_it_would_hold() {
    let h = harness(true).await;
    let c = &h.client;
    rules(c)
        .create(&PostParams::default(), &rule("audit", "Audit", FIN))
        .await
        .expect("create rule");
    secret(c, "s").await;
    running_pod(
        c,
        "p",
        json!({"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "v", "secret": {"secretName": "s"}}]}),
    )
    .await;
    until(WAIT, "the audit rule is running", async || {
        status(c, "audit").await["conditions"][0]["reason"] == "Running"
    })
    .await;
    assert_eq!(finalizers(c, "s").await, Some(vec![]));
    delete_secret(c, "s").await;
    assert_eq!(finalizers(c, "s").await, None, "nothing held");
    let notes = eventually(WAIT, "a WouldHold event", async || {
        let e = events_for(c, "s", "WouldHold").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        notes,
        ["rule audit (Audit) would hold this deletion: in use by pods/p in default"]
    );
    until(WAIT, "status counts it", async || {
        status(c, "audit").await["wouldHold"] == json!(1)
    })
    .await;
    // No rule finalizer either: an Audit rule has nothing to clean up.
    assert!(
        rules(c)
            .get("audit")
            .await
            .unwrap()
            .metadata
            .finalizers
            .is_none()
    );
}

/// (A failed CEL rule on a string quotes the value, as the real
/// kube-apiserver's CRD validation does: kube-sim's differential CRD
/// scenario checks that wording against the real server.)
#[tokio::test]
async fn the_crd_refuses_bad_rules_with_the_api_servers_wording() {
    let h = harness(true).await;
    let c = &h.client;
    let err = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("{other}"),
    };
    let (code, msg) = err(rules(c)
        .create(
            &PostParams::default(),
            &rule("bad", "Enforce", "kubernetes.io/secret-protection"),
        )
        .await
        .unwrap_err());
    assert_eq!(code, 422);
    assert_eq!(
        msg,
        "ProtectionRule.protection-manager.io \"bad\" is invalid: spec.finalizer: Invalid value: \"kubernetes.io/secret-protection\": kubernetes.io/ names are reserved unless upstream's own (kubernetes.io/pvc-protection, kubernetes.io/pv-protection)"
    );
    let (code, msg) = err(rules(c)
        .create(&PostParams::default(), &rule("bad", "Sometimes", FIN))
        .await
        .unwrap_err());
    assert_eq!(code, 422);
    assert_eq!(
        msg,
        // After a blocking schema error the CEL rules are not run, and
        // the real server says so.
        "ProtectionRule.protection-manager.io \"bad\" is invalid: [spec.mode: Unsupported value: \"Sometimes\": supported values: \"Enforce\", \"Audit\", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
    );
    // The finalizer is immutable.
    rules(c)
        .create(&PostParams::default(), &rule("ok", "Enforce", FIN))
        .await
        .expect("create");
    let (code, msg) = err(rules(c)
        .patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"finalizer": "example.com/other"}})),
        )
        .await
        .unwrap_err());
    assert_eq!(code, 422);
    assert!(msg.ends_with("spec.finalizer: Invalid value: \"example.com/other\": finalizer is immutable; create a new rule and delete this one"), "{msg}");
}

#[tokio::test]
async fn a_rule_whose_expression_fails_to_compile_is_refused_with_a_condition() {
    let h = harness(true).await;
    let c = &h.client;
    let mut r = rule("typo", "Enforce", FIN);
    r.data["spec"]["users"][0]["reference"] = json!("object.spec.(");
    rules(c)
        .create(&PostParams::default(), &r)
        .await
        .expect("create");
    let st = eventually(WAIT, "a Ready=False condition", async || {
        let st = status(c, "typo").await;
        (st["conditions"][0]["status"] == "False").then_some(st)
    })
    .await;
    assert_eq!(st["conditions"][0]["reason"], "InvalidRule");
    assert!(
        st["lastError"]
            .as_str()
            .unwrap_or_default()
            .starts_with("spec.users[0].reference: "),
        "{st}"
    );
    // A rule over a kind the server does not serve is refused too.
    let mut r = rule("nokind", "Enforce", FIN);
    r.data["spec"]["protected"] =
        json!({"group": "example.com", "version": "v1", "resource": "widgets"});
    rules(c)
        .create(&PostParams::default(), &r)
        .await
        .expect("create");
    let st = eventually(WAIT, "a ResourceNotFound condition", async || {
        let st = status(c, "nokind").await;
        (st["conditions"][0]["reason"] == "ResourceNotFound").then_some(st)
    })
    .await;
    assert!(
        st["lastError"]
            .as_str()
            .unwrap_or_default()
            .starts_with("spec.protected: "),
        "{st}"
    );
}

/// Updating a rule re-indexes without a gap: a Secret held under the old
/// spec stays held while the new spec's watches sync, and what the new spec
/// no longer counts is released once it runs.
#[tokio::test]
async fn updating_a_rule_keeps_holding_through_the_switch_and_applies_the_new_spec() {
    let h = harness(true).await;
    let c = &h.client;
    rules(c)
        .create(&PostParams::default(), &rule("r", "Enforce", FIN))
        .await
        .expect("create rule");
    secret(c, "mounted").await;
    secret(c, "pull").await;
    running_pod(
        c,
        "p",
        json!({"containers": [{"name": "c", "image": "x"}],
               "imagePullSecrets": [{"name": "pull"}],
               "volumes": [{"name": "v", "secret": {"secretName": "mounted"}}]}),
    )
    .await;
    until(WAIT, "both carry the finalizer", async || {
        for s in ["mounted", "pull"] {
            if !protected(c, s).await {
                return false;
            }
        }
        true
    })
    .await;
    for s in ["mounted", "pull"] {
        delete_secret(c, s).await;
    }
    until(WAIT, "both are held", async || {
        status(c, "r").await["heldNow"] == json!(2)
    })
    .await;
    // The new spec counts volumes only (imagePullSecrets no longer).
    let reference =
        "object.spec.?volumes.orValue([]).filter(v, has(v.secret)).map(v, v.secret.secretName)";
    rules(c)
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"users": [{
                "version": "v1", "resource": "pods", "reference": reference,
                "while": "!(object.?status.?phase.orValue('') in ['Succeeded', 'Failed'])"
            }]}})),
        )
        .await
        .expect("update the rule");
    // Through the switch the mounted Secret is never released.
    let switched = async {
        loop {
            let st = status(c, "r").await;
            assert!(
                finalizers(c, "mounted").await.is_some(),
                "the mounted Secret was released during the update (status {st})"
            );
            if st["observedGeneration"] == json!(2) && st["conditions"][0]["reason"] == "Running" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, switched)
        .await
        .expect("the new spec runs");
    until(
        WAIT,
        "the pull Secret is released by the new spec",
        async || finalizers(c, "pull").await.is_none(),
    )
    .await;
    assert!(
        finalizers(c, "mounted").await.is_some(),
        "still mounted: still held"
    );
    delete_pod(c, "p").await;
    until(WAIT, "the mounted Secret goes with its pod", async || {
        finalizers(c, "mounted").await.is_none()
    })
    .await;
}

/// `explain secrets/NAME` names the rule and the users that hold it, and
/// says when nothing does.
#[tokio::test]
async fn explain_names_the_rule_and_the_users_holding_a_secret() {
    let h = harness(true).await;
    let c = &h.client;
    rules(c)
        .create(
            &PostParams::default(),
            &rule("secrets-in-pods", "Enforce", FIN),
        )
        .await
        .expect("create rule");
    secret(c, "db").await;
    for p in ["api", "worker"] {
        running_pod(
            c,
            p,
            json!({"containers": [{"name": "c", "image": "x", "envFrom": [{"secretRef": {"name": "db"}}]}]}),
        )
        .await;
    }
    until(WAIT, "db carries the finalizer", async || {
        protected(c, "db").await
    })
    .await;
    delete_secret(c, "db").await;
    let e = protection_rules::explain::explain(c, "secret", Some("default"), "db")
        .await
        .expect("explain")
        .expect("a rule protects secrets");
    assert!(e.found && e.deleting);
    assert_eq!(e.rules.len(), 1);
    assert_eq!(
        protection_rules::explain::render(&e),
        format!(
            "secrets default/db: Terminating\n  finalizers: {FIN}\n  rule secrets-in-pods (Enforce, finalizer {FIN}): held by pods/api in default, pods/worker in default\n  The deletion completes once no user refers to it (or the rule is deleted).\n"
        )
    );
    // A kind no rule protects: no answer from the rules.
    assert!(
        protection_rules::explain::explain(c, "configmaps", Some("default"), "x")
            .await
            .expect("explain")
            .is_none()
    );
    for p in ["api", "worker"] {
        delete_pod(c, p).await;
    }
    until(WAIT, "db is gone", async || {
        finalizers(c, "db").await.is_none()
    })
    .await;
    let e = protection_rules::explain::explain(c, "secrets", Some("default"), "db")
        .await
        .expect("explain")
        .expect("a rule protects secrets");
    assert_eq!(
        protection_rules::explain::render(&e),
        "secrets default/db: not found\n"
    );
}

/// Issue 14: a rule the manager has no rights for is refused with a
/// condition naming the missing right and the chart value that grants it;
/// granting the right lets it run, with nothing restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_the_manager_lacks_rights_for_is_refused_until_they_are_granted() {
    let h = start(true, false).await;
    let c = &h.client;
    // It may read Secrets and watch pods, but not list, watch or patch Secrets.
    grant(c, "pm-read", &["secrets"], &["get"]).await;
    grant(c, "pm-pods", &["pods"], &["list", "watch"]).await;
    secret(c, "mounted").await;
    running_pod(
        c,
        "web",
        json!({
            "containers": [{"name": "c", "image": "x"}],
            "volumes": [{"name": "a", "secret": {"secretName": "mounted"}}]
        }),
    )
    .await;
    rules(c)
        .create(&PostParams::default(), &rule("secrets", "Enforce", FIN))
        .await
        .expect("create rule");
    let st = eventually(WAIT, "the rule is refused", async || {
        let st = status(c, "secrets").await;
        (st["conditions"][0]["status"] == "False").then_some(st)
    })
    .await;
    let cond = &st["conditions"][0];
    assert_eq!(cond["type"], "Ready");
    assert_eq!(cond["reason"], "Forbidden");
    assert_eq!(
        cond["message"],
        "the manager may not list secrets; add the resource to the chart's rules.allowedResources"
    );
    assert_eq!(
        finalizers(c, "mounted").await,
        Some(vec![]),
        "nothing patched"
    );
    let rule_fins = rules(c)
        .get("secrets")
        .await
        .expect("rule")
        .metadata
        .finalizers;
    assert!(
        rule_fins.unwrap_or_default().is_empty(),
        "the rule is not taken either"
    );

    grant(
        c,
        "pm-secrets",
        &["secrets"],
        &["get", "list", "watch", "patch"],
    )
    .await;
    until(
        Duration::from_secs(60),
        "the rule runs once the right is granted",
        async || protected(c, "mounted").await,
    )
    .await;
    until(WAIT, "the rule is Ready", async || {
        status(c, "secrets").await["conditions"][0]["status"] == "True"
    })
    .await;
}

/// A reference expression that fails on some user (here: it reads
/// `v.secret` of every volume, and a pod has an emptyDir) cannot say what
/// that user refers to: the user holds every Secret in its namespace (the
/// safe side), the hold names it with the error, and the status reports
/// it; once the user goes, the Secret is released.
#[tokio::test]
async fn a_user_whose_reference_fails_holds_its_namespace_and_says_why() {
    let h = harness(true).await;
    let c = &h.client;
    let mut r = rule("strict", "Enforce", FIN);
    r.data["spec"]["users"] = json!([{
        "version": "v1",
        "resource": "pods",
        "reference": "object.spec.volumes.map(v, v.secret.secretName)",
    }]);
    rules(c)
        .create(&PostParams::default(), &r)
        .await
        .expect("create rule");
    secret(c, "unused").await;
    running_pod(
        c,
        "scratch",
        json!({"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "tmp", "emptyDir": {}}]}),
    )
    .await;
    until(WAIT, "unused carries the finalizer", async || {
        protected(c, "unused").await
    })
    .await;
    delete_secret(c, "unused").await;
    let held = eventually(WAIT, "a FinalizerHeld event", async || {
        let e = events_for(c, "unused", "FinalizerHeld").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert!(
        held[0].contains("pods/scratch in default (its reference could not be evaluated:"),
        "{held:?}"
    );
    until(WAIT, "the status names the failing reference", async || {
        status(c, "strict").await["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("spec.users[0].reference on pods/scratch"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        finalizers(c, "unused").await.is_some(),
        "freed while a user's reference was unknown"
    );
    delete_pod(c, "scratch").await;
    until(WAIT, "unused is gone once the pod is", async || {
        finalizers(c, "unused").await.is_none()
    })
    .await;
}

/// Many held deletions released together (the keyed workers and the
/// batched confirmer): 40 Secrets, each mounted by its own running pod,
/// deleted; their pods deleted in two waves. No Secret goes while its pod
/// exists, and every one goes once its pod has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_deletions_released_together_keep_every_secret_whose_pod_remains() {
    let h = harness(true).await;
    let c = &h.client;
    rules(c)
        .create(&PostParams::default(), &rule("r", "Enforce", FIN))
        .await
        .expect("create rule");
    let n = 40;
    for i in 0..n {
        secret(c, &format!("s{i}")).await;
        running_pod(
            c,
            &format!("p{i}"),
            json!({"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "v", "secret": {"secretName": format!("s{i}")}}]}),
        )
        .await;
    }
    let secrets = Api::<Secret>::namespaced(c.clone(), "default");
    let protected_count = async || {
        secrets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .filter(|s| s.metadata.finalizers.iter().flatten().any(|f| f == FIN))
            .count()
    };
    until(WAIT, "every Secret carries the finalizer", async || {
        protected_count().await == n
    })
    .await;
    for i in 0..n {
        delete_secret(c, &format!("s{i}")).await;
    }
    until(WAIT, "all held", async || {
        status(c, "r").await["heldNow"] == json!(n)
    })
    .await;
    // First wave: the even pods.
    for i in (0..n).step_by(2) {
        delete_pod(c, &format!("p{i}")).await;
    }
    until(WAIT, "the even Secrets are gone", async || {
        let mut all = true;
        for i in (0..n).step_by(2) {
            all &= finalizers(c, &format!("s{i}")).await.is_none();
        }
        all
    })
    .await;
    for i in (1..n).step_by(2) {
        assert!(
            finalizers(c, &format!("s{i}")).await.is_some(),
            "s{i} was freed while pod p{i} mounts it"
        );
    }
    for i in (1..n).step_by(2) {
        delete_pod(c, &format!("p{i}")).await;
    }
    until(WAIT, "every Secret is gone", async || {
        secrets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    })
    .await;
}

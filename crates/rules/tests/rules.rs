//! The rules controller end to end on kube-sim, and most of it also on the
//! real kube-apiserver v1.36.3 (`NAME::kube_sim`, `NAME::real`): the
//! ProtectionRule CRD is created through the API, rules are custom resources
//! validated by its schema and CEL rules (in the real server's own words),
//! and the controller protects Secrets mounted by running pods, with the
//! rights RBAC gives it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use protection_core::featuregate::FeatureGates;
use protection_core::release;
use protection_core::{Metrics, Version};
use protection_rules::examples;
use protection_rules::spec::{self, CRD_YAML};
use serde_json::{Value, json};
use test_bed::{Bed, Options, Server};
use test_support::{eventually, until};

test_bed::on_both_beds!(
    a_secret_mounted_by_a_running_pod_survives_delete_until_the_pod_is_gone,
    deleting_the_pod_releases_and_deleting_the_rule_leaves_no_finalizer,
    an_audit_rule_holds_nothing_and_reports_what_it_would_hold,
    the_crd_refuses_bad_rules_with_the_api_servers_wording,
    a_rule_whose_expression_fails_to_compile_is_refused_with_a_condition,
    a_rule_the_manager_lacks_rights_for_is_refused_until_they_are_granted,
    many_deletions_released_together_keep_every_secret_whose_pod_remains,
);

const WAIT: Duration = Duration::from_secs(30);
const FIN: &str = "example.com/secret-in-use";

struct H {
    server: Server,
    client: kube::Client,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Drop for H {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The controller with the rights the chart grants for the example rule.
async fn harness(bed: Bed, gate: bool) -> H {
    start(bed, gate, true).await
}

/// The manager's identity: kube-sim answers its SelfSubjectAccessReviews
/// from the stored RBAC objects.
const MANAGER: &str = "system:serviceaccount:pm:manager";

/// Grants `MANAGER` `verbs` on `resources` (core group) through a
/// ClusterRole and a ClusterRoleBinding named `name`, and waits until the
/// server's authorizer allows them.
async fn grant(h: &H, name: &str, resources: &[&str], verbs: &[&str]) {
    test_support::objects::grant_cluster(
        &h.client,
        name,
        MANAGER,
        json!([{"apiGroups": [""], "resources": resources, "verbs": verbs}]),
    )
    .await
    .expect("grant");
    for r in resources {
        for v in verbs {
            h.server
                .wait_allowed(MANAGER, "", r, v)
                .await
                .expect("the grant takes effect");
        }
    }
}

/// The controller running as `MANAGER` (with its descriptor's RBAC rules),
/// granted the rights the example rule needs (`rights`) or none.
async fn start(bed: Bed, gate: bool, rights: bool) -> H {
    start_with(bed, gate, rights, Default::default()).await
}

/// [`start`] with the manager's settings for the controller.
async fn start_with(
    bed: Bed,
    gate: bool,
    rights: bool,
    settings: protection_rules::controller::Settings,
) -> H {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let server = Server::start(bed, Options::named("rules"))
        .await
        .unwrap_or_else(|e| panic!("start {}: {e:#}", bed.name()));
    let client = server.client().await.expect("admin client");
    let crd: CustomResourceDefinition = serde_yaml::from_str(CRD_YAML).expect("crd yaml");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create the CRD");
    until(WAIT, "the CRD is Established", async || {
        crds.get(&format!("{}.{}", spec::PLURAL, spec::GROUP))
            .await
            .is_ok_and(|c| {
                c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    })
    .await;
    let manager = server
        .controller_client(MANAGER, protection_rules::RULES_INFO.rbac)
        .await
        .expect("controller client");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut h = H {
        server,
        client,
        shutdown,
    };
    if rights {
        grant(
            &h,
            "pm-secrets",
            &["secrets"],
            &["get", "list", "watch", "patch"],
        )
        .await;
        grant(&h, "pm-pods", &["pods"], &["list", "watch"]).await;
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
        manager,
        gates,
        &metrics,
        // The manager's default --concurrency.
        4,
    );
    h.shutdown = t.shutdown;
    tokio::spawn(protection_rules::controller::run_with(t.ctx, settings));
    h
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

async fn a_secret_mounted_by_a_running_pod_survives_delete_until_the_pod_is_gone(bed: Bed) {
    let h = harness(bed, true).await;
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

async fn deleting_the_pod_releases_and_deleting_the_rule_leaves_no_finalizer(bed: Bed) {
    let h = harness(bed, true).await;
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
    // The status counts the hold from the index; the release is reported
    // only for a deletion that was reported held, so wait for that report
    // before the pod goes.
    eventually(WAIT, "a FinalizerHeld event for a", async || {
        let e = events_for(c, "a", "FinalizerHeld").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    delete_pod(c, "p").await;
    until(WAIT, "a is gone once the pod is", async || {
        finalizers(c, "a").await.is_none()
    })
    .await;
    // The Event is written by its own queue, after the release.
    let released = eventually(WAIT, "a FinalizerReleased event for a", async || {
        let e = events_for(c, "a", "FinalizerReleased").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(released.len(), 1, "{released:?}");

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

async fn an_audit_rule_holds_nothing_and_reports_what_it_would_hold(bed: Bed) {
    let h = harness(bed, true).await;
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

async fn the_crd_refuses_bad_rules_with_the_api_servers_wording(bed: Bed) {
    let h = harness(bed, true).await;
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
        "ProtectionRule.protection-manager.io \"bad\" is invalid: [spec.mode: Unsupported value: \"Sometimes\": supported values: \"Enforce\", \"Audit\", \"Deny\", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
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

async fn a_rule_whose_expression_fails_to_compile_is_refused_with_a_condition(bed: Bed) {
    let h = harness(bed, true).await;
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
    let h = harness(Bed::Sim, true).await;
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
    let h = harness(Bed::Sim, true).await;
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
async fn a_rule_the_manager_lacks_rights_for_is_refused_until_they_are_granted(bed: Bed) {
    let h = start(bed, true, false).await;
    let c = &h.client;
    // It may read Secrets and watch pods, but not list, watch or patch Secrets.
    grant(&h, "pm-read", &["secrets"], &["get"]).await;
    grant(&h, "pm-pods", &["pods"], &["list", "watch"]).await;
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
        &h,
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
    let h = harness(Bed::Sim, true).await;
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
async fn many_deletions_released_together_keep_every_secret_whose_pod_remains(bed: Bed) {
    let h = harness(bed, true).await;
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

/// The Ready condition's reason and message of `rule`, once it has one with
/// `reason`.
async fn refused_with(c: &kube::Client, rule: &str, reason: &str) -> String {
    eventually(
        WAIT,
        &format!("{rule} is refused with {reason}"),
        async || {
            let st = status(c, rule).await;
            (st["conditions"][0]["reason"] == json!(reason)).then(|| {
                st["conditions"][0]["message"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
        },
    )
    .await
}

/// Issue 27, bug 2: two rules putting the same finalizer on the same kind
/// each removed it when *their* users were gone, and deleting one stripped
/// it from every object, freeing a Secret the other's pod still used. The
/// second is refused naming the first, and deleting it leaves the
/// finalizer to the first.
#[tokio::test]
async fn a_second_rule_with_a_finalizer_already_used_is_refused_and_its_deletion_frees_nothing() {
    let h = harness(Bed::Sim, true).await;
    let c = &h.client;
    rules(c)
        .create(&PostParams::default(), &rule("first", "Enforce", FIN))
        .await
        .expect("create rule");
    secret(c, "mounted").await;
    running_pod(
        c,
        "p",
        json!({"containers": [{"name": "c", "image": "x"}],
               "volumes": [{"name": "a", "secret": {"secretName": "mounted"}}]}),
    )
    .await;
    until(WAIT, "mounted carries the finalizer", async || {
        protected(c, "mounted").await
    })
    .await;
    rules(c)
        .create(&PostParams::default(), &rule("second", "Enforce", FIN))
        .await
        .expect("create rule");
    let msg = refused_with(c, "second", "FinalizerInUse").await;
    assert!(
        msg.contains(&format!(
            "{FIN} is already used on secrets by ProtectionRule first"
        )),
        "{msg}"
    );
    // The Secret is deleted while the pod uses it, then the second rule.
    delete_secret(c, "mounted").await;
    rules(c)
        .delete("second", &DeleteParams::default())
        .await
        .expect("delete rule");
    until(WAIT, "the second rule is gone", async || {
        rules(c).get_opt("second").await.expect("get").is_none()
    })
    .await;
    // The first rule still holds the Secret for its pod.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(protected(c, "mounted").await, "the Secret in use was freed");
    delete_pod(c, "p").await;
    until(WAIT, "the Secret goes once the pod is gone", async || {
        finalizers(c, "mounted").await.is_none()
    })
    .await;
}

/// Issue 27, bug 2 and the critical kinds: a rule may not use the finalizer
/// of another controller of the manager, nor protect a kind the cluster
/// must delete (pods here) without `allowCriticalKind`.
#[tokio::test]
async fn a_rule_with_another_controllers_finalizer_or_a_critical_kind_is_refused() {
    let h = start_with(
        Bed::Sim,
        true,
        true,
        protection_rules::controller::Settings {
            reserved_finalizers: vec![(
                "kubernetes.io/pvc-protection".to_string(),
                "pvc-protection",
            )],
        },
    )
    .await;
    let c = &h.client;
    let mut upstream = rule("pvc-like", "Enforce", "kubernetes.io/pvc-protection");
    upstream.data["spec"]["protected"] =
        json!({"version": "v1", "resource": "persistentvolumeclaims"});
    rules(c)
        .create(&PostParams::default(), &upstream)
        .await
        .expect("create rule");
    let msg = refused_with(c, "pvc-like", "FinalizerInUse").await;
    assert!(
        msg.contains("is the finalizer of this manager's pvc-protection controller"),
        "{msg}"
    );
    let mut pods = rule("pods", "Enforce", "example.com/pod-in-use");
    pods.data["spec"]["protected"] = json!({"version": "v1", "resource": "pods"});
    rules(c)
        .create(&PostParams::default(), &pods)
        .await
        .expect("create rule");
    let msg = refused_with(c, "pods", "CriticalKind").await;
    assert!(msg.contains("set spec.allowCriticalKind: true"), "{msg}");
}

/// The Deny-mode label and annotation (`protection-manager.io/in-use`,
/// `protection-manager.io/in-use-by`) of Secret `name`.
async fn deny_marks(c: &kube::Client, name: &str) -> (Option<String>, Option<String>) {
    let s = Api::<Secret>::namespaced(c.clone(), "default")
        .get(name)
        .await
        .expect("get secret");
    (
        s.metadata
            .labels
            .and_then(|l| l.get(protection_rules::deny::IN_USE_LABEL).cloned()),
        s.metadata
            .annotations
            .and_then(|a| a.get(protection_rules::deny::IN_USE_BY).cloned()),
    )
}

/// Deny mode: a Secret a running pod mounts carries the in-use label and
/// an annotation naming the pod, the rule and its reason (what the chart's
/// policy refuses the delete with), besides the finalizer; both go when the
/// pod does; switching the rule to Enforce, and deleting it, take away the
/// label and annotation it wrote.
#[tokio::test]
async fn a_deny_rule_labels_objects_in_use_naming_users_rule_and_reason() {
    let h = harness(Bed::Sim, true).await;
    let c = &h.client;
    let mut r = rule("deny", "Deny", FIN);
    r.data["spec"]["reason"] = json!("mounted credentials");
    rules(c)
        .create(&PostParams::default(), &r)
        .await
        .expect("create rule");
    secret(c, "db").await;
    secret(c, "spare").await;
    let mounts = |secret: &str| {
        json!({"containers": [{"name": "c", "image": "x"}],
               "volumes": [{"name": "v", "secret": {"secretName": secret}}]})
    };
    running_pod(c, "web", mounts("db")).await;
    until(WAIT, "db is labelled in use by web", async || {
        deny_marks(c, "db").await
            == (
                Some("true".into()),
                Some("pods/web (rule deny: mounted credentials)".into()),
            )
    })
    .await;
    assert!(
        protected(c, "db").await,
        "the finalizer stays as the backstop"
    );
    assert!(protected(c, "spare").await);
    assert_eq!(
        deny_marks(c, "spare").await,
        (None, None),
        "spare is unused"
    );

    // More users than the annotation names: the first few and a count.
    for p in ["api", "jobs", "cron"] {
        running_pod(c, p, mounts("db")).await;
    }
    until(WAIT, "the annotation counts the rest", async || {
        deny_marks(c, "db")
            .await
            .1
            .is_some_and(|a| a.ends_with("and 1 more (rule deny: mounted credentials)"))
    })
    .await;
    for p in ["api", "jobs", "cron", "web"] {
        delete_pod(c, p).await;
    }
    until(WAIT, "the label goes with the last user", async || {
        deny_marks(c, "db").await == (None, None)
    })
    .await;
    assert!(protected(c, "db").await);

    // Back in use, then the rule switches to Enforce: the label goes, the
    // finalizer stays.
    running_pod(c, "web2", mounts("db")).await;
    until(WAIT, "db is labelled again", async || {
        deny_marks(c, "db").await.0.is_some()
    })
    .await;
    rules(c)
        .patch(
            "deny",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "Enforce"}})),
        )
        .await
        .expect("switch to Enforce");
    until(WAIT, "an Enforce rule keeps no Deny label", async || {
        deny_marks(c, "db").await == (None, None)
    })
    .await;
    assert!(protected(c, "db").await);

    // Deny again, then the rule is deleted: label, annotation and finalizer
    // all go.
    rules(c)
        .patch(
            "deny",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "Deny"}})),
        )
        .await
        .expect("switch to Deny");
    until(WAIT, "db is labelled once more", async || {
        deny_marks(c, "db").await.0.is_some()
    })
    .await;
    rules(c)
        .delete("deny", &DeleteParams::default())
        .await
        .expect("delete rule");
    until(WAIT, "the rule is gone", async || {
        rules(c).get_opt("deny").await.expect("get").is_none()
    })
    .await;
    assert_eq!(deny_marks(c, "db").await, (None, None));
    assert_eq!(finalizers(c, "db").await, Some(vec![]));
}

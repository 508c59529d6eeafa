//! ProtectionRules through the release train, installed by the chart: 0.3
//! (no rules controller) → 0.4 with the `InUseProtectionRules` gate and the
//! shipped `secrets-used-by-pods` example on (a Secret a running pod mounts
//! survives `kubectl delete`); the rollback to 0.3 refused while rules may
//! have put finalizers 0.3 never removes (the rule's `rule-cleanup`
//! finalizer stands for them); `strip-finalizers --controller rules`
//! refusing while the gate is on and while a rule still carries it; the
//! safe path (gate off, the example turned off so helm deletes the rule and
//! the manager clears its finalizers, `strip-finalizers` to re-count), and
//! the rollback that then passes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use crate::ensure;
use crate::error::{KubeContext, Result};
use crate::release::ManagerRelease;
use crate::scenarios::{
    App, clear_pending_rollback, ensure_bare_record, finalizers, has_finalizer,
    refused_rollback_to_first, rollback_to_first, strip_finalizers, wait_record,
};
use crate::wait;

/// The rules controller's finalizer on every rule it enforced.
pub const RULE_CLEANUP: &str = "protection-manager.io/rule-cleanup";
/// The chart's example rule and its finalizer (default domain).
pub const RULE: &str = "secrets-used-by-pods";
pub const SECRET_FINALIZER: &str = "protection-manager.io/secret-in-use";
const GATE_ON: &str = "featureGates.InUseProtectionRules=true";
const EXAMPLE_ON: &str = "rules.examples.secretsUsedByPods=true";

/// How long "stays Terminating" is observed.
const HOLD: Duration = Duration::from_secs(3);

/// ProtectionRules, protection-manager.io/v1alpha1.
pub fn rules(app: &App<'_>) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("protection-manager.io", "v1alpha1", "ProtectionRule");
    Api::all_with(
        app.h.client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "protectionrules"),
    )
}

fn secrets(app: &App<'_>) -> Api<Secret> {
    Api::namespaced(app.h.client.clone(), &app.ns)
}

fn secret(run: &str, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {crate::objects::RUN_LABEL: run}},
        "stringData": {"token": "t"}
    })
}

/// A pod that mounts Secret `secret`.
fn pod_mounting(run: &str, name: &str, image: &str, secret: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {crate::objects::RUN_LABEL: run}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": image,
                            "volumeMounts": [{"name": "s", "mountPath": "/etc/s"}]}],
            "volumes": [{"name": "s", "secret": {"secretName": secret}}]
        }
    })
}

async fn wait_secret_finalizer(app: &App<'_>, name: &str) -> Result<()> {
    app.wait_for(
        &secrets(app),
        name,
        &format!("carries {SECRET_FINALIZER}"),
        |s: &Secret| has_finalizer(&s.metadata, SECRET_FINALIZER),
    )
    .await
    .map(|_| ())
}

/// The walk; see the module doc.
pub async fn rollback_walk(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;

    // --- 0.3: no rules controller.
    rel.install(&["emulatedVersion=0.3"], true).await?;
    rel.wait_running_as("0.3").await?;
    app.create(&secret(&h.run, "mounted")).await?;
    app.create(&secret(&h.run, "spare")).await?;
    app.create(&pod_mounting(&h.run, "user", &h.pod_image, "mounted"))
        .await?;
    h.verified("0.3 (helm install, revision 1): Secrets mounted (by pod user) and spare created");

    // --- 0.4 with the gate and the shipped example on.
    rel.upgrade(&["emulatedVersion=0.4", GATE_ON, EXAMPLE_ON], true)
        .await?;
    app.wait_for(
        &rules(app),
        RULE,
        "carries rule-cleanup",
        |r: &DynamicObject| has_finalizer(&r.metadata, RULE_CLEANUP),
    )
    .await?;
    for s in ["mounted", "spare"] {
        wait_secret_finalizer(app, s).await?;
    }
    let record = wait_record(rel, "minimumRelease 0.4 while the gate is on", |r| {
        r.get("minimumRelease").map(String::as_str) == Some("0.4")
            && r.get("minimumReleaseFinalizers").is_some_and(|l| {
                l.contains(&format!(
                    "{RULE_CLEANUP} controller=rules gate=InUseProtectionRules adding=true delete-to-clear=protectionrules.protection-manager.io"
                ))
            })
    })
    .await?;
    app.kubectl
        .ok(&[
            "--namespace",
            &app.ns,
            "delete",
            "secret",
            "mounted",
            "--wait=false",
        ])
        .await?;
    wait::holds_for("the mounted Secret stays Terminating", HOLD, || async {
        Ok(
            match secrets(app)
                .get_opt("mounted")
                .await
                .ctx(|| "get secret mounted".into())?
            {
                Some(s)
                    if s.metadata.deletion_timestamp.is_some()
                        && has_finalizer(&s.metadata, SECRET_FINALIZER) =>
                {
                    Ok(())
                }
                other => Err(format!("{:?}", other.map(|s| s.metadata))),
            },
        )
    })
    .await?;
    h.verified(format!(
        "0.4 (helm upgrade --set {GATE_ON} --set {EXAMPLE_ON}, revision 2): the chart's rule {RULE} carries {RULE_CLEANUP}; both Secrets got {SECRET_FINALIZER}; `kubectl delete secret mounted` leaves it Terminating while pod user mounts it; the record: {:?}",
        record.get("minimumReleaseFinalizers").map(|s| s.trim()).unwrap_or_default()
    ));

    // --- helm rollback to 0.3: refused by the pre-rollback hook.
    let history = rel.history().await?;
    let (_, refusal) = refused_rollback_to_first(
        app,
        rel,
        &[
            "objects in this cluster may carry protection-manager.io/rule-cleanup (controller rules, feature gate InUseProtectionRules on",
            "--set featureGates.InUseProtectionRules=false",
            "delete every protectionrules.protection-manager.io and wait until they are gone",
            "`protection-manager strip-finalizers --controller rules --namespace",
        ],
    )
    .await?;
    h.verified(format!(
        "helm rollback {} 1 (to 0.3): refused by the pre-rollback hook: {refusal}",
        rel.name
    ));
    // helm compares the deployed revision with the refused one's manifest
    // (0.3's, without the example rule) and refuses to adopt the rule it
    // finds; the release is then `failed`, no longer pending, and the next
    // `helm upgrade` works from the deployed revision (chart README).
    if let Some(ran) = clear_pending_rollback(rel, &history).await? {
        let out = format!("{}{}", ran.stdout, ran.stderr);
        ensure!(
            out.contains(&format!(
                "original object ProtectionRule with the name \"{RULE}\" not found"
            )),
            "helm rollback to the deployed revision after the refusal: {out}"
        );
        h.verified(format!(
            "clearing the refused rollback's pending-rollback by rolling back to the deployed revision fails as helm does when that revision added an object ({:?}); the release is then failed, not pending",
            out.trim().lines().last().unwrap_or_default()
        ));
    }
    let err = strip_finalizers(app, rel, "rules").await?.refused()?;
    ensure!(
        err.contains("Turn the gate off first"),
        "strip-finalizers --controller rules with the gate on should refuse: {err}"
    );

    // --- Gate off, the rule kept: its finalizer stays counted.
    rel.upgrade(&["emulatedVersion=0.4", EXAMPLE_ON], true)
        .await?;
    rel.wait_running_as("0.4").await?;
    wait_record(rel, "the minimum kept while the rule carries rule-cleanup", |r| {
        r.get("minimumReleaseFinalizers")
            .is_some_and(|l| l.contains(&format!("{RULE_CLEANUP} controller=rules gate=InUseProtectionRules adding=false holders=1")))
    })
    .await?;
    let err = strip_finalizers(app, rel, "rules").await?.refused()?;
    ensure!(
        err.contains(&format!(
            "1 protectionrules.protection-manager.io still carry {RULE_CLEANUP}: {RULE}"
        )) && err.contains(&format!(
            "kubectl delete protectionrules.protection-manager.io {RULE}"
        )),
        "strip-finalizers --controller rules should name the rule to delete: {err}"
    );
    h.verified(format!(
        "strip-finalizers --controller rules refuses with the gate on, and with the gate off while the rule exists: {:?}",
        err.trim().lines().last().unwrap_or_default()
    ));

    // --- The safe path: the example off (helm deletes the rule; the
    // manager clears its finalizer from every Secret, then lets it go),
    // strip-finalizers re-counts, the rollback passes.
    rel.upgrade(&["emulatedVersion=0.4"], true).await?;
    app.wait_gone(&rules(app), RULE).await?;
    app.wait_gone(&secrets(app), "mounted").await?;
    let spare = secrets(app)
        .get("spare")
        .await
        .ctx(|| "get secret spare".into())?;
    ensure!(
        !has_finalizer(&spare.metadata, SECRET_FINALIZER),
        "the rule's deletion should clear {SECRET_FINALIZER} from spare: {:?}",
        finalizers(&spare.metadata)
    );
    let out = strip_finalizers(app, rel, "rules").await?.ok()?;
    ensure!(
        out.contains("minimum release 0.4 cleared"),
        "strip-finalizers --controller rules: {out}"
    );
    ensure_bare_record(rel, "strip-finalizers").await?;
    h.verified(format!(
        "safe path: helm upgrade without the example deleted rule {RULE}; the manager cleared {SECRET_FINALIZER} (mounted went, spare is bare); strip-finalizers --controller rules: {}",
        out.trim().replace('\n', "; ")
    ));
    rollback_to_first(rel).await?;
    app.delete("secret", "spare", true, &[]).await?;
    h.verified("helm rollback 1 (to 0.3): passed; at 0.3 Secret spare deleted went at once: nothing stranded");
    Ok(())
}

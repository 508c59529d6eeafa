//! VolumeAttributesClass protection (docs/upstream-semantics.md §10) end to
//! end: the lifecycle with the manager installed by the chart and the Alpha
//! gate on, and the release walk 0.3 → 0.4 (gate off) → 0.4 (gate on) with
//! the rollback to 0.3 refused while finalizers 0.3 does not know may be on
//! classes, the hazard behind it (the KEP's accepted Alpha risk: forced
//! through with the guard overridden, a deleted class stays Terminating),
//! and the safe path (gate off, `protection-manager strip-finalizers
//! --controller vac-protection`, then the rollback passes).

use std::time::Duration;

use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;

use crate::ensure;
use crate::error::{Error, KubeContext, Result};
use crate::objects;
use crate::release::ManagerRelease;
use crate::scenarios::{
    App, PVC_FINALIZER, clear_pending_rollback, ensure_bare_record, finalizers, has_finalizer,
    refused_rollback_to_first, rollback_to_first, strip_finalizers, wait_record,
};
use crate::wait;

/// The class finalizer (project profile, the chart's default).
pub const VAC_FINALIZER: &str = "protection-manager.io/vac-protection";
/// The chart value that turns the Alpha gate on.
pub const GATE_ON: &str = "featureGates.VolumeAttributesClass=true";

/// How long "stays Terminating" / "nothing is added" is observed after the
/// manager acts on every relevant event (milliseconds here).
const HOLD: Duration = Duration::from_secs(3);

/// VolumeAttributesClasses, storage.k8s.io/v1.
pub fn vacs(app: &App<'_>) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("storage.k8s.io", "v1", "VolumeAttributesClass");
    Api::all_with(
        app.h.client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
    )
}

/// Whether the cluster serves storage.k8s.io/v1 VolumeAttributesClass
/// (kube-sim does; a real cluster from Kubernetes 1.34).
pub async fn served(app: &App<'_>) -> Result<bool> {
    match vacs(app).list(&Default::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(Error::Kube {
            context: "listing VolumeAttributesClasses".into(),
            source: Box::new(e),
        }),
    }
}

/// The finalizers of class `name`, `None` once it is gone.
async fn class_finalizers(app: &App<'_>, name: &str) -> Result<Option<(Vec<String>, bool)>> {
    Ok(vacs(app)
        .get_opt(name)
        .await
        .ctx(|| format!("getting class {name}"))?
        .map(|c| {
            (
                finalizers(&c.metadata),
                c.metadata.deletion_timestamp.is_some(),
            )
        }))
}

async fn wait_class_finalizer(app: &App<'_>, name: &str) -> Result<()> {
    app.wait_for(
        &vacs(app),
        name,
        "has the vac-protection finalizer",
        |c: &DynamicObject| has_finalizer(&c.metadata, VAC_FINALIZER),
    )
    .await
    .map(|_| ())
}

/// The classes stay Terminating with the finalizer for [`HOLD`].
async fn stay_held(app: &App<'_>, names: &[&str], what: &str) -> Result<()> {
    wait::holds_for(what, HOLD, || async {
        for n in names {
            match class_finalizers(app, n).await? {
                Some((f, true)) if f.iter().any(|f| f == VAC_FINALIZER) => {}
                other => return Ok(Err(format!("class {n}: {other:?}"))),
            }
        }
        Ok(Ok(()))
    })
    .await
}

/// The classes exist without the finalizer for [`HOLD`].
async fn stay_bare(app: &App<'_>, names: &[&str], what: &str) -> Result<()> {
    wait::holds_for(what, HOLD, || async {
        for n in names {
            match class_finalizers(app, n).await? {
                Some((f, _)) if !f.iter().any(|f| f == VAC_FINALIZER) => {}
                other => return Ok(Err(format!("class {n}: {other:?}"))),
            }
        }
        Ok(Ok(()))
    })
    .await
}

/// Sets (or, with `None`, clears) a claim's pending modification, as the
/// external resizer does.
async fn pending_modification(app: &App<'_>, claim: &str, target: Option<&str>) -> Result<()> {
    let status = match target {
        Some(t) => {
            json!({"modifyVolumeStatus": {"targetVolumeAttributesClassName": t, "status": "InProgress"}})
        }
        None => json!({"modifyVolumeStatus": null}),
    };
    app.pvcs()
        .patch_status(
            claim,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .ctx(|| format!("patching the status of claim {claim}"))?;
    Ok(())
}

/// The lifecycle (the manager at its own release with the Alpha gate on): a
/// class held by a claim's spec, by a volume's spec and by a pending
/// modification; `kubectl delete` and an API delete leave it Terminating
/// with the finalizer; it goes when its last user does; an unused class
/// goes at once.
pub async fn lifecycle(app: &App<'_>, _rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    if !served(app).await? {
        h.skip_in_cluster("VolumeAttributesClass protection (the cluster serves no storage.k8s.io/v1 VolumeAttributesClass)");
        return Ok(());
    }
    let gold = format!("{}-gold", h.run);
    let bronze = format!("{}-bronze", h.run);
    let unused = format!("{}-unused", h.run);
    let pv = format!("{}-pv-gold", h.run);
    for c in [&gold, &bronze, &unused] {
        app.create(&objects::vac(&h.run, c)).await?;
    }
    for c in [&gold, &bronze, &unused] {
        wait_class_finalizer(app, c).await?;
    }
    h.verified(format!(
        "classes {gold}, {bronze}, {unused} created: each got {VAC_FINALIZER} (Alpha gate on)"
    ));

    // gold: a claim and a volume; bronze: a pending modification.
    app.create(&objects::pending_pvc_with_vac(
        &h.run,
        "claim-gold",
        Some(&gold),
    ))
    .await?;
    app.create(&objects::csi_pv_with_vac(&h.run, &pv, &gold))
        .await?;
    app.create(&objects::pending_pvc_with_vac(&h.run, "moving", None))
        .await?;
    pending_modification(app, "moving", Some(&bronze)).await?;

    app.kubectl
        .ok(&[
            "delete",
            "volumeattributesclass",
            &gold,
            &unused,
            "--wait=false",
        ])
        .await?;
    vacs(app)
        .delete(&bronze, &DeleteParams::default())
        .await
        .ctx(|| format!("deleting class {bronze}"))?;
    app.wait_gone(&vacs(app), &unused).await?;
    h.verified(format!(
        "kubectl delete volumeattributesclass {unused} (no user): gone at once"
    ));
    stay_held(app, &[&gold, &bronze], "the used classes stay Terminating").await?;
    h.verified(format!(
        "kubectl delete of {gold} (used by claim claim-gold's spec and volume {pv}'s spec) and an API delete of {bronze} (claim moving's pending modification): both stay Terminating with {VAC_FINALIZER} for {}s",
        HOLD.as_secs()
    ));

    // The last users go, one at a time.
    app.delete("pvc", "claim-gold", false, &[]).await?;
    app.wait_gone(&app.pvcs(), "claim-gold").await?;
    stay_held(app, &[&gold], "gold stays held by its volume").await?;
    h.verified(format!(
        "claim claim-gold deleted: {gold} still held (volume {pv} refers to it)"
    ));
    app.delete("pv", &pv, false, &[]).await?;
    app.wait_gone(&app.pvs(), &pv).await?;
    app.wait_gone(&vacs(app), &gold).await?;
    h.verified(format!(
        "volume {pv} deleted: {gold}, its last user gone, is deleted"
    ));
    pending_modification(app, "moving", None).await?;
    app.wait_gone(&vacs(app), &bronze).await?;
    let moving = app
        .pvcs()
        .get("moving")
        .await
        .ctx(|| "get claim moving".into())?;
    ensure!(
        moving.metadata.deletion_timestamp.is_none(),
        "claim moving should be untouched: {:?}",
        moving.metadata
    );
    h.verified(format!(
        "claim moving's pending modification cleared: {bronze} is deleted; the claim itself is untouched"
    ));
    app.delete("pvc", "moving", false, &[]).await?;
    app.wait_gone(&app.pvcs(), "moving").await?;
    Ok(())
}

/// The walk 0.3 → 0.4 (gate off) → 0.4 (Alpha on) → rollback to 0.3
/// refused → (expert override) 0.3 strands a deleted class → 0.4 gate off
/// releases it and the used class once its claim goes → strip-finalizers →
/// rollback to 0.3 passes and nothing is stranded.
pub async fn upgrade_walk(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    let class = |n: &str| format!("{}-{n}", h.run);
    let (kept, spare, idle, early, tmp, late) = (
        class("kept"),
        class("spare"),
        class("idle"),
        class("early"),
        class("tmp"),
        class("late"),
    );

    // --- 0.3: no vac-protection.
    rel.install(&["emulatedVersion=0.3"], true).await?;
    rel.wait_running_as("0.3").await?;
    if !served(app).await? {
        h.skip_in_cluster("the VolumeAttributesClass release walk (the cluster serves no storage.k8s.io/v1 VolumeAttributesClass)");
        return Ok(());
    }
    for c in [&kept, &spare, &idle, &early] {
        app.create(&objects::vac(&h.run, c)).await?;
    }
    app.create(&objects::pending_pvc_with_vac(
        &h.run,
        "claim-kept",
        Some(&kept),
    ))
    .await?;
    app.kubectl
        .ok(&["delete", "volumeattributesclass", &early, "--wait=false"])
        .await?;
    app.wait_gone(&vacs(app), &early).await?;
    stay_bare(app, &[&kept, &spare, &idle], "0.3 adds no class finalizer").await?;
    h.verified(format!(
        "0.3 (helm install, revision 1): classes {kept} (used by claim claim-kept), {spare}, {idle} carry no finalizer; {early} deleted at 0.3 went at once"
    ));

    // --- 0.3 → 0.4, gate off: removal only.
    rel.upgrade(&["emulatedVersion=0.4"], true).await?;
    rel.wait_running_as("0.4").await?;
    stay_bare(
        app,
        &[&kept, &spare, &idle],
        "0.4 with the gate off adds nothing",
    )
    .await?;
    app.create(&objects::vac(&h.run, &tmp)).await?;
    app.kubectl
        .ok(&["delete", "volumeattributesclass", &tmp, "--wait=false"])
        .await?;
    app.wait_gone(&vacs(app), &tmp).await?;
    let claim = app
        .pvcs()
        .get("claim-kept")
        .await
        .ctx(|| "get claim-kept".into())?;
    ensure!(
        has_finalizer(&claim.metadata, PVC_FINALIZER),
        "claim-kept lost {PVC_FINALIZER}: {:?}",
        claim.metadata.finalizers
    );
    let record = rel.record().await?;
    ensure!(
        record.get("release").map(String::as_str) == Some("0.4")
            && !record.contains_key("minimumRelease"),
        "0.4 with the gate off should record a bare 0.4: {record:?}"
    );
    h.verified(format!(
        "0.3 → 0.4 gate off (helm upgrade, revision 2): no class got a finalizer, a new class {tmp} deleted at once, claim-kept keeps {PVC_FINALIZER}; the record says release \"0.4\", no minimum"
    ));

    // --- 0.4, Alpha gate on: back-fill and the minimum release.
    rel.upgrade(&["emulatedVersion=0.4", GATE_ON], true).await?;
    for c in [&kept, &spare, &idle] {
        wait_class_finalizer(app, c).await?;
    }
    let record = wait_record(rel, "minimumRelease 0.4 while the gate is on", |r| {
        r.get("minimumRelease").map(String::as_str) == Some("0.4")
            && r.get("minimumReleaseFinalizers")
                .is_some_and(|l| l.contains(&format!("{VAC_FINALIZER} controller=vac-protection gate=VolumeAttributesClass adding=true")))
    })
    .await?;
    let release_text = record.get("release").cloned().unwrap_or_default();
    ensure!(
        release_text.starts_with("0.4 - releases before 0.4 must not run here"),
        "release text: {release_text:?}"
    );
    app.kubectl
        .ok(&["delete", "volumeattributesclass", &kept, "--wait=false"])
        .await?;
    stay_held(app, &[&kept], "the used class stays Terminating").await?;
    h.verified(format!(
        "0.4 Alpha on (helm upgrade --set {GATE_ON}, revision 3): back-fill put {VAC_FINALIZER} on {kept}, {spare}, {idle}; {kept} deleted stays Terminating (claim-kept uses it); the record: release {release_text:?}, minimumReleaseFinalizers {:?}",
        record.get("minimumReleaseFinalizers").map(|s| s.trim()).unwrap_or_default()
    ));
    let ran = strip_finalizers(app, rel, "vac-protection").await?;
    let err = ran.refused()?;
    ensure!(
        err.contains("Turn the gate off first"),
        "strip-finalizers with the gate on should refuse: {err}"
    );
    h.verified(format!(
        "strip-finalizers with the gate on refuses: {:?}",
        err.trim().lines().last().unwrap_or_default()
    ));

    // --- helm rollback to 0.3: refused by the pre-rollback hook.
    let history = rel.history().await?;
    let args = rel.deployment_args().await?;
    let (err, refusal) = refused_rollback_to_first(
        app,
        rel,
        &[
            "objects in this cluster may carry protection-manager.io/vac-protection (controller vac-protection, feature gate VolumeAttributesClass on",
            "which no release before 0.4 removes",
            "--set featureGates.VolumeAttributesClass=false",
            "`protection-manager strip-finalizers --controller vac-protection --namespace",
            "--skip-release-check",
        ],
    )
    .await?;
    let job = format!("{}-release-check", rel.fullname);
    ensure!(
        err.contains(&job),
        "helm rollback 1 should fail in its pre-rollback hook Job {job}: {err}"
    );
    ensure!(
        rel.deployment_args().await? == args,
        "the refused rollback changed the Deployment"
    );
    h.verified(format!(
        "helm rollback {} 1 (to 0.3): refused by the pre-rollback hook Job {job} (helm: {:?}); the Deployment is unchanged; the hook's log: {refusal}",
        rel.name,
        err.trim().lines().last().unwrap_or_default().trim()
    ));
    // helm leaves the refused rollback pending-rollback; rolling back to
    // the deployed revision (same release, gate on) clears it.
    if let Some(ran) = clear_pending_rollback(rel, &history).await? {
        ran.ok()?;
    }

    // The same through helm upgrade: the chart refuses at render time.
    let err = rel.upgrade_refused(&["emulatedVersion=0.3"]).await?;
    ensure!(
        err.contains("refusing to run as release 0.3: objects in this cluster may carry protection-manager.io/vac-protection")
            && err.contains("strip-finalizers --controller vac-protection"),
        "helm upgrade to 0.3 should be refused by the chart: {err}"
    );
    h.verified("helm upgrade --set emulatedVersion=0.3: refused by the chart at render time with the same reason and safe path");

    // --- The hazard, forced through by an expert override.
    rel.upgrade(
        &["emulatedVersion=0.3", "releaseGuard.skipCheck=true"],
        true,
    )
    .await?;
    rel.wait_running_as("0.3").await?;
    app.kubectl
        .ok(&["delete", "volumeattributesclass", &spare, "--wait=false"])
        .await?;
    stay_held(
        app,
        &[&spare],
        "the unused class deleted at 0.3 stays Terminating",
    )
    .await?;
    h.verified(format!(
        "the KEP's Alpha risk, forced with releaseGuard.skipCheck=true: at 0.3 the unused class {spare}, deleted, stays Terminating with {VAC_FINALIZER} for {}s (0.3 has no vac-protection)",
        HOLD.as_secs()
    ));

    // --- 0.4 with the gate off: removal is never gated.
    rel.upgrade(&["emulatedVersion=0.4"], true).await?;
    rel.wait_running_as("0.4").await?;
    app.wait_gone(&vacs(app), &spare).await?;
    stay_held(app, &[&kept], "the used class stays held with the gate off").await?;
    app.create(&objects::vac(&h.run, &late)).await?;
    stay_bare(app, &[&late], "the gate off adds nothing").await?;
    app.delete("pvc", "claim-kept", false, &[]).await?;
    app.wait_gone(&app.pvcs(), "claim-kept").await?;
    app.wait_gone(&vacs(app), &kept).await?;
    let record = wait_record(
        rel,
        "minimumRelease kept while classes carry the finalizer",
        |r| {
            r.get("minimumRelease").map(String::as_str) == Some("0.4")
                && r.get("minimumReleaseFinalizers")
                    .is_some_and(|l| l.contains("adding=false"))
        },
    )
    .await?;
    h.verified(format!(
        "0.4 gate off (helm upgrade): the stranded {spare} was released at once, {kept} stayed held until claim-kept went and was then deleted (removal is never gated); the new class {late} got no finalizer; the record keeps the minimum: {:?}",
        record.get("minimumReleaseFinalizers").map(|s| s.trim()).unwrap_or_default()
    ));

    // --- The safe path: strip, then roll back.
    let out = strip_finalizers(app, rel, "vac-protection").await?.ok()?;
    ensure!(
        out.contains(&format!(
            "volumeattributesclasses/{idle}: removed {VAC_FINALIZER}"
        )) && out.contains("minimum release 0.4 cleared"),
        "strip-finalizers: {out}"
    );
    stay_bare(app, &[&idle, &late], "stripped classes stay bare").await?;
    ensure_bare_record(rel, "strip-finalizers").await?;
    h.verified(format!(
        "protection-manager strip-finalizers --controller vac-protection: {}",
        out.trim().replace('\n', "; ")
    ));
    rollback_to_first(rel).await?;
    app.kubectl
        .ok(&[
            "delete",
            "volumeattributesclass",
            &idle,
            &late,
            "--wait=false",
        ])
        .await?;
    app.wait_gone(&vacs(app), &idle).await?;
    app.wait_gone(&vacs(app), &late).await?;
    h.verified(format!(
        "helm rollback 1 (to 0.3): the pre-rollback check passed; at 0.3 {idle} and {late} deleted went at once: nothing stranded"
    ));
    Ok(())
}

//! Upgrade and downgrade through `helm upgrade` / `helm rollback`, with the
//! KEP's checks (docs/upstream-semantics.md §5.11, §6.3): one binary plays each
//! release through the chart's `emulatedVersion` (or two builds, with
//! `E2E_OLD_BIN` / `E2E_NEW_BIN`).
//!
//! 0.0 → 0.1: nothing added, nothing broken; 0.1 → 0.2: back-fill, and
//! deletions still clean up; 0.2 → 0.1 (rollback by one): finalizers kept,
//! deletion still works, no orphaned load balancer, nothing stuck;
//! 0.2 → 0.3: the gate is locked (the chart and the manager refuse it off);
//! 0.3 → 0.4 → 0.5 (the image's own) → 0.4 → 0.5.
//! The chart's create-time MutatingAdmissionPolicy follows the add gate: none
//! at 0.1, installed at 0.2 (a new claim carries the finalizer in the create
//! response), removed by the rollback to 0.1 (finalizers still removed).

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Service};
use kube::ResourceExt;

use crate::binaries::{NEW_TAG, OLD_TAG};
use crate::ensure;
use crate::error::{KubeContext, Result};
use crate::objects;
use crate::release::{CONTAINER, LB_CLASS, ManagerRelease};
use crate::scenarios::{
    App, LB_FINALIZER, PV_FINALIZER, PVC_FINALIZER, finalizers, has_finalizer, ingress, pvc_phase,
};
use crate::wait;

/// How long "nothing is added" / "finalizers are kept" is observed after
/// the new release leads and has synced (its first full pass over existing
/// objects takes milliseconds here; a back-fill would show within it). In
/// sim mode the request log adds the proof: no write by the manager to
/// these objects in that window.
const SETTLE: Duration = Duration::from_secs(3);

/// The locked-gate message (component-base's wording).
pub const LOCKED_GATE: &str =
    "cannot set feature gate ServiceLoadBalancerFinalizer to false, feature is locked to true";

/// The pre-existing objects of the upgrade scenario.
struct Fixture {
    svc: String,
    svc_uid: String,
    pv: String,
    pvc: String,
    pod: String,
}

async fn fixture(app: &App<'_>) -> Result<Fixture> {
    let f = Fixture {
        svc: "web".into(),
        svc_uid: String::new(),
        pv: format!("{}-pv-data", app.h.run),
        pvc: "data".into(),
        pod: "db".into(),
    };
    app.create(&objects::lb_service(&app.h.run, &f.svc, LB_CLASS))
        .await?;
    app.create(&objects::host_path_pv(&app.h.run, &f.pv))
        .await?;
    app.create(&objects::pvc_for_pv(&app.h.run, &f.pvc, &f.pv))
        .await?;
    app.create(&objects::pod_with_claims(
        &app.h.run,
        &f.pod,
        &app.h.pod_image,
        &[&f.pvc],
    ))
    .await?;
    app.wait_running(&f.pod).await?;
    app.wait_for(
        &app.pvcs(),
        &f.pvc,
        "phase Bound",
        |c: &PersistentVolumeClaim| pvc_phase(c) == "Bound",
    )
    .await?;
    let uid = app
        .services()
        .get(&f.svc)
        .await
        .ctx(|| "get service".into())?
        .uid()
        .unwrap_or_default();
    Ok(Fixture { svc_uid: uid, ..f })
}

/// `(service, pv, pvc)` finalizers.
async fn fixture_finalizers(
    app: &App<'_>,
    f: &Fixture,
) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let s = app
        .services()
        .get(&f.svc)
        .await
        .ctx(|| "get service".into())?;
    let v = app.pvs().get(&f.pv).await.ctx(|| "get pv".into())?;
    let c = app.pvcs().get(&f.pvc).await.ctx(|| "get pvc".into())?;
    Ok((
        finalizers(&s.metadata),
        finalizers(&v.metadata),
        finalizers(&c.metadata),
    ))
}

/// The manager's successful writes to the app namespace and its PVs since
/// `since` (sim mode; None in cluster mode).
fn writes_to_app(app: &App<'_>, rel: &ManagerRelease, since: u64, pv: &str) -> Option<Vec<String>> {
    app.h.writes_by(&rel.user(), since).map(|w| {
        w.into_iter()
            .filter(|l| l.contains(&format!(" {}/", app.ns)) || l.ends_with(&format!("/{pv}")))
            .filter(|l| !l.contains("events"))
            .collect()
    })
}

/// Deletes an LB Service and checks its load balancer is gone too.
async fn delete_lb_service(app: &App<'_>, name: &str) -> Result<()> {
    let uid = app
        .services()
        .get(name)
        .await
        .ctx(|| format!("get {name}"))?
        .uid()
        .unwrap_or_default();
    app.delete("service", name, false, &[]).await?;
    app.wait_gone(&app.services(), name).await?;
    wait::until_true(
        &format!("the load balancer of {name} is deleted"),
        app.timeout(),
        || async { Ok(app.h.cloud.get(&uid).await?.is_none()) },
        || async { format!("cloud-sim still has the load balancer of {name} ({uid})") },
    )
    .await
}

/// A new LB Service gets a load balancer (and, when `finalizer`, the
/// cleanup finalizer); deleting it deletes the load balancer.
async fn lb_round_trip(app: &App<'_>, name: &str, finalizer: bool) -> Result<()> {
    app.create(&objects::lb_service(&app.h.run, name, LB_CLASS))
        .await?;
    let s = app
        .wait_for(&app.services(), name, "has an ingress", |s: &Service| {
            !ingress(s).is_empty()
        })
        .await?;
    if finalizer {
        app.wait_for(
            &app.services(),
            name,
            "has the cleanup finalizer",
            |s: &Service| has_finalizer(&s.metadata, LB_FINALIZER),
        )
        .await?;
    } else {
        ensure!(
            !has_finalizer(&s.metadata, LB_FINALIZER),
            "{name} got the cleanup finalizer with the add gate off: {:?}",
            s.finalizers()
        );
    }
    delete_lb_service(app, name).await
}

/// A new unused claim is deleted (and, when `finalizer`, got the
/// finalizer first).
async fn pvc_round_trip(app: &App<'_>, name: &str, finalizer: bool) -> Result<()> {
    app.create(&objects::dynamic_pvc(&app.h.run, name)).await?;
    if finalizer {
        app.wait_for(
            &app.pvcs(),
            name,
            "has the pvc-protection finalizer",
            |c: &PersistentVolumeClaim| has_finalizer(&c.metadata, PVC_FINALIZER),
        )
        .await?;
    }
    app.delete("pvc", name, false, &[]).await?;
    app.wait_gone(&app.pvcs(), name).await
}

/// The chart's create-time policy at this phase: with `on`, the release's
/// two policies exist and a new claim carries the pvc-protection finalizer
/// in the create response itself (no manager write); without, there is no
/// policy and a new claim has no finalizer when created. The claim is then
/// deleted. In cluster mode without the MutatingAdmissionPolicy API the
/// policy cannot exist: said, and only the "off" half is checked.
async fn create_time(app: &App<'_>, rel: &ManagerRelease, on: bool, claim: &str) -> Result<String> {
    let h = app.h;
    let policies = rel.create_time_policies().await?;
    let want = vec![
        format!("{}-pv-protection", rel.fullname),
        format!("{}-pvc-protection", rel.fullname),
    ];
    let on = if on && policies.is_empty() && !h.is_sim() {
        h.skip_in_cluster(
            "the create-time policy (the cluster serves no MutatingAdmissionPolicy API)",
        );
        false
    } else {
        on
    };
    if on {
        ensure!(
            policies == want,
            "create-time policies: want {want:?}, have {policies:?}"
        );
    } else {
        ensure!(
            policies.is_empty(),
            "no create-time policy expected, have {policies:?}"
        );
    }
    let obj: PersistentVolumeClaim = serde_json::from_value(objects::dynamic_pvc(&h.run, claim))
        .map_err(|e| crate::Error::Check(format!("claim json: {e}")))?;
    let created = app
        .pvcs()
        .create(&Default::default(), &obj)
        .await
        .ctx(|| format!("create pvc {claim}"))?;
    let f = finalizers(&created.metadata);
    if on {
        ensure!(
            f == [PVC_FINALIZER.to_string()],
            "the claim {claim} was created without the finalizer under the create-time policy: {f:?}"
        );
    } else {
        ensure!(
            f.is_empty(),
            "the claim {claim} got {f:?} at creation with no policy"
        );
    }
    app.delete("pvc", claim, false, &[]).await?;
    app.wait_gone(&app.pvcs(), claim).await?;
    Ok(if on {
        format!(
            "create-time policies {}: a new claim carried {PVC_FINALIZER} in the create response",
            policies.join(", ")
        )
    } else {
        "no create-time policy: a new claim had no finalizer when created".to_string()
    })
}

/// The phase walk 0.0 → 0.1 → 0.2 → (rollback) 0.1 → 0.2 → 0.3, with the
/// KEP's checks at each step, then the locked gate at 0.3.
pub async fn phases(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    // --- 0.0: no controllers.
    rel.install(&["replicaCount=2", "emulatedVersion=0.0"], true)
        .await?;
    rel.wait_running_as("0.0").await?;
    h.verified(format!(
        "helm install at emulatedVersion=0.0, 2 replicas: rolled out, release record says 0.0 ({})",
        rel.helm.version
    ));
    let f = fixture(app).await?;
    let since = h.request_seq();
    wait::holds_for(
        "nothing gets a finalizer or a load balancer at 0.0",
        SETTLE,
        || async {
            let (s, v, c) = fixture_finalizers(app, &f).await?;
            let lb = h.cloud.get(&f.svc_uid).await?;
            Ok(
                if s.is_empty() && v.is_empty() && c.is_empty() && lb.is_none() {
                    Ok(())
                } else {
                    Err(format!(
                        "service {s:?} pv {v:?} pvc {c:?} load balancer {lb:?}"
                    ))
                },
            )
        },
    )
    .await?;
    h.verified(
        "0.0: an LB Service, a Bound PV/PVC and a pod using it: no finalizer, no load balancer",
    );

    // --- 0.0 → 0.1: remove-only release.
    let since01 = h.request_seq();
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.1"], true)
        .await?;
    rel.wait_running_as("0.1").await?;
    let s = app
        .wait_for(
            &app.services(),
            &f.svc,
            "has an ingress (0.1 manages load balancers)",
            |s: &Service| !ingress(s).is_empty(),
        )
        .await?;
    wait::holds_for("0.1 adds no finalizer", SETTLE, || async {
        let (s, v, c) = fixture_finalizers(app, &f).await?;
        Ok(if s.is_empty() && v.is_empty() && c.is_empty() {
            Ok(())
        } else {
            Err(format!("service {s:?} pv {v:?} pvc {c:?}"))
        })
    })
    .await?;
    if let Some(w) = writes_to_app(app, rel, since01, &f.pv) {
        ensure!(
            w.iter()
                .all(|l| l.starts_with("patch services/status")
                    && l.ends_with(&format!("/{}", f.svc))),
            "at 0.1 the manager should only have written the Service's status (its ingress), wrote {w:?}"
        );
        h.verified(format!(
            "0.1: the manager's only write to the user's objects was the ingress of {}: {w:?}",
            f.svc
        ));
    }
    h.verified(format!(
        "0.0 → 0.1 (helm upgrade): nothing added (no finalizer on the Service, PV or PVC); the load balancer {:?} was created",
        ingress(&s)
    ));
    lb_round_trip(app, "web-01", false).await?;
    pvc_round_trip(app, "scratch-01", false).await?;
    h.verified("0.1: nothing broken: a new LB Service gets a load balancer without finalizer and its deletion deletes it; an unused claim deletes at once");
    let said = create_time(app, rel, false, "created-01").await?;
    h.verified(format!("0.1 (gate off): {said}"));
    let _ = since;

    // --- 0.1 → 0.2: back-fill.
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.2"], true)
        .await?;
    rel.wait_running_as("0.2").await?;
    app.wait_for(
        &app.services(),
        &f.svc,
        "back-filled cleanup finalizer",
        |s: &Service| has_finalizer(&s.metadata, LB_FINALIZER),
    )
    .await?;
    app.wait_for(
        &app.pvs(),
        &f.pv,
        "back-filled pv-protection finalizer",
        |v: &PersistentVolume| has_finalizer(&v.metadata, PV_FINALIZER),
    )
    .await?;
    app.wait_for(
        &app.pvcs(),
        &f.pvc,
        "back-filled pvc-protection finalizer",
        |c: &PersistentVolumeClaim| has_finalizer(&c.metadata, PVC_FINALIZER),
    )
    .await?;
    h.verified("0.1 → 0.2 (helm upgrade): the pre-existing LB Service, PV and PVC got their finalizers (back-fill)");
    lb_round_trip(app, "web-02", true).await?;
    pvc_round_trip(app, "scratch-02", true).await?;
    h.verified("0.2: deletions still clean up: a new LB Service (finalizer, load balancer) and an unused claim (finalizer) are deleted completely");
    let said = create_time(app, rel, true, "created-02").await?;
    h.verified(format!(
        "0.2 (gate on): {said}; its deletion completed (the manager removed the finalizer)"
    ));

    // --- 0.2 → 0.1: rollback by one.
    let rev_01 = 2;
    let since21 = h.request_seq();
    let jobs_before = h.request_seq();
    let out = rel.rollback(rev_01, &["--wait"]).await?.ok()?;
    if let Some(reqs) = h.all_requests(jobs_before) {
        // helm 3 POSTs the hook; helm 4 applies it server-side (a PATCH
        // that creates it). Only helm writes Jobs here.
        let writes: Vec<String> = reqs
            .iter()
            .filter(|r| r.resource == "jobs" && matches!(r.verb.as_str(), "create" | "patch"))
            .map(|r| format!("{} {} -> {}", r.method, r.path, r.code))
            .collect();
        ensure!(
            reqs.iter().any(|r| r.resource == "jobs" && r.code == 201),
            "helm rollback should have created the pre-rollback hook Job: {writes:?} (of {} requests)",
            reqs.len()
        );
    }
    ensure!(
        out.contains("Rollback was a success"),
        "helm rollback: {out}"
    );
    rel.wait_running_as("0.1").await?;
    h.verified(format!("0.2 → 0.1 (helm rollback {rev_01}): the pre-rollback release check passed (one release back), rolled out"));
    wait::holds_for("0.1 keeps the finalizers 0.2 added", SETTLE, || async {
        let (s, v, c) = fixture_finalizers(app, &f).await?;
        Ok(
            if s.contains(&LB_FINALIZER.to_string())
                && v.contains(&PV_FINALIZER.to_string())
                && c.contains(&PVC_FINALIZER.to_string())
            {
                Ok(())
            } else {
                Err(format!("service {s:?} pv {v:?} pvc {c:?}"))
            },
        )
    })
    .await?;
    if let Some(w) = writes_to_app(app, rel, since21, &f.pv) {
        ensure!(
            w.is_empty(),
            "after the rollback to 0.1 the manager wrote the user's objects: {w:?}"
        );
    }
    h.verified("0.1 after the rollback: the Service, PV and PVC keep their finalizers (no write by the manager)");
    let said = create_time(app, rel, false, "created-03").await?;
    h.verified(format!(
        "0.1 after the rollback: the policy went with the gate; {said}"
    ));
    // Deletion still works at 0.1 on objects with finalizers.
    app.delete("pvc", &f.pvc, false, &[]).await?;
    wait::holds_for(
        "the claim in use stays Terminating at 0.1",
        SETTLE,
        || async {
            Ok(
                match app.pvcs().get_opt(&f.pvc).await.ctx(|| "get pvc".into())? {
                    Some(c)
                        if c.metadata.deletion_timestamp.is_some()
                            && has_finalizer(&c.metadata, PVC_FINALIZER) =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                },
            )
        },
    )
    .await?;
    app.delete("pod", &f.pod, true, &[]).await?;
    app.wait_gone(&app.pvcs(), &f.pvc).await?;
    app.delete("pv", &f.pv, false, &[]).await?;
    app.wait_gone(&app.pvs(), &f.pv).await?;
    delete_lb_service(app, &f.svc).await?;
    h.verified("0.1 after the rollback: the claim stayed protected while in use and went once its pod did; the Released PV and the LB Service (with its load balancer) were deleted");
    let left: Vec<_> = h
        .cloud
        .load_balancers()
        .await?
        .into_iter()
        .filter(|lb| lb.service.namespace == app.ns)
        .collect();
    ensure!(
        left.is_empty(),
        "orphaned load balancers after the downgrade: {left:?}"
    );
    h.verified("0.2 → 0.1: no orphaned load balancer, nothing stuck Terminating");

    // --- 0.1 → 0.2 → 0.3, then the locked gate.
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.2"], true)
        .await?;
    rel.wait_running_as("0.2").await?;
    // 0.3 and 0.4 pinned: the image's own release (0.5) is three away
    // from 0.2.
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.3"], true)
        .await?;
    rel.wait_running_as("0.3").await?;
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.4"], true)
        .await?;
    rel.wait_running_as("0.4").await?;
    rel.upgrade(&["replicaCount=2"], true).await?;
    let own = h.own_release()?;
    rel.wait_running_as(&own).await?;
    h.verified(format!(
        "0.1 → 0.2 → 0.3 → 0.4 → {own} (helm upgrade, one release at a time)"
    ));
    // Back by one and forward again: nothing the newest release added
    // stops the one before (its new gates are Alpha, off).
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.4"], true)
        .await?;
    rel.wait_running_as("0.4").await?;
    rel.upgrade(&["replicaCount=2"], true).await?;
    rel.wait_running_as(&own).await?;
    h.verified(format!(
        "{own} → 0.4 → {own} (helm upgrade, one release back and forward)"
    ));
    lb_round_trip(app, "web-03", true).await?;
    locked_gate(app, rel).await
}

/// At 0.3 `ServiceLoadBalancerFinalizer=false` is refused: by the chart
/// before anything is applied, and by the manager when the chart is
/// bypassed (the new pod crash-loops with the message; with two replicas
/// the old ones keep running).
pub async fn locked_gate(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    let before = rel.history().await?;
    let args = rel.deployment_args().await?;
    let err = rel
        .upgrade_refused(&[
            "replicaCount=2",
            "featureGates.ServiceLoadBalancerFinalizer=false",
        ])
        .await?;
    ensure!(
        err.contains(LOCKED_GATE),
        "helm upgrade should fail with {LOCKED_GATE:?}: {err}"
    );
    ensure!(
        rel.history().await? == before,
        "the refused upgrade changed the helm history"
    );
    ensure!(
        rel.deployment_args().await? == args,
        "the refused upgrade changed the Deployment"
    );
    h.verified(format!("0.3: helm upgrade --set featureGates.ServiceLoadBalancerFinalizer=false fails in helm with {LOCKED_GATE:?}; nothing applied"));

    // The chart bypassed (a flag through extraArgs): the manager refuses.
    let leader = rel.leader().await?;
    rel.upgrade(
        &[
            "replicaCount=2",
            "extraArgs={--feature-gates=ServiceLoadBalancerFinalizer=false}",
        ],
        false,
    )
    .await?;
    let log = wait::until(
        "a new manager pod logs the locked-gate refusal",
        h.timeout(Duration::from_secs(90)),
        || async {
            for p in rel.pods().await? {
                let args: Vec<String> = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
                    .and_then(|c| c.args.clone())
                    .unwrap_or_default();
                if !args
                    .iter()
                    .any(|a| a.contains("ServiceLoadBalancerFinalizer=false"))
                {
                    continue;
                }
                for previous in [false, true] {
                    if let Ok(l) = h.pod_log(&rel.namespace, &p.name_any(), previous).await
                        && l.contains(LOCKED_GATE)
                    {
                        return Ok(Some((p.name_any(), l)));
                    }
                }
            }
            Ok(None)
        },
        || rel.diagnostics(),
    )
    .await?;
    ensure!(
        !rel.rollout_complete().await?,
        "the rollout of a refused flag should not complete"
    );
    let after = rel.leader().await?;
    ensure!(
        leader.as_ref().map(|l| &l.1) == after.as_ref().map(|l| &l.1),
        "the leader changed while the new pod was refused: {leader:?} -> {after:?}"
    );
    h.verified(format!(
        "0.3: with the flag passed around the chart, pod {} refuses to start ({LOCKED_GATE:?} in its log); the rollout stalls and the old leader keeps the Lease",
        log.0
    ));
    let history = rel.history().await?;
    let good = history.iter().rev().nth(1).map(|r| r.revision).unwrap_or(1);
    rel.rollback(good, &["--wait"]).await?.ok()?;
    rel.wait_rollout().await?;
    h.verified(format!(
        "0.3: helm rollback {good} restores a complete rollout"
    ));
    Ok(())
}

/// With `E2E_OLD_BIN` / `E2E_NEW_BIN`: the chart installs the old build
/// (image tag [`OLD_TAG`]), upgrades to the new one ([`NEW_TAG`]) and rolls
/// back, each running as its own release (no `emulatedVersion`), so the
/// pre-upgrade / pre-rollback hooks run the real `release-check` of each
/// build.
pub async fn cross_build(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    let Some((old, new)) = h.cross_build.clone() else {
        return Err(crate::Error::Config(
            "E2E_OLD_BIN / E2E_NEW_BIN are not set".into(),
        ));
    };
    let old_info = crate::binaries::inspect(&old).await?;
    let new_info = crate::binaries::inspect(&new).await?;
    h.verified(format!(
        "old build {} (release {}), new build {} (release {})",
        old.display(),
        old_info.release,
        new.display(),
        new_info.release
    ));
    let adds = |r: &str| r.parse::<f64>().is_ok_and(|v| v >= 0.2);
    rel.install(&["replicaCount=2", &format!("image.tag={OLD_TAG}")], true)
        .await?;
    rel.wait_running_as(&old_info.release).await?;
    let f = fixture(app).await?;
    app.wait_for(&app.services(), &f.svc, "has an ingress", |s: &Service| {
        !ingress(s).is_empty()
    })
    .await?;
    h.verified(format!(
        "install of the old build: release {} recorded, the LB Service has its load balancer",
        old_info.release
    ));

    rel.upgrade(&["replicaCount=2", &format!("image.tag={NEW_TAG}")], true)
        .await?;
    rel.wait_running_as(&new_info.release).await?;
    if adds(&new_info.release) {
        app.wait_for(
            &app.services(),
            &f.svc,
            "cleanup finalizer",
            |s: &Service| has_finalizer(&s.metadata, LB_FINALIZER),
        )
        .await?;
        app.wait_for(
            &app.pvs(),
            &f.pv,
            "pv-protection finalizer",
            |v: &PersistentVolume| has_finalizer(&v.metadata, PV_FINALIZER),
        )
        .await?;
        app.wait_for(
            &app.pvcs(),
            &f.pvc,
            "pvc-protection finalizer",
            |c: &PersistentVolumeClaim| has_finalizer(&c.metadata, PVC_FINALIZER),
        )
        .await?;
        h.verified(format!("upgrade to the new build (release {}): the pre-existing objects carry their finalizers", new_info.release));
    }
    lb_round_trip(app, "web-new", adds(&new_info.release)).await?;
    pvc_round_trip(app, "scratch-new", adds(&new_info.release)).await?;
    h.verified("new build: deletions clean up");

    rel.rollback(1, &["--wait"]).await?.ok()?;
    rel.wait_running_as(&old_info.release).await?;
    app.delete("pod", &f.pod, true, &[]).await?;
    app.delete("pvc", &f.pvc, false, &[]).await?;
    app.wait_gone(&app.pvcs(), &f.pvc).await?;
    app.delete("pv", &f.pv, false, &[]).await?;
    app.wait_gone(&app.pvs(), &f.pv).await?;
    delete_lb_service(app, &f.svc).await?;
    h.verified(format!(
        "helm rollback to the old build (release {}): the claim, the volume and the LB Service (with its load balancer) are deleted; nothing stuck",
        old_info.release
    ));
    Ok(())
}

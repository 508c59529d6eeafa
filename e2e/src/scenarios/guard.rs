//! 0.2 → 0.0, the skip by two the KEP calls unsupported: first the hazard
//! (with the guard overridden, objects are stuck Terminating with nobody to
//! remove the finalizer), then the guard (without the override, the chart
//! refuses the upgrade before applying anything, the pre-rollback hook
//! refuses a rollback, and a manager started anyway refuses to run).

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::ensure;
use crate::error::{KubeContext, Result};
use crate::objects;
use crate::release::{CONTAINER, LB_CLASS, ManagerRelease};
use crate::scenarios::{App, LB_FINALIZER, PVC_FINALIZER, has_finalizer, ingress};
use crate::wait;

/// How long the stuck objects are watched. The 0.0 manager runs no
/// controller at all (its start-up log lists none, and in sim mode the
/// request log shows it never even lists Services or claims), so nothing
/// can ever remove the finalizers; this window only makes the point
/// visible.
const STUCK_FOR: Duration = Duration::from_secs(5);

/// An image tag the chart does not know the release of (the sim kubelet
/// runs every tag of the manager's repository as the binary).
const UNKNOWN_TAG: &str = "e2e-unknown";

/// The start of the guard's message for `running` after `recorded`.
pub fn refusal(running: &str, recorded: &str) -> String {
    format!(
        "refusing to run as release {running}: this cluster last ran protection-manager as release {recorded}"
    )
}

/// The hazard: 0.2 → 0.0 with `releaseGuard.skipCheck=true`.
pub async fn hazard(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    rel.install(&["emulatedVersion=0.2"], true).await?;
    rel.wait_running_as("0.2").await?;
    app.create(&objects::lb_service(&app.h.run, "shop", LB_CLASS))
        .await?;
    app.create(&objects::dynamic_pvc(&app.h.run, "cache"))
        .await?;
    let svc = app
        .wait_for(
            &app.services(),
            "shop",
            "finalizer and ingress",
            |s: &Service| has_finalizer(&s.metadata, LB_FINALIZER) && !ingress(s).is_empty(),
        )
        .await?;
    let uid = svc.uid().unwrap_or_default();
    app.wait_for(
        &app.pvcs(),
        "cache",
        "has the pvc-protection finalizer",
        |c: &PersistentVolumeClaim| has_finalizer(&c.metadata, PVC_FINALIZER),
    )
    .await?;
    h.verified("0.2: an LB Service and an unused claim carry their finalizers");

    let since = h.request_seq();
    rel.upgrade(
        &["emulatedVersion=0.0", "releaseGuard.skipCheck=true"],
        true,
    )
    .await?;
    rel.wait_running_as("0.0").await?;
    let logs = rel.logs(h, false).await?;
    ensure!(
        logs.contains("release check skipped (--skip-release-check)")
            && logs.contains(&refusal("0.0", "0.2")),
        "the 0.0 manager should log that it skipped the release check:\n{logs}"
    );
    h.verified("0.2 → 0.0 with releaseGuard.skipCheck=true: the chart let it through, the manager logged the skipped check and recorded 0.0");
    app.delete("service", "shop", false, &[]).await?;
    app.delete("pvc", "cache", false, &[]).await?;
    wait::holds_for(
        "the Service and the claim stay Terminating",
        STUCK_FOR,
        || async {
            let s = app
                .services()
                .get_opt("shop")
                .await
                .ctx(|| "get service".into())?;
            let c = app.pvcs().get_opt("cache").await.ctx(|| "get pvc".into())?;
            Ok(match (s, c) {
                (Some(s), Some(c))
                    if s.metadata.deletion_timestamp.is_some()
                        && c.metadata.deletion_timestamp.is_some()
                        && has_finalizer(&s.metadata, LB_FINALIZER)
                        && has_finalizer(&c.metadata, PVC_FINALIZER) =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            })
        },
    )
    .await?;
    ensure!(
        h.cloud.get(&uid).await?.is_some(),
        "the load balancer of shop went away at 0.0"
    );
    if let Some(reqs) = h.requests(&rel.user(), since) {
        ensure!(
            !reqs.is_empty(),
            "no request of {} recorded since the 0.0 upgrade: the request log does not attribute the manager",
            rel.user()
        );
        let touched: Vec<String> = reqs
            .iter()
            .filter(|r| {
                matches!(
                    r.resource.as_str(),
                    "services" | "persistentvolumeclaims" | "persistentvolumes" | "pods"
                )
            })
            .map(|r| format!("{} {} {}", r.verb, r.resource, r.path))
            .collect();
        ensure!(
            touched.is_empty(),
            "the 0.0 manager should not even watch the protected kinds: {touched:?}"
        );
        h.verified("0.0: the manager makes no request at all on Services, claims, volumes or pods (no controller to remove a finalizer)");
    }
    h.verified(format!(
        "hazard reproduced: after the skip, the deleted Service and claim stay Terminating for {}s with their finalizers, and the load balancer stays in cloud-sim",
        STUCK_FOR.as_secs()
    ));

    // The way out is the release in between: 0.1 removes what 0.2 added.
    rel.upgrade(&["emulatedVersion=0.1"], true).await?;
    rel.wait_running_as("0.1").await?;
    app.wait_gone(&app.services(), "shop").await?;
    app.wait_gone(&app.pvcs(), "cache").await?;
    ensure!(
        h.cloud.get(&uid).await?.is_none(),
        "the load balancer of shop outlived the Service"
    );
    h.verified("recovery: upgrading one release to 0.1 (the remove-only release) released the stuck Service (load balancer deleted) and claim");
    Ok(())
}

/// The hook Job's log, if it exists.
pub(crate) async fn hook_log(app: &App<'_>, rel: &ManagerRelease) -> Result<String> {
    let job_name = format!("{}-release-check", rel.fullname);
    let job = Api::<Job>::namespaced(app.h.client.clone(), &rel.namespace)
        .get_opt(&job_name)
        .await
        .ctx(|| format!("getting job {job_name}"))?;
    ensure!(
        job.is_some(),
        "the failed hook Job {job_name} should be kept for its log"
    );
    let pods = Api::<Pod>::namespaced(app.h.client.clone(), &rel.namespace)
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await
        .ctx(|| "listing the hook's pods".into())?;
    let mut out = String::new();
    for p in pods.items {
        out.push_str(
            &app.h
                .pod_log(&rel.namespace, &p.name_any(), false)
                .await
                .unwrap_or_default(),
        );
    }
    Ok(out)
}

/// The guard, without the override.
pub async fn guard(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    rel.install(&["replicaCount=2", "emulatedVersion=0.2"], true)
        .await?;
    rel.wait_running_as("0.2").await?;
    h.verified("install at 0.2 with 2 replicas (leader election): release record says 0.2");

    // (a) The chart refuses the upgrade before applying anything.
    let history = rel.history().await?;
    let args = rel.deployment_args().await?;
    let err = rel
        .upgrade_refused(&["replicaCount=2", "emulatedVersion=0.0"])
        .await?;
    ensure!(
        err.contains(&refusal("0.0", "0.2"))
            && err.contains("Move one release at a time (0.2 → 0.1 → 0.0)"),
        "helm upgrade to 0.0 should fail with the guard's message: {err}"
    );
    ensure!(
        rel.history().await? == history,
        "the refused upgrade added a revision"
    );
    ensure!(
        rel.deployment_args().await? == args,
        "the refused upgrade changed the Deployment"
    );
    h.verified("0.2 → 0.0 by helm upgrade: refused at render time with the manager's message (\"Move one release at a time (0.2 → 0.1 → 0.0)\"); no revision, no change");

    // (b) The manager refuses to start when the chart is bypassed.
    let leader = rel.leader().await?;
    let index = args
        .iter()
        .position(|a| a.starts_with("--emulated-version="))
        .unwrap_or_default();
    let patch = json!([{"op": "replace", "path": format!("/spec/template/spec/containers/0/args/{index}"), "value": "--emulated-version=0.0"}]).to_string();
    app.kubectl
        .ok(&[
            "--namespace",
            &rel.namespace,
            "patch",
            "deployment",
            &rel.fullname,
            "--type=json",
            "-p",
            &patch,
        ])
        .await?;
    let (pod, _) = wait::until(
        "a 0.0 manager pod logs the guard's refusal",
        h.timeout(Duration::from_secs(90)),
        || async {
            for p in rel.pods().await? {
                let is_00 = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
                    .and_then(|c| c.args.as_ref())
                    .is_some_and(|a| a.iter().any(|a| a == "--emulated-version=0.0"));
                if !is_00 {
                    continue;
                }
                for previous in [false, true] {
                    if let Ok(l) = h.pod_log(&rel.namespace, &p.name_any(), previous).await
                        && l.contains(&refusal("0.0", "0.2"))
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
    let p = Api::<Pod>::namespaced(h.client.clone(), &rel.namespace)
        .get(&pod)
        .await
        .ctx(|| format!("get pod {pod}"))?;
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    ensure!(!ready, "the refusing pod {pod} is Ready");
    ensure!(
        rel.leader().await?.map(|l| l.1) == leader.as_ref().map(|l| l.1.clone()),
        "the 0.2 leader lost the Lease while the 0.0 pod was refused"
    );
    ensure!(
        rel.recorded_release().await?.as_deref() == Some("0.2"),
        "the record changed"
    );
    h.verified(format!(
        "0.2 → 0.0 with the chart bypassed (kubectl patch of the args): pod {pod} refuses to start with the guard's message in its log and is not Ready; the 0.2 pods keep the Lease and the record"
    ));
    let rev = history.last().map(|r| r.revision).unwrap_or(1);
    rel.rollback(rev, &["--wait"]).await?.ok()?;
    rel.wait_running_as("0.2").await?;
    h.verified(format!(
        "helm rollback {rev} restored the 0.2 Deployment (pre-rollback check passed: same release)"
    ));

    // (c) Down one release at a time, then a rollback that skips two.
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.1"], true)
        .await?;
    rel.wait_running_as("0.1").await?;
    rel.upgrade(&["replicaCount=2", "emulatedVersion=0.0"], true)
        .await?;
    rel.wait_running_as("0.0").await?;
    h.verified("0.2 → 0.1 → 0.0 one release at a time: both upgrades pass the checks");
    let history = rel.history().await?;
    let args = rel.deployment_args().await?;
    let ran = rel.rollback(1, &[]).await?;
    let err = ran.refused()?;
    let job = format!("{}-release-check", rel.fullname);
    ensure!(
        err.contains(&job),
        "helm rollback 1 should fail in its pre-rollback hook Job {job}: {err}"
    );
    let log = hook_log(app, rel).await?;
    ensure!(
        log.contains(&refusal("0.2", "0.0")),
        "the hook's log should carry the guard's message:\n{log}"
    );
    ensure!(
        rel.deployment_args().await? == args,
        "the refused rollback changed the Deployment"
    );
    ensure!(
        rel.recorded_release().await?.as_deref() == Some("0.0"),
        "the record changed"
    );
    let after = rel.history().await?;
    h.verified(format!(
        "0.0 → 0.2 by helm rollback 1: refused by the pre-rollback hook (helm: {:?}; the Job's log: {:?}); the Deployment is unchanged; helm history: {:?}",
        err.trim().lines().last().unwrap_or_default().trim(),
        log.lines().find(|l| l.contains("refusing")).unwrap_or_default().chars().take(120).collect::<String>(),
        after.iter().skip(history.len()).map(|r| format!("{} {} {}", r.revision, r.status, r.description)).collect::<Vec<_>>()
    ));
    // helm (3.18 and 4.1 alike) leaves the refused rollback's revision
    // pending-rollback, which blocks the next upgrade ("another operation
    // is in progress"); rolling back to the deployed revision clears it.
    let pending = after
        .last()
        .filter(|r| r.status == "pending-rollback")
        .map(|r| r.revision);
    if pending.is_some() {
        let deployed = history
            .iter()
            .rev()
            .find(|r| r.status == "deployed")
            .map(|r| r.revision)
            .unwrap_or(1);
        rel.rollback(deployed, &["--wait"]).await?.ok()?;
        rel.wait_running_as("0.0").await?;
        h.verified(format!(
            "helm left revision {} pending-rollback; helm rollback {deployed} (the deployed revision, same release) cleared it",
            pending.unwrap_or_default()
        ));
    }

    // (d) The pre-upgrade hook: a new image whose release the chart cannot
    // know (where the nodes run any tag of the image as the binary: kube-sim,
    // the process kubelet).
    if !h.runs_any_image_tag()
        && h.skip_in_cluster(
            "the pre-upgrade hook with another image tag (needs a second tag of the image)",
        )
    {
        return Ok(());
    }
    let err = rel
        .upgrade_refused(&["replicaCount=2", &format!("image.tag={UNKNOWN_TAG}")])
        .await?;
    ensure!(
        err.contains(&job),
        "helm upgrade to another tag should fail in its pre-upgrade hook Job {job}: {err}"
    );
    let log = hook_log(app, rel).await?;
    let own = h.own_release()?;
    ensure!(
        log.contains(&refusal(&own, "0.0")),
        "the hook's log should carry the guard's message:\n{log}"
    );
    ensure!(
        rel.deployment_args().await? == args,
        "the refused upgrade changed the Deployment"
    );
    h.verified(format!(
        "0.0 → {own} by helm upgrade --set image.tag={UNKNOWN_TAG} (a release the chart cannot know): refused by the pre-upgrade hook; the Deployment is unchanged"
    ));
    Ok(())
}

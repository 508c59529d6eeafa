//! `helm uninstall` leaves nothing stuck (issue 26 item 5): the chart's
//! pre-delete hook runs `protection-manager strip-finalizers --all`.
//!
//! Held and free claims, a claim being deleted while a pod uses it, a
//! LoadBalancer Service, VolumeAttributesClasses (one a claim uses, one
//! free; where the cluster serves them) and a Secret a ProtectionRule
//! holds: the first
//! uninstall is refused naming the claim in use and its pod, and changes
//! nothing (the manager keeps running and holding); once the pod is gone
//! the manager releases the claim and the same uninstall finishes, leaving
//! no `protection-manager.io/*` finalizer on anything and deleting nothing
//! that was in use.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ObjectMeta;
use serde_json::json;

use crate::ensure;
use crate::error::{KubeContext, Result};
use crate::objects::{self, RUN_LABEL, dynamic_pvc, lb_service, pod_with_claims};
use crate::release::{LB_CLASS, ManagerRelease};
use crate::scenarios::rules::{RULE, rules};
use crate::scenarios::vac::{self, VAC_FINALIZER, vacs};
use crate::scenarios::{App, LB_FINALIZER, PVC_FINALIZER, finalizers, has_finalizer, ingress};

/// The values the scenario installs with: the rules controller and the
/// chart's example rule on (its finalizer outside protection-manager.io,
/// which rules may no longer use), and a short hook wait.
pub const SETS: &[&str] = &[
    "featureGates.InUseProtectionRules=true",
    vac::GATE_ON,
    "rules.examples.secretsUsedByPods=true",
    "rules.exampleFinalizerDomain=example.com",
    "uninstall.hook.wait=5s",
];

/// The example rule's finalizer under [`SETS`].
const SECRET_FINALIZER: &str = "example.com/secret-in-use";

fn ours(meta: &ObjectMeta) -> Vec<String> {
    finalizers(meta)
        .into_iter()
        .filter(|f| f.starts_with("protection-manager.io/"))
        .collect()
}

pub async fn leaves_nothing_stuck(app: &App<'_>, rel: &ManagerRelease) -> Result<()> {
    let h = app.h;
    let run = &h.run;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &app.ns);
    for c in ["held", "free", "going"] {
        app.create(&dynamic_pvc(run, c)).await?;
    }
    app.create(&pod_with_claims(run, "db", &h.pod_image, &["held"]))
        .await?;
    app.create(&pod_with_claims(run, "busy", &h.pod_image, &["going"]))
        .await?;
    app.create(&lb_service(run, "web", LB_CLASS)).await?;
    app.create(&json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "mounted", "labels": {RUN_LABEL: run}},
        "stringData": {"token": "t"}
    }))
    .await?;
    app.create(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "user", "labels": {RUN_LABEL: run}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": h.pod_image,
                            "volumeMounts": [{"name": "s", "mountPath": "/etc/s"}]}],
            "volumes": [{"name": "s", "secret": {"secretName": "mounted"}}]
        }
    }))
    .await?;
    // Classes: one a (Pending) claim names, one nothing uses.
    let classes = if vac::served(app).await? {
        let classes = [format!("{run}-used"), format!("{run}-spare")];
        for c in &classes {
            app.create(&objects::vac(run, c)).await?;
        }
        app.create(&objects::pending_pvc_with_vac(
            run,
            "tiered",
            Some(&classes[0]),
        ))
        .await?;
        for c in &classes {
            app.wait_for(&vacs(app), c, "carries vac-protection", |v| {
                has_finalizer(&v.metadata, VAC_FINALIZER)
            })
            .await?;
        }
        classes.to_vec()
    } else {
        h.skip_in_cluster("VolumeAttributesClasses in the uninstall (the cluster serves no storage.k8s.io/v1 VolumeAttributesClass)");
        Vec::new()
    };
    for p in ["db", "busy", "user"] {
        app.wait_running(p).await?;
    }
    for c in ["held", "free", "going"] {
        app.wait_for(&app.pvcs(), c, "carries pvc-protection", |p| {
            has_finalizer(&p.metadata, PVC_FINALIZER)
        })
        .await?;
    }
    app.wait_for(&app.services(), "web", "has its load balancer", |s| {
        has_finalizer(&s.metadata, LB_FINALIZER) && !ingress(s).is_empty()
    })
    .await?;
    app.wait_for(&secrets, "mounted", "carries the rule's finalizer", |s| {
        has_finalizer(&s.metadata, SECRET_FINALIZER)
    })
    .await?;
    app.delete("pvc", "going", false, &[]).await?;
    app.wait_for(&app.pvcs(), "going", "Terminating", |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await?;
    h.verified(format!("uninstall: claims held (pod db), free, and Terminating while pod busy uses it; a LoadBalancer Service; a Secret the example rule holds; classes {classes:?} (the first used by claim tiered)"));

    // The first uninstall is refused: the claim being deleted is in use.
    let uninstall = [
        "uninstall",
        rel.name.as_str(),
        "--namespace",
        rel.namespace.as_str(),
        "--timeout",
        "120s",
    ];
    let refused = rel.helm.run(&uninstall).await?.refused()?;
    let job = format!("job/{}-uninstall", rel.fullname);
    let logs = app
        .kubectl
        .run(&["--namespace", &rel.namespace, "logs", &job])
        .await?;
    let logs = format!("{}{}", logs.stdout, logs.stderr);
    ensure!(
        logs.contains(&format!(
            "persistentvolumeclaims/{}/going (being deleted)",
            app.ns
        )) && logs.contains("busy")
            && logs.contains("Nothing was removed"),
        "the hook's log names the claim in use and its pod; helm said:\n{refused}\nhook log:\n{logs}"
    );
    let d: Option<Deployment> = Api::<Deployment>::namespaced(h.client.clone(), &rel.namespace)
        .get_opt(&rel.fullname)
        .await
        .ctx(|| "getting the manager's Deployment".to_string())?;
    ensure!(
        d.as_ref()
            .and_then(|d| d.spec.as_ref())
            .and_then(|s| s.replicas)
            .unwrap_or(1)
            > 0,
        "the refused uninstall left the manager running: {d:?}"
    );
    let rule = rules(app)
        .get_opt(RULE)
        .await
        .ctx(|| "getting the rule".to_string())?;
    ensure!(rule.is_some(), "the refused uninstall deleted no rule");
    let held = app
        .pvcs()
        .get("held")
        .await
        .ctx(|| "getting held".to_string())?;
    ensure!(
        has_finalizer(&held.metadata, PVC_FINALIZER),
        "the refused uninstall removed nothing: {:?}",
        finalizers(&held.metadata)
    );
    h.verified(format!(
        "uninstall refused while a claim being deleted is in use, changing nothing; the hook's log: {}",
        logs.lines()
            .find(|l| l.contains("going"))
            .unwrap_or_default()
            .trim()
    ));

    // The user goes; the manager releases the claim; the uninstall finishes.
    app.delete("pod", "busy", true, &[]).await?;
    app.wait_gone(&app.pvcs(), "going").await?;
    let done = rel.helm.run(&uninstall).await?;
    if !done.success {
        let logs = app
            .kubectl
            .run(&["--namespace", &rel.namespace, "logs", &job])
            .await?;
        return Err(crate::Error::Check(format!(
            "the uninstall after the pod went failed:\n{}{}\nthe hook's log:\n{}{}",
            done.stdout, done.stderr, logs.stdout, logs.stderr
        )));
    }
    let left = Api::<Deployment>::namespaced(h.client.clone(), &rel.namespace)
        .get_opt(&rel.fullname)
        .await
        .ctx(|| "getting the manager's Deployment".to_string())?;
    ensure!(left.is_none(), "the Deployment survived the uninstall");
    ensure!(
        rules(app)
            .get_opt(RULE)
            .await
            .ctx(|| "getting the rule".to_string())?
            .is_none(),
        "the rule survived the uninstall"
    );
    for c in ["held", "free"] {
        let p = app.pvcs().get(c).await.ctx(|| format!("getting {c}"))?;
        ensure!(
            p.metadata.deletion_timestamp.is_none() && ours(&p.metadata).is_empty(),
            "claim {c} after the uninstall: {:?}",
            p.metadata
        );
        if let Some(v) = p.spec.as_ref().and_then(|s| s.volume_name.clone()) {
            let pv = app.pvs().get(&v).await.ctx(|| format!("getting pv {v}"))?;
            ensure!(
                ours(&pv.metadata).is_empty(),
                "volume {v} of claim {c} after the uninstall: {:?}",
                finalizers(&pv.metadata)
            );
        }
    }
    let svc = app
        .services()
        .get("web")
        .await
        .ctx(|| "getting web".to_string())?;
    ensure!(
        ours(&svc.metadata).is_empty(),
        "Service web after the uninstall: {:?}",
        finalizers(&svc.metadata)
    );
    let s = secrets
        .get("mounted")
        .await
        .ctx(|| "getting mounted".to_string())?;
    ensure!(
        s.metadata.deletion_timestamp.is_none()
            && ours(&s.metadata).is_empty()
            && !has_finalizer(&s.metadata, SECRET_FINALIZER),
        "Secret mounted after the uninstall: {:?}",
        s.metadata
    );
    for c in &classes {
        let v = vacs(app)
            .get(c)
            .await
            .ctx(|| format!("getting class {c}"))?;
        ensure!(
            v.metadata.deletion_timestamp.is_none() && ours(&v.metadata).is_empty(),
            "class {c} after the uninstall: {:?}",
            v.metadata
        );
    }
    h.verified("uninstall with hooks: the rule deleted and cleared by the manager, the manager stopped, no protection-manager.io/* finalizer left on claims, volumes, the Service, the classes or the Secret; nothing in use was deleted");
    Ok(())
}

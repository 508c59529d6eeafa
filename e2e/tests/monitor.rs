//! The invariant checks can fail: a claim deleted while a scheduled pod uses
//! it (its finalizers stripped by hand) and a load balancer left behind by
//! a Service whose cleanup finalizer was stripped are both reported, with
//! their evidence, by the same monitor the other scenarios run under. No
//! manager is installed: these are the failures it must prevent.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::ResourceExt;
use protection_e2e::harness::{Harness, HarnessOptions};
use protection_e2e::invariants::Invariant;
use protection_e2e::monitor::{Monitor, MonitorSettings};
use protection_e2e::objects;
use protection_e2e::release::LB_CLASS;
use protection_e2e::scenarios::{App, LB_FINALIZER, PVC_FINALIZER, pvc_phase};
use protection_e2e::{Error, Result};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

const STRIP: &str = r#"[{"op":"replace","path":"/metadata/finalizers","value":[]}]"#;

async fn violations_are_caught(h: &Harness) -> Result<()> {
    let app = App::new(h, "app").await?;
    let monitor = Monitor::start(
        h,
        MonitorSettings::namespaces(std::slice::from_ref(&app.ns)),
    )
    .await?;

    // A protected claim in use, stripped and deleted by hand.
    let mut claim = objects::dynamic_pvc(&h.run, "victim");
    claim["metadata"]["finalizers"] = serde_json::json!([PVC_FINALIZER]);
    app.create(&claim).await?;
    app.create(&objects::pod_with_claims(
        &h.run,
        "user",
        &h.pod_image,
        &["victim"],
    ))
    .await?;
    app.wait_running("user").await?;
    app.wait_for(
        &app.pvcs(),
        "victim",
        "phase Bound",
        |c: &PersistentVolumeClaim| pvc_phase(c) == "Bound",
    )
    .await?;
    // Deleted first, stripped then: on a real cluster kube-controller-
    // manager's pvc-protection would put its finalizer back on a claim that
    // is not being deleted.
    app.delete("pvc", "victim", false, &[]).await?;
    app.kubectl
        .ok(&[
            "--namespace",
            &app.ns,
            "patch",
            "pvc",
            "victim",
            "--type=json",
            "-p",
            STRIP,
        ])
        .await?;
    app.wait_gone(&app.pvcs(), "victim").await?;

    // A guarded LB Service with a load balancer, stripped and deleted.
    let mut svc = objects::lb_service(&h.run, "leaky", LB_CLASS);
    svc["metadata"]["finalizers"] = serde_json::json!([LB_FINALIZER]);
    app.create(&svc).await?;
    let s: Service = app
        .services()
        .get("leaky")
        .await
        .map_err(|e| Error::Check(e.to_string()))?;
    let uid = s.uid().unwrap_or_default();
    h.cloud
        .create_load_balancer(h.cloud_token.as_deref(), &uid, &app.ns, "leaky")
        .await?;
    app.kubectl
        .ok(&[
            "--namespace",
            &app.ns,
            "patch",
            "service",
            "leaky",
            "--type=json",
            "-p",
            STRIP,
        ])
        .await?;
    app.delete("service", "leaky", true, &[]).await?;

    let report = monitor.finish().await?;
    let mut kinds: Vec<Invariant> = report.violations.iter().map(|v| v.invariant).collect();
    kinds.sort();
    if kinds
        != vec![
            Invariant::ClaimDeletedWhileInUse,
            Invariant::OrphanedLoadBalancer,
        ]
    {
        return Err(Error::Check(format!(
            "want exactly one claim and one load-balancer violation, got {:#?}",
            report.violations
        )));
    }
    for v in &report.violations {
        println!("  caught: {v}");
    }
    let text = report
        .violations
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    if !(text.contains("victim")
        && text.contains("pod")
        && text.contains("user")
        && text.contains(&uid))
    {
        return Err(Error::Check(format!(
            "the evidence should name the claim, its pod and the Service UID: {text}"
        )));
    }
    h.verified("the monitor reports a claim deleted while its pod runs and a load balancer that outlived its Service, with the evidence");
    Ok(())
}

#[test]
fn the_invariant_checks_catch_what_they_guard_against() {
    runtime().block_on(async {
        let h = Harness::start(HarnessOptions::new("negative"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r = violations_are_caught(&h).await;
        h.finish().await;
        r.unwrap_or_else(|e| panic!("{e}"));
    });
}

//! The ported upstream e2e scenarios (PVC protection, PV protection, the
//! load-balancer cleanup finalizer) against the manager installed by the
//! chart with helm 4, with the invariants checked throughout. Runs on
//! kube-sim, or on the cluster named by E2E_KUBECONFIG.

use protection_e2e::Result;
use protection_e2e::harness::{Harness, HarnessOptions};
use protection_e2e::monitor::{Monitor, MonitorSettings};
use protection_e2e::release::ManagerRelease;
use protection_e2e::scenarios::{App, lifecycle, uninstall, vac};
use protection_e2e::tools::HelmVersion;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Installs the manager (its own release, one replica), starts the
/// monitor, runs `scenario`, and fails on any error or violation.
async fn with_manager<F>(name: &str, sets: &[&str], scenario: F) -> Result<()>
where
    F: for<'a> AsyncFnOnce(&'a App<'a>, &'a ManagerRelease) -> Result<()>,
{
    let h = Harness::start(HarnessOptions::new(name)).await?;
    println!("== {name}: {} mode, run {}", h.mode.name(), h.run);
    let result = async {
        let helm = h.helm(HelmVersion::V4).await?;
        let rel = ManagerRelease::prepare(&h, helm, "pm", "system").await?;
        rel.install(sets, true).await?;
        let own = h.own_release()?;
        rel.wait_running_as(&own).await?;
        h.verified(format!("helm install (helm 4): the manager rolled out and recorded release {own}"));
        let app = App::new(&h, "app").await?;
        // The class invariant where vac-protection's gate is on and the
        // cluster serves the API.
        let classes = sets.contains(&vac::GATE_ON) && vac::served(&app).await?;
        let monitor = Monitor::start(
            &h,
            MonitorSettings {
                classes,
                ..MonitorSettings::namespaces(std::slice::from_ref(&app.ns))
            },
        )
        .await?;
        let r = scenario(&app, &rel).await;
        if let Err(e) = &r {
            println!("manager state:\n{}", rel.diagnostics().await);
            println!("manager logs:\n{}", rel.logs(&h, true).await.unwrap_or_default());
            return Err(protection_e2e::Error::Check(format!("{e}")));
        }
        let report = monitor.finish().await?;
        for l in report.counts.lines() {
            println!("  invariants: {l}");
        }
        report.ok()?;
        h.verified(format!(
            "invariants held throughout: {} PVC, {} PV and {} VolumeAttributesClass deletions checked, {} Service deletions checked against cloud-sim",
            report.counts.pvc_deletions_checked, report.counts.pv_deletions_checked, report.counts.vac_deletions_checked, report.counts.service_deletions_checked
        ));
        Ok(())
    }
    .await;
    h.finish().await;
    result
}

#[test]
fn storage_protection_pvc_and_pv() {
    runtime().block_on(async {
        with_manager("storage", &[], async |app, rel| {
            lifecycle::pvc_protection(app, rel).await?;
            lifecycle::pv_protection(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
fn load_balancer_cleanup_finalizer() {
    runtime().block_on(async {
        with_manager("lb", &[], async |app, _rel| {
            lifecycle::lb_cleanup_finalizer(app).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

/// VolumeAttributesClass protection with the Alpha gate on through the
/// chart's values: a class held by a claim, a volume and a pending
/// modification, released when the last user goes.
#[test]
fn vac_protection_classes_held_by_claims_volumes_and_pending_modifications() {
    runtime().block_on(async {
        with_manager("vac", &[vac::GATE_ON], async |app, rel| {
            vac::lifecycle(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

/// `helm uninstall` leaves nothing stuck: refused (changing nothing) while a
/// claim being deleted is in use, then, once its pod is gone, no
/// `protection-manager.io/*` finalizer is left and nothing in use deleted.
#[test]
fn uninstall_leaves_nothing_stuck() {
    runtime().block_on(async {
        with_manager("uninstall", uninstall::SETS, async |app, rel| {
            uninstall::leaves_nothing_stuck(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

//! The frames the test files put around the scenarios: a harness on a test
//! bed, a release prepared (and for the lifecycle scenarios installed and
//! watched by the monitor), diagnostics printed on failure, the harness
//! finished either way.

use crate::harness::{Harness, HarnessOptions};
use crate::monitor::{Monitor, MonitorSettings};
use crate::release::ManagerRelease;
use crate::scenarios::{App, vac};
use crate::tools::HelmVersion;
use crate::{Error, Result};

/// Where a test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bed {
    /// kube-sim, or the cluster `E2E_KUBECONFIG` names.
    FromEnv,
    /// The real control plane with process kubelets this test binary starts
    /// ([`crate::real::RealCluster::shared`]).
    Real,
}

/// A harness on `bed`.
pub async fn harness(bed: Bed, opts: HarnessOptions) -> Result<Harness> {
    match bed {
        Bed::FromEnv => Harness::start(opts).await,
        Bed::Real => {
            let real = crate::real::RealCluster::shared().await?;
            Harness::start_real(opts, real).await
        }
    }
}

/// A multi-threaded runtime of two workers, as each test uses.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
}

/// Installs the manager (its own release, one replica, helm 4), starts the
/// monitor, runs `scenario`, and fails on any error or violation.
pub async fn with_manager<F>(bed: Bed, name: &str, sets: &[&str], scenario: F) -> Result<()>
where
    F: for<'a> AsyncFnOnce(&'a App<'a>, &'a ManagerRelease) -> Result<()>,
{
    let h = harness(bed, HarnessOptions::new(name)).await?;
    println!("== {name}: {} mode, run {}", h.mode.name(), h.run);
    let result = async {
        let helm = h.helm(HelmVersion::V4).await?;
        let rel = ManagerRelease::prepare(&h, helm, "pm", "system").await?;
        let t = std::time::Instant::now();
        rel.install(sets, true).await?;
        let own = h.own_release()?;
        rel.wait_running_as(&own).await?;
        h.verified(format!(
            "helm install (helm 4): the manager rolled out and recorded release {own} ({:.1}s)",
            t.elapsed().as_secs_f64()
        ));
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
            return Err(Error::Check(format!("{e}")));
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

/// A release prepared (not installed) with helm `helm` and an App
/// namespace; runs `scenario`; prints helm's history, the manager's state
/// and logs on failure.
pub async fn with_release<F>(bed: Bed, name: &str, helm: HelmVersion, scenario: F) -> Result<()>
where
    F: for<'a> AsyncFnOnce(&'a Harness, &'a App<'a>, &'a ManagerRelease) -> Result<()>,
{
    let h = harness(bed, HarnessOptions::new(name)).await?;
    println!("== {name}: {} mode, run {}, {helm}", h.mode.name(), h.run);
    let t = std::time::Instant::now();
    let result = async {
        let helm = h.helm(helm).await?;
        let rel = ManagerRelease::prepare(&h, helm, "pm", "system").await?;
        let app = App::new(&h, "app").await?;
        let r = scenario(&h, &app, &rel).await;
        if let Err(e) = &r {
            println!("helm history: {:?}", rel.history().await);
            println!("manager state:\n{}", rel.diagnostics().await);
            println!(
                "manager logs:\n{}",
                rel.logs(&h, true).await.unwrap_or_default()
            );
            return Err(Error::Check(format!("{e}")));
        }
        Ok(())
    }
    .await;
    println!(
        "== {name}: {} ({:.0}s)",
        if result.is_ok() { "passed" } else { "failed" },
        t.elapsed().as_secs_f64()
    );
    h.finish().await;
    result
}

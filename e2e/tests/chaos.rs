//! The short chaos run of `make test` (about 1.5 minutes): two replicas
//! with leader election, churn, kube-sim and cloud-sim faults, SIGKILL of
//! the leader; the invariants are checked continuously and at the end.
//! `E2E_CHAOS_SEED` picks the seed (printed either way); `make chaos` runs
//! the long version.

use protection_e2e::chaos::{self, ChaosConfig, Profile};
use protection_e2e::harness::{Harness, HarnessOptions};
use protection_e2e::release::ManagerRelease;
use protection_e2e::scenarios::App;
use protection_e2e::tools::HelmVersion;
use protection_e2e::{Error, Result};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn short_chaos(seed: u64, profile: Profile) -> Result<()> {
    let mut opts = HarnessOptions::new(match profile {
        Profile::Project => "chaos",
        Profile::ProjectWithoutPolicy => "chaos-np",
        Profile::UpstreamWithAdmission => "chaos-up",
    });
    opts.seed = seed;
    let h = Harness::start(opts).await?;
    println!(
        "== chaos: {} mode, run {}, seed {seed}",
        h.mode.name(),
        h.run
    );
    if profile == Profile::UpstreamWithAdmission
        && h.skip_in_cluster("the upstream-profile chaos run (kube-sim's StorageObjectInUseProtection admission switch)")
    {
        h.finish().await;
        return Ok(());
    }
    let result = async {
        let helm = h.helm(HelmVersion::V4).await?;
        let rel = ManagerRelease::prepare(&h, helm, "pm", "system").await?;
        let app = App::new(&h, "app").await?;
        let cfg = ChaosConfig {
            profile,
            ..ChaosConfig::short(seed)
        };
        let report = chaos::run(&h, &rel, &app.ns, &cfg).await;
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                println!("manager state:\n{}", rel.diagnostics().await);
                return Err(Error::Check(format!("chaos run (seed {seed}): {e}")));
            }
        };
        for l in report.lines() {
            println!("{l}");
        }
        // kube-sim serves MutatingAdmissionPolicy: the project profile runs
        // with the chart's create-time policy, so the creation window is a
        // violation (the monitor is strict) and must stay at 0.
        if profile == Profile::Project && h.is_sim() && report.create_time_policies.is_empty() {
            return Err(Error::Check(format!(
                "the chart installed no create-time policy on kube-sim (seed {seed})"
            )));
        }
        if report.kills.is_empty() {
            return Err(Error::Check(format!("no leader was killed during the run (seed {seed})")));
        }
        if h.is_sim() && report.monitor.gaps > 0 {
            return Err(Error::Check(format!(
                "the observer lost {} watch windows (410): deletions in them went unchecked (seed {seed})",
                report.monitor.gaps
            )));
        }
        report.monitor.ok().map_err(|e| Error::Check(format!("seed {seed}: {e}")))?;
        let c = &report.monitor.counts;
        h.verified(format!(
            "no claim or volume disappeared in use: {} PVC and {} PV deletions checked ({} PVCs and {} PVs held Terminating while in use; {} claims and {} volumes deleted in use before any finalizer, the creation window{})",
            c.pvc_deletions_checked, c.pv_deletions_checked, c.pvcs_held_while_in_use, c.pvs_held_while_bound, c.unprotected_pvcs_deleted_in_use, c.unprotected_pvs_deleted_bound,
            if report.create_time_policies.is_empty() { "" } else { ", closed by the create-time policy" }
        ));
        if h.is_sim() && (c.vac_deletions_checked == 0 || c.vacs_held_while_in_use == 0) {
            return Err(Error::Check(format!(
                "the churn exercised no VolumeAttributesClass protection: {} class deletions checked, {} held while in use (seed {seed})",
                c.vac_deletions_checked, c.vacs_held_while_in_use
            )));
        }
        h.verified(format!(
            "no VolumeAttributesClass disappeared while a claim or volume named it: {} class deletions checked ({} held Terminating while in use; {} deleted in use before any finalizer, the creation window)",
            c.vac_deletions_checked, c.vacs_held_while_in_use, c.unprotected_vacs_deleted_in_use
        ));
        if h.is_sim() && (c.secret_deletions_checked == 0 || c.secrets_held_while_in_use == 0) {
            return Err(Error::Check(format!(
                "the churn exercised no ProtectionRule: {} Secret deletions checked, {} held while in use (seed {seed})",
                c.secret_deletions_checked, c.secrets_held_while_in_use
            )));
        }
        h.verified(format!(
            "no Secret under the secrets-used-by-pods ProtectionRule disappeared while a running pod referred to it: {} Secret deletions checked ({} held Terminating while in use; {} deleted in use before any finalizer, the creation window); deleting the rule left no finalizer",
            c.secret_deletions_checked, c.secrets_held_while_in_use, c.unprotected_secrets_deleted_in_use
        ));
        h.verified(format!(
            "no orphaned load balancer: {} Service deletions and {} inventory sweeps checked",
            c.service_deletions_checked, c.cloud_sweeps
        ));
        h.verified(format!(
            "finalizers converged after calm: {} objects released, the slowest in {:.2}s (bound 30s)",
            c.converged_after_calm,
            c.max_convergence.map_or(0.0, |d| d.as_secs_f64())
        ));
        h.verified(format!(
            "leadership moved after each of {} leader kills, the slowest {:.2}s after the last renewal (bound lease {}s + {}s)",
            report.kills.len(),
            c.max_failover.map_or(0.0, |d| d.as_secs_f64()),
            ChaosConfig::short(seed).lease_duration.as_secs(),
            report.monitor.tolerance.as_secs()
        ));
        Ok(())
    }
    .await;
    h.finish().await;
    result
}

fn seed() -> u64 {
    std::env::var("E2E_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_122)
}

#[test]
fn short_chaos_keeps_every_invariant_project_profile() {
    runtime().block_on(async {
        short_chaos(seed(), Profile::Project)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
}

#[test]
fn short_chaos_keeps_every_invariant_upstream_profile_with_admission() {
    runtime().block_on(async {
        short_chaos(seed() + 1, Profile::UpstreamWithAdmission)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
}

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
        if report.monitor.gaps > 0 {
            let lost = format!(
                "the observer lost {} watch windows (410): deletions in them went unchecked (seed {seed})",
                report.monitor.gaps
            );
            // kube-sim expires no watch of the observer's user; a real API
            // server may (compaction), so there it is said, not failed.
            if h.is_sim() {
                return Err(Error::Check(lost));
            }
            println!("NOTE (cluster mode): {lost}");
        }
        if let Err(e) = report.monitor.ok() {
            // The managers' logs say why an object was held or not
            // released; kept outside the run's directory (finish removes
            // it), the path printed.
            match rel.logs(&h, true).await {
                Ok(logs) => {
                    let p = std::env::temp_dir().join(format!("{}-manager-logs.txt", h.run));
                    match std::fs::write(&p, logs) {
                        Ok(()) => println!("manager logs: {}", p.display()),
                        Err(w) => println!("manager logs not kept ({}): {w}", p.display()),
                    }
                }
                Err(l) => println!("manager logs not read: {l}"),
            }
            return Err(Error::Check(format!("seed {seed}: {e}")));
        }
        // In every mode: each kind the churn covered (a cluster that does
        // not serve one skips it with a note) was exercised.
        report.check_coverage()?;
        report.record_verified(&h);
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

//! `chaos`: the long chaos run (`make chaos`). Prints the invariant counts;
//! exits 1 if an invariant was violated.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use protection_e2e::chaos::{self, ChaosConfig, Profile};
use protection_e2e::harness::{Harness, HarnessOptions};
use protection_e2e::release::ManagerRelease;
use protection_e2e::scenarios::App;
use protection_e2e::tools::HelmVersion;

/// Runs protection-manager (two replicas, leader election) through a churn
/// of claims, volumes, pods, load-balancer Services, VolumeAttributesClasses,
/// Secrets under a ProtectionRule and ServiceCIDRs holding cluster IPs under
/// kube-sim and cloud-sim faults and leader kills, and checks the
/// invariants: no claim, volume, class, Secret or ServiceCIDR disappears
/// while in use, no load balancer is orphaned, every
/// finalizer goes within 30 s after the faults stop, and leadership moves
/// within the lease duration. On kube-sim by default; on the cluster named
/// by E2E_KUBECONFIG (see e2e/README.md).
#[derive(Debug, Parser)]
#[command(name = "chaos", version)]
struct Args {
    /// How long the churn runs under faults (e.g. 10m, 90s).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    duration: Duration,
    /// Seed of the workload and the faults (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Use the short configuration (an 8 s lease) instead of the chart's
    /// default lease timings.
    #[arg(long)]
    short: bool,
    /// Finalizer names: `project` (the chart's defaults: its create-time
    /// MutatingAdmissionPolicy adds them at creation where the cluster
    /// serves the API, and a deletion in the creation window is then a
    /// violation), `project-no-policy` (createTimeProtection=false: the
    /// manager adds them after creation, the window is counted) or
    /// `upstream` (with kube-sim's admission emulation adding them at
    /// creation; sim only).
    #[arg(long, default_value = "project", value_parser = ["project", "project-no-policy", "upstream"])]
    profile: String,
    /// On the real control plane this program starts (kube-apiserver, etcd,
    /// kube-controller-manager, kube-scheduler, two process kubelets;
    /// `make chaos-real`), with the real cluster's faults instead of
    /// kube-sim's: SIGKILL of the leader's process and of kubelets,
    /// kube-apiserver and etcd restarts, apiserver stalls.
    #[arg(long)]
    real: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: want e.g. 10m or 90s"))?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!(
            "invalid duration {s:?}: the unit must be s, m or h"
        )),
    }
}

async fn run(args: Args) -> Result<bool> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let mut cfg = match (args.short, args.real) {
        (true, false) => ChaosConfig {
            duration: args.duration,
            ..ChaosConfig::short(seed)
        },
        (true, true) => ChaosConfig {
            duration: args.duration,
            ..ChaosConfig::real_short(seed)
        },
        (false, _) => ChaosConfig::long(seed, args.duration),
    };
    match args.profile.as_str() {
        "upstream" => cfg.profile = Profile::UpstreamWithAdmission,
        "project-no-policy" => cfg.profile = Profile::ProjectWithoutPolicy,
        _ => {}
    }
    println!(
        "chaos: seed {seed}, fault phase {:?}, lease {:?}",
        cfg.duration, cfg.lease_duration
    );
    let mut opts = HarnessOptions::new("chaos");
    opts.seed = seed;
    opts.history_window = 1_000_000;
    let h = if args.real {
        let real = protection_e2e::real::RealCluster::start("chaos-real")
            .await
            .context("starting the real cluster")?;
        Harness::start_real(opts, std::sync::Arc::new(real))
            .await
            .context("starting the harness")?
    } else {
        Harness::start(opts).await.context("starting the harness")?
    };
    println!("chaos: {} mode, run {}", h.mode.name(), h.run);
    let result = async {
        let helm = h.helm(HelmVersion::V4).await?;
        let rel = ManagerRelease::prepare(&h, helm, "pm", "system").await?;
        let app = App::new(&h, "app").await?;
        chaos::run(&h, &rel, &app.ns, &cfg).await
    }
    .await;
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            h.finish().await;
            return Err(anyhow::Error::from(e).context("the chaos run failed"));
        }
    };
    for l in report.lines() {
        println!("{l}");
    }
    let ok = if args.real {
        match report.check(&h) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("chaos: {e}");
                false
            }
        }
    } else {
        report.monitor.violations.is_empty() && !report.kills.is_empty()
    };
    h.finish().await;
    Ok(ok)
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The clients' own reports of a kube-apiserver restart
                // (connect errors, cut watches) are the faults of
                // --real, not news: RUST_LOG shows them.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,kube_client=off,kube_runtime=off")
                }),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("chaos: FAILED (an invariant was violated, or no leader was killed)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("chaos: {e:#}");
            ExitCode::FAILURE
        }
    }
}

//! The `kube-sim` binary: serve the emulator until interrupted.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// A Kubernetes API server emulator for tests, demos and benchmarks.
#[derive(Parser, Debug)]
#[command(name = "kube-sim", version)]
struct Args {
    /// TCP port (0 = any free port).
    #[arg(long, default_value_t = 0, env = "KUBE_SIM_PORT")]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    bind: std::net::IpAddr,
    /// Write an admin kubeconfig here.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Watch history retained per resource (events); older resourceVersions get 410.
    #[arg(long, default_value_t = 10_000)]
    history_window: usize,
    /// Emulate the StorageObjectInUseProtection admission plugin.
    #[arg(long)]
    storage_protection_admission: bool,
    /// Seed for uids, generated names, IPs and fault fractions.
    #[arg(long, default_value_t = 0x6b75_6265)]
    seed: u64,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    bookmark_interval_seconds: u64,
    /// Keep scheduled pods Terminating for their grace period (as with a kubelet).
    #[arg(long)]
    pod_graceful_deletion: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let cfg = kube_sim::SimConfig {
        port: args.port,
        bind: args.bind,
        history_window: args.history_window,
        storage_protection_admission: args.storage_protection_admission,
        seed: args.seed,
        kubeconfig_out: args.kubeconfig_out.clone(),
        bookmark_interval: std::time::Duration::from_secs(args.bookmark_interval_seconds.max(1)),
        pod_graceful_deletion: args.pod_graceful_deletion,
        ..Default::default()
    };
    let sim = kube_sim::KubeSim::start(cfg)
        .await
        .with_context(|| format!("starting kube-sim on {}:{}", args.bind, args.port))?;
    println!("kube-sim serving on {}", sim.url());
    println!("kubeconfig: {}", sim.kubeconfig_path().display());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    sim.shutdown().await;
    Ok(())
}

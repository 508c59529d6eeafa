//! `real-cluster`: holds up the real cluster of `protection_e2e::real` (the
//! real control plane, two process-kubelet nodes, cloud-sim) until SIGTERM
//! or Ctrl-C, for `make e2e-real` (e2e/real.sh), which runs the suite in
//! cluster mode against it. Writes the variables `make e2e` needs
//! (E2E_KUBECONFIG, E2E_IMAGE, E2E_CLOUD_SIM_URL, E2E_CLOUD_SIM_TOKEN) to
//! `--env-file` as `export NAME=VALUE` lines once the nodes are Ready.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "real-cluster", version)]
struct Args {
    /// Where to write the cluster-mode variables once the cluster is ready.
    #[arg(long)]
    env_file: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let cluster = protection_e2e::real::RealCluster::start("e2e-real")
            .await
            .context("starting the real cluster")?;
        let text: String = cluster
            .env()
            .iter()
            .map(|(k, v)| format!("export {k}={v}\n"))
            .collect();
        let tmp = args.env_file.with_extension("tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &args.env_file)
            .with_context(|| format!("writing {}", args.env_file.display()))?;
        println!(
            "real-cluster: ready in {:.1}s; logs in {}",
            cluster.ready_after.as_secs_f64(),
            cluster.dir.display()
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
            _ = term.recv() => {}
        }
        drop(cluster);
        Ok(())
    })
}

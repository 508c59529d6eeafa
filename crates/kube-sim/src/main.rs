//! The `kube-sim` binary: serve the emulator until interrupted.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// A Kubernetes API server emulator for tests, demos and benchmarks.
/// (`kube-sim kubelet --help`: its node agent as a process, for any API
/// server.)
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
    /// Emulate the ServiceAccount admission plugin's defaulting (a pod's
    /// `serviceAccountName` is `default` when unset); on with the kubelet.
    #[arg(long)]
    service_account_admission: bool,
    /// Seed for uids, generated names, IPs and fault fractions.
    #[arg(long, default_value_t = 0x6b75_6265)]
    seed: u64,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    bookmark_interval_seconds: u64,
    /// Keep scheduled pods Terminating for their grace period (as with a
    /// kubelet); implied by --emulate kubelet.
    #[arg(long)]
    pod_graceful_deletion: bool,
    /// Cluster components to emulate, comma-separated: scheduler, pv-binder,
    /// deployments (Deployment and ReplicaSet controllers), jobs (Job and
    /// ttl-after-finished controllers), kubelet, provisioner (a default
    /// StorageClass `standard` with a hostPath provisioner), or all / none.
    #[arg(long, value_name = "LIST", default_value = "none")]
    emulate: String,
    /// Node names (comma-separated) registered when the scheduler or the
    /// kubelet is emulated; default one node `kube-sim-node`.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    nodes: Vec<String>,
    /// Run pods whose image matches IMAGE as the local binary PATH
    /// (repeatable). IMAGE is a repository (`protection-manager` matches
    /// `ghcr.io/x/protection-manager:0.3.0`) or repository:tag (wins over an
    /// untagged mapping).
    #[arg(long, value_name = "IMAGE=PATH")]
    run_image: Vec<kube_sim::ImageMapping>,
    /// Where the kubelets keep pod directories (volumes, logs, kubeconfigs);
    /// default a directory under the simulator's temp dir.
    #[arg(long, value_name = "DIR")]
    kubelet_dir: Option<PathBuf>,
    /// First CrashLoopBackOff delay in seconds (upstream 10), doubled up to
    /// --crash-loop-max-seconds (upstream 300).
    #[arg(long, default_value_t = 10.0)]
    crash_loop_initial_seconds: f64,
    /// Pods per node (the kubelet's --max-pods; upstream 110).
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// Longest CrashLoopBackOff delay in seconds.
    #[arg(long, default_value_t = 300.0)]
    crash_loop_max_seconds: f64,
    /// Charge each request what it costs a real API server: `real-1.36`
    /// (kube-apiserver 1.36 + etcd on 2 cores) or a JSON file (see the
    /// README). Off by default: kube-sim answers as fast as it can.
    #[arg(long, value_name = "MODEL|FILE")]
    cost_model: Option<String>,
    /// The service range (IPv4 CIDR) of the default `kubernetes`
    /// ServiceCIDR, as kube-apiserver's flag of the same name.
    #[arg(long, value_name = "CIDR", default_value = kube_sim::DEFAULT_SERVICE_CLUSTER_IP_RANGE)]
    service_cluster_ip_range: String,
    /// How requests are authorized, as kube-apiserver's flag: `Node,RBAC`
    /// or `AlwaysAllow` (default: `KUBE_SIM_AUTHORIZATION`, else
    /// `AlwaysAllow`).
    #[arg(long, value_name = "MODE")]
    authorization_mode: Option<String>,
    /// Serve HTTPS with kube-sim's own CA; the admin kubeconfig carries a
    /// client certificate kube-sim issued (CN the user, O its groups),
    /// authenticated as kube-apiserver's `--client-ca-file` does (`extra`
    /// holds the certificate's credential id). Not with --emulate.
    #[arg(long)]
    client_certificates: bool,
}

fn main() -> std::process::ExitCode {
    // `kube-sim kubelet ...` (the process kubelet) and `kube-sim
    // container-shim ...` (what it starts each container through).
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match argv.get(1).and_then(|a| a.to_str()) {
        Some("container-shim") => {
            let rest: Vec<String> = argv[2..]
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            return kube_sim::cluster::kubelet::shim::main(&rest);
        }
        Some("kubelet") => {
            init_tracing();
            argv.remove(1);
            return kube_sim::cluster::kubelet::process::main(argv);
        }
        _ => {}
    }
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kube-sim: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
}

async fn serve() -> anyhow::Result<()> {
    init_tracing();
    let args = Args::parse();
    let mut cluster = kube_sim::ClusterConfig::parse_emulate(&args.emulate)
        .with_context(|| format!("--emulate {:?}", args.emulate))?;
    cluster.nodes = args
        .nodes
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    cluster.kubelet_config.images = args.run_image.clone();
    cluster.kubelet_config.root_dir = args.kubelet_dir.clone();
    cluster.kubelet_config.max_pods = args.max_pods;
    cluster.kubelet_config.crash_loop_initial =
        std::time::Duration::try_from_secs_f64(args.crash_loop_initial_seconds)
            .context("--crash-loop-initial-seconds must be a non-negative number")?;
    cluster.kubelet_config.crash_loop_max =
        std::time::Duration::try_from_secs_f64(args.crash_loop_max_seconds)
            .context("--crash-loop-max-seconds must be a non-negative number")?;
    for m in &args.run_image {
        if !m.binary.is_file() {
            anyhow::bail!(
                "--run-image {}={}: no such file",
                m.image,
                m.binary.display()
            );
        }
    }
    let cost_model = args
        .cost_model
        .as_deref()
        .map(kube_sim::cost::CostSpec::load)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let authorization = args
        .authorization_mode
        .as_deref()
        .map(|m| {
            kube_sim::Authorization::parse(m).ok_or_else(|| {
                anyhow::anyhow!("--authorization-mode {m:?}: expected Node,RBAC or AlwaysAllow")
            })
        })
        .transpose()?;
    let cfg = kube_sim::SimConfig {
        cost_model,
        authorization,
        port: args.port,
        bind: args.bind,
        history_window: args.history_window,
        storage_protection_admission: args.storage_protection_admission,
        service_account_admission: args.service_account_admission,
        seed: args.seed,
        kubeconfig_out: args.kubeconfig_out.clone(),
        bookmark_interval: std::time::Duration::from_secs(args.bookmark_interval_seconds.max(1)),
        pod_graceful_deletion: args.pod_graceful_deletion,
        cluster,
        service_cluster_ip_range: args.service_cluster_ip_range.clone(),
        client_certificates: args.client_certificates,
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

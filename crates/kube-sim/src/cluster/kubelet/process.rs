//! `kube-sim kubelet`: kube-sim's node agent as its own process, for any
//! API server (a real kube-apiserver with the Node authorizer and
//! NodeRestriction on): the same code as kube-sim's in-process kubelets
//! ([`super::run`]), behind the node's own client.
//!
//! ```text
//! kube-sim kubelet --kubeconfig BOOTSTRAP --nodes node-1,node-2 \
//!     --run-image protection-manager=/path/to/protection-manager [--provisioner]
//! ```
//!
//! * Each node gets its own identity by the kubelet's TLS bootstrap
//!   ([`super::bootstrap`]): `system:node:<node>` in `system:nodes`, so the
//!   Node authorizer lets it see only its own pods, their Secrets,
//!   ConfigMaps, claims and tokens.
//! * Nodes register Ready with InternalIP `--address` and the kubelet API
//!   ([`super::server`]) port in `daemonEndpoints`, so `kubectl logs` works
//!   through the API server; their Leases are renewed every 10 s.
//! * Pods bound to a node (watched with `fieldSelector=spec.nodeName=<node>`,
//!   as a kubelet must) whose image is mapped run as local processes, each
//!   under a `kube-sim container-shim` ([`super::shim`]): a container
//!   outlives a crash of this process and the next one adopts it. Service
//!   account tokens come from the TokenRequest API, bound to the pod.
//! * `--provisioner`: the default StorageClass `standard` and kube-sim's
//!   hostPath provisioner ([`crate::cluster::provisioner`]), with the
//!   bootstrap credentials.
//!
//! SIGTERM or SIGINT stops every pod and exits; containers end when the
//! process named by `--session-pid` (default: this one's parent) ends.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use super::{ApiAccess, NodeAgent, TokenSource, bootstrap, server};
use crate::cluster::runtime::{Launcher, PodRuntimes};
use crate::cluster::{ImageMapping, KubeletConfig, provisioner};

/// kube-sim's kubelet as a process, for any API server.
#[derive(Parser, Debug)]
#[command(name = "kube-sim kubelet")]
pub struct Args {
    /// Bootstrap kubeconfig: credentials allowed to create
    /// CertificateSigningRequests for node client certificates (and, with
    /// --provisioner, PersistentVolumes).
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The nodes this process runs (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,
    /// Run pods whose image matches IMAGE as the local binary PATH
    /// (repeatable; as `kube-sim --run-image`).
    #[arg(long, value_name = "IMAGE=PATH")]
    pub run_image: Vec<ImageMapping>,
    /// Pod directories, node certificates (default: a directory under the
    /// temp dir named after the nodes). Kept across restarts: a restarted
    /// kubelet adopts the containers recorded there.
    #[arg(long)]
    pub root_dir: Option<PathBuf>,
    /// The nodes' InternalIP and the kubelet API's bind address.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: IpAddr,
    /// The kubelet API's port (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Pod CIDR of the first node: 10.244.<N>.0/24 (the next node N+1, ...);
    /// give each kubelet process of a cluster its own range.
    #[arg(long, default_value_t = 0)]
    pub first_index: usize,
    /// Run the default StorageClass `standard` and kube-sim's hostPath
    /// provisioner.
    #[arg(long)]
    pub provisioner: bool,
    /// Containers end when this process ends (default: the parent of this
    /// kubelet, e.g. the test that started the cluster).
    #[arg(long)]
    pub session_pid: Option<u32>,
    /// First CrashLoopBackOff delay in seconds (upstream 10).
    #[arg(long, default_value_t = 10.0)]
    pub crash_loop_initial_seconds: f64,
    /// Longest CrashLoopBackOff delay in seconds (upstream 300).
    #[arg(long, default_value_t = 300.0)]
    pub crash_loop_max_seconds: f64,
    /// Pods per node (upstream 110).
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,
}

/// `kube-sim kubelet ...`; `args` start with the program name.
pub fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    let args = Args::parse_from(args);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kube-sim kubelet: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kube-sim kubelet: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn service_of(url: &str) -> Option<(String, u16)> {
    let uri: http::Uri = url.parse().ok()?;
    let host = uri.host()?.trim_matches(['[', ']']).to_string();
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    Some((host, port))
}

async fn run(args: Args) -> anyhow::Result<()> {
    for m in &args.run_image {
        anyhow::ensure!(
            m.binary.is_file(),
            "--run-image {}={}: no such file",
            m.image,
            m.binary.display()
        );
    }
    let probe = crate::cluster::ClusterConfig {
        nodes: args.nodes.clone(),
        ..Default::default()
    };
    probe.validate().context("--nodes")?;
    let root = args.root_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("kube-sim-kubelet-{}", args.nodes.join("-")))
    });
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let session_pid = args
        .session_pid
        .unwrap_or_else(std::os::unix::process::parent_id);
    let program = std::env::current_exe().context("locating this program (for the shims)")?;
    let server = bootstrap::server_of(&args.kubeconfig)
        .map_err(anyhow::Error::msg)
        .context("--kubeconfig")?;
    let bootstrap_client = bootstrap::client_from(&args.kubeconfig)
        .await
        .map_err(anyhow::Error::msg)
        .context("--kubeconfig")?;
    let stop = CancellationToken::new();
    let runtimes = Arc::new(PodRuntimes::default());
    let api_addr = server::start(
        SocketAddr::new(args.address, args.port),
        runtimes.clone(),
        stop.clone(),
    )
    .await?;
    let config = KubeletConfig {
        images: args.run_image.clone(),
        root_dir: Some(root.clone()),
        crash_loop_initial: Duration::try_from_secs_f64(args.crash_loop_initial_seconds)
            .context("--crash-loop-initial-seconds must be a non-negative number")?,
        crash_loop_max: Duration::try_from_secs_f64(args.crash_loop_max_seconds)
            .context("--crash-loop-max-seconds must be a non-negative number")?,
        max_pods: args.max_pods,
        launcher: Launcher::Shim {
            program,
            session_pid,
        },
        ..KubeletConfig::default()
    };
    let access = ApiAccess {
        server_url: server.url.clone(),
        ca_pem: server.ca_pem.clone(),
        service: service_of(&server.url),
        tokens: TokenSource::TokenRequest,
    };
    let address = (args.address.to_string(), api_addr.port());
    let mut agents = Vec::new();
    for (i, node) in args.nodes.iter().enumerate() {
        let index = args.first_index + i;
        let client = bootstrap::node_client(&bootstrap_client, &server, node, &root.join("pki"))
            .await
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("the client certificate of node {node}"))?;
        super::register_node(&client, node, index, args.max_pods, Some(&address))
            .await
            .map_err(anyhow::Error::msg)?;
        let agent = NodeAgent {
            node: node.clone(),
            index,
            client,
            config: config.clone(),
            root: root.join(node),
            runtimes: runtimes.clone(),
            api: access.clone(),
            address: Some(address.clone()),
        };
        agents.push(tokio::spawn(super::run(agent, stop.clone())));
    }
    if args.provisioner {
        provisioner::ensure_default_storage_class(&bootstrap_client)
            .await
            .map_err(anyhow::Error::msg)?;
        tokio::spawn(provisioner::run(
            bootstrap_client.clone(),
            root.join("provisioned"),
            stop.clone(),
        ));
    }
    println!(
        "kube-sim kubelet: nodes {} running against {}; kubelet API https://{api_addr}; pods in {}",
        args.nodes.join(","),
        server.url,
        root.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    stop.cancel();
    for a in agents {
        let _ = tokio::time::timeout(Duration::from_secs(15), a).await;
    }
    Ok(())
}

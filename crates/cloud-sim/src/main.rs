//! `cloud-sim`: run the emulated cloud load-balancer API.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cloud_sim::{
    CloudSim, Config, ErrorFault, FaultSet, HangFault, IpRange, LatencyFault, OpFaults, Operation,
    RetryAfterFormat,
};

/// An emulated cloud load-balancer API implementing the protection-manager
/// HTTP provider contract (docs/lb-provider-http-contract.md).
///
/// Contract endpoints: PUT/GET/DELETE /v1/loadbalancers/{uid},
/// PUT /v1/loadbalancers/{uid}/hosts, GET /v1/loadbalancers (inventory).
/// Simulator endpoints (same token): GET/PUT/DELETE /_sim/faults,
/// PUT /_sim/faults/{put|get|delete|hosts|list}, GET/DELETE /_sim/stats;
/// GET /healthz needs no token.
///
/// On start it prints one line, `cloud-sim listening on http://ADDR:PORT`, on
/// standard output. SIGTERM or SIGINT stops it gracefully; every acknowledged
/// change is already in the state file. Logs go to standard error, filtered
/// by RUST_LOG (default info).
#[derive(Debug, Parser)]
#[command(name = "cloud-sim", version)]
struct Args {
    /// Port to listen on; 0 picks a free one (see the printed address).
    #[arg(long, default_value_t = 8080)]
    port: u16,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,

    /// JSON state file, created when absent, rewritten atomically on every
    /// change. A corrupt file stops the start-up; it is never reset.
    #[arg(long, value_name = "FILE")]
    state_file: PathBuf,

    /// Do not fsync the state file before answering. The file is still
    /// replaced atomically and survives a kill of the process, not a crash
    /// of the machine; for benchmarks, where fsync dominates a call's cost.
    #[arg(long)]
    no_fsync: bool,

    /// IPv4 range for ingress addresses: a CIDR (network and broadcast
    /// addresses left out), START-END, or one address.
    #[arg(long, value_name = "RANGE", default_value = "203.0.113.0/24")]
    ip_range: IpRange,

    /// File holding the bearer token clients must present; re-read when it
    /// changes. Without --token-file or --token, no token is required.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,

    /// The bearer token clients must present (prefer --token-file).
    #[arg(long, env = "CLOUD_SIM_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// Initial faults as JSON in the format of PUT /_sim/faults. The flags
    /// below add to it for the operations of --fault-ops.
    #[arg(long, value_name = "FILE")]
    faults_file: Option<PathBuf>,

    /// Seed of the fault draws (same seed and calls give the same faults).
    #[arg(long)]
    seed: Option<u64>,

    /// Operations the fault flags below apply to (comma-separated).
    #[arg(
        long,
        value_name = "OPS",
        value_delimiter = ',',
        default_value = "put,get,delete,hosts"
    )]
    fault_ops: Vec<Operation>,

    /// Probability (0.0-1.0) that a call is answered with --error-status.
    #[arg(long, value_name = "RATE")]
    error_rate: Option<f64>,

    /// Status of injected errors: 500, 503, 429, 409, ... (400-599, or 202).
    #[arg(long, value_name = "STATUS", default_value_t = 503)]
    error_status: u16,

    /// Send `Retry-After: SECONDS` with injected errors.
    #[arg(long, value_name = "SECONDS")]
    retry_after: Option<u64>,

    /// Write Retry-After as an HTTP date instead of seconds.
    #[arg(long, requires = "retry_after")]
    retry_after_http_date: bool,

    /// Carry out the operation before answering the injected error (the
    /// "done, but the reply was lost" case).
    #[arg(long)]
    error_after_commit: bool,

    /// Added latency in milliseconds: a fixed MS or a MIN-MAX range.
    #[arg(long, value_name = "MS|MIN-MAX")]
    latency: Option<String>,

    /// Probability (0.0-1.0) that a call hangs until faults are changed or
    /// cleared (PUT/DELETE /_sim/faults) or --hang-max-ms passes.
    #[arg(long, value_name = "RATE")]
    hang_rate: Option<f64>,

    /// A hanging call answers 504 after this many milliseconds.
    #[arg(long, value_name = "MS")]
    hang_max_ms: Option<u64>,
}

fn parse_latency(s: &str) -> Result<LatencyFault> {
    let num = |x: &str| {
        x.trim()
            .parse::<u64>()
            .with_context(|| format!("--latency {s:?}: {x:?} is not a number of milliseconds"))
    };
    let (min, max) = match s.split_once('-') {
        Some((a, b)) => (num(a)?, Some(num(b)?)),
        None => (num(s)?, None),
    };
    Ok(LatencyFault {
        rate: 1.0,
        min_ms: min,
        max_ms: max,
    })
}

fn faults(args: &Args) -> Result<FaultSet> {
    let mut set = match &args.faults_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --faults-file {}", path.display()))?;
            serde_json::from_str::<FaultSet>(&text).with_context(|| {
                format!("--faults-file {} is not a valid fault set", path.display())
            })?
        }
        None => FaultSet::default(),
    };
    if let Some(seed) = args.seed {
        set.seed = seed;
    }
    let latency = args.latency.as_deref().map(parse_latency).transpose()?;
    for op in &args.fault_ops {
        let f: &mut OpFaults = set.operations.entry(*op).or_default();
        if let Some(rate) = args.error_rate {
            f.error = Some(ErrorFault {
                rate,
                status: args.error_status,
                retry_after_seconds: args.retry_after,
                retry_after_format: if args.retry_after_http_date {
                    RetryAfterFormat::HttpDate
                } else {
                    RetryAfterFormat::Seconds
                },
                after_commit: args.error_after_commit,
                message: None,
            });
        }
        if let Some(l) = &latency {
            f.latency = Some(l.clone());
        }
        if let Some(rate) = args.hang_rate {
            f.hang = Some(HangFault {
                rate,
                max_ms: args.hang_max_ms,
                after_commit: false,
            });
        }
    }
    set.operations.retain(|_, f| *f != OpFaults::default());
    set.validate().context("invalid fault flags")?;
    Ok(set)
}

/// SIGTERM and SIGINT, registered before the server starts so that an early
/// signal still stops it gracefully.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
        })
    }

    async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let mut config = Config::default()
        .with_listen(SocketAddr::new(args.bind, args.port))
        .with_state_file(&args.state_file)
        .with_fsync(!args.no_fsync)
        .with_ip_range(args.ip_range)
        .with_faults(faults(&args)?);
    match (&args.token_file, &args.token) {
        (Some(path), _) => config = config.with_token_file(path),
        (None, Some(token)) => config = config.with_token(token.clone()),
        (None, None) => tracing::warn!("no --token-file or --token: the API accepts every caller"),
    }
    if args.error_rate.is_none() && args.retry_after.is_some() {
        bail!("--retry-after needs --error-rate");
    }

    let mut signals = Signals::new()?;
    let sim = CloudSim::start(config)
        .await
        .context("cannot start cloud-sim")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "cloud-sim listening on {}", sim.url()).context("cannot write to stdout")?;
        out.flush().context("cannot write to stdout")?;
    }
    let which = signals.wait().await;
    tracing::info!(signal = which, "shutting down");
    sim.shutdown()
        .await
        .context("cloud-sim did not stop cleanly")?;
    tracing::info!("stopped");
    Ok(())
}

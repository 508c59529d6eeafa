//! `protection-manager run`.

use std::sync::Arc;

use anyhow::{Context, Result};
use protection_core::controllers;
use protection_core::metrics::Metrics;
use protection_core::release;
use protection_host::client::{
    ClientOptions, build_client_observed, http2_from_env, load_config, server_url,
};
use protection_host::client_metrics::ClientMetrics;
use protection_host::host::{EventsClient, Host, HostConfig, NewFinalizer, ReleaseGuardConfig};
use protection_host::leader::LeaderElectionConfig;
use protection_host::release_guard::RecordLocation;
use protection_host::{admin, metrics_server, names};
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::logging;

const IN_CLUSTER_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// What `run` settles from its flags before it connects to anything.
pub struct Checked {
    gates: protection_core::FeatureGates,
    selected: Vec<protection_core::ControllerDescriptor>,
    namespace: String,
    identity: String,
    leader_election: Option<LeaderElectionConfig>,
    /// What is allowed but probably not meant.
    warnings: Vec<String>,
}

/// Every check `run` makes of its flags before it connects to anything
/// (gates, controllers, their settings, the lease namespace, the leader
/// election durations; what clap's value parsers check comes before):
/// `validate-config` runs exactly this, so what it accepts `run` starts
/// with.
pub fn check(args: &RunArgs) -> Result<Checked> {
    let (gates, mut warnings) = args.gates.gates()?;
    let emulated = gates.emulated_version();
    let flag = controllers::parse_flag(&args.controllers);
    // kube-controller-manager accepts an empty list and starts nothing while
    // reporting healthy; a manager that runs nothing is a mistake (usually
    // an empty template value), so it is refused. `*,-a,-b,...` still turns
    // every controller off explicitly.
    if flag.is_empty() {
        anyhow::bail!(
            "validation failed for '--controllers': the list is empty, so no controller would run; use '*' for the default set, 'name' to add one, '-name' to turn one off"
        );
    }
    let selected = controllers::select(crate::controllers::descriptors(args)?, &flag, emulated)
        .map_err(|e| anyhow::anyhow!("validation failed for '--controllers': {e}"))?;
    if selected.is_empty() {
        warnings.push(format!(
            "no controller is selected (--controllers={} at release {emulated}): the manager runs none and only serves its admin endpoints",
            args.controllers
        ));
    }
    let identity = identity();
    let namespace = lease_namespace(args);
    // The namespace may come from $POD_NAMESPACE or the service account.
    names::validate_namespace("--leader-elect-resource-namespace", &namespace)?;
    let leader_election = if args.leader_elect {
        let le = LeaderElectionConfig {
            lease_name: args.leader_elect_resource_name.clone(),
            lease_namespace: namespace.clone(),
            identity: identity.clone(),
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        };
        le.validate()?;
        Some(le)
    } else {
        None
    };
    Ok(Checked {
        gates,
        selected,
        namespace,
        identity,
        leader_election,
        warnings,
    })
}

/// `validate-config`: [`check`], and a line saying so.
pub fn validate_config(args: &RunArgs) -> Result<String> {
    let checked = check(args)?;
    for w in &checked.warnings {
        eprintln!("warning: {w}");
    }
    Ok(format!(
        "the configuration is valid: `run` would start {} controller(s) ({}) at release {}",
        checked.selected.len(),
        checked
            .selected
            .iter()
            .map(|d| d.name)
            .collect::<Vec<_>>()
            .join(", "),
        checked.gates.emulated_version()
    ))
}

pub async fn run(args: RunArgs) -> Result<()> {
    logging::init(args.log_format, &args.log_level)?;
    let Checked {
        gates,
        selected,
        namespace,
        identity,
        leader_election,
        warnings,
    } = check(&args)?;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let emulated = gates.emulated_version();

    let opts = ClientOptions {
        kubeconfig: args.client.kubeconfig.clone(),
        context: args.client.context.clone(),
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
        user_agent: format!("protection-manager/{}", env!("CARGO_PKG_VERSION")),
        request_timeout: args.client.request_timeout(),
        http2: http2_from_env(),
        http2_connections: protection_host::client::HTTP2_CONNECTIONS,
    };
    let config = load_config(&opts)
        .await
        .context("loading the Kubernetes client configuration")?;
    let server = server_url(&config);
    let metrics = Metrics::new()?;
    // Events get a client of their own: its own rate limit, so a burst of
    // Events never spends the budget of finalizer writes. One HTTP/2
    // connection: Events are few and trail the writes, and each connection
    // holds its own TLS state and buffers.
    let event_opts = ClientOptions {
        qps: args.event_qps,
        burst: args.event_burst,
        http2_connections: 1,
        ..opts.clone()
    };
    let client_metrics = ClientMetrics::register(metrics.registry())
        .context("registering the Kubernetes client's metrics")?;
    let (events_client, _) =
        build_client_observed(config.clone(), &event_opts, Some(&client_metrics))
            .context("building the Events client")?;
    let (client, client_health) = build_client_observed(config, &opts, Some(&client_metrics))?;

    metrics.set_build_info(env!("CARGO_PKG_VERSION"), &gates);
    let listener = admin::bind(args.admin_address).await?;
    let metrics_server = start_metrics_server(&args, &metrics, &client).await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        emulated_version = %emulated,
        feature_gates = %gates.summary(),
        controllers = ?selected.iter().map(|d| d.name).collect::<Vec<_>>(),
        admin_address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        leader_elect = args.leader_elect,
        identity = %identity,
        api_server = %server,
        malloc_tuned = ?malloc_tune::applied(),
        "starting protection-manager"
    );
    if emulated < release::BINARY_VERSION {
        tracing::info!(
            "emulating release {emulated}: gates and controllers behave as in that release"
        );
    }

    let new_finalizers = new_finalizers(&selected, &gates, args.finalizer_profile);
    let host = Host::new(
        client,
        Arc::new(gates),
        metrics,
        HostConfig {
            leader_election,
            shutdown_timeout: args.shutdown_grace_period,
            concurrency: args.concurrency,
            identity,
            ping_interval: args.ping_interval,
            events_client: Some(EventsClient(events_client)),
            watches: Some((
                client_metrics.watch_health(),
                protection_host::host::watch_down_bound(args.client.request_timeout()),
            )),
            release_guard: Some(ReleaseGuardConfig {
                location: RecordLocation {
                    namespace,
                    name: args.release_record_name.clone(),
                },
                running: emulated,
                binary_version: env!("CARGO_PKG_VERSION").to_string(),
                skip_check: args.skip_release_check,
                new_finalizers,
            }),
        },
    );
    // A dead client worker fails every API call for ever: stop, so that the
    // process restarts (what a failing liveness check would do).
    let result = tokio::select! {
        r = host.run(listener, selected, shutdown_signal()) => r.map_err(anyhow::Error::from),
        () = client_health.closed() => {
            let reason = client_health.check().err().unwrap_or_default();
            tracing::error!("{reason}");
            Err(anyhow::anyhow!("{reason}"))
        }
    };
    if let Some((stop, task)) = metrics_server {
        stop.cancel();
        let _ = task.await;
    }
    result?;
    tracing::info!("protection-manager stopped");
    Ok(())
}

/// The secure metrics server of `--metrics-bind-address` (none without it).
async fn start_metrics_server(
    args: &RunArgs,
    metrics: &Arc<Metrics>,
    client: &kube::Client,
) -> Result<Option<(CancellationToken, tokio::task::JoinHandle<()>)>> {
    let Some(addr) = args.metrics_bind_address else {
        return Ok(None);
    };
    let listener = metrics_server::bind(addr).await?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("metrics server on {addr}"))?;
    let mut opts = metrics_server::ServeOptions::default();
    if args.metrics_secure {
        let source = match (
            &args.metrics_tls_cert_file,
            &args.metrics_tls_private_key_file,
        ) {
            (Some(cert), Some(key)) => metrics_server::TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => {
                let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
                names.extend(std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()));
                metrics_server::TlsSource::SelfSigned { names }
            }
        };
        opts.tls = Some(
            metrics_server::tls_config(&source)
                .context("--metrics-tls-cert-file / --metrics-tls-private-key-file")?,
        );
        opts.auth = Some(Arc::new(metrics_server::DelegatingAuth::new(
            client.clone(),
            metrics_server::DEFAULT_CACHE_TTL,
        )));
    }
    let scheme = if args.metrics_secure { "https" } else { "http" };
    let url = format!("{scheme}://{bound}{}", metrics_server::METRICS_PATH);
    metrics.set_served_elsewhere(url.clone());
    tracing::info!(
        %url,
        authentication = if args.metrics_secure { "TokenReview + SubjectAccessReview" } else { "none" },
        certificate = match (args.metrics_secure, &args.metrics_tls_cert_file) {
            (false, _) => "none".to_string(),
            (true, Some(f)) => f.display().to_string(),
            (true, None) => "self-signed".to_string(),
        },
        "serving metrics"
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn(metrics_server::serve(
        listener,
        metrics.clone(),
        opts,
        stop.clone(),
    ));
    Ok(Some((stop, task)))
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("received SIGINT"),
        _ = term => tracing::info!("received SIGTERM"),
    }
}

/// `<pod or host name>_<uuid>`, as kube-controller-manager builds its id.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "protection-manager".into());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

fn lease_namespace(args: &RunArgs) -> String {
    manager_namespace(args.leader_elect_resource_namespace.clone())
}

/// An explicit namespace, else $POD_NAMESPACE, else the in-cluster service
/// account's namespace, else `default`.
pub fn manager_namespace(explicit: Option<String>) -> String {
    explicit
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .or_else(|| {
            std::fs::read_to_string(IN_CLUSTER_NAMESPACE)
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The finalizers of the selected controllers that are new in the running
/// (emulated) release: the release before never removes them, so the
/// release guard records a minimum release while they may be on objects
/// (protection_host::release_guard). Addition is on when the controller's
/// gate is (a controller without a gate always adds). The rules controller
/// is counted through its rules: `rule-cleanup` on a ProtectionRule stands
/// for the rule's finalizer on whatever it protects.
pub fn new_finalizers(
    selected: &[protection_core::ControllerDescriptor],
    gates: &protection_core::FeatureGates,
    profile: protection_core::FinalizerProfile,
) -> Vec<NewFinalizer> {
    let running = gates.emulated_version();
    selected
        .iter()
        .filter(|d| d.since == running && running.previous().is_some() && !d.finalizes.is_empty())
        .map(|d| {
            let gate = d.gates.first().map(|g| g.name);
            NewFinalizer {
                controller: d.name,
                gate: gate.unwrap_or("(none)"),
                finalizer: d.finalizer.get(profile).to_string(),
                adding: gate.is_none_or(|g| gates.enabled(g)),
                finalizes: d.finalizes,
            }
        })
        .collect()
}

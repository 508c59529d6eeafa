//! `protection-manager run`.

use std::sync::Arc;

use anyhow::{Context, Result};
use protection_core::client::{ClientOptions, build_client, load_config};
use protection_core::controllers;
use protection_core::host::{Host, HostConfig, ReleaseGuardConfig};
use protection_core::leader::LeaderElectionConfig;
use protection_core::metrics::Metrics;
use protection_core::release_guard::RecordLocation;
use protection_core::{admin, release};

use crate::cli::RunArgs;
use crate::logging;

const IN_CLUSTER_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

pub async fn run(args: RunArgs) -> Result<()> {
    logging::init(args.log_format, &args.log_level)?;
    let (gates, warnings) = args.gates.gates()?;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let emulated = gates.emulated_version();
    let flag = controllers::parse_flag(&args.controllers);
    let selected = controllers::select(crate::controllers::descriptors(&args)?, &flag, emulated)
        .map_err(|e| anyhow::anyhow!("validation failed for '--controllers': {e}"))?;
    let identity = identity();
    let namespace = lease_namespace(&args);
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

    let opts = ClientOptions {
        kubeconfig: args.client.kubeconfig.clone(),
        context: args.client.context.clone(),
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
        user_agent: format!("protection-manager/{}", env!("CARGO_PKG_VERSION")),
    };
    let config = load_config(&opts)
        .await
        .context("loading the Kubernetes client configuration")?;
    let client = build_client(config, &opts)?;

    let metrics = Metrics::new()?;
    metrics.set_build_info(env!("CARGO_PKG_VERSION"), &gates);
    let listener = admin::bind(args.admin_address).await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        emulated_version = %emulated,
        feature_gates = %gates.summary(),
        controllers = ?selected.iter().map(|d| d.name).collect::<Vec<_>>(),
        admin_address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        leader_elect = args.leader_elect,
        identity = %identity,
        "starting protection-manager"
    );
    if emulated < release::BINARY_VERSION {
        tracing::info!(
            "emulating release {emulated}: gates and controllers behave as in that release"
        );
    }

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
            release_guard: Some(ReleaseGuardConfig {
                location: RecordLocation {
                    namespace,
                    name: args.release_record_name.clone(),
                },
                running: emulated,
                binary_version: env!("CARGO_PKG_VERSION").to_string(),
                skip_check: args.skip_release_check,
            }),
        },
    );
    host.run(listener, selected, shutdown_signal()).await?;
    tracing::info!("protection-manager stopped");
    Ok(())
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

//! `protection-manager release-check`: the release guard as a one-shot
//! command (the chart runs it in a pre-upgrade / pre-rollback hook).

use anyhow::{Context, Result};
use protection_host::client::{ClientOptions, build_client, http2_from_env, load_config};
use protection_host::release_guard::{self, RecordLocation};

use crate::cli::{ClientArgs, ReleaseCheckArgs};
use crate::run::manager_namespace;

/// A client for one-shot commands (no rate limit needed).
pub async fn client(args: &ClientArgs) -> Result<kube::Client> {
    let opts = ClientOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        qps: 0.0,
        burst: 1,
        user_agent: format!("protection-manager/{}", env!("CARGO_PKG_VERSION")),
        request_timeout: args.request_timeout(),
        http2: http2_from_env(),
        http2_connections: protection_host::client::HTTP2_CONNECTIONS,
    };
    let config = load_config(&opts)
        .await
        .context("loading the Kubernetes client configuration")?;
    let (client, _health) = build_client(config, &opts)?;
    Ok(client)
}

/// Returns the line to print on success; an error carries the guard's reason.
pub async fn release_check(args: &ReleaseCheckArgs) -> Result<String> {
    let client = client(&args.client).await?;
    let location = RecordLocation {
        namespace: manager_namespace(args.namespace.clone()),
        name: args.release_record_name.clone(),
    };
    protection_host::names::validate_namespace("--namespace", &location.namespace)?;
    let running = args.emulated_version;
    let recorded = release_guard::read(&client, &location).await?;
    // No record may mean a wrong namespace: one that does not exist is
    // named (a 403 on namespaces, as the chart's hook Job has, tells
    // nothing: the check goes on).
    if recorded.is_none() {
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(client.clone());
        if let Ok(None) = namespaces.get_opt(&location.namespace).await {
            anyhow::bail!(
                "namespace {} does not exist: the release record is kept in the manager's namespace (pass it with --namespace)",
                location.namespace
            );
        }
    }
    match release_guard::check(recorded.as_ref(), running, &location) {
        Ok(()) => Ok(match recorded {
            None => format!(
                "release check passed: no release recorded in ConfigMap {}/{} yet; {running} may run",
                location.namespace, location.name
            ),
            Some(r) => format!(
                "release check passed: this cluster last ran release {}; {running} is at most one release away",
                r.release
            ),
        }),
        Err(e) if args.skip_release_check => {
            Ok(format!("release check skipped (--skip-release-check): {e}"))
        }
        Err(e) => Err(e.into()),
    }
}

//! Command-line interface.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use protection_core::duration::{DurationRange, GO_MAX, parse_duration};
use protection_core::featuregate::FeatureGates;
use protection_core::release::{self, BINARY_VERSION, EMULATION_FLOOR};
use protection_core::version::Version;
use protection_host::{names, ratelimit};

use crate::logging::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "protection-manager",
    version = env!("CARGO_PKG_VERSION"),
    about = "Hosts the protection finalizer controllers (pv-protection, pvc-protection, service-lb-cleanup)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers.
    Run(Box<RunArgs>),
    /// Print every feature gate with its stage, default and lock at a release.
    FeatureGates(FeatureGatesArgs),
    /// Print the binary's version and the releases it can emulate.
    Version,
    /// Check the release guard: may this release run in the cluster? (Exit 0
    /// if so; 1 with the reason if not.) The chart runs it before an upgrade
    /// or a rollback.
    ReleaseCheck(ReleaseCheckArgs),
    /// Remove a controller's finalizer from every object not being deleted
    /// (the safe path before rolling back to a release that does not know
    /// it; turn its gate off first), then clear the release record's
    /// minimum release once no object carries it.
    StripFinalizers(StripFinalizersArgs),
    /// Check `run`'s flags as `run` does before it connects to anything
    /// (exit 0 if `run` would start with them; 1 with the reason if not).
    /// The chart's tests run it on rendered values.
    ValidateConfig(Box<RunArgs>),
    /// Explain why an object is Terminating (or what would hold it):
    /// `explain pvc/data -n demo`, `explain pv/pv-1`, `explain svc/web -n demo`.
    Explain(ExplainArgs),
    /// Liens: "this object may not be deleted while these reasons stand".
    /// The chart's ValidatingAdmissionPolicy refuses the DELETE of an
    /// object with liens (kinds in the chart's liens.resources), naming
    /// each holder and reason; no manager needs to run.
    #[command(subcommand)]
    Lien(LienCommand),
}

#[derive(Debug, Subcommand)]
pub enum LienCommand {
    /// Add a lien (or change its reason): `lien add secrets/db -n shop
    /// --holder backup --reason "nightly snapshot"`.
    Add(LienAddArgs),
    /// Remove the holder's lien: `lien remove secrets/db -n shop --holder
    /// backup`. The object may be deleted once no lien is left.
    Remove(LienRemoveArgs),
    /// List liens: of one object (`lien list secrets/db -n shop`) or of
    /// every object of a kind (`lien list secrets -A`).
    List(LienListArgs),
}

/// The object a lien command acts on.
#[derive(Debug, Clone, Args)]
pub struct LienTarget {
    /// `KIND/NAME` as kubectl names kinds (`secrets/db`, `pvc/data`,
    /// `deployments.apps/web`); `list` also takes `KIND` alone.
    pub target: String,

    /// Namespace of a namespaced object (default `default`).
    #[arg(long, short = 'n', value_parser = namespace_arg)]
    pub namespace: Option<String>,

    #[command(flatten)]
    pub client: ClientArgs,
}

impl LienTarget {
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}

#[derive(Debug, Clone, Args)]
pub struct LienAddArgs {
    #[command(flatten)]
    pub target: LienTarget,

    /// Who holds the lien (a team, tool or ticket: letters, digits, `-_.:/@`).
    #[arg(long)]
    pub holder: String,

    /// Why, in one line; the refusal of a delete shows it.
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Clone, Args)]
pub struct LienRemoveArgs {
    #[command(flatten)]
    pub target: LienTarget,

    /// Whose lien to remove.
    #[arg(long)]
    pub holder: String,
}

#[derive(Debug, Clone, Args)]
pub struct LienListArgs {
    #[command(flatten)]
    pub target: LienTarget,

    /// With `KIND` alone: every namespace.
    #[arg(long, short = 'A', default_value_t = false)]
    pub all_namespaces: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// `<kind>/<name>`; kinds: pvc, pv, svc.
    pub target: String,

    /// Namespace of a PVC or Service (default `default`).
    #[arg(long, short = 'n', value_parser = namespace_arg)]
    pub namespace: Option<String>,

    /// Name of the manager's leader Lease (looked up in every namespace).
    /// Default: any Lease written by protection-manager's leader election.
    #[arg(long, value_parser = object_name_arg)]
    pub lease_name: Option<String>,

    #[command(flatten)]
    pub client: ClientArgs,
}

/// How to reach the cluster.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Path to a kubeconfig. Default: KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,

    /// The length of time to wait before giving up on a single server
    /// request (until its reply starts; a watch until it is open), as
    /// kubectl's flag: a duration (`30s`, `1m`) or whole seconds; 0 waits for
    /// ever.
    #[arg(long, default_value = "30s", value_parser = request_timeout_arg)]
    pub request_timeout: Duration,
}

impl ClientArgs {
    /// `--request-timeout` as the client takes it (`None`: no bound).
    pub fn request_timeout(&self) -> Option<Duration> {
        (!self.request_timeout.is_zero()).then_some(self.request_timeout)
    }
}

#[derive(Debug, Clone, Args)]
pub struct ReleaseCheckArgs {
    /// The release that is about to run.
    #[arg(long, env = "PROTECTION_MANAGER_EMULATED_VERSION", value_parser = version_arg, default_value_t = BINARY_VERSION)]
    pub emulated_version: Version,

    /// Namespace of the release record (the manager's namespace). Default:
    /// $POD_NAMESPACE, else the in-cluster service account's namespace, else
    /// `default`.
    #[arg(long, short = 'n', value_parser = namespace_arg)]
    pub namespace: Option<String>,

    /// Name of the release record ConfigMap.
    #[arg(long, default_value = protection_host::release_guard::DEFAULT_RECORD_NAME, value_parser = object_name_arg)]
    pub release_record_name: String,

    /// Report a skip but succeed anyway.
    #[arg(long, default_value_t = false)]
    pub skip_release_check: bool,

    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, Args)]
pub struct StripFinalizersArgs {
    /// The controller whose finalizer to remove (e.g. vac-protection).
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    pub controller: Option<String>,

    /// Uninstall: every controller's `protection-manager.io/*` finalizer.
    /// Deletes the ProtectionRules (the running manager clears their
    /// finalizers), waits up to --wait for the manager to release the
    /// objects being deleted, scales --deployment to zero, removes the
    /// finalizers from every object not being deleted and from the deleted
    /// ones nothing uses; fails naming each object left, and why.
    #[arg(long, default_value_t = false)]
    pub all: bool,

    /// With --all: how long the running manager gets to clear the rules and
    /// release the objects being deleted, and to stop.
    #[arg(long, default_value = "60s", value_parser = duration_arg, requires = "all")]
    pub wait: Duration,

    /// With --all: the manager's Deployment (in --namespace), scaled to zero
    /// before the finalizers are removed so it does not put them back.
    #[arg(long, value_parser = object_name_arg, requires = "all")]
    pub deployment: Option<String>,

    /// The finalizer names in use (as `run --finalizer-profile`): `project`
    /// or `upstream`.
    #[arg(long, default_value = "project")]
    pub finalizer_profile: protection_core::FinalizerProfile,

    /// Namespace of the release record (the manager's namespace). Default:
    /// $POD_NAMESPACE, else the in-cluster service account's namespace, else
    /// `default`.
    #[arg(long, short = 'n', value_parser = namespace_arg)]
    pub namespace: Option<String>,

    /// Name of the release record ConfigMap.
    #[arg(long, default_value = protection_host::release_guard::DEFAULT_RECORD_NAME, value_parser = object_name_arg)]
    pub release_record_name: String,

    /// Also remove the finalizer from objects still in use (or whose use
    /// cannot be told): they can then be deleted while used. Without it
    /// they are kept, and listed.
    #[arg(long, default_value_t = false)]
    pub strip_from_objects_in_use: bool,

    #[command(flatten)]
    pub client: ClientArgs,
}

fn version_arg(s: &str) -> Result<Version, String> {
    let v: Version = s
        .parse()
        .map_err(|e: protection_core::version::ParseVersionError| e.to_string())?;
    release::validate_emulated_version(v).map_err(|e| e.to_string())
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// `--leader-elect-lease-duration`: what the Lease's
/// `spec.leaseDurationSeconds` (an int32 of seconds) holds.
pub const LEASE_DURATION: DurationRange = DurationRange {
    zero: None,
    min: (Duration::from_secs(2), ""),
    max: (
        protection_host::leader::MAX_LEASE_DURATION,
        "the Lease's spec.leaseDurationSeconds is an int32 of seconds",
    ),
};

/// `--leader-elect-renew-deadline` and `--leader-elect-retry-period`: below
/// the lease duration (checked together at start), so within its range.
pub const LEADER_TIMING: DurationRange = DurationRange {
    zero: None,
    min: (Duration::from_millis(1), ""),
    max: (
        protection_host::leader::MAX_LEASE_DURATION,
        "it must be shorter than the lease duration",
    ),
};

/// `--ping-interval`: each ping is a request to /version.
pub const PING_INTERVAL: DurationRange = DurationRange {
    zero: None,
    min: (
        Duration::from_secs(1),
        "each ping is a request; a shorter interval spends the client's budget on /version",
    ),
    max: GO_MAX,
};

/// An address to listen on: an IP address and a port. A host name is
/// refused saying so (a listener binds an address, and the name could
/// resolve to several).
fn socket_addr_arg(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let example = "e.g. 0.0.0.0:8080, 127.0.0.1:8080 or [::]:8080";
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Err(format!(
            "{host:?} is not an IP address: a listen address is an IP address and a port ({example}), not a host name"
        )),
        _ => Err(format!("expected an IP address and a port ({example})")),
    }
}

fn lease_duration_arg(s: &str) -> Result<Duration, String> {
    LEASE_DURATION.parse(s)
}

fn leader_timing_arg(s: &str) -> Result<Duration, String> {
    LEADER_TIMING.parse(s)
}

fn ping_interval_arg(s: &str) -> Result<Duration, String> {
    PING_INTERVAL.parse(s)
}

/// kubectl's `--request-timeout`: whole seconds, or a duration with a unit.
/// kubectl reads whole seconds as a Go duration (`<n>s`), so it refuses
/// what an int64 of nanoseconds cannot hold, with this message (the
/// chart's check says the same).
pub fn request_timeout_arg(s: &str) -> Result<Duration, String> {
    let d = match s.trim().parse::<u64>() {
        Ok(secs) => Some(Duration::from_secs(secs)).filter(|d| *d <= GO_MAX.0),
        Err(_) => parse_duration(s).ok(),
    };
    d.ok_or_else(|| {
        format!(
            "invalid timeout value {s:?}. Timeout must be a single integer in seconds, or an integer followed by a corresponding time unit (e.g. 1s | 2m | 3h)"
        )
    })
}

/// A namespace: a DNS-1123 label, with apimachinery's message.
fn namespace_arg(s: &str) -> Result<String, String> {
    let errs = names::dns1123_label_errors(s);
    if errs.is_empty() {
        Ok(s.to_owned())
    } else {
        Err(errs.join(", "))
    }
}

/// A ConfigMap or Lease name: a DNS-1123 subdomain, with apimachinery's
/// message.
fn object_name_arg(s: &str) -> Result<String, String> {
    let errs = names::dns1123_subdomain_errors(s);
    if errs.is_empty() {
        Ok(s.to_owned())
    } else {
        Err(errs.join(", "))
    }
}

/// `--kube-api-qps`: 0 (no limit) or a finite rate in range.
fn qps_arg(s: &str) -> Result<f64, String> {
    let qps: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    ratelimit::validate_qps(qps).map_err(|e| e.to_string())
}

/// `--log-level`: a level, or comma-separated tracing directives. A bare
/// word that is not a level is refused: tracing would read it as a target
/// name and log nothing a user expects (`--log-level=verbose`).
pub fn log_level_arg(s: &str) -> Result<String, String> {
    crate::logging::validate_level(s)?;
    Ok(s.to_owned())
}

#[derive(Debug, Clone, Args)]
pub struct GateArgs {
    /// The release to behave as, `major.minor`, from the emulation floor up to
    /// this binary's release. Gates and controllers take their state at that
    /// release.
    #[arg(long, env = "PROTECTION_MANAGER_EMULATED_VERSION", value_parser = version_arg, default_value_t = BINARY_VERSION)]
    pub emulated_version: Version,

    /// A set of key=value pairs that describe feature gates for alpha/beta
    /// features, e.g. `StorageObjectInUseProtection=true`. Run
    /// `protection-manager feature-gates` to list them.
    #[arg(long, env = "PROTECTION_MANAGER_FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
}

impl GateArgs {
    /// Resolves the gates; errors carry upstream's texts, prefixed the way
    /// pflag reports a bad flag value.
    pub fn gates(&self) -> Result<(FeatureGates, Vec<String>)> {
        let mut gates = crate::controllers::gates_at(self.emulated_version)?;
        let warnings = gates.set_from_flag(&self.feature_gates).map_err(|e| {
            anyhow::anyhow!(
                "invalid argument {:?} for \"--feature-gates\" flag: {e}",
                self.feature_gates
            )
        })?;
        Ok((gates, warnings))
    }
}

#[derive(Debug, Clone, Args)]
pub struct FeatureGatesArgs {
    #[command(flatten)]
    pub gates: GateArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub gates: GateArgs,

    /// Controllers to run: `*` runs every controller that is on by default,
    /// `name` turns one on, `-name` turns one off (kube-controller-manager
    /// semantics). Known: pv-protection, pvc-protection, service-lb-cleanup.
    #[arg(long, env = "PROTECTION_MANAGER_CONTROLLERS", default_value = "*")]
    pub controllers: String,

    /// Finalizer names: `project` (this project's own names, safe beside
    /// kube-controller-manager and a cloud provider) or `upstream`
    /// (`kubernetes.io/pv-protection`, `kubernetes.io/pvc-protection`,
    /// `service.kubernetes.io/load-balancer-cleanup`, for clusters whose
    /// built-in controllers are disabled).
    #[arg(
        long,
        env = "PROTECTION_MANAGER_FINALIZER_PROFILE",
        default_value = "project"
    )]
    pub finalizer_profile: protection_core::FinalizerProfile,

    #[command(flatten)]
    pub client: ClientArgs,

    /// Client-side request rate limit (requests per second); 0 disables it.
    #[arg(long, default_value_t = 50.0, value_parser = qps_arg)]
    pub kube_api_qps: f64,

    /// Client-side burst allowance.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(ratelimit::MAX_BURST)))]
    pub kube_api_burst: u32,

    /// Request rate limit of the separate client that writes Events
    /// (requests per second; 0 disables it). Events wait in a queue of 1,000
    /// and never delay a finalizer write; when the queue is full they are
    /// dropped and counted (protection_manager_events_dropped_total).
    #[arg(long, default_value_t = 10.0, value_parser = qps_arg)]
    pub event_qps: f64,

    /// Burst allowance of the Events client.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=i64::from(ratelimit::MAX_BURST)))]
    pub event_burst: u32,

    /// Maximum concurrent reconciles per controller.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Log format.
    #[arg(
        long,
        value_enum,
        env = "PROTECTION_MANAGER_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,

    /// Log level, or a tracing filter such as `info,kube=warn`.
    #[arg(long, env = "PROTECTION_MANAGER_LOG_LEVEL", default_value = "info", value_parser = log_level_arg)]
    pub log_level: String,

    /// Address of the admin server (/metrics, /healthz, /readyz): plain HTTP
    /// without authentication, so loopback by default; a pod sets its own
    /// address (the chart does) for the kubelet's probes.
    #[arg(long, default_value = protection_host::admin::DEFAULT_ADDRESS, value_parser = socket_addr_arg)]
    pub admin_address: SocketAddr,

    /// Start a leader election client and gain leadership before running the
    /// controllers (use with more than one replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,

    /// How long non-leaders wait after the last renewal before taking over
    /// (whole seconds, 2s to 2147483647s: the Lease's
    /// spec.leaseDurationSeconds is an int32).
    #[arg(long, default_value = "15s", value_parser = lease_duration_arg)]
    pub leader_elect_lease_duration: Duration,

    /// The leader steps down if it could not renew for this long.
    #[arg(long, default_value = "10s", value_parser = leader_timing_arg)]
    pub leader_elect_renew_deadline: Duration,

    /// How often the leader renews and candidates retry.
    #[arg(long, default_value = "2s", value_parser = leader_timing_arg)]
    pub leader_elect_retry_period: Duration,

    /// Name of the Lease object used for leader election.
    #[arg(long, default_value = "protection-manager", value_parser = object_name_arg)]
    pub leader_elect_resource_name: String,

    /// Namespace of the Lease. Default: $POD_NAMESPACE, else the in-cluster
    /// service account's namespace, else `default`.
    #[arg(long, value_parser = namespace_arg)]
    pub leader_elect_resource_namespace: Option<String>,

    /// Bound on the time controllers get to finish in-flight work after
    /// SIGTERM/SIGINT (keep it below the pod's terminationGracePeriodSeconds).
    #[arg(long, default_value = "15s", value_parser = duration_arg)]
    pub shutdown_grace_period: Duration,

    /// Start even if the cluster last ran a release more than one step away
    /// (for experts: a skip can strand finalizers; see the README).
    #[arg(long, default_value_t = false)]
    pub skip_release_check: bool,

    /// Name of the ConfigMap (in the lease namespace) that records the release
    /// last run in this cluster.
    #[arg(long, default_value = protection_host::release_guard::DEFAULT_RECORD_NAME, value_parser = object_name_arg)]
    pub release_record_name: String,

    /// How often the API server is pinged for the readiness check (at
    /// least 1s: each ping is a request).
    #[arg(long, default_value = "5s", value_parser = ping_interval_arg, hide = true)]
    pub ping_interval: Duration,

    /// Each controller crate's own flags, under its heading: the table in
    /// `controllers.rs` adds them.
    #[command(flatten)]
    pub controller_flags: crate::controllers::Flags,

    /// Serve /metrics on this address instead of the admin server (which then
    /// answers 404 there), over HTTPS with authentication unless
    /// --metrics-secure=false. Unset: /metrics stays on the admin server.
    #[arg(long, help_heading = "Metrics serving", value_parser = socket_addr_arg)]
    pub metrics_bind_address: Option<SocketAddr>,

    /// On --metrics-bind-address: HTTPS, and every scrape authenticated by a
    /// TokenReview of its bearer token and authorized by a
    /// SubjectAccessReview (get on the non-resource URL /metrics), as
    /// kube-controller-manager does. false: plain HTTP, anyone may read.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", help_heading = "Metrics serving")]
    pub metrics_secure: bool,

    /// PEM certificate (chain) of the metrics server. Default: a self-signed
    /// certificate generated at start.
    #[arg(long, requires_all = ["metrics_tls_private_key_file", "metrics_bind_address"], help_heading = "Metrics serving")]
    pub metrics_tls_cert_file: Option<PathBuf>,

    /// PEM private key of --metrics-tls-cert-file.
    #[arg(
        long,
        requires = "metrics_tls_cert_file",
        help_heading = "Metrics serving"
    )]
    pub metrics_tls_private_key_file: Option<PathBuf>,
}

pub fn version_text() -> String {
    format!(
        "protection-manager {} (release {BINARY_VERSION}; can emulate releases {EMULATION_FLOOR} to {BINARY_VERSION})",
        env!("CARGO_PKG_VERSION")
    )
}

/// The `feature-gates` table.
pub fn feature_gates(args: &FeatureGatesArgs) -> Result<String> {
    let (gates, warnings) = args.gates.gates().context("resolving feature gates")?;
    let mut out = String::new();
    for w in warnings {
        let _ = writeln!(out, "# {w}");
    }
    let _ = writeln!(
        out,
        "# feature gates at release {}",
        gates.emulated_version()
    );
    let rows = gates.table();
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        out,
        "{:<width$}  {:<10}  {:<7}  {:<6}  {:<7}  SINCE",
        "NAME", "STAGE", "DEFAULT", "LOCKED", "ENABLED"
    );
    for r in rows {
        let since = r.since.map_or_else(|| "-".to_string(), |v| v.to_string());
        let _ = writeln!(
            out,
            "{:<width$}  {:<10}  {:<7}  {:<6}  {:<7}  {since}",
            r.name,
            r.stage.as_str(),
            r.default,
            r.locked,
            r.enabled
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("protection-manager").chain(args.iter().copied()))
    }

    /// Issue 27, bug 5 and the interval floors (`make fuzz`): every duration
    /// flag either refuses a value, naming itself, or takes one its
    /// consumer holds.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn run_args(flag: &str, value: &str) -> Result<RunArgs, String> {
            match parse(&["run", &format!("--{flag}={value}")]) {
                Ok(Cli {
                    command: Command::Run(r),
                    ..
                }) => Ok(*r),
                Ok(_) => Err("not run".into()),
                Err(e) => Err(e.to_string()),
            }
        }

        /// A duration flag: its name, how to read it back, its range and
        /// whether 0 means "off".
        struct Flag {
            name: &'static str,
            get: fn(&RunArgs) -> Duration,
            min: Duration,
            max: Duration,
            zero_ok: bool,
        }

        /// Go's own maximum (any flag parsed as a Go duration).
        const GO: Duration = GO_MAX.0;

        proptest! {
            /// Every duration flag of `run` (each crate's too) and the
            /// client's `--request-timeout`.
            #[test]
            fn duration_flags_take_only_what_their_consumers_hold(
                value in "[0-9]{1,13}(\\.[0-9]{0,3})?(ns|us|ms|s|m|h)|0|[0-9]{1,20}",
            ) {
                let lease = protection_host::leader::MAX_LEASE_DURATION;
                let checks = [
                    Flag { name: "leader-elect-lease-duration", get: |r| r.leader_elect_lease_duration, min: Duration::from_secs(2), max: lease, zero_ok: false },
                    Flag { name: "leader-elect-renew-deadline", get: |r| r.leader_elect_renew_deadline, min: Duration::from_millis(1), max: lease, zero_ok: false },
                    Flag { name: "leader-elect-retry-period", get: |r| r.leader_elect_retry_period, min: Duration::from_millis(1), max: lease, zero_ok: false },
                    Flag { name: "ping-interval", get: |r| r.ping_interval, min: Duration::from_secs(1), max: GO, zero_ok: false },
                    Flag { name: "shutdown-grace-period", get: |r| r.shutdown_grace_period, min: Duration::ZERO, max: GO, zero_ok: true },
                    Flag { name: "storage-protection-resync-period", get: |r| r.controller_flags.of::<pv_protection::Options>().unwrap().resync_period, min: Duration::from_secs(1), max: GO, zero_ok: true },
                    Flag { name: "lb-resync-period", get: |r| r.controller_flags.of::<lb_cleanup::Options>().unwrap().lb_resync_period, min: Duration::from_secs(1), max: GO, zero_ok: true },
                    Flag { name: "lb-provider-connect-timeout", get: |r| r.controller_flags.of::<lb_cleanup::Options>().unwrap().lb_provider_connect_timeout, min: Duration::ZERO, max: GO, zero_ok: true },
                    Flag { name: "lb-provider-request-timeout", get: |r| r.controller_flags.of::<lb_cleanup::Options>().unwrap().lb_provider_request_timeout, min: Duration::ZERO, max: GO, zero_ok: true },
                    Flag { name: "vac-protection-resync-period", get: |r| r.controller_flags.of::<vac_protection::Options>().unwrap().resync_period, min: Duration::from_secs(1), max: GO, zero_ok: true },
                    Flag { name: "service-cidr-resync-period", get: |r| r.controller_flags.of::<service_cidr_protection::Options>().unwrap().resync_period, min: Duration::from_secs(1), max: GO, zero_ok: true },
                    // kubectl's: whole seconds or a Go duration; 0 waits for
                    // ever. kubectl refuses what Go's int64 of nanoseconds
                    // cannot hold.
                    Flag { name: "request-timeout", get: |r| r.client.request_timeout, min: Duration::ZERO, max: GO, zero_ok: true },
                ];
                for f in checks {
                    match run_args(f.name, &value) {
                        Ok(r) => {
                            let d = (f.get)(&r);
                            prop_assert!(
                                (f.zero_ok && d.is_zero()) || (d >= f.min && d <= f.max),
                                "--{}={value} -> {d:?}", f.name
                            );
                        }
                        Err(e) => prop_assert!(e.contains(&format!("--{}", f.name)), "{e}"),
                    }
                }
            }

            /// Issue 27, bug 4 (names in CLI input): a namespace or object
            /// name a flag accepts is one plain path segment (kube-rs puts
            /// namespaces in paths verbatim): no `/`, `?`, `#`, `%`, and not
            /// `.` or `..`. The alphabet mixes a name's characters with
            /// those that would change a URL, so accepted values are common.
            #[test]
            fn names_a_flag_accepts_are_plain_path_segments(
                value in "[a-z0-9.\\-/?#%&=:@ A-Z_]{0,24}|[a-z0-9]{1,3}(\\.\\.|/|\\?watch=true|#x|%2F)?[a-z0-9.]{0,3}",
            ) {
                for (what, r) in [("namespace", namespace_arg(&value)), ("object name", object_name_arg(&value))] {
                    if let Ok(v) = r {
                        prop_assert_eq!(&v, &value);
                        prop_assert_eq!(protection_host::names::escape_path_segment(&v), value.clone(), "{} {:?}", what, value);
                        prop_assert!(v != "." && v != "..", "{} {:?}", what, v);
                    }
                }
            }
        }
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn feature_gates_table_at_0_1_shows_alpha_default_false() {
        let Command::FeatureGates(a) = parse(&["feature-gates", "--emulated-version=0.1"])
            .unwrap()
            .command
        else {
            panic!("wrong subcommand");
        };
        let table = feature_gates(&a).unwrap();
        for gate in [
            "StorageObjectInUseProtection",
            "ServiceLoadBalancerFinalizer",
        ] {
            let line = table.lines().find(|l| l.starts_with(gate)).unwrap();
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(
                cols,
                vec![gate, "ALPHA", "false", "false", "false", "0.1"],
                "{table}"
            );
        }
    }

    #[test]
    fn emulated_version_out_of_range_names_the_range() {
        let e = parse(&["run", "--emulated-version=9.9"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("emulation version 9.9 is not between [0.0, 0.5]"),
            "{e}"
        );
        let e = parse(&["run", "--emulated-version=abc"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid version \"abc\""), "{e}");
    }

    #[test]
    fn leader_elect_takes_an_optional_bool() {
        let get = |args: &[&str]| match parse(args).unwrap().command {
            Command::Run(r) => r.leader_elect,
            _ => unreachable!(),
        };
        assert!(get(&["run"]));
        assert!(get(&["run", "--leader-elect"]));
        assert!(!get(&["run", "--leader-elect=false"]));
    }

    #[test]
    fn admin_address_defaults_to_loopback() {
        let Command::Run(r) = parse(&["run"]).unwrap().command else {
            unreachable!()
        };
        assert!(r.admin_address.ip().is_loopback(), "{}", r.admin_address);
        assert_eq!(r.admin_address.port(), 8080);
        assert!(r.metrics_bind_address.is_none());
        assert!(r.metrics_secure);
    }

    #[test]
    fn metrics_certificate_flags_come_in_pairs_with_an_address() {
        assert!(
            parse(&[
                "run",
                "--metrics-bind-address=127.0.0.1:8443",
                "--metrics-tls-cert-file=/c"
            ])
            .is_err()
        );
        assert!(
            parse(&[
                "run",
                "--metrics-tls-cert-file=/c",
                "--metrics-tls-private-key-file=/k"
            ])
            .is_err()
        );
        assert!(
            parse(&[
                "run",
                "--metrics-bind-address=127.0.0.1:8443",
                "--metrics-tls-cert-file=/c",
                "--metrics-tls-private-key-file=/k"
            ])
            .is_ok()
        );
    }

    #[test]
    fn durations_use_go_syntax() {
        let Command::Run(r) = parse(&[
            "run",
            "--leader-elect-lease-duration=1m",
            "--shutdown-grace-period=500ms",
        ])
        .unwrap()
        .command
        else {
            unreachable!()
        };
        assert_eq!(r.leader_elect_lease_duration, Duration::from_secs(60));
        assert_eq!(r.shutdown_grace_period, Duration::from_millis(500));
        assert!(parse(&["run", "--leader-elect-retry-period=2"]).is_err());
    }
}

//! Flags and the controller descriptor the manager runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use protection_core::finalizer::{PROJECT_DOMAIN, validate_finalizer_name};
use protection_core::release::{CONTROLLERS_SINCE, GateDecl, PHASED_ADD};
use protection_core::{
    ControllerDescriptor, ControllerInfo, FinalizedResource, FinalizerNames, FinalizerProfile,
    PolicyRule,
};

use crate::controller::{self, Settings};
use crate::predicates::ClassSelector;
use crate::provider::LoadBalancerProvider;
use crate::provider::http::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, HttpProvider, HttpProviderConfig,
};

/// The controller's name (`--controllers`).
pub const CONTROLLER_NAME: &str = "service-lb-cleanup";

/// Gates the Service load-balancer cleanup finalizer *addition* (removal is
/// never gated).
pub const SERVICE_LOAD_BALANCER_FINALIZER: GateDecl = GateDecl {
    name: "ServiceLoadBalancerFinalizer",
    history: PHASED_ADD,
};

/// The gates the controller reads.
pub const GATES: &[GateDecl] = &[SERVICE_LOAD_BALANCER_FINALIZER];
/// cloud-controller-manager's name for the upstream controller.
pub const CONTROLLER_ALIASES: &[&str] = &["service-lb-controller"];

/// The load-balancer class the manager takes by default.
pub const DEFAULT_CLASS: &str = "protection-manager.io/load-balancer";

/// The finalizer under [`FinalizerProfile::Project`] (the default).
///
/// Why not the upstream name by default: upstream's `needsCleanup` ignores
/// `loadBalancerClass`. A cloud-controller-manager running in the same
/// cluster would see *our* Services carrying
/// `service.kubernetes.io/load-balancer-cleanup` and, the moment one is
/// deleted or changes type, take its cleanup branch: ask *its* cloud for a
/// load balancer (none), remove the finalizer and let the Service go, while
/// our load balancer is still there. With a name of our own nobody else
/// touches it.
pub const PROJECT_FINALIZER: &str = "protection-manager.io/load-balancer-cleanup";
/// The finalizer under [`FinalizerProfile::Upstream`], for clusters where no
/// cloud-controller-manager runs the service controller.
pub const UPSTREAM_FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

/// The finalizer name of a profile.
pub fn finalizer_name(profile: FinalizerProfile) -> &'static str {
    INFO.finalizer.get(profile)
}

/// The controllers of this crate, as the manager knows them.
pub const INFOS: &[&ControllerInfo] = &[&INFO];

/// The controller as the manager knows it without starting it. RBAC as
/// upstream's `system:controller:service-controller` less what we do not
/// do: no `services` writes (the finalizer goes through `services/status`,
/// docs/upstream-semantics.md §5.1).
pub const INFO: ControllerInfo = ControllerInfo {
    name: CONTROLLER_NAME,
    aliases: CONTROLLER_ALIASES,
    enabled_by_default: true,
    since: CONTROLLERS_SINCE,
    gates: GATES,
    finalizer: FinalizerNames {
        project: PROJECT_FINALIZER,
        upstream: UPSTREAM_FINALIZER,
    },
    rbac: &[
        PolicyRule {
            api_groups: &[""],
            resources: &["services"],
            verbs: &["get", "list", "watch"],
        },
        PolicyRule {
            api_groups: &[""],
            resources: &["services/status"],
            verbs: &["patch"],
        },
        PolicyRule {
            api_groups: &[""],
            resources: &["nodes"],
            verbs: &["list", "watch"],
        },
    ],
    finalizes: &[FinalizedResource {
        group: "",
        versions: &["v1"],
        kind: "Service",
        plural: "services",
        cleared_by_deleting: false,
    }],
};

fn timeout_arg(s: &str) -> Result<Duration, String> {
    protection_core::duration::parse_duration(s).map_err(|e| e.to_string())
}

fn resync_arg(s: &str) -> Result<Duration, String> {
    protection_core::duration::RESYNC_PERIOD.parse(s)
}

/// Flags of the service-lb-cleanup controller (flattened into
/// `protection-manager run`).
#[derive(Clone, Debug, clap::Args)]
#[group(id = "lb-cleanup")]
pub struct Options {
    /// The `spec.loadBalancerClass` of the Services this manager serves.
    /// Services of other classes are left to their controllers.
    #[arg(long = "lb-class", env = "PROTECTION_MANAGER_LB_CLASS", default_value = DEFAULT_CLASS)]
    pub lb_class: String,

    /// Also serve `type: LoadBalancer` Services that have no
    /// `spec.loadBalancerClass`. Only for clusters without a cloud provider's
    /// load-balancer controller (kind, bare metal): elsewhere both would act
    /// on the same Services.
    #[arg(long = "lb-include-unclassed", env = "PROTECTION_MANAGER_LB_INCLUDE_UNCLASSED", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub lb_include_unclassed: bool,

    /// Base URL of the load-balancer API (the HTTP provider contract,
    /// docs/lb-provider-http-contract.md). Without it the controller does not
    /// run, as upstream's does not without a cloud load-balancer interface:
    /// no finalizer is added or removed.
    #[arg(
        long = "lb-provider-endpoint",
        env = "PROTECTION_MANAGER_LB_PROVIDER_ENDPOINT"
    )]
    pub lb_provider_endpoint: Option<String>,

    /// File holding the bearer token for the load-balancer API (e.g. a
    /// mounted Secret key); re-read when it changes.
    #[arg(
        long = "lb-provider-token-file",
        env = "PROTECTION_MANAGER_LB_PROVIDER_TOKEN_FILE"
    )]
    pub lb_provider_token_file: Option<PathBuf>,

    /// Time to establish a connection to the load-balancer API.
    #[arg(long = "lb-provider-connect-timeout", default_value = "5s", value_parser = timeout_arg)]
    pub lb_provider_connect_timeout: Duration,

    /// Time for one load-balancer API call, reply included.
    #[arg(long = "lb-provider-request-timeout", default_value = "30s", value_parser = timeout_arg)]
    pub lb_provider_request_timeout: Duration,

    /// How often Services still holding the finalizer while deleted or no
    /// longer load balancers are synced again regardless of their backoff
    /// (upstream's 30 s informer resync, which only re-drives cleanups).
    /// 0 disables it; otherwise at least 1s (client-go's minimum resync
    /// period).
    #[arg(long = "lb-resync-period", default_value = "30s", value_parser = resync_arg)]
    pub lb_resync_period: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            lb_class: DEFAULT_CLASS.into(),
            lb_include_unclassed: false,
            lb_provider_endpoint: None,
            lb_provider_token_file: None,
            lb_provider_connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            lb_provider_request_timeout: DEFAULT_REQUEST_TIMEOUT,
            lb_resync_period: Duration::from_secs(30),
        }
    }
}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

/// Kubernetes' rule for `spec.loadBalancerClass`: a label-style key
/// (`name` or `prefix/name`, prefix a DNS subdomain).
fn validate_class(class: &str) -> Result<(), ConfigError> {
    let bad = |why: &str| {
        Err(ConfigError::Invalid(format!(
            "invalid --lb-class {class:?}: {why}"
        )))
    };
    if class.is_empty() {
        return bad("must not be empty");
    }
    if class.len() > 316 {
        return bad("must be at most 316 characters");
    }
    // validate_finalizer_name checks exactly `prefix/name` qualified names.
    let qualified = if class.contains('/') {
        class.to_owned()
    } else {
        format!("{PROJECT_DOMAIN}/{class}")
    };
    if let Err(e) = validate_finalizer_name(&qualified) {
        let why = e.to_string();
        let reason = why.rsplit_once(": ").map_or(why.as_str(), |(_, r)| r);
        return bad(&format!(
            "must be a label-style key such as \"example.com/internal-vip\" ({reason})"
        ));
    }
    Ok(())
}

impl Options {
    /// Checks the flags and builds the provider (reading the token file).
    pub fn settings(&self, profile: FinalizerProfile) -> Result<Settings, ConfigError> {
        validate_class(&self.lb_class)?;
        if self.lb_provider_token_file.is_some() && self.lb_provider_endpoint.is_none() {
            return Err(ConfigError::Invalid(
                "--lb-provider-token-file needs --lb-provider-endpoint".into(),
            ));
        }
        for (flag, d) in [
            (
                "--lb-provider-connect-timeout",
                self.lb_provider_connect_timeout,
            ),
            (
                "--lb-provider-request-timeout",
                self.lb_provider_request_timeout,
            ),
        ] {
            if d.is_zero() {
                return Err(ConfigError::Invalid(format!("{flag} must be more than 0")));
            }
        }
        let provider: Option<Arc<dyn LoadBalancerProvider>> = match &self.lb_provider_endpoint {
            None => None,
            Some(endpoint) => {
                let mut cfg = HttpProviderConfig::new(endpoint.clone()).with_timeouts(
                    self.lb_provider_connect_timeout,
                    self.lb_provider_request_timeout,
                );
                if let Some(t) = &self.lb_provider_token_file {
                    cfg = cfg.with_token_file(t.clone());
                }
                let p = HttpProvider::new(cfg).map_err(|e| ConfigError::Invalid(e.to_string()))?;
                for w in credential_warnings(&p) {
                    tracing::warn!(endpoint = %p.endpoint(), "{w}");
                }
                Some(Arc::new(p))
            }
        };
        Ok(Settings {
            classes: ClassSelector {
                class: self.lb_class.clone(),
                include_unclassed: self.lb_include_unclassed,
            },
            finalizer: finalizer_name(profile).to_owned(),
            provider,
            resync_period: (!self.lb_resync_period.is_zero()).then_some(self.lb_resync_period),
        })
    }
}

/// What is unsafe or unusual about how the provider authenticates, to warn
/// about at start-up.
pub fn credential_warnings(p: &HttpProvider) -> Vec<String> {
    let mut out = Vec::new();
    let token = p.token_file().is_some();
    let userinfo = p.endpoint_has_credentials();
    if p.endpoint_is_plain_http() && (token || userinfo) {
        out.push(format!(
            "--lb-provider-endpoint is plain http://: the {} travels unencrypted and anyone on the network path can read it; use https://",
            if token { "bearer token" } else { "password in the URL" }
        ));
    }
    if !token && !userinfo {
        out.push(
            "no --lb-provider-token-file: calls to the load-balancer API carry no credentials"
                .to_owned(),
        );
    }
    out
}

/// The controllers of this crate: `service-lb-cleanup`.
pub fn descriptors(
    opts: &Options,
    profile: FinalizerProfile,
) -> Result<Vec<ControllerDescriptor>, ConfigError> {
    let settings = opts.settings(profile)?;
    Ok(vec![ControllerDescriptor {
        info: &INFO,
        run: Box::new(move |ctx| Box::pin(controller::run(ctx, settings))),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        lb: Options,
    }

    #[test]
    fn argument_ids_are_prefixed_so_they_flatten_beside_other_controllers() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        for a in Cli::command().get_arguments() {
            let id = a.get_id().as_str();
            assert!(id.starts_with("lb_"), "{id}");
            assert!(a.get_long().is_some_and(|l| l.starts_with("lb-")), "{id}");
        }
    }

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).map(|c| c.lb)
    }

    #[test]
    fn defaults() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.lb_class, DEFAULT_CLASS);
        assert!(!o.lb_include_unclassed);
        assert_eq!(o.lb_provider_endpoint, None);
        assert_eq!(o.lb_provider_request_timeout, Duration::from_secs(30));
        assert_eq!(o.lb_resync_period, Duration::from_secs(30));
        let s = o.settings(FinalizerProfile::Project).unwrap();
        assert_eq!(s.finalizer, PROJECT_FINALIZER);
        assert!(s.provider.is_none());
        let s = o.settings(FinalizerProfile::Upstream).unwrap();
        assert_eq!(s.finalizer, UPSTREAM_FINALIZER);
        for f in [PROJECT_FINALIZER, UPSTREAM_FINALIZER] {
            assert!(validate_finalizer_name(f).is_ok());
        }
    }

    #[test]
    fn flags_parse() {
        let o = parse(&[
            "--lb-class=example.com/vip",
            "--lb-include-unclassed",
            "--lb-provider-endpoint=http://127.0.0.1:9/api/",
            "--lb-provider-request-timeout=1m30s",
            "--lb-resync-period=0",
        ])
        .unwrap();
        assert!(o.lb_include_unclassed);
        assert_eq!(o.lb_provider_request_timeout, Duration::from_secs(90));
        let s = o.settings(FinalizerProfile::Project).unwrap();
        assert_eq!(s.classes.class, "example.com/vip");
        assert!(s.provider.is_some());
        assert_eq!(s.resync_period, None);
        assert!(parse(&["--lb-include-unclassed=false"]).is_ok());
        assert!(parse(&["--lb-provider-connect-timeout=5"]).is_err());
    }

    #[test]
    fn bad_settings_name_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--lb-class="],
                "invalid --lb-class \"\": must not be empty",
            ),
            (
                &["--lb-class=Bad_Domain/x"],
                "invalid --lb-class \"Bad_Domain/x\": must be a label-style key",
            ),
            (
                &["--lb-provider-endpoint=ftp://x/"],
                "must be an http:// or https:// URL",
            ),
            (
                &["--lb-provider-token-file=/tmp/x"],
                "--lb-provider-token-file needs --lb-provider-endpoint",
            ),
            (
                &[
                    "--lb-provider-endpoint=http://127.0.0.1:9/",
                    "--lb-provider-token-file=/nonexistent/token",
                ],
                "/nonexistent/token",
            ),
            (
                &[
                    "--lb-provider-endpoint=http://127.0.0.1:9/",
                    "--lb-provider-request-timeout=0",
                ],
                "--lb-provider-request-timeout must be more than 0",
            ),
        ];
        for (args, want) in cases {
            let e = parse(args)
                .unwrap()
                .settings(FinalizerProfile::Project)
                .err()
                .unwrap_or_else(|| panic!("{args:?} should fail"))
                .to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        // Unprefixed classes are label-style keys too.
        assert!(validate_class("internal-vip").is_ok());
    }

    #[test]
    fn credentials_are_warned_about_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t0ken").unwrap();
        let provider = |endpoint: &str, token_file: Option<&std::path::Path>| {
            let mut cfg = HttpProviderConfig::new(endpoint);
            if let Some(t) = token_file {
                cfg = cfg.with_token_file(t);
            }
            HttpProvider::new(cfg).unwrap()
        };
        let w = credential_warnings(&provider("http://lb.example/", Some(&token)));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("plain http://: the bearer token travels unencrypted"),
            "{w:?}"
        );
        let p = provider("http://admin:s3cret@lb.example/", None);
        let w = credential_warnings(&p);
        assert!(
            w[0].contains("the password in the URL travels unencrypted"),
            "{w:?}"
        );
        assert_eq!(p.endpoint(), "http://admin:***@lb.example/");
        assert!(!format!("{p:?}").contains("s3cret"));
        let w = credential_warnings(&provider("https://lb.example/", None));
        assert_eq!(
            w,
            ["no --lb-provider-token-file: calls to the load-balancer API carry no credentials"]
        );
        assert!(credential_warnings(&provider("https://lb.example/", Some(&token))).is_empty());
        // A malformed URL with a password is refused without showing it.
        let e = HttpProvider::new(HttpProviderConfig::new("http://admin:pa/ss@lb.example/"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("pa/ss") && !e.contains("admin:pa"), "{e}");
    }

    #[test]
    fn descriptor_matches_the_brief() {
        let d = descriptors(&Options::default(), FinalizerProfile::Project).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "service-lb-cleanup");
        assert_eq!(d[0].aliases, ["service-lb-controller"]);
        assert!(d[0].enabled_by_default);
        assert_eq!(d[0].since, CONTROLLERS_SINCE);
        assert_eq!(d[0].gates.len(), 1);
        assert_eq!(d[0].gates[0].name, "ServiceLoadBalancerFinalizer");
    }
}

//! service-cidr-protection: the ServiceCIDR finalizer controller, ported
//! from kube-controller-manager's `service-cidr-controller`
//! (`pkg/controller/servicecidrs`, Kubernetes 1.36) onto core's in-use
//! engine ([`controller`]).
//!
//! * A ServiceCIDR (networking.k8s.io/v1) is held while an IPAddress the API
//!   server's allocator manages would be left without a range
//!   ([`cidr::blocking_ips`]), and carries `Ready=True` otherwise.
//! * Finalizer names follow the [`FinalizerProfile`]:
//!   `protection-manager.io/service-cidr-protection` by default, upstream's
//!   `networking.k8s.io/service-cidr-finalizer` with the `upstream` profile
//!   (for clusters that run kube-controller-manager with
//!   `--controllers=*,-service-cidr-controller`).
//! * New in release 0.5, its finalizer's addition behind the gate
//!   `MultiCIDRServiceAllocator` (named after upstream's, under which KCM
//!   runs the controller): Alpha and off at 0.5, planned Beta at 0.6 and GA
//!   at 0.7. Removal is never gated.

pub mod cidr;
pub mod controller;
pub mod explain;
pub mod index;

use protection_core::{
    ControllerDescriptor, ControllerInfo, FinalizedResource, FinalizerProfile, PolicyRule,
};

use protection_core::runtime::descriptor;
pub use protection_core::runtime::{ReconcileError as Error, Settings};

/// service-cidr-protection as the manager knows it (RBAC as upstream's
/// `system:controller:service-cidrs-controller`, with `patch` for our
/// guarded finalizer writes and the status apply).
pub const INFO: ControllerInfo = ControllerInfo {
    rbac: &[
        PolicyRule::finalized(&["networking.k8s.io"], &["servicecidrs"]),
        PolicyRule::new(&["networking.k8s.io"], &["servicecidrs/status"], &["patch"]),
        PolicyRule::watched(&["networking.k8s.io"], &["ipaddresses"]),
    ],
    finalizes: &[FinalizedResource::stripped(
        "networking.k8s.io",
        &["v1"],
        "ServiceCIDR",
        "servicecidrs",
    )],
    ..ControllerInfo::new(
        controller::NAME,
        &[controller::ALIAS],
        SERVICE_CIDR_SINCE,
        GATES,
        (
            "protection-manager.io/service-cidr-protection",
            "networking.k8s.io/service-cidr-finalizer",
        ),
    )
};

protection_core::phased_gate! {
    /// The release that brings service-cidr-protection.
    since SERVICE_CIDR_SINCE = (0, 5);
    /// The train of the ServiceCIDR finalizer's addition: Alpha off at 0.5,
    /// planned Beta on at 0.6 and GA locked on at 0.7.
    train SERVICE_CIDR_PHASED_ADD;
    /// Gates the ServiceCIDR finalizer's *addition* (removal is never gated).
    gate MULTI_CIDR_SERVICE_ALLOCATOR = "MultiCIDRServiceAllocator";
}

/// The controllers of this crate, as the manager knows them.
pub const INFOS: &[&ControllerInfo] = &[&INFO];

/// Default of `--service-cidr-resync-period`.
pub use protection_core::runtime::DEFAULT_RESYNC_PERIOD;

protection_core::resync_options! {
    /// Flags of service-cidr-protection (flattened into `protection-manager
    /// run`).
    group = "service-cidr-protection",
    /// How often service-cidr-protection re-checks every ServiceCIDR being
    /// deleted with its finalizer (or lacking it, or its Ready condition),
    /// as upstream's informer resync does. Re-checks read the caches. `0`
    /// disables it; otherwise at least 1s (client-go's minimum resync
    /// period).
    id = "service_cidr_resync_period",
    flag = "service-cidr-resync-period",
}

/// Why the descriptors could not be built.
pub use protection_core::runtime::ConfigError;

/// The controller of this crate, from its own flags.
pub fn descriptors(
    opts: &Options,
    profile: FinalizerProfile,
) -> Result<Vec<ControllerDescriptor>, ConfigError> {
    let d = descriptor(&INFO, profile, opts.resync_period, controller::run)?;
    Ok(vec![d])
}

#[cfg(test)]
mod tests {
    use super::*;
    use protection_core::featuregate::Stage;
    use protection_core::version::Version;

    /// Issue 27's interval floors (found by `make fuzz`): the flag took
    /// `1ns`, a resync that spins a core.
    #[test]
    fn the_resync_flag_has_client_gos_floor() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            o: Options,
        }
        let period = |v: &str| {
            Cli::try_parse_from(["x", &format!("--service-cidr-resync-period={v}")])
                .map(|c| c.o.resync_period)
                .map_err(|e| e.to_string())
        };
        assert_eq!(period("0"), Ok(std::time::Duration::ZERO));
        assert_eq!(period("1s"), Ok(std::time::Duration::from_secs(1)));
        for v in ["1ns", "999ms"] {
            let e = period(v).unwrap_err();
            assert!(
                e.contains("--service-cidr-resync-period") && e.contains("at least 1s"),
                "{v}: {e}"
            );
        }
    }

    #[test]
    fn profiles_name_the_finalizer() {
        assert_eq!(
            INFO.finalizer.get(FinalizerProfile::Project),
            "protection-manager.io/service-cidr-protection"
        );
        assert_eq!(
            INFO.finalizer.get(FinalizerProfile::Upstream),
            "networking.k8s.io/service-cidr-finalizer"
        );
    }

    #[test]
    fn the_descriptor_is_new_at_0_5_with_the_upstream_alias() {
        let opts = Options {
            resync_period: std::time::Duration::ZERO,
        };
        let d = descriptors(&opts, FinalizerProfile::Project).unwrap();
        assert_eq!(
            (d[0].name, d[0].aliases, d[0].enabled_by_default, d[0].since),
            (
                NAME_FOR_TEST,
                &["service-cidr-controller"][..],
                true,
                Version::new(0, 5)
            )
        );
    }
    const NAME_FOR_TEST: &str = "service-cidr-protection";

    /// The gates at `release` (the binary is 0.4 until the release that
    /// brings this crate: `gates_at` would refuse 0.5).
    fn at(release: Version) -> protection_core::featuregate::FeatureGates {
        let registry = protection_core::release::registry(GATES).unwrap();
        protection_core::featuregate::FeatureGates::new(registry, release)
    }

    #[test]
    fn the_gate_is_alpha_off_at_0_5_absent_before_with_beta_and_ga_planned() {
        let g = at(Version::new(0, 5));
        let row = g
            .table()
            .into_iter()
            .find(|r| r.name == "MultiCIDRServiceAllocator")
            .unwrap();
        assert_eq!(
            (row.stage, row.default, row.locked),
            (Stage::Alpha, false, false)
        );
        assert!(!at(Version::new(0, 4)).enabled("MultiCIDRServiceAllocator"));
        assert!(at(Version::new(0, 6)).enabled("MultiCIDRServiceAllocator"));
        let planned: Vec<_> = MULTI_CIDR_SERVICE_ALLOCATOR
            .history
            .iter()
            .map(|s| (s.version.to_string(), s.stage))
            .collect();
        assert_eq!(
            planned,
            vec![
                ("0.5".to_string(), Stage::Alpha),
                ("0.6".to_string(), Stage::Beta),
                ("0.7".to_string(), Stage::GA)
            ]
        );
    }

    /// The flag takes what the other resync periods take: 0 (off) or at
    /// least client-go's 1s minimum (it took 500ms, which the chart refuses).
    #[test]
    fn resync_flag_takes_zero_or_at_least_a_second() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            o: Options,
        }
        let period = |arg: &str| {
            Cli::try_parse_from(["x", arg])
                .map(|c| c.o.resync_period)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            Cli::try_parse_from(["x"]).unwrap().o.resync_period,
            DEFAULT_RESYNC_PERIOD
        );
        assert_eq!(
            period("--service-cidr-resync-period=1m30s"),
            Ok(std::time::Duration::from_secs(90))
        );
        assert_eq!(
            period("--service-cidr-resync-period=0"),
            Ok(std::time::Duration::ZERO)
        );
        let e = period("--service-cidr-resync-period=500ms").unwrap_err();
        assert!(e.contains("must be 0 (off) or at least 1s"), "{e}");
    }
}

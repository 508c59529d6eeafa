//! service-cidr-protection: the ServiceCIDR finalizer controller, ported
//! from kube-controller-manager's `service-cidr-controller`
//! (`pkg/controller/servicecidrs`, Kubernetes 1.36) onto core's in-use
//! engine ([`controller`]).
//!
//! * A ServiceCIDR (networking.k8s.io/v1) is held while an IPAddress the API
//!   server's allocator manages would be left without a range
//!   ([`cidr::blocking_ips`]), and carries `Ready=True` otherwise.
//! * Finalizer names follow the [`FinalizerProfile`](protection_core::FinalizerProfile):
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

use protection_core::{ControllerInfo, FinalizedResource, PolicyRule};

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
    controller = INFO => controller::run,
}

#[cfg(test)]
mod tests {
    use super::*;
    use protection_core::FinalizerProfile;
    use protection_core::featuregate::Stage;
    use protection_core::version::Version;

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
}

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

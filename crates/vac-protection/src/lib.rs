//! vac-protection: the VolumeAttributesClass in-use finalizer controller,
//! ported from kube-controller-manager's
//! `volumeattributesclass-protection-controller`
//! (`pkg/controller/volume/vacprotection`; docs/upstream-semantics.md §10).
//!
//! * A VolumeAttributesClass is in use while any PVC names it in
//!   `spec.volumeAttributesClassName`, `status.currentVolumeAttributesClassName`
//!   or `status.modifyVolumeStatus.targetVolumeAttributesClassName`, or any PV
//!   in `spec.volumeAttributesClassName` ([`vac`], [`index`]).
//! * The controller adds its finalizer to classes that lack it and are not
//!   being deleted while the `VolumeAttributesClass` gate is on at the running
//!   (or emulated) release (Alpha and off at 0.4, the release that brings the
//!   controller), and removes it from a deleting class once unused, whatever
//!   the gate says. One request per transition.
//! * Before removing the finalizer the controller confirms with a live LIST of
//!   PVCs and PVs, as pvc-protection does with pods ([`controller`]).
//! * Finalizer names follow the [`FinalizerProfile`](protection_core::FinalizerProfile):
//!   `protection-manager.io/vac-protection` by default, upstream's
//!   `kubernetes.io/vac-protection` with the `upstream` profile (for clusters
//!   that run kube-controller-manager with
//!   `--controllers=*,-volumeattributesclass-protection-controller`).
//! * The class is served as storage.k8s.io/v1 where the cluster has it, else
//!   v1beta1; with neither the controller is idle and says why.
//!
//! # Events
//!
//! Upstream emits none. As pv/pvc-protection, we emit `FinalizerHeld` (naming
//! the claims and volumes that use the class, and the field) and
//! `FinalizerReleased`, at most once per object per change of reason.

pub mod controller;
pub mod explain;
pub mod index;
pub mod objects;
pub mod vac;

use protection_core::{ControllerInfo, FinalizedResource, PolicyRule};

protection_core::phased_gate! {
    /// The release at which vac-protection appeared (remove-only by default).
    since VAC_SINCE = (0, 4);
    /// The train of the VolumeAttributesClass finalizer's addition: Alpha off
    /// at 0.4 (the release that brings the controller, removal always on),
    /// planned Beta on at 0.5 and GA locked on at 0.6.
    train VAC_PHASED_ADD;
    /// Gates the class finalizer's *addition* (removal is never gated). Named
    /// after upstream's gate: kube-controller-manager starts
    /// `volumeattributesclass-protection-controller` only while its
    /// `VolumeAttributesClass` gate is on.
    gate VOLUME_ATTRIBUTES_CLASS = "VolumeAttributesClass";
}

/// vac-protection as the manager knows it without starting it (RBAC as
/// upstream's `system:controller:volumeattributesclass-protection-controller`,
/// with `patch` for our guarded finalizer writes).
pub const INFO: ControllerInfo = ControllerInfo {
    rbac: &[
        PolicyRule::finalized(&["storage.k8s.io"], &["volumeattributesclasses"]),
        PolicyRule::watched(&[""], &["persistentvolumeclaims", "persistentvolumes"]),
    ],
    finalizes: &[FinalizedResource::stripped(
        "storage.k8s.io",
        &["v1", "v1beta1"],
        "VolumeAttributesClass",
        "volumeattributesclasses",
    )],
    ..ControllerInfo::new(
        controller::NAME,
        &[controller::ALIAS],
        VAC_SINCE,
        GATES,
        (
            "protection-manager.io/vac-protection",
            "kubernetes.io/vac-protection",
        ),
    )
};

pub use protection_core::runtime::{ReconcileError as Error, Settings};

protection_core::resync_options! {
    /// Flags of vac-protection (flattened into `protection-manager run`).
    group = "vac-protection",
    /// How often vac-protection re-checks every VolumeAttributesClass being
    /// deleted with its finalizer (or lacking it), as upstream's informer
    /// resync does. Re-checks read the caches: a kept class costs no API
    /// request. `0` disables it; otherwise at least 1s (client-go's minimum
    /// resync period).
    id = "vac_protection_resync_period",
    flag = "vac-protection-resync-period",
    controller = INFO => controller::run,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Its own flag: it read pv/pvc-protection's until 0.5 (the flag's
    /// forms are checked where `resync_options!` declares it).
    #[test]
    fn the_resync_flag_is_its_own() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            o: Options,
        }
        let e = Cli::try_parse_from(["x", "--storage-protection-resync-period=1m"]);
        assert!(e.is_err(), "the storage controllers' flag is not vac's");
    }
}

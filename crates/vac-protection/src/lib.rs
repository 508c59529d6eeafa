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
//! * Finalizer names follow the [`FinalizerProfile`]:
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

use protection_core::featuregate::FeatureSpec;
use protection_core::release::{GateDecl, phased_add_from};
use protection_core::version::Version;
use protection_core::{
    ControllerDescriptor, ControllerInfo, FinalizedResource, FinalizerNames, FinalizerProfile,
    PolicyRule,
};

/// The release at which vac-protection appeared (remove-only by default).
pub const VAC_SINCE: Version = Version::new(0, 4);

/// The train of the VolumeAttributesClass finalizer's addition: Alpha off
/// at 0.4 (the release that brings the controller, removal always on),
/// planned Beta on at 0.5 and GA locked on at 0.6.
pub const VAC_PHASED_ADD: &[FeatureSpec] = &phased_add_from(VAC_SINCE);

/// Gates the class finalizer's *addition* (removal is never gated). Named
/// after upstream's gate: kube-controller-manager starts
/// `volumeattributesclass-protection-controller` only while its
/// `VolumeAttributesClass` gate is on.
pub const VOLUME_ATTRIBUTES_CLASS: GateDecl = GateDecl {
    name: "VolumeAttributesClass",
    history: VAC_PHASED_ADD,
};

/// The gates the controller reads.
pub const GATES: &[GateDecl] = &[VOLUME_ATTRIBUTES_CLASS];

/// vac-protection as the manager knows it without starting it (RBAC as
/// upstream's `system:controller:volumeattributesclass-protection-controller`,
/// with `patch` for our guarded finalizer writes).
pub const INFO: ControllerInfo = ControllerInfo {
    name: controller::NAME,
    aliases: &[controller::ALIAS],
    enabled_by_default: true,
    since: VAC_SINCE,
    gates: GATES,
    finalizer: FinalizerNames {
        project: "protection-manager.io/vac-protection",
        upstream: "kubernetes.io/vac-protection",
    },
    rbac: &[
        PolicyRule {
            api_groups: &["storage.k8s.io"],
            resources: &["volumeattributesclasses"],
            verbs: &["get", "list", "watch", "patch"],
        },
        PolicyRule {
            api_groups: &[""],
            resources: &["persistentvolumeclaims", "persistentvolumes"],
            verbs: &["list", "watch"],
        },
    ],
    finalizes: &[FinalizedResource {
        group: "storage.k8s.io",
        versions: &["v1", "v1beta1"],
        kind: "VolumeAttributesClass",
        plural: "volumeattributesclasses",
        cleared_by_deleting: false,
    }],
};

/// The controllers of this crate, as the manager knows them.
pub const INFOS: &[&ControllerInfo] = &[&INFO];

use protection_core::runtime::descriptor;
pub use protection_core::runtime::{ReconcileError as Error, Settings};

/// Why the descriptors could not be built.
pub use protection_core::runtime::ConfigError;

/// The controller of this crate. It re-checks classes every
/// `resync_period` (the manager passes the storage protection flag,
/// `--storage-protection-resync-period`, shared with pv/pvc-protection).
pub fn descriptors(
    resync_period: std::time::Duration,
    profile: FinalizerProfile,
) -> Result<Vec<ControllerDescriptor>, ConfigError> {
    Ok(vec![descriptor(
        &INFO,
        profile,
        resync_period,
        controller::run,
    )?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use protection_core::featuregate::Stage;
    use protection_core::release::gates_at;
    use protection_core::version::Version;

    #[test]
    fn profiles_name_the_finalizer() {
        assert_eq!(
            INFO.finalizer.get(FinalizerProfile::Project),
            "protection-manager.io/vac-protection"
        );
        assert_eq!(
            INFO.finalizer.get(FinalizerProfile::Upstream),
            "kubernetes.io/vac-protection"
        );
    }

    #[test]
    fn the_descriptor_is_new_at_0_4_with_the_upstream_alias() {
        let d = descriptors(
            std::time::Duration::from_secs(300),
            FinalizerProfile::Project,
        )
        .unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].name, d[0].aliases, d[0].enabled_by_default, d[0].since),
            (
                "vac-protection",
                &["volumeattributesclass-protection-controller"][..],
                true,
                Version::new(0, 4)
            )
        );
    }

    #[test]
    fn the_gate_is_alpha_off_at_0_4_with_beta_and_ga_planned() {
        let g = gates_at(Version::new(0, 4), GATES).unwrap();
        let row = g
            .table()
            .into_iter()
            .find(|r| r.name == "VolumeAttributesClass")
            .unwrap();
        assert_eq!(
            (row.stage, row.default, row.locked),
            (Stage::Alpha, false, false)
        );
        let planned: Vec<_> = VOLUME_ATTRIBUTES_CLASS
            .history
            .iter()
            .map(|s| (s.version.to_string(), s.stage))
            .collect();
        assert_eq!(
            planned,
            vec![
                ("0.4".to_string(), Stage::Alpha),
                ("0.5".to_string(), Stage::Beta),
                ("0.6".to_string(), Stage::GA)
            ]
        );
    }
}

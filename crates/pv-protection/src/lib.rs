//! pv-protection and pvc-protection: in-use finalizer controllers, ported
//! from kube-controller-manager (`pkg/controller/volume/pvprotection`,
//! `pvcprotection`).
//!
//! * A PersistentVolume is in use iff `status.phase == Bound` ([`pv`]).
//! * A PersistentVolumeClaim is in use iff a pod of its namespace with
//!   `spec.nodeName` set references it, whatever the pod's phase, or
//!   references it through a generic ephemeral volume it controls and is not
//!   shut down ([`pvc`], [`index::PodEntry::uses`]).
//! * Each controller adds its finalizer to objects that lack it and are not
//!   being deleted when the `StorageObjectInUseProtection` gate is on at the
//!   running (or emulated) version, and removes it from a deleting object once
//!   not in use, whatever the gate says. One request per transition.
//! * Before removing a PVC's finalizer the controller confirms with a live
//!   pod LIST: one per namespace per batch (core's in-use engine).
//! * Finalizer names follow the [`FinalizerProfile`]:
//!   `protection-manager.io/pv-protection` / `pvc-protection` by default (so
//!   the manager can run beside kube-controller-manager), or upstream's
//!   `kubernetes.io/pv-protection` / `pvc-protection` with the `upstream`
//!   profile (for clusters that disabled the built-in controllers with
//!   `--controllers=*,-pv-protection,-pvc-protection`).
//!
//! # What a controller cannot reproduce: the admission plugin
//!
//! Upstream, the `StorageObjectInUseProtection` admission plugin adds the
//! finalizer in the API server on CREATE, so a PV or PVC carries it from its
//! first write. The controllers' add path is only a back-fill. This project
//! has no webhook, so the finalizer is added by the controller shortly after
//! creation, and an object that is created and deleted before the controller
//! has seen it (create-then-immediately-delete, typically within
//! milliseconds) is deleted unprotected. With the `upstream` profile on a
//! cluster whose API server still runs the admission plugin (it is on by
//! default and only adds `kubernetes.io/...` names), the plugin closes that
//! window; with the `project` profile the window exists by design.
//!
//! # Events
//!
//! Upstream emits none. We emit `Normal` events, at most once per object per
//! change of reason: `FinalizerHeld` when a deletion is held because the
//! object is in use (naming the pods and their nodes, or the bound claim) and
//! `FinalizerReleased` when a held deletion is released.

pub mod explain;
pub mod index;
pub mod objects;
pub mod pod;
pub mod pv;
pub mod pv_controller;
pub mod pvc;
pub mod pvc_controller;
#[cfg(test)]
mod testutil;

use protection_core::duration::format_duration;
use protection_core::release::{CONTROLLERS_SINCE, GateDecl, PHASED_ADD};
use protection_core::{
    ControllerDescriptor, ControllerInfo, FinalizedResource, FinalizerNames, FinalizerProfile,
    PolicyRule,
};

use protection_core::runtime::descriptor;
pub use protection_core::runtime::{ReconcileError as Error, Settings};

/// Why the descriptors could not be built.
pub use protection_core::runtime::ConfigError;
/// Default of `--storage-protection-resync-period`.
pub use protection_core::runtime::DEFAULT_RESYNC_PERIOD;

protection_core::resync_options! {
    /// Flags of the storage protection controllers (flattened into
    /// `protection-manager run`).
    group = "storage-protection",
    /// How often pv-protection and pvc-protection re-check every object
    /// being deleted with their finalizer (or lacking it), as upstream's
    /// informer resync does. Re-checks read the caches: a kept object costs
    /// no API request. `0` disables it (a pod deleted during a watch gap is
    /// still caught: the pod re-list re-checks its claims); otherwise at
    /// least 1s (client-go's minimum resync period).
    id = "storage_protection_resync_period",
    flag = "storage-protection-resync-period",
}

/// The finalizer names of a profile: `(pv, pvc)`.
pub fn finalizer_names(profile: FinalizerProfile) -> (String, String) {
    (
        PV_INFO.finalizer.get(profile).to_string(),
        PVC_INFO.finalizer.get(profile).to_string(),
    )
}

/// pv-protection as the manager knows it without starting it (RBAC as
/// upstream's `system:controller:pv-protection-controller`, with `patch`
/// for our guarded finalizer writes; docs/upstream-semantics.md §2.4).
pub const PV_INFO: ControllerInfo = ControllerInfo {
    name: pv_controller::NAME,
    aliases: &[pv_controller::ALIAS],
    enabled_by_default: true,
    since: CONTROLLERS_SINCE,
    gates: GATES,
    finalizer: FinalizerNames {
        project: "protection-manager.io/pv-protection",
        upstream: "kubernetes.io/pv-protection",
    },
    rbac: &[PolicyRule {
        api_groups: &[""],
        resources: &["persistentvolumes"],
        verbs: &["get", "list", "watch", "patch"],
    }],
    finalizes: &[FinalizedResource {
        group: "",
        versions: &["v1"],
        kind: "PersistentVolume",
        plural: "persistentvolumes",
        cleared_by_deleting: false,
    }],
};

/// pvc-protection as the manager knows it without starting it
/// (docs/upstream-semantics.md §3.7).
pub const PVC_INFO: ControllerInfo = ControllerInfo {
    name: pvc_controller::NAME,
    aliases: &[pvc_controller::ALIAS],
    enabled_by_default: true,
    since: CONTROLLERS_SINCE,
    gates: GATES,
    finalizer: FinalizerNames {
        project: "protection-manager.io/pvc-protection",
        upstream: "kubernetes.io/pvc-protection",
    },
    rbac: &[
        PolicyRule {
            api_groups: &[""],
            resources: &["persistentvolumeclaims"],
            verbs: &["get", "list", "watch", "patch"],
        },
        PolicyRule {
            api_groups: &[""],
            resources: &["pods"],
            verbs: &["list", "watch"],
        },
    ],
    finalizes: &[FinalizedResource {
        group: "",
        versions: &["v1"],
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        cleared_by_deleting: false,
    }],
};

/// The controllers of this crate, as the manager knows them.
pub const INFOS: &[&ControllerInfo] = &[&PV_INFO, &PVC_INFO];

/// Gates the PV/PVC finalizer *addition* (removal is never gated).
pub const STORAGE_OBJECT_IN_USE_PROTECTION: GateDecl = GateDecl {
    name: "StorageObjectInUseProtection",
    history: PHASED_ADD,
};

/// The gates both controllers read.
pub const GATES: &[GateDecl] = &[STORAGE_OBJECT_IN_USE_PROTECTION];

/// The controllers of this crate: `pv-protection` and `pvc-protection`.
pub fn descriptors(
    opts: &Options,
    profile: FinalizerProfile,
) -> Result<Vec<ControllerDescriptor>, ConfigError> {
    tracing::debug!(
        resync_period = %format_duration(opts.resync_period),
        "storage protection settings"
    );
    Ok(vec![
        descriptor(&PV_INFO, profile, opts.resync_period, pv_controller::run)?,
        descriptor(&PVC_INFO, profile, opts.resync_period, pvc_controller::run)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_name_the_finalizers() {
        assert_eq!(
            finalizer_names(FinalizerProfile::Project),
            (
                "protection-manager.io/pv-protection".to_string(),
                "protection-manager.io/pvc-protection".to_string()
            )
        );
        assert_eq!(
            finalizer_names(FinalizerProfile::Upstream),
            (
                "kubernetes.io/pv-protection".to_string(),
                "kubernetes.io/pvc-protection".to_string()
            )
        );
    }

    #[test]
    fn descriptors_register_both_controllers_with_upstream_aliases() {
        let d = descriptors(&Options::default(), FinalizerProfile::Project).unwrap();
        let rows: Vec<_> = d
            .iter()
            .map(|d| (d.name, d.aliases, d.enabled_by_default, d.since, d.gates))
            .collect();
        assert_eq!(
            rows,
            vec![
                (
                    "pv-protection",
                    &["persistentvolume-protection-controller"][..],
                    true,
                    CONTROLLERS_SINCE,
                    GATES
                ),
                (
                    "pvc-protection",
                    &["persistentvolumeclaim-protection-controller"][..],
                    true,
                    CONTROLLERS_SINCE,
                    GATES
                ),
            ]
        );
    }
}

//! The project's release train: which release this binary is, how far back it
//! can emulate, and the stages a gate moves through from release to release.
//!
//! The gates themselves are declared by the controller crates ([`GateDecl`],
//! in their descriptors); core knows no gate name. Most follow
//! [`PHASED_ADD`]:
//!
//! | release | a finalizer-addition gate | controllers |
//! |---------|---------------------------|-------------|
//! | 0.0     | (PreAlpha: absent)        | none        |
//! | 0.1     | Alpha, default off        | remove-only by default |
//! | 0.2     | Beta, default on          | add + remove |
//! | 0.3     | GA, locked on             | add + remove |
//!
//! A controller added later declares its own train starting at the release
//! that brings it (vac-protection: new at 0.4, Alpha and off at 0.4, planned
//! Beta at 0.5 and GA at 0.6; service-cidr-protection: new at 0.5, Alpha
//! and off at 0.5, planned Beta at 0.6 and GA at 0.7). The binary stops at
//! 0.5; the planned stages
//! are in the table so that `feature-gates` and the chart can say what comes
//! next, and a release's history never changes once shipped.
//!
//! Removing a finalizer is never gated: a release that knows a finalizer can
//! always take it off, so downgrading by one release never strands one (the
//! KEP's "ship removal one release before addition",
//! docs/upstream-semantics.md §5.11).

use std::sync::Arc;

use crate::featuregate::{FeatureGates, FeatureSpec, RegistrationError, Registry, Stage};
use crate::version::Version;

/// The release this binary is.
pub const BINARY_VERSION: Version = Version::new(0, 5);
/// The oldest release this binary can emulate (no finalizer controllers at all).
pub const EMULATION_FLOOR: Version = Version::new(0, 0);
/// The release at which the protection controllers appeared.
pub const CONTROLLERS_SINCE: Version = Version::new(0, 1);

/// A feature gate a controller crate declares, with its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateDecl {
    pub name: &'static str,
    /// The gate's specs, oldest first (component-base `VersionedSpecs`).
    pub history: &'static [FeatureSpec],
}

/// Alpha off at 0.1, Beta on at 0.2, GA locked on at 0.3: the train of a
/// gate that phases a finalizer's addition in.
pub const PHASED_ADD: &[FeatureSpec] = &phased_add_from(Version::new(0, 1));

/// [`PHASED_ADD`]'s train for a controller that comes at `alpha`: Alpha off
/// there (removal always on), planned Beta on one release later and GA
/// locked on the release after.
pub const fn phased_add_from(alpha: Version) -> [FeatureSpec; 3] {
    let (major, minor) = (alpha.major, alpha.minor);
    [
        FeatureSpec::new(alpha, Stage::Alpha, false, false),
        FeatureSpec::new(Version::new(major, minor + 1), Stage::Beta, true, false),
        FeatureSpec::new(Version::new(major, minor + 2), Stage::GA, true, true),
    ]
}

/// The registry of `gates` (a gate declared twice with the same history,
/// e.g. by two controllers that read it, is registered once).
pub fn registry(gates: &[GateDecl]) -> Result<Arc<Registry>, RegistrationError> {
    let mut r = Registry::new();
    for g in gates {
        r.add(g.name, g.history.to_vec())?;
    }
    Ok(Arc::new(r))
}

/// Why the gates of a release cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatesError {
    #[error(transparent)]
    Range(#[from] EmulationRangeError),
    #[error("built-in feature gate is invalid: {0}")]
    Registration(#[from] RegistrationError),
}

/// An `--emulated-version` outside what this binary can play.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("emulation version {requested} is not between [{floor}, {binary}]")]
pub struct EmulationRangeError {
    pub requested: Version,
    pub floor: Version,
    pub binary: Version,
}

/// Checks an `--emulated-version` against `[EMULATION_FLOOR, BINARY_VERSION]`
/// (component-base's message).
pub fn validate_emulated_version(v: Version) -> Result<Version, EmulationRangeError> {
    if v < EMULATION_FLOOR || v > BINARY_VERSION {
        return Err(EmulationRangeError {
            requested: v,
            floor: EMULATION_FLOOR,
            binary: BINARY_VERSION,
        });
    }
    Ok(v)
}

/// `gates` at `emulated`, with every default in place.
pub fn gates_at(emulated: Version, gates: &[GateDecl]) -> Result<FeatureGates, GatesError> {
    Ok(FeatureGates::new(
        registry(gates)?,
        validate_emulated_version(emulated)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORAGE: GateDecl = GateDecl {
        name: "StorageObjectInUseProtection",
        history: PHASED_ADD,
    };
    const SERVICE: GateDecl = GateDecl {
        name: "ServiceLoadBalancerFinalizer",
        history: PHASED_ADD,
    };
    const STORAGE_OBJECT_IN_USE_PROTECTION: &str = STORAGE.name;
    const SERVICE_LOAD_BALANCER_FINALIZER: &str = SERVICE.name;
    const BOTH: &[GateDecl] = &[STORAGE, SERVICE, STORAGE];

    #[test]
    fn both_gates_follow_the_train() {
        // (release, stage, default, locked)
        let train = [
            (Version::new(0, 0), Stage::PreAlpha, false, false),
            (Version::new(0, 1), Stage::Alpha, false, false),
            (Version::new(0, 2), Stage::Beta, true, false),
            (Version::new(0, 3), Stage::GA, true, true),
        ];
        for (v, stage, default, locked) in train {
            let g = gates_at(v, BOTH).unwrap();
            for gate in [
                STORAGE_OBJECT_IN_USE_PROTECTION,
                SERVICE_LOAD_BALANCER_FINALIZER,
            ] {
                let row = g.table().into_iter().find(|r| r.name == gate).unwrap();
                assert_eq!(
                    (row.stage, row.default, row.locked),
                    (stage, default, locked),
                    "{gate} at {v}"
                );
                assert_eq!(g.enabled(gate), default, "{gate} at {v}");
            }
        }
    }

    #[test]
    fn a_gate_added_later_starts_its_train_at_its_release() {
        const VAC: GateDecl = GateDecl {
            name: "VolumeAttributesClass",
            history: &[
                FeatureSpec::new(Version::new(0, 4), Stage::Alpha, false, false),
                FeatureSpec::new(Version::new(0, 5), Stage::Beta, true, false),
                FeatureSpec::new(Version::new(0, 6), Stage::GA, true, true),
            ],
        };
        let all = &[STORAGE, SERVICE, VAC];
        for v in [0, 1, 2, 3] {
            let g = gates_at(Version::new(0, v), all).unwrap();
            let row = g.table().into_iter().find(|r| r.name == VAC.name).unwrap();
            assert_eq!(
                (row.stage, row.enabled, row.since),
                (Stage::PreAlpha, false, None),
                "not available yet at 0.{v}"
            );
            let mut g = g;
            assert!(g.set_from_flag("VolumeAttributesClass=true").is_err());
        }
        let g = gates_at(Version::new(0, 4), all).unwrap();
        let row = g.table().into_iter().find(|r| r.name == VAC.name).unwrap();
        assert_eq!(
            (row.stage, row.default, row.locked),
            (Stage::Alpha, false, false)
        );
        let mut g = g;
        g.set_from_flag("VolumeAttributesClass=true").unwrap();
        assert!(g.enabled(VAC.name));
    }

    #[test]
    fn gate_flag_behaviour_per_release() {
        let mut g = gates_at(Version::new(0, 3), BOTH).unwrap();
        assert_eq!(
            g.set_from_flag("ServiceLoadBalancerFinalizer=false")
                .unwrap_err()
                .to_string(),
            "cannot set feature gate ServiceLoadBalancerFinalizer to false, feature is locked to true"
        );
        let mut g = gates_at(Version::new(0, 2), BOTH).unwrap();
        g.set_from_flag("ServiceLoadBalancerFinalizer=false")
            .unwrap();
        assert!(!g.enabled(SERVICE_LOAD_BALANCER_FINALIZER));
        assert!(g.enabled(STORAGE_OBJECT_IN_USE_PROTECTION));
        let mut g = gates_at(Version::new(0, 1), BOTH).unwrap();
        g.set_from_flag("StorageObjectInUseProtection=true")
            .unwrap();
        assert!(g.enabled(STORAGE_OBJECT_IN_USE_PROTECTION));
        assert!(!g.enabled(SERVICE_LOAD_BALANCER_FINALIZER));
    }

    #[test]
    fn emulation_range() {
        assert!(validate_emulated_version(Version::new(0, 0)).is_ok());
        assert!(validate_emulated_version(BINARY_VERSION).is_ok());
        let e = validate_emulated_version(Version::new(9, 9)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "emulation version 9.9 is not between [0.0, 0.5]"
        );
        assert!(validate_emulated_version(Version::new(0, 5)).is_ok());
        assert!(validate_emulated_version(Version::new(0, 6)).is_err());
    }

    #[test]
    fn an_invalid_declared_gate_is_an_error_not_a_panic() {
        const BAD: &[FeatureSpec] = &[
            FeatureSpec::new(Version::new(0, 2), Stage::Beta, true, false),
            FeatureSpec::new(Version::new(0, 1), Stage::Alpha, false, false),
        ];
        let e = gates_at(
            BINARY_VERSION,
            &[GateDecl {
                name: "Bad",
                history: BAD,
            }],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("built-in feature gate is invalid: feature gate \"Bad\""),
            "{e}"
        );
        assert!(gates_at(Version::new(9, 9), &[]).is_err());
    }
}

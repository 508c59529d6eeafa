//! The project's release train: which release this binary is, how far back it
//! can emulate, and how each feature gate moved from release to release.
//!
//! | release | StorageObjectInUseProtection | ServiceLoadBalancerFinalizer | controllers |
//! |---------|------------------------------|------------------------------|-------------|
//! | 0.0     | (PreAlpha: absent)           | (PreAlpha: absent)           | none        |
//! | 0.1     | Alpha, default off           | Alpha, default off           | remove-only by default |
//! | 0.2     | Beta, default on             | Beta, default on             | add + remove |
//! | 0.3     | GA, locked on                | GA, locked on                | add + remove |
//!
//! Removing a finalizer is never gated: a release that knows a finalizer can
//! always take it off, so downgrading by one release never strands one (the
//! KEP's "ship removal one release before addition").

use std::sync::Arc;

use crate::featuregate::{FeatureGates, FeatureSpec, Registry, Stage};
use crate::version::Version;

/// The release this binary is.
pub const BINARY_VERSION: Version = Version::new(0, 3);
/// The oldest release this binary can emulate (no finalizer controllers at all).
pub const EMULATION_FLOOR: Version = Version::new(0, 0);
/// The release at which the protection controllers appeared.
pub const CONTROLLERS_SINCE: Version = Version::new(0, 1);

/// Gates the PV/PVC finalizer *addition* (removal is never gated).
pub const STORAGE_OBJECT_IN_USE_PROTECTION: &str = "StorageObjectInUseProtection";
/// Gates the Service load-balancer cleanup finalizer *addition*.
pub const SERVICE_LOAD_BALANCER_FINALIZER: &str = "ServiceLoadBalancerFinalizer";

/// Alpha off at 0.1, Beta on at 0.2, GA locked on at 0.3.
fn phased_add_gate() -> Vec<FeatureSpec> {
    vec![
        FeatureSpec::new(Version::new(0, 1), Stage::Alpha, false, false),
        FeatureSpec::new(Version::new(0, 2), Stage::Beta, true, false),
        FeatureSpec::new(Version::new(0, 3), Stage::GA, true, true),
    ]
}

/// Every gate this binary knows, with its full history.
pub fn registry() -> Arc<Registry> {
    let mut r = Registry::new();
    for name in [
        STORAGE_OBJECT_IN_USE_PROTECTION,
        SERVICE_LOAD_BALANCER_FINALIZER,
    ] {
        // The specs above are valid by construction; the registry test proves it.
        if let Err(e) = r.add(name, phased_add_gate()) {
            unreachable!("built-in feature gate {name} is invalid: {e}");
        }
    }
    Arc::new(r)
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

/// The gates at `emulated`, with every default in place.
pub fn gates_at(emulated: Version) -> Result<FeatureGates, EmulationRangeError> {
    Ok(FeatureGates::new(
        registry(),
        validate_emulated_version(emulated)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let g = gates_at(v).unwrap();
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
    fn gate_flag_behaviour_per_release() {
        let mut g = gates_at(Version::new(0, 3)).unwrap();
        assert_eq!(
            g.set_from_flag("ServiceLoadBalancerFinalizer=false")
                .unwrap_err()
                .to_string(),
            "cannot set feature gate ServiceLoadBalancerFinalizer to false, feature is locked to true"
        );
        let mut g = gates_at(Version::new(0, 2)).unwrap();
        g.set_from_flag("ServiceLoadBalancerFinalizer=false")
            .unwrap();
        assert!(!g.enabled(SERVICE_LOAD_BALANCER_FINALIZER));
        assert!(g.enabled(STORAGE_OBJECT_IN_USE_PROTECTION));
        let mut g = gates_at(Version::new(0, 1)).unwrap();
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
            "emulation version 9.9 is not between [0.0, 0.3]"
        );
        assert!(validate_emulated_version(Version::new(0, 4)).is_err());
    }
}

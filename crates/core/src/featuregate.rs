//! Feature gates with versioned specs, modelled on k8s.io/component-base/featuregate.
//!
//! * Stages: PreAlpha (synthetic: "not available yet at this version"), Alpha,
//!   Beta, GA, Deprecated; `LockToDefault`.
//! * Each gate has an ordered list of specs, each tied to the release at which
//!   it took effect. The spec in force is the last one whose version is at or
//!   below the emulated version; before the first one the gate is PreAlpha.
//! * `--feature-gates=A=true,B=false` is parsed with upstream's exact error
//!   texts (`feature_gate.go` `Set` / `unsafeSetFromMap`), including the
//!   aggregate form `[err1, err2]` when several gates fail.
//! * `AllAlpha` / `AllBeta` set every unlocked gate of that stage that was not
//!   named explicitly.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::version::Version;

/// Special keys understood by `--feature-gates`, as upstream.
pub const ALL_ALPHA: &str = "AllAlpha";
pub const ALL_BETA: &str = "AllBeta";

/// The maturity of a feature at some release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Not available at this version (no spec yet). Cannot be set.
    PreAlpha,
    Alpha,
    Beta,
    GA,
    Deprecated,
}

impl Stage {
    /// Rank for the "no stability regression" rule; Deprecated is terminal and
    /// handled separately.
    fn rank(self) -> u8 {
        match self {
            Stage::PreAlpha => 0,
            Stage::Alpha => 1,
            Stage::Beta => 2,
            Stage::GA => 3,
            Stage::Deprecated => 4,
        }
    }

    /// Upstream's `prerelease` string (GA is the empty string there; we print
    /// `GA` for humans).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::PreAlpha => "PRE-ALPHA",
            Stage::Alpha => "ALPHA",
            Stage::Beta => "BETA",
            Stage::GA => "GA",
            Stage::Deprecated => "DEPRECATED",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The behaviour of a gate from `version` on (component-base `FeatureSpec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureSpec {
    pub default: bool,
    pub lock_to_default: bool,
    pub stage: Stage,
    /// The project release at which this spec took effect.
    pub version: Version,
}

impl FeatureSpec {
    pub const fn new(version: Version, stage: Stage, default: bool, lock_to_default: bool) -> Self {
        FeatureSpec {
            default,
            lock_to_default,
            stage,
            version,
        }
    }

    const fn pre_alpha() -> Self {
        FeatureSpec {
            default: false,
            lock_to_default: false,
            stage: Stage::PreAlpha,
            version: Version::new(0, 0),
        }
    }
}

/// A gate registration that breaks component-base's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    #[error("feature gate {0:?} has no versioned specs")]
    Empty(String),
    #[error("feature gate {0:?} uses a reserved name")]
    Reserved(String),
    #[error("feature gate {name:?} with different spec already exists")]
    Duplicate { name: String },
    #[error(
        "feature gate {name:?}: specs must be in increasing version order, found {later} after {earlier}"
    )]
    Order {
        name: String,
        earlier: Version,
        later: Version,
    },
    #[error("feature gate {name:?}: spec at {version} changes nothing")]
    NoChange { name: String, version: Version },
    #[error("feature gate {name:?}: stability regression from {from} to {to} at {version}")]
    Regression {
        name: String,
        from: Stage,
        to: Stage,
        version: Version,
    },
    #[error("feature gate {name:?}: deprecated is terminal, found a spec after it at {version}")]
    AfterDeprecated { name: String, version: Version },
    #[error("feature gate {name:?}: cannot unlock a locked feature at {version}")]
    Unlock { name: String, version: Version },
    #[error("feature gate {name:?}: a spec cannot have stage PreAlpha")]
    PreAlphaSpec { name: String },
}

/// The set of known gates and their versioned specs.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    features: BTreeMap<String, Vec<FeatureSpec>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a gate (component-base `AddVersioned`), validating the specs.
    /// Re-adding an identical gate is accepted.
    pub fn add(&mut self, name: &str, specs: Vec<FeatureSpec>) -> Result<(), RegistrationError> {
        if name == ALL_ALPHA || name == ALL_BETA {
            return Err(RegistrationError::Reserved(name.to_string()));
        }
        if specs.is_empty() {
            return Err(RegistrationError::Empty(name.to_string()));
        }
        for (i, s) in specs.iter().enumerate() {
            if s.stage == Stage::PreAlpha {
                return Err(RegistrationError::PreAlphaSpec {
                    name: name.to_string(),
                });
            }
            let Some(prev) = i.checked_sub(1).map(|j| specs[j]) else {
                continue;
            };
            let name = name.to_string();
            if s.version <= prev.version {
                return Err(RegistrationError::Order {
                    name,
                    earlier: prev.version,
                    later: s.version,
                });
            }
            if (s.default, s.lock_to_default, s.stage)
                == (prev.default, prev.lock_to_default, prev.stage)
            {
                return Err(RegistrationError::NoChange {
                    name,
                    version: s.version,
                });
            }
            if prev.stage == Stage::Deprecated {
                return Err(RegistrationError::AfterDeprecated {
                    name,
                    version: s.version,
                });
            }
            if s.stage != Stage::Deprecated && s.stage.rank() < prev.stage.rank() {
                return Err(RegistrationError::Regression {
                    name,
                    from: prev.stage,
                    to: s.stage,
                    version: s.version,
                });
            }
            if prev.lock_to_default && !s.lock_to_default {
                return Err(RegistrationError::Unlock {
                    name,
                    version: s.version,
                });
            }
        }
        if let Some(existing) = self.features.get(name) {
            if *existing != specs {
                return Err(RegistrationError::Duplicate {
                    name: name.to_string(),
                });
            }
            return Ok(());
        }
        self.features.insert(name.to_string(), specs);
        Ok(())
    }

    /// Whether `name` is a registered gate.
    pub fn contains(&self, name: &str) -> bool {
        self.features.contains_key(name)
    }

    /// Registered gate names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.features.keys().map(String::as_str)
    }

    /// The full history of a gate.
    pub fn specs(&self, name: &str) -> Option<&[FeatureSpec]> {
        self.features.get(name).map(Vec::as_slice)
    }

    /// The spec in force at `version` (`featureSpecAtEmulationVersion`): the
    /// last spec whose version is at or below it, or a synthetic PreAlpha.
    pub fn spec_at(&self, name: &str, version: Version) -> Option<FeatureSpec> {
        let specs = self.features.get(name)?;
        Some(
            specs
                .iter()
                .rev()
                .find(|s| s.version <= version)
                .copied()
                .unwrap_or(FeatureSpec::pre_alpha()),
        )
    }
}

/// A `--feature-gates` error, with upstream's exact text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("missing bool value for {0}")]
    MissingValue(String),
    #[error(
        "invalid value of {key}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax"
    )]
    InvalidValue { key: String, value: String },
    #[error("unrecognized feature gate: {0}")]
    Unrecognized(String),
    #[error("cannot set feature gate {key} to {value}, feature is locked to {default}")]
    Locked {
        key: String,
        value: bool,
        default: bool,
    },
    #[error(
        "cannot set feature gate {key} to {value}, feature is PreAlpha at emulated version {emulated}"
    )]
    PreAlpha {
        key: String,
        value: bool,
        emulated: Version,
    },
    /// Several errors, printed like apimachinery's `utilerrors.NewAggregate`.
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Aggregate(Vec<GateError>),
}

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Parses the `--feature-gates` syntax (`Key=bool,Key2=bool`; whitespace
/// trimmed, empty items skipped) into ordered pairs, as upstream's `Set`.
pub fn parse_flag(value: &str) -> Result<Vec<(String, bool)>, GateError> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for item in value.split(',') {
        if item.is_empty() {
            continue;
        }
        let mut kv = item.splitn(2, '=');
        let key = kv.next().unwrap_or_default().trim().to_string();
        let Some(raw) = kv.next() else {
            return Err(GateError::MissingValue(key));
        };
        let raw = raw.trim();
        let Some(b) = parse_go_bool(raw) else {
            return Err(GateError::InvalidValue {
                key,
                value: raw.to_string(),
            });
        };
        // Upstream collects into a map: a repeated key keeps its last value.
        out.retain(|(k, _)| *k != key);
        out.push((key, b));
    }
    Ok(out)
}

/// One row of `protection-manager feature-gates`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateRow {
    pub name: String,
    pub stage: Stage,
    pub default: bool,
    pub locked: bool,
    pub enabled: bool,
    /// The release this spec took effect at (`None` when PreAlpha).
    pub since: Option<Version>,
}

/// Resolved gates at one emulated version, with the user's overrides.
#[derive(Clone, Debug)]
pub struct FeatureGates {
    registry: Arc<Registry>,
    emulated: Version,
    explicit: BTreeMap<String, bool>,
    all_alpha: Option<bool>,
    all_beta: Option<bool>,
}

impl FeatureGates {
    /// Gates at `emulated` with every default in place.
    pub fn new(registry: Arc<Registry>, emulated: Version) -> Self {
        FeatureGates {
            registry,
            emulated,
            explicit: BTreeMap::new(),
            all_alpha: None,
            all_beta: None,
        }
    }

    pub fn emulated_version(&self) -> Version {
        self.emulated
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Applies a `--feature-gates` value. Returns warnings (setting a GA or
    /// Deprecated gate) on success. On error nothing is applied.
    pub fn set_from_flag(&mut self, value: &str) -> Result<Vec<String>, GateError> {
        let pairs = parse_flag(value)?;
        self.set_from_pairs(&pairs)
    }

    /// Applies explicit settings (`SetFromMap`), all or nothing.
    pub fn set_from_pairs(&mut self, pairs: &[(String, bool)]) -> Result<Vec<String>, GateError> {
        let mut errs = Vec::new();
        let mut warnings = Vec::new();
        let mut explicit = self.explicit.clone();
        let (mut all_alpha, mut all_beta) = (self.all_alpha, self.all_beta);
        for (key, value) in pairs {
            let value = *value;
            if key == ALL_ALPHA {
                all_alpha = Some(value);
                continue;
            }
            if key == ALL_BETA {
                all_beta = Some(value);
                continue;
            }
            let Some(spec) = self.registry.spec_at(key, self.emulated) else {
                // Upstream returns early on the first unknown gate.
                errs.push(GateError::Unrecognized(key.clone()));
                return Err(aggregate(errs));
            };
            if spec.lock_to_default && spec.default != value {
                errs.push(GateError::Locked {
                    key: key.clone(),
                    value,
                    default: spec.default,
                });
                continue;
            }
            if spec.stage == Stage::PreAlpha {
                errs.push(GateError::PreAlpha {
                    key: key.clone(),
                    value,
                    emulated: self.emulated,
                });
                continue;
            }
            explicit.insert(key.clone(), value);
            match spec.stage {
                Stage::Deprecated => warnings.push(format!(
                    "Setting deprecated feature gate {key}={value}. It will be removed in a future release."
                )),
                Stage::GA => warnings.push(format!(
                    "Setting GA feature gate {key}={value}. It will be removed in a future release."
                )),
                _ => {}
            }
        }
        if !errs.is_empty() {
            return Err(aggregate(errs));
        }
        self.explicit = explicit;
        self.all_alpha = all_alpha;
        self.all_beta = all_beta;
        Ok(warnings)
    }

    /// Whether a known gate is on. Unknown names are a programming error
    /// (upstream panics); here they are reported as off and logged.
    pub fn enabled(&self, name: &str) -> bool {
        match self.try_enabled(name) {
            Some(v) => v,
            None => {
                tracing::error!(
                    gate = name,
                    "feature gate is not registered; treating as disabled"
                );
                false
            }
        }
    }

    /// `None` for an unknown gate.
    pub fn try_enabled(&self, name: &str) -> Option<bool> {
        let spec = self.registry.spec_at(name, self.emulated)?;
        Some(self.resolve(name, spec))
    }

    fn resolve(&self, name: &str, spec: FeatureSpec) -> bool {
        if spec.stage == Stage::PreAlpha {
            return false;
        }
        if spec.lock_to_default {
            return spec.default;
        }
        if let Some(v) = self.explicit.get(name) {
            return *v;
        }
        match spec.stage {
            Stage::Alpha => self.all_alpha.unwrap_or(spec.default),
            Stage::Beta => self.all_beta.unwrap_or(spec.default),
            _ => spec.default,
        }
    }

    /// Every gate at the emulated version, sorted by name.
    pub fn table(&self) -> Vec<GateRow> {
        self.registry
            .names()
            .filter_map(|name| {
                let spec = self.registry.spec_at(name, self.emulated)?;
                Some(GateRow {
                    name: name.to_string(),
                    stage: spec.stage,
                    default: spec.default,
                    locked: spec.lock_to_default,
                    enabled: self.resolve(name, spec),
                    since: (spec.stage != Stage::PreAlpha).then_some(spec.version),
                })
            })
            .collect()
    }

    /// The `--feature-gates` help lines (`KnownFeatures`): GA, Deprecated and
    /// PreAlpha gates are hidden, as upstream.
    pub fn known_features(&self) -> Vec<String> {
        let mut known: Vec<String> = self
            .table()
            .into_iter()
            .filter(|r| matches!(r.stage, Stage::Alpha | Stage::Beta))
            .map(|r| {
                format!(
                    "{}=true|false ({} - default={})",
                    r.name, r.stage, r.default
                )
            })
            .collect();
        known.push(format!("{ALL_ALPHA}=true|false (ALPHA - default=false)"));
        known.push(format!("{ALL_BETA}=true|false (BETA - default=false)"));
        known.sort();
        known
    }

    /// `key=value` pairs of every gate, for logs and the build-info metric.
    pub fn summary(&self) -> String {
        self.table()
            .iter()
            .map(|r| format!("{}={}", r.name, r.enabled))
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn aggregate(mut errs: Vec<GateError>) -> GateError {
    if errs.len() == 1 {
        errs.remove(0)
    } else {
        GateError::Aggregate(errs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V0_0: Version = Version::new(0, 0);
    const V0_1: Version = Version::new(0, 1);
    const V0_2: Version = Version::new(0, 2);
    const V0_3: Version = Version::new(0, 3);

    fn registry() -> Arc<Registry> {
        let mut r = Registry::new();
        r.add(
            "Phased",
            vec![
                FeatureSpec::new(V0_1, Stage::Alpha, false, false),
                FeatureSpec::new(V0_2, Stage::Beta, true, false),
                FeatureSpec::new(V0_3, Stage::GA, true, true),
            ],
        )
        .unwrap();
        r.add(
            "Old",
            vec![
                FeatureSpec::new(V0_0, Stage::Beta, true, false),
                FeatureSpec::new(V0_2, Stage::Deprecated, false, false),
            ],
        )
        .unwrap();
        r.add(
            "AlphaOnly",
            vec![FeatureSpec::new(V0_0, Stage::Alpha, false, false)],
        )
        .unwrap();
        Arc::new(r)
    }

    fn gates(v: Version, flag: &str) -> Result<(FeatureGates, Vec<String>), GateError> {
        let mut g = FeatureGates::new(registry(), v);
        let w = g.set_from_flag(flag)?;
        Ok((g, w))
    }

    #[test]
    fn parse_errors_have_upstream_text() {
        let cases = [
            ("Bogus=true", "unrecognized feature gate: Bogus"),
            ("Phased", "missing bool value for Phased"),
            (
                "Phased=yes",
                "invalid value of Phased=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax",
            ),
            (
                "Phased=false",
                "cannot set feature gate Phased to false, feature is locked to true",
            ),
        ];
        for (flag, want) in cases {
            let err = gates(V0_3, flag).unwrap_err();
            assert_eq!(err.to_string(), want, "flag {flag}");
        }
    }

    #[test]
    fn unknown_gate_stops_processing() {
        // Later gates are not looked at once an unknown one is found ...
        let err = gates(V0_3, "Bogus=true,Phased=false").unwrap_err();
        assert_eq!(err.to_string(), "unrecognized feature gate: Bogus");
        // ... and errors found before it are kept, as upstream does.
        let err = gates(V0_3, "Phased=false,Bogus=true").unwrap_err();
        assert_eq!(
            err.to_string(),
            "[cannot set feature gate Phased to false, feature is locked to true, unrecognized feature gate: Bogus]"
        );
    }

    #[test]
    fn several_errors_aggregate_like_apimachinery() {
        let err = gates(V0_0, "Phased=true,Old=false").unwrap_err();
        // Old is Beta at 0.0, so only Phased fails.
        assert_eq!(
            err.to_string(),
            "cannot set feature gate Phased to true, feature is PreAlpha at emulated version 0.0"
        );
        let mut r = Registry::new();
        r.add("L1", vec![FeatureSpec::new(V0_0, Stage::GA, true, true)])
            .unwrap();
        r.add("L2", vec![FeatureSpec::new(V0_0, Stage::GA, true, true)])
            .unwrap();
        let mut g = FeatureGates::new(Arc::new(r), V0_0);
        let err = g.set_from_flag("L1=false,L2=false").unwrap_err();
        assert_eq!(
            err.to_string(),
            "[cannot set feature gate L1 to false, feature is locked to true, cannot set feature gate L2 to false, feature is locked to true]"
        );
    }

    #[test]
    fn syntax_is_forgiving_like_upstream() {
        let (g, _) = gates(V0_2, " Phased = false ,, AlphaOnly=T,").unwrap();
        assert!(!g.enabled("Phased"));
        assert!(g.enabled("AlphaOnly"));
        // Repeated keys: last wins.
        let (g, _) = gates(V0_2, "Phased=false,Phased=1").unwrap();
        assert!(g.enabled("Phased"));
        // Empty flag is fine.
        let (g, w) = gates(V0_2, "").unwrap();
        assert!(g.enabled("Phased") && w.is_empty());
    }

    #[test]
    fn every_stage_of_the_phased_train() {
        // (version, stage, default, locked)
        let table = [
            (V0_0, Stage::PreAlpha, false, false),
            (V0_1, Stage::Alpha, false, false),
            (V0_2, Stage::Beta, true, false),
            (V0_3, Stage::GA, true, true),
            (Version::new(0, 9), Stage::GA, true, true),
        ];
        let reg = registry();
        for (v, stage, default, locked) in table {
            let s = reg.spec_at("Phased", v).unwrap();
            assert_eq!(
                (s.stage, s.default, s.lock_to_default),
                (stage, default, locked),
                "at {v}"
            );
            let g = FeatureGates::new(reg.clone(), v);
            assert_eq!(g.enabled("Phased"), default, "default at {v}");
        }
    }

    #[test]
    fn setting_depends_on_the_emulated_version() {
        // Alpha: can be turned on.
        assert!(gates(V0_1, "Phased=true").unwrap().0.enabled("Phased"));
        // Beta: can be turned off.
        assert!(!gates(V0_2, "Phased=false").unwrap().0.enabled("Phased"));
        // GA: locked; setting it to its default is allowed with a warning.
        let (g, w) = gates(V0_3, "Phased=true").unwrap();
        assert!(g.enabled("Phased"));
        assert_eq!(
            w,
            vec!["Setting GA feature gate Phased=true. It will be removed in a future release."]
        );
        // Deprecated warns too.
        let (_, w) = gates(V0_2, "Old=false").unwrap();
        assert_eq!(
            w,
            vec![
                "Setting deprecated feature gate Old=false. It will be removed in a future release."
            ]
        );
    }

    #[test]
    fn all_alpha_and_all_beta_yield_to_explicit_settings() {
        let (g, _) = gates(V0_1, "AllAlpha=true").unwrap();
        assert!(g.enabled("Phased") && g.enabled("AlphaOnly"));
        let (g, _) = gates(V0_1, "AllAlpha=true,Phased=false").unwrap();
        assert!(!g.enabled("Phased") && g.enabled("AlphaOnly"));
        let (g, _) = gates(V0_2, "AllBeta=false").unwrap();
        assert!(!g.enabled("Phased"));
        // Locked gates ignore AllBeta/AllAlpha.
        let (g, _) = gates(V0_3, "AllBeta=false").unwrap();
        assert!(g.enabled("Phased"));
    }

    #[test]
    fn failed_set_changes_nothing() {
        let mut g = FeatureGates::new(registry(), V0_2);
        g.set_from_flag("Phased=false").unwrap();
        assert!(g.set_from_flag("Phased=true,Bogus=true").is_err());
        assert!(!g.enabled("Phased"));
    }

    #[test]
    fn known_features_hide_ga_deprecated_and_prealpha() {
        let g = FeatureGates::new(registry(), V0_2);
        assert_eq!(
            g.known_features(),
            vec![
                "AllAlpha=true|false (ALPHA - default=false)",
                "AllBeta=true|false (BETA - default=false)",
                "AlphaOnly=true|false (ALPHA - default=false)",
                "Phased=true|false (BETA - default=true)",
            ]
        );
        let g = FeatureGates::new(registry(), V0_3);
        assert!(!g.known_features().iter().any(|l| l.starts_with("Phased")));
    }

    #[test]
    fn table_reports_stage_default_lock_and_since() {
        let g = FeatureGates::new(registry(), V0_1);
        let rows = g.table();
        let phased = rows.iter().find(|r| r.name == "Phased").unwrap();
        assert_eq!(
            (phased.stage, phased.default, phased.locked, phased.since),
            (Stage::Alpha, false, false, Some(V0_1))
        );
        let g = FeatureGates::new(registry(), V0_0);
        let phased = g.table().into_iter().find(|r| r.name == "Phased").unwrap();
        assert_eq!((phased.stage, phased.since), (Stage::PreAlpha, None));
    }

    #[test]
    fn registration_rules() {
        let spec = |v, st, d, l| FeatureSpec::new(v, st, d, l);
        let bad: Vec<(Vec<FeatureSpec>, &str)> = vec![
            (vec![], "no versioned specs"),
            (
                vec![
                    spec(V0_2, Stage::Alpha, false, false),
                    spec(V0_1, Stage::Beta, true, false),
                ],
                "increasing version order",
            ),
            (
                vec![
                    spec(V0_1, Stage::Alpha, false, false),
                    spec(V0_2, Stage::Alpha, false, false),
                ],
                "changes nothing",
            ),
            (
                vec![
                    spec(V0_1, Stage::Beta, true, false),
                    spec(V0_2, Stage::Alpha, false, false),
                ],
                "stability regression",
            ),
            (
                vec![
                    spec(V0_1, Stage::GA, true, false),
                    spec(V0_2, Stage::Beta, true, false),
                ],
                "stability regression",
            ),
            (
                vec![
                    spec(V0_1, Stage::Deprecated, false, false),
                    spec(V0_2, Stage::GA, true, false),
                ],
                "deprecated is terminal",
            ),
            (
                vec![
                    spec(V0_1, Stage::GA, true, true),
                    spec(V0_2, Stage::Deprecated, true, false),
                ],
                "cannot unlock",
            ),
            (vec![spec(V0_1, Stage::PreAlpha, false, false)], "PreAlpha"),
        ];
        for (specs, want) in bad {
            let err = Registry::new().add("X", specs.clone()).unwrap_err();
            assert!(err.to_string().contains(want), "{specs:?}: {err}");
        }
        let mut r = Registry::new();
        let ok = vec![spec(V0_1, Stage::Alpha, false, false)];
        r.add("X", ok.clone()).unwrap();
        r.add("X", ok).unwrap();
        let err = r
            .add("X", vec![spec(V0_1, Stage::Beta, true, false)])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "feature gate \"X\" with different spec already exists"
        );
        assert!(
            r.add("AllAlpha", vec![spec(V0_1, Stage::Alpha, false, false)])
                .is_err()
        );
    }

    #[test]
    fn go_bool_parsing() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Some(true));
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Some(false));
        }
        for bad in ["yes", "on", "tRUE", ""] {
            assert_eq!(parse_go_bool(bad), None);
        }
    }
}

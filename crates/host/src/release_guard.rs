//! The release guard: the cluster remembers which release of the manager last
//! ran (a ConfigMap in the manager's namespace), and a start that is more than
//! one release away from it is refused.
//!
//! Why: the phased rollout makes a move by one release safe in both
//! directions (removal ships one release before addition). A skip by two is
//! what the KEP calls unsupported: 0.2 → 0.0 leaves every finalizer that 0.2
//! added with nobody to remove it (objects stuck Terminating), and 0.0 → 0.2
//! jumps over the remove-only release that a later rollback relies on.
//! `--skip-release-check` lets an expert override it.
//!
//! A controller new in the running release puts a finalizer that the release
//! before does not know (vac-protection at 0.4: the KEP's accepted Alpha
//! risk, docs/upstream-semantics.md §10.6). While its gate is on, or while
//! objects still carry that finalizer, the leader records a *minimum
//! release* beside the release: the new guard refuses anything older, and so
//! does the old one, which cannot learn new code: the `release` value then
//! carries the explanation after the version (`0.4 - releases before 0.4
//! must not run here: ...`), which the 0.3 guard and the 0.3 chart reject as
//! an invalid version, quoting it. `strip-finalizers` is the safe path.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use protection_core::controllers::FinalizedResource;
use protection_core::version::Version;

/// Default name of the record.
pub const DEFAULT_RECORD_NAME: &str = "protection-manager-release";
/// The key holding the last release (`major.minor`).
pub const RELEASE_KEY: &str = "release";

/// The key holding the oldest release that may run (only while finalizers
/// unknown to older releases may be on objects).
pub const MINIMUM_RELEASE_KEY: &str = "minimumRelease";
/// One line per such finalizer (see [`StrandedFinalizer`]).
pub const MINIMUM_RELEASE_FINALIZERS_KEY: &str = "minimumReleaseFinalizers";

/// A finalizer that no release before the record's minimum removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrandedFinalizer {
    pub finalizer: String,
    pub controller: String,
    /// The gate that phases its addition.
    pub gate: String,
    /// Whether the recording manager adds it (its gate is on).
    pub adding: bool,
    /// How many objects carried it when recorded (counted only with the
    /// gate off; `None` when not counted).
    pub holders: Option<usize>,
    /// Set when the objects carrying it are cleared by deleting them, not by
    /// stripping (`FinalizedResource::cleared_by_deleting`): their
    /// `plural.group`, for the safe path.
    pub delete_to_clear: Option<String>,
}

impl StrandedFinalizer {
    /// `<finalizer> controller=<name> gate=<gate> adding=<bool>[ holders=<n>][ delete-to-clear=<resource>]`.
    pub fn line(&self) -> String {
        let mut l = format!(
            "{} controller={} gate={} adding={}",
            self.finalizer, self.controller, self.gate, self.adding
        );
        if let Some(n) = self.holders {
            l.push_str(&format!(" holders={n}"));
        }
        if let Some(r) = &self.delete_to_clear {
            l.push_str(&format!(" delete-to-clear={r}"));
        }
        l
    }

    fn parse_line(line: &str) -> Result<StrandedFinalizer, String> {
        let mut words = line.split_whitespace();
        let finalizer = words
            .next()
            .ok_or_else(|| "an empty line".to_string())?
            .to_string();
        let (mut controller, mut gate, mut adding, mut holders) = (None, None, None, None);
        let mut delete_to_clear = None;
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("{w:?} in line {line:?} is not key=value"))?;
            match k {
                "controller" => controller = Some(v.to_string()),
                "gate" => gate = Some(v.to_string()),
                "adding" => {
                    adding = Some(v.parse::<bool>().map_err(|_| {
                        format!("adding={v:?} in line {line:?}: expected true or false")
                    })?)
                }
                "holders" => {
                    holders =
                        Some(v.parse::<usize>().map_err(|_| {
                            format!("holders={v:?} in line {line:?}: expected a count")
                        })?)
                }
                "delete-to-clear" => delete_to_clear = Some(v.to_string()),
                _ => return Err(format!("unknown key {k:?} in line {line:?}")),
            }
        }
        let missing = |k: &str| format!("line {line:?} lacks {k}=");
        Ok(StrandedFinalizer {
            finalizer,
            controller: controller.ok_or_else(|| missing("controller"))?,
            gate: gate.ok_or_else(|| missing("gate"))?,
            adding: adding.ok_or_else(|| missing("adding"))?,
            holders,
            delete_to_clear,
        })
    }

    /// For the refusal: `F (controller C; gate G on)` or `... G off, N objects
    /// still carry it`.
    fn describe(&self) -> String {
        match (self.adding, self.holders) {
            (true, _) => format!(
                "{} (controller {}, feature gate {} on: it adds it)",
                self.finalizer, self.controller, self.gate
            ),
            (false, Some(n)) => format!(
                "{} (controller {}, feature gate {} off; {n} object(s) still carried it)",
                self.finalizer, self.controller, self.gate
            ),
            (false, None) => format!(
                "{} (controller {}, feature gate {} off; objects may still carry it)",
                self.finalizer, self.controller, self.gate
            ),
        }
    }
}

/// The oldest release that may run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinimumRelease {
    pub release: Version,
    pub finalizers: Vec<StrandedFinalizer>,
}

impl MinimumRelease {
    /// The safe path, in words (the refusal and the record's text), for the
    /// record at `location`.
    pub fn safe_path(&self, location: &RecordLocation) -> String {
        let gates: Vec<String> = self
            .finalizers
            .iter()
            .filter(|f| f.adding)
            .map(|f| format!("featureGates.{}=false", f.gate))
            .collect();
        let strip: Vec<String> = self
            .finalizers
            .iter()
            .map(|f| {
                format!(
                    "protection-manager strip-finalizers --controller {} --namespace {} --release-record-name {}",
                    f.controller, location.namespace, location.name
                )
            })
            .collect();
        let mut steps = Vec::new();
        if !gates.is_empty() {
            steps.push(format!(
                "turn the gate off (helm upgrade --reset-then-reuse-values --set {})",
                gates.join(" --set ")
            ));
        }
        for r in self
            .finalizers
            .iter()
            .filter_map(|f| f.delete_to_clear.as_ref())
        {
            steps.push(format!(
                "delete every {r} and wait until they are gone (`kubectl delete {r} --all`; the running manager first removes \
                 each one's finalizer from the objects it protects; rules the chart installs go with their values turned off)"
            ));
        }
        steps.push(format!("run `{}`", strip.join("` and `")));
        format!(
            "on release {}, {}, then roll back (README, \"Rollback\")",
            self.release,
            steps.join(", then ")
        )
    }

    /// The `release` value that carries the explanation after the version,
    /// for a guard that knows nothing of [`MINIMUM_RELEASE_KEY`].
    fn release_text(&self, running: Version, location: &RecordLocation) -> String {
        let finalizers: Vec<&str> = self
            .finalizers
            .iter()
            .map(|f| f.finalizer.as_str())
            .collect();
        format!(
            "{running} - releases before {min} must not run here: objects may carry {f}, which they never remove \
             (deleted objects would stay Terminating). Safe path: {path}",
            min = self.release,
            f = finalizers.join(", "),
            path = self.safe_path(location)
        )
    }
}

/// What the cluster remembers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRecord {
    pub release: Version,
    /// Free-form details (binary version, identity, time) for humans.
    pub binary_version: Option<String>,
    pub recorded_by: Option<String>,
    pub recorded_at: Option<String>,
    /// Set while finalizers that older releases do not know may be on objects.
    pub minimum: Option<MinimumRelease>,
}

/// Where the record lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordLocation {
    pub namespace: String,
    pub name: String,
}

/// Guard errors.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error(
        "refusing to run as release {running}: this cluster last ran protection-manager as release {recorded} \
         (ConfigMap {location}), {distance} releases away. Move one release at a time \
         ({path}): a skip can leave finalizers that no running release removes (objects stuck Terminating) \
         or skip the remove-only release a rollback relies on. Pass --skip-release-check to override."
    )]
    Skip {
        running: Version,
        recorded: Version,
        distance: u32,
        location: String,
        path: String,
    },
    #[error(
        "refusing to run as release {running}: objects in this cluster may carry {finalizers}, which no release before {minimum} removes \
         (ConfigMap {location}, {key}={minimum}); under release {running}, such an object once deleted stays Terminating. \
         Safe path: {safe_path}. Pass --skip-release-check to override (the finalizers stay)."
    )]
    BelowMinimum {
        running: Version,
        minimum: Version,
        finalizers: String,
        location: String,
        key: &'static str,
        safe_path: String,
    },
    #[error("release record ConfigMap {location} is invalid: {message}")]
    Invalid { location: String, message: String },
    /// The API server answered, and refused (403 without the RBAC, 404
    /// when the namespace does not exist, ...).
    #[error(
        "release record ConfigMap {location}: the API server refused the request: {code} {reason}: {message}"
    )]
    Refused {
        location: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer: the API server cannot be reached (or did not answer in
    /// time).
    #[error(
        "release record ConfigMap {location}: cannot reach the API server: {}",
        protection_core::errors::display_chain(source)
    )]
    Api {
        location: String,
        source: kube::Error,
    },
}

impl GuardError {
    /// Wraps an API error: a refusal the server answered, or no answer.
    fn api(location: &RecordLocation, source: kube::Error) -> Self {
        match source {
            kube::Error::Api(status) => GuardError::Refused {
                location: location.display(),
                code: status.code,
                reason: status.reason,
                message: status.message,
            },
            source => GuardError::Api {
                location: location.display(),
                source,
            },
        }
    }

    /// What the start-up log says it waits for.
    pub fn waiting_for(&self) -> &'static str {
        match self {
            GuardError::Refused { code: 403, .. } => {
                "the release guard is not allowed to read or write its record (check the RBAC); retrying"
            }
            GuardError::Refused { .. } => {
                "the API server refused the release guard's request; retrying"
            }
            GuardError::Api { .. } => "the release guard cannot reach the API server yet; retrying",
            GuardError::Skip { .. }
            | GuardError::BelowMinimum { .. }
            | GuardError::Invalid { .. } => "the release guard refused",
        }
    }
}

impl RecordLocation {
    pub fn display(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Decides whether `running` may start after `recorded`.
pub fn check(
    recorded: Option<&ReleaseRecord>,
    running: Version,
    location: &RecordLocation,
) -> Result<(), GuardError> {
    let Some(rec) = recorded else { return Ok(()) };
    let distance = rec.release.distance(running);
    if distance <= 1 {
        return match &rec.minimum {
            Some(min) if running < min.release => Err(GuardError::BelowMinimum {
                running,
                minimum: min.release,
                finalizers: min
                    .finalizers
                    .iter()
                    .map(StrandedFinalizer::describe)
                    .collect::<Vec<_>>()
                    .join(", "),
                location: location.display(),
                key: MINIMUM_RELEASE_KEY,
                safe_path: min.safe_path(location),
            }),
            _ => Ok(()),
        };
    }
    let path = stepping_path(rec.release, running);
    Err(GuardError::Skip {
        running,
        recorded: rec.release,
        distance,
        location: location.display(),
        path,
    })
}

/// `0.2 → 0.1 → 0.0` style hint.
fn stepping_path(from: Version, to: Version) -> String {
    if from.major != to.major {
        return format!("{from} → {to}");
    }
    let steps: Vec<String> = if from.minor <= to.minor {
        (from.minor..=to.minor)
            .map(|m| Version::new(from.major, m).to_string())
            .collect()
    } else {
        (to.minor..=from.minor)
            .rev()
            .map(|m| Version::new(from.major, m).to_string())
            .collect()
    };
    steps.join(" → ")
}

/// Parses a record ConfigMap.
pub fn parse(cm: &ConfigMap, location: &RecordLocation) -> Result<ReleaseRecord, GuardError> {
    let data = cm.data.clone().unwrap_or_default();
    let invalid = |message: String| GuardError::Invalid {
        location: location.display(),
        message,
    };
    let raw = data
        .get(RELEASE_KEY)
        .ok_or_else(|| invalid(format!("missing key {RELEASE_KEY:?}")))?;
    let minimum = match data.get(MINIMUM_RELEASE_KEY) {
        None => None,
        Some(m) => {
            let release: Version =
                m.parse()
                    .map_err(|e: protection_core::version::ParseVersionError| {
                        invalid(format!("key {MINIMUM_RELEASE_KEY:?}: {e}"))
                    })?;
            let lines = data.get(MINIMUM_RELEASE_FINALIZERS_KEY).ok_or_else(|| {
                invalid(format!(
                    "key {MINIMUM_RELEASE_KEY:?} without key {MINIMUM_RELEASE_FINALIZERS_KEY:?}"
                ))
            })?;
            let finalizers = lines
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(StrandedFinalizer::parse_line)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(format!("key {MINIMUM_RELEASE_FINALIZERS_KEY:?}: {e}")))?;
            if finalizers.is_empty() {
                return Err(invalid(format!(
                    "key {MINIMUM_RELEASE_FINALIZERS_KEY:?} names no finalizer"
                )));
            }
            Some(MinimumRelease {
                release,
                finalizers,
            })
        }
    };
    // With a minimum, the version is followed by its explanation (for
    // guards that predate the minimum); otherwise it stands alone.
    let version = match (raw.trim().split_once(char::is_whitespace), &minimum) {
        (Some((v, _)), Some(_)) => v,
        _ => raw.as_str(),
    };
    let release: Version = version
        .parse()
        .map_err(|e: protection_core::version::ParseVersionError| invalid(e.to_string()))?;
    Ok(ReleaseRecord {
        release,
        binary_version: data.get("binaryVersion").cloned(),
        recorded_by: data.get("recordedBy").cloned(),
        recorded_at: data.get("recordedAt").cloned(),
        minimum,
    })
}

/// The names of the objects of `resource` that carry `finalizer`, and
/// whether each is being deleted; `None` when the cluster serves none of
/// its versions (nothing can carry it).
pub async fn holders(
    client: &kube::Client,
    resource: &FinalizedResource,
    finalizer: &str,
) -> Result<Option<Vec<(String, bool)>>, kube::Error> {
    use kube::api::{ApiResource, DynamicObject, ListParams};
    for version in resource.versions {
        let api_version = if resource.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", resource.group)
        };
        let ar = ApiResource {
            group: resource.group.to_string(),
            version: version.to_string(),
            api_version,
            kind: resource.kind.to_string(),
            plural: resource.plural.to_string(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                return Ok(Some(
                    list.items
                        .into_iter()
                        .filter(|o| {
                            o.metadata
                                .finalizers
                                .as_ref()
                                .is_some_and(|f| f.iter().any(|f| f == finalizer))
                        })
                        .map(|o| {
                            let deleting = o.metadata.deletion_timestamp.is_some();
                            let name = match &o.metadata.namespace {
                                Some(ns) => format!("{ns}/{}", o.metadata.name.unwrap_or_default()),
                                None => o.metadata.name.unwrap_or_default(),
                            };
                            (name, deleting)
                        })
                        .collect(),
                ));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Reads the record, if any.
pub async fn read(
    client: &kube::Client,
    location: &RecordLocation,
) -> Result<Option<ReleaseRecord>, GuardError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &location.namespace);
    match api.get_opt(&location.name).await {
        Ok(Some(cm)) => parse(&cm, location).map(Some),
        Ok(None) => Ok(None),
        Err(source) => Err(GuardError::api(location, source)),
    }
}

/// The record's `data` for `running` with `minimum` (without the
/// free-form details).
pub fn record_data(
    running: Version,
    minimum: Option<&MinimumRelease>,
    location: &RecordLocation,
) -> std::collections::BTreeMap<&'static str, Option<String>> {
    let mut d = std::collections::BTreeMap::new();
    match minimum {
        None => {
            d.insert(RELEASE_KEY, Some(running.to_string()));
            d.insert(MINIMUM_RELEASE_KEY, None);
            d.insert(MINIMUM_RELEASE_FINALIZERS_KEY, None);
        }
        Some(m) => {
            d.insert(RELEASE_KEY, Some(m.release_text(running, location)));
            d.insert(MINIMUM_RELEASE_KEY, Some(m.release.to_string()));
            d.insert(
                MINIMUM_RELEASE_FINALIZERS_KEY,
                Some(
                    m.finalizers
                        .iter()
                        .map(|f| f.line() + "\n")
                        .collect::<String>(),
                ),
            );
        }
    }
    d
}

/// Records `running` and its `minimum` (nothing is written when the record
/// already says so). Returns whether it wrote.
pub async fn record(
    client: &kube::Client,
    location: &RecordLocation,
    running: Version,
    minimum: Option<&MinimumRelease>,
    binary_version: &str,
    identity: &str,
) -> Result<bool, GuardError> {
    let previous = read(client, location).await?;
    if let Some(rec) = &previous
        && rec.release == running
        && rec.minimum.as_ref() == minimum
    {
        return Ok(false);
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &location.namespace);
    let mut data = serde_json::Map::new();
    for (k, v) in record_data(running, minimum, location) {
        // A JSON merge patch: null removes a key a previous record had.
        data.insert(k.to_string(), v.map_or(serde_json::Value::Null, Into::into));
    }
    data.insert("binaryVersion".into(), binary_version.into());
    data.insert("recordedBy".into(), identity.into());
    data.insert("recordedAt".into(), Timestamp::now().to_string().into());
    if previous.is_none() {
        let body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": location.name,
                "labels": {"app.kubernetes.io/managed-by": "protection-manager", "app.kubernetes.io/component": "release-record"},
            },
            "data": data.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect::<serde_json::Map<_, _>>(),
        });
        let pp = PatchParams::apply("protection-manager").force();
        api.patch(&location.name, &pp, &Patch::Apply(body))
            .await
            .map_err(|source| GuardError::api(location, source))?;
    } else {
        let pp = PatchParams::default();
        api.patch(&location.name, &pp, &Patch::Merge(json!({ "data": data })))
            .await
            .map_err(|source| GuardError::api(location, source))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn loc() -> RecordLocation {
        RecordLocation {
            namespace: "pm".into(),
            name: DEFAULT_RECORD_NAME.into(),
        }
    }

    fn rec(v: Version) -> ReleaseRecord {
        ReleaseRecord {
            release: v,
            binary_version: None,
            recorded_by: None,
            recorded_at: None,
            minimum: None,
        }
    }

    fn vac(adding: bool, holders: Option<usize>) -> MinimumRelease {
        MinimumRelease {
            release: Version::new(0, 4),
            finalizers: vec![StrandedFinalizer {
                finalizer: "protection-manager.io/vac-protection".into(),
                controller: "vac-protection".into(),
                gate: "VolumeAttributesClass".into(),
                adding,
                holders,
                delete_to_clear: None,
            }],
        }
    }

    #[test]
    fn rules_that_carry_their_cleanup_finalizer_are_deleted_not_stripped_on_the_safe_path() {
        let v = Version::new;
        let mut min = vac(true, None);
        min.finalizers.push(StrandedFinalizer {
            finalizer: "protection-manager.io/rule-cleanup".into(),
            controller: "rules".into(),
            gate: "InUseProtectionRules".into(),
            adding: false,
            holders: Some(2),
            delete_to_clear: Some("protectionrules.protection-manager.io".into()),
        });
        let rec = parse(&cm_of(v(0, 4), Some(&min)), &loc()).unwrap();
        assert_eq!(rec.minimum.as_ref(), Some(&min), "the line round-trips");
        let msg = check(Some(&rec), v(0, 3), &loc()).unwrap_err().to_string();
        assert!(msg.contains("protection-manager.io/rule-cleanup (controller rules, feature gate InUseProtectionRules off; 2 object(s) still carried it)"), "{msg}");
        assert!(msg.contains("delete every protectionrules.protection-manager.io and wait until they are gone (`kubectl delete protectionrules.protection-manager.io --all`"), "{msg}");
        assert!(
            msg.contains("`protection-manager strip-finalizers --controller rules --namespace pm"),
            "{msg}"
        );
        let (gate_off, delete) = (
            msg.find("featureGates.VolumeAttributesClass=false")
                .unwrap(),
            msg.find("delete every").unwrap(),
        );
        assert!(
            gate_off < delete && delete < msg.find("run `").unwrap(),
            "{msg}"
        );
    }

    fn cm_of(running: Version, min: Option<&MinimumRelease>) -> ConfigMap {
        ConfigMap {
            data: Some(
                record_data(running, min, &loc())
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_minimum_refuses_older_releases_naming_gate_finalizer_and_safe_path() {
        let v = Version::new;
        let min = vac(true, None);
        let rec = parse(&cm_of(v(0, 4), Some(&min)), &loc()).unwrap();
        assert_eq!(rec.release, v(0, 4));
        assert_eq!(rec.minimum.as_ref(), Some(&min));
        // 0.4 and 0.5 may run; 0.3 (one release back) may not.
        assert!(check(Some(&rec), v(0, 4), &loc()).is_ok());
        assert!(check(Some(&rec), v(0, 5), &loc()).is_ok());
        let e = check(Some(&rec), v(0, 3), &loc()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("refusing to run as release 0.3: objects in this cluster may carry protection-manager.io/vac-protection (controller vac-protection, feature gate VolumeAttributesClass on: it adds it), which no release before 0.4 removes"), "{msg}");
        assert!(
            msg.contains("ConfigMap pm/protection-manager-release, minimumRelease=0.4"),
            "{msg}"
        );
        assert!(msg.contains("helm upgrade --reset-then-reuse-values --set featureGates.VolumeAttributesClass=false"), "{msg}");
        assert!(msg.contains("`protection-manager strip-finalizers --controller vac-protection --namespace pm --release-record-name protection-manager-release`"), "{msg}");
        assert!(msg.contains("--skip-release-check"), "{msg}");
        assert_eq!(e.waiting_for(), "the release guard refused");
        // A skip by two is still reported as such.
        let e = check(Some(&rec), v(0, 2), &loc()).unwrap_err();
        assert!(matches!(e, GuardError::Skip { .. }), "{e}");
        // Gate off, objects left: no gate step, still the strip step.
        let off = vac(false, Some(3));
        let rec = parse(&cm_of(v(0, 4), Some(&off)), &loc()).unwrap();
        assert_eq!(rec.minimum.as_ref(), Some(&off));
        let msg = check(Some(&rec), v(0, 3), &loc()).unwrap_err().to_string();
        assert!(
            msg.contains("feature gate VolumeAttributesClass off; 3 object(s) still carried it"),
            "{msg}"
        );
        assert!(!msg.contains("helm upgrade"), "{msg}");
        assert!(
            msg.contains("strip-finalizers --controller vac-protection"),
            "{msg}"
        );
    }

    /// What the 0.3 guard (this file before 0.4: `release` must be a bare
    /// `major.minor`) makes of a record with a minimum: an invalid version,
    /// quoted whole, so its refusal carries the explanation.
    #[test]
    fn a_guard_that_predates_the_minimum_refuses_it_quoting_the_explanation() {
        let data = cm_of(Version::new(0, 4), Some(&vac(true, None)))
            .data
            .unwrap();
        let raw = &data[RELEASE_KEY];
        let e = raw.parse::<Version>().unwrap_err();
        let old_message = GuardError::Invalid {
            location: loc().display(),
            message: e.to_string(),
        }
        .to_string();
        assert!(old_message.starts_with("release record ConfigMap pm/protection-manager-release is invalid: invalid version \"0.4 - releases before 0.4 must not run here: objects may carry protection-manager.io/vac-protection, which they never remove"), "{old_message}");
        assert!(
            old_message.contains("featureGates.VolumeAttributesClass=false"),
            "{old_message}"
        );
        assert!(
            old_message.contains("protection-manager strip-finalizers --controller vac-protection"),
            "{old_message}"
        );
        // Without a minimum the value stays a bare version.
        let data = cm_of(Version::new(0, 4), None).data.unwrap();
        assert_eq!(data[RELEASE_KEY], "0.4");
        assert!(!data.contains_key(MINIMUM_RELEASE_KEY));
    }

    #[test]
    fn parse_rejects_a_bad_minimum_naming_the_key() {
        let cm = |data: &[(&str, &str)]| ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
        let e = parse(
            &cm(&[("release", "0.4 - x"), ("minimumRelease", "four")]),
            &loc(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("key \"minimumRelease\": invalid version \"four\""),
            "{e}"
        );
        let e = parse(
            &cm(&[("release", "0.4"), ("minimumRelease", "0.4")]),
            &loc(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("without key \"minimumReleaseFinalizers\""),
            "{e}"
        );
        let e = parse(
            &cm(&[
                ("release", "0.4"),
                ("minimumRelease", "0.4"),
                (
                    "minimumReleaseFinalizers",
                    "x.io/f controller=c gate=G adding=maybe",
                ),
            ]),
            &loc(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("adding=\"maybe\""), "{e}");
        let e = parse(
            &cm(&[
                ("release", "0.4"),
                ("minimumRelease", "0.4"),
                ("minimumReleaseFinalizers", "x.io/f gate=G adding=true"),
            ]),
            &loc(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("lacks controller="), "{e}");
        // Text after the version without a minimum is not a release.
        let e = parse(&cm(&[("release", "0.4 - x")]), &loc()).unwrap_err();
        assert!(e.to_string().contains("invalid version \"0.4 - x\""), "{e}");
    }

    #[test]
    fn one_step_in_either_direction_is_allowed() {
        let v = Version::new;
        assert!(check(None, v(0, 0), &loc()).is_ok());
        for (from, to) in [
            ((0, 2), (0, 2)),
            ((0, 1), (0, 2)),
            ((0, 2), (0, 1)),
            ((0, 2), (0, 3)),
            ((0, 0), (0, 1)),
        ] {
            assert!(
                check(Some(&rec(v(from.0, from.1))), v(to.0, to.1), &loc()).is_ok(),
                "{from:?}->{to:?}"
            );
        }
    }

    #[test]
    fn a_skip_by_two_is_refused_with_the_path() {
        let e = check(Some(&rec(Version::new(0, 2))), Version::new(0, 0), &loc()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("refusing to run as release 0.0: this cluster last ran protection-manager as release 0.2"), "{msg}");
        assert!(
            msg.contains("ConfigMap pm/protection-manager-release"),
            "{msg}"
        );
        assert!(msg.contains("0.2 → 0.1 → 0.0"), "{msg}");
        assert!(msg.contains("--skip-release-check"), "{msg}");
        let e = check(Some(&rec(Version::new(0, 0))), Version::new(0, 3), &loc()).unwrap_err();
        assert!(e.to_string().contains("0.0 → 0.1 → 0.2 → 0.3"), "{e}");
    }

    #[test]
    fn api_errors_say_whether_the_server_refused_or_did_not_answer() {
        let status = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status {
                    code,
                    reason: reason.into(),
                    message: format!("namespaces \"pm\" {reason}"),
                    ..kube::core::Status::failure("", "")
                }
                .boxed(),
            )
        };
        let e = GuardError::api(&loc(), status(404, "NotFound"));
        assert_eq!(
            e.to_string(),
            "release record ConfigMap pm/protection-manager-release: the API server refused the request: 404 NotFound: namespaces \"pm\" NotFound"
        );
        assert_eq!(
            e.waiting_for(),
            "the API server refused the release guard's request; retrying"
        );
        let e = GuardError::api(&loc(), status(403, "Forbidden"));
        assert!(e.waiting_for().contains("check the RBAC"), "{e}");
        let e = GuardError::api(
            &loc(),
            kube::Error::Service("the API server https://10.0.0.1:6443/ did not answer within 30s (--request-timeout)".into()),
        );
        assert!(
            e.to_string().starts_with(
                "release record ConfigMap pm/protection-manager-release: cannot reach the API server: ServiceError: the API server https://10.0.0.1:6443/ did not answer"
            ),
            "{e}"
        );
        assert_eq!(
            e.waiting_for(),
            "the release guard cannot reach the API server yet; retrying"
        );
    }

    #[test]
    fn parse_rejects_a_bad_record_naming_it() {
        let cm = |data: &[(&str, &str)]| ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
        assert_eq!(
            parse(&cm(&[("release", "0.2")]), &loc()).unwrap().release,
            Version::new(0, 2)
        );
        let e = parse(&cm(&[]), &loc()).unwrap_err();
        assert!(
            e.to_string().contains("pm/protection-manager-release")
                && e.to_string().contains("missing key")
        );
        let e = parse(&cm(&[("release", "two")]), &loc()).unwrap_err();
        assert!(e.to_string().contains("\"two\""), "{e}");
    }
}

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

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::version::Version;

/// Default name of the record.
pub const DEFAULT_RECORD_NAME: &str = "protection-manager-release";
/// The key holding the last release (`major.minor`).
pub const RELEASE_KEY: &str = "release";

/// What the cluster remembers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRecord {
    pub release: Version,
    /// Free-form details (binary version, identity, time) for humans.
    pub binary_version: Option<String>,
    pub recorded_by: Option<String>,
    pub recorded_at: Option<String>,
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
        crate::errors::display_chain(source)
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
            GuardError::Skip { .. } | GuardError::Invalid { .. } => "the release guard refused",
        }
    }
}

impl RecordLocation {
    fn display(&self) -> String {
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
        return Ok(());
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
    let raw = data.get(RELEASE_KEY).ok_or_else(|| GuardError::Invalid {
        location: location.display(),
        message: format!("missing key {RELEASE_KEY:?}"),
    })?;
    let release: Version = raw
        .parse()
        .map_err(|e: crate::version::ParseVersionError| GuardError::Invalid {
            location: location.display(),
            message: e.to_string(),
        })?;
    Ok(ReleaseRecord {
        release,
        binary_version: data.get("binaryVersion").cloned(),
        recorded_by: data.get("recordedBy").cloned(),
        recorded_at: data.get("recordedAt").cloned(),
    })
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

/// Records `running` (one server-side apply; nothing is written when the
/// record already says `running`). Returns whether it wrote.
pub async fn record(
    client: &kube::Client,
    location: &RecordLocation,
    running: Version,
    binary_version: &str,
    identity: &str,
) -> Result<bool, GuardError> {
    if let Some(rec) = read(client, location).await?
        && rec.release == running
    {
        return Ok(false);
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &location.namespace);
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": location.name,
            "labels": {"app.kubernetes.io/managed-by": "protection-manager", "app.kubernetes.io/component": "release-record"},
        },
        "data": {
            RELEASE_KEY: running.to_string(),
            "binaryVersion": binary_version,
            "recordedBy": identity,
            "recordedAt": Timestamp::now().to_string(),
        },
    });
    let pp = PatchParams::apply("protection-manager").force();
    api.patch(&location.name, &pp, &Patch::Apply(body))
        .await
        .map_err(|source| GuardError::api(location, source))?;
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
        }
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

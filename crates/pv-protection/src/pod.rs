//! The part of a Pod the PVC rules read, and upstream's pod predicates.
//!
//! [`PodFacts`] deserializes a `v1.Pod` keeping only what the rules need
//! (name, namespace, uid, resourceVersion, deletion state, `spec.nodeName`,
//! `spec.volumes[].{name,persistentVolumeClaim.claimName,ephemeral}`,
//! `status.phase` and whether each container status is running). The watch
//! and the live LIST decode into it, so neither whole pods nor their
//! managedFields are ever held in memory.
//!
//! Predicates, ported from kubernetes/kubernetes:
//! * [`PodFacts::is_terminated`] is `pkg/volume/util.IsPodTerminated`;
//! * [`PodFacts::is_shut_down`] is `pvcprotection.podIsShutDown`;
//! * [`PodFacts::claims`] is `common.PodPVCIndexFunc` (regular claims and
//!   generic ephemeral volumes' derived claim names,
//!   `ephemeral.VolumeClaimName` = `<pod>-<volume>`).
//!
//! `podUsesPVC` itself lives in [`crate::index::PodEntry::uses`], which is
//! the same rule applied to the compact per-pod record the index keeps.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

use protection_core::slim::lite_meta;

/// A Pod reduced to what the protection rules read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PodFacts {
    #[serde(default, deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodSpecFacts,
    #[serde(default)]
    pub status: PodStatusFacts,
}

/// `spec` fields the rules read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecFacts {
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub volumes: Vec<VolumeFacts>,
}

/// One `spec.volumes[]` entry.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeFacts {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub persistent_volume_claim: Option<ClaimSource>,
    /// Present iff the volume is a generic ephemeral volume.
    #[serde(default, deserialize_with = "presence")]
    pub ephemeral: bool,
}

/// `persistentVolumeClaim` volume source.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSource {
    #[serde(default)]
    pub claim_name: String,
}

/// `status` fields the rules read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatusFacts {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub init_container_statuses: Vec<ContainerStatusFacts>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub container_statuses: Vec<ContainerStatusFacts>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub ephemeral_container_statuses: Vec<ContainerStatusFacts>,
}

/// One container status, reduced to "which state is set".
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct ContainerStatusFacts {
    #[serde(default)]
    pub state: Option<StateFacts>,
}

/// `state.{waiting,running,terminated}` presence.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct StateFacts {
    #[serde(default, deserialize_with = "presence")]
    pub waiting: bool,
    #[serde(default, deserialize_with = "presence")]
    pub running: bool,
    #[serde(default, deserialize_with = "presence")]
    pub terminated: bool,
}

/// One claim a pod references (upstream `PodPVCIndexFunc` keys).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimRef {
    pub name: String,
    /// A generic ephemeral volume's claim (`<pod>-<volume>`), which only
    /// counts when the claim is controlled by this pod and the pod is not
    /// shut down.
    pub ephemeral: bool,
}

impl PodFacts {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }

    /// `spec.nodeName`, when set and non-empty.
    pub fn node(&self) -> Option<&str> {
        self.spec.node_name.as_deref().filter(|n| !n.is_empty())
    }

    /// upstream `IsPodTerminated(pod, pod.Status)`: phase Failed or
    /// Succeeded, or deletionTimestamp set and no init, regular or ephemeral
    /// container is running (each status terminated, waiting, or absent).
    pub fn is_terminated(&self) -> bool {
        let phase = self.status.phase.as_deref();
        phase == Some("Failed")
            || phase == Some("Succeeded")
            || (self.metadata.deletion_timestamp.is_some()
                && not_running(&self.status.init_container_statuses)
                && not_running(&self.status.container_statuses)
                && not_running(&self.status.ephemeral_container_statuses))
    }

    /// upstream `podIsShutDown`: deletionTimestamp set and
    /// deletionGracePeriodSeconds == 0 (kubelet finished, or force-deleted).
    pub fn is_shut_down(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
            && self.metadata.deletion_grace_period_seconds == Some(0)
    }

    /// Every claim the pod references, in volume order (upstream
    /// `PodPVCIndexFunc`; also the claims `enqueuePVCs` enqueues).
    pub fn claims(&self) -> Vec<ClaimRef> {
        let mut out = Vec::new();
        for v in &self.spec.volumes {
            if let Some(src) = &v.persistent_volume_claim {
                out.push(ClaimRef {
                    name: src.claim_name.clone(),
                    ephemeral: false,
                });
            } else if v.ephemeral {
                out.push(ClaimRef {
                    name: ephemeral_claim_name(self.name(), &v.name),
                    ephemeral: true,
                });
            }
        }
        out
    }
}

/// upstream `ephemeral.VolumeClaimName`: `<pod name>-<volume name>`.
pub fn ephemeral_claim_name(pod: &str, volume: &str) -> String {
    format!("{pod}-{volume}")
}

/// upstream `notRunning`: every status is terminated or waiting (or the list
/// is empty). A status without a state counts as running, as in Go where the
/// zero `ContainerState` has neither field set.
fn not_running(statuses: &[ContainerStatusFacts]) -> bool {
    statuses.iter().all(|s| {
        s.state
            .as_ref()
            .is_some_and(|st| st.terminated || st.waiting)
    })
}

/// `true` iff the field is present and not null; its content is skipped.
fn presence<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<IgnoredAny>::deserialize(d)?.is_some())
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn facts(v: serde_json::Value) -> PodFacts {
        serde_json::from_value(v).unwrap()
    }

    /// A full pod as the API server sends it, with fields the facts ignore.
    fn full_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "ns", "uid": "u-1",
                "resourceVersion": "42", "labels": {"app": "web"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "deletionGracePeriodSeconds": 30
            },
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "cfg", "configMap": {"name": "x"}}
                ]
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "c", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "",
                     "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
                ]
            }
        })
    }

    #[test]
    fn facts_keep_exactly_what_the_rules_read() {
        let f = facts(full_pod());
        // The same JSON is a valid k8s-openapi Pod: the facts are a subset.
        let _: Pod = serde_json::from_value(full_pod()).unwrap();
        assert_eq!(f.name(), "web-0");
        assert_eq!(f.namespace(), "ns");
        assert_eq!(f.uid(), "u-1");
        assert_eq!(f.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(f.metadata.deletion_grace_period_seconds, Some(30));
        assert!(f.metadata.labels.is_none() && f.metadata.managed_fields.is_none());
        assert_eq!(f.node(), Some("node-1"));
        assert_eq!(
            f.claims(),
            vec![
                ClaimRef {
                    name: "data".into(),
                    ephemeral: false
                },
                ClaimRef {
                    name: "web-0-scratch".into(),
                    ephemeral: true
                },
            ]
        );
        assert!(
            f.status.container_statuses[0]
                .state
                .as_ref()
                .unwrap()
                .running
        );
    }

    #[test]
    fn empty_and_null_fields_decode() {
        let f = facts(
            json!({"metadata": {"name": "p"}, "spec": {"volumes": null, "nodeName": ""},
                             "status": {"containerStatuses": null}}),
        );
        assert_eq!(f.node(), None, "empty nodeName is unscheduled");
        assert!(f.claims().is_empty());
        let f = facts(json!({}));
        assert_eq!(f.name(), "");
        assert!(!f.is_terminated());
    }

    #[test]
    fn is_pod_terminated_matches_upstream() {
        let deleting = |statuses: serde_json::Value| {
            facts(
                json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                         "status": {"phase": "Running", "containerStatuses": statuses}}),
            )
        };
        // (case, pod, terminated?)
        let cases = [
            (
                "phase Succeeded",
                facts(json!({"status": {"phase": "Succeeded"}})),
                true,
            ),
            (
                "phase Failed",
                facts(json!({"status": {"phase": "Failed"}})),
                true,
            ),
            (
                "phase Running, not deleting",
                facts(json!({"status": {"phase": "Running"}})),
                false,
            ),
            (
                "phase Pending, not deleting",
                facts(json!({"status": {"phase": "Pending"}})),
                false,
            ),
            ("deleting, no statuses", deleting(json!([])), true),
            (
                "deleting, all terminated",
                deleting(json!([{"state": {"terminated": {"exitCode": 0}}}])),
                true,
            ),
            (
                "deleting, waiting",
                deleting(json!([{"state": {"waiting": {"reason": "x"}}}])),
                true,
            ),
            (
                "deleting, one running",
                deleting(json!([{"state": {"terminated": {}}}, {"state": {"running": {}}}])),
                false,
            ),
            (
                "deleting, status without state counts as running",
                deleting(json!([{"name": "c"}])),
                false,
            ),
            (
                "deleting, running init container",
                facts(
                    json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                             "status": {"initContainerStatuses": [{"state": {"running": {}}}]}}),
                ),
                false,
            ),
            (
                "deleting, running ephemeral container",
                facts(
                    json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                             "status": {"ephemeralContainerStatuses": [{"state": {"running": {}}}]}}),
                ),
                false,
            ),
        ];
        for (case, pod, want) in cases {
            assert_eq!(pod.is_terminated(), want, "{case}");
        }
    }

    #[test]
    fn pod_is_shut_down_matches_upstream() {
        let cases = [
            (json!({}), false),
            (json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}), false),
            (
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30}),
                false,
            ),
            (
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0}),
                true,
            ),
            (json!({"deletionGracePeriodSeconds": 0}), false),
        ];
        for (meta, want) in cases {
            assert_eq!(
                facts(json!({ "metadata": meta })).is_shut_down(),
                want,
                "{meta}"
            );
        }
    }
}

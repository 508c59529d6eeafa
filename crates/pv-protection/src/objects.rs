//! The PersistentVolume and PersistentVolumeClaim as the controllers cache
//! them: only what the rules, the finalizer patches and the events read.
//!
//! A k8s-openapi `PersistentVolume` is 3.5 kB before any heap data (every
//! volume source is an inline `Option`), and the reflector keeps one per PV;
//! these types keep the metadata the rules need (name, namespace, uid,
//! resourceVersion, finalizers, deletion state, ownerReferences), and for a
//! PV its `status.phase` and `spec.claimRef` (for the held event). They
//! decode the ordinary JSON the API server sends (unknown fields skipped), so
//! nothing on the wire changes; managedFields, labels and annotations are
//! never held.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use protection_core::slim::{lite, lite_meta};
use serde::Deserialize;

/// A PersistentVolume reduced to what pv-protection reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PvFacts {
    #[serde(default, deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PvSpecFacts,
    #[serde(default)]
    pub status: PvStatusFacts,
}

/// `spec` fields of a PV the controller reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PvSpecFacts {
    #[serde(default)]
    pub claim_ref: Option<ClaimRefFacts>,
}

/// `spec.claimRef`'s namespace and name.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct ClaimRefFacts {
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// `status` fields of a PV the rule reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PvStatusFacts {
    #[serde(default)]
    pub phase: Option<String>,
}

/// A PersistentVolumeClaim reduced to what pvc-protection reads (the rule
/// never consults a claim's spec or status).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PvcFacts {
    #[serde(default, deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
}

impl From<&PersistentVolume> for PvFacts {
    fn from(pv: &PersistentVolume) -> Self {
        PvFacts {
            metadata: lite(&pv.metadata),
            spec: PvSpecFacts {
                claim_ref: pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .map(|c| ClaimRefFacts {
                        namespace: c.namespace.clone(),
                        name: c.name.clone(),
                    }),
            },
            status: PvStatusFacts {
                phase: pv.status.as_ref().and_then(|s| s.phase.clone()),
            },
        }
    }
}

impl From<&PersistentVolumeClaim> for PvcFacts {
    fn from(pvc: &PersistentVolumeClaim) -> Self {
        PvcFacts {
            metadata: lite(&pvc.metadata),
        }
    }
}

protection_core::core_v1_resource!(
    PvFacts,
    "PersistentVolume",
    "persistentvolumes",
    k8s_openapi::ClusterResourceScope
);
protection_core::core_v1_resource!(
    PvcFacts,
    "PersistentVolumeClaim",
    "persistentvolumeclaims",
    k8s_openapi::NamespaceResourceScope
);
protection_core::core_v1_resource!(
    crate::pod::PodFacts,
    "Pod",
    "pods",
    k8s_openapi::NamespaceResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    #[test]
    fn pv_facts_keep_what_the_rule_reads() {
        let v = json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-1", "uid": "u", "resourceVersion": "7",
                         "finalizers": ["kubernetes.io/pv-protection"],
                         "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"a": "b"}, "annotations": {"x": "y"},
                         "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/x"},
                     "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "ns", "name": "data", "uid": "c"}},
            "status": {"phase": "Bound"}
        });
        let full: PersistentVolume = serde_json::from_value(v.clone()).unwrap();
        let f: PvFacts = serde_json::from_value(v).unwrap();
        assert_eq!(f, PvFacts::from(&full), "decoding and converting agree");
        assert_eq!(f.status.phase.as_deref(), Some("Bound"));
        assert_eq!(
            f.spec.claim_ref.as_ref().unwrap().name.as_deref(),
            Some("data")
        );
        assert_eq!(
            f.metadata.finalizers.as_deref(),
            Some(&["kubernetes.io/pv-protection".to_string()][..])
        );
        assert!(f.metadata.deletion_timestamp.is_some());
        assert!(f.metadata.labels.is_none() && f.metadata.managed_fields.is_none());
        assert!(std::mem::size_of::<PvFacts>() < std::mem::size_of::<PersistentVolume>() / 4);
    }

    #[test]
    fn pvc_facts_keep_metadata_with_owner_references() {
        let v = json!({
            "metadata": {"name": "pod1-scratch", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "pod1", "uid": "p", "controller": true}]},
            "spec": {"accessModes": ["ReadWriteOnce"]},
            "status": {"phase": "Bound"}
        });
        let full: PersistentVolumeClaim = serde_json::from_value(v.clone()).unwrap();
        let f: PvcFacts = serde_json::from_value(v).unwrap();
        assert_eq!(f, PvcFacts::from(&full));
        assert_eq!(f.metadata.owner_references.as_ref().unwrap()[0].uid, "p");
        assert_eq!(f.metadata.resource_version.as_deref(), Some("3"));
    }

    #[test]
    fn object_refs_name_the_real_kinds() {
        let pv = PvFacts {
            metadata: ObjectMeta {
                name: Some("pv-1".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = pv.object_ref(&());
        assert_eq!(
            (
                r.kind.as_deref(),
                r.api_version.as_deref(),
                r.name.as_deref()
            ),
            (Some("PersistentVolume"), Some("v1"), Some("pv-1"))
        );
        let pvc = PvcFacts {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
        };
        let r = pvc.object_ref(&());
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref()),
            (Some("PersistentVolumeClaim"), Some("ns"))
        );
    }
}

//! The objects vac-protection reads, reduced to what its rule needs:
//!
//! * a VolumeAttributesClass ([`Vac`]): its metadata (finalizers, deletion
//!   state). The class is served as storage.k8s.io `v1` (Kubernetes 1.34+)
//!   or `v1beta1` (1.31-1.33, where it is off by default); [`Vac`] is
//!   generic over the version the cluster serves ([`V1`], [`V1Beta1`]), the
//!   fields are the same;
//! * a PersistentVolumeClaim ([`PvcRefs`]): the classes it names in
//!   `spec.volumeAttributesClassName`, `status.currentVolumeAttributesClassName`
//!   and `status.modifyVolumeStatus.targetVolumeAttributesClassName`;
//! * a PersistentVolume ([`PvRefs`]): `spec.volumeAttributesClassName`.
//!
//! They decode the JSON the API server sends (unknown fields skipped); only
//! the metadata the finalizer patches need is kept.

use std::borrow::Cow;
use std::fmt::Debug;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use protection_core::slim::lite_meta;
use serde::Deserialize;

/// The API group of VolumeAttributesClass.
pub const GROUP: &str = "storage.k8s.io";
/// Its plural resource name.
pub const PLURAL: &str = "volumeattributesclasses";
/// Its kind.
pub const KIND: &str = "VolumeAttributesClass";

/// A served version of VolumeAttributesClass.
pub trait ApiVersion: Clone + Debug + Default + Send + Sync + 'static {
    const VERSION: &'static str;
}

/// storage.k8s.io/v1 (GA in Kubernetes 1.34).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V1;
impl ApiVersion for V1 {
    const VERSION: &'static str = "v1";
}

/// storage.k8s.io/v1beta1 (Kubernetes 1.31-1.33; off by default there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V1Beta1;
impl ApiVersion for V1Beta1 {
    const VERSION: &'static str = "v1beta1";
}

/// A VolumeAttributesClass as vac-protection caches it (metadata only: the
/// rule never reads `driverName` or `parameters`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(bound = "")]
pub struct Vac<V: ApiVersion> {
    #[serde(default, deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
    #[serde(skip)]
    version: PhantomData<V>,
}

impl<V: ApiVersion> Vac<V> {
    pub fn new(metadata: ObjectMeta) -> Self {
        Vac {
            metadata,
            version: PhantomData,
        }
    }
}

impl<V: ApiVersion> Resource for Vac<V> {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(V::VERSION)
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Owned(format!("{GROUP}/{}", V::VERSION))
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(PLURAL)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A PersistentVolumeClaim reduced to the classes it refers to.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PvcRefs {
    #[serde(default, deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PvcSpecRefs,
    #[serde(default)]
    pub status: PvcStatusRefs,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PvcSpecRefs {
    #[serde(default)]
    pub volume_attributes_class_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PvcStatusRefs {
    #[serde(default)]
    pub current_volume_attributes_class_name: Option<String>,
    #[serde(default)]
    pub modify_volume_status: Option<ModifyVolumeStatusRefs>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModifyVolumeStatusRefs {
    #[serde(default)]
    pub target_volume_attributes_class_name: Option<String>,
}

/// A PersistentVolume reduced to the class it refers to.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PvRefs {
    #[serde(default, deserialize_with = "lite_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PvSpecRefs,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PvSpecRefs {
    #[serde(default)]
    pub volume_attributes_class_name: Option<String>,
}

/// Which field of a user names the class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// PVC or PV `spec.volumeAttributesClassName`.
    Spec,
    /// PVC `status.currentVolumeAttributesClassName`.
    Current,
    /// PVC `status.modifyVolumeStatus.targetVolumeAttributesClassName`.
    Target,
}

impl Field {
    pub fn path(self) -> &'static str {
        match self {
            Field::Spec => "spec.volumeAttributesClassName",
            Field::Current => "status.currentVolumeAttributesClassName",
            Field::Target => "status.modifyVolumeStatus.targetVolumeAttributesClassName",
        }
    }
}

fn named(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.is_empty())
}

impl PvcRefs {
    /// upstream `getPVCReferencedVACNames`, with the field of each (an
    /// empty name refers to nothing).
    pub fn classes(&self) -> Vec<(String, Field)> {
        let mut out = Vec::new();
        if let Some(n) = named(&self.spec.volume_attributes_class_name) {
            out.push((n.to_string(), Field::Spec));
        }
        if let Some(n) = named(&self.status.current_volume_attributes_class_name) {
            out.push((n.to_string(), Field::Current));
        }
        if let Some(n) = self
            .status
            .modify_volume_status
            .as_ref()
            .and_then(|m| named(&m.target_volume_attributes_class_name))
        {
            out.push((n.to_string(), Field::Target));
        }
        out
    }
}

impl PvRefs {
    /// upstream `getPVReferencedVACNames`.
    pub fn classes(&self) -> Vec<(String, Field)> {
        named(&self.spec.volume_attributes_class_name)
            .map(|n| vec![(n.to_string(), Field::Spec)])
            .unwrap_or_default()
    }
}

protection_core::core_v1_resource!(
    PvcRefs,
    "PersistentVolumeClaim",
    "persistentvolumeclaims",
    k8s_openapi::NamespaceResourceScope
);
protection_core::core_v1_resource!(
    PvRefs,
    "PersistentVolume",
    "persistentvolumes",
    k8s_openapi::ClusterResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_claim_names_its_classes_in_three_fields_and_a_volume_in_one() {
        let pvc: PvcRefs = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "shop", "managedFields": [{}]},
            "spec": {"volumeAttributesClassName": "gold", "resources": {}},
            "status": {
                "currentVolumeAttributesClassName": "silver",
                "modifyVolumeStatus": {"targetVolumeAttributesClassName": "gold", "status": "InProgress"}
            }
        }))
        .unwrap();
        assert_eq!(
            pvc.classes(),
            vec![
                ("gold".into(), Field::Spec),
                ("silver".into(), Field::Current),
                ("gold".into(), Field::Target)
            ]
        );
        let empty: PvcRefs = serde_json::from_value(json!({
            "metadata": {"name": "x"}, "spec": {"volumeAttributesClassName": ""}
        }))
        .unwrap();
        assert!(
            empty.classes().is_empty(),
            "an empty name refers to nothing"
        );
        let pv: PvRefs = serde_json::from_value(json!({
            "metadata": {"name": "pv-1"}, "spec": {"volumeAttributesClassName": "gold"}
        }))
        .unwrap();
        assert_eq!(pv.classes(), vec![("gold".into(), Field::Spec)]);
    }

    #[test]
    fn the_class_is_served_at_the_version_the_cluster_has() {
        assert_eq!(Vac::<V1>::api_version(&()), "storage.k8s.io/v1".to_string());
        assert_eq!(
            Vac::<V1Beta1>::api_version(&()),
            "storage.k8s.io/v1beta1".to_string()
        );
        let v: Vac<V1> = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
            "metadata": {"name": "gold", "finalizers": ["kubernetes.io/vac-protection"]},
            "driverName": "csi.example.com", "parameters": {"iops": "3000"}
        }))
        .unwrap();
        assert_eq!(v.metadata.name.as_deref(), Some("gold"));
    }
}

//! Slim objects: the metadata a controller's cache keeps. A reflector holds
//! one object per watched item; decoding `metadata` through [`lite_meta`]
//! keeps name, namespace, uid, resourceVersion, finalizers, deletion state
//! and ownerReferences, and never holds managedFields, labels or
//! annotations. Nothing on the wire changes (unknown fields are skipped).
//! Pair with [`core_v1_resource!`](crate::core_v1_resource) for the type.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// Keeps only the metadata fields [`lite_meta`] keeps.
pub fn lite(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        finalizers: meta.finalizers.clone(),
        deletion_timestamp: meta.deletion_timestamp.clone(),
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        owner_references: meta.owner_references.clone(),
        ..ObjectMeta::default()
    }
}

/// The metadata fields the controllers read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiteMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
}

/// Deserializes `metadata` keeping only name, namespace, uid,
/// resourceVersion, finalizers, deletion state and ownerReferences.
pub fn lite_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m: Option<LiteMeta> = Option::deserialize(d)?;
    Ok(m.map(|m| ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        finalizers: m.finalizers,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        owner_references: m.owner_references,
        ..ObjectMeta::default()
    })
    .unwrap_or_default())
}

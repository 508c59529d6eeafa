//! The phased-finalizer helper: "add if the add-gate is on and the object is
//! not being deleted" and "remove", each exactly one API request, never
//! clobbering a finalizer that another writer owns, and a no-op (no request)
//! when the object is already in the desired state.
//!
//! [`PhasedFinalizer`] writes a JSON patch on the main resource whose `test`
//! operations pin the object's UID and the finalizer list (or the index being
//! removed). A stale cache cannot remove or overwrite anything: the server
//! answers 422 and the caller re-reads. This is kube-rs' `finalizer()`
//! pattern plus a UID guard.
//!
//! [`strategic_add_fragment`] and [`strategic_remove_fragment`] build the
//! `metadata` of a strategic merge patch instead, for a controller that
//! writes the finalizer together with a status change to the `status`
//! subresource, as the upstream service controller does (so its RBAC needs no
//! write on the main resource). `finalizers` has patchStrategy=merge, so
//! adding merges one string and removing uses `$deleteFromPrimitiveList`;
//! neither touches other entries. Deliberate deviation from upstream: upstream
//! computes a two-way diff, which for the *last* finalizer degenerates to
//! `"finalizers": null` and would wipe a finalizer another writer added
//! concurrently; we always send `$deleteFromPrimitiveList`. We also include
//! `metadata.uid`, which the server treats as a precondition (uid is
//! immutable: a recreated object with the same name answers 422 instead of
//! being modified).

use std::fmt::Debug;

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, Patch as JsonPatch, PatchOperation, RemoveOperation, TestOperation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::metrics::ControllerMetrics;

/// Which finalizer names the controllers use.
///
/// * `Project` (default): the project's own names
///   (`protection-manager.io/...`), so the manager can run beside
///   kube-controller-manager and a cloud-controller-manager without either
///   removing the other's finalizer.
/// * `Upstream`: the upstream names (`kubernetes.io/pv-protection`,
///   `kubernetes.io/pvc-protection`,
///   `service.kubernetes.io/load-balancer-cleanup`) for clusters that disabled
///   the built-in controllers (kube-controller-manager
///   `--controllers=*,-pv-protection,-pvc-protection`, no service controller).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FinalizerProfile {
    #[default]
    Project,
    Upstream,
}

impl FinalizerProfile {
    pub fn as_str(self) -> &'static str {
        match self {
            FinalizerProfile::Project => "project",
            FinalizerProfile::Upstream => "upstream",
        }
    }
}

impl std::str::FromStr for FinalizerProfile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "project" | "default" => Ok(FinalizerProfile::Project),
            "upstream" => Ok(FinalizerProfile::Upstream),
            other => Err(format!(
                "invalid finalizer profile {other:?}: want \"project\" (the default) or \"upstream\""
            )),
        }
    }
}

impl std::fmt::Display for FinalizerProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The project's own finalizer/class domain.
pub const PROJECT_DOMAIN: &str = "protection-manager.io";

/// The single request that moves the finalizer list one step: a JSON patch
/// with `test` guards on the main resource.
#[derive(Clone, Debug, PartialEq)]
pub struct FinalizerPatch(pub JsonPatch);

impl FinalizerPatch {
    /// The request body exactly as it goes on the wire.
    pub fn body(&self) -> Value {
        serde_json::to_value(&self.0).unwrap_or(Value::Null)
    }
}

/// A finalizer helper error.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    #[error("invalid finalizer name {name:?}: {reason}")]
    InvalidName { name: String, reason: String },
    #[error("object has no name")]
    Unnamed,
    /// The object changed under us (a `test` failed, the UID no longer
    /// matches, or a resourceVersion conflict): re-read and decide again.
    #[error("{kind} {name}: finalizer patch rejected because the object changed: {message}")]
    Stale {
        kind: String,
        name: String,
        message: String,
    },
    #[error("{kind} {name}: finalizer patch failed: {source}")]
    Api {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Another writer keeps removing the finalizer we add: the re-add
    /// waits (runtime::fight).
    #[error(
        "{kind} {name}: another writer keeps removing finalizer {finalizer}; re-adding it in {wait:?}"
    )]
    Fight {
        kind: String,
        name: String,
        finalizer: String,
        wait: std::time::Duration,
    },
}

impl FinalizerError {
    /// Whether a quick re-read and retry is the right reaction.
    pub fn is_stale(&self) -> bool {
        matches!(self, FinalizerError::Stale { .. })
    }

    /// The wait an error asks for instead of the failure backoff (a fight's
    /// back-off).
    pub fn retry_in(&self) -> Option<std::time::Duration> {
        match self {
            FinalizerError::Fight { wait, .. } => Some(*wait),
            _ => None,
        }
    }
}

/// What a finalizer call did.
#[derive(Debug)]
pub enum Outcome<K> {
    /// One request was sent; the server's answer.
    Patched(K),
    /// Already in the desired state (or the add phase is off): no request.
    Unchanged,
    /// The object no longer exists (NotFound).
    Gone,
}

impl<K> Outcome<K> {
    pub fn wrote(&self) -> bool {
        matches!(self, Outcome::Patched(_))
    }
}

/// Checks a finalizer name the way the API server does (a qualified name
/// with a DNS-subdomain prefix: `example.com/name`).
pub fn validate_finalizer_name(name: &str) -> Result<(), FinalizerError> {
    let bad = |reason: &str| FinalizerError::InvalidName {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let Some((prefix, local)) = name.split_once('/') else {
        return Err(bad(
            "name is neither a standard finalizer name nor is it fully qualified (want <domain>/<name>)",
        ));
    };
    if prefix.is_empty() || prefix.len() > 253 {
        return Err(bad(
            "prefix part must be a non-empty DNS subdomain of at most 253 characters",
        ));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !prefix.split('.').all(label_ok) {
        return Err(bad(
            "prefix part must be a lowercase RFC 1123 subdomain (e.g. 'example.com')",
        ));
    }
    let name_ok = !local.is_empty()
        && local.len() <= 63
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && local.as_bytes()[0].is_ascii_alphanumeric()
        && local.as_bytes()[local.len() - 1].is_ascii_alphanumeric();
    if !name_ok {
        return Err(bad(
            "name part must consist of alphanumeric characters, '-', '_' or '.', start and end with an alphanumeric character, and be at most 63 characters",
        ));
    }
    Ok(())
}

/// True iff the object is being deleted.
pub fn is_deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// True iff `finalizer` is in the object's list.
pub fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers
        .as_deref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// One finalizer owned by one controller, with its add phase gated.
#[derive(Clone, Debug)]
pub struct PhasedFinalizer {
    name: String,
    add_enabled: bool,
    field_manager: String,
    metrics: Option<ControllerMetrics>,
}

impl PhasedFinalizer {
    /// `add_enabled` is the add-gate at the running (or emulated) version;
    /// removal is never gated.
    pub fn new(name: &str, add_enabled: bool) -> Result<Self, FinalizerError> {
        validate_finalizer_name(name)?;
        Ok(PhasedFinalizer {
            name: name.to_string(),
            add_enabled,
            field_manager: "protection-manager".to_string(),
            metrics: None,
        })
    }

    /// Counts successful adds/removes in the controller's metrics.
    pub fn with_metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The `fieldManager` recorded for our writes.
    pub fn with_field_manager(mut self, manager: &str) -> Self {
        self.field_manager = manager.to_string();
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The controller's metrics, when counted.
    pub fn metrics(&self) -> Option<&ControllerMetrics> {
        self.metrics.as_ref()
    }

    /// The `fieldManager` of our writes.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    pub fn add_enabled(&self) -> bool {
        self.add_enabled
    }

    pub fn is_present(&self, meta: &ObjectMeta) -> bool {
        has_finalizer(meta, &self.name)
    }

    /// upstream `NeedToAddFinalizer` plus the gate: not deleting, missing, and
    /// the add phase is on.
    pub fn needs_add(&self, meta: &ObjectMeta) -> bool {
        self.add_enabled && !is_deleting(meta) && !self.is_present(meta)
    }

    /// upstream `IsDeletionCandidate`: deleting and ours is present.
    pub fn is_deletion_candidate(&self, meta: &ObjectMeta) -> bool {
        is_deleting(meta) && self.is_present(meta)
    }

    /// The request that adds the finalizer, or `None` when no request is due
    /// (gate off, object deleting, already present).
    pub fn add_patch(&self, meta: &ObjectMeta) -> Option<FinalizerPatch> {
        if !self.needs_add(meta) {
            return None;
        }
        let current = meta.finalizers.clone().unwrap_or_default();
        let mut ops = uid_guard(meta);
        if current.is_empty() {
            // The server omits an empty list; `test` of a missing
            // member against null succeeds (apiserver's json-patch).
            ops.push(test("/metadata/finalizers", Value::Null));
            ops.push(add("/metadata/finalizers", json!([self.name])));
        } else {
            ops.push(test("/metadata/finalizers", json!(current)));
            ops.push(add("/metadata/finalizers/-", json!(self.name)));
        }
        Some(FinalizerPatch(JsonPatch(ops)))
    }

    /// The request that removes every occurrence of the finalizer, or `None`
    /// when it is absent. Whether removal is *due* (deleting and not in use,
    /// or a type change) is the controller's decision, never gated.
    pub fn remove_patch(&self, meta: &ObjectMeta) -> Option<FinalizerPatch> {
        if !self.is_present(meta) {
            return None;
        }
        let current = meta.finalizers.as_deref().unwrap_or_default();
        let mut ops = uid_guard(meta);
        // Highest index first so earlier indices stay valid.
        for (i, _) in current
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, f)| **f == self.name)
        {
            let path = format!("/metadata/finalizers/{i}");
            ops.push(test(&path, json!(self.name)));
            ops.push(PatchOperation::Remove(RemoveOperation {
                path: pointer(&path),
            }));
        }
        Some(FinalizerPatch(JsonPatch(ops)))
    }

    /// Adds the finalizer with one request if due; see [`Self::add_patch`].
    pub async fn add<K>(&self, api: &Api<K>, obj: &K) -> Result<Outcome<K>, FinalizerError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        self.add_as(api, obj, &K::kind(&K::DynamicType::default()))
            .await
    }

    /// [`Self::add`] for a kind known at run time (`kind` names it in
    /// errors).
    pub async fn add_as<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        kind: &str,
    ) -> Result<Outcome<K>, FinalizerError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        self.write_as(api, obj, kind, self.add_patch(obj.meta()), |m| {
            m.finalizer_added()
        })
        .await
    }

    /// Removes the finalizer with one request if present; see
    /// [`Self::remove_patch`].
    pub async fn remove<K>(&self, api: &Api<K>, obj: &K) -> Result<Outcome<K>, FinalizerError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        self.remove_as(api, obj, &K::kind(&K::DynamicType::default()))
            .await
    }

    /// [`Self::remove`] for a kind known at run time.
    pub async fn remove_as<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        kind: &str,
    ) -> Result<Outcome<K>, FinalizerError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        let deleted_at = obj.meta().deletion_timestamp.as_ref().map(|ts| ts.0);
        self.write_as(api, obj, kind, self.remove_patch(obj.meta()), |m| {
            m.finalizer_removed();
            if let Some(ts) = deleted_at {
                m.observe_cleanup_since(ts);
            }
        })
        .await
    }

    /// Sends `patch` if there is one, and tells the metrics through
    /// `wrote` once the server took it.
    async fn write_as<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        kind: &str,
        patch: Option<FinalizerPatch>,
        wrote: impl FnOnce(&ControllerMetrics),
    ) -> Result<Outcome<K>, FinalizerError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        let Some(patch) = patch else {
            return Ok(Outcome::Unchanged);
        };
        let name = obj.meta().name.clone().ok_or(FinalizerError::Unnamed)?;
        let pp = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let res = api.patch(&name, &pp, &Patch::Json::<()>(patch.0)).await;
        let out = classify(res, kind, &obj.name_any())?;
        if out.wrote()
            && let Some(m) = &self.metrics
        {
            wrote(m);
        }
        Ok(out)
    }
}

/// The `metadata` of a strategic merge patch that adds `finalizer`, guarded
/// by the object's `uid` (a precondition: a recreated object answers 422),
/// for a caller that merges it with a status change into one request.
pub fn strategic_add_fragment(uid: &str, finalizer: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("uid".into(), json!(uid));
    m.insert("finalizers".into(), json!([finalizer]));
    m
}

/// The `metadata` of a strategic merge patch that removes `finalizer` with
/// `$deleteFromPrimitiveList` (never touching another writer's entry),
/// guarded by the object's `uid`.
pub fn strategic_remove_fragment(uid: &str, finalizer: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("uid".into(), json!(uid));
    m.insert(
        "$deleteFromPrimitiveList/finalizers".into(),
        json!([finalizer]),
    );
    m
}

/// Maps an API answer for a guarded write onto an [`Outcome`].
pub fn classify<K>(
    res: Result<K, kube::Error>,
    kind: &str,
    name: &str,
) -> Result<Outcome<K>, FinalizerError> {
    match res {
        Ok(k) => Ok(Outcome::Patched(k)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Outcome::Gone),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => Err(FinalizerError::Stale {
            kind: kind.to_string(),
            name: name.to_string(),
            message: s.message.clone(),
        }),
        Err(source) => Err(FinalizerError::Api {
            kind: kind.to_string(),
            name: name.to_string(),
            source,
        }),
    }
}

fn pointer(path: &str) -> PointerBuf {
    // Every path built here is a valid JSON pointer by construction.
    PointerBuf::parse(path).unwrap_or_default()
}

fn test(path: &str, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path: pointer(path),
        value,
    })
}

fn add(path: &str, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: pointer(path),
        value,
    })
}

fn uid_guard(meta: &ObjectMeta) -> Vec<PatchOperation> {
    meta.uid
        .as_ref()
        .map(|uid| vec![test("/metadata/uid", json!(uid))])
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const F: &str = "protection.example.io/pvc-protection";

    fn meta(finalizers: &[&str], deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("data".into()),
            namespace: Some("ns".into()),
            uid: Some("u-1".into()),
            finalizers: if finalizers.is_empty() {
                None
            } else {
                Some(finalizers.iter().map(|s| s.to_string()).collect())
            },
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        }
    }

    fn finalizer(add_enabled: bool) -> PhasedFinalizer {
        PhasedFinalizer::new(F, add_enabled).unwrap()
    }

    #[test]
    fn json_add_to_empty_list_tests_null() {
        let p = finalizer(true).add_patch(&meta(&[], false)).unwrap();
        assert_eq!(
            p.body(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [F]},
            ])
        );
    }

    #[test]
    fn json_add_appends_after_testing_the_whole_list() {
        let p = finalizer(true)
            .add_patch(&meta(&["other.io/x"], false))
            .unwrap();
        assert_eq!(
            p.body(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/finalizers", "value": ["other.io/x"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": F},
            ])
        );
    }

    #[test]
    fn json_remove_tests_each_index_highest_first() {
        let p = finalizer(false)
            .remove_patch(&meta(&[F, "other.io/x", F], true))
            .unwrap();
        assert_eq!(
            p.body(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u-1"},
                {"op": "test", "path": "/metadata/finalizers/2", "value": F},
                {"op": "remove", "path": "/metadata/finalizers/2"},
                {"op": "test", "path": "/metadata/finalizers/0", "value": F},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
    }

    #[test]
    fn strategic_bodies_merge_and_delete_from_primitive_list() {
        assert_eq!(
            Value::Object(strategic_add_fragment("u-1", F)),
            json!({"uid": "u-1", "finalizers": [F]})
        );
        assert_eq!(
            Value::Object(strategic_remove_fragment("u-1", F)),
            json!({"uid": "u-1", "$deleteFromPrimitiveList/finalizers": [F]})
        );
    }

    #[test]
    fn no_op_cases_send_nothing() {
        let f = finalizer(true);
        {
            // Already present.
            assert_eq!(f.add_patch(&meta(&[F], false)), None);
            // Being deleted: never add (the server would refuse anyway).
            assert_eq!(f.add_patch(&meta(&[], true)), None);
            // Absent: nothing to remove.
            assert_eq!(f.remove_patch(&meta(&["other.io/x"], true)), None);
        }
        let f = finalizer(false);
        {
            // Add phase off (Alpha default): never add ...
            assert_eq!(f.add_patch(&meta(&[], false)), None);
            // ... but removal is never gated.
            assert!(f.remove_patch(&meta(&[F], true)).is_some());
        }
    }

    #[test]
    fn predicates_match_protectionutil() {
        let f = finalizer(true);
        assert!(f.needs_add(&meta(&[], false)));
        assert!(!f.needs_add(&meta(&[], true)));
        assert!(!f.needs_add(&meta(&[F], false)));
        assert!(f.is_deletion_candidate(&meta(&[F], true)));
        assert!(!f.is_deletion_candidate(&meta(&[F], false)));
        assert!(!f.is_deletion_candidate(&meta(&[], true)));
        assert!(!finalizer(false).needs_add(&meta(&[], false)));
    }

    #[test]
    fn object_without_uid_gets_no_uid_guard() {
        let mut m = meta(&[], false);
        m.uid = None;
        let p = finalizer(true).add_patch(&m).unwrap();
        assert_eq!(p.body().as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn finalizer_names_are_validated_like_the_api_server() {
        for ok in [
            "kubernetes.io/pvc-protection",
            "service.kubernetes.io/load-balancer-cleanup",
            "protection-manager.io/pv_protection.v1",
        ] {
            assert!(validate_finalizer_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "nodomain",
            "/x",
            "Example.com/x",
            "a.io/",
            "a.io/-x",
            "a..io/x",
            "a.io/x/y",
        ] {
            let e = validate_finalizer_name(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    /// A client whose API server answers every request with `status` and
    /// `body`, counting the requests.
    fn answering(
        status: u16,
        body: Value,
    ) -> (kube::Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = sent.clone();
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let res = http::Response::builder()
                .status(status)
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    body.to_string(),
                )))
                .unwrap();
            std::future::ready(Ok::<_, std::convert::Infallible>(res))
        });
        (kube::Client::new(svc, "default"), sent)
    }

    fn claim(m: ObjectMeta) -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
        k8s_openapi::api::core::v1::PersistentVolumeClaim {
            metadata: m,
            ..Default::default()
        }
    }

    fn status(code: u16, reason: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": "answered", "reason": reason, "code": code})
    }

    /// What the metrics count: a write the server took (an add; a removal
    /// with its cleanup duration), never a write not sent or not taken.
    #[tokio::test]
    async fn the_metrics_count_the_writes_the_server_took() {
        let metrics = crate::metrics::Metrics::new().unwrap();
        let counted = |needle: &str| {
            let text = metrics.encode().unwrap();
            text.lines()
                .find(|l| l.starts_with(needle))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_string)
                .unwrap_or_else(|| "absent".into())
        };
        let f = finalizer(true).with_metrics(metrics.controller("pvc-protection"));
        let added = "protection_manager_finalizers_added_total{controller=\"pvc-protection\"}";
        let removed = "protection_manager_finalizers_removed_total{controller=\"pvc-protection\"}";
        let cleanup =
            "protection_manager_cleanup_duration_seconds_count{controller=\"pvc-protection\"}";

        let fresh = claim(meta(&[], false));
        let (c, sent) = answering(200, serde_json::to_value(&fresh).unwrap());
        let api = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(c, "ns");
        assert!(f.add(&api, &fresh).await.unwrap().wrote());
        assert_eq!(counted(added), "1");
        // Already there: no request, nothing counted.
        let held = claim(meta(&[F], false));
        assert!(matches!(
            f.add(&api, &held).await.unwrap(),
            Outcome::Unchanged
        ));
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(counted(added), "1");

        let deleting = claim(meta(&[F], true));
        assert!(f.remove(&api, &deleting).await.unwrap().wrote());
        assert_eq!(counted(removed), "1");
        assert_eq!(counted(cleanup), "1");

        // Gone (404) and stale (409) writes are not counted.
        let (c, _) = answering(404, status(404, "NotFound"));
        let api = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(c, "ns");
        assert!(matches!(
            f.remove(&api, &deleting).await.unwrap(),
            Outcome::Gone
        ));
        let (c, _) = answering(409, status(409, "Conflict"));
        let api = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(c, "ns");
        let e = f.add(&api, &fresh).await.unwrap_err();
        assert!(matches!(e, FinalizerError::Stale { .. }), "{e}");
        assert_eq!(
            (counted(added), counted(removed), counted(cleanup)),
            ("1".into(), "1".into(), "1".into())
        );
    }
}

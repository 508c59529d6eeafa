//! Emulated control-plane loops that a real cluster runs outside the API
//! server, kept to what API clients observe:
//!
//! * the namespace controller (pkg/controller/namespace/deletion): a
//!   Terminating namespace has its pods deleted, then (once no pod is
//!   left) the rest of its content (objects with finalizers stay
//!   Terminating until their finalizers are removed), with the deletion
//!   conditions on its status; once empty, the `kubernetes` spec finalizer
//!   is removed through `namespaces/finalize` and the namespace goes away;
//! * the garbage collector's handling of the `orphan` and
//!   `foregroundDeletion` finalizers (pkg/controller/garbagecollector):
//!   dependents (by ownerReferences uid) are orphaned or deleted, then the
//!   finalizer is removed;
//! * background cascading deletion: when an owner is deleted, dependents
//!   whose every owner is gone are deleted, and dangling ownerReferences of
//!   dependents that keep another owner are removed (attemptToDeleteItem).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::object;
use crate::resources::{self, RESOURCES, ResId};
use crate::store::{DeleteOptions, Store, Stored, WriteOptions};

const MANAGER: &str = "kube-sim-controllers";

/// How often the API server's default ServiceCIDR controller syncs
/// (`DefaultEndpointReconcilerInterval`).
const DEFAULT_SERVICE_CIDR_INTERVAL: Duration = Duration::from_secs(10);

/// The API server's default ServiceCIDR controller
/// (pkg/controlplane/controller/defaultservicecidr): every 10 s, recreates
/// the `kubernetes` ServiceCIDR if it was deleted and marks it Ready.
pub(crate) async fn run_default_service_cidr(
    store: Arc<Store>,
    range: String,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(DEFAULT_SERVICE_CIDR_INTERVAL) => {}
            _ = stop.cancelled() => return,
        }
        if let Err(e) = crate::networking::sync_default_service_cidr(&store, &range) {
            tracing::warn!(error = %e, "default ServiceCIDR controller: sync failed");
        }
    }
}

/// Runs the loops until `stop` fires.
pub(crate) async fn run(store: Arc<Store>, stop: tokio_util::sync::CancellationToken) {
    let mut changes = store.subscribe_all();
    loop {
        let busy =
            reconcile_namespaces(&store) | reconcile_gc(&store) | reconcile_dependents(&store);
        let wait = async {
            if busy {
                // Work remains (e.g. objects with finalizers, or pods past
                // their grace period): poll gently, also without a write
                // (what the namespace controller reports changes with time).
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = tokio::time::timeout(Duration::from_secs(1), changes.changed()).await;
            } else {
                let _ = changes.changed().await;
            }
            // Batch bursts of writes into one pass.
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        tokio::select! {
            _ = wait => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// The service accounts kube-controller-manager's namespace controller
/// and garbage collector act as (`--use-service-account-credentials`), so
/// that admission policies see the deletes as a real cluster's.
const NAMESPACE_CONTROLLER: &str = "namespace-controller";
const GARBAGE_COLLECTOR: &str = "generic-garbage-collector";

fn as_controller(name: &str) -> DeleteOptions {
    DeleteOptions {
        user: Some(std::sync::Arc::new(crate::admission::UserInfo::controller(
            name,
        ))),
        ..Default::default()
    }
}

/// The namespace controller deletes a namespace's content by collection
/// (`deleteCollection`), so admission sees no names.
fn as_namespace_controller() -> DeleteOptions {
    DeleteOptions {
        collection: true,
        ..as_controller(NAMESPACE_CONTROLLER)
    }
}

fn ns_rid() -> ResId {
    resources::find("", "v1", "namespaces").unwrap_or(0)
}

/// Returns whether some namespace is still terminating.
///
/// As kube-controller-manager v1.36's namespace deleter
/// (`namespaced_resources_deleter.go`): pods go first
/// (OrderedNamespaceDeletion, locked on since 1.34), and nothing else is
/// deleted while a pod remains; then every other kind, one collection at a
/// time (the API server's DeleteCollection with one worker stops at the
/// first refused object, so the objects after it are not deleted either).
/// Each pass writes the namespace's deletion conditions (what a user sees
/// in `kubectl describe namespace`): the refusals, the kinds left and the
/// finalizers holding them.
fn reconcile_namespaces(store: &Store) -> bool {
    let rid = ns_rid();
    let (namespaces, _) = store.snapshot(rid, None);
    let mut busy = false;
    for ns in namespaces {
        let deleting = object::meta(&ns.value).is_some_and(|m| m.contains_key("deletionTimestamp"));
        let has_kube_fin = ns
            .value
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|f| f == "kubernetes"));
        if !deleting || !has_kube_fin {
            continue;
        }
        let name = object::meta_str(&ns.value, "name").to_string();
        let mut report = DeletionReport::default();
        let pods = resources::find("", "v1", "pods");
        if let Some(pods) = pods {
            let estimate = pods_estimate(store, pods, &ns.value);
            let left = delete_collection(store, pods, &name, estimate, &mut report);
            if left.count > 0 {
                // Pods remain: the rest waits, and the conditions say only
                // what failed (upstream returns before counting content).
                write_deletion_conditions(store, &ns, &report.conditions(false));
                busy = true;
                continue;
            }
        }
        for (i, def) in RESOURCES.iter().enumerate() {
            if !def.namespaced || crate::event_versions::storage_of(i).is_some() || Some(i) == pods
            {
                continue;
            }
            let left = delete_collection(store, i, &name, 0, &mut report);
            if left.count > 0 {
                report.remaining.push(format!(
                    "{}.{} has {} resource instances",
                    def.resource, def.group, left.count
                ));
                for f in left.finalizers {
                    *report.finalizers.entry(f).or_default() += 1;
                }
            }
        }
        write_deletion_conditions(store, &ns, &report.conditions(true));
        if !report.remaining.is_empty() || !report.errors.is_empty() {
            busy = true;
            continue;
        }
        // Empty: remove the "kubernetes" finalizer via namespaces/finalize.
        let mut body = store
            .get(rid, "", &name)
            .map(|n| n.value.clone())
            .unwrap_or_else(|_| ns.value.clone());
        let fins: Vec<Value> = body
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter(|f| *f != "kubernetes").cloned().collect())
            .unwrap_or_default();
        body["spec"]["finalizers"] = json!(fins);
        if let Err(e) = store.update(
            rid,
            "",
            &name,
            Some("finalize"),
            body,
            &WriteOptions::manager(MANAGER),
        ) && e.code != 404
        {
            tracing::warn!(namespace = %name, error = %e, "namespace controller: finalize failed");
            busy = true;
        }
    }
    busy
}

/// What one pass of the namespace deleter found.
#[derive(Default)]
struct DeletionReport {
    /// The messages of the refused collection deletes.
    errors: Vec<String>,
    /// `<resource>.<group> has <n> resource instances`.
    remaining: Vec<String>,
    /// Finalizer -> objects left holding it.
    finalizers: std::collections::BTreeMap<String, usize>,
}

/// The objects of one kind left after its collection delete.
#[derive(Default)]
struct Left {
    count: usize,
    finalizers: Vec<String>,
}

/// The seconds the namespace controller still expects its pods to take
/// (`estimateGracefulTerminationForPods`): the longest
/// terminationGracePeriodSeconds of a pod not finished, or 0 once that
/// long has passed since the namespace's deletion.
fn pods_estimate(store: &Store, pods: ResId, namespace: &Value) -> i64 {
    let name = object::meta_str(namespace, "name");
    let estimate = store
        .snapshot(pods, Some(name))
        .0
        .iter()
        .filter(|p| {
            !matches!(
                p.value.pointer("/status/phase").and_then(Value::as_str),
                Some("Succeeded" | "Failed")
            )
        })
        .filter_map(|p| {
            p.value
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .max()
        .unwrap_or(0);
    let since = object::meta(namespace)
        .and_then(|m| m.get("deletionTimestamp"))
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| jiff::Timestamp::now().duration_since(t).as_secs())
        .unwrap_or(0);
    if since >= estimate { 0 } else { estimate }
}

/// Deletes every object of `rid` in namespace `ns` as the namespace
/// controller (a DeleteCollection): in name order, stopping at the first
/// refusal, which goes into `report` (and then nothing of the kind is
/// counted, as upstream). Returns what is left otherwise; objects left
/// with no finalizer to wait for and no grace period still `estimate`d
/// are an error too (`unexpected items still remain`), as upstream's.
fn delete_collection(
    store: &Store,
    rid: ResId,
    ns: &str,
    estimate: i64,
    report: &mut DeletionReport,
) -> Left {
    let (items, _) = store.snapshot(rid, Some(ns));
    for it in &items {
        if object::meta(&it.value).is_some_and(|m| m.contains_key("deletionTimestamp")) {
            continue;
        }
        let n = object::meta_str(&it.value, "name").to_string();
        if let Err(e) = store.delete(rid, ns, &n, &as_namespace_controller())
            && e.code != 404
        {
            tracing::warn!(namespace = %ns, resource = RESOURCES[rid].resource, object = %n, error = %e, "namespace controller: delete failed");
            report.errors.push(e.message);
            return Left::default();
        }
    }
    let (items, _) = store.snapshot(rid, Some(ns));
    let mut left = Left {
        count: items.len(),
        ..Left::default()
    };
    for it in &items {
        left.finalizers.extend(object::finalizers(&it.value));
    }
    if left.count > 0 && estimate == 0 && left.finalizers.is_empty() {
        let def = crate::resources::def(rid);
        report.errors.push(format!(
            "unexpected items still remain in namespace: {ns} for gvr: {}/{}, Resource={}",
            def.group, def.version, def.resource
        ));
    }
    left
}

/// The namespace deleter's condition types, in the order it adds them.
const DELETION_CONDITIONS: [(&str, &str, &str); 5] = [
    (
        "NamespaceDeletionDiscoveryFailure",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        "NamespaceDeletionGroupVersionParsingFailure",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        "NamespaceDeletionContentFailure",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        "NamespaceContentRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        "NamespaceFinalizersRemaining",
        "ContentHasNoFinalizers",
        "All content-preserving finalizers finished",
    ),
];

impl DeletionReport {
    /// `(type, status, reason, message)` of each deletion condition;
    /// `totals`: whether the content left is reported (not while pods
    /// remain).
    fn conditions(&self, totals: bool) -> Vec<(&'static str, bool, String, String)> {
        DELETION_CONDITIONS
            .iter()
            .map(|(ty, ok_reason, ok_message)| {
                let failed = match *ty {
                    "NamespaceDeletionContentFailure" if !self.errors.is_empty() => {
                        let mut msgs = self.errors.clone();
                        msgs.sort();
                        Some((
                            "ContentDeletionFailed",
                            format!(
                                "Failed to delete all resource types, {} remaining: {}",
                                msgs.len(),
                                msgs.join(", ")
                            ),
                        ))
                    }
                    "NamespaceContentRemaining" if totals && !self.remaining.is_empty() => {
                        let mut r = self.remaining.clone();
                        r.sort();
                        Some((
                            "SomeResourcesRemain",
                            format!("Some resources are remaining: {}", r.join(", ")),
                        ))
                    }
                    "NamespaceFinalizersRemaining" if totals && !self.finalizers.is_empty() => {
                        let mut r: Vec<String> = self
                            .finalizers
                            .iter()
                            .map(|(f, n)| format!("{f} in {n} resource instances"))
                            .collect();
                        r.sort();
                        Some((
                            "SomeFinalizersRemain",
                            format!(
                                "Some content in the namespace has finalizers remaining: {}",
                                r.join(", ")
                            ),
                        ))
                    }
                    _ => None,
                };
                match failed {
                    Some((reason, message)) => (*ty, true, reason.to_string(), message),
                    None => (*ty, false, ok_reason.to_string(), ok_message.to_string()),
                }
            })
            .collect()
    }
}

/// Merges `conditions` into the namespace's status as upstream's
/// `updateConditions` (a condition keeps its lastTransitionTime while its
/// status stays) and writes the status when something changed.
fn write_deletion_conditions(
    store: &Store,
    ns: &Stored,
    conditions: &[(&'static str, bool, String, String)],
) {
    let name = object::meta_str(&ns.value, "name").to_string();
    let Ok(live) = store.get(ns_rid(), "", &name) else {
        return;
    };
    let mut body = live.value.clone();
    let mut conds: Vec<Value> = body
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = object::format_time(jiff::Timestamp::now());
    let mut changed = false;
    for (ty, failed, reason, message) in conditions {
        let status = if *failed { "True" } else { "False" };
        match conds
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        {
            None => {
                conds.push(
                    json!({"type": ty, "status": status, "lastTransitionTime": now,
                                  "reason": reason, "message": message}),
                );
                changed = true;
            }
            Some(c) => {
                let same = |k: &str, v: &str| c.get(k).and_then(Value::as_str) == Some(v);
                if !(same("status", status) && same("reason", reason) && same("message", message)) {
                    if !same("status", status) {
                        c["lastTransitionTime"] = json!(now);
                    }
                    c["status"] = json!(status);
                    c["reason"] = json!(reason);
                    c["message"] = json!(message);
                    changed = true;
                }
            }
        }
    }
    if !changed {
        return;
    }
    body["status"]["conditions"] = json!(conds);
    if let Err(e) = store.update(
        ns_rid(),
        "",
        &name,
        Some("status"),
        body,
        &WriteOptions::manager(MANAGER),
    ) && e.code != 404
        && e.code != 409
    {
        tracing::warn!(namespace = %name, error = %e, "namespace controller: status update failed");
    }
}

/// A JSON merge patch `p` of `ns/name` by the controllers' field manager.
fn merge_patch(
    store: &Store,
    rid: ResId,
    ns: &str,
    name: &str,
    p: &Value,
) -> Result<(Arc<Stored>, bool), crate::error::ApiError> {
    store.patch(
        rid,
        ns,
        name,
        None,
        crate::patch::PatchKind::Merge,
        p.to_string().as_bytes(),
        &WriteOptions::manager(MANAGER),
    )
}

/// Every object of the built-in resources with its ownerReferences,
/// resource by resource as the loop reaches it (events.k8s.io/v1 is a view
/// of the core events' storage, so it is skipped).
fn objects_with_owner_refs(
    store: &Store,
) -> impl Iterator<Item = (ResId, Arc<Stored>, Vec<Value>)> + '_ {
    (0..RESOURCES.len())
        .filter(|&i| crate::event_versions::storage_of(i).is_none())
        .flat_map(move |i| store.snapshot(i, None).0.into_iter().map(move |it| (i, it)))
        .map(|(i, it)| {
            let refs = it
                .value
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            (i, it, refs)
        })
}

/// Returns whether GC work remains.
fn reconcile_gc(store: &Store) -> bool {
    let pending: Vec<_> = store.gc_pending.lock().iter().cloned().collect();
    let mut busy = false;
    for (rid, (ns, name)) in pending {
        let Ok(owner) = store.get(rid, &ns, &name) else {
            store.gc_pending.lock().remove(&(rid, (ns, name)));
            continue;
        };
        let uid = object::meta_str(&owner.value, "uid").to_string();
        let fins = object::finalizers(&owner.value);
        let orphan = fins.iter().any(|f| f == "orphan");
        let foreground = fins.iter().any(|f| f == "foregroundDeletion");
        let mut dependents_left = 0;
        for (i, it, refs) in objects_with_owner_refs(store) {
            if !refs
                .iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid.as_str()))
            {
                continue;
            }
            let (dns, dname) = it.key();
            if orphan {
                let kept: Vec<Value> = refs
                    .into_iter()
                    .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()))
                    .collect();
                let p = json!({"metadata": {"ownerReferences": if kept.is_empty() { Value::Null } else { json!(kept) }}});
                let _ = merge_patch(store, i, &dns, &dname, &p);
            } else if foreground {
                dependents_left += 1;
                if object::meta(&it.value).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                    continue;
                }
                let opts = DeleteOptions {
                    propagation_policy: Some("Foreground".into()),
                    ..as_controller(GARBAGE_COLLECTOR)
                };
                if let Err(e) = store.delete(i, &dns, &dname, &opts)
                    && e.code != 404
                {
                    tracing::warn!(resource = RESOURCES[i].resource, object = %dname, error = %e, "garbage collector: delete failed");
                }
            }
        }
        if dependents_left > 0 {
            busy = true;
            continue;
        }
        // Remove the GC finalizers (orphan first, as upstream).
        let keep: Vec<String> = fins
            .into_iter()
            .filter(|f| f != "orphan" && f != "foregroundDeletion")
            .collect();
        let p = json!({"metadata": {"finalizers": if keep.is_empty() { Value::Null } else { json!(keep) }}});
        match merge_patch(store, rid, &ns, &name, &p) {
            Ok(_) => {
                store.gc_pending.lock().remove(&(rid, (ns, name)));
            }
            Err(e) if e.code == 404 => {
                store.gc_pending.lock().remove(&(rid, (ns, name)));
            }
            Err(_) => busy = true,
        }
    }
    busy
}

/// Whether the owner an ownerReference names still exists (same uid).
fn owner_exists(store: &Store, dependent_ns: &str, r: &Value) -> bool {
    let api_version = r
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
    let uid = r.get("uid").and_then(Value::as_str).unwrap_or_default();
    let Some(rid) = resources::find_kind(group, kind) else {
        // An owner kind kube-sim does not serve: leave the reference alone.
        return true;
    };
    let ns = if crate::resources::def(rid).namespaced {
        dependent_ns
    } else {
        ""
    };
    store
        .get(rid, ns, name)
        .is_ok_and(|o| object::meta_str(&o.value, "uid") == uid)
}

/// Background cascading deletion after owners went away. Returns whether
/// work remains.
fn reconcile_dependents(store: &Store) -> bool {
    let deleted: Vec<String> = std::mem::take(&mut *store.deleted_uids.lock());
    if deleted.is_empty() || store.owned.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        return false;
    }
    let deleted: std::collections::HashSet<String> = deleted.into_iter().collect();
    for (i, it, refs) in objects_with_owner_refs(store) {
        let touched = refs.iter().any(|r| {
            r.get("uid")
                .and_then(Value::as_str)
                .is_some_and(|u| deleted.contains(u))
        });
        if !touched {
            continue;
        }
        let (ns, name) = it.key();
        let alive: Vec<Value> = refs
            .iter()
            .filter(|r| owner_exists(store, &ns, r))
            .cloned()
            .collect();
        if alive.is_empty() {
            if object::meta(&it.value).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                continue;
            }
            if let Err(e) = store.delete(i, &ns, &name, &as_controller(GARBAGE_COLLECTOR))
                && e.code != 404
            {
                tracing::warn!(object = %name, error = %e, "garbage collector: delete failed");
            }
        } else if alive.len() != refs.len() {
            let p = json!({"metadata": {"ownerReferences": alive}});
            let _ = merge_patch(store, i, &ns, &name, &p);
        }
    }
    false
}

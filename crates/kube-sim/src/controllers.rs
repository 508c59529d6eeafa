//! Emulated control-plane loops that a real cluster runs outside the API
//! server, kept to what API clients observe:
//!
//! * the namespace controller (pkg/controller/namespace/deletion): a
//!   Terminating namespace has its content deleted (objects with finalizers
//!   stay Terminating until their finalizers are removed); once empty, the
//!   `kubernetes` spec finalizer is removed through `namespaces/finalize`
//!   and the namespace goes away;
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
                // Work remains (e.g. objects with finalizers): poll gently.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = changes.changed().await;
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
        let mut remaining = 0usize;
        for (i, def) in RESOURCES.iter().enumerate() {
            if !def.namespaced || crate::event_versions::storage_of(i).is_some() {
                continue;
            }
            let (items, _) = store.snapshot(i, Some(&name));
            for it in items {
                remaining += 1;
                if object::meta(&it.value).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                    continue;
                }
                let n = object::meta_str(&it.value, "name").to_string();
                if let Err(e) = store.delete(i, &name, &n, &as_namespace_controller())
                    && e.code != 404
                {
                    tracing::warn!(namespace = %name, resource = def.resource, object = %n, error = %e, "namespace controller: delete failed");
                }
            }
        }
        if remaining > 0 {
            busy = true;
            continue;
        }
        // Empty: remove the "kubernetes" finalizer via namespaces/finalize.
        let mut body = ns.value.clone();
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

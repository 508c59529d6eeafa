//! The API server's ClusterIP repair loop with MultiCIDRServiceAllocator
//! (`RepairIPAddress`, pkg/registry/core/service/ipallocator/controller/
//! repairip.go, started by pkg/registry/core/rest/storage_core.go every
//! `repairLoopInterval` = 3 min of pkg/controlplane/instance.go).
//!
//! Two queues, as upstream's:
//! * IPAddresses (`syncIPAddress`), fed by every IPAddress ADDED, MODIFIED
//!   and DELETED event, by the informer's resync every interval (every
//!   IPAddress again) and by its own delayed requeues. An IPAddress labelled
//!   `ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io` is deleted
//!   when its parentRef is not a core `services` reference (at once), when
//!   its Service does not exist and it is older than 60 s (else requeued for
//!   the rest of the 60 s), or when the Service exists but does not list it
//!   in `spec.clusterIPs` (after 60 s for an ExternalName Service, and not
//!   within 5 s of its creation when it was created after the Service).
//! * Services (`syncService`), fed by Service events and the resync: each
//!   cluster IP in some ServiceCIDR gets its IPAddress back when it is
//!   missing, and one naming another kind, a Service that does not exist or
//!   with the wrong labels is recreated. A Service event never feeds the
//!   IPAddress queue: an IPAddress left when its Service goes (a release
//!   while no ServiceCIDR contained it) waits for the next resync.
//!
//! The first pass (`runOnce`) syncs every Service, then every managed
//! IPAddress, once the `kubernetes` ServiceCIDR exists. Writes go through
//! the store (watchers see them) as the API server's loopback client,
//! `system:apiserver`.
//!
//! Left out: the Events upstream records (`ClusterIPOutOfRange`,
//! `IPAddressNotAllocated`, `IPAddressWrongReference`, ...; kube-sim's
//! in-server loops record none, and no client acts on them); the
//! `ClusterIPNotValid` case (kube-sim's validation keeps unparsable
//! cluster IPs out of the store); the five workers per queue (one pass
//! does the due keys in turn, which only orders what upstream does
//! concurrently); the rate limiter's per-key backoff is kept (5 ms doubling,
//! dropped after 15 retries).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::admission::UserInfo;
use crate::error::ApiError;
use crate::networking::{
    ALLOCATOR_NAME, APISERVER_MANAGER, LABEL_IP_FAMILY, LABEL_MANAGED_BY, ipaddresses_rid,
};
use crate::object::meta_str;
use crate::resources;
use crate::store::{DeleteOptions, Store, WriteOptions};

/// `repairLoopInterval` (pkg/controlplane/instance.go): the informers'
/// resync period of the repair loop.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(180);

/// How long an IPAddress may wait for its Service (the API server's
/// request timeout): `gracePeriod` of `syncIPAddress`.
pub const GRACE_PERIOD: Duration = Duration::from_secs(60);

/// How long an IPAddress created after its Service is left alone (a
/// Service create being reverted).
pub const CREATED_AFTER_SERVICE_DELAY: Duration = Duration::from_secs(5);

/// `maxRetries`.
const MAX_RETRIES: u32 = 15;

/// `user.APIServerUser`.
pub const APISERVER_USER: &str = "system:apiserver";

/// The API server's loopback client (genericapiserver's
/// `AuthorizeClientBearerToken`): `system:apiserver` in
/// `system:authenticated` and `system:masters`.
pub fn apiserver_user() -> UserInfo {
    UserInfo {
        username: APISERVER_USER.to_string(),
        groups: vec!["system:authenticated".into(), "system:masters".into()],
        ..UserInfo::default()
    }
}

fn services_rid() -> resources::ResId {
    resources::find("", "v1", "services").unwrap_or(0)
}

fn delete_opts() -> DeleteOptions {
    DeleteOptions {
        user: Some(Arc::new(apiserver_user())),
        ..Default::default()
    }
}

fn write_opts() -> WriteOptions {
    WriteOptions {
        user: Some(Arc::new(apiserver_user())),
        ..WriteOptions::manager(APISERVER_MANAGER)
    }
}

fn created_at(obj: &Value) -> Option<jiff::Timestamp> {
    meta_str(obj, "creationTimestamp").parse().ok()
}

/// `now - then` as a signed duration (what Go's `Time.Sub` gives).
fn since(now: jiff::Timestamp, then: Option<jiff::Timestamp>) -> jiff::SignedDuration {
    then.map(|t| now.duration_since(t))
        .unwrap_or(jiff::SignedDuration::ZERO)
}

/// `d - lifetime` clamped at zero (a workqueue's AddAfter of a negative
/// duration adds at once).
fn remaining(d: Duration, lifetime: jiff::SignedDuration) -> Duration {
    let d = jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX);
    Duration::try_from(d - lifetime).unwrap_or(Duration::ZERO)
}

fn parent_ref(obj: &Value) -> (&str, &str, &str, &str) {
    let get = |k: &str| {
        obj.pointer("/spec/parentRef")
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    (get("group"), get("resource"), get("namespace"), get("name"))
}

fn labels_of<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    crate::object::labels(obj)
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// `managedByController`.
fn managed_by_allocator(obj: &Value) -> bool {
    labels_of(obj, LABEL_MANAGED_BY) == Some(ALLOCATOR_NAME)
}

fn family_of(name: &str) -> &'static str {
    if name.contains(':') { "IPv6" } else { "IPv4" }
}

/// `verifyIPAddressLabels`.
fn labels_ok(obj: &Value) -> bool {
    labels_of(obj, LABEL_IP_FAMILY) == Some(family_of(meta_str(obj, "name")))
        && managed_by_allocator(obj)
}

fn cluster_ips(svc: &Value) -> Vec<&str> {
    svc.pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn delete_ip(store: &Store, name: &str) -> Result<(), ApiError> {
    match store.delete(ipaddresses_rid(), "", name, &delete_opts()) {
        Err(e) if e.code != 404 => Err(e),
        _ => Ok(()),
    }
}

/// `syncIPAddress` of the IPAddress `name` at `now`: `Ok(Some(d))` asks
/// for the key again after `d` (upstream's `AddAfter`).
pub fn sync_ip_address(
    store: &Store,
    name: &str,
    now: jiff::Timestamp,
) -> Result<Option<Duration>, ApiError> {
    let Ok(ip) = store.get(ipaddresses_rid(), "", name) else {
        return Ok(None);
    };
    let ip = &ip.value;
    if !managed_by_allocator(ip) {
        return Ok(None);
    }
    let (group, resource, ns, svc_name) = parent_ref(ip);
    if !group.is_empty() || resource != "services" {
        tracing::info!(ipaddress = %name, group, resource, "IPAddress appears to have been modified, not referencing a Service: cleaning up");
        delete_ip(store, name)?;
        return Ok(None);
    }
    let lifetime = since(now, created_at(ip));
    let Ok(svc) = store.get(services_rid(), ns, svc_name) else {
        if lifetime > jiff::SignedDuration::try_from(GRACE_PERIOD).unwrap_or_default() {
            tracing::info!(ipaddress = %name, namespace = ns, service = svc_name, "IPAddress appears to have leaked: cleaning up");
            delete_ip(store, name)?;
        }
        return Ok(Some(remaining(GRACE_PERIOD, lifetime)));
    };
    let svc = &svc.value;
    if cluster_ips(svc).contains(&name) {
        return Ok(None);
    }
    if svc.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName")
        && lifetime < jiff::SignedDuration::try_from(GRACE_PERIOD).unwrap_or_default()
    {
        return Ok(Some(remaining(GRACE_PERIOD, lifetime)));
    }
    let (ip_created, svc_created) = (created_at(ip), created_at(svc));
    if ip_created.is_some_and(|i| svc_created.is_some_and(|s| i > s))
        && lifetime
            < jiff::SignedDuration::try_from(CREATED_AFTER_SERVICE_DELAY).unwrap_or_default()
    {
        return Ok(Some(CREATED_AFTER_SERVICE_DELAY));
    }
    tracing::info!(ipaddress = %name, namespace = ns, service = svc_name, "IPAddress has a wrong reference: cleaning up");
    delete_ip(store, name)?;
    Ok(None)
}

/// `newIPAddress`: the IPAddress the allocator would have written for `svc`.
fn new_ip_address(name: &str, svc: &Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": name,
            "labels": {LABEL_IP_FAMILY: family_of(name), LABEL_MANAGED_BY: ALLOCATOR_NAME},
        },
        "spec": {"parentRef": {"resource": "services", "namespace": meta_str(svc, "namespace"), "name": meta_str(svc, "name")}},
    })
}

fn create_ip(store: &Store, name: &str, svc: &Value) -> Result<(), ApiError> {
    store
        .create(
            ipaddresses_rid(),
            "",
            new_ip_address(name, svc),
            &write_opts(),
        )
        .map(|_| ())
}

/// `recreateIPAddress`.
fn recreate_ip(store: &Store, name: &str, svc: &Value) -> Result<(), ApiError> {
    delete_ip(store, name)?;
    create_ip(store, name, svc)
}

/// `syncService` of the Service `ns/name`: every cluster IP within some
/// ServiceCIDR has an IPAddress referencing the Service (or another
/// Service that holds the same IP, which upstream only reports).
pub fn sync_service(store: &Store, ns: &str, name: &str) -> Result<(), ApiError> {
    let Ok(svc) = store.get(services_rid(), ns, name) else {
        return Ok(());
    };
    let svc = &svc.value;
    // helper.IsServiceIPSet.
    let ip = svc
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if ip.is_empty() || ip == "None" {
        return Ok(());
    }
    for cluster_ip in cluster_ips(svc) {
        let Some(parsed) = crate::netaddr::parse_ip_sloppy(cluster_ip) else {
            continue;
        };
        if !crate::networking::in_some_service_cidr(store, parsed) {
            tracing::info!(
                namespace = ns,
                service = name,
                ip = cluster_ip,
                "the ClusterIP is not within any service CIDR; please recreate"
            );
            continue;
        }
        let ip_name = crate::netaddr::ip_string(parsed);
        let Ok(ip) = store.get(ipaddresses_rid(), "", &ip_name) else {
            tracing::info!(namespace = ns, service = name, ip = %ip_name, "the ClusterIP is not allocated; repairing");
            create_ip(store, &ip_name, svc)?;
            continue;
        };
        let ip = &ip.value;
        let (group, resource, ref_ns, ref_name) = parent_ref(ip);
        if !group.is_empty() || resource != "services" {
            recreate_ip(store, &ip_name, svc)?;
            continue;
        }
        if (ref_ns, ref_name) != (ns, name) && store.get(services_rid(), ref_ns, ref_name).is_err()
        {
            recreate_ip(store, &ip_name, svc)?;
            continue;
        }
        // A duplicate (another Service holds the IP) is only reported
        // upstream; the labels are checked either way.
        if !labels_ok(ip) {
            recreate_ip(store, &ip_name, svc)?;
        }
    }
    Ok(())
}

/// Keys waiting to be synced, each at its due time, with their retries
/// (a workqueue with AddAfter and the default controller rate limiter).
#[derive(Default)]
struct Queue<K: Ord + Clone> {
    due: BTreeMap<K, Instant>,
    retries: BTreeMap<K, u32>,
}

impl<K: Ord + Clone> Queue<K> {
    /// Adds `k` due at `at`, or keeps the earlier time it is due at.
    fn add_at(&mut self, k: K, at: Instant) {
        let e = self.due.entry(k).or_insert(at);
        if at < *e {
            *e = at;
        }
    }

    fn add(&mut self, k: K) {
        self.add_at(k, Instant::now());
    }

    /// The keys due now, removed from the queue.
    fn take_due(&mut self, now: Instant) -> Vec<K> {
        let due: Vec<K> = self
            .due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &due {
            self.due.remove(k);
        }
        due
    }

    fn next(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// `handleErr`: forget on success, retry with backoff (5 ms doubling)
    /// up to `maxRetries` times.
    fn done(&mut self, k: K, failed: bool) -> bool {
        if !failed {
            self.retries.remove(&k);
            return true;
        }
        let n = self.retries.entry(k.clone()).or_insert(0);
        if *n >= MAX_RETRIES {
            self.retries.remove(&k);
            return false;
        }
        let delay = Duration::from_millis(5) * 2u32.saturating_pow(*n);
        *n += 1;
        self.add_at(k, Instant::now() + delay);
        true
    }
}

/// Follows one resource's events: the keys written since the last call,
/// or every current key after a gap in the retained history (a re-list).
struct Follow {
    rid: resources::ResId,
    cursor: u64,
}

impl Follow {
    fn keys(&mut self, store: &Store) -> Vec<(String, String)> {
        match store.events_since(self.rid, self.cursor) {
            Ok((events, rv)) => {
                self.cursor = rv;
                events.iter().map(|e| e.key.clone()).collect()
            }
            Err(_) => {
                let (items, rv) = store.snapshot(self.rid, None);
                self.cursor = rv;
                items.iter().map(|s| s.key()).collect()
            }
        }
    }

    fn all(&mut self, store: &Store) -> Vec<(String, String)> {
        store
            .snapshot(self.rid, None)
            .0
            .iter()
            .map(|s| s.key())
            .collect()
    }
}

/// Runs the repair loop until `stop` fires; `interval` is the resync
/// period ([`DEFAULT_INTERVAL`] on a real API server).
pub(crate) async fn run(
    store: Arc<Store>,
    interval: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut ip_changes = store.subscribe(ipaddresses_rid());
    let mut svc_changes = store.subscribe(services_rid());
    let mut ips = Follow {
        rid: ipaddresses_rid(),
        cursor: store.current_rv(),
    };
    let mut svcs = Follow {
        rid: services_rid(),
        cursor: store.current_rv(),
    };
    // Wait for the default ServiceCIDR (polled every 100 ms upstream).
    let cidrs = crate::networking::servicecidrs_rid();
    while store
        .get(cidrs, "", crate::networking::DEFAULT_SERVICE_CIDR)
        .is_err()
    {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.cancelled() => return,
        }
    }
    let mut ip_queue: Queue<String> = Queue::default();
    let mut svc_queue: Queue<(String, String)> = Queue::default();
    // runOnce: every Service, then every managed IPAddress (as the events
    // the informers' initial lists deliver would).
    for k in svcs.all(&store) {
        svc_queue.add(k);
    }
    for (_, name) in ips.all(&store) {
        ip_queue.add(name);
    }
    let mut resync = tokio::time::interval_at(Instant::now() + interval, interval);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        for k in svcs.keys(&store) {
            svc_queue.add(k);
        }
        for (_, name) in ips.keys(&store) {
            ip_queue.add(name);
        }
        let now = Instant::now();
        for (ns, name) in svc_queue.take_due(now) {
            let r = sync_service(&store, &ns, &name);
            if let Err(e) = &r {
                tracing::warn!(namespace = %ns, service = %name, error = %e, "ipallocator repair: syncing the Service failed");
            }
            if !svc_queue.done((ns.clone(), name.clone()), r.is_err()) {
                tracing::warn!(namespace = %ns, service = %name, "ipallocator repair: dropping the Service out of the queue");
            }
        }
        for name in ip_queue.take_due(now) {
            let r = sync_ip_address(&store, &name, jiff::Timestamp::now());
            match &r {
                Ok(Some(after)) => ip_queue.add_at(name.clone(), Instant::now() + *after),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(ipaddress = %name, error = %e, "ipallocator repair: syncing the IPAddress failed");
                }
            }
            if !ip_queue.done(name.clone(), r.is_err()) {
                tracing::warn!(ipaddress = %name, "ipallocator repair: dropping the IPAddress out of the queue");
            }
        }
        let next = [ip_queue.next(), svc_queue.next()]
            .into_iter()
            .flatten()
            .min();
        let sleep_until = async {
            match next {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = ip_changes.changed() => {}
            _ = svc_changes.changed() => {}
            _ = resync.tick() => {
                for k in svcs.all(&store) {
                    svc_queue.add(k);
                }
                for (_, name) in ips.all(&store) {
                    ip_queue.add(name);
                }
            }
            _ = sleep_until => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        let s = Store::new(crate::store::StoreConfig {
            history_window: 1000,
            storage_protection: Default::default(),
            service_account_admission: false,
            pod_graceful_deletion: false,
            seed: 1,
        });
        let ns = resources::find("", "v1", "namespaces").unwrap_or(0);
        s.seed(ns, json!({"metadata": {"name": "default"}}))
            .expect("namespace");
        s
    }

    fn ip(store: &Store, name: &str, labels: Value, parent: Value) {
        store
            .create(
                ipaddresses_rid(),
                "",
                json!({"metadata": {"name": name, "labels": labels}, "spec": {"parentRef": parent}}),
                &WriteOptions::manager("test"),
            )
            .expect("ipaddress");
    }

    fn exists(store: &Store, name: &str) -> bool {
        store.get(ipaddresses_rid(), "", name).is_ok()
    }

    fn managed() -> Value {
        json!({LABEL_MANAGED_BY: ALLOCATOR_NAME, LABEL_IP_FAMILY: "IPv4"})
    }

    fn after(s: u64) -> jiff::Timestamp {
        jiff::Timestamp::now() + jiff::SignedDuration::from_secs(s as i64)
    }

    #[test]
    fn an_ipaddress_not_naming_a_service_goes_at_once() {
        let s = store();
        ip(
            &s,
            "192.0.2.1",
            managed(),
            json!({"group": "gateway.networking.k8s.io", "resource": "gateways", "name": "g"}),
        );
        assert_eq!(
            sync_ip_address(&s, "192.0.2.1", jiff::Timestamp::now()).expect("sync"),
            None
        );
        assert!(!exists(&s, "192.0.2.1"));
    }

    #[test]
    fn an_orphan_waits_for_the_grace_period_then_goes() {
        let s = store();
        ip(
            &s,
            "192.0.2.2",
            managed(),
            json!({"resource": "services", "namespace": "default", "name": "gone"}),
        );
        let again = sync_ip_address(&s, "192.0.2.2", jiff::Timestamp::now()).expect("sync");
        assert!(exists(&s, "192.0.2.2"));
        let again = again.expect("requeued");
        assert!(again <= GRACE_PERIOD && again > GRACE_PERIOD - Duration::from_secs(5));
        sync_ip_address(&s, "192.0.2.2", after(61)).expect("sync");
        assert!(!exists(&s, "192.0.2.2"));
    }

    #[test]
    fn an_ipaddress_not_managed_by_the_allocator_stays() {
        let s = store();
        ip(
            &s,
            "192.0.2.3",
            json!({}),
            json!({"group": "x.example.com", "resource": "things", "name": "t"}),
        );
        ip(
            &s,
            "192.0.2.4",
            json!({LABEL_MANAGED_BY: "someone-else"}),
            json!({"resource": "services", "namespace": "default", "name": "gone"}),
        );
        for n in ["192.0.2.3", "192.0.2.4"] {
            assert_eq!(sync_ip_address(&s, n, after(3600)).expect("sync"), None);
            assert!(exists(&s, n));
        }
    }

    fn service(store: &Store, name: &str, mut spec: Value) {
        spec["ports"] = json!([{"port": 80}]);
        store
            .seed(
                services_rid(),
                json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
            )
            .expect("service");
    }

    fn cidr(store: &Store, name: &str, range: &str) {
        store
            .seed(
                crate::networking::servicecidrs_rid(),
                json!({"metadata": {"name": name}, "spec": {"cidrs": [range]}}),
            )
            .expect("servicecidr");
    }

    #[test]
    fn a_service_not_listing_the_address_loses_it_unless_just_created() {
        let s = store();
        cidr(&s, "r", "10.0.0.0/24");
        service(
            &s,
            "web",
            json!({"clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"]}),
        );
        service(
            &s,
            "ext",
            json!({"type": "ExternalName", "externalName": "x.example.com"}),
        );
        let web = json!({"resource": "services", "namespace": "default", "name": "web"});
        let ext = json!({"resource": "services", "namespace": "default", "name": "ext"});
        assert!(exists(&s, "10.0.0.5"), "allocated");
        ip(&s, "10.0.0.6", managed(), web);
        ip(&s, "10.0.0.7", managed(), ext);
        let now = jiff::Timestamp::now();
        assert_eq!(
            sync_ip_address(&s, "10.0.0.5", after(3600)).expect("sync"),
            None
        );
        assert!(exists(&s, "10.0.0.5"), "the Service lists it");
        // Created after its Service: 5 s to see the Service create reverted.
        // (Same second stamps are not "after": created in the same second,
        // it goes at once, as upstream.)
        match sync_ip_address(&s, "10.0.0.6", now).expect("sync") {
            Some(d) => {
                assert_eq!(d, CREATED_AFTER_SERVICE_DELAY);
                assert!(exists(&s, "10.0.0.6"));
            }
            None => assert!(!exists(&s, "10.0.0.6")),
        }
        sync_ip_address(&s, "10.0.0.6", after(6)).expect("sync");
        assert!(!exists(&s, "10.0.0.6"));
        // An ExternalName Service may be turning into a ClusterIP one: 60 s.
        assert!(
            sync_ip_address(&s, "10.0.0.7", now)
                .expect("sync")
                .is_some()
        );
        assert!(exists(&s, "10.0.0.7"));
        sync_ip_address(&s, "10.0.0.7", after(61)).expect("sync");
        assert!(!exists(&s, "10.0.0.7"));
    }

    #[test]
    fn a_service_gets_its_missing_or_wrong_ipaddress_back_within_a_range() {
        let s = store();
        cidr(&s, "r", "10.0.0.0/24");
        cidr(&s, "gone", "10.9.0.0/24");
        service(
            &s,
            "web",
            json!({"clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"]}),
        );
        service(
            &s,
            "out",
            json!({"clusterIP": "10.9.0.5", "clusterIPs": ["10.9.0.5"]}),
        );
        service(&s, "headless", json!({"clusterIP": "None"}));
        // The allocations' IPAddresses go, and so does the second range.
        let del = DeleteOptions::default();
        let cidrs = crate::networking::servicecidrs_rid();
        s.delete(cidrs, "", "gone", &del).expect("delete");
        for n in ["10.0.0.5", "10.9.0.5"] {
            s.delete(ipaddresses_rid(), "", n, &del).expect("delete");
        }
        sync_service(&s, "default", "web").expect("sync");
        sync_service(&s, "default", "out").expect("sync");
        sync_service(&s, "default", "headless").expect("sync");
        let got = s.get(ipaddresses_rid(), "", "10.0.0.5").expect("recreated");
        assert_eq!(
            got.value["spec"]["parentRef"],
            json!({"resource": "services", "namespace": "default", "name": "web"})
        );
        assert!(labels_ok(&got.value));
        assert!(!exists(&s, "10.9.0.5"), "out of every range: reported only");
        // A wrong reference is replaced.
        s.delete(ipaddresses_rid(), "", "10.0.0.5", &DeleteOptions::default())
            .expect("delete");
        ip(
            &s,
            "10.0.0.5",
            managed(),
            json!({"group": "x.example.com", "resource": "things", "name": "t"}),
        );
        sync_service(&s, "default", "web").expect("sync");
        let got = s.get(ipaddresses_rid(), "", "10.0.0.5").expect("recreated");
        assert_eq!(got.value["spec"]["parentRef"]["resource"], "services");
    }

    #[test]
    fn the_queue_keeps_the_earlier_time_and_backs_off() {
        let mut q: Queue<String> = Queue::default();
        let now = Instant::now();
        q.add_at("a".into(), now + Duration::from_secs(10));
        q.add_at("a".into(), now + Duration::from_secs(1));
        q.add_at("a".into(), now + Duration::from_secs(5));
        assert_eq!(q.next(), Some(now + Duration::from_secs(1)));
        assert!(q.take_due(now).is_empty());
        assert_eq!(q.take_due(now + Duration::from_secs(1)), ["a"]);
        for _ in 0..MAX_RETRIES {
            assert!(q.done("a".into(), true));
            q.take_due(Instant::now() + Duration::from_secs(600));
        }
        assert!(!q.done("a".into(), true));
    }
}

//! What both controllers share at run time: per-object exponential backoff,
//! the "our own write is not in the cache yet" guard, the event memory, and
//! the observer that keeps the Terminating gauge and those memories exact
//! across watch events and re-lists.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use parking_lot::Mutex;
use protection_core::ControllerMetrics;
use protection_core::finalizer::{has_finalizer, is_deleting};

/// Why a reconcile failed (retried with [`Backoff`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Finalizer(#[from] protection_core::FinalizerError),
    #[error("live list of pods in namespace {namespace} failed: {source}")]
    LivePodList {
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

/// How both controllers run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Our finalizer name.
    pub finalizer: String,
    /// Every this often, re-check every object upstream's informer resync
    /// would (being deleted with our finalizer, or lacking it); zero disables.
    pub resync_period: Duration,
}

/// Per-object exponential backoff, client-go's
/// `ItemExponentialFailureRateLimiter` as used by
/// `DefaultControllerRateLimiter`: the n-th consecutive failure of one object
/// waits `base * 2^(n-1)`, capped at `max`; a success forgets the object.
///
/// We keep upstream's 5 ms → 1000 s: a conflict (our guarded patch met a
/// newer object) is retried almost at once, and a persistent failure (RBAC,
/// an admission webhook) backs off to ~17 minutes without ever giving up.
/// upstream's overall 10 qps / 100 burst bucket is not reproduced: the
/// client-side `--kube-api-qps` limit already bounds the request rate.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

/// client-go's default per-item base delay.
pub const BACKOFF_BASE: Duration = Duration::from_millis(5);
/// client-go's default per-item maximum delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1000);

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(BACKOFF_BASE, BACKOFF_MAX)
    }
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure of `key` and returns how long to wait.
    pub fn next(&self, key: &str) -> Duration {
        let mut m = self.failures.lock();
        let n = m.entry(key.to_string()).or_insert(0);
        let exp = *n;
        *n = n.saturating_add(1);
        let factor = 2u32.checked_pow(exp).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// A success: the next failure starts from `base` again.
    pub fn forget(&self, key: &str) {
        self.failures.lock().remove(key);
    }

    /// Failures recorded for `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }
}

/// Remembers the version each of our writes started from, until the watch
/// shows a newer one, so that a reconcile triggered by something else (a pod
/// event, a resync) in between does not act on the pre-write copy and send a
/// second, doomed request (the guarded patch would answer 422). This is what
/// keeps "one request per transition" exact (client-go controllers use
/// "expectations" for the same purpose).
#[derive(Debug, Default)]
pub struct Expectations {
    written: Mutex<HashMap<String, (String, String)>>,
}

fn uid_rv(meta: &ObjectMeta) -> Option<(String, String)> {
    Some((meta.uid.clone()?, meta.resource_version.clone()?))
}

impl Expectations {
    /// We wrote `key`, starting from `before`.
    pub fn wrote(&self, key: &str, before: &ObjectMeta) {
        if let Some(v) = uid_rv(before) {
            self.written.lock().insert(key.to_string(), v);
        }
    }

    /// Whether `meta` is still the copy our last write started from.
    pub fn is_stale(&self, key: &str, meta: &ObjectMeta) -> bool {
        let mut m = self.written.lock();
        match m.get(key) {
            Some(v) if uid_rv(meta).as_ref() == Some(v) => true,
            Some(_) => {
                m.remove(key);
                false
            }
            None => false,
        }
    }

    /// The watch delivered `meta` for `key`.
    pub fn observe(&self, key: &str, meta: &ObjectMeta) {
        let mut m = self.written.lock();
        if let Some(v) = m.get(key)
            && uid_rv(meta).as_ref() != Some(v)
        {
            m.remove(key);
        }
    }

    pub fn forget(&self, key: &str) {
        self.written.lock().remove(key);
    }

    /// Keeps only `keys` (after a re-list).
    pub fn retain(&self, keys: &HashSet<String>) {
        self.written.lock().retain(|k, _| keys.contains(k));
    }

    pub fn len(&self) -> usize {
        self.written.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reason of the event emitted when a deletion is held because the object is
/// in use.
pub const REASON_HELD: &str = "FinalizerHeld";
/// Reason of the event emitted when a held deletion is released.
pub const REASON_RELEASED: &str = "FinalizerReleased";
/// `action` of the held event.
pub const ACTION_HELD: &str = "HoldDeletion";
/// `action` of the released event.
pub const ACTION_RELEASED: &str = "RemoveFinalizer";

/// The last held-event note per object UID, so that a deletion held for the
/// same reason is reported once (resyncs and repeated pod events included),
/// a change of reason (other pods) is reported again, and "released" is only
/// reported for deletions that were held.
#[derive(Debug, Default)]
pub struct EventMemory {
    held: Mutex<HashMap<String, String>>,
}

impl EventMemory {
    /// Records that `uid` is held for `note`; true iff that is news (emit).
    pub fn held(&self, uid: &str, note: &str) -> bool {
        let mut m = self.held.lock();
        if m.get(uid).is_some_and(|n| n == note) {
            return false;
        }
        m.insert(uid.to_string(), note.to_string());
        true
    }

    /// Whether a held event was reported for `uid`. Read before removing
    /// the finalizer: the watch may deliver the object's deletion (which
    /// forgets it) before the removal request returns.
    pub fn is_held(&self, uid: &str) -> bool {
        self.held.lock().contains_key(uid)
    }

    /// Records a release of `uid`; true iff it had been reported held (emit).
    pub fn released(&self, uid: &str) -> bool {
        self.held.lock().remove(uid).is_some()
    }

    pub fn forget(&self, uid: &str) {
        self.held.lock().remove(uid);
    }

    /// Keeps only `uids` (after a re-list).
    pub fn retain(&self, uids: &HashSet<String>) {
        self.held.lock().retain(|k, _| uids.contains(k));
    }

    pub fn len(&self) -> usize {
        self.held.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Per-object memory of a controller: backoff, write expectations and the
/// held-event memory, all dropped when the watch shows the object gone.
#[derive(Debug, Default)]
pub struct PerObject {
    pub backoff: Backoff,
    pub expectations: Expectations,
    pub events: EventMemory,
}

/// The store key of an object: `name` (cluster-scoped) or `namespace/name`.
pub fn object_key<K: Resource>(obj: &K) -> String {
    match obj.meta().namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", obj.name_any()),
        _ => obj.name_any(),
    }
}

/// Watches the main resource's event stream (after the reflector) and keeps
/// the Terminating gauge, the expectations and the event memory exact:
/// applies and deletes update them one by one, a re-list replaces them with
/// what was listed.
pub struct Observer {
    finalizer: String,
    metrics: ControllerMetrics,
    relist: Option<Relist>,
    listed: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct Relist {
    terminating: Vec<(String, Timestamp)>,
    keys: HashSet<String>,
    uids: HashSet<String>,
}

impl Observer {
    pub fn new(finalizer: &str, metrics: ControllerMetrics) -> Self {
        Observer {
            finalizer: finalizer.to_string(),
            metrics,
            relist: None,
            listed: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Becomes true once the first list is complete (the store is synced).
    /// (Used instead of `Store::wait_until_ready`, whose single-waker
    /// `DelayedInit` wakes only the last of several concurrent waiters, and
    /// the Controller's runner is already one.)
    pub fn listed(&self) -> tokio::sync::watch::Receiver<bool> {
        self.listed.subscribe()
    }

    fn terminating_since(&self, meta: &ObjectMeta) -> Option<Timestamp> {
        if is_deleting(meta) && has_finalizer(meta, &self.finalizer) {
            meta.deletion_timestamp.as_ref().map(|t| t.0)
        } else {
            None
        }
    }

    pub fn observe<K: Resource>(&mut self, ev: &watcher::Event<K>, state: &PerObject) {
        let (expectations, memory) = (&state.expectations, &state.events);
        match ev {
            watcher::Event::Apply(o) => {
                let key = object_key(o);
                self.metrics
                    .set_terminating(&key, self.terminating_since(o.meta()));
                expectations.observe(&key, o.meta());
            }
            watcher::Event::Delete(o) => {
                let key = object_key(o);
                self.metrics.set_terminating(&key, None);
                expectations.forget(&key);
                state.backoff.forget(&key);
                if let Some(uid) = &o.meta().uid {
                    memory.forget(uid);
                }
            }
            watcher::Event::Init => self.relist = Some(Relist::default()),
            watcher::Event::InitApply(o) => {
                let key = object_key(o);
                let since = self.terminating_since(o.meta());
                expectations.observe(&key, o.meta());
                let r = self.relist.get_or_insert_with(Relist::default);
                if let Some(ts) = since {
                    r.terminating.push((key.clone(), ts));
                }
                if let Some(uid) = &o.meta().uid {
                    r.uids.insert(uid.clone());
                }
                r.keys.insert(key);
            }
            watcher::Event::InitDone => {
                let r = self.relist.take().unwrap_or_default();
                self.metrics.reset_terminating(r.terminating);
                expectations.retain(&r.keys);
                memory.retain(&r.uids);
                self.listed.send_replace(true);
            }
        }
    }
}

/// Every `period`, a reconcile request for every cached object `wanted`
/// selects: upstream's informer resync (which replays an update for every
/// object; the handlers then enqueue those being deleted with the finalizer
/// or lacking it). Empty when `period` is zero.
pub fn resync_stream<K>(
    store: Store<K>,
    period: Duration,
    wanted: impl Fn(&K) -> bool + Send + 'static,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    if period.is_zero() {
        return stream::empty().boxed();
    }
    stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
    .flat_map(move |()| {
        let refs: Vec<ObjectRef<K>> = store
            .state()
            .iter()
            .filter(|o| wanted(o))
            .map(|o| ObjectRef::from_obj(&**o))
            .collect();
        tracing::debug!(objects = refs.len(), "resync");
        stream::iter(refs)
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use protection_core::Metrics;

    #[test]
    fn backoff_doubles_from_5ms_to_1000s_per_object() {
        let b = Backoff::default();
        let seq: Vec<Duration> = (0..5).map(|_| b.next("a")).collect();
        assert_eq!(seq, [5, 10, 20, 40, 80].map(Duration::from_millis).to_vec());
        assert_eq!(b.next("other"), Duration::from_millis(5), "per object");
        for _ in 0..40 {
            b.next("a");
        }
        assert_eq!(b.next("a"), BACKOFF_MAX);
        b.forget("a");
        assert_eq!(b.failures("a"), 0);
        assert_eq!(b.next("a"), Duration::from_millis(5));
    }

    fn meta(uid: &str, rv: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some("data".into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        }
    }

    #[test]
    fn expectations_skip_only_the_pre_write_copy() {
        let e = Expectations::default();
        e.wrote("ns/data", &meta("u", "1"));
        assert!(e.is_stale("ns/data", &meta("u", "1")));
        assert!(!e.is_stale("ns/other", &meta("u", "1")));
        // The watch shows our write: no longer stale, and forgotten.
        e.observe("ns/data", &meta("u", "2"));
        assert!(e.is_empty());
        assert!(!e.is_stale("ns/data", &meta("u", "1")));
        // A recreated object with the same name is never stale.
        e.wrote("ns/data", &meta("u", "5"));
        assert!(!e.is_stale("ns/data", &meta("u2", "5")));
        assert!(e.is_empty());
    }

    #[test]
    fn event_memory_reports_changes_once() {
        let m = EventMemory::default();
        assert!(m.held("u", "in use by a"));
        assert!(!m.held("u", "in use by a"), "same reason: no repeat");
        assert!(m.held("u", "in use by b"), "new reason: report");
        assert!(m.released("u"));
        assert!(!m.released("u"), "released once");
        assert!(!m.released("never-held"));
    }

    fn pvc(name: &str, uid: &str, deleting: bool, fins: &[&str]) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                resource_version: Some("1".into()),
                finalizers: Some(fins.iter().map(|s| s.to_string()).collect()),
                deletion_timestamp: deleting.then(|| Time(Timestamp::now())),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn observer_keeps_the_terminating_set_exact_across_relists() {
        const F: &str = "x.io/pvc";
        let metrics = Metrics::new().unwrap().controller("pvc-protection");
        let mut o = Observer::new(F, metrics.clone());
        let state = PerObject::default();
        let (e, mem) = (&state.expectations, &state.events);
        o.observe(&watcher::Event::Apply(pvc("a", "ua", true, &[F])), &state);
        o.observe(&watcher::Event::Apply(pvc("b", "ub", true, &[F])), &state);
        o.observe(
            &watcher::Event::Apply(pvc("c", "uc", true, &["other.io/x"])),
            &state,
        );
        o.observe(&watcher::Event::Apply(pvc("d", "ud", false, &[F])), &state);
        assert_eq!(
            metrics.terminating_snapshot().0,
            2,
            "only deleting with ours"
        );
        o.observe(&watcher::Event::Delete(pvc("a", "ua", true, &[F])), &state);
        assert_eq!(metrics.terminating_snapshot().0, 1);
        mem.held("ub", "note");
        mem.held("gone", "note");
        e.wrote("ns/gone", &meta("gone", "1"));
        // Re-list: b was deleted during the gap, e appeared.
        o.observe(&watcher::Event::<PersistentVolumeClaim>::Init, &state);
        o.observe(
            &watcher::Event::InitApply(pvc("e", "ue", true, &[F])),
            &state,
        );
        assert_eq!(metrics.terminating_snapshot().0, 1, "unchanged until done");
        o.observe(&watcher::Event::<PersistentVolumeClaim>::InitDone, &state);
        assert_eq!(metrics.terminating_snapshot().0, 1);
        assert_eq!(mem.len(), 0, "held memory of vanished objects dropped");
        assert!(e.is_empty());
    }
}

//! Per-object memory of a controller, and the observer that keeps it (and
//! the Terminating gauge) exact across watch events and re-lists.

use std::collections::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::watcher;
use parking_lot::Mutex;

use super::backoff::Backoff;
use super::expectations::Expectations;
use super::object_key;
use crate::finalizer::{has_finalizer, is_deleting};
use crate::metrics::ControllerMetrics;

/// The last held-event note per object UID, so that a deletion held for the
/// same reason is reported once (resyncs and repeated triggers included),
/// a change of reason is reported again, and "released" is only reported for
/// deletions that were held.
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

/// Per-object memory of a controller: retry backoff, write expectations and
/// the held-event memory, all dropped when the watch shows the object gone.
#[derive(Debug, Default)]
pub struct PerObject<V = ()> {
    pub backoff: Backoff,
    pub expectations: Expectations<V>,
    pub events: EventMemory,
}

impl<V> PerObject<V> {
    /// With a controller's own retry delays.
    pub fn with_backoff(backoff: Backoff) -> Self {
        PerObject {
            backoff,
            expectations: Expectations::default(),
            events: EventMemory::default(),
        }
    }
}

/// Watches a controller's main event stream (after the reflector) and keeps
/// the Terminating gauge, the expectations, the backoff and the event memory
/// exact: applies and deletes update them one by one, a re-list replaces
/// them with what was listed.
#[derive(Debug)]
pub struct Observer {
    finalizer: String,
    metrics: ControllerMetrics,
    relist: Option<Relist>,
    listed: tokio::sync::watch::Sender<bool>,
}

#[derive(Debug, Default)]
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

    /// When the object is Terminating with our finalizer: since when.
    pub fn terminating_since(&self, meta: &ObjectMeta) -> Option<Timestamp> {
        if is_deleting(meta) && has_finalizer(meta, &self.finalizer) {
            meta.deletion_timestamp.as_ref().map(|t| t.0)
        } else {
            None
        }
    }

    pub fn observe<K: Resource, V: Clone>(&mut self, ev: &watcher::Event<K>, state: &PerObject<V>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn event_memory_reports_changes_once() {
        let m = EventMemory::default();
        assert!(m.held("u", "in use by a"));
        assert!(!m.held("u", "in use by a"), "same reason: no repeat");
        assert!(m.held("u", "in use by b"), "new reason: report");
        assert!(m.is_held("u"));
        m.forget("u");
        assert!(!m.is_held("u"), "forgotten once released");
        assert!(
            m.held("u", "in use by b"),
            "held again after a release: report"
        );
        assert!(!m.is_held("never-held"));
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
    fn observer_keeps_the_terminating_set_and_memories_exact_across_relists() {
        const F: &str = "x.io/pvc";
        let metrics = Metrics::new().unwrap().controller("pvc-protection");
        let mut o = Observer::new(F, metrics.clone());
        let listed = o.listed();
        let state = PerObject::<()>::default();
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
        state.backoff.next("ns/a");
        o.observe(&watcher::Event::Delete(pvc("a", "ua", true, &[F])), &state);
        assert_eq!(metrics.terminating_snapshot().0, 1);
        assert_eq!(
            state.backoff.failures("ns/a"),
            0,
            "a deleted object's backoff is dropped"
        );
        mem.held("ub", "note");
        mem.held("gone", "note");
        e.wrote("ns/gone", &pvc("gone", "gone", false, &[]).metadata, ());
        // Re-list: b was deleted during the gap, e appeared.
        assert!(!*listed.borrow());
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
        assert!(*listed.borrow(), "listed once the first list is done");
    }
}

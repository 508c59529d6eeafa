//! Per-scope batching of live confirmations (a scope is a namespace, or ""
//! for the cluster), upstream's `pvcProcessingStore` + `LazyLivePodList`
//! (kubernetes #126745):
//!
//! * an object whose cache check found no user is [`Batcher::push`]ed into
//!   its scope's pending set (after that cache check);
//! * one worker per scope at a time [`Batcher::take`]s the whole pending
//!   set and makes ONE live round of LISTs of the scope for all of it;
//! * objects pushed while that round is in flight wait for the next batch: a
//!   LIST that started before an object's cache check is never reused for it
//!   (upstream reuses its lazy list for every PVC of a batch, including those
//!   whose cache check ran after the LIST; we do not, so a user created
//!   between the LIST and a later cache check can never be missed).
//!
//! So there is at most one round in flight per scope, and at most one round
//! per batch, however many objects of the scope are waiting.
//!
//! This type is the state machine only (no I/O), so the invariants are unit
//! tested here; the controller runs the workers.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

#[derive(Debug)]
struct NsQueue<P> {
    pending: BTreeMap<String, P>,
    running: bool,
}

/// Pending live confirmations by scope. `P` is what travels with each
/// object (its reconcile timer).
#[derive(Debug)]
pub struct Batcher<P> {
    namespaces: Mutex<HashMap<String, NsQueue<P>>>,
}

impl<P> Default for Batcher<P> {
    fn default() -> Self {
        Batcher {
            namespaces: Mutex::new(HashMap::new()),
        }
    }
}

/// What [`Batcher::push`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed<P> {
    /// Queued, and no worker runs for the namespace: start one.
    StartWorker,
    /// Queued; the namespace's worker will pick it up.
    Queued,
    /// The PVC was already pending; this payload was not needed.
    Duplicate(P),
}

impl<P> Batcher<P> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `name` of `namespace` for the next batch.
    pub fn push(&self, namespace: &str, name: &str, payload: P) -> Pushed<P> {
        let mut m = self.namespaces.lock();
        let q = m.entry(namespace.to_string()).or_insert_with(|| NsQueue {
            pending: BTreeMap::new(),
            running: false,
        });
        if q.pending.contains_key(name) {
            return Pushed::Duplicate(payload);
        }
        q.pending.insert(name.to_string(), payload);
        if q.running {
            Pushed::Queued
        } else {
            q.running = true;
            Pushed::StartWorker
        }
    }

    /// The namespace's worker takes everything pending, or learns there is
    /// nothing left (and stops: the next push starts a new worker).
    pub fn take(&self, namespace: &str) -> Option<Vec<(String, P)>> {
        let mut m = self.namespaces.lock();
        let q = m.get_mut(namespace)?;
        if q.pending.is_empty() {
            m.remove(namespace);
            return None;
        }
        Some(std::mem::take(&mut q.pending).into_iter().collect())
    }

    /// PVCs waiting (all namespaces).
    pub fn pending(&self) -> usize {
        self.namespaces
            .lock()
            .values()
            .map(|q| q.pending.len())
            .sum()
    }

    /// Namespaces with a worker.
    pub fn active_namespaces(&self) -> usize {
        self.namespaces.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_per_namespace_and_one_batch_per_take() {
        let b = Batcher::new();
        assert_eq!(b.push("ns", "a", 1), Pushed::StartWorker);
        assert_eq!(b.push("ns", "b", 2), Pushed::Queued);
        assert_eq!(b.push("ns", "a", 3), Pushed::Duplicate(3));
        assert_eq!(b.push("other", "x", 4), Pushed::StartWorker);
        assert_eq!(b.pending(), 3);
        // The worker's batch: everything pushed before the take.
        let batch = b.take("ns").unwrap();
        assert_eq!(batch, vec![("a".into(), 1), ("b".into(), 2)]);
        // Pushed while the batch's LIST is in flight: next batch, same worker.
        assert_eq!(b.push("ns", "a", 5), Pushed::Queued);
        assert_eq!(b.take("ns").unwrap(), vec![("a".into(), 5)]);
        // Nothing left: the worker stops, the next push starts one again.
        assert_eq!(b.take("ns"), None);
        assert_eq!(b.push("ns", "c", 6), Pushed::StartWorker);
        assert_eq!(b.active_namespaces(), 2);
    }

    #[test]
    fn take_of_unknown_namespace_is_none() {
        let b: Batcher<()> = Batcher::new();
        assert!(b.take("nope").is_none());
    }
}

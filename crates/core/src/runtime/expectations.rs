//! "Our own write is not in the cache yet".
//!
//! After a write, the watch delivers the new version some time later. A
//! reconcile triggered by something else in between (a pod event, a resync,
//! a retry) would still see the pre-write copy and send a second, doomed
//! request (a guarded patch answers 422), or repeat a provider call. So each
//! write records the `(uid, resourceVersion)` it started from, and, if the
//! caller has it, what the API server answered; until the watch shows any
//! other version of the object, a reconcile of the pre-write copy either
//! waits ([`Expectations::is_stale`]) or works from the answer
//! ([`Expectations::pending`]). client-go controllers call this
//! "expectations".

use std::collections::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;

/// Pending writes per object key, each with what the write answered (`V`;
/// `()` when the caller only needs to wait).
#[derive(Debug)]
pub struct Expectations<V = ()> {
    written: Mutex<HashMap<String, Pending<V>>>,
}

#[derive(Debug)]
struct Pending<V> {
    uid: String,
    resource_version: String,
    answer: V,
}

impl<V> Default for Expectations<V> {
    fn default() -> Self {
        Expectations {
            written: Mutex::new(HashMap::new()),
        }
    }
}

fn same_version<V>(p: &Pending<V>, meta: &ObjectMeta) -> bool {
    meta.uid.as_deref() == Some(p.uid.as_str())
        && meta.resource_version.as_deref() == Some(p.resource_version.as_str())
}

impl<V: Clone> Expectations<V> {
    /// We wrote `key`, starting from `before`; the server answered `answer`.
    /// Without a uid and resourceVersion there is nothing to compare later,
    /// so nothing is recorded.
    pub fn wrote(&self, key: &str, before: &ObjectMeta, answer: V) {
        let (Some(uid), Some(rv)) = (&before.uid, &before.resource_version) else {
            return;
        };
        self.written.lock().insert(
            key.to_string(),
            Pending {
                uid: uid.clone(),
                resource_version: rv.clone(),
                answer,
            },
        );
    }

    /// The answer of our last write if `meta` is still the copy it started
    /// from; otherwise forgets the write (the cache moved on) and `None`.
    pub fn pending(&self, key: &str, meta: &ObjectMeta) -> Option<V> {
        let mut m = self.written.lock();
        match m.get(key) {
            Some(p) if same_version(p, meta) => Some(p.answer.clone()),
            Some(_) => {
                m.remove(key);
                None
            }
            None => None,
        }
    }

    /// Whether `meta` is still the copy our last write started from.
    pub fn is_stale(&self, key: &str, meta: &ObjectMeta) -> bool {
        self.pending(key, meta).is_some()
    }

    /// The watch delivered `meta` for `key`: a version other than the
    /// pre-write one means our write (or something after it) arrived.
    pub fn observe(&self, key: &str, meta: &ObjectMeta) {
        let mut m = self.written.lock();
        if m.get(key).is_some_and(|p| !same_version(p, meta)) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn only_the_pre_write_copy_is_stale() {
        let e = Expectations::<()>::default();
        e.wrote("ns/data", &meta("u", "1"), ());
        assert!(e.is_stale("ns/data", &meta("u", "1")));
        assert!(!e.is_stale("ns/other", &meta("u", "1")));
        // The watch shows our write: no longer stale, and forgotten.
        e.observe("ns/data", &meta("u", "2"));
        assert!(e.is_empty());
        assert!(!e.is_stale("ns/data", &meta("u", "1")));
        // A recreated object with the same name is never stale.
        e.wrote("ns/data", &meta("u", "5"), ());
        assert!(!e.is_stale("ns/data", &meta("u2", "5")));
        assert!(e.is_empty());
    }

    #[test]
    fn the_answer_replaces_the_stale_copy_until_the_cache_moves_on() {
        let e = Expectations::<&str>::default();
        e.wrote("default/web", &meta("u", "10"), "answer at 11");
        assert_eq!(
            e.pending("default/web", &meta("u", "10")),
            Some("answer at 11")
        );
        // Still pending: the store has not moved.
        assert_eq!(e.len(), 1);
        // The store moved on (12): the cache is newer than our answer.
        assert_eq!(e.pending("default/web", &meta("u", "12")), None);
        assert!(e.is_empty());
    }

    #[test]
    fn a_write_without_a_version_is_not_recorded_and_relists_drop_vanished_keys() {
        let e = Expectations::<()>::default();
        e.wrote("x", &ObjectMeta::default(), ());
        assert!(e.is_empty());
        e.wrote("a", &meta("u", "1"), ());
        e.wrote("b", &meta("v", "1"), ());
        e.retain(&HashSet::from(["a".to_string()]));
        assert_eq!(e.len(), 1);
        assert!(e.is_stale("a", &meta("u", "1")));
    }
}

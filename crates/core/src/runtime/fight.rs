//! Fights over a finalizer: another writer that keeps removing the
//! finalizer we add (a script, an operator that "cleans up" finalizers)
//! would get a re-add from us on every watch event, tens of writes a second
//! for ever, slowing every other object (service-lb-cleanup meets the same
//! the other way too: a writer that keeps re-adding the finalizer it
//! removes). A fight is the same object re-written [`THRESHOLD`] times
//! within [`WINDOW`] (a write its caller reports as not made,
//! [`Fights::not_written`], does not count); from then on each re-write
//! waits, per object, [`BASE`] doubled on every further one up to [`MAX`]
//! (as the service controller's 5 s → 300 s), the controller emits one
//! Warning event naming the other field manager, and counts each back-off
//! in `protection_manager_finalizer_fight_backoffs_total`. An object left
//! alone for [`WINDOW`] after its wait starts over.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use parking_lot::Mutex;
use tokio::time::Instant;

/// Re-adds within [`WINDOW`] that make a fight.
pub const THRESHOLD: u32 = 3;
/// How close together the re-adds of a fight are.
pub const WINDOW: Duration = Duration::from_secs(30);
/// The first wait of a fight.
pub const BASE: Duration = Duration::from_secs(5);
/// The longest wait.
pub const MAX: Duration = Duration::from_secs(300);

/// Past this many tracked objects, calm ones are dropped.
const PRUNE_AT: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Adds since `since`.
    adds: u32,
    since: Instant,
    /// Back-offs so far in this fight (0: no fight).
    level: u32,
    /// No add before this.
    not_before: Option<Instant>,
}

/// What the tracker says of an add about to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Write it.
    Write,
    /// A new back-off: do not write before `wait`; `started` is true for
    /// the first back-off of a fight (the one to report).
    BackOff { wait: Duration, started: bool },
    /// Still within a back-off: `wait` is what is left of it.
    Waiting { wait: Duration },
}

/// Per-object fight detection of one controller (keyed by uid).
///
/// Every object written in the last [`WINDOW`] has an entry (a back-fill
/// writes them all at once), so an entry is kept small: the key's 64-bit
/// hash, not the uid's string (at 20,000 objects that was 1.5 MB of the
/// manager's heap). Two keys of one hash would share a count: with 64 bits
/// and the objects of one window, the chance is ~10⁻¹¹, and its harm a
/// back-off taken too early.
///
/// Calm entries are dropped when the map reaches a threshold that doubles
/// with what a pass keeps: a back-fill keeps every entry for its window,
/// and a pass per write over all of them was quadratic (a fifth of the
/// rules benchmark's extra CPU at 10,000 objects).
#[derive(Debug)]
pub struct Fights {
    entries: Mutex<Tracked>,
}

#[derive(Debug)]
struct Tracked {
    map: HashMap<u64, Entry>,
    /// The size at which calm entries are dropped next.
    prune_at: usize,
}

impl Default for Fights {
    fn default() -> Self {
        Fights {
            entries: Mutex::new(Tracked {
                map: HashMap::new(),
                prune_at: PRUNE_AT,
            }),
        }
    }
}

fn hashed(key: &str) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl Fights {
    /// Called before writing our finalizer back to the object `key` (its
    /// uid; an add, or for a controller whose fights are over re-adds, a
    /// removal, keyed apart): counts the write and says whether to make it
    /// now.
    pub fn before_write(&self, key: &str) -> Verdict {
        self.before_write_at(key, Instant::now())
    }

    fn before_write_at(&self, uid: &str, now: Instant) -> Verdict {
        if uid.is_empty() {
            return Verdict::Write;
        }
        let mut t = self.entries.lock();
        if t.map.len() >= t.prune_at {
            t.map.retain(|_, e| !calm(e, now));
            t.prune_at = PRUNE_AT.max(2 * t.map.len());
        }
        let e = t.map.entry(hashed(uid)).or_insert(Entry {
            adds: 0,
            since: now,
            level: 0,
            not_before: None,
        });
        if let Some(t) = e.not_before {
            if now < t {
                return Verdict::Waiting { wait: t - now };
            }
            // The wait is over: this add goes; a removal within the window
            // after it continues the fight.
            e.not_before = None;
            e.adds = 1;
            e.since = now;
            return Verdict::Write;
        }
        if calm(e, now) {
            *e = Entry {
                adds: 0,
                since: now,
                level: 0,
                not_before: None,
            };
        }
        e.adds += 1;
        if e.adds < THRESHOLD && e.level == 0 {
            return Verdict::Write;
        }
        if e.level > 0 && e.adds < 2 {
            return Verdict::Write;
        }
        let started = e.level == 0;
        let wait = BASE
            .checked_mul(2u32.pow(e.level.min(16)))
            .map_or(MAX, |d| d.min(MAX));
        e.level = e.level.saturating_add(1);
        e.not_before = Some(now + wait);
        Verdict::BackOff { wait, started }
    }

    /// The write [`Self::before_write`] let through for `key` was not made
    /// (it failed, or another step before it did): it does not count
    /// toward a fight.
    pub fn not_written(&self, key: &str) {
        if let Some(e) = self.entries.lock().map.get_mut(&hashed(key)) {
            e.adds = e.adds.saturating_sub(1);
        }
    }

    /// The object is gone: forget it.
    pub fn forget(&self, uid: &str) {
        self.entries.lock().map.remove(&hashed(uid));
    }
}

/// No add for a window since the last count (and no wait pending).
fn calm(e: &Entry, now: Instant) -> bool {
    e.not_before.is_none_or(|t| now >= t) && now.duration_since(e.since) > WINDOW
}

/// The field manager that wrote the object last, other than `ours` (from
/// `metadata.managedFields`): the likely other side of a fight.
/// managedFields times have whole seconds, so writers within the same
/// second tie: of the most recent entries, the one that owns
/// `f:metadata/f:finalizers` is preferred (a writer that re-adds a
/// finalizer owns it), and only then the later entry. A writer whose only
/// change was a removal owns no field and is not listed there.
pub fn other_writer(meta: &ObjectMeta, ours: &str) -> Option<String> {
    let others: Vec<&ManagedFieldsEntry> = meta
        .managed_fields
        .as_deref()?
        .iter()
        .filter(|m| {
            m.manager
                .as_deref()
                .is_some_and(|n| !n.is_empty() && n != ours)
        })
        .collect();
    let time = |m: &ManagedFieldsEntry| m.time.as_ref().map(|t| t.0);
    let latest = others.iter().map(|m| time(m)).max()?;
    others
        .into_iter()
        .filter(|m| time(m) == latest)
        // `max_by_key` keeps the last of equals: the later entry.
        .max_by_key(|m| owns_finalizers(m))
        .and_then(|m| m.manager.clone())
}

/// Who the other side of a fight is, for its Warning: `other` is what
/// [`other_writer`] found.
pub fn describe_other(other: Option<String>) -> String {
    other.map_or_else(
        || "another writer (whose field manager left no trace in managedFields: a pure removal owns no field)".to_string(),
        |m| format!("field manager {m:?} (the last other writer)"),
    )
}

/// Whether a managedFields entry owns `metadata.finalizers` (or one of its
/// items).
fn owns_finalizers(m: &ManagedFieldsEntry) -> bool {
    m.fields_v1
        .as_ref()
        .and_then(|f| f.0.get("f:metadata"))
        .and_then(|md| md.get("f:finalizers"))
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_third_quick_re_add_starts_a_back_off_that_doubles_up_to_the_cap() {
        let f = Fights::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(f.before_write_at("u", t0), Verdict::Write);
        assert_eq!(f.before_write_at("u", t0 + s(1)), Verdict::Write);
        assert_eq!(
            f.before_write_at("u", t0 + s(2)),
            Verdict::BackOff {
                wait: BASE,
                started: true
            }
        );
        // Within the wait: nothing is written, the fight is not reported
        // again.
        assert_eq!(
            f.before_write_at("u", t0 + s(3)),
            Verdict::Waiting { wait: s(4) }
        );
        // After it: one write; removed again at once, the next wait doubles.
        let mut now = t0 + s(2) + BASE;
        let mut want = BASE * 2;
        for _ in 0..10 {
            assert_eq!(f.before_write_at("u", now), Verdict::Write);
            assert_eq!(
                f.before_write_at("u", now + s(1)),
                Verdict::BackOff {
                    wait: want,
                    started: false
                }
            );
            now += s(1) + want;
            want = (want * 2).min(MAX);
        }
        assert_eq!(want, MAX);
        // Another object is not affected.
        assert_eq!(f.before_write_at("v", now), Verdict::Write);
    }

    #[test]
    fn writes_that_were_not_made_do_not_count() {
        let f = Fights::default();
        let t0 = Instant::now();
        for i in 0..5 {
            assert_eq!(
                f.before_write_at("u", t0 + Duration::from_secs(i)),
                Verdict::Write
            );
            f.not_written("u");
        }
        assert_eq!(
            f.before_write_at("u", t0 + Duration::from_secs(6)),
            Verdict::Write
        );
        assert_eq!(
            f.before_write_at("u", t0 + Duration::from_secs(7)),
            Verdict::Write
        );
        assert!(matches!(
            f.before_write_at("u", t0 + Duration::from_secs(8)),
            Verdict::BackOff { .. }
        ));
    }

    #[test]
    fn re_adds_further_apart_than_the_window_are_no_fight() {
        let f = Fights::default();
        let t0 = Instant::now();
        for i in 0..10 {
            assert_eq!(
                f.before_write_at("u", t0 + (WINDOW + Duration::from_secs(1)) * i),
                Verdict::Write
            );
        }
    }

    #[test]
    fn a_calm_object_after_a_fight_starts_over() {
        let f = Fights::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        for i in 0..3 {
            f.before_write_at("u", t0 + s(i));
        }
        let later = t0 + s(2) + BASE + WINDOW + s(1);
        assert_eq!(f.before_write_at("u", later), Verdict::Write);
        assert_eq!(
            f.before_write_at("u", later + WINDOW + s(1)),
            Verdict::Write
        );
        assert_eq!(
            f.before_write_at("u", later + WINDOW + s(2)),
            Verdict::Write
        );
    }

    /// A back-fill's entries all stay for their window without a pass over
    /// them per write; once calm, the next pass drops them.
    #[test]
    fn calm_entries_are_dropped_in_passes_that_double() {
        let f = Fights::default();
        let t0 = Instant::now();
        let n = 3 * PRUNE_AT;
        for i in 0..n {
            assert_eq!(f.before_write_at(&format!("u{i}"), t0), Verdict::Write);
        }
        {
            let t = f.entries.lock();
            assert_eq!(t.map.len(), n, "none is calm within the window");
            assert!(t.prune_at > n, "threshold {} not past {n}", t.prune_at);
        }
        let (later, bound) = (
            t0 + WINDOW + Duration::from_secs(1),
            f.entries.lock().prune_at,
        );
        let mut i = n;
        while f.entries.lock().map.len() == i {
            f.before_write_at(&format!("u{i}"), later);
            i += 1;
            assert!(i <= bound + 1, "calm entries never dropped");
        }
        let t = f.entries.lock();
        assert_eq!(
            t.map.len(),
            i - n,
            "only the entries of the new window kept"
        );
        assert_eq!(t.prune_at, PRUNE_AT.max(2 * (i - n - 1)));
    }

    fn entry(manager: &str, time: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, Time};
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            time: Some(Time(time.parse().unwrap())),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn of_writers_in_the_same_second_the_one_owning_the_finalizers_is_named() {
        use serde_json::json;
        let annotations = json!({"f:metadata": {"f:annotations": {"f:note": {}}}});
        let finalizers =
            json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"example.com/f\"": {}}}});
        let meta = |entries: Vec<ManagedFieldsEntry>| ObjectMeta {
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        };
        let (t, later) = ("2026-11-26T10:00:07Z", "2026-11-26T10:00:08Z");
        let cases = [
            // Same second: the finalizers' owner, whether listed first or
            // last (the server orders equal times by manager name).
            (
                vec![
                    entry("re-adder", t, finalizers.clone()),
                    entry("zz-labeller", t, annotations.clone()),
                ],
                Some("re-adder"),
            ),
            (
                vec![
                    entry("annotator", t, annotations.clone()),
                    entry("re-adder", t, finalizers.clone()),
                ],
                Some("re-adder"),
            ),
            // Ours is never named, even owning the finalizers.
            (
                vec![
                    entry("annotator", t, annotations.clone()),
                    entry("us", t, finalizers.clone()),
                ],
                Some("annotator"),
            ),
            // Only among the most recent: a later writer wins over an
            // earlier owner of the finalizers.
            (
                vec![
                    entry("annotator", later, annotations.clone()),
                    entry("re-adder", t, finalizers.clone()),
                ],
                Some("annotator"),
            ),
            // No owner among equals: the later entry, as before.
            (
                vec![
                    entry("a", t, annotations.clone()),
                    entry("b", t, annotations.clone()),
                ],
                Some("b"),
            ),
            (vec![], None),
        ];
        for (entries, want) in cases {
            let names: Vec<_> = entries.iter().map(|e| e.manager.clone()).collect();
            assert_eq!(
                other_writer(&meta(entries), "us").as_deref(),
                want,
                "{names:?}"
            );
        }
    }
}

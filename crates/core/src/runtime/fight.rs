//! Fights over a finalizer: another writer that keeps removing the
//! finalizer we add (a script, an operator that "cleans up" finalizers)
//! would get a re-add from us on every watch event, tens of writes a second
//! for ever, slowing every other object. A fight is the same object
//! re-added [`THRESHOLD`] times within [`WINDOW`]; from then on each re-add
//! waits, per object, [`BASE`] doubled on every further one up to [`MAX`]
//! (as the service controller's 5 s → 300 s), the controller emits one
//! Warning event naming the other field manager, and counts each back-off
//! in `protection_manager_finalizer_fight_backoffs_total`. An object left
//! alone for [`WINDOW`] after its wait starts over.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
#[derive(Debug, Default)]
pub struct Fights {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Fights {
    /// Called before adding our finalizer to the object `uid`: counts the
    /// add and says whether to write it now.
    pub fn before_add(&self, uid: &str) -> Verdict {
        self.before_add_at(uid, Instant::now())
    }

    fn before_add_at(&self, uid: &str, now: Instant) -> Verdict {
        if uid.is_empty() {
            return Verdict::Write;
        }
        let mut m = self.entries.lock();
        if m.len() >= PRUNE_AT {
            m.retain(|_, e| !calm(e, now));
        }
        let e = m.entry(uid.to_string()).or_insert(Entry {
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

    /// The object is gone: forget it.
    pub fn forget(&self, uid: &str) {
        self.entries.lock().remove(uid);
    }
}

/// No add for a window since the last count (and no wait pending).
fn calm(e: &Entry, now: Instant) -> bool {
    e.not_before.is_none_or(|t| now >= t) && now.duration_since(e.since) > WINDOW
}

/// The field manager that wrote the object last, other than `ours` (from
/// `metadata.managedFields`; of equal times, the later entry): the likely
/// other side of a fight. A writer whose only change was a removal owns no
/// field and is not listed there.
pub fn other_writer(meta: &ObjectMeta, ours: &str) -> Option<String> {
    meta.managed_fields
        .as_deref()?
        .iter()
        .filter(|m| {
            m.manager
                .as_deref()
                .is_some_and(|n| !n.is_empty() && n != ours)
        })
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .and_then(|m| m.manager.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_third_quick_re_add_starts_a_back_off_that_doubles_up_to_the_cap() {
        let f = Fights::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(f.before_add_at("u", t0), Verdict::Write);
        assert_eq!(f.before_add_at("u", t0 + s(1)), Verdict::Write);
        assert_eq!(
            f.before_add_at("u", t0 + s(2)),
            Verdict::BackOff {
                wait: BASE,
                started: true
            }
        );
        // Within the wait: nothing is written, the fight is not reported
        // again.
        assert_eq!(
            f.before_add_at("u", t0 + s(3)),
            Verdict::Waiting { wait: s(4) }
        );
        // After it: one write; removed again at once, the next wait doubles.
        let mut now = t0 + s(2) + BASE;
        let mut want = BASE * 2;
        for _ in 0..10 {
            assert_eq!(f.before_add_at("u", now), Verdict::Write);
            assert_eq!(
                f.before_add_at("u", now + s(1)),
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
        assert_eq!(f.before_add_at("v", now), Verdict::Write);
    }

    #[test]
    fn re_adds_further_apart_than_the_window_are_no_fight() {
        let f = Fights::default();
        let t0 = Instant::now();
        for i in 0..10 {
            assert_eq!(
                f.before_add_at("u", t0 + (WINDOW + Duration::from_secs(1)) * i),
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
            f.before_add_at("u", t0 + s(i));
        }
        let later = t0 + s(2) + BASE + WINDOW + s(1);
        assert_eq!(f.before_add_at("u", later), Verdict::Write);
        assert_eq!(f.before_add_at("u", later + WINDOW + s(1)), Verdict::Write);
        assert_eq!(f.before_add_at("u", later + WINDOW + s(2)), Verdict::Write);
    }
}

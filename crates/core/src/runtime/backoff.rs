//! Per-key exponential retry backoff, client-go's
//! `ItemExponentialFailureRateLimiter`: the n-th consecutive failure of one
//! key waits `base * 2^(n-1)`, capped at `max`; a success forgets the key.
//!
//! Every controller and the host use this one type, each with its upstream
//! delays: the in-use controllers client-go's `DefaultControllerRateLimiter`
//! per-item part ([`DEFAULT_BASE`] → [`DEFAULT_MAX`]), the service controller
//! its own 5 s → 300 s (docs/upstream-semantics.md §5.7).

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

/// client-go's default per-item base delay.
pub const DEFAULT_BASE: Duration = Duration::from_millis(5);
/// client-go's default per-item maximum delay.
pub const DEFAULT_MAX: Duration = Duration::from_secs(1000);

/// Exponential per-key failure backoff.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    /// client-go's 5 ms → 1000 s.
    fn default() -> Self {
        Backoff::new(DEFAULT_BASE, DEFAULT_MAX)
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

    /// Records a failure of `key` and returns how long to wait
    /// (`AddRateLimited`).
    pub fn next(&self, key: &str) -> Duration {
        let mut m = self.failures.lock();
        let n = m.entry(key.to_string()).or_insert(0);
        let exp = *n;
        *n = n.saturating_add(1);
        // 2^31 times any non-zero base is past any sensible cap.
        let factor = 2u32.pow(exp.min(31));
        self.base
            .checked_mul(factor)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// A success: the next failure starts from `base` again (`Forget`).
    pub fn forget(&self, key: &str) {
        self.failures.lock().remove(key);
    }

    /// Consecutive failures recorded for `key` (`NumRequeues`).
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }

    /// Keys with failures.
    pub fn len(&self) -> usize {
        self.failures.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_5ms_to_1000s_per_key() {
        let b = Backoff::default();
        let seq: Vec<Duration> = (0..5).map(|_| b.next("a")).collect();
        assert_eq!(seq, [5, 10, 20, 40, 80].map(Duration::from_millis).to_vec());
        assert_eq!(b.next("other"), Duration::from_millis(5), "per key");
        for _ in 0..40 {
            b.next("a");
        }
        assert_eq!(b.next("a"), DEFAULT_MAX);
        b.forget("a");
        assert_eq!(b.failures("a"), 0);
        assert_eq!(b.next("a"), Duration::from_millis(5));
    }

    #[test]
    fn service_delays_double_from_5s_to_300s_and_reset_on_success() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let got: Vec<u64> = (0..9).map(|_| b.next("ns/a").as_secs()).collect();
        assert_eq!(got, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.failures("ns/a"), 9);
        assert_eq!(b.next("ns/b"), Duration::from_secs(5));
        b.forget("ns/a");
        assert_eq!(b.next("ns/a"), Duration::from_secs(5));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn never_overflows() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        for _ in 0..200 {
            assert!(b.next("k") <= Duration::from_secs(300));
        }
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.next("k"), Duration::MAX);
        assert_eq!(huge.next("k"), Duration::MAX);
    }
}

//! Per-Service retry delays: client-go's
//! `workqueue.NewItemExponentialFailureRateLimiter(5s, 300s)`, the service
//! queue's limiter upstream. The n-th consecutive failure of a key waits
//! `base * 2^(n-1)`, capped at `max`; a success forgets the key.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

/// Upstream `minRetryDelay`.
pub const MIN_RETRY_DELAY: Duration = Duration::from_secs(5);
/// Upstream `maxRetryDelay`.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// Exponential per-key failure backoff.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(MIN_RETRY_DELAY, MAX_RETRY_DELAY)
    }
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure of `key` and returns how long to wait
    /// (`AddRateLimited`).
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut m = self.failures.lock();
        let n = m.entry(key.to_owned()).or_insert(0);
        let exp = *n;
        *n = n.saturating_add(1);
        // 2^exp overflows quickly; anything past 2^32 is past any cap.
        let factor = 2u32.checked_pow(exp.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// Consecutive failures recorded for `key` (`NumRequeues`).
    pub fn failures(&self, key: &str) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }

    /// Forgets `key` after a success (`Forget`).
    pub fn forget(&self, key: &str) {
        self.failures.lock().remove(key);
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
    fn doubles_from_5s_to_300s_per_key_and_resets_on_success() {
        let b = Backoff::default();
        let got: Vec<u64> = (0..9).map(|_| b.next_delay("ns/a").as_secs()).collect();
        assert_eq!(got, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.failures("ns/a"), 9);
        // Another key has its own count.
        assert_eq!(b.next_delay("ns/b"), Duration::from_secs(5));
        b.forget("ns/a");
        assert_eq!(b.failures("ns/a"), 0);
        assert_eq!(b.next_delay("ns/a"), Duration::from_secs(5));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn never_overflows() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        for _ in 0..200 {
            assert!(b.next_delay("k") <= Duration::from_secs(300));
        }
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.next_delay("k"), Duration::MAX);
        assert_eq!(huge.next_delay("k"), Duration::MAX);
    }
}

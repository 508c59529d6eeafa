//! Client-side QPS/burst limiting for the Kubernetes client, like client-go's
//! token-bucket `flowcontrol` (`--kube-api-qps`, `--kube-api-burst`).
//!
//! A tower layer placed under kube's client: `poll_ready` waits for a token,
//! so every request start (a watch counts once, when it is opened) consumes
//! one. kube's client drives its stack from one buffer worker, so waiting in
//! `poll_ready` delays requests in order, as client-go's limiter does.
//!
//! The bucket is `governor`'s GCRA limiter (a token bucket in other words:
//! `burst` requests at once, then one every `1/qps` seconds), driven by
//! tokio's clock so that paused-time tests see it. The settings are checked
//! before governor sees them: governor panics on a period or a burst whose
//! product does not fit in 64-bit nanoseconds, and a panic here kills the
//! client's worker (every later call fails with "buffer's worker closed
//! unexpectedly").

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// The smallest positive `--kube-api-qps` (one request every 1000 s).
pub const MIN_QPS: f64 = 0.001;
/// The largest `--kube-api-qps` (one request per nanosecond, governor's
/// resolution).
pub const MAX_QPS: f64 = 1e9;
/// The largest `--kube-api-burst`.
pub const MAX_BURST: u32 = 1_000_000;

/// Settings the limiter cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateLimitError {
    #[error(
        "invalid qps {0}: must be 0 (no client-side limit) or a finite number from {MIN_QPS} to {MAX_QPS}"
    )]
    Qps(f64),
    #[error("invalid burst {0}: must be from 1 to {MAX_BURST}")]
    Burst(u32),
}

/// Checks a QPS value: 0 (no limit), or finite within [`MIN_QPS`]..=[`MAX_QPS`].
pub fn validate_qps(qps: f64) -> Result<f64, RateLimitError> {
    if qps == 0.0 || (qps.is_finite() && (MIN_QPS..=MAX_QPS).contains(&qps)) {
        Ok(qps)
    } else {
        Err(RateLimitError::Qps(qps))
    }
}

/// Checks a burst value: 1..=[`MAX_BURST`].
pub fn validate_burst(burst: u32) -> Result<u32, RateLimitError> {
    if (1..=MAX_BURST).contains(&burst) {
        Ok(burst)
    } else {
        Err(RateLimitError::Burst(burst))
    }
}

/// governor's clock, read from tokio's (so `tokio::time::pause` applies).
#[derive(Clone, Debug)]
struct TokioClock {
    start: Instant,
}

impl Clock for TokioClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.start)
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>;

/// A token bucket: `qps` tokens per second, at most `burst` saved up.
#[derive(Debug)]
pub struct TokenBucket {
    /// `None`: unlimited (`qps == 0`).
    limiter: Option<Limiter>,
    clock: TokioClock,
}

impl TokenBucket {
    /// `qps == 0` means unlimited; other values are checked with
    /// [`validate_qps`] and [`validate_burst`].
    pub fn new(qps: f64, burst: u32) -> Result<Self, RateLimitError> {
        let qps = validate_qps(qps)?;
        let burst = validate_burst(burst)?;
        let clock = TokioClock {
            start: Instant::now(),
        };
        if qps == 0.0 {
            return Ok(TokenBucket {
                limiter: None,
                clock,
            });
        }
        // In range, 1/qps is 1 ns ..= 1000 s and period × burst ≤ 10^18 ns,
        // within governor's u64 nanoseconds.
        let period = Duration::from_secs_f64(1.0 / qps);
        let quota = Quota::with_period(period)
            .ok_or(RateLimitError::Qps(qps))?
            .allow_burst(NonZeroU32::new(burst).ok_or(RateLimitError::Burst(burst))?);
        Ok(TokenBucket {
            limiter: Some(RateLimiter::direct_with_clock(quota, clock.clone())),
            clock,
        })
    }

    /// Takes a token now, or says how long to wait for one.
    pub fn try_take(&self) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// The layer.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> Result<Self, RateLimitError> {
        Ok(RateLimitLayer {
            bucket: Arc::new(TokenBucket::new(qps, burst)?),
        })
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            reserved: false,
        }
    }
}

/// The service.
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    sleep: Option<Pin<Box<Sleep>>>,
    reserved: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.reserved {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            match self.bucket.try_take() {
                Ok(()) => self.reserved = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.reserved = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_burst_then_paces() {
        let b = TokenBucket::new(10.0, 3).unwrap();
        for _ in 0..3 {
            assert!(b.try_take().is_ok());
        }
        let wait = b.try_take().unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(b.try_take().is_ok());
        // Never saves more than `burst`.
        tokio::time::advance(Duration::from_secs(60)).await;
        for _ in 0..3 {
            assert!(b.try_take().is_ok());
        }
        assert!(b.try_take().is_err());
    }

    #[test]
    fn zero_qps_is_unlimited() {
        let b = TokenBucket::new(0.0, 1).unwrap();
        for _ in 0..1000 {
            assert!(b.try_take().is_ok());
        }
    }

    #[test]
    fn bad_settings_are_refused_naming_the_value() {
        for qps in [
            1e-300,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e10,
        ] {
            let e = TokenBucket::new(qps, 1).unwrap_err();
            assert!(matches!(e, RateLimitError::Qps(_)), "{qps}: {e}");
            assert!(e.to_string().contains(&format!("invalid qps {qps}")), "{e}");
        }
        for burst in [0, MAX_BURST + 1, u32::MAX] {
            assert_eq!(
                TokenBucket::new(1.0, burst).unwrap_err(),
                RateLimitError::Burst(burst)
            );
        }
        // The extremes of the ranges work.
        for (qps, burst) in [(MIN_QPS, MAX_BURST), (MAX_QPS, MAX_BURST), (MIN_QPS, 1)] {
            let b = TokenBucket::new(qps, burst).unwrap();
            assert!(b.try_take().is_ok());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn service_waits_for_tokens() {
        use tower::ServiceExt;
        let svc = tower::service_fn(|x: u32| async move { Ok::<_, std::convert::Infallible>(x) });
        let mut svc = RateLimitLayer::new(2.0, 1).unwrap().layer(svc);
        let start = Instant::now();
        let mut waits = Vec::new();
        for i in 0..3 {
            let asked = Instant::now();
            let out = svc.ready().await.unwrap().call(i).await.unwrap();
            waits.push(asked.elapsed());
            assert_eq!(out, i);
        }
        // 1 immediately, then 2 more at 2 qps.
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert_eq!(
            waits,
            [
                Duration::ZERO,
                Duration::from_millis(500),
                Duration::from_millis(500)
            ]
        );
    }

    proptest! {
        /// Whatever a flag holds, the limiter refuses it or works: it never
        /// panics (a panic kills the client's worker).
        #[test]
        fn any_setting_is_refused_or_works(qps in any::<f64>(), burst in any::<u32>(), takes in 0usize..50) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
            rt.block_on(async {
                match TokenBucket::new(qps, burst) {
                    Err(_) => {}
                    Ok(b) => {
                        for _ in 0..takes {
                            if let Err(wait) = b.try_take() {
                                tokio::time::advance(wait.min(Duration::from_secs(3600))).await;
                            }
                        }
                    }
                }
            });
        }

        #[test]
        fn valid_settings_are_accepted(qps in MIN_QPS..=MAX_QPS, burst in 1u32..=MAX_BURST) {
            prop_assert!(TokenBucket::new(qps, burst).is_ok());
        }
    }
}

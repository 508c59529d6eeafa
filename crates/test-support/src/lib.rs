//! Dev-only helpers shared by the workspace's tests (a dev-dependency,
//! never published): polling until something holds, a host-like
//! [`ControllerContext`] for running one controller in a test, and object
//! builders.

use std::sync::Arc;
use std::time::Duration;

use protection_core::events::EventRecorder;
use protection_core::{ControllerContext, FeatureGates, Metrics, ReadySignal};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub mod bench;
pub mod kubectl;
pub mod objects;
pub mod raw_http;

/// Polls `f` every `every` until it returns `Some`, or panics naming `what`
/// after `timeout`.
pub async fn eventually_every<T>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `f` (every 50 ms) until it returns `Some`, or panics naming `what`
/// after `timeout`.
pub async fn eventually<T>(timeout: Duration, what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    eventually_every(timeout, Duration::from_millis(50), what, f).await
}

/// Polls `f` (every 50 ms) until it holds, or panics naming `what` after
/// `timeout`.
pub async fn until(timeout: Duration, what: &str, mut f: impl AsyncFnMut() -> bool) {
    eventually(timeout, what, async || f().await.then_some(())).await
}

/// [`until`] for a blocking check, from synchronous code.
pub fn until_blocking(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !f() {
        if std::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a host gives one controller, built for a test: the context, and the
/// handles a test drives it with.
pub struct TestController {
    pub ctx: ControllerContext,
    /// Cancel to stop the controller (the host's SIGTERM).
    pub shutdown: CancellationToken,
    pub ready: ReadySignal,
}

/// A [`ControllerContext`] as the host builds it for controller `name`,
/// reporting into `metrics`, events from instance `test`.
pub fn controller_context(
    name: &'static str,
    client: kube::Client,
    gates: FeatureGates,
    metrics: &Arc<Metrics>,
    concurrency: u16,
) -> TestController {
    let cm = metrics.controller(name);
    let shutdown = CancellationToken::new();
    let ready = ReadySignal::new(Some(cm.clone()));
    let ctx = ControllerContext {
        name,
        client: client.clone(),
        gates: Arc::new(gates),
        metrics: cm,
        events: EventRecorder::new(client, name, Some("test".into())),
        shutdown: shutdown.clone(),
        ready: ready.clone(),
        concurrency,
    };
    TestController {
        ctx,
        shutdown,
        ready,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_returns_the_first_value_and_until_waits_for_true() {
        let mut n = 0;
        let got = eventually(Duration::from_secs(5), "three calls", async || {
            n += 1;
            (n == 3).then_some(n)
        })
        .await;
        assert_eq!(got, 3);
        let mut m = 0;
        until(Duration::from_secs(5), "two calls", async || {
            m += 1;
            m == 2
        })
        .await;
        assert_eq!(m, 2);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 1s waiting until never")]
    async fn eventually_names_what_it_waited_for() {
        eventually::<()>(Duration::from_secs(1), "never", async || None).await;
    }
}

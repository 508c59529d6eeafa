//! Polling with generous deadlines (never fixed sleeps: a loaded 2-core
//! machine must not fail a scenario by being slow).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How often conditions are polled.
pub const POLL: Duration = Duration::from_millis(250);

/// Polls `check` until it returns `Some`, or fails after `timeout` with
/// `what` and the diagnostics `diag` produces then.
pub async fn until<T, F, Fut, D, DFut>(
    what: &str,
    timeout: Duration,
    mut check: F,
    diag: D,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
    D: FnOnce() -> DFut,
    DFut: Future<Output = String>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(Error::Timeout {
                what: what.to_string(),
                after: timeout,
                diagnostics: diag().await,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`until`] for a boolean condition.
pub async fn until_true<F, Fut, D, DFut>(
    what: &str,
    timeout: Duration,
    mut check: F,
    diag: D,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
    D: FnOnce() -> DFut,
    DFut: Future<Output = String>,
{
    until(
        what,
        timeout,
        || {
            let f = check();
            async move { Ok(f.await?.then_some(())) }
        },
        diag,
    )
    .await
}

/// Checks that `check` stays true for `period` (a negative claim such as
/// "stays Terminating" can only be observed for a while; the scenarios say
/// for how long and why that is enough).
pub async fn holds_for<F, Fut>(what: &str, period: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<std::result::Result<(), String>>>,
{
    let start = Instant::now();
    loop {
        if let Err(why) = check().await? {
            return Err(Error::Check(format!(
                "{what} stopped holding after {:.1}s: {why}",
                start.elapsed().as_secs_f64()
            )));
        }
        if start.elapsed() >= period {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn until_returns_the_value_or_times_out_with_diagnostics() {
        let mut n = 0;
        let v = until(
            "n reaches 3",
            Duration::from_secs(10),
            || {
                n += 1;
                let n = n;
                async move { Ok((n >= 3).then_some(n)) }
            },
            || async { String::new() },
        )
        .await
        .expect("reaches 3");
        assert_eq!(v, 3);
        let e = until_true(
            "never",
            Duration::from_millis(300),
            || async { Ok(false) },
            || async { "the state".to_string() },
        )
        .await
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("waiting until never") && msg.contains("the state"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn holds_for_reports_when_a_claim_breaks() {
        holds_for("ok", Duration::from_millis(300), || async { Ok(Ok(())) })
            .await
            .expect("holds");
        let mut n = 0;
        let e = holds_for("stays", Duration::from_secs(10), || {
            n += 1;
            let n = n;
            async move {
                Ok(if n > 2 {
                    Err("changed".to_string())
                } else {
                    Ok(())
                })
            }
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("stays stopped holding"), "{e}");
    }
}

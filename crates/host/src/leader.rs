//! Leader election on a coordination.k8s.io/v1 Lease, through
//! kube-lease-manager, with kube-controller-manager's three timings:
//!
//! * `lease_duration`: how long after the last renewal others wait before
//!   taking over (written to `spec.leaseDurationSeconds`);
//! * `retry_period`: how often the holder renews (kube-lease-manager renews
//!   when `grace` seconds remain, so `grace = lease_duration - retry_period`);
//! * `renew_deadline`: the holder steps down if it has not renewed for this
//!   long. kube-lease-manager has no such deadline (its README: "no fencing"),
//!   so a watchdog here reads the Lease every `retry_period` and declares the
//!   leadership lost when the Lease names someone else, or when our own
//!   `renewTime` (or the last successful read) is older than `renew_deadline`.
//!   Because `renew_deadline < lease_duration`, the old leader stops before
//!   any other replica may take over: the same margin client-go gives.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use protection_core::duration::format_duration;

/// Leader election settings (`--leader-elect-*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    pub lease_name: String,
    pub lease_namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Leader election errors.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("invalid leader election settings: {0}")]
    Config(String),
    #[error("leader election on lease {namespace}/{name}: {message}")]
    Lease {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("leaderelection lost: {0}")]
    Lost(String),
}

/// client-go's `JitterFactor` for the renew-deadline check.
const JITTER_FACTOR: f64 = 1.2;

impl LeaderElectionConfig {
    /// client-go's `NewLeaderElector` checks, plus whole seconds for the lease
    /// duration (the Lease API stores `leaseDurationSeconds`).
    pub fn validate(&self) -> Result<(), LeaderError> {
        let bad = |m: String| Err(LeaderError::Config(m));
        let (ld, rd, rp) = (self.lease_duration, self.renew_deadline, self.retry_period);
        if ld.is_zero() {
            return bad("leaseDuration must be greater than zero".into());
        }
        if rd.is_zero() {
            return bad("renewDeadline must be greater than zero".into());
        }
        if rp.is_zero() {
            return bad("retryPeriod must be greater than zero".into());
        }
        if ld <= rd {
            return bad(format!(
                "leaseDuration must be greater than renewDeadline (lease duration {}, renew deadline {})",
                format_duration(ld),
                format_duration(rd)
            ));
        }
        if rd.as_secs_f64() <= JITTER_FACTOR * rp.as_secs_f64() {
            return bad(format!(
                "renewDeadline must be greater than retryPeriod*JitterFactor (renew deadline {}, retry period {})",
                format_duration(rd),
                format_duration(rp)
            ));
        }
        if ld.subsec_nanos() != 0 || ld.as_secs() < 2 {
            return bad(format!(
                "lease duration must be a whole number of seconds, at least 2s (got {})",
                format_duration(ld)
            ));
        }
        if self.lease_name.is_empty() || self.lease_namespace.is_empty() {
            return bad("lease name and namespace must not be empty".into());
        }
        if self.identity.is_empty() {
            return bad("identity must not be empty".into());
        }
        Ok(())
    }

    /// kube-lease-manager's `grace`: renew when this many seconds remain.
    fn grace_secs(&self) -> u64 {
        let duration = self.lease_duration.as_secs();
        let retry = self.retry_period.as_secs_f64().ceil().max(1.0) as u64;
        duration.saturating_sub(retry).clamp(1, duration - 1)
    }
}

/// A running candidate.
pub struct Elector {
    cfg: LeaderElectionConfig,
    leases: Api<Lease>,
    rx: watch::Receiver<bool>,
    handle:
        JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// Creates the Lease if needed and starts competing for it.
    pub async fn start(
        client: kube::Client,
        cfg: LeaderElectionConfig,
    ) -> Result<Elector, LeaderError> {
        cfg.validate()?;
        let lease_err = |message: String| LeaderError::Lease {
            namespace: cfg.lease_namespace.clone(),
            name: cfg.lease_name.clone(),
            message,
        };
        let manager = LeaseManagerBuilder::new(client.clone(), &cfg.lease_name)
            .with_namespace(&cfg.lease_namespace)
            .with_identity(&cfg.identity)
            .with_duration(cfg.lease_duration.as_secs())
            .with_grace(cfg.grace_secs())
            .with_field_manager(format!("protection-manager-{}", cfg.identity))
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .build()
            .await
            .map_err(|e| lease_err(e.to_string()))?;
        let (rx, handle) = manager.watch().await;
        tracing::info!(
            lease = %format!("{}/{}", cfg.lease_namespace, cfg.lease_name),
            identity = %cfg.identity,
            "attempting to acquire leader lease"
        );
        Ok(Elector {
            leases: Api::namespaced(client, &cfg.lease_namespace),
            cfg,
            rx,
            handle,
        })
    }

    /// Whether the lease loop is still running.
    pub fn is_alive(&self) -> bool {
        !self.handle.is_finished()
    }

    /// Waits until this replica leads. `Ok(false)` if `cancel` fired first.
    pub async fn wait_leading(&mut self, cancel: &CancellationToken) -> Result<bool, LeaderError> {
        loop {
            if *self.rx.borrow_and_update() {
                tracing::info!(identity = %self.cfg.identity, "successfully acquired lease");
                return Ok(true);
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(false),
                changed = self.rx.changed() => {
                    if changed.is_err() {
                        return Err(LeaderError::Lost("the lease loop stopped".into()));
                    }
                }
            }
        }
    }

    /// Resolves when leadership is lost, with the reason.
    pub async fn lost(&mut self) -> LeaderError {
        let mut last_ok = Instant::now();
        let mut tick = tokio::time::interval(self.cfg.retry_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                changed = self.rx.changed() => {
                    if changed.is_err() {
                        return LeaderError::Lost("the lease loop stopped".into());
                    }
                    if !*self.rx.borrow_and_update() {
                        return LeaderError::Lost("the lease is held by another replica".into());
                    }
                }
                _ = tick.tick() => {
                    match self.leases.get_opt(&self.cfg.lease_name).await {
                        Ok(Some(lease)) => {
                            last_ok = Instant::now();
                            if let Some(reason) = check_lease(&self.cfg, &lease, Timestamp::now()) {
                                return LeaderError::Lost(reason);
                            }
                        }
                        Ok(None) => return LeaderError::Lost("the lease object was deleted".into()),
                        Err(e) => {
                            if last_ok.elapsed() > self.cfg.renew_deadline {
                                return LeaderError::Lost(format!(
                                    "could not read the lease within the renew deadline ({}): {e}",
                                    format_duration(self.cfg.renew_deadline)
                                ));
                            }
                            tracing::warn!(error = %e, "could not read the leader lease; retrying");
                        }
                    }
                }
            }
        }
    }

    /// Gives the lease up (if held) and stops competing.
    pub async fn release(self, timeout: Duration) {
        let Elector {
            rx, handle, cfg, ..
        } = self;
        drop(rx);
        match tokio::time::timeout(timeout, handle).await {
            Ok(Ok(Ok(_))) => tracing::info!(identity = %cfg.identity, "released leader lease"),
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "releasing the leader lease failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "lease task failed"),
            Err(_) => tracing::warn!("timed out releasing the leader lease"),
        }
    }
}

/// `Some(reason)` when the Lease says `cfg.identity` is no longer a valid
/// holder at `now`: someone else holds it, or our last renewal is older
/// than the renew deadline.
fn check_lease(cfg: &LeaderElectionConfig, lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.as_deref());
    if holder != Some(cfg.identity.as_str()) {
        return Some(format!(
            "the lease is held by {}",
            holder.unwrap_or("nobody")
        ));
    }
    let renewed = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0)?;
    let age = now.duration_since(renewed);
    let deadline = cfg.renew_deadline;
    if age.as_secs_f64() > deadline.as_secs_f64() {
        return Some(format!(
            "failed to renew the lease within the renew deadline ({}); last renewal {:.1}s ago",
            format_duration(deadline),
            age.as_secs_f64()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ld: u64, rd: u64, rp: u64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_name: "protection-manager".into(),
            lease_namespace: "kube-system".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(ld),
            renew_deadline: Duration::from_secs(rd),
            retry_period: Duration::from_secs(rp),
        }
    }

    #[test]
    fn validation_matches_client_go() {
        assert!(cfg(15, 10, 2).validate().is_ok());
        let msg = |c: LeaderElectionConfig| c.validate().unwrap_err().to_string();
        assert!(msg(cfg(10, 10, 2)).contains("leaseDuration must be greater than renewDeadline"));
        assert!(
            msg(cfg(15, 2, 2))
                .contains("renewDeadline must be greater than retryPeriod*JitterFactor")
        );
        assert!(msg(cfg(0, 10, 2)).contains("leaseDuration must be greater than zero"));
        let mut c = cfg(15, 10, 2);
        c.lease_duration = Duration::from_millis(15500);
        assert!(msg(c).contains("whole number of seconds"));
    }

    #[test]
    fn grace_renews_every_retry_period() {
        assert_eq!(cfg(15, 10, 2).grace_secs(), 13);
        assert_eq!(cfg(4, 3, 1).grace_secs(), 3);
        // Never 0 nor the whole duration.
        assert_eq!(cfg(2, 1, 1).grace_secs(), 1);
    }

    fn lease(holder: Option<&str>, renewed: Option<Timestamp>) -> Lease {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: renewed.map(MicroTime),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn check_lease_keeps_a_fresh_lease_of_ours() {
        let c = cfg(15, 10, 2);
        let t0 = Timestamp::UNIX_EPOCH;
        let at = |s: i64| t0 + k8s_openapi::jiff::SignedDuration::from_secs(s);
        assert_eq!(check_lease(&c, &lease(Some("me"), Some(t0)), at(0)), None);
        assert_eq!(
            check_lease(&c, &lease(Some("me"), Some(t0)), at(10)),
            None,
            "exactly the renew deadline is still in time"
        );
        // No renewTime yet (just acquired): nothing to judge.
        assert_eq!(check_lease(&c, &lease(Some("me"), None), at(100)), None);
    }

    #[test]
    fn check_lease_loses_to_another_holder_or_a_missed_renew_deadline() {
        let c = cfg(15, 10, 2);
        let t0 = Timestamp::UNIX_EPOCH;
        let at = |s: i64| t0 + k8s_openapi::jiff::SignedDuration::from_secs(s);
        assert_eq!(
            check_lease(&c, &lease(Some("other"), Some(t0)), at(0)).as_deref(),
            Some("the lease is held by other")
        );
        assert_eq!(
            check_lease(&c, &lease(None, None), at(0)).as_deref(),
            Some("the lease is held by nobody")
        );
        assert_eq!(
            check_lease(&c, &Lease::default(), at(0)).as_deref(),
            Some("the lease is held by nobody")
        );
        assert_eq!(
            check_lease(&c, &lease(Some("me"), Some(t0)), at(11)).as_deref(),
            Some(
                "failed to renew the lease within the renew deadline (10s); last renewal 11.0s ago"
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_reports_a_takeover_within_a_retry_period() {
        let api = crate::fake_api::FakeApi::new();
        let c = cfg(15, 10, 2);
        let mut e = Elector::start(api.client(), c.clone())
            .await
            .expect("join the election");
        let never = CancellationToken::new();
        assert!(
            e.wait_leading(&never).await.expect("lead"),
            "an unheld lease is taken"
        );
        let renew = serde_json::to_value(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now()),
        )
        .unwrap_or_default();
        api.patch_lease(
            &c.lease_namespace,
            &c.lease_name,
            serde_json::json!({"holderIdentity": "other", "renewTime": renew}),
        );
        let started = tokio::time::Instant::now();
        let reason = e.lost().await;
        assert!(
            started.elapsed() <= c.retry_period,
            "read at the next tick ({:?})",
            started.elapsed()
        );
        assert_eq!(
            reason.to_string(),
            "leaderelection lost: the lease is held by other"
        );
    }
}

//! The controller host: runs the selected controllers under leader election,
//! serves the admin endpoints, and shuts down gracefully.
//!
//! Life of a process:
//! 1. The admin server starts at once: `/healthz` answers, `/readyz` does not
//!    pass until the API server has answered (`ping`), leader election is
//!    healthy, and (on the leader) every controller has synced its caches.
//!    A standby replica is ready without running controllers: it is healthy
//!    and waiting, and reporting it unready would stall a rolling update.
//! 2. With `--leader-elect`, the replica waits for the Lease; without, it leads
//!    at once.
//! 3. Leading, it starts every selected controller with a child cancellation
//!    token.
//! 4. On SIGTERM/SIGINT it cancels the controllers (they stop taking work and
//!    finish in-flight reconciles), waits at most `shutdown_timeout`, releases
//!    the Lease, and returns `Ok` (exit code 0).
//! 5. Losing the Lease (another holder, or no renewal within the renew
//!    deadline) stops the controllers and returns an error, so the process
//!    exits non-zero and restarts clean, as kube-controller-manager does.
//!    A controller that stops with an error does the same.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, Health};
use crate::leader::{Elector, LeaderElectionConfig, LeaderError};
use crate::release_guard::{self, GuardError, RecordLocation};
use protection_core::controllers::{
    ControllerContext, ControllerDescriptor, ControllerResult, ReadySignal,
};
use protection_core::events::{EVENT_QUEUE, EventSink};
use protection_core::featuregate::FeatureGates;
use protection_core::metrics::Metrics;
use protection_core::runtime::Backoff;
use protection_core::version::Version;

/// How the host runs.
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub leader_election: Option<LeaderElectionConfig>,
    /// Bound on the time controllers get to finish in-flight work.
    pub shutdown_timeout: Duration,
    /// Maximum concurrent reconciles per controller.
    pub concurrency: u16,
    /// This replica's identity (events' reportingInstance, lease holder).
    pub identity: String,
    /// How often the API server is pinged for the readiness check.
    pub ping_interval: Duration,
    /// The release guard (see [`crate::release_guard`]); `None` disables it.
    pub release_guard: Option<ReleaseGuardConfig>,
    /// The client Events are written with (its own rate limit, so Events
    /// never spend the finalizer writes' budget); `None`: the host's client.
    pub events_client: Option<EventsClient>,
}

/// The client Events are written with (a newtype: `kube::Client` has no
/// `Debug`).
#[derive(Clone)]
pub struct EventsClient(pub kube::Client);

impl std::fmt::Debug for EventsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventsClient")
    }
}

/// Settings of the release guard.
#[derive(Clone, Debug)]
pub struct ReleaseGuardConfig {
    pub location: RecordLocation,
    /// The release this process runs as (the emulated version).
    pub running: Version,
    pub binary_version: String,
    /// Record the running release but never refuse to start.
    pub skip_check: bool,
    /// The finalizers of controllers new in `running`, which the release
    /// before never removes: while one is added, or objects carry it, the
    /// record names `running` as the minimum release
    /// ([`release_guard::MinimumRelease`]).
    pub new_finalizers: Vec<NewFinalizer>,
}

/// A finalizer the previous release does not know.
#[derive(Clone, Debug)]
pub struct NewFinalizer {
    pub controller: &'static str,
    pub gate: &'static str,
    pub finalizer: String,
    /// Whether its addition is on in this process.
    pub adding: bool,
    /// Where it is put (counted when `adding` is off).
    pub finalizes: &'static [protection_core::controllers::FinalizedResource],
}

/// Why the host stopped other than by a shutdown signal.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error(transparent)]
    Controller(#[from] protection_core::controllers::ControllerError),
    #[error("controller {0} stopped unexpectedly")]
    ControllerExited(String),
    #[error(transparent)]
    Admin(#[from] admin::AdminError),
    #[error(transparent)]
    ReleaseGuard(#[from] GuardError),
}

/// The host.
pub struct Host {
    client: kube::Client,
    gates: Arc<FeatureGates>,
    metrics: Arc<Metrics>,
    health: Health,
    cfg: HostConfig,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Host {
    pub fn new(
        client: kube::Client,
        gates: Arc<FeatureGates>,
        metrics: Arc<Metrics>,
        cfg: HostConfig,
    ) -> Self {
        Host {
            client,
            gates,
            metrics,
            health: Health::new(),
            cfg,
        }
    }

    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Runs until `shutdown` resolves (→ `Ok`) or something fatal happens.
    pub async fn run(
        self,
        admin_listener: TcpListener,
        controllers: Vec<ControllerDescriptor>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), HostError> {
        let admin_stop = CancellationToken::new();
        let admin_task = tokio::spawn(admin::serve(
            admin_listener,
            self.metrics.clone(),
            self.health.clone(),
            admin_stop.clone(),
        ));
        let ping_stop = CancellationToken::new();
        let ping_task = tokio::spawn(ping_loop(
            self.client.clone(),
            self.health.clone(),
            self.cfg.ping_interval,
            ping_stop.clone(),
        ));
        let stop = CancellationToken::new();
        let result = {
            tokio::pin!(shutdown);
            let signalled = stop.clone();
            let lead = self.lead(controllers, &stop);
            tokio::pin!(lead);
            tokio::select! {
                r = &mut lead => r,
                _ = &mut shutdown => {
                    tracing::info!("shutdown signal received; stopping controllers");
                    signalled.cancel();
                    lead.await
                }
            }
        };
        ping_stop.cancel();
        let _ = ping_task.await;
        admin_stop.cancel();
        match admin_task.await {
            Ok(Err(e)) if result.is_ok() => return Err(e.into()),
            _ => {}
        }
        result
    }

    /// The minimum release to record: every new finalizer that is added,
    /// or (gate off) still carried by an object. A count that fails keeps
    /// what the previous record said for that finalizer.
    async fn minimum_release(
        &self,
        g: &ReleaseGuardConfig,
        recorded: Option<&release_guard::ReleaseRecord>,
    ) -> Option<release_guard::MinimumRelease> {
        let mut finalizers = Vec::new();
        for nf in &g.new_finalizers {
            let entry = |adding, holders| release_guard::StrandedFinalizer {
                finalizer: nf.finalizer.clone(),
                controller: nf.controller.to_string(),
                gate: nf.gate.to_string(),
                adding,
                holders,
                delete_to_clear: nf
                    .finalizes
                    .iter()
                    .find(|r| r.cleared_by_deleting)
                    .map(|r| r.display()),
            };
            if nf.adding {
                finalizers.push(entry(true, None));
                continue;
            }
            let mut count = Some(0usize);
            for r in nf.finalizes {
                match release_guard::holders(&self.client, r, &nf.finalizer).await {
                    Ok(found) => {
                        count = count.map(|c| c + found.map_or(0, |f| f.len()));
                    }
                    Err(e) => {
                        tracing::warn!(error = %protection_core::errors::display_chain(&e), resource = r.plural, finalizer = %nf.finalizer, "cannot count the objects carrying the finalizer; keeping what the release record said");
                        count = None;
                        break;
                    }
                }
            }
            match count {
                Some(0) => {}
                Some(n) => finalizers.push(entry(false, Some(n))),
                None => {
                    let kept = recorded
                        .and_then(|r| r.minimum.as_ref())
                        .and_then(|m| m.finalizers.iter().find(|f| f.finalizer == nf.finalizer));
                    if let Some(k) = kept {
                        finalizers.push(release_guard::StrandedFinalizer {
                            adding: false,
                            ..k.clone()
                        });
                    }
                }
            }
        }
        (!finalizers.is_empty()).then_some(release_guard::MinimumRelease {
            release: g.running,
            finalizers,
        })
    }

    /// Elects (if configured), runs controllers, and stops them on `stop`.
    async fn lead(
        &self,
        controllers: Vec<ControllerDescriptor>,
        stop: &CancellationToken,
    ) -> Result<(), HostError> {
        if !self.guard(stop, false).await? {
            return Ok(());
        }
        let mut elector = None;
        if let Some(le) = &self.cfg.leader_election {
            self.health.set(
                "leader-election",
                Err("waiting to join leader election".into()),
            );
            let mut e = loop {
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    r = Elector::start(self.client.clone(), le.clone()) => match r {
                        Ok(e) => break e,
                        Err(LeaderError::Config(m)) => return Err(LeaderError::Config(m).into()),
                        Err(err) => {
                            tracing::warn!(error = %err, "cannot join leader election yet; retrying");
                            self.health.set("leader-election", Err(err.to_string()));
                            tokio::select! {
                                _ = stop.cancelled() => return Ok(()),
                                _ = tokio::time::sleep(le.retry_period) => {}
                            }
                        }
                    }
                }
            };
            self.health.set("leader-election", Ok(()));
            // Standby: healthy and waiting.
            self.health.set("controllers", Ok(()));
            let leading = e.wait_leading(stop).await;
            match leading {
                Ok(true) => {}
                Ok(false) => {
                    e.release(self.cfg.shutdown_timeout).await;
                    return Ok(());
                }
                Err(err) => {
                    self.health.set("leader-election", Err(err.to_string()));
                    return Err(err.into());
                }
            }
            elector = Some(e);
        }
        let outcome = match self.guard(stop, true).await {
            Ok(true) => {
                self.metrics.set_leader(true);
                self.run_controllers(controllers, stop, elector.as_mut())
                    .await
            }
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        self.metrics.set_leader(false);
        if let Some(e) = elector {
            e.release(self.cfg.shutdown_timeout).await;
        }
        outcome
    }

    /// Checks (and, when leading, records) the release. Retries API errors
    /// until `stop`; returns `Ok(false)` if stopped first.
    async fn guard(&self, stop: &CancellationToken, leading: bool) -> Result<bool, HostError> {
        let Some(g) = &self.cfg.release_guard else {
            return Ok(true);
        };
        // 0.5 s doubling to 10 s between attempts.
        let backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
        loop {
            let attempt = async {
                let recorded = release_guard::read(&self.client, &g.location).await?;
                if !g.skip_check {
                    release_guard::check(recorded.as_ref(), g.running, &g.location)?;
                } else if let Err(e) =
                    release_guard::check(recorded.as_ref(), g.running, &g.location)
                {
                    tracing::warn!("release check skipped (--skip-release-check): {e}");
                }
                if leading {
                    let minimum = self.minimum_release(g, recorded.as_ref()).await;
                    let wrote = release_guard::record(
                        &self.client,
                        &g.location,
                        g.running,
                        minimum.as_ref(),
                        &g.binary_version,
                        &self.cfg.identity,
                    )
                    .await?;
                    if wrote {
                        tracing::info!(release = %g.running, record = %format!("{}/{}", g.location.namespace, g.location.name), "recorded the running release");
                    }
                    if let Some(m) = &minimum {
                        tracing::warn!(
                            record = %format!("{}/{}", g.location.namespace, g.location.name),
                            minimum_release = %m.release,
                            finalizers = ?m.finalizers.iter().map(|f| f.line()).collect::<Vec<_>>(),
                            "releases before {} are refused while these finalizers may be on objects; safe path: {}",
                            m.release,
                            m.safe_path(&g.location)
                        );
                    }
                }
                Ok::<(), GuardError>(())
            };
            let res = tokio::select! {
                _ = stop.cancelled() => return Ok(false),
                r = attempt => r,
            };
            match res {
                Ok(()) => {
                    self.health.remove("release-guard");
                    return Ok(true);
                }
                Err(e @ (GuardError::Skip { .. } | GuardError::Invalid { .. })) => {
                    self.health.set("release-guard", Err(e.to_string()));
                    return Err(e.into());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "{}", e.waiting_for());
                    self.health.set("release-guard", Err(e.to_string()));
                    tokio::select! {
                        _ = stop.cancelled() => return Ok(false),
                        _ = tokio::time::sleep(backoff.next("release-guard")) => {}
                    }
                }
            }
        }
    }

    async fn run_controllers(
        &self,
        controllers: Vec<ControllerDescriptor>,
        stop: &CancellationToken,
        elector: Option<&mut Elector>,
    ) -> Result<(), HostError> {
        let token = stop.child_token();
        let mut signals: Vec<(&'static str, ReadySignal)> = Vec::new();
        let mut tasks: Vec<(&'static str, JoinHandle<ControllerResult>)> = Vec::new();
        // One queue and writer for every controller's Events; it ends when
        // the controllers (the last recorders) are gone.
        let events = EventSink::start(
            self.cfg
                .events_client
                .as_ref()
                .map_or_else(|| self.client.clone(), |c| c.0.clone()),
            EVENT_QUEUE,
            Some(self.metrics.clone()),
        );
        for d in controllers {
            let metrics = self.metrics.controller(d.name);
            let ready = ReadySignal::new(Some(metrics.clone()));
            let ctx = ControllerContext {
                name: d.name,
                client: self.client.clone(),
                gates: self.gates.clone(),
                metrics,
                events: events.recorder(d.name, Some(self.cfg.identity.clone())),
                shutdown: token.clone(),
                ready: ready.clone(),
                concurrency: self.cfg.concurrency,
            };
            tracing::info!(controller = d.name, "starting controller");
            signals.push((d.name, ready));
            tasks.push((d.name, tokio::spawn((d.run)(ctx))));
        }
        let sync_signals = signals.clone();
        self.health.set_dynamic(
            "controllers",
            Arc::new(move || {
                let waiting: Vec<&str> = sync_signals
                    .iter()
                    .filter(|(_, s)| !s.is_ready())
                    .map(|(n, _)| *n)
                    .collect();
                if waiting.is_empty() {
                    Ok(())
                } else {
                    Err(format!("caches not synced yet: {}", waiting.join(", ")))
                }
            }),
        );

        let note_signals = signals.clone();
        self.health.set_note(
            "controllers",
            Arc::new(move || {
                let notes: Vec<String> = note_signals
                    .iter()
                    .filter_map(|(n, s)| s.note().map(|note| format!("{n}: {note}")))
                    .collect();
                (!notes.is_empty()).then(|| notes.join("; "))
            }),
        );

        let names: Vec<&'static str> = tasks.iter().map(|(n, _)| *n).collect();
        let mut handles: Vec<JoinHandle<ControllerResult>> =
            tasks.into_iter().map(|(_, h)| h).collect();
        let lost = async {
            match elector {
                Some(e) => e.lost().await,
                None => std::future::pending().await,
            }
        };
        // Wait for: a stop request, leadership loss, or a controller ending.
        let mut failure: Option<HostError> = None;
        let mut finished: Option<usize> = None;
        tokio::select! {
            // A stop request wins over a controller that ended because of it.
            biased;
            _ = token.cancelled() => {}
            reason = lost => {
                tracing::error!(error = %reason, "leadership lost; stopping controllers");
                self.health.set("leader-election", Err(reason.to_string()));
                failure = Some(reason.into());
            }
            (res, idx) = first_to_finish(&mut handles) => {
                let name = names[idx];
                failure = match res {
                    // Stopped because shutdown began meanwhile: clean.
                    Ok(Ok(())) if token.is_cancelled() => None,
                    Ok(Ok(())) => Some(HostError::ControllerExited(name.to_string())),
                    Ok(Err(e)) => Some(e.into()),
                    Err(join) => Some(HostError::ControllerExited(format!("{name} ({join})"))),
                };
                finished = Some(idx);
            }
        }
        token.cancel();
        // Bounded wait for in-flight work.
        let remaining: Vec<(&'static str, JoinHandle<ControllerResult>)> = names
            .iter()
            .copied()
            .zip(handles)
            .enumerate()
            .filter(|(i, _)| Some(*i) != finished)
            .map(|(_, x)| x)
            .collect();
        let deadline = tokio::time::Instant::now() + self.cfg.shutdown_timeout;
        for (name, mut h) in remaining {
            match tokio::time::timeout_at(deadline, &mut h).await {
                Ok(Ok(Ok(()))) => tracing::info!(controller = name, "controller stopped"),
                Ok(Ok(Err(e))) => {
                    tracing::warn!(controller = name, error = %e, "controller stopped with an error")
                }
                Ok(Err(e)) => {
                    tracing::warn!(controller = name, error = %e, "controller task failed")
                }
                Err(_) => {
                    tracing::warn!(
                        controller = name,
                        "controller did not stop within the shutdown timeout; abandoning in-flight work"
                    );
                    h.abort();
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The first controller task to end, with its index; pending forever when
/// there are none (`select_all` refuses an empty list).
async fn first_to_finish(
    handles: &mut [JoinHandle<ControllerResult>],
) -> (Result<ControllerResult, tokio::task::JoinError>, usize) {
    if handles.is_empty() {
        return std::future::pending().await;
    }
    let (res, idx, _) = select_all(handles.iter_mut()).await;
    (res, idx)
}

/// Keeps the `ping` readiness check current: ready only while the API server
/// answers `GET /version`.
async fn ping_loop(client: kube::Client, health: Health, every: Duration, stop: CancellationToken) {
    health.set("ping", Err("the API server has not answered yet".into()));
    loop {
        let res = tokio::select! {
            _ = stop.cancelled() => return,
            r = tokio::time::timeout(every.max(Duration::from_secs(1)), client.apiserver_version()) => r,
        };
        match res {
            Ok(Ok(_)) => health.set("ping", Ok(())),
            Ok(Err(e)) => health.set("ping", Err(format!("the API server is not reachable: {e}"))),
            Err(_) => health.set("ping", Err("the API server did not answer in time".into())),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;
    use tokio::sync::{mpsc, oneshot};
    use tokio::time::{Instant, sleep};

    use super::*;
    use crate::fake_api::FakeApi;
    use protection_core::controllers::{ControllerError, ControllerInfo, FinalizerNames};
    use protection_core::release::{BINARY_VERSION, gates_at};

    const NS: &str = "pm";
    const LEASE: &str = "protection-manager";

    fn config(leader_election: bool) -> HostConfig {
        HostConfig {
            leader_election: leader_election.then(|| LeaderElectionConfig {
                lease_name: LEASE.into(),
                lease_namespace: NS.into(),
                identity: "me".into(),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            }),
            shutdown_timeout: Duration::from_secs(5),
            concurrency: 1,
            identity: "me".into(),
            ping_interval: Duration::from_secs(1),
            events_client: None,
            release_guard: None,
        }
    }

    fn host(api: &FakeApi, cfg: HostConfig) -> Host {
        let gates = gates_at(BINARY_VERSION, &[]).expect("binary version is emulatable");
        let metrics = Metrics::new().expect("metrics register");
        Host::new(api.client(), Arc::new(gates), metrics, cfg)
    }

    fn info(name: &'static str) -> &'static ControllerInfo {
        Box::leak(Box::new(ControllerInfo {
            name,
            aliases: &[],
            enabled_by_default: true,
            since: Version::new(0, 1),
            gates: &[],
            finalizer: FinalizerNames {
                project: "x.io/f",
                upstream: "kubernetes.io/f",
            },
            rbac: &[],
            finalizes: &[],
        }))
    }

    /// What a test controller reports.
    #[derive(Debug, PartialEq, Eq)]
    enum Seen {
        Started,
        Stopping,
    }

    /// A controller that reports start and stop, becomes ready after
    /// `sync` (its caches), and stops when told.
    fn well_behaved(sync: Duration, seen: mpsc::UnboundedSender<Seen>) -> ControllerDescriptor {
        ControllerDescriptor {
            info: info("good"),
            run: Box::new(move |ctx| {
                Box::pin(async move {
                    let _ = seen.send(Seen::Started);
                    tokio::select! {
                        _ = ctx.shutdown.cancelled() => {}
                        _ = sleep(sync) => {
                            ctx.ready.set(true);
                            ctx.shutdown.cancelled().await;
                        }
                    }
                    let _ = seen.send(Seen::Stopping);
                    Ok(())
                })
            }),
        }
    }

    /// Sets its flag when dropped (the host abandoned the task).
    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    async fn admin() -> TcpListener {
        TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port")
    }

    #[tokio::test(start_paused = true)]
    async fn ready_only_once_the_api_server_answers_and_every_cache_synced() {
        let api = FakeApi::new();
        api.set_down(true);
        let h = host(&api, config(false));
        let health = h.health();
        let (seen_tx, mut seen) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let run = tokio::spawn(h.run(
            admin().await,
            vec![well_behaved(Duration::from_secs(30), seen_tx)],
            async {
                let _ = stop_rx.await;
            },
        ));
        assert_eq!(seen.recv().await, Some(Seen::Started));
        sleep(Duration::from_secs(5)).await;
        assert!(!health.is_ready(), "the API server does not answer");
        assert!(
            health.readyz(true).1.contains("ping"),
            "{}",
            health.readyz(true).1
        );
        api.set_down(false);
        sleep(Duration::from_secs(5)).await;
        assert!(
            !health.is_ready(),
            "the controller's caches have not synced"
        );
        assert!(
            health
                .readyz(true)
                .1
                .contains("caches not synced yet: good"),
            "{}",
            health.readyz(true).1
        );
        sleep(Duration::from_secs(30)).await;
        assert!(health.is_ready(), "{}", health.readyz(true).1);
        let _ = stop_tx.send(());
        assert!(run.await.expect("host task").is_ok());
        assert_eq!(seen.recv().await, Some(Seen::Stopping));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_a_controller_at_most_the_shutdown_timeout() {
        let api = FakeApi::new();
        let h = host(&api, config(false));
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        let stubborn = ControllerDescriptor {
            info: info("stubborn"),
            run: Box::new(move |_ctx| {
                Box::pin(async move {
                    let _guard = DropFlag(flag);
                    // Ignores the shutdown token.
                    std::future::pending::<()>().await;
                    Ok(())
                })
            }),
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let run = tokio::spawn(h.run(admin().await, vec![stubborn], async {
            let _ = stop_rx.await;
        }));
        sleep(Duration::from_secs(1)).await;
        let asked = Instant::now();
        let _ = stop_tx.send(());
        assert!(run.await.expect("host task").is_ok(), "a shutdown is clean");
        let waited = asked.elapsed();
        assert!(
            waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
            "the host waits the shutdown timeout (5s of paused time), then returns; waited {waited:?}"
        );
        sleep(Duration::from_millis(1)).await;
        assert!(
            dropped.load(Ordering::SeqCst),
            "the stubborn controller was abandoned"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_controller_that_fails_stops_the_host_with_its_error() {
        let api = FakeApi::new();
        let h = host(&api, config(false));
        let failing = ControllerDescriptor {
            info: info("failing"),
            run: Box::new(|_ctx| {
                Box::pin(async {
                    sleep(Duration::from_secs(3)).await;
                    Err(ControllerError::new("failing", "cannot watch"))
                })
            }),
        };
        let err = h
            .run(admin().await, vec![failing], std::future::pending())
            .await
            .expect_err("a failed controller is fatal");
        assert_eq!(err.to_string(), "controller failing: cannot watch");
    }

    fn now_micro() -> serde_json::Value {
        serde_json::to_value(MicroTime(Timestamp::now())).unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_is_ready_and_runs_nothing_while_another_replica_leads() {
        let api = FakeApi::new();
        // Another replica holds a fresh Lease (kube-lease-manager reads
        // expiry from the wall clock, which paused time does not move).
        let client = api.client();
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(client, NS);
        let mut lease = k8s_openapi::api::coordination::v1::Lease::default();
        lease.metadata.name = Some(LEASE.into());
        leases
            .create(&Default::default(), &lease)
            .await
            .expect("seed the lease");
        api.patch_lease(
            NS,
            LEASE,
            serde_json::json!({"holderIdentity": "other", "renewTime": now_micro(),
                               "acquireTime": now_micro(), "leaseDurationSeconds": 3600}),
        );
        let h = host(&api, config(true));
        let health = h.health();
        let (seen_tx, mut seen) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let run = tokio::spawn(h.run(
            admin().await,
            vec![well_behaved(Duration::ZERO, seen_tx)],
            async {
                let _ = stop_rx.await;
            },
        ));
        sleep(Duration::from_secs(60)).await;
        assert!(seen.try_recv().is_err(), "no controller runs on a standby");
        assert!(health.is_ready(), "{}", health.readyz(true).1);
        let _ = stop_tx.send(());
        assert!(run.await.expect("host task").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn leading_runs_the_controllers_and_losing_the_lease_stops_them_with_an_error() {
        let api = FakeApi::new();
        let h = host(&api, config(true));
        let health = h.health();
        let (seen_tx, mut seen) = mpsc::unbounded_channel();
        let run = tokio::spawn(h.run(
            admin().await,
            vec![well_behaved(Duration::from_secs(1), seen_tx)],
            std::future::pending(),
        ));
        assert_eq!(seen.recv().await, Some(Seen::Started), "gained the lease");
        let holder = api
            .lease(NS, LEASE)
            .and_then(|l| l.pointer("/spec/holderIdentity").cloned());
        assert_eq!(holder, Some(serde_json::json!("me")));
        sleep(Duration::from_secs(3)).await;
        assert!(health.is_ready(), "{}", health.readyz(true).1);
        // Another replica takes the Lease over.
        api.patch_lease(
            NS,
            LEASE,
            serde_json::json!({"holderIdentity": "other", "renewTime": now_micro()}),
        );
        let err = run
            .await
            .expect("host task")
            .expect_err("losing the lease is fatal");
        assert!(err.to_string().starts_with("leaderelection lost:"), "{err}");
        assert_eq!(seen.recv().await, Some(Seen::Stopping));
        assert!(!health.is_ready(), "{}", health.readyz(true).1);
    }
}

//! Runs the invariants continuously: the observer's reports go through the
//! [`Timeline`] into the [`Checker`]; cloud-sim's inventory is swept after
//! every Service deletion and every second; time-based checks run on every
//! tick. [`Monitor::finish`] drains what is left and runs the final checks.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cloud::Cloud;
use crate::error::{Error, KubeContext, Result};
use crate::harness::Harness;
use crate::invariants::{Checker, CheckerConfig, Counts, Kill, Move, Violation};
use crate::objects::RUN_LABEL;
use crate::observer::{Kind, LeaseSummary, Observer, ObserverConfig, Report, Timeline};

/// How often the inventory is swept without a Service deletion.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

struct Shared {
    checker: Checker,
    timeline: Timeline,
    sweep_errors: u64,
}

impl Shared {
    /// Applies the events every watch has moved past, then the time-based
    /// checks as of the instant the checker's view is complete
    /// ([`Timeline::complete_until`]), not `now`: an object whose `DELETED`
    /// event waits in the buffer for an idle watch's BOOKMARK is gone, not
    /// overdue.
    fn advance(&mut self, now: Instant, now_wall: jiff::Timestamp) {
        let sync_rv = self.timeline.sync_rv();
        for ev in &self.timeline.ready() {
            self.checker.apply(ev, sync_rv);
        }
        let until = self.timeline.complete_until(now);
        self.checker.check_time(until, now_wall);
    }
}

/// The invariants, checked while a scenario runs.
pub struct Monitor {
    shared: Arc<Mutex<Shared>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    observer: Observer,
    cloud: Arc<Cloud>,
    client: kube::Client,
    namespaces: Vec<String>,
}

/// What to monitor.
#[derive(Debug, Clone)]
pub struct MonitorSettings {
    /// The namespaces of the user's objects.
    pub namespaces: Vec<String>,
    /// The leader Lease `(namespace, name)`, for the leadership invariant.
    pub lease: Option<(String, String)>,
    /// The chart's leader election timings.
    pub lease_duration: Duration,
    pub retry_period: Duration,
    /// Claims and volumes get their finalizer at creation (see
    /// [`CheckerConfig::strict`]).
    pub strict: bool,
    /// Watch the run's VolumeAttributesClasses and check that none is freed
    /// while a claim or volume refers to it (the cluster must serve
    /// storage.k8s.io/v1 VolumeAttributesClass).
    pub classes: bool,
    /// Watch the run's Secrets and check that none under the chart's
    /// `secrets-used-by-pods` ProtectionRule is freed while an unfinished
    /// pod refers to it (the rule must be installed).
    pub secrets: bool,
    /// Watch every ServiceCIDR and the allocator's IPAddresses and check
    /// that none of the run's ServiceCIDRs is freed while it is the only
    /// range of an allocated address (the cluster must serve
    /// networking.k8s.io/v1 ServiceCIDR and IPAddress).
    pub service_cidrs: bool,
}

impl MonitorSettings {
    /// The user's namespaces, no Lease, the chart's default timings, the
    /// project profile.
    pub fn namespaces(namespaces: &[String]) -> MonitorSettings {
        MonitorSettings {
            namespaces: namespaces.to_vec(),
            lease: None,
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
            strict: false,
            classes: false,
            secrets: false,
            service_cidrs: false,
        }
    }
}

/// What a monitored run checked.
#[derive(Debug, Clone)]
pub struct MonitorReport {
    pub counts: Counts,
    pub violations: Vec<Violation>,
    pub moves: Vec<Move>,
    pub gaps: u64,
    pub tolerance: Duration,
}

impl MonitorReport {
    /// `Err` with every violation and its evidence, or `Ok`.
    pub fn ok(&self) -> Result<()> {
        if self.violations.is_empty() {
            return Ok(());
        }
        Err(Error::Invariant(
            self.violations
                .iter()
                .map(|v| format!("- {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
        ))
    }
}

impl Monitor {
    /// Starts watching the run's objects (label [`RUN_LABEL`]) and, when
    /// given, the leader Lease; returns once every watch has listed.
    pub async fn start(h: &Harness, settings: MonitorSettings) -> Result<Monitor> {
        let MonitorSettings {
            namespaces,
            lease,
            lease_duration,
            retry_period,
            strict,
            classes,
            secrets,
            service_cidrs,
        } = settings;
        let cfg = ObserverConfig {
            selector: format!("{RUN_LABEL}={}", h.run),
            lease,
            watch_timeout: Duration::from_secs(if h.is_sim() { 30 } else { 20 }),
            classes,
            secrets,
            service_cidrs,
        };
        let (observer, rx, kinds) = Observer::start(h.observer_client.clone(), cfg);
        let checker = Checker::new(CheckerConfig {
            lease_duration,
            retry_period,
            namespaces: namespaces.iter().cloned().collect(),
            run: h.run.clone(),
            strict,
        });
        let shared = Arc::new(Mutex::new(Shared {
            checker,
            timeline: Timeline::new(&kinds),
            sweep_errors: 0,
        }));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(shared.clone(), rx, h.cloud.clone(), stop.clone()));
        let m = Monitor {
            shared,
            stop,
            task,
            observer,
            cloud: h.cloud.clone(),
            client: h.client.clone(),
            namespaces,
        };
        crate::wait::until_true(
            "the observer's watches have listed",
            h.timeout(Duration::from_secs(60)),
            || async { Ok(m.shared.lock().timeline.is_synced()) },
            || async { String::new() },
        )
        .await?;
        Ok(m)
    }

    pub fn record_kill(&self, kill: Kill) {
        self.shared.lock().checker.record_kill(kill);
    }

    /// Faults have stopped: the convergence clock starts now.
    pub fn set_calm(&self) {
        self.shared.lock().checker.set_calm(Instant::now());
    }

    pub fn counts(&self) -> Counts {
        self.shared.lock().checker.counts().clone()
    }

    pub fn violations(&self) -> Vec<Violation> {
        self.shared.lock().checker.violations().to_vec()
    }

    /// The latest Lease state seen.
    pub fn lease(&self) -> Option<LeaseSummary> {
        self.shared.lock().checker.lease().cloned()
    }

    /// Objects whose deletion was requested and that still exist.
    pub fn pending(&self) -> Vec<(Kind, String, bool, Vec<String>)> {
        self.shared.lock().checker.pending()
    }

    /// The resourceVersion up to which events were checked.
    pub fn watermark(&self) -> u64 {
        self.shared.lock().timeline.watermark()
    }

    /// Stops the watches, applies what is still buffered, and runs the
    /// final checks: every load balancer of the run's namespaces belongs to
    /// a live Service; kills without a new holder past the bound fail.
    pub async fn finish(self) -> Result<MonitorReport> {
        // Let the watches catch up with the last writes: wait until the
        // merged order has passed the current resourceVersion.
        let current = current_rv(&self.client).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.watermark() < current && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.stop.cancel();
        let _ = self.task.await;
        self.observer.stop().await;
        let lbs = self.cloud.load_balancers().await?;
        let mut live = HashSet::new();
        for ns in &self.namespaces {
            let list = Api::<Service>::namespaced(self.client.clone(), ns)
                .list(&ListParams::default())
                .await
                .ctx(|| format!("listing services in {ns}"))?;
            live.extend(list.items.iter().filter_map(|s| s.uid()));
        }
        let mut s = self.shared.lock();
        let sync_rv = s.timeline.sync_rv();
        let rest = s.timeline.drain_all();
        for ev in &rest {
            s.checker.apply(ev, sync_rv);
        }
        s.checker.final_cloud_check(&lbs, &live);
        s.checker.check_time(Instant::now(), jiff::Timestamp::now());
        s.checker.check_leadership(jiff::Timestamp::now(), true);
        if s.sweep_errors > 0 {
            tracing::warn!(
                errors = s.sweep_errors,
                "cloud-sim inventory sweeps that failed"
            );
        }
        Ok(MonitorReport {
            counts: s.checker.counts().clone(),
            violations: s.checker.violations().to_vec(),
            moves: s.checker.moves().to_vec(),
            gaps: s.timeline.gaps,
            tolerance: s.checker.tolerance(),
        })
    }
}

/// The API server's current resourceVersion (a cheap list).
async fn current_rv(client: &kube::Client) -> Result<u64> {
    let l = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
        .ctx(|| "reading the current resourceVersion".into())?;
    Ok(l.metadata
        .resource_version
        .and_then(|s| s.parse().ok())
        .unwrap_or(0))
}

async fn run(
    shared: Arc<Mutex<Shared>>,
    mut rx: mpsc::UnboundedReceiver<Report>,
    cloud: Arc<Cloud>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut last_sweep = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => {
                // Keep what is in the channel for finish().
                while let Ok(r) = rx.try_recv() {
                    shared.lock().timeline.push(r);
                }
                return;
            }
            r = rx.recv() => {
                let Some(r) = r else { return };
                let mut s = shared.lock();
                s.timeline.push(r);
                while let Ok(r) = rx.try_recv() {
                    s.timeline.push(r);
                }
            }
            _ = tick.tick() => {}
        }
        let wants_sweep = {
            let mut s = shared.lock();
            s.advance(Instant::now(), jiff::Timestamp::now());
            s.checker.wants_sweep() || last_sweep.elapsed() >= SWEEP_EVERY
        };
        if wants_sweep {
            last_sweep = Instant::now();
            match cloud.load_balancers().await {
                Ok(lbs) => shared.lock().checker.sweep_cloud(&lbs),
                Err(e) => {
                    tracing::warn!(error = %e, "cloud-sim inventory sweep failed");
                    shared.lock().sweep_errors += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::Invariant;
    use crate::observer::{
        Change, IP_ALLOCATOR, IpAddressSummary, Observed, ServiceCidrSummary, Summary,
    };

    fn shared() -> Shared {
        let mut s = Shared {
            checker: Checker::new(CheckerConfig {
                lease_duration: Duration::from_secs(15),
                retry_period: Duration::from_secs(2),
                namespaces: ["ns".to_string()].into_iter().collect(),
                run: "run".into(),
                strict: false,
            }),
            timeline: Timeline::new(&[Kind::ServiceCidr, Kind::IpAddress]),
            sweep_errors: 0,
        };
        for kind in [Kind::ServiceCidr, Kind::IpAddress] {
            s.timeline.push(Report::Synced { kind, rv: 1 });
        }
        s
    }

    /// Range `a` deleted (still held) at `rv`, seen at `t0`, which is calm;
    /// both watches are at `rv`.
    fn deleted_at_calm(s: &mut Shared, rv: u64, t0: Instant) {
        s.timeline
            .push(event(rv, Change::Modified, range(rv, true), t0));
        s.timeline.push(Report::Progress {
            kind: Kind::IpAddress,
            rv,
        });
        s.checker.set_calm(t0);
        s.advance(t0, jiff::Timestamp::now());
    }

    fn range(rv: u64, deleting: bool) -> Summary {
        Summary::ServiceCidr(ServiceCidrSummary {
            name: "a".into(),
            uid: "uid-a".into(),
            rv,
            finalizers: vec!["protection-manager.io/service-cidr-protection".into()],
            deleting,
            cidrs: vec!["10.200.0.0/24".into()],
            run: "run".into(),
        })
    }

    fn event(rv: u64, change: Change, obj: Summary, seen: Instant) -> Report {
        Report::Event(Box::new(Observed {
            rv,
            change,
            obj,
            seen,
            seen_wall: jiff::Timestamp::now(),
        }))
    }

    /// The real-cluster chaos run of seed 20261126: a ServiceCIDR deleted
    /// at the end of the cleanup, released by the manager after upstream's
    /// 10 s grace, was reported overdue 30 s after calm because its
    /// `DELETED` event waited for the BOOKMARK of the idle IPAddress watch.
    #[test]
    fn an_object_whose_deleted_event_waits_for_an_idle_watch_is_not_overdue() {
        let mut s = shared();
        let t0 = Instant::now();
        // The range's address is freed, then the range is deleted: free
        // and pending from t0, after calm.
        let address = Summary::IpAddress(IpAddressSummary {
            name: "10.200.0.5".into(),
            uid: "uid-ip".into(),
            rv: 2,
            managed_by: IP_ALLOCATOR.into(),
            parent: "services ns/s".into(),
        });
        s.timeline
            .push(event(2, Change::Added, address.clone(), t0));
        s.timeline.push(event(3, Change::Deleted, address, t0));
        deleted_at_calm(&mut s, 4, t0);
        assert_eq!(
            s.checker.pending().len(),
            1,
            "the range waits for its release"
        );
        // Released 10 s later; the IPAddress watch stays idle, so the
        // DELETED event waits in the buffer past the bound.
        s.timeline.push(event(
            5,
            Change::Deleted,
            range(5, true),
            t0 + Duration::from_secs(10),
        ));
        s.advance(t0 + Duration::from_secs(31), jiff::Timestamp::now());
        assert!(
            s.checker.violations().is_empty(),
            "{:?}",
            s.checker.violations()
        );
        // The BOOKMARK comes: the range was gone within the bound.
        s.timeline.push(Report::Progress {
            kind: Kind::IpAddress,
            rv: 6,
        });
        s.advance(t0 + Duration::from_secs(32), jiff::Timestamp::now());
        assert!(
            s.checker.violations().is_empty(),
            "{:?}",
            s.checker.violations()
        );
        assert!(s.checker.pending().is_empty());
        assert_eq!(s.checker.counts().converged_after_calm, 1);
    }

    #[test]
    fn an_object_left_with_its_finalizer_is_still_overdue_once_the_view_is_complete() {
        let mut s = shared();
        let t0 = Instant::now();
        deleted_at_calm(&mut s, 2, t0);
        // Nothing waits in the buffer: the bound counts to now.
        s.advance(t0 + Duration::from_secs(31), jiff::Timestamp::now());
        assert_eq!(
            s.checker.violations().len(),
            1,
            "{:?}",
            s.checker.violations()
        );
        assert_eq!(
            s.checker.violations()[0].invariant,
            Invariant::FinalizerNotRemoved
        );
    }
}

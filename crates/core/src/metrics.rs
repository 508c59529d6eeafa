//! One Prometheus registry for the process; every name is prefixed
//! `protection_manager_`.
//!
//! Per controller: reconciles by result, reconcile duration, finalizers added
//! and removed, cleanup duration (deletionTimestamp → finalizer removed), and
//! the number of objects Terminating with our finalizer plus the age of the
//! oldest one (the "stuck Terminating" alert of the finalizer-pattern
//! literature: alert when the oldest age keeps growing).
//!
//! Process-wide: on Linux, the process's CPU, memory and
//! file descriptors (`protection_manager_process_*`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::featuregate::FeatureGates;

const PREFIX: &str = "protection_manager";

/// Errors registering metrics (only a programming error can cause them).
#[derive(Debug, thiserror::Error)]
#[error("registering metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

/// The process-wide metrics.
pub struct Metrics {
    registry: Registry,
    reconciles: IntCounterVec,
    reconcile_duration: HistogramVec,
    finalizers_added: IntCounterVec,
    finalizers_removed: IntCounterVec,
    events_dropped: IntCounterVec,
    cleanup_duration: HistogramVec,
    terminating_objects: IntGaugeVec,
    terminating_oldest: IntGaugeVec,
    live_lists: IntCounterVec,
    live_list_batch: HistogramVec,
    indexed_users: IntGaugeVec,
    controller_ready: IntGaugeVec,
    leader: IntGauge,
    build_info: IntGaugeVec,
    feature_enabled: IntGaugeVec,
    trackers: Mutex<HashMap<String, Arc<TerminatingTracker>>>,
    /// Where `/metrics` is served when not on the plain admin server (the
    /// secure metrics server's URL), for the admin server's 404.
    served_elsewhere: Mutex<Option<String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Result<Arc<Metrics>, MetricsError> {
        let registry = Registry::new();
        let reconciles = IntCounterVec::new(
            Opts::new(
                "reconcile_total",
                "Reconciles by controller and result (success, error).",
            )
            .namespace(PREFIX),
            &["controller", "result"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new("reconcile_duration_seconds", "Time spent in one reconcile.")
                .namespace(PREFIX)
                .buckets(vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ]),
            &["controller"],
        )?;
        let finalizers_added = IntCounterVec::new(
            Opts::new("finalizers_added_total", "Finalizers added, by controller.")
                .namespace(PREFIX),
            &["controller"],
        )?;
        let finalizers_removed = IntCounterVec::new(
            Opts::new(
                "finalizers_removed_total",
                "Finalizers removed, by controller.",
            )
            .namespace(PREFIX),
            &["controller"],
        )?;
        let events_dropped = IntCounterVec::new(
            Opts::new(
                "events_dropped_total",
                "Events not written, by controller and why: queue_full (the event queue was full: Events are shed so they never delay a finalizer write) or error (the API server refused the write).",
            )
            .namespace(PREFIX),
            &["controller", "reason"],
        )?;
        let cleanup_duration = HistogramVec::new(
            HistogramOpts::new(
                "cleanup_duration_seconds",
                "Time from an object's deletionTimestamp to the removal of our finalizer.",
            )
            .namespace(PREFIX)
            .buckets(prometheus::exponential_buckets(0.1, 2.0, 16)?),
            &["controller"],
        )?;
        let terminating_objects = IntGaugeVec::new(
            Opts::new(
                "terminating_objects",
                "Objects being deleted that still carry this controller's finalizer.",
            )
            .namespace(PREFIX),
            &["controller"],
        )?;
        let terminating_oldest = IntGaugeVec::new(
            Opts::new(
                "terminating_oldest_age_seconds",
                "Age of the oldest object being deleted that still carries this controller's finalizer (0 if none).",
            )
            .namespace(PREFIX),
            &["controller"],
        )?;
        let controller_ready = IntGaugeVec::new(
            Opts::new(
                "controller_ready",
                "1 once a controller's caches have synced.",
            )
            .namespace(PREFIX),
            &["controller"],
        )?;
        let leader = IntGauge::with_opts(
            Opts::new(
                "leader",
                "1 while this replica holds the leader lease (or runs without election).",
            )
            .namespace(PREFIX),
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new("build_info", "Binary and emulated release of this process.")
                .namespace(PREFIX),
            &["version", "emulated_version"],
        )?;
        let feature_enabled = IntGaugeVec::new(
            Opts::new(
                "feature_enabled",
                "1 if a feature gate is on (kubernetes_feature_enabled).",
            )
            .namespace(PREFIX),
            &["name", "stage"],
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(finalizers_added.clone()))?;
        registry.register(Box::new(finalizers_removed.clone()))?;
        registry.register(Box::new(events_dropped.clone()))?;
        registry.register(Box::new(cleanup_duration.clone()))?;
        registry.register(Box::new(terminating_objects.clone()))?;
        registry.register(Box::new(terminating_oldest.clone()))?;
        let live_lists = IntCounterVec::new(
            Opts::new(
                "live_lists_total",
                "Live LIST rounds an in-use controller made to confirm that objects are unused before removing its finalizer (one round per scope: a namespace, or the cluster).",
            )
            .namespace(PREFIX),
            &["controller"],
        )?;
        let live_list_batch = HistogramVec::new(
            HistogramOpts::new(
                "live_list_batch_size",
                "Objects an in-use controller confirmed with one live LIST round.",
            )
            .namespace(PREFIX)
            .buckets(vec![
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
            ]),
            &["controller"],
        )?;
        let indexed_users = IntGaugeVec::new(
            Opts::new(
                "indexed_users",
                "Users in an in-use controller's index (objects that refer to at least one protected object).",
            )
            .namespace(PREFIX),
            &["controller"],
        )?;
        registry.register(Box::new(live_lists.clone()))?;
        registry.register(Box::new(live_list_batch.clone()))?;
        registry.register(Box::new(indexed_users.clone()))?;
        registry.register(Box::new(controller_ready.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(build_info.clone()))?;
        registry.register(Box::new(feature_enabled.clone()))?;
        #[cfg(target_os = "linux")]
        if let Ok(pid) = prometheus::process_collector::pid_t::try_from(std::process::id()) {
            registry.register(Box::new(
                prometheus::process_collector::ProcessCollector::new(pid, PREFIX),
            ))?;
        }
        Ok(Arc::new(Metrics {
            registry,
            reconciles,
            reconcile_duration,
            finalizers_added,
            finalizers_removed,
            events_dropped,
            cleanup_duration,
            terminating_objects,
            terminating_oldest,
            live_lists,
            live_list_batch,
            indexed_users,
            controller_ready,
            leader,
            build_info,
            feature_enabled,
            trackers: Mutex::new(HashMap::new()),
            served_elsewhere: Mutex::new(None),
        }))
    }

    /// The registry, for crates that add their own `protection_manager_*`
    /// metrics (e.g. provider call latency).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Declares that `/metrics` is served at `url` (the secure metrics
    /// server), so the plain admin server stops exposing it.
    pub fn set_served_elsewhere(&self, url: String) {
        *self.served_elsewhere.lock() = Some(url);
    }

    /// Where `/metrics` is served if not on the admin server.
    pub fn served_elsewhere(&self) -> Option<String> {
        self.served_elsewhere.lock().clone()
    }

    /// The handle a controller records through.
    pub fn controller(self: &Arc<Self>, name: &str) -> ControllerMetrics {
        let tracker = self
            .trackers
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(TerminatingTracker::default()))
            .clone();
        // Make the series visible at 0 from the start.
        for result in ["success", "error"] {
            self.reconciles.with_label_values(&[name, result]);
        }
        self.finalizers_added.with_label_values(&[name]);
        self.finalizers_removed.with_label_values(&[name]);
        for reason in ["queue_full", "error"] {
            self.events_dropped.with_label_values(&[name, reason]);
        }
        self.reconcile_duration.with_label_values(&[name]);
        self.cleanup_duration.with_label_values(&[name]);
        self.controller_ready.with_label_values(&[name]).set(0);
        ControllerMetrics {
            name: name.to_string(),
            metrics: self.clone(),
            tracker,
        }
    }

    /// One Event of `controller` was not written, for `reason`
    /// (`queue_full` or `error`).
    pub fn event_dropped(&self, controller: &str, reason: &str) {
        self.events_dropped
            .with_label_values(&[controller, reason])
            .inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Publishes build info and every gate's state.
    pub fn set_build_info(&self, version: &str, gates: &FeatureGates) {
        self.build_info
            .with_label_values(&[version, &gates.emulated_version().to_string()])
            .set(1);
        for row in gates.table() {
            self.feature_enabled
                .with_label_values(&[&row.name, row.stage.as_str()])
                .set(i64::from(row.enabled));
        }
    }

    /// Prometheus text exposition, with Terminating gauges refreshed.
    pub fn encode(&self) -> Result<String, MetricsError> {
        self.refresh_terminating(Timestamp::now());
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    fn refresh_terminating(&self, now: Timestamp) {
        let trackers: Vec<(String, Arc<TerminatingTracker>)> = self
            .trackers
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (name, t) in trackers {
            let (count, oldest) = t.snapshot(now);
            self.terminating_objects
                .with_label_values(&[&name])
                .set(count as i64);
            self.terminating_oldest
                .with_label_values(&[&name])
                .set(oldest.map_or(0, |d| d.as_secs() as i64));
        }
    }
}

/// Objects Terminating with a controller's finalizer: key → deletionTimestamp.
#[derive(Debug, Default)]
pub struct TerminatingTracker {
    since: Mutex<HashMap<String, Timestamp>>,
}

impl TerminatingTracker {
    /// Count and age of the oldest at `now`.
    pub fn snapshot(&self, now: Timestamp) -> (usize, Option<Duration>) {
        let m = self.since.lock();
        let oldest = m
            .values()
            .min()
            .map(|ts| Duration::try_from(now.duration_since(*ts)).unwrap_or(Duration::ZERO));
        (m.len(), oldest)
    }
}

/// A controller's view of the metrics (cheap to clone).
#[derive(Clone)]
pub struct ControllerMetrics {
    name: String,
    metrics: Arc<Metrics>,
    tracker: Arc<TerminatingTracker>,
}

impl std::fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerMetrics")
            .field("controller", &self.name)
            .finish()
    }
}

impl ControllerMetrics {
    pub fn controller(&self) -> &str {
        &self.name
    }

    /// Starts timing a reconcile; call [`ReconcileTimer::finish`].
    pub fn reconcile_started(&self) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self.clone(),
            start: Instant::now(),
        }
    }

    pub fn finalizer_added(&self) {
        self.metrics
            .finalizers_added
            .with_label_values(&[&self.name])
            .inc();
    }

    pub fn finalizer_removed(&self) {
        self.metrics
            .finalizers_removed
            .with_label_values(&[&self.name])
            .inc();
    }

    /// Records the time from `deletion_timestamp` to now as a cleanup duration.
    pub fn observe_cleanup_since(&self, deletion_timestamp: Timestamp) {
        let secs = Timestamp::now()
            .duration_since(deletion_timestamp)
            .as_secs_f64()
            .max(0.0);
        self.metrics
            .cleanup_duration
            .with_label_values(&[&self.name])
            .observe(secs);
    }

    /// Tracks `key` as Terminating with our finalizer since `since`, or stops
    /// tracking it (`None`: finalizer gone, object gone, or not deleting).
    pub fn set_terminating(&self, key: &str, since: Option<Timestamp>) {
        let mut m = self.tracker.since.lock();
        match since {
            Some(ts) => {
                m.insert(key.to_string(), ts);
            }
            None => {
                m.remove(key);
            }
        }
    }

    /// Replaces the whole Terminating set (after a re-list).
    pub fn reset_terminating(&self, items: impl IntoIterator<Item = (String, Timestamp)>) {
        *self.tracker.since.lock() = items.into_iter().collect();
    }

    /// Count and oldest age right now.
    pub fn terminating_snapshot(&self) -> (usize, Option<Duration>) {
        self.tracker.snapshot(Timestamp::now())
    }

    /// An in-use controller starts one live LIST round for `batch` objects.
    pub fn live_list(&self, batch: usize) {
        self.metrics
            .live_lists
            .with_label_values(&[&self.name])
            .inc();
        self.metrics
            .live_list_batch
            .with_label_values(&[&self.name])
            .observe(batch as f64);
    }

    /// The number of users in an in-use controller's index.
    pub fn set_indexed_users(&self, n: usize) {
        self.metrics
            .indexed_users
            .with_label_values(&[&self.name])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn set_ready(&self, ready: bool) {
        self.metrics
            .controller_ready
            .with_label_values(&[&self.name])
            .set(i64::from(ready));
    }

    /// The shared registry (to register controller-specific metrics).
    pub fn registry(&self) -> &Registry {
        self.metrics.registry()
    }
}

/// Times one reconcile.
#[must_use = "call finish() with the reconcile's result"]
pub struct ReconcileTimer {
    metrics: ControllerMetrics,
    start: Instant,
}

impl ReconcileTimer {
    pub fn finish(self, ok: bool) {
        let m = &self.metrics;
        let result = if ok { "success" } else { "error" };
        m.metrics
            .reconciles
            .with_label_values(&[&m.name, result])
            .inc();
        m.metrics
            .reconcile_duration
            .with_label_values(&[&m.name])
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    #[test]
    fn exposition_has_every_family_with_the_prefix() {
        let m = Metrics::new().unwrap();
        let c = m.controller("pvc-protection");
        c.reconcile_started().finish(true);
        c.reconcile_started().finish(false);
        c.finalizer_added();
        c.finalizer_removed();
        c.observe_cleanup_since(Timestamp::now() - SignedDuration::from_secs(3));
        m.set_leader(true);
        m.set_build_info(
            "0.3",
            &crate::release::gates_at(
                crate::release::BINARY_VERSION,
                &[crate::release::GateDecl {
                    name: "ServiceLoadBalancerFinalizer",
                    history: crate::release::PHASED_ADD,
                }],
            )
            .unwrap(),
        );
        let text = m.encode().unwrap();
        for needle in [
            "protection_manager_reconcile_total{controller=\"pvc-protection\",result=\"success\"} 1",
            "protection_manager_reconcile_total{controller=\"pvc-protection\",result=\"error\"} 1",
            "protection_manager_reconcile_duration_seconds_count{controller=\"pvc-protection\"} 2",
            "protection_manager_finalizers_added_total{controller=\"pvc-protection\"} 1",
            "protection_manager_finalizers_removed_total{controller=\"pvc-protection\"} 1",
            "protection_manager_cleanup_duration_seconds_count{controller=\"pvc-protection\"} 1",
            "protection_manager_terminating_objects{controller=\"pvc-protection\"} 0",
            "protection_manager_terminating_oldest_age_seconds{controller=\"pvc-protection\"} 0",
            "protection_manager_leader 1",
            "protection_manager_build_info{emulated_version=\"0.4\",version=\"0.3\"} 1",
            "protection_manager_feature_enabled{name=\"ServiceLoadBalancerFinalizer\",stage=\"GA\"} 1",
            "# TYPE protection_manager_process_resident_memory_bytes gauge",
            "# TYPE protection_manager_process_cpu_seconds_total counter",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }

    #[test]
    fn a_controller_s_series_exist_before_its_first_reconcile() {
        // Dashboards and alerts see 0, not "no data", on a fresh leader.
        let m = Metrics::new().unwrap();
        m.controller("pv-protection");
        let text = m.encode().unwrap();
        for needle in [
            "protection_manager_reconcile_duration_seconds_count{controller=\"pv-protection\"} 0",
            "protection_manager_cleanup_duration_seconds_count{controller=\"pv-protection\"} 0",
            "protection_manager_controller_ready{controller=\"pv-protection\"} 0",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }

    #[test]
    fn terminating_count_and_oldest_age() {
        let m = Metrics::new().unwrap();
        let c = m.controller("pv-protection");
        let now = Timestamp::now();
        c.set_terminating("a", Some(now - SignedDuration::from_secs(120)));
        c.set_terminating("b", Some(now - SignedDuration::from_secs(5)));
        let (n, oldest) = c.terminating_snapshot();
        assert_eq!(n, 2);
        assert!(oldest.unwrap() >= Duration::from_secs(120));
        let text = m.encode().unwrap();
        assert!(
            text.contains("protection_manager_terminating_objects{controller=\"pv-protection\"} 2")
        );
        c.set_terminating("a", None);
        let (n, oldest) = c.terminating_snapshot();
        assert_eq!(n, 1);
        assert!(oldest.unwrap() < Duration::from_secs(120));
        c.reset_terminating(Vec::new());
        assert_eq!(c.terminating_snapshot(), (0, None));
    }
}

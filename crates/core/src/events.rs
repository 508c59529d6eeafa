//! Kubernetes Events (events.k8s.io/v1) for the objects our controllers hold
//! or release, written off the controllers' path.
//!
//! A controller hands an Event to a bounded queue and goes on: the write of a
//! finalizer never waits for an Event. One worker per host drains the queue
//! through its own client (its own rate limit, `--event-qps`), so Events do
//! not spend the finalizer writes' budget either. When the queue is full the
//! Event is shed and counted in `protection_manager_events_dropped_total`
//! (`reason="queue_full"`); an Event the API server refuses is logged and
//! counted (`reason="error"`). Neither ever fails a reconcile. This is
//! client-go's broadcaster (a queue of 1,000, dropped when full), with the
//! separate budget upstream does not have (docs/upstream-semantics.md §9).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use crate::metrics::Metrics;

/// Events waiting to be written, at most (client-go's `maxQueuedEvents`).
pub const EVENT_QUEUE: usize = 1000;

/// One Event waiting in the queue.
struct Queued {
    controller: Arc<str>,
    reporter: Reporter,
    regarding: ObjectReference,
    event: Event,
}

/// The queue's sending side, shared by every recorder of a host. The worker
/// ends once every sink and recorder is dropped and the queue is drained.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::Sender<Queued>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").finish_non_exhaustive()
    }
}

impl EventSink {
    /// Starts the worker that writes queued Events with `client` (needs a
    /// tokio runtime). `metrics` counts what is dropped.
    pub fn start(client: kube::Client, capacity: usize, metrics: Option<Arc<Metrics>>) -> Self {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        tokio::spawn(write_events(client, rx, metrics.clone()));
        EventSink { tx, metrics }
    }

    /// A recorder for `controller` (`reportingController`
    /// `protection-manager/<controller>`) of replica `instance`.
    pub fn recorder(&self, controller: &str, instance: Option<String>) -> EventRecorder {
        EventRecorder {
            sink: self.clone(),
            reporter: Reporter {
                controller: format!("protection-manager/{controller}"),
                instance,
            },
            controller: Arc::from(controller),
        }
    }
}

/// Writes queued Events one at a time; one kube `Recorder` per reporter, so
/// repeats of an Event become an EventSeries (count and lastObservedTime)
/// instead of new objects.
async fn write_events(
    client: kube::Client,
    mut rx: mpsc::Receiver<Queued>,
    metrics: Option<Arc<Metrics>>,
) {
    let mut recorders: HashMap<(String, Option<String>), Recorder> = HashMap::new();
    while let Some(q) = rx.recv().await {
        let key = (q.reporter.controller.clone(), q.reporter.instance.clone());
        let recorder = recorders
            .entry(key)
            .or_insert_with(|| Recorder::new(client.clone(), q.reporter.clone()));
        if let Err(e) = recorder.publish(&q.event, &q.regarding).await {
            tracing::warn!(
                controller = %q.controller,
                reason = %q.event.reason,
                object = ?q.regarding.name,
                error = %e,
                "could not publish event"
            );
            if let Some(m) = &metrics {
                m.event_dropped(&q.controller, "error");
            }
        }
    }
}

/// A cheap-to-clone recorder bound to one reporting controller.
#[derive(Clone)]
pub struct EventRecorder {
    sink: EventSink,
    reporter: Reporter,
    controller: Arc<str>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder with a queue and worker of its own, writing with `client`
    /// (tests and single-controller tools; the host shares one
    /// [`EventSink`] between its controllers).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        EventSink::start(client, EVENT_QUEUE, None).recorder(controller, instance)
    }

    /// A `Normal` event on `regarding`.
    pub async fn normal(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish(regarding, EventType::Normal, reason, action, note.into());
    }

    /// A `Warning` event on `regarding`.
    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish(regarding, EventType::Warning, reason, action, note.into());
    }

    /// Queues the Event; never waits. A full queue sheds it (counted).
    fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        // The API limits a note to 1 kB.
        let note = truncate(note, 1024);
        let q = Queued {
            controller: self.controller.clone(),
            reporter: self.reporter.clone(),
            regarding: regarding.clone(),
            event: Event {
                type_,
                reason: reason.to_string(),
                note: Some(note),
                action: action.to_string(),
                secondary: None,
            },
        };
        match self.sink.tx.try_send(q) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(q)) => {
                tracing::debug!(
                    controller = %self.controller,
                    reason = %q.event.reason,
                    object = ?q.regarding.name,
                    "event queue full: event dropped"
                );
                if let Some(m) = &self.sink.metrics {
                    m.event_dropped(&self.controller, "queue_full");
                }
            }
            // The worker is gone: the host is shutting down.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max.saturating_sub(3);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// A compact view of an Event (core/v1 carries both APIs' fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventView {
    pub type_: String,
    pub reason: String,
    pub note: String,
    pub first: Option<Timestamp>,
    pub last: Option<Timestamp>,
    pub count: i32,
    pub source: String,
}

impl EventView {
    pub fn from_core(e: &CoreEvent) -> EventView {
        let first = e
            .first_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0));
        let last = e
            .series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
            .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
            .or(first);
        let count = e
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(e.count)
            .unwrap_or(1);
        EventView {
            type_: e.type_.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            note: e.message.clone().unwrap_or_default(),
            first,
            last,
            count,
            source: e
                .reporting_component
                .clone()
                .filter(|s| !s.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A client whose API server never answers.
    fn silent_client() -> kube::Client {
        let svc = tower::service_fn(|_req: http::Request<kube::client::Body>| {
            std::future::pending::<
                Result<
                    http::Response<http_body_util::Full<bytes::Bytes>>,
                    std::convert::Infallible,
                >,
            >()
        });
        kube::Client::new(svc, "default")
    }

    fn pod_ref(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_stuck_event_writer_never_blocks_a_controller_and_sheds_what_does_not_fit() {
        let metrics = Metrics::new().unwrap();
        metrics.controller("c");
        let sink = EventSink::start(silent_client(), 5, Some(metrics.clone()));
        let rec = sink.recorder("c", Some("me".into()));
        // The writer takes the first Event and hangs on it; 5 wait; the
        // rest are dropped, and the controller never waits.
        tokio::time::timeout(Duration::from_secs(5), async {
            for i in 0..20 {
                rec.normal(&pod_ref(&format!("p{i}")), "Held", "Hold", "note")
                    .await;
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("recording an Event never waits for the API server");
        let text = metrics.encode().unwrap();
        let dropped = text
            .lines()
            .find(|l| {
                l.starts_with("protection_manager_events_dropped_total")
                    && l.contains("reason=\"queue_full\"")
            })
            .unwrap_or_else(|| panic!("no dropped counter in:\n{text}"));
        let n: f64 = dropped.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((14.0..=15.0).contains(&n), "{dropped}");
    }

    #[test]
    fn notes_are_capped_on_a_char_boundary() {
        assert_eq!(truncate("short".into(), 1024), "short");
        let long = "é".repeat(600);
        let t = truncate(long, 1024);
        assert!(t.len() <= 1024 && t.ends_with("..."));
    }
}

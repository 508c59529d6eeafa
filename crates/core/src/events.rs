//! Kubernetes Events (events.k8s.io/v1) for the objects our controllers hold
//! or release. Publishing never fails a reconcile: an Event that cannot be
//! written is logged and dropped, as client-go's recorder does.

use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// A cheap-to-clone recorder bound to one reporting controller.
#[derive(Clone)]
pub struct EventRecorder {
    recorder: Recorder,
    controller: String,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// `controller` becomes `reportingController` (`protection-manager/<name>`,
    /// a qualified name as the API server requires); `instance` is the
    /// replica identity (pod name).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: format!("protection-manager/{controller}"),
            instance,
        };
        EventRecorder {
            recorder: Recorder::new(client, reporter),
            controller: controller.to_string(),
        }
    }

    /// A `Normal` event on `regarding`.
    pub async fn normal(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish(regarding, EventType::Normal, reason, action, note.into())
            .await;
    }

    /// A `Warning` event on `regarding`.
    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish(regarding, EventType::Warning, reason, action, note.into())
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        // The API limits a note to 1 kB.
        let note = truncate(note, 1024);
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, regarding).await {
            tracing::warn!(
                controller = %self.controller,
                reason,
                object = ?regarding.name,
                error = %e,
                "could not publish event"
            );
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
    use super::truncate;

    #[test]
    fn notes_are_capped_on_a_char_boundary() {
        assert_eq!(truncate("short".into(), 1024), "short");
        let long = "é".repeat(600);
        let t = truncate(long, 1024);
        assert!(t.len() <= 1024 && t.ends_with("..."));
    }
}

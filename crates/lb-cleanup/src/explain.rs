//! `explain` for service-lb-cleanup, on the controller's own rules: which
//! Services it cleans up ([`needs_cleanup`]), the ingress it wrote
//! ([`ingress_of`]), and what its events say about the cleanup (the event
//! reasons [`crate::sync`] emits).

use futures::FutureExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use protection_core::events::EventView;
use protection_core::explain::{
    ExplainError, ExplainKind, Explained, Hold, NameRule, age, events, get,
};

use crate::decide::ingress_of;
use crate::predicates::needs_cleanup;
use crate::sync::reasons;
use crate::{CONTROLLER_NAME, PROJECT_FINALIZER, UPSTREAM_FINALIZER};

/// The kind's title (events' involvedObject.kind).
const TITLE: &str = "Service";

/// The kind service-lb-cleanup explains.
pub const KIND: ExplainKind = ExplainKind {
    controller: CONTROLLER_NAME,
    group: "",
    title: TITLE,
    names: &["svc", "service", "services"],
    namespaced: true,
    name_rule: NameRule::Dns1035Label,
    explain: |client, ns, name| explain_live(client, ns.unwrap_or_default(), name).boxed(),
    explain_many: None,
};

/// What service-lb-cleanup says about one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// `spec.type` (`ClusterIP` when unset).
    pub type_: String,
    /// `spec.loadBalancerClass`.
    pub class: Option<String>,
    /// The ingress addresses (IP, else hostname).
    pub ingress: Vec<String>,
    /// Being deleted with our finalizer (either profile): what holds it.
    pub cleanup: Option<LbState>,
}

/// Explains `svc` from the Service and its events (oldest first).
pub fn explain(svc: &Service, events: &[EventView]) -> Explanation {
    let spec = svc.spec.clone().unwrap_or_default();
    let ingress = ingress_of(svc)
        .into_iter()
        .filter_map(|i| i.ip.or(i.hostname))
        .collect();
    let ours = [PROJECT_FINALIZER, UPSTREAM_FINALIZER]
        .iter()
        .any(|f| needs_cleanup(svc, f));
    let deleting = svc.metadata.deletion_timestamp.is_some();
    Explanation {
        type_: spec.type_.unwrap_or_else(|| "ClusterIP".into()),
        class: spec.load_balancer_class,
        ingress,
        cleanup: (ours && deleting).then(|| lb_state(events)),
    }
}

impl Explanation {
    /// The "Type:" line.
    pub fn fact(&self) -> String {
        format!(
            "Type:        {} (loadBalancerClass {}){}",
            self.type_,
            self.class.as_deref().unwrap_or("none"),
            if self.ingress.is_empty() {
                String::new()
            } else {
                format!(", ingress {}", self.ingress.join(", "))
            }
        )
    }

    /// Why service-lb-cleanup holds the Service, at `now`: only while it is
    /// being deleted (a Service not being deleted is not held).
    pub fn holds(&self, now: Timestamp) -> Vec<Hold> {
        let Some(st) = &self.cleanup else {
            return Vec::new();
        };
        let name = CONTROLLER_NAME;
        let why = match &st.failing {
            Some(f) => {
                let since = f
                    .since
                    .map(|s| {
                        let shown = s.round(k8s_openapi::jiff::Unit::Second).unwrap_or(s);
                        format!("since {shown} ({} ago)", age(s, now))
                    })
                    .unwrap_or_else(|| "for an unknown time".into());
                format!(
                    "held by {name}: deleting the load balancer is failing {since}, {} attempt(s); last error ({}): {}",
                    f.count, f.reason, f.note
                )
            }
            None if st.deleting_seen => format!(
                "held by {name}: the load balancer is being deleted; the finalizer goes once the provider confirms it is gone."
            ),
            None => format!(
                "held by {name}: waiting for the controller to delete the load balancer (no attempt reported yet: is a manager running, with this Service's loadBalancerClass?)."
            ),
        };
        vec![Hold {
            why,
            if_deleted: None,
        }]
    }
}

/// Explains Service `ns/name`, read live with its events.
pub async fn explain_live(
    client: kube::Client,
    ns: String,
    name: String,
) -> Result<Option<Explained>, ExplainError> {
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    let Some(svc) = get(&api, &name, format!("reading service {ns}/{name}")).await? else {
        return Ok(None);
    };
    let events = events(&client, TITLE, &svc.metadata).await;
    let e = explain(&svc, &events);
    Ok(Some(Explained {
        facts: vec![e.fact()],
        held: e.holds(Timestamp::now()),
        meta: svc.metadata,
    }))
}

/// What the events say about a Service's load balancer cleanup.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LbState {
    /// The last failure (reason, note), when the latest LB event is one.
    pub failing: Option<Failure>,
    /// Whether a DeletingLoadBalancer was ever reported.
    pub deleting_seen: bool,
}

/// The failure streak of the cleanup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub note: String,
    pub since: Option<Timestamp>,
    pub last: Option<Timestamp>,
    pub count: i32,
}

const LB_FAILURES: [&str; 2] = [
    reasons::DELETE_LOAD_BALANCER_FAILED,
    reasons::SYNC_LOAD_BALANCER_FAILED,
];

/// The controller's failure notes end in `(failing since T)`; explain prints the
/// streak's start itself, so the suffix would only repeat it.
fn without_failing_since(note: &str) -> &str {
    match note.rfind(" (failing since ") {
        Some(i) if note.ends_with(')') => &note[..i],
        _ => note,
    }
}

/// Reads the LB cleanup state from a Service's events (oldest first).
pub fn lb_state(events: &[EventView]) -> LbState {
    let lb_events: Vec<&EventView> = events
        .iter()
        .filter(|e| e.reason.contains("LoadBalancer"))
        .collect();
    let deleting_seen = lb_events
        .iter()
        .any(|e| e.reason == reasons::DELETING_LOAD_BALANCER);
    let latest = lb_events.iter().max_by_key(|e| e.last);
    let failing = latest
        .filter(|e| LB_FAILURES.contains(&e.reason.as_str()))
        .map(|e| {
            // The first failure of the current streak: the earliest failure event
            // not followed by a success.
            let since = lb_events
                .iter()
                .filter(|f| LB_FAILURES.contains(&f.reason.as_str()))
                .filter_map(|f| f.first)
                .min();
            Failure {
                reason: e.reason.clone(),
                note: without_failing_since(&e.note).to_owned(),
                since,
                last: e.last,
                count: lb_events
                    .iter()
                    .filter(|f| LB_FAILURES.contains(&f.reason.as_str()))
                    .map(|f| f.count.max(1))
                    .sum(),
            }
        });
    LbState {
        failing,
        deleting_seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: i64) -> Option<Timestamp> {
        Timestamp::from_second(1_800_000_000 + s).ok()
    }

    fn ev(reason: &str, first: i64, last: i64, count: i32) -> EventView {
        EventView {
            type_: if reason.ends_with("Failed") {
                "Warning"
            } else {
                "Normal"
            }
            .into(),
            reason: reason.into(),
            note: format!("note of {reason}"),
            first: ts(first),
            last: ts(last),
            count,
            source: "protection-manager/service-lb-cleanup".into(),
        }
    }

    #[test]
    fn lb_failure_streak_reports_first_time_and_last_error() {
        let events = vec![
            ev("EnsuredLoadBalancer", 0, 0, 1),
            ev("DeletingLoadBalancer", 100, 160, 3),
            ev("SyncLoadBalancerFailed", 101, 161, 3),
        ];
        let st = lb_state(&events);
        let f = st.failing.expect("failing");
        assert_eq!(f.reason, "SyncLoadBalancerFailed");
        assert_eq!(f.since, ts(101));
        assert_eq!(f.count, 3);
        assert!(st.deleting_seen);
        // A later success clears the failure.
        let mut ok = events.clone();
        ok.push(ev("DeletedLoadBalancer", 200, 200, 1));
        assert_eq!(lb_state(&ok).failing, None);
    }

    #[test]
    fn failure_note_drops_the_controllers_failing_since_suffix() {
        assert_eq!(
            without_failing_since(
                "Error syncing load balancer: 503 (failing since 2026-11-22T12:45:39Z)"
            ),
            "Error syncing load balancer: 503"
        );
        assert_eq!(without_failing_since("plain (note)"), "plain (note)");
    }

    fn lb(finalizer: Option<&str>, deleting: bool) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web", "namespace": "shop",
                "finalizers": finalizer.into_iter().collect::<Vec<_>>(),
            },
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "x.io/lb"},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example"}]}},
        }))
        .map(|mut s: Service| {
            if deleting {
                s.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            }
            s
        })
        .unwrap()
    }

    #[test]
    fn only_a_deleting_service_with_either_profiles_finalizer_is_held() {
        let events = [ev("DeletingLoadBalancer", 0, 0, 1)];
        let e = explain(&lb(Some(UPSTREAM_FINALIZER), true), &events);
        assert_eq!(e.type_, "LoadBalancer");
        assert_eq!(e.class.as_deref(), Some("x.io/lb"));
        assert_eq!(e.ingress, ["203.0.113.7", "lb.example"]);
        assert!(e.cleanup.expect("held").deleting_seen);
        assert!(
            explain(&lb(Some(PROJECT_FINALIZER), true), &events)
                .cleanup
                .is_some()
        );
        assert_eq!(
            explain(&lb(Some(PROJECT_FINALIZER), false), &events).cleanup,
            None
        );
        assert_eq!(
            explain(&lb(Some("example.com/other"), true), &events).cleanup,
            None
        );
        assert_eq!(explain(&lb(None, true), &events).cleanup, None);
    }

    #[test]
    fn a_failing_cleanup_says_since_when_and_the_last_error() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo", "deletionTimestamp": "2027-01-15T08:00:00Z",
                         "finalizers": [PROJECT_FINALIZER]},
            "spec": {"type": "LoadBalancer"},
        }))
        .unwrap();
        let events = vec![ev("DeleteLoadBalancerFailed", 0, 30, 2)];
        let e = explain(&svc, &events);
        assert_eq!(
            e.fact(),
            "Type:        LoadBalancer (loadBalancerClass none)"
        );
        let now = ts(95).unwrap();
        assert_eq!(
            e.holds(now),
            vec![Hold {
                why: format!(
                    "held by service-lb-cleanup: deleting the load balancer is failing since {} (95s ago), 2 attempt(s); last error (DeleteLoadBalancerFailed): note of DeleteLoadBalancerFailed",
                    ts(0).unwrap()
                ),
                if_deleted: None,
            }]
        );
        assert_eq!(
            explain(&svc, &[]).holds(now)[0].why,
            "held by service-lb-cleanup: waiting for the controller to delete the load balancer (no attempt reported yet: is a manager running, with this Service's loadBalancerClass?)."
        );
    }
}

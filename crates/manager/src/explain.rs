//! `protection-manager explain <kind>/<name> [-n ns]`: why is this object
//! Terminating (or: what would hold it)?
//!
//! The answer is computed from the same rules the controllers use (the
//! pvc-protection `podUsesPVC` rule over a live pod list, the PV `Bound`
//! rule, the load-balancer cleanup state machine's events), read live from the
//! API server, so it does not depend on the manager being up. It also says
//! when a finalizer is owned by someone else, and whether a manager currently
//! holds its leader lease.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::ListParams;
use protection_core::FinalizerProfile;
use pv_protection::index::{PodUse, Via, live_users};
use pv_protection::pod::PodFacts;

use crate::cli::ExplainArgs;
use crate::release_check::client;

/// The kinds `explain` understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pvc,
    Pv,
    Service,
}

impl Kind {
    fn parse(s: &str) -> Result<Kind> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "pvc" | "pvcs" | "persistentvolumeclaim" | "persistentvolumeclaims" => Kind::Pvc,
            "pv" | "pvs" | "persistentvolume" | "persistentvolumes" => Kind::Pv,
            "svc" | "service" | "services" => Kind::Service,
            other => bail!(
                "unknown kind {other:?}: explain understands pvc (persistentvolumeclaim), pv (persistentvolume) and svc (service)"
            ),
        })
    }

    fn title(self) -> &'static str {
        match self {
            Kind::Pvc => "PersistentVolumeClaim",
            Kind::Pv => "PersistentVolume",
            Kind::Service => "Service",
        }
    }
}

/// Splits `kind/name`.
pub fn parse_target(target: &str) -> Result<(Kind, String)> {
    let Some((kind, name)) = target.split_once('/') else {
        bail!("expected <kind>/<name>, e.g. pvc/data, pv/pv-1 or svc/web; got {target:?}");
    };
    if name.is_empty() || name.contains('/') {
        bail!("expected <kind>/<name>, e.g. pvc/data; got {target:?}");
    }
    Ok((Kind::parse(kind)?, name.to_string()))
}

/// Which controller owns a finalizer, if it is one of ours (either profile).
pub fn owner_of(finalizer: &str) -> Option<&'static str> {
    for profile in [FinalizerProfile::Project, FinalizerProfile::Upstream] {
        let (pv, pvc) = pv_protection::finalizer_names(profile);
        if finalizer == pv {
            return Some("pv-protection");
        }
        if finalizer == pvc {
            return Some("pvc-protection");
        }
        if finalizer == lb_cleanup::finalizer_name(profile) {
            return Some("service-lb-cleanup");
        }
    }
    None
}

/// What holds an object, in the order a user should read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// pvc-protection keeps the claim: these pods use it.
    PodsUseClaim(Vec<PodUse>),
    /// pv-protection keeps the volume: it is Bound (to this claim).
    VolumeBound { claim: Option<String> },
    /// service-lb-cleanup has not deleted the load balancer yet.
    LoadBalancer(LbState),
    /// Our finalizer is present and nothing holds the object: the controller
    /// should remove it on its next pass.
    Releasable { controller: &'static str },
    /// A finalizer protection-manager does not own.
    Foreign(String),
}

/// What the events say about a Service's load balancer cleanup.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LbState {
    /// The last failure (reason, note), when the latest LB event is one.
    pub failing: Option<Failure>,
    /// Whether a DeletingLoadBalancer was ever reported.
    pub deleting_seen: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub note: String,
    pub since: Option<Timestamp>,
    pub last: Option<Timestamp>,
    pub count: i32,
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
    fn from_core(e: &Event) -> EventView {
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

const LB_FAILURES: [&str; 2] = [
    lb_cleanup::sync::reasons::DELETE_LOAD_BALANCER_FAILED,
    lb_cleanup::sync::reasons::SYNC_LOAD_BALANCER_FAILED,
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
        .any(|e| e.reason == lb_cleanup::sync::reasons::DELETING_LOAD_BALANCER);
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

/// Everything `explain` prints, computed.
#[derive(Clone, Debug)]
pub struct Report {
    pub kind: Kind,
    pub namespace: Option<String>,
    pub name: String,
    pub found: bool,
    pub deleting_since: Option<Timestamp>,
    pub finalizers: Vec<String>,
    pub facts: Vec<String>,
    pub holders: Vec<Holder>,
    pub events: Vec<EventView>,
    pub leader: Option<String>,
}

fn age(since: Timestamp, now: Timestamp) -> String {
    let d: SignedDuration = now.duration_since(since);
    let secs = d.as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

fn describe_use(ns: &str, u: &PodUse) -> String {
    match u.via {
        Via::Claim => format!("pod {ns}/{} (scheduled on {})", u.pod, u.node),
        Via::Ephemeral => format!(
            "pod {ns}/{} (owns it as a generic ephemeral volume, scheduled on {})",
            u.pod, u.node
        ),
    }
}

impl Report {
    fn object(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind.title(), self.name),
            None => format!("{} {}", self.kind.title(), self.name),
        }
    }

    /// The human text.
    pub fn render(&self, now: Timestamp) -> String {
        let mut out = String::new();
        let obj = self.object();
        if !self.found {
            let _ = writeln!(
                out,
                "{obj} does not exist (already deleted, or never created)."
            );
            return out;
        }
        let _ = writeln!(out, "{obj}");
        match self.deleting_since {
            Some(ts) => {
                let _ = writeln!(
                    out,
                    "  State:       Terminating for {} (deletion requested {ts})",
                    age(ts, now)
                );
            }
            None => {
                let _ = writeln!(out, "  State:       not being deleted");
            }
        }
        if self.finalizers.is_empty() {
            let _ = writeln!(out, "  Finalizers:  none");
        } else {
            let list: Vec<String> = self
                .finalizers
                .iter()
                .map(|f| match owner_of(f) {
                    Some(c) => format!("{f} (protection-manager {c})"),
                    None => format!("{f} (not protection-manager's)"),
                })
                .collect();
            let _ = writeln!(out, "  Finalizers:  {}", list.join(", "));
        }
        for f in &self.facts {
            let _ = writeln!(out, "  {f}");
        }
        let ns = self.namespace.clone().unwrap_or_default();
        if self.deleting_since.is_some() {
            if self.holders.is_empty() {
                let _ = writeln!(
                    out,
                    "  Why:         nothing holds it; it should disappear momentarily."
                );
            }
            for h in &self.holders {
                let line = match h {
                    Holder::PodsUseClaim(users) => {
                        let who: Vec<String> = users.iter().map(|u| describe_use(&ns, u)).collect();
                        format!(
                            "held by pvc-protection: the claim is in use by {}. It goes once no scheduled pod uses it: delete {} (a finished pod still counts until it is deleted).",
                            who.join(", "),
                            if users.len() == 1 { "that pod" } else { "those pods" }
                        )
                    }
                    Holder::VolumeBound { claim } => match claim {
                        Some(c) => format!(
                            "held by pv-protection: the volume is Bound to claim {c}. It goes once the volume leaves Bound: delete the claim (the volume then becomes Released)."
                        ),
                        None => "held by pv-protection: the volume's phase is Bound. It goes once the volume leaves Bound.".to_string(),
                    },
                    Holder::LoadBalancer(st) => match &st.failing {
                        Some(f) => {
                            let since = f
                                .since
                                .map(|s| {
                                    let shown = s.round(k8s_openapi::jiff::Unit::Second).unwrap_or(s);
                                    format!("since {shown} ({} ago)", age(s, now))
                                })
                                .unwrap_or_else(|| "for an unknown time".into());
                            format!(
                                "held by service-lb-cleanup: deleting the load balancer is failing {since}, {} attempt(s); last error ({}): {}",
                                f.count, f.reason, f.note
                            )
                        }
                        None if st.deleting_seen => "held by service-lb-cleanup: the load balancer is being deleted; the finalizer goes once the provider confirms it is gone.".to_string(),
                        None => "held by service-lb-cleanup: waiting for the controller to delete the load balancer (no attempt reported yet: is a manager running, with this Service's loadBalancerClass?).".to_string(),
                    },
                    Holder::Releasable { controller } => format!(
                        "nothing uses it any more; {controller} removes its finalizer on its next pass (if this lasts, check that a manager is running and leading)."
                    ),
                    Holder::Foreign(f) => format!(
                        "held by finalizer {f}, which protection-manager does not own: the controller that added it must remove it."
                    ),
                };
                let _ = writeln!(out, "  Why:         {line}");
            }
        } else {
            for h in &self.holders {
                if let Holder::PodsUseClaim(users) = h {
                    let who: Vec<String> = users.iter().map(|u| describe_use(&ns, u)).collect();
                    let _ = writeln!(
                        out,
                        "  If deleted:  pvc-protection would hold it while {} uses it.",
                        who.join(", ")
                    );
                }
                if let Holder::VolumeBound { claim: Some(c) } = h {
                    let _ = writeln!(
                        out,
                        "  If deleted:  pv-protection would hold it while it is Bound to {c}."
                    );
                }
            }
        }
        match &self.leader {
            Some(l) => {
                let _ = writeln!(out, "  Manager:     {l}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "  Manager:     no leader lease found: the manager runs without leader election (one replica), or is not running"
                );
            }
        }
        if !self.events.is_empty() {
            let _ = writeln!(out, "  Events (newest last):");
            for e in self.events.iter().rev().take(8).rev() {
                let when = e.last.map(|t| age(t, now) + " ago").unwrap_or_default();
                let count = if e.count > 1 {
                    format!(" (x{})", e.count)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "    {when:>10}  {:<7} {}{count}  {}",
                    e.type_, e.reason, e.note
                );
            }
        }
        out
    }
}

/// Reads everything and builds the report.
pub async fn explain(args: &ExplainArgs) -> Result<Report> {
    let (kind, name) = parse_target(&args.target)?;
    let client = client(&args.client).await?;
    let namespace = match kind {
        Kind::Pv => None,
        _ => Some(args.namespace.clone().unwrap_or_else(|| "default".into())),
    };
    let mut report = Report {
        kind,
        namespace: namespace.clone(),
        name: name.clone(),
        found: false,
        deleting_since: None,
        finalizers: Vec::new(),
        facts: Vec::new(),
        holders: Vec::new(),
        events: Vec::new(),
        leader: None,
    };
    report.leader = leader(&client, args.lease_name.as_deref()).await;
    let ns = namespace.clone().unwrap_or_default();
    let meta: ObjectMeta = match kind {
        Kind::Pvc => {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
            let Some(pvc) = api
                .get_opt(&name)
                .await
                .with_context(|| format!("reading pvc {ns}/{name}"))?
            else {
                return Ok(report);
            };
            let phase = pvc
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            let volume = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default();
            report.facts.push(format!(
                "Phase:       {}{}",
                if phase.is_empty() { "-" } else { &phase },
                if volume.is_empty() {
                    String::new()
                } else {
                    format!(" (volume {volume})")
                }
            ));
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let list = pods
                .list(&ListParams::default())
                .await
                .with_context(|| format!("listing pods in {ns}"))?;
            let facts: Vec<PodFacts> = list
                .items
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .filter_map(|v| serde_json::from_value(v).ok())
                .collect();
            // The claim's controller (upstream `GetControllerOf`), for the
            // generic-ephemeral-volume ownership rule.
            let controller = pvc
                .metadata
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|r| r.controller == Some(true))
                .map(|r| r.uid.clone());
            let users = live_users(&facts, &ns, &name, controller.as_deref());
            if !users.is_empty() {
                report.holders.push(Holder::PodsUseClaim(users));
            }
            pvc.metadata
        }
        Kind::Pv => {
            let api: Api<PersistentVolume> = Api::all(client.clone());
            let Some(pv) = api
                .get_opt(&name)
                .await
                .with_context(|| format!("reading pv {name}"))?
            else {
                return Ok(report);
            };
            let phase = pv
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            let claim = pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .map(|c| {
                    format!(
                        "{}/{}",
                        c.namespace.clone().unwrap_or_default(),
                        c.name.clone().unwrap_or_default()
                    )
                });
            report.facts.push(format!(
                "Phase:       {}{}",
                if phase.is_empty() { "-" } else { &phase },
                claim
                    .as_ref()
                    .map(|c| format!(" (claim {c})"))
                    .unwrap_or_default()
            ));
            if phase == "Bound" {
                report.holders.push(Holder::VolumeBound { claim });
            }
            pv.metadata
        }
        Kind::Service => {
            let api: Api<Service> = Api::namespaced(client.clone(), &ns);
            let Some(svc) = api
                .get_opt(&name)
                .await
                .with_context(|| format!("reading service {ns}/{name}"))?
            else {
                return Ok(report);
            };
            let spec = svc.spec.clone().unwrap_or_default();
            let ingress: Vec<String> = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.clone())
                .unwrap_or_default()
                .into_iter()
                .filter_map(|i| i.ip.or(i.hostname))
                .collect();
            report.facts.push(format!(
                "Type:        {} (loadBalancerClass {}){}",
                spec.type_.clone().unwrap_or_else(|| "ClusterIP".into()),
                spec.load_balancer_class
                    .clone()
                    .unwrap_or_else(|| "none".into()),
                if ingress.is_empty() {
                    String::new()
                } else {
                    format!(", ingress {}", ingress.join(", "))
                }
            ));
            svc.metadata
        }
    };
    report.found = true;
    report.deleting_since = meta.deletion_timestamp.as_ref().map(|t| t.0);
    report.finalizers = meta.finalizers.clone().unwrap_or_default();
    report.events = events(&client, kind, &meta).await;
    if kind == Kind::Service {
        let ours = report
            .finalizers
            .iter()
            .any(|f| owner_of(f) == Some("service-lb-cleanup"));
        if ours && report.deleting_since.is_some() {
            report
                .holders
                .push(Holder::LoadBalancer(lb_state(&report.events)));
        }
    }
    if report.deleting_since.is_some() {
        for f in &report.finalizers {
            match owner_of(f) {
                None => report.holders.push(Holder::Foreign(f.clone())),
                Some(c) => {
                    let held = report.holders.iter().any(|h| {
                        matches!(
                            (c, h),
                            ("pvc-protection", Holder::PodsUseClaim(_))
                                | ("pv-protection", Holder::VolumeBound { .. })
                                | ("service-lb-cleanup", Holder::LoadBalancer(_))
                        )
                    });
                    if !held {
                        report.holders.push(Holder::Releasable { controller: c });
                    }
                }
            }
        }
    }
    Ok(report)
}

/// Events about the object, oldest first, the way `kubectl describe` finds
/// them (core/v1, by involvedObject; events.k8s.io events are the same
/// objects). Cluster-scoped objects' events live in `default`.
async fn events(client: &kube::Client, kind: Kind, meta: &ObjectMeta) -> Vec<EventView> {
    let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let mut selector = format!(
        "involvedObject.kind={},involvedObject.name={}",
        kind.title(),
        meta.name.clone().unwrap_or_default()
    );
    if let Some(uid) = &meta.uid {
        selector.push_str(&format!(",involvedObject.uid={uid}"));
    }
    let mut out: Vec<EventView> = match api.list(&ListParams::default().fields(&selector)).await {
        Ok(list) => list.items.iter().map(EventView::from_core).collect(),
        Err(e) => {
            tracing::debug!(error = %e, "listing events failed");
            Vec::new()
        }
    };
    out.sort_by_key(|e| e.last);
    out
}

/// "leader <identity> (lease ns/name, renewed 3s ago)" for the newest
/// protection-manager Lease in any namespace: the one named `--lease-name`
/// when given, else every Lease our elector writes (its field manager is
/// `protection-manager-<identity>`; the chart names the Lease after the
/// release).
async fn leader(client: &kube::Client, lease_name: Option<&str>) -> Option<String> {
    let api: Api<Lease> = Api::all(client.clone());
    let lp = match lease_name {
        Some(n) => ListParams::default().fields(&format!("metadata.name={n}")),
        None => ListParams::default(),
    };
    let list = api.list(&lp).await.ok()?;
    let now = Timestamp::now();
    list.items
        .into_iter()
        .filter(|l| {
            lease_name.is_some()
                || l.metadata
                    .managed_fields
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|m| {
                        m.manager
                            .as_deref()
                            .is_some_and(|m| m.starts_with("protection-manager-"))
                    })
        })
        .filter_map(|l| {
            let ns = l.metadata.namespace.clone().unwrap_or_default();
            let name = l.metadata.name.clone().unwrap_or_default();
            let spec = l.spec?;
            let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
            let renewed = spec.renew_time.map(|t| t.0)?;
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            let fresh = now.duration_since(renewed).as_secs() <= duration;
            Some((
                renewed,
                format!(
                    "leader {holder} (lease {ns}/{name}, renewed {} ago{})",
                    age(renewed, now),
                    if fresh {
                        ""
                    } else {
                        "; EXPIRED: no manager is leading"
                    }
                ),
            ))
        })
        .max_by_key(|(t, _)| *t)
        .map(|(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn targets_parse_with_kubectl_kind_names() {
        assert_eq!(
            parse_target("pvc/data").unwrap(),
            (Kind::Pvc, "data".into())
        );
        assert_eq!(
            parse_target("persistentvolume/pv-1").unwrap(),
            (Kind::Pv, "pv-1".into())
        );
        assert_eq!(
            parse_target("svc/web").unwrap(),
            (Kind::Service, "web".into())
        );
        assert!(
            parse_target("deploy/x")
                .unwrap_err()
                .to_string()
                .contains("unknown kind \"deploy\"")
        );
        assert!(
            parse_target("pvc")
                .unwrap_err()
                .to_string()
                .contains("<kind>/<name>")
        );
        assert!(parse_target("pvc/").is_err());
    }

    #[test]
    fn finalizers_of_both_profiles_are_recognised() {
        assert_eq!(
            owner_of("kubernetes.io/pvc-protection"),
            Some("pvc-protection")
        );
        assert_eq!(
            owner_of("protection-manager.io/pv-protection"),
            Some("pv-protection")
        );
        assert_eq!(
            owner_of("service.kubernetes.io/load-balancer-cleanup"),
            Some("service-lb-cleanup")
        );
        assert_eq!(owner_of("example.com/other"), None);
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

    #[test]
    fn render_says_who_holds_a_claim_and_what_to_do() {
        let r = Report {
            kind: Kind::Pvc,
            namespace: Some("demo".into()),
            name: "data".into(),
            found: true,
            deleting_since: ts(0),
            finalizers: vec![
                "protection-manager.io/pvc-protection".into(),
                "example.com/backup".into(),
            ],
            facts: vec!["Phase:       Bound (volume pv-1)".into()],
            holders: vec![
                Holder::PodsUseClaim(vec![PodUse {
                    pod: "web-0".into(),
                    node: "node-1".into(),
                    via: Via::Claim,
                }]),
                Holder::Foreign("example.com/backup".into()),
            ],
            events: vec![],
            leader: None,
        };
        let text = r.render(ts(95).unwrap_or(Timestamp::UNIX_EPOCH));
        assert!(
            text.starts_with("PersistentVolumeClaim demo/data\n"),
            "{text}"
        );
        assert!(text.contains("Terminating for 95s"), "{text}");
        assert!(
            text.contains("in use by pod demo/web-0 (scheduled on node-1)"),
            "{text}"
        );
        assert!(
            text.contains("example.com/backup (not protection-manager's)"),
            "{text}"
        );
        assert!(
            text.contains(
                "held by finalizer example.com/backup, which protection-manager does not own"
            ),
            "{text}"
        );
        assert!(text.contains("no leader lease found"), "{text}");
    }

    #[test]
    fn render_of_a_missing_object() {
        let r = Report {
            kind: Kind::Pv,
            namespace: None,
            name: "pv-9".into(),
            found: false,
            deleting_since: None,
            finalizers: vec![],
            facts: vec![],
            holders: vec![],
            events: vec![],
            leader: None,
        };
        assert_eq!(
            r.render(Timestamp::UNIX_EPOCH),
            "PersistentVolume pv-9 does not exist (already deleted, or never created).\n"
        );
    }
}

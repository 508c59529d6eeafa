//! `protection-manager explain <kind>/<name> [-n ns]`: why is this object
//! Terminating (or: what would hold it)?
//!
//! This module only fetches objects and prints: the answer comes from the
//! controllers' own `explain` functions (`pv_protection::explain`,
//! `lb_cleanup::explain`, `vac_protection::explain`), over objects read live from the API server, so it
//! does not depend on the manager being up. It also says when a finalizer is
//! owned by someone else, and whether a manager currently holds its leader
//! lease.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};
use lb_cleanup::explain::LbState;
use protection_core::events::EventView;
use pv_protection::explain::{UnreadablePod, explain_pv, explain_pvc, read_pod};
use pv_protection::index::{PodUse, Via};
use pv_protection::objects::{PvFacts, PvcFacts};
use vac_protection::index::VacUse;

use protection_host::names::{NameRule, escape_path_segment, validate_name};

use crate::cli::ExplainArgs;
use crate::release_check::client;

/// The kinds `explain` understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pvc,
    Pv,
    Service,
    Vac,
    /// A kind a controller crate explains through its hook (the table's
    /// `explain`), by its title.
    Hooked(&'static str),
}

impl Kind {
    fn parse(s: &str) -> Result<Kind> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "pvc" | "pvcs" | "persistentvolumeclaim" | "persistentvolumeclaims" => Kind::Pvc,
            "pv" | "pvs" | "persistentvolume" | "persistentvolumes" => Kind::Pv,
            "svc" | "service" | "services" => Kind::Service,
            "vac" | "vacs" | "volumeattributesclass" | "volumeattributesclasses" => Kind::Vac,
            other => match crate::controllers::explain_kind_named(other) {
                Some(k) => Kind::Hooked(k.title),
                None => bail!(
                    "unknown kind {other:?}: explain understands pvc (persistentvolumeclaim), pv (persistentvolume), svc (service), vac (volumeattributesclass){}",
                    crate::controllers::explain_kinds()
                        .map(|k| format!(", {}", k.names[0]))
                        .collect::<String>()
                ),
            },
        })
    }

    /// The rule kube-apiserver checks this kind's names with.
    fn name_rule(self) -> NameRule {
        match self {
            Kind::Service => NameRule::Dns1035Label,
            // A hooked kind's names (ServiceCIDR's) are DNS subdomains.
            Kind::Pvc | Kind::Pv | Kind::Vac | Kind::Hooked(_) => NameRule::Dns1123Subdomain,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Kind::Pvc => "PersistentVolumeClaim",
            Kind::Pv => "PersistentVolume",
            Kind::Service => "Service",
            Kind::Vac => "VolumeAttributesClass",
            Kind::Hooked(title) => title,
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

/// `explain <resource>/<name>` for a kind ProtectionRules protect: the
/// rules and the users holding the object (`(found, text)`).
pub async fn explain_rules(
    args: &ExplainArgs,
    resource: &str,
    name: &str,
) -> Result<(bool, String)> {
    if name.is_empty() || name.contains('/') {
        bail!(
            "expected <kind>/<name>, e.g. pvc/data or secrets/db; got {:?}",
            args.target
        );
    }
    // The kind's own name rule is not known here: the least every kind's
    // names obey, and nothing a URL would read as more than a name.
    validate_name(&args.target, name, NameRule::PathSegment)?;
    if escape_path_segment(name) != name {
        bail!(
            "invalid {} {name:?}: a name explain can look up has no '?', '#', ';', ',', spaces or non-ASCII characters",
            args.target
        );
    }
    let client = client(&args.client).await?;
    match protection_rules::explain::explain(&client, resource, args.namespace.as_deref(), name)
        .await
        .with_context(|| format!("explaining {resource}/{name}"))?
    {
        Some(e) => Ok((e.found, protection_rules::explain::render(&e))),
        None => bail!(
            "unknown kind {resource:?}: explain understands pvc (persistentvolumeclaim), pv (persistentvolume), svc (service) and the kinds ProtectionRules protect (none protects {resource:?})"
        ),
    }
}

/// Which controller owns a finalizer, if it is one of ours (either profile).
pub fn owner_of(finalizer: &str) -> Option<&'static str> {
    crate::controllers::owner_of(finalizer)
}

/// What holds an object, in the order a user should read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// pvc-protection keeps the claim: these pods use it.
    PodsUseClaim(Vec<PodUse>),
    /// No pod known to use the claim, but these could not be read: whether
    /// pvc-protection keeps it cannot be told.
    PodsUnreadable(Vec<UnreadablePod>),
    /// pv-protection keeps the volume: it is Bound (to this claim).
    VolumeBound { claim: Option<String> },
    /// vac-protection keeps the class: these claims and volumes refer to it.
    ClassInUse(Vec<VacUse>),
    /// No known user of the class, but these objects could not be read.
    ClassUsersUnreadable(Vec<vac_protection::explain::Unreadable>),
    /// service-lb-cleanup has not deleted the load balancer yet.
    LoadBalancer(LbState),
    /// Our finalizer is present and nothing holds the object: the controller
    /// should remove it on its next pass.
    Releasable { controller: &'static str },
    /// A finalizer protection-manager does not own.
    Foreign(String),
    /// What a controller's explain hook says holds the object (or would).
    Said {
        controller: &'static str,
        line: String,
    },
}

impl Holder {
    /// Whether this keeps `controller`'s finalizer on the object.
    pub fn holds_for(&self, controller: &str) -> bool {
        if let Holder::Said { controller: c, .. } = self {
            return *c == controller;
        }
        matches!(
            (controller, self),
            (
                "pvc-protection",
                Holder::PodsUseClaim(_) | Holder::PodsUnreadable(_)
            ) | ("pv-protection", Holder::VolumeBound { .. })
                | ("service-lb-cleanup", Holder::LoadBalancer(_))
                | (
                    "vac-protection",
                    Holder::ClassInUse(_) | Holder::ClassUsersUnreadable(_)
                )
        )
    }

    /// Why this holds the object (of namespace `ns`), and what frees it.
    pub fn describe(&self, ns: &str, now: Timestamp) -> String {
        match self {
            Holder::PodsUseClaim(users) => {
                let who: Vec<String> = users.iter().map(|u| describe_use(ns, u)).collect();
                format!(
                    "held by pvc-protection: the claim is in use by {}. It goes once no scheduled pod uses it: delete {} (a finished pod still counts until it is deleted).",
                    who.join(", "),
                    if users.len() == 1 { "that pod" } else { "those pods" }
                )
            }
            Holder::PodsUnreadable(pods) => {
                let who: Vec<String> = pods
                    .iter()
                    .map(|p| format!("pod {ns}/{} ({})", p.name, p.error))
                    .collect();
                format!(
                    "pvc-protection cannot tell whether the claim is free: no readable pod uses it, but {} could not be read. The controller keeps its finalizer while a pod may use the claim.",
                    who.join(", ")
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
            Holder::ClassInUse(users) => {
                let who: Vec<String> = users.iter().map(VacUse::describe).collect();
                format!(
                    "held by vac-protection: the class is in use by {}. It goes once no claim or volume refers to it: delete them or change them to another class (a pending modification counts until it finishes).",
                    who.join(", ")
                )
            }
            Holder::ClassUsersUnreadable(objs) => {
                let who: Vec<String> = objs.iter().map(|o| format!("{} ({})", o.object, o.error)).collect();
                format!(
                    "vac-protection cannot tell whether the class is free: no readable claim or volume uses it, but {} could not be read.",
                    who.join(", ")
                )
            }
            Holder::Releasable { controller } => format!(
                "nothing uses it any more; {controller} removes its finalizer on its next pass (if this lasts, check that a manager is running and leading)."
            ),
            Holder::Foreign(f) => format!(
                "held by finalizer {f}, which protection-manager does not own: the controller that added it must remove it."
            ),
            Holder::Said { controller, line } => format!("held by {controller}: {line}"),
        }
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
                let line = h.describe(&ns, now);
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
                if let Holder::ClassInUse(users) = h {
                    let who: Vec<String> = users.iter().map(VacUse::describe).collect();
                    let _ = writeln!(
                        out,
                        "  If deleted:  vac-protection would hold it while {} refers to it.",
                        who.join(", ")
                    );
                }
                if let Holder::Said { controller, line } = h {
                    let _ = writeln!(out, "  If deleted:  {controller} would hold it: {line}");
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

impl Report {
    /// Each of the object's finalizers that nothing found holds: a foreign
    /// one, or one of ours the controller will remove (releasable).
    fn add_finalizer_holders(&mut self) {
        if self.deleting_since.is_some() {
            for f in &self.finalizers {
                match owner_of(f) {
                    None => self.holders.push(Holder::Foreign(f.clone())),
                    Some(c) => {
                        let held = self.holders.iter().any(|h| h.holds_for(c));
                        if !held {
                            self.holders.push(Holder::Releasable { controller: c });
                        }
                    }
                }
            }
        }
    }
}

/// Reads everything and builds the report.
pub async fn explain(args: &ExplainArgs) -> Result<Report> {
    let (kind, name) = parse_target(&args.target)?;
    // Checked before any request: the name goes into the URL's path.
    validate_name(&args.target, &name, kind.name_rule())?;
    let client = client(&args.client).await?;
    let namespace = match kind {
        Kind::Pv | Kind::Vac => None,
        Kind::Hooked(title)
            if !crate::controllers::explain_kind(title).is_some_and(|k| k.namespaced) =>
        {
            None
        }
        _ => Some(args.namespace.clone().unwrap_or_else(|| "default".into())),
    };
    let mut report = explain_object(&client, kind, namespace, name).await?;
    // The leader after the object: a server that does not answer is
    // reported after one request timeout, not two.
    if report.found {
        report.leader = leader(&client, args.lease_name.as_deref()).await;
    }
    Ok(report)
}

/// The report on one object (without the leader), over `client`; `name`
/// was checked against its kind's rule.
pub async fn explain_object(
    client: &kube::Client,
    kind: Kind,
    namespace: Option<String>,
    name: String,
) -> Result<Report> {
    let client = client.clone();
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
    let ns = namespace.clone().unwrap_or_default();
    let meta: ObjectMeta = match kind {
        Kind::Hooked(title) => {
            let Some(hook) = crate::controllers::explain_kind(title) else {
                bail!("no controller explains {title}");
            };
            let Some(e) = (hook.explain)(client.clone(), namespace.clone(), name.clone())
                .await
                .with_context(|| format!("explaining {title} {name}"))?
            else {
                return Ok(report);
            };
            report.facts.extend(e.facts);
            report
                .holders
                .extend(e.held.into_iter().map(|line| Holder::Said {
                    controller: hook.controller,
                    line,
                }));
            e.meta
        }
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
            // Pods as raw objects: one the controller cannot read must be
            // reported, not dropped (nor fail the whole list).
            let pods: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<Pod>(&()));
            let list = pods
                .list(&ListParams::default())
                .await
                .with_context(|| format!("listing pods in {ns}"))?;
            let read = list.items.into_iter().map(|p| {
                serde_json::to_value(&p)
                    .map_err(|e| UnreadablePod {
                        name: p.metadata.name.clone().unwrap_or_default(),
                        error: e.to_string(),
                    })
                    .and_then(read_pod)
            });
            let e = explain_pvc(&PvcFacts::from(&pvc), read);
            if e.in_use() {
                report.holders.push(Holder::PodsUseClaim(e.users));
            } else if e.undecided() {
                report.holders.push(Holder::PodsUnreadable(e.unreadable));
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
            let e = explain_pv(&PvFacts::from(&pv));
            report.facts.push(format!(
                "Phase:       {}{}",
                e.phase.as_deref().filter(|p| !p.is_empty()).unwrap_or("-"),
                e.claim
                    .as_ref()
                    .map(|c| format!(" (claim {c})"))
                    .unwrap_or_default()
            ));
            if let Some(why) = e.in_use {
                report
                    .holders
                    .push(Holder::VolumeBound { claim: why.claim });
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
            let events = events(&client, kind, &svc.metadata).await;
            let e = lb_cleanup::explain::explain(&svc, &events);
            report.facts.push(format!(
                "Type:        {} (loadBalancerClass {}){}",
                e.type_,
                e.class.as_deref().unwrap_or("none"),
                if e.ingress.is_empty() {
                    String::new()
                } else {
                    format!(", ingress {}", e.ingress.join(", "))
                }
            ));
            if let Some(st) = e.cleanup {
                report.holders.push(Holder::LoadBalancer(st));
            }
            svc.metadata
        }
        Kind::Vac => {
            let Some((meta, version)) = get_vac(&client, &name).await? else {
                return Ok(report);
            };
            report
                .facts
                .push(format!("API:         storage.k8s.io/{version}"));
            let list = |r: ApiResource| {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &r);
                async move { api.list(&ListParams::default()).await }
            };
            let pvcs = list(ApiResource::erase::<PersistentVolumeClaim>(&()))
                .await
                .context("listing persistentvolumeclaims")?;
            let pvs = list(ApiResource::erase::<PersistentVolume>(&()))
                .await
                .context("listing persistentvolumes")?;
            let values = |items: Vec<DynamicObject>| {
                items
                    .into_iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect::<Vec<_>>()
            };
            let e =
                vac_protection::explain::explain_vac(&name, values(pvcs.items), values(pvs.items));
            if e.in_use() {
                report.holders.push(Holder::ClassInUse(e.users));
            } else if e.undecided() {
                report
                    .holders
                    .push(Holder::ClassUsersUnreadable(e.unreadable));
            }
            meta
        }
    };
    report.found = true;
    report.deleting_since = meta.deletion_timestamp.as_ref().map(|t| t.0);
    report.finalizers = meta.finalizers.clone().unwrap_or_default();
    report.events = events(&client, kind, &meta).await;
    report.add_finalizer_holders();
    Ok(report)
}

/// The class `name` and the version it was read at (v1, else v1beta1);
/// `None` when it does not exist.
async fn get_vac(client: &kube::Client, name: &str) -> Result<Option<(ObjectMeta, &'static str)>> {
    for version in ["v1", "v1beta1"] {
        let gvk =
            kube::api::GroupVersionKind::gvk("storage.k8s.io", version, "VolumeAttributesClass");
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
        );
        match api.get_opt(name).await {
            Ok(Some(o)) => return Ok(Some((o.metadata, version))),
            Ok(None) => return Ok(None),
            // This version is not served: try the next one.
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e).with_context(|| format!("reading vac {name}")),
        }
    }
    bail!("the cluster serves no VolumeAttributesClass API (storage.k8s.io/v1 or v1beta1)")
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

    proptest::proptest! {
        /// Issue 27, bug 4 (`make fuzz`): whatever the target, a name that
        /// passes its kind's rule goes into the URL as it is: one path
        /// segment, no query, no fragment.
        #[test]
        fn a_checked_target_name_is_one_plain_path_segment(
            // Any text, and targets of every kind whose names mix a name's
            // characters with those that would change a URL (so that
            // accepted names are common).
            target in "\\PC{0,40}|(pvc|pv|svc|vac|persistentvolumeclaim|service)/[a-z0-9.\\-/?#%&=:@ _A-Z]{0,20}",
        ) {
            if let Ok((kind, name)) = parse_target(&target)
                && validate_name(&target, &name, kind.name_rule()).is_ok()
            {
                proptest::prop_assert_eq!(escape_path_segment(&name), name);
            }
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

    #[test]
    fn a_claim_with_an_unreadable_pod_is_never_called_releasable() {
        let mut r = Report {
            kind: Kind::Pvc,
            namespace: Some("demo".into()),
            name: "data".into(),
            found: true,
            deleting_since: ts(0),
            finalizers: vec!["protection-manager.io/pvc-protection".into()],
            facts: vec![],
            holders: vec![Holder::PodsUnreadable(vec![UnreadablePod {
                name: "odd".into(),
                error: "invalid type: integer `7`, expected a string".into(),
            }])],
            events: vec![],
            leader: None,
        };
        r.add_finalizer_holders();
        assert!(
            !r.holders
                .iter()
                .any(|h| matches!(h, Holder::Releasable { .. })),
            "{:?}",
            r.holders
        );
        let text = r.render(ts(5).unwrap_or(Timestamp::UNIX_EPOCH));
        assert!(
            text.contains("pvc-protection cannot tell whether the claim is free"),
            "{text}"
        );
        assert!(text.contains("pod demo/odd (invalid type"), "{text}");
        assert!(!text.contains("nothing uses it any more"), "{text}");
        // Without the unreadable pod, the same claim is releasable.
        r.holders.clear();
        r.add_finalizer_holders();
        assert_eq!(
            r.holders,
            vec![Holder::Releasable {
                controller: "pvc-protection"
            }]
        );
    }
}

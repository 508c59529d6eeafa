//! `protection-manager explain <kind>/<name> [-n ns]`: why is this object
//! Terminating (or: what would hold it)?
//!
//! This module names no kind: it resolves `<kind>` to the explain hook of a
//! controller crate in the manager's table (`crate::controllers`), which
//! reads the object live and says why its controller holds it; this module
//! adds the events, the leader lease and the finalizers nothing holds, and
//! prints. So the answer does not depend on the manager being up. Kinds no
//! hook names go to the hooks for kinds known only at run time (the
//! ProtectionRules').

use std::fmt::Write as _;

use anyhow::{Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use protection_core::events::EventView;
use protection_core::explain::{self as hook, ExplainKind, Hold, age};

use protection_host::names::{NameRule, escape_path_segment, validate_name};

use crate::cli::ExplainArgs;
use crate::release_check::client;

/// What `explain`'s messages say it understands: every hooked kind.
fn understood() -> String {
    crate::controllers::explain_kinds()
        .map(ExplainKind::label)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Splits `kind/name` and finds the hook of `kind`.
pub fn parse_target(target: &str) -> Result<(&'static ExplainKind, String)> {
    let Some((kind, name)) = target.split_once('/') else {
        bail!("expected <kind>/<name>, e.g. pvc/data, pv/pv-1 or svc/web; got {target:?}");
    };
    if name.is_empty() || name.contains('/') {
        bail!("expected <kind>/<name>, e.g. pvc/data; got {target:?}");
    }
    let lower = kind.to_ascii_lowercase();
    let Some(kind) = crate::controllers::explain_kind_named(&lower) else {
        bail!(
            "unknown kind {lower:?}: explain understands {}",
            understood()
        );
    };
    Ok((kind, name.to_string()))
}

/// The rule kube-apiserver checks `kind`'s names with.
fn name_rule(kind: &ExplainKind) -> NameRule {
    match kind.name_rule {
        hook::NameRule::Dns1123Subdomain => NameRule::Dns1123Subdomain,
        hook::NameRule::Dns1035Label => NameRule::Dns1035Label,
    }
}

/// `explain <resource>/<name>` for a kind no hook names: the hooks for
/// kinds known only at run time (the ProtectionRules') answer
/// (`(found, text)`).
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
    let mut kinds = Vec::new();
    for any in crate::controllers::explain_any() {
        if let Some(r) = (any.explain)(
            client.clone(),
            resource.to_string(),
            args.namespace.clone(),
            name.to_string(),
        )
        .await?
        {
            return Ok((r.found, r.text));
        }
        kinds.push(any.kinds);
    }
    bail!(
        "unknown kind {resource:?}: explain understands {} and {} (none protects {resource:?})",
        understood(),
        kinds.join(" and ")
    )
}

/// Which controller owns a finalizer, if it is one of ours (either profile).
pub fn owner_of(finalizer: &str) -> Option<&'static str> {
    crate::controllers::owner_of(finalizer)
}

/// What holds an object, in the order a user should read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// What a controller's explain hook says holds the object (or would).
    Held {
        controller: &'static str,
        hold: Hold,
    },
    /// Our finalizer is present and nothing holds the object: the controller
    /// should remove it on its next pass.
    Releasable { controller: &'static str },
    /// A finalizer protection-manager does not own.
    Foreign(String),
}

impl Holder {
    /// Whether this keeps `controller`'s finalizer on the object.
    pub fn holds_for(&self, controller: &str) -> bool {
        matches!(self, Holder::Held { controller: c, .. } if *c == controller)
    }

    /// Why this holds the object (being deleted), and what frees it.
    pub fn why(&self) -> String {
        match self {
            Holder::Held { hold, .. } => hold.why.clone(),
            Holder::Releasable { controller } => format!(
                "nothing uses it any more; {controller} removes its finalizer on its next pass (if this lasts, check that a manager is running and leading)."
            ),
            Holder::Foreign(f) => format!(
                "held by finalizer {f}, which protection-manager does not own: the controller that added it must remove it."
            ),
        }
    }
}

/// Everything `explain` prints, computed.
#[derive(Clone, Debug)]
pub struct Report {
    /// The kind, as its hook titles it.
    pub title: &'static str,
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

impl Report {
    fn object(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.title, self.name),
            None => format!("{} {}", self.title, self.name),
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
        if self.deleting_since.is_some() {
            if self.holders.is_empty() {
                let _ = writeln!(
                    out,
                    "  Why:         nothing holds it; it should disappear momentarily."
                );
            }
            for h in &self.holders {
                let _ = writeln!(out, "  Why:         {}", h.why());
            }
        } else {
            for h in &self.holders {
                if let Holder::Held {
                    hold:
                        Hold {
                            if_deleted: Some(line),
                            ..
                        },
                    ..
                } = h
                {
                    let _ = writeln!(out, "  If deleted:  {line}");
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
    validate_name(&args.target, &name, name_rule(kind))?;
    let client = client(&args.client).await?;
    let namespace = kind
        .namespaced
        .then(|| args.namespace.clone().unwrap_or_else(|| "default".into()));
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
    kind: &ExplainKind,
    namespace: Option<String>,
    name: String,
) -> Result<Report> {
    let mut report = Report {
        title: kind.title,
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
    // The hook's error names the request that failed.
    let Some(e) = (kind.explain)(client.clone(), namespace, name).await? else {
        return Ok(report);
    };
    report.facts = e.facts;
    report.holders = e
        .held
        .into_iter()
        .map(|hold| Holder::Held {
            controller: kind.controller,
            hold,
        })
        .collect();
    report.found = true;
    report.deleting_since = e.meta.deletion_timestamp.as_ref().map(|t| t.0);
    report.finalizers = e.meta.finalizers.clone().unwrap_or_default();
    report.events = hook::events(client, kind.title, &e.meta).await;
    report.add_finalizer_holders();
    Ok(report)
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
                && validate_name(&target, &name, name_rule(kind)).is_ok()
            {
                proptest::prop_assert_eq!(escape_path_segment(&name), name);
            }
        }
    }

    fn parsed(target: &str) -> (&'static str, String) {
        let (kind, name) = parse_target(target).unwrap();
        (kind.title, name)
    }

    /// Every hooked kind's names (kubectl's) reach its hook, in any case;
    /// an unknown one is refused naming every kind understood.
    #[test]
    fn targets_parse_with_kubectl_kind_names() {
        for kind in crate::controllers::explain_kinds() {
            for n in kind.names {
                assert_eq!(parsed(&format!("{n}/x")), (kind.title, "x".into()));
                assert_eq!(
                    parsed(&format!("{}/x", n.to_ascii_uppercase())),
                    (kind.title, "x".into())
                );
            }
        }
        let err = parse_target("deploy/x").unwrap_err().to_string();
        assert!(err.contains("unknown kind \"deploy\""), "{err}");
        assert!(
            err.ends_with(
                "explain understands pvc (persistentvolumeclaim), pv (persistentvolume), svc (service), vac (volumeattributesclass), servicecidr"
            ),
            "{err}"
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

    fn held(controller: &'static str, why: &str, if_deleted: Option<&str>) -> Holder {
        Holder::Held {
            controller,
            hold: Hold {
                why: why.into(),
                if_deleted: if_deleted.map(Into::into),
            },
        }
    }

    fn report(holders: Vec<Holder>, deleting_since: Option<Timestamp>) -> Report {
        Report {
            title: "Widget",
            namespace: Some("demo".into()),
            name: "data".into(),
            found: true,
            deleting_since,
            finalizers: vec![
                "protection-manager.io/pvc-protection".into(),
                "example.com/backup".into(),
            ],
            facts: vec!["Phase:       Bound".into()],
            holders,
            events: vec![],
            leader: None,
        }
    }

    #[test]
    fn render_says_who_holds_it_and_what_to_do() {
        let mut r = report(
            vec![held(
                "pvc-protection",
                "held by pvc-protection: in use by web-0.",
                Some("pvc-protection would hold it while web-0 uses it."),
            )],
            ts(0),
        );
        r.add_finalizer_holders();
        let text = r.render(ts(95).unwrap_or(Timestamp::UNIX_EPOCH));
        assert!(text.starts_with("Widget demo/data\n"), "{text}");
        assert!(text.contains("Terminating for 95s"), "{text}");
        assert!(text.contains("  Phase:       Bound\n"), "{text}");
        assert!(
            text.contains("  Why:         held by pvc-protection: in use by web-0.\n"),
            "{text}"
        );
        assert!(!text.contains("If deleted"), "{text}");
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
    fn before_the_deletion_render_says_what_would_hold_it() {
        let r = report(
            vec![
                held(
                    "pvc-protection",
                    "held by pvc-protection: in use by web-0.",
                    Some("pvc-protection would hold it while web-0 uses it."),
                ),
                held("pvc-protection", "cannot tell", None),
            ],
            None,
        );
        let text = r.render(ts(95).unwrap_or(Timestamp::UNIX_EPOCH));
        assert!(text.contains("State:       not being deleted"), "{text}");
        assert!(
            text.contains("  If deleted:  pvc-protection would hold it while web-0 uses it.\n"),
            "{text}"
        );
        assert!(!text.contains("Why:"), "{text}");
        assert!(!text.contains("cannot tell"), "{text}");
    }

    #[test]
    fn render_of_a_missing_object() {
        let r = Report {
            namespace: None,
            found: false,
            ..report(vec![], None)
        };
        assert_eq!(
            r.render(Timestamp::UNIX_EPOCH),
            "Widget data does not exist (already deleted, or never created).\n"
        );
    }

    /// Any hold by a controller, even one that only says it cannot tell,
    /// keeps its finalizer from being called releasable.
    #[test]
    fn a_held_finalizer_is_never_called_releasable() {
        let mut r = report(
            vec![held("pvc-protection", "pvc-protection cannot tell", None)],
            ts(0),
        );
        r.finalizers.truncate(1);
        r.add_finalizer_holders();
        assert_eq!(r.holders.len(), 1, "{:?}", r.holders);
        let text = r.render(ts(5).unwrap_or(Timestamp::UNIX_EPOCH));
        assert!(text.contains("pvc-protection cannot tell"), "{text}");
        assert!(!text.contains("nothing uses it any more"), "{text}");
        // Without the hold, the same object is releasable.
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

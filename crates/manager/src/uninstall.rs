//! `protection-manager strip-finalizers --all`: what the chart's `pre-delete`
//! hook runs so that `helm uninstall` leaves nothing stuck.
//!
//! In order, with the manager running (`--deployment` exists and asks for
//! a replica):
//! 1. up to `--wait`, the manager releases the objects being deleted that
//!    nothing uses; any it still holds then is in use, and the command fails
//!    naming each and why, having changed nothing (the manager keeps
//!    holding them; the uninstall can be run again once their users go);
//! 2. every ProtectionRule is deleted: the manager removes each rule's
//!    finalizer from the objects it protects, then its `rule-cleanup` from
//!    the rule (a rule is never stripped: its finalizer stands for the ones
//!    on the objects); up to `--wait` for them to go;
//! 3. the Deployment is scaled to zero and awaited, so that no manager puts
//!    a finalizer back (the create-time policy still adds them to objects
//!    created until helm deletes it, moments later);
//! 4. every controller's `protection-manager.io/*` finalizer is removed from
//!    each object not being deleted (a guarded JSON patch each), and from an
//!    object being deleted only when nothing uses it (`explain`'s reading of
//!    the live objects).
//!
//! With no manager running, steps 1 and 3 are skipped and the rules stay
//! (nobody clears them): the command removes what step 4 may, then fails
//! naming what it left and why. Under `finalizerProfile: upstream` the
//! `kubernetes.io/*` names are kube-controller-manager's: they are left to
//! it, and said so.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use protection_core::FinalizedResource;
use protection_core::FinalizerProfile;
use protection_core::explain::ExplainKind;
use protection_host::release_guard;
use serde_json::json;
use tokio::time::Instant;

use crate::cli::StripFinalizersArgs;
use crate::release_check::client;
use crate::run::manager_namespace;

/// How often the state is read again while waiting.
const POLL: Duration = Duration::from_secs(1);

/// One kind a controller finalizes, with the finalizer to clear on it.
struct Target {
    controller: &'static str,
    resource: &'static FinalizedResource,
    finalizer: &'static str,
    /// The subresource the controller writes the finalizer through
    /// (`crate::strip::finalizer_subresource`).
    via: Option<&'static str>,
}

fn targets() -> Vec<Target> {
    crate::controllers::infos()
        .flat_map(|i| {
            i.finalizes.iter().map(move |r| Target {
                controller: i.name,
                resource: r,
                finalizer: i.finalizer.project,
                via: crate::strip::finalizer_subresource(i, r),
            })
        })
        .collect()
}

/// The objects of `t` carrying its finalizer (`None`: not served, or not
/// readable by this identity, with the reason in `notes`).
async fn holders(
    client: &kube::Client,
    t: &Target,
    notes: &mut Vec<String>,
) -> Result<Option<Vec<(String, bool)>>> {
    match release_guard::holders(client, t.resource, t.finalizer).await {
        Ok(Some(h)) => Ok(Some(h)),
        Ok(None) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            notes.push(format!(
                "{}: not readable by this identity ({}); {} was not cleared from them (is {} enabled in this release?)",
                t.resource.display(),
                s.message,
                t.finalizer,
                t.controller
            ));
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("listing {}", t.resource.display())),
    }
}

fn api(client: &kube::Client, r: &FinalizedResource, ns: Option<&str>) -> Api<DynamicObject> {
    let version = r.versions.first().copied().unwrap_or("v1");
    let ar = ApiResource {
        group: r.group.to_string(),
        version: version.to_string(),
        api_version: if r.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", r.group)
        },
        kind: r.kind.to_string(),
        plural: r.plural.to_string(),
    };
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// The explain hook of a finalized kind, if a hosted controller explains
/// it (and so can tell that kind's use).
fn explain_kind(r: &FinalizedResource) -> Option<&'static ExplainKind> {
    crate::controllers::explain_kinds().find(|k| k.group == r.group && k.title == r.kind)
}

/// Why `name` (`ns/name` or `name`) of `r`, being deleted, must keep the
/// finalizer of `controller`; `None` when nothing holds it.
async fn held_because(
    client: &kube::Client,
    r: &FinalizedResource,
    controller: &str,
    name: &str,
) -> Result<Option<String>> {
    holds(client, r, controller, name, true).await
}

/// Why `controller` would hold `name` (`ns/name` or `name`) of `r`, not
/// being deleted, if it were: its use, as the crate's explain hook reads it
/// live (`strip-finalizers --controller` keeps such an object's finalizer);
/// `None` when nothing uses it.
pub(crate) async fn in_use_because(
    client: &kube::Client,
    r: &FinalizedResource,
    controller: &str,
    name: &str,
) -> Result<Option<String>> {
    holds(client, r, controller, name, false).await
}

/// The holds of `controller` on `name` of `r` from its kind's explain hook,
/// said as for an object being deleted ("held by ...") or not yet ("...
/// would hold it ..."); a kind without a hook counts as held.
async fn holds(
    client: &kube::Client,
    r: &FinalizedResource,
    controller: &str,
    name: &str,
    deleting: bool,
) -> Result<Option<String>> {
    let Some(kind) = explain_kind(r) else {
        return Ok(Some(format!(
            "whether {} are in use cannot be told by this command",
            r.display()
        )));
    };
    let (ns, n) = split_key(name);
    // The hook alone (no events, no lease): its holds are its
    // controller's, read live.
    let explained = (kind.explain)(client.clone(), ns, n)
        .await
        .with_context(|| format!("telling whether {}/{name} is in use", r.display()))?;
    Ok(reasons(kind, controller, explained, deleting))
}

/// [`in_use_because`] for each of `names` of `r`, by name (those in use
/// only): one live read for all when the kind's hook has the batch form.
pub(crate) async fn in_use_many(
    client: &kube::Client,
    r: &FinalizedResource,
    controller: &str,
    names: &[String],
) -> Result<HashMap<String, String>> {
    let mut in_use = HashMap::new();
    let Some((kind, many)) = explain_kind(r).and_then(|k| Some((k, k.explain_many?))) else {
        for name in names {
            if let Some(why) = in_use_because(client, r, controller, name).await? {
                in_use.insert(name.clone(), why);
            }
        }
        return Ok(in_use);
    };
    if names.is_empty() {
        return Ok(in_use);
    }
    let asked = names.iter().map(|name| split_key(name)).collect();
    let explained = many(client.clone(), asked)
        .await
        .with_context(|| format!("telling whether {} are in use", r.display()))?;
    for (name, e) in names.iter().zip(explained) {
        if let Some(why) = reasons(kind, controller, e, false) {
            in_use.insert(name.clone(), why);
        }
    }
    Ok(in_use)
}

/// `ns/name` as (namespace, name); `name` as (None, name).
fn split_key(name: &str) -> (Option<String>, String) {
    match name.split_once('/') {
        Some((ns, n)) => (Some(ns.to_string()), n.to_string()),
        None => (None, name.to_string()),
    }
}

/// The holds of `controller` in what `kind`'s hook said, as for an object
/// being deleted or not yet.
fn reasons(
    kind: &ExplainKind,
    controller: &str,
    explained: Option<protection_core::explain::Explained>,
    deleting: bool,
) -> Option<String> {
    let why: Vec<String> = explained
        .filter(|_| kind.controller == controller)
        .map(|e| e.held)
        .unwrap_or_default()
        .into_iter()
        .map(|hold| match hold.if_deleted {
            Some(line) if !deleting => line,
            _ => hold.why,
        })
        .collect();
    (!why.is_empty()).then(|| why.join(" "))
}

/// A ProtectionRule as this command reads it.
struct Rule {
    name: String,
    /// `None` when the spec does not parse (the controller refuses such a
    /// rule, so it holds nothing).
    spec: Option<protection_rules::spec::RuleSpec>,
}

/// The rules not yet gone (`None`: the kind is not served, or not readable
/// by this identity).
async fn rules_left(client: &kube::Client, rules: &Target) -> Result<Option<Vec<Rule>>> {
    match api(client, rules.resource, None)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(Some(
            list.items
                .into_iter()
                .map(|o| Rule {
                    name: o.metadata.name.clone().unwrap_or_default(),
                    spec: serde_json::from_value(o.data["spec"].clone()).ok(),
                })
                .collect(),
        )),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => Ok(None),
        Err(e) => Err(e).context("listing protectionrules"),
    }
}

/// The objects being deleted that still carry a rule's finalizer: after
/// the wait, the running manager keeps them because they are in use.
async fn held_by_rules(client: &kube::Client, rules: &[Rule]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rules {
        let Some(spec) = &r.spec else { continue };
        let p = &spec.protected;
        let Some(plural) = &p.resource else { continue };
        let shown = protection_rules::spec::protected_display(p);
        let ar = ApiResource {
            group: p.group.clone(),
            version: p.version.clone(),
            api_version: if p.group.is_empty() {
                p.version.clone()
            } else {
                format!("{}/{}", p.group, p.version)
            },
            kind: p.kind.clone().unwrap_or_default(),
            plural: plural.clone(),
        };
        let list = match Api::<DynamicObject>::all_with(client.clone(), &ar)
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l,
            Err(e) => {
                out.push(format!(
                    "the {shown} of ProtectionRule {}: not listed ({e}), so whether one is held cannot be told",
                    r.name
                ));
                continue;
            }
        };
        for o in list.items {
            let m = &o.metadata;
            let carries = m
                .finalizers
                .as_ref()
                .is_some_and(|f| f.contains(&spec.finalizer));
            if m.deletion_timestamp.is_none() || !carries {
                continue;
            }
            let name = m.name.clone().unwrap_or_default();
            let full = match &m.namespace {
                Some(ns) => format!("{ns}/{name}"),
                None => name.clone(),
            };
            out.push(format!(
                "{shown}/{full} (being deleted): held by ProtectionRule {}{}: it is in use (`protection-manager explain {plural}/{name}` names its users)",
                r.name,
                spec.reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
            ));
        }
    }
    out
}

/// Whether the Deployment `name` exists and asks for (or has) a replica.
async fn deployment_running(client: &kube::Client, namespace: &str, name: &str) -> Result<bool> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let d = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading deployment {namespace}/{name}"))?;
    Ok(d.is_some_and(|d| {
        d.spec.and_then(|s| s.replicas).unwrap_or(1) > 0
            || d.status.and_then(|s| s.replicas).unwrap_or_default() > 0
    }))
}

/// The objects being deleted that the manager keeps, with why.
async fn held_objects(
    client: &kube::Client,
    kinds: &[&Target],
    rules: &[Rule],
) -> Result<Vec<String>> {
    let mut held = held_by_rules(client, rules).await;
    for t in kinds {
        let mut ignored = Vec::new();
        for (name, deleting) in holders(client, t, &mut ignored).await?.unwrap_or_default() {
            if deleting
                && let Some(why) = held_because(client, t.resource, t.controller, &name).await?
            {
                held.push(format!(
                    "{}/{name} (being deleted): {why}",
                    t.resource.display()
                ));
            }
        }
    }
    Ok(held)
}

/// Polls `pending` until it counts nothing or `deadline` passes.
async fn wait_while<F, Fut>(deadline: Instant, mut pending: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize>>,
{
    while pending().await? > 0 && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

fn refuse(out: &str, left: &[String], running: bool) -> anyhow::Error {
    anyhow::anyhow!(
        "{out}{} object(s) would stay stuck without the manager:\n  {}\n{}",
        left.len(),
        left.join("\n  "),
        if running {
            "Nothing was removed and the manager keeps running: it releases each one once its users go. \
             Run the uninstall again then (or `helm uninstall --no-hooks` to leave every finalizer as it is)"
        } else {
            "No manager runs to release them: once their users are gone, remove the finalizers named \
             (kubectl patch ... --type=json) or install the manager again"
        }
    )
}

pub async fn strip_all(args: &StripFinalizersArgs) -> Result<String> {
    let client = client(&args.client).await?;
    let namespace = manager_namespace(args.namespace.clone());
    protection_host::names::validate_namespace("--namespace", &namespace)?;
    let mut out = String::new();
    let mut notes = Vec::new();
    let all = targets();
    let (rule_kinds, object_kinds): (Vec<&Target>, Vec<&Target>) =
        all.iter().partition(|t| t.resource.cleared_by_deleting);
    let running = match &args.deployment {
        Some(d) => deployment_running(&client, &namespace, d).await?,
        None => false,
    };
    let mut rules = Vec::new();
    for t in &rule_kinds {
        rules.extend(rules_left(&client, t).await?.unwrap_or_default());
    }

    // 1. While the manager runs it releases the objects being deleted that
    // nothing uses; what it still holds after the wait is in use, and the
    // uninstall stops before changing anything.
    if running {
        wait_while(Instant::now() + args.wait, async || {
            let mut ignored = Vec::new();
            let mut n = held_by_rules(&client, &rules).await.len();
            for t in &object_kinds {
                n += holders(&client, t, &mut ignored)
                    .await?
                    .unwrap_or_default()
                    .iter()
                    .filter(|(_, deleting)| *deleting)
                    .count();
            }
            Ok(n)
        })
        .await?;
        let held = held_objects(&client, &object_kinds, &rules).await?;
        if !held.is_empty() {
            return Err(refuse(&out, &held, true));
        }
    }

    // 2. The rules go: their finalizers are on objects of any kind, and the
    // running manager removes them (then each rule's own).
    for t in &rule_kinds {
        let api = api(&client, t.resource, None);
        for r in &rules {
            match api.delete(&r.name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("deleting {} {}", t.resource.display(), r.name));
                }
            }
        }
    }
    if !rules.is_empty() {
        let _ = writeln!(
            out,
            "deleted {} ProtectionRule(s) ({}); the manager removes each one's finalizer from the objects it protects",
            rules.len(),
            rules
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if running {
        wait_while(Instant::now() + args.wait, async || {
            let mut n = 0;
            for t in &rule_kinds {
                n += rules_left(&client, t).await?.map_or(0, |l| l.len());
            }
            Ok(n)
        })
        .await?;
    }
    let mut left = Vec::new();
    for t in &rule_kinds {
        for r in rules_left(&client, t).await?.unwrap_or_default() {
            left.push(format!(
                "{} {}: still there with its finalizer {} (only a running manager clears a rule's finalizer from the objects it protects{})",
                t.resource.display(),
                r.name,
                t.finalizer,
                if running {
                    format!("; it did not within {:?}", args.wait)
                } else {
                    String::new()
                }
            ));
        }
    }
    if running && !left.is_empty() {
        return Err(refuse(&out, &left, true));
    }

    // 3. Stop the manager so nothing puts a finalizer back.
    if running && let Some(name) = &args.deployment {
        stop_deployment(
            &client,
            &namespace,
            name,
            Instant::now() + args.wait,
            &mut out,
        )
        .await?;
    }

    // 4. Clear what is left.
    for t in &object_kinds {
        let Some(list) = holders(&client, t, &mut notes).await? else {
            continue;
        };
        let mut cleared = 0;
        for (name, deleting) in list {
            if deleting
                && let Some(why) = held_because(&client, t.resource, t.controller, &name).await?
            {
                left.push(format!(
                    "{}/{name} (being deleted): {why}",
                    t.resource.display()
                ));
                continue;
            }
            crate::strip::strip_one(&client, t.resource, t.via, &name, t.finalizer)
                .await
                .with_context(|| {
                    format!(
                        "removing {} from {}/{name}",
                        t.finalizer,
                        t.resource.display()
                    )
                })?;
            cleared += 1;
            let _ = writeln!(
                out,
                "{}/{name}: removed {}{}",
                t.resource.display(),
                t.finalizer,
                if deleting {
                    " (being deleted, nothing uses it)"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            out,
            "{}: {} removed from {cleared} object(s)",
            t.resource.display(),
            t.finalizer
        );
    }
    if args.finalizer_profile == FinalizerProfile::Upstream {
        let names: Vec<&str> = crate::controllers::infos()
            .filter(|i| !i.finalizes.is_empty())
            .map(|i| i.finalizer.upstream)
            .filter(|f| !f.starts_with("protection-manager.io/"))
            .collect();
        let _ = writeln!(
            out,
            "finalizerProfile upstream: {} are kube-controller-manager's own names; they are left to it (its controllers remove them once back on)",
            names.join(", ")
        );
    }
    for n in notes {
        let _ = writeln!(out, "{n}");
    }
    if !left.is_empty() {
        return Err(refuse(&out, &left, false));
    }
    Ok(out)
}

/// Scales the Deployment to zero and waits (until `deadline`) for its
/// replicas to be gone; a missing Deployment is already stopped.
async fn stop_deployment(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    deadline: Instant,
    out: &mut String,
) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    match api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => {
            return Err(e).with_context(|| format!("scaling deployment {namespace}/{name} to 0"));
        }
    }
    loop {
        let d = api
            .get_opt(name)
            .await
            .with_context(|| format!("reading deployment {namespace}/{name}"))?;
        let stopped = d.as_ref().is_none_or(|d| {
            let generation = d.metadata.generation.unwrap_or_default();
            d.status.as_ref().is_some_and(|s| {
                s.observed_generation.unwrap_or_default() >= generation
                    && s.replicas.unwrap_or_default() == 0
            })
        });
        if stopped {
            let _ = writeln!(out, "deployment {namespace}/{name}: scaled to 0, stopped");
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "{out}deployment {namespace}/{name}: scaled to 0 but its pods did not stop in time; nothing was cleared (a running manager would put the finalizers back). Run the uninstall again"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

//! A controller's `explain` hook: the manager's `explain <kind>/<name>`
//! reads the lease and the events and prints; the controller crate says
//! which kind it explains and why its object is (or would be) held.
//!
//! A crate whose kinds are known only at run time (rules: the kinds its
//! ProtectionRules protect) gives an [`ExplainAny`] instead, and renders its
//! whole answer itself.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::ListParams;

use crate::events::EventView;

/// Why a hook could not explain.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ExplainError {
    /// The request that failed ("reading servicecidr a").
    pub what: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// The `map_err` of a failed request described by `what`.
pub fn failed<E: std::error::Error + Send + Sync + 'static>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> ExplainError {
    let what = what.into();
    move |source| ExplainError {
        what,
        source: Box::new(source),
    }
}

/// One reason a controller keeps (or would keep) its finalizer on the
/// object, in the words a user reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// While the object is being deleted: the whole "Why:" line ("held by
    /// pv-protection: the volume is Bound ...").
    pub why: String,
    /// Before it is deleted: the whole "If deleted:" line, when there is
    /// one ("pv-protection would hold it while ...").
    pub if_deleted: Option<String>,
}

impl Hold {
    /// `controller` holds the object because of `line`: "held by
    /// <controller>: <line>", and before the deletion "<controller> would
    /// hold it: <line>".
    pub fn said(controller: &str, line: &str) -> Hold {
        Hold {
            why: format!("held by {controller}: {line}"),
            if_deleted: Some(format!("{controller} would hold it: {line}")),
        }
    }
}

/// The holds of an in-use controller from one live read: its `users` (as
/// named, joined for `held`), else the objects it could not read (joined
/// for `cannot_tell`: whether the object is free cannot be told, so the
/// finalizer stays); none when neither.
pub fn in_use_holds(
    users: &[String],
    unreadable: &[String],
    held: impl FnOnce(&str) -> Hold,
    cannot_tell: impl FnOnce(&str) -> String,
) -> Vec<Hold> {
    if !users.is_empty() {
        vec![held(&users.join(", "))]
    } else if !unreadable.is_empty() {
        vec![Hold {
            why: cannot_tell(&unreadable.join(", ")),
            if_deleted: None,
        }]
    } else {
        Vec::new()
    }
}

/// Reads `name` through `api` for a hook (`None`: it does not exist);
/// `what` names the request in the error ("reading pvc ns/x").
pub async fn get<K>(api: &Api<K>, name: &str, what: String) -> Result<Option<K>, ExplainError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.map_err(failed(what))
}

/// What a controller says about one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Explained {
    /// The object's metadata (deletion, finalizers, uid for its events).
    pub meta: ObjectMeta,
    /// Lines about the object ("CIDRs:       10.0.0.0/24").
    pub facts: Vec<String>,
    /// Why the controller holds it (or would, were it deleted). Any hold
    /// keeps the controller's finalizer: with none, the manager calls the
    /// finalizer releasable.
    pub held: Vec<Hold>,
}

/// The rule kube-apiserver checks a kind's names with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// Most kinds.
    Dns1123Subdomain,
    /// Services.
    Dns1035Label,
}

/// The hook: reads the object `name` (in `namespace` for a namespaced kind)
/// and explains it; `Ok(None)` when it does not exist.
pub type ExplainFn = fn(
    kube::Client,
    Option<String>,
    String,
) -> BoxFuture<'static, Result<Option<Explained>, ExplainError>>;

/// The hook for many objects at once (`strip-finalizers` asks it of every
/// object it would strip): the same answers as [`ExplainFn`] for each of
/// `names` (`(namespace, name)`), in their order, from one live read of
/// what uses them instead of one per object.
pub type ExplainManyFn = fn(
    kube::Client,
    Vec<(Option<String>, String)>,
) -> BoxFuture<'static, Result<Vec<Option<Explained>>, ExplainError>>;

/// A kind a controller explains.
#[derive(Clone, Copy, Debug)]
pub struct ExplainKind {
    /// The controller that holds it.
    pub controller: &'static str,
    /// The kind's API group ("" for the core group).
    pub group: &'static str,
    /// The kind's name, as events' involvedObject.kind say it.
    pub title: &'static str,
    /// The names `explain` accepts, lowercase (kubectl's: short names first,
    /// then singular and plural).
    pub names: &'static [&'static str],
    pub namespaced: bool,
    pub name_rule: NameRule,
    pub explain: ExplainFn,
    /// Where telling each object's use apart costs a read of every user
    /// (a VolumeAttributesClass: every PVC and PV), the batch form.
    pub explain_many: Option<ExplainManyFn>,
}

impl ExplainKind {
    /// How `explain`'s messages name the kind: its first name, and its
    /// title in lowercase when that differs ("pvc (persistentvolumeclaim)").
    pub fn label(&self) -> String {
        let long = self.title.to_ascii_lowercase();
        match self.names.first() {
            Some(short) if *short != long => format!("{short} ({long})"),
            _ => long,
        }
    }
}

/// What an [`ExplainAny`] hook answers: the text to print, and whether the
/// object exists (a missing one is an error, as for kubectl).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub found: bool,
    pub text: String,
}

/// The hook for kinds known only at run time: explains `name` of
/// `resource` (in `namespace`); `Ok(None)` when the controller protects no
/// such kind.
pub type ExplainAnyFn = fn(
    kube::Client,
    String,
    Option<String>,
    String,
) -> BoxFuture<'static, Result<Option<Rendered>, ExplainError>>;

/// A controller that explains kinds known only at run time.
#[derive(Clone, Copy, Debug)]
pub struct ExplainAny {
    pub controller: &'static str,
    /// Which kinds, for `explain`'s messages ("the kinds ProtectionRules
    /// protect").
    pub kinds: &'static str,
    pub explain: ExplainAnyFn,
}

/// "95s", "3m5s", "2h4m": how long ago `since` was, at `now`.
pub fn age(since: Timestamp, now: Timestamp) -> String {
    let d: SignedDuration = now.duration_since(since);
    let secs = d.as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

/// Events about the object of kind `title`, oldest first, the way `kubectl
/// describe` finds them (core/v1, by involvedObject; events.k8s.io events
/// are the same objects). Cluster-scoped objects' events live in `default`.
/// None when they cannot be listed: explain still answers without them.
pub async fn events(client: &kube::Client, title: &str, meta: &ObjectMeta) -> Vec<EventView> {
    let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let mut selector = format!(
        "involvedObject.kind={title},involvedObject.name={}",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        assert_eq!(age(t(0), t(95)), "95s");
        assert_eq!(age(t(0), t(185)), "3m5s");
        assert_eq!(age(t(0), t(7440)), "2h4m");
        assert_eq!(age(t(10), t(0)), "0s");
    }

    #[test]
    fn a_kind_is_labelled_by_its_short_and_long_name() {
        let kind = |names: &'static [&'static str]| ExplainKind {
            controller: "c",
            group: "",
            title: "PersistentVolumeClaim",
            names,
            namespaced: true,
            name_rule: NameRule::Dns1123Subdomain,
            explain: |_, _, _| Box::pin(async { Ok(None) }),
            explain_many: None,
        };
        assert_eq!(
            kind(&["pvc", "persistentvolumeclaim"]).label(),
            "pvc (persistentvolumeclaim)"
        );
        assert_eq!(
            kind(&["persistentvolumeclaim"]).label(),
            "persistentvolumeclaim"
        );
    }
}

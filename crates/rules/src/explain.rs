//! `protection-manager explain <resource>/<name>` for the kinds rules
//! protect: which rules apply to the object, whether each one's finalizer
//! is on it, and the users holding it, read live (LIST of every user kind,
//! the rule's CEL evaluated here), so the answer does not depend on the
//! manager running.

use std::fmt::Write as _;

use futures::FutureExt;
use kube::api::{Api, DynamicObject};
use protection_core::explain::{ExplainAny, Rendered, failed};
use protection_core::finalizer::{has_finalizer, is_deleting};

use crate::decide::{UserRef, describe};
use crate::runner::{self, Kind, RuleCtx};
use crate::spec::{self, Mode};

/// The rules controller's explain hook: any kind a ProtectionRule
/// protects, known only once the rules are read.
pub const ANY: ExplainAny = ExplainAny {
    controller: crate::controller::NAME,
    kinds: "the kinds ProtectionRules protect",
    explain: |client, resource, namespace, name| {
        async move {
            let e = explain(&client, &resource, namespace.as_deref(), &name)
                .await
                .map_err(failed(format!("explaining {resource}/{name}")))?;
            Ok(e.map(|e| Rendered {
                found: e.found,
                text: render(&e),
            }))
        }
        .boxed()
    },
};

/// One rule that protects the object's kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleHold {
    pub rule: String,
    pub finalizer: String,
    pub mode: Mode,
    /// The rule's finalizer is on the object.
    pub present: bool,
    pub users: Vec<UserRef>,
    /// The rule could not be evaluated (and why).
    pub error: Option<String>,
}

/// What `explain` found.
#[derive(Clone, Debug, Default)]
pub struct Explanation {
    /// `secrets`, `widgets.example.com` (empty when no rule names the kind).
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub found: bool,
    pub deleting: bool,
    pub finalizers: Vec<String>,
    pub rules: Vec<RuleHold>,
}

fn matches(kind: &Kind, resource: &str) -> bool {
    let r = resource.to_ascii_lowercase();
    let k = kind.ar.kind.to_ascii_lowercase();
    r == kind.ar.plural || r == k || r == kind.display() || r == format!("{k}.{}", kind.ar.group)
}

/// Explains `resource/name` (in `namespace`, default `default`, for a
/// namespaced kind). `Ok(None)`: no ProtectionRule protects that kind.
pub async fn explain(
    client: &kube::Client,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Explanation>, runner::Error> {
    let rules: Api<DynamicObject> = Api::all_with(client.clone(), &spec::api_resource());
    let list = match rules.list(&Default::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(source) => {
            return Err(runner::Error::Api {
                what: "listing protectionrules".into(),
                source,
            });
        }
    };
    let mut out: Option<Explanation> = None;
    let mut object: Option<DynamicObject> = None;
    for r in list {
        let rule = r.metadata.name.clone().unwrap_or_default();
        let Ok((spec, users)) =
            spec::compile(r.data.get("spec").unwrap_or(&serde_json::Value::Null))
        else {
            continue;
        };
        let Ok(protected) = runner::resolve_protected(client, &spec.protected).await else {
            continue;
        };
        if !matches(&protected, resource) {
            continue;
        }
        let ns = protected
            .namespaced
            .then(|| namespace.unwrap_or("default").to_string());
        let e = out.get_or_insert_with(|| Explanation {
            kind: protected.display(),
            namespace: ns.clone(),
            name: name.to_string(),
            ..Default::default()
        });
        if object.is_none() && !e.found {
            let api: Api<DynamicObject> = match &ns {
                Some(n) => Api::namespaced_with(client.clone(), n, &protected.ar),
                None => Api::all_with(client.clone(), &protected.ar),
            };
            object = api
                .get_opt(name)
                .await
                .map_err(|source| runner::Error::Api {
                    what: format!("reading {} {name}", protected.display()),
                    source,
                })?;
            let Some(o) = &object else {
                return Ok(out);
            };
            e.found = true;
            e.deleting = is_deleting(&o.metadata);
            e.finalizers = o.metadata.finalizers.clone().unwrap_or_default();
        }
        let Some(o) = &object else { continue };
        let mut user_kinds = Vec::new();
        let mut error = None;
        for u in &spec.users {
            match runner::resolve(client, &u.group, &u.version, Some(&u.resource), None).await {
                Ok(k) => user_kinds.push(k),
                Err(err) => error = Some(err.to_string()),
            }
        }
        let finalizer = spec.finalizer.clone();
        let mode = spec.mode;
        let present = has_finalizer(&o.metadata, &finalizer);
        let mut held = Vec::new();
        if error.is_none() {
            let ctx = RuleCtx {
                rule: rule.clone(),
                client: client.clone(),
                spec,
                users,
                protected,
                user_kinds,
            };
            let key = (ns.clone().unwrap_or_default(), name.to_string());
            match ctx.live_round(None).await {
                Ok(live) => held = live.of(&key),
                Err(err) => error = Some(format!("listing users: {err}")),
            }
        }
        e.rules.push(RuleHold {
            rule,
            finalizer,
            mode,
            present,
            users: held,
            error,
        });
    }
    Ok(out)
}

/// The report a person reads.
pub fn render(e: &Explanation) -> String {
    let mut s = String::new();
    let object = match &e.namespace {
        Some(ns) => format!("{} {ns}/{}", e.kind, e.name),
        None => format!("{} {}", e.kind, e.name),
    };
    if !e.found {
        let _ = writeln!(s, "{object}: not found");
        return s;
    }
    let state = if e.deleting {
        "Terminating"
    } else {
        "not being deleted"
    };
    let _ = writeln!(s, "{object}: {state}");
    if e.finalizers.is_empty() {
        let _ = writeln!(s, "  finalizers: none");
    } else {
        let _ = writeln!(s, "  finalizers: {}", e.finalizers.join(", "));
    }
    for r in &e.rules {
        let mode = match r.mode {
            Mode::Enforce => "Enforce",
            Mode::Audit => "Audit",
            Mode::Deny => "Deny",
        };
        let _ = write!(s, "  rule {} ({mode}, finalizer {}): ", r.rule, r.finalizer);
        let line = match (&r.error, r.users.is_empty(), r.mode, r.present) {
            (Some(err), _, _, _) => format!("cannot tell: {err}"),
            (None, true, _, _) => "no user refers to it".to_string(),
            (None, false, Mode::Enforce | Mode::Deny, true) => {
                format!("held by {}", describe(&r.users))
            }
            (None, false, Mode::Enforce | Mode::Deny, false) => format!(
                "in use by {} (the finalizer is not on it yet: the rule's controller adds it)",
                describe(&r.users)
            ),
            (None, false, Mode::Audit, _) => {
                format!("would be held by {} (Audit: not held)", describe(&r.users))
            }
        };
        let _ = writeln!(s, "{line}");
    }
    if e.deleting && e.rules.iter().any(|r| r.present && !r.users.is_empty()) {
        let _ = writeln!(
            s,
            "  The deletion completes once no user refers to it (or the rule is deleted)."
        );
    }
    s
}

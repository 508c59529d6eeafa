//! The rule, pure: what the controller of one ProtectionRule does with one
//! protected object. Enforce is the in-use engine's decision
//! ([`protection_core::runtime::inuse::decide`], as pvc-protection's,
//! docs/upstream-semantics.md §11); Audit is the rule's own.
//!
//! Enforce:
//! 1. a deletion candidate (deleting, our finalizer present) is kept while a
//!    user in the index refers to it; no user in the index is not enough to
//!    remove (the cache may lag): the answer is [`Plan::ConfirmLive`], and
//!    the decision is taken again with live LISTs of the user kinds. No
//!    user there either: remove;
//! 2. an object not being deleted that lacks the finalizer gets it when the
//!    add phase is on (gate `InUseProtectionRules`); removal is never gated;
//! 3. otherwise nothing.
//!
//! Audit: the finalizer is never added and, if an earlier Enforce rule left
//! it, removed; an object deleted while a user refers to it is reported
//! ([`Plan::WouldHold`]), nothing held.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use protection_core::finalizer::{has_finalizer, is_deleting};
use protection_core::runtime::inuse;

/// What the controller does with one protected object: the in-use
/// engine's plan.
pub type Plan = inuse::Plan<UserRef>;

use crate::spec::Mode;

/// One user object that refers to a protected object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserRef {
    /// The user kind's resource (`pods`, `deployments.apps`).
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// Set when the rule's reference expression failed on this object: it
    /// holds every protected object in its scope (see `index`).
    pub error: Option<String>,
}

impl std::fmt::Display for UserRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.resource, self.name)?;
        } else {
            write!(f, "{}/{} in {}", self.resource, self.name, self.namespace)?;
        }
        if let Some(e) = &self.error {
            write!(f, " (its reference could not be evaluated: {e})")?;
        }
        Ok(())
    }
}

/// The users as an event note lists them (at most five, then a count).
pub fn describe(users: &[UserRef]) -> String {
    let mut parts: Vec<String> = users.iter().take(5).map(ToString::to_string).collect();
    if users.len() > 5 {
        parts.push(format!("and {} more", users.len() - 5));
    }
    parts.join(", ")
}

/// The decision for an object that exists. `cached` are the index's users,
/// `live` those of live LISTs made for this decision.
pub fn decide(
    meta: &ObjectMeta,
    finalizer: &str,
    mode: Mode,
    add_enabled: bool,
    cached: &[UserRef],
    live: Option<&[UserRef]>,
) -> Plan {
    let present = has_finalizer(meta, finalizer);
    let deleting = is_deleting(meta);
    if mode == Mode::Audit {
        if present {
            return Plan::RemoveFinalizer;
        }
        if deleting && !cached.is_empty() {
            return Plan::WouldHold(cached.to_vec());
        }
        return Plan::Nothing;
    }
    // Enforce: the engine's decision, as pv-, pvc- and vac-protection's.
    inuse::decide(meta, finalizer, add_enabled, cached, live)
}

/// The decision for an object that is gone (its DELETED event): Audit
/// reports a deletion it would have held.
pub fn decide_gone(mode: Mode, cached: &[UserRef]) -> Plan {
    if mode == Mode::Audit && !cached.is_empty() {
        Plan::WouldHold(cached.to_vec())
    } else {
        Plan::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const F: &str = "example.com/in-use";

    fn meta(finalizer: bool, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("s".into()),
            finalizers: finalizer.then(|| vec![F.to_string()]),
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        }
    }

    fn pod(n: &str) -> UserRef {
        UserRef {
            resource: "pods".into(),
            namespace: "ns".into(),
            name: n.into(),
            error: None,
        }
    }

    /// (finalizer, deleting, mode, add_enabled, cached, live, plan)
    type Row = (
        bool,
        bool,
        Mode,
        bool,
        Vec<UserRef>,
        Option<Vec<UserRef>>,
        Plan,
    );

    #[test]
    fn table() {
        use Mode::*;
        use inuse::Plan::*;
        let p = vec![pod("a")];
        // (finalizer, deleting, mode, add_enabled, cached, live) -> plan
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            (false, false, Enforce, true, vec![], None, AddFinalizer),
            (false, false, Enforce, false, vec![], None, Nothing),
            (false, false, Enforce, true, p.clone(), None, AddFinalizer),
            (true, false, Enforce, true, p.clone(), None, Nothing),
            (true, false, Enforce, false, vec![], None, Nothing),
            (true, true, Enforce, true, p.clone(), None, Keep(p.clone())),
            (true, true, Enforce, false, p.clone(), None, Keep(p.clone())),
            (true, true, Enforce, true, vec![], None, ConfirmLive),
            (true, true, Enforce, true, vec![], Some(vec![]), RemoveFinalizer),
            (true, true, Enforce, false, vec![], Some(vec![]), RemoveFinalizer),
            (true, true, Enforce, true, vec![], Some(p.clone()), Keep(p.clone())),
            (false, true, Enforce, true, p.clone(), None, Nothing),
            (false, false, Audit, true, vec![], None, Nothing),
            (true, false, Audit, true, p.clone(), None, RemoveFinalizer),
            (true, true, Audit, true, p.clone(), None, RemoveFinalizer),
            (false, true, Audit, true, p.clone(), None, WouldHold(p.clone())),
            (false, true, Audit, true, vec![], None, Nothing),
        ];
        for (i, (f, d, mode, add, cached, live, want)) in rows.into_iter().enumerate() {
            let got = decide(&meta(f, d), F, mode, add, &cached, live.as_deref());
            assert_eq!(got, want, "row {i}");
        }
        assert_eq!(decide_gone(Audit, &p), WouldHold(p.clone()));
        assert_eq!(decide_gone(Enforce, &p), Nothing);
        assert_eq!(decide_gone(Audit, &[]), Nothing);
    }

    #[test]
    fn notes_list_five_users_then_count() {
        let users: Vec<UserRef> = (0..7).map(|i| pod(&format!("p{i}"))).collect();
        assert_eq!(
            describe(&users),
            "pods/p0 in ns, pods/p1 in ns, pods/p2 in ns, pods/p3 in ns, pods/p4 in ns, and 2 more"
        );
    }
}

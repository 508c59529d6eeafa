//! The index of users: which protected objects each user object refers to
//! (while its `while` holds), and the reverse. Fed by watch events through
//! apply, delete and reset (after a re-list, so a delete missed during a
//! watch gap is corrected), as linkerd's policy indexes are.
//!
//! A user whose reference expression fails to evaluate (a rule's CEL that
//! does not fit some object) is *unresolved*: it cannot say which objects it
//! uses, so it holds every protected object in its scope (its namespace; all
//! objects when either kind is cluster-scoped) until it is fixed, changed or
//! gone. Freeing an object it may use would be the unsafe side; the rule's
//! status names the error. A namespaced user whose expression would have
//! named another namespace is the one case this scope misses.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::decide::UserRef;
use crate::runner::RefError;

/// A protected object: (namespace or "", name).
pub type ObjKey = (String, String);

/// A user object: (index of the rule's user entry, namespace, name).
pub type UserKey = (usize, String, String);

/// What a user refers to: protected objects, or the error its reference
/// expression gave.
pub type Refs = Result<Vec<ObjKey>, RefError>;

/// Whether an unresolved user in namespace `user_ns` ("" for a
/// cluster-scoped user) may refer to `obj`.
pub fn in_scope(user_ns: &str, obj: &ObjKey) -> bool {
    user_ns.is_empty() || obj.0.is_empty() || user_ns == obj.0
}

/// The protected objects whose users changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub keys: Vec<ObjKey>,
    /// Namespaces ("" = all) in which an unresolved user came or went:
    /// every protected object in scope may have changed.
    pub scopes: Vec<String>,
}

impl Changed {
    /// Adds `other` (call [`Changed::settle`] once after the last).
    fn merge(&mut self, other: Changed) {
        self.keys.extend(other.keys);
        self.scopes.extend(other.scopes);
    }

    /// Sorted, without repeats.
    fn settle(mut self) -> Changed {
        self.keys.sort();
        self.keys.dedup();
        self.scopes.sort();
        self.scopes.dedup();
        self
    }

    /// Whether `obj` is among the changed.
    pub fn covers(&self, obj: &ObjKey) -> bool {
        self.keys.binary_search(obj).is_ok() || self.scopes.iter().any(|ns| in_scope(ns, obj))
    }
}

#[derive(Debug, Default)]
pub struct Index {
    by_user: HashMap<UserKey, Vec<ObjKey>>,
    by_obj: HashMap<ObjKey, BTreeSet<UserKey>>,
    /// Users whose reference failed, with the error.
    unresolved: BTreeMap<UserKey, RefError>,
    /// The resourceVersion each user's refs were computed at (see
    /// [`Index::refs_at`]).
    versions: HashMap<UserKey, String>,
    /// The user entries' resource names, for [`UserRef`]s.
    resources: Vec<String>,
}

impl Index {
    pub fn new(resources: Vec<String>) -> Self {
        Index {
            resources,
            ..Default::default()
        }
    }

    /// Sets what `user` refers to; returns the protected objects whose
    /// users changed.
    pub fn apply(&mut self, user: UserKey, refs: Refs) -> Changed {
        self.versions.remove(&user);
        let old = self.by_user.remove(&user).unwrap_or_default();
        for o in &old {
            if let Some(s) = self.by_obj.get_mut(o) {
                s.remove(&user);
                if s.is_empty() {
                    self.by_obj.remove(o);
                }
            }
        }
        let mut changed = Changed::default();
        let was_unresolved = self.unresolved.remove(&user).is_some();
        let refs = match refs {
            Ok(refs) => refs,
            Err(e) => {
                self.unresolved.insert(user.clone(), e);
                Vec::new()
            }
        };
        if was_unresolved != self.unresolved.contains_key(&user) {
            changed.scopes.push(user.1.clone());
        }
        for o in &refs {
            self.by_obj
                .entry(o.clone())
                .or_default()
                .insert(user.clone());
        }
        changed.keys = old.iter().chain(refs.iter()).cloned().collect();
        changed.keys.sort();
        changed.keys.dedup();
        if !refs.is_empty() {
            self.by_user.insert(user, refs);
        }
        changed
    }

    pub fn delete(&mut self, user: &UserKey) -> Changed {
        self.apply(user.clone(), Ok(Vec::new()))
    }

    /// [`Index::apply`] of refs computed from `user`'s state at
    /// `resource_version` (remembered for [`Index::refs_at`]).
    pub fn apply_at(
        &mut self,
        user: UserKey,
        resource_version: Option<String>,
        refs: Refs,
    ) -> Changed {
        let changed = self.apply(user.clone(), refs);
        if let Some(rv) = resource_version {
            self.versions.insert(user, rv);
        }
        changed
    }

    /// `user`'s refs if they were computed from its state at
    /// `resource_version`: the same object state gives the same answer, so
    /// a live LIST that finds the user unchanged need not evaluate the
    /// rule's CEL again.
    pub fn refs_at(&self, user: &UserKey, resource_version: &str) -> Option<Refs> {
        if self.versions.get(user).map(String::as_str) != Some(resource_version) {
            return None;
        }
        Some(match self.unresolved.get(user) {
            Some(e) => Err(e.clone()),
            None => Ok(self.by_user.get(user).cloned().unwrap_or_default()),
        })
    }

    /// Replaces every user of entry `entry` with `all` (a re-list: each
    /// user's resourceVersion and refs).
    pub fn reset(&mut self, entry: usize, all: Vec<(UserKey, Option<String>, Refs)>) -> Changed {
        let stale: BTreeSet<UserKey> = self
            .by_user
            .keys()
            .chain(self.unresolved.keys())
            .chain(self.versions.keys())
            .filter(|k| k.0 == entry)
            .cloned()
            .collect();
        let mut changed = Changed::default();
        for k in stale {
            changed.merge(self.delete(&k));
        }
        for (k, rv, refs) in all {
            changed.merge(self.apply_at(k, rv, refs));
        }
        // Sorted once: a re-list of 20,000 users merges 20,000 changes.
        changed.settle()
    }

    fn user_ref(&self, (i, ns, name): &UserKey, error: Option<&RefError>) -> UserRef {
        UserRef {
            resource: self.resources.get(*i).cloned().unwrap_or_default(),
            namespace: ns.clone(),
            name: name.clone(),
            error: error.map(ToString::to_string),
        }
    }

    /// Users indexed: those that refer to something, and the unresolved.
    pub fn len(&self) -> usize {
        self.by_user.len() + self.unresolved.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The users referring to `obj`, and the unresolved users in its
    /// scope.
    pub fn users_of(&self, obj: &ObjKey) -> Vec<UserRef> {
        let resolved = self.by_obj.get(obj).into_iter().flatten();
        let unresolved = self.unresolved.iter().filter(|(u, _)| in_scope(&u.1, obj));
        resolved
            .map(|u| self.user_ref(u, None))
            .chain(unresolved.map(|(u, e)| self.user_ref(u, Some(e))))
            .collect()
    }

    /// How many protected objects some user refers to.
    pub fn referenced(&self) -> usize {
        self.by_obj.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: &str) -> ObjKey {
        ("ns".into(), n.into())
    }
    fn u(n: &str) -> UserKey {
        (0, "ns".into(), n.into())
    }

    fn err(message: &str) -> RefError {
        RefError {
            entry: 0,
            user: "pods/p".into(),
            message: message.into(),
        }
    }

    fn keys(c: Changed) -> Vec<ObjKey> {
        assert!(c.scopes.is_empty(), "{c:?}");
        c.keys
    }

    #[test]
    fn apply_delete_reset() {
        let mut i = Index::new(vec!["pods".into()]);
        assert_eq!(
            keys(i.apply(u("p"), Ok(vec![k("a"), k("b")]))),
            vec![k("a"), k("b")]
        );
        assert_eq!(
            keys(i.apply(u("p"), Ok(vec![k("b")]))),
            vec![k("a"), k("b")]
        );
        assert!(i.users_of(&k("a")).is_empty());
        assert_eq!(i.users_of(&k("b"))[0].name, "p");
        i.apply(u("q"), Ok(vec![k("b")]));
        assert_eq!(keys(i.delete(&u("p"))), vec![k("b")]);
        assert_eq!(i.users_of(&k("b")).len(), 1);
        // A re-list without q (deleted during a watch gap) drops it.
        assert_eq!(
            keys(i.reset(0, vec![(u("r"), None, Ok(vec![k("c")]))])),
            vec![k("b"), k("c")]
        );
        assert!(i.users_of(&k("b")).is_empty());
        assert_eq!(i.referenced(), 1);
    }

    #[test]
    fn refs_are_reused_only_at_the_resource_version_they_were_computed_at() {
        let mut i = Index::new(vec!["pods".into()]);
        i.apply_at(u("p"), Some("7".into()), Ok(vec![k("a")]));
        assert_eq!(i.refs_at(&u("p"), "7"), Some(Ok(vec![k("a")])));
        assert_eq!(i.refs_at(&u("p"), "8"), None);
        // Refs applied without a version forget the old one.
        i.apply(u("p"), Ok(vec![k("b")]));
        assert_eq!(i.refs_at(&u("p"), "7"), None);
        i.apply_at(u("q"), Some("9".into()), Err(err("boom")));
        assert_eq!(i.refs_at(&u("q"), "9"), Some(Err(err("boom"))));
        // A user with no refs is remembered too.
        i.apply_at(u("r"), Some("3".into()), Ok(vec![]));
        assert_eq!(i.refs_at(&u("r"), "3"), Some(Ok(vec![])));
        i.delete(&u("q"));
        assert_eq!(i.refs_at(&u("q"), "9"), None);
        i.reset(0, vec![(u("s"), Some("4".into()), Ok(vec![k("c")]))]);
        assert_eq!(i.refs_at(&u("r"), "3"), None);
        assert_eq!(i.refs_at(&u("s"), "4"), Some(Ok(vec![k("c")])));
    }

    #[test]
    fn a_user_whose_reference_fails_holds_everything_in_its_namespace_until_it_resolves() {
        let mut i = Index::new(vec!["pods".into()]);
        i.apply(u("p"), Ok(vec![k("a")]));
        let c = i.apply(u("p"), Err(err("no such key: volumes")));
        assert_eq!(c.keys, vec![k("a")]);
        assert_eq!(c.scopes, vec!["ns".to_string()]);
        assert!(c.covers(&k("anything")));
        assert!(!c.covers(&("other".into(), "a".into())));
        // Every object in its namespace is held, by name, with the error.
        let held = i.users_of(&k("zzz"));
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].name, "p");
        assert_eq!(
            held[0].error.as_deref(),
            Some("spec.users[0].reference on pods/p: no such key: volumes")
        );
        assert!(held[0].to_string().contains("no such key: volumes"));
        assert!(i.users_of(&("other".into(), "a".into())).is_empty());
        // A cluster-scoped protected kind is held whatever the namespace.
        assert_eq!(i.users_of(&(String::new(), "sc".into())).len(), 1);
        // Resolved again: only what it names.
        let c = i.apply(u("p"), Ok(vec![k("b")]));
        assert_eq!(c.scopes, vec!["ns".to_string()]);
        assert!(i.users_of(&k("zzz")).is_empty());
        assert_eq!(i.users_of(&k("b")).len(), 1);
        // A re-list drops an unresolved user that went during a gap.
        i.apply(u("q"), Err(err("boom")));
        let c = i.reset(0, vec![]);
        assert_eq!(c.scopes, vec!["ns".to_string()]);
        assert!(i.users_of(&k("zzz")).is_empty());
    }
}

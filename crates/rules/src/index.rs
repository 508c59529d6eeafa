//! The index of users: which protected objects each user object refers to
//! (while its `while` holds), and the reverse. Fed by watch events through
//! apply, delete and reset (after a re-list, so a delete missed during a
//! watch gap is corrected), as linkerd's policy indexes are.

use std::collections::{BTreeSet, HashMap};

use crate::decide::UserRef;

/// A protected object: (namespace or "", name).
pub type ObjKey = (String, String);

/// A user object: (index of the rule's user entry, namespace, name).
pub type UserKey = (usize, String, String);

#[derive(Debug, Default)]
pub struct Index {
    by_user: HashMap<UserKey, Vec<ObjKey>>,
    by_obj: HashMap<ObjKey, BTreeSet<UserKey>>,
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
    pub fn apply(&mut self, user: UserKey, refs: Vec<ObjKey>) -> Vec<ObjKey> {
        let old = self.by_user.remove(&user).unwrap_or_default();
        for o in &old {
            if let Some(s) = self.by_obj.get_mut(o) {
                s.remove(&user);
                if s.is_empty() {
                    self.by_obj.remove(o);
                }
            }
        }
        for o in &refs {
            self.by_obj
                .entry(o.clone())
                .or_default()
                .insert(user.clone());
        }
        let mut changed: Vec<ObjKey> = old.iter().chain(refs.iter()).cloned().collect();
        changed.sort();
        changed.dedup();
        if !refs.is_empty() {
            self.by_user.insert(user, refs);
        }
        changed
    }

    pub fn delete(&mut self, user: &UserKey) -> Vec<ObjKey> {
        self.apply(user.clone(), Vec::new())
    }

    /// Replaces every user of entry `entry` with `all` (a re-list).
    pub fn reset(&mut self, entry: usize, all: Vec<(UserKey, Vec<ObjKey>)>) -> Vec<ObjKey> {
        let stale: Vec<UserKey> = self
            .by_user
            .keys()
            .filter(|k| k.0 == entry)
            .cloned()
            .collect();
        let mut changed = Vec::new();
        for k in stale {
            changed.extend(self.delete(&k));
        }
        for (k, refs) in all {
            changed.extend(self.apply(k, refs));
        }
        changed.sort();
        changed.dedup();
        changed
    }

    /// The users referring to `obj`.
    pub fn users_of(&self, obj: &ObjKey) -> Vec<UserRef> {
        self.by_obj
            .get(obj)
            .into_iter()
            .flatten()
            .map(|(i, ns, name)| UserRef {
                resource: self.resources.get(*i).cloned().unwrap_or_default(),
                namespace: ns.clone(),
                name: name.clone(),
            })
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

    #[test]
    fn apply_delete_reset() {
        let mut i = Index::new(vec!["pods".into()]);
        assert_eq!(i.apply(u("p"), vec![k("a"), k("b")]), vec![k("a"), k("b")]);
        assert_eq!(i.apply(u("p"), vec![k("b")]), vec![k("a"), k("b")]);
        assert!(i.users_of(&k("a")).is_empty());
        assert_eq!(i.users_of(&k("b"))[0].name, "p");
        i.apply(u("q"), vec![k("b")]);
        assert_eq!(i.delete(&u("p")), vec![k("b")]);
        assert_eq!(i.users_of(&k("b")).len(), 1);
        // A re-list without q (deleted during a watch gap) drops it.
        assert_eq!(
            i.reset(0, vec![(u("r"), vec![k("c")])]),
            vec![k("b"), k("c")]
        );
        assert!(i.users_of(&k("b")).is_empty());
        assert_eq!(i.referenced(), 1);
    }
}

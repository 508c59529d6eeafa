//! The users index of an in-use controller: which user objects refer to
//! which protected objects, fed by a user watch through three verbs, as
//! kubert's indexes are: *apply* (added or updated), *delete*, and *reset*
//! (a re-list: what it does not list again is gone, so a delete missed
//! during a watch gap is corrected).
//!
//! Each verb returns the protected objects to re-check, by the upstream
//! handlers' rule: an update re-checks what the old object named and the new
//! one no longer does; a delete re-checks everything the object named; an
//! add re-checks nothing (a new user can only keep an object); a reset
//! re-checks what vanished users named.
//!
//! Protected objects are keyed by their store key (`name`, or
//! `namespace/name`); users by `U`, whose [`UserKey::group`] says which
//! watch it comes from (a reset of one watch never drops another's users).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;

/// A user's key in the index.
pub trait UserKey: Clone + Ord + Hash + Debug {
    /// The watch the user comes from (its kind).
    type Group: Copy + Eq + Hash + Debug;
    fn group(&self) -> Self::Group;
}

/// Who refers to which protected object, and how (`R`: the field or path
/// through which the user refers, kept for the event note).
#[derive(Debug)]
pub struct UsersIndex<U: UserKey, R> {
    by_user: HashMap<U, Vec<(String, R)>>,
    by_protected: HashMap<String, BTreeSet<(U, R)>>,
    resets: HashMap<U::Group, HashSet<U>>,
}

impl<U: UserKey, R> Default for UsersIndex<U, R> {
    fn default() -> Self {
        UsersIndex {
            by_user: HashMap::new(),
            by_protected: HashMap::new(),
            resets: HashMap::new(),
        }
    }
}

impl<U: UserKey, R: Clone + Ord + Debug> UsersIndex<U, R> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The users of the protected object `key`, with how each refers to it.
    pub fn users(&self, key: &str) -> Vec<(U, R)> {
        self.by_protected
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Users indexed (those that refer to at least one protected object).
    pub fn len(&self) -> usize {
        self.by_user.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_user.is_empty()
    }

    fn set(&mut self, user: U, refs: Vec<(String, R)>) -> BTreeSet<String> {
        let old = self.by_user.remove(&user).unwrap_or_default();
        for (key, how) in &old {
            if let Some(s) = self.by_protected.get_mut(key) {
                s.remove(&(user.clone(), how.clone()));
                if s.is_empty() {
                    self.by_protected.remove(key);
                }
            }
        }
        let still: HashSet<&str> = refs.iter().map(|(k, _)| k.as_str()).collect();
        let freed: BTreeSet<String> = old
            .iter()
            .filter(|(k, _)| !still.contains(k.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        for (key, how) in &refs {
            self.by_protected
                .entry(key.clone())
                .or_default()
                .insert((user.clone(), how.clone()));
        }
        if !refs.is_empty() {
            self.by_user.insert(user, refs);
        }
        freed
    }

    /// A user was added or updated and now refers to `refs`: the protected
    /// objects it no longer refers to.
    pub fn apply(&mut self, user: U, refs: Vec<(String, R)>) -> BTreeSet<String> {
        if let Some(seen) = self.resets.get_mut(&user.group()) {
            seen.insert(user.clone());
        }
        self.set(user, refs)
    }

    /// A user was deleted; `refs` are what the deleted object named (upstream
    /// handlers use the deleted object's fields; so do we, and the index's
    /// too): every protected object either names.
    pub fn delete(&mut self, user: U, refs: Vec<(String, R)>) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = refs.into_iter().map(|(k, _)| k).collect();
        out.extend(self.set(user, Vec::new()));
        out
    }

    /// A re-list of `group` starts: what it does not list again is gone.
    pub fn begin_reset(&mut self, group: U::Group) {
        self.resets.insert(group, HashSet::new());
    }

    /// The re-list of `group` is complete: its users that it did not list
    /// are dropped; returns the protected objects they referred to.
    pub fn finish_reset(&mut self, group: U::Group) -> BTreeSet<String> {
        let seen = self.resets.remove(&group).unwrap_or_default();
        let gone: Vec<U> = self
            .by_user
            .keys()
            .filter(|u| u.group() == group && !seen.contains(*u))
            .cloned()
            .collect();
        let mut out = BTreeSet::new();
        for user in gone {
            out.extend(self.set(user, Vec::new()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct User(char, &'static str);

    impl UserKey for User {
        type Group = char;
        fn group(&self) -> char {
            self.0
        }
    }

    fn refs(keys: &[&str]) -> Vec<(String, u8)> {
        keys.iter().map(|k| (k.to_string(), 0)).collect()
    }

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn an_update_frees_what_the_user_no_longer_names() {
        let mut ix = UsersIndex::new();
        assert_eq!(ix.apply(User('a', "u"), refs(&["x", "y"])), set(&[]));
        assert_eq!(ix.users("x"), vec![(User('a', "u"), 0)]);
        assert_eq!(ix.apply(User('a', "u"), refs(&["y"])), set(&["x"]));
        assert!(ix.users("x").is_empty());
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.apply(User('a', "u"), refs(&[])), set(&["y"]));
        assert!(ix.is_empty(), "a user naming nothing is not kept");
    }

    #[test]
    fn a_delete_rechecks_what_either_the_object_or_the_index_named() {
        let mut ix = UsersIndex::new();
        ix.apply(User('a', "u"), refs(&["x"]));
        assert_eq!(ix.delete(User('a', "u"), refs(&["z"])), set(&["x", "z"]));
        assert!(ix.users("x").is_empty());
    }

    #[test]
    fn a_reset_drops_only_its_own_group_s_vanished_users() {
        let mut ix = UsersIndex::new();
        ix.apply(User('a', "kept"), refs(&["x"]));
        ix.apply(User('a', "gone"), refs(&["y"]));
        ix.apply(User('b', "other"), refs(&["y"]));
        ix.begin_reset('a');
        ix.apply(User('a', "kept"), refs(&["x"]));
        assert_eq!(ix.finish_reset('a'), set(&["y"]));
        assert_eq!(ix.users("y"), vec![(User('b', "other"), 0)]);
        assert_eq!(ix.users("x"), vec![(User('a', "kept"), 0)]);
    }
}

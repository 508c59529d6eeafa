//! The class → users index (upstream's `volumeAttributesClassName` indexers
//! on the PVC and PV informers), fed by the PVC and PV watches through
//! apply, delete and re-list (docs/upstream-semantics.md §10.2).
//!
//! Each verb returns the classes to re-check, by upstream's handler rules:
//! an update enqueues the classes the old object named and the new one no
//! longer does (`pvcUpdated`/`pvUpdated`); a delete enqueues every class the
//! object named (`pvcDeleted`/`pvDeleted`); an add enqueues nothing (a new
//! user can only keep a class). A re-list additionally enqueues the classes
//! of users that vanished during the watch gap (a delete upstream only sees
//! on its next resync).

use std::collections::BTreeSet;

use protection_core::runtime::inuse::Feed;
use protection_core::runtime::users;

use crate::objects::{Field, PvRefs, PvcRefs};

/// Whether a user is a claim or a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UserKind {
    Pvc,
    Pv,
}

/// One object that names a class, and how.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VacUse {
    pub kind: UserKind,
    /// `namespace/name` of a PVC, `name` of a PV.
    pub name: String,
    pub field: Field,
}

impl VacUse {
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            UserKind::Pvc => "PersistentVolumeClaim",
            UserKind::Pv => "PersistentVolume",
        };
        format!("{kind} {} ({})", self.name, self.field.path())
    }
}

/// A user's key in the index: its kind (the watch it comes from) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserKey(UserKind, String);

impl protection_core::runtime::users::UserKey for UserKey {
    type Group = UserKind;
    fn group(&self) -> UserKind {
        self.0
    }
}

/// Who uses which class: core's users index, keyed by class name.
#[derive(Debug, Default)]
pub struct UsersIndex(users::UsersIndex<UserKey, Field>);

fn pvc_key(pvc: &PvcRefs) -> String {
    let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
    let name = pvc.metadata.name.as_deref().unwrap_or_default();
    format!("{ns}/{name}")
}

fn pv_key(pv: &PvRefs) -> String {
    pv.metadata.name.clone().unwrap_or_default()
}

impl UsersIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// The users of `class`.
    pub fn users(&self, class: &str) -> Vec<VacUse> {
        self.0
            .users(class)
            .into_iter()
            .map(|(UserKey(kind, name), field)| VacUse { kind, name, field })
            .collect()
    }

    /// Users indexed (PVCs and PVs that name at least one class).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A PVC was added or updated: the classes it no longer names.
    pub fn apply_pvc(&mut self, pvc: &PvcRefs) -> BTreeSet<String> {
        Feed::apply(self, pvc)
    }

    /// A PV was added or updated: the classes it no longer names.
    pub fn apply_pv(&mut self, pv: &PvRefs) -> BTreeSet<String> {
        Feed::apply(self, pv)
    }

    /// A PVC was deleted: every class it named (upstream `pvcDeleted` uses
    /// the deleted object's fields; so do we, and the index's too).
    pub fn delete_pvc(&mut self, pvc: &PvcRefs) -> BTreeSet<String> {
        Feed::delete(self, pvc)
    }

    /// A PV was deleted: every class it named.
    pub fn delete_pv(&mut self, pv: &PvRefs) -> BTreeSet<String> {
        Feed::delete(self, pv)
    }

    /// A re-list of `kind` starts: what it does not list again is gone.
    pub fn begin_relist(&mut self, kind: UserKind) {
        self.0.begin_reset(kind);
    }

    /// The re-list of `kind` is complete: users it did not list are dropped;
    /// returns the classes they named.
    pub fn finish_relist(&mut self, kind: UserKind) -> BTreeSet<String> {
        self.0.finish_reset(kind)
    }
}

/// A PVC or PV as the index takes it: its kind, its key and the classes it
/// names.
pub trait Refs {
    const KIND: UserKind;
    fn key(&self) -> String;
    fn classes(&self) -> Vec<(String, Field)>;
}

impl Refs for PvcRefs {
    const KIND: UserKind = UserKind::Pvc;
    fn key(&self) -> String {
        pvc_key(self)
    }
    fn classes(&self) -> Vec<(String, Field)> {
        PvcRefs::classes(self)
    }
}

impl Refs for PvRefs {
    const KIND: UserKind = UserKind::Pv;
    fn key(&self) -> String {
        pv_key(self)
    }
    fn classes(&self) -> Vec<(String, Field)> {
        PvRefs::classes(self)
    }
}

impl<T: Refs> Feed<T> for UsersIndex {
    fn apply(&mut self, user: &T) -> BTreeSet<String> {
        self.0.apply(UserKey(T::KIND, user.key()), user.classes())
    }
    fn delete(&mut self, user: &T) -> BTreeSet<String> {
        self.0.delete(UserKey(T::KIND, user.key()), user.classes())
    }
    fn begin_reset(&mut self) {
        self.begin_relist(T::KIND);
    }
    fn finish_reset(&mut self) -> BTreeSet<String> {
        self.finish_relist(T::KIND)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The users of `class` in a live list of PVCs and PVs (the confirmation
/// before an irreversible removal).
pub fn live_users(pvcs: &[PvcRefs], pvs: &[PvRefs], class: &str) -> Vec<VacUse> {
    let mut out = Vec::new();
    for pvc in pvcs {
        for (c, field) in pvc.classes() {
            if c == class {
                out.push(VacUse {
                    kind: UserKind::Pvc,
                    name: pvc_key(pvc),
                    field,
                });
            }
        }
    }
    for pv in pvs {
        for (c, field) in pv.classes() {
            if c == class {
                out.push(VacUse {
                    kind: UserKind::Pv,
                    name: pv_key(pv),
                    field,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pvc(name: &str, spec: Option<&str>, current: Option<&str>, target: Option<&str>) -> PvcRefs {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"volumeAttributesClassName": spec},
            "status": {
                "currentVolumeAttributesClassName": current,
                "modifyVolumeStatus": target.map(|t| json!({"targetVolumeAttributesClassName": t}))
            }
        }))
        .unwrap()
    }

    fn pv(name: &str, class: Option<&str>) -> PvRefs {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"volumeAttributesClassName": class}
        }))
        .unwrap()
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// upstream's handler rules, one row per upstream PV/PVC event case.
    #[test]
    fn enqueue_rules_match_upstream_handlers() {
        let mut ix = UsersIndex::new();
        assert_eq!(
            ix.apply_pvc(&pvc("pvc1", Some("vac1"), None, None)),
            set(&[]),
            "add: nothing"
        );
        assert_eq!(ix.users("vac1").len(), 1);
        // pvc changes vac -> the old one is re-checked.
        assert_eq!(
            ix.apply_pvc(&pvc("pvc1", Some("vac2"), None, None)),
            set(&["vac1"])
        );
        assert!(ix.users("vac1").is_empty());
        // pvc changes vac but its status still holds the old one -> not enqueued.
        ix.apply_pvc(&pvc("pvc1", Some("vac1"), None, None));
        assert_eq!(
            ix.apply_pvc(&pvc("pvc1", Some("vac2"), Some("vac1"), None)),
            set(&[])
        );
        assert_eq!(ix.users("vac1")[0].field, Field::Current);
        assert_eq!(
            ix.apply_pvc(&pvc("pvc1", Some("vac2"), None, Some("vac1"))),
            set(&[])
        );
        assert_eq!(ix.users("vac1")[0].field, Field::Target);
        // pvc deleted -> every class it named.
        assert_eq!(
            ix.delete_pvc(&pvc("pvc1", Some("vac2"), None, Some("vac1"))),
            set(&["vac1", "vac2"])
        );
        assert!(ix.is_empty());
        // pv changes vac, pv deleted.
        ix.apply_pv(&pv("pv1", Some("vac1")));
        assert_eq!(ix.apply_pv(&pv("pv1", Some("vac2"))), set(&["vac1"]));
        assert_eq!(ix.delete_pv(&pv("pv1", Some("vac2"))), set(&["vac2"]));
        assert!(ix.is_empty());
    }

    #[test]
    fn a_relist_drops_users_deleted_during_the_gap_and_rechecks_their_classes() {
        let mut ix = UsersIndex::new();
        ix.apply_pvc(&pvc("a", Some("gold"), None, None));
        ix.apply_pvc(&pvc("b", Some("silver"), None, None));
        ix.apply_pv(&pv("pv1", Some("gold")));
        ix.begin_relist(UserKind::Pvc);
        ix.apply_pvc(&pvc("b", Some("silver"), None, None));
        assert_eq!(ix.finish_relist(UserKind::Pvc), set(&["gold"]));
        assert_eq!(
            ix.users("gold").len(),
            1,
            "the PV is untouched by a PVC re-list"
        );
        assert_eq!(ix.users("gold")[0].kind, UserKind::Pv);
    }

    #[test]
    fn live_users_read_every_field() {
        let pvcs = [
            pvc("a", Some("x"), None, None),
            pvc("b", None, Some("gold"), None),
            pvc("c", None, None, Some("gold")),
        ];
        let pvs = [pv("pv1", Some("gold")), pv("pv2", None)];
        let u = live_users(&pvcs, &pvs, "gold");
        let names: Vec<String> = u.iter().map(VacUse::describe).collect();
        assert_eq!(
            names,
            vec![
                "PersistentVolumeClaim ns/b (status.currentVolumeAttributesClassName)",
                "PersistentVolumeClaim ns/c (status.modifyVolumeStatus.targetVolumeAttributesClassName)",
                "PersistentVolume pv1 (spec.volumeAttributesClassName)",
            ]
        );
        assert!(live_users(&pvcs, &pvs, "none").is_empty());
    }
}

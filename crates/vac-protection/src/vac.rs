//! The vac-protection rule, pure: upstream
//! `pkg/controller/volume/vacprotection` `processVAC`
//! (docs/upstream-semantics.md §10.3).
//!
//! 1. A deletion candidate (deletionTimestamp set, our finalizer present) is
//!    in use while any PVC names it in `spec.volumeAttributesClassName`,
//!    `status.currentVolumeAttributesClassName` or
//!    `status.modifyVolumeStatus.targetVolumeAttributesClassName`, or any PV
//!    in `spec.volumeAttributesClassName`. In use → keep the finalizer.
//! 2. No user in the cache → confirm with a live LIST of PVCs and PVs
//!    ([`VacPlan::ConfirmLive`]); only when the live answer has no user
//!    either is the finalizer removed. (Deviation: upstream decides from its
//!    informers alone and documents the early-removal race this closes;
//!    §9.)
//! 3. A class that is not being deleted and lacks the finalizer gets it when
//!    the add gate (`VolumeAttributesClass` at the running or emulated
//!    release) is on. Removal is never gated.
//! 4. Otherwise nothing.

use protection_core::runtime::inuse::{self, Plan};

use crate::index::VacUse;
use crate::objects::{ApiVersion, Vac};

/// What the controller does with one VolumeAttributesClass: the in-use
/// engine's plan.
pub type VacPlan = Plan<VacUse>;

/// The decision for `vac`: `cached` are its users in the PVC/PV caches,
/// `live` those of a live list started after the cache was read (`None`
/// before one was made). The in-use engine's decision
/// ([`inuse::decide`]); this is the rule's name for it.
pub fn decide<V: ApiVersion>(
    vac: &Vac<V>,
    finalizer: &str,
    add_enabled: bool,
    cached: &[VacUse],
    live: Option<&[VacUse]>,
) -> VacPlan {
    inuse::decide(&vac.metadata, finalizer, add_enabled, cached, live)
}

/// At most this many users are named in an event note.
const NAMED: usize = 5;

/// The note of the event that says why a class's deletion is held.
pub fn held_note(class: &str, users: &[VacUse]) -> String {
    let mut names: Vec<String> = users.iter().take(NAMED).map(VacUse::describe).collect();
    if users.len() > NAMED {
        names.push(format!("and {} more", users.len() - NAMED));
    }
    format!(
        "VolumeAttributesClass {class} is in use by {}; deletion waits until no PersistentVolumeClaim or PersistentVolume refers to it",
        names.join(", ")
    )
}

/// The note of the event that says a held class deletion was released.
pub fn released_note(class: &str, finalizer: &str) -> String {
    format!(
        "VolumeAttributesClass {class} is no longer used by any PersistentVolumeClaim or PersistentVolume; removed finalizer {finalizer} so its deletion can complete"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{UsersIndex, live_users};
    use crate::objects::{Field, PvRefs, PvcRefs, V1};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    const F: &str = "kubernetes.io/vac-protection";

    /// upstream `MakeVolumeAttributesClass().Name("vac1")`.
    fn vac1() -> Vac<V1> {
        Vac::new(ObjectMeta {
            name: Some("vac1".into()),
            uid: Some("u1".into()),
            resource_version: Some("1".into()),
            ..Default::default()
        })
    }
    /// `.Finalizer(VACProtectionFinalizer)`.
    fn with_finalizer(mut v: Vac<V1>) -> Vac<V1> {
        v.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(F.into());
        v
    }
    /// `.Terminating()`.
    fn terminating(mut v: Vac<V1>) -> Vac<V1> {
        v.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        v
    }

    fn pvc(name: &str, spec: &str, current: Option<&str>, target: Option<&str>) -> PvcRefs {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"volumeAttributesClassName": spec},
            "status": {
                "currentVolumeAttributesClassName": current,
                "modifyVolumeStatus": target.map(|t| json!({"targetVolumeAttributesClassName": t}))
            }
        }))
        .unwrap()
    }
    fn pv(name: &str, class: &str) -> PvRefs {
        serde_json::from_value(json!({
            "metadata": {"name": name}, "spec": {"volumeAttributesClassName": class}
        }))
        .unwrap()
    }

    /// The client actions of upstream's table.
    #[derive(Debug, PartialEq)]
    enum Act {
        /// Our live confirmation (upstream has none: see the module doc).
        ListPvcsAndPvs,
        /// `NewUpdateAction(vacGVR, "", vac1WithFinalizer)`.
        AddFinalizer,
        /// `NewUpdateAction(vacGVR, "", vac1Terminating)`.
        RemoveFinalizer,
    }

    /// A PVC or PV event of upstream's table.
    enum Ev {
        None,
        PvcUpdated(PvcRefs, PvcRefs),
        PvcDeleted(PvcRefs),
        PvUpdated(PvRefs, PvRefs),
        PvDeleted(PvRefs),
    }

    struct Row {
        name: &'static str,
        vac: Vac<V1>,
        gate: bool,
        /// PVCs and PVs in the API server and the caches (`initialObjects`).
        pvcs: Vec<PvcRefs>,
        pvs: Vec<PvRefs>,
        event: Ev,
        want: Vec<Act>,
    }

    fn row(name: &'static str, vac: Vac<V1>, want: Vec<Act>) -> Row {
        Row {
            name,
            vac,
            gate: true,
            pvcs: vec![],
            pvs: vec![],
            event: Ev::None,
            want,
        }
    }

    /// Feeds the caches, plays the event through the index's enqueue rules
    /// and runs the enqueued class through the two-tier decision as the
    /// controller does, recording the requests made.
    fn process(r: Row) -> Vec<Act> {
        let mut ix = UsersIndex::new();
        let (mut pvcs, mut pvs) = (r.pvcs, r.pvs);
        for p in &pvcs {
            ix.apply_pvc(p);
        }
        for p in &pvs {
            ix.apply_pv(p);
        }
        let enqueued = match r.event {
            // A class event enqueues it when it needs work (upstream
            // `vacAddedUpdated`'s filter).
            Ev::None => true,
            Ev::PvcUpdated(old, new) => {
                ix.apply_pvc(&old);
                pvcs.push(new.clone());
                ix.apply_pvc(&new).contains("vac1")
            }
            Ev::PvcDeleted(old) => {
                ix.apply_pvc(&old);
                ix.delete_pvc(&old).contains("vac1")
            }
            Ev::PvUpdated(old, new) => {
                ix.apply_pv(&old);
                pvs.push(new.clone());
                ix.apply_pv(&new).contains("vac1")
            }
            Ev::PvDeleted(old) => {
                ix.apply_pv(&old);
                ix.delete_pv(&old).contains("vac1")
            }
        };
        if !enqueued {
            return vec![];
        }
        let cached = ix.users("vac1");
        let mut acts = vec![];
        let mut plan = decide(&r.vac, F, r.gate, &cached, None);
        if plan == VacPlan::ConfirmLive {
            acts.push(Act::ListPvcsAndPvs);
            let live = live_users(&pvcs, &pvs, "vac1");
            plan = decide(&r.vac, F, r.gate, &cached, Some(&live));
        }
        match plan {
            VacPlan::AddFinalizer => acts.push(Act::AddFinalizer),
            VacPlan::RemoveFinalizer => acts.push(Act::RemoveFinalizer),
            VacPlan::Keep(_) | VacPlan::Nothing => {}
            VacPlan::ConfirmLive => panic!("{}: a live answer is final", r.name),
        }
        acts
    }

    /// Every row of upstream `TestVACProtectionController`, then the gate
    /// rows and edge cases. Upstream's "fails -> controller retries" rows
    /// repeat the same request per attempt; one attempt is the row, the
    /// retry loop is covered against kube-sim.
    #[test]
    fn decision_table() {
        use Act::*;
        let d = || terminating(with_finalizer(vac1()));
        let rows = vec![
            // VAC events.
            row(
                "upstream: VAC without finalizer -> finalizer is added",
                vac1(),
                vec![AddFinalizer],
            ),
            row(
                "upstream: VAC with finalizer -> no action",
                with_finalizer(vac1()),
                vec![],
            ),
            row(
                "upstream: saving VAC finalizer fails -> controller retries (one attempt)",
                vac1(),
                vec![AddFinalizer],
            ),
            row(
                "upstream: deleted VAC with finalizer -> finalizer is removed",
                d(),
                vec![ListPvcsAndPvs, RemoveFinalizer],
            ),
            row(
                "upstream: finalizer removal fails -> controller retries (one attempt)",
                d(),
                vec![ListPvcsAndPvs, RemoveFinalizer],
            ),
            Row {
                pvs: vec![pv("pv1", "vac1")],
                ..row(
                    "upstream: deleted VAC with finalizer but it's referenced by a PV -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            Row {
                pvcs: vec![pvc("pvc1", "vac1", None, None)],
                ..row(
                    "upstream: deleted VAC with finalizer but it's referenced by a PVC -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            // PV events.
            Row {
                event: Ev::PvUpdated(pv("pv1", "vac1"), pv("pv1", "vac2")),
                ..row(
                    "upstream: pv changes vac and deleted VAC with finalizer -> finalizer is removed",
                    d(),
                    vec![ListPvcsAndPvs, RemoveFinalizer],
                )
            },
            Row {
                event: Ev::PvDeleted(pv("pv1", "vac1")),
                ..row(
                    "upstream: pv is deleted and deleted VAC with finalizer -> finalizer is removed",
                    d(),
                    vec![ListPvcsAndPvs, RemoveFinalizer],
                )
            },
            Row {
                pvs: vec![pv("pv2", "vac1")],
                event: Ev::PvDeleted(pv("pv1", "vac1")),
                ..row(
                    "upstream: pv is deleted but other pv still holds terminating vac -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            Row {
                pvcs: vec![pvc("pvc1", "vac1", None, None)],
                event: Ev::PvDeleted(pv("pv1", "vac1")),
                ..row(
                    "upstream: pv is deleted but pvc still holds terminating vac -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            // PVC events.
            Row {
                event: Ev::PvcUpdated(
                    pvc("pvc1", "vac1", None, None),
                    pvc("pvc1", "vac2", None, None),
                ),
                ..row(
                    "upstream: pvc changes vac and deleted VAC with finalizer -> finalizer is removed",
                    d(),
                    vec![ListPvcsAndPvs, RemoveFinalizer],
                )
            },
            Row {
                event: Ev::PvcUpdated(
                    pvc("pvc1", "vac1", None, None),
                    pvc("pvc1", "vac2", Some("vac1"), None),
                ),
                ..row(
                    "upstream: pvc changes vac but its status still holds terminating vac -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            Row {
                event: Ev::PvcUpdated(
                    pvc("pvc1", "vac1", None, None),
                    pvc("pvc1", "vac2", None, Some("vac1")),
                ),
                ..row(
                    "upstream: pvc changes vac but its target status still holds terminating vac -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            Row {
                pvcs: vec![pvc("pvc2", "vac1", None, None)],
                event: Ev::PvcDeleted(pvc("pvc1", "vac1", None, None)),
                ..row(
                    "upstream: pvc is deleted but other pvc still holds terminating vac -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            Row {
                pvs: vec![pv("pv1", "vac1")],
                event: Ev::PvcDeleted(pvc("pvc1", "vac1", None, None)),
                ..row(
                    "upstream: pvc is deleted but pv still holds terminating vac -> finalizer is not removed",
                    d(),
                    vec![],
                )
            },
            // The add gate (the project's phased rollout; upstream gates the
            // whole controller instead).
            Row {
                gate: false,
                ..row(
                    "gate off: VAC without finalizer -> finalizer is not added",
                    vac1(),
                    vec![],
                )
            },
            Row {
                gate: false,
                ..row(
                    "gate off: deleted VAC with finalizer -> finalizer is still removed",
                    d(),
                    vec![ListPvcsAndPvs, RemoveFinalizer],
                )
            },
            Row {
                gate: false,
                pvcs: vec![pvc("pvc1", "vac1", None, None)],
                ..row("gate off: deleted VAC in use -> kept", d(), vec![])
            },
            // Edge cases.
            row(
                "deleted VAC without our finalizer -> nothing",
                terminating(vac1()),
                vec![],
            ),
            Row {
                pvcs: vec![pvc("pvc1", "other", None, None)],
                pvs: vec![pv("pv1", "other")],
                ..row(
                    "users of other classes do not count",
                    d(),
                    vec![ListPvcsAndPvs, RemoveFinalizer],
                )
            },
            Row {
                pvcs: vec![pvc("pvc1", "", None, Some("vac1"))],
                ..row("a pending modification to the class holds it", d(), vec![])
            },
        ];
        for r in rows {
            let name = r.name;
            let want: Vec<String> = r.want.iter().map(|a| format!("{a:?}")).collect();
            let got: Vec<String> = process(r).iter().map(|a| format!("{a:?}")).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_user_only_the_live_list_sees_keeps_the_class() {
        let d = terminating(with_finalizer(vac1()));
        let late = VacUse {
            kind: crate::index::UserKind::Pvc,
            name: "default/new".into(),
            field: Field::Spec,
        };
        assert_eq!(decide(&d, F, true, &[], None), VacPlan::ConfirmLive);
        assert_eq!(
            decide(&d, F, true, &[], Some(std::slice::from_ref(&late))),
            VacPlan::Keep(vec![late])
        );
        assert_eq!(
            decide(&d, F, true, &[], Some(&[])),
            VacPlan::RemoveFinalizer
        );
    }

    #[test]
    fn held_note_names_users_and_fields() {
        let u = |n: &str, field| VacUse {
            kind: crate::index::UserKind::Pvc,
            name: format!("shop/{n}"),
            field,
        };
        assert_eq!(
            held_note("gold", &[u("data", Field::Target)]),
            "VolumeAttributesClass gold is in use by PersistentVolumeClaim shop/data (status.modifyVolumeStatus.targetVolumeAttributesClassName); deletion waits until no PersistentVolumeClaim or PersistentVolume refers to it"
        );
        let many: Vec<_> = (0..8).map(|i| u(&format!("p{i}"), Field::Spec)).collect();
        let n = held_note("gold", &many);
        assert!(
            n.contains("shop/p4 (spec.volumeAttributesClassName), and 3 more"),
            "{n}"
        );
        assert!(released_note("gold", F).contains(F));
    }
}

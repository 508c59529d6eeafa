//! The pv-protection rule, pure: `pkg/controller/volume/pvprotection`
//! `processPV`.
//!
//! 1. A deletion candidate (deletionTimestamp set, our finalizer present) is
//!    in use iff `status.phase == Bound`; nothing else is consulted (no
//!    claimRef check, no PVC or pod lookup). Not in use → remove the finalizer.
//!    In use → keep it (upstream logs "Keeping PV because it is being used").
//! 2. An object that is not being deleted and lacks the finalizer gets it,
//!    when the add phase (StorageObjectInUseProtection at the running or
//!    emulated version) is on. Removal is never gated.
//! 3. Otherwise nothing.

use protection_core::runtime::inuse::{self, Plan};

use crate::objects::PvFacts;

/// What the controller does with one PersistentVolume: the in-use engine's
/// plan, whose users are the PV's own binding (never
/// [`Plan::ConfirmLive`]: the object is the answer).
pub type PvPlan = Plan<PvInUse>;

/// Why a PV is in use, for the event that explains a held deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvInUse {
    /// `spec.claimRef` as `namespace/name`, when set.
    pub claim: Option<String>,
}

/// upstream's "in use" for a PV: `status.phase == Bound`.
pub fn is_bound(pv: &PvFacts) -> bool {
    pv.status.phase.as_deref() == Some("Bound")
}

/// `spec.claimRef` as `namespace/name` (`name` without a namespace).
pub fn claim_of(pv: &PvFacts) -> Option<String> {
    pv.spec.claim_ref.as_ref().and_then(|c| {
        let name = c.name.as_deref()?;
        Some(match c.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name.to_string(),
        })
    })
}

/// Why `pv` is in use, if it is (Bound).
pub fn in_use(pv: &PvFacts) -> Option<PvInUse> {
    is_bound(pv).then(|| PvInUse {
        claim: claim_of(pv),
    })
}

/// The pv-protection decision for `pv`, with `finalizer` as our finalizer
/// name and `add_enabled` the add phase's gate: the in-use engine's
/// decision with the binding as the only user and the object itself as the
/// live answer.
pub fn decide(pv: &PvFacts, finalizer: &str, add_enabled: bool) -> PvPlan {
    let users: Vec<PvInUse> = in_use(pv).into_iter().collect();
    inuse::decide(&pv.metadata, finalizer, add_enabled, &users, Some(&[]))
}

/// The note of the event that says why a PV's deletion is held.
pub fn held_note(pv_name: &str, why: &PvInUse) -> String {
    match &why.claim {
        Some(c) => format!(
            "PersistentVolume {pv_name} is in use: it is Bound to claim {c}; deletion waits until the volume is no longer Bound"
        ),
        None => format!(
            "PersistentVolume {pv_name} is in use: its phase is Bound; deletion waits until the volume is no longer Bound"
        ),
    }
}

/// The note of the event that says a held PV deletion was released.
pub fn released_note(pv_name: &str, finalizer: &str) -> String {
    format!(
        "PersistentVolume {pv_name} is no longer Bound; removed finalizer {finalizer} so its deletion can complete"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ObjectReference, PersistentVolume, PersistentVolumeSpec, PersistentVolumeStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    const F: &str = "kubernetes.io/pv-protection";

    /// upstream test helper `pv()`.
    fn pv() -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some("default-pv".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn phase(mut pv: PersistentVolume, p: &str) -> PersistentVolume {
        pv.status = Some(PersistentVolumeStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        pv
    }

    /// upstream `boundPV()`.
    fn bound_pv() -> PersistentVolume {
        phase(pv(), "Bound")
    }

    /// upstream `withProtectionFinalizer`.
    fn with_finalizer(mut pv: PersistentVolume, f: &str) -> PersistentVolume {
        pv.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(f.into());
        pv
    }

    /// upstream `deleted`.
    fn deleted(mut pv: PersistentVolume) -> PersistentVolume {
        pv.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        pv
    }

    fn claim_ref(mut pv: PersistentVolume, ns: &str, name: &str) -> PersistentVolume {
        pv.spec = Some(PersistentVolumeSpec {
            claim_ref: Some(ObjectReference {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        pv
    }

    /// Every row of upstream `TestPVProtectionController`
    /// (pv_protection_controller_test.go), plus the gate and edge cases.
    /// Upstream's "fails -> controller retries" rows are about retrying the
    /// same decision; here the decision is the same on every attempt, and the
    /// retry itself is covered by the kube-sim tests.
    #[test]
    fn decision_table() {
        let keep = |claim: Option<&str>| {
            PvPlan::Keep(vec![PvInUse {
                claim: claim.map(str::to_string),
            }])
        };
        // (row, pv, add gate, plan)
        let rows: Vec<(&str, PersistentVolume, bool, PvPlan)> = vec![
            (
                "upstream: PV without finalizer -> finalizer is added",
                pv(),
                true,
                PvPlan::AddFinalizer,
            ),
            (
                "upstream: PVC with finalizer -> no action",
                with_finalizer(pv(), F),
                true,
                PvPlan::Nothing,
            ),
            (
                "upstream: saving PVC finalizer fails -> controller retries (each attempt adds)",
                pv(),
                true,
                PvPlan::AddFinalizer,
            ),
            (
                "upstream: deleted PV with finalizer -> finalizer is removed",
                deleted(with_finalizer(pv(), F)),
                true,
                PvPlan::RemoveFinalizer,
            ),
            (
                "upstream: finalizer removal fails -> controller retries (each attempt removes)",
                deleted(with_finalizer(pv(), F)),
                true,
                PvPlan::RemoveFinalizer,
            ),
            (
                "upstream: deleted PVC with finalizer + PV is bound -> finalizer is not removed",
                deleted(with_finalizer(bound_pv(), F)),
                true,
                keep(None),
            ),
            // Gate: the add phase is gated, removal never is.
            (
                "gate off: PV without finalizer -> not added",
                pv(),
                false,
                PvPlan::Nothing,
            ),
            (
                "gate off: deleted PV with finalizer -> still removed",
                deleted(with_finalizer(pv(), F)),
                false,
                PvPlan::RemoveFinalizer,
            ),
            (
                "gate off: deleted bound PV -> kept",
                deleted(with_finalizer(bound_pv(), F)),
                false,
                keep(None),
            ),
            // Edge cases.
            (
                "deleting PV without our finalizer -> nothing (never add while deleting)",
                deleted(pv()),
                true,
                PvPlan::Nothing,
            ),
            (
                "deleting PV with only another finalizer -> nothing",
                deleted(with_finalizer(pv(), "example.com/other")),
                true,
                PvPlan::Nothing,
            ),
            (
                "other writer's finalizer does not count as ours -> add",
                with_finalizer(pv(), "example.com/other"),
                true,
                PvPlan::AddFinalizer,
            ),
            (
                "Released PV -> removed (only Bound counts)",
                deleted(with_finalizer(
                    phase(claim_ref(pv(), "ns", "data"), "Released"),
                    F,
                )),
                true,
                PvPlan::RemoveFinalizer,
            ),
            (
                "Available, Pending and Failed PVs -> removed",
                deleted(with_finalizer(phase(pv(), "Failed"), F)),
                true,
                PvPlan::RemoveFinalizer,
            ),
            (
                "claimRef set but phase Available -> removed (claimRef is not consulted)",
                deleted(with_finalizer(
                    phase(claim_ref(pv(), "ns", "data"), "Available"),
                    F,
                )),
                true,
                PvPlan::RemoveFinalizer,
            ),
            (
                "Bound PV names its claim",
                deleted(with_finalizer(claim_ref(bound_pv(), "ns", "data"), F)),
                true,
                keep(Some("ns/data")),
            ),
            (
                "Bound, not deleting, with finalizer -> nothing",
                with_finalizer(bound_pv(), F),
                true,
                PvPlan::Nothing,
            ),
            (
                "finalizer listed twice, deleting -> removed",
                deleted(with_finalizer(with_finalizer(pv(), F), F)),
                true,
                PvPlan::RemoveFinalizer,
            ),
        ];
        for (row, pv, gate, want) in rows {
            assert_eq!(decide(&PvFacts::from(&pv), F, gate), want, "{row}");
        }
    }

    #[test]
    fn notes_name_the_claim() {
        assert_eq!(
            held_note(
                "pv-1",
                &PvInUse {
                    claim: Some("ns/data".into())
                }
            ),
            "PersistentVolume pv-1 is in use: it is Bound to claim ns/data; deletion waits until the volume is no longer Bound"
        );
        assert!(held_note("pv-1", &PvInUse { claim: None }).contains("phase is Bound"));
        assert!(released_note("pv-1", F).contains(F));
    }
}

//! The pvc-protection rule, pure: `pkg/controller/volume/pvcprotection`
//! `processPVC` with its two-tier lookup (`isBeingUsed`: `askInformer`, then
//! `askAPIServer`).
//!
//! 1. A deletion candidate (deletionTimestamp set, our finalizer present) is
//!    in use iff some pod of its namespace uses it (`podUsesPVC`, see
//!    [`crate::index::PodEntry::uses`]). The cache (pod index) is asked first:
//!    a user there → keep, no API call. No user in the cache is not enough to
//!    remove a finalizer (removal is irreversible and the cache can lag): the
//!    answer is [`PvcPlan::ConfirmLive`], and the decision is taken again with
//!    a live pod LIST of the namespace. No user there either → remove.
//! 2. An object that is not being deleted and lacks the finalizer gets it,
//!    when the add phase is on. Removal is never gated.
//! 3. Otherwise nothing. The PVC's phase is never consulted.

use protection_core::runtime::inuse::{self, Plan};

use crate::index::{PodUse, Via};
use crate::objects::PvcFacts;

/// What the controller does with one PersistentVolumeClaim: the in-use
/// engine's plan, its users the pods that use the claim.
pub type PvcPlan = Plan<PodUse>;

/// UID of the claim's controller ownerReference (upstream
/// `metav1.GetControllerOfNoCopy`), used for `ephemeral.VolumeIsForPod`.
pub fn controller_uid(pvc: &PvcFacts) -> Option<&str> {
    pvc.metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// The pvc-protection decision: the in-use engine's ([`inuse::decide`]).
///
/// `cached` are the users the pod index knows; `live` the users found in a
/// live pod LIST of the namespace, once one was made for this decision.
pub fn decide(
    pvc: &PvcFacts,
    finalizer: &str,
    add_enabled: bool,
    cached: &[PodUse],
    live: Option<&[PodUse]>,
) -> PvcPlan {
    inuse::decide(&pvc.metadata, finalizer, add_enabled, cached, live)
}

/// How many pods a held-deletion note names before summarising.
const NOTE_PODS: usize = 5;

/// The note of the event that says why a PVC's deletion is held, e.g.
/// "PersistentVolumeClaim ns/data is in use by pod ns/web-0 (scheduled on
/// node-1); deletion waits until no scheduled pod uses it".
pub fn held_note(namespace: &str, name: &str, users: &[PodUse]) -> String {
    let describe = |u: &PodUse| match u.via {
        Via::Claim => format!("{namespace}/{} (scheduled on {})", u.pod, u.node),
        Via::Ephemeral => format!(
            "{namespace}/{} (generic ephemeral volume, scheduled on {})",
            u.pod, u.node
        ),
    };
    let mut who: Vec<String> = users.iter().take(NOTE_PODS).map(describe).collect();
    if users.len() > NOTE_PODS {
        who.push(format!("and {} more", users.len() - NOTE_PODS));
    }
    let noun = if users.len() == 1 { "pod" } else { "pods" };
    format!(
        "PersistentVolumeClaim {namespace}/{name} is in use by {noun} {}; deletion waits until no scheduled pod uses it",
        who.join(", ")
    )
}

/// The note of the event that says a held PVC deletion was released.
pub fn released_note(namespace: &str, name: &str, finalizer: &str) -> String {
    format!(
        "PersistentVolumeClaim {namespace}/{name} is no longer used by any scheduled pod; removed finalizer {finalizer} so its deletion can complete"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{PodIndex, live_users};
    use crate::testutil::{P, pod};
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    const F: &str = "kubernetes.io/pvc-protection";

    /// upstream `pvc()`: default/pvc1.
    fn pvc() -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("pvc1".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// upstream `withProtectionFinalizer`.
    fn with_finalizer(mut pvc: PersistentVolumeClaim) -> PersistentVolumeClaim {
        pvc.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(F.into());
        pvc
    }

    /// upstream `deleted`.
    fn deleted(mut pvc: PersistentVolumeClaim) -> PersistentVolumeClaim {
        pvc.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        pvc
    }

    fn named(mut pvc: PersistentVolumeClaim, name: &str) -> PersistentVolumeClaim {
        pvc.metadata.name = Some(name.into());
        pvc
    }

    fn owned_by(
        mut pvc: PersistentVolumeClaim,
        uid: &str,
        controller: bool,
    ) -> PersistentVolumeClaim {
        pvc.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "pod1".into(),
            uid: uid.into(),
            controller: Some(controller),
            ..Default::default()
        }]);
        pvc
    }

    /// The client actions upstream's test table lists.
    #[derive(Debug, PartialEq)]
    enum Act {
        /// `NewListAction(pods, default)`.
        ListPods,
        /// `NewUpdateAction(pvcs, ...withProtectionFinalizer(pvc()))`.
        AddFinalizer,
        /// `NewUpdateAction(pvcs, ...deleted(pvc()))`.
        RemoveFinalizer,
    }

    /// One row of the table, in upstream's terms.
    struct Row {
        name: &'static str,
        pvc: PersistentVolumeClaim,
        gate: bool,
        /// Pods the API server has (`initialObjects` + `updatedPod`).
        pods: Vec<P>,
        /// upstream `informersAreLate`: the pod cache does not have them yet.
        informers_are_late: bool,
        /// Whether the event enqueues the PVC at all (pod rows: see
        /// `index::tests::enqueue_rules_match_upstream_pod_event_rows`).
        enqueued: bool,
        want: Vec<Act>,
    }

    fn row(name: &'static str, pvc: PersistentVolumeClaim, pods: Vec<P>, want: Vec<Act>) -> Row {
        Row {
            name,
            pvc,
            gate: true,
            pods,
            informers_are_late: false,
            enqueued: true,
            want,
        }
    }

    /// Runs one enqueued PVC through the two-tier decision the way the
    /// controller does, recording the client actions upstream would make.
    fn process(r: &Row) -> Vec<Act> {
        if !r.enqueued {
            return Vec::new();
        }
        let ns = r.pvc.metadata.namespace.as_deref().unwrap();
        let name = r.pvc.metadata.name.as_deref().unwrap();
        let facts_pvc = PvcFacts::from(&r.pvc);
        let owner = controller_uid(&facts_pvc);
        let facts: Vec<_> = r.pods.iter().map(P::f).collect();
        let mut ix = PodIndex::new();
        if !r.informers_are_late {
            for p in &facts {
                ix.apply(p);
            }
        }
        let cached = ix.users(ns, name, owner);
        let mut acts = Vec::new();
        let mut plan = decide(&facts_pvc, F, r.gate, &cached, None);
        if plan == PvcPlan::ConfirmLive {
            acts.push(Act::ListPods);
            let live = live_users(&facts, ns, name, owner);
            plan = decide(&facts_pvc, F, r.gate, &cached, Some(&live));
            assert_ne!(
                plan,
                PvcPlan::ConfirmLive,
                "{}: live answer is final",
                r.name
            );
        }
        match plan {
            PvcPlan::AddFinalizer => acts.push(Act::AddFinalizer),
            PvcPlan::RemoveFinalizer => acts.push(Act::RemoveFinalizer),
            PvcPlan::Keep(_) | PvcPlan::Nothing => {}
            PvcPlan::ConfirmLive => unreachable!(),
        }
        acts
    }

    /// Every row of upstream `TestPVCProtectionController`
    /// (pvc_protection_controller_test.go at 025f2834, with the gate rows of
    /// 0c4236dd), then the edge cases of docs/upstream-semantics.md §3.5/§3.10.
    /// Upstream's "fails -> controller retries" rows repeat the same actions
    /// per attempt; each attempt is the row below, and the retry loop itself
    /// is covered by the kube-sim tests.
    #[test]
    fn decision_table() {
        use Act::*;
        let d = || deleted(with_finalizer(pvc()));
        let rows = vec![
            // PVC events.
            row(
                "upstream: PVC without finalizer -> finalizer is added",
                pvc(),
                vec![],
                vec![AddFinalizer],
            ),
            Row {
                gate: false,
                ..row(
                    "upstream: StorageObjectInUseProtection Disabled, PVC without finalizer -> finalizer is not added",
                    pvc(),
                    vec![],
                    vec![],
                )
            },
            row(
                "upstream: PVC with finalizer -> no action",
                with_finalizer(pvc()),
                vec![],
                vec![],
            ),
            row(
                "upstream: saving PVC finalizer fails -> controller retries (one attempt)",
                pvc(),
                vec![],
                vec![AddFinalizer],
            ),
            row(
                "upstream: deleted PVC with finalizer -> finalizer is removed",
                d(),
                vec![],
                vec![ListPods, RemoveFinalizer],
            ),
            Row {
                gate: false,
                ..row(
                    "upstream: StorageObjectInUseProtection Disabled, deleted PVC with finalizer -> finalizer is removed",
                    d(),
                    vec![],
                    vec![ListPods, RemoveFinalizer],
                )
            },
            row(
                "upstream: finalizer removal fails -> controller retries (one attempt: LIST then update)",
                d(),
                vec![],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "upstream: deleted PVC with finalizer + pod with the PVC exists -> finalizer is not removed",
                d(),
                vec![pod().with_pvc("pvc1")],
                vec![],
            ),
            row(
                "upstream: deleted PVC with finalizer + pod with unrelated PVC and EmptyDir exists -> finalizer is removed",
                d(),
                vec![pod().with_pvc("unrelatedPVC").with_empty_dir()],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "upstream: deleted PVC with finalizer + pod with the PVC finished but is not deleted -> finalizer is not removed",
                d(),
                vec![pod().with_pvc("pvc1").status("Failed")],
                vec![],
            ),
            Row {
                informers_are_late: true,
                ..row(
                    "upstream: deleted PVC with finalizer + pod with the PVC exists but is not in the Informer's cache yet -> finalizer is not removed",
                    d(),
                    vec![pod().with_pvc("pvc1")],
                    vec![ListPods],
                )
            },
            // Pod events (the pod is the updated/created one; see the index's
            // enqueue table for which events enqueue).
            Row {
                enqueued: false,
                ..row(
                    "upstream: updated running Pod -> no action",
                    d(),
                    vec![pod().with_pvc("pvc1").status("Running")],
                    vec![],
                )
            },
            row(
                "upstream: updated finished Pod -> finalizer is not removed",
                d(),
                vec![pod().with_pvc("pvc1").status("Succeeded")],
                vec![],
            ),
            row(
                "upstream: updated unscheduled Pod -> finalizer is removed",
                d(),
                vec![pod().with_pvc("pvc1").unscheduled()],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "upstream: deleted running Pod -> finalizer is removed",
                d(),
                vec![],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "upstream: pod delete and create with same namespaced name seen as an update, old pod used deleted PVC -> finalizer is removed",
                d(),
                vec![pod().uid("uid2")],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "upstream: pod delete and create with same namespaced name seen as an update, old pod used non-deleted PVC -> finalizer is not removed",
                with_finalizer(pvc()),
                vec![pod().uid("uid2")],
                vec![],
            ),
            row(
                "upstream: pod delete and create with same namespaced name seen as an update, both pods reference deleted PVC -> finalizer is not removed",
                d(),
                vec![pod().uid("uid2").with_pvc("pvc1")],
                vec![],
            ),
            row(
                "upstream: pod update from unscheduled to scheduled, deleted PVC is referenced -> finalizer is not removed",
                d(),
                vec![pod().with_pvc("pvc1")],
                vec![],
            ),
            // Edge cases.
            row(
                "several pods on one claim: kept while any scheduled one exists",
                d(),
                vec![
                    pod().name("a").uid("ua").unscheduled().with_pvc("pvc1"),
                    pod().name("b").uid("ub").with_pvc("pvc1"),
                ],
                vec![],
            ),
            row(
                "several pods on one claim, all unscheduled -> removed",
                d(),
                vec![
                    pod().name("a").uid("ua").unscheduled().with_pvc("pvc1"),
                    pod().name("b").uid("ub").unscheduled().with_pvc("pvc1"),
                ],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "pod being deleted (grace 30) still uses the claim",
                d(),
                vec![pod().with_pvc("pvc1").deleting(30)],
                vec![],
            ),
            row(
                "shut-down pod (grace 0) still uses a regular claim",
                d(),
                vec![pod().with_pvc("pvc1").deleting(0)],
                vec![],
            ),
            row(
                "ephemeral: claim controlled by the pod -> kept",
                owned_by(
                    deleted(with_finalizer(named(pvc(), "pod1-scratch"))),
                    "uid1",
                    true,
                ),
                vec![pod().with_ephemeral("scratch")],
                vec![],
            ),
            row(
                "ephemeral: claim controlled by the pod, pod shut down -> removed (breaks the finalizer cycle)",
                owned_by(
                    deleted(with_finalizer(named(pvc(), "pod1-scratch"))),
                    "uid1",
                    true,
                ),
                vec![pod().with_ephemeral("scratch").deleting(0)],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "ephemeral: pod recreated with the same name, claim owned by the old pod -> removed",
                owned_by(
                    deleted(with_finalizer(named(pvc(), "pod1-scratch"))),
                    "uid1",
                    true,
                ),
                vec![pod().uid("uid2").with_ephemeral("scratch")],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "ephemeral: ownerReference is not a controller reference -> removed",
                owned_by(
                    deleted(with_finalizer(named(pvc(), "pod1-scratch"))),
                    "uid1",
                    false,
                ),
                vec![pod().with_ephemeral("scratch")],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "pod in another namespace does not count",
                d(),
                vec![{
                    let mut p = pod().with_pvc("pvc1");
                    p.0["metadata"]["namespace"] = serde_json::json!("other");
                    p
                }],
                vec![ListPods, RemoveFinalizer],
            ),
            row(
                "PVC phase is not consulted (Pending claim in use is kept)",
                {
                    let mut c = d();
                    c.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
                        phase: Some("Pending".into()),
                        ..Default::default()
                    });
                    c
                },
                vec![pod().with_pvc("pvc1")],
                vec![],
            ),
            row(
                "deleting PVC without our finalizer -> nothing",
                deleted(pvc()),
                vec![],
                vec![],
            ),
            Row {
                gate: false,
                ..row(
                    "gate off: in-use deleted PVC is kept",
                    d(),
                    vec![pod().with_pvc("pvc1")],
                    vec![],
                )
            },
        ];
        for r in &rows {
            assert_eq!(process(r), r.want, "{}", r.name);
        }
    }

    #[test]
    fn keep_names_the_users_from_the_tier_that_found_them() {
        let u = |p: &str| PodUse {
            pod: p.into(),
            node: "n".into(),
            via: Via::Claim,
        };
        let d = PvcFacts::from(&deleted(with_finalizer(pvc())));
        assert_eq!(
            decide(&d, F, true, &[u("a")], None),
            PvcPlan::Keep(vec![u("a")])
        );
        assert_eq!(
            decide(&d, F, true, &[], Some(&[u("b")])),
            PvcPlan::Keep(vec![u("b")])
        );
        assert_eq!(decide(&d, F, true, &[], None), PvcPlan::ConfirmLive);
        assert_eq!(
            decide(&d, F, true, &[], Some(&[])),
            PvcPlan::RemoveFinalizer
        );
    }

    #[test]
    fn controller_uid_takes_the_controller_reference() {
        assert_eq!(controller_uid(&(&pvc()).into()), None);
        assert_eq!(
            controller_uid(&(&owned_by(pvc(), "u", true)).into()),
            Some("u")
        );
        assert_eq!(controller_uid(&(&owned_by(pvc(), "u", false)).into()), None);
    }

    #[test]
    fn held_note_names_pods_and_nodes() {
        let u = |p: &str, via| PodUse {
            pod: p.into(),
            node: "node-1".into(),
            via,
        };
        assert_eq!(
            held_note("ns", "data", &[u("web-0", Via::Claim)]),
            "PersistentVolumeClaim ns/data is in use by pod ns/web-0 (scheduled on node-1); deletion waits until no scheduled pod uses it"
        );
        let n = held_note("ns", "data", &[u("a", Via::Claim), u("b", Via::Ephemeral)]);
        assert!(n.contains("by pods ns/a (scheduled on node-1), ns/b (generic ephemeral volume, scheduled on node-1)"), "{n}");
        let many: Vec<_> = (0..8).map(|i| u(&format!("p{i}"), Via::Claim)).collect();
        let n = held_note("ns", "data", &many);
        assert!(n.contains("ns/p4 (scheduled on node-1), and 3 more"), "{n}");
        assert!(!n.contains("p5"), "{n}");
        assert!(released_note("ns", "data", F).contains(F));
    }
}

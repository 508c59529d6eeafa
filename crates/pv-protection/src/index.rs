//! The pod → claim index: what upstream gets from the pod informer's
//! `pod-pvc-index`, built by hand because kube-rs stores have no secondary
//! indexes, and holding per pod only what the rules read (uid, node, shut-down
//! state, the claims it references), never whole pods.
//!
//! It is fed by the pod watch through three verbs, kubert style:
//! [`PodIndex::apply`], [`PodIndex::delete`] and a re-list
//! ([`PodIndex::begin_relist`], [`PodIndex::relist_apply`],
//! [`PodIndex::finish_relist`]) that replaces the whole content at once. Each
//! verb returns the claims to re-check, by upstream's enqueue rules
//! (`pvcprotection.podAddedDeletedUpdated` / `enqueuePVCs`):
//!
//! * a pod event is skipped unless the event is a delete, the pod is
//!   terminated (`IsPodTerminated`), or the pod is unscheduled; otherwise every
//!   claim it references is enqueued (regular and ephemeral);
//! * when a pod's UID changed under the same name (delete + create seen as
//!   an update), the old pod's claims are enqueued as if it had been deleted.
//!   kube-rs gives no old object, so the index keeps the last-seen UID and
//!   claims per pod key and uses those.
//!
//! A re-list treats every pod that vanished (or whose UID changed) as deleted
//! and enqueues its claims. kube-rs' watcher synthesises no delete events for
//! objects deleted during a watch gap, so this is what keeps a PVC from staying
//! Terminating forever when its pod was deleted while the watch was down
//! (kubernetes issue #120041).

use std::collections::{BTreeSet, HashMap};

use protection_core::runtime::inuse::Feed;

use crate::pod::{ClaimRef, PodFacts};

/// `namespace/name` of a PersistentVolumeClaim to re-check.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey {
    pub namespace: String,
    pub name: String,
}

impl ClaimKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        ClaimKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// How a pod uses a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Via {
    /// A `persistentVolumeClaim` volume.
    Claim,
    /// A generic ephemeral volume whose claim this pod controls.
    Ephemeral,
}

/// One pod that keeps a claim in use.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodUse {
    pub pod: String,
    pub node: String,
    pub via: Via,
}

/// What the index keeps per pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEntry {
    pub uid: String,
    /// `spec.nodeName` when scheduled.
    pub node: Option<String>,
    /// upstream `podIsShutDown`.
    pub shut_down: bool,
    pub claims: Vec<ClaimRef>,
}

impl PodEntry {
    pub fn from_facts(pod: &PodFacts) -> Self {
        PodEntry {
            uid: pod.uid().to_string(),
            node: pod.node().map(str::to_string),
            shut_down: pod.is_shut_down(),
            claims: pod.claims(),
        }
    }

    /// upstream `podUsesPVC` for a claim of this pod's namespace named
    /// `claim`, whose controller ownerReference has UID `claim_controller`:
    /// only scheduled pods count; a `persistentVolumeClaim` volume naming the
    /// claim counts whatever the pod's phase or deletion state; a generic
    /// ephemeral volume counts only if the claim is controlled by this pod
    /// (`ephemeral.VolumeIsForPod`) and the pod is not shut down.
    pub fn uses(&self, claim: &str, claim_controller: Option<&str>) -> Option<Via> {
        self.node.as_ref()?;
        self.claims.iter().find_map(|c| {
            if c.name != claim {
                return None;
            }
            if !c.ephemeral {
                Some(Via::Claim)
            } else if !self.shut_down && claim_controller == Some(self.uid.as_str()) {
                Some(Via::Ephemeral)
            } else {
                None
            }
        })
    }
}

#[derive(Debug, Default)]
struct NsPods {
    pods: HashMap<String, PodEntry>,
    /// claim name → names of pods referencing it.
    by_claim: HashMap<String, Vec<String>>,
}

impl NsPods {
    fn insert(&mut self, name: &str, entry: PodEntry) -> Option<PodEntry> {
        let old = self.pods.remove(name);
        if let Some(o) = &old {
            self.unlink(name, o);
        }
        for c in &entry.claims {
            let v = self.by_claim.entry(c.name.clone()).or_default();
            if !v.iter().any(|p| p == name) {
                v.push(name.to_string());
            }
        }
        self.pods.insert(name.to_string(), entry);
        old
    }

    fn remove(&mut self, name: &str) -> Option<PodEntry> {
        let old = self.pods.remove(name)?;
        self.unlink(name, &old);
        Some(old)
    }

    fn unlink(&mut self, name: &str, entry: &PodEntry) {
        for c in &entry.claims {
            if let Some(v) = self.by_claim.get_mut(&c.name) {
                v.retain(|p| p != name);
                if v.is_empty() {
                    self.by_claim.remove(&c.name);
                }
            }
        }
    }
}

/// A pod seen during a re-list, with the enqueue decision taken from the
/// full facts at that moment.
#[derive(Debug)]
struct Relisted {
    namespace: String,
    name: String,
    entry: PodEntry,
    /// Deleted-or-terminated-or-unscheduled at the time it was listed.
    enqueue_own: bool,
}

/// The index. Not synchronised: the controller wraps it in a lock.
#[derive(Debug, Default)]
pub struct PodIndex {
    namespaces: HashMap<String, NsPods>,
    relist: Option<Vec<Relisted>>,
    len: usize,
}

/// upstream `enqueuePVCs`' filter: only events that can free a claim.
fn can_free_claims(pod: &PodFacts, deleted: bool) -> bool {
    deleted || pod.is_terminated() || pod.node().is_none()
}

fn keys(ns: &str, claims: &[ClaimRef], out: &mut BTreeSet<ClaimKey>) {
    for c in claims {
        out.insert(ClaimKey::new(ns, &c.name));
    }
}

impl PodIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Pods held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry for a pod, if held.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&PodEntry> {
        self.namespaces.get(namespace)?.pods.get(name)
    }

    /// A pod was added or updated. Returns the claims to re-check.
    pub fn apply(&mut self, pod: &PodFacts) -> BTreeSet<ClaimKey> {
        let (ns, name) = (pod.namespace(), pod.name());
        let entry = PodEntry::from_facts(pod);
        let mut out = BTreeSet::new();
        if can_free_claims(pod, false) {
            keys(ns, &entry.claims, &mut out);
        }
        let old = self
            .namespaces
            .entry(ns.to_string())
            .or_default()
            .insert(name, entry);
        match old {
            None => self.len += 1,
            Some(old) if old.uid != pod.uid() => keys(ns, &old.claims, &mut out),
            Some(_) => {}
        }
        out
    }

    /// A pod was deleted. Returns the claims to re-check: those of the
    /// deleted object and, if the index held a different incarnation (a
    /// missed delete + create), those of that one too.
    pub fn delete(&mut self, pod: &PodFacts) -> BTreeSet<ClaimKey> {
        let (ns, name) = (pod.namespace(), pod.name());
        let mut out = BTreeSet::new();
        keys(ns, &pod.claims(), &mut out);
        if let Some(nsp) = self.namespaces.get_mut(ns) {
            if let Some(old) = nsp.remove(name) {
                self.len -= 1;
                keys(ns, &old.claims, &mut out);
            }
            if nsp.pods.is_empty() {
                self.namespaces.remove(ns);
            }
        }
        out
    }

    /// A re-list starts: pods listed until [`Self::finish_relist`] replace
    /// the content at once; lookups keep answering from the old content.
    pub fn begin_relist(&mut self) {
        self.relist = Some(Vec::new());
    }

    /// A pod listed during a re-list.
    pub fn relist_apply(&mut self, pod: &PodFacts) {
        let item = Relisted {
            namespace: pod.namespace().to_string(),
            name: pod.name().to_string(),
            entry: PodEntry::from_facts(pod),
            enqueue_own: can_free_claims(pod, false),
        };
        self.relist.get_or_insert_with(Vec::new).push(item);
    }

    /// The re-list is complete: swap in its content. Returns the claims to
    /// re-check: those of listed pods that can free claims (as upstream's
    /// Replace → Add/Update handlers), and those of every pod that vanished
    /// or changed UID (as the tombstones client-go synthesises).
    pub fn finish_relist(&mut self) -> BTreeSet<ClaimKey> {
        let listed = self.relist.take().unwrap_or_default();
        let mut old = std::mem::take(&mut self.namespaces);
        self.len = 0;
        let mut out = BTreeSet::new();
        for item in listed {
            let prev = old
                .get_mut(&item.namespace)
                .and_then(|n| n.remove(&item.name));
            if item.enqueue_own {
                keys(&item.namespace, &item.entry.claims, &mut out);
            }
            if let Some(p) = prev
                && p.uid != item.entry.uid
            {
                keys(&item.namespace, &p.claims, &mut out);
            }
            let replaced = self
                .namespaces
                .entry(item.namespace.clone())
                .or_default()
                .insert(&item.name, item.entry);
            if replaced.is_none() {
                self.len += 1;
            }
        }
        // Whatever is left was not listed: deleted during the gap.
        for (ns, nsp) in old {
            for entry in nsp.pods.values() {
                keys(&ns, &entry.claims, &mut out);
            }
        }
        out
    }

    /// Every pod of `namespace` that uses the claim `claim` (whose controller
    /// ownerReference UID is `claim_controller`), sorted by pod name.
    pub fn users(
        &self,
        namespace: &str,
        claim: &str,
        claim_controller: Option<&str>,
    ) -> Vec<PodUse> {
        let Some(nsp) = self.namespaces.get(namespace) else {
            return Vec::new();
        };
        let Some(names) = nsp.by_claim.get(claim) else {
            return Vec::new();
        };
        let mut out: Vec<PodUse> = names
            .iter()
            .filter_map(|n| {
                let e = nsp.pods.get(n)?;
                let via = e.uses(claim, claim_controller)?;
                Some(PodUse {
                    pod: n.clone(),
                    node: e.node.clone().unwrap_or_default(),
                    via,
                })
            })
            .collect();
        out.sort();
        out
    }
}

fn store_keys(claims: BTreeSet<ClaimKey>) -> BTreeSet<String> {
    claims.iter().map(ClaimKey::to_string).collect()
}

/// The pod watch feeds the index through the in-use engine's verbs; each
/// returns the claims to re-check as store keys (`namespace/name`).
impl Feed<PodFacts> for PodIndex {
    fn apply(&mut self, pod: &PodFacts) -> BTreeSet<String> {
        store_keys(PodIndex::apply(self, pod))
    }
    fn delete(&mut self, pod: &PodFacts) -> BTreeSet<String> {
        store_keys(PodIndex::delete(self, pod))
    }
    fn begin_reset(&mut self) {
        self.begin_relist();
    }
    fn reset_apply(&mut self, pod: &PodFacts) -> BTreeSet<String> {
        self.relist_apply(pod);
        BTreeSet::new()
    }
    fn finish_reset(&mut self) -> BTreeSet<String> {
        store_keys(self.finish_relist())
    }
    fn len(&self) -> usize {
        PodIndex::len(self)
    }
}

/// upstream `askAPIServer`'s scan over a live pod list: every listed pod of
/// the claim's namespace that uses it.
pub fn live_users(
    pods: &[PodFacts],
    namespace: &str,
    claim: &str,
    claim_controller: Option<&str>,
) -> Vec<PodUse> {
    let mut out: Vec<PodUse> = pods
        .iter()
        .filter(|p| p.namespace() == namespace)
        .filter_map(|p| {
            let e = PodEntry::from_facts(p);
            let via = e.uses(claim, claim_controller)?;
            Some(PodUse {
                pod: p.name().to_string(),
                node: e.node.unwrap_or_default(),
                via,
            })
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{P, pod};
    use serde_json::json;

    fn k(name: &str) -> ClaimKey {
        ClaimKey::new("default", name)
    }

    fn set(keys: &[&str]) -> BTreeSet<ClaimKey> {
        keys.iter().map(|n| k(n)).collect()
    }

    /// Rows of upstream `TestPVCProtectionController`'s "Pod events" section
    /// (pvc_protection_controller_test.go), restricted to the enqueue step:
    /// which claims a pod event makes the controller re-check. (Whether the
    /// re-check then removes the finalizer is `decide`'s table.)
    #[test]
    fn enqueue_rules_match_upstream_pod_event_rows() {
        // "updated running Pod -> no action": a scheduled, running pod's
        // update frees nothing, so nothing is enqueued.
        let mut ix = PodIndex::new();
        let running = pod().with_pvc("pvc1").status("Running");
        assert_eq!(ix.apply(&running.f()), set(&[]), "updated running Pod");

        // "updated finished Pod -> finalizer is not removed": a Succeeded pod
        // is enqueued (IsPodTerminated) but still uses the claim.
        let mut ix = PodIndex::new();
        let finished = pod().with_pvc("pvc1").status("Succeeded");
        assert_eq!(
            ix.apply(&finished.f()),
            set(&["pvc1"]),
            "updated finished Pod"
        );
        assert_eq!(ix.users("default", "pvc1", None).len(), 1);

        // "updated unscheduled Pod -> finalizer is removed": enqueued, and an
        // unscheduled pod does not use the claim.
        let mut ix = PodIndex::new();
        let unsched = pod().with_pvc("pvc1").unscheduled();
        assert_eq!(
            ix.apply(&unsched.f()),
            set(&["pvc1"]),
            "updated unscheduled Pod"
        );
        assert!(ix.users("default", "pvc1", None).is_empty());

        // "deleted running Pod -> finalizer is removed".
        let mut ix = PodIndex::new();
        ix.apply(&running.f());
        assert_eq!(
            ix.delete(&running.f()),
            set(&["pvc1"]),
            "deleted running Pod"
        );
        assert!(ix.users("default", "pvc1", None).is_empty());
        assert!(ix.is_empty());

        // "pod delete and create with same namespaced name seen as an update,
        // old pod used deleted PVC -> finalizer is removed".
        let mut ix = PodIndex::new();
        ix.apply(&pod().with_pvc("pvc1").f());
        assert_eq!(
            ix.apply(&pod().uid("uid2").f()),
            set(&["pvc1"]),
            "UID change enqueues the old pod's claims"
        );
        assert!(ix.users("default", "pvc1", None).is_empty());

        // "... old pod used non-deleted PVC -> finalizer is not removed": the
        // same enqueue; decide() finds the PVC is not being deleted.
        // "... both pods reference deleted PVC -> finalizer is not removed":
        let mut ix = PodIndex::new();
        ix.apply(&pod().with_pvc("pvc1").f());
        assert_eq!(
            ix.apply(&pod().uid("uid2").with_pvc("pvc1").f()),
            set(&["pvc1"])
        );
        assert_eq!(
            ix.users("default", "pvc1", None).len(),
            1,
            "new pod uses it"
        );

        // "pod update from unscheduled to scheduled, deleted PVC is
        // referenced -> finalizer is not removed": the scheduled update is
        // skipped and the pod now uses the claim.
        let mut ix = PodIndex::new();
        assert_eq!(
            ix.apply(&pod().with_pvc("pvc1").unscheduled().f()),
            set(&["pvc1"])
        );
        assert_eq!(ix.apply(&pod().with_pvc("pvc1").f()), set(&[]));
        assert_eq!(
            ix.users("default", "pvc1", None),
            vec![PodUse {
                pod: "pod1".into(),
                node: "node1".into(),
                via: Via::Claim
            }]
        );
    }

    #[test]
    fn deleting_pod_is_enqueued_only_once_its_containers_stopped() {
        let mut ix = PodIndex::new();
        let p = pod().with_pvc("pvc1").status("Running").deleting(30);
        assert_eq!(ix.apply(&p.clone().running_container().f()), set(&[]));
        assert_eq!(ix.apply(&p.f()), set(&["pvc1"]));
        // Still uses it: only deletion of the object frees a regular claim.
        assert_eq!(ix.users("default", "pvc1", None).len(), 1);
    }

    /// upstream `podUsesPVC`, every branch.
    #[test]
    fn pod_uses_pvc_matches_upstream() {
        let owner = Some("uid1");
        // (case, pod, claim, controller uid, uses?)
        type Case<'a> = (&'a str, P, &'a str, Option<&'a str>, Option<Via>);
        let cases: Vec<Case> = vec![
            (
                "scheduled, claim volume",
                pod().with_pvc("pvc1"),
                "pvc1",
                None,
                Some(Via::Claim),
            ),
            (
                "unscheduled never counts",
                pod().with_pvc("pvc1").unscheduled(),
                "pvc1",
                None,
                None,
            ),
            (
                "other claim",
                pod().with_pvc("unrelatedPVC").with_empty_dir(),
                "pvc1",
                None,
                None,
            ),
            (
                "Failed pod still uses",
                pod().with_pvc("pvc1").status("Failed"),
                "pvc1",
                None,
                Some(Via::Claim),
            ),
            (
                "Succeeded pod still uses",
                pod().with_pvc("pvc1").status("Succeeded"),
                "pvc1",
                None,
                Some(Via::Claim),
            ),
            (
                "shut-down pod still uses a regular claim",
                pod().with_pvc("pvc1").deleting(0),
                "pvc1",
                None,
                Some(Via::Claim),
            ),
            (
                "ephemeral owned by pod",
                pod().with_ephemeral("scratch"),
                "pod1-scratch",
                owner,
                Some(Via::Ephemeral),
            ),
            (
                "ephemeral not owned (no controller)",
                pod().with_ephemeral("scratch"),
                "pod1-scratch",
                None,
                None,
            ),
            (
                "ephemeral owned by another pod (same name, old uid)",
                pod().with_ephemeral("scratch"),
                "pod1-scratch",
                Some("uid0"),
                None,
            ),
            (
                "ephemeral, pod shut down (grace 0)",
                pod().with_ephemeral("scratch").deleting(0),
                "pod1-scratch",
                owner,
                None,
            ),
            (
                "ephemeral, pod deleting with grace 30",
                pod().with_ephemeral("scratch").deleting(30),
                "pod1-scratch",
                owner,
                Some(Via::Ephemeral),
            ),
            (
                "ephemeral, unscheduled",
                pod().with_ephemeral("scratch").unscheduled(),
                "pod1-scratch",
                owner,
                None,
            ),
            (
                "ephemeral name is <pod>-<volume>",
                pod().with_ephemeral("scratch"),
                "scratch",
                owner,
                None,
            ),
        ];
        for (case, p, claim, ctrl, want) in cases {
            let e = PodEntry::from_facts(&p.f());
            assert_eq!(e.uses(claim, ctrl), want, "{case}");
            // The live-list scan applies the same rule.
            assert_eq!(
                live_users(&[p.f()], "default", claim, ctrl)
                    .first()
                    .map(|u| u.via),
                want,
                "{case} (live)"
            );
        }
    }

    #[test]
    fn several_pods_on_one_claim_all_count_until_the_last_is_gone() {
        let mut ix = PodIndex::new();
        let a = pod().name("a").uid("ua").with_pvc("data");
        let b = pod().name("b").uid("ub").with_pvc("data");
        ix.apply(&a.f());
        ix.apply(&b.f());
        assert_eq!(ix.users("default", "data", None).len(), 2);
        assert_eq!(ix.delete(&a.f()), set(&["data"]));
        let left = ix.users("default", "data", None);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].pod, "b");
        ix.delete(&b.f());
        assert!(ix.users("default", "data", None).is_empty());
        assert!(ix.is_empty());
    }

    #[test]
    fn namespaces_are_separate() {
        let mut ix = PodIndex::new();
        let mut other = pod().with_pvc("pvc1");
        other.0["metadata"]["namespace"] = json!("other");
        ix.apply(&other.f());
        assert!(ix.users("default", "pvc1", None).is_empty());
        assert_eq!(ix.users("other", "pvc1", None).len(), 1);
        assert!(live_users(&[other.f()], "default", "pvc1", None).is_empty());
    }

    #[test]
    fn update_that_drops_a_claim_unlinks_it() {
        let mut ix = PodIndex::new();
        ix.apply(&pod().with_pvc("a").with_pvc("b").f());
        ix.apply(&pod().with_pvc("b").f());
        assert!(ix.users("default", "a", None).is_empty());
        assert_eq!(ix.users("default", "b", None).len(), 1);
        assert_eq!(ix.len(), 1);
    }

    /// A pod deleted while the watch was down: the re-list does not list it,
    /// and its claims are enqueued (the #120041 fix).
    #[test]
    fn relist_enqueues_claims_of_pods_that_vanished_or_changed_uid() {
        let mut ix = PodIndex::new();
        let gone = pod().name("gone").uid("g").with_pvc("data");
        let stays = pod().name("stays").uid("s").with_pvc("kept");
        let recreated = pod().name("web").uid("w1").with_pvc("old-claim");
        for p in [&gone, &stays, &recreated] {
            ix.apply(&p.f());
        }
        assert_eq!(ix.len(), 3);
        ix.begin_relist();
        ix.relist_apply(&stays.f());
        ix.relist_apply(&pod().name("web").uid("w2").with_pvc("new-claim").f());
        // Old content answers until the re-list is complete.
        assert_eq!(ix.users("default", "data", None).len(), 1);
        let out = ix.finish_relist();
        assert_eq!(out, set(&["data", "old-claim"]));
        assert_eq!(ix.len(), 2);
        assert!(ix.users("default", "data", None).is_empty());
        assert!(ix.users("default", "old-claim", None).is_empty());
        assert_eq!(ix.users("default", "new-claim", None).len(), 1);
        assert_eq!(ix.users("default", "kept", None).len(), 1);
        // A re-list with nothing changed enqueues nothing.
        ix.begin_relist();
        ix.relist_apply(&stays.f());
        ix.relist_apply(&pod().name("web").uid("w2").with_pvc("new-claim").f());
        assert_eq!(ix.finish_relist(), set(&[]));
    }

    #[test]
    fn relist_enqueues_unscheduled_and_terminated_like_add_events() {
        let mut ix = PodIndex::new();
        ix.begin_relist();
        ix.relist_apply(&pod().name("a").with_pvc("x").unscheduled().f());
        ix.relist_apply(&pod().name("b").with_pvc("y").status("Failed").f());
        ix.relist_apply(&pod().name("c").with_pvc("z").status("Running").f());
        assert_eq!(ix.finish_relist(), set(&["x", "y"]));
        assert_eq!(ix.len(), 3);
    }

    #[test]
    fn delete_of_unknown_pod_still_enqueues_its_claims() {
        let mut ix = PodIndex::new();
        assert_eq!(ix.delete(&pod().with_pvc("pvc1").f()), set(&["pvc1"]));
        assert!(ix.is_empty());
    }

    #[test]
    fn ephemeral_claims_are_enqueued_under_their_derived_name() {
        let mut ix = PodIndex::new();
        let p = pod().with_ephemeral("scratch").unscheduled();
        assert_eq!(ix.apply(&p.f()), set(&["pod1-scratch"]));
    }
}

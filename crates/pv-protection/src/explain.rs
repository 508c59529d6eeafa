//! `explain` for pv-protection and pvc-protection, on the controllers' own
//! rules: [`crate::pv::in_use`] (the `Bound` rule) and, for a claim, the
//! `podUsesPVC` rule over a live pod list ([`live_users`] with the claim's
//! controller from [`controller_uid`]) — the rule a controller's live
//! confirmation applies before it removes a finalizer.
//!
//! A pod that cannot be read as the controller reads pods is reported, never
//! skipped: a claim is only free when every pod of its namespace was read.

use crate::index::{PodUse, live_users};
use crate::objects::{PvFacts, PvcFacts};
use crate::pod::PodFacts;
use crate::pv::{PvInUse, claim_of, in_use};
use crate::pvc::controller_uid;

/// What pv-protection says about a PersistentVolume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvExplanation {
    /// `status.phase`.
    pub phase: Option<String>,
    /// `spec.claimRef` as `namespace/name`.
    pub claim: Option<String>,
    /// In use (Bound): pv-protection holds its deletion.
    pub in_use: Option<PvInUse>,
}

/// Explains a PersistentVolume.
pub fn explain_pv(pv: &PvFacts) -> PvExplanation {
    PvExplanation {
        phase: pv.status.phase.clone(),
        claim: claim_of(pv),
        in_use: in_use(pv),
    }
}

/// A pod of the claim's namespace that could not be read as the controller
/// reads pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadablePod {
    pub name: String,
    pub error: String,
}

/// Reads one listed pod (any JSON the API server sent) the way the
/// controller's pod watch does.
pub fn read_pod(pod: serde_json::Value) -> Result<PodFacts, UnreadablePod> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("<unnamed>")
        .to_string();
    serde_json::from_value(pod).map_err(|e| UnreadablePod {
        name,
        error: e.to_string(),
    })
}

/// What pvc-protection says about a PersistentVolumeClaim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvcExplanation {
    /// The pods that use it (scheduled, by claim or as their generic
    /// ephemeral volume).
    pub users: Vec<PodUse>,
    /// Pods that could not be read: whether they use the claim is unknown.
    pub unreadable: Vec<UnreadablePod>,
}

impl PvcExplanation {
    /// Whether pvc-protection holds the claim's deletion.
    pub fn in_use(&self) -> bool {
        !self.users.is_empty()
    }

    /// No known user, but some pods could not be read: whether the claim is
    /// free cannot be told.
    pub fn undecided(&self) -> bool {
        self.users.is_empty() && !self.unreadable.is_empty()
    }
}

/// Explains a claim from a live list of its namespace's pods, each read with
/// [`read_pod`].
pub fn explain_pvc(
    pvc: &PvcFacts,
    pods: impl IntoIterator<Item = Result<PodFacts, UnreadablePod>>,
) -> PvcExplanation {
    let (mut read, mut unreadable) = (Vec::new(), Vec::new());
    for p in pods {
        match p {
            Ok(p) => read.push(p),
            Err(u) => unreadable.push(u),
        }
    }
    let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
    let name = pvc.metadata.name.as_deref().unwrap_or_default();
    PvcExplanation {
        users: live_users(&read, ns, name, controller_uid(pvc)),
        unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim() -> PvcFacts {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "shop", "uid": "c1"}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, claim: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}")},
            "spec": {
                "nodeName": node,
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
            }
        })
    }

    #[test]
    fn a_scheduled_pod_holds_the_claim_and_an_unscheduled_one_does_not() {
        let e = explain_pvc(
            &claim(),
            [pod("web-0", Some("n1"), "data"), pod("web-1", None, "data")].map(read_pod),
        );
        assert!(e.in_use());
        assert_eq!(e.users.len(), 1);
        assert_eq!(
            (e.users[0].pod.as_str(), e.users[0].node.as_str()),
            ("web-0", "n1")
        );
        let free = explain_pvc(&claim(), [pod("web-1", None, "data")].map(read_pod));
        assert!(!free.in_use() && !free.undecided());
    }

    #[test]
    fn a_pod_that_cannot_be_read_leaves_the_claim_undecided_never_free() {
        // `spec.nodeName` as a number: not a pod the controller can read.
        let bad = json!({
            "metadata": {"name": "odd", "namespace": "shop"},
            "spec": {"nodeName": 7, "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}
        });
        let e = explain_pvc(&claim(), [read_pod(bad)]);
        assert!(!e.in_use());
        assert!(e.undecided(), "{e:?}");
        assert_eq!(e.unreadable[0].name, "odd");
        assert!(!e.unreadable[0].error.is_empty());
    }

    #[test]
    fn a_volume_is_held_while_bound() {
        let pv = |phase: &str| -> PvFacts {
            serde_json::from_value(json!({
                "metadata": {"name": "pv-1"},
                "spec": {"claimRef": {"namespace": "shop", "name": "data"}},
                "status": {"phase": phase}
            }))
            .unwrap()
        };
        let e = explain_pv(&pv("Bound"));
        assert_eq!(e.claim.as_deref(), Some("shop/data"));
        assert_eq!(
            e.in_use,
            Some(PvInUse {
                claim: Some("shop/data".into())
            })
        );
        assert_eq!(explain_pv(&pv("Released")).in_use, None);
    }
}

//! `explain` for pv-protection and pvc-protection, on the controllers' own
//! rules: [`crate::pv::in_use`] (the `Bound` rule) and, for a claim, the
//! `podUsesPVC` rule over a live pod list ([`live_users`] with the claim's
//! controller from [`controller_uid`]) — the rule a controller's live
//! confirmation applies before it removes a finalizer.
//!
//! A pod that cannot be read as the controller reads pods is reported, never
//! skipped: a claim is only free when every pod of its namespace was read.

use futures::FutureExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};
use protection_core::explain::{
    ExplainError, ExplainKind, Explained, Hold, NameRule, failed, get, in_use_holds,
};

use crate::index::{PodUse, Via, live_users};
use crate::objects::{PvFacts, PvcFacts};
use crate::pod::PodFacts;
use crate::pv::{PvInUse, claim_of, in_use};
use crate::pvc::controller_uid;
use crate::{pv_controller, pvc_controller};

/// The kind pvc-protection explains.
pub const PVC_KIND: ExplainKind = ExplainKind {
    controller: pvc_controller::NAME,
    group: "",
    title: "PersistentVolumeClaim",
    names: &[
        "pvc",
        "pvcs",
        "persistentvolumeclaim",
        "persistentvolumeclaims",
    ],
    namespaced: true,
    name_rule: NameRule::Dns1123Subdomain,
    explain: |client, ns, name| explain_claim(client, ns.unwrap_or_default(), name).boxed(),
    explain_many: None,
};

/// The kind pv-protection explains.
pub const PV_KIND: ExplainKind = ExplainKind {
    controller: pv_controller::NAME,
    group: "",
    title: "PersistentVolume",
    names: &["pv", "pvs", "persistentvolume", "persistentvolumes"],
    namespaced: false,
    name_rule: NameRule::Dns1123Subdomain,
    explain: |client, _, name| explain_volume(client, name).boxed(),
    explain_many: None,
};

/// The kinds this crate explains (the manager's controller table carries
/// them).
pub const KINDS: &[ExplainKind] = &[PVC_KIND, PV_KIND];

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

impl PvExplanation {
    /// The "Phase:" line.
    pub fn fact(&self) -> String {
        format!(
            "Phase:       {}{}",
            self.phase
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("-"),
            self.claim
                .as_ref()
                .map(|c| format!(" (claim {c})"))
                .unwrap_or_default()
        )
    }

    /// Why pv-protection holds the volume (or would).
    pub fn holds(&self) -> Vec<Hold> {
        let Some(why) = &self.in_use else {
            return Vec::new();
        };
        let name = pv_controller::NAME;
        vec![match &why.claim {
            Some(c) => Hold {
                why: format!(
                    "held by {name}: the volume is Bound to claim {c}. It goes once the volume leaves Bound: delete the claim (the volume then becomes Released)."
                ),
                if_deleted: Some(format!("{name} would hold it while it is Bound to {c}.")),
            },
            None => Hold {
                why: format!(
                    "held by {name}: the volume's phase is Bound. It goes once the volume leaves Bound."
                ),
                if_deleted: None,
            },
        }]
    }
}

/// Explains PersistentVolume `name`, read live.
pub async fn explain_volume(
    client: kube::Client,
    name: String,
) -> Result<Option<Explained>, ExplainError> {
    let api: Api<PersistentVolume> = Api::all(client);
    let Some(pv) = get(&api, &name, format!("reading pv {name}")).await? else {
        return Ok(None);
    };
    let e = explain_pv(&PvFacts::from(&pv));
    Ok(Some(Explained {
        facts: vec![e.fact()],
        held: e.holds(),
        meta: pv.metadata,
    }))
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

    /// Why pvc-protection holds the claim of namespace `ns` (or would): its
    /// users, else the pods it could not read.
    pub fn holds(&self, ns: &str) -> Vec<Hold> {
        let name = pvc_controller::NAME;
        let users: Vec<String> = self.users.iter().map(|u| describe_use(ns, u)).collect();
        let unreadable: Vec<String> = self
            .unreadable
            .iter()
            .map(|p| format!("pod {ns}/{} ({})", p.name, p.error))
            .collect();
        let pods = if users.len() == 1 {
            "that pod"
        } else {
            "those pods"
        };
        in_use_holds(
            &users,
            &unreadable,
            |who| Hold {
                why: format!(
                    "held by {name}: the claim is in use by {who}. It goes once no scheduled pod uses it: delete {pods} (a finished pod still counts until it is deleted)."
                ),
                if_deleted: Some(format!("{name} would hold it while {who} uses it.")),
            },
            |who| {
                format!(
                    "{name} cannot tell whether the claim is free: no readable pod uses it, but {who} could not be read. The controller keeps its finalizer while a pod may use the claim."
                )
            },
        )
    }
}

/// "pod ns/web-0 (scheduled on node-1)".
fn describe_use(ns: &str, u: &PodUse) -> String {
    match u.via {
        Via::Claim => format!("pod {ns}/{} (scheduled on {})", u.pod, u.node),
        Via::Ephemeral => format!(
            "pod {ns}/{} (owns it as a generic ephemeral volume, scheduled on {})",
            u.pod, u.node
        ),
    }
}

/// Explains PersistentVolumeClaim `ns/name`, read live with every pod of
/// its namespace (as raw objects: one the controller cannot read is
/// reported, not dropped, nor fails the whole list).
pub async fn explain_claim(
    client: kube::Client,
    ns: String,
    name: String,
) -> Result<Option<Explained>, ExplainError> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let Some(pvc) = get(&api, &name, format!("reading pvc {ns}/{name}")).await? else {
        return Ok(None);
    };
    let phase = pvc
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let volume = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    let fact = format!(
        "Phase:       {}{}",
        if phase.is_empty() { "-" } else { &phase },
        if volume.is_empty() {
            String::new()
        } else {
            format!(" (volume {volume})")
        }
    );
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client, &ns, &ApiResource::erase::<Pod>(&()));
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(failed(format!("listing pods in {ns}")))?;
    let read = list.items.into_iter().map(|p| {
        serde_json::to_value(&p)
            .map_err(|e| UnreadablePod {
                name: p.metadata.name.clone().unwrap_or_default(),
                error: e.to_string(),
            })
            .and_then(read_pod)
    });
    let e = explain_pvc(&PvcFacts::from(&pvc), read);
    Ok(Some(Explained {
        facts: vec![fact],
        held: e.holds(&ns),
        meta: pvc.metadata,
    }))
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

    /// The words `explain` prints for a claim in use, before and during its
    /// deletion.
    #[test]
    fn a_claim_in_use_names_its_pods_and_what_frees_it() {
        let e = explain_pvc(
            &claim(),
            [pod("web-0", Some("node-1"), "data")].map(read_pod),
        );
        assert_eq!(
            e.holds("shop"),
            vec![Hold {
                why: "held by pvc-protection: the claim is in use by pod shop/web-0 (scheduled on node-1). It goes once no scheduled pod uses it: delete that pod (a finished pod still counts until it is deleted).".into(),
                if_deleted: Some(
                    "pvc-protection would hold it while pod shop/web-0 (scheduled on node-1) uses it.".into()
                ),
            }]
        );
        let free = explain_pvc(&claim(), [pod("web-1", None, "data")].map(read_pod));
        assert!(free.holds("shop").is_empty());
    }

    /// An unreadable pod keeps the claim (the controller keeps its
    /// finalizer), and explain names the pod and the error.
    #[test]
    fn an_unreadable_pod_is_a_hold_that_names_it() {
        let bad = json!({
            "metadata": {"name": "odd", "namespace": "shop"},
            "spec": {"nodeName": 7}
        });
        let holds = explain_pvc(&claim(), [read_pod(bad)]).holds("shop");
        assert_eq!(holds.len(), 1, "{holds:?}");
        assert!(
            holds[0]
                .why
                .starts_with("pvc-protection cannot tell whether the claim is free: no readable pod uses it, but pod shop/odd (invalid type"),
            "{holds:?}"
        );
        assert_eq!(holds[0].if_deleted, None);
    }

    #[test]
    fn a_bound_volume_says_its_claim() {
        let pv: PvFacts = serde_json::from_value(json!({
            "metadata": {"name": "pv-1"},
            "spec": {"claimRef": {"namespace": "shop", "name": "data"}},
            "status": {"phase": "Bound"}
        }))
        .unwrap();
        let e = explain_pv(&pv);
        assert_eq!(e.fact(), "Phase:       Bound (claim shop/data)");
        assert_eq!(
            e.holds(),
            vec![Hold {
                why: "held by pv-protection: the volume is Bound to claim shop/data. It goes once the volume leaves Bound: delete the claim (the volume then becomes Released).".into(),
                if_deleted: Some("pv-protection would hold it while it is Bound to shop/data.".into()),
            }]
        );
    }
}

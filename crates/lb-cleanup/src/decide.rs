//! The pure decision: a Service and the facts around it in, a [`Plan`] out.
//!
//! This is upstream's `syncLoadBalancerIfNeeded` (cloud-provider
//! `controllers/service/controller.go`) with the API and cloud calls taken
//! out. The order of the effects is upstream's:
//!
//! * **Ensure** (wants a load balancer, no cleanup due): event
//!   `EnsuringLoadBalancer`; add the finalizer *before* anything is created
//!   (only when the add gate is on); `UnAvailableLoadBalancer` when no node
//!   qualifies; ensure the load balancer; event `EnsuredLoadBalancer`; write
//!   `status.loadBalancer.ingress` only if it differs.
//! * **Cleanup** (no longer wants one, or needs cleanup): ask whether the load
//!   balancer exists; if so event `DeletingLoadBalancer` and delete it; remove
//!   the finalizer and clear the status; event `DeletedLoadBalancer`.
//!
//! Writes (all strategic merge patches of `services/status`, the subresource
//! upstream writes, so the RBAC needs no write on `services`):
//!
//! 1. add the finalizer: its own patch, because it must land before the load
//!    balancer is created and the ingress is only known after;
//! 2. write the ingress: its own patch, only when it changed;
//! 3. remove the finalizer *and* clear the ingress in **one** patch. Upstream
//!    sends two (finalizer, then status, ignoring NotFound because the Service
//!    usually vanishes in between). One patch is atomic, so no state exists in
//!    which the finalizer is gone but a stale ingress is still advertised, and
//!    a Service being deleted costs one write instead of a write plus a 404.
//!
//! So a Service's whole life costs at most three writes by this controller,
//! and a sync that finds everything in place costs none.
//!
//! Every patch carries `metadata.uid`, which the API server checks as a
//! precondition: a write aimed at a Service that was deleted and recreated
//! under the same name fails with a conflict instead of touching the new one.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use serde_json::{Map, Value, json};

use crate::predicates::{ClassSelector, needs_cleanup, wants_load_balancer};
use crate::provider::{LbNode, LbRef, LbSpec, LbStatus, SpecError};
use protection_core::finalizer::{
    has_finalizer, strategic_add_fragment, strategic_remove_fragment,
};

/// A node set shared between every Service that was given it (a set of
/// thousands of nodes is stored once, not once per Service).
pub type NodeSet = Arc<Vec<LbNode>>;

/// What the decision depends on besides the Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Which Services are ours.
    pub classes: ClassSelector,
    /// The finalizer this controller owns.
    pub finalizer: String,
    /// The add phase (`ServiceLoadBalancerFinalizer` at the emulated
    /// version). Removal is never gated.
    pub add_finalizer: bool,
}

/// Upstream's `loadBalancerOperation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Ensure,
    Delete,
}

/// What to do with one Service.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    Ensure(EnsurePlan),
    Cleanup(CleanupPlan),
}

impl Plan {
    pub fn op(&self) -> Op {
        match self {
            Plan::Ensure(_) => Op::Ensure,
            Plan::Cleanup(_) => Op::Delete,
        }
    }

    pub fn lb(&self) -> &LbRef {
        match self {
            Plan::Ensure(p) => &p.lb,
            Plan::Cleanup(p) => &p.lb,
        }
    }
}

/// The ensure branch.
#[derive(Debug, Clone, PartialEq)]
pub struct EnsurePlan {
    pub lb: LbRef,
    /// The patch adding the finalizer, sent before the provider is called;
    /// `None` when it is already there or the add gate is off.
    pub add_finalizer: Option<Value>,
    /// The load balancer's spec, or why the Service cannot have one (reported
    /// as a failure to ensure, after the finalizer was added, as upstream
    /// reports a provider's refusal).
    pub spec: Result<LbSpec, SpecError>,
    /// Target nodes (upstream's stable node set), sorted by name.
    pub nodes: NodeSet,
    /// `status.loadBalancer.ingress` as read.
    pub previous_ingress: Vec<LoadBalancerIngress>,
}

impl EnsurePlan {
    /// Upstream's `UnAvailableLoadBalancer` warning is due.
    pub fn no_nodes(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The status patch after the provider answered `status`, or `None` when
    /// the Service already shows it (upstream `patchStatus` +
    /// `LoadBalancerStatusEqual`).
    pub fn status_write(&self, status: &LbStatus) -> Option<Value> {
        status_patch(&self.lb.uid, &self.previous_ingress, status)
    }
}

/// The cleanup branch.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanupPlan {
    pub lb: LbRef,
    /// The one patch that removes the finalizer and clears the ingress
    /// (whichever of the two is needed); `None` when neither is.
    pub final_write: Option<FinalWrite>,
    /// `metadata.deletionTimestamp` when the Service is being deleted.
    pub deleting_since: Option<jiff::Timestamp>,
}

/// The closing write of a cleanup.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalWrite {
    pub body: Value,
    pub removes_finalizer: bool,
    pub clears_status: bool,
}

/// The Service cannot be identified (no namespace, name or uid).
pub type DecideError = SpecError;

/// Decides what to do with `svc`, given the policy and the target nodes.
pub fn decide(
    svc: &Service,
    policy: &Policy,
    nodes: impl Into<NodeSet>,
) -> Result<Plan, DecideError> {
    let lb = LbRef::from_service(svc)?;
    let previous_ingress = ingress_of(svc);
    let deleting = svc.metadata.deletion_timestamp.is_some();
    // Upstream: `!wantsLoadBalancer || needsCleanup`. Deliberate addition:
    // a Service being deleted never takes the ensure branch. Upstream would
    // try to add its finalizer, which the API server forbids on an object
    // being deleted, and retry that forever; creating a load balancer for a
    // Service on its way out is pointless anyway. Cleaning up instead deletes
    // a load balancer that exists (e.g. created while the add gate was off).
    if !wants_load_balancer(svc, &policy.classes)
        || needs_cleanup(svc, &policy.finalizer)
        || deleting
    {
        let removes_finalizer = has_finalizer(&svc.metadata, &policy.finalizer);
        let clears_status = !previous_ingress.is_empty();
        let final_write = (removes_finalizer || clears_status).then(|| {
            let meta = if removes_finalizer {
                strategic_remove_fragment(&lb.uid, &policy.finalizer)
            } else {
                Map::from_iter([("uid".to_string(), json!(lb.uid))])
            };
            let mut body = Map::new();
            body.insert("metadata".into(), Value::Object(meta));
            if clears_status {
                body.insert("status".into(), json!({"loadBalancer": {"ingress": null}}));
            }
            FinalWrite {
                body: Value::Object(body),
                removes_finalizer,
                clears_status,
            }
        });
        return Ok(Plan::Cleanup(CleanupPlan {
            lb,
            final_write,
            deleting_since: svc.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        }));
    }
    let add_finalizer = (policy.add_finalizer && !has_finalizer(&svc.metadata, &policy.finalizer))
        .then(|| json!({"metadata": strategic_add_fragment(&lb.uid, &policy.finalizer)}));
    Ok(Plan::Ensure(EnsurePlan {
        spec: LbSpec::from_service(svc),
        lb,
        add_finalizer,
        nodes: nodes.into(),
        previous_ingress,
    }))
}

/// `status.loadBalancer.ingress` of a Service (empty when absent).
pub fn ingress_of(svc: &Service) -> Vec<LoadBalancerIngress> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.clone())
        .unwrap_or_default()
}

fn str_eq(a: &Option<String>, b: &Option<String>) -> bool {
    a.as_deref().unwrap_or("") == b.as_deref().unwrap_or("")
}

/// The IP mode an ingress item has once stored: kube-apiserver (1.30+)
/// defaults an absent `ipMode` to `VIP` when `ip` is set.
fn stored_ip_mode(x: &LoadBalancerIngress) -> &str {
    match x.ip_mode.as_deref().unwrap_or("") {
        "" if !x.ip.as_deref().unwrap_or("").is_empty() => "VIP",
        mode => mode,
    }
}

/// cloud-provider `service/helpers.LoadBalancerStatusEqual`: the same
/// ingress items in the same order, compared by IP, hostname and IP mode.
///
/// Deviation (docs/upstream-semantics.md §9): the IP mode is compared as the
/// API server stores it ([`stored_ip_mode`]). A provider that reports
/// `{ip}` would otherwise differ from the stored `{ip, ipMode: VIP}` on every
/// sync and the status would be re-patched each time.
pub fn ingress_equal(a: &[LoadBalancerIngress], b: &[LoadBalancerIngress]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            str_eq(&x.ip, &y.ip)
                && str_eq(&x.hostname, &y.hostname)
                && stored_ip_mode(x) == stored_ip_mode(y)
        })
}

/// The patch writing `status` over `previous`, or `None` when equal.
/// An empty status clears the field (`ingress: null`), as upstream's
/// two-way merge patch does.
pub fn status_patch(
    uid: &str,
    previous: &[LoadBalancerIngress],
    status: &LbStatus,
) -> Option<Value> {
    let next = status.to_k8s().ingress.unwrap_or_default();
    if ingress_equal(previous, &next) {
        return None;
    }
    let ingress = if next.is_empty() {
        Value::Null
    } else {
        serde_json::to_value(&next).unwrap_or(Value::Null)
    };
    Some(json!({"metadata": {"uid": uid}, "status": {"loadBalancer": {"ingress": ingress}}}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::LbIngress;
    use k8s_openapi::api::core::v1::{LoadBalancerStatus, ServicePort, ServiceSpec, ServiceStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    pub(crate) const F: &str = "service.kubernetes.io/load-balancer-cleanup";
    pub(crate) const CLASS: &str = "protection-manager.io/load-balancer";
    const UID: &str = "6f1c9a2e-1b7d-4c4e-9a55-0d2c1e7f3b21";

    fn policy(add: bool) -> Policy {
        Policy {
            classes: ClassSelector {
                class: CLASS.into(),
                include_unclassed: false,
            },
            finalizer: F.into(),
            add_finalizer: add,
        }
    }

    fn svc(type_: &str, protocol: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("svc".into()),
                namespace: Some("default".into()),
                uid: Some(UID.into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: (type_ == "LoadBalancer").then(|| CLASS.to_owned()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    protocol: Some(protocol.into()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn with_finalizer(mut s: Service) -> Service {
        s.metadata.finalizers = Some(vec!["example.com/other".into(), F.into()]);
        s
    }

    fn with_ingress(mut s: Service, ip: &str) -> Service {
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some(ip.into()),
                    ..LoadBalancerIngress::default()
                }]),
            }),
            conditions: None,
        });
        s
    }

    fn deleting(mut s: Service) -> Service {
        s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        s
    }

    fn node(name: &str) -> LbNode {
        LbNode {
            name: name.into(),
            provider_id: String::new(),
            addresses: vec![],
        }
    }

    fn status(ip: &str) -> LbStatus {
        LbStatus {
            ingress: vec![LbIngress {
                ip: Some(ip.parse().unwrap()),
                hostname: None,
                ip_mode: None,
            }],
        }
    }

    /// The plan-level half of upstream `TestSyncLoadBalancerIfNeeded`
    /// (docs/upstream-semantics.md §5.13): which branch, and whether a finalizer patch is planned. The
    /// provider calls and status patches are checked against a fake provider
    /// in `sync::tests`, which runs the same table end to end.
    #[test]
    fn sync_load_balancer_if_needed_plans() {
        let class_only = {
            let mut s = svc("LoadBalancer", "TCP");
            if let Some(sp) = s.spec.as_mut() {
                sp.load_balancer_class = Some("custom-loadbalancer".into());
            }
            s
        };
        // (upstream desc, service, op, finalizer patch)
        let cases: Vec<(&str, Service, Op, bool)> = vec![
            (
                "service doesn't want LB",
                svc("ClusterIP", "TCP"),
                Op::Delete,
                false,
            ),
            (
                "udp service that wants LB",
                svc("LoadBalancer", "UDP"),
                Op::Ensure,
                true,
            ),
            (
                "tcp service that wants LB",
                svc("LoadBalancer", "TCP"),
                Op::Ensure,
                true,
            ),
            (
                "sctp service that wants LB",
                svc("LoadBalancer", "SCTP"),
                Op::Ensure,
                true,
            ),
            (
                "service specifies loadBalancerClass",
                class_only,
                Op::Delete,
                false,
            ),
            (
                "service with finalizer that no longer wants LB",
                with_ingress(with_finalizer(svc("ClusterIP", "TCP")), "8.8.8.8"),
                Op::Delete,
                true,
            ),
            (
                "service that needs cleanup",
                deleting(with_ingress(
                    with_finalizer(svc("LoadBalancer", "TCP")),
                    "8.8.8.8",
                )),
                Op::Delete,
                true,
            ),
            (
                "service with finalizer that wants LB",
                with_finalizer(svc("LoadBalancer", "TCP")),
                Op::Ensure,
                false,
            ),
        ];
        for (desc, s, op, finalizer_patch) in cases {
            let plan = decide(&s, &policy(true), vec![node("a")]).unwrap();
            assert_eq!(plan.op(), op, "{desc}");
            let got = match &plan {
                Plan::Ensure(p) => p.add_finalizer.is_some(),
                Plan::Cleanup(p) => p.final_write.as_ref().is_some_and(|w| w.removes_finalizer),
            };
            assert_eq!(got, finalizer_patch, "{desc}");
            assert_eq!(plan.lb().uid, UID, "{desc}");
        }
    }

    #[test]
    fn add_phase_is_gated_and_removal_is_not() {
        // Gate off (release 0.1): no add, the load balancer is still ensured.
        let Plan::Ensure(p) = decide(&svc("LoadBalancer", "TCP"), &policy(false), vec![]).unwrap()
        else {
            panic!("want ensure")
        };
        assert_eq!(p.add_finalizer, None);
        // A finalizer left by a newer release is still removed on delete.
        let s = deleting(with_finalizer(svc("LoadBalancer", "TCP")));
        let Plan::Cleanup(p) = decide(&s, &policy(false), vec![]).unwrap() else {
            panic!("want cleanup")
        };
        assert!(p.final_write.unwrap().removes_finalizer);
    }

    #[test]
    fn patch_bodies_are_strategic_merge_with_uid_precondition() {
        let Plan::Ensure(p) = decide(&svc("LoadBalancer", "TCP"), &policy(true), vec![]).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            p.add_finalizer.unwrap(),
            json!({"metadata": {"uid": UID, "finalizers": [F]}})
        );

        // Remove + clear in one patch; other finalizers untouched.
        let s = deleting(with_ingress(
            with_finalizer(svc("LoadBalancer", "TCP")),
            "8.8.8.8",
        ));
        let Plan::Cleanup(p) = decide(&s, &policy(true), vec![]).unwrap() else {
            panic!()
        };
        let w = p.final_write.unwrap();
        assert_eq!(
            w.body,
            json!({
                "metadata": {"uid": UID, "$deleteFromPrimitiveList/finalizers": [F]},
                "status": {"loadBalancer": {"ingress": null}}
            })
        );
        assert!(w.removes_finalizer && w.clears_status);
        assert_eq!(p.deleting_since, Some(jiff::Timestamp::UNIX_EPOCH));

        // Finalizer only (no ingress to clear).
        let s = with_finalizer(svc("ClusterIP", "TCP"));
        let Plan::Cleanup(p) = decide(&s, &policy(true), vec![]).unwrap() else {
            panic!()
        };
        let w = p.final_write.unwrap();
        assert_eq!(
            w.body,
            json!({"metadata": {"uid": UID, "$deleteFromPrimitiveList/finalizers": [F]}})
        );
        assert!(!w.clears_status);

        // Status only (a ClusterIP Service with a leftover ingress, no finalizer).
        let s = with_ingress(svc("ClusterIP", "TCP"), "192.0.2.1");
        let Plan::Cleanup(p) = decide(&s, &policy(true), vec![]).unwrap() else {
            panic!()
        };
        let w = p.final_write.unwrap();
        assert!(!w.removes_finalizer && w.clears_status);

        // Nothing to write.
        let Plan::Cleanup(p) = decide(&svc("ClusterIP", "TCP"), &policy(true), vec![]).unwrap()
        else {
            panic!()
        };
        assert_eq!(p.final_write, None);
        assert_eq!(p.deleting_since, None);
    }

    #[test]
    fn a_service_being_deleted_without_our_finalizer_is_cleaned_up() {
        // Deliberate deviation (see decide): never ensure for a dying Service.
        let s = deleting(svc("LoadBalancer", "TCP"));
        let plan = decide(&s, &policy(true), vec![]).unwrap();
        assert_eq!(plan.op(), Op::Delete);
        let Plan::Cleanup(p) = plan else { panic!() };
        assert_eq!(p.final_write, None);
    }

    #[test]
    fn nodes_and_spec_are_carried_into_the_plan() {
        let Plan::Ensure(p) = decide(
            &svc("LoadBalancer", "TCP"),
            &policy(true),
            vec![node("a"), node("b")],
        )
        .unwrap() else {
            panic!()
        };
        assert!(!p.no_nodes());
        assert_eq!(p.nodes.len(), 2);
        assert_eq!(p.spec.as_ref().unwrap().ports[0].port, 80);

        let mut bad = svc("LoadBalancer", "TCP");
        if let Some(sp) = bad.spec.as_mut() {
            sp.ports = None;
        }
        let Plan::Ensure(p) = decide(&bad, &policy(true), vec![]).unwrap() else {
            panic!()
        };
        assert!(p.no_nodes());
        assert_eq!(
            p.spec.unwrap_err().to_string(),
            "Service default/svc: has no ports; a load balancer needs at least one"
        );
        // The finalizer is still added first, as upstream does before the
        // provider refuses.
        let mut unnamed = svc("LoadBalancer", "TCP");
        unnamed.metadata.uid = None;
        assert_eq!(
            decide(&unnamed, &policy(true), vec![])
                .unwrap_err()
                .to_string(),
            "Service default/svc: has no metadata.uid"
        );
    }

    /// Port of upstream `TestPatchStatus`: no patch when equal, a patch to add
    /// and to clear.
    #[test]
    fn patch_status_table() {
        let prev = |ip: Option<&str>| {
            ip.map(|ip| {
                vec![LoadBalancerIngress {
                    ip: Some(ip.into()),
                    ..LoadBalancerIngress::default()
                }]
            })
            .unwrap_or_default()
        };
        let cases = [
            (
                "no-op add status",
                prev(Some("8.8.8.8")),
                status("8.8.8.8"),
                false,
            ),
            ("add status", prev(None), status("8.8.8.8"), true),
            ("no-op clear status", prev(None), LbStatus::default(), false),
            (
                "clear status",
                prev(Some("8.8.8.8")),
                LbStatus::default(),
                true,
            ),
            (
                "change status",
                prev(Some("8.8.8.8")),
                status("8.8.4.4"),
                true,
            ),
        ];
        for (desc, previous, new, want) in cases {
            assert_eq!(status_patch(UID, &previous, &new).is_some(), want, "{desc}");
        }
        assert_eq!(
            status_patch(UID, &[], &status("203.0.113.9")).unwrap(),
            json!({"metadata": {"uid": UID}, "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}})
        );
        assert_eq!(
            status_patch(UID, &prev(Some("8.8.8.8")), &LbStatus::default()).unwrap(),
            json!({"metadata": {"uid": UID}, "status": {"loadBalancer": {"ingress": null}}})
        );
    }

    #[test]
    fn ingress_equality_compares_ip_hostname_and_ip_mode_in_order() {
        let i = |ip: &str, host: Option<&str>, mode: Option<&str>| LoadBalancerIngress {
            ip: (!ip.is_empty()).then(|| ip.to_owned()),
            hostname: host.map(str::to_owned),
            ip_mode: mode.map(str::to_owned),
            ports: None,
        };
        let a = [
            i("1.1.1.1", None, Some("VIP")),
            i("", Some("lb.example.com"), None),
        ];
        assert!(ingress_equal(&a, &a.clone()));
        let mut b = a.clone();
        b.reverse();
        assert!(!ingress_equal(&a, &b));
        assert!(!ingress_equal(
            &a,
            &[i("1.1.1.1", None, Some("Proxy")), a[1].clone()]
        ));
        assert!(!ingress_equal(&a, &a[..1]));
        // Ports are not compared (upstream neither).
        let mut c = a.clone();
        c[0].ports = Some(vec![]);
        assert!(ingress_equal(&a, &c));
        // Absent and empty strings are the same Go value.
        assert!(ingress_equal(
            &[i("1.1.1.1", Some(""), None)],
            &[i("1.1.1.1", None, Some(""))]
        ));
        // An absent IP mode next to an IP is the server's default, VIP.
        assert!(ingress_equal(
            &[i("1.1.1.1", None, None)],
            &[i("1.1.1.1", None, Some("VIP"))]
        ));
        assert!(!ingress_equal(
            &[i("1.1.1.1", None, None)],
            &[i("1.1.1.1", None, Some("Proxy"))]
        ));
        // A hostname-only item gets no default.
        assert!(!ingress_equal(
            &[i("", Some("lb.example.com"), None)],
            &[i("", Some("lb.example.com"), Some("VIP"))]
        ));
    }
}

//! The nodes a load balancer targets: upstream's stable node-set predicates
//! (cloud-provider `controllers/service/controller.go`,
//! `stableNodeSetPredicates`, KEP-3458).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

/// Label that takes a node out of external load balancers.
pub const EXCLUDE_FROM_EXTERNAL_LB_LABEL: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

/// Taint the Cluster Autoscaler puts on a node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// One address of a node (`InternalIP` or `ExternalIP`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LbNodeAddress {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

/// A node a load balancer sends traffic to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LbNode {
    pub name: String,
    /// `spec.providerID`, empty when unset.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// The node's `InternalIP` and `ExternalIP` addresses, in status order.
    pub addresses: Vec<LbNodeAddress>,
}

impl LbNode {
    fn from_node(node: &Node) -> Option<Self> {
        let name = node.metadata.name.clone().filter(|n| !n.is_empty())?;
        Some(Self {
            name,
            provider_id: node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .unwrap_or_default(),
            addresses: node
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
                .map(|a| LbNodeAddress {
                    kind: a.type_.clone(),
                    address: a.address.clone(),
                })
                .collect(),
        })
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Upstream `nodeIncludedPredicate`: a node without the exclusion label is
/// included; with it, the value is parsed as a Go bool and `false` keeps the
/// node included, while `true` or an unparsable value (including the empty
/// string) excludes it.
pub fn node_included(node: &Node) -> bool {
    match node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXCLUDE_FROM_EXTERNAL_LB_LABEL))
    {
        None => true,
        Some(v) => parse_go_bool(v) == Some(false),
    }
}

fn node_untainted(node: &Node) -> bool {
    !node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT))
}

fn node_not_deleted(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
}

/// Upstream `stableNodeSetPredicates`: not being deleted, not excluded by
/// label, not tainted `ToBeDeletedByClusterAutoscaler`. Readiness is not
/// required (KEP-3458).
pub fn node_in_stable_set(node: &Node) -> bool {
    node_not_deleted(node) && node_included(node) && node_untainted(node)
}

/// The nodes a load balancer should target, sorted by name.
pub fn lb_nodes<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<LbNode> {
    let mut out: Vec<LbNode> = nodes
        .into_iter()
        .filter(|n| node_in_stable_set(n))
        .filter_map(LbNode::from_node)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Upstream `nodesSufficientlyEqual`: the same node names with the same
/// providerIDs (addresses and order do not matter).
pub fn same_node_set(a: &[LbNode], b: &[LbNode]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let map = |v: &[LbNode]| -> BTreeMap<String, String> {
        v.iter()
            .map(|n| (n.name.clone(), n.provider_id.clone()))
            .collect()
    };
    map(a) == map(b)
}

/// Upstream `shouldSyncUpdatedNode`: a node update matters to load balancers
/// when the exclusion label predicate flips or the providerID changes.
/// (Additions and deletions of nodes always matter.)
pub fn should_sync_updated_node(old: &Node, new: &Node) -> bool {
    let provider_id = |n: &Node| n.spec.as_ref().and_then(|s| s.provider_id.clone());
    node_included(old) != node_included(new) || provider_id(old) != provider_id(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(format!("sim://{name}")),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: name.into(),
                    },
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: "10.0.0.1".into(),
                    },
                    NodeAddress {
                        type_: "ExternalIP".into(),
                        address: "192.0.2.1".into(),
                    },
                ]),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    fn labelled(name: &str, value: &str) -> Node {
        let mut n = node(name);
        n.metadata.labels =
            Some([(EXCLUDE_FROM_EXTERNAL_LB_LABEL.to_owned(), value.to_owned())].into());
        n
    }

    fn names(nodes: &[LbNode]) -> Vec<&str> {
        nodes.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn not_ready_nodes_are_kept_and_sorted_with_their_addresses() {
        let out = lb_nodes(&[node("c"), node("a"), node("b")]);
        assert_eq!(names(&out), ["a", "b", "c"]);
        assert_eq!(out[0].provider_id, "sim://a");
        assert_eq!(
            out[0].addresses,
            [
                LbNodeAddress {
                    kind: "InternalIP".into(),
                    address: "10.0.0.1".into()
                },
                LbNodeAddress {
                    kind: "ExternalIP".into(),
                    address: "192.0.2.1".into()
                },
            ]
        );
    }

    #[test]
    fn nodes_being_deleted_are_skipped() {
        let mut gone = node("gone");
        gone.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(names(&lb_nodes(&[gone, node("kept")])), ["kept"]);
    }

    #[test]
    fn exclusion_label_value_is_parsed_as_a_go_bool() {
        let nodes = [
            labelled("true", "true"),
            labelled("one", "1"),
            labelled("capital-true", "True"),
            labelled("empty", ""),
            labelled("garbage", "yes"),
            labelled("false", "false"),
            labelled("zero", "0"),
            labelled("f", "F"),
            node("unlabelled"),
        ];
        assert_eq!(
            names(&lb_nodes(&nodes)),
            ["f", "false", "unlabelled", "zero"]
        );
    }

    #[test]
    fn nodes_tainted_for_autoscaler_deletion_are_skipped() {
        let mut tainted = node("tainted");
        if let Some(spec) = tainted.spec.as_mut() {
            spec.taints = Some(vec![
                Taint {
                    key: "other".into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                },
                Taint {
                    key: TO_BE_DELETED_TAINT.into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                },
            ]);
        }
        let mut other_taint = node("other-taint");
        if let Some(spec) = other_taint.spec.as_mut() {
            spec.taints = Some(vec![Taint {
                key: "dedicated".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }]);
        }
        assert_eq!(names(&lb_nodes(&[tainted, other_taint])), ["other-taint"]);
    }

    #[test]
    fn nodes_without_spec_or_status_have_empty_fields() {
        let bare = Node {
            metadata: ObjectMeta {
                name: Some("bare".into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: None,
        };
        let out = lb_nodes(&[bare]);
        assert_eq!(
            out,
            [LbNode {
                name: "bare".into(),
                provider_id: String::new(),
                addresses: vec![]
            }]
        );
    }

    #[test]
    fn same_node_set_compares_names_and_provider_ids_only() {
        let a = lb_nodes(&[node("a"), node("b")]);
        let mut b = lb_nodes(&[node("b"), node("a")]);
        b.reverse();
        b[0].addresses.clear();
        assert!(same_node_set(&a, &b));
        let mut c = a.clone();
        c[1].provider_id = "sim://moved".into();
        assert!(!same_node_set(&a, &c));
        assert!(!same_node_set(&a, &a[..1]));
        let d = lb_nodes(&[node("a"), node("x")]);
        assert!(!same_node_set(&a, &d));
    }

    #[test]
    fn updated_node_sync_follows_the_included_predicate_and_provider_id() {
        let base = node("n");
        assert!(!should_sync_updated_node(&base, &base));
        assert!(should_sync_updated_node(&base, &labelled("n", "true")));
        // "false" keeps the node included: no flip.
        assert!(!should_sync_updated_node(&base, &labelled("n", "false")));
        let mut moved = node("n");
        if let Some(s) = moved.spec.as_mut() {
            s.provider_id = Some("sim://other".into());
        }
        assert!(should_sync_updated_node(&base, &moved));
        // Readiness changes do not matter.
        let mut ready = node("n");
        if let Some(st) = ready.status.as_mut() {
            st.conditions = None;
        }
        assert!(!should_sync_updated_node(&base, &ready));
    }
}

//! The wire types of the load-balancer HTTP contract
//! (docs/lb-provider-http-contract.md), as cloud-sim reads and writes them.
//!
//! These types are deliberately independent of the `http` provider's own types
//! in `lb-cleanup`: the two sides of the contract are written separately, so
//! the contract tests catch a drift of either side from the document.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The Kubernetes Service a load balancer belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One Service port the load balancer forwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    #[serde(default)]
    pub name: String,
    #[serde(default = "default_protocol")]
    pub protocol: String,
    pub port: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i32>,
}

fn default_protocol() -> String {
    "TCP".to_owned()
}

/// What the load balancer must provide, taken from the Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub ports: Vec<Port>,
    #[serde(
        default,
        rename = "loadBalancerIP",
        skip_serializing_if = "Option::is_none"
    )]
    pub load_balancer_ip: Option<String>,
    #[serde(default)]
    pub load_balancer_source_ranges: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_node_port: Option<i32>,
    #[serde(default)]
    pub ip_families: Vec<String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// One address of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAddress {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

/// One node the load balancer sends traffic to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub name: String,
    #[serde(default, rename = "providerID")]
    pub provider_id: String,
    #[serde(default)]
    pub addresses: Vec<NodeAddress>,
}

/// Body of `PUT /v1/loadbalancers/{uid}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnsureRequest {
    pub name: String,
    pub service: ServiceRef,
    pub spec: Spec,
    #[serde(default)]
    pub nodes: Vec<Node>,
}

/// Body of `PUT /v1/loadbalancers/{uid}/hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostsRequest {
    pub nodes: Vec<Node>,
}

/// One externally visible address of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ingress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_mode: Option<String>,
}

/// Status of a load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub ingress: Vec<Ingress>,
}

/// A load balancer as the API returns it and as the state file stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    pub uid: String,
    pub name: String,
    pub service: ServiceRef,
    pub spec: Spec,
    pub nodes: Vec<Node>,
    pub status: Status,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Incremented each time the spec or the nodes change.
    pub generation: u64,
}

impl LoadBalancer {
    /// The IPv4 address cloud-sim allocated to this load balancer.
    pub fn ip(&self) -> Option<std::net::Ipv4Addr> {
        self.status
            .ingress
            .iter()
            .find_map(|i| i.ip.as_deref()?.parse().ok())
    }
}

/// Body of `GET /v1/loadbalancers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub items: Vec<LoadBalancer>,
}

/// The error body every non-2xx reply carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// Machine-readable code and human-readable message of an error reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// Error codes of the contract.
pub mod codes {
    pub const INVALID_REQUEST: &str = "InvalidRequest";
    /// 413: the request body is larger than the server accepts.
    pub const REQUEST_TOO_LARGE: &str = "RequestTooLarge";
    pub const UNAUTHORIZED: &str = "Unauthorized";
    pub const FORBIDDEN: &str = "Forbidden";
    pub const NOT_FOUND: &str = "NotFound";
    pub const IP_IN_USE: &str = "IPInUse";
    pub const SERVICE_MISMATCH: &str = "ServiceMismatch";
    pub const ADDRESS_POOL_EXHAUSTED: &str = "AddressPoolExhausted";
    pub const RATE_LIMITED: &str = "RateLimited";
    pub const INTERNAL: &str = "InternalError";
    pub const UNAVAILABLE: &str = "Unavailable";
    pub const IMPLEMENTED_ELSEWHERE: &str = "ImplementedElsewhere";
    pub const DELETION_IN_PROGRESS: &str = "DeletionInProgress";
    pub const INJECTED: &str = "InjectedFault";
    pub const HANG_TIMEOUT: &str = "HangTimeout";
}

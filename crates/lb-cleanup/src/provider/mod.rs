//! Load-balancer providers: the [`LoadBalancerProvider`] trait, shaped like
//! upstream's `cloudprovider.LoadBalancer` interface (k8s.io/cloud-provider
//! `cloud.go`), and its implementations.
//!
//! - [`http::HttpProvider`] speaks the JSON/HTTP contract of
//!   `docs/lb-provider-http-contract.md`, which any team can put in front of
//!   its own load-balancer API; `cloud-sim` implements it for tests.
//!
//! Providers never retry: the controller owns retries and backoff, and reads
//! [`ProviderError::retry_after`] and [`ProviderError::is_retryable`].

use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

pub mod http;
mod nodes;
mod types;

pub use nodes::{
    EXCLUDE_FROM_EXTERNAL_LB_LABEL, LbNode, LbNodeAddress, TO_BE_DELETED_TAINT, lb_nodes,
    node_in_stable_set, node_included, same_node_set, should_sync_updated_node,
};
pub use types::{
    LbIngress, LbPort, LbRef, LbSpec, LbStatus, SpecError, default_load_balancer_name,
};

/// Why a provider call failed.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ProviderError {
    /// The provider asked to be called again after exactly `after`
    /// (upstream `api.RetryError`): HTTP 429 or 503 with `Retry-After`, or a
    /// deletion still in progress (202).
    #[error("{message} (retry after {after:?})")]
    RetryAfter { after: Duration, message: String },

    /// Another controller implements load balancers for this Service
    /// (upstream `cloudprovider.ImplementedElsewhere`). The controller treats
    /// it as upstream does: ensure returns at once without a status write,
    /// update and delete are no-ops.
    #[error("load balancers for this Service are implemented elsewhere")]
    ImplementedElsewhere,

    /// A 5xx reply, a 429 without usable `Retry-After`, or a connection
    /// problem: retry with backoff.
    #[error("{message}")]
    Transient {
        /// HTTP status, when there was a reply.
        status: Option<u16>,
        message: String,
    },

    /// No reply within the request timeout. The call may or may not have
    /// taken effect; every call of the contract is idempotent, so retrying
    /// it is safe.
    #[error("{message}")]
    Timeout { message: String },

    /// 409: the request conflicts with the provider's state (e.g. the
    /// requested address is in use). Retrying later may succeed.
    #[error("{message}")]
    Conflict { message: String },

    /// 401 or 403: the bearer token is missing, wrong or lacks rights. The
    /// message names the token file.
    #[error("{message}")]
    Unauthorized { status: u16, message: String },

    /// The load balancer does not exist where it must (an update of the
    /// hosts of a load balancer that is gone).
    #[error("{message}")]
    NotFound { message: String },

    /// 400, 422 or another 4xx: the provider refused the request as invalid;
    /// the same request will fail again until the Service changes.
    #[error("{message}")]
    InvalidRequest { status: u16, message: String },

    /// The reply breaks the contract; the message quotes what was wrong.
    #[error("{message}")]
    InvalidReply { message: String },

    /// The provider is misconfigured (endpoint URL, token file).
    #[error("{message}")]
    Config { message: String },
}

impl ProviderError {
    /// Whether retrying the same call later can succeed without a change to
    /// the Service or to the provider's configuration. The controller
    /// requeues every failure anyway (with backoff, as upstream); this tells
    /// it, e.g., how loudly to report.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RetryAfter { .. }
                | ProviderError::Transient { .. }
                | ProviderError::Timeout { .. }
                | ProviderError::Conflict { .. }
        )
    }

    /// The exact delay the provider asked for, if it asked for one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RetryAfter { after, .. } => Some(*after),
            _ => None,
        }
    }
}

/// A load-balancer implementation, as the service-lb-cleanup controller sees
/// it. Calls are keyed by the Service UID ([`LbRef::uid`]) and idempotent.
#[async_trait]
pub trait LoadBalancerProvider: Send + Sync {
    /// Short name for logs and metrics (`http`, ...).
    fn name(&self) -> &str;

    /// Upstream `GetLoadBalancer`: `Some(status)` when a load balancer
    /// created for this Service exists, `None` when it does not.
    async fn get(&self, lb: &LbRef) -> Result<Option<LbStatus>, ProviderError>;

    /// Upstream `EnsureLoadBalancer`: create the load balancer, or update it
    /// to match `spec` and `nodes`; returns its status. Idempotent.
    async fn ensure(
        &self,
        lb: &LbRef,
        spec: &LbSpec,
        nodes: &[LbNode],
    ) -> Result<LbStatus, ProviderError>;

    /// Upstream `UpdateLoadBalancer`: point an existing load balancer at
    /// `nodes`. A load balancer that does not exist is
    /// [`ProviderError::NotFound`].
    async fn update_hosts(
        &self,
        lb: &LbRef,
        spec: &LbSpec,
        nodes: &[LbNode],
    ) -> Result<(), ProviderError>;

    /// Upstream `EnsureLoadBalancerDeleted`: `Ok` only once the load
    /// balancer is gone; a load balancer that does not exist is `Ok`.
    async fn ensure_deleted(&self, lb: &LbRef) -> Result<(), ProviderError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn retryable_errors() {
        let retryable = [
            ProviderError::RetryAfter {
                after: Duration::from_secs(3),
                message: "slow down".into(),
            },
            ProviderError::Transient {
                status: Some(503),
                message: "x".into(),
            },
            ProviderError::Timeout {
                message: "x".into(),
            },
            ProviderError::Conflict {
                message: "x".into(),
            },
        ];
        let final_ = [
            ProviderError::ImplementedElsewhere,
            ProviderError::Unauthorized {
                status: 401,
                message: "x".into(),
            },
            ProviderError::NotFound {
                message: "x".into(),
            },
            ProviderError::InvalidRequest {
                status: 400,
                message: "x".into(),
            },
            ProviderError::InvalidReply {
                message: "x".into(),
            },
            ProviderError::Config {
                message: "x".into(),
            },
        ];
        assert!(retryable.iter().all(ProviderError::is_retryable));
        assert!(!final_.iter().any(ProviderError::is_retryable));
        assert_eq!(retryable[0].retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(retryable[1].retry_after(), None);
        assert_eq!(retryable[0].to_string(), "slow down (retry after 3s)");
    }

    #[test]
    fn the_trait_is_object_safe_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + ?Sized>() {}
        assert_send_sync::<dyn LoadBalancerProvider>();
        let _: Option<Arc<dyn LoadBalancerProvider>> = None;
    }
}

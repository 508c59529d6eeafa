//! service-lb-cleanup: the Service load-balancer cleanup finalizer controller
//! and its load-balancer providers.
//!
//! * [`predicates`]: which Services are ours and when a change matters
//!   (upstream `wantsLoadBalancer`, `needsCleanup`, `needsUpdate`).
//! * [`decide`]: the pure decision, Service + facts → [`decide::Plan`].
//! * [`sync`]: carrying a plan out against a provider, a `services/status`
//!   writer and an event sink (upstream's sync, deletion and node-sync paths).
//! * [`controller`]: the kube-runtime wiring (watches, filters, backoff,
//!   node sync, shutdown).
//! * [`provider`]: the [`provider::LoadBalancerProvider`] trait and the
//!   `http` provider.

pub mod controller;
pub mod decide;
pub mod explain;
pub mod metrics;
pub mod predicates;
pub mod provider;
pub mod sync;
mod wiring;

pub use wiring::{
    CONTROLLER_NAME, ConfigError, DEFAULT_CLASS, GATES, INFO, INFOS, Options, PROJECT_FINALIZER,
    SERVICE_LOAD_BALANCER_FINALIZER, UPSTREAM_FINALIZER, descriptors, finalizer_name,
};

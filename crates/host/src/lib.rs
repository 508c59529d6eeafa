//! protection-host: the manager process around the controllers, which no
//! controller imports.
//!
//! * [`host`]: runs the selected controllers under leader election
//!   ([`leader`]), serves the admin endpoints ([`admin`]) and shuts down
//!   gracefully.
//! * [`client`]: the Kubernetes client with its rate limit ([`ratelimit`]) and
//!   metrics ([`client_metrics`]).
//! * [`metrics_server`]: `/metrics` over HTTPS behind TokenReview and
//!   SubjectAccessReview.
//! * [`release_guard`]: the release record that refuses an unsafe downgrade.
//! * [`names`]: validation of the object names a flag can carry.

pub mod admin;
pub mod client;
pub mod client_metrics;
#[cfg(test)]
mod fake_api;
pub mod host;
pub mod leader;
pub mod metrics_server;
pub mod names;
pub mod ratelimit;
pub mod release_guard;

//! service-lb-cleanup: the Service load-balancer cleanup finalizer controller
//! and its load-balancer providers.

pub mod provider;
mod wiring;

pub use wiring::{ConfigError, Options, descriptors};

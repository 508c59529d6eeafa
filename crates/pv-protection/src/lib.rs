//! pv-protection and pvc-protection: in-use finalizer controllers.
//!
//! Wiring placeholder: the controllers land with issue 4. The manager already
//! calls [`descriptors`] with these [`Options`].

pub mod index;
pub mod pod;
pub mod pv;
pub mod pvc;
#[cfg(test)]
mod testutil;

use protection_core::{ControllerDescriptor, FinalizerProfile};

/// Flags of the storage protection controllers (flattened into
/// `protection-manager run`).
#[derive(Clone, Debug, Default, clap::Args)]
#[group(id = "storage-protection")]
pub struct Options {}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

/// The controllers of this crate.
pub fn descriptors(
    _opts: &Options,
    _profile: FinalizerProfile,
) -> Result<Vec<ControllerDescriptor>, ConfigError> {
    Ok(Vec::new())
}

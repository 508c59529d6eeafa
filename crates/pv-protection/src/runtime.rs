//! What both controllers share: their reconcile error and settings. The
//! runtime itself (backoff, expectations, the observer, the executor) is
//! `protection_core::runtime`.

use std::time::Duration;

/// Why a reconcile failed (retried with the per-object backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Finalizer(#[from] protection_core::FinalizerError),
    #[error("live list of pods in namespace {namespace} failed: {source}")]
    LivePodList {
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

/// How both controllers run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Our finalizer name.
    pub finalizer: String,
    /// Every this often, re-check every object upstream's informer resync
    /// would (being deleted with our finalizer, or lacking it); zero disables.
    pub resync_period: Duration,
}

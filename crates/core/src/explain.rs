//! A controller's `explain` hook: the manager's `explain <kind>/<name>`
//! reads the lease and the events and prints; the controller crate says
//! which kind it explains and why its object is (or would be) held.

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Why a hook could not explain.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ExplainError {
    /// The request that failed ("reading servicecidr a").
    pub what: String,
    #[source]
    pub source: kube::Error,
}

/// What a controller says about one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Explained {
    /// The object's metadata (deletion, finalizers, uid for its events).
    pub meta: ObjectMeta,
    /// Lines about the object ("CIDRs: 10.0.0.0/24").
    pub facts: Vec<String>,
    /// Why the controller holds it (or would, were it deleted): one line
    /// each, read after "held by <controller>:" or "would hold it:".
    pub held: Vec<String>,
}

/// The hook: reads the object `name` (in `namespace` for a namespaced kind)
/// and explains it; `Ok(None)` when it does not exist.
pub type ExplainFn = fn(
    kube::Client,
    Option<String>,
    String,
) -> BoxFuture<'static, Result<Option<Explained>, ExplainError>>;

/// A kind a controller explains.
#[derive(Clone, Copy, Debug)]
pub struct ExplainKind {
    /// The controller that holds it.
    pub controller: &'static str,
    /// The kind's name, as events' involvedObject.kind say it.
    pub title: &'static str,
    /// The names `explain` accepts, lowercase (kubectl's: singular, plural,
    /// short names).
    pub names: &'static [&'static str],
    pub namespaced: bool,
    pub explain: ExplainFn,
}

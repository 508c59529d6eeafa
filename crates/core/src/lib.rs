//! protection-core: what every protection controller shares, and nothing
//! about PersistentVolumes or Services.
//!
//! * [`featuregate`] and [`version`]: versioned feature gates and
//!   `--emulated-version`, modelled on k8s.io/component-base.
//! * [`release`]: this project's release train (binary 0.3, floor 0.0) and
//!   its gates.
//! * [`finalizer`]: the phased-finalizer helper (gated add, ungated remove,
//!   one guarded request each).
//! * [`controllers`]: controller descriptors and the `--controllers` flag;
//!   [`metrics`] and [`events`]; [`runtime`], the controller runtime.
//!
//! The manager process around the controllers (client, leader election,
//! admin and metrics servers, release guard) is the protection-host crate.

pub mod controllers;
pub mod duration;
pub mod errors;
pub mod events;
pub mod featuregate;
pub mod finalizer;
pub mod metrics;
pub mod redact;
pub mod release;
pub mod runtime;
pub mod slim;
pub mod version;

pub use controllers::{
    ControllerContext, ControllerDescriptor, ControllerError, ControllerInfo, ControllerResult,
    FinalizedResource, FinalizerNames, PolicyRule, ReadySignal,
};
pub use featuregate::FeatureGates;
pub use finalizer::{FinalizerError, FinalizerPatch, FinalizerProfile, Outcome, PhasedFinalizer};
pub use metrics::{ControllerMetrics, Metrics};
pub use version::Version;

/// Implements `kube::Resource` for a slimmed-down core/v1 object type (a
/// struct with a `metadata: ObjectMeta` field that the controllers decode
/// instead of the full object, to keep their caches small).
#[macro_export]
macro_rules! core_v1_resource {
    ($ty:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl ::kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($kind)
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed("")
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed("v1")
            }
            fn api_version(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed("v1")
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($plural)
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

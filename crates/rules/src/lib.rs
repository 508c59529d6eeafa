//! rules: user-declared in-use protection, the "liens" Kubernetes never
//! merged (KEP-2839). A cluster-scoped `ProtectionRule`
//! (`protection-manager.io/v1alpha1`, [`spec`]) says "objects of this kind
//! may not go while objects of those kinds refer to them"; the `rules`
//! controller ([`controller`]) runs one dynamic in-use controller per rule
//! ([`runner`]) with pvc-protection's semantics ([`decide`]): the index of
//! users first, a live LIST before any removal, one guarded patch per
//! transition. References are CEL over the user object ([`cel`]).
//!
//! Gate `InUseProtectionRules`: Alpha (off) from 0.4; it phases the
//! *addition* of finalizers. Holding, releasing and clean-up never are
//! gated, so turning the gate off (or downgrading) strands nothing.

pub mod cel;
pub mod controller;
pub mod decide;
pub mod deny;
pub mod examples;
pub mod explain;
pub mod index;
pub mod runner;
pub mod spec;

use protection_core::featuregate::{FeatureSpec, Stage};
use protection_core::release::GateDecl;
use protection_core::{
    ControllerDescriptor, ControllerInfo, FinalizedResource, FinalizerNames, PolicyRule, Version,
};

/// The release the rules controller and its gate appear in.
pub const RULES_SINCE: Version = Version::new(0, 4);

/// Alpha, off by default, from 0.4.
pub const RULES_HISTORY: &[FeatureSpec] =
    &[FeatureSpec::new(RULES_SINCE, Stage::Alpha, false, false)];

/// Gates the addition of rules' finalizers.
pub const IN_USE_PROTECTION_RULES: GateDecl = GateDecl {
    name: "InUseProtectionRules",
    history: RULES_HISTORY,
};

pub const GATES: &[GateDecl] = &[IN_USE_PROTECTION_RULES];

/// The rules controller as the manager knows it. Its RBAC covers the rules
/// themselves; the rights on protected and user kinds come from the chart's
/// `rules.allowedResources`.
pub const RULES_INFO: ControllerInfo = ControllerInfo {
    name: controller::NAME,
    aliases: &[],
    enabled_by_default: true,
    since: RULES_SINCE,
    gates: GATES,
    finalizer: FinalizerNames {
        project: controller::RULE_FINALIZER,
        upstream: controller::RULE_FINALIZER,
    },
    rbac: &[
        PolicyRule {
            api_groups: &["protection-manager.io"],
            resources: &["protectionrules"],
            verbs: &["get", "list", "watch", "patch"],
        },
        PolicyRule {
            api_groups: &["protection-manager.io"],
            resources: &["protectionrules/status"],
            verbs: &["patch"],
        },
        PolicyRule {
            api_groups: &["authorization.k8s.io"],
            resources: &["selfsubjectaccessreviews"],
            verbs: &["create"],
        },
    ],
    // A rule's own finalizer may be on whatever kinds it names; its
    // `rule-cleanup` on the rule stands for them (the rollback guard counts
    // the rules that carry it; deleting a rule clears both).
    finalizes: &[FinalizedResource {
        group: spec::GROUP,
        versions: &[spec::VERSION],
        kind: spec::KIND,
        plural: spec::PLURAL,
        cleared_by_deleting: true,
    }],
};

pub const INFOS: &[&ControllerInfo] = &[&RULES_INFO];

/// The controllers of this crate: `rules`.
pub fn descriptors() -> Vec<ControllerDescriptor> {
    descriptors_with(controller::Settings::default())
}

/// The controllers of this crate, knowing the manager's other controllers.
pub fn descriptors_with(settings: controller::Settings) -> Vec<ControllerDescriptor> {
    vec![ControllerDescriptor {
        info: &RULES_INFO,
        run: Box::new(move |ctx| Box::pin(controller::run_with(ctx, settings))),
    }]
}

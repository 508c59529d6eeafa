//! The controller crates this binary hosts. This table is the one place a
//! new controller crate is added: its controllers' gates join the binary's
//! gate registry (`--feature-gates`, `feature-gates`), their finalizers
//! `explain`'s owners, their RBAC rules the chart's table (checked by
//! `tests/chart_render.rs`), and its descriptors the `--controllers`
//! selection.

use anyhow::{Context, Result};
use protection_core::featuregate::FeatureGates;
use protection_core::release::{self, GateDecl, GatesError};
use protection_core::version::Version;
use protection_core::{ControllerDescriptor, ControllerInfo};

use crate::cli::RunArgs;

/// One controller crate: its controllers and how they are built from the
/// flags.
struct Crate {
    infos: &'static [&'static ControllerInfo],
    descriptors: fn(&RunArgs) -> Result<Vec<ControllerDescriptor>>,
}

const CRATES: &[Crate] = &[
    Crate {
        infos: pv_protection::INFOS,
        descriptors: |a| {
            pv_protection::descriptors(&a.storage, a.finalizer_profile)
                .context("storage protection settings")
        },
    },
    Crate {
        infos: lb_cleanup::INFOS,
        descriptors: |a| {
            lb_cleanup::descriptors(&a.lb, a.finalizer_profile)
                .context("load-balancer cleanup settings")
        },
    },
    Crate {
        infos: protection_rules::INFOS,
        descriptors: |_| Ok(protection_rules::descriptors()),
    },
];

/// Every hosted controller, in table order.
pub fn infos() -> impl Iterator<Item = &'static ControllerInfo> {
    CRATES.iter().flat_map(|c| c.infos.iter().copied())
}

/// Every gate of every hosted controller.
pub fn gates() -> Vec<GateDecl> {
    infos().flat_map(|i| i.gates.iter().copied()).collect()
}

/// The controller that owns `finalizer` (under either profile).
pub fn owner_of(finalizer: &str) -> Option<&'static str> {
    infos()
        .find(|i| i.finalizer.owns(finalizer))
        .map(|i| i.name)
}

/// The gates at `emulated`, with every default in place.
pub fn gates_at(emulated: Version) -> Result<FeatureGates, GatesError> {
    release::gates_at(emulated, &gates())
}

/// Every controller this binary has; the host keeps those selected by
/// `--controllers` that exist at the emulated version.
pub fn descriptors(args: &RunArgs) -> Result<Vec<ControllerDescriptor>> {
    let mut all = Vec::new();
    for c in CRATES {
        all.extend((c.descriptors)(args)?);
    }
    Ok(all)
}

/// The chart's controller table (`protection-manager.controllerTable` in
/// `charts/protection-manager/templates/_helpers.tpl`), generated from the
/// infos: what `--controllers` accepts and the RBAC each controller gets
/// (`make chart-table` writes it; a test fails while it is stale).
#[cfg(test)]
fn chart_table() -> String {
    fn list(items: &[&str]) -> String {
        let items: Vec<String> = items
            .iter()
            .map(|s| {
                if s.is_empty() {
                    "\"\"".to_string()
                } else {
                    (*s).to_string()
                }
            })
            .collect();
        format!("[{}]", items.join(", "))
    }
    let mut out = String::new();
    for i in infos() {
        out.push_str(&format!("{}:\n", i.name));
        out.push_str(&format!("  aliases: {}\n", list(i.aliases)));
        out.push_str(&format!("  enabledByDefault: {}\n", i.enabled_by_default));
        out.push_str(&format!("  since: \"{}\"\n", i.since));
        out.push_str("  rules:\n");
        for r in i.rbac {
            out.push_str(&format!("    - apiGroups: {}\n", list(r.api_groups)));
            out.push_str(&format!("      resources: {}\n", list(r.resources)));
            out.push_str(&format!("      verbs: {}\n", list(r.verbs)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use protection_core::featuregate::Stage;

    #[test]
    fn every_descriptor_gate_is_registered_and_the_train_holds() {
        let g = gates_at(release::BINARY_VERSION).expect("gates");
        let names: Vec<String> = g.table().into_iter().map(|r| r.name.to_string()).collect();
        for want in [
            "ServiceLoadBalancerFinalizer",
            "StorageObjectInUseProtection",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
            let row = g.table().into_iter().find(|r| r.name == want).expect("row");
            assert_eq!(
                (row.stage, row.default, row.locked),
                (Stage::GA, true, true)
            );
        }
        let g = gates_at(Version::new(0, 1)).expect("gates");
        assert!(!g.enabled("StorageObjectInUseProtection"));
    }

    /// The chart's table is generated from the infos: `make chart-table`
    /// rewrites it; this fails while it is stale.
    #[test]
    fn chart_table_is_generated_from_the_controller_infos() {
        const START: &str = "{{- define \"protection-manager.controllerTable\" -}}\n";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../charts/protection-manager/templates/_helpers.tpl");
        let text = std::fs::read_to_string(&path).expect("read _helpers.tpl");
        let start = text.find(START).expect("the table's define") + START.len();
        let len = text[start..].find("{{- end }}").expect("the table's end");
        let want = chart_table();
        if std::env::var_os("UPDATE_CHART_TABLE").is_some() {
            let new = format!("{}{want}{}", &text[..start], &text[start + len..]);
            std::fs::write(&path, new).expect("write _helpers.tpl");
            return;
        }
        assert_eq!(
            &text[start..start + len],
            want,
            "the chart's controller table is stale: run `make chart-table`"
        );
    }
}

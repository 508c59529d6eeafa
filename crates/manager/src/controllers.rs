//! The controller crates this binary hosts. This table is the one place a
//! new controller crate is added: its flags join `run`'s (and
//! `validate-config`'s), its controllers' gates join the binary's
//! gate registry (`--feature-gates`, `feature-gates`), their finalizers
//! `explain`'s owners, their RBAC rules the chart's table (checked by
//! `tests/chart_render.rs`), and its descriptors the `--controllers`
//! selection.

use anyhow::{Context, Result};
use protection_core::explain::{ExplainAny, ExplainKind};
use protection_core::featuregate::FeatureGates;
use protection_core::release::{self, GateDecl, GatesError};
use protection_core::version::Version;
use protection_core::{ControllerDescriptor, ControllerInfo};

use crate::cli::RunArgs;

/// One controller crate: its controllers, its flags and how the
/// controllers are built from them.
struct Crate {
    infos: &'static [&'static ControllerInfo],
    /// Its own flags (`None`: it has none).
    flags: Option<CrateFlags>,
    descriptors: fn(&RunArgs) -> Result<Vec<ControllerDescriptor>>,
    /// The kinds the crate's explain hook explains (`explain <kind>/<name>`).
    explain: &'static [ExplainKind],
    /// Its hook for kinds known only at run time, if any.
    explain_any: Option<ExplainAny>,
}

/// A crate's `clap::Args` and the heading `run --help` shows them under.
struct CrateFlags {
    heading: &'static str,
    augment: fn(clap::Command) -> clap::Command,
}

const fn flags<T: clap::Args>(heading: &'static str) -> Option<CrateFlags> {
    Some(CrateFlags {
        heading,
        augment: T::augment_args,
    })
}

/// The flags of every crate in the table, as `run` was given them: each
/// crate reads its own `Options` back ([`Flags::of`]).
#[derive(Clone, Debug, Default)]
pub struct Flags(clap::ArgMatches);

impl Flags {
    /// A crate's `Options` from the flags given.
    pub fn of<T: clap::FromArgMatches>(&self) -> Result<T, clap::Error> {
        T::from_arg_matches(&self.0)
    }
}

impl clap::FromArgMatches for Flags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Flags(matches.clone()))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0 = matches.clone();
        Ok(())
    }
}

impl clap::Args for Flags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // `run` leaves no heading pending here (its other sections name
        // theirs per flag), so the crates' sections end with none.
        debug_assert!(cmd.get_next_help_heading().is_none());
        CRATES
            .iter()
            .filter_map(|c| c.flags.as_ref())
            .fold(cmd, |cmd, f| (f.augment)(cmd.next_help_heading(f.heading)))
            .next_help_heading(None::<&'static str>)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

const CRATES: &[Crate] = &[
    Crate {
        infos: pv_protection::INFOS,
        flags: flags::<pv_protection::Options>(
            "Storage protection (pv-protection, pvc-protection)",
        ),
        descriptors: |a| {
            pv_protection::descriptors(&a.controller_flags.of()?, a.finalizer_profile)
                .context("storage protection settings")
        },
        explain: pv_protection::explain::KINDS,
        explain_any: None,
    },
    Crate {
        infos: lb_cleanup::INFOS,
        flags: flags::<lb_cleanup::Options>("Load-balancer cleanup (service-lb-cleanup)"),
        descriptors: |a| {
            lb_cleanup::descriptors(&a.controller_flags.of()?, a.finalizer_profile)
                .context("load-balancer cleanup settings")
        },
        explain: &[lb_cleanup::explain::KIND],
        explain_any: None,
    },
    Crate {
        infos: vac_protection::INFOS,
        flags: flags::<vac_protection::Options>(
            "VolumeAttributesClass protection (vac-protection)",
        ),
        descriptors: |a| {
            vac_protection::descriptors(&a.controller_flags.of()?, a.finalizer_profile)
                .context("VolumeAttributesClass protection settings")
        },
        explain: &[vac_protection::explain::KIND],
        explain_any: None,
    },
    Crate {
        infos: service_cidr_protection::INFOS,
        flags: flags::<service_cidr_protection::Options>(
            "ServiceCIDR protection (service-cidr-protection)",
        ),
        descriptors: |a| {
            service_cidr_protection::descriptors(&a.controller_flags.of()?, a.finalizer_profile)
                .context("ServiceCIDR protection settings")
        },
        explain: &[service_cidr_protection::explain::KIND],
        explain_any: None,
    },
    Crate {
        infos: protection_rules::INFOS,
        flags: None,
        // A rule may not use another controller's finalizer (in the profile
        // this manager runs with).
        descriptors: |a| {
            Ok(protection_rules::descriptors_with(
                protection_rules::controller::Settings {
                    reserved_finalizers: infos()
                        .filter(|i| i.name != protection_rules::controller::NAME)
                        .map(|i| (i.finalizer.get(a.finalizer_profile).to_string(), i.name))
                        .collect(),
                },
            ))
        },
        explain: &[],
        explain_any: Some(protection_rules::explain::ANY),
    },
];

/// Every hosted controller, in table order.
pub fn infos() -> impl Iterator<Item = &'static ControllerInfo> {
    CRATES.iter().flat_map(|c| c.infos.iter().copied())
}

/// Every kind the hosted controllers' explain hooks explain.
pub fn explain_kinds() -> impl Iterator<Item = &'static ExplainKind> {
    CRATES.iter().flat_map(|c| c.explain.iter())
}

/// The hooked kind `name` names (lowercase).
pub fn explain_kind_named(name: &str) -> Option<&'static ExplainKind> {
    explain_kinds().find(|k| k.names.contains(&name))
}

/// The hooks for kinds known only at run time.
pub fn explain_any() -> impl Iterator<Item = &'static ExplainAny> {
    CRATES.iter().filter_map(|c| c.explain_any.as_ref())
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

/// The chart's gate table (`protection-manager.gateTable`), generated from
/// the gates' histories: each gate once, in registration order.
#[cfg(test)]
fn gate_table() -> String {
    let mut out = String::new();
    let mut seen = Vec::new();
    for g in gates() {
        if seen.contains(&g.name) {
            continue;
        }
        seen.push(g.name);
        out.push_str(&format!("{}:\n", g.name));
        for s in g.history {
            out.push_str(&format!(
                "  - {{since: \"{}\", default: {}, locked: {}}}\n",
                s.version, s.default, s.lock_to_default
            ));
        }
    }
    out
}

/// Rewrites (with `UPDATE_CHART_TABLE`) or checks the body of the define
/// `name` in `_helpers.tpl`.
#[cfg(test)]
fn check_define(name: &str, want: &str) {
    let start_marker = format!("{{{{- define \"{name}\" -}}}}\n");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/protection-manager/templates/_helpers.tpl");
    let text = std::fs::read_to_string(&path).expect("read _helpers.tpl");
    let start = text.find(&start_marker).expect("the table's define") + start_marker.len();
    let len = text[start..].find("{{- end }}").expect("the table's end");
    if std::env::var_os("UPDATE_CHART_TABLE").is_some() {
        let new = format!("{}{want}{}", &text[..start], &text[start + len..]);
        std::fs::write(&path, new).expect("write _helpers.tpl");
        return;
    }
    assert_eq!(
        &text[start..start + len],
        want,
        "the chart's {name} is stale: run `make chart-table`"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use protection_core::featuregate::Stage;

    /// A rule may not take a hosted controller's project finalizer: the
    /// rules crate's static list must name every one (a new controller
    /// crate adds its name there).
    #[test]
    fn every_project_finalizer_is_refused_to_rules() {
        for i in infos() {
            let f = i.finalizer.project;
            assert!(
                protection_rules::spec::MANAGER_FINALIZERS.contains(&f),
                "{} ({f}) missing from protection_rules::spec::MANAGER_FINALIZERS",
                i.name
            );
        }
    }

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
        check_define("protection-manager.controllerTable", &chart_table());
        check_define("protection-manager.gateTable", &gate_table());
        check_schema_gates();
    }

    /// The schema's `featureGates` properties: AllAlpha, AllBeta and every
    /// gate, sorted (rewritten with `UPDATE_CHART_TABLE`).
    fn check_schema_gates() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../charts/protection-manager/values.schema.json");
        let text = std::fs::read_to_string(&path).expect("read values.schema.json");
        let mut schema: serde_json::Value = serde_json::from_str(&text).expect("schema JSON");
        let mut names: Vec<&str> = gates().iter().map(|g| g.name).collect();
        names.extend(["AllAlpha", "AllBeta"]);
        names.sort();
        names.dedup();
        let mut want = serde_json::Map::new();
        for n in names {
            want.insert(
                n.to_string(),
                serde_json::json!({
                    "type": "boolean",
                    "description": format!("--feature-gates {n}=true|false"),
                }),
            );
        }
        let want = serde_json::Value::Object(want);
        let mut names = vec!["*".to_string()];
        for i in infos() {
            for n in std::iter::once(&i.name).chain(i.aliases) {
                names.push(n.to_string());
                names.push(format!("-{n}"));
            }
        }
        let want_controllers = serde_json::json!(names);
        if std::env::var_os("UPDATE_CHART_TABLE").is_some() {
            schema["properties"]["controllers"]["items"]["enum"] = want_controllers;
        } else {
            assert_eq!(
                schema["properties"]["controllers"]["items"]["enum"], want_controllers,
                "the schema's controllers are stale: run `make chart-table`"
            );
        }
        let have = &mut schema["properties"]["featureGates"]["properties"];
        if std::env::var_os("UPDATE_CHART_TABLE").is_some() {
            *have = want;
            let mut out = serde_json::to_string_pretty(&schema).expect("schema JSON");
            out.push('\n');
            std::fs::write(&path, out).expect("write values.schema.json");
            return;
        }
        assert_eq!(
            *have, want,
            "the schema's featureGates are stale: run `make chart-table`"
        );
    }
}

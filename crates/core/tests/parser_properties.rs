//! Property tests for the parsers a user feeds the manager through flags
//! (issue 15 item 7): `--feature-gates`, `--emulated-version` and
//! `--controllers`. Whatever the text, each refuses it with a message naming
//! the input or accepts it, and never panics. `make test` runs proptest's
//! default number of cases; `make fuzz` runs many more (PROPTEST_CASES).

use proptest::prelude::*;
use protection_core::controllers::{self, ControllerDescriptor, ControllerInfo, FinalizerNames};
use protection_core::release::{self, BINARY_VERSION, GateDecl};
use protection_core::version::Version;

const GATES: [&str; 2] = [
    "StorageObjectInUseProtection",
    "ServiceLoadBalancerFinalizer",
];

/// The gates as the controller crates declare them (core knows no gate name).
const DECLS: &[GateDecl] = &[
    GateDecl {
        name: GATES[0],
        history: release::PHASED_ADD,
    },
    GateDecl {
        name: GATES[1],
        history: release::PHASED_ADD,
    },
];

/// Text near the flag's grammar: gate names (real, misspelt, `AllAlpha`),
/// `=`, booleans in many spellings, commas and spaces.
fn gate_flag() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just(GATES[0].to_owned()),
        Just(GATES[1].to_owned()),
        Just("AllAlpha".to_owned()),
        Just("AllBeta".to_owned()),
        "[A-Za-z]{0,12}",
    ];
    let value = prop_oneof![
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("TRUE".to_owned()),
        Just("1".to_owned()),
        Just("0".to_owned()),
        Just("t".to_owned()),
        Just(String::new()),
        "[ -~]{0,6}",
    ];
    let pair = (
        name,
        prop_oneof![Just("="), Just(""), Just("=="), Just(" = ")],
        value,
    )
        .prop_map(|(n, eq, v)| format!("{n}{eq}{v}"));
    prop::collection::vec(pair, 0..5).prop_map(|p| p.join(","))
}

fn controller_flag() -> impl Strategy<Value = String> {
    let entry = prop_oneof![
        Just("*".to_owned()),
        Just("pv-protection".to_owned()),
        Just("-pv-protection".to_owned()),
        Just("persistentvolume-protection-controller".to_owned()),
        Just("newer".to_owned()),
        Just("-".to_owned()),
        Just("--".to_owned()),
        "-?[a-z*-]{0,10}",
        "[ -~]{0,8}",
    ];
    prop::collection::vec(entry, 0..6).prop_map(|e| e.join(","))
}

fn desc(name: &'static str, on: bool, since: Version) -> ControllerDescriptor {
    let info = Box::leak(Box::new(ControllerInfo {
        name,
        aliases: if name == "pv-protection" {
            &["persistentvolume-protection-controller"]
        } else {
            &[]
        },
        enabled_by_default: on,
        since,
        gates: &[],
        finalizer: FinalizerNames {
            project: "x.io/f",
            upstream: "kubernetes.io/f",
        },
        rbac: &[],
    }));
    ControllerDescriptor {
        info,
        run: Box::new(|_| Box::pin(async { Ok(()) })),
    }
}

fn table() -> Vec<ControllerDescriptor> {
    vec![
        desc("pv-protection", true, Version::new(0, 1)),
        desc("pvc-protection", true, Version::new(0, 1)),
        desc("optional", false, Version::new(0, 1)),
        desc("newer", true, Version::new(0, 2)),
    ]
}

proptest! {
    #[test]
    fn feature_gate_flags_are_applied_or_refused(flag in gate_flag(), minor in 0u32..=3) {
        let mut gates = release::gates_at(Version::new(0, minor), DECLS).expect("in range");
        let before = gates.summary();
        match gates.set_from_flag(&flag) {
            Ok(_warnings) => {
                // Every gate the flag names explicitly ends up as it says
                // (the last setting wins).
                for pair in flag.split(',') {
                    if let Some((k, v)) = pair.trim().split_once('=')
                        && GATES.contains(&k.trim())
                        && let Ok(b) = v.trim().parse::<bool>()
                    {
                        let last = flag.split(',').rev().find_map(|p| {
                            p.trim().split_once('=').filter(|(k2, _)| k2.trim() == k.trim())
                        });
                        if last.map(|(_, v2)| v2.trim()) == Some(v.trim()) {
                            prop_assert_eq!(gates.enabled(k.trim()), b, "{}", flag);
                        }
                    }
                }
            }
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                // All or nothing: a refused flag changes no gate.
                prop_assert_eq!(gates.summary(), before);
            }
        }
    }

    #[test]
    fn any_text_as_feature_gates_never_panics(flag in any::<String>()) {
        let mut gates = release::gates_at(BINARY_VERSION, DECLS).expect("in range");
        let _ = gates.set_from_flag(&flag);
    }

    #[test]
    fn emulated_versions_parse_or_are_refused_naming_the_input(
        text in prop_oneof!["v?[0-9]{1,12}\\.[0-9]{1,12}(\\.[0-9]{1,3})?", any::<String>()]
    ) {
        match text.parse::<Version>() {
            Ok(v) => {
                // The canonical form reads back as the same version.
                prop_assert_eq!(v.to_string().parse::<Version>().ok(), Some(v));
                match release::validate_emulated_version(v) {
                    Ok(_) => prop_assert!(v <= BINARY_VERSION),
                    Err(e) => prop_assert!(e.to_string().contains(&v.to_string()), "{}", e),
                }
            }
            Err(e) => prop_assert!(e.to_string().contains(&format!("{text:?}")), "{}", e),
        }
    }

    #[test]
    fn controller_flags_select_or_name_the_unknown_entry(flag in controller_flag(), minor in 0u32..=3) {
        let at = Version::new(0, minor);
        let parsed = controllers::parse_flag(&flag);
        prop_assert!(parsed.iter().all(|e| !e.is_empty() && e.trim() == e));
        match controllers::select(table(), &parsed, at) {
            Ok(selected) => {
                for d in &selected {
                    prop_assert!(d.since <= at);
                    prop_assert!(controllers::is_enabled(d.name, d.aliases, d.enabled_by_default, &parsed));
                }
            }
            Err(e) => {
                let text = e.to_string();
                let named = parsed.iter().any(|entry| {
                    let bare = entry.strip_prefix('-').unwrap_or(entry);
                    text.contains(&format!("{bare:?}"))
                });
                prop_assert!(named, "{} does not name an entry of {:?}", text, parsed);
            }
        }
    }
}

//! Property tests for the parsers a user feeds the manager through flags
//! (issue 15 item 7): `--feature-gates`, `--emulated-version` and
//! `--controllers` (its property lives beside the controller table in
//! `controllers.rs`). Whatever the text, each refuses it with a message naming
//! the input or accepts it, and never panics. `make test` runs proptest's
//! default number of cases; `make fuzz` runs many more (PROPTEST_CASES).

use proptest::prelude::*;
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
}

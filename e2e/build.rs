//! `cross_build_upgrade_and_rollback` needs two real builds: it is compiled
//! as ignored unless `E2E_OLD_BIN` or `E2E_NEW_BIN` is set (when only one
//! is, the test runs and fails with a message naming the missing one).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(e2e_cross_build)");
    for var in ["E2E_OLD_BIN", "E2E_NEW_BIN"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    if set("E2E_OLD_BIN") || set("E2E_NEW_BIN") {
        println!("cargo::rustc-cfg=e2e_cross_build");
    }
}

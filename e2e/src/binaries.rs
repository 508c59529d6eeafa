//! The manager binaries the sim-mode kubelet runs for the manager image.
//!
//! * `PM_BIN`, else `<target dir>/<profile>/protection-manager` found from
//!   the running executable (under `cargo test --workspace` it is built);
//! * `E2E_OLD_BIN` / `E2E_NEW_BIN`: two builds (e.g. of two commits) for a
//!   real cross-build upgrade and rollback, mapped to the image tags
//!   [`OLD_TAG`] and [`NEW_TAG`]. Without them one binary plays every
//!   release through `--emulated-version`.

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Image tag the kubelet maps to `E2E_OLD_BIN`.
pub const OLD_TAG: &str = "e2e-old";
/// Image tag the kubelet maps to `E2E_NEW_BIN`.
pub const NEW_TAG: &str = "e2e-new";

const NAME: &str = "protection-manager";

/// Where the manager binary is.
pub fn manager_binary() -> Result<PathBuf> {
    locate(NAME, "PM_BIN", "protection-manager")
}

/// The path in `var`, else `name` beside the running executable (or in
/// its parent directory); the error says how to build it (`cargo build -p
/// <package>`) or set `var`.
pub fn locate(name: &str, var: &str, package: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Error::Config(format!(
                "{var}={} is not a file",
                p.display()
            )))
        };
    }
    let exe = std::env::current_exe().io_ctx(|| "finding the running executable".into())?;
    beside_exe_named(&exe, name).ok_or_else(|| {
        Error::Config(format!(
            "no {name} binary next to {} (looked in its directory and the one above); build it (cargo build -p {package}, or run the tests with cargo test --workspace / make e2e) or set {var}",
            exe.display()
        ))
    })
}

/// `<dir>/protection-manager` for the executable's directory or its parent
/// (test binaries live in `<target>/<profile>/deps`).
pub fn beside_exe(exe: &Path) -> Option<PathBuf> {
    beside_exe_named(exe, NAME)
}

/// `<dir>/<name>` for the executable's directory or its parent.
pub fn beside_exe_named(exe: &Path, name: &str) -> Option<PathBuf> {
    let dir = exe.parent()?;
    [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `E2E_OLD_BIN` and `E2E_NEW_BIN`, both or neither.
pub fn cross_build() -> Result<Option<(PathBuf, PathBuf)>> {
    cross_build_from(|k| std::env::var(k).ok())
}

pub fn cross_build_from(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<(PathBuf, PathBuf)>> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    match (get("E2E_OLD_BIN"), get("E2E_NEW_BIN")) {
        (None, None) => Ok(None),
        (Some(old), Some(new)) => {
            for (var, p) in [("E2E_OLD_BIN", &old), ("E2E_NEW_BIN", &new)] {
                if !p.is_file() {
                    return Err(Error::Config(format!(
                        "{var}={} is not a file",
                        p.display()
                    )));
                }
            }
            Ok(Some((old, new)))
        }
        _ => Err(Error::Config(
            "set both E2E_OLD_BIN and E2E_NEW_BIN (or neither)".into(),
        )),
    }
}

/// What `protection-manager version` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryInfo {
    /// e.g. `0.3.0`.
    pub version: String,
    /// The release it is (`0.3`).
    pub release: String,
    /// The oldest release it can emulate.
    pub min_release: String,
}

impl BinaryInfo {
    /// Parses `protection-manager 0.3.0 (release 0.3; can emulate releases 0.0 to 0.3)`.
    pub fn parse(line: &str) -> Option<BinaryInfo> {
        let rest = line.trim().strip_prefix("protection-manager ")?;
        let (version, rest) = rest.split_once(" (release ")?;
        let (release, rest) = rest.split_once("; can emulate releases ")?;
        let (min, _) = rest.split_once(" to ")?;
        Some(BinaryInfo {
            version: version.to_string(),
            release: release.to_string(),
            min_release: min.to_string(),
        })
    }
}

/// Runs `<bin> version` and checks that the binary has the subcommands the
/// chart's hook needs (a stale build would fail the hook in a confusing way).
pub async fn inspect(bin: &Path) -> Result<BinaryInfo> {
    let out = tokio::process::Command::new(bin)
        .arg("version")
        .output()
        .await
        .io_ctx(|| format!("running {} version", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let info = BinaryInfo::parse(&text).ok_or_else(|| {
        Error::Config(format!(
            "{} version printed {text:?}, not `protection-manager X (release R; can emulate releases A to B)`",
            bin.display()
        ))
    })?;
    let help = tokio::process::Command::new(bin)
        .arg("--help")
        .output()
        .await
        .io_ctx(|| format!("running {} --help", bin.display()))?;
    if !String::from_utf8_lossy(&help.stdout).contains("release-check") {
        return Err(Error::Config(format!(
            "{} has no release-check subcommand (the chart's upgrade hook runs it): rebuild it (cargo build -p protection-manager)",
            bin.display()
        )));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_binary_beside_a_test_executable() {
        let dir = std::env::temp_dir().join(format!("e2e-bin-{}", std::process::id()));
        let deps = dir.join("debug/deps");
        std::fs::create_dir_all(&deps).expect("dirs");
        let exe = deps.join("lifecycle-0123abcd");
        std::fs::write(&exe, "").expect("exe");
        assert_eq!(beside_exe(&exe), None);
        std::fs::write(dir.join("debug").join(NAME), "").expect("bin");
        assert_eq!(beside_exe(&exe), Some(dir.join("debug").join(NAME)));
        // A binary target (the chaos binary) sits beside it.
        assert_eq!(
            beside_exe(&dir.join("debug/chaos")),
            Some(dir.join("debug").join(NAME))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cross_build_wants_both_binaries() {
        let none = |_: &str| None;
        assert_eq!(cross_build_from(none).expect("none"), None);
        let one = |k: &str| (k == "E2E_OLD_BIN").then(|| "/bin/sh".to_string());
        assert!(
            cross_build_from(one)
                .unwrap_err()
                .to_string()
                .contains("both")
        );
        let missing = |_: &str| Some("/nonexistent/pm".to_string());
        assert!(
            cross_build_from(missing)
                .unwrap_err()
                .to_string()
                .contains("E2E_OLD_BIN=/nonexistent/pm is not a file")
        );
        let both = |_: &str| Some("/bin/sh".to_string());
        assert_eq!(
            cross_build_from(both).expect("both"),
            Some((PathBuf::from("/bin/sh"), PathBuf::from("/bin/sh")))
        );
    }

    #[test]
    fn parses_the_version_line() {
        assert_eq!(
            BinaryInfo::parse(
                "protection-manager 0.3.0 (release 0.3; can emulate releases 0.0 to 0.3)\n"
            ),
            Some(BinaryInfo {
                version: "0.3.0".into(),
                release: "0.3".into(),
                min_release: "0.0".into()
            })
        );
        assert_eq!(BinaryInfo::parse("something else"), None);
    }
}

//! Real clients in tests: the project's tools (`make tools` installs them
//! under `.tools/bin`; an environment variable may name another) and
//! kubectl run against a kubeconfig.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tool `$var` names, else `fallback` (absolute, or relative to the
/// workspace); panics naming both when it does not exist.
pub fn tool(var: &str, fallback: &str) -> PathBuf {
    let p = std::env::var(var).map(PathBuf::from).unwrap_or_else(|_| {
        if fallback.starts_with('/') {
            PathBuf::from(fallback)
        } else {
            workspace().join(fallback)
        }
    });
    assert!(
        p.exists(),
        "{} not found (env {var}); run `make tools`",
        p.display()
    );
    p
}

/// Both kubectls: the pinned one from PyPI (`KUBECTL_PINNED`, default
/// `.tools/bin/kubectl`) and the machine's (`KUBECTL_SYSTEM`, default
/// `/usr/bin/kubectl`).
pub fn kubectls() -> Vec<PathBuf> {
    vec![
        tool("KUBECTL_PINNED", ".tools/bin/kubectl"),
        tool("KUBECTL_SYSTEM", "/usr/bin/kubectl"),
    ]
}

/// What one kubectl command did.
#[derive(Debug)]
pub struct Ran {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// stdout then stderr.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// `bin --kubeconfig kc args...` in the workspace, with `stdin` fed in;
/// panics if it does not finish within 60 s.
pub async fn run(bin: &Path, kc: &Path, args: &[&str], stdin: Option<&str>) -> Ran {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(kc)
        .args(args)
        .current_dir(workspace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    if let Some(mut si) = child.stdin.take() {
        if let Some(text) = stdin {
            si.write_all(text.as_bytes())
                .await
                .unwrap_or_else(|e| panic!("writing {args:?}'s stdin: {e}"));
        }
        drop(si);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish in 60s", bin.display()))
        .unwrap_or_else(|e| panic!("waiting for {} {args:?}: {e}", bin.display()));
    Ran {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`run`] that must succeed: its stdout.
pub async fn ok(bin: &Path, kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let r = run(bin, kc, args, stdin).await;
    assert!(
        r.success,
        "{} {args:?} failed:\nstdout: {}\nstderr: {}",
        bin.display(),
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// [`run`], answering (success, stdout then stderr).
pub async fn run_text(bin: &Path, kc: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let r = run(bin, kc, args, stdin).await;
    (r.success, r.text())
}

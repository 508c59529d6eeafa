//! Helpers for the cluster-emulation suites.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kube_sim::{ClusterConfig, ImageMapping, KubeSim, SimConfig};

use super::tool;

/// Polls `f` until it returns `Some`, for up to `secs` seconds.
pub async fn within<T>(secs: u64, what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    test_support::eventually_every(
        Duration::from_secs(secs),
        Duration::from_millis(100),
        what,
        f,
    )
    .await
}

pub fn kube_sim_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kube-sim"))
}

/// Every loop on; images `kube-sim` and `sh` run as local processes.
pub async fn cluster() -> KubeSim {
    cluster_with(ClusterConfig::all()).await
}

/// `c` with images `kube-sim` and `sh` mapped to local binaries.
pub async fn cluster_with(mut c: ClusterConfig) -> KubeSim {
    c.kubelet_config.images = vec![
        ImageMapping {
            image: "kube-sim".into(),
            binary: kube_sim_bin(),
        },
        ImageMapping {
            image: "sh".into(),
            binary: "/bin/sh".into(),
        },
    ];
    KubeSim::start(SimConfig {
        cluster: c,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("starting kube-sim: {e}"))
}

pub async fn run(
    bin: &Path,
    kubeconfig: &Path,
    cwd: Option<&Path>,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(d) = cwd {
        cmd.current_dir(d)
            .env("HELM_CACHE_HOME", d.join("cache"))
            .env("HELM_CONFIG_HOME", d.join("config"))
            .env("HELM_DATA_HOME", d.join("data"));
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    if let Some(mut si) = child.stdin.take() {
        if let Some(t) = stdin {
            si.write_all(t.as_bytes())
                .await
                .unwrap_or_else(|e| panic!("stdin: {e}"));
        }
        drop(si);
    }
    let out = tokio::time::timeout(Duration::from_secs(240), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish in 240s", bin.display()))
        .unwrap_or_else(|e| panic!("waiting for {}: {e}", bin.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

pub async fn ok(
    bin: &Path,
    kc: &Path,
    cwd: Option<&Path>,
    args: &[&str],
    stdin: Option<&str>,
) -> String {
    let (success, out, err) = run(bin, kc, cwd, args, stdin).await;
    assert!(
        success,
        "{} {args:?} failed:\nstdout: {out}\nstderr: {err}",
        bin.display()
    );
    out
}

pub fn kubectl() -> PathBuf {
    tool("KUBECTL_PINNED", ".tools/bin/kubectl")
}

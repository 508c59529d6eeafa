//! Where the control plane's binaries come from: `hack/real-k8s/build.sh`
//! builds them once into a cache outside the clone (keyed by version and by
//! what built them) and answers quickly once they are there, so asking it is
//! always right and never slow after the first time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::Error;

/// The Kubernetes version of the test bed's control plane.
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// Set to a directory holding `etcd`, `kube-apiserver`,
/// `kube-controller-manager` and `kube-scheduler` to use those instead of
/// building (the directory `make real-k8s` prints).
pub const BIN_DIR_ENV: &str = "REAL_K8S_BIN_DIR";

/// The control plane's binaries.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    pub fn etcd(&self) -> PathBuf {
        self.dir.join("etcd")
    }
    pub fn kube_apiserver(&self) -> PathBuf {
        self.dir.join("kube-apiserver")
    }
    pub fn kube_controller_manager(&self) -> PathBuf {
        self.dir.join("kube-controller-manager")
    }
    pub fn kube_scheduler(&self) -> PathBuf {
        self.dir.join("kube-scheduler")
    }
}

/// The repository's `hack/real-k8s/build.sh`.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/real-k8s/build.sh")
}

/// The binaries, built on first use (once per test binary; the script itself
/// serialises concurrent builds across processes).
pub fn binaries() -> Result<Binaries, Error> {
    static BINARIES: OnceLock<Result<Binaries, String>> = OnceLock::new();
    BINARIES
        .get_or_init(locate)
        .clone()
        .map_err(Error::Binaries)
}

/// Extra binaries of the same module (e.g. `service-controller`, the
/// upstream anchor of `make bench-real`), built on demand.
pub fn extra(name: &str) -> Result<PathBuf, Error> {
    let dir = run_build_script(&[name]).map_err(Error::Binaries)?;
    Ok(dir.join(name))
}

fn locate() -> Result<Binaries, String> {
    if let Ok(dir) = std::env::var(BIN_DIR_ENV) {
        let dir = PathBuf::from(dir);
        let b = Binaries { dir: dir.clone() };
        for p in [
            b.etcd(),
            b.kube_apiserver(),
            b.kube_controller_manager(),
            b.kube_scheduler(),
        ] {
            if !p.is_file() {
                return Err(format!(
                    "{BIN_DIR_ENV}={} has no {}",
                    dir.display(),
                    p.display()
                ));
            }
        }
        return Ok(b);
    }
    run_build_script(&[]).map(|dir| Binaries { dir })
}

fn run_build_script(args: &[&str]) -> Result<PathBuf, String> {
    let script = build_script();
    let started = std::time::Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}); it builds the control plane with Go (`make real-k8s`):\n{stdout}{stderr}",
            script.display(),
            out.status
        ));
    }
    if stdout.contains(" built in ") {
        // A build happened: say how long, once.
        eprint!("{stdout}");
        eprintln!(
            "control-plane: binaries ready after {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }
    let dir = Command::new("bash")
        .arg(&script)
        .arg("--print-dir")
        .output()
        .map_err(|e| format!("running {} --print-dir: {e}", script.display()))?;
    Ok(PathBuf::from(
        String::from_utf8_lossy(&dir.stdout).trim().to_string(),
    ))
}

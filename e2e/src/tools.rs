//! The real clients the scenarios drive: helm 3.18 / 4.1 and kubectl, found
//! the way the rest of the project finds them (`HELM3`, `HELM4`,
//! `KUBECTL_PINNED`, else `<workspace>/.tools/bin/...`). A missing tool is an
//! error that says to run `make tools`, never a silent skip.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::error::{Error, IoContext, Result};

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    here.canonicalize().unwrap_or(here)
}

/// `charts/protection-manager`.
pub fn chart_dir() -> PathBuf {
    workspace_root().join("charts/protection-manager")
}

fn tool_path(var: &str, name: &str) -> Result<PathBuf> {
    let path = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/bin").join(name));
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Config(format!(
            "{name} not found at {} (env {var}): run `make tools`",
            path.display()
        )))
    }
}

/// The two helm majors the chart supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelmVersion {
    V3,
    V4,
}

impl HelmVersion {
    fn tool(self) -> &'static str {
        match self {
            HelmVersion::V3 => "helm3",
            HelmVersion::V4 => "helm4",
        }
    }

    fn expected_prefix(self) -> &'static str {
        match self {
            HelmVersion::V3 => "v3.18.",
            HelmVersion::V4 => "v4.1.",
        }
    }
}

impl std::fmt::Display for HelmVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.tool())
    }
}

/// Runs a command, returning its output (never fails on a non-zero exit).
async fn output(mut cmd: tokio::process::Command, what: &str) -> Result<Output> {
    cmd.kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .io_ctx(|| format!("running {what}"))
}

fn describe(bin: &Path, args: &[OsString]) -> String {
    let mut s = bin
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for a in args {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// A finished command: what ran and what it printed.
#[derive(Debug, Clone)]
pub struct Ran {
    pub command: String,
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    fn from(command: String, out: Output) -> Ran {
        Ran {
            command,
            success: out.status.success(),
            status: out.status.to_string(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// stdout, or [`Error::Command`] with both streams.
    pub fn ok(self) -> Result<String> {
        if self.success {
            Ok(self.stdout)
        } else {
            Err(Error::Command {
                command: self.command,
                status: self.status,
                output: format!("{}{}", self.stdout, self.stderr),
            })
        }
    }

    /// stderr of a command that must fail, or [`Error::Check`].
    pub fn refused(self) -> Result<String> {
        if self.success {
            Err(Error::Check(format!(
                "`{}` should have failed but succeeded:\n{}{}",
                self.command, self.stdout, self.stderr
            )))
        } else {
            Ok(format!("{}{}", self.stdout, self.stderr))
        }
    }
}

/// One helm binary with private config/cache/data homes (tests never read or
/// write the user's helm state) and the cluster's kubeconfig.
#[derive(Debug, Clone)]
pub struct Helm {
    pub version: HelmVersion,
    bin: PathBuf,
    home: PathBuf,
    kubeconfig: PathBuf,
    context: Option<String>,
}

impl Helm {
    /// Finds the binary and checks its version.
    pub async fn new(
        version: HelmVersion,
        kubeconfig: &Path,
        context: Option<&str>,
        home: &Path,
    ) -> Result<Helm> {
        let var = version.tool().to_ascii_uppercase();
        let bin = tool_path(&var, version.tool())?;
        let helm = Helm {
            version,
            bin,
            home: home.join(version.tool()),
            kubeconfig: kubeconfig.to_path_buf(),
            context: context.map(str::to_string),
        };
        let v = helm.run(&["version", "--short"]).await?;
        if !(v.success && v.stdout.trim().starts_with(version.expected_prefix())) {
            return Err(Error::Config(format!(
                "{} is not helm {}* ({}{}): run `make tools`",
                helm.bin.display(),
                version.expected_prefix(),
                v.stdout.trim(),
                v.stderr.trim()
            )));
        }
        Ok(helm)
    }

    fn command(&self, args: &[OsString]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        c.env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("HELM_NAMESPACE")
            .env_remove("HELM_KUBECONTEXT")
            .args(args);
        if let Some(ctx) = &self.context {
            c.arg("--kube-context").arg(ctx);
        }
        c
    }

    /// Runs helm with `args`.
    pub async fn run<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<Ran> {
        let args: Vec<OsString> = args.iter().map(|a| a.as_ref().to_os_string()).collect();
        let what = describe(&self.bin, &args);
        let out = output(self.command(&args), &what).await?;
        Ok(Ran::from(what, out))
    }

    /// Runs helm; its stdout, or an error with its output.
    pub async fn ok<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<String> {
        self.run(args).await?.ok()
    }
}

/// kubectl (`KUBECTL_PINNED`, else `.tools/bin/kubectl`) on the cluster's
/// kubeconfig.
#[derive(Debug, Clone)]
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    context: Option<String>,
}

impl Kubectl {
    pub fn new(kubeconfig: &Path, context: Option<&str>) -> Result<Kubectl> {
        Ok(Kubectl {
            bin: tool_path("KUBECTL_PINNED", "kubectl")?,
            kubeconfig: kubeconfig.to_path_buf(),
            context: context.map(str::to_string),
        })
    }

    pub async fn run<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<Ran> {
        let args: Vec<OsString> = args.iter().map(|a| a.as_ref().to_os_string()).collect();
        let what = describe(&self.bin, &args);
        let mut c = tokio::process::Command::new(&self.bin);
        c.env("KUBECONFIG", &self.kubeconfig).args(&args);
        if let Some(ctx) = &self.context {
            c.arg("--context").arg(ctx);
        }
        let out = output(c, &what).await?;
        Ok(Ran::from(what, out))
    }

    pub async fn ok<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<String> {
        self.run(args).await?.ok()
    }
}

//! Helpers for the chart tests (`chart_*.rs`): real helm 3.18 / 4.1 driven
//! as processes, the rendered manifests as JSON, and a small RBAC authorizer
//! that evaluates requests against Roles, ClusterRoles and their bindings the
//! way kube-apiserver's RBAC authorizer does.
#![allow(dead_code)]

pub mod rbac;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    here.canonicalize().unwrap_or(here)
}

pub fn chart_dir() -> PathBuf {
    workspace_root().join("charts/protection-manager")
}

/// The chart's appVersion, read from Chart.yaml.
pub fn app_version() -> String {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("read Chart.yaml");
    let chart: Value = serde_yaml::from_str(&text).expect("Chart.yaml is YAML");
    chart["appVersion"]
        .as_str()
        .expect("Chart.yaml has a string appVersion")
        .to_string()
}

/// The two helm majors the chart supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelmVersion {
    V3,
    V4,
}

impl HelmVersion {
    pub const ALL: [HelmVersion; 2] = [HelmVersion::V3, HelmVersion::V4];

    fn tool(self) -> &'static str {
        match self {
            HelmVersion::V3 => "helm3",
            HelmVersion::V4 => "helm4",
        }
    }

    /// `$HELM3`/`$HELM4`, else `<workspace>/.tools/bin/helm3|helm4`. A missing
    /// binary fails the test (never a silent skip).
    pub fn binary(self) -> PathBuf {
        let var = self.tool().to_ascii_uppercase();
        let path = std::env::var_os(&var)
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join(".tools/bin").join(self.tool()));
        assert!(
            path.is_file(),
            "{} not found at {} (env {var}): run `make tools`",
            self.tool(),
            path.display()
        );
        path
    }

    /// The `version.BuildInfo{Version:"v3.18.0"...}` prefix the binary must have.
    pub fn expected_prefix(self) -> &'static str {
        match self {
            HelmVersion::V3 => "v3.18.",
            HelmVersion::V4 => "v4.1.",
        }
    }
}

/// One helm binary with its own config/cache/data homes (so that tests never
/// read or write the user's helm state) and an optional kubeconfig.
#[derive(Debug, Clone)]
pub struct Helm {
    pub version: HelmVersion,
    bin: PathBuf,
    home: PathBuf,
    kubeconfig: Option<PathBuf>,
}

impl Helm {
    pub fn new(version: HelmVersion) -> Helm {
        let bin = version.binary();
        let home = support::tempdir();
        let helm = Helm {
            version,
            bin,
            home,
            kubeconfig: None,
        };
        let out = helm.run(&["version", "--short"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.trim().starts_with(version.expected_prefix()),
            "{} is not helm {}*: {text}{} (run `make tools`)",
            helm.bin.display(),
            version.expected_prefix(),
            String::from_utf8_lossy(&out.stderr)
        );
        helm
    }

    pub fn with_kubeconfig(mut self, path: &Path) -> Helm {
        self.kubeconfig = Some(path.to_path_buf());
        self
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .env_remove("HELM_NAMESPACE")
            .env_remove("HELM_KUBECONTEXT");
        match &self.kubeconfig {
            Some(k) => c.env("KUBECONFIG", k),
            // Never talk to whatever cluster the developer's shell points at.
            None => c.env("KUBECONFIG", self.home.join("no-kubeconfig")),
        };
        c
    }

    pub fn run<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        self.command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()))
    }

    /// Runs helm and returns stdout, or panics with the command and stderr.
    pub fn ok<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(&self, args: &[S]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{:?} {args:?} failed:\n{}{}",
            self.version,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `helm template <release> <chart> --namespace <ns> <extra...>`: the
    /// rendered objects, or helm's stderr.
    pub fn template(
        &self,
        release: &str,
        namespace: &str,
        extra: &[&str],
    ) -> Result<Rendered, String> {
        let chart = chart_dir();
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "template".as_ref(),
            release.as_ref(),
            chart.as_os_str(),
            "--namespace".as_ref(),
            namespace.as_ref(),
        ];
        args.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
        let out = self.run(&args);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Rendered::parse(&String::from_utf8_lossy(&out.stdout)))
    }

    /// Like [`Helm::template`] but panics with helm's message on failure.
    pub fn render(&self, extra: &[&str]) -> Rendered {
        self.template("pm", "protection", extra)
            .unwrap_or_else(|e| panic!("{:?} template {extra:?} failed:\n{e}", self.version))
    }
}

/// The objects of a manifest stream.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub objects: Vec<Value>,
}

impl Rendered {
    /// Parses a multi-document YAML stream, dropping empty documents.
    pub fn parse(text: &str) -> Rendered {
        let mut objects = Vec::new();
        let mut doc = String::new();
        for line in text.lines().chain(std::iter::once("---")) {
            if line.trim_end() == "---" {
                let v: Value = serde_yaml::from_str(&doc)
                    .unwrap_or_else(|e| panic!("helm output is not YAML ({e}):\n{doc}"));
                if !v.is_null() {
                    objects.push(v);
                }
                doc.clear();
            } else {
                doc.push_str(line);
                doc.push('\n');
            }
        }
        Rendered { objects }
    }

    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    pub fn kinds(&self) -> Vec<String> {
        let mut k: Vec<String> = self
            .objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
            .collect();
        k.sort();
        k
    }

    pub fn one(&self, kind: &str) -> &Value {
        let all = self.of_kind(kind);
        assert_eq!(all.len(), 1, "want exactly one {kind}, got {}", all.len());
        all[0]
    }

    pub fn deployment(&self) -> &Value {
        self.one("Deployment")
    }

    /// The manager container's args.
    pub fn args(&self) -> Vec<String> {
        container_args(self.deployment())
    }
}

/// The `manager` container of a Deployment.
pub fn manager_container(deployment: &Value) -> &Value {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "manager"))
        .unwrap_or_else(|| panic!("no manager container in {deployment:#}"))
}

pub fn container_args(deployment: &Value) -> Vec<String> {
    manager_container(deployment)["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("string arg").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// `--name=value` flags as a map (a flag given twice panics: the manager
/// refuses that too).
pub fn flags(args: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for a in args.iter().skip(1) {
        // `--flag=value`, or a bare `--switch` (value "").
        let (k, v) = a
            .strip_prefix("--")
            .map(|f| f.split_once('=').unwrap_or((f, "")))
            .unwrap_or_else(|| panic!("arg {a:?} is not a --flag"));
        assert!(
            out.insert(k.to_string(), v.to_string()).is_none(),
            "flag --{k} given twice in {args:?}"
        );
    }
    out
}

/// The long flags `protection-manager run --help` documents.
pub fn binary_run_flags() -> Vec<String> {
    let out = Command::new(support::BIN)
        .args(["run", "--help"])
        .output()
        .expect("run protection-manager run --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut flags: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == '=' || c == '<')
        .filter_map(|w| w.strip_prefix("--"))
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .map(str::to_string)
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

/// A manager process started as a kubelet starts the chart's container: the
/// container's args, only the container's env (plus what the pod gets from
/// the cluster, passed by the caller), stderr kept in a file. Killed on drop.
pub struct Process {
    child: std::process::Child,
    stderr_path: PathBuf,
}

impl Process {
    pub fn spawn(args: &[String], env: &[(String, String)]) -> Process {
        let dir = support::tempdir();
        let stderr_path = dir.join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let child = Command::new(support::BIN)
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn protection-manager");
        Process { child, stderr_path }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// The exit status, if the process has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends SIGTERM and waits up to `grace` (the pod's
    /// terminationGracePeriodSeconds: the kubelet's SIGKILL comes then).
    pub fn terminate(&mut self, grace: std::time::Duration) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = std::time::Instant::now();
        loop {
            if let Some(st) = self.exited() {
                return st;
            }
            if start.elapsed() > grace {
                let _ = self.child.kill();
                panic!(
                    "the manager was still running {grace:?} after SIGTERM (the kubelet would SIGKILL it now); stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! What the emulated kubelets run, shared with the API server (`pods/log`)
//! and the admin API (`/_sim/pods`, the chaos signal hook).

use std::collections::BTreeMap;
use std::path::PathBuf;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// A signal the chaos hook can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
    Int,
    Hup,
    Quit,
    Usr1,
    Usr2,
    Stop,
    Cont,
}

impl std::str::FromStr for Signal {
    type Err = SignalError;
    fn from_str(s: &str) -> Result<Self, SignalError> {
        let u = s.trim().to_ascii_uppercase();
        let u = u.strip_prefix("SIG").unwrap_or(&u);
        Ok(match u {
            "TERM" | "15" => Signal::Term,
            "KILL" | "9" => Signal::Kill,
            "INT" | "2" => Signal::Int,
            "HUP" | "1" => Signal::Hup,
            "QUIT" | "3" => Signal::Quit,
            "USR1" | "10" => Signal::Usr1,
            "USR2" | "12" => Signal::Usr2,
            "STOP" | "19" => Signal::Stop,
            "CONT" | "18" => Signal::Cont,
            _ => return Err(SignalError::UnknownSignal(s.to_string())),
        })
    }
}

impl Signal {
    pub(crate) fn raw(self) -> rustix::process::Signal {
        use rustix::process::Signal as S;
        match self {
            Signal::Term => S::TERM,
            Signal::Kill => S::KILL,
            Signal::Int => S::INT,
            Signal::Hup => S::HUP,
            Signal::Quit => S::QUIT,
            Signal::Usr1 => S::USR1,
            Signal::Usr2 => S::USR2,
            Signal::Stop => S::STOP,
            Signal::Cont => S::CONT,
        }
    }
}

/// Sends `sig` to process `pid`.
pub(crate) fn send_signal(pid: u32, sig: Signal) -> std::io::Result<()> {
    let p = rustix::process::Pid::from_raw(pid as i32).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("invalid pid {pid}"),
        )
    })?;
    rustix::process::kill_process(p, sig.raw()).map_err(std::io::Error::from)
}

/// When process `pid` started (`/proc/<pid>/stat` field 22, in clock ticks
/// since boot): with the pid, it names one process, never a later one that
/// reused the pid. `None` if no such process runs.
pub fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at 3 (state); starttime is field 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether the process that `pid` named when it started at `start` still
/// runs (and is not a zombie).
pub fn proc_alive(pid: u32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next().unwrap_or("");
    let started = rest
        .split_whitespace()
        .nth(22 - 3)
        .and_then(|s| s.parse::<u64>().ok());
    state != "Z" && state != "X" && started == Some(start)
}

/// How the kubelet starts container processes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Launcher {
    /// As its own children (kube-sim's in-process kubelets): they end with
    /// the kubelet.
    #[default]
    Direct,
    /// Each through `PROGRAM container-shim` (the process kubelet, as
    /// containerd-shim for a real kubelet): a container outlives a kubelet
    /// crash and the next kubelet adopts it; it ends when the process
    /// `session_pid` (the kubelet's supervisor) ends.
    Shim { program: PathBuf, session_pid: u32 },
}

/// Errors of the signal hook.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("unknown signal {0:?} (use TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT)")]
    UnknownSignal(String),
    #[error("pod {0}/{1} is not running on an emulated kubelet")]
    NoPod(String, String),
    #[error("pod {0}/{1} has no running process{2}")]
    NoProcess(String, String, String),
    #[error("signalling pid {pid}: {source}")]
    Kill { pid: u32, source: std::io::Error },
}

/// One container of a pod as the kubelet runs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntime {
    pub name: String,
    pub init: bool,
    /// Whether the image is mapped to a local binary (else "fake").
    pub process: bool,
    pub pid: Option<u32>,
    pub restart_count: i32,
    /// Log of the current (or last) run.
    pub log_path: PathBuf,
    /// Log of the previous run (`kubectl logs --previous`).
    pub previous_log_path: Option<PathBuf>,
    /// containerPort → host port.
    pub host_ports: BTreeMap<u16, u16>,
}

/// A pod as the kubelet runs it, its processes as `/_sim/pods` lists them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodProcess {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// The pod's directory (volumes, logs, kubeconfig).
    pub dir: PathBuf,
    pub containers: Vec<ContainerRuntime>,
}

/// `GET /_sim/pods` and `POST /_sim/pods/{ns}/{name}/signal?sig=&container=`
/// on `runtimes` (kube-sim's admin API and the process kubelet's): the
/// status code and JSON answer, or `None` for another path.
pub fn pods_endpoint(
    runtimes: &PodRuntimes,
    method: &http::Method,
    path: &str,
    query: &str,
) -> Option<(u16, serde_json::Value)> {
    use serde_json::json;
    let bad = |m: String| Some((400, json!({"error": m})));
    if method == http::Method::GET && path == "/_sim/pods" {
        return Some((200, json!({"items": runtimes.list()})));
    }
    let p = path.strip_prefix("/_sim/pods/")?.strip_suffix("/signal")?;
    if method != http::Method::POST {
        return Some((405, json!({"error": "use POST"})));
    }
    let parts: Vec<&str> = p.split('/').collect();
    let [ns, name] = parts.as_slice() else {
        return bad("expected /_sim/pods/{namespace}/{name}/signal".into());
    };
    let mut sig = "KILL".to_string();
    let mut container: Option<String> = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "sig" | "signal" => sig = v.into_owned(),
            "container" => container = Some(v.into_owned()),
            other => return bad(format!("unknown parameter {other:?}")),
        }
    }
    let sig: Signal = match sig.parse() {
        Ok(s) => s,
        Err(e) => return bad(format!("{e}")),
    };
    Some(match runtimes.signal(ns, name, container.as_deref(), sig) {
        Ok(pids) => (200, json!({"pids": pids})),
        Err(e @ SignalError::Kill { .. }) => (500, json!({"error": e.to_string()})),
        Err(e) => (404, json!({"error": e.to_string()})),
    })
}

/// The registry of running pods, by uid.
#[derive(Debug, Default)]
pub struct PodRuntimes {
    pods: Mutex<BTreeMap<String, PodProcess>>,
}

impl PodRuntimes {
    pub(crate) fn upsert(&self, p: PodProcess) {
        self.pods.lock().insert(p.uid.clone(), p);
    }

    pub(crate) fn update_container(&self, uid: &str, c: ContainerRuntime) {
        if let Some(p) = self.pods.lock().get_mut(uid) {
            match p.containers.iter_mut().find(|x| x.name == c.name) {
                Some(x) => *x = c,
                None => p.containers.push(c),
            }
        }
    }

    pub(crate) fn remove(&self, uid: &str) {
        self.pods.lock().remove(uid);
    }

    /// Every pod an emulated kubelet runs (processes and fake ones).
    pub fn list(&self) -> Vec<PodProcess> {
        let mut out: Vec<PodProcess> = self.pods.lock().values().cloned().collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// The pod called `ns/name` (the newest, if a pod of that name was
    /// recreated and the old one is still shutting down).
    pub fn get(&self, ns: &str, name: &str) -> Option<PodProcess> {
        self.list()
            .into_iter()
            .rev()
            .find(|p| p.namespace == ns && p.name == name)
    }

    /// Sends `sig` to the process of `container` (every running container
    /// when None) of pod `ns/name`; returns the pids signalled.
    pub fn signal(
        &self,
        ns: &str,
        name: &str,
        container: Option<&str>,
        sig: Signal,
    ) -> Result<Vec<u32>, SignalError> {
        let pod = self
            .get(ns, name)
            .ok_or_else(|| SignalError::NoPod(ns.to_string(), name.to_string()))?;
        let pids: Vec<u32> = pod
            .containers
            .iter()
            .filter(|c| container.is_none_or(|n| n == c.name))
            .filter_map(|c| c.pid)
            .collect();
        if pids.is_empty() {
            return Err(SignalError::NoProcess(
                ns.to_string(),
                name.to_string(),
                container
                    .map(|c| format!(" in container {c:?}"))
                    .unwrap_or_default(),
            ));
        }
        for pid in &pids {
            send_signal(*pid, sig).map_err(|source| SignalError::Kill { pid: *pid, source })?;
        }
        Ok(pids)
    }
}

//! What the emulated kubelets run, shared with the API server (`pods/log`)
//! and the admin API (`/_sim/pods`, the chaos signal hook).

use std::collections::BTreeMap;
use std::path::PathBuf;

use parking_lot::Mutex;
use serde::Serialize;

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
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
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

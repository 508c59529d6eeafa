//! One container of a pod: a local process (image mapped to a binary) or a
//! fake one, with probes, restarts (CrashLoopBackOff) and graceful stop.
//!
//! Each container keeps its state in a directory of the pod's
//! (`containers/<name>/state.json`: id, start, restart count, last
//! termination; with [`Launcher::Shim`] also the shim's `pid` and `exit`
//! files), so that a kubelet started after a crash adopts a container that
//! still runs, reports the exit of one that ended meanwhile, and does not run
//! again one that finished for good.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::probe;
use super::shim;
use crate::cluster::events::{EventType, Recorder};
use crate::cluster::runtime::{
    ContainerRuntime, Launcher, PodRuntimes, Signal, proc_alive, proc_start_time, send_signal,
};

/// A finished run of a container.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Term {
    pub exit_code: i32,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: String,
    pub finished_at: String,
    pub container_id: String,
}

#[derive(Debug, Clone)]
pub enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: String,
    },
    Terminated(Term),
}

/// What the pod status shows for a container.
#[derive(Debug, Clone)]
pub struct Status {
    pub name: String,
    pub init: bool,
    pub image: String,
    pub state: CState,
    pub last: Option<Term>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
    pub container_id: Option<String>,
    /// Will not run again.
    pub done: bool,
}

impl Status {
    pub fn waiting(name: &str, image: &str, init: bool, reason: &str) -> Status {
        Status {
            name: name.to_string(),
            init,
            image: image.to_string(),
            state: CState::Waiting {
                reason: reason.to_string(),
                message: None,
            },
            last: None,
            restart_count: 0,
            ready: false,
            started: false,
            container_id: None,
            done: false,
        }
    }
}

/// Status shared between a pod worker and its container runners.
pub struct Shared {
    pub statuses: Mutex<Vec<Status>>,
    pub changed: Notify,
}

impl Shared {
    fn update(&self, index: usize, f: impl FnOnce(&mut Status)) {
        if let Some(s) = self.statuses.lock().get_mut(index) {
            f(s);
        }
        self.changed.notify_one();
    }
}

/// Everything a runner needs (computed by the pod worker).
pub struct Spec {
    pub index: usize,
    pub name: String,
    pub init: bool,
    pub restart_policy: String,
    /// argv of the process; None = fake container.
    pub argv: Option<Vec<String>>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub log_dir: PathBuf,
    pub target: probe::Target,
    pub startup: Option<k8s_openapi::api::core::v1::Probe>,
    pub readiness: Option<k8s_openapi::api::core::v1::Probe>,
    pub liveness: Option<k8s_openapi::api::core::v1::Probe>,
    /// Grace period for liveness kills.
    pub grace: Duration,
    pub pod_ref: k8s_openapi::api::core::v1::ObjectReference,
    pub pod_desc: String,
    pub uid: String,
    pub image: String,
    /// The container's state directory (see the module docs).
    pub state_dir: PathBuf,
    pub launcher: Launcher,
}

/// What a container leaves in its state directory for the next kubelet.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Persisted {
    /// The current (or last) run.
    pub container_id: String,
    pub started_at: String,
    pub restart_count: i32,
    /// The run before it (`lastState`).
    pub last: Option<Term>,
    /// The shim of a process container: its pid and start time.
    pub shim: Option<(u32, u64)>,
    /// Set once the container will not run again.
    pub done: Option<Term>,
}

const STATE_FILE: &str = "state.json";

impl Persisted {
    /// The state a previous kubelet left in `dir`, if any.
    pub fn load(dir: &Path) -> Option<Persisted> {
        serde_json::from_slice(&std::fs::read(dir.join(STATE_FILE)).ok()?).ok()
    }

    fn save(&self, dir: &Path) {
        let r = std::fs::create_dir_all(dir).and_then(|()| {
            shim::write_atomic(
                &dir.join(STATE_FILE),
                &serde_json::to_vec(self).unwrap_or_default(),
            )
        });
        if let Err(e) = r {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot save the container state");
        }
    }
}

/// The processes a previous kubelet left running under `pod_dir` (each
/// container's pid and start time), for killing the containers of a pod
/// that is gone.
pub fn leftover_processes(pod_dir: &Path) -> Vec<(u32, u64)> {
    let Ok(entries) = std::fs::read_dir(pod_dir.join("containers")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| shim::read_pid(&e.path()))
        .filter(|(pid, start)| proc_alive(*pid, *start))
        .collect()
}

/// Ties a runner to its pod.
pub struct Ctl {
    pub shared: Arc<Shared>,
    /// `Some(deadline)`: stop (SIGTERM now, SIGKILL at the deadline).
    pub term: watch::Receiver<Option<Instant>>,
    pub stop: tokio_util::sync::CancellationToken,
    pub recorder: Recorder,
    pub runtimes: Arc<PodRuntimes>,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

fn container_id() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn now() -> String {
    crate::object::now_string()
}

enum Ended {
    Exited(Term),
    /// The pod is being stopped (graceful deletion or removal).
    Stopped(Term),
    /// The kubelet is shutting down.
    Shutdown,
}

fn terminating(term: &watch::Receiver<Option<Instant>>) -> Option<Instant> {
    *term.borrow()
}

/// Runs the container until it is done, stopped or the kubelet shuts down;
/// first adopts what a previous kubelet left (see the module docs).
pub async fn run(spec: Spec, mut ctl: Ctl) {
    let prev = Persisted::load(&spec.state_dir);
    let mut backoff: Option<(Duration, Instant)> = None;
    let mut restart_count = prev.as_ref().map_or(0, |p| p.restart_count);
    let mut last: Option<Term> = prev.as_ref().and_then(|p| p.last.clone());
    if let Some(p) = &prev
        && let Some(done) = p.done.clone()
    {
        let id = done.container_id.clone();
        ctl.shared.update(spec.index, |s| {
            s.state = CState::Terminated(done);
            s.ready = false;
            s.done = true;
            s.started = false;
            s.restart_count = restart_count;
            s.last = last;
            s.container_id = (!id.is_empty()).then_some(id);
        });
        return;
    }
    let mut adopt = prev.filter(|p| !p.container_id.is_empty());
    loop {
        if let Some(deadline) = terminating(&ctl.term) {
            let _ = deadline;
            ctl.shared.update(spec.index, |s| {
                s.ready = false;
                s.done = true;
                if !matches!(s.state, CState::Terminated(_)) {
                    let t = now();
                    s.state = CState::Terminated(Term {
                        exit_code: 0,
                        reason: "Completed".into(),
                        message: None,
                        started_at: t.clone(),
                        finished_at: t,
                        container_id: String::new(),
                    });
                }
            });
            return;
        }
        // CrashLoopBackOff (kuberuntime doBackOff).
        if let (Some(prev), Some((delay, _))) = (&last, backoff) {
            let finished = last_finished(prev);
            let since = finished.elapsed();
            if since < delay {
                let wait = delay - since;
                let msg = format!(
                    "back-off {} restarting failed container={} pod={}",
                    human(delay),
                    spec.name,
                    spec.pod_desc
                );
                ctl.shared.update(spec.index, |s| {
                    s.state = CState::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: Some(msg.clone()),
                    };
                    s.ready = false;
                });
                ctl.recorder.event(
                    &field_ref(&spec),
                    EventType::Warning,
                    "BackOff",
                    &format!(
                        "Back-off restarting failed container {} in pod {}",
                        spec.name, spec.pod_desc
                    ),
                );
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = ctl.term.changed() => continue,
                    _ = ctl.stop.cancelled() => return,
                }
            }
        }
        if last.is_some() && adopt.is_none() {
            let next = match backoff {
                Some((d, at)) if at.elapsed() < ctl.backoff_max * 2 => (d * 2).min(ctl.backoff_max),
                _ => ctl.backoff_initial,
            };
            backoff = Some((next, Instant::now()));
        }
        let ended = match (adopt.take(), &spec.argv) {
            (Some(p), Some(_)) => resume_process(&spec, &mut ctl, p, last.clone()).await,
            (Some(p), None) => {
                let run = (p.started_at, p.container_id);
                run_fake(&spec, &mut ctl, restart_count, last.clone(), Some(run)).await
            }
            (None, Some(argv)) => {
                run_process(&spec, &mut ctl, argv, restart_count, last.clone()).await
            }
            (None, None) => run_fake(&spec, &mut ctl, restart_count, last.clone(), None).await,
        };
        let term = match ended {
            Ended::Shutdown => return,
            Ended::Stopped(t) => {
                finish(&spec, restart_count, last.clone(), t.clone());
                ctl.shared.update(spec.index, |s| {
                    s.state = CState::Terminated(t);
                    s.ready = false;
                    s.done = true;
                });
                return;
            }
            Ended::Exited(t) => t,
        };
        let restart = match (spec.init, spec.restart_policy.as_str()) {
            (true, "Never") => false,
            (true, _) => term.exit_code != 0,
            (false, "Always") => true,
            (false, "OnFailure") => term.exit_code != 0,
            _ => false,
        };
        if !restart {
            finish(&spec, restart_count, last.clone(), term.clone());
            ctl.shared.update(spec.index, |s| {
                s.state = CState::Terminated(term.clone());
                s.ready = false;
                s.done = true;
            });
            return;
        }
        // A run of 10 minutes resets the back-off.
        if let Ok(started) = term.started_at.parse::<jiff::Timestamp>()
            && let Ok(finished) = term.finished_at.parse::<jiff::Timestamp>()
            && finished.duration_since(started).as_secs() >= 600
        {
            backoff = None;
        }
        ctl.shared.update(spec.index, |s| {
            s.state = CState::Terminated(term.clone());
            s.ready = false;
        });
        restart_count += 1;
        last = Some(term);
    }
}

/// Records that the container will not run again.
fn finish(spec: &Spec, restart_count: i32, last: Option<Term>, term: Term) {
    Persisted {
        container_id: term.container_id.clone(),
        started_at: term.started_at.clone(),
        restart_count,
        last,
        shim: None,
        done: Some(term),
    }
    .save(&spec.state_dir);
}

fn last_finished(t: &Term) -> Instant {
    let age = t
        .finished_at
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|f| jiff::Timestamp::now().duration_since(f).as_millis().max(0) as u64)
        .unwrap_or(0);
    Instant::now()
        .checked_sub(Duration::from_millis(age))
        .unwrap_or_else(Instant::now)
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{}m0s", s / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn field_ref(spec: &Spec) -> k8s_openapi::api::core::v1::ObjectReference {
    let mut r = spec.pod_ref.clone();
    let list = if spec.init {
        "initContainers"
    } else {
        "containers"
    };
    r.field_path = Some(format!("spec.{list}{{{}}}", spec.name));
    r
}

fn announce_start(spec: &Spec, ctl: &Ctl) {
    let r = field_ref(spec);
    ctl.recorder.event(
        &r,
        EventType::Normal,
        "Pulled",
        &format!(
            "Container image {:?} already present on machine",
            spec.image
        ),
    );
    ctl.recorder.event(
        &r,
        EventType::Normal,
        "Created",
        &format!("Created container: {}", spec.name),
    );
    ctl.recorder.event(
        &r,
        EventType::Normal,
        "Started",
        &format!("Started container {}", spec.name),
    );
}

fn register(spec: &Spec, ctl: &Ctl, pid: Option<u32>, restart_count: i32) {
    let log = spec.log_dir.join(format!("{}.log", spec.name));
    let prev = spec.log_dir.join(format!("{}.previous.log", spec.name));
    ctl.runtimes.update_container(
        &spec.uid,
        ContainerRuntime {
            name: spec.name.clone(),
            init: spec.init,
            process: spec.argv.is_some(),
            pid,
            restart_count,
            log_path: log,
            previous_log_path: prev.exists().then_some(prev),
            host_ports: spec.target.ports.clone(),
        },
    );
}

/// A container whose image maps to no binary: Running at once; it exits 0
/// after a second unless it runs forever (restartPolicy Always). `resume`:
/// the (start, id) of a run a previous kubelet started.
async fn run_fake(
    spec: &Spec,
    ctl: &mut Ctl,
    restart_count: i32,
    last: Option<Term>,
    resume: Option<(String, String)>,
) -> Ended {
    let resumed = resume.is_some();
    let (started_at, id) = resume.unwrap_or_else(|| (now(), container_id()));
    let id = id.strip_prefix("containerd://").unwrap_or(&id).to_string();
    let log = spec.log_dir.join(format!("{}.log", spec.name));
    if !resumed {
        let _ = std::fs::write(&log, b"");
        Persisted {
            container_id: format!("containerd://{id}"),
            started_at: started_at.clone(),
            restart_count,
            last: last.clone(),
            shim: None,
            done: None,
        }
        .save(&spec.state_dir);
    }
    register(spec, ctl, None, restart_count);
    if !resumed {
        announce_start(spec, ctl);
    }
    ctl.shared.update(spec.index, |s| {
        s.state = CState::Running {
            started_at: started_at.clone(),
        };
        s.started = true;
        s.ready = !spec.init;
        s.restart_count = restart_count;
        s.last = last;
        s.container_id = Some(format!("containerd://{id}"));
    });
    let runs_forever = !spec.init && spec.restart_policy == "Always";
    let finish = |reason: &str| Term {
        exit_code: 0,
        reason: reason.to_string(),
        message: None,
        started_at: started_at.clone(),
        finished_at: now(),
        container_id: format!("containerd://{id}"),
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)), if !runs_forever => {
                return Ended::Exited(finish("Completed"));
            }
            r = ctl.term.changed() => {
                if r.is_err() || terminating(&ctl.term).is_some() {
                    return Ended::Stopped(finish("Completed"));
                }
            }
            _ = ctl.stop.cancelled() => return Ended::Shutdown,
        }
    }
}

fn open_log(spec: &Spec, restart_count: i32) -> std::io::Result<std::fs::File> {
    std::fs::create_dir_all(&spec.log_dir)?;
    let log = spec.log_dir.join(format!("{}.log", spec.name));
    if restart_count > 0 && log.exists() {
        let _ = std::fs::rename(
            &log,
            spec.log_dir.join(format!("{}.previous.log", spec.name)),
        );
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
}

fn exit_term(code: i32, started_at: &str, id: &str) -> Term {
    Term {
        exit_code: code,
        reason: if code == 0 { "Completed" } else { "Error" }.into(),
        message: None,
        started_at: started_at.to_string(),
        finished_at: now(),
        container_id: format!("containerd://{id}"),
    }
}

fn status_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// A running container process.
enum Proc {
    /// A child of this kubelet ([`Launcher::Direct`]).
    Child(tokio::process::Child),
    /// Under a shim: `shim` is the shim process when this kubelet started
    /// it, `None` when adopted from a previous kubelet.
    Shim {
        shim: Option<tokio::process::Child>,
        shim_id: (u32, u64),
        pid: u32,
        dir: PathBuf,
    },
}

impl Proc {
    fn pid(&self) -> Option<u32> {
        match self {
            Proc::Child(c) => c.id(),
            Proc::Shim { pid, .. } => Some(*pid),
        }
    }

    /// Waits until the process ends; its exit code (128 + signal when a
    /// signal ended it). Cancel-safe.
    async fn wait(&mut self) -> Result<i32, String> {
        match self {
            Proc::Child(c) => c
                .wait()
                .await
                .map(status_code)
                .map_err(|e| format!("waiting for the process: {e}")),
            Proc::Shim {
                shim, shim_id, dir, ..
            } => {
                match shim {
                    Some(s) => {
                        let _ = s.wait().await;
                    }
                    None => {
                        while shim::read_exit(dir).is_none() && proc_alive(shim_id.0, shim_id.1) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
                shim::read_exit(dir).map(|r| r.code).ok_or_else(|| {
                    "the container's shim ended without recording an exit status".to_string()
                })
            }
        }
    }

    fn signal(&mut self, sig: Signal) {
        if let Some(pid) = self.pid() {
            let _ = send_signal(pid, sig);
        }
        if let (Proc::Child(c), Signal::Kill) = (self, sig) {
            let _ = c.start_kill();
        }
    }
}

/// SIGTERM, wait until `deadline`, SIGKILL; returns the exit code.
async fn stop_process(proc: &mut Proc, deadline: Instant) -> Result<i32, String> {
    proc.signal(Signal::Term);
    if let Ok(r) = tokio::time::timeout_at(deadline, proc.wait()).await {
        return r;
    }
    proc.signal(Signal::Kill);
    proc.wait().await
}

/// Starts the container's process: directly, or through a shim (then waits
/// until the shim reports the pid).
async fn spawn(spec: &Spec, argv: &[String], log: std::fs::File) -> Result<Proc, String> {
    let err_log = log
        .try_clone()
        .map_err(|e| format!("opening the log: {e}"))?;
    let (Some(program), rest) = (argv.first(), &argv[1.min(argv.len())..]) else {
        return Err("no command to run".into());
    };
    let mut cmd = match &spec.launcher {
        Launcher::Direct => {
            let mut c = tokio::process::Command::new(program);
            c.args(rest).kill_on_drop(true);
            c
        }
        Launcher::Shim {
            program: shim_program,
            session_pid,
        } => {
            std::fs::create_dir_all(&spec.state_dir)
                .map_err(|e| format!("creating {}: {e}", spec.state_dir.display()))?;
            for f in [shim::PID_FILE, shim::EXIT_FILE] {
                let _ = std::fs::remove_file(spec.state_dir.join(f));
            }
            let mut c = tokio::process::Command::new(shim_program);
            c.arg("container-shim")
                .arg("--state-dir")
                .arg(&spec.state_dir)
                .arg("--session-pid")
                .arg(session_pid.to_string())
                .arg("--")
                .args(argv)
                .kill_on_drop(false);
            c
        }
    };
    cmd.env_clear()
        .envs(spec.env.iter().cloned())
        .current_dir(&spec.cwd)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "failed to create containerd task: failed to create shim task: exec: {program:?}: {e}"
        )
    })?;
    if matches!(spec.launcher, Launcher::Direct) {
        return Ok(Proc::Child(child));
    }
    let shim_pid = child.id().unwrap_or(0);
    let shim_id = (shim_pid, proc_start_time(shim_pid).unwrap_or(0));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some((pid, _)) = shim::read_pid(&spec.state_dir) {
            return Ok(Proc::Shim {
                shim: Some(child),
                shim_id,
                pid,
                dir: spec.state_dir.clone(),
            });
        }
        if let Ok(Some(_)) = child.try_wait() {
            // The shim could not start the program (its reason is in the
            // container's log).
            let code = shim::read_exit(&spec.state_dir).map_or(128, |r| r.code);
            return Err(format!(
                "failed to create containerd task: exec: {program:?}: exit {code} (see the container log)"
            ));
        }
        if Instant::now() > deadline {
            let _ = child.start_kill();
            return Err("the container shim did not start the process within 10s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn run_process(
    spec: &Spec,
    ctl: &mut Ctl,
    argv: &[String],
    restart_count: i32,
    last: Option<Term>,
) -> Ended {
    let started_at = now();
    let id = container_id();
    let fail = |msg: String| Term {
        exit_code: 128,
        reason: "StartError".into(),
        message: Some(msg),
        started_at: started_at.clone(),
        finished_at: now(),
        container_id: format!("containerd://{id}"),
    };
    let log = match open_log(spec, restart_count) {
        Ok(f) => f,
        Err(e) => return Ended::Exited(fail(format!("opening the log: {e}"))),
    };
    let proc = match spawn(spec, argv, log).await {
        Ok(p) => p,
        Err(msg) => {
            ctl.recorder.event(
                &field_ref(spec),
                EventType::Warning,
                "Failed",
                &format!("Error: {msg}"),
            );
            return Ended::Exited(fail(msg));
        }
    };
    Persisted {
        container_id: format!("containerd://{id}"),
        started_at: started_at.clone(),
        restart_count,
        last: last.clone(),
        shim: match &proc {
            Proc::Shim { shim_id, .. } => Some(*shim_id),
            Proc::Child(_) => None,
        },
        done: None,
    }
    .save(&spec.state_dir);
    tracing::debug!(container = %spec.name, pod = %spec.pod_desc, pid = ?proc.pid(), "container process started");
    announce_start(spec, ctl);
    supervise(spec, ctl, proc, started_at, id, restart_count, last).await
}

/// Takes over a process container a previous kubelet started: it still
/// runs under its shim, or it ended meanwhile (its exit is reported).
async fn resume_process(spec: &Spec, ctl: &mut Ctl, p: Persisted, last: Option<Term>) -> Ended {
    let id = p
        .container_id
        .strip_prefix("containerd://")
        .unwrap_or(&p.container_id)
        .to_string();
    let started_at = p.started_at.clone();
    let lost = |msg: &str| Term {
        exit_code: 137,
        reason: "Error".into(),
        message: Some(msg.to_string()),
        started_at: started_at.clone(),
        finished_at: now(),
        container_id: format!("containerd://{id}"),
    };
    let (Some(shim_id), Some((pid, _))) = (p.shim, shim::read_pid(&spec.state_dir)) else {
        return Ended::Exited(lost("the container did not survive the kubelet's restart"));
    };
    if let Some(r) = shim::read_exit(&spec.state_dir) {
        return Ended::Exited(exit_term(r.code, &started_at, &id));
    }
    if !proc_alive(shim_id.0, shim_id.1) {
        return Ended::Exited(lost(
            "the container's shim ended without recording an exit status",
        ));
    }
    tracing::info!(container = %spec.name, pod = %spec.pod_desc, pid, "adopted a running container");
    let proc = Proc::Shim {
        shim: None,
        shim_id,
        pid,
        dir: spec.state_dir.clone(),
    };
    supervise(spec, ctl, proc, started_at, id, p.restart_count, last).await
}

/// Probes a running process until it ends, is stopped or the kubelet shuts
/// down.
async fn supervise(
    spec: &Spec,
    ctl: &mut Ctl,
    mut proc: Proc,
    started_at: String,
    id: String,
    restart_count: i32,
    last: Option<Term>,
) -> Ended {
    let fail = |msg: String| Term {
        exit_code: 128,
        reason: "Error".into(),
        message: Some(msg),
        started_at: started_at.clone(),
        finished_at: now(),
        container_id: format!("containerd://{id}"),
    };
    register(spec, ctl, proc.pid(), restart_count);
    let t0 = Instant::now();
    let mut probes: Vec<probe::State> = Vec::new();
    if let Some(p) = &spec.startup {
        probes.push(probe::State::new(probe::Kind::Startup, p.clone(), t0));
    }
    let has_readiness = spec.readiness.is_some();
    if let Some(p) = &spec.readiness {
        probes.push(probe::State::new(probe::Kind::Readiness, p.clone(), t0));
    }
    if let Some(p) = &spec.liveness {
        probes.push(probe::State::new(probe::Kind::Liveness, p.clone(), t0));
    }
    let mut started = spec.startup.is_none();
    let mut ready = started && !has_readiness && !spec.init;
    ctl.shared.update(spec.index, |s| {
        s.state = CState::Running {
            started_at: started_at.clone(),
        };
        s.started = started;
        s.ready = ready;
        s.restart_count = restart_count;
        s.last = last;
        s.container_id = Some(format!("containerd://{id}"));
    });
    let far = Instant::now() + Duration::from_secs(86_400 * 365);
    loop {
        let next = probes
            .iter()
            .filter(|p| started || p.kind == probe::Kind::Startup)
            .map(|p| p.next)
            .min()
            .unwrap_or(far);
        tokio::select! {
            r = proc.wait() => {
                register(spec, ctl, None, restart_count);
                return match r {
                    Ok(code) => Ended::Exited(exit_term(code, &started_at, &id)),
                    Err(e) => Ended::Exited(fail(e)),
                };
            }
            r = ctl.term.changed() => {
                let deadline = if r.is_err() { Some(Instant::now()) } else { terminating(&ctl.term) };
                if let Some(deadline) = deadline {
                    ctl.recorder.event(&field_ref(spec), EventType::Normal, "Killing", &format!("Stopping container {}", spec.name));
                    ctl.shared.update(spec.index, |s| s.ready = false);
                    let st = stop_process(&mut proc, deadline).await;
                    register(spec, ctl, None, restart_count);
                    let t = match st {
                        Ok(code) => exit_term(code, &started_at, &id),
                        Err(e) => fail(e),
                    };
                    return Ended::Stopped(t);
                }
            }
            _ = ctl.stop.cancelled() => {
                proc.signal(Signal::Kill);
                let _ = proc.wait().await;
                return Ended::Shutdown;
            }
            _ = tokio::time::sleep_until(next) => {
                let now_i = Instant::now();
                let mut kill: Option<String> = None;
                for p in probes.iter_mut() {
                    if p.next > now_i || (!started && p.kind != probe::Kind::Startup) {
                        continue;
                    }
                    let r = probe::execute(p, &spec.target).await;
                    p.next = Instant::now() + p.period();
                    match r {
                        Ok(()) => {
                            p.failures = 0;
                            p.successes += 1;
                            if p.successes >= p.success_threshold() {
                                match p.kind {
                                    probe::Kind::Startup => started = true,
                                    probe::Kind::Readiness => ready = true,
                                    probe::Kind::Liveness => {}
                                }
                            }
                        }
                        Err(msg) => {
                            p.successes = 0;
                            p.failures += 1;
                            ctl.recorder.event(
                                &field_ref(spec),
                                EventType::Warning,
                                "Unhealthy",
                                &format!("{} probe failed: {msg}", p.kind.name()),
                            );
                            if p.failures >= p.failure_threshold() {
                                match p.kind {
                                    probe::Kind::Readiness => ready = false,
                                    probe::Kind::Liveness | probe::Kind::Startup => {
                                        kill = Some(format!(
                                            "Container {} failed {} probe, will be restarted",
                                            spec.name,
                                            p.kind.name().to_ascii_lowercase()
                                        ));
                                    }
                                }
                            }
                        }
                    }
                }
                if started && !has_readiness && !spec.init {
                    ready = true;
                }
                probes.retain(|p| !(p.kind == probe::Kind::Startup && started));
                ctl.shared.update(spec.index, |s| {
                    s.started = started;
                    s.ready = ready;
                });
                if let Some(msg) = kill {
                    ctl.recorder.event(&field_ref(spec), EventType::Normal, "Killing", &msg);
                    ctl.shared.update(spec.index, |s| s.ready = false);
                    let st = stop_process(&mut proc, Instant::now() + spec.grace).await;
                    register(spec, ctl, None, restart_count);
                    return Ended::Exited(match st {
                        Ok(code) => exit_term(code, &started_at, &id),
                        Err(e) => fail(e),
                    });
                }
            }
        }
    }
}

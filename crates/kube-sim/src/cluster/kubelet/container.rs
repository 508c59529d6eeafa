//! One container of a pod: a local process (image mapped to a binary) or a
//! fake one, with probes, restarts (CrashLoopBackOff) and graceful stop.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::probe;
use crate::cluster::events::{EventType, Recorder};
use crate::cluster::runtime::{ContainerRuntime, PodRuntimes, Signal, send_signal};

/// A finished run of a container.
#[derive(Debug, Clone)]
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

/// Runs the container until it is done, stopped or the kubelet shuts down.
pub async fn run(spec: Spec, mut ctl: Ctl) {
    let mut backoff: Option<(Duration, Instant)> = None;
    let mut restart_count = 0;
    let mut last: Option<Term> = None;
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
        if last.is_some() {
            let next = match backoff {
                Some((d, at)) if at.elapsed() < ctl.backoff_max * 2 => (d * 2).min(ctl.backoff_max),
                _ => ctl.backoff_initial,
            };
            backoff = Some((next, Instant::now()));
        }
        let ended = match &spec.argv {
            Some(argv) => run_process(&spec, &mut ctl, argv, restart_count, last.clone()).await,
            None => run_fake(&spec, &mut ctl, restart_count, last.clone()).await,
        };
        let term = match ended {
            Ended::Shutdown => return,
            Ended::Stopped(t) => {
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

async fn run_fake(spec: &Spec, ctl: &mut Ctl, restart_count: i32, last: Option<Term>) -> Ended {
    let started_at = now();
    let id = container_id();
    let log = spec.log_dir.join(format!("{}.log", spec.name));
    let _ = std::fs::write(&log, b"");
    register(spec, ctl, None, restart_count);
    announce_start(spec, ctl);
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

fn exit_term(status: std::process::ExitStatus, started_at: &str, id: &str) -> Term {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Term {
        exit_code: code,
        reason: if code == 0 { "Completed" } else { "Error" }.into(),
        message: None,
        started_at: started_at.to_string(),
        finished_at: now(),
        container_id: format!("containerd://{id}"),
    }
}

/// SIGTERM, wait until `deadline`, SIGKILL the process group; returns the
/// exit status.
async fn stop_process(
    child: &mut tokio::process::Child,
    deadline: Instant,
) -> Option<std::process::ExitStatus> {
    if let Some(pid) = child.id() {
        let _ = send_signal(pid, Signal::Term);
    }
    if let Ok(r) = tokio::time::timeout_at(deadline, child.wait()).await {
        return r.ok();
    }
    if let Some(pid) = child.id() {
        let _ = send_signal(pid, Signal::Kill);
    }
    let _ = child.start_kill();
    child.wait().await.ok()
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
    let (Some(program), Ok(err_log)) = (argv.first(), log.try_clone()) else {
        return Ended::Exited(fail("no command to run".into()));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(spec.env.iter().cloned())
        .current_dir(&spec.cwd)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let msg = format!(
                "failed to create containerd task: failed to create shim task: exec: {program:?}: {e}"
            );
            ctl.recorder.event(
                &field_ref(spec),
                EventType::Warning,
                "Failed",
                &format!("Error: {msg}"),
            );
            return Ended::Exited(fail(msg));
        }
    };
    let pid = child.id();
    tracing::debug!(container = %spec.name, pod = %spec.pod_desc, ?pid, "container process started");
    register(spec, ctl, pid, restart_count);
    announce_start(spec, ctl);
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
            r = child.wait() => {
                register(spec, ctl, None, restart_count);
                return match r {
                    Ok(st) => Ended::Exited(exit_term(st, &started_at, &id)),
                    Err(e) => Ended::Exited(fail(format!("waiting for the process: {e}"))),
                };
            }
            r = ctl.term.changed() => {
                let deadline = if r.is_err() { Some(Instant::now()) } else { terminating(&ctl.term) };
                if let Some(deadline) = deadline {
                    ctl.recorder.event(&field_ref(spec), EventType::Normal, "Killing", &format!("Stopping container {}", spec.name));
                    ctl.shared.update(spec.index, |s| s.ready = false);
                    let st = stop_process(&mut child, deadline).await;
                    register(spec, ctl, None, restart_count);
                    let t = match st {
                        Some(st) => exit_term(st, &started_at, &id),
                        None => fail("lost the process".into()),
                    };
                    return Ended::Stopped(t);
                }
            }
            _ = ctl.stop.cancelled() => {
                if let Some(pid) = child.id() {
                    let _ = send_signal(pid, Signal::Kill);
                }
                let _ = child.start_kill();
                let _ = child.wait().await;
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
                    let st = stop_process(&mut child, Instant::now() + spec.grace).await;
                    register(spec, ctl, None, restart_count);
                    return Ended::Exited(match st {
                        Some(st) => exit_term(st, &started_at, &id),
                        None => fail("lost the process".into()),
                    });
                }
            }
        }
    }
}

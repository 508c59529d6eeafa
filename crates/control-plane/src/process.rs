//! Child processes that never outlive the test binary.
//!
//! Every component runs under `setpriv --pdeathsig KILL`: the kernel kills it
//! when the thread that started it exits, also when the test binary panics,
//! aborts or is SIGKILLed. A parent-death signal follows the *thread*, not
//! the process, and each `#[tokio::test]` ends its runtime's threads, so
//! every child is started by one spawner thread that lives as long as the
//! test binary. Dropping a [`Proc`] kills and reaps it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Error;

/// What a component is started with.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// stdout and stderr go here (appended: a restart keeps the history).
    pub log: PathBuf,
}

type SpawnResult = Result<Child, String>;
type SpawnRequest = (Command, mpsc::Sender<SpawnResult>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        // Never joined: it must outlive every child, i.e. live as long as the
        // process (a parent-death signal fires when this thread exits).
        std::thread::Builder::new()
            .name("control-plane-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn().map_err(|e| e.to_string()));
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| eprintln!("control-plane: cannot start the spawner thread: {e}"));
        Mutex::new(tx)
    })
}

/// A running component.
pub struct Proc {
    pub spec: Spec,
    child: Mutex<Option<Child>>,
}

impl Proc {
    pub fn start(spec: Spec) -> Result<Proc, Error> {
        let child = spawn(&spec)?;
        Ok(Proc {
            spec,
            child: Mutex::new(Some(child)),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(|c| c.id())
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&self) -> Option<String> {
        let mut guard = self.lock();
        match guard.as_mut() {
            None => Some("stopped".into()),
            Some(c) => match c.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(e) => Some(format!("unknown ({e})")),
            },
        }
    }

    /// Sends `sig` to the process (SIGSTOP/SIGCONT for stalls, SIGKILL for
    /// crashes).
    pub fn signal(&self, sig: Signal) -> Result<(), Error> {
        let pid = self.pid().ok_or_else(|| Error::Process {
            name: self.spec.name.clone(),
            message: "not running".into(),
        })?;
        kill(Pid::from_raw(pid as i32), sig).map_err(|e| Error::Process {
            name: self.spec.name.clone(),
            message: format!("sending {sig}: {e}"),
        })
    }

    /// Stops the process: SIGTERM, then SIGKILL after `grace`; reaps it.
    pub fn stop(&self, grace: Duration) {
        let mut guard = self.lock();
        if let Some(mut child) = guard.take() {
            let pid = Pid::from_raw(child.id() as i32);
            // A stopped process does not act on SIGTERM until continued.
            let _ = kill(pid, Signal::SIGCONT);
            let _ = kill(pid, Signal::SIGTERM);
            let deadline = std::time::Instant::now() + grace;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => return,
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => break,
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again with the same spec (after [`Proc::stop`] or a
    /// crash).
    pub fn restart(&self) -> Result<(), Error> {
        self.stop(Duration::from_secs(10));
        let child = spawn(&self.spec)?;
        *self.lock() = Some(child);
        Ok(())
    }

    /// The last `n` lines of the component's log.
    pub fn log_tail(&self, n: usize) -> String {
        log_tail(&self.spec.log, n)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let mut guard = self.lock();
        if let Some(mut child) = guard.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn spawn(spec: &Spec) -> Result<Child, Error> {
    let err = |message: String| Error::Process {
        name: spec.name.clone(),
        message,
    };
    let log = File::options()
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(|e| err(format!("opening its log {}: {e}", spec.log.display())))?;
    let log2 = log
        .try_clone()
        .map_err(|e| err(format!("opening its log {}: {e}", spec.log.display())))?;
    let mut cmd = Command::new("setpriv");
    cmd.arg("--pdeathsig")
        .arg("KILL")
        .arg("--")
        .arg(&spec.program)
        .args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2));
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, tx))
        .map_err(|_| err("the spawner thread is gone".into()))?;
    rx.recv()
        .map_err(|_| err("the spawner thread is gone".into()))?
        .map_err(|e| {
            err(format!(
                "starting {} under setpriv (util-linux): {e}",
                spec.program.display()
            ))
        })
}

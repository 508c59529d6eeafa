//! `kube-sim container-shim`: what containerd-shim is to a real kubelet.
//! The process kubelet ([`super::process`]) starts each container process
//! through one, so that a container outlives a kubelet crash and keeps its
//! exit status for the next kubelet, which adopts it:
//!
//! ```text
//! kube-sim container-shim --state-dir DIR [--session-pid PID] -- PROGRAM ARGS...
//! ```
//!
//! The shim starts `PROGRAM` in its own process group (under `setpriv
//! --pdeathsig KILL` where util-linux has it, so the container ends if the
//! shim is killed), writes `DIR/pid` (`<pid> <start time>`) once it runs and
//! `DIR/exit` ([`ExitRecord`], JSON, written whole) when it ends, then exits.
//! The container inherits the shim's environment, working directory and
//! standard streams (the kubelet points them at the container's log). With
//! `--session-pid`, the shim kills the container's group and exits when
//! that process ends (the kubelet's supervisor: no container outlives the
//! test that started the cluster).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::runtime::{Signal, proc_alive, proc_start_time, send_signal};

/// How a container process ended, as the shim records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitRecord {
    /// The exit code, or 128 + the signal that ended it.
    pub code: i32,
    pub signal: Option<i32>,
    pub finished_at: String,
}

/// The file names in a container's state directory.
pub const PID_FILE: &str = "pid";
pub const EXIT_FILE: &str = "exit";

/// Reads `DIR/pid`: the container's pid and start time.
pub fn read_pid(dir: &Path) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(dir.join(PID_FILE)).ok()?;
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Reads `DIR/exit`.
pub fn read_exit(dir: &Path) -> Option<ExitRecord> {
    serde_json::from_slice(&std::fs::read(dir.join(EXIT_FILE)).ok()?).ok()
}

/// Writes `data` to `path` whole: a reader sees the old file or the new one.
pub fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

struct Args {
    state_dir: PathBuf,
    session: Option<(u32, u64)>,
    argv: Vec<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut state_dir = None;
    let mut session_pid = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--state-dir" => state_dir = it.next().map(PathBuf::from),
            "--session-pid" => {
                let v = it.next().ok_or("--session-pid needs a value")?;
                session_pid = Some(
                    v.parse::<u32>()
                        .map_err(|_| format!("--session-pid {v:?} is not a pid"))?,
                );
            }
            "--" => break,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let argv: Vec<String> = it.cloned().collect();
    let state_dir = state_dir.ok_or("--state-dir is required")?;
    if argv.is_empty() {
        return Err("no command after --".into());
    }
    let session = match session_pid {
        Some(p) => Some((
            p,
            proc_start_time(p).ok_or_else(|| format!("--session-pid {p}: no such process"))?,
        )),
        None => None,
    };
    Ok(Args {
        state_dir,
        session,
        argv,
    })
}

fn setpriv() -> Option<PathBuf> {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// `kube-sim container-shim ...`; `args` are the arguments after the
/// subcommand.
pub fn main(args: &[String]) -> ExitCode {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "kube-sim container-shim: {e}\nusage: kube-sim container-shim --state-dir DIR [--session-pid PID] -- PROGRAM ARGS..."
            );
            return ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kube-sim container-shim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), String> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let mut cmd = match setpriv() {
        Some(sp) => {
            let mut c = std::process::Command::new(sp);
            c.args(["--pdeathsig", "KILL", "--"]).args(&a.argv);
            c
        }
        None => {
            let mut c = std::process::Command::new(&a.argv[0]);
            c.args(&a.argv[1..]);
            c
        }
    };
    cmd.process_group(0);
    let write_exit = |code: i32, signal: Option<i32>| -> Result<(), String> {
        let rec = ExitRecord {
            code,
            signal,
            finished_at: crate::object::now_string(),
        };
        let data = serde_json::to_vec(&rec).map_err(|e| e.to_string())?;
        write_atomic(&a.state_dir.join(EXIT_FILE), &data)
            .map_err(|e| format!("writing {}: {e}", a.state_dir.display()))
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            // As a runtime that cannot exec: 128, the message in the log.
            eprintln!("exec {:?}: {e}", a.argv[0]);
            return write_exit(128, None);
        }
    };
    let pid = child.id();
    let start = proc_start_time(pid).unwrap_or(0);
    write_atomic(
        &a.state_dir.join(PID_FILE),
        format!("{pid} {start}\n").as_bytes(),
    )
    .map_err(|e| format!("writing {}: {e}", a.state_dir.display()))?;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let signal = st.signal();
                let code = st.code().or(signal.map(|s| 128 + s)).unwrap_or(1);
                return write_exit(code, signal);
            }
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for pid {pid}: {e}")),
        }
        if let Some((spid, sstart)) = a.session
            && !proc_alive(spid, sstart)
        {
            let _ = send_signal(pid, Signal::Kill);
            let st = child.wait().map_err(|e| e.to_string())?;
            let signal = st.signal();
            return write_exit(st.code().or(signal.map(|s| 128 + s)).unwrap_or(137), signal);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

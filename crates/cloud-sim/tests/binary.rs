//! The `cloud-sim` binary as a process: flags, persistence across SIGKILL and
//! SIGTERM, start-up errors.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Api, ensure_body, ingress_ip};

const BIN: &str = env!("CARGO_BIN_EXE_cloud-sim");
const DEADLINE: Duration = Duration::from_secs(30);

struct Proc {
    child: Child,
    url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary and reads the address it prints.
fn spawn(dir: &Path, extra: &[&str]) -> Proc {
    let state = dir.join("state.json");
    let token = dir.join("token");
    if !token.exists() {
        std::fs::write(&token, "bin-token\n").unwrap();
    }
    let mut child = Command::new(BIN)
        .args(["--port", "0", "--ip-range", "192.0.2.0/29"])
        .arg("--state-file")
        .arg(&state)
        .arg("--token-file")
        .arg(&token)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cloud-sim binary starts");
    let stdout = child.stdout.take().unwrap();
    // Reading blocks until the line comes or the process exits; the process
    // prints it right after binding.
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("cloud-sim listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Proc { child, url }
}

fn sigterm(p: &mut Proc) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cloud-sim ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--port",
        "--bind",
        "--state-file",
        "--no-fsync",
        "--ip-range",
        "--token-file",
        "--token",
        "--faults-file",
        "--seed",
        "--fault-ops",
        "--error-rate",
        "--error-status",
        "--retry-after",
        "--retry-after-http-date",
        "--error-after-commit",
        "--latency",
        "--hang-rate",
        "--hang-max-ms",
        "SIGTERM",
        "/_sim/faults",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[tokio::test]
async fn state_survives_sigkill_and_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path(), &[]);
    let api = Api::new(&p.url, Some("bin-token"));
    let (status, lb) = api.put("uid-1", &ensure_body("ns", "a", "uid-1")).await;
    assert_eq!(status, 201, "{lb}");
    assert_eq!(ingress_ip(&lb), "192.0.2.1");

    // SIGKILL right after the reply: the change was on disk before it.
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    let mut p = spawn(dir.path(), &[]);
    let api = Api::new(&p.url, Some("bin-token"));
    let (status, got) = api.get("uid-1").await;
    assert_eq!((status, &got), (200, &lb));
    let (status, lb2) = api.put("uid-2", &ensure_body("ns", "b", "uid-2")).await;
    assert_eq!(status, 201);
    assert_eq!(ingress_ip(&lb2), "192.0.2.2");

    // SIGTERM: graceful, exit code 0, state kept.
    assert!(sigterm(&mut p).success());
    // Without fsync the file is still replaced atomically: a killed process
    // loses nothing it acknowledged.
    let mut p = spawn(dir.path(), &["--no-fsync"]);
    let api = Api::new(&p.url, Some("bin-token"));
    assert_eq!(
        api.put("uid-3", &ensure_body("ns", "c", "uid-3")).await.0,
        201
    );
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    let p = spawn(dir.path(), &[]);
    let api = Api::new(&p.url, Some("bin-token"));
    let (status, inv) = api.list().await;
    assert_eq!(status, 200);
    assert_eq!(inv["items"].as_array().unwrap().len(), 3);
}

#[test]
fn corrupt_state_file_fails_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    std::fs::write(&state, "{\"format\": \"cloud-sim-state/v1\", \"loadBal").unwrap();
    let out = Command::new(BIN)
        .args(["--port", "0", "--state-file"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&state.display().to_string()), "{err}");
    assert!(err.contains("corrupt"), "{err}");
}

#[test]
fn bad_flags_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["--port", "0", "--state-file"])
            .arg(&state)
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(run(&["--ip-range", "10.0.0.0/33"]).contains("prefix length"));
    assert!(run(&["--error-rate", "1.5"]).contains("rate is 1.5"));
    assert!(run(&["--fault-ops", "put,post"]).contains("\"post\""));
    assert!(run(&["--latency", "fast"]).contains("\"fast\""));
    let missing = dir.path().join("no-such-token");
    let err = run(&["--token-file", missing.to_str().unwrap()]);
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
}

#[tokio::test]
async fn fault_flags_apply_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let p = spawn(
        dir.path(),
        &[
            "--fault-ops",
            "get",
            "--error-rate",
            "1",
            "--error-status",
            "429",
            "--retry-after",
            "9",
            "--seed",
            "5",
        ],
    );
    let api = Api::new(&p.url, Some("bin-token"));
    assert_eq!(
        api.put("uid-1", &ensure_body("ns", "a", "uid-1")).await.0,
        201
    );
    let r = api
        .req(reqwest::Method::GET, "/v1/loadbalancers/uid-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers()["retry-after"], "9");
    let (_, faults) = api.admin(reqwest::Method::GET, "/_sim/faults", None).await;
    assert_eq!(faults["seed"], 5);
    assert_eq!(faults["operations"]["get"]["error"]["status"], 429);
}

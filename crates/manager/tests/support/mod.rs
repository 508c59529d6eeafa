//! Helpers for tests that run the real binary.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_protection-manager");

pub fn run_to_end(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run protection-manager")
}

/// Runs the binary with each argument list and asserts it fails with the
/// expected text on stderr.
pub fn assert_each_refused(cases: &[(&[&str], &str)]) {
    for (args, want) in cases {
        let out = run_to_end(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(want),
            "{args:?}: want {want:?} in stderr:\n{stderr}"
        );
    }
}

/// A port for a manager's admin server, outside the range outgoing
/// connections take theirs from (`free_port`): a test may restart the
/// manager on it.
pub fn free_port() -> u16 {
    free_port::free_port().expect("free port")
}

/// A fresh directory under the target dir's tmp (kept for post-mortems; it
/// goes with `cargo clean` instead of piling up in /tmp).
pub fn tempdir() -> PathBuf {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "pm-test-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ rand_suffix()
    ));
    std::fs::create_dir_all(&base).expect("create temp dir");
    base
}

fn rand_suffix() -> u128 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0);
    u128::from(h.finish())
}

pub fn write_kubeconfig(dir: &Path, server: &str, token: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        r#"{{"apiVersion":"v1","kind":"Config","current-context":"t",
"clusters":[{{"name":"t","cluster":{{"server":"{server}"}}}}],
"users":[{{"name":"t","user":{{"token":"{token}"}}}}],
"contexts":[{{"name":"t","context":{{"cluster":"t","user":"t"}}}}]}}"#
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

/// A minimal HTTP/1.1 GET (no client library needed for admin endpoints).
pub fn http_get(url: &str) -> Option<(u16, String)> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let mut s = TcpStream::connect(host).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Some((
        code,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub fn wait_until(timeout: Duration, what: &str, f: impl FnMut() -> bool) {
    test_support::until_blocking(timeout, what, f)
}

/// A running manager process; killed on drop.
pub struct Manager {
    child: Child,
    stderr_path: PathBuf,
}

impl Manager {
    pub fn start(args: &[&str]) -> Manager {
        let dir = tempdir();
        let stderr_path = dir.join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let child = Command::new(BIN)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn protection-manager");
        Manager { child, stderr_path }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Polls `f` every `every` until it holds; after `timeout` panics naming
    /// `what`, with the manager's stderr (the evidence of why not).
    pub async fn wait_for(
        &self,
        timeout: Duration,
        every: Duration,
        what: &str,
        mut f: impl AsyncFnMut() -> bool,
    ) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if f().await {
                return;
            }
            tokio::time::sleep(every).await;
        }
        panic!(
            "timed out after {timeout:?} waiting until {what}; manager stderr:\n{}",
            self.stderr()
        );
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            if start.elapsed() > timeout {
                let _ = self.child.kill();
                panic!(
                    "manager did not exit within {timeout:?} of SIGTERM; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! Container probes (pkg/kubelet/prober): httpGet and tcpSocket against the
//! process on 127.0.0.1 and its remapped port, exec as a local command.
//! grpc probes are not emulated (they succeed); `https` httpGet probes only
//! check that the port accepts connections.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Probe;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Startup,
    Readiness,
    Liveness,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Readiness => "Readiness",
            Kind::Liveness => "Liveness",
        }
    }
}

/// Where a probe reaches the container.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// containerPort → host port.
    pub ports: BTreeMap<u16, u16>,
    /// port name → containerPort.
    pub named: BTreeMap<String, u16>,
    /// For exec probes: environment and path mounts of the container.
    pub env: Vec<(String, String)>,
    pub mounts: Vec<(String, String)>,
    pub cwd: String,
}

impl Target {
    fn port(&self, p: &IntOrString) -> Result<u16, String> {
        let container = match p {
            IntOrString::Int(i) => u16::try_from(*i).map_err(|_| format!("invalid port {i}"))?,
            IntOrString::String(s) => match s.parse::<u16>() {
                Ok(n) => n,
                Err(_) => *self
                    .named
                    .get(s)
                    .ok_or_else(|| format!("unknown port name {s:?}"))?,
            },
        };
        Ok(self.ports.get(&container).copied().unwrap_or(container))
    }
}

/// One probe's schedule and counters.
#[derive(Debug, Clone)]
pub struct State {
    pub kind: Kind,
    pub probe: Probe,
    pub next: Instant,
    pub successes: i32,
    pub failures: i32,
}

impl State {
    pub fn new(kind: Kind, probe: Probe, started: Instant) -> State {
        let delay = probe.initial_delay_seconds.unwrap_or(0).max(0) as u64;
        State {
            kind,
            probe,
            next: started + Duration::from_secs(delay),
            successes: 0,
            failures: 0,
        }
    }
    pub fn period(&self) -> Duration {
        Duration::from_secs(self.probe.period_seconds.unwrap_or(10).max(1) as u64)
    }
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.probe.timeout_seconds.unwrap_or(1).max(1) as u64)
    }
    pub fn success_threshold(&self) -> i32 {
        match self.kind {
            Kind::Readiness => self.probe.success_threshold.unwrap_or(1).max(1),
            _ => 1,
        }
    }
    pub fn failure_threshold(&self) -> i32 {
        self.probe.failure_threshold.unwrap_or(3).max(1)
    }
}

/// Runs one probe. `Err` carries upstream's failure message.
pub async fn execute(state: &State, target: &Target) -> Result<(), String> {
    let timeout = state.timeout();
    let p = &state.probe;
    if let Some(h) = &p.http_get {
        let port = target.port(&h.port)?;
        let path = h.path.clone().unwrap_or_else(|| "/".into());
        let path = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        let url = format!("http://127.0.0.1:{port}{path}");
        if h.scheme.as_deref() == Some("HTTPS") {
            return tcp(port, timeout).await;
        }
        let mut req = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
        );
        for hd in h.http_headers.iter().flatten() {
            req.push_str(&format!("{}: {}\r\n", hd.name, hd.value));
        }
        req.push_str("\r\n");
        let fut = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .map_err(|e| {
                    format!(
                        "Get {url:?}: dial tcp 127.0.0.1:{port}: connect: {}",
                        io_text(&e)
                    )
                })?;
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| format!("Get {url:?}: {e}"))?;
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            loop {
                let n = s
                    .read(&mut chunk)
                    .await
                    .map_err(|e| format!("Get {url:?}: {e}"))?;
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                if buf.windows(2).any(|w| w == b"\r\n") {
                    break;
                }
            }
            let line = String::from_utf8_lossy(&buf);
            let code: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| format!("Get {url:?}: malformed HTTP response"))?;
            if (200..400).contains(&code) {
                Ok(())
            } else {
                Err(format!("HTTP probe failed with statuscode: {code}"))
            }
        };
        return match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )),
        };
    }
    if let Some(t) = &p.tcp_socket {
        let port = target.port(&t.port)?;
        return tcp(port, timeout).await;
    }
    if let Some(e) = &p.exec {
        let cmd: Vec<String> = e
            .command
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|c| super::rewrite::paths(c, &target.mounts))
            .collect();
        let Some((prog, args)) = cmd.split_first() else {
            return Err("exec probe without a command".into());
        };
        let mut c = tokio::process::Command::new(prog);
        c.args(args)
            .env_clear()
            .envs(target.env.iter().cloned())
            .current_dir(&target.cwd)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        return match tokio::time::timeout(timeout, c.output()).await {
            Err(_) => Err(format!("command {cmd:?} timed out")),
            Ok(Err(e)) => Err(format!("exec {prog:?}: {e}")),
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => {
                let mut text = String::from_utf8_lossy(&out.stdout).to_string();
                text.push_str(&String::from_utf8_lossy(&out.stderr));
                Err(text.trim().to_string())
            }
        };
    }
    // grpc: not emulated.
    Ok(())
}

fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}

async fn tcp(port: u16, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(("127.0.0.1", port))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "dial tcp 127.0.0.1:{port}: connect: {}",
            io_text(&e)
        )),
        Err(_) => Err(format!("dial tcp 127.0.0.1:{port}: i/o timeout")),
    }
}

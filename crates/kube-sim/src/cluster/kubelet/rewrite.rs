//! How a container's command line and environment are adapted to run as a
//! local process (all pods share the host's file system and network):
//!
//! * paths: a volume's `mountPath` (or the service-account directory
//!   `/var/run/secrets/kubernetes.io/serviceaccount`) is replaced by the
//!   directory the kubelet materialised it in, wherever it starts an
//!   argument or environment value, or follows `=`, `:` or `,` in one, and
//!   is followed by the end, `/`, `,` or `:` (longest mount path first);
//! * ports: each declared `containerPort` gets its own free host port; a
//!   value `HOST:PORT`, `:PORT`, `[V6]:PORT` or `SCHEME://HOST:PORT/...`
//!   whose port is a declared container port gets the host port instead,
//!   as does a bare `PORT` given to a flag (or environment variable) whose
//!   name ends in `port` (`--metrics-port 8080`, `HTTP_PORT=8080`). Values
//!   are looked at after `=` in `--flag=value` and in the argument that
//!   follows a `--flag` without one.

use std::collections::BTreeMap;
use std::path::Path;

/// Replaces mount paths by host paths in `s` (see the module docs).
pub fn paths(s: &str, mounts: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = mounts.iter().filter(|(m, _)| !m.is_empty()).collect();
    sorted.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    'outer: while i < s.len() {
        let boundary_before = i == 0 || matches!(b[i - 1], b'=' | b':' | b',');
        if boundary_before {
            for (m, host) in &sorted {
                let m = m.trim_end_matches('/');
                if m.is_empty() {
                    continue;
                }
                if s[i..].starts_with(m) {
                    let end = i + m.len();
                    if end == s.len() || matches!(b[end], b'/' | b',' | b':') {
                        out.push_str(host);
                        i = end;
                        continue 'outer;
                    }
                }
            }
        }
        // Copy one char.
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn map_port(p: &str, ports: &BTreeMap<u16, u16>) -> Option<u16> {
    p.parse::<u16>().ok().and_then(|n| ports.get(&n).copied())
}

/// Rewrites the port of one value; `port_name` says whether a bare number
/// counts (the flag or variable name ends in "port").
pub fn port_value(v: &str, port_name: bool, ports: &BTreeMap<u16, u16>) -> String {
    if ports.is_empty() {
        return v.to_string();
    }
    if port_name && let Some(h) = map_port(v.trim(), ports) {
        return h.to_string();
    }
    // SCHEME://HOST:PORT/rest
    if let Some(idx) = v.find("://") {
        let (scheme, rest) = v.split_at(idx + 3);
        let end = rest.find('/').unwrap_or(rest.len());
        let (auth, tail) = rest.split_at(end);
        let new_auth = host_port(auth, ports).unwrap_or_else(|| auth.to_string());
        return format!("{scheme}{new_auth}{tail}");
    }
    host_port(v, ports).unwrap_or_else(|| v.to_string())
}

/// `HOST:PORT`, `:PORT`, `[V6]:PORT` with a mapped port, rewritten.
fn host_port(v: &str, ports: &BTreeMap<u16, u16>) -> Option<String> {
    let (host, port) = v.rsplit_once(':')?;
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return None; // a bare IPv6 address, not host:port
    }
    if host.contains('/') || host.contains(' ') {
        return None;
    }
    let h = map_port(port, ports)?;
    Some(format!("{host}:{h}"))
}

fn ends_in_port(name: &str) -> bool {
    name.trim_start_matches('-')
        .to_ascii_lowercase()
        .ends_with("port")
}

/// Rewrites ports in an argument list (see the module docs).
pub fn port_args(args: &[String], ports: &BTreeMap<u16, u16>) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut prev_flag: Option<String> = None;
    for a in args {
        if let Some(flag) = prev_flag.take()
            && !a.starts_with('-')
        {
            out.push(port_value(a, ends_in_port(&flag), ports));
            continue;
        }
        if a.starts_with('-') {
            match a.split_once('=') {
                Some((flag, value)) => {
                    out.push(format!(
                        "{flag}={}",
                        port_value(value, ends_in_port(flag), ports)
                    ));
                }
                None => {
                    prev_flag = Some(a.clone());
                    out.push(a.clone());
                }
            }
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// The host path of a mount path, for a working directory.
pub fn working_dir(dir: &str, mounts: &[(String, String)], pod_dir: &Path) -> String {
    if dir.is_empty() {
        return pod_dir.display().to_string();
    }
    let p = paths(dir, mounts);
    if p == dir && !Path::new(dir).is_dir() {
        // Not a mount and not a host directory: the pod directory.
        return pod_dir.display().to_string();
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_rewritten_at_boundaries_only() {
        let mounts = vec![
            ("/etc/pm".to_string(), "/tmp/pod/volumes/cfg".to_string()),
            (
                "/etc/pm/token".to_string(),
                "/tmp/pod/volumes/tok".to_string(),
            ),
        ];
        assert_eq!(
            paths("/etc/pm/a.yaml", &mounts),
            "/tmp/pod/volumes/cfg/a.yaml"
        );
        assert_eq!(
            paths("--token-file=/etc/pm/token/token", &mounts),
            "--token-file=/tmp/pod/volumes/tok/token"
        );
        assert_eq!(paths("/etc/pmx", &mounts), "/etc/pmx");
        assert_eq!(paths("x/etc/pm", &mounts), "x/etc/pm");
        assert_eq!(paths("a:/etc/pm,b", &mounts), "a:/tmp/pod/volumes/cfg,b");
    }

    #[test]
    fn ports_are_remapped_in_flags_and_urls() {
        let ports: BTreeMap<u16, u16> = [(8080, 41000), (9090, 41001)].into_iter().collect();
        let args: Vec<String> = [
            "run",
            "--admin-address=0.0.0.0:8080",
            "--metrics-port",
            "9090",
            "--listen",
            "http://127.0.0.1:9090/x",
            "--replicas=8080",
            "--other=[::]:8080",
            "--keep=1.2.3.4:7000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            port_args(&args, &ports),
            vec![
                "run",
                "--admin-address=0.0.0.0:41000",
                "--metrics-port",
                "41001",
                "--listen",
                "http://127.0.0.1:41001/x",
                "--replicas=8080",
                "--other=[::]:41000",
                "--keep=1.2.3.4:7000",
            ]
        );
        assert_eq!(port_value("8080", true, &ports), "41000");
        assert_eq!(port_value("8080", false, &ports), "8080");
        assert_eq!(port_value("::1", false, &ports), "::1");
    }
}

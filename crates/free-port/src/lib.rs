//! A free port for a server that is told its port and binds it a little
//! later, and again after each restart: kube-sim's process kubelet maps a
//! pod's container ports to host ports for the pod's life, and the
//! control-plane launcher restarts etcd and kube-apiserver on their ports.
//!
//! The usual way (bind port 0, read the port, close) hands out a port of the
//! kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by default),
//! the range every outgoing connection takes its local port from. Any
//! client on the host can then hold that port when the server binds it, and
//! the server exits with "Address already in use" (CI saw a manager's
//! metrics port taken that way). The ports here come from below that range
//! and below the node ports (30000-32767), in turn from a random start, so
//! that test binaries side by side rarely try the same one; a port is taken
//! only if it can be bound on every address now.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::TcpListener;
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The ports [`free_port`] hands out: from half the ephemeral range's low
/// end (1024 at least) up to that end or the node ports' first, whichever
/// is lower. 16384-29999 with the kernel's defaults.
pub fn range() -> Range<u16> {
    static RANGE: OnceLock<Range<u16>> = OnceLock::new();
    RANGE.get_or_init(read_range).clone()
}

fn read_range() -> Range<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    (low / 2).max(1024)..low.min(30000)
}

/// A port of [`range`] that nothing on the host holds now (it binds it on
/// `0.0.0.0`, then lets it go), not handed out before by this process until
/// the whole range has been; a port of the ephemeral range if [`range`] is
/// narrower than 1,000 ports or has none free.
pub fn free_port() -> io::Result<u16> {
    static NEXT: OnceLock<AtomicUsize> = OnceLock::new();
    let range = range();
    let size = range.len();
    if size >= 1000 {
        let next = NEXT.get_or_init(|| {
            // A random start without a random-number crate: the standard
            // library seeds each `RandomState` from the OS.
            let seed = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            AtomicUsize::new((seed % size as u64) as usize)
        });
        for _ in 0..size {
            let port = range.start + (next.fetch_add(1, Ordering::Relaxed) % size) as u16;
            if TcpListener::bind(("0.0.0.0", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports are free to bind, distinct, and outside the range the kernel
    /// takes outgoing connections' ports from.
    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let r = range();
        let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(r.end <= low && r.end <= 30000 && r.len() >= 1000, "{r:?}");
        let mut ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        for p in &ports {
            assert!(r.contains(p), "{p} outside {r:?}");
            TcpListener::bind(("0.0.0.0", *p)).unwrap();
        }
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), 50);
    }

    /// A port something listens on is not handed out.
    #[test]
    fn a_held_port_is_skipped() {
        let p = free_port().unwrap();
        let _held = TcpListener::bind(("127.0.0.1", p)).unwrap();
        // The next `range().len()` calls go round the whole range once.
        for _ in 0..range().len() {
            assert_ne!(free_port().unwrap(), p);
        }
    }
}

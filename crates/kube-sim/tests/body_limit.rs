//! Request body limits: kube-sim answers a body over the apiserver's 3 MiB
//! `MaxRequestBodyBytes` with 413 without reading (Content-Length) or
//! after reading at most the limit (chunked), so a large upload never sits
//! in its memory. Each upload counts the bytes the server let the client
//! send: a server that read the whole body would take all of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube_sim::{KubeSim, SimConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: usize = 1024 * 1024;
const LIMIT_MESSAGE: &str = "Request entity too large: limit is 3145728";

/// Sends `head` and then up to `total` bytes of body (chunked, or raw after
/// a Content-Length in `head`) in 64 KiB pieces while reading the reply;
/// stops sending once a reply arrives or the server closes. Answers the
/// body bytes sent and the reply.
async fn upload(
    addr: std::net::SocketAddr,
    head: &str,
    total: usize,
    chunked: bool,
) -> (usize, String) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connecting: {e}"));
    let (mut rd, mut wr) = stream.into_split();
    let replied = Arc::new(AtomicBool::new(false));
    let flag = replied.clone();
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        // A reset after the reply ends the read like an EOF.
        while let Ok(n) = rd.read(&mut buf).await {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            flag.store(true, Ordering::SeqCst);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    wr.write_all(head.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("writing the request head: {e}"));
    let piece = vec![b'x'; 64 * 1024];
    let mut sent = 0;
    while sent < total && !replied.load(Ordering::SeqCst) {
        let frame = if chunked {
            let mut f = format!("{:x}\r\n", piece.len()).into_bytes();
            f.extend_from_slice(&piece);
            f.extend_from_slice(b"\r\n");
            f
        } else {
            piece.clone()
        };
        if wr.write_all(&frame).await.is_err() {
            break;
        }
        sent += piece.len();
    }
    if sent >= total && chunked {
        let _ = wr.write_all(b"0\r\n\r\n").await;
    }
    let reply = reader.await.unwrap_or_else(|e| panic!("reader task: {e}"));
    drop(wr);
    (sent, reply)
}

fn status_code(reply: &str) -> u16 {
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"))
}

/// The JSON object in a reply body (chunk sizes around it ignored).
fn json_body(reply: &str) -> serde_json::Value {
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let (Some(start), Some(end)) = (body.find('{'), body.rfind('}')) else {
        panic!("no JSON in {reply:?}");
    };
    serde_json::from_str(&body[start..=end]).unwrap_or_else(|e| panic!("{e}: {reply:?}"))
}

fn assert_too_large(reply: &str) {
    assert_eq!(status_code(reply), 413, "{reply}");
    let s = json_body(reply);
    assert_eq!(s["kind"], "Status", "{reply}");
    assert_eq!(s["status"], "Failure");
    assert_eq!(s["reason"], "RequestEntityTooLarge");
    assert_eq!(s["code"], 413);
    assert_eq!(s["message"], LIMIT_MESSAGE);
}

async fn sim() -> KubeSim {
    KubeSim::start(SimConfig::default())
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"))
}

/// A chunked 128 MiB POST, unauthenticated: 413 after at most the limit
/// was read; the client could send only what the socket buffers hold on
/// top of it, far from the whole body.
#[tokio::test]
async fn chunked_body_over_the_limit_is_413_without_reading_it_all() {
    let sim = sim().await;
    let total = 128 * MIB;
    let head = "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: kube-sim\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let (sent, reply) = upload(sim.addr(), head, total, true).await;
    eprintln!(
        "chunked: the client sent {} of {} MiB before the reply",
        sent / MIB,
        total / MIB
    );
    assert_too_large(&reply);
    assert!(
        sent < total / 2,
        "the server read the body on past its limit: {sent} of {total} bytes sent"
    );
}

/// A declared Content-Length over the limit is refused before any of the
/// body is read, on the API and on kube-sim's own `/_sim` endpoints.
#[tokio::test]
async fn declared_length_over_the_limit_is_413_before_reading() {
    let sim = sim().await;
    let total = 256 * MIB;
    for path in ["/api/v1/namespaces/default/configmaps", "/_sim/faults"] {
        let method = if path.starts_with("/_sim") {
            "PUT"
        } else {
            "POST"
        };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: kube-sim\r\nContent-Type: application/json\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"
        );
        let (sent, reply) = upload(sim.addr(), &head, total, false).await;
        eprintln!(
            "{path}: the client sent {} of {} MiB before the reply",
            sent / MIB,
            total / MIB
        );
        assert_too_large(&reply);
        assert!(sent < total / 2, "{path}: {sent} of {total} bytes sent");
    }
}

/// A body of exactly the limit is read (and then judged on its content).
#[tokio::test]
async fn body_at_the_limit_is_read() {
    let sim = sim().await;
    let total = 3 * MIB;
    let head = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: kube-sim\r\nAuthorization: Bearer admin\r\nContent-Type: application/json\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"
    );
    let (sent, reply) = upload(sim.addr(), &head, total, false).await;
    assert_eq!(sent, total);
    // Not JSON: a decoding error, not a size error.
    assert_eq!(status_code(&reply), 400, "{reply}");
}

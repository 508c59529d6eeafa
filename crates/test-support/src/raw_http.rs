//! A raw HTTP/1.1 client for tests of a server's request-body limits,
//! where a real client would refuse to send what the test needs (a body
//! larger than announced, chunked uploads that never end).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `head` and then up to `total` bytes of body (chunked, or raw after
/// a Content-Length in `head`) in 64 KiB pieces while reading the reply;
/// stops sending once a reply arrives or the server closes. Answers the
/// body bytes sent and the reply.
pub async fn upload(
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

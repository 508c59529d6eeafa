//! Request body limits: kube-sim answers a body over the apiserver's 3 MiB
//! `MaxRequestBodyBytes` with 413 without reading (Content-Length) or
//! after reading at most the limit (chunked), so a large upload never sits
//! in its memory. Each upload counts the bytes the server let the client
//! send: a server that read the whole body would take all of it.

mod common;

use kube_sim::{KubeSim, SimConfig};
use test_support::raw_http::upload;

const MIB: usize = 1024 * 1024;
const LIMIT_MESSAGE: &str = "Request entity too large: limit is 3145728";

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

/// What a client sees for a body over the limit, judged by the real
/// kube-apiserver 1.36 (`common::conform`): the 413 Status, whole.
#[tokio::test]
async fn the_limit_status_is_the_real_servers() {
    common::conform(
        "the_limit_status_is_the_real_servers",
        SimConfig::default(),
        async |t| {
            let ns = t.namespace("limit").await;
            let big = "x".repeat(3 * MIB);
            let body = serde_json::json!({"metadata": {"name": "big"}, "data": {"k": big}});
            let r = common::differential::post(
                &t.client,
                &format!("/api/v1/namespaces/{ns}/configmaps"),
                &body,
            )
            .await;
            assert_eq!(r.code, 413, "{}", r.body["message"]);
            assert_eq!(r.body["reason"], "RequestEntityTooLarge");
            assert_eq!(r.body["message"], LIMIT_MESSAGE);
            t.record("over the limit", r.record());
            t.cleanup_namespace(&ns).await;
        },
    )
    .await;
}

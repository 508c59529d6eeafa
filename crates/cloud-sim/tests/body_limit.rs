//! cloud-sim authenticates a call before it reads the body, and reads at
//! most 16 MiB of one, answering 413 in the contract's JSON error format.
//! Each upload counts the bytes the server let the client send: a server
//! that read the body would take far more of it.

use cloud_sim::{CloudSim, Config, Operation, Outcome};
use test_support::raw_http::upload;

const MIB: usize = 1024 * 1024;

/// (status code, JSON body) of a raw reply.
fn parse(reply: &str) -> (u16, serde_json::Value) {
    let code = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"));
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let (Some(start), Some(end)) = (body.find('{'), body.rfind('}')) else {
        panic!("no JSON in {reply:?}");
    };
    let v = serde_json::from_str(&body[start..=end]).unwrap_or_else(|e| panic!("{e}: {reply:?}"));
    (code, v)
}

async fn sim() -> CloudSim {
    CloudSim::start(Config::default().with_token("t0ken"))
        .await
        .unwrap_or_else(|e| panic!("starting cloud-sim: {e}"))
}

fn head(auth: bool, length: Option<usize>) -> String {
    let mut h = String::from(
        "PUT /v1/loadbalancers/6d1e0000-0000-4000-8000-000000000001 HTTP/1.1\r\nHost: cloud-sim\r\nContent-Type: application/json\r\nConnection: close\r\n",
    );
    if auth {
        h.push_str("Authorization: Bearer t0ken\r\n");
    }
    match length {
        Some(n) => h.push_str(&format!("Content-Length: {n}\r\n")),
        None => h.push_str("Transfer-Encoding: chunked\r\n"),
    }
    h.push_str("\r\n");
    h
}

/// An unauthenticated PUT gets 401 before any of its body is read: the
/// client can send only what the socket buffers hold, less than the 16 MiB
/// a server reading up to its limit would take.
#[tokio::test]
async fn unauthenticated_put_is_401_without_reading_the_body() {
    let sim = sim().await;
    let total = 64 * MIB;
    let (sent, reply) = upload(sim.addr(), &head(false, None), total, true).await;
    eprintln!(
        "unauthenticated: the client sent {} of {} MiB before the reply",
        sent / MIB,
        total / MIB
    );
    let (code, body) = parse(&reply);
    assert_eq!(code, 401, "{reply}");
    assert_eq!(body["error"]["code"], "Unauthorized");
    assert!(
        sent < 16 * MIB,
        "the server read the body: {sent} bytes sent"
    );
    // A declared length over the limit: still 401, not 413.
    let (_, reply) = upload(sim.addr(), &head(false, Some(total)), total, false).await;
    assert_eq!(parse(&reply).0, 401, "{reply}");
    let put = sim.stats().operation(Operation::Put);
    assert_eq!(put.count(Outcome::Unauthorized), 2);
}

/// An authorized PUT with a body over 16 MiB: 413 in the contract's JSON
/// error format, whether the length is declared (refused before reading)
/// or the body is chunked (read up to the limit).
#[tokio::test]
async fn body_over_the_limit_is_413_in_json() {
    let sim = sim().await;
    let total = 256 * MIB;
    for length in [Some(total), None] {
        let (sent, reply) = upload(sim.addr(), &head(true, length), total, length.is_none()).await;
        eprintln!(
            "{}: the client sent {} of {} MiB before the reply",
            if length.is_some() {
                "declared"
            } else {
                "chunked"
            },
            sent / MIB,
            total / MIB
        );
        let (code, body) = parse(&reply);
        assert_eq!(code, 413, "{reply}");
        assert_eq!(body["error"]["code"], "RequestTooLarge");
        assert_eq!(
            body["error"]["message"],
            "the request body is larger than the limit of 16777216 bytes"
        );
        assert!(sent < total / 2, "{sent} of {total} bytes sent");
    }
    assert!(sim.inventory().is_empty());
}

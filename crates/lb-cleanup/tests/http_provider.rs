//! The `http` provider against a real cloud-sim started in-process: the
//! happy path and every error mapping of docs/lb-provider-http-contract.md.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloud_sim::{
    CloudSim, Config, ErrorFault, FaultSet, GarbageFault, HangFault, OpFaults, Operation, Outcome,
    RetryAfterFormat,
};
use lb_cleanup::provider::http::{HttpProvider, HttpProviderConfig, USER_AGENT};
use lb_cleanup::provider::{
    LbNode, LbNodeAddress, LbPort, LbRef, LbSpec, LoadBalancerProvider, ProviderError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const UID: &str = "0b4f3c1e-7a2d-4f7e-8c3b-2d9e6a1f5c70";

struct Env {
    sim: CloudSim,
    provider: Arc<dyn LoadBalancerProvider>,
    http: HttpProvider,
    _dir: tempfile::TempDir,
    token_file: std::path::PathBuf,
}

fn write_token(path: &Path, token: &str) {
    // Write-then-rename, as a Secret volume update does.
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{token}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn provider(url: &str, token_file: &Path, request_timeout: Duration) -> HttpProvider {
    HttpProvider::new(
        HttpProviderConfig::new(url)
            .with_token_file(token_file)
            .with_timeouts(Duration::from_secs(5), request_timeout),
    )
    .expect("provider builds")
}

async fn env_with_timeout(request_timeout: Duration) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let sim_token = dir.path().join("sim-token");
    let token_file = dir.path().join("token");
    write_token(&sim_token, "s3cret");
    write_token(&token_file, "s3cret");
    let sim = CloudSim::start(
        Config::default()
            .with_token_file(&sim_token)
            .with_ip_range("198.51.100.0/30".parse().unwrap()),
    )
    .await
    .unwrap();
    let url = sim.url();
    Env {
        provider: Arc::new(provider(&url, &token_file, request_timeout)),
        http: provider(&url, &token_file, request_timeout),
        sim,
        _dir: dir,
        token_file,
    }
}

async fn env() -> Env {
    env_with_timeout(Duration::from_secs(30)).await
}

fn lb_ref() -> LbRef {
    LbRef::new("shop", "web", UID)
}

fn spec() -> LbSpec {
    LbSpec {
        ports: vec![LbPort {
            name: "http".into(),
            protocol: "TCP".into(),
            port: 80,
            node_port: Some(30080),
        }],
        load_balancer_ip: None,
        load_balancer_source_ranges: vec!["0.0.0.0/0".into()],
        session_affinity: Some("None".into()),
        session_affinity_timeout_seconds: None,
        external_traffic_policy: Some("Cluster".into()),
        health_check_node_port: None,
        ip_families: vec!["IPv4".into()],
        annotations: BTreeMap::from([("team".into(), "blue".into())]),
    }
}

fn nodes(names: &[&str]) -> Vec<LbNode> {
    names
        .iter()
        .map(|n| LbNode {
            name: (*n).into(),
            provider_id: format!("sim://{n}"),
            addresses: vec![LbNodeAddress {
                kind: "InternalIP".into(),
                address: "192.0.2.10".into(),
            }],
        })
        .collect()
}

fn error(op: Operation, status: u16, retry_after: Option<(u64, RetryAfterFormat)>) -> FaultSet {
    FaultSet::for_operations(
        1,
        &[op],
        OpFaults {
            error: Some(ErrorFault {
                rate: 1.0,
                status,
                retry_after_seconds: retry_after.map(|r| r.0),
                retry_after_format: retry_after.map(|r| r.1).unwrap_or_default(),
                after_commit: false,
                message: None,
            }),
            ..OpFaults::default()
        },
    )
}

fn garbage(op: Operation, status: u16, body: &str) -> FaultSet {
    FaultSet::for_operations(
        1,
        &[op],
        OpFaults {
            garbage: Some(GarbageFault {
                rate: 1.0,
                status,
                body: body.into(),
                content_type: "application/json".into(),
            }),
            ..OpFaults::default()
        },
    )
}

#[tokio::test]
async fn lifecycle_against_cloud_sim() {
    let e = env().await;
    let p = &e.provider;
    assert_eq!(p.name(), "http");
    assert_eq!(p.get(&lb_ref()).await.unwrap(), None);

    let status = p.ensure(&lb_ref(), &spec(), &nodes(&["n1"])).await.unwrap();
    assert_eq!(status.ingress.len(), 1);
    assert_eq!(status.ingress[0].ip, Some("198.51.100.1".parse().unwrap()));
    assert_eq!(status.ingress[0].ip_mode.as_deref(), Some("VIP"));
    let k = status.to_k8s();
    assert_eq!(k.ingress.unwrap()[0].ip.as_deref(), Some("198.51.100.1"));

    // What the provider sent is what cloud-sim stored.
    let lb = e.sim.get(UID).unwrap();
    assert_eq!(lb.name, "a0b4f3c1e7a2d4f7e8c3b2d9e6a1f5c7");
    assert_eq!(
        (lb.service.namespace.as_str(), lb.service.name.as_str()),
        ("shop", "web")
    );
    assert_eq!(lb.spec.ports[0].node_port, Some(30080));
    assert_eq!(lb.spec.annotations["team"], "blue");
    assert_eq!(lb.spec.load_balancer_source_ranges, ["0.0.0.0/0"]);
    assert_eq!(lb.nodes[0].provider_id, "sim://n1");

    // Idempotent: the same ensure again changes nothing.
    assert_eq!(
        p.ensure(&lb_ref(), &spec(), &nodes(&["n1"])).await.unwrap(),
        status
    );
    assert_eq!(e.sim.get(UID).unwrap().generation, 1);
    assert_eq!(p.get(&lb_ref()).await.unwrap(), Some(status.clone()));

    p.update_hosts(&lb_ref(), &spec(), &nodes(&["n1", "n2"]))
        .await
        .unwrap();
    let names: Vec<_> = e
        .sim
        .get(UID)
        .unwrap()
        .nodes
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, ["n1", "n2"]);

    let inv = e.http.inventory().await.unwrap();
    assert_eq!(inv.len(), 1);
    assert_eq!(inv[0].uid, UID);
    assert_eq!(
        (
            inv[0].service_namespace.as_str(),
            inv[0].service_name.as_str()
        ),
        ("shop", "web")
    );
    assert_eq!(inv[0].status, status);
    assert!(inv[0].created_at.is_some());

    p.ensure_deleted(&lb_ref()).await.unwrap();
    assert!(e.sim.inventory().is_empty());
    assert_eq!(p.get(&lb_ref()).await.unwrap(), None);
    // Deleting what is already gone (404 NotFound) is success.
    p.ensure_deleted(&lb_ref()).await.unwrap();
    let del = e.sim.stats().operation(Operation::Delete);
    assert_eq!(
        (del.count(Outcome::Deleted), del.count(Outcome::NotFound)),
        (1, 1)
    );
}

#[tokio::test]
async fn rate_limits_map_to_retry_after_with_that_delay() {
    let e = env().await;
    e.sim
        .faults()
        .set(error(
            Operation::Put,
            429,
            Some((7, RetryAfterFormat::Seconds)),
        ))
        .unwrap();
    let err = e
        .provider
        .ensure(&lb_ref(), &spec(), &nodes(&["n1"]))
        .await
        .unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)), "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("429"), "{err}");

    // As an HTTP date two minutes ahead.
    e.sim
        .faults()
        .set(error(
            Operation::Put,
            429,
            Some((120, RetryAfterFormat::HttpDate)),
        ))
        .unwrap();
    let err = e
        .provider
        .ensure(&lb_ref(), &spec(), &nodes(&["n1"]))
        .await
        .unwrap_err();
    let after = err
        .retry_after()
        .unwrap_or_else(|| panic!("not RetryAfter: {err}"));
    // The date has one-second resolution and time passes between the two
    // ends; it can only be at most 120 s and stays well above a minute.
    assert!((60..=120).contains(&after.as_secs()), "{after:?}");

    // 503 with Retry-After is an explicit retry-after too.
    e.sim
        .faults()
        .set(error(
            Operation::Get,
            503,
            Some((3, RetryAfterFormat::Seconds)),
        ))
        .unwrap();
    let err = e.provider.get(&lb_ref()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));

    // 429 without Retry-After: retryable with backoff.
    e.sim
        .faults()
        .set(error(Operation::Get, 429, None))
        .unwrap();
    let err = e.provider.get(&lb_ref()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Transient {
                status: Some(429),
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn server_errors_are_transient_and_retryable() {
    let e = env().await;
    for (op, status) in [
        (Operation::Put, 500),
        (Operation::Delete, 503),
        (Operation::Get, 502),
    ] {
        e.sim.faults().set(error(op, status, None)).unwrap();
        let err = match op {
            Operation::Put => e
                .provider
                .ensure(&lb_ref(), &spec(), &[])
                .await
                .unwrap_err(),
            Operation::Delete => e.provider.ensure_deleted(&lb_ref()).await.unwrap_err(),
            _ => e.provider.get(&lb_ref()).await.unwrap_err(),
        };
        assert_eq!(
            err,
            ProviderError::Transient {
                status: Some(status),
                message: err.to_string()
            }
        );
        assert!(err.is_retryable());
        // The message says which call failed and what the server said.
        let msg = err.to_string();
        assert!(msg.contains(&format!("/v1/loadbalancers/{UID}")), "{msg}");
        assert!(msg.contains("cloud-sim injected fault"), "{msg}");
    }
    // Nothing was deleted or created behind the errors.
    assert!(e.sim.inventory().is_empty());
}

#[tokio::test]
async fn conflicts_map_to_conflict() {
    let e = env().await;
    let mut want = spec();
    want.load_balancer_ip = Some("198.51.100.2".parse().unwrap());
    e.provider.ensure(&lb_ref(), &want, &[]).await.unwrap();
    let other = LbRef::new("shop", "other", "uid-other");
    let err = e.provider.ensure(&other, &want, &[]).await.unwrap_err();
    assert!(matches!(err, ProviderError::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("198.51.100.2 is in use"), "{err}");
    assert!(err.is_retryable());

    e.sim
        .faults()
        .set(error(Operation::Hosts, 409, None))
        .unwrap();
    let err = e
        .provider
        .update_hosts(&lb_ref(), &spec(), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Conflict { .. }), "{err}");
}

#[tokio::test]
async fn exhaustion_and_invalid_requests_are_reported_with_the_server_message() {
    let e = env().await;
    // The /30 has two addresses.
    for uid in ["u1", "u2"] {
        e.provider
            .ensure(&LbRef::new("ns", uid, uid), &spec(), &[])
            .await
            .unwrap();
    }
    let err = e
        .provider
        .ensure(&LbRef::new("ns", "u3", "u3"), &spec(), &[])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Transient {
                status: Some(507),
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("AddressPoolExhausted"), "{err}");

    let mut bad = spec();
    bad.ports[0].protocol = "HTTP".into();
    let err = e.provider.ensure(&lb_ref(), &bad, &[]).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::InvalidRequest { status: 400, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("\"HTTP\""), "{err}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn hosts_of_a_missing_load_balancer_is_not_found() {
    let e = env().await;
    let err = e
        .provider
        .update_hosts(&lb_ref(), &spec(), &nodes(&["n1"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn unauthorized_names_the_token_file_and_rotation_is_picked_up() {
    let e = env().await;
    e.provider.ensure(&lb_ref(), &spec(), &[]).await.unwrap();

    write_token(&e.token_file, "stale");
    let err = e.provider.get(&lb_ref()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Unauthorized { status: 401, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&e.token_file.display().to_string()),
        "{err}"
    );
    assert!(!err.is_retryable());

    // The Secret is rotated on both sides: the provider re-reads its file.
    let sim_token = e.token_file.with_file_name("sim-token");
    write_token(&sim_token, "rotated");
    write_token(&e.token_file, "rotated");
    assert!(e.provider.get(&lb_ref()).await.unwrap().is_some());

    // A token file that disappears or empties is a clear error naming it.
    std::fs::remove_file(&e.token_file).unwrap();
    let err = e.provider.get(&lb_ref()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Config { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&e.token_file.display().to_string()),
        "{err}"
    );
    std::fs::write(&e.token_file, "\n").unwrap();
    let err = e.provider.get(&lb_ref()).await.unwrap_err();
    assert!(err.to_string().contains("is empty"), "{err}");
}

#[tokio::test]
async fn a_missing_token_file_fails_construction_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-token");
    let err =
        HttpProvider::new(HttpProviderConfig::new("http://127.0.0.1:1/").with_token_file(&path))
            .unwrap_err();
    assert!(matches!(err, ProviderError::Config { .. }), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[tokio::test]
async fn a_hang_is_a_timeout_error() {
    let e = env_with_timeout(Duration::from_millis(500)).await;
    e.sim
        .faults()
        .set(FaultSet::for_operations(
            1,
            &[Operation::Delete],
            OpFaults {
                hang: Some(HangFault {
                    rate: 1.0,
                    max_ms: None,
                    after_commit: false,
                }),
                ..OpFaults::default()
            },
        ))
        .unwrap();
    let err = e.provider.ensure_deleted(&lb_ref()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("no reply within 500ms"), "{err}");
    assert_eq!(e.sim.stats().operation(Operation::Delete).hung, 1);
}

#[tokio::test]
async fn a_lost_reply_is_recovered_by_the_idempotent_retry() {
    let e = env().await;
    let mut set = error(Operation::Put, 500, None);
    if let Some(f) = set.operations.get_mut(&Operation::Put) {
        f.error.as_mut().unwrap().after_commit = true;
    }
    e.sim.faults().set(set).unwrap();
    assert!(e.provider.ensure(&lb_ref(), &spec(), &[]).await.is_err());
    assert_eq!(
        e.sim.inventory().len(),
        1,
        "created despite the error reply"
    );
    e.sim.faults().clear();
    let status = e.provider.ensure(&lb_ref(), &spec(), &[]).await.unwrap();
    assert_eq!(status.ingress[0].ip, Some("198.51.100.1".parse().unwrap()));
    assert_eq!(
        e.sim.inventory().len(),
        1,
        "the retry did not create a second one"
    );
}

#[tokio::test]
async fn garbage_replies_are_invalid_reply_errors_quoting_the_problem() {
    let e = env().await;
    let uid_json = |status: &str| format!(r#"{{"uid": "{UID}", "name": "x", "status": {status}}}"#);
    let cases: Vec<(Operation, u16, String, &str)> = vec![
        (
            Operation::Put,
            200,
            "this is not JSON".into(),
            "this is not JSON",
        ),
        (
            Operation::Put,
            200,
            uid_json(r#"{"ingress": [{"ip": "999.1.2.3"}]}"#),
            "status.ingress[0].ip \"999.1.2.3\" is not an IP address",
        ),
        (
            Operation::Put,
            201,
            r#"{"uid": "someone-else", "status": {"ingress": []}}"#.into(),
            "not \"0b4f3c1e",
        ),
        (
            Operation::Put,
            200,
            format!(r#"{{"uid": "{UID}"}}"#),
            "missing field `status`",
        ),
        (
            Operation::Put,
            204,
            String::new(),
            "PUT must answer 200 or 201",
        ),
        (
            Operation::Get,
            200,
            uid_json(r#"{"ingress": [{}]}"#),
            "neither ip nor hostname",
        ),
        (
            Operation::Get,
            302,
            String::new(),
            "302 Found is not a status",
        ),
    ];
    for (op, status, body, needle) in cases {
        e.sim.faults().set(garbage(op, status, &body)).unwrap();
        let err = match op {
            Operation::Put => e
                .provider
                .ensure(&lb_ref(), &spec(), &[])
                .await
                .unwrap_err(),
            _ => e.provider.get(&lb_ref()).await.map(|_| ()).unwrap_err(),
        };
        assert!(
            matches!(err, ProviderError::InvalidReply { .. }),
            "{body:?}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains(needle), "{body:?}: {msg}");
        assert!(!err.is_retryable());
    }
}

#[tokio::test]
async fn a_404_without_the_not_found_code_is_never_taken_for_gone() {
    let e = env().await;
    e.provider.ensure(&lb_ref(), &spec(), &[]).await.unwrap();
    // A proxy or a wrong base path answers 404 with some page.
    e.sim
        .faults()
        .set(garbage(Operation::Delete, 404, "<html>Not Found</html>"))
        .unwrap();
    let err = e.provider.ensure_deleted(&lb_ref()).await.unwrap_err();
    assert!(matches!(err, ProviderError::InvalidReply { .. }), "{err}");
    assert!(
        err.to_string().contains("is the endpoint URL right?"),
        "{err}"
    );
    e.sim
        .faults()
        .set(garbage(Operation::Get, 404, ""))
        .unwrap();
    assert!(e.provider.get(&lb_ref()).await.is_err());

    // A provider pointed at the wrong path of a real server gets the same.
    let wrong = provider(
        &format!("{}/api", e.sim.url()),
        &e.token_file,
        Duration::from_secs(30),
    );
    e.sim.faults().clear();
    let err = wrong.ensure_deleted(&lb_ref()).await.unwrap_err();
    assert!(matches!(err, ProviderError::InvalidReply { .. }), "{err}");
    assert_eq!(e.sim.inventory().len(), 1);
}

#[tokio::test]
async fn deletion_in_progress_is_retry_after() {
    let e = env().await;
    e.sim
        .faults()
        .set(error(
            Operation::Delete,
            202,
            Some((4, RetryAfterFormat::Seconds)),
        ))
        .unwrap();
    let err = e.provider.ensure_deleted(&lb_ref()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(4)), "{err}");
    e.sim
        .faults()
        .set(error(Operation::Delete, 202, None))
        .unwrap();
    let err = e.provider.ensure_deleted(&lb_ref()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(5)), "{err}");
}

#[tokio::test]
async fn implemented_elsewhere_is_recognised_by_its_code() {
    let e = env().await;
    e.sim
        .faults()
        .set(garbage(
            Operation::Put,
            501,
            r#"{"error": {"code": "ImplementedElsewhere", "message": "another controller owns LBs"}}"#,
        ))
        .unwrap();
    let err = e
        .provider
        .ensure(&lb_ref(), &spec(), &[])
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::ImplementedElsewhere);
}

#[tokio::test]
async fn connection_refused_is_transient_and_names_the_url() {
    // A port that was free a moment ago: nobody listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p =
        HttpProvider::new(HttpProviderConfig::new(format!("http://127.0.0.1:{port}/"))).unwrap();
    let err = p.get(&lb_ref()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Transient { status: None, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn requests_carry_user_agent_bearer_token_and_json() {
    // A one-shot server that records the request head.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&buf).contains("\r\n\r\n") && Instant::now() < deadline {
            let n = sock.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = r#"{"error":{"code":"NotFound","message":"gone"}}"#;
        let reply = format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(reply.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&buf).to_lowercase()
    });
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    write_token(&token, "abc123");
    let p = provider(&format!("http://{addr}"), &token, Duration::from_secs(30));
    assert_eq!(p.get(&lb_ref()).await.unwrap(), None);
    let head = server.await.unwrap();
    assert!(
        head.starts_with(&format!("get /v1/loadbalancers/{UID} http/1.1")),
        "{head}"
    );
    assert!(
        head.contains(&format!("user-agent: {}", USER_AGENT.to_lowercase())),
        "{head}"
    );
    assert!(head.contains("authorization: bearer abc123"), "{head}");
    assert!(head.contains("accept: application/json"), "{head}");
}

#[tokio::test]
async fn a_timeout_after_the_cloud_acted_is_recovered_by_the_retry() {
    let e = env_with_timeout(Duration::from_millis(500)).await;
    e.sim
        .faults()
        .set(FaultSet::for_operations(
            1,
            &[Operation::Put],
            OpFaults {
                hang: Some(HangFault {
                    rate: 1.0,
                    max_ms: None,
                    after_commit: true,
                }),
                ..OpFaults::default()
            },
        ))
        .unwrap();
    let err = e
        .provider
        .ensure(&lb_ref(), &spec(), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err}");
    assert!(
        err.to_string().contains("may or may not have taken effect"),
        "{err}"
    );
    // The cloud created it although the client never heard back.
    let deadline = Instant::now() + Duration::from_secs(30);
    while e.sim.inventory().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the load balancer never appeared"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    e.sim.faults().clear();
    // The retry, with a timeout a loaded machine cannot hit.
    let patient = provider(&e.sim.url(), &e.token_file, Duration::from_secs(30));
    let status = patient.ensure(&lb_ref(), &spec(), &[]).await.unwrap();
    assert_eq!(status.ingress[0].ip, Some("198.51.100.1".parse().unwrap()));
    assert_eq!(e.sim.inventory().len(), 1);
    assert_eq!(e.sim.get(UID).unwrap().generation, 1);
}

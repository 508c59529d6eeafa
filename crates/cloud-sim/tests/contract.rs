//! Contract tests: cloud-sim started in-process, driven over HTTP exactly as
//! docs/lb-provider-http-contract.md describes.

mod common;

use std::time::{Duration, Instant};

use cloud_sim::{
    CloudSim, Config, ErrorFault, FaultSet, GarbageFault, HangFault, LatencyFault, OpFaults,
    Operation, Outcome, RetryAfterFormat,
};
use common::{Api, ensure_body, ingress_ip};
use reqwest::Method;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

async fn sim_with(config: Config) -> (CloudSim, Api) {
    let sim = CloudSim::start(config).await.expect("cloud-sim starts");
    let api = Api::new(sim.url(), Some("t0ken"));
    (sim, api)
}

fn config() -> Config {
    Config::default()
        .with_token("t0ken")
        .with_ip_range("198.51.100.10-198.51.100.12".parse().unwrap())
}

fn error_fault(rate: f64, status: u16) -> ErrorFault {
    ErrorFault {
        rate,
        status,
        retry_after_seconds: None,
        retry_after_format: RetryAfterFormat::Seconds,
        after_commit: false,
        message: None,
    }
}

fn only(op: Operation, faults: OpFaults) -> FaultSet {
    FaultSet::for_operations(1, &[op], faults)
}

#[tokio::test]
async fn put_creates_then_is_idempotent_and_updates_in_place() {
    let (sim, api) = sim_with(config()).await;
    let body = ensure_body("default", "web", "uid-1");

    let (status, lb) = api.put("uid-1", &body).await;
    assert_eq!(status, 201, "{lb}");
    assert_eq!(ingress_ip(&lb), "198.51.100.10");
    assert_eq!(lb["uid"], "uid-1");
    assert_eq!(
        lb["service"],
        json!({"namespace": "default", "name": "web", "uid": "uid-1"})
    );
    assert_eq!(lb["generation"], 1);

    // The same PUT again (a retry after a lost reply): 200, same address,
    // nothing changed.
    let (status, again) = api.put("uid-1", &body).await;
    assert_eq!(status, 200);
    assert_eq!(again, lb);

    // A changed spec updates in place and keeps the address.
    let mut changed = body.clone();
    changed["spec"]["ports"][0]["port"] = json!(8080);
    let (status, updated) = api.put("uid-1", &changed).await;
    assert_eq!(status, 200);
    assert_eq!(updated["generation"], 2);
    assert_eq!(updated["spec"]["ports"][0]["port"], 8080);
    assert_eq!(ingress_ip(&updated), "198.51.100.10");

    let (status, got) = api.get("uid-1").await;
    assert_eq!((status, &got), (200, &updated));
    assert_eq!(sim.inventory().len(), 1);

    let put = sim.stats().operation(Operation::Put);
    assert_eq!(put.total, 3);
    assert_eq!(put.count(Outcome::Created), 1);
    assert_eq!(put.count(Outcome::Unchanged), 1);
    assert_eq!(put.count(Outcome::Updated), 1);
}

#[tokio::test]
async fn delete_releases_and_missing_is_404_not_found() {
    let (sim, api) = sim_with(config()).await;
    api.put("uid-1", &ensure_body("default", "a", "uid-1"))
        .await;
    let (status, body) = api.delete("uid-1").await;
    assert_eq!((status, body), (204, Value::Null));

    // GET and DELETE of a missing load balancer: 404 with code NotFound.
    let (status, body) = api.get("uid-1").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "NotFound", "{body}");
    let (status, body) = api.delete("uid-1").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "NotFound", "{body}");
    assert!(sim.inventory().is_empty());

    // An unknown path is a 404 too, but never with code NotFound, so that a
    // client cannot mistake a wrong endpoint for "already deleted".
    let (status, body) = api
        .admin(Method::DELETE, "/v2/loadbalancers/uid-1", None)
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "UnknownPath", "{body}");

    let del = sim.stats().operation(Operation::Delete);
    assert_eq!(del.count(Outcome::Deleted), 1);
    assert_eq!(del.count(Outcome::NotFound), 1);
}

#[tokio::test]
async fn addresses_are_allocated_released_and_exhausted() {
    let (sim, api) = sim_with(config()).await;
    let mut ips = Vec::new();
    for i in 0..3 {
        let uid = format!("uid-{i}");
        let (status, lb) = api
            .put(&uid, &ensure_body("ns", &format!("s{i}"), &uid))
            .await;
        assert_eq!(status, 201, "{lb}");
        ips.push(ingress_ip(&lb));
    }
    assert_eq!(ips, ["198.51.100.10", "198.51.100.11", "198.51.100.12"]);
    assert_eq!(sim.stats().addresses.allocated, 3);

    // Range exhausted: 507 with a message that names the range.
    let (status, body) = api.put("uid-3", &ensure_body("ns", "s3", "uid-3")).await;
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"]["code"], "AddressPoolExhausted");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("198.51.100.10-198.51.100.12") && msg.contains("3 of 3"),
        "{msg}"
    );
    assert_eq!(
        sim.stats()
            .operation(Operation::Put)
            .count(Outcome::Exhausted),
        1
    );

    // Released on delete, and reused.
    assert_eq!(api.delete("uid-1").await.0, 204);
    let (status, lb) = api.put("uid-3", &ensure_body("ns", "s3", "uid-3")).await;
    assert_eq!(status, 201);
    assert_eq!(ingress_ip(&lb), "198.51.100.11");
}

#[tokio::test]
async fn requested_load_balancer_ip_is_honoured_or_refused() {
    let (_sim, api) = sim_with(config()).await;
    let mut body = ensure_body("ns", "want", "uid-w");
    body["spec"]["loadBalancerIP"] = json!("198.51.100.12");
    let (status, lb) = api.put("uid-w", &body).await;
    assert_eq!(status, 201, "{lb}");
    assert_eq!(ingress_ip(&lb), "198.51.100.12");

    // Taken by another load balancer: 409 IPInUse naming the holder.
    let mut other = ensure_body("ns", "other", "uid-o");
    other["spec"]["loadBalancerIP"] = json!("198.51.100.12");
    let (status, err) = api.put("uid-o", &other).await;
    assert_eq!(status, 409, "{err}");
    assert_eq!(err["error"]["code"], "IPInUse");
    assert!(err["error"]["message"].as_str().unwrap().contains("uid-w"));

    // Outside the range, or not IPv4: 400.
    other["spec"]["loadBalancerIP"] = json!("192.0.2.1");
    let (status, err) = api.put("uid-o", &other).await;
    assert_eq!(status, 400, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside the address range")
    );
    other["spec"]["loadBalancerIP"] = json!("2001:db8::1");
    assert_eq!(api.put("uid-o", &other).await.0, 400);

    // Changing the requested address moves the load balancer and frees the
    // old one.
    body["spec"]["loadBalancerIP"] = json!("198.51.100.10");
    let (status, lb) = api.put("uid-w", &body).await;
    assert_eq!(status, 200);
    assert_eq!(ingress_ip(&lb), "198.51.100.10");
    other["spec"]["loadBalancerIP"] = json!("198.51.100.12");
    let (status, lb) = api.put("uid-o", &other).await;
    assert_eq!(status, 201, "{lb}");
    assert_eq!(ingress_ip(&lb), "198.51.100.12");
}

#[tokio::test]
async fn invalid_requests_get_400_with_the_reason() {
    let (sim, api) = sim_with(config()).await;
    let body = ensure_body("ns", "s", "uid-1");
    let (status, err) = api.put("uid-2", &body).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("differs from the uid"),
        "{err}"
    );

    let mut no_ports = body.clone();
    no_ports["spec"]["ports"] = json!([]);
    let (status, err) = api.put("uid-1", &no_ports).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (400, Some("InvalidRequest"))
    );

    let mut bad_range = body.clone();
    bad_range["spec"]["loadBalancerSourceRanges"] = json!(["10.0.0.0/40"]);
    let (status, err) = api.put("uid-1", &bad_range).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("10.0.0.0/40")
    );

    let r = api
        .req(Method::PUT, "/v1/loadbalancers/uid-1")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (status, err) = common::split(r).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid"),
        "{err}"
    );

    // The same UID cannot move to another Service.
    assert_eq!(api.put("uid-1", &body).await.0, 201);
    let (status, err) = api
        .put("uid-1", &ensure_body("ns", "renamed", "uid-1"))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("ServiceMismatch"))
    );
    assert_eq!(sim.inventory().len(), 1);
}

#[tokio::test]
async fn hosts_replace_the_node_list() {
    let (sim, api) = sim_with(config()).await;
    api.put("uid-1", &ensure_body("ns", "s", "uid-1")).await;
    let nodes = json!([
        {"name": "n1", "providerID": "sim://n1", "addresses": [{"type": "InternalIP", "address": "192.0.2.1"}]},
        {"name": "n2", "providerID": "sim://n2", "addresses": []}
    ]);
    let (status, lb) = api.hosts("uid-1", nodes.clone()).await;
    assert_eq!(status, 200, "{lb}");
    assert_eq!(lb["nodes"], nodes);
    assert_eq!(lb["generation"], 2);
    assert_eq!(sim.get("uid-1").unwrap().nodes.len(), 2);
    let (status, again) = api.hosts("uid-1", nodes.clone()).await;
    assert_eq!((status, &again["generation"]), (200, &json!(2)));

    let (status, err) = api.hosts("uid-missing", nodes).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (404, Some("NotFound"))
    );
    let (status, _) = api
        .hosts(
            "uid-1",
            json!([{"name": "x", "addresses": [{"type": "Hostname", "address": "x"}]}]),
        )
        .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn inventory_lists_every_load_balancer_and_orphans_are_countable() {
    let (sim, api) = sim_with(config()).await;
    for i in 0..3 {
        let uid = format!("uid-{i}");
        api.put(&uid, &ensure_body("team", &format!("svc-{i}"), &uid))
            .await;
    }
    let (status, inv) = api.list().await;
    assert_eq!(status, 200);
    let items = inv["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for item in items {
        assert_eq!(item["service"]["namespace"], "team");
        assert!(item["createdAt"].as_str().unwrap().ends_with('Z'), "{item}");
        assert_eq!(item["nodes"][0]["name"], "node-a");
        assert!(item["status"]["ingress"][0]["ip"].is_string());
    }
    let orphans = sim.orphans(["uid-0", "uid-2"]);
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].service.name, "svc-1");
    assert_eq!(sim.stats().operation(Operation::List).count(Outcome::Ok), 1);
}

#[tokio::test]
async fn bearer_token_is_required_except_for_healthz() {
    let (sim, api) = sim_with(config()).await;
    let anon = Api::new(sim.url(), None);
    let wrong = Api::new(sim.url(), Some("nope"));
    let body = ensure_body("ns", "s", "uid-1");
    for a in [&anon, &wrong] {
        let r = a
            .req(Method::PUT, "/v1/loadbalancers/uid-1")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let (_, err) = common::split(r).await;
        assert_eq!(err["error"]["code"], "Unauthorized");
        assert_eq!(a.admin(Method::GET, "/_sim/stats", None).await.0, 401);
    }
    assert!(sim.inventory().is_empty());
    let health = anon.req(Method::GET, "/healthz").send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(api.put("uid-1", &body).await.0, 201);
    assert_eq!(
        sim.stats()
            .operation(Operation::Put)
            .count(Outcome::Unauthorized),
        2
    );
}

#[tokio::test]
async fn state_survives_a_restart_and_keeps_addresses_taken() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    let (sim, api) = sim_with(config().with_state_file(&file)).await;
    assert!(file.exists(), "the state file is created at start");
    api.put("uid-1", &ensure_body("ns", "a", "uid-1")).await;
    api.put("uid-2", &ensure_body("ns", "b", "uid-2")).await;
    api.delete("uid-1").await;
    let before = sim.inventory();
    assert!(sim.stats().state_writes >= 3);
    sim.shutdown().await.unwrap();

    let (sim, api) = sim_with(config().with_state_file(&file)).await;
    assert_eq!(sim.inventory(), before);
    // uid-2 still holds .11; a new load balancer gets the freed .10 and then
    // .12, never .11.
    let (_, lb) = api.put("uid-3", &ensure_body("ns", "c", "uid-3")).await;
    assert_eq!(ingress_ip(&lb), "198.51.100.10");
    let (_, lb) = api.put("uid-4", &ensure_body("ns", "d", "uid-4")).await;
    assert_eq!(ingress_ip(&lb), "198.51.100.12");
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["state.json"]);
}

#[tokio::test]
async fn a_corrupt_state_file_is_an_error_naming_it_and_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    for content in [
        "{\"format\": \"cloud-sim-state/v1\", \"loadBalancers\": [",
        "",
        "{\"format\": \"something-else\", \"loadBalancers\": []}",
    ] {
        std::fs::write(&file, content).unwrap();
        let err = CloudSim::start(config().with_state_file(&file))
            .await
            .expect_err("a corrupt state file stops the start");
        let msg = err.to_string();
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(msg.contains("corrupt"), "{msg}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), content);
    }
}

#[tokio::test]
async fn two_load_balancers_claiming_one_address_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    let (sim, api) = sim_with(config().with_state_file(&file)).await;
    api.put("uid-1", &ensure_body("ns", "a", "uid-1")).await;
    api.put("uid-2", &ensure_body("ns", "b", "uid-2")).await;
    sim.shutdown().await.unwrap();
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("198.51.100.11", "198.51.100.10");
    std::fs::write(&file, text).unwrap();
    let msg = CloudSim::start(config().with_state_file(&file))
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("198.51.100.10 is held by both"), "{msg}");
}

#[tokio::test]
async fn injected_errors_with_each_status() {
    let (sim, api) = sim_with(config()).await;
    let body = ensure_body("ns", "s", "uid-1");

    let mut f = error_fault(1.0, 503);
    f.retry_after_seconds = Some(7);
    sim.faults()
        .set(only(
            Operation::Put,
            OpFaults {
                error: Some(f),
                ..Default::default()
            },
        ))
        .unwrap();
    let r = api
        .req(Method::PUT, "/v1/loadbalancers/uid-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "7");
    let (_, err) = common::split(r).await;
    assert_eq!(err["error"]["code"], "InjectedFault");
    assert!(
        sim.inventory().is_empty(),
        "the operation was not carried out"
    );

    let mut f = error_fault(1.0, 429);
    f.retry_after_seconds = Some(120);
    f.retry_after_format = RetryAfterFormat::HttpDate;
    sim.faults()
        .set(only(
            Operation::Put,
            OpFaults {
                error: Some(f),
                ..Default::default()
            },
        ))
        .unwrap();
    let r = api
        .req(Method::PUT, "/v1/loadbalancers/uid-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let date = r.headers()["retry-after"].to_str().unwrap().to_owned();
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(&date)
        .unwrap();
    let ahead = at.duration_since(jiff::Timestamp::now()).as_secs();
    assert!((60..=121).contains(&ahead), "{date} is {ahead}s ahead");
    assert_eq!(common::split(r).await.1["error"]["code"], "RateLimited");

    for status in [500, 409] {
        sim.faults()
            .set(only(
                Operation::Put,
                OpFaults {
                    error: Some(error_fault(1.0, status)),
                    ..Default::default()
                },
            ))
            .unwrap();
        assert_eq!(api.put("uid-1", &body).await.0, status);
    }

    // after_commit: the load balancer is created, the reply is an error.
    let mut f = error_fault(1.0, 500);
    f.after_commit = true;
    sim.faults()
        .set(only(
            Operation::Put,
            OpFaults {
                error: Some(f),
                ..Default::default()
            },
        ))
        .unwrap();
    assert_eq!(api.put("uid-1", &body).await.0, 500);
    assert_eq!(sim.inventory().len(), 1);

    // Faults of one operation leave the others alone; clearing ends them.
    assert_eq!(api.get("uid-1").await.0, 200);
    sim.faults().clear();
    assert_eq!(api.put("uid-1", &body).await.0, 200);
    let put = sim.stats().operation(Operation::Put);
    assert_eq!(put.count(Outcome::InjectedError), 5);
}

#[tokio::test]
async fn latency_delays_calls() {
    let (sim, api) = sim_with(config()).await;
    sim.faults()
        .set(only(
            Operation::Get,
            OpFaults {
                latency: Some(LatencyFault {
                    rate: 1.0,
                    min_ms: 300,
                    max_ms: None,
                }),
                ..Default::default()
            },
        ))
        .unwrap();
    let started = Instant::now();
    assert_eq!(api.get("uid-x").await.0, 404);
    // A lower bound only: a sleep never ends early.
    assert!(started.elapsed() >= Duration::from_millis(300));
    let get = sim.stats().operation(Operation::Get);
    assert_eq!((get.delayed, get.count(Outcome::NotFound)), (1, 1));
    assert_eq!(sim.stats().operation(Operation::Put).delayed, 0);
}

#[tokio::test]
async fn a_hang_never_answers_until_cleared() {
    let (sim, api) = sim_with(config()).await;
    api.put("uid-1", &ensure_body("ns", "s", "uid-1")).await;
    sim.faults()
        .set(only(
            Operation::Get,
            OpFaults {
                hang: Some(HangFault {
                    rate: 1.0,
                    max_ms: None,
                    after_commit: false,
                }),
                ..Default::default()
            },
        ))
        .unwrap();

    // A client with a timeout gives up.
    let err = api
        .req(Method::GET, "/v1/loadbalancers/uid-1")
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .expect_err("a hung call does not answer");
    assert!(err.is_timeout(), "{err}");

    // A patient client gets its answer once the faults are cleared.
    let pending = tokio::spawn({
        let req = api.req(Method::GET, "/v1/loadbalancers/uid-1");
        async move { req.send().await.map(|r| r.status().as_u16()) }
    });
    let deadline = Instant::now() + DEADLINE;
    while sim.stats().operation(Operation::Get).hung < 2 {
        assert!(Instant::now() < deadline, "the second GET never hung");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!pending.is_finished());
    let (status, _) = api.admin(Method::DELETE, "/_sim/faults", None).await;
    assert_eq!(status, 200);
    let status = tokio::time::timeout(DEADLINE, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_hang_with_max_answers_504_and_after_commit_applies_first() {
    let (sim, api) = sim_with(config()).await;
    sim.faults()
        .set(only(
            Operation::Put,
            OpFaults {
                hang: Some(HangFault {
                    rate: 1.0,
                    max_ms: Some(200),
                    after_commit: true,
                }),
                ..Default::default()
            },
        ))
        .unwrap();
    let (status, err) = api.put("uid-1", &ensure_body("ns", "s", "uid-1")).await;
    assert_eq!(status, 504, "{err}");
    assert_eq!(err["error"]["code"], "HangTimeout");
    assert_eq!(
        sim.inventory().len(),
        1,
        "after_commit created it before hanging"
    );
    assert_eq!(
        sim.stats()
            .operation(Operation::Put)
            .count(Outcome::HangTimeout),
        1
    );
}

#[tokio::test]
async fn shutdown_releases_hanging_calls() {
    let (sim, api) = sim_with(config()).await;
    sim.faults()
        .set(only(
            Operation::Get,
            OpFaults {
                hang: Some(HangFault {
                    rate: 1.0,
                    max_ms: None,
                    after_commit: false,
                }),
                ..Default::default()
            },
        ))
        .unwrap();
    let pending = tokio::spawn({
        let req = api.req(Method::GET, "/v1/loadbalancers/uid-1");
        async move { req.send().await.map(|r| r.status().as_u16()) }
    });
    let deadline = Instant::now() + DEADLINE;
    while sim.stats().operation(Operation::Get).hung < 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(DEADLINE, sim.shutdown())
        .await
        .unwrap()
        .unwrap();
    let status = tokio::time::timeout(DEADLINE, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(status, 503);
}

#[tokio::test]
async fn garbage_replies_are_sent_verbatim() {
    let (sim, api) = sim_with(config()).await;
    sim.faults()
        .set(only(
            Operation::Get,
            OpFaults {
                garbage: Some(GarbageFault {
                    rate: 1.0,
                    status: 200,
                    body: "<html>proxy error</html>".into(),
                    content_type: "text/html".into(),
                }),
                ..Default::default()
            },
        ))
        .unwrap();
    let r = api
        .req(Method::GET, "/v1/loadbalancers/uid-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/html");
    assert_eq!(r.text().await.unwrap(), "<html>proxy error</html>");
    assert_eq!(
        sim.stats()
            .operation(Operation::Get)
            .count(Outcome::InjectedGarbage),
        1
    );
}

async fn statuses_with_seed(seed: u64) -> Vec<u16> {
    let (_sim, api) = sim_with(config()).await;
    let mut set = only(
        Operation::Put,
        OpFaults {
            error: Some(error_fault(0.5, 503)),
            ..Default::default()
        },
    );
    set.seed = seed;
    // Through the admin API, as a test in another process would.
    let (status, echoed) = api
        .admin(
            Method::PUT,
            "/_sim/faults",
            Some(serde_json::to_value(&set).unwrap()),
        )
        .await;
    assert_eq!(status, 200, "{echoed}");
    assert_eq!(echoed["seed"], seed);
    let body = ensure_body("ns", "s", "uid-1");
    let mut out = Vec::new();
    for _ in 0..40 {
        out.push(api.put("uid-1", &body).await.0);
    }
    out
}

#[tokio::test]
async fn faults_are_deterministic_with_a_seed() {
    let a = statuses_with_seed(11).await;
    let b = statuses_with_seed(11).await;
    assert_eq!(a, b);
    assert!(a.contains(&503) && a.iter().any(|s| *s != 503), "{a:?}");
    let c = statuses_with_seed(12).await;
    assert_ne!(a, c);
}

#[tokio::test]
async fn admin_api_sets_one_operation_and_rejects_bad_configurations() {
    let (sim, api) = sim_with(config()).await;
    let (status, set) = api
        .admin(
            Method::PUT,
            "/_sim/faults/delete",
            Some(json!({"error": {"rate": 1.0, "status": 500}})),
        )
        .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["operations"]["delete"]["error"]["status"], 500);
    assert_eq!(sim.faults().get().operations.len(), 1);
    assert_eq!(api.delete("uid-1").await.0, 500);

    let (status, err) = api
        .admin(
            Method::PUT,
            "/_sim/faults/delete",
            Some(json!({"error": {"rate": 2.0}})),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("delete.error.rate is 2"),
        "{err}"
    );
    let (status, err) = api
        .admin(
            Method::PUT,
            "/_sim/faults",
            Some(json!({"operations": {"put": {"latnecy": {}}}})),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("latnecy"),
        "{err}"
    );
    assert_eq!(
        api.admin(Method::PUT, "/_sim/faults/patch", Some(json!({})))
            .await
            .0,
        404
    );

    let (status, stats) = api.admin(Method::GET, "/_sim/stats", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        stats["operations"]["delete"]["outcomes"]["injectedError"],
        1
    );
    assert_eq!(stats["addresses"]["capacity"], 3);
    assert_eq!(api.admin(Method::DELETE, "/_sim/stats", None).await.0, 204);
    assert_eq!(sim.stats().operation(Operation::Delete).total, 0);
    let (_, set) = api.admin(Method::DELETE, "/_sim/faults", None).await;
    assert_eq!(set["operations"], json!({}));
    assert_eq!(api.delete("uid-1").await.0, 404);
}

#[tokio::test]
async fn token_file_rotation_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "first\n").unwrap();
    let sim = CloudSim::start(Config::default().with_token_file(&token))
        .await
        .unwrap();
    let first = Api::new(sim.url(), Some("first"));
    let second = Api::new(sim.url(), Some("second"));
    assert_eq!(first.list().await.0, 200);
    assert_eq!(second.list().await.0, 401);
    std::fs::write(&token, "second\n").unwrap();
    assert_eq!(second.list().await.0, 200);
    assert_eq!(first.list().await.0, 401);
}

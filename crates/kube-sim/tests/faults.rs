//! Fault injection and accounting (kube-sim only): the library API and the
//! `/_sim` admin API.

mod common;

use std::time::Duration;

use common::{Target, raw, status};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{FaultAction, FaultRule, KubeSim, RequestFilter, SimConfig};
use serde_json::{Value, json};

async fn sim() -> (KubeSim, kube::Client) {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let c = sim.client().await;
    (sim, c)
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": "b"}})).unwrap()
}

#[tokio::test]
async fn error_rules_fail_matching_requests_with_real_status_bodies() {
    let (sim, c) = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let id = sim.faults().add(
        FaultRule::error(500)
            .verb("create")
            .resource("configmaps")
            .times(1),
    );
    let e = status(
        api.create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    assert_eq!(sim.faults().rules()[0].injected, 1);
    assert!(sim.faults().remove(id));
    sim.faults()
        .add(FaultRule::error(409).verb("update").resource("configmaps"));
    let got = api.get("a").await.unwrap();
    let e = status(
        api.replace("a", &PostParams::default(), &got)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    sim.faults().clear();
    // 429 carries Retry-After (seen raw: kube-rs would retry it).
    sim.faults().add(
        FaultRule::error(429)
            .verb("get")
            .resource("configmaps")
            .times(1),
    );
    let (code, body) = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 429, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["reason"], "TooManyRequests");
    assert_eq!(v["details"]["retryAfterSeconds"], 1);
}

#[tokio::test]
async fn fractions_are_deterministic_for_a_seed() {
    let run = || async {
        let sim = KubeSim::start(SimConfig {
            seed: 42,
            ..Default::default()
        })
        .await
        .unwrap();
        sim.faults().add(
            FaultRule::error(503)
                .verb("get")
                .resource("configmaps")
                .fraction(0.5),
        );
        let mut codes = Vec::new();
        for _ in 0..20 {
            let (code, _) = raw(
                &sim,
                "GET",
                "/api/v1/namespaces/default/configmaps/none",
                "application/json",
                "",
            )
            .await;
            codes.push(code);
        }
        codes
    };
    let a = run().await;
    let b = run().await;
    assert_eq!(a, b);
    assert!(a.contains(&503) && a.contains(&404), "{a:?}");
}

#[tokio::test]
async fn request_log_and_counters_attribute_users_and_verbs() {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let alice = sim.client_as("alice").await;
    let api: Api<ConfigMap> = Api::namespaced(alice, "default");
    let since = sim.requests().last_seq();
    api.create(&PostParams::default(), &cm("x")).await.unwrap();
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"b": "c"}})),
    )
    .await
    .unwrap();
    api.list(&ListParams::default()).await.unwrap();
    let recs = sim
        .requests()
        .records(&RequestFilter::default().user("alice").since(since));
    let verbs: Vec<&str> = recs.iter().map(|r| r.verb.as_str()).collect();
    assert_eq!(verbs, ["create", "patch", "list"]);
    assert_eq!(recs[1].name, "x");
    assert_eq!(recs[1].namespace, "default");
    assert_eq!(recs[1].code, 200);
    assert_eq!(recs[0].code, 201);
    let writes = sim.requests().count(
        &RequestFilter::default()
            .user("alice")
            .resource("configmaps")
            .name("x"),
    );
    assert_eq!(writes, 2);
    let total = sim
        .requests()
        .counter_total(Some("patch"), Some("configmaps"), Some(200), None);
    assert_eq!(total, 1);
    // The admin API shows the same.
    let (code, body) = raw(
        &sim,
        "GET",
        "/_sim/requests?user=alice&verb=patch",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["items"].as_array().map(Vec::len), Some(1));
    let (_, body) = raw(&sim, "GET", "/_sim/counters", "application/json", "").await;
    assert!(body.contains("\"verb\":\"create\""), "{body}");
    let (code, _) = raw(&sim, "POST", "/_sim/requests/reset", "application/json", "").await;
    assert_eq!(code, 200);
    assert_eq!(
        sim.requests()
            .counter_total(None, Some("configmaps"), None, None),
        0
    );
}

/// The log names the object as the server does, from the unescaped path
/// (`a%3Cb` is `a<b`, as in the audit log's objectRef); a request whose
/// path does not unescape never reaches a handler, nor the log.
#[tokio::test]
async fn request_log_names_the_unescaped_name() {
    let sim = KubeSim::start(SimConfig::default()).await.unwrap();
    let since = sim.requests().last_seq();
    let (code, body) = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/configmaps/a%3Cb",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains(r#""name":"a\u003cb""#), "{body}");
    let (code, body) = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/configmaps/a%zz",
        "application/json",
        "",
    )
    .await;
    assert_eq!((code, body.as_str()), (400, "400 Bad Request"));
    let recs = sim
        .requests()
        .records(&RequestFilter::default().since(since));
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0].name, "a<b");
    assert_eq!(recs[0].path, "/api/v1/namespaces/default/configmaps/a<b");
}

#[tokio::test]
async fn admin_api_adds_rules_and_pauses_the_server() {
    let (sim, c) = sim().await;
    let (code, body) = raw(
        &sim,
        "POST",
        "/_sim/faults",
        "application/json",
        r#"{"verb":"list","resource":"configmaps","action":{"type":"error","code":503}}"#,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, _) = raw(
        &sim,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 503);
    raw(&sim, "DELETE", "/_sim/faults", "application/json", "").await;
    raw(&sim, "POST", "/_sim/pause", "application/json", "").await;
    let api: Api<ConfigMap> = Api::namespaced(c, "default");
    let pending = tokio::spawn(async move { api.get_opt("nothing").await.map(|o| o.is_none()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "requests hang while paused");
    raw(&sim, "POST", "/_sim/resume", "application/json", "").await;
    let r = tokio::time::timeout(Duration::from_secs(30), pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(r);
}

#[tokio::test]
async fn latency_rule_delays_requests() {
    let (sim, c) = sim().await;
    sim.faults()
        .add(FaultRule::new(FaultAction::Latency { millis: 300 }).verb("get"));
    let api: Api<ConfigMap> = Api::namespaced(c, "default");
    api.get_opt("x").await.unwrap();
    let rec = sim
        .requests()
        .records(&RequestFilter::default().verb("get"));
    assert!(rec.last().unwrap().latency_ms >= 300.0, "{rec:?}");
}

#[tokio::test]
async fn watches_end_after_n_events_are_cut_and_get_410_on_demand() {
    let t = Target::with(SimConfig::default()).await;
    let Some(sim) = t.sim() else { return };
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    sim.faults().add(
        FaultRule::new(FaultAction::EndWatchAfterEvents { events: 2 })
            .verb("watch")
            .times(1),
    );
    let mut w = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("w{i}")))
            .await
            .unwrap();
    }
    let mut n = 0;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(30), w.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        assert!(matches!(ev, WatchEvent::Added(_)));
        n += 1;
    }
    assert_eq!(n, 2, "the stream ends after 2 events");
    // Cut all watches.
    let mut w = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(30), w.try_next())
            .await
            .unwrap()
            .unwrap();
    }
    sim.faults().cut_watches();
    let end = tokio::time::timeout(Duration::from_secs(30), w.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(end.is_none(), "cut ends the stream");
    // Forced 410 on the next watch.
    sim.faults().gone_next_watches(1);
    let mut w = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(Duration::from_secs(30), w.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        Some(WatchEvent::Error(s)) => assert_eq!(s.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_ends_after_seconds_and_admission_switch_via_admin_api() {
    let (sim, c) = sim().await;
    let api: Api<ConfigMap> = Api::namespaced(c, "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    sim.faults()
        .add(FaultRule::new(FaultAction::EndWatchAfterSeconds { seconds: 0.5 }).verb("watch"));
    let mut w = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(30), w.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(end.is_none(), "the watch ends on its own");
    let (code, body) = raw(
        &sim,
        "POST",
        "/_sim/admission/storage-protection",
        "application/json",
        r#"{"enabled":true}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (_, body) = raw(&sim, "GET", "/_sim/state", "application/json", "").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["storageProtectionAdmission"], true);
    let (code, body) = raw(&sim, "POST", "/api/v1/persistentvolumes", "application/json",
        r#"{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv-adm"},"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],"hostPath":{"path":"/x"}}}"#).await;
    assert_eq!(code, 201, "{body}");
    assert!(body.contains("kubernetes.io/pv-protection"), "{body}");
}

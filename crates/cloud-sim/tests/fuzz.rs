//! Property tests of what a client or an operator can feed cloud-sim: the
//! address range syntax, fault sets, and request bodies of every contract
//! call. Arbitrary input must give a result or a 4xx, never a panic or a
//! 5xx. `make test` runs proptest's default 256 cases per property;
//! `make fuzz` runs `FUZZ_CASES` (PROPTEST_CASES) of them.

use std::sync::OnceLock;

use cloud_sim::{CloudSim, Config, FaultSet, IpRange};
use proptest::prelude::*;
use serde_json::{Value, json};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        "[a-zA-Z0-9 ./:-]{0,12}".prop_map(Value::String),
    ];
    let key = prop_oneof![
        prop::sample::select(vec![
            "name",
            "service",
            "namespace",
            "uid",
            "spec",
            "ports",
            "protocol",
            "port",
            "nodePort",
            "loadBalancerIP",
            "loadBalancerSourceRanges",
            "ipFamilies",
            "nodes",
            "providerID",
            "addresses",
            "type",
            "address",
            "error",
            "rate",
            "status",
            "latency",
            "minMs",
            "maxMs",
            "hang",
            "garbage",
            "body",
            "put",
            "get",
            "delete",
            "list",
            "hosts",
            "retryAfterSeconds",
            "afterCommit",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z]{1,8}",
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// One runtime and one simulator for every case of a property.
fn harness() -> &'static (tokio::runtime::Runtime, CloudSim) {
    static H: OnceLock<(tokio::runtime::Runtime, CloudSim)> = OnceLock::new();
    H.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let sim = rt
            .block_on(CloudSim::start(Config::default().with_fsync(false)))
            .unwrap_or_else(|e| panic!("starting cloud-sim: {e}"));
        (rt, sim)
    })
}

proptest! {
    #[test]
    fn ip_ranges_parse_or_fail_cleanly(s in prop_oneof![
        "[0-9./ -]{0,40}",
        "([0-9]{1,4}\\.){3}[0-9]{1,4}(/[0-9]{1,3}|-([0-9]{1,4}\\.){3}[0-9]{1,4})?",
        any::<String>(),
    ]) {
        if let Ok(r) = s.parse::<IpRange>() {
            let _ = r.capacity();
            let _ = r.to_string();
        }
    }

    #[test]
    fn fault_sets_apply_or_fail_cleanly(v in json_value()) {
        let (_, sim) = harness();
        if let Ok(set) = serde_json::from_value::<FaultSet>(v) {
            let _ = sim.faults().set(set);
            sim.faults().clear();
        }
    }

    #[test]
    fn request_bodies_are_answered_without_a_server_error(
        body in prop_oneof![
            json_value().prop_map(|v| v.to_string().into_bytes()),
            prop::collection::vec(any::<u8>(), 0..64),
        ],
        path in prop::sample::select(vec![
            "/v1/loadbalancers/u-1",
            "/v1/loadbalancers/u-1/hosts",
            "/_sim/faults",
            "/_sim/faults/put",
        ]),
    ) {
        let (rt, sim) = harness();
        let url = format!("{}{path}", sim.url());
        let status = rt.block_on(async {
            reqwest::Client::new()
                .put(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .map(|r| r.status().as_u16())
        });
        let status = status.unwrap_or_else(|e| panic!("no reply: {e}"));
        sim.faults().clear();
        // 507: the address pool is full, a contract answer, not a failure.
        prop_assert!(status < 500 || status == 507, "status {status}");
    }
}

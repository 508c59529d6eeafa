//! The API server's ClusterIP repair loop (`RepairIPAddress`): an
//! IPAddress of the allocator (labelled
//! `ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io`) that names no
//! Service is deleted at once, one whose Service does not exist once it is
//! 60 s old, and one of another manager stays.
//!
//! Judged by the real kube-apiserver 1.36 (its own binary, so its own real
//! server): the same scenario runs on both, the real one first; who the
//! real server's audit log says deleted the IPAddresses is then required of
//! kube-sim by a ValidatingAdmissionPolicy that refuses anyone else (so a
//! delete as another user leaves the object, and the transcripts differ).
//!
//! kube-sim only: the chaos run's case, a Service deleted while no
//! ServiceCIDR contains its cluster IP (the release leaves its IPAddress):
//! the repair loop deletes it, and the address is free again for a new
//! ServiceCIDR over the range.

mod common;

use std::time::Duration;

use common::differential::{Transcript, assert_same, delete, get, post, real_server, run_id};
use futures::StreamExt;
use k8s_openapi::api::networking::v1::IPAddress;
use kube::Client;
use kube::api::{Api, WatchEvent, WatchParams};
use kube_sim::{KubeSim, SimConfig};
use serde_json::{Value, json};
use tokio::time::Instant;

const NET: &str = "/apis/networking.k8s.io/v1";
const MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
const FAMILY: &str = "ipaddress.kubernetes.io/ip-family";
const ALLOCATOR: &str = "ipallocator.k8s.io";
/// Upstream's grace period for an IPAddress whose Service does not exist.
const GRACE: Duration = Duration::from_secs(60);
/// How long past the grace period a deletion may take to show (the loop's
/// queue, the test's polling, a loaded machine).
const SLACK: Duration = Duration::from_secs(30);

/// The three IPAddresses of one run (198.51.100.0/24, TEST-NET-2).
struct Names {
    /// Managed, naming a Service that does not exist.
    orphan: String,
    /// Managed, naming a Gateway.
    foreign: String,
    /// Not managed by the allocator, naming a Service that does not exist.
    unmanaged: String,
    /// The missing Service.
    service: String,
    /// The label the scenario's IPAddresses carry (the probe's selector).
    run: String,
}

impl Names {
    fn new() -> Names {
        let run = run_id();
        let n = run
            .bytes()
            .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(b.into()))
            % 80;
        let ip = |k: u32| format!("198.51.100.{}", n * 3 + k);
        Names {
            orphan: ip(1),
            foreign: ip(2),
            unmanaged: ip(3),
            service: format!("missing-{run}"),
            run,
        }
    }
}

fn ip_address(name: &str, run: &str, labels: Value, parent: Value) -> Value {
    let mut labels = labels;
    labels["kube-sim-test"] = json!(run);
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {"name": name, "labels": labels},
        "spec": {"parentRef": parent},
    })
}

/// Polls `ipaddresses/name` until it is gone (404) or `deadline`; whether
/// it went.
async fn gone_by(c: &Client, name: &str, deadline: Instant) -> bool {
    loop {
        let r = get(c, &format!("{NET}/ipaddresses/{name}")).await;
        if r.code == 404 {
            return true;
        }
        assert_eq!(r.code, 200, "GET ipaddresses/{name}: {:?}", r.body);
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn scenario(c: &Client, n: &Names, real: bool) -> Transcript {
    let mut t = Transcript::new();
    let managed = json!({MANAGED_BY: ALLOCATOR, FAMILY: "IPv4"});
    let to_missing = json!({"resource": "services", "namespace": "default", "name": n.service});
    let created = Instant::now();
    let r = post(
        c,
        &format!("{NET}/ipaddresses"),
        &ip_address(&n.orphan, &n.run, managed.clone(), to_missing.clone()),
    )
    .await;
    t.reply("create a managed IPAddress of a missing Service", &r);
    let r = post(
        c,
        &format!("{NET}/ipaddresses"),
        &ip_address(
            &n.foreign,
            &n.run,
            managed,
            json!({"group": "gateway.networking.k8s.io", "resource": "gateways", "namespace": "default", "name": "g"}),
        ),
    )
    .await;
    t.reply("create a managed IPAddress of a Gateway", &r);
    let r = post(
        c,
        &format!("{NET}/ipaddresses"),
        &ip_address(&n.unmanaged, &n.run, json!({FAMILY: "IPv4"}), to_missing),
    )
    .await;
    t.reply("create an unmanaged IPAddress of a missing Service", &r);

    // Well within the grace period: the one naming a Gateway goes at once.
    let soon = created + GRACE / 4;
    t.note(
        "the IPAddress naming a Gateway is deleted at once",
        json!(gone_by(c, &n.foreign, soon).await),
    );
    t.reply(
        "the orphan is still there",
        &get(c, &format!("{NET}/ipaddresses/{}", n.orphan)).await,
    );
    // Shortly before the grace period ends it is still there...
    tokio::time::sleep_until(created + GRACE - Duration::from_secs(10)).await;
    t.reply(
        "the orphan 50 s after its creation",
        &get(c, &format!("{NET}/ipaddresses/{}", n.orphan)).await,
    );
    // ...and gone soon after it.
    let went = gone_by(c, &n.orphan, created + GRACE + SLACK).await;
    eprintln!(
        "{}: the orphan went {:?} after its creation",
        if real { "real server" } else { "kube-sim" },
        created.elapsed()
    );
    t.note("the orphan is deleted once 60 s old", json!(went));
    t.reply(
        "the unmanaged IPAddress stays",
        &get(c, &format!("{NET}/ipaddresses/{}", n.unmanaged)).await,
    );
    for name in [&n.unmanaged, &n.orphan, &n.foreign] {
        let _ = delete(c, &format!("{NET}/ipaddresses/{name}")).await;
    }
    t
}

/// A policy on kube-sim refusing the deletion of the scenario's
/// IPAddresses by anyone but `user` in `groups`.
async fn require_deleter(c: &Client, run: &str, user: &str, groups: &[String]) {
    let name = format!("ip-repair-deleter-{run}");
    let groups = serde_json::to_string(groups).unwrap_or_default();
    let r = post(
        c,
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        &json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["ipaddresses"]}],
                    "objectSelector": {"matchLabels": {"kube-sim-test": run}},
                },
                "validations": [{
                    "expression": format!("request.userInfo.username == {user:?} && request.userInfo.groups == {groups}"),
                    "message": "not the real server's deleter",
                }],
            },
        }),
    )
    .await;
    assert_eq!(r.code, 201, "creating the policy: {:?}", r.body);
    let r = post(
        c,
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        &json!({
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }),
    )
    .await;
    assert_eq!(r.code, 201, "creating the binding: {:?}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_and_foreign_ipaddresses_are_deleted_as_on_the_real_server() {
    let real = real_server().await;
    let n = Names::new();
    let audit = real.control_plane.as_ref().map(|cp| cp.audit_log());
    let mark = audit.as_ref().map(|a| a.mark());
    let real_t = scenario(&real.client, &n, true).await;

    // Who deleted them on the real server (before the test's own cleanup).
    let mut deleters = Vec::new();
    if let (Some(audit), Some(mark)) = (&audit, mark) {
        for e in audit.events_since(mark) {
            let Some(o) = &e.object_ref else { continue };
            if e.verb == "delete"
                && o.resource == "ipaddresses"
                && (o.name == n.orphan || o.name == n.foreign)
                && e.code() == 200
            {
                eprintln!(
                    "real server: {} deleted by {} {:?} ({})",
                    o.name, e.user.username, e.user.groups, e.user_agent
                );
                deleters.push((e.user.username.clone(), e.user.groups.clone()));
            }
        }
        deleters.sort();
        deleters.dedup();
        assert_eq!(
            deleters.len(),
            1,
            "one identity deletes both IPAddresses on the real server: {deleters:?}"
        );
    } else {
        eprintln!("no audit log of the real server: who deletes is not compared");
    }

    let sim = KubeSim::start(common::differential::same_service_range(real.client.clone()).await)
        .await
        .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
    let c = sim.client().await;
    if let Some((user, groups)) = deleters.first() {
        require_deleter(&c, &n.run, user, groups).await;
    }
    let sim_t = scenario(&c, &n, false).await;
    sim.shutdown().await;
    assert_same("ip-repair", &sim_t, &real_t);
}

/// The chaos run's case on kube-sim: the Service is deleted while no
/// ServiceCIDR contains its cluster IP, so the release leaves its
/// IPAddress; the repair loop deletes it once 60 s old (at its next pass:
/// the interval is shortened here), watchers see it go, and a new
/// ServiceCIDR over the range can hand the address out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipaddress_left_outside_every_range_is_repaired_away() {
    let sim = KubeSim::start(SimConfig {
        ip_repair_interval: Duration::from_secs(2),
        ..SimConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("starting kube-sim: {e}"));
    let c = sim.client().await;
    let (range, ip) = ("10.250.0.0/24", "10.250.0.10");
    let cidr = |name: &str| json!({"metadata": {"name": name}, "spec": {"cidrs": [range]}});
    let service = json!({
        "metadata": {"name": "web"},
        "spec": {"clusterIP": ip, "ports": [{"port": 80}]},
    });
    let services = "/api/v1/namespaces/default/services";

    let r = post(&c, &format!("{NET}/servicecidrs"), &cidr("first")).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let r = post(&c, services, &service).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let held = get(&c, &format!("{NET}/ipaddresses/{ip}")).await;
    assert_eq!(held.code, 200, "{:?}", held.body);
    assert_eq!(
        held.body["spec"]["parentRef"],
        json!({"resource": "services", "namespace": "default", "name": "web"})
    );

    // No finalizer on kube-sim's ServiceCIDRs (kube-controller-manager adds
    // it): the range goes at once, and no range contains the address.
    let r = delete(&c, &format!("{NET}/servicecidrs/first")).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(
        get(&c, &format!("{NET}/servicecidrs/first")).await.code,
        404
    );

    let ips: Api<IPAddress> = Api::all(c.clone());
    let rv = held.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let mut events = ips
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={ip}")),
            &rv,
        )
        .await
        .unwrap_or_else(|e| panic!("watching ipaddresses: {e}"))
        .boxed();

    let r = delete(&c, &format!("{services}/web")).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    let left = get(&c, &format!("{NET}/ipaddresses/{ip}")).await;
    assert_eq!(
        left.code, 200,
        "the release leaves the IPAddress when no ServiceCIDR contains it: {:?}",
        left.body
    );

    // The repair loop deletes it, through the store: watchers see it go.
    let deleted = tokio::time::timeout(GRACE + SLACK, async {
        while let Some(ev) = events.next().await {
            match ev {
                Ok(WatchEvent::Deleted(o)) => return Some(o),
                Ok(WatchEvent::Error(e)) => panic!("watch error: {e:?}"),
                Ok(_) => {}
                Err(e) => panic!("watch stream: {e}"),
            }
        }
        None
    })
    .await
    .unwrap_or_else(|_| panic!("the repair loop left the orphan IPAddress {ip}"));
    assert_eq!(
        deleted.and_then(|o| o.metadata.name).as_deref(),
        Some(ip),
        "the watch ended before the IPAddress was deleted"
    );
    assert_eq!(get(&c, &format!("{NET}/ipaddresses/{ip}")).await.code, 404);

    // A new range over it: nothing holds the address, a Service gets it.
    let r = post(&c, &format!("{NET}/servicecidrs"), &cidr("second")).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let r = post(&c, services, &service).await;
    assert_eq!(r.code, 201, "the address is free again: {:?}", r.body);
    let r = delete(&c, &format!("{services}/web")).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(
        get(&c, &format!("{NET}/ipaddresses/{ip}")).await.code,
        404,
        "the release deletes it while the range exists"
    );
    let r = delete(&c, &format!("{NET}/servicecidrs/second")).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(
        get(&c, &format!("{NET}/servicecidrs/second")).await.code,
        404
    );
    sim.shutdown().await;
}

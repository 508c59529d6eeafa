//! The service-lb-cleanup controller against kube-sim and cloud-sim: the
//! ported upstream e2e, the gate phases with back-fill, node sync, class
//! selection (each also on the real kube-apiserver v1.36.3: `NAME::real`),
//! request accounting and recovery.

mod common;

use std::time::Duration;

use cloud_sim::{ErrorFault, LatencyFault, OpFaults, Operation};
use common::*;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::{FaultRule, RequestFilter};
use serde_json::json;
use test_bed::Bed;

test_bed::on_both_beds!(
    should_handle_load_balancer_cleanup_finalizer_for_service,
    gate_phases_with_downgrade_and_backfill,
    class_selection,
    node_changes_update_load_balancer_hosts,
);

/// Upstream e2e "should handle load balancer cleanup finalizer for service"
/// (test/e2e/network/loadbalancer.go), step by step.
async fn should_handle_load_balancer_cleanup_finalizer_for_service(bed: Bed) {
    let mut env = Env::on(bed).await;
    env.add_nodes(&["node-a", "node-b"]).await;
    env.start(Ctl::default()).await;

    // 1. Create a TCP Service of type LoadBalancer.
    let created = env.create(&lb_service("lb-finalizer", Some(CLASS))).await;
    let uid = created.metadata.uid.clone().expect("uid");

    // 2. Wait for the load balancer's ingress; 3. the finalizer is present.
    let s = env
        .wait_service("lb-finalizer", "has an ingress and the finalizer", |s| {
            s.is_some_and(|s| {
                !ingress_ips(s).is_empty() && finalizers(s).contains(&FINALIZER.into())
            })
        })
        .await
        .expect("service");
    let lb = env.cloud.get(&uid).expect("a load balancer in cloud-sim");
    let lb_ip = lb.status.ingress[0].ip.clone().expect("ip");
    assert_eq!(ingress_ips(&s), [lb_ip]);
    let targets: Vec<&str> = lb.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(targets, ["node-a", "node-b"]);

    // 4. Change the type to ClusterIP as the e2e jig does. The load
    // balancer goes, and so do the finalizer and the ingress.
    env.make_cluster_ip("lb-finalizer").await;
    env.wait_service("lb-finalizer", "lost its finalizer and ingress", |s| {
        s.is_some_and(|s| !finalizers(s).contains(&FINALIZER.into()) && ingress_ips(s).is_empty())
    })
    .await;
    assert!(
        env.cloud.get(&uid).is_none(),
        "load balancer deleted in cloud-sim"
    );

    // 5. Back to LoadBalancer: the finalizer is back (and a new ingress).
    let mut s = env.get("lb-finalizer").await.expect("service");
    if let Some(spec) = s.spec.as_mut() {
        spec.type_ = Some("LoadBalancer".into());
        spec.load_balancer_class = Some(CLASS.into());
    }
    env.services()
        .replace("lb-finalizer", &Default::default(), &s)
        .await
        .expect("update the Service to LoadBalancer");
    env.wait_service("lb-finalizer", "has the finalizer again", |s| {
        s.is_some_and(|s| finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty())
    })
    .await;
    assert!(env.cloud.get(&uid).is_some());

    // 6. Delete: the Service goes once its load balancer is gone.
    env.delete("lb-finalizer").await;
    env.wait_service("lb-finalizer", "is gone", |s| s.is_none())
        .await;
    assert!(env.cloud.get(&uid).is_none(), "no orphan");
    assert!(env.orphans().await.is_empty());

    // The last event is published right after the final write.
    wait_for("the lifecycle's events were reported", || {
        let env = &env;
        async move {
            let reasons: Vec<String> = env
                .events("lb-finalizer")
                .await
                .into_iter()
                .map(|(_, r, _)| r)
                .collect();
            [
                "EnsuringLoadBalancer",
                "EnsuredLoadBalancer",
                "DeletingLoadBalancer",
                "DeletedLoadBalancer",
            ]
            .iter()
            .all(|want| reasons.iter().any(|r| r == want))
        }
    })
    .await;
    env.stop().await;
}

/// The KEP's rollout: at 0.1 (gate Alpha, off) no finalizer is added but a
/// finalizer left by a newer release is still removed on delete; at 0.2 and
/// 0.3 Services that exist without it are back-filled at start-up.
async fn gate_phases_with_downgrade_and_backfill(bed: Bed) {
    let mut env = Env::on(bed).await;
    env.add_nodes(&["node-a"]).await;

    // 0.3: a Service gets the finalizer.
    env.start(Ctl::at("0.3")).await;
    let kept = env.create(&lb_service("from-0-3", Some(CLASS))).await;
    env.wait_service("from-0-3", "has the finalizer", |s| {
        s.is_some_and(|s| finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty())
    })
    .await;

    // Downgrade to 0.1.
    env.start(Ctl::at("0.1")).await;
    let plain = env.create(&lb_service("from-0-1", Some(CLASS))).await;
    let plain_uid = plain.metadata.uid.clone().expect("uid");
    let s = env
        .wait_service("from-0-1", "has an ingress", |s| {
            s.is_some_and(|s| !ingress_ips(s).is_empty())
        })
        .await
        .expect("service");
    assert!(finalizers(&s).is_empty(), "0.1 adds no finalizer: {s:?}");
    assert!(env.cloud.get(&plain_uid).is_some());

    // The 0.3 finalizer is still removed on delete at 0.1 ...
    env.delete("from-0-3").await;
    env.wait_service("from-0-3", "is gone", |s| s.is_none())
        .await;
    assert!(
        env.cloud
            .get(kept.metadata.uid.as_deref().unwrap_or(""))
            .is_none()
    );

    // ... and a Service without one still gets its load balancer deleted
    // when it goes (upstream's non-finalizer path).
    let doomed = env.create(&lb_service("doomed-0-1", Some(CLASS))).await;
    let doomed_uid = doomed.metadata.uid.clone().expect("uid");
    wait_for("cloud-sim has doomed-0-1's load balancer", || {
        let has = env.cloud.get(&doomed_uid).is_some();
        async move { has }
    })
    .await;
    env.delete("doomed-0-1").await;
    env.wait_service("doomed-0-1", "is gone at once", |s| s.is_none())
        .await;
    wait_for("doomed-0-1's load balancer is deleted", || {
        let gone = env.cloud.get(&doomed_uid).is_none();
        async move { gone }
    })
    .await;

    // Upgrade to 0.2: the Service made at 0.1 is back-filled at start-up.
    env.start(Ctl::at("0.2")).await;
    env.wait_service("from-0-1", "was back-filled at 0.2", |s| {
        s.is_some_and(|s| finalizers(s).contains(&FINALIZER.into()))
    })
    .await;

    // 0.2 with the gate turned off (Beta allows it) behaves as 0.1 ...
    env.start(Ctl {
        gates: "ServiceLoadBalancerFinalizer=false".into(),
        ..Ctl::at("0.2")
    })
    .await;
    env.create(&lb_service("gate-off-0-2", Some(CLASS))).await;
    let s = env
        .wait_service("gate-off-0-2", "has an ingress", |s| {
            s.is_some_and(|s| !ingress_ips(s).is_empty())
        })
        .await
        .expect("service");
    assert!(finalizers(&s).is_empty());
    // ... and leaves the finalizers it finds.
    let s = env.get("from-0-1").await.expect("service");
    assert!(finalizers(&s).contains(&FINALIZER.into()));

    // Upgrade to 0.3 (GA): back-filled at start-up too; new Services get it.
    env.start(Ctl::at("0.3")).await;
    env.wait_service("gate-off-0-2", "was back-filled at 0.3", |s| {
        s.is_some_and(|s| finalizers(s).contains(&FINALIZER.into()))
    })
    .await;
    env.create(&lb_service("from-0-3-b", Some(CLASS))).await;
    env.wait_service("from-0-3-b", "has the finalizer", |s| {
        s.is_some_and(|s| finalizers(s).contains(&FINALIZER.into()))
    })
    .await;
    for name in ["from-0-1", "gate-off-0-2", "from-0-3-b"] {
        env.delete(name).await;
    }
    for name in ["from-0-1", "gate-off-0-2", "from-0-3-b"] {
        env.wait_service(name, "is gone", |s| s.is_none()).await;
    }
    assert!(env.orphans().await.is_empty());
    assert!(env.cloud.inventory().is_empty());
    env.stop().await;
}

/// Only Services of our class are touched; Services with no class only
/// with --lb-include-unclassed; another class never.
async fn class_selection(bed: Bed) {
    let mut env = Env::on(bed).await;
    env.add_nodes(&["node-a"]).await;
    env.start(Ctl::default()).await;
    env.create(&lb_service("foreign", Some("cloud.example.com/nlb")))
        .await;
    env.create(&lb_service("unclassed", None)).await;
    env.create(&lb_service("ours", Some(CLASS))).await;
    env.wait_service("ours", "has the finalizer and an ingress", |s| {
        s.is_some_and(|s| finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty())
    })
    .await;
    // "ours" was created last and the controller handles events in order, so
    // it has seen the other two by now.
    assert_eq!(env.cloud.inventory().len(), 1);
    for name in ["foreign", "unclassed"] {
        let s = env.get(name).await.expect("service");
        assert!(
            finalizers(&s).is_empty() && ingress_ips(&s).is_empty(),
            "{name}"
        );
        let events = env.events(name).await;
        assert!(events.is_empty(), "{name}: the manager reported {events:?}");
    }

    env.start(Ctl {
        include_unclassed: true,
        ..Ctl::default()
    })
    .await;
    env.wait_service("unclassed", "has the finalizer", |s| {
        s.is_some_and(|s| finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty())
    })
    .await;
    let s = env.get("foreign").await.expect("service");
    assert!(finalizers(&s).is_empty());
    assert_eq!(env.cloud.inventory().len(), 2);
    env.stop().await;
}

/// Upstream node sync: hosts are updated when a node joins, leaves, or is
/// excluded by label; not when something irrelevant changes.
async fn node_changes_update_load_balancer_hosts(bed: Bed) {
    let mut env = Env::on(bed).await;
    env.add_nodes(&["node-a", "node-b"]).await;
    env.start(Ctl::default()).await;
    let uid = env
        .create(&lb_service("web", Some(CLASS)))
        .await
        .metadata
        .uid
        .expect("uid");
    env.wait_service("web", "has an ingress", |s| {
        s.is_some_and(|s| !ingress_ips(s).is_empty())
    })
    .await;
    let names = |env: &Env| -> Vec<String> {
        env.cloud
            .get(&uid)
            .map(|lb| lb.nodes.iter().map(|n| n.name.clone()).collect())
            .unwrap_or_default()
    };
    let hosts_calls = |env: &Env| {
        env.cloud
            .stats()
            .operations
            .get(&Operation::Hosts)
            .map_or(0, |o| o.total)
    };
    assert_eq!(names(&env), ["node-a", "node-b"]);

    env.add_nodes(&["node-c"]).await;
    wait_for("node-c is a target", || {
        let n = names(&env);
        async move { n == ["node-a", "node-b", "node-c"] }
    })
    .await;
    assert_eq!(hosts_calls(&env), 1);

    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.admin.clone());
    // A label that does not matter: no update.
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "blue"}}})),
        )
        .await
        .expect("label");
    // Excluded: update.
    nodes
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "node.kubernetes.io/exclude-from-external-load-balancers": "true"}}})),
        )
        .await
        .expect("exclude");
    wait_for("node-b is excluded", || {
        let n = names(&env);
        async move { n == ["node-a", "node-c"] }
    })
    .await;
    nodes
        .delete("node-c", &Default::default())
        .await
        .expect("delete node");
    wait_for("node-c is gone from the targets", || {
        let n = names(&env);
        async move { n == ["node-a"] }
    })
    .await;
    assert_eq!(hosts_calls(&env), 3, "one update per real change");
    // One event series (the recorder folds repeats) reaching count 3; the
    // event is published right after the provider answered.
    wait_for("UpdatedLoadBalancer was reported three times", || {
        let env = &env;
        async move { env.event_count("web", "UpdatedLoadBalancer").await == 3 }
    })
    .await;
    env.stop().await;
}

/// Request accounting: a Service's whole life costs exactly three writes by
/// the controller (add finalizer; ingress; remove finalizer + clear status),
/// all `patch services/status`; re-lists, resyncs and restarts cost none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_accounting_three_writes_per_lifecycle_and_none_on_resync() {
    let mut env = Env::new().await;
    env.add_nodes(&["node-a"]).await;
    env.start(Ctl {
        resync: Duration::from_secs(1),
        ..Ctl::default()
    })
    .await;
    let n = 10;
    let since = env.mark();
    for i in 0..n {
        env.create(&lb_service(&format!("svc-{i}"), Some(CLASS)))
            .await;
    }
    for i in 0..n {
        env.wait_service(&format!("svc-{i}"), "is ready", |s| {
            s.is_some_and(|s| {
                finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty()
            })
        })
        .await;
    }

    // Steady state: re-list every watch, let resyncs pass, restart.
    let steady = env.mark();
    let puts_before = |env: &Env| {
        env.cloud
            .stats()
            .operations
            .get(&Operation::Put)
            .map_or(0, |o| o.total)
    };
    let lists = |env: &Env, since: u64| {
        env.kube().requests().count(
            &RequestFilter::default()
                .user(USER)
                .resource("services")
                .verb("list")
                .since(since),
        )
    };
    // Both watches (Services, Nodes) end and resume with 410 Gone: a re-list.
    env.kube().faults().gone_next_watches(2);
    env.kube().faults().cut_watches();
    wait_for("the controller re-listed services", || {
        let c = lists(&env, steady);
        async move { c > 0 }
    })
    .await;
    // A barrier: a change that needs a sync, made after the re-list; once
    // the provider saw it, every earlier event was handled.
    let p0 = puts_before(&env);
    env.merge(
        "svc-0",
        json!({"metadata": {"annotations": {"barrier": "1"}}}),
    )
    .await;
    wait_for("the barrier change was synced", || {
        let p = puts_before(&env);
        async move { p > p0 }
    })
    .await;
    env.stop().await;
    let p1 = puts_before(&env);
    env.start(Ctl::default()).await;
    wait_for("every Service was re-ensured after the restart", || {
        let p = puts_before(&env);
        async move { p >= p1 + n }
    })
    .await;
    let writes = env.service_writes(steady);
    assert!(
        writes.is_empty(),
        "no writes on resync/re-list/restart: {writes:#?}"
    );

    for i in 0..n {
        env.delete(&format!("svc-{i}")).await;
    }
    for i in 0..n {
        env.wait_service(&format!("svc-{i}"), "is gone", |s| s.is_none())
            .await;
    }
    let writes = env.service_writes(since);
    assert!(
        writes
            .iter()
            .all(|w| w.verb == "patch" && w.subresource == "status"),
        "only services/status patches: {writes:#?}"
    );
    for i in 0..n {
        let name = format!("svc-{i}");
        let per: Vec<_> = writes.iter().filter(|w| w.name == name).collect();
        assert_eq!(per.len(), 3, "{name}: {per:#?}");
    }
    assert!(env.orphans().await.is_empty());
    env.stop().await;
}

/// With cloud-sim failing half the calls and slow, deleting 200 Services
/// leaves no orphaned load balancer and no Service stuck once faults stop;
/// the failures are reported as Warning events with the provider's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_leave_no_orphans_and_no_stuck_services() {
    let mut env = Env::new().await;
    env.add_nodes(&["node-a", "node-b"]).await;
    env.start(Ctl {
        resync: Duration::from_secs(5),
        concurrency: 8,
        ..Ctl::default()
    })
    .await;
    let n = 200;
    for i in 0..n {
        env.create(&lb_service(&format!("f-{i}"), Some(CLASS)))
            .await;
    }
    wait_for("every Service has its load balancer", || {
        let c = env.cloud.inventory().len();
        async move { c == n }
    })
    .await;
    for i in 0..n {
        env.wait_service(&format!("f-{i}"), "is ready", |s| {
            s.is_some_and(|s| {
                finalizers(s).contains(&FINALIZER.into()) && !ingress_ips(s).is_empty()
            })
        })
        .await;
    }

    let flaky = OpFaults {
        error: Some(ErrorFault {
            rate: 0.5,
            status: 503,
            retry_after_seconds: None,
            retry_after_format: Default::default(),
            after_commit: false,
            message: Some("injected: backend overloaded".into()),
        }),
        latency: Some(LatencyFault {
            rate: 1.0,
            min_ms: 5,
            max_ms: Some(50),
        }),
        hang: None,
        garbage: None,
    };
    for op in [Operation::Get, Operation::Delete, Operation::Put] {
        env.cloud
            .faults()
            .set_operation(op, flaky.clone())
            .expect("faults");
    }
    for i in 0..n {
        env.delete(&format!("f-{i}")).await;
    }
    // Let failures happen under the faults.
    wait_for("some deletions failed", || {
        let failed = env
            .cloud
            .stats()
            .operations
            .values()
            .map(|o| o.count(cloud_sim::Outcome::InjectedError))
            .sum::<u64>();
        async move { failed >= 20 }
    })
    .await;
    env.cloud.faults().clear();

    let svcs = env.services();
    wait_for("every Service is gone", || {
        let svcs = svcs.clone();
        async move {
            svcs.list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .all(|s| !s.metadata.name.as_deref().unwrap_or("").starts_with("f-"))
                })
                .unwrap_or(false)
        }
    })
    .await;
    assert!(env.orphans().await.is_empty(), "no orphaned load balancers");
    assert!(env.cloud.inventory().is_empty());

    // Failures were reported with the provider's text (the Services are gone,
    // their events remain).
    let ev_api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.admin.clone(), NS);
    let warnings: Vec<String> = ev_api
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed"))
        .filter_map(|e| e.note)
        .collect();
    assert!(!warnings.is_empty());
    assert!(
        warnings
            .iter()
            .any(|n| n.contains("injected: backend overloaded") && n.contains("failing since")),
        "{warnings:?}"
    );
    let text = env.metrics.encode().expect("metrics");
    assert!(
        text.contains("protection_manager_lb_provider_requests_total{op=\"ensure_deleted\",result=\"transient\"}"),
        "{text}"
    );
    env.stop().await;
}

/// The controller dies between "load balancer deleted" and "finalizer
/// removed" (the status patch keeps failing, then the task is dropped); a
/// new instance finishes the cleanup idempotently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_lb_deleted_and_finalizer_removed_recovers() {
    let mut env = Env::new().await;
    env.add_nodes(&["node-a"]).await;
    env.start(Ctl::default()).await;
    let uid = env.create_ready("web").await;
    let rule = env.kube().faults().add(
        FaultRule::error(500)
            .user(USER)
            .resource("services")
            .subresource("status"),
    );
    env.delete("web").await;
    wait_for("the load balancer is deleted", || {
        let gone = env.cloud.get(&uid).is_none();
        async move { gone }
    })
    .await;
    let rejected = RequestFilter::default().user(USER).resource("services");
    wait_for("the finalizer removal was attempted", || {
        let n = env
            .kube()
            .requests()
            .records(&rejected)
            .iter()
            .filter(|r| r.code == 500)
            .count();
        async move { n > 0 }
    })
    .await;
    env.kill().await;
    let s = env.get("web").await.expect("still there");
    assert!(
        finalizers(&s).contains(&FINALIZER.into()),
        "stuck on our finalizer"
    );
    env.kube().faults().remove(rule);

    env.start(Ctl::default()).await;
    env.wait_service("web", "is gone", |s| s.is_none()).await;
    assert!(env.orphans().await.is_empty());
    env.stop().await;
}

/// A provider's Retry-After is honoured and the Service converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_then_success() {
    let mut env = Env::new().await;
    env.add_nodes(&["node-a"]).await;
    env.start(Ctl::default()).await;
    env.cloud
        .faults()
        .set_operation(
            Operation::Put,
            OpFaults {
                error: Some(ErrorFault {
                    rate: 1.0,
                    status: 429,
                    retry_after_seconds: Some(1),
                    retry_after_format: Default::default(),
                    after_commit: false,
                    message: Some("slow down".into()),
                }),
                ..OpFaults::default()
            },
        )
        .expect("faults");
    env.create(&lb_service("web", Some(CLASS))).await;
    wait_for("the provider was asked twice", || {
        let puts = env
            .cloud
            .stats()
            .operations
            .get(&Operation::Put)
            .map_or(0, |o| o.total);
        async move { puts >= 2 }
    })
    .await;
    env.cloud.faults().clear();
    env.wait_service("web", "has an ingress", |s| {
        s.is_some_and(|s| !ingress_ips(s).is_empty())
    })
    .await;
    let evs = env.events("web").await;
    assert!(
        evs.iter().any(|(t, r, n)| t == "Warning"
            && r == "SyncLoadBalancerFailed"
            && n.contains("failed to ensure load balancer")
            && n.contains("slow down")),
        "{evs:#?}"
    );
    env.stop().await;
}

/// Issue 27, "fights never back off": a writer that keeps re-adding the
/// cleanup finalizer to a Service that is no longer a load balancer (a
/// GitOps tool applying a manifest exported with its finalizers, say) got a
/// removal from us on every re-add, as fast as both could go, for ever. Now
/// the third removal within 30 s waits 5 s (doubling while it goes on), one
/// Warning FinalizerFight names the writer's field manager, and the
/// back-off is counted; the finalizer still goes once the writer stops, and
/// no load balancer is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_re_adding_the_finalizer_meets_a_back_off_and_one_warning() {
    let mut env = Env::new().await;
    env.add_nodes(&["node-a"]).await;
    env.start(Ctl::default()).await;
    let uid = env.create_ready("web").await;
    // No longer a load balancer: the load balancer goes, then our
    // finalizer (the first removal).
    env.make_cluster_ip("web").await;
    env.wait_service("web", "lost its finalizer", |s| {
        s.is_some_and(|s| !finalizers(s).contains(&FINALIZER.into()))
    })
    .await;
    assert!(env.cloud.get(&uid).is_none(), "load balancer deleted");

    let (readds, removals) = fight_with(
        &env,
        "gitops-sync",
        |s| finalizers(s).contains(&FINALIZER.into()),
        |_| json!({"metadata": {"finalizers": [FINALIZER]}}),
    )
    .await;
    assert_eq!(
        removals, 1,
        "one quick removal, then the back-off holds the next (the third in the window)"
    );
    assert_eq!(
        readds, 2,
        "the writer re-added after the first removal and the second"
    );
    assert_one_fight_warning(&env, "gitops-sync", "re-adding").await;
    // The back-off only delays: once the writer stops, the finalizer goes.
    env.wait_service("web", "lost its finalizer after the back-off", |s| {
        s.is_some_and(|s| !finalizers(s).contains(&FINALIZER.into()))
    })
    .await;
    assert!(env.orphans().await.is_empty());
    env.stop().await;
}

/// Another writer (field manager `manager`) fights our finalizer on "web":
/// whenever `done` is false for the live Service it sends `patch(n)` (the
/// n-th time), for 3 s, and on until a second after the fight is reported
/// (never, before the fix: then until the deadline). Returns its patches
/// and the controller's writes meanwhile.
async fn fight_with(
    env: &Env,
    manager: &str,
    done: impl Fn(&k8s_openapi::api::core::v1::Service) -> bool,
    patch: impl Fn(usize) -> serde_json::Value,
) -> (usize, usize) {
    let since = env.mark();
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    let api = env.services();
    let mut patches = 0;
    let start = std::time::Instant::now();
    let mut reported: Option<std::time::Instant> = None;
    loop {
        let live = api.get("web").await.expect("get");
        if !done(&live) {
            api.patch("web", &params, &Patch::Merge(patch(patches)))
                .await
                .expect("the other writer's patch");
            patches += 1;
        }
        if reported.is_none() && env.event_count("web", "FinalizerFight").await > 0 {
            reported = Some(std::time::Instant::now());
        }
        let elapsed = start.elapsed();
        if (elapsed >= Duration::from_secs(3)
            && reported.is_some_and(|t| t.elapsed() >= Duration::from_secs(1)))
            || elapsed > DEADLINE
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ours = env.service_writes(since).len();
    println!(
        "{patches} patches by {manager} in {:?}, {ours} writes by the controller",
        start.elapsed()
    );
    (patches, ours)
}

/// One Warning FinalizerFight about "web", naming `manager` as the writer
/// that keeps `doing` (removing, re-adding) our finalizer, and one
/// back-off counted.
async fn assert_one_fight_warning(env: &Env, manager: &str, doing: &str) {
    let fights: Vec<(String, String, String)> = env
        .events("web")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "FinalizerFight")
        .collect();
    assert_eq!(fights.len(), 1, "one Warning per fight: {fights:?}");
    assert_eq!(fights[0].0, "Warning");
    let want = format!(
        "field manager \"{manager}\" (the last other writer) keeps {doing} finalizer {FINALIZER}"
    );
    assert!(fights[0].2.starts_with(&want), "{}", fights[0].2);
    assert_fight_backoffs(env, 1);
}

fn assert_fight_backoffs(env: &Env, n: u32) {
    let text = env.metrics.encode().expect("metrics");
    let series = format!(
        "protection_manager_finalizer_fight_backoffs_total{{controller=\"service-lb-cleanup\"}} {n}\n"
    );
    assert!(text.contains(&series), "{text}");
}

/// The other way: a script that keeps removing the finalizer from a
/// Service that has a load balancer (and marks what it cleaned, which
/// makes a sync) got an add back on every removal. Now the third add within
/// 30 s waits, one Warning names it; a Service deleted during the wait
/// still gets its load balancer deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_removing_the_finalizer_meets_a_back_off_and_no_orphan() {
    let mut env = Env::new().await;
    env.add_nodes(&["node-a"]).await;
    env.start(Ctl::default()).await;
    let uid = env.create_ready("web").await;
    // managedFields times have whole seconds: let the creator's second
    // pass, so the janitor's entry is the latest (a pure removal owns no
    // field; its annotation does).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (removals, adds) = fight_with(
        &env,
        "finalizer-janitor",
        |s| !finalizers(s).contains(&FINALIZER.into()),
        |n| {
            json!({"metadata": {
                "finalizers": null,
                "annotations": {"janitor.example.com/cleaned": n.to_string()},
            }})
        },
    )
    .await;
    assert_eq!(
        adds, 1,
        "one quick re-add, then the back-off holds the next (the third add in the window)"
    );
    assert_eq!(
        removals, 2,
        "the janitor removed the first add and the re-add"
    );
    assert_one_fight_warning(&env, "finalizer-janitor", "removing").await;
    assert!(env.cloud.get(&uid).is_some(), "the load balancer stays");
    // Deleted while our add waits (nothing holds it): the load balancer is
    // still deleted.
    env.delete("web").await;
    env.wait_service("web", "is gone", |s| s.is_none()).await;
    wait_for("the load balancer is deleted", || {
        let gone = env.cloud.get(&uid).is_none();
        async move { gone }
    })
    .await;
    assert!(env.orphans().await.is_empty());
    env.stop().await;
}

//! service-lb-cleanup in the real binary: a SIGKILL between "load balancer
//! deleted" and "finalizer removed" is recovered by the next manager, and
//! the controller's flags fail loudly.

mod support;

use std::time::Duration;

use cloud_sim::{CloudSim, Config as CloudConfig, HangFault, OpFaults, Operation};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::{KubeSim, RequestFilter, SimConfig};
use support::{Manager, free_port, http_get};
use test_support::objects;

const USER: &str = "protection-manager";
const FINALIZER: &str = "protection-manager.io/load-balancer-cleanup";
const CLASS: &str = "protection-manager.io/load-balancer";
const DEADLINE: Duration = Duration::from_secs(120);

fn start_manager(sim: &KubeSim, cloud: &CloudSim, admin: u16) -> Manager {
    let kubeconfig = sim.kubeconfig_for(USER).expect("kubeconfig");
    let args = [
        "run".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect=false".into(),
        "--controllers=service-lb-cleanup".into(),
        format!("--lb-provider-endpoint={}", cloud.url()),
        "--kube-api-qps=0".into(),
        "--ping-interval=1s".into(),
    ];
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Manager::start(&refs)
}

async fn wait_for(what: &str, m: &Manager, f: impl AsyncFnMut() -> bool) {
    m.wait_for(DEADLINE, Duration::from_millis(100), what, f)
        .await;
}

async fn ready(admin: u16) -> bool {
    tokio::task::spawn_blocking(move || {
        http_get(&format!("http://127.0.0.1:{admin}/readyz")).is_some_and(|(c, _)| c == 200)
    })
    .await
    .unwrap_or(false)
}

fn finalized(s: &Service) -> bool {
    s.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

fn has_ingress(s: &Service) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_lb_deleted_and_finalizer_removed_is_recovered() {
    eprintln!(
        "VERIFIES: the manager is SIGKILLed while cloud-sim holds a DELETE that already removed \
         the load balancer; the next manager removes the finalizer without deleting again, the \
         Service goes and no load balancer is orphaned"
    );
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let cloud = CloudSim::start(CloudConfig::default())
        .await
        .expect("cloud-sim");
    let client = sim.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    for n in ["node-a", "node-b"] {
        nodes
            .create(&PostParams::default(), &objects::node(n))
            .await
            .expect("create node");
    }
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = objects::lb_service("default", "web", Some(CLASS));
    let uid = services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service")
        .metadata
        .uid
        .expect("uid");

    let admin = free_port();
    let m = start_manager(&sim, &cloud, admin);
    wait_for(
        "the Service has its finalizer and ingress",
        &m,
        async || {
            services
                .get_opt("web")
                .await
                .ok()
                .flatten()
                .is_some_and(|s| finalized(&s) && has_ingress(&s))
        },
    )
    .await;
    assert!(cloud.get(&uid).is_some());

    // The cloud deletes the load balancer, then never answers.
    cloud
        .faults()
        .set_operation(
            Operation::Delete,
            OpFaults {
                hang: Some(HangFault {
                    rate: 1.0,
                    max_ms: None,
                    after_commit: true,
                }),
                ..OpFaults::default()
            },
        )
        .expect("faults");
    services
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete service");
    wait_for(
        "the load balancer is deleted and the call hangs",
        &m,
        async || cloud.get(&uid).is_none() && cloud.stats().operation(Operation::Delete).hung >= 1,
    )
    .await;
    let s = services.get("web").await.expect("still there");
    assert!(finalized(&s), "the finalizer is still on");
    drop(m); // SIGKILL
    cloud.faults().clear();

    let since = sim.requests().last_seq();
    let deletes_before = cloud.stats().operation(Operation::Delete).total;
    let m = start_manager(&sim, &cloud, admin);
    wait_for("the Service is gone", &m, async || {
        services.get_opt("web").await.ok().flatten().is_none()
    })
    .await;
    assert!(cloud.inventory().is_empty(), "no orphaned load balancer");
    assert_eq!(
        cloud.stats().operation(Operation::Delete).total,
        deletes_before,
        "the load balancer was already gone: no second DELETE"
    );
    let writes: Vec<_> = sim
        .requests()
        .records(
            &RequestFilter::default()
                .user(USER)
                .resource("services")
                .since(since),
        )
        .into_iter()
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .collect();
    assert_eq!(
        writes.len(),
        1,
        "one patch removes the finalizer: {writes:#?}"
    );
    assert_eq!(
        (writes[0].verb.as_str(), writes[0].subresource.as_str()),
        ("patch", "status")
    );
    wait_for("the manager is ready", &m, async || ready(admin).await).await;
}

#[test]
fn lb_flags_fail_with_clear_messages() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--lb-class=Not A Class"],
            "invalid --lb-class \"Not A Class\"",
        ),
        (
            &["run", "--lb-provider-endpoint=not a url"],
            "load-balancer endpoint \"not a url\" is not a URL",
        ),
        (
            &[
                "run",
                "--lb-provider-endpoint=http://127.0.0.1:9/",
                "--lb-provider-token-file=/nonexistent/lb-token",
            ],
            "/nonexistent/lb-token",
        ),
        (
            &["run", "--lb-provider-request-timeout=10"],
            "invalid duration \"10\"",
        ),
    ];
    support::assert_each_refused(cases);
}

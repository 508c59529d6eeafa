//! kube-sim against the real kube-apiserver v1.36.3 (crate control-plane) on
//! inputs a real server refuses (issue 27, bug 8): the same request goes to
//! both and must get the same answer (status code, reason, message). The
//! real server is the judge: where kube-sim accepted, the manager could be
//! tested on states no cluster can hold (a Lease whose duration no client
//! decodes, a Service whose load balancer has an address that is no IP).

use control_plane::{Config, ControlPlane};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube_sim::{KubeSim, SimConfig};
use serde_json::{Value, json};

/// The outcome of a request as a test compares it: `Ok` or the refusal's
/// (code, reason, message).
type Outcome = Result<(), (u16, String, String)>;

fn outcome<T>(r: Result<T, kube::Error>) -> Outcome {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.reason, s.message)),
        Err(e) => panic!("no answer from the server: {e}"),
    }
}

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

async fn clients() -> (
    KubeSim,
    std::sync::Arc<ControlPlane>,
    kube::Client,
    kube::Client,
) {
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let cp = ControlPlane::shared("differential", Config::default)
        .await
        .expect("real control plane");
    let sim_client = sim.client().await;
    let real_client = cp.client().await.expect("real client");
    (sim, cp, sim_client, real_client)
}

/// What both servers answer to creating a Lease with this duration.
async fn lease_outcomes(
    sim: &kube::Client,
    real: &kube::Client,
    name: &str,
    seconds: Value,
) -> (Outcome, Outcome) {
    let lease = object(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": seconds}
    }));
    let mut out = Vec::new();
    for c in [sim, real] {
        let leases = api(c, "coordination.k8s.io", "v1", "Lease", "leases");
        out.push(outcome(leases.create(&PostParams::default(), &lease).await));
    }
    (out.remove(0), out.remove(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_durations_beyond_int32_are_refused_as_the_real_server_refuses_them() {
    let (_sim, _cp, sim, real) = clients().await;
    for (i, seconds) in [
        json!(2_147_483_648_i64),
        json!(9_007_199_254_740_993_i64),
        json!(-2_147_483_649_i64),
        json!(1.5),
        json!(0),
        json!(2_147_483_647_i64),
    ]
    .into_iter()
    .enumerate()
    {
        let (s, r) = lease_outcomes(&sim, &real, &format!("lease-{i}"), seconds.clone()).await;
        assert_eq!(
            s, r,
            "leaseDurationSeconds {seconds}: kube-sim (left) and kube-apiserver (right) differ"
        );
        println!("leaseDurationSeconds {seconds}: both {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_status_ingress_addresses_are_checked_as_the_real_server_checks_them() {
    let (_sim, _cp, sim, real) = clients().await;
    for (i, ingress) in [
        json!({"ip": "not-an-ip"}),
        json!({"ip": "010.1.2.3"}),
        json!({"ip": "::ffff:1.2.3.4"}),
        json!({"ip": "10.1.2.3"}),
        json!({"ip": "2001:db8::1"}),
        json!({"hostname": "Not_A.Host"}),
        json!({"hostname": "10.1.2.3"}),
        json!({"hostname": "lb.example.com"}),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("lb-{i}");
        let mut out = Vec::new();
        for c in [&sim, &real] {
            let services = api(c, "", "v1", "Service", "services");
            let svc = object(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
            }));
            let mut live = services
                .create(&PostParams::default(), &svc)
                .await
                .expect("create service");
            live.data["status"] = json!({"loadBalancer": {"ingress": [ingress.clone()]}});
            out.push(outcome(
                services
                    .replace_status(&name, &PostParams::default(), &live)
                    .await,
            ));
        }
        assert_eq!(
            out[0], out[1],
            "ingress {ingress}: kube-sim (left) and kube-apiserver (right) differ"
        );
        println!("ingress {ingress}: both {:?}", out[0]);
    }
}

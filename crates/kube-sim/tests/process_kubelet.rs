//! kube-sim's kubelet as a process (`kube-sim kubelet`) on the real control
//! plane (kube-apiserver with the Node authorizer and NodeRestriction,
//! kube-controller-manager, kube-scheduler v1.36.3), and the same pod
//! lifecycle on kube-sim's in-process kubelets: one implementation behind
//! two clients must behave the same (a differential test), and what only a
//! process can show (the node's own identity from a TLS bootstrap, tokens
//! from the TokenRequest API, `kubectl logs` through the API server,
//! containers that survive a kubelet crash) is checked on the real server.

mod common;

use std::path::Path;
use std::time::Duration;

use common::cluster::{cluster, kubectl, ok, within};
use common::real::{Bed, KUBELET, NODE, real};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn container_status(p: &Pod) -> k8s_openapi::api::core::v1::ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first().cloned())
        .unwrap_or_default()
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
}

/// What a user sees of a process pod's life, compared across the beds.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    phase_running: String,
    restart_count_after_kill: i32,
    last_exit_after_kill: i32,
    last_reason_after_kill: String,
    previous_log_kept: bool,
    exit_on_delete: i32,
    reason_on_delete: String,
}

/// A `sh` container with a Secret and a ConfigMap mounted, env from both and
/// from the downward API, a readiness probe, a TERM trap: it prints what it
/// sees, is killed (the kubelet restarts it), and is deleted (SIGTERM, exit
/// 0).
async fn process_pod_life(bed: &Bed) -> Seen {
    let ns = bed.namespace("life").await;
    let client = bed.client().await;
    let kc = bed.kubeconfig();
    let k = kubectl();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}, "stringData": {"password": "hunter2"}});
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}, "data": {"greeting": "hello"}});
    for o in [&secret, &cm] {
        ok(&k, &kc, None, &["apply", "-f", "-"], Some(&o.to_string())).await;
    }
    // The mount paths are arguments of their own, as the kubelet rewrites
    // them (the containers share the host's file system).
    let script = "trap 'echo bye; exit 0' TERM; echo \"pod=$POD_NAME ns=$POD_NAMESPACE pw=$PW greeting=$(cat $1) secret=$(cat $2)\"; while true; do sleep 0.2; done";
    let p = pod(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "life", "namespace": ns},
        "spec": {
            "terminationGracePeriodSeconds": 10,
            "containers": [{
                "name": "sh", "image": "sh", "command": ["sh", "-c", script, "sh", "/etc/c/greeting", "/etc/s/password"],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
                ],
                "volumeMounts": [{"name": "s", "mountPath": "/etc/s"}, {"name": "c", "mountPath": "/etc/c"}],
                "readinessProbe": {"exec": {"command": ["sh", "-c", "true"]}, "periodSeconds": 1},
            }],
            "volumes": [{"name": "s", "secret": {"secretName": "s"}}, {"name": "c", "configMap": {"name": "c"}}],
        },
    }));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &p)
        .await
        .unwrap_or_else(|e| panic!("{}: creating the pod: {e}", bed.name()));
    let running = within(90, "the pod to be Ready", || async {
        pods.get("life").await.ok().filter(ready)
    })
    .await;
    let want = format!("pod=life ns={ns} pw=hunter2 greeting=hello secret=hunter2");
    within(30, "the pod's log to show its env and files", || async {
        let out = ok(&k, &kc, None, &["-n", &ns, "logs", "life"], None).await;
        out.contains(&want).then_some(out)
    })
    .await;
    let pids = bed.kill(&ns, "life").await;
    assert_eq!(pids.len(), 1, "{}: {pids:?}", bed.name());
    let restarted = within(60, "the container to be restarted and Ready", || async {
        pods.get("life")
            .await
            .ok()
            .filter(|p| ready(p) && container_status(p).restart_count == 1)
    })
    .await;
    let last = container_status(&restarted)
        .last_state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("{}: no lastState.terminated", bed.name()));
    let previous = ok(
        &k,
        &kc,
        None,
        &["-n", &ns, "logs", "life", "--previous"],
        None,
    )
    .await;
    let new_pid = bed
        .pod_process(&ns, "life")
        .await
        .and_then(|p| p.containers[0].pid)
        .unwrap_or_else(|| panic!("{}: no pid after the restart", bed.name()));
    assert_ne!(new_pid, pids[0], "{}: a new process", bed.name());
    let gone = last_state_before_delete(&pods, "life").await;
    let term = container_status(&gone)
        .state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("{}: no terminated state: {gone:?}", bed.name()));
    assert!(
        !Path::new(&format!("/proc/{new_pid}")).exists(),
        "{}: process {new_pid} still alive",
        bed.name()
    );
    Seen {
        phase_running: running.status.and_then(|s| s.phase).unwrap_or_default(),
        restart_count_after_kill: container_status(&restarted).restart_count,
        last_exit_after_kill: last.exit_code,
        last_reason_after_kill: last.reason.unwrap_or_default(),
        previous_log_kept: previous.contains(&want),
        exit_on_delete: term.exit_code,
        reason_on_delete: term.reason.unwrap_or_default(),
    }
}

/// Deletes `name` and watches it until it is gone; its last state.
async fn last_state_before_delete(api: &Api<Pod>, name: &str) -> Pod {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff();
    futures::pin_mut!(stream);
    let mut deleted = false;
    let mut last = None;
    let until = tokio::time::Instant::now() + Duration::from_secs(90);
    while let Ok(Some(ev)) = tokio::time::timeout_at(until, stream.next()).await {
        match ev {
            Ok(watcher::Event::InitDone) if !deleted => {
                api.delete(name, &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
                deleted = true;
            }
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => last = Some(p),
            Ok(watcher::Event::Delete(p)) => return p,
            _ => {}
        }
    }
    panic!("pod {name} was not deleted within 90s; last seen: {last:?}")
}

/// The same pod life on both kubelets: env (downward API, Secret key),
/// Secret and ConfigMap volumes, `kubectl logs` (through kube-apiserver to
/// the process kubelet's API), SIGKILL → restart with lastState 137 and the
/// previous log, deletion → SIGTERM → exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_kubelet_runs_a_pod_as_kube_sims_kubelet_does() {
    let _shared = KUBELET.read().await;
    let sim = Bed::Sim(cluster().await);
    let real = Bed::Real(real().await);
    let on_sim = process_pod_life(&sim).await;
    let on_real = process_pod_life(&real).await;
    assert_eq!(on_sim, on_real, "kube-sim's kubelet vs the process kubelet");
    assert_eq!(on_real.restart_count_after_kill, 1);
    assert_eq!(on_real.last_exit_after_kill, 137);
    assert_eq!(on_real.exit_on_delete, 0);
    assert!(on_real.previous_log_kept);
    println!("verified: the same pod life on both kubelets: {on_real:?}");
    if let Bed::Sim(s) = sim {
        s.shutdown().await;
    }
}

/// The node acts as itself: its client certificate came from a CSR the
/// controller manager approved and signed, its requests are
/// `system:node:<node>` in the audit log, and the pod's projected
/// ServiceAccount token (the ServiceAccount admission plugin's
/// `kube-api-access-*` volume) came from the TokenRequest API and
/// authenticates as the pod's ServiceAccount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_bootstraps_its_identity_and_tokens_come_from_token_requests() {
    let _shared = KUBELET.read().await;
    let real = real().await;
    let bed = Bed::Real(real.clone());
    let ns = bed.namespace("ident").await;
    let client = real.client().await;
    let csrs: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        Api::all(client.clone());
    let csr = csrs
        .list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .into_iter()
        .find(|c| c.name_any().starts_with(&format!("node-csr-{NODE}-")))
        .unwrap_or_else(|| panic!("no CSR of node {NODE}"));
    assert_eq!(
        csr.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert!(
        csr.status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_some_and(|c| !c.0.is_empty()),
        "the CSR was signed"
    );
    let mark = real.cp.audit_log().mark();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &pod(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ident"},
            "spec": {"containers": [{"name": "sh", "image": "sh", "command": ["sh", "-c", "while true; do sleep 1; done"]}]},
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let p = within(90, "the pod to be Ready", || async {
        pods.get("ident").await.ok().filter(ready)
    })
    .await;
    let access = p
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name.starts_with("kube-api-access-")))
        .map(|v| v.name.clone())
        .unwrap_or_else(|| panic!("no kube-api-access volume: {p:?}"));
    let dir = bed
        .pod_process(&ns, "ident")
        .await
        .unwrap_or_else(|| panic!("the kubelet does not run pod ident"))
        .dir;
    let token_file = dir.join("volumes").join(&access).join("token");
    let token = std::fs::read_to_string(&token_file)
        .unwrap_or_else(|e| panic!("{}: {e}", token_file.display()));
    let ca = std::fs::read_to_string(dir.join("volumes").join(&access).join("ca.crt"))
        .unwrap_or_else(|e| panic!("ca.crt: {e}"));
    assert_eq!(
        ca.trim(),
        real.cp.ca_pem().trim(),
        "ca.crt is the cluster CA"
    );
    let kc = real
        .cp
        .write_token_kubeconfig(&format!("pod-token-{ns}"), token.trim())
        .unwrap_or_else(|e| panic!("{e}"));
    let out = ok(
        &kubectl(),
        &kc,
        None,
        &["auth", "whoami", "-o", "json"],
        None,
    )
    .await;
    assert!(
        out.contains(&format!("system:serviceaccount:{ns}:default")),
        "the token is the pod's ServiceAccount's: {out}"
    );
    let events = real.cp.audit_log().events_since(mark);
    let node_user = format!("system:node:{NODE}");
    let by_node = |verb: &str, resource: &str, sub: &str| {
        events.iter().any(|e| {
            e.user.username == node_user
                && e.verb == verb
                && e.object_ref
                    .as_ref()
                    .is_some_and(|o| o.resource == resource && o.subresource == sub)
                && e.code() < 300
        })
    };
    assert!(
        by_node("create", "serviceaccounts", "token"),
        "a TokenRequest by {node_user}"
    );
    assert!(
        by_node("patch", "pods", "status"),
        "pod status written by {node_user}"
    );
    println!(
        "verified: node client certificate from CSR {}; TokenRequest and pods/status as {node_user}; the pod's token is system:serviceaccount:{ns}:default",
        csr.name_any()
    );
}

/// A crash of the kubelet process leaves its containers running (as
/// containerd's shims keep them); the restarted kubelet adopts them (same
/// pid, no restart counted) and still stops them gracefully; a pod deleted
/// while the kubelet was down has its container killed at the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_survive_a_kubelet_crash_and_are_adopted() {
    let _alone = KUBELET.write().await;
    let real = real().await;
    let bed = Bed::Real(real.clone());
    let ns = bed.namespace("adopt").await;
    let client = real.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for name in ["keep", "orphan"] {
        pods.create(
            &PostParams::default(),
            &pod(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": [{"name": "sh", "image": "sh", "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]}]},
            })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
    for name in ["keep", "orphan"] {
        within(90, "the pods to be Ready", || async {
            pods.get(name).await.ok().filter(ready)
        })
        .await;
    }
    let pid_of = async |name: &str| {
        bed.pod_process(&ns, name)
            .await
            .and_then(|p| p.containers[0].pid)
            .unwrap_or_else(|| panic!("no pid for {name}"))
    };
    let keep = pid_of("keep").await;
    let orphan = pid_of("orphan").await;
    real.kubelet
        .signal(control_plane::Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("{e}"));
    within(10, "the kubelet to be gone", || async {
        real.kubelet.exited()
    })
    .await;
    assert!(
        Path::new(&format!("/proc/{keep}")).exists(),
        "the container outlived the kubelet"
    );
    pods.delete("orphan", &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    real.kubelet.restart().unwrap_or_else(|e| panic!("{e}"));
    within(60, "the kubelet to adopt the container", || async {
        let p = bed.pod_process(&ns, "keep").await?;
        (p.containers.first()?.pid == Some(keep)).then_some(())
    })
    .await;
    within(30, "the orphan's container to be killed", || async {
        (!Path::new(&format!("/proc/{orphan}")).exists()).then_some(())
    })
    .await;
    let p = pods.get("keep").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        container_status(&p).restart_count,
        0,
        "adopted, not restarted"
    );
    let gone = last_state_before_delete(&pods, "keep").await;
    let term = container_status(&gone)
        .state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("no terminated state: {gone:?}"));
    assert_eq!(term.exit_code, 0, "the adopted container got SIGTERM");
    assert!(!Path::new(&format!("/proc/{keep}")).exists());
    println!(
        "verified: kubelet SIGKILL → container {keep} kept running and adopted (restartCount 0), stopped with SIGTERM on deletion; the container of a pod deleted meanwhile ({orphan}) killed at the restart"
    );
}

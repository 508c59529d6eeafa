//! The opt-in cluster emulation driven by real clients: `kubectl rollout`,
//! `helm --wait`, pods run as processes by the emulated kubelet (the
//! `kube-sim` binary itself plays the container), the chaos signal hook,
//! graceful deletion.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::{cluster, kubectl, ok, within};
use common::tool;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: "nginx:1.27"}]}
"#;

fn pods_of(list: &[Pod], label: &str) -> Vec<Pod> {
    list.iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get("app").map(String::as_str) == Some(label))
        })
        .cloned()
        .collect()
}

/// Upstream deployment controller behaviour as `kubectl rollout` sees it:
/// a ReplicaSet `<name>-<pod-template-hash>`, RollingUpdate bounded by
/// maxSurge/maxUnavailable, revisions for `rollout undo`, `kubectl scale`,
/// and background cascading deletion of ReplicaSets and pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rollout_undo_scale_and_cascading_delete_with_kubectl() {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    let client = sim.client().await;
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(WEB)).await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/web", "--timeout=120s"],
        None,
    )
    .await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let d = deps.get("web").await.unwrap_or_else(|e| panic!("{e}"));
    let st = d.status.clone().unwrap_or_default();
    assert_eq!(st.replicas, Some(3));
    assert_eq!(st.ready_replicas, Some(3));
    assert_eq!(st.available_replicas, Some(3));
    assert_eq!(st.observed_generation, d.metadata.generation);
    let progressing = st
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap_or_else(|| panic!("no Progressing condition"));
    assert_eq!(
        progressing.reason.as_deref(),
        Some("NewReplicaSetAvailable")
    );
    let sets = rss
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items;
    assert_eq!(sets.len(), 1);
    let hash = sets[0]
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash").cloned())
        .unwrap_or_default();
    assert_eq!(
        sets[0].metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    let running = pods_of(
        &pods
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .items,
        "web",
    );
    assert_eq!(running.len(), 3);
    for p in &running {
        assert!(
            p.metadata
                .name
                .as_deref()
                .unwrap_or("")
                .starts_with(&format!("web-{hash}-"))
        );
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(kube_sim::cluster::DEFAULT_NODE)
        );
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
    }
    println!("verified: rollout of 3 replicas, ReplicaSet web-{hash}, pods scheduled and Running");

    // A rolling update never has more than replicas + maxSurge pods nor
    // fewer than replicas - maxUnavailable ready ones.
    let watch_pods = pods.clone();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
    let observer = tokio::spawn(async move {
        let mut max_total = 0usize;
        let mut min_ready = usize::MAX;
        let stream =
            watcher(watch_pods, watcher::Config::default().labels("app=web")).default_backoff();
        futures::pin_mut!(stream);
        let mut seen: std::collections::BTreeMap<String, Pod> = Default::default();
        let mut measuring = false;
        loop {
            let ev = tokio::select! {
                _ = &mut done_rx => break,
                ev = stream.next() => match ev {
                    Some(Ok(ev)) => ev,
                    _ => continue,
                },
            };
            match ev {
                watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                    seen.insert(p.metadata.name.clone().unwrap_or_default(), p);
                }
                watcher::Event::Delete(p) => {
                    seen.remove(p.metadata.name.as_deref().unwrap_or(""));
                }
                watcher::Event::InitDone => measuring = true,
                watcher::Event::Init => seen.clear(),
            }
            if !measuring {
                continue;
            }
            let live: Vec<&Pod> = seen
                .values()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            max_total = max_total.max(live.len());
            let ready = live
                .iter()
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .count();
            min_ready = min_ready.min(ready);
        }
        (max_total, min_ready)
    });
    // Let the observer see the initial pods first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    ok(
        &k,
        &kc,
        None,
        &["set", "image", "deployment/web", "c=nginx:1.28"],
        None,
    )
    .await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/web", "--timeout=120s"],
        None,
    )
    .await;
    let _ = done_tx.send(());
    let (max_total, min_ready) = observer.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        max_total <= 4,
        "maxSurge 1: at most 4 pods, saw {max_total}"
    );
    assert_eq!(
        min_ready, 3,
        "maxUnavailable 0: never fewer than 3 ready pods"
    );
    println!(
        "verified: rolling update kept 3..=4 pods with 3 ready (max {max_total}, min ready {min_ready})"
    );
    let sets = rss
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items;
    assert_eq!(sets.len(), 2);
    let replicas: Vec<i32> = sets
        .iter()
        .map(|r| r.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1))
        .collect();
    assert!(
        replicas.contains(&0) && replicas.contains(&3),
        "{replicas:?}"
    );
    let history = ok(
        &k,
        &kc,
        None,
        &["rollout", "history", "deployment/web"],
        None,
    )
    .await;
    assert!(history.contains('1') && history.contains('2'), "{history}");
    ok(&k, &kc, None, &["rollout", "undo", "deployment/web"], None).await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/web", "--timeout=120s"],
        None,
    )
    .await;
    let d = deps.get("web").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        d.metadata
            .annotations
            .unwrap_or_default()
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("3")
    );
    let image = d
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].image.clone().unwrap_or_default());
    assert_eq!(image.as_deref(), Some("nginx:1.27"));
    println!("verified: set image and rollout undo (revision 3), two ReplicaSets kept");

    // A paused Deployment takes template changes without rolling them out.
    ok(&k, &kc, None, &["rollout", "pause", "deployment/web"], None).await;
    ok(
        &k,
        &kc,
        None,
        &["set", "image", "deployment/web", "c=nginx:1.29"],
        None,
    )
    .await;
    let seen = within(
        60,
        "the controller to observe the paused change",
        || async {
            let d = deps.get("web").await.ok()?;
            let st = d.status.clone()?;
            let paused = st.conditions.iter().flatten().any(|c| {
                c.type_ == "Progressing" && c.reason.as_deref() == Some("DeploymentPaused")
            });
            (paused && st.observed_generation == d.metadata.generation).then_some(d)
        },
    )
    .await;
    let progressing = seen
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap_or_default();
    assert_eq!(
        (progressing.status.as_str(), progressing.message.as_deref()),
        ("Unknown", Some("Deployment is paused"))
    );
    assert_eq!(
        rss.list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .items
            .len(),
        2,
        "no new ReplicaSet while paused"
    );
    ok(
        &k,
        &kc,
        None,
        &["rollout", "resume", "deployment/web"],
        None,
    )
    .await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/web", "--timeout=120s"],
        None,
    )
    .await;
    assert_eq!(
        rss.list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .items
            .len(),
        3
    );
    println!(
        "verified: rollout pause (Progressing Unknown DeploymentPaused, no new ReplicaSet) and resume"
    );

    ok(
        &k,
        &kc,
        None,
        &["scale", "deployment/web", "--replicas=1"],
        None,
    )
    .await;
    within(60, "one web pod after scaling down", || async {
        let l = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        (l.items.len() == 1).then_some(())
    })
    .await;
    ok(&k, &kc, None, &["delete", "deployment", "web"], None).await;
    within(
        60,
        "ReplicaSets and pods of the deleted Deployment to go",
        || async {
            let r = rss.list(&ListParams::default()).await.ok()?;
            let p = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            (r.items.is_empty() && p.items.is_empty()).then_some(())
        },
    )
    .await;
    println!(
        "verified: kubectl scale, and deleting the Deployment removes its ReplicaSets and pods"
    );
    sim.shutdown().await;
}

fn kube_sim_pod(name: &str, grace: i64) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "containers": [{
                "name": "api",
                "image": "ghcr.io/example/kube-sim:1.0",
                "args": ["--port", "8080"],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 2, "failureThreshold": 5},
            }],
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

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

/// Watches `name` until it is deleted; returns the last state seen before.
async fn last_state_before_delete(api: &Api<Pod>, name: &str, delete: DeleteParams) -> Pod {
    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff();
    futures::pin_mut!(stream);
    let mut last: Option<Pod> = None;
    let mut deleted = false;
    let until = tokio::time::Instant::now() + Duration::from_secs(90);
    while let Ok(Some(ev)) = tokio::time::timeout_at(until, stream.next()).await {
        match ev {
            Ok(watcher::Event::InitDone) if !deleted => {
                api.delete(name, &delete)
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

/// The kubelet runs a mapped image as a process: downward-API env, remapped
/// container port, readiness/liveness probes, `kubectl logs`; a SIGKILL from
/// the chaos hook is a crash the kubelet restarts (restartCount, lastState
/// exit code 137, `--previous` log); deletion sends SIGTERM and the process
/// exits cleanly before the pod goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_pod_probes_sigkill_restart_and_graceful_deletion() {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &kube_sim_pod("sim", 30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    within(60, "the pod to be Ready", || async {
        pods.get("sim").await.ok().filter(ready)
    })
    .await;
    let proc_ = sim
        .pod_process("default", "sim")
        .unwrap_or_else(|| panic!("no process for pod sim"));
    let c = &proc_.containers[0];
    assert!(c.process, "the kube-sim image runs as a process");
    let pid = c.pid.unwrap_or_else(|| panic!("no pid"));
    let host_port = *c
        .host_ports
        .get(&8080)
        .unwrap_or_else(|| panic!("no host port for 8080"));
    assert_ne!(host_port, 8080);
    // The process serves on the remapped port.
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", host_port))
        .await
        .unwrap_or_else(|e| panic!("connecting to the pod's host port: {e}"));
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        buf.starts_with("HTTP/1.1 200") && buf.contains("gitVersion"),
        "{buf}"
    );
    let logs = ok(&kubectl(), &kc, None, &["logs", "sim"], None).await;
    assert!(
        logs.contains(&format!("kube-sim serving on http://127.0.0.1:{host_port}")),
        "{logs}"
    );
    let pod = pods.get("sim").await.unwrap_or_else(|e| panic!("{e}"));
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    assert!(ip.starts_with("10.244."), "{ip}");
    println!(
        "verified: process pod Ready via httpGet probe on remapped port {host_port}, logs, podIP {ip}"
    );

    // Chaos: SIGKILL through the admin API.
    let (code, body) = common::raw(
        &sim,
        "POST",
        "/_sim/pods/default/sim/signal?sig=KILL",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&pid.to_string()), "{body}");
    let restarted = within(60, "the container to be restarted and Ready", || async {
        pods.get("sim")
            .await
            .ok()
            .filter(|p| ready(p) && container_status(p).restart_count == 1)
    })
    .await;
    let last = container_status(&restarted)
        .last_state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("no lastState.terminated"));
    assert_eq!(last.exit_code, 137);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    let new_pid = sim
        .pod_process("default", "sim")
        .and_then(|p| p.containers[0].pid)
        .unwrap_or_else(|| panic!("no pid after restart"));
    assert_ne!(new_pid, pid);
    let previous = ok(&kubectl(), &kc, None, &["logs", "sim", "--previous"], None).await;
    assert!(previous.contains("kube-sim serving on"), "{previous}");
    println!(
        "verified: SIGKILL (pid {pid}) → restartCount 1, lastState exit 137, new pid {new_pid}, logs --previous"
    );

    // Graceful deletion: SIGTERM, the process shuts down and exits 0.
    let gone = last_state_before_delete(&pods, "sim", DeleteParams::default()).await;
    let term = container_status(&gone)
        .state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("no terminated state before deletion: {gone:?}"));
    assert_eq!(term.exit_code, 0, "kube-sim exits 0 on SIGTERM");
    assert!(gone.metadata.deletion_timestamp.is_some());
    assert!(
        !Path::new(&format!("/proc/{new_pid}")).exists(),
        "process {new_pid} still alive"
    );
    within(30, "the kubelet to forget the pod", || async {
        sim.pod_process("default", "sim").is_none().then_some(())
    })
    .await;
    println!("verified: deletion → SIGTERM → exit 0 → pod removed, process gone");
    sim.shutdown().await;
}

/// A process that ignores SIGTERM is killed with SIGKILL once the grace
/// period is over (exit code 137), then the pod is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ignored_means_sigkill_after_the_grace_period() {
    let sim = cluster().await;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stubborn"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "sh", "image": "sh", "command": ["sh", "-c", "trap '' TERM; echo started; while true; do sleep 1; done"]}],
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    within(60, "the shell to run", || async {
        pods.get("stubborn").await.ok().filter(ready)
    })
    .await;
    let pid = sim
        .pod_process("default", "stubborn")
        .and_then(|p| p.containers[0].pid)
        .unwrap_or_else(|| panic!("no pid"));
    let gone = last_state_before_delete(&pods, "stubborn", DeleteParams::default()).await;
    let term = container_status(&gone)
        .state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("no terminated state: {gone:?}"));
    assert_eq!(term.exit_code, 137, "SIGKILL after the grace period");
    assert_eq!(
        gone.metadata.deletion_grace_period_seconds,
        Some(0),
        "the kubelet's final delete has grace 0"
    );
    assert_eq!(
        gone.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    println!(
        "verified: SIGTERM ignored → SIGKILL after 2s grace → exit 137, phase Failed, pod removed"
    );
    sim.shutdown().await;
}

fn write(path: &Path, text: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// A chart whose Deployment runs the kube-sim binary (probed on /readyz)
/// and whose post-install/post-upgrade hook Job runs `kube-sim --version`.
fn chart(dir: &Path) -> PathBuf {
    let c = dir.join("simchart");
    write(
        &c.join("Chart.yaml"),
        "apiVersion: v2\nname: simchart\nversion: 0.1.0\n",
    );
    write(&c.join("values.yaml"), "replicas: 2\nmessage: one\n");
    write(
        &c.join("templates/deployment.yaml"),
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: api
        image: example.com/kube-sim:latest
        args: ["--port=8080"]
        env: [{name: MESSAGE, value: {{ .Values.message | quote }}}]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /readyz, port: http}, periodSeconds: 1}
"#,
    );
    write(
        &c.join("templates/hook.yaml"),
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-check
  annotations:
    helm.sh/hook: post-install,post-upgrade
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: check
        image: example.com/kube-sim:latest
        args: ["--version"]
"#,
    );
    c
}

fn image_env(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers[0].env.as_ref())
        .and_then(|e| e.first())
        .and_then(|e| e.value.clone())
        .unwrap_or_default()
}

async fn helm_cycle(bin: PathBuf, tag: &str) {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let dir = std::env::temp_dir().join(format!(
        "kube-sim-cluster-helm-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let c = chart(&dir);
    let chart = c.display().to_string();
    let client = sim.client().await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), "default");
    let check = |d: Deployment, msg: &str| {
        let st = d.status.clone().unwrap_or_default();
        assert_eq!(st.ready_replicas, Some(2), "{st:?}");
        assert_eq!(st.updated_replicas, Some(2), "{st:?}");
        assert_eq!(image_env(&d), msg);
    };
    ok(
        &bin,
        &kc,
        Some(&dir),
        &["install", "rel", &chart, "--wait", "--timeout", "180s"],
        None,
    )
    .await;
    check(
        deps.get("rel").await.unwrap_or_else(|e| panic!("{e}")),
        "one",
    );
    assert!(
        jobs.get_opt("rel-check")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none(),
        "hook-succeeded deletes the hook Job"
    );
    println!(
        "verified ({tag}): install --wait with a hook Job run to completion by the job controller and kubelet"
    );
    ok(
        &bin,
        &kc,
        Some(&dir),
        &[
            "upgrade",
            "rel",
            &chart,
            "--set",
            "message=two",
            "--wait",
            "--timeout",
            "180s",
        ],
        None,
    )
    .await;
    check(
        deps.get("rel").await.unwrap_or_else(|e| panic!("{e}")),
        "two",
    );
    println!("verified ({tag}): upgrade --wait rolled the Deployment");
    ok(
        &bin,
        &kc,
        Some(&dir),
        &["rollback", "rel", "1", "--wait", "--timeout", "180s"],
        None,
    )
    .await;
    check(
        deps.get("rel").await.unwrap_or_else(|e| panic!("{e}")),
        "one",
    );
    println!("verified ({tag}): rollback --wait");
    ok(
        &bin,
        &kc,
        Some(&dir),
        &["uninstall", "rel", "--wait", "--timeout", "120s"],
        None,
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    within(60, "the release's pods to go", || async {
        let l = pods
            .list(&ListParams::default().labels("app=rel"))
            .await
            .ok()?;
        l.items.is_empty().then_some(())
    })
    .await;
    println!("verified ({tag}): uninstall removes the pods");
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm4_install_upgrade_rollback_wait() {
    helm_cycle(tool("HELM4", ".tools/bin/helm4"), "helm4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm3_install_upgrade_rollback_wait() {
    helm_cycle(tool("HELM3", ".tools/bin/helm3"), "helm3").await;
}

/// A failing liveness probe (exec) gets the container killed and restarted
/// (`Unhealthy` and `Killing` events, restartCount, lastState exit 143); the
/// second crash in a row waits in CrashLoopBackOff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_failure_restarts_then_crash_loop_back_off() {
    let sim = cluster().await;
    let client = sim.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "flaky"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "sh", "image": "sh",
                "command": ["sh", "-c", "touch \"$HOME/healthy\"; sleep 2; rm \"$HOME/healthy\"; sleep 1000"],
                "livenessProbe": {"exec": {"command": ["sh", "-c", "test -f \"$HOME/healthy\""]}, "periodSeconds": 1, "failureThreshold": 1},
            }],
        },
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let restarted = within(60, "a restart after the liveness probe failed", || async {
        pods.get("flaky")
            .await
            .ok()
            .filter(|p| container_status(p).restart_count >= 1)
    })
    .await;
    let last = container_status(&restarted)
        .last_state
        .and_then(|s| s.terminated)
        .unwrap_or_else(|| panic!("no lastState.terminated"));
    assert_eq!(last.exit_code, 143, "the liveness kill starts with SIGTERM");
    let waiting = within(60, "CrashLoopBackOff after the second failure", || async {
        pods.get("flaky").await.ok().and_then(|p| {
            container_status(&p)
                .state
                .and_then(|s| s.waiting)
                .filter(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
        })
    })
    .await;
    assert!(
        waiting
            .message
            .unwrap_or_default()
            .contains("back-off 10s restarting failed container=sh")
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let evs = events
        .list(&ListParams::default().fields("involvedObject.name=flaky"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items;
    let has = |reason: &str, text: &str| {
        evs.iter().any(|e| {
            e.reason.as_deref() == Some(reason) && e.message.as_deref().unwrap_or("").contains(text)
        })
    };
    assert!(has("Unhealthy", "Liveness probe failed"), "{evs:?}");
    assert!(
        has("Killing", "failed liveness probe, will be restarted"),
        "{evs:?}"
    );
    assert!(
        has("BackOff", "Back-off restarting failed container sh"),
        "{evs:?}"
    );
    println!(
        "verified: liveness failure → Killing → restart (exit 143) → CrashLoopBackOff with back-off 10s"
    );
    sim.shutdown().await;
}

/// The emulated components are ordinary clients: 503s and 409s on a third
/// of their writes, watches ended every few events and forced 410s slow them
/// down but a rollout and a scale-up still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulated_loops_survive_api_faults() {
    use kube_sim::cluster::users;
    use kube_sim::{FaultAction, FaultRule};
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    let node = users::node(kube_sim::cluster::DEFAULT_NODE);
    let writers = [
        users::SCHEDULER,
        users::DEPLOYMENT_CONTROLLER,
        users::REPLICASET_CONTROLLER,
        node.as_str(),
    ];
    let faults = sim.faults();
    for u in writers {
        for verb in ["create", "update", "patch", "delete"] {
            faults.add(FaultRule::error(503).user(u).verb(verb).fraction(0.2));
            faults.add(FaultRule::error(409).user(u).verb(verb).fraction(0.1));
        }
    }
    for u in [users::CONTROLLER_MANAGER, users::SCHEDULER, node.as_str()] {
        faults.add(FaultRule::new(FaultAction::EndWatchAfterEvents { events: 3 }).user(u));
        faults.add(FaultRule::new(FaultAction::Gone).user(u).fraction(0.3));
    }
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(WEB)).await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/web", "--timeout=180s"],
        None,
    )
    .await;
    ok(
        &k,
        &kc,
        None,
        &["scale", "deployment/web", "--replicas=5"],
        None,
    )
    .await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/web", "--timeout=180s"],
        None,
    )
    .await;
    let injected: u64 = faults.rules().iter().map(|r| r.injected).sum();
    assert!(injected > 0, "faults were injected");
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let l = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.items.iter().filter(|p| ready(p)).count(), 5);
    println!(
        "verified: rollout and scale to 5 under {injected} injected faults on the emulated components"
    );
    faults.clear();
    sim.shutdown().await;
}

/// Pods that never become ready (running, with a readiness probe that
/// always fails): past `progressDeadlineSeconds` the Deployment reports
/// Progressing=False ProgressDeadlineExceeded and `kubectl rollout status`
/// fails as on a real cluster. (A container that exits at once was not
/// "never ready": under load the kubelet could report it Running and
/// Ready before its exit, and the rollout then succeeded.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_deadline_exceeded_fails_rollout_status() {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: stuck}\nspec:\n  progressDeadlineSeconds: 2\n  selector: {matchLabels: {app: stuck}}\n  template:\n    metadata: {labels: {app: stuck}}\n    spec: {containers: [{name: c, image: sh, command: [sh, -c, 'sleep 3600'], readinessProbe: {exec: {command: ['false']}, periodSeconds: 1}}]}\n",
    )).await;
    let (success, out, err) = common::cluster::run(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/stuck", "--timeout=90s"],
        None,
    )
    .await;
    assert!(!success, "{out}");
    assert!(err.contains("exceeded its progress deadline"), "{err}");
    let d: k8s_openapi::api::apps::v1::Deployment = Api::namespaced(sim.client().await, "default")
        .get("stuck")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let c = d
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap_or_default();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("ProgressDeadlineExceeded"))
    );
    println!(
        "verified: ProgressDeadlineExceeded → kubectl rollout status fails: {}",
        err.trim()
    );
    sim.shutdown().await;
}

/// Recreate: the old pods are all gone (not just Terminating) before the new
/// ReplicaSet's pods are created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_strategy_never_overlaps_old_and_new_pods() {
    let sim = cluster().await;
    let kc = sim.kubeconfig_path().to_path_buf();
    let k = kubectl();
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let manifest = |msg: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: rec}}\nspec:\n  replicas: 2\n  strategy: {{type: Recreate}}\n  selector: {{matchLabels: {{app: rec}}}}\n  template:\n    metadata: {{labels: {{app: rec}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers: [{{name: c, image: sh, command: [sh, -c, \"trap '' TERM; echo {msg}; while true; do sleep 1; done\"]}}]\n"
        )
    };
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(&manifest("one"))).await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/rec", "--timeout=120s"],
        None,
    )
    .await;
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
    let api = pods.clone();
    let observer = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default().labels("app=rec")).default_backoff();
        futures::pin_mut!(stream);
        let mut seen: std::collections::BTreeMap<String, Pod> = Default::default();
        let mut overlap = false;
        loop {
            let ev = tokio::select! {
                _ = &mut done_rx => break,
                ev = stream.next() => match ev { Some(Ok(ev)) => ev, _ => continue },
            };
            match ev {
                watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                    seen.insert(p.metadata.name.clone().unwrap_or_default(), p);
                }
                watcher::Event::Delete(p) => {
                    seen.remove(p.metadata.name.as_deref().unwrap_or(""));
                }
                watcher::Event::Init => seen.clear(),
                watcher::Event::InitDone => {}
            }
            let hashes: std::collections::BTreeSet<String> = seen
                .values()
                .filter_map(|p| {
                    p.metadata
                        .labels
                        .as_ref()?
                        .get("pod-template-hash")
                        .cloned()
                })
                .collect();
            overlap |= hashes.len() > 1;
        }
        overlap
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ok(&k, &kc, None, &["apply", "-f", "-"], Some(&manifest("two"))).await;
    ok(
        &k,
        &kc,
        None,
        &["rollout", "status", "deployment/rec", "--timeout=120s"],
        None,
    )
    .await;
    let _ = done_tx.send(());
    let overlap = observer.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!overlap, "old and new pods existed at the same time");
    let now = pods
        .list(&ListParams::default().labels("app=rec"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items;
    assert_eq!(now.len(), 2);
    println!(
        "verified: Recreate replaced 2 pods (old killed after their 1s grace) without overlap"
    );
    sim.shutdown().await;
}

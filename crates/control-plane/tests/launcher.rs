//! The launcher against the real binaries: what a test gets (a v1.36.3
//! server, an admin client, the Node and RBAC authorizers, an audit log, KCM
//! and the scheduler when asked), and that no process outlives its owner.

use std::time::Duration;

use control_plane::{Component, Config, ControlPlane, Signal};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn alive(pid: u32) -> bool {
    // A zombie is not alive: it has exited and waits to be reaped.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
        .unwrap_or(false)
}

async fn wait_gone(pids: &[u32]) -> Vec<u32> {
    for _ in 0..200 {
        if pids.iter().all(|p| !alive(*p)) {
            return Vec::new();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pids.iter().copied().filter(|p| alive(*p)).collect()
}

#[tokio::test]
async fn a_full_control_plane_answers_as_v1_36_3_with_kcm_and_scheduler_and_stops_when_dropped() {
    let cp = ControlPlane::start(
        Config::default()
            .with_kcm(["*"])
            .with_scheduler()
            .named("launcher-full"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client().await.unwrap_or_else(|e| panic!("{e}"));

    // /version answers the stamped version (helm's .Capabilities.KubeVersion).
    let v = client
        .apiserver_version()
        .await
        .unwrap_or_else(|e| panic!("/version: {e}"));
    assert_eq!(v.git_version, "v1.36.3");
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "36"));

    // KCM runs: its serviceaccount controller made `default` in a new namespace.
    let ns: Api<Namespace> = Api::all(client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some("launcher-kcm".into());
    ns.create(&PostParams::default(), &n)
        .await
        .unwrap_or_else(|e| panic!("namespace: {e}"));
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "launcher-kcm");
    let mut found = false;
    for _ in 0..200 {
        if sas.get_opt("default").await.ok().flatten().is_some() {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        found,
        "KCM's serviceaccount controller never created launcher-kcm/default"
    );

    // The Node authorizer: a node may not list Secrets.
    let node = cp
        .client_for("system:node:n1", &["system:nodes"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = Api::<Secret>::all(node)
        .list(&ListParams::default())
        .await
        .expect_err("a node listing every Secret must be refused");
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains("system:node:n1"), "{}", s.message);
        }
        other => panic!("expected a 403, got {other:?}"),
    }

    // The audit log names the user and user agent of each request.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "launcher-kcm");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "audited"}}))
        .unwrap_or_else(|e| panic!("{e}"));
    let mark = cp.audit_log().mark();
    cms.create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("configmap: {e}"));
    let events = cp.audit_log().events_since(mark);
    let create = events
        .iter()
        .find(|e| {
            e.verb == "create"
                && e.object_ref
                    .as_ref()
                    .is_some_and(|r| r.resource == "configmaps" && r.name == "audited")
        })
        .unwrap_or_else(|| panic!("no audit event for the create in {events:#?}"));
    assert_eq!(create.user.username, "admin");
    assert_eq!(create.code(), 201);

    let pids: Vec<u32> = [
        Component::Etcd,
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
    ]
    .iter()
    .map(|c| cp.pid(*c).unwrap_or_else(|| panic!("{c:?} has no pid")))
    .collect();
    let dir = cp.dir().to_path_buf();
    drop(cp);
    assert_eq!(wait_gone(&pids).await, Vec::<u32>::new(), "still running");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[tokio::test]
async fn etcd_restarts_keep_the_data_and_a_stalled_apiserver_answers_after_sigcont() {
    let cp = ControlPlane::start(Config::default().named("launcher-restart"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client().await.unwrap_or_else(|e| panic!("{e}"));
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "kept"}}))
        .unwrap_or_else(|e| panic!("{e}"));
    cms.create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    cp.restart(Component::Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cp.restart(Component::ApiServer)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client().await.unwrap_or_else(|e| panic!("{e}"));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(
        cms.get_opt("kept").await.ok().flatten().is_some(),
        "the ConfigMap did not survive the restarts"
    );

    cp.signal(Component::ApiServer, Signal::SIGSTOP)
        .unwrap_or_else(|e| panic!("{e}"));
    // kill(2) returns before every thread has stopped: wait for the state.
    let pid = cp.pid(Component::ApiServer).unwrap_or_default();
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.split_whitespace().nth(2) == Some("T") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stalled = tokio::time::timeout(Duration::from_millis(500), cms.get_opt("kept")).await;
    assert!(
        stalled.is_err(),
        "a stopped API server answered: {stalled:?}"
    );
    cp.signal(Component::ApiServer, Signal::SIGCONT)
        .unwrap_or_else(|e| panic!("{e}"));
    let back = tokio::time::timeout(Duration::from_secs(30), cms.get_opt("kept"))
        .await
        .unwrap_or_else(|_| panic!("no answer 30 s after SIGCONT"));
    assert!(back.ok().flatten().is_some());
}

const CHILD_ENV: &str = "CONTROL_PLANE_TEST_CHILD";

/// Run by the next test in a child process: starts a control plane, prints
/// its pids and aborts (no destructor runs).
#[tokio::test]
#[ignore = "run by no_process_outlives_a_test_binary_that_aborts"]
async fn child_starts_a_control_plane_and_aborts() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let cp = ControlPlane::start(Config::default().with_kcm(["*"]).named("launcher-child"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pids: Vec<String> = [
        Component::Etcd,
        Component::ApiServer,
        Component::ControllerManager,
    ]
    .iter()
    .filter_map(|c| cp.pid(*c))
    .map(|p| p.to_string())
    .collect();
    println!("PIDS {}", pids.join(" "));
    std::process::abort();
}

#[tokio::test]
async fn no_process_outlives_a_test_binary_that_aborts() {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "child_starts_a_control_plane_and_aborts",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .await
        .unwrap_or_else(|e| panic!("running the child: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the child should have aborted: {stdout}"
    );
    let pids: Vec<u32> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PIDS "))
        .unwrap_or_else(|| {
            panic!(
                "the child printed no pids:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(pids.len(), 3, "{stdout}");
    assert_eq!(
        wait_gone(&pids).await,
        Vec::<u32>::new(),
        "processes outlived the aborted test binary"
    );
}

//! Bad input a user (or an attacker) can give the binary (issue 15): flags
//! refused at start with the flag's name, an API server that never answers
//! named after `--request-timeout`, errors that print each cause once, and a
//! password in the load-balancer endpoint kept out of logs and Events.

mod support;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::api::{Api, ListParams, PostParams};
use kube_sim::{KubeSim, SimConfig};
use support::{BIN, Manager, free_port, run_to_end};
use test_support::objects;

/// Runs the binary to its end, killing it (and failing) if it hangs.
fn run_bounded(args: &[&str]) -> (bool, String) {
    let dir = support::tempdir();
    let err_path = dir.join("stderr");
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{args:?} still running after 120 s; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    let _ = std::fs::File::open(&err_path).and_then(|mut f| f.read_to_string(&mut stderr));
    (status.success(), stderr)
}

fn refused(args: &[&str], want: &[&str]) {
    let out = run_to_end(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail:\n{stderr}");
    for w in want {
        assert!(
            stderr.contains(w),
            "{args:?}: want {w:?} in stderr:\n{stderr}"
        );
    }
}

#[test]
fn rate_limit_flags_out_of_range_are_refused_naming_the_flag() {
    for qps in ["1e-300", "NaN", "inf", "-1", "1e10", "fast"] {
        refused(
            &["run", &format!("--kube-api-qps={qps}")],
            &["--kube-api-qps"],
        );
    }
    refused(
        &["run", "--kube-api-qps=1e-300"],
        &["must be 0 (no client-side limit) or a finite number from 0.001 to 1000000000"],
    );
    for burst in ["0", "1000001", "-1"] {
        refused(
            &["run", &format!("--kube-api-burst={burst}")],
            &["--kube-api-burst"],
        );
    }
}

#[test]
fn object_names_are_checked_as_kubernetes_checks_them() {
    let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
    refused(
        &["run", "--leader-elect-resource-namespace=Bad_NS"],
        &["--leader-elect-resource-namespace", label],
    );
    refused(
        &["run", "--release-record-name=../x"],
        &["--release-record-name", subdomain],
    );
    refused(
        &["run", "--leader-elect-resource-name=Lease!"],
        &["--leader-elect-resource-name", subdomain],
    );
    refused(
        &["release-check", "--namespace=a.b"],
        &["--namespace", "must not contain dots"],
    );
    refused(
        &["release-check", "--release-record-name=UPPER"],
        &["--release-record-name", subdomain],
    );
    refused(&["explain", "pvc/x", "-n", "No_Such"], &[label]);
    // $POD_NAMESPACE is checked too (it stands in for the flag).
    let out = Command::new(BIN)
        .args(["run", "--kubeconfig=/nonexistent/kubeconfig"])
        .env("POD_NAMESPACE", "Bad_NS")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("invalid --leader-elect-resource-namespace \"Bad_NS\""),
        "{stderr}"
    );
}

#[test]
fn an_empty_controller_list_and_an_unknown_log_level_are_refused() {
    refused(
        &["run", "--controllers="],
        &["validation failed for '--controllers': the list is empty"],
    );
    refused(
        &["run", "--log-level=verbose"],
        &[
            "--log-level",
            "\"verbose\" is neither a level (off, error, warn, info, debug, trace) nor a target=level directive",
        ],
    );
}

#[test]
fn a_request_timeout_names_the_server_that_does_not_answer() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let _accepting = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let dir = support::tempdir();
    let kubeconfig = support::write_kubeconfig(&dir, &format!("http://{addr}"), "t");
    let kubeconfig = format!("--kubeconfig={}", kubeconfig.display());
    let want =
        format!("the API server http://{addr}/ did not answer within 1s (--request-timeout)");
    for args in [
        vec!["release-check", &kubeconfig, "--request-timeout=1s"],
        vec!["explain", "pv/x", &kubeconfig, "--request-timeout=1"],
    ] {
        let (ok, stderr) = run_bounded(&args);
        assert!(!ok, "{args:?}");
        assert!(stderr.contains(&want), "{args:?}: want {want:?}:\n{stderr}");
    }
    refused(
        &["release-check", "--request-timeout=soon"],
        &[
            "--request-timeout",
            "Timeout must be a single integer in seconds, or an integer followed by a corresponding time unit",
        ],
    );
}

#[test]
fn a_kubeconfig_error_prints_its_cause_once() {
    let out = run_to_end(&["release-check", "--kubeconfig=/nonexistent/kubeconfig"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}

const CLASS: &str = "protection-manager.io/load-balancer";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_provider_endpoint_stays_out_of_events_and_logs() {
    const PASSWORD: &str = "s3cr3t-pw";
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("kube-sim");
    let client = sim.client().await;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &objects::node("node-a"))
        .await
        .expect("create node");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = objects::lb_service("default", "web", Some(CLASS));
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");

    // Nothing listens on this port: every provider call fails, and the
    // failure names the URL.
    let dead = free_port();
    let kubeconfig = sim
        .kubeconfig_for("protection-manager")
        .expect("kubeconfig");
    let args = [
        "run".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--admin-address=127.0.0.1:{}", free_port()),
        "--leader-elect=false".into(),
        "--controllers=service-lb-cleanup".into(),
        format!("--lb-provider-endpoint=http://admin:{PASSWORD}@127.0.0.1:{dead}/api/"),
        "--lb-provider-connect-timeout=1s".into(),
        "--kube-api-qps=0".into(),
    ];
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let m = Manager::start(&refs);

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    let failed = loop {
        let list = events.list(&ListParams::default()).await.expect("events");
        if let Some(e) = list
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("SyncLoadBalancerFailed"))
        {
            break e;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no SyncLoadBalancerFailed event; manager stderr:\n{}",
            m.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let message = failed.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "http://admin:***@127.0.0.1:{dead}/api/v1/loadbalancers/"
        )),
        "the event names the redacted URL: {message}"
    );
    assert!(!message.contains(PASSWORD), "{message}");
    let logs = m.stderr();
    assert!(!logs.contains(PASSWORD), "{logs}");
    assert!(
        logs.contains(
            "--lb-provider-endpoint is plain http://: the password in the URL travels unencrypted"
        ),
        "{logs}"
    );
}

//! Runs the real binary: flag errors, the admin endpoints, readiness against
//! an unreachable API server, and a clean exit on SIGTERM.

mod support;

use std::time::Duration;

use support::{Manager, free_port, http_get, wait_until};

#[test]
fn bad_flags_fail_with_upstream_messages() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--feature-gates=Bogus=true"],
            "unrecognized feature gate: Bogus",
        ),
        (
            &["run", "--feature-gates=ServiceLoadBalancerFinalizer=false"],
            "cannot set feature gate ServiceLoadBalancerFinalizer to false, feature is locked to true",
        ),
        (
            &["run", "--feature-gates=StorageObjectInUseProtection"],
            "missing bool value for StorageObjectInUseProtection",
        ),
        (
            &["run", "--feature-gates=StorageObjectInUseProtection=maybe"],
            "invalid value of StorageObjectInUseProtection=maybe",
        ),
        (
            &["run", "--emulated-version=9.9"],
            "emulation version 9.9 is not between [0.0, 0.5]",
        ),
        (
            &["run", "--controllers=-nope"],
            "\"nope\" is not in the list of known controllers",
        ),
        (
            &[
                "run",
                "--emulated-version=0.0",
                "--feature-gates=StorageObjectInUseProtection=true",
            ],
            "feature is PreAlpha at emulated version 0.0",
        ),
    ];
    support::assert_each_refused(cases);
}

#[test]
fn locked_gate_is_accepted_at_an_earlier_emulated_version() {
    // At 0.2 the gate is Beta: setting it false is accepted. The run then
    // proceeds to load a kubeconfig; give it one that does not exist so it
    // stops right after flag validation with an error about the kubeconfig,
    // not about the gate.
    let out = support::run_to_end(&[
        "run",
        "--emulated-version=0.2",
        "--feature-gates=ServiceLoadBalancerFinalizer=false",
        "--kubeconfig=/nonexistent/kubeconfig",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("feature gate"), "{stderr}");
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}

#[test]
fn feature_gates_command_prints_the_table() {
    let out = support::run_to_end(&["feature-gates", "--emulated-version=0.1"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    for gate in [
        "StorageObjectInUseProtection",
        "ServiceLoadBalancerFinalizer",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(gate))
            .unwrap_or_default();
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>(),
            vec![gate, "ALPHA", "false", "false", "false", "0.1"],
            "{stdout}"
        );
    }
    let out = support::run_to_end(&["feature-gates", "--emulated-version=0.0"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("PRE-ALPHA"), "{stdout}");
}

#[test]
fn version_command() {
    let out = support::run_to_end(&["version"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("release 0.5") && stdout.contains("0.0 to 0.5"),
        "{stdout}"
    );
}

#[test]
fn admin_endpoints_answer_and_readyz_fails_without_an_api_server() {
    let dir = support::tempdir();
    // A kubeconfig that points at a port nobody listens on.
    let dead = free_port();
    let kubeconfig = support::write_kubeconfig(&dir, &format!("http://127.0.0.1:{dead}"), "nobody");
    let admin = free_port();
    let mut m = Manager::start(&[
        "run",
        "--leader-elect=false",
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--admin-address=127.0.0.1:{admin}"),
        "--ping-interval=1s",
    ]);
    let base = format!("http://127.0.0.1:{admin}");
    wait_until(
        Duration::from_secs(30),
        "admin server answers /healthz",
        || {
            http_get(&format!("{base}/healthz"))
                .is_some_and(|(code, body)| code == 200 && body == "ok")
        },
    );
    let (code, body) = http_get(&format!("{base}/metrics")).expect("metrics");
    assert_eq!(code, 200);
    assert!(body.contains("protection_manager_build_info"), "{body}");
    assert!(
        body.contains("protection_manager_feature_enabled"),
        "{body}"
    );
    // Give the ping a few rounds: it must keep failing.
    wait_until(
        Duration::from_secs(30),
        "readyz reports the unreachable API server",
        || {
            http_get(&format!("{base}/readyz?verbose")).is_some_and(|(code, body)| {
                code == 500
                    && body.contains("[-]ping failed")
                    && body.contains("readyz check failed")
            })
        },
    );
    let status = m.terminate(Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must end the process cleanly"
    );
    assert!(m.stderr().contains("received SIGTERM"), "{}", m.stderr());
}

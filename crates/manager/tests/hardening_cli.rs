//! Issue 27: what a careless operator or a hostile user can feed the
//! binary's commands: `strip-finalizers` on objects in use (bug 3), names
//! that would reach a URL as more than a name (bug 4), durations their API
//! field or consumer cannot hold (bug 5, the floors of intervals), files
//! that are not files or never end (bug 7), and the messages of the weak
//! spots: a host name as a listen address, a missing KUBECONFIG file, a
//! server answering HTML, a namespace that does not exist, a silent server.

mod support;

use std::process::Command;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube_sim::{KubeSim, SimConfig};
use serde_json::json;
use support::BIN;

/// Runs the binary against `sim` (admin kubeconfig); (success, stdout,
/// stderr).
fn cli(sim: &KubeSim, args: &[&str]) -> (bool, String, String) {
    let kubeconfig = sim.kubeconfig_path();
    let out = Command::new(BIN)
        .args(args)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .env_remove("KUBECONFIG")
        .output()
        .expect("run protection-manager");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`cli`], killed (and failing) after a minute: a command that hangs is
/// the bug.
fn cli_bounded(sim: &KubeSim, args: &[&str]) -> (bool, String) {
    let kubeconfig = format!("--kubeconfig={}", sim.kubeconfig_path().display());
    let all: Vec<&str> = args.iter().copied().chain([kubeconfig.as_str()]).collect();
    run_bounded(&all)
}

/// Runs the binary, killed (and failing) after a minute; (success, stderr).
fn run_bounded(args: &[&str]) -> (bool, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (st.success(), err);
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn finalizers(o: &DynamicObject) -> Vec<String> {
    o.metadata.finalizers.clone().unwrap_or_default()
}

/// VolumeAttributesClasses (storage.k8s.io/v1).
fn classes_api(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("storage.k8s.io", "v1", "VolumeAttributesClass"),
        "volumeattributesclasses",
    );
    Api::all_with(client.clone(), &ar)
}

/// Creates a class of each name, carrying `finalizer`.
async fn create_classes(
    vacs: &Api<DynamicObject>,
    names: impl IntoIterator<Item = impl AsRef<str>>,
    finalizer: &str,
) {
    for name in names {
        let v: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
            "metadata": {"name": name.as_ref(), "finalizers": [finalizer]},
            "driverName": "csi.example.com",
        }))
        .expect("vac");
        vacs.create(&PostParams::default(), &v).await.expect("vac");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strip_finalizers_refuses_what_every_release_knows_and_keeps_objects_in_use() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await;
    // A claim a running pod uses, with pvc-protection's finalizer.
    let pvc_fin = "protection-manager.io/pvc-protection";
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    pvcs.create(
        &PostParams::default(),
        &test_support::objects::pvc("default", "data", &[pvc_fin]),
    )
    .await
    .expect("pvc");
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &test_support::objects::pod("default", "app", "data", Some("node-1")),
        )
        .await
        .expect("pod");
    for controller in ["pvc-protection", "pv-protection", "service-lb-cleanup"] {
        for profile in ["project", "upstream"] {
            let (ok, stdout, stderr) = cli(
                &sim,
                &[
                    "strip-finalizers",
                    "--controller",
                    controller,
                    "--finalizer-profile",
                    profile,
                    "-n",
                    "default",
                ],
            );
            assert!(!ok, "{controller} ({profile}) must be refused: {stdout}");
            assert!(
                stderr.contains("a rollback never strands it, so there is nothing to strip"),
                "{controller} ({profile}): {stderr}"
            );
        }
    }
    let claim = pvcs.get("data").await.expect("pvc");
    assert_eq!(
        claim.metadata.finalizers.unwrap_or_default(),
        [pvc_fin],
        "the claim in use keeps its finalizer"
    );
    println!("verified: strip-finalizers refuses pv-, pvc-protection and service-lb-cleanup");

    // VolumeAttributesClasses: one used by a claim, one unused.
    let vac_fin = "protection-manager.io/vac-protection";
    let vacs = classes_api(&client);
    create_classes(&vacs, ["gold", "idle"], vac_fin).await;
    let mut used = test_support::objects::pvc("default", "fast", &[]);
    used.spec
        .get_or_insert_with(Default::default)
        .volume_attributes_class_name = Some("gold".into());
    pvcs.create(&PostParams::default(), &used)
        .await
        .expect("pvc");
    let args = [
        "strip-finalizers",
        "--controller",
        "vac-protection",
        "-n",
        "default",
    ];
    let (ok, stdout, stderr) = cli(&sim, &args);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(&format!("volumeattributesclasses/idle: removed {vac_fin}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("kept protection-manager.io/vac-protection on objects in use")
            && stdout.contains(
                "volumeattributesclasses/gold (vac-protection would hold it while PersistentVolumeClaim default/fast (spec.volumeAttributesClassName) refers to it.)"
            ),
        "{stdout}"
    );
    assert_eq!(
        finalizers(&vacs.get("gold").await.expect("gold")),
        [vac_fin]
    );
    assert!(finalizers(&vacs.get("idle").await.expect("idle")).is_empty());
    println!("verified: strip-finalizers keeps a class in use, strips the unused one");
    // Forced, it says so and strips.
    let forced: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--strip-from-objects-in-use"])
        .collect();
    let (ok, stdout, stderr) = cli(&sim, &forced);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(&format!("volumeattributesclasses/gold: removed {vac_fin}")),
        "{stdout}"
    );
    assert!(finalizers(&vacs.get("gold").await.expect("gold")).is_empty());
    println!("verified: --strip-from-objects-in-use strips a class in use");
}

/// Many classes: whether each is in use is read for a batch of classes at
/// a time (one list of the PVCs and one of the PVs per batch), not once per
/// class, and the answers are the same: the used ones keep the finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strip_finalizers_reads_the_users_of_many_classes_in_batches() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await;
    let vac_fin = "protection-manager.io/vac-protection";
    let vacs = classes_api(&client);
    const CLASSES: usize = 150;
    let names: Vec<String> = (0..CLASSES).map(|i| format!("class-{i:03}")).collect();
    create_classes(&vacs, &names, vac_fin).await;
    // class-007 is used by a claim, class-140 by a volume (the second batch).
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let mut used = test_support::objects::pvc("default", "fast", &[]);
    used.spec
        .get_or_insert_with(Default::default)
        .volume_attributes_class_name = Some("class-007".into());
    pvcs.create(&PostParams::default(), &used)
        .await
        .expect("pvc");
    let pv: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-fast"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": "/tmp/pv-fast"}, "volumeAttributesClassName": "class-140"},
    }))
    .expect("pv");
    Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .expect("pv");

    let since = sim.requests().last_seq();
    let (ok, stdout, stderr) = cli(
        &sim,
        &[
            "strip-finalizers",
            "--controller",
            "vac-protection",
            "-n",
            "default",
        ],
    );
    assert!(ok, "{stderr}");
    for name in &names {
        let kept = finalizers(&vacs.get(name).await.expect("class"));
        if name == "class-007" || name == "class-140" {
            assert_eq!(kept, [vac_fin], "{name} is in use");
        } else {
            assert!(kept.is_empty(), "{name} is free: {stdout}");
        }
    }
    assert!(
        stdout.contains("volumeattributesclasses/class-140 (vac-protection would hold it while PersistentVolume pv-fast (spec.volumeAttributesClassName) refers to it.)"),
        "{stdout}"
    );
    let lists = |resource: &str| {
        sim.requests()
            .records(&kube_sim::RequestFilter {
                verb: Some("list".into()),
                resource: Some(resource.into()),
                since: Some(since),
                ..Default::default()
            })
            .len()
    };
    // 150 classes in batches of 64: three reads of the users.
    assert_eq!(
        (lists("persistentvolumeclaims"), lists("persistentvolumes")),
        (3, 3),
        "one list of PVCs and one of PVs per batch of classes"
    );
    println!("verified: 150 classes, 2 in use, read in 3 batches");
}

/// Bug 4: `explain 'pvc/x?watch=true'` sent a watch and never returned.
/// Every name is checked against its kind's rule before it is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_refuses_names_that_are_not_names_before_sending_anything() {
    let sim = KubeSim::start(SimConfig::default()).await.expect("sim");
    for (target, want) in [
        ("pvc/x?watch=true", "a lowercase RFC 1123 subdomain"),
        ("pv/x#frag", "a lowercase RFC 1123 subdomain"),
        ("vac/..", "a lowercase RFC 1123 subdomain"),
        ("svc/Web", "a DNS-1035 label"),
        ("svc/x?watch=true", "a DNS-1035 label"),
        (
            "secrets/x?watch=true",
            "a name explain can look up has no '?'",
        ),
        ("widgets.example.com/a%2Fb", "may not contain '%'"),
    ] {
        let (ok, stderr) = cli_bounded(&sim, &["explain", target, "-n", "default"]);
        assert!(!ok, "{target}: {stderr}");
        assert!(stderr.contains(want), "{target}: want {want:?} in {stderr}");
        assert!(
            stderr.contains(target),
            "{target}: the error names it: {stderr}"
        );
    }
    // No request reached the server with any of them.
    let log = sim.requests().records(&Default::default());
    assert!(
        log.iter()
            .all(|r| r.verb != "watch" && !r.name.contains('x')),
        "{log:?}"
    );
    println!(
        "verified: explain refuses names with '?', '#', '..', '%' or the wrong case, sending nothing"
    );
}

/// Bug 5 and the floors: a lease duration past int32 seconds was written
/// into the Lease, and then no manager could decode it; a 1 ns resync used
/// 15% of a core; a 0 ping interval spent the client's budget on /version.
/// Each is refused at start, naming the flag and why.
#[test]
fn duration_flags_are_bounded_to_what_their_consumer_holds() {
    support::assert_each_refused(&[
        (
            &["run", "--leader-elect-lease-duration=2147483648s"],
            "--leader-elect-lease-duration",
        ),
        (
            &["run", "--leader-elect-lease-duration=2147483648s"],
            "the Lease's spec.leaseDurationSeconds is an int32 of seconds",
        ),
        (
            &["run", "--storage-protection-resync-period=1ns"],
            "must be 0 (off) or at least 1s: client-go's minimum resync period",
        ),
        (
            &["run", "--lb-resync-period=1ns"],
            "must be 0 (off) or at least 1s",
        ),
        (&["run", "--ping-interval=0"], "--ping-interval"),
        (&["run", "--ping-interval=10ms"], "each ping is a request"),
    ]);
}

/// Bug 7: a kubeconfig (or a file it names, or a token or certificate
/// file) that is `/dev/zero` grew the process to gigabytes in seconds, a
/// FIFO hung it before its first log line. Each is refused at once, naming
/// the file and why.
#[test]
fn files_that_are_not_regular_files_are_refused_naming_them() {
    let dir = support::tempdir();
    let fifo = dir.join("fifo");
    let have_fifo = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    let (ok, stderr) = run_bounded(&["run", "--kubeconfig=/dev/zero"]);
    assert!(!ok);
    assert!(
        stderr.contains("the kubeconfig /dev/zero is not a regular file (it is a character device); refusing to read it"),
        "{stderr}"
    );
    if have_fifo {
        let arg = format!("--kubeconfig={}", fifo.display());
        let (ok, stderr) = run_bounded(&["explain", "pvc/x", &arg]);
        assert!(!ok);
        assert!(
            stderr.contains("is not a regular file (it is a FIFO)"),
            "{stderr}"
        );
    }
    // A file the kubeconfig names.
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        r#"{"apiVersion":"v1","kind":"Config","current-context":"t",
"clusters":[{"name":"t","cluster":{"server":"https://127.0.0.1:9","certificate-authority":"/dev/zero"}}],
"users":[{"name":"t","user":{"token":"x"}}],
"contexts":[{"name":"t","context":{"cluster":"t","user":"t"}}]}"#,
    )
    .expect("write kubeconfig");
    let arg = format!("--kubeconfig={}", kc.display());
    let (ok, stderr) = run_bounded(&["release-check", &arg]);
    assert!(!ok);
    assert!(
        stderr.contains("the certificate authority file /dev/zero is not a regular file"),
        "{stderr}"
    );
    // The token and certificate files of the flags.
    let (ok, stderr) = run_bounded(&[
        "run",
        "--lb-provider-endpoint=http://127.0.0.1:9/",
        "--lb-provider-token-file=/dev/zero",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("the token file /dev/zero is not a regular file"),
        "{stderr}"
    );
    // A missing kubeconfig is named once, unquoted twice.
    let (ok, stderr) = run_bounded(&["run", "--kubeconfig=/nonexistent/kubeconfig"]);
    assert!(!ok);
    assert!(
        stderr.contains(
            "cannot read the kubeconfig /nonexistent/kubeconfig: No such file or directory"
        ) && !stderr.contains("'\""),
        "{stderr}"
    );
    println!(
        "verified: /dev/zero, a FIFO, a named /dev/zero and a missing file are refused naming them"
    );
}

/// A server on 127.0.0.1 that answers `reply` to every request (`None`:
/// never answers, holding the connection); returns its port and the count
/// of requests it read.
fn fake_server(
    reply: Option<&'static str>,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            if conn.read(&mut buf).is_ok_and(|n| n > 0) {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            match reply {
                Some(body) => {
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
                None => held.push(conn),
            }
        }
    });
    (port, count)
}

fn kubeconfig_for(port: u16) -> std::path::PathBuf {
    let dir = support::tempdir();
    support::write_kubeconfig(&dir, &format!("http://127.0.0.1:{port}"), "t")
}

/// The weak spots' messages: each names what is wrong instead of a generic
/// failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_messages_for_common_mistakes() {
    // A host name as a listen address.
    support::assert_each_refused(&[(
        &["run", "--admin-address=localhost:8080"],
        "\"localhost\" is not an IP address: a listen address is an IP address and a port",
    )]);
    // A missing file KUBECONFIG names is named once, unquoted.
    let out = Command::new(BIN)
        .args(["explain", "pvc/x"])
        .env("KUBECONFIG", "/no/such/kubeconfig")
        .output()
        .expect("run protection-manager");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("KUBECONFIG names /no/such/kubeconfig, which does not exist")
            && !stderr.contains("\"/no/such"),
        "{stderr}"
    );
    // A server that answers HTML is not called unreachable.
    let (port, _) = fake_server(Some("<html><body>Sign in</body></html>"));
    let kc = format!("--kubeconfig={}", kubeconfig_for(port).display());
    for args in [
        vec!["explain", "pvc/x", kc.as_str()],
        vec!["release-check", kc.as_str()],
    ] {
        let (ok, stderr) = run_bounded(&args);
        assert!(!ok, "{args:?}");
        assert!(
            stderr.contains("the server answered, but not as the Kubernetes API does")
                && stderr
                    .contains("is the kubeconfig's server URL that of a Kubernetes API server?"),
            "{args:?}: {stderr}"
        );
    }
    // release-check in a namespace that does not exist.
    let sim = KubeSim::start(SimConfig::default()).await.expect("sim");
    let (ok, stderr) = cli_bounded(&sim, &["release-check", "-n", "no-such-ns"]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("namespace no-such-ns does not exist"),
        "{stderr}"
    );
    // explain on a silent server gives up after its first request.
    let (port, requests) = fake_server(None);
    let kc = format!("--kubeconfig={}", kubeconfig_for(port).display());
    let (ok, stderr) = run_bounded(&["explain", "pvc/x", &kc, "--request-timeout=2s"]);
    assert!(!ok);
    assert!(stderr.contains("did not answer within 2s"), "{stderr}");
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one request, one timeout"
    );
    println!(
        "verified: a host name, an HTML server, a missing namespace and a silent server are named"
    );
}

/// `validate-config` answers as `run` would start, without a cluster: the
/// chart's tests run it on rendered values (weak spot "the chart refuses
/// every value the binary refuses").
#[test]
fn validate_config_accepts_what_run_starts_with_and_refuses_what_it_refuses() {
    let (ok, stderr) = run_bounded(&["validate-config", "--controllers=*,-service-lb-cleanup"]);
    assert!(ok, "{stderr}");
    support::assert_each_refused(&[
        (
            &["validate-config", "--controllers="],
            "validation failed for '--controllers': the list is empty",
        ),
        (
            &["validate-config", "--storage-protection-resync-period=1ns"],
            "\"1ns\" is out of range: must be 0 (off) or at least 1s",
        ),
        // A crate's own flag reaches the crate (through the manager's
        // controller table), which refuses it.
        (
            &["validate-config", "--lb-class=-bad"],
            "load-balancer cleanup settings: invalid --lb-class \"-bad\"",
        ),
        (
            &[
                "validate-config",
                "--leader-elect-lease-duration=20s",
                "--leader-elect-renew-deadline=30s",
            ],
            "leaseDuration must be greater than renewDeadline",
        ),
    ]);
    let out = support::run_to_end(&["validate-config", "--controllers=pvc-protection"]);
    assert!(out.status.success());
    // (The release is the binary's own: not named, so a version bump
    // leaves this test alone.)
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(
            "the configuration is valid: `run` would start 1 controller(s) (pvc-protection) at release "
        ),
        "{stdout}"
    );
}

//! Real-client tests with both kubectls: the pinned one from PyPI
//! (`KUBECTL_PINNED`, default .tools/bin/kubectl) and the machine's
//! (`KUBECTL_SYSTEM`, default /usr/bin/kubectl).

mod common;

use std::process::Stdio;

use common::{conform, eventually};
use kube_sim::{KubeSim, SimConfig};
use test_support::kubectl::{Ran, kubectls, ok, run};
use tokio::io::{AsyncBufReadExt, BufReader};

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n  labels:\n    app: web\ndata:\n  a: b\n";
const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: nginx:1.27}]}\n";
const PV: &str = "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: NAME\n  finalizers: [example.com/hold]\nspec:\n  capacity: {storage: 1Gi}\n  accessModes: [ReadWriteOnce]\n  hostPath: {path: /tmp/kube-sim}\n";

/// Judged by the real kube-apiserver 1.36 too (`common::conform`): what
/// kubectl prints for the server's refusals and warnings must be the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_raw_discovery_crud_patch_apply() {
    for bin in kubectls() {
        conform(
            "kubectl_raw_discovery_crud_patch_apply",
            SimConfig::default(),
            async |t| {
                let ns = t.namespace("kubectl").await;
                let kc = in_namespace(&bin, &t.kubeconfig, &ns).await;
                let raw = ok(&bin, &kc, &["get", "--raw", "/api/v1"], None).await;
                let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
                assert_eq!(v["kind"], "APIResourceList");
                assert!(
                    v["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r["name"] == "pods")
                );
                ok(&bin, &kc, &["api-resources"], None).await;
                ok(&bin, &kc, &["create", "-f", "-"], Some(CM)).await;
                let y = ok(
                    &bin,
                    &kc,
                    &["get", "configmap", "web-config", "-o", "yaml"],
                    None,
                )
                .await;
                assert!(
                    y.contains("name: web-config") && y.contains("resourceVersion:"),
                    "{y}"
                );
                let l = ok(
                    &bin,
                    &kc,
                    &["get", "cm", "-l", "app=web", "-o", "name"],
                    None,
                )
                .await;
                assert_eq!(l.trim(), "configmap/web-config");
                let l = ok(
                    &bin,
                    &kc,
                    &["get", "cm", "-l", "app=db", "-o", "name"],
                    None,
                )
                .await;
                assert_eq!(l.trim(), "");
                ok(
                    &bin,
                    &kc,
                    &[
                        "patch",
                        "cm",
                        "web-config",
                        "--type=merge",
                        "-p",
                        r#"{"data":{"m":"1"}}"#,
                    ],
                    None,
                )
                .await;
                ok(
                    &bin,
                    &kc,
                    &[
                        "patch",
                        "cm",
                        "web-config",
                        "--type=json",
                        "-p",
                        r#"[{"op":"add","path":"/data/j","value":"2"}]"#,
                    ],
                    None,
                )
                .await;
                ok(
                    &bin,
                    &kc,
                    &[
                        "patch",
                        "cm",
                        "web-config",
                        "--type=strategic",
                        "-p",
                        r#"{"data":{"s":"3"}}"#,
                    ],
                    None,
                )
                .await;
                let d = ok(
                    &bin,
                    &kc,
                    &["get", "cm", "web-config", "-o", "jsonpath={.data}"],
                    None,
                )
                .await;
                for (k, v) in [("a", "b"), ("m", "1"), ("j", "2"), ("s", "3")] {
                    assert!(d.contains(&format!("\"{k}\":\"{v}\"")), "{d}");
                }
                let applied = CM.replace("a: b", "a: applied");
                let out = ok(
                    &bin,
                    &kc,
                    &["apply", "--server-side", "--force-conflicts", "-f", "-"],
                    Some(&applied),
                )
                .await;
                assert!(out.contains("serverside-applied"), "{out}");
                let d = ok(
                    &bin,
                    &kc,
                    &["get", "cm", "web-config", "-o", "jsonpath={.data.a}"],
                    None,
                )
                .await;
                assert_eq!(d, "applied");
                let mf = ok(
                    &bin,
                    &kc,
                    &[
                        "get",
                        "cm",
                        "web-config",
                        "-o",
                        "jsonpath={.metadata.managedFields[*].manager}",
                        "--show-managed-fields",
                    ],
                    None,
                )
                .await;
                assert!(mf.contains("kubectl"), "managedFields managers: {mf}");
                // kubectl validates strictly on the server (fieldValidation=Strict):
                // a typo fails create; a patch (server default Warn) warns.
                let typo = CM
                    .replace("name: web-config", "name: typo")
                    .replace("data:", "dataa:");
                let Ran {
                    success,
                    stderr: err,
                    ..
                } = run(&bin, &kc, &["create", "-f", "-"], Some(&typo)).await;
                assert!(
                    !success && err.contains("strict decoding error: unknown field \"dataa\""),
                    "{err}"
                );
                t.record("an unknown field on create", serde_json::json!(err));
                let Ran {
                    success,
                    stderr: err,
                    ..
                } = run(
                    &bin,
                    &kc,
                    &[
                        "patch",
                        "cm",
                        "web-config",
                        "--type=merge",
                        "-p",
                        r#"{"dataa":{"x":"y"}}"#,
                    ],
                    None,
                )
                .await;
                assert!(
                    success && err.contains("unknown field \"dataa\""),
                    "a warning: {err}"
                );
                t.record("an unknown field on patch", serde_json::json!(err));
                // deployments/scale.
                ok(&bin, &kc, &["create", "-f", "-"], Some(DEPLOY)).await;
                ok(
                    &bin,
                    &kc,
                    &["scale", "deployment", "web", "--replicas=3"],
                    None,
                )
                .await;
                let r = ok(
                    &bin,
                    &kc,
                    &[
                        "get",
                        "deployment",
                        "web",
                        "-o",
                        "jsonpath={.spec.replicas}/{.metadata.generation}",
                    ],
                    None,
                )
                .await;
                assert_eq!(r, "3/2");
                // A failing JSON-patch test is reported as the server's 422.
                let Ran {
                    success,
                    stderr: err,
                    ..
                } = run(
                    &bin,
                    &kc,
                    &[
                        "patch",
                        "cm",
                        "web-config",
                        "--type=json",
                        "-p",
                        r#"[{"op":"test","path":"/data/a","value":"nope"}]"#,
                    ],
                    None,
                )
                .await;
                assert!(!success, "failed test must fail");
                // What kubectl prints for the real server's 422 with an
                // UnexpectedServerResponse cause.
                assert!(err.contains("The request is invalid"), "{err}");
                t.record("a failed test operation", serde_json::json!(err));
                t.cleanup_namespace(&ns).await;
                let _ = std::fs::remove_file(&kc);
            },
        )
        .await;
    }
}

/// A copy of kubeconfig `kc` whose context works in namespace `ns` (a
/// name unique to the run), in the temporary directory.
async fn in_namespace(bin: &std::path::Path, kc: &std::path::Path, ns: &str) -> std::path::PathBuf {
    let copy = std::env::temp_dir().join(format!("{ns}.kubeconfig"));
    std::fs::copy(kc, &copy).expect("copying the kubeconfig");
    ok(
        bin,
        &copy,
        &[
            "config",
            "set-context",
            "--current",
            &format!("--namespace={ns}"),
        ],
        None,
    )
    .await;
    copy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_wait_false_leaves_pv_terminating_until_finalizer_removed() {
    for bin in kubectls() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        let kc = sim.kubeconfig_path().to_path_buf();
        let pv = PV.replace("NAME", "pv-kubectl");
        ok(&bin, &kc, &["create", "-f", "-"], Some(&pv)).await;
        ok(
            &bin,
            &kc,
            &["delete", "pv", "pv-kubectl", "--wait=false"],
            None,
        )
        .await;
        let ts = ok(
            &bin,
            &kc,
            &[
                "get",
                "pv",
                "pv-kubectl",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
            None,
        )
        .await;
        assert!(!ts.is_empty(), "deletionTimestamp set");
        let table = ok(&bin, &kc, &["get", "pv", "pv-kubectl"], None).await;
        assert!(table.contains("Terminating"), "{table}");
        ok(
            &bin,
            &kc,
            &[
                "patch",
                "pv",
                "pv-kubectl",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ],
            None,
        )
        .await;
        let Ran {
            success: found,
            stderr: err,
            ..
        } = run(&bin, &kc, &["get", "pv", "pv-kubectl"], None).await;
        assert!(!found && err.contains("NotFound"), "{err}");
        sim.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_sees_events() {
    for bin in kubectls() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        let kc = sim.kubeconfig_path().to_path_buf();
        let mut child = tokio::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["get", "cm", "-w", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
        let l2 = lines.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(l)) = r.next_line().await {
                l2.lock().push(l);
            }
        });
        // Wait until the watch is established (kubectl made its watch request).
        let reqs = sim.requests();
        eventually("kubectl's watch request", || async {
            (reqs.count(
                &kube_sim::RequestFilter::default()
                    .verb("watch")
                    .resource("configmaps"),
            ) > 0)
                .then_some(())
        })
        .await;
        let cm = CM.replace("data:\n  a: b", "data:\n  v: one");
        ok(&bin, &kc, &["create", "-f", "-"], Some(&cm)).await;
        ok(
            &bin,
            &kc,
            &[
                "patch",
                "cm",
                "web-config",
                "--type=merge",
                "-p",
                r#"{"data":{"v":"two"}}"#,
            ],
            None,
        )
        .await;
        ok(&bin, &kc, &["delete", "cm", "web-config"], None).await;
        let seen = eventually("ADDED, MODIFIED and DELETED lines", || async {
            let l = lines.lock().clone();
            let joined = l.join("\n");
            (joined.contains("ADDED") && joined.contains("MODIFIED") && joined.contains("DELETED"))
                .then_some(joined)
        })
        .await;
        for ev in ["ADDED", "MODIFIED", "DELETED"] {
            assert!(
                seen.lines()
                    .any(|l| l.starts_with(ev) && l.contains("web-config")),
                "{ev} web-config in:\n{seen}"
            );
        }
        let _ = child.kill().await;
        sim.shutdown().await;
    }
}

/// kubectl's typed generators send protobuf bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_send_protobuf() {
    for bin in kubectls() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        let kc = sim.kubeconfig_path().to_path_buf();
        ok(&bin, &kc, &["create", "namespace", "gen"], None).await;
        ok(
            &bin,
            &kc,
            &[
                "-n",
                "gen",
                "create",
                "configmap",
                "cm",
                "--from-literal=a=b",
            ],
            None,
        )
        .await;
        ok(
            &bin,
            &kc,
            &[
                "-n",
                "gen",
                "create",
                "secret",
                "generic",
                "s",
                "--from-literal=k=v",
            ],
            None,
        )
        .await;
        ok(
            &bin,
            &kc,
            &["-n", "gen", "create", "serviceaccount", "sa"],
            None,
        )
        .await;
        ok(
            &bin,
            &kc,
            &[
                "-n",
                "gen",
                "create",
                "role",
                "r",
                "--verb=get,list",
                "--resource=pods",
            ],
            None,
        )
        .await;
        ok(
            &bin,
            &kc,
            &[
                "-n",
                "gen",
                "create",
                "rolebinding",
                "rb",
                "--role=r",
                "--serviceaccount=gen:sa",
            ],
            None,
        )
        .await;
        let d = ok(
            &bin,
            &kc,
            &["-n", "gen", "get", "cm", "cm", "-o", "jsonpath={.data.a}"],
            None,
        )
        .await;
        assert_eq!(d, "b");
        let d = ok(
            &bin,
            &kc,
            &[
                "-n",
                "gen",
                "get",
                "secret",
                "s",
                "-o",
                "jsonpath={.data.k}",
            ],
            None,
        )
        .await;
        assert_eq!(d, "dg==");
        let r = ok(
            &bin,
            &kc,
            &[
                "-n",
                "gen",
                "get",
                "role",
                "r",
                "-o",
                "jsonpath={.rules[0].verbs}",
            ],
            None,
        )
        .await;
        assert_eq!(r, r#"["get","list"]"#);
        let rb = ok(
            &bin,
            &kc,
            &[
                "-n",
                "gen",
                "get",
                "rolebinding",
                "rb",
                "-o",
                "jsonpath={.roleRef.name}/{.subjects[0].name}",
            ],
            None,
        )
        .await;
        assert_eq!(rb, "r/sa");
        // Typed deletes send protobuf DeleteOptions.
        ok(
            &bin,
            &kc,
            &["delete", "namespace", "gen", "--wait=false"],
            None,
        )
        .await;
        sim.shutdown().await;
    }
}

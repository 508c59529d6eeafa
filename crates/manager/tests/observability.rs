//! The observability pack without a Prometheus server: the admin server's
//! loopback default and the pod address the chart sets, the monitoring
//! objects the chart renders (PrometheusRule, Grafana dashboard, secure
//! ServiceMonitor and RBAC), the alerts' `promtool test rules` unit tests, the
//! runbook sections, and the dashboard's queries checked with promtool and
//! against a running manager's /metrics. Chart tests run with helm 3.18 and
//! 4.1; promtool comes from Debian's `prometheus` package (`make tools`).

mod chart_support;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chart_support::{Helm, HelmVersion, Rendered, chart_dir, flags};
use kube_sim::{KubeSim, SimConfig};
use serde_json::{Value, json};
use support::{Manager, free_port, http_get};

const ENDPOINT: &str = "loadBalancer.provider.endpoint=https://lb.example.com/";
const SA_USER: &str = "system:serviceaccount:protection:pm-protection-manager";

/// Every alert the PrometheusRule defines (with the LB controller on).
const ALERTS: [&str; 6] = [
    "ProtectionManagerObjectStuckTerminating",
    "ProtectionManagerNoLeader",
    "ProtectionManagerControllerNotReady",
    "ProtectionManagerLoadBalancerCleanupFailing",
    "ProtectionManagerReconcileErrors",
    "ProtectionManagerEventsShed",
];

fn helms() -> Vec<Helm> {
    HelmVersion::ALL.into_iter().map(Helm::new).collect()
}

fn render(helm: &Helm, pairs: &[&str]) -> Rendered {
    let mut args = vec!["--set", ENDPOINT];
    for p in pairs {
        args.extend(["--set", p]);
    }
    helm.render(&args)
}

fn render_err(helm: &Helm, pairs: &[&str]) -> String {
    let mut args = vec!["--set", ENDPOINT];
    for p in pairs {
        args.extend(["--set", p]);
    }
    match helm.template("pm", "protection", &args) {
        Ok(_) => panic!("{:?}: {pairs:?} should fail", helm.version),
        Err(e) => e,
    }
}

/// A tool from Debian's `prometheus` package: `$VAR`, else on PATH. Missing
/// fails the test (never a silent skip).
fn prometheus_tool(name: &str, var: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found (${var} or PATH): run `make tools` (Debian package prometheus)"
            )
        })
}

pub fn promtool() -> PathBuf {
    prometheus_tool("promtool", "PROMTOOL")
}

/// `promtool <args>` in `dir`: (success, stdout + stderr).
fn run_promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The PrometheusRule's spec as a Prometheus rule file.
fn rules_file(r: &Rendered) -> String {
    let rule = r.one("PrometheusRule");
    serde_yaml::to_string(&json!({"groups": rule["spec"]["groups"]})).expect("rules as YAML")
}

fn alert_names(r: &Rendered) -> Vec<String> {
    let rule = r.one("PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn run_help_shows_the_loopback_admin_default() {
    let out = support::run_to_end(&["run", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let section: String = text
        .split("--admin-address")
        .nth(1)
        .and_then(|rest| rest.split("\n      --").next())
        .unwrap_or_default()
        .to_string();
    assert!(
        section.contains("[default: 127.0.0.1:8080]"),
        "--admin-address:{section}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_server_binds_loopback_by_default() {
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("start kube-sim");
    let kubeconfig = sim.kubeconfig_for(SA_USER).expect("kubeconfig");
    let m = Manager::start(&[
        "run",
        &format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false",
        "--controllers=pv-protection",
        "--log-format=text",
    ]);
    // Either the start line names the address, or (port 8080 taken by
    // something else on this machine) the bind error does.
    let mut stderr = String::new();
    for _ in 0..600 {
        stderr = m.stderr();
        if stderr.contains("starting protection-manager") || stderr.contains("admin server on") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stderr = strip_ansi(&stderr);
    assert!(
        stderr.contains("admin_address=127.0.0.1:8080")
            || stderr.contains("admin server on 127.0.0.1:8080"),
        "the admin server should bind 127.0.0.1:8080 by default; stderr:\n{stderr}"
    );
    drop(m);
    sim.shutdown().await;
}

/// The text log without its colour escapes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn the_chart_sets_the_pod_addresses_explicitly() {
    for helm in helms() {
        let r = render(&helm, &[]);
        let f = flags(&r.args());
        assert_eq!(f["admin-address"], "0.0.0.0:8080", "{:?}", helm.version);
        assert_eq!(f["metrics-bind-address"], "0.0.0.0:8443");
        assert_eq!(f["metrics-secure"], "true");
        assert!(!f.contains_key("metrics-tls-cert-file"));
        let c = chart_support::manager_container(r.deployment());
        assert_eq!(
            c["ports"],
            json!([
                {"name": "admin", "containerPort": 8080, "protocol": "TCP"},
                {"name": "metrics", "containerPort": 8443, "protocol": "TCP"}
            ])
        );
        // Probes stay on the plain admin port.
        assert_eq!(c["livenessProbe"]["httpGet"]["port"], "admin");
        assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
        assert!(c["livenessProbe"]["httpGet"]["scheme"].is_null());

        let r = render(
            &helm,
            &[
                "admin.bindAddress=::",
                "admin.port=9080",
                "metrics.port=9443",
            ],
        );
        let f = flags(&r.args());
        assert_eq!(f["admin-address"], "[::]:9080");
        assert_eq!(f["metrics-bind-address"], "[::]:9443");
    }
}

#[test]
fn the_chart_renders_secure_metrics_serving() {
    for helm in helms() {
        let v = helm.version;
        let r = render(&helm, &[]);
        // The metrics Service targets the metrics port, https.
        let svc = r.one("Service");
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP", "appProtocol": "https"}]),
            "{v:?}"
        );
        // The manager may review tokens; scrapers get a reader role.
        let roles = r.of_kind("ClusterRole");
        let manager = roles
            .iter()
            .find(|c| c["metadata"]["name"] == "pm-protection-manager")
            .expect("manager ClusterRole");
        let rules = manager["rules"].as_array().expect("rules");
        for (group, resource) in [
            ("authentication.k8s.io", "tokenreviews"),
            ("authorization.k8s.io", "subjectaccessreviews"),
        ] {
            assert!(
                rules.contains(
                    &json!({"apiGroups": [group], "resources": [resource], "verbs": ["create"]})
                ),
                "{v:?}: no create {group}/{resource} in {rules:#?}"
            );
        }
        let reader = roles
            .iter()
            .find(|c| c["metadata"]["name"] == "pm-protection-manager-metrics-reader")
            .expect("metrics-reader ClusterRole");
        assert_eq!(
            reader["rules"],
            json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
        );
        assert!(
            !r.of_kind("ClusterRoleBinding")
                .iter()
                .any(|b| b["metadata"]["name"] == "pm-protection-manager-metrics-reader"),
            "no reader binding without subjects"
        );
        // Nothing of the optional monitoring objects by default.
        for kind in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
            assert!(
                r.of_kind(kind).is_empty(),
                "{v:?}: {kind} rendered by default"
            );
        }

        // The ServiceMonitor scrapes https with the pod's token.
        let r = render(
            &helm,
            &[
                "metrics.serviceMonitor.enabled=true",
                "metrics.reader.subjects[0].kind=ServiceAccount",
                "metrics.reader.subjects[0].name=prometheus-k8s",
                "metrics.reader.subjects[0].namespace=monitoring",
                "metrics.reader.subjects[1].kind=Group",
                "metrics.reader.subjects[1].name=system:monitoring",
            ],
        );
        let sm = r.one("ServiceMonitor");
        assert_eq!(
            sm["spec"]["endpoints"],
            json!([{
                "port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s",
                "scheme": "https",
                "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                "tlsConfig": {"insecureSkipVerify": true}
            }]),
            "{v:?}"
        );
        let binding = r
            .of_kind("ClusterRoleBinding")
            .into_iter()
            .find(|b| b["metadata"]["name"] == "pm-protection-manager-metrics-reader")
            .expect("reader binding");
        assert_eq!(
            binding["subjects"],
            json!([
                {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
                {"kind": "Group", "name": "system:monitoring", "apiGroup": "rbac.authorization.k8s.io"}
            ])
        );
        assert_eq!(
            binding["roleRef"]["name"],
            "pm-protection-manager-metrics-reader"
        );

        // A mounted certificate.
        let r = render(&helm, &["metrics.tlsSecret=pm-metrics-tls"]);
        let f = flags(&r.args());
        assert_eq!(
            f["metrics-tls-cert-file"],
            "/var/run/secrets/protection-manager/metrics-tls/tls.crt"
        );
        assert_eq!(
            f["metrics-tls-private-key-file"],
            "/var/run/secrets/protection-manager/metrics-tls/tls.key"
        );
        let pod = &r.deployment()["spec"]["template"]["spec"];
        let vol = pod["volumes"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == "metrics-tls"))
            .expect("metrics-tls volume");
        assert_eq!(vol["secret"]["secretName"], "pm-metrics-tls");
        let c = chart_support::manager_container(r.deployment());
        assert!(
            c["volumeMounts"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["name"] == "metrics-tls"
                    && m["mountPath"] == "/var/run/secrets/protection-manager/metrics-tls")),
            "{c:#}"
        );

        // Plain metrics: no reviews, plain scrape.
        let r = render(
            &helm,
            &[
                "metrics.secure=false",
                "metrics.serviceMonitor.enabled=true",
            ],
        );
        assert_eq!(flags(&r.args())["metrics-secure"], "false");
        let text = serde_json::to_string(&r.objects).expect("json");
        assert!(!text.contains("tokenreviews"), "{v:?}");
        let sm = r.one("ServiceMonitor");
        assert_eq!(sm["spec"]["endpoints"][0]["scheme"], "http");
        assert!(sm["spec"]["endpoints"][0]["bearerTokenFile"].is_null());

        // Values that cannot work are refused, naming the value.
        let e = render_err(&helm, &["metrics.port=8080"]);
        assert!(
            e.contains("metrics.port (8080) must differ from admin.port"),
            "{v:?}: {e}"
        );
        let e = render_err(&helm, &["metrics.secure=false", "metrics.tlsSecret=x"]);
        assert!(
            e.contains("metrics.tlsSecret is set but metrics.secure is false"),
            "{v:?}: {e}"
        );
    }
}

#[test]
fn the_chart_renders_the_prometheus_rule_and_the_dashboard() {
    let dashboard_file =
        std::fs::read_to_string(chart_dir().join("dashboards/protection-manager.json"))
            .expect("read the dashboard");
    let dashboard: Value = serde_json::from_str(&dashboard_file).expect("dashboard is JSON");
    for helm in helms() {
        let v = helm.version;
        let r = render(
            &helm,
            &[
                "metrics.prometheusRule.enabled=true",
                "metrics.prometheusRule.labels.release=prometheus",
                "metrics.dashboard.enabled=true",
            ],
        );
        let rule = r.one("PrometheusRule");
        assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
        let names: BTreeSet<String> = alert_names(&r).into_iter().collect();
        let want: BTreeSet<String> = ALERTS.iter().map(|s| s.to_string()).collect();
        assert_eq!(names, want, "{v:?}");
        // One stuck-Terminating rule per controller, scoped to this release.
        let text = serde_json::to_string(&rule).expect("json");
        for c in ["pv-protection", "pvc-protection", "service-lb-cleanup"] {
            assert!(
                text.contains(&format!("protection_manager_terminating_oldest_age_seconds{{job=\\\"pm-protection-manager-metrics\\\", namespace=\\\"protection\\\", controller=\\\"{c}\\\"}}")),
                "{v:?}: no stuck rule for {c}"
            );
        }

        let cm = r.one("ConfigMap");
        assert_eq!(cm["metadata"]["name"], "pm-protection-manager-dashboard");
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
        let data: Value = serde_json::from_str(
            cm["data"]["protection-manager.json"]
                .as_str()
                .expect("dashboard data"),
        )
        .expect("the ConfigMap holds JSON");
        assert_eq!(data, dashboard, "{v:?}");

        // Storage only: no load-balancer alert, no stuck rule for Services.
        let r = render(
            &helm,
            &[
                "metrics.prometheusRule.enabled=true",
                "controllers={*,-service-lb-cleanup}",
                "metrics.prometheusRule.selector=job=\"pm\"",
                "metrics.dashboard.enabled=true",
                "metrics.dashboard.namespace=grafana",
            ],
        );
        let names = alert_names(&r);
        assert!(
            !names.contains(&"ProtectionManagerLoadBalancerCleanupFailing".to_string()),
            "{v:?}: {names:?}"
        );
        assert_eq!(
            names
                .iter()
                .filter(|n| *n == "ProtectionManagerObjectStuckTerminating")
                .count(),
            2
        );
        let text = serde_json::to_string(r.one("PrometheusRule")).expect("json");
        assert!(
            text.contains("protection_manager_leader{job=\\\"pm\\\"}"),
            "{text}"
        );
        assert_eq!(r.one("ConfigMap")["metadata"]["namespace"], "grafana");
    }
}

/// The chart's alerts with its default thresholds, through
/// `crates/manager/tests/promtool/alerts_test.yaml`; and the same tests
/// against rules rendered with another threshold must fail (they test the
/// values, not a copy of them).
#[test]
fn the_alerts_pass_their_promtool_unit_tests() {
    let helm = Helm::new(HelmVersion::V4);
    let dir = support::tempdir();
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/promtool/alerts_test.yaml");
    std::fs::copy(&tests, dir.join("alerts_test.yaml")).expect("copy the promtool tests");

    let r = render(&helm, &["metrics.prometheusRule.enabled=true"]);
    std::fs::write(dir.join("rules.yaml"), rules_file(&r)).expect("write rules");
    let (ok, out) = run_promtool(&dir, &["check", "rules", "rules.yaml"]);
    assert!(ok, "promtool check rules:\n{out}");
    let (ok, out) = run_promtool(&dir, &["test", "rules", "alerts_test.yaml"]);
    assert!(ok, "promtool test rules:\n{out}");
    println!("promtool test rules: {}", out.trim().replace('\n', " "));

    // Every alert has a test group, and the tests see a changed threshold.
    let test_text = std::fs::read_to_string(&tests).expect("read the tests");
    for alert in ALERTS {
        assert!(
            test_text.contains(&format!("alertname: {alert}")),
            "no promtool test for {alert}"
        );
    }
    let r = render(
        &helm,
        &[
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.stuckTerminating.thresholds.pvc-protection=2h",
        ],
    );
    std::fs::write(dir.join("rules.yaml"), rules_file(&r)).expect("write rules");
    let (ok, out) = run_promtool(&dir, &["test", "rules", "alerts_test.yaml"]);
    assert!(
        !ok && out.contains("ProtectionManagerObjectStuckTerminating"),
        "a 2h threshold must fail the stuck-Terminating test:\n{out}"
    );
}

/// Every alert has a runbook section in the chart README that starts with
/// the `protection-manager explain` command to run.
#[test]
fn every_alert_has_a_runbook_section_starting_with_explain() {
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).expect("chart README");
    for alert in ALERTS {
        let section = readme
            .split(&format!("\n### {alert}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no `### {alert}` runbook section in the chart README"));
        let section = section.split("\n### ").next().unwrap_or_default();
        let first_block = section
            .split("```sh\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{alert}: no command block"));
        let before_block = section.split("```sh\n").next().unwrap_or_default();
        assert!(
            first_block.starts_with("protection-manager explain "),
            "{alert}: the runbook's first command is not `protection-manager explain`:\n{first_block}"
        );
        assert!(
            before_block
                .lines()
                .filter(|l| !l.trim().is_empty())
                .count()
                <= 2,
            "{alert}: the runbook should start with the explain command, not:\n{before_block}"
        );
    }
}

/// The `protection_manager_*` names a PromQL text mentions.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("protection_manager_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

fn panels(v: &Value, out: &mut Vec<Value>) {
    for p in v["panels"].as_array().into_iter().flatten() {
        out.push(p.clone());
        panels(p, out);
    }
}

/// The dashboard: the panels the issue lists, every query parses (promtool
/// check rules, each expression as a recording rule with Grafana's variables
/// substituted), and every metric it names is in a running manager's
/// /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_queries_parse_and_name_exported_metrics() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(chart_dir().join("dashboards/protection-manager.json"))
            .expect("read the dashboard"),
    )
    .expect("dashboard JSON");
    let mut all = Vec::new();
    panels(&dashboard, &mut all);
    let titles: Vec<String> = all
        .iter()
        .filter_map(|p| p["title"].as_str().map(str::to_string))
        .collect();
    for want in [
        "Reconcile rate",
        "Reconcile errors",
        "Terminating objects",
        "Oldest Terminating object",
        "Clean-up latency",
        "Leader",
        "Controller ready",
        "API requests",
        "Memory (RSS)",
        "CPU",
    ] {
        assert!(
            titles.iter().any(|t| t == want),
            "no panel {want:?}: {titles:?}"
        );
    }
    let exprs: Vec<String> = all
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    assert!(exprs.len() >= 15, "{} queries", exprs.len());
    let substituted: Vec<String> = exprs
        .iter()
        .map(|e| {
            e.replace("$__rate_interval", "5m")
                .replace("$namespace", ".*")
                .replace("$job", ".*")
        })
        .collect();
    for e in &substituted {
        assert!(!e.contains('$'), "an unknown variable in {e}");
    }
    let rules: Vec<Value> = substituted
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"record": format!("dashboard:panel_query_{i}"), "expr": e}))
        .collect();
    let dir = support::tempdir();
    std::fs::write(
        dir.join("dashboard-rules.yaml"),
        serde_yaml::to_string(&json!({"groups": [{"name": "dashboard", "rules": rules}]}))
            .expect("yaml"),
    )
    .expect("write");
    let (ok, out) = run_promtool(&dir, &["check", "rules", "dashboard-rules.yaml"]);
    assert!(ok, "a dashboard query does not parse:\n{out}");

    let mut names = BTreeSet::new();
    for e in &exprs {
        names.extend(metric_names(e));
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(q) = var["definition"].as_str() {
            names.extend(metric_names(q));
        }
    }

    // A manager with every controller (the LB one against cloud-sim).
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("start kube-sim");
    let cloud = cloud_sim::CloudSim::start(cloud_sim::Config::default())
        .await
        .expect("start cloud-sim");
    let kubeconfig = sim.kubeconfig_for(SA_USER).expect("kubeconfig");
    let admin = free_port();
    let mut m = Manager::start(&[
        "run",
        &format!("--kubeconfig={}", kubeconfig.display()),
        &format!("--admin-address=127.0.0.1:{admin}"),
        "--leader-elect=false",
        &format!("--lb-provider-endpoint={}/", cloud.url()),
        "--ping-interval=1s",
    ]);
    let mut text = String::new();
    for _ in 0..600 {
        // Ready, with the controllers' check among the passed ones (before
        // the controllers start, only the API ping is checked).
        let ready = tokio::task::spawn_blocking(move || {
            http_get(&format!("http://127.0.0.1:{admin}/readyz?verbose"))
        })
        .await
        .ok()
        .flatten()
        .is_some_and(|(code, body)| code == 200 && body.contains("[+]controllers ok"));
        if ready {
            text = tokio::task::spawn_blocking(move || {
                http_get(&format!("http://127.0.0.1:{admin}/metrics"))
            })
            .await
            .ok()
            .flatten()
            .map(|(_, body)| body)
            .unwrap_or_default();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !text.is_empty(),
        "the manager never got ready:\n{}",
        m.stderr()
    );
    let series: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !series.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard names metrics the manager does not export: {missing:?}\n/metrics:\n{text}"
    );
    println!(
        "dashboard: {} panels, {} queries, {} metrics, all exported",
        titles.len(),
        exprs.len(),
        names.len()
    );
    let status = m.terminate(Duration::from_secs(30));
    assert!(status.success(), "{}", m.stderr());
    cloud.shutdown().await.expect("stop cloud-sim");
    sim.shutdown().await;
}

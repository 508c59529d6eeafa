//! Secure metrics end to end, and the chart's stuck-Terminating alert in a
//! real Prometheus server (Debian's `prometheus` package, `make tools`).
//!
//! The manager runs against kube-sim with the chart's RBAC stored there; its
//! metrics server checks each scrape's token with kube-sim's TokenReview and
//! SubjectAccessReview. Prometheus (loopback, a free port, a temporary config
//! and storage dir, 1s scrape and evaluation intervals) scrapes it over HTTPS
//! with a bearer token bound to the chart's metrics-reader ClusterRole and
//! evaluates the chart's PrometheusRule: a PVC held by a pod past a 5s
//! threshold makes ProtectionManagerObjectStuckTerminating `firing` in
//! Prometheus' own `/api/v1/alerts`; deleting the pod resolves it.

mod chart_support;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chart_support::rbac::{Access, Authorizer};
use chart_support::{Helm, HelmVersion, Rendered};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use kube_sim::{KubeSim, RequestFilter, SimConfig};
use serde_json::{Value, json};
use support::{Manager, free_port};

const NS: &str = "protection";
const SA: &str = "pm-protection-manager";
const SA_USER: &str = "system:serviceaccount:protection:pm-protection-manager";
const SCRAPER: &str = "system:serviceaccount:monitoring:prometheus";
const OTHER: &str = "system:serviceaccount:monitoring:someone-else";

fn prometheus_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PROMETHEUS") {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("prometheus not found ($PROMETHEUS or PATH): run `make tools` (Debian package prometheus)")
        })
}

/// The chart rendered with a scraper bound to the metrics-reader role and
/// the alerts on; `extra` adds `--set` pairs.
fn render(extra: &[&str]) -> Rendered {
    let helm = Helm::new(HelmVersion::V4);
    let mut args = vec![
        "--set",
        "controllers={pvc-protection}",
        "--set",
        "metrics.reader.subjects[0].kind=ServiceAccount",
        "--set",
        "metrics.reader.subjects[0].name=prometheus",
        "--set",
        "metrics.reader.subjects[0].namespace=monitoring",
        "--set",
        "metrics.prometheusRule.enabled=true",
    ];
    for e in extra {
        args.extend(["--set", e]);
    }
    helm.render(&args)
}

/// Stores the chart's ClusterRoles and ClusterRoleBindings in kube-sim.
async fn store_rbac(client: &Client, r: &Rendered) {
    for o in r.of_kind("ClusterRole") {
        let role: ClusterRole = serde_json::from_value(o.clone()).expect("ClusterRole");
        Api::<ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &role)
            .await
            .expect("create ClusterRole");
    }
    for o in r.of_kind("ClusterRoleBinding") {
        let b: ClusterRoleBinding = serde_json::from_value(o.clone()).expect("binding");
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &b)
            .await
            .expect("create ClusterRoleBinding");
    }
}

fn https_client() -> reqwest::Client {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("https client")
}

async fn get(client: &reqwest::Client, url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = client.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let code = resp.status().as_u16();
    (code, resp.text().await.unwrap_or_default())
}

async fn wait_for<F: AsyncFnMut() -> bool>(
    what: &str,
    limit: Duration,
    mut f: F,
    diag: &dyn Fn() -> String,
) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {limit:?} waiting until {what}\n{}", diag());
}

fn start_manager(sim: &KubeSim, admin: u16, metrics: u16, extra: &[String]) -> Manager {
    let kubeconfig = sim.kubeconfig_for(SA_USER).expect("kubeconfig");
    let mut args = vec![
        "run".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--admin-address=127.0.0.1:{admin}"),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        "--leader-elect=false".into(),
        "--controllers=pvc-protection".into(),
        "--ping-interval=1s".into(),
        "--log-format=text".into(),
        format!("--leader-elect-resource-namespace={NS}"),
    ];
    args.extend(extra.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Manager::start(&refs)
}

/// A Prometheus server process; killed on drop.
struct Prometheus {
    child: Child,
    log: PathBuf,
    url: String,
}

impl Prometheus {
    fn start(dir: &Path, metrics_port: u16, rules: &str, token: &str) -> Prometheus {
        std::fs::write(dir.join("rules.yaml"), rules).expect("write rules");
        std::fs::write(dir.join("token"), token).expect("write token");
        let config = json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [dir.join("rules.yaml").display().to_string()],
            "scrape_configs": [{
                // The job and namespace labels a ServiceMonitor scrape of the
                // chart's metrics Service carries (the alerts' selector).
                "job_name": "pm-protection-manager-metrics",
                "scheme": "https",
                "tls_config": {"insecure_skip_verify": true},
                "authorization": {"type": "Bearer", "credentials_file": dir.join("token").display().to_string()},
                "static_configs": [{"targets": [format!("127.0.0.1:{metrics_port}")], "labels": {"namespace": NS}}]
            }]
        });
        let config_path = dir.join("prometheus.yml");
        std::fs::write(
            &config_path,
            serde_yaml::to_string(&config).expect("config YAML"),
        )
        .expect("write config");
        let port = free_port();
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(prometheus_bin())
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            log,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn api(&self, http: &reqwest::Client, path: &str) -> Option<Value> {
        let resp = http.get(format!("{}{path}", self.url)).send().await.ok()?;
        resp.json::<Value>().await.ok()
    }

    /// The stuck-Terminating alert as Prometheus reports it, if any.
    async fn stuck_alert(&self, http: &reqwest::Client) -> Option<Value> {
        let v = self.api(http, "/api/v1/alerts").await?;
        v["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == "ProtectionManagerObjectStuckTerminating")
            .cloned()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_metrics_and_the_stuck_alert_in_prometheus() {
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("start kube-sim");
    let client = sim.client().await;
    let rendered = render(&[
        "metrics.prometheusRule.stuckTerminating.thresholds.pvc-protection=5s",
        "metrics.prometheusRule.stuckTerminating.for=1s",
    ]);
    store_rbac(&client, &rendered).await;
    for ns in [NS, "shop"] {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
            )
            .await
            .expect("create namespace");
    }

    let admin = free_port();
    let metrics = free_port();
    let since = sim.requests().last_seq();
    let mut m = start_manager(&sim, admin, metrics, &[]);
    let http = https_client();
    let url = format!("https://127.0.0.1:{metrics}/metrics");
    let stderr = || m.stderr();
    wait_for(
        "the metrics server answers",
        Duration::from_secs(60),
        async || http.get(&url).send().await.is_ok(),
        &stderr,
    )
    .await;

    // Authentication and authorization through kube-sim's reviews.
    let (code, body) = get(&http, &url, None).await;
    assert_eq!((code, body.as_str()), (401, "Unauthorized\n"));
    let (code, body) = get(&http, &url, Some("not a token")).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = get(&http, &url, Some(OTHER)).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.starts_with(&format!(
            "forbidden: User \"{OTHER}\" cannot get path \"/metrics\""
        )),
        "{body}"
    );
    let (code, body) = get(&http, &url, Some(SCRAPER)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("protection_manager_build_info{"), "{body}");
    assert!(
        body.contains("protection_manager_kube_client_requests_total{"),
        "{body}"
    );
    // Plain HTTP: health only; /metrics moved.
    let (code, body) = get(&http, &format!("http://127.0.0.1:{admin}/metrics"), None).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains(&url), "{body}");
    let (code, _) = get(&http, &format!("http://127.0.0.1:{admin}/healthz"), None).await;
    assert_eq!(code, 200);

    // The manager's reviews are allowed by the chart's RBAC.
    let authz = Authorizer::for_service_account(&rendered.objects, NS, SA);
    let records = sim.requests().records(&RequestFilter {
        user: Some(SA_USER.to_string()),
        since: Some(since),
        ..RequestFilter::default()
    });
    let mut reviews = BTreeSet::new();
    // (The rest of the manager's requests against the chart's RBAC is
    // chart_install's business; this manager runs with its own flags.)
    for r in records.iter().filter(|r| r.resource.ends_with("reviews")) {
        let a = Access::from_record(r);
        assert!(
            authz.allows(&a),
            "the chart's RBAC denies {a} ({} {})",
            r.method,
            r.path
        );
        reviews.insert(format!("{} {}/{}", r.verb, r.api_group, r.resource));
    }
    assert_eq!(
        reviews,
        BTreeSet::from([
            "create authentication.k8s.io/tokenreviews".to_string(),
            "create authorization.k8s.io/subjectaccessreviews".to_string()
        ])
    );

    // Prometheus scrapes the manager with the scraper's token.
    let dir = support::tempdir();
    let rules =
        serde_yaml::to_string(&json!({"groups": rendered.one("PrometheusRule")["spec"]["groups"]}))
            .expect("rules YAML");
    let prom = Prometheus::start(&dir, metrics, &rules, SCRAPER);
    let plain = reqwest::Client::new();
    let prom_diag = || {
        format!(
            "prometheus log:\n{}\nmanager stderr:\n{}",
            prom.log(),
            m.stderr()
        )
    };
    wait_for(
        "Prometheus scrapes the manager (target up)",
        Duration::from_secs(120),
        async || {
            prom.api(&plain, "/api/v1/targets")
                .await
                .and_then(|v| {
                    v["data"]["activeTargets"]
                        .as_array()
                        .map(|ts| ts.iter().any(|t| t["health"] == "up"))
                })
                .unwrap_or(false)
        },
        &prom_diag,
    )
    .await;

    // A claim used by a scheduled pod, then deleted: held Terminating.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "shop");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    pvcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .expect("pvc"),
    )
    .await
    .expect("create pvc");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "app"},
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "app", "image": "busybox"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
            }
        }))
        .expect("pod"),
    )
    .await
    .expect("create pod");
    wait_for(
        "the manager adds the pvc-protection finalizer",
        Duration::from_secs(60),
        async || {
            pvcs.get("data")
                .await
                .ok()
                .and_then(|p| p.metadata.finalizers)
                .is_some_and(|f| {
                    f.iter()
                        .any(|f| f == "protection-manager.io/pvc-protection")
                })
        },
        &prom_diag,
    )
    .await;
    pvcs.delete("data", &DeleteParams::default())
        .await
        .expect("delete pvc");
    let deleted_at = k8s_openapi::jiff::Timestamp::now();

    let mut firing = Value::Null;
    wait_for(
        "ProtectionManagerObjectStuckTerminating is firing in Prometheus",
        Duration::from_secs(180),
        async || match prom.stuck_alert(&plain).await {
            Some(a) if a["state"] == "firing" => {
                firing = a;
                true
            }
            _ => false,
        },
        &prom_diag,
    )
    .await;
    let firing_seen = k8s_openapi::jiff::Timestamp::now();
    assert_eq!(
        firing["labels"]["controller"], "pvc-protection",
        "{firing:#}"
    );
    let description = firing["annotations"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(
        description.starts_with("1 PersistentVolumeClaim(s) Terminating with the pvc-protection finalizer; the oldest for "),
        "{description}"
    );
    assert!(pvcs.get_opt("data").await.expect("get pvc").is_some());

    // The pod goes: the finalizer goes, the claim goes, the alert resolves.
    pods.delete("app", &DeleteParams::default())
        .await
        .expect("delete pod");
    wait_for(
        "the alert resolves in Prometheus",
        Duration::from_secs(180),
        async || prom.stuck_alert(&plain).await.is_none(),
        &prom_diag,
    )
    .await;
    let resolved_seen = k8s_openapi::jiff::Timestamp::now();
    assert!(pvcs.get_opt("data").await.expect("get pvc").is_none());
    println!(
        "ProtectionManagerObjectStuckTerminating: PVC deleted at {deleted_at}; activeAt {} (Prometheus); seen firing at {firing_seen}: {description}; pod deleted, seen resolved at {resolved_seen}",
        firing["activeAt"].as_str().unwrap_or("?"),
    );

    drop(prom);
    let status = m.terminate(Duration::from_secs(30));
    assert!(status.success(), "{}", m.stderr());
    sim.shutdown().await;
}

/// `--metrics-tls-cert-file`/`--metrics-tls-private-key-file`: the mounted
/// certificate is the one served (a client trusting only it connects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_certificate_is_served() {
    let sim = KubeSim::start(SimConfig::default())
        .await
        .expect("start kube-sim");
    let dir = support::tempdir();
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, generated.cert.pem()).expect("write cert");
    std::fs::write(&key, generated.signing_key.serialize_pem()).expect("write key");
    let admin = free_port();
    let metrics = free_port();
    let m = start_manager(
        &sim,
        admin,
        metrics,
        &[
            format!("--metrics-tls-cert-file={}", cert.display()),
            format!("--metrics-tls-private-key-file={}", key.display()),
        ],
    );
    let http = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(generated.cert.pem().as_bytes()).expect("pem"),
        )
        .resolve(
            "localhost",
            std::net::SocketAddr::from(([127, 0, 0, 1], metrics)),
        )
        .build()
        .expect("client");
    let url = format!("https://localhost:{metrics}/metrics");
    let stderr = || m.stderr();
    let mut answer = (0, String::new());
    wait_for(
        "the metrics server answers with the mounted certificate",
        Duration::from_secs(60),
        async || match http.get(&url).bearer_auth("admin").send().await {
            Ok(r) => {
                answer = (r.status().as_u16(), r.text().await.unwrap_or_default());
                true
            }
            Err(_) => false,
        },
        &stderr,
    )
    .await;
    // kube-sim's admin is in system:masters.
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert!(
        answer.1.contains("protection_manager_leader"),
        "{}",
        answer.1
    );

    // A missing key file stops the start, naming the file.
    let missing = dir.join("missing.key");
    let out = Command::new(support::BIN)
        .args([
            "run",
            &format!("--kubeconfig={}", sim.kubeconfig_path().display()),
            &format!("--admin-address=127.0.0.1:{}", free_port()),
            &format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
            &format!("--metrics-tls-cert-file={}", cert.display()),
            &format!("--metrics-tls-private-key-file={}", missing.display()),
            "--leader-elect=false",
        ])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");
    drop(m);
    sim.shutdown().await;
}

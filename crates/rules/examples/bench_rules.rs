//! `make bench-rules`: one ProtectionRule at scale, the release manager
//! binary against kube-sim.
//!
//! The chart's `secrets-used-by-pods` rule over 10,000 Secrets and 20,000
//! pods (10 namespaces; every Secret mounted by two pods), all created before
//! the manager starts with `InUseProtectionRules=true`. Prints:
//! * back-fill: start → every Secret carries the rule's finalizer, and the
//!   manager's requests per Secret (watches and lists included);
//! * release: 1,000 Secrets deleted while in use (held), then their 2,000
//!   pods deleted; per Secret the time from its last pod's delete to the
//!   Secret being gone (p50, p99, max), and the requests per released Secret;
//! * the manager's peak RSS and CPU seconds.
//!
//! `cargo run --release -p protection-rules --example bench_rules -- [--scale F]`
//! (`--cost-model real-1.36` makes kube-sim charge a real server's service
//! times). Figures only; nothing is asserted.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::runtime::watcher;
use kube_sim::{KubeSim, RequestFilter, SimConfig};
use parking_lot::Mutex;
use protection_rules::{examples, spec};
use serde_json::json;
use test_support::bench::{concurrently, percentile};

const USER: &str = "protection-manager";
const FINALIZER: &str = "example.com/secret-in-use";
const NAMESPACES: usize = 10;
const PODS_PER_SECRET: usize = 2;
const CONCURRENCY: usize = 16;

fn scale() -> Result<f64> {
    let f = match test_support::bench::arg_value("--scale")? {
        Some(v) => v.parse::<f64>().context("--scale must be a number")?,
        None => 1.0,
    };
    if !f.is_finite() || f <= 0.0 {
        bail!("--scale must be positive, got {f}");
    }
    Ok(f)
}

fn start_manager(bin: &Path, kubeconfig: &Path, admin: u16, log: &Path) -> Result<Child> {
    let stderr = std::fs::File::create(log)?;
    Command::new(bin)
        .args([
            "run",
            &format!("--kubeconfig={}", kubeconfig.display()),
            &format!("--admin-address=127.0.0.1:{admin}"),
            "--leader-elect=false",
            &format!("--controllers={}", protection_rules::controller::NAME),
            "--feature-gates=InUseProtectionRules=true",
            "--kube-api-qps=0",
            "--log-level=warn",
        ])
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

fn ns(i: usize) -> String {
    format!("bench-{i}")
}

async fn with_finalizer(client: &kube::Client) -> Result<usize> {
    let secrets: Api<Secret> = Api::all(client.clone());
    Ok(secrets
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|s| {
            s.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
        })
        .count())
}

async fn grant_manager(client: &kube::Client) -> Result<()> {
    test_support::objects::grant_cluster(
        client,
        "bench-rules",
        USER,
        json!([
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
        ]),
    )
    .await
}

#[tokio::main]
async fn main() -> Result<()> {
    test_support::bench::check_args(
        "usage: bench_rules [--scale F] [--cost-model real-1.36|FILE]",
        &["--scale", "--cost-model"],
    )?;
    let f = scale()?;
    let per_ns = ((10_000.0 * f / NAMESPACES as f64) as usize).max(1);
    let secrets_n = per_ns * NAMESPACES;
    let pods_n = secrets_n * PODS_PER_SECRET;
    let released_per_ns = (per_ns / 10).max(1);
    let bin = test_support::bench::manager_bin("bench-rules").map_err(anyhow::Error::msg)?;
    let cost_model = test_support::bench::arg_value("--cost-model")?
        .map(|m| kube_sim::cost::CostSpec::load(&m).map_err(anyhow::Error::msg))
        .transpose()?;
    let objects = secrets_n + pods_n;
    let sim = KubeSim::start(SimConfig {
        cost_model,
        history_window: 4 * objects.max(10_000),
        request_log_capacity: 8 * objects.max(10_000) + 100_000,
        ..SimConfig::default()
    })
    .await?;
    let client = sim.client().await;

    // The CRD and one Enforce rule (the chart's example).
    let crd: CustomResourceDefinition = serde_yaml::from_str(spec::CRD_YAML)?;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .context("creating the ProtectionRule CRD")?;
    let rule_spec = examples::spec("secrets-used-by-pods", FINALIZER)
        .context("the secrets-used-by-pods example")?;
    let rule: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "protection-manager.io/v1alpha1",
        "kind": "ProtectionRule",
        "metadata": {"name": "secrets-used-by-pods"},
        "spec": rule_spec,
    }))?;
    let rules: Api<DynamicObject> = Api::all_with(client.clone(), &spec::api_resource());
    // The CRD is served a moment after it is created.
    let t = Instant::now();
    loop {
        match rules.create(&PostParams::default(), &rule).await {
            Ok(_) => break,
            Err(_) if t.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => return Err(e).context("creating the rule"),
        }
    }

    // The rights the chart grants the manager for this example rule
    // (kube-sim answers the controller's SelfSubjectAccessReviews by RBAC).
    grant_manager(&client).await?;

    let t = Instant::now();
    for i in 0..NAMESPACES {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns(i)}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &n)
            .await?;
    }
    concurrently(secrets_n, CONCURRENCY, |i| {
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns(i % NAMESPACES));
        async move {
            let s: Secret = serde_json::from_value(json!({
                "metadata": {"name": format!("secret-{}", i / NAMESPACES)},
                "data": {"token": "c2VjcmV0"}
            }))?;
            api.create(&PostParams::default(), &s).await?;
            Ok(())
        }
    })
    .await?;
    concurrently(pods_n, CONCURRENCY, |i| {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns(i % NAMESPACES));
        async move {
            let secret = (i / NAMESPACES) % per_ns;
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("pod-{}", i / NAMESPACES)},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.example/app:1",
                                    "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
                    "volumes": [{"name": "s", "secret": {"secretName": format!("secret-{secret}")}}]
                }
            }))?;
            api.create(&PostParams::default(), &p).await?;
            Ok(())
        }
    })
    .await?;
    println!(
        "set-up: 1 rule, {secrets_n} Secrets, {pods_n} pods (each Secret mounted by {PODS_PER_SECRET}) in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    let dir = std::env::temp_dir().join(format!("bench-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("manager.log");
    let kubeconfig = sim.kubeconfig_for(USER)?;
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();

    // Phase 1: back-fill.
    let since = sim.requests().last_seq();
    let t0 = Instant::now();
    let mut child = start_manager(&bin, &kubeconfig, admin, &log)?;
    let pid = child.id();
    loop {
        if let Some(st) = child.try_wait()? {
            bail!(
                "manager exited ({st}); log: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if t0.elapsed() > Duration::from_secs(900) {
            bail!("back-fill not done after 15 min; log in {}", log.display());
        }
        if with_finalizer(&client).await? >= secrets_n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let backfill = t0.elapsed();
    let reqs = sim
        .requests()
        .count(&RequestFilter::default().user(USER).since(since));
    println!(
        "back-fill: {secrets_n} Secrets protected in {:.2}s ({:.0}/s); {reqs} manager requests ({:.2} per Secret, watches and lists included)",
        backfill.as_secs_f64(),
        secrets_n as f64 / backfill.as_secs_f64(),
        reqs as f64 / secrets_n as f64
    );

    // Phase 2: release. Secrets deleted while in use stay (held); each goes
    // once its last pod is deleted.
    let gone: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let watch = {
        let gone = gone.clone();
        let api: Api<Secret> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut w = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = w.next().await {
                if let Ok(watcher::Event::Delete(s)) = ev {
                    let key = (
                        s.metadata.namespace.unwrap_or_default(),
                        s.metadata.name.unwrap_or_default(),
                    );
                    gone.lock().entry(key).or_insert_with(Instant::now);
                }
            }
        })
    };
    let released = released_per_ns * NAMESPACES;
    concurrently(released, CONCURRENCY, |i| {
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns(i % NAMESPACES));
        async move {
            api.delete(
                &format!("secret-{}", i / NAMESPACES),
                &DeleteParams::default(),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = gone.lock().len();
    println!(
        "held: {released} Secrets deleted while mounted, {} gone 2 s later (0 expected)",
        held
    );
    // Every pod of a released Secret; record when each Secret's last pod
    // delete returned.
    let last_pod: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let since = sim.requests().last_seq();
    let t1 = Instant::now();
    concurrently(released * PODS_PER_SECRET, CONCURRENCY, |k| {
        let (i, j) = (k / PODS_PER_SECRET, k % PODS_PER_SECRET);
        let namespace = ns(i % NAMESPACES);
        let secret = i / NAMESPACES;
        let pod = secret + j * per_ns;
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let last_pod = last_pod.clone();
        async move {
            api.delete(&format!("pod-{pod}"), &DeleteParams::default())
                .await?;
            last_pod
                .lock()
                .insert((namespace, format!("secret-{secret}")), Instant::now());
            Ok(())
        }
    })
    .await?;
    loop {
        if gone.lock().len() >= released {
            break;
        }
        if t1.elapsed() > Duration::from_secs(600) {
            bail!(
                "only {} of {released} released Secrets gone after 10 min",
                gone.lock().len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = t1.elapsed();
    let reqs = sim
        .requests()
        .count(&RequestFilter::default().user(USER).since(since));
    let mut lat: Vec<f64> = {
        let gone = gone.lock();
        last_pod
            .lock()
            .iter()
            .filter_map(|(k, t)| gone.get(k).map(|g| g.saturating_duration_since(*t)))
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect()
    };
    lat.sort_by(f64::total_cmp);
    println!(
        "release: {released} Secrets gone {:.2}s after their {} pods started going; from a Secret's last pod delete to the Secret gone: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {reqs} manager requests ({:.2} per released Secret)",
        all.as_secs_f64(),
        released * PODS_PER_SECRET,
        percentile(&lat, 50.0),
        percentile(&lat, 99.0),
        lat.last().copied().unwrap_or(0.0),
        reqs as f64 / released as f64
    );
    watch.abort();
    test_support::bench::print_manager_usage(pid, t0.elapsed());
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    Ok(())
}

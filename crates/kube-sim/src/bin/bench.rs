//! `make bench-sim`: sustained create and patch rates of kube-sim and the
//! watch fan-out latency, driven by kube-rs clients in the same process.
//!
//! `--policies P` binds P MutatingAdmissionPolicies that match every
//! ConfigMap create and update (a match condition and a one-label JSON
//! patch each), to measure the cost of admission on the write path.
//!
//! Usage: kube-sim-bench [--objects N] [--watchers W] [--clients 1,16] [--policies P]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{KubeSim, SimConfig};
use parking_lot::Mutex;
use serde_json::{Value, json};

struct Args {
    objects: usize,
    watchers: usize,
    clients: Vec<usize>,
    policies: usize,
    calibrate: Option<String>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        objects: 10_000,
        watchers: 10,
        clients: vec![1, 16],
        policies: 0,
        calibrate: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--objects" => a.objects = val.parse().with_context(|| format!("--objects {val:?}"))?,
            "--policies" => {
                a.policies = val.parse().with_context(|| format!("--policies {val:?}"))?
            }
            "--calibrate" => a.calibrate = Some(val),
            "--watchers" => {
                a.watchers = val.parse().with_context(|| format!("--watchers {val:?}"))?
            }
            "--clients" => {
                a.clients = val
                    .split(',')
                    .map(|c| {
                        c.trim()
                            .parse::<usize>()
                            .with_context(|| format!("--clients {val:?}"))
                    })
                    .collect::<Result<_>>()?
            }
            other => bail!(
                "unknown flag {other}; usage: kube-sim-bench [--objects N] [--watchers W] [--clients 1,16] [--policies P] [--calibrate MODEL|FILE]"
            ),
        }
    }
    Ok(a)
}

type Starts = Arc<Mutex<HashMap<(bool, usize), Instant>>>;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Binds `n` MutatingAdmissionPolicies on ConfigMap create and update.
async fn install_policies(client: &kube::Client, n: usize) -> Result<()> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let res = |kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        )
    };
    let policies: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &res("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
    );
    let bindings: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &res(
            "MutatingAdmissionPolicyBinding",
            "mutatingadmissionpolicybindings",
        ),
    );
    for i in 0..n {
        let name = format!("bench-{i}");
        let policy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
                "matchConditions": [{"name": "unlabelled", "expression": format!("!has(object.metadata.labels) || !('policy-{i}' in object.metadata.labels)")}],
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": format!("[JSONPatch{{op: 'add', path: '/metadata/labels/policy-{i}', value: 'yes'}}]")}}],
            },
        }))?;
        policies.create(&PostParams::default(), &policy).await?;
        let binding: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": {"policyName": name},
        }))?;
        bindings.create(&PostParams::default(), &binding).await?;
    }
    Ok(())
}

async fn run(objects: usize, watchers: usize, clients: usize, policies: usize) -> Result<()> {
    let sim = KubeSim::start(SimConfig {
        history_window: objects * 2 + 100,
        request_log_capacity: 1000,
        ..Default::default()
    })
    .await?;
    let admin = sim.try_client_as("bench").await?;
    install_policies(&admin, policies).await?;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let starts: Starts = Arc::new(Mutex::new(HashMap::with_capacity(objects * 2)));
    let latencies = Arc::new(Mutex::new(Vec::<Duration>::with_capacity(
        objects * 2 * watchers,
    )));
    let mut watch_tasks = Vec::new();
    for w in 0..watchers {
        let c = sim.try_client_as(&format!("watcher-{w}")).await?;
        let api: Api<ConfigMap> = Api::namespaced(c, "default");
        let stream = api.watch(&WatchParams::default().timeout(290), &rv).await?;
        let starts = starts.clone();
        let latencies = latencies.clone();
        watch_tasks.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut seen = 0usize;
            let mut local = Vec::with_capacity(objects * 2);
            while seen < objects * 2 {
                let ev = match stream.try_next().await {
                    Ok(Some(ev)) => ev,
                    Ok(None) | Err(_) => break,
                };
                let now = Instant::now();
                let (patch, obj) = match ev {
                    WatchEvent::Added(o) => (false, o),
                    WatchEvent::Modified(o) => (true, o),
                    _ => continue,
                };
                seen += 1;
                let idx = obj
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| n.strip_prefix("cm-"))
                    .and_then(|n| n.parse::<usize>().ok());
                if let Some(i) = idx
                    && let Some(t0) = starts.lock().get(&(patch, i))
                {
                    local.push(now.saturating_duration_since(*t0));
                }
            }
            latencies.lock().extend(local);
            seen
        }));
    }
    let mut worker_clients = Vec::new();
    for c in 0..clients {
        worker_clients.push(sim.try_client_as(&format!("client-{c}")).await?);
    }
    let create_secs = timed_writes(
        &worker_clients,
        objects,
        &starts,
        false,
        |api, i| async move {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("cm-{i}"), "labels": {"bench": "yes"}},
                "data": {"value": "0"}
            }))?;
            api.create(&PostParams::default(), &cm).await?;
            Ok(())
        },
    )
    .await?;
    let patch_secs = timed_writes(
        &worker_clients,
        objects,
        &starts,
        true,
        |api, i| async move {
            api.patch(
                &format!("cm-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"value": "1"}})),
            )
            .await?;
            Ok(())
        },
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut delivered = 0;
    for w in watch_tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        delivered += tokio::time::timeout(left, w)
            .await
            .context("watchers did not receive every event within 120s")??;
    }
    let mut l = std::mem::take(&mut *latencies.lock());
    l.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{:>7} {:>8} {:>9} {:>12.0} {:>12.0} {:>11} {:>9.2} {:>9.2} {:>9.2}",
        clients,
        objects,
        watchers,
        objects as f64 / create_secs,
        objects as f64 / patch_secs,
        delivered,
        ms(percentile(&l, 0.5)),
        ms(percentile(&l, 0.99)),
        ms(l.last().copied().unwrap_or_default()),
    );
    sim.shutdown().await;
    Ok(())
}

/// Seconds the clients take to write every ConfigMap `cm-i` with
/// `write(api, i)` (creates, or with `patches` patches), client `c` in a
/// task of its own taking `i` = c, c + clients, …; each write's start goes
/// into `starts` for the watchers' latencies.
async fn timed_writes<F, Fut>(
    clients: &[kube::Client],
    objects: usize,
    starts: &Starts,
    patches: bool,
    write: F,
) -> Result<f64>
where
    F: Fn(Api<ConfigMap>, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let t = Instant::now();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let (starts, write, stride) = (starts.clone(), write.clone(), clients.len());
        tasks.push(tokio::spawn(async move {
            let mut i = c;
            while i < objects {
                starts.lock().insert((patches, i), Instant::now());
                write(api.clone(), i).await?;
                i += stride;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Runs `n` requests from `f` with `c` in flight; answers requests/s.
async fn rate<F, Fut>(n: usize, c: usize, f: F) -> Result<f64>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(f)
        .buffer_unordered(c)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Creates `n` objects through `api`, `object(i)` the i-th, 16 clients at
/// a time; answers creates/s.
async fn create_rate<K>(api: &Api<K>, n: usize, object: impl Fn(usize) -> Value) -> Result<f64>
where
    K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let pp = PostParams::default();
    rate(n, 16, |i| {
        let (api, pp, object) = (api.clone(), pp.clone(), object(i));
        async move {
            api.create(&pp, &serde_json::from_value::<K>(object)?)
                .await?;
            Ok(())
        }
    })
    .await
}

/// `--calibrate MODEL`: the figures the cost model was calibrated to,
/// measured on kube-sim with that model, beside what the real server did.
async fn calibrate(model: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Service};
    let spec = kube_sim::cost::CostSpec::load(model).map_err(anyhow::Error::msg)?;
    let sim = KubeSim::start(SimConfig {
        cost_model: Some(spec),
        ..SimConfig::default()
    })
    .await?;
    let client = sim.client().await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let create_pv = create_rate(&pvs, 1000, |i| {
        json!({"metadata": {"name": format!("pv-{i}")},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": "/d"}}})
    })
    .await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let create_pvc = create_rate(&pvcs, 1000, |i| {
        json!({"metadata": {"name": format!("c-{i}")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let create_pod = create_rate(&pods, 1000, |i| {
        json!({"metadata": {"name": format!("p-{i}")},
        "spec": {"containers": [{"name": "a", "image": "busybox"}]}})
    })
    .await?;
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let create_svc = create_rate(&svcs, 300, |i| {
        json!({"metadata": {"name": format!("s-{i}")},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})
    })
    .await?;
    let patch = |round: usize| {
        let pvcs = pvcs.clone();
        move |i: usize| {
            let pvcs = pvcs.clone();
            async move {
                let p = json!([{"op": "add", "path": "/metadata/labels", "value": {"r": round.to_string()}}]);
                pvcs.patch(
                    &format!("c-{i}"),
                    &PatchParams::default(),
                    &Patch::Json::<()>(serde_json::from_value(p)?),
                )
                .await?;
                Ok(())
            }
        }
    };
    let serial = rate(500, 1, patch(1)).await?;
    let ceiling = rate(1000, 64, patch(2)).await?;
    println!("cost model {model:?} on kube-sim vs the real kube-apiserver 1.36 + etcd (2 cores)");
    println!(
        "  {:<44} {:>10} {:>14}",
        "figure", "kube-sim", "real server"
    );
    for (what, got, real) in [
        (
            "finalizer-style JSON PATCH, 1 client (/s)",
            serial,
            "265-300",
        ),
        ("JSON PATCH, 64 in flight (/s)", ceiling, "1000-1200"),
        ("PV create, 16 clients (/s)", create_pv, "446"),
        ("PVC create, 16 clients (/s)", create_pvc, "444"),
        ("pod create, 16 clients (/s)", create_pod, "394"),
        (
            "LoadBalancer Service create, 16 clients (/s)",
            create_svc,
            "111-117",
        ),
    ] {
        println!("  {what:<44} {got:>10.0} {real:>14}");
    }
    sim.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    if let Some(model) = &args.calibrate {
        return calibrate(model).await;
    }
    println!(
        "kube-sim bench: {} objects, {} watchers, {} mutating admission policies, kube-rs clients in-process ({} cores)",
        args.objects,
        args.watchers,
        args.policies,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!(
        "{:>7} {:>8} {:>9} {:>12} {:>12} {:>11} {:>9} {:>9} {:>9}",
        "clients",
        "objects",
        "watchers",
        "creates/s",
        "patches/s",
        "events",
        "p50 ms",
        "p99 ms",
        "max ms"
    );
    for c in args.clients.clone() {
        run(args.objects, args.watchers, c, args.policies).await?;
    }
    println!(
        "(events = watch events delivered across all watchers; latency = write request start -> watcher receipt)"
    );
    Ok(())
}

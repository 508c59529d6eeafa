//! `make bench-real` (load balancers): service-lb-cleanup beside upstream's
//! service controller on one real kube-apiserver v1.36.3.
//!
//! Upstream is `hack/real-k8s/cmd/service-controller`: k8s.io/cloud-provider
//! v0.36.3 `controllers/service` as cloud-controller-manager runs it, over the
//! module's in-process fake cloud, 16 workers (`--concurrent-service-syncs`),
//! client QPS 1000. Ours is the release manager binary in the upstream
//! profile (the same finalizer, `service.kubernetes.io/load-balancer-cleanup`)
//! over cloud-sim (HTTP, in this process), `--concurrency=16
//! --kube-api-qps=0`. Both handle Services without a class (ours with
//! `--lb-include-unclassed`).
//!
//! For each contender, one after the other: 2,000 `type: LoadBalancer`
//! Services (no node ports) exist before it starts; printed are the time from
//! its process start until all carry the finalizer and an ingress, the time
//! until all are gone after they are deleted (32 in flight), writes per
//! Service by verb from the audit log (by user), peak RSS and CPU seconds.
//! cloud-sim's own round trip (2,000 creates through our provider client at
//! 16 concurrent) is measured apart, so that ours' figure can be read with
//! the provider's share taken out; upstream's fake cloud answers in-process.
//!
//! The contenders run in rounds, in ABBA order (upstream, ours, ours,
//! upstream, ...; `--rounds`, default 2), each on its own 2,000 new
//! Services: the server slows as its history grows (creating the second
//! batch of 2,000 Services took ~17% longer than the first in earlier
//! one-round runs, where ours always came second), and ABBA cancels such
//! a drift where one fixed order would charge it to whoever runs later.
//! The ratios are of each contender's mean over its rounds; every round's
//! figures are printed as it ends.
//!
//! Goals (issue 23): the speed ratios ours/upstream ≥ 1.0, one finalizer
//! write per transition, peak RSS ≤ 30 MiB.
//!
//! `cargo run --release -p lb-cleanup --example bench_real_lb -- [--services N] [--rounds N]`.
//! Figures only; nothing is asserted.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cloud_sim::{CloudSim, Config as CloudConfig};
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use kube::api::{Api, DeleteParams, PostParams};
use lb_cleanup::provider::http::{HttpProvider, HttpProviderConfig};
use lb_cleanup::provider::{LbNode, LbNodeAddress, LbRef, LbSpec, LoadBalancerProvider};
use serde_json::json;
use test_bed::bench::{Contender, RealBench, Release, Tally, Tracker, Usage, bulk, ratio_line};
use test_support::bench::{at_most, verdict};

const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
/// The ServiceAccount the bootstrap policy binds
/// `system:controller:service-controller` to.
const UPSTREAM_USER: &str = "system:serviceaccount:kube-system:service-controller";
const WORKERS: usize = 16;
const NODES: usize = 10;
const IN_FLIGHT: usize = 32;
const LIMIT: Duration = Duration::from_secs(1800);
const RSS_GOAL_MIB: f64 = 30.0;
const SPEED_GOAL: f64 = 1.0;

fn service(ns: &str, name: &str) -> Result<Service> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false,
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            "selector": {"app": name},
        },
    }))?)
}

fn name(i: usize) -> String {
    format!("svc-{i:05}")
}

fn provisioned(s: &Service) -> bool {
    s.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
        && s.status
            .as_ref()
            .and_then(|st| st.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .is_some_and(|i| !i.is_empty())
}

/// The provider alone: `n` creates through our own HTTP provider client at
/// `WORKERS` concurrent, then the deletes; (creates/s, deletes/s).
async fn cloud_round_trip(cloud: &str, n: usize) -> Result<(f64, f64)> {
    let provider = HttpProvider::new(HttpProviderConfig::new(cloud))?;
    let nodes: Vec<LbNode> = (0..NODES)
        .map(|i| LbNode {
            name: format!("node-{i:02}"),
            provider_id: format!("sim://node-{i:02}"),
            addresses: vec![LbNodeAddress {
                kind: "InternalIP".into(),
                address: format!("10.0.0.{}", i + 1),
            }],
        })
        .collect();
    let mut svc = service("probe", "probe")?;
    svc.metadata.uid = Some("00000000-0000-4000-8000-000000000000".into());
    let spec = LbSpec::from_service(&svc)?;
    let lb = |i: usize| {
        LbRef::new(
            "probe",
            format!("probe-{i:05}"),
            format!("00000000-0000-4000-8000-{i:012}"),
        )
    };
    let (provider, spec, nodes) = (&provider, &spec, &nodes);
    let created = bulk(n, WORKERS, |i| async move {
        provider.ensure(&lb(i), spec, nodes).await?;
        Ok(())
    })
    .await?;
    let deleted = bulk(n, WORKERS, |i| async move {
        provider.ensure_deleted(&lb(i)).await?;
        Ok(())
    })
    .await?;
    Ok((
        n as f64 / created.as_secs_f64(),
        n as f64 / deleted.as_secs_f64(),
    ))
}

struct Run {
    provision_s: f64,
    provision_adding_s: f64,
    provision_req: Tally,
    gone: Release,
    delete_req: Tally,
    usage: Usage,
}

/// One contender's figures over its rounds: times and CPU as means, the
/// release latencies of every round together, requests summed (the
/// per-Service figures divide by `services`), the highest RSS.
struct Mean {
    provision_s: f64,
    provision_adding_s: f64,
    gone_whole_s: f64,
    gone_p99_ms: f64,
    provision_writes: Vec<Tally>,
    delete_writes: Vec<Tally>,
    usage: Usage,
}

impl Run {
    fn mean(runs: Vec<Run>) -> Mean {
        let k = runs.len().max(1) as f64;
        let avg = |f: &dyn Fn(&Run) -> f64| runs.iter().map(f).sum::<f64>() / k;
        let mut latency_ms: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.gone.latency_ms.iter().copied())
            .collect();
        latency_ms.sort_by(f64::total_cmp);
        let all = Release {
            n: runs.iter().map(|r| r.gone.n).sum(),
            gone: runs.iter().map(|r| r.gone.gone).sum(),
            latency_ms,
            whole_s: 0.0,
        };
        Mean {
            provision_s: avg(&|r| r.provision_s),
            provision_adding_s: avg(&|r| r.provision_adding_s),
            gone_whole_s: avg(&|r| r.gone.whole_s),
            gone_p99_ms: all.p(99.0),
            usage: Usage {
                peak_rss_mib: runs
                    .iter()
                    .map(|r| r.usage.peak_rss_mib)
                    .fold(0.0, f64::max),
                cpu_s: avg(&|r| r.usage.cpu_s),
            },
            provision_writes: runs.iter().map(|r| r.provision_req.clone()).collect(),
            delete_writes: runs.iter().map(|r| r.delete_req.clone()).collect(),
        }
    }
}

async fn start(b: &RealBench, ours: bool, cloud: &str) -> Result<Contender> {
    if ours {
        let bin = test_bed::bench::manager_bin()?;
        let args = vec![
            "--controllers=service-lb-cleanup".to_string(),
            "--finalizer-profile=upstream".into(),
            format!("--lb-provider-endpoint={cloud}"),
            "--lb-include-unclassed".into(),
            "--kube-api-qps=0".into(),
            format!("--concurrency={WORKERS}"),
            format!(
                "--admin-address=127.0.0.1:{}",
                test_bed::bench::free_port()?
            ),
        ];
        b.start_manager(
            "ours (--concurrency=16 --kube-api-qps=0, cloud-sim over HTTP)",
            &bin,
            lb_cleanup::INFO.rbac,
            &args,
        )
        .await
    } else {
        let program = tokio::task::spawn_blocking(|| {
            test_bed::control_plane::binaries::extra("service-controller")
        })
        .await??;
        b.start_program(
            "upstream service controller (16 workers, QPS 1000, fake cloud in-process)",
            &program,
            UPSTREAM_USER,
            &[
                format!("--concurrent-service-syncs={WORKERS}"),
                "--kube-api-qps=1000".into(),
                "--kube-api-burst=1000".into(),
            ],
        )
        .await
    }
}

async fn run(b: &RealBench, ours: bool, n: usize, round: usize, cloud: &CloudSim) -> Result<Run> {
    let ns = &if ours {
        format!("lb-ours-{round}")
    } else {
        format!("lb-upstream-{round}")
    };
    let c = &b.admin;
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &nsobj)
        .await?;
    let api: Api<Service> = Api::namespaced(c.clone(), ns);
    let tracker = Tracker::start(api.clone(), provisioned);
    tracker.wait_ready().await;
    let api_ref = &api;
    let took = bulk(n, IN_FLIGHT, |i| async move {
        api_ref
            .create(&PostParams::default(), &service(ns, &name(i))?)
            .await?;
        Ok(())
    })
    .await?;
    println!();
    println!(
        "round {}: {n} Services created in {:.1}s",
        round + 1,
        took.as_secs_f64()
    );
    // Each contender starts on a settled server (`RealBench::settle`).
    let settled = b.settle().await?;
    let m0 = b.mark();
    let contender = start(b, ours, &cloud.url()).await?;
    println!("== {} ==", contender.label);
    println!("  started {settled}");
    let t0 = contender.started;
    let (first, last) = tokio::select! {
        r = tracker.wait_done(n, LIMIT) => r?,
        e = async { loop {
            if let Err(e) = contender.check_running() { return e; }
            tokio::time::sleep(Duration::from_secs(1)).await;
        } } => return Err(e),
    };
    let provision_s = last.duration_since(t0).as_secs_f64();
    let provision_adding_s = last.duration_since(first).as_secs_f64();
    // Events trail the status writes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let m1 = b.mark();
    let provision_req = b.requests(m0, m1, &contender.who);
    println!(
        "all {n} with the finalizer and an ingress: {provision_s:.2}s from process start, {provision_adding_s:.2}s first → last"
    );
    println!(
        "  requests per Service: {:.3} ({})",
        provision_req.total() as f64 / n as f64,
        provision_req.per_object(n)
    );
    println!(
        "  their PATCHes: {}",
        b.served(m0, m1, &contender.who, "patch").line()
    );
    let at = tokio::sync::Mutex::new(vec![Instant::now(); n]);
    let at_ref = &at;
    bulk(n, IN_FLIGHT, |i| async move {
        api_ref.delete(&name(i), &DeleteParams::default()).await?;
        at_ref.lock().await[i] = Instant::now();
        Ok(())
    })
    .await?;
    let keys: Vec<String> = (0..n).map(|i| format!("{ns}/{}", name(i))).collect();
    let gone = Release::of(&at.into_inner(), &tracker.wait_gone(&keys, LIMIT).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let m2 = b.mark();
    let delete_req = b.requests(m1, m2, &contender.who);
    println!("deleted ({IN_FLIGHT} in flight): {}", gone.line());
    println!(
        "  requests per Service: {:.3} ({})",
        delete_req.total() as f64 / n as f64,
        delete_req.per_object(n)
    );
    if ours {
        let left = cloud.inventory().len();
        println!(
            "  load balancers left in cloud-sim: {left} {}",
            verdict(left == 0, "0")
        );
    }
    let usage = contender.stop();
    println!(
        "peak RSS {:.1} MiB, CPU {:.2}s (whole run)",
        usage.peak_rss_mib, usage.cpu_s
    );
    Ok(Run {
        provision_s,
        provision_adding_s,
        provision_req,
        gone,
        delete_req,
        usage,
    })
}

/// Writes to `services` and `services/status` (the audit log does not say
/// what a PATCH changed: a finalizer, the ingress, or both).
fn writes(t: &Tally) -> u64 {
    t.writes("services")
}

#[tokio::main]
async fn main() -> Result<()> {
    test_support::bench::check_args(
        "usage: bench_real_lb [--services N] [--rounds N]",
        &["--services", "--rounds"],
    )?;
    let number = |flag: &str, default: usize| -> Result<usize> {
        match test_support::bench::arg_value(flag)? {
            None => Ok(default),
            Some(v) => match v.parse() {
                Ok(n) if n > 0 => Ok(n),
                _ => anyhow::bail!("{flag}: {v:?} is not a positive number"),
            },
        }
    };
    let n = number("--services", 2_000)?;
    let rounds = number("--rounds", 2)?;
    test_bed::bench::manager_bin()?;
    let b = RealBench::start("bench-real-lb").await?;
    for i in 0..NODES {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("node-{i:02}")},
            "spec": {"providerID": format!("sim://node-{i:02}")},
            "status": {"addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", i + 1)}]},
        }))?;
        Api::<Node>::all(b.admin.clone())
            .create(&PostParams::default(), &node)
            .await?;
    }
    // TEST-NET-3 (cloud-sim's default) holds 254 addresses: fewer than the
    // Services of one run.
    let cloud = CloudSim::start(
        CloudConfig::default().with_ip_range("10.64.0.0/16".parse().context("ip range")?),
    )
    .await?;
    let (creates, deletes) = cloud_round_trip(&cloud.url(), n).await?;
    println!(
        "cloud-sim alone, through our provider client at {WORKERS} concurrent: {creates:.0} creates/s, {deletes:.0} deletes/s ({:.2}s and {:.2}s for {n})",
        n as f64 / creates,
        n as f64 / deletes
    );
    let mut upstream_runs = Vec::new();
    let mut ours_runs = Vec::new();
    for round in 0..rounds {
        // ABBA: upstream first in even rounds, ours first in odd ones.
        for ours in [round % 2 == 1, round % 2 == 0] {
            let r = run(&b, ours, n, round, &cloud).await?;
            if ours {
                ours_runs.push(r);
            } else {
                upstream_runs.push(r);
            }
        }
    }
    let upstream = Run::mean(upstream_runs);
    let ours = Run::mean(ours_runs);
    let api = test_bed::bench::apiserver_usage(b.cp());
    println!();
    println!(
        "kube-apiserver for the whole run: peak RSS {:.0} MiB, CPU {:.1}s",
        api.peak_rss_mib, api.cpu_s
    );
    println!();
    println!(
        "== {n} LoadBalancer Services: ours / upstream, means over {rounds} round(s) each (speed: > 1 is ours faster) =="
    );
    println!(
        "{}",
        ratio_line(
            "finalizer + ingress on all, process start → last",
            ours.provision_s,
            upstream.provision_s,
            " s",
            true,
            SPEED_GOAL
        )
    );
    println!(
        "{}",
        ratio_line(
            "finalizer + ingress on all, first → last",
            ours.provision_adding_s,
            upstream.provision_adding_s,
            " s",
            true,
            SPEED_GOAL
        )
    );
    let share = ours.provision_s - n as f64 / creates;
    println!(
        "  ours without cloud-sim's own round trip ({:.2}s at {WORKERS} concurrent): {share:.2}s → {:.2} of upstream's time",
        n as f64 / creates,
        upstream.provision_s / share
    );
    println!(
        "{}",
        ratio_line(
            "all gone, last delete → last gone",
            ours.gone_whole_s,
            upstream.gone_whole_s,
            " s",
            true,
            SPEED_GOAL
        )
    );
    println!(
        "{}",
        ratio_line(
            "delete → gone p99",
            ours.gone_p99_ms,
            upstream.gone_p99_ms,
            " ms",
            true,
            SPEED_GOAL
        )
    );
    let per = |ts: &[Tally]| ts.iter().map(writes).sum::<u64>() as f64 / (n * rounds) as f64;
    println!(
        "Service writes per Service (finalizer, status): provisioning ours {:.3} vs upstream {:.3}; deletion ours {:.3} vs upstream {:.3}",
        per(&ours.provision_writes),
        per(&upstream.provision_writes),
        per(&ours.delete_writes),
        per(&upstream.delete_writes),
    );
    // One finalizer write per transition: ours adds the finalizer in one
    // PATCH and writes the ingress in another (2 per Service), and removes
    // the finalizer with the status in one PATCH (1 per Service).
    let add = per(&ours.provision_writes);
    let remove = per(&ours.delete_writes);
    println!(
        "ours: {add:.3} Service writes per provisioning (finalizer add + ingress) and {remove:.3} per deletion (finalizer removal) {}",
        verdict(
            (add - 2.0).abs() < 1e-9 && (remove - 1.0).abs() < 1e-9,
            "2.000 and 1.000: one finalizer write per transition"
        )
    );
    let events = |ts: &[Tally]| {
        ts.iter().map(|t| t.writes("events")).sum::<u64>() as f64 / (n * rounds) as f64
    };
    println!(
        "Event writes per Service: ours {:.3} + {:.3} vs upstream {:.3} + {:.3} (provisioning + deletion)",
        events(&ours.provision_writes),
        events(&ours.delete_writes),
        events(&upstream.provision_writes),
        events(&upstream.delete_writes),
    );
    println!(
        "peak RSS (highest round): ours {:.1} MiB {} vs upstream {:.1} MiB (upstream/ours {:.2}); CPU seconds (mean): ours {:.2} vs upstream {:.2} (upstream/ours {:.2}, no goal set)",
        ours.usage.peak_rss_mib,
        at_most(ours.usage.peak_rss_mib, RSS_GOAL_MIB, " MiB"),
        upstream.usage.peak_rss_mib,
        upstream.usage.peak_rss_mib / ours.usage.peak_rss_mib,
        ours.usage.cpu_s,
        upstream.usage.cpu_s,
        upstream.usage.cpu_s / ours.usage.cpu_s,
    );
    Ok(())
}

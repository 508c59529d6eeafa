//! Prints cloud-sim's throughput with a state file: N creates then N deletes,
//! one at a time and with C concurrent clients.
//!
//! `cargo run --release -p cloud-sim --example throughput -- [N] [C] [no-fsync]`
//! (defaults 2000 and 16, fsync on). Figures only; nothing is asserted.

use std::time::Instant;

use cloud_sim::{CloudSim, Config, Operation};
use serde_json::json;

fn body(uid: &str) -> serde_json::Value {
    json!({
        "name": format!("a{uid}"),
        "service": {"namespace": "bench", "name": format!("svc-{uid}"), "uid": uid},
        "spec": {
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}],
            "loadBalancerSourceRanges": [], "ipFamilies": ["IPv4"],
            "sessionAffinity": "None", "externalTrafficPolicy": "Cluster", "annotations": {}
        },
        "nodes": (0..3).map(|i| json!({
            "name": format!("node-{i}"), "providerID": format!("sim://node-{i}"),
            "addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", i + 1)}]
        })).collect::<Vec<_>>()
    })
}

async fn phase(
    label: &str,
    url: &str,
    n: usize,
    concurrency: usize,
    delete: bool,
) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next, url) = (client.clone(), next.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let uid = format!("uid-{i:06}");
                let target = format!("{url}/v1/loadbalancers/{uid}");
                let r = if delete {
                    client.delete(&target).send().await?
                } else {
                    client.put(&target).json(&body(&uid)).send().await?
                };
                anyhow::ensure!(
                    r.status().is_success(),
                    "{} {}",
                    r.status(),
                    r.text().await?
                );
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{label:<34} {n:>6} calls {secs:>8.2} s {:>9.0} calls/s",
        n as f64 / secs
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let c: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(16);
    let fsync = args.next().as_deref() != Some("no-fsync");
    let dir = std::env::temp_dir().join(format!("cloud-sim-throughput-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let state = dir.join("state.json");
    let sim = CloudSim::start(
        Config::default()
            .with_state_file(&state)
            .with_fsync(fsync)
            .with_ip_range("10.64.0.0/16".parse()?),
    )
    .await?;
    println!(
        "state file {} (n={n}, concurrency={c}, fsync={fsync})",
        state.display()
    );
    phase("create, 1 client", &sim.url(), n, 1, false).await?;
    let size = std::fs::metadata(&state)?.len();
    phase("delete, 1 client", &sim.url(), n, 1, true).await?;
    let writes_seq = sim.stats().state_writes;
    phase(&format!("create, {c} clients"), &sim.url(), n, c, false).await?;
    phase(&format!("delete, {c} clients"), &sim.url(), n, c, true).await?;
    let stats = sim.stats();
    println!(
        "state file at {n} load balancers: {size} bytes; state writes: {writes_seq} for {} sequential mutations, {} for {} concurrent ones",
        2 * n,
        stats.state_writes - writes_seq,
        2 * n
    );
    println!(
        "put calls {}, delete calls {}",
        stats.operation(Operation::Put).total,
        stats.operation(Operation::Delete).total
    );
    sim.shutdown().await?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

//! `make bench-vac`: vac-protection at scale, in-process against kube-sim.
//!
//! 1,000 VolumeAttributesClasses used by 10,000 PVCs (10 each) exist without
//! finalizers; the controller starts at 0.4 with `VolumeAttributesClass=true`.
//! Prints:
//! * back-fill time (start → 1,000 finalizers) and the requests it made;
//! * release of 1,000 deleted classes once their PVCs are gone: time, and
//!   the live LISTs it took (classes confirmed together share one).
//!
//! `cargo run --release -p vac-protection --example bench_vac -- [--scale F]`.
//! Figures only; nothing is asserted.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube_sim::{KubeSim, RequestFilter, SimConfig};
use protection_core::release::gates_at;
use protection_core::{FinalizerProfile, Metrics, Version};
use serde_json::json;
use vac_protection::{GATES, INFO, Settings};

const USER: &str = "protection-manager";

fn scale() -> Result<f64> {
    let args: Vec<String> = std::env::args().collect();
    let f = match args.iter().position(|a| a == "--scale") {
        Some(i) => args
            .get(i + 1)
            .context("--scale needs a value")?
            .parse::<f64>()
            .context("--scale must be a number")?,
        None => 1.0,
    };
    if !f.is_finite() || f <= 0.0 {
        bail!("--scale must be positive, got {f}");
    }
    Ok(f)
}

async fn count_with_finalizer(vacs: &Api<DynamicObject>, f: &str) -> Result<usize> {
    Ok(vacs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|v| {
            v.metadata
                .finalizers
                .as_ref()
                .is_some_and(|l| l.iter().any(|x| x == f))
        })
        .count())
}

#[tokio::main]
async fn main() -> Result<()> {
    test_support::bench::check_args("usage: bench_vac [--scale F]", &["--scale"])?;
    let f = scale()?;
    let classes = ((1000.0 * f) as usize).max(1);
    let pvcs_n = ((10000.0 * f) as usize).max(1);
    let sim = KubeSim::start(SimConfig::default()).await?;
    let client = sim.client().await;
    let gvk = GroupVersionKind::gvk("storage.k8s.io", "v1", "VolumeAttributesClass");
    let vacs: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
    );
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let t = Instant::now();
    stream::iter(0..classes)
        .map(|i| {
            let vacs = vacs.clone();
            async move {
                let v: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
                    "metadata": {"name": format!("class-{i}")},
                    "driverName": "csi.example.com", "parameters": {"iops": "3000"}
                }))?;
                vacs.create(&PostParams::default(), &v).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    stream::iter(0..pvcs_n)
        .map(|i| {
            let pvcs = pvcs.clone();
            async move {
                let p: PersistentVolumeClaim = serde_json::from_value(json!({
                    "metadata": {"name": format!("pvc-{i}")},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}},
                             "volumeAttributesClassName": format!("class-{}", i % classes)}
                }))?;
                pvcs.create(&PostParams::default(), &p).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    println!(
        "set-up: {classes} classes, {pvcs_n} PVCs in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    let finalizer = INFO.finalizer.get(FinalizerProfile::Project).to_string();
    let mut gates = gates_at(Version::new(0, 4), GATES)?;
    gates.set_from_flag("VolumeAttributesClass=true")?;
    let metrics = Metrics::new()?;
    let tc = test_support::controller_context(
        vac_protection::controller::NAME,
        sim.client_as(USER).await,
        gates,
        &metrics,
        4,
    );
    let shutdown = tc.shutdown.clone();
    let before = sim.requests().count(&RequestFilter::default().user(USER));
    let start = Instant::now();
    let handle = tokio::spawn(vac_protection::controller::run(
        tc.ctx,
        Settings {
            finalizer: finalizer.clone(),
            resync_period: Duration::ZERO,
        },
    ));
    while count_with_finalizer(&vacs, &finalizer).await? < classes {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let backfill = start.elapsed();
    let reqs = sim.requests().count(&RequestFilter::default().user(USER)) - before;
    println!(
        "back-fill: {classes} classes in {:.2}s ({:.0} classes/s), {reqs} requests ({:.2} per class, watches and lists included)",
        backfill.as_secs_f64(),
        classes as f64 / backfill.as_secs_f64(),
        reqs as f64 / classes as f64
    );

    // Delete every class (held: all in use), then every PVC: the classes are
    // released as their last claim goes.
    for i in 0..classes {
        vacs.delete(&format!("class-{i}"), &DeleteParams::default())
            .await?;
    }
    let before = sim.requests().count(&RequestFilter::default().user(USER));
    let start = Instant::now();
    stream::iter(0..pvcs_n)
        .map(|i| {
            let pvcs = pvcs.clone();
            async move {
                pvcs.delete(&format!("pvc-{i}"), &DeleteParams::default())
                    .await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    while !vacs.list(&ListParams::default()).await?.items.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let release = start.elapsed();
    let reqs = sim.requests().count(&RequestFilter::default().user(USER)) - before;
    let text = metrics.encode()?;
    let lists = text
        .lines()
        .find(|l| {
            l.starts_with("protection_manager_live_lists_total{controller=\"vac-protection\"} ")
        })
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("?")
        .to_string();
    println!(
        "release: {classes} deleted classes released {:.2}s after their {pvcs_n} PVCs started going; {lists} live PVC+PV list rounds; {reqs} requests",
        release.as_secs_f64()
    );
    shutdown.cancel();
    let _ = handle.await;
    Ok(())
}

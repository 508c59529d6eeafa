//! `make bench-real` (VolumeAttributesClasses): vac-protection beside
//! kube-controller-manager's volumeattributesclass-protection-controller on
//! one real kube-apiserver v1.36.3.
//!
//! 1,000 classes and 2,000 PVCs in 20 namespaces; the PVCs name the first
//! 500 classes (four each), the other 500 are unused. The
//! StorageObjectInUseProtection admission plugin is off, so the classes
//! exist without finalizers. Four contenders, one after the other, the
//! objects reset between them: KCM v1.36.3
//! (`--controllers=volumeattributesclass-protection-controller`) at its
//! defaults and at QPS 1000; ours in the upstream profile (the same
//! finalizer, `kubernetes.io/vac-protection`; the VolumeAttributesClass gate
//! on, as back-filling needs at 0.4) at its defaults and at the large
//! back-fill setting (`--kube-api-qps=0 --concurrency=32`). Each: the
//! back-fill (process start → every class), 100 unused classes deleted
//! (delete → gone), 100 used classes deleted and released by deleting their
//! claims (the last claim's delete → gone), requests per object by verb from
//! the audit log, peak RSS and CPU seconds; then the ratios with their goals
//! (issue 23: every speed ratio ours/upstream ≥ 1.0, one finalizer write
//! per transition).
//!
//! `cargo run --release -p vac-protection --example bench_real_vac --
//! [--contenders kcm,kcm-1000,ours,ours-large]`. Figures only.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::json;
use test_bed::bench::{Contender, RealBench, Release, Tally, Tracker, Usage, bulk, ratio_line};
use test_support::bench::verdict;

const FIN: &str = "kubernetes.io/vac-protection";
/// The resource the finalizers are written to (audit log).
const CLASSES_RESOURCE: &str = "volumeattributesclasses";
const CLASSES: usize = 1_000;
const USED_CLASSES: usize = 500;
const CLAIMS: usize = 2_000;
const NAMESPACES: usize = 20;
const RELEASES: usize = 100;
const IN_FLIGHT: usize = 32;
const LIMIT: Duration = Duration::from_secs(1800);
const SPEED_GOAL: f64 = 1.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Kcm,
    Kcm1000,
    Ours,
    OursLarge,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Kcm, Kind::Kcm1000, Kind::Ours, Kind::OursLarge];

    fn arg(self) -> &'static str {
        match self {
            Kind::Kcm => "kcm",
            Kind::Kcm1000 => "kcm-1000",
            Kind::Ours => "ours",
            Kind::OursLarge => "ours-large",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Kcm => "KCM, defaults (client QPS 20, burst 30)",
            Kind::Kcm1000 => "KCM, --kube-api-qps=1000 --kube-api-burst=1000",
            Kind::Ours => "ours, upstream profile, defaults (--kube-api-qps=50 --concurrency=4)",
            Kind::OursLarge => {
                "ours, upstream profile, large back-fill (--kube-api-qps=0 --concurrency=32)"
            }
        }
    }
}

fn vacs(c: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("storage.k8s.io", "v1", "VolumeAttributesClass");
    Api::all_with(
        c.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "volumeattributesclasses"),
    )
}

fn class(i: usize) -> String {
    format!("class-{i:04}")
}

fn ns(i: usize) -> String {
    format!("vac-{i:02}")
}

/// Claim `k`: its namespace, name and class (claims name the first
/// `USED_CLASSES` classes, `CLAIMS / USED_CLASSES` each).
fn claim(k: usize) -> (String, String, String) {
    (
        ns(k % NAMESPACES),
        format!("claim-{k:05}"),
        class(k % USED_CLASSES),
    )
}

fn class_manifest(name: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass",
        "metadata": {"name": name}, "driverName": "csi.example.com",
        "parameters": {"iops": "3000"}
    }))?)
}

async fn create_claim(c: &kube::Client, k: usize) -> Result<()> {
    let (n, name, cls) = claim(k);
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "volumeAttributesClassName": cls}
    }))?;
    Api::<PersistentVolumeClaim>::namespaced(c.clone(), &n)
        .create(&PostParams::default(), &pvc)
        .await?;
    Ok(())
}

/// The used classes released in phase 3, and the claims naming them.
fn used_releases() -> (Vec<usize>, Vec<usize>) {
    let classes: Vec<usize> = (0..RELEASES).collect();
    let claims = (0..CLAIMS)
        .filter(|k| k % USED_CLASSES < RELEASES)
        .collect();
    (classes, claims)
}

fn unused_releases() -> Vec<usize> {
    (USED_CLASSES..USED_CLASSES + RELEASES).collect()
}

async fn populate(b: &RealBench) -> Result<()> {
    let c = &b.admin;
    let t = Instant::now();
    for i in 0..NAMESPACES {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns(i)}}))?;
        Api::<Namespace>::all(c.clone())
            .create(&PostParams::default(), &n)
            .await?;
    }
    bulk(CLASSES, IN_FLIGHT, |i| async move {
        vacs(c)
            .create(&PostParams::default(), &class_manifest(&class(i))?)
            .await?;
        Ok(())
    })
    .await?;
    bulk(CLAIMS, IN_FLIGHT, |k| create_claim(c, k)).await?;
    println!(
        "populated {CLASSES} classes and {CLAIMS} claims naming {USED_CLASSES} of them in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// No finalizers on the classes, and every class and claim there.
async fn reset(b: &RealBench) -> Result<()> {
    let c = &b.admin;
    let with: Vec<String> = vacs(c)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|v| !v.finalizers().is_empty())
        .map(|v| v.name_any())
        .collect();
    let with = &with;
    bulk(with.len(), 64, |i| async move {
        vacs(c)
            .patch(
                &with[i],
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
        Ok(())
    })
    .await?;
    let (used, claims) = used_releases();
    let classes: Vec<usize> = used.into_iter().chain(unused_releases()).collect();
    let classes = &classes;
    bulk(classes.len(), IN_FLIGHT, |i| async move {
        let name = class(classes[i]);
        if vacs(c).get_opt(&name).await?.is_none() {
            vacs(c)
                .create(&PostParams::default(), &class_manifest(&name)?)
                .await?;
        }
        Ok(())
    })
    .await?;
    let claims = &claims;
    bulk(claims.len(), IN_FLIGHT, |i| async move {
        let (n, name, _) = claim(claims[i]);
        if Api::<PersistentVolumeClaim>::namespaced(c.clone(), &n)
            .get_opt(&name)
            .await?
            .is_none()
        {
            create_claim(c, claims[i]).await?;
        }
        Ok(())
    })
    .await?;
    Ok(())
}

struct Run {
    whole_s: f64,
    adding_s: f64,
    backfill: Tally,
    unused: Release,
    unused_req: Tally,
    used: Release,
    held: usize,
    used_req: Tally,
    usage: Usage,
}

async fn start(b: &RealBench, kind: Kind) -> Result<Contender> {
    match kind {
        Kind::Kcm | Kind::Kcm1000 => b.start_kcm(
            kind.label(),
            &["volumeattributesclass-protection-controller"],
            (kind == Kind::Kcm1000).then_some((1000, 1000)),
        ),
        Kind::Ours | Kind::OursLarge => {
            let bin = test_bed::bench::manager_bin()?;
            let mut args = vec![
                "--controllers=vac-protection".to_string(),
                "--finalizer-profile=upstream".into(),
                "--feature-gates=VolumeAttributesClass=true".into(),
                format!(
                    "--admin-address=127.0.0.1:{}",
                    test_bed::bench::free_port()?
                ),
            ];
            if kind == Kind::OursLarge {
                args.extend(["--kube-api-qps=0".into(), "--concurrency=32".into()]);
            }
            b.start_manager(kind.label(), &bin, vac_protection::INFO.rbac, &args)
                .await
        }
    }
}

async fn delete_classes(c: &kube::Client, classes: &[usize]) -> Result<Vec<Instant>> {
    let at = tokio::sync::Mutex::new(vec![Instant::now(); classes.len()]);
    let at_ref = &at;
    bulk(classes.len(), IN_FLIGHT, |i| async move {
        vacs(c)
            .delete(&class(classes[i]), &DeleteParams::default())
            .await?;
        at_ref.lock().await[i] = Instant::now();
        Ok(())
    })
    .await?;
    Ok(at.into_inner())
}

async fn run(b: &RealBench, kind: Kind, tracker: &Tracker) -> Result<Run> {
    println!();
    println!("== {} ==", kind.label());
    reset(b).await?;
    let c = &b.admin;
    // Each contender starts on a settled server (`RealBench::settle`).
    let settled = b.settle().await?;
    println!("  started {settled}");
    let m0 = b.mark();
    let contender = start(b, kind).await?;
    let (first, last) = tokio::select! {
        r = tracker.wait_done(CLASSES, LIMIT) => r?,
        e = async { loop {
            if let Err(e) = contender.check_running() { return e; }
            tokio::time::sleep(Duration::from_secs(1)).await;
        } } => return Err(e),
    };
    let whole_s = last.duration_since(contender.started).as_secs_f64();
    let adding_s = last.duration_since(first).as_secs_f64();
    let m1 = b
        .mark_after_writes(m0, &contender.who, &[CLASSES_RESOURCE], CLASSES as u64)
        .await;
    let backfill = b.requests(m0, m1, &contender.who);
    println!(
        "back-fill of {CLASSES} classes: {whole_s:.2}s from process start, {adding_s:.2}s first → last"
    );
    println!(
        "  requests per class: {:.3} ({})",
        backfill.total() as f64 / CLASSES as f64,
        backfill.per_object(CLASSES)
    );

    let unused_classes = unused_releases();
    let keys: Vec<String> = unused_classes
        .iter()
        .map(|i| format!("/{}", class(*i)))
        .collect();
    let triggers = delete_classes(c, &unused_classes).await?;
    let unused = Release::of(&triggers, &tracker.wait_gone(&keys, LIMIT).await);
    let m2 = b
        .mark_after_writes(m1, &contender.who, &[CLASSES_RESOURCE], unused.n as u64)
        .await;
    let unused_req = b.requests(m1, m2, &contender.who);
    println!("unused classes deleted: {}", unused.line());
    println!(
        "  requests per released class: {:.3} ({})",
        unused_req.total() as f64 / RELEASES as f64,
        unused_req.per_object(RELEASES)
    );

    let (used_classes, claims) = used_releases();
    let keys: Vec<String> = used_classes
        .iter()
        .map(|i| format!("/{}", class(*i)))
        .collect();
    delete_classes(c, &used_classes).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let early = tracker.gone_count(&keys).await;
    // The trigger of a class: the delete of its last claim.
    let last_claim: tokio::sync::Mutex<BTreeMap<String, Instant>> = Default::default();
    let (lc, claims_ref) = (&last_claim, &claims);
    bulk(claims.len(), IN_FLIGHT, |i| async move {
        let (n, name, cls) = claim(claims_ref[i]);
        Api::<PersistentVolumeClaim>::namespaced(c.clone(), &n)
            .delete(&name, &DeleteParams::default())
            .await?;
        lc.lock().await.insert(cls, Instant::now());
        Ok(())
    })
    .await?;
    let last_claim = last_claim.into_inner();
    let triggers: Vec<Instant> = used_classes
        .iter()
        .map(|i| {
            last_claim
                .get(&class(*i))
                .copied()
                .unwrap_or_else(Instant::now)
        })
        .collect();
    let used = Release::of(&triggers, &tracker.wait_gone(&keys, LIMIT).await);
    let m3 = b
        .mark_after_writes(m2, &contender.who, &[CLASSES_RESOURCE], used.n as u64)
        .await;
    let used_req = b.requests(m2, m3, &contender.who);
    println!(
        "used classes deleted, then their claims: held while claimed {}/{} {}",
        RELEASES - early,
        RELEASES,
        verdict(early == 0, "all")
    );
    println!("  last claim delete → class gone: {}", used.line());
    println!(
        "  requests per released class: {:.3} ({})",
        used_req.total() as f64 / RELEASES as f64,
        used_req.per_object(RELEASES)
    );
    let usage = contender.stop();
    println!(
        "peak RSS {:.1} MiB, CPU {:.2}s (whole run)",
        usage.peak_rss_mib, usage.cpu_s
    );
    Ok(Run {
        whole_s,
        adding_s,
        backfill,
        unused,
        unused_req,
        used,
        held: RELEASES - early,
        used_req,
        usage,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    test_support::bench::check_args(
        "usage: bench_real_vac [--contenders kcm,kcm-1000,ours,ours-large]",
        &["--contenders"],
    )?;
    let kinds: Vec<Kind> = match test_support::bench::arg_value("--contenders")? {
        None => Kind::ALL.to_vec(),
        Some(v) => v
            .split(',')
            .map(|x| {
                Kind::ALL
                    .into_iter()
                    .find(|k| k.arg() == x.trim())
                    .with_context(|| {
                        format!("--contenders: unknown {x:?} (kcm, kcm-1000, ours, ours-large)")
                    })
            })
            .collect::<Result<_>>()?,
    };
    if kinds
        .iter()
        .any(|k| matches!(k, Kind::Ours | Kind::OursLarge))
    {
        test_bed::bench::manager_bin()?;
    }
    let b = RealBench::start("bench-real-vac").await?;
    populate(&b).await?;
    let tracker = Tracker::start(vacs(&b.admin), |v| v.finalizers().iter().any(|f| f == FIN));
    tracker.wait_ready().await;
    let mut runs = BTreeMap::new();
    for &kind in &kinds {
        runs.insert(kind.arg(), run(&b, kind, &tracker).await?);
    }
    println!();
    println!(
        "== {CLASSES} classes, {CLAIMS} claims: ours / upstream (speed: > 1 is ours faster) =="
    );
    for (o, u, what) in [
        (Kind::Ours, Kind::Kcm, "defaults"),
        (
            Kind::OursLarge,
            Kind::Kcm1000,
            "large back-fill vs KCM at QPS 1000",
        ),
    ] {
        let (Some(o), Some(u)) = (runs.get(o.arg()), runs.get(u.arg())) else {
            continue;
        };
        println!("-- {what} --");
        for (label, ours, up, unit) in [
            (
                "back-fill, process start → last class",
                o.whole_s,
                u.whole_s,
                " s",
            ),
            (
                "back-fill, first → last class",
                o.adding_s,
                u.adding_s,
                " s",
            ),
            (
                "unused classes, delete → gone p99",
                o.unused.p(99.0),
                u.unused.p(99.0),
                " ms",
            ),
            (
                "unused classes, last delete → last gone",
                o.unused.whole_s,
                u.unused.whole_s,
                " s",
            ),
            (
                "used classes, last claim delete → gone p99",
                o.used.p(99.0),
                u.used.p(99.0),
                " ms",
            ),
            (
                "used classes, last trigger → last gone",
                o.used.whole_s,
                u.used.whole_s,
                " s",
            ),
        ] {
            println!("{}", ratio_line(label, ours, up, unit, true, SPEED_GOAL));
        }
        println!(
            "requests per class, back-fill: ours {:.3} vs upstream {:.3}; per released unused class {:.3} vs {:.3}; per released used class {:.3} vs {:.3}",
            o.backfill.total() as f64 / CLASSES as f64,
            u.backfill.total() as f64 / CLASSES as f64,
            o.unused_req.total() as f64 / RELEASES as f64,
            u.unused_req.total() as f64 / RELEASES as f64,
            o.used_req.total() as f64 / RELEASES as f64,
            u.used_req.total() as f64 / RELEASES as f64,
        );
        println!(
            "peak RSS: ours {:.1} MiB vs upstream {:.1} MiB (upstream/ours {:.2}); CPU seconds: ours {:.2} vs upstream {:.2} (upstream/ours {:.2}; no goal set)",
            o.usage.peak_rss_mib,
            u.usage.peak_rss_mib,
            u.usage.peak_rss_mib / o.usage.peak_rss_mib,
            o.usage.cpu_s,
            u.usage.cpu_s,
            u.usage.cpu_s / o.usage.cpu_s,
        );
    }
    for kind in [Kind::Ours, Kind::OursLarge] {
        let Some(o) = runs.get(kind.arg()) else {
            continue;
        };
        let w = |t: &Tally, n: usize| t.writes("volumeattributesclasses") as f64 / n as f64;
        let (add, unused, used) = (
            w(&o.backfill, CLASSES),
            w(&o.unused_req, RELEASES),
            w(&o.used_req, RELEASES),
        );
        let one = |x: f64| (x - 1.0).abs() < 1e-9;
        println!(
            "{}: finalizer writes per transition: add {add:.3}, release unused {unused:.3}, release used {used:.3} {}; held while claimed {}/{RELEASES}",
            kind.arg(),
            verdict(one(add) && one(unused) && one(used), "1.000 each"),
            o.held,
        );
    }
    Ok(())
}

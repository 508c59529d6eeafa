//! The e2e scenarios on the real control plane (`make test`'s subset of
//! `make e2e-real`): kube-apiserver, etcd, kube-controller-manager with its
//! default controllers (but its service-cidr-controller: the chaos run's
//! ServiceCIDRs are the manager's alone) and kube-scheduler v1.36.3, two
//! nodes of the process kubelet running the manager image as the
//! workspace's binary, cloud-sim
//! (see `protection_e2e::real`). One cluster for the whole test binary; the
//! tests take it one at a time.
//!
//! * the chart installed with helm 4 and the PVC/PV protection lifecycle,
//!   with the invariants watched throughout;
//! * an upgrade (0.3 → 0.4 with ProtectionRules and the chart's
//!   secrets-used-by-pods rule) and the rollback the pre-rollback hook Job
//!   refuses (run by the real Job controller), the safe path (which needs
//!   the real RBAC kube-sim does not enforce) and the rollback that then
//!   passes;
//! * `helm uninstall` with its pre-delete hook (a Job the real Job
//!   controller runs, its pod run by the process kubelet): refused while a
//!   claim being deleted is in use, then clean: no
//!   `protection-manager.io/*` finalizer left on claims, volumes, a
//!   LoadBalancer Service, VolumeAttributesClasses or a rule's Secret, and
//!   nothing in use deleted;
//! * 60 s of chaos on the real cluster: leader kills (SIGKILL of its
//!   process), kubelet kills, kube-apiserver and etcd restarts, apiserver
//!   stalls; the same invariants as `make chaos`.

use protection_e2e::chaos::{self, ChaosConfig};
use protection_e2e::harness::HarnessOptions;
use protection_e2e::release::ManagerRelease;
use protection_e2e::scenarios::{App, lifecycle, rules, uninstall};
use protection_e2e::suite::{self, Bed, runtime};
use protection_e2e::tools::HelmVersion;
use protection_e2e::{Error, Result};

/// With `E2E_KUBECONFIG` set (`make e2e-real`, a cluster of the user's) the
/// whole suite runs in cluster mode there: this subset does not start a
/// control plane of its own.
fn elsewhere() -> bool {
    let set = std::env::var("E2E_KUBECONFIG").is_ok_and(|v| !v.trim().is_empty());
    if set {
        println!(
            "NOTE: E2E_KUBECONFIG is set: the suite runs in cluster mode there; tests/real.rs starts no control plane of its own"
        );
    }
    set
}

#[test]
fn real_install_and_storage_protection() {
    if elsewhere() {
        return;
    }
    runtime().block_on(async {
        suite::with_manager(Bed::Real, "real-storage", &[], async |app, rel| {
            lifecycle::pvc_protection(app, rel).await?;
            lifecycle::pv_protection(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
fn real_rules_upgrade_and_the_refused_rollback() {
    if elsewhere() {
        return;
    }
    runtime().block_on(async {
        suite::with_release(
            Bed::Real,
            "real-ruleswalk",
            HelmVersion::V4,
            async |_h, app, rel| rules::rollback_walk(app, rel).await,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
fn real_uninstall_with_the_hook_leaves_nothing_stuck() {
    if elsewhere() {
        return;
    }
    runtime().block_on(async {
        suite::with_manager(
            Bed::Real,
            "real-uninstall",
            uninstall::SETS,
            async |app, rel| uninstall::leaves_nothing_stuck(app, rel).await,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

async fn real_chaos(seed: u64) -> Result<()> {
    let mut opts = HarnessOptions::new("real-chaos");
    opts.seed = seed;
    let h = suite::harness(Bed::Real, opts).await?;
    println!("== real chaos: run {}, seed {seed}", h.run);
    let result = async {
        let helm = h.helm(HelmVersion::V4).await?;
        let rel = ManagerRelease::prepare(&h, helm, "pm", "system").await?;
        let app = App::new(&h, "app").await?;
        let cfg = ChaosConfig::real_short(seed);
        let report = match chaos::run(&h, &rel, &app.ns, &cfg).await {
            Ok(r) => r,
            Err(e) => {
                println!("manager state:\n{}", rel.diagnostics().await);
                return Err(Error::Check(format!("chaos run (seed {seed}): {e}")));
            }
        };
        for l in report.lines() {
            println!("{l}");
        }
        report.check(&h)
    }
    .await;
    h.finish().await;
    result
}

#[test]
fn real_short_chaos_keeps_every_invariant() {
    if elsewhere() {
        return;
    }
    let seed = std::env::var("E2E_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_126);
    runtime().block_on(async { real_chaos(seed).await.unwrap_or_else(|e| panic!("{e}")) });
}

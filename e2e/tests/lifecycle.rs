//! The ported upstream e2e scenarios (PVC protection, PV protection, the
//! load-balancer cleanup finalizer) against the manager installed by the
//! chart with helm 4, with the invariants checked throughout. Runs on
//! kube-sim, or on the cluster named by E2E_KUBECONFIG.

use protection_e2e::scenarios::{lifecycle, uninstall, vac};
use protection_e2e::suite::{Bed, runtime, with_manager as frame};
use protection_e2e::{release::ManagerRelease, scenarios::App};

/// Installs the manager (its own release, one replica), starts the
/// monitor, runs `scenario`, and fails on any error or violation.
async fn with_manager<F>(name: &str, sets: &[&str], scenario: F) -> protection_e2e::Result<()>
where
    F: for<'a> AsyncFnOnce(&'a App<'a>, &'a ManagerRelease) -> protection_e2e::Result<()>,
{
    frame(Bed::FromEnv, name, sets, scenario).await
}

#[test]
fn storage_protection_pvc_and_pv() {
    runtime().block_on(async {
        with_manager("storage", &[], async |app, rel| {
            lifecycle::pvc_protection(app, rel).await?;
            lifecycle::pv_protection(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
fn load_balancer_cleanup_finalizer() {
    runtime().block_on(async {
        with_manager("lb", &[], async |app, _rel| {
            lifecycle::lb_cleanup_finalizer(app).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

/// VolumeAttributesClass protection with the Alpha gate on through the
/// chart's values: a class held by a claim, a volume and a pending
/// modification, released when the last user goes.
#[test]
fn vac_protection_classes_held_by_claims_volumes_and_pending_modifications() {
    runtime().block_on(async {
        with_manager("vac", &[vac::GATE_ON], async |app, rel| {
            vac::lifecycle(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

/// `helm uninstall` leaves nothing stuck: refused (changing nothing) while a
/// claim being deleted is in use, then, once its pod is gone, no
/// `protection-manager.io/*` finalizer is left and nothing in use deleted.
#[test]
fn uninstall_leaves_nothing_stuck() {
    runtime().block_on(async {
        with_manager("uninstall", uninstall::SETS, async |app, rel| {
            uninstall::leaves_nothing_stuck(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

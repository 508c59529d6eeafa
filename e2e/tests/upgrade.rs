//! Upgrade and downgrade through helm upgrade / helm rollback: the KEP's
//! phase walk (helm 4), the 0.2 → 0.0 hazard and the release guard (helm
//! 3.18), and, with E2E_OLD_BIN / E2E_NEW_BIN, a real cross-build upgrade.

use protection_e2e::Result;
use protection_e2e::harness::Harness;
use protection_e2e::release::ManagerRelease;
use protection_e2e::scenarios::{App, guard, rules, upgrade, vac};
use protection_e2e::suite::{Bed, runtime, with_release};
use protection_e2e::tools::HelmVersion;

async fn run<F>(name: &str, helm: HelmVersion, scenario: F) -> Result<()>
where
    F: for<'a> AsyncFnOnce(&'a Harness, &'a App<'a>, &'a ManagerRelease) -> Result<()>,
{
    with_release(Bed::FromEnv, name, helm, scenario).await
}

#[test]
fn phases_0_0_to_0_3_with_rollback_and_locked_gate_helm4() {
    runtime().block_on(async {
        run("phases", HelmVersion::V4, async |_h, app, rel| {
            upgrade::phases(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
fn skip_by_two_hazard_then_release_guard_helm3() {
    runtime().block_on(async {
        run("guard", HelmVersion::V3, async |h, app, rel| {
            guard::hazard(app, rel).await?;
            let rel2 = ManagerRelease::prepare(h, h.helm(HelmVersion::V3).await?, "pm2", "guarded")
                .await?;
            guard::guard(app, &rel2).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

/// vac-protection through the release train: 0.3 → 0.4 gate off → 0.4
/// Alpha on (back-fill); the rollback to 0.3 refused while classes may
/// carry the finalizer 0.3 does not know; the hazard forced through with
/// the override; 0.4 gate off (removal never gated); the safe path
/// (strip-finalizers) and the rollback that then passes.
#[test]
fn vac_0_3_to_0_4_alpha_and_the_refused_rollback_helm4() {
    runtime().block_on(async {
        run("vacwalk", HelmVersion::V4, async |_h, app, rel| {
            vac::upgrade_walk(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

/// ProtectionRules through the release train with the chart's example:
/// 0.3 → 0.4 with InUseProtectionRules and `rules.examples.secretsUsedByPods`
/// (a mounted Secret is held); the rollback to 0.3 refused while a rule
/// carries `rule-cleanup`; strip-finalizers refusing until the rule is
/// deleted; the safe path and the rollback that then passes.
#[test]
fn rules_0_3_to_0_4_and_the_refused_rollback_helm4() {
    runtime().block_on(async {
        run("ruleswalk", HelmVersion::V4, async |_h, app, rel| {
            rules::rollback_walk(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
#[cfg_attr(
    not(e2e_cross_build),
    ignore = "needs E2E_OLD_BIN and E2E_NEW_BIN (two real builds); the other upgrade tests play every release with one binary"
)]
fn cross_build_upgrade_and_rollback() {
    runtime().block_on(async {
        match protection_e2e::binaries::cross_build() {
            Ok(Some(_)) => {}
            Ok(None) => {
                panic!("E2E_OLD_BIN / E2E_NEW_BIN unset (the test is ignored without them)")
            }
            Err(e) => panic!("{e}"),
        }
        run("crossbuild", HelmVersion::V4, async |_h, app, rel| {
            upgrade::cross_build(app, rel).await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    });
}

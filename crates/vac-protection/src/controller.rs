//! The vac-protection controller (docs/upstream-semantics.md §10).
//!
//! ```text
//! VAC watch ──reflector──▶ VAC store ──▶ Controller ──▶ reconcile
//!                                           ▲             │ cache check (users index)
//! PVC watch ─┐                              │             │ keep / add / …
//!            ├▶ users index ──classes to ───┘             ▼ no user in the cache
//! PV watch ──┘   (apply, delete, re-list)     re-check   ONE live LIST of PVCs and
//!                                                        PVs, shared by every class
//!                                                        confirmed at the same time
//! ```
//!
//! * The API version is found by discovery at start: storage.k8s.io/v1, else
//!   v1beta1. With neither the controller logs why, says so in its
//!   readiness detail (`/readyz?verbose`) and does nothing; it looks again
//!   every minute, so a cluster that gains the API is served without a
//!   restart.
//! * The controller is a rule on core's in-use engine
//!   ([`protection_core::runtime::inuse`]): the users are PVCs and PVs, the
//!   index maps a class to them, and a deletion that finds no user in the
//!   cache is confirmed, cluster-wide, by one live LIST of PVCs and one of
//!   PVs started after its cache check and shared by every class waiting at
//!   the same time.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams};
use parking_lot::RwLock;
use protection_core::runtime::inuse::{Engine, Rule};
use protection_core::runtime::{ReconcileError, list_all, phased_finalizer, watch_config};
use protection_core::{ControllerContext, ControllerResult};

use crate::Settings;
use crate::index::{UsersIndex, VacUse, live_users};
use crate::objects::{ApiVersion, GROUP, PLURAL, PvRefs, PvcRefs, V1, V1Beta1, Vac};
use crate::vac::{held_note, released_note};

/// Registered controller name.
pub const NAME: &str = "vac-protection";
/// kube-controller-manager's name for it.
pub const ALIAS: &str = "volumeattributesclass-protection-controller";
/// The readiness detail while no version of the API is served.
pub const NO_API_NOTE: &str =
    "idle: the cluster serves no VolumeAttributesClass API (storage.k8s.io/v1 or v1beta1)";
/// How often an idle controller looks for the API again.
const REDISCOVER: Duration = Duration::from_secs(60);

/// The version of VolumeAttributesClass the cluster serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    V1,
    V1Beta1,
}

/// Which version to use: v1 when served, else v1beta1, else none.
pub fn pick(v1: bool, v1beta1: bool) -> Option<Served> {
    match (v1, v1beta1) {
        (true, _) => Some(Served::V1),
        (false, true) => Some(Served::V1Beta1),
        (false, false) => None,
    }
}

/// Whether `storage.k8s.io/<version>` serves volumeattributesclasses (a 404
/// for the group version is "no").
async fn serves(client: &kube::Client, version: &str) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(&format!("{GROUP}/{version}"))
        .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == PLURAL)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Asks discovery which version to serve, retrying while the API server
/// cannot answer; `None` on shutdown too.
async fn discover(ctx: &ControllerContext) -> Option<Option<Served>> {
    protection_core::runtime::discover(ctx, || async {
        let v1 = serves(&ctx.client, V1::VERSION).await?;
        let beta = if v1 {
            false
        } else {
            serves(&ctx.client, V1Beta1::VERSION).await?
        };
        Ok(pick(v1, beta))
    })
    .await
}

/// Runs the controller until `ctx.shutdown`.
pub async fn run(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let mut warned = false;
    loop {
        let Some(served) = discover(&ctx).await else {
            return Ok(());
        };
        match served {
            Some(Served::V1) => {
                ctx.ready.set_note(None);
                return run_at::<V1>(ctx, settings).await;
            }
            Some(Served::V1Beta1) => {
                ctx.ready.set_note(Some(
                    "serving storage.k8s.io/v1beta1 (the cluster has no v1)".into(),
                ));
                return run_at::<V1Beta1>(ctx, settings).await;
            }
            None => {
                if !warned {
                    tracing::warn!(
                        controller = NAME,
                        "the cluster serves no VolumeAttributesClass API (storage.k8s.io/v1 or v1beta1); \
                         vac-protection does nothing until it does (looking again every {}s)",
                        REDISCOVER.as_secs()
                    );
                    warned = true;
                }
                if !protection_core::runtime::idle_while_unserved(&ctx, NO_API_NOTE, REDISCOVER)
                    .await
                {
                    return Ok(());
                }
            }
        }
    }
}

/// The warning logged at start while the add gate is on before GA: a
/// rollback to a release without vac-protection (0.3, or
/// `--emulated-version=0.3`) strands the finalizers it adds
/// (docs/upstream-semantics.md §10.6).
pub fn rollback_warning(
    ctx: &ControllerContext,
    add_enabled: bool,
    finalizer: &str,
) -> Option<String> {
    use protection_core::featuregate::Stage;
    let gate = crate::VOLUME_ATTRIBUTES_CLASS.name;
    let row = ctx.gates.table().into_iter().find(|r| r.name == gate)?;
    if !add_enabled || row.stage == Stage::GA {
        return None;
    }
    let before = crate::INFO.since.previous()?;
    Some(format!(
        "{gate} is on at {stage}: every VolumeAttributesClass gets the finalizer {finalizer}. \
         Release {before} has no vac-protection: rolling back to it (or to --emulated-version={before}) \
         would leave that finalizer on every class, and a class deleted afterwards would stay Terminating, \
         so the release guard refuses it (the release record names {since} as the minimum release). \
         Before rolling back: turn {gate} off (removal stays on), then run \
         `protection-manager strip-finalizers --controller {NAME}`; see the README, \"Rollback\"",
        since = crate::INFO.since,
        stage = row.stage
    ))
}

/// The rule: a class is used by the PVCs and PVs that name it; a deletion
/// is confirmed cluster-wide.
struct VacRule<V>(std::marker::PhantomData<V>);

/// One live round: every PVC and every PV.
struct Live {
    pvcs: Vec<PvcRefs>,
    pvs: Vec<PvRefs>,
}

impl<V: ApiVersion> Rule for VacRule<V> {
    type Object = Vac<V>;
    type Use = VacUse;
    type Index = UsersIndex;
    type Live = Live;

    fn name(&self) -> &'static str {
        NAME
    }
    fn kind(&self) -> &'static str {
        "VolumeAttributesClass"
    }
    fn unused(&self) -> &'static str {
        "no PVC or PV refers to the class"
    }
    fn api(&self, client: &kube::Client, _: &Vac<V>) -> Api<Vac<V>> {
        Api::all(client.clone())
    }
    fn scope(&self, _: &Vac<V>) -> String {
        String::new()
    }
    fn cached_users(&self, index: &UsersIndex, vac: &Vac<V>) -> Vec<VacUse> {
        index.users(&vac.name_any())
    }
    async fn list_live(
        &self,
        client: &kube::Client,
        _: &str,
        _: &RwLock<UsersIndex>,
    ) -> Result<Live, ReconcileError> {
        // Both lists start after the deletion was seen (the engine calls
        // this only then), so running them at once keeps the guarantee and
        // halves the round: at 2,000 claims on a real server the round is
        // most of a release's latency.
        let lp = ListParams::default();
        let (claims, volumes) = (
            Api::<PvcRefs>::all(client.clone()),
            Api::<PvRefs>::all(client.clone()),
        );
        let (pvcs, pvs) = futures::try_join!(
            list_all(&claims, &lp, "persistentvolumeclaims"),
            list_all(&volumes, &lp, "persistentvolumes"),
        )?;
        tracing::debug!(
            controller = NAME,
            pvcs = pvcs.len(),
            pvs = pvs.len(),
            "live list"
        );
        Ok(Live { pvcs, pvs })
    }
    fn live_users(&self, live: &Live, vac: &Vac<V>) -> Vec<VacUse> {
        live_users(&live.pvcs, &live.pvs, &vac.name_any())
    }
    fn held_note(&self, vac: &Vac<V>, users: &[VacUse]) -> String {
        held_note(&vac.name_any(), users)
    }
    fn released_note(&self, vac: &Vac<V>, finalizer: &str) -> String {
        released_note(&vac.name_any(), finalizer)
    }
}

async fn run_at<V: ApiVersion>(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let finalizer = phased_finalizer(
        &ctx,
        &settings.finalizer,
        &crate::VOLUME_ATTRIBUTES_CLASS,
        "vac-protection-controller",
    )?;
    tracing::info!(controller = NAME, version = %format!("{GROUP}/{}", V::VERSION), "serving VolumeAttributesClass");
    if let Some(w) = rollback_warning(&ctx, finalizer.add_enabled(), &settings.finalizer) {
        tracing::warn!(controller = NAME, "{w}");
    }
    let engine = Engine::new(
        &ctx,
        VacRule::<V>(std::marker::PhantomData),
        finalizer,
        settings,
    );
    engine.watch_users(
        Api::<PvcRefs>::all(ctx.client.clone()),
        watch_config(),
        "persistentvolumeclaims",
    );
    engine.watch_users(
        Api::<PvRefs>::all(ctx.client.clone()),
        watch_config(),
        "persistentvolumes",
    );
    engine.run(&ctx, Api::all(ctx.client.clone())).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_is_preferred_then_v1beta1_then_nothing() {
        assert_eq!(pick(true, true), Some(Served::V1));
        assert_eq!(pick(true, false), Some(Served::V1));
        assert_eq!(pick(false, true), Some(Served::V1Beta1));
        assert_eq!(pick(false, false), None);
    }
}

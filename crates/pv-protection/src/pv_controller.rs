//! The pv-protection controller: a rule on core's in-use engine whose only
//! "user" is the PV's own binding ([`crate::pv::decide`]).
//!
//! Triggers: PV watch events that upstream's handler enqueues (lacking the
//! finalizer, or being deleted with it), every PV again on a re-list (the
//! watcher re-lists after a watch gap; kube-runtime reconciles every listed
//! object), and the resync. A kept (Bound) PV is not requeued: the binder
//! moving it out of Bound is a PV update, which triggers it (upstream
//! relies on the same).

use kube::ResourceExt;
use kube::api::Api;
use protection_core::runtime::inuse::{Engine, Rule};
use protection_core::runtime::phased_finalizer;
use protection_core::{ControllerContext, ControllerResult};

use crate::objects::PvFacts;
use crate::pv::{PvInUse, held_note, in_use, released_note};
use crate::{Error, Settings};

/// Registered controller name.
pub const NAME: &str = "pv-protection";
/// kube-controller-manager's name for it.
pub const ALIAS: &str = "persistentvolume-protection-controller";

/// The rule: a PV is in use while it is Bound (its own `status.phase`;
/// upstream consults nothing else), so the object just read is the whole
/// answer and nothing is listed.
struct PvRule;

impl Rule for PvRule {
    type Object = PvFacts;
    type Use = PvInUse;
    type Index = ();
    type Live = ();

    fn name(&self) -> &'static str {
        NAME
    }
    fn kind(&self) -> &'static str {
        "PersistentVolume"
    }
    fn unused(&self) -> &'static str {
        "not Bound"
    }
    fn api(&self, client: &kube::Client, _: &PvFacts) -> Api<PvFacts> {
        Api::all(client.clone())
    }
    fn scope(&self, _: &PvFacts) -> String {
        String::new()
    }
    fn cached_users(&self, _: &(), pv: &PvFacts) -> Vec<PvInUse> {
        in_use(pv).into_iter().collect()
    }
    fn confirms_live(&self) -> bool {
        false
    }
    async fn list_live(&self, _: &kube::Client, _: &str) -> Result<(), Error> {
        Ok(())
    }
    fn live_users(&self, _: &(), pv: &PvFacts) -> Vec<PvInUse> {
        in_use(pv).into_iter().collect()
    }
    fn held_note(&self, pv: &PvFacts, users: &[PvInUse]) -> String {
        let why = users.first().cloned().unwrap_or(PvInUse { claim: None });
        held_note(&pv.name_any(), &why)
    }
    fn released_note(&self, pv: &PvFacts, finalizer: &str) -> String {
        released_note(&pv.name_any(), finalizer)
    }
}

/// Runs the controller until `ctx.shutdown`.
pub async fn run(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let finalizer = phased_finalizer(
        &ctx,
        &settings.finalizer,
        &crate::STORAGE_OBJECT_IN_USE_PROTECTION,
        "pv-protection-controller",
    )?;
    let engine = Engine::new(&ctx, PvRule, finalizer, settings);
    engine.run(&ctx, Api::all(ctx.client.clone())).await
}

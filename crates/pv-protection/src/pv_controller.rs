//! The pv-protection controller: one PV watch (reflector + our observer),
//! kube-runtime's `Controller` with [`crate::pv::decide`] as the whole rule.
//!
//! Triggers: PV watch events that upstream's handler enqueues (lacking the
//! finalizer, or being deleted with it), every PV again on a re-list (the
//! watcher re-lists after a watch gap; kube-runtime reconciles every listed
//! object), and the resync. A kept (Bound) PV is not requeued: the binder
//! moving it out of Bound is a PV update, which triggers it (upstream
//! relies on the same).

use std::sync::Arc;

use futures::TryStreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt};
use protection_core::finalizer::PhasedFinalizer;
use protection_core::runtime::{
    self, Executor, Observer, PerObject, Step, main_watch, phased_finalizer, ready_when_synced,
    resync_stream, retry_after_failure,
};
use protection_core::{ControllerContext, ControllerMetrics, ControllerResult};

use crate::objects::PvFacts;
use crate::pv::{PvPlan, decide, held_note, released_note};
use crate::{Error, Settings};

/// Registered controller name.
pub const NAME: &str = "pv-protection";
/// kube-controller-manager's name for it.
pub const ALIAS: &str = "persistentvolume-protection-controller";

/// What a reconcile gets (controller-rs' `Context`).
struct Context {
    api: Api<PvFacts>,
    executor: Executor,
    metrics: ControllerMetrics,
    state: Arc<PerObject>,
}

/// upstream `pvAddedUpdated`'s filter.
fn wanted(f: &PhasedFinalizer, pv: &PvFacts) -> bool {
    f.needs_add(&pv.metadata) || f.is_deletion_candidate(&pv.metadata)
}

/// The executor's step for a plan.
fn step(pv: &PvFacts, finalizer: &str, plan: PvPlan) -> Step {
    let name = pv.name_any();
    match plan {
        PvPlan::AddFinalizer => Step::AddFinalizer,
        PvPlan::RemoveFinalizer => Step::RemoveFinalizer {
            why: "not Bound",
            released: released_note(&name, finalizer),
        },
        PvPlan::Keep(why) => Step::Keep {
            held: held_note(&name, &why),
        },
        PvPlan::Nothing => Step::Nothing,
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
    let api: Api<PvFacts> = Api::all(ctx.client.clone());
    let state = Arc::new(PerObject::default());
    let (reader, writer) = reflector::store();
    let observer = Observer::new(&settings.finalizer, ctx.metrics.clone());
    let listed = observer.listed();
    let filter = finalizer.clone();
    let triggers = main_watch(api.clone(), writer, observer, state.clone())
        .applied_objects()
        .try_filter(move |pv| std::future::ready(wanted(&filter, pv)));
    let ready = ready_when_synced(NAME, ctx.ready.clone(), ctx.shutdown.clone(), vec![listed]);

    let resync_filter = finalizer.clone();
    let controller = Controller::for_stream(triggers, reader.clone()).reconcile_on(resync_stream(
        reader,
        settings.resync_period,
        move |pv| wanted(&resync_filter, pv),
    ));
    let context = Arc::new(Context {
        api,
        executor: Executor::new(finalizer, ctx.events.clone()),
        metrics: ctx.metrics.clone(),
        state,
    });
    runtime::drive(&ctx, controller, reconcile, error_policy, context).await;
    ready.abort();
    ctx.ready.set(false);
    tracing::info!(controller = NAME, "PV protection controller stopped");
    Ok(())
}

async fn reconcile(pv: Arc<PvFacts>, ctx: Arc<Context>) -> Result<Action, Error> {
    let timer = ctx.metrics.reconcile_started();
    let res = reconcile_inner(&pv, &ctx).await;
    timer.finish(res.is_ok());
    res
}

#[tracing::instrument(skip_all, fields(kind = "PersistentVolume", name = %pv.name_any()))]
async fn reconcile_inner(pv: &PvFacts, ctx: &Context) -> Result<Action, Error> {
    let key = pv.name_any();
    if ctx.state.expectations.is_stale(&key, &pv.metadata) {
        tracing::debug!("cache has not caught up with our last write yet; waiting for it");
        return Ok(Action::await_change());
    }
    let f = ctx.executor.finalizer();
    let plan = decide(pv, f.name(), f.add_enabled());
    tracing::debug!(?plan, "decided");
    let step = step(pv, f.name(), plan);
    ctx.executor.execute(&ctx.api, pv, &ctx.state, step).await?;
    ctx.state.backoff.forget(&key);
    Ok(Action::await_change())
}

fn error_policy(pv: Arc<PvFacts>, err: &Error, ctx: Arc<Context>) -> Action {
    retry_after_failure(NAME, &ctx.state.backoff, &pv.name_any(), err, None)
}

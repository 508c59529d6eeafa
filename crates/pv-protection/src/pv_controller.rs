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

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use parking_lot::Mutex;
use protection_core::finalizer::{PatchStyle, PhasedFinalizer};
use protection_core::release::STORAGE_OBJECT_IN_USE_PROTECTION;
use protection_core::{ControllerContext, ControllerError, ControllerMetrics, ControllerResult};

use crate::objects::PvFacts;
use crate::pv::{PvPlan, decide, held_note, released_note};
use crate::runtime::{
    ACTION_HELD, ACTION_RELEASED, Error, Observer, PerObject, REASON_HELD, REASON_RELEASED,
    Settings, resync_stream,
};

/// Registered controller name.
pub const NAME: &str = "pv-protection";
/// kube-controller-manager's name for it.
pub const ALIAS: &str = "persistentvolume-protection-controller";

struct Shared {
    api: Api<PvFacts>,
    finalizer: PhasedFinalizer,
    metrics: ControllerMetrics,
    events: protection_core::events::EventRecorder,
    state: Arc<PerObject>,
}

/// upstream `pvAddedUpdated`'s filter.
fn wanted(f: &PhasedFinalizer, pv: &PvFacts) -> bool {
    f.needs_add(&pv.metadata) || f.is_deletion_candidate(&pv.metadata)
}

/// Runs the controller until `ctx.shutdown`.
pub async fn run(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let add_enabled = ctx.gates.enabled(STORAGE_OBJECT_IN_USE_PROTECTION);
    let finalizer = PhasedFinalizer::new(&settings.finalizer, add_enabled, PatchStyle::JsonPatch)
        .map_err(|e| ControllerError::new(NAME, e))?
        .with_metrics(ctx.metrics.clone())
        .with_field_manager("pv-protection-controller");
    tracing::info!(
        controller = NAME,
        finalizer = %settings.finalizer,
        add_enabled,
        "starting PV protection controller"
    );
    let api: Api<PvFacts> = Api::all(ctx.client.clone());
    let shared = Arc::new(Shared {
        api: api.clone(),
        finalizer: finalizer.clone(),
        metrics: ctx.metrics.clone(),
        events: ctx.events.clone(),
        state: Arc::new(PerObject::default()),
    });

    let (reader, writer) = reflector::store();
    let observer = Observer::new(&settings.finalizer, ctx.metrics.clone());
    let mut listed = observer.listed();
    let observer = Mutex::new(observer);
    let state = shared.state.clone();
    let filter = finalizer.clone();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .inspect_ok(move |ev| observer.lock().observe(ev, &state))
        .applied_objects()
        .try_filter(move |pv| std::future::ready(wanted(&filter, pv)));

    let ready = ctx.ready.clone();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            r = listed.wait_for(|l| *l) => if r.is_ok() {
                tracing::info!(controller = NAME, "PV cache synced");
                ready.set(true);
            }
        }
    });

    let resync_filter = finalizer.clone();
    Controller::for_stream(stream, reader.clone())
        .with_config(ControllerConfig::default().concurrency(ctx.concurrency))
        .reconcile_on(resync_stream(reader, settings.resync_period, move |pv| {
            wanted(&resync_filter, pv)
        }))
        .graceful_shutdown_on(ctx.shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, shared)
        .for_each(|res| async move {
            match res {
                Ok(_) => {}
                Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
                    tracing::debug!(controller = NAME, object = %r, "object gone before its reconcile")
                }
                // Reconcile errors were logged by the error policy.
                Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!(controller = NAME, error = %e, "controller stream error"),
            }
        })
        .await;
    ctx.ready.set(false);
    tracing::info!(controller = NAME, "PV protection controller stopped");
    Ok(())
}

async fn reconcile(pv: Arc<PvFacts>, ctx: Arc<Shared>) -> Result<Action, Error> {
    let timer = ctx.metrics.reconcile_started();
    let res = reconcile_inner(&pv, &ctx).await;
    timer.finish(res.is_ok());
    res
}

#[tracing::instrument(skip_all, fields(kind = "PersistentVolume", name = %pv.name_any()))]
async fn reconcile_inner(pv: &PvFacts, ctx: &Shared) -> Result<Action, Error> {
    let key = pv.name_any();
    if ctx.state.expectations.is_stale(&key, &pv.metadata) {
        tracing::debug!("cache has not caught up with our last write yet; waiting for it");
        return Ok(Action::await_change());
    }
    let plan = decide(pv, ctx.finalizer.name(), ctx.finalizer.add_enabled());
    tracing::debug!(?plan, "decided");
    match plan {
        PvPlan::AddFinalizer => {
            if ctx.finalizer.add(&ctx.api, pv).await?.wrote() {
                ctx.state.expectations.wrote(&key, &pv.metadata);
                tracing::info!(finalizer = ctx.finalizer.name(), "added finalizer to PV");
            }
        }
        PvPlan::RemoveFinalizer => {
            let uid = pv.metadata.uid.as_deref().unwrap_or_default();
            let was_held = ctx.state.events.is_held(uid);
            if ctx.finalizer.remove(&ctx.api, pv).await?.wrote() {
                ctx.state.expectations.wrote(&key, &pv.metadata);
                tracing::info!(
                    finalizer = ctx.finalizer.name(),
                    "removed finalizer from PV: not Bound"
                );
                ctx.state.events.forget(uid);
                if was_held {
                    let note = released_note(&key, ctx.finalizer.name());
                    ctx.events
                        .normal(&pv.object_ref(&()), REASON_RELEASED, ACTION_RELEASED, note)
                        .await;
                }
            }
        }
        PvPlan::Keep(why) => {
            tracing::debug!(claim = ?why.claim, "keeping PV because it is being used");
            let note = held_note(&key, &why);
            if let Some(uid) = &pv.metadata.uid
                && ctx.state.events.held(uid, &note)
            {
                ctx.events
                    .normal(&pv.object_ref(&()), REASON_HELD, ACTION_HELD, note)
                    .await;
            }
        }
        PvPlan::Nothing => {}
    }
    ctx.state.backoff.forget(&key);
    Ok(Action::await_change())
}

fn error_policy(pv: Arc<PvFacts>, err: &Error, ctx: Arc<Shared>) -> Action {
    let key = pv.name_any();
    let delay = ctx.state.backoff.next(&key);
    tracing::warn!(
        controller = NAME,
        pv = %key,
        error = %err,
        retry_in = ?delay,
        "reconcile failed; retrying"
    );
    Action::requeue(delay)
}

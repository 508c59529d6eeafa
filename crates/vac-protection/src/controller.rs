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
//! * A class whose deletion finds no user in the cache is confirmed with a
//!   live LIST of PVCs and PVs started after its cache check. The
//!   confirmations are batched: the reconcile hands the class to one
//!   confirmer task and frees its worker; the confirmer takes every class
//!   handed over so far, checks each against the cache again, then starts
//!   one LIST of PVCs and one of PVs and decides every class of the batch
//!   from it. Each decision still rests on a list started after its own
//!   cache check, so none is trusted past its moment; a release of many
//!   classes costs a few list rounds instead of one per few classes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use parking_lot::RwLock;
use prometheus::{IntCounter, IntGauge, Opts};
use protection_core::finalizer::PhasedFinalizer;
use protection_core::runtime::{
    self, Executor, Observer, PerObject, Step, main_watch, phased_finalizer, ready_when_synced,
    resync_stream, retry_after_failure,
};
use protection_core::{ControllerContext, ControllerMetrics, ControllerResult};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::index::{UserKind, UsersIndex, VacUse, live_users};
use crate::objects::{ApiVersion, GROUP, PLURAL, PvRefs, PvcRefs, V1, V1Beta1, Vac};
use crate::vac::{VacPlan, decide, held_note, released_note};
use crate::{Error, Settings};

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
    let mut delay = Duration::from_millis(500);
    loop {
        let res = async {
            let v1 = serves(&ctx.client, V1::VERSION).await?;
            let beta = if v1 {
                false
            } else {
                serves(&ctx.client, V1Beta1::VERSION).await?
            };
            Ok::<_, kube::Error>(pick(v1, beta))
        }
        .await;
        match res {
            Ok(s) => return Some(s),
            Err(e) => {
                tracing::warn!(controller = NAME, error = %e, retry_in = ?delay, "API discovery failed; retrying");
                tokio::select! {
                    _ = ctx.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
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

struct LiveMetrics {
    lists: IntCounter,
    users: IntGauge,
}

impl LiveMetrics {
    fn new(metrics: &ControllerMetrics) -> Self {
        let lists = IntCounter::with_opts(
            Opts::new(
                "vac_live_lists_total",
                "Live LISTs of PVCs and PVs made to confirm that VolumeAttributesClasses are unused (one pair per confirmation round).",
            )
            .namespace("protection_manager"),
        )
        .unwrap_or_else(|_| unreachable!("valid counter options"));
        let users = IntGauge::with_opts(
            Opts::new(
                "vac_indexed_users",
                "PVCs and PVs in vac-protection's index that refer to at least one VolumeAttributesClass.",
            )
            .namespace("protection_manager"),
        )
        .unwrap_or_else(|_| unreachable!("valid gauge options"));
        for c in [
            Box::new(lists.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(users.clone()),
        ] {
            if let Err(e) = metrics.registry().register(c) {
                tracing::debug!(error = %e, "vac-protection metrics already registered; not exported twice");
            }
        }
        LiveMetrics { lists, users }
    }
}

/// One live answer: the users of every class, from lists started at `seq`.
struct Snapshot {
    seq: u64,
    users: HashMap<String, Vec<VacUse>>,
}

struct Shared<V: ApiVersion> {
    client: kube::Client,
    api: Api<Vac<V>>,
    executor: Executor,
    metrics: ControllerMetrics,
    store: Store<Vac<V>>,
    index: RwLock<UsersIndex>,
    pvc_synced: tokio::sync::watch::Sender<bool>,
    pv_synced: tokio::sync::watch::Sender<bool>,
    state: Arc<PerObject>,
    trigger: mpsc::UnboundedSender<ObjectRef<Vac<V>>>,
    lists_started: AtomicU64,
    /// Classes handed to the confirmer.
    awaiting: parking_lot::Mutex<BTreeSet<String>>,
    confirm: tokio::sync::Notify,
    live_metrics: LiveMetrics,
    shutdown: CancellationToken,
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

/// upstream `vacAddedUpdated`'s filter.
fn wanted<V: ApiVersion>(f: &PhasedFinalizer, vac: &Vac<V>) -> bool {
    f.needs_add(&vac.metadata) || f.is_deletion_candidate(&vac.metadata)
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
    let api: Api<Vac<V>> = Api::all(ctx.client.clone());
    let (reader, writer) = reflector::store();
    let (trigger_tx, trigger_rx) = mpsc::unbounded();
    let shared = Arc::new(Shared {
        client: ctx.client.clone(),
        api: api.clone(),
        executor: Executor::new(finalizer.clone(), ctx.events.clone()),
        metrics: ctx.metrics.clone(),
        store: reader.clone(),
        index: RwLock::new(UsersIndex::new()),
        pvc_synced: tokio::sync::watch::Sender::new(false),
        pv_synced: tokio::sync::watch::Sender::new(false),
        state: Arc::new(PerObject::default()),
        trigger: trigger_tx,
        lists_started: AtomicU64::new(0),
        awaiting: parking_lot::Mutex::new(BTreeSet::new()),
        confirm: tokio::sync::Notify::new(),
        live_metrics: LiveMetrics::new(&ctx.metrics),
        shutdown: ctx.shutdown.clone(),
    });

    let observer = Observer::new(&settings.finalizer, ctx.metrics.clone());
    let listed = observer.listed();
    let filter = finalizer.clone();
    let triggers = main_watch(api, writer, observer, shared.state.clone())
        .applied_objects()
        .try_filter(move |vac| std::future::ready(wanted(&filter, vac)));

    let tasks = TaskTracker::new();
    tasks.spawn(watch_users::<V, PvcRefs>(shared.clone(), UserKind::Pvc));
    tasks.spawn(watch_users::<V, PvRefs>(shared.clone(), UserKind::Pv));
    tasks.spawn(confirmer(shared.clone()));
    let ready = ready_when_synced(
        NAME,
        ctx.ready.clone(),
        ctx.shutdown.clone(),
        vec![
            listed,
            shared.pvc_synced.subscribe(),
            shared.pv_synced.subscribe(),
        ],
    );

    let resync_filter = finalizer.clone();
    let controller = Controller::for_stream(triggers, reader.clone())
        .reconcile_on(trigger_rx)
        .reconcile_on(resync_stream(reader, settings.resync_period, move |vac| {
            wanted(&resync_filter, vac)
        }));
    runtime::drive(&ctx, controller, reconcile, error_policy, shared.clone()).await;
    shared.shutdown.cancel();
    ready.abort();
    tasks.close();
    tasks.wait().await;
    ctx.ready.set(false);
    tracing::info!(
        controller = NAME,
        "VolumeAttributesClass protection controller stopped"
    );
    Ok(())
}

/// A PVC or PV as the users index takes it.
trait User:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn apply(&self, ix: &mut UsersIndex) -> BTreeSet<String>;
    fn delete(&self, ix: &mut UsersIndex) -> BTreeSet<String>;
}

impl User for PvcRefs {
    fn apply(&self, ix: &mut UsersIndex) -> BTreeSet<String> {
        ix.apply_pvc(self)
    }
    fn delete(&self, ix: &mut UsersIndex) -> BTreeSet<String> {
        ix.delete_pvc(self)
    }
}

impl User for PvRefs {
    fn apply(&self, ix: &mut UsersIndex) -> BTreeSet<String> {
        ix.apply_pv(self)
    }
    fn delete(&self, ix: &mut UsersIndex) -> BTreeSet<String> {
        ix.delete_pv(self)
    }
}

/// Feeds the users index from the PVC or PV watch and enqueues the classes
/// each event may free.
async fn watch_users<V: ApiVersion, U: User>(shared: Arc<Shared<V>>, kind: UserKind) {
    let api: Api<U> = Api::all(shared.client.clone());
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let synced = match kind {
        UserKind::Pvc => &shared.pvc_synced,
        UserKind::Pv => &shared.pv_synced,
    };
    loop {
        let ev = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            ev = events.next() => ev,
        };
        let classes = match ev {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(controller = NAME, ?kind, error = %e, "watch failed; retrying");
                continue;
            }
            Some(Ok(ev)) => {
                let mut ix = shared.index.write();
                let classes = match ev {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o.apply(&mut ix),
                    watcher::Event::Delete(o) => o.delete(&mut ix),
                    watcher::Event::Init => {
                        ix.begin_relist(kind);
                        BTreeSet::new()
                    }
                    watcher::Event::InitDone => {
                        let classes = ix.finish_relist(kind);
                        let first = !*synced.borrow();
                        synced.send_replace(true);
                        tracing::info!(
                            controller = NAME,
                            ?kind,
                            users = ix.len(),
                            classes_to_recheck = classes.len(),
                            "users index {}",
                            if first { "synced" } else { "re-listed" }
                        );
                        classes
                    }
                };
                shared.live_metrics.users.set(ix.len() as i64);
                classes
            }
        };
        for c in classes {
            let r = ObjectRef::new(&c);
            if shared.store.get(&r).is_some() {
                let _ = shared.trigger.unbounded_send(r);
            }
        }
    }
}

impl<V: ApiVersion> Shared<V> {
    async fn wait_synced(&self) {
        for s in [&self.pvc_synced, &self.pv_synced] {
            let mut rx = s.subscribe();
            let _ = rx.wait_for(|v| *v).await;
        }
    }

    /// One live LIST of PVCs and one of PVs: the users of every class.
    async fn live_list(&self) -> Result<Snapshot, Error> {
        let seq = self.lists_started.fetch_add(1, Ordering::SeqCst) + 1;
        self.live_metrics.lists.inc();
        let lp = ListParams::default();
        let pvcs = Api::<PvcRefs>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(|source| Error::LiveList {
                what: "persistentvolumeclaims".into(),
                source,
            })?
            .items;
        let pvs = Api::<PvRefs>::all(self.client.clone())
            .list(&lp)
            .await
            .map_err(|source| Error::LiveList {
                what: "persistentvolumes".into(),
                source,
            })?
            .items;
        let classes: BTreeSet<String> = pvcs
            .iter()
            .flat_map(PvcRefs::classes)
            .chain(pvs.iter().flat_map(PvRefs::classes))
            .map(|(c, _)| c)
            .collect();
        let users = classes
            .into_iter()
            .map(|c| {
                let u = live_users(&pvcs, &pvs, &c);
                (c, u)
            })
            .collect();
        tracing::debug!(
            controller = NAME,
            pvcs = pvcs.len(),
            pvs = pvs.len(),
            "live list"
        );
        Ok(Snapshot { seq, users })
    }
}

/// The confirmer: takes every class handed over since its last round,
/// checks each against the cache (a class that gained a user, lost its
/// finalizer or went is dropped), then makes one live list, started after
/// those checks, and decides each class from it. A class whose write fails
/// goes back to the controller's queue.
async fn confirmer<V: ApiVersion>(shared: Arc<Shared<V>>) {
    let backoff =
        protection_core::runtime::Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = shared.confirm.notified() => {}
        }
        let names = std::mem::take(&mut *shared.awaiting.lock());
        if names.is_empty() {
            continue;
        }
        let f = shared.executor.finalizer();
        let batch: Vec<(Arc<Vac<V>>, Vec<VacUse>)> = names
            .iter()
            .filter_map(|name| {
                let vac = shared.store.get(&ObjectRef::new(name))?;
                let cached = shared.index.read().users(name);
                (decide(&vac, f.name(), f.add_enabled(), &cached, None) == VacPlan::ConfirmLive)
                    .then_some((vac, cached))
            })
            .collect();
        if batch.is_empty() {
            continue;
        }
        let snap = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            r = shared.live_list() => r,
        };
        let snap = match snap {
            Ok(s) => {
                backoff.forget("live-list");
                s
            }
            Err(e) => {
                tracing::warn!(controller = NAME, error = %e, classes = batch.len(), "live list failed; retrying the batch");
                shared.awaiting.lock().extend(names);
                tokio::select! {
                    _ = shared.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff.next("live-list")) => {}
                }
                shared.confirm.notify_one();
                continue;
            }
        };
        tracing::debug!(
            controller = NAME,
            classes = batch.len(),
            seq = snap.seq,
            "confirming a batch with one live list"
        );
        let writes = futures::stream::iter(batch.into_iter().map(|(vac, cached)| {
            let shared = shared.clone();
            let live = snap.users.get(&vac.name_any()).cloned().unwrap_or_default();
            async move {
                let name = vac.name_any();
                let f = shared.executor.finalizer();
                let plan = decide(&vac, f.name(), f.add_enabled(), &cached, Some(&live));
                tracing::debug!(class = %name, ?plan, "decided with a live list");
                let r = shared
                    .executor
                    .execute(&shared.api, &vac, &shared.state, step_for(plan, &name, f.name()))
                    .await;
                match r {
                    Ok(()) => shared.state.backoff.forget(&name),
                    Err(e) => {
                        tracing::warn!(controller = NAME, class = %name, error = %e, "write after the live confirmation failed; re-queued");
                        let _ = shared.trigger.unbounded_send(ObjectRef::new(&name));
                    }
                }
            }
        }))
        .buffer_unordered(16);
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = writes.collect::<Vec<()>>() => {}
        }
    }
}

/// The write a final plan asks for.
fn step_for(plan: VacPlan, name: &str, finalizer: &str) -> Step {
    match plan {
        VacPlan::AddFinalizer => Step::AddFinalizer,
        VacPlan::RemoveFinalizer => Step::RemoveFinalizer {
            why: "no PVC or PV refers to the class",
            released: released_note(name, finalizer),
        },
        VacPlan::Keep(users) => Step::Keep {
            held: held_note(name, &users),
        },
        VacPlan::Nothing => Step::Nothing,
        VacPlan::ConfirmLive => {
            tracing::error!("a final decision asked for another live confirmation; ignoring");
            Step::Nothing
        }
    }
}

async fn reconcile<V: ApiVersion>(vac: Arc<Vac<V>>, ctx: Arc<Shared<V>>) -> Result<Action, Error> {
    let timer = ctx.metrics.reconcile_started();
    let res = reconcile_inner(&vac, &ctx).await;
    timer.finish(res.is_ok());
    res
}

#[tracing::instrument(skip_all, fields(kind = "VolumeAttributesClass", name = %vac.name_any()))]
async fn reconcile_inner<V: ApiVersion>(vac: &Vac<V>, ctx: &Shared<V>) -> Result<Action, Error> {
    let name = vac.name_any();
    if ctx.state.expectations.is_stale(&name, &vac.metadata) {
        tracing::debug!("cache has not caught up with our last write yet; waiting for it");
        return Ok(Action::await_change());
    }
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return Ok(Action::await_change()),
        _ = ctx.wait_synced() => {}
    }
    let f = ctx.executor.finalizer();
    let cached = ctx.index.read().users(&name);
    let plan = decide(vac, f.name(), f.add_enabled(), &cached, None);
    if plan == VacPlan::ConfirmLive {
        // No user in the cache: the confirmer decides, from a live list
        // started after its own cache check; this worker is free meanwhile.
        tracing::debug!("handed to the live confirmation");
        ctx.awaiting.lock().insert(name);
        ctx.confirm.notify_one();
        return Ok(Action::await_change());
    }
    tracing::debug!(?plan, "decided");
    let step = step_for(plan, &name, f.name());
    ctx.executor
        .execute(&ctx.api, vac, &ctx.state, step)
        .await?;
    ctx.state.backoff.forget(&name);
    Ok(Action::await_change())
}

fn error_policy<V: ApiVersion>(vac: Arc<Vac<V>>, err: &Error, ctx: Arc<Shared<V>>) -> Action {
    retry_after_failure(NAME, &ctx.state.backoff, &vac.name_any(), err, None)
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

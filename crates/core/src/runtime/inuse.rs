//! The in-use engine: one controller for every "keep the finalizer while
//! something uses the object" protection (upstream's pv-, pvc-, vac-
//! protection and the project's ProtectionRules), modelled on KCM's
//! `protectionutil` predicates and kubert's indexes.
//!
//! A controller is a [`Rule`] on it: the protected kind, what its users are
//! and how they name what they use (an index fed by the user watches through
//! [`Feed`]: apply, delete, reset), and the scope in which a deletion is
//! confirmed (a namespace, or the cluster). The engine does the rest, once:
//!
//! ```text
//! protected watch ─reflector─▶ store ─▶ queue ─▶ reconcile
//!                                        ▲           │ decide(cache)
//! user watches ─▶ index ─objects to ─────┘           │ add / keep / nothing
//!   (apply, delete, reset)  re-check                 ▼ Unknown: no user cached
//!                                           per-scope batch: ONE live LIST
//!                                           round started after every
//!                                           member's cache check, then
//!                                           decide(cache, live) per member
//! ```
//!
//! * [`decide`]: the one pure decision. A deletion candidate is
//!   [`Usage::InUse`] while the cache or the live round shows a user,
//!   [`Usage::Free`] only when a live round started after its cache check
//!   shows none, and [`Usage::Unknown`] before that round.
//! * The confirmer ([`crate::runtime::batch`]): one worker per scope at a
//!   time takes every object of the scope waiting for a confirmation and
//!   makes one live round for all of them; objects arriving meanwhile wait
//!   for the next round (a round started before an object's cache check is
//!   never used for it). At most `--concurrency` scopes are confirmed at once.
//! * The executor ([`crate::runtime::Executor`]): the guarded finalizer
//!   patch, `FinalizerHeld` once per change of reason, `FinalizerReleased`
//!   for a deletion that was reported held.
//! * The work queue ([`crate::runtime::queue`]): kube's `Controller`
//!   semantics with a key per waiting object instead of three `ObjectRef`s.
//! * Metrics: the host's per-controller families plus
//!   `protection_manager_live_lists_total`, `_live_list_batch_size` and
//!   `_indexed_users`, labelled by controller.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::batch::{Batcher, Pushed};
use super::executor::{Executor, Step};
use super::observer::{Observer, PerObject};
use super::queue;
use super::{
    ReconcileError, Settings, main_watch, object_key, ready_when_synced, resync_stream_as,
    settled_keys,
};
use crate::controllers::{ControllerContext, ControllerResult};
use crate::finalizer::{PhasedFinalizer, has_finalizer, is_deleting};
use crate::metrics::{ControllerMetrics, ReconcileTimer};

/// Whether a protected object is in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Usage<U> {
    /// These users refer to it (from the cache, or the live round).
    InUse(Vec<U>),
    /// No user in the cache nor in a live round started after the cache
    /// was read.
    Free,
    /// No user in the cache, and no live round yet.
    Unknown,
}

/// Usage from the cache's users and, once one was made, a live round's.
pub fn usage<U: Clone>(cached: &[U], live: Option<&[U]>) -> Usage<U> {
    if !cached.is_empty() {
        return Usage::InUse(cached.to_vec());
    }
    match live {
        None => Usage::Unknown,
        Some([]) => Usage::Free,
        Some(users) => Usage::InUse(users.to_vec()),
    }
}

/// What an in-use controller does with one protected object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan<U> {
    /// Add our finalizer (one request).
    AddFinalizer,
    /// Being deleted, no user in the cache: confirm with a live round
    /// started after this cache check, then decide again.
    ConfirmLive,
    /// Being deleted and no user anywhere: remove our finalizer (one
    /// request).
    RemoveFinalizer,
    /// Being deleted and in use by these users: keep the finalizer.
    Keep(Vec<U>),
    /// Hold nothing, and report that these users would have held the
    /// deletion (a ProtectionRule in `Audit` mode).
    WouldHold(Vec<U>),
    /// Already in the desired state.
    Nothing,
}

impl<U> Plan<U> {
    /// Whether the plan lets the object go (now, or after the live round).
    pub fn releases(&self) -> bool {
        matches!(self, Plan::RemoveFinalizer | Plan::ConfirmLive)
    }
}

/// The decision (upstream `processPVC`/`processVAC` with the two-tier
/// lookup of `isBeingUsed`: `askInformer`, then `askAPIServer`):
///
/// 1. a deletion candidate (deletionTimestamp set, our finalizer present)
///    keeps its finalizer while it is in use, and loses it only when it is
///    [`Usage::Free`]; [`Usage::Unknown`] asks for the live round;
/// 2. an object not being deleted that lacks the finalizer gets it when the
///    add phase is on; removal is never gated;
/// 3. otherwise nothing.
pub fn decide<U: Clone>(
    meta: &ObjectMeta,
    finalizer: &str,
    add_enabled: bool,
    cached: &[U],
    live: Option<&[U]>,
) -> Plan<U> {
    let present = has_finalizer(meta, finalizer);
    if is_deleting(meta) {
        if !present {
            return Plan::Nothing;
        }
        return match usage(cached, live) {
            Usage::InUse(users) => Plan::Keep(users),
            Usage::Free => Plan::RemoveFinalizer,
            Usage::Unknown => Plan::ConfirmLive,
        };
    }
    if !present && add_enabled {
        return Plan::AddFinalizer;
    }
    Plan::Nothing
}

/// The run-time type information of a rule's protected kind (`()` for a
/// kind known at compile time, an `ApiResource` for a ProtectionRule's).
pub type DynType<R> = <<R as Rule>::Object as Resource>::DynamicType;

/// One in-use protection: what the protected kind is, what its users are and
/// how they name what they use, and where a deletion is confirmed.
///
/// Where a rule decides and where the engine writes: [`Rule::decide`] (by
/// default [`decide`]) turns the object, the users the index holds and,
/// after a live round, the users that round found into a [`Plan`]; the
/// engine alone carries a plan out (the guarded finalizer patch and its
/// events, through the [`Executor`]), then calls [`Rule::after`] for a
/// rule's own writes (a status condition).
pub trait Rule: Send + Sync + Sized + 'static {
    /// The protected kind, as the controller caches it.
    type Object: Resource<DynamicType: Clone + Eq + std::hash::Hash + Debug + Unpin + Send + Sync + 'static>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    /// One user of a protected object, as an event note names it.
    type Use: Clone + Debug + PartialEq + Send + Sync + 'static;
    /// The users index, fed by the user watches ([`Feed`]).
    type Index: Send + Sync + 'static;
    /// The answer of one live round of a scope.
    type Live: Send + Sync + 'static;

    /// The controller's name (logs).
    fn name(&self) -> &'static str;
    /// The kind as the log and the event notes name it.
    fn kind(&self) -> &'static str;
    /// What the log says when the finalizer goes ("no PVC or PV refers to
    /// the class").
    fn unused(&self) -> &'static str;
    /// The API through which `obj` is written.
    fn api(&self, client: &kube::Client, obj: &Self::Object) -> Api<Self::Object>;
    /// The scope a deletion of `obj` is confirmed in: its namespace, or ""
    /// for the cluster.
    fn scope(&self, obj: &Self::Object) -> String;
    /// The users of `obj` in the index.
    fn cached_users(&self, index: &Self::Index, obj: &Self::Object) -> Vec<Self::Use>;
    /// One live round of the users of `scope`, started now (paged LISTs).
    /// `index` may spare work (answers it already computed for an unchanged
    /// user); the round must not depend on it otherwise.
    fn list_live(
        &self,
        client: &kube::Client,
        scope: &str,
        index: &RwLock<Self::Index>,
    ) -> impl Future<Output = Result<Self::Live, ReconcileError>> + Send;
    /// The users of `obj` in a live round.
    fn live_users(&self, live: &Self::Live, obj: &Self::Object) -> Vec<Self::Use>;
    /// The note of the event that says why a deletion is held.
    fn held_note(&self, obj: &Self::Object, users: &[Self::Use]) -> String;
    /// The note of the event that says a held deletion was released.
    fn released_note(&self, obj: &Self::Object, finalizer: &str) -> String;
    /// Whether a deletion that finds no user in the cache is confirmed by a
    /// live round. False for a rule whose object itself says whether it is
    /// in use (pv-protection: `status.phase`): the object just read is the
    /// answer, and nothing is listed.
    fn confirms_live(&self) -> bool {
        true
    }

    /// Which watch events of the protected kind are reconciled (upstream's
    /// `AddedUpdated` filter: the object wants the finalizer, or is a
    /// deletion candidate).
    fn wanted(&self, finalizer: &PhasedFinalizer, obj: &Self::Object) -> bool {
        finalizer.needs_add(obj.meta()) || finalizer.is_deletion_candidate(obj.meta())
    }
    /// The decision: the plan for `obj` from the users in the index
    /// (`cached`) and, once a live round was made, the users it found.
    fn decide(
        &self,
        finalizer: &PhasedFinalizer,
        obj: &Self::Object,
        cached: &[Self::Use],
        live: Option<&[Self::Use]>,
    ) -> Plan<Self::Use> {
        decide(
            obj.meta(),
            finalizer.name(),
            finalizer.add_enabled(),
            cached,
            live,
        )
    }
    /// The note of the event that says a deletion would have been held
    /// ([`Plan::WouldHold`]).
    fn would_hold_note(&self, obj: &Self::Object, users: &[Self::Use]) -> String {
        self.held_note(obj, users)
    }
    /// The object is gone (its watch said so) while `cached` used it: the
    /// note of a would-hold event to report, if any.
    fn gone(&self, _obj: &Self::Object, _cached: &[Self::Use]) -> Option<String> {
        None
    }
    /// How long a release must still wait (upstream's service-cidr grace
    /// after the deletionTimestamp); `None`: it may go now.
    fn release_after(&self, _obj: &Self::Object) -> Option<std::time::Duration> {
        None
    }
    /// The rule's own writes after a plan was carried out (a status
    /// condition); never called with [`Plan::ConfirmLive`].
    fn after(
        &self,
        _client: &kube::Client,
        _obj: &Self::Object,
        _plan: &Plan<Self::Use>,
    ) -> impl Future<Output = Result<(), ReconcileError>> + Send {
        std::future::ready(Ok(()))
    }
    /// A failure the engine logs and retries, for a rule that also reports
    /// it elsewhere (a ProtectionRule's `status.lastError`).
    fn failed(&self, _error: &dyn std::fmt::Display) {}
}

/// How one user watch feeds the index: each verb returns the store keys of
/// the protected objects to re-check ([`crate::runtime::users`]).
pub trait Feed<U> {
    fn apply(&mut self, user: &U) -> BTreeSet<String>;
    fn delete(&mut self, user: &U) -> BTreeSet<String>;
    fn begin_reset(&mut self);
    /// A user listed again during a re-list; by default an apply.
    fn reset_apply(&mut self, user: &U) -> BTreeSet<String> {
        self.apply(user)
    }
    fn finish_reset(&mut self) -> BTreeSet<String>;
    /// Users indexed (for `protection_manager_indexed_users`).
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Feeds one watch event into `index`: the objects to re-check, and
/// whether the event completed a (re-)list.
pub fn feed<U, I: Feed<U>>(index: &mut I, ev: watcher::Event<U>) -> (BTreeSet<String>, bool) {
    match ev {
        watcher::Event::Apply(u) => (index.apply(&u), false),
        watcher::Event::Delete(u) => (index.delete(&u), false),
        watcher::Event::Init => {
            index.begin_reset();
            (BTreeSet::new(), false)
        }
        watcher::Event::InitApply(u) => (index.reset_apply(&u), false),
        watcher::Event::InitDone => (index.finish_reset(), true),
    }
}

/// What one user watch event did to the index.
#[derive(Debug, Default)]
pub struct Fed {
    /// Store keys of the protected objects to re-check.
    pub recheck: BTreeSet<String>,
    /// The event completed a (re-)list.
    pub listed: bool,
    /// Users indexed now.
    pub indexed: usize,
}

/// The `ObjectRef` of a store key (`name` or `namespace/name`).
pub fn object_ref<K: Resource<DynamicType = ()>>(key: &str) -> ObjectRef<K> {
    object_ref_as(key, ())
}

/// [`object_ref`] for a kind known at run time.
pub fn object_ref_as<K: Resource>(key: &str, dt: K::DynamicType) -> ObjectRef<K> {
    match key.split_once('/') {
        Some((ns, name)) => ObjectRef::new_with(name, dt).within(ns),
        None => ObjectRef::new_with(key, dt),
    }
}

/// A running in-use controller.
pub struct Engine<R: Rule> {
    rule: R,
    name: &'static str,
    client: kube::Client,
    dt: DynType<R>,
    executor: Executor,
    metrics: ControllerMetrics,
    store: Store<R::Object>,
    writer: Mutex<Option<reflector::store::Writer<R::Object>>>,
    index: RwLock<R::Index>,
    users_synced: Mutex<Vec<watch::Receiver<bool>>>,
    batcher: Batcher<Option<ReconcileTimer>>,
    permits: Semaphore,
    concurrency: usize,
    state: Arc<PerObject>,
    trigger: mpsc::UnboundedSender<queue::Key>,
    trigger_rx: Mutex<Option<mpsc::UnboundedReceiver<queue::Key>>>,
    settings: Settings,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl<R: Rule> Engine<R>
where
    R::Index: Default,
    R::Object: Resource<DynamicType = ()>,
{
    /// An engine for `rule` writing `finalizer`; start its user watches with
    /// [`Engine::watch_users`], then [`Engine::run`] it.
    pub fn new(
        ctx: &ControllerContext,
        rule: R,
        finalizer: PhasedFinalizer,
        settings: Settings,
    ) -> Arc<Self> {
        Self::with_parts(ctx, rule, finalizer, settings, (), R::Index::default())
    }
}

impl<R: Rule> Engine<R> {
    /// [`Engine::new`] for a kind known at run time (`dt`) and an index
    /// built by the caller.
    pub fn with_parts(
        ctx: &ControllerContext,
        rule: R,
        finalizer: PhasedFinalizer,
        settings: Settings,
        dt: DynType<R>,
        index: R::Index,
    ) -> Arc<Self> {
        let writer = reflector::store::Writer::new(dt.clone());
        let (trigger, trigger_rx) = mpsc::unbounded();
        Arc::new(Engine {
            rule,
            name: ctx.name,
            client: ctx.client.clone(),
            dt,
            executor: Executor::new(finalizer, ctx.events.clone()),
            metrics: ctx.metrics.clone(),
            store: writer.as_reader(),
            writer: Mutex::new(Some(writer)),
            index: RwLock::new(index),
            users_synced: Mutex::new(Vec::new()),
            batcher: Batcher::new(),
            permits: Semaphore::new(usize::from(ctx.concurrency.max(1))),
            concurrency: usize::from(ctx.concurrency.max(1)),
            state: Arc::new(PerObject::default()),
            trigger,
            trigger_rx: Mutex::new(Some(trigger_rx)),
            settings,
            shutdown: ctx.shutdown.clone(),
            tasks: TaskTracker::new(),
        })
    }

    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// The protected objects' cache.
    pub fn store(&self) -> &Store<R::Object> {
        &self.store
    }

    /// The users index (read).
    pub fn index(&self) -> parking_lot::RwLockReadGuard<'_, R::Index> {
        self.index.read()
    }

    /// The users of `obj` in the index.
    pub fn cached_users(&self, obj: &R::Object) -> Vec<R::Use> {
        self.rule.cached_users(&self.index.read(), obj)
    }

    /// The finalizer the engine writes.
    pub fn finalizer(&self) -> &PhasedFinalizer {
        self.executor.finalizer()
    }

    /// Feeds the index from a watch of `api` (one per user kind); the
    /// engine decides no deletion before every such watch has listed.
    pub fn watch_users<U>(
        self: &Arc<Self>,
        api: Api<U>,
        config: watcher::Config,
        what: &'static str,
    ) where
        U: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        R::Index: Feed<U>,
    {
        self.watch_users_with(api, config, what.to_string(), |index, ev| {
            let mut ix = index.write();
            let (recheck, listed) = feed(&mut *ix, ev);
            Fed {
                recheck,
                listed,
                indexed: ix.len(),
            }
        });
    }

    /// [`Engine::watch_users`] with the rule's own feeding of each event
    /// (which may do its work before it takes the index's lock).
    pub fn watch_users_with<U, F>(
        self: &Arc<Self>,
        api: Api<U>,
        config: watcher::Config,
        what: String,
        mut feed: F,
    ) where
        U: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        F: FnMut(&RwLock<R::Index>, watcher::Event<U>) -> Fed + Send + 'static,
    {
        let synced = watch::Sender::new(false);
        self.users_synced.lock().push(synced.subscribe());
        let engine = self.clone();
        self.tasks.spawn(async move {
            let mut events = watcher(api, config)
                .default_backoff()
                .modify(|u: &mut U| u.meta_mut().managed_fields = None)
                .boxed();
            loop {
                let ev = tokio::select! {
                    _ = engine.shutdown.cancelled() => return,
                    ev = events.next() => ev,
                };
                let keys = match ev {
                    None => return,
                    Some(Err(e)) => {
                        tracing::warn!(controller = engine.name, users = %what, error = %e, "watch failed; retrying");
                        engine.rule.failed(&format_args!("watching {what}: {e}"));
                        continue;
                    }
                    Some(Ok(ev)) => {
                        let fed = feed(&engine.index, ev);
                        engine.metrics.set_indexed_users(fed.indexed);
                        if fed.listed {
                            let first = !*synced.borrow();
                            synced.send_replace(true);
                            tracing::info!(
                                controller = engine.name,
                                users = %what,
                                indexed = fed.indexed,
                                to_recheck = fed.recheck.len(),
                                "users index {}",
                                if first { "synced" } else { "re-listed" }
                            );
                        }
                        fed.recheck
                    }
                };
                engine.enqueue(keys);
            }
        });
    }

    /// Re-checks the protected objects `keys` that are in the cache.
    pub fn enqueue(&self, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            let r = object_ref_as::<R::Object>(&k, self.dt.clone());
            if self.store.get(&r).is_some() {
                let _ = self.trigger.unbounded_send(k.into());
            }
        }
    }

    async fn wait_users_synced(&self) {
        let rxs = self.users_synced.lock().clone();
        for mut rx in rxs {
            let _ = rx.wait_for(|v| *v).await;
        }
    }

    /// Runs the controller over `api` (the protected kind, every namespace)
    /// until the host's shutdown.
    pub async fn run(
        self: Arc<Self>,
        ctx: &ControllerContext,
        api: Api<R::Object>,
    ) -> ControllerResult {
        let (Some(writer), Some(trigger_rx)) =
            (self.writer.lock().take(), self.trigger_rx.lock().take())
        else {
            tracing::error!(controller = self.name, "the engine was run twice; ignoring");
            return Ok(());
        };
        let observer = Observer::new(self.finalizer().name(), self.metrics.clone());
        let mut caches = vec![observer.listed()];
        caches.extend(self.users_synced.lock().iter().cloned());
        let (on_event, on_trigger, on_resync) = (self.clone(), self.clone(), self.clone());
        let events = main_watch(api, writer, observer, self.state.clone()).inspect_ok(move |ev| {
            if let watcher::Event::Delete(o) = ev {
                on_event.gone(o);
            }
        });
        // The queue keeps a key per waiting object (all of them while the
        // first list is worked through): `namespace/name`, one string.
        let name = self.name;
        let triggers = settled_keys(events, move |o: &R::Object| {
            on_trigger.rule.wanted(on_trigger.finalizer(), o)
        })
        .filter_map(move |k| {
            std::future::ready(match k {
                Ok(k) => Some(queue::Key::from(k)),
                Err(e) => {
                    tracing::warn!(controller = name, error = %e, "watch error (retrying)");
                    None
                }
            })
        });
        let resync = resync_stream_as(
            self.store.clone(),
            self.settings.resync_period,
            move |o: &R::Object| on_resync.rule.wanted(on_resync.finalizer(), o),
            self.dt.clone(),
        )
        .map(|r| queue::key_of(&r));
        let ready = ready_when_synced(self.name, ctx.ready.clone(), ctx.shutdown.clone(), caches);
        let engine = self.clone();
        let work = move |key: queue::Key| {
            let engine = engine.clone();
            // What kube's Controller put on every line a reconcile logs.
            let span = tracing::info_span!(
                "reconciling object",
                controller = engine.name,
                object = %key
            );
            tracing::Instrument::instrument(
                async move {
                    let Some(obj) = engine.store.get(&object_ref_as(&key, engine.dt.clone()))
                    else {
                        tracing::debug!(controller = engine.name, object = %key, "object gone before its reconcile");
                        return None;
                    };
                    match reconcile::<R>(obj.clone(), engine.clone()).await {
                        Ok(requeue) => requeue,
                        Err(e) => Some(error_policy::<R>(&obj, &e, &engine)),
                    }
                },
                span,
            )
        };
        let triggers = futures::stream::select(
            futures::stream::select(triggers.boxed(), trigger_rx),
            resync,
        );
        let store = self.store.clone();
        let listed = async move {
            // Only an engine dropped before its watch ran leaves it unready.
            let _ = store.wait_until_ready().await;
        };
        queue::run(
            self.concurrency,
            ctx.shutdown.clone(),
            listed,
            triggers,
            work,
        )
        .await;
        // The queue stopped (shutdown): let in-flight rounds finish.
        self.shutdown.cancel();
        ready.abort();
        self.tasks.close();
        self.tasks.wait().await;
        ctx.ready.set(false);
        self.metrics.retire();
        tracing::info!(
            controller = self.name,
            "{} protection controller stopped",
            self.rule.kind()
        );
        Ok(())
    }

    /// The watch said `obj` is gone: a rule may report a deletion its users
    /// would have held.
    fn gone(&self, obj: &R::Object) {
        let cached = self.cached_users(obj);
        let Some(note) = self.rule.gone(obj, &cached) else {
            return;
        };
        let (executor, obj, dt) = (self.executor.clone(), obj.clone(), self.dt.clone());
        self.tasks.spawn(async move {
            executor.report_would_hold(&obj, &dt, note).await;
        });
    }

    /// Carries out a final plan (never [`Plan::ConfirmLive`]), then the
    /// rule's own writes.
    async fn execute(&self, obj: &R::Object, plan: Plan<R::Use>) -> Result<(), ReconcileError> {
        let f = self.executor.finalizer();
        let step = match &plan {
            Plan::AddFinalizer => Step::AddFinalizer,
            Plan::RemoveFinalizer => Step::RemoveFinalizer {
                why: self.rule.unused(),
                released: self.rule.released_note(obj, f.name()),
            },
            Plan::Keep(users) => Step::Keep {
                held: self.rule.held_note(obj, users),
            },
            Plan::WouldHold(users) => Step::WouldHold {
                note: self.rule.would_hold_note(obj, users),
            },
            Plan::Nothing => Step::Nothing,
            Plan::ConfirmLive => {
                tracing::error!("a final decision asked for another live confirmation; ignoring");
                return Ok(());
            }
        };
        let api = self.rule.api(&self.client, obj);
        self.executor
            .execute_as(&api, obj, &self.dt, &self.state, step)
            .await?;
        self.rule.after(&self.client, obj, &plan).await
    }

    /// Queues `obj` for its scope's next live round.
    fn submit_live(self: &Arc<Self>, scope: String, key: String, timer: ReconcileTimer) {
        match self.batcher.push(&scope, &key, Some(timer)) {
            Pushed::StartWorker => {
                let engine = self.clone();
                self.tasks
                    .spawn(async move { engine.scope_worker(scope).await });
            }
            Pushed::Queued => {}
            Pushed::Duplicate(t) => {
                if let Some(t) = t {
                    t.finish(true);
                }
            }
        }
    }

    /// One scope's worker: round after round until nothing is waiting.
    async fn scope_worker(self: Arc<Self>, scope: String) {
        loop {
            let permit = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                p = self.permits.acquire() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let Some(batch) = self.batcher.take(&scope) else {
                return;
            };
            self.confirm_batch(&scope, batch).await;
            drop(permit);
        }
    }

    /// Checks every member against the cache again (one that gained a user,
    /// lost its finalizer or went is decided from the cache), then makes ONE
    /// live round for the rest and decides each from it.
    async fn confirm_batch(&self, scope: &str, batch: Vec<(String, Option<ReconcileTimer>)>) {
        let f = self.executor.finalizer();
        let mut waiting = Vec::with_capacity(batch.len());
        for (key, timer) in batch {
            let Some(obj) = self.store.get(&object_ref_as(&key, self.dt.clone())) else {
                finish(timer, true);
                continue;
            };
            if self.state.expectations.is_stale(&key, obj.meta()) {
                finish(timer, true);
                continue;
            }
            let cached = self.cached_users(&obj);
            match self.rule.decide(f, &obj, &cached, None) {
                Plan::ConfirmLive => waiting.push((key, obj, timer)),
                plan => {
                    let res = self.execute(&obj, plan).await;
                    self.settle(&key, res, timer);
                }
            }
        }
        if waiting.is_empty() {
            return;
        }
        self.metrics.live_list(waiting.len());
        tracing::debug!(
            controller = self.name,
            scope,
            objects = waiting.len(),
            "live round for a batch"
        );
        let live = tokio::select! {
            _ = self.shutdown.cancelled() => {
                for (_, _, timer) in waiting {
                    finish(timer, true);
                }
                return;
            }
            live = self.rule.list_live(&self.client, scope, &self.index) => live,
        };
        let live = match live {
            Ok(live) => live,
            Err(e) => {
                self.rule.failed(&e);
                for (key, _, timer) in waiting {
                    self.retry_later(&key, &e);
                    finish(timer, false);
                }
                return;
            }
        };
        let live = &live;
        let writes = futures::stream::iter(waiting.into_iter().map(|(key, obj, timer)| async move {
            let users = self.rule.live_users(live, &obj);
            // The cache again, now: a user the watches brought while the
            // round was in flight (written after a page's snapshot) holds
            // the object as well as one in the round (found by the
            // real-cluster chaos: a claim written between the claims' and
            // the volumes' LIST of vac-protection's round).
            let cached = self.cached_users(&obj);
            let plan = self.rule.decide(f, &obj, &cached, Some(&users));
            tracing::debug!(controller = self.name, object = %key, ?plan, "decided with a live round");
            let res = self.execute(&obj, plan).await;
            self.settle(&key, res, timer);
        }))
        .buffer_unordered(self.concurrency);
        writes.collect::<Vec<()>>().await;
    }

    fn settle(&self, key: &str, res: Result<(), ReconcileError>, timer: Option<ReconcileTimer>) {
        match &res {
            Ok(()) => self.state.backoff.forget(key),
            Err(e) => {
                self.rule.failed(e);
                self.retry_later(key, e);
            }
        }
        finish(timer, res.is_ok());
    }

    /// Schedules another reconcile of `key` after its backoff.
    fn retry_later(&self, key: &str, err: &ReconcileError) {
        let delay = self.state.backoff.next(key);
        tracing::warn!(
            controller = self.name,
            object = %key,
            error = %err,
            retry_in = ?delay,
            "confirming the object is unused failed; retrying"
        );
        let (tx, r) = (self.trigger.clone(), queue::Key::from(key));
        let stop = self.shutdown.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(delay) => { let _ = tx.unbounded_send(r); }
            }
        });
    }

    /// Objects waiting for a live round (all scopes).
    pub fn waiting(&self) -> usize {
        self.batcher.pending()
    }
}

fn finish(timer: Option<ReconcileTimer>, ok: bool) {
    if let Some(t) = timer {
        t.finish(ok);
    }
}

async fn reconcile<R: Rule>(
    obj: Arc<R::Object>,
    engine: Arc<Engine<R>>,
) -> Result<Option<Duration>, ReconcileError> {
    let timer = engine.metrics.reconcile_started();
    // Only an object being deleted is decided from the users index; adding
    // the finalizer never reads it. So a back-fill starts as soon as the
    // protected objects are listed, while the (larger) user lists still
    // load, and a deletion still waits for the whole index before anything
    // may release it.
    if is_deleting(obj.meta()) {
        tokio::select! {
            _ = engine.shutdown.cancelled() => {
                timer.finish(true);
                return Ok(None);
            }
            _ = engine.wait_users_synced() => {}
        }
    }
    let key = object_key(&*obj);
    let span = tracing::debug_span!("reconcile", kind = engine.rule.kind(), object = %key);
    let _enter = span.enter();
    if engine.state.expectations.is_stale(&key, obj.meta()) {
        tracing::debug!("cache has not caught up with our last write yet; waiting for it");
        timer.finish(true);
        return Ok(None);
    }
    let f = engine.executor.finalizer();
    let cached = engine.cached_users(&obj);
    let live = (!engine.rule.confirms_live()).then_some(&[][..]);
    let plan = engine.rule.decide(f, &obj, &cached, live);
    tracing::debug!(?plan, "decided from the cache");
    if plan.releases()
        && let Some(wait) = engine.rule.release_after(&obj)
    {
        // Not yet: decided again (and confirmed) once the wait is over.
        tracing::debug!(?wait, "unused, but not to be released yet");
        timer.finish(true);
        return Ok(Some(wait));
    }
    if plan == Plan::ConfirmLive {
        // No user in the cache: the scope's confirmer decides, from a live
        // round started after its own cache check; this worker is free.
        engine.submit_live(engine.rule.scope(&obj), key, timer);
        return Ok(None);
    }
    drop(_enter);
    let res = engine.execute(&obj, plan).await;
    match &res {
        Ok(()) => engine.state.backoff.forget(&key),
        Err(e) => engine.rule.failed(e),
    }
    timer.finish(res.is_ok());
    res.map(|()| None)
}

fn error_policy<R: Rule>(obj: &R::Object, err: &ReconcileError, engine: &Engine<R>) -> Duration {
    // A fight's back-off waits as asked, not as a failure.
    let after = match err {
        ReconcileError::Finalizer(e) => e.retry_in(),
        _ => None,
    };
    super::retry_delay(
        engine.name,
        &engine.state.backoff,
        &object_key(obj),
        err,
        after,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const F: &str = "example.com/in-use";

    fn meta(finalizer: bool, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("o".into()),
            finalizers: finalizer.then(|| vec![F.to_string()]),
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        }
    }

    #[test]
    fn the_decision_table() {
        let u = ["user".to_string()];
        let none: [String; 0] = [];
        // (finalizer, deleting, add gate, cached, live) -> plan
        type Row<'a> = (
            bool,
            bool,
            bool,
            &'a [String],
            Option<&'a [String]>,
            Plan<String>,
        );
        let rows: Vec<Row> = vec![
            (false, false, true, &none, None, Plan::AddFinalizer),
            (false, false, false, &none, None, Plan::Nothing),
            (true, false, true, &u, None, Plan::Nothing),
            (false, true, true, &u, None, Plan::Nothing),
            (true, true, true, &u, None, Plan::Keep(u.to_vec())),
            (true, true, false, &none, None, Plan::ConfirmLive),
            (true, true, false, &none, Some(&none), Plan::RemoveFinalizer),
            (true, true, false, &none, Some(&u), Plan::Keep(u.to_vec())),
            (true, true, false, &u, Some(&none), Plan::Keep(u.to_vec())),
        ];
        for (i, (fin, del, add, cached, live, want)) in rows.into_iter().enumerate() {
            assert_eq!(
                decide(&meta(fin, del), F, add, cached, live),
                want,
                "row {i}"
            );
        }
    }

    #[test]
    fn usage_is_unknown_until_a_live_round_answers() {
        let none: [u8; 0] = [];
        assert_eq!(usage::<u8>(&none, None), Usage::Unknown);
        assert_eq!(usage::<u8>(&none, Some(&none)), Usage::Free);
        assert_eq!(usage(&[1], None), Usage::InUse(vec![1]));
        assert_eq!(usage(&none, Some(&[2])), Usage::InUse(vec![2]));
    }

    #[test]
    fn store_keys_become_object_refs() {
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        let r = object_ref::<PersistentVolumeClaim>("ns/a");
        assert_eq!((r.namespace.as_deref(), r.name.as_str()), (Some("ns"), "a"));
        let r = object_ref::<PersistentVolume>("a");
        assert_eq!((r.namespace.as_deref(), r.name.as_str()), (None, "a"));
    }
}

//! The pvc-protection controller.
//!
//! ```text
//! PVC watch ──reflector──▶ PVC store ──▶ Controller ──▶ reconcile
//!                                            ▲             │ cache check (pod index)
//! pod watch ──▶ pod index ──claims to re-check┘             │ keep / add / …
//!   (PodFacts: apply, delete, re-list)                      ▼ no user in the cache
//!                                                   per-namespace batch:
//!                                                   ONE live pod LIST, then
//!                                                   decide again per PVC and
//!                                                   remove (one request) or keep
//! ```
//!
//! * The reconcile asks the pod index first (upstream `askInformer`); a user
//!   there keeps the finalizer with no API call.
//! * Otherwise the PVC joins its namespace's next batch ([`crate::batch`]);
//!   a namespace worker takes the batch, makes one live LIST of the
//!   namespace's pods (started after every member's cache check), and
//!   decides again for each member with both the index and the list (a user
//!   in either keeps it). Up to `--concurrency` namespaces are confirmed at
//!   once, one worker per namespace (upstream's namespace workers).
//! * Errors retry per PVC with exponential backoff
//!   ([`protection_core::runtime::Backoff`]).
//!
//! Kept PVCs (kubernetes #120041). A kept PVC waits for a pod event, as
//! upstream. The gap upstream has — a pod deleted while the watch was down
//! leaves the PVC Terminating until a 12–24 h resync — is closed by
//! **re-checking on re-list**: kube-rs re-lists after any watch gap it cannot
//! resume (410 Gone), and the index's re-list knows exactly which pods
//! vanished or changed UID, so exactly their claims are re-checked at once.
//! A plain bounded requeue of kept PVCs would also converge, but only after
//! its period, and it would re-check every kept PVC forever whether or not
//! anything changed. The configurable resync (`--storage-protection-resync-
//! period`, upstream's informer resync) stays as a backstop; it re-checks
//! from the cache, so a kept PVC costs no request, and it never writes when
//! nothing changed (the event memory keeps it from repeating events).

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use parking_lot::RwLock;
use prometheus::{Histogram, HistogramOpts, IntCounter, Opts};
use protection_core::finalizer::PhasedFinalizer;
use protection_core::metrics::ReconcileTimer;
use protection_core::runtime::{
    self, Executor, Observer, PerObject, Step, main_watch, object_key, phased_finalizer,
    ready_when_synced, resync_stream, retry_after_failure,
};
use protection_core::{ControllerContext, ControllerMetrics, ControllerResult};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::batch::{Batcher, Pushed};
use crate::index::{ClaimKey, PodIndex, live_users};
use crate::objects::PvcFacts;
use crate::pod::PodFacts;
use crate::pvc::{PvcPlan, controller_uid, decide, held_note, released_note};
use crate::{Error, Settings};

/// Registered controller name.
pub const NAME: &str = "pvc-protection";
/// kube-controller-manager's name for it.
pub const ALIAS: &str = "persistentvolumeclaim-protection-controller";

type Pvc = PvcFacts;

struct LiveMetrics {
    lists: IntCounter,
    batch_size: Histogram,
}

impl LiveMetrics {
    fn new(metrics: &ControllerMetrics) -> Self {
        let lists = IntCounter::with_opts(
            Opts::new(
                "pvc_live_pod_lists_total",
                "Live pod LISTs made to confirm that PVCs are unused (one per namespace batch).",
            )
            .namespace("protection_manager"),
        );
        let batch_size = Histogram::with_opts(
            HistogramOpts::new(
                "pvc_live_list_batch_size",
                "PVCs confirmed by one live pod LIST.",
            )
            .namespace("protection_manager")
            .buckets(vec![
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
            ]),
        );
        // Both constructors only fail on invalid names, which these are not.
        let lists = lists.unwrap_or_else(|_| unreachable!("valid counter options"));
        let batch_size = batch_size.unwrap_or_else(|_| unreachable!("valid histogram options"));
        for c in [
            Box::new(lists.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(batch_size.clone()),
        ] {
            if let Err(e) = metrics.registry().register(c) {
                tracing::debug!(error = %e, "live-list metrics already registered; not exported twice");
            }
        }
        LiveMetrics { lists, batch_size }
    }
}

struct Shared {
    client: kube::Client,
    executor: Executor,
    metrics: ControllerMetrics,
    store: Store<Pvc>,
    index: RwLock<PodIndex>,
    synced: tokio::sync::watch::Sender<bool>,
    batcher: Batcher<Option<ReconcileTimer>>,
    permits: Semaphore,
    state: Arc<PerObject>,
    trigger: mpsc::UnboundedSender<ObjectRef<Pvc>>,
    live: LiveMetrics,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// upstream `pvcAddedUpdated`'s filter.
fn wanted(f: &PhasedFinalizer, pvc: &Pvc) -> bool {
    f.needs_add(&pvc.metadata) || f.is_deletion_candidate(&pvc.metadata)
}

fn claim_ref(namespace: &str, name: &str) -> ObjectRef<Pvc> {
    ObjectRef::new(name).within(namespace)
}

/// Runs the controller until `ctx.shutdown`.
pub async fn run(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let finalizer = phased_finalizer(
        &ctx,
        &settings.finalizer,
        &crate::STORAGE_OBJECT_IN_USE_PROTECTION,
        "pvc-protection-controller",
    )?;
    let api: Api<Pvc> = Api::all(ctx.client.clone());
    let (reader, writer) = reflector::store();
    let (trigger_tx, trigger_rx) = mpsc::unbounded();
    let shared = Arc::new(Shared {
        client: ctx.client.clone(),
        executor: Executor::new(finalizer.clone(), ctx.events.clone()),
        metrics: ctx.metrics.clone(),
        store: reader.clone(),
        index: RwLock::new(PodIndex::new()),
        synced: tokio::sync::watch::Sender::new(false),
        batcher: Batcher::new(),
        permits: Semaphore::new(usize::from(ctx.concurrency.max(1))),
        state: Arc::new(PerObject::default()),
        trigger: trigger_tx,
        live: LiveMetrics::new(&ctx.metrics),
        shutdown: ctx.shutdown.clone(),
        tasks: TaskTracker::new(),
    });

    let observer = Observer::new(&settings.finalizer, ctx.metrics.clone());
    let listed = observer.listed();
    let filter = finalizer.clone();
    let triggers = main_watch(api, writer, observer, shared.state.clone())
        .applied_objects()
        .try_filter(move |pvc| std::future::ready(wanted(&filter, pvc)));

    shared.tasks.spawn(run_pod_watcher(shared.clone()));
    let ready = ready_when_synced(
        NAME,
        ctx.ready.clone(),
        ctx.shutdown.clone(),
        vec![listed, shared.synced.subscribe()],
    );

    let resync_filter = finalizer.clone();
    let controller = Controller::for_stream(triggers, reader.clone())
        .reconcile_on(trigger_rx)
        .reconcile_on(resync_stream(reader, settings.resync_period, move |pvc| {
            wanted(&resync_filter, pvc)
        }));
    runtime::drive(&ctx, controller, reconcile, error_policy, shared.clone()).await;
    // The Controller stopped (shutdown): let in-flight batches finish.
    shared.shutdown.cancel();
    ready.abort();
    shared.tasks.close();
    shared.tasks.wait().await;
    ctx.ready.set(false);
    tracing::info!(controller = NAME, "PVC protection controller stopped");
    Ok(())
}

/// Feeds the pod index from the pod watch and enqueues the claims each
/// event may free.
async fn run_pod_watcher(shared: Arc<Shared>) {
    let api: Api<PodFacts> = Api::all(shared.client.clone());
    let mut events = watcher(api, runtime::watch_config())
        .default_backoff()
        .boxed();
    loop {
        let ev = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            ev = events.next() => ev,
        };
        match ev {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(controller = NAME, error = %e, "pod watch failed; retrying")
            }
            Some(Ok(ev)) => {
                let keys = shared.apply_pod_event(ev);
                shared.enqueue(keys);
            }
        }
    }
}

impl Shared {
    fn apply_pod_event(&self, ev: watcher::Event<PodFacts>) -> BTreeSet<ClaimKey> {
        let mut ix = self.index.write();
        match ev {
            watcher::Event::Apply(p) => ix.apply(&p),
            watcher::Event::Delete(p) => ix.delete(&p),
            watcher::Event::Init => {
                ix.begin_relist();
                BTreeSet::new()
            }
            watcher::Event::InitApply(p) => {
                ix.relist_apply(&p);
                BTreeSet::new()
            }
            watcher::Event::InitDone => {
                let keys = ix.finish_relist();
                let first = !*self.synced.borrow();
                self.synced.send_replace(true);
                tracing::info!(
                    controller = NAME,
                    pods = ix.len(),
                    claims_to_recheck = keys.len(),
                    "pod index {}",
                    if first { "synced" } else { "re-listed" }
                );
                keys
            }
        }
    }

    /// Re-checks claims that exist in the PVC cache.
    fn enqueue(&self, keys: BTreeSet<ClaimKey>) {
        for k in keys {
            let r = claim_ref(&k.namespace, &k.name);
            if self.store.get(&r).is_some() {
                let _ = self.trigger.unbounded_send(r);
            }
        }
    }

    async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn cached_users(&self, pvc: &Pvc) -> Vec<crate::index::PodUse> {
        let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
        self.index
            .read()
            .users(ns, &pvc.name_any(), controller_uid(pvc))
    }

    /// Queues a PVC for its namespace's next live confirmation.
    fn submit_live(self: &Arc<Self>, namespace: &str, name: &str, timer: ReconcileTimer) {
        match self.batcher.push(namespace, name, Some(timer)) {
            Pushed::StartWorker => {
                let shared = self.clone();
                let ns = namespace.to_string();
                self.tasks
                    .spawn(async move { shared.namespace_worker(ns).await });
            }
            Pushed::Queued => {}
            Pushed::Duplicate(t) => {
                if let Some(t) = t {
                    t.finish(true);
                }
            }
        }
    }

    /// One namespace's worker: batch after batch until nothing is pending.
    async fn namespace_worker(self: Arc<Self>, namespace: String) {
        loop {
            let permit = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                p = self.permits.acquire() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let Some(batch) = self.batcher.take(&namespace) else {
                return;
            };
            self.process_batch(&namespace, batch).await;
            drop(permit);
        }
    }

    /// ONE live LIST for the batch, then a final decision per PVC.
    async fn process_batch(&self, namespace: &str, batch: Vec<(String, Option<ReconcileTimer>)>) {
        let api: Api<PodFacts> = Api::namespaced(self.client.clone(), namespace);
        self.live.lists.inc();
        self.live.batch_size.observe(batch.len() as f64);
        tracing::debug!(namespace, pvcs = batch.len(), "live pod list for a batch");
        let pods = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(source) => {
                let err = Error::LiveList {
                    what: format!("pods in namespace {namespace}"),
                    source,
                };
                for (name, timer) in batch {
                    self.retry_later(namespace, &name, &err);
                    if let Some(t) = timer {
                        t.finish(false);
                    }
                }
                return;
            }
        };
        for (name, timer) in batch {
            let key = format!("{namespace}/{name}");
            let res = match self.store.get(&claim_ref(namespace, &name)) {
                None => Ok(()),
                Some(pvc) => self.confirm(&pvc, &pods).await,
            };
            match &res {
                Ok(()) => self.state.backoff.forget(&key),
                Err(e) => self.retry_later(namespace, &name, e),
            }
            if let Some(t) = timer {
                t.finish(res.is_ok());
            }
        }
    }

    #[tracing::instrument(skip_all, fields(kind = "PersistentVolumeClaim", namespace = pvc.metadata.namespace.as_deref().unwrap_or_default(), name = %pvc.name_any()))]
    async fn confirm(&self, pvc: &Pvc, pods: &[PodFacts]) -> Result<(), Error> {
        if self
            .state
            .expectations
            .is_stale(&object_key(pvc), &pvc.metadata)
        {
            return Ok(());
        }
        let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
        let cached = self.cached_users(pvc);
        let live = live_users(pods, ns, &pvc.name_any(), controller_uid(pvc));
        let f = self.executor.finalizer();
        let plan = decide(pvc, f.name(), f.add_enabled(), &cached, Some(&live));
        tracing::debug!(?plan, "decided with a live pod list");
        self.execute(pvc, plan).await
    }

    /// Carries out a final plan (never [`PvcPlan::ConfirmLive`]).
    async fn execute(&self, pvc: &Pvc, plan: PvcPlan) -> Result<(), Error> {
        let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
        let name = pvc.name_any();
        let step = match plan {
            PvcPlan::AddFinalizer => Step::AddFinalizer,
            PvcPlan::RemoveFinalizer => Step::RemoveFinalizer {
                why: "the PVC is unused",
                released: released_note(ns, &name, self.executor.finalizer().name()),
            },
            PvcPlan::Keep(users) => Step::Keep {
                held: held_note(ns, &name, &users),
            },
            PvcPlan::Nothing => Step::Nothing,
            PvcPlan::ConfirmLive => {
                tracing::error!("a final decision asked for another live confirmation; ignoring");
                Step::Nothing
            }
        };
        let api: Api<Pvc> = Api::namespaced(self.client.clone(), ns);
        self.executor.execute(&api, pvc, &self.state, step).await?;
        Ok(())
    }

    /// Schedules another reconcile of a PVC after its backoff.
    fn retry_later(&self, namespace: &str, name: &str, err: &Error) {
        let delay = self.state.backoff.next(&format!("{namespace}/{name}"));
        tracing::warn!(
            controller = NAME,
            pvc = %format!("{namespace}/{name}"),
            error = %err,
            retry_in = ?delay,
            "confirming the PVC is unused failed; retrying"
        );
        let tx = self.trigger.clone();
        let r = claim_ref(namespace, name);
        let stop = self.shutdown.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(delay) => { let _ = tx.unbounded_send(r); }
            }
        });
    }
}

#[tracing::instrument(skip_all, fields(kind = "PersistentVolumeClaim", namespace = pvc.metadata.namespace.as_deref().unwrap_or_default(), name = %pvc.name_any()))]
async fn reconcile(pvc: Arc<Pvc>, ctx: Arc<Shared>) -> Result<Action, Error> {
    let timer = ctx.metrics.reconcile_started();
    // Only a claim being deleted is decided from the pod index; adding the
    // finalizer to a live claim never reads it. So a back-fill starts as
    // soon as the PVCs are listed, while the (larger) pod list still loads,
    // and a deleting claim still waits for the whole index before anything
    // may release it.
    if protection_core::finalizer::is_deleting(&pvc.metadata) {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => {
                timer.finish(true);
                return Ok(Action::await_change());
            }
            _ = ctx.wait_synced() => {}
        }
    }
    let key = object_key(&*pvc);
    if ctx.state.expectations.is_stale(&key, &pvc.metadata) {
        tracing::debug!(pvc = %key, "cache has not caught up with our last write yet; waiting for it");
        timer.finish(true);
        return Ok(Action::await_change());
    }
    let cached = ctx.cached_users(&pvc);
    let f = ctx.executor.finalizer();
    let plan = decide(&pvc, f.name(), f.add_enabled(), &cached, None);
    tracing::debug!(pvc = %key, ?plan, "decided from the cache");
    if plan == PvcPlan::ConfirmLive {
        let ns = pvc.metadata.namespace.as_deref().unwrap_or_default();
        ctx.submit_live(ns, &pvc.name_any(), timer);
        return Ok(Action::await_change());
    }
    let res = ctx.execute(&pvc, plan).await;
    if res.is_ok() {
        ctx.state.backoff.forget(&key);
    }
    timer.finish(res.is_ok());
    res.map(|()| Action::await_change())
}

fn error_policy(pvc: Arc<Pvc>, err: &Error, ctx: Arc<Shared>) -> Action {
    retry_after_failure(NAME, &ctx.state.backoff, &object_key(&*pvc), err, None)
}

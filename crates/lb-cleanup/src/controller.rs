//! The kube-runtime wiring of `service-lb-cleanup`.
//!
//! * A Service watch feeds a reflector store. Each event passes a filter that
//!   reproduces upstream's informer handlers ([`should_sync`]): the previous
//!   version of a Service comes from our own last-seen map (kube-runtime gives
//!   no old object), so our own finalizer/status writes and a re-list do not
//!   re-trigger anything. Objects of a re-list are released only after the
//!   store swapped them in, so none is dropped as "not found".
//! * A kube-runtime [`Controller`] runs [`reconcile`] per Service (never two
//!   at once for one Service, at most `--concurrency` in all), with upstream's
//!   per-Service backoff (5 s doubling to 300 s, reset on success) and a
//!   provider's `Retry-After` honoured exactly. The watch, the reflector, the
//!   Terminating gauge, the write expectations, the backoff, the resync and
//!   the readiness are `protection_core::runtime`'s; this module adds the
//!   informer-handler filter, the node sync and the deletion of vanished
//!   Services.
//! * A Service that vanishes while cached (synced, cleanup not completed: no
//!   finalizer) gets its load balancer deleted by a retrying task
//!   (upstream's `processServiceDeletion`).
//! * A Node watch drives the node sync: when a node is added, deleted, or
//!   flips the exclusion label or providerID, every synced Service whose
//!   stable node set changed gets `update_hosts`.
//! * Every `--lb-resync-period`, Services that still need cleanup are synced
//!   again (upstream's 30 s informer resync re-drives only those).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use protection_core::events::EventRecorder;
use protection_core::runtime::{
    Backoff, Observer, PerObject, main_watch, object_key, queue, ready_when_synced, resync_stream,
    retry_delay,
};
use protection_core::{ControllerContext, ControllerError, ControllerMetrics, ControllerResult};
use serde_json::Value;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::decide::{NodeSet, Policy};
use crate::metrics::{Instrumented, ProviderMetrics};
use crate::predicates::{ClassSelector, needs_cleanup, should_sync, wants_load_balancer};
use crate::provider::{LoadBalancerProvider, lb_nodes, should_sync_updated_node};
use crate::sync::{EventSink, LbEvent, NodeSync, ServiceWriter, SyncError, Syncer, WriteError};

/// The field manager of our `services/status` patches.
pub const FIELD_MANAGER: &str = "protection-manager";

/// Upstream `minRetryDelay`: the service queue's per-item base delay.
pub const MIN_RETRY_DELAY: Duration = Duration::from_secs(5);
/// Upstream `maxRetryDelay`.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// Per-Service memory: backoff (upstream's 5 s → 300 s), and our last
/// write's answer until the watch delivers it.
type Memory = PerObject<Arc<Service>>;

fn memory() -> Memory {
    PerObject::with_backoff(Backoff::new(MIN_RETRY_DELAY, MAX_RETRY_DELAY))
}

/// What the controller needs besides the host's context.
#[derive(Clone)]
pub struct Settings {
    pub classes: ClassSelector,
    pub finalizer: String,
    /// `None`: no provider configured; the controller stays idle.
    pub provider: Option<Arc<dyn LoadBalancerProvider>>,
    /// Upstream's informer resync for pending cleanups; `None` disables it.
    pub resync_period: Option<Duration>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("classes", &self.classes)
            .field("finalizer", &self.finalizer)
            .field(
                "provider",
                &self.provider.as_ref().map(|p| p.name().to_owned()),
            )
            .field("resync_period", &self.resync_period)
            .finish()
    }
}

/// `services/status` strategic merge patches through kube.
struct KubeWriter {
    client: kube::Client,
    params: PatchParams,
}

#[async_trait]
impl ServiceWriter for KubeWriter {
    async fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<Option<Service>, WriteError> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        match api
            .patch_status(name, &self.params, &Patch::Strategic(body))
            .await
        {
            Ok(s) => Ok(Some(s)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                Err(WriteError::Stale(s.message.clone()))
            }
            Err(e) => Err(WriteError::Api(e.to_string())),
        }
    }

    async fn live_metadata(&self, namespace: &str, name: &str) -> Option<ObjectMeta> {
        // Metadata only, in full: managedFields say who else writes.
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        match api.get_metadata_opt(name).await {
            Ok(m) => m.map(|m| m.metadata),
            Err(e) => {
                tracing::debug!(service = %format!("{namespace}/{name}"), error = %e, "reading the Service's managedFields failed");
                None
            }
        }
    }
}

/// Events through the host's recorder (events.k8s.io/v1, with series).
struct RecorderSink(EventRecorder);

#[async_trait]
impl EventSink for RecorderSink {
    async fn publish(&self, regarding: &ObjectReference, ev: LbEvent) {
        if ev.warning {
            self.0
                .warning(regarding, ev.reason, ev.action, ev.note)
                .await;
        } else {
            self.0
                .normal(regarding, ev.reason, ev.action, ev.note)
                .await;
        }
    }
}

/// The current target node set, computed from the Node store and shared
/// (one allocation) by every Service that last received it.
struct Targets {
    nodes: Store<Node>,
    current: Mutex<NodeSet>,
}

impl Targets {
    fn new(nodes: Store<Node>) -> Self {
        Self {
            nodes,
            current: Mutex::new(NodeSet::default()),
        }
    }

    fn get(&self) -> NodeSet {
        let fresh = {
            let all = self.nodes.state();
            lb_nodes(all.iter().map(|n| n.as_ref()))
        };
        let mut cur = self.current.lock();
        if **cur != fresh {
            *cur = Arc::new(fresh);
        }
        cur.clone()
    }
}

/// Shared state of one controller run.
struct State {
    syncer: Arc<Syncer>,
    targets: Arc<Targets>,
    nodes_synced: watch::Receiver<bool>,
    metrics: ControllerMetrics,
    /// The backoff, and our last write per Service: a reconcile that still
    /// sees the version our write started from (the watch has not delivered
    /// it yet) works from the API server's answer instead, so it does not
    /// write again.
    memory: Arc<Memory>,
}

impl State {
    fn freshest(&self, key: &str, svc: Arc<Service>) -> Arc<Service> {
        self.memory
            .expectations
            .pending(key, &svc.metadata)
            .unwrap_or(svc)
    }
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error("the node cache stopped")]
    NodesGone,
}

/// One sync of `svc`; `Ok` waits for the next change (nothing requeued).
async fn reconcile(svc: Arc<Service>, st: Arc<State>) -> Result<(), ReconcileError> {
    let timer = st.metrics.reconcile_started();
    if !synced(st.nodes_synced.clone()).await {
        timer.finish(false);
        return Err(ReconcileError::NodesGone);
    }
    let key = object_key(svc.as_ref());
    let seen = svc.clone();
    let svc = st.freshest(&key, svc);
    let res = st.syncer.process_service(&svc, st.targets.get()).await;
    match res {
        Ok(out) => {
            st.memory.backoff.forget(&key);
            if out.finalizer_added {
                st.metrics.finalizer_added();
            }
            if out.finalizer_removed {
                st.metrics.finalizer_removed();
                if let Some(ts) = &svc.metadata.deletion_timestamp {
                    st.metrics.observe_cleanup_since(ts.0);
                }
            }
            match out.latest {
                Some(mut latest) if !out.gone => {
                    latest.metadata.managed_fields = None;
                    st.memory
                        .expectations
                        .wrote(&key, &seen.metadata, Arc::new(latest));
                }
                _ => st.memory.expectations.forget(&key),
            }
            timer.finish(true);
            Ok(())
        }
        Err(e) => {
            if e.is_new_fight_backoff() {
                st.metrics.finalizer_fight_backoff();
            }
            timer.finish(false);
            Err(e.into())
        }
    }
}

/// Waits until a watch listed everything once; `false` if it stopped first.
///
/// Our own flag, not `Store::wait_until_ready`: kube-runtime's store
/// readiness (`DelayedInit`) keeps one waker, so a second concurrent waiter
/// (the work queue waits on the Service store) would never be woken.
async fn synced(mut rx: watch::Receiver<bool>) -> bool {
    rx.wait_for(|v| *v).await.is_ok()
}

/// When a failed sync of `svc` runs again.
fn error_policy(svc: &Service, err: &ReconcileError, st: &State) -> Duration {
    // Upstream: a RetryError is re-added after exactly its delay, without
    // counting as a rate-limited failure.
    let after = match err {
        ReconcileError::Sync(e) => e.retry_after(),
        ReconcileError::NodesGone => None,
    };
    retry_delay(
        crate::wiring::CONTROLLER_NAME,
        &st.memory.backoff,
        &object_key(svc),
        err,
        after,
    )
}

/// A Service's key in the work queue: `namespace/name`.
fn service_ref(key_ns: &str, name: &str) -> ObjectRef<Service> {
    ObjectRef::new(name).within(key_ns)
}

/// The informer-handler filter over the Service watch (after the reflector
/// and the observer): which watch events trigger a sync, and which Services
/// vanished.
struct ServiceFilter {
    classes: ClassSelector,
    finalizer: String,
    reader: Store<Service>,
    /// Last seen version of every Service that wants a load balancer (the
    /// "old" object of upstream's update handler; absent = did not want one).
    last: HashMap<ObjectRef<Service>, Arc<Service>>,
    /// During a re-list: the Services to sync at `InitDone`, and those whose
    /// `last` entry is then the store's copy. Keys, not
    /// objects: until `InitDone` the listed objects sit only in the
    /// reflector's buffer, and a copy of each here (as this filter kept
    /// before) was a third of the back-fill's peak heap at 2,000 Services.
    init_triggers: Vec<ObjectRef<Service>>,
    init_wanted: Vec<ObjectRef<Service>>,
    syncer: Arc<Syncer>,
    deletions: mpsc::UnboundedSender<(String, String)>,
}

impl ServiceFilter {
    /// Whether `svc` is to be synced (upstream's handlers, against the last
    /// version seen), and whether it wants a load balancer (then `last` is
    /// to hold it).
    fn judge(&self, r: &ObjectRef<Service>, svc: &Service) -> (bool, bool) {
        let old = self.last.get(r);
        (
            should_sync(old.map(|a| &**a), svc, &self.classes, &self.finalizer),
            wants_load_balancer(svc, &self.classes),
        )
    }

    /// An applied version: the reflector has stored it already.
    fn decide(&mut self, svc: &Service) -> bool {
        let r = ObjectRef::from_obj(svc);
        let (sync, wants) = self.judge(&r, svc);
        if wants {
            // Point at the store's copy when it has this version (no second
            // copy of the object).
            let arc = self
                .reader
                .get(&r)
                .filter(|a| a.metadata.resource_version == svc.metadata.resource_version)
                .unwrap_or_else(|| Arc::new(svc.clone()));
            self.last.insert(r, arc);
        } else {
            self.last.remove(&r);
        }
        sync
    }

    fn vanished(&self, key: String, uid: String) {
        let _ = self.deletions.send((key, uid));
    }

    /// One watch event in, the Services to sync out.
    fn handle(&mut self, ev: watcher::Event<Service>) -> Vec<ObjectRef<Service>> {
        match ev {
            watcher::Event::Apply(svc) => {
                if self.decide(&svc) {
                    vec![ObjectRef::from_obj(&svc)]
                } else {
                    vec![]
                }
            }
            watcher::Event::Delete(svc) => {
                self.last.remove(&ObjectRef::from_obj(&svc));
                if let Some(uid) = svc.metadata.uid.clone() {
                    self.vanished(object_key(&svc), uid);
                }
                vec![]
            }
            watcher::Event::Init => {
                self.init_triggers.clear();
                self.init_wanted.clear();
                vec![]
            }
            watcher::Event::InitApply(svc) => {
                let r = ObjectRef::from_obj(&svc);
                // `last` keeps the version before the re-list until
                // InitDone: no other event comes in between, and each key
                // is listed once.
                let (sync, wants) = self.judge(&r, &svc);
                if sync {
                    self.init_triggers.push(r.clone());
                }
                if wants {
                    self.init_wanted.push(r);
                }
                vec![]
            }
            watcher::Event::InitDone => {
                // The store now holds the re-listed objects: `last` points
                // at them, and forgets what was not listed or wants no load
                // balancer any more.
                let wanted = std::mem::take(&mut self.init_wanted);
                self.last.clear();
                for r in wanted {
                    if let Some(s) = self.reader.get(&r) {
                        self.last.insert(r, s);
                    }
                }
                // Deletions missed during a watch gap (kube-runtime does not
                // synthesise them): cached Services whose UID is not listed.
                let live: HashSet<String> = self
                    .reader
                    .state()
                    .iter()
                    .filter_map(|s| s.metadata.uid.clone())
                    .collect();
                for (key, cached) in self.syncer.cached_all() {
                    if !live.contains(&cached.uid) {
                        self.vanished(key, cached.uid);
                    }
                }
                std::mem::take(&mut self.init_triggers)
            }
        }
    }
}

/// Retries the load-balancer deletion of a vanished Service until it
/// succeeds, the entry is handled elsewhere, or shutdown.
async fn deletion_job(syncer: Arc<Syncer>, key: String, uid: String, stop: CancellationToken) {
    let backoff = Backoff::new(MIN_RETRY_DELAY, MAX_RETRY_DELAY);
    loop {
        let delay = match syncer.process_service_deletion(&key, &uid).await {
            Ok(_) => return,
            Err(e) => {
                let d = e.retry_after().unwrap_or_else(|| backoff.next(&key));
                tracing::warn!(service = %key, %uid, error = %e, retry_in = ?d, "error deleting the load balancer of a deleted service (will retry)");
                d
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Watches Nodes; wakes the node sync when the set of load-balancer targets
/// may have changed (upstream's node handlers).
async fn watch_nodes(
    api: Api<Node>,
    writer: reflector::store::Writer<Node>,
    wake: Arc<Notify>,
    synced: watch::Sender<bool>,
    stop: CancellationToken,
) {
    let mut last: HashMap<String, Node> = HashMap::new();
    let mut seen: HashMap<String, Node> = HashMap::new();
    let events = watcher(api, protection_core::runtime::watch_config())
        .default_backoff()
        .modify(|n: &mut Node| n.metadata.managed_fields = None)
        .reflect(writer);
    let mut events = std::pin::pin!(events);
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return,
            ev = events.next() => ev,
        };
        match ev {
            None => return,
            Some(Err(e)) => tracing::warn!(error = %e, "node watch failed; retrying"),
            Some(Ok(ev)) => match ev {
                watcher::Event::Apply(n) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let changed = last
                        .get(&name)
                        .is_none_or(|old| should_sync_updated_node(old, &n));
                    last.insert(name, n);
                    if changed {
                        wake.notify_one();
                    }
                }
                watcher::Event::Delete(n) => {
                    last.remove(n.metadata.name.as_deref().unwrap_or(""));
                    wake.notify_one();
                }
                watcher::Event::Init => seen.clear(),
                watcher::Event::InitApply(n) => {
                    seen.insert(n.metadata.name.clone().unwrap_or_default(), n);
                }
                watcher::Event::InitDone => {
                    last = std::mem::take(&mut seen);
                    synced.send_replace(true);
                    // Nodes may have come and gone during the gap; the sync
                    // compares sets, so waking it is cheap and safe.
                    wake.notify_one();
                }
            },
        }
    }
}

/// Upstream's node worker: one pass over the synced Services per wake-up.
struct NodeSyncLoop {
    syncer: Arc<Syncer>,
    services: Store<Service>,
    targets: Arc<Targets>,
    wake: Arc<Notify>,
    /// Service and Node watches listed once.
    ready: (watch::Receiver<bool>, watch::Receiver<bool>),
    retry: futures::channel::mpsc::UnboundedSender<ObjectRef<Service>>,
    concurrency: usize,
}

impl NodeSyncLoop {
    async fn run(self, stop: CancellationToken) {
        let Self {
            syncer,
            services,
            targets,
            wake,
            ready,
            retry,
            concurrency,
        } = self;
        if !synced(ready.0).await || !synced(ready.1).await {
            return;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = wake.notified() => {}
            }
            let targets = targets.get();
            let work: Vec<Arc<Service>> = syncer
                .cached_all()
                .into_iter()
                .filter_map(|(key, cached)| {
                    let (ns, name) = key.split_once('/')?;
                    services
                        .get(&service_ref(ns, name))
                        .filter(|s| s.metadata.uid.as_deref() == Some(cached.uid.as_str()))
                })
                .collect();
            let retries: Vec<ObjectRef<Service>> = stream::iter(work)
                .map(|svc| {
                    let syncer = syncer.clone();
                    let targets = targets.clone();
                    async move {
                        match syncer.node_sync_service(&svc, targets).await {
                            NodeSync::Done => None,
                            NodeSync::Retry => Some(ObjectRef::from_obj(svc.as_ref())),
                        }
                    }
                })
                .buffer_unordered(concurrency.max(1))
                .filter_map(futures::future::ready)
                .collect()
                .await;
            if !retries.is_empty() {
                tracing::info!(
                    count = retries.len(),
                    "node sync failed for some load balancers; resyncing them"
                );
            }
            for r in retries {
                let _ = retry.unbounded_send(r);
            }
        }
    }
}

/// Runs the controller until `ctx.shutdown`.
pub async fn run(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let name = ctx.name;
    let Some(provider) = settings.provider.clone() else {
        tracing::warn!(
            controller = name,
            "no load-balancer provider configured (--lb-provider-endpoint): the controller does not run, so no load-balancer finalizer is added or removed"
        );
        ctx.ready.set(true);
        ctx.shutdown.cancelled().await;
        return Ok(());
    };
    let add_finalizer = ctx
        .gates
        .enabled(crate::SERVICE_LOAD_BALANCER_FINALIZER.name);
    let policy = Policy {
        classes: settings.classes.clone(),
        finalizer: settings.finalizer.clone(),
        add_finalizer,
    };
    tracing::info!(
        controller = name,
        class = %policy.classes.class,
        include_unclassed = policy.classes.include_unclassed,
        finalizer = %policy.finalizer,
        add_finalizer,
        provider = provider.name(),
        "starting service load-balancer controller"
    );
    let pm = ProviderMetrics::new(ctx.metrics.registry())
        .map_err(|e| ControllerError::new(name, format!("registering provider metrics: {e}")))?;
    let provider: Arc<dyn LoadBalancerProvider> = Arc::new(Instrumented::new(provider, pm));
    let writer = Arc::new(KubeWriter {
        client: ctx.client.clone(),
        params: PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        },
    });
    let syncer = Arc::new(Syncer::new(
        policy,
        provider,
        writer,
        Arc::new(RecorderSink(ctx.events.clone())),
    ));
    // Our own child token: stopping our helper tasks must not stop the
    // other controllers sharing the host's token.
    let stop = ctx.shutdown.child_token();

    // Nodes.
    let (node_reader, node_writer) = reflector::store::<Node>();
    let node_wake = Arc::new(Notify::new());
    let (nodes_synced_tx, nodes_synced) = watch::channel(false);
    let node_watch = tokio::spawn(watch_nodes(
        Api::all(ctx.client.clone()),
        node_writer,
        node_wake.clone(),
        nodes_synced_tx,
        stop.clone(),
    ));

    // Services.
    let (svc_reader, svc_writer) = reflector::store::<Service>();
    // A futures channel is a Stream itself, as `reconcile_on` wants (the
    // same as pvc-protection's trigger).
    let (retry_tx, retry_rx) = futures::channel::mpsc::unbounded::<ObjectRef<Service>>();
    let (del_tx, del_rx) = mpsc::unbounded_channel::<(String, String)>();
    let memory = Arc::new(memory());
    let targets = Arc::new(Targets::new(node_reader));
    let observer = Observer::new(&settings.finalizer, ctx.metrics.clone());
    let svcs_synced = observer.listed();
    let svcs_listed = svcs_synced.clone();
    let mut filter = ServiceFilter {
        classes: settings.classes.clone(),
        finalizer: settings.finalizer.clone(),
        reader: svc_reader.clone(),
        last: HashMap::new(),
        init_triggers: Vec::new(),
        init_wanted: Vec::new(),
        syncer: syncer.clone(),
        deletions: del_tx,
    };
    let triggers = main_watch(
        Api::<Service>::all(ctx.client.clone()),
        svc_writer,
        observer,
        memory.clone(),
    )
    .flat_map(move |ev| {
        stream::iter(match ev {
            Ok(ev) => filter.handle(ev).iter().map(queue::key_of).collect(),
            Err(e) => {
                tracing::warn!(controller = name, error = %e, "watch error (retrying)");
                vec![]
            }
        })
    });

    let deletions = tokio::spawn(run_deletions(syncer.clone(), del_rx, stop.clone()));
    let node_sync = tokio::spawn(
        NodeSyncLoop {
            syncer: syncer.clone(),
            services: svc_reader.clone(),
            targets: targets.clone(),
            wake: node_wake,
            ready: (svcs_synced.clone(), nodes_synced.clone()),
            retry: retry_tx,
            concurrency: usize::from(ctx.concurrency),
        }
        .run(stop.clone()),
    );
    let ready = ready_when_synced(
        name,
        ctx.ready.clone(),
        stop.clone(),
        vec![svcs_synced, nodes_synced.clone()],
    );

    // Upstream's informer resync re-drives only pending cleanups.
    let finalizer = settings.finalizer.clone();
    let resync = resync_stream(
        svc_reader.clone(),
        settings.resync_period.unwrap_or(Duration::ZERO),
        move |s| needs_cleanup(s, &finalizer),
    );
    // The Services to sync come as keys (the filter holds no objects) to
    // the engine's work queue (one `namespace/name` string per waiting
    // Service; kube's Controller kept three `ObjectRef`s each, a third of the
    // back-fill's peak heap at 2,000 Services); each is read from the store
    // when it runs.
    let triggers = stream::select(
        stream::select(triggers.boxed(), retry_rx.map(|r| queue::key_of(&r))),
        resync.map(|r| queue::key_of(&r)),
    );
    let state = Arc::new(State {
        syncer,
        targets,
        nodes_synced,
        metrics: ctx.metrics.clone(),
        memory,
    });
    let work = move |key: queue::Key| {
        let (store, st) = (svc_reader.clone(), state.clone());
        let span = tracing::info_span!("reconciling object", controller = name, object = %key);
        tracing::Instrument::instrument(
            async move {
                let Some(svc) = store.get(&protection_core::runtime::inuse::object_ref(&key))
                else {
                    tracing::debug!(controller = name, object = %key, "object gone before its reconcile");
                    return None;
                };
                match reconcile(svc.clone(), st.clone()).await {
                    Ok(()) => None,
                    Err(e) => Some(error_policy(&svc, &e, &st)),
                }
            },
            span,
        )
    };
    queue::run(
        usize::from(ctx.concurrency),
        ctx.shutdown.clone(),
        async move {
            synced(svcs_listed).await;
        },
        triggers,
        work,
    )
    .await;
    // The queue only returns on shutdown (in-flight syncs finished).
    stop.cancel();
    ready.abort();
    for t in [node_watch, node_sync, deletions] {
        let _ = t.await;
    }
    tracing::info!(
        controller = name,
        "service load-balancer controller stopped"
    );
    Ok(())
}

/// Deletes the load balancers of vanished Services (upstream's
/// `processServiceDeletion`), one retrying job per Service UID.
async fn run_deletions(
    syncer: Arc<Syncer>,
    mut vanished: mpsc::UnboundedReceiver<(String, String)>,
    stop: CancellationToken,
) {
    let mut running: HashSet<(String, String)> = HashSet::new();
    let mut jobs = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(done) = jobs.join_next(), if !jobs.is_empty() => {
                if let Ok(k) = done { running.remove(&k); }
            }
            msg = vanished.recv() => match msg {
                None => break,
                Some(k) => {
                    if syncer.cached(&k.0).is_some_and(|c| c.uid == k.1) && running.insert(k.clone()) {
                        let (syncer, stop) = (syncer.clone(), stop.clone());
                        jobs.spawn(async move {
                            deletion_job(syncer, k.0.clone(), k.1.clone(), stop).await;
                            k
                        });
                    }
                }
            }
        }
    }
    jobs.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ProviderError;
    use crate::sync::tests::{FakeEvents, FakeProvider, FakeWriter, svc};
    use crate::sync::{Cause, Step};
    use protection_core::metrics::Metrics;

    fn state() -> Arc<State> {
        let syncer = Arc::new(Syncer::new(
            Policy {
                classes: ClassSelector {
                    class: "c.io/x".into(),
                    include_unclassed: false,
                },
                finalizer: "c.io/f".into(),
                add_finalizer: true,
            },
            Arc::new(FakeProvider::default()),
            Arc::new(FakeWriter::default()),
            Arc::new(FakeEvents::default()),
        ));
        let metrics = Metrics::new().unwrap();
        Arc::new(State {
            syncer,
            targets: Arc::new(Targets::new(reflector::store::<Node>().0)),
            nodes_synced: watch::channel(true).1,
            metrics: metrics.controller("service-lb-cleanup"),
            memory: Arc::new(memory()),
        })
    }

    fn provider_err(e: ProviderError) -> ReconcileError {
        ReconcileError::Sync(SyncError {
            step: Step::EnsureLoadBalancer,
            cause: Cause::Provider(e),
        })
    }

    #[test]
    fn error_policy_backs_off_per_service_and_honours_retry_after_exactly() {
        let st = state();
        let web = Arc::new(svc("web", "LoadBalancer", "TCP"));
        let db = Arc::new(svc("db", "LoadBalancer", "TCP"));
        let transient = || {
            provider_err(ProviderError::Transient {
                status: Some(500),
                message: "x".into(),
            })
        };
        let secs = |d: Duration| d.as_secs();
        let delays: Vec<u64> = (0..4)
            .map(|_| secs(error_policy(&web, &transient(), &st)))
            .collect();
        assert_eq!(delays, [5, 10, 20, 40]);
        // Retry-After: exactly that delay, and the failure count is kept.
        let ra = provider_err(ProviderError::RetryAfter {
            after: Duration::from_secs(7),
            message: "busy".into(),
        });
        assert_eq!(secs(error_policy(&web, &ra, &st)), 7);
        assert_eq!(secs(error_policy(&web, &transient(), &st)), 80);
        // Per Service.
        assert_eq!(secs(error_policy(&db, &transient(), &st)), 5);
        // A success forgets.
        st.memory.backoff.forget("default/web");
        assert_eq!(secs(error_policy(&web, &transient(), &st)), 5);
    }

    #[test]
    fn services_share_one_node_set_until_it_changes() {
        let (reader, mut writer) = reflector::store::<Node>();
        let node = test_support::objects::node;
        writer.apply_watcher_event(&watcher::Event::Apply(node("a")));
        let t = Targets::new(reader);
        let first = t.get();
        assert_eq!(first.len(), 1);
        assert!(
            Arc::ptr_eq(&first, &t.get()),
            "unchanged: the same allocation"
        );
        writer.apply_watcher_event(&watcher::Event::Apply(node("b")));
        let second = t.get();
        assert_eq!(second.len(), 2);
        assert!(!Arc::ptr_eq(&first, &second));
    }

    #[test]
    fn a_stale_store_is_replaced_by_our_last_write() {
        let st = state();
        let mut seen = svc("web", "LoadBalancer", "TCP");
        seen.metadata.resource_version = Some("10".into());
        let mut ours = seen.clone();
        ours.metadata.resource_version = Some("11".into());
        ours.metadata.finalizers = Some(vec!["c.io/f".into()]);
        st.memory
            .expectations
            .wrote("default/web", &seen.metadata, Arc::new(ours.clone()));
        // The store still has 10: use our answer.
        let got = st.freshest("default/web", Arc::new(seen.clone()));
        assert_eq!(got.metadata.resource_version.as_deref(), Some("11"));
        // The store moved on: use it, forget ours.
        let mut newer = seen.clone();
        newer.metadata.resource_version = Some("12".into());
        let got = st.freshest("default/web", Arc::new(newer));
        assert_eq!(got.metadata.resource_version.as_deref(), Some("12"));
        assert!(st.memory.expectations.is_empty());
    }

    /// A ServiceFilter behind a store, as in `run`: the reflector applies
    /// each event before the filter sees it.
    struct FilterRig {
        filter: ServiceFilter,
        store: reflector::store::Writer<Service>,
        vanished: mpsc::UnboundedReceiver<(String, String)>,
        syncer: Arc<Syncer>,
    }

    impl FilterRig {
        fn new() -> Self {
            let env = crate::sync::tests::env_with(FakeProvider::default(), true);
            let syncer = Arc::new(env.syncer);
            let (reader, store) = reflector::store::<Service>();
            let (tx, vanished) = mpsc::unbounded_channel();
            FilterRig {
                filter: ServiceFilter {
                    classes: syncer.policy.classes.clone(),
                    finalizer: syncer.policy.finalizer.clone(),
                    reader,
                    last: HashMap::new(),
                    init_triggers: Vec::new(),
                    init_wanted: Vec::new(),
                    syncer: syncer.clone(),
                    deletions: tx,
                },
                store,
                vanished,
                syncer,
            }
        }

        /// The names of the Services the event triggers.
        fn feed(&mut self, ev: watcher::Event<Service>) -> Vec<String> {
            self.store.apply_watcher_event(&ev);
            self.filter.handle(ev).into_iter().map(|r| r.name).collect()
        }

        fn vanished(&mut self) -> Vec<(String, String)> {
            let mut out = Vec::new();
            while let Ok(v) = self.vanished.try_recv() {
                out.push(v);
            }
            out
        }
    }

    fn at(mut s: Service, rv: &str) -> Service {
        s.metadata.resource_version = Some(rv.into());
        s
    }

    #[test]
    fn filter_syncs_a_new_load_balancer_and_a_relevant_change_only() {
        let mut rig = FilterRig::new();
        let web = at(svc("web", "LoadBalancer", "TCP"), "1");
        assert_eq!(rig.feed(watcher::Event::Apply(web.clone())), ["web"]);
        // Our own status write: a new version, nothing upstream's update
        // handler looks at changed.
        let mut status = at(web.clone(), "2");
        status.status = Some(Default::default());
        assert!(rig.feed(watcher::Event::Apply(status.clone())).is_empty());
        // An annotation change is a relevant update.
        let mut annotated = at(status, "3");
        annotated.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        assert_eq!(rig.feed(watcher::Event::Apply(annotated)), ["web"]);
        // Not a LoadBalancer: never synced.
        let cip = at(svc("cip", "ClusterIP", "TCP"), "1");
        assert!(rig.feed(watcher::Event::Apply(cip)).is_empty());
    }

    #[test]
    fn filter_re_drives_a_pending_cleanup_on_every_event() {
        let mut rig = FilterRig::new();
        let mut gone = at(svc("web", "LoadBalancer", "TCP"), "5");
        gone.metadata.finalizers = Some(vec![rig.syncer.policy.finalizer.clone()]);
        gone.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(rig.feed(watcher::Event::Apply(gone.clone())), ["web"]);
        assert_eq!(
            rig.feed(watcher::Event::Apply(gone)),
            ["web"],
            "the same object again (a resync) still needs cleanup"
        );
    }

    #[test]
    fn filter_releases_a_relists_triggers_once_the_store_holds_them() {
        let mut rig = FilterRig::new();
        let web = at(svc("web", "LoadBalancer", "TCP"), "1");
        assert!(rig.feed(watcher::Event::Init).is_empty());
        assert!(rig.feed(watcher::Event::InitApply(web.clone())).is_empty());
        assert!(
            rig.filter.reader.get(&ObjectRef::from_obj(&web)).is_none(),
            "not in the store before InitDone"
        );
        assert_eq!(rig.feed(watcher::Event::InitDone), ["web"]);
        assert!(rig.filter.reader.get(&ObjectRef::from_obj(&web)).is_some());
        // The same object re-listed again after a watch gap: nothing to do.
        rig.feed(watcher::Event::Init);
        rig.feed(watcher::Event::InitApply(web.clone()));
        assert!(rig.feed(watcher::Event::InitDone).is_empty());
        // A Service that no longer wants a load balancer is forgotten: when
        // it wants one again, that is an add.
        rig.feed(watcher::Event::Init);
        assert!(rig.feed(watcher::Event::InitDone).is_empty());
        assert_eq!(rig.feed(watcher::Event::Apply(web)), ["web"]);
    }

    #[tokio::test]
    async fn filter_reports_deleted_services_and_deletions_missed_during_a_gap() {
        let mut rig = FilterRig::new();
        let web = at(svc("web", "LoadBalancer", "TCP"), "1");
        let db = at(svc("db", "LoadBalancer", "TCP"), "1");
        for s in [&web, &db] {
            rig.feed(watcher::Event::Apply(s.clone()));
            rig.syncer
                .process_service(s, NodeSet::default())
                .await
                .unwrap();
        }
        assert_eq!(
            rig.syncer.cached_all().len(),
            2,
            "both load balancers synced"
        );
        rig.feed(watcher::Event::Delete(web));
        assert_eq!(
            rig.vanished(),
            [("default/web".to_string(), "uid-web".to_string())]
        );
        // db is deleted while the watch is down: the re-list does not list
        // it, and the cache still knows its load balancer.
        rig.feed(watcher::Event::Init);
        rig.feed(watcher::Event::InitDone);
        let missed = rig.vanished();
        assert!(
            missed.contains(&("default/db".to_string(), "uid-db".to_string())),
            "{missed:?}"
        );
    }
}

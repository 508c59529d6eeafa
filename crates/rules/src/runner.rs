//! One dynamic in-use controller per ProtectionRule: a metadata watch of the
//! protected kind, a full watch of each user kind feeding the [`Index`], and
//! keyed workers carrying out [`decide`]'s plans with core's runtime pieces
//! (the phased finalizer's guarded JSON patches, backoff, event memory):
//!
//! * up to `--concurrency` reconciles at once, never two for one object (a
//!   key that changes while it is being reconciled runs again afterwards,
//!   as client-go's workqueue does);
//! * a deletion that finds no user in the index is handed to one confirmer
//!   task, which frees the worker: the confirmer takes every object handed
//!   over since its last round, checks each against the cache again, then
//!   makes one round of live LISTs of every user kind (started after those
//!   checks) and decides each object from it, as vac-protection's
//!   confirmer does. At scale (1,000 Secrets released as their 2,000 pods
//!   go, 20,000 pods) one cluster-wide LIST per released object made the
//!   release take tens of minutes; a round per batch takes seconds.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersion};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use protection_core::events::EventRecorder;
use protection_core::finalizer::{FinalizerPatch, PhasedFinalizer, has_finalizer, is_deleting};
use protection_core::runtime::{Backoff, EventMemory};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cel;
use crate::decide::{Plan, UserRef, decide, decide_gone, describe};
use crate::index::{Changed, Index, ObjKey, Refs, UserKey, in_scope};
use crate::spec::{CompiledUser, Mode, RuleSpec};

/// A kind as discovery serves it.
#[derive(Clone, Debug)]
pub struct Kind {
    pub ar: ApiResource,
    pub namespaced: bool,
}

impl Kind {
    /// `pods`, `deployments.apps`: how notes name the kind.
    pub fn display(&self) -> String {
        if self.ar.group.is_empty() {
            self.ar.plural.clone()
        } else {
            format!("{}.{}", self.ar.plural, self.ar.group)
        }
    }
}

/// Resolves a rule's `spec.protected` (resource or kind) to its API.
pub async fn resolve_protected(
    client: &kube::Client,
    p: &crate::spec::Protected,
) -> Result<Kind, String> {
    resolve(
        client,
        &p.group,
        &p.version,
        p.resource.as_deref(),
        p.kind.as_deref(),
    )
    .await
}

/// Finds a kind by resource (or kind) through discovery of its group-version.
pub async fn resolve(
    client: &kube::Client,
    group: &str,
    version: &str,
    resource: Option<&str>,
    kind: Option<&str>,
) -> Result<Kind, String> {
    let gv = GroupVersion::gv(group, version);
    let api_version = gv.api_version();
    let g = kube::discovery::pinned_group(client, &gv)
        .await
        .map_err(|e| format!("discovery of {api_version}: {e}"))?;
    g.versioned_resources(version)
        .into_iter()
        .find(|(ar, _)| match (resource, kind) {
            (Some(r), _) => ar.plural == r,
            (None, Some(k)) => ar.kind == k,
            _ => false,
        })
        .map(|(ar, caps)| Kind {
            ar,
            namespaced: caps.scope == kube::discovery::Scope::Namespaced,
        })
        .ok_or_else(|| {
            format!(
                "{api_version} serves no {}",
                resource.or(kind).unwrap_or("resource")
            )
        })
}

/// What a running rule knows, shared with the rules controller (status,
/// explain).
#[derive(Debug, Default)]
pub struct Shared {
    pub index: Mutex<Index>,
    /// Protected objects' metadata, from the metadata watch.
    pub objects: Mutex<HashMap<ObjKey, ObjectMeta>>,
    pub last_error: Mutex<Option<String>>,
    /// Audit: deletions that would have been held, since the rule started.
    pub would_hold: AtomicU64,
}

/// Counts for the status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub protected: u64,
    pub held_now: u64,
}

impl Shared {
    pub fn counts(&self, finalizer: &str) -> Counts {
        let objects = self.objects.lock();
        let index = self.index.lock();
        let mut c = Counts::default();
        for (k, m) in objects.iter() {
            if has_finalizer(m, finalizer) {
                c.protected += 1;
                if is_deleting(m) && !index.users_of(k).is_empty() {
                    c.held_now += 1;
                }
            }
        }
        c
    }

    fn error(&self, e: impl Into<String>) {
        let e = e.into();
        tracing::warn!(error = %e, "rule");
        *self.last_error.lock() = Some(e);
    }
}

/// Everything one rule's controller needs.
pub struct RuleCtx {
    pub rule: String,
    pub client: kube::Client,
    pub events: EventRecorder,
    pub spec: RuleSpec,
    pub users: Vec<CompiledUser>,
    pub protected: Kind,
    pub user_kinds: Vec<Kind>,
    pub add_enabled: bool,
    pub field_manager: String,
    /// Reconciles at once (`--concurrency`); at least one.
    pub concurrency: usize,
}

/// Objects per page of a live LIST.
const LIVE_PAGE: u32 = 500;

/// The users of every protected object, from one round of live LISTs.
#[derive(Debug, Default)]
pub struct LiveUsers {
    users: HashMap<ObjKey, Vec<UserRef>>,
    /// Users whose reference could not be evaluated: they hold every
    /// object in their scope (see [`Index::users_of`]).
    unresolved: Vec<UserRef>,
}

impl LiveUsers {
    /// The users of `key` in this round.
    pub fn of(&self, key: &ObjKey) -> Vec<UserRef> {
        let mut out = self.users.get(key).cloned().unwrap_or_default();
        out.extend(
            self.unresolved
                .iter()
                .filter(|u| crate::index::in_scope(&u.namespace, key))
                .cloned(),
        );
        out
    }
}

/// A running rule.
pub struct Runner {
    pub generation: i64,
    pub shared: Arc<Shared>,
    pub ctx: Arc<RuleCtx>,
    cancel: CancellationToken,
    synced: watch::Receiver<bool>,
}

impl Runner {
    pub fn stop(&self) {
        self.cancel.cancel();
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until every watch of the rule has listed once.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.clone();
        let _ = rx.wait_for(|v| *v).await;
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

enum Work {
    Obj(ObjKey),
    Gone(ObjKey, Box<ObjectMeta>),
}

fn key_of(meta: &ObjectMeta) -> ObjKey {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl RuleCtx {
    fn finalizer(&self) -> PhasedFinalizer {
        // The name was checked when the rule was compiled.
        PhasedFinalizer::new(&self.spec.finalizer, self.add_enabled)
            .unwrap_or_else(|_| {
                PhasedFinalizer::new("protection-manager.io/invalid", false)
                    .expect("a valid constant name")
            })
            .with_field_manager(&self.field_manager)
    }

    fn api(&self, ns: &str) -> Api<DynamicObject> {
        if self.protected.namespaced {
            Api::namespaced_with(self.client.clone(), ns, &self.protected.ar)
        } else {
            Api::all_with(self.client.clone(), &self.protected.ar)
        }
    }

    /// The protected objects user entry `i` refers to through `obj`.
    pub fn refs_of(&self, i: usize, obj: &DynamicObject) -> Result<Vec<ObjKey>, String> {
        let u = &self.users[i];
        // The expression sees the object as the API serves it, less
        // managedFields (often its largest part, and no reference's).
        let mut value = obj.data.clone();
        if let serde_json::Value::Object(m) = &mut value {
            let mut meta = obj.metadata.clone();
            meta.managed_fields = None;
            if let Some(t) = &obj.types {
                m.insert("apiVersion".into(), t.api_version.clone().into());
                m.insert("kind".into(), t.kind.clone().into());
            }
            m.insert(
                "metadata".into(),
                serde_json::to_value(&meta).map_err(|e| e.to_string())?,
            );
        }
        let object = cel::to_cel(&value);
        if let Some(w) = &u.while_ {
            match w.eval_bool(&object) {
                Ok(false) => return Ok(Vec::new()),
                Ok(true) => {}
                // An error counts the reference (holding is the safe side).
                Err(e) => tracing::debug!(rule = %self.rule, error = %e, "while"),
            }
        }
        let ns = obj.metadata.namespace.clone().unwrap_or_default();
        let refs = u.reference.eval_refs(&object, &ns).map_err(|e| {
            format!(
                "spec.users[{i}].reference on {}/{}: {e}",
                self.user_kinds[i].display(),
                obj.metadata.name.clone().unwrap_or_default()
            )
        })?;
        Ok(refs
            .into_iter()
            .map(|(ns, name)| {
                if self.protected.namespaced {
                    (ns, name)
                } else {
                    (String::new(), name)
                }
            })
            .collect())
    }

    /// One LIST of every user kind: the users of every protected object.
    /// A user whose reference fails to evaluate is kept as unresolved (it
    /// holds; freeing an object it may use is the unsafe side).
    ///
    /// With the rule's `index`, a user whose listed resourceVersion is the
    /// one the index computed its refs at reuses them (the same state gives
    /// the same answer) instead of evaluating the CEL again: at 20,000 pods
    /// that evaluation was most of a round.
    pub async fn live_round(&self, index: Option<&Mutex<Index>>) -> Result<LiveUsers, kube::Error> {
        let mut out = LiveUsers::default();
        for (i, kind) in self.user_kinds.iter().enumerate() {
            // A namespaced user names another namespace only through a
            // {namespace, name} reference: list all namespaces.
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.ar);
            // In pages, each dropped once read: one unpaged LIST of 20,000
            // pods held the whole body and every object at once (a peak
            // RSS of 723 MiB in `make bench-rules`).
            let mut page = ListParams::default().limit(LIVE_PAGE);
            loop {
                let list = api.list(&page).await?;
                let next = list.metadata.continue_.clone().filter(|c| !c.is_empty());
                self.collect_users(i, kind, list.items, index, &mut out);
                match next {
                    Some(c) => page = page.continue_token(&c),
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// Adds the users among `items` (of user entry `i`) to `out`.
    fn collect_users(
        &self,
        i: usize,
        kind: &Kind,
        items: Vec<DynamicObject>,
        index: Option<&Mutex<Index>>,
        out: &mut LiveUsers,
    ) {
        let key = |o: &DynamicObject| -> UserKey {
            (
                i,
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default(),
            )
        };
        // The index's answers first, under one lock; the CEL after it.
        let known: Vec<Option<Refs>> = match index {
            Some(ix) => {
                let ix = ix.lock();
                items
                    .iter()
                    .map(|o| {
                        let rv = o.metadata.resource_version.as_deref()?;
                        ix.refs_at(&key(o), rv)
                    })
                    .collect()
            }
            None => vec![None; items.len()],
        };
        for (o, known) in items.into_iter().zip(known) {
            let (_, namespace, name) = key(&o);
            let refs = known.unwrap_or_else(|| self.refs_of(i, &o));
            let user = |error: Option<String>| UserRef {
                resource: kind.display(),
                namespace: namespace.clone(),
                name: name.clone(),
                error,
            };
            match refs {
                Ok(keys) => {
                    for key in keys {
                        out.users.entry(key).or_default().push(user(None));
                    }
                }
                Err(e) => out.unresolved.push(user(Some(e))),
            }
        }
    }

    fn object_ref(&self, meta: &ObjectMeta) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.protected.ar.api_version.clone()),
            kind: Some(self.protected.ar.kind.clone()),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            ..Default::default()
        }
    }

    async fn send(&self, key: &ObjKey, patch: FinalizerPatch) -> Result<(), String> {
        let FinalizerPatch(p) = patch;
        let pp = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..Default::default()
        };
        match self
            .api(&key.0)
            .patch(&key.1, &pp, &Patch::Json::<()>(p))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(format!("{} {}: {e}", self.protected.display(), key.1)),
        }
    }
}

/// Starts the controller of one rule.
pub fn start(ctx: Arc<RuleCtx>, generation: i64, parent: &CancellationToken) -> Runner {
    let cancel = parent.child_token();
    let shared = Arc::new(Shared {
        index: Mutex::new(Index::new(
            ctx.user_kinds.iter().map(Kind::display).collect(),
        )),
        ..Default::default()
    });
    let (tx, rx) = mpsc::unbounded_channel::<Work>();
    let (synced_tx, synced) = watch::channel(false);
    let mut flags = Vec::new();

    // The protected kind: metadata only.
    let (ptx, prx) = watch::channel(false);
    flags.push(prx);
    tokio::spawn(watch_protected(
        ctx.clone(),
        shared.clone(),
        tx.clone(),
        ptx,
        cancel.clone(),
    ));
    for i in 0..ctx.users.len() {
        let (utx, urx) = watch::channel(false);
        flags.push(urx);
        tokio::spawn(watch_users(
            ctx.clone(),
            shared.clone(),
            i,
            tx.clone(),
            utx,
            cancel.clone(),
        ));
    }
    tokio::spawn(worker(
        ctx.clone(),
        shared.clone(),
        rx,
        tx,
        flags,
        synced_tx,
        cancel.clone(),
    ));
    Runner {
        generation,
        shared,
        ctx,
        cancel,
        synced,
    }
}

async fn watch_protected(
    ctx: Arc<RuleCtx>,
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Work>,
    synced: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> =
        Api::all_with(ctx.client.clone(), &ctx.protected.ar);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut init: Option<HashMap<ObjKey, ObjectMeta>> = None;
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        match ev {
            Ok(watcher::Event::Apply(o)) => {
                let mut m = o.metadata;
                m.managed_fields = None;
                let k = key_of(&m);
                shared.objects.lock().insert(k.clone(), m);
                let _ = tx.send(Work::Obj(k));
            }
            Ok(watcher::Event::Delete(o)) => {
                let k = key_of(&o.metadata);
                shared.objects.lock().remove(&k);
                let _ = tx.send(Work::Gone(k, Box::new(o.metadata)));
            }
            Ok(watcher::Event::Init) => init = Some(HashMap::new()),
            Ok(watcher::Event::InitApply(o)) => {
                let mut m = o.metadata;
                m.managed_fields = None;
                init.get_or_insert_with(HashMap::new).insert(key_of(&m), m);
            }
            Ok(watcher::Event::InitDone) => {
                let fresh = init.take().unwrap_or_default();
                let keys: Vec<ObjKey> = fresh.keys().cloned().collect();
                *shared.objects.lock() = fresh;
                for k in keys {
                    let _ = tx.send(Work::Obj(k));
                }
                synced.send_replace(true);
            }
            Err(e) => shared.error(format!("watching {}: {e}", ctx.protected.display())),
        }
    }
}

async fn watch_users(
    ctx: Arc<RuleCtx>,
    shared: Arc<Shared>,
    i: usize,
    tx: mpsc::UnboundedSender<Work>,
    synced: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let kind = &ctx.user_kinds[i];
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &kind.ar);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut init: Vec<(UserKey, Option<String>, Refs)> = Vec::new();
    let user_key = |o: &DynamicObject| -> UserKey {
        (
            i,
            o.metadata.namespace.clone().unwrap_or_default(),
            o.metadata.name.clone().unwrap_or_default(),
        )
    };
    let refs = |o: &DynamicObject| {
        let r = ctx.refs_of(i, o);
        if let Err(e) = &r {
            shared.error(format!(
                "{e} (the object holds everything in its scope until this is fixed)"
            ));
        }
        r
    };
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        let changed = match ev {
            Ok(watcher::Event::Apply(o)) => {
                let r = refs(&o);
                let rv = o.metadata.resource_version.clone();
                shared.index.lock().apply_at(user_key(&o), rv, r)
            }
            Ok(watcher::Event::Delete(o)) => shared.index.lock().delete(&user_key(&o)),
            Ok(watcher::Event::Init) => {
                init.clear();
                Changed::default()
            }
            Ok(watcher::Event::InitApply(o)) => {
                init.push((user_key(&o), o.metadata.resource_version.clone(), refs(&o)));
                Changed::default()
            }
            Ok(watcher::Event::InitDone) => {
                let all = std::mem::take(&mut init);
                let c = shared.index.lock().reset(i, all);
                synced.send_replace(true);
                c
            }
            Err(e) => {
                shared.error(format!("watching {}: {e}", kind.display()));
                Changed::default()
            }
        };
        let mut keys = changed.keys;
        if !changed.scopes.is_empty() {
            // An unresolved user came or went: every deletion in its scope
            // is decided again.
            let objects = shared.objects.lock();
            keys.extend(
                objects
                    .iter()
                    .filter(|(k, m)| {
                        is_deleting(m) && changed.scopes.iter().any(|ns| in_scope(ns, k))
                    })
                    .map(|(k, _)| k.clone()),
            );
        }
        for k in keys {
            let _ = tx.send(Work::Obj(k));
        }
    }
}

/// What the workers and the confirmer share.
struct Workers {
    ctx: Arc<RuleCtx>,
    shared: Arc<Shared>,
    finalizer: PhasedFinalizer,
    memory: EventMemory,
    backoff: Backoff,
    tx: mpsc::UnboundedSender<Work>,
    cancel: CancellationToken,
    /// Deletions handed to the confirmer since its last round.
    awaiting: Mutex<BTreeSet<ObjKey>>,
    confirm: Notify,
}

impl Workers {
    /// Logs `result` of work on `key`; a failure is retried after the key's
    /// next backoff delay.
    fn settle(&self, key: ObjKey, result: Result<(), String>) {
        let name = format!("{}/{}", key.0, key.1);
        match result {
            Ok(()) => self.backoff.forget(&name),
            Err(e) => {
                self.shared.error(e);
                let delay = self.backoff.next(&name);
                let tx = self.tx.clone();
                let cancel = self.cancel.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = tokio::time::sleep(delay) => { let _ = tx.send(Work::Obj(key)); }
                    }
                });
            }
        }
    }
}

/// Runs the rule's work: up to `concurrency` reconciles at once, never two
/// for one key (a key queued while it runs goes again after it), and the
/// confirmer.
async fn worker(
    ctx: Arc<RuleCtx>,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Work>,
    tx: mpsc::UnboundedSender<Work>,
    flags: Vec<watch::Receiver<bool>>,
    synced: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    for mut f in flags {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = f.wait_for(|v| *v) => if r.is_err() { return },
        }
    }
    synced.send_replace(true);
    tracing::info!(rule = %ctx.rule, protected = %ctx.protected.display(), mode = ?ctx.spec.mode, "rule synced");
    let limit = ctx.concurrency.max(1);
    let w = Arc::new(Workers {
        finalizer: ctx.finalizer(),
        ctx,
        shared,
        memory: EventMemory::default(),
        backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(60)),
        tx,
        cancel: cancel.clone(),
        awaiting: Mutex::new(BTreeSet::new()),
        confirm: Notify::new(),
    });
    tokio::spawn(confirmer(w.clone()));
    let mut queue: VecDeque<ObjKey> = VecDeque::new();
    let mut queued: HashSet<ObjKey> = HashSet::new();
    let mut active: HashSet<ObjKey> = HashSet::new();
    let mut again: HashSet<ObjKey> = HashSet::new();
    let mut running: JoinSet<()> = JoinSet::new();
    let mut tasks: HashMap<tokio::task::Id, ObjKey> = HashMap::new();
    loop {
        while running.len() < limit
            && let Some(key) = queue.pop_front()
        {
            queued.remove(&key);
            active.insert(key.clone());
            let w = w.clone();
            let k = key.clone();
            let task = running.spawn(async move {
                let r = reconcile(&w, &k).await;
                w.settle(k, r);
            });
            tasks.insert(task.id(), key);
        }
        let key = tokio::select! {
            _ = cancel.cancelled() => return,
            Some(done) = running.join_next_with_id(), if !running.is_empty() => {
                let id = match &done {
                    Ok((id, ())) => *id,
                    Err(e) => e.id(),
                };
                let Some(key) = tasks.remove(&id) else { continue };
                active.remove(&key);
                if let Err(e) = done {
                    // A panicked reconcile: retried like a failed one.
                    w.settle(key.clone(), Err(format!("reconcile of {}/{} failed: {e}", key.0, key.1)));
                }
                if !again.remove(&key) {
                    continue;
                }
                key
            }
            work = rx.recv() => match work {
                None => return,
                Some(Work::Gone(key, meta)) => {
                    let users = w.shared.index.lock().users_of(&key);
                    if let Plan::WouldHold(users) = decide_gone(w.ctx.spec.mode, &users) {
                        would_hold(&w.ctx, &w.shared, &w.memory, &meta, &users).await;
                    }
                    if let Some(uid) = &meta.uid {
                        w.memory.forget(uid);
                    }
                    continue;
                }
                Some(Work::Obj(key)) => key,
            },
        };
        if active.contains(&key) {
            again.insert(key);
        } else if queued.insert(key.clone()) {
            queue.push_back(key);
        }
    }
}

/// The confirmer: takes every deletion handed over since its last round,
/// checks each against the cache (one that gained a user, lost the
/// finalizer or went is dropped), then makes one round of live LISTs,
/// started after those checks, and decides each from it. A failed write
/// goes back to the queue with its backoff.
async fn confirmer(w: Arc<Workers>) {
    let round_backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = w.cancel.cancelled() => return,
            _ = w.confirm.notified() => {}
        }
        let keys = std::mem::take(&mut *w.awaiting.lock());
        let batch: Vec<(ObjKey, ObjectMeta, Vec<UserRef>)> = keys
            .iter()
            .filter_map(|key| {
                let (meta, cached, plan) = w.decide_cached(key)?;
                (plan == Plan::ConfirmLive).then(|| (key.clone(), meta, cached))
            })
            .collect();
        if batch.is_empty() {
            continue;
        }
        let live = tokio::select! {
            _ = w.cancel.cancelled() => return,
            r = w.ctx.live_round(Some(&w.shared.index)) => r,
        };
        let live = match live {
            Ok(l) => {
                round_backoff.forget("round");
                l
            }
            Err(e) => {
                w.shared.error(format!(
                    "confirming that {} {} unused: {e}",
                    batch.len(),
                    w.ctx.protected.display()
                ));
                w.awaiting.lock().extend(keys);
                tokio::select! {
                    _ = w.cancel.cancelled() => return,
                    _ = tokio::time::sleep(round_backoff.next("round")) => {}
                }
                w.confirm.notify_one();
                continue;
            }
        };
        tracing::debug!(rule = %w.ctx.rule, objects = batch.len(), "confirmed a batch with one round of live lists");
        let writes = futures::stream::iter(batch.into_iter().map(|(key, meta, cached)| {
            let w = w.clone();
            let users = live.of(&key);
            async move {
                let f = &w.finalizer;
                let c = &w.ctx;
                let plan = decide(
                    &meta,
                    f.name(),
                    c.spec.mode,
                    c.add_enabled,
                    &cached,
                    Some(&users),
                );
                let r = carry_out(&w, &key, &meta, plan).await;
                w.settle(key, r);
            }
        }))
        .buffer_unordered(w.ctx.concurrency.max(1));
        tokio::select! {
            _ = w.cancel.cancelled() => return,
            _ = writes.collect::<Vec<()>>() => {}
        }
    }
}

async fn would_hold(
    ctx: &RuleCtx,
    shared: &Shared,
    memory: &EventMemory,
    meta: &ObjectMeta,
    users: &[UserRef],
) {
    let note = format!(
        "rule {} (Audit) would hold this deletion: in use by {}",
        ctx.rule,
        describe(users)
    );
    let uid = meta.uid.clone().unwrap_or_default();
    if memory.held(&uid, &note) {
        shared.would_hold.fetch_add(1, Ordering::Relaxed);
        ctx.events
            .normal(&ctx.object_ref(meta), "WouldHold", "Audit", note)
            .await;
    }
}

impl Workers {
    /// The object's cached metadata, its users in the index, and the plan
    /// they give (`None`: the object is gone).
    fn decide_cached(&self, key: &ObjKey) -> Option<(ObjectMeta, Vec<UserRef>, Plan)> {
        let meta = self.shared.objects.lock().get(key).cloned()?;
        let cached = self.shared.index.lock().users_of(key);
        let c = &self.ctx;
        let plan = decide(
            &meta,
            self.finalizer.name(),
            c.spec.mode,
            c.add_enabled,
            &cached,
            None,
        );
        Some((meta, cached, plan))
    }
}

async fn reconcile(w: &Workers, key: &ObjKey) -> Result<(), String> {
    let Some((meta, _, plan)) = w.decide_cached(key) else {
        return Ok(());
    };
    if plan == Plan::ConfirmLive {
        // No user in the index: the confirmer decides, from a round of live
        // LISTs started after its own cache check; this worker is free.
        w.awaiting.lock().insert(key.clone());
        w.confirm.notify_one();
        return Ok(());
    }
    carry_out(w, key, &meta, plan).await
}

/// The write (and event) a plan asks for.
async fn carry_out(w: &Workers, key: &ObjKey, meta: &ObjectMeta, plan: Plan) -> Result<(), String> {
    let (ctx, memory) = (&w.ctx, &w.memory);
    let uid = meta.uid.clone().unwrap_or_default();
    match plan {
        Plan::AddFinalizer => {
            if let Some(p) = w.finalizer.add_patch(meta) {
                ctx.send(key, p).await?;
            }
        }
        Plan::RemoveFinalizer => {
            if let Some(p) = w.finalizer.remove_patch(meta) {
                ctx.send(key, p).await?;
                if memory.is_held(&uid) && is_deleting(meta) {
                    ctx.events
                        .normal(
                            &ctx.object_ref(meta),
                            "FinalizerReleased",
                            "Release",
                            format!("rule {}: no user refers to it any more", ctx.rule),
                        )
                        .await;
                }
                memory.forget(&uid);
            }
        }
        Plan::Keep(users) => {
            let note = format!(
                "rule {} holds this deletion: in use by {}",
                ctx.rule,
                describe(&users)
            );
            if memory.held(&uid, &note) {
                ctx.events
                    .normal(&ctx.object_ref(meta), "FinalizerHeld", "Hold", note)
                    .await;
            }
        }
        Plan::WouldHold(users) => would_hold(ctx, &w.shared, memory, meta, &users).await,
        Plan::ConfirmLive => {
            tracing::error!(rule = %ctx.rule, "a decision with live users asked for another confirmation; ignoring");
        }
        Plan::Nothing => {}
    }
    Ok(())
}

/// Removes `finalizer` from every object of `kind` (a deleted rule, or a
/// rule switched to Audit): one guarded patch per object that carries it.
pub async fn remove_everywhere(
    client: &kube::Client,
    kind: &Kind,
    finalizer: &str,
    field_manager: &str,
) -> Result<usize, String> {
    let f = PhasedFinalizer::new(finalizer, false)
        .map_err(|e| e.to_string())?
        .with_field_manager(field_manager);
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &kind.ar);
    let list = all
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| format!("listing {}: {e}", kind.display()))?;
    let pp = PatchParams {
        field_manager: Some(field_manager.to_string()),
        ..Default::default()
    };
    let mut n = 0;
    for o in list.items {
        let Some(FinalizerPatch(p)) = f.remove_patch(&o.metadata) else {
            continue;
        };
        let (ns, name) = key_of(&o.metadata);
        let api: Api<DynamicObject> = if kind.namespaced {
            Api::namespaced_with(client.clone(), &ns, &kind.ar)
        } else {
            Api::all_with(client.clone(), &kind.ar)
        };
        match api.patch(&name, &pp, &Patch::Json::<()>(p)).await {
            Ok(_) => n += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(format!(
                    "removing {finalizer} from {} {name}: {e}",
                    kind.display()
                ));
            }
        }
    }
    Ok(n)
}

/// The mode a runner was started with.
pub fn mode_of(r: &Runner) -> Mode {
    r.ctx.spec.mode
}

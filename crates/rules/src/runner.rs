//! One dynamic in-use controller per ProtectionRule: a metadata watch of the
//! protected kind, a full watch of each user kind feeding the [`Index`], and
//! one worker carrying out [`decide`]'s plans with core's runtime pieces
//! (the phased finalizer's guarded JSON patches, backoff, event memory).

use std::collections::HashMap;
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
use protection_core::finalizer::{
    FinalizerPatch, PatchStyle, PhasedFinalizer, has_finalizer, is_deleting,
};
use protection_core::runtime::{Backoff, EventMemory};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::cel;
use crate::decide::{Plan, UserRef, decide, decide_gone, describe};
use crate::index::{Index, ObjKey, UserKey};
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
    /// The live confirmations, batched (see [`LiveRounds`]).
    pub live: LiveRounds,
}

/// Live confirmations share LIST rounds: a confirmation takes a ticket,
/// and is answered by the first round that *started* after its ticket (so
/// its LISTs were sent after the caller read its cache, as one LIST per
/// confirmation would be), computed once for every protected object. One
/// round at a time; callers that queued behind a round are all answered by
/// the next one. At scale (1,000 Secrets released as 2,000 pods go, 20,000
/// pods) one cluster-wide LIST per confirmation took seconds each.
#[derive(Default)]
pub struct LiveRounds {
    tickets: std::sync::atomic::AtomicU64,
    one_at_a_time: tokio::sync::Mutex<()>,
    /// The last round: the ticket it started at, and its answers.
    last: Mutex<Option<(u64, Arc<LiveUsers>)>>,
}

/// The users of every protected object, from one round of LISTs.
type LiveUsers = HashMap<ObjKey, Vec<UserRef>>;

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
        PhasedFinalizer::new(
            &self.spec.finalizer,
            self.add_enabled,
            PatchStyle::JsonPatch,
        )
        .unwrap_or_else(|_| {
            PhasedFinalizer::new(
                "protection-manager.io/invalid",
                false,
                PatchStyle::JsonPatch,
            )
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
        let value = serde_json::to_value(obj).map_err(|e| e.to_string())?;
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

    /// Users of `key` in live LISTs of every user kind, from a round of
    /// LISTs started after this call (shared with concurrent callers).
    pub async fn live_users(&self, key: &ObjKey) -> Result<Vec<UserRef>, kube::Error> {
        use std::sync::atomic::Ordering;
        let ticket = self.live.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        let _round = self.live.one_at_a_time.lock().await;
        if let Some((started, users)) = &*self.live.last.lock()
            && *started >= ticket
        {
            return Ok(users.get(key).cloned().unwrap_or_default());
        }
        // Every ticket issued so far is served by this round: its LISTs go
        // out after this load.
        let started = self.live.tickets.load(Ordering::SeqCst);
        let users = Arc::new(self.live_round().await?);
        *self.live.last.lock() = Some((started, users.clone()));
        Ok(users.get(key).cloned().unwrap_or_default())
    }

    /// One LIST of every user kind: the users of every protected object.
    async fn live_round(&self) -> Result<LiveUsers, kube::Error> {
        let mut out = LiveUsers::new();
        for (i, kind) in self.user_kinds.iter().enumerate() {
            // A namespaced user names another namespace only through a
            // {namespace, name} reference: list all namespaces.
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.ar);
            let list = api.list(&ListParams::default()).await?;
            for o in list.items {
                for key in self.refs_of(i, &o).unwrap_or_default() {
                    out.entry(key).or_default().push(UserRef {
                        resource: kind.display(),
                        namespace: o.metadata.namespace.clone().unwrap_or_default(),
                        name: o.metadata.name.clone().unwrap_or_default(),
                    });
                }
            }
        }
        Ok(out)
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
        let FinalizerPatch::Json(p) = patch else {
            return Err("unexpected patch style".into());
        };
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
    let mut init: Vec<(UserKey, Vec<ObjKey>)> = Vec::new();
    let user_key = |o: &DynamicObject| -> UserKey {
        (
            i,
            o.metadata.namespace.clone().unwrap_or_default(),
            o.metadata.name.clone().unwrap_or_default(),
        )
    };
    let refs = |o: &DynamicObject| match ctx.refs_of(i, o) {
        Ok(r) => r,
        Err(e) => {
            shared.error(e);
            Vec::new()
        }
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
                shared.index.lock().apply(user_key(&o), r)
            }
            Ok(watcher::Event::Delete(o)) => shared.index.lock().delete(&user_key(&o)),
            Ok(watcher::Event::Init) => {
                init.clear();
                Vec::new()
            }
            Ok(watcher::Event::InitApply(o)) => {
                init.push((user_key(&o), refs(&o)));
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                let all = std::mem::take(&mut init);
                let c = shared.index.lock().reset(i, all);
                synced.send_replace(true);
                c
            }
            Err(e) => {
                shared.error(format!("watching {}: {e}", kind.display()));
                Vec::new()
            }
        };
        for k in changed {
            let _ = tx.send(Work::Obj(k));
        }
    }
}

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
    let finalizer = ctx.finalizer();
    let memory = EventMemory::default();
    let backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(60));
    loop {
        let work = tokio::select! {
            _ = cancel.cancelled() => return,
            w = rx.recv() => w,
        };
        let Some(work) = work else { return };
        let (key, result) = match work {
            Work::Gone(key, meta) => {
                let users = shared.index.lock().users_of(&key);
                if let Plan::WouldHold(users) = decide_gone(ctx.spec.mode, &users) {
                    would_hold(&ctx, &shared, &memory, &meta, &users).await;
                }
                if let Some(uid) = &meta.uid {
                    memory.forget(uid);
                }
                continue;
            }
            Work::Obj(key) => {
                let r = reconcile(&ctx, &shared, &finalizer, &memory, &key).await;
                (key, r)
            }
        };
        let name = format!("{}/{}", key.0, key.1);
        match result {
            Ok(()) => backoff.forget(&name),
            Err(e) => {
                shared.error(e);
                let delay = backoff.next(&name);
                let tx = tx.clone();
                let cancel = cancel.clone();
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

async fn reconcile(
    ctx: &RuleCtx,
    shared: &Shared,
    finalizer: &PhasedFinalizer,
    memory: &EventMemory,
    key: &ObjKey,
) -> Result<(), String> {
    let Some(meta) = shared.objects.lock().get(key).cloned() else {
        return Ok(());
    };
    let cached = shared.index.lock().users_of(key);
    let name = finalizer.name();
    let mode = ctx.spec.mode;
    let mut plan = decide(&meta, name, mode, ctx.add_enabled, &cached, None);
    if plan == Plan::ConfirmLive {
        let live = ctx.live_users(key).await.map_err(|e| {
            format!(
                "confirming users of {} {}: {e}",
                ctx.protected.display(),
                key.1
            )
        })?;
        plan = decide(&meta, name, mode, ctx.add_enabled, &cached, Some(&live));
    }
    let uid = meta.uid.clone().unwrap_or_default();
    match plan {
        Plan::AddFinalizer => {
            if let Some(p) = finalizer.add_patch(&meta) {
                ctx.send(key, p).await?;
            }
        }
        Plan::RemoveFinalizer => {
            if let Some(p) = finalizer.remove_patch(&meta) {
                ctx.send(key, p).await?;
                if memory.is_held(&uid) && is_deleting(&meta) {
                    ctx.events
                        .normal(
                            &ctx.object_ref(&meta),
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
                    .normal(&ctx.object_ref(&meta), "FinalizerHeld", "Hold", note)
                    .await;
            }
        }
        Plan::WouldHold(users) => would_hold(ctx, shared, memory, &meta, &users).await,
        Plan::ConfirmLive | Plan::Nothing => {}
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
    let f = PhasedFinalizer::new(finalizer, false, PatchStyle::JsonPatch)
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
        let Some(FinalizerPatch::Json(p)) = f.remove_patch(&o.metadata) else {
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

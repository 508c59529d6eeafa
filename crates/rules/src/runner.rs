//! One ProtectionRule as a rule on core's in-use engine
//! ([`protection_core::runtime::inuse`]): the protected kind is watched as
//! metadata, each user kind feeds the rule's [`Index`] (the CEL evaluated
//! before the index's lock is taken), and the engine does the rest as for
//! pv-, pvc- and vac-protection: the decision from the index, a deletion
//! with no user in the index confirmed by ONE round of paged live LISTs of
//! every user kind (cluster-wide: a user may name another namespace)
//! shared by every object waiting at the same time, the guarded finalizer
//! patch, the `FinalizerHeld`/`FinalizerReleased` events, retries with the
//! per-object backoff, and the controller's metrics (labelled
//! `controller="rules"`, each rule a part of them).
//!
//! The rule decides in [`crate::decide::decide`] (Enforce and Audit); the
//! engine writes. What is the rule's own: Audit mode (the filter of the
//! objects it looks at, the `WouldHold` report, also for an object whose
//! DELETED event is the first sign of its deletion), and the status counts
//! and last error it shares with the rules controller.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersion};
use kube::runtime::watcher;
use parking_lot::{Mutex, RwLock};
use protection_core::controllers::{ControllerContext, ReadySignal};
use protection_core::finalizer::{FinalizerPatch, PhasedFinalizer, has_finalizer, is_deleting};
use protection_core::runtime::inuse::{Engine, Fed, Plan, Rule};
use protection_core::runtime::{ReconcileError, Settings, list_pages};
use tokio_util::sync::CancellationToken;

use crate::cel;
use crate::decide::{UserRef, decide, decide_gone, describe};
use crate::index::{Index, ObjKey, Refs, UserKey, in_scope};
use crate::spec::{CompiledUser, Mode, RuleSpec};

/// What went wrong talking to the API server for a rule.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Discovery of a group version the rule names failed.
    #[error("discovery of {api_version}: {source}")]
    Discovery {
        api_version: String,
        #[source]
        source: kube::Error,
    },
    /// The group version is served, the resource (or kind) is not.
    #[error("{api_version} serves no {what}")]
    NotServed { api_version: String, what: String },
    /// A request failed: `what` names it ("listing secrets").
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A stored rule's spec does not parse.
    #[error("spec: {0}")]
    Spec(#[source] serde_json::Error),
    #[error(transparent)]
    Finalizer(#[from] protection_core::FinalizerError),
    /// A live round of the rule's users failed.
    #[error(transparent)]
    Live(#[from] ReconcileError),
}

/// Why a user's reference could not be evaluated (the user then holds
/// every protected object in its scope; see [`crate::index`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.users[{entry}].reference on {user}: {message}")]
pub struct RefError {
    /// The rule's user entry.
    pub entry: usize,
    /// `pods/name`: the user object.
    pub user: String,
    /// What the expression's evaluation said.
    pub message: String,
}

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
) -> Result<Kind, Error> {
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
) -> Result<Kind, Error> {
    let gv = GroupVersion::gv(group, version);
    let api_version = gv.api_version();
    let g = kube::discovery::pinned_group(client, &gv)
        .await
        .map_err(|source| Error::Discovery {
            api_version: api_version.clone(),
            source,
        })?;
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
        .ok_or_else(|| Error::NotServed {
            api_version,
            what: resource.or(kind).unwrap_or("resource").to_string(),
        })
}

/// What a rule knows about one rule, besides its spec.
pub struct RuleCtx {
    pub rule: String,
    pub client: kube::Client,
    pub spec: RuleSpec,
    pub users: Vec<CompiledUser>,
    pub protected: Kind,
    pub user_kinds: Vec<Kind>,
}

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
                .filter(|u| in_scope(&u.namespace, key))
                .cloned(),
        );
        out
    }
}

/// The protected object's key in the index: (namespace or "", name).
pub fn obj_key(meta: &ObjectMeta) -> ObjKey {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The store key of an index key (`name`, or `namespace/name`).
fn store_key((ns, name): &ObjKey) -> String {
    if ns.is_empty() {
        name.clone()
    } else {
        format!("{ns}/{name}")
    }
}

impl RuleCtx {
    /// The protected objects user entry `i` refers to through `obj`.
    pub fn refs_of(&self, i: usize, obj: &DynamicObject) -> Refs {
        let u = &self.users[i];
        let fail = |message: String| RefError {
            entry: i,
            user: format!(
                "{}/{}",
                self.user_kinds[i].display(),
                obj.metadata.name.clone().unwrap_or_default()
            ),
            message,
        };
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
            let meta = serde_json::to_value(&meta).map_err(|e| fail(e.to_string()))?;
            m.insert("metadata".into(), meta);
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
        let refs = u.reference.eval_refs(&object, &ns).map_err(fail)?;
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

    /// One LIST of every user kind, all namespaces (a namespaced user names
    /// another namespace only through a {namespace, name} reference), in
    /// pages each dropped once read: the users of every protected object.
    /// A user whose reference fails to evaluate is kept as unresolved (it
    /// holds; freeing an object it may use is the unsafe side).
    ///
    /// With the rule's `index`, a user whose listed resourceVersion is the
    /// one the index computed its refs at reuses them (the same state gives
    /// the same answer) instead of evaluating the CEL again: at 20,000 pods
    /// that evaluation was most of a round.
    pub async fn live_round(
        &self,
        index: Option<&RwLock<Index>>,
    ) -> Result<LiveUsers, ReconcileError> {
        let mut out = LiveUsers::default();
        for (i, kind) in self.user_kinds.iter().enumerate() {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.ar);
            list_pages(&api, &ListParams::default(), &kind.display(), |items| {
                self.collect_users(i, kind, items, index, &mut out)
            })
            .await?;
        }
        Ok(out)
    }

    /// Adds the users among `items` (of user entry `i`) to `out`.
    fn collect_users(
        &self,
        i: usize,
        kind: &Kind,
        items: Vec<DynamicObject>,
        index: Option<&RwLock<Index>>,
        out: &mut LiveUsers,
    ) {
        // The index's answers first, under one lock; the CEL after it.
        let known: Vec<Option<Refs>> = match index {
            Some(ix) => {
                let ix = ix.read();
                items
                    .iter()
                    .map(|o| {
                        let rv = o.metadata.resource_version.as_deref()?;
                        ix.refs_at(&user_key(i, o), rv)
                    })
                    .collect()
            }
            None => vec![None; items.len()],
        };
        for (o, known) in items.into_iter().zip(known) {
            let (_, namespace, name) = user_key(i, &o);
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
                Err(e) => out.unresolved.push(user(Some(e.to_string()))),
            }
        }
    }
}

fn user_key(i: usize, o: &DynamicObject) -> UserKey {
    (
        i,
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// What a running rule shares with the rules controller (its status).
#[derive(Debug, Default)]
pub struct RuleState {
    pub last_error: Mutex<Option<String>>,
    /// Audit: deletions that would have been held, since the rule started.
    pub would_hold: AtomicU64,
    /// Audit: the objects (uids) whose would-hold was counted.
    reported: Mutex<HashSet<String>>,
    /// Deny: the label and annotation `decide` found due (crate::deny).
    deny: crate::deny::Desired,
}

impl RuleState {
    fn error(&self, e: impl std::fmt::Display) {
        let e = e.to_string();
        tracing::warn!(error = %e, "rule");
        *self.last_error.lock() = Some(e);
    }

    /// Counts `uid`'s would-hold once.
    fn count_would_hold(&self, uid: &str) {
        if self.reported.lock().insert(uid.to_string()) {
            self.would_hold.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The rule on the engine: the protected kind's metadata, its users by the
/// rule's CEL.
pub struct ProtectionRule {
    ctx: Arc<RuleCtx>,
    state: Arc<RuleState>,
    dt: SharedResource,
}

/// The protected kind, as the engine caches it: metadata only.
pub type Protected = PartialObjectMeta<AnyKind>;

/// The protected kind's API resource, shared: every reference to a
/// protected object (the cache's keys, one per object; the controller
/// queue's, one per waiting object) carries its kind's, and an
/// [`ApiResource`] is five strings. At 10,000 protected Secrets those copies
/// were about a quarter of the manager's heap.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedResource(Arc<ApiResource>);

impl SharedResource {
    pub fn new(ar: ApiResource) -> Self {
        SharedResource(Arc::new(ar))
    }
}

/// The kind of a [`Protected`] object, known at run time by its
/// [`SharedResource`] (the metadata is all a rule reads of it).
#[derive(Clone, Debug)]
pub enum AnyKind {}

impl kube::Resource for AnyKind {
    type DynamicType = SharedResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &SharedResource) -> std::borrow::Cow<'_, str> {
        dt.0.kind.as_str().into()
    }
    fn group(dt: &SharedResource) -> std::borrow::Cow<'_, str> {
        dt.0.group.as_str().into()
    }
    fn version(dt: &SharedResource) -> std::borrow::Cow<'_, str> {
        dt.0.version.as_str().into()
    }
    fn api_version(dt: &SharedResource) -> std::borrow::Cow<'_, str> {
        dt.0.api_version.as_str().into()
    }
    fn plural(dt: &SharedResource) -> std::borrow::Cow<'_, str> {
        dt.0.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        match *self {}
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match *self {}
    }
}

/// Deny mode's hooks ([`crate::deny`]).
impl ProtectionRule {
    /// Records the label and annotation due on an object not being
    /// deleted: in Deny mode, from its users in the index; otherwise only
    /// the removal of what this rule wrote in Deny mode.
    fn deny_due(&self, obj: &Protected, cached: &[UserRef]) {
        let meta = &obj.metadata;
        let Some(uid) = meta.uid.as_deref() else {
            return;
        };
        if is_deleting(meta) {
            return;
        }
        let due = match self.ctx.spec.mode {
            Mode::Deny => (!cached.is_empty()).then(|| {
                crate::deny::in_use_by(
                    meta.namespace.as_deref().unwrap_or_default(),
                    cached,
                    &self.ctx.rule,
                    self.ctx.spec.reason.as_deref(),
                )
            }),
            _ if crate::deny::written_by(meta, &self.ctx.rule) => None,
            _ => return,
        };
        self.state.deny.set(uid, due);
    }

    /// Writes what [`Self::deny_due`] recorded, if it differs.
    async fn deny_write(
        &self,
        client: &kube::Client,
        obj: &Protected,
    ) -> Result<(), ReconcileError> {
        let meta = &obj.metadata;
        let Some(due) = meta.uid.as_deref().and_then(|u| self.state.deny.take(u)) else {
            return Ok(());
        };
        let Some(patch) = crate::deny::patch(meta, &self.ctx.rule, due.as_deref()) else {
            return Ok(());
        };
        let name = meta.name.clone().unwrap_or_default();
        let pp = PatchParams {
            field_manager: Some(crate::controller::FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self
            .api(client, obj)
            .patch(&name, &pp, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(ReconcileError::Write {
                what: format!(
                    "{} label of {} {name}",
                    crate::deny::IN_USE_LABEL,
                    self.ctx.protected.display()
                ),
                source,
            }),
        }
    }
}

impl Rule for ProtectionRule {
    type Object = Protected;
    type Use = UserRef;
    type Index = Index;
    type Live = LiveUsers;

    fn name(&self) -> &'static str {
        crate::controller::NAME
    }
    fn kind(&self) -> &'static str {
        "ProtectionRule"
    }
    fn unused(&self) -> &'static str {
        "no user refers to it any more"
    }
    fn api(&self, client: &kube::Client, obj: &Protected) -> Api<Protected> {
        let ar = &self.dt;
        match obj.metadata.namespace.as_deref() {
            Some(ns) if self.ctx.protected.namespaced => {
                Api::namespaced_with(client.clone(), ns, ar)
            }
            _ => Api::all_with(client.clone(), ar),
        }
    }
    fn scope(&self, _: &Protected) -> String {
        String::new()
    }
    fn cached_users(&self, index: &Index, obj: &Protected) -> Vec<UserRef> {
        index.users_of(&obj_key(&obj.metadata))
    }
    async fn list_live(
        &self,
        _: &kube::Client,
        _: &str,
        index: &RwLock<Index>,
    ) -> Result<LiveUsers, ReconcileError> {
        self.ctx.live_round(Some(index)).await
    }
    fn live_users(&self, live: &LiveUsers, obj: &Protected) -> Vec<UserRef> {
        live.of(&obj_key(&obj.metadata))
    }
    fn held_note(&self, _: &Protected, users: &[UserRef]) -> String {
        format!(
            "rule {} holds this deletion: in use by {}",
            self.ctx.rule,
            describe(users)
        )
    }
    fn released_note(&self, _: &Protected, _: &str) -> String {
        format!("rule {}: no user refers to it any more", self.ctx.rule)
    }
    fn wanted(&self, f: &PhasedFinalizer, obj: &Protected) -> bool {
        let meta = &obj.metadata;
        if crate::deny::written_by(meta, &self.ctx.rule) {
            // Its Deny-mode label goes once the rule is no longer Deny.
            return true;
        }
        match self.ctx.spec.mode {
            Mode::Enforce => f.needs_add(meta) || f.is_deletion_candidate(meta),
            // Every object: its label follows its users (crate::deny).
            Mode::Deny => true,
            // The finalizer an Enforce version left goes; a deletion is
            // looked at to report it.
            Mode::Audit => has_finalizer(meta, f.name()) || is_deleting(meta),
        }
    }
    fn decide(
        &self,
        f: &PhasedFinalizer,
        obj: &Protected,
        cached: &[UserRef],
        live: Option<&[UserRef]>,
    ) -> Plan<UserRef> {
        self.deny_due(obj, cached);
        decide(
            &obj.metadata,
            f.name(),
            self.ctx.spec.mode,
            f.add_enabled(),
            cached,
            live,
        )
    }
    async fn after(
        &self,
        client: &kube::Client,
        obj: &Protected,
        _: &Plan<UserRef>,
    ) -> Result<(), ReconcileError> {
        self.deny_write(client, obj).await
    }
    fn would_hold_note(&self, obj: &Protected, users: &[UserRef]) -> String {
        if let Some(uid) = &obj.metadata.uid {
            self.state.count_would_hold(uid);
        }
        would_hold_note(&self.ctx.rule, users)
    }
    fn gone(&self, obj: &Protected, cached: &[UserRef]) -> Option<String> {
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        // Reported while it was Terminating: not again.
        let reported = self.state.reported.lock().remove(&uid);
        match decide_gone(self.ctx.spec.mode, cached) {
            Plan::WouldHold(users) if !reported => {
                self.state.would_hold.fetch_add(1, Ordering::Relaxed);
                Some(would_hold_note(&self.ctx.rule, &users))
            }
            _ => None,
        }
    }
    fn failed(&self, error: &dyn std::fmt::Display) {
        self.state.error(error);
    }
}

fn would_hold_note(rule: &str, users: &[UserRef]) -> String {
    format!(
        "rule {rule} (Audit) would hold this deletion: in use by {}",
        describe(users)
    )
}

/// Counts for the status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub protected: u64,
    pub held_now: u64,
}

/// A running rule.
pub struct Runner {
    pub generation: i64,
    pub ctx: Arc<RuleCtx>,
    pub state: Arc<RuleState>,
    engine: Arc<Engine<ProtectionRule>>,
    cancel: CancellationToken,
    synced: ReadySignal,
}

impl Runner {
    pub fn stop(&self) {
        self.cancel.cancel();
    }

    /// Whether every watch of the rule has listed once.
    pub fn is_synced(&self) -> bool {
        self.synced.is_ready()
    }

    /// Objects carrying the rule's finalizer, and those of them held now.
    pub fn counts(&self) -> Counts {
        let f = self.engine.finalizer().name();
        let mut c = Counts::default();
        for o in self.engine.store().state() {
            if has_finalizer(&o.metadata, f) {
                c.protected += 1;
                if is_deleting(&o.metadata) && !self.engine.cached_users(&o).is_empty() {
                    c.held_now += 1;
                }
            }
        }
        c
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Starts the controller of one rule (as a part of the rules controller
/// `ctx`), writing `finalizer`; it stops with the runner or with `parent`.
pub fn start(
    ctx: &ControllerContext,
    rule: Arc<RuleCtx>,
    finalizer: PhasedFinalizer,
    generation: i64,
    parent: &CancellationToken,
) -> Runner {
    let cancel = parent.child_token();
    let synced = ReadySignal::new(None);
    let part = ControllerContext {
        metrics: ctx.metrics.scoped(&format!("{}@{generation}", rule.rule)),
        shutdown: cancel.clone(),
        ready: synced.clone(),
        ..ctx.clone()
    };
    let state = Arc::new(RuleState::default());
    let settings = Settings {
        finalizer: finalizer.name().to_string(),
        // Upstream has no resync for a user's rule to imitate; every
        // change reaches the rule through its watches.
        resync_period: Duration::ZERO,
    };
    let index = Index::new(rule.user_kinds.iter().map(Kind::display).collect());
    let dt = SharedResource::new(rule.protected.ar.clone());
    let engine = Engine::with_parts(
        &part,
        ProtectionRule {
            ctx: rule.clone(),
            state: state.clone(),
            dt: dt.clone(),
        },
        finalizer,
        settings,
        dt.clone(),
        index,
    );
    for (i, kind) in rule.user_kinds.iter().enumerate() {
        let api: Api<DynamicObject> = Api::all_with(rule.client.clone(), &kind.ar);
        engine.watch_users_with(
            api,
            watcher::Config::default(),
            kind.display(),
            feeder(i, rule.clone(), state.clone(), engine.store().clone()),
        );
    }
    let api: Api<Protected> = Api::all_with(rule.client.clone(), &dt);
    let run = engine.clone();
    tokio::spawn(async move {
        tracing::info!(rule = %run.rule().ctx.rule, protected = %run.rule().ctx.protected.display(), mode = ?run.rule().ctx.spec.mode, "rule started");
        let _ = run.run(&part, api).await;
    });
    Runner {
        generation,
        ctx: rule,
        state,
        engine,
        cancel,
        synced,
    }
}

/// Feeds user entry `i`'s watch events into the index: the CEL of each
/// user evaluated before the lock is taken, a re-list replacing the entry's
/// users at once. An unresolved user that comes or goes re-checks every
/// deletion in its scope.
fn feeder(
    i: usize,
    ctx: Arc<RuleCtx>,
    state: Arc<RuleState>,
    store: kube::runtime::reflector::Store<Protected>,
) -> impl FnMut(&RwLock<Index>, watcher::Event<DynamicObject>) -> Fed + Send + 'static {
    let mut init: Vec<(UserKey, Option<String>, Refs)> = Vec::new();
    move |index, ev| {
        let refs = |o: &DynamicObject| {
            let r = ctx.refs_of(i, o);
            if let Err(e) = &r {
                state.error(format_args!(
                    "{e} (the object holds everything in its scope until this is fixed)"
                ));
            }
            r
        };
        let mut listed = false;
        let changed = match ev {
            watcher::Event::Apply(o) => {
                let r = refs(&o);
                let rv = o.metadata.resource_version.clone();
                index.write().apply_at(user_key(i, &o), rv, r)
            }
            watcher::Event::Delete(o) => index.write().delete(&user_key(i, &o)),
            watcher::Event::Init => {
                init.clear();
                Default::default()
            }
            watcher::Event::InitApply(o) => {
                init.push((
                    user_key(i, &o),
                    o.metadata.resource_version.clone(),
                    refs(&o),
                ));
                Default::default()
            }
            watcher::Event::InitDone => {
                listed = true;
                index.write().reset(i, std::mem::take(&mut init))
            }
        };
        let mut recheck: BTreeSet<String> = changed.keys.iter().map(store_key).collect();
        if !changed.scopes.is_empty() {
            recheck.extend(
                store
                    .state()
                    .iter()
                    .filter(|o| is_deleting(&o.metadata))
                    .map(|o| obj_key(&o.metadata))
                    .filter(|k| changed.scopes.iter().any(|ns| in_scope(ns, k)))
                    .map(|k| store_key(&k)),
            );
        }
        Fed {
            recheck,
            listed,
            indexed: index.read().len(),
        }
    }
}

/// Removes `finalizer` from every object of `kind` (a deleted rule, or a
/// rule switched to Audit): one guarded patch per object that carries it.
pub async fn remove_everywhere(
    client: &kube::Client,
    kind: &Kind,
    finalizer: &str,
    field_manager: &str,
) -> Result<usize, Error> {
    let f = PhasedFinalizer::new(finalizer, false)?.with_field_manager(field_manager);
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &kind.ar);
    let list = all
        .list_metadata(&ListParams::default())
        .await
        .map_err(|source| Error::Api {
            what: format!("listing {}", kind.display()),
            source,
        })?;
    let pp = PatchParams {
        field_manager: Some(field_manager.to_string()),
        ..Default::default()
    };
    let mut n = 0;
    for o in list.items {
        let Some(FinalizerPatch(p)) = f.remove_patch(&o.metadata) else {
            continue;
        };
        let (ns, name) = obj_key(&o.metadata);
        let api: Api<DynamicObject> = if kind.namespaced {
            Api::namespaced_with(client.clone(), &ns, &kind.ar)
        } else {
            Api::all_with(client.clone(), &kind.ar)
        };
        match api.patch(&name, &pp, &Patch::Json::<()>(p)).await {
            Ok(_) => n += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(Error::Api {
                    what: format!("removing {finalizer} from {} {name}", kind.display()),
                    source,
                });
            }
        }
    }
    Ok(n)
}

/// The mode a runner was started with.
pub fn mode_of(r: &Runner) -> Mode {
    r.ctx.spec.mode
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use kube::api::{ObjectMeta, PostParams};
    use kube::core::PartialObjectMetaExt;
    use kube::runtime::reflector;
    use kube_sim::{KubeSim, SimConfig};
    use serde_json::json;

    const FIN: &str = "example.com/in-use";

    fn kind<K: kube::Resource<DynamicType = ()>>(namespaced: bool) -> Kind {
        Kind {
            ar: ApiResource::erase::<K>(&()),
            namespaced,
        }
    }

    /// A rule protecting secrets (namespaced or, as if they were not, cluster
    /// scoped) from the pods whose `spec.hostname` names them (any string
    /// field of a pod would do), while the
    /// pod's label `hold` is not "no".
    fn rule(client: kube::Client, namespaced: bool, mode: Mode) -> RuleCtx {
        let spec = json!({
            "protected": {"version": "v1", "resource": "secrets"},
            "users": [{
                "version": "v1",
                "resource": "pods",
                "reference": "object.spec.?hostname.orValue('')",
                "while": "object.metadata.?labels.?hold.orValue('yes') != 'no'",
            }],
            "finalizer": FIN,
            "mode": mode,
        });
        let (spec, users) = crate::spec::compile(&spec).expect("the test rule compiles");
        RuleCtx {
            rule: "r".into(),
            client,
            spec,
            users,
            protected: kind::<Secret>(namespaced),
            user_kinds: vec![kind::<Pod>(true)],
        }
    }

    /// A client for tests that never reach a server.
    fn offline() -> kube::Client {
        let url = "http://127.0.0.1:9".parse().expect("url");
        kube::Client::try_from(kube::Config::new(url)).expect("client")
    }

    /// A pod (as a user kind's watch serves it) naming `secret` in
    /// `spec.hostname` (the rule's CEL reads it as it is).
    fn pod(ns: &str, name: &str, rv: &str, secret: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": ns, "name": name, "resourceVersion": rv,
                         "uid": format!("uid-{name}")},
            "spec": {"hostname": secret},
        }))
        .expect("pod")
    }

    fn secret_meta(ns: &str, name: &str, deleting: bool) -> Protected {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{ns}-{name}")),
            finalizers: Some(vec![FIN.into()]),
            deletion_timestamp: deleting.then_some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            ),
            ..Default::default()
        }
        .into_response_partial()
    }

    fn key(ns: &str, name: &str) -> ObjKey {
        (ns.into(), name.into())
    }

    #[tokio::test]
    async fn a_users_reference_names_objects_in_its_namespace_or_the_cluster() {
        let r = rule(offline(), true, Mode::Enforce);
        assert_eq!(
            r.refs_of(0, &pod("a", "p", "1", json!("s"))),
            Ok(vec![key("a", "s")])
        );
        // `while` false: the user refers to nothing now.
        let mut quiet = pod("a", "q", "1", json!("s"));
        quiet.metadata.labels = Some([("hold".to_string(), "no".to_string())].into());
        assert_eq!(r.refs_of(0, &quiet), Ok(vec![]));
        // A cluster-scoped protected kind drops the user's namespace.
        let r = rule(offline(), false, Mode::Enforce);
        assert_eq!(
            r.refs_of(0, &pod("a", "p", "1", json!("s"))),
            Ok(vec![key("", "s")])
        );
    }

    #[tokio::test]
    async fn a_reference_that_fails_names_the_entry_the_user_and_why() {
        let r = rule(offline(), true, Mode::Enforce);
        let e = r
            .refs_of(0, &pod("a", "p", "1", json!(7)))
            .expect_err("an int is not a reference");
        assert_eq!((e.entry, e.user.as_str()), (0, "pods/p"));
        assert!(e.message.contains("got int"), "{e}");
        assert!(
            e.to_string()
                .starts_with("spec.users[0].reference on pods/p: "),
            "{e}"
        );
    }

    #[test]
    fn a_live_unresolved_user_holds_only_what_its_namespace_may_name() {
        let user = |ns: &str, name: &str, error: Option<&str>| UserRef {
            resource: "pods".into(),
            namespace: ns.into(),
            name: name.into(),
            error: error.map(Into::into),
        };
        let live = LiveUsers {
            users: [(key("a", "s"), vec![user("a", "p", None)])].into(),
            unresolved: vec![
                user("a", "bad", Some("boom")),
                user("", "node-wide", Some("x")),
            ],
        };
        let names =
            |k: ObjKey| -> Vec<String> { live.of(&k).into_iter().map(|u| u.name).collect() };
        assert_eq!(names(key("a", "s")), ["p", "bad", "node-wide"]);
        assert_eq!(names(key("b", "s")), ["node-wide"]);
        assert_eq!(names(key("", "cluster-wide")), ["bad", "node-wide"]);
    }

    #[tokio::test]
    async fn a_live_round_reuses_the_index_answer_for_an_unchanged_user() {
        let r = rule(offline(), true, Mode::Enforce);
        let ix = RwLock::new(Index::new(vec!["pods".into()]));
        // The index computed p's refs at resourceVersion 5 (deliberately not
        // what the CEL says, so reuse is visible).
        ix.write().apply_at(
            (0, "a".into(), "p".into()),
            Some("5".into()),
            Ok(vec![key("a", "cached")]),
        );
        let kind = kind::<Pod>(true);
        let mut out = LiveUsers::default();
        let items = vec![
            pod("a", "p", "5", json!("from-cel")),
            pod("a", "q", "2", json!("from-cel")),
            pod("a", "bad", "1", json!(1)),
        ];
        r.collect_users(0, &kind, items.clone(), Some(&ix), &mut out);
        let names = |out: &LiveUsers, k: ObjKey| -> Vec<String> {
            out.of(&k)
                .into_iter()
                .filter(|u| u.error.is_none())
                .map(|u| u.name)
                .collect()
        };
        assert_eq!(names(&out, key("a", "cached")), ["p"]);
        assert_eq!(names(&out, key("a", "from-cel")), ["q"]);
        assert_eq!(out.unresolved.len(), 1, "{out:?}");
        assert!(
            out.unresolved[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("got int"))
        );
        // At another version (or without an index) the CEL decides.
        let mut fresh = LiveUsers::default();
        r.collect_users(0, &kind, items, None, &mut fresh);
        assert_eq!(names(&fresh, key("a", "from-cel")), ["p", "q"]);
        assert!(names(&fresh, key("a", "cached")).is_empty());
    }

    /// A feeder, its index and its rule's state.
    type Fixture<F> = (F, RwLock<Index>, Arc<RuleState>);

    fn feeder_for(
        r: RuleCtx,
        protected: &[Protected],
    ) -> Fixture<impl FnMut(&RwLock<Index>, watcher::Event<DynamicObject>) -> Fed> {
        let mut w =
            reflector::store::Writer::<Protected>::new(SharedResource::new(r.protected.ar.clone()));
        for o in protected {
            w.apply_watcher_event(&watcher::Event::Apply(o.clone()));
        }
        let state = Arc::new(RuleState::default());
        let f = feeder(0, Arc::new(r), state.clone(), w.as_reader());
        (f, RwLock::new(Index::new(vec!["pods".into()])), state)
    }

    fn rechecked(f: &Fed) -> Vec<&str> {
        f.recheck.iter().map(String::as_str).collect()
    }

    #[tokio::test]
    async fn the_feeder_rechecks_what_a_user_came_to_or_left() {
        let (mut feed, ix, _) = feeder_for(rule(offline(), true, Mode::Enforce), &[]);
        // A list: done only at InitDone, which says so.
        assert!(!feed(&ix, watcher::Event::Init).listed);
        let f = feed(
            &ix,
            watcher::Event::InitApply(pod("a", "p", "1", json!("s"))),
        );
        assert!(!f.listed && f.recheck.is_empty());
        let f = feed(&ix, watcher::Event::InitDone);
        assert!(f.listed);
        assert_eq!(rechecked(&f), ["a/s"]);
        assert_eq!(f.indexed, 1);
        // The pod moves to another secret: both are re-checked.
        let f = feed(&ix, watcher::Event::Apply(pod("a", "p", "2", json!("t"))));
        assert_eq!(rechecked(&f), ["a/s", "a/t"]);
        assert!(!f.listed);
        // A re-list without it: what it used is re-checked, nothing indexed.
        feed(&ix, watcher::Event::Init);
        let f = feed(&ix, watcher::Event::InitDone);
        assert_eq!((rechecked(&f), f.listed, f.indexed), (vec!["a/t"], true, 0));
        assert!(ix.read().users_of(&key("a", "t")).is_empty());
    }

    #[tokio::test]
    async fn an_unresolved_user_rechecks_every_deletion_in_its_namespace_and_is_reported() {
        let protected = [
            secret_meta("a", "deleting", true),
            secret_meta("a", "alive", false),
            secret_meta("b", "deleting", true),
        ];
        let (mut feed, ix, state) = feeder_for(rule(offline(), true, Mode::Enforce), &protected);
        let f = feed(&ix, watcher::Event::Apply(pod("a", "bad", "1", json!(1))));
        assert_eq!(rechecked(&f), ["a/deleting"]);
        let err = state
            .last_error
            .lock()
            .clone()
            .expect("the status names the error");
        assert!(err.contains("spec.users[0].reference on pods/bad"), "{err}");
        assert!(err.contains("holds everything in its scope"), "{err}");
        // Fixed: the namespace's deletions are looked at again.
        let f = feed(
            &ix,
            watcher::Event::Apply(pod("a", "bad", "2", json!("alive"))),
        );
        assert_eq!(rechecked(&f), ["a/alive", "a/deleting"]);
    }

    fn protection_rule(mode: Mode) -> (ProtectionRule, Arc<RuleState>) {
        let state = Arc::new(RuleState::default());
        let ctx = rule(offline(), true, mode);
        let r = ProtectionRule {
            dt: SharedResource::new(ctx.protected.ar.clone()),
            ctx: Arc::new(ctx),
            state: state.clone(),
        };
        (r, state)
    }

    #[tokio::test]
    async fn audit_looks_at_deletions_and_leftover_finalizers_enforce_at_what_needs_a_step() {
        let f = PhasedFinalizer::new(FIN, true).expect("finalizer");
        let bare = |deleting: bool| {
            let mut m = secret_meta("a", "s", deleting);
            m.metadata.finalizers = None;
            m
        };
        let (enforce, _) = protection_rule(Mode::Enforce);
        let (audit, _) = protection_rule(Mode::Audit);
        // (object, enforce wants it, audit wants it)
        let rows = [
            (bare(false), true, false),
            (bare(true), false, true),
            (secret_meta("a", "s", false), false, true),
            (secret_meta("a", "s", true), true, true),
        ];
        for (i, (o, e, a)) in rows.into_iter().enumerate() {
            assert_eq!(enforce.wanted(&f, &o), e, "row {i} enforce");
            assert_eq!(audit.wanted(&f, &o), a, "row {i} audit");
        }
    }

    #[tokio::test]
    async fn audit_counts_and_reports_a_would_hold_once_per_object() {
        let (audit, state) = protection_rule(Mode::Audit);
        let users = vec![UserRef {
            resource: "pods".into(),
            namespace: "a".into(),
            name: "p".into(),
            error: None,
        }];
        let s = secret_meta("a", "s", true);
        let note = audit.would_hold_note(&s, &users);
        assert_eq!(
            note,
            "rule r (Audit) would hold this deletion: in use by pods/p in a"
        );
        audit.would_hold_note(&s, &users);
        assert_eq!(state.would_hold.load(Ordering::Relaxed), 1);
        // Gone after it was reported while Terminating: not again.
        assert_eq!(audit.gone(&s, &users), None);
        assert_eq!(state.would_hold.load(Ordering::Relaxed), 1);
        // Gone at once (its DELETED event the first sign): reported then.
        let t = secret_meta("a", "t", false);
        assert_eq!(audit.gone(&t, &users), Some(note));
        assert_eq!(state.would_hold.load(Ordering::Relaxed), 2);
        assert_eq!(audit.gone(&t, &[]), None, "no user: nothing to report");
        let (enforce, state) = protection_rule(Mode::Enforce);
        assert_eq!(enforce.gone(&t, &users), None);
        assert_eq!(state.would_hold.load(Ordering::Relaxed), 0);
    }

    async fn sim() -> (KubeSim, kube::Client) {
        let sim = KubeSim::start(SimConfig::default())
            .await
            .expect("start kube-sim");
        let client = sim.client().await;
        (sim, client)
    }

    async fn create_secret(c: &kube::Client, ns: &str, name: &str, finalizers: &[&str]) {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "finalizers": finalizers},
        }))
        .expect("secret");
        Api::<Secret>::namespaced(c.clone(), ns)
            .create(&PostParams::default(), &s)
            .await
            .expect("create secret");
    }

    #[tokio::test]
    async fn removing_a_rules_finalizer_everywhere_leaves_other_finalizers() {
        let (_sim, c) = sim().await;
        create_secret(&c, "default", "mine", &[FIN]).await;
        create_secret(&c, "default", "both", &[FIN, "example.com/other"]).await;
        create_secret(&c, "default", "other", &["example.com/other"]).await;
        create_secret(&c, "default", "none", &[]).await;
        let n = remove_everywhere(&c, &kind::<Secret>(true), FIN, "test")
            .await
            .expect("remove");
        assert_eq!(n, 2);
        let api = Api::<Secret>::namespaced(c.clone(), "default");
        for (name, want) in [
            ("mine", vec![]),
            ("both", vec!["example.com/other".to_string()]),
            ("other", vec!["example.com/other".to_string()]),
            ("none", vec![]),
        ] {
            let got = api
                .get(name)
                .await
                .expect("get")
                .metadata
                .finalizers
                .unwrap_or_default();
            assert_eq!(got, want, "{name}");
        }
        // Nothing left to do: nothing written.
        let n = remove_everywhere(&c, &kind::<Secret>(true), FIN, "test")
            .await
            .expect("remove again");
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn a_live_round_lists_every_namespace_and_a_failed_list_names_the_kind() {
        let (_sim, c) = sim().await;
        let pods =
            |ns: &str| Api::<DynamicObject>::namespaced_with(c.clone(), ns, &kind::<Pod>(true).ar);
        for (ns, name, secret) in [("default", "p", "s"), ("kube-system", "q", "s")] {
            let mut p = pod(ns, name, "", json!(secret));
            p.metadata.resource_version = None;
            p.metadata.uid = None;
            p.data["spec"]["containers"] = json!([{"name": "c", "image": "i"}]);
            pods(ns)
                .create(&PostParams::default(), &p)
                .await
                .expect("create pod");
        }
        let r = rule(c.clone(), true, Mode::Enforce);
        let live = r.live_round(None).await.expect("live round");
        let names =
            |k: ObjKey| -> Vec<String> { live.of(&k).into_iter().map(|u| u.name).collect() };
        assert_eq!(names(key("default", "s")), ["p"]);
        assert_eq!(names(key("kube-system", "s")), ["q"]);
        let broken = rule(offline(), true, Mode::Enforce);
        let e = broken.live_round(None).await.expect_err("no server");
        assert!(e.to_string().contains("pods"), "{e}");
    }
}

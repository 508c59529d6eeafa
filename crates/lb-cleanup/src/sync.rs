//! Carrying out a [`Plan`](crate::decide::Plan): upstream's
//! `processServiceCreateOrUpdate`, `syncLoadBalancerIfNeeded`,
//! `processServiceDeletion` and the node sync, against three narrow
//! interfaces (the load-balancer provider, a `services/status` writer and an
//! event sink) so that the same code runs in the controller and, with fakes,
//! in the upstream-derived table tests below.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use protection_core::runtime::executor::REASON_FIGHT;
use protection_core::runtime::fight::{Fights, Verdict, describe_other, other_writer};
use protection_core::runtime::object_key;
use serde_json::Value;

use crate::decide::{CleanupPlan, EnsurePlan, NodeSet, Op, Plan, Policy, decide};
use crate::predicates::wants_load_balancer;
use crate::provider::{
    LbNode, LbRef, LbSpec, LoadBalancerProvider, ProviderError, SpecError, same_node_set,
};

/// Event reasons, exactly upstream's (docs/upstream-semantics.md §5.9).
pub mod reasons {
    pub const ENSURING_LOAD_BALANCER: &str = "EnsuringLoadBalancer";
    pub const ENSURED_LOAD_BALANCER: &str = "EnsuredLoadBalancer";
    pub const DELETING_LOAD_BALANCER: &str = "DeletingLoadBalancer";
    pub const DELETED_LOAD_BALANCER: &str = "DeletedLoadBalancer";
    pub const UPDATED_LOAD_BALANCER: &str = "UpdatedLoadBalancer";
    pub const UNAVAILABLE_LOAD_BALANCER: &str = "UnAvailableLoadBalancer";
    pub const SYNC_LOAD_BALANCER_FAILED: &str = "SyncLoadBalancerFailed";
    pub const DELETE_LOAD_BALANCER_FAILED: &str = "DeleteLoadBalancerFailed";
    pub const UPDATE_LOAD_BALANCER_FAILED: &str = "UpdateLoadBalancerFailed";
}

/// The step a sync was at; also the `action` of its events (events.k8s.io
/// requires one), so that a failing step has its own event series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    AddFinalizer,
    EnsureLoadBalancer,
    GetLoadBalancer,
    DeleteLoadBalancer,
    RemoveFinalizer,
    UpdateStatus,
    UpdateLoadBalancerHosts,
}

impl Step {
    pub fn action(self) -> &'static str {
        match self {
            Step::AddFinalizer => "AddFinalizer",
            Step::EnsureLoadBalancer => "EnsureLoadBalancer",
            Step::GetLoadBalancer => "GetLoadBalancer",
            Step::DeleteLoadBalancer => "DeleteLoadBalancer",
            Step::RemoveFinalizer => "RemoveFinalizer",
            Step::UpdateStatus => "UpdateStatus",
            Step::UpdateLoadBalancerHosts => "UpdateLoadBalancerHosts",
        }
    }
}

/// One event to publish about a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

impl LbEvent {
    fn normal(reason: &'static str, step: Step, note: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason,
            action: step.action(),
            note: note.into(),
        }
    }

    fn warning(reason: &'static str, step: Step, note: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason,
            action: step.action(),
            note: note.into(),
        }
    }
}

/// Where events go.
#[async_trait]
pub trait EventSink: Send + Sync {
    async fn publish(&self, regarding: &ObjectReference, event: LbEvent);
}

/// A failed `services/status` write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// 409/422: the Service changed under us (e.g. recreated with a new UID,
    /// which the patch's `metadata.uid` precondition catches).
    #[error("the Service changed: {0}")]
    Stale(String),
    #[error("{0}")]
    Api(String),
}

/// Writes Service status (and metadata) through `services/status`.
#[async_trait]
pub trait ServiceWriter: Send + Sync {
    /// Sends a strategic merge patch to `services/status`. `Ok(None)` when
    /// the Service does not exist (404).
    async fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<Option<Service>, WriteError>;

    /// The Service's metadata as the server has it now, managedFields
    /// included (to name the other side of a fight); `None` if it cannot be
    /// read.
    async fn live_metadata(&self, _namespace: &str, _name: &str) -> Option<ObjectMeta> {
        None
    }
}

/// What went wrong in a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    Provider(ProviderError),
    Write(WriteError),
    Spec(SpecError),
    /// Another writer keeps undoing our finalizer write: the write waits.
    Fight(Fight),
}

/// A finalizer write held back because another writer keeps undoing it
/// (`protection_core::runtime::fight`): removing it from a Service that has
/// a load balancer, or re-adding it after the load balancer was deleted.
/// Only the write (and the sync it belongs to) waits: nothing is released
/// that the load balancer still needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fight {
    /// How long until the write may be made.
    pub wait: std::time::Duration,
    /// A new back-off (counted in
    /// `protection_manager_finalizer_fight_backoffs_total`), rather than
    /// one still running.
    pub new_backoff: bool,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Provider(e) => e.fmt(f),
            Cause::Write(e) => e.fmt(f),
            Cause::Spec(e) => e.fmt(f),
            Cause::Fight(x) => write!(
                f,
                "another writer keeps undoing it; writing it again in {:?}",
                x.wait
            ),
        }
    }
}

/// A sync that failed at `step`. Its text is upstream's error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncError {
    pub step: Step,
    pub cause: Cause,
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.step {
            Step::GetLoadBalancer => "failed to check if load balancer exists before cleanup",
            Step::DeleteLoadBalancer => "failed to delete load balancer",
            Step::RemoveFinalizer => "failed to remove load balancer cleanup finalizer",
            Step::AddFinalizer => "failed to add load balancer cleanup finalizer",
            Step::EnsureLoadBalancer => "failed to ensure load balancer",
            Step::UpdateStatus => "failed to update load balancer status",
            Step::UpdateLoadBalancerHosts => "failed to update load balancer hosts",
        };
        write!(f, "{what}: {}", self.cause)
    }
}

impl std::error::Error for SyncError {}

impl SyncError {
    fn provider(step: Step, e: ProviderError) -> Self {
        Self {
            step,
            cause: Cause::Provider(e),
        }
    }

    fn write(step: Step, e: WriteError) -> Self {
        Self {
            step,
            cause: Cause::Write(e),
        }
    }

    /// The exact delay the provider asked for (upstream `api.RetryError`).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match &self.cause {
            Cause::Provider(e) => e.retry_after(),
            Cause::Fight(f) => Some(f.wait),
            _ => None,
        }
    }

    /// A new fight back-off (to count).
    pub fn is_new_fight_backoff(&self) -> bool {
        matches!(self.cause, Cause::Fight(f) if f.new_backoff)
    }
}

/// What a successful sync did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub op: Option<Op>,
    /// Patches sent to `services/status`.
    pub writes: u32,
    /// The Service as the last successful write returned it.
    pub latest: Option<Service>,
    pub finalizer_added: bool,
    pub finalizer_removed: bool,
    /// The Service disappeared during the sync (a write answered 404).
    pub gone: bool,
}

/// The controller's memory of a Service it synced (upstream's
/// `serviceCache`): enough to delete its load balancer if the Service
/// vanishes without a cleanup (no finalizer: add gate off, or someone
/// removed it).
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    pub uid: String,
    pub lb: LbRef,
    /// Whether it wanted a load balancer when last synced.
    pub wants: bool,
    pub regarding: ObjectReference,
}

/// The reference events are attached to. No resourceVersion, so that
/// repeated failures of an unchanged Service form one event series.
pub fn regarding(svc: &Service) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: svc.metadata.namespace.clone(),
        name: svc.metadata.name.clone(),
        uid: svc.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// Upstream `maxNodeNamesToLog`.
const MAX_NODE_NAMES_TO_LOG: usize = 50;

/// Upstream `loggableNodeNames`, printed as Go prints a `[]string`.
fn loggable_node_names(nodes: &[LbNode]) -> String {
    let mut names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    names.sort();
    if names.len() > MAX_NODE_NAMES_TO_LOG {
        let skipped = names.len() - MAX_NODE_NAMES_TO_LOG;
        names.truncate(MAX_NODE_NAMES_TO_LOG);
        names.push(format!("<{skipped} more>"));
    }
    format!("[{}]", names.join(" "))
}

/// Serialises calls per key (a Service UID): the contract promises a
/// provider never two concurrent calls for one load balancer, and the
/// controller's Service syncs, node sync and deletion path share it.
#[derive(Debug, Default)]
pub struct KeyLocks {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds a key's lock; releases (and forgets an unused key) on drop.
pub struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl KeyLocks {
    pub async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let m = self
            .map
            .lock()
            .entry(key.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone();
        let guard = m.lock_owned().await;
        KeyGuard {
            locks: self,
            key: key.to_owned(),
            guard: Some(guard),
        }
    }

    /// Keys currently locked or awaited.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.map.lock();
        if let Some(m) = map.get(&self.key)
            && Arc::strong_count(m) == 1
        {
            map.remove(&self.key);
        }
    }
}

/// Whether a node sync of one Service needs a full sync later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeSync {
    /// Nothing to do, or done.
    Done,
    /// The hosts update failed: sync the Service again (upstream re-adds its
    /// key to the service queue).
    Retry,
}

/// Everything a sync needs, shared by the controller's tasks.
pub struct Syncer {
    pub policy: Policy,
    pub provider: Arc<dyn LoadBalancerProvider>,
    pub writer: Arc<dyn ServiceWriter>,
    pub events: Arc<dyn EventSink>,
    /// Upstream `serviceCache`, by `namespace/name`.
    cache: Mutex<HashMap<String, Cached>>,
    /// Upstream `lastSyncedNodes`, by `namespace/name`.
    last_synced_nodes: Mutex<HashMap<String, NodeSet>>,
    /// First failure of the current run of failures, by `namespace/name`.
    failing_since: Mutex<HashMap<String, jiff::Timestamp>>,
    /// Per-UID serialisation of provider calls.
    pub locks: KeyLocks,
    /// Fights over our finalizer, per Service UID and direction.
    fights: Fights,
}

impl fmt::Debug for Syncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Syncer")
            .field("policy", &self.policy)
            .field("provider", &self.provider.name())
            .finish_non_exhaustive()
    }
}

impl Syncer {
    pub fn new(
        policy: Policy,
        provider: Arc<dyn LoadBalancerProvider>,
        writer: Arc<dyn ServiceWriter>,
        events: Arc<dyn EventSink>,
    ) -> Self {
        Self {
            policy,
            provider,
            writer,
            events,
            cache: Mutex::new(HashMap::new()),
            last_synced_nodes: Mutex::new(HashMap::new()),
            failing_since: Mutex::new(HashMap::new()),
            locks: KeyLocks::default(),
            fights: Fights::default(),
        }
    }

    async fn event(&self, regarding: &ObjectReference, ev: LbEvent) {
        self.events.publish(regarding, ev).await;
    }

    /// The cached entry of `key`.
    pub fn cached(&self, key: &str) -> Option<Cached> {
        self.cache.lock().get(key).cloned()
    }

    /// Every cached entry.
    pub fn cached_all(&self) -> Vec<(String, Cached)> {
        self.cache
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The node set last sent for `key`.
    pub fn last_synced_nodes(&self, key: &str) -> Option<NodeSet> {
        self.last_synced_nodes.lock().get(key).cloned()
    }

    /// When the current run of failures of `key` began.
    pub fn failing_since(&self, key: &str) -> Option<jiff::Timestamp> {
        self.failing_since.lock().get(key).copied()
    }

    fn forget(&self, key: &str) {
        self.cache.lock().remove(key);
        self.last_synced_nodes.lock().remove(key);
    }

    /// Upstream `processServiceCreateOrUpdate` + `syncLoadBalancerIfNeeded`
    /// for a Service found in the cache of the API: deletes the load balancer
    /// of an older Service of the same name first, then decides and carries
    /// out the plan; a failure is reported as a `SyncLoadBalancerFailed`
    /// warning whose note keeps the first failure's time.
    pub async fn process_service(
        &self,
        svc: &Service,
        nodes: impl Into<NodeSet>,
    ) -> Result<Outcome, SyncError> {
        let key = object_key(svc);
        let plan = match decide(svc, &self.policy, nodes) {
            Ok(p) => p,
            Err(e) => {
                // Only a Service without namespace, name or uid: nothing the
                // API server serves. Report it rather than panic.
                let err = SyncError {
                    step: Step::EnsureLoadBalancer,
                    cause: Cause::Spec(e),
                };
                self.report_failure(&key, &regarding(svc), &err).await;
                return Err(err);
            }
        };
        // Deleted and recreated under the same name while it had no
        // finalizer: its load balancer is keyed by the old UID.
        let older = self.cached(&key).filter(|c| c.uid != plan.lb().uid);
        if let Some(older) = older {
            self.process_load_balancer_delete(&key, &older)
                .await
                .map_err(|e| SyncError::provider(Step::DeleteLoadBalancer, e))?;
        }
        self.cache.lock().insert(
            key.clone(),
            Cached {
                uid: plan.lb().uid.clone(),
                lb: plan.lb().clone(),
                wants: wants_load_balancer(svc, &self.policy.classes),
                regarding: regarding(svc),
            },
        );
        let reference = regarding(svc);
        let uid = plan.lb().uid.as_str();
        // A Service being deleted cannot get a finalizer back (the API
        // server refuses new ones): its removal is no fight, and never waits.
        let finalizer_step = finalizer_write(&plan).filter(|s| {
            !(*s == Step::RemoveFinalizer && svc.metadata.deletion_timestamp.is_some())
        });
        if let Some(step) = finalizer_step {
            self.before_finalizer_write(svc, &reference, step).await?;
        }
        let _guard = self.locks.lock(uid).await;
        let res = match &plan {
            Plan::Ensure(p) => self.ensure(&key, svc, &reference, p).await,
            Plan::Cleanup(p) => self.cleanup(svc, &reference, p).await,
        };
        if let Some(step) = finalizer_step {
            // Only writes made count toward a fight, not retries of a sync
            // that failed before its write (the add is an ensure's first
            // step, the removal a cleanup's last).
            let wrote = match &res {
                Ok(o) => o.finalizer_added || (o.finalizer_removed && !o.gone),
                Err(e) => step == Step::AddFinalizer && e.step != Step::AddFinalizer,
            };
            if !wrote {
                self.fights.not_written(&fight_key(step, uid));
            }
        }
        match res {
            Ok(outcome) => {
                self.failing_since.lock().remove(&key);
                // A write the other way ends a run of writes one way: a
                // Service switched LoadBalancer → ClusterIP → LoadBalancer
                // is no fight.
                if outcome.finalizer_added || outcome.gone {
                    self.fights.forget(&fight_key(Step::RemoveFinalizer, uid));
                }
                if outcome.finalizer_removed || outcome.gone {
                    self.fights.forget(&fight_key(Step::AddFinalizer, uid));
                }
                if outcome.op == Some(Op::Delete) {
                    // Only forget after a successful deletion (upstream).
                    self.forget(&key);
                }
                Ok(outcome)
            }
            Err(e) => {
                self.report_failure(&key, &reference, &e).await;
                Err(e)
            }
        }
    }

    /// Counts a finalizer write (`step`) about to be made to `svc` and
    /// holds it back (an error asking for the wait) when another writer
    /// keeps undoing it; the first back-off of a fight is reported once, as
    /// a Warning naming the other field manager.
    async fn before_finalizer_write(
        &self,
        svc: &Service,
        reference: &ObjectReference,
        step: Step,
    ) -> Result<(), SyncError> {
        let uid = svc.metadata.uid.as_deref().unwrap_or_default();
        let fight = match self.fights.before_write(&fight_key(step, uid)) {
            Verdict::Write => return Ok(()),
            Verdict::Waiting { wait } => Fight {
                wait,
                new_backoff: false,
            },
            Verdict::BackOff { wait, started } => {
                if started {
                    self.report_fight(svc, reference, step, wait).await;
                }
                Fight {
                    wait,
                    new_backoff: true,
                }
            }
        };
        Err(SyncError {
            step,
            cause: Cause::Fight(fight),
        })
    }

    /// The one Warning of a fight, naming the other writer (one metadata
    /// GET: the cache keeps no managedFields).
    async fn report_fight(
        &self,
        svc: &Service,
        reference: &ObjectReference,
        step: Step,
        wait: std::time::Duration,
    ) {
        let (ns, name) = names(svc);
        let other = self
            .writer
            .live_metadata(ns, name)
            .await
            .and_then(|m| other_writer(&m, crate::controller::FIELD_MANAGER));
        let who = describe_other(other);
        let f = &self.policy.finalizer;
        let note = if step == Step::RemoveFinalizer {
            format!(
                "{who} keeps re-adding finalizer {f} after the load balancer was deleted: removing it only after {wait:?}, then backing off further while the re-adds go on"
            )
        } else {
            format!(
                "{who} keeps removing finalizer {f}: re-adding it only after {wait:?}, then backing off further while the removals go on (if the Service is deleted meanwhile, its load balancer is still deleted)"
            )
        };
        tracing::warn!(service = %object_key(svc), "{note}");
        self.event(reference, LbEvent::warning(REASON_FIGHT, step, note))
            .await;
    }

    async fn report_failure(&self, key: &str, reference: &ObjectReference, e: &SyncError) {
        let since = *self
            .failing_since
            .lock()
            .entry(key.to_owned())
            .or_insert_with(jiff::Timestamp::now);
        self.event(
            reference,
            LbEvent::warning(
                reasons::SYNC_LOAD_BALANCER_FAILED,
                e.step,
                format!(
                    "Error syncing load balancer: {e} (failing since {})",
                    since.round(jiff::Unit::Second).unwrap_or(since)
                ),
            ),
        )
        .await;
    }

    async fn ensure(
        &self,
        key: &str,
        svc: &Service,
        reference: &ObjectReference,
        p: &EnsurePlan,
    ) -> Result<Outcome, SyncError> {
        let mut out = Outcome {
            op: Some(Op::Ensure),
            ..Outcome::default()
        };
        let (ns, name) = names(svc);
        tracing::debug!(service = %key, "ensuring load balancer");
        self.event(
            reference,
            LbEvent::normal(
                reasons::ENSURING_LOAD_BALANCER,
                Step::EnsureLoadBalancer,
                "Ensuring load balancer",
            ),
        )
        .await;
        // The finalizer goes on before anything is created.
        if let Some(body) = &p.add_finalizer {
            tracing::debug!(service = %key, "adding finalizer");
            match self.writer.patch_status(ns, name, body).await {
                Ok(Some(s)) => {
                    out.writes += 1;
                    out.finalizer_added = true;
                    out.latest = Some(s);
                }
                Ok(None) => {
                    // Gone: nothing to ensure. If a load balancer was made
                    // earlier, the deletion path removes it.
                    out.gone = true;
                    return Ok(out);
                }
                Err(e) => return Err(SyncError::write(Step::AddFinalizer, e)),
            }
        }
        if p.no_nodes() {
            self.event(
                reference,
                LbEvent::warning(
                    reasons::UNAVAILABLE_LOAD_BALANCER,
                    Step::EnsureLoadBalancer,
                    "There are no available nodes for LoadBalancer",
                ),
            )
            .await;
        }
        self.last_synced_nodes
            .lock()
            .insert(key.to_owned(), p.nodes.clone());
        let spec = p.spec.as_ref().map_err(|e| SyncError {
            step: Step::EnsureLoadBalancer,
            cause: Cause::Spec(e.clone()),
        })?;
        let status = match self.provider.ensure(&p.lb, spec, &p.nodes).await {
            Ok(s) => s,
            Err(ProviderError::ImplementedElsewhere) => {
                tracing::debug!(service = %key, "load balancer implemented by another controller; ignoring");
                return Ok(out);
            }
            Err(e) => return Err(SyncError::provider(Step::EnsureLoadBalancer, e)),
        };
        self.event(
            reference,
            LbEvent::normal(
                reasons::ENSURED_LOAD_BALANCER,
                Step::EnsureLoadBalancer,
                "Ensured load balancer",
            ),
        )
        .await;
        if let Some(body) = p.status_write(&status) {
            tracing::debug!(service = %key, "patching status");
            match self.writer.patch_status(ns, name, &body).await {
                Ok(Some(s)) => {
                    out.writes += 1;
                    out.latest = Some(s);
                }
                // Upstream ignores NotFound on the status write.
                Ok(None) => out.gone = true,
                Err(e) => return Err(SyncError::write(Step::UpdateStatus, e)),
            }
        }
        Ok(out)
    }

    async fn cleanup(
        &self,
        svc: &Service,
        reference: &ObjectReference,
        p: &CleanupPlan,
    ) -> Result<Outcome, SyncError> {
        let mut out = Outcome {
            op: Some(Op::Delete),
            ..Outcome::default()
        };
        let (ns, name) = names(svc);
        let exists = self
            .provider
            .get(&p.lb)
            .await
            .map_err(|e| SyncError::provider(Step::GetLoadBalancer, e))?
            .is_some();
        if exists {
            tracing::debug!(service = %p.lb.key(), "deleting existing load balancer");
            self.event(
                reference,
                LbEvent::normal(
                    reasons::DELETING_LOAD_BALANCER,
                    Step::DeleteLoadBalancer,
                    "Deleting load balancer",
                ),
            )
            .await;
            match self.provider.ensure_deleted(&p.lb).await {
                Ok(()) => {}
                Err(ProviderError::ImplementedElsewhere) => {
                    tracing::debug!(service = %p.lb.key(), "load balancer implemented by another controller; ignoring error on deletion");
                }
                Err(e) => return Err(SyncError::provider(Step::DeleteLoadBalancer, e)),
            }
        }
        if let Some(w) = &p.final_write {
            let step = if w.removes_finalizer {
                Step::RemoveFinalizer
            } else {
                Step::UpdateStatus
            };
            match self.writer.patch_status(ns, name, &w.body).await {
                Ok(Some(s)) => {
                    out.writes += 1;
                    out.finalizer_removed = w.removes_finalizer;
                    out.latest = Some(s);
                }
                // The Service went away (typically: our finalizer was the
                // last one). The load balancer is gone; that is success.
                Ok(None) => {
                    out.gone = true;
                    out.finalizer_removed = w.removes_finalizer;
                }
                Err(e) => return Err(SyncError::write(step, e)),
            }
        }
        self.event(
            reference,
            LbEvent::normal(
                reasons::DELETED_LOAD_BALANCER,
                Step::DeleteLoadBalancer,
                "Deleted load balancer",
            ),
        )
        .await;
        Ok(out)
    }

    /// Upstream `processLoadBalancerDelete` for a cached Service that is no
    /// longer in the API (or was replaced by another UID).
    async fn process_load_balancer_delete(
        &self,
        key: &str,
        cached: &Cached,
    ) -> Result<(), ProviderError> {
        if !cached.wants {
            self.cache_remove_if(key, &cached.uid);
            return Ok(());
        }
        let _guard = self.locks.lock(&cached.uid).await;
        // Whoever held the lock before us may have finished the job (a
        // cleanup that completed just as the Service vanished).
        if self
            .cache
            .lock()
            .get(key)
            .is_none_or(|c| c.uid != cached.uid)
        {
            return Ok(());
        }
        self.event(
            &cached.regarding,
            LbEvent::normal(
                reasons::DELETING_LOAD_BALANCER,
                Step::DeleteLoadBalancer,
                "Deleting load balancer",
            ),
        )
        .await;
        if let Err(e) = self.provider.ensure_deleted(&cached.lb).await {
            self.event(
                &cached.regarding,
                LbEvent::warning(
                    reasons::DELETE_LOAD_BALANCER_FAILED,
                    Step::DeleteLoadBalancer,
                    format!("Error deleting load balancer: {e}"),
                ),
            )
            .await;
            return Err(e);
        }
        self.event(
            &cached.regarding,
            LbEvent::normal(
                reasons::DELETED_LOAD_BALANCER,
                Step::DeleteLoadBalancer,
                "Deleted load balancer",
            ),
        )
        .await;
        self.cache_remove_if(key, &cached.uid);
        Ok(())
    }

    fn cache_remove_if(&self, key: &str, uid: &str) {
        let mut c = self.cache.lock();
        if c.get(key).is_some_and(|x| x.uid == uid) {
            c.remove(key);
            self.last_synced_nodes.lock().remove(key);
        }
    }

    /// Upstream `processServiceDeletion`: the Service `key` with `uid` is
    /// gone from the API. If it was cached (synced without a completed
    /// cleanup), delete its load balancer. `Ok(false)` when there was
    /// nothing to do.
    pub async fn process_service_deletion(
        &self,
        key: &str,
        uid: &str,
    ) -> Result<bool, ProviderError> {
        let Some(cached) = self.cached(key).filter(|c| c.uid == uid) else {
            return Ok(false);
        };
        tracing::info!(service = %key, %uid, "service has been deleted; attempting to clean up load balancer resources");
        self.process_load_balancer_delete(key, &cached).await?;
        Ok(true)
    }

    /// Upstream `nodeSyncService`: for a Service that wants a load balancer,
    /// compares the stable node set with the one last sent and, when the
    /// names or providerIDs differ, updates the load balancer's hosts. The
    /// new set is stored before the call, as upstream does (a failure is
    /// retried by a full sync, which sends the set again).
    pub async fn node_sync_service(&self, svc: &Service, nodes: impl Into<NodeSet>) -> NodeSync {
        if !wants_load_balancer(svc, &self.policy.classes) {
            return NodeSync::Done;
        }
        let nodes: NodeSet = nodes.into();
        let key = object_key(svc);
        let old = self
            .last_synced_nodes
            .lock()
            .insert(key.clone(), nodes.clone())
            .unwrap_or_default();
        if same_node_set(&old, &nodes) {
            return NodeSync::Done;
        }
        let (lb, spec) = match (LbRef::from_service(svc), LbSpec::from_service(svc)) {
            (Ok(lb), Ok(spec)) => (lb, spec),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(service = %key, error = %e, "cannot update load balancer hosts");
                return NodeSync::Retry;
            }
        };
        let reference = regarding(svc);
        let _guard = self.locks.lock(&lb.uid).await;
        tracing::info!(service = %key, nodes = nodes.len(), names = %loggable_node_names(&nodes), "updating backends for load balancer");
        match self.provider.update_hosts(&lb, &spec, &nodes).await {
            Ok(()) => {
                let ev = if nodes.is_empty() {
                    LbEvent::warning(
                        reasons::UNAVAILABLE_LOAD_BALANCER,
                        Step::UpdateLoadBalancerHosts,
                        "There are no available nodes for LoadBalancer",
                    )
                } else {
                    LbEvent::normal(
                        reasons::UPDATED_LOAD_BALANCER,
                        Step::UpdateLoadBalancerHosts,
                        "Updated load balancer with new hosts",
                    )
                };
                self.event(&reference, ev).await;
                NodeSync::Done
            }
            Err(ProviderError::ImplementedElsewhere) => NodeSync::Done,
            Err(e) => {
                // Only an error if the load balancer still exists.
                match self.provider.get(&lb).await {
                    Ok(None) => return NodeSync::Done,
                    Ok(Some(_)) => {}
                    Err(ge) => {
                        tracing::warn!(service = %key, error = %ge, "failed to check if load balancer exists");
                    }
                }
                self.event(
                    &reference,
                    LbEvent::warning(
                        reasons::UPDATE_LOAD_BALANCER_FAILED,
                        Step::UpdateLoadBalancerHosts,
                        format!(
                            "Error updating load balancer with new hosts {} [node names limited, total number of nodes: {}], error: {e}",
                            loggable_node_names(&nodes),
                            nodes.len()
                        ),
                    ),
                )
                .await;
                NodeSync::Retry
            }
        }
    }
}

/// The finalizer write `plan` makes, if any.
fn finalizer_write(plan: &Plan) -> Option<Step> {
    match plan {
        Plan::Ensure(p) if p.add_finalizer.is_some() => Some(Step::AddFinalizer),
        Plan::Cleanup(p) if p.final_write.as_ref().is_some_and(|w| w.removes_finalizer) => {
            Some(Step::RemoveFinalizer)
        }
        _ => None,
    }
}

/// Adds and removals are counted apart: a fight is a run of writes one way.
fn fight_key(step: Step, uid: &str) -> String {
    format!("{}/{uid}", step.action())
}

fn names(svc: &Service) -> (&str, &str) {
    (
        svc.metadata.namespace.as_deref().unwrap_or(""),
        svc.metadata.name.as_deref().unwrap_or(""),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::predicates::ClassSelector;
    use crate::provider::{LbIngress, LbStatus};
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServicePort, ServiceSpec, ServiceStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde_json::json;
    use std::collections::VecDeque;
    use std::time::Duration;

    pub const F: &str = "service.kubernetes.io/load-balancer-cleanup";
    pub const CLASS: &str = "protection-manager.io/load-balancer";

    /// Records provider calls; answers from a script, else from its state.
    #[derive(Default)]
    pub struct FakeProvider {
        pub calls: Mutex<Vec<String>>,
        pub exists: Mutex<bool>,
        pub fail: Mutex<HashMap<&'static str, VecDeque<ProviderError>>>,
    }

    impl FakeProvider {
        pub fn existing(exists: bool) -> Self {
            let f = Self::default();
            *f.exists.lock() = exists;
            f
        }

        pub fn fail_next(&self, op: &'static str, e: ProviderError) {
            self.fail.lock().entry(op).or_default().push_back(e);
        }

        pub fn calls(&self) -> Vec<String> {
            self.calls.lock().clone()
        }

        fn call(&self, op: &'static str) -> Result<(), ProviderError> {
            self.calls.lock().push(op.to_owned());
            match self.fail.lock().get_mut(op).and_then(VecDeque::pop_front) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
    }

    pub fn ip_status(ip: &str) -> LbStatus {
        LbStatus {
            ingress: vec![LbIngress {
                ip: Some(ip.parse().unwrap()),
                hostname: None,
                ip_mode: Some("VIP".into()),
            }],
        }
    }

    #[async_trait]
    impl LoadBalancerProvider for FakeProvider {
        fn name(&self) -> &str {
            "fake"
        }
        async fn get(&self, _: &LbRef) -> Result<Option<LbStatus>, ProviderError> {
            self.call("get")?;
            Ok(self.exists.lock().then(|| ip_status("203.0.113.1")))
        }
        async fn ensure(
            &self,
            _: &LbRef,
            _: &LbSpec,
            _: &[LbNode],
        ) -> Result<LbStatus, ProviderError> {
            self.call("create")?;
            *self.exists.lock() = true;
            Ok(ip_status("203.0.113.1"))
        }
        async fn update_hosts(
            &self,
            _: &LbRef,
            _: &LbSpec,
            _: &[LbNode],
        ) -> Result<(), ProviderError> {
            self.call("hosts")
        }
        async fn ensure_deleted(&self, _: &LbRef) -> Result<(), ProviderError> {
            self.call("delete")?;
            *self.exists.lock() = false;
            Ok(())
        }
    }

    /// Records patches; answers with the Service it was given, or 404/error
    /// from a script.
    #[derive(Default)]
    pub struct FakeWriter {
        pub patches: Mutex<Vec<Value>>,
        pub answers: Mutex<VecDeque<Result<Option<Service>, WriteError>>>,
        /// What `live_metadata` answers.
        pub live: Mutex<Option<ObjectMeta>>,
    }

    #[async_trait]
    impl ServiceWriter for FakeWriter {
        async fn patch_status(
            &self,
            ns: &str,
            name: &str,
            body: &Value,
        ) -> Result<Option<Service>, WriteError> {
            self.patches.lock().push(body.clone());
            if let Some(a) = self.answers.lock().pop_front() {
                return a;
            }
            let mut s = Service::default();
            s.metadata.namespace = Some(ns.into());
            s.metadata.name = Some(name.into());
            Ok(Some(s))
        }

        async fn live_metadata(&self, _: &str, _: &str) -> Option<ObjectMeta> {
            self.live.lock().clone()
        }
    }

    #[derive(Default)]
    pub struct FakeEvents(pub Mutex<Vec<(String, LbEvent)>>);

    #[async_trait]
    impl EventSink for FakeEvents {
        async fn publish(&self, r: &ObjectReference, e: LbEvent) {
            self.0.lock().push((r.uid.clone().unwrap_or_default(), e));
        }
    }

    impl FakeEvents {
        pub fn reasons(&self) -> Vec<&'static str> {
            self.0.lock().iter().map(|(_, e)| e.reason).collect()
        }
    }

    pub struct Env {
        pub provider: Arc<FakeProvider>,
        pub writer: Arc<FakeWriter>,
        pub events: Arc<FakeEvents>,
        pub syncer: Syncer,
    }

    pub fn env_with(provider: FakeProvider, add_finalizer: bool) -> Env {
        let provider = Arc::new(provider);
        let writer = Arc::new(FakeWriter::default());
        let events = Arc::new(FakeEvents::default());
        let syncer = Syncer::new(
            Policy {
                classes: ClassSelector {
                    class: CLASS.into(),
                    include_unclassed: false,
                },
                finalizer: F.into(),
                add_finalizer,
            },
            provider.clone(),
            writer.clone(),
            events.clone(),
        );
        Env {
            provider,
            writer,
            events,
            syncer,
        }
    }

    pub fn svc(name: &str, type_: &str, protocol: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: (type_ == "LoadBalancer").then(|| CLASS.to_owned()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    protocol: Some(protocol.into()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn finalized(mut s: Service) -> Service {
        s.metadata.finalizers = Some(vec![F.into()]);
        s
    }

    fn ingress(mut s: Service, ip: &str) -> Service {
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some(ip.into()),
                    ..LoadBalancerIngress::default()
                }]),
            }),
            conditions: None,
        });
        s
    }

    fn deleting(mut s: Service) -> Service {
        s.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        s
    }

    fn node(name: &str) -> LbNode {
        LbNode {
            name: name.into(),
            provider_id: format!("sim://{name}"),
            addresses: vec![],
        }
    }

    fn has_finalizer_patch(p: &Value) -> bool {
        p.pointer("/metadata/finalizers").is_some()
            || p.pointer("/metadata/$deleteFromPrimitiveList~1finalizers")
                .is_some()
    }

    fn has_status_patch(p: &Value) -> bool {
        p.get("status").is_some()
    }

    /// Upstream `TestSyncLoadBalancerIfNeeded` (docs/upstream-semantics.md §5.13), run end to end
    /// against a fake provider and writer: op, cloud calls, status patch,
    /// finalizer patch. Where upstream counts two patches for a cleanup we
    /// send one that does both (see `decide`), so the table lists the
    /// *contents* of the patches and their count separately.
    #[tokio::test]
    async fn sync_load_balancer_if_needed_table() {
        let class = {
            let mut s = svc("with-external-balancer", "LoadBalancer", "TCP");
            if let Some(sp) = s.spec.as_mut() {
                sp.load_balancer_class = Some("custom-loadbalancer".into());
            }
            s
        };
        struct Row {
            desc: &'static str,
            service: Service,
            lb_exists: bool,
            op: Op,
            create: bool,
            delete: bool,
            status_patch: bool,
            finalizer_patch: bool,
            patches: usize,
        }
        let rows = vec![
            Row {
                desc: "service doesn't want LB",
                service: svc("no-external-balancer", "ClusterIP", "TCP"),
                lb_exists: false,
                op: Op::Delete,
                create: false,
                delete: false,
                status_patch: false,
                finalizer_patch: false,
                patches: 0,
            },
            Row {
                desc: "udp service that wants LB",
                service: svc("udp-service", "LoadBalancer", "UDP"),
                lb_exists: false,
                op: Op::Ensure,
                create: true,
                delete: false,
                status_patch: true,
                finalizer_patch: true,
                patches: 2,
            },
            Row {
                desc: "tcp service that wants LB",
                service: svc("basic-service1", "LoadBalancer", "TCP"),
                lb_exists: false,
                op: Op::Ensure,
                create: true,
                delete: false,
                status_patch: true,
                finalizer_patch: true,
                patches: 2,
            },
            Row {
                desc: "sctp service that wants LB",
                service: svc("sctp-service", "LoadBalancer", "SCTP"),
                lb_exists: false,
                op: Op::Ensure,
                create: true,
                delete: false,
                status_patch: true,
                finalizer_patch: true,
                patches: 2,
            },
            Row {
                desc: "service specifies loadBalancerClass",
                service: class,
                lb_exists: false,
                op: Op::Delete,
                create: false,
                delete: false,
                status_patch: false,
                finalizer_patch: false,
                patches: 0,
            },
            Row {
                desc: "service with finalizer that no longer wants LB",
                service: ingress(
                    finalized(svc("no-external-balancer", "ClusterIP", "TCP")),
                    "8.8.8.8",
                ),
                lb_exists: true,
                op: Op::Delete,
                create: false,
                delete: true,
                status_patch: true,
                finalizer_patch: true,
                patches: 1,
            },
            Row {
                desc: "service that needs cleanup",
                service: deleting(ingress(
                    finalized(svc("basic-service1", "LoadBalancer", "TCP")),
                    "8.8.8.8",
                )),
                lb_exists: true,
                op: Op::Delete,
                create: false,
                delete: true,
                status_patch: true,
                finalizer_patch: true,
                patches: 1,
            },
            Row {
                desc: "service with finalizer that wants LB",
                service: finalized(svc("basic-service1", "LoadBalancer", "TCP")),
                lb_exists: false,
                op: Op::Ensure,
                create: true,
                delete: false,
                status_patch: true,
                finalizer_patch: false,
                patches: 1,
            },
        ];
        for r in rows {
            let env = env_with(FakeProvider::existing(r.lb_exists), true);
            let out = env
                .syncer
                .process_service(&r.service, vec![node("node1")])
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", r.desc));
            assert_eq!(out.op, Some(r.op), "{}", r.desc);
            let calls = env.provider.calls();
            assert_eq!(
                calls.contains(&"create".to_owned()),
                r.create,
                "{}: {calls:?}",
                r.desc
            );
            assert_eq!(
                calls.contains(&"delete".to_owned()),
                r.delete,
                "{}: {calls:?}",
                r.desc
            );
            let patches = env.writer.patches.lock().clone();
            assert_eq!(patches.len(), r.patches, "{}: {patches:?}", r.desc);
            assert_eq!(out.writes as usize, r.patches, "{}", r.desc);
            assert_eq!(
                patches.iter().any(has_status_patch),
                r.status_patch,
                "{}",
                r.desc
            );
            assert_eq!(
                patches.iter().any(has_finalizer_patch),
                r.finalizer_patch,
                "{}",
                r.desc
            );
            if r.create {
                assert!(
                    *env.provider.exists.lock(),
                    "{}: load balancer created",
                    r.desc
                );
            }
            if r.delete {
                assert!(
                    !*env.provider.exists.lock(),
                    "{}: load balancer deleted",
                    r.desc
                );
            }
        }
    }

    #[tokio::test]
    async fn ensure_order_and_events_follow_upstream() {
        let env = env_with(FakeProvider::default(), true);
        let s = svc("web", "LoadBalancer", "TCP");
        env.syncer
            .process_service(&s, vec![node("a")])
            .await
            .unwrap();
        let patches = env.writer.patches.lock().clone();
        // Finalizer first, then status: the finalizer lands before create.
        assert_eq!(
            patches[0],
            json!({"metadata": {"uid": "uid-web", "finalizers": [F]}})
        );
        assert_eq!(
            patches[1],
            json!({"metadata": {"uid": "uid-web"}, "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1", "ipMode": "VIP"}]}}})
        );
        assert_eq!(env.provider.calls(), ["create"]);
        assert_eq!(
            env.events.reasons(),
            ["EnsuringLoadBalancer", "EnsuredLoadBalancer"]
        );
        assert_eq!(
            *env.syncer.last_synced_nodes("default/web").unwrap(),
            [node("a")]
        );
        assert!(env.syncer.cached("default/web").is_some());
    }

    #[tokio::test]
    async fn a_sync_that_finds_everything_in_place_writes_nothing() {
        let env = env_with(FakeProvider::existing(true), true);
        let mut s = finalized(svc("web", "LoadBalancer", "TCP"));
        s.status = Some(ServiceStatus {
            load_balancer: Some(ip_status("203.0.113.1").to_k8s()),
            conditions: None,
        });
        let out = env
            .syncer
            .process_service(&s, vec![node("a")])
            .await
            .unwrap();
        assert_eq!(out.writes, 0);
        assert!(env.writer.patches.lock().is_empty());
    }

    #[tokio::test]
    async fn cleanup_events_and_single_patch() {
        let env = env_with(FakeProvider::existing(true), true);
        let s = deleting(ingress(
            finalized(svc("web", "LoadBalancer", "TCP")),
            "8.8.8.8",
        ));
        env.syncer.process_service(&s, vec![]).await.unwrap();
        assert_eq!(env.provider.calls(), ["get", "delete"]);
        assert_eq!(
            env.events.reasons(),
            ["DeletingLoadBalancer", "DeletedLoadBalancer"]
        );
        assert_eq!(env.writer.patches.lock().len(), 1);
        // Forgotten after a successful delete.
        assert!(env.syncer.cached("default/web").is_none());

        // No load balancer: no delete call, still DeletedLoadBalancer (HEAD).
        let env = env_with(FakeProvider::existing(false), true);
        let s = finalized(svc("web", "ClusterIP", "TCP"));
        env.syncer.process_service(&s, vec![]).await.unwrap();
        assert_eq!(env.provider.calls(), ["get"]);
        assert_eq!(env.events.reasons(), ["DeletedLoadBalancer"]);
    }

    #[tokio::test]
    async fn cleanup_failures_keep_the_finalizer_and_report() {
        let env = env_with(FakeProvider::existing(true), true);
        env.provider.fail_next(
            "delete",
            ProviderError::Transient {
                status: Some(503),
                message: "DELETE http://lb/v1/loadbalancers/uid-web: 503 Service Unavailable: maintenance".into(),
            },
        );
        let s = deleting(finalized(svc("web", "LoadBalancer", "TCP")));
        let e = env.syncer.process_service(&s, vec![]).await.unwrap_err();
        assert_eq!(e.step, Step::DeleteLoadBalancer);
        assert!(env.writer.patches.lock().is_empty(), "finalizer kept");
        let since = env.syncer.failing_since("default/web").unwrap();
        let evs = env.events.0.lock().clone();
        let (_, last) = evs.last().unwrap();
        assert!(last.warning);
        assert_eq!(last.reason, "SyncLoadBalancerFailed");
        assert_eq!(last.action, "DeleteLoadBalancer");
        assert!(
            last.note.starts_with("Error syncing load balancer: failed to delete load balancer: DELETE http://lb/v1/loadbalancers/uid-web: 503 Service Unavailable: maintenance (failing since "),
            "{}",
            last.note
        );
        assert!(
            last.note
                .contains(&since.round(jiff::Unit::Second).unwrap().to_string())
        );

        // The first failure time stays while it keeps failing ...
        env.provider.fail_next(
            "get",
            ProviderError::Timeout {
                message: "slow".into(),
            },
        );
        let e = env.syncer.process_service(&s, vec![]).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to check if load balancer exists before cleanup: slow"
        );
        assert_eq!(env.syncer.failing_since("default/web"), Some(since));
        // ... and is forgotten on success.
        env.syncer.process_service(&s, vec![]).await.unwrap();
        assert_eq!(env.syncer.failing_since("default/web"), None);
        assert_eq!(env.writer.patches.lock().len(), 1);
    }

    #[tokio::test]
    async fn error_texts_are_upstreams() {
        let transient = || ProviderError::Transient {
            status: Some(500),
            message: "boom".into(),
        };
        // Ensure fails after the finalizer was added.
        let env = env_with(FakeProvider::default(), true);
        env.provider.fail_next("create", transient());
        let e = env
            .syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![node("a")])
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "failed to ensure load balancer: boom");
        assert_eq!(
            env.writer.patches.lock().len(),
            1,
            "finalizer added before the failure"
        );
        assert_eq!(
            env.events.reasons(),
            ["EnsuringLoadBalancer", "SyncLoadBalancerFailed"]
        );

        // Finalizer write fails: the provider is never called.
        let env = env_with(FakeProvider::default(), true);
        env.writer
            .answers
            .lock()
            .push_back(Err(WriteError::Api("etcd is down".into())));
        let e = env
            .syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![node("a")])
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to add load balancer cleanup finalizer: etcd is down"
        );
        assert!(env.provider.calls().is_empty());

        // Status write fails.
        let env = env_with(FakeProvider::default(), true);
        env.writer
            .answers
            .lock()
            .push_back(Ok(Some(Service::default())));
        env.writer
            .answers
            .lock()
            .push_back(Err(WriteError::Api("denied".into())));
        let e = env
            .syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![node("a")])
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to update load balancer status: denied"
        );

        // Finalizer removal fails.
        let env = env_with(FakeProvider::existing(false), true);
        env.writer
            .answers
            .lock()
            .push_back(Err(WriteError::Stale("uid mismatch".into())));
        let e = env
            .syncer
            .process_service(&finalized(svc("web", "ClusterIP", "TCP")), vec![])
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to remove load balancer cleanup finalizer: the Service changed: uid mismatch"
        );

        // A Service the provider cannot serve.
        let env = env_with(FakeProvider::default(), false);
        let mut bad = svc("web", "LoadBalancer", "TCP");
        if let Some(sp) = bad.spec.as_mut() {
            sp.ports = Some(vec![]);
        }
        let e = env
            .syncer
            .process_service(&bad, vec![node("a")])
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to ensure load balancer: Service default/web: has no ports; a load balancer needs at least one"
        );
    }

    #[tokio::test]
    async fn retry_after_is_preserved_and_implemented_elsewhere_is_a_no_op() {
        let env = env_with(FakeProvider::default(), true);
        env.provider.fail_next(
            "create",
            ProviderError::RetryAfter {
                after: Duration::from_secs(7),
                message: "busy".into(),
            },
        );
        let e = env
            .syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![node("a")])
            .await
            .unwrap_err();
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));

        // ImplementedElsewhere on ensure: finalizer added, no status, no Ensured.
        let env = env_with(FakeProvider::default(), true);
        env.provider
            .fail_next("create", ProviderError::ImplementedElsewhere);
        let out = env
            .syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![node("a")])
            .await
            .unwrap();
        assert_eq!(out.writes, 1);
        assert_eq!(env.events.reasons(), ["EnsuringLoadBalancer"]);

        // ImplementedElsewhere on delete: ignored, the finalizer comes off.
        let env = env_with(FakeProvider::existing(true), true);
        env.provider
            .fail_next("delete", ProviderError::ImplementedElsewhere);
        let out = env
            .syncer
            .process_service(
                &deleting(finalized(svc("web", "LoadBalancer", "TCP"))),
                vec![],
            )
            .await
            .unwrap();
        assert!(out.finalizer_removed);
    }

    #[tokio::test]
    async fn not_found_on_writes_means_the_service_is_gone() {
        // Removing the last finalizer of a Service being deleted deletes it;
        // a 404 on that write is success.
        let env = env_with(FakeProvider::existing(true), true);
        env.writer.answers.lock().push_back(Ok(None));
        let out = env
            .syncer
            .process_service(
                &deleting(finalized(svc("web", "LoadBalancer", "TCP"))),
                vec![],
            )
            .await
            .unwrap();
        assert!(out.gone && out.finalizer_removed);
        // 404 when adding the finalizer: stop, nothing created.
        let env = env_with(FakeProvider::default(), true);
        env.writer.answers.lock().push_back(Ok(None));
        let out = env
            .syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![node("a")])
            .await
            .unwrap();
        assert!(out.gone);
        assert!(env.provider.calls().is_empty());
    }

    #[tokio::test]
    async fn no_nodes_warns_unavailable() {
        let env = env_with(FakeProvider::default(), true);
        env.syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![])
            .await
            .unwrap();
        assert_eq!(
            env.events.reasons(),
            [
                "EnsuringLoadBalancer",
                "UnAvailableLoadBalancer",
                "EnsuredLoadBalancer"
            ]
        );
    }

    /// Upstream `TestProcessServiceDeletion` and the gate-off path: a Service
    /// synced without a finalizer that vanishes gets its load balancer
    /// deleted from the cache; an unknown one is a no-op.
    #[tokio::test]
    async fn process_service_deletion_uses_the_cache() {
        let env = env_with(FakeProvider::default(), false);
        assert!(
            !env.syncer
                .process_service_deletion("default/web", "uid-web")
                .await
                .unwrap()
        );
        env.syncer
            .process_service(&svc("web", "LoadBalancer", "TCP"), vec![node("a")])
            .await
            .unwrap();
        assert!(
            env.writer
                .patches
                .lock()
                .iter()
                .all(|p| !has_finalizer_patch(p))
        );
        // Another UID under the key is not this one.
        assert!(
            !env.syncer
                .process_service_deletion("default/web", "uid-other")
                .await
                .unwrap()
        );
        env.provider.fail_next(
            "delete",
            ProviderError::Timeout {
                message: "slow".into(),
            },
        );
        assert!(
            env.syncer
                .process_service_deletion("default/web", "uid-web")
                .await
                .is_err()
        );
        assert!(
            env.syncer.cached("default/web").is_some(),
            "kept for the retry"
        );
        assert!(
            env.syncer
                .process_service_deletion("default/web", "uid-web")
                .await
                .unwrap()
        );
        assert!(env.syncer.cached("default/web").is_none());
        assert_eq!(env.provider.calls(), ["create", "delete", "delete"]);
        assert_eq!(
            env.events.reasons(),
            [
                "EnsuringLoadBalancer",
                "EnsuredLoadBalancer",
                "DeletingLoadBalancer",
                "DeleteLoadBalancerFailed",
                "DeletingLoadBalancer",
                "DeletedLoadBalancer"
            ]
        );
    }

    #[tokio::test]
    async fn a_deletion_racing_a_completed_cleanup_does_nothing() {
        let env = env_with(FakeProvider::default(), true);
        let s = svc("web", "LoadBalancer", "TCP");
        env.syncer
            .process_service(&s, vec![node("a")])
            .await
            .unwrap();
        let cached = env.syncer.cached("default/web").unwrap();
        // The cleanup completes (and forgets the Service) ...
        env.syncer
            .process_service(&deleting(finalized(s)), vec![])
            .await
            .unwrap();
        let calls = env.provider.calls().len();
        // ... while a deletion job already holding the old entry runs.
        env.syncer
            .process_load_balancer_delete("default/web", &cached)
            .await
            .unwrap();
        assert_eq!(env.provider.calls().len(), calls, "no second DELETE");
        assert_eq!(env.events.reasons().last(), Some(&"DeletedLoadBalancer"));
        assert_eq!(
            env.events
                .reasons()
                .iter()
                .filter(|r| **r == "DeletingLoadBalancer")
                .count(),
            1
        );
    }

    #[tokio::test]
    async fn a_recreated_service_first_deletes_the_old_load_balancer() {
        let env = env_with(FakeProvider::default(), false);
        let old = svc("web", "LoadBalancer", "TCP");
        env.syncer
            .process_service(&old, vec![node("a")])
            .await
            .unwrap();
        let mut new = old.clone();
        new.metadata.uid = Some("uid-web-2".into());
        env.syncer
            .process_service(&new, vec![node("a")])
            .await
            .unwrap();
        assert_eq!(env.provider.calls(), ["create", "delete", "create"]);
        let evs = env.events.0.lock().clone();
        let uids: Vec<(&str, &str)> = evs.iter().map(|(u, e)| (u.as_str(), e.reason)).collect();
        assert_eq!(
            uids[2..],
            [
                ("uid-web", "DeletingLoadBalancer"),
                ("uid-web", "DeletedLoadBalancer"),
                ("uid-web-2", "EnsuringLoadBalancer"),
                ("uid-web-2", "EnsuredLoadBalancer"),
            ]
        );
        assert_eq!(env.syncer.cached("default/web").unwrap().uid, "uid-web-2");
    }

    /// Upstream `TestNodeChangesInExternalLoadBalancer`-style checks on one
    /// Service: hosts are only updated when names or providerIDs change.
    #[tokio::test]
    async fn node_sync_updates_hosts_only_when_the_set_changes() {
        let env = env_with(FakeProvider::default(), true);
        let s = finalized(svc("web", "LoadBalancer", "TCP"));
        env.syncer
            .process_service(&s, vec![node("a"), node("b")])
            .await
            .unwrap();
        // Same set (addresses may differ): nothing.
        let mut same = vec![node("b"), node("a")];
        same[0].addresses.push(crate::provider::LbNodeAddress {
            kind: "InternalIP".into(),
            address: "10.0.0.9".into(),
        });
        assert_eq!(
            env.syncer.node_sync_service(&s, same.clone()).await,
            NodeSync::Done
        );
        assert_eq!(env.provider.calls(), ["create"]);
        // A node added.
        let three = vec![node("a"), node("b"), node("c")];
        assert_eq!(
            env.syncer.node_sync_service(&s, three.clone()).await,
            NodeSync::Done
        );
        assert_eq!(env.provider.calls(), ["create", "hosts"]);
        // A providerID changed.
        let mut moved = three.clone();
        moved[2].provider_id = "sim://elsewhere".into();
        env.syncer.node_sync_service(&s, moved.clone()).await;
        // Zero nodes: updated, with the UnAvailable warning.
        env.syncer.node_sync_service(&s, vec![]).await;
        assert_eq!(env.provider.calls(), ["create", "hosts", "hosts", "hosts"]);
        assert_eq!(
            env.events.reasons()[2..],
            [
                "UpdatedLoadBalancer",
                "UpdatedLoadBalancer",
                "UnAvailableLoadBalancer"
            ]
        );
        // Services that do not want a load balancer are skipped.
        assert_eq!(
            env.syncer
                .node_sync_service(&svc("cip", "ClusterIP", "TCP"), three.clone())
                .await,
            NodeSync::Done
        );
        assert_eq!(env.provider.calls().len(), 4);
    }

    #[tokio::test]
    async fn node_sync_failures_retry_unless_the_load_balancer_is_gone() {
        let env = env_with(FakeProvider::existing(true), true);
        let s = finalized(svc("web", "LoadBalancer", "TCP"));
        env.provider.fail_next(
            "hosts",
            ProviderError::Conflict {
                message: "busy".into(),
            },
        );
        assert_eq!(
            env.syncer.node_sync_service(&s, vec![node("a")]).await,
            NodeSync::Retry
        );
        let evs = env.events.0.lock().clone();
        assert_eq!(evs.last().unwrap().1.reason, "UpdateLoadBalancerFailed");
        assert_eq!(
            evs.last().unwrap().1.note,
            "Error updating load balancer with new hosts [a] [node names limited, total number of nodes: 1], error: busy"
        );
        // The set was stored before the call (upstream), so the same set is
        // not retried by the node sync; the service sync retries it.
        assert_eq!(
            env.syncer.node_sync_service(&s, vec![node("a")]).await,
            NodeSync::Done
        );

        let env = env_with(FakeProvider::existing(false), true);
        env.provider.fail_next(
            "hosts",
            ProviderError::NotFound {
                message: "gone".into(),
            },
        );
        assert_eq!(
            env.syncer.node_sync_service(&s, vec![node("a")]).await,
            NodeSync::Done
        );
        assert_eq!(env.provider.calls(), ["hosts", "get"]);
        assert!(env.events.reasons().is_empty());
    }

    #[test]
    fn node_names_are_limited_like_upstream() {
        let nodes: Vec<LbNode> = (0..52).map(|i| node(&format!("n{i:02}"))).collect();
        let s = loggable_node_names(&nodes);
        assert!(s.starts_with("[n00 n01 "), "{s}");
        assert!(s.ends_with(" n49 <2 more>]"), "{s}");
    }

    #[tokio::test]
    async fn key_locks_serialise_and_clean_up() {
        let locks = Arc::new(KeyLocks::default());
        let g = locks.lock("a").await;
        let l2 = locks.clone();
        let waiter = tokio::spawn(async move {
            let _g = l2.lock("a").await;
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        // Another key is independent.
        drop(locks.lock("b").await);
        drop(g);
        waiter.await.unwrap();
        assert!(locks.is_empty());
    }

    /// managedFields of a Service whose finalizers `manager` wrote last.
    fn written_by(manager: &str) -> ObjectMeta {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let entry = |m: &str, fields: Value| ManagedFieldsEntry {
            manager: Some(m.into()),
            operation: Some("Update".into()),
            time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        };
        ObjectMeta {
            managed_fields: Some(vec![
                entry(manager, json!({"f:metadata": {"f:finalizers": {}}})),
                entry("zz-other", json!({"f:spec": {"f:type": {}}})),
                entry(
                    crate::controller::FIELD_MANAGER,
                    json!({"f:status": {"f:loadBalancer": {}}}),
                ),
            ]),
            ..ObjectMeta::default()
        }
    }

    fn fight(r: Result<Outcome, SyncError>) -> Option<Fight> {
        match r {
            Err(SyncError {
                cause: Cause::Fight(f),
                ..
            }) => Some(f),
            _ => None,
        }
    }

    /// Issue 27, "fights never back off": a writer that keeps re-adding the
    /// finalizer to a Service whose load balancer is gone got a removal
    /// from us on every re-add, for ever. The third removal in the window
    /// waits (no provider call, no write), one Warning names the writer.
    #[tokio::test]
    async fn a_writer_re_adding_the_finalizer_meets_a_back_off_and_one_warning() {
        let env = env_with(FakeProvider::existing(false), true);
        *env.writer.live.lock() = Some(written_by("gitops-sync"));
        let cip = finalized(svc("web", "ClusterIP", "TCP"));
        for _ in 0..2 {
            env.syncer
                .process_service(&cip, NodeSet::default())
                .await
                .expect("a removal");
        }
        let f = fight(env.syncer.process_service(&cip, NodeSet::default()).await)
            .expect("the third removal backs off");
        assert_eq!(
            f,
            Fight {
                wait: protection_core::runtime::fight::BASE,
                new_backoff: true
            }
        );
        let again = fight(env.syncer.process_service(&cip, NodeSet::default()).await)
            .expect("still waiting");
        assert!(!again.new_backoff && again.wait <= f.wait);
        assert_eq!(env.writer.patches.lock().len(), 2, "two removals written");
        assert_eq!(
            env.provider.calls(),
            ["get", "get"],
            "no provider call while waiting"
        );
        let warnings: Vec<LbEvent> = env
            .events
            .0
            .lock()
            .iter()
            .map(|(_, e)| e.clone())
            .filter(|e| e.warning)
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].reason, REASON_FIGHT);
        assert_eq!(warnings[0].action, "RemoveFinalizer");
        assert!(
            warnings[0]
                .note
                .starts_with("field manager \"gitops-sync\" (the last other writer) keeps re-adding finalizer service.kubernetes.io/load-balancer-cleanup"),
            "{}",
            warnings[0].note
        );
        // Deleted meanwhile: nothing can re-add it now (the API server
        // refuses new finalizers on a Service being deleted): the removal
        // goes at once.
        let out = env
            .syncer
            .process_service(&deleting(cip), NodeSet::default())
            .await
            .expect("a deleted Service's finalizer is removed at once");
        assert!(out.finalizer_removed);
    }

    /// The other way: a writer that keeps removing the finalizer from a
    /// Service with a load balancer. The add waits, and so does the sync it
    /// belongs to: no load balancer call is made without the finalizer.
    #[tokio::test]
    async fn a_writer_removing_the_finalizer_meets_a_back_off() {
        let env = env_with(FakeProvider::default(), true);
        let lb = svc("web", "LoadBalancer", "TCP");
        for _ in 0..2 {
            let out = env
                .syncer
                .process_service(&lb, NodeSet::default())
                .await
                .expect("an add");
            assert!(out.finalizer_added);
        }
        let calls = env.provider.calls();
        let f = fight(env.syncer.process_service(&lb, NodeSet::default()).await)
            .expect("the third add backs off");
        assert!(f.new_backoff);
        assert_eq!(
            env.provider.calls(),
            calls,
            "nothing ensured without the finalizer"
        );
        let patches = env.writer.patches.lock().clone();
        assert_eq!(patches.iter().filter(|p| has_finalizer_patch(p)).count(), 2);
        let fights: Vec<String> = env
            .events
            .0
            .lock()
            .iter()
            .filter(|(_, e)| e.reason == REASON_FIGHT)
            .map(|(_, e)| e.note.clone())
            .collect();
        assert_eq!(fights.len(), 1);
        assert!(
            fights[0].starts_with("another writer (whose field manager left no trace"),
            "{}",
            fights[0]
        );
    }

    /// A Service switched between LoadBalancer and ClusterIP gets an add and
    /// a removal each time: writes the other way round are no fight.
    #[tokio::test]
    async fn switching_the_type_back_and_forth_is_no_fight() {
        let env = env_with(FakeProvider::default(), true);
        let lb = svc("web", "LoadBalancer", "TCP");
        let cip = finalized(svc("web", "ClusterIP", "TCP"));
        for _ in 0..4 {
            let add = env.syncer.process_service(&lb, NodeSet::default()).await;
            assert!(add.expect("add").finalizer_added);
            let remove = env.syncer.process_service(&cip, NodeSet::default()).await;
            assert!(remove.expect("remove").finalizer_removed);
        }
        assert!(!env.events.reasons().contains(&REASON_FIGHT));
    }
}

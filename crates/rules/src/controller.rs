//! The `rules` controller: watches ProtectionRules and runs one dynamic
//! in-use controller ([`crate::runner`]) per rule.
//!
//! * A rule gets the controller's own finalizer ([`RULE_FINALIZER`]) before
//!   its controller adds any: deleting a rule first removes the rule's
//!   finalizer from every protected object, then its own, so no object is
//!   left with a finalizer nobody removes.
//! * Updating a rule starts the new controller beside the old one and stops
//!   the old one only once the new one has listed everything: no gap in
//!   which a deletion goes unheld. The finalizer name is immutable (the CRD
//!   says so); a new name is a new rule.
//! * A rule that does not compile, names a kind the server does not serve,
//!   or needs rights the manager lacks (a SelfSubjectAccessReview per verb)
//!   is refused with `Ready=False` and a reason; the previous version of the
//!   rule, if one ran, keeps running. Nothing crash-loops.
//! * Adding finalizers is gated (`InUseProtectionRules`); holding and
//!   removing never are.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use protection_core::controllers::{ControllerContext, ControllerError};
use protection_core::finalizer::{FinalizerPatch, PhasedFinalizer, has_finalizer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::runner::{self, Kind, RuleCtx, Runner};
use crate::spec::{self, Mode};

pub const NAME: &str = "rules";
/// The controller's own finalizer on every ProtectionRule it enforced.
pub const RULE_FINALIZER: &str = "protection-manager.io/rule-cleanup";
pub const FIELD_MANAGER: &str = "protection-manager-rules";

/// Rules currently running, for explain and tests.
pub type Running = Arc<parking_lot::Mutex<HashMap<String, Arc<runner::Shared>>>>;

struct State {
    ctx: ControllerContext,
    add_enabled: bool,
    api: Api<DynamicObject>,
    rules: HashMap<String, DynamicObject>,
    runners: HashMap<String, Runner>,
    /// A rule's next version, until it has synced.
    next: HashMap<String, Runner>,
    /// Rules to look at again (refused, or a failed clean-up), and when.
    retry: HashMap<String, Instant>,
    /// Status as last written (or the refusal to write).
    status: HashMap<String, Value>,
    cancel: CancellationToken,
}

/// How often a cluster without the ProtectionRule CRD is asked again.
const REDISCOVER: Duration = Duration::from_secs(30);
/// The readiness note while the CRD is missing.
const NO_CRD_NOTE: &str = "the ProtectionRule CRD is not installed: no rules to run";

/// Runs the rules controller until shutdown.
pub async fn run(ctx: ControllerContext) -> Result<(), ControllerError> {
    let add_enabled = ctx
        .gates
        .try_enabled(crate::IN_USE_PROTECTION_RULES.name)
        .unwrap_or(false);
    tracing::info!(controller = NAME, add_enabled, "starting controller");
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &spec::api_resource());
    // Without the ProtectionRule CRD (the chart installs it; a bare cluster
    // may not have it) there is nothing to do and no reason to hold the
    // manager unready: say so, and look again now and then.
    let mut warned = false;
    loop {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Err(kube::Error::Api(e)) if e.code == 404 => {
                if !warned {
                    tracing::warn!(
                        controller = NAME,
                        "the cluster serves no protectionrules.protection-manager.io (the CRD is not installed); \
                         the rules controller does nothing until it is (looking again every {}s)",
                        REDISCOVER.as_secs()
                    );
                    warned = true;
                }
                if !protection_core::runtime::idle_while_unserved(&ctx, NO_CRD_NOTE, REDISCOVER)
                    .await
                {
                    return Ok(());
                }
            }
            // Served (or an error the watcher below retries and reports).
            _ => break,
        }
    }
    ctx.ready.set_note(None);
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut st = State {
        cancel: ctx.shutdown.child_token(),
        ctx,
        add_enabled,
        api,
        rules: HashMap::new(),
        runners: HashMap::new(),
        next: HashMap::new(),
        retry: HashMap::new(),
        status: HashMap::new(),
    };
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut init: Vec<DynamicObject> = Vec::new();
    loop {
        tokio::select! {
            _ = st.ctx.shutdown.cancelled() => {
                st.cancel.cancel();
                return Ok(());
            }
            _ = tick.tick() => st.tick().await,
            ev = stream.next() => {
                let Some(ev) = ev else { return Ok(()) };
                match ev {
                    Ok(watcher::Event::Apply(o)) => st.apply(o).await,
                    Ok(watcher::Event::Delete(o)) => {
                        let name = o.metadata.name.clone().unwrap_or_default();
                        st.forget(&name);
                    }
                    Ok(watcher::Event::Init) => init.clear(),
                    Ok(watcher::Event::InitApply(o)) => init.push(o),
                    Ok(watcher::Event::InitDone) => {
                        let fresh: Vec<DynamicObject> = std::mem::take(&mut init);
                        let names: Vec<String> = fresh.iter().filter_map(|o| o.metadata.name.clone()).collect();
                        let gone: Vec<String> = st.rules.keys().filter(|n| !names.contains(n)).cloned().collect();
                        for n in gone {
                            st.forget(&n);
                        }
                        for o in fresh {
                            st.apply(o).await;
                        }
                        st.ctx.ready.set(true);
                    }
                    Err(e) => tracing::warn!(controller = NAME, error = %e, "watching protectionrules"),
                }
            }
        }
    }
}

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({"type": "Ready", "status": status, "reason": reason, "message": message})
}

impl State {
    fn forget(&mut self, name: &str) {
        self.rules.remove(name);
        self.runners.remove(name);
        self.next.remove(name);
        self.retry.remove(name);
        self.status.remove(name);
    }

    async fn apply(&mut self, o: DynamicObject) {
        let name = o.metadata.name.clone().unwrap_or_default();
        self.rules.insert(name.clone(), o);
        self.reconcile(&name).await;
    }

    async fn tick(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .retry
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for n in due {
            self.retry.remove(&n);
            self.reconcile(&n).await;
        }
        // A rule's new version replaces the old once it has synced.
        let ready: Vec<String> = self
            .next
            .iter()
            .filter(|(_, r)| r.is_synced())
            .map(|(n, _)| n.clone())
            .collect();
        for n in ready {
            if let Some(r) = self.next.remove(&n) {
                self.runners.insert(n, r);
            }
        }
        let names: Vec<String> = self.runners.keys().cloned().collect();
        for n in names {
            self.write_running_status(&n).await;
        }
    }

    async fn write_running_status(&mut self, name: &str) {
        let Some(r) = self.runners.get(name) else {
            return;
        };
        if !r.is_synced() {
            return;
        }
        let c = r.shared.counts(&r.ctx.spec.finalizer);
        let mode = r.ctx.spec.mode;
        let message = match mode {
            Mode::Enforce if self.add_enabled => format!(
                "protecting {} while {} refer to them",
                r.ctx.protected.display(),
                r.ctx
                    .user_kinds
                    .iter()
                    .map(Kind::display)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Mode::Enforce => {
                "gate InUseProtectionRules is off: holding and releasing only, adding no finalizer"
                    .to_string()
            }
            Mode::Audit => "auditing: holding nothing, reporting what would be held".to_string(),
        };
        let mut status = json!({
            "observedGeneration": r.generation,
            "protected": c.protected,
            "heldNow": c.held_now,
            "conditions": [condition("True", "Running", &message)],
        });
        if mode == Mode::Audit {
            status["wouldHold"] = json!(
                r.shared
                    .would_hold
                    .load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        if let Some(e) = r.shared.last_error.lock().clone() {
            status["lastError"] = json!(e);
        }
        self.write_status(name, status).await;
    }

    async fn write_status(&mut self, name: &str, status: Value) {
        if self.status.get(name) == Some(&status) {
            return;
        }
        let mut body = status.clone();
        // lastTransitionTime only when written: the cache compares without it.
        if let Some(c) = body.pointer_mut("/conditions/0") {
            c["lastTransitionTime"] = json!(
                k8s_openapi::jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
            );
        }
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self
            .api
            .patch_status(name, &pp, &Patch::Merge(json!({"status": body})))
            .await
        {
            Ok(_) => {
                self.status.insert(name.to_string(), status);
            }
            Err(e) => {
                tracing::warn!(controller = NAME, rule = name, error = %e, "writing rule status")
            }
        }
    }

    /// A resource the rule names is not served (yet): refused, and looked at
    /// again in 10 s (a CRD may be on its way).
    async fn not_found(&mut self, name: &str, generation: i64, field: &str, e: String) {
        self.retry
            .insert(name.into(), Instant::now() + Duration::from_secs(10));
        self.refuse(
            name,
            generation,
            "ResourceNotFound",
            format!("{field}: {e}"),
        )
        .await
    }

    async fn refuse(&mut self, name: &str, generation: i64, reason: &str, message: String) {
        tracing::warn!(controller = NAME, rule = name, reason, %message, "rule refused");
        let status = json!({
            "observedGeneration": generation,
            "lastError": message,
            "conditions": [condition("False", reason, &message)],
        });
        self.write_status(name, status).await;
    }

    async fn patch_rule_finalizer(&self, o: &DynamicObject, add: bool) -> Result<(), String> {
        let f = PhasedFinalizer::new(RULE_FINALIZER, true)
            .map_err(|e| e.to_string())?
            .with_field_manager(FIELD_MANAGER);
        let patch = if add {
            f.add_patch(&o.metadata)
        } else {
            f.remove_patch(&o.metadata)
        };
        let Some(FinalizerPatch(p)) = patch else {
            return Ok(());
        };
        let name = o.metadata.name.clone().unwrap_or_default();
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self.api.patch(&name, &pp, &Patch::Json::<()>(p)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(format!("protectionrule {name}: {e}")),
        }
    }

    async fn reconcile(&mut self, name: &str) {
        let Some(o) = self.rules.get(name).cloned() else {
            return;
        };
        let generation = o.metadata.generation.unwrap_or(0);
        let spec_value = o.data.get("spec").cloned().unwrap_or(Value::Null);
        if o.metadata.deletion_timestamp.is_some() {
            self.clean_up(name, &o, &spec_value).await;
            return;
        }
        if self
            .runners
            .get(name)
            .or(self.next.get(name))
            .is_some_and(|r| {
                r.generation == generation
                    && self
                        .next
                        .get(name)
                        .is_none_or(|n| n.generation == generation)
            })
        {
            return;
        }
        let (spec, users) = match spec::compile(&spec_value) {
            Ok(x) => x,
            Err(e) => return self.refuse(name, generation, "InvalidRule", e).await,
        };
        let client = &self.ctx.client;
        let protected = match runner::resolve_protected(client, &spec.protected).await {
            Ok(k) => k,
            Err(e) => return self.not_found(name, generation, "spec.protected", e).await,
        };
        let mut user_kinds = Vec::new();
        for (i, u) in spec.users.iter().enumerate() {
            match runner::resolve(client, &u.group, &u.version, Some(&u.resource), None).await {
                Ok(k) => user_kinds.push(k),
                Err(e) => {
                    let field = format!("spec.users[{i}]");
                    return self.not_found(name, generation, &field, e).await;
                }
            }
        }
        if let Err(missing) = self.access(&protected, &user_kinds).await {
            // Asked again soon: a grant needs no restart to be noticed.
            self.retry
                .insert(name.into(), Instant::now() + Duration::from_secs(10));
            return self
                .refuse(
                    name,
                    generation,
                    "Forbidden",
                    format!("the manager may not {missing}; add the resource to the chart's rules.allowedResources"),
                )
                .await;
        }
        if spec.mode == Mode::Enforce
            && self.add_enabled
            && !has_finalizer(&o.metadata, RULE_FINALIZER)
            && let Err(e) = self.patch_rule_finalizer(&o, true).await
        {
            self.retry
                .insert(name.into(), Instant::now() + Duration::from_secs(5));
            return self.refuse(name, generation, "Error", e).await;
        }
        let ctx = Arc::new(RuleCtx {
            rule: name.to_string(),
            client: client.clone(),
            events: self.ctx.events.clone(),
            spec,
            users,
            protected,
            user_kinds,
            add_enabled: self.add_enabled,
            field_manager: FIELD_MANAGER.into(),
            concurrency: usize::from(self.ctx.concurrency).max(1),
        });
        let r = runner::start(ctx, generation, &self.cancel);
        if self.runners.contains_key(name) {
            self.next.insert(name.to_string(), r);
        } else {
            self.runners.insert(name.to_string(), r);
        }
    }

    async fn clean_up(&mut self, name: &str, o: &DynamicObject, spec_value: &Value) {
        self.runners.remove(name);
        self.next.remove(name);
        if !has_finalizer(&o.metadata, RULE_FINALIZER) {
            return;
        }
        let result = async {
            let s: spec::RuleSpec = serde_json::from_value(spec_value.clone())
                .map_err(|e| format!("spec: {e}"))?;
            // A kind that is no longer served has no objects left to clean.
            if let Ok(kind) = runner::resolve(
                &self.ctx.client,
                &s.protected.group,
                &s.protected.version,
                s.protected.resource.as_deref(),
                s.protected.kind.as_deref(),
            )
            .await
            {
                let n = runner::remove_everywhere(&self.ctx.client, &kind, &s.finalizer, FIELD_MANAGER).await?;
                tracing::info!(controller = NAME, rule = name, removed = n, finalizer = %s.finalizer, "rule deleted: finalizers removed");
            }
            self.patch_rule_finalizer(o, false).await
        }
        .await;
        if let Err(e) = result {
            self.retry
                .insert(name.into(), Instant::now() + Duration::from_secs(5));
            let generation = o.metadata.generation.unwrap_or(0);
            self.refuse(name, generation, "CleanupFailed", e).await;
        }
    }

    /// Checks the rights a rule needs; `Err` names the first one missing. A
    /// server without SelfSubjectAccessReview is not asked.
    async fn access(&self, protected: &Kind, users: &[Kind]) -> Result<(), String> {
        let mut checks: Vec<(&Kind, &str)> = ["get", "list", "watch", "patch"]
            .into_iter()
            .map(|v| (protected, v))
            .collect();
        for u in users {
            checks.extend(["list", "watch"].into_iter().map(|v| (u, v)));
        }
        let api: Api<SelfSubjectAccessReview> = Api::all(self.ctx.client.clone());
        for (k, verb) in checks {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(k.ar.group.clone()),
                        resource: Some(k.ar.plural.clone()),
                        verb: Some(verb.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            match api.create(&PostParams::default(), &review).await {
                Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => {}
                Ok(_) => return Err(format!("{verb} {}", k.display())),
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(format!("{verb} {} (review failed: {e})", k.display())),
            }
        }
        Ok(())
    }
}

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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use protection_core::controllers::{ControllerContext, ControllerError};
use protection_core::finalizer::{PhasedFinalizer, has_finalizer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::runner::{self, Kind, RuleCtx, Runner};
use crate::spec::{self, Mode};

/// Why writing a rule's own finalizer failed.
#[derive(Debug, thiserror::Error)]
#[error("protectionrule {name}: {source}")]
pub struct RuleFinalizerError {
    name: String,
    #[source]
    source: protection_core::FinalizerError,
}

pub const NAME: &str = "rules";
/// The controller's own finalizer on every ProtectionRule it enforced.
pub const RULE_FINALIZER: &str = "protection-manager.io/rule-cleanup";
pub const FIELD_MANAGER: &str = "protection-manager-rules";

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
    /// Set at shutdown: stops the rules' CEL evaluations at their next step.
    cel_stop: Arc<AtomicBool>,
    settings: Settings,
}

/// How often a cluster without the ProtectionRule CRD is asked again.
const REDISCOVER: Duration = Duration::from_secs(30);
/// The readiness note while the CRD is missing.
const NO_CRD_NOTE: &str = "the ProtectionRule CRD is not installed: no rules to run";

/// What the manager tells the rules controller about itself.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The finalizers of this manager's other controllers (in the profile
    /// it runs with), with the controller's name: a rule may not use them
    /// (two controllers would each remove the finalizer when *they* are
    /// done with the object).
    pub reserved_finalizers: Vec<(String, &'static str)>,
}

/// Runs the rules controller until shutdown.
pub async fn run(ctx: ControllerContext) -> Result<(), ControllerError> {
    run_with(ctx, Settings::default()).await
}

/// [`run`], knowing the manager's other controllers.
pub async fn run_with(ctx: ControllerContext, settings: Settings) -> Result<(), ControllerError> {
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
    crate::cel::register_metrics(ctx.metrics.registry());
    let cel_stop = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let (shutdown, flag) = (ctx.shutdown.clone(), cel_stop.clone());
        async move {
            shutdown.cancelled().await;
            flag.store(true, Ordering::Relaxed);
        }
    });
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
        cel_stop,
        settings,
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
        let c = r.counts();
        let mode = r.ctx.spec.mode;
        let message = match mode {
            Mode::Enforce | Mode::Deny if self.add_enabled => format!(
                "protecting {} while {} refer to them",
                r.ctx.protected.display(),
                r.ctx
                    .user_kinds
                    .iter()
                    .map(Kind::display)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Mode::Enforce | Mode::Deny => {
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
                r.state
                    .would_hold
                    .load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        if let Some(e) = r.state.last_error.lock().clone() {
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
    async fn not_found(&mut self, name: &str, generation: i64, field: &str, e: runner::Error) {
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

    /// A refusal that also stops the rule's running version: what the
    /// refusal protects against must not go on (another controller's or
    /// rule's finalizer, a critical kind).
    async fn refuse_stopping(
        &mut self,
        name: &str,
        generation: i64,
        reason: &str,
        message: String,
    ) {
        self.runners.remove(name);
        self.next.remove(name);
        self.refuse(name, generation, reason, message).await
    }

    /// The oldest other rule (creation time, then name) that uses the same
    /// finalizer on the same `spec.protected`, if it is older than `name`:
    /// it owns the finalizer.
    fn older_sharing(&self, name: &str, o: &DynamicObject, s: &spec::RuleSpec) -> Option<String> {
        let key = |r: &DynamicObject| {
            (
                r.metadata.creation_timestamp.as_ref().map(|t| t.0),
                r.metadata.name.clone().unwrap_or_default(),
            )
        };
        let mine = key(o);
        self.rules
            .iter()
            .filter(|(n, r)| *n != name && r.metadata.deletion_timestamp.is_none())
            .filter(|(_, r)| {
                r.data
                    .get("spec")
                    .and_then(|v| serde_json::from_value::<spec::RuleSpec>(v.clone()).ok())
                    .is_some_and(|other| {
                        other.finalizer == s.finalizer
                            && spec::same_protected(&other.protected, &s.protected)
                    })
            })
            .map(|(_, r)| key(r))
            .filter(|k| *k < mine)
            .min()
            .map(|(_, n)| n)
    }

    /// Another running rule that puts `finalizer` on the same kind.
    fn running_sharing(&self, name: &str, finalizer: &str, kind: &Kind) -> Option<String> {
        self.runners
            .iter()
            .chain(self.next.iter())
            .filter(|(n, _)| *n != name)
            .find(|(_, r)| {
                r.ctx.spec.finalizer == finalizer
                    && r.ctx.protected.ar.group == kind.ar.group
                    && r.ctx.protected.ar.plural == kind.ar.plural
            })
            .map(|(n, _)| n.clone())
    }

    /// Whether another rule, not being deleted, puts `finalizer` on `kind`:
    /// a deleted rule then leaves the finalizer to it.
    async fn shared_with_live_rule(
        &self,
        name: &str,
        finalizer: &str,
        kind: &Kind,
    ) -> Option<String> {
        for (n, r) in &self.rules {
            if n == name || r.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(other) = r
                .data
                .get("spec")
                .and_then(|v| serde_json::from_value::<spec::RuleSpec>(v.clone()).ok())
            else {
                continue;
            };
            if other.finalizer != finalizer {
                continue;
            }
            if let Ok(k) = runner::resolve_protected(&self.ctx.client, &other.protected).await
                && k.ar.group == kind.ar.group
                && k.ar.plural == kind.ar.plural
            {
                return Some(n.clone());
            }
        }
        None
    }

    async fn patch_rule_finalizer(
        &self,
        o: &DynamicObject,
        add: bool,
    ) -> Result<(), RuleFinalizerError> {
        let name = o.metadata.name.clone().unwrap_or_default();
        let err = |source| RuleFinalizerError {
            name: name.clone(),
            source,
        };
        let f = PhasedFinalizer::new(RULE_FINALIZER, true)
            .map_err(err)?
            .with_field_manager(FIELD_MANAGER);
        let res = if add {
            f.add_as(&self.api, o, spec::KIND).await
        } else {
            f.remove_as(&self.api, o, spec::KIND).await
        };
        res.map(|_| ()).map_err(err)
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
        let (spec, mut users) = match spec::compile(&spec_value) {
            Ok(x) => x,
            Err(e) => return self.refuse(name, generation, e.reason, e.message).await,
        };
        for u in &mut users {
            u.reference.set_cancel(self.cel_stop.clone());
            if let Some(w) = &mut u.while_ {
                w.set_cancel(self.cel_stop.clone());
            }
        }
        if let Some((_, owner)) = self
            .settings
            .reserved_finalizers
            .iter()
            .find(|(f, _)| *f == spec.finalizer)
        {
            let message = format!(
                "spec.finalizer: {} is the finalizer of this manager's {owner} controller; a rule must use its own",
                spec.finalizer
            );
            return self
                .refuse_stopping(name, generation, "FinalizerInUse", message)
                .await;
        }
        if let Some(older) = self.older_sharing(name, &o, &spec) {
            // Retried: the owner may go.
            self.retry
                .insert(name.into(), Instant::now() + Duration::from_secs(10));
            let message = format!(
                "spec.finalizer: {} is already used on {} by ProtectionRule {older}; two rules sharing a finalizer would each remove it when their own users are gone, freeing an object the other's still use",
                spec.finalizer,
                spec::protected_display(&spec.protected)
            );
            return self
                .refuse_stopping(name, generation, "FinalizerInUse", message)
                .await;
        }
        let client = &self.ctx.client;
        let protected = match runner::resolve_protected(client, &spec.protected).await {
            Ok(k) => k,
            Err(e) => return self.not_found(name, generation, "spec.protected", e).await,
        };
        if let Err(message) = spec::check_protected_kind(
            &protected.ar.group,
            &protected.ar.plural,
            spec.allow_critical_kind,
        ) {
            return self
                .refuse_stopping(name, generation, "CriticalKind", message)
                .await;
        }
        if let Some(other) = self.running_sharing(name, &spec.finalizer, &protected) {
            self.retry
                .insert(name.into(), Instant::now() + Duration::from_secs(10));
            let message = format!(
                "spec.finalizer: {} is already used on {} by ProtectionRule {other}; two rules sharing a finalizer would each remove it when their own users are gone, freeing an object the other's still use",
                spec.finalizer,
                protected.display()
            );
            return self
                .refuse_stopping(name, generation, "FinalizerInUse", message)
                .await;
        }
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
        if let Some(missing) = self.missing_right(&protected, &user_kinds).await {
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
        if spec.mode.holds()
            && self.add_enabled
            && !has_finalizer(&o.metadata, RULE_FINALIZER)
            && let Err(e) = self.patch_rule_finalizer(&o, true).await
        {
            self.retry
                .insert(name.into(), Instant::now() + Duration::from_secs(5));
            return self.refuse(name, generation, "Error", e.to_string()).await;
        }
        // The finalizer's name was checked when the rule was compiled.
        let finalizer = match PhasedFinalizer::new(&spec.finalizer, self.add_enabled) {
            Ok(f) => f
                .with_metrics(self.ctx.metrics.clone())
                .with_field_manager(FIELD_MANAGER),
            Err(e) => {
                return self
                    .refuse(
                        name,
                        generation,
                        "InvalidRule",
                        format!("spec.finalizer: {e}"),
                    )
                    .await;
            }
        };
        let ctx = Arc::new(RuleCtx {
            rule: name.to_string(),
            client: client.clone(),
            spec,
            users,
            protected,
            user_kinds,
        });
        let r = runner::start(&self.ctx, ctx, finalizer, generation, &self.cancel);
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
            let s: spec::RuleSpec =
                serde_json::from_value(spec_value.clone()).map_err(runner::Error::Spec)?;
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
                let n = crate::deny::remove_everywhere(&self.ctx.client, &kind, name).await?;
                if n > 0 {
                    tracing::info!(controller = NAME, rule = name, removed = n, "rule deleted: its Deny-mode labels removed");
                }
                if let Some(other) = self.shared_with_live_rule(name, &s.finalizer, &kind).await {
                    // The finalizer stands for the other rule's users too.
                    tracing::info!(controller = NAME, rule = name, other = %other, finalizer = %s.finalizer, "rule deleted: its finalizer stays, another rule uses it on the same kind");
                } else {
                    let n = runner::remove_everywhere(&self.ctx.client, &kind, &s.finalizer, FIELD_MANAGER).await?;
                    tracing::info!(controller = NAME, rule = name, removed = n, finalizer = %s.finalizer, "rule deleted: finalizers removed");
                }
            }
            self.patch_rule_finalizer(o, false)
                .await
                .map_err(|e| runner::Error::Finalizer(e.source))
        }
        .await;
        if let Err(e) = result {
            self.retry
                .insert(name.into(), Instant::now() + Duration::from_secs(5));
            let generation = o.metadata.generation.unwrap_or(0);
            self.refuse(name, generation, "CleanupFailed", e.to_string())
                .await;
        }
    }

    /// The first right a rule needs that the manager lacks (`verb
    /// resource`), if any. A server without SelfSubjectAccessReview is not
    /// asked.
    async fn missing_right(&self, protected: &Kind, users: &[Kind]) -> Option<String> {
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
                Ok(_) => return Some(format!("{verb} {}", k.display())),
                Err(kube::Error::Api(s)) if s.code == 404 => return None,
                Err(e) => return Some(format!("{verb} {} (review failed: {e})", k.display())),
            }
        }
        None
    }
}

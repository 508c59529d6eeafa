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
//! * The controller is a rule on core's in-use engine
//!   ([`protection_core::runtime::inuse`]): the users are pods, the index is
//!   the pod index ([`crate::index`]), the scope of a confirmation is the
//!   claim's namespace.
//! * The reconcile asks the pod index first (upstream `askInformer`); a user
//!   there keeps the finalizer with no API call.
//! * Otherwise the PVC joins its namespace's next batch; a namespace worker
//!   takes the batch, makes one live (paged) LIST of the namespace's pods
//!   (started after every member's cache check), and decides again for each
//!   member with both the index and the list (a user in either keeps it). Up
//!   to `--concurrency` namespaces are confirmed at once, one worker per
//!   namespace (upstream's namespace workers).
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

use kube::ResourceExt;
use kube::api::{Api, ListParams};
use protection_core::runtime::inuse::{Engine, Rule};
use protection_core::runtime::{LIST_PAGE_SIZE, phased_finalizer, watch_config};
use protection_core::{ControllerContext, ControllerResult};

use crate::index::{PodIndex, PodUse, live_users};
use crate::objects::PvcFacts;
use crate::pod::PodFacts;
use crate::pvc::{controller_uid, held_note, released_note};
use crate::{Error, Settings};

/// Registered controller name.
pub const NAME: &str = "pvc-protection";
/// kube-controller-manager's name for it.
pub const ALIAS: &str = "persistentvolumeclaim-protection-controller";

/// The rule: a claim is used by the scheduled, not-finished pods of its
/// namespace that name it (or own it as a generic ephemeral volume); a
/// deletion is confirmed by a live pod LIST of the namespace.
struct PvcRule;

impl Rule for PvcRule {
    type Object = PvcFacts;
    type Use = PodUse;
    type Index = PodIndex;
    type Live = Vec<PodFacts>;

    fn name(&self) -> &'static str {
        NAME
    }
    fn kind(&self) -> &'static str {
        "PersistentVolumeClaim"
    }
    fn unused(&self) -> &'static str {
        "the PVC is unused"
    }
    fn api(&self, client: &kube::Client, pvc: &PvcFacts) -> Api<PvcFacts> {
        Api::namespaced(client.clone(), namespace(pvc))
    }
    fn scope(&self, pvc: &PvcFacts) -> String {
        namespace(pvc).to_string()
    }
    fn cached_users(&self, index: &PodIndex, pvc: &PvcFacts) -> Vec<PodUse> {
        index.users(namespace(pvc), &pvc.name_any(), controller_uid(pvc))
    }
    async fn list_live(&self, client: &kube::Client, ns: &str) -> Result<Vec<PodFacts>, Error> {
        let api: Api<PodFacts> = Api::namespaced(client.clone(), ns);
        let mut lp = ListParams::default().limit(LIST_PAGE_SIZE);
        let mut pods = Vec::new();
        loop {
            let page = api.list(&lp).await.map_err(|source| Error::LiveList {
                what: format!("pods in namespace {ns}"),
                source,
            })?;
            pods.extend(page.items);
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => return Ok(pods),
            }
        }
    }
    fn live_users(&self, pods: &Vec<PodFacts>, pvc: &PvcFacts) -> Vec<PodUse> {
        live_users(pods, namespace(pvc), &pvc.name_any(), controller_uid(pvc))
    }
    fn held_note(&self, pvc: &PvcFacts, users: &[PodUse]) -> String {
        held_note(namespace(pvc), &pvc.name_any(), users)
    }
    fn released_note(&self, pvc: &PvcFacts, finalizer: &str) -> String {
        released_note(namespace(pvc), &pvc.name_any(), finalizer)
    }
}

fn namespace(pvc: &PvcFacts) -> &str {
    pvc.metadata.namespace.as_deref().unwrap_or_default()
}

/// Runs the controller until `ctx.shutdown`.
pub async fn run(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let finalizer = phased_finalizer(
        &ctx,
        &settings.finalizer,
        &crate::STORAGE_OBJECT_IN_USE_PROTECTION,
        "pvc-protection-controller",
    )?;
    let engine = Engine::new(&ctx, PvcRule, finalizer, settings);
    engine.watch_users(
        Api::<PodFacts>::all(ctx.client.clone()),
        watch_config(),
        "pods",
    );
    engine.run(&ctx, Api::all(ctx.client.clone())).await
}

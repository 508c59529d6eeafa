//! The service-cidr-protection controller: KCM's `service-cidr-controller`
//! (`pkg/controller/servicecidrs`, 1.36) as a rule on core's in-use engine
//! ([`protection_core::runtime::inuse`]).
//!
//! * Every ServiceCIDR not being deleted gets the finalizer (while the
//!   `MultiCIDRServiceAllocator` gate is on; removal is never gated) and the
//!   condition `Ready=True` ("Kubernetes Service CIDR is ready", no reason),
//!   written by server-side apply of the status under our own field manager.
//! * A deleted ServiceCIDR keeps the finalizer while it is the only range of
//!   an IPAddress the allocator manages and not every CIDR of it is
//!   contained in another ServiceCIDR ([`crate::cidr::blocking_ips`]); it
//!   then gets `Ready=False`, reason `Terminating`, upstream's message.
//! * Free, it is released only 10 s after its deletionTimestamp (upstream's
//!   `deletionGracePeriod`: the API server's allocators stop using the range
//!   first), and after a live round (LIST of ServiceCIDRs and of the
//!   allocator's IPAddresses) started after the cache check also finds it
//!   free. (Deviation: upstream decides from its informers alone.)
//! * ServiceCIDR and IPAddress events re-check the ranges overlapping or
//!   containing them ([`crate::index`]). The default `kubernetes`
//!   ServiceCIDR is treated as any other, as upstream does.
//!
//! Upstream emits no event but a warning when the Ready status cannot be
//! written; we emit `FinalizerHeld` / `FinalizerReleased` as the other
//! in-use controllers, and log (and retry) a failed status write.

use std::time::Duration;

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use parking_lot::RwLock;
use protection_core::finalizer::{PhasedFinalizer, has_finalizer, is_deleting};
use protection_core::runtime::inuse::{Engine, Plan, Rule};
use protection_core::runtime::{
    ReconcileError, Settings, list_all, phased_finalizer, watch_config,
};
use protection_core::{ControllerContext, ControllerResult};
use serde_json::json;

use crate::cidr::{self, ALLOCATOR, Cidrs, LABEL_MANAGED_BY, ManagedIp};
use crate::index::{Ranges, cidrs_of, managed};

/// Registered controller name.
pub const NAME: &str = "service-cidr-protection";
/// kube-controller-manager's name for it.
pub const ALIAS: &str = "service-cidr-controller";
/// The field manager of our writes (finalizer patches and the status).
pub const FIELD_MANAGER: &str = "service-cidr-protection-controller";
/// upstream `deletionGracePeriod`.
pub const DELETION_GRACE: Duration = Duration::from_secs(10);
/// `networkingv1.ServiceCIDRConditionReady`.
pub const CONDITION_READY: &str = "Ready";
/// `networkingv1.ServiceCIDRReasonTerminating`.
pub const REASON_TERMINATING: &str = "Terminating";
/// The message of `Ready=True`.
pub const READY_MESSAGE: &str = "Kubernetes Service CIDR is ready";
/// The message of `Ready=False` while IPAddresses hold a deletion.
pub const TERMINATING_MESSAGE: &str = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR";

/// The Ready condition the controller wants on a ServiceCIDR: (status,
/// reason, message).
pub type Ready = (&'static str, &'static str, &'static str);

/// Ready: the range serves.
pub const READY: Ready = ("True", "", READY_MESSAGE);
/// Not ready: deleted, held by IPAddresses.
pub const TERMINATING: Ready = ("False", REASON_TERMINATING, TERMINATING_MESSAGE);

/// The condition a plan asks for (upstream `sync`): `Ready=True` for a
/// ServiceCIDR that carries (or just got) the finalizer and is not being
/// deleted, `Ready=False`/`Terminating` for a held deletion, none otherwise.
pub fn wanted_condition(
    obj: &ServiceCIDR,
    finalizer: &str,
    plan: &Plan<ManagedIp>,
) -> Option<Ready> {
    match plan {
        Plan::Keep(_) => Some(TERMINATING),
        Plan::AddFinalizer => Some(READY),
        Plan::Nothing if !is_deleting(&obj.metadata) && has_finalizer(&obj.metadata, finalizer) => {
            Some(READY)
        }
        _ => None,
    }
}

/// The current Ready condition.
fn ready_condition(obj: &ServiceCIDR) -> Option<&Condition> {
    obj.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == CONDITION_READY))
}

/// upstream `updateConditionIfNeeded`: a write unless the Ready condition
/// already has this status, reason and message.
pub fn needs_write(obj: &ServiceCIDR, (status, reason, message): Ready) -> bool {
    !ready_condition(obj)
        .is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
}

/// How long a free deletion must still wait (upstream's grace after the
/// deletionTimestamp), at `now`.
pub fn grace_left(obj: &ServiceCIDR, now: Timestamp) -> Option<Duration> {
    let deleted = obj.metadata.deletion_timestamp.as_ref()?.0;
    let until = deleted + SignedDuration::try_from(DELETION_GRACE).ok()?;
    let left = until.duration_since(now);
    (left > SignedDuration::ZERO).then(|| Duration::try_from(left).unwrap_or_default())
}

/// The IPAddresses that hold `obj`'s deletion, from the ServiceCIDRs `others`
/// (every one but `obj`) and the allocator's `ips`.
pub fn users<'a>(
    obj: &ServiceCIDR,
    others: Vec<Cidrs<'_>>,
    ips: impl IntoIterator<Item = &'a ManagedIp>,
) -> Vec<ManagedIp> {
    let name = obj.name_any();
    let own = cidrs_of(obj);
    let mut all = others;
    all.push((&name, &own));
    cidr::blocking_ips(&name, &own, &all, ips)
        .into_iter()
        .cloned()
        .collect()
}

/// One live round: every ServiceCIDR and the allocator's IPAddresses.
pub struct Live {
    cidrs: Vec<(String, Vec<String>)>,
    ips: Vec<ManagedIp>,
}

/// The rule: a ServiceCIDR is "used" by the IPAddresses that would be left
/// without a range; a deletion is confirmed cluster-wide.
pub struct ServiceCidrRule {
    finalizer: String,
}

impl ServiceCidrRule {
    pub fn new(finalizer: &str) -> Self {
        ServiceCidrRule {
            finalizer: finalizer.to_string(),
        }
    }

    /// Writes `ready` by server-side apply of the status, if needed.
    async fn set_ready(
        &self,
        client: &kube::Client,
        obj: &ServiceCIDR,
        ready: Ready,
    ) -> Result<(), ReconcileError> {
        if !needs_write(obj, ready) {
            return Ok(());
        }
        let name = obj.name_any();
        let (status, reason, message) = ready;
        tracing::debug!(controller = NAME, servicecidr = %name, status, reason, "updating the Ready condition");
        let body = json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "ServiceCIDR",
            "metadata": {"name": name},
            "status": {"conditions": [{
                "type": CONDITION_READY,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": Timestamp::now(),
            }]},
        });
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        match Api::<ServiceCIDR>::all(client.clone())
            .patch_status(&name, &pp, &Patch::Apply(body))
            .await
        {
            Ok(_) => Ok(()),
            // Gone meanwhile: nothing to report on.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(ReconcileError::Write {
                what: format!("status of servicecidr {name}"),
                source,
            }),
        }
    }
}

/// The note naming the IPAddresses that hold a deletion.
pub fn held_note(name: &str, users: &[ManagedIp]) -> String {
    const NAMED: usize = 5;
    let mut names: Vec<String> = users.iter().take(NAMED).map(|u| u.name.clone()).collect();
    if users.len() > NAMED {
        names.push(format!("and {} more", users.len() - NAMED));
    }
    format!(
        "ServiceCIDR {name} is the only range of the IPAddresses {}; deletion waits until they are released or another ServiceCIDR contains them",
        names.join(", ")
    )
}

impl Rule for ServiceCidrRule {
    type Object = ServiceCIDR;
    type Use = ManagedIp;
    type Index = Ranges;
    type Live = Live;

    fn name(&self) -> &'static str {
        NAME
    }
    fn kind(&self) -> &'static str {
        "ServiceCIDR"
    }
    fn unused(&self) -> &'static str {
        "no IPAddress would be left without a ServiceCIDR"
    }
    fn api(&self, client: &kube::Client, _: &ServiceCIDR) -> Api<ServiceCIDR> {
        Api::all(client.clone())
    }
    fn scope(&self, _: &ServiceCIDR) -> String {
        String::new()
    }
    fn cached_users(&self, index: &Ranges, obj: &ServiceCIDR) -> Vec<ManagedIp> {
        users(obj, index.others(&obj.name_any()), index.ips())
    }
    async fn list_live(
        &self,
        client: &kube::Client,
        _: &str,
        _: &RwLock<Ranges>,
    ) -> Result<Live, ReconcileError> {
        let cidrs = list_all(
            &Api::<ServiceCIDR>::all(client.clone()),
            &ListParams::default(),
            "servicecidrs",
        )
        .await?;
        let ips = list_all(
            &Api::<IPAddress>::all(client.clone()),
            &ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={ALLOCATOR}")),
            "ipaddresses",
        )
        .await?;
        Ok(Live {
            cidrs: cidrs.iter().map(|s| (s.name_any(), cidrs_of(s))).collect(),
            ips: ips.iter().filter_map(managed).collect(),
        })
    }
    fn live_users(&self, live: &Live, obj: &ServiceCIDR) -> Vec<ManagedIp> {
        let name = obj.name_any();
        let others = live
            .cidrs
            .iter()
            .filter(|(n, _)| *n != name)
            .map(|(n, c)| (n.as_str(), c.as_slice()))
            .collect();
        users(obj, others, &live.ips)
    }
    fn held_note(&self, obj: &ServiceCIDR, users: &[ManagedIp]) -> String {
        held_note(&obj.name_any(), users)
    }
    fn released_note(&self, obj: &ServiceCIDR, finalizer: &str) -> String {
        format!(
            "ServiceCIDR {} leaves no IPAddress without a range; removed finalizer {finalizer} so its deletion can complete",
            obj.name_any()
        )
    }
    fn wanted(&self, f: &PhasedFinalizer, obj: &ServiceCIDR) -> bool {
        let meta = &obj.metadata;
        f.needs_add(meta)
            || f.is_deletion_candidate(meta)
            || (has_finalizer(meta, f.name()) && !is_deleting(meta) && needs_write(obj, READY))
    }
    fn release_after(&self, obj: &ServiceCIDR) -> Option<Duration> {
        grace_left(obj, Timestamp::now())
    }
    async fn after(
        &self,
        client: &kube::Client,
        obj: &ServiceCIDR,
        plan: &Plan<ManagedIp>,
    ) -> Result<(), ReconcileError> {
        match wanted_condition(obj, &self.finalizer, plan) {
            Some(ready) => self.set_ready(client, obj, ready).await,
            None => Ok(()),
        }
    }
}

/// The readiness detail while the cluster serves no ServiceCIDR API.
pub const NO_API_NOTE: &str =
    "idle: the cluster serves no networking.k8s.io/v1 ServiceCIDR and IPAddress API";
/// How often an idle controller looks for the API again.
const REDISCOVER: Duration = Duration::from_secs(60);

/// Whether networking.k8s.io/v1 serves servicecidrs and ipaddresses (a 404
/// for the group version is "no"); retried while the API server cannot
/// answer, `None` on shutdown.
async fn served(ctx: &ControllerContext) -> Option<bool> {
    let mut delay = Duration::from_millis(500);
    loop {
        match ctx
            .client
            .list_api_group_resources("networking.k8s.io/v1")
            .await
        {
            Ok(list) => {
                let has = |n: &str| list.resources.iter().any(|r| r.name == n);
                return Some(has("servicecidrs") && has("ipaddresses"));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Some(false),
            Err(e) => {
                tracing::warn!(controller = NAME, error = %e, retry_in = ?delay, "API discovery failed; retrying");
                tokio::select! {
                    _ = ctx.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// Runs the controller until `ctx.shutdown`; idle (ready, saying why)
/// while the cluster serves no ServiceCIDR API.
pub async fn run(ctx: ControllerContext, settings: Settings) -> ControllerResult {
    let mut warned = false;
    loop {
        match served(&ctx).await {
            None => return Ok(()),
            Some(true) => break,
            Some(false) => {
                if !warned {
                    tracing::warn!(
                        controller = NAME,
                        "the cluster serves no networking.k8s.io/v1 ServiceCIDR API; service-cidr-protection does nothing until it does"
                    );
                    warned = true;
                }
                if !protection_core::runtime::idle_while_unserved(&ctx, NO_API_NOTE, REDISCOVER)
                    .await
                {
                    return Ok(());
                }
            }
        }
    }
    ctx.ready.set_note(None);
    let finalizer = phased_finalizer(
        &ctx,
        &settings.finalizer,
        &crate::MULTI_CIDR_SERVICE_ALLOCATOR,
        FIELD_MANAGER,
    )?;
    let engine = Engine::new(
        &ctx,
        ServiceCidrRule::new(&settings.finalizer),
        finalizer,
        settings,
    );
    engine.watch_users(
        Api::<ServiceCIDR>::all(ctx.client.clone()),
        watch_config(),
        "servicecidrs",
    );
    engine.watch_users(
        Api::<IPAddress>::all(ctx.client.clone()),
        watch_config().labels(&format!("{LABEL_MANAGED_BY}={ALLOCATOR}")),
        "ipaddresses",
    );
    engine.run(&ctx, Api::all(ctx.client.clone())).await
}

#[cfg(test)]
mod tests {
    //! upstream `TestControllerSync`, row for row: the requests one sync of
    //! a ServiceCIDR makes (`patch servicecidrs` for the finalizer, `patch
    //! servicecidrs/status` for the condition), from the decision, the
    //! grace and the condition.
    use super::*;
    use crate::cidr::tests::ip;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use protection_core::runtime::inuse::decide;

    const F: &str = "networking.k8s.io/service-cidr-finalizer";

    fn service_cidr(name: &str, primary: &str, secondary: &str) -> ServiceCIDR {
        let mut c = vec![primary];
        if !secondary.is_empty() {
            c.push(secondary);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"cidrs": c}}))
            .expect("servicecidr")
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Action {
        Patch,
        PatchStatus,
    }

    /// The requests of one sync of `synced` at `now` (no live round:
    /// upstream's informers are its whole view, and the live round sees the
    /// same objects here).
    fn sync(
        now: Timestamp,
        synced: &ServiceCIDR,
        cidrs: &[ServiceCIDR],
        ips: &[ManagedIp],
    ) -> Vec<Action> {
        let name = synced.name_any();
        let owned: Vec<(String, Vec<String>)> = cidrs
            .iter()
            .filter(|c| c.name_any() != name)
            .map(|c| (c.name_any(), cidrs_of(c)))
            .collect();
        let others = owned
            .iter()
            .map(|(n, c)| (n.as_str(), c.as_slice()))
            .collect();
        let cached = users(synced, others, ips);
        let mut plan = decide(&synced.metadata, F, true, &cached, None);
        if plan == Plan::ConfirmLive {
            if grace_left(synced, now).is_some() {
                return vec![];
            }
            plan = decide(&synced.metadata, F, true, &cached, Some(&cached));
        }
        let mut out = Vec::new();
        if matches!(plan, Plan::AddFinalizer | Plan::RemoveFinalizer) {
            out.push(Action::Patch);
        }
        if wanted_condition(synced, F, &plan).is_some_and(|r| needs_write(synced, r)) {
            out.push(Action::PatchStatus);
        }
        out
    }

    /// (name, the synced ServiceCIDR, the others, the IPAddresses, requests)
    type Row = (
        &'static str,
        ServiceCIDR,
        Vec<ServiceCIDR>,
        Vec<ManagedIp>,
        Vec<Action>,
    );

    #[test]
    fn controller_sync() {
        use Action::*;
        let now = Timestamp::now();
        let deleting_at = |t: Timestamp| {
            let mut s = service_cidr("deleted-cidr", "192.168.0.0/24", "2001:db2::/64");
            s.metadata.finalizers = Some(vec![F.into()]);
            s.metadata.deletion_timestamp = Some(Time(t));
            s
        };
        let deleting = deleting_at(now);
        let deleted = deleting_at(now - SignedDuration::from_secs(11));
        let overlapping = |v4, v6| service_cidr("overlapping", v4, v6);
        let rows: Vec<Row> = vec![
            (
                "default service CIDR must have finalizer",
                service_cidr("kubernetes", "192.168.0.0/24", "2001:db2::/64"),
                vec![],
                vec![],
                vec![Patch, PatchStatus],
            ),
            (
                "service CIDR must have finalizer",
                service_cidr("no-finalizer", "192.168.0.0/24", "2001:db2::/64"),
                vec![],
                vec![],
                vec![Patch, PatchStatus],
            ),
            (
                "service CIDR being deleted must remove the finalizer",
                deleted.clone(),
                vec![],
                vec![],
                vec![Patch],
            ),
            (
                "service CIDR being deleted but within the grace period must be requeued not remove the finalizer",
                deleting,
                vec![],
                vec![],
                vec![],
            ),
            (
                "service CIDR being deleted with IPv4 addresses should update the status",
                deleted.clone(),
                vec![],
                vec![ip("192.168.0.1")],
                vec![PatchStatus],
            ),
            (
                "service CIDR being deleted and overlapping same range and IPv4 addresses should remove the finalizer",
                deleted.clone(),
                vec![overlapping("192.168.0.0/24", "2001:db2::/64")],
                vec![ip("192.168.0.1")],
                vec![Patch],
            ),
            (
                "service CIDR being deleted and overlapping and IPv4 addresses should remove the finalizer",
                deleted.clone(),
                vec![overlapping("192.168.0.0/16", "2001:db2::/64")],
                vec![ip("192.168.0.1")],
                vec![Patch],
            ),
            (
                "service CIDR being deleted and not overlapping and IPv4 addresses should update the status",
                deleted.clone(),
                vec![overlapping("192.168.255.0/26", "2001:db2::/64")],
                vec![ip("192.168.0.1")],
                vec![PatchStatus],
            ),
            (
                "service CIDR being deleted with IPv6 addresses should update the status",
                deleted.clone(),
                vec![],
                vec![ip("2001:db2::1")],
                vec![PatchStatus],
            ),
            (
                "service CIDR being deleted and overlapping same range and IPv6 addresses should remove the finalizer",
                deleted.clone(),
                vec![overlapping("192.168.0.0/24", "2001:db2::/64")],
                vec![ip("2001:db2::1")],
                vec![Patch],
            ),
            (
                "service CIDR being deleted and overlapping and IPv6 addresses should remove the finalizer",
                deleted.clone(),
                vec![overlapping("192.168.0.0/16", "2001:db2::/48")],
                vec![ip("2001:db2::1")],
                vec![Patch],
            ),
            (
                "service CIDR being deleted and not overlapping and IPv6 addresses should update the status",
                deleted.clone(),
                vec![overlapping("192.168.255.0/26", "2001:db2:a:b::/64")],
                vec![ip("2001:db2::1")],
                vec![PatchStatus],
            ),
        ];
        for (what, synced, others, ips, want) in rows {
            let mut cidrs = others;
            cidrs.push(synced.clone());
            assert_eq!(sync(now, &synced, &cidrs, &ips), want, "{what}");
        }
    }

    #[test]
    fn a_condition_already_in_place_is_not_written_again() {
        let mut s = service_cidr("a", "10.0.0.0/24", "");
        s.metadata.finalizers = Some(vec![F.into()]);
        assert!(needs_write(&s, READY));
        s.status = Some(
            serde_json::from_value(json!({"conditions": [{
            "type": "Ready", "status": "True", "reason": "", "message": READY_MESSAGE,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
            .expect("status"),
        );
        assert!(!needs_write(&s, READY));
        assert!(needs_write(&s, TERMINATING));
        assert_eq!(wanted_condition(&s, F, &Plan::Nothing), Some(READY));
        assert_eq!(
            wanted_condition(&s, "other/finalizer", &Plan::Nothing),
            None,
            "not ours"
        );
    }

    #[test]
    fn the_grace_counts_from_the_deletion_timestamp() {
        let now = Timestamp::now();
        let mut s = service_cidr("a", "10.0.0.0/24", "");
        assert_eq!(grace_left(&s, now), None, "not being deleted");
        s.metadata.deletion_timestamp = Some(Time(now - SignedDuration::from_secs(4)));
        assert_eq!(grace_left(&s, now), Some(Duration::from_secs(6)));
        s.metadata.deletion_timestamp = Some(Time(now - SignedDuration::from_secs(10)));
        assert_eq!(grace_left(&s, now), None);
    }

    #[test]
    fn the_held_note_names_five_addresses_then_counts() {
        let ips: Vec<ManagedIp> = (1..=7).map(|i| ip(&format!("10.0.0.{i}"))).collect();
        assert_eq!(
            held_note("a", &ips),
            "ServiceCIDR a is the only range of the IPAddresses 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, and 2 more; deletion waits until they are released or another ServiceCIDR contains them"
        );
    }
}

//! Chaos: two manager replicas with leader election, a churn of claims,
//! volumes, pods, load-balancer Services, VolumeAttributesClasses (named
//! by claims, volumes and pending modifications; vac-protection's Alpha gate
//! on), Secrets under a ProtectionRule and ServiceCIDRs holding the cluster
//! IPs of Services (service-cidr-protection's Alpha gate on), kube-sim faults (5xx, 409,
//! watch cuts, forced 410 on the manager's watches), cloud-sim faults, and
//! SIGKILL of the leader at random points; the [`invariants`] are checked
//! continuously and at the end.
//!
//! Seeded: the churn's choices, the kill times and every fault decision
//! come from `seed` (kube-sim's and cloud-sim's fault generators are seeded
//! from it too). The interleaving with the manager's own timing is not
//! reproducible bit for bit, but a failing seed re-run is the same workload
//! under the same faults.
//!
//! [`invariants`]: crate::invariants

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::error::{Error, KubeContext, Result};
use crate::harness::Harness;
use crate::invariants::{CONVERGENCE_BOUND, Kill};
use crate::monitor::{Monitor, MonitorReport, MonitorSettings};
use crate::objects;
use crate::release::{CONTAINER, LB_CLASS, ManagerRelease};

/// Which finalizer names, and who adds them first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The chart's defaults: `project` names and createTimeProtection=auto,
    /// so the chart's MutatingAdmissionPolicy adds the finalizers at creation
    /// where the cluster serves the API (kube-sim does; Kubernetes 1.36, or
    /// 1.34-1.35 with the API on). With the policy installed every claim and
    /// volume carries its finalizer from creation, and a deletion in the
    /// creation window is a violation (invariant 1 for all of them). Where
    /// the API is missing, the manager adds them after creation: a claim
    /// created and deleted before that is unprotected by design
    /// (crates/pv-protection/README.md) and counted, not a violation.
    Project,
    /// `project` names with createTimeProtection=false: the manager adds
    /// them after creation; the creation window is counted.
    ProjectWithoutPolicy,
    /// `finalizerProfile=upstream` with kube-sim's StorageObjectInUseProtection
    /// admission emulation on, as a cluster whose built-in controllers are
    /// off: every claim and volume carries its finalizer from creation, and
    /// invariant 1 must hold for all of them (sim only).
    UpstreamWithAdmission,
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Profile::Project => {
                "project finalizers (chart defaults: the create-time policy where served)"
            }
            Profile::ProjectWithoutPolicy => {
                "project finalizers added by the manager (createTimeProtection=false)"
            }
            Profile::UpstreamWithAdmission => {
                "upstream finalizers added at creation by the admission plugin"
            }
        })
    }
}

/// How a chaos run is shaped.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub seed: u64,
    pub profile: Profile,
    /// How long the churn runs under faults.
    pub duration: Duration,
    /// The chart's leaderElection values.
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// A kill happens at a random point in this window after the previous
    /// leadership move completed.
    pub kill_after: (Duration, Duration),
    /// Pause between churn operations (random in this range).
    pub op_interval: (Duration, Duration),
    /// At most this many live objects of each kind.
    pub max_live: usize,
    /// Fraction of the manager's requests answered 500/503 (sim).
    pub error_fraction: f64,
    /// Fraction of the manager's patches answered 409 (sim).
    pub conflict_fraction: f64,
    /// Fraction of cloud-sim calls that fail.
    pub cloud_error_rate: f64,
    /// Churn VolumeAttributesClasses too, with vac-protection's gate on
    /// (where the cluster serves storage.k8s.io/v1 VolumeAttributesClass).
    pub classes: bool,
    /// Install the chart's `secrets-used-by-pods` ProtectionRule (gate
    /// InUseProtectionRules on) and churn Secrets mounted by pods.
    pub secrets: bool,
    /// Churn ServiceCIDRs and ClusterIP Services whose addresses they hold,
    /// with service-cidr-protection's gate (MultiCIDRServiceAllocator) on;
    /// the ranges and addresses are of [`CHURN_SERVICE_CIDR_BLOCK`] (in
    /// cluster mode, only where no other ServiceCIDR meets it).
    pub service_cidrs: bool,
    /// On a real cluster this process started ([`crate::real`]): a fault of
    /// the cluster itself at a random point in this window after the
    /// previous one (see [`RealFault`]).
    pub real_fault_after: (Duration, Duration),
}

/// The faults of a real cluster (`make chaos-real`), instead of kube-sim's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealFault {
    /// SIGKILL to a node's kubelet process; it is started again a second
    /// later and adopts the containers that kept running.
    KillKubelet,
    /// kube-apiserver stopped and started again (every watch and request
    /// of every client breaks).
    RestartApiServer,
    /// etcd stopped and started again, its data kept.
    RestartEtcd,
    /// kube-apiserver stopped (SIGSTOP) for 2-5 s, then continued: requests
    /// hang, as behind a network partition.
    StallApiServer,
}

impl RealFault {
    const ALL: [RealFault; 4] = [
        RealFault::KillKubelet,
        RealFault::RestartApiServer,
        RealFault::RestartEtcd,
        RealFault::StallApiServer,
    ];

    /// The next fault: each kind once per round of [`RealFault::ALL`], in
    /// a seeded order, so that a short run's few faults are of different
    /// kinds (a uniform draw gave a 60-s run two stalls and no restart).
    fn draw(deck: &mut Vec<RealFault>, rng: &mut StdRng) -> RealFault {
        if deck.is_empty() {
            deck.extend(RealFault::ALL);
            deck.shuffle(rng);
        }
        deck.pop().unwrap_or(RealFault::StallApiServer)
    }

    fn name(self) -> &'static str {
        match self {
            RealFault::KillKubelet => "SIGKILL of a kubelet",
            RealFault::RestartApiServer => "kube-apiserver restart",
            RealFault::RestartEtcd => "etcd restart (data kept)",
            RealFault::StallApiServer => "kube-apiserver SIGSTOP/SIGCONT stall",
        }
    }
}

/// The chart values that install the `secrets-used-by-pods` example rule
/// and turn its finalizer's addition on.
pub const SECRET_RULE_VALUES: [&str; 2] = [
    "rules.examples.secretsUsedByPods=true",
    "featureGates.InUseProtectionRules=true",
];
/// The example rule's name (charts/protection-manager/templates/protection-rules.yaml).
pub const SECRET_RULE: &str = "secrets-used-by-pods";
/// The chart value that turns service-cidr-protection's finalizer addition
/// on (Alpha, off by default at release 0.5).
pub const SERVICE_CIDR_GATE_ON: &str = "featureGates.MultiCIDRServiceAllocator=true";
/// Every range the churn creates and every cluster IP it names is inside
/// this block, outside the service ranges of the clusters it runs on
/// (kube-sim's, and the real control plane's `--service-cluster-ip-range`
/// 10.96.0.0/16 of crates/control-plane).
pub const CHURN_SERVICE_CIDR_BLOCK: &str = "10.200.0.0/16";

impl ChaosConfig {
    /// The short run of `make test` (about 1.5 minutes in all): a shorter
    /// lease (8 s / 5 s / 2 s) so that several leadership moves fit.
    pub fn short(seed: u64) -> ChaosConfig {
        ChaosConfig {
            seed,
            profile: Profile::Project,
            duration: Duration::from_secs(60),
            lease_duration: Duration::from_secs(8),
            renew_deadline: Duration::from_secs(5),
            retry_period: Duration::from_secs(2),
            kill_after: (Duration::from_secs(4), Duration::from_secs(10)),
            op_interval: (Duration::from_millis(50), Duration::from_millis(250)),
            max_live: 12,
            error_fraction: 0.05,
            conflict_fraction: 0.05,
            cloud_error_rate: 0.1,
            classes: true,
            secrets: true,
            service_cidrs: true,
            real_fault_after: (Duration::from_secs(5), Duration::from_secs(10)),
        }
    }

    /// The short run on a real cluster (`make test`): the chart's default
    /// lease timings, since a kube-apiserver restart takes longer than the
    /// short run's 5 s renew deadline.
    pub fn real_short(seed: u64) -> ChaosConfig {
        ChaosConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            ..ChaosConfig::short(seed)
        }
    }

    /// The long run of `make chaos`: the chart's default lease timings.
    pub fn long(seed: u64, duration: Duration) -> ChaosConfig {
        ChaosConfig {
            seed,
            profile: Profile::Project,
            duration,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            kill_after: (Duration::from_secs(5), Duration::from_secs(25)),
            op_interval: (Duration::from_millis(50), Duration::from_millis(300)),
            max_live: 25,
            error_fraction: 0.05,
            conflict_fraction: 0.05,
            cloud_error_rate: 0.1,
            classes: true,
            secrets: true,
            service_cidrs: true,
            real_fault_after: (Duration::from_secs(8), Duration::from_secs(25)),
        }
    }

    /// The chart values: two replicas, the leader election timings, the
    /// finalizer profile.
    pub fn values(&self) -> Vec<String> {
        let profile = match self.profile {
            Profile::Project | Profile::ProjectWithoutPolicy => "project",
            Profile::UpstreamWithAdmission => "upstream",
        };
        let create_time = match self.profile {
            Profile::ProjectWithoutPolicy => "false",
            _ => "auto",
        };
        vec![
            "replicaCount=2".to_string(),
            format!("finalizerProfile={profile}"),
            format!("createTimeProtection.enabled={create_time}"),
            format!(
                "leaderElection.leaseDuration={}s",
                self.lease_duration.as_secs()
            ),
            format!(
                "leaderElection.renewDeadline={}s",
                self.renew_deadline.as_secs()
            ),
            format!(
                "leaderElection.retryPeriod={}s",
                self.retry_period.as_secs()
            ),
        ]
        .into_iter()
        .chain(
            self.classes
                .then(|| crate::scenarios::vac::GATE_ON.to_string()),
        )
        .chain(
            SECRET_RULE_VALUES
                .iter()
                .filter(|_| self.secrets)
                .map(|v| v.to_string()),
        )
        .chain(self.service_cidrs.then(|| SERVICE_CIDR_GATE_ON.to_string()))
        .collect()
    }
}

/// What a chaos run did and checked.
#[derive(Debug, Clone)]
pub struct ChaosReport {
    pub seed: u64,
    pub profile: Profile,
    /// The chart's leaderElection.leaseDuration of the run.
    pub lease_duration: Duration,
    /// The create-time MutatingAdmissionPolicies the chart installed (none:
    /// the creation window was counted, not a violation).
    pub create_time_policies: Vec<String>,
    pub fault_phase: Duration,
    pub total: Duration,
    /// Churn operations by name (successful / failed).
    pub ops: BTreeMap<String, (u64, u64)>,
    pub kube_faults: BTreeMap<String, u64>,
    pub watch_cuts: u64,
    pub forced_gone: u64,
    pub cloud_stats: Value,
    pub kills: Vec<Kill>,
    /// Kills put off because no standby was Ready yet.
    pub kills_postponed: u64,
    /// The real cluster's faults injected, by kind (chaos-real).
    pub real_faults: BTreeMap<String, u64>,
    /// Kubelet restarts after a crash (chaos-real).
    pub kubelet_restarts: u64,
    pub monitor: MonitorReport,
    pub cleanup: Duration,
    /// The kinds the churn covered beside claims, volumes, pods and
    /// Services (a cluster that does not serve one skips it, with a note).
    pub classes: bool,
    pub secrets: bool,
    pub service_cidrs: bool,
}

impl ChaosReport {
    /// What a run on a real cluster must show: no violation, a leader
    /// killed, the real cluster's own faults injected, the churn's
    /// protections exercised; records the counts as verified.
    pub fn check(&self, h: &Harness) -> Result<()> {
        let seed = self.seed;
        self.monitor
            .ok()
            .map_err(|e| Error::Check(format!("seed {seed}: {e}")))?;
        if self.kills.is_empty() {
            return Err(Error::Check(format!(
                "no leader was killed during the run (seed {seed})"
            )));
        }
        if h.real().is_some() && self.real_faults.is_empty() {
            return Err(Error::Check(format!(
                "no fault of the real cluster was injected (seed {seed})"
            )));
        }
        self.record_verified(h);
        Ok(())
    }

    /// Each protection the churn covered was exercised: deletions of its
    /// kind checked, and one at least held while in use.
    pub fn check_coverage(&self) -> Result<()> {
        let c = &self.monitor.counts;
        let seed = self.seed;
        let kinds = [
            (
                self.classes,
                "VolumeAttributesClass protection",
                "class",
                c.vac_deletions_checked,
                c.vacs_held_while_in_use,
            ),
            (
                self.secrets,
                "ProtectionRule",
                "Secret",
                c.secret_deletions_checked,
                c.secrets_held_while_in_use,
            ),
            (
                self.service_cidrs,
                "ServiceCIDR protection",
                "ServiceCIDR",
                c.service_cidr_deletions_checked,
                c.service_cidrs_held_while_in_use,
            ),
        ];
        for (churned, what, kind, checked, held) in kinds {
            if churned && (checked == 0 || held == 0) {
                return Err(Error::Check(format!(
                    "the churn exercised no {what}: {checked} {kind} deletions checked, {held} held while in use (seed {seed})"
                )));
            }
        }
        Ok(())
    }

    /// Records on `h` what the run verified, with the counts behind each
    /// invariant.
    pub fn record_verified(&self, h: &Harness) {
        let c = &self.monitor.counts;
        h.verified(format!(
            "no claim or volume disappeared in use: {} PVC and {} PV deletions checked ({} PVCs and {} PVs held Terminating while in use; {} claims and {} volumes deleted in use before any finalizer, the creation window{})",
            c.pvc_deletions_checked, c.pv_deletions_checked, c.pvcs_held_while_in_use, c.pvs_held_while_bound, c.unprotected_pvcs_deleted_in_use, c.unprotected_pvs_deleted_bound,
            if self.create_time_policies.is_empty() { "" } else { ", closed by the create-time policy" }
        ));
        // Only the kinds the churn covered (the others were noted skipped).
        if self.classes {
            h.verified(format!(
                "no VolumeAttributesClass disappeared while a claim or volume named it: {} class deletions checked ({} held Terminating while in use; {} deleted in use before any finalizer, the creation window)",
                c.vac_deletions_checked, c.vacs_held_while_in_use, c.unprotected_vacs_deleted_in_use
            ));
        }
        if self.secrets {
            h.verified(format!(
                "no Secret under the secrets-used-by-pods ProtectionRule disappeared while a running pod referred to it: {} Secret deletions checked ({} held Terminating while in use; {} deleted in use before any finalizer, the creation window); deleting the rule left no finalizer",
                c.secret_deletions_checked, c.secrets_held_while_in_use, c.unprotected_secrets_deleted_in_use
            ));
        }
        if self.service_cidrs {
            h.verified(format!(
                "no ServiceCIDR disappeared while the only range of an allocated IPAddress: {} ServiceCIDR deletions checked ({} held Terminating while in use; {} released with their addresses in another range; {} released with a Terminating container, as upstream's rule allows; {} deleted in use before any finalizer, the creation window)",
                c.service_cidr_deletions_checked, c.service_cidrs_held_while_in_use, c.service_cidrs_released_with_addresses_contained_elsewhere, c.service_cidrs_released_with_terminating_container, c.unprotected_service_cidrs_deleted_in_use
            ));
        }
        h.verified(format!(
            "no orphaned load balancer: {} Service deletions and {} inventory sweeps checked",
            c.service_deletions_checked, c.cloud_sweeps
        ));
        h.verified(format!(
            "finalizers converged after calm: {} objects released, the slowest in {:.2}s (bound 30s)",
            c.converged_after_calm,
            c.max_convergence.map_or(0.0, |d| d.as_secs_f64())
        ));
        h.verified(format!(
            "leadership moved after each of {} leader kills, the slowest {:.2}s after the last renewal (bound lease {}s + {}s)",
            self.kills.len(),
            c.max_failover.map_or(0.0, |d| d.as_secs_f64()),
            self.lease_duration.as_secs(),
            self.monitor.tolerance.as_secs()
        ));
    }

    /// The printable report.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![
            format!(
                "chaos seed {} (re-run with the same seed for the same workload and faults)",
                self.seed
            ),
            format!("finalizers: {}", self.profile),
            if self.profile == Profile::UpstreamWithAdmission {
                "create-time policy: not rendered (upstream profile: the admission plugin adds the finalizers; a deletion in the creation window is a violation)".to_string()
            } else if self.create_time_policies.is_empty() {
                "create-time policy: none (deletions in the creation window are counted, not violations)".to_string()
            } else {
                format!(
                    "create-time policy: {} (a deletion in the creation window is a violation)",
                    self.create_time_policies.join(", ")
                )
            },
            format!(
                "fault phase {:.0}s, cleanup {:.1}s, total {:.0}s",
                self.fault_phase.as_secs_f64(),
                self.cleanup.as_secs_f64(),
                self.total.as_secs_f64()
            ),
        ];
        let ops: Vec<String> = self
            .ops
            .iter()
            .map(|(k, (ok, err))| {
                if *err > 0 {
                    format!("{k} {ok} (+{err} refused)")
                } else {
                    format!("{k} {ok}")
                }
            })
            .collect();
        out.push(format!("churn: {}", ops.join(", ")));
        let counted = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.kube_faults.is_empty() || self.watch_cuts > 0 {
            out.push(format!(
                "kube-sim faults injected: {}; watch cuts {}; forced 410 on the manager's watches {}",
                counted(&self.kube_faults),
                self.watch_cuts,
                self.forced_gone
            ));
        }
        if !self.real_faults.is_empty() {
            out.push(format!(
                "real-cluster faults injected: {}; kubelet restarts {}",
                counted(&self.real_faults),
                self.kubelet_restarts
            ));
        }
        out.push(format!("cloud-sim: {}", self.cloud_stats));
        out.push(format!(
            "leader kills {} (tolerance beyond the lease duration: {:.0}s; {} kill attempts waited for a Ready standby)",
            self.kills.len(),
            self.monitor.tolerance.as_secs_f64(),
            self.kills_postponed
        ));
        for m in &self.monitor.moves {
            out.push(format!(
                "  {} -> {}: last renew {} acquired {} ({:.2}s)",
                m.killed,
                m.new_holder,
                m.last_renew,
                m.acquired,
                m.failover.as_secs_f64()
            ));
        }
        out.push(format!(
            "observer watch gaps (410 re-lists): {}",
            self.monitor.gaps
        ));
        out.push("invariant counts:".into());
        out.extend(
            self.monitor
                .counts
                .lines()
                .into_iter()
                .map(|l| format!("  {l}")),
        );
        out.push(format!("violations: {}", self.monitor.violations.len()));
        for v in &self.monitor.violations {
            out.push(format!("  - {v}"));
        }
        out
    }
}

#[derive(Debug, Clone)]
struct Claim {
    name: String,
    deleted: bool,
}

#[derive(Debug, Clone)]
struct PodRec {
    name: String,
    deleted: bool,
}

#[derive(Debug, Clone)]
struct Svc {
    name: String,
    deleted: bool,
    lb: bool,
}

/// What the churn has created (its own view; the invariants use the API's).
#[derive(Debug, Default)]
struct Model {
    claims: Vec<Claim>,
    pods: Vec<PodRec>,
    pvs: Vec<(String, bool)>,
    services: Vec<Svc>,
    /// VolumeAttributesClasses: (name, deleted).
    classes: Vec<(String, bool)>,
    /// Secrets under the rule: (name, deleted).
    secrets: Vec<(String, bool)>,
    /// ServiceCIDRs: (name, CIDR, deleted).
    service_cidrs: Vec<(String, String, bool)>,
    /// ClusterIP Services with an address in one of them: (name, deleted,
    /// the index of the ServiceCIDR asked).
    cidr_services: Vec<(String, bool, usize)>,
    next: u64,
}

impl Model {
    fn live_claims(&self) -> Vec<usize> {
        (0..self.claims.len())
            .filter(|&i| !self.claims[i].deleted)
            .collect()
    }
    fn live_pods(&self) -> Vec<usize> {
        (0..self.pods.len())
            .filter(|&i| !self.pods[i].deleted)
            .collect()
    }
    fn live_services(&self) -> Vec<usize> {
        (0..self.services.len())
            .filter(|&i| !self.services[i].deleted)
            .collect()
    }
    fn live_pvs(&self) -> Vec<usize> {
        (0..self.pvs.len()).filter(|&i| !self.pvs[i].1).collect()
    }
    fn live_classes(&self) -> Vec<usize> {
        (0..self.classes.len())
            .filter(|&i| !self.classes[i].1)
            .collect()
    }
    fn live_secrets(&self) -> Vec<usize> {
        (0..self.secrets.len())
            .filter(|&i| !self.secrets[i].1)
            .collect()
    }
    fn live_service_cidrs(&self) -> Vec<usize> {
        (0..self.service_cidrs.len())
            .filter(|&i| !self.service_cidrs[i].2)
            .collect()
    }
    fn live_cidr_services(&self) -> Vec<usize> {
        (0..self.cidr_services.len())
            .filter(|&i| !self.cidr_services[i].1)
            .collect()
    }
    fn name(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}-{}", self.next)
    }
}

struct Churn<'a> {
    h: &'a Harness,
    ns: String,
    client: Client,
    rng: StdRng,
    model: Model,
    ops: BTreeMap<String, (u64, u64)>,
    max_live: usize,
    classes: bool,
    secrets: bool,
    service_cidrs: bool,
    /// Real-cluster faults make the API unavailable at times: count those
    /// failures instead of ending the run.
    tolerate_unavailable: bool,
}

/// Whether `e` says the API server was unreachable or unavailable (not an
/// answer about the request itself).
fn unavailable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429,
        _ => true,
    }
}

fn obj<K: serde::de::DeserializeOwned>(v: Value) -> Result<K> {
    serde_json::from_value(v).map_err(|e| Error::Check(format!("object json: {e}")))
}

impl<'a> Churn<'a> {
    /// Deletes one object by name and counts the outcome under `op`.
    async fn delete_counted<K>(&mut self, api: Api<K>, name: &str, op: &str) -> Result<()>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let r = api.delete(name, &DeleteParams::default()).await.map(|_| ());
        self.count(op, r)?;
        Ok(())
    }

    fn count(&mut self, op: &str, r: std::result::Result<(), kube::Error>) -> Result<bool> {
        if self.tolerate_unavailable
            && let Err(err) = &r
            && unavailable(err)
        {
            // The API server is restarting, stalled or lost its etcd: the
            // request may or may not have taken effect. The model assumes
            // it did; the cleanup sweeps whatever is left either way.
            self.ops
                .entry(format!("{op} (outcome unknown: API unavailable)"))
                .or_insert((0, 0))
                .0 += 1;
            return Ok(true);
        }
        let e = self.ops.entry(op.to_string()).or_insert((0, 0));
        match r {
            Ok(()) => {
                e.0 += 1;
                Ok(true)
            }
            // The churn's own client is never faulted; conflicts and
            // not-found answers come from racing the cluster (a pod the
            // kubelet already removed), which a user sees too.
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {
                e.1 += 1;
                Ok(false)
            }
            Err(err) => Err(Error::Kube {
                context: format!("churn {op}"),
                source: Box::new(err),
            }),
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }
    fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }
    fn pvs(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }
    fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn create_pod(&mut self, claims: Vec<String>) -> Result<()> {
        let name = self.model.name("pod");
        let refs: Vec<&str> = claims.iter().map(String::as_str).collect();
        let p: Pod = obj(objects::pod_with_claims(
            &self.h.run,
            &name,
            &self.h.pod_image,
            &refs,
        ))?;
        let r = self
            .pods()
            .create(&PostParams::default(), &p)
            .await
            .map(|_| ());
        if self.count("create pod", r)? {
            self.model.pods.push(PodRec {
                name,
                deleted: false,
            });
        }
        Ok(())
    }

    fn secrets_api(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// One Secret operation under the `secrets-used-by-pods` rule: create a
    /// Secret, start a pod that mounts one (live or Terminating: naming a
    /// Secret being deleted is what the rule is about; a pod naming a gone
    /// one stays Pending, still a user), or delete a Secret. Pods go with
    /// the ordinary churn.
    async fn secret_step(&mut self) -> Result<()> {
        let live = self.model.live_secrets();
        match self.rng.random_range(0..100u32) {
            0..=34 if live.len() < self.max_live => {
                let name = self.model.name("secret");
                let body = json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "labels": {objects::RUN_LABEL: self.h.run}},
                    "data": {"token": "c2VjcmV0"}
                });
                let r = self
                    .secrets_api()
                    .create(&PostParams::default(), &obj(body)?)
                    .await
                    .map(|_| ());
                if self.count("create secret", r)? {
                    self.model.secrets.push((name, false));
                }
            }
            35..=69
                if !self.model.secrets.is_empty()
                    && self.model.live_pods().len() < self.max_live =>
            {
                // Mostly a live Secret (so that its deletion is held), now
                // and then any, Terminating or gone.
                let i = if !live.is_empty() && self.rng.random_bool(0.85) {
                    live[self.rng.random_range(0..live.len())]
                } else {
                    self.rng.random_range(0..self.model.secrets.len())
                };
                let secret = self.model.secrets[i].0.clone();
                let name = self.model.name("pod");
                let mut body = objects::pod_with_claims(&self.h.run, &name, &self.h.pod_image, &[]);
                body["spec"]["volumes"] =
                    json!([{"name": "secret", "secret": {"secretName": secret}}]);
                body["spec"]["containers"][0]["volumeMounts"] =
                    json!([{"name": "secret", "mountPath": "/etc/secret"}]);
                let r = self
                    .pods()
                    .create(&PostParams::default(), &obj(body)?)
                    .await
                    .map(|_| ());
                if self.count("create pod with secret", r)? {
                    self.model.pods.push(PodRec {
                        name,
                        deleted: false,
                    });
                }
            }
            70..=99 if !live.is_empty() => {
                let i = live[self.rng.random_range(0..live.len())];
                let name = self.model.secrets[i].0.clone();
                self.delete_counted(self.secrets_api(), &name, "delete secret")
                    .await?;
                self.model.secrets[i].1 = true;
            }
            _ => {}
        }
        Ok(())
    }

    fn vacs(&self) -> Api<crate::observer::VolumeAttributesClass> {
        Api::all(self.client.clone())
    }

    fn service_cidrs_api(&self) -> Api<ServiceCIDR> {
        Api::all(self.client.clone())
    }

    /// One ServiceCIDR operation: create a range ([`new_range`]: a /24 of
    /// the churn's block, now and then a /23, or again the range
    /// of one deleted before: a new container for the addresses a
    /// Terminating one holds), create a ClusterIP Service asking for an
    /// address in a range (live or Terminating: the API server refuses the
    /// latter), delete a range (with or without addresses in it) or one of
    /// those Services.
    async fn service_cidr_step(&mut self) -> Result<()> {
        let live = self.model.live_service_cidrs();
        let services = self.model.live_cidr_services();
        match self.rng.random_range(0..100u32) {
            0..=24 if live.len() < self.max_live => {
                let gone: Vec<usize> = (0..self.model.service_cidrs.len())
                    .filter(|&i| self.model.service_cidrs[i].2)
                    .collect();
                let cidr = if !gone.is_empty() && self.rng.random_bool(0.3) {
                    self.model.service_cidrs[gone[self.rng.random_range(0..gone.len())]]
                        .1
                        .clone()
                } else {
                    new_range(&mut self.rng)
                };
                let name = format!("{}-{}", self.h.run, self.model.name("scidr"));
                let body = objects::service_cidr(&self.h.run, &name, &cidr);
                let r = self
                    .service_cidrs_api()
                    .create(&PostParams::default(), &obj(body)?)
                    .await
                    .map(|_| ());
                if self.count("create ServiceCIDR", r)? {
                    self.model.service_cidrs.push((name, cidr, false));
                }
            }
            25..=64 if !self.model.service_cidrs.is_empty() && services.len() < self.max_live => {
                // Mostly a live range, now and then any (Terminating or gone).
                let i = if !live.is_empty() && self.rng.random_bool(0.85) {
                    live[self.rng.random_range(0..live.len())]
                } else {
                    self.rng.random_range(0..self.model.service_cidrs.len())
                };
                let cidr = self.model.service_cidrs[i].1.clone();
                let Some(ip) = host_in(&cidr, &mut self.rng) else {
                    return Ok(());
                };
                let name = self.model.name("cidrsvc");
                let body = objects::cluster_ip_service(&self.h.run, &name, &ip);
                let r = self
                    .services()
                    .create(&PostParams::default(), &obj(body)?)
                    .await
                    .map(|_| ());
                if self.count("create service in a ServiceCIDR", r)? {
                    self.model.cidr_services.push((name, false, i));
                }
            }
            65..=84 if !live.is_empty() => {
                // Mostly a range a live Service asked an address of (held
                // unless another range contains it), now and then any.
                let asked: Vec<usize> = services
                    .iter()
                    .map(|&s| self.model.cidr_services[s].2)
                    .filter(|c| live.contains(c))
                    .collect();
                let i = if !asked.is_empty() && self.rng.random_bool(0.6) {
                    asked[self.rng.random_range(0..asked.len())]
                } else {
                    live[self.rng.random_range(0..live.len())]
                };
                let name = self.model.service_cidrs[i].0.clone();
                self.delete_counted(self.service_cidrs_api(), &name, "delete ServiceCIDR")
                    .await?;
                self.model.service_cidrs[i].2 = true;
            }
            85..=99 if !services.is_empty() => {
                let i = services[self.rng.random_range(0..services.len())];
                let name = self.model.cidr_services[i].0.clone();
                self.delete_counted(self.services(), &name, "delete service in a ServiceCIDR")
                    .await?;
                self.model.cidr_services[i].1 = true;
            }
            _ => {}
        }
        Ok(())
    }

    /// One VolumeAttributesClass operation: create or delete a class, a
    /// Pending claim or an Available volume naming a live (or Terminating)
    /// class, or a claim's pending modification set to one or cleared.
    async fn class_step(&mut self) -> Result<()> {
        let classes = self.model.live_classes();
        // Any class created so far, deleted or not: naming a Terminating
        // class is what the protection is about.
        let any = |rng: &mut StdRng, m: &Model| -> Option<String> {
            (!m.classes.is_empty())
                .then(|| m.classes[rng.random_range(0..m.classes.len())].0.clone())
        };
        match self.rng.random_range(0..100u32) {
            0..=29 if classes.len() < self.max_live => {
                let name = format!("{}-{}", self.h.run, self.model.name("vac"));
                let body = objects::vac(&self.h.run, &name);
                let api: Api<kube::api::DynamicObject> = Api::all_with(
                    self.client.clone(),
                    &kube::api::ApiResource::from_gvk_with_plural(
                        &kube::api::GroupVersionKind::gvk(
                            "storage.k8s.io",
                            "v1",
                            "VolumeAttributesClass",
                        ),
                        "volumeattributesclasses",
                    ),
                );
                let r = api
                    .create(&PostParams::default(), &obj(body)?)
                    .await
                    .map(|_| ());
                if self.count("create class", r)? {
                    self.model.classes.push((name, false));
                }
            }
            30..=49 if !classes.is_empty() => {
                let i = classes[self.rng.random_range(0..classes.len())];
                let name = self.model.classes[i].0.clone();
                self.delete_counted(self.vacs(), &name, "delete class")
                    .await?;
                self.model.classes[i].1 = true;
            }
            50..=69 if self.model.live_claims().len() < self.max_live => {
                let Some(class) = any(&mut self.rng, &self.model) else {
                    return Ok(());
                };
                let name = self.model.name("claim");
                let c: PersistentVolumeClaim = obj(objects::pending_pvc_with_vac(
                    &self.h.run,
                    &name,
                    Some(&class),
                ))?;
                let r = self
                    .pvcs()
                    .create(&PostParams::default(), &c)
                    .await
                    .map(|_| ());
                if self.count("create claim of a class", r)? {
                    self.model.claims.push(Claim {
                        name,
                        deleted: false,
                    });
                }
            }
            70..=84 if self.model.live_pvs().len() < self.max_live => {
                let Some(class) = any(&mut self.rng, &self.model) else {
                    return Ok(());
                };
                let pv = format!("{}-{}", self.h.run, self.model.name("pv"));
                let v: PersistentVolume = obj(objects::csi_pv_with_vac(&self.h.run, &pv, &class))?;
                let r = self
                    .pvs()
                    .create(&PostParams::default(), &v)
                    .await
                    .map(|_| ());
                if self.count("create volume of a class", r)? {
                    self.model.pvs.push((pv, false));
                }
            }
            85..=99 => {
                let claims = self.model.live_claims();
                if claims.is_empty() {
                    return Ok(());
                }
                let i = claims[self.rng.random_range(0..claims.len())];
                let name = self.model.claims[i].name.clone();
                let target = if self.rng.random_bool(0.6) {
                    any(&mut self.rng, &self.model)
                } else {
                    None
                };
                let status = match &target {
                    Some(t) => {
                        json!({"modifyVolumeStatus": {"targetVolumeAttributesClassName": t, "status": "InProgress"}})
                    }
                    None => json!({"modifyVolumeStatus": null}),
                };
                let r = self
                    .pvcs()
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await
                    .map(|_| ());
                let op = if target.is_some() {
                    "set a pending modification"
                } else {
                    "clear a pending modification"
                };
                self.count(op, r)?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn step(&mut self) -> Result<()> {
        if self.classes && self.rng.random_bool(0.25) {
            return self.class_step().await;
        }
        if self.secrets && self.rng.random_bool(0.25) {
            return self.secret_step().await;
        }
        if self.service_cidrs && self.rng.random_bool(0.25) {
            return self.service_cidr_step().await;
        }
        let m = &self.model;
        let (claims, pods, svcs, pvs) = (
            m.live_claims(),
            m.live_pods(),
            m.live_services(),
            m.live_pvs(),
        );
        let full = |n: usize| n >= self.max_live;
        let choice = self.rng.random_range(0..100u32);
        match choice {
            // A claim and a pod that uses it.
            0..=17 if !full(claims.len()) && !full(pods.len()) => {
                let name = self.model.name("claim");
                let c: PersistentVolumeClaim = obj(objects::dynamic_pvc(&self.h.run, &name))?;
                let r = self
                    .pvcs()
                    .create(&PostParams::default(), &c)
                    .await
                    .map(|_| ());
                if self.count("create claim", r)? {
                    self.model.claims.push(Claim {
                        name: name.clone(),
                        deleted: false,
                    });
                    self.create_pod(vec![name]).await?;
                }
            }
            // A static PV, a claim selecting it and a pod using it.
            18..=24 if !full(pvs.len()) && !full(claims.len()) => {
                let pv = format!("{}-{}", self.h.run, self.model.name("pv"));
                let claim = self.model.name("claim");
                let v: PersistentVolume = obj(objects::host_path_pv(&self.h.run, &pv))?;
                let r = self
                    .pvs()
                    .create(&PostParams::default(), &v)
                    .await
                    .map(|_| ());
                if self.count("create volume", r)? {
                    self.model.pvs.push((pv.clone(), false));
                    let c: PersistentVolumeClaim =
                        obj(objects::pvc_for_pv(&self.h.run, &claim, &pv))?;
                    let r = self
                        .pvcs()
                        .create(&PostParams::default(), &c)
                        .await
                        .map(|_| ());
                    if self.count("create claim", r)? {
                        self.model.claims.push(Claim {
                            name: claim.clone(),
                            deleted: false,
                        });
                        if self.rng.random_bool(0.7) {
                            self.create_pod(vec![claim]).await?;
                        }
                    }
                }
            }
            // Another pod on one or two live claims.
            25..=34 if !claims.is_empty() && !full(pods.len()) => {
                let a = claims[self.rng.random_range(0..claims.len())];
                let mut use_claims = vec![self.model.claims[a].name.clone()];
                if claims.len() > 1 && self.rng.random_bool(0.3) {
                    let b = claims[self.rng.random_range(0..claims.len())];
                    if b != a {
                        use_claims.push(self.model.claims[b].name.clone());
                    }
                }
                self.create_pod(use_claims).await?;
            }
            35..=52 if !pods.is_empty() => {
                let i = pods[self.rng.random_range(0..pods.len())];
                let name = self.model.pods[i].name.clone();
                self.delete_counted(self.pods(), &name, "delete pod")
                    .await?;
                self.model.pods[i].deleted = true;
            }
            53..=66 if !claims.is_empty() => {
                let i = claims[self.rng.random_range(0..claims.len())];
                let name = self.model.claims[i].name.clone();
                self.delete_counted(self.pvcs(), &name, "delete claim")
                    .await?;
                self.model.claims[i].deleted = true;
            }
            67..=70 if !pvs.is_empty() => {
                let i = pvs[self.rng.random_range(0..pvs.len())];
                let name = self.model.pvs[i].0.clone();
                self.delete_counted(self.pvs(), &name, "delete volume")
                    .await?;
                self.model.pvs[i].1 = true;
            }
            71..=84 if !full(svcs.len()) => {
                let name = self.model.name("svc");
                let s: Service = obj(objects::lb_service(&self.h.run, &name, LB_CLASS))?;
                let r = self
                    .services()
                    .create(&PostParams::default(), &s)
                    .await
                    .map(|_| ());
                if self.count("create LB service", r)? {
                    self.model.services.push(Svc {
                        name,
                        deleted: false,
                        lb: true,
                    });
                }
            }
            85..=94 if !svcs.is_empty() => {
                let i = svcs[self.rng.random_range(0..svcs.len())];
                let name = self.model.services[i].name.clone();
                self.delete_counted(self.services(), &name, "delete service")
                    .await?;
                self.model.services[i].deleted = true;
            }
            95..=99 if !svcs.is_empty() => {
                let i = svcs[self.rng.random_range(0..svcs.len())];
                let name = self.model.services[i].name.clone();
                let to_lb = !self.model.services[i].lb;
                let patch = if to_lb {
                    json!({"spec": {"type": "LoadBalancer", "loadBalancerClass": LB_CLASS}})
                } else {
                    json!({"spec": {"type": "ClusterIP"}})
                };
                let r = self
                    .services()
                    .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                    .map(|_| ());
                let op = if to_lb {
                    "service to LoadBalancer"
                } else {
                    "service to ClusterIP"
                };
                if self.count(op, r)? {
                    self.model.services[i].lb = to_lb;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Deletes everything the churn left: pods first (so the claims are
    /// free), then Services (so the ServiceCIDRs are free), claims, volumes,
    /// classes, Secrets and ServiceCIDRs.
    async fn delete_all(&mut self) -> Result<()> {
        for i in self.model.live_pods() {
            let name = self.model.pods[i].name.clone();
            self.delete_counted(self.pods(), &name, "cleanup: delete pod")
                .await?;
            self.model.pods[i].deleted = true;
        }
        for i in self.model.live_services() {
            let name = self.model.services[i].name.clone();
            self.delete_counted(self.services(), &name, "cleanup: delete service")
                .await?;
            self.model.services[i].deleted = true;
        }
        for i in self.model.live_claims() {
            let name = self.model.claims[i].name.clone();
            self.delete_counted(self.pvcs(), &name, "cleanup: delete claim")
                .await?;
            self.model.claims[i].deleted = true;
        }
        for i in self.model.live_pvs() {
            let name = self.model.pvs[i].0.clone();
            self.delete_counted(self.pvs(), &name, "cleanup: delete volume")
                .await?;
            self.model.pvs[i].1 = true;
        }
        for i in self.model.live_classes() {
            let name = self.model.classes[i].0.clone();
            self.delete_counted(self.vacs(), &name, "cleanup: delete class")
                .await?;
            self.model.classes[i].1 = true;
        }
        for i in self.model.live_secrets() {
            let name = self.model.secrets[i].0.clone();
            self.delete_counted(self.secrets_api(), &name, "cleanup: delete secret")
                .await?;
            self.model.secrets[i].1 = true;
        }
        for i in self.model.live_cidr_services() {
            let name = self.model.cidr_services[i].0.clone();
            self.delete_counted(self.services(), &name, "cleanup: delete service")
                .await?;
            self.model.cidr_services[i].1 = true;
        }
        for i in self.model.live_service_cidrs() {
            let name = self.model.service_cidrs[i].0.clone();
            self.delete_counted(
                self.service_cidrs_api(),
                &name,
                "cleanup: delete ServiceCIDR",
            )
            .await?;
            self.model.service_cidrs[i].2 = true;
        }
        if self.tolerate_unavailable {
            self.sweep().await?;
        }
        Ok(())
    }

    /// Deletes the run's objects the model does not know are there (a
    /// create whose answer was lost to a fault of the API server).
    async fn sweep(&mut self) -> Result<()> {
        let sel = kube::api::ListParams::default().labels(&format!(
            "{}={}",
            objects::RUN_LABEL,
            self.h.run
        ));
        async fn sweep_kind<K>(
            churn: &mut Churn<'_>,
            api: Api<K>,
            sel: &kube::api::ListParams,
            op: &str,
        ) -> Result<()>
        where
            K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
            K::DynamicType: Default,
        {
            for (name, deleting) in run_objects(api.clone(), sel).await? {
                if !deleting {
                    churn.delete_counted(api.clone(), &name, op).await?;
                }
            }
            Ok(())
        }
        sweep_kind(self, self.pods(), &sel, "cleanup sweep: delete pod").await?;
        sweep_kind(self, self.services(), &sel, "cleanup sweep: delete service").await?;
        sweep_kind(self, self.pvcs(), &sel, "cleanup sweep: delete claim").await?;
        sweep_kind(self, self.pvs(), &sel, "cleanup sweep: delete volume").await?;
        if self.classes {
            sweep_kind(self, self.vacs(), &sel, "cleanup sweep: delete class").await?;
        }
        if self.secrets {
            sweep_kind(
                self,
                self.secrets_api(),
                &sel,
                "cleanup sweep: delete secret",
            )
            .await?;
        }
        if self.service_cidrs {
            sweep_kind(
                self,
                self.service_cidrs_api(),
                &sel,
                "cleanup sweep: delete ServiceCIDR",
            )
            .await?;
        }
        Ok(())
    }
}

/// The names of the objects `sel` selects, each with whether its deletion
/// was requested.
async fn run_objects<K>(api: Api<K>, sel: &kube::api::ListParams) -> Result<Vec<(String, bool)>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(api
        .list(sel)
        .await
        .ctx(|| format!("list {}", K::plural(&Default::default())))?
        .items
        .iter()
        .map(|o| {
            (
                o.meta().name.clone().unwrap_or_default(),
                o.meta().deletion_timestamp.is_some(),
            )
        })
        .collect())
}

/// Faults on kube-sim aimed at the manager's user only (the churn, the
/// observer and the emulated cluster components are never faulted), on the
/// resources the controllers read and write (not the Lease: a failing
/// Lease write changes leadership for reasons the leadership invariant does
/// not measure).
fn kube_fault_rules(user: &str, cfg: &ChaosConfig) -> Vec<kube_sim::FaultRule> {
    let mut rules = Vec::new();
    for resource in [
        "persistentvolumeclaims",
        "persistentvolumes",
        "pods",
        "services",
        "nodes",
        "volumeattributesclasses",
        "secrets",
        "servicecidrs",
        "ipaddresses",
    ] {
        for (code, verb) in [(500, None), (503, None), (409, Some("patch"))] {
            let fraction = if code == 409 {
                cfg.conflict_fraction
            } else {
                cfg.error_fraction / 2.0
            };
            let mut r = kube_sim::FaultRule::error(code)
                .user(user)
                .resource(resource)
                .fraction(fraction);
            if let Some(v) = verb {
                r = r.verb(v);
            }
            rules.push(r);
        }
    }
    rules
}

fn cloud_faults(cfg: &ChaosConfig) -> cloud_sim::FaultSet {
    use cloud_sim::{ErrorFault, HangFault, LatencyFault, OpFaults, Operation};
    let err = |status| ErrorFault {
        rate: cfg.cloud_error_rate,
        status,
        retry_after_seconds: None,
        retry_after_format: Default::default(),
        after_commit: false,
        message: None,
    };
    let mut set = cloud_sim::FaultSet {
        seed: cfg.seed,
        operations: Default::default(),
    };
    set.operations.insert(
        Operation::Put,
        OpFaults {
            error: Some(err(503)),
            latency: Some(LatencyFault {
                rate: 0.5,
                min_ms: 5,
                max_ms: Some(80),
            }),
            // A create that lands after the reply is lost.
            hang: Some(HangFault {
                rate: 0.03,
                max_ms: Some(1500),
                after_commit: true,
            }),
            ..Default::default()
        },
    );
    set.operations.insert(
        Operation::Delete,
        OpFaults {
            error: Some(ErrorFault {
                after_commit: true,
                ..err(500)
            }),
            latency: Some(LatencyFault {
                rate: 0.5,
                min_ms: 5,
                max_ms: Some(80),
            }),
            ..Default::default()
        },
    );
    set.operations.insert(
        Operation::Get,
        OpFaults {
            error: Some(err(500)),
            ..Default::default()
        },
    );
    set
}

/// Runs the chaos scenario on an installed-but-not-yet-created release
/// (`rel`, prepared) with the user's objects in `ns`.
pub async fn run(
    h: &Harness,
    rel: &ManagerRelease,
    ns: &str,
    cfg: &ChaosConfig,
) -> Result<ChaosReport> {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    if cfg.profile == Profile::UpstreamWithAdmission {
        let Some(sim) = h.sim() else {
            return Err(Error::Config(
                "the upstream-profile chaos run needs kube-sim's admission emulation (sim mode)"
                    .into(),
            ));
        };
        sim.set_storage_protection_admission(true);
    }
    // Classes only where the cluster serves storage.k8s.io/v1
    // VolumeAttributesClass (kube-sim does; Kubernetes 1.34+).
    let mut cfg = cfg.clone();
    if cfg.classes && !classes_served(h).await? {
        h.skip_in_cluster("VolumeAttributesClasses in the churn (the cluster serves no storage.k8s.io/v1 VolumeAttributesClass)");
        cfg.classes = false;
    }
    // ServiceCIDRs are cluster-wide, and so are the cluster IPs the churn
    // names: in cluster mode only where no range of the cluster's (its
    // service range, the default `kubernetes` ServiceCIDR) or of another
    // run meets the churn's block.
    if cfg.service_cidrs
        && !h.is_sim()
        && let Some(why) = service_cidrs_unfit(h).await?
    {
        println!("NOTE (cluster mode): skipped ServiceCIDRs in the churn: {why}");
        cfg.service_cidrs = false;
    }
    let cfg = &cfg;
    let values = cfg.values();
    let sets: Vec<&str> = values.iter().map(String::as_str).collect();
    rel.install(&sets, true).await?;
    let create_time_policies = rel.create_time_policies().await?;
    if cfg.profile == Profile::Project && create_time_policies.is_empty() {
        println!(
            "NOTE: the cluster serves no MutatingAdmissionPolicy API: no create-time policy, the creation window is counted"
        );
    }
    let own = h.own_release()?;
    rel.wait_running_as(&own).await?;
    let monitor = Monitor::start(
        h,
        MonitorSettings {
            namespaces: vec![ns.to_string()],
            lease: Some((rel.namespace.clone(), rel.lease_name().to_string())),
            lease_duration: cfg.lease_duration,
            retry_period: cfg.retry_period,
            // Every claim and volume carries its finalizer from creation:
            // the creation window is a violation.
            strict: cfg.profile == Profile::UpstreamWithAdmission
                || !create_time_policies.is_empty(),
            classes: cfg.classes,
            secrets: cfg.secrets,
            service_cidrs: cfg.service_cidrs,
        },
    )
    .await?;

    // Faults on.
    let user = rel.user();
    let mut rule_ids = Vec::new();
    if let Some(sim) = h.sim() {
        sim.faults().reseed(cfg.seed);
        for r in kube_fault_rules(&user, cfg) {
            rule_ids.push(sim.faults().add(r));
        }
    } else {
        h.skip_in_cluster("kube-sim faults (5xx, 409, watch cuts, forced 410)");
    }
    h.cloud.set_faults(cloud_faults(cfg)).await?;

    let mut churn = Churn {
        h,
        ns: ns.to_string(),
        client: h.client.clone(),
        rng: StdRng::seed_from_u64(cfg.seed ^ 0x00c4_a05e),
        model: Model::default(),
        ops: BTreeMap::new(),
        max_live: cfg.max_live,
        classes: cfg.classes,
        secrets: cfg.secrets,
        service_cidrs: cfg.service_cidrs,
        tolerate_unavailable: h.real().is_some(),
    };
    let fault_start = Instant::now();
    let end = fault_start + cfg.duration;
    // Kills stop early enough that the last move completes before calm.
    let last_kill =
        end.checked_sub(cfg.lease_duration + cfg.retry_period * 2 + Duration::from_secs(2));
    // The real cluster's faults run beside the churn (a restart takes
    // seconds), and stop with the kills.
    let move_pending = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fault_active = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let real_faults = match (h.real_cluster(), last_kill) {
        (Some(real), Some(until)) => Some(tokio::spawn(inject_real_faults(
            real,
            cfg.clone(),
            until,
            move_pending.clone(),
            fault_active.clone(),
        ))),
        _ => None,
    };
    let mut kills = Vec::new();
    let mut next_kill = Instant::now() + rand_between(&mut rng, cfg.kill_after);
    let mut next_cut = Instant::now() + Duration::from_secs(rng.random_range(5..15));
    let mut next_gone = Instant::now() + Duration::from_secs(rng.random_range(5..20));
    let (mut cuts, mut gones) = (0u64, 0u64);
    let mut postponed = 0u64;
    let mut waiting_for_move: Option<String> = None;
    while Instant::now() < end {
        churn.step().await?;
        let now = Instant::now();
        // A new kill only once the previous one's move is done.
        if let Some(killed) = &waiting_for_move
            && monitor
                .lease()
                .is_some_and(|l| !l.holder.is_empty() && &l.holder != killed)
        {
            waiting_for_move = None;
            move_pending.store(false, std::sync::atomic::Ordering::SeqCst);
            next_kill = now + rand_between(&mut rng, cfg.kill_after);
        }
        // Not while a fault of the real cluster's own is under way or due:
        // the move would measure the fault, not the election (and kills
        // would leave the faults no window).
        let leader = if waiting_for_move.is_none()
            && now >= next_kill
            && last_kill.is_some_and(|l| now < l)
            && !fault_active.load(std::sync::atomic::Ordering::Relaxed)
        {
            match rel.leader().await {
                Ok(l) => l,
                Err(e) if churn.tolerate_unavailable => {
                    tracing::info!(error = %e, "chaos: cannot read the leader now");
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if let Some((pod, identity)) = leader {
            // Only with a Ready standby to take over: a replica still in
            // CrashLoopBackOff from an earlier kill (the kubelet's restart
            // delay doubles up to 5 minutes) cannot, and the leadership
            // invariant is about the election, not about restart backoff.
            if !standby_ready(rel, &pod).await.unwrap_or(false) {
                postponed += 1;
                next_kill = now + Duration::from_secs(1);
                tokio::time::sleep(rand_between(&mut churn.rng, cfg.op_interval)).await;
                continue;
            }
            // Claim the window against a real-cluster fault starting now
            // (each side sets its flag, then reads the other's).
            move_pending.store(true, std::sync::atomic::Ordering::SeqCst);
            if fault_active.load(std::sync::atomic::Ordering::SeqCst) {
                move_pending.store(false, std::sync::atomic::Ordering::SeqCst);
                next_kill = now + Duration::from_secs(1);
                tokio::time::sleep(rand_between(&mut churn.rng, cfg.op_interval)).await;
                continue;
            }
            match h.kill_pod(&rel.namespace, &pod, CONTAINER).await {
                Ok(how) => {
                    let kill = Kill {
                        pod: pod.clone(),
                        identity: identity.clone(),
                        at: jiff::Timestamp::now(),
                    };
                    tracing::info!(%pod, %identity, ?how, "chaos: killed the leader");
                    monitor.record_kill(kill.clone());
                    kills.push(kill);
                    waiting_for_move = Some(identity);
                }
                // The pod may be between restarts: try again later.
                Err(e) => {
                    move_pending.store(false, std::sync::atomic::Ordering::SeqCst);
                    tracing::info!(%pod, error = %e, "chaos: could not kill the leader now");
                    next_kill = now + Duration::from_secs(1);
                }
            }
        }
        if let Some(sim) = h.sim() {
            if now >= next_cut {
                sim.faults().cut_watches();
                cuts += 1;
                next_cut = now + Duration::from_secs(rng.random_range(8..20));
            }
            if now >= next_gone {
                sim.faults().add(
                    kube_sim::FaultRule::new(kube_sim::FaultAction::Gone)
                        .user(&user)
                        .verb("watch")
                        .times(1),
                );
                gones += 1;
                next_gone = now + Duration::from_secs(rng.random_range(10..25));
            }
        }
        tokio::time::sleep(rand_between(&mut churn.rng, cfg.op_interval)).await;
    }

    // Calm: faults off, no more kills; then everything is deleted.
    let kube_faults = match h.sim() {
        Some(sim) => {
            let mut by: BTreeMap<String, u64> = BTreeMap::new();
            for r in sim.faults().rules() {
                let key = match &r.action {
                    kube_sim::FaultAction::Error { code, .. } => format!("HTTP {code}"),
                    kube_sim::FaultAction::Gone => "410 Gone".into(),
                    other => format!("{other:?}"),
                };
                *by.entry(key).or_default() += r.injected;
            }
            sim.faults().clear();
            by
        }
        None => BTreeMap::new(),
    };
    let real_faults = match real_faults {
        Some(t) => t
            .await
            .map_err(|e| Error::Real(format!("the fault task failed: {e}")))?,
        None => BTreeMap::new(),
    };
    h.cloud.clear_faults().await?;
    let cloud_stats = h.cloud.stats().await.unwrap_or(Value::Null);
    monitor.set_calm();
    let fault_phase = fault_start.elapsed();
    let cleanup_start = Instant::now();
    churn.delete_all().await?;
    // Wait for every deletion to complete; the monitor fails any object
    // that is free but still there CONVERGENCE_BOUND after calm.
    let deadline = Instant::now() + CONVERGENCE_BOUND + Duration::from_secs(15);
    loop {
        let pending = monitor.pending();
        let left = remaining(h, ns, cfg).await?;
        if pending.is_empty() && left == 0 {
            break;
        }
        if Instant::now() > deadline {
            // What holds a ServiceCIDR left behind: the addresses in it.
            let holders = if cfg.service_cidrs {
                service_cidr_holders(h).await
            } else {
                Vec::new()
            };
            tracing::warn!(
                ?pending,
                left,
                ?holders,
                "chaos: objects left after the cleanup deadline"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cleanup = cleanup_start.elapsed();
    let report = monitor.finish().await?;
    if cfg.secrets {
        remove_secret_rule(h).await?;
    }
    Ok(ChaosReport {
        seed: cfg.seed,
        profile: cfg.profile,
        lease_duration: cfg.lease_duration,
        create_time_policies,
        fault_phase,
        total: started.elapsed(),
        ops: churn.ops,
        kube_faults,
        watch_cuts: cuts,
        forced_gone: gones,
        cloud_stats,
        kills,
        kills_postponed: postponed,
        real_faults,
        kubelet_restarts: h.real().map_or(0, |r| r.kubelet_restarts()),
        monitor: report,
        cleanup,
        classes: cfg.classes,
        secrets: cfg.secrets,
        service_cidrs: cfg.service_cidrs,
    })
}

/// Injects [`RealFault`]s until `until`, one at a random point of
/// `cfg.real_fault_after` after the previous one; a control-plane fault
/// holds off new leader kills (`active`) from when it is due until two
/// retry periods after it, and waits for a leadership move in progress
/// (`move_pending`) before it starts.
async fn inject_real_faults(
    real: std::sync::Arc<crate::real::RealCluster>,
    cfg: ChaosConfig,
    until: Instant,
    move_pending: std::sync::Arc<std::sync::atomic::AtomicBool>,
    active: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> BTreeMap<String, u64> {
    use std::sync::atomic::Ordering;
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed_fa17);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut deck = Vec::new();
    loop {
        let wait = rand_between(&mut rng, cfg.real_fault_after);
        if Instant::now() + wait >= until {
            return counts;
        }
        tokio::time::sleep(wait).await;
        let fault = RealFault::draw(&mut deck, &mut rng);
        if fault != RealFault::KillKubelet {
            // No new leader kill from now on; wait for a leadership move in
            // progress to complete.
            active.store(true, Ordering::SeqCst);
            while move_pending.load(Ordering::SeqCst) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if Instant::now() >= until {
                active.store(false, Ordering::Relaxed);
                return counts;
            }
        }
        let r = match fault {
            RealFault::KillKubelet => {
                let node = crate::real::NODES[rng.random_range(0..crate::real::NODES.len())];
                real.kill_kubelet(node)
            }
            RealFault::RestartApiServer => real
                .restart(control_plane::Component::ApiServer)
                .await
                .map(|_| ()),
            RealFault::RestartEtcd => real
                .restart(control_plane::Component::Etcd)
                .await
                .map(|_| ()),
            RealFault::StallApiServer => {
                let pause = Duration::from_millis(rng.random_range(2_000..=5_000));
                real.stall_apiserver(pause).await
            }
        };
        tracing::info!(
            fault = fault.name(),
            ok = r.is_ok(),
            "chaos: real-cluster fault"
        );
        let key = match &r {
            Ok(()) => fault.name().to_string(),
            Err(e) => {
                tracing::warn!(fault = fault.name(), error = %e, "chaos: the fault failed");
                format!("{} (failed)", fault.name())
            }
        };
        *counts.entry(key).or_default() += 1;
        if fault != RealFault::KillKubelet {
            tokio::time::sleep(cfg.retry_period * 2).await;
            active.store(false, Ordering::Relaxed);
        }
    }
}

/// Deletes the `secrets-used-by-pods` rule and checks what a user relies
/// on: the rule goes (its own finalizer is removed once its finalizers are
/// off every Secret) and no Secret in the cluster keeps the rule's finalizer.
async fn remove_secret_rule(h: &Harness) -> Result<()> {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("protection-manager.io", "v1alpha1", "ProtectionRule"),
        "protectionrules",
    );
    let rules: Api<kube::api::DynamicObject> = Api::all_with(h.client.clone(), &ar);
    rules
        .delete(SECRET_RULE, &DeleteParams::default())
        .await
        .ctx(|| format!("delete ProtectionRule {SECRET_RULE}"))?;
    let deadline = Instant::now() + CONVERGENCE_BOUND;
    while rules
        .get_opt(SECRET_RULE)
        .await
        .ctx(|| format!("get ProtectionRule {SECRET_RULE}"))?
        .is_some()
    {
        if Instant::now() > deadline {
            return Err(Error::Check(format!(
                "ProtectionRule {SECRET_RULE} still there {}s after its deletion",
                CONVERGENCE_BOUND.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let left: Vec<String> = Api::<Secret>::all(h.client.clone())
        .list(&kube::api::ListParams::default())
        .await
        .ctx(|| "list secrets".into())?
        .items
        .into_iter()
        .filter(|s| {
            s.metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f.ends_with(crate::invariants::SECRET_RULE_FINALIZER_SUFFIX))
        })
        .map(|s| {
            format!(
                "{}/{}",
                s.metadata.namespace.unwrap_or_default(),
                s.metadata.name.unwrap_or_default()
            )
        })
        .collect();
    if !left.is_empty() {
        return Err(Error::Check(format!(
            "ProtectionRule {SECRET_RULE} is gone but its finalizer is still on {}",
            left.join(", ")
        )));
    }
    Ok(())
}

/// Another manager pod than `leader` is Ready (a standby that can take
/// the Lease).
async fn standby_ready(rel: &ManagerRelease, leader: &str) -> Result<bool> {
    Ok(rel.pods().await?.iter().any(|p| {
        p.metadata.name.as_deref() != Some(leader)
            && p.metadata.deletion_timestamp.is_none()
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }))
}

/// Objects of the run still in the namespace (and its PVs).
async fn remaining(h: &Harness, ns: &str, cfg: &ChaosConfig) -> Result<usize> {
    let sel = kube::api::ListParams::default().labels(&format!("{}={}", objects::RUN_LABEL, h.run));
    let c = &h.client;
    let mut n = run_objects(Api::<Pod>::namespaced(c.clone(), ns), &sel)
        .await?
        .len()
        + run_objects(
            Api::<PersistentVolumeClaim>::namespaced(c.clone(), ns),
            &sel,
        )
        .await?
        .len()
        + run_objects(Api::<Service>::namespaced(c.clone(), ns), &sel)
            .await?
            .len()
        + run_objects(Api::<PersistentVolume>::all(c.clone()), &sel)
            .await?
            .len();
    if cfg.classes {
        n += run_objects(
            Api::<crate::observer::VolumeAttributesClass>::all(c.clone()),
            &sel,
        )
        .await?
        .len();
    }
    if cfg.secrets {
        n += run_objects(Api::<Secret>::namespaced(c.clone(), ns), &sel)
            .await?
            .len();
    }
    if cfg.service_cidrs {
        n += run_objects(Api::<ServiceCIDR>::all(c.clone()), &sel)
            .await?
            .len();
    }
    Ok(n)
}

/// For every ServiceCIDR of the run still there: its name, whether it is
/// Terminating, and each IPAddress inside one of its ranges with the
/// Service it names and that Service's state (`gone`, `Terminating` or
/// `live`). Best effort: a failed read says so.
async fn service_cidr_holders(h: &Harness) -> Vec<String> {
    use k8s_openapi::api::networking::v1::IPAddress;
    use service_cidr_protection::cidr::Prefix;
    let sel = kube::api::ListParams::default().labels(&format!("{}={}", objects::RUN_LABEL, h.run));
    let (cidrs, ips) = match (
        Api::<ServiceCIDR>::all(h.client.clone()).list(&sel).await,
        Api::<IPAddress>::all(h.client.clone())
            .list(&kube::api::ListParams::default())
            .await,
    ) {
        (Ok(c), Ok(i)) => (c.items, i.items),
        (Err(e), _) | (_, Err(e)) => return vec![format!("not read: {e}")],
    };
    let mut out = Vec::new();
    for c in cidrs {
        let ranges: Vec<Prefix> = c
            .spec
            .as_ref()
            .and_then(|s| s.cidrs.clone())
            .unwrap_or_default()
            .iter()
            .filter_map(|r| Prefix::parse(r))
            .collect();
        let mut users = Vec::new();
        for ip in &ips {
            let Ok(addr) = ip.metadata.name.as_deref().unwrap_or_default().parse() else {
                continue;
            };
            if !ranges.iter().any(|r| r.contains_ip(addr)) {
                continue;
            }
            let parent = ip.spec.as_ref().map(|s| &s.parent_ref);
            let state = match parent {
                Some(p) if p.resource == "services" => {
                    match Api::<Service>::namespaced(
                        h.client.clone(),
                        p.namespace.as_deref().unwrap_or_default(),
                    )
                    .get_opt(&p.name)
                    .await
                    {
                        Ok(None) => "gone".to_string(),
                        Ok(Some(s)) if s.metadata.deletion_timestamp.is_some() => {
                            format!("Terminating {:?}", s.metadata.finalizers)
                        }
                        Ok(Some(_)) => "live".to_string(),
                        Err(e) => format!("not read: {e}"),
                    }
                }
                _ => "no Service parent".to_string(),
            };
            users.push(format!(
                "{} (parent {:?}/{:?}: {state}; managed-by {:?})",
                ip.metadata.name.as_deref().unwrap_or_default(),
                parent.and_then(|p| p.namespace.clone()),
                parent.map(|p| p.name.clone()),
                ip.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("ipaddress.kubernetes.io/managed-by").cloned()),
            ));
        }
        out.push(format!(
            "{}{}: [{}]",
            c.metadata.name.as_deref().unwrap_or_default(),
            if c.metadata.deletion_timestamp.is_some() {
                " (Terminating)"
            } else {
                ""
            },
            users.join(", ")
        ));
    }
    out
}

/// Why the churn's ServiceCIDRs cannot run on this cluster, if they cannot:
/// it serves no networking.k8s.io/v1 ServiceCIDR, or a ServiceCIDR of
/// its own or of another run meets [`CHURN_SERVICE_CIDR_BLOCK`] (the
/// churn's deletions would be released, or held, for addresses it does not
/// know of). Prints a note where another controller holds ServiceCIDRs
/// beside the manager (kube-controller-manager's service-cidr-controller:
/// then what the invariant checks is only partly the manager's).
async fn service_cidrs_unfit(h: &Harness) -> Result<Option<String>> {
    use service_cidr_protection::cidr::Prefix;
    let list = match Api::<ServiceCIDR>::all(h.client.clone())
        .list(&kube::api::ListParams::default())
        .await
    {
        Ok(l) => l,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Ok(Some(
                "the cluster serves no networking.k8s.io/v1 ServiceCIDR".into(),
            ));
        }
        Err(e) => {
            return Err(Error::Kube {
                context: "listing ServiceCIDRs".into(),
                source: Box::new(e),
            });
        }
    };
    let block = Prefix::parse(CHURN_SERVICE_CIDR_BLOCK)
        .ok_or_else(|| Error::Config(format!("{CHURN_SERVICE_CIDR_BLOCK} is no CIDR")))?;
    let upstream = service_cidr_protection::INFO.finalizer.upstream;
    let mut meeting = Vec::new();
    for o in &list.items {
        let name = o.metadata.name.clone().unwrap_or_default();
        let cidrs = o
            .spec
            .as_ref()
            .and_then(|s| s.cidrs.clone())
            .unwrap_or_default();
        if cidrs
            .iter()
            .any(|c| Prefix::parse(c).is_some_and(|p| p.overlaps(&block)))
        {
            meeting.push(format!("{name} {cidrs:?}"));
        }
        if o.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == upstream))
        {
            println!(
                "NOTE (cluster mode): ServiceCIDR {name} carries {upstream}: kube-controller-manager's service-cidr-controller runs here and holds the churn's ServiceCIDRs beside the manager, so the ServiceCIDR checks are only partly the manager's"
            );
        }
    }
    Ok((!meeting.is_empty()).then(|| {
        format!(
            "ServiceCIDRs not of this run meet the churn's block {CHURN_SERVICE_CIDR_BLOCK}: {}",
            meeting.join(", ")
        )
    }))
}

/// Whether the cluster serves storage.k8s.io/v1 VolumeAttributesClass.
async fn classes_served(h: &Harness) -> Result<bool> {
    match Api::<crate::observer::VolumeAttributesClass>::all(h.client.clone())
        .list(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(Error::Kube {
            context: "listing VolumeAttributesClasses".into(),
            source: Box::new(e),
        }),
    }
}

/// A range for the churn: a /24 of the first 16 of
/// [`CHURN_SERVICE_CIDR_BLOCK`], now and then the /23 that contains two of
/// them.
fn new_range(rng: &mut StdRng) -> String {
    if rng.random_bool(0.25) {
        format!("10.200.{}.0/23", 2 * rng.random_range(0..8u32))
    } else {
        format!("10.200.{}.0/24", rng.random_range(0..16u32))
    }
}

/// A random address of the IPv4 range `cidr` (a /23 or narrower), neither
/// its network nor its broadcast address.
fn host_in(cidr: &str, rng: &mut StdRng) -> Option<String> {
    let (net, bits) = cidr.split_once('/')?;
    let net: std::net::Ipv4Addr = net.parse().ok()?;
    let bits: u32 = bits.parse().ok().filter(|b| (23..=30).contains(b))?;
    let size = 1u32 << (32 - bits);
    let offset = rng.random_range(1..size - 1);
    Some(std::net::Ipv4Addr::from(u32::from(net) + offset).to_string())
}

fn rand_between(rng: &mut StdRng, (lo, hi): (Duration, Duration)) -> Duration {
    if hi <= lo {
        return lo;
    }
    let ms = rng.random_range(lo.as_millis() as u64..=hi.as_millis() as u64);
    Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_asked_of_a_range_are_inside_it_and_allocatable() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..5000 {
            let ip: std::net::Ipv4Addr = host_in("10.200.4.0/23", &mut rng)
                .and_then(|s| s.parse().ok())
                .expect("an address");
            let o = ip.octets();
            assert_eq!((o[0], o[1]), (10, 200));
            assert!(o[2] == 4 || o[2] == 5, "{ip}");
            assert!(ip != std::net::Ipv4Addr::new(10, 200, 4, 0), "network");
            assert!(ip != std::net::Ipv4Addr::new(10, 200, 5, 255), "broadcast");
            seen.insert(o[2]);
        }
        assert_eq!(seen.len(), 2, "both halves of the /23");
        assert_eq!(
            host_in("10.200.0.0/16", &mut rng),
            None,
            "wider than the churn's"
        );
    }

    #[test]
    fn the_churns_ranges_and_addresses_stay_in_its_block_away_from_the_clusters_own() {
        use service_cidr_protection::cidr::Prefix;
        let block = Prefix::parse(CHURN_SERVICE_CIDR_BLOCK).expect("the block");
        // The real control plane's service range (crates/control-plane).
        let own = Prefix::parse(&control_plane::Config::default().service_cluster_ip_range)
            .expect("the control plane's range");
        assert!(
            !block.overlaps(&own),
            "{CHURN_SERVICE_CIDR_BLOCK} meets the cluster's range"
        );
        let mut rng = StdRng::seed_from_u64(11);
        let mut widths = std::collections::BTreeSet::new();
        for _ in 0..2000 {
            let range = new_range(&mut rng);
            let p = Prefix::parse(&range).expect("a CIDR");
            assert!(
                p.bits() >= 16 && p.overlaps(&block),
                "{range} is outside the block"
            );
            widths.insert(p.bits());
            let ip: std::net::IpAddr = host_in(&range, &mut rng)
                .and_then(|s| s.parse().ok())
                .expect("an address");
            assert!(p.contains_ip(ip) && !own.contains_ip(ip), "{ip} of {range}");
        }
        assert_eq!(widths.into_iter().collect::<Vec<_>>(), [23, 24]);
    }

    #[test]
    fn every_round_of_real_faults_has_each_kind_once() {
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut deck = Vec::new();
            for round in 0..3 {
                let mut drawn: Vec<RealFault> = (0..RealFault::ALL.len())
                    .map(|_| RealFault::draw(&mut deck, &mut rng))
                    .collect();
                drawn.sort_by_key(|f| f.name());
                let mut all = RealFault::ALL.to_vec();
                all.sort_by_key(|f| f.name());
                assert_eq!(drawn, all, "seed {seed}, round {round}");
            }
        }
    }
}

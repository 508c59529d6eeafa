//! The invariants, checked on the merged event order of the
//! [`observer`](crate::observer):
//!
//! 1. **No claim or volume disappears while in use.** At every PVC
//!    `DELETED` event, no scheduled pod (`spec.nodeName` set) referenced the
//!    claim just before that resourceVersion, whatever the pod's phase or
//!    deletion state (upstream's `podUsesPVC`); at every PV `DELETED` event,
//!    the volume was not `Bound` (upstream's pv-protection `isBeingUsed`).
//!    Likewise for VolumeAttributesClasses (when watched): at every class
//!    `DELETED` event, no claim (spec, current or pending target class) and
//!    no volume (spec) named it just before (upstream's vac-protection,
//!    docs/upstream-semantics.md §10.3). And for Secrets under the chart's
//!    `secrets-used-by-pods` ProtectionRule (when watched): at every Secret
//!    `DELETED` event, no pod that had not finished (phase other than
//!    Succeeded/Failed) referred to it just before (the rule's `while`).
//!    And for the run's ServiceCIDRs (when watched): at every ServiceCIDR
//!    `DELETED` event, no IPAddress managed by the API server's allocator
//!    had it as its only container just before (upstream's `canDeleteCIDR`,
//!    crates/service-cidr-protection: another ServiceCIDR, Terminating or
//!    not, containing the address or the whole range releases it).
//! 2. **No load balancer is orphaned.** When a Service is gone, cloud-sim
//!    has no load balancer for its UID: checked after every Service
//!    `DELETED` event, on every inventory sweep (which also catches a load
//!    balancer created late by a stale in-flight ensure), and at the end
//!    against the live Services.
//! 3. **Finalizers converge.** Once faults have stopped ("calm"), every
//!    object whose deletion was requested and which is no longer in use is
//!    gone within [`CONVERGENCE_BOUND`], measured from the later of calm and
//!    the moment it stopped being in use, to the instant up to which the
//!    merged watches are complete (`Timeline::complete_until`).
//! 4. **Leadership moves within the lease duration.** After the leader is
//!    killed, the next holder's `acquireTime` is at most the lease duration
//!    plus a tolerance after the dead leader's last `renewTime` (see
//!    [`Checker::tolerance`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use cloud_sim::LoadBalancer;
use jiff::Timestamp;
use service_cidr_protection::cidr::Prefix;

use crate::observer::{
    Change, IP_ALLOCATOR, IpAddressSummary, Kind, LeaseSummary, Observed, PodSummary, PvSummary,
    PvcSummary, SecretSummary, ServiceCidrSummary, ServiceSummary, Summary, VacSummary,
};

/// The Service cleanup finalizer's name ends so in both profiles
/// (`protection-manager.io/...` and `service.kubernetes.io/...`).
pub const LB_FINALIZER_SUFFIX: &str = "load-balancer-cleanup";

/// The storage protection finalizers end so in both profiles.
pub const PVC_FINALIZER_SUFFIX: &str = "pvc-protection";
pub const PV_FINALIZER_SUFFIX: &str = "pv-protection";
/// The class finalizer ends so in both profiles.
pub const VAC_FINALIZER_SUFFIX: &str = "vac-protection";
/// The finalizer of the chart's `secrets-used-by-pods` example rule ends so
/// (`<rules.exampleFinalizerDomain>/secret-in-use`).
pub const SECRET_RULE_FINALIZER_SUFFIX: &str = "/secret-in-use";
/// The ServiceCIDR finalizers: the project profile's and upstream's (which
/// kube-controller-manager's service-cidr-controller adds too).
pub const SERVICE_CIDR_FINALIZERS: [&str; 2] = [
    service_cidr_protection::INFO.finalizer.project,
    service_cidr_protection::INFO.finalizer.upstream,
];

/// How long after calm a releasable object may keep its finalizers.
pub const CONVERGENCE_BOUND: Duration = Duration::from_secs(30);

/// Which invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invariant {
    ClaimDeletedWhileInUse,
    VolumeDeletedWhileBound,
    ClassDeletedWhileInUse,
    SecretDeletedWhileInUse,
    ServiceCidrDeletedWhileInUse,
    OrphanedLoadBalancer,
    FinalizerNotRemoved,
    LeadershipDidNotMove,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invariant::ClaimDeletedWhileInUse => "a PVC disappeared while a scheduled pod used it",
            Invariant::VolumeDeletedWhileBound => "a PV disappeared while Bound",
            Invariant::ClassDeletedWhileInUse => {
                "a VolumeAttributesClass disappeared while a PVC or PV referred to it"
            }
            Invariant::SecretDeletedWhileInUse => {
                "a Secret under a ProtectionRule disappeared while a running pod referred to it"
            }
            Invariant::ServiceCidrDeletedWhileInUse => {
                "a ServiceCIDR disappeared while it was the only range of an allocated IPAddress"
            }
            Invariant::OrphanedLoadBalancer => "a load balancer outlived its Service",
            Invariant::FinalizerNotRemoved => {
                "a finalizer was not removed in time after faults stopped"
            }
            Invariant::LeadershipDidNotMove => "leadership did not move within the lease duration",
        })
    }
}

/// One violation with its evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    /// `Kind namespace/name`.
    pub object: String,
    /// The resourceVersion of the event that broke it, when there is one.
    pub rv: Option<u64>,
    pub evidence: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.object)?;
        if let Some(rv) = self.rv {
            write!(f, " at resourceVersion {rv}")?;
        }
        write!(f, ": {}", self.evidence)
    }
}

/// What was checked (printed by the chaos runs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub events: u64,
    /// Events at or before the sync point (applied without checks).
    pub unchecked_before_sync: u64,
    /// Objects that vanished during a watch gap (deleted unchecked).
    pub vanished_in_gap: u64,
    pub pvc_deletions_checked: u64,
    /// PVCs deleted while in use that never carried a protection finalizer
    /// (created and deleted before the manager added one; not a violation
    /// unless strict).
    pub unprotected_pvcs_deleted_in_use: u64,
    pub pv_deletions_checked: u64,
    /// PVs deleted while Bound that never carried a protection finalizer.
    pub unprotected_pvs_deleted_bound: u64,
    /// PVCs seen Terminating while a scheduled pod used them (the protection
    /// at work).
    pub pvcs_held_while_in_use: u64,
    /// PVs seen Terminating while Bound.
    pub pvs_held_while_bound: u64,
    /// VolumeAttributesClass deletions checked (no claim or volume named it).
    pub vac_deletions_checked: u64,
    /// Classes seen Terminating while a claim or volume named them.
    pub vacs_held_while_in_use: u64,
    /// Classes deleted in use that never carried the finalizer (created and
    /// deleted before the manager added it: no admission step adds it).
    pub unprotected_vacs_deleted_in_use: u64,
    /// Secret deletions checked (no unfinished pod referred to it).
    pub secret_deletions_checked: u64,
    /// Secrets seen Terminating while an unfinished pod referred to them.
    pub secrets_held_while_in_use: u64,
    /// Secrets deleted in use that never carried the rule's finalizer (the
    /// creation window: no admission step adds it).
    pub unprotected_secrets_deleted_in_use: u64,
    /// ServiceCIDR deletions checked (no allocated IPAddress left without a
    /// range).
    pub service_cidr_deletions_checked: u64,
    /// ServiceCIDRs seen Terminating while the only range of an allocated
    /// IPAddress.
    pub service_cidrs_held_while_in_use: u64,
    /// ServiceCIDR deletions with allocated addresses inside that another
    /// ServiceCIDR contains (released, as upstream: nothing is orphaned).
    pub service_cidrs_released_with_addresses_contained_elsewhere: u64,
    /// ServiceCIDRs released because another Terminating ServiceCIDR
    /// contained their addresses, that other one gone first: upstream's rule
    /// counts a Terminating ServiceCIDR as a container, so two that contain
    /// each other may both go (not a violation: the rule as upstream has it).
    pub service_cidrs_released_with_terminating_container: u64,
    /// ServiceCIDRs deleted in use that never carried a finalizer (the
    /// creation window: no admission step adds it).
    pub unprotected_service_cidrs_deleted_in_use: u64,
    pub service_deletions_checked: u64,
    /// Services deleted while they had a load balancer (ingress).
    pub services_deleted_with_lb: u64,
    pub cloud_sweeps: u64,
    pub load_balancers_checked: u64,
    pub leader_kills: u64,
    pub leadership_moves_checked: u64,
    pub leadership_transitions: u64,
    /// Longest last-renew-to-acquire interval after a kill.
    pub max_failover: Option<Duration>,
    pub converged_after_calm: u64,
    pub max_convergence: Option<Duration>,
}

impl Counts {
    /// One `name value` line per count.
    pub fn lines(&self) -> Vec<String> {
        let secs =
            |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.2}s", d.as_secs_f64()));
        vec![
            format!(
                "events observed (merged by resourceVersion)   {}",
                self.events
            ),
            format!(
                "  applied before the sync point (unchecked)   {}",
                self.unchecked_before_sync
            ),
            format!(
                "  objects vanished in a watch gap (unchecked) {}",
                self.vanished_in_gap
            ),
            format!(
                "PVC deletions checked (no scheduled user)     {}",
                self.pvc_deletions_checked
            ),
            format!(
                "  PVCs held Terminating while in use          {}",
                self.pvcs_held_while_in_use
            ),
            format!(
                "  deleted in use before any finalizer (window) {}",
                self.unprotected_pvcs_deleted_in_use
            ),
            format!(
                "PV deletions checked (not Bound)              {}",
                self.pv_deletions_checked
            ),
            format!(
                "  PVs held Terminating while Bound            {}",
                self.pvs_held_while_bound
            ),
            format!(
                "  deleted Bound before any finalizer (window) {}",
                self.unprotected_pvs_deleted_bound
            ),
            format!(
                "VolumeAttributesClass deletions checked (unused) {}",
                self.vac_deletions_checked
            ),
            format!(
                "  classes held Terminating while in use       {}",
                self.vacs_held_while_in_use
            ),
            format!(
                "  deleted in use before any finalizer (window) {}",
                self.unprotected_vacs_deleted_in_use
            ),
            format!(
                "Secret deletions checked (rule, unused)       {}",
                self.secret_deletions_checked
            ),
            format!(
                "  Secrets held Terminating while in use       {}",
                self.secrets_held_while_in_use
            ),
            format!(
                "  deleted in use before any finalizer (window) {}",
                self.unprotected_secrets_deleted_in_use
            ),
            format!(
                "ServiceCIDR deletions checked (no IP orphaned) {}",
                self.service_cidr_deletions_checked
            ),
            format!(
                "  ServiceCIDRs held Terminating while in use  {}",
                self.service_cidrs_held_while_in_use
            ),
            format!(
                "  released, their addresses in another range  {}",
                self.service_cidrs_released_with_addresses_contained_elsewhere
            ),
            format!(
                "  released with a Terminating container (upstream rule) {}",
                self.service_cidrs_released_with_terminating_container
            ),
            format!(
                "  deleted in use before any finalizer (window) {}",
                self.unprotected_service_cidrs_deleted_in_use
            ),
            format!(
                "Service deletions checked (no LB left)        {}",
                self.service_deletions_checked
            ),
            format!(
                "  of which had a load balancer                {}",
                self.services_deleted_with_lb
            ),
            format!(
                "cloud inventory sweeps                        {}",
                self.cloud_sweeps
            ),
            format!(
                "  load balancers checked in sweeps            {}",
                self.load_balancers_checked
            ),
            format!(
                "leader kills (SIGKILL)                        {}",
                self.leader_kills
            ),
            format!(
                "  leadership moves checked                    {}",
                self.leadership_moves_checked
            ),
            format!(
                "  longest last-renew -> new acquire           {}",
                secs(self.max_failover)
            ),
            format!(
                "leadership transitions seen                   {}",
                self.leadership_transitions
            ),
            format!(
                "objects released after calm (finalizers gone) {}",
                self.converged_after_calm
            ),
            format!(
                "  longest calm/free -> gone                   {}",
                secs(self.max_convergence)
            ),
        ]
    }
}

/// A SIGKILL of the leader, as recorded by the chaos driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub pod: String,
    /// The Lease holder identity at the time of the kill.
    pub identity: String,
    pub at: Timestamp,
}

/// A measured leadership move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub killed: String,
    pub new_holder: String,
    pub last_renew: Timestamp,
    pub acquired: Timestamp,
    pub failover: Duration,
}

/// Settings of the checks.
#[derive(Debug, Clone)]
pub struct CheckerConfig {
    /// The Lease's `leaseDurationSeconds` as configured.
    pub lease_duration: Duration,
    /// The leader election retry period as configured.
    pub retry_period: Duration,
    /// Namespaces whose objects and load balancers are this run's
    /// (cloud-sim and the cluster may be shared in cluster mode).
    pub namespaces: HashSet<String>,
    /// The run label's value (PVs are the run's by this label or by their
    /// claim's namespace).
    pub run: String,
    /// Every PVC and PV carries a protection finalizer from its creation (an
    /// admission plugin adds it): invariant 1 then holds for all of them.
    /// Otherwise (the project profile, finalizers added by the manager after
    /// creation) it holds for those that ever carried one, and the others
    /// deleted in use are counted as the documented creation window.
    pub strict: bool,
}

#[derive(Debug, Clone)]
struct Pending {
    kind: Kind,
    key: String,
    /// When it stopped being in use (None: still in use).
    free_since: Option<Instant>,
    finalizers: Vec<String>,
    rv: u64,
    reported: bool,
}

/// The state the invariants are checked against.
#[derive(Debug, Default)]
struct World {
    pods: HashMap<String, PodSummary>,
    pvcs: HashMap<String, PvcSummary>,
    pvs: HashMap<String, PvSummary>,
    services: HashMap<String, ServiceSummary>,
    vacs: HashMap<String, VacSummary>,
    secrets: HashMap<String, SecretSummary>,
    /// Every ServiceCIDR, the cluster's own too (they contain addresses).
    service_cidrs: HashMap<String, ServiceCidrSummary>,
    /// The IPAddresses the API server's allocator manages, by address.
    ips: HashMap<String, IpAddressSummary>,
}

impl World {
    /// Scheduled pods referencing the claim.
    fn users(&self, ns: &str, claim: &str) -> Vec<&PodSummary> {
        let mut v: Vec<&PodSummary> = self
            .pods
            .values()
            .filter(|p| {
                p.namespace == ns && !p.node_name.is_empty() && p.claims.iter().any(|c| c == claim)
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Unfinished pods referring to Secret `ns/name` (the rule's users).
    fn secret_users(&self, ns: &str, name: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .pods
            .values()
            .filter(|p| {
                p.namespace == ns
                    && p.secrets.iter().any(|s| s == name)
                    && !matches!(p.phase.as_str(), "Succeeded" | "Failed")
            })
            .map(|p| {
                format!(
                    "Pod {}/{} (uid {}, rv {}, {})",
                    p.namespace, p.name, p.uid, p.rv, p.phase
                )
            })
            .collect();
        v.sort();
        v
    }

    /// The allocated IPAddresses inside ServiceCIDR `name` (`cidrs`) that no
    /// other present ServiceCIDR contains (upstream's `canDeleteCIDR`: a
    /// Terminating one counts), as `IPAddress a (parent, rv)`.
    fn service_cidr_users(&self, name: &str, cidrs: &[String]) -> Vec<String> {
        let mut v: Vec<String> = self
            .ips
            .values()
            .filter(|ip| cidrs.iter().any(|c| prefix_contains_ip(c, &ip.name)))
            .filter(|ip| {
                !self.service_cidrs.values().any(|o| {
                    o.name != name && o.cidrs.iter().any(|c| prefix_contains_ip(c, &ip.name))
                })
            })
            .map(|ip| {
                format!(
                    "IPAddress {} (of {}, uid {}, rv {})",
                    ip.name, ip.parent, ip.uid, ip.rv
                )
            })
            .collect();
        v.sort();
        v
    }

    /// Claims and volumes naming the class, as `Kind ns/name (field)`.
    fn class_users(&self, class: &str) -> Vec<String> {
        let mut v: Vec<String> =
            self.pvcs
                .values()
                .filter(|c| c.classes.iter().any(|n| n == class))
                .map(|c| {
                    format!(
                        "PersistentVolumeClaim {}/{} (uid {}, rv {})",
                        c.namespace, c.name, c.uid, c.rv
                    )
                })
                .chain(
                    self.pvs.values().filter(|p| p.class == class).map(|p| {
                        format!("PersistentVolume {} (uid {}, rv {})", p.name, p.uid, p.rv)
                    }),
                )
                .collect();
        v.sort();
        v
    }
}

/// Checks the invariants on the merged event stream.
#[derive(Debug)]
pub struct Checker {
    cfg: CheckerConfig,
    world: World,
    counts: Counts,
    violations: Vec<Violation>,
    /// Deleted Services by UID: (key, rv of the DELETED event).
    deleted_services: HashMap<String, (String, u64)>,
    /// UIDs deleted since the last sweep.
    unswept: HashSet<String>,
    /// Services seen with the cleanup finalizer.
    guarded_services: HashSet<String>,
    /// PVCs and PVs seen with a protection finalizer.
    protected: HashSet<String>,
    orphans_reported: HashSet<String>,
    pending: BTreeMap<(Kind, String), Pending>,
    calm: Option<Instant>,
    lease_history: Vec<LeaseSummary>,
    kills: Vec<(Kill, bool)>,
    moves: Vec<Move>,
    held_pvcs: HashSet<String>,
    held_pvs: HashSet<String>,
    held_vacs: HashSet<String>,
    held_secrets: HashSet<String>,
    held_service_cidrs: HashSet<String>,
    /// ServiceCIDRs being deleted: the resourceVersion at which each was
    /// first seen Terminating.
    service_cidrs_terminating_since: HashMap<String, u64>,
    /// ServiceCIDRs gone: (resourceVersion of the DELETED event, CIDRs).
    service_cidrs_gone: Vec<(u64, Vec<String>)>,
}

/// upstream `servicecidr.PrefixContainsIP` (crates/service-cidr-protection,
/// table-tested against upstream's): `ip` is inside `cidr` and is neither
/// its network address nor (IPv4) its broadcast address, which no
/// ServiceCIDR allocates.
fn prefix_contains_ip(cidr: &str, ip: &str) -> bool {
    match (Prefix::parse(cidr), ip.parse()) {
        (Some(p), Ok(a)) => p.contains_ip(a),
        _ => false,
    }
}

fn pod_key(p: &PodSummary) -> String {
    format!("{}/{}", p.namespace, p.name)
}

fn ns_key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

impl Checker {
    pub fn new(cfg: CheckerConfig) -> Checker {
        Checker {
            cfg,
            world: World::default(),
            counts: Counts::default(),
            violations: Vec::new(),
            deleted_services: HashMap::new(),
            unswept: HashSet::new(),
            guarded_services: HashSet::new(),
            protected: HashSet::new(),
            orphans_reported: HashSet::new(),
            pending: BTreeMap::new(),
            calm: None,
            lease_history: Vec::new(),
            kills: Vec::new(),
            moves: Vec::new(),
            held_pvcs: HashSet::new(),
            held_pvs: HashSet::new(),
            held_vacs: HashSet::new(),
            held_secrets: HashSet::new(),
            held_service_cidrs: HashSet::new(),
            service_cidrs_terminating_since: HashMap::new(),
            service_cidrs_gone: Vec::new(),
        }
    }

    /// The slack allowed beyond the lease duration for a leadership move:
    /// one retry period (the API round trips of the standby's read, its
    /// forced release of the expired Lease and its lock, on a loaded
    /// machine) plus 1 s (kube-lease-manager sleeps a random 0-1 s after
    /// releasing an expired Lease before taking it, to avoid collisions).
    pub fn tolerance(&self) -> Duration {
        self.cfg.retry_period + Duration::from_secs(1)
    }

    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    pub fn moves(&self) -> &[Move] {
        &self.moves
    }

    /// The latest Lease state.
    pub fn lease(&self) -> Option<&LeaseSummary> {
        self.lease_history.last()
    }

    /// Faults have stopped: start the convergence clock.
    pub fn set_calm(&mut self, at: Instant) {
        self.calm = Some(at);
    }

    pub fn record_kill(&mut self, kill: Kill) {
        self.counts.leader_kills += 1;
        self.kills.push((kill, false));
    }

    fn violate(&mut self, invariant: Invariant, object: String, rv: Option<u64>, evidence: String) {
        tracing::error!(%invariant, %object, ?rv, %evidence, "invariant violated");
        self.violations.push(Violation {
            invariant,
            object,
            rv,
            evidence,
        });
    }

    /// Applies one event (in resourceVersion order). `sync_rv`: events at or
    /// before it only update the state.
    pub fn apply(&mut self, ev: &Observed, sync_rv: u64) {
        self.counts.events += 1;
        let checked = ev.rv > sync_rv && ev.change != Change::Listed;
        if !checked && ev.change != Change::Listed {
            self.counts.unchecked_before_sync += 1;
        }
        let deleted = matches!(ev.change, Change::Deleted | Change::VanishedInGap);
        if ev.change == Change::VanishedInGap {
            self.counts.vanished_in_gap += 1;
        }
        let checked = checked && ev.change != Change::VanishedInGap;
        match &ev.obj {
            Summary::Pod(p) => self.apply_pod(p, deleted, ev.seen),
            Summary::Pvc(c) => self.apply_pvc(c, deleted, checked, ev),
            Summary::Pv(v) => self.apply_pv(v, deleted, checked, ev),
            Summary::Service(s) => self.apply_service(s, deleted, checked, ev),
            Summary::Vac(v) => self.apply_vac(v, deleted, checked, ev),
            Summary::Secret(x) => self.apply_secret(x, deleted, checked, ev),
            Summary::ServiceCidr(x) => self.apply_service_cidr(x, deleted, checked, ev),
            Summary::IpAddress(a) => {
                if deleted || a.managed_by != IP_ALLOCATOR {
                    self.world.ips.remove(&a.name);
                } else {
                    self.world.ips.insert(a.name.clone(), a.clone());
                }
                self.refresh_service_cidrs(ev.seen);
            }
            Summary::Lease(l) => {
                if let Some(prev) = self.lease_history.last()
                    && !l.holder.is_empty()
                    && prev.holder != l.holder
                {
                    self.counts.leadership_transitions += 1;
                }
                if !deleted {
                    self.lease_history.push(l.clone());
                }
            }
        }
    }

    fn apply_pod(&mut self, p: &PodSummary, deleted: bool, seen: Instant) {
        let key = pod_key(p);
        let old = if deleted {
            self.world.pods.remove(&key)
        } else {
            self.world.pods.insert(key, p.clone())
        };
        // Claims whose "in use" may have changed.
        let mut claims: Vec<String> = p.claims.clone();
        if let Some(o) = &old {
            claims.extend(o.claims.iter().cloned());
        }
        claims.sort();
        claims.dedup();
        for c in claims {
            let k = ns_key(&p.namespace, &c);
            if self.pending.contains_key(&(Kind::Pvc, k.clone())) {
                self.refresh_pvc(&p.namespace, &c, seen);
            }
        }
        let mut secrets: Vec<String> = p.secrets.clone();
        if let Some(o) = &old {
            secrets.extend(o.secrets.iter().cloned());
        }
        secrets.sort();
        secrets.dedup();
        for s in secrets {
            self.refresh_secret(&p.namespace, &s, seen);
        }
    }

    /// A pending Secret's "in use" after a pod changed.
    fn refresh_secret(&mut self, ns: &str, name: &str, seen: Instant) {
        let in_use = !self.world.secret_users(ns, name).is_empty();
        if let Some(p) = self.pending.get_mut(&(Kind::Secret, ns_key(ns, name))) {
            if in_use {
                p.free_since = None;
            } else if p.free_since.is_none() {
                p.free_since = Some(seen);
            }
        }
    }

    fn apply_secret(&mut self, x: &SecretSummary, deleted: bool, checked: bool, ev: &Observed) {
        let key = ns_key(&x.namespace, &x.name);
        if x.finalizers
            .iter()
            .any(|f| f.ends_with(SECRET_RULE_FINALIZER_SUFFIX))
        {
            self.protected.insert(x.uid.clone());
        }
        if deleted {
            if checked {
                self.counts.secret_deletions_checked += 1;
                let users = self.world.secret_users(&x.namespace, &x.name);
                if !users.is_empty() && !self.protected.contains(&x.uid) {
                    self.counts.unprotected_secrets_deleted_in_use += 1;
                } else if !users.is_empty() {
                    self.violate(
                        Invariant::SecretDeletedWhileInUse,
                        format!("Secret {key} (uid {})", x.uid),
                        Some(ev.rv),
                        format!(
                            "DELETED with finalizers {:?} while {} referred to it",
                            x.finalizers,
                            users.join("; ")
                        ),
                    );
                }
            }
            self.world.secrets.remove(&key);
            self.converged(Kind::Secret, &key, ev.seen);
            return;
        }
        self.world.secrets.insert(key.clone(), x.clone());
        if x.deleting {
            let in_use = !self.world.secret_users(&x.namespace, &x.name).is_empty();
            if in_use && self.held_secrets.insert(x.uid.clone()) {
                self.counts.secrets_held_while_in_use += 1;
            }
            let p = self
                .pending
                .entry((Kind::Secret, key.clone()))
                .or_insert_with(|| Pending {
                    kind: Kind::Secret,
                    key: key.clone(),
                    free_since: None,
                    finalizers: vec![],
                    rv: 0,
                    reported: false,
                });
            p.finalizers = x.finalizers.clone();
            p.rv = x.rv;
            self.refresh_secret(&x.namespace, &x.name, ev.seen);
        }
    }

    /// Every pending ServiceCIDR's "in use" after a range or an address
    /// changed.
    fn refresh_service_cidrs(&mut self, seen: Instant) {
        let keys: Vec<String> = self
            .pending
            .keys()
            .filter(|(k, _)| *k == Kind::ServiceCidr)
            .map(|(_, key)| key.clone())
            .collect();
        for key in keys {
            let in_use = self
                .world
                .service_cidrs
                .get(&key)
                .is_some_and(|c| !self.world.service_cidr_users(&c.name, &c.cidrs).is_empty());
            if let Some(p) = self.pending.get_mut(&(Kind::ServiceCidr, key)) {
                if in_use {
                    p.free_since = None;
                } else if p.free_since.is_none() {
                    p.free_since = Some(seen);
                }
            }
        }
    }

    fn apply_service_cidr(
        &mut self,
        x: &ServiceCidrSummary,
        deleted: bool,
        checked: bool,
        ev: &Observed,
    ) {
        let key = x.name.clone();
        let ours = !x.run.is_empty() && x.run == self.cfg.run;
        if x.finalizers
            .iter()
            .any(|f| SERVICE_CIDR_FINALIZERS.contains(&f.as_str()))
        {
            self.protected.insert(x.uid.clone());
        }
        if deleted {
            if checked && ours {
                self.counts.service_cidr_deletions_checked += 1;
                let users = self.world.service_cidr_users(&x.name, &x.cidrs);
                if users.is_empty()
                    && self
                        .world
                        .ips
                        .values()
                        .any(|ip| x.cidrs.iter().any(|c| prefix_contains_ip(c, &ip.name)))
                {
                    self.counts
                        .service_cidrs_released_with_addresses_contained_elsewhere += 1;
                } else if !users.is_empty() && !self.protected.contains(&x.uid) {
                    self.counts.unprotected_service_cidrs_deleted_in_use += 1;
                } else if !users.is_empty() && self.released_with_terminating_container(x) {
                    self.counts
                        .service_cidrs_released_with_terminating_container += 1;
                } else if !users.is_empty() {
                    self.violate(
                        Invariant::ServiceCidrDeletedWhileInUse,
                        format!("ServiceCIDR {key} (uid {}, {:?})", x.uid, x.cidrs),
                        Some(ev.rv),
                        format!(
                            "DELETED with finalizers {:?} while no other ServiceCIDR contained {}",
                            x.finalizers,
                            users.join("; ")
                        ),
                    );
                }
            }
            self.world.service_cidrs.remove(&key);
            self.service_cidrs_terminating_since.remove(&key);
            self.service_cidrs_gone.push((ev.rv, x.cidrs.clone()));
            self.converged(Kind::ServiceCidr, &key, ev.seen);
            self.refresh_service_cidrs(ev.seen);
            return;
        }
        self.world.service_cidrs.insert(key.clone(), x.clone());
        if x.deleting && ours {
            self.service_cidrs_terminating_since
                .entry(key.clone())
                .or_insert(ev.rv);
            let in_use = !self.world.service_cidr_users(&x.name, &x.cidrs).is_empty();
            if in_use && self.held_service_cidrs.insert(x.uid.clone()) {
                self.counts.service_cidrs_held_while_in_use += 1;
            }
            self.mark_pending(Kind::ServiceCidr, &key, &x.finalizers, x.rv);
        }
        self.refresh_service_cidrs(ev.seen);
    }

    /// Records that `kind` `key` waits for its deletion to complete, with
    /// its latest finalizers and resourceVersion (in use until a refresh
    /// says otherwise).
    fn mark_pending(&mut self, kind: Kind, key: &str, finalizers: &[String], rv: u64) {
        let p = self
            .pending
            .entry((kind, key.to_string()))
            .or_insert_with(|| Pending {
                kind,
                key: key.to_string(),
                free_since: None,
                finalizers: vec![],
                rv: 0,
                reported: false,
            });
        p.finalizers = finalizers.to_vec();
        p.rv = rv;
    }

    /// Whether every address that ServiceCIDR `x` leaves without a range
    /// was contained by another ServiceCIDR deleted while `x` was
    /// Terminating (so Terminating too): upstream's rule counted that one as
    /// a container when it released `x`.
    fn released_with_terminating_container(&self, x: &ServiceCidrSummary) -> bool {
        let Some(since) = self.service_cidrs_terminating_since.get(&x.name) else {
            return false;
        };
        self.world
            .ips
            .values()
            .filter(|ip| x.cidrs.iter().any(|c| prefix_contains_ip(c, &ip.name)))
            .filter(|ip| {
                !self.world.service_cidrs.values().any(|o| {
                    o.name != x.name && o.cidrs.iter().any(|c| prefix_contains_ip(c, &ip.name))
                })
            })
            .all(|ip| {
                self.service_cidrs_gone.iter().any(|(rv, cidrs)| {
                    rv > since && cidrs.iter().any(|c| prefix_contains_ip(c, &ip.name))
                })
            })
    }

    fn refresh_pvc(&mut self, ns: &str, name: &str, seen: Instant) {
        let in_use = !self.world.users(ns, name).is_empty();
        if let Some(p) = self.pending.get_mut(&(Kind::Pvc, ns_key(ns, name))) {
            if in_use {
                p.free_since = None;
            } else if p.free_since.is_none() {
                p.free_since = Some(seen);
            }
        }
    }

    fn apply_pvc(&mut self, c: &PvcSummary, deleted: bool, checked: bool, ev: &Observed) {
        let key = ns_key(&c.namespace, &c.name);
        let mut classes = c.classes.clone();
        if let Some(old) = self.world.pvcs.get(&key) {
            classes.extend(old.classes.iter().cloned());
        }
        self.apply_pvc_inner(c, deleted, checked, ev);
        for class in classes {
            self.refresh_vac(&class, ev.seen);
        }
    }

    fn apply_pvc_inner(&mut self, c: &PvcSummary, deleted: bool, checked: bool, ev: &Observed) {
        let key = ns_key(&c.namespace, &c.name);
        if deleted {
            if checked {
                self.counts.pvc_deletions_checked += 1;
                let users = self.world.users(&c.namespace, &c.name);
                let protected = self.cfg.strict
                    || self.protected.contains(&c.uid)
                    || c.finalizers
                        .iter()
                        .any(|f| f.ends_with(PVC_FINALIZER_SUFFIX));
                if !users.is_empty() && !protected {
                    // Never carried a protection finalizer: deleted in the
                    // window before the manager added one (no admission
                    // plugin adds it at creation with the project profile).
                    self.counts.unprotected_pvcs_deleted_in_use += 1;
                } else if !users.is_empty() {
                    let evidence = users
                        .iter()
                        .map(|u| {
                            format!(
                                "pod {}/{} (uid {}, node {:?}, phase {:?}, deleting {}, last seen at rv {}) references it",
                                u.namespace, u.name, u.uid, u.node_name, u.phase, u.deleting, u.rv
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ");
                    self.violate(
                        Invariant::ClaimDeletedWhileInUse,
                        format!("PersistentVolumeClaim {key} (uid {})", c.uid),
                        Some(ev.rv),
                        format!(
                            "DELETED with finalizers {:?} while {evidence}",
                            c.finalizers
                        ),
                    );
                }
            }
            self.world.pvcs.remove(&key);
            self.converged(Kind::Pvc, &key, ev.seen);
            return;
        }
        if c.finalizers
            .iter()
            .any(|f| f.ends_with(PVC_FINALIZER_SUFFIX))
        {
            self.protected.insert(c.uid.clone());
        }
        self.world.pvcs.insert(key.clone(), c.clone());
        if c.deleting {
            let in_use = !self.world.users(&c.namespace, &c.name).is_empty();
            if in_use && self.held_pvcs.insert(c.uid.clone()) {
                self.counts.pvcs_held_while_in_use += 1;
            }
            let entry = self
                .pending
                .entry((Kind::Pvc, key.clone()))
                .or_insert_with(|| Pending {
                    kind: Kind::Pvc,
                    key: key.clone(),
                    free_since: None,
                    finalizers: vec![],
                    rv: 0,
                    reported: false,
                });
            entry.finalizers = c.finalizers.clone();
            entry.rv = c.rv;
            self.refresh_pvc(&c.namespace, &c.name, ev.seen);
        }
    }

    fn apply_pv(&mut self, v: &PvSummary, deleted: bool, checked: bool, ev: &Observed) {
        let mut classes = vec![v.class.clone()];
        if let Some(old) = self.world.pvs.get(&v.name) {
            classes.push(old.class.clone());
        }
        self.apply_pv_inner(v, deleted, checked, ev);
        for class in classes.into_iter().filter(|c| !c.is_empty()) {
            self.refresh_vac(&class, ev.seen);
        }
    }

    /// A pending class's "in use" after a user changed.
    fn refresh_vac(&mut self, class: &str, seen: Instant) {
        let in_use = !self.world.class_users(class).is_empty();
        if let Some(p) = self.pending.get_mut(&(Kind::Vac, class.to_string())) {
            if in_use {
                p.free_since = None;
            } else if p.free_since.is_none() {
                p.free_since = Some(seen);
            }
        }
    }

    fn apply_vac(&mut self, v: &VacSummary, deleted: bool, checked: bool, ev: &Observed) {
        let key = v.name.clone();
        if v.finalizers
            .iter()
            .any(|f| f.ends_with(VAC_FINALIZER_SUFFIX))
        {
            self.protected.insert(v.uid.clone());
        }
        if deleted {
            if checked {
                self.counts.vac_deletions_checked += 1;
                let users = self.world.class_users(&v.name);
                let protected = self.protected.contains(&v.uid);
                if !users.is_empty() && !protected {
                    self.counts.unprotected_vacs_deleted_in_use += 1;
                } else if !users.is_empty() {
                    self.violate(
                        Invariant::ClassDeletedWhileInUse,
                        format!("VolumeAttributesClass {key} (uid {})", v.uid),
                        Some(ev.rv),
                        format!(
                            "DELETED with finalizers {:?} while {} named it",
                            v.finalizers,
                            users.join("; ")
                        ),
                    );
                }
            }
            self.world.vacs.remove(&key);
            self.converged(Kind::Vac, &key, ev.seen);
            return;
        }
        self.world.vacs.insert(key.clone(), v.clone());
        if v.deleting {
            let in_use = !self.world.class_users(&v.name).is_empty();
            if in_use && self.held_vacs.insert(v.uid.clone()) {
                self.counts.vacs_held_while_in_use += 1;
            }
            let p = self
                .pending
                .entry((Kind::Vac, key.clone()))
                .or_insert_with(|| Pending {
                    kind: Kind::Vac,
                    key: key.clone(),
                    free_since: None,
                    finalizers: vec![],
                    rv: 0,
                    reported: false,
                });
            p.finalizers = v.finalizers.clone();
            p.rv = v.rv;
            self.refresh_vac(&v.name, ev.seen);
        }
    }

    fn apply_pv_inner(&mut self, v: &PvSummary, deleted: bool, checked: bool, ev: &Observed) {
        let key = v.name.clone();
        let claim_ns = v
            .claim
            .split_once('/')
            .map(|(ns, _)| ns)
            .unwrap_or_default();
        let ours = (!v.run.is_empty() && v.run == self.cfg.run)
            || self.cfg.namespaces.contains(claim_ns)
            || self.world.pvs.contains_key(&key);
        if !ours {
            return;
        }
        if deleted {
            if checked {
                self.counts.pv_deletions_checked += 1;
                let protected = self.cfg.strict
                    || self.protected.contains(&v.uid)
                    || v.finalizers
                        .iter()
                        .any(|f| f.ends_with(PV_FINALIZER_SUFFIX));
                if v.phase == "Bound" && !protected {
                    self.counts.unprotected_pvs_deleted_bound += 1;
                } else if v.phase == "Bound" {
                    self.violate(
                        Invariant::VolumeDeletedWhileBound,
                        format!("PersistentVolume {key} (uid {})", v.uid),
                        Some(ev.rv),
                        format!(
                            "DELETED in phase Bound (claim {:?}, finalizers {:?})",
                            v.claim, v.finalizers
                        ),
                    );
                }
            }
            self.world.pvs.remove(&key);
            self.converged(Kind::Pv, &key, ev.seen);
            return;
        }
        if v.finalizers
            .iter()
            .any(|f| f.ends_with(PV_FINALIZER_SUFFIX))
        {
            self.protected.insert(v.uid.clone());
        }
        self.world.pvs.insert(key.clone(), v.clone());
        if v.deleting {
            let bound = v.phase == "Bound";
            if bound && self.held_pvs.insert(v.uid.clone()) {
                self.counts.pvs_held_while_bound += 1;
            }
            let p = self
                .pending
                .entry((Kind::Pv, key.clone()))
                .or_insert_with(|| Pending {
                    kind: Kind::Pv,
                    key: key.clone(),
                    free_since: None,
                    finalizers: vec![],
                    rv: 0,
                    reported: false,
                });
            p.finalizers = v.finalizers.clone();
            p.rv = v.rv;
            if bound {
                p.free_since = None;
            } else if p.free_since.is_none() {
                p.free_since = Some(ev.seen);
            }
        }
    }

    fn apply_service(&mut self, s: &ServiceSummary, deleted: bool, checked: bool, ev: &Observed) {
        let key = ns_key(&s.namespace, &s.name);
        if s.finalizers
            .iter()
            .any(|f| f.ends_with(LB_FINALIZER_SUFFIX))
        {
            self.guarded_services.insert(s.uid.clone());
        }
        if deleted {
            // Only a Service that carried the cleanup finalizer is promised
            // to outlive its load balancer (without it, as at release 0.1,
            // the load balancer is deleted after the Service, upstream's
            // non-finalizer path; the final check still finds leftovers).
            if self.guarded_services.contains(&s.uid) {
                if checked && !s.ingress.is_empty() {
                    self.counts.services_deleted_with_lb += 1;
                }
                self.deleted_services
                    .insert(s.uid.clone(), (key.clone(), ev.rv));
                if checked {
                    self.unswept.insert(s.uid.clone());
                }
            }
            self.world.services.remove(&key);
            self.converged(Kind::Service, &key, ev.seen);
            return;
        }
        self.world.services.insert(key.clone(), s.clone());
        if s.deleting {
            let p = self
                .pending
                .entry((Kind::Service, key.clone()))
                .or_insert_with(|| Pending {
                    kind: Kind::Service,
                    key: key.clone(),
                    free_since: Some(ev.seen),
                    finalizers: vec![],
                    rv: 0,
                    reported: false,
                });
            p.finalizers = s.finalizers.clone();
            p.rv = s.rv;
        }
    }

    fn converged(&mut self, kind: Kind, key: &str, seen: Instant) {
        let Some(p) = self.pending.remove(&(kind, key.to_string())) else {
            return;
        };
        if let (Some(calm), Some(free)) = (self.calm, p.free_since)
            && seen >= calm
        {
            let start = free.max(calm);
            let took = seen.saturating_duration_since(start);
            self.counts.converged_after_calm += 1;
            self.counts.max_convergence =
                Some(self.counts.max_convergence.map_or(took, |m| m.max(took)));
        }
    }

    /// Services deleted since the last sweep (the caller then sweeps).
    pub fn wants_sweep(&self) -> bool {
        !self.unswept.is_empty()
    }

    /// Checks cloud-sim's inventory: no load balancer may belong to a
    /// Service that was deleted.
    pub fn sweep_cloud(&mut self, lbs: &[LoadBalancer]) {
        self.counts.cloud_sweeps += 1;
        self.counts.service_deletions_checked += self.unswept.len() as u64;
        self.unswept.clear();
        for lb in lbs {
            if !self.cfg.namespaces.contains(&lb.service.namespace) {
                continue;
            }
            self.counts.load_balancers_checked += 1;
            if let Some((key, rv)) = self.deleted_services.get(&lb.service.uid).cloned()
                && self.orphans_reported.insert(lb.service.uid.clone())
            {
                self.violate(
                    Invariant::OrphanedLoadBalancer,
                    format!("Service {key} (uid {})", lb.service.uid),
                    Some(rv),
                    format!(
                        "the Service was DELETED at resourceVersion {rv} but cloud-sim still has load balancer {} ({:?}) created {} updated {}{}",
                        lb.name,
                        lb.status.ingress.iter().filter_map(|i| i.ip.clone()).collect::<Vec<_>>(),
                        lb.created_at,
                        lb.updated_at,
                        ""
                    ),
                );
            }
        }
    }

    /// The end of a run: every load balancer of the run's namespaces must
    /// belong to a live Service.
    pub fn final_cloud_check(&mut self, lbs: &[LoadBalancer], live_service_uids: &HashSet<String>) {
        self.sweep_cloud(lbs);
        for lb in lbs {
            if !self.cfg.namespaces.contains(&lb.service.namespace)
                || live_service_uids.contains(&lb.service.uid)
                || self.orphans_reported.contains(&lb.service.uid)
            {
                continue;
            }
            self.orphans_reported.insert(lb.service.uid.clone());
            self.violate(
                Invariant::OrphanedLoadBalancer,
                format!(
                    "Service {}/{} (uid {})",
                    lb.service.namespace, lb.service.name, lb.service.uid
                ),
                None,
                format!(
                    "no live Service has this UID but cloud-sim has load balancer {} created {} updated {}",
                    lb.name, lb.created_at, lb.updated_at
                ),
            );
        }
    }

    /// Time-based checks: finalizers overdue after calm, leadership moves.
    /// `final_` at the end of a run (unresolved kills past the bound fail).
    pub fn check_time(&mut self, now: Instant, now_wall: Timestamp) {
        if let Some(calm) = self.calm {
            let mut overdue = Vec::new();
            for p in self.pending.values_mut() {
                if p.reported {
                    continue;
                }
                if let Some(free) = p.free_since {
                    let start = free.max(calm);
                    let waited = now.saturating_duration_since(start);
                    if waited > CONVERGENCE_BOUND {
                        p.reported = true;
                        overdue.push((p.kind, p.key.clone(), p.rv, p.finalizers.clone(), waited));
                    }
                }
            }
            for (kind, key, rv, fins, waited) in overdue {
                self.violate(
                    Invariant::FinalizerNotRemoved,
                    format!("{kind} {key}"),
                    Some(rv),
                    format!(
                        "deletion requested and not in use, still present {:.1}s after calm (bound {}s) with finalizers {fins:?}",
                        waited.as_secs_f64(),
                        CONVERGENCE_BOUND.as_secs()
                    ),
                );
            }
        }
        self.check_leadership(now_wall, false);
    }

    /// Evaluates recorded kills against the Lease history.
    pub fn check_leadership(&mut self, now: Timestamp, final_: bool) {
        let bound = self.cfg.lease_duration + self.tolerance();
        let mut results = Vec::new();
        for (i, (kill, done)) in self.kills.iter().enumerate() {
            if *done {
                continue;
            }
            let Some(last) = self
                .lease_history
                .iter()
                .rposition(|l| l.holder == kill.identity)
            else {
                // The observer releases events only once every watch has
                // moved past them, so on a loaded machine the Lease states
                // that name the killed leader can still be buffered when the
                // kill is recorded: only the final check (after the rest is
                // drained) may conclude that the history never names it.
                if final_ {
                    results.push((i, Err(format!(
                        "the Lease history never names {} as holder (was the leader's identity read right?)",
                        kill.identity
                    ))));
                }
                continue;
            };
            let last_renew = self.lease_history[last]
                .renew_time
                .or(self.lease_history[last].acquire_time);
            let Some(last_renew) = last_renew else {
                results.push((
                    i,
                    Err("the dead leader's Lease state has no renewTime".into()),
                ));
                continue;
            };
            let next = self.lease_history[last + 1..]
                .iter()
                .find(|l| !l.holder.is_empty() && l.holder != kill.identity);
            match next {
                Some(n) => {
                    let acquired = n.acquire_time.or(n.renew_time).unwrap_or(last_renew);
                    let failover = acquired.duration_since(last_renew);
                    let failover = Duration::from_secs_f64(failover.as_secs_f64().max(0.0));
                    results.push((
                        i,
                        Ok(Move {
                            killed: kill.identity.clone(),
                            new_holder: n.holder.clone(),
                            last_renew,
                            acquired,
                            failover,
                        }),
                    ));
                }
                None => {
                    let waited = now.duration_since(last_renew).as_secs_f64().max(0.0);
                    // The observer lags a little behind the API server.
                    if final_ || waited > bound.as_secs_f64() + 5.0 {
                        if waited > bound.as_secs_f64() {
                            results.push((
                                i,
                                Err(format!(
                                    "no other holder took the Lease {waited:.1}s after the dead leader's last renewTime {last_renew} (bound {:.1}s)",
                                    bound.as_secs_f64()
                                )),
                            ));
                        } else if final_ {
                            // The run ended before the lease could expire:
                            // not a move to check.
                            results.push((i, Err(String::new())));
                        }
                    }
                }
            }
        }
        for (i, r) in results {
            let kill = self.kills[i].0.clone();
            self.kills[i].1 = true;
            match r {
                Ok(m) => {
                    self.counts.leadership_moves_checked += 1;
                    self.counts.max_failover = Some(
                        self.counts
                            .max_failover
                            .map_or(m.failover, |x| x.max(m.failover)),
                    );
                    if m.failover > bound {
                        self.violate(
                            Invariant::LeadershipDidNotMove,
                            format!("Lease holder {}", kill.identity),
                            None,
                            format!(
                                "killed at {} (pod {}); last renewTime {}, {} acquired at {}: {:.2}s > lease duration {:.0}s + tolerance {:.0}s",
                                kill.at,
                                kill.pod,
                                m.last_renew,
                                m.new_holder,
                                m.acquired,
                                m.failover.as_secs_f64(),
                                self.cfg.lease_duration.as_secs_f64(),
                                self.tolerance().as_secs_f64()
                            ),
                        );
                    }
                    self.moves.push(m);
                }
                Err(e) if e.is_empty() => {}
                Err(e) => self.violate(
                    Invariant::LeadershipDidNotMove,
                    format!("Lease holder {}", kill.identity),
                    None,
                    format!("killed at {} (pod {}): {e}", kill.at, kill.pod),
                ),
            }
        }
    }

    /// Objects whose deletion was requested and that are still present:
    /// `(kind, key, in use, finalizers)`, for diagnostics.
    pub fn pending(&self) -> Vec<(Kind, String, bool, Vec<String>)> {
        self.pending
            .values()
            .map(|p| {
                (
                    p.kind,
                    p.key.clone(),
                    p.free_since.is_none(),
                    p.finalizers.clone(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CheckerConfig {
        CheckerConfig {
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
            namespaces: ["ns".to_string()].into_iter().collect(),
            run: "run".into(),
            strict: false,
        }
    }

    fn at(rv: u64, change: Change, obj: Summary) -> Observed {
        Observed {
            rv,
            change,
            obj,
            seen: Instant::now(),
            seen_wall: Timestamp::now(),
        }
    }

    fn pod(name: &str, node: &str, claims: &[&str], rv: u64) -> Summary {
        Summary::Pod(PodSummary {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            node_name: node.into(),
            claims: claims.iter().map(|s| s.to_string()).collect(),
            secrets: vec![],
            deleting: false,
            phase: "Running".into(),
        })
    }

    fn pvc(name: &str, deleting: bool, rv: u64) -> Summary {
        Summary::Pvc(PvcSummary {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            finalizers: vec!["protection-manager.io/pvc-protection".into()],
            deleting,
            phase: "Bound".into(),
            volume_name: String::new(),
            classes: vec![],
        })
    }

    fn pv(name: &str, phase: &str, deleting: bool, rv: u64) -> Summary {
        Summary::Pv(PvSummary {
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            finalizers: vec!["protection-manager.io/pv-protection".into()],
            deleting,
            phase: phase.into(),
            claim: "ns/c".into(),
            run: String::new(),
            class: String::new(),
        })
    }

    fn vac(name: &str, finalizer: bool, deleting: bool, rv: u64) -> Summary {
        Summary::Vac(VacSummary {
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            finalizers: if finalizer {
                vec!["protection-manager.io/vac-protection".into()]
            } else {
                vec![]
            },
            deleting,
        })
    }

    fn pvc_of_class(name: &str, class: &str, rv: u64) -> Summary {
        let mut c = pvc(name, false, rv);
        if let Summary::Pvc(x) = &mut c {
            x.classes = vec![class.into()];
        }
        c
    }

    fn pv_of_class(name: &str, class: &str, rv: u64) -> Summary {
        let mut v = pv(name, "Available", false, rv);
        if let Summary::Pv(x) = &mut v {
            x.class = class.into();
            x.run = "run".into();
        }
        v
    }

    #[test]
    fn a_class_deleted_while_a_claim_or_volume_names_it_is_a_violation() {
        // Named by a claim: DELETED is a violation naming the claim.
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, vac("gold", true, false, 2)), 1);
        c.apply(&at(3, Change::Added, pvc_of_class("c", "gold", 3)), 1);
        c.apply(&at(4, Change::Modified, vac("gold", true, true, 4)), 1);
        assert_eq!(c.counts().vacs_held_while_in_use, 1);
        c.apply(&at(5, Change::Deleted, vac("gold", true, true, 5)), 1);
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        let v = &c.violations()[0];
        assert_eq!(v.invariant, Invariant::ClassDeletedWhileInUse);
        assert!(v.to_string().contains("PersistentVolumeClaim ns/c"), "{v}");
        // Named by a volume, likewise.
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, vac("silver", true, false, 2)), 1);
        c.apply(&at(3, Change::Added, pv_of_class("pv-1", "silver", 3)), 1);
        c.apply(&at(5, Change::Deleted, vac("silver", true, true, 5)), 1);
        assert!(
            c.violations()[0]
                .to_string()
                .contains("PersistentVolume pv-1")
        );
        // Freed first (the claim went), then deleted: checked, no violation,
        // and it converges.
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, vac("gold", true, false, 2)), 1);
        c.apply(&at(3, Change::Added, pvc_of_class("c", "gold", 3)), 1);
        c.apply(&at(4, Change::Modified, vac("gold", true, true, 4)), 1);
        assert_eq!(c.pending().len(), 1);
        assert!(c.pending()[0].2, "in use");
        c.apply(&at(5, Change::Deleted, pvc_of_class("c", "gold", 5)), 1);
        assert!(!c.pending()[0].2, "free once the claim is gone");
        c.apply(&at(6, Change::Deleted, vac("gold", true, true, 6)), 1);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        assert_eq!(c.counts().vac_deletions_checked, 1);
        assert!(c.pending().is_empty());
        // Never carried the finalizer: the creation window, counted.
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, pvc_of_class("c", "new", 2)), 1);
        c.apply(&at(3, Change::Added, vac("new", false, false, 3)), 1);
        c.apply(&at(4, Change::Deleted, vac("new", false, true, 4)), 1);
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().unprotected_vacs_deleted_in_use, 1);
    }

    fn secret(name: &str, finalizer: bool, deleting: bool, rv: u64) -> Summary {
        Summary::Secret(SecretSummary {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            finalizers: if finalizer {
                vec!["example.com/secret-in-use".into()]
            } else {
                vec![]
            },
            deleting,
        })
    }

    fn pod_with_secret(name: &str, secret: &str, phase: &str, rv: u64) -> Summary {
        let mut p = pod(name, "", &[], rv);
        if let Summary::Pod(x) = &mut p {
            x.secrets = vec![secret.into()];
            x.phase = phase.into();
        }
        p
    }

    #[test]
    fn a_secret_under_the_rule_deleted_while_an_unfinished_pod_refers_to_it_is_a_violation() {
        // A Pending pod (not scheduled) is a user too: the rule's `while`
        // only excludes Succeeded and Failed.
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, secret("s", true, false, 2)), 1);
        c.apply(
            &at(3, Change::Added, pod_with_secret("p", "s", "Pending", 3)),
            1,
        );
        c.apply(&at(4, Change::Modified, secret("s", true, true, 4)), 1);
        assert_eq!(c.counts().secrets_held_while_in_use, 1);
        c.apply(&at(5, Change::Deleted, secret("s", true, true, 5)), 1);
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        assert_eq!(
            c.violations()[0].invariant,
            Invariant::SecretDeletedWhileInUse
        );
        assert!(c.violations()[0].to_string().contains("Pod ns/p"));
        // The pod finished first: free, checked, converged.
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, secret("s", true, false, 2)), 1);
        c.apply(
            &at(3, Change::Added, pod_with_secret("p", "s", "Running", 3)),
            1,
        );
        c.apply(&at(4, Change::Modified, secret("s", true, true, 4)), 1);
        assert!(c.pending()[0].2, "in use");
        c.apply(
            &at(
                5,
                Change::Modified,
                pod_with_secret("p", "s", "Succeeded", 5),
            ),
            1,
        );
        assert!(!c.pending()[0].2, "free once the pod finished");
        c.apply(&at(6, Change::Deleted, secret("s", true, true, 6)), 1);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        assert!(c.pending().is_empty());
        // Never carried the finalizer: the creation window, counted.
        let mut c = Checker::new(cfg());
        c.apply(
            &at(2, Change::Added, pod_with_secret("p", "new", "Running", 2)),
            1,
        );
        c.apply(&at(3, Change::Added, secret("new", false, false, 3)), 1);
        c.apply(&at(4, Change::Deleted, secret("new", false, true, 4)), 1);
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().unprotected_secrets_deleted_in_use, 1);
    }

    fn scidr(name: &str, cidr: &str, finalizer: bool, deleting: bool, rv: u64) -> Summary {
        Summary::ServiceCidr(ServiceCidrSummary {
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            finalizers: if finalizer {
                vec!["protection-manager.io/service-cidr-protection".into()]
            } else {
                vec![]
            },
            deleting,
            cidrs: vec![cidr.into()],
            run: "run".into(),
        })
    }

    fn address(ip: &str, managed_by: &str, rv: u64) -> Summary {
        Summary::IpAddress(IpAddressSummary {
            name: ip.into(),
            uid: format!("uid-{ip}"),
            rv,
            managed_by: managed_by.into(),
            parent: "services ns/s".into(),
        })
    }

    /// Applies `obj` as a change at its own resourceVersion.
    fn feed(c: &mut Checker, change: Change, obj: Summary) {
        c.apply(&at(obj.rv(), change, obj), 1);
    }

    const A: &str = "10.200.0.0/24";

    #[test]
    fn a_service_cidr_deleted_while_the_only_range_of_an_allocated_ip_is_a_violation() {
        use Change::{Added, Deleted, Modified};
        // The only range of 10.200.0.5: held, then DELETED: a violation
        // naming the address and its Service.
        let mut c = Checker::new(cfg());
        feed(&mut c, Added, scidr("a", A, true, false, 2));
        feed(&mut c, Added, address("10.200.0.5", IP_ALLOCATOR, 3));
        feed(&mut c, Modified, scidr("a", A, true, true, 4));
        assert_eq!(c.counts().service_cidrs_held_while_in_use, 1);
        assert!(c.pending()[0].2, "in use");
        feed(&mut c, Deleted, scidr("a", A, true, true, 5));
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        let v = &c.violations()[0];
        assert_eq!(v.invariant, Invariant::ServiceCidrDeletedWhileInUse);
        assert_eq!(v.rv, Some(5));
        let text = v.to_string();
        assert!(
            text.contains("IPAddress 10.200.0.5 (of services ns/s"),
            "{v}"
        );
        assert_eq!(c.counts().service_cidr_deletions_checked, 1);

        // Another ServiceCIDR contains the address (a larger one, or the
        // same range): free, checked, no violation.
        let mut c = Checker::new(cfg());
        feed(&mut c, Added, scidr("a", A, true, false, 2));
        feed(
            &mut c,
            Added,
            scidr("wide", "10.200.0.0/23", true, false, 3),
        );
        feed(&mut c, Added, address("10.200.0.5", IP_ALLOCATOR, 4));
        feed(&mut c, Modified, scidr("a", A, true, true, 5));
        assert!(!c.pending()[0].2, "free: contained in wide");
        feed(&mut c, Deleted, scidr("a", A, true, true, 6));
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        let counts = c.counts();
        assert_eq!(
            counts.service_cidrs_released_with_addresses_contained_elsewhere,
            1
        );
        // Now wide is its only range: wide is held until the address goes.
        feed(
            &mut c,
            Modified,
            scidr("wide", "10.200.0.0/23", true, true, 7),
        );
        assert!(c.pending()[0].2, "in use");
        feed(&mut c, Deleted, address("10.200.0.5", IP_ALLOCATOR, 8));
        assert!(!c.pending()[0].2, "free once the address is gone");
        feed(
            &mut c,
            Deleted,
            scidr("wide", "10.200.0.0/23", true, true, 9),
        );
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        assert_eq!(c.counts().service_cidr_deletions_checked, 2);
        assert!(c.pending().is_empty());

        // Addresses the allocator does not manage, and the range's network
        // and broadcast addresses (never allocated from it), do not hold it.
        let mut c = Checker::new(cfg());
        feed(&mut c, Added, scidr("a", A, true, false, 2));
        feed(&mut c, Added, address("10.200.0.6", "someone-else", 3));
        feed(&mut c, Added, address("10.200.0.0", IP_ALLOCATOR, 4));
        feed(&mut c, Added, address("10.200.0.255", IP_ALLOCATOR, 5));
        feed(&mut c, Deleted, scidr("a", A, true, true, 6));
        assert!(c.violations().is_empty(), "{:?}", c.violations());

        // Never carried a finalizer: the creation window, counted.
        let mut c = Checker::new(cfg());
        feed(&mut c, Added, scidr("a", A, false, false, 2));
        feed(&mut c, Added, address("10.200.0.5", IP_ALLOCATOR, 3));
        feed(&mut c, Deleted, scidr("a", A, false, true, 4));
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().unprotected_service_cidrs_deleted_in_use, 1);

        // Another run's ServiceCIDR is not checked.
        let mut c = Checker::new(cfg());
        let mut theirs = scidr("theirs", A, true, true, 4);
        if let Summary::ServiceCidr(x) = &mut theirs {
            x.run = "other".into();
        }
        feed(&mut c, Added, address("10.200.0.5", IP_ALLOCATOR, 3));
        feed(&mut c, Deleted, theirs);
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().service_cidr_deletions_checked, 0);
    }

    #[test]
    fn two_terminating_service_cidrs_that_contain_each_other_may_both_go_as_upstream_lets_them() {
        use Change::{Added, Deleted, Modified};
        // Both Terminating, each the other's container: upstream's rule
        // releases both; counted, not a violation.
        let mut c = Checker::new(cfg());
        feed(&mut c, Added, scidr("a", A, true, false, 2));
        feed(&mut c, Added, scidr("b", A, true, false, 3));
        feed(&mut c, Added, address("10.200.0.5", IP_ALLOCATOR, 4));
        feed(&mut c, Modified, scidr("a", A, true, true, 5));
        feed(&mut c, Modified, scidr("b", A, true, true, 6));
        feed(&mut c, Deleted, scidr("a", A, true, true, 7));
        feed(&mut c, Deleted, scidr("b", A, true, true, 8));
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        let counts = c.counts();
        assert_eq!(counts.service_cidrs_released_with_terminating_container, 1);
        // The container went before b's deletion was even requested: b was
        // the only range from then on, and its release is a violation.
        let mut c = Checker::new(cfg());
        feed(&mut c, Added, scidr("a", A, true, false, 2));
        feed(&mut c, Added, scidr("b", A, true, false, 3));
        feed(&mut c, Added, address("10.200.0.5", IP_ALLOCATOR, 4));
        feed(&mut c, Deleted, scidr("a", A, true, true, 5));
        feed(&mut c, Modified, scidr("b", A, true, true, 6));
        assert_eq!(c.counts().service_cidrs_held_while_in_use, 1);
        feed(&mut c, Deleted, scidr("b", A, true, true, 7));
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        let v = &c.violations()[0];
        assert_eq!(v.invariant, Invariant::ServiceCidrDeletedWhileInUse);
    }

    #[test]
    fn a_held_service_cidr_must_go_within_the_bound_once_free_after_calm() {
        let mut c = Checker::new(cfg());
        let t0 = Instant::now();
        feed(
            &mut c,
            Change::Added,
            address("10.200.0.5", IP_ALLOCATOR, 2),
        );
        feed(&mut c, Change::Modified, scidr("a", A, true, true, 3));
        c.set_calm(t0);
        c.check_time(t0 + Duration::from_secs(120), Timestamp::now());
        assert!(c.violations().is_empty(), "in use: never overdue");
        feed(
            &mut c,
            Change::Deleted,
            address("10.200.0.5", IP_ALLOCATOR, 4),
        );
        c.check_time(Instant::now() + Duration::from_secs(31), Timestamp::now());
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        assert_eq!(c.violations()[0].invariant, Invariant::FinalizerNotRemoved);
        assert_eq!(c.violations()[0].object, "ServiceCIDR a");
    }

    fn svc(name: &str, deleting: bool, rv: u64) -> Summary {
        Summary::Service(ServiceSummary {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            finalizers: vec!["protection-manager.io/load-balancer-cleanup".into()],
            deleting,
            type_: "LoadBalancer".into(),
            class: String::new(),
            ingress: vec!["203.0.113.1".into()],
        })
    }

    fn lease(holder: &str, acquire: i64, renew: i64, rv: u64) -> Summary {
        Summary::Lease(LeaseSummary {
            namespace: "pm".into(),
            name: "pm".into(),
            rv,
            holder: holder.into(),
            acquire_time: Some(Timestamp::from_second(acquire).expect("ts")),
            renew_time: Some(Timestamp::from_second(renew).expect("ts")),
            lease_duration_seconds: Some(15),
            transitions: 0,
        })
    }

    #[test]
    fn a_claim_deleted_while_a_scheduled_pod_uses_it_is_a_violation() {
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, pvc("c", false, 2)), 1);
        c.apply(&at(3, Change::Added, pod("p", "node-1", &["c"], 3)), 1);
        c.apply(&at(4, Change::Modified, pvc("c", true, 4)), 1);
        assert_eq!(c.counts().pvcs_held_while_in_use, 1);
        c.apply(&at(5, Change::Deleted, pvc("c", true, 5)), 1);
        assert_eq!(c.violations().len(), 1);
        let v = &c.violations()[0];
        assert_eq!(v.invariant, Invariant::ClaimDeletedWhileInUse);
        assert_eq!(v.rv, Some(5));
        assert!(v.to_string().contains("pod ns/p"), "{v}");
        assert!(v.to_string().contains("last seen at rv 3"), "{v}");
    }

    #[test]
    fn a_claim_that_never_had_the_finalizer_is_the_creation_window_unless_strict() {
        let unprotected = |rv| {
            let mut c = pvc("c", true, rv);
            if let Summary::Pvc(x) = &mut c {
                x.finalizers.clear();
            }
            c
        };
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, pod("p", "node-1", &["c"], 2)), 1);
        c.apply(&at(3, Change::Added, unprotected(3)), 1);
        c.apply(&at(4, Change::Deleted, unprotected(4)), 1);
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().unprotected_pvcs_deleted_in_use, 1);
        // Once seen with the finalizer, a deletion in use is a violation
        // even if the DELETED object no longer lists it.
        c.apply(&at(5, Change::Added, pvc("c", false, 5)), 1);
        c.apply(&at(6, Change::Deleted, unprotected(6)), 1);
        assert_eq!(c.violations().len(), 1);
        let mut strict = cfg();
        strict.strict = true;
        let mut c = Checker::new(strict);
        c.apply(&at(2, Change::Added, pod("p", "node-1", &["c"], 2)), 1);
        c.apply(&at(4, Change::Deleted, unprotected(4)), 1);
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn unscheduled_or_deleted_pods_do_not_hold_a_claim() {
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, pvc("c", false, 2)), 1);
        // Scheduled, then deleted before the claim goes.
        c.apply(&at(3, Change::Added, pod("p", "node-1", &["c"], 3)), 1);
        c.apply(&at(4, Change::Deleted, pod("p", "node-1", &["c"], 4)), 1);
        // Never scheduled (Unschedulable on a Terminating claim).
        c.apply(&at(5, Change::Added, pod("q", "", &["c"], 5)), 1);
        // Another claim's user.
        c.apply(&at(6, Change::Added, pod("r", "node-1", &["other"], 6)), 1);
        c.apply(&at(7, Change::Deleted, pvc("c", true, 7)), 1);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        assert_eq!(c.counts().pvc_deletions_checked, 1);
    }

    #[test]
    fn a_terminating_pod_still_holds_its_claim() {
        let mut c = Checker::new(cfg());
        let mut p = pod("p", "node-1", &["c"], 3);
        if let Summary::Pod(x) = &mut p {
            x.deleting = true;
            x.phase = "Succeeded".into();
        }
        c.apply(&at(3, Change::Added, p), 1);
        c.apply(&at(4, Change::Deleted, pvc("c", true, 4)), 1);
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn events_before_the_sync_point_are_not_checked() {
        let mut c = Checker::new(cfg());
        c.apply(&at(3, Change::Listed, pod("p", "node-1", &["c"], 3)), 10);
        c.apply(&at(5, Change::Deleted, pvc("c", true, 5)), 10);
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().unchecked_before_sync, 1);
        assert_eq!(c.counts().pvc_deletions_checked, 0);
    }

    #[test]
    fn a_volume_deleted_while_bound_is_a_violation() {
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Modified, pv("v", "Bound", true, 2)), 1);
        assert_eq!(c.counts().pvs_held_while_bound, 1);
        c.apply(&at(3, Change::Deleted, pv("v", "Released", true, 3)), 1);
        assert!(c.violations().is_empty());
        c.apply(&at(4, Change::Deleted, pv("w", "Bound", true, 4)), 1);
        assert_eq!(c.violations().len(), 1);
        assert_eq!(
            c.violations()[0].invariant,
            Invariant::VolumeDeletedWhileBound
        );
        assert_eq!(c.counts().pv_deletions_checked, 2);
    }

    fn lb(uid: &str, ns: &str) -> LoadBalancer {
        serde_json::from_value(serde_json::json!({
            "uid": uid, "name": format!("lb-{uid}"),
            "service": {"namespace": ns, "name": "s", "uid": uid},
            "spec": {"ports": [{"port": 80}]},
            "nodes": [], "status": {"ingress": [{"ip": "203.0.113.1"}]},
            "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z",
            "generation": 1
        }))
        .expect("lb json")
    }

    #[test]
    fn a_load_balancer_of_a_deleted_service_is_an_orphan() {
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, svc("s", false, 2)), 1);
        c.sweep_cloud(&[lb("uid-s", "ns")]);
        assert!(c.violations().is_empty());
        c.apply(&at(3, Change::Deleted, svc("s", true, 3)), 1);
        assert!(c.wants_sweep());
        c.sweep_cloud(&[]);
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().service_deletions_checked, 1);
        assert_eq!(c.counts().services_deleted_with_lb, 1);
        // Created late by a stale ensure: still caught, once.
        c.sweep_cloud(&[lb("uid-s", "ns")]);
        c.sweep_cloud(&[lb("uid-s", "ns")]);
        assert_eq!(c.violations().len(), 1);
        assert_eq!(c.violations()[0].invariant, Invariant::OrphanedLoadBalancer);
        // Other namespaces' load balancers are not this run's.
        let mut c = Checker::new(cfg());
        c.apply(&at(3, Change::Deleted, svc("s", true, 3)), 1);
        c.sweep_cloud(&[lb("uid-s", "elsewhere")]);
        assert!(c.violations().is_empty());
    }

    #[test]
    fn a_service_without_the_cleanup_finalizer_is_only_checked_at_the_end() {
        let mut c = Checker::new(cfg());
        let mut s = svc("s", true, 3);
        if let Summary::Service(x) = &mut s {
            x.finalizers.clear();
        }
        c.apply(&at(3, Change::Deleted, s), 1);
        c.sweep_cloud(&[lb("uid-s", "ns")]);
        assert!(
            c.violations().is_empty(),
            "deleted after the Service, as at 0.1"
        );
        c.final_cloud_check(&[lb("uid-s", "ns")], &HashSet::new());
        assert_eq!(c.violations().len(), 1, "but not left behind");
    }

    #[test]
    fn volumes_of_other_runs_are_ignored() {
        let mut c = Checker::new(cfg());
        let mut v = pv("theirs", "Bound", true, 2);
        if let Summary::Pv(x) = &mut v {
            x.claim = "kube-system/data".into();
        }
        c.apply(&at(2, Change::Deleted, v), 1);
        assert!(c.violations().is_empty());
        assert_eq!(c.counts().pv_deletions_checked, 0);
        let mut v = pv("labelled", "Bound", true, 3);
        if let Summary::Pv(x) = &mut v {
            x.claim = String::new();
            x.run = "run".into();
        }
        c.apply(&at(3, Change::Deleted, v), 1);
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn the_final_check_wants_a_live_service_for_every_load_balancer() {
        let mut c = Checker::new(cfg());
        let live: HashSet<String> = ["uid-live".to_string()].into_iter().collect();
        c.final_cloud_check(&[lb("uid-live", "ns"), lb("uid-ghost", "ns")], &live);
        assert_eq!(c.violations().len(), 1);
        assert!(c.violations()[0].object.contains("uid-ghost"));
    }

    #[test]
    fn finalizers_must_go_within_the_bound_after_calm() {
        let mut c = Checker::new(cfg());
        let t0 = Instant::now();
        c.apply(&at(2, Change::Added, pod("p", "node-1", &["c"], 2)), 1);
        c.apply(&at(3, Change::Modified, pvc("c", true, 3)), 1);
        c.apply(&at(4, Change::Modified, svc("s", true, 4)), 1);
        c.set_calm(t0);
        // In use: never overdue.
        c.check_time(t0 + Duration::from_secs(120), Timestamp::now());
        let overdue: Vec<_> = c.violations().iter().map(|v| v.object.clone()).collect();
        assert_eq!(overdue, vec!["Service ns/s".to_string()]);
        assert_eq!(c.pending().len(), 2);
        // The pod goes: the claim is free from then on.
        c.apply(&at(5, Change::Deleted, pod("p", "node-1", &["c"], 5)), 1);
        let pending = c.pending();
        assert!(
            pending
                .iter()
                .any(|(k, key, in_use, _)| *k == Kind::Pvc && key == "ns/c" && !in_use)
        );
        c.apply(&at(6, Change::Deleted, pvc("c", true, 6)), 1);
        assert_eq!(c.counts().converged_after_calm, 1);
        assert!(c.counts().max_convergence.is_some());
        assert_eq!(c.violations().len(), 1, "reported once");
    }

    #[test]
    fn a_leadership_move_is_measured_from_the_last_renewal() {
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, lease("a_1", 100, 100, 2)), 1);
        c.apply(&at(3, Change::Modified, lease("a_1", 100, 110, 3)), 1);
        c.record_kill(Kill {
            pod: "a".into(),
            identity: "a_1".into(),
            at: Timestamp::from_second(111).expect("ts"),
        });
        // Forced release, then the standby locks 16 s after the last renewal.
        c.apply(&at(4, Change::Modified, lease("", 100, 110, 4)), 1);
        c.apply(&at(5, Change::Modified, lease("b_1", 126, 126, 5)), 1);
        c.check_leadership(Timestamp::from_second(130).expect("ts"), false);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        assert_eq!(c.counts().leadership_moves_checked, 1);
        assert_eq!(c.counts().max_failover, Some(Duration::from_secs(16)));
        assert_eq!(c.counts().leadership_transitions, 1);
        // A slow move: 19 s > 15 s + 3 s.
        c.apply(&at(6, Change::Modified, lease("b_1", 126, 130, 6)), 1);
        c.record_kill(Kill {
            pod: "b".into(),
            identity: "b_1".into(),
            at: Timestamp::from_second(131).expect("ts"),
        });
        c.apply(&at(7, Change::Modified, lease("c_1", 149, 149, 7)), 1);
        c.check_leadership(Timestamp::from_second(150).expect("ts"), false);
        assert_eq!(c.violations().len(), 1);
        assert_eq!(c.violations()[0].invariant, Invariant::LeadershipDidNotMove);
        assert!(
            c.violations()[0].evidence.contains("19.00s"),
            "{}",
            c.violations()[0]
        );
    }

    /// A kill recorded while the Lease states naming the leader are still
    /// buffered behind a slower watch is judged once they arrive, not
    /// reported as "never named" on the next tick.
    #[test]
    fn a_kill_seen_before_the_lease_history_catches_up_waits_for_it() {
        let mut c = Checker::new(cfg());
        c.record_kill(Kill {
            pod: "a".into(),
            identity: "a_1".into(),
            at: Timestamp::from_second(111).expect("ts"),
        });
        c.check_leadership(Timestamp::from_second(112).expect("ts"), false);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        c.apply(&at(2, Change::Added, lease("a_1", 100, 110, 2)), 1);
        c.apply(&at(3, Change::Modified, lease("b_1", 120, 120, 3)), 1);
        c.check_leadership(Timestamp::from_second(121).expect("ts"), false);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        assert_eq!(c.counts().leadership_moves_checked, 1);
        // Never named at all, even at the end: a violation then.
        let mut c = Checker::new(cfg());
        c.record_kill(Kill {
            pod: "a".into(),
            identity: "a_1".into(),
            at: Timestamp::from_second(111).expect("ts"),
        });
        c.check_leadership(Timestamp::from_second(140).expect("ts"), true);
        assert_eq!(c.violations().len(), 1);
        assert!(c.violations()[0].evidence.contains("never names"));
    }

    #[test]
    fn no_new_holder_at_all_is_a_violation_once_past_the_bound() {
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, lease("a_1", 100, 100, 2)), 1);
        c.record_kill(Kill {
            pod: "a".into(),
            identity: "a_1".into(),
            at: Timestamp::from_second(101).expect("ts"),
        });
        c.check_leadership(Timestamp::from_second(110).expect("ts"), false);
        assert!(c.violations().is_empty());
        c.check_leadership(Timestamp::from_second(112).expect("ts"), true);
        assert!(
            c.violations().is_empty(),
            "the run ended before the bound: nothing to judge"
        );
        let mut c = Checker::new(cfg());
        c.apply(&at(2, Change::Added, lease("a_1", 100, 100, 2)), 1);
        c.record_kill(Kill {
            pod: "a".into(),
            identity: "a_1".into(),
            at: Timestamp::from_second(101).expect("ts"),
        });
        c.check_leadership(Timestamp::from_second(140).expect("ts"), false);
        assert_eq!(c.violations().len(), 1);
        assert!(c.violations()[0].evidence.contains("no other holder"));
    }
}

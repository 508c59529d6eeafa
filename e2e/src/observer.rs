//! Records what the API server says happened, in its global order.
//!
//! One watch per kind (pods, PVCs, PVs, Services, optionally
//! VolumeAttributesClasses, Secrets, ServiceCIDRs and the allocator's
//! IPAddresses, the leader Lease), each
//! starting with a LIST and resuming from its last resourceVersion after a
//! cut. kube-sim, like etcd, gives every write one resourceVersion from a
//! single counter, so sorting the events of all the watches by it rebuilds
//! the order in which the writes happened. [`Timeline`] does the merge: it
//! releases an event only once every watch has reported progress (an event
//! or a BOOKMARK) up to it, so nothing earlier can still arrive.
//!
//! The observer runs as its own user (`e2e-observer` on kube-sim), which
//! the fault rules never target; a watch that nevertheless expires (410) is
//! re-listed and the gap is counted, and the objects that vanished in it are
//! reported as deleted without a check.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The kinds the invariants need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Pvc,
    Pv,
    Service,
    Lease,
    Vac,
    Secret,
    ServiceCidr,
    IpAddress,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Pod,
        Kind::Pvc,
        Kind::Pv,
        Kind::Service,
        Kind::Lease,
        Kind::Vac,
        Kind::Secret,
        Kind::ServiceCidr,
        Kind::IpAddress,
    ];
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Pod => "Pod",
            Kind::Pvc => "PersistentVolumeClaim",
            Kind::Pv => "PersistentVolume",
            Kind::Service => "Service",
            Kind::Lease => "Lease",
            Kind::Vac => "VolumeAttributesClass",
            Kind::Secret => "Secret",
            Kind::ServiceCidr => "ServiceCIDR",
            Kind::IpAddress => "IPAddress",
        })
    }
}

/// What the invariants need of a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSummary {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    /// `spec.nodeName` (empty: not scheduled).
    pub node_name: String,
    /// Claims it references: `persistentVolumeClaim.claimName` and the
    /// derived names of generic ephemeral volumes (`<pod>-<volume>`).
    pub claims: Vec<String>,
    /// Secrets it refers to as the chart's `secrets-used-by-pods` rule reads
    /// them: secret and projected volumes, env, envFrom, imagePullSecrets.
    pub secrets: Vec<String>,
    pub deleting: bool,
    pub phase: String,
}

/// What the invariants need of a PVC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvcSummary {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    pub phase: String,
    pub volume_name: String,
    /// The VolumeAttributesClasses it names: `spec.volumeAttributesClassName`,
    /// `status.currentVolumeAttributesClassName`,
    /// `status.modifyVolumeStatus.targetVolumeAttributesClassName`
    /// (docs/upstream-semantics.md §10.3).
    pub classes: Vec<String>,
}

/// What the invariants need of a PV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvSummary {
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    pub phase: String,
    /// `namespace/name` of `spec.claimRef`.
    pub claim: String,
    /// The value of the run label (empty when absent).
    pub run: String,
    /// `spec.volumeAttributesClassName` (empty when absent).
    pub class: String,
}

/// What the invariants need of a VolumeAttributesClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VacSummary {
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

/// What the invariants need of a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSummary {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

/// What the invariants need of a ServiceCIDR (networking.k8s.io/v1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCidrSummary {
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    /// `spec.cidrs`.
    pub cidrs: Vec<String>,
    /// The value of the run label (empty when absent: the cluster's own,
    /// such as the default `kubernetes` ServiceCIDR).
    pub run: String,
}

/// What the invariants need of an IPAddress (networking.k8s.io/v1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpAddressSummary {
    /// The address (an IPAddress is named by it).
    pub name: String,
    pub uid: String,
    pub rv: u64,
    /// `ipaddress.kubernetes.io/managed-by`.
    pub managed_by: String,
    /// `spec.parentRef` as `resource namespace/name`.
    pub parent: String,
}

/// What the invariants need of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSummary {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    pub type_: String,
    pub class: String,
    pub ingress: Vec<String>,
}

/// What the invariants need of the leader Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSummary {
    pub namespace: String,
    pub name: String,
    pub rv: u64,
    pub holder: String,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub lease_duration_seconds: Option<i32>,
    pub transitions: i32,
}

/// One object's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Summary {
    Pod(PodSummary),
    Pvc(PvcSummary),
    Pv(PvSummary),
    Service(ServiceSummary),
    Lease(LeaseSummary),
    Vac(VacSummary),
    Secret(SecretSummary),
    ServiceCidr(ServiceCidrSummary),
    IpAddress(IpAddressSummary),
}

impl Summary {
    pub fn kind(&self) -> Kind {
        match self {
            Summary::Pod(_) => Kind::Pod,
            Summary::Pvc(_) => Kind::Pvc,
            Summary::Pv(_) => Kind::Pv,
            Summary::Service(_) => Kind::Service,
            Summary::Lease(_) => Kind::Lease,
            Summary::Vac(_) => Kind::Vac,
            Summary::Secret(_) => Kind::Secret,
            Summary::ServiceCidr(_) => Kind::ServiceCidr,
            Summary::IpAddress(_) => Kind::IpAddress,
        }
    }

    /// `namespace/name` (or `name` for cluster-scoped kinds).
    pub fn key(&self) -> String {
        match self {
            Summary::Pod(p) => format!("{}/{}", p.namespace, p.name),
            Summary::Pvc(p) => format!("{}/{}", p.namespace, p.name),
            Summary::Pv(p) => p.name.clone(),
            Summary::Service(s) => format!("{}/{}", s.namespace, s.name),
            Summary::Lease(l) => format!("{}/{}", l.namespace, l.name),
            Summary::Vac(v) => v.name.clone(),
            Summary::Secret(s) => format!("{}/{}", s.namespace, s.name),
            Summary::ServiceCidr(c) => c.name.clone(),
            Summary::IpAddress(a) => a.name.clone(),
        }
    }

    pub fn rv(&self) -> u64 {
        match self {
            Summary::Pod(p) => p.rv,
            Summary::Pvc(p) => p.rv,
            Summary::Pv(p) => p.rv,
            Summary::Service(s) => s.rv,
            Summary::Lease(l) => l.rv,
            Summary::Vac(v) => v.rv,
            Summary::Secret(s) => s.rv,
            Summary::ServiceCidr(c) => c.rv,
            Summary::IpAddress(a) => a.rv,
        }
    }
}

/// How an object changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Present in the initial LIST (or a re-LIST after a gap).
    Listed,
    Added,
    Modified,
    Deleted,
    /// Gone in a re-LIST after a watch gap: deleted at an unknown point.
    VanishedInGap,
}

/// One observed change, stamped with its resourceVersion and the moment the
/// observer received it.
#[derive(Debug, Clone)]
pub struct Observed {
    pub rv: u64,
    pub change: Change,
    pub obj: Summary,
    pub seen: Instant,
    pub seen_wall: Timestamp,
}

fn rv_of(meta_rv: Option<&String>) -> u64 {
    meta_rv.and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn fins(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.finalizers.clone().unwrap_or_default()
}

/// Turns a typed object into its summary.
pub trait Summarize:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static
{
    const KIND: Kind;
    fn summarize(&self) -> Summary;
}

impl Summarize for Pod {
    const KIND: Kind = Kind::Pod;
    fn summarize(&self) -> Summary {
        let spec = self.spec.as_ref();
        let name = self.name_any();
        let claims = spec
            .and_then(|s| s.volumes.as_ref())
            .map(|vols| {
                vols.iter()
                    .filter_map(|v| {
                        if let Some(c) = &v.persistent_volume_claim {
                            Some(c.claim_name.clone())
                        } else {
                            v.ephemeral.as_ref().map(|_| format!("{name}-{}", v.name))
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Summary::Pod(PodSummary {
            namespace: self.namespace().unwrap_or_default(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            node_name: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            claims,
            secrets: pod_secrets(self),
            deleting: self.metadata.deletion_timestamp.is_some(),
            phase: self
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            name,
        })
    }
}

/// The Secrets a pod refers to (what the chart's `secrets-used-by-pods`
/// rule's CEL reference reads), sorted and deduplicated.
fn pod_secrets(p: &Pod) -> Vec<String> {
    let Some(spec) = p.spec.as_ref() else {
        return vec![];
    };
    let mut out: Vec<String> = Vec::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(n) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            out.push(n);
        }
        for src in v
            .projected
            .iter()
            .flat_map(|pr| pr.sources.iter().flatten())
        {
            if let Some(sec) = &src.secret {
                out.push(sec.name.clone());
            }
        }
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        for e in c.env.iter().flatten() {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                out.push(r.name.clone());
            }
        }
        for e in c.env_from.iter().flatten() {
            if let Some(r) = &e.secret_ref {
                out.push(r.name.clone());
            }
        }
    }
    for s in spec.image_pull_secrets.iter().flatten() {
        out.push(s.name.clone());
    }
    out.retain(|n| !n.is_empty());
    out.sort();
    out.dedup();
    out
}

impl Summarize for Secret {
    const KIND: Kind = Kind::Secret;
    fn summarize(&self) -> Summary {
        Summary::Secret(SecretSummary {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            finalizers: fins(&self.metadata),
            deleting: self.metadata.deletion_timestamp.is_some(),
        })
    }
}

impl Summarize for PersistentVolumeClaim {
    const KIND: Kind = Kind::Pvc;
    fn summarize(&self) -> Summary {
        Summary::Pvc(PvcSummary {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            finalizers: fins(&self.metadata),
            deleting: self.metadata.deletion_timestamp.is_some(),
            phase: self
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            volume_name: self
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .unwrap_or_default(),
            classes: {
                let status = self.status.as_ref();
                let mut c: Vec<String> = [
                    self.spec
                        .as_ref()
                        .and_then(|s| s.volume_attributes_class_name.clone()),
                    status.and_then(|s| s.current_volume_attributes_class_name.clone()),
                    status
                        .and_then(|s| s.modify_volume_status.as_ref())
                        .and_then(|m| m.target_volume_attributes_class_name.clone()),
                ]
                .into_iter()
                .flatten()
                .filter(|n| !n.is_empty())
                .collect();
                c.sort();
                c.dedup();
                c
            },
        })
    }
}

impl Summarize for PersistentVolume {
    const KIND: Kind = Kind::Pv;
    fn summarize(&self) -> Summary {
        let claim = self
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .map(|c| {
                format!(
                    "{}/{}",
                    c.namespace.clone().unwrap_or_default(),
                    c.name.clone().unwrap_or_default()
                )
            })
            .unwrap_or_default();
        Summary::Pv(PvSummary {
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            finalizers: fins(&self.metadata),
            deleting: self.metadata.deletion_timestamp.is_some(),
            phase: self
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            claim,
            run: self
                .labels()
                .get(crate::objects::RUN_LABEL)
                .cloned()
                .unwrap_or_default(),
            class: self
                .spec
                .as_ref()
                .and_then(|s| s.volume_attributes_class_name.clone())
                .unwrap_or_default(),
        })
    }
}

impl Summarize for Service {
    const KIND: Kind = Kind::Service;
    fn summarize(&self) -> Summary {
        let spec = self.spec.as_ref();
        Summary::Service(ServiceSummary {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            finalizers: fins(&self.metadata),
            deleting: self.metadata.deletion_timestamp.is_some(),
            type_: spec.and_then(|s| s.type_.clone()).unwrap_or_default(),
            class: spec
                .and_then(|s| s.load_balancer_class.clone())
                .unwrap_or_default(),
            ingress: self
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .map(|i| {
                    i.iter()
                        .filter_map(|x| x.ip.clone().or_else(|| x.hostname.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

impl Summarize for ServiceCIDR {
    const KIND: Kind = Kind::ServiceCidr;
    fn summarize(&self) -> Summary {
        Summary::ServiceCidr(ServiceCidrSummary {
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            finalizers: fins(&self.metadata),
            deleting: self.metadata.deletion_timestamp.is_some(),
            cidrs: self
                .spec
                .as_ref()
                .and_then(|s| s.cidrs.clone())
                .unwrap_or_default(),
            run: self
                .labels()
                .get(crate::objects::RUN_LABEL)
                .cloned()
                .unwrap_or_default(),
        })
    }
}

impl Summarize for IPAddress {
    const KIND: Kind = Kind::IpAddress;
    fn summarize(&self) -> Summary {
        Summary::IpAddress(IpAddressSummary {
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            managed_by: self
                .labels()
                .get(IP_MANAGED_BY_LABEL)
                .cloned()
                .unwrap_or_default(),
            parent: self
                .spec
                .as_ref()
                .map(|s| {
                    let p = &s.parent_ref;
                    format!(
                        "{} {}/{}",
                        p.resource,
                        p.namespace.clone().unwrap_or_default(),
                        p.name
                    )
                })
                .unwrap_or_default(),
        })
    }
}

/// The label naming who manages an IPAddress, and its value on the
/// addresses the API server's allocator manages (the only ones
/// service-cidr-protection, as upstream, looks at).
pub use service_cidr_protection::cidr::{
    ALLOCATOR as IP_ALLOCATOR, LABEL_MANAGED_BY as IP_MANAGED_BY_LABEL,
};

/// A VolumeAttributesClass, storage.k8s.io/v1 (metadata only).
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct VolumeAttributesClass {
    #[serde(default)]
    pub metadata: kube::api::ObjectMeta,
}

impl Resource for VolumeAttributesClass {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "VolumeAttributesClass".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "storage.k8s.io".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
        "storage.k8s.io/v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "volumeattributesclasses".into()
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

impl Summarize for VolumeAttributesClass {
    const KIND: Kind = Kind::Vac;
    fn summarize(&self) -> Summary {
        Summary::Vac(VacSummary {
            name: self.name_any(),
            uid: self.uid().unwrap_or_default(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            finalizers: fins(&self.metadata),
            deleting: self.metadata.deletion_timestamp.is_some(),
        })
    }
}

impl Summarize for Lease {
    const KIND: Kind = Kind::Lease;
    fn summarize(&self) -> Summary {
        let spec = self.spec.as_ref();
        Summary::Lease(LeaseSummary {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
            rv: rv_of(self.metadata.resource_version.as_ref()),
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            acquire_time: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0),
            renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            lease_duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
        })
    }
}

/// What a watch task reports.
#[derive(Debug, Clone)]
pub enum Report {
    /// The first LIST of this kind finished at `rv`.
    Synced {
        kind: Kind,
        rv: u64,
    },
    Event(Box<Observed>),
    /// Nothing of this kind before `rv` can still arrive (a BOOKMARK, or
    /// the resourceVersion a watch resumed from).
    Progress {
        kind: Kind,
        rv: u64,
    },
    /// A watch expired (410) and the kind was re-listed at `rv`.
    Gap {
        kind: Kind,
        rv: u64,
    },
}

/// Merges the watches' reports into resourceVersion order.
#[derive(Debug, Default)]
pub struct Timeline {
    expected: Vec<Kind>,
    high: BTreeMap<Kind, u64>,
    synced: BTreeMap<Kind, u64>,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    pending: HashMap<u64, Observed>,
    next: u64,
    /// Watch gaps seen (410 and re-list).
    pub gaps: u64,
    released_up_to: u64,
}

impl Timeline {
    /// A timeline waiting for `kinds`.
    pub fn new(kinds: &[Kind]) -> Timeline {
        Timeline {
            expected: kinds.to_vec(),
            ..Timeline::default()
        }
    }

    /// Every kind has finished its first LIST.
    pub fn is_synced(&self) -> bool {
        self.expected.iter().all(|k| self.synced.contains_key(k))
    }

    /// The resourceVersion from which the merged order is complete: the
    /// latest of the first LISTs. Events at or before it were applied
    /// without a cross-kind view.
    pub fn sync_rv(&self) -> u64 {
        self.synced.values().copied().max().unwrap_or(0)
    }

    /// Everything up to this resourceVersion has been released.
    pub fn watermark(&self) -> u64 {
        if !self.is_synced() {
            return 0;
        }
        self.expected
            .iter()
            .map(|k| self.high.get(k).copied().unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    fn progress(&mut self, kind: Kind, rv: u64) {
        let h = self.high.entry(kind).or_insert(0);
        *h = (*h).max(rv);
    }

    pub fn push(&mut self, report: Report) {
        match report {
            Report::Synced { kind, rv } => {
                self.synced.insert(kind, rv);
                self.progress(kind, rv);
            }
            Report::Progress { kind, rv } => self.progress(kind, rv),
            Report::Gap { kind, rv } => {
                self.gaps += 1;
                self.progress(kind, rv);
            }
            Report::Event(ev) => {
                let kind = ev.obj.kind();
                // A listed object's own rv can be older than events already
                // released; it is still state "as of" the list.
                let rv = ev.rv;
                if ev.change != Change::Listed {
                    self.progress(kind, rv);
                }
                let seq = self.next;
                self.next += 1;
                self.heap.push(Reverse((rv, seq)));
                self.pending.insert(seq, *ev);
            }
        }
    }

    /// The events every watch has moved past, in resourceVersion order.
    pub fn ready(&mut self) -> Vec<Observed> {
        let w = self.watermark();
        let mut out = Vec::new();
        while let Some(Reverse((rv, seq))) = self.heap.peek().copied() {
            if rv > w {
                break;
            }
            self.heap.pop();
            if let Some(ev) = self.pending.remove(&seq) {
                out.push(ev);
            }
        }
        self.released_up_to = self.released_up_to.max(w);
        out
    }

    /// Everything still buffered, in order (at the end of a run, after the
    /// watches have stopped).
    pub fn drain_all(&mut self) -> Vec<Observed> {
        let mut out = Vec::new();
        while let Some(Reverse((_, seq))) = self.heap.pop() {
            if let Some(ev) = self.pending.remove(&seq) {
                out.push(ev);
            }
        }
        out
    }

    /// The instant up to which everything the watches delivered has been
    /// released: the arrival of the oldest event still waiting for a
    /// slower watch, or `now` when none waits. A time-based check (a
    /// finalizer overdue) counts only up to it: the event that settles it
    /// may sit in the buffer while an idle watch has not reported progress
    /// (a real API server reports it with the BOOKMARK shortly before each
    /// watch's timeout, up to [`ObserverConfig::watch_timeout`] later).
    pub fn complete_until(&self, now: Instant) -> Instant {
        self.pending
            .values()
            .map(|e| e.seen)
            .min()
            .map_or(now, |oldest| oldest.min(now))
    }

    /// How many events wait for a slower watch.
    pub fn buffered(&self) -> usize {
        self.pending.len()
    }
}

/// What to watch.
#[derive(Debug, Clone)]
pub struct ObserverConfig {
    /// Label selector for pods, PVCs and Services (the scenario's own
    /// objects); empty: everything. PVs are watched unfiltered (dynamically
    /// provisioned ones carry no label); the checker picks the run's by
    /// label or claim namespace.
    pub selector: String,
    /// The leader Lease, `(namespace, name)`.
    pub lease: Option<(String, String)>,
    /// Server-side timeout of each watch; the API server sends a BOOKMARK
    /// shortly before it, which advances idle kinds.
    pub watch_timeout: Duration,
    /// Also watch the run's VolumeAttributesClasses (by the selector); only
    /// where the cluster serves storage.k8s.io/v1.
    pub classes: bool,
    /// Also watch the run's Secrets (by the selector), for a ProtectionRule
    /// over Secrets used by pods.
    pub secrets: bool,
    /// Also watch every ServiceCIDR (the cluster's own ones count as
    /// containers of an address) and every IPAddress the API server's
    /// allocator manages; only where the cluster serves networking.k8s.io/v1.
    pub service_cidrs: bool,
}

/// The running watches; reports arrive on the channel returned by
/// [`Observer::start`].
pub struct Observer {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Observer {
    /// Starts one watch task per kind.
    pub fn start(
        client: Client,
        cfg: ObserverConfig,
    ) -> (Observer, mpsc::UnboundedReceiver<Report>, Vec<Kind>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        let mut kinds = vec![Kind::Pod, Kind::Pvc, Kind::Pv, Kind::Service];
        let lp = |sel: &str| ListParams::default().labels(sel);
        let wp = |sel: &str| {
            WatchParams::default()
                .labels(sel)
                .timeout(cfg.watch_timeout.as_secs().clamp(1, 290) as u32)
        };
        tasks.push(tokio::spawn(watch_kind(
            Api::<Pod>::all(client.clone()),
            lp(&cfg.selector),
            wp(&cfg.selector),
            tx.clone(),
            stop.clone(),
        )));
        tasks.push(tokio::spawn(watch_kind(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            lp(&cfg.selector),
            wp(&cfg.selector),
            tx.clone(),
            stop.clone(),
        )));
        tasks.push(tokio::spawn(watch_kind(
            Api::<PersistentVolume>::all(client.clone()),
            lp(""),
            wp(""),
            tx.clone(),
            stop.clone(),
        )));
        tasks.push(tokio::spawn(watch_kind(
            Api::<Service>::all(client.clone()),
            lp(&cfg.selector),
            wp(&cfg.selector),
            tx.clone(),
            stop.clone(),
        )));
        if cfg.classes {
            kinds.push(Kind::Vac);
            tasks.push(tokio::spawn(watch_kind(
                Api::<VolumeAttributesClass>::all(client.clone()),
                lp(&cfg.selector),
                wp(&cfg.selector),
                tx.clone(),
                stop.clone(),
            )));
        }
        if cfg.secrets {
            kinds.push(Kind::Secret);
            tasks.push(tokio::spawn(watch_kind(
                Api::<Secret>::all(client.clone()),
                lp(&cfg.selector),
                wp(&cfg.selector),
                tx.clone(),
                stop.clone(),
            )));
        }
        if cfg.service_cidrs {
            kinds.push(Kind::ServiceCidr);
            tasks.push(tokio::spawn(watch_kind(
                Api::<ServiceCIDR>::all(client.clone()),
                lp(""),
                wp(""),
                tx.clone(),
                stop.clone(),
            )));
            kinds.push(Kind::IpAddress);
            let managed = format!("{IP_MANAGED_BY_LABEL}={IP_ALLOCATOR}");
            tasks.push(tokio::spawn(watch_kind(
                Api::<IPAddress>::all(client.clone()),
                lp(&managed),
                wp(&managed),
                tx.clone(),
                stop.clone(),
            )));
        }
        if let Some((ns, name)) = &cfg.lease {
            kinds.push(Kind::Lease);
            let field = format!("metadata.name={name}");
            tasks.push(tokio::spawn(watch_kind(
                Api::<Lease>::namespaced(client, ns),
                ListParams::default().fields(&field),
                WatchParams::default()
                    .fields(&field)
                    .timeout(cfg.watch_timeout.as_secs().clamp(1, 290) as u32),
                tx,
                stop.clone(),
            )));
        }
        (Observer { stop, tasks }, rx, kinds)
    }

    /// Stops every watch.
    pub async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

fn observed<K: Summarize>(obj: &K, change: Change) -> Observed {
    let s = obj.summarize();
    Observed {
        rv: s.rv(),
        change,
        obj: s,
        seen: Instant::now(),
        seen_wall: Timestamp::now(),
    }
}

/// LIST, then WATCH from the list's resourceVersion, resuming after every
/// end; on 410 re-LIST and report the objects that vanished.
async fn watch_kind<K: Summarize>(
    api: Api<K>,
    lp: ListParams,
    wp: WatchParams,
    tx: mpsc::UnboundedSender<Report>,
    stop: CancellationToken,
) {
    let kind = K::KIND;
    // uid -> last summary, to report vanished objects after a gap.
    let mut known: HashMap<String, Summary> = HashMap::new();
    let mut first = true;
    'relist: loop {
        let list = loop {
            if stop.is_cancelled() {
                return;
            }
            match api.list(&lp).await {
                Ok(l) => break l,
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "observer: list failed; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
        };
        let list_rv = rv_of(list.metadata.resource_version.as_ref());
        let mut seen_now = HashMap::new();
        for obj in &list.items {
            let ev = observed(obj, Change::Listed);
            seen_now.insert(obj.uid().unwrap_or_default(), ev.obj.clone());
            let _ = tx.send(Report::Event(Box::new(ev)));
        }
        if !first {
            for (uid, last) in known.drain() {
                if !seen_now.contains_key(&uid) {
                    let _ = tx.send(Report::Event(Box::new(Observed {
                        rv: list_rv,
                        change: Change::VanishedInGap,
                        obj: last,
                        seen: Instant::now(),
                        seen_wall: Timestamp::now(),
                    })));
                }
            }
            let _ = tx.send(Report::Gap { kind, rv: list_rv });
        } else {
            let _ = tx.send(Report::Synced { kind, rv: list_rv });
        }
        first = false;
        known = seen_now;
        let mut rv = list_rv;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let stream = match api.watch(&wp, &rv.to_string()).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%kind, error = %e, "observer: watch failed to start; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                    continue;
                }
            };
            let _ = tx.send(Report::Progress { kind, rv });
            let mut stream = std::pin::pin!(stream);
            loop {
                let next = tokio::select! {
                    _ = stop.cancelled() => return,
                    n = stream.next() => n,
                };
                let Some(item) = next else { break };
                match item {
                    Ok(WatchEvent::Added(o)) => {
                        let ev = observed(&o, Change::Added);
                        rv = rv.max(ev.rv);
                        known.insert(o.uid().unwrap_or_default(), ev.obj.clone());
                        let _ = tx.send(Report::Event(Box::new(ev)));
                    }
                    Ok(WatchEvent::Modified(o)) => {
                        let ev = observed(&o, Change::Modified);
                        rv = rv.max(ev.rv);
                        known.insert(o.uid().unwrap_or_default(), ev.obj.clone());
                        let _ = tx.send(Report::Event(Box::new(ev)));
                    }
                    Ok(WatchEvent::Deleted(o)) => {
                        let ev = observed(&o, Change::Deleted);
                        rv = rv.max(ev.rv);
                        known.remove(&o.uid().unwrap_or_default());
                        let _ = tx.send(Report::Event(Box::new(ev)));
                    }
                    Ok(WatchEvent::Bookmark(b)) => {
                        let b_rv = rv_of(Some(&b.metadata.resource_version));
                        rv = rv.max(b_rv);
                        let _ = tx.send(Report::Progress { kind, rv });
                    }
                    Ok(WatchEvent::Error(status)) => {
                        if status.code == 410 {
                            tracing::warn!(%kind, rv, "observer: watch expired (410); re-listing");
                            continue 'relist;
                        }
                        tracing::debug!(%kind, ?status, "observer: watch error; resuming");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(%kind, error = %e, "observer: watch stream error; resuming");
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pvc(ns: &str, name: &str, rv: u64) -> Summary {
        Summary::Pvc(PvcSummary {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            finalizers: vec![],
            deleting: false,
            phase: String::new(),
            volume_name: String::new(),
            classes: vec![],
        })
    }

    fn ev(rv: u64, change: Change, obj: Summary) -> Report {
        Report::Event(Box::new(Observed {
            rv,
            change,
            obj,
            seen: Instant::now(),
            seen_wall: Timestamp::now(),
        }))
    }

    fn pod(name: &str, rv: u64) -> Summary {
        Summary::Pod(PodSummary {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            rv,
            node_name: String::new(),
            claims: vec![],
            secrets: vec![],
            deleting: false,
            phase: String::new(),
        })
    }

    #[test]
    fn nothing_is_released_before_every_kind_is_synced() {
        let mut t = Timeline::new(&[Kind::Pod, Kind::Pvc]);
        t.push(Report::Synced {
            kind: Kind::Pod,
            rv: 10,
        });
        t.push(ev(11, Change::Added, pod("a", 11)));
        assert!(t.ready().is_empty());
        t.push(Report::Synced {
            kind: Kind::Pvc,
            rv: 12,
        });
        assert_eq!(t.sync_rv(), 12);
        let out = t.ready();
        assert_eq!(out.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![11]);
    }

    #[test]
    fn events_of_several_watches_come_out_in_resource_version_order() {
        let mut t = Timeline::new(&[Kind::Pod, Kind::Pvc]);
        t.push(Report::Synced {
            kind: Kind::Pod,
            rv: 1,
        });
        t.push(Report::Synced {
            kind: Kind::Pvc,
            rv: 1,
        });
        // The pod watch runs ahead of the PVC watch.
        t.push(ev(5, Change::Added, pod("a", 5)));
        t.push(ev(7, Change::Modified, pod("a", 7)));
        assert!(
            t.ready().is_empty(),
            "the PVC watch may still deliver rv 2..7"
        );
        t.push(ev(6, Change::Deleted, pvc("ns", "c", 6)));
        // The PVC watch is at 6: only up to 6 is certain.
        let out = t.ready();
        assert_eq!(out.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![5, 6]);
        // A bookmark moves the PVC watch past 7.
        t.push(Report::Progress {
            kind: Kind::Pvc,
            rv: 9,
        });
        let out = t.ready();
        assert_eq!(out.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![7]);
        assert_eq!(t.watermark(), 7);
        assert_eq!(t.buffered(), 0);
    }

    #[test]
    fn gaps_are_counted_and_drain_returns_the_rest() {
        let mut t = Timeline::new(&[Kind::Pod]);
        t.push(Report::Synced {
            kind: Kind::Pod,
            rv: 1,
        });
        t.push(Report::Gap {
            kind: Kind::Pod,
            rv: 3,
        });
        assert_eq!(t.gaps, 1);
        let mut t = Timeline::new(&[Kind::Pod, Kind::Pvc]);
        t.push(Report::Synced {
            kind: Kind::Pod,
            rv: 1,
        });
        t.push(ev(4, Change::Added, pod("b", 4)));
        t.push(ev(2, Change::Added, pod("a", 2)));
        let out = t.drain_all();
        assert_eq!(out.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![2, 4]);
    }
}

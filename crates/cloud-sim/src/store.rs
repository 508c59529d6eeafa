//! The simulator's load balancers, their addresses, and the state file.
//!
//! Every mutation is applied in memory under one lock, then made durable
//! before it is acknowledged: the whole state is written to a temporary file
//! in the same directory, fsynced, renamed over the state file, and the
//! directory is fsynced. Concurrent mutations share writes (group commit): a
//! call waits until a write that includes its mutation has completed, which is
//! often one started by another call.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::Timestamp;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::ip::IpRange;
use crate::model::{EnsureRequest, Ingress, LoadBalancer, Node, Spec, Status, codes};
use crate::stats::Outcome;

const FORMAT: &str = "cloud-sim-state/v1";

/// The state file as stored on disk.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateFile {
    format: String,
    load_balancers: Vec<LoadBalancer>,
}

/// A state file problem.
#[derive(Debug, Error)]
pub enum StateError {
    #[error("cannot read the state file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the state file {} is corrupt: {reason}; cloud-sim never resets a state file it cannot read: fix or remove it", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot write the state file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A refused API call: HTTP status, contract error code, message.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub outcome: Outcome,
}

impl ApiError {
    fn bad_request(message: String) -> Self {
        Self {
            status: 400,
            code: codes::INVALID_REQUEST,
            message,
            outcome: Outcome::BadRequest,
        }
    }

    fn not_found(uid: &str) -> Self {
        Self {
            status: 404,
            code: codes::NOT_FOUND,
            message: format!("load balancer {uid} not found"),
            outcome: Outcome::NotFound,
        }
    }

    fn conflict(code: &'static str, message: String) -> Self {
        Self {
            status: 409,
            code,
            message,
            outcome: Outcome::Conflict,
        }
    }
}

struct Inner {
    // Arc, so that a snapshot for the state file is cheap to take under the
    // lock and is serialized outside it.
    lbs: BTreeMap<String, Arc<LoadBalancer>>,
    ips: BTreeMap<Ipv4Addr, String>,
    version: u64,
}

struct Persister {
    path: PathBuf,
    fsync: bool,
    /// The highest version known to be on disk; its lock serializes writes.
    durable: Arc<tokio::sync::Mutex<u64>>,
    writes: Arc<AtomicU64>,
}

pub(crate) struct Store {
    inner: Mutex<Inner>,
    range: IpRange,
    persist: Option<Persister>,
    /// The `ipMode` reported on each ingress (`None`: none reported).
    ip_mode: Option<String>,
}

/// Result of a mutating call: what happened, the load balancer, and the
/// state version that must be durable before the reply.
pub(crate) struct Applied {
    pub outcome: Outcome,
    pub lb: Option<LoadBalancer>,
    pub version: u64,
}

fn corrupt(path: &Path, reason: impl Into<String>) -> StateError {
    StateError::Corrupt {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn load(path: &Path) -> Result<Option<Vec<LoadBalancer>>, StateError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StateError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let file: StateFile =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(path, e.to_string()))?;
    if file.format != FORMAT {
        return Err(corrupt(
            path,
            format!("format is {:?}, expected {FORMAT:?}", file.format),
        ));
    }
    Ok(Some(file.load_balancers))
}

/// The state file's bytes.
fn encode(lbs: &[Arc<LoadBalancer>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lbs.len() * 1024 + 64);
    out.extend_from_slice(b"{\"format\":\"");
    out.extend_from_slice(FORMAT.as_bytes());
    out.extend_from_slice(b"\",\"loadBalancers\":[");
    for (i, lb) in lbs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Serializing plain data to memory cannot fail.
        let _ = serde_json::to_writer(&mut out, &**lb);
    }
    out.extend_from_slice(b"]}");
    out
}

fn write_atomic(path: &Path, bytes: &[u8], fsync: bool) -> std::io::Result<()> {
    let mut tmp_name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "state".into());
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        if fsync {
            f.sync_all()?;
        }
    }
    std::fs::rename(&tmp, path)?;
    if !fsync {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // Make the rename itself durable.
    std::fs::File::open(dir)?.sync_all()
}

fn validate_nodes(nodes: &[Node]) -> Result<(), ApiError> {
    let mut names = BTreeSet::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.name.is_empty() {
            return Err(ApiError::bad_request(format!("nodes[{i}].name is empty")));
        }
        if !names.insert(n.name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "nodes[{i}].name {:?} appears twice",
                n.name
            )));
        }
        for (j, a) in n.addresses.iter().enumerate() {
            if a.kind != "InternalIP" && a.kind != "ExternalIP" {
                return Err(ApiError::bad_request(format!(
                    "nodes[{i}].addresses[{j}].type is {:?}; expected InternalIP or ExternalIP",
                    a.kind
                )));
            }
            if a.address.parse::<IpAddr>().is_err() {
                return Err(ApiError::bad_request(format!(
                    "nodes[{i}].addresses[{j}].address {:?} is not an IP address",
                    a.address
                )));
            }
        }
    }
    Ok(())
}

fn valid_cidr(s: &str) -> bool {
    let Some((addr, len)) = s.split_once('/') else {
        return false;
    };
    match (addr.parse::<IpAddr>(), len.parse::<u8>()) {
        (Ok(IpAddr::V4(_)), Ok(l)) => l <= 32,
        (Ok(IpAddr::V6(_)), Ok(l)) => l <= 128,
        _ => false,
    }
}

fn validate_spec(spec: &Spec) -> Result<Option<Ipv4Addr>, ApiError> {
    if spec.ports.is_empty() {
        return Err(ApiError::bad_request("spec.ports is empty".into()));
    }
    for (i, p) in spec.ports.iter().enumerate() {
        if !(1..=65535).contains(&p.port) {
            return Err(ApiError::bad_request(format!(
                "spec.ports[{i}].port is {}; expected 1-65535",
                p.port
            )));
        }
        if !matches!(p.protocol.as_str(), "TCP" | "UDP" | "SCTP") {
            return Err(ApiError::bad_request(format!(
                "spec.ports[{i}].protocol is {:?}; expected TCP, UDP or SCTP",
                p.protocol
            )));
        }
        if let Some(np) = p.node_port
            && !(0..=65535).contains(&np)
        {
            return Err(ApiError::bad_request(format!(
                "spec.ports[{i}].nodePort is {np}; expected 0-65535"
            )));
        }
    }
    for (i, r) in spec.load_balancer_source_ranges.iter().enumerate() {
        if !valid_cidr(r.trim()) {
            return Err(ApiError::bad_request(format!(
                "spec.loadBalancerSourceRanges[{i}] {r:?} is not a CIDR"
            )));
        }
    }
    if !spec.ip_families.is_empty() && !spec.ip_families.iter().any(|f| f == "IPv4") {
        return Err(ApiError::bad_request(format!(
            "spec.ipFamilies is {:?}; cloud-sim only allocates IPv4 addresses",
            spec.ip_families
        )));
    }
    match spec.load_balancer_ip.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) => s.parse::<Ipv4Addr>().map(Some).map_err(|_| {
            ApiError::bad_request(format!("spec.loadBalancerIP {s:?} is not an IPv4 address"))
        }),
    }
}

fn status_for(ip: Ipv4Addr, ip_mode: Option<&str>) -> Status {
    Status {
        ingress: vec![Ingress {
            ip: Some(ip.to_string()),
            hostname: None,
            ip_mode: ip_mode.map(str::to_owned),
        }],
    }
}

impl Store {
    /// The `ipMode` reported on each ingress from now on (`None`: none, as a
    /// provider that predates `ipMode`).
    pub fn set_ip_mode(&mut self, ip_mode: Option<String>) {
        self.ip_mode = ip_mode;
    }

    /// Opens the state file (creating it when absent) or, without a file, an
    /// empty in-memory state.
    pub fn open(path: Option<PathBuf>, range: IpRange, fsync: bool) -> Result<Self, StateError> {
        let mut inner = Inner {
            lbs: BTreeMap::new(),
            ips: BTreeMap::new(),
            version: 0,
        };
        let mut must_write = false;
        if let Some(path) = &path {
            match load(path)? {
                None => must_write = true,
                Some(lbs) => {
                    for lb in lbs {
                        if lb.uid.is_empty() {
                            return Err(corrupt(path, "a load balancer has an empty uid"));
                        }
                        if let Some(ingress) = lb.status.ingress.first() {
                            let ip: Ipv4Addr = ingress
                                .ip
                                .as_deref()
                                .and_then(|s| s.parse().ok())
                                .ok_or_else(|| {
                                corrupt(
                                    path,
                                    format!(
                                        "load balancer {} has ingress {:?}, not an IPv4 address",
                                        lb.uid, ingress.ip
                                    ),
                                )
                            })?;
                            if let Some(other) = inner.ips.insert(ip, lb.uid.clone()) {
                                return Err(corrupt(
                                    path,
                                    format!("address {ip} is held by both {other} and {}", lb.uid),
                                ));
                            }
                            if !range.contains(ip) {
                                tracing::warn!(uid = %lb.uid, %ip, %range, "load balancer from the state file holds an address outside the configured range; it keeps it until deleted");
                            }
                        }
                        let uid = lb.uid.clone();
                        if inner.lbs.insert(uid.clone(), Arc::new(lb)).is_some() {
                            return Err(corrupt(
                                path,
                                format!("load balancer {uid} appears twice"),
                            ));
                        }
                    }
                }
            }
        }
        let store = Self {
            inner: Mutex::new(inner),
            range,
            persist: path.map(|path| Persister {
                path,
                fsync,
                durable: Arc::new(tokio::sync::Mutex::new(0)),
                writes: Arc::new(AtomicU64::new(0)),
            }),
            ip_mode: Some("VIP".to_owned()),
        };
        if must_write && let Some(p) = &store.persist {
            // Create the file now: an unwritable location fails at start.
            let bytes = encode(&store.snapshot().0);
            write_atomic(&p.path, &bytes, p.fsync).map_err(|source| StateError::Write {
                path: p.path.clone(),
                source,
            })?;
        }
        Ok(store)
    }

    pub fn range(&self) -> IpRange {
        self.range
    }

    pub fn state_file(&self) -> Option<&Path> {
        self.persist.as_ref().map(|p| p.path.as_path())
    }

    pub fn state_writes(&self) -> u64 {
        self.persist
            .as_ref()
            .map_or(0, |p| p.writes.load(Ordering::Relaxed))
    }

    fn snapshot(&self) -> (Vec<Arc<LoadBalancer>>, u64) {
        let inner = self.inner.lock();
        (inner.lbs.values().cloned().collect(), inner.version)
    }

    /// Waits until the state at `version` (or later) is on disk.
    pub async fn make_durable(&self, version: u64) -> Result<(), StateError> {
        let Some(p) = &self.persist else {
            return Ok(());
        };
        let mut guard = p.durable.clone().lock_owned().await;
        if *guard >= version {
            return Ok(());
        }
        let (lbs, snap_version) = self.snapshot();
        let path = p.path.clone();
        let fsync = p.fsync;
        let writes = p.writes.clone();
        // The guard moves into the blocking task, so that a caller that goes
        // away cannot let a second write start before this one ends.
        let res = tokio::task::spawn_blocking(move || {
            let r = write_atomic(&path, &encode(&lbs), fsync);
            if r.is_ok() {
                *guard = snap_version;
                writes.fetch_add(1, Ordering::Relaxed);
            }
            r.map_err(|source| StateError::Write { path, source })
        })
        .await;
        match res {
            Ok(r) => r,
            Err(join) => Err(StateError::Write {
                path: p.path.clone(),
                source: std::io::Error::other(join.to_string()),
            }),
        }
    }

    pub fn get(&self, uid: &str) -> Option<LoadBalancer> {
        self.inner.lock().lbs.get(uid).map(|lb| (**lb).clone())
    }

    /// All load balancers, oldest first.
    pub fn list(&self) -> Vec<LoadBalancer> {
        let mut v: Vec<LoadBalancer> = self
            .inner
            .lock()
            .lbs
            .values()
            .map(|lb| (**lb).clone())
            .collect();
        v.sort_by(|a, b| (a.created_at, &a.uid).cmp(&(b.created_at, &b.uid)));
        v
    }

    pub fn count(&self) -> u64 {
        self.inner.lock().lbs.len() as u64
    }

    pub fn allocated(&self) -> u64 {
        self.inner.lock().ips.len() as u64
    }

    /// `PUT /v1/loadbalancers/{uid}`.
    pub fn ensure(&self, uid: &str, req: EnsureRequest) -> Result<Applied, ApiError> {
        if req.service.uid != uid {
            return Err(ApiError::bad_request(format!(
                "service.uid {:?} differs from the uid {uid:?} in the path",
                req.service.uid
            )));
        }
        if req.name.is_empty() {
            return Err(ApiError::bad_request("name is empty".into()));
        }
        if req.service.namespace.is_empty() || req.service.name.is_empty() {
            return Err(ApiError::bad_request(
                "service.namespace and service.name must not be empty".into(),
            ));
        }
        let requested = validate_spec(&req.spec)?;
        validate_nodes(&req.nodes)?;

        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let now = Timestamp::now();
        let existing = inner.lbs.get(uid).cloned();
        let current_ip = existing.as_ref().and_then(|lb| lb.ip());
        if let Some(lb) = &existing
            && (lb.service.namespace != req.service.namespace
                || lb.service.name != req.service.name)
        {
            return Err(ApiError::conflict(
                codes::SERVICE_MISMATCH,
                format!(
                    "load balancer {uid} belongs to Service {}/{}, not {}/{}",
                    lb.service.namespace, lb.service.name, req.service.namespace, req.service.name
                ),
            ));
        }
        let ip = match (requested, current_ip) {
            (Some(want), Some(have)) if want == have => have,
            (Some(want), _) => {
                if !self.range.contains(want) {
                    return Err(ApiError::bad_request(format!(
                        "spec.loadBalancerIP {want} is outside the address range {}",
                        self.range
                    )));
                }
                if let Some(holder) = inner.ips.get(&want) {
                    return Err(ApiError::conflict(
                        codes::IP_IN_USE,
                        format!("address {want} is in use by load balancer {holder}"),
                    ));
                }
                want
            }
            (None, Some(have)) => have,
            (None, None) => {
                let ips = &inner.ips;
                self.range
                    .lowest_free(|a| ips.contains_key(&a))
                    .ok_or_else(|| ApiError {
                        status: 507,
                        code: codes::ADDRESS_POOL_EXHAUSTED,
                        message: format!(
                            "no free address in the range {} ({} of {} in use)",
                            self.range,
                            ips.len(),
                            self.range.capacity()
                        ),
                        outcome: Outcome::Exhausted,
                    })?
            }
        };
        let status = status_for(ip, self.ip_mode.as_deref());
        match existing {
            Some(lb)
                if lb.name == req.name
                    && lb.spec == req.spec
                    && lb.nodes == req.nodes
                    && lb.status == status =>
            {
                Ok(Applied {
                    outcome: Outcome::Unchanged,
                    lb: Some((*lb).clone()),
                    version: inner.version,
                })
            }
            Some(lb) => {
                let mut lb = (*lb).clone();
                if let Some(old) = current_ip
                    && old != ip
                {
                    inner.ips.remove(&old);
                }
                inner.ips.insert(ip, uid.to_owned());
                lb.name = req.name;
                lb.spec = req.spec;
                lb.nodes = req.nodes;
                lb.status = status;
                lb.updated_at = now;
                lb.generation += 1;
                inner.lbs.insert(uid.to_owned(), Arc::new(lb.clone()));
                inner.version += 1;
                Ok(Applied {
                    outcome: Outcome::Updated,
                    lb: Some(lb),
                    version: inner.version,
                })
            }
            None => {
                inner.ips.insert(ip, uid.to_owned());
                let lb = LoadBalancer {
                    uid: uid.to_owned(),
                    name: req.name,
                    service: req.service,
                    spec: req.spec,
                    nodes: req.nodes,
                    status,
                    created_at: now,
                    updated_at: now,
                    generation: 1,
                };
                inner.lbs.insert(uid.to_owned(), Arc::new(lb.clone()));
                inner.version += 1;
                Ok(Applied {
                    outcome: Outcome::Created,
                    lb: Some(lb),
                    version: inner.version,
                })
            }
        }
    }

    /// `PUT /v1/loadbalancers/{uid}/hosts`.
    pub fn update_hosts(&self, uid: &str, nodes: Vec<Node>) -> Result<Applied, ApiError> {
        validate_nodes(&nodes)?;
        let mut inner = self.inner.lock();
        let version = inner.version;
        let Some(lb) = inner.lbs.get_mut(uid) else {
            return Err(ApiError::not_found(uid));
        };
        if lb.nodes == nodes {
            return Ok(Applied {
                outcome: Outcome::Unchanged,
                lb: Some((**lb).clone()),
                version,
            });
        }
        let lb = Arc::make_mut(lb);
        lb.nodes = nodes;
        lb.updated_at = Timestamp::now();
        lb.generation += 1;
        let lb = lb.clone();
        inner.version += 1;
        Ok(Applied {
            outcome: Outcome::Updated,
            lb: Some(lb),
            version: inner.version,
        })
    }

    /// `DELETE /v1/loadbalancers/{uid}`.
    pub fn delete(&self, uid: &str) -> Result<Applied, ApiError> {
        let mut inner = self.inner.lock();
        let Some(lb) = inner.lbs.remove(uid) else {
            return Err(ApiError::not_found(uid));
        };
        let lb = Arc::unwrap_or_clone(lb);
        if let Some(ip) = lb.ip()
            && inner.ips.get(&ip).is_some_and(|holder| holder == uid)
        {
            inner.ips.remove(&ip);
        }
        inner.version += 1;
        Ok(Applied {
            outcome: Outcome::Deleted,
            lb: Some(lb),
            version: inner.version,
        })
    }

    pub fn not_found(uid: &str) -> ApiError {
        ApiError::not_found(uid)
    }
}

//! networking.k8s.io/v1 ServiceCIDR and IPAddress, and Service ClusterIP
//! allocation from them (MultiCIDRServiceAllocator, GA and locked on since
//! 1.34; DisableAllocatorDualWrite locked on since 1.35, so the IPAddress
//! objects are the only record of an allocation).
//!
//! Upstream:
//! * pkg/apis/networking/validation (`ValidateServiceCIDR`,
//!   `ValidateServiceCIDRUpdate`, `ValidateIPAddress`,
//!   `ValidateIPAddressUpdate`);
//! * pkg/registry/networking/{servicecidr,ipaddress} (strategies: a new
//!   ServiceCIDR's status is wiped, status writes keep spec and metadata);
//! * pkg/registry/core/service/ipallocator (`MetaAllocator`: one allocator per
//!   CIDR of the ServiceCIDRs, ready while a ServiceCIDR with that CIDR is not
//!   being deleted and its `Ready` condition is not False; an allocation
//!   creates the IPAddress named by the IP, labelled
//!   `ipaddress.kubernetes.io/ip-family` and
//!   `ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io`, with the
//!   Service as `parentRef`; a release deletes it);
//! * pkg/registry/core/service/storage/alloc.go (the errors a Service write
//!   gets);
//! * pkg/controlplane/controller/defaultservicecidr (the `kubernetes`
//!   ServiceCIDR from `--service-cluster-ip-range`, recreated every 10 s
//!   when deleted, `Ready=True` written by server-side apply).
//!
//! kube-sim serves a single-stack IPv4 cluster: IPv6 ServiceCIDRs are
//! stored and validated, but no allocator uses them (as an IPv4-only
//! apiserver skips them).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::netaddr::{self, GoCidr, GoIp};
use crate::object::meta_str;
use crate::resources::{self, ResId};
use crate::store::{Store, WriteOptions};

/// `networkingv1.LabelManagedBy`.
pub const LABEL_MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
/// `networkingv1.LabelIPAddressFamily`.
pub const LABEL_IP_FAMILY: &str = "ipaddress.kubernetes.io/ip-family";
/// `ipallocator.ControllerName`.
pub const ALLOCATOR_NAME: &str = "ipallocator.k8s.io";
/// `defaultservicecidr.DefaultServiceCIDRName`.
pub const DEFAULT_SERVICE_CIDR: &str = "kubernetes";
/// The default ServiceCIDR controller's name (its field manager and event
/// source).
pub const DEFAULT_CIDR_CONTROLLER: &str = "kubernetes-service-cidr-controller";
/// The field manager of what the API server writes through its loopback
/// client (the IPAddresses of the allocator, the default ServiceCIDR).
pub const APISERVER_MANAGER: &str = "kube-apiserver";

pub fn servicecidrs_rid() -> ResId {
    resources::find("networking.k8s.io", "v1", "servicecidrs").unwrap_or(0)
}

pub fn ipaddresses_rid() -> ResId {
    resources::find("networking.k8s.io", "v1", "ipaddresses").unwrap_or(0)
}

fn is_kind(def: &resources::ResourceDef, resource: &str) -> bool {
    def.group == "networking.k8s.io" && def.resource == resource
}

// ------------------------------------------------------------- validation

/// `ValidateIPAddressName`.
pub fn validate_ip_address_name(name: &str) -> Vec<String> {
    netaddr::valid_ip(name)
}

fn cidrs_of(obj: &Value) -> Vec<String> {
    obj.pointer("/spec/cidrs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// `netutils.IPFamilyOfCIDRString`: Some(true) for IPv4, Some(false) for
/// IPv6, None when it does not parse.
fn family_of_cidr(s: &str) -> Option<bool> {
    netaddr::parse_cidr_sloppy(s).map(|c| c.is_ipv4())
}

/// `validateServiceCIDRSpec`.
fn validate_service_cidr_spec(cidrs: &[String]) -> Vec<FieldError> {
    const PATH: &str = "spec.cidrs";
    if cidrs.is_empty() {
        return vec![FieldError::required(PATH, "at least one CIDR required")];
    }
    if cidrs.len() > 2 {
        // The bad value is the internal ServiceCIDRSpec, which has no JSON
        // tags: json.Marshal names its field "CIDRs".
        return vec![FieldError::invalid(
            PATH,
            json!({"CIDRs": cidrs}),
            "may only hold up to 2 values",
        )];
    }
    let mut errs = Vec::new();
    for (i, c) in cidrs.iter().enumerate() {
        for m in netaddr::valid_cidr(c) {
            errs.push(FieldError::invalid(&format!("{PATH}[{i}]"), json!(c), m));
        }
    }
    if cidrs.len() == 2 {
        let (a, b) = (family_of_cidr(&cidrs[0]), family_of_cidr(&cidrs[1]));
        if a == b && a.is_some() {
            errs.push(FieldError::invalid(
                PATH,
                json!(cidrs),
                "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ));
        }
    }
    errs
}

/// `validateIPAddressParentReference`.
fn validate_parent_ref(obj: &Value) -> Vec<FieldError> {
    let Some(p) = obj.pointer("/spec/parentRef").filter(|v| v.is_object()) else {
        return vec![FieldError::required("spec.parentRef", "")];
    };
    let get = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut errs = Vec::new();
    let group = get("group");
    if !group.is_empty() {
        for m in crate::validation::dns1123_subdomain(group) {
            errs.push(FieldError::invalid("spec.parentRef.group", json!(group), m));
        }
    }
    for (key, required) in [("resource", true), ("name", true), ("namespace", false)] {
        let v = get(key);
        let path = format!("spec.parentRef.{key}");
        if v.is_empty() {
            if required {
                errs.push(FieldError::required(&path, ""));
            }
            continue;
        }
        for m in crate::validation::path_segment(v, false) {
            errs.push(FieldError::invalid(&path, json!(v), m));
        }
    }
    errs
}

/// The internal `*networking.ParentReference` as a field error prints it
/// (json.Marshal of a type without JSON tags).
fn internal_parent_ref(obj: &Value) -> Value {
    match obj.pointer("/spec/parentRef").filter(|v| v.is_object()) {
        None => Value::Null,
        Some(p) => {
            let get = |k: &str| json!(p.get(k).and_then(Value::as_str).unwrap_or_default());
            json!({"Group": get("group"), "Resource": get("resource"), "Namespace": get("namespace"), "Name": get("name")})
        }
    }
}

/// Spec validation of a new ServiceCIDR or IPAddress (the name is checked
/// with the metadata).
pub fn validate_create(def: &resources::ResourceDef, obj: &Value) -> Vec<FieldError> {
    if is_kind(def, "servicecidrs") {
        validate_service_cidr_spec(&cidrs_of(obj))
    } else if is_kind(def, "ipaddresses") {
        validate_parent_ref(obj)
    } else {
        Vec::new()
    }
}

/// Spec validation of an update of the main resource.
pub fn validate_update(def: &resources::ResourceDef, new: &Value, old: &Value) -> Vec<FieldError> {
    if is_kind(def, "servicecidrs") {
        let (n, o) = (cidrs_of(new), cidrs_of(old));
        let mut errs = Vec::new();
        if n.len() == o.len() {
            for (i, (a, b)) in o.iter().zip(&n).enumerate() {
                if a != b {
                    errs.push(FieldError::invalid(
                        &format!("spec.cidrs[{i}]"),
                        json!(b),
                        "field is immutable",
                    ));
                }
            }
        } else if o.len() == 1 && n.len() == 2 {
            // Single- to dual-stack: the first CIDR stays, the second is new.
            if n[0] != o[0] {
                errs.push(FieldError::invalid(
                    "spec.cidrs[0]",
                    json!(n[0]),
                    "field is immutable",
                ));
            }
            errs.extend(validate_service_cidr_spec(&n));
        } else {
            errs.push(FieldError::invalid(
                "spec.cidrs",
                json!(n),
                "field is immutable",
            ));
        }
        errs
    } else if is_kind(def, "ipaddresses") {
        let mut errs = validate_parent_ref(new);
        if new.pointer("/spec/parentRef") != old.pointer("/spec/parentRef") {
            errs.push(FieldError::invalid(
                "spec.parentRef",
                internal_parent_ref(new),
                "field is immutable",
            ));
        }
        errs
    } else {
        Vec::new()
    }
}

// ------------------------------------------------------------ allocation

/// One allocator of the MetaAllocator: a CIDR of some ServiceCIDRs.
#[derive(Debug, Clone)]
struct Range {
    cidr: GoCidr,
    text: String,
    ready: bool,
}

/// `isReady`: a ServiceCIDR without a Ready condition counts as ready (so
/// that a cluster without kube-controller-manager allocates).
fn service_cidr_ready(obj: &Value) -> bool {
    let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
    let ready_cond = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .map(|c| c.get("status").and_then(Value::as_str) == Some("True"));
    !deleting && ready_cond.unwrap_or(true)
}

/// The IPv4 allocators of the stored ServiceCIDRs, in CIDR order.
fn ranges(store: &Store) -> Vec<Range> {
    let (cidrs, _) = store.snapshot(servicecidrs_rid(), None);
    let mut out: Vec<Range> = Vec::new();
    for sc in cidrs {
        let ready = service_cidr_ready(&sc.value);
        for text in cidrs_of(&sc.value) {
            let Some(cidr) = netaddr::parse_cidr_sloppy(&text) else {
                continue;
            };
            if !cidr.is_ipv4() {
                continue;
            }
            match out.iter_mut().find(|r| r.text == text) {
                // Ready while one of its ServiceCIDRs is.
                Some(r) => r.ready |= ready,
                None => out.push(Range { cidr, text, ready }),
            }
        }
    }
    out.sort_by(|a, b| a.text.cmp(&b.text));
    out
}

fn v4_num(ip: GoIp) -> u32 {
    u32::from_be_bytes(ip.to4().unwrap_or([0; 4]))
}

fn v4_ip(n: u32) -> GoIp {
    GoIp::v4(n.to_be_bytes())
}

impl Range {
    /// First and last allocatable addresses (no network, no broadcast).
    fn bounds(&self) -> (u32, u32) {
        let net = v4_num(self.cidr.ip);
        let host_bits = 32 - u32::from(self.cidr.bits);
        let broadcast = if host_bits == 32 {
            u32::MAX
        } else {
            net | ((1u32 << host_bits) - 1)
        };
        (net.wrapping_add(1), broadcast.wrapping_sub(1))
    }

    /// `servicecidr.PrefixContainsIP`: in the prefix, and neither its
    /// network nor (IPv4) its broadcast address.
    fn contains_ip(&self, ip: GoIp) -> bool {
        let (first, last) = self.bounds();
        let n = v4_num(ip);
        self.cidr.contains(ip) && n >= first && n <= last
    }

    /// `hostsPerNetwork`.
    fn size(&self) -> u64 {
        let max = 1u64 << (32 - u32::from(self.cidr.bits));
        max.saturating_sub(2)
    }

    /// `calculateRangeOffset`: `min(max(16, size/16), 256)`, 0 for ranges of
    /// 16 addresses or fewer.
    fn range_offset(&self) -> u64 {
        let size = 1u64 << (32 - u32::from(self.cidr.bits));
        if size <= 16 {
            0
        } else {
            (size / 16).clamp(16, 256)
        }
    }
}

/// Why an allocation failed (ipallocator's errors).
#[derive(Debug, Clone, PartialEq)]
pub enum AllocError {
    Full,
    Allocated,
    MismatchedNetwork,
    NotReady,
    NotInRange {
        ip: String,
        range: String,
    },
    /// Creating the IPAddress failed otherwise (e.g. admission).
    Api(ApiError),
}

impl std::fmt::Display for AllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocError::Full => f.write_str("range is full"),
            AllocError::Allocated => f.write_str("provided IP is already allocated"),
            AllocError::MismatchedNetwork => {
                f.write_str("the provided network does not match the current range")
            }
            AllocError::NotReady => f.write_str("allocator not ready"),
            AllocError::NotInRange { ip, range } => write!(
                f,
                "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}"
            ),
            AllocError::Api(e) => write!(f, "{}", e.message),
        }
    }
}

/// The IPAddress the allocator creates for `ip`, held by the Service.
fn ip_address_object(ip: &str, svc_ns: &str, svc_name: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": ip,
            "labels": {LABEL_IP_FAMILY: "IPv4", LABEL_MANAGED_BY: ALLOCATOR_NAME},
        },
        "spec": {"parentRef": {"resource": "services", "namespace": svc_ns, "name": svc_name}},
    })
}

/// A write of the API server's own, through its loopback client: as
/// `system:apiserver` (what admission policies see), by `manager`.
fn apiserver_write(manager: &str) -> WriteOptions {
    WriteOptions {
        user: Some(Arc::new(crate::repairip::apiserver_user())),
        ..WriteOptions::manager(manager)
    }
}

fn create_ip_address(store: &Store, ip: &str, ns: &str, name: &str) -> Result<(), AllocError> {
    match store.create(
        ipaddresses_rid(),
        "",
        ip_address_object(ip, ns, name),
        &apiserver_write(APISERVER_MANAGER),
    ) {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 && e.reason == "AlreadyExists" => Err(AllocError::Allocated),
        Err(e) => Err(AllocError::Api(e)),
    }
}

/// `MetaAllocator.AllocateService`: the IP a Service names.
fn allocate_static(
    store: &Store,
    ip: GoIp,
    ns: &str,
    name: &str,
    dry_run: bool,
) -> Result<(), AllocError> {
    let ranges = ranges(store);
    if dry_run {
        // DryRun() is one allocator, whichever the map yields first.
        let Some(r) = ranges.first() else {
            return Err(AllocError::NotReady);
        };
        return check_in_range(r, ip);
    }
    let r = ranges
        .iter()
        .find(|r| r.ready && r.contains_ip(ip))
        .ok_or(AllocError::MismatchedNetwork)?;
    check_in_range(r, ip)?;
    create_ip_address(store, &netaddr::ip_string(ip), ns, name)
}

fn check_in_range(r: &Range, ip: GoIp) -> Result<(), AllocError> {
    if !r.ready {
        return Err(AllocError::NotReady);
    }
    let (first, last) = r.bounds();
    let n = v4_num(ip);
    if ip.to4().is_none() || n < first || n > last {
        return Err(AllocError::NotInRange {
            ip: netaddr::ip_string(ip),
            range: r.text.clone(),
        });
    }
    Ok(())
}

/// `Allocator.allocateNextService` over one range: a random start in the
/// upper part (above the static sub-range of KEP-3070), then the lower
/// part, skipping addresses that have an IPAddress.
fn allocate_next_in(
    store: &Store,
    r: &Range,
    rng: &mut impl rand::Rng,
    ns: &str,
    name: &str,
) -> Result<String, AllocError> {
    if !r.ready {
        return Err(AllocError::NotReady);
    }
    let (first, last) = r.bounds();
    let offset = r.range_offset();
    let size = r.size();
    if size <= offset {
        return Err(AllocError::Full);
    }
    let upper_start = first as u64 + offset;
    let parts = [
        (upper_start, last as u64, size - offset),
        (first as u64, upper_start.saturating_sub(1), offset),
    ];
    let ip_rid = ipaddresses_rid();
    for (lo, hi, len) in parts {
        if len == 0 || hi < lo {
            continue;
        }
        let start = rng.random_range(0..len);
        for k in 0..len {
            let n = lo + (start + k) % len;
            let ip = netaddr::ip_string(v4_ip(n as u32));
            if store.get(ip_rid, "", &ip).is_ok() {
                continue;
            }
            match create_ip_address(store, &ip, ns, name) {
                Ok(()) => return Ok(ip),
                // A mid-air collision: try the next address.
                Err(AllocError::Allocated) => continue,
                Err(e) => return Err(e),
            }
        }
    }
    Err(AllocError::Full)
}

/// `MetaAllocator.AllocateNextService`.
fn allocate_next(
    store: &Store,
    rng: &mut impl rand::Rng,
    ns: &str,
    name: &str,
    dry_run: bool,
) -> Result<String, AllocError> {
    use rand::seq::SliceRandom;
    let mut ranges = ranges(store);
    // Upstream walks its allocators in Go map order: any of them may serve.
    ranges.shuffle(rng);
    if dry_run {
        // The dry-run allocator answers its network address.
        let Some(r) = ranges.first() else {
            return Err(AllocError::NotReady);
        };
        if !r.ready {
            return Err(AllocError::NotReady);
        }
        return Ok(netaddr::ip_string(r.cidr.ip));
    }
    for r in &ranges {
        match allocate_next_in(store, r, rng, ns, name) {
            Ok(ip) => return Ok(ip),
            Err(AllocError::Full | AllocError::NotReady) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(AllocError::Full)
}

/// `needsClusterIP`.
pub fn needs_cluster_ip(svc: &Value) -> bool {
    svc.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
}

/// The cluster IPs a Service holds (not `None`, not empty).
pub fn held_ips(svc: &Value) -> Vec<String> {
    if !needs_cluster_ip(svc) {
        return Vec::new();
    }
    let mut ips: Vec<String> = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if ips.is_empty()
        && let Some(ip) = svc.pointer("/spec/clusterIP").and_then(Value::as_str)
    {
        ips.push(ip.to_string());
    }
    ips.retain(|ip| !ip.is_empty() && ip != "None");
    ips
}

/// The checks of `ValidateServiceClusterIPsRelatedFields` that come before
/// allocation: each cluster IP a valid IP (as a legacy field, strict).
fn validate_cluster_ips(svc: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let ips: Vec<String> = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    let old_ips: Vec<String> = old.map(held_ips).unwrap_or_default();
    let old_refs: Vec<&str> = old_ips.iter().map(String::as_str).collect();
    let mut errs = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            continue;
        }
        for m in netaddr::valid_ip_for_legacy_field(ip, &old_refs) {
            errs.push(FieldError::invalid(
                &format!("spec.clusterIPs[{i}]"),
                json!(ip),
                m,
            ));
        }
    }
    errs
}

/// What a Service write allocated, to be reverted when the write fails.
#[derive(Debug, Default)]
#[must_use = "a failed write must revert its allocations"]
pub struct Allocated {
    pub ips: Vec<String>,
}

/// Allocates the cluster IP of a Service being created (or updated from a
/// type without one): `clusterIP`/`clusterIPs` synced, an empty one gets
/// the next free address, a named one is reserved. Errors as
/// pkg/registry/core/service/storage/alloc.go answers them.
pub fn allocate_service(
    store: &Store,
    rng: &mut impl rand::Rng,
    svc: &mut Value,
    old: Option<&Value>,
    dry_run: bool,
) -> Result<Allocated, ApiError> {
    if !needs_cluster_ip(svc) {
        return Ok(Allocated::default());
    }
    let name = meta_str(svc, "name").to_string();
    let ns = meta_str(svc, "namespace").to_string();
    // normalizeClusterIPs: clusterIPs follows clusterIP when only that is set.
    let ip = svc
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let ips_empty = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if !ip.is_empty() && ips_empty {
        svc["spec"]["clusterIPs"] = json!([ip]);
    }
    let errs = validate_cluster_ips(svc, old);
    if !errs.is_empty() {
        return Err(ApiError::invalid("", "Service", &name, &errs));
    }
    let requested = held_ips(svc);
    if old.is_some_and(|o| needs_cluster_ip(o) && !held_ips(o).is_empty()) {
        // An update keeps what the Service holds.
        return Ok(Allocated::default());
    }
    if ip == "None" {
        // initIPFamilyFields: a headless Service without a selector is
        // RequireDualStack (both families, whatever the cluster's); with
        // one, SingleStack of the primary family.
        let selectorless = svc
            .pointer("/spec/selector")
            .and_then(Value::as_object)
            .is_none_or(|s| s.is_empty());
        if let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) {
            let (policy, families) = if selectorless {
                ("RequireDualStack", json!(["IPv4", "IPv6"]))
            } else {
                ("SingleStack", json!(["IPv4"]))
            };
            if spec.get("ipFamilyPolicy").is_none_or(Value::is_null) {
                spec.insert("ipFamilyPolicy".into(), json!(policy));
            }
            if spec
                .get("ipFamilies")
                .is_none_or(crate::internal_diff::is_go_empty)
            {
                spec.insert("ipFamilies".into(), families);
            }
        }
        return Ok(Allocated::default());
    }
    let cluster_ips_value = svc
        .pointer("/spec/clusterIPs")
        .cloned()
        .unwrap_or(Value::Null);
    let mut done = Allocated::default();
    let ip = match requested.first() {
        Some(ip) => {
            let parsed = netaddr::parse_ip_sloppy(ip)
                .ok_or_else(|| ApiError::internal(format!("failed to parse service IP {ip:?}")))?;
            allocate_static(store, parsed, &ns, &name, dry_run).map_err(|e| {
                ApiError::invalid(
                    "",
                    "Service",
                    &name,
                    &[FieldError::invalid(
                        "spec.clusterIPs",
                        cluster_ips_value.clone(),
                        format!("failed to allocate IP {ip}: {e}"),
                    )],
                )
            })?;
            if !dry_run {
                done.ips.push(netaddr::ip_string(parsed));
            }
            ip.clone()
        }
        None => match allocate_next(store, rng, &ns, &name, dry_run) {
            Ok(ip) => {
                if !dry_run {
                    done.ips.push(ip.clone());
                }
                ip
            }
            Err(AllocError::Full) => {
                return Err(ApiError::internal(format!(
                    "failed to allocate a serviceIP for Service {name:?}: range is full"
                )));
            }
            Err(e) => {
                return Err(ApiError::invalid(
                    "",
                    "Service",
                    &name,
                    &[FieldError::invalid(
                        "spec.clusterIPs",
                        // An empty list the allocator appended a marker to.
                        json!([""]),
                        format!("failed to allocate IP: {e}"),
                    )],
                ));
            }
        },
    };
    let spec = svc
        .as_object_mut()
        .and_then(|m| m.get_mut("spec"))
        .and_then(Value::as_object_mut);
    if let Some(spec) = spec {
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
        if spec
            .get("ipFamilies")
            .is_none_or(crate::internal_diff::is_go_empty)
        {
            spec.insert("ipFamilies".into(), json!(["IPv4"]));
        }
        if spec.get("ipFamilyPolicy").is_none_or(Value::is_null) {
            spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
        }
    }
    Ok(done)
}

/// `servicecidr.ContainsIP`: whether some ServiceCIDR (ready or not, being
/// deleted or not) contains `ip` (`PrefixContainsIP`: not its network
/// address, nor, for IPv4, its broadcast address).
pub fn in_some_service_cidr(store: &Store, ip: GoIp) -> bool {
    if ip.to4().is_some() {
        return ranges(store).iter().any(|r| r.contains_ip(ip));
    }
    let (cidrs, _) = store.snapshot(servicecidrs_rid(), None);
    cidrs.iter().flat_map(|sc| cidrs_of(&sc.value)).any(|text| {
        netaddr::parse_cidr_sloppy(&text).is_some_and(|c| {
            let net = u128::from_be_bytes(c.ip.0) & netaddr::mask128(c.bits);
            !c.is_ipv4() && c.contains(ip) && u128::from_be_bytes(ip.0) != net
        })
    })
}

/// `MetaAllocator.Release` of each IP: the IPAddress named by the IP is
/// deleted, whoever it names as parent, when some ServiceCIDR (ready or not)
/// contains it; errors are ignored, as upstream's release does.
pub fn release_ips(store: &Store, ips: &[String]) {
    if ips.is_empty() {
        return;
    }
    let ranges = ranges(store);
    for ip in ips {
        let Some(parsed) = netaddr::parse_ip_sloppy(ip) else {
            continue;
        };
        if !ranges.iter().any(|r| r.contains_ip(parsed)) {
            tracing::debug!(%ip, "no ServiceCIDR contains the released IP; its IPAddress stays");
            continue;
        }
        let name = netaddr::ip_string(parsed);
        if let Err(e) = store.delete(
            ipaddresses_rid(),
            "",
            &name,
            &crate::store::DeleteOptions {
                user: Some(Arc::new(crate::repairip::apiserver_user())),
                ..Default::default()
            },
        ) && e.code != 404
        {
            tracing::info!(%ip, error = %e, "error releasing ip");
        }
    }
}

// ------------------------------------------------- default ServiceCIDR

/// The default ServiceCIDR's `Ready` condition, as the controller applies it.
fn ready_status_apply(now: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": DEFAULT_SERVICE_CIDR},
        "status": {"conditions": [{
            "type": "Ready",
            "status": "True",
            "lastTransitionTime": now,
            "message": "Kubernetes default Service CIDR is ready",
        }]},
    })
}

/// One pass of the default ServiceCIDR controller (`sync`): creates the
/// `kubernetes` ServiceCIDR from the service range when it is missing, and
/// sets `Ready=True` when it has no Ready condition (or Unknown) and its
/// CIDRs are the configured ones. A ServiceCIDR being deleted is left to
/// kube-controller-manager.
pub fn sync_default_service_cidr(store: &Store, cidr: &str) -> Result<(), ApiError> {
    let rid = servicecidrs_rid();
    let current = match store.get(rid, "", DEFAULT_SERVICE_CIDR) {
        Ok(s) => s,
        Err(e) if e.code == 404 => {
            let obj = json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "ServiceCIDR",
                "metadata": {"name": DEFAULT_SERVICE_CIDR},
                "spec": {"cidrs": [cidr]},
            });
            match store.create(rid, "", obj, &apiserver_write(APISERVER_MANAGER)) {
                Ok(s) => s,
                Err(e) if e.code == 409 => store.get(rid, "", DEFAULT_SERVICE_CIDR)?,
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    let v = &current.value;
    if v.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    if cidrs_of(v) != [cidr.to_string()] {
        return Ok(());
    }
    let ready = v
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str))
        .map(str::to_string);
    if matches!(ready.as_deref(), None | Some("Unknown")) {
        let body = ready_status_apply(&crate::object::now_string());
        let opts = WriteOptions {
            force: true,
            ..apiserver_write(DEFAULT_CIDR_CONTROLLER)
        };
        store.patch(
            rid,
            "",
            DEFAULT_SERVICE_CIDR,
            Some("status"),
            crate::patch::PatchKind::Apply,
            body.to_string().as_bytes(),
            &opts,
        )?;
    }
    Ok(())
}

/// The ParentRef column of `kubectl get ipaddresses`: `services/ns/name`.
pub fn parent_ref_column(obj: &Value) -> String {
    let Some(p) = obj.pointer("/spec/parentRef").filter(|v| v.is_object()) else {
        return "<none>".to_string();
    };
    let get = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
    let (group, resource) = (get("group"), get("resource"));
    let mut s = if group.is_empty() {
        resource.to_lowercase()
    } else {
        format!("{resource}.{group}").to_lowercase()
    };
    if !get("namespace").is_empty() {
        s.push('/');
        s.push_str(get("namespace"));
    }
    s.push('/');
    s.push_str(get("name"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Range {
        Range {
            cidr: netaddr::parse_cidr_sloppy(text).expect("cidr"),
            text: text.to_string(),
            ready: true,
        }
    }

    #[test]
    fn range_bounds_size_and_static_offset_are_upstreams() {
        let r = range("10.96.0.0/12");
        let (first, last) = r.bounds();
        assert_eq!(netaddr::ip_string(v4_ip(first)), "10.96.0.1");
        assert_eq!(netaddr::ip_string(v4_ip(last)), "10.111.255.254");
        assert_eq!(r.size(), (1 << 20) - 2);
        assert_eq!(r.range_offset(), 256);
        assert_eq!(range("10.0.0.0/24").range_offset(), 16);
        assert_eq!(range("10.0.0.0/28").range_offset(), 0);
        assert_eq!(range("10.0.0.0/28").size(), 14);
        assert_eq!(range("10.0.0.0/31").size(), 0);
        let e = check_in_range(&r, netaddr::parse_ip_sloppy("10.96.0.0").expect("ip"));
        assert_eq!(
            e.map_err(|e| e.to_string()),
            Err("the provided IP (10.96.0.0) is not in the valid range. The range of valid IPs is 10.96.0.0/12".to_string())
        );
    }

    #[test]
    fn service_cidr_spec_validation_messages() {
        let e = validate_service_cidr_spec(&[]);
        assert_eq!(
            e[0].to_string(),
            "spec.cidrs: Required value: at least one CIDR required"
        );
        let e = validate_service_cidr_spec(&["10.0.0.0/24".into(), "10.1.0.0/24".into()]);
        assert_eq!(
            e[0].to_string(),
            "spec.cidrs: Invalid value: [\"10.0.0.0/24\",\"10.1.0.0/24\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"
        );
        assert!(validate_service_cidr_spec(&["10.0.0.0/24".into(), "fd00::/64".into()]).is_empty());
    }

    #[test]
    fn parent_ref_column_is_lowercased_group_resource_namespace_name() {
        let o = json!({"spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "web"}}});
        assert_eq!(parent_ref_column(&o), "services/default/web");
        let o = json!({"spec": {"parentRef": {"group": "Gateway.Example.com", "resource": "gateways", "name": "g"}}});
        assert_eq!(parent_ref_column(&o), "gateways.gateway.example.com/g");
        assert_eq!(parent_ref_column(&json!({"spec": {}})), "<none>");
    }
}

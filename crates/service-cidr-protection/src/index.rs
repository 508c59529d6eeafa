//! What the controller knows of a ServiceCIDR's "users", fed by two
//! watches: every ServiceCIDR (a range that contains another's CIDRs frees
//! it) and the IPAddresses the allocator manages (an address whose only
//! range is the ServiceCIDR holds it). The re-checks are upstream's event
//! handlers: a ServiceCIDR re-checks the ServiceCIDRs overlapping it
//! (`addServiceCIDR`; also when it changes or goes, which upstream leaves to
//! its own key), an IPAddress the ServiceCIDRs containing it
//! (`addIPAddress`, `deleteIPAddress`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::ResourceExt;
use protection_core::runtime::inuse::Feed;

use crate::cidr::{self, Cidrs, LABEL_IP_FAMILY, LABEL_MANAGED_BY, ManagedIp};

/// `spec.cidrs` of a ServiceCIDR.
pub fn cidrs_of(s: &ServiceCIDR) -> Vec<String> {
    s.spec
        .as_ref()
        .and_then(|s| s.cidrs.clone())
        .unwrap_or_default()
}

/// An IPAddress as the index keeps it, if the allocator manages it.
pub fn managed(ip: &IPAddress) -> Option<ManagedIp> {
    let labels = ip.labels();
    (labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(cidr::ALLOCATOR)).then(|| ManagedIp {
        name: ip.name_any(),
        family: labels.get(LABEL_IP_FAMILY).cloned().unwrap_or_default(),
    })
}

/// The ServiceCIDRs and the allocator's IPAddresses.
#[derive(Debug, Default)]
pub struct Ranges {
    cidrs: BTreeMap<String, Vec<String>>,
    ips: BTreeSet<ManagedIp>,
    /// A re-list in progress: what it has seen.
    listing_cidrs: Option<BTreeMap<String, Vec<String>>>,
    listing_ips: Option<BTreeSet<ManagedIp>>,
}

impl Ranges {
    /// Every ServiceCIDR but `except`, as (name, CIDRs).
    pub fn others<'a>(&'a self, except: &str) -> Vec<Cidrs<'a>> {
        self.cidrs
            .iter()
            .filter(|(n, _)| n.as_str() != except)
            .map(|(n, c)| (n.as_str(), c.as_slice()))
            .collect()
    }

    /// The allocator's IPAddresses.
    pub fn ips(&self) -> &BTreeSet<ManagedIp> {
        &self.ips
    }

    fn all(&self) -> Vec<Cidrs<'_>> {
        self.others("")
    }

    fn overlapping(&self, cidrs: &[String]) -> BTreeSet<String> {
        cidr::overlapping_names(&self.all(), cidrs)
            .into_iter()
            .collect()
    }

    fn containing(&self, ip: &ManagedIp) -> BTreeSet<String> {
        cidr::containing_names(&self.all(), &ip.name, Some(cidr::ALLOCATOR))
            .into_iter()
            .collect()
    }

    /// Everything, re-checked after a re-list.
    fn every_cidr(&self) -> BTreeSet<String> {
        self.cidrs.keys().cloned().collect()
    }
}

impl Feed<ServiceCIDR> for Ranges {
    fn apply(&mut self, s: &ServiceCIDR) -> BTreeSet<String> {
        let name = s.name_any();
        let new = cidrs_of(s);
        let mut out = self.overlapping(&new);
        if let Some(old) = self.cidrs.insert(name.clone(), new) {
            out.extend(self.overlapping(&old));
        }
        out.insert(name);
        out
    }
    fn delete(&mut self, s: &ServiceCIDR) -> BTreeSet<String> {
        let Some(old) = self.cidrs.remove(&s.name_any()) else {
            return BTreeSet::new();
        };
        self.overlapping(&old)
    }
    fn begin_reset(&mut self) {
        self.listing_cidrs = Some(BTreeMap::new());
    }
    fn reset_apply(&mut self, s: &ServiceCIDR) -> BTreeSet<String> {
        self.listing_cidrs
            .get_or_insert_default()
            .insert(s.name_any(), cidrs_of(s));
        BTreeSet::new()
    }
    fn finish_reset(&mut self) -> BTreeSet<String> {
        let mut out = self.every_cidr();
        self.cidrs = self.listing_cidrs.take().unwrap_or_default();
        out.extend(self.every_cidr());
        out
    }
    fn len(&self) -> usize {
        self.cidrs.len() + self.ips.len()
    }
}

impl Feed<IPAddress> for Ranges {
    fn apply(&mut self, ip: &IPAddress) -> BTreeSet<String> {
        // An address that stops being the allocator's counts no more.
        let name = ip.name_any();
        let old: Vec<ManagedIp> = self
            .ips
            .iter()
            .filter(|i| i.name == name)
            .cloned()
            .collect();
        let mut out = BTreeSet::new();
        for o in old {
            self.ips.remove(&o);
            out.extend(self.containing(&o));
        }
        if let Some(m) = managed(ip) {
            out.extend(self.containing(&m));
            self.ips.insert(m);
        }
        out
    }
    fn delete(&mut self, ip: &IPAddress) -> BTreeSet<String> {
        let name = ip.name_any();
        let old: Vec<ManagedIp> = self
            .ips
            .iter()
            .filter(|i| i.name == name)
            .cloned()
            .collect();
        let mut out = BTreeSet::new();
        for o in old {
            self.ips.remove(&o);
            out.extend(self.containing(&o));
        }
        out
    }
    fn begin_reset(&mut self) {
        self.listing_ips = Some(BTreeSet::new());
    }
    fn reset_apply(&mut self, ip: &IPAddress) -> BTreeSet<String> {
        if let Some(m) = managed(ip) {
            self.listing_ips.get_or_insert_default().insert(m);
        }
        BTreeSet::new()
    }
    fn finish_reset(&mut self) -> BTreeSet<String> {
        self.ips = self.listing_ips.take().unwrap_or_default();
        self.every_cidr()
    }
    fn len(&self) -> usize {
        self.cidrs.len() + self.ips.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn service_cidr(name: &str, cidrs: &[&str]) -> ServiceCIDR {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"cidrs": cidrs}}))
            .expect("servicecidr")
    }

    pub(crate) fn ip_address(name: &str, manager: Option<&str>) -> IPAddress {
        let family = if name.contains(':') { "IPv6" } else { "IPv4" };
        let mut labels = json!({LABEL_IP_FAMILY: family});
        if let Some(m) = manager {
            labels[LABEL_MANAGED_BY] = json!(m);
        }
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
            "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "s"}}}))
        .expect("ipaddress")
    }

    fn names(s: BTreeSet<String>) -> Vec<String> {
        s.into_iter().collect()
    }

    #[test]
    fn a_servicecidr_rechecks_itself_and_what_overlaps_it_before_and_after() {
        let mut r = Ranges::default();
        assert_eq!(names(r.apply(&service_cidr("a", &["10.0.0.0/16"]))), ["a"]);
        assert_eq!(
            names(r.apply(&service_cidr("b", &["10.0.1.0/24"]))),
            ["a", "b"]
        );
        assert_eq!(
            names(r.apply(&service_cidr("c", &["192.168.0.0/24"]))),
            ["c"]
        );
        // Dual stack added: what overlapped before and after.
        assert_eq!(
            names(r.apply(&service_cidr("b", &["10.0.1.0/24", "2001:db8::/64"]))),
            ["a", "b"]
        );
        // Gone: what overlapped it (now without a parent, maybe).
        assert_eq!(names(r.delete(&service_cidr("a", &[]))), ["b"]);
        assert_eq!(r.others("b").len(), 1);
    }

    #[test]
    fn only_the_allocators_addresses_count_and_recheck_their_ranges() {
        let mut r = Ranges::default();
        r.apply(&service_cidr("a", &["10.0.0.0/16"]));
        r.apply(&service_cidr("b", &["10.0.1.0/24"]));
        let ip = |n, m| ip_address(n, m);
        assert_eq!(
            names(r.apply(&ip("10.0.1.5", Some(cidr::ALLOCATOR)))),
            ["a", "b"]
        );
        assert!(r.apply(&ip("10.0.2.5", Some("someone-else"))).is_empty());
        assert_eq!(r.ips().len(), 1);
        // Relabelled away from the allocator: it no longer counts.
        assert_eq!(names(r.apply(&ip("10.0.1.5", None))), ["a", "b"]);
        assert!(r.ips().is_empty());
        r.apply(&ip("10.0.1.6", Some(cidr::ALLOCATOR)));
        assert_eq!(
            names(Feed::<IPAddress>::delete(&mut r, &ip("10.0.1.6", None))),
            ["a", "b"]
        );
    }

    #[test]
    fn a_relist_replaces_one_kind_and_rechecks_every_range() {
        let mut r = Ranges::default();
        r.apply(&service_cidr("a", &["10.0.0.0/16"]));
        r.apply(&ip_address("10.0.0.9", Some(cidr::ALLOCATOR)));
        Feed::<ServiceCIDR>::begin_reset(&mut r);
        r.reset_apply(&service_cidr("b", &["10.1.0.0/16"]));
        assert_eq!(names(Feed::<ServiceCIDR>::finish_reset(&mut r)), ["a", "b"]);
        assert_eq!(r.others("").len(), 1);
        assert_eq!(
            r.ips().len(),
            1,
            "a ServiceCIDR re-list keeps the addresses"
        );
        Feed::<IPAddress>::begin_reset(&mut r);
        assert_eq!(names(Feed::<IPAddress>::finish_reset(&mut r)), ["b"]);
        assert!(r.ips().is_empty());
    }
}

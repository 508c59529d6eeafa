//! The address arithmetic of upstream's service-cidr-controller, pure:
//! `pkg/api/servicecidr` (`OverlapsPrefix`, `ContainsPrefix`,
//! `ContainsAddress`, `PrefixContainsIP`) as `pkg/controller/servicecidrs`
//! uses it (`overlappingServiceCIDRs`, `containingServiceCIDRs`,
//! `canDeleteCIDR`), over the ServiceCIDRs as (name, CIDRs) pairs.
//!
//! Go's `net/netip` semantics: a prefix may have host bits set (they are
//! masked for comparisons), prefixes of different families never overlap,
//! an unparsable CIDR is skipped.

use std::net::IpAddr;

/// `networkingv1.LabelManagedBy`.
pub const LABEL_MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
/// `networkingv1.LabelIPAddressFamily`.
pub const LABEL_IP_FAMILY: &str = "ipaddress.kubernetes.io/ip-family";
/// `ipallocator.ControllerName`: the IPAddresses the API server's
/// allocator manages (the only ones the controller looks at).
pub const ALLOCATOR: &str = "ipallocator.k8s.io";

/// A parsed CIDR (`netip.Prefix`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    bits: u8,
}

/// The address as an integer and its width in bits.
fn int(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

/// The mask of the first `bits` of a `width`-bit address.
fn mask(bits: u8, width: u8) -> u128 {
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    if bits == 0 {
        0
    } else {
        all & !((1u128 << (width - bits)) - 1)
    }
}

impl Prefix {
    /// `netip.ParsePrefix`: `addr/bits`, bits within the family's width.
    pub fn parse(s: &str) -> Option<Prefix> {
        let (addr, bits) = s.split_once('/')?;
        let addr: IpAddr = addr.parse().ok()?;
        // Go accepts decimal digits only, without a sign or leading zeros.
        if bits.is_empty()
            || !bits.bytes().all(|b| b.is_ascii_digit())
            || (bits.len() > 1 && bits.starts_with('0'))
        {
            return None;
        }
        let bits: u8 = bits.parse().ok()?;
        (bits <= int(addr).1).then_some(Prefix { addr, bits })
    }

    pub fn bits(&self) -> u8 {
        self.bits
    }

    fn masked(&self) -> (u128, u8) {
        let (a, w) = int(self.addr);
        (a & mask(self.bits, w), w)
    }

    /// `Prefix.Overlaps`.
    pub fn overlaps(&self, o: &Prefix) -> bool {
        let ((a, w), (b, v)) = (int(self.addr), int(o.addr));
        if w != v {
            return false;
        }
        let m = mask(self.bits.min(o.bits), w);
        a & m == b & m
    }

    /// `Prefix.Contains`.
    fn contains(&self, ip: IpAddr) -> bool {
        let ((a, w), (b, v)) = (int(self.addr), int(ip));
        w == v && (a & mask(self.bits, w)) == (b & mask(self.bits, w))
    }

    /// `servicecidr.PrefixContainsIP`: contained, and not the network
    /// address nor (IPv4) the broadcast address, which no ServiceCIDR
    /// allocates.
    pub fn contains_ip(&self, ip: IpAddr) -> bool {
        let (net, w) = self.masked();
        let (b, _) = int(ip);
        if int(ip).1 == w && b == net {
            return false;
        }
        if ip.is_ipv4() && w == 32 {
            let broadcast = net | (!mask(self.bits, w) & mask(32, 32));
            if b == broadcast {
                return false;
            }
        }
        self.contains(ip)
    }
}

/// `netutils.IPFamilyOfCIDRString` as a v1.IPFamily label value:
/// `IPv4`, `IPv6`, or "" for a CIDR that does not parse.
pub fn family_of_cidr(cidr: &str) -> &'static str {
    match Prefix::parse(cidr).map(|p| p.addr) {
        Some(IpAddr::V4(_)) => "IPv4",
        Some(IpAddr::V6(_)) => "IPv6",
        None => "",
    }
}

/// One ServiceCIDR as the controller sees it: its name and `spec.cidrs`.
pub type Cidrs<'a> = (&'a str, &'a [String]);

fn prefixes<'a>(cidrs: &'a [String]) -> impl Iterator<Item = Prefix> + 'a {
    cidrs.iter().filter_map(|c| Prefix::parse(c))
}

/// `servicecidr.OverlapsPrefix`: the ServiceCIDRs with a CIDR overlapping
/// `prefix` (one entry per matching CIDR, as upstream).
pub fn overlapping<'a>(all: &[Cidrs<'a>], prefix: &Prefix) -> Vec<&'a str> {
    all.iter()
        .flat_map(|(n, cs)| prefixes(cs).filter(|p| p.overlaps(prefix)).map(|_| *n))
        .collect()
}

/// `servicecidr.ContainsPrefix`: the ServiceCIDRs with a CIDR that
/// contains `prefix` (equal or larger).
pub fn containing_prefix<'a>(all: &[Cidrs<'a>], prefix: &Prefix) -> Vec<&'a str> {
    all.iter()
        .flat_map(|(n, cs)| {
            prefixes(cs)
                .filter(|p| p.overlaps(prefix) && p.bits <= prefix.bits)
                .map(|_| *n)
        })
        .collect()
}

/// `servicecidr.ContainsAddress`: the ServiceCIDRs with a CIDR that
/// contains `ip` ([`Prefix::contains_ip`]).
pub fn containing_address<'a>(all: &[Cidrs<'a>], ip: IpAddr) -> Vec<&'a str> {
    all.iter()
        .flat_map(|(n, cs)| prefixes(cs).filter(|p| p.contains_ip(ip)).map(|_| *n))
        .collect()
}

/// upstream `overlappingServiceCIDRs`: the names (sorted, once each) of the
/// ServiceCIDRs overlapping any CIDR of `cidrs`.
pub fn overlapping_names(all: &[Cidrs<'_>], cidrs: &[String]) -> Vec<String> {
    let mut out: Vec<String> = prefixes(cidrs)
        .flat_map(|p| overlapping(all, &p))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// upstream `containingServiceCIDRs`: the names (sorted, once each) of the
/// ServiceCIDRs that contain IPAddress `ip` (its name), for an address the
/// allocator manages (`managed_by`); nothing otherwise.
pub fn containing_names(all: &[Cidrs<'_>], ip: &str, managed_by: Option<&str>) -> Vec<String> {
    if managed_by != Some(ALLOCATOR) {
        return Vec::new();
    }
    let Ok(address) = ip.parse::<IpAddr>() else {
        return Vec::new();
    };
    let mut out: Vec<String> = containing_address(all, address)
        .into_iter()
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// An IPAddress the allocator manages: its name (the address) and its
/// `ipaddress.kubernetes.io/ip-family` label.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ManagedIp {
    pub name: String,
    pub family: String,
}

/// upstream `canDeleteCIDR`, answering with what holds the deletion: empty
/// when ServiceCIDR `name` (with `cidrs`) may go — every CIDR of it has
/// another ServiceCIDR that contains it, or no managed IPAddress (of a
/// family of its CIDRs) has it as its only container — else the
/// IPAddresses that would be left without a range (upstream stops at the
/// first; all are named here, for the event and `explain`).
///
/// `all` are every ServiceCIDR (with `name` itself, as the informer holds
/// it), `ips` the IPAddresses labelled managed by the allocator.
pub fn blocking_ips<'a>(
    name: &str,
    cidrs: &[String],
    all: &[Cidrs<'_>],
    ips: impl IntoIterator<Item = &'a ManagedIp>,
) -> Vec<&'a ManagedIp> {
    let has_parent = prefixes(cidrs).all(|p| {
        let parents = containing_prefix(all, &p);
        !(parents.is_empty() || parents.len() == 1 && parents[0] == name)
    });
    if has_parent {
        return Vec::new();
    }
    let families: Vec<&str> = cidrs.iter().map(|c| family_of_cidr(c)).collect();
    let mut out: Vec<&ManagedIp> = ips
        .into_iter()
        .filter(|ip| families.contains(&ip.family.as_str()))
        .filter(|ip| {
            let Ok(address) = ip.name.parse::<IpAddr>() else {
                return false;
            };
            let holders = containing_address(all, address);
            holders.len() == 1 && holders[0] == name
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
pub(crate) mod tests {
    //! upstream `servicecidrs_controller_test.go`: `TestController_canDeleteCIDR`,
    //! `TestController_ipToCidrs`, `TestController_cidrToCidrs`, row for row.
    use super::*;

    /// upstream `makeServiceCIDR`.
    fn cidr(name: &'static str, primary: &str, secondary: &str) -> (&'static str, Vec<String>) {
        let mut c = vec![primary.to_string()];
        if !secondary.is_empty() {
            c.push(secondary.to_string());
        }
        (name, c)
    }

    /// upstream `makeIPAddress`.
    pub(crate) fn ip(name: &str) -> ManagedIp {
        let family = if name.contains(':') { "IPv6" } else { "IPv4" };
        ManagedIp {
            name: name.into(),
            family: family.into(),
        }
    }

    /// (name, CIDRs) of the test's ServiceCIDRs.
    type Owned = Vec<(&'static str, Vec<String>)>;

    fn view<'a>(cs: &'a [(&'static str, Vec<String>)]) -> Vec<Cidrs<'a>> {
        cs.iter().map(|(n, c)| (*n, c.as_slice())).collect()
    }

    const DEFAULT: &str = "kubernetes";

    #[test]
    fn can_delete_cidr() {
        let d = || cidr(DEFAULT, "192.168.0.0/24", "2001:db2::/64");
        let rows: Vec<(&str, Owned, Vec<ManagedIp>, bool)> = vec![
            ("empty", vec![], vec![], true),
            ("CIDR and no IPs", vec![d()], vec![], true),
            ("CIDR with IPs", vec![d()], vec![ip("192.168.0.24")], false),
            (
                "CIDR without IPs",
                vec![d()],
                vec![ip("192.168.1.24")],
                true,
            ),
            (
                "CIDR with IPv4 address referencing the subnet address",
                vec![d()],
                vec![ip("192.168.0.0")],
                true,
            ),
            (
                "CIDR with IPv4 address referencing the broadcast address",
                vec![d()],
                vec![ip("192.168.0.255")],
                true,
            ),
            (
                "CIDR with IPv6 address referencing the broadcast address",
                vec![d()],
                vec![ip("2001:0db2::ffff:ffff:ffff:ffff")],
                false,
            ),
            (
                "CIDR with same range overlapping and IPs",
                vec![d(), cidr("overlapping", "192.168.0.0/24", "2001:db2::/64")],
                vec![ip("192.168.0.23")],
                true,
            ),
            (
                "CIDR with smaller range overlapping and IPs",
                vec![d(), cidr("overlapping", "192.168.0.0/26", "2001:db2::/64")],
                vec![ip("192.168.0.23")],
                true,
            ),
            (
                "CIDR with smaller range overlapping but IPs orphan",
                vec![d(), cidr("overlapping", "192.168.0.0/28", "2001:db2::/64")],
                vec![ip("192.168.0.23")],
                false,
            ),
            (
                "CIDR with larger range overlapping and IPs",
                vec![d(), cidr("overlapping", "192.168.0.0/16", "2001:db2::/64")],
                vec![ip("192.168.0.23")],
                true,
            ),
        ];
        let (name, synced) = d();
        for (what, cidrs, ips, want) in rows {
            let all = view(&cidrs);
            let got = blocking_ips(name, &synced, &all, &ips).is_empty();
            assert_eq!(got, want, "{what}");
        }
    }

    fn with_unrelated(
        mut cs: Vec<(&'static str, Vec<String>)>,
    ) -> Vec<(&'static str, Vec<String>)> {
        cs.push(cidr("unrelated", "10.0.0.0/24", ""));
        cs.push(cidr("unrelated2", "10.0.0.0/16", ""));
        cs
    }

    #[test]
    fn ip_to_cidrs() {
        let d = || cidr(DEFAULT, "192.168.0.0/24", "2001:db2::/64");
        let three = || {
            with_unrelated(vec![
                d(),
                cidr("overlapping", "192.168.0.0/24", "2001:db2::/64"),
                cidr("overlapping2", "192.168.0.0/26", "2001:db2::/96"),
            ])
        };
        let rows: Vec<(&str, Owned, &str, Vec<&str>)> = vec![
            ("empty", vec![], "192.168.0.23", vec![]),
            (
                "one CIDR",
                with_unrelated(vec![d()]),
                "192.168.0.23",
                vec![DEFAULT],
            ),
            (
                "two equal CIDR",
                with_unrelated(vec![
                    d(),
                    cidr("overlapping", "192.168.0.0/24", "2001:db2::/96"),
                ]),
                "192.168.0.23",
                vec![DEFAULT, "overlapping"],
            ),
            (
                "three CIDR - two same and one larger",
                three(),
                "192.168.0.23",
                vec![DEFAULT, "overlapping", "overlapping2"],
            ),
            (
                "three CIDR - IPv4 subnet address",
                three(),
                "192.168.0.0",
                vec![],
            ),
            (
                "three CIDR - IPv4 broadcast address",
                three(),
                "192.168.0.63",
                vec![DEFAULT, "overlapping"],
            ),
            (
                "three CIDR - IPv6 subnet address",
                three(),
                "2001:db2::",
                vec![],
            ),
            (
                "three CIDR - IPv6 broadcast address",
                three(),
                "2001:0db2::ffff:ffff:ffff:ffff",
                vec![DEFAULT, "overlapping"],
            ),
        ];
        for (what, cidrs, address, want) in rows {
            let all = view(&cidrs);
            assert_eq!(
                containing_names(&all, address, Some(ALLOCATOR)),
                want,
                "{what}"
            );
            // Only the allocator's addresses count.
            assert!(containing_names(&all, address, None).is_empty(), "{what}");
            assert!(
                containing_names(&all, address, Some("other")).is_empty(),
                "{what}"
            );
        }
    }

    #[test]
    fn cidr_to_cidrs() {
        let d = || cidr(DEFAULT, "192.168.0.0/24", "2001:db2::/64");
        let rows: Vec<(&str, Owned, Vec<&str>)> = vec![
            ("empty", vec![], vec![]),
            ("one CIDR", with_unrelated(vec![d()]), vec![DEFAULT]),
            (
                "two equal CIDR",
                with_unrelated(vec![
                    d(),
                    cidr("overlapping", "192.168.0.0/24", "2001:db2::/96"),
                ]),
                vec![DEFAULT, "overlapping"],
            ),
            (
                "three CIDR - two same and one larger",
                with_unrelated(vec![
                    d(),
                    cidr("overlapping", "192.168.0.0/24", "2001:db2::/64"),
                    cidr("overlapping2", "192.168.0.0/26", "2001:db2::/96"),
                ]),
                vec![DEFAULT, "overlapping", "overlapping2"],
            ),
        ];
        let (_, synced) = d();
        for (what, cidrs, want) in rows {
            let all = view(&cidrs);
            assert_eq!(overlapping_names(&all, &synced), want, "{what}");
        }
    }

    #[test]
    fn prefixes_parse_as_go_netip_does() {
        for ok in [
            "10.0.0.0/8",
            "10.0.0.1/8",
            "0.0.0.0/0",
            "::/0",
            "2001:db8::/128",
        ] {
            assert!(Prefix::parse(ok).is_some(), "{ok}");
        }
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            "010.0.0.0/8",
            "x/8",
        ] {
            assert!(Prefix::parse(bad).is_none(), "{bad}");
        }
        let (v4, v6) = (
            Prefix::parse("0.0.0.0/0").unwrap(),
            Prefix::parse("::/0").unwrap(),
        );
        assert!(!v4.overlaps(&v6), "families never overlap");
        assert!(v4.contains_ip("10.1.2.3".parse().unwrap()));
        assert!(
            !v4.contains_ip("255.255.255.255".parse().unwrap()),
            "broadcast"
        );
        assert_eq!(
            (
                family_of_cidr("10.0.0.0/8"),
                family_of_cidr("::/0"),
                family_of_cidr("x")
            ),
            ("IPv4", "IPv6", "")
        );
    }
}

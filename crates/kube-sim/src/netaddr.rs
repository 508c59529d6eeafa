//! IP addresses and CIDRs as the API server parses and prints them, so that
//! validation messages and object names come out as upstream's:
//!
//! * [`parse_ip_sloppy`] / [`parse_cidr_sloppy`]: k8s.io/utils/net
//!   `ParseIPSloppy` / `ParseCIDRSloppy` (Go 1.16's `net.ParseIP`, which
//!   accepts leading zeros in IPv4 octets);
//! * [`ip_string`] / [`cidr_string`]: Go's `net.IP.String()` and
//!   `net.IPNet.String()` (an IPv4-mapped IPv6 address prints as IPv4);
//! * [`valid_ip`], [`valid_ip_for_legacy_field`], [`valid_cidr`]:
//!   k8s.io/apimachinery/pkg/util/validation/ip.go (`IsValidIP`,
//!   `IsValidIPForLegacyField` with strict validation, as the
//!   StrictIPCIDRValidation gate is on in 1.36, and `IsValidCIDR`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address in Go's 16-byte `net.IP` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoIp(pub [u8; 16]);

const V4_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

impl GoIp {
    pub fn v4(a: [u8; 4]) -> GoIp {
        let mut b = [0u8; 16];
        b[..12].copy_from_slice(&V4_PREFIX);
        b[12..].copy_from_slice(&a);
        GoIp(b)
    }

    /// `ip.To4()`: the IPv4 form of an IPv4 (or IPv4-mapped) address.
    pub fn to4(self) -> Option<[u8; 4]> {
        (self.0[..12] == V4_PREFIX).then(|| [self.0[12], self.0[13], self.0[14], self.0[15]])
    }

    pub fn to_std(self) -> IpAddr {
        match self.to4() {
            Some(a) => IpAddr::V4(Ipv4Addr::from(a)),
            None => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }
}

/// Go's `dtoi`: decimal digits up to 0xFFFFFF; (value, digits read).
fn dtoi(s: &[u8]) -> Option<(u32, usize)> {
    let mut n: u32 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        n = n * 10 + u32::from(s[i] - b'0');
        if n >= 0xFF_FFFF {
            return None;
        }
        i += 1;
    }
    (i > 0).then_some((n, i))
}

/// Go's `xtoi`: hex digits up to 0xFFFFFF; (value, digits read).
fn xtoi(s: &[u8]) -> Option<(u32, usize)> {
    let mut n: u32 = 0;
    let mut i = 0;
    while i < s.len() {
        let d = match s[i] {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => break,
        };
        n = n * 16 + u32::from(d);
        if n >= 0xFF_FFFF {
            return None;
        }
        i += 1;
    }
    (i > 0).then_some((n, i))
}

fn parse_v4(mut s: &[u8]) -> Option<[u8; 4]> {
    let mut p = [0u8; 4];
    for (i, octet) in p.iter_mut().enumerate() {
        if s.is_empty() {
            return None;
        }
        if i > 0 {
            if s[0] != b'.' {
                return None;
            }
            s = &s[1..];
        }
        let (n, c) = dtoi(s)?;
        *octet = u8::try_from(n).ok()?;
        s = &s[c..];
    }
    s.is_empty().then_some(p)
}

fn parse_v6(mut s: &[u8]) -> Option<[u8; 16]> {
    let mut ip = [0u8; 16];
    let mut ellipsis: Option<usize> = None;
    if s.len() >= 2 && s[0] == b':' && s[1] == b':' {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Some(ip);
        }
    }
    let mut i = 0;
    while i < 16 {
        let (n, c) = xtoi(s)?;
        if n > 0xFFFF {
            return None;
        }
        if c < s.len() && s[c] == b'.' {
            if ellipsis.is_none() && i != 12 {
                return None;
            }
            if i + 4 > 16 {
                return None;
            }
            let v4 = parse_v4(s)?;
            ip[i..i + 4].copy_from_slice(&v4);
            s = &[];
            i += 4;
            break;
        }
        ip[i] = (n >> 8) as u8;
        ip[i + 1] = n as u8;
        i += 2;
        s = &s[c..];
        if s.is_empty() {
            break;
        }
        if s[0] != b':' || s.len() == 1 {
            return None;
        }
        s = &s[1..];
        if s[0] == b':' {
            if ellipsis.is_some() {
                return None;
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return None;
    }
    if i < 16 {
        let e = ellipsis?;
        let n = 16 - i;
        for j in (e..i).rev() {
            ip[j + n] = ip[j];
        }
        for b in ip.iter_mut().skip(e).take(n) {
            *b = 0;
        }
    } else if ellipsis.is_some() {
        return None;
    }
    Some(ip)
}

/// `netutils.ParseIPSloppy`.
pub fn parse_ip_sloppy(s: &str) -> Option<GoIp> {
    for &c in s.as_bytes() {
        match c {
            b'.' => return parse_v4(s.as_bytes()).map(GoIp::v4),
            b':' => return parse_v6(s.as_bytes()).map(GoIp),
            _ => {}
        }
    }
    None
}

/// A parsed CIDR: its masked address, prefix length and whether the address
/// part was IPv4 (4-byte form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoCidr {
    pub ip: GoIp,
    pub bits: u8,
    pub v4: bool,
}

impl GoCidr {
    /// The number of address bits (32 or 128).
    pub fn width(&self) -> u8 {
        if self.v4 { 32 } else { 128 }
    }

    /// `ipnet.Contains(ip)`.
    pub fn contains(&self, ip: GoIp) -> bool {
        if self.v4 {
            let Some(a) = ip.to4() else { return false };
            let (n, m) = (u32::from_be_bytes(a), u32::from_be_bytes(self.v4_net()));
            let mask = mask32(self.bits);
            n & mask == m & mask
        } else {
            // net.IPNet.Contains: an IPv4 address never matches an IPv6 network.
            if ip.to4().is_some() {
                return false;
            }
            let (n, m) = (u128::from_be_bytes(ip.0), u128::from_be_bytes(self.ip.0));
            let mask = mask128(self.bits);
            n & mask == m & mask
        }
    }

    fn v4_net(&self) -> [u8; 4] {
        self.ip.to4().unwrap_or([0; 4])
    }

    /// The IP family (`netutils.IPFamilyOfCIDR`): IPv4 when the network
    /// address has an IPv4 form.
    pub fn is_ipv4(&self) -> bool {
        self.ip.to4().is_some()
    }
}

pub fn mask32(bits: u8) -> u32 {
    if bits == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(bits.min(32)))
    }
}

pub fn mask128(bits: u8) -> u128 {
    if bits == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(bits.min(128)))
    }
}

/// `netutils.ParseCIDRSloppy`.
pub fn parse_cidr_sloppy(s: &str) -> Option<GoCidr> {
    let (addr, mask) = s.split_once('/')?;
    let (ip, v4) = match parse_v4(addr.as_bytes()) {
        Some(a) => (GoIp::v4(a), true),
        None => (GoIp(parse_v6(addr.as_bytes())?), false),
    };
    let (n, i) = dtoi(mask.as_bytes())?;
    let width = if v4 { 32 } else { 128 };
    if i != mask.len() || n > width {
        return None;
    }
    let bits = n as u8;
    let masked = if v4 {
        let a = ip.to4().unwrap_or([0; 4]);
        GoIp::v4((u32::from_be_bytes(a) & mask32(bits)).to_be_bytes())
    } else {
        GoIp((u128::from_be_bytes(ip.0) & mask128(bits)).to_be_bytes())
    };
    Some(GoCidr {
        ip: masked,
        bits,
        v4,
    })
}

/// Go's `net.IP.String()`.
pub fn ip_string(ip: GoIp) -> String {
    if let Some(a) = ip.to4() {
        return Ipv4Addr::from(a).to_string();
    }
    let p = ip.0;
    // The longest run of zero groups (the first of equal ones); "::" only
    // for two or more groups.
    let (mut e0, mut e1): (i32, i32) = (-1, -1);
    let mut i = 0usize;
    while i < 16 {
        let mut j = i;
        while j < 16 && p[j] == 0 && p[j + 1] == 0 {
            j += 2;
        }
        if j > i && (j - i) as i32 > e1 - e0 {
            e0 = i as i32;
            e1 = j as i32;
            i = j;
        }
        i += 2;
    }
    if e1 - e0 <= 2 {
        e0 = -1;
        e1 = -1;
    }
    let mut out = String::new();
    let mut i = 0i32;
    while i < 16 {
        if i == e0 {
            out.push_str("::");
            i = e1;
            if i >= 16 {
                break;
            }
        } else if i > 0 {
            out.push(':');
        }
        let g = (u16::from(p[i as usize]) << 8) | u16::from(p[i as usize + 1]);
        out.push_str(&format!("{g:x}"));
        i += 2;
    }
    out
}

/// Go's `net.IPNet.String()`.
pub fn cidr_string(c: &GoCidr) -> String {
    format!("{}/{}", ip_string(c.ip), c.bits)
}

/// `netip.ParseAddr` (without zones, which no caller here accepts).
fn parse_addr_strict(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>().ok()
}

/// `netip.ParsePrefix`: a strict address and a decimal length without
/// leading zeros.
fn parse_prefix_strict(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = s.split_once('/')?;
    let ip = parse_addr_strict(addr)?;
    if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if bits.len() > 1 && bits.starts_with('0') {
        return None;
    }
    let n: u8 = bits.parse().ok()?;
    let width = if ip.is_ipv4() { 32 } else { 128 };
    (n <= width).then_some((ip, n))
}

fn is_4in6(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

const INVALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// `parseIP(value, strict=true)`: the parsed address and the details of
/// what is wrong with it.
fn parse_ip_checked(value: &str) -> (Option<GoIp>, Vec<String>) {
    let Some(ip) = parse_ip_sloppy(value) else {
        return (None, vec![INVALID_IP.to_string()]);
    };
    let mut errs = Vec::new();
    match parse_addr_strict(value) {
        None => errs.push("must not have leading 0s".to_string()),
        Some(a) if is_4in6(&a) => errs.push("must not be an IPv4-mapped IPv6 address".to_string()),
        Some(_) => {}
    }
    (Some(ip), errs)
}

/// `IsValidIP`: the details of each error (the caller knows the field).
pub fn valid_ip(value: &str) -> Vec<String> {
    let (ip, mut errs) = parse_ip_checked(value);
    if !errs.is_empty() {
        return errs;
    }
    if let Some(ip) = ip {
        let canonical = ip_string(ip);
        if value != canonical {
            errs.push(format!("must be in canonical form ({canonical:?})"));
        }
    }
    errs
}

/// `IsValidIPForLegacyField(value, strict=true, validOldIPs)`.
pub fn valid_ip_for_legacy_field(value: &str, valid_old: &[&str]) -> Vec<String> {
    if valid_old.contains(&value) {
        return Vec::new();
    }
    parse_ip_checked(value).1
}

/// `IsValidCIDR`: the details of each error.
pub fn valid_cidr(value: &str) -> Vec<String> {
    let Some(c) = parse_cidr_sloppy(value) else {
        return vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)".to_string()];
    };
    let mut errs = Vec::new();
    match parse_prefix_strict(value) {
        None => errs.push("must not have leading 0s in IP or prefix length".to_string()),
        Some((a, _)) if is_4in6(&a) => {
            errs.push("must not have an IPv4-mapped IPv6 address".to_string())
        }
        Some((a, bits)) => {
            let masked = match a {
                IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask32(bits))),
                IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(bits))),
            };
            if masked != a {
                errs.push("must not have bits set beyond the prefix length".to_string());
            }
        }
    }
    if !errs.is_empty() {
        return errs;
    }
    let canonical = cidr_string(&c);
    if value != canonical {
        errs.push(format!("must be in canonical form ({canonical:?})"));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sloppy_parsing_accepts_what_go_accepts_and_prints_go_forms() {
        let p = |s: &str| parse_ip_sloppy(s).map(ip_string);
        assert_eq!(p("10.96.0.1").as_deref(), Some("10.96.0.1"));
        assert_eq!(p("010.096.000.001").as_deref(), Some("10.96.0.1"));
        assert_eq!(p("::ffff:1.2.3.4").as_deref(), Some("1.2.3.4"));
        assert_eq!(p("2001:DB8:0:0:0:0:0:1").as_deref(), Some("2001:db8::1"));
        assert_eq!(
            p("2001:db8:0:1:0:0:0:1").as_deref(),
            Some("2001:db8:0:1::1")
        );
        assert_eq!(
            p("2001:db8:0:1:1:1:1:1").as_deref(),
            Some("2001:db8:0:1:1:1:1:1")
        );
        assert_eq!(p("::").as_deref(), Some("::"));
        assert_eq!(p("fe80::1%eth0"), None);
        assert_eq!(p("256.1.1.1"), None);
        assert_eq!(p("1.2.3"), None);
        assert_eq!(p("abc"), None);
    }

    #[test]
    fn ip_validation_messages_are_upstreams() {
        assert!(valid_ip("10.0.0.1").is_empty());
        assert_eq!(valid_ip("10.0.0.01"), vec!["must not have leading 0s"]);
        assert_eq!(
            valid_ip("::ffff:10.0.0.1"),
            vec!["must not be an IPv4-mapped IPv6 address"]
        );
        assert_eq!(
            valid_ip("2001:DB8::1"),
            vec!["must be in canonical form (\"2001:db8::1\")"]
        );
        assert_eq!(valid_ip("x"), vec![INVALID_IP]);
        assert!(valid_ip_for_legacy_field("2001:DB8::1", &[]).is_empty());
        assert!(valid_ip_for_legacy_field("010.0.0.1", &["010.0.0.1"]).is_empty());
    }

    #[test]
    fn cidr_validation_messages_are_upstreams() {
        assert!(valid_cidr("10.96.0.0/12").is_empty());
        assert!(valid_cidr("2001:db8::/64").is_empty());
        assert_eq!(
            valid_cidr("10.96.0.1/12"),
            vec!["must not have bits set beyond the prefix length"]
        );
        assert_eq!(
            valid_cidr("10.96.0.0/012"),
            vec!["must not have leading 0s in IP or prefix length"]
        );
        assert_eq!(
            valid_cidr("2001:DB8::/64"),
            vec!["must be in canonical form (\"2001:db8::/64\")"]
        );
        assert_eq!(
            valid_cidr("10.96.0.0"),
            vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"]
        );
        let c = parse_cidr_sloppy("10.96.0.0/12").expect("valid");
        assert!(c.contains(parse_ip_sloppy("10.111.255.254").expect("ip")));
        assert!(!c.contains(parse_ip_sloppy("10.112.0.1").expect("ip")));
    }
}

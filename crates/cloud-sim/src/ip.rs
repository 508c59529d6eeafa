//! The IPv4 range cloud-sim allocates ingress addresses from.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use thiserror::Error;

/// An inclusive IPv4 address range, written as a CIDR (`203.0.113.0/24`), a
/// `start-end` pair (`203.0.113.10-203.0.113.20`) or one address.
///
/// A CIDR of prefix length 30 or shorter leaves out its network and broadcast
/// addresses, as a cloud subnet does; `/31` and `/32` use every address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    start: u32,
    end: u32,
}

/// A range that cannot be parsed.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "invalid IPv4 range {input:?}: {reason} (expected a CIDR such as 203.0.113.0/24, a range such as 203.0.113.10-203.0.113.20, or one IPv4 address)"
)]
pub struct IpRangeError {
    input: String,
    reason: String,
}

impl IpRange {
    /// 203.0.113.1-203.0.113.254: TEST-NET-3 (RFC 5737), never routed.
    pub const TEST_NET_3: IpRange = IpRange {
        start: 0xCB00_7101,
        end: 0xCB00_71FE,
    };

    /// A range from `start` to `end`, both included.
    pub fn new(start: Ipv4Addr, end: Ipv4Addr) -> Result<Self, IpRangeError> {
        let (s, e) = (u32::from(start), u32::from(end));
        if s > e {
            return Err(IpRangeError {
                input: format!("{start}-{end}"),
                reason: format!("the start {start} is after the end {end}"),
            });
        }
        Ok(Self { start: s, end: e })
    }

    /// First address of the range.
    pub fn start(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.start)
    }

    /// Last address of the range.
    pub fn end(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.end)
    }

    /// Number of addresses in the range.
    pub fn capacity(&self) -> u64 {
        u64::from(self.end - self.start) + 1
    }

    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (self.start..=self.end).contains(&u32::from(ip))
    }

    /// The lowest address of the range for which `taken` is false.
    pub fn lowest_free(&self, taken: impl Fn(Ipv4Addr) -> bool) -> Option<Ipv4Addr> {
        (self.start..=self.end)
            .map(Ipv4Addr::from)
            .find(|ip| !taken(*ip))
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start(), self.end())
    }
}

impl FromStr for IpRange {
    type Err = IpRangeError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| IpRangeError {
            input: input.to_owned(),
            reason,
        };
        let parse_ip = |s: &str| {
            s.trim()
                .parse::<Ipv4Addr>()
                .map_err(|_| err(format!("{:?} is not an IPv4 address", s.trim())))
        };
        let trimmed = input.trim();
        if let Some((addr, len)) = trimmed.split_once('/') {
            let base = u32::from(parse_ip(addr)?);
            let len: u32 = len
                .trim()
                .parse()
                .ok()
                .filter(|l| *l <= 32)
                .ok_or_else(|| err(format!("{len:?} is not a prefix length from 0 to 32")))?;
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            if base & !mask != 0 {
                return Err(err(format!(
                    "{} has host bits set for a /{len}; the network address is {}",
                    Ipv4Addr::from(base),
                    Ipv4Addr::from(base & mask)
                )));
            }
            let (first, last) = (base, base | !mask);
            let (start, end) = if len <= 30 {
                (first + 1, last - 1)
            } else {
                (first, last)
            };
            Ok(Self { start, end })
        } else if let Some((a, b)) = trimmed.split_once('-') {
            let (start, end) = (parse_ip(a)?, parse_ip(b)?);
            Self::new(start, end).map_err(|e| err(e.reason))
        } else if trimmed.is_empty() {
            Err(err("the range is empty".to_owned()))
        } else {
            let ip = parse_ip(trimmed)?;
            Self::new(ip, ip)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_leaves_out_network_and_broadcast() {
        let r: IpRange = "203.0.113.0/24".parse().unwrap();
        assert_eq!(r.start(), ip("203.0.113.1"));
        assert_eq!(r.end(), ip("203.0.113.254"));
        assert_eq!(r.capacity(), 254);
        let r: IpRange = "10.0.0.0/30".parse().unwrap();
        assert_eq!((r.start(), r.end()), (ip("10.0.0.1"), ip("10.0.0.2")));
    }

    #[test]
    fn test_net_3_constant() {
        assert_eq!(IpRange::TEST_NET_3, "203.0.113.0/24".parse().unwrap());
    }

    #[test]
    fn small_cidrs_use_every_address() {
        let r: IpRange = "10.0.0.4/31".parse().unwrap();
        assert_eq!(r.capacity(), 2);
        let r: IpRange = "10.0.0.4/32".parse().unwrap();
        assert_eq!((r.start(), r.end()), (ip("10.0.0.4"), ip("10.0.0.4")));
    }

    #[test]
    fn start_end_and_single_address() {
        let r: IpRange = " 10.1.0.10 - 10.1.0.12 ".parse().unwrap();
        assert_eq!(r.capacity(), 3);
        assert!(r.contains(ip("10.1.0.11")));
        assert!(!r.contains(ip("10.1.0.13")));
        let r: IpRange = "192.0.2.7".parse().unwrap();
        assert_eq!(r.capacity(), 1);
        assert_eq!(r.to_string(), "192.0.2.7-192.0.2.7");
    }

    #[test]
    fn bad_ranges_are_explained() {
        for (input, needle) in [
            ("10.0.0.9-10.0.0.1", "is after the end"),
            ("10.0.0.1/33", "prefix length"),
            ("10.0.0.1/24", "host bits set"),
            ("10.0.0/24", "is not an IPv4 address"),
            ("2001:db8::/64", "is not an IPv4 address"),
            ("", "empty"),
        ] {
            let e = input.parse::<IpRange>().unwrap_err().to_string();
            assert!(e.contains(needle), "{input:?}: {e}");
            assert!(e.contains(&format!("{input:?}")), "{e}");
        }
    }

    #[test]
    fn lowest_free_skips_taken_addresses() {
        let r: IpRange = "10.0.0.1-10.0.0.3".parse().unwrap();
        assert_eq!(r.lowest_free(|a| a == ip("10.0.0.1")), Some(ip("10.0.0.2")));
        assert_eq!(r.lowest_free(|_| true), None);
    }
}

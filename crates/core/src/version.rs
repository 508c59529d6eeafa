//! `major.minor` release versions, as `--emulated-version` and the feature-gate
//! specs use them (k8s.io/component-base/version keeps only major.minor for
//! emulation too).

use std::fmt;
use std::str::FromStr;

/// A `major.minor` release of this project.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32) -> Self {
        Version { major, minor }
    }

    /// The release one minor before this one, or `None` at `x.0`.
    pub fn previous(self) -> Option<Version> {
        self.minor
            .checked_sub(1)
            .map(|minor| Version::new(self.major, minor))
    }

    /// The number of minor releases between `self` and `other` (same major
    /// assumed; different majors count as "far apart").
    pub fn distance(self, other: Version) -> u32 {
        if self.major != other.major {
            return u32::MAX;
        }
        self.minor.abs_diff(other.minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Why a version string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid version {input:?}: {reason}")]
pub struct ParseVersionError {
    pub input: String,
    pub reason: &'static str,
}

impl FromStr for Version {
    type Err = ParseVersionError;

    /// Accepts `major.minor`, with an optional leading `v` (as
    /// component-base's version parser does). Patch levels are refused:
    /// emulation works on minor releases only.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseVersionError {
            input: s.to_string(),
            reason,
        };
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split('.');
        let (Some(major), Some(minor), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(err("expected major.minor, e.g. 0.2"));
        };
        let num = |p: &str| -> Result<u32, ParseVersionError> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("major and minor must be non-negative integers"));
            }
            p.parse::<u32>()
                .map_err(|_| err("major and minor must be non-negative integers"))
        };
        Ok(Version::new(num(major)?, num(minor)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_major_minor() {
        assert_eq!("0.2".parse::<Version>().unwrap(), Version::new(0, 2));
        assert_eq!("v1.31".parse::<Version>().unwrap(), Version::new(1, 31));
        assert_eq!(" 0.3 ".parse::<Version>().unwrap(), Version::new(0, 3));
    }

    #[test]
    fn rejects_other_shapes_naming_the_input() {
        for bad in ["", "1", "1.2.3", "a.b", "1.-2", "1.", ".1", "1.2x"] {
            let e = bad.parse::<Version>().unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn ordering_and_distance() {
        assert!(Version::new(0, 1) < Version::new(0, 2));
        assert!(Version::new(0, 9) < Version::new(1, 0));
        assert_eq!(Version::new(0, 0).distance(Version::new(0, 2)), 2);
        assert_eq!(Version::new(0, 3).previous(), Some(Version::new(0, 2)));
        assert_eq!(Version::new(0, 0).previous(), None);
    }
}

//! Go-style durations (`15s`, `1m30s`, `500ms`), the format Kubernetes
//! components use for flags such as `--leader-elect-lease-duration`.

use std::time::Duration;

/// A duration flag that is not Go syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (examples: 15s, 1m30s, 500ms)")]
pub struct ParseDurationError {
    pub input: String,
    pub reason: &'static str,
}

/// Go's limit: a `time.Duration` is an int64 of nanoseconds.
const MAX_NANOS: u64 = 1 << 63;

/// Parses Go's `time.ParseDuration` syntax exactly (units ns, us, µs, μs,
/// ms, s, m, h; decimal fractions, `.5s` and `5.s` included; `0` alone;
/// nanosecond-exact integer arithmetic, as Go's own code, with its
/// overflow limit of about 292 years). One deliberate difference: negative
/// durations are refused, since no flag of ours means anything by them.
///
/// Hand-written on purpose (issue 12): the crates that parse durations do
/// not parse Go's syntax exactly. `humantime` has no fractions (`1.5h`) and
/// accepts words and spaces Go refuses; `duration-str` accepts sums,
/// spaces and words; `go-parse-duration` is a port of Go's function but
/// unmaintained since 0.1.1 (2021) and its error does not carry the input.
/// Property tests below check this parser against exact arithmetic.
pub fn parse_duration(input: &str) -> Result<Duration, ParseDurationError> {
    let err = |reason| ParseDurationError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s.starts_with('-') {
        return Err(err("must not be negative"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s).as_bytes();
    if rest == b"0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(err("expected a number"));
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        // [0-9]*
        let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u64 = 0;
        for &c in &rest[..digits] {
            if v > MAX_NANOS / 10 {
                return Err(err("out of range"));
            }
            v = v * 10 + u64::from(c - b'0');
            if v > MAX_NANOS {
                return Err(err("out of range"));
            }
        }
        let pre = digits > 0;
        rest = &rest[digits..];
        // (\.[0-9]*)?
        let (mut frac, mut scale, mut post) = (0u64, 1f64, false);
        if rest.first() == Some(&b'.') {
            rest = &rest[1..];
            let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &rest[..n] {
                if overflow {
                    continue;
                }
                if frac > (MAX_NANOS - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = frac * 10 + u64::from(c - b'0');
                if y > MAX_NANOS {
                    overflow = true;
                    continue;
                }
                frac = y;
                scale *= 10.0;
            }
            post = n > 0;
            rest = &rest[n..];
        }
        if !pre && !post {
            return Err(err("expected a number"));
        }
        // The unit: everything up to the next digit or '.'.
        let unit_len = rest
            .iter()
            .take_while(|c| !(c.is_ascii_digit() || **c == b'.'))
            .count();
        let unit: u64 = match &rest[..unit_len] {
            b"" => return Err(err("missing unit")),
            b"ns" => 1,
            b"us" => 1_000,
            u if u == "µs".as_bytes() || u == "μs".as_bytes() => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return Err(err("unknown unit")),
        };
        rest = &rest[unit_len..];
        if v > MAX_NANOS / unit {
            return Err(err("out of range"));
        }
        v *= unit;
        if frac > 0 {
            // As Go: float64 is nanosecond-accurate for fractions of hours.
            v += (frac as f64 * (unit as f64 / scale)) as u64;
            if v > MAX_NANOS {
                return Err(err("out of range"));
            }
        }
        total += v;
        if total > MAX_NANOS - 1 {
            return Err(err("out of range"));
        }
    }
    Ok(Duration::from_nanos(total))
}

/// The values a duration flag accepts: what its consumer (an API field, a
/// timer, a resync) can hold and what makes sense for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationRange {
    /// `0` is accepted and means this (e.g. "off").
    pub zero: Option<&'static str>,
    /// The smallest other value, and why.
    pub min: (Duration, &'static str),
    /// The largest value, and why.
    pub max: (Duration, &'static str),
}

/// Go's own maximum: no bound beyond the syntax.
pub const GO_MAX: (Duration, &str) = (Duration::from_nanos(MAX_NANOS - 1), "");

/// A resync period: 0 turns it off; otherwise at least client-go's
/// `minimumResyncPeriod` (a 1 ns resync used 15% of a core with 40
/// objects).
pub const RESYNC_PERIOD: DurationRange = DurationRange {
    zero: Some("off"),
    min: (Duration::from_secs(1), "client-go's minimum resync period"),
    max: GO_MAX,
};

impl DurationRange {
    /// Parses `input` ([`parse_duration`]) and checks it is in range; the
    /// error says the range and why.
    pub fn parse(&self, input: &str) -> Result<Duration, String> {
        let d = parse_duration(input).map_err(|e| e.to_string())?;
        if d.is_zero() && self.zero.is_some() {
            return Ok(d);
        }
        let (min, why_min) = self.min;
        let (max, why_max) = self.max;
        if d < min || d > max {
            let zero = self
                .zero
                .map(|m| format!("0 ({m}) or "))
                .unwrap_or_default();
            let upper = if max < GO_MAX.0 {
                format!(" and at most {}", format_duration(max))
            } else {
                String::new()
            };
            let why = [why_min, why_max]
                .iter()
                .filter(|w| !w.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join("; ");
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            };
            return Err(format!(
                "{input:?} is out of range: must be {zero}at least {}{upper}{why}",
                format_duration(min)
            ));
        }
        Ok(d)
    }
}

/// Formats like Go's `Duration.String()` for whole milliseconds and above
/// (`15s`, `1m30s`, `500ms`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let total_s = d.as_secs();
    let (h, m, s) = (total_s / 3600, (total_s / 60) % 60, total_s % 60);
    let frac = ms % 1000;
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESYNC: DurationRange = RESYNC_PERIOD;

    #[test]
    fn ranges_say_what_is_accepted_and_why() {
        assert_eq!(RESYNC.parse("0"), Ok(Duration::ZERO));
        assert_eq!(RESYNC.parse("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(
            RESYNC.parse("1ns").unwrap_err(),
            "\"1ns\" is out of range: must be 0 (off) or at least 1s: client-go's minimum resync period"
        );
        let lease = DurationRange {
            zero: None,
            min: (Duration::from_secs(2), ""),
            max: (
                Duration::from_secs(2147483647),
                "spec.leaseDurationSeconds is an int32",
            ),
        };
        assert_eq!(
            lease.parse("2147483648s").unwrap_err(),
            "\"2147483648s\" is out of range: must be at least 2s and at most 596523h14m7s: spec.leaseDurationSeconds is an int32"
        );
        assert!(lease.parse("0").is_err());
        assert!(
            lease
                .parse("nope")
                .unwrap_err()
                .contains("invalid duration")
        );
    }

    proptest::proptest! {
        /// Issue 27, bug 5 (`make fuzz`): whatever the input, a range
        /// accepts only values inside it (or 0 when 0 means something).
        #[test]
        fn a_range_accepts_only_what_is_inside_it(
            s in "[0-9]{1,12}(\\.[0-9]{0,3})?(ns|us|ms|s|m|h)",
            min in 0u64..10_000,
            max in 0u64..100_000,
            zero in proptest::bool::ANY,
        ) {
            let r = DurationRange {
                zero: zero.then_some("off"),
                min: (Duration::from_millis(min), ""),
                max: (Duration::from_millis(max), ""),
            };
            if let Ok(d) = r.parse(&s) {
                proptest::prop_assert!(
                    (zero && d.is_zero())
                        || (d >= Duration::from_millis(min) && d <= Duration::from_millis(max)),
                    "{s} -> {d:?}"
                );
            }
        }
    }

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("15s", Duration::from_secs(15)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1500)),
            ("2h", Duration::from_secs(7200)),
            ("0", Duration::ZERO),
            ("100us", Duration::from_micros(100)),
            // The forms issue 12 names, as Go's time.ParseDuration reads them.
            ("1h30m15s", Duration::from_secs(5415)),
            ("1.5h", Duration::from_secs(5400)),
            ("300ms", Duration::from_millis(300)),
            ("1us", Duration::from_micros(1)),
            ("1µs", Duration::from_micros(1)),
            ("1μs", Duration::from_micros(1)),
            (".5s", Duration::from_millis(500)),
            ("5.s", Duration::from_secs(5)),
            ("+5s", Duration::from_secs(5)),
            ("0.3s", Duration::from_millis(300)),
            ("1.000000001s", Duration::from_nanos(1_000_000_001)),
            (
                "2562047h47m16.854775807s",
                Duration::from_nanos((1 << 63) - 1),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration(s).unwrap(), want, "{s}");
        }
    }

    #[test]
    fn rejects_bad_durations_naming_the_input() {
        // "-1m" is Go syntax, refused on purpose (see parse_duration).
        for bad in [
            "",
            "15",
            "s",
            "-1s",
            "-1m",
            "1x",
            "1.2.3s",
            "abc",
            ".s",
            "+",
            "1e3s",
            "2562047h47m16.854775808s",
            "9223372036854775808ns",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    use proptest::prelude::*;

    const UNITS: [(&str, u128); 9] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
        ("s", 1_000_000_000),
    ];

    proptest! {
        /// Sums of `<int>[.<frac>]<unit>` parse to the exact nanoseconds
        /// (within the 1 ns Go's own float step may lose), or are refused as
        /// out of range when they exceed Go's int64.
        #[test]
        fn go_durations_parse_exactly(
            parts in prop::collection::vec((0u64..100_000, prop::option::of("[0-9]{1,9}"), 0usize..UNITS.len()), 1..5)
        ) {
            let mut text = String::new();
            let mut exact: u128 = 0;
            for (int, frac, u) in &parts {
                let (unit, ns) = UNITS[*u];
                text.push_str(&int.to_string());
                exact += u128::from(*int) * ns;
                if let Some(f) = frac {
                    text.push('.');
                    text.push_str(f);
                    let scale = 10u128.pow(f.len() as u32);
                    exact += f.parse::<u128>().unwrap() * ns / scale;
                }
                text.push_str(unit);
            }
            match parse_duration(&text) {
                Ok(d) => {
                    let got = d.as_nanos();
                    prop_assert!(got.abs_diff(exact) <= parts.len() as u128, "{text}: {got} vs {exact}");
                }
                Err(e) => {
                    prop_assert!(exact >= (1u128 << 63) - 1_000, "{text}: {e}");
                    prop_assert_eq!(e.reason, "out of range");
                }
            }
        }

        /// Any text: parsed or refused naming the input, never a panic.
        #[test]
        fn any_text_is_parsed_or_refused(text in any::<String>()) {
            if let Err(e) = parse_duration(&text) {
                prop_assert_eq!(&e.input, &text);
            }
        }

        #[test]
        fn formatting_round_trips(ms in 0u64..(1 << 40)) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_duration(Duration::from_secs(15)), "15s");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(3700)), "1h1m40s");
    }
}

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

//! `resource.Quantity` (k8s.io/apimachinery/pkg/api/resource, v0.36.3) as
//! a built-in object's field decodes and marshals: `UnmarshalJSON`
//! (`ParseQuantity` of the trimmed text) then `MarshalJSON`, which writes
//! the text given when `ParseQuantity` judged it canonical and kept it
//! (`1Ki`, `+1k`, `1E3`), else `CanonicalizeBytes`: the suffix kind kept
//! (binary SI, decimal SI, decimal exponent), the value rounded up to a
//! nano, binary SI written as decimal SI when it is within ±1024 or not
//! whole (`1.5Gi` is `1536Mi`, `0.5Gi` `512Mi`, `2000M` `2G`, `0.5`
//! `500m`).
//!
//! Protobuf storage keeps that text (`Quantity.String()`), so what a
//! built-in object stores, lists and watches is what its write answered.

/// Why a text is not a quantity: upstream's error, whose text the decoder
/// reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityError {
    /// `ErrFormatWrong`.
    FormatWrong,
    /// `ErrNumeric`.
    Numeric,
    /// `ErrSuffix`.
    Suffix,
}

impl QuantityError {
    pub fn message(self) -> &'static str {
        match self {
            QuantityError::FormatWrong => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Numeric => "unable to parse numeric part of quantity",
            QuantityError::Suffix => "unable to parse quantity's suffix",
        }
    }
}

#[derive(PartialEq, Clone, Copy)]
enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// `parseQuantityString`: sign, the numeric text (`value`), the integer
/// digits without leading zeros (`num`, "0" when none), the fraction
/// digits (`denom`) and the suffix.
struct Scanned<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

fn scan(s: &str) -> Result<Scanned<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut out = Scanned {
        positive: true,
        value: "",
        num: "",
        denom: "",
        suffix: "",
    };
    let mut pos = 0;
    match b.first() {
        Some(b'-') => {
            out.positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        out.num = "0";
        out.value = "0";
        return Ok(out);
    }
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        out.num = &s[start..];
        out.value = s;
        return Ok(out);
    }
    out.num = if pos == start { "0" } else { &s[start..pos] };
    if b[pos] == b'.' {
        pos += 1;
        let d = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        out.denom = &s[d..pos];
        if pos >= end {
            out.value = s;
            return Ok(out);
        }
    }
    out.value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && matches!(b[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    out.suffix = &s[suffix_start..];
    Ok(out)
}

/// `quantitySuffixer.interpret`: (base 2, exponent, format).
fn interpret(suffix: &str) -> Option<(bool, i32, Format)> {
    Some(match suffix {
        "" => (false, 0, Format::DecimalSI),
        "n" => (false, -9, Format::DecimalSI),
        "u" => (false, -6, Format::DecimalSI),
        "m" => (false, -3, Format::DecimalSI),
        "k" => (false, 3, Format::DecimalSI),
        "M" => (false, 6, Format::DecimalSI),
        "G" => (false, 9, Format::DecimalSI),
        "T" => (false, 12, Format::DecimalSI),
        "P" => (false, 15, Format::DecimalSI),
        "E" => (false, 18, Format::DecimalSI),
        "Ki" => (true, 10, Format::BinarySI),
        "Mi" => (true, 20, Format::BinarySI),
        "Gi" => (true, 30, Format::BinarySI),
        "Ti" => (true, 40, Format::BinarySI),
        "Pi" => (true, 50, Format::BinarySI),
        "Ei" => (true, 60, Format::BinarySI),
        e if e.len() > 1 && e.starts_with(['e', 'E']) => {
            // strconv.ParseInt(.., 64) then int32().
            (
                false,
                e[1..].parse::<i64>().ok()? as i32,
                Format::DecimalExponent,
            )
        }
        _ => return None,
    })
}

/// A parsed quantity: `unscaled * 10^exp` in `format`, or the text itself
/// when upstream keeps it (its canonical-looking input) or when it is
/// beyond the 128-bit arithmetic here.
struct Parsed {
    unscaled: i128,
    exp: i32,
    format: Format,
    text: Option<String>,
}

impl Parsed {
    fn amount(unscaled: i128, exp: i32, format: Format) -> Parsed {
        Parsed {
            unscaled,
            exp,
            format,
            text: None,
        }
    }

    fn kept(s: &str, unscaled: i128, exp: i32, format: Format) -> Parsed {
        Parsed {
            text: Some(s.to_string()),
            ..Parsed::amount(unscaled, exp, format)
        }
    }

    /// `Quantity.RoundUp(scale)`: away from zero to `10^scale`; the kept
    /// text is dropped when that changes the scale.
    fn round_up(mut self, scale: i32) -> Parsed {
        if self.exp >= scale {
            return self;
        }
        let Some(div) = 10i128.checked_pow((scale - self.exp) as u32) else {
            // Beyond the arithmetic here, or smaller than the scale.
            if self.unscaled != 0 && self.text.is_none() {
                return Parsed::amount(self.unscaled.signum(), scale, self.format);
            }
            return self;
        };
        let q = self.unscaled / div;
        let q = if self.unscaled % div != 0 {
            q + self.unscaled.signum()
        } else {
            q
        };
        self.unscaled = q;
        self.exp = scale;
        self.text = None;
        self
    }

    fn marshal(&self) -> String {
        match &self.text {
            Some(t) => t.clone(),
            None => canonicalize(self.unscaled, self.exp, self.format),
        }
    }
}

/// `ParseQuantity` of the trimmed text.
fn parse(s: &str) -> Result<Parsed, QuantityError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    if s == "0" {
        return Ok(Parsed::kept(s, 0, 0, Format::DecimalSI));
    }
    let q = scan(s)?;
    let (base2, exponent, format) = interpret(q.suffix).ok_or(QuantityError::Suffix)?;
    // The fast path: an int64 amount, the text kept when it is canonical.
    let (precision, mantissa) = match format {
        Format::BinarySI if q.denom.is_empty() => (
            15 - q.num.len() as i32 - exponent * 3 / 10 - 1,
            1i64 << exponent,
        ),
        Format::BinarySI => (-1, 1),
        _ => (18 - (q.num.len() + q.denom.len()) as i32, 1),
    };
    if precision >= 0 {
        let scale = if base2 { 0 } else { exponent } - q.denom.len() as i32;
        if scale >= -9 {
            let shifted = format!("{}{}", q.num, q.denom);
            let value: i64 = shifted.parse().map_err(|_| QuantityError::Numeric)?;
            if let Some(result) = value.checked_mul(mantissa) {
                let keep = match format {
                    Format::BinarySI => exponent % 10 == 0 && value & 7 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                };
                let result = i128::from(if q.positive { result } else { -result });
                return Ok(if keep {
                    Parsed::kept(s, result, scale, format)
                } else {
                    Parsed::amount(result, scale, format)
                });
            }
        }
    }
    // The inf.Dec path.
    let digits = format!("{}{}", q.num, q.denom);
    let beyond = || Parsed::kept(s, 0, 0, format);
    let Ok(mut unscaled) = digits.parse::<i128>() else {
        return Ok(beyond());
    };
    // The value is unscaled * 10^exp.
    let mut exp = -(q.denom.len() as i32);
    if base2 {
        match 1i128
            .checked_shl(exponent as u32)
            .and_then(|m| unscaled.checked_mul(m))
        {
            Some(u) => unscaled = u,
            None => return Ok(beyond()),
        }
    } else {
        exp += exponent;
    }
    let mut format = format;
    // Rounded up (away from zero) to a nano.
    let mut p = Parsed::amount(unscaled, exp, format).round_up(-9);
    if format == Format::BinarySI {
        // Capped at MaxInt64; below 1 is decimal.
        let max = 10i128
            .checked_pow(p.exp.unsigned_abs())
            .map(|f| {
                if p.exp >= 0 {
                    i128::from(i64::MAX) / f
                } else {
                    i128::from(i64::MAX).saturating_mul(f)
                }
            })
            .unwrap_or(0);
        if p.unscaled > max {
            p = Parsed::amount(i128::from(i64::MAX), 0, format);
        }
        if p.unscaled != 0 && p.exp < 0 && p.unscaled < 10i128.pow((-p.exp) as u32) {
            format = Format::DecimalSI;
        }
    }
    if !q.positive {
        p.unscaled = -p.unscaled;
    }
    p.format = format;
    Ok(p)
}

/// How a quantity decoded from `s` marshals (see the module comment).
/// Values beyond the 128-bit arithmetic here are kept as given.
pub fn marshal(s: &str) -> Result<String, QuantityError> {
    parse(s).map(|p| p.marshal())
}

/// [`marshal`] of a `ResourceList` value after core/v1's defaulting
/// (`SetDefaults_ResourceList`: `RoundUp` to milli units, so `1n` is `1m`).
pub fn marshal_resource_list_value(s: &str) -> Result<String, QuantityError> {
    parse(s).map(|p| p.round_up(-3).marshal())
}

/// [`marshal`], None for what is not a quantity.
pub fn canonical(s: &str) -> Option<String> {
    marshal(s).ok()
}

/// The value of the quantity `s` in base units, as a float (for comparing
/// and checking sizes); None for what is not a quantity, by the same
/// grammar [`marshal`] decodes.
pub fn value(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let q = scan(s).ok()?;
    let (base2, exponent, _) = interpret(q.suffix)?;
    let denom = if q.denom.is_empty() { "0" } else { q.denom };
    let n: f64 = format!("{}.{denom}", q.num).parse().ok()?;
    let n = if q.positive { n } else { -n };
    Some(if base2 {
        n * 2f64.powi(exponent)
    } else {
        n * 10f64.powi(exponent)
    })
}

/// `CanonicalizeBytes` of `unscaled * 10^exp` in `format`.
fn canonicalize(unscaled: i128, exp: i32, format: Format) -> String {
    if unscaled == 0 {
        return "0".into();
    }
    let pow10 = |e: i32| 10i128.checked_pow(e as u32);
    // The whole value, if it is whole (and fits).
    let integer = if exp >= 0 {
        pow10(exp).and_then(|p| unscaled.checked_mul(p))
    } else {
        pow10(-exp).and_then(|p| (unscaled % p == 0).then(|| unscaled / p))
    };
    let mut format = format;
    if format == Format::BinarySI {
        match integer {
            Some(i) if i.abs() >= 1024 => {}
            // Within ±1024, or not whole: decimal.
            _ => format = Format::DecimalSI,
        }
    }
    let sign = if unscaled < 0 { "-" } else { "" };
    if format == Format::BinarySI {
        let mut amount = integer.unwrap_or_default().abs();
        let mut times = 0;
        while amount >= 1024 && amount % 1024 == 0 {
            amount /= 1024;
            times += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
            .get(times)
            .copied()
            .unwrap_or("");
        return format!("{sign}{amount}{suffix}");
    }
    // Decimal: trailing zeros into the exponent, then the exponent lowered
    // to a multiple of three.
    let mut amount = unscaled.abs();
    let mut exp = exp;
    while amount >= 10 && amount % 10 == 0 {
        amount /= 10;
        exp += 1;
    }
    while exp.rem_euclid(3) != 0 {
        amount *= 10;
        exp -= 1;
    }
    let suffix = match format {
        // Decimal SI has no suffix beyond E (upstream writes none).
        Format::DecimalSI => match exp {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => "",
        }
        .to_string(),
        _ if exp == 0 => String::new(),
        _ => format!("e{exp}"),
    };
    format!("{sign}{amount}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(value("1Gi"), Some(1073741824.0));
        assert_eq!(value("500M"), Some(5e8));
        assert_eq!(value("100m"), Some(0.1));
        assert_eq!(value(" 2 "), Some(2.0));
        assert_eq!(value("1.5Ki"), Some(1536.0));
        assert_eq!(value("-1e3"), Some(-1000.0));
        assert_eq!(value("+.5"), Some(0.5));
        assert_eq!(value("0"), Some(0.0));
        assert_eq!(value("1x"), None);
        assert_eq!(value("1.2.3"), None);
        assert_eq!(value(""), None);
    }

    #[test]
    fn quantities_marshal_as_upstream() {
        for (q, want) in [
            ("1Gi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1024Mi", "1Gi"),
            ("2000M", "2G"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1.5", "1500m"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("100000000m", "100k"),
            ("1e3", "1e3"),
            ("1E6", "1E6"),
            ("1000e3", "1e6"),
            ("1e2", "100"),
            ("512", "512"),
            ("1536", "1536"),
            ("2048", "2048"),
            ("2Ki", "2Ki"),
            ("8Ki", "8Ki"),
            ("1024Ki", "1Mi"),
            ("1073741824", "1073741824"),
            ("0.1Ki", "102400m"),
            ("0", "0"),
            ("0Gi", "0"),
            ("1n", "1n"),
            ("0.0000000001", "1n"),
            ("+1k", "+1k"),
            ("01k", "01k"),
            ("1.0k", "1k"),
            (" 1Gi ", "1Gi"),
            ("-1.5Gi", "-1536Mi"),
            ("16Ei", "9223372036854775807"),
            ("1000E", "1"),
        ] {
            assert_eq!(marshal(q).as_deref(), Ok(want), "{q}");
        }
        for (q, want) in [
            ("1n", "1m"),
            ("1500u", "2m"),
            ("-1500u", "-2m"),
            ("0.0000000001", "1m"),
            ("1m", "1m"),
            ("+1k", "+1k"),
            ("1.5Gi", "1536Mi"),
        ] {
            assert_eq!(marshal_resource_list_value(q).as_deref(), Ok(want), "{q}");
        }
        for (q, err) in [
            ("", QuantityError::FormatWrong),
            ("abc", QuantityError::FormatWrong),
            ("1Gb", QuantityError::FormatWrong),
            ("1.2.3", QuantityError::FormatWrong),
            ("1kk", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
        ] {
            assert_eq!(marshal(q), Err(err), "{q}");
        }
    }
}

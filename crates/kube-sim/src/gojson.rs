//! JSON as Go's encoding/json writes it. `json.Marshal` and the API
//! server's JSON serializer (`json.NewEncoder(w).Encode`, HTML escaping on)
//! escape `<`, `>` and `&` as `\u003c`, `\u003e`, `\u0026`, and U+2028 and
//! U+2029; serde_json does not. A parsed body is the same either way, but
//! the bytes are not, nor is JSON quoted inside a message (a patched
//! document that does not decode, a field error's object value).

use serde_json::Value;

/// A string as encoding/json writes it: HTML-safe (`<`, `>`, `&` as
/// `\u003c`, `\u003e`, `\u0026`), U+2028 and U+2029 escaped too.
pub fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{0}'..='\u{1f}' => {
                let b = c as u8;
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 0xf) as usize] as char);
            }
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `v` as compact JSON, strings escaped as [`write_string`] does (numbers
/// as serde_json writes them).
pub fn to_string(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

/// [`to_string`] as bytes.
pub fn to_vec(v: &Value) -> Vec<u8> {
    to_string(v).into_bytes()
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, x);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_html_escaped() {
        let mut s = String::new();
        write_string(&mut s, "a<b>&\"\\\n\u{1}\u{2028}é");
        assert_eq!(s, r#""a\u003cb\u003e\u0026\"\\\n\u0001\u2028é""#);
    }

    #[test]
    fn values_are_written_compact_and_html_safe() {
        let v = json!({"a": ["<x>", 1, 1.5, null, true], "b&": {"c": "\u{2029}"}});
        assert_eq!(
            to_string(&v),
            r#"{"a":["\u003cx\u003e",1,1.5,null,true],"b\u0026":{"c":"\u2029"}}"#
        );
        // Nothing but the escapes differs from serde_json.
        let plain = json!({"k": "é \" \\ \n \u{1}", "n": [-1, 2e300]});
        assert_eq!(to_string(&plain), plain.to_string());
    }
}

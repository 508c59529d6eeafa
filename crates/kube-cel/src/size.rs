//! The size of a CEL value, in the unit both the static estimate and the
//! run-time meter count: about one per byte of the value's compact JSON
//! encoding, and never more than that length (a string is its bytes and two
//! quotes, a number 1, `true`/`false`/`null` 4, a list or map its brackets,
//! elements, keys and separators). So an object read from a request of at
//! most N bytes has a size of at most N, and a list of size s has at most
//! s / 2 elements (each is at least 1, plus a separator).

use cel::common::types::{
    CelBytes, CelInt, CelList, CelMap, CelMapKey, CelOptional, CelString, CelStruct, CelUInt,
};
use cel::common::value::Val;

/// The size of a value that is neither a string, bytes, list, map, optional
/// nor struct: numbers, booleans, null, types, durations, timestamps.
const SCALAR: u64 = 1;
/// `true`, `false` and `null` (the shortest is 4 bytes in JSON).
const WORD: u64 = 4;

/// The size of `v`, or `cap + 1` as soon as it is known to exceed `cap` (so
/// measuring a huge value costs no more than the budget it is checked
/// against).
pub fn size_capped(v: &dyn Val, cap: u64) -> u64 {
    let mut total = 0u64;
    add(v, cap, &mut total);
    total.min(cap.saturating_add(1))
}

/// The size of `v`.
pub fn size(v: &dyn Val) -> u64 {
    size_capped(v, u64::MAX - 1)
}

fn add(v: &dyn Val, cap: u64, total: &mut u64) {
    if *total > cap {
        return;
    }
    if let Some(s) = v.downcast_ref::<CelString>() {
        *total = total.saturating_add(s.inner().len() as u64 + 2);
    } else if let Some(b) = v.downcast_ref::<CelBytes>() {
        *total = total.saturating_add(b.inner().len() as u64 + 2);
    } else if let Some(l) = v.downcast_ref::<CelList>() {
        *total = total.saturating_add(2 + (l.inner().len() as u64).saturating_sub(1));
        for e in l.inner() {
            add(e.as_ref(), cap, total);
            if *total > cap {
                return;
            }
        }
    } else if let Some(m) = v.downcast_ref::<CelMap>() {
        *total = total.saturating_add(2 + (m.inner().len() as u64).saturating_sub(1));
        for (k, e) in m.inner() {
            *total = total.saturating_add(key_size(k) + 1);
            add(e.as_ref(), cap, total);
            if *total > cap {
                return;
            }
        }
    } else if let Some(o) = v.downcast_ref::<CelOptional>() {
        *total = total.saturating_add(1);
        if let Some(inner) = o.inner() {
            add(inner, cap, total);
        }
    } else if let Some(s) = v.downcast_ref::<CelStruct>() {
        let fields = s.field_values();
        *total = total.saturating_add(2 + (fields.len() as u64).saturating_sub(1));
        for (name, e) in fields {
            *total = total.saturating_add(name.len() as u64 + 3);
            add(e.as_ref(), cap, total);
            if *total > cap {
                return;
            }
        }
    } else if v.downcast_ref::<CelInt>().is_some() || v.downcast_ref::<CelUInt>().is_some() {
        *total = total.saturating_add(SCALAR);
    } else if matches!(v.get_type().name(), "bool" | "null_type") {
        *total = total.saturating_add(WORD);
    } else {
        *total = total.saturating_add(SCALAR);
    }
}

fn key_size(k: &CelMapKey) -> u64 {
    match k {
        CelMapKey::String(s) => s.inner().len() as u64 + 2,
        _ => SCALAR,
    }
}

/// The size of a JSON value in the same unit, computed on the JSON itself
/// (what an object costs before it is converted).
pub fn json_size(v: &serde_json::Value) -> u64 {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => WORD,
        Value::Number(_) => SCALAR,
        Value::String(s) => s.len() as u64 + 2,
        Value::Array(a) => {
            2 + (a.len() as u64).saturating_sub(1) + a.iter().map(json_size).sum::<u64>()
        }
        Value::Object(m) => {
            2 + (m.len() as u64).saturating_sub(1)
                + m.iter()
                    .map(|(k, v)| k.len() as u64 + 3 + json_size(v))
                    .sum::<u64>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn val(v: &serde_json::Value) -> Box<dyn Val> {
        crate::to_cel(v).try_into().unwrap()
    }

    #[test]
    fn a_value_is_never_larger_than_its_json() {
        for v in [
            json!(null),
            json!(true),
            json!(0),
            json!(-12345),
            json!(1.5),
            json!("héllo"),
            json!([]),
            json!([1, "a", [true, null]]),
            json!({}),
            json!({"a": {"b": [1, 2, 3]}, "c": "d"}),
        ] {
            let s = size(val(&v).as_ref());
            assert!(
                s <= serde_json::to_string(&v).unwrap().len() as u64,
                "{v}: {s}"
            );
            assert_eq!(s, json_size(&v), "{v}");
        }
    }

    #[test]
    fn measuring_stops_past_the_cap() {
        let big = json!((0..1000).map(|i| format!("item-{i}")).collect::<Vec<_>>());
        let v = val(&big);
        assert_eq!(size_capped(v.as_ref(), 100), 101);
        assert!(size(v.as_ref()) > 1000);
    }
}

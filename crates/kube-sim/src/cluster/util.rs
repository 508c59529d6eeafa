//! Helpers shared by the emulated loops (pkg/controller/util, podutil).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

/// Whether `labels` match `selector` (`LabelSelectorAsSelector`; an absent
/// selector matches nothing, an empty one everything).
pub fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(sel) = selector else { return false };
    let v = serde_json::to_value(sel).unwrap_or(Value::Null);
    let sel = crate::selector::LabelSelector::from_label_selector(&v);
    let map: serde_json::Map<String, Value> = labels
        .map(|l| {
            l.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect()
        })
        .unwrap_or_default();
    sel.matches(Some(&map))
}

/// The controller ownerReference of an object.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

pub fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|r| r.uid == uid)
}

/// A controller ownerReference with blockOwnerDeletion, as controllers set.
pub fn controller_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub fn deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `controller.IsPodActive`: not terminal and not being deleted.
pub fn pod_active(pod: &Pod) -> bool {
    let p = phase(pod);
    p != "Succeeded" && p != "Failed" && !deleting(&pod.metadata)
}

/// The Ready condition's status and last transition.
pub fn ready_since(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map(|t| t.0)
                .unwrap_or_else(jiff::Timestamp::now)
        })
}

pub fn pod_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// `podutil.IsPodAvailable`: Ready for at least `min_ready` seconds. The
/// second value is how long until it will be, when it is Ready but not yet
/// available.
pub fn pod_available(pod: &Pod, min_ready: i32, now: jiff::Timestamp) -> (bool, Option<Duration>) {
    let Some(since) = ready_since(pod) else {
        return (false, None);
    };
    if min_ready <= 0 {
        return (true, None);
    }
    let until = since + jiff::SignedDuration::from_secs(min_ready as i64);
    if until <= now {
        (true, None)
    } else {
        let d = until.duration_since(now);
        (
            false,
            Some(Duration::from_millis(d.as_millis().max(0) as u64 + 10)),
        )
    }
}

pub fn now_time() -> Time {
    // metav1.Time has second precision on the wire.
    let t = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .unwrap_or_else(|_| jiff::Timestamp::now());
    Time(t)
}

/// `intstr.GetScaledValueFromIntOrPercent`.
pub fn scaled_value(v: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match v {
        None => 0,
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => {
            let Some(p) = s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<i64>().ok())
            else {
                return s.trim().parse().unwrap_or(0);
            };
            let n = p * total as i64;
            if round_up {
                ((n + 99) / 100) as i32
            } else {
                (n / 100) as i32
            }
        }
    }
}

/// 32-bit FNV-1a, as `hashutil.DeepHashObject` feeds it (here over the JSON
/// of the object).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// `rand.SafeEncodeString`: each character mapped into an alphabet without
/// vowels and look-alikes.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[(b as usize) % ALPHANUMS.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_and_safe_encoding() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled_value(Some(&pct("25%")), 3, true), 1);
        assert_eq!(scaled_value(Some(&pct("25%")), 3, false), 0);
        assert_eq!(scaled_value(Some(&IntOrString::Int(2)), 3, false), 2);
        // Decimal digits map to 4..9, b, c, d, f: hashes like "7d4b9c8f5".
        assert_eq!(safe_encode("0123"), "4567");
        assert_eq!(safe_encode("6789"), "bcdf");
    }
}

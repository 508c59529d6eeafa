//! Fault injection: error replies, latency, hangs and garbage replies, per
//! operation, drawn from a seeded random generator so that a run can be
//! repeated exactly.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;

/// The operations of the contract, each with its own faults and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// `PUT /v1/loadbalancers/{uid}` (create or update).
    Put,
    /// `GET /v1/loadbalancers/{uid}`.
    Get,
    /// `DELETE /v1/loadbalancers/{uid}`.
    Delete,
    /// `PUT /v1/loadbalancers/{uid}/hosts`.
    Hosts,
    /// `GET /v1/loadbalancers` (inventory).
    List,
}

impl Operation {
    /// Every operation, in a fixed order.
    pub const ALL: [Operation; 5] = [
        Operation::Put,
        Operation::Get,
        Operation::Delete,
        Operation::Hosts,
        Operation::List,
    ];

    /// The name used in JSON, flags and counters.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Put => "put",
            Operation::Get => "get",
            Operation::Delete => "delete",
            Operation::Hosts => "hosts",
            Operation::List => "list",
        }
    }

    fn index(self) -> u64 {
        match self {
            Operation::Put => 1,
            Operation::Get => 2,
            Operation::Delete => 3,
            Operation::Hosts => 4,
            Operation::List => 5,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Operation {
    type Err = FaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operation::ALL
            .into_iter()
            .find(|op| op.as_str() == s.trim())
            .ok_or_else(|| {
                FaultError(format!(
                    "unknown operation {s:?}; expected one of put, get, delete, hosts, list"
                ))
            })
    }
}

/// How an injected `Retry-After` header is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RetryAfterFormat {
    /// A number of seconds (`Retry-After: 7`).
    #[default]
    Seconds,
    /// An HTTP date that many seconds from now
    /// (`Retry-After: Wed, 21 Oct 2026 07:28:00 GMT`).
    HttpDate,
}

/// Reply with an error status instead of (or after) doing the operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorFault {
    /// Probability, 0.0 to 1.0, that a call gets this error.
    pub rate: f64,
    /// The status to answer: 400-599 (typically 500, 503, 429 or 409), or
    /// 202 for "deletion in progress".
    #[serde(default = "default_error_status")]
    pub status: u16,
    /// Sends a `Retry-After` header of that many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// How the `Retry-After` header is written.
    #[serde(default)]
    pub retry_after_format: RetryAfterFormat,
    /// When true, the operation is carried out (and persisted) before the
    /// error is answered: "the cloud did it but the reply was lost".
    #[serde(default)]
    pub after_commit: bool,
    /// The error message in the reply body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn default_error_status() -> u16 {
    503
}

/// Delay calls by a fixed time (`minMs` only) or a random time in a range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencyFault {
    /// Probability that a call is delayed; 1.0 when absent.
    #[serde(default = "one")]
    pub rate: f64,
    pub min_ms: u64,
    /// Upper bound of the delay; equal to `minMs` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<u64>,
}

fn one() -> f64 {
    1.0
}

/// Never answer: the call waits until the faults are changed or cleared, the
/// simulator shuts down, or `maxMs` passes (then it answers 504).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HangFault {
    /// Probability that a call hangs.
    pub rate: f64,
    /// Give up hanging after this long and answer 504.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<u64>,
    /// When true, the operation is carried out (and persisted) before the
    /// call starts to hang.
    #[serde(default)]
    pub after_commit: bool,
}

/// Answer a body that breaks the contract (for client robustness tests).
/// The operation is not carried out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GarbageFault {
    pub rate: f64,
    /// Status of the reply, 200 when absent.
    #[serde(default = "default_garbage_status")]
    pub status: u16,
    /// The raw body.
    pub body: String,
    /// `Content-Type` of the reply; `application/json` when absent.
    #[serde(default = "default_content_type")]
    pub content_type: String,
}

fn default_garbage_status() -> u16 {
    200
}

fn default_content_type() -> String {
    "application/json".to_owned()
}

/// All the faults of one operation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpFaults {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorFault>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyFault>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<HangFault>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub garbage: Option<GarbageFault>,
}

impl OpFaults {
    fn is_empty(&self) -> bool {
        self.error.is_none()
            && self.latency.is_none()
            && self.hang.is_none()
            && self.garbage.is_none()
    }
}

/// The whole fault configuration, as `GET/PUT /_sim/faults` exchange it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultSet {
    /// Seed of the random draws; the same seed, configuration and sequence of
    /// calls per operation give the same faults.
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub operations: BTreeMap<Operation, OpFaults>,
}

impl FaultSet {
    /// The same faults for each of `ops`.
    pub fn for_operations(seed: u64, ops: &[Operation], faults: OpFaults) -> Self {
        Self {
            seed,
            operations: ops.iter().map(|op| (*op, faults.clone())).collect(),
        }
    }

    /// Checks rates, statuses and ranges.
    pub fn validate(&self) -> Result<(), FaultError> {
        for (op, f) in &self.operations {
            let rate = |what: &str, r: f64| {
                if (0.0..=1.0).contains(&r) {
                    Ok(())
                } else {
                    Err(FaultError(format!(
                        "{op}.{what}.rate is {r}; a rate is a probability from 0.0 to 1.0"
                    )))
                }
            };
            if let Some(e) = &f.error {
                rate("error", e.rate)?;
                if !(e.status == 202 || (400..=599).contains(&e.status)) {
                    return Err(FaultError(format!(
                        "{op}.error.status is {}; an injected error status is 202 or 400-599",
                        e.status
                    )));
                }
            }
            if let Some(l) = &f.latency {
                rate("latency", l.rate)?;
                if l.max_ms.is_some_and(|max| max < l.min_ms) {
                    return Err(FaultError(format!(
                        "{op}.latency.maxMs is below minMs ({:?} < {})",
                        l.max_ms, l.min_ms
                    )));
                }
            }
            if let Some(h) = &f.hang {
                rate("hang", h.rate)?;
            }
            if let Some(g) = &f.garbage {
                rate("garbage", g.rate)?;
                if !(200..=599).contains(&g.status) {
                    return Err(FaultError(format!(
                        "{op}.garbage.status is {}; it must be 200-599",
                        g.status
                    )));
                }
            }
        }
        Ok(())
    }
}

/// An invalid fault configuration.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid fault configuration: {0}")]
pub struct FaultError(pub String);

/// What the faults decided for one call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decision {
    pub latency: Option<Duration>,
    pub hang: Option<HangFault>,
    pub error: Option<ErrorFault>,
    pub garbage: Option<GarbageFault>,
}

struct Inner {
    set: FaultSet,
    rngs: BTreeMap<Operation, StdRng>,
}

/// The live fault configuration of a running simulator. Every change reseeds
/// the random draws and releases the calls that hang.
pub struct Faults {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("set", &self.inner.lock().set)
            .finish()
    }
}

fn seeded(seed: u64) -> BTreeMap<Operation, StdRng> {
    Operation::ALL
        .into_iter()
        .map(|op| {
            // One generator per operation, so that the faults a sequence of
            // PUTs sees do not depend on how GETs interleave with it.
            let s = seed ^ op.index().wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (op, StdRng::seed_from_u64(s))
        })
        .collect()
}

impl Faults {
    pub(crate) fn new(set: FaultSet) -> Result<Self, FaultError> {
        set.validate()?;
        let rngs = seeded(set.seed);
        Ok(Self {
            inner: Mutex::new(Inner { set, rngs }),
            changed: watch::channel(0).0,
        })
    }

    /// The current configuration.
    pub fn get(&self) -> FaultSet {
        self.inner.lock().set.clone()
    }

    /// Replaces the whole configuration.
    pub fn set(&self, mut set: FaultSet) -> Result<(), FaultError> {
        set.validate()?;
        set.operations.retain(|_, f| !f.is_empty());
        {
            let mut inner = self.inner.lock();
            inner.rngs = seeded(set.seed);
            inner.set = set;
        }
        self.changed.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Replaces the faults of one operation, keeping the others and the seed.
    pub fn set_operation(&self, op: Operation, faults: OpFaults) -> Result<(), FaultError> {
        let mut set = self.get();
        set.operations.insert(op, faults);
        self.set(set)
    }

    /// Removes every fault (the seed is kept) and releases hanging calls.
    pub fn clear(&self) {
        let seed = self.inner.lock().set.seed;
        // An empty set is always valid.
        let _ = self.set(FaultSet {
            seed,
            operations: BTreeMap::new(),
        });
    }

    /// A receiver that changes whenever the configuration does.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Draws the faults of one call. The draws happen in a fixed order
    /// (latency, hang, error, garbage), one or two per configured fault.
    pub(crate) fn decide(&self, op: Operation) -> Decision {
        let mut guard = self.inner.lock();
        let Inner { set, rngs } = &mut *guard;
        let Some(faults) = set.operations.get(&op) else {
            return Decision::default();
        };
        let Some(rng) = rngs.get_mut(&op) else {
            return Decision::default();
        };
        let mut hit = |rate: f64| rng.random::<f64>() < rate;
        let mut d = Decision::default();
        if let Some(l) = &faults.latency
            && hit(l.rate)
        {
            let max = l.max_ms.unwrap_or(l.min_ms);
            let ms = if max > l.min_ms {
                rng.random_range(l.min_ms..=max)
            } else {
                l.min_ms
            };
            d.latency = Some(Duration::from_millis(ms));
        }
        let mut hit = |rate: f64| rng.random::<f64>() < rate;
        if let Some(h) = &faults.hang
            && hit(h.rate)
        {
            d.hang = Some(h.clone());
        }
        if let Some(e) = &faults.error
            && hit(e.rate)
        {
            d.error = Some(e.clone());
        }
        if let Some(g) = &faults.garbage
            && hit(g.rate)
        {
            d.garbage = Some(g.clone());
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_set(seed: u64, rate: f64) -> FaultSet {
        FaultSet::for_operations(
            seed,
            &[Operation::Put],
            OpFaults {
                error: Some(ErrorFault {
                    rate,
                    status: 503,
                    retry_after_seconds: None,
                    retry_after_format: RetryAfterFormat::Seconds,
                    after_commit: false,
                    message: None,
                }),
                ..OpFaults::default()
            },
        )
    }

    fn pattern(f: &Faults, op: Operation, n: usize) -> Vec<bool> {
        (0..n).map(|_| f.decide(op).error.is_some()).collect()
    }

    #[test]
    fn same_seed_same_pattern_and_reset_on_set() {
        let a = Faults::new(error_set(42, 0.5)).unwrap();
        let b = Faults::new(error_set(42, 0.5)).unwrap();
        let pa = pattern(&a, Operation::Put, 200);
        assert_eq!(pa, pattern(&b, Operation::Put, 200));
        let hits = pa.iter().filter(|h| **h).count();
        assert!((50..150).contains(&hits), "{hits} of 200 at rate 0.5");
        // Setting the configuration again restarts the sequence.
        a.set(error_set(42, 0.5)).unwrap();
        assert_eq!(pa, pattern(&a, Operation::Put, 200));
        // Another seed gives another sequence.
        a.set(error_set(43, 0.5)).unwrap();
        assert_ne!(pa, pattern(&a, Operation::Put, 200));
    }

    #[test]
    fn other_operations_do_not_shift_the_sequence() {
        let a = Faults::new(error_set(7, 0.5)).unwrap();
        let b = Faults::new(error_set(7, 0.5)).unwrap();
        let mut pb = Vec::new();
        for _ in 0..100 {
            b.decide(Operation::Get);
            pb.push(b.decide(Operation::Put).error.is_some());
        }
        assert_eq!(pattern(&a, Operation::Put, 100), pb);
        assert!(pattern(&a, Operation::Get, 100).iter().all(|h| !h));
    }

    #[test]
    fn rates_zero_and_one_are_exact() {
        let f = Faults::new(error_set(1, 1.0)).unwrap();
        assert!(pattern(&f, Operation::Put, 100).iter().all(|h| *h));
        f.set(error_set(1, 0.0)).unwrap();
        assert!(pattern(&f, Operation::Put, 100).iter().all(|h| !h));
    }

    #[test]
    fn latency_stays_in_range() {
        let f = Faults::new(FaultSet::for_operations(
            3,
            &[Operation::Get],
            OpFaults {
                latency: Some(LatencyFault {
                    rate: 1.0,
                    min_ms: 10,
                    max_ms: Some(20),
                }),
                ..OpFaults::default()
            },
        ))
        .unwrap();
        for _ in 0..100 {
            let l = f.decide(Operation::Get).latency.unwrap();
            assert!((10..=20).contains(&l.as_millis()), "{l:?}");
        }
    }

    #[test]
    fn invalid_configurations_are_rejected_with_the_field() {
        let e = Faults::new(error_set(1, 1.5)).unwrap_err().to_string();
        assert!(e.contains("put.error.rate is 1.5"), "{e}");
        let mut s = error_set(1, 0.5);
        if let Some(f) = s.operations.get_mut(&Operation::Put) {
            f.error.as_mut().unwrap().status = 302;
        }
        let e = Faults::new(s).unwrap_err().to_string();
        assert!(e.contains("put.error.status is 302"), "{e}");
        let json = r#"{"operations": {"put": {"eror": {"rate": 1}}}}"#;
        let e = serde_json::from_str::<FaultSet>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains("eror"), "{e}");
        let json = r#"{"operations": {"patch": {}}}"#;
        assert!(serde_json::from_str::<FaultSet>(json).is_err());
    }

    #[test]
    fn operations_parse_by_name() {
        assert_eq!("hosts".parse::<Operation>().unwrap(), Operation::Hosts);
        let e = "post".parse::<Operation>().unwrap_err().to_string();
        assert!(e.contains("\"post\""), "{e}");
    }
}

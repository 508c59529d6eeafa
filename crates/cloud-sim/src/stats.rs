//! Counters of calls by operation and outcome (`GET /_sim/stats`).

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::faults::Operation;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// PUT created a load balancer (201).
    Created,
    /// PUT or hosts changed an existing load balancer (200).
    Updated,
    /// PUT or hosts found the load balancer already as asked (200).
    Unchanged,
    /// GET or list answered (200).
    Ok,
    /// DELETE removed a load balancer (204).
    Deleted,
    /// The load balancer does not exist (404).
    NotFound,
    /// The request was invalid (400).
    BadRequest,
    /// Missing or wrong bearer token (401).
    Unauthorized,
    /// Requested IP in use or service mismatch (409).
    Conflict,
    /// No free address in the range (507).
    Exhausted,
    /// The state file could not be written (500).
    PersistFailed,
    /// Server-side configuration problem, e.g. unreadable token file (500).
    InternalError,
    /// An injected error reply.
    InjectedError,
    /// An injected garbage reply.
    InjectedGarbage,
    /// A hang that reached its `maxMs` (504).
    HangTimeout,
    /// The simulator shut down while the call hung (503).
    ShuttingDown,
    /// The client went away before the reply was sent.
    Abandoned,
}

/// Counters of one operation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationStats {
    /// Calls that reached the handler (outcomes plus calls still running).
    pub total: u64,
    /// Calls that were delayed by a latency fault.
    pub delayed: u64,
    /// Calls that hung.
    pub hung: u64,
    /// Finished calls by outcome.
    pub outcomes: BTreeMap<Outcome, u64>,
}

impl OperationStats {
    /// The number of calls that ended with `outcome`.
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.outcomes.get(&outcome).copied().unwrap_or(0)
    }
}

/// Address pool figures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressStats {
    pub range: String,
    pub capacity: u64,
    pub allocated: u64,
}

/// Everything `GET /_sim/stats` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub operations: BTreeMap<Operation, OperationStats>,
    pub load_balancers: u64,
    pub addresses: AddressStats,
    /// Successful writes of the state file.
    pub state_writes: u64,
}

impl Stats {
    /// Counters of one operation (zeros when it was never called).
    pub fn operation(&self, op: Operation) -> OperationStats {
        self.operations.get(&op).cloned().unwrap_or_default()
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    ops: Mutex<BTreeMap<Operation, OperationStats>>,
}

impl Counters {
    pub fn started(&self, op: Operation) {
        self.ops.lock().entry(op).or_default().total += 1;
    }

    pub fn delayed(&self, op: Operation) {
        self.ops.lock().entry(op).or_default().delayed += 1;
    }

    pub fn hung(&self, op: Operation) {
        self.ops.lock().entry(op).or_default().hung += 1;
    }

    pub fn finished(&self, op: Operation, outcome: Outcome) {
        *self
            .ops
            .lock()
            .entry(op)
            .or_default()
            .outcomes
            .entry(outcome)
            .or_default() += 1;
    }

    pub fn snapshot(&self) -> BTreeMap<Operation, OperationStats> {
        self.ops.lock().clone()
    }

    pub fn reset(&self) {
        self.ops.lock().clear();
    }
}

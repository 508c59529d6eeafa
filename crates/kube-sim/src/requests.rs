//! The request log and counters: every API request (not `/_sim`) with the
//! verb as the real authorizer names it. Bounded memory: the log is a ring;
//! counters never lose counts.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// One recorded API request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    pub seq: u64,
    /// RFC 3339 (nanoseconds) time the request arrived.
    pub time: String,
    pub user: String,
    pub user_agent: String,
    pub method: String,
    /// get, list, watch, create, update, patch, delete, deletecollection
    /// (resource requests); get/post/... lower-case method otherwise.
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    /// Object name from the URL (unescaped: `a%3Cb` is `a<b`); for create,
    /// the created object's name (as the audit log's objectRef has it).
    pub name: String,
    /// Request path, unescaped as Go's `URL.Path` (useful for non-resource
    /// requests).
    pub path: String,
    pub code: u16,
    pub latency_ms: f64,
}

/// A filter over the log; every set field must match.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestFilter {
    pub user: Option<String>,
    /// Matches when the user agent starts with this string.
    pub user_agent: Option<String>,
    pub verb: Option<String>,
    pub resource: Option<String>,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub code: Option<u16>,
    /// Only records with `seq > since`.
    pub since: Option<u64>,
}

impl RequestFilter {
    pub fn matches(&self, r: &RequestRecord) -> bool {
        self.user.as_ref().is_none_or(|u| *u == r.user)
            && self
                .user_agent
                .as_ref()
                .is_none_or(|u| r.user_agent.starts_with(u.as_str()))
            && self.verb.as_ref().is_none_or(|v| *v == r.verb)
            && self.resource.as_ref().is_none_or(|v| *v == r.resource)
            && self
                .subresource
                .as_ref()
                .is_none_or(|v| *v == r.subresource)
            && self.namespace.as_ref().is_none_or(|v| *v == r.namespace)
            && self.name.as_ref().is_none_or(|v| *v == r.name)
            && self.code.is_none_or(|c| c == r.code)
            && self.since.is_none_or(|s| r.seq > s)
    }

    pub fn verb(mut self, v: &str) -> Self {
        self.verb = Some(v.into());
        self
    }
    pub fn resource(mut self, v: &str) -> Self {
        self.resource = Some(v.into());
        self
    }
    pub fn user(mut self, v: &str) -> Self {
        self.user = Some(v.into());
        self
    }
    pub fn user_agent(mut self, v: &str) -> Self {
        self.user_agent = Some(v.into());
        self
    }
    pub fn name(mut self, v: &str) -> Self {
        self.name = Some(v.into());
        self
    }
    pub fn since(mut self, seq: u64) -> Self {
        self.since = Some(seq);
        self
    }
}

/// One counter: requests by (verb, resource, code, user agent).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Counter {
    pub verb: String,
    pub resource: String,
    pub code: u16,
    pub user_agent: String,
    pub count: u64,
}

struct Inner {
    log: VecDeque<RequestRecord>,
    capacity: usize,
    next_seq: u64,
    counters: BTreeMap<(String, String, u16, String), u64>,
}

/// Handle to the request log (cheap to clone).
#[derive(Clone)]
pub struct Requests(Arc<Mutex<Inner>>);

impl Requests {
    pub(crate) fn new(capacity: usize) -> Self {
        Requests(Arc::new(Mutex::new(Inner {
            log: VecDeque::new(),
            capacity: capacity.max(1),
            next_seq: 1,
            counters: BTreeMap::new(),
        })))
    }

    pub(crate) fn record(&self, mut r: RequestRecord) -> u64 {
        let mut g = self.0.lock();
        r.seq = g.next_seq;
        g.next_seq += 1;
        *g.counters
            .entry((
                r.verb.clone(),
                r.resource.clone(),
                r.code,
                r.user_agent.clone(),
            ))
            .or_insert(0) += 1;
        let seq = r.seq;
        g.log.push_back(r);
        while g.log.len() > g.capacity {
            g.log.pop_front();
        }
        seq
    }

    /// The sequence number of the last recorded request (0 if none): pass it
    /// as `since` to see only what happens afterwards.
    pub fn last_seq(&self) -> u64 {
        self.0.lock().next_seq - 1
    }

    /// Recorded requests matching `filter`, oldest first (only what the ring
    /// still holds).
    pub fn records(&self, filter: &RequestFilter) -> Vec<RequestRecord> {
        self.0
            .lock()
            .log
            .iter()
            .filter(|r| filter.matches(r))
            .cloned()
            .collect()
    }

    pub fn count(&self, filter: &RequestFilter) -> usize {
        self.0
            .lock()
            .log
            .iter()
            .filter(|r| filter.matches(r))
            .count()
    }

    /// All counters (never truncated by the ring).
    pub fn counters(&self) -> Vec<Counter> {
        self.0
            .lock()
            .counters
            .iter()
            .map(|((verb, resource, code, ua), n)| Counter {
                verb: verb.clone(),
                resource: resource.clone(),
                code: *code,
                user_agent: ua.clone(),
                count: *n,
            })
            .collect()
    }

    /// Sum of counters matching the given parts (None = any).
    pub fn counter_total(
        &self,
        verb: Option<&str>,
        resource: Option<&str>,
        code: Option<u16>,
        user_agent_prefix: Option<&str>,
    ) -> u64 {
        self.0
            .lock()
            .counters
            .iter()
            .filter(|((v, r, c, ua), _)| {
                verb.is_none_or(|x| x == v)
                    && resource.is_none_or(|x| x == r)
                    && code.is_none_or(|x| x == *c)
                    && user_agent_prefix.is_none_or(|x| ua.starts_with(x))
            })
            .map(|(_, n)| *n)
            .sum()
    }

    /// Clears the log and the counters (sequence numbers keep increasing).
    pub fn reset(&self) {
        let mut g = self.0.lock();
        g.log.clear();
        g.counters.clear();
    }
}

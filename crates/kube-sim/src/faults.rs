//! Fault injection: rules that fail, delay or cut requests, a pause switch,
//! "cut all watches now" and "410 on the next watch". Deterministic given the
//! seed and the order of matching requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// What a rule does to a matching request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum FaultAction {
    /// Answer with this HTTP code (500, 503, 429, 409, ...) and a Status body
    /// as the real server would send; 429 carries `Retry-After`.
    #[serde(rename_all = "camelCase")]
    Error {
        code: u16,
        #[serde(default)]
        retry_after_seconds: Option<u64>,
        #[serde(default)]
        message: Option<String>,
    },
    /// Delay the request before handling it.
    #[serde(rename_all = "camelCase")]
    Latency { millis: u64 },
    /// End matching watches after this many events.
    #[serde(rename_all = "camelCase")]
    EndWatchAfterEvents { events: u64 },
    /// End matching watches after this many seconds.
    #[serde(rename_all = "camelCase")]
    EndWatchAfterSeconds { seconds: f64 },
    /// Answer matching watches with a 410 Gone ERROR event.
    Gone,
}

/// A rule: which requests (every set field must match) and what happens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// Assigned by [`Faults::add`].
    #[serde(default)]
    pub id: u64,
    #[serde(default)]
    pub verb: Option<String>,
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub subresource: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Fraction of matching requests affected (default 1.0).
    #[serde(default = "one")]
    pub fraction: f64,
    /// Stop after affecting this many requests.
    #[serde(default)]
    pub times: Option<u64>,
    pub action: FaultAction,
    /// How many requests this rule has affected so far.
    #[serde(default)]
    pub injected: u64,
}

fn one() -> f64 {
    1.0
}

impl FaultRule {
    pub fn new(action: FaultAction) -> Self {
        FaultRule {
            id: 0,
            verb: None,
            resource: None,
            subresource: None,
            user: None,
            namespace: None,
            name: None,
            fraction: 1.0,
            times: None,
            action,
            injected: 0,
        }
    }
    pub fn error(code: u16) -> Self {
        FaultRule::new(FaultAction::Error {
            code,
            retry_after_seconds: if code == 429 { Some(1) } else { None },
            message: None,
        })
    }
    pub fn verb(mut self, v: &str) -> Self {
        self.verb = Some(v.into());
        self
    }
    pub fn resource(mut self, r: &str) -> Self {
        self.resource = Some(r.into());
        self
    }
    pub fn subresource(mut self, r: &str) -> Self {
        self.subresource = Some(r.into());
        self
    }
    pub fn user(mut self, u: &str) -> Self {
        self.user = Some(u.into());
        self
    }
    pub fn name(mut self, n: &str) -> Self {
        self.name = Some(n.into());
        self
    }
    pub fn fraction(mut self, f: f64) -> Self {
        self.fraction = f;
        self
    }
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }
}

/// What the request being matched is.
#[derive(Debug, Clone, Default)]
pub(crate) struct Target<'a> {
    pub verb: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub user: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// The faults to apply to one request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decision {
    pub error: Option<(u16, Option<u64>, Option<String>)>,
    pub latency: Option<Duration>,
    pub end_after_events: Option<u64>,
    pub end_after: Option<Duration>,
    pub gone: bool,
}

struct Inner {
    rules: Vec<FaultRule>,
    next_id: u64,
    rng: rand::rngs::StdRng,
}

/// Handle to the fault injector (cheap to clone).
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Mutex<Inner>>,
    paused: Arc<tokio::sync::watch::Sender<bool>>,
    cut: Arc<tokio::sync::watch::Sender<u64>>,
    gone_next: Arc<AtomicU64>,
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Self {
        Faults {
            inner: Arc::new(Mutex::new(Inner {
                rules: Vec::new(),
                next_id: 1,
                rng: rand::rngs::StdRng::seed_from_u64(seed),
            })),
            paused: Arc::new(tokio::sync::watch::Sender::new(false)),
            cut: Arc::new(tokio::sync::watch::Sender::new(0)),
            gone_next: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Adds a rule; returns its id.
    pub fn add(&self, mut rule: FaultRule) -> u64 {
        let mut g = self.inner.lock();
        rule.id = g.next_id;
        rule.injected = 0;
        g.next_id += 1;
        let id = rule.id;
        g.rules.push(rule);
        id
    }

    pub fn remove(&self, id: u64) -> bool {
        let mut g = self.inner.lock();
        let before = g.rules.len();
        g.rules.retain(|r| r.id != id);
        g.rules.len() != before
    }

    /// Removes every rule, resumes a paused server, forgets pending 410s.
    pub fn clear(&self) {
        self.inner.lock().rules.clear();
        self.gone_next.store(0, Ordering::SeqCst);
        self.resume();
    }

    pub fn rules(&self) -> Vec<FaultRule> {
        self.inner.lock().rules.clone()
    }

    /// Reseeds the random source (fraction decisions).
    pub fn reseed(&self, seed: u64) {
        self.inner.lock().rng = rand::rngs::StdRng::seed_from_u64(seed);
    }

    /// Hangs every API request (not `/_sim`) until [`Faults::resume`].
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Ends every open watch now (clients see the stream end, as when an
    /// apiserver restarts).
    pub fn cut_watches(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// The next `n` watch requests get a 410 Gone ERROR event.
    pub fn gone_next_watches(&self, n: u64) {
        self.gone_next.fetch_add(n, Ordering::SeqCst);
    }

    pub(crate) fn take_gone(&self) -> bool {
        self.gone_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    pub(crate) fn cut_receiver(&self) -> tokio::sync::watch::Receiver<u64> {
        self.cut.subscribe()
    }

    pub(crate) async fn wait_unpaused(&self) {
        let mut rx = self.paused.subscribe();
        // An error means the sender is gone (server shutting down): go on.
        let _ = rx.wait_for(|p| !*p).await;
    }

    pub(crate) fn decide(&self, t: &Target<'_>) -> Decision {
        let mut d = Decision::default();
        let mut g = self.inner.lock();
        let Inner { rules, rng, .. } = &mut *g;
        for r in rules.iter_mut() {
            let m = |f: &Option<String>, v: &str| f.as_ref().is_none_or(|x| x == v);
            if !(m(&r.verb, t.verb)
                && m(&r.resource, t.resource)
                && m(&r.subresource, t.subresource)
                && m(&r.user, t.user)
                && m(&r.namespace, t.namespace)
                && m(&r.name, t.name))
            {
                continue;
            }
            if r.times.is_some_and(|n| r.injected >= n) {
                continue;
            }
            let watch_only = matches!(
                r.action,
                FaultAction::EndWatchAfterEvents { .. }
                    | FaultAction::EndWatchAfterSeconds { .. }
                    | FaultAction::Gone
            );
            if watch_only && t.verb != "watch" {
                continue;
            }
            if r.fraction < 1.0 && rng.random::<f64>() >= r.fraction {
                continue;
            }
            r.injected += 1;
            match &r.action {
                FaultAction::Error {
                    code,
                    retry_after_seconds,
                    message,
                } => {
                    if d.error.is_none() {
                        d.error = Some((*code, *retry_after_seconds, message.clone()));
                    }
                }
                FaultAction::Latency { millis } => {
                    d.latency =
                        Some(d.latency.unwrap_or_default() + Duration::from_millis(*millis));
                }
                FaultAction::EndWatchAfterEvents { events } => d.end_after_events = Some(*events),
                FaultAction::EndWatchAfterSeconds { seconds } => {
                    d.end_after = Some(Duration::from_secs_f64(seconds.max(0.0)))
                }
                FaultAction::Gone => d.gone = true,
            }
        }
        d
    }
}

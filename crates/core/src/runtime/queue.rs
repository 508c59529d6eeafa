//! The in-use engine's work queue: which protected object is reconciled
//! next, by key (`namespace/name`, or `name` for a cluster-scoped kind).
//!
//! It keeps kube-runtime's `Controller` semantics that the engine relies
//! on — a key waiting once however often it is triggered, never two
//! reconciles of one key at once (a key triggered while it runs runs again
//! after), at most `concurrency` reconciles at once, a requeue after a
//! delay that an earlier trigger replaces, in-flight reconciles finished on
//! shutdown — at a fraction of its memory. kube's scheduler keeps each
//! waiting request three times (a timer-wheel slot, a map of schedules and
//! a pending set, each with a full `ObjectRef`: about 100 bytes before its
//! strings), so the 10,000 objects a back-fill triggers at once cost 7 MB of
//! the rules benchmark's heap. Here a waiting key is one shared string in a
//! list and a set (client-go's workqueue shape); only delayed keys go
//! through a timer.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, Stream, StreamExt};
use kube::runtime::reflector::{Lookup, ObjectRef};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

/// A queued object's key.
pub type Key = Arc<str>;

/// The key of the object `r` names: `namespace/name`, or `name` for a
/// cluster-scoped object (as [`super::object_key`] and client-go's
/// `MetaNamespaceKeyFunc`).
pub fn key_of<K: Lookup + ?Sized>(r: &ObjectRef<K>) -> Key {
    match &r.namespace {
        Some(ns) => format!("{ns}/{}", r.name).into(),
        None => r.name.as_str().into(),
    }
}

/// The queue's state (no I/O: [`run`] drives it).
#[derive(Default)]
struct Queue {
    /// Keys to hand out, in trigger order.
    ready: VecDeque<Key>,
    /// Keys waiting: in `ready`, or running and triggered again.
    dirty: HashSet<Key>,
    /// Keys being reconciled.
    running: HashSet<Key>,
    /// Keys to trigger later, and when.
    delayed: DelayQueue<Key>,
    due: HashMap<Key, (delay_queue::Key, Instant)>,
}

impl Queue {
    /// Triggers `key` now (a delayed trigger of it is replaced).
    fn add(&mut self, key: Key) {
        if let Some((slot, _)) = self.due.remove(&key) {
            self.delayed.remove(&slot);
        }
        if self.dirty.contains(&key) {
            return;
        }
        self.dirty.insert(key.clone());
        if !self.running.contains(&key) {
            self.ready.push_back(key);
        }
    }

    /// Triggers `key` after `delay`, unless it is triggered sooner.
    fn add_after(&mut self, key: Key, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        if self.dirty.contains(&key) {
            return;
        }
        let at = Instant::now() + delay;
        match self.due.get_mut(&key) {
            Some((_, when)) if *when <= at => {}
            Some((slot, when)) => {
                self.delayed.reset_at(slot, at);
                *when = at;
            }
            None => {
                let slot = self.delayed.insert_at(key.clone(), at);
                self.due.insert(key, (slot, at));
            }
        }
    }

    /// The next key to reconcile, now marked running.
    fn pop(&mut self) -> Option<Key> {
        let key = self.ready.pop_front()?;
        self.dirty.remove(&key);
        self.running.insert(key.clone());
        Some(key)
    }

    /// `key`'s reconcile finished; it runs again if triggered meanwhile.
    fn done(&mut self, key: &Key) {
        self.running.remove(key);
        if let Some(k) = self.dirty.get(key) {
            self.ready.push_back(k.clone());
        }
    }

    /// A delayed key came due.
    fn fire(&mut self, key: Key) {
        self.due.remove(&key);
        self.add(key);
    }

    fn waiting(&self) -> usize {
        self.dirty.len() + self.due.len()
    }
}

/// Runs `work` on every key `triggers` yields (and on every key `work`
/// asks to requeue, after the delay it returns) until `shutdown`; then
/// lets the reconciles in flight finish. Keys are taken from the start but
/// none is worked on before `ready` (the cache `work` reads has listed, as
/// kube's applier waits for its store).
pub async fn run<T, W, Fut>(
    concurrency: usize,
    shutdown: CancellationToken,
    ready: impl Future<Output = ()>,
    triggers: T,
    mut work: W,
) where
    T: Stream<Item = Key> + Unpin,
    W: FnMut(Key) -> Fut,
    Fut: Future<Output = Option<Duration>>,
{
    let concurrency = concurrency.max(1);
    let mut q = Queue::default();
    let mut running = FuturesUnordered::new();
    let mut triggers = triggers.fuse();
    let mut triggers_open = true;
    let mut ready = std::pin::pin!(ready);
    let mut is_ready = false;
    loop {
        while is_ready
            && running.len() < concurrency
            && let Some(key) = q.pop()
        {
            let fut = work(key.clone());
            running.push(async move { (key, fut.await) });
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            () = &mut ready, if !is_ready => is_ready = true,
            Some((key, requeue)) = running.next(), if !running.is_empty() => {
                q.done(&key);
                if let Some(delay) = requeue {
                    q.add_after(key, delay);
                }
            }
            key = triggers.next(), if triggers_open => match key {
                Some(key) => q.add(key),
                None => triggers_open = false,
            },
            Some(due) = q.delayed.next(), if !q.due.is_empty() => q.fire(due.into_inner()),
            else => break,
        }
    }
    tracing::debug!(
        in_flight = running.len(),
        waiting = q.waiting(),
        "work queue stopping"
    );
    while running.next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;
    use parking_lot::Mutex;

    /// A recorded reconcile: key, start, end (paused clock, from t0).
    type Log = Arc<Mutex<Vec<(String, Duration, Duration)>>>;

    struct Bed {
        tx: mpsc::UnboundedSender<Key>,
        log: Log,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    /// A queue whose work takes `took` and asks for `requeue(key, run)`.
    fn bed(
        concurrency: usize,
        took: Duration,
        requeue: impl Fn(&str, usize) -> Option<Duration> + Send + 'static,
    ) -> Bed {
        let (tx, rx) = mpsc::unbounded();
        let log: Log = Arc::default();
        let shutdown = CancellationToken::new();
        let (l, s, t0) = (log.clone(), shutdown.clone(), Instant::now());
        let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let gate = async move {
            let _ = gate.await;
        };
        let task = tokio::spawn(async move {
            run(concurrency, s, gate, rx, move |key: Key| {
                let (l, runs) = (l.clone(), runs.clone());
                let n = {
                    let mut r = runs.lock();
                    let n = r.entry(key.to_string()).or_default();
                    *n += 1;
                    *n
                };
                let again = requeue(&key, n);
                async move {
                    let start = t0.elapsed();
                    tokio::time::sleep(took).await;
                    l.lock().push((key.to_string(), start, t0.elapsed()));
                    again
                }
            })
            .await
        });
        let _ = open.send(());
        Bed {
            tx,
            log,
            shutdown,
            task,
        }
    }

    fn key(s: &str) -> Key {
        Arc::from(s)
    }

    fn keys(log: &Log) -> Vec<String> {
        log.lock().iter().map(|(k, _, _)| k.clone()).collect()
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_triggered_often_while_it_waits_runs_once() {
        // One worker, busy with "x" while the rest come in.
        let b = bed(1, Duration::from_secs(1), |_, _| None);
        for k in ["x", "a", "b", "a", "a", "b", "c"] {
            b.tx.unbounded_send(key(k)).unwrap();
        }
        settle().await;
        assert_eq!(keys(&b.log), ["x", "a", "b", "c"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_triggered_while_it_runs_runs_again_after_never_beside() {
        let b = bed(4, Duration::from_secs(10), |_, _| None);
        b.tx.unbounded_send(key("a")).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        b.tx.unbounded_send(key("a")).unwrap();
        b.tx.unbounded_send(key("a")).unwrap();
        settle().await;
        let log = b.log.lock().clone();
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(
            log[1].1 >= log[0].2,
            "the second run started before the first ended: {log:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_concurrency_reconciles_at_once() {
        let b = bed(2, Duration::from_secs(10), |_, _| None);
        for i in 0..5 {
            b.tx.unbounded_send(key(&format!("k{i}"))).unwrap();
        }
        settle().await;
        let log = b.log.lock().clone();
        assert_eq!(log.len(), 5);
        for (k, start, _) in &log {
            let beside = log
                .iter()
                .filter(|(_, s, e)| s <= start && start < e)
                .count();
            assert!(beside <= 2, "{k} ran beside {beside}: {log:?}");
        }
        assert_eq!(log.iter().map(|l| l.2).max(), Some(Duration::from_secs(30)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_requeue_runs_the_key_again_after_its_delay() {
        let b = bed(1, Duration::ZERO, |_, n| {
            (n == 1).then_some(Duration::from_secs(5))
        });
        b.tx.unbounded_send(key("a")).unwrap();
        settle().await;
        let starts: Vec<_> = b.log.lock().iter().map(|l| l.1).collect();
        assert_eq!(starts, [Duration::ZERO, Duration::from_secs(5)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_before_the_delay_replaces_the_requeue() {
        let b = bed(1, Duration::ZERO, |_, n| {
            (n == 1).then_some(Duration::from_secs(30))
        });
        b.tx.unbounded_send(key("a")).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        b.tx.unbounded_send(key("a")).unwrap();
        settle().await;
        let starts: Vec<_> = b.log.lock().iter().map(|l| l.1).collect();
        assert_eq!(starts, [Duration::ZERO, Duration::from_secs(2)]);
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_requeues_the_sooner_holds() {
        let mut q = Queue::default();
        q.add_after(key("a"), Duration::from_secs(30));
        q.add_after(key("a"), Duration::from_secs(5));
        q.add_after(key("a"), Duration::from_secs(60));
        assert_eq!(q.due.len(), 1);
        let fired = tokio::time::timeout(Duration::from_secs(6), q.delayed.next()).await;
        assert_eq!(fired.ok().flatten().map(|e| e.into_inner()), Some(key("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_runs_before_ready_and_what_came_meanwhile_runs_once() {
        let (tx, rx) = mpsc::unbounded();
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let ran: Arc<Mutex<Vec<String>>> = Arc::default();
        let r = ran.clone();
        tokio::spawn(run(
            2,
            CancellationToken::new(),
            async move {
                let _ = gate.await;
            },
            rx,
            move |k: Key| {
                r.lock().push(k.to_string());
                std::future::ready(None)
            },
        ));
        for k in ["a", "b", "a"] {
            tx.unbounded_send(key(k)).unwrap();
        }
        settle().await;
        assert!(ran.lock().is_empty(), "ran before ready: {:?}", ran.lock());
        open.send(()).unwrap();
        settle().await;
        assert_eq!(*ran.lock(), ["a", "b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_lets_the_reconciles_in_flight_finish() {
        let b = bed(2, Duration::from_secs(10), |_, _| None);
        for k in ["a", "b", "c"] {
            b.tx.unbounded_send(key(k)).unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        b.shutdown.cancel();
        b.task.await.unwrap();
        let mut done = keys(&b.log);
        done.sort();
        assert_eq!(done, ["a", "b"], "in flight finished, waiting dropped");
    }
}

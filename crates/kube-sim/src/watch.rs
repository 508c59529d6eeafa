//! Watch streams, with the semantics of the watch cache
//! (staging/src/k8s.io/apiserver/pkg/storage/cacher/{cacher.go,
//! cache_watcher.go,watch_cache.go}): start at "most recent"/"any"/an exact
//! resourceVersion, 410 as an ERROR event for a version older than the
//! retained window, selector transitions turned into ADDED/DELETED, BOOKMARK
//! events and watch-list (`sendInitialEvents`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::faults::Decision;
use crate::http::{Query, RespBody, State, event_line, event_object};
use crate::negotiate::Want;
use crate::object;
use crate::resources::{ResId, ResourceDef};
use crate::store::{EventType, ListOptions, Stored};

fn invalid(e: FieldError) -> ApiError {
    ApiError::invalid("meta.k8s.io", "ListOptions", "", &[e])
}

struct Watcher {
    state: Arc<State>,
    rid: ResId,
    def: &'static ResourceDef,
    ns: Option<String>,
    opts: ListOptions,
    want: Want,
    include: String,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    sent: u64,
    end_after_events: Option<u64>,
}

impl Watcher {
    fn matches(&self, v: &Value) -> bool {
        if let Some(ns) = &self.ns
            && object::meta_str(v, "namespace") != ns
        {
            return false;
        }
        self.opts.label_selector.matches(object::labels(v)) && self.opts.field_selector.matches(v)
    }

    /// Sends one event; `false` when the watch must end.
    async fn send(&mut self, ty: &str, value: &Value, bytes: &Bytes) -> bool {
        let obj = event_object(self.def, value, bytes, &self.want, &self.include);
        if self.tx.send(event_line(ty, &obj)).await.is_err() {
            return false;
        }
        self.sent += 1;
        self.end_after_events.is_none_or(|n| self.sent < n)
    }

    async fn send_error(&mut self, e: &ApiError) {
        let body = Bytes::from(crate::gojson::to_vec(&e.status()));
        let _ = self.tx.send(event_line("ERROR", &body)).await;
    }

    async fn bookmark(&mut self, rv: u64, initial_end: bool) -> bool {
        // (1.36 sends no `creationTimestamp: null` any more.)
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": meta});
        let line = event_line("BOOKMARK", &crate::gojson::to_vec(&obj));
        self.tx.send(line).await.is_ok()
    }

    /// Converts a stored event for this watcher (cache_watcher.go
    /// convertToWatchEvent) and sends it.
    async fn deliver(&mut self, ev: &crate::store::Event) -> bool {
        let cur = self.matches(&ev.obj.value);
        let old = ev.prev.as_ref().is_some_and(|p| self.matches(&p.value));
        match ev.ty {
            EventType::Added => {
                if cur {
                    return self.send("ADDED", &ev.obj.value, &ev.obj.bytes).await;
                }
            }
            EventType::Deleted => {
                if old {
                    return self.send("DELETED", &ev.obj.value, &ev.obj.bytes).await;
                }
            }
            EventType::Modified => match (cur, old) {
                (true, true) => return self.send("MODIFIED", &ev.obj.value, &ev.obj.bytes).await,
                (true, false) => return self.send("ADDED", &ev.obj.value, &ev.obj.bytes).await,
                (false, true) => {
                    // A DELETED with the previous content at this event's RV.
                    let Some(prev) = &ev.prev else { return true };
                    let mut v = prev.value.clone();
                    object::meta_mut(&mut v)
                        .insert("resourceVersion".into(), json!(ev.rv.to_string()));
                    let bytes = Bytes::from(crate::gojson::to_vec(&v));
                    return self.send("DELETED", &v, &bytes).await;
                }
                (false, false) => {}
            },
        }
        true
    }

    async fn initial(&mut self, items: &[Arc<Stored>]) -> bool {
        for s in items {
            if self.matches(&s.value) && !self.send("ADDED", &s.value, &s.bytes).await {
                return false;
            }
        }
        true
    }
}

/// Starts a watch; the response streams until timeout, a fault, a cut or the
/// client going away.
pub(crate) fn serve(
    state: Arc<State>,
    rid: ResId,
    ns: Option<String>,
    opts: ListOptions,
    q: &Query,
    want: Want,
    decision: &Decision,
) -> Result<Response<RespBody>, ApiError> {
    let def = crate::resources::def(rid);
    let send_initial = match q.get("sendInitialEvents") {
        None | Some("") => None,
        Some("true" | "1") => Some(true),
        Some(_) => Some(false),
    };
    let bookmarks = q.flag("allowWatchBookmarks");
    let rv_match = opts.resource_version_match.clone().unwrap_or_default();
    // ValidateListOptions (apimachinery/pkg/apis/meta/internalversion/validation).
    if send_initial.is_some() {
        if rv_match != "NotOlderThan" {
            return Err(invalid(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )));
        }
        if !bookmarks {
            return Err(invalid(FieldError::forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            )));
        }
    } else if !rv_match.is_empty() {
        return Err(invalid(FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        )));
    }
    let timeout = match q.get("timeoutSeconds") {
        Some(t) if !t.is_empty() => {
            Some(Duration::from_secs(t.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {t:?}"))
            })?))
        }
        // Upstream picks a random timeout in [minRequestTimeout, 2x]; 30 min.
        _ => Some(Duration::from_secs(1800)),
    };
    let rv = opts.resource_version.clone().unwrap_or_default();
    let start_rv = if rv.is_empty() || rv == "0" {
        None
    } else {
        Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
        )
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let gone = decision.gone || state.faults.take_gone();
    let mut w = Watcher {
        state: state.clone(),
        rid,
        def,
        ns,
        include: q.get("includeObject").unwrap_or("Metadata").to_string(),
        opts,
        want,
        tx,
        sent: 0,
        end_after_events: decision.end_after_events,
    };
    let end_after = decision.end_after;
    let interval = state.bookmark_interval;
    tokio::spawn(async move {
        let shutdown = w.state.shutdown.clone();
        tokio::select! {
            _ = run(&mut w, start_rv, send_initial, bookmarks, timeout, end_after, gone, interval) => {}
            _ = shutdown.cancelled() => {}
        }
    });
    let mut r = Response::new(RespBody::Chan(rx));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
async fn run(
    w: &mut Watcher,
    start_rv: Option<u64>,
    send_initial: Option<bool>,
    bookmarks: bool,
    timeout: Option<Duration>,
    end_after: Option<Duration>,
    gone: bool,
    interval: Duration,
) {
    let store = w.state.store.clone();
    let mut notify = store.subscribe(w.rid);
    let mut cut = w.state.faults.cut_receiver();
    cut.mark_unchanged();
    let started = tokio::time::Instant::now();
    let deadline = [timeout, end_after]
        .into_iter()
        .flatten()
        .map(|d| started + d)
        .min();
    if gone {
        let rv = start_rv.unwrap_or(0);
        let e = ApiError::expired(format!(
            "too old resource version: {rv} ({})",
            store.current_rv()
        ));
        w.send_error(&e).await;
        return;
    }
    // Where the stream starts.
    let mut cursor = match (start_rv, send_initial) {
        // Legacy "get state and start at most recent/any", or watch-list.
        (None, None) | (None, Some(true)) | (Some(_), Some(true)) => {
            if let Some(rv) = start_rv
                && let Err(e) = store.wait_for_rv(rv).await
            {
                w.send_error(&e).await;
                return;
            }
            let (items, rv) = store.snapshot(w.rid, w.ns.as_deref());
            if !w.initial(&items).await {
                return;
            }
            if send_initial == Some(true) && !w.bookmark(rv, true).await {
                return;
            }
            rv
        }
        (None, Some(false)) => store.current_rv(),
        (Some(rv), _) => {
            if let Err(old) = store.window_covers(w.rid, rv) {
                let e =
                    ApiError::expired(format!("too old resource version: {rv} ({})", old.oldest));
                w.send_error(&e).await;
                return;
            }
            rv
        }
    };
    let bookmark_at = |now: tokio::time::Instant| {
        let next = now + interval;
        match deadline {
            Some(d) if d > now + Duration::from_secs(2) => next.min(d - Duration::from_secs(2)),
            _ => next,
        }
    };
    let mut next_bookmark = bookmark_at(started);
    loop {
        notify.mark_unchanged();
        // A paused server delivers nothing either.
        if w.state.faults.is_paused() {
            w.state.faults.wait_unpaused().await;
        }
        let (events, latest) = match store.events_since(w.rid, cursor) {
            Ok(x) => x,
            // Fell out of the window: end the watch like a terminated slow
            // watcher; the client re-watches (and may get 410).
            Err(_) => return,
        };
        for ev in &events {
            if !w.deliver(ev).await {
                return;
            }
            cursor = ev.rv;
        }
        let now = tokio::time::Instant::now();
        if bookmarks && now >= next_bookmark {
            cursor = cursor.max(latest);
            if !w.bookmark(cursor, false).await {
                return;
            }
            next_bookmark = bookmark_at(now);
        }
        let sleep_until = match deadline {
            Some(d) if bookmarks => d.min(next_bookmark),
            Some(d) => d,
            None if bookmarks => next_bookmark,
            None => now + Duration::from_secs(3600),
        };
        if deadline.is_some_and(|d| now >= d) {
            return;
        }
        tokio::select! {
            r = notify.changed() => { if r.is_err() { return; } }
            _ = tokio::time::sleep_until(sleep_until) => {}
            _ = cut.changed() => return,
            _ = w.tx.closed() => return,
        }
    }
}

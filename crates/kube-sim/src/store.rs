//! The object store: one global resourceVersion, per-resource ordered maps of
//! serialized objects and per-resource event history (the "watch cache"),
//! with the write semantics of the generic registry
//! (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go and
//! pkg/registry/rest/{create,update,delete}.go).
//!
//! Writes take the store lock only to check-and-commit; patches and
//! serialisation happen outside it (an optimistic retry loop like etcd3's
//! `GuaranteedUpdate`). Watchers read the shared history ring; nothing is
//! written to a socket while the lock is held.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::error::{ApiError, FieldError, GroupResource};
use crate::event_versions;
use crate::object::{self, canonicalize, finalizers, meta_str};
use crate::patch::{self, PatchKind, PatchRequest};
use crate::resources::{self, RESOURCES, ResId, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::strategy;

/// Key of an object within its resource: (namespace, name); "" namespace for
/// cluster-scoped kinds.
pub type Key = (String, String);

/// One stored object version: its JSON and its serialized bytes.
#[derive(Debug)]
pub struct Stored {
    pub value: Value,
    pub bytes: Bytes,
    pub rv: u64,
}

impl Stored {
    /// `value` stored at revision `rv`, its `metadata.resourceVersion` set to it.
    fn at(mut value: Value, rv: u64) -> Result<Arc<Stored>, ApiError> {
        object::meta_mut(&mut value).insert("resourceVersion".into(), json!(rv.to_string()));
        Stored::new(value, rv)
    }

    fn new(mut value: Value, rv: u64) -> Result<Arc<Stored>, ApiError> {
        if let Some(m) = value.get_mut("metadata").and_then(Value::as_object_mut)
            && m.get("resourceVersion")
                .is_some_and(|v| v.is_null() || v.as_str() == Some(""))
        {
            m.shift_remove("resourceVersion");
        }
        // A built-in object as encoding/json writes its Go struct: the
        // empty slices and maps of omitempty fields left out (validation
        // saw them; what is stored and answered has none).
        drop_empty_omitempty(&mut value);
        // As the API server writes it (HTML-safe escapes).
        let bytes = crate::gojson::to_vec(&value);
        Ok(Arc::new(Stored {
            value,
            bytes: Bytes::from(bytes),
            rv,
        }))
    }
    pub fn key(&self) -> Key {
        (
            meta_str(&self.value, "namespace").to_string(),
            meta_str(&self.value, "name").to_string(),
        )
    }
}

/// A built-in object without the empty slices and maps of its omitempty
/// fields, as encoding/json writes the Go struct it decodes into.
fn drop_empty_omitempty(value: &mut Value) {
    let (group, version) = match value.get("apiVersion").and_then(Value::as_str) {
        Some(av) => av.split_once('/').unwrap_or(("", av)),
        None => ("", ""),
    };
    let (group, version) = (group.to_string(), version.to_string());
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    crate::openapi::schema::drop_empty_omitempty(&group, &version, &kind, value);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as the watch cache keeps it.
#[derive(Debug)]
pub struct Event {
    pub ty: EventType,
    pub rv: u64,
    pub key: Key,
    /// The new state (for DELETED: the last state, stamped with the
    /// deletion's resourceVersion, as etcd3's watcher reports it).
    pub obj: Arc<Stored>,
    /// The state before this event (None for ADDED).
    pub prev: Option<Arc<Stored>>,
}

struct ResState {
    objects: BTreeMap<Key, Arc<Stored>>,
    history: VecDeque<Arc<Event>>,
    evicted: bool,
    notify: tokio::sync::watch::Sender<u64>,
}

struct Inner {
    rv: u64,
    res: Vec<ResState>,
}

/// Options of a write, from the request.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `fieldManager` (or the user agent's program name).
    pub field_manager: String,
    pub dry_run: bool,
    /// SSA `force`.
    pub force: bool,
    /// `fieldValidation=Strict`: a non-apply patch whose result has fields
    /// the schema does not declare is a 400 (otherwise they are dropped).
    pub strict_fields: bool,
    /// Who writes, as admission policies see it (None: in-process, no user).
    pub user: Option<Arc<crate::admission::UserInfo>>,
    /// Where admission leaves warnings for the response.
    pub warnings: crate::admission::Warnings,
}

impl WriteOptions {
    pub fn manager(m: &str) -> Self {
        WriteOptions {
            field_manager: m.to_string(),
            ..Default::default()
        }
    }
}

/// `DeleteOptions` that matter here.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub grace_period_seconds: Option<i64>,
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation_policy: Option<String>,
    pub dry_run: bool,
    /// Who deletes, as admission policies see it (None: in-process).
    pub user: Option<Arc<crate::admission::UserInfo>>,
    /// Part of a DELETE of a collection: admission sees no name (a refusal
    /// names `"Unknown"`, as upstream's DeleteCollection).
    pub collection: bool,
    /// Where admission leaves warnings for the response.
    pub warnings: crate::admission::Warnings,
}

impl DeleteOptions {
    /// `request.options` of a DELETE: the `meta.k8s.io/v1` DeleteOptions.
    fn admission_options(&self) -> Value {
        let mut v = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
        if let Some(g) = self.grace_period_seconds {
            v["gracePeriodSeconds"] = json!(g);
        }
        if let Some(p) = &self.propagation_policy {
            v["propagationPolicy"] = json!(p);
        }
        if self.dry_run {
            v["dryRun"] = json!(["All"]);
        }
        let mut pre = serde_json::Map::new();
        if let Some(u) = &self.precondition_uid {
            pre.insert("uid".into(), json!(u));
        }
        if let Some(rv) = &self.precondition_rv {
            pre.insert("resourceVersion".into(), json!(rv));
        }
        if !pre.is_empty() {
            v["preconditions"] = Value::Object(pre);
        }
        v
    }
}

/// What a DELETE did.
#[derive(Debug, Clone)]
pub enum DeleteOutcome {
    /// The object is gone; this was its last state.
    Deleted(Arc<Stored>),
    /// The object stays (finalizers or graceful deletion pending); this is
    /// its current state.
    Pending(Arc<Stored>),
}

/// Options of a list.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// A list result.
#[derive(Debug, Clone)]
pub struct ListResult {
    pub items: Vec<Arc<Stored>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

/// Store-wide settings.
#[derive(Debug)]
pub struct StoreConfig {
    pub history_window: usize,
    pub storage_protection: AtomicBool,
    /// Emulate the ServiceAccount admission plugin's defaulting.
    pub service_account_admission: bool,
    pub pod_graceful_deletion: bool,
    pub seed: u64,
}

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    pub(crate) cfg: StoreConfig,
    alloc: Mutex<strategy::Allocator>,
    rng: Mutex<rand::rngs::StdRng>,
    /// Seeds the random start of each dynamic ClusterIP allocation.
    ip_rng: Mutex<rand::rngs::StdRng>,
    /// Latest resourceVersion, for in-process controllers that react to any
    /// change.
    global: tokio::sync::watch::Sender<u64>,
    /// Objects being deleted with a garbage-collector finalizer (`orphan`,
    /// `foregroundDeletion`) for the emulated garbage collector.
    pub(crate) gc_pending: Mutex<std::collections::BTreeSet<(ResId, Key)>>,
    /// How many stored objects carry ownerReferences, and the uids of objects
    /// deleted while there were any: the emulated garbage collector's work.
    pub(crate) owned: std::sync::atomic::AtomicUsize,
    pub(crate) deleted_uids: Mutex<Vec<String>>,
    /// The custom resources this store serves, from its
    /// CustomResourceDefinitions (see [`crate::crd`]).
    crds: parking_lot::RwLock<BTreeMap<ResId, Arc<crate::crd::Served>>>,
}

const GENERATE_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The namespace of a namespaced object defaults to the request's and may
/// not differ from it; a cluster-scoped object has none.
fn settle_namespace(
    def: &ResourceDef,
    m: &mut serde_json::Map<String, Value>,
    ns: &str,
) -> Result<(), ApiError> {
    if def.namespaced {
        match m.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("namespace".into(), json!(ns));
            }
            Some(n) if n != ns => return Err(wrong_namespace()),
            Some(_) => {}
        }
    } else {
        m.remove("namespace");
    }
    Ok(())
}

/// The registry's `KeyFunc` (`NamespaceKeyFunc`, `NoNamespaceKeyFunc`):
/// a name from a request path (unescaped, so it may hold anything but `/`)
/// must be a valid path segment (`content.IsPathSegmentName`) before the
/// store is asked for it: a get, an update, a patch or a delete of `.`,
/// `..` or a name holding `%` is a 400.
fn key_name(name: &str) -> Result<(), ApiError> {
    let msgs: Vec<String> = if name == "." || name == ".." {
        vec![format!("may not be '{name}'")]
    } else {
        ["/", "%"]
            .iter()
            .filter(|c| name.contains(*c))
            .map(|c| format!("may not contain '{c}'"))
            .collect()
    };
    if msgs.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "Name parameter invalid: {}: {}",
        crate::goquote::quote(name),
        msgs.join(";")
    )))
}

fn wrong_namespace() -> ApiError {
    ApiError::bad_request(
        "the namespace of the provided object does not match the namespace sent on the request",
    )
}

/// The keys "ns/name" / "name" upstream's continue tokens carry.
fn key_string(def: &ResourceDef, key: &Key) -> String {
    if def.namespaced {
        format!("{}/{}", key.0, key.1)
    } else {
        key.1.clone()
    }
}

fn encode_continue(def: &ResourceDef, rv: i64, last: &Key) -> String {
    use base64::Engine;
    let start = format!("{}\u{0}", key_string(def, last));
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

/// Decodes a continue token: (resourceVersion, or None for "-1" = serve from
/// the latest state; last key returned).
fn decode_continue(def: &ResourceDef, token: &str) -> Result<(Option<u64>, Key), ApiError> {
    use base64::Engine;
    let bad = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let raw = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|e| bad(&e.to_string()))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|e| bad(&e.to_string()))?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    let rv = v
        .get("rv")
        .and_then(Value::as_i64)
        .ok_or_else(|| bad("missing rv"))?;
    let rv = if rv < 0 { None } else { Some(rv as u64) };
    let start = v
        .get("start")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("missing start"))?;
    let start = start.trim_end_matches('\u{0}');
    let key = if def.namespaced {
        match start.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => return Err(bad("malformed start key")),
        }
    } else {
        (String::new(), start.to_string())
    };
    Ok((rv, key))
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

/// Why a watch from a resourceVersion cannot start.
pub struct TooOld {
    pub oldest: u64,
}

impl Store {
    pub fn new(cfg: StoreConfig) -> Store {
        let res = RESOURCES
            .iter()
            .map(|_| ResState {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                evicted: false,
                notify: tokio::sync::watch::Sender::new(0),
            })
            .collect();
        let seed = cfg.seed;
        Store {
            inner: Mutex::new(Inner { rv: 0, res }),
            alloc: Mutex::new(strategy::Allocator::new(seed)),
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
            ip_rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed ^ 0x01da_110c)),
            global: tokio::sync::watch::Sender::new(0),
            gc_pending: Mutex::new(Default::default()),
            owned: std::sync::atomic::AtomicUsize::new(0),
            deleted_uids: Mutex::new(Vec::new()),
            crds: parking_lot::RwLock::new(BTreeMap::new()),
            cfg,
        }
    }

    /// Finds a served resource by group, version and plural name: a
    /// built-in one or a custom resource of this store's CRDs.
    pub fn find(&self, group: &str, version: &str, resource: &str) -> Option<ResId> {
        resources::find(group, version, resource).or_else(|| {
            self.crds.read().keys().copied().find(|rid| {
                let d = resources::def(*rid);
                d.group == group && d.version == version && d.resource == resource
            })
        })
    }

    /// The custom resources this store serves.
    pub fn custom_resources(&self) -> Vec<&'static ResourceDef> {
        self.crds
            .read()
            .keys()
            .map(|r| resources::def(*r))
            .collect()
    }

    /// The CRD version serving `rid`, if it is a custom resource.
    pub fn custom(&self, rid: ResId) -> Option<Arc<crate::crd::Served>> {
        self.crds.read().get(&rid).cloned()
    }

    /// Serves (or stops serving) the custom resources of a CRD after a
    /// committed change to it. A deleted CRD takes its objects with it.
    fn crd_event(&self, inner: &mut Inner, ev: &Event) {
        let name = meta_str(&ev.obj.value, "name").to_string();
        let gone: Vec<ResId> = {
            let mut crds = self.crds.write();
            let old: Vec<ResId> = crds
                .iter()
                .filter(|(_, s)| s.crd == name)
                .map(|(r, _)| *r)
                .collect();
            for r in &old {
                crds.remove(r);
            }
            if ev.ty != EventType::Deleted {
                for s in crate::crd::served(&ev.obj.value) {
                    while inner.res.len() <= s.rid {
                        inner.res.push(ResState {
                            objects: BTreeMap::new(),
                            history: VecDeque::new(),
                            evicted: false,
                            notify: tokio::sync::watch::Sender::new(0),
                        });
                    }
                    crds.insert(s.rid, Arc::new(s));
                }
            }
            old.into_iter().filter(|r| !crds.contains_key(r)).collect()
        };
        for rid in gone {
            let objects = std::mem::take(&mut inner.res[rid].objects);
            for (key, obj) in objects {
                let rv = inner.rv + 1;
                let Ok(stored) = Stored::at(obj.value.clone(), rv) else {
                    continue;
                };
                inner.rv = rv;
                self.push_event(
                    inner,
                    rid,
                    Event {
                        ty: EventType::Deleted,
                        rv,
                        key,
                        obj: stored,
                        prev: Some(obj),
                    },
                );
            }
        }
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.inner.lock().rv
    }

    pub fn subscribe(&self, rid: ResId) -> tokio::sync::watch::Receiver<u64> {
        let rid = storage_rid(rid);
        self.inner.lock().res[rid].notify.subscribe()
    }

    fn new_uid(&self) -> String {
        let mut b = [0u8; 16];
        self.rng.lock().fill(&mut b);
        uuid::Builder::from_random_bytes(b).into_uuid().to_string()
    }

    fn generate_name(&self, prefix: &str) -> String {
        // names.SimpleNameGenerator: prefix truncated to 58, 5 random chars.
        let mut p = prefix.to_string();
        if p.len() > 58 {
            p.truncate(58);
        }
        let mut rng = self.rng.lock();
        for _ in 0..5 {
            let i = rng.random_range(0..GENERATE_CHARS.len());
            p.push(GENERATE_CHARS[i] as char);
        }
        p
    }

    // ---------------------------------------------------------------- reads

    pub fn get(&self, rid: ResId, ns: &str, name: &str) -> Result<Arc<Stored>, ApiError> {
        key_name(name)?;
        if let Some(core) = event_versions::storage_of(rid) {
            return self
                .get(core, ns, name)
                .map_err(event_versions::view_error)
                .and_then(|s| view(&s));
        }
        let inner = self.inner.lock();
        inner.res[rid]
            .objects
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&crate::resources::def(rid).group_resource(), name))
    }

    /// Checks a requested resourceVersion against the current one and the
    /// retained window (list "Exact"/continue semantics).
    fn check_window(&self, inner: &Inner, rid: ResId, rv: u64) -> Result<(), TooOld> {
        let st = &inner.res[rid];
        if st.evicted
            && let Some(first) = st.history.front()
            && rv + 1 < first.rv
        {
            return Err(TooOld {
                oldest: first.rv - 1,
            });
        }
        Ok(())
    }

    /// Lists objects. Implements resourceVersion "", "0", NotOlderThan,
    /// Exact, and limit/continue at a consistent snapshot.
    pub async fn list(
        &self,
        rid: ResId,
        ns: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ListResult, ApiError> {
        if let Some(core) = event_versions::storage_of(rid) {
            let mut o = opts.clone();
            o.field_selector = opts
                .field_selector
                .map_fields(event_versions::v1_field_to_core);
            let mut r = Box::pin(self.list(core, ns, &o)).await?;
            r.items = r.items.iter().map(view).collect::<Result<_, _>>()?;
            return Ok(r);
        }
        let def = crate::resources::def(rid);
        let mut snapshot_rv: Option<u64> = None;
        let mut start: Option<Key> = None;
        if let Some(token) = opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
            if opts
                .resource_version
                .as_deref()
                .is_some_and(|r| !r.is_empty())
            {
                return Err(list_options_invalid(FieldError::forbidden(
                    "resourceVersion",
                    "specifying resource version is not allowed when using continue",
                )));
            }
            let (rv, key) = decode_continue(def, token)?;
            snapshot_rv = rv;
            start = Some(key);
        } else {
            match (
                opts.resource_version.as_deref().unwrap_or(""),
                opts.resource_version_match.as_deref().unwrap_or(""),
            ) {
                ("", "") | ("0", "") | ("0", "NotOlderThan") => {}
                ("", m) => {
                    let _ = m;
                    return Err(list_options_invalid(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    )));
                }
                ("0", "Exact") => {
                    return Err(list_options_invalid(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    )));
                }
                (rv, m @ ("" | "NotOlderThan" | "Exact")) => {
                    let want = parse_rv(rv)?;
                    self.wait_for_rv(want).await?;
                    if m == "Exact" {
                        snapshot_rv = Some(want);
                    }
                }
                (_, other) => {
                    return Err(list_options_invalid(
                        FieldError::not_supported(
                            "resourceVersionMatch",
                            json!(other),
                            &["Exact", "NotOlderThan", ""],
                        )
                        .named(),
                    ));
                }
            }
        }
        let continuing = start.is_some();
        let inner = self.inner.lock();
        let st = &inner.res[rid];
        let at = snapshot_rv.unwrap_or(inner.rv);
        if at < inner.rv
            && let Err(TooOld { .. }) = self.check_window(&inner, rid, at)
        {
            if let (true, Some(k)) = (continuing, &start) {
                // handleCompactedErrorForPaging (etcd3 store): a token with
                // rv -1 lets the client finish the list inconsistently.
                let mut e = ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                );
                e.metadata = Some(json!({"continue": encode_continue(def, -1, k)}));
                return Err(e);
            }
            return Err(ApiError::expired(
                "The resourceVersion for the provided list is too old.",
            ));
        }
        // State at `at`: live objects, overridden by the state before the
        // first event after `at` for every key changed since.
        let mut overlay: BTreeMap<Key, Option<Arc<Stored>>> = BTreeMap::new();
        if at < inner.rv {
            for ev in st.history.iter().rev() {
                if ev.rv <= at {
                    break;
                }
                overlay.insert(ev.key.clone(), ev.prev.clone());
            }
        }
        let lower = match (&start, ns) {
            (Some(k), _) => std::ops::Bound::Excluded(k.clone()),
            (None, Some(n)) => std::ops::Bound::Included((n.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let in_ns = |k: &Key| ns.is_none_or(|n| k.0 == n);
        let mut live = st
            .objects
            .range((lower.clone(), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| in_ns(k))
            .map(|(k, v)| (k, Some(v)))
            .peekable();
        let mut over = overlay
            .range((lower, std::ops::Bound::Unbounded))
            .take_while(|(k, _)| in_ns(k))
            .map(|(k, v)| (k, v.as_ref()))
            .peekable();
        let filtered = !opts.label_selector.is_empty() || !opts.field_selector.is_empty();
        let matches = |o: &Stored| {
            opts.label_selector.matches(object::labels(&o.value))
                && opts.field_selector.matches(&o.value)
        };
        let limit = opts.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut last_key: Option<Key> = None;
        let mut more = false;
        let mut remaining = 0u64;
        loop {
            let next = match (live.peek(), over.peek()) {
                (None, None) => break,
                (Some(_), None) => live.next(),
                (None, Some(_)) => over.next(),
                (Some((lk, _)), Some((ok, _))) => {
                    if lk < ok {
                        live.next()
                    } else if ok < lk {
                        over.next()
                    } else {
                        live.next();
                        over.next()
                    }
                }
            };
            let Some((k, v)) = next else { break };
            let Some(obj) = v else { continue };
            if !matches(obj) {
                continue;
            }
            if let Some(l) = limit
                && items.len() >= l
            {
                more = true;
                remaining += 1;
                if filtered {
                    break;
                }
                continue;
            }
            last_key = Some(k.clone());
            items.push(obj.clone());
        }
        let continue_token = match (more, &last_key) {
            (true, Some(k)) => Some(encode_continue(
                def,
                if snapshot_rv.is_none() && continuing {
                    -1
                } else {
                    at as i64
                },
                k,
            )),
            _ => None,
        };
        Ok(ListResult {
            items,
            resource_version: at,
            remaining: if more && !filtered {
                Some(remaining)
            } else {
                None
            },
            continue_token,
        })
    }

    /// Waits (up to 3 s, as the watch cache does) until the store has seen
    /// `want`; 504 "Too large resource version" otherwise.
    pub async fn wait_for_rv(&self, want: u64) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            let cur = self.current_rv();
            if want <= cur {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ApiError::too_large_rv(want, cur));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Events of `rid` after `cursor`, and the global RV they are complete
    /// up to. `Err` when `cursor` is older than the retained window.
    pub fn events_since(&self, rid: ResId, cursor: u64) -> Result<(Vec<Arc<Event>>, u64), TooOld> {
        if let Some(core) = event_versions::storage_of(rid) {
            let (evs, rv) = self.events_since(core, cursor)?;
            let conv = evs
                .iter()
                .filter_map(|e| {
                    Some(Arc::new(Event {
                        ty: e.ty,
                        rv: e.rv,
                        key: e.key.clone(),
                        obj: view(&e.obj).ok()?,
                        prev: match &e.prev {
                            Some(p) => Some(view(p).ok()?),
                            None => None,
                        },
                    }))
                })
                .collect();
            return Ok((conv, rv));
        }
        let inner = self.inner.lock();
        self.check_window(&inner, rid, cursor)?;
        let st = &inner.res[rid];
        let idx = st.history.partition_point(|e| e.rv <= cursor);
        let evs = st.history.range(idx..).cloned().collect();
        Ok((evs, inner.rv))
    }

    /// All current objects of `rid` (in `ns`) with the RV they are current at.
    pub fn snapshot(&self, rid: ResId, ns: Option<&str>) -> (Vec<Arc<Stored>>, u64) {
        if let Some(core) = event_versions::storage_of(rid) {
            let (items, rv) = self.snapshot(core, ns);
            return (items.iter().filter_map(|s| view(s).ok()).collect(), rv);
        }
        let inner = self.inner.lock();
        let st = &inner.res[rid];
        let items = match ns {
            Some(n) => st
                .objects
                .range((n.to_string(), String::new())..)
                .take_while(|(k, _)| k.0 == n)
                .map(|(_, v)| v.clone())
                .collect(),
            None => st.objects.values().cloned().collect(),
        };
        (items, inner.rv)
    }

    /// Whether the retained history of `rid` still covers `rv`.
    pub fn window_covers(&self, rid: ResId, rv: u64) -> Result<(), TooOld> {
        let rid = storage_rid(rid);
        let inner = self.inner.lock();
        self.check_window(&inner, rid, rv)
    }

    // --------------------------------------------------------------- commit

    fn push_event(&self, inner: &mut Inner, rid: ResId, ev: Event) {
        let has_owners = |v: &Value| {
            v.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        };
        let before = ev.prev.as_ref().is_some_and(|p| has_owners(&p.value));
        let after = ev.ty != EventType::Deleted && has_owners(&ev.obj.value);
        match (before, after) {
            (false, true) => {
                self.owned.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.owned.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if ev.ty == EventType::Deleted && self.owned.load(Ordering::Relaxed) > 0 {
            self.deleted_uids
                .lock()
                .push(meta_str(&ev.obj.value, "uid").to_string());
        }
        let window = self.cfg.history_window.max(1);
        let st = &mut inner.res[rid];
        let ev = Arc::new(ev);
        st.history.push_back(ev.clone());
        while st.history.len() > window {
            st.history.pop_front();
            st.evicted = true;
        }
        st.notify.send_replace(inner.rv);
        self.global.send_replace(inner.rv);
        if Some(rid) == crds_rid() {
            self.crd_event(inner, &ev);
        }
    }

    /// A receiver that changes on every committed write.
    pub fn subscribe_all(&self) -> tokio::sync::watch::Receiver<u64> {
        self.global.subscribe()
    }

    /// Commits a new object. Checks namespace lifecycle and name uniqueness
    /// under the lock.
    fn commit_create(
        &self,
        rid: ResId,
        mut obj: Value,
        generate: bool,
        dry_run: bool,
    ) -> Result<Arc<Stored>, ApiError> {
        let def = crate::resources::def(rid);
        let ns_rid = namespaces_rid();
        let mut inner = self.inner.lock();
        let mut tries = 0;
        loop {
            let key: Key = (
                meta_str(&obj, "namespace").to_string(),
                meta_str(&obj, "name").to_string(),
            );
            if def.namespaced {
                // NamespaceLifecycle admission
                // (plugin/pkg/admission/namespace/lifecycle/admission.go).
                match inner.res[ns_rid]
                    .objects
                    .get(&(String::new(), key.0.clone()))
                {
                    None => {
                        return Err(ApiError::not_found(
                            &GroupResource::new("", "namespaces"),
                            &key.0,
                        ));
                    }
                    Some(n) if n.value.pointer("/metadata/deletionTimestamp").is_some() => {
                        let gr = def.group_resource();
                        return Err(ApiError::new(
                            403,
                            "Forbidden",
                            format!(
                                "{gr} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                                key.1, key.0
                            ),
                        )
                        .with_details(json!({
                            "name": key.1, "group": def.group, "kind": def.resource,
                            "causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {} is being terminated", key.0), "field": "metadata.namespace"}]
                        })));
                    }
                    Some(_) => {}
                }
            }
            if inner.res[rid].objects.contains_key(&key) {
                if generate && tries < 8 {
                    tries += 1;
                    drop(inner);
                    let prefix = meta_str(&obj, "generateName").to_string();
                    object::meta_mut(&mut obj)
                        .insert("name".into(), json!(self.generate_name(&prefix)));
                    inner = self.inner.lock();
                    continue;
                }
                // rest.CheckGeneratedNameError: with a generateName, the
                // conflict says the server could not generate a unique name.
                if !meta_str(&obj, "generateName").is_empty() {
                    return Err(ApiError::generate_name_conflict(
                        &def.group_resource(),
                        &key.1,
                    ));
                }
                return Err(ApiError::already_exists(&def.group_resource(), &key.1));
            }
            if dry_run {
                return Stored::new(obj, 0);
            }
            let rv = inner.rv + 1;
            let stored = Stored::at(obj, rv)?;
            inner.rv = rv;
            inner.res[rid].objects.insert(key.clone(), stored.clone());
            self.push_event(
                &mut inner,
                rid,
                Event {
                    ty: EventType::Added,
                    rv,
                    key,
                    obj: stored.clone(),
                    prev: None,
                },
            );
            return Ok(stored);
        }
    }

    /// The store locked for a write over `expected`, with its key and the
    /// next resourceVersion; `None` when `expected` (by identity) is no
    /// longer what is stored.
    fn lock_current(
        &self,
        rid: ResId,
        expected: &Arc<Stored>,
    ) -> Option<(parking_lot::MutexGuard<'_, Inner>, Key, u64)> {
        let inner = self.inner.lock();
        let key = expected.key();
        let current = inner.res[rid].objects.get(&key);
        if !current.is_some_and(|cur| Arc::ptr_eq(cur, expected)) {
            return None;
        }
        let rv = inner.rv + 1;
        Some((inner, key, rv))
    }

    /// Replaces `expected` (by identity) with `new`; `Ok(None)` when the
    /// stored object changed meanwhile (caller retries).
    fn commit_update(
        &self,
        rid: ResId,
        expected: &Arc<Stored>,
        new: Value,
    ) -> Result<Option<Arc<Stored>>, ApiError> {
        let Some((mut inner, key, rv)) = self.lock_current(rid, expected) else {
            return Ok(None);
        };
        let stored = Stored::at(new, rv)?;
        inner.rv = rv;
        inner.res[rid].objects.insert(key.clone(), stored.clone());
        if object::meta(&stored.value).is_some_and(|m| m.contains_key("deletionTimestamp"))
            && finalizers(&stored.value)
                .iter()
                .any(|f| f == "orphan" || f == "foregroundDeletion")
        {
            self.gc_pending.lock().insert((rid, key.clone()));
        }
        self.push_event(
            &mut inner,
            rid,
            Event {
                ty: EventType::Modified,
                rv,
                key,
                obj: stored.clone(),
                prev: Some(expected.clone()),
            },
        );
        Ok(Some(stored))
    }

    /// Removes `expected` (by identity); `Ok(None)` when it changed meanwhile.
    fn commit_delete(
        &self,
        rid: ResId,
        expected: &Arc<Stored>,
    ) -> Result<Option<Arc<Stored>>, ApiError> {
        let Some((mut inner, key, rv)) = self.lock_current(rid, expected) else {
            return Ok(None);
        };
        let stored = Stored::at(expected.value.clone(), rv)?;
        inner.rv = rv;
        inner.res[rid].objects.remove(&key);
        self.push_event(
            &mut inner,
            rid,
            Event {
                ty: EventType::Deleted,
                rv,
                key,
                obj: stored.clone(),
                prev: Some(expected.clone()),
            },
        );
        drop(inner);
        let def = crate::resources::def(rid);
        if def.group.is_empty() && def.resource == "services" {
            // The registry's afterDelete frees the node ports and, once the
            // Service is gone, deletes its IPAddresses.
            self.alloc.lock().release_service(&expected.value);
            crate::networking::release_ips(self, &crate::networking::held_ips(&expected.value));
        }
        Ok(Some(stored))
    }

    // --------------------------------------------------------------- create

    /// POST: creates `body` in `ns` ("" for cluster-scoped kinds).
    pub fn create(
        &self,
        rid: ResId,
        ns: &str,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<Arc<Stored>, ApiError> {
        let def = crate::resources::def(rid);
        if let Some(core) = event_versions::storage_of(rid) {
            let mut obj = check_body(def, body)?;
            prune(def, &mut obj);
            return self
                .create(core, ns, event_versions::v1_to_core(&obj), opts)
                .map_err(event_versions::view_error)
                .and_then(|s| view(&s));
        }
        let mut obj = check_body(def, body)?;
        {
            let m = object::meta_mut(&mut obj);
            settle_namespace(def, m, ns)?;
            if m.get("resourceVersion")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                return Err(ApiError::bad_request(
                    "resourceVersion should not be set on objects to be created",
                ));
            }
        }
        prune(def, &mut obj);
        let now = object::now_string();
        // The create handler records managedFields on the decoded (and
        // defaulted) object, before admission and the registry (status
        // reset, allocated cluster IPs and node ports) change it.
        strategy::decode_defaults(def, &mut obj);
        if let Some(crd) = self.custom(rid) {
            crd.decode(&mut obj);
        }
        patch::track_update(
            None,
            &mut obj,
            &opts.field_manager,
            None,
            &now,
            &def.api_version(),
        );
        let allocated = self.before_create(rid, &mut obj, &now, opts)?;
        let generate = generates_names(def)
            && !meta_str(&obj, "generateName").is_empty()
            && meta_str(&obj, "name").starts_with(meta_str(&obj, "generateName"));
        let obj = canonicalize(obj, def.kind, &def.api_version());
        self.finish_allocation(
            allocated,
            self.commit_create(rid, obj, generate, opts.dry_run),
        )
    }

    /// The end of a Service write's allocation transaction: what it
    /// allocated is released when the write failed (`txn.Revert`).
    fn finish_allocation<T>(
        &self,
        allocated: crate::networking::Allocated,
        result: Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        if result.is_err() {
            crate::networking::release_ips(self, &allocated.ips);
        }
        result
    }

    /// Allocates a Service's cluster IP (the registry's BeginCreate /
    /// BeginUpdate hook, which runs after mutating admission and before the
    /// strategy's validation).
    fn allocate_cluster_ip(
        &self,
        svc: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<crate::networking::Allocated, ApiError> {
        let seed: u64 = self.ip_rng.lock().random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        crate::networking::allocate_service(self, &mut rng, svc, old, dry_run)
    }

    /// rest.BeforeCreate: system fields, generateName, strategy, mutating
    /// admission, the Service registry's allocation, validation, validating
    /// admission. What it allocated is returned, for the caller to release
    /// if the write fails.
    fn before_create(
        &self,
        rid: ResId,
        obj: &mut Value,
        now: &str,
        opts: &WriteOptions,
    ) -> Result<crate::networking::Allocated, ApiError> {
        let dry_run = opts.dry_run;
        let def = crate::resources::def(rid);
        {
            let m = object::meta_mut(obj);
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("selfLink");
            m.insert("uid".into(), json!(self.new_uid()));
            m.insert("creationTimestamp".into(), json!(now));
        }
        let name = meta_str(obj, "name").to_string();
        let generate = meta_str(obj, "generateName").to_string();
        if name.is_empty() && !generate.is_empty() {
            let n = if generates_names(def) {
                self.generate_name(&generate)
            } else {
                // IPAddress's noopNameGenerator: the prefix is the name.
                generate.clone()
            };
            object::meta_mut(obj).insert("name".into(), json!(n));
        }
        strategy::apply_defaults(def, obj);
        strategy::prepare_for_create(def, obj, now);
        if self.cfg.service_account_admission {
            strategy::service_account_admission(def, obj);
        }
        let is_service = def.group.is_empty() && def.resource == "services";
        if is_service {
            self.alloc
                .lock()
                .allocate_service(obj)
                .map_err(ApiError::internal)?;
        }
        // StorageObjectInUseProtection admission
        // (plugin/pkg/admission/storage/storageobjectinuseprotection/admission.go):
        // CREATE only, main resource only, append if absent.
        if self.cfg.storage_protection.load(Ordering::Relaxed) && def.group.is_empty() {
            let fin = match def.resource {
                "persistentvolumes" => Some("kubernetes.io/pv-protection"),
                "persistentvolumeclaims" => Some("kubernetes.io/pvc-protection"),
                _ => None,
            };
            if let Some(fin) = fin {
                let m = object::meta_mut(obj);
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut()
                    && !a.iter().any(|f| f == fin)
                {
                    a.push(json!(fin));
                }
            }
        }
        if def.group.is_empty() && def.resource == "persistentvolumeclaims" {
            self.default_storage_class(obj);
        }
        let attrs = crate::admission::Attributes {
            def,
            operation: crate::admission::Operation::Create,
            subresource: None,
            old: None,
            dry_run,
            user: opts.user.as_deref(),
            options: None,
            collection: false,
        };
        // MutatingAdmissionPolicy, after the built-in plugins, before validation.
        self.mutating_admission(&attrs, obj)?;
        let allocated = if is_service {
            self.allocate_cluster_ip(obj, None, dry_run)?
        } else {
            crate::networking::Allocated::default()
        };
        let mut errs = crate::validation::validate_object_meta_on_create(
            def,
            self.custom(rid).is_some(),
            obj.get("metadata").unwrap_or(&Value::Null),
        );
        errs.extend(crate::spec_validation::validate_create(def, obj));
        errs.extend(crate::networking::validate_create(def, obj));
        if Some(rid) == crds_rid() {
            let e = crate::crd::validate_crd(obj);
            if e.is_empty() {
                obj["status"] = crate::crd::status(obj, now);
            }
            errs.extend(e);
        }
        if let Some(crd) = self.custom(rid) {
            if def.has_status
                && let Some(m) = obj.as_object_mut()
            {
                m.remove("status");
            }
            errs.extend(crd.admit(obj, None));
        }
        errs.extend(crate::admission::prepare(def, obj));
        if !errs.is_empty() {
            let name = meta_str(obj, "name").to_string();
            return self.finish_allocation(
                allocated,
                Err(ApiError::invalid(def.group, def.kind, &name, &errs)),
            );
        }
        // ValidatingAdmissionPolicy: the registry's createValidation.
        if let Err(e) = self.validating_admission(&attrs, Some(obj), &opts.warnings) {
            return self.finish_allocation(allocated, Err(e));
        }
        Ok(allocated)
    }

    /// The DefaultStorageClass admission plugin
    /// (plugin/pkg/admission/storage/storageclass/setdefault): a new PVC
    /// without `spec.storageClassName` (absent, not "") gets the default
    /// StorageClass, the newest one if several are marked default.
    fn default_storage_class(&self, pvc: &mut Value) {
        if pvc
            .pointer("/spec/storageClassName")
            .is_some_and(|v| !v.is_null())
        {
            return;
        }
        let Some(sc_rid) = resources::find("storage.k8s.io", "v1", "storageclasses") else {
            return;
        };
        let (classes, _) = self.snapshot(sc_rid, None);
        let default = classes
            .iter()
            .filter(|c| crate::table::is_default_storage_class(&c.value))
            .max_by(|a, b| {
                meta_str(&a.value, "creationTimestamp")
                    .cmp(meta_str(&b.value, "creationTimestamp"))
                    .then_with(|| meta_str(&b.value, "name").cmp(meta_str(&a.value, "name")))
            });
        if let Some(c) = default
            && let Some(spec) = pvc.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.insert("storageClassName".into(), json!(meta_str(&c.value, "name")));
        }
    }

    // --------------------------------------------------------------- update

    /// PUT to the main resource or a subresource.
    pub fn update(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        subresource: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> Result<(Arc<Stored>, bool), ApiError> {
        let def = crate::resources::def(rid);
        if let Some(core) = event_versions::storage_of(rid) {
            let mut obj = check_body(def, body)?;
            prune(def, &mut obj);
            let new = event_versions::v1_to_core(&obj);
            if let Ok(live) = self.get(core, ns, name) {
                let errs = event_versions::validate_v1_update(&new, &live.value);
                if !errs.is_empty() {
                    return Err(ApiError::invalid("", "Event", name, &errs));
                }
            }
            let (s, created) = self
                .update(core, ns, name, subresource, new, opts)
                .map_err(event_versions::view_error)?;
            return Ok((view(&s)?, created));
        }
        let obj = check_body(def, body)?;
        let body_name = meta_str(&obj, "name");
        if body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        key_name(name)?;
        let body_ns = meta_str(&obj, "namespace");
        if def.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(wrong_namespace());
        }
        let body_rv = meta_str(&obj, "resourceVersion").to_string();
        loop {
            let live = self.get(rid, ns, name).ok();
            let Some(live) = live else {
                if def.allow_create_on_update && subresource.is_none() {
                    let mut o = obj.clone();
                    object::meta_mut(&mut o).remove("resourceVersion");
                    return self.create(rid, ns, o, opts).map(|s| (s, true));
                }
                return Err(ApiError::not_found(&def.group_resource(), name));
            };
            if body_rv.is_empty() {
                // AllowUnconditionalUpdate is true for every kind served here.
            } else if body_rv != live.rv.to_string() {
                return Err(ApiError::stale(&def.group_resource(), name));
            }
            let mut new = obj.clone();
            prune(def, &mut new);
            if let Some(crd) = self.custom(rid) {
                crd.decode(&mut new);
            }
            object::meta_mut(&mut new).insert("resourceVersion".into(), json!(live.rv.to_string()));
            let now = object::now_string();
            // The body is decoded, so defaulted, before the update handler
            // records managedFields.
            strategy::decode_defaults(def, &mut new);
            patch::track_update(
                Some(&live.value),
                &mut new,
                &opts.field_manager,
                subresource,
                &now,
                &def.api_version(),
            );
            match self.finish_update(rid, &live, new, subresource, opts, &now)? {
                Some(r) => return Ok((r, false)),
                None => continue,
            }
        }
    }

    /// PATCH (all four patch types), to the main resource or a subresource.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        subresource: Option<&str>,
        kind: PatchKind,
        body: &[u8],
        opts: &WriteOptions,
    ) -> Result<(Arc<Stored>, bool), ApiError> {
        let def = crate::resources::def(rid);
        // A view (events.k8s.io/v1 Events): the patch applies to the view of
        // the stored object; the result is stored in the storage's form.
        let view_of = event_versions::storage_of(rid);
        let srid = view_of.unwrap_or(rid);
        key_name(name)?;
        loop {
            let live = self.get(srid, ns, name).ok();
            let live_view = match (&live, view_of) {
                (Some(l), Some(_)) => Some(event_versions::core_to_v1(&l.value)),
                (Some(l), None) => Some(l.value.clone()),
                (None, _) => None,
            };
            let now = object::now_string();
            let req = PatchRequest {
                live: live_view.as_ref(),
                body,
                kind,
                gvk: patch::Gvk {
                    group: def.group,
                    version: def.version,
                    kind: def.kind,
                },
                field_manager: &opts.field_manager,
                force: opts.force,
                subresource,
                now: &now,
            };
            let Some(live) = live.clone() else {
                if kind != PatchKind::Apply || subresource.is_some() {
                    return Err(ApiError::not_found(&def.group_resource(), name));
                }
                // Server-side apply creates the object.
                let mut obj = patch::apply_patch(&req).map_err(|e| patch_error(def, name, e))?;
                patch::check_decodes(&req, &mut obj, &patch::Written::new(&req), &[])
                    .map_err(|e| patch_error(def, name, e))?;
                {
                    let m = object::meta_mut(&mut obj);
                    let n = m.get("name").and_then(Value::as_str).unwrap_or("");
                    if n.is_empty() {
                        m.insert("name".into(), json!(name));
                    } else if n != name {
                        return Err(ApiError::bad_request(
                            "the name of the object does not match the name on the URL",
                        ));
                    }
                }
                let obj = check_body(def, obj)?;
                let mut obj = obj;
                {
                    let m = object::meta_mut(&mut obj);
                    settle_namespace(def, m, ns)?;
                    m.remove("resourceVersion");
                }
                if view_of.is_some() {
                    prune(def, &mut obj);
                    let core = event_versions::v1_to_core(&obj);
                    let mut core = core;
                    let cdef = crate::resources::def(srid);
                    let _ = self.before_create(srid, &mut core, &now, opts)?;
                    let core = canonicalize(core, cdef.kind, &cdef.api_version());
                    return match self.commit_create(srid, core, false, opts.dry_run) {
                        Ok(s) => Ok((view(&s)?, true)),
                        Err(e) if e.code == 409 && e.reason == "AlreadyExists" => continue,
                        Err(e) => Err(event_versions::view_error(e)),
                    };
                }
                let allocated = self.before_create(rid, &mut obj, &now, opts)?;
                let obj = canonicalize(obj, def.kind, &def.api_version());
                let created = self.commit_create(rid, obj, false, opts.dry_run);
                return match self.finish_allocation(allocated, created) {
                    Ok(s) => Ok((s, true)),
                    // Lost a race with a create: apply again as an update.
                    Err(e) if e.code == 409 && e.reason == "AlreadyExists" => continue,
                    Err(e) => Err(e),
                };
            };
            let mut new =
                patch::apply_patch_untracked(&req).map_err(|e| patch_error(def, name, e))?;
            // handlers/patch.go: the patched object is decoded into the
            // kind's type (strictly under fieldValidation=Strict). What
            // upstream decodes is the patched document as its patch library
            // writes it, whose order names the unknown fields.
            let written = patch::Written::new(&req);
            let unknown = if opts.strict_fields && kind != PatchKind::Apply {
                let custom = self.custom(rid);
                let unknown = crate::openapi::crd::unknown_fields(custom.as_deref(), def, &new);
                // (Only asked for when there are some: most patches have none.)
                match (!unknown.is_empty())
                    .then(|| written.get())
                    .flatten()
                    .and_then(|w| serde_json::from_str::<Value>(&w.to_go_string()).ok())
                {
                    Some(in_order) => {
                        crate::openapi::crd::unknown_fields(custom.as_deref(), def, &in_order)
                    }
                    None => unknown,
                }
            } else {
                Vec::new()
            };
            patch::check_decodes(&req, &mut new, &written, &unknown)
                .map_err(|e| patch_error(def, name, e))?;
            if let Some(crd) = self.custom(rid) {
                crd.decode(&mut new);
            }
            if kind != PatchKind::Apply {
                // The patched object is decoded, so defaulted, before the
                // patch handler records managedFields: its manager owns the
                // defaults of what it added.
                strategy::decode_defaults(def, &mut new);
                patch::track_update(
                    req.live,
                    &mut new,
                    &opts.field_manager,
                    subresource,
                    &now,
                    &def.api_version(),
                );
            }
            prune(def, &mut new);
            let new = check_body(def, new)?;
            if meta_str(&new, "name") != name {
                return Err(ApiError::invalid(
                    def.group,
                    def.kind,
                    name,
                    &[FieldError::invalid(
                        "metadata.name",
                        json!(meta_str(&new, "name")),
                        "field is immutable",
                    )],
                ));
            }
            let new_rv = meta_str(&new, "resourceVersion");
            if !new_rv.is_empty() && new_rv != live.rv.to_string() {
                return Err(ApiError::stale(&def.group_resource(), name));
            }
            let uid = meta_str(&new, "uid");
            let live_uid = meta_str(&live.value, "uid");
            if !uid.is_empty() && uid != live_uid {
                return Err(ApiError::conflict(
                    &def.group_resource(),
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {live_uid}"
                    ),
                ));
            }
            let mut new = match view_of {
                Some(_) => {
                    let core = event_versions::v1_to_core(&new);
                    let errs = event_versions::validate_v1_update(&core, &live.value);
                    if !errs.is_empty() {
                        return Err(ApiError::invalid("", "Event", name, &errs));
                    }
                    core
                }
                None => new,
            };
            object::meta_mut(&mut new).insert("resourceVersion".into(), json!(live.rv.to_string()));
            match self.finish_update(srid, &live, new, subresource, opts, &now) {
                Ok(Some(r)) if view_of.is_some() => return Ok((view(&r)?, false)),
                Ok(Some(r)) => return Ok((r, false)),
                Ok(None) => continue,
                Err(e) if view_of.is_some() => return Err(event_versions::view_error(e)),
                Err(e) => return Err(e),
            }
        }
    }

    /// rest.BeforeUpdate + strategy + validation + commit, including the
    /// "last finalizer removed from a deleting object" deletion
    /// (store.go Update: ShouldDeleteDuringUpdate -> errEmptiedFinalizers ->
    /// deleteWithoutFinalizers). `Ok(None)`: retry.
    fn finish_update(
        &self,
        rid: ResId,
        live: &Arc<Stored>,
        mut new: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
        now: &str,
    ) -> Result<Option<Arc<Stored>>, ApiError> {
        let def = crate::resources::def(rid);
        let old = &live.value;
        {
            let m = object::meta_mut(&mut new);
            // Namespace: for cluster-scoped kinds cleared; namespaced must match.
            if !def.namespaced {
                m.remove("namespace");
            } else if m
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                m.insert("namespace".into(), json!(meta_str(old, "namespace")));
            }
        }
        strategy::apply_defaults(def, &mut new);
        let attrs = crate::admission::Attributes {
            def,
            operation: crate::admission::Operation::Update,
            subresource,
            old: Some(old),
            dry_run: opts.dry_run,
            user: opts.user.as_deref(),
            options: None,
            collection: false,
        };
        if def.group.is_empty() && def.resource == "pods" && subresource.is_none() {
            // Before the MutatingAdmissionPolicies, as kube-apiserver's
            // plugin order has it.
            strategy::default_toleration_seconds(&mut new);
        }
        // MutatingAdmissionPolicy: before the strategy, validation and the
        // "no new finalizers while deleting" rule, as in kube-apiserver.
        self.mutating_admission(&attrs, &mut new)?;
        strategy::prepare_for_update(def, &mut new, old, subresource, now);
        let service_update =
            def.group.is_empty() && def.resource == "services" && subresource.is_none();
        let mut allocated = crate::networking::Allocated::default();
        if service_update {
            // A type change may need a cluster IP or node ports. Node ports
            // it drops stay allocated until the Service is deleted (released
            // here they could be handed out while a failed update keeps them).
            self.alloc
                .lock()
                .allocate_service(&mut new)
                .map_err(ApiError::internal)?;
            allocated = self.allocate_cluster_ip(&mut new, Some(old), opts.dry_run)?;
        }
        let result = self.finish_update_allocated(rid, live, new, subresource, opts, now);
        if !matches!(result, Ok(Some(_))) {
            // Failed, or lost a race and will be retried: give back what this
            // attempt allocated.
            crate::networking::release_ips(self, &allocated.ips);
        }
        if service_update
            && !opts.dry_run
            && let Ok(Some(stored)) = &result
            && crate::networking::needs_cluster_ip(old)
            && !crate::networking::needs_cluster_ip(&stored.value)
        {
            // The update's txn.Commit: a Service that no longer needs a
            // cluster IP (ExternalName) gives its addresses back.
            crate::networking::release_ips(self, &crate::networking::held_ips(old));
        }
        result
    }

    /// The rest of [`Store::finish_update`]: metadata carried over,
    /// validation and commit.
    fn finish_update_allocated(
        &self,
        rid: ResId,
        live: &Arc<Stored>,
        mut new: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
        now: &str,
    ) -> Result<Option<Arc<Stored>>, ApiError> {
        let def = crate::resources::def(rid);
        let old = &live.value;
        let name = meta_str(old, "name").to_string();
        {
            let old_meta = object::meta(old).cloned().unwrap_or_default();
            let m = object::meta_mut(&mut new);
            if m.get("uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
                && let Some(u) = old_meta.get("uid")
            {
                m.insert("uid".into(), u.clone());
            }
            if let Some(c) = old_meta.get("creationTimestamp") {
                m.insert("creationTimestamp".into(), c.clone());
            }
            // An update can never remove/change a deletion timestamp.
            if let Some(d) = old_meta.get("deletionTimestamp") {
                m.insert("deletionTimestamp".into(), d.clone());
            }
            if let Some(g) = old_meta.get("deletionGracePeriodSeconds")
                && m.get("deletionGracePeriodSeconds")
                    .is_none_or(Value::is_null)
            {
                m.insert("deletionGracePeriodSeconds".into(), g.clone());
            }
            if subresource == Some("status") && def.group.is_empty() && def.resource == "pods" {
                // podStatusStrategy: the status endpoint cannot set a deletion timestamp.
                match old_meta.get("deletionTimestamp") {
                    Some(d) => {
                        m.insert("deletionTimestamp".into(), d.clone());
                    }
                    None => {
                        m.remove("deletionTimestamp");
                    }
                }
            }
            m.remove("selfLink");
        }
        let mut errs = crate::validation::validate_meta_on_update(def, &new, old, subresource);
        if subresource.is_none() {
            errs.extend(crate::spec_validation::validate_update(def, &new, old));
            errs.extend(crate::networking::validate_update(def, &new, old));
        } else if subresource == Some("status") {
            errs.extend(crate::spec_validation::validate_status_update(
                def, &new, old,
            ));
        }
        if Some(rid) == crds_rid() && subresource.is_none() {
            let e = crate::crd::validate_crd(&new);
            if e.is_empty() {
                let mut st = crate::crd::status(&new, now);
                if let Some(c) = old.pointer("/status/conditions") {
                    st["conditions"] = c.clone();
                }
                new["status"] = st;
            }
            errs.extend(e);
        }
        if let Some(crd) = self.custom(rid) {
            errs.extend(crd.admit(&mut new, Some(old)));
        }
        errs.extend(crate::admission::prepare(def, &mut new));
        if !errs.is_empty() {
            return Err(ApiError::invalid(def.group, def.kind, &name, &errs));
        }
        // ValidatingAdmissionPolicy: the registry's updateValidation.
        let attrs = crate::admission::Attributes {
            def,
            operation: crate::admission::Operation::Update,
            subresource,
            old: Some(old),
            dry_run: opts.dry_run,
            user: opts.user.as_deref(),
            options: None,
            collection: false,
        };
        self.validating_admission(&attrs, Some(&new), &opts.warnings)?;
        let mut new = canonicalize(new, def.kind, &def.api_version());
        // No-op writes do not bump the resourceVersion (etcd3 GuaranteedUpdate):
        // compared as stored, so an update that only adds empty omitempty
        // slices or maps changes nothing.
        drop_empty_omitempty(&mut new);
        if new == live.value {
            return Ok(Some(live.clone()));
        }
        let deleting = object::meta(old).is_some_and(|m| m.contains_key("deletionTimestamp"));
        let grace_zero = object::meta(old)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .is_none_or(|g| g == 0);
        if deleting
            && grace_zero
            && finalizers(&new).is_empty()
            && !namespace_spec_finalizers(def, &new)
        {
            // deleteWithoutFinalizers: the stored object is deleted (its
            // watchers see it with the finalizers it had), and the client
            // gets the object of its request, "as clients expect an updated
            // object if a PUT succeeded".
            let answer = Stored::new(new, live.rv)?;
            if opts.dry_run {
                return Ok(Some(answer));
            }
            return match self.commit_delete(rid, live)? {
                Some(_) => Ok(Some(answer)),
                None => Ok(None),
            };
        }
        if opts.dry_run {
            return Stored::new(new, live.rv).map(Some);
        }
        self.commit_update(rid, live, new)
    }

    // --------------------------------------------------------------- delete

    /// DELETE of one object (store.go Delete + rest.BeforeDelete).
    pub fn delete(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<DeleteOutcome, ApiError> {
        key_name(name)?;
        if let Some(core) = event_versions::storage_of(rid) {
            return match self
                .delete(core, ns, name, opts)
                .map_err(event_versions::view_error)?
            {
                DeleteOutcome::Deleted(s) => Ok(DeleteOutcome::Deleted(view(&s)?)),
                DeleteOutcome::Pending(s) => Ok(DeleteOutcome::Pending(view(&s)?)),
            };
        }
        let def = crate::resources::def(rid);
        // (Negative grace periods count as 1 s: see graceful_period.)
        if let Some(p) = &opts.propagation_policy
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                &[FieldError::not_supported(
                    "propagationPolicy",
                    json!(p),
                    &["Foreground", "Background", "Orphan", "nil"],
                )
                .named()],
            ));
        }
        loop {
            let live = self.get(rid, ns, name)?;
            let lm = object::meta(&live.value).cloned().unwrap_or_default();
            if let Some(uid) = &opts.precondition_uid {
                let have = lm.get("uid").and_then(Value::as_str).unwrap_or("");
                if uid != have {
                    return Err(ApiError::conflict(
                        &GroupResource::new(def.group, def.kind),
                        name,
                        &format!(
                            "the UID in the precondition ({uid}) does not match the UID in record ({have}). The object might have been deleted and then recreated"
                        ),
                    ));
                }
            }
            if let Some(rv) = &opts.precondition_rv {
                let have = live.rv.to_string();
                if *rv != have {
                    return Err(ApiError::conflict(
                        &GroupResource::new(def.group, def.kind),
                        name,
                        &format!(
                            "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({have}). The object might have been modified"
                        ),
                    ));
                }
            }
            let deleting = lm.contains_key("deletionTimestamp");
            // ValidatingAdmissionPolicy: the registry's deleteValidation, on
            // the stored object, unless a graceful deletion is pending and
            // no shorter grace period is asked for (rest.BeforeDelete).
            let pending_grace = lm
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .filter(|g| deleting && *g > 0);
            let graceful_pending = pending_grace
                .is_some_and(|cur| opts.grace_period_seconds.is_none_or(|g| g.max(0) >= cur));
            if !graceful_pending {
                let options = opts.admission_options();
                self.validating_admission(
                    &crate::admission::Attributes {
                        def,
                        operation: crate::admission::Operation::Delete,
                        subresource: None,
                        old: Some(&live.value),
                        dry_run: opts.dry_run,
                        user: opts.user.as_deref(),
                        options: Some(&options),
                        collection: opts.collection,
                    },
                    None,
                    &opts.warnings,
                )?;
            }
            // The namespace registry keeps a namespace while spec.finalizers
            // is non-empty (pkg/registry/core/namespace/storage/storage.go).
            let spec_fins = namespace_spec_finalizers(def, &live.value);
            let graceful_period = self.graceful_period(def, &live.value, opts);
            // Garbage-collector finalizers requested by the propagation policy
            // (deletionFinalizersForGarbageCollection); only before deletion
            // has started.
            let mut fins = finalizers(&live.value);
            let mut fins_changed = false;
            // Without a policy, the strategy's DefaultGarbageCollectionPolicy:
            // batch/v1 Jobs and v1 ReplicationControllers orphan, "for
            // backwards compatibility".
            let orphans_by_default = (def.group == "batch" && def.resource == "jobs")
                || (def.group.is_empty() && def.resource == "replicationcontrollers");
            let policy = opts
                .propagation_policy
                .clone()
                .or_else(|| orphans_by_default.then(|| "Orphan".to_string()));
            if !deleting && let Some(p) = &policy {
                let before = fins.clone();
                fins.retain(|f| f != "orphan" && f != "foregroundDeletion");
                match p.as_str() {
                    "Orphan" => fins.push("orphan".into()),
                    "Foreground" => fins.push("foregroundDeletion".into()),
                    _ => {}
                }
                let a: std::collections::BTreeSet<_> = before.iter().collect();
                let b: std::collections::BTreeSet<_> = fins.iter().collect();
                fins_changed = a != b;
            }
            if deleting {
                // Graceful deletion pending: only a shorter grace period can
                // be requested; with finalizers, nothing changes.
                let cur_grace = lm
                    .get("deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let shorter = opts
                    .grace_period_seconds
                    .map(|g| g.max(0))
                    .filter(|g| *g < cur_grace);
                if cur_grace > 0
                    && let Some(g) = shorter
                {
                    let mut new = live.value.clone();
                    let m = object::meta_mut(&mut new);
                    let ts = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(g);
                    m.insert("deletionTimestamp".into(), json!(object::format_time(ts)));
                    m.insert("deletionGracePeriodSeconds".into(), json!(g));
                    let new = canonicalize(new, def.kind, &def.api_version());
                    if opts.dry_run {
                        return Ok(DeleteOutcome::Pending(live.clone()));
                    }
                    // updateForGracefulDeletionAndFinalizers writes the
                    // shorter period first; at zero without finalizers the
                    // object is then deleted (watchers see MODIFIED, DELETED).
                    match self.commit_update(rid, &live, new)? {
                        Some(s) if g == 0 && fins.is_empty() && !spec_fins => {
                            return self.delete_now(rid, &s, opts);
                        }
                        Some(s) => return Ok(DeleteOutcome::Pending(s)),
                        None => continue,
                    }
                }
                if fins.is_empty() && cur_grace == 0 && !spec_fins {
                    return self.delete_now(rid, &live, opts);
                }
                return Ok(DeleteOutcome::Pending(live));
            }
            // The namespace registry always turns a namespace Terminating on
            // the first DELETE (pkg/registry/core/namespace/storage/storage.go).
            let is_namespace = def.group.is_empty() && def.resource == "namespaces";
            if fins.is_empty() && graceful_period == 0 && !spec_fins && !is_namespace {
                return self.delete_now(rid, &live, opts);
            }
            // Mark as deleting (markAsDeleting / BeforeDelete for graceful).
            let mut new = live.value.clone();
            {
                let m = object::meta_mut(&mut new);
                let ts = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(graceful_period);
                m.insert("deletionTimestamp".into(), json!(object::format_time(ts)));
                if !is_namespace {
                    // (the namespace registry sets no grace period)
                    m.insert("deletionGracePeriodSeconds".into(), json!(graceful_period));
                }
                if let Some(g) = m.get("generation").and_then(Value::as_i64)
                    && g > 0
                {
                    m.insert("generation".into(), json!(g + 1));
                }
                if fins_changed {
                    m.insert("finalizers".into(), json!(fins));
                }
            }
            if def.group.is_empty() && def.resource == "namespaces" {
                new["status"]["phase"] = json!("Terminating");
            }
            let new = canonicalize(new, def.kind, &def.api_version());
            if opts.dry_run {
                return Stored::new(new, live.rv).map(DeleteOutcome::Pending);
            }
            match self.commit_update(rid, &live, new)? {
                Some(s) => return Ok(DeleteOutcome::Pending(s)),
                None => continue,
            }
        }
    }

    fn delete_now(
        &self,
        rid: ResId,
        live: &Arc<Stored>,
        opts: &DeleteOptions,
    ) -> Result<DeleteOutcome, ApiError> {
        if opts.dry_run {
            return Ok(DeleteOutcome::Deleted(live.clone()));
        }
        match self.commit_delete(rid, live)? {
            Some(s) => Ok(DeleteOutcome::Deleted(s)),
            None => {
                // Changed meanwhile: start over.
                let def = crate::resources::def(rid);
                let (ns, name) = live.key();
                self.delete(rid, &ns, &name, opts).map_err(|e| {
                    if e.code == 404 {
                        ApiError::not_found(&def.group_resource(), &name)
                    } else {
                        e
                    }
                })
            }
        }
    }

    /// The grace period a first DELETE gets: 0 except for pods when graceful
    /// pod deletion is enabled (podStrategy.CheckGracefulDelete).
    fn graceful_period(&self, def: &ResourceDef, obj: &Value, opts: &DeleteOptions) -> i64 {
        if !(def.group.is_empty() && def.resource == "pods" && self.cfg.pod_graceful_deletion) {
            return 0;
        }
        let scheduled = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let phase = obj
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !scheduled || phase == "Succeeded" || phase == "Failed" {
            return 0;
        }
        let spec = obj
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30);
        match opts.grace_period_seconds {
            Some(g) if g < 0 => 1,
            Some(g) => g,
            None => spec,
        }
    }

    /// `pods/binding` (pkg/registry/core/pod/storage/storage.go BindingREST
    /// → assignPod → setPodHostAndAnnotations): sets `spec.nodeName`, the
    /// binding's annotations and the `PodScheduled=True` condition in one
    /// write that bypasses the spec/status split and the field manager.
    pub fn bind_pod(
        &self,
        ns: &str,
        name: &str,
        node: &str,
        annotations: Option<&serde_json::Map<String, Value>>,
        precondition_uid: Option<&str>,
        dry_run: bool,
    ) -> Result<Arc<Stored>, ApiError> {
        let rid = resources::find("", "v1", "pods").unwrap_or(0);
        let def = crate::resources::def(rid);
        let binding_gr = GroupResource::new("", "pods/binding");
        loop {
            let live = self.get(rid, ns, name)?;
            if let Some(uid) = precondition_uid.filter(|u| !u.is_empty())
                && meta_str(&live.value, "uid") != uid
            {
                return Err(ApiError::conflict(
                    &binding_gr,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&live.value, "uid")
                    ),
                ));
            }
            if object::meta(&live.value).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                return Err(ApiError::conflict(
                    &binding_gr,
                    name,
                    &format!("pod {name} is being deleted, cannot be assigned to a host"),
                ));
            }
            let current = live
                .value
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !current.is_empty() {
                return Err(ApiError::conflict(
                    &binding_gr,
                    name,
                    &format!(
                        "pod {name} is already assigned to node {}",
                        crate::goquote::quote(current)
                    ),
                ));
            }
            if live
                .value
                .pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty())
            {
                return Err(ApiError::conflict(
                    &binding_gr,
                    name,
                    &format!("pod {name} has non-empty .spec.schedulingGates"),
                ));
            }
            let mut new = live.value.clone();
            new["spec"]["nodeName"] = json!(node);
            if let Some(a) = annotations.filter(|a| !a.is_empty()) {
                let m = object::meta_mut(&mut new);
                let ann = m.entry("annotations").or_insert_with(|| json!({}));
                if !ann.is_object() {
                    *ann = json!({});
                }
                if let Some(am) = ann.as_object_mut() {
                    for (k, v) in a {
                        am.insert(k.clone(), v.clone());
                    }
                }
            }
            // podutil.UpdatePodCondition: a changed status gets a new
            // lastTransitionTime.
            let now = object::now_string();
            let status = new
                .as_object_mut()
                .map(|m| m.entry("status").or_insert_with(|| json!({})));
            if let Some(status) = status {
                if !status.is_object() {
                    *status = json!({});
                }
                let conds = status
                    .as_object_mut()
                    .map(|m| m.entry("conditions").or_insert_with(|| json!([])));
                if let Some(Value::Array(cs)) = conds {
                    match cs
                        .iter_mut()
                        .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
                    {
                        Some(c) => {
                            if c.get("status").and_then(Value::as_str) != Some("True") {
                                c["lastTransitionTime"] = json!(now);
                            }
                            c["status"] = json!("True");
                            if let Some(m) = c.as_object_mut() {
                                m.remove("reason");
                                m.remove("message");
                            }
                        }
                        None => cs.push(json!({
                            "type": "PodScheduled",
                            "status": "True",
                            "lastProbeTime": null,
                            "lastTransitionTime": now,
                        })),
                    }
                }
            }
            let new = canonicalize(new, def.kind, &def.api_version());
            if dry_run {
                return Stored::new(new, live.rv);
            }
            if let Some(s) = self.commit_update(rid, &live, new)? {
                return Ok(s);
            }
        }
    }

    /// DELETE on a collection: deletes each matching object with the normal
    /// per-object semantics; returns their states.
    pub fn delete_collection(
        &self,
        rid: ResId,
        ns: Option<&str>,
        label: &LabelSelector,
        field: &FieldSelector,
        opts: &DeleteOptions,
    ) -> Result<Vec<Arc<Stored>>, ApiError> {
        let (items, _) = self.snapshot(rid, ns);
        let mut out = Vec::new();
        for it in items {
            if !label.matches(object::labels(&it.value)) || !field.matches(&it.value) {
                continue;
            }
            let (n, name) = it.key();
            let opts = DeleteOptions {
                collection: true,
                ..opts.clone()
            };
            match self.delete(rid, &n, &name, &opts) {
                Ok(DeleteOutcome::Deleted(s)) | Ok(DeleteOutcome::Pending(s)) => out.push(s),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Seeds an object as if created by the system (used for the built-in
    /// namespaces); bypasses admission.
    pub fn seed(&self, rid: ResId, obj: Value) -> Result<Arc<Stored>, ApiError> {
        let def = crate::resources::def(rid);
        let mut obj = obj;
        let now = object::now_string();
        let allocated = self.before_create(rid, &mut obj, &now, &WriteOptions::default())?;
        let obj = canonicalize(obj, def.kind, &def.api_version());
        self.finish_allocation(allocated, self.commit_create(rid, obj, false, false))
    }

    pub fn storage_protection(&self) -> bool {
        self.cfg.storage_protection.load(Ordering::Relaxed)
    }

    pub fn set_storage_protection(&self, on: bool) {
        self.cfg.storage_protection.store(on, Ordering::Relaxed)
    }
}

/// Whether the strategy's name generator appends random characters to
/// `generateName` (`names.SimpleNameGenerator`); IPAddresses take the
/// prefix as the name.
fn generates_names(def: &ResourceDef) -> bool {
    !(def.group == "networking.k8s.io" && def.resource == "ipaddresses")
}

/// The resource whose storage `rid` uses (itself unless it is a view).
fn storage_rid(rid: ResId) -> ResId {
    event_versions::storage_of(rid).unwrap_or(rid)
}

/// A stored core/v1 Event as its events.k8s.io/v1 view.
fn view(s: &Arc<Stored>) -> Result<Arc<Stored>, ApiError> {
    Stored::new(event_versions::core_to_v1(&s.value), s.rv)
}

/// Whether a namespace still has `spec.finalizers` (the namespace
/// controller's "kubernetes" finalizer).
fn namespace_spec_finalizers(def: &ResourceDef, obj: &Value) -> bool {
    def.group.is_empty()
        && def.resource == "namespaces"
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

fn crds_rid() -> Option<ResId> {
    resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

fn namespaces_rid() -> ResId {
    resources::find("", "v1", "namespaces").unwrap_or(0)
}

/// Drops fields the kind's schema does not declare and writes quantities
/// as they marshal, as decoding into the typed object does on a real
/// server.
fn prune(def: &ResourceDef, obj: &mut Value) {
    let dropped =
        crate::openapi::schema::prune_unknown_fields(def.group, def.version, def.kind, obj);
    crate::openapi::schema::canonicalize_quantities(def.group, def.version, def.kind, obj);
    if !dropped.is_empty() {
        tracing::debug!(kind = def.kind, fields = ?dropped, "dropped unknown fields");
    }
}

fn list_options_invalid(e: FieldError) -> ApiError {
    ApiError::invalid("meta.k8s.io", "ListOptions", "", &[e])
}

/// Checks `kind`/`apiVersion` of a request body against the endpoint (the
/// decoder defaults them when absent).
fn check_body(def: &ResourceDef, body: Value) -> Result<Value, ApiError> {
    let Value::Object(m) = body else {
        return Err(ApiError::bad_request(
            "the object provided is unrecognized (must be of type ".to_string() + def.kind + ")",
        ));
    };
    let kind = m
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let av = m
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let want_av = def.api_version();
    if !kind.is_empty() && kind != def.kind {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): {} in version {:?} cannot be handled as a {}",
            def.kind, kind, av, def.kind
        )));
    }
    if !av.is_empty() && av != want_av {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({want_av})"
        )));
    }
    if let Some(md) = m.get("metadata")
        && !md.is_object()
        && !md.is_null()
    {
        return Err(ApiError::bad_request(
            "metadata: must be an object".to_string(),
        ));
    }
    let mut m = m;
    if kind.is_empty() {
        m.insert("kind".into(), json!(def.kind));
    }
    if av.is_empty() {
        m.insert("apiVersion".into(), json!(want_av));
    }
    Ok(Value::Object(m))
}

fn patch_error(_def: &ResourceDef, _name: &str, e: patch::PatchError) -> ApiError {
    ApiError::from_status(e.code(), e.to_status())
}

//! The controller runtime every protection controller uses, shaped after
//! kube-rs' controller-rs (a context, a small reconcile, an error policy)
//! and kube-controller-manager's per-controller packages (a controller crate
//! holds its rule and its facts; the plumbing lives here):
//!
//! * [`Backoff`]: per-key exponential retry delays;
//! * [`Expectations`]: "our own write is not in the cache yet";
//! * [`Observer`] and [`PerObject`]: per-object memory and the Terminating
//!   gauge kept exact across watch events and re-lists;
//! * [`Executor`]: one decided finalizer write and its events, with
//!   [`fight`]'s back-off when another writer keeps removing it;
//! * [`inuse`]: the in-use engine every "keep the finalizer while something
//!   uses the object" controller is a rule on, with its users index
//!   ([`users`]), per-scope live confirmation batches ([`batch`]) and its
//!   work queue ([`queue`], which service-lb-cleanup runs on too);
//! * the skeleton: [`main_watch`] (watch → reflector → observer),
//!   [`settled_keys`], [`resync_stream`], [`ready_when_synced`] and
//!   [`retry_delay`] (the error policy).

pub mod backoff;
pub mod batch;
pub mod executor;
pub mod expectations;
pub mod fight;
pub mod inuse;
pub mod observer;
pub mod queue;
pub mod users;

use std::collections::HashMap;
use std::fmt::{Debug, Display};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use backoff::Backoff;
pub use executor::{Executor, Step};
pub use expectations::Expectations;
pub use observer::{EventMemory, Observer, PerObject};

use crate::controllers::{ControllerContext, ControllerError, ReadySignal};
use crate::finalizer::PhasedFinalizer;
use crate::release::GateDecl;

/// Why an in-use controller's reconcile failed (retried with the per-object
/// backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Finalizer(#[from] crate::FinalizerError),
    /// The live confirmation before an irreversible removal failed: `what`
    /// names the list ("pods in namespace ns", "persistentvolumeclaims").
    #[error("live list of {what} failed: {source}")]
    LiveList {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A rule's own write after its plan ([`inuse::Rule::after`]) failed:
    /// `what` names it ("status of servicecidr a").
    #[error("writing the {what} failed: {source}")]
    Write {
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// How an in-use controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Our finalizer name.
    pub finalizer: String,
    /// Every this often, re-check every object upstream's informer resync
    /// would (being deleted with our finalizer, or lacking it); zero disables.
    pub resync_period: Duration,
}

impl Settings {
    /// The settings of `info`'s controller under `profile`: its finalizer
    /// (checked against the API's name rules) and the resync period.
    pub fn for_profile(
        info: &crate::ControllerInfo,
        profile: crate::FinalizerProfile,
        resync_period: Duration,
    ) -> Result<Settings, crate::finalizer::FinalizerError> {
        let finalizer = info.finalizer.get(profile).to_string();
        crate::finalizer::validate_finalizer_name(&finalizer)?;
        Ok(Settings {
            finalizer,
            resync_period,
        })
    }
}

/// Why a controller crate's descriptors could not be built from the flags.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The finalizer the profile names is not a valid finalizer name.
    #[error(transparent)]
    Finalizer(#[from] crate::FinalizerError),
}

/// The descriptor of `info`'s controller under `profile`, re-checking every
/// `resync_period` (zero: never): `run` starts it with its [`Settings`].
pub fn descriptor<F, Fut>(
    info: &'static crate::ControllerInfo,
    profile: crate::FinalizerProfile,
    resync_period: Duration,
    run: F,
) -> Result<crate::ControllerDescriptor, ConfigError>
where
    F: FnOnce(ControllerContext, Settings) -> Fut + Send + 'static,
    Fut: Future<Output = crate::controllers::ControllerResult> + Send + 'static,
{
    let settings = Settings::for_profile(info, profile, resync_period)?;
    Ok(crate::ControllerDescriptor {
        info,
        run: Box::new(move |ctx| Box::pin(run(ctx, settings))),
    })
}

/// Default of every controller crate's resync period flag.
pub const DEFAULT_RESYNC_PERIOD: Duration = Duration::from_secs(300);

/// `--…-resync-period`'s parser: [`crate::duration::RESYNC_PERIOD`].
pub fn resync_period_arg(s: &str) -> Result<Duration, String> {
    crate::duration::RESYNC_PERIOD.parse(s)
}

/// Declares a controller crate's flags, `Options`: one resync period flag
/// (default [`DEFAULT_RESYNC_PERIOD`], parsed by [`resync_period_arg`]),
/// flattened into `protection-manager run` by the manager's table. The doc
/// comments given become the struct's and the flag's help; `id` is the
/// flag's clap id (unique across the manager's flattened flags).
///
/// ```ignore
/// protection_core::resync_options! {
///     /// Flags of the widget controller.
///     group = "widget-protection",
///     /// How often widget-protection re-checks every widget.
///     id = "widget_resync_period",
///     flag = "widget-resync-period",
/// }
///
/// A crate with one controller adds `controller = INFO => controller::run,`
/// and gets the rest of what the manager's table reads too: `INFOS`,
/// `descriptors(&Options, FinalizerProfile)` (the controller's
/// [`descriptor`] with the flag's period), `ConfigError` and
/// `DEFAULT_RESYNC_PERIOD`.
/// ```
#[macro_export]
macro_rules! resync_options {
    (
        $(#[doc = $doc:literal])*
        group = $group:literal,
        $(#[doc = $help:literal])*
        id = $id:literal,
        flag = $flag:literal,
        controller = $info:path => $run:path $(,)?
    ) => {
        $crate::resync_options! {
            $(#[doc = $doc])*
            group = $group,
            $(#[doc = $help])*
            id = $id,
            flag = $flag,
        }

        /// The controllers of this crate, as the manager knows them.
        pub const INFOS: &[&$crate::ControllerInfo] = &[&$info];

        /// Why the descriptors could not be built.
        pub use $crate::runtime::ConfigError;

        /// Default of the resync period flag.
        pub use $crate::runtime::DEFAULT_RESYNC_PERIOD;

        /// The controller of this crate, from its own flags.
        pub fn descriptors(
            opts: &Options,
            profile: $crate::FinalizerProfile,
        ) -> ::std::result::Result<
            ::std::vec::Vec<$crate::ControllerDescriptor>,
            $crate::runtime::ConfigError,
        > {
            ::std::result::Result::Ok(::std::vec![$crate::runtime::descriptor(
                &$info,
                profile,
                opts.resync_period,
                $run,
            )?])
        }

        /// The controller is described in both profiles (each finalizer
        /// name is one the API server takes), under its own name.
        #[cfg(test)]
        #[test]
        fn the_controller_is_described_in_both_profiles() {
            for profile in [
                $crate::FinalizerProfile::Project,
                $crate::FinalizerProfile::Upstream,
            ] {
                let d = descriptors(&Options::default(), profile)
                    .unwrap_or_else(|e| panic!("{profile:?}: {e}"));
                let names: ::std::vec::Vec<&str> = d.iter().map(|d| d.name).collect();
                assert_eq!(names, [$info.name], "{profile:?}");
            }
        }
    };
    (
        $(#[doc = $doc:literal])*
        group = $group:literal,
        $(#[doc = $help:literal])*
        id = $id:literal,
        flag = $flag:literal $(,)?
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, clap::Args)]
        #[group(id = $group)]
        pub struct Options {
            $(#[doc = $help])*
            #[arg(
                id = $id,
                long = $flag,
                default_value = "5m",
                value_parser = $crate::runtime::resync_period_arg
            )]
            pub resync_period: ::std::time::Duration,
        }

        impl Default for Options {
            fn default() -> Self {
                Options {
                    resync_period: $crate::runtime::DEFAULT_RESYNC_PERIOD,
                }
            }
        }

        /// The flag's default, its forms and client-go's floor (issue 27:
        /// `1ns` was taken, a resync that spins a core).
        #[cfg(test)]
        #[test]
        fn the_resync_flag_takes_zero_or_at_least_a_second() {
            use clap::Parser;
            #[derive(Parser)]
            struct Cli {
                #[command(flatten)]
                o: Options,
            }
            let period = |v: &str| {
                Cli::try_parse_from(["x", &format!("--{}={v}", $flag)])
                    .map(|c| c.o.resync_period)
                    .map_err(|e| e.to_string())
            };
            assert_eq!(
                Cli::try_parse_from(["x"]).unwrap().o.resync_period,
                $crate::runtime::DEFAULT_RESYNC_PERIOD
            );
            assert_eq!(period("0"), Ok(::std::time::Duration::ZERO));
            assert_eq!(period("1s"), Ok(::std::time::Duration::from_secs(1)));
            assert_eq!(period("1m30s"), Ok(::std::time::Duration::from_secs(90)));
            for v in ["1ns", "999ms"] {
                let e = period(v).unwrap_err();
                assert!(
                    e.contains(concat!("--", $flag)) && e.contains("at least 1s"),
                    "{v}: {e}"
                );
            }
            let e = period("5").unwrap_err();
            assert!(e.contains("invalid duration \"5\""), "{e}");
        }
    };
}

/// Declares a new controller's release and the gate that phases its
/// finalizer's addition in on [`crate::release::phased_add_from`]'s train
/// (Alpha off at `since`, planned Beta on one release later, GA locked on
/// the release after; removal is never gated): the constants `$since`,
/// `$train`, `$gate` and `GATES` (the gates the controller reads). The doc
/// comments given become the constants'.
///
/// ```ignore
/// protection_core::phased_gate! {
///     /// The release that brings widget-protection.
///     since WIDGET_SINCE = (0, 6);
///     /// The train of the widget finalizer's addition.
///     train WIDGET_PHASED_ADD;
///     /// Gates the widget finalizer's addition.
///     gate WIDGET_GATE = "WidgetProtection";
/// }
/// ```
#[macro_export]
macro_rules! phased_gate {
    (
        $(#[doc = $since_doc:literal])*
        since $since:ident = ($major:literal, $minor:literal);
        $(#[doc = $train_doc:literal])*
        train $train:ident;
        $(#[doc = $gate_doc:literal])*
        gate $gate:ident = $name:literal;
    ) => {
        $(#[doc = $since_doc])*
        pub const $since: $crate::version::Version = $crate::version::Version::new($major, $minor);

        $(#[doc = $train_doc])*
        pub const $train: &[$crate::featuregate::FeatureSpec] =
            &$crate::release::phased_add_from($since);

        $(#[doc = $gate_doc])*
        pub const $gate: $crate::release::GateDecl = $crate::release::GateDecl {
            name: $name,
            history: $train,
        };

        /// The gates the controller reads.
        pub const GATES: &[$crate::release::GateDecl] = &[$gate];

        /// The train the release notes promise: absent before the
        /// controller's release, Alpha off at it, Beta on one release
        /// later, GA locked on the release after.
        #[cfg(test)]
        #[test]
        fn the_gate_is_alpha_off_at_its_release_then_beta_on_then_ga_locked() {
            use $crate::featuregate::{FeatureGates, Stage};
            use $crate::version::Version;
            let at = |minor: u32| {
                let registry = $crate::release::registry(GATES).expect("the gate registers");
                FeatureGates::new(registry, Version::new($major, minor))
            };
            let row = |minor: u32| {
                at(minor)
                    .table()
                    .into_iter()
                    .find(|r| r.name == $name)
                    .map(|r| (r.stage, r.default, r.locked))
            };
            assert_eq!(row($minor), Some((Stage::Alpha, false, false)));
            assert_eq!(row($minor + 1), Some((Stage::Beta, true, false)));
            assert_eq!(row($minor + 2), Some((Stage::GA, true, true)));
            if let Some(before) = ($minor as u32).checked_sub(1) {
                assert!(!at(before).enabled($name), "on before its release");
            }
        }
    };
}

/// The controller's finalizer, phased by `gate`: added only while the gate
/// is on at the running (or emulated) release, always removed; each write
/// one guarded JSON patch, counted in the controller's metrics.
pub fn phased_finalizer(
    ctx: &ControllerContext,
    finalizer: &str,
    gate: &GateDecl,
    field_manager: &str,
) -> Result<PhasedFinalizer, ControllerError> {
    let add_enabled = ctx.gates.enabled(gate.name);
    let f = PhasedFinalizer::new(finalizer, add_enabled)
        .map_err(|e| ControllerError::new(ctx.name, e))?
        .with_metrics(ctx.metrics.clone())
        .with_field_manager(field_manager);
    tracing::info!(
        controller = ctx.name,
        finalizer,
        gate = gate.name,
        add_enabled,
        "starting controller"
    );
    Ok(f)
}

/// While the cluster does not serve a controller's API there is nothing to
/// sync and no reason to hold the manager unready: reports ready with
/// `note` (shown by `/readyz?verbose`) and waits `every` before the caller
/// looks again. Answers false once shutdown was requested.
pub async fn idle_while_unserved(
    ctx: &crate::ControllerContext,
    note: &str,
    every: std::time::Duration,
) -> bool {
    ctx.ready.set_note(Some(note.into()));
    ctx.ready.set(true);
    tokio::select! {
        _ = ctx.shutdown.cancelled() => {
            ctx.ready.set(false);
            false
        }
        _ = tokio::time::sleep(every) => true,
    }
}

/// Asks discovery (`probe`) until the API server answers, retrying with a
/// doubling delay (at most 30 s) and a warning naming the controller;
/// `None` on shutdown.
pub async fn discover<T, Fut>(
    ctx: &crate::ControllerContext,
    mut probe: impl FnMut() -> Fut,
) -> Option<T>
where
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match probe().await {
            Ok(v) => return Some(v),
            Err(e) => {
                tracing::warn!(controller = ctx.name, error = %e, retry_in = ?delay, "API discovery failed; retrying");
                tokio::select! {
                    _ = ctx.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
}

/// The store key of an object: `name` (cluster-scoped) or `namespace/name`.
pub fn object_key<K: Resource>(obj: &K) -> String {
    match obj.meta().namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", obj.name_any()),
        _ => obj.name_any(),
    }
}

/// Objects per page of a watch's list (and re-list): kube's default, 500.
/// Measured for issue 11: 100 cut the manager's peak RSS at 2k PVs + 2k
/// PVCs + 2k pods by 2.7 MiB (28.8 → 26.1 MiB; a page is read whole before
/// it is decoded), but on the cost-modelled API server (`bench_pv
/// --cost-model real-1.36`, 10k + 10k + 20k) the caches took 20.6 s to sync
/// instead of 2.1 s (5x the LIST requests, each paying the server's per-request
/// cost), and the whole back-fill fell from 0.90 to 0.62 of the server's
/// patch throughput. The back-fill wins.
pub const LIST_PAGE_SIZE: u32 = 500;

/// One live round's LIST of `api`, page by page ([`LIST_PAGE_SIZE`]
/// objects; `lp` adds selectors): `each` takes every page as it arrives, so
/// a caller that keeps only what it needs never holds the whole list. An
/// error names the list as `what` ("pods in namespace ns").
pub async fn list_pages<K>(
    api: &Api<K>,
    lp: &kube::api::ListParams,
    what: &str,
    mut each: impl FnMut(Vec<K>),
) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut lp = lp.clone().limit(LIST_PAGE_SIZE);
    loop {
        let page = api
            .list(&lp)
            .await
            .map_err(|source| ReconcileError::LiveList {
                what: what.to_string(),
                source,
            })?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        each(page.items);
        match next {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(()),
        }
    }
}

/// Every object of `api` ([`list_pages`], kept).
pub async fn list_all<K>(
    api: &Api<K>,
    lp: &kube::api::ListParams,
    what: &str,
) -> Result<Vec<K>, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut out = Vec::new();
    list_pages(api, lp, what, |items| out.extend(items)).await?;
    Ok(out)
}

/// The watcher configuration of the controllers' watches: kube's default
/// with [`LIST_PAGE_SIZE`].
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// A controller's main watch: every object of `api` (managedFields dropped:
/// nothing reads them, and they are most of an object's memory), into the
/// reflector `writer`, then through `observer` (which keeps `state` and the
/// Terminating gauge exact). Yields the watch events for the controller's
/// trigger filter.
pub fn main_watch<K, V>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    observer: Observer,
    state: Arc<PerObject<V>>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
    V: Clone + Send + Sync + 'static,
{
    let observer = Mutex::new(observer);
    watcher(api, watch_config())
        .default_backoff()
        .modify(|o: &mut K| o.meta_mut().managed_fields = None)
        .reflect(writer)
        .inspect_ok(move |ev| observer.lock().observe(ev, &state))
}

/// The keys to reconcile from a [`main_watch`] stream, each yielded once
/// the store holds what it names. An `Apply`'s key comes at once (the
/// reflector wrote the object before passing the event on); a re-list's
/// keys come at its `InitDone` ([`round_robin_namespaces`]): until then kube's store
/// still holds the state before the re-list (the reflector swaps its
/// buffer in at `InitDone`), so a reconcile would read an object created
/// during the watch gap as gone, one deleted in it as alive, and nothing
/// would trigger either again (kube-runtime's `applied_objects` yields them
/// at once; its Controller's 1 ms scheduler tick happened to hide that).
/// Only objects `wanted` selects are keyed; watch errors pass through.
pub fn settled_keys<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    wanted: impl Fn(&K) -> bool + Send + 'static,
) -> impl Stream<Item = Result<String, watcher::Error>> + Send + 'static
where
    K: Resource + Send + 'static,
{
    // The re-list in progress: the keys it has listed so far.
    let mut relist: Option<Vec<String>> = None;
    events.flat_map(move |ev| {
        let out: Vec<Result<String, watcher::Error>> = match ev {
            Err(e) => vec![Err(e)],
            Ok(watcher::Event::Apply(o)) => {
                if wanted(&o) {
                    vec![Ok(object_key(&o))]
                } else {
                    vec![]
                }
            }
            Ok(watcher::Event::Delete(_)) => vec![],
            Ok(watcher::Event::Init) => {
                relist = Some(Vec::new());
                vec![]
            }
            Ok(watcher::Event::InitApply(o)) => {
                if wanted(&o) {
                    relist.get_or_insert_default().push(object_key(&o));
                }
                vec![]
            }
            Ok(watcher::Event::InitDone) => {
                round_robin_namespaces(relist.take().unwrap_or_default())
                    .into_iter()
                    .map(Ok)
                    .collect()
            }
        };
        stream::iter(out)
    })
}

/// A re-list's keys (`namespace/name`, in list order: by namespace) taken
/// round robin over their namespaces: the first of each namespace, then
/// the second of each, and so on (a cluster-scoped kind's keys keep their
/// order).
///
/// kube-apiserver serializes some of a namespace's writes: LimitRanger
/// (on by default) makes one live LIST of the namespace's LimitRanges when
/// its 30-second cache of them has lapsed and every write to the namespace
/// waits for it (one lookup per namespace at a time), and the ResourceQuota
/// plugin evaluates one batch of a namespace's writes at a time. In list
/// order, a back-fill's `--concurrency` writes all go to one or two
/// namespaces and wait on those lookups in turn: on kube-apiserver 1.36 a
/// back-fill of 2,000 claims in 100 namespaces, whose lookups had lapsed,
/// kept 28 PATCHes in flight and got 400/s. Spread over the namespaces,
/// the lookups run side by side.
pub fn round_robin_namespaces(keys: Vec<String>) -> Vec<String> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut order: Vec<(usize, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let ns = k.split_once('/').map_or("", |(ns, _)| ns);
            let n = seen.entry(ns).or_default();
            *n += 1;
            (*n, i)
        })
        .collect();
    order.sort_unstable();
    let mut keys: Vec<Option<String>> = keys.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(_, i)| keys[i].take())
        .collect()
}

/// Every `period`, a reconcile request for every cached object `wanted`
/// selects: upstream's informer resync (which replays an update for every
/// object; the handlers then enqueue those they want). Empty when `period`
/// is zero.
pub fn resync_stream<K>(
    store: Store<K>,
    period: Duration,
    wanted: impl Fn(&K) -> bool + Send + 'static,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    resync_stream_as(store, period, wanted, ())
}

/// [`resync_stream`] for a kind known at run time (`dt`).
pub fn resync_stream_as<K>(
    store: Store<K>,
    period: Duration,
    wanted: impl Fn(&K) -> bool + Send + 'static,
    dt: K::DynamicType,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    if period.is_zero() {
        return stream::empty().boxed();
    }
    stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
    .flat_map(move |()| {
        let refs: Vec<ObjectRef<K>> = store
            .state()
            .iter()
            .filter(|o| wanted(o))
            .map(|o| ObjectRef::from_obj_with(&**o, dt.clone()))
            .collect();
        tracing::debug!(objects = refs.len(), "resync");
        stream::iter(refs)
    })
    .boxed()
}

/// Marks the controller ready once every cache in `caches` has synced
/// (each flag true), unless `shutdown` comes first.
pub fn ready_when_synced(
    controller: &'static str,
    ready: ReadySignal,
    shutdown: CancellationToken,
    caches: Vec<watch::Receiver<bool>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let all = async {
            for mut rx in caches {
                if rx.wait_for(|v| *v).await.is_err() {
                    return false;
                }
            }
            true
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            synced = all => if synced {
                tracing::info!(controller, "caches synced");
                ready.set(true);
            }
        }
    })
}

/// The delay before a failed reconcile of `key` runs again: `after` when
/// the failure asked for one (a Retry-After, a fight's back-off), else the
/// key's next exponential back-off; the failure logged with it.
pub fn retry_delay(
    controller: &str,
    backoff: &Backoff,
    key: &str,
    err: &dyn Display,
    after: Option<Duration>,
) -> Duration {
    let delay = after.unwrap_or_else(|| backoff.next(key));
    tracing::warn!(controller, object = %key, error = %err, retry_in = ?delay, "reconcile failed; retrying");
    delay
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use kube::api::ObjectMeta;

    fn pv(name: &str, rv: &str, deleting: bool) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                deletion_timestamp: deleting.then(|| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default())
                }),
                ..ObjectMeta::default()
            },
            ..PersistentVolume::default()
        }
    }

    /// What the store held for each key when [`settled_keys`] yielded it.
    async fn seen_at_yield(
        events: Vec<watcher::Event<PersistentVolume>>,
    ) -> Vec<(String, Option<String>)> {
        let (store, writer) = reflector::store::<PersistentVolume>();
        let events = stream::iter(events.into_iter().map(Ok)).reflect(writer);
        settled_keys(events, |p: &PersistentVolume| {
            p.metadata.deletion_timestamp.is_some()
        })
        .map(|k| {
            let k = k.expect("no watch error");
            let rv = store
                .get(&ObjectRef::new(&k))
                .and_then(|p| p.metadata.resource_version.clone());
            (k, rv)
        })
        .collect()
        .await
    }

    /// A re-list after a watch gap: `old` was deleted in the gap, `new` was
    /// created (and deleted) in it. Their keys come once the store holds the
    /// re-listed objects, never while it still holds the state before.
    #[tokio::test]
    async fn a_relists_keys_come_once_the_store_holds_the_relisted_objects() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let seen = seen_at_yield(vec![
            Init,
            InitApply(pv("old", "1", false)),
            InitDone,
            Apply(pv("kept", "2", true)),
            // The watch expired (410): the watcher lists again.
            Init,
            InitApply(pv("old", "5", true)),
            InitApply(pv("quiet", "3", false)),
            InitApply(pv("new", "6", true)),
            InitDone,
            Apply(pv("new", "7", true)),
        ])
        .await;
        assert_eq!(
            seen,
            [
                ("kept".to_string(), Some("2".to_string())),
                ("old".to_string(), Some("5".to_string())),
                ("new".to_string(), Some("6".to_string())),
                ("new".to_string(), Some("7".to_string())),
            ]
        );
    }

    /// A back-fill's keys are spread over the namespaces: the first claim
    /// of each namespace comes before the second of any, each namespace's
    /// keep their list order, and a cluster-scoped kind's keys keep theirs.
    #[test]
    fn a_relists_keys_come_round_robin_over_their_namespaces() {
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert_eq!(
            round_robin_namespaces(keys(&["a/1", "a/2", "a/3", "b/1", "c/1", "c/2"])),
            keys(&["a/1", "b/1", "c/1", "a/2", "c/2", "a/3"])
        );
        assert_eq!(
            round_robin_namespaces(keys(&["pv-b", "pv-a", "pv-c"])),
            keys(&["pv-b", "pv-a", "pv-c"])
        );
        assert!(round_robin_namespaces(Vec::new()).is_empty());
    }
}

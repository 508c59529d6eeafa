//! Controller descriptors and the `--controllers` flag, with
//! kube-controller-manager's semantics:
//!
//! * `*` turns on every controller that is enabled by default;
//! * `name` turns one on, `-name` turns one off;
//! * the first entry naming a controller wins, `*` only decides for
//!   controllers no entry names, and without `*` nothing else runs;
//! * every entry (minus a leading `-`) must name a known controller (or an
//!   alias), else `"x" is not in the list of known controllers`.
//!
//! A controller that appeared in a later release than the emulated version
//! does not exist at that version: it is neither run nor accepted by name.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::events::EventRecorder;
use crate::featuregate::FeatureGates;
use crate::finalizer::FinalizerProfile;
use crate::metrics::ControllerMetrics;
use crate::release::GateDecl;
use crate::version::Version;

/// What a controller's run function returns when it stops on its own.
pub type ControllerResult = Result<(), ControllerError>;

/// A controller that could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[error("controller {controller}: {message}")]
pub struct ControllerError {
    pub controller: String,
    pub message: String,
}

impl ControllerError {
    pub fn new(controller: &str, message: impl fmt::Display) -> Self {
        ControllerError {
            controller: controller.to_string(),
            message: message.to_string(),
        }
    }
}

/// Starts a controller. It must return soon after `ctx.shutdown` is
/// cancelled, having stopped taking new work.
pub type RunFn = Box<dyn FnOnce(ControllerContext) -> BoxFuture<'static, ControllerResult> + Send>;

/// One cluster-wide RBAC rule a controller needs (the chart grants it when
/// the controller runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyRule {
    pub api_groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

/// A controller's finalizer under each [`FinalizerProfile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalizerNames {
    pub project: &'static str,
    pub upstream: &'static str,
}

impl FinalizerNames {
    pub fn get(self, profile: FinalizerProfile) -> &'static str {
        match profile {
            FinalizerProfile::Project => self.project,
            FinalizerProfile::Upstream => self.upstream,
        }
    }

    /// Whether `finalizer` is this controller's under some profile.
    pub fn owns(self, finalizer: &str) -> bool {
        finalizer == self.project || finalizer == self.upstream
    }
}

/// What the manager knows of a controller without starting it: enough for
/// `--controllers`, the gate registry, `explain` and the chart's RBAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    pub name: &'static str,
    /// Other accepted spellings (e.g. kube-controller-manager's long names).
    pub aliases: &'static [&'static str],
    pub enabled_by_default: bool,
    /// The release it appeared in.
    pub since: Version,
    /// Feature gates it reads, with their history: the binary's gate
    /// registry (and so `--feature-gates` and `feature-gates`) is the union
    /// of its controllers' gates.
    pub gates: &'static [GateDecl],
    /// The finalizer it owns.
    pub finalizer: FinalizerNames,
    /// The API access it needs, besides Events, Leases and the release
    /// record (which every controller's host needs).
    pub rbac: &'static [PolicyRule],
    /// The resources its finalizer is put on, for the release guard (which
    /// counts the objects a release before `since` would strand) and
    /// `strip-finalizers`. Empty when the kinds are not fixed (the rules
    /// controller's are whatever a rule names).
    pub finalizes: &'static [FinalizedResource],
}

/// A resource a controller's finalizer is put on (cluster-wide LIST).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalizedResource {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Served versions to try, preferred first.
    pub versions: &'static [&'static str],
    pub kind: &'static str,
    pub plural: &'static str,
    /// The finalizer on these objects stands for finalizers the controller
    /// put on other objects (a ProtectionRule's `rule-cleanup`: the rule's
    /// own finalizer may be on whatever kinds it protects). It is cleared by
    /// deleting the object (the controller first removes the others), never
    /// stripped: `strip-finalizers` refuses to, and the release guard's safe
    /// path says to delete them.
    pub cleared_by_deleting: bool,
}

impl PolicyRule {
    /// `verbs` on `resources` of `api_groups`.
    pub const fn new(
        api_groups: &'static [&'static str],
        resources: &'static [&'static str],
        verbs: &'static [&'static str],
    ) -> Self {
        PolicyRule {
            api_groups,
            resources,
            verbs,
        }
    }
}

impl PolicyRule {
    /// What a controller needs on the kind it finalizes: read and watch it,
    /// and `patch` for the guarded finalizer writes.
    pub const fn finalized(
        api_groups: &'static [&'static str],
        resources: &'static [&'static str],
    ) -> Self {
        PolicyRule::new(api_groups, resources, &["get", "list", "watch", "patch"])
    }

    /// What a controller needs on the kinds that use what it protects: list
    /// and watch them (its index and its live confirmation).
    pub const fn watched(
        api_groups: &'static [&'static str],
        resources: &'static [&'static str],
    ) -> Self {
        PolicyRule::new(api_groups, resources, &["list", "watch"])
    }
}

impl ControllerInfo {
    /// A controller on by default with one alias, no RBAC and no finalized
    /// resources yet (set them with struct update syntax).
    pub const fn new(
        name: &'static str,
        aliases: &'static [&'static str],
        since: Version,
        gates: &'static [GateDecl],
        (project, upstream): (&'static str, &'static str),
    ) -> Self {
        ControllerInfo {
            name,
            aliases,
            enabled_by_default: true,
            since,
            gates,
            finalizer: FinalizerNames { project, upstream },
            rbac: &[],
            finalizes: &[],
        }
    }
}

impl FinalizedResource {
    /// Objects of `kind` whose finalizer the controller strips when told to
    /// (never [`Self::cleared_by_deleting`]).
    pub const fn stripped(
        group: &'static str,
        versions: &'static [&'static str],
        kind: &'static str,
        plural: &'static str,
    ) -> Self {
        FinalizedResource {
            group,
            versions,
            kind,
            plural,
            cleared_by_deleting: false,
        }
    }

    /// `plural.group` (`plural` in the core group), as kubectl names it.
    pub fn display(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// One controller as the host knows it: its [`ControllerInfo`] and how to
/// start it.
pub struct ControllerDescriptor {
    pub info: &'static ControllerInfo,
    pub run: RunFn,
}

impl std::ops::Deref for ControllerDescriptor {
    type Target = ControllerInfo;

    fn deref(&self) -> &ControllerInfo {
        self.info
    }
}

impl fmt::Debug for ControllerDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerDescriptor")
            .field("info", self.info)
            .finish_non_exhaustive()
    }
}

/// Marks a controller ready once its caches have synced.
#[derive(Clone, Debug)]
pub struct ReadySignal {
    flag: Arc<AtomicBool>,
    metrics: Option<ControllerMetrics>,
    note: Arc<parking_lot::Mutex<Option<String>>>,
}

impl ReadySignal {
    pub fn new(metrics: Option<ControllerMetrics>) -> Self {
        ReadySignal {
            flag: Arc::new(AtomicBool::new(false)),
            metrics,
            note: Arc::default(),
        }
    }

    /// A detail the readiness check shows next to the controller (`/readyz?verbose`),
    /// e.g. why it is idle; `None` clears it.
    pub fn set_note(&self, note: Option<String>) {
        *self.note.lock() = note;
    }

    pub fn note(&self) -> Option<String> {
        self.note.lock().clone()
    }

    pub fn set(&self, ready: bool) {
        self.flag.store(ready, Ordering::SeqCst);
        if let Some(m) = &self.metrics {
            m.set_ready(ready);
        }
    }

    pub fn is_ready(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// Everything a controller gets from the host.
#[derive(Clone)]
pub struct ControllerContext {
    pub name: &'static str,
    pub client: kube::Client,
    pub gates: Arc<FeatureGates>,
    pub metrics: ControllerMetrics,
    pub events: EventRecorder,
    /// Cancelled when the controller must stop taking work.
    pub shutdown: CancellationToken,
    pub ready: ReadySignal,
    /// Maximum concurrent reconciles (`--concurrency`).
    pub concurrency: u16,
}

impl fmt::Debug for ControllerContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerContext")
            .field("name", &self.name)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// A bad `--controllers` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("{0:?} is not in the list of known controllers (known controllers: {known})", known = .1.join(", "))]
    Unknown(String, Vec<String>),
    #[error(
        "{name:?} is not in the list of known controllers at emulated version {emulated}: it appeared in {since} (known controllers: {known})",
        known = .known.join(", ")
    )]
    NotYet {
        name: String,
        since: Version,
        emulated: Version,
        known: Vec<String>,
    },
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<SelectError>),
}

/// kube-controller-manager's `IsControllerEnabled`.
pub fn is_enabled(name: &str, aliases: &[&str], enabled_by_default: bool, flag: &[String]) -> bool {
    let mut has_star = false;
    for entry in flag {
        let (negated, bare) = match entry.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, entry.as_str()),
        };
        if bare == name || aliases.contains(&bare) {
            return !negated;
        }
        if entry == "*" {
            has_star = true;
        }
    }
    has_star && enabled_by_default
}

/// Splits a `--controllers` value (`a,-b,*`), trimming blanks.
pub fn parse_flag(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Validates `flag` and keeps the descriptors that run at `emulated`.
pub fn select(
    descriptors: Vec<ControllerDescriptor>,
    flag: &[String],
    emulated: Version,
) -> Result<Vec<ControllerDescriptor>, SelectError> {
    let known: Vec<String> = descriptors
        .iter()
        .filter(|d| d.since <= emulated)
        .map(|d| d.name.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut errs = Vec::new();
    for entry in flag {
        if entry == "*" {
            continue;
        }
        let bare = entry.strip_prefix('-').unwrap_or(entry);
        match descriptors
            .iter()
            .find(|d| d.name == bare || d.aliases.contains(&bare))
        {
            None => errs.push(SelectError::Unknown(bare.to_string(), known.clone())),
            Some(d) if d.since > emulated => errs.push(SelectError::NotYet {
                name: bare.to_string(),
                since: d.since,
                emulated,
                known: known.clone(),
            }),
            Some(_) => {}
        }
    }
    match errs.len() {
        0 => {}
        1 => return Err(errs.remove(0)),
        _ => return Err(SelectError::Several(errs)),
    }
    Ok(descriptors
        .into_iter()
        .filter(|d| {
            d.since <= emulated && is_enabled(d.name, d.aliases, d.enabled_by_default, flag)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(name: &'static str, on: bool, since: Version) -> ControllerDescriptor {
        let info = Box::leak(Box::new(ControllerInfo {
            name,
            aliases: if name == "pv-protection" {
                &["persistentvolume-protection-controller"]
            } else {
                &[]
            },
            enabled_by_default: on,
            since,
            gates: &[],
            finalizer: FinalizerNames {
                project: "x.io/f",
                upstream: "kubernetes.io/f",
            },
            rbac: &[],
            finalizes: &[],
        }));
        ControllerDescriptor {
            info,
            run: Box::new(|_| Box::pin(async { Ok(()) })),
        }
    }

    const V0_1: Version = Version::new(0, 1);
    const V0_2: Version = Version::new(0, 2);

    fn table() -> Vec<ControllerDescriptor> {
        vec![
            desc("pv-protection", true, V0_1),
            desc("pvc-protection", true, V0_1),
            desc("optional", false, V0_1),
            desc("newer", true, V0_2),
        ]
    }

    fn names(flag: &str, at: Version) -> Result<Vec<&'static str>, SelectError> {
        select(table(), &parse_flag(flag), at).map(|v| v.into_iter().map(|d| d.name).collect())
    }

    #[test]
    fn algebra_matches_kube_controller_manager() {
        let v = V0_2;
        let cases: &[(&str, &[&str])] = &[
            ("*", &["pv-protection", "pvc-protection", "newer"]),
            ("*,-pv-protection", &["pvc-protection", "newer"]),
            ("-pv-protection,*", &["pvc-protection", "newer"]),
            (
                "*,optional",
                &["pv-protection", "pvc-protection", "optional", "newer"],
            ),
            ("pv-protection", &["pv-protection"]),
            ("optional", &["optional"]),
            ("-pv-protection", &[]),
            ("", &[]),
            // The first entry naming a controller wins.
            ("pv-protection,-pv-protection", &["pv-protection"]),
            (
                "-pv-protection,pv-protection,*",
                &["pvc-protection", "newer"],
            ),
            // Aliases name the same controller.
            (
                "*,-persistentvolume-protection-controller",
                &["pvc-protection", "newer"],
            ),
            (" * , -newer ", &["pv-protection", "pvc-protection"]),
        ];
        for (flag, want) in cases {
            assert_eq!(
                names(flag, v).unwrap(),
                want.to_vec(),
                "--controllers={flag}"
            );
        }
    }

    #[test]
    fn unknown_names_list_the_known_controllers() {
        let e = names("-nope", V0_2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"nope\" is not in the list of known controllers (known controllers: newer, optional, pv-protection, pvc-protection)"
        );
        let e = names("a,*,-b", V0_2).unwrap_err();
        assert!(
            e.to_string().starts_with("[\"a\" is not in the list"),
            "{e}"
        );
        assert!(e.to_string().contains("\"b\" is not in the list"), "{e}");
    }

    #[test]
    fn controllers_from_later_releases_do_not_exist() {
        assert_eq!(
            names("*", V0_1).unwrap(),
            vec!["pv-protection", "pvc-protection"]
        );
        let e = names("newer", V0_1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"newer\" is not in the list of known controllers at emulated version 0.1: it appeared in 0.2 (known controllers: optional, pv-protection, pvc-protection)"
        );
        assert!(names("*", Version::new(0, 0)).unwrap().is_empty());
    }

    /// Property (issue 15 item 7): whatever `--controllers` says, the
    /// selection holds only controllers that exist at the emulated version
    /// and that the flag enables, or the error names an entry of the flag.
    /// `make fuzz` runs it with many more cases.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn controller_flag() -> impl Strategy<Value = String> {
            let entry = prop_oneof![
                Just("*".to_owned()),
                Just("pv-protection".to_owned()),
                Just("-pv-protection".to_owned()),
                Just("persistentvolume-protection-controller".to_owned()),
                Just("newer".to_owned()),
                Just("-".to_owned()),
                Just("--".to_owned()),
                "-?[a-z*-]{0,10}",
                "[ -~]{0,8}",
            ];
            prop::collection::vec(entry, 0..6).prop_map(|e| e.join(","))
        }

        proptest! {
            #[test]
            fn controller_flags_select_or_name_the_unknown_entry(flag in controller_flag(), minor in 0u32..=3) {
                let at = Version::new(0, minor);
                let parsed = parse_flag(&flag);
                prop_assert!(parsed.iter().all(|e| !e.is_empty() && e.trim() == e));
                match select(table(), &parsed, at) {
                    Ok(selected) => {
                        for d in &selected {
                            prop_assert!(d.since <= at);
                            prop_assert!(is_enabled(d.name, d.aliases, d.enabled_by_default, &parsed));
                        }
                    }
                    Err(e) => {
                        let text = e.to_string();
                        let named = parsed.iter().any(|entry| {
                            let bare = entry.strip_prefix('-').unwrap_or(entry);
                            text.contains(&format!("{bare:?}"))
                        });
                        prop_assert!(named, "{} does not name an entry of {:?}", text, parsed);
                    }
                }
            }
        }
    }
}

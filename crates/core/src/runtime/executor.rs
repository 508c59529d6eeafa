//! The plan executor of the in-use controllers: performs the one write a
//! `decide()` chose (add or remove our finalizer, one guarded request) and
//! emits its events (`FinalizerHeld` once per change of reason,
//! `FinalizerReleased` only for a deletion that was reported held).

use std::fmt::Debug;

use kube::api::Api;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use std::sync::Arc;

use super::fight::{Fights, Verdict, describe_other, other_writer};
use super::object_key;
use super::observer::PerObject;
use crate::events::EventRecorder;
use crate::finalizer::{FinalizerError, PhasedFinalizer};

/// Reason of the event emitted when a deletion is held because the object is
/// in use.
pub const REASON_HELD: &str = "FinalizerHeld";
/// Reason of the event emitted when a held deletion is released.
pub const REASON_RELEASED: &str = "FinalizerReleased";
/// `action` of the held event.
pub const ACTION_HELD: &str = "HoldDeletion";
/// `action` of the released event.
pub const ACTION_RELEASED: &str = "RemoveFinalizer";
/// Reason of the event emitted when a deletion would have been held (a
/// rule in `Audit` mode holds nothing and reports).
pub const REASON_WOULD_HOLD: &str = "WouldHold";
/// `action` of the would-hold event.
pub const ACTION_WOULD_HOLD: &str = "Audit";
/// Reason of the Warning emitted once when another writer keeps removing
/// our finalizer (runtime::fight).
pub const REASON_FIGHT: &str = "FinalizerFight";
/// `action` of the fight event.
pub const ACTION_FIGHT: &str = "AddFinalizer";

/// One decided step, controller-neutral.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Add our finalizer (one request).
    AddFinalizer,
    /// Remove our finalizer (one request); `released` is the note of the
    /// event reported if the deletion had been reported held, `why` says
    /// in the log why it goes.
    RemoveFinalizer { why: &'static str, released: String },
    /// Keep the finalizer: the object is in use, for the reason `held`.
    Keep { held: String },
    /// Hold nothing, but report (once per change of note) that the
    /// deletion would have been held, for the reason `note`.
    WouldHold { note: String },
    /// Already in the desired state.
    Nothing,
}

/// Carries out [`Step`]s for one controller.
#[derive(Clone, Debug)]
pub struct Executor {
    finalizer: PhasedFinalizer,
    events: EventRecorder,
    fights: Arc<Fights>,
}

impl Executor {
    pub fn new(finalizer: PhasedFinalizer, events: EventRecorder) -> Self {
        Executor {
            finalizer,
            events,
            fights: Arc::default(),
        }
    }

    pub fn finalizer(&self) -> &PhasedFinalizer {
        &self.finalizer
    }

    /// Performs `step` on `obj` through `api`, recording our write in
    /// `state.expectations` and the events in `state.events`.
    pub async fn execute<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        state: &PerObject,
        step: Step,
    ) -> Result<(), FinalizerError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        self.execute_as(api, obj, &K::DynamicType::default(), state, step)
            .await
    }

    /// [`Self::execute`] for a kind known at run time (`dt`).
    pub async fn execute_as<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        dt: &K::DynamicType,
        state: &PerObject,
        step: Step,
    ) -> Result<(), FinalizerError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        let kind = K::kind(dt).to_string();
        let key = object_key(obj);
        let uid = obj.meta().uid.clone().unwrap_or_default();
        match step {
            Step::AddFinalizer => {
                match self.fights.before_write(&uid) {
                    Verdict::Write => {}
                    Verdict::Waiting { wait } => return Err(self.fight(obj, &kind, wait)),
                    Verdict::BackOff { wait, started } => {
                        if let Some(m) = self.finalizer.metrics() {
                            m.finalizer_fight_backoff();
                        }
                        if started {
                            self.report_fight(api, obj, dt, wait).await;
                        }
                        return Err(self.fight(obj, &kind, wait));
                    }
                }
                // Only a write the server took counts toward a fight: a
                // refused or failed PATCH (an outage, a 403) is a retry,
                // and a finalizer already there was no write at all.
                match self.finalizer.add_as(api, obj, &kind).await {
                    Ok(w) if w.wrote() => {
                        state.expectations.wrote(&key, obj.meta(), ());
                        tracing::info!(%kind, finalizer = self.finalizer.name(), "added finalizer");
                    }
                    Ok(_) => self.fights.not_written(&uid),
                    Err(e) => {
                        self.fights.not_written(&uid);
                        return Err(e);
                    }
                }
            }
            Step::RemoveFinalizer { why, released } => {
                let was_held = state.events.is_held(&uid);
                if self.finalizer.remove_as(api, obj, &kind).await?.wrote() {
                    self.fights.forget(&uid);
                    state.expectations.wrote(&key, obj.meta(), ());
                    tracing::info!(%kind, finalizer = self.finalizer.name(), "removed finalizer: {why}");
                    state.events.forget(&uid);
                    if was_held {
                        self.events
                            .normal(
                                &obj.object_ref(dt),
                                REASON_RELEASED,
                                ACTION_RELEASED,
                                released,
                            )
                            .await;
                    }
                }
            }
            Step::Keep { held } => {
                tracing::debug!(%kind, name = %obj.name_any(), "keeping the finalizer: in use");
                if !uid.is_empty() && state.events.held(&uid, &held) {
                    self.events
                        .normal(&obj.object_ref(dt), REASON_HELD, ACTION_HELD, held)
                        .await;
                }
            }
            Step::WouldHold { note } => {
                if !uid.is_empty() && state.events.held(&uid, &note) {
                    self.report_would_hold(obj, dt, note).await;
                }
            }
            Step::Nothing => {}
        }
        Ok(())
    }

    /// The would-hold event for `obj` (also for an object already gone,
    /// whose memory the watch has dropped).
    pub async fn report_would_hold<K: Resource>(&self, obj: &K, dt: &K::DynamicType, note: String) {
        self.events
            .normal(
                &obj.object_ref(dt),
                REASON_WOULD_HOLD,
                ACTION_WOULD_HOLD,
                note,
            )
            .await;
    }

    fn fight<K: Resource>(&self, obj: &K, kind: &str, wait: std::time::Duration) -> FinalizerError {
        FinalizerError::Fight {
            kind: kind.to_string(),
            name: obj.name_any(),
            finalizer: self.finalizer.name().to_string(),
            wait,
        }
    }

    /// The one Warning of a fight, naming the other writer: the field
    /// manager that wrote the object last (one metadata GET: the cache keeps
    /// no managedFields).
    async fn report_fight<K>(
        &self,
        api: &Api<K>,
        obj: &K,
        dt: &K::DynamicType,
        wait: std::time::Duration,
    ) where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        // Metadata only, in full (the controller's own type may decode a
        // slim metadata without managedFields).
        let other = match api.get_metadata_opt(&obj.name_any()).await {
            Ok(Some(live)) => other_writer(&live.metadata, self.finalizer.field_manager()),
            _ => None,
        };
        let who = describe_other(other);
        let note = format!(
            "{who} keeps removing finalizer {}: re-adding it only after {wait:?}, then backing off further while the removals go on",
            self.finalizer.name()
        );
        tracing::warn!(object = %object_key(obj), "{note}");
        self.events
            .warning(&obj.object_ref(dt), REASON_FIGHT, ACTION_FIGHT, note)
            .await;
    }
}

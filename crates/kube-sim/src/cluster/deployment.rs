//! The Deployment controller (pkg/controller/deployment), as user
//! `system:serviceaccount:kube-system:deployment-controller`.
//!
//! Ported parts: the new ReplicaSet is the one whose template equals the
//! Deployment's ignoring `pod-template-hash` (`EqualIgnoreHash`), else one
//! is created as `<deployment>-<hash>` (FNV-32a of the template and
//! `collisionCount`, `SafeEncodeString`d) with the hash label in its
//! selector, template and labels, the Deployment's annotations,
//! `deployment.kubernetes.io/{revision,desired-replicas,max-replicas}` and a
//! controller ownerReference. RollingUpdate follows rolling.go
//! (`NewRSNewReplicas` with maxSurge rounded up, `reconcileOldReplicaSets`
//! with maxUnavailable rounded down, unhealthy old replicas first, oldest
//! ReplicaSets first); Recreate follows recreate.go (old ReplicaSets to
//! zero, wait until their pods are gone, then the new one up). A paused
//! Deployment is only scaled. Old ReplicaSets beyond
//! `revisionHistoryLimit` are deleted. Status and conditions follow
//! sync.go/progress.go: observedGeneration, replicas, updatedReplicas,
//! readyReplicas, availableReplicas, unavailableReplicas, `Available`
//! (MinimumReplicasAvailable / MinimumReplicasUnavailable) and `Progressing`
//! (NewReplicaSetCreated, FoundNewReplicaSet, ReplicaSetUpdated,
//! NewReplicaSetAvailable, ProgressDeadlineExceeded), and the revision
//! annotation written through `deployments/status` as upstream does, so
//! `kubectl rollout status/history/undo`, `helm --wait` and kstatus see what
//! they see on a real cluster. Not emulated: proportional scaling of several
//! active ReplicaSets during a rollout (the rolling logic converges instead),
//! adoption of orphaned ReplicaSets.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, Resource};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::events::{EventType, Recorder};
use super::informer::{self, ControllerManager};
use super::util;

pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Annotations a Deployment does not pass to its ReplicaSets
/// (`skipCopyAnnotation`).
fn skip_copy(key: &str) -> bool {
    matches!(
        key,
        "kubectl.kubernetes.io/last-applied-configuration"
            | REVISION
            | REVISION_HISTORY
            | DESIRED_REPLICAS
            | MAX_REPLICAS
            | "deprecated.deployment.rollback.to"
    )
}

struct Ctl {
    client: Client,
    recorder: Recorder,
}

pub(crate) async fn run(kcm: ControllerManager, client: Client, stop: CancellationToken) {
    let ctl = Ctl {
        recorder: Recorder::new(client.clone(), "deployment-controller", None),
        client,
    };
    let mut rx = kcm.changes.subscribe();
    tracing::info!("emulated deployment controller running");
    loop {
        let mut requeue: Option<Duration> = None;
        for d in kcm.deployments.state() {
            let r = match ctl.sync(&kcm, &d).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(deployment = ?d.metadata.name, error = %e, "sync failed; retrying");
                    Some(Duration::from_millis(500))
                }
            };
            if let Some(r) = r {
                requeue = Some(requeue.map_or(r, |x| x.min(r)));
            }
        }
        if !informer::wait(&mut rx, requeue, &stop).await {
            return;
        }
    }
}

/// Drops nulls and empty maps/lists, so that templates that differ only in
/// how absent fields are written compare equal (apiequality.Semantic).
fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                normalize(x);
            }
            m.retain(|_, x| {
                !(x.is_null()
                    || x.as_object().is_some_and(|o| o.is_empty())
                    || x.as_array().is_some_and(|a| a.is_empty()))
            });
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn template_value(t: Option<&PodTemplateSpec>) -> Value {
    let mut v = serde_json::to_value(t.cloned().unwrap_or_default()).unwrap_or(Value::Null);
    if let Some(l) = v
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        l.remove(HASH_LABEL);
    }
    normalize(&mut v);
    v
}

/// `EqualIgnoreHash`.
fn equal_ignore_hash(a: Option<&PodTemplateSpec>, b: Option<&PodTemplateSpec>) -> bool {
    template_value(a) == template_value(b)
}

/// `ComputeHash`: FNV-32a of the template (and collisionCount), safe-encoded.
pub fn template_hash(t: Option<&PodTemplateSpec>, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&template_value(t)).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(c.to_string().as_bytes());
    }
    util::safe_encode(&util::fnv32a(&bytes).to_string())
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn status_of(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.clone().unwrap_or_default();
    (
        s.replicas,
        s.ready_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0),
    )
}

/// `GetTerminatingReplicaCountForReplicaSets`: the sum of the ReplicaSets'
/// terminatingReplicas; None once a ReplicaSet the controller has synced
/// reports none.
fn terminating_replicas(all: &[ReplicaSet]) -> Option<i32> {
    let mut sum = 0;
    for rs in all {
        let st = rs.status.clone().unwrap_or_default();
        match (st.observed_generation.unwrap_or(0), st.terminating_replicas) {
            (0, None) => {}
            (_, None) => return None,
            (_, Some(n)) => sum += n,
        }
    }
    Some(sum)
}

fn d_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rolling(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// `ResolveFenceposts`: (maxSurge, maxUnavailable).
fn fenceposts(d: &Deployment) -> (i32, i32) {
    if !rolling(d) {
        return (0, 0);
    }
    let want = d_replicas(d);
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.clone())
        .unwrap_or_default();
    let surge = util::scaled_value(ru.max_surge.as_ref(), want, true);
    let mut unavailable = util::scaled_value(ru.max_unavailable.as_ref(), want, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// `MaxUnavailable`.
fn max_unavailable(d: &Deployment) -> i32 {
    let want = d_replicas(d);
    if !rolling(d) || want == 0 {
        return 0;
    }
    fenceposts(d).1.min(want)
}

fn max_surge(d: &Deployment) -> i32 {
    if !rolling(d) {
        return 0;
    }
    fenceposts(d).0
}

fn cond<'a>(s: &'a DeploymentStatus, ty: &str) -> Option<&'a DeploymentCondition> {
    s.conditions.as_ref()?.iter().find(|c| c.type_ == ty)
}

/// `SetDeploymentCondition`: same status and reason → keep; same status →
/// keep lastTransitionTime.
fn set_cond(s: &mut DeploymentStatus, ty: &str, status: &str, reason: &str, message: &str) {
    let now = util::now_time();
    let existing = cond(s, ty).cloned();
    if let Some(c) = &existing
        && c.status == status
        && c.reason.as_deref() == Some(reason)
    {
        return;
    }
    let transition = match &existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    let mut conds: Vec<DeploymentCondition> = s
        .conditions
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != ty)
        .collect();
    conds.push(DeploymentCondition {
        type_: ty.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_update_time: Some(now),
        last_transition_time: transition,
    });
    s.conditions = Some(conds);
}

fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .is_some_and(|p| p != i32::MAX)
}

/// What the status of `d` should be given its ReplicaSets (calculateStatus).
fn calculate_status(
    d: &Deployment,
    all: &[ReplicaSet],
    new: Option<&ReplicaSet>,
) -> DeploymentStatus {
    let mut st = d.status.clone().unwrap_or_default();
    let total: i32 = all.iter().map(|r| status_of(r).0).sum();
    let ready: i32 = all.iter().map(|r| status_of(r).1).sum();
    let available: i32 = all.iter().map(|r| status_of(r).2).sum();
    // Every count is omitempty in apps/v1 DeploymentStatus.
    let nz = |v: i32| (v != 0).then_some(v);
    st.observed_generation = d.metadata.generation;
    st.replicas = nz(total);
    st.updated_replicas = nz(new.map(|n| status_of(n).0).unwrap_or(0));
    st.ready_replicas = nz(ready);
    st.available_replicas = nz(available);
    st.unavailable_replicas = nz((d_replicas(d) - available).max(0));
    st.terminating_replicas = terminating_replicas(all);
    if available >= d_replicas(d) - max_unavailable(d) {
        set_cond(
            &mut st,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
        );
    } else {
        set_cond(
            &mut st,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        );
    }
    st
}

/// `DeploymentComplete`.
fn complete(d: &Deployment, st: &DeploymentStatus) -> bool {
    let want = d_replicas(d);
    let n = |v: Option<i32>| v.unwrap_or(0);
    n(st.updated_replicas) == want
        && n(st.replicas) == want
        && n(st.available_replicas) == want
        && st.observed_generation >= d.metadata.generation
}

/// `DeploymentProgressing`.
fn progressing(d: &Deployment, st: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let g = |x: Option<i32>| x.unwrap_or(0);
    let old_old = g(old.replicas) - g(old.updated_replicas);
    let new_old = g(st.replicas) - g(st.updated_replicas);
    g(st.updated_replicas) > g(old.updated_replicas)
        || new_old < old_old
        || g(st.ready_replicas) > g(old.ready_replicas)
        || g(st.available_replicas) > g(old.available_replicas)
}

/// `DeploymentTimedOut`; also how long until it would.
fn timed_out(d: &Deployment, st: &DeploymentStatus) -> (bool, Option<Duration>) {
    if !has_progress_deadline(d) {
        return (false, None);
    }
    let Some(c) = cond(st, "Progressing") else {
        return (false, None);
    };
    if c.reason.as_deref() == Some("ProgressDeadlineExceeded") {
        return (true, None);
    }
    let secs = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(600) as i64;
    let from = c
        .last_update_time
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_else(jiff::Timestamp::now);
    let deadline = from + jiff::SignedDuration::from_secs(secs);
    let now = jiff::Timestamp::now();
    if now > deadline {
        (true, None)
    } else {
        let left = deadline.duration_since(now).as_millis().max(0) as u64;
        (false, Some(Duration::from_millis(left + 50)))
    }
}

type Res<T> = Result<T, kube::Error>;

impl Ctl {
    async fn sync(&self, kcm: &ControllerManager, d: &Arc<Deployment>) -> Res<Option<Duration>> {
        if util::deleting(&d.metadata) {
            return Ok(None);
        }
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let mut sets: Vec<ReplicaSet> = kcm
            .replicasets
            .state()
            .into_iter()
            .filter(|r| {
                r.metadata.namespace.as_deref() == Some(ns.as_str())
                    && util::controlled_by(&r.metadata, &uid)
            })
            .map(|r| (*r).clone())
            .collect();
        sets.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        let mut d = (**d).clone();
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        self.check_paused_conditions(&mut d, paused).await?;
        if paused {
            let new_idx = self.sync_revision(&mut d, &mut sets, false).await?;
            if let Some(i) = new_idx
                && sets.iter().filter(|r| replicas(r) > 0).count() <= 1
            {
                let want = d_replicas(&d);
                self.scale(&d, &mut sets[i], want).await?;
            }
            return self.sync_status(&mut d, &sets, new_idx, true).await;
        }
        if rolling(&d) {
            self.rolling(&mut d, &mut sets, kcm).await
        } else {
            self.recreate(&mut d, &mut sets, kcm).await
        }
    }

    /// checkPausedConditions: Progressing=Unknown DeploymentPaused /
    /// DeploymentResumed (unless it already timed out).
    async fn check_paused_conditions(&self, d: &mut Deployment, paused: bool) -> Res<()> {
        if !has_progress_deadline(d) {
            return Ok(());
        }
        let st = d.status.clone().unwrap_or_default();
        let c = cond(&st, "Progressing");
        if c.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded")) {
            return Ok(());
        }
        let paused_cond = c.is_some_and(|c| c.reason.as_deref() == Some("DeploymentPaused"));
        let mut st = st.clone();
        if paused && !paused_cond {
            set_cond(
                &mut st,
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused",
            );
        } else if !paused && paused_cond {
            set_cond(
                &mut st,
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed",
            );
        } else {
            return Ok(());
        }
        d.status = Some(st);
        self.put_status(d).await
    }

    async fn rolling(
        &self,
        d: &mut Deployment,
        sets: &mut Vec<ReplicaSet>,
        _kcm: &ControllerManager,
    ) -> Res<Option<Duration>> {
        let new_idx = self.sync_revision(d, sets, true).await?;
        let Some(ni) = new_idx else {
            return self.sync_status(d, sets, None, false).await;
        };
        // reconcileNewReplicaSet
        let want = d_replicas(d);
        let new_reps = replicas(&sets[ni]);
        if new_reps != want {
            let target = if new_reps > want {
                want
            } else {
                let current: i32 = sets.iter().map(replicas).sum();
                let max_total = want + max_surge(d);
                if current >= max_total {
                    new_reps
                } else {
                    new_reps + (max_total - current).min(want - new_reps)
                }
            };
            if target != new_reps {
                self.scale(d, &mut sets[ni], target).await?;
                return self.sync_status(d, sets, Some(ni), false).await;
            }
        }
        // reconcileOldReplicaSets
        let old_count: i32 = sets
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != ni)
            .map(|(_, r)| replicas(r))
            .sum();
        if old_count > 0 {
            let all_count: i32 = sets.iter().map(replicas).sum();
            let min_available = want - max_unavailable(d);
            let new_unavailable = replicas(&sets[ni]) - status_of(&sets[ni]).2;
            let max_scaled_down = all_count - min_available - new_unavailable;
            if max_scaled_down > 0 {
                let mut scaled = false;
                // cleanupUnhealthyReplicas: oldest first.
                let mut budget = max_scaled_down;
                for (i, rs) in sets.iter_mut().enumerate() {
                    if i == ni || budget <= 0 {
                        continue;
                    }
                    let r = replicas(rs);
                    let unhealthy = r - status_of(rs).2;
                    if r == 0 || unhealthy <= 0 {
                        continue;
                    }
                    let down = unhealthy.min(budget);
                    self.scale(d, rs, r - down).await?;
                    budget -= down;
                    scaled = true;
                }
                // scaleDownOldReplicaSetsForRollingUpdate.
                let available: i32 = sets.iter().map(|r| status_of(r).2).sum();
                if available > min_available {
                    let mut total = available - min_available;
                    for (i, rs) in sets.iter_mut().enumerate() {
                        if i == ni || total <= 0 {
                            continue;
                        }
                        let r = replicas(rs);
                        if r == 0 {
                            continue;
                        }
                        let down = r.min(total);
                        self.scale(d, rs, r - down).await?;
                        total -= down;
                        scaled = true;
                    }
                }
                if scaled {
                    return self.sync_status(d, sets, Some(ni), false).await;
                }
            }
        }
        let st = calculate_status(d, sets, Some(&sets[ni]));
        if complete(d, &st) {
            self.cleanup(d, sets, ni).await?;
        }
        self.sync_status(d, sets, Some(ni), false).await
    }

    async fn recreate(
        &self,
        d: &mut Deployment,
        sets: &mut Vec<ReplicaSet>,
        kcm: &ControllerManager,
    ) -> Res<Option<Duration>> {
        let mut new_idx = self.sync_revision(d, sets, false).await?;
        // scaleDownOldReplicaSetsForRecreate
        let mut scaled = false;
        for (i, rs) in sets.iter_mut().enumerate() {
            if Some(i) == new_idx || replicas(rs) == 0 {
                continue;
            }
            self.scale(d, rs, 0).await?;
            scaled = true;
        }
        if scaled {
            return self.sync_status(d, sets, new_idx, false).await;
        }
        // oldPodsRunning: any non-terminal pod of an old ReplicaSet.
        let old_uids: Vec<String> = sets
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new_idx)
            .filter_map(|(_, r)| r.metadata.uid.clone())
            .collect();
        let old_running = sets
            .iter()
            .enumerate()
            .any(|(i, r)| Some(i) != new_idx && status_of(r).0 > 0)
            || kcm.pods.state().iter().any(|p: &Arc<Pod>| {
                util::controller_of(&p.metadata).is_some_and(|o| old_uids.contains(&o.uid))
                    && !matches!(util::phase(p), "Succeeded" | "Failed")
            });
        if old_running {
            return self.sync_status(d, sets, new_idx, false).await.map(|r| {
                Some(
                    r.unwrap_or(Duration::from_secs(1))
                        .min(Duration::from_secs(1)),
                )
            });
        }
        if new_idx.is_none() {
            new_idx = self.sync_revision(d, sets, true).await?;
        }
        if let Some(ni) = new_idx {
            let want = d_replicas(d);
            if replicas(&sets[ni]) != want {
                self.scale(d, &mut sets[ni], want).await?;
            }
            let st = calculate_status(d, sets, Some(&sets[ni]));
            if complete(d, &st) {
                self.cleanup(d, sets, ni).await?;
            }
        }
        self.sync_status(d, sets, new_idx, false).await
    }

    /// getAllReplicaSetsAndSyncRevision: finds (or creates) the new
    /// ReplicaSet, syncs revision annotations; returns its index in `sets`.
    async fn sync_revision(
        &self,
        d: &mut Deployment,
        sets: &mut Vec<ReplicaSet>,
        create: bool,
    ) -> Res<Option<usize>> {
        let template = d.spec.as_ref().map(|s| s.template.clone());
        let new_idx = sets.iter().position(|r| {
            equal_ignore_hash(
                r.spec.as_ref().and_then(|s| s.template.as_ref()),
                template.as_ref(),
            )
        });
        let max_old = sets
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new_idx)
            .map(|(_, r)| revision(r))
            .max()
            .unwrap_or(0);
        let new_revision = max_old + 1;
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let rs_api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
        if let Some(i) = new_idx {
            let mut rs = sets[i].clone();
            let mut changed = false;
            let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
            for (k, v) in d.metadata.annotations.clone().unwrap_or_default() {
                if !skip_copy(&k) && ann.get(&k) != Some(&v) {
                    ann.insert(k, v);
                    changed = true;
                }
            }
            let old_rev = ann
                .get(REVISION)
                .and_then(|r| r.parse::<i64>().ok())
                .unwrap_or(0);
            if old_rev < new_revision {
                if old_rev > 0 {
                    let hist = ann.get(REVISION_HISTORY).cloned().unwrap_or_default();
                    let hist = if hist.is_empty() {
                        old_rev.to_string()
                    } else {
                        format!("{hist},{old_rev}")
                    };
                    ann.insert(REVISION_HISTORY.into(), hist);
                }
                ann.insert(REVISION.into(), new_revision.to_string());
                changed = true;
            }
            let min_ready = d.spec.as_ref().and_then(|s| s.min_ready_seconds);
            if let Some(s) = rs.spec.as_mut()
                && s.min_ready_seconds.unwrap_or(0) != min_ready.unwrap_or(0)
            {
                s.min_ready_seconds = min_ready;
                changed = true;
            }
            if changed {
                let name = rs.metadata.name.clone().unwrap_or_default();
                sets[i] = rs_api.replace(&name, &PostParams::default(), &rs).await?;
            }
            let rev = revision(&sets[i]).to_string();
            let mut needs = false;
            let dann = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
            if dann.get(REVISION) != Some(&rev) {
                dann.insert(REVISION.into(), rev);
                needs = true;
            }
            let mut st = d.status.clone().unwrap_or_default();
            if has_progress_deadline(d) && cond(&st, "Progressing").is_none() {
                let name = sets[i].metadata.name.clone().unwrap_or_default();
                set_cond(
                    &mut st,
                    "Progressing",
                    "True",
                    "FoundNewReplicaSet",
                    &format!("Found new replica set {name:?}"),
                );
                d.status = Some(st);
                needs = true;
            }
            if needs {
                self.put_status(d).await?;
            }
            return Ok(Some(i));
        }
        if !create {
            return Ok(None);
        }
        let collision = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = template_hash(template.as_ref(), collision);
        let dname = d.metadata.name.clone().unwrap_or_default();
        let name = format!("{dname}-{hash}");
        let mut tmpl = template.clone().unwrap_or_default();
        tmpl.metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut selector: LabelSelector = d
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let want = d_replicas(d);
        let current: i32 = sets.iter().map(replicas).sum();
        let new_reps = if rolling(d) {
            let max_total = want + max_surge(d);
            if current >= max_total {
                0
            } else {
                (max_total - current).min(want)
            }
        } else {
            want
        };
        let mut ann: BTreeMap<String, String> = d
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !skip_copy(k))
            .collect();
        ann.insert(REVISION.into(), new_revision.to_string());
        ann.insert(DESIRED_REPLICAS.into(), want.to_string());
        ann.insert(MAX_REPLICAS.into(), (want + max_surge(d)).to_string());
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                labels: tmpl.metadata.as_ref().and_then(|m| m.labels.clone()),
                annotations: Some(ann),
                owner_references: Some(vec![util::controller_ref(
                    "apps/v1",
                    "Deployment",
                    &d.metadata,
                )]),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
                replicas: Some(new_reps),
                min_ready_seconds: d.spec.as_ref().and_then(|s| s.min_ready_seconds),
                selector,
                template: Some(tmpl),
            }),
            status: None,
        };
        let created = match rs_api.create(&PostParams::default(), &rs).await {
            Ok(c) => {
                self.recorder.event(
                    &d.object_ref(&()),
                    EventType::Normal,
                    "ScalingReplicaSet",
                    &format!("Scaled up replica set {name} from 0 to {new_reps}"),
                );
                let mut st = d.status.clone().unwrap_or_default();
                if has_progress_deadline(d) {
                    set_cond(
                        &mut st,
                        "Progressing",
                        "True",
                        "NewReplicaSetCreated",
                        &format!("Created new replica set {name:?}"),
                    );
                }
                d.status = Some(st);
                d.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(REVISION.into(), new_revision.to_string());
                self.put_status(d).await?;
                c
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = rs_api.get(&name).await?;
                let ours = util::controlled_by(
                    &existing.metadata,
                    d.metadata.uid.as_deref().unwrap_or(""),
                ) && equal_ignore_hash(
                    existing.spec.as_ref().and_then(|s| s.template.as_ref()),
                    template.as_ref(),
                );
                if !ours {
                    // A hash collision: bump collisionCount and retry.
                    let mut st = d.status.clone().unwrap_or_default();
                    st.collision_count = Some(collision.unwrap_or(0) + 1);
                    d.status = Some(st);
                    self.put_status(d).await?;
                    return Err(kube::Error::Api(e));
                }
                existing
            }
            Err(e) => return Err(e),
        };
        sets.push(created);
        Ok(Some(sets.len() - 1))
    }

    /// Scales `rs` to `to` (with the replicas annotations), recording the
    /// ScalingReplicaSet event.
    async fn scale(&self, d: &Deployment, rs: &mut ReplicaSet, to: i32) -> Res<()> {
        let from = replicas(rs);
        let want = d_replicas(d).to_string();
        let max = (d_replicas(d) + max_surge(d)).to_string();
        let ann = rs.metadata.annotations.clone().unwrap_or_default();
        if from == to
            && ann.get(DESIRED_REPLICAS) == Some(&want)
            && ann.get(MAX_REPLICAS) == Some(&max)
        {
            return Ok(());
        }
        let mut new = rs.clone();
        if let Some(s) = new.spec.as_mut() {
            s.replicas = Some(to);
        }
        let a = new.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.insert(DESIRED_REPLICAS.into(), want);
        a.insert(MAX_REPLICAS.into(), max);
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
        *rs = api.replace(&name, &PostParams::default(), &new).await?;
        if from != to {
            let dir = if to > from { "up" } else { "down" };
            self.recorder.event(
                &d.object_ref(&()),
                EventType::Normal,
                "ScalingReplicaSet",
                &format!("Scaled {dir} replica set {name} from {from} to {to}"),
            );
        }
        Ok(())
    }

    /// cleanupDeployment: old, empty ReplicaSets beyond revisionHistoryLimit.
    async fn cleanup(&self, d: &Deployment, sets: &[ReplicaSet], new_idx: usize) -> Res<()> {
        let Some(limit) = d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = sets
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                *i != new_idx
                    && replicas(r) == 0
                    && status_of(r).0 == 0
                    && !util::deleting(&r.metadata)
                    && r.metadata.generation
                        <= r.status.as_ref().and_then(|s| s.observed_generation)
            })
            .map(|(_, r)| r)
            .collect();
        let diff = cleanable.len() as i64 - limit as i64;
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by_key(|r| (revision(r), r.metadata.creation_timestamp.clone()));
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
        for r in cleanable.into_iter().take(diff as usize) {
            let name = r.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn put_status(&self, d: &mut Deployment) -> Res<()> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
        *d = api
            .replace_status(&name, &PostParams::default(), &*d)
            .await?;
        Ok(())
    }

    /// syncRolloutStatus (or syncStatusOnly for a paused Deployment).
    async fn sync_status(
        &self,
        d: &mut Deployment,
        sets: &[ReplicaSet],
        new_idx: Option<usize>,
        paused: bool,
    ) -> Res<Option<Duration>> {
        let new = new_idx.map(|i| &sets[i]);
        let mut st = calculate_status(d, sets, new);
        let mut requeue = None;
        if !has_progress_deadline(d) {
            if let Some(c) = st.conditions.as_mut() {
                c.retain(|c| c.type_ != "Progressing");
            }
        } else if !paused {
            let current = cond(&st, "Progressing").cloned();
            let is_complete = st.replicas.unwrap_or(0) == st.updated_replicas.unwrap_or(0)
                && current
                    .as_ref()
                    .is_some_and(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"));
            if !is_complete {
                let rs_name = new
                    .and_then(|n| n.metadata.name.clone())
                    .unwrap_or_default();
                if complete(d, &st) {
                    let msg = if new.is_some() {
                        format!("ReplicaSet {rs_name:?} has successfully progressed.")
                    } else {
                        "Deployment has successfully progressed.".to_string()
                    };
                    set_cond(
                        &mut st,
                        "Progressing",
                        "True",
                        "NewReplicaSetAvailable",
                        &msg,
                    );
                } else if progressing(d, &st) {
                    let msg = if new.is_some() {
                        format!("ReplicaSet {rs_name:?} is progressing.")
                    } else {
                        "Deployment is progressing.".to_string()
                    };
                    // A new update time with the old transition time.
                    let mut conds: Vec<DeploymentCondition> = st
                        .conditions
                        .take()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|c| c.type_ != "Progressing")
                        .collect();
                    let transition = match &current {
                        Some(c) if c.status == "True" => c.last_transition_time.clone(),
                        _ => Some(util::now_time()),
                    };
                    conds.push(DeploymentCondition {
                        type_: "Progressing".into(),
                        status: "True".into(),
                        reason: Some("ReplicaSetUpdated".into()),
                        message: Some(msg),
                        last_update_time: Some(util::now_time()),
                        last_transition_time: transition,
                    });
                    st.conditions = Some(conds);
                    requeue = Some(Duration::from_secs(
                        d.spec
                            .as_ref()
                            .and_then(|s| s.progress_deadline_seconds)
                            .unwrap_or(600)
                            .max(1) as u64,
                    ));
                } else {
                    let (now_out, left) = timed_out(d, &st);
                    if now_out {
                        let msg = if new.is_some() {
                            format!("ReplicaSet {rs_name:?} has timed out progressing.")
                        } else {
                            "Deployment has timed out progressing.".to_string()
                        };
                        set_cond(
                            &mut st,
                            "Progressing",
                            "False",
                            "ProgressDeadlineExceeded",
                            &msg,
                        );
                    } else {
                        requeue = left;
                    }
                }
            }
        }
        let old = d.status.clone().unwrap_or_default();
        let norm = |s: &DeploymentStatus| {
            let mut s = s.clone();
            for v in [
                &mut s.replicas,
                &mut s.updated_replicas,
                &mut s.ready_replicas,
                &mut s.available_replicas,
                &mut s.unavailable_replicas,
            ] {
                if *v == Some(0) {
                    *v = None;
                }
            }
            s
        };
        if norm(&st) != norm(&old) {
            d.status = Some(st);
            self.put_status(d).await?;
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_ignores_the_hash_label_and_absent_fields() {
        let a: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}
        }))
        .unwrap_or_default();
        let mut b = a.clone();
        b.metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), "x".into());
        if let Some(m) = b.metadata.as_mut() {
            m.annotations = Some(BTreeMap::new());
        }
        assert!(equal_ignore_hash(Some(&a), Some(&b)));
        assert_eq!(template_hash(Some(&a), None), template_hash(Some(&b), None));
        assert_ne!(
            template_hash(Some(&a), None),
            template_hash(Some(&a), Some(1))
        );
        let h = template_hash(Some(&a), None);
        assert!(!h.is_empty() && h.len() <= 10, "{h}");
    }
}

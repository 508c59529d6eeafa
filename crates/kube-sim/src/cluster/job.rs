//! The Job controller (pkg/controller/job, NonIndexed jobs) as
//! `system:serviceaccount:kube-system:job-controller`, and the
//! ttl-after-finished controller as
//! `system:serviceaccount:kube-system:ttl-after-finished-controller`.
//!
//! Pods are created from the template (`generateName: <job>-`, the
//! `batch.kubernetes.io/job-tracking` finalizer, a controller
//! ownerReference), up to `min(parallelism, completions - succeeded)` at a
//! time. Finished pods are counted with upstream's protocol (their uids go
//! to `status.uncountedTerminatedPods`, the tracking finalizer is removed,
//! then they move to `succeeded`/`failed`). Failed pods are replaced after
//! a back-off (10 s doubling, up to 6 min); with restartPolicy OnFailure
//! container restarts count as failures. When `succeeded` reaches
//! `completions` the Job gets `SuccessCriteriaMet` then `Complete`
//! (CompletionsReached) and `completionTime`; past `backoffLimit` (or
//! `activeDeadlineSeconds`) it gets `FailureTarget` then `Failed`
//! (BackoffLimitExceeded / DeadlineExceeded) and its active pods are
//! deleted. Status also has startTime, active, ready and terminating.
//! Finished Jobs with `ttlSecondsAfterFinished` are deleted (Foreground
//! propagation) that long after they finished. Pods whose Job is gone or
//! finished lose the tracking finalizer (handleOrphanPod). Not emulated: Indexed
//! completion mode, podFailurePolicy, successPolicy, suspend, managedBy.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::events::{EventType, Recorder};
use super::informer::{self, ControllerManager};
use super::replicaset::pod_from_template;
use super::util;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

pub(crate) async fn run(kcm: ControllerManager, client: Client, stop: CancellationToken) {
    let recorder = Recorder::new(client.clone(), "job-controller", None);
    let mut rx = kcm.changes.subscribe();
    // Pods created and not yet in the cache, per job uid.
    let mut expect: HashMap<String, (Vec<String>, Instant)> = HashMap::new();
    tracing::info!("emulated job controller running");
    loop {
        let mut requeue: Option<Duration> = None;
        for job in kcm.jobs.state() {
            match sync(&kcm, &client, &recorder, &job, &mut expect).await {
                Ok(Some(r)) => requeue = Some(requeue.map_or(r, |x| x.min(r))),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(job = ?job.metadata.name, error = %e, "job sync failed; retrying");
                    requeue = Some(Duration::from_millis(500));
                }
            }
        }
        if let Err(e) = release_orphans(&kcm, &client).await {
            tracing::debug!(error = %e, "releasing orphan job pods failed");
            requeue = Some(Duration::from_millis(500));
        }
        if !informer::wait(&mut rx, requeue, &stop).await {
            return;
        }
    }
}

/// handleOrphanPod: a pod with the tracking finalizer whose Job is gone (or
/// finished) gets the finalizer removed, so that it can go.
async fn release_orphans(kcm: &ControllerManager, client: &Client) -> Result<(), kube::Error> {
    for p in kcm.pods.state() {
        if !has_tracking(&p) {
            continue;
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let owner = util::controller_of(&p.metadata)
            .filter(|r| r.kind == "Job" && r.api_version == "batch/v1")
            .cloned();
        let alive = match &owner {
            None => None,
            Some(r) => match kcm.jobs.get(&ObjectRef::new(&r.name).within(&ns)) {
                Some(j) if j.metadata.uid.as_deref() == Some(r.uid.as_str()) => Some((*j).clone()),
                _ => {
                    // Not in the cache: confirm with the API server.
                    let api: Api<Job> = Api::namespaced(client.clone(), &ns);
                    api.get_opt(&r.name)
                        .await?
                        .filter(|j| j.metadata.uid.as_deref() == Some(r.uid.as_str()))
                }
            },
        };
        let finished_job = alive
            .as_ref()
            .is_some_and(|j| j.status.as_ref().is_some_and(finished));
        if alive.is_none() || finished_job {
            remove_tracking(client, &p).await?;
        }
    }
    Ok(())
}

fn has_cond(st: &JobStatus, ty: &str) -> bool {
    st.conditions
        .as_ref()
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == ty && c.status == "True"))
}

fn add_cond(st: &mut JobStatus, ty: &str, reason: &str, message: &str) {
    if has_cond(st, ty) {
        return;
    }
    let now = util::now_time();
    st.conditions
        .get_or_insert_with(Vec::new)
        .push(JobCondition {
            type_: ty.to_string(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_probe_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
}

fn finished(st: &JobStatus) -> bool {
    has_cond(st, "Complete") || has_cond(st, "Failed")
}

fn has_tracking(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == TRACKING_FINALIZER))
}

async fn remove_tracking(client: &Client, p: &Pod) -> Result<(), kube::Error> {
    let ns = p.metadata.namespace.clone().unwrap_or_default();
    let name = p.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn sync(
    kcm: &ControllerManager,
    client: &Client,
    recorder: &Recorder,
    job: &Arc<Job>,
    expect: &mut HashMap<String, (Vec<String>, Instant)>,
) -> Result<Option<Duration>, kube::Error> {
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let spec = job.spec.clone().unwrap_or_default();
    let old = job.status.clone().unwrap_or_default();
    let mut st = old.clone();
    let pods: Vec<Arc<Pod>> = kcm
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str())
                && util::controlled_by(&p.metadata, &uid)
        })
        .collect();
    if let Some((names, at)) = expect.get(&uid) {
        let seen = names
            .iter()
            .all(|n| kcm.pods.get(&ObjectRef::new(n).within(&ns)).is_some());
        if seen || at.elapsed() > Duration::from_secs(60) {
            expect.remove(&uid);
        } else {
            return Ok(Some(Duration::from_millis(500)));
        }
    }
    let mut requeue: Option<Duration> = None;
    let soon = |d: Duration, r: &mut Option<Duration>| *r = Some(r.map_or(d, |x| x.min(d)));
    // Counting finished pods: uncounted → remove finalizer → counters.
    let mut uncounted = st.uncounted_terminated_pods.clone().unwrap_or_default();
    let mut u_succ: BTreeSet<String> = uncounted
        .succeeded
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut u_fail: BTreeSet<String> = uncounted
        .failed
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let by_uid: HashMap<String, &Arc<Pod>> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.clone().map(|u| (u, p)))
        .collect();
    // (c) uncounted pods whose finalizer is gone move to the counters.
    let mut succeeded = st.succeeded.unwrap_or(0);
    let mut failed = st.failed.unwrap_or(0);
    u_succ.retain(|u| {
        let pending = by_uid.get(u).is_some_and(|p| has_tracking(p));
        if !pending {
            succeeded += 1;
        }
        pending
    });
    u_fail.retain(|u| {
        let pending = by_uid.get(u).is_some_and(|p| has_tracking(p));
        if !pending {
            failed += 1;
        }
        pending
    });
    // (a) newly finished pods with the finalizer become uncounted.
    let mut to_release: Vec<&Arc<Pod>> = Vec::new();
    for p in &pods {
        if !has_tracking(p) {
            continue;
        }
        let pu = p.metadata.uid.clone().unwrap_or_default();
        let phase = util::phase(p);
        let gone_running = util::deleting(&p.metadata) && phase != "Succeeded" && phase != "Failed";
        if phase == "Succeeded" {
            u_succ.insert(pu);
            to_release.push(p);
        } else if phase == "Failed" || (gone_running && finished(&st)) {
            u_fail.insert(pu);
            to_release.push(p);
        } else if finished(&st) {
            to_release.push(p);
        }
    }
    st.succeeded = Some(succeeded);
    st.failed = Some(failed);
    // Empty lists are omitted on the wire (`omitempty`): an empty
    // `uncountedTerminatedPods: {}`, as kube-controller-manager writes it.
    uncounted.succeeded = (!u_succ.is_empty()).then(|| u_succ.iter().cloned().collect());
    uncounted.failed = (!u_fail.is_empty()).then(|| u_fail.iter().cloned().collect());
    st.uncounted_terminated_pods = Some(uncounted);
    let active: Vec<&Arc<Pod>> = pods.iter().filter(|p| util::pod_active(p)).collect();
    let terminating = pods
        .iter()
        .filter(|p| {
            util::deleting(&p.metadata) && !matches!(util::phase(p), "Succeeded" | "Failed")
        })
        .count() as i32;
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    if st.start_time.is_none() && !finished(&st) {
        st.start_time = Some(util::now_time());
    }
    let completions = spec.completions;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let on_failure = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    let restarts: i32 = if on_failure {
        active
            .iter()
            .map(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .map(|cs| cs.iter().map(|c| c.restart_count).sum::<i32>())
                    .unwrap_or(0)
            })
            .sum()
    } else {
        0
    };
    let total_failed = failed + u_fail.len() as i32 + restarts;
    let total_succeeded = succeeded + u_succ.len() as i32;
    let deadline_exceeded = spec.active_deadline_seconds.is_some_and(|d| {
        st.start_time
            .as_ref()
            .is_some_and(|t| jiff::Timestamp::now().as_second() - t.0.as_second() >= d)
    });
    if !finished(&st) {
        let done = match completions {
            Some(c) => total_succeeded >= c,
            None => total_succeeded > 0 && active.is_empty(),
        };
        if done {
            add_cond(
                &mut st,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
        } else if total_failed > backoff_limit {
            add_cond(
                &mut st,
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            );
        } else if deadline_exceeded {
            add_cond(
                &mut st,
                "FailureTarget",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            );
        }
    }
    let target_reached = has_cond(&st, "SuccessCriteriaMet") || has_cond(&st, "FailureTarget");
    if target_reached {
        // Remove what still runs.
        for p in &active {
            let pn = p.metadata.name.clone().unwrap_or_default();
            match api.delete(&pn, &DeleteParams::default()).await {
                Ok(_) => recorder.event(
                    &job.object_ref(&()),
                    EventType::Normal,
                    "SuccessfulDelete",
                    &format!("Deleted pod: {pn}"),
                ),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let all_counted = u_succ.is_empty() && u_fail.is_empty();
        if active.is_empty() && terminating == 0 && all_counted && !finished(&st) {
            if has_cond(&st, "SuccessCriteriaMet") {
                add_cond(
                    &mut st,
                    "Complete",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                );
                recorder.event(
                    &job.object_ref(&()),
                    EventType::Normal,
                    "Completed",
                    "Job completed",
                );
            } else {
                let (reason, message) = st
                    .conditions
                    .as_ref()
                    .and_then(|cs| cs.iter().find(|c| c.type_ == "FailureTarget"))
                    .map(|c| {
                        (
                            c.reason.clone().unwrap_or_default(),
                            c.message.clone().unwrap_or_default(),
                        )
                    })
                    .unwrap_or_default();
                add_cond(&mut st, "Failed", &reason, &message);
                recorder.event(&job.object_ref(&()), EventType::Warning, &reason, &message);
            }
            st.completion_time = has_cond(&st, "Complete").then(util::now_time);
        }
    } else if !util::deleting(&job.metadata) {
        let want = match completions {
            Some(c) => parallelism.min((c - total_succeeded).max(0)),
            None => parallelism,
        } as usize;
        if active.len() < want {
            // Back-off after failures (10 s doubling, up to 6 min).
            let wait = if total_failed > 0 {
                let d = Duration::from_secs((10u64 << (total_failed - 1).min(6) as u32).min(360));
                let last_fail = pods
                    .iter()
                    .filter(|p| util::phase(p) == "Failed")
                    .filter_map(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
                    .max();
                last_fail.and_then(|t| {
                    let elapsed = jiff::Timestamp::now().duration_since(t).as_secs().max(0) as u64;
                    (elapsed < d.as_secs()).then(|| Duration::from_secs(d.as_secs() - elapsed))
                })
            } else {
                None
            };
            if let Some(w) = wait {
                soon(w, &mut requeue);
            } else {
                let mut created = Vec::new();
                for _ in active.len()..want {
                    let owner = util::controller_ref("batch/v1", "Job", &job.metadata);
                    let mut pod =
                        pod_from_template(Some(&spec.template), &ns, &format!("{name}-"), owner);
                    pod.metadata
                        .finalizers
                        .get_or_insert_with(Vec::new)
                        .push(TRACKING_FINALIZER.into());
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(p) => {
                            let pn = p.metadata.name.clone().unwrap_or_default();
                            recorder.event(
                                &job.object_ref(&()),
                                EventType::Normal,
                                "SuccessfulCreate",
                                &format!("Created pod: {pn}"),
                            );
                            created.push(pn);
                        }
                        Err(e) => {
                            let msg = match &e {
                                kube::Error::Api(s) => s.message.clone(),
                                other => other.to_string(),
                            };
                            recorder.event(
                                &job.object_ref(&()),
                                EventType::Warning,
                                "FailedCreate",
                                &format!("Error creating: {msg}"),
                            );
                            soon(Duration::from_secs(1), &mut requeue);
                            break;
                        }
                    }
                }
                if !created.is_empty() {
                    expect.insert(uid.clone(), (created, Instant::now()));
                }
            }
        }
    }
    // active/succeeded/failed are omitempty; ready and terminating are
    // pointers the controller always sets.
    st.active = (!active.is_empty()).then_some(active.len() as i32);
    if st.succeeded == Some(0) {
        st.succeeded = None;
    }
    if st.failed == Some(0) {
        st.failed = None;
    }
    st.ready = Some(active.iter().filter(|p| util::pod_ready(p)).count() as i32);
    st.terminating = Some(terminating);
    let norm = |s: &JobStatus| {
        let mut s = s.clone();
        for v in [
            &mut s.active,
            &mut s.succeeded,
            &mut s.failed,
            &mut s.terminating,
        ] {
            if *v == Some(0) {
                *v = None;
            }
        }
        if s.ready == Some(0) {
            s.ready = Some(0);
        }
        if s.uncounted_terminated_pods.as_ref().is_some_and(|u| {
            u.succeeded.as_ref().is_none_or(|v| v.is_empty())
                && u.failed.as_ref().is_none_or(|v| v.is_empty())
        }) {
            s.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        }
        s
    };
    if norm(&st) != norm(&old) {
        let mut new = (**job).clone();
        new.status = Some(st.clone());
        let japi: Api<Job> = Api::namespaced(client.clone(), &ns);
        japi.replace_status(&name, &PostParams::default(), &new)
            .await?;
    }
    // (b) after the status records them: release the finished pods.
    for p in to_release {
        let pu = p.metadata.uid.clone().unwrap_or_default();
        let recorded = st.uncounted_terminated_pods.as_ref().is_some_and(|u| {
            u.succeeded.iter().flatten().any(|x| *x == pu)
                || u.failed.iter().flatten().any(|x| *x == pu)
        });
        if recorded || finished(&st) || !matches!(util::phase(p), "Succeeded" | "Failed") {
            remove_tracking(client, p).await?;
        }
    }
    if !finished(&st) && (!u_succ.is_empty() || !u_fail.is_empty() || target_reached) {
        soon(Duration::from_millis(300), &mut requeue);
    }
    Ok(requeue)
}

/// The ttl-after-finished controller.
pub(crate) async fn run_ttl(kcm: ControllerManager, client: Client, stop: CancellationToken) {
    let mut rx = kcm.changes.subscribe();
    loop {
        let mut requeue: Option<Duration> = None;
        for job in kcm.jobs.state() {
            let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
                continue;
            };
            if util::deleting(&job.metadata) {
                continue;
            }
            let st = job.status.clone().unwrap_or_default();
            let finish = st
                .conditions
                .iter()
                .flatten()
                .filter(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
                .next()
                .or_else(|| st.completion_time.as_ref().map(|t| t.0));
            let Some(finish) = finish else { continue };
            let expire = finish + jiff::SignedDuration::from_secs(ttl.max(0) as i64);
            let now = jiff::Timestamp::now();
            if now < expire {
                let left = expire.duration_since(now).as_millis().max(0) as u64 + 50;
                let d = Duration::from_millis(left);
                requeue = Some(requeue.map_or(d, |x| x.min(d)));
                continue;
            }
            let ns = job.metadata.namespace.clone().unwrap_or_default();
            let name = job.metadata.name.clone().unwrap_or_default();
            let api: Api<Job> = Api::namespaced(client.clone(), &ns);
            let dp = DeleteParams {
                propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
                preconditions: Some(kube::api::Preconditions {
                    uid: None,
                    resource_version: job.metadata.resource_version.clone(),
                }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => {
                    tracing::debug!(job = %name, "deleted a finished job (ttlSecondsAfterFinished)")
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => {
                    tracing::debug!(job = %name, error = %e, "ttl deletion failed");
                    requeue = Some(Duration::from_secs(1));
                }
            }
        }
        if !informer::wait(&mut rx, requeue, &stop).await {
            return;
        }
    }
}

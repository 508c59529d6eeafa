//! The scenarios, written as a user would drive a cluster: kubectl for the
//! steps a user types, kube-rs for reading state, helm for the manager.
//! Each returns an error with the evidence when an expectation does not
//! hold, and records what it verified on the [`Harness`].

pub mod guard;
pub mod lifecycle;
pub mod rules;
pub mod uninstall;
pub mod upgrade;
pub mod vac;

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Service};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, KubeContext, Result};
use crate::harness::Harness;
use crate::tools::Kubectl;
use crate::wait;

/// The project profile's finalizer names (the chart's default).
pub const PVC_FINALIZER: &str = "protection-manager.io/pvc-protection";
pub const PV_FINALIZER: &str = "protection-manager.io/pv-protection";
pub const LB_FINALIZER: &str = "protection-manager.io/load-balancer-cleanup";

/// A namespace for the user's objects, with helpers for the steps.
pub struct App<'a> {
    pub h: &'a Harness,
    pub ns: String,
    pub kubectl: Kubectl,
    client: Client,
    seq: std::sync::atomic::AtomicU64,
}

/// The finalizers of an object.
pub fn finalizers(meta: &ObjectMeta) -> Vec<String> {
    meta.finalizers.clone().unwrap_or_default()
}

/// The finalizers of the project profile (`protection-manager.io/*`): on a
/// real cluster, kube-controller-manager's pv/pvc-protection and the
/// StorageObjectInUseProtection admission plugin add `kubernetes.io/*` ones
/// of their own, which say nothing about the manager.
pub fn project_finalizers(meta: &ObjectMeta) -> Vec<String> {
    finalizers(meta)
        .into_iter()
        .filter(|f| f.starts_with("protection-manager.io/"))
        .collect()
}

pub fn has_finalizer(meta: &ObjectMeta, f: &str) -> bool {
    finalizers(meta).iter().any(|x| x == f)
}

impl<'a> App<'a> {
    /// Creates the namespace `<run>-<suffix>`.
    pub async fn new(h: &'a Harness, suffix: &str) -> Result<App<'a>> {
        let ns = h.namespace(suffix).await?;
        Ok(App {
            h,
            ns,
            kubectl: h.kubectl()?,
            client: h.client.clone(),
            seq: std::sync::atomic::AtomicU64::new(0),
        })
    }

    pub fn timeout(&self) -> Duration {
        self.h.timeout(Duration::from_secs(60))
    }

    /// `kubectl create -f <file>` in the namespace (cluster-scoped objects
    /// ignore it).
    pub async fn create(&self, obj: &Value) -> Result<()> {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = self.h.write_file(
            &format!("obj-{}-{n}.json", self.ns),
            &serde_json::to_string_pretty(obj)
                .map_err(|e| Error::Check(format!("object json: {e}")))?,
        )?;
        self.kubectl
            .ok(&[
                "--namespace",
                &self.ns,
                "create",
                "-f",
                &file.display().to_string(),
            ])
            .await?;
        Ok(())
    }

    /// Creates through the API (for churn, where kubectl's start-up cost
    /// would dominate).
    pub async fn api_create<K>(&self, obj: &Value) -> Result<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let o: K = serde_json::from_value(obj.clone())
            .map_err(|e| Error::Check(format!("object json: {e}")))?;
        Api::<K>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &o)
            .await
            .ctx(|| format!("creating {} in {}", o.name_any(), self.ns))
    }

    /// `kubectl delete <what> --wait=<wait>` (extra flags appended).
    pub async fn delete(&self, what: &str, name: &str, wait: bool, extra: &[&str]) -> Result<()> {
        let mut args = vec![
            "--namespace".to_string(),
            self.ns.clone(),
            "delete".into(),
            what.into(),
            name.into(),
            format!("--wait={wait}"),
        ];
        if wait {
            args.push(format!("--timeout={}s", self.timeout().as_secs()));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        self.kubectl.ok(&args).await?;
        Ok(())
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pvs(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits until `get` returns an object satisfying `pred`; returns it.
    pub async fn wait_for<K, F>(&self, api: &Api<K>, name: &str, what: &str, pred: F) -> Result<K>
    where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + serde::Serialize,
        F: Fn(&K) -> bool,
    {
        let last = std::sync::Mutex::new(None::<K>);
        wait::until(
            &format!("{name}: {what}"),
            self.timeout(),
            || async {
                let o = api.get_opt(name).await.ctx(|| format!("getting {name}"))?;
                let ok = o.as_ref().filter(|o| pred(o)).cloned();
                if let Ok(mut l) = last.lock() {
                    *l = o;
                }
                Ok(ok)
            },
            || async {
                let l = last.lock().ok().and_then(|l| l.clone());
                format!(
                    "last seen: {}",
                    l.map(|o| serde_json::to_string(&o).unwrap_or_default())
                        .unwrap_or_else(|| "absent".into())
                )
            },
        )
        .await
    }

    /// Waits until the object is gone.
    pub async fn wait_gone<K>(&self, api: &Api<K>, name: &str) -> Result<()>
    where
        K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + serde::Serialize,
    {
        let last = std::sync::Mutex::new(None::<K>);
        wait::until_true(
            &format!("{name} is gone"),
            self.timeout(),
            || async {
                let o = api.get_opt(name).await.ctx(|| format!("getting {name}"))?;
                let gone = o.is_none();
                if let Ok(mut l) = last.lock() {
                    *l = o;
                }
                Ok(gone)
            },
            || async {
                let l = last.lock().ok().and_then(|l| l.clone());
                format!(
                    "still there: {}",
                    l.map(|o| serde_json::to_string(&o).unwrap_or_default())
                        .unwrap_or_default()
                )
            },
        )
        .await
    }

    /// Waits until the pod is Running (scheduled by the scheduler, started
    /// by the kubelet).
    pub async fn wait_running(&self, pod: &str) -> Result<Pod> {
        self.wait_for(&self.pods(), pod, "phase Running", |p: &Pod| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .await
    }
}

/// `status.phase`.
pub fn pvc_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn pv_phase(v: &PersistentVolume) -> &str {
    v.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `status.loadBalancer.ingress` IPs/hostnames.
pub fn ingress(s: &Service) -> Vec<String> {
    s.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .map(|i| {
            i.iter()
                .filter_map(|x| x.ip.clone().or_else(|| x.hostname.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The PodScheduled condition's (status, reason).
pub fn scheduled_condition(p: &Pod) -> Option<(String, String)> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// `protection-manager strip-finalizers --controller <controller> ...` with
/// the run's kubeconfig.
pub async fn strip_finalizers(
    app: &App<'_>,
    rel: &crate::release::ManagerRelease,
    controller: &str,
) -> Result<crate::tools::Ran> {
    let bin = crate::binaries::manager_binary()?;
    let args = [
        "strip-finalizers".to_string(),
        "--controller".into(),
        controller.into(),
        "--namespace".into(),
        rel.namespace.clone(),
        "--release-record-name".into(),
        rel.record_name(),
        "--kubeconfig".into(),
        app.h.kubeconfig.display().to_string(),
    ];
    let mut c = tokio::process::Command::new(&bin);
    c.args(&args);
    if let Some(ctx) = &app.h.context {
        c.arg("--context").arg(ctx);
    }
    let command = format!("{} {}", bin.display(), args.join(" "));
    let out = tokio::time::timeout(app.timeout(), c.output())
        .await
        .map_err(|_| Error::Check(format!("{command}: no answer within {:?}", app.timeout())))?
        .map_err(|e| Error::Config(format!("running {command}: {e}")))?;
    Ok(crate::tools::Ran {
        command,
        success: out.status.success(),
        status: out.status.to_string(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Waits until the release record satisfies `pred`; returns its data.
pub async fn wait_record<F>(
    rel: &crate::release::ManagerRelease,
    what: &str,
    pred: F,
) -> Result<std::collections::BTreeMap<String, String>>
where
    F: Fn(&std::collections::BTreeMap<String, String>) -> bool,
{
    wait::until(
        &format!("release record: {what}"),
        rel.timeout,
        || async {
            let r = rel.record().await?;
            Ok(pred(&r).then_some(r))
        },
        || async { format!("record: {:?}", rel.record().await.unwrap_or_default()) },
    )
    .await
}

/// `helm rollback <rel> 1` (to the 0.3 revision) refused by the
/// pre-rollback hook: returns helm's output, the hook's log and its
/// refusal line, which must contain every one of `wants`.
pub async fn refused_rollback_to_first(
    app: &App<'_>,
    rel: &crate::release::ManagerRelease,
    wants: &[&str],
) -> Result<(String, String)> {
    let err = rel.rollback(1, &[]).await?.refused()?;
    let log = guard::hook_log(app, rel).await?;
    let refusal = log
        .lines()
        .find(|l| l.contains("refusing to run as release 0.3"))
        .unwrap_or_default()
        .to_string();
    for want in wants {
        crate::ensure!(
            refusal.contains(want),
            "the hook's refusal should contain {want:?}:\nhelm: {err}\nhook: {log}"
        );
    }
    Ok((err, refusal))
}

/// helm leaves a refused rollback's revision `pending-rollback`: rolling
/// back to the revision that was deployed before it (from `history`, read
/// before the refusal) clears it. Returns that rollback when helm refuses
/// it (it does when the deployed revision added objects the refused one
/// lacks: the release is then `failed`, no longer pending).
pub async fn clear_pending_rollback(
    rel: &crate::release::ManagerRelease,
    history: &[crate::release::HistoryRow],
) -> Result<Option<crate::tools::Ran>> {
    let after = rel.history().await?;
    if after.last().is_none_or(|r| r.status != "pending-rollback") {
        return Ok(None);
    }
    let deployed = history
        .iter()
        .rev()
        .find(|r| r.status == "deployed")
        .map(|r| r.revision)
        .ok_or_else(|| Error::Check(format!("no deployed revision in {history:?}")))?;
    let ran = rel.rollback(deployed, &["--wait"]).await?;
    rel.wait_rollout().await?;
    Ok((!ran.success).then_some(ran))
}

/// The release record says a bare `0.4` (no minimum release).
pub async fn ensure_bare_record(rel: &crate::release::ManagerRelease, after: &str) -> Result<()> {
    let record = rel.record().await?;
    crate::ensure!(
        record.get("release").map(String::as_str) == Some("0.4")
            && !record.contains_key("minimumRelease"),
        "after {after} the record should say a bare 0.4: {record:?}"
    );
    Ok(())
}

/// `helm rollback <rel> 1 --wait` passes and 0.3 runs.
pub async fn rollback_to_first(rel: &crate::release::ManagerRelease) -> Result<()> {
    let out = rel.rollback(1, &["--wait"]).await?.ok()?;
    crate::ensure!(
        out.contains("Rollback was a success"),
        "helm rollback: {out}"
    );
    rel.wait_running_as("0.3").await
}

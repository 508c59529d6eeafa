//! The manager as a Helm release: install, upgrade, rollback with real helm,
//! and what a user checks afterwards (rollout status, the pods, the Lease
//! holder, the release record, the logs).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::error::{Error, KubeContext, Result};
use crate::harness::Harness;
use crate::tools::{Helm, Ran, chart_dir};
use crate::wait;

/// The Secret holding cloud-sim's token.
pub const TOKEN_SECRET: &str = "lb-token";
/// The chart's default load-balancer class.
pub const LB_CLASS: &str = "protection-manager.io/load-balancer";
/// The manager's container name in the chart.
pub const CONTAINER: &str = "manager";

/// One row of `helm history`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub revision: i64,
    pub status: String,
    pub description: String,
}

/// A release of the chart.
pub struct ManagerRelease {
    pub name: String,
    pub namespace: String,
    /// `<release>-protection-manager` (the chart's fullname).
    pub fullname: String,
    pub helm: Helm,
    client: Client,
    base_values: std::path::PathBuf,
    pub timeout: Duration,
}

impl ManagerRelease {
    /// Prepares a release named `name` in a new namespace `<run>-<suffix>`
    /// with cloud-sim's token Secret; installs nothing yet.
    pub async fn prepare(
        h: &Harness,
        helm: Helm,
        name: &str,
        ns_suffix: &str,
    ) -> Result<ManagerRelease> {
        let namespace = h.namespace(ns_suffix).await?;
        let with_token = h.create_token_secret(&namespace, TOKEN_SECRET).await?;
        let mut values = serde_json::json!({
            "image": {
                "repository": h.manager_image.repository,
                "tag": h.manager_image.tag,
                "pullPolicy": h.image_pull_policy,
            },
            "loadBalancer": {"provider": {"endpoint": format!("{}/", h.cloud.url())}},
            // Readiness every second: rollouts finish sooner; the other
            // probe settings are the chart's.
            "probes": {"readiness": {"initialDelaySeconds": 1, "periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": 3}},
        });
        if with_token {
            values["loadBalancer"]["provider"]["tokenSecret"] =
                serde_json::json!({"name": TOKEN_SECRET, "key": "token"});
        }
        let text = serde_yaml::to_string(&values)
            .map_err(|e| Error::Check(format!("values YAML: {e}")))?;
        let base_values = h.write_file(&format!("values-{namespace}.yaml"), &text)?;
        // The chart's ClusterRole(Binding) are named after the release: on
        // a shared real cluster, runs (and the tests of one run, in
        // parallel) need distinct release names.
        let name = if h.is_sim() {
            name.to_string()
        } else {
            format!("{name}-{}", h.run)
        };
        h.track_release(&name);
        let fullname = if name.contains("protection-manager") {
            name.clone()
        } else {
            format!("{name}-protection-manager")
        };
        Ok(ManagerRelease {
            name,
            namespace,
            fullname,
            helm,
            client: h.client.clone(),
            base_values,
            timeout: h.timeout(Duration::from_secs(120)),
        })
    }

    /// The manager's user on the API server.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.fullname)
    }

    pub fn lease_name(&self) -> &str {
        &self.fullname
    }

    pub fn record_name(&self) -> String {
        format!("{}-release", self.fullname)
    }

    fn args(&self, verb: &str, sets: &[&str], wait: bool) -> Vec<String> {
        let mut a: Vec<String> = vec![
            verb.into(),
            self.name.clone(),
            chart_dir().display().to_string(),
            "--namespace".into(),
            self.namespace.clone(),
            "-f".into(),
            self.base_values.display().to_string(),
        ];
        for s in sets {
            a.push("--set".into());
            a.push((*s).to_string());
        }
        if wait {
            a.push("--wait".into());
        }
        a.push("--timeout".into());
        a.push(format!("{}s", self.timeout.as_secs()));
        a
    }

    /// `helm install` with the base values and `sets`.
    pub async fn install(&self, sets: &[&str], wait: bool) -> Result<String> {
        self.helm.ok(&self.args("install", sets, wait)).await
    }

    /// `helm upgrade` with the base values and `sets` (the whole values,
    /// not reused: each step says what it runs).
    pub async fn upgrade(&self, sets: &[&str], wait: bool) -> Result<String> {
        self.helm.ok(&self.args("upgrade", sets, wait)).await
    }

    /// `helm upgrade` that must fail; returns helm's output.
    pub async fn upgrade_refused(&self, sets: &[&str]) -> Result<String> {
        self.helm
            .run(&self.args("upgrade", sets, false))
            .await?
            .refused()
    }

    /// `helm rollback <release> <revision> [extra...]`.
    pub async fn rollback(&self, revision: i64, extra: &[&str]) -> Result<Ran> {
        let mut a: Vec<String> = vec![
            "rollback".into(),
            self.name.clone(),
            revision.to_string(),
            "--namespace".into(),
            self.namespace.clone(),
            "--timeout".into(),
            format!("{}s", self.timeout.as_secs()),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        self.helm.run(&a).await
    }

    /// `helm history -o json`.
    pub async fn history(&self) -> Result<Vec<HistoryRow>> {
        let out = self
            .helm
            .ok(&[
                "history",
                &self.name,
                "--namespace",
                &self.namespace,
                "-o",
                "json",
            ])
            .await?;
        let v: Value = serde_json::from_str(&out)
            .map_err(|e| Error::Check(format!("helm history json ({e}): {out}")))?;
        Ok(v.as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| HistoryRow {
                        revision: r["revision"].as_i64().unwrap_or_default(),
                        status: r["status"].as_str().unwrap_or_default().to_string(),
                        description: r["description"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    pub async fn deployment(&self) -> Result<Option<Deployment>> {
        Api::<Deployment>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(&self.fullname)
            .await
            .ctx(|| format!("getting deployment {}/{}", self.namespace, self.fullname))
    }

    /// The manager container's args in the stored Deployment.
    pub async fn deployment_args(&self) -> Result<Vec<String>> {
        let d = self.deployment().await?.ok_or_else(|| {
            Error::Check(format!(
                "deployment {}/{} does not exist",
                self.namespace, self.fullname
            ))
        })?;
        Ok(d.spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().find(|c| c.name == CONTAINER))
            .and_then(|c| c.args)
            .unwrap_or_default())
    }

    /// The manager's pods (by the chart's selector labels).
    pub async fn pods(&self) -> Result<Vec<Pod>> {
        let sel = format!(
            "app.kubernetes.io/name=protection-manager,app.kubernetes.io/instance={}",
            self.name
        );
        Ok(Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default().labels(&sel))
            .await
            .ctx(|| format!("listing the manager pods in {}", self.namespace))?
            .items)
    }

    /// `kubectl rollout status`: the Deployment's latest generation is
    /// observed, every replica is updated, ready and available, and no old
    /// replica is left.
    pub async fn rollout_complete(&self) -> Result<bool> {
        let Some(d) = self.deployment().await? else {
            return Ok(false);
        };
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let generation = d.metadata.generation.unwrap_or(0);
        let Some(st) = d.status else { return Ok(false) };
        Ok(st.observed_generation.unwrap_or(0) >= generation
            && st.updated_replicas.unwrap_or(0) == want
            && st.replicas.unwrap_or(0) == want
            && st.available_replicas.unwrap_or(0) == want
            && st.ready_replicas.unwrap_or(0) == want)
    }

    /// Waits for [`ManagerRelease::rollout_complete`].
    pub async fn wait_rollout(&self) -> Result<()> {
        wait::until_true(
            &format!(
                "deployment {}/{} is rolled out",
                self.namespace, self.fullname
            ),
            self.timeout,
            || self.rollout_complete(),
            || self.diagnostics(),
        )
        .await
    }

    /// The release recorded in the release record ConfigMap.
    pub async fn recorded_release(&self) -> Result<Option<String>> {
        let cm = Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(&self.record_name())
            .await
            .ctx(|| format!("getting the release record in {}", self.namespace))?;
        // While a minimum release is recorded, the version is followed by
        // its explanation (for guards that predate the minimum).
        Ok(cm
            .and_then(|c| c.data)
            .and_then(|d| d.get("release").cloned())
            .map(|r| r.split_whitespace().next().unwrap_or_default().to_string()))
    }

    /// The release record's data (release, minimum release and its
    /// finalizers, details).
    pub async fn record(&self) -> Result<std::collections::BTreeMap<String, String>> {
        let cm = Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(&self.record_name())
            .await
            .ctx(|| format!("getting the release record in {}", self.namespace))?;
        Ok(cm.and_then(|c| c.data).unwrap_or_default())
    }

    /// Waits until the rollout is complete and the leader has recorded
    /// `release` (the new release runs and leads).
    pub async fn wait_running_as(&self, release: &str) -> Result<()> {
        wait::until_true(
            &format!(
                "the manager in {} runs and records release {release}",
                self.namespace
            ),
            self.timeout,
            || async {
                Ok(self.rollout_complete().await?
                    && self.recorded_release().await?.as_deref() == Some(release))
            },
            || self.diagnostics(),
        )
        .await
    }

    /// The Lease.
    pub async fn lease(&self) -> Result<Option<Lease>> {
        Api::<Lease>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(self.lease_name())
            .await
            .ctx(|| format!("getting lease {}/{}", self.namespace, self.lease_name()))
    }

    /// The leader: `(pod name, holder identity)`, from the Lease holder
    /// (`<pod>_<uuid>`), if the pod exists.
    pub async fn leader(&self) -> Result<Option<(String, String)>> {
        let Some(l) = self.lease().await? else {
            return Ok(None);
        };
        let Some(holder) = l
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
        else {
            return Ok(None);
        };
        let pods = self.pods().await?;
        Ok(pods
            .iter()
            .map(|p| p.name_any())
            .find(|n| holder.starts_with(&format!("{n}_")))
            .map(|n| (n, holder)))
    }

    /// The create-time MutatingAdmissionPolicies this release installed
    /// (chart value createTimeProtection), sorted by name: served as
    /// admissionregistration.k8s.io/v1, else v1beta1; none where the cluster
    /// serves neither.
    pub async fn create_time_policies(&self) -> Result<Vec<String>> {
        use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
        for version in ["v1", "v1beta1"] {
            let gvk = GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                version,
                "MutatingAdmissionPolicy",
            );
            let api: Api<DynamicObject> = Api::all_with(
                self.client.clone(),
                &ApiResource::from_gvk_with_plural(&gvk, "mutatingadmissionpolicies"),
            );
            let lp =
                ListParams::default().labels(&format!("app.kubernetes.io/instance={}", self.name));
            match api.list(&lp).await {
                Ok(list) => {
                    let mut names: Vec<String> = list.items.iter().map(|p| p.name_any()).collect();
                    names.sort();
                    return Ok(names);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => continue,
                Err(e) => {
                    return Err(e).ctx(|| {
                        format!("listing admissionregistration.k8s.io/{version} MutatingAdmissionPolicies")
                    });
                }
            }
        }
        Ok(Vec::new())
    }

    /// Pods, their phase/readiness and restarts, and the Deployment status,
    /// for failure messages.
    pub async fn diagnostics(&self) -> String {
        let mut out = String::new();
        match self.deployment().await {
            Ok(Some(d)) => out.push_str(&format!(
                "deployment {}/{}: generation {:?}, status {}\n",
                self.namespace,
                self.fullname,
                d.metadata.generation,
                serde_json::to_string(&d.status).unwrap_or_default()
            )),
            Ok(None) => out.push_str("deployment: absent\n"),
            Err(e) => out.push_str(&format!("deployment: {e}\n")),
        }
        if let Ok(pods) = self.pods().await {
            for p in pods {
                let st = p.status.as_ref();
                let cs = st
                    .and_then(|s| s.container_statuses.as_ref())
                    .map(|c| {
                        c.iter()
                            .map(|c| {
                                format!(
                                    "{} ready={} restarts={} state={}",
                                    c.name,
                                    c.ready,
                                    c.restart_count,
                                    serde_json::to_string(&c.state).unwrap_or_default()
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_default();
                out.push_str(&format!(
                    "pod {}: phase {:?} node {:?} deleting {} {cs}\n",
                    p.name_any(),
                    st.and_then(|s| s.phase.clone()),
                    p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    p.metadata.deletion_timestamp.is_some(),
                ));
            }
        }
        if let Ok(Some(r)) = self.recorded_release().await {
            out.push_str(&format!("recorded release: {r}\n"));
        }
        out
    }

    /// The current (and, if `previous`, last) log of every manager pod.
    pub async fn logs(&self, h: &Harness, previous: bool) -> Result<String> {
        let mut out = String::new();
        for p in self.pods().await? {
            let name = p.name_any();
            if let Ok(l) = h.pod_log(&self.namespace, &name, false).await {
                out.push_str(&format!("--- {name}\n{l}"));
            }
            if previous && let Ok(l) = h.pod_log(&self.namespace, &name, true).await {
                out.push_str(&format!("--- {name} (previous)\n{l}"));
            }
        }
        Ok(out)
    }
}

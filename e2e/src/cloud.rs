//! cloud-sim as the scenarios see it: in-process (sim mode) or over HTTP at
//! `E2E_CLOUD_SIM_URL` (cluster mode). Either way the harness reads the
//! inventory (to find orphaned load balancers) and sets faults.

use std::time::Duration;

use cloud_sim::{CloudSim, FaultSet, LoadBalancer};

use crate::error::{Error, Result};

/// cloud-sim, local or remote.
pub enum Cloud {
    Local(CloudSim),
    Remote(RemoteCloud),
}

/// cloud-sim reached over HTTP.
pub struct RemoteCloud {
    url: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Cloud {
    /// Starts cloud-sim in-process, with a token (the manager reads it from
    /// the Secret the chart mounts).
    pub async fn start_local(token: &str) -> Result<Cloud> {
        let sim = CloudSim::start(cloud_sim::Config::default().with_token(token))
            .await
            .map_err(|e| Error::Cloud(format!("starting cloud-sim: {e}")))?;
        Ok(Cloud::Local(sim))
    }

    /// A remote cloud-sim; checks that it answers.
    pub async fn connect(url: &str, token: Option<String>) -> Result<Cloud> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| Error::Cloud(format!("building an HTTP client: {e}")))?;
        let cloud = Cloud::Remote(RemoteCloud {
            url: url.trim_end_matches('/').to_string(),
            token,
            http,
        });
        cloud.load_balancers().await.map_err(|e| {
            Error::Config(format!(
                "E2E_CLOUD_SIM_URL={url}: cloud-sim does not answer from this machine ({e}); it must be reachable from the pods and from here"
            ))
        })?;
        Ok(cloud)
    }

    /// The base URL (the manager's `loadBalancer.provider.endpoint`).
    pub fn url(&self) -> String {
        match self {
            Cloud::Local(s) => s.url(),
            Cloud::Remote(r) => r.url.clone(),
        }
    }

    /// Every load balancer.
    pub async fn load_balancers(&self) -> Result<Vec<LoadBalancer>> {
        match self {
            Cloud::Local(s) => Ok(s.inventory()),
            Cloud::Remote(r) => {
                let inv: cloud_sim::model::Inventory = r
                    .send(r.http.get(format!("{}/v1/loadbalancers", r.url)))
                    .await?;
                Ok(inv.items)
            }
        }
    }

    /// The load balancer of the Service with this UID, if any.
    pub async fn get(&self, service_uid: &str) -> Result<Option<LoadBalancer>> {
        match self {
            Cloud::Local(s) => Ok(s.get(service_uid)),
            Cloud::Remote(_) => Ok(self
                .load_balancers()
                .await?
                .into_iter()
                .find(|lb| lb.service.uid == service_uid)),
        }
    }

    /// Replaces the fault configuration.
    pub async fn set_faults(&self, faults: FaultSet) -> Result<()> {
        match self {
            Cloud::Local(s) => s
                .faults()
                .set(faults)
                .map_err(|e| Error::Cloud(format!("setting faults: {e}"))),
            Cloud::Remote(r) => {
                let _: serde_json::Value = r
                    .send(r.http.put(format!("{}/_sim/faults", r.url)).json(&faults))
                    .await?;
                Ok(())
            }
        }
    }

    /// Removes every fault (and releases hanging calls).
    pub async fn clear_faults(&self) -> Result<()> {
        match self {
            Cloud::Local(s) => {
                s.faults().clear();
                Ok(())
            }
            Cloud::Remote(r) => {
                let _: serde_json::Value = r
                    .send(r.http.delete(format!("{}/_sim/faults", r.url)))
                    .await?;
                Ok(())
            }
        }
    }

    /// Creates a load balancer for a Service directly through the provider
    /// API (as the manager would), e.g. to give the checks an orphan to
    /// find.
    pub async fn create_load_balancer(
        &self,
        token: Option<&str>,
        uid: &str,
        namespace: &str,
        name: &str,
    ) -> Result<()> {
        let body = serde_json::json!({
            "name": format!("e2e-{uid}"),
            "service": {"namespace": namespace, "name": name, "uid": uid},
            "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}]},
            "nodes": [],
        });
        let http = reqwest::Client::new();
        let mut req = http
            .put(format!("{}/v1/loadbalancers/{uid}", self.url()))
            .json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| Error::Cloud(format!("creating a load balancer: {e}")))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            return Err(Error::Cloud(format!(
                "creating a load balancer: {status}: {text}"
            )));
        }
        Ok(())
    }

    /// Call counters (for the report).
    pub async fn stats(&self) -> Result<serde_json::Value> {
        match self {
            Cloud::Local(s) => serde_json::to_value(s.stats())
                .map_err(|e| Error::Cloud(format!("encoding stats: {e}"))),
            Cloud::Remote(r) => r.send(r.http.get(format!("{}/_sim/stats", r.url))).await,
        }
    }

    pub async fn shutdown(self) {
        if let Cloud::Local(s) = self
            && let Err(e) = s.shutdown().await
        {
            tracing::warn!(error = %e, "stopping cloud-sim");
        }
    }
}

impl RemoteCloud {
    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let resp = req
            .send()
            .await
            .map_err(|e| Error::Cloud(format!("{}: {e}", self.url)))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| Error::Cloud(format!("{}: reading the reply: {e}", self.url)))?;
        if !status.is_success() {
            return Err(Error::Cloud(format!("{}: {status}: {body}", self.url)));
        }
        serde_json::from_str(&body)
            .map_err(|e| Error::Cloud(format!("{}: unexpected reply ({e}): {body}", self.url)))
    }
}

//! An opt-in cost model: what a request costs a real kube-apiserver + etcd,
//! so that a benchmark on kube-sim predicts a real server. kube-sim itself
//! answers a write in microseconds; a real server spends milliseconds per
//! write (an etcd round trip, admission, conversion) and serves only so many
//! at once. The model gives each request a service time by verb and
//! resource and serves at most `seats` requests at a time (like the
//! API server's priority-and-fairness seats); the rest queue. Watches are
//! long-running and cost nothing after they start, as in APF.
//!
//! `real-1.36` is calibrated to a kube-apiserver 1.36 with etcd on one
//! 2-core machine (see the README for the figures and how close the model
//! comes). A JSON file gives another model:
//!
//! ```json
//! {"seats": 4, "defaultMillis": 2.0,
//!  "costs": [{"verb": "patch", "resource": "persistentvolumeclaims", "millis": 3.4}]}
//! ```
//! A cost without `resource` applies to every resource of its verb; the
//! most specific match wins.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// One service time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cost {
    pub verb: String,
    #[serde(default)]
    pub resource: Option<String>,
    pub millis: f64,
}

/// A cost model as written in a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CostSpec {
    /// Requests served at once; the rest wait.
    pub seats: usize,
    /// Service time of a request no cost names.
    pub default_millis: f64,
    #[serde(default)]
    pub costs: Vec<Cost>,
}

impl CostSpec {
    /// The built-in model calibrated to kube-apiserver 1.36 + etcd on a
    /// 2-core machine: a serial finalizer PATCH at ~290/s, a ceiling of
    /// ~1,150 PATCH/s with many in flight, creates at 16 clients of PV/PVC
    /// ~445/s, pods ~395/s, LoadBalancer Services ~115/s.
    pub fn real_1_36() -> CostSpec {
        let c = |verb: &str, resource: Option<&str>, millis: f64| Cost {
            verb: verb.into(),
            resource: resource.map(Into::into),
            millis,
        };
        CostSpec {
            seats: 4,
            default_millis: 1.0,
            costs: vec![
                c("get", None, 0.8),
                c("list", None, 6.0),
                c("watch", None, 1.0),
                c("patch", None, 2.9),
                c("update", None, 2.9),
                c("delete", None, 2.9),
                c("create", None, 8.2),
                c("create", Some("pods"), 9.3),
                c("create", Some("services"), 34.8),
                c("create", Some("events"), 8.2),
                c("create", Some("tokenreviews"), 1.0),
                c("create", Some("subjectaccessreviews"), 1.0),
            ],
        }
    }

    /// `real-1.36`, or a JSON file; the error names the input.
    pub fn load(spec: &str) -> Result<CostSpec, String> {
        if spec == "real-1.36" {
            return Ok(CostSpec::real_1_36());
        }
        let text = std::fs::read_to_string(spec).map_err(|e| {
            format!("--cost-model {spec:?}: neither \"real-1.36\" nor a readable file: {e}")
        })?;
        let s: CostSpec = serde_json::from_str(&text)
            .map_err(|e| format!("--cost-model {spec:?}: not a cost model: {e}"))?;
        s.validate()
            .map_err(|e| format!("--cost-model {spec:?}: {e}"))?;
        Ok(s)
    }

    fn validate(&self) -> Result<(), String> {
        if self.seats == 0 || self.seats > 10_000 {
            return Err(format!("seats must be 1..=10000, got {}", self.seats));
        }
        let ok = |m: f64| m.is_finite() && (0.0..=60_000.0).contains(&m);
        if !ok(self.default_millis) {
            return Err(format!(
                "defaultMillis must be 0..=60000, got {}",
                self.default_millis
            ));
        }
        for c in &self.costs {
            if !ok(c.millis) {
                return Err(format!(
                    "millis of {} {} must be 0..=60000, got {}",
                    c.verb,
                    c.resource.as_deref().unwrap_or("*"),
                    c.millis
                ));
            }
        }
        Ok(())
    }

    /// The service time of `verb` on `resource`.
    pub fn service_time(&self, verb: &str, resource: &str) -> Duration {
        let exact = self
            .costs
            .iter()
            .find(|c| c.verb == verb && c.resource.as_deref() == Some(resource));
        let any = || {
            self.costs
                .iter()
                .find(|c| c.verb == verb && c.resource.is_none())
        };
        let ms = exact.or_else(any).map_or(self.default_millis, |c| c.millis);
        Duration::from_secs_f64(ms / 1000.0)
    }
}

/// The model at work: seats and service times.
#[derive(Clone, Debug)]
pub struct CostModel {
    spec: Arc<CostSpec>,
    seats: Arc<Semaphore>,
}

impl CostModel {
    pub fn new(spec: CostSpec) -> CostModel {
        CostModel {
            seats: Arc::new(Semaphore::new(spec.seats)),
            spec: Arc::new(spec),
        }
    }

    /// Waits for a seat and holds it for the request's service time.
    pub async fn charge(&self, verb: &str, resource: &str) {
        let d = self.spec.service_time(verb, resource);
        if d.is_zero() {
            return;
        }
        if let Ok(_seat) = self.seats.acquire().await {
            tokio::time::sleep(d).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_cost_wins() {
        let s = CostSpec::real_1_36();
        assert_eq!(
            s.service_time("create", "services"),
            Duration::from_secs_f64(0.0348)
        );
        assert_eq!(
            s.service_time("create", "configmaps"),
            Duration::from_secs_f64(0.0082)
        );
        assert_eq!(
            s.service_time("deletecollection", "pods"),
            Duration::from_secs_f64(0.001)
        );
    }

    #[test]
    fn a_bad_model_is_refused_naming_the_input() {
        let e = CostSpec::load("/nonexistent/model.json").unwrap_err();
        assert!(e.contains("/nonexistent/model.json"), "{e}");
        let dir = std::env::temp_dir().join(format!("cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("m.json");
        std::fs::write(&f, r#"{"seats": 0, "defaultMillis": 1}"#).unwrap();
        let e = CostSpec::load(f.to_str().unwrap()).unwrap_err();
        assert!(e.contains("seats must be"), "{e}");
        std::fs::write(&f, r#"{"seats": 2, "defaultMillis": 1, "cost": []}"#).unwrap();
        let e = CostSpec::load(f.to_str().unwrap()).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        std::fs::write(&f, r#"{"seats": 2, "defaultMillis": 1.5}"#).unwrap();
        assert_eq!(CostSpec::load(f.to_str().unwrap()).unwrap().seats, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn seats_bound_the_throughput() {
        let m = CostModel::new(CostSpec {
            seats: 2,
            default_millis: 10.0,
            costs: vec![],
        });
        let start = tokio::time::Instant::now();
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let m = m.clone();
                tokio::spawn(async move { m.charge("patch", "pods").await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // 10 requests of 10 ms on 2 seats: 50 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(50));
    }
}

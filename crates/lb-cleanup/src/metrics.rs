//! Provider call metrics: `protection_manager_lb_provider_requests_total{op,result}`
//! and `protection_manager_lb_provider_request_duration_seconds{op}`, recorded
//! by a [`LoadBalancerProvider`] wrapper so that every provider is measured
//! the same way.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use crate::provider::{LbNode, LbRef, LbSpec, LbStatus, LoadBalancerProvider, ProviderError};

/// The provider metric families.
#[derive(Clone, Debug)]
pub struct ProviderMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
}

/// Operations, as labelled.
pub const OPS: [&str; 4] = ["get", "ensure", "update_hosts", "ensure_deleted"];

/// The `result` label of a call.
pub fn result_label(r: &Result<(), &ProviderError>) -> &'static str {
    match r {
        Ok(()) => "success",
        Err(e) => match e {
            ProviderError::RetryAfter { .. } => "retry_after",
            ProviderError::ImplementedElsewhere => "implemented_elsewhere",
            ProviderError::Transient { .. } => "transient",
            ProviderError::Timeout { .. } => "timeout",
            ProviderError::Conflict { .. } => "conflict",
            ProviderError::Unauthorized { .. } => "unauthorized",
            ProviderError::NotFound { .. } => "not_found",
            ProviderError::InvalidRequest { .. } => "invalid_request",
            ProviderError::InvalidReply { .. } => "invalid_reply",
            ProviderError::Config { .. } => "config",
        },
    }
}

impl ProviderMetrics {
    /// Creates the families and registers them in `registry`. A family that
    /// is already registered (a controller restarted in the same process) is
    /// reused through a fresh, unregistered handle, and logged.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "lb_provider_requests_total",
                "Load-balancer provider calls by operation and result.",
            )
            .namespace("protection_manager"),
            &["op", "result"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "lb_provider_request_duration_seconds",
                "Duration of load-balancer provider calls by operation.",
            )
            .namespace("protection_manager")
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ]),
            &["op"],
        )?;
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(duration.clone()),
        ] {
            match registry.register(c) {
                Ok(()) => {}
                Err(prometheus::Error::AlreadyReg) => {
                    tracing::warn!(
                        "load-balancer provider metrics already registered; this instance's calls are not exported"
                    );
                }
                Err(e) => return Err(e),
            }
        }
        for op in OPS {
            requests.with_label_values(&[op, "success"]);
            duration.with_label_values(&[op]);
        }
        Ok(Self { requests, duration })
    }

    fn observe(&self, op: &str, start: Instant, result: &'static str) {
        self.requests.with_label_values(&[op, result]).inc();
        self.duration
            .with_label_values(&[op])
            .observe(start.elapsed().as_secs_f64());
    }
}

/// A provider that records [`ProviderMetrics`] around every call.
pub struct Instrumented {
    inner: Arc<dyn LoadBalancerProvider>,
    metrics: ProviderMetrics,
}

impl Instrumented {
    pub fn new(inner: Arc<dyn LoadBalancerProvider>, metrics: ProviderMetrics) -> Self {
        Self { inner, metrics }
    }

    fn record<T>(&self, op: &str, start: Instant, r: &Result<T, ProviderError>) {
        let label = result_label(&r.as_ref().map(|_| ()));
        self.metrics.observe(op, start, label);
        if let Err(e) = r {
            tracing::debug!(provider = self.inner.name(), op, error = %e, "load-balancer provider call failed");
        }
    }
}

#[async_trait]
impl LoadBalancerProvider for Instrumented {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get(&self, lb: &LbRef) -> Result<Option<LbStatus>, ProviderError> {
        let t = Instant::now();
        let r = self.inner.get(lb).await;
        self.record("get", t, &r);
        r
    }

    async fn ensure(
        &self,
        lb: &LbRef,
        spec: &LbSpec,
        nodes: &[LbNode],
    ) -> Result<LbStatus, ProviderError> {
        let t = Instant::now();
        let r = self.inner.ensure(lb, spec, nodes).await;
        self.record("ensure", t, &r);
        r
    }

    async fn update_hosts(
        &self,
        lb: &LbRef,
        spec: &LbSpec,
        nodes: &[LbNode],
    ) -> Result<(), ProviderError> {
        let t = Instant::now();
        let r = self.inner.update_hosts(lb, spec, nodes).await;
        self.record("update_hosts", t, &r);
        r
    }

    async fn ensure_deleted(&self, lb: &LbRef) -> Result<(), ProviderError> {
        let t = Instant::now();
        let r = self.inner.ensure_deleted(lb).await;
        self.record("ensure_deleted", t, &r);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::tests::FakeProvider;
    use prometheus::{Encoder, TextEncoder};

    fn text(r: &Registry) -> String {
        let mut b = Vec::new();
        TextEncoder::new().encode(&r.gather(), &mut b).unwrap();
        String::from_utf8(b).unwrap()
    }

    #[tokio::test]
    async fn calls_are_counted_by_op_and_result_and_timed() {
        let reg = Registry::new();
        let fake = Arc::new(FakeProvider::default());
        fake.fail_next(
            "delete",
            ProviderError::Timeout {
                message: "slow".into(),
            },
        );
        let p = Instrumented::new(fake.clone(), ProviderMetrics::new(&reg).unwrap());
        let lb = LbRef::new("ns", "web", "uid-1");
        assert_eq!(p.get(&lb).await, Ok(None));
        assert!(p.ensure_deleted(&lb).await.is_err());
        assert!(p.ensure_deleted(&lb).await.is_ok());
        let t = text(&reg);
        for needle in [
            "protection_manager_lb_provider_requests_total{op=\"get\",result=\"success\"} 1",
            "protection_manager_lb_provider_requests_total{op=\"ensure_deleted\",result=\"timeout\"} 1",
            "protection_manager_lb_provider_requests_total{op=\"ensure_deleted\",result=\"success\"} 1",
            "protection_manager_lb_provider_requests_total{op=\"ensure\",result=\"success\"} 0",
            "protection_manager_lb_provider_request_duration_seconds_count{op=\"ensure_deleted\"} 2",
        ] {
            assert!(t.contains(needle), "missing {needle} in\n{t}");
        }
        assert_eq!(p.name(), "fake");
        // Registering twice does not fail.
        assert!(ProviderMetrics::new(&reg).is_ok());
    }
}

//! The Kubernetes client's own metrics, like client-go's `rest_client_*`:
//! requests by verb and response code, their latency, and the time requests
//! wait for the client-side rate limiter (`--kube-api-qps`/`--kube-api-burst`),
//! so that an operator sees when the manager is throttled.
//!
//! A tower layer placed *outside* the rate limiter (see
//! [`crate::client::build_client_observed`]): kube's client drives its stack
//! from one buffer worker that takes a request, waits in `poll_ready` until the
//! stack is ready (the rate limiter waits there for a token), then calls it. The
//! time `poll_ready` stays pending is the request's rate-limiter wait.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::Instant;

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use tower::{Layer, Service};

const PREFIX: &str = "protection_manager";

/// The metric families (registered once, cheap to clone).
#[derive(Clone, Debug)]
pub struct ClientMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
    rate_limiter_wait: Histogram,
}

impl ClientMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "kube_client_requests_total",
                "Requests to the Kubernetes API server by verb (get, list, watch, create, update, patch, delete, deletecollection) and HTTP status code (`<error>` when no response arrived).",
            )
            .namespace(PREFIX),
            &["verb", "code"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "kube_client_request_duration_seconds",
                "Time from sending a request to the Kubernetes API server to its response headers (a watch: until it is established), by verb and code.",
            )
            .namespace(PREFIX)
            .buckets(vec![
                0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
            ]),
            &["verb", "code"],
        )?;
        let rate_limiter_wait = Histogram::with_opts(
            HistogramOpts::new(
                "kube_client_rate_limiter_wait_seconds",
                "Time a request waited for the client-side rate limiter (--kube-api-qps, --kube-api-burst) before it was sent.",
            )
            .namespace(PREFIX)
            .buckets(vec![
                0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
            ]),
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(rate_limiter_wait.clone()))?;
        Ok(ClientMetrics {
            requests,
            duration,
            rate_limiter_wait,
        })
    }

    /// The tower layer recording into these families.
    pub fn layer(&self) -> ClientMetricsLayer {
        ClientMetricsLayer {
            metrics: self.clone(),
        }
    }

    fn observe(&self, verb: &str, code: &str, started: Instant) {
        self.requests.with_label_values(&[verb, code]).inc();
        self.duration
            .with_label_values(&[verb, code])
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The verb the API server's authorizer would name for a request
/// (k8s.io/apiserver `RequestInfo`): GET of a collection is `list`, of a named
/// object `get`, with `watch=true` (or a `/watch/` path) `watch`.
pub fn kube_verb(method: &http::Method, path: &str, query: Option<&str>) -> &'static str {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        // Non-resource paths (/version, /healthz): GET is `get`.
        _ => &[],
    };
    let is_resource = !rest.is_empty();
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        other => (false, other),
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let named = rest.len() >= 2;
    let watch_query = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    });
    let target = if !is_resource {
        request_verb::Target::NonResource
    } else if named {
        request_verb::Target::Named
    } else {
        request_verb::Target::Collection
    };
    request_verb::verb(method, target, watch_path || watch_query).unwrap_or("other")
}

/// The layer; see the module documentation for where it must sit.
#[derive(Clone, Debug)]
pub struct ClientMetricsLayer {
    metrics: ClientMetrics,
}

impl<S> Layer<S> for ClientMetricsLayer {
    type Service = ClientMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientMetricsService {
            inner,
            metrics: self.metrics.clone(),
            waiting_since: None,
        }
    }
}

/// The service.
#[derive(Debug)]
pub struct ClientMetricsService<S> {
    inner: S,
    metrics: ClientMetrics,
    /// Set by the first `poll_ready` of a request, cleared when it is ready.
    waiting_since: Option<Instant>,
}

impl<S, B, RB> Service<http::Request<B>> for ClientMetricsService<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        let ready = self.inner.poll_ready(cx);
        if ready.is_ready() {
            self.waiting_since = None;
            self.metrics
                .rate_limiter_wait
                .observe(since.elapsed().as_secs_f64());
        }
        ready
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let verb = kube_verb(req.method(), req.uri().path(), req.uri().query());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            match &res {
                Ok(resp) => metrics.observe(verb, resp.status().as_str(), started),
                Err(_) => metrics.observe(verb, "<error>", started),
            }
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use tower::ServiceExt;

    #[test]
    fn verbs_as_the_authorizer_names_them() {
        let cases = [
            (Method::GET, "/api/v1/persistentvolumes", None, "list"),
            (Method::GET, "/api/v1/persistentvolumes/pv-1", None, "get"),
            (
                Method::GET,
                "/api/v1/namespaces/shop/persistentvolumeclaims",
                None,
                "list",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/shop/persistentvolumeclaims/data",
                None,
                "get",
            ),
            (
                Method::GET,
                "/api/v1/pods",
                Some("watch=true&resourceVersion=5"),
                "watch",
            ),
            (Method::GET, "/api/v1/watch/pods", None, "watch"),
            (Method::GET, "/api/v1/namespaces/shop", None, "get"),
            (Method::GET, "/api/v1/namespaces", None, "list"),
            (Method::GET, "/version", None, "get"),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/shop/events",
                None,
                "create",
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/pm/leases/pm",
                None,
                "update",
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/shop/services/web/status",
                None,
                "patch",
            ),
            (
                Method::DELETE,
                "/api/v1/persistentvolumes/pv-1",
                None,
                "delete",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/shop/pods",
                None,
                "deletecollection",
            ),
        ];
        for (method, path, query, want) in cases {
            assert_eq!(kube_verb(&method, path, query), want, "{method} {path}");
        }
    }

    fn text(registry: &Registry) -> String {
        use prometheus::Encoder;
        let mut buf = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut buf)
            .unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn counts_requests_by_verb_and_code_and_the_rate_limiter_wait() {
        let registry = Registry::new();
        let metrics = ClientMetrics::register(&registry).unwrap();
        let backend = tower::service_fn(|req: http::Request<()>| async move {
            let code = if req.uri().path().ends_with("/missing") {
                404
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(code).body(()).unwrap(),
            )
        });
        // 1 request per second, no burst beyond one: the second and third
        // requests wait one second each.
        let limited = crate::ratelimit::RateLimitLayer::new(1.0, 1)
            .unwrap()
            .layer(backend);
        let mut svc = metrics.layer().layer(limited);
        for path in [
            "/api/v1/persistentvolumes/pv-1",
            "/api/v1/persistentvolumes/missing",
            "/api/v1/persistentvolumes",
        ] {
            let req = http::Request::get(path).body(()).unwrap();
            svc.ready().await.unwrap().call(req).await.unwrap();
        }
        let text = text(&registry);
        for needle in [
            "protection_manager_kube_client_requests_total{code=\"200\",verb=\"get\"} 1",
            "protection_manager_kube_client_requests_total{code=\"404\",verb=\"get\"} 1",
            "protection_manager_kube_client_requests_total{code=\"200\",verb=\"list\"} 1",
            "protection_manager_kube_client_request_duration_seconds_count{code=\"200\",verb=\"list\"} 1",
            "protection_manager_kube_client_rate_limiter_wait_seconds_count 3",
            // Two waits of about a second each (paused clock: exactly).
            "protection_manager_kube_client_rate_limiter_wait_seconds_bucket{le=\"0.001\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        let sum = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("protection_manager_kube_client_rate_limiter_wait_seconds_sum ")
            })
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap();
        assert!((1.9..=2.1).contains(&sum), "waited {sum}s in total");
    }
}

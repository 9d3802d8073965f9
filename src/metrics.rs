//! The one Prometheus registry of the process and the metrics every controller shares.
//!
//! Reconcile metrics are recorded by the shared controller runtime, backend metrics by
//! [`Metrics::backend_call`], so no controller records them by hand.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::backends::rate::RateLimit;
use prometheus::core::Collector;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};

/// Classifies the outcome of a backend call for `keeper_backend_requests_total{outcome}`.
pub trait BackendOutcome {
    /// A short, low-cardinality label such as `not_found`, `conflict`, `transient` or `permanent`.
    fn outcome(&self) -> &'static str;
}

pub struct Metrics {
    registry: Registry,
    reconcile_total: IntCounterVec,
    reconcile_duration: HistogramVec,
    reconcile_errors: IntCounterVec,
    backend_requests: IntCounterVec,
    backend_duration: HistogramVec,
    rate_limited: HistogramVec,
    retry_delay: HistogramVec,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let reconcile_total = IntCounterVec::new(
            Opts::new(
                "keeper_reconcile_total",
                "Reconciliations by controller and result.",
            ),
            &["controller", "result"],
        )
        .expect("valid metric");
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                "keeper_reconcile_duration_seconds",
                "Time spent in one reconciliation.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            &["controller"],
        )
        .expect("valid metric");
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "keeper_reconcile_errors_total",
                "Failed reconciliations by controller and error reason.",
            ),
            &["controller", "reason"],
        )
        .expect("valid metric");
        let backend_requests = IntCounterVec::new(
            Opts::new(
                "keeper_backend_requests_total",
                "Calls to storage and database backends by outcome.",
            ),
            &["backend", "operation", "outcome"],
        )
        .expect("valid metric");
        let backend_duration = HistogramVec::new(
            HistogramOpts::new(
                "keeper_backend_request_duration_seconds",
                "Duration of calls to storage and database backends.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            &["backend", "operation"],
        )
        .expect("valid metric");
        let rate_limited = HistogramVec::new(
            HistogramOpts::new(
                "keeper_backend_rate_limited_seconds",
                "How long backend calls waited for their provider's request rate (requestsPerSecond) before they were sent; only backends with a rate.",
            )
            .buckets(vec![
                0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ]),
            &["backend"],
        )
        .expect("valid metric");
        let retry_delay = HistogramVec::new(
            HistogramOpts::new(
                "keeper_reconcile_retry_delay_seconds",
                "How long a failed reconciliation waits before it is retried, as the object's backoff chose.",
            )
            .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0]),
            &["controller"],
        )
        .expect("valid metric");
        let metrics = Metrics {
            registry,
            reconcile_total,
            reconcile_duration,
            reconcile_errors,
            backend_requests,
            backend_duration,
            rate_limited,
            retry_delay,
        };
        metrics.register(metrics.reconcile_total.clone());
        metrics.register(metrics.reconcile_duration.clone());
        metrics.register(metrics.reconcile_errors.clone());
        metrics.register(metrics.backend_requests.clone());
        metrics.register(metrics.backend_duration.clone());
        metrics.register(metrics.rate_limited.clone());
        metrics.register(metrics.retry_delay.clone());
        metrics
    }

    /// Registers a controller's own collector in the shared registry.
    ///
    /// Panics on a duplicate name: that is a programming error caught by every test that starts a controller.
    pub fn register<C: Collector + 'static>(&self, collector: C) {
        self.registry
            .register(Box::new(collector))
            .expect("metric registered twice");
    }

    /// Records one finished reconciliation.
    pub fn reconciled(&self, controller: &str, started: Instant, error_reason: Option<&str>) {
        self.reconcile_duration
            .with_label_values(&[controller])
            .observe(started.elapsed().as_secs_f64());
        let result = if error_reason.is_some() {
            "error"
        } else {
            "success"
        };
        self.reconcile_total
            .with_label_values(&[controller, result])
            .inc();
        if let Some(reason) = error_reason {
            self.reconcile_errors
                .with_label_values(&[controller, reason])
                .inc();
        }
    }

    /// Records that a failed reconciliation of `controller` is retried after `delay`.
    pub fn retry_scheduled(&self, controller: &str, delay: Duration) {
        self.retry_delay
            .with_label_values(&[controller])
            .observe(delay.as_secs_f64());
    }

    /// Runs one backend call once `limit` lets it go, recording its duration (without that wait,
    /// which would hide the backend's latency; it has its own histogram) and outcome.
    ///
    /// The call goes on the heap at once: an SDK call's future takes kilobytes, and carried by
    /// value through every async layer above it (each holds it again in a debug build) it
    /// overflowed the 2 MiB stack of a runtime worker.
    pub fn backend_call<'a, T, E, F>(
        &'a self,
        limit: &'a RateLimit,
        backend: &'a str,
        operation: &'a str,
        call: F,
    ) -> impl Future<Output = Result<T, E>> + 'a
    where
        T: 'a,
        E: BackendOutcome + 'a,
        F: Future<Output = Result<T, E>> + 'a,
    {
        self.measured(limit, backend, operation, Box::pin(call))
    }

    async fn measured<T, E, F>(
        &self,
        limit: &RateLimit,
        backend: &str,
        operation: &str,
        call: Pin<Box<F>>,
    ) -> Result<T, E>
    where
        E: BackendOutcome,
        F: Future<Output = Result<T, E>>,
    {
        if let Some(waited) = limit.admit().await {
            self.rate_limited
                .with_label_values(&[backend])
                .observe(waited.as_secs_f64());
        }
        let started = Instant::now();
        let result = call.await;
        self.backend_duration
            .with_label_values(&[backend, operation])
            .observe(started.elapsed().as_secs_f64());
        let outcome = match &result {
            Ok(_) => "success",
            Err(e) => e.outcome(),
        };
        self.backend_requests
            .with_label_values(&[backend, operation, outcome])
            .inc();
        result
    }

    /// The text exposition format served on `/metrics`.
    pub fn encode(&self) -> String {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# failed to encode metrics: {e}\n"))
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failure;
    impl BackendOutcome for Failure {
        fn outcome(&self) -> &'static str {
            "transient"
        }
    }

    /// A backend call's future is boxed as the call begins: whatever its size, what the awaiting
    /// reconcile carries stays small (an SDK call carried by value through the layers above it
    /// overflowed a runtime worker's stack in a debug build).
    #[tokio::test]
    async fn a_backend_calls_future_is_small_whatever_the_call() {
        let metrics = Metrics::new();
        let limit = RateLimit::default();
        let call = async {
            let big = [7u8; 64 * 1024];
            tokio::task::yield_now().await;
            Ok::<u8, Failure>(std::hint::black_box(&big)[0])
        };
        assert!(std::mem::size_of_val(&call) >= 64 * 1024);
        let measured = metrics.backend_call(&limit, "b", "op", call);
        assert!(
            std::mem::size_of_val(&measured) < 1024,
            "{} bytes",
            std::mem::size_of_val(&measured)
        );
        assert_eq!(measured.await.ok(), Some(7));
    }

    #[tokio::test]
    async fn backend_calls_are_counted_by_outcome() {
        let metrics = Metrics::new();
        let unlimited = RateLimit::default();
        let ok: Result<(), Failure> = metrics
            .backend_call(&unlimited, "rds", "describe", async { Ok(()) })
            .await;
        assert!(ok.is_ok());
        let err: Result<(), Failure> = metrics
            .backend_call(&unlimited, "rds", "describe", async { Err(Failure) })
            .await;
        assert!(err.is_err());
        let text = metrics.encode();
        assert!(text.contains(
            r#"keeper_backend_requests_total{backend="rds",operation="describe",outcome="success"} 1"#
        ), "{text}");
        assert!(text.contains(
            r#"keeper_backend_requests_total{backend="rds",operation="describe",outcome="transient"} 1"#
        ), "{text}");
        assert!(text.contains(
            r#"keeper_backend_request_duration_seconds_count{backend="rds",operation="describe"} 2"#
        ));
        assert!(
            !text.contains("keeper_backend_rate_limited_seconds_count"),
            "no rate, no wait recorded: {text}"
        );
    }

    #[tokio::test]
    async fn the_wait_for_the_rate_is_recorded_apart_from_the_call() {
        use crate::config::RequestRate;
        let metrics = Metrics::new();
        // 10/s, one at a time: the second call waits about 100 ms before it starts.
        let limit = RateLimit::new(Some(RequestRate {
            per_second: 10.0,
            burst: std::num::NonZeroU32::MIN,
        }));
        for _ in 0..2 {
            let ok: Result<(), Failure> = metrics
                .backend_call(&limit, "s3", "list_buckets", async { Ok(()) })
                .await;
            assert!(ok.is_ok());
        }
        let text = metrics.encode();
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} in {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(
            value(r#"keeper_backend_rate_limited_seconds_count{backend="s3"}"#),
            2.0
        );
        let waited = value(r#"keeper_backend_rate_limited_seconds_sum{backend="s3"}"#);
        assert!(waited >= 0.09, "{text}");
        let called = value(
            r#"keeper_backend_request_duration_seconds_sum{backend="s3",operation="list_buckets"}"#,
        );
        assert!(
            called < 0.05,
            "the wait is not the backend's latency: {text}"
        );
    }

    #[test]
    fn reconciles_are_counted_with_error_reasons() {
        let metrics = Metrics::new();
        metrics.reconciled("s3bucket", Instant::now(), None);
        metrics.reconciled("s3bucket", Instant::now(), Some("backend"));
        let text = metrics.encode();
        assert!(
            text.contains(r#"keeper_reconcile_total{controller="s3bucket",result="success"} 1"#)
        );
        assert!(text.contains(r#"keeper_reconcile_total{controller="s3bucket",result="error"} 1"#));
        assert!(text.contains(
            r#"keeper_reconcile_errors_total{controller="s3bucket",reason="backend"} 1"#
        ));
        assert!(
            text.contains(r#"keeper_reconcile_duration_seconds_count{controller="s3bucket"} 2"#)
        );
    }

    #[test]
    fn retries_are_observed_by_the_delay_the_backoff_chose() {
        let metrics = Metrics::new();
        for seconds in [1, 2, 4] {
            metrics.retry_scheduled("s3bucket", Duration::from_secs(seconds));
        }
        let text = metrics.encode();
        for (le, count) in [("1", 1), ("2", 2), ("4", 3), ("300", 3)] {
            assert!(
                text.contains(&format!(
                    "keeper_reconcile_retry_delay_seconds_bucket{{controller=\"s3bucket\",le=\"{le}\"}} {count}"
                )),
                "{text}"
            );
        }
        assert!(
            text.contains(r#"keeper_reconcile_retry_delay_seconds_sum{controller="s3bucket"} 7"#)
        );
    }
}

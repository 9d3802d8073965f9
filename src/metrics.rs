//! The one Prometheus registry of the process and the metrics every controller shares.
//!
//! Reconcile metrics are recorded by the shared controller runtime, backend metrics by
//! `backends::call::measured`, so no controller records them by hand.

use std::time::{Duration, Instant};

use prometheus::core::Collector;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder};

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

/// `keeper_build_info{version} 1`: which keeper a scrape came from, joinable with any series.
fn build_info() -> prometheus::IntGaugeVec {
    let info = prometheus::IntGaugeVec::new(
        Opts::new(
            "keeper_build_info",
            "Always 1; its labels say which keeper build is running.",
        ),
        &["version"],
    )
    .expect("valid metric");
    info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
    info
}

/// Bounds of the duration histograms, in seconds: from 5ms to half a minute, the span of one
/// reconciliation and of one backend call.
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A counter vector with `labels`, registered in `registry`.
fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let counter = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    register(registry, counter.clone());
    counter
}

/// A histogram vector with `labels` and `buckets`, registered in `registry`.
fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let histogram = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("valid metric");
    register(registry, histogram.clone());
    histogram
}

/// Registers `collector` in `registry`; see [`Metrics::register`].
fn register<C: Collector + 'static>(registry: &Registry, collector: C) {
    registry
        .register(Box::new(collector))
        .expect("metric registered twice");
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let metrics = Metrics {
            reconcile_total: counter(
                &registry,
                "keeper_reconcile_total",
                "Reconciliations by controller and result.",
                &["controller", "result"],
            ),
            reconcile_duration: histogram(
                &registry,
                "keeper_reconcile_duration_seconds",
                "Time spent in one reconciliation.",
                &DURATION_BUCKETS,
                &["controller"],
            ),
            reconcile_errors: counter(
                &registry,
                "keeper_reconcile_errors_total",
                "Failed reconciliations by controller and error reason.",
                &["controller", "reason"],
            ),
            backend_requests: counter(
                &registry,
                "keeper_backend_requests_total",
                "Calls to storage and database backends by outcome.",
                &["backend", "operation", "outcome"],
            ),
            backend_duration: histogram(
                &registry,
                "keeper_backend_request_duration_seconds",
                "Duration of calls to storage and database backends.",
                &DURATION_BUCKETS,
                &["backend", "operation"],
            ),
            rate_limited: histogram(
                &registry,
                "keeper_backend_rate_limited_seconds",
                "How long backend calls waited for their provider's request rate (requestsPerSecond) before they were sent; only backends with a rate.",
                &[
                    0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                ],
                &["backend"],
            ),
            retry_delay: histogram(
                &registry,
                "keeper_reconcile_retry_delay_seconds",
                "How long a failed reconciliation waits before it is retried, as the object's backoff chose.",
                &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0],
                &["controller"],
            ),
            registry,
        };
        metrics.register(build_info());
        // The standard process_* metrics (CPU seconds, resident memory, open files, start time):
        // what a platform team's dashboards and capacity alerts read for every process.
        metrics.register(prometheus::process_collector::ProcessCollector::for_self());
        metrics
    }

    /// Registers a controller's own collector in the shared registry.
    ///
    /// Panics on a duplicate name: that is a programming error caught by every test that starts a controller.
    pub fn register<C: Collector + 'static>(&self, collector: C) {
        register(&self.registry, collector);
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

    /// Records how long a backend call waited for its provider's request rate.
    pub fn rate_waited(&self, backend: &str, waited: Duration) {
        self.rate_limited
            .with_label_values(&[backend])
            .observe(waited.as_secs_f64());
    }

    /// Records one backend call: how long it took (without its wait for the rate) and its
    /// outcome (`success`, or the error's class).
    pub fn backend_called(&self, backend: &str, operation: &str, outcome: &str, took: Duration) {
        self.backend_duration
            .with_label_values(&[backend, operation])
            .observe(took.as_secs_f64());
        self.backend_requests
            .with_label_values(&[backend, operation, outcome])
            .inc();
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

    #[test]
    fn the_build_and_the_process_are_exported() {
        let text = Metrics::new().encode();
        assert!(
            text.contains(&format!(
                "keeper_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(
                text.contains(&format!("\n{name} ")),
                "{name} missing:\n{text}"
            );
        }
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

//! How every backend call is made: once its provider's request rate lets it go, timed, and
//! counted by outcome in the shared registry, so no backend client or controller records its
//! calls by hand.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use crate::backends::rate::RateLimit;
use crate::error::BackendError;
use crate::metrics::Metrics;

/// Classifies the outcome of a backend call for `keeper_backend_requests_total{outcome}`.
pub trait BackendOutcome {
    /// A short, low-cardinality label such as `not_found`, `conflict`, `transient` or `permanent`.
    fn outcome(&self) -> &'static str;
}

impl BackendOutcome for BackendError {
    fn outcome(&self) -> &'static str {
        self.class.label()
    }
}

/// Runs one backend call once `limit` lets it go, recording its duration (without that wait,
/// which would hide the backend's latency; it has its own histogram) and outcome.
///
/// The call goes on the heap at once: an SDK call's future takes kilobytes, and carried by
/// value through every async layer above it (each holds it again in a debug build) it
/// overflowed the 2 MiB stack of a runtime worker.
pub fn measured<'a, T, E, F>(
    metrics: &'a Metrics,
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
    run(metrics, limit, backend, operation, Box::pin(call))
}

async fn run<T, E, F>(
    metrics: &Metrics,
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
        metrics.rate_waited(backend, waited);
    }
    let started = Instant::now();
    let result = call.await;
    let outcome = match &result {
        Ok(_) => "success",
        Err(e) => e.outcome(),
    };
    metrics.backend_called(backend, operation, outcome, started.elapsed());
    result
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
        let measured = measured(&metrics, &limit, "b", "op", call);
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
        let ok: Result<(), Failure> =
            measured(&metrics, &unlimited, "rds", "describe", async { Ok(()) }).await;
        assert!(ok.is_ok());
        let err: Result<(), Failure> = measured(&metrics, &unlimited, "rds", "describe", async {
            Err(Failure)
        })
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
            let ok: Result<(), Failure> =
                measured(&metrics, &limit, "s3", "list_buckets", async { Ok(()) }).await;
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
}

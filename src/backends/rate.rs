//! The request rate keeper keeps to towards a backend (`requestsPerSecond` of a provider and of
//! `rds`): one token bucket (governor's GCRA) per provider, shared by every client of that
//! provider (its S3 stores, IAM client and grid client), taken by
//! [`measured`](crate::backends::call::measured) before each call and outside the call's
//! measured duration.
//!
//! One call takes one token. Resends inside a call are not counted: the AWS SDKs' retries (3
//! attempts at most, after a backoff, and bounded by the SDK's own retry quota) and the grid
//! client's resends of a 429/503 and its sign-ins (once per token lifetime). All of them follow
//! a refusal or a pause, so they add little to the rate, and pacing them inside the call would
//! count the wait as backend latency and against the per-attempt timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::config::RequestRate;

/// A backend's request rate limit. Cheap to clone; clones share one bucket. The default (a
/// provider without `requestsPerSecond`) lets every request go at once.
#[derive(Clone, Default)]
pub struct RateLimit(Option<Arc<DefaultDirectRateLimiter>>);

impl RateLimit {
    /// The limit of `rate`; `None`: no limit.
    pub fn new(rate: Option<RequestRate>) -> Self {
        RateLimit(rate.map(|rate| {
            let period = Duration::from_secs_f64(1.0 / rate.per_second);
            let quota = Quota::with_period(period)
                .expect("requestsPerSecond is at most 100,000: the period is not zero")
                .allow_burst(rate.burst);
            Arc::new(RateLimiter::direct(quota))
        }))
    }

    /// Waits until one more request may go. How long that took; `None` without a limit.
    pub async fn admit(&self) -> Option<Duration> {
        let limiter = self.0.as_ref()?;
        let started = Instant::now();
        limiter.until_ready().await;
        Some(started.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    fn limit(per_second: f64, burst: u32) -> RateLimit {
        RateLimit::new(Some(RequestRate {
            per_second,
            burst: NonZeroU32::new(burst).unwrap(),
        }))
    }

    /// How long `calls` admissions through clones of `limit`, all asked at once, take.
    async fn time_of(limit: &RateLimit, calls: usize) -> Duration {
        let started = Instant::now();
        futures::future::join_all((0..calls).map(|_| {
            let limit = limit.clone();
            async move { limit.admit().await }
        }))
        .await;
        started.elapsed()
    }

    // governor runs on its own (real) clock and timer, which paused tokio time does not move:
    // these tests use small real rates.

    #[tokio::test]
    async fn calls_beyond_the_burst_go_at_the_rate() {
        // 2 at once, then 10 more at 40/s: at least 250 ms.
        let elapsed = time_of(&limit(40.0, 2), 12).await;
        assert!(elapsed >= Duration::from_millis(240), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    }

    #[tokio::test]
    async fn a_fractional_rate_is_kept() {
        // 2.5/s: the second call 400 ms after the first.
        let elapsed = time_of(&limit(2.5, 1), 2).await;
        assert!(elapsed >= Duration::from_millis(390), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    }

    #[tokio::test]
    async fn the_burst_goes_at_once_and_no_limit_waits_for_nothing() {
        let elapsed = time_of(&limit(1.0, 20), 20).await;
        assert!(elapsed < Duration::from_millis(500), "{elapsed:?}");
        assert_eq!(RateLimit::default().admit().await, None);
        assert!(limit(1.0, 1).admit().await.is_some());
    }
}

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;

/// Per-object exponential backoff: each consecutive failure of one object doubles its retry
/// delay up to a cap; a success resets it. kube's `error_policy` is not told about successes,
/// so the shared reconcile wrapper resets it.
///
/// Each delay is spread by a quarter at random (upward while below the cap, downward at it), so
/// that objects that failed together (a backend outage) do not all retry together; a delay is
/// never below the base nor above the cap. An object that has not failed for twice the cap has
/// either succeeded since or is gone (deleted, its finalizer released by hand): its count is
/// dropped, so that the map holds only objects that fail now.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Per object: consecutive failures, and when the last one was.
    failures: HashMap<String, (u32, Instant)>,
    last_pruned: Instant,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            state: Mutex::new(State {
                failures: HashMap::new(),
                last_pruned: Instant::now(),
            }),
        }
    }

    /// Records a failure of `key` and returns how long to wait before the next attempt.
    pub fn next_delay(&self, key: &str) -> Duration {
        self.next_delay_at(key, Instant::now(), rand::rng().random())
    }

    /// [`Backoff::next_delay`] at `now`, spread by `spread` (0..1).
    fn next_delay_at(&self, key: &str, now: Instant, spread: f64) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now.saturating_duration_since(state.last_pruned) >= self.max {
            let forgotten = self.max.saturating_mul(2);
            state
                .failures
                .retain(|_, (_, last)| now.saturating_duration_since(*last) < forgotten);
            state.last_pruned = now;
        }
        let (count, last) = state.failures.entry(key.to_string()).or_insert((0, now));
        *count = count.saturating_add(1);
        *last = now;
        let factor = 2u32.saturating_pow(count.saturating_sub(1).min(31));
        let delay = self.base.saturating_mul(factor).min(self.max);
        let quarter = delay.mul_f64(spread.clamp(0.0, 1.0) / 4.0);
        if delay + quarter <= self.max {
            delay + quarter
        } else {
            (delay - quarter).max(self.base)
        }
    }

    /// How many times in a row `key` has failed (0 after a success).
    pub fn failures(&self, key: &str) -> u32 {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failures
            .get(key)
            .map_or(0, |(count, _)| *count)
    }

    /// Forgets the failures of `key` after a success.
    pub fn reset(&self, key: &str) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failures
            .remove(key);
    }

    /// How many objects have failures on record.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.state.lock().expect("lock").failures.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(delay: Duration) -> f64 {
        delay.as_secs_f64()
    }

    #[test]
    fn delays_double_per_object_up_to_the_cap_and_reset_on_success() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let now = Instant::now();
        let delays: Vec<f64> = (0..6)
            .map(|_| secs(backoff.next_delay_at("ns/a", now, 0.0)))
            .collect();
        assert_eq!(delays, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]);
        // Another object has its own count.
        assert_eq!(secs(backoff.next_delay_at("ns/b", now, 0.0)), 1.0);
        assert_eq!(backoff.failures("ns/a"), 6);
        backoff.reset("ns/a");
        assert_eq!(backoff.failures("ns/a"), 0);
        assert_eq!(secs(backoff.next_delay_at("ns/a", now, 0.0)), 1.0);
    }

    #[test]
    fn delays_are_spread_by_a_quarter_within_the_base_and_the_cap() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let now = Instant::now();
        // Below the cap: up to a quarter more.
        assert_eq!(secs(backoff.next_delay_at("a", now, 1.0)), 1.25);
        assert_eq!(secs(backoff.next_delay_at("a", now, 0.5)), 2.25);
        assert_eq!(secs(backoff.next_delay_at("a", now, 1.0)), 5.0);
        assert_eq!(secs(backoff.next_delay_at("a", now, 1.0)), 10.0);
        // At the cap, where a quarter more would pass it: up to a quarter less.
        assert_eq!(secs(backoff.next_delay_at("a", now, 1.0)), 7.5);
        assert_eq!(secs(backoff.next_delay_at("a", now, 0.0)), 10.0);
    }

    #[test]
    fn objects_that_fail_together_retry_apart() {
        let backoff = Backoff::default();
        let delays: std::collections::BTreeSet<Duration> = (0..50)
            .map(|i| {
                let key = format!("ns/o{i}");
                backoff.next_delay(&key);
                backoff.next_delay(&key)
            })
            .collect();
        assert!(delays.len() > 40, "{} distinct delays of 50", delays.len());
        assert!(
            delays
                .iter()
                .all(|d| (Duration::from_secs(2)..=Duration::from_millis(2500)).contains(d)),
            "{delays:?}"
        );
    }

    #[test]
    fn objects_that_stopped_failing_long_ago_are_forgotten() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let start = Instant::now();
        backoff.next_delay_at("gone", start, 0.0);
        backoff.next_delay_at("failing", start, 0.0);
        // Still failing every cap: kept, and its count goes on.
        let later = start + Duration::from_secs(15);
        backoff.next_delay_at("failing", later, 0.0);
        let much_later = later + Duration::from_secs(11);
        assert_eq!(secs(backoff.next_delay_at("failing", much_later, 0.0)), 4.0);
        assert_eq!(
            backoff.tracked(),
            1,
            "the object gone for 26 s is forgotten"
        );
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let backoff = Backoff::default();
        let now = Instant::now();
        for _ in 0..100 {
            backoff.next_delay_at("ns/a", now, 0.0);
        }
        assert_eq!(
            backoff.next_delay_at("ns/a", now, 0.0),
            Duration::from_secs(300)
        );
    }
}

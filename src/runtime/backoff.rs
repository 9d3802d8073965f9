use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Per-object exponential backoff: each consecutive failure of one object doubles its retry
/// delay up to a cap; a success resets it. kube's `error_policy` is not told about successes,
/// so the shared reconcile wrapper resets it.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
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
            failures: Mutex::default(),
        }
    }

    /// Records a failure of `key` and returns how long to wait before the next attempt.
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(key.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        let factor = 2u32.saturating_pow(count.saturating_sub(1).min(31));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// Forgets the failures of `key` after a success.
    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_per_object_up_to_the_cap_and_reset_on_success() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let delays: Vec<u64> = (0..6)
            .map(|_| backoff.next_delay("ns/a").as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        // Another object has its own count.
        assert_eq!(backoff.next_delay("ns/b").as_secs(), 1);
        backoff.reset("ns/a");
        assert_eq!(backoff.next_delay("ns/a").as_secs(), 1);
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let backoff = Backoff::default();
        for _ in 0..100 {
            backoff.next_delay("ns/a");
        }
        assert_eq!(backoff.next_delay("ns/a"), Duration::from_secs(300));
    }
}

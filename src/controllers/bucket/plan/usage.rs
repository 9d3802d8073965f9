//! What an idle Ready bucket (no drain asked for, none of ours running) looks at on the backend,
//! and when it looks again. Outside drains a bucket costs the backend nothing but these looks:
//!
//! - its **usage** (objects, bytes), only where the provider's `usageRefresh` asks for it, every
//!   `interval` (a listing of the bucket on an S3-compatible store; on StorageGRID one usage call
//!   per tenant and interval, shared by its buckets);
//! - otherwise whether it still **exists** (and, on StorageGRID, whether the grid deletes its
//!   objects without keeper having asked), every `bucketCheckInterval` (1h by default): one
//!   call per bucket on an S3-compatible store, one container listing per tenant on StorageGRID.
//!
//! A usage observation says the bucket exists too, so it stands in for the existence look. Any
//! other reconcile in between (a tenant's change, a watch relist) looks at nothing.

use std::time::Duration;

/// The provider's settings for idle buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Looks {
    /// `usageRefresh.interval`; `None`: usage is not observed outside drains.
    pub usage_refresh: Option<Duration>,
    /// `bucketCheckInterval`.
    pub check: Duration,
}

/// How long ago this process last looked at the bucket (`None`: not since it started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Since {
    /// Its usage was last observed (by a refresh, a drain or its creation).
    pub usage: Option<Duration>,
    /// It was last seen on the backend, by either look.
    pub seen: Option<Duration>,
}

/// What an idle bucket's reconcile looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Nothing: the last look is recent enough.
    Nothing,
    /// Whether the bucket exists (and, where the backend drains by itself, drains).
    Existence,
    /// Its usage, which says it exists too.
    Usage,
}

/// The decision for an idle bucket: what to look at now, and when to reconcile it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleCheck {
    pub look: Look,
    /// Until the next look is due, counted from this reconcile.
    pub next: Duration,
    /// Whether status shows usage figures (`usageRefresh` is on): off, status shows none rather
    /// than figures that nothing keeps current.
    pub shows_usage: bool,
}

/// Decides what an idle bucket looks at and when it is reconciled again.
pub fn idle_check(looks: Looks, since: Since) -> IdleCheck {
    let due = |interval: Duration, since: Option<Duration>| since.is_none_or(|s| s >= interval);
    let look = match looks.usage_refresh {
        Some(interval) if due(interval, since.usage) => Look::Usage,
        _ if due(looks.check, since.seen) => Look::Existence,
        _ => Look::Nothing,
    };
    // Counted from now, after this reconcile's look.
    let usage_age = if look == Look::Usage {
        Some(Duration::ZERO)
    } else {
        since.usage
    };
    let seen_age = if look == Look::Nothing {
        since.seen.unwrap_or_default()
    } else {
        Duration::ZERO
    };
    let until_check = looks.check.saturating_sub(seen_age);
    let until_usage = looks
        .usage_refresh
        .map(|interval| interval.saturating_sub(usage_age.unwrap_or_default()));
    let next = until_usage.map_or(until_check, |u| u.min(until_check));
    IdleCheck {
        look,
        // Never a hot loop: a look just missed is at most a second late.
        next: next.max(Duration::from_secs(1)),
        shows_usage: looks.usage_refresh.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const MINUTE: Duration = Duration::from_secs(60);

    fn off() -> Looks {
        Looks {
            usage_refresh: None,
            check: HOUR,
        }
    }

    fn every(interval: Duration) -> Looks {
        Looks {
            usage_refresh: Some(interval),
            check: HOUR,
        }
    }

    fn ago(usage: Option<Duration>, seen: Option<Duration>) -> Since {
        Since { usage, seen }
    }

    #[test]
    fn with_usage_off_an_idle_bucket_is_looked_at_once_per_check_interval_and_shows_no_usage() {
        // First reconcile of this process: one existence look, the next in an hour.
        let first = idle_check(off(), Since::default());
        assert_eq!(
            first,
            IdleCheck {
                look: Look::Existence,
                next: HOUR,
                shows_usage: false
            }
        );
        // Woken 20 minutes later (a tenant's change): no call, and back at the hour.
        let between = idle_check(off(), ago(None, Some(20 * MINUTE)));
        assert_eq!(between.look, Look::Nothing);
        assert_eq!(between.next, 40 * MINUTE);
        // At the hour: the next look.
        assert_eq!(
            idle_check(off(), ago(None, Some(HOUR))).look,
            Look::Existence
        );
        // A drain's recent count does not switch usage on.
        assert_eq!(
            idle_check(off(), ago(Some(MINUTE), Some(HOUR))).look,
            Look::Existence
        );
    }

    #[test]
    fn with_usage_on_usage_is_observed_per_interval_and_stands_in_for_the_existence_look() {
        let looks = every(10 * MINUTE);
        let first = idle_check(looks, Since::default());
        assert_eq!(
            (first.look, first.next, first.shows_usage),
            (Look::Usage, 10 * MINUTE, true)
        );
        let between = idle_check(looks, ago(Some(4 * MINUTE), Some(4 * MINUTE)));
        assert_eq!((between.look, between.next), (Look::Nothing, 6 * MINUTE));
        // An interval longer than the check: usage per its interval, existence hourly between.
        let daily = every(24 * HOUR);
        let hour_later = idle_check(daily, ago(Some(HOUR), Some(HOUR)));
        assert_eq!((hour_later.look, hour_later.next), (Look::Existence, HOUR));
        let day_later = idle_check(daily, ago(Some(24 * HOUR), Some(HOUR)));
        assert_eq!(day_later.look, Look::Usage);
    }

    #[test]
    fn a_look_just_missed_requeues_after_a_second_not_at_once() {
        let check = idle_check(
            Looks {
                usage_refresh: None,
                check: HOUR,
            },
            ago(None, Some(HOUR - Duration::from_millis(10))),
        );
        assert_eq!(
            (check.look, check.next),
            (Look::Nothing, Duration::from_secs(1))
        );
    }
}

//! The one policy that turns an error's class into what the shared reconcile flow does: every
//! controller's errors go through it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::error::ErrorClass;
use crate::runtime::conditions;

/// What the shared reconcile flow does with an error of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Retry with the object's exponential backoff; a failure that repeats shows on the object
    /// (`Synced=False`, one Warning event per reason).
    Backoff,
    /// Report it as a permanent failure ([`Outcome::fail`](super::Outcome::fail): `Ready=False`
    /// with the error's reason and message, phase `Failed` unless deleting, one Warning event per
    /// change, the next look after [`PERMANENT_RETRY`]).
    Fail,
}

/// How often an object in a permanent error looks again on its own.
pub const PERMANENT_RETRY: std::time::Duration = std::time::Duration::from_secs(300);

/// The one policy: every controller's errors go through it.
pub fn policy(class: ErrorClass) -> Policy {
    match class {
        // A conflict (something moved between our look and our call) or a vanished dependency
        // is usually settled by the next look; one that is not (an IAM limit reached, a policy
        // attached by hand) must not loop at a fixed pace nor stay invisible: it backs off and
        // shows like any other failure that repeats.
        ErrorClass::Transient | ErrorClass::Conflict | ErrorClass::NotFound => Policy::Backoff,
        ErrorClass::Permanent => Policy::Fail,
    }
}

/// Failed attempts in a row after which a failure keeper retries shows on the object: the first
/// ones are often a blip (a conflict, a restarting backend) that the next attempt settles, and
/// reporting them would cost two status writes each.
pub const REPORT_AFTER: u32 = 3;

/// Whether a failure keeper retries shows on the object now, at this process's `attempt`th
/// attempt in a row, given the object's `conditions` as read: from the [`REPORT_AFTER`]th
/// attempt, or at once when the status says the object waits for something (`Ready=False` from
/// a reconcile that succeeded, `Synced=True`). Such a reason, a tenant not Ready say, is what the
/// last successful reconcile found; a reconcile that fails now may have got past it, and the
/// attempts are counted in memory only: a keeper restarted before its third attempt (a crash
/// loop, an eviction) would leave the stale reason up for good (issue 26, item 9: buckets shown
/// `TenantNotReady` for minutes behind Ready tenants). An object that is Ready, or already
/// shows a failure, waits for the third attempt: a blip costs it nothing.
pub fn report_now(attempt: u32, conditions: &[Condition]) -> bool {
    attempt >= REPORT_AFTER
        || (conditions::is_false(conditions, conditions::READY)
            && conditions::is_true(conditions, conditions::SYNCED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::S3TenantStatus;
    use crate::runtime::{KeeperStatus, Next, Outcome};

    #[test]
    fn the_policy_fails_permanent_errors_and_backs_off_the_rest() {
        assert_eq!(policy(ErrorClass::Permanent), Policy::Fail);
        for class in [
            ErrorClass::Transient,
            ErrorClass::Conflict,
            ErrorClass::NotFound,
        ] {
            assert_eq!(policy(class), Policy::Backoff);
        }
    }

    /// A status as a successful reconcile left it: `Ready` as given, `Synced=True`.
    fn waited(ready: bool, reason: &'static str) -> S3TenantStatus {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.ready(ready, reason, "as found", Some(3), false);
        out.succeeded(Some(3));
        out.status
    }

    #[test]
    fn a_failure_shows_at_once_only_over_a_reported_wait() {
        let waiting = waited(false, "TenantNotReady");
        let ready = waited(true, "Provisioned");
        let mut failing = Outcome::new(waiting.clone(), Next::AwaitChange);
        failing.retrying("BackendError", "it failed", Some(3));
        let failing = failing.status;
        // The wait the last successful reconcile reported may be over: the first failure shows.
        assert!(report_now(1, waiting.conditions()));
        // A Ready object, one showing a failure already and a new one wait for the third attempt.
        for conditions in [ready.conditions(), failing.conditions(), &[]] {
            assert!(!report_now(1, conditions), "{conditions:?}");
            assert!(!report_now(REPORT_AFTER - 1, conditions), "{conditions:?}");
            assert!(report_now(REPORT_AFTER, conditions), "{conditions:?}");
        }
    }
}

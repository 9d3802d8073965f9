//! The one policy that turns an error's class into what the shared reconcile flow does: every
//! controller's errors go through it.

use crate::error::ErrorClass;

/// What the shared reconcile flow does with an error of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Retry with the object's exponential backoff; a failure that repeats shows on the object
    /// (`Synced=False`, one Warning event per reason).
    Backoff,
    /// Set `Ready=False` with the error's reason and message (phase `Failed` unless deleting),
    /// one Warning event per change, and retry after this long (a spec change retries at once).
    Fail(std::time::Duration),
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
        ErrorClass::Permanent => Policy::Fail(PERMANENT_RETRY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_fails_permanent_errors_and_backs_off_the_rest() {
        assert_eq!(policy(ErrorClass::Permanent), Policy::Fail(PERMANENT_RETRY));
        for class in [
            ErrorClass::Transient,
            ErrorClass::Conflict,
            ErrorClass::NotFound,
        ] {
            assert_eq!(policy(class), Policy::Backoff);
        }
    }
}

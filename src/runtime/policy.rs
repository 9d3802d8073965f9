//! The one policy that turns an error's class into what the shared reconcile flow does: every
//! controller's errors go through it.

use crate::error::ErrorClass;

/// What the shared reconcile flow does with an error of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Retry with the object's exponential backoff.
    Backoff,
    /// Look again after this long; nothing is reported as failed.
    Requeue(std::time::Duration),
    /// Set `Ready=False` with the error's reason and message (phase `Failed` unless deleting),
    /// one Warning event per change, and retry after this long (a spec change retries at once).
    Fail(std::time::Duration),
}

/// How soon a conflict or a vanished dependency is looked at again.
pub const CONFLICT_RETRY: std::time::Duration = std::time::Duration::from_secs(5);
/// How often an object in a permanent error looks again on its own.
pub const PERMANENT_RETRY: std::time::Duration = std::time::Duration::from_secs(300);

/// The one policy: every controller's errors go through it.
pub fn policy(class: ErrorClass) -> Policy {
    match class {
        ErrorClass::Transient => Policy::Backoff,
        // Something moved between our look and our call: the next look decides.
        ErrorClass::Conflict | ErrorClass::NotFound => Policy::Requeue(CONFLICT_RETRY),
        ErrorClass::Permanent => Policy::Fail(PERMANENT_RETRY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_backs_off_transient_fails_permanent_and_requeues_the_rest() {
        assert_eq!(policy(ErrorClass::Transient), Policy::Backoff);
        assert_eq!(policy(ErrorClass::Permanent), Policy::Fail(PERMANENT_RETRY));
        assert_eq!(
            policy(ErrorClass::Conflict),
            Policy::Requeue(CONFLICT_RETRY)
        );
        assert_eq!(
            policy(ErrorClass::NotFound),
            Policy::Requeue(CONFLICT_RETRY)
        );
    }
}

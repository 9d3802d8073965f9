//! Standard `metav1.Condition` handling: `lastTransitionTime` changes only when the status flips,
//! so rewriting the same condition is a no-op and steady state makes no status writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub const READY: &str = "Ready";
pub const DELETION_BLOCKED: &str = "DeletionBlocked";

/// Sets condition `type_`; returns true when its status, reason or message changed
/// (callers publish an event only then, which keeps events from storming).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
) -> bool {
    let status = if status { "True" } else { "False" }.to_string();
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let changed = existing.status != status
                || existing.reason != reason
                || existing.message != message;
            if existing.status != status {
                existing.last_transition_time = Time(Timestamp::now());
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message;
            existing.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status,
                reason: reason.to_string(),
                message,
                observed_generation,
                last_transition_time: Time(Timestamp::now()),
            });
            true
        }
    }
}

/// Removes condition `type_`; returns true if it was there.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Whether condition `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether condition `type_` is present with status `False`.
pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "False")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_the_same_condition_twice_changes_nothing() {
        let mut conditions = Vec::new();
        assert!(set(&mut conditions, READY, true, "Created", "ok", Some(1)));
        let first = conditions[0].last_transition_time.clone();
        assert!(!set(&mut conditions, READY, true, "Created", "ok", Some(1)));
        assert_eq!(conditions[0].last_transition_time, first);
        assert!(is_true(&conditions, READY));
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_flips() {
        let mut conditions = Vec::new();
        set(&mut conditions, READY, true, "Created", "ok", Some(1));
        let first = conditions[0].last_transition_time.clone();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(set(
            &mut conditions,
            READY,
            true,
            "Updated",
            "still ok",
            Some(2)
        ));
        assert_eq!(conditions[0].last_transition_time, first);
        assert!(set(
            &mut conditions,
            READY,
            false,
            "BackendError",
            "down",
            Some(2)
        ));
        assert_ne!(conditions[0].last_transition_time, first);
        assert!(!is_true(&conditions, READY));
    }

    #[test]
    fn removing_reports_whether_it_was_there() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            DELETION_BLOCKED,
            true,
            "BucketsRemain",
            "2 buckets",
            None,
        );
        assert!(remove(&mut conditions, DELETION_BLOCKED));
        assert!(!remove(&mut conditions, DELETION_BLOCKED));
    }
}

//! Standard `metav1.Condition` handling: `lastTransitionTime` changes only when the status flips,
//! so rewriting the same condition is a no-op and steady state makes no status writes.
//!
//! Every kind carries the same conditions, the ones users' tools read:
//! - `Ready`: the backend resource is usable (False with why not: waiting, retrying, failed);
//! - `Synced`: the last reconcile succeeded, or (False) the error keeper retries, with its reason
//!   and message (Crossplane's convention);
//! - `Reconciling` and `Stalled`: kstatus' "abnormal-true" pair, present only while true, so that
//!   Flux and `kstatus` judge health without custom expressions: `Reconciling` while the object is
//!   neither Ready nor stalled, `Stalled` when only a change by a person can help;
//! - `DeletionBlocked`: a deletion keeper refuses, and what unblocks it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub const READY: &str = "Ready";
pub const DELETION_BLOCKED: &str = "DeletionBlocked";
pub const SYNCED: &str = "Synced";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";

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

/// Whether condition `type_` already says `status` for `reason`, whatever its message: a report
/// that repeats with a changing message (an error's text, a request id) is not news, and must not
/// cost a status write per attempt.
pub fn says(conditions: &[Condition], type_: &str, status: bool, reason: &str) -> bool {
    let status = if status { "True" } else { "False" };
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == status && c.reason == reason)
}

/// Derives kstatus' `Reconciling` from the others: present (True, with `Ready`'s reason and
/// message) while the object is neither Ready nor `Stalled`, absent otherwise. Called on every
/// status keeper writes, so the pair never contradicts `Ready`.
pub fn derive_reconciling(conditions: &mut Vec<Condition>, observed_generation: Option<i64>) {
    if is_true(conditions, READY) || is_true(conditions, STALLED) {
        remove(conditions, RECONCILING);
        return;
    }
    let (reason, message) = conditions
        .iter()
        .find(|c| c.type_ == READY)
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_else(|| {
            (
                "Reconciling".to_string(),
                "keeper is working on it".to_string(),
            )
        });
    set(
        conditions,
        RECONCILING,
        true,
        &reason,
        message,
        observed_generation,
    );
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
    fn a_condition_says_its_status_and_reason_whatever_its_message() {
        let mut conditions = Vec::new();
        assert!(!says(&conditions, SYNCED, false, "BackendError"));
        set(
            &mut conditions,
            SYNCED,
            false,
            "BackendError",
            "request 1",
            Some(1),
        );
        assert!(says(&conditions, SYNCED, false, "BackendError"));
        assert!(!says(&conditions, SYNCED, true, "BackendError"));
        assert!(!says(&conditions, SYNCED, false, "KubernetesError"));
        assert!(!says(&conditions, READY, false, "BackendError"));
    }

    #[test]
    fn reconciling_is_there_only_while_neither_ready_nor_stalled() {
        let mut conditions = Vec::new();
        derive_reconciling(&mut conditions, Some(1));
        assert!(is_true(&conditions, RECONCILING), "no status yet: working");
        set(
            &mut conditions,
            READY,
            false,
            "WaitingForTenant",
            "tenant t",
            Some(1),
        );
        derive_reconciling(&mut conditions, Some(1));
        let reconciling = conditions.iter().find(|c| c.type_ == RECONCILING).unwrap();
        assert_eq!(
            (reconciling.reason.as_str(), reconciling.message.as_str()),
            ("WaitingForTenant", "tenant t")
        );
        set(
            &mut conditions,
            STALLED,
            true,
            "InvalidSpec",
            "bad",
            Some(1),
        );
        derive_reconciling(&mut conditions, Some(1));
        assert!(!conditions.iter().any(|c| c.type_ == RECONCILING));
        remove(&mut conditions, STALLED);
        set(&mut conditions, READY, true, "Provisioned", "ok", Some(1));
        derive_reconciling(&mut conditions, Some(1));
        assert!(!conditions.iter().any(|c| c.type_ == RECONCILING));
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

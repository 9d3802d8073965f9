//! Reporting as data: a reconcile returns an [`Outcome`] (the status it wants, the events to
//! publish, annotations to remove or set, when to look again) and the shared flow writes it, once, in
//! one place ([`super::write_outcome`]). Controllers never call the status patcher or the event
//! recorder themselves.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::cluster::Note;

use super::conditions;
use super::policy::PERMANENT_RETRY;

/// `Synced`'s reason after a reconcile that succeeded.
pub const SYNCED_REASON: &str = "ReconcileSuccess";

/// What happens after the outcome is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Look again after this long (drift checks, polls).
    Requeue(Duration),
    /// Look again only when the object (or something it watches) changes.
    AwaitChange,
    /// Cleanup only: the backend resource is verifiably gone (or retained by policy); the shared
    /// flow removes the finalizer.
    Release,
}

/// The status fields every keeper kind shares, so that the shared flow and the reporting helpers
/// can set conditions and phases on any of them.
pub trait KeeperStatus:
    serde::Serialize + serde::de::DeserializeOwned + Clone + Default + Send + Sync + 'static
{
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    fn conditions(&self) -> &[Condition];
    /// Sets the phase that a permanent error shows: `Failed`, or the kind's deleting phase
    /// while the object is being deleted (a deletion is never shown as "Failed").
    fn mark_failed(&mut self, deleting: bool);
    /// Sets the phase a blocked deletion shows.
    fn mark_deleting(&mut self);
    /// Records the generation the status describes.
    fn set_observed_generation(&mut self, generation: Option<i64>);
}

/// The result of one reconcile, written by the shared flow.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<S> {
    /// The whole status the object should have; written as a merge diff against the object's
    /// current status, so an unchanged status writes nothing.
    pub status: S,
    /// Events to publish, in order.
    pub notes: Vec<Note>,
    /// Annotations keeper consumed (a handled request) and removes.
    pub remove_annotations: Vec<&'static str>,
    /// Annotations keeper owns and sets to a value (a record of a handled request); written only
    /// when the object's value differs.
    pub set_annotations: Vec<(&'static str, String)>,
    pub next: Next,
    /// Whether the reconcile reported a permanent failure ([`Outcome::fail`]).
    failed: bool,
}

impl<S: KeeperStatus> Outcome<S> {
    pub fn new(status: S, next: Next) -> Self {
        Outcome {
            status,
            notes: Vec::new(),
            remove_annotations: Vec::new(),
            set_annotations: Vec::new(),
            next,
            failed: false,
        }
    }

    /// Publishes `note` with the outcome.
    pub fn note(&mut self, note: Note) {
        self.notes.push(note);
    }

    /// Sets condition `type_`; returns whether it changed.
    pub fn condition(
        &mut self,
        type_: &str,
        status: bool,
        reason: &str,
        message: impl Into<String>,
        generation: Option<i64>,
    ) -> bool {
        conditions::set(
            self.status.conditions_mut(),
            type_,
            status,
            reason,
            message,
            generation,
        )
    }

    /// `Ready` with an event when it changed: `Normal` when ready or waiting, `Warning` when
    /// `warn` (a failure).
    pub fn ready(
        &mut self,
        ok: bool,
        reason: &'static str,
        message: impl Into<String>,
        generation: Option<i64>,
        warn: bool,
    ) {
        let message = message.into();
        if self.condition(conditions::READY, ok, reason, message.clone(), generation) {
            self.notes.push(if warn {
                Note::warning(reason, message)
            } else {
                Note::normal(reason, message)
            });
        }
    }

    /// A permanent failure, the one way every path reports one (an error the shared policy
    /// classes permanent, or a decision of a controller's own): the kind's failed phase,
    /// `Ready=False`, `Synced=False` and `Stalled` with the reason and message, one Warning event
    /// per change, and the next look after [`PERMANENT_RETRY`] (a spec change looks at once).
    /// Returns that pace, for a step that returns what comes next; a caller with a reason to
    /// look sooner (a drain's poll) sets `next` after it.
    pub fn fail(
        &mut self,
        reason: &'static str,
        message: impl Into<String>,
        generation: Option<i64>,
        deleting: bool,
    ) -> Next {
        let message = message.into();
        self.failed = true;
        self.next = Next::Requeue(PERMANENT_RETRY);
        self.status.mark_failed(deleting);
        self.ready(false, reason, message.clone(), generation, true);
        self.condition(
            conditions::SYNCED,
            false,
            reason,
            message.clone(),
            generation,
        );
        self.condition(conditions::STALLED, true, reason, message, generation);
        conditions::derive_reconciling(self.status.conditions_mut(), generation);
        self.next
    }

    /// A reconcile that succeeded: `Synced=True`, `Stalled` gone, `Reconciling` derived from
    /// `Ready`. Costs no write of its own: it rides on the outcome's status patch, and a status
    /// that already says so is not written again. An outcome that reported a permanent failure
    /// itself ([`Outcome::fail`]) stays as it said.
    pub fn succeeded(&mut self, generation: Option<i64>) {
        if self.failed {
            return;
        }
        self.condition(conditions::SYNCED, true, SYNCED_REASON, "", generation);
        conditions::remove(self.status.conditions_mut(), conditions::STALLED);
        conditions::derive_reconciling(self.status.conditions_mut(), generation);
    }

    /// A failure keeper retries, reported once it repeats: `Synced=False` with the error's reason
    /// and message and, unless the object is Ready, `Ready=False` with the same; one Warning
    /// event when the reason changes. Written only when the reason changes, never for a new
    /// message alone, so a failure that repeats costs no write per attempt.
    pub fn retrying(&mut self, reason: &'static str, message: &str, generation: Option<i64>) {
        let conditions = self.status.conditions_mut();
        if !conditions::says(conditions, conditions::SYNCED, false, reason) {
            conditions::set(
                conditions,
                conditions::SYNCED,
                false,
                reason,
                message,
                generation,
            );
            self.notes.push(Note::warning(reason, message));
        }
        let conditions = self.status.conditions_mut();
        if !conditions::is_true(conditions, conditions::READY)
            && !conditions::says(conditions, conditions::READY, false, reason)
        {
            conditions::set(
                conditions,
                conditions::READY,
                false,
                reason,
                message,
                generation,
            );
        }
        conditions::derive_reconciling(conditions, generation);
    }

    /// The one "deletion blocked" report: the deleting phase, `DeletionBlocked=True` with the
    /// reason and the message (which names what blocks and the command that unblocks), and one
    /// Warning event `DeletionBlocked` per change.
    pub fn deletion_blocked(
        &mut self,
        reason: &'static str,
        message: impl Into<String>,
        generation: Option<i64>,
    ) {
        let message = message.into();
        self.status.mark_deleting();
        if self.condition(
            conditions::DELETION_BLOCKED,
            true,
            reason,
            message.clone(),
            generation,
        ) {
            self.notes.push(Note::warning("DeletionBlocked", message));
        }
    }

    /// A deletion blocked by what neither keeper nor a spec change settles (the backend resource
    /// is out of keeper's sight: moved to another region or account): [`Outcome::deletion_blocked`],
    /// looked at again at the pace of a permanent failure ([`PERMANENT_RETRY`], set here as
    /// [`Outcome::fail`] sets it, so that no controller keeps a pace of its own). Returns that
    /// pace, for a step that returns what comes next.
    pub fn deletion_blocked_permanently(
        &mut self,
        reason: &'static str,
        message: impl Into<String>,
        generation: Option<i64>,
    ) -> Next {
        self.deletion_blocked(reason, message, generation);
        self.next = Next::Requeue(PERMANENT_RETRY);
        self.next
    }

    /// Clears `DeletionBlocked` (the object is live again or no longer blocked).
    pub fn deletion_unblocked(&mut self) {
        conditions::remove(self.status.conditions_mut(), conditions::DELETION_BLOCKED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{S3TenantStatus, TenantPhase};
    use kube::runtime::events::EventType;

    #[test]
    fn a_blocked_deletion_warns_once_per_change() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.deletion_blocked("BucketsRemain", "2 buckets remain", Some(1));
        assert_eq!(out.status.phase, Some(TenantPhase::Deleting));
        assert_eq!(
            out.notes,
            vec![Note::warning("DeletionBlocked", "2 buckets remain")]
        );
        let mut again = Outcome::new(out.status.clone(), Next::AwaitChange);
        again.deletion_blocked("BucketsRemain", "2 buckets remain", Some(1));
        assert!(again.notes.is_empty(), "the same block publishes nothing");
        again.deletion_blocked("BucketsRemain", "1 bucket remains", Some(1));
        assert_eq!(again.notes.len(), 1, "a changed message is news");
    }

    #[test]
    fn a_permanently_blocked_deletion_is_blocked_and_looks_again_at_the_permanent_pace() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::Release);
        let next = out.deletion_blocked_permanently("RegionMismatch", "moved", Some(1));
        assert_eq!(next, Next::Requeue(PERMANENT_RETRY));
        assert_eq!(out.next, next);
        assert_eq!(out.status.phase, Some(TenantPhase::Deleting));
        assert!(conditions::is_true(
            &out.status.conditions,
            conditions::DELETION_BLOCKED
        ));
        assert_eq!(out.notes, vec![Note::warning("DeletionBlocked", "moved")]);
    }

    #[test]
    fn failures_show_failed_unless_deleting() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.fail("BackendError", "no", Some(2), false);
        assert_eq!(out.status.phase, Some(TenantPhase::Failed));
        assert!(conditions::is_false(
            &out.status.conditions,
            conditions::READY
        ));
        assert_eq!(out.notes[0].type_, EventType::Warning);
        let mut deleting = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        deleting.fail("BackendError", "no", Some(2), true);
        assert_eq!(deleting.status.phase, Some(TenantPhase::Deleting));
    }

    #[test]
    fn a_permanent_failure_looks_again_at_the_permanent_pace_whatever_came_before() {
        for before in [
            Next::AwaitChange,
            Next::Requeue(Duration::from_secs(5)),
            Next::Release,
        ] {
            let mut out = Outcome::new(S3TenantStatus::default(), before);
            let next = out.fail("InvalidSpec", "bad size", Some(2), false);
            assert_eq!(next, Next::Requeue(PERMANENT_RETRY), "after {before:?}");
            assert_eq!(out.next, next);
        }
    }

    #[test]
    fn a_permanent_failure_is_stalled_and_not_synced_until_a_success() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.fail("InvalidSpec", "bad size", Some(2), false);
        let c = &out.status.conditions;
        assert!(conditions::is_true(c, conditions::STALLED));
        assert!(conditions::is_false(c, conditions::SYNCED));
        assert!(!c.iter().any(|c| c.type_ == conditions::RECONCILING));
        let mut fixed = Outcome::new(out.status.clone(), Next::AwaitChange);
        fixed.ready(true, "Provisioned", "ok", Some(3), false);
        fixed.succeeded(Some(3));
        let c = &fixed.status.conditions;
        assert!(conditions::is_true(c, conditions::SYNCED));
        assert!(!c.iter().any(|c| c.type_ == conditions::STALLED));
        assert!(!c.iter().any(|c| c.type_ == conditions::RECONCILING));
    }

    #[test]
    fn an_outcome_that_failed_is_not_made_synced() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.fail("InvalidBucketName", "bad name", Some(1), false);
        out.succeeded(Some(1));
        assert!(conditions::is_true(
            &out.status.conditions,
            conditions::STALLED
        ));
        assert!(conditions::is_false(
            &out.status.conditions,
            conditions::SYNCED
        ));
    }

    #[test]
    fn a_retried_failure_warns_once_per_reason_and_keeps_ready_if_ready() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.retrying("BackendError", "connection refused (1)", Some(1));
        let c = &out.status.conditions;
        assert!(conditions::is_false(c, conditions::SYNCED));
        assert!(conditions::is_false(c, conditions::READY));
        assert!(conditions::is_true(c, conditions::RECONCILING));
        assert_eq!(
            out.notes,
            vec![Note::warning("BackendError", "connection refused (1)")]
        );
        // The same reason again, with another message: nothing changes, nothing is published.
        let mut again = Outcome::new(out.status.clone(), Next::AwaitChange);
        again.retrying("BackendError", "connection refused (2)", Some(1));
        assert_eq!(again.status, out.status);
        assert!(again.notes.is_empty());
        // Another reason is news.
        again.retrying("KubernetesError", "forbidden", Some(1));
        assert_eq!(again.notes.len(), 1);
        // A Ready object stays Ready: the resource exists, keeper only cannot check it.
        let mut ready = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        ready.ready(true, "Provisioned", "ok", Some(1), false);
        ready.succeeded(Some(1));
        ready.retrying("BackendError", "timeout", Some(1));
        let c = &ready.status.conditions;
        assert!(conditions::is_true(c, conditions::READY));
        assert!(conditions::is_false(c, conditions::SYNCED));
        assert!(!c.iter().any(|c| c.type_ == conditions::RECONCILING));
    }

    #[test]
    fn becoming_ready_is_an_event_and_staying_ready_is_not() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.ready(true, "Ready", "ok", Some(1), false);
        assert_eq!(out.notes, vec![Note::normal("Ready", "ok")]);
        let mut again = Outcome::new(out.status, Next::AwaitChange);
        again.ready(true, "Ready", "ok", Some(1), false);
        assert!(again.notes.is_empty());
    }
}

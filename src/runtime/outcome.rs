//! Reporting as data: a reconcile returns an [`Outcome`] (the status it wants, the events to
//! publish, annotations to remove or set, when to look again) and the shared flow writes it, once, in
//! one place ([`super::write_outcome`]). Controllers never call the status patcher or the event
//! recorder themselves.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::cluster::Note;

use super::conditions;

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
}

impl<S: KeeperStatus> Outcome<S> {
    pub fn new(status: S, next: Next) -> Self {
        Outcome {
            status,
            notes: Vec::new(),
            remove_annotations: Vec::new(),
            set_annotations: Vec::new(),
            next,
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

    /// A permanent failure: the kind's failed phase, `Ready=False` with the reason and message,
    /// one Warning event per change.
    pub fn fail(
        &mut self,
        reason: &'static str,
        message: impl Into<String>,
        generation: Option<i64>,
        deleting: bool,
    ) {
        self.status.mark_failed(deleting);
        self.ready(false, reason, message, generation, true);
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
    fn failures_show_failed_unless_deleting() {
        let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        out.fail("BackendRejected", "no", Some(2), false);
        assert_eq!(out.status.phase, Some(TenantPhase::Failed));
        assert!(conditions::is_false(
            &out.status.conditions,
            conditions::READY
        ));
        assert_eq!(out.notes[0].type_, EventType::Warning);
        let mut deleting = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
        deleting.fail("BackendRejected", "no", Some(2), true);
        assert_eq!(deleting.status.phase, Some(TenantPhase::Deleting));
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

//! Requests through annotations (`keeper.dev/drain`, `keeper.dev/rotate-credentials`), identified
//! by their value, as Flux does with `reconcile.fluxcd.io/requestedAt`: any non-empty value other
//! than `false` is a request (`true` is a value like any other). keeper records the value it
//! handled last, literally, in `status.handledRequests` and in an annotation of its own
//! (`<annotation>-handled`, which survives a restore that drops status), and never removes the
//! request annotation: the same value again is no new request, a new value is. A GitOps tool that
//! re-applies the same manifest therefore never drains twice.

use crate::api::{HandledRequests, S3BucketStatus};

/// The value an older keeper (before requests by value) acted on: `keeper.dev/drain: "true"` and
/// `keeper.dev/rotate-credentials: "true"`. It removed the annotation once done and recorded
/// nothing, so a manifest re-applied after the upgrade (GitOps) would ask again.
pub const LEGACY_VALUE: &str = "true";

/// Whether the bucket's status was last written by a keeper that did not record handled requests:
/// keeper wrote it (a phase) and it records none, nor does keeper's annotation. Every status this
/// keeper writes carries `handledRequests` (empty until a request is handled; see
/// [`mark_requests_by_value`]).
pub fn written_before_requests_by_value(
    status: Option<&S3BucketStatus>,
    handled_annotation: Option<&str>,
) -> bool {
    status.is_some_and(|s| s.phase.is_some() && s.handled_requests.is_none())
        && handled_annotation.is_none()
}

/// The record of the value handled last, as an older keeper's object is read: [`LEGACY_VALUE`]
/// counts as handled, since that keeper removed the annotation after acting on it; except for a
/// drain the older keeper left running (`drainStatus` present), which is still handled once, as
/// it was asked. The value is recorded in status by the next write ([`Kind::record`]).
pub fn legacy_record(kind: Kind, status: Option<&S3BucketStatus>) -> Option<&'static str> {
    let draining = status.is_some_and(|s| s.drain_status.is_some());
    match kind {
        Kind::Drain if draining => None,
        _ => Some(LEGACY_VALUE),
    }
}

/// Marks a status as written by a keeper that records handled requests (an empty record until
/// one is handled), so that [`written_before_requests_by_value`] never mistakes it for an older
/// keeper's. Rides on a write the outcome makes anyway, except once per object after upgrading.
pub fn mark_requests_by_value(status: &mut S3BucketStatus) {
    status.handled_requests.get_or_insert_with(Default::default);
}

/// The two request annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Drain,
    RotateCredentials,
}

impl Kind {
    /// The annotation the user sets.
    pub fn annotation(self) -> &'static str {
        match self {
            Kind::Drain => crate::controllers::bucket::DRAIN_ANNOTATION,
            Kind::RotateCredentials => crate::controllers::bucket::ROTATE_ANNOTATION,
        }
    }

    /// The annotation keeper sets to the value it handled.
    pub fn handled_annotation(self) -> &'static str {
        match self {
            Kind::Drain => crate::controllers::bucket::DRAIN_HANDLED_ANNOTATION,
            Kind::RotateCredentials => crate::controllers::bucket::ROTATE_HANDLED_ANNOTATION,
        }
    }

    /// The value recorded in status.
    pub fn recorded(self, handled: Option<&HandledRequests>) -> Option<&str> {
        let handled = handled?;
        match self {
            Kind::Drain => handled.drain.as_deref(),
            Kind::RotateCredentials => handled.rotate_credentials.as_deref(),
        }
    }

    /// Records `value` as handled in status.
    pub fn record(self, handled: &mut Option<HandledRequests>, value: &str) {
        let handled = handled.get_or_insert_with(Default::default);
        let slot = match self {
            Kind::Drain => &mut handled.drain,
            Kind::RotateCredentials => &mut handled.rotate_credentials,
        };
        *slot = Some(value.to_string());
    }
}

/// What a request annotation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Absent, empty or `false`: nothing asked (removing the annotation cancels a running drain).
    None,
    /// A value keeper has handled already (recorded in status or in the handled annotation).
    Handled(String),
    /// A value keeper has not handled yet: a new request.
    Pending(String),
}

impl Request {
    /// The annotation's value when it is a request, handled or not.
    pub fn value(&self) -> Option<&str> {
        match self {
            Request::None => None,
            Request::Handled(v) | Request::Pending(v) => Some(v),
        }
    }

    pub fn is_pending(&self) -> bool {
        matches!(self, Request::Pending(_))
    }
}

/// Classifies the annotation's value against the two records of the value handled last (the
/// status field and keeper's annotation; either one is enough, so a lost status or a lost write
/// of the annotation never repeats a request).
pub fn state(value: Option<&str>, status: Option<&str>, annotation: Option<&str>) -> Request {
    match value.map(str::trim) {
        None | Some("" | "false") => Request::None,
        Some(v) if status == Some(v) || annotation == Some(v) => Request::Handled(v.to_string()),
        Some(v) => Request::Pending(v.to_string()),
    }
}

/// Whether the drain machine wants a drain: a pending request starts one; a running drain of
/// ours goes on while the annotation carries any request value (a value changed mid-drain is
/// served by the same drain, which runs until the bucket is empty), and is canceled when the
/// annotation is removed or set to `false`.
pub fn wants_drain(request: &Request, running: bool) -> bool {
    match request {
        Request::None => false,
        Request::Pending(_) => true,
        Request::Handled(_) => running,
    }
}

/// The value to record as handled when a drain ends: the request present at the end (completed,
/// or found the bucket empty), or, when the annotation was removed (canceled), the value the
/// drain was started for, so that the same value put back is no new request.
pub fn drain_handled_value<'a>(
    request: &'a Request,
    started_for: Option<&'a str>,
) -> Option<&'a str> {
    request.value().or(started_for)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_keepers_true_counts_as_handled_unless_its_drain_still_runs() {
        use crate::api::{BucketPhase, DrainStatus};
        let written = |handled: Option<HandledRequests>, draining: bool| S3BucketStatus {
            phase: Some(BucketPhase::Ready),
            handled_requests: handled,
            drain_status: draining.then(DrainStatus::default),
            ..S3BucketStatus::default()
        };
        let older = written(None, false);
        assert!(written_before_requests_by_value(Some(&older), None));
        assert_eq!(legacy_record(Kind::Drain, Some(&older)), Some("true"));
        assert_eq!(
            legacy_record(Kind::RotateCredentials, Some(&older)),
            Some("true")
        );
        // A drain the older keeper left running is finished, once.
        let draining = written(None, true);
        assert_eq!(legacy_record(Kind::Drain, Some(&draining)), None);
        // This keeper's objects: a record (even empty), keeper's annotation, or no status yet.
        let mut ours = written(None, false);
        mark_requests_by_value(&mut ours);
        assert!(!written_before_requests_by_value(Some(&ours), None));
        assert!(!written_before_requests_by_value(
            Some(&older),
            Some("1700000000")
        ));
        assert!(!written_before_requests_by_value(None, None));
        assert!(!written_before_requests_by_value(
            Some(&S3BucketStatus::default()),
            None
        ));
        // Marking keeps what is recorded.
        let mut handled = written(None, false);
        Kind::Drain.record(&mut handled.handled_requests, "42");
        mark_requests_by_value(&mut handled);
        assert_eq!(
            Kind::Drain.recorded(handled.handled_requests.as_ref()),
            Some("42")
        );
    }

    #[test]
    fn any_non_empty_value_but_false_is_a_request_and_true_is_a_value_like_any_other() {
        assert_eq!(state(None, None, None), Request::None);
        assert_eq!(state(Some(""), None, None), Request::None);
        assert_eq!(state(Some("false"), None, None), Request::None);
        assert_eq!(
            state(Some("true"), None, None),
            Request::Pending("true".into())
        );
        assert_eq!(
            state(Some("1700000000"), None, None),
            Request::Pending("1700000000".into())
        );
        // `true` handled is handled: asking again needs a new value.
        assert_eq!(
            state(Some("true"), Some("true"), None),
            Request::Handled("true".into())
        );
    }

    #[test]
    fn either_record_makes_a_value_handled_and_a_new_value_is_a_new_request() {
        // Status only (the handled annotation's write was lost).
        assert_eq!(
            state(Some("a"), Some("a"), None),
            Request::Handled("a".into())
        );
        // Annotation only (status dropped by a backup restore).
        assert_eq!(
            state(Some("a"), None, Some("a")),
            Request::Handled("a".into())
        );
        assert_eq!(
            state(Some("b"), Some("a"), Some("a")),
            Request::Pending("b".into())
        );
        assert!(state(Some("b"), Some("a"), Some("a")).is_pending());
        assert!(!state(Some("a"), Some("a"), Some("a")).is_pending());
    }

    #[test]
    fn pending_starts_a_drain_running_continues_and_removal_cancels() {
        let pending = Request::Pending("2".into());
        let handled = Request::Handled("1".into());
        assert!(wants_drain(&pending, false));
        assert!(wants_drain(&pending, true));
        assert!(!wants_drain(&handled, false), "the same value is a no-op");
        assert!(wants_drain(&handled, true), "a running drain goes on");
        assert!(!wants_drain(&Request::None, true), "removal cancels");
        assert!(!wants_drain(&Request::None, false));
    }

    #[test]
    fn the_handled_value_is_the_current_request_or_the_one_a_canceled_drain_served() {
        assert_eq!(
            drain_handled_value(&Request::Pending("2".into()), Some("1")),
            Some("2")
        );
        assert_eq!(drain_handled_value(&Request::None, Some("1")), Some("1"));
        assert_eq!(drain_handled_value(&Request::None, None), None);
    }

    #[test]
    fn records_go_into_their_own_status_field() {
        let mut handled = None;
        Kind::Drain.record(&mut handled, "x");
        Kind::RotateCredentials.record(&mut handled, "y");
        assert_eq!(Kind::Drain.recorded(handled.as_ref()), Some("x"));
        assert_eq!(
            Kind::RotateCredentials.recorded(handled.as_ref()),
            Some("y")
        );
        assert_eq!(Kind::Drain.handled_annotation(), "keeper.dev/drain-handled");
        assert_eq!(
            Kind::RotateCredentials.handled_annotation(),
            "keeper.dev/rotate-credentials-handled"
        );
    }
}

//! Following a request `kubectl keeper drain` or `rotate` wrote to its end, decided from the
//! S3Bucket alone (no client): keeper records the request value it handled in an annotation of
//! its own and in `status.handledRequests` (README, "Requests, identified by their value"), shows
//! a running drain in `status.drainStatus`, and a failure in `Stalled` (and, for a drain that
//! stops on an object lock, `DeletionBlocked` with reason `DrainBlocked`).

use std::time::Duration;

use kube::ResourceExt;

use super::plan::{drain_progress, running_drain, true_condition};
use crate::api::names::bucket_credentials_secret_name;
use crate::api::{DeletionPolicy, S3Bucket};
use crate::controllers::bucket::{
    DRAIN_ANNOTATION, DRAIN_HANDLED_ANNOTATION, ROTATE_ANNOTATION, ROTATE_HANDLED_ANNOTATION,
};
use crate::runtime::conditions::{DELETION_BLOCKED, READY, STALLED, SYNCED};

/// A failure the bucket showed before the request was written is taken as keeper's answer to
/// the request only once keeper has had this long to look again: a new request makes keeper try
/// again at once, and a failure that stays the same keeps its condition as it was.
pub const STALE_FAILURE_GRACE: Duration = Duration::from_secs(30);

/// The two requests a bucket takes through annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Drain,
    Rotate,
}

impl Request {
    pub fn annotation(self) -> &'static str {
        match self {
            Request::Drain => DRAIN_ANNOTATION,
            Request::Rotate => ROTATE_ANNOTATION,
        }
    }

    fn handled_annotation(self) -> &'static str {
        match self {
            Request::Drain => DRAIN_HANDLED_ANNOTATION,
            Request::Rotate => ROTATE_HANDLED_ANNOTATION,
        }
    }

    pub fn noun(self) -> &'static str {
        match self {
            Request::Drain => "drain",
            Request::Rotate => "rotation",
        }
    }

    /// The values keeper recorded as handled last: its annotation and the status field (either
    /// one is enough for keeper, so either one is for us).
    fn handled_values(self, bucket: &S3Bucket) -> [Option<&str>; 2] {
        let handled = bucket
            .status
            .as_ref()
            .and_then(|s| s.handled_requests.as_ref());
        let recorded = handled.and_then(|h| match self {
            Request::Drain => h.drain.as_deref(),
            Request::Rotate => h.rotate_credentials.as_deref(),
        });
        let annotated = bucket
            .annotations()
            .get(self.handled_annotation())
            .map(String::as_str);
        [annotated, recorded]
    }

    fn handled(self, bucket: &S3Bucket, value: &str) -> bool {
        self.handled_values(bucket).contains(&Some(value))
    }
}

/// A request value keeper has not seen on this bucket: the unix time in seconds (what the README's
/// `$(date +%s)` writes), counted up past a value the annotation or either record already holds
/// (the same value again would be no new request).
pub fn fresh_value(request: Request, bucket: &S3Bucket, now_unix_seconds: u64) -> String {
    let current = bucket
        .annotations()
        .get(request.annotation())
        .map(String::as_str);
    let taken = request.handled_values(bucket);
    (now_unix_seconds..)
        .map(|n| n.to_string())
        .find(|v| current != Some(v.as_str()) && !taken.contains(&Some(v.as_str())))
        .expect("an unbounded range has a value not taken")
}

/// The failure keeper reports on the bucket that ends a request of this kind, if any: `Stalled`
/// (a failure retrying cannot fix), and for a drain a `DrainBlocked` deletion or a stuck drain.
pub fn failure(request: Request, bucket: &S3Bucket) -> Option<String> {
    let conditions = bucket
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if let Some(c) = true_condition(conditions, STALLED) {
        return Some(format!("{} ({}): {}", STALLED, c.reason, c.message));
    }
    if request == Request::Drain {
        if let Some(c) =
            true_condition(conditions, DELETION_BLOCKED).filter(|c| c.reason == "DrainBlocked")
        {
            return Some(format!(
                "{} ({}): {}",
                DELETION_BLOCKED, c.reason, c.message
            ));
        }
        if let Some(drain) = running_drain(bucket).filter(|d| d.stuck) {
            return Some(format!(
                "the drain is stuck: no object deleted for the stuck threshold ({})",
                drain.message.as_deref().unwrap_or_default()
            ));
        }
    }
    None
}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Not taken up yet, or taken up and not done; says why.
    Waiting(String),
    /// A drain deleting objects.
    Draining {
        deleted: i64,
        total: i64,
        message: String,
    },
    Done(String),
    Failed(String),
}

impl Progress {
    /// One line for a log or a terminal that is not one.
    pub fn line(&self) -> String {
        match self {
            Progress::Waiting(why) => why.clone(),
            Progress::Draining { deleted, total, .. } => {
                format!("{deleted} of {total} objects deleted")
            }
            Progress::Done(summary) => summary.clone(),
            Progress::Failed(why) => format!("failed: {why}"),
        }
    }
}

/// What a request looks like now. `current` is the bucket as read now (`None`: it is gone),
/// `last_seen` the last read of it before, `baseline` the failure it showed before the request was
/// written, `waited` the time since.
pub fn progress(
    request: Request,
    value: &str,
    current: Option<&S3Bucket>,
    last_seen: Option<&S3Bucket>,
    baseline: Option<&str>,
    waited: Duration,
) -> Progress {
    let Some(bucket) = current else {
        return gone(request, last_seen);
    };
    match bucket
        .annotations()
        .get(request.annotation())
        .map(|v| v.trim())
    {
        Some(v) if v == value => {}
        None | Some("" | "false") => {
            let stays = if request == Request::Drain {
                ": the drain is canceled, what it has not deleted stays"
            } else {
                ""
            };
            return Progress::Failed(format!(
                "someone removed the {} annotation{stays}",
                request.annotation()
            ));
        }
        Some(other) => {
            return Progress::Failed(format!(
                "someone wrote a newer request, {}={other}: follow that one with `kubectl keeper why s3bucket/{}`",
                request.annotation(),
                bucket.name_any()
            ));
        }
    }
    let handled = request.handled(bucket, value);
    let conditions = bucket
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let ready = true_condition(conditions, READY).is_some();
    match request {
        Request::Drain if handled && running_drain(bucket).is_none() => {
            return Progress::Done(drained(value, last_seen));
        }
        Request::Rotate if handled && ready => {
            return Progress::Done(format!(
                "rotation {value} done: new keys are in Secret {}, the old key is deleted; restart clients that cache them",
                bucket_credentials_secret_name(&bucket.name_any())
            ));
        }
        _ => {}
    }
    if let Some(failed) = failure(request, bucket)
        && (baseline != Some(failed.as_str()) || waited >= STALE_FAILURE_GRACE)
    {
        return Progress::Failed(failed);
    }
    if let Some(drain) = running_drain(bucket).filter(|_| request == Request::Drain) {
        let (deleted, total) = drain_progress(drain);
        return Progress::Draining {
            deleted,
            total,
            message: drain.message.clone().unwrap_or_default(),
        };
    }
    if let Some(c) = conditions
        .iter()
        .find(|c| c.type_ == SYNCED && c.status == "False")
    {
        return Progress::Waiting(format!(
            "keeper retries an error ({}): {}",
            c.reason, c.message
        ));
    }
    if handled {
        // A rotation handled, its new keys not accepted yet (CredentialsNotYetValid).
        let (reason, message) = conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map(|c| (c.reason.as_str(), c.message.as_str()))
            .unwrap_or(("NotReady", "no Ready condition yet"));
        return Progress::Waiting(format!(
            "{} handled, waiting for Ready ({reason}): {message}",
            request.noun()
        ));
    }
    Progress::Waiting(format!(
        "waiting for keeper to take up {} request {value}",
        request.noun()
    ))
}

/// The end of a drain: how many objects went, when a drain was seen running.
fn drained(value: &str, last_seen: Option<&S3Bucket>) -> String {
    match last_seen.and_then(running_drain) {
        Some(drain) => format!(
            "drain {value} done: {} objects deleted, the bucket is empty",
            drain.initial_object_count
        ),
        None => format!("drain {value} done: the bucket is empty"),
    }
}

/// The bucket is gone. keeper deletes a bucket with `deletionPolicy: Delete` only once it is
/// empty, so a bucket seen being deleted under that policy went empty; any other departure says
/// nothing about its objects.
fn gone(request: Request, last_seen: Option<&S3Bucket>) -> Progress {
    let emptied_and_deleted = last_seen.is_some_and(|b| {
        b.metadata.deletion_timestamp.is_some() && b.spec.deletion_policy == DeletionPolicy::Delete
    });
    match request {
        Request::Drain if emptied_and_deleted => Progress::Done(
            "the bucket was drained and deleted (keeper deletes a bucket only once it is empty)"
                .to_string(),
        ),
        _ => Progress::Failed(format!(
            "the S3Bucket is gone before its {} was seen to finish",
            request.noun()
        )),
    }
}

//! The drain state machine (annotation `keeper.dev/drain`, a request per value, see
//! [`super::requests`]): pure functions from the drain status, whether a drain is wanted and the
//! observed bucket to the next step, one function per transition.
//! The controller performs the backend calls the step needs and publishes the events returned here.

use std::time::Duration;

use crate::api::names::{InvalidDuration, format_duration, parse_duration};
use crate::api::{BucketDrainSpec, DrainMode, DrainStatus};
use crate::config::DrainDefaults;
use crate::runtime::Note;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub const STARTED: &str = "BucketDrainingStarted";
pub const PROGRESS: &str = "BucketDrainingProgress";
pub const STUCK: &str = "BucketDrainingStuck";
pub const COMPLETE: &str = "BucketDrainingComplete";
pub const CANCELED: &str = "BucketDrainingCanceled";
pub const ORPHANED: &str = "BucketOrphanedDrain";
pub const ALREADY_EMPTY: &str = "BucketAlreadyEmpty";

const DEFAULT_INITIAL_POLL: Duration = Duration::from_secs(3 * 60);
const DEFAULT_LONG_RUNNING_POLL: Duration = Duration::from_secs(15 * 60);
const DEFAULT_STUCK_THRESHOLD: Duration = Duration::from_secs(3 * 60 * 60);
/// The first poll of a server-side drain comes this soon unless configured
/// (`drain.firstPollInterval`): a small drain is over in seconds.
const DEFAULT_FIRST_POLL: Duration = Duration::from_secs(2);
/// Drains are polled at the initial interval for this long, then at the long-running one.
const FIRST_PHASE: Duration = Duration::from_secs(60 * 60);

/// Effective drain timing for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSettings {
    pub initial_poll: Duration,
    pub long_running_poll: Duration,
    pub stuck_threshold: Duration,
    /// Server-side drains: the first poll interval, from which polls back off to the others.
    pub first_poll: Duration,
}

/// Resolves the drain timing: bucket spec > provider configuration > built-in defaults.
/// `spec.drain.pollInterval` replaces both intervals.
pub fn settings(
    spec: Option<&BucketDrainSpec>,
    provider: &DrainDefaults,
) -> Result<DrainSettings, InvalidDuration> {
    let spec_poll = spec
        .and_then(|s| s.poll_interval.as_deref())
        .map(parse_duration)
        .transpose()?;
    let spec_stuck = spec
        .and_then(|s| s.stuck_threshold.as_deref())
        .map(parse_duration)
        .transpose()?;
    Ok(DrainSettings {
        initial_poll: spec_poll
            .or(provider.initial_poll_interval)
            .unwrap_or(DEFAULT_INITIAL_POLL),
        long_running_poll: spec_poll
            .or(provider.long_running_poll_interval)
            .unwrap_or(DEFAULT_LONG_RUNNING_POLL),
        stuck_threshold: spec_stuck
            .or(provider.stuck_threshold)
            .unwrap_or(DEFAULT_STUCK_THRESHOLD),
        first_poll: provider.first_poll_interval.unwrap_or(DEFAULT_FIRST_POLL),
    })
}

/// The poll interval for a drain in `mode` that has run for `elapsed`: the initial interval in
/// the first hour, the long-running one after it. A server-side drain is polled adaptively
/// below that: first after `first_poll`, then after half the time it has run so far, so that its
/// end is seen at most half again its duration late, with a few polls in its first minutes.
/// A client-side drain sees its end itself (its own listing comes back empty) and a poll costs a
/// full listing: it keeps the configured interval.
pub fn next_poll_interval(
    settings: &DrainSettings,
    mode: Option<DrainMode>,
    elapsed: Duration,
) -> Duration {
    let configured = if elapsed < FIRST_PHASE {
        settings.initial_poll
    } else {
        settings.long_running_poll
    };
    match mode {
        Some(DrainMode::ServerSide) => {
            (elapsed / 2).clamp(settings.first_poll.min(configured), configured)
        }
        _ => configured,
    }
}

/// What the drain needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// No drain requested and none running.
    Idle,
    Initiate,
    /// Drain requested on an empty bucket: only the annotation goes.
    AlreadyEmpty,
    Poll,
    Complete,
    Cancel,
    /// The backend is deleting objects but no drain of ours runs: stop it.
    CancelOrphan,
}

/// Chooses the next drain step. `ours` is whether `status.drainStatus` records a drain we
/// started; `backend_draining` whether the backend itself deletes objects (server-side drains).
pub fn decide(wants: bool, ours: bool, backend_draining: bool, object_count: i64) -> DrainStep {
    match (wants, ours) {
        (false, true) => DrainStep::Cancel,
        (false, false) if backend_draining => DrainStep::CancelOrphan,
        (false, false) => DrainStep::Idle,
        (true, true) if object_count == 0 => DrainStep::Complete,
        (true, true) => DrainStep::Poll,
        // A drain the backend runs while the annotation asks for one is adopted by initiating
        // (starting an already running drain is harmless): this is also how a drain resumes when
        // keeper died between starting it and recording it.
        (true, false) if object_count == 0 && !backend_draining => DrainStep::AlreadyEmpty,
        (true, false) => DrainStep::Initiate,
    }
}

/// Whether a drain status records a drain we started.
pub fn is_ours(status: Option<&DrainStatus>) -> bool {
    status.is_some_and(|s| s.started_at.is_some())
}

fn elapsed(since: Option<&Time>, now: Timestamp) -> Duration {
    since
        .and_then(|t| now.duration_since(t.0).try_into().ok())
        .unwrap_or_default()
}

/// Transition: start a drain on a bucket holding `objects` objects and `bytes` bytes.
pub fn initiate(
    objects: i64,
    bytes: i64,
    mode: DrainMode,
    settings: &DrainSettings,
    now: Timestamp,
) -> (DrainStatus, Note) {
    let started = Time(now);
    let status = DrainStatus {
        started_at: Some(started.clone()),
        is_deleting_objects: true,
        initial_object_count: objects,
        initial_object_bytes: bytes,
        last_checked_at: Some(started.clone()),
        last_progress_at: Some(started),
        previous_object_count: objects,
        stuck: false,
        message: Some(format!("deleting {objects} objects")),
        next_poll_interval: Some(format_duration(next_poll_interval(
            settings,
            Some(mode),
            Duration::ZERO,
        ))),
        mode: Some(mode),
        request: None,
    };
    let note = Note::normal(
        STARTED,
        format!("Started draining the bucket: {objects} objects ({bytes} bytes) to delete"),
    );
    (status, note)
}

/// Transition: record progress at a poll. Returns the new status and the events to publish: a
/// progress event when the count went down, and one `BucketDrainingStuck` warning when the count
/// has not moved for the stuck threshold (the previous check was still under it, so it fires once).
pub fn poll(
    current: &DrainStatus,
    objects: i64,
    settings: &DrainSettings,
    now: Timestamp,
) -> (DrainStatus, Vec<Note>) {
    let mut next = current.clone();
    let mut notes = Vec::new();
    if objects < current.previous_object_count {
        next.last_progress_at = Some(Time(now));
        next.stuck = false;
        let deleted = current.initial_object_count - objects;
        notes.push(Note::normal(
            PROGRESS,
            format!(
                "Deleted {deleted} of {} objects, {objects} remain",
                current.initial_object_count
            ),
        ));
    } else {
        let progress_at = current
            .last_progress_at
            .as_ref()
            .or(current.started_at.as_ref());
        let quiet_now = elapsed(progress_at, now);
        let last_checked = current.last_checked_at.as_ref().map_or(now, |t| t.0);
        let quiet_before = elapsed(progress_at, last_checked);
        next.stuck = quiet_now >= settings.stuck_threshold;
        if quiet_now >= settings.stuck_threshold && quiet_before < settings.stuck_threshold {
            notes.push(Note::warning(
                STUCK,
                format!(
                    "No objects deleted for {}: {objects} objects remain (object lock or retention may hold them)",
                    format_duration(quiet_now)
                ),
            ));
        }
    }
    next.previous_object_count = objects;
    next.last_checked_at = Some(Time(now));
    next.is_deleting_objects = true;
    next.message = Some(format!(
        "{objects} of {} objects remain",
        current.initial_object_count
    ));
    let ran = elapsed(current.started_at.as_ref(), now);
    let mut interval = next_poll_interval(settings, current.mode, ran);
    if current.mode == Some(DrainMode::ServerSide)
        && let Some(end) = expected_end(current.initial_object_count, objects, ran)
    {
        // Never sooner than an eighth of the time run so far: a backend whose counts lag (the
        // grid's usage can be minutes behind) must not be polled every few seconds meanwhile.
        let soonest = settings.first_poll.max(ran / 8).min(interval);
        interval = end.clamp(soonest, interval);
    }
    next.next_poll_interval = Some(format_duration(interval));
    (next, notes)
}

/// When a server-side drain that has run for `ran` and brought `initial` objects down to `left`
/// ends at its mean pace so far, a little late rather than early (a poll just before the end
/// costs another); `None` before any progress.
fn expected_end(initial: i64, left: i64, ran: Duration) -> Option<Duration> {
    let deleted = initial - left;
    if deleted <= 0 || left <= 0 || ran.is_zero() {
        return None;
    }
    let per_object = ran.as_secs_f64() / deleted as f64;
    Some(Duration::from_secs_f64(
        (per_object * left as f64 * 1.1).min(FIRST_PHASE.as_secs_f64()),
    ))
}

/// The interval between polls recorded in the drain's status.
fn recorded_interval(current: &DrainStatus) -> Option<Duration> {
    current
        .next_poll_interval
        .as_deref()
        .and_then(|s| parse_duration(s).ok())
}

/// Whether a poll is due: the recorded interval has passed since the last check.
pub fn poll_due(current: &DrainStatus, now: Timestamp) -> bool {
    elapsed(current.last_checked_at.as_ref(), now) >= recorded_interval(current).unwrap_or_default()
}

/// How long until the next poll of a backend's drain is due: the recorded interval (the initial
/// one when none is recorded) less the time since the last check, at least a second; so that a
/// reconcile triggered by something else does not push the poll a whole interval back.
pub fn until_next_poll(
    current: &DrainStatus,
    settings: &DrainSettings,
    now: Timestamp,
) -> Duration {
    let interval = recorded_interval(current).unwrap_or(settings.initial_poll);
    interval
        .saturating_sub(elapsed(current.last_checked_at.as_ref(), now))
        .max(Duration::from_secs(1))
}

/// Transition: the bucket is empty. The drain status goes (the caller records the request as
/// handled; the annotation stays). The deletions since the last poll are reported as progress first, so that every
/// drain that deleted something shows start, progress and completion.
pub fn complete(current: &DrainStatus) -> Vec<Note> {
    let mut notes = Vec::new();
    if current.previous_object_count > 0 {
        notes.push(Note::normal(
            PROGRESS,
            format!(
                "Deleted {} of {} objects, 0 remain",
                current.initial_object_count, current.initial_object_count
            ),
        ));
    }
    notes.push(Note::normal(
        COMPLETE,
        format!(
            "Drain complete: deleted {} objects",
            current.initial_object_count
        ),
    ));
    notes
}

/// Whether no progress has been reported since the drain started (the first deletions of a
/// client-side drain are reported at once instead of at the first poll).
pub fn awaiting_first_progress(current: &DrainStatus) -> bool {
    current.last_progress_at == current.started_at
}

/// Transition: the annotation was removed while draining. Objects not yet deleted stay.
pub fn cancel(current: &DrainStatus, objects_left: Option<i64>) -> Note {
    let left = objects_left.map_or_else(String::new, |n| format!(": {n} objects remain"));
    Note::normal(
        CANCELED,
        format!(
            "Drain canceled because the {} annotation was removed (it started with {} objects){left}",
            crate::controllers::bucket::DRAIN_ANNOTATION,
            current.initial_object_count
        ),
    )
}

/// Transition: keeper lets go of the bucket (deletionPolicy Retain, a bucket not keeper's) while a
/// drain of ours runs: the drain is stopped first and what remains stays.
pub fn stopped_before_letting_go(current: &DrainStatus, why: &str) -> Note {
    let how = match current.mode {
        Some(DrainMode::ServerSide) => "told the backend to stop deleting objects",
        _ => "stopped deleting objects",
    };
    Note::normal(
        CANCELED,
        format!(
            "Drain stopped before keeper lets go of the bucket ({why}): {how}; the objects not yet deleted stay (it started with {} objects, {} remained at the last check)",
            current.initial_object_count, current.previous_object_count
        ),
    )
}

/// What stands between a bucket retained on deletion (`deletionPolicy: Retain`) and keeper
/// letting go of it (F1): the user chose to keep the objects, so nothing may go on deleting
/// them once keeper no longer looks after the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LettingGo {
    /// Nothing deletes objects: release.
    Release,
    /// A drain of ours recorded in status runs: stop it, then release.
    StopRecordedDrain,
    /// The backend deletes objects from a bucket of ours without a drain recorded in status
    /// (keeper started it and the status write that recorded it failed): stop it, then release.
    StopUnrecordedDrain,
}

/// Decides [`LettingGo`]. `backend_draining`: the backend itself deletes the bucket's objects
/// (a server-side drain; a client-side drain runs only in keeper's reconciles, which end with the
/// release). `ours`: the bucket carries this resource's mark; a drain found on a bucket that is
/// not ours was not started through this resource (keeper checks the mark before starting one)
/// and is left alone, as everything else about that bucket.
pub fn before_letting_go(recorded: bool, backend_draining: bool, ours: bool) -> LettingGo {
    if recorded {
        LettingGo::StopRecordedDrain
    } else if backend_draining && ours {
        LettingGo::StopUnrecordedDrain
    } else {
        LettingGo::Release
    }
}

/// Transition: keeper lets go of a retained bucket that the backend was deleting objects from
/// without a drain recorded in status (the record of its start was lost).
pub fn stopped_unrecorded_before_letting_go() -> Note {
    Note::warning(
        ORPHANED,
        "The backend was deleting objects from this bucket although no drain is recorded in its status (keeper started one and could not record it); told it to stop before letting go of the bucket (deletionPolicy is Retain): the objects not yet deleted stay",
    )
}

/// Transition: the backend runs a drain nobody asked for through this resource.
pub fn cancel_orphan() -> Note {
    Note::warning(
        ORPHANED,
        format!(
            "The backend was deleting objects from this bucket without a new drain requested here; stopped it (set {} to a new value to drain)",
            crate::controllers::bucket::DRAIN_ANNOTATION
        ),
    )
}

/// Transition: drain requested on an empty bucket.
pub fn already_empty() -> Note {
    Note::normal(
        ALREADY_EMPTY,
        "The bucket holds no objects; nothing to drain",
    )
}

#[cfg(test)]
mod tests;

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
mod tests {
    use kube::runtime::events::EventType;

    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn defaults() -> DrainSettings {
        settings(None, &DrainDefaults::default()).unwrap()
    }

    #[test]
    fn built_in_defaults_are_3m_15m_and_3h() {
        let s = defaults();
        assert_eq!(s.first_poll, Duration::from_secs(2));
        assert_eq!(s.initial_poll, Duration::from_secs(180));
        assert_eq!(s.long_running_poll, Duration::from_secs(900));
        assert_eq!(s.stuck_threshold, Duration::from_secs(3 * 3600));
    }

    #[test]
    fn bucket_spec_beats_provider_beats_defaults() {
        let provider = DrainDefaults {
            initial_poll_interval: Some(Duration::from_secs(60)),
            long_running_poll_interval: None,
            stuck_threshold: Some(Duration::from_secs(7200)),
            ..DrainDefaults::default()
        };
        let s = settings(None, &provider).unwrap();
        assert_eq!(s.initial_poll, Duration::from_secs(60));
        assert_eq!(s.long_running_poll, Duration::from_secs(900));
        assert_eq!(s.stuck_threshold, Duration::from_secs(7200));
        let spec = BucketDrainSpec {
            poll_interval: Some("30s".into()),
            stuck_threshold: Some("1h".into()),
        };
        let s = settings(Some(&spec), &provider).unwrap();
        // One bucket interval replaces both tiers.
        assert_eq!(s.initial_poll, Duration::from_secs(30));
        assert_eq!(s.long_running_poll, Duration::from_secs(30));
        assert_eq!(s.stuck_threshold, Duration::from_secs(3600));
    }

    #[test]
    fn a_malformed_spec_duration_is_an_error() {
        let spec = BucketDrainSpec {
            poll_interval: Some("soon".into()),
            stuck_threshold: None,
        };
        assert!(settings(Some(&spec), &DrainDefaults::default()).is_err());
    }

    #[test]
    fn polling_slows_down_after_the_first_hour() {
        let s = defaults();
        for mode in [
            None,
            Some(DrainMode::ClientSide),
            Some(DrainMode::ServerSide),
        ] {
            assert_eq!(
                next_poll_interval(&s, mode, Duration::from_secs(3599)),
                Duration::from_secs(180)
            );
            assert_eq!(
                next_poll_interval(&s, mode, Duration::from_secs(3600)),
                Duration::from_secs(900)
            );
        }
    }

    #[test]
    fn server_side_drains_are_polled_within_seconds_then_back_off_to_the_interval() {
        let s = defaults();
        let server = |secs| {
            next_poll_interval(&s, Some(DrainMode::ServerSide), Duration::from_secs(secs)).as_secs()
        };
        // Half the time run so far, from 2 s up to the configured 3 minutes.
        let intervals: Vec<u64> = [0, 2, 4, 10, 60, 300, 359, 360, 3000]
            .into_iter()
            .map(server)
            .collect();
        assert_eq!(intervals, [2, 2, 2, 5, 30, 150, 179, 180, 180]);
        // Polled from the start, a drain of a few seconds is seen over in seconds, and one of an
        // hour costs a handful of extra polls.
        let mut at = 0;
        let mut polls = Vec::new();
        while at < 3600 {
            at += server(at);
            polls.push(at);
        }
        assert_eq!(&polls[..4], [2, 4, 6, 9]);
        assert!(polls.len() <= 35, "{polls:?}");
        // Client-side drains see their end themselves: a poll (a full listing) keeps the interval.
        assert_eq!(
            next_poll_interval(&s, Some(DrainMode::ClientSide), Duration::ZERO),
            Duration::from_secs(180)
        );
        // A configured first poll is used; an interval below it wins.
        let slow_start = DrainSettings {
            first_poll: Duration::from_secs(20),
            ..s
        };
        assert_eq!(
            next_poll_interval(&slow_start, Some(DrainMode::ServerSide), Duration::ZERO),
            Duration::from_secs(20)
        );
        let fast = DrainSettings {
            initial_poll: Duration::from_secs(1),
            ..s
        };
        assert_eq!(
            next_poll_interval(&fast, Some(DrainMode::ServerSide), Duration::from_secs(30)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn decide_covers_every_branch() {
        use DrainStep::*;
        assert_eq!(decide(false, false, false, 10), Idle);
        assert_eq!(decide(true, false, false, 10), Initiate);
        assert_eq!(decide(true, false, false, 0), AlreadyEmpty);
        assert_eq!(decide(true, true, true, 10), Poll);
        assert_eq!(decide(true, true, false, 10), Poll);
        assert_eq!(decide(true, true, true, 0), Complete);
        assert_eq!(decide(false, true, true, 10), Cancel);
        assert_eq!(decide(false, true, false, 0), Cancel);
        assert_eq!(decide(false, false, true, 10), CancelOrphan);
        // Requested and already running on the backend without our record: adopt, do not cancel.
        assert_eq!(decide(true, false, true, 10), Initiate);
        assert_eq!(decide(true, false, true, 0), Initiate);
    }

    #[test]
    fn a_status_without_start_time_is_not_ours() {
        assert!(!is_ours(None));
        assert!(!is_ours(Some(&DrainStatus::default())));
        let (status, _) = initiate(5, 50, DrainMode::ClientSide, &defaults(), at(0));
        assert!(is_ours(Some(&status)));
    }

    #[test]
    fn initiate_records_the_starting_point() {
        let (status, note) = initiate(1500, 73_000, DrainMode::ServerSide, &defaults(), at(0));
        assert_eq!(status.initial_object_count, 1500);
        assert_eq!(status.initial_object_bytes, 73_000);
        assert_eq!(status.previous_object_count, 1500);
        // A server-side drain is first polled within seconds.
        assert_eq!(status.next_poll_interval.as_deref(), Some("2s"));
        assert_eq!(status.mode, Some(DrainMode::ServerSide));
        assert!(status.is_deleting_objects);
        assert_eq!(note.reason, STARTED);
        assert_eq!(note.type_, EventType::Normal);
        assert!(note.message.contains("1500 objects"));
    }

    #[test]
    fn poll_reports_progress_when_the_count_drops() {
        let s = defaults();
        let (start, _) = initiate(1000, 0, DrainMode::ServerSide, &s, at(0));
        let (next, notes) = poll(&start, 400, &s, at(180));
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, PROGRESS);
        assert!(notes[0].message.contains("Deleted 600 of 1000"));
        assert_eq!(next.previous_object_count, 400);
        assert_eq!(next.last_progress_at, Some(Time(at(180))));
        assert_eq!(next.last_checked_at, Some(Time(at(180))));
        // No progress: no event, progress time unchanged.
        let (again, notes) = poll(&next, 400, &s, at(360));
        assert!(notes.is_empty());
        assert_eq!(again.last_progress_at, Some(Time(at(180))));
    }

    #[test]
    fn a_server_side_drain_is_polled_when_its_pace_says_it_ends() {
        let s = defaults();
        let (start, _) = initiate(100_000, 0, DrainMode::ServerSide, &s, at(0));
        // Half done after 60 s: the backoff says 30 s, the pace says the end comes in 66 s.
        let (half, _) = poll(&start, 50_000, &s, at(60));
        assert_eq!(half.next_poll_interval.as_deref(), Some("30s"));
        // Nine tenths after 90 s: 11 s left at that pace, sooner than the backoff's 45 s.
        let (most, _) = poll(&half, 10_000, &s, at(90));
        assert_eq!(most.next_poll_interval.as_deref(), Some("11s"));
        // Nearly done after 100 s: not sooner than an eighth of the time run (12.5 s, recorded in
        // whole seconds), as counts that lag behind would otherwise be polled every few seconds.
        let (nearly, _) = poll(&most, 100, &s, at(100));
        assert_eq!(nearly.next_poll_interval.as_deref(), Some("12s"));
        // No progress yet, or a client-side drain: the backoff alone.
        let (still, _) = poll(&start, 100_000, &s, at(60));
        assert_eq!(still.next_poll_interval.as_deref(), Some("30s"));
        let (client, _) = initiate(100_000, 0, DrainMode::ClientSide, &s, at(0));
        let (client, _) = poll(&client, 10_000, &s, at(90));
        assert_eq!(client.next_poll_interval.as_deref(), Some("3m0s"));
        assert_eq!(expected_end(10, 0, Duration::from_secs(5)), None);
    }

    #[test]
    fn poll_recomputes_the_interval_each_time() {
        let s = defaults();
        let (start, _) = initiate(1000, 0, DrainMode::ServerSide, &s, at(0));
        let (next, _) = poll(&start, 900, &s, at(3700));
        assert_eq!(next.next_poll_interval.as_deref(), Some("15m0s"));
        // A configuration change shows at the next poll.
        let faster = DrainSettings {
            initial_poll: Duration::from_secs(10),
            long_running_poll: Duration::from_secs(20),
            ..s
        };
        let (next, _) = poll(&next, 800, &faster, at(3800));
        assert_eq!(next.next_poll_interval.as_deref(), Some("20s"));
    }

    #[test]
    fn stuck_warning_fires_once_after_the_threshold() {
        let s = DrainSettings {
            stuck_threshold: Duration::from_secs(3600),
            ..defaults()
        };
        let (start, _) = initiate(10, 0, DrainMode::ServerSide, &s, at(0));
        let (a, notes) = poll(&start, 10, &s, at(1800));
        assert!(notes.is_empty());
        assert!(!a.stuck);
        let (b, notes) = poll(&a, 10, &s, at(3700));
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, STUCK);
        assert_eq!(notes[0].type_, EventType::Warning);
        assert!(b.stuck, "status says stuck for keeper_drains_stuck");
        let (c, notes) = poll(&b, 10, &s, at(4600));
        assert!(notes.is_empty(), "the warning fires once");
        assert!(c.stuck, "still stuck while nothing moves");
        // Progress resets the clock and the flag; a new stall warns again.
        let (d, notes) = poll(&c, 9, &s, at(5000));
        assert_eq!(notes[0].reason, PROGRESS);
        assert!(!d.stuck);
        let (e, notes) = poll(&d, 9, &s, at(8700));
        assert_eq!(notes[0].reason, STUCK);
        assert!(e.stuck);
    }

    #[test]
    fn a_poll_is_due_once_the_interval_passed() {
        let (start, _) = initiate(10, 0, DrainMode::ClientSide, &defaults(), at(0));
        assert!(!poll_due(&start, at(179)));
        assert!(poll_due(&start, at(180)));
    }

    #[test]
    fn the_next_poll_is_due_an_interval_after_the_last_check_not_after_any_reconcile() {
        let (start, _) = initiate(10, 0, DrainMode::ClientSide, &defaults(), at(0));
        assert_eq!(
            until_next_poll(&start, &defaults(), at(0)),
            Duration::from_secs(180)
        );
        assert_eq!(
            until_next_poll(&start, &defaults(), at(170)),
            Duration::from_secs(10)
        );
        assert_eq!(
            until_next_poll(&start, &defaults(), at(400)),
            Duration::from_secs(1),
            "overdue: at once"
        );
        let unrecorded = DrainStatus {
            next_poll_interval: None,
            ..start
        };
        assert_eq!(
            until_next_poll(&unrecorded, &defaults(), at(0)),
            defaults().initial_poll
        );
    }

    #[test]
    fn completion_cancellation_orphan_and_empty_events() {
        let (start, _) = initiate(42, 0, DrainMode::ClientSide, &defaults(), at(0));
        let notes = complete(&start);
        assert_eq!(notes[0].reason, PROGRESS);
        assert!(notes[0].message.contains("Deleted 42 of 42"));
        assert_eq!(
            (notes[1].reason, notes[1].type_),
            (COMPLETE, EventType::Normal)
        );
        assert!(notes[1].message.contains("42"));
        assert!(awaiting_first_progress(&start));
        let (polled, _) = poll(&start, 41, &defaults(), at(10));
        assert!(!awaiting_first_progress(&polled));
        // Progress already reported down to 0: only the completion.
        let (done, _) = poll(&polled, 0, &defaults(), at(20));
        assert_eq!(complete(&done).len(), 1);
        let n = cancel(&start, Some(7));
        assert_eq!((n.reason, n.type_), (CANCELED, EventType::Normal));
        assert!(n.message.contains("7 objects remain"));
        let n = cancel_orphan();
        assert_eq!((n.reason, n.type_), (ORPHANED, EventType::Warning));
        let n = already_empty();
        assert_eq!((n.reason, n.type_), (ALREADY_EMPTY, EventType::Normal));
    }
}

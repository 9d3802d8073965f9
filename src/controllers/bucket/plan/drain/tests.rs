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

#[test]
fn a_retained_bucket_is_let_go_only_once_nothing_deletes_its_objects() {
    // A drain recorded in status is stopped, whatever the backend says.
    for (draining, ours) in [(false, false), (true, true), (true, false), (false, true)] {
        assert_eq!(
            before_letting_go(true, draining, ours),
            LettingGo::StopRecordedDrain
        );
    }
    // F1: the grid deletes objects from a bucket of ours with no drain recorded (the status
    // write that recorded its start failed): stopped before the release.
    assert_eq!(
        before_letting_go(false, true, true),
        LettingGo::StopUnrecordedDrain
    );
    // A drain on a bucket not ours was not started through this resource: left alone.
    assert_eq!(before_letting_go(false, true, false), LettingGo::Release);
    assert_eq!(before_letting_go(false, false, true), LettingGo::Release);
    assert_eq!(before_letting_go(false, false, false), LettingGo::Release);
}

#[test]
fn an_unrecorded_drain_stopped_on_release_is_a_warning_saying_what_stays() {
    let note = stopped_unrecorded_before_letting_go();
    assert_eq!((note.type_, note.reason), (EventType::Warning, ORPHANED));
    assert!(
        note.message.contains("deletionPolicy is Retain"),
        "{}",
        note.message
    );
    assert!(
        note.message.contains("not yet deleted stay"),
        "{}",
        note.message
    );
}

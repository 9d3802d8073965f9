//! Controller logic against an in-memory backend: lifecycle, drain and deletion end to end,
//! without Kubernetes (the state machine returns a `Report`; `write_back` applies it the way the
//! runtime does). `flow` runs whole reconciles through the shared runtime and the fake Kube seam,
//! `keys` the bucket's keys the same way, two reconciles interleaved among them.

mod fake;
mod flow;
mod keys;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

use super::backend::DesiredBucket;
use super::plan::drain;
use super::plan::ready::KeysVerdict;
use super::plan::usage::{IdleCheck, Look};
use super::reconcile::deletion::{cleanup_bucket, retain_bucket};
use super::reconcile::{Cache, Report, View, annotated, apply_bucket, decide_ready};
use super::*;
use crate::api::{BucketPhase, DrainMode};
use crate::backends::s3::OwnerMark;
use crate::config::DrainDefaults;
use crate::runtime::testing::condition;
use crate::runtime::{Next, conditions};
use fake::{Fake, FakeBucket};

/// A live bucket's reconcile without Kubernetes: the storage half, then Ready decided as
/// `reconcile::apply` decides it when the bucket's keys work.
async fn applied<B: backend::BucketBackend>(backend: &B, view: &View<'_>) -> Result<Report, Error> {
    let mut report = apply_bucket(backend, view).await?;
    decide_ready(
        &mut report.outcome,
        view,
        report.usable,
        Some(&KeysVerdict::Work),
    );
    Ok(report)
}

/// The requeue an outcome asks for (a release or an await fails the test).
trait Requeue {
    fn next_requeue(&self) -> Duration;
}

impl Requeue for Report {
    fn next_requeue(&self) -> Duration {
        match self.next {
            Next::Requeue(after) => after,
            other => panic!("no requeue: {other:?}"),
        }
    }
}

const UID: &str = "uid-1";
/// The backend name of [`s3bucket`]: `default_bucket_name("ns", "b")`.
const NAME: &str = "ns-b-887dba89";

fn s3bucket() -> S3Bucket {
    let mut b = crate::test_support::bucket_with(
        "b",
        serde_json::json!({"tenantRef": {"name": "t"}, "versioning": true}),
    );
    b.metadata.uid = Some(UID.into());
    b.metadata.generation = Some(1);
    b
}

fn annotate(b: &mut S3Bucket, key: &str) {
    annotate_with(b, key, "true");
}

fn annotate_with(b: &mut S3Bucket, key: &str, value: &str) {
    b.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
}

fn annotation<'a>(b: &'a S3Bucket, key: &str) -> Option<&'a str> {
    b.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn unannotate(b: &mut S3Bucket, keys: &[&str]) {
    if let Some(a) = b.metadata.annotations.as_mut() {
        for k in keys {
            a.remove(*k);
        }
    }
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn view<'a>(obj: &'a S3Bucket, now: Timestamp, cached: Option<Observed>) -> View<'a> {
    View {
        obj,
        desired: DesiredBucket {
            name: NAME.into(),
            region: "us-east-1".into(),
            versioning: obj.spec.versioning,
            object_lock: obj.spec.object_lock,
            owner: OwnerMark::new("ns", "b", UID),
            recorded: false,
            intent: false,
            adopt: annotated(obj, ADOPT_ANNOTATION),
        },
        only_key: None,
        adoption_refused: None,
        drain: drain::settings(obj.spec.drain.as_ref(), &DrainDefaults::default()).unwrap(),
        now,
        cached,
        // As with usageRefresh on: a bucket with no recent observation observes.
        idle: IdleCheck {
            look: if cached.is_some() {
                Look::Nothing
            } else {
                Look::Usage
            },
            next: RECHECK,
            shows_usage: true,
        },
    }
}

/// Applies an outcome the way the reconciler does (status and annotations) and returns the
/// event reasons.
/// Writes `out` back into `obj` as the shared flow would, with what the reconciler adds to every
/// status (the record of requests by value).
fn write_back(obj: &mut S3Bucket, out: &Report) -> Vec<&'static str> {
    let mut status = out.status.clone();
    super::reconcile::record_requests_by_value(obj, &mut status);
    obj.status = Some(status);
    unannotate(obj, &out.remove_annotations);
    for (key, value) in &out.set_annotations {
        annotate_with(obj, key, value);
    }
    out.notes.iter().map(|n| n.reason).collect()
}

fn cache_of(out: &Report, before: Option<Observed>) -> Option<Observed> {
    match out.observed {
        Cache::Keep => before,
        Cache::Store(o) => Some(o),
        Cache::Forget => None,
    }
}

#[tokio::test]
async fn creates_the_bucket_then_makes_no_backend_call_until_usage_is_due() {
    let fake = Fake::new(DrainMode::ClientSide);
    let mut obj = s3bucket();
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Ready));
    assert_eq!(out.status.bucket_name.as_deref(), Some(NAME));
    assert_eq!(out.status.object_count, Some(0));
    assert!(conditions::is_true(
        &out.status.conditions,
        conditions::READY
    ));
    assert_eq!(out.next_requeue(), RECHECK);
    // A bucket this reconcile created is empty: it is not looked at again.
    assert_eq!(fake.take_calls(), ["ensure"]);
    let bucket = fake.bucket(NAME).unwrap();
    assert_eq!(bucket.owner.as_deref(), Some(UID));
    assert!(bucket.versioning);
    let cached = cache_of(&out, None);
    write_back(&mut obj, &out);
    // Steady state: the same status again and no backend call while the usage is fresh.
    let again = applied(&fake, &view(&obj, at(10), cached)).await.unwrap();
    assert_eq!(again.status, obj.status.clone().unwrap());
    assert!(again.notes.is_empty());
    assert!(fake.take_calls().is_empty());
    // Once the cache expires, only the usage refresh.
    applied(&fake, &view(&obj, at(400), None)).await.unwrap();
    assert_eq!(fake.take_calls(), ["refresh usage"]);
}

/// `view` for a provider whose usage refresh is off, deciding `look`.
fn view_without_usage<'a>(obj: &'a S3Bucket, look: Look) -> View<'a> {
    View {
        idle: IdleCheck {
            look,
            next: crate::config::DEFAULT_BUCKET_CHECK_INTERVAL,
            shows_usage: false,
        },
        ..view(obj, at(0), None)
    }
}

#[tokio::test]
async fn with_usage_off_an_idle_bucket_costs_one_existence_look_and_shows_no_usage() {
    let fake = Fake::new(DrainMode::ClientSide).with(NAME, ours_with(7));
    let mut obj = ready_bucket();
    let mut status = obj.status.clone().unwrap();
    status.object_count = Some(3);
    status.object_bytes = Some(30);
    obj.status = Some(status);
    let out = applied(&fake, &view_without_usage(&obj, Look::Existence))
        .await
        .unwrap();
    assert_eq!(fake.take_calls(), ["existence"]);
    assert!(out.seen);
    assert_eq!(out.status.phase, Some(BucketPhase::Ready));
    // No figures rather than stale ones.
    assert_eq!(
        (out.status.object_count, out.status.object_bytes),
        (None, None)
    );
    let ready = condition(&out.status.conditions, conditions::READY);
    assert!(
        ready.message.contains("usage is not refreshed"),
        "{}",
        ready.message
    );
    assert_eq!(
        out.next_requeue(),
        crate::config::DEFAULT_BUCKET_CHECK_INTERVAL
    );
    // Between looks: no call at all.
    write_back(&mut obj, &out);
    let between = applied(&fake, &view_without_usage(&obj, Look::Nothing))
        .await
        .unwrap();
    assert!(fake.take_calls().is_empty());
    assert!(!between.seen);
    assert_eq!(between.status, obj.status.clone().unwrap());
}

#[tokio::test]
async fn an_existence_look_notices_a_missing_bucket_and_a_drain_keeper_did_not_start() {
    let fake = Fake::new(DrainMode::ServerSide).with(
        NAME,
        FakeBucket {
            draining: true,
            ..ours_with(7)
        },
    );
    let obj = ready_bucket();
    let out = applied(&fake, &view_without_usage(&obj, Look::Existence))
        .await
        .unwrap();
    assert_eq!(fake.take_calls(), ["existence", "stop_drain"]);
    assert_eq!(out.notes[0].reason, drain::cancel_orphan().reason);
    fake.buckets.lock().unwrap().remove(NAME);
    let out = applied(&fake, &view_without_usage(&obj, Look::Existence))
        .await
        .unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Pending));
    assert_eq!(
        condition(&out.status.conditions, conditions::READY).reason,
        "BucketMissing"
    );
}

#[tokio::test]
async fn a_foreign_bucket_is_refused_unless_adoption_is_asked() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: None,
            objects: 3,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Failed));
    assert_eq!(out.status.bucket_name, None, "no ownership record");
    let ready = &condition(&out.status.conditions, "Ready");
    assert_eq!(ready.reason, "BucketNotOwned");
    assert!(ready.message.contains("keeper.dev/adopt=true"));
    assert_eq!(write_back(&mut obj, &out), ["BucketNotOwned"]);
    // No event storm on the next reconcile.
    let out = applied(&fake, &view(&obj, at(60), None)).await.unwrap();
    assert!(out.notes.is_empty());
    // Adoption asked where the provider's setting does not allow it: refused, saying which
    // setting would, and the bucket left as it is.
    annotate(&mut obj, ADOPT_ANNOTATION);
    let refused = View {
        adoption_refused: Some("adoption is not allowed from namespace \"ns\"".into()),
        desired: DesiredBucket {
            adopt: false,
            ..view(&obj, at(90), None).desired
        },
        ..view(&obj, at(90), None)
    };
    let out = applied(&fake, &refused).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Failed));
    let ready = &condition(&out.status.conditions, "Ready");
    assert_eq!(ready.reason, "AdoptionNotAllowed");
    assert!(
        ready.message.contains("adoption is not allowed"),
        "{}",
        ready.message
    );
    assert_eq!(out.notes.len(), 1, "a Warning event says so");
    assert_eq!(fake.bucket(NAME).unwrap().owner, None, "not marked");
    // Adoption allowed.
    let out = applied(&fake, &view(&obj, at(120), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Ready));
    assert_eq!(out.status.object_count, Some(3));
    assert_eq!(fake.bucket(NAME).unwrap().owner.as_deref(), Some(UID));
}

#[tokio::test]
async fn deleting_a_foreign_bucket_releases_without_touching_it() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some("someone".into()),
            objects: 3,
            ..Default::default()
        },
    );
    let obj = s3bucket();
    let out = cleanup_bucket(&fake, &view(&obj, at(0), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    assert_eq!(out.notes[0].reason, "BucketRetained");
    assert_eq!(fake.take_calls(), ["owner"]);
    assert_eq!(fake.bucket(NAME).unwrap().objects, 3);
}

#[tokio::test]
async fn deletion_with_objects_blocks_once_then_drains_and_deletes_on_request() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 2500,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    obj.metadata.deletion_timestamp = Some(Time(at(0)));
    let out = cleanup_bucket(&fake, &view(&obj, at(0), None))
        .await
        .unwrap();
    assert_ne!(out.next, Next::Release);
    assert_eq!(
        fake.take_calls(),
        ["owner", "delete", "observe"],
        "no drain asked: the delete is tried first, and its refusal is followed by a count"
    );
    assert_eq!(out.status.phase, Some(BucketPhase::Deleting));
    let blocked = out
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DELETION_BLOCKED)
        .unwrap();
    assert_eq!(
        (blocked.status.as_str(), blocked.reason.as_str()),
        ("True", "BucketNotEmpty")
    );
    assert!(blocked.message.contains("2500 objects"));
    assert!(
        blocked
            .message
            .contains("kubectl annotate --overwrite s3bucket b keeper.dev/drain=$(date +%s)"),
        "{}",
        blocked.message
    );
    assert_eq!(write_back(&mut obj, &out), ["DeletionBlocked"]);
    // Someone adds objects meanwhile: the message follows the count, the warning is not repeated.
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().objects = 2600;
    let out = cleanup_bucket(&fake, &view(&obj, at(30), None))
        .await
        .unwrap();
    assert!(out.notes.is_empty(), "one warning, no storm");
    assert!(
        out.status
            .conditions
            .iter()
            .any(|c| c.message.contains("2600 objects"))
    );
    write_back(&mut obj, &out);
    assert_eq!(
        fake.bucket(NAME).unwrap().objects,
        2600,
        "nothing deleted without a drain"
    );

    annotate(&mut obj, DRAIN_ANNOTATION);
    let mut reasons = Vec::new();
    let mut deleted = 0;
    let mut now = 60;
    loop {
        let out = cleanup_bucket(&fake, &view(&obj, at(now), None))
            .await
            .unwrap();
        deleted += out.deleted;
        reasons.extend(write_back(&mut obj, &out));
        if out.next == Next::Release {
            break;
        }
        assert_eq!(out.status.phase, Some(BucketPhase::Draining));
        assert!(
            !conditions::is_true(&out.status.conditions, conditions::DELETION_BLOCKED),
            "a requested drain unblocks the deletion"
        );
        now += 200;
        assert!(now < 10_000, "the drain never finished: {reasons:?}");
    }
    assert_eq!(deleted, 2600);
    assert_eq!(reasons.first(), Some(&drain::STARTED));
    assert!(reasons.contains(&drain::PROGRESS));
    assert!(reasons.contains(&drain::COMPLETE));
    assert!(fake.bucket(NAME).is_none(), "bucket deleted");
    assert!(
        fake.take_calls()
            .contains(&"delete_credentials".to_string())
    );
}

#[tokio::test]
async fn deleting_an_empty_bucket_deletes_it_and_a_missing_one_is_done() {
    let fake = Fake::new(DrainMode::ServerSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            ..Default::default()
        },
    );
    let obj = s3bucket();
    let out = cleanup_bucket(&fake, &view(&obj, at(0), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    assert!(fake.bucket(NAME).is_none());
    let out = cleanup_bucket(&fake, &view(&obj, at(1), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    assert_eq!(
        fake.take_calls(),
        [
            // No drain asked: the delete right after the ownership check is the look.
            "owner",
            "delete",
            "delete_credentials",
            "owner",
            "delete_credentials"
        ]
    );
}

#[tokio::test]
async fn server_side_drain_polls_at_the_interval_and_completes() {
    let mut fake = Fake::new(DrainMode::ServerSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 900,
            ..Default::default()
        },
    );
    fake.server_rate = 300;
    let mut obj = s3bucket();
    obj.status = Some(S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        phase: Some(BucketPhase::Ready),
        bucket_name: Some(NAME.into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    annotate(&mut obj, DRAIN_ANNOTATION);
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(write_back(&mut obj, &out), [drain::STARTED]);
    assert_eq!(out.status.phase, Some(BucketPhase::Draining));
    // The first poll comes within seconds (then backs off to the 3-minute interval).
    assert_eq!(out.next_requeue(), Duration::from_secs(2));
    let ds = out.status.drain_status.clone().unwrap();
    assert_eq!(ds.initial_object_count, 900);
    assert_eq!(ds.mode, Some(DrainMode::ServerSide));
    assert!(fake.bucket(NAME).unwrap().draining);
    fake.take_calls();
    // An unrelated event before the poll is due: no backend call, no change, wake at the due time.
    let cached = cache_of(&out, None);
    let early = applied(&fake, &view(&obj, at(1), cached)).await.unwrap();
    assert_eq!(early.status, obj.status.clone().unwrap());
    assert_eq!(early.next_requeue(), Duration::from_secs(1));
    assert!(fake.take_calls().is_empty());
    let out = applied(&fake, &view(&obj, at(2), cached)).await.unwrap();
    assert_eq!(write_back(&mut obj, &out), [drain::PROGRESS]);
    assert_eq!(out.status.object_count, Some(600));
    assert_eq!(
        out.deleted, 300,
        "server-side progress counts as deleted objects"
    );
    let out = applied(&fake, &view(&obj, at(4), None)).await.unwrap();
    write_back(&mut obj, &out);
    let out = applied(&fake, &view(&obj, at(6), None)).await.unwrap();
    // The last deletions show as progress, then the completion.
    assert_eq!(
        write_back(&mut obj, &out),
        [drain::PROGRESS, drain::COMPLETE]
    );
    assert_eq!(out.deleted, 300);
    assert_eq!(out.status.phase, Some(BucketPhase::Ready));
    assert_eq!(out.status.drain_status, None);
    assert_eq!(out.status.object_count, Some(0));
    // The request stays; the value is recorded as handled in status and in keeper's annotation.
    assert!(out.remove_annotations.is_empty());
    assert_eq!(
        out.status
            .handled_requests
            .as_ref()
            .unwrap()
            .drain
            .as_deref(),
        Some("true")
    );
    assert_eq!(
        out.set_annotations,
        [(DRAIN_HANDLED_ANNOTATION, "true".to_string())]
    );
    assert_eq!(annotation(&obj, DRAIN_ANNOTATION), Some("true"));
    // Completion returns the bucket to write mode.
    assert!(!fake.bucket(NAME).unwrap().draining);
    // The annotation that stays is a handled request: no new drain, and no orphan either.
    let cached = cache_of(&out, None);
    fake.take_calls();
    let after = applied(&fake, &view(&obj, at(541), cached)).await.unwrap();
    assert!(after.notes.is_empty(), "{:?}", after.notes);
    assert_eq!(
        after.status,
        obj.status.clone().unwrap(),
        "nothing to write"
    );
    assert!(!fake.take_calls().iter().any(|c| c.contains("drain")));
}

#[tokio::test]
async fn removing_the_annotation_cancels_and_keeps_remaining_objects() {
    let mut fake = Fake::new(DrainMode::ServerSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 900,
            ..Default::default()
        },
    );
    fake.server_rate = 100;
    let mut obj = s3bucket();
    obj.status = Some(S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        phase: Some(BucketPhase::Ready),
        bucket_name: Some(NAME.into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    annotate(&mut obj, DRAIN_ANNOTATION);
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    write_back(&mut obj, &out);
    let cached = cache_of(&out, None);
    unannotate(&mut obj, &[DRAIN_ANNOTATION]);
    // The cancellation looks at the bucket again instead of trusting the count from the start.
    let out = applied(&fake, &view(&obj, at(30), cached)).await.unwrap();
    assert_eq!(write_back(&mut obj, &out), [drain::CANCELED]);
    assert!(
        out.notes[0].message.contains("800 objects remain"),
        "{:?}",
        out.notes
    );
    assert_eq!(out.status.object_count, Some(800));
    assert_eq!(out.status.phase, Some(BucketPhase::Ready));
    assert_eq!(out.status.drain_status, None);
    let left = fake.bucket(NAME).unwrap();
    assert!(!left.draining);
    assert!(left.objects > 0);
}

#[tokio::test]
async fn an_orphaned_backend_drain_is_stopped_and_an_empty_bucket_needs_no_drain() {
    let fake = Fake::new(DrainMode::ServerSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 5,
            draining: true,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    obj.status = Some(S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        phase: Some(BucketPhase::Ready),
        bucket_name: Some(NAME.into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(out.notes[0].reason, drain::ORPHANED);
    assert_eq!(out.notes[0].type_, EventType::Warning);
    assert!(!fake.bucket(NAME).unwrap().draining);

    let empty = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            ..Default::default()
        },
    );
    annotate(&mut obj, DRAIN_ANNOTATION);
    let out = applied(&empty, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(write_back(&mut obj, &out), [drain::ALREADY_EMPTY]);
    assert!(out.remove_annotations.is_empty());
    assert_eq!(annotation(&obj, DRAIN_HANDLED_ANNOTATION), Some("true"));
    assert_eq!(out.status.drain_status, None);
    // Handled: the same value again says nothing more.
    let again = applied(&empty, &view(&obj, at(1), None)).await.unwrap();
    assert!(again.notes.is_empty(), "{:?}", again.notes);
}

#[tokio::test]
async fn a_legal_hold_stops_a_client_side_drain_with_a_condition() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 5,
            held: true,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    obj.status = Some(S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        phase: Some(BucketPhase::Ready),
        bucket_name: Some(NAME.into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    annotate(&mut obj, DRAIN_ANNOTATION);
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    write_back(&mut obj, &out);
    let out = applied(&fake, &view(&obj, at(1), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Failed));
    let ready = &condition(&out.status.conditions, "Ready");
    assert_eq!(ready.reason, "DrainBlocked");
    assert!(ready.message.contains("legal hold"));
    assert_eq!(write_back(&mut obj, &out), ["DrainBlocked"]);
    assert_eq!(
        out.next_requeue(),
        Duration::from_secs(180),
        "retried at the poll interval"
    );
    // The drain is still ours: lifting the hold resumes it.
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().held = false;
    let out = applied(&fake, &view(&obj, at(200), None)).await.unwrap();
    assert_eq!(out.deleted, 5);
}

#[tokio::test]
async fn a_vanished_bucket_goes_back_to_pending_and_is_recreated() {
    let fake = Fake::new(DrainMode::ClientSide);
    let mut obj = ready_bucket();
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Pending));
    assert_eq!(out.next_requeue(), SHORT_RETRY);
    write_back(&mut obj, &out);
    let out = applied(&fake, &view(&obj, at(10), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Ready));
    assert!(fake.bucket(NAME).is_some());
}

/// The view of `obj` with `status.bucketName` counting as keeper's record, as the reconciler has it.
fn recorded(obj: &S3Bucket, at_s: i64) -> View<'_> {
    let mut v = view(obj, at(at_s), None);
    v.desired.recorded = obj.status.as_ref().and_then(|s| s.bucket_name.as_deref()) == Some(NAME);
    v
}

/// N5: a recorded bucket missing on another store (a changed endpoint, a DNS switch) is not
/// created there until a person confirms that store; the store is recorded with the bucket.
#[tokio::test]
async fn a_vanished_bucket_is_recreated_only_on_its_own_store_or_a_confirmed_one() {
    let fake = Fake::new(DrainMode::ClientSide);
    *fake.identity.lock().unwrap() = Some("s3:a".into());
    let mut obj = s3bucket();
    // Created: the store is recorded with it.
    let out = applied(&fake, &recorded(&obj, 0)).await.unwrap();
    assert_eq!(out.status.backend_identity.as_deref(), Some("s3:a"));
    write_back(&mut obj, &out);
    assert!(fake.bucket(NAME).is_some());

    // keeper now reaches another store, where the bucket does not exist.
    fake.buckets.lock().unwrap().clear();
    *fake.identity.lock().unwrap() = Some("s3:b".into());
    fake.take_calls();
    let out = applied(&fake, &recorded(&obj, 10)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Pending));
    write_back(&mut obj, &out);
    let err = applied(&fake, &recorded(&obj, 20)).await.unwrap_err();
    let Failure::Own(BucketFailure::Invalid { reason, message }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*reason, "BackendIdentityChanged");
    assert!(
        message.contains("s3:a") && message.contains("s3:b"),
        "{message}"
    );
    assert!(fake.bucket(NAME).is_none(), "nothing created");
    assert!(!fake.take_calls().contains(&"ensure".to_string()));

    // Confirmed: created there, and that store is recorded from then on.
    obj.metadata.annotations = Some(
        [(
            "keeper.dev/confirm-backend-identity".to_string(),
            "s3:b".to_string(),
        )]
        .into(),
    );
    let out = applied(&fake, &recorded(&obj, 30)).await.unwrap();
    assert!(fake.bucket(NAME).is_some());
    assert_eq!(out.status.backend_identity.as_deref(), Some("s3:b"));
}

/// A bucket an older keeper made has no recorded store: the one it is seen on is recorded, and
/// never while it is missing.
#[tokio::test]
async fn the_store_of_a_bucket_seen_without_one_is_recorded() {
    let fake = Fake::new(DrainMode::ClientSide).with(NAME, FakeBucket::default());
    *fake.identity.lock().unwrap() = Some("s3:a".into());
    let obj = ready_bucket();
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(out.status.backend_identity.as_deref(), Some("s3:a"));
    fake.buckets.lock().unwrap().clear();
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(
        out.status.backend_identity, None,
        "not recorded while missing"
    );
}

/// N5, deletion: a bucket missing on another store is not "already deleted": releasing would
/// leave the original behind, untracked, with its IAM user.
#[tokio::test]
async fn a_bucket_missing_on_another_store_is_not_counted_as_deleted() {
    let fake = Fake::new(DrainMode::ClientSide);
    *fake.identity.lock().unwrap() = Some("s3:b".into());
    let mut obj = ready_bucket();
    obj.status.as_mut().unwrap().backend_identity = Some("s3:a".into());
    let err = cleanup_bucket(&fake, &view(&obj, at(0), None))
        .await
        .unwrap_err();
    let Failure::Own(BucketFailure::Invalid { reason, message }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*reason, "BackendIdentityChanged");
    assert!(message.contains("keeps the finalizer"), "{message}");
    assert!(
        !fake
            .take_calls()
            .contains(&"delete_credentials".to_string()),
        "nothing deleted on the other store"
    );
    // Confirmed (the original store is gone for good), or on its own store: done.
    annotate_with(&mut obj, "keeper.dev/confirm-backend-identity", "s3:b");
    let out = cleanup_bucket(&fake, &view(&obj, at(1), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    unannotate(&mut obj, &["keeper.dev/confirm-backend-identity"]);
    *fake.identity.lock().unwrap() = Some("s3:a".into());
    let out = cleanup_bucket(&fake, &view(&obj, at(2), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
}

#[tokio::test]
async fn permanent_backend_errors_surface_to_the_caller() {
    let fake = Fake::new(DrainMode::ClientSide);
    *fake.fail_permanently.lock().unwrap() = Some("InvalidAccessKeyId".into());
    let err = applied(&fake, &view(&s3bucket(), at(0), None))
        .await
        .unwrap_err();
    let Error::Backend(err) = err else {
        panic!("{err:?}")
    };
    assert!(err.is_permanent());
    assert_eq!(err.message, "InvalidAccessKeyId");
}

#[tokio::test]
async fn a_bucket_that_vanishes_during_a_deletion_drain_releases_the_resource() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 5000,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    obj.metadata.deletion_timestamp = Some(Time(at(0)));
    annotate(&mut obj, DRAIN_ANNOTATION);
    let out = cleanup_bucket(&fake, &view(&obj, at(0), None))
        .await
        .unwrap();
    write_back(&mut obj, &out);
    assert_eq!(out.status.phase, Some(BucketPhase::Draining));
    // Someone deletes the bucket by hand between the owner check and the usage refresh.
    fake.vanish_after_owner
        .lock()
        .unwrap()
        .replace(NAME.to_string());
    let out = cleanup_bucket(&fake, &view(&obj, at(200), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release, "{out:?}");
    assert!(
        fake.take_calls()
            .ends_with(&["delete_credentials".to_string()])
    );
}

#[tokio::test]
async fn a_blocked_drain_keeps_the_deletion_blocked_with_the_reason() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 5,
            held: true,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    obj.metadata.deletion_timestamp = Some(Time(at(0)));
    annotate(&mut obj, DRAIN_ANNOTATION);
    let out = cleanup_bucket(&fake, &view(&obj, at(0), None))
        .await
        .unwrap();
    write_back(&mut obj, &out);
    let out = cleanup_bucket(&fake, &view(&obj, at(1), None))
        .await
        .unwrap();
    assert_ne!(out.next, Next::Release);
    let blocked = out
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DELETION_BLOCKED)
        .unwrap();
    assert_eq!(blocked.reason, "DrainBlocked");
    assert!(blocked.message.contains("legal hold"));
    assert_eq!(fake.bucket(NAME).unwrap().objects, 5);
}

#[tokio::test]
async fn client_side_drains_count_their_deletes_instead_of_listing_at_polls() {
    let mut fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            objects: 10_000,
            ..Default::default()
        },
    );
    fake.round_size = 1000;
    let mut obj = s3bucket();
    obj.status = Some(S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        phase: Some(BucketPhase::Ready),
        bucket_name: Some(NAME.into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    annotate(&mut obj, DRAIN_ANNOTATION);
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    let mut cached = cache_of(&out, None);
    write_back(&mut obj, &out);
    // The count that starts the drain says so: the backend keeps what it listed for the rounds.
    assert_eq!(
        fake.take_calls(),
        ["observe to start a drain", "owner", "start_drain"]
    );
    // The first round reports its deletions at once (estimated, without listing).
    let out = applied(&fake, &view(&obj, at(1), cached)).await.unwrap();
    assert_eq!(write_back(&mut obj, &out), [drain::PROGRESS]);
    assert_eq!(out.status.object_count, Some(9000));
    cached = cache_of(&out, cached);
    for second in 2..=5 {
        let out = applied(&fake, &view(&obj, at(second), cached))
            .await
            .unwrap();
        assert_eq!(out.next_requeue(), CLIENT_DRAIN_CONTINUE);
        assert!(out.notes.is_empty());
        assert_eq!(
            out.status,
            obj.status.clone().unwrap(),
            "no status write between polls"
        );
        cached = cache_of(&out, cached);
    }
    assert_eq!(fake.take_calls(), vec!["drain_round".to_string(); 5]);
    assert_eq!(obj.status.as_ref().unwrap().object_count, Some(9000));
    assert_eq!(fake.bucket(NAME).unwrap().objects, 5000);
    // At the poll: no listing (keeper counted its deletes), progress in status and an event.
    let out = applied(&fake, &view(&obj, at(181), cached)).await.unwrap();
    assert_eq!(fake.take_calls(), ["drain_round"]);
    assert_eq!(write_back(&mut obj, &out), [drain::PROGRESS]);
    assert_eq!(out.status.object_count, Some(4000));
    cached = cache_of(&out, cached);
    // Someone writes 2,500 objects meanwhile: the count keeper keeps runs down to one, and the
    // next poll lists the bucket again instead of trusting it.
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().objects += 2500;
    let mut second = 182;
    while cached.is_some_and(|c| c.objects > 1) {
        let out = applied(&fake, &view(&obj, at(second), cached))
            .await
            .unwrap();
        write_back(&mut obj, &out);
        cached = cache_of(&out, cached);
        second += 1;
    }
    assert_eq!(fake.bucket(NAME).unwrap().objects, 2500);
    fake.take_calls();
    let out = applied(&fake, &view(&obj, at(second + 600), cached))
        .await
        .unwrap();
    assert_eq!(fake.take_calls(), ["observe", "drain_round"]);
    write_back(&mut obj, &out);
    // 2,500 listed, then 1,000 deleted by the round.
    assert_eq!(out.status.object_count, Some(1500));
}

#[tokio::test]
async fn a_refused_delete_of_a_seemingly_empty_bucket_is_shown_and_retried() {
    let fake = Fake::new(DrainMode::ServerSide).with(
        NAME,
        FakeBucket {
            owner: Some(UID.into()),
            uncounted: true,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    obj.metadata.deletion_timestamp = Some(Time(at(0)));
    let out = cleanup_bucket(&fake, &view(&obj, at(0), None))
        .await
        .unwrap();
    assert_ne!(out.next, Next::Release);
    assert_eq!(out.next_requeue(), SHORT_RETRY);
    assert_eq!(write_back(&mut obj, &out), ["DeletionBlocked"]);
    assert!(conditions::is_true(
        &out.status.conditions,
        conditions::DELETION_BLOCKED
    ));
    let out = cleanup_bucket(&fake, &view(&obj, at(10), None))
        .await
        .unwrap();
    assert!(out.notes.is_empty(), "no event storm while retrying");
    fake.buckets
        .lock()
        .unwrap()
        .get_mut(NAME)
        .unwrap()
        .uncounted = false;
    let out = cleanup_bucket(&fake, &view(&obj, at(20), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
}

/// A Ready bucket of ours, as recorded in status.
fn ready_bucket() -> S3Bucket {
    let mut obj = s3bucket();
    obj.status = Some(S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        phase: Some(BucketPhase::Ready),
        bucket_name: Some(NAME.into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    obj
}

/// Reconciles until the drain machine is idle again; returns the event reasons.
async fn drain_to_the_end(fake: &Fake, obj: &mut S3Bucket, mut now: i64) -> Vec<&'static str> {
    let mut reasons = Vec::new();
    let deadline = now + 100_000;
    loop {
        let out = applied(fake, &view(obj, at(now), None)).await.unwrap();
        reasons.extend(write_back(obj, &out));
        if out.status.phase == Some(BucketPhase::Ready) {
            return reasons;
        }
        now += 200;
        assert!(
            now < deadline,
            "the drain never finished: {reasons:?} {:?} {:?}",
            out.status,
            fake.take_calls()
        );
    }
}

#[tokio::test]
async fn the_same_drain_value_again_is_a_no_op_and_a_new_value_drains_again() {
    let fake = Fake::new(DrainMode::ClientSide).with(NAME, {
        FakeBucket {
            owner: Some(UID.into()),
            objects: 1500,
            ..Default::default()
        }
    });
    let mut obj = ready_bucket();
    annotate_with(&mut obj, DRAIN_ANNOTATION, "1700000000");
    let reasons = drain_to_the_end(&fake, &mut obj, 0).await;
    assert!(reasons.contains(&drain::COMPLETE), "{reasons:?}");
    assert_eq!(fake.bucket(NAME).unwrap().objects, 0);
    assert_eq!(annotation(&obj, DRAIN_ANNOTATION), Some("1700000000"));
    assert_eq!(
        annotation(&obj, DRAIN_HANDLED_ANNOTATION),
        Some("1700000000")
    );
    // New objects, the same request (a GitOps tool re-applying its manifest): they stay.
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().objects = 40;
    fake.take_calls();
    for now in [100_000, 100_400] {
        let out = applied(&fake, &view(&obj, at(now), None)).await.unwrap();
        assert!(out.notes.is_empty(), "{:?}", out.notes);
        assert_eq!(out.status.phase, Some(BucketPhase::Ready));
        write_back(&mut obj, &out);
    }
    assert_eq!(
        fake.take_calls(),
        ["refresh usage", "refresh usage"],
        "no drain call"
    );
    assert_eq!(fake.bucket(NAME).unwrap().objects, 40);
    // `true` is a value like any other: a new request the first time.
    annotate_with(&mut obj, DRAIN_ANNOTATION, "true");
    let reasons = drain_to_the_end(&fake, &mut obj, 101_000).await;
    assert_eq!(reasons.first(), Some(&drain::STARTED));
    assert_eq!(fake.bucket(NAME).unwrap().objects, 0);
    assert_eq!(
        obj.status
            .as_ref()
            .unwrap()
            .handled_requests
            .as_ref()
            .unwrap()
            .drain
            .as_deref(),
        Some("true")
    );
}

#[tokio::test]
async fn a_handled_value_survives_a_restore_without_status_and_a_lost_annotation_write() {
    let fake = Fake::new(DrainMode::ClientSide).with(NAME, {
        FakeBucket {
            owner: Some(UID.into()),
            objects: 30,
            ..Default::default()
        }
    });
    // Restored from a backup without status: only keeper's annotation remembers the request.
    let mut obj = ready_bucket();
    annotate_with(&mut obj, DRAIN_ANNOTATION, "a");
    annotate_with(&mut obj, DRAIN_HANDLED_ANNOTATION, "a");
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert!(out.notes.is_empty(), "{:?}", out.notes);
    assert_eq!(fake.bucket(NAME).unwrap().objects, 30, "nothing drained");
    assert_eq!(
        out.status
            .handled_requests
            .as_ref()
            .unwrap()
            .drain
            .as_deref(),
        Some("a"),
        "status learns the handled value back"
    );
    // The annotation's write was lost: status alone is enough, and the annotation is repaired.
    let mut obj = ready_bucket();
    annotate_with(&mut obj, DRAIN_ANNOTATION, "a");
    obj.status.as_mut().unwrap().handled_requests = Some(crate::api::HandledRequests {
        drain: Some("a".into()),
        rotate_credentials: None,
    });
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert!(
        !out.notes
            .iter()
            .any(|n| n.reason.starts_with("BucketDrain")),
        "{:?}",
        out.notes
    );
    assert_eq!(
        out.status.handled_requests,
        obj.status.as_ref().unwrap().handled_requests
    );
    assert_eq!(
        out.set_annotations,
        [(DRAIN_HANDLED_ANNOTATION, "a".to_string())]
    );
    assert_eq!(fake.bucket(NAME).unwrap().objects, 30);
}

#[tokio::test]
async fn a_canceled_drain_records_its_value_so_putting_it_back_does_not_drain() {
    let mut fake = Fake::new(DrainMode::ServerSide).with(NAME, {
        FakeBucket {
            owner: Some(UID.into()),
            objects: 900,
            ..Default::default()
        }
    });
    fake.server_rate = 100;
    let mut obj = ready_bucket();
    annotate_with(&mut obj, DRAIN_ANNOTATION, "v1");
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    write_back(&mut obj, &out);
    assert_eq!(
        obj.status
            .as_ref()
            .unwrap()
            .drain_status
            .as_ref()
            .unwrap()
            .request
            .as_deref(),
        Some("v1"),
        "the drain records the request it serves"
    );
    unannotate(&mut obj, &[DRAIN_ANNOTATION]);
    let out = applied(&fake, &view(&obj, at(30), None)).await.unwrap();
    assert_eq!(write_back(&mut obj, &out), [drain::CANCELED]);
    assert!(!fake.bucket(NAME).unwrap().draining);
    assert_eq!(annotation(&obj, DRAIN_HANDLED_ANNOTATION), Some("v1"));
    annotate_with(&mut obj, DRAIN_ANNOTATION, "v1");
    let out = applied(&fake, &view(&obj, at(60), None)).await.unwrap();
    assert!(out.notes.is_empty(), "{:?}", out.notes);
    assert!(!fake.bucket(NAME).unwrap().draining);
}

/// A bucket of ours with a server-side drain running, as recorded in status.
async fn server_side_drain_running() -> (Fake, S3Bucket) {
    let fake = Fake::new(DrainMode::ServerSide).with(NAME, {
        FakeBucket {
            owner: Some(UID.into()),
            objects: 900,
            ..Default::default()
        }
    });
    let mut obj = ready_bucket();
    annotate_with(&mut obj, DRAIN_ANNOTATION, "now");
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    write_back(&mut obj, &out);
    assert!(fake.bucket(NAME).unwrap().draining);
    fake.take_calls();
    (fake, obj)
}

#[tokio::test]
async fn a_retained_bucket_deleted_during_a_server_side_drain_stops_the_drain_first() {
    let (fake, mut obj) = server_side_drain_running().await;
    obj.spec.deletion_policy = crate::api::DeletionPolicy::Retain;
    obj.metadata.deletion_timestamp = Some(Time(at(10)));
    let out = retain_bucket(&fake, &view(&obj, at(10), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    assert_eq!(fake.take_calls(), ["stop_drain"]);
    let bucket = fake.bucket(NAME).unwrap();
    assert!(!bucket.draining, "the grid stops deleting");
    assert_eq!(bucket.objects, 900, "the retained bucket keeps its objects");
    let reasons: Vec<_> = out.notes.iter().map(|n| n.reason).collect();
    assert_eq!(reasons, [drain::CANCELED, "BucketRetained"]);
    assert!(
        out.notes[0].message.contains("deletionPolicy is Retain")
            && out.notes[0].message.contains("told the backend to stop"),
        "{:?}",
        out.notes[0]
    );
    assert_eq!(out.status.drain_status, None);
}

#[tokio::test]
async fn a_bucket_found_not_ours_during_a_drain_stops_the_drain_before_it_is_let_go() {
    // Deletion: released without deleting the bucket, the drain stopped first.
    let (fake, mut obj) = server_side_drain_running().await;
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().owner = Some("someone".into());
    obj.metadata.deletion_timestamp = Some(Time(at(10)));
    let out = cleanup_bucket(&fake, &view(&obj, at(10), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    assert_eq!(fake.take_calls(), ["owner", "stop_drain"]);
    assert!(!fake.bucket(NAME).unwrap().draining);
    let reasons: Vec<_> = out.notes.iter().map(|n| n.reason).collect();
    assert_eq!(reasons, [drain::CANCELED, "BucketRetained"]);
    // Live: a spec change finds the bucket someone else's (BucketNotOwned), the drain stops too.
    let (fake, mut obj) = server_side_drain_running().await;
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().owner = Some("someone".into());
    obj.metadata.generation = Some(2);
    let out = applied(&fake, &view(&obj, at(10), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Failed));
    assert!(!fake.bucket(NAME).unwrap().draining);
    assert_eq!(out.status.drain_status, None);
    assert_eq!(out.notes[0].reason, drain::CANCELED);
    assert!(out.notes[0].message.contains("not keeper's"));
}

#[tokio::test]
async fn a_retained_bucket_gone_from_the_backend_mid_drain_is_still_released() {
    let (fake, mut obj) = server_side_drain_running().await;
    obj.spec.deletion_policy = crate::api::DeletionPolicy::Retain;
    *fake.fail_next.lock().unwrap() = Some(crate::error::ErrorClass::NotFound);
    let out = retain_bucket(&fake, &view(&obj, at(10), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    // Any other failure to stop the drain keeps the resource until the drain is stopped.
    *fake.fail_next.lock().unwrap() = Some(crate::error::ErrorClass::Transient);
    assert!(
        retain_bucket(&fake, &view(&obj, at(20), None))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_bucket_another_s3bucket_owns_is_never_adopted() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: Some("uid-of-a/a".into()),
            objects: 3,
            versioning: true,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    annotate(&mut obj, ADOPT_ANNOTATION);
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Failed));
    assert_eq!(out.status.bucket_name, None, "no ownership record");
    let ready = &condition(&out.status.conditions, "Ready");
    assert_eq!(ready.reason, "BucketOwnedElsewhere");
    assert!(ready.message.contains("uid-of-a/a"), "{}", ready.message);
    assert_eq!(
        out.notes
            .iter()
            .map(|n| (n.type_, n.reason))
            .collect::<Vec<_>>(),
        [(EventType::Warning, "BucketOwnedElsewhere")]
    );
    // Left exactly as it was.
    let bucket = fake.bucket(NAME).unwrap();
    assert_eq!(bucket.owner.as_deref(), Some("uid-of-a/a"));
    assert_eq!(bucket.objects, 3);
    // Deleting the refused resource releases it without touching the bucket.
    obj.metadata.deletion_timestamp = Some(Time(at(1)));
    let out = cleanup_bucket(&fake, &view(&obj, at(1), None))
        .await
        .unwrap();
    assert_eq!(out.next, Next::Release);
    assert_eq!(fake.bucket(NAME).unwrap().objects, 3);
    assert!(
        !fake
            .take_calls()
            .iter()
            .any(|c| c == "delete" || c == "drain_round" || c == "start_drain")
    );
}

#[tokio::test]
async fn adoption_keeps_versioning_that_was_enabled() {
    let fake = Fake::new(DrainMode::ClientSide).with(
        NAME,
        FakeBucket {
            owner: None,
            versioning: true,
            ..Default::default()
        },
    );
    let mut obj = s3bucket();
    obj.spec.versioning = false;
    annotate(&mut obj, ADOPT_ANNOTATION);
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Ready));
    let bucket = fake.bucket(NAME).unwrap();
    assert_eq!(bucket.owner.as_deref(), Some(UID));
    assert!(bucket.versioning, "adoption must not suspend versioning");
}

#[tokio::test]
async fn a_client_side_drain_stops_without_deleting_when_the_bucket_changes_hands() {
    let fake = Fake::new(DrainMode::ClientSide).with(NAME, ours_with(2500));
    let mut obj = ready_bucket();
    annotate_with(&mut obj, DRAIN_ANNOTATION, "1");
    // The drain starts, then its first round deletes.
    for now in [0, 1] {
        let out = applied(&fake, &view(&obj, at(now), None)).await.unwrap();
        write_back(&mut obj, &out);
    }
    let left = fake.bucket(NAME).unwrap().objects;
    assert!(left < 2500, "the first round deleted");
    // Someone re-tags the bucket between two rounds.
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().owner = Some("uid-2".into());
    let out = applied(&fake, &view(&obj, at(2), None)).await.unwrap();
    assert_eq!(out.status.phase, Some(BucketPhase::Failed));
    assert_eq!(
        condition(&out.status.conditions, "Ready").reason,
        "OwnershipLost"
    );
    assert_eq!(
        fake.bucket(NAME).unwrap().objects,
        left,
        "nothing more deleted"
    );
    // Deleting the resource now deletes nothing either.
    obj.metadata.deletion_timestamp = Some(Time(at(3)));
    let out = cleanup_bucket(&fake, &view(&obj, at(3), None))
        .await
        .unwrap();
    assert_eq!(fake.bucket(NAME).unwrap().objects, left);
    assert!(!fake.take_calls().iter().any(|c| c == "delete"));
    assert_eq!(out.next, Next::Release, "not ours: let go, never deleted");
}

#[tokio::test]
async fn a_drain_is_not_started_and_a_bucket_not_deleted_once_ownership_changed() {
    let fake = Fake::new(DrainMode::ServerSide).with(NAME, ours_with(5));
    let mut obj = ready_bucket();
    annotate_with(&mut obj, DRAIN_ANNOTATION, "1");
    // Re-tagged after keeper last converged it (a steady Ready bucket is not re-ensured).
    fake.buckets.lock().unwrap().get_mut(NAME).unwrap().owner = Some("uid-2".into());
    let out = applied(&fake, &view(&obj, at(0), None)).await.unwrap();
    assert_eq!(
        condition(&out.status.conditions, "Ready").reason,
        "OwnershipLost"
    );
    assert!(!fake.take_calls().contains(&"start_drain".to_string()));
    assert!(!fake.bucket(NAME).unwrap().draining);
}

fn ours_with(objects: i64) -> FakeBucket {
    FakeBucket {
        owner: Some(UID.into()),
        objects,
        ..Default::default()
    }
}

/// A bucket's reconciles run on the long lane from its drain request until the drain is over,
/// cancelled ones included, and on the main lane otherwise.
#[test]
fn a_bucket_is_on_the_long_lane_while_a_drain_of_it_is_asked_for_or_runs() {
    let mut obj = s3bucket();
    assert_eq!(reconcile::lane(&obj), Lane::Main);
    annotate_with(&mut obj, DRAIN_ANNOTATION, "v1");
    assert_eq!(reconcile::lane(&obj), Lane::Long, "asked for");
    let settings = drain::settings(None, &DrainDefaults::default()).unwrap();
    let (running, _) = drain::initiate(10, 100, DrainMode::ClientSide, &settings, at(0));
    obj.status = Some(S3BucketStatus {
        drain_status: Some(running),
        ..Default::default()
    });
    assert_eq!(reconcile::lane(&obj), Lane::Long, "running");
    unannotate(&mut obj, &[DRAIN_ANNOTATION]);
    assert_eq!(
        reconcile::lane(&obj),
        Lane::Long,
        "cancelled, not yet stopped"
    );
    // Done: no drain status, the value recorded as handled.
    annotate_with(&mut obj, DRAIN_ANNOTATION, "v1");
    annotate_with(&mut obj, DRAIN_HANDLED_ANNOTATION, "v1");
    obj.status = Some(S3BucketStatus::default());
    assert_eq!(reconcile::lane(&obj), Lane::Main);
}

/// A bucket created or deleted in a tenant changes the tenant's bucket count, which no bucket
/// reads: the tenant's other buckets are not reconciled for it. Its phase, account or deletion
/// they do read.
#[test]
fn a_tenants_bucket_count_does_not_wake_its_buckets_what_they_read_does() {
    use crate::api::{S3TenantStatus, TenantPhase};
    use plan::lifecycle::tenant_trigger_key;
    let mut tenant = crate::test_support::tenant("t", serde_json::json!({}));
    tenant.status = Some(S3TenantStatus {
        phase: Some(TenantPhase::Ready),
        account_id: Some("42".into()),
        bucket_count: Some(7),
        ..Default::default()
    });
    let key = tenant_trigger_key(&tenant);
    let mut counted = tenant.clone();
    counted.status.as_mut().unwrap().bucket_count = Some(8);
    assert_eq!(tenant_trigger_key(&counted), key);
    let mut failed = tenant.clone();
    failed.status.as_mut().unwrap().phase = Some(TenantPhase::Failed);
    assert_ne!(tenant_trigger_key(&failed), key);
    let mut moved = tenant.clone();
    moved.status.as_mut().unwrap().account_id = Some("43".into());
    assert_ne!(tenant_trigger_key(&moved), key);
    let mut deleting = tenant;
    deleting.metadata.deletion_timestamp = Some(Time(at(0)));
    assert_ne!(tenant_trigger_key(&deleting), key);
}

/// A tenant's change wakes the buckets that name it in its namespace, and no other.
#[test]
fn a_tenant_maps_to_the_buckets_that_name_it_in_its_namespace() {
    use kube::runtime::watcher::Event;
    let (store, mut writer) = kube::runtime::reflector::store();
    let named = |name: &str, namespace: &str, tenant: &str| {
        let mut b = crate::test_support::bucket_with(
            name,
            serde_json::json!({"tenantRef": {"name": tenant}}),
        );
        b.metadata.namespace = Some(namespace.into());
        b
    };
    writer.apply_watcher_event(&Event::Apply(named("b", "ns", "t")));
    writer.apply_watcher_event(&Event::Apply(named("c", "ns", "u")));
    writer.apply_watcher_event(&Event::Apply(named("d", "other", "t")));
    let tenant = crate::test_support::tenant("t", serde_json::json!({}));
    assert_eq!(tenant.namespace().as_deref(), Some("ns"));
    assert_eq!(
        buckets_of(&store, &tenant),
        vec![ObjectRef::new("b").within("ns")]
    );
}

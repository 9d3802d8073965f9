//! Whole reconciles through the shared runtime (finalizer, outcome writing, error policy) over
//! the fake Kube seam and the in-memory backend: what a user sees in status, events and Secrets,
//! and how each class of backend error is handled.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use prometheus::IntCounter;
use serde_json::Value;

use super::fake::{Fake, FakeBucket};
use super::{NAME, UID, s3bucket};
use crate::api::{BucketPhase, DrainMode, S3Bucket, S3Tenant, S3TenantStatus, TenantPhase};
use crate::cluster::fake::{Call, FakeKube};
use crate::config::OperatorConfig;
use crate::controllers::bucket::{
    DRAIN_ANNOTATION, RECHECK, ROTATE_ANNOTATION, ROTATE_HANDLED_ANNOTATION, S3BucketReconciler,
};
use crate::error::ErrorClass;
use crate::runtime::policy::PERMANENT_RETRY;
use crate::runtime::testing::condition_mut;
use crate::runtime::{Context, Reconciler, testing};

const CONFIG: &str = "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3.example.com/\n      credentialsSecret: {name: s3-creds}\n";

fn tenant(phase: TenantPhase) -> S3Tenant {
    let mut t = crate::test_support::tenant("t", serde_json::json!({"provider": "s3"}));
    t.status = Some(S3TenantStatus {
        phase: Some(phase),
        ..Default::default()
    });
    t
}

pub(super) type Cx = Arc<Context<S3BucketReconciler<Arc<Fake>>>>;

pub(super) fn context(fake: Fake, tenant_phase: TenantPhase) -> (Arc<FakeKube>, Arc<Fake>, Cx) {
    let kube = Arc::new(FakeKube::default());
    kube.tenants
        .lock()
        .unwrap()
        .push(Arc::new(tenant(tenant_phase)));
    let fake = Arc::new(fake);
    let cx = started(&kube, &fake);
    (kube, fake, cx)
}

/// The context of a keeper process that starts over `kube` and `fake`: what a process keeps in
/// memory starts empty, what the API and the backend hold stays.
pub(super) fn started(kube: &Arc<FakeKube>, fake: &Arc<Fake>) -> Cx {
    let shared = testing::shared(kube.clone(), OperatorConfig::parse(CONFIG).unwrap());
    let counter = IntCounter::new("test_deleted", "test").unwrap();
    Arc::new(Context::new(
        shared,
        S3BucketReconciler::new(fake.clone(), counter),
    ))
}

/// A bucket past the finalizer step.
pub(super) fn finalized() -> S3Bucket {
    let mut b = s3bucket();
    b.metadata.finalizers = Some(vec![S3BucketReconciler::<Arc<Fake>>::FINALIZER.to_string()]);
    b
}

/// A bucket keeper created, being deleted.
fn deleting() -> S3Bucket {
    let mut b = finalized();
    b.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    b.status = Some(crate::api::S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        phase: Some(BucketPhase::Ready),
        bucket_name: Some(NAME.into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    b
}

fn ours(objects: i64) -> FakeBucket {
    FakeBucket {
        owner: Some(UID.into()),
        objects,
        ..Default::default()
    }
}

/// The status patches written, in order.
pub(super) fn status_patches(kube: &FakeKube) -> Vec<Value> {
    patches(kube, false)
}

/// The JSON patches written (finalizer, annotations), in order.
fn json_patches(kube: &FakeKube) -> Vec<Value> {
    patches(kube, true)
}

fn patches(kube: &FakeKube, json: bool) -> Vec<Value> {
    kube.calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::PatchStatus { patch, .. } if !json => Some(patch),
            Call::PatchJson { patch, .. } if json => Some(patch),
            _ => None,
        })
        .collect()
}

/// Whether the finalizer was removed.
fn released(kube: &FakeKube) -> bool {
    kube.calls().iter().any(|c| {
        matches!(c, Call::PatchJson { patch, .. }
            if patch.to_string().contains("remove") && patch.to_string().contains("bucket-cleanup"))
    })
}

#[tokio::test]
async fn a_new_bucket_becomes_ready_with_an_event_and_its_credentials_secret() {
    let (kube, _fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    let action = testing::reconcile(&cx, finalized()).await.unwrap();
    // Idle and Ready: looked at again in an hour (bucketCheckInterval's default).
    assert_eq!(
        action,
        Action::requeue(crate::config::DEFAULT_BUCKET_CHECK_INTERVAL)
    );
    let patches = status_patches(&kube);
    // The create intent is recorded before the create, the outcome after it.
    assert_eq!(patches[0]["status"]["createIntent"], NAME);
    let patch = &patches[1]["status"];
    assert_eq!(patch["phase"], "Ready");
    assert_eq!(patch["bucketName"], NAME);
    let notes = kube.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        (notes[0].type_, notes[0].reason),
        (EventType::Normal, "BucketReady")
    );
    let secret = kube
        .secret_data("ns", "b-credentials")
        .expect("credentials");
    assert_eq!(secret["bucket"], NAME);
    assert_eq!(secret["accessKeyId"], "AK1");
    assert_eq!(secret["AWS_REGION"], "us-east-1");
    assert_eq!(secret.len(), 10);
}

#[tokio::test]
async fn a_new_bucket_records_its_create_intent_in_status_and_needs_four_writes_to_ready() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&cx, s3bucket()).await.unwrap();
    let patches = json_patches(&kube);
    assert_eq!(patches.len(), 1, "{patches:?}");
    let patch = patches[0].to_string();
    assert!(patch.contains("keeper.dev/bucket-cleanup"), "{patch}");
    assert!(!patch.contains("intent"), "the finalizer alone: {patch}");
    assert!(
        fake.take_calls().is_empty() && fake.bucket(NAME).is_none(),
        "no backend call before the finalizer"
    );
    assert_eq!(kube.calls().len(), 1);

    // The next reconcile records the intent in status, then creates: one Secret and the status.
    testing::reconcile(&cx, finalized()).await.unwrap();
    let writes: Vec<Call> = kube
        .calls()
        .into_iter()
        .filter(|c| !matches!(c, Call::Publish { .. }))
        .collect();
    assert_eq!(writes.len(), 4, "{writes:?}");
    let patches = status_patches(&kube);
    assert_eq!(patches.len(), 2, "{patches:?}");
    assert_eq!(patches[0]["status"]["createIntent"], NAME);
    assert_eq!(patches[1]["status"]["phase"], "Ready");
    assert_eq!(patches[1]["status"]["bucketName"], NAME);
    assert_eq!(fake.bucket(NAME).unwrap().owner.as_deref(), Some(UID));
}

#[tokio::test]
async fn an_existing_bucket_gets_no_create_intent() {
    let fake = Fake::new(DrainMode::ClientSide).with(NAME, FakeBucket::default());
    let (kube, _fake, cx) = context(fake, TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    assert!(
        status_patches(&kube)
            .iter()
            .all(|p| p["status"]["createIntent"].is_null()),
        "{:?}",
        status_patches(&kube)
    );
}

#[tokio::test]
async fn a_tenant_not_ready_keeps_the_bucket_pending_with_a_normal_event() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Pending);
    let action = testing::reconcile(&cx, finalized()).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(status_patches(&kube)[0]["status"]["phase"], "Pending");
    let notes = kube.notes();
    assert_eq!(
        (notes[0].type_, notes[0].reason),
        (EventType::Normal, "TenantNotReady")
    );
    assert!(
        fake.take_calls().is_empty(),
        "no backend call for a waiting bucket"
    );
}

#[tokio::test]
async fn a_transient_backend_error_backs_off_and_writes_nothing() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    *fake.fail_next.lock().unwrap() = Some(ErrorClass::Transient);
    assert!(testing::reconcile(&cx, finalized()).await.is_err());
    assert!(kube.calls().is_empty(), "{:?}", kube.calls());
}

#[tokio::test]
async fn a_permanent_backend_error_sets_failed_with_one_warning() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    *fake.fail_next.lock().unwrap() = Some(ErrorClass::Permanent);
    let action = testing::reconcile(&cx, finalized()).await.unwrap();
    assert_eq!(action, Action::requeue(PERMANENT_RETRY));
    assert_eq!(status_patches(&kube)[0]["status"]["phase"], "Failed");
    let notes = kube.notes();
    assert_eq!(notes.len(), 1);
    assert_eq!(
        (notes[0].type_, notes[0].reason),
        (EventType::Warning, "BackendError")
    );
    assert!(notes[0].message.contains("HTTP 400"), "{notes:?}");
}

#[tokio::test]
async fn a_conflict_backs_off_without_reporting_a_failure_at_once() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    *fake.fail_next.lock().unwrap() = Some(ErrorClass::Conflict);
    assert!(testing::reconcile(&cx, finalized()).await.is_err());
    assert!(kube.calls().is_empty(), "{:?}", kube.calls());
}

#[tokio::test]
async fn a_not_found_during_cleanup_counts_as_gone() {
    let (kube, fake, cx) = context(
        Fake::new(DrainMode::ClientSide).with(NAME, ours(5)),
        TenantPhase::Ready,
    );
    *fake.fail_next.lock().unwrap() = Some(ErrorClass::NotFound);
    testing::reconcile(&cx, deleting()).await.unwrap();
    assert!(released(&kube), "{:?}", kube.calls());
    assert_eq!(fake.take_calls(), ["owner", "delete_credentials"]);
}

#[tokio::test]
async fn a_missing_bucket_whose_credentials_are_another_s3buckets_is_released_without_them() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    *fake.credentials_taken.lock().unwrap() = Some("bucket \"b\" belongs to other/x".into());
    testing::reconcile(&cx, deleting()).await.unwrap();
    assert!(released(&kube), "{:?}", kube.calls());
    assert_eq!(fake.take_calls(), ["owner", "delete_credentials"]);
    let notes = kube.notes();
    let left: Vec<_> = notes
        .iter()
        .filter(|n| n.reason == "CredentialsLeft")
        .collect();
    assert_eq!(left.len(), 1, "{notes:?}");
    assert_eq!(left[0].type_, EventType::Normal);
    assert!(left[0].message.contains("other/x"), "{notes:?}");
}

#[tokio::test]
async fn deleting_a_ready_bucket_names_the_key_its_secret_carries_and_a_pending_one_does_not() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    assert_eq!(
        kube.secret_data("ns", "b-credentials").unwrap()["accessKeyId"],
        "AK1"
    );
    let mut obj = deleting();
    // The last reconcile did not end Ready: an issuance may have been cut short.
    testing::reconcile(&cx, obj.clone()).await.unwrap();
    fake.buckets.lock().unwrap().insert(NAME.into(), ours(0));
    crate::runtime::conditions::set(
        &mut obj.status.as_mut().unwrap().conditions,
        crate::runtime::conditions::READY,
        true,
        "BucketReady",
        "ready",
        Some(1),
    );
    testing::reconcile(&cx, obj).await.unwrap();
    assert_eq!(*fake.only_keys.lock().unwrap(), [None, Some("AK1".into())]);
}

#[tokio::test]
async fn a_transient_error_during_cleanup_never_counts_as_gone() {
    let (kube, fake, cx) = context(
        Fake::new(DrainMode::ClientSide).with(NAME, ours(5)),
        TenantPhase::Ready,
    );
    *fake.fail_next.lock().unwrap() = Some(ErrorClass::Transient);
    assert!(testing::reconcile(&cx, deleting()).await.is_err());
    assert!(!released(&kube));
    assert!(fake.bucket(NAME).is_some());
}

#[tokio::test]
async fn deleting_a_full_bucket_is_blocked_with_one_warning_then_released_once_drained() {
    let (kube, fake, cx) = context(
        Fake::new(DrainMode::ClientSide).with(NAME, ours(5)),
        TenantPhase::Ready,
    );
    let action = testing::reconcile(&cx, deleting()).await.unwrap();
    assert_eq!(action, Action::requeue(RECHECK));
    let status = &status_patches(&kube)[0]["status"];
    assert_eq!(status["phase"], "Deleting");
    let blocked = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "DeletionBlocked")
        .unwrap();
    assert_eq!(blocked["reason"], "BucketNotEmpty");
    assert!(
        blocked["message"]
            .as_str()
            .unwrap()
            .contains("kubectl annotate --overwrite s3bucket b keeper.dev/drain=$(date +%s) -n ns")
    );
    assert_eq!(
        kube.notes()
            .iter()
            .map(|n| (n.type_, n.reason))
            .collect::<Vec<_>>(),
        [(EventType::Warning, "DeletionBlocked")]
    );
    assert!(!released(&kube));
    // Asked to drain: the drain runs to the end, then the bucket goes and the finalizer with it.
    let mut obj = deleting();
    obj.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DRAIN_ANNOTATION.into(), "true".into());
    for _ in 0..5 {
        testing::reconcile(&cx, obj.clone()).await.unwrap();
        if released(&kube) {
            break;
        }
        let patches = status_patches(&kube);
        let mut status = obj.status.clone().unwrap_or_default();
        if let Some(last) = patches.last() {
            let mut value = serde_json::to_value(&status).unwrap();
            json_patch::merge(&mut value, &last["status"]);
            status = serde_json::from_value(value).unwrap();
        }
        obj.status = Some(status);
    }
    assert!(released(&kube), "{:?}", kube.calls());
    assert!(fake.bucket(NAME).is_none());
    assert!(
        kube.notes()
            .iter()
            .any(|n| n.reason == "BucketDrainingStarted")
    );
}

#[tokio::test]
async fn an_invalid_bucket_name_is_a_permanent_failure_with_its_reason() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    let mut obj = finalized();
    obj.spec.bucket_name = Some("Not_A_Bucket".into());
    let action = testing::reconcile(&cx, obj).await.unwrap();
    assert_eq!(action, Action::requeue(PERMANENT_RETRY));
    let notes = kube.notes();
    assert_eq!(
        (notes[0].type_, notes[0].reason),
        (EventType::Warning, "InvalidBucketName")
    );
    assert!(fake.take_calls().is_empty());
}

#[tokio::test]
async fn a_rotation_request_is_reported_and_recorded_once_and_the_annotation_stays() {
    let (kube, _fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    let mut obj = finalized();
    obj.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ROTATE_ANNOTATION.into(), "true".into());
    testing::reconcile(&cx, obj.clone()).await.unwrap();
    assert!(
        kube.notes()
            .iter()
            .any(|n| n.reason == "CredentialsRotated")
    );
    let patches: Vec<Value> = kube
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::PatchJson { patch, .. } => Some(patch),
            _ => None,
        })
        .collect();
    assert_eq!(patches.len(), 1, "{patches:?}");
    let ops = patches[0].as_array().unwrap();
    assert!(
        ops.iter().all(|op| op["op"] != "remove"),
        "the request annotation stays: {ops:?}"
    );
    let set = ops.iter().find(|op| op["op"] == "add").unwrap();
    assert_eq!(
        set["path"],
        "/metadata/annotations/keeper.dev~1rotate-credentials-handled"
    );
    assert_eq!(set["value"], "true");
    let status = &status_patches(&kube).pop().unwrap()["status"];
    assert_eq!(status["handledRequests"]["rotateCredentials"], "true");
    // The same value again (status and annotation written back): no second rotation.
    let mut value = serde_json::to_value(obj.status.clone().unwrap_or_default()).unwrap();
    json_patch::merge(&mut value, status);
    obj.status = Some(serde_json::from_value(value).unwrap());
    obj.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ROTATE_HANDLED_ANNOTATION.into(), "true".into());
    let (kube, _fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(
        !kube
            .notes()
            .iter()
            .any(|n| n.reason == "CredentialsRotated")
    );
    assert!(
        !kube
            .calls()
            .iter()
            .any(|c| matches!(c, Call::PatchJson { .. })),
        "{:?}",
        kube.calls()
    );
}

#[tokio::test]
async fn a_retained_bucket_is_released_untouched() {
    let (kube, fake, cx) = context(
        Fake::new(DrainMode::ClientSide).with(NAME, ours(5)),
        TenantPhase::Ready,
    );
    let mut obj = deleting();
    obj.spec.deletion_policy = crate::api::DeletionPolicy::Retain;
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(released(&kube));
    assert_eq!(kube.notes()[0].reason, "BucketRetained");
    assert!(fake.take_calls().is_empty());
    assert_eq!(fake.bucket(NAME).unwrap().objects, 5);
}

#[tokio::test]
async fn a_retained_bucket_keeps_its_credentials_secret_usable() {
    let (kube, _fake, cx) = context(
        Fake::new(DrainMode::ClientSide).with(NAME, ours(5)),
        TenantPhase::Ready,
    );
    let mut obj = deleting();
    obj.spec.deletion_policy = crate::api::DeletionPolicy::Retain;
    let owner = crate::cluster::Target::of(&obj);
    let keys = std::collections::BTreeMap::from([
        ("accessKeyId".to_string(), "AK".to_string()),
        ("secretAccessKey".to_string(), "SK".to_string()),
    ]);
    kube.put_owned_secret(&owner, "b-credentials", keys.clone());
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(released(&kube));
    let kept = kube
        .secrets
        .lock()
        .unwrap()
        .get(&("ns".to_string(), "b-credentials".to_string()))
        .cloned()
        .expect("kept");
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty(),
        "the garbage collector keeps it"
    );
    assert_eq!(kube.secret_data("ns", "b-credentials"), Some(keys));
    let reasons: Vec<_> = kube.notes().iter().map(|n| n.reason).collect();
    assert_eq!(reasons, ["BucketRetained", "CredentialsKept"]);
}

#[tokio::test]
async fn a_credentials_name_taken_by_another_secret_fails_with_secret_conflict_and_touches_nothing()
{
    let (kube, _fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    let theirs =
        std::collections::BTreeMap::from([("tls.key".to_string(), "precious".to_string())]);
    kube.put_secret("ns", "b-credentials", theirs.clone());
    let action = testing::reconcile(&cx, finalized()).await.unwrap();
    assert_eq!(action, Action::requeue(PERMANENT_RETRY));
    let patch = &status_patches(&kube).pop().unwrap()["status"];
    assert_eq!(patch["phase"], "Failed");
    assert_eq!(patch["conditions"][0]["reason"], "SecretConflict");
    let message = patch["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("ns/b-credentials") && message.contains("not created by keeper"),
        "{message}"
    );
    let notes = kube.notes();
    assert_eq!(
        (notes[0].type_, notes[0].reason),
        (EventType::Warning, "SecretConflict")
    );
    assert_eq!(
        kube.secret_data("ns", "b-credentials"),
        Some(theirs),
        "untouched"
    );
    assert!(
        !kube
            .calls()
            .iter()
            .any(|c| matches!(c, Call::ApplySecret { .. })),
        "no Secret written"
    );
}

#[tokio::test]
async fn a_retained_bucket_deleted_while_draining_on_the_grid_stops_the_drain_then_is_released() {
    let (kube, fake, cx) = context(
        Fake::new(DrainMode::ServerSide).with(
            NAME,
            FakeBucket {
                draining: true,
                ..ours(5)
            },
        ),
        TenantPhase::Ready,
    );
    let mut obj = deleting();
    obj.spec.deletion_policy = crate::api::DeletionPolicy::Retain;
    let status = obj.status.as_mut().unwrap();
    status.phase = Some(BucketPhase::Draining);
    status.drain_status = Some(crate::api::DrainStatus {
        started_at: Some(Time(Timestamp::now())),
        mode: Some(DrainMode::ServerSide),
        initial_object_count: 5,
        previous_object_count: 5,
        ..Default::default()
    });
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(released(&kube), "{:?}", kube.calls());
    assert_eq!(fake.take_calls(), ["stop_drain"]);
    let bucket = fake.bucket(NAME).unwrap();
    assert!(!bucket.draining);
    assert_eq!(bucket.objects, 5);
    let notes = kube.notes();
    assert_eq!(
        notes.iter().map(|n| n.reason).collect::<Vec<_>>(),
        ["BucketDrainingCanceled", "BucketRetained"]
    );
}

/// A Retain delete of a bucket of ours on the grid, whose `draining` and owner are given, with no
/// drain recorded in status.
fn retained_on_the_grid(bucket: FakeBucket) -> (Arc<FakeKube>, Arc<Fake>, Cx, S3Bucket) {
    let (kube, fake, cx) = context(
        Fake::new(DrainMode::ServerSide).with(NAME, bucket),
        TenantPhase::Ready,
    );
    let mut obj = deleting();
    obj.spec.deletion_policy = crate::api::DeletionPolicy::Retain;
    (kube, fake, cx, obj)
}

#[tokio::test]
async fn a_retained_bucket_whose_drain_start_was_never_recorded_has_the_drain_stopped_first() {
    // F1: keeper started the grid's drain and the status write that recorded it failed.
    let (kube, fake, cx, obj) = retained_on_the_grid(FakeBucket {
        draining: true,
        ..ours(5)
    });
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(released(&kube), "{:?}", kube.calls());
    assert_eq!(fake.take_calls(), ["drain_running", "owner", "stop_drain"]);
    let bucket = fake.bucket(NAME).unwrap();
    assert!(!bucket.draining, "the grid no longer deletes objects");
    assert_eq!(bucket.objects, 5);
    let notes = kube.notes();
    assert_eq!(
        notes
            .iter()
            .map(|n| (n.type_, n.reason))
            .collect::<Vec<_>>(),
        [
            (EventType::Warning, "BucketOrphanedDrain"),
            (EventType::Normal, "BucketRetained")
        ]
    );
}

#[tokio::test]
async fn a_retained_bucket_is_not_let_go_while_the_grid_refuses_to_stop_its_drain() {
    let (kube, fake, cx, obj) = retained_on_the_grid(FakeBucket {
        draining: true,
        ..ours(5)
    });
    *fake.fail_call.lock().unwrap() = Some("stop_drain");
    assert!(testing::reconcile(&cx, obj).await.is_err());
    assert!(!released(&kube), "{:?}", kube.calls());
    assert!(fake.bucket(NAME).unwrap().draining);
}

#[tokio::test]
async fn a_retained_bucket_the_grid_is_not_draining_is_released_after_one_look() {
    let (kube, fake, cx, obj) = retained_on_the_grid(ours(5));
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(released(&kube));
    assert_eq!(fake.take_calls(), ["drain_running"]);
    assert_eq!(kube.notes()[0].reason, "BucketRetained");
}

#[tokio::test]
async fn a_drain_on_a_retained_bucket_that_is_not_ours_is_left_alone() {
    let (kube, fake, cx, obj) = retained_on_the_grid(FakeBucket {
        draining: true,
        owner: Some("another-uid".into()),
        objects: 5,
        ..Default::default()
    });
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(released(&kube));
    assert_eq!(fake.take_calls(), ["drain_running", "owner"]);
    assert!(fake.bucket(NAME).unwrap().draining, "not keeper's to stop");
}

#[tokio::test]
async fn a_retained_bucket_waits_while_its_backend_cannot_be_reached() {
    // Without its tenant keeper cannot ask the grid whether it deletes the bucket's objects.
    let (kube, fake, cx, obj) = retained_on_the_grid(FakeBucket {
        draining: true,
        ..ours(5)
    });
    kube.tenants.lock().unwrap().clear();
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(!released(&kube));
    assert!(fake.take_calls().is_empty());
    let patch = &status_patches(&kube).pop().unwrap()["status"];
    assert!(patch.to_string().contains("BackendUnavailable"), "{patch}");
}

#[tokio::test]
async fn a_bucket_is_ready_only_once_its_new_keys_are_accepted() {
    let fake = Fake::new(DrainMode::ClientSide);
    *fake.keys_not_yet_valid.lock().unwrap() = 2;
    let (kube, fake, cx) = context(fake, TenantPhase::Ready);
    let action = testing::reconcile(&cx, finalized()).await.unwrap();
    // Published, but the store refuses the keys yet: looked at again soon, not Ready.
    assert_eq!(action, Action::requeue(std::time::Duration::from_secs(2)));
    assert!(kube.secret_data("ns", "b-credentials").is_some());
    let status = status_patches(&kube).last().unwrap()["status"].clone();
    assert_eq!(status["phase"], "Pending");
    let ready = &status["conditions"][0];
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("CredentialsNotYetValid"))
    );
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("not accepted by the store yet"),
        "{ready}"
    );
    assert!(
        kube.notes().iter().all(|n| n.reason != "BucketReady"),
        "{:?}",
        kube.notes()
    );
    // Refused again a while later: no second event, and the wait grows with the time refused.
    let mut refused: crate::api::S3BucketStatus = serde_json::from_value(status).unwrap();
    let ten_seconds_ago = Timestamp::now() - std::time::Duration::from_secs(10);
    condition_mut(&mut refused.conditions, "Ready").last_transition_time = Time(ten_seconds_ago);
    let mut again = finalized();
    again.status = Some(refused);
    let events = kube.notes().len();
    let patches = status_patches(&kube).len();
    let action = testing::reconcile(&cx, again.clone()).await.unwrap();
    assert!(
        [10, 11]
            .map(|s| Action::requeue(std::time::Duration::from_secs(s)))
            .contains(&action),
        "{action:?}"
    );
    assert_eq!(kube.notes().len(), events, "{:?}", kube.notes());
    // Nothing changed (the condition keeps its transition time): nothing to write.
    assert_eq!(status_patches(&kube).len(), patches);
    // The next look tries the published keys again (no new key) and calls the bucket Ready.
    fake.calls.lock().unwrap().clear();
    testing::reconcile(&cx, again).await.unwrap();
    let calls = fake.calls.lock().unwrap().clone();
    assert!(calls.iter().any(|c| c == "check_keys"), "{calls:?}");
    let status = status_patches(&kube).last().unwrap()["status"].clone();
    assert_eq!(status["phase"], "Ready");
    assert_eq!(status["conditions"][0]["reason"], "BucketReady");
    assert!(kube.notes().iter().any(|n| n.reason == "BucketReady"));
}

#[tokio::test]
async fn a_bucket_with_the_providers_shared_keys_says_so_in_its_ready_condition() {
    let fake = Fake {
        shared_keys: true,
        ..Fake::new(DrainMode::ClientSide)
    };
    let (kube, _fake, cx) = context(fake, TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    // The last write: the first is the create intent recorded before CreateBucket.
    let status = status_patches(&kube).last().unwrap()["status"].clone();
    assert_eq!(status["phase"], "Ready");
    let message = status["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("provider \"s3\"'s own keys (sharedCredentials: true)"),
        "{message}"
    );
}

#[tokio::test]
async fn a_tagging_failure_right_after_the_create_does_not_orphan_the_bucket() {
    let fake = Fake::new(DrainMode::ClientSide);
    *fake.fail_tag_after_create.lock().unwrap() = true;
    let (kube, fake, cx) = context(fake, TenantPhase::Ready);
    let err = testing::reconcile(&cx, finalized()).await;
    assert!(err.is_err(), "the throttled tagging fails the reconcile");
    // The create left an unmarked bucket; the intent recorded before it says whose it is.
    assert_eq!(fake.bucket(NAME).unwrap().owner, None);
    let patches = status_patches(&kube);
    assert_eq!(patches[0]["status"]["createIntent"], NAME, "{patches:?}");
    let mut obj = finalized();
    obj.status = Some(crate::api::S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        create_intent: Some(NAME.into()),
        ..Default::default()
    });
    testing::reconcile(&cx, obj).await.unwrap();
    let last = status_patches(&kube).pop().unwrap();
    assert_eq!(last["status"]["phase"], "Ready", "{last}");
    assert_eq!(last["status"]["bucketName"], NAME);
    let buckets = fake.buckets.lock().unwrap();
    assert_eq!(buckets.len(), 1);
    assert_eq!(buckets[NAME].owner.as_deref(), Some(UID));
}

#[tokio::test]
async fn an_intent_annotation_claims_nothing() {
    // Anyone who may edit the S3Bucket can write an annotation: one naming the bucket (as older
    // keepers wrote with the finalizer) must not make someone's untagged bucket keeper's.
    let fake = Fake::new(DrainMode::ClientSide).with(NAME, FakeBucket::default());
    let (kube, fake, cx) = context(fake, TenantPhase::Ready);
    let mut obj = finalized();
    super::annotate_with(&mut obj, "keeper.dev/create-intent", NAME);
    testing::reconcile(&cx, obj).await.unwrap();
    let last = status_patches(&kube).pop().unwrap();
    assert_eq!(last["status"]["phase"], "Failed", "{last}");
    assert_eq!(
        last["status"]["conditions"][0]["reason"], "BucketNotOwned",
        "{last}"
    );
    assert_eq!(fake.bucket(NAME).unwrap().owner, None, "not marked");
}

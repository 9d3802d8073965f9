//! A bucket's keys through whole reconciles over the fake Kube seam (whose Secret writes are
//! compare-and-swap, as the API's are) and the in-memory backend (whose user holds at most two
//! keys, as on IAM): failed publications, keys refused for good, and two writers issuing keys for
//! one bucket at once (two keepers without leader election), interleaved call by call.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;

use super::NAME;
use super::fake::Fake;
use super::flow::{Cx, context, finalized, started, status_patches};
use crate::api::{DrainMode, S3Bucket, S3BucketStatus, TenantPhase};
use crate::cluster::fake::FakeKube;
use crate::controllers::bucket::ROTATE_ANNOTATION;
use crate::runtime::Error;
use crate::runtime::testing;
use crate::runtime::testing::condition_mut;
use crate::test_support::Pause;

/// The bucket as the API holds it after every status patch written so far.
fn stored(kube: &FakeKube) -> S3Bucket {
    let mut status = serde_json::json!({});
    for patch in status_patches(kube) {
        json_patch::merge(&mut status, &patch["status"]);
    }
    let mut bucket = finalized();
    bucket.status = Some(serde_json::from_value(status).unwrap());
    bucket
}

/// The key id the bucket's Secret carries, which must be the only key of the bucket's user.
fn the_one_published_key(kube: &FakeKube, fake: &Fake) -> String {
    let published = kube
        .secret_data("ns", "b-credentials")
        .expect("keys published")["accessKeyId"]
        .clone();
    assert_eq!(
        fake.keys_of_user(),
        std::slice::from_ref(&published),
        "one key, the published one"
    );
    published
}

fn ready(bucket: &S3Bucket) -> bool {
    let status = bucket.status.as_ref().unwrap();
    crate::runtime::conditions::is_true(&status.conditions, "Ready")
}

/// A reconcile running beside the test.
type Running = tokio::task::JoinHandle<Result<Action, Error<crate::controllers::bucket::Error>>>;

/// Starts a reconcile of `obj` that runs until the test awaits it.
fn spawn(cx: &Cx, obj: S3Bucket) -> Running {
    let cx = cx.clone();
    tokio::spawn(async move { testing::reconcile(&cx, obj).await })
}

/// A new bucket: reconcile A creates its key and stops before publishing it; reconcile B then
/// lists that key (published by nobody yet), creates its own and stops too. Returns both, each
/// waiting at its pause.
async fn two_writers_with_unpublished_keys(
    cx: &Cx,
    fake: &Fake,
) -> ((Pause, Running), (Pause, Running)) {
    let first = fake.pauses.after("create_key");
    let a = spawn(cx, finalized());
    first.reached().await;
    let second = fake.pauses.after("create_key");
    let b = spawn(cx, finalized());
    second.reached().await;
    assert_eq!(fake.keys_of_user(), ["AK1", "AK2"]);
    ((first, a), (second, b))
}

#[tokio::test]
async fn two_writers_issuing_keys_for_a_new_bucket_at_once_publish_one_live_key() {
    // The race of issue 14: B used to delete A's key as a leftover before creating its own, A
    // then published the deleted key, and B, refused, deleted its own: the bucket waited two
    // minutes on a key nobody had.
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    let ((first, a), (second, b)) = two_writers_with_unpublished_keys(&cx, &fake).await;
    first.release();
    a.await.unwrap().unwrap();
    second.release();
    b.await
        .unwrap()
        .expect_err("B's publication lost: it retries");
    assert_eq!(the_one_published_key(&kube, &fake), "AK1");
    let bucket = stored(&kube);
    assert!(ready(&bucket), "A's keys were checked and work");
    // The next look changes nothing and calls nothing on the user.
    fake.take_calls();
    testing::reconcile(&cx, bucket).await.unwrap();
    assert_eq!(the_one_published_key(&kube, &fake), "AK1");
    assert!(!fake.take_calls().contains(&"user_keys".to_string()));
}

#[tokio::test]
async fn the_second_writer_publishing_first_retires_the_first_writers_key() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    let ((first, a), (second, b)) = two_writers_with_unpublished_keys(&cx, &fake).await;
    second.release();
    b.await.unwrap().unwrap();
    first.release();
    a.await
        .unwrap()
        .expect_err("A's publication lost: it retries");
    assert_eq!(the_one_published_key(&kube, &fake), "AK2");
    assert!(ready(&stored(&kube)));
}

#[tokio::test]
async fn a_writer_that_read_the_secret_before_another_published_deletes_only_its_own_key() {
    // B read "no Secret" and listed no key; A then issued and published AK1 from start to end
    // (as a stale cache would hide A's Secret from B): B's create of the Secret is refused.
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    let listed = fake.pauses.after("user_keys");
    let b = spawn(&cx, finalized());
    listed.reached().await;
    testing::reconcile(&cx, finalized()).await.unwrap();
    assert_eq!(the_one_published_key(&kube, &fake), "AK1");
    listed.release();
    b.await.unwrap().expect_err("B's publication lost");
    assert_eq!(the_one_published_key(&kube, &fake), "AK1");
}

#[tokio::test]
async fn a_user_at_its_key_limit_is_swept_only_after_the_secret_is_claimed() {
    // A key left by a crash, and writer A's key about to be published: no room for a third. B
    // deletes both, but only after changing the Secret from what A read, so A's publication of
    // its deleted key is refused rather than written.
    let fake = Fake::new(DrainMode::ClientSide);
    fake.user_keys.lock().unwrap().push("LEFT".into());
    let (kube, fake, cx) = context(fake, TenantPhase::Ready);
    let first = fake.pauses.after("create_key");
    let a = spawn(&cx, finalized());
    first.reached().await;
    assert_eq!(fake.keys_of_user(), ["LEFT", "AK1"]);
    testing::reconcile(&cx, finalized()).await.unwrap();
    assert_eq!(the_one_published_key(&kube, &fake), "AK2");
    let claimed = kube
        .secrets
        .lock()
        .unwrap()
        .get(&("ns".to_string(), "b-credentials".to_string()))
        .unwrap()
        .metadata
        .annotations
        .clone()
        .unwrap_or_default();
    assert!(claimed.contains_key("keeper.dev/key-sweep"), "{claimed:?}");
    first.release();
    a.await.unwrap().expect_err("A's publication lost");
    assert_eq!(the_one_published_key(&kube, &fake), "AK2");
}

#[tokio::test]
async fn two_writers_handling_one_rotation_at_once_leave_one_live_key() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    let mut rotating = stored(&kube);
    rotating
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(ROTATE_ANNOTATION.to_string(), "r1".to_string());
    let first = fake.pauses.after("create_key");
    let a = spawn(&cx, rotating.clone());
    first.reached().await;
    // B finds the user at its limit (AK1 published, AK2 A's): it deletes AK2 to make room, after
    // claiming the Secret, and stops with AK3 created.
    let second = fake.pauses.after("create_key");
    let b = spawn(&cx, rotating);
    second.reached().await;
    assert_eq!(fake.keys_of_user(), ["AK1", "AK3"]);
    first.release();
    a.await
        .unwrap()
        .expect_err("A read the Secret before B's claim");
    second.release();
    b.await.unwrap().unwrap();
    assert_eq!(the_one_published_key(&kube, &fake), "AK3");
}

#[tokio::test]
async fn a_key_whose_publication_was_refused_is_deleted_and_one_perhaps_published_waits() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    let ready = stored(&kube);
    // The Secret is gone (deleted by hand): new keys, whose Secret write another writer beats.
    kube.secrets.lock().unwrap().clear();
    *kube.fail_next_write.lock().unwrap() = Some(409);
    testing::reconcile(&cx, ready.clone()).await.unwrap_err();
    assert!(kube.secret_data("ns", "b-credentials").is_none());
    assert_eq!(
        fake.keys_of_user(),
        ["AK1"],
        "AK2 can never be published: deleted at once"
    );
    // A write that failed otherwise may have been written: its key stays for now...
    *kube.fail_next_write.lock().unwrap() = Some(500);
    testing::reconcile(&cx, ready.clone()).await.unwrap_err();
    assert_eq!(fake.keys_of_user(), ["AK1", "AK3"]);
    // ... and goes with the next issuance (the user is full: the Secret is claimed first).
    testing::reconcile(&cx, ready).await.unwrap();
    assert_eq!(the_one_published_key(&kube, &fake), "AK4");
}

#[tokio::test]
async fn a_key_left_by_an_interrupted_issuance_goes_before_the_bucket_is_ready_again() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    fake.user_keys.lock().unwrap().push("LEFT".into());
    // A settled bucket is not looked at: the steady state makes no call on the user.
    testing::reconcile(&cx, stored(&kube)).await.unwrap();
    assert_eq!(fake.keys_of_user(), ["AK1", "LEFT"]);
    // One whose last reconcile did not end Ready is.
    let mut unsettled = stored(&kube);
    unsettled.status = Some(S3BucketStatus {
        // Written by this keeper, which records handled requests.
        handled_requests: Some(Default::default()),
        conditions: Vec::new(),
        ..unsettled.status.unwrap()
    });
    testing::reconcile(&cx, unsettled).await.unwrap();
    assert_eq!(the_one_published_key(&kube, &fake), "AK1");
}

#[tokio::test]
async fn a_keeper_that_starts_lists_a_settled_buckets_keys_once_and_sweeps_another_writers_leftover()
 {
    // Keeper A published AK1 and the bucket is Ready. Keeper B (no leader election) created a key
    // for the same bucket and was killed before its publication was refused: nobody holds it,
    // and A, which listed the user before B's key existed, takes the bucket as settled.
    let (kube, fake, a) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&a, finalized()).await.unwrap();
    fake.user_keys.lock().unwrap().push("B-LEFT".into());
    fake.take_calls();
    testing::reconcile(&a, stored(&kube)).await.unwrap();
    assert!(!fake.take_calls().contains(&"user_keys".to_string()));
    // B starts again: its first look at the settled bucket lists the user's keys, and the key
    // the Secret does not carry goes (after a claim of the Secret), the published one stays.
    let b = started(&kube, &fake);
    testing::reconcile(&b, stored(&kube)).await.unwrap();
    assert!(fake.take_calls().contains(&"user_keys".to_string()));
    assert_eq!(the_one_published_key(&kube, &fake), "AK1");
    assert!(ready(&stored(&kube)));
    // Once is enough: B's next look makes no call on the user.
    testing::reconcile(&b, stored(&kube)).await.unwrap();
    assert!(!fake.take_calls().contains(&"user_keys".to_string()));
}

#[tokio::test]
async fn keys_refused_for_minutes_are_replaced_and_the_wait_starts_again() {
    // The published key is gone from the store (deleted by hand): waiting on it would keep the
    // bucket Pending for good.
    let fake = Fake::new(DrainMode::ClientSide);
    *fake.keys_not_yet_valid.lock().unwrap() = 1000;
    let (kube, fake, cx) = context(fake, TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    let mut refused = stored(&kube).status.unwrap();
    let minutes_ago = Timestamp::now() - std::time::Duration::from_secs(180);
    condition_mut(&mut refused.conditions, "Ready").last_transition_time = Time(minutes_ago);
    let mut stale = finalized();
    stale.status = Some(refused.clone());
    testing::reconcile(&cx, stale).await.unwrap();
    assert_eq!(the_one_published_key(&kube, &fake), "AK2");
    assert!(
        kube.notes()
            .iter()
            .any(|n| n.reason == "CredentialsReplaced"),
        "{:?}",
        kube.notes()
    );
    let status = status_patches(&kube).last().unwrap()["status"].clone();
    let since: Timestamp = status["conditions"][0]["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(since > minutes_ago, "the new keys' wait starts now");
    // Refused for less than that: the same keys are tried again, nothing is issued.
    condition_mut(&mut refused.conditions, "Ready").last_transition_time =
        Time(Timestamp::now() - std::time::Duration::from_secs(30));
    let mut recent = finalized();
    recent.status = Some(refused);
    fake.take_calls();
    testing::reconcile(&cx, recent).await.unwrap();
    let calls = fake.take_calls();
    assert!(calls.contains(&"check_keys".to_string()), "{calls:?}");
    assert!(
        !calls.iter().any(|c| c == "create_key" || c == "delete_key"),
        "{calls:?}"
    );
    assert_eq!(the_one_published_key(&kube, &fake), "AK2");
}

/// The IAM setup of a new bucket keeps failing (a user limit reached): the reconcile fails, and
/// yet the bucket it created is recorded, so that deleting the object deletes the bucket.
#[tokio::test]
async fn a_bucket_whose_keys_cannot_be_set_up_is_still_recorded_as_ours() {
    let mut fake = Fake::new(DrainMode::ClientSide);
    fake.key_limit = Some(2);
    *fake.fail_user_keys.lock().unwrap() = Some(crate::error::ErrorClass::Conflict);
    let (kube, fake, cx) = context(fake, TenantPhase::Ready);
    let failed = testing::reconcile(&cx, finalized()).await;
    assert!(failed.is_err(), "the keys failed: {failed:?}");
    assert!(fake.bucket(NAME).is_some(), "the bucket was created");
    let recorded = stored(&kube);
    assert_eq!(
        recorded.status.as_ref().unwrap().bucket_name.as_deref(),
        Some(NAME),
        "{:?}",
        status_patches(&kube)
    );
    assert!(
        kube.secret_data("ns", "b-credentials").is_none(),
        "no keys published"
    );
}

/// The namespace controller deletes a Ready bucket's Secret while deleting its namespace: the
/// API refuses a new one. The reconcile does not fail for it (no "failed permanently", no
/// warning), says the bucket is not Ready, and issues and writes nothing more for it.
#[tokio::test]
async fn a_bucket_whose_namespace_is_being_deleted_writes_no_credentials_secret() {
    let (kube, fake, cx) = context(Fake::new(DrainMode::ClientSide), TenantPhase::Ready);
    testing::reconcile(&cx, finalized()).await.unwrap();
    kube.terminating.lock().unwrap().insert("ns".into());
    kube.secrets.lock().unwrap().clear();
    let keys = fake.keys_of_user();
    fake.take_calls();
    testing::reconcile(&cx, stored(&kube)).await.unwrap();
    // The namespace was asked before a key was made for a Secret it would refuse.
    assert_eq!(fake.keys_of_user(), keys);
    assert!(
        !fake.take_calls().iter().any(|c| c.contains("key")),
        "no call on the user's keys"
    );
    let bucket = stored(&kube);
    let status = bucket.status.as_ref().unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "CredentialsWithheld"),
        "{ready:?}"
    );
    assert!(kube.secret_data("ns", "b-credentials").is_none());
    // Known now: the next reconciles issue no key and try no Secret write.
    let writes = |kube: &FakeKube| {
        kube.calls()
            .iter()
            .filter(|c| matches!(c, crate::cluster::fake::Call::ApplySecret { .. }))
            .count()
    };
    let before = writes(&kube);
    testing::reconcile(&cx, bucket).await.unwrap();
    assert_eq!(fake.keys_of_user(), keys);
    assert!(
        !fake.take_calls().iter().any(|c| c.contains("key")),
        "no call on the user's keys"
    );
    assert_eq!(writes(&kube), before);
}

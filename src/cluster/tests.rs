use super::fake::FakeKube;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ApiResource;

use crate::api::S3Bucket;
use crate::api::names::{CLEANUP_HOLD, MANAGED_BY};

use super::secrets::*;
use super::*;

/// Lets go of `owner()`'s Secret `name` as `what` says; whether there was anything to let go of.
async fn let_go(kube: &FakeKube, name: &str, what: LetGo) -> bool {
    kube.let_go_secret(&owner(), name, what).await.unwrap()
}

fn owner() -> Target {
    Target {
        resource: ApiResource::erase::<S3Bucket>(&()),
        namespace: "ns".into(),
        name: "b".into(),
        uid: "uid-1".into(),
    }
}

#[tokio::test]
async fn a_secret_is_written_once_labelled_and_owned() {
    let kube = FakeKube::default();
    let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
    assert!(
        kube.apply_secret(&owner(), "s", data.clone(), Hold::No)
            .await
            .unwrap()
    );
    assert!(
        !kube
            .apply_secret(&owner(), "s", data.clone(), Hold::No)
            .await
            .unwrap()
    );
    let stored = kube.secret("ns", "s").await.unwrap().unwrap();
    assert_eq!(stored.labels().get(MANAGED_BY.0).unwrap(), MANAGED_BY.1);
    assert_eq!(stored.owner_references()[0].uid, "uid-1");
    assert_eq!(secret_data(&stored), data);
}

#[tokio::test]
async fn an_injected_failure_writes_nothing() {
    let kube = FakeKube::default();
    *kube.fail_next_write.lock().unwrap() = Some(503);
    let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
    assert!(
        kube.apply_secret(&owner(), "s", data, Hold::No)
            .await
            .is_err()
    );
    assert!(kube.secret("ns", "s").await.unwrap().is_none());
}

#[tokio::test]
async fn a_secret_keeper_did_not_create_for_the_owner_is_never_written_or_read() {
    let kube = FakeKube::default();
    let theirs = BTreeMap::from([("password".to_string(), "theirs".to_string())]);
    kube.put_secret("ns", "s", theirs.clone());
    let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
    let err = kube
        .apply_secret(&owner(), "s", data.clone(), Hold::No)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SecretError::Conflict { holder, .. } if holder == "was not created by keeper"),
        "{err}"
    );
    assert_eq!(err.condition_reason(), "SecretConflict");
    assert_eq!(kube.secret_data("ns", "s"), Some(theirs.clone()));
    assert!(
        owned_secret(&kube, &owner(), "s").await.is_err(),
        "its data is never used"
    );

    // Another keeper resource's Secret is named as such.
    let other = Target {
        uid: "uid-2".into(),
        name: "other".into(),
        ..owner()
    };
    kube.put_owned_secret(&other, "t", theirs.clone());
    let err = kube
        .apply_secret(&owner(), "t", data, Hold::No)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("belongs to S3Bucket other"),
        "{err}"
    );
    assert_eq!(
        owned_secret(&kube, &other, "t").await.unwrap(),
        Some(theirs),
        "its owner reads it"
    );
}

#[tokio::test]
async fn the_secret_of_a_deleted_namesake_waits_for_the_garbage_collector_not_for_a_person() {
    // A bucket deleted and created again under its name: the first one's Secret is still there
    // for a moment, owned by the first bucket's uid.
    let kube = FakeKube::default();
    let first = Target {
        uid: "uid-0".into(),
        ..owner()
    };
    kube.put_owned_secret(&first, "b-credentials", BTreeMap::new());
    let err = kube
        .apply_secret(&owner(), "b-credentials", BTreeMap::new(), Hold::No)
        .await
        .unwrap_err();
    assert!(matches!(err, SecretError::OfDeletedOwner { .. }), "{err}");
    assert_eq!(err.class(), crate::error::ErrorClass::Transient, "retried");
    assert_eq!(err.condition_reason(), "SecretOfDeletedOwner");
    assert!(err.to_string().contains("uid-0"), "{err}");
    // Another resource's Secret of the same kind is no namesake: a conflict for good.
    let other = Target {
        uid: "uid-2".into(),
        name: "other".into(),
        ..owner()
    };
    kube.put_owned_secret(&other, "o", BTreeMap::new());
    let err = kube
        .apply_secret(&owner(), "o", BTreeMap::new(), Hold::No)
        .await
        .unwrap_err();
    assert_eq!(err.class(), crate::error::ErrorClass::Permanent);
}

#[tokio::test]
async fn a_released_secret_stays_with_its_data_and_no_longer_belongs_to_the_owner() {
    let kube = FakeKube::default();
    let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
    kube.apply_secret(&owner(), "s", data.clone(), Hold::No)
        .await
        .unwrap();
    assert!(let_go(&kube, "s", LetGo::Ownership).await);
    let kept = kube.secret("ns", "s").await.unwrap().expect("kept");
    assert!(
        !owned_by(&kept, &owner()),
        "the garbage collector no longer deletes it"
    );
    assert_eq!(secret_data(&kept), data);
    assert!(!let_go(&kube, "s", LetGo::Ownership).await, "once");
    assert!(!let_go(&kube, "missing", LetGo::Ownership).await);
}

#[tokio::test]
async fn a_held_secret_outlives_its_deletion_and_stays_readable_until_unheld() {
    let kube = FakeKube::default();
    let data = BTreeMap::from([("password".to_string(), "p".to_string())]);
    kube.apply_secret(&owner(), "s", data.clone(), Hold::UntilReleased)
        .await
        .unwrap();
    let stored = kube.secret("ns", "s").await.unwrap().unwrap();
    assert_eq!(stored.finalizers(), [CLEANUP_HOLD]);

    // The namespace controller deletes it: it stays, being deleted, and its owner reads it.
    kube.delete_secret("ns", "s");
    let deleting = kube.secret("ns", "s").await.unwrap().expect("held");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        owned_secret(&kube, &owner(), "s").await.unwrap(),
        Some(data.clone())
    );
    // Applying it again writes nothing: no new finalizer on an object being deleted.
    assert!(
        !kube
            .apply_secret(&owner(), "s", data.clone(), Hold::UntilReleased)
            .await
            .unwrap()
    );

    assert!(let_go(&kube, "s", LetGo::Hold).await);
    assert!(
        kube.secret("ns", "s").await.unwrap().is_none(),
        "gone once unheld"
    );
    assert!(!let_go(&kube, "s", LetGo::Hold).await);
}

#[tokio::test]
async fn a_secret_written_before_holds_existed_gets_the_hold_unless_it_is_being_deleted() {
    let kube = FakeKube::default();
    let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
    kube.put_owned_secret(&owner(), "old", data.clone());
    assert!(
        kube.apply_secret(&owner(), "old", data.clone(), Hold::UntilReleased)
            .await
            .unwrap(),
        "the hold is added even though the data is unchanged"
    );
    assert_eq!(
        kube.secret("ns", "old")
            .await
            .unwrap()
            .unwrap()
            .finalizers(),
        [CLEANUP_HOLD]
    );

    kube.put_owned_secret(&owner(), "going", data.clone());
    kube.secrets
        .lock()
        .unwrap()
        .get_mut(&("ns".to_string(), "going".to_string()))
        .unwrap()
        .finalizers_mut()
        .push("someone.else/finalizer".into());
    kube.delete_secret("ns", "going");
    let changed = BTreeMap::from([("k".to_string(), "new".to_string())]);
    assert!(
        kube.apply_secret(&owner(), "going", changed.clone(), Hold::UntilReleased)
            .await
            .unwrap(),
        "new data is written"
    );
    let going = kube.secret("ns", "going").await.unwrap().unwrap();
    assert_eq!(
        going.finalizers(),
        ["someone.else/finalizer"],
        "no hold added"
    );
    assert_eq!(secret_data(&going), changed);
    assert!(
        !kube
            .apply_secret(&owner(), "going", changed, Hold::UntilReleased)
            .await
            .unwrap(),
        "and nothing more: no write loop"
    );
}

#[tokio::test]
async fn releasing_a_held_secret_drops_the_hold_with_the_owner_reference() {
    let kube = FakeKube::default();
    let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
    kube.apply_secret(&owner(), "s", data.clone(), Hold::UntilReleased)
        .await
        .unwrap();
    assert!(let_go(&kube, "s", LetGo::Ownership).await);
    let kept = kube.secret("ns", "s").await.unwrap().expect("kept");
    assert!(kept.finalizers().is_empty());
    assert!(!owned_by(&kept, &owner()));
    assert!(
        !let_go(&kube, "s", LetGo::Hold).await,
        "no longer the owner's to unhold"
    );
}

#[test]
fn the_unhold_patch_removes_only_the_hold_and_tests_it() {
    let mut secret = Secret::default();
    secret.metadata.owner_references = Some(vec![owner().owner_reference()]);
    assert!(LetGo::Hold.patch(&secret, &owner()).is_none(), "not held");
    secret.metadata.finalizers = Some(vec!["other".into(), CLEANUP_HOLD.into()]);
    let patch = serde_json::to_value(LetGo::Hold.patch(&secret, &owner()).unwrap()).unwrap();
    assert_eq!(
        patch,
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers/1", "value": CLEANUP_HOLD},
            {"op": "remove", "path": "/metadata/finalizers/1"},
        ])
    );
    let stranger = Target {
        uid: "uid-9".into(),
        ..owner()
    };
    assert!(
        LetGo::Hold.patch(&secret, &stranger).is_none(),
        "not its owner"
    );
    let release = serde_json::to_value(LetGo::Ownership.patch(&secret, &owner()).unwrap()).unwrap();
    assert_eq!(release.as_array().unwrap().len(), 4, "reference and hold");
}

#[test]
fn the_release_patch_removes_only_the_owners_reference_and_tests_it() {
    let mut secret = Secret::default();
    let other = Target {
        uid: "uid-0".into(),
        ..owner()
    };
    secret.metadata.owner_references =
        Some(vec![other.owner_reference(), owner().owner_reference()]);
    let patch = serde_json::to_value(LetGo::Ownership.patch(&secret, &owner()).unwrap()).unwrap();
    assert_eq!(patch[0]["path"], "/metadata/ownerReferences/1/uid");
    assert_eq!(patch[0]["value"], "uid-1");
    assert_eq!(patch[1]["op"], "remove");
    assert!(
        LetGo::Ownership
            .patch(&Secret::default(), &owner())
            .is_none()
    );
}

#[test]
fn what_keeper_wrote_of_a_secret_changes_with_its_data_owners_and_deletion_not_its_annotations() {
    let written = desired_secret(
        &owner(),
        "s",
        BTreeMap::from([("k".to_string(), "v".to_string())]),
        Hold::UntilReleased,
        None,
    )
    .unwrap()
    .unwrap();
    let before = written_content(&written);
    let mut claimed = written.clone();
    claimed
        .annotations_mut()
        .insert("keeper.dev/key-sweep".into(), "now".into());
    claimed.metadata.resource_version = Some("8".into());
    assert_eq!(written_content(&claimed), before);

    let mut edited = written.clone();
    edited
        .data
        .as_mut()
        .unwrap()
        .insert("k".into(), k8s_openapi::ByteString(b"w".to_vec()));
    let mut unlabelled = written.clone();
    unlabelled.labels_mut().clear();
    let mut disowned = written.clone();
    disowned.metadata.owner_references = None;
    let mut unheld = written.clone();
    unheld.metadata.finalizers = None;
    let mut deleted = written.clone();
    deleted.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    for changed in [edited, unlabelled, disowned, unheld, deleted] {
        assert_ne!(written_content(&changed), before, "{changed:?}");
    }
}

#[test]
fn a_write_that_empties_the_finalizers_of_a_secret_being_deleted_leaves_nothing() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut secret = Secret::default();
    assert!(!deleted_by_write(&secret), "live");
    secret.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    assert!(
        deleted_by_write(&secret),
        "being deleted, no finalizer left"
    );
    secret.metadata.finalizers = Some(vec![CLEANUP_HOLD.to_string()]);
    assert!(!deleted_by_write(&secret), "still held");
    secret.metadata.finalizers = Some(Vec::new());
    assert!(deleted_by_write(&secret), "an empty list holds nothing");
}

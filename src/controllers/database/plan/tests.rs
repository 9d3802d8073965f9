use serde_json::json;

use super::*;
use crate::controllers::database::tests::{
    database, deleting, instance, postgres, recorded, with_status,
};

fn desired_of(db: &CloudDatabase) -> Desired {
    desired(&db.spec, &RdsConfig::default()).unwrap()
}

#[test]
fn the_region_is_recorded_once_and_a_changed_region_is_a_mismatch() {
    assert_eq!(
        placement(None, Some("eu-west-1")),
        Placement::Record("eu-west-1".into())
    );
    assert_eq!(
        placement(Some("eu-west-1"), Some("eu-west-1")),
        Placement::Same
    );
    assert_eq!(
        placement(Some("eu-west-1"), Some("us-east-1")),
        Placement::Moved {
            recorded: "eu-west-1".into(),
            current: "us-east-1".into()
        }
    );
    // Without a configured region nothing can be compared (and every RDS call fails).
    assert_eq!(placement(Some("eu-west-1"), None), Placement::Same);
    assert_eq!(placement(None, None), Placement::Same);
    let message = region_mismatch_message("shop-orders-x", "eu-west-1", "us-east-1");
    assert!(
        message.contains("eu-west-1") && message.contains("us-east-1"),
        "{message}"
    );
}

#[test]
fn the_account_comes_from_the_arn() {
    assert_eq!(
        arn_account("arn:aws:rds:eu-central-1:123456789012:db:shop-orders-x").as_deref(),
        Some("123456789012")
    );
    assert_eq!(arn_account("not-an-arn"), None);
    assert_eq!(arn_account("arn:aws:rds:eu-central-1::db:x"), None);
}

/// F8/N5: an instance not found in another AWS account than the recorded one is not created
/// there until a person confirms that account.
#[test]
fn a_missing_instance_is_created_again_only_in_its_own_account_or_a_confirmed_one() {
    let mut db = recorded(postgres());
    let desired = desired_of(&db);
    db.status.as_mut().unwrap().account_id = Some("111111111111".into());
    assert_eq!(
        plan_apply(&db, &desired, true, None, Some("111111111111")),
        ApplyStep::Create
    );
    let changed = ApplyStep::AccountChanged {
        recorded: "111111111111".into(),
        live: "222222222222".into(),
    };
    assert_eq!(
        plan_apply(&db, &desired, true, None, Some("222222222222")),
        changed
    );
    // Not even a password is generated for it.
    assert_eq!(
        plan_apply(&db, &desired, false, None, Some("222222222222")),
        changed
    );
    let message = account_changed_message(&db, "i", "111111111111", "222222222222");
    assert!(
        message.contains("keeper.dev/confirm-backend-identity=222222222222"),
        "{message}"
    );
    db.metadata.annotations = Some(
        [(
            "keeper.dev/confirm-backend-identity".to_string(),
            "222222222222".to_string(),
        )]
        .into(),
    );
    assert_eq!(
        plan_apply(&db, &desired, true, None, Some("222222222222")),
        ApplyStep::Create
    );
    // An instance that is found is its own proof: no account is compared.
    db.metadata.annotations = None;
    let ours = instance(&db, "available");
    assert_ne!(
        plan_apply(&db, &desired, true, Some(&ours), Some("222222222222")),
        changed
    );
    // Nothing recorded (an older keeper's resource): created as before.
    db.status.as_mut().unwrap().account_id = None;
    assert_eq!(
        plan_apply(&db, &desired, true, None, Some("222222222222")),
        ApplyStep::Create
    );
}

#[test]
fn nothing_is_created_before_the_identity_and_the_password_are_stored() {
    let db = postgres();
    let desired = desired_of(&db);
    assert_eq!(
        plan_apply(&db, &desired, false, None, None),
        ApplyStep::RecordIdentity
    );
    let db = recorded(db);
    assert_eq!(
        plan_apply(&db, &desired, false, None, None),
        ApplyStep::GeneratePassword
    );
    assert_eq!(
        plan_apply(&db, &desired, true, None, None),
        ApplyStep::Create
    );
}

#[test]
fn an_instance_without_our_owner_tag_is_never_taken_over() {
    let db = recorded(postgres());
    let mut foreign = instance(&db, "available");
    foreign
        .tags
        .insert(TAG_OWNER_UID.into(), "someone-else".into());
    assert_eq!(
        plan_apply(&db, &desired_of(&db), true, Some(&foreign), None),
        ApplyStep::NameTaken {
            owner: Some("someone-else".into())
        }
    );
    foreign.tags.clear();
    assert_eq!(
        plan_apply(&db, &desired_of(&db), true, Some(&foreign), None),
        ApplyStep::NameTaken { owner: None }
    );
}

#[test]
fn an_instance_we_created_is_adopted_back_when_the_status_was_lost() {
    let db = postgres();
    let ours = instance(&db, "creating");
    assert_eq!(
        plan_apply(&db, &desired_of(&db), true, Some(&ours), None),
        ApplyStep::RecordIdentity
    );
}

#[test]
fn transitional_and_failed_states_wait_or_fail() {
    let db = recorded(postgres());
    let desired = desired_of(&db);
    for state in ["creating", "modifying", "rebooting", "deleting"] {
        assert_eq!(
            plan_apply(&db, &desired, true, Some(&instance(&db, state)), None),
            ApplyStep::Wait {
                state: state.into()
            }
        );
    }
    let mut no_endpoint = instance(&db, "available");
    no_endpoint.endpoint = None;
    assert!(matches!(
        plan_apply(&db, &desired, true, Some(&no_endpoint), None),
        ApplyStep::Wait { .. }
    ));
    // Busy but serving: published, drift deferred.
    let mut busy = instance(&db, "storage-optimization");
    busy.instance_class = "db.m6i.large".into();
    assert_eq!(
        plan_apply(&db, &desired, true, Some(&busy), None),
        ApplyStep::Publish { shrink: None }
    );
    assert!(matches!(
        plan_apply(
            &db,
            &desired,
            false,
            Some(&instance(&db, "backing-up")),
            None
        ),
        ApplyStep::Wait { .. }
    ));
    for state in ["failed", "storage-full", "incompatible-parameters"] {
        assert_eq!(
            plan_apply(&db, &desired, true, Some(&instance(&db, state)), None),
            ApplyStep::InstanceFailed {
                state: state.into()
            }
        );
    }
}

#[test]
fn a_lost_password_is_reset_on_an_available_instance() {
    let db = recorded(postgres());
    assert_eq!(
        plan_apply(
            &db,
            &desired_of(&db),
            false,
            Some(&instance(&db, "available")),
            None
        ),
        ApplyStep::ResetPassword
    );
}

#[test]
fn drift_of_class_storage_and_protection_is_modified() {
    let db = recorded(database(json!({
        "engine": "postgres", "size": "medium", "storageGiB": 80, "deletionProtection": true
    })));
    assert_eq!(
        plan_apply(
            &db,
            &desired_of(&db),
            true,
            Some(&instance(&db, "available")),
            None
        ),
        ApplyStep::Modify(Modification {
            instance_class: Some("db.t3.medium".into()),
            storage_gib: Some(80),
            deletion_protection: Some(true),
            master_password: None,
        })
    );
}

#[test]
fn storage_never_shrinks_and_only_an_explicit_request_is_reported() {
    let db = recorded(database(
        json!({"engine": "postgres", "size": "small", "storageGiB": 20}),
    ));
    let mut bigger = instance(&db, "available");
    bigger.storage_gib = 50;
    assert_eq!(
        plan_apply(&db, &desired_of(&db), true, Some(&bigger), None),
        ApplyStep::Publish {
            shrink: Some((50, 20))
        }
    );
    // A size default below the current storage (say after medium -> small) is not a request.
    let db = recorded(postgres());
    assert_eq!(
        plan_apply(&db, &desired_of(&db), true, Some(&bigger), None),
        ApplyStep::Publish { shrink: None }
    );
}

#[test]
fn an_available_instance_in_line_with_the_spec_is_published() {
    let db = recorded(postgres());
    assert_eq!(
        plan_apply(
            &db,
            &desired_of(&db),
            true,
            Some(&instance(&db, "available")),
            None
        ),
        ApplyStep::Publish { shrink: None }
    );
}

// --- plan_cleanup ---

#[test]
fn cleanup_releases_what_is_gone_or_not_ours() {
    let db = deleting(recorded(postgres()));
    assert_eq!(plan_cleanup(&db, None, None), CleanupStep::Release);
    let mut foreign = instance(&db, "available");
    foreign.tags.insert(TAG_OWNER_UID.into(), "other".into());
    assert_eq!(
        plan_cleanup(&db, Some(&foreign), None),
        CleanupStep::Release
    );
}

#[test]
fn retain_untags_even_under_deletion_protection() {
    let db = deleting(recorded(database(json!({
        "engine": "postgres", "size": "small",
        "deletionPolicy": "Retain", "deletionProtection": true
    }))));
    assert_eq!(
        plan_cleanup(&db, Some(&instance(&db, "available")), None),
        CleanupStep::Untag
    );
}

#[test]
fn deletion_protection_blocks_until_the_spec_turns_it_off_and_then_syncs_first() {
    let db = deleting(recorded(database(json!({
        "engine": "postgres", "size": "small", "deletionProtection": true
    }))));
    let mut protected = instance(&db, "available");
    protected.deletion_protection = true;
    assert_eq!(
        plan_cleanup(&db, Some(&protected), None),
        CleanupStep::Blocked
    );
    let db = deleting(recorded(postgres()));
    assert_eq!(
        plan_cleanup(&db, Some(&protected), None),
        CleanupStep::DisableProtection
    );
}

#[test]
fn a_deleting_instance_is_waited_for() {
    let db = deleting(recorded(postgres()));
    assert_eq!(
        plan_cleanup(&db, Some(&instance(&db, "deleting")), None),
        CleanupStep::WaitForDeletion
    );
}

#[test]
fn the_snapshot_id_is_recorded_before_the_delete_and_then_reused() {
    let db = deleting(recorded(postgres()));
    let available = instance(&db, "available");
    assert_eq!(
        plan_cleanup(&db, Some(&available), None),
        CleanupStep::RecordSnapshotId
    );
    let mut status = db.status.clone().unwrap();
    status.final_snapshot_id = Some("shop-orders-x-final-20260101000000".into());
    let db = with_status(db, status);
    assert_eq!(
        plan_cleanup(&db, Some(&available), None),
        CleanupStep::Delete(FinalSnapshot::Take(
            "shop-orders-x-final-20260101000000".into()
        ))
    );
}

#[test]
fn policy_delete_skips_the_final_snapshot() {
    let db = deleting(recorded(database(json!({
        "engine": "postgres", "size": "small", "deletionPolicy": "Delete"
    }))));
    assert_eq!(
        plan_cleanup(&db, Some(&instance(&db, "available")), None),
        CleanupStep::Delete(FinalSnapshot::Skip)
    );
}

#[test]
fn only_a_retained_databases_connection_secret_is_held_for_cleanup() {
    use crate::api::DatabaseDeletionPolicy;
    let mut spec = postgres().spec;
    for (policy, hold) in [
        (DatabaseDeletionPolicy::Retain, Hold::UntilReleased),
        (DatabaseDeletionPolicy::Delete, Hold::No),
        (DatabaseDeletionPolicy::Snapshot, Hold::No),
    ] {
        spec.deletion_policy = policy;
        assert_eq!(connection_hold(&spec), hold, "{policy:?}");
    }
}

#[test]
fn the_retained_message_names_the_secret_and_keepers_copy() {
    let message = retained_message(
        "db-1",
        "shop-connection",
        Some("keeper-system/retained-u-connection"),
    );
    assert!(
        message.contains("Secret shop-connection")
            && message.contains("keeper-system/retained-u-connection"),
        "{message}"
    );
    assert_eq!(
        retained_message("db-1", "shop-connection", None),
        "deletionPolicy Retain: RDS instance db-1 is left running, untagged"
    );
}

/// N5, deletion: an instance not found in another account is not "already deleted": releasing
/// would leave the original running, untracked.
#[test]
fn an_instance_missing_in_another_account_is_not_counted_as_deleted() {
    let mut db = deleting(recorded(postgres()));
    db.status.as_mut().unwrap().account_id = Some("111111111111".into());
    assert_eq!(
        plan_cleanup(&db, None, Some("222222222222")),
        CleanupStep::AccountChanged {
            recorded: "111111111111".into(),
            live: "222222222222".into()
        }
    );
    assert_eq!(
        plan_cleanup(&db, None, Some("111111111111")),
        CleanupStep::Release
    );
    db.metadata.annotations = Some(
        [(
            "keeper.dev/confirm-backend-identity".to_string(),
            "222222222222".to_string(),
        )]
        .into(),
    );
    assert_eq!(
        plan_cleanup(&db, None, Some("222222222222")),
        CleanupStep::Release
    );
}

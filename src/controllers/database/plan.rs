//! Pure decisions: from the object and what RDS reports to the next step. No I/O; the
//! reconcile performs the step and asks again, so a crash between two steps only repeats one.

mod identity;

use std::collections::BTreeMap;

use kube::ResourceExt;

pub use identity::{
    DEFAULT_USERNAME, connection_details, connection_secret_name, credentials,
    final_snapshot_identifier, generate_password, instance_identifier,
};

use super::{TAG_NAME, TAG_NAMESPACE, TAG_OWNER_UID};
use crate::api::{CloudDatabase, CloudDatabaseSpec, DatabaseDeletionPolicy};
use crate::backends::rds::{DbInstance, FinalSnapshot, Modification};
use crate::config::RdsConfig;

/// The tags keeper puts on every instance it creates; the owner UID makes an instance ours.
pub fn ownership_tags(db: &CloudDatabase) -> BTreeMap<String, String> {
    BTreeMap::from([
        (TAG_OWNER_UID.to_string(), db.uid().unwrap_or_default()),
        (
            TAG_NAMESPACE.to_string(),
            db.namespace().unwrap_or_default(),
        ),
        (TAG_NAME.to_string(), db.name_any()),
    ])
}

fn owned_by(instance: &DbInstance, db: &CloudDatabase) -> bool {
    let uid = db.uid().unwrap_or_default();
    !uid.is_empty() && instance.tags.get(TAG_OWNER_UID) == Some(&uid)
}

/// Where the instance lives, compared with the region keeper now calls (audit F8: a changed
/// operator region must never read as "instance gone" and create a second one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// No region recorded yet (a new resource, or one from before keeper recorded regions):
    /// record the current one with the identity.
    Record(String),
    /// The recorded region is the one keeper calls (or no region is configured to compare: every
    /// RDS call then fails on its own).
    Same,
    /// keeper calls another region than the instance's: act on nothing, say so.
    Moved { recorded: String, current: String },
}

pub fn placement(recorded: Option<&str>, current: Option<&str>) -> Placement {
    match (recorded, current) {
        (_, None) => Placement::Same,
        (None, Some(current)) => Placement::Record(current.to_string()),
        (Some(recorded), Some(current)) if recorded == current => Placement::Same,
        (Some(recorded), Some(current)) => Placement::Moved {
            recorded: recorded.to_string(),
            current: current.to_string(),
        },
    }
}

/// The `Ready=False` message of a live resource whose instance is in another region.
pub fn region_mismatch_message(id: &str, recorded: &str, current: &str) -> String {
    format!(
        "RDS instance {id} was created in region {recorded}, but keeper now calls region \
         {current}: keeper creates no second instance and changes nothing. Run keeper with \
         rds.region (or --rds-region) {recorded} again; to move the database, create a new \
         CloudDatabase and migrate the data"
    )
}

/// The `DeletionBlocked` message of a resource being deleted whose instance is in another region.
pub fn region_mismatch_deletion_message(id: &str, recorded: &str, current: &str) -> String {
    format!(
        "deletion of RDS instance {id} waits: it was created in region {recorded}, but keeper \
         now calls region {current}, where the instance cannot be seen (it would wrongly count as \
         gone). Run keeper with rds.region (or --rds-region) {recorded} to delete it; if the \
         instance no longer exists, remove the finalizer keeper.dev/database-cleanup by hand"
    )
}

/// The AWS account in an RDS ARN (`arn:aws:rds:<region>:<account>:db:<id>`).
pub fn arn_account(arn: &str) -> Option<String> {
    let account = arn.split(':').nth(4)?;
    (!account.is_empty()).then(|| account.to_string())
}

/// The instance the spec asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub instance_class: String,
    pub storage_gib: i32,
    /// Storage set in the spec (rather than the size's default) is a promise the user expects
    /// kept, so a request to shrink it is reported; a size default only ever grows storage.
    storage_explicit: bool,
    pub deletion_protection: bool,
}

/// What the spec asks for under the configured sizes; an error names the unconfigured size.
pub fn desired(spec: &CloudDatabaseSpec, config: &RdsConfig) -> Result<Desired, String> {
    let class = config
        .sizes
        .get(&spec.size)
        .ok_or_else(|| format!("size {:?} is not configured in rds.sizes", spec.size))?;
    Ok(Desired {
        instance_class: class.instance_class.clone(),
        storage_gib: spec.storage_gib.unwrap_or(class.storage_gib),
        storage_explicit: spec.storage_gib.is_some(),
        deletion_protection: spec.deletion_protection,
    })
}

/// RDS states that will not resolve by waiting.
fn is_failed_state(state: &str) -> bool {
    matches!(
        state,
        "failed" | "storage-full" | "restore-error" | "insufficient-capacity"
    ) || state.starts_with("incompatible-")
        || state.starts_with("inaccessible-encryption-credentials")
}

/// Busy states in which the instance still accepts connections.
fn is_serving_state(state: &str) -> bool {
    matches!(
        state,
        "backing-up"
            | "storage-optimization"
            | "configuring-enhanced-monitoring"
            | "configuring-log-exports"
            | "configuring-iam-database-auth"
    )
}

/// The next step for a live CloudDatabase.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyStep {
    /// Record the instance identifier in status before anything can exist under it.
    RecordIdentity,
    /// Generate the master password and store it in the connection Secret before creating.
    GeneratePassword,
    Create,
    /// An instance with our identifier exists but is not tagged as ours.
    NameTaken {
        owner: Option<String>,
    },
    /// RDS is working on the instance (creating, modifying, backing-up, ...): look again soon.
    Wait {
        state: String,
    },
    /// RDS reports a state that waiting will not fix.
    InstanceFailed {
        state: String,
    },
    /// The instance is ours but the connection Secret lost its password: set a new one on RDS
    /// first, then store it (repeating this after a crash converges; storing first would not,
    /// because nothing could tell a stored-but-unapplied password from the real one).
    ResetPassword,
    /// Bring class, storage or deletion protection in line with the spec.
    Modify(Modification),
    /// Available and in line with the spec: publish the connection details. `shrink` holds a
    /// refused storage reduction `(current, requested)`.
    Publish {
        shrink: Option<(i32, i32)>,
    },
}

pub fn plan_apply(
    db: &CloudDatabase,
    desired: &Desired,
    has_password: bool,
    instance: Option<&DbInstance>,
) -> ApplyStep {
    let identity_recorded = db.status.as_ref().is_some_and(|s| s.instance_id.is_some());
    let Some(instance) = instance else {
        return if !identity_recorded {
            ApplyStep::RecordIdentity
        } else if !has_password {
            ApplyStep::GeneratePassword
        } else {
            ApplyStep::Create
        };
    };
    if !owned_by(instance, db) {
        return ApplyStep::NameTaken {
            owner: instance.tags.get(TAG_OWNER_UID).cloned(),
        };
    }
    if !identity_recorded {
        // Created by us, but the status write was lost (a crash right after the create).
        return ApplyStep::RecordIdentity;
    }
    if is_failed_state(&instance.state) {
        return ApplyStep::InstanceFailed {
            state: instance.state.clone(),
        };
    }
    let shrink = |desired: &Desired| {
        (desired.storage_explicit && desired.storage_gib < instance.storage_gib)
            .then_some((instance.storage_gib, desired.storage_gib))
    };
    if instance.state != "available" || instance.endpoint.is_none() {
        // Serving but busy (a backup, hours of storage optimisation): keep the connection
        // details current and defer drift until RDS accepts modifications again.
        if is_serving_state(&instance.state) && instance.endpoint.is_some() && has_password {
            return ApplyStep::Publish {
                shrink: shrink(desired),
            };
        }
        return ApplyStep::Wait {
            state: instance.state.clone(),
        };
    }
    if !has_password {
        return ApplyStep::ResetPassword;
    }
    let modification = Modification {
        instance_class: (instance.instance_class != desired.instance_class)
            .then(|| desired.instance_class.clone()),
        storage_gib: (desired.storage_gib > instance.storage_gib).then_some(desired.storage_gib),
        deletion_protection: (instance.deletion_protection != desired.deletion_protection)
            .then_some(desired.deletion_protection),
        master_password: None,
    };
    if modification != Modification::default() {
        return ApplyStep::Modify(modification);
    }
    ApplyStep::Publish {
        shrink: shrink(desired),
    }
}

/// A short, secret-free description of a modification for conditions and events.
pub fn summarize(modification: &Modification) -> String {
    let mut parts = Vec::new();
    if let Some(class) = &modification.instance_class {
        parts.push(format!("instance class {class}"));
    }
    if let Some(gib) = modification.storage_gib {
        parts.push(format!("storage {gib} GiB"));
    }
    if let Some(protection) = modification.deletion_protection {
        parts.push(format!("deletion protection {protection}"));
    }
    parts.join(", ")
}

/// The next step for a CloudDatabase being deleted.
#[derive(Debug, Clone, PartialEq)]
pub enum CleanupStep {
    /// Nothing of ours is left (never created, verifiably gone, or not ours): drop the finalizer.
    Release,
    /// `Retain`: remove our tags so that a later resource does not take the instance for its
    /// own, then release.
    Untag,
    /// `deletionProtection: true` in the spec: wait for the user to set it false.
    Blocked,
    /// The spec says false but RDS still protects the instance: sync before deleting.
    DisableProtection,
    /// RDS is deleting the instance.
    WaitForDeletion,
    /// `Snapshot`: record the final snapshot identifier before asking for it.
    RecordSnapshotId,
    Delete(FinalSnapshot),
}

pub fn plan_cleanup(db: &CloudDatabase, instance: Option<&DbInstance>) -> CleanupStep {
    let Some(instance) = instance else {
        return CleanupStep::Release;
    };
    if !owned_by(instance, db) {
        return CleanupStep::Release;
    }
    if db.spec.deletion_policy == DatabaseDeletionPolicy::Retain {
        return CleanupStep::Untag;
    }
    if db.spec.deletion_protection {
        return CleanupStep::Blocked;
    }
    if instance.deletion_protection {
        return CleanupStep::DisableProtection;
    }
    if instance.state == "deleting" {
        return CleanupStep::WaitForDeletion;
    }
    match db.spec.deletion_policy {
        DatabaseDeletionPolicy::Delete => CleanupStep::Delete(FinalSnapshot::Skip),
        _ => match db.status.as_ref().and_then(|s| s.final_snapshot_id.clone()) {
            Some(snapshot) => CleanupStep::Delete(FinalSnapshot::Take(snapshot)),
            None => CleanupStep::RecordSnapshotId,
        },
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn nothing_is_created_before_the_identity_and_the_password_are_stored() {
        let db = postgres();
        let desired = desired_of(&db);
        assert_eq!(
            plan_apply(&db, &desired, false, None),
            ApplyStep::RecordIdentity
        );
        let db = recorded(db);
        assert_eq!(
            plan_apply(&db, &desired, false, None),
            ApplyStep::GeneratePassword
        );
        assert_eq!(plan_apply(&db, &desired, true, None), ApplyStep::Create);
    }

    #[test]
    fn an_instance_without_our_owner_tag_is_never_taken_over() {
        let db = recorded(postgres());
        let mut foreign = instance(&db, "available");
        foreign
            .tags
            .insert(TAG_OWNER_UID.into(), "someone-else".into());
        assert_eq!(
            plan_apply(&db, &desired_of(&db), true, Some(&foreign)),
            ApplyStep::NameTaken {
                owner: Some("someone-else".into())
            }
        );
        foreign.tags.clear();
        assert_eq!(
            plan_apply(&db, &desired_of(&db), true, Some(&foreign)),
            ApplyStep::NameTaken { owner: None }
        );
    }

    #[test]
    fn an_instance_we_created_is_adopted_back_when_the_status_was_lost() {
        let db = postgres();
        let ours = instance(&db, "creating");
        assert_eq!(
            plan_apply(&db, &desired_of(&db), true, Some(&ours)),
            ApplyStep::RecordIdentity
        );
    }

    #[test]
    fn transitional_and_failed_states_wait_or_fail() {
        let db = recorded(postgres());
        let desired = desired_of(&db);
        for state in ["creating", "modifying", "rebooting", "deleting"] {
            assert_eq!(
                plan_apply(&db, &desired, true, Some(&instance(&db, state))),
                ApplyStep::Wait {
                    state: state.into()
                }
            );
        }
        let mut no_endpoint = instance(&db, "available");
        no_endpoint.endpoint = None;
        assert!(matches!(
            plan_apply(&db, &desired, true, Some(&no_endpoint)),
            ApplyStep::Wait { .. }
        ));
        // Busy but serving: published, drift deferred.
        let mut busy = instance(&db, "storage-optimization");
        busy.instance_class = "db.m6i.large".into();
        assert_eq!(
            plan_apply(&db, &desired, true, Some(&busy)),
            ApplyStep::Publish { shrink: None }
        );
        assert!(matches!(
            plan_apply(&db, &desired, false, Some(&instance(&db, "backing-up"))),
            ApplyStep::Wait { .. }
        ));
        for state in ["failed", "storage-full", "incompatible-parameters"] {
            assert_eq!(
                plan_apply(&db, &desired, true, Some(&instance(&db, state))),
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
                Some(&instance(&db, "available"))
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
                Some(&instance(&db, "available"))
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
            plan_apply(&db, &desired_of(&db), true, Some(&bigger)),
            ApplyStep::Publish {
                shrink: Some((50, 20))
            }
        );
        // A size default below the current storage (say after medium -> small) is not a request.
        let db = recorded(postgres());
        assert_eq!(
            plan_apply(&db, &desired_of(&db), true, Some(&bigger)),
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
                Some(&instance(&db, "available"))
            ),
            ApplyStep::Publish { shrink: None }
        );
    }

    // --- plan_cleanup ---

    #[test]
    fn cleanup_releases_what_is_gone_or_not_ours() {
        let db = deleting(recorded(postgres()));
        assert_eq!(plan_cleanup(&db, None), CleanupStep::Release);
        let mut foreign = instance(&db, "available");
        foreign.tags.insert(TAG_OWNER_UID.into(), "other".into());
        assert_eq!(plan_cleanup(&db, Some(&foreign)), CleanupStep::Release);
    }

    #[test]
    fn retain_untags_even_under_deletion_protection() {
        let db = deleting(recorded(database(json!({
            "engine": "postgres", "size": "small",
            "deletionPolicy": "Retain", "deletionProtection": true
        }))));
        assert_eq!(
            plan_cleanup(&db, Some(&instance(&db, "available"))),
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
        assert_eq!(plan_cleanup(&db, Some(&protected)), CleanupStep::Blocked);
        let db = deleting(recorded(postgres()));
        assert_eq!(
            plan_cleanup(&db, Some(&protected)),
            CleanupStep::DisableProtection
        );
    }

    #[test]
    fn a_deleting_instance_is_waited_for() {
        let db = deleting(recorded(postgres()));
        assert_eq!(
            plan_cleanup(&db, Some(&instance(&db, "deleting"))),
            CleanupStep::WaitForDeletion
        );
    }

    #[test]
    fn the_snapshot_id_is_recorded_before_the_delete_and_then_reused() {
        let db = deleting(recorded(postgres()));
        let available = instance(&db, "available");
        assert_eq!(
            plan_cleanup(&db, Some(&available)),
            CleanupStep::RecordSnapshotId
        );
        let mut status = db.status.clone().unwrap();
        status.final_snapshot_id = Some("shop-orders-x-final-20260101000000".into());
        let db = with_status(db, status);
        assert_eq!(
            plan_cleanup(&db, Some(&available)),
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
            plan_cleanup(&db, Some(&instance(&db, "available"))),
            CleanupStep::Delete(FinalSnapshot::Skip)
        );
    }
}

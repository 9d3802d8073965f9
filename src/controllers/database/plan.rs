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
use crate::backends::identity::{self as pin, Recreate};
use crate::backends::rds::{DbInstance, FinalSnapshot, Modification};
use crate::cluster::Hold;
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

/// The `Ready=False` message of a live resource whose instance is not found in the account keeper
/// now acts in, which is not the one recorded.
pub fn account_changed_message(db: &CloudDatabase, id: &str, recorded: &str, live: &str) -> String {
    format!(
        "RDS instance {id} was created in AWS account {recorded}, but keeper now acts in account \
         {live}, where it is not found: keeper creates no second, empty instance. Run keeper with \
         credentials of account {recorded} again; {}",
        pin::confirm_hint(
            "clouddatabase",
            &db.namespace().unwrap_or_default(),
            &db.name_any(),
            live
        )
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

/// The `DeletionBlocked` message of a resource being deleted whose instance is not found in the
/// account keeper now acts in, which is not the recorded one.
pub fn account_changed_deletion_message(
    db: &CloudDatabase,
    id: &str,
    recorded: &str,
    live: &str,
) -> String {
    format!(
        "deletion of RDS instance {id} waits: it was created in AWS account {recorded}, but keeper \
         now acts in account {live}, where it is not found (it would wrongly count as gone and be \
         left running, untracked). Run keeper with credentials of account {recorded} to delete \
         it; if it no longer exists, confirm with {}",
        pin::confirm_command(
            "clouddatabase",
            &db.namespace().unwrap_or_default(),
            &db.name_any(),
            live
        ),
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
    /// The instance is not found, but keeper now acts in another AWS account than the one
    /// recorded (audit F8/N5): create nothing.
    AccountChanged {
        recorded: String,
        live: String,
    },
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

/// `live_account`: the account keeper acts in (`sts:GetCallerIdentity`), looked up when no
/// instance is found.
pub fn plan_apply(
    db: &CloudDatabase,
    desired: &Desired,
    has_password: bool,
    instance: Option<&DbInstance>,
    live_account: Option<&str>,
) -> ApplyStep {
    let identity_recorded = db.status.as_ref().is_some_and(|s| s.instance_id.is_some());
    let Some(instance) = instance else {
        let recorded = db.status.as_ref().and_then(|s| s.account_id.as_deref());
        let confirmed = db.annotations().get(pin::CONFIRM_ANNOTATION);
        let changed = live_account.and_then(|live| {
            match pin::before_recreate(recorded, live, confirmed.map(String::as_str)) {
                Recreate::Refused { recorded, live } => {
                    Some(ApplyStep::AccountChanged { recorded, live })
                }
                _ => None,
            }
        });
        return if !identity_recorded {
            ApplyStep::RecordIdentity
        } else if let Some(changed) = changed {
            changed
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

/// Whether the connection Secret is held for the database's cleanup: with `deletionPolicy:
/// Retain` the cleanup copies the master password into keeper's namespace before letting go, so
/// a namespace deletion must not take the Secret first (F4/F11). Any other policy deletes the
/// instance, and nothing reads the Secret then.
pub fn connection_hold(spec: &CloudDatabaseSpec) -> Hold {
    if spec.deletion_policy == DatabaseDeletionPolicy::Retain {
        Hold::UntilReleased
    } else {
        Hold::No
    }
}

/// The `SecretDeleted` event: the connection Secret someone deleted while the database lives
/// goes, and comes back with a new master password.
pub fn connection_let_go_message(secret: &str) -> String {
    format!(
        "Secret {secret} was deleted while the database lives: keeper lets it go and writes it again with a new master password, set on the instance"
    )
}

/// The `Retained` event: the instance is left running, untagged; its connection details stay in
/// the released Secret and, when there was one, in keeper's copy `copy`
/// (`namespace/name`), which deleting the database's namespace does not take.
pub fn retained_message(id: &str, secret: &str, copy: Option<&str>) -> String {
    match copy {
        Some(copy) => format!(
            "deletionPolicy Retain: RDS instance {id} is left running, untagged; its connection details (master password included) stay in Secret {secret} (no longer owned by the CloudDatabase) and in keeper's copy {copy}, which deleting this namespace does not take"
        ),
        None => format!("deletionPolicy Retain: RDS instance {id} is left running, untagged"),
    }
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
    /// No instance found, but in another account than the recorded one: hold the deletion.
    AccountChanged {
        recorded: String,
        live: String,
    },
    /// `Snapshot`: record the final snapshot identifier before asking for it.
    RecordSnapshotId,
    Delete(FinalSnapshot),
}

/// `live_account`: the account keeper acts in, looked up when no instance is found: another
/// account's "not found" says nothing about the instance keeper recorded (audit 2, N5).
pub fn plan_cleanup(
    db: &CloudDatabase,
    instance: Option<&DbInstance>,
    live_account: Option<&str>,
) -> CleanupStep {
    let Some(instance) = instance else {
        let recorded = db.status.as_ref().and_then(|s| s.account_id.as_deref());
        let confirmed = db.annotations().get(pin::CONFIRM_ANNOTATION);
        if let Some(live) = live_account
            && let Recreate::Refused { recorded, live } =
                pin::before_recreate(recorded, live, confirmed.map(String::as_str))
        {
            return CleanupStep::AccountChanged { recorded, live };
        }
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
mod tests;

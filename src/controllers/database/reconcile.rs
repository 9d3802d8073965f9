//! Performs the plan: observe RDS and the connection Secret, ask the planner for the next step,
//! act, and describe the result as an [`Outcome`]. Writes that must precede an RDS call (the
//! recorded identity, the stored password, the final snapshot id) are made at once, through
//! [`Context::checkpoint`] and the Secret seam; everything else is reported through the outcome.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::backend::{Connector, Created, DatabaseBackend};
use super::plan::{
    self, ApplyStep, CleanupStep, DEFAULT_USERNAME, Placement, connection_details,
    connection_secret_name, credentials, final_snapshot_identifier, generate_password,
    instance_identifier, ownership_tags, plan_apply, plan_cleanup, summarize,
};
use super::{
    CloudDatabaseReconciler, DatabaseFailure, Error, MAX_STEPS, POLL, TAG_NAME, TAG_NAMESPACE,
    TAG_OWNER_UID,
};
use crate::api::{CloudDatabase, CloudDatabaseStatus, DatabasePhase};
use crate::backends::identity;
use crate::backends::rds::{FinalSnapshot, Modification, NewInstance, Password};
use crate::cluster::retained::{Retained, retain_secret};
use crate::cluster::{LetGo, Swap, Target, let_go_of_deleted, owned_secret_object, secret_data};
use crate::error::BackendError;
use crate::runtime::conditions::DELETION_BLOCKED;
use crate::runtime::{self, Context, Next, Note, Outcome};

type Cx<C> = Context<CloudDatabaseReconciler<C>>;
type DbOutcome = Outcome<CloudDatabaseStatus>;

/// Sets the phase and `Ready` (an event when `Ready` changed, so a steady state publishes
/// nothing).
fn report(
    out: &mut DbOutcome,
    phase: DatabasePhase,
    ready: bool,
    reason: &'static str,
    message: String,
    generation: Option<i64>,
) {
    out.status.phase = Some(phase);
    out.ready(ready, reason, message, generation, false);
}

/// A busy instance (`InvalidDBInstanceState`, a conflict) is shown as `InstanceBusy` and polled
/// like any other transitional state, rather than left to the shared conflict retry: the user
/// sees why nothing happens. Every other error goes to the shared policy.
fn busy(
    error: BackendError,
    out: &mut DbOutcome,
    phase: DatabasePhase,
    generation: Option<i64>,
) -> Result<Next, Error> {
    if !error.is_conflict() {
        return Err(error.into());
    }
    report(
        out,
        phase,
        false,
        "InstanceBusy",
        format!("RDS cannot act on the instance yet: {}", error.message),
        generation,
    );
    Ok(Next::Requeue(POLL))
}

/// Brings RDS and the connection Secret in line with a live CloudDatabase.
pub async fn apply<C: Connector>(cx: &Cx<C>, db: &CloudDatabase) -> Result<DbOutcome, Error> {
    let desired =
        plan::desired(&db.spec, &cx.shared.config.rds).map_err(DatabaseFailure::InvalidSpec)?;
    let backend = cx.reconciler.connector.connect(&cx.shared, db).await?;
    let mut out = Outcome::new(db.status.clone().unwrap_or_default(), Next::AwaitChange);
    out.next = apply_steps(db, cx, &backend, &desired, &mut out).await?;
    out.status.observed_generation = db.metadata.generation;
    // Last (see `let_go_of_deleted`): a Retain database holds its connection Secret.
    let secret = connection_secret_name(db);
    let let_go =
        let_go_of_deleted(cx.kube(), &Target::of(db), std::slice::from_ref(&secret)).await?;
    if !let_go.is_empty() {
        out.note(Note::normal(
            "SecretDeleted",
            plan::connection_let_go_message(&secret),
        ));
        out.next = Next::Requeue(POLL);
    }
    Ok(out)
}

async fn apply_steps<C: Connector>(
    db: &CloudDatabase,
    cx: &Cx<C>,
    backend: &C::Backend,
    desired: &plan::Desired,
    out: &mut DbOutcome,
) -> Result<Next, Error> {
    let generation = db.metadata.generation;
    let config = &cx.shared.config.rds;
    let target = Target::of(db);
    let id = out.status.instance_id.clone().unwrap_or_else(|| {
        instance_identifier(&db.namespace().unwrap_or_default(), &db.name_any())
    });
    // Before any RDS call: an instance created in another region is never looked for here (it
    // would read as absent, and a second one would be created).
    match plan::placement(out.status.region.as_deref(), backend.region().as_deref()) {
        Placement::Record(region) => out.status.region = Some(region),
        Placement::Same => {}
        Placement::Moved { recorded, current } => {
            return Ok(out.fail(
                "RegionMismatch",
                plan::region_mismatch_message(&id, &recorded, &current),
                generation,
                false,
            ));
        }
    }
    let secret_name = connection_secret_name(db);
    // A Secret of that name that keeper did not create for this database is a conflict: its
    // data (a password, say) is never used, and it is never written.
    let read = owned_secret_object(cx.kube(), &target, &secret_name).await?;
    let mut secret: BTreeMap<String, String> = read.as_ref().map(secret_data).unwrap_or_default();
    let provisioning = DatabasePhase::Provisioning;
    let mut instance = match backend.describe(&id).await {
        Ok(instance) => instance,
        Err(e) => return busy(e, out, provisioning, generation),
    };
    // The planner reads the identity from the object; keep a copy that follows this pass.
    let mut view = db.clone();
    for _ in 0..MAX_STEPS {
        view.status = Some(out.status.clone());
        let has_password = secret.get("password").is_some_and(|p| !p.is_empty());
        // The account keeper acts in, asked of STS once per process: recorded with the
        // identifier, and compared before an instance that is not found is created again.
        let live = match instance {
            Some(_) => None,
            None => match backend.account().await {
                Ok(account) => Some(account),
                Err(e) => return busy(e, out, provisioning, generation),
            },
        };
        match plan_apply(
            &view,
            desired,
            has_password,
            instance.as_ref(),
            live.as_deref(),
        ) {
            ApplyStep::RecordIdentity => {
                out.status.instance_id = Some(id.clone());
                out.status.account_id = live.clone();
                if out.status.phase.is_none() {
                    out.status.phase = Some(provisioning);
                }
                // Persisted now: cleanup trusts it to find what we are about to create.
                cx.checkpoint(db, &out.status).await?;
            }
            ApplyStep::GeneratePassword => {
                let username = db
                    .spec
                    .master_username
                    .clone()
                    .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
                secret = credentials(&db.spec, &username, &generate_password());
                // Persisted now: the instance is created with exactly this password. Only if the
                // Secret is still as read: another writer (a second keeper) that stored a
                // password of its own meanwhile creates the instance with that one, and this
                // write is refused (409) rather than replace it.
                cx.kube()
                    .swap_secret(
                        &target,
                        Swap {
                            name: &secret_name,
                            read: read.as_ref(),
                            data: secret.clone(),
                            hold: plan::connection_hold(&db.spec),
                            annotation: None,
                        },
                    )
                    .await?;
            }
            ApplyStep::AccountChanged { recorded, live } => {
                return Ok(out.fail(
                    identity::IDENTITY_CHANGED,
                    plan::account_changed_message(db, &id, &recorded, &live),
                    generation,
                    false,
                ));
            }
            ApplyStep::Create => {
                // The account it is created in (a confirmed one replaces the recorded one).
                out.status.account_id = live.clone();
                let request = NewInstance {
                    id: id.clone(),
                    engine: db.spec.engine,
                    engine_version: db.spec.engine_version.clone(),
                    instance_class: desired.instance_class.clone(),
                    storage_gib: desired.storage_gib,
                    username: secret.get("username").cloned().unwrap_or_default(),
                    password: Password::new(secret.get("password").cloned().unwrap_or_default()),
                    database_name: db.spec.database_name.clone(),
                    deletion_protection: desired.deletion_protection,
                    tags: ownership_tags(db),
                    db_subnet_group_name: config.db_subnet_group_name.clone(),
                    vpc_security_group_ids: config.vpc_security_group_ids.clone(),
                };
                match backend.create(&request).await {
                    Ok(Created::Requested) => out.note(Note::normal(
                        "CreateRequested",
                        format!("requested RDS instance {id}"),
                    )),
                    // Someone created it between our look and our call: whose it is decides.
                    Ok(Created::AlreadyExists) => {}
                    Err(e) => return busy(e, out, provisioning, generation),
                }
                match backend.describe(&id).await {
                    Ok(found) => instance = found,
                    Err(e) => return busy(e, out, provisioning, generation),
                }
            }
            ApplyStep::NameTaken { owner } => {
                let whose = match owner {
                    Some(uid) => format!("to the resource with UID {uid}"),
                    None => "to something keeper does not manage".to_string(),
                };
                return Ok(out.fail(
                    "NameTaken",
                    format!(
                        "the RDS instance name {id} is taken: the instance belongs {whose}; \
                         keeper will not take it over"
                    ),
                    generation,
                    false,
                ));
            }
            ApplyStep::Wait { state } => {
                report(
                    out,
                    provisioning,
                    false,
                    "Waiting",
                    format!("RDS instance {id} is {state}"),
                    generation,
                );
                return Ok(Next::Requeue(POLL));
            }
            ApplyStep::InstanceFailed { state } => {
                return Ok(out.fail(
                    "InstanceFailed",
                    format!("RDS reports instance {id} as {state}; it needs attention in AWS"),
                    generation,
                    false,
                ));
            }
            ApplyStep::ResetPassword => {
                let password = generate_password();
                let modification = Modification {
                    master_password: Some(password.clone()),
                    ..Modification::default()
                };
                if let Err(e) = backend.modify(&id, &modification).await {
                    return busy(e, out, provisioning, generation);
                }
                let username = secret
                    .get("username")
                    .cloned()
                    .or_else(|| db.spec.master_username.clone())
                    .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
                secret = credentials(&db.spec, &username, &password);
                cx.kube()
                    .apply_secret(
                        &target,
                        &secret_name,
                        secret.clone(),
                        plan::connection_hold(&db.spec),
                    )
                    .await?;
                out.note(Note::normal(
                    "PasswordReset",
                    "the connection Secret had lost the password: a new master password was set",
                ));
            }
            ApplyStep::Modify(modification) => {
                if let Err(e) = backend.modify(&id, &modification).await {
                    return busy(e, out, provisioning, generation);
                }
                report(
                    out,
                    provisioning,
                    false,
                    "Modifying",
                    format!("applying {} to RDS instance {id}", summarize(&modification)),
                    generation,
                );
                return Ok(Next::Requeue(POLL));
            }
            ApplyStep::Publish { shrink } => {
                let instance = instance.as_ref().expect("planned only for an instance");
                let endpoint = instance
                    .endpoint
                    .clone()
                    .expect("planned only with an endpoint");
                if out.status.account_id.is_none() {
                    out.status.account_id = plan::arn_account(&instance.arn);
                }
                let details = connection_details(&secret, db.spec.engine, &endpoint);
                cx.kube()
                    .apply_secret(
                        &target,
                        &secret_name,
                        details,
                        plan::connection_hold(&db.spec),
                    )
                    .await?;
                out.status.endpoint = Some(endpoint);
                let next = match shrink {
                    Some((current, requested)) => out.fail(
                        "StorageCannotShrink",
                        format!(
                            "spec.storageGiB is {requested} but the instance has {current} GiB \
                             and RDS storage can only grow: set storageGiB to at least \
                             {current}; the instance keeps running and its connection Secret \
                             is current"
                        ),
                        generation,
                        false,
                    ),
                    None => {
                        report(
                            out,
                            DatabasePhase::Ready,
                            true,
                            "Available",
                            format!("RDS instance {id} is available"),
                            generation,
                        );
                        Next::Requeue(runtime::RESYNC)
                    }
                };
                return Ok(next);
            }
        }
    }
    Ok(Next::Requeue(POLL))
}

/// Cleans up after a CloudDatabase being deleted; releases the finalizer only once RDS reports
/// the instance gone (or retained by policy).
pub async fn cleanup<C: Connector>(cx: &Cx<C>, db: &CloudDatabase) -> Result<DbOutcome, Error> {
    let mut out = Outcome::new(db.status.clone().unwrap_or_default(), Next::Release);
    // The identity is recorded before any create call: without it nothing was ever created.
    if let Some(id) = out.status.instance_id.clone() {
        let backend = cx.reconciler.connector.connect(&cx.shared, db).await?;
        out.next = cleanup_steps(db, cx, &backend, &id, &mut out).await?;
    }
    if out.next == Next::Release {
        // A hold left on the connection Secret (Retain, or a policy changed since) goes with the
        // resource: nothing reads the Secret any more (a retained one was released already).
        cx.kube()
            .let_go_secret(&Target::of(db), &connection_secret_name(db), LetGo::Hold)
            .await?;
        // The shared flow writes no status when keeper's finalizer is the object's last; with
        // another one left the object stays a while, and its status says it is going.
        out.status.phase = Some(DatabasePhase::Deleting);
    }
    out.status.observed_generation = db.metadata.generation;
    Ok(out)
}

async fn cleanup_steps<C: Connector>(
    db: &CloudDatabase,
    cx: &Cx<C>,
    backend: &C::Backend,
    id: &str,
    out: &mut DbOutcome,
) -> Result<Next, Error> {
    let generation = db.metadata.generation;
    let deleting = DatabasePhase::Deleting;
    // In another region the instance cannot be seen, and "not found" would release the
    // finalizer over a running instance: hold the deletion and say why.
    if let Placement::Moved { recorded, current } =
        plan::placement(out.status.region.as_deref(), backend.region().as_deref())
    {
        return Ok(out.deletion_blocked_permanently(
            "RegionMismatch",
            plan::region_mismatch_deletion_message(id, &recorded, &current),
            generation,
        ));
    }
    let mut instance = match backend.describe(id).await {
        Ok(instance) => instance,
        Err(e) => return busy(e, out, deleting, generation),
    };
    let mut view = db.clone();
    for _ in 0..MAX_STEPS {
        view.status = Some(out.status.clone());
        // Asked of STS (once per process) only when no instance is found.
        let live = match instance {
            Some(_) => None,
            None => match backend.account().await {
                Ok(account) => Some(account),
                Err(e) => return busy(e, out, deleting, generation),
            },
        };
        let step = plan_cleanup(&view, instance.as_ref(), live.as_deref());
        let was_blocked = out
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == DELETION_BLOCKED);
        if step != CleanupStep::Blocked && was_blocked {
            out.deletion_unblocked();
            out.note(Note::normal(
                "DeletionUnblocked",
                "deletionProtection is false: deleting",
            ));
        }
        match step {
            CleanupStep::Release => return Ok(Next::Release),
            CleanupStep::AccountChanged { recorded, live } => {
                return Ok(out.deletion_blocked_permanently(
                    identity::IDENTITY_CHANGED,
                    plan::account_changed_deletion_message(db, id, &recorded, &live),
                    generation,
                ));
            }
            CleanupStep::Untag => {
                let instance = instance.as_ref().expect("planned only for an instance");
                let keys = [TAG_OWNER_UID, TAG_NAMESPACE, TAG_NAME].map(String::from);
                match backend.remove_tags(instance, &keys).await {
                    Ok(()) => {}
                    Err(e) if e.is_gone() => {}
                    Err(e) => return busy(e, out, deleting, generation),
                }
                // The instance keeps running and its connection details stay usable: the
                // Secret is released from the resource so the garbage collector keeps it, after
                // a copy went to keeper's namespace, which no deletion of this namespace takes.
                let secret = connection_secret_name(db);
                let operator_namespace = &cx.shared.operator_namespace;
                let copy = match retain_secret(
                    cx.kube(),
                    &Target::of(db),
                    (&secret, "connection"),
                    operator_namespace,
                    Some(id),
                )
                .await?
                {
                    Retained::Copied { copy } => Some(format!("{operator_namespace}/{copy}")),
                    Retained::Missing => None,
                };
                out.note(Note::normal(
                    "Retained",
                    plan::retained_message(id, &secret, copy.as_deref()),
                ));
                return Ok(Next::Release);
            }
            CleanupStep::Blocked => {
                report(
                    out,
                    deleting,
                    false,
                    "Deleting",
                    format!("deleting RDS instance {id}"),
                    generation,
                );
                out.deletion_blocked(
                    "DeletionProtection",
                    format!(
                        "deletion of RDS instance {id} is blocked by deletionProtection. To let \
                         the deletion proceed, run `kubectl patch clouddatabase {} -n {} \
                         --type merge -p '{{\"spec\":{{\"deletionProtection\":false}}}}'`.",
                        db.name_any(),
                        db.namespace().unwrap_or_default()
                    ),
                    generation,
                );
                // Setting the flag false is a spec change, which reconciles at once.
                return Ok(Next::Requeue(runtime::RESYNC));
            }
            CleanupStep::DisableProtection => {
                let modification = Modification {
                    deletion_protection: Some(false),
                    ..Modification::default()
                };
                if let Err(e) = backend.modify(id, &modification).await {
                    return busy(e, out, deleting, generation);
                }
                match backend.describe(id).await {
                    Ok(found) => instance = found,
                    Err(e) => return busy(e, out, deleting, generation),
                }
            }
            CleanupStep::WaitForDeletion => {
                report(
                    out,
                    deleting,
                    false,
                    "Deleting",
                    format!("RDS is deleting instance {id}"),
                    generation,
                );
                return Ok(Next::Requeue(POLL));
            }
            CleanupStep::RecordSnapshotId => {
                out.status.final_snapshot_id =
                    Some(final_snapshot_identifier(id, Timestamp::now()));
                out.status.phase = Some(deleting);
                // Persisted now: a retry must ask for the same snapshot, never a second one.
                cx.checkpoint(db, &out.status).await?;
            }
            CleanupStep::Delete(final_snapshot) => {
                match backend.delete(id, &final_snapshot).await {
                    Ok(()) => {
                        let note = match &final_snapshot {
                            FinalSnapshot::Take(snapshot) => format!(
                                "deleting RDS instance {id} after final snapshot {snapshot}"
                            ),
                            FinalSnapshot::Skip => {
                                format!("deleting RDS instance {id} without a final snapshot")
                            }
                        };
                        out.note(Note::normal("DeleteRequested", note));
                    }
                    Err(e) if e.is_gone() => return Ok(Next::Release),
                    Err(e) => return busy(e, out, deleting, generation),
                }
                // Verify: the finalizer goes only once RDS says the instance is gone.
                match backend.describe(id).await {
                    Ok(found) => instance = found,
                    Err(e) => return busy(e, out, deleting, generation),
                }
            }
        }
    }
    Ok(Next::Requeue(POLL))
}

//! CloudDatabase controller: one RDS instance per resource, a connection Secret, and deletion
//! that is verified (the finalizer stays until RDS reports the instance gone), never deadlocks
//! on deletion protection, and takes a final snapshot by default.
//!
//! Each reconcile observes RDS, asks a pure planner ([`plan_apply`], [`plan_cleanup`]) for the
//! next step and performs it. Every step is idempotent and ordered so that a crash between any
//! two of them is harmless:
//! - the instance identifier is derived from namespace and name and recorded in status before
//!   `CreateDBInstance`, so a restarted keeper finds the instance it created;
//! - the master password is stored in the connection Secret before `CreateDBInstance` and reused
//!   after a crash, so the Secret always holds the instance's password;
//! - the final snapshot identifier is recorded in status before `DeleteDBInstance` and reused on
//!   retry, so one deletion never asks for two snapshots.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use rand::Rng;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::api::{
    CloudDatabase, CloudDatabaseSpec, CloudDatabaseStatus, DatabaseDeletionPolicy,
    DatabaseEndpoint, DatabasePhase, Engine,
};
use crate::backends::rds::{
    DatabaseBackend, DbInstance, FinalSnapshot, Modification, NewInstance, Password, RdsBackend,
    RdsError,
};
use crate::config::RdsConfig;
use crate::metrics::BackendOutcome;
use crate::runtime::conditions::{self, DELETION_BLOCKED, READY};
use crate::runtime::gauges::StoreGauge;
use crate::runtime::{self, Cleanup, Context, ReconcileError, Reconciler, Shared, secrets};
use crate::server::Readiness;

/// Tags keeper puts on every instance it creates. The owner UID is what makes an instance ours.
pub const TAG_OWNER_UID: &str = "keeper.dev/owner-uid";
pub const TAG_NAMESPACE: &str = "keeper.dev/namespace";
pub const TAG_NAME: &str = "keeper.dev/name";

/// How often an instance in a transitional state is looked at again.
const POLL: Duration = Duration::from_secs(15);
/// Retry interval after a permanent error (access denied, a request RDS refuses): it needs a
/// change elsewhere (IAM, the spec), which a spec edit triggers at once anyway.
const PERMANENT_RETRY: Duration = runtime::RESYNC;
/// Upper bound of planner steps in one reconcile; each step changes what the planner sees, so
/// this is never reached unless RDS contradicts itself, and then we simply look again later.
const MAX_STEPS: usize = 8;

const DEFAULT_USERNAME: &str = "keeper";
const PASSWORD_LENGTH: usize = 32;
/// Characters RDS accepts in a master password for both engines (no `/`, `"`, `@` or space).
const PASSWORD_CHARSET: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#%*+-.=^_~";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    /// Only transient RDS errors are returned (and retried with backoff); permanent ones become
    /// conditions.
    #[error(transparent)]
    Rds(#[from] RdsError),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Rds(e) => e.outcome(),
        }
    }
}

pub struct CloudDatabaseReconciler<B> {
    backend: B,
}

impl<B: DatabaseBackend> Reconciler for CloudDatabaseReconciler<B> {
    type Resource = CloudDatabase;
    type Error = Error;
    const NAME: &'static str = "clouddatabase";
    const FINALIZER: &'static str = "keeper.dev/database-cleanup";

    async fn apply(&self, obj: Arc<CloudDatabase>, ctx: &Context<Self>) -> Result<Action, Error> {
        reconcile_database(&obj, &self.backend, ctx, &ctx.shared.config.rds).await
    }

    async fn cleanup(
        &self,
        obj: Arc<CloudDatabase>,
        ctx: &Context<Self>,
    ) -> Result<Cleanup, Error> {
        cleanup_database(&obj, &self.backend, ctx).await
    }
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let backend = RdsBackend::from_config(&shared.config.rds, shared.metrics.clone()).await;
    let api = Api::<CloudDatabase>::all(shared.client.clone());
    // Owning the connection Secrets brings a deleted or edited Secret back at once.
    let controller = Controller::new(api, watcher::Config::default()).owns(
        Api::<Secret>::all(shared.client.clone()),
        watcher::Config::default().labels("app.kubernetes.io/managed-by=keeper"),
    );
    shared.metrics.register(StoreGauge::new(
        "keeper_databases",
        "CloudDatabases by phase.",
        controller.store(),
        &[],
        "phase",
        &["Provisioning", "Ready", "Failed", "Deleting"],
        |db: &CloudDatabase| Some(format!("{:?}", db.status.as_ref()?.phase?)),
    ));
    shared.metrics.register(StoreGauge::new(
        "keeper_deletion_blocked",
        "Resources whose deletion waits for the user (DeletionBlocked=True).",
        controller.store(),
        &[("kind", "CloudDatabase")],
        "",
        &[""],
        |db: &CloudDatabase| {
            conditions::is_true(&db.status.as_ref()?.conditions, DELETION_BLOCKED).then(String::new)
        },
    ));
    let ctx = Arc::new(Context::new(shared, CloudDatabaseReconciler { backend }));
    runtime::run(controller, ctx, readiness, shutdown).await;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Identity, passwords and connection details (pure)
// ---------------------------------------------------------------------------------------------

/// The RDS `DBInstanceIdentifier` of a CloudDatabase: `<namespace>-<name>` cleaned up to what
/// RDS accepts (lowercase letters, digits and single hyphens, starting with a letter), cut to
/// fit, and always followed by a hash of the exact namespace and name. The hash is not only for
/// shortening: joining with `-` is ambiguous (`a-b/c` and `a/b-c`), and two resources must
/// never map to the same instance.
pub fn instance_identifier(namespace: &str, name: &str) -> String {
    const MAX: usize = 63;
    const HASH_LEN: usize = 8;
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let hash: String = digest
        .iter()
        .take(HASH_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut base = String::new();
    for c in format!("{namespace}-{name}").chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        if c == '-' && (base.is_empty() || base.ends_with('-')) {
            continue;
        }
        base.push(c);
    }
    if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
        base.insert_str(0, "db-");
    }
    base.truncate(MAX - HASH_LEN - 1);
    while base.ends_with('-') {
        base.pop();
    }
    format!("{base}-{hash}")
}

/// A unique final snapshot identifier: `<instanceId>-final-<UTC timestamp>`.
fn final_snapshot_identifier(instance_id: &str, now: Timestamp) -> String {
    format!("{instance_id}-final-{}", now.strftime("%Y%m%d%H%M%S"))
}

/// A fresh master password from the thread-local CSPRNG (ChaCha, seeded from the OS).
fn generate_password() -> Password {
    let mut rng = rand::rng();
    Password::new(
        (0..PASSWORD_LENGTH)
            .map(|_| PASSWORD_CHARSET[rng.random_range(0..PASSWORD_CHARSET.len())] as char)
            .collect(),
    )
}

/// Percent-encodes everything but RFC 3986 unreserved characters, so any password is safe in
/// the userinfo of a URI.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgres => "postgres",
        Engine::Mysql => "mysql",
    }
}

/// The database a client connects to when `databaseName` is not set.
fn default_database(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgres => "postgres",
        Engine::Mysql => "mysql",
    }
}

fn connection_secret_name(db: &CloudDatabase) -> String {
    db.spec
        .connection_secret_name
        .clone()
        .unwrap_or_else(|| format!("{}-connection", db.name_any()))
}

/// What the connection Secret holds before the instance exists: enough to create the instance
/// with, and to reuse after a crash.
fn credentials(
    spec: &CloudDatabaseSpec,
    username: &str,
    password: &Password,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("username".to_string(), username.to_string()),
        ("password".to_string(), password.expose().to_string()),
        ("engine".to_string(), engine_name(spec.engine).to_string()),
        (
            "database".to_string(),
            spec.database_name
                .clone()
                .unwrap_or_else(|| default_database(spec.engine).to_string()),
        ),
    ])
}

/// The complete connection Secret of an available instance. `stored` is what the Secret holds
/// now: the user name and database were fixed when the instance was created.
fn connection_details(
    stored: &BTreeMap<String, String>,
    engine: Engine,
    endpoint: &DatabaseEndpoint,
) -> BTreeMap<String, String> {
    let username = stored
        .get("username")
        .cloned()
        .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
    let password = stored.get("password").cloned().unwrap_or_default();
    let database = stored
        .get("database")
        .cloned()
        .unwrap_or_else(|| default_database(engine).to_string());
    let scheme = match engine {
        Engine::Postgres => "postgresql",
        Engine::Mysql => "mysql",
    };
    let uri = format!(
        "{scheme}://{}:{}@{}:{}/{}",
        percent_encode(&username),
        percent_encode(&password),
        endpoint.address,
        endpoint.port,
        percent_encode(&database)
    );
    BTreeMap::from([
        ("host".to_string(), endpoint.address.clone()),
        ("port".to_string(), endpoint.port.to_string()),
        ("username".to_string(), username),
        ("password".to_string(), password),
        ("database".to_string(), database),
        ("engine".to_string(), engine_name(engine).to_string()),
        ("uri".to_string(), uri),
    ])
}

fn ownership_tags(db: &CloudDatabase) -> BTreeMap<String, String> {
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

// ---------------------------------------------------------------------------------------------
// The state machine (pure)
// ---------------------------------------------------------------------------------------------

/// The instance the spec asks for.
#[derive(Debug, Clone, PartialEq)]
struct Desired {
    instance_class: String,
    storage_gib: i32,
    /// Storage set in the spec (rather than the size's default) is a promise the user expects
    /// kept, so a request to shrink it is reported; a size default only ever grows storage.
    storage_explicit: bool,
    deletion_protection: bool,
}

fn desired(spec: &CloudDatabaseSpec, config: &RdsConfig) -> Result<Desired, String> {
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

/// The next step for a live CloudDatabase.
#[derive(Debug, Clone, PartialEq)]
enum ApplyStep {
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

fn plan_apply(
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
    if instance.state != "available" || instance.endpoint.is_none() {
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
    let shrink = (desired.storage_explicit && desired.storage_gib < instance.storage_gib)
        .then_some((instance.storage_gib, desired.storage_gib));
    ApplyStep::Publish { shrink }
}

/// The next step for a CloudDatabase being deleted.
#[derive(Debug, Clone, PartialEq)]
enum CleanupStep {
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

fn plan_cleanup(db: &CloudDatabase, instance: Option<&DbInstance>) -> CleanupStep {
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

// ---------------------------------------------------------------------------------------------
// Performing the steps
// ---------------------------------------------------------------------------------------------

/// The Kubernetes side of a reconcile, behind a trait so that the controller logic runs in
/// tests without an API server. The real implementation is the shared [`Context`].
trait Cluster: Send + Sync {
    /// The connection Secret's data; empty when it does not exist.
    fn read_secret(
        &self,
        db: &CloudDatabase,
        name: &str,
    ) -> impl Future<Output = Result<BTreeMap<String, String>, kube::Error>> + Send;
    fn write_secret(
        &self,
        db: &CloudDatabase,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Writes the status if it differs from `db`'s.
    fn write_status(
        &self,
        db: &CloudDatabase,
        status: &CloudDatabaseStatus,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    fn publish(
        &self,
        db: &CloudDatabase,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> impl Future<Output = ()> + Send;
}

impl<B: DatabaseBackend> Cluster for Context<CloudDatabaseReconciler<B>> {
    async fn read_secret(
        &self,
        db: &CloudDatabase,
        name: &str,
    ) -> Result<BTreeMap<String, String>, kube::Error> {
        let namespace = db.namespace().unwrap_or_default();
        Ok(secrets::read(&self.shared.client, &namespace, name)
            .await?
            .unwrap_or_default())
    }

    async fn write_secret(
        &self,
        db: &CloudDatabase,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), kube::Error> {
        secrets::apply(&self.shared.client, db, name, data)
            .await
            .map(|_| ())
    }

    async fn write_status(
        &self,
        db: &CloudDatabase,
        status: &CloudDatabaseStatus,
    ) -> Result<(), kube::Error> {
        self.update_status(db, status).await.map(|_| ())
    }

    async fn publish(&self, db: &CloudDatabase, type_: EventType, reason: &str, note: String) {
        Context::publish(self, db, type_, reason, note, reason).await
    }
}

/// Sets phase and the `Ready` condition, publishing an event when the condition changed (so a
/// steady state publishes nothing).
async fn report<C: Cluster>(
    cluster: &C,
    db: &CloudDatabase,
    status: &mut CloudDatabaseStatus,
    phase: DatabasePhase,
    ready: bool,
    reason: &str,
    message: String,
) {
    status.phase = Some(phase);
    let changed = conditions::set(
        &mut status.conditions,
        READY,
        ready,
        reason,
        message.clone(),
        db.metadata.generation,
    );
    if changed {
        let type_ = if phase == DatabasePhase::Failed {
            EventType::Warning
        } else {
            EventType::Normal
        };
        cluster.publish(db, type_, reason, message).await;
    }
}

/// What a failed RDS call means for the reconcile: transient errors are returned (backoff),
/// a busy instance is polled, and permanent errors become a `Failed` phase with RDS's message.
async fn on_rds_error<C: Cluster>(
    cluster: &C,
    db: &CloudDatabase,
    status: &mut CloudDatabaseStatus,
    phase: DatabasePhase,
    error: RdsError,
) -> Result<Action, Error> {
    match error {
        e if e.is_transient() => Err(e.into()),
        RdsError::InvalidState(message) => {
            report(
                cluster,
                db,
                status,
                phase,
                false,
                "InstanceBusy",
                format!("RDS cannot act on the instance yet: {message}"),
            )
            .await;
            Ok(Action::requeue(POLL))
        }
        // Gone between two calls: the next look decides what that means.
        RdsError::NotFound => Ok(Action::requeue(Duration::from_secs(1))),
        e => {
            let reason = match e {
                RdsError::AccessDenied(_) => "AccessDenied",
                _ => "RdsRejected",
            };
            report(
                cluster,
                db,
                status,
                DatabasePhase::Failed,
                false,
                reason,
                e.to_string(),
            )
            .await;
            Ok(Action::requeue(PERMANENT_RETRY))
        }
    }
}

/// Reconciles a live CloudDatabase and writes its status.
async fn reconcile_database<B: DatabaseBackend, C: Cluster>(
    db: &CloudDatabase,
    backend: &B,
    cluster: &C,
    config: &RdsConfig,
) -> Result<Action, Error> {
    let mut status = db.status.clone().unwrap_or_default();
    let action = apply_steps(db, backend, cluster, config, &mut status).await?;
    status.observed_generation = db.metadata.generation;
    cluster.write_status(db, &status).await?;
    Ok(action)
}

async fn apply_steps<B: DatabaseBackend, C: Cluster>(
    db: &CloudDatabase,
    backend: &B,
    cluster: &C,
    config: &RdsConfig,
    status: &mut CloudDatabaseStatus,
) -> Result<Action, Error> {
    let desired = match desired(&db.spec, config) {
        Ok(desired) => desired,
        Err(message) => {
            report(
                cluster,
                db,
                status,
                DatabasePhase::Failed,
                false,
                "InvalidSpec",
                message,
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    let id = status.instance_id.clone().unwrap_or_else(|| {
        instance_identifier(&db.namespace().unwrap_or_default(), &db.name_any())
    });
    let secret_name = connection_secret_name(db);
    let mut secret = cluster.read_secret(db, &secret_name).await?;
    let mut instance = match backend.describe(&id).await {
        Ok(instance) => instance,
        Err(e) => return on_rds_error(cluster, db, status, DatabasePhase::Provisioning, e).await,
    };
    // The planner reads the identity from the object; keep a copy that follows this pass.
    let mut view = db.clone();
    for _ in 0..MAX_STEPS {
        view.status = Some(status.clone());
        let has_password = secret.get("password").is_some_and(|p| !p.is_empty());
        match plan_apply(&view, &desired, has_password, instance.as_ref()) {
            ApplyStep::RecordIdentity => {
                status.instance_id = Some(id.clone());
                if status.phase.is_none() {
                    status.phase = Some(DatabasePhase::Provisioning);
                }
                // Persisted now: cleanup trusts it to find what we are about to create.
                cluster.write_status(db, status).await?;
            }
            ApplyStep::GeneratePassword => {
                let username = db
                    .spec
                    .master_username
                    .clone()
                    .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
                secret = credentials(&db.spec, &username, &generate_password());
                // Persisted now: the instance is created with exactly this password.
                cluster
                    .write_secret(db, &secret_name, secret.clone())
                    .await?;
            }
            ApplyStep::Create => {
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
                    Ok(()) => {
                        cluster
                            .publish(
                                db,
                                EventType::Normal,
                                "CreateRequested",
                                format!("requested RDS instance {id}"),
                            )
                            .await;
                    }
                    // Someone created it between our look and our call: whose it is decides.
                    Err(RdsError::AlreadyExists) => {}
                    Err(e) => {
                        return on_rds_error(cluster, db, status, DatabasePhase::Provisioning, e)
                            .await;
                    }
                }
                match backend.describe(&id).await {
                    Ok(found) => instance = found,
                    Err(e) => {
                        return on_rds_error(cluster, db, status, DatabasePhase::Provisioning, e)
                            .await;
                    }
                }
            }
            ApplyStep::NameTaken { owner } => {
                let whose = match owner {
                    Some(uid) => format!("to the resource with UID {uid}"),
                    None => "to something keeper does not manage".to_string(),
                };
                report(
                    cluster,
                    db,
                    status,
                    DatabasePhase::Failed,
                    false,
                    "NameTaken",
                    format!(
                        "the RDS instance name {id} is taken: the instance belongs {whose}; \
                         keeper will not take it over"
                    ),
                )
                .await;
                return Ok(Action::requeue(PERMANENT_RETRY));
            }
            ApplyStep::Wait { state } => {
                report(
                    cluster,
                    db,
                    status,
                    DatabasePhase::Provisioning,
                    false,
                    "Waiting",
                    format!("RDS instance {id} is {state}"),
                )
                .await;
                return Ok(Action::requeue(POLL));
            }
            ApplyStep::InstanceFailed { state } => {
                report(
                    cluster,
                    db,
                    status,
                    DatabasePhase::Failed,
                    false,
                    "InstanceFailed",
                    format!("RDS reports instance {id} as {state}; it needs attention in AWS"),
                )
                .await;
                return Ok(Action::requeue(PERMANENT_RETRY));
            }
            ApplyStep::ResetPassword => {
                let password = generate_password();
                let modification = Modification {
                    master_password: Some(password.clone()),
                    ..Modification::default()
                };
                if let Err(e) = backend.modify(&id, &modification).await {
                    return on_rds_error(cluster, db, status, DatabasePhase::Provisioning, e).await;
                }
                let username = secret
                    .get("username")
                    .cloned()
                    .or_else(|| db.spec.master_username.clone())
                    .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
                secret = credentials(&db.spec, &username, &password);
                cluster
                    .write_secret(db, &secret_name, secret.clone())
                    .await?;
                cluster
                    .publish(
                        db,
                        EventType::Normal,
                        "PasswordReset",
                        "the connection Secret had lost the password: a new master password was set"
                            .to_string(),
                    )
                    .await;
            }
            ApplyStep::Modify(modification) => {
                if let Err(e) = backend.modify(&id, &modification).await {
                    return on_rds_error(cluster, db, status, DatabasePhase::Provisioning, e).await;
                }
                report(
                    cluster,
                    db,
                    status,
                    DatabasePhase::Provisioning,
                    false,
                    "Modifying",
                    format!("applying {} to RDS instance {id}", summarize(&modification)),
                )
                .await;
                return Ok(Action::requeue(POLL));
            }
            ApplyStep::Publish { shrink } => {
                let instance = instance.as_ref().expect("planned only for an instance");
                let endpoint = instance
                    .endpoint
                    .clone()
                    .expect("planned only with an endpoint");
                let details = connection_details(&secret, db.spec.engine, &endpoint);
                cluster.write_secret(db, &secret_name, details).await?;
                status.endpoint = Some(endpoint);
                match shrink {
                    Some((current, requested)) => {
                        report(
                            cluster,
                            db,
                            status,
                            DatabasePhase::Failed,
                            false,
                            "StorageCannotShrink",
                            format!(
                                "spec.storageGiB is {requested} but the instance has {current} GiB \
                                 and RDS storage can only grow: set storageGiB to at least \
                                 {current}; the instance keeps running and its connection Secret \
                                 is current"
                            ),
                        )
                        .await
                    }
                    None => {
                        report(
                            cluster,
                            db,
                            status,
                            DatabasePhase::Ready,
                            true,
                            "Available",
                            format!("RDS instance {id} is available"),
                        )
                        .await
                    }
                }
                return Ok(Action::requeue(runtime::RESYNC));
            }
        }
    }
    Ok(Action::requeue(POLL))
}

/// A short, secret-free description of a modification for conditions and events.
fn summarize(modification: &Modification) -> String {
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

/// Cleans up after a CloudDatabase being deleted and writes its status while it waits.
async fn cleanup_database<B: DatabaseBackend, C: Cluster>(
    db: &CloudDatabase,
    backend: &B,
    cluster: &C,
) -> Result<Cleanup, Error> {
    let mut status = db.status.clone().unwrap_or_default();
    let Some(id) = status.instance_id.clone() else {
        // The identity is recorded before any create call: nothing was ever created.
        return Ok(Cleanup::Done);
    };
    let outcome = cleanup_steps(db, backend, cluster, &id, &mut status).await?;
    if let Cleanup::Wait(_) = outcome {
        status.observed_generation = db.metadata.generation;
        cluster.write_status(db, &status).await?;
    }
    Ok(outcome)
}

async fn cleanup_steps<B: DatabaseBackend, C: Cluster>(
    db: &CloudDatabase,
    backend: &B,
    cluster: &C,
    id: &str,
    status: &mut CloudDatabaseStatus,
) -> Result<Cleanup, Error> {
    let mut instance = match backend.describe(id).await {
        Ok(instance) => instance,
        Err(e) => {
            return on_rds_error(cluster, db, status, DatabasePhase::Deleting, e)
                .await
                .map(Cleanup::Wait);
        }
    };
    let mut view = db.clone();
    for _ in 0..MAX_STEPS {
        view.status = Some(status.clone());
        let step = plan_cleanup(&view, instance.as_ref());
        if step != CleanupStep::Blocked
            && conditions::remove(&mut status.conditions, DELETION_BLOCKED)
        {
            cluster
                .publish(
                    db,
                    EventType::Normal,
                    "DeletionUnblocked",
                    "deletionProtection is false: deleting".to_string(),
                )
                .await;
        }
        match step {
            CleanupStep::Release => return Ok(Cleanup::Done),
            CleanupStep::Untag => {
                let instance = instance.as_ref().expect("planned only for an instance");
                let keys = [TAG_OWNER_UID, TAG_NAMESPACE, TAG_NAME].map(String::from);
                match backend.remove_tags(instance, &keys).await {
                    Ok(()) | Err(RdsError::NotFound) => {}
                    Err(e) => {
                        return on_rds_error(cluster, db, status, DatabasePhase::Deleting, e)
                            .await
                            .map(Cleanup::Wait);
                    }
                }
                cluster
                    .publish(
                        db,
                        EventType::Normal,
                        "Retained",
                        format!(
                            "deletionPolicy Retain: RDS instance {id} is left running, untagged"
                        ),
                    )
                    .await;
                return Ok(Cleanup::Done);
            }
            CleanupStep::Blocked => {
                report(
                    cluster,
                    db,
                    status,
                    DatabasePhase::Deleting,
                    false,
                    "Deleting",
                    format!("deleting RDS instance {id}"),
                )
                .await;
                let message = format!(
                    "deletion of RDS instance {id} is blocked by deletionProtection: set \
                     spec.deletionProtection to false to let the deletion proceed"
                );
                if conditions::set(
                    &mut status.conditions,
                    DELETION_BLOCKED,
                    true,
                    "DeletionProtection",
                    message.clone(),
                    db.metadata.generation,
                ) {
                    cluster
                        .publish(db, EventType::Warning, "DeletionBlocked", message)
                        .await;
                }
                // Setting the flag false is a spec change, which reconciles at once.
                return Ok(Cleanup::Wait(Action::requeue(runtime::RESYNC)));
            }
            CleanupStep::DisableProtection => {
                let modification = Modification {
                    deletion_protection: Some(false),
                    ..Modification::default()
                };
                if let Err(e) = backend.modify(id, &modification).await {
                    return on_rds_error(cluster, db, status, DatabasePhase::Deleting, e)
                        .await
                        .map(Cleanup::Wait);
                }
                match backend.describe(id).await {
                    Ok(found) => instance = found,
                    Err(e) => {
                        return on_rds_error(cluster, db, status, DatabasePhase::Deleting, e)
                            .await
                            .map(Cleanup::Wait);
                    }
                }
            }
            CleanupStep::WaitForDeletion => {
                report(
                    cluster,
                    db,
                    status,
                    DatabasePhase::Deleting,
                    false,
                    "Deleting",
                    format!("RDS is deleting instance {id}"),
                )
                .await;
                return Ok(Cleanup::Wait(Action::requeue(POLL)));
            }
            CleanupStep::RecordSnapshotId => {
                status.final_snapshot_id = Some(final_snapshot_identifier(id, Timestamp::now()));
                status.phase = Some(DatabasePhase::Deleting);
                // Persisted now: a retry must ask for the same snapshot, never a second one.
                cluster.write_status(db, status).await?;
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
                        cluster
                            .publish(db, EventType::Normal, "DeleteRequested", note)
                            .await;
                    }
                    Err(RdsError::NotFound) => return Ok(Cleanup::Done),
                    Err(e) => {
                        return on_rds_error(cluster, db, status, DatabasePhase::Deleting, e)
                            .await
                            .map(Cleanup::Wait);
                    }
                }
                // Verify: the finalizer goes only once RDS says the instance is gone.
                match backend.describe(id).await {
                    Ok(found) => instance = found,
                    Err(e) => {
                        return on_rds_error(cluster, db, status, DatabasePhase::Deleting, e)
                            .await
                            .map(Cleanup::Wait);
                    }
                }
            }
        }
    }
    Ok(Cleanup::Wait(Action::requeue(POLL)))
}

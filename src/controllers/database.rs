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
use crate::runtime::gauges::{self, StoreGauge};
use crate::runtime::legacy::{Cleanup, Context, ReconcileError, Reconciler};
use crate::runtime::{self, Shared, secrets};
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
    shared.metrics.register(gauges::deletion_blocked(
        "CloudDatabase",
        controller.store(),
        |db: &CloudDatabase| {
            db.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, DELETION_BLOCKED))
        },
    ));
    let ctx = Arc::new(Context::new(shared, CloudDatabaseReconciler { backend }));
    runtime::legacy::run(controller, ctx, readiness, shutdown).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    use kube::api::ObjectMeta;
    use serde_json::json;

    const UID: &str = "0b7c6a3e-uid";

    fn database(spec: serde_json::Value) -> CloudDatabase {
        let mut db = CloudDatabase::new("orders", serde_json::from_value(spec).unwrap());
        db.metadata = ObjectMeta {
            name: Some("orders".into()),
            namespace: Some("shop".into()),
            uid: Some(UID.into()),
            generation: Some(1),
            ..ObjectMeta::default()
        };
        db
    }

    fn postgres() -> CloudDatabase {
        database(json!({"engine": "postgres", "size": "small"}))
    }

    fn with_status(mut db: CloudDatabase, status: CloudDatabaseStatus) -> CloudDatabase {
        db.status = Some(status);
        db
    }

    fn deleting(mut db: CloudDatabase) -> CloudDatabase {
        db.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        db
    }

    fn instance(db: &CloudDatabase, state: &str) -> DbInstance {
        DbInstance {
            id: "shop-orders-x".into(),
            arn: "arn:aws:rds:eu-central-1:000000000000:db:shop-orders-x".into(),
            state: state.into(),
            endpoint: Some(DatabaseEndpoint {
                address: "shop-orders-x.rds.example".into(),
                port: 5432,
            }),
            tags: ownership_tags(db),
            deletion_protection: false,
            instance_class: "db.t3.micro".into(),
            storage_gib: 20,
        }
    }

    fn recorded(db: CloudDatabase) -> CloudDatabase {
        with_status(
            db,
            CloudDatabaseStatus {
                instance_id: Some("shop-orders-x".into()),
                ..CloudDatabaseStatus::default()
            },
        )
    }

    fn desired_of(db: &CloudDatabase) -> Desired {
        desired(&db.spec, &RdsConfig::default()).unwrap()
    }

    // --- identity, passwords, connection details ---

    fn assert_valid_rds_identifier(id: &str) {
        assert!(
            !id.is_empty() && id.len() <= 63,
            "{id}: length {}",
            id.len()
        );
        assert!(id.starts_with(|c: char| c.is_ascii_lowercase()), "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{id}"
        );
        assert!(!id.contains("--") && !id.ends_with('-'), "{id}");
    }

    #[test]
    fn instance_identifiers_are_valid_for_rds_and_deterministic() {
        let long = "n".repeat(63);
        for (namespace, name) in [
            ("shop", "orders"),
            ("1st-team", "db.primary"),
            ("a", "0"),
            (long.as_str(), long.as_str()),
            ("team-", "-x.y--z"),
        ] {
            let id = instance_identifier(namespace, name);
            assert_valid_rds_identifier(&id);
            assert_eq!(id, instance_identifier(namespace, name));
        }
        assert!(instance_identifier("shop", "orders").starts_with("shop-orders-"));
        assert!(instance_identifier("1st", "db").starts_with("db-1st-db-"));
    }

    #[test]
    fn instance_identifiers_keep_ambiguous_joins_and_long_names_apart() {
        assert_ne!(
            instance_identifier("a-b", "c"),
            instance_identifier("a", "b-c")
        );
        let prefix = "x".repeat(80);
        assert_ne!(
            instance_identifier("ns", &format!("{prefix}1")),
            instance_identifier("ns", &format!("{prefix}2"))
        );
    }

    #[test]
    fn final_snapshot_identifiers_carry_the_instance_and_a_utc_timestamp() {
        let at: Timestamp = "2026-03-04T05:06:07Z".parse().unwrap();
        let snapshot = final_snapshot_identifier("shop-orders-1a2b3c4d", at);
        assert_eq!(snapshot, "shop-orders-1a2b3c4d-final-20260304050607");
        assert_valid_rds_identifier(&snapshot);
    }

    #[test]
    fn passwords_are_long_random_and_acceptable_to_rds() {
        let a = generate_password();
        let b = generate_password();
        assert_ne!(a, b);
        for p in [&a, &b] {
            assert_eq!(p.expose().len(), PASSWORD_LENGTH);
            assert!(!p.expose().contains(['/', '"', '@', ' ']));
        }
        assert!(!format!("{a:?}").contains(a.expose()));
    }

    #[test]
    fn the_connection_secret_has_every_key_and_an_encoded_uri() {
        let stored = BTreeMap::from([
            ("username".to_string(), "app".to_string()),
            ("password".to_string(), "p#ss%w/rd@1".to_string()),
            ("database".to_string(), "orders".to_string()),
        ]);
        let endpoint = DatabaseEndpoint {
            address: "db.example".into(),
            port: 5432,
        };
        let details = connection_details(&stored, Engine::Postgres, &endpoint);
        let keys: Vec<&str> = details.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "database", "engine", "host", "password", "port", "uri", "username"
            ]
        );
        assert_eq!(details["password"], "p#ss%w/rd@1");
        assert_eq!(
            details["uri"],
            "postgresql://app:p%23ss%25w%2Frd%401@db.example:5432/orders"
        );
        let mysql = connection_details(&BTreeMap::new(), Engine::Mysql, &endpoint);
        assert_eq!(mysql["engine"], "mysql");
        assert!(mysql["uri"].starts_with("mysql://keeper:@db.example:5432/mysql"));
    }

    // --- plan_apply ---

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

    // --- controller logic against in-memory fakes ---

    /// In-memory RDS with the semantics keeper relies on (and moto lacks): instances can start
    /// in `creating` and stay `deleting` until told otherwise.
    #[derive(Default)]
    struct FakeRds {
        state: Mutex<FakeRdsState>,
    }

    #[derive(Default)]
    struct FakeRdsState {
        instances: BTreeMap<String, DbInstance>,
        passwords: BTreeMap<String, Password>,
        /// snapshot id -> instance id
        snapshots: BTreeMap<String, String>,
        /// State of a new instance; `available` when unset.
        initial_state: Option<String>,
        /// Deleted instances stay `deleting` until `finish_deletion`.
        slow_delete: bool,
        /// Describe misses this many times (an eventually consistent read).
        stale_describes: usize,
        /// One-shot failures by operation.
        failures: BTreeMap<&'static str, RdsError>,
        calls: Vec<&'static str>,
        modifications: Vec<Modification>,
    }

    impl FakeRds {
        fn call(
            &self,
            op: &'static str,
        ) -> Result<std::sync::MutexGuard<'_, FakeRdsState>, RdsError> {
            let mut state = self.state.lock().unwrap();
            state.calls.push(op);
            match state.failures.remove(op) {
                Some(e) => Err(e),
                None => Ok(state),
            }
        }

        fn fail_next(&self, op: &'static str, error: RdsError) {
            self.state.lock().unwrap().failures.insert(op, error);
        }

        fn calls(&self, op: &str) -> usize {
            self.state
                .lock()
                .unwrap()
                .calls
                .iter()
                .filter(|c| **c == op)
                .count()
        }

        fn only_instance(&self) -> DbInstance {
            let state = self.state.lock().unwrap();
            assert_eq!(state.instances.len(), 1, "{:?}", state.instances.keys());
            state.instances.values().next().unwrap().clone()
        }

        fn password(&self, id: &str) -> String {
            self.state.lock().unwrap().passwords[id]
                .expose()
                .to_string()
        }

        fn set_state(&self, id: &str, value: &str) {
            self.state
                .lock()
                .unwrap()
                .instances
                .get_mut(id)
                .unwrap()
                .state = value.into();
        }

        fn finish_deletion(&self, id: &str) {
            self.state.lock().unwrap().instances.remove(id);
        }
    }

    impl DatabaseBackend for FakeRds {
        async fn describe(&self, id: &str) -> Result<Option<DbInstance>, RdsError> {
            let mut state = self.call("describe")?;
            if state.stale_describes > 0 {
                state.stale_describes -= 1;
                return Ok(None);
            }
            Ok(state.instances.get(id).cloned())
        }

        async fn create(&self, new: &NewInstance) -> Result<(), RdsError> {
            let mut state = self.call("create")?;
            if state.instances.contains_key(&new.id) {
                return Err(RdsError::AlreadyExists);
            }
            let instance = DbInstance {
                id: new.id.clone(),
                arn: format!("arn:aws:rds:fake:000000000000:db:{}", new.id),
                state: state
                    .initial_state
                    .clone()
                    .unwrap_or_else(|| "available".into()),
                endpoint: Some(DatabaseEndpoint {
                    address: format!("{}.fake.rds", new.id),
                    port: 5432,
                }),
                tags: new.tags.clone(),
                deletion_protection: new.deletion_protection,
                instance_class: new.instance_class.clone(),
                storage_gib: new.storage_gib,
            };
            state.passwords.insert(new.id.clone(), new.password.clone());
            state.instances.insert(new.id.clone(), instance);
            Ok(())
        }

        async fn modify(&self, id: &str, modification: &Modification) -> Result<(), RdsError> {
            let mut state = self.call("modify")?;
            state.modifications.push(modification.clone());
            if let Some(password) = &modification.master_password {
                state.passwords.insert(id.into(), password.clone());
            }
            let instance = state.instances.get_mut(id).ok_or(RdsError::NotFound)?;
            if instance.state != "available" {
                return Err(RdsError::InvalidState(instance.state.clone()));
            }
            if let Some(class) = &modification.instance_class {
                instance.instance_class = class.clone();
            }
            if let Some(gib) = modification.storage_gib {
                instance.storage_gib = gib;
            }
            if let Some(protection) = modification.deletion_protection {
                instance.deletion_protection = protection;
            }
            Ok(())
        }

        async fn delete(&self, id: &str, final_snapshot: &FinalSnapshot) -> Result<(), RdsError> {
            let mut state = self.call("delete")?;
            let slow = state.slow_delete;
            let instance = state.instances.get_mut(id).ok_or(RdsError::NotFound)?;
            if instance.deletion_protection {
                return Err(RdsError::Rejected {
                    code: "InvalidParameterCombination".into(),
                    message: "Cannot delete protected DB Instance".into(),
                });
            }
            if instance.state == "deleting" {
                return Err(RdsError::InvalidState("deleting".into()));
            }
            if slow {
                instance.state = "deleting".into();
            } else {
                state.instances.remove(id);
            }
            if let FinalSnapshot::Take(snapshot) = final_snapshot {
                state.snapshots.insert(snapshot.clone(), id.into());
            }
            Ok(())
        }

        async fn remove_tags(
            &self,
            instance: &DbInstance,
            keys: &[String],
        ) -> Result<(), RdsError> {
            let mut state = self.call("remove_tags")?;
            let found = state
                .instances
                .get_mut(&instance.id)
                .ok_or(RdsError::NotFound)?;
            found.tags.retain(|k, _| !keys.contains(k));
            Ok(())
        }
    }

    /// In-memory Kubernetes side: Secrets by name, the last written status (what the next
    /// watch event delivers) and the events published.
    #[derive(Default)]
    struct FakeCluster {
        secrets: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
        status: Mutex<Option<CloudDatabaseStatus>>,
        status_writes: Mutex<usize>,
        secret_writes: Mutex<usize>,
        /// (type, reason, note) of every event published.
        events: Mutex<Vec<(String, String, String)>>,
    }

    impl FakeCluster {
        /// `db` as the next reconcile sees it.
        fn observe(&self, mut db: CloudDatabase) -> CloudDatabase {
            db.status = self.status.lock().unwrap().clone();
            db
        }

        fn secret(&self, name: &str) -> BTreeMap<String, String> {
            self.secrets
                .lock()
                .unwrap()
                .get(name)
                .cloned()
                .unwrap_or_default()
        }

        fn writes(&self) -> (usize, usize) {
            (
                *self.status_writes.lock().unwrap(),
                *self.secret_writes.lock().unwrap(),
            )
        }

        /// Reasons of the events published, in order.
        fn events(&self) -> Vec<String> {
            self.events
                .lock()
                .unwrap()
                .iter()
                .map(|(_, reason, _)| reason.clone())
                .collect()
        }

        /// Reasons of the Warning events published, in order.
        fn warnings(&self) -> Vec<String> {
            self.events
                .lock()
                .unwrap()
                .iter()
                .filter(|(type_, _, _)| type_ == "Warning")
                .map(|(_, reason, _)| reason.clone())
                .collect()
        }

        /// Whether `text` appears in any event note or in the status.
        fn leaks(&self, text: &str) -> bool {
            self.events
                .lock()
                .unwrap()
                .iter()
                .any(|(_, _, note)| note.contains(text))
                || serde_json::to_string(&self.status())
                    .unwrap()
                    .contains(text)
        }

        fn status(&self) -> CloudDatabaseStatus {
            self.status.lock().unwrap().clone().unwrap_or_default()
        }
    }

    impl Cluster for FakeCluster {
        async fn read_secret(
            &self,
            _db: &CloudDatabase,
            name: &str,
        ) -> Result<BTreeMap<String, String>, kube::Error> {
            Ok(self.secret(name))
        }

        async fn write_secret(
            &self,
            _db: &CloudDatabase,
            name: &str,
            data: BTreeMap<String, String>,
        ) -> Result<(), kube::Error> {
            let mut secrets = self.secrets.lock().unwrap();
            if secrets.get(name) != Some(&data) {
                *self.secret_writes.lock().unwrap() += 1;
                secrets.insert(name.into(), data);
            }
            Ok(())
        }

        async fn write_status(
            &self,
            db: &CloudDatabase,
            status: &CloudDatabaseStatus,
        ) -> Result<(), kube::Error> {
            if db.status.as_ref() != Some(status) {
                *self.status_writes.lock().unwrap() += 1;
                *self.status.lock().unwrap() = Some(status.clone());
            }
            Ok(())
        }

        async fn publish(&self, _db: &CloudDatabase, type_: EventType, reason: &str, note: String) {
            assert!(!note.is_empty());
            self.events
                .lock()
                .unwrap()
                .push((format!("{type_:?}"), reason.to_string(), note));
        }
    }

    async fn apply(
        db: &CloudDatabase,
        rds: &FakeRds,
        cluster: &FakeCluster,
    ) -> Result<Action, Error> {
        reconcile_database(db, rds, cluster, &RdsConfig::default()).await
    }

    fn ready(status: &CloudDatabaseStatus) -> Option<(String, String)> {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map(|c| (c.status.clone(), c.reason.clone()))
    }

    /// Runs apply until the instance is Ready (the fake creates instances `available`).
    async fn ready_database(
        db: CloudDatabase,
        rds: &FakeRds,
        cluster: &FakeCluster,
    ) -> CloudDatabase {
        apply(&db, rds, cluster).await.unwrap();
        let db = cluster.observe(db);
        assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));
        db
    }

    #[tokio::test]
    async fn a_new_database_is_created_polled_and_published() {
        let rds = FakeRds::default();
        rds.state.lock().unwrap().initial_state = Some("creating".into());
        let cluster = FakeCluster::default();
        let db = postgres();

        let action = apply(&db, &rds, &cluster).await.unwrap();
        assert_eq!(action, Action::requeue(POLL));
        let status = cluster.status();
        let id = instance_identifier("shop", "orders");
        assert_eq!(status.instance_id.as_deref(), Some(id.as_str()));
        assert_eq!(status.phase, Some(DatabasePhase::Provisioning));
        let created = rds.only_instance();
        assert_eq!(created.tags, ownership_tags(&db));
        assert_eq!(created.instance_class, "db.t3.micro");
        let secret = cluster.secret("orders-connection");
        assert_eq!(secret["password"], rds.password(&id));

        // Still creating: poll without touching anything.
        let db = cluster.observe(db);
        assert_eq!(
            apply(&db, &rds, &cluster).await.unwrap(),
            Action::requeue(POLL)
        );
        assert_eq!(rds.calls("create"), 1);

        rds.set_state(&id, "available");
        let db = cluster.observe(db);
        assert_eq!(
            apply(&db, &rds, &cluster).await.unwrap(),
            Action::requeue(runtime::RESYNC)
        );
        let status = cluster.status();
        assert_eq!(status.phase, Some(DatabasePhase::Ready));
        assert_eq!(ready(&status), Some(("True".into(), "Available".into())));
        assert_eq!(
            status.endpoint.as_ref().unwrap().address,
            format!("{id}.fake.rds")
        );
        assert_eq!(status.observed_generation, Some(1));
        let secret = cluster.secret("orders-connection");
        assert_eq!(secret.len(), 7);
        assert_eq!(secret["password"], rds.password(&id));
        assert_eq!(secret["host"], format!("{id}.fake.rds"));
        assert_eq!(secret["database"], "postgres");
        assert!(!cluster.leaks(&secret["password"]));
        assert!(cluster.warnings().is_empty(), "{:?}", cluster.events());

        // Steady state: no writes, no events.
        let db = cluster.observe(db);
        let (writes, events) = (cluster.writes(), cluster.events().len());
        apply(&db, &rds, &cluster).await.unwrap();
        assert_eq!(cluster.writes(), writes);
        assert_eq!(cluster.events().len(), events);
        assert_eq!(rds.calls("create"), 1);
        assert_eq!(rds.calls("modify"), 0);
    }

    #[tokio::test]
    async fn a_crash_after_storing_the_password_reuses_it_for_the_create() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = postgres();
        rds.fail_next("create", RdsError::Unavailable("connection reset".into()));
        assert!(matches!(
            apply(&db, &rds, &cluster).await,
            Err(Error::Rds(_))
        ));
        let stored = cluster.secret("orders-connection")["password"].clone();
        assert!(rds.state.lock().unwrap().instances.is_empty());

        let db = cluster.observe(db);
        apply(&db, &rds, &cluster).await.unwrap();
        let id = rds.only_instance().id;
        assert_eq!(rds.password(&id), stored);
        assert_eq!(cluster.secret("orders-connection")["password"], stored);
        assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));
    }

    #[tokio::test]
    async fn a_crash_after_the_create_finds_the_instance_instead_of_creating_another() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = postgres();
        apply(&db, &rds, &cluster).await.unwrap();
        // Replay from the object as it was before any of that pass's status writes.
        *cluster.status.lock().unwrap() = None;
        apply(&db, &rds, &cluster).await.unwrap();
        assert_eq!(rds.calls("create"), 1);
        let id = rds.only_instance().id;
        assert_eq!(
            cluster.secret("orders-connection")["password"],
            rds.password(&id)
        );
        assert_eq!(cluster.status().instance_id, Some(id));
        assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));
    }

    #[tokio::test]
    async fn already_exists_with_our_tag_is_success() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = ready_database(postgres(), &rds, &cluster).await;
        // The next describe misses the instance, so the create runs into it.
        rds.state.lock().unwrap().stale_describes = 1;
        apply(&db, &rds, &cluster).await.unwrap();
        assert_eq!(rds.calls("create"), 2);
        assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));
        assert_eq!(rds.state.lock().unwrap().instances.len(), 1);
    }

    #[tokio::test]
    async fn a_name_taken_by_someone_else_fails_once_and_is_released_on_delete() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = postgres();
        let id = instance_identifier("shop", "orders");
        let mut foreign = instance(&db, "available");
        foreign.id = id.clone();
        foreign.tags = BTreeMap::from([(TAG_OWNER_UID.to_string(), "other-uid".to_string())]);
        rds.state
            .lock()
            .unwrap()
            .instances
            .insert(id.clone(), foreign);

        assert_eq!(
            apply(&db, &rds, &cluster).await.unwrap(),
            Action::requeue(PERMANENT_RETRY)
        );
        let status = cluster.status();
        assert_eq!(status.phase, Some(DatabasePhase::Failed));
        assert_eq!(ready(&status), Some(("False".into(), "NameTaken".into())));
        assert!(status.conditions[0].message.contains("is taken"));
        let db = cluster.observe(db);
        apply(&db, &rds, &cluster).await.unwrap();
        assert_eq!(cluster.warnings(), ["NameTaken"]);
        assert_eq!(rds.calls("create"), 0);

        let cleanup = cleanup_database(&deleting(db), &rds, &cluster)
            .await
            .unwrap();
        assert_eq!(cleanup, Cleanup::Done);
        assert_eq!(rds.calls("delete"), 0);
        assert!(rds.state.lock().unwrap().instances.contains_key(&id));
    }

    #[tokio::test]
    async fn drift_is_modified_and_a_shrink_is_a_condition_not_a_call() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = ready_database(postgres(), &rds, &cluster).await;

        let mut grown = db.clone();
        grown.spec = serde_json::from_value(json!({
            "engine": "postgres", "size": "medium", "deletionProtection": true
        }))
        .unwrap();
        grown.metadata.generation = Some(2);
        assert_eq!(
            apply(&grown, &rds, &cluster).await.unwrap(),
            Action::requeue(POLL)
        );
        assert_eq!(ready(&cluster.status()).unwrap().1, "Modifying");
        assert_eq!(cluster.status().observed_generation, Some(2));
        let modified = rds.only_instance();
        assert_eq!(modified.instance_class, "db.t3.medium");
        assert_eq!(modified.storage_gib, 50);
        assert!(modified.deletion_protection);
        let grown = cluster.observe(grown);
        apply(&grown, &rds, &cluster).await.unwrap();
        assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));

        let mut shrunk = grown.clone();
        shrunk.spec.storage_gib = Some(20);
        let modifications = rds.calls("modify");
        apply(&shrunk, &rds, &cluster).await.unwrap();
        assert_eq!(rds.calls("modify"), modifications);
        let status = cluster.status();
        assert_eq!(status.phase, Some(DatabasePhase::Failed));
        assert_eq!(
            ready(&status),
            Some(("False".into(), "StorageCannotShrink".into()))
        );
        assert!(
            cluster
                .events()
                .contains(&"StorageCannotShrink".to_string())
        );
    }

    #[tokio::test]
    async fn a_lost_password_is_reset_on_rds_and_stored() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = ready_database(postgres(), &rds, &cluster).await;
        let id = rds.only_instance().id;
        let old = rds.password(&id);
        cluster.secrets.lock().unwrap().clear();
        apply(&db, &rds, &cluster).await.unwrap();
        let secret = cluster.secret("orders-connection");
        assert_ne!(secret["password"], old);
        assert_eq!(secret["password"], rds.password(&id));
        assert_eq!(secret.len(), 7);
        assert!(!cluster.leaks(&secret["password"]));
        assert!(cluster.events().contains(&"PasswordReset".to_string()));
    }

    #[tokio::test]
    async fn permanent_errors_fail_with_the_message_and_transient_ones_back_off() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = postgres();
        rds.fail_next("describe", RdsError::Throttled("Rate exceeded".into()));
        assert!(matches!(
            apply(&db, &rds, &cluster).await,
            Err(Error::Rds(RdsError::Throttled(_)))
        ));
        rds.fail_next(
            "describe",
            RdsError::AccessDenied("not authorized to rds:DescribeDBInstances".into()),
        );
        assert_eq!(
            apply(&db, &rds, &cluster).await.unwrap(),
            Action::requeue(PERMANENT_RETRY)
        );
        let status = cluster.status();
        assert_eq!(status.phase, Some(DatabasePhase::Failed));
        assert_eq!(
            ready(&status),
            Some(("False".into(), "AccessDenied".into()))
        );
        assert!(
            status.conditions[0]
                .message
                .contains("rds:DescribeDBInstances")
        );
        assert_eq!(cluster.warnings(), ["AccessDenied"]);
    }

    #[tokio::test]
    async fn snapshot_deletion_records_the_id_first_and_reuses_it_after_a_crash() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = deleting(ready_database(postgres(), &rds, &cluster).await);
        let id = rds.only_instance().id;

        rds.fail_next("delete", RdsError::Unavailable("timeout".into()));
        assert!(cleanup_database(&db, &rds, &cluster).await.is_err());
        let snapshot = cluster.status().final_snapshot_id.unwrap();
        assert!(snapshot.starts_with(&format!("{id}-final-")));
        assert!(rds.state.lock().unwrap().instances.contains_key(&id));

        let db = cluster.observe(db);
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Done
        );
        assert_eq!(cluster.status().final_snapshot_id, Some(snapshot.clone()));
        let state = rds.state.lock().unwrap();
        assert_eq!(state.snapshots, BTreeMap::from([(snapshot, id)]));
        assert!(state.instances.is_empty());
    }

    #[tokio::test]
    async fn the_finalizer_stays_until_rds_reports_the_instance_gone() {
        let rds = FakeRds::default();
        rds.state.lock().unwrap().slow_delete = true;
        let cluster = FakeCluster::default();
        let db = deleting(
            ready_database(
                database(json!({"engine": "mysql", "size": "small", "deletionPolicy": "Delete"})),
                &rds,
                &cluster,
            )
            .await,
        );
        let id = rds.only_instance().id;
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Wait(Action::requeue(POLL))
        );
        assert_eq!(cluster.status().phase, Some(DatabasePhase::Deleting));
        let db = cluster.observe(db);
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Wait(Action::requeue(POLL))
        );
        assert_eq!(rds.calls("delete"), 1);
        rds.finish_deletion(&id);
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Done
        );
        assert!(rds.state.lock().unwrap().snapshots.is_empty());
    }

    #[tokio::test]
    async fn retain_removes_our_tags_and_leaves_the_instance() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = deleting(
            ready_database(
                database(
                    json!({"engine": "postgres", "size": "small", "deletionPolicy": "Retain"}),
                ),
                &rds,
                &cluster,
            )
            .await,
        );
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Done
        );
        let left = rds.only_instance();
        assert!(left.tags.is_empty(), "{:?}", left.tags);
        assert_eq!(rds.calls("delete"), 0);
        assert!(cluster.events().contains(&"Retained".to_string()));
    }

    #[tokio::test]
    async fn deletion_protection_blocks_and_turning_it_off_on_the_terminating_resource_proceeds() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = deleting(
            ready_database(
                database(
                    json!({"engine": "postgres", "size": "small", "deletionProtection": true}),
                ),
                &rds,
                &cluster,
            )
            .await,
        );
        assert!(rds.only_instance().deletion_protection);
        for _ in 0..2 {
            let db = cluster.observe(db.clone());
            assert!(matches!(
                cleanup_database(&db, &rds, &cluster).await.unwrap(),
                Cleanup::Wait(_)
            ));
        }
        let status = cluster.status();
        assert!(conditions::is_true(&status.conditions, DELETION_BLOCKED));
        let blocked = status
            .conditions
            .iter()
            .find(|c| c.type_ == DELETION_BLOCKED)
            .unwrap();
        assert!(
            blocked
                .message
                .contains("set spec.deletionProtection to false")
        );
        assert_eq!(
            cluster
                .events()
                .iter()
                .filter(|e| *e == "DeletionBlocked")
                .count(),
            1
        );
        assert_eq!(rds.calls("delete"), 0);

        let mut unprotected = cluster.observe(db);
        unprotected.spec.deletion_protection = false;
        assert_eq!(
            cleanup_database(&unprotected, &rds, &cluster)
                .await
                .unwrap(),
            Cleanup::Done
        );
        assert_eq!(
            rds.state
                .lock()
                .unwrap()
                .modifications
                .last()
                .unwrap()
                .deletion_protection,
            Some(false)
        );
        assert!(rds.state.lock().unwrap().instances.is_empty());
        assert_eq!(rds.state.lock().unwrap().snapshots.len(), 1);
    }

    #[tokio::test]
    async fn a_database_never_created_is_released_at_once() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = deleting(postgres());
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Done
        );
        assert!(rds.state.lock().unwrap().calls.is_empty());
        // Recorded but the create never happened (or failed): RDS says so, and that is enough.
        let db = deleting(recorded(postgres()));
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Done
        );
        assert_eq!(rds.calls("delete"), 0);
    }

    #[tokio::test]
    async fn a_busy_instance_requeues_the_deletion_and_not_found_counts_as_done() {
        let rds = FakeRds::default();
        let cluster = FakeCluster::default();
        let db = deleting(
            ready_database(
                database(
                    json!({"engine": "postgres", "size": "small", "deletionPolicy": "Delete"}),
                ),
                &rds,
                &cluster,
            )
            .await,
        );
        rds.fail_next(
            "delete",
            RdsError::InvalidState("instance is backing-up".into()),
        );
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Wait(Action::requeue(POLL))
        );
        assert_eq!(ready(&cluster.status()).unwrap().1, "InstanceBusy");
        rds.fail_next("delete", RdsError::NotFound);
        let db = cluster.observe(db);
        assert_eq!(
            cleanup_database(&db, &rds, &cluster).await.unwrap(),
            Cleanup::Done
        );
    }

    /// The whole lifecycle through the real backend on a moto server: Ready with every Secret
    /// key and our tags; deletion with each policy.
    #[tokio::test]
    async fn every_deletion_policy_against_moto() {
        use crate::backends::rds::moto::{MotoServer, backend, snapshots};
        let Some(server) = MotoServer::start("every_deletion_policy_against_moto", &[]) else {
            return;
        };
        let rds = backend(&server, Arc::new(crate::metrics::Metrics::new())).await;
        for (name, policy) in [("snap", "Snapshot"), ("drop", "Delete"), ("keep", "Retain")] {
            let cluster = FakeCluster::default();
            let mut db = database(json!({
                "engine": "postgres", "size": "small", "deletionPolicy": policy
            }));
            db.metadata.name = Some(name.into());
            db.metadata.uid = Some(format!("uid-{name}"));
            reconcile_database(&db, &rds, &cluster, &RdsConfig::default())
                .await
                .unwrap();
            let status = cluster.status();
            assert_eq!(status.phase, Some(DatabasePhase::Ready), "{status:?}");
            let id = status.instance_id.clone().unwrap();
            let secret = cluster.secret(&format!("{name}-connection"));
            assert_eq!(secret.len(), 7, "{:?}", secret.keys());
            let instance = rds.describe(&id).await.unwrap().unwrap();
            assert_eq!(instance.tags, ownership_tags(&db));
            assert_eq!(secret["host"], instance.endpoint.unwrap().address);

            let db = deleting(cluster.observe(db));
            assert_eq!(
                cleanup_database(&db, &rds, &cluster).await.unwrap(),
                Cleanup::Done
            );
            let left = rds.describe(&id).await.unwrap();
            match policy {
                "Snapshot" => {
                    assert_eq!(left, None);
                    let recorded = cluster.status().final_snapshot_id.unwrap();
                    assert_eq!(snapshots(&rds, &id).await, [recorded]);
                }
                "Delete" => {
                    assert_eq!(left, None);
                    assert!(snapshots(&rds, &id).await.is_empty());
                }
                _ => assert!(left.unwrap().tags.is_empty()),
            }
        }
    }
}

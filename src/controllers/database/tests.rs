//! Reconcile tests through the shared flow ([`testing::reconcile`]) with the in-memory Kube seam
//! and an in-memory RDS: the state machine, crash safety and error classification.

mod errors;
mod fake_rds;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use self::fake_rds::{FakeRds, rds_error};
use super::backend::{Connector, DatabaseBackend, Live};
use super::plan::{instance_identifier, ownership_tags};
use super::*;
use crate::api::{CloudDatabase, CloudDatabaseStatus, DatabaseEndpoint, DatabasePhase};
use crate::backends::rds::{DbInstance, RdsBackend};
use crate::cluster::fake::{Call, FakeKube};
use crate::config::OperatorConfig;
use crate::error::ErrorClass;
use crate::providers::Providers;
use crate::runtime::conditions::{self, DELETION_BLOCKED, READY};
use crate::runtime::policy::PERMANENT_RETRY;
use crate::runtime::testing;
use crate::runtime::testing::condition;

const UID: &str = "0b7c6a3e-uid";

// --- fixtures, shared with the planner's tests ---

pub(super) fn database(spec: Value) -> CloudDatabase {
    let mut db = CloudDatabase::new("orders", serde_json::from_value(spec).unwrap());
    db.metadata = ObjectMeta {
        name: Some("orders".into()),
        namespace: Some("shop".into()),
        uid: Some(UID.into()),
        generation: Some(1),
        // In place already: the shared flow adds it before the first apply.
        finalizers: Some(vec![
            <CloudDatabaseReconciler<FakeRds> as Reconciler>::FINALIZER.to_string(),
        ]),
        ..ObjectMeta::default()
    };
    db
}

pub(super) fn postgres() -> CloudDatabase {
    database(json!({"engine": "postgres", "size": "small"}))
}

pub(super) fn with_status(mut db: CloudDatabase, status: CloudDatabaseStatus) -> CloudDatabase {
    db.status = Some(status);
    db
}

pub(super) fn deleting(mut db: CloudDatabase) -> CloudDatabase {
    db.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    db
}

pub(super) fn instance(db: &CloudDatabase, state: &str) -> DbInstance {
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

pub(super) fn recorded(db: CloudDatabase) -> CloudDatabase {
    with_status(
        db,
        CloudDatabaseStatus {
            instance_id: Some("shop-orders-x".into()),
            ..CloudDatabaseStatus::default()
        },
    )
}

// --- the harness ---

/// What a cleanup pass did: released the finalizer, or kept it and looks again.
#[derive(Debug, PartialEq)]
enum Cleanup {
    Done,
    Wait(Action),
}

type Result<T> = std::result::Result<T, runtime::Error<Error>>;

/// The fake Kube seam, the status as the API server holds it after the patches so far (what
/// the next watch event delivers), and the controller's context over a connection to RDS.
struct Cluster<C: Connector = FakeRds> {
    kube: Arc<FakeKube>,
    cx: Arc<Context<CloudDatabaseReconciler<C>>>,
    stored: Mutex<Value>,
    applied: Mutex<usize>,
}

impl Default for Cluster<FakeRds> {
    fn default() -> Self {
        Cluster::with_config(FakeRds::default(), OperatorConfig::default())
    }
}

impl Cluster<FakeRds> {
    fn rds(&self) -> &FakeRds {
        &self.cx.reconciler.connector
    }
}

impl Cluster<Live> {
    /// Over the real client `rds`, which the reconciler finds in the provider registry as in
    /// production.
    fn with_rds(rds: RdsBackend) -> Self {
        let kube = Arc::new(FakeKube::default());
        let mut shared = testing::shared(kube.clone(), OperatorConfig::default());
        shared.providers = Arc::new(
            Providers::build(&shared.config, shared.metrics.clone(), rds)
                .expect("test providers build"),
        );
        Cluster::over(kube, shared, Live)
    }

    fn rds(&self) -> &RdsBackend {
        self.cx.shared.providers.rds()
    }
}

impl<C: Connector> Cluster<C> {
    fn with_config(connector: C, config: OperatorConfig) -> Self {
        let kube = Arc::new(FakeKube::default());
        let shared = testing::shared(kube.clone(), config);
        Cluster::over(kube, shared, connector)
    }

    fn over(kube: Arc<FakeKube>, shared: runtime::Shared, connector: C) -> Self {
        Cluster {
            kube,
            cx: Arc::new(Context::new(shared, CloudDatabaseReconciler { connector })),
            stored: Mutex::new(json!({ "status": null })),
            applied: Mutex::new(0),
        }
    }

    /// One reconcile. Boxed: the SDK's futures are large in debug builds, and the test's own
    /// future lives on the test thread's stack (the controller keeps its futures on the heap).
    async fn apply(&self, db: &CloudDatabase) -> Result<Action> {
        Box::pin(testing::reconcile(&self.cx, db.clone())).await
    }

    async fn cleanup(&self, db: &CloudDatabase) -> Result<Cleanup> {
        let before = self.releases();
        let action = self.apply(db).await?;
        Ok(if self.releases() > before {
            Cleanup::Done
        } else {
            Cleanup::Wait(action)
        })
    }

    /// Runs apply until the instance is Ready (the fake creates instances `available`).
    async fn ready_database(&self, db: CloudDatabase) -> CloudDatabase {
        self.apply(&db).await.unwrap();
        assert_eq!(self.status().phase, Some(DatabasePhase::Ready));
        self.observe(db)
    }

    /// Finalizer removals so far.
    fn releases(&self) -> usize {
        self.kube
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::PatchJson { patch, .. } if patch.to_string().contains("\"remove\"") && patch.to_string().contains("/metadata/finalizers")))
            .count()
    }

    /// Applies the status patches made since the last look, as the API server would.
    fn stored_status(&self) -> Option<CloudDatabaseStatus> {
        let calls = self.kube.calls();
        let mut applied = self.applied.lock().unwrap();
        let mut stored = self.stored.lock().unwrap();
        for call in &calls[*applied..] {
            if let Call::PatchStatus { patch, .. } = call {
                json_patch::merge(&mut stored, patch);
            }
        }
        *applied = calls.len();
        serde_json::from_value(stored["status"].clone()).unwrap()
    }

    fn status(&self) -> CloudDatabaseStatus {
        self.stored_status().unwrap_or_default()
    }

    /// `db` as the next reconcile sees it.
    fn observe(&self, mut db: CloudDatabase) -> CloudDatabase {
        db.status = self.stored_status();
        db
    }

    /// Forgets every status write so far (a crash before they landed).
    fn reset_status(&self) {
        self.stored_status();
        *self.stored.lock().unwrap() = json!({ "status": null });
    }

    fn secret(&self, name: &str) -> BTreeMap<String, String> {
        self.kube.secret_data("shop", name).unwrap_or_default()
    }

    /// (status writes, Secret writes) so far.
    fn writes(&self) -> (usize, usize) {
        let calls = self.kube.calls();
        let count = |f: fn(&Call) -> bool| calls.iter().filter(|c| f(c)).count();
        (
            count(|c| matches!(c, Call::PatchStatus { .. })),
            count(|c| matches!(c, Call::ApplySecret { .. })),
        )
    }

    /// Reasons of the events published, in order.
    fn events(&self) -> Vec<String> {
        let notes = self.kube.notes();
        assert!(notes.iter().all(|n| !n.message.is_empty()), "{notes:?}");
        notes.iter().map(|n| n.reason.to_string()).collect()
    }

    /// Runs one apply that must fail permanently with `reason`; returns the status written.
    async fn fails_with(&self, db: &CloudDatabase, reason: &str) -> CloudDatabaseStatus {
        assert_eq!(
            self.apply(db).await.unwrap(),
            Action::requeue(PERMANENT_RETRY)
        );
        let status = self.status();
        assert_eq!(status.phase, Some(DatabasePhase::Failed));
        assert_eq!(ready(&status), Some(("False".into(), reason.into())));
        status
    }

    /// Reasons of the Warning events published, in order.
    fn warnings(&self) -> Vec<String> {
        self.kube
            .notes()
            .iter()
            .filter(|n| n.type_ == EventType::Warning)
            .map(|n| n.reason.to_string())
            .collect()
    }

    /// Whether `text` appears in any event message or in the status.
    fn leaks(&self, text: &str) -> bool {
        self.kube.notes().iter().any(|n| n.message.contains(text))
            || serde_json::to_string(&self.status())
                .unwrap()
                .contains(text)
    }
}

fn ready(status: &CloudDatabaseStatus) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

// --- the state machine ---

#[tokio::test]
async fn a_new_database_is_created_polled_and_published() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    rds.state.lock().unwrap().initial_state = Some("creating".into());
    let db = postgres();

    let action = cluster.apply(&db).await.unwrap();
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
    assert_eq!(cluster.apply(&db).await.unwrap(), Action::requeue(POLL));
    assert_eq!(rds.calls("create"), 1);

    rds.set_state(&id, "available");
    let db = cluster.observe(db);
    assert_eq!(
        cluster.apply(&db).await.unwrap(),
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
    cluster.apply(&db).await.unwrap();
    assert_eq!(cluster.writes(), writes);
    assert_eq!(cluster.events().len(), events);
    assert_eq!(rds.calls("create"), 1);
    assert_eq!(rds.calls("modify"), 0);
}

#[tokio::test]
async fn a_crash_after_storing_the_password_reuses_it_for_the_create() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = postgres();
    rds.fail_next(
        "create",
        rds_error(ErrorClass::Transient, "Unavailable", "connection reset"),
    );
    assert!(matches!(
        cluster.apply(&db).await,
        Err(runtime::Error::Reconciler(Error::Backend(_)))
    ));
    let stored = cluster.secret("orders-connection")["password"].clone();
    assert!(rds.state.lock().unwrap().instances.is_empty());

    let db = cluster.observe(db);
    cluster.apply(&db).await.unwrap();
    let id = rds.only_instance().id;
    assert_eq!(rds.password(&id), stored);
    assert_eq!(cluster.secret("orders-connection")["password"], stored);
    assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));
}

#[tokio::test]
async fn a_second_writer_never_replaces_the_password_the_instance_was_created_with() {
    // Two keepers without leader election: A found no instance and stops; B stores its password
    // and creates the instance with it. A's password is refused, so the Secret keeps B's.
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = postgres();
    let described = rds.pauses.after("describe");
    let (by_a, by_b) = tokio::join!(cluster.apply(&db), async {
        described.reached().await;
        let by_b = cluster.apply(&db).await;
        described.release();
        by_b
    });
    by_b.unwrap();
    assert!(by_a.is_err(), "A's password was refused: it backs off");
    let id = rds.only_instance().id;
    assert_eq!(
        cluster.secret("orders-connection")["password"],
        rds.password(&id)
    );
}

#[tokio::test]
async fn a_crash_after_the_create_finds_the_instance_instead_of_creating_another() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = postgres();
    cluster.apply(&db).await.unwrap();
    // Replay from the object as it was before any of that pass's status writes.
    cluster.reset_status();
    cluster.apply(&db).await.unwrap();
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
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = cluster.ready_database(postgres()).await;
    // The next describe misses the instance, so the create runs into it.
    rds.state.lock().unwrap().stale_describes = 1;
    cluster.apply(&db).await.unwrap();
    assert_eq!(rds.calls("create"), 2);
    assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));
    assert_eq!(rds.state.lock().unwrap().instances.len(), 1);
}

#[tokio::test]
async fn a_name_taken_by_someone_else_fails_once_and_is_released_on_delete() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
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
        cluster.apply(&db).await.unwrap(),
        Action::requeue(PERMANENT_RETRY)
    );
    let status = cluster.status();
    assert_eq!(status.phase, Some(DatabasePhase::Failed));
    assert_eq!(ready(&status), Some(("False".into(), "NameTaken".into())));
    assert!(
        condition(&status.conditions, "Ready")
            .message
            .contains("is taken")
    );
    let db = cluster.observe(db);
    cluster.apply(&db).await.unwrap();
    assert_eq!(cluster.warnings(), ["NameTaken"]);
    assert_eq!(rds.calls("create"), 0);

    let cleanup = cluster.cleanup(&deleting(db)).await.unwrap();
    assert_eq!(cleanup, Cleanup::Done);
    assert_eq!(rds.calls("delete"), 0);
    assert!(rds.state.lock().unwrap().instances.contains_key(&id));
}

#[tokio::test]
async fn drift_is_modified_and_a_shrink_is_a_condition_not_a_call() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = cluster.ready_database(postgres()).await;

    let mut grown = db.clone();
    grown.spec = serde_json::from_value(json!({
        "engine": "postgres", "size": "medium", "deletionProtection": true
    }))
    .unwrap();
    grown.metadata.generation = Some(2);
    assert_eq!(cluster.apply(&grown).await.unwrap(), Action::requeue(POLL));
    assert_eq!(ready(&cluster.status()).unwrap().1, "Modifying");
    assert_eq!(cluster.status().observed_generation, Some(2));
    let modified = rds.only_instance();
    assert_eq!(modified.instance_class, "db.t3.medium");
    assert_eq!(modified.storage_gib, 50);
    assert!(modified.deletion_protection);
    let grown = cluster.observe(grown);
    cluster.apply(&grown).await.unwrap();
    assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));

    let mut shrunk = grown.clone();
    shrunk.spec.storage_gib = Some(20);
    let modifications = rds.calls("modify");
    cluster.apply(&shrunk).await.unwrap();
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
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = cluster.ready_database(postgres()).await;
    let id = rds.only_instance().id;
    let old = rds.password(&id);
    cluster.kube.secrets.lock().unwrap().clear();
    cluster.apply(&db).await.unwrap();
    let secret = cluster.secret("orders-connection");
    assert_ne!(secret["password"], old);
    assert_eq!(secret["password"], rds.password(&id));
    assert_eq!(secret.len(), 7);
    assert!(!cluster.leaks(&secret["password"]));
    assert!(cluster.events().contains(&"PasswordReset".to_string()));
}

#[tokio::test]
async fn permanent_errors_fail_with_the_message_and_transient_ones_back_off() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = postgres();
    rds.fail_next(
        "describe",
        rds_error(ErrorClass::Transient, "Throttling", "Rate exceeded"),
    );
    assert!(matches!(
        cluster.apply(&db).await,
        Err(runtime::Error::Reconciler(Error::Backend(e))) if e.is_transient()
    ));
    rds.fail_next(
        "describe",
        rds_error(
            ErrorClass::Permanent,
            "AccessDenied",
            "not authorized to rds:DescribeDBInstances",
        ),
    );
    let status = cluster.fails_with(&db, "AccessDenied").await;
    assert!(
        condition(&status.conditions, "Ready")
            .message
            .contains("rds:DescribeDBInstances")
    );
    assert_eq!(cluster.warnings(), ["AccessDenied"]);
}

#[tokio::test]
async fn snapshot_deletion_records_the_id_first_and_reuses_it_after_a_crash() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = deleting(cluster.ready_database(postgres()).await);
    let id = rds.only_instance().id;

    rds.fail_next(
        "delete",
        rds_error(ErrorClass::Transient, "Unavailable", "timeout"),
    );
    assert!(cluster.cleanup(&db).await.is_err());
    let snapshot = cluster.status().final_snapshot_id.unwrap();
    assert!(snapshot.starts_with(&format!("{id}-final-")));
    assert!(rds.state.lock().unwrap().instances.contains_key(&id));

    let db = cluster.observe(db);
    assert_eq!(cluster.cleanup(&db).await.unwrap(), Cleanup::Done);
    assert_eq!(cluster.status().final_snapshot_id, Some(snapshot.clone()));
    let state = rds.state.lock().unwrap();
    assert_eq!(state.snapshots, BTreeMap::from([(snapshot, id)]));
    assert!(state.instances.is_empty());
}

#[tokio::test]
async fn the_finalizer_stays_until_rds_reports_the_instance_gone() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    rds.state.lock().unwrap().slow_delete = true;
    let db = deleting(
        cluster
            .ready_database(database(
                json!({"engine": "mysql", "size": "small", "deletionPolicy": "Delete"}),
            ))
            .await,
    );
    let id = rds.only_instance().id;
    assert_eq!(
        cluster.cleanup(&db).await.unwrap(),
        Cleanup::Wait(Action::requeue(POLL))
    );
    assert_eq!(cluster.status().phase, Some(DatabasePhase::Deleting));
    let db = cluster.observe(db);
    assert_eq!(
        cluster.cleanup(&db).await.unwrap(),
        Cleanup::Wait(Action::requeue(POLL))
    );
    assert_eq!(rds.calls("delete"), 1);
    rds.finish_deletion(&id);
    assert_eq!(cluster.cleanup(&db).await.unwrap(), Cleanup::Done);
    assert!(rds.state.lock().unwrap().snapshots.is_empty());
}

#[tokio::test]
async fn retain_removes_our_tags_and_leaves_the_instance() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = deleting(
        cluster
            .ready_database(database(
                json!({"engine": "postgres", "size": "small", "deletionPolicy": "Retain"}),
            ))
            .await,
    );
    assert_eq!(cluster.cleanup(&db).await.unwrap(), Cleanup::Done);
    let left = rds.only_instance();
    assert!(left.tags.is_empty(), "{:?}", left.tags);
    assert_eq!(rds.calls("delete"), 0);
    assert!(cluster.events().contains(&"Retained".to_string()));
    // The connection details stay usable: the Secret is kept, no longer owned by the resource.
    let kept = cluster
        .kube
        .secrets
        .lock()
        .unwrap()
        .get(&(
            "shop".to_string(),
            format!("{}-connection", db.metadata.name.as_deref().unwrap()),
        ))
        .cloned()
        .expect("connection Secret kept");
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    assert!(
        !cluster.secret(&format!(
            "{}-connection",
            db.metadata.name.as_deref().unwrap()
        ))["password"]
            .is_empty()
    );
    assert!(
        kept.metadata.finalizers.unwrap_or_default().is_empty(),
        "the hold goes with the release"
    );
    // F4/F11: the master password is copied where deleting the namespace does not reach.
    let uid = db.metadata.uid.clone().unwrap();
    let copy = cluster
        .kube
        .secret_data("keeper-system", &format!("retained-{uid}-connection"))
        .expect("a copy in keeper's namespace");
    assert_eq!(
        copy,
        cluster.secret(&format!(
            "{}-connection",
            db.metadata.name.as_deref().unwrap()
        ))
    );
    assert!(
        cluster
            .events()
            .contains(&"RetainedCredentialsCopied".to_string())
    );
}

#[tokio::test]
async fn a_retained_databases_connection_secret_is_held_until_its_cleanup_copied_it() {
    let cluster = Cluster::default();
    let db = cluster
        .ready_database(database(
            json!({"engine": "postgres", "size": "small", "deletionPolicy": "Retain"}),
        ))
        .await;
    let name = format!("{}-connection", db.metadata.name.as_deref().unwrap());
    let held = |cluster: &Cluster| {
        cluster
            .kube
            .secrets
            .lock()
            .unwrap()
            .get(&("shop".to_string(), name.clone()))
            .and_then(|s| s.metadata.finalizers.clone())
            .unwrap_or_default()
            .contains(&crate::api::names::CLEANUP_HOLD.to_string())
    };
    assert!(
        held(&cluster),
        "a namespace deletion must not take it first"
    );
    // With another policy the Secret is read by no cleanup: the hold goes on release.
    let mut other = deleting(db);
    other.spec.deletion_policy = crate::api::DatabaseDeletionPolicy::Delete;
    cluster.rds().state.lock().unwrap().instances.clear();
    assert_eq!(cluster.cleanup(&other).await.unwrap(), Cleanup::Done);
    assert!(!held(&cluster));
}

#[tokio::test]
async fn a_retained_databases_connection_secret_deleted_by_someone_comes_back_with_a_new_password()
{
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = cluster
        .ready_database(database(
            json!({"engine": "postgres", "size": "small", "deletionPolicy": "Retain"}),
        ))
        .await;
    let id = rds.only_instance().id;
    let old = rds.password(&id);
    let name = format!("{}-connection", db.metadata.name.as_deref().unwrap());
    // `kubectl delete secret` while the database lives: held, it stays Terminating.
    cluster.kube.delete_secret("shop", &name);
    cluster.apply(&db).await.unwrap();
    assert!(
        !cluster
            .kube
            .secrets
            .lock()
            .unwrap()
            .contains_key(&("shop".to_string(), name.clone())),
        "let go, it is gone"
    );
    assert!(cluster.events().contains(&"SecretDeleted".to_string()));
    // Its removal wakes the database: a new password, set on the instance.
    cluster.apply(&db).await.unwrap();
    let secret = cluster.secret(&name);
    assert_ne!(secret["password"], old);
    assert_eq!(secret["password"], rds.password(&id));

    // Deleted with its namespace, it stays held for the cleanup, which copies it.
    cluster
        .kube
        .terminating
        .lock()
        .unwrap()
        .insert("shop".to_string());
    cluster.kube.delete_secret("shop", &name);
    cluster.apply(&db).await.unwrap();
    assert!(cluster.secret(&name).contains_key("password"));
}

#[tokio::test]
async fn deletion_protection_blocks_and_turning_it_off_on_the_terminating_resource_proceeds() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = deleting(
        cluster
            .ready_database(database(
                json!({"engine": "postgres", "size": "small", "deletionProtection": true}),
            ))
            .await,
    );
    assert!(rds.only_instance().deletion_protection);
    for _ in 0..2 {
        let db = cluster.observe(db.clone());
        assert!(matches!(
            cluster.cleanup(&db).await.unwrap(),
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
            .contains(r#"kubectl patch clouddatabase orders -n shop --type merge -p '{"spec":{"deletionProtection":false}}'"#),
        "{}",
        blocked.message
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
    assert_eq!(cluster.cleanup(&unprotected).await.unwrap(), Cleanup::Done);
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

/// keeper's finalizer released with another one left: the object stays until that one goes,
/// and its status must not keep saying what was true before (DeletionBlocked, Ready).
#[tokio::test]
async fn a_database_released_before_another_finalizer_says_it_is_going() {
    let cluster = Cluster::default();
    let mut db = deleting(
        cluster
            .ready_database(database(
                json!({"engine": "postgres", "size": "small", "deletionProtection": true,
                       "deletionPolicy": "Delete"}),
            ))
            .await,
    );
    db.metadata
        .finalizers
        .get_or_insert_default()
        .push("backup.example.com/last-dump".into());
    assert!(matches!(
        cluster.cleanup(&db).await.unwrap(),
        Cleanup::Wait(_)
    ));
    assert!(conditions::is_true(
        &cluster.status().conditions,
        DELETION_BLOCKED
    ));

    let mut unprotected = cluster.observe(db);
    unprotected.spec.deletion_protection = false;
    assert_eq!(cluster.cleanup(&unprotected).await.unwrap(), Cleanup::Done);
    let status = cluster.status();
    assert_eq!(status.phase, Some(DatabasePhase::Deleting));
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.type_ == DELETION_BLOCKED),
        "{:?}",
        status.conditions
    );
    assert!(cluster.events().contains(&"DeletionUnblocked".to_string()));
}

#[tokio::test]
async fn a_database_never_created_is_released_at_once() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = deleting(postgres());
    assert_eq!(cluster.cleanup(&db).await.unwrap(), Cleanup::Done);
    assert!(rds.state.lock().unwrap().calls.is_empty());
    // Recorded but the create never happened (or failed): RDS says so, and that is enough.
    let db = deleting(recorded(postgres()));
    assert_eq!(cluster.cleanup(&db).await.unwrap(), Cleanup::Done);
    assert_eq!(rds.calls("delete"), 0);
}

#[tokio::test]
async fn a_busy_instance_requeues_the_deletion_and_not_found_counts_as_done() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let db = deleting(
        cluster
            .ready_database(database(
                json!({"engine": "postgres", "size": "small", "deletionPolicy": "Delete"}),
            ))
            .await,
    );
    rds.fail_next(
        "delete",
        rds_error(
            ErrorClass::Conflict,
            "InvalidDBInstanceState",
            "instance is backing-up",
        ),
    );
    assert_eq!(
        cluster.cleanup(&db).await.unwrap(),
        Cleanup::Wait(Action::requeue(POLL))
    );
    assert_eq!(ready(&cluster.status()).unwrap().1, "InstanceBusy");
    rds.fail_next(
        "delete",
        rds_error(ErrorClass::NotFound, "DBInstanceNotFound", "gone"),
    );
    let db = cluster.observe(db);
    assert_eq!(cluster.cleanup(&db).await.unwrap(), Cleanup::Done);
}

/// The whole lifecycle through the real backend on a moto server: Ready with every Secret
/// key and our tags; deletion with each policy.
#[tokio::test]
async fn every_deletion_policy_against_moto() {
    use crate::backends::rds::moto::{MotoServer, backend, snapshots};
    let server = MotoServer::start("every_deletion_policy_against_moto", &[]);
    for (name, policy) in [("snap", "Snapshot"), ("drop", "Delete"), ("keep", "Retain")] {
        let cluster =
            Cluster::with_rds(backend(&server, Arc::new(crate::metrics::Metrics::new())).await);
        let rds = cluster.rds();
        let mut db = database(json!({
            "engine": "postgres", "size": "small", "deletionPolicy": policy
        }));
        db.metadata.name = Some(name.into());
        db.metadata.uid = Some(format!("uid-{name}"));
        cluster.apply(&db).await.unwrap();
        let status = cluster.status();
        assert_eq!(status.phase, Some(DatabasePhase::Ready), "{status:?}");
        let id = status.instance_id.clone().unwrap();
        let secret = cluster.secret(&format!("{name}-connection"));
        assert_eq!(secret.len(), 7, "{:?}", secret.keys());
        let instance = rds.describe(&id).await.unwrap().unwrap();
        assert_eq!(instance.tags, ownership_tags(&db));
        assert_eq!(secret["host"], instance.endpoint.unwrap().address);

        let db = deleting(cluster.observe(db));
        assert_eq!(cluster.cleanup(&db).await.unwrap(), Cleanup::Done);
        let left = rds.describe(&id).await.unwrap();
        match policy {
            "Snapshot" => {
                assert_eq!(left, None);
                let recorded = cluster.status().final_snapshot_id.unwrap();
                assert_eq!(snapshots(rds, &id).await, [recorded]);
            }
            "Delete" => {
                assert_eq!(left, None);
                assert!(snapshots(rds, &id).await.is_empty());
            }
            _ => assert!(left.unwrap().tags.is_empty()),
        }
    }
}

#[tokio::test]
async fn a_changed_region_never_creates_a_second_instance_nor_reads_the_first_as_gone() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    rds.state.lock().unwrap().region = Some("eu-west-1".into());
    let db = cluster.ready_database(postgres()).await;
    let status = cluster.status();
    assert_eq!(status.region.as_deref(), Some("eu-west-1"));
    assert_eq!(status.account_id.as_deref(), Some("000000000000"));

    // keeper restarted with another region: the instance is not in it, and that is reported,
    // not taken as a reason to create one.
    rds.state.lock().unwrap().region = Some("us-east-1".into());
    let describes = rds.calls("describe");
    let status = cluster.fails_with(&db, "RegionMismatch").await;
    let message = &condition(&status.conditions, "Ready").message;
    assert!(
        message.contains("eu-west-1") && message.contains("us-east-1"),
        "{message}"
    );
    assert_eq!(rds.calls("create"), 1);
    assert_eq!(rds.calls("describe"), describes, "RDS was not asked");
    assert_eq!(cluster.warnings(), vec!["RegionMismatch".to_string()]);

    // Deleting it is held, not released over a running instance.
    let db = deleting(cluster.observe(db));
    assert!(matches!(
        cluster.cleanup(&db).await.unwrap(),
        Cleanup::Wait(_)
    ));
    let status = cluster.status();
    let blocked = status
        .conditions
        .iter()
        .find(|c| c.type_ == DELETION_BLOCKED)
        .expect("DeletionBlocked");
    assert_eq!(blocked.reason, "RegionMismatch");
    assert_eq!(rds.calls("delete"), 0);
    assert_eq!(rds.state.lock().unwrap().instances.len(), 1);

    // Back in the instance's region, the deletion proceeds.
    rds.state.lock().unwrap().region = Some("eu-west-1".into());
    let db = cluster.observe(db);
    let mut done = false;
    for _ in 0..4 {
        if cluster.cleanup(&cluster.observe(db.clone())).await.unwrap() == Cleanup::Done {
            done = true;
            break;
        }
    }
    assert!(done, "deleted in its own region");
    assert_eq!(rds.calls("delete"), 1);
}

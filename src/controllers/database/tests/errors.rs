//! Error classification through the shared policy: a transient error backs off and writes
//! nothing, a permanent one fails with a Warning (showing Deleting while deleting), a conflict
//! or a vanished instance is looked at again soon, a busy instance is shown and polled.

use super::*;

#[tokio::test]
async fn becoming_ready_is_a_normal_event() {
    let cluster = Cluster::default();
    cluster.ready_database(postgres()).await;
    let notes = cluster.kube.notes();
    let available = notes.iter().find(|n| n.reason == "Available").unwrap();
    assert_eq!(available.type_, EventType::Normal);
    assert!(available.message.ends_with("is available"));
    assert_eq!(cluster.events(), ["CreateRequested", "Available"]);
}

#[tokio::test]
async fn an_unavailable_rds_backs_off_and_writes_nothing() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    rds.fail_next(
        "describe",
        rds_error(ErrorClass::Transient, "HTTP 503", "Service Unavailable"),
    );
    assert!(matches!(
        cluster.apply(&postgres()).await,
        Err(runtime::Error::Reconciler(Error::Backend(e))) if e.is_transient()
    ));
    assert_eq!(cluster.writes(), (0, 0));
    assert!(cluster.events().is_empty());
}

#[tokio::test]
async fn a_request_rds_rejects_fails_with_a_warning_and_keeps_what_was_recorded() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    rds.fail_next(
        "create",
        rds_error(
            ErrorClass::Permanent,
            "InvalidParameterValue",
            "Invalid DB instance class",
        ),
    );
    assert_eq!(
        cluster.apply(&postgres()).await.unwrap(),
        Action::requeue(PERMANENT_RETRY)
    );
    let status = cluster.status();
    assert_eq!(status.phase, Some(DatabasePhase::Failed));
    assert_eq!(
        ready(&status),
        Some(("False".into(), "BackendError".into()))
    );
    assert!(
        condition(&status.conditions, "Ready")
            .message
            .contains("Invalid DB instance class")
    );
    assert_eq!(cluster.warnings(), ["BackendError"]);
    // The identity and the password were stored before the call: a retry reuses both.
    assert_eq!(
        status.instance_id,
        Some(instance_identifier("shop", "orders"))
    );
    assert!(!cluster.secret("orders-connection")["password"].is_empty());
}

#[tokio::test]
async fn an_unconfigured_size_is_an_invalid_spec() {
    let mut config = OperatorConfig::default();
    config.rds.sizes.clear();
    let cluster = Cluster::with_config(FakeRds::default(), config);
    assert_eq!(
        cluster.apply(&postgres()).await.unwrap(),
        Action::requeue(PERMANENT_RETRY)
    );
    let status = cluster.status();
    assert_eq!(status.phase, Some(DatabasePhase::Failed));
    assert_eq!(ready(&status), Some(("False".into(), "InvalidSpec".into())));
    assert!(
        condition(&status.conditions, "Ready")
            .message
            .contains("rds.sizes")
    );
    assert_eq!(cluster.rds().calls("describe"), 0);
}

#[tokio::test]
async fn a_conflicting_secret_write_backs_off_without_a_failure() {
    let cluster = Cluster::default();
    // The first write is the recorded identity; the second, the password Secret, conflicts.
    let db = recorded(postgres());
    *cluster.kube.fail_next_write.lock().unwrap() = Some(409);
    assert!(cluster.apply(&db).await.is_err());
    assert_eq!(cluster.writes(), (0, 0));
    assert!(cluster.events().is_empty());
    assert_eq!(cluster.rds().calls("create"), 0);
}

#[tokio::test]
async fn an_instance_gone_between_two_calls_is_looked_at_again_soon() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let mut db = cluster.ready_database(postgres()).await;
    db.spec.storage_gib = Some(40);
    rds.fail_next(
        "modify",
        rds_error(ErrorClass::NotFound, "DBInstanceNotFound", "gone"),
    );
    assert!(
        cluster.apply(&db).await.is_err(),
        "backs off and looks again"
    );
    assert_eq!(cluster.status().phase, Some(DatabasePhase::Ready));
    assert!(cluster.warnings().is_empty());
}

#[tokio::test]
async fn a_busy_instance_during_apply_is_shown_and_polled() {
    let cluster = Cluster::default();
    let rds = cluster.rds();
    let mut db = cluster.ready_database(postgres()).await;
    db.spec.storage_gib = Some(40);
    rds.fail_next(
        "modify",
        rds_error(
            ErrorClass::Conflict,
            "InvalidDBInstanceState",
            "instance is backing-up",
        ),
    );
    assert_eq!(cluster.apply(&db).await.unwrap(), Action::requeue(POLL));
    let status = cluster.status();
    assert_eq!(status.phase, Some(DatabasePhase::Provisioning));
    assert_eq!(ready(&status).unwrap().1, "InstanceBusy");
    assert!(
        condition(&status.conditions, "Ready")
            .message
            .contains("backing-up")
    );
}

#[tokio::test]
async fn a_permanent_error_during_deletion_shows_deleting_not_failed() {
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
        rds_error(ErrorClass::Permanent, "AccessDenied", "not authorized"),
    );
    assert_eq!(
        cluster.cleanup(&db).await.unwrap(),
        Cleanup::Wait(Action::requeue(PERMANENT_RETRY))
    );
    let status = cluster.status();
    assert_eq!(status.phase, Some(DatabasePhase::Deleting));
    assert_eq!(
        ready(&status),
        Some(("False".into(), "AccessDenied".into()))
    );
    assert_eq!(rds.state.lock().unwrap().instances.len(), 1);
}

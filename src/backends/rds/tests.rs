//! The RDS client against mocked SDK answers (classification, requests, metrics) and moto.

use super::*;

use aws_sdk_rds::config::retry::RetryConfig;
use aws_sdk_rds::error::ErrorMetadata;
use aws_sdk_rds::operation::create_db_instance::CreateDBInstanceError;
use aws_sdk_rds::operation::delete_db_instance::{DeleteDBInstanceError, DeleteDbInstanceOutput};
use aws_sdk_rds::operation::describe_db_instances::{
    DescribeDBInstancesError, DescribeDbInstancesOutput,
};
use aws_sdk_rds::operation::modify_db_instance::ModifyDBInstanceError;
use aws_sdk_rds::types::error::{
    DbInstanceAlreadyExistsFault, DbInstanceNotFoundFault, InvalidDbInstanceStateFault,
};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};

/// A backend whose client answers from `rules`, with SDK retries off so each rule is one call.
fn backend(rules: &[&Rule]) -> (RdsBackend, Arc<Metrics>) {
    let client = mock_client!(aws_sdk_rds, RuleMode::Sequential, rules, |c| c
        .retry_config(RetryConfig::disabled()));
    let metrics = Arc::new(Metrics::new());
    (
        RdsBackend::new(
            client,
            RdsBackend::unconnected_sts(),
            RateLimit::default(),
            metrics.clone(),
        ),
        metrics,
    )
}

fn counted(metrics: &Metrics, operation: &str, outcome: &str) -> bool {
    metrics.encode().contains(&format!(
        r#"keeper_backend_requests_total{{backend="rds",operation="{operation}",outcome="{outcome}"}} 1"#
    ))
}

fn unmodeled(code: &str, message: &str) -> ErrorMetadata {
    ErrorMetadata::builder().code(code).message(message).build()
}

fn new_instance() -> NewInstance {
    NewInstance {
        id: "shop-orders-1a2b3c4d".into(),
        engine: Engine::Postgres,
        engine_version: None,
        instance_class: "db.t3.micro".into(),
        storage_gib: 20,
        username: "keeper".into(),
        password: Password::new("s3cret-Pa55".into()),
        database_name: Some("orders".into()),
        deletion_protection: false,
        tags: BTreeMap::from([("keeper.dev/owner-uid".to_string(), "uid-1".to_string())]),
        db_subnet_group_name: None,
        vpc_security_group_ids: Vec::new(),
    }
}

#[tokio::test]
async fn describe_maps_the_instance() {
    let rule = mock!(aws_sdk_rds::Client::describe_db_instances)
        .match_requests(|r| r.db_instance_identifier() == Some("db-1"))
        .then_output(|| {
            DescribeDbInstancesOutput::builder()
                .db_instances(
                    aws_sdk_rds::types::DbInstance::builder()
                        .db_instance_identifier("db-1")
                        .db_instance_arn("arn:aws:rds:eu-central-1:1:db:db-1")
                        .db_instance_status("available")
                        .endpoint(
                            aws_sdk_rds::types::Endpoint::builder()
                                .address("db-1.rds.example")
                                .port(5432)
                                .build(),
                        )
                        .tag_list(
                            Tag::builder()
                                .key("keeper.dev/name")
                                .value("orders")
                                .build(),
                        )
                        .deletion_protection(true)
                        .db_instance_class("db.t3.micro")
                        .allocated_storage(20)
                        .build(),
                )
                .build()
        });
    let (rds, metrics) = backend(&[&rule]);
    let instance = rds.describe_db_instance("db-1").await.unwrap().unwrap();
    assert_eq!(
        instance,
        DbInstance {
            id: "db-1".into(),
            arn: "arn:aws:rds:eu-central-1:1:db:db-1".into(),
            state: "available".into(),
            endpoint: Some(DatabaseEndpoint {
                address: "db-1.rds.example".into(),
                port: 5432
            }),
            tags: BTreeMap::from([("keeper.dev/name".to_string(), "orders".to_string())]),
            deletion_protection: true,
            instance_class: "db.t3.micro".into(),
            storage_gib: 20,
        }
    );
    assert!(counted(&metrics, "describe_db_instances", "success"));
}

#[tokio::test]
async fn not_found_is_none_and_counted_as_not_found() {
    let rule = mock!(aws_sdk_rds::Client::describe_db_instances).then_error(|| {
        DescribeDBInstancesError::DbInstanceNotFoundFault(
            DbInstanceNotFoundFault::builder()
                .message("DBInstance db-1 not found")
                .build(),
        )
    });
    let (rds, metrics) = backend(&[&rule]);
    assert_eq!(rds.describe_db_instance("db-1").await.unwrap(), None);
    assert!(counted(&metrics, "describe_db_instances", "not_found"));

    let delete = mock!(aws_sdk_rds::Client::delete_db_instance).then_error(|| {
        DeleteDBInstanceError::DbInstanceNotFoundFault(DbInstanceNotFoundFault::builder().build())
    });
    let (rds, _) = backend(&[&delete]);
    let err = rds
        .delete_db_instance("db-1", &FinalSnapshot::Skip)
        .await
        .unwrap_err();
    assert!(err.is_gone(), "{err:?}");
    assert_eq!(
        (err.operation, err.code.as_str()),
        ("delete_db_instance", "DBInstanceNotFound")
    );
}

#[tokio::test]
async fn already_exists_is_a_conflict_and_the_request_carries_tags_and_password() {
    let rule = mock!(aws_sdk_rds::Client::create_db_instance)
        .match_requests(|r| {
            r.db_instance_identifier() == Some("shop-orders-1a2b3c4d")
                && r.engine() == Some("postgres")
                && r.master_user_password() == Some("s3cret-Pa55")
                && r.db_name() == Some("orders")
                && r.tags().len() == 1
        })
        .then_error(|| {
            CreateDBInstanceError::DbInstanceAlreadyExistsFault(
                DbInstanceAlreadyExistsFault::builder().build(),
            )
        });
    let (rds, metrics) = backend(&[&rule]);
    let err = rds.create_db_instance(&new_instance()).await.unwrap_err();
    assert_eq!(
        (err.class, err.code.as_str(), err.operation),
        (
            ErrorClass::Conflict,
            "DBInstanceAlreadyExists",
            "create_db_instance"
        )
    );
    assert_eq!(rule.num_calls(), 1);
    assert!(counted(&metrics, "create_db_instance", "conflict"));
}

#[tokio::test]
async fn invalid_state_is_a_conflict_with_the_rds_message() {
    let delete = mock!(aws_sdk_rds::Client::delete_db_instance).then_error(|| {
        DeleteDBInstanceError::InvalidDbInstanceStateFault(
            InvalidDbInstanceStateFault::builder()
                .message("Instance db-1 is currently creating")
                .build(),
        )
    });
    let modify = mock!(aws_sdk_rds::Client::modify_db_instance).then_error(|| {
        ModifyDBInstanceError::InvalidDbInstanceStateFault(
            InvalidDbInstanceStateFault::builder().build(),
        )
    });
    let (rds, metrics) = backend(&[&delete, &modify]);
    let err = rds
        .delete_db_instance("db-1", &FinalSnapshot::Skip)
        .await
        .unwrap_err();
    assert_eq!(
        (err.class, err.code.as_str()),
        (ErrorClass::Conflict, "InvalidDBInstanceState")
    );
    assert!(err.message.contains("currently creating"), "{err}");
    let err = rds
        .modify_db_instance("db-1", &Modification::default())
        .await
        .unwrap_err();
    assert_eq!(
        (err.class, err.code.as_str(), err.operation),
        (
            ErrorClass::Conflict,
            "InvalidDBInstanceState",
            "modify_db_instance"
        )
    );
    assert!(counted(&metrics, "delete_db_instance", "conflict"));
}

#[tokio::test]
async fn throttling_is_transient() {
    let rule = mock!(aws_sdk_rds::Client::describe_db_instances)
        .then_error(|| DescribeDBInstancesError::generic(unmodeled("Throttling", "Rate exceeded")));
    let (rds, metrics) = backend(&[&rule]);
    let err = rds.describe_db_instance("db-1").await.unwrap_err();
    assert_eq!(
        (err.code.as_str(), err.message.as_str()),
        ("Throttling", "Rate exceeded")
    );
    assert!(err.is_transient());
    assert!(counted(&metrics, "describe_db_instances", "transient"));
}

#[tokio::test]
async fn expired_credentials_are_transient() {
    let rule = mock!(aws_sdk_rds::Client::describe_db_instances).then_error(|| {
        DescribeDBInstancesError::generic(unmodeled(
            "ExpiredToken",
            "The security token included in the request is expired",
        ))
    });
    let (rds, _) = backend(&[&rule]);
    let err = rds.describe_db_instance("db-1").await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(!is_access_denied(&err));
}

#[tokio::test]
async fn access_denied_is_permanent() {
    let rule = mock!(aws_sdk_rds::Client::create_db_instance).then_error(|| {
        CreateDBInstanceError::generic(unmodeled(
            "AccessDenied",
            "not authorized to perform: rds:CreateDBInstance",
        ))
    });
    let (rds, metrics) = backend(&[&rule]);
    let err = rds.create_db_instance(&new_instance()).await.unwrap_err();
    assert!(err.message.contains("rds:CreateDBInstance"), "{err}");
    assert!(err.is_permanent() && is_access_denied(&err), "{err:?}");
    assert!(counted(&metrics, "create_db_instance", "permanent"));
}

#[tokio::test]
async fn other_client_errors_are_rejected_and_server_errors_transient() {
    let invalid = mock!(aws_sdk_rds::Client::create_db_instance).then_error(|| {
        CreateDBInstanceError::generic(unmodeled(
            "InvalidParameterValue",
            "Invalid DB instance class",
        ))
    });
    let unavailable = mock!(aws_sdk_rds::Client::describe_db_instances)
        .sequence()
        .http_status(503, None)
        .build();
    let (rds, _) = backend(&[&invalid, &unavailable]);
    let err = rds.create_db_instance(&new_instance()).await.unwrap_err();
    assert_eq!(err.code, "InvalidParameterValue", "{err:?}");
    assert!(err.is_permanent() && !is_access_denied(&err), "{err:?}");
    assert_eq!(
        err.to_string(),
        "rds create_db_instance failed (InvalidParameterValue): Invalid DB instance class"
    );
    let err = rds.describe_db_instance("db-1").await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
}

#[tokio::test]
async fn delete_asks_for_exactly_one_of_snapshot_or_skip() {
    let with_snapshot = mock!(aws_sdk_rds::Client::delete_db_instance)
        .match_requests(|r| {
            r.skip_final_snapshot() == Some(false)
                && r.final_db_snapshot_identifier() == Some("db-1-final-20260101000000")
        })
        .then_output(|| DeleteDbInstanceOutput::builder().build());
    let skip = mock!(aws_sdk_rds::Client::delete_db_instance)
        .match_requests(|r| {
            r.skip_final_snapshot() == Some(true) && r.final_db_snapshot_identifier().is_none()
        })
        .then_output(|| DeleteDbInstanceOutput::builder().build());
    let (rds, _) = backend(&[&with_snapshot, &skip]);
    rds.delete_db_instance(
        "db-1",
        &FinalSnapshot::Take("db-1-final-20260101000000".into()),
    )
    .await
    .unwrap();
    rds.delete_db_instance("db-1", &FinalSnapshot::Skip)
        .await
        .unwrap();
    assert_eq!((with_snapshot.num_calls(), skip.num_calls()), (1, 1));
}

#[tokio::test]
async fn the_real_backend_against_moto() {
    let server = moto::MotoServer::start("the_real_backend_against_moto", &[]);
    let metrics = Arc::new(Metrics::new());
    let rds = moto::backend(&server, metrics.clone()).await;
    // The account keeper acts in, from STS at the same test server, asked once per process.
    assert_eq!(rds.account().await.unwrap(), "123456789012");
    assert_eq!(rds.account().await.unwrap(), "123456789012");
    assert!(counted(&metrics, "get_caller_identity", "success"));

    // Create with tags: available at once on moto, with an endpoint and our tags.
    let snapshotted = NewInstance {
        id: "keeper-moto-snapshot".into(),
        ..new_instance()
    };
    rds.create_db_instance(&snapshotted).await.unwrap();
    let found = rds
        .describe_db_instance(&snapshotted.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.state, "available");
    assert!(
        found
            .endpoint
            .is_some_and(|e| !e.address.is_empty() && e.port > 0)
    );
    assert_eq!(found.tags, snapshotted.tags);
    assert_eq!(found.storage_gib, 20);
    assert!(
        rds.create_db_instance(&snapshotted)
            .await
            .unwrap_err()
            .is_conflict()
    );

    // Delete with a final snapshot: the snapshot lists under the recorded id.
    let snapshot = "keeper-moto-snapshot-final-20260101000000".to_string();
    rds.delete_db_instance(&snapshotted.id, &FinalSnapshot::Take(snapshot.clone()))
        .await
        .unwrap();
    assert_eq!(
        rds.describe_db_instance(&snapshotted.id).await.unwrap(),
        None
    );
    assert_eq!(moto::snapshots(&rds, &snapshotted.id).await, [snapshot]);
    assert!(
        rds.delete_db_instance(&snapshotted.id, &FinalSnapshot::Skip)
            .await
            .unwrap_err()
            .is_gone()
    );

    // Delete skipping the snapshot: nothing left.
    let skipped = NewInstance {
        id: "keeper-moto-skip".into(),
        ..new_instance()
    };
    rds.create_db_instance(&skipped).await.unwrap();
    rds.delete_db_instance(&skipped.id, &FinalSnapshot::Skip)
        .await
        .unwrap();
    assert_eq!(rds.describe_db_instance(&skipped.id).await.unwrap(), None);
    assert!(moto::snapshots(&rds, &skipped.id).await.is_empty());

    // Tags come off (Retain) and modifications apply.
    let retained = NewInstance {
        id: "keeper-moto-retain".into(),
        ..new_instance()
    };
    rds.create_db_instance(&retained).await.unwrap();
    let found = rds
        .describe_db_instance(&retained.id)
        .await
        .unwrap()
        .unwrap();
    rds.remove_tags_from_resource(&found.arn, &["keeper.dev/owner-uid".to_string()])
        .await
        .unwrap();
    rds.modify_db_instance(
        &retained.id,
        &Modification {
            deletion_protection: Some(true),
            storage_gib: Some(30),
            ..Modification::default()
        },
    )
    .await
    .unwrap();
    let found = rds
        .describe_db_instance(&retained.id)
        .await
        .unwrap()
        .unwrap();
    assert!(found.tags.is_empty(), "{:?}", found.tags);
    assert!(found.deletion_protection);
    assert_eq!(found.storage_gib, 30);
    assert!(
        rds.modify_db_instance("keeper-moto-missing", &Modification::default())
            .await
            .unwrap_err()
            .is_gone()
    );
}

#[tokio::test]
async fn rds_calls_keep_to_the_configured_request_rate() {
    use wiremock::matchers::method;
    use wiremock::{Mock, ResponseTemplate};
    let server = crate::test_support::mock_server().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            "<DescribeDBInstancesResponse><DescribeDBInstancesResult><DBInstances/></DescribeDBInstancesResult></DescribeDBInstancesResponse>",
            "text/xml",
        ))
        .mount(&server)
        .await;
    let sdk = moto::sdk_config().await;
    let config = crate::config::OperatorConfig::parse(&format!(
        "rds: {{endpoint: {}, requestsPerSecond: 20, requestBurst: 1}}\n",
        server.uri()
    ))
    .unwrap();
    let rds = RdsBackend::with_sdk_config(
        &sdk,
        &config.rds,
        &BackendTimeouts::default(),
        Arc::new(Metrics::new()),
    );
    let started = std::time::Instant::now();
    let answers = futures::future::join_all((0..6).map(|_| rds.describe_db_instance("db"))).await;
    let took = started.elapsed();
    for answer in answers {
        assert_eq!(answer.unwrap(), None);
    }
    // 6 calls at 20/s, one at a time: the last goes 250 ms after the first.
    assert!(took >= std::time::Duration::from_millis(240), "{took:?}");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    assert_eq!(server.received_requests().await.unwrap().len(), 6);
}

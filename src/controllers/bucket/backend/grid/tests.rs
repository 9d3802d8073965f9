//! The StorageGRID side against a local HTTP mock of the management API (127.0.0.1).

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use std::sync::Arc;

use super::*;
use crate::backends::s3::OwnerMark;
use crate::config::TlsConfig;
use crate::metrics::Metrics;

const ACCOUNT: &str = "40327589106748163542";
const UID: &str = "uid-1";

fn ok(status: u16, data: Value) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "responseTime": "2025-01-15T10:00:00.000Z", "status": "success", "apiVersion": "4.0", "data": data
    }))
}

fn error(code: u16) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "responseTime": "2025-01-15T10:00:00.000Z", "status": "error", "apiVersion": "4.0", "code": code,
        "message": {"text": "no", "key": "some.key"}
    }))
}

async fn mock_grid() -> (MockServer, StorageGrid) {
    let server = crate::test_support::mock_server().await;
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .respond_with(ok(200, json!("token")).insert_header("Cache-Control", "max-age=57599"))
        .mount(&server)
        .await;
    let url = reqwest::Url::parse(&server.uri()).unwrap();
    let client =
        storagegrid::Client::new(&url, &TlsConfig::default(), Arc::new(Metrics::new())).unwrap();
    let backend = StorageGrid::new(
        client,
        storagegrid::Login::tenant_root(ACCOUNT, "root-pass"),
        Arc::default(),
        LookTtl {
            usage: Some(Duration::from_secs(3600)),
            check: Duration::from_secs(3600),
        },
    );
    (server, backend)
}

async fn on(server: &MockServer, verb: &str, at: &str, response: ResponseTemplate) {
    Mock::given(method(verb))
        .and(path(format!("/api/v4/{at}")))
        .respond_with(response)
        .mount(server)
        .await;
}

fn desired(recorded: bool, adopt: bool) -> DesiredBucket {
    DesiredBucket {
        name: "ns-b".into(),
        region: "us-east-1".into(),
        versioning: true,
        object_lock: false,
        owner: OwnerMark::new("ns", "b", UID),
        recorded,
        intent: false,
        adopt,
    }
}

fn group_json(owner: &str) -> Value {
    let who = if owner == UID { "ns/b" } else { "other/x" };
    json!({"id": "g-1", "uniqueName": "group/keeper-ns-b",
           "displayName": format!("keeper bucket ns-b owner={who} owner-uid={owner}")})
}

/// A grid with user `u-1` for bucket `ns-b`.
async fn the_user_is(server: &MockServer) {
    on(
        server,
        "GET",
        "org/users/user/keeper-ns-b",
        ok(200, json!({"id": "u-1", "uniqueName": "user/keeper-ns-b"})),
    )
    .await;
}

/// A grid where user `u-1` takes a new key, `NEW`.
async fn a_key_can_be_issued(server: &MockServer) {
    on(
        server,
        "POST",
        "org/users/u-1/s3-access-keys",
        ok(
            201,
            json!({"id": "k-2", "accessKey": "NEW", "secretAccessKey": "new-secret"}),
        ),
    )
    .await;
}

/// A grid that has no user for bucket `ns-b` and makes it, as `u-1`.
async fn a_user_can_be_made(server: &MockServer) {
    on(server, "GET", "org/users/user/keeper-ns-b", error(404)).await;
    on(
        server,
        "POST",
        "org/users",
        ok(201, json!({"id": "u-1", "uniqueName": "user/keeper-ns-b"})),
    )
    .await;
}

/// The access keys of user `u-1`.
async fn user_keys(server: &MockServer, keys: Value) {
    on(server, "GET", "org/users/u-1/s3-access-keys", ok(200, keys)).await;
}

/// How the grid answers the deletion of key `id` of user `u-1`.
async fn key_delete(server: &MockServer, id: &str, response: ResponseTemplate) {
    let at = format!("org/users/u-1/s3-access-keys/{id}");
    on(server, "DELETE", &at, response).await;
}

/// A grid whose tenant holds bucket `ns-b`.
async fn the_bucket_exists(server: &MockServer) {
    on(
        server,
        "GET",
        "org/containers",
        ok(200, json!([{"name": "ns-b"}])),
    )
    .await;
}

/// A grid that deletes user `u-1` and group `g-1`.
async fn the_user_and_group_can_be_deleted(server: &MockServer) {
    on(
        server,
        "DELETE",
        "org/users/u-1",
        ResponseTemplate::new(204),
    )
    .await;
    on(
        server,
        "DELETE",
        "org/groups/g-1",
        ResponseTemplate::new(204),
    )
    .await;
}

/// A grid whose tenant holds bucket `ns-b` with `group` as its group.
async fn existing_bucket_with_group(group: Value) -> (MockServer, StorageGrid) {
    let (server, grid) = mock_grid().await;
    the_bucket_exists(&server).await;
    on(
        &server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, group),
    )
    .await;
    (server, grid)
}

/// A group as an older keeper marked it: the uid only.
fn legacy_group_json(owner: &str) -> Value {
    json!({"id": "g-1", "uniqueName": "group/keeper-ns-b",
           "displayName": format!("keeper bucket ns-b owner-uid={owner}")})
}

/// (method, path, body) of every request but the logins.
async fn calls(server: &MockServer) -> Vec<(String, String, Value)> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.url.path() != "/api/v4/authorize")
        .map(|r| {
            (
                r.method.to_string(),
                r.url.path().trim_start_matches("/api/v4/").to_string(),
                serde_json::from_slice(&r.body).unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// How often the bucket's group was read.
/// The paths of the DELETE calls among `calls`, in order.
fn deletes(calls: &[(String, String, Value)]) -> Vec<&str> {
    calls
        .iter()
        .filter(|c| c.0 == "DELETE")
        .map(|c| c.1.as_str())
        .collect()
}

fn group_reads(calls: &[(String, String, Value)]) -> usize {
    calls
        .iter()
        .filter(|c| c.0 == "GET" && c.1 == "org/groups/group/keeper-ns-b")
        .count()
}

/// A grid whose tenant has neither bucket `ns-b` nor its group, and takes both.
async fn a_new_bucket_can_be_made(server: &MockServer) {
    on(server, "GET", "org/containers", ok(200, json!([]))).await;
    on(server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
    on(server, "POST", "org/groups", ok(201, group_json(UID))).await;
    on(
        server,
        "POST",
        "org/containers",
        ok(201, json!({"name": "ns-b"})),
    )
    .await;
    on(
        server,
        "PUT",
        "org/containers/ns-b/versioning",
        ok(200, json!({})),
    )
    .await;
}

#[tokio::test]
async fn a_new_bucket_gets_its_marked_group_before_the_bucket_is_created() {
    let (server, grid) = mock_grid().await;
    a_new_bucket_can_be_made(&server).await;
    assert_eq!(
        grid.ensure(&desired(false, false)).await.unwrap().owner,
        Owner::Us
    );
    let calls = calls(&server).await;
    let group = calls
        .iter()
        .position(|c| c.0 == "POST" && c.1 == "org/groups")
        .unwrap();
    let bucket = calls
        .iter()
        .position(|c| c.0 == "POST" && c.1 == "org/containers")
        .unwrap();
    assert!(group < bucket, "the mark comes first: {calls:?}");
    assert_eq!(
        group_reads(&calls),
        1,
        "checked and marked on one look: {calls:?}"
    );
    let body = &calls[group].2;
    assert_eq!(
        body["displayName"],
        "keeper bucket ns-b owner=ns/b owner-uid=uid-1"
    );
    // Least privilege: the objects of this bucket, listing it; nothing on the bucket itself.
    let statements = &body["policies"]["s3"]["Statement"];
    assert_eq!(statements[0]["Resource"], json!(["arn:aws:s3:::ns-b/*"]));
    assert_eq!(statements[1]["Resource"], json!(["arn:aws:s3:::ns-b"]));
    let actions = format!("{statements}");
    for forbidden in [
        "s3:*",
        "DeleteBucket\"",
        "PutBucketPolicy",
        "BypassGovernanceRetention",
        "PutBucketVersioning",
    ] {
        assert!(!actions.contains(forbidden), "{forbidden} in {actions}");
    }
    assert!(actions.contains("s3:AbortMultipartUpload"), "{actions}");
    assert_eq!(body["policies"]["management"]["rootAccess"], false);
    assert_eq!(calls[bucket].2["name"], "ns-b");
}

/// How the grid answers `verb` on `at`, the first time only.
async fn once(server: &MockServer, verb: &str, at: &str, response: ResponseTemplate) {
    Mock::given(method(verb))
        .and(path(format!("/api/v4/{at}")))
        .respond_with(response)
        .up_to_n_times(1)
        .with_priority(1)
        .mount(server)
        .await;
}

/// A grid whose tenant has no bucket `ns-b`, and whose group `keeper-ns-b` is missing at the first
/// look and carries `owner`'s mark from then on (another writer made it meanwhile).
async fn a_group_appears_without_its_bucket(server: &MockServer, owner: &str) {
    on(server, "GET", "org/containers", ok(200, json!([]))).await;
    once(server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
    on(
        server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, group_json(owner)),
    )
    .await;
}

#[tokio::test]
async fn a_group_another_writer_created_meanwhile_is_looked_at_again_not_taken() {
    // Two keepers create the bucket at once: the second create of the group is refused, and
    // the group found then may belong to anyone: nothing is done with it before the next look.
    let (server, grid) = mock_grid().await;
    a_group_appears_without_its_bucket(&server, UID).await;
    on(&server, "POST", "org/groups", error(422)).await;
    let err = grid.ensure(&desired(false, false)).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    let calls = calls(&server).await;
    assert!(
        !calls
            .iter()
            .any(|c| c.1 == "org/containers" && c.0 == "POST"),
        "{calls:?}"
    );
}

#[tokio::test]
async fn a_user_another_writer_created_meanwhile_for_the_bucket_is_used() {
    let (server, grid) = mock_grid().await;
    on(
        &server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, group_json(UID)),
    )
    .await;
    once(&server, "GET", "org/users/user/keeper-ns-b", error(404)).await;
    the_user_is(&server).await;
    on(&server, "POST", "org/users", error(422)).await;
    user_keys(&server, json!([])).await;
    assert!(grid.user_keys("ns-b", None).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unmarked_existing_bucket_is_someone_elses_unless_recorded_or_adopted() {
    let (server, grid) = mock_grid().await;
    the_bucket_exists(&server).await;
    on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
    assert!(matches!(
        grid.ensure(&desired(false, false)).await.unwrap().owner,
        Owner::Unmarked(m) if m.contains("not created by keeper")
    ));
    assert_eq!(grid.owner(&desired(true, false)).await.unwrap(), Owner::Us);
    // Nothing was written for the refused bucket.
    assert!(calls(&server).await.iter().all(|c| c.0 == "GET"));
    on(&server, "POST", "org/groups", ok(201, group_json(UID))).await;
    on(
        &server,
        "PUT",
        "org/containers/ns-b/versioning",
        ok(200, json!({})),
    )
    .await;
    assert_eq!(
        grid.ensure(&desired(false, true)).await.unwrap().owner,
        Owner::Us
    );
}

#[tokio::test]
async fn a_bucket_marked_by_another_resource_is_not_ours() {
    let (server, grid) = existing_bucket_with_group(group_json("uid-2")).await;
    let owner = grid.owner(&desired(true, false)).await.unwrap();
    assert!(
        matches!(&owner, Owner::Taken(m) if m.contains("S3Bucket other/x (uid uid-2)")),
        "{owner:?}"
    );
    // Adoption does not take it either, and nothing is written.
    assert!(matches!(
        grid.ensure(&desired(false, true)).await.unwrap().owner,
        Owner::Taken(_)
    ));
    assert!(calls(&server).await.iter().all(|c| c.0 == "GET"));
}

#[tokio::test]
async fn a_mark_from_an_older_keeper_is_ours_and_upgraded() {
    let (server, grid) = existing_bucket_with_group(legacy_group_json(UID)).await;
    on(&server, "PUT", "org/groups/g-1", ok(200, group_json(UID))).await;
    on(
        &server,
        "PUT",
        "org/containers/ns-b/versioning",
        ok(200, json!({})),
    )
    .await;
    assert_eq!(
        grid.ensure(&desired(false, false)).await.unwrap().owner,
        Owner::Us
    );
    let calls = calls(&server).await;
    assert_eq!(
        group_reads(&calls),
        1,
        "owned and marked on one look: {calls:?}"
    );
    let update = calls
        .into_iter()
        .find(|c| c.0 == "PUT" && c.1 == "org/groups/g-1")
        .unwrap();
    assert_eq!(
        update.2["displayName"],
        "keeper bucket ns-b owner=ns/b owner-uid=uid-1"
    );
}

#[tokio::test]
async fn a_name_taken_by_another_tenant_is_a_conflict_not_ours() {
    let (server, grid) = mock_grid().await;
    on(&server, "GET", "org/containers", ok(200, json!([]))).await;
    on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
    on(&server, "POST", "org/groups", ok(201, group_json(UID))).await;
    on(&server, "POST", "org/containers", error(409)).await;
    assert!(matches!(
        grid.ensure(&desired(false, false)).await.unwrap().owner,
        Owner::Taken(m) if m.contains("another tenant")
    ));
}

#[tokio::test]
async fn observe_reads_the_drain_flag_and_the_usage_of_the_bucket() {
    let (server, grid) = mock_grid().await;
    on(
        &server,
        "GET",
        "org/containers",
        ok(200, json!([{"name": "ns-b", "deleteObjectStatus": {"isDeletingObjects": true, "initialObjectCount": "1500"}}])),
    )
    .await;
    on(
        &server,
        "GET",
        "org/usage",
        ok(
            200,
            json!({"calculationTime": "2025-01-15T09:58:00.000Z", "objectCount": 9, "dataBytes": 90,
                        "buckets": [{"name": "other", "objectCount": 1, "dataBytes": 1},
                                    {"name": "ns-b", "objectCount": "700", "dataBytes": 7000}]}),
        ),
    )
    .await;
    assert_eq!(
        grid.observe("ns-b", Purpose::Usage).await.unwrap(),
        Some(Observed {
            objects: 700,
            bytes: 7000,
            backend_draining: true
        })
    );
    assert_eq!(grid.observe("gone", Purpose::Usage).await.unwrap(), None);
}

#[tokio::test]
async fn idle_buckets_of_a_tenant_share_one_listing_and_one_usage_call_per_interval() {
    let (server, grid) = mock_grid().await;
    let names: Vec<String> = (0..50).map(|i| format!("b{i}")).collect();
    let containers: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    let usage: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "objectCount": 3, "dataBytes": 30}))
        .collect();
    on(&server, "GET", "org/containers", ok(200, json!(containers))).await;
    on(
        &server,
        "GET",
        "org/usage",
        ok(
            200,
            json!({"objectCount": 150, "dataBytes": 1500, "buckets": usage}),
        ),
    )
    .await;
    // Another reconcile's backend of the same tenant: the shared answers are the tenant's.
    let sibling = StorageGrid::new(
        grid.client.clone(),
        grid.tenant.clone(),
        grid.looks.clone(),
        grid.ttl,
    );
    for (i, name) in names.iter().enumerate() {
        let backend = if i % 2 == 0 { &grid } else { &sibling };
        assert_eq!(backend.existence(name).await.unwrap(), Some(false));
        assert_eq!(
            backend.observe(name, Purpose::Refresh).await.unwrap(),
            Some(Observed {
                objects: 3,
                bytes: 30,
                backend_draining: false
            })
        );
    }
    let paths: Vec<String> = calls(&server).await.into_iter().map(|c| c.1).collect();
    assert_eq!(
        paths,
        ["org/containers", "org/usage"],
        "one of each for 50 buckets"
    );
    // A bucket the shared listing does not hold is asked about afresh, not taken as gone.
    assert_eq!(grid.existence("gone").await.unwrap(), None);
    // A drain's poll always asks the grid.
    grid.observe("b1", Purpose::Usage).await.unwrap();
    let paths: Vec<String> = calls(&server).await.into_iter().map(|c| c.1).collect();
    assert_eq!(
        paths[2..],
        ["org/containers", "org/containers", "org/usage"]
    );
}

#[tokio::test]
async fn drain_toggles_and_deletion_outcomes() {
    let (server, grid) = mock_grid().await;
    on(
        &server,
        "POST",
        "org/containers/ns-b/delete-objects",
        ok(200, json!({"isDeletingObjects": true})),
    )
    .await;
    grid.start_drain("ns-b").await.unwrap();
    assert_eq!(calls(&server).await[0].2, json!({"deleteObjects": true}));
    on(
        &server,
        "POST",
        "org/containers/gone/delete-objects",
        error(404),
    )
    .await;
    grid.stop_drain("gone").await.unwrap();
    on(&server, "DELETE", "org/containers/full", error(409)).await;
    on(&server, "DELETE", "org/containers/gone", error(404)).await;
    on(
        &server,
        "DELETE",
        "org/containers/ns-b",
        ResponseTemplate::new(204),
    )
    .await;
    assert_eq!(grid.delete("full").await.unwrap(), DeleteOutcome::NotEmpty);
    assert_eq!(grid.delete("gone").await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(grid.delete("ns-b").await.unwrap(), DeleteOutcome::Deleted);
    on(&server, "DELETE", "org/containers/broken", error(500)).await;
    assert!(grid.delete("broken").await.unwrap_err().is_transient());
}

#[tokio::test]
async fn the_bucket_user_is_made_in_its_group_and_the_published_key_is_listed_by_access_key() {
    let (server, grid) = mock_grid().await;
    on(
        &server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, group_json(UID)),
    )
    .await;
    a_user_can_be_made(&server).await;
    // A listing names keys by credential id; OLD is the published access key.
    user_keys(&server, json!([{"id": "cred-old"}, {"id": "cred-left"}])).await;
    on(
        &server,
        "GET",
        "org/users/u-1/s3-access-keys/OLD",
        ok(200, json!({"id": "cred-old"})),
    )
    .await;
    on(
        &server,
        "GET",
        "org/users/u-1/s3-access-keys/GONE",
        error(404),
    )
    .await;
    assert_eq!(
        grid.user_keys("ns-b", Some("OLD")).await.unwrap(),
        ["OLD", "cred-left"]
    );
    // A published key the user does not have: every key is listed by its credential id.
    assert_eq!(
        grid.user_keys("ns-b", Some("GONE")).await.unwrap(),
        ["cred-old", "cred-left"]
    );
    let calls = calls(&server).await;
    let user = calls.iter().find(|c| c.1 == "org/users").unwrap();
    assert_eq!(user.2["memberOf"], json!(["g-1"]));
    assert!(
        calls.iter().all(|c| c.0 != "DELETE"),
        "listing deletes nothing"
    );
}

#[tokio::test]
async fn keys_are_created_for_the_bucket_user_and_deleted_by_id() {
    let (server, grid) = mock_grid().await;
    the_user_is(&server).await;
    a_key_can_be_issued(&server).await;
    key_delete(&server, "cred-left", ResponseTemplate::new(204)).await;
    key_delete(&server, "OLD", error(404)).await;
    let keys = grid.create_key("ns-b").await.unwrap();
    assert_eq!(
        keys,
        Keys {
            access_key_id: "NEW".into(),
            secret_access_key: "new-secret".into()
        }
    );
    assert!(
        !format!("{keys:?}").contains("new-secret"),
        "secrets stay out of Debug"
    );
    grid.delete_key("ns-b", "cred-left").await.unwrap();
    // Already gone: deleted all the same.
    grid.delete_key("ns-b", "OLD").await.unwrap();
    let calls = calls(&server).await;
    assert_eq!(
        deletes(&calls),
        [
            "org/users/u-1/s3-access-keys/cred-left",
            "org/users/u-1/s3-access-keys/OLD"
        ]
    );
}

/// How often the bucket's user was read by name.
fn user_reads(calls: &[(String, String, Value)]) -> usize {
    calls
        .iter()
        .filter(|c| c.0 == "GET" && c.1 == "org/users/user/keeper-ns-b")
        .count()
}

#[tokio::test]
async fn a_new_bucket_reads_its_group_and_its_user_once_up_to_its_first_key() {
    let (server, grid) = mock_grid().await;
    a_new_bucket_can_be_made(&server).await;
    a_user_can_be_made(&server).await;
    user_keys(&server, json!([{"id": "cred-left"}])).await;
    key_delete(&server, "cred-left", ResponseTemplate::new(204)).await;
    a_key_can_be_issued(&server).await;
    // One reconcile: the bucket made, its keys listed (the user made for it in the group just
    // made), one left over swept, one issued.
    assert!(grid.ensure(&desired(false, false)).await.unwrap().created);
    assert_eq!(grid.user_keys("ns-b", None).await.unwrap(), ["cred-left"]);
    grid.delete_key("ns-b", "cred-left").await.unwrap();
    assert_eq!(grid.create_key("ns-b").await.unwrap().access_key_id, "NEW");
    let calls = calls(&server).await;
    assert_eq!(group_reads(&calls), 1, "{calls:?}");
    assert_eq!(user_reads(&calls), 1, "{calls:?}");
    let user = calls.iter().find(|c| c.1 == "org/users").unwrap();
    assert_eq!(user.2["memberOf"], json!(["g-1"]));
    assert_eq!(calls.len(), 10, "{calls:?}");
    // Another bucket's user is never taken for this one's.
    on(&server, "GET", "org/users/user/keeper-ns-c", error(404)).await;
    let err = grid.create_key("ns-c").await.unwrap_err();
    assert_eq!(err.code, "UserMissing", "{err:?}");
}

#[tokio::test]
async fn a_user_deleted_after_its_keys_were_listed_is_missing_and_read_again_next_time() {
    let (server, grid) = mock_grid().await;
    the_user_is(&server).await;
    on(&server, "POST", "org/users/u-1/s3-access-keys", error(404)).await;
    let err = grid.create_key("ns-b").await.unwrap_err();
    assert_eq!(err.code, "UserMissing", "{err:?}");
    assert_eq!(err.class, ErrorClass::Transient);
    let _ = grid.create_key("ns-b").await.unwrap_err();
    assert_eq!(
        user_reads(&calls(&server).await),
        2,
        "read again after the 404"
    );
}

#[tokio::test]
async fn a_deletion_deletes_the_group_its_ownership_check_found_ours() {
    let (server, grid) = mock_grid().await;
    the_bucket_exists(&server).await;
    once(
        &server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, group_json(UID)),
    )
    .await;
    on(
        &server,
        "DELETE",
        "org/containers/ns-b",
        ResponseTemplate::new(204),
    )
    .await;
    the_user_is(&server).await;
    user_keys(&server, json!([])).await;
    the_user_and_group_can_be_deleted(&server).await;
    // Made anew under the same name after the check (by another S3Bucket): not deleted.
    on(
        &server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, json!({"id": "g-2", "uniqueName": "group/keeper-ns-b"})),
    )
    .await;
    assert_eq!(grid.owner(&desired(true, false)).await.unwrap(), Owner::Us);
    assert_eq!(grid.delete("ns-b").await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(
        grid.delete_credentials(&desired(true, false), None)
            .await
            .unwrap(),
        None
    );
    let calls = calls(&server).await;
    assert_eq!(group_reads(&calls), 1, "{calls:?}");
    assert!(deletes(&calls).contains(&"org/groups/g-1"), "{calls:?}");
}

/// A bucket found missing at its deletion: its group was not read by the ownership check.
#[tokio::test]
async fn a_missing_bucket_leaves_the_group_and_user_another_s3bucket_made_since() {
    let (server, grid) = mock_grid().await;
    on(&server, "GET", "org/containers", ok(200, json!([]))).await;
    on(
        &server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, group_json("uid-other")),
    )
    .await;
    the_user_is(&server).await;
    user_keys(&server, json!([{"id": "k-1"}])).await;
    the_user_and_group_can_be_deleted(&server).await;
    let calls = deleting_a_missing_bucket_leaves_its_credentials(&server, &grid).await;
    assert_eq!(group_reads(&calls), 1, "{calls:?}");
}

/// The group was not there when the deletion looked, and a user in a group is: the group is read
/// again before the user goes, and found another S3Bucket's.
#[tokio::test]
async fn a_user_in_a_group_made_after_the_look_is_left_with_it() {
    let (server, grid) = mock_grid().await;
    a_group_appears_without_its_bucket(&server, "uid-other").await;
    on(
        &server,
        "GET",
        "org/users/user/keeper-ns-b",
        ok(
            200,
            json!({"id": "u-1", "uniqueName": "user/keeper-ns-b", "memberOf": ["g-1"]}),
        ),
    )
    .await;
    the_user_and_group_can_be_deleted(&server).await;
    let calls = deleting_a_missing_bucket_leaves_its_credentials(&server, &grid).await;
    assert_eq!(group_reads(&calls), 2, "{calls:?}");
}

/// Deletes bucket `ns-b`, found missing, and its credentials: they are another S3Bucket's
/// (`other/x`), and nothing is deleted. The calls made.
async fn deleting_a_missing_bucket_leaves_its_credentials(
    server: &MockServer,
    grid: &StorageGrid,
) -> Vec<(String, String, Value)> {
    assert_eq!(
        grid.owner(&desired(true, false)).await.unwrap(),
        Owner::Missing
    );
    let left = grid
        .delete_credentials(&desired(true, false), None)
        .await
        .unwrap();
    assert!(left.is_some_and(|why| why.contains("other/x")));
    let calls = calls(server).await;
    assert!(deletes(&calls).is_empty(), "{calls:?}");
    calls
}

/// A user of this bucket's whose group is gone (a cleanup cut short) still goes, with one read of
/// the group only when the user belongs to no group.
#[tokio::test]
async fn a_user_left_without_its_group_goes() {
    let (server, grid) = mock_grid().await;
    on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
    the_user_is(&server).await;
    user_keys(&server, json!([])).await;
    the_user_and_group_can_be_deleted(&server).await;
    let left = grid
        .delete_credentials(&desired(true, false), None)
        .await
        .unwrap();
    assert_eq!(left, None);
    let calls = calls(&server).await;
    assert_eq!(group_reads(&calls), 1, "{calls:?}");
    assert!(deletes(&calls).contains(&"org/users/u-1"), "{calls:?}");
}

#[tokio::test]
async fn bucket_credentials_go_with_the_bucket() {
    let (server, grid) = mock_grid().await;
    the_user_is(&server).await;
    user_keys(&server, json!([{"id": "k-1"}, {"id": "k-2"}])).await;
    key_delete(&server, "k-1", ResponseTemplate::new(204)).await;
    key_delete(&server, "k-2", error(404)).await;
    the_user_and_group_can_be_deleted(&server).await;
    on(
        &server,
        "GET",
        "org/groups/group/keeper-ns-b",
        ok(200, group_json(UID)),
    )
    .await;
    assert_eq!(
        grid.delete_credentials(&desired(true, false), None)
            .await
            .unwrap(),
        None
    );
    let calls = calls(&server).await;
    assert_eq!(
        deletes(&calls),
        [
            "org/users/u-1/s3-access-keys/k-1",
            "org/users/u-1/s3-access-keys/k-2",
            "org/users/u-1",
            "org/groups/g-1"
        ]
    );
    // Already gone: nothing to do, no error.
    let (server, grid) = mock_grid().await;
    on(&server, "GET", "org/users/user/keeper-ns-b", error(404)).await;
    on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
    assert_eq!(
        grid.delete_credentials(&desired(true, false), None)
            .await
            .unwrap(),
        None
    );
}

//! The grid API: accounts, their root password, listing by marker and usage.

use super::*;

#[tokio::test]
async fn creates_an_account_with_management_and_s3_and_the_root_password() {
    let server = server().await;
    grid_login(&server, "grid-token").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/grid/accounts"))
        .and(header("authorization", "Bearer grid-token"))
        .and(body_json(json!({
            "name": "team-a", "description": "keeper.dev/owner-uid=abc",
            "capabilities": ["management", "s3"],
            "policy": {"useAccountIdentitySource": false, "allowPlatformServices": false,
                       "quotaObjectBytes": 107374182400u64},
            "password": "root-password-0123456789abcdefghij"
        })))
        .respond_with(created(account_json(
            ACCOUNT_ID,
            "keeper.dev/owner-uid=abc",
        )))
        .expect(1)
        .mount(&server)
        .await;
    let (client, metrics) = client(&server);
    let account = client
        .create_account(&admin(), &spec(), "root-password-0123456789abcdefghij")
        .await
        .unwrap();
    assert_eq!(account.id, ACCOUNT_ID);
    assert_eq!(account.policy.quota_object_bytes, Some(107374182400));
    // Fields keeper does not manage are kept for the next PUT.
    assert_eq!(
        account.policy.other.get("allowSelectObjectContent"),
        Some(&json!(false))
    );
    assert!(metrics.encode().contains(
        r#"keeper_backend_requests_total{backend="storagegrid",operation="create_account",outcome="success"} 1"#
    ));
}

#[tokio::test]
async fn unlimited_quota_is_sent_as_null() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("PUT"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .and(body_partial_json(
            json!({"policy": {"quotaObjectBytes": null, "allowPlatformServices": true}}),
        ))
        .respond_with(ok(account_json(ACCOUNT_ID, "")))
        .expect(1)
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let mut spec = spec();
    spec.policy.quota_object_bytes = None;
    spec.policy.allow_platform_services = true;
    client
        .update_account(&admin(), ACCOUNT_ID, &spec)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_root_password_is_set_through_the_grid_api() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("POST"))
        .and(path(format!(
            "/api/v4/grid/accounts/{ACCOUNT_ID}/change-password"
        )))
        .and(body_json(json!({"password": "new-root-password"})))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    client
        .set_root_password(&admin(), ACCOUNT_ID, "new-root-password")
        .await
        .unwrap();
}

#[tokio::test]
async fn deleting_an_account_that_has_buckets_is_a_conflict() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("DELETE"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(error(409, "account has buckets"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .delete_account(&admin(), ACCOUNT_ID)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    client.delete_account(&admin(), ACCOUNT_ID).await.unwrap();
}

#[tokio::test]
async fn accounts_are_listed_page_by_page_and_found_by_marker_not_name() {
    let server = server().await;
    grid_login(&server, "t").await;
    let first: Vec<Value> = (0..ACCOUNT_PAGE)
        .map(|i| account_json(&format!("{:020}", i + 1), "managed elsewhere"))
        .collect();
    let last_id = format!("{:020}", ACCOUNT_PAGE);
    Mock::given(method("GET"))
        .and(path("/api/v4/grid/accounts"))
        .and(query_param("marker", last_id.as_str()))
        .respond_with(ok(json!([
            // Same name as ours, no marker: never ours.
            account_json("90000000000000000001", "team-a"),
            account_json("90000000000000000002", "x keeper.dev/owner-uid=abc y"),
            account_json("90000000000000000003", "keeper.dev/owner-uid=abcd"),
        ])))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/grid/accounts"))
        .and(query_param("limit", "100"))
        .respond_with(ok(Value::Array(first)))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let all = client.list_accounts(&admin()).await.unwrap();
    assert_eq!(all.len(), ACCOUNT_PAGE + 3);
    let found = client
        .find_accounts(&admin(), "keeper.dev/owner-uid=abc")
        .await
        .unwrap();
    assert_eq!(
        found.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        ["90000000000000000002"]
    );
    assert!(
        client
            .find_accounts(&admin(), "keeper.dev/owner-uid=zzz")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn every_account_with_our_marker_is_found() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path("/api/v4/grid/accounts"))
        .respond_with(ok(json!([
            account_json("90000000000000000001", "keeper.dev/owner-uid=abc"),
            account_json("90000000000000000002", "keeper.dev/owner-uid=abc"),
        ])))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let found = client
        .find_accounts(&admin(), "keeper.dev/owner-uid=abc")
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
}

#[test]
fn ids_and_integers_are_read_leniently() {
    let account: Account = serde_json::from_value(json!({
        "id": 12345, "name": "n", "policy": {"quotaObjectBytes": "500"}
    }))
    .unwrap();
    assert_eq!(account.id, "12345");
    assert_eq!(account.policy.quota_object_bytes, Some(500));
    let account: Account = serde_json::from_value(json!({
        "id": ACCOUNT_ID, "name": "n", "policy": {"quotaObjectBytes": null}
    }))
    .unwrap();
    assert_eq!(account.id, ACCOUNT_ID);
    assert_eq!(account.policy.quota_object_bytes, None);
    // A 20-digit id as a JSON number would lose digits: refuse it rather than misidentify.
    let lossy = serde_json::from_str::<Account>(r#"{"id": 40327589106748163542, "name": "n"}"#);
    assert!(lossy.is_err());
    let usage: Usage = serde_json::from_value(json!({
        "objectCount": "3", "dataBytes": 10,
        "buckets": [{"name": "b", "objectCount": "3", "dataBytes": "10"}]
    }))
    .unwrap();
    assert_eq!(usage.object_count, 3);
    assert_eq!(usage.buckets[0].data_bytes, 10);
    assert!(serde_json::from_value::<Usage>(json!({"objectCount": "many"})).is_err());
}

#[tokio::test]
async fn account_usage_lists_buckets() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}/usage")))
        .respond_with(ok(json!({
            "calculationTime": "2025-01-15T09:58:00.000Z", "objectCount": 1500, "dataBytes": 73000000,
            "buckets": [{"name": "team-a-logs", "objectCount": 1500, "dataBytes": 73000000},
                        {"name": "team-a-empty", "objectCount": 0, "dataBytes": 0}]
        })))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let usage = client.account_usage(&admin(), ACCOUNT_ID).await.unwrap();
    let names: Vec<&str> = usage.buckets.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["team-a-logs", "team-a-empty"]);
}

#[test]
fn markers_match_whole_words_only() {
    assert!(description_has_marker(
        Some("a keeper.dev/owner-uid=1 b"),
        "keeper.dev/owner-uid=1"
    ));
    assert!(!description_has_marker(
        Some("keeper.dev/owner-uid=12"),
        "keeper.dev/owner-uid=1"
    ));
    assert!(!description_has_marker(None, "keeper.dev/owner-uid=1"));
}

#[tokio::test]
async fn a_grid_that_ignores_the_paging_marker_is_an_error_not_an_endless_listing() {
    let server = server().await;
    grid_login(&server, "t").await;
    let page: Vec<Value> = (0..ACCOUNT_PAGE)
        .map(|i| account_json(&format!("{:020}", i + 1), "x"))
        .collect();
    Mock::given(method("GET"))
        .and(path("/api/v4/grid/accounts"))
        .respond_with(ok(Value::Array(page)))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.list_accounts(&admin()),
    )
    .await
    .expect("the listing ends")
    .unwrap_err();
    assert!(err.to_string().contains("paging marker"), "{err}");
    assert!(!err.is_not_found(), "never read as gone");
}

#[tokio::test]
async fn the_grid_id_is_the_top_node_of_the_topology() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path("/api/v4/grid/health/topology"))
        .and(query_param("depth", "grid"))
        .respond_with(ok(json!({"id": "a1b2", "type": "grid", "children": []})))
        .expect(1)
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    assert_eq!(client.grid_id(&admin()).await.unwrap(), "a1b2");
}

#[tokio::test]
async fn a_topology_without_a_grid_id_is_an_error() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path("/api/v4/grid/health/topology"))
        .respond_with(ok(json!({"id": "", "type": "grid"})))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    assert!(client.grid_id(&admin()).await.is_err());
}

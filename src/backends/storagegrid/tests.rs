//! The client against a local HTTP mock (wiremock on 127.0.0.1), one test per method group and
//! per error class.

use std::sync::Arc;

use serde_json::{Value, json};
use wiremock::matchers::{body_json, body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use super::*;
use crate::config::TlsConfig;

const ACCOUNT_ID: &str = "40327589106748163542";

fn ok(data: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "responseTime": "2025-01-15T10:00:00.000Z", "status": "success", "apiVersion": "4.0", "data": data
    }))
}

fn created(data: Value) -> ResponseTemplate {
    ResponseTemplate::new(201).set_body_json(json!({
        "responseTime": "2025-01-15T10:00:00.000Z", "status": "success", "apiVersion": "4.0", "data": data
    }))
}

fn error(code: u16, text: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "responseTime": "2025-01-15T10:00:01.000Z", "status": "error", "apiVersion": "4.0", "code": code,
        "message": {"text": text, "key": "some.key"}
    }))
}

async fn server() -> MockServer {
    MockServer::builder()
        .listener(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .start()
        .await
}

fn client(server: &MockServer) -> (Client, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let url = Url::parse(&server.uri()).unwrap();
    let client = Client::new(&url, &TlsConfig::default(), metrics.clone()).unwrap();
    (client, metrics)
}

fn admin() -> Login {
    Login::grid("root", "admin-pass")
}

fn tenant() -> Login {
    Login::tenant_root(ACCOUNT_ID, "tenant-root-pass")
}

/// Grid login answering with `token` (valid 16 h, as on a real grid).
async fn grid_login(server: &MockServer, token: &str) {
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .and(body_json(json!({
            "username": "root", "password": "admin-pass", "cookie": false, "csrfToken": false
        })))
        .respond_with(
            ok(json!(token)).insert_header("Cache-Control", "private, no-cache, max-age=57599"),
        )
        .mount(server)
        .await;
}

async fn tenant_login(server: &MockServer, token: &str) {
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .and(body_partial_json(
            json!({"accountId": ACCOUNT_ID, "username": "root"}),
        ))
        .respond_with(ok(json!(token)).insert_header("Cache-Control", "max-age=57599"))
        .mount(server)
        .await;
}

fn account_json(id: &str, description: &str) -> Value {
    json!({
        "id": id, "name": "team-a", "description": description, "capabilities": ["management", "s3"],
        "policy": {"useAccountIdentitySource": false, "allowPlatformServices": false,
                   "allowSelectObjectContent": false, "quotaObjectBytes": 107374182400u64}
    })
}

fn spec() -> AccountSpec {
    AccountSpec {
        name: "team-a".into(),
        description: "keeper.dev/owner-uid=abc".into(),
        capabilities: AccountSpec::standard_capabilities(),
        policy: AccountPolicy {
            quota_object_bytes: Some(107374182400),
            ..AccountPolicy::default()
        },
    }
}

fn authorize_calls(requests: &[Request]) -> usize {
    requests
        .iter()
        .filter(|r| r.url.path() == "/api/v4/authorize")
        .count()
}

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
async fn the_token_is_reused_until_it_expires() {
    let server = server().await;
    grid_login(&server, "grid-token").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .and(header("authorization", "Bearer grid-token"))
        .respond_with(ok(account_json(ACCOUNT_ID, "")))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    for _ in 0..3 {
        client.get_account(&admin(), ACCOUNT_ID).await.unwrap();
    }
    let requests = server.received_requests().await.unwrap();
    assert_eq!(authorize_calls(&requests), 1);
}

#[tokio::test]
async fn an_expired_token_signs_in_again() {
    let server = server().await;
    // Expires already passed: the token must not be reused.
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .respond_with(
            ok(json!("short-lived")).insert_header("Expires", "Thu, 16 Jan 2020 02:00:00 GMT"),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(ok(account_json(ACCOUNT_ID, "")))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    client.get_account(&admin(), ACCOUNT_ID).await.unwrap();
    client.get_account(&admin(), ACCOUNT_ID).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(authorize_calls(&requests), 2);
}

#[test]
fn token_lifetime_comes_from_expires_then_max_age() {
    let mut headers = HeaderMap::new();
    let in_an_hour =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(1);
    let formatted = k8s_openapi::jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&in_an_hour)
        .unwrap();
    headers.insert(EXPIRES, formatted.parse().unwrap());
    let lifetime = token_lifetime(&headers);
    assert!(
        lifetime > Duration::from_secs(3500) && lifetime <= Duration::from_secs(3600),
        "{lifetime:?}"
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        CACHE_CONTROL,
        "private, no-cache, max-age=57599".parse().unwrap(),
    );
    assert_eq!(token_lifetime(&headers), Duration::from_secs(57599));
    assert_eq!(token_lifetime(&HeaderMap::new()), FALLBACK_TOKEN_LIFETIME);
}

#[tokio::test]
async fn a_revoked_token_signs_in_again_once_and_retries() {
    let server = server().await;
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .respond_with(ok(json!("first")).insert_header("Cache-Control", "max-age=57599"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .respond_with(ok(json!("second")).insert_header("Cache-Control", "max-age=57599"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .and(header("authorization", "Bearer second"))
        .respond_with(ok(account_json(ACCOUNT_ID, "")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .and(header("authorization", "Bearer first"))
        .respond_with(error(401, "token expired"))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    // A first call caches token "first"; the grid then revokes it.
    Mock::given(method("GET"))
        .and(path("/api/v4/grid/accounts"))
        .and(header("authorization", "Bearer first"))
        .respond_with(ok(json!([])))
        .mount(&server)
        .await;
    assert!(client.list_accounts(&admin()).await.unwrap().is_empty());
    let account = client.get_account(&admin(), ACCOUNT_ID).await.unwrap();
    assert_eq!(account.id, ACCOUNT_ID);
    let requests = server.received_requests().await.unwrap();
    assert_eq!(authorize_calls(&requests), 2);
}

#[tokio::test]
async fn a_401_after_signing_in_again_is_transient_not_gone() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(error(401, "nope"))
        .mount(&server)
        .await;
    let (client, metrics) = client(&server);
    let err = client.get_account(&admin(), ACCOUNT_ID).await.unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");
    assert!(!err.is_not_found());
    assert!(!err.is_permanent());
    assert!(metrics.encode().contains(
        r#"keeper_backend_requests_total{backend="storagegrid",operation="get_account",outcome="transient"} 1"#
    ));
}

#[tokio::test]
async fn refused_credentials_are_permanent() {
    let server = server().await;
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .respond_with(error(401, "invalid credentials"))
        .mount(&server)
        .await;
    let (client, metrics) = client(&server);
    let err = client.get_account(&admin(), ACCOUNT_ID).await.unwrap_err();
    assert!(matches!(err, Error::BadCredentials { .. }), "{err:?}");
    assert!(err.is_permanent());
    assert!(err.to_string().contains("invalid credentials"));
    assert!(!err.to_string().contains("admin-pass"));
    assert!(metrics.encode().contains(
        r#"keeper_backend_requests_total{backend="storagegrid",operation="get_account",outcome="permanent"} 1"#
    ));
}

#[tokio::test]
async fn a_404_on_lookup_is_not_found() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(error(404, "no such account"))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client.get_account(&admin(), ACCOUNT_ID).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.to_string().contains("no such account"));
}

#[tokio::test]
async fn a_500_on_lookup_is_not_gone() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(error(500, "database unavailable"))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client.get_account(&admin(), ACCOUNT_ID).await.unwrap_err();
    assert!(matches!(err, Error::Server { status: 500, .. }), "{err:?}");
    assert!(!err.is_not_found());
    assert!(!err.is_permanent());
}

#[tokio::test]
async fn an_unparsable_body_is_transient_not_gone() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>proxy login</html>"))
        .mount(&server)
        .await;
    let (client, metrics) = client(&server);
    let err = client.get_account(&admin(), ACCOUNT_ID).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResponse { .. }), "{err:?}");
    assert!(!err.is_not_found() && !err.is_permanent());
    assert!(metrics.encode().contains(r#"outcome="transient""#));
}

#[tokio::test]
async fn a_timeout_is_transient() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(ok(account_json(ACCOUNT_ID, "")).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let metrics = Arc::new(Metrics::new());
    let mut client = Client::new(
        &Url::parse(&server.uri()).unwrap(),
        &TlsConfig::default(),
        metrics,
    )
    .unwrap();
    client.http = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = client.get_account(&admin(), ACCOUNT_ID).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    assert!(!err.is_not_found() && !err.is_permanent());
}

#[tokio::test]
async fn a_closed_port_is_transient() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let client = Client::new(&url, &TlsConfig::default(), Arc::new(Metrics::new())).unwrap();
    let err = client.get_account(&admin(), ACCOUNT_ID).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
}

#[tokio::test]
async fn validation_errors_are_permanent_with_the_field_messages() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/grid/accounts"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({
            "status": "error", "code": 422, "apiVersion": "4.0", "responseTime": "x",
            "message": {"text": "Validation failed"},
            "errors": [{"text": "quotaObjectBytes must be at least 1"}]
        })))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .create_account(&admin(), &spec(), "p")
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Rejected { status: 422, .. }),
        "{err:?}"
    );
    assert!(err.is_permanent());
    assert!(
        err.to_string()
            .contains("Validation failed; quotaObjectBytes must be at least 1"),
        "{err}"
    );
}

#[tokio::test]
async fn throttling_is_transient() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}/usage")))
        .respond_with(error(429, "slow down"))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .account_usage(&admin(), ACCOUNT_ID)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Server { status: 429, .. }), "{err:?}");
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
        .find_account(&admin(), "keeper.dev/owner-uid=abc")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, "90000000000000000002");
    assert!(
        client
            .find_account(&admin(), "keeper.dev/owner-uid=zzz")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn two_accounts_with_our_marker_are_a_conflict_not_a_guess() {
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
    let err = client
        .find_account(&admin(), "keeper.dev/owner-uid=abc")
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
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

#[tokio::test]
async fn tenant_and_grid_logins_keep_separate_tokens() {
    let server = server().await;
    grid_login(&server, "grid-token").await;
    tenant_login(&server, "tenant-token").await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/usage"))
        .and(header("authorization", "Bearer tenant-token"))
        .respond_with(ok(json!({"objectCount": 0, "dataBytes": 0, "buckets": []})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .and(header("authorization", "Bearer grid-token"))
        .respond_with(ok(account_json(ACCOUNT_ID, "")))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    client.tenant_usage(&tenant()).await.unwrap();
    client.get_account(&admin(), ACCOUNT_ID).await.unwrap();
    client.tenant_usage(&tenant()).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(authorize_calls(&requests), 2);
}

#[tokio::test]
async fn a_changed_password_signs_in_again() {
    let server = server().await;
    Mock::given(method("POST"))
        .and(path("/api/v4/authorize"))
        .respond_with(ok(json!("t")).insert_header("Cache-Control", "max-age=57599"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/api/v4/grid/accounts/{ACCOUNT_ID}")))
        .respond_with(ok(account_json(ACCOUNT_ID, "")))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    client.get_account(&admin(), ACCOUNT_ID).await.unwrap();
    client
        .get_account(&Login::grid("root", "rotated"), ACCOUNT_ID)
        .await
        .unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(authorize_calls(&requests), 2);
}

#[tokio::test]
async fn access_keys_for_the_root_user_are_created_listed_and_deleted() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/users/current-user/s3-access-keys"))
        .and(body_json(json!({"expires": null})))
        .respond_with(created(json!({
            "id": "BxH2c1_q-0123456789abcDEF==", "accountId": ACCOUNT_ID, "displayName": "****XY7Z",
            "userURN": "urn:sgws:identity::40327589106748163542:root", "expires": null,
            "accessKey": "SGKEXAMPLE7XY7Z", "secretAccessKey": "aB3dEf+ExampleSecret"
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/users/current-user/s3-access-keys"))
        .respond_with(ok(
            json!([{"id": "BxH2c1_q-0123456789abcDEF==", "accountId": ACCOUNT_ID,
                                  "displayName": "****XY7Z", "expires": null}]),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(
            "/api/v4/org/users/current-user/s3-access-keys/SGKEXAMPLE7XY7Z",
        ))
        .respond_with(ok(
            json!({"id": "BxH2c1_q-0123456789abcDEF==", "displayName": "****XY7Z"}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(
            "/api/v4/org/users/current-user/s3-access-keys/BxH2c1_q-0123456789abcDEF%3D%3D",
        ))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let key = client
        .create_access_key(&tenant(), KeyOwner::CurrentUser)
        .await
        .unwrap();
    assert_eq!(key.access_key.as_deref(), Some("SGKEXAMPLE7XY7Z"));
    assert_eq!(
        key.secret_access_key.as_ref().unwrap().0,
        "aB3dEf+ExampleSecret"
    );
    assert!(!format!("{key:?}").contains("ExampleSecret"));
    let found = client
        .get_access_key(&tenant(), KeyOwner::CurrentUser, "SGKEXAMPLE7XY7Z")
        .await
        .unwrap();
    assert_eq!(found.id, "BxH2c1_q-0123456789abcDEF==");
    let keys = client
        .list_access_keys(&tenant(), KeyOwner::CurrentUser)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1);
    assert!(keys[0].secret_access_key.is_none());
    client
        .delete_access_key(&tenant(), KeyOwner::CurrentUser, &keys[0].id)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_created_key_without_its_secret_is_an_invalid_response() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/users/user-1/s3-access-keys"))
        .respond_with(created(json!({"id": "k1"})))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .create_access_key(&tenant(), KeyOwner::User("user-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidResponse { .. }), "{err:?}");
}

#[tokio::test]
async fn containers_are_created_with_object_lock_and_versioning_listed_and_deleted() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers"))
        .and(body_json(json!({"name": "team-a-logs", "region": "us-east-1", "s3ObjectLock": {"enabled": true}})))
        .respond_with(created(json!({"name": "team-a-logs", "region": "us-east-1", "s3ObjectLock": {"enabled": true}})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v4/org/containers/team-a-logs/versioning"))
        .and(body_json(
            json!({"versioningEnabled": true, "versioningSuspended": false}),
        ))
        .respond_with(ok(
            json!({"versioningEnabled": true, "versioningSuspended": false}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/containers"))
        .and(query_param("include", "region,s3ObjectLock,deleteObjects"))
        .respond_with(ok(json!([{
            "name": "team-a-logs", "creationTime": "2025-01-10T08:00:00.000Z", "region": "us-east-1",
            "s3ObjectLock": {"enabled": true},
            "deleteObjectStatus": {"isDeletingObjects": true, "initialObjectCount": "1500", "initialObjectBytes": "73000000"}
        }])))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v4/org/containers/team-a-logs"))
        .respond_with(error(409, "The bucket is not empty."))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    client
        .create_container(
            &tenant(),
            &NewContainer {
                name: "team-a-logs".into(),
                region: Some("us-east-1".into()),
                versioning: true,
                object_lock: true,
            },
        )
        .await
        .unwrap();
    let containers = client.list_containers(&tenant()).await.unwrap();
    let drain = containers[0].delete_object_status.as_ref().unwrap();
    assert!(drain.is_deleting_objects);
    assert_eq!(drain.initial_object_count, Some(1500));
    assert_eq!(drain.initial_object_bytes, Some(73000000));
    let err = client
        .delete_container(&tenant(), "team-a-logs")
        .await
        .unwrap_err();
    assert!(err.is_conflict());
}

#[tokio::test]
async fn an_existing_bucket_name_is_a_conflict() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers"))
        .respond_with(error(409, "name taken"))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .create_container(
            &tenant(),
            &NewContainer {
                name: "taken".into(),
                region: None,
                versioning: true,
                object_lock: false,
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict());
    // Versioning is not touched on a bucket that is not ours.
    let requests = server.received_requests().await.unwrap();
    assert!(
        !requests
            .iter()
            .any(|r| r.url.path().ends_with("/versioning"))
    );
}

#[tokio::test]
async fn drains_start_stop_and_report_their_state() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers/b1/delete-objects"))
        .and(body_json(json!({"deleteObjects": true})))
        .respond_with(ok(
            json!({"isDeletingObjects": true, "initialObjectCount": 7, "initialObjectBytes": "70"}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers/b1/delete-objects"))
        .and(body_json(json!({"deleteObjects": false})))
        .respond_with(ok(json!({"isDeletingObjects": false})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/usage"))
        .respond_with(ok(json!({"objectCount": "4", "dataBytes": "40",
                                "buckets": [{"name": "b1", "objectCount": 4, "dataBytes": 40}]})))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let state = client.set_drain(&tenant(), "b1", true).await.unwrap();
    assert!(state.is_deleting_objects);
    assert_eq!(state.initial_object_count, Some(7));
    assert_eq!(state.initial_object_bytes, Some(70));
    let usage = client.tenant_usage(&tenant()).await.unwrap();
    assert_eq!(usage.buckets[0].object_count, 4);
    assert!(
        !client
            .set_drain(&tenant(), "b1", false)
            .await
            .unwrap()
            .is_deleting_objects
    );
}

#[tokio::test]
async fn users_and_groups_with_an_s3_policy() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    let policy = json!({"Statement": [{"Effect": "Allow", "Action": ["s3:*"],
        "Resource": ["arn:aws:s3:::team-a-logs", "arn:aws:s3:::team-a-logs/*"]}]});
    let group_json = json!({"id": "g-1", "uniqueName": "group/bucket-team-a-logs", "displayName": "bucket-team-a-logs",
        "policies": {"management": {"manageAllContainers": false}, "s3": policy.clone()}});
    Mock::given(method("POST"))
        .and(path("/api/v4/org/groups"))
        .and(body_partial_json(
            json!({"uniqueName": "group/bucket-team-a-logs", "policies": {"s3": policy.clone()}}),
        ))
        .respond_with(created(group_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/groups/group/bucket-team-a-logs"))
        .respond_with(ok(group_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v4/org/groups/g-1"))
        .respond_with(ok(group_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v4/org/groups/g-1"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    let user_json = json!({"id": "u-1", "accountId": ACCOUNT_ID, "uniqueName": "user/app-a", "fullName": "App A",
        "memberOf": ["g-1"], "disable": false, "federated": false,
        "userURN": "urn:sgws:identity::40327589106748163542:user/app-a"});
    Mock::given(method("POST"))
        .and(path("/api/v4/org/users"))
        .and(body_json(json!({"uniqueName": "user/app-a", "fullName": "App A", "memberOf": ["g-1"], "disable": false})))
        .respond_with(created(user_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/users/user/missing"))
        .respond_with(error(404, "no such user"))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v4/org/users/u-1"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let new_group = NewGroup {
        unique_name: "group/bucket-team-a-logs".into(),
        display_name: "bucket-team-a-logs".into(),
        management_read_only: false,
        policies: GroupPolicies {
            management: ManagementPolicy::default(),
            s3: Some(policy.clone()),
        },
    };
    let group = client.create_group(&tenant(), &new_group).await.unwrap();
    assert_eq!(group.policies.unwrap().s3, Some(policy));
    let found = client
        .get_group_by_name(&tenant(), "bucket-team-a-logs")
        .await
        .unwrap();
    client
        .update_group(&tenant(), &found.id, &new_group)
        .await
        .unwrap();
    let user = client
        .create_user(
            &tenant(),
            &NewUser {
                unique_name: "user/app-a".into(),
                full_name: "App A".into(),
                member_of: vec!["g-1".into()],
                disable: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        user.user_urn.as_deref(),
        Some("urn:sgws:identity::40327589106748163542:user/app-a")
    );
    assert!(
        client
            .get_user_by_name(&tenant(), "missing")
            .await
            .unwrap_err()
            .is_not_found()
    );
    client.delete_user(&tenant(), &user.id).await.unwrap();
    client.delete_group(&tenant(), &group.id).await.unwrap();
}

#[test]
fn a_missing_ca_bundle_is_a_clear_error() {
    let tls = TlsConfig {
        ca_bundle_file: Some("/nonexistent/ca.pem".into()),
        insecure_skip_verify: false,
    };
    let err = Client::new(
        &Url::parse("https://grid.example.com").unwrap(),
        &tls,
        Arc::new(Metrics::new()),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
}

#[test]
fn the_base_url_keeps_a_path_prefix() {
    let metrics = Arc::new(Metrics::new());
    let client = Client::new(
        &Url::parse("https://grid.example.com/sg").unwrap(),
        &TlsConfig::default(),
        metrics,
    )
    .unwrap();
    assert_eq!(client.base.as_str(), "https://grid.example.com/sg/api/v4/");
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

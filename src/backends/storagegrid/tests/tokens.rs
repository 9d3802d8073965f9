//! Signing in: token reuse, expiry, renewal after a 401, and one token per login.

use super::*;

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

//! How failed calls are classified: permanent, transient, not found.

use super::*;

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
    let (client, metrics) = client(&server);
    let err = client
        .account_usage(&admin(), ACCOUNT_ID)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Server { status: 429, .. }), "{err:?}");
    // Sent three times in all, counted as one call.
    let sent = server.received_requests().await.unwrap();
    assert_eq!(
        sent.iter()
            .filter(|r| r.url.path().ends_with("/usage"))
            .count(),
        3
    );
    assert!(metrics.encode().contains(
        r#"keeper_backend_requests_total{backend="storagegrid",operation="account_usage",outcome="transient"} 1"#
    ));
}

fn team_a() -> AccountSpec {
    AccountSpec {
        name: "team-a".into(),
        description: "keeper.dev/owner-uid=u".into(),
        capabilities: AccountSpec::standard_capabilities(),
        policy: AccountPolicy::default(),
    }
}

#[tokio::test]
async fn a_request_the_grid_did_not_act_on_is_sent_again_even_a_create() {
    let server = server().await;
    grid_login(&server, "t").await;
    for status in [503, 429] {
        Mock::given(method("POST"))
            .and(path("/api/v4/grid/accounts"))
            .respond_with(error(status, "busy"))
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .and(path("/api/v4/grid/accounts"))
        .respond_with(created(json!({"id": ACCOUNT_ID, "name": "team-a"})))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let account = client
        .create_account(&admin(), &team_a(), "root-pass")
        .await
        .unwrap();
    assert_eq!(account.id, ACCOUNT_ID);
}

#[tokio::test]
async fn a_500_is_not_sent_again_the_grid_may_have_acted() {
    let server = server().await;
    grid_login(&server, "t").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/grid/accounts"))
        .respond_with(error(500, "oops"))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .create_account(&admin(), &team_a(), "root-pass")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Server { status: 500, .. }), "{err:?}");
    let sent = server.received_requests().await.unwrap();
    assert_eq!(
        sent.iter()
            .filter(|r| r.method.as_str() == "POST" && r.url.path().ends_with("/grid/accounts"))
            .count(),
        1
    );
}

#[test]
fn grid_errors_map_by_meaning() {
    use crate::error::{BackendError, ErrorClass};
    let e: BackendError = Error::Conflict {
        operation: "delete_container",
        message: "not empty".into(),
    }
    .into();
    assert_eq!(
        (e.class, e.operation),
        (ErrorClass::Conflict, "delete_container")
    );
    let e: BackendError = Error::Rejected {
        operation: "create_account",
        status: 400,
        message: "bad".into(),
    }
    .into();
    assert_eq!(e.class, ErrorClass::Permanent);
    let e: BackendError = Error::Server {
        operation: "get_account",
        status: 503,
        message: "busy".into(),
    }
    .into();
    assert_eq!(e.class, ErrorClass::Transient);
}

//! The client against a local HTTP mock (wiremock on 127.0.0.1), one test per method group and
//! per error class.
//!
//! Shared helpers live here with the tests of client construction; the tests are grouped in
//! `tokens` (sign-in and token reuse), `errors` (error classification), `accounts` (grid API)
//! and `tenant` (tenant API).

mod accounts;
mod errors;
mod tenant;
mod tokens;

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
    crate::test_support::mock_server().await
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

#[test]
fn a_missing_ca_bundle_is_a_clear_error() {
    let tls = TlsConfig {
        ca_bundle_file: Some("/nonexistent/ca.pem".into()),
        ..TlsConfig::default()
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

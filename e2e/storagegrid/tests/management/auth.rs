//! API versions, grid and tenant logins, token expiry and scope.

use super::*;

#[tokio::test]
async fn versions_and_version_selection() {
    let s = Stack::start().await;
    let base = s.emu.management_url().to_owned();
    let r = s
        .raw(Method::GET, &format!("{base}/api/versions"), None, None)
        .await
        .assert_ok(200);
    assert_eq!(r.data(), &json!([2, 3, 4]));

    let grid = s.grid_token().await;
    // Path version 3: deprecated in body and header.
    let r = s
        .raw(
            Method::GET,
            &format!("{base}/api/v3/grid/accounts"),
            Some(&grid),
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["apiVersion"], "3.0");
    assert_eq!(r.body["deprecated"], true);
    assert_eq!(r.headers["deprecated"], "true");

    // `/api/...` + Api-Version header; the header wins over the path.
    let r = s
        .http
        .get(format!("{base}/api/grid/accounts"))
        .bearer_auth(&grid)
        .header("Api-Version", "4")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["apiVersion"], "4.0");
    assert!(v.get("deprecated").is_none());
    let r = s
        .http
        .get(format!("{base}/api/v4/grid/accounts"))
        .bearer_auth(&grid)
        .header("Api-Version", "3")
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["apiVersion"], "3.0");

    s.raw(
        Method::GET,
        &format!("{base}/api/v9/grid/accounts"),
        Some(&grid),
        None,
    )
    .await
    .assert_error(404);
    s.get("/grid/no-such-thing", &grid).await.assert_error(404);
}

#[tokio::test]
async fn grid_authorize_logout_and_missing_tokens() {
    let s = Stack::start().await;
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(json!({"username":"root","password":"wrong"})),
    )
    .await
    .assert_error(401);
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(json!({"username":"admin","password":common::ADMIN_PASSWORD})),
    )
    .await
    .assert_error(401);
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(json!({"password":"x"})),
    )
    .await
    .assert_error(422);

    let r = s
        .call(
            Method::POST,
            "/authorize",
            None,
            Some(json!({"username":"root","password":common::ADMIN_PASSWORD})),
        )
        .await
        .assert_ok(200);
    let token = r.data().as_str().unwrap().to_owned();
    assert_eq!(token.len(), 36, "token is a UUID: {token}");
    let expires = r.headers["expires"].to_str().unwrap();
    assert!(expires.ends_with("GMT"), "{expires}");
    let cc = r.headers["cache-control"].to_str().unwrap();
    assert!(cc.contains("max-age=575"), "16 h default ttl: {cc}");

    s.get("/grid/accounts", &token).await.assert_ok(200);
    s.call(Method::GET, "/grid/accounts", None, None)
        .await
        .assert_error(401);
    s.get("/grid/accounts", "not-a-token")
        .await
        .assert_error(401);

    s.call(Method::DELETE, "/authorize", Some(&token), None)
        .await
        .assert_ok(204);
    s.get("/grid/accounts", &token).await.assert_error(401);
}

#[tokio::test]
async fn tokens_expire_after_ttl() {
    let s = Stack::start_with(|c| c.token_ttl = Duration::from_secs(1)).await;
    let grid = s.grid_token().await;
    let (_, tenant) = s.tenant(&grid, "t").await;
    s.get("/grid/accounts", &grid).await.assert_ok(200);
    s.get("/org/containers", &tenant).await.assert_ok(200);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    s.get("/grid/accounts", &grid).await.assert_error(401);
    s.get("/org/containers", &tenant).await.assert_error(401);
}

#[tokio::test]
async fn tokens_are_scoped_to_their_api() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (id, tenant) = s.tenant(&grid, "t").await;
    s.get("/org/containers", &grid).await.assert_error(403);
    s.get("/grid/accounts", &tenant).await.assert_error(403);
    s.get(&format!("/grid/accounts/{id}"), &tenant)
        .await
        .assert_error(403);
}

#[tokio::test]
async fn tenant_authorize_rules() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (id, root) = s.tenant(&grid, "t").await;
    let auth = |user: &str, pass: &str, acct: &str| json!({"username": user, "password": pass, "accountId": acct});
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(auth("root", "wrong-password", &id)),
    )
    .await
    .assert_error(401);
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(auth("root", TENANT_PASSWORD, "12345678901234567890")),
    )
    .await
    .assert_error(401);

    // A local user can sign in once it has a password; not while disabled.
    let u = s
        .post(
            "/org/users",
            &root,
            json!({"uniqueName":"user/app","fullName":"App","memberOf":[],"disable":false}),
        )
        .await
        .assert_ok(201);
    let uid = u.data()["id"].as_str().unwrap().to_owned();
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(auth("app", "app-password-1", &id)),
    )
    .await
    .assert_error(401);
    s.post(
        &format!("/org/users/{uid}/change-password"),
        &root,
        json!({"password":"short"}),
    )
    .await
    .assert_error(422);
    s.post(
        &format!("/org/users/{uid}/change-password"),
        &root,
        json!({"password":"app-password-1"}),
    )
    .await
    .assert_ok(204);
    let app = s.tenant_token(&id, "app", "app-password-1").await;
    let me = s.get("/org/users/current-user", &app).await.assert_ok(200);
    assert_eq!(me.data()["uniqueName"], "user/app");
    // No group: no management permissions.
    s.get("/org/containers", &app).await.assert_error(403);
    s.get("/org/users", &app).await.assert_error(403);
    s.put(
        &format!("/org/users/{uid}"),
        &root,
        json!({"fullName":"App","memberOf":[],"disable":true}),
    )
    .await
    .assert_ok(200);
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(auth("app", "app-password-1", &id)),
    )
    .await
    .assert_error(401);

    // An account without the management capability cannot sign in.
    let r = s
        .post(
            "/grid/accounts",
            &grid,
            json!({"name":"s3-only","capabilities":["s3"],"policy":{},"password":"password-1"}),
        )
        .await
        .assert_ok(201);
    let s3only = r.data()["id"].as_str().unwrap().to_owned();
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(auth("root", "password-1", &s3only)),
    )
    .await
    .assert_error(403);

    // Grid change-password changes the tenant root password.
    s.post(
        &format!("/grid/accounts/{id}/change-password"),
        &grid,
        json!({"password":"new-root-pass"}),
    )
    .await
    .assert_ok(204);
    s.call(
        Method::POST,
        "/authorize",
        None,
        Some(auth("root", TENANT_PASSWORD, &id)),
    )
    .await
    .assert_error(401);
    s.tenant_token(&id, "root", "new-root-pass").await;
}

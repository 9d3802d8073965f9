//! Management API (grid + tenant) against a real moto server.

mod common;

use std::time::{Duration, Instant};

use common::{Stack, TENANT_PASSWORD, eventually};
use reqwest::Method;
use serde_json::json;

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

#[tokio::test]
async fn account_crud_and_validation() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let body = json!({"name":"team-a","description":"managed_by:keeper","capabilities":["management","s3"],
        "policy":{"useAccountIdentitySource":false,"allowPlatformServices":false,"quotaObjectBytes":107374182400u64},
        "password":"Root-Pass-123"});
    let a = s
        .post("/grid/accounts", &grid, body.clone())
        .await
        .assert_ok(201);
    let id = a.data()["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 20);
    assert!(id.bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(a.data()["name"], "team-a");
    assert_eq!(a.data()["description"], "managed_by:keeper");
    assert_eq!(
        a.data()["policy"]["quotaObjectBytes"],
        json!(107374182400u64)
    );
    assert!(a.data().get("password").is_none(), "password is write-only");

    // Names are not unique: a second POST makes a second account.
    let b = s.post("/grid/accounts", &grid, body).await.assert_ok(201);
    let id2 = b.data()["id"].as_str().unwrap().to_owned();
    assert_ne!(id, id2);

    let g = s
        .get(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(200);
    assert_eq!(g.data()["id"], id.as_str());
    s.get("/grid/accounts/99999999999999999999", &grid)
        .await
        .assert_error(404);

    // List + marker paging.
    let all = s.get("/grid/accounts", &grid).await.assert_ok(200);
    let ids: Vec<String> = all
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2);
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    let p1 = s.get("/grid/accounts?limit=1", &grid).await.assert_ok(200);
    assert_eq!(p1.data().as_array().unwrap().len(), 1);
    assert_eq!(p1.data()[0]["id"], ids[0].as_str());
    let p2 = s
        .get(&format!("/grid/accounts?limit=1&marker={}", ids[0]), &grid)
        .await
        .assert_ok(200);
    assert_eq!(p2.data()[0]["id"], ids[1].as_str());
    let p3 = s
        .get(&format!("/grid/accounts?limit=1&marker={}", ids[1]), &grid)
        .await
        .assert_ok(200);
    assert_eq!(p3.data(), &json!([]));
    let inc = s
        .get(
            &format!(
                "/grid/accounts?limit=5&marker={}&includeMarker=true",
                ids[1]
            ),
            &grid,
        )
        .await
        .assert_ok(200);
    assert_eq!(inc.data().as_array().unwrap().len(), 1);
    let desc = s
        .get(
            &format!("/grid/accounts?order=desc&marker={}", ids[1]),
            &grid,
        )
        .await
        .assert_ok(200);
    assert_eq!(desc.data()[0]["id"], ids[0].as_str());
    s.get("/grid/accounts?limit=0", &grid)
        .await
        .assert_error(422);

    // PUT replaces name/policy.
    let u = s
        .put(
            &format!("/grid/accounts/{id}"),
            &grid,
            json!({"name":"team-a2","capabilities":["management","s3"],
                   "policy":{"useAccountIdentitySource":false,"allowPlatformServices":true,"quotaObjectBytes":null}}),
        )
        .await
        .assert_ok(200);
    assert_eq!(u.data()["name"], "team-a2");
    assert_eq!(u.data()["policy"]["quotaObjectBytes"], json!(null));
    assert_eq!(u.data()["policy"]["allowPlatformServices"], true);
    let g = s
        .get(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(200);
    assert_eq!(g.data()["name"], "team-a2");
    s.put(
        "/grid/accounts/99999999999999999999",
        &grid,
        json!({"name":"x","capabilities":["s3"]}),
    )
    .await
    .assert_error(404);

    // Validation.
    for bad in [
        json!({"name":"q","capabilities":["s3"],"policy":{"quotaObjectBytes":0},"password":"password-1"}),
        json!({"name":"q","capabilities":["s3"],"policy":{}}),
        json!({"name":"q","capabilities":["ftp"],"policy":{},"password":"password-1"}),
        json!({"capabilities":["s3"],"policy":{},"password":"password-1"}),
        json!({"name":"q","capabilities":["s3"],"policy":{},"password":"short"}),
    ] {
        s.post("/grid/accounts", &grid, bad).await.assert_error(422);
    }

    s.delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(204);
    s.get(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_error(404);
    s.delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_error(404);
}

#[tokio::test]
async fn account_delete_refused_while_it_has_buckets() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (id, tenant) = s.tenant(&grid, "t").await;
    s.create_bucket(&tenant, "t-bucket").await;
    let r = s
        .delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_error(409);
    assert!(r.body["message"]["key"].is_string());
    s.get(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(200);
    s.delete("/org/containers/t-bucket", &tenant)
        .await
        .assert_ok(204);
    s.delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(204);
    // The tenant's tokens die with it.
    s.get("/org/containers", &tenant).await.assert_error(401);
}

#[tokio::test]
async fn containers_create_list_delete() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, a) = s.tenant(&grid, "a").await;
    let (_, b) = s.tenant(&grid, "b").await;

    let r = s
        .post(
            "/org/containers",
            &a,
            json!({"name":"team-a-logs","region":"us-east-1","s3ObjectLock":{"enabled":false}}),
        )
        .await
        .assert_ok(201);
    assert_eq!(
        r.data(),
        &json!({"name":"team-a-logs","region":"us-east-1","s3ObjectLock":{"enabled":false}})
    );

    // Names are global: 409 for another tenant and for the same tenant.
    s.post("/org/containers", &b, json!({"name":"team-a-logs"}))
        .await
        .assert_error(409);
    s.post("/org/containers", &a, json!({"name":"team-a-logs"}))
        .await
        .assert_error(409);
    // Validation.
    s.post("/org/containers", &a, json!({"name":"Bad_Name"}))
        .await
        .assert_error(422);
    s.post(
        "/org/containers",
        &a,
        json!({"name":"ok-name","region":"mars-1"}),
    )
    .await
    .assert_error(422);
    s.post("/org/containers", &a, json!({}))
        .await
        .assert_error(422);

    let l = s.get("/org/containers", &a).await.assert_ok(200);
    let c = &l.data()[0];
    assert_eq!(c["name"], "team-a-logs");
    assert!(c["creationTime"].as_str().unwrap().ends_with('Z'));
    assert!(
        c.get("region").is_none(),
        "optional fields only when included"
    );
    assert!(c.get("deleteObjectStatus").is_none());
    let l = s
        .get(
            "/org/containers?include=region,deleteObjects,s3ObjectLock",
            &a,
        )
        .await
        .assert_ok(200);
    let c = &l.data()[0];
    assert_eq!(c["region"], "us-east-1");
    assert_eq!(c["s3ObjectLock"], json!({"enabled": false}));
    assert_eq!(
        c["deleteObjectStatus"],
        json!({"isDeletingObjects": false, "initialObjectCount": "0", "initialObjectBytes": "0"})
    );
    assert_eq!(
        s.get("/org/containers", &b).await.assert_ok(200).data(),
        &json!([])
    );
    assert_eq!(
        s.get("/org/regions", &a).await.assert_ok(200).data(),
        &json!(["us-east-1"])
    );
    assert_eq!(
        s.get("/org/containers/team-a-logs/region", &a)
            .await
            .assert_ok(200)
            .data(),
        "us-east-1"
    );

    // The bucket is real (in moto) and non-empty buckets cannot be deleted.
    let key = s.key(&a, "current-user").await;
    let s3 = s.s3(&key);
    s.put_objects(&s3, "team-a-logs", 1, 10).await;
    s.delete("/org/containers/team-a-logs", &a)
        .await
        .assert_error(409);
    s.delete("/org/containers/team-a-logs", &b)
        .await
        .assert_error(404);
    s.delete("/org/containers/no-such-bucket", &a)
        .await
        .assert_error(404);
    s3.delete_object()
        .bucket("team-a-logs")
        .key("obj-0000")
        .send()
        .await
        .unwrap();
    s.delete("/org/containers/team-a-logs", &a)
        .await
        .assert_ok(204);
    assert_eq!(
        s.get("/org/containers", &a).await.assert_ok(200).data(),
        &json!([])
    );
    // The name is free again, for anyone.
    s.create_bucket(&b, "team-a-logs").await;
}

#[tokio::test]
async fn versioning_object_lock_and_usage() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (id, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "vers").await;
    s.create_bucket(&t, "empty").await;
    let v = s
        .get("/org/containers/vers/versioning", &t)
        .await
        .assert_ok(200);
    assert_eq!(
        v.data(),
        &json!({"versioningEnabled": false, "versioningSuspended": false})
    );
    s.put(
        "/org/containers/vers/versioning",
        &t,
        json!({"versioningEnabled": true, "versioningSuspended": true}),
    )
    .await
    .assert_error(422);
    s.put(
        "/org/containers/vers/versioning",
        &t,
        json!({"versioningEnabled": true, "versioningSuspended": false}),
    )
    .await
    .assert_ok(200);
    let v = s
        .get("/org/containers/vers/versioning", &t)
        .await
        .assert_ok(200);
    assert_eq!(
        v.data(),
        &json!({"versioningEnabled": true, "versioningSuspended": false})
    );
    s.put(
        "/org/containers/vers/versioning",
        &t,
        json!({"versioningEnabled": false, "versioningSuspended": false}),
    )
    .await
    .assert_error(422);

    let key = s.key(&t, "current-user").await;
    let s3 = s.s3(&key);
    s.put_objects(&s3, "vers", 3, 100).await;
    s.put_objects(&s3, "vers", 1, 50).await; // second version of obj-0000
    assert_eq!(
        s.bucket_usage(&t, "vers").await,
        (4, 350),
        "noncurrent versions count"
    );
    assert_eq!(s.bucket_usage(&t, "empty").await, (0, 0));
    let u = s.get("/org/usage", &t).await.assert_ok(200);
    assert_eq!(u.data()["objectCount"], 4);
    assert_eq!(u.data()["dataBytes"], 350);
    assert!(u.data()["calculationTime"].is_string());
    let g = s
        .get(&format!("/grid/accounts/{id}/usage"), &grid)
        .await
        .assert_ok(200);
    assert_eq!(g.data()["objectCount"], 4);
    assert_eq!(g.data()["buckets"].as_array().unwrap().len(), 2);
    let d = s
        .get("/org/usage?includeBucketDetail=true", &t)
        .await
        .assert_ok(200);
    let vb = d.data()["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "vers")
        .unwrap()
        .clone();
    assert_eq!(vb["versioningEnabled"], true);
    assert_eq!(vb["region"], "us-east-1");
    let cu = s.get("/org/containers/vers/usage", &t).await.assert_ok(200);
    assert_eq!(cu.data(), &json!({"objectCount": 4, "dataBytes": 350}));

    // Object lock at creation; days come back as strings.
    let r = s
        .post(
            "/org/containers",
            &t,
            json!({"name":"locked","s3ObjectLock":{"enabled":true,"defaultRetentionSetting":{"mode":"compliance","days":3}}}),
        )
        .await
        .assert_ok(201);
    assert_eq!(
        r.data()["s3ObjectLock"]["defaultRetentionSetting"]["days"],
        "3"
    );
    let ol = s
        .get("/org/containers/locked/object-lock", &t)
        .await
        .assert_ok(200);
    assert_eq!(ol.data()["enabled"], true);
    let v = s
        .get("/org/containers/locked/versioning", &t)
        .await
        .assert_ok(200);
    assert_eq!(
        v.data()["versioningEnabled"],
        true,
        "object lock implies versioning"
    );
    s.post("/org/containers", &t, json!({"name":"bad-lock","s3ObjectLock":{"enabled":false,"defaultRetentionSetting":{"mode":"compliance","days":1}}}))
        .await
        .assert_error(422);
}

#[tokio::test]
async fn drain_empties_bucket_with_observable_progress() {
    let s = Stack::start_with(|c| c.drain_rate = 20).await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "drain-me").await;
    s.put(
        "/org/containers/drain-me/versioning",
        &t,
        json!({"versioningEnabled": true, "versioningSuspended": false}),
    )
    .await
    .assert_ok(200);
    let key = s.key(&t, "current-user").await;
    let s3 = s.s3(&key);
    s.put_objects(&s3, "drain-me", 40, 10).await;
    // A delete marker and a noncurrent version must go as well.
    s3.delete_object()
        .bucket("drain-me")
        .key("obj-0000")
        .send()
        .await
        .unwrap();
    assert_eq!(s.bucket_usage(&t, "drain-me").await, (40, 400));

    // The server coerces the string form some clients send.
    let r = s
        .post(
            "/org/containers/drain-me/delete-objects",
            &t,
            json!({"deleteObjects": "true"}),
        )
        .await
        .assert_ok(200);
    assert_eq!(r.data()["isDeletingObjects"], true);
    let st = s
        .get("/org/containers/drain-me/delete-objects", &t)
        .await
        .assert_ok(200);
    assert_eq!(
        st.data(),
        &json!({"isDeletingObjects": true, "initialObjectCount": "40", "initialObjectBytes": "400"})
    );
    let l = s
        .get("/org/containers?include=deleteObjects", &t)
        .await
        .assert_ok(200);
    assert_eq!(
        l.data()[0]["deleteObjectStatus"]["initialObjectCount"],
        "40"
    );

    // Read-only while draining.
    let put = s3
        .put_object()
        .bucket("drain-me")
        .key("new")
        .body(b"x".to_vec().into())
        .send()
        .await;
    assert_eq!(common::s3_code(put), "AccessDenied");

    // Progress is visible: an intermediate count strictly between 0 and 40.
    let seen = eventually(Duration::from_secs(10), || async {
        let (n, _) = s.bucket_usage(&t, "drain-me").await;
        (n > 0 && n < 40).then_some(n)
    })
    .await;
    assert!(seen.is_some(), "no intermediate progress observed");
    let started = Instant::now();
    let done = eventually(Duration::from_secs(20), || async {
        (s.bucket_usage(&t, "drain-me").await.0 == 0).then_some(())
    })
    .await;
    assert!(done.is_some(), "drain did not finish");
    assert!(
        started.elapsed() > Duration::from_millis(500),
        "drain rate is respected"
    );
    // Delete markers too: the bucket is truly empty, yet still flagged as deleting.
    let vers = s3
        .list_object_versions()
        .bucket("drain-me")
        .send()
        .await
        .unwrap();
    let leftover = eventually(Duration::from_secs(5), || async {
        let v = s3
            .list_object_versions()
            .bucket("drain-me")
            .send()
            .await
            .unwrap();
        (v.versions().is_empty() && v.delete_markers().is_empty()).then_some(())
    })
    .await;
    assert!(
        leftover.is_some(),
        "versions or delete markers left: {vers:?}"
    );
    let st = s
        .get("/org/containers/drain-me/delete-objects", &t)
        .await
        .assert_ok(200);
    assert_eq!(st.data()["isDeletingObjects"], true);
    s.delete("/org/containers/drain-me", &t)
        .await
        .assert_ok(204);
}

#[tokio::test]
async fn drain_stop_leaves_remaining_objects() {
    let s = Stack::start_with(|c| c.drain_rate = 5).await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "half").await;
    let key = s.key(&t, "current-user").await;
    let s3 = s.s3(&key);
    s.put_objects(&s3, "half", 30, 1).await;
    s.post(
        "/org/containers/half/delete-objects",
        &t,
        json!({"deleteObjects": true}),
    )
    .await
    .assert_ok(200);
    let seen = eventually(Duration::from_secs(10), || async {
        let (n, _) = s.bucket_usage(&t, "half").await;
        (n < 30).then_some(n)
    })
    .await;
    assert!(seen.is_some(), "drain made no progress");
    let r = s
        .post(
            "/org/containers/half/delete-objects",
            &t,
            json!({"deleteObjects": false}),
        )
        .await
        .assert_ok(200);
    assert_eq!(r.data()["isDeletingObjects"], false);
    tokio::time::sleep(Duration::from_millis(500)).await; // an in-flight batch may finish
    let (left, _) = s.bucket_usage(&t, "half").await;
    assert!(left > 0 && left < 30, "left {left}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(s.bucket_usage(&t, "half").await.0, left, "deletion halted");
    let st = s
        .get("/org/containers/half/delete-objects", &t)
        .await
        .assert_ok(200);
    assert_eq!(st.data()["isDeletingObjects"], false);
    // Writable again; still not deletable.
    s3.put_object()
        .bucket("half")
        .key("again")
        .body(b"y".to_vec().into())
        .send()
        .await
        .unwrap();
    s.delete("/org/containers/half", &t).await.assert_error(409);
    s.post(
        "/org/containers/half/delete-objects",
        &t,
        json!({"deleteObjects": "maybe"}),
    )
    .await
    .assert_error(422);
    s.post(
        "/org/containers/nope/delete-objects",
        &t,
        json!({"deleteObjects": true}),
    )
    .await
    .assert_error(404);
}

#[tokio::test]
async fn users_groups_and_keys() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (id, t) = s.tenant(&grid, "t").await;
    let policy = json!({"management":{"manageAllContainers":false,"manageOwnS3Credentials":true,"rootAccess":false},
        "s3":{"Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::b1","arn:aws:s3:::b1/*"]}]}});
    let g = s
        .post("/org/groups", &t, json!({"uniqueName":"group/b1-admin","displayName":"b1 admin","managementReadOnly":false,"policies":policy}))
        .await
        .assert_ok(201);
    let gid = g.data()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        g.data()["groupURN"],
        format!("urn:sgws:identity::{id}:group/b1-admin")
    );
    s.post(
        "/org/groups",
        &t,
        json!({"uniqueName":"group/b1-admin","policies":{}}),
    )
    .await
    .assert_error(422);
    s.post("/org/groups", &t, json!({"uniqueName":"group/bad","policies":{"s3":{"Statement":[{"Effect":"Perhaps","Action":"*","Resource":"*"}]}}}))
        .await
        .assert_error(422);
    s.post("/org/groups", &t, json!({"uniqueName":"nogroupprefix"}))
        .await
        .assert_error(422);
    assert_eq!(
        s.get(&format!("/org/groups/{gid}"), &t)
            .await
            .assert_ok(200)
            .data()["uniqueName"],
        "group/b1-admin"
    );
    assert_eq!(
        s.get("/org/groups/group/b1-admin", &t)
            .await
            .assert_ok(200)
            .data()["id"],
        gid.as_str()
    );
    assert_eq!(
        s.get("/org/groups", &t)
            .await
            .assert_ok(200)
            .data()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    s.get("/org/groups/group/none", &t).await.assert_error(404);

    let u = s
        .post(
            "/org/users",
            &t,
            json!({"uniqueName":"user/app-a","fullName":"App A","memberOf":[gid],"disable":false}),
        )
        .await
        .assert_ok(201);
    let uid = u.data()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        u.data()["userURN"],
        format!("urn:sgws:identity::{id}:user/app-a")
    );
    assert_eq!(u.data()["memberOf"], json!([gid]));
    s.post(
        "/org/users",
        &t,
        json!({"uniqueName":"user/app-a","fullName":"dup"}),
    )
    .await
    .assert_error(422);
    s.post(
        "/org/users",
        &t,
        json!({"uniqueName":"user/x","memberOf":["no-such-group"]}),
    )
    .await
    .assert_error(422);
    assert_eq!(
        s.get(&format!("/org/users/{uid}"), &t)
            .await
            .assert_ok(200)
            .data()["fullName"],
        "App A"
    );
    assert_eq!(
        s.get("/org/users/user/app-a", &t)
            .await
            .assert_ok(200)
            .data()["id"],
        uid.as_str()
    );
    s.get("/org/users/user/nobody", &t).await.assert_error(404);
    s.get("/org/users/00000000-0000-4000-8000-000000000000", &t)
        .await
        .assert_error(404);
    let users = s.get("/org/users", &t).await.assert_ok(200);
    let names: Vec<&str> = users
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["uniqueName"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"root") && names.contains(&"user/app-a"),
        "{names:?}"
    );
    assert_eq!(
        s.get("/org/users?limit=1", &t)
            .await
            .assert_ok(200)
            .data()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Keys: the secret only in the 201 answer.
    let k = s
        .post(&format!("/org/users/{uid}/s3-access-keys"), &t, json!({}))
        .await
        .assert_ok(201);
    let kid = k.data()["id"].as_str().unwrap().to_owned();
    let access = k.data()["accessKey"].as_str().unwrap().to_owned();
    let secret = k.data()["secretAccessKey"].as_str().unwrap().to_owned();
    assert_eq!(k.data()["expires"], json!(null));
    assert_eq!(k.data()["userUUID"], uid.as_str());
    assert!(
        k.data()["displayName"]
            .as_str()
            .unwrap()
            .ends_with(&access[access.len() - 4..])
    );
    let list = s
        .get(&format!("/org/users/{uid}/s3-access-keys"), &t)
        .await
        .assert_ok(200);
    assert_eq!(list.data().as_array().unwrap().len(), 1);
    assert!(
        !list.body.to_string().contains(&secret),
        "secret leaked in list"
    );
    assert!(list.data()[0].get("accessKey").is_none());
    let one = s
        .get(&format!("/org/users/{uid}/s3-access-keys/{kid}"), &t)
        .await
        .assert_ok(200);
    assert!(!one.body.to_string().contains(&secret));
    let exp = s
        .post(
            &format!("/org/users/{uid}/s3-access-keys"),
            &t,
            json!({"expires":"2999-01-01T00:00:00.000Z"}),
        )
        .await
        .assert_ok(201);
    assert_eq!(exp.data()["expires"], "2999-01-01T00:00:00.000Z");
    s.post(
        &format!("/org/users/{uid}/s3-access-keys"),
        &t,
        json!({"expires":"2001-01-01T00:00:00.000Z"}),
    )
    .await
    .assert_error(422);
    // Delete by access key or by id.
    s.delete(&format!("/org/users/{uid}/s3-access-keys/{access}"), &t)
        .await
        .assert_ok(204);
    s.delete(&format!("/org/users/{uid}/s3-access-keys/{kid}"), &t)
        .await
        .assert_error(404);
    assert_eq!(
        s.get(&format!("/org/users/{uid}/s3-access-keys"), &t)
            .await
            .assert_ok(200)
            .data()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The user can manage its own keys (manageOwnS3Credentials) but nothing else.
    s.post(
        &format!("/org/users/{uid}/change-password"),
        &t,
        json!({"password":"app-a-pass"}),
    )
    .await
    .assert_ok(204);
    let ut = s.tenant_token(&id, "app-a", "app-a-pass").await;
    let own = s
        .post("/org/users/current-user/s3-access-keys", &ut, json!({}))
        .await
        .assert_ok(201);
    assert_eq!(own.data()["userUUID"], uid.as_str());
    assert_eq!(
        s.get("/org/users/current-user/s3-access-keys", &ut)
            .await
            .assert_ok(200)
            .data()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    s.post("/org/users/root/s3-access-keys", &ut, json!({}))
        .await
        .assert_error(403);
    s.post("/org/containers", &ut, json!({"name":"b1"}))
        .await
        .assert_error(403);
    s.post("/org/groups", &ut, json!({"uniqueName":"group/x"}))
        .await
        .assert_error(403);

    // Root keys via both paths.
    s.key(&t, "current-user").await;
    let rootkeys = s
        .get("/org/users/root/s3-access-keys", &t)
        .await
        .assert_ok(200);
    assert_eq!(rootkeys.data().as_array().unwrap().len(), 1);

    // Group update and delete.
    let upd = s
        .put(
            &format!("/org/groups/{gid}"),
            &t,
            json!({"displayName":"renamed","policies":{"s3":{"Statement":[]}}}),
        )
        .await
        .assert_ok(200);
    assert_eq!(upd.data()["displayName"], "renamed");
    s.delete(&format!("/org/groups/{gid}"), &t)
        .await
        .assert_ok(204);
    s.get(&format!("/org/groups/{gid}"), &t)
        .await
        .assert_error(404);
    assert_eq!(
        s.get(&format!("/org/users/{uid}"), &t)
            .await
            .assert_ok(200)
            .data()["memberOf"],
        json!([])
    );

    // Deleting a user removes its keys and sessions; the root user cannot be deleted.
    s.delete(&format!("/org/users/{uid}"), &t)
        .await
        .assert_ok(204);
    s.get(&format!("/org/users/{uid}"), &t)
        .await
        .assert_error(404);
    s.get("/org/users/current-user", &ut)
        .await
        .assert_error(401);
    let root_id = s.get("/org/users/root", &t).await.assert_ok(200).data()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.delete(&format!("/org/users/{root_id}"), &t)
        .await
        .assert_error(422);
    let state = s
        .raw(
            Method::GET,
            &format!("{}/debug/state", s.emu.management_url()),
            None,
            None,
        )
        .await;
    assert!(
        state.body["keys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["userUUID"] != uid.as_str())
    );

    // Another tenant cannot see these users.
    let (_, other) = s.tenant(&grid, "other").await;
    s.get(&format!("/org/users/{root_id}"), &other)
        .await
        .assert_error(404);
}

#[tokio::test]
async fn debug_request_log_and_state() {
    let s = Stack::start().await;
    let base = s.emu.management_url().to_owned();
    let grid = s.grid_token().await;
    let (id, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "dbg-bucket").await;
    let (_, secret) = s.key(&t, "current-user").await;
    s.get("/grid/accounts/99999999999999999999", &grid)
        .await
        .assert_error(404);

    let r = s
        .raw(Method::GET, &format!("{base}/debug/requests"), None, None)
        .await;
    assert_eq!(r.status, 200);
    let reqs = r.body["requests"].as_array().unwrap();
    let find = |op: &str| {
        reqs.iter()
            .find(|r| r["operation"] == op)
            .unwrap_or_else(|| panic!("{op} missing: {reqs:?}"))
            .clone()
    };
    let c = find("createAccount");
    assert_eq!(c["method"], "POST");
    assert_eq!(c["path"], "/api/v4/grid/accounts");
    assert_eq!(c["code"], 201);
    assert_eq!(c["account"], id.as_str());
    let cc = find("createContainer");
    assert_eq!(cc["account"], id.as_str());
    assert_eq!(cc["code"], 201);
    assert_eq!(find("getAccount")["code"], 404);
    assert!(
        reqs.iter()
            .all(|r| !r["path"].as_str().unwrap().starts_with("/debug"))
    );

    let state = s
        .raw(Method::GET, &format!("{base}/debug/state"), None, None)
        .await;
    assert_eq!(state.status, 200);
    assert_eq!(state.body["accounts"][0]["id"], id.as_str());
    assert_eq!(state.body["buckets"][0]["name"], "dbg-bucket");
    assert_eq!(state.body["buckets"][0]["accountId"], id.as_str());
    let dump = state.body.to_string();
    assert!(!dump.contains(&secret), "secret in state dump");
    assert!(!dump.contains(TENANT_PASSWORD), "password in state dump");
    assert!(!dump.contains(common::ADMIN_PASSWORD));

    let d = s
        .raw(
            Method::DELETE,
            &format!("{base}/debug/requests"),
            None,
            None,
        )
        .await;
    assert_eq!(d.status, 204);
    let r = s
        .raw(Method::GET, &format!("{base}/debug/requests"), None, None)
        .await;
    assert_eq!(r.body["requests"], json!([]));
}

#[tokio::test]
async fn fault_injection() {
    let s = Stack::start().await;
    let base = s.emu.management_url().to_owned();
    let grid = s.grid_token().await;
    let id = s.create_account(&grid, "t").await;
    let other = s.create_account(&grid, "u").await;

    let f = s
        .raw(
            Method::POST,
            &format!("{base}/debug/faults"),
            None,
            Some(json!({"path_prefix":"/api/v4/grid/accounts","method":"DELETE","status":503,"count":2})),
        )
        .await;
    assert_eq!(f.status, 201);
    // GETs are not affected; the next two DELETEs fail with 503, the third works.
    s.get(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(200);
    s.delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_error(503);
    s.delete(&format!("/grid/accounts/{other}"), &grid)
        .await
        .assert_error(503);
    s.delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(204);
    let log = s
        .raw(Method::GET, &format!("{base}/debug/requests"), None, None)
        .await;
    let faults = log.body["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["code"] == 503)
        .count();
    assert_eq!(faults, 2);

    // Delay.
    s.raw(
        Method::POST,
        &format!("{base}/debug/faults"),
        None,
        Some(json!({"path_prefix":"/api/v4/grid/accounts","delay_ms":700})),
    )
    .await;
    let t0 = Instant::now();
    s.get(&format!("/grid/accounts/{other}"), &grid)
        .await
        .assert_ok(200);
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "delay not applied"
    );
    let t0 = Instant::now();
    s.get(&format!("/grid/accounts/{other}"), &grid)
        .await
        .assert_ok(200);
    assert!(
        t0.elapsed() < Duration::from_millis(700),
        "delay applied more than once"
    );

    // Clear.
    s.raw(
        Method::POST,
        &format!("{base}/debug/faults"),
        None,
        Some(json!({"path_prefix":"/api/v4/grid","status":500,"count":100})),
    )
    .await;
    s.get("/grid/accounts", &grid).await.assert_error(500);
    let d = s
        .raw(Method::DELETE, &format!("{base}/debug/faults"), None, None)
        .await;
    assert_eq!(d.status, 204);
    s.get("/grid/accounts", &grid).await.assert_ok(200);
    // Invalid rule.
    let bad = s
        .raw(
            Method::POST,
            &format!("{base}/debug/faults"),
            None,
            Some(json!({"path_prefix":"/x"})),
        )
        .await;
    assert_eq!(bad.status, 422);
}

#[tokio::test]
async fn object_lock_retention_and_bucket_quota() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.post(
        "/org/containers",
        &t,
        json!({"name":"locked","s3ObjectLock":{"enabled":true,"defaultRetentionSetting":{"mode":"governance","years":"1"}}}),
    )
    .await
    .assert_ok(201);
    let s3 = s.s3(&s.key(&t, "current-user").await);
    let conf = s3
        .get_object_lock_configuration()
        .bucket("locked")
        .send()
        .await
        .unwrap();
    let rule = conf
        .object_lock_configuration()
        .unwrap()
        .rule()
        .unwrap()
        .default_retention()
        .unwrap()
        .clone();
    assert_eq!(rule.years(), Some(1));
    assert_eq!(rule.mode().unwrap().as_str(), "GOVERNANCE");

    let r = s
        .put(
            "/org/containers/locked/object-lock",
            &t,
            json!({"enabled":true,"defaultRetentionSetting":{"mode":"compliance","days":7}}),
        )
        .await
        .assert_ok(200);
    assert_eq!(
        r.data()["defaultRetentionSetting"],
        json!({"mode":"compliance","days":"7"})
    );
    let conf = s3
        .get_object_lock_configuration()
        .bucket("locked")
        .send()
        .await
        .unwrap();
    let rule = conf
        .object_lock_configuration()
        .unwrap()
        .rule()
        .unwrap()
        .default_retention()
        .unwrap()
        .clone();
    assert_eq!(rule.days(), Some(7));
    let l = s
        .get("/org/containers?include=s3ObjectLock", &t)
        .await
        .assert_ok(200);
    assert_eq!(
        l.data()[0]["s3ObjectLock"]["defaultRetentionSetting"]["days"],
        "7"
    );

    // Object lock cannot be turned on later.
    s.create_bucket(&t, "plain").await;
    s.put(
        "/org/containers/plain/object-lock",
        &t,
        json!({"enabled":true}),
    )
    .await
    .assert_error(422);

    // Per-bucket quota (11.9+): stored and reported.
    assert_eq!(
        s.get("/org/containers/plain/quota-object-bytes", &t)
            .await
            .assert_ok(200)
            .data(),
        &json!({"quotaObjectBytes": null})
    );
    s.put(
        "/org/containers/plain/quota-object-bytes",
        &t,
        json!({"quotaObjectBytes": 1000}),
    )
    .await
    .assert_ok(200);
    s.put(
        "/org/containers/plain/quota-object-bytes",
        &t,
        json!({"quotaObjectBytes": 0}),
    )
    .await
    .assert_error(422);
    let l = s
        .get("/org/containers?include=quotaObjectBytes", &t)
        .await
        .assert_ok(200);
    let plain = l
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "plain")
        .unwrap()
        .clone();
    assert_eq!(plain["quotaObjectBytes"], 1000);
    s.get("/org/containers?include=bogus", &t)
        .await
        .assert_error(422);
}

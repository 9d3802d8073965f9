//! Grid API: tenant accounts.

use super::*;

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
async fn the_grid_id_is_the_top_of_the_topology_and_differs_between_emulators() {
    let a = Stack::start().await;
    let token = a.grid_token().await;
    let top = a
        .get("/grid/health/topology?depth=grid", &token)
        .await
        .assert_ok(200);
    assert_eq!(top.data()["type"], "grid");
    let id_a = top.data()["id"].as_str().unwrap().to_owned();
    assert!(!id_a.is_empty());
    // Grid API only: a tenant token is refused.
    let (_, tenant) = a.tenant(&token, "team-a").await;
    let refused = a
        .get("/grid/health/topology", &tenant)
        .await
        .status
        .as_u16();
    assert!(matches!(refused, 401 | 403), "{refused}");

    let b = Stack::start_with(|c| c.grid_id = "grid-b".into()).await;
    let token = b.grid_token().await;
    let top = b.get("/grid/health/topology", &token).await.assert_ok(200);
    assert_eq!(top.data()["id"], "grid-b");
    assert_ne!(id_a, "grid-b");
}

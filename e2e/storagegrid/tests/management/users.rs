//! Tenant API: users, groups and S3 access keys.

use super::*;

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

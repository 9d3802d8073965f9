//! The tenant S3 endpoint (proxy in front of moto): keys, tenant isolation, group policies.

mod common;

use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use common::{Stack, s3_client, s3_code};
use serde_json::json;

async fn body_of(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Vec<u8> {
    let o = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect("get_object");
    o.body.collect().await.unwrap().into_bytes().to_vec()
}

#[tokio::test]
async fn root_key_has_full_access_to_own_buckets() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "root-bucket").await;
    let s3 = s.s3(&s.key(&t, "current-user").await);
    s3.put_object()
        .bucket("root-bucket")
        .key("dir/hello.txt")
        .body(b"hello world".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(
        body_of(&s3, "root-bucket", "dir/hello.txt").await,
        b"hello world"
    );
    let list = s3
        .list_objects_v2()
        .bucket("root-bucket")
        .send()
        .await
        .unwrap();
    assert_eq!(list.contents().len(), 1);
    assert_eq!(list.contents()[0].key(), Some("dir/hello.txt"));
    // A larger body streams through unchanged.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    s3.put_object()
        .bucket("root-bucket")
        .key("big")
        .body(big.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(body_of(&s3, "root-bucket", "big").await, big);
    // Versioning through S3 works with the SDK (moto's root-element quirk is fixed up).
    let v = s3
        .get_bucket_versioning()
        .bucket("root-bucket")
        .send()
        .await
        .unwrap();
    assert!(v.status().is_none());
    s3.delete_object()
        .bucket("root-bucket")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(s.bucket_usage(&t, "root-bucket").await, (1, 11));
    // Unknown bucket.
    assert_eq!(
        s3_code(s3.list_objects_v2().bucket("nobody-has-this").send().await),
        "NoSuchBucket"
    );
}

#[tokio::test]
async fn unknown_and_deleted_keys_are_rejected() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "keyed").await;
    let unknown = s3_client(s.emu.s3_url(), "SGNEVERISSUED0000000", "secret");
    assert_eq!(
        s3_code(unknown.list_objects_v2().bucket("keyed").send().await),
        "InvalidAccessKeyId"
    );
    assert_eq!(
        s3_code(unknown.list_buckets().send().await),
        "InvalidAccessKeyId"
    );

    let key = s.key(&t, "current-user").await;
    let s3 = s.s3(&key);
    s3.list_objects_v2().bucket("keyed").send().await.unwrap();
    s.delete(
        &format!("/org/users/current-user/s3-access-keys/{}", key.0),
        &t,
    )
    .await
    .assert_ok(204);
    assert_eq!(
        s3_code(s3.list_objects_v2().bucket("keyed").send().await),
        "InvalidAccessKeyId"
    );

    // Anonymous requests are denied.
    let r = s
        .http
        .get(format!("{}/keyed", s.emu.s3_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let text = r.text().await.unwrap();
    assert!(text.contains("<Code>AccessDenied</Code>"), "{text}");
}

#[tokio::test]
async fn bucket_scoped_group_key() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "team-logs").await;
    s.create_bucket(&t, "team-other").await;
    let root = s.s3(&s.key(&t, "current-user").await);
    root.put_object()
        .bucket("team-other")
        .key("secret")
        .body(b"s".to_vec().into())
        .send()
        .await
        .unwrap();

    let g = s
        .post(
            "/org/groups",
            &t,
            json!({"uniqueName":"group/logs","policies":{"s3":{"Statement":[{"Effect":"Allow","Action":["s3:*"],
                "Resource":["arn:aws:s3:::team-logs","arn:aws:s3:::team-logs/*"]}]}}}),
        )
        .await
        .assert_ok(201);
    let gid = g.data()["id"].as_str().unwrap().to_owned();
    let u = s
        .post(
            "/org/users",
            &t,
            json!({"uniqueName":"user/logs","memberOf":[gid]}),
        )
        .await
        .assert_ok(201);
    let uid = u.data()["id"].as_str().unwrap().to_owned();
    let app = s.s3(&s.key(&t, &uid).await);

    // Allowed on its bucket.
    app.put_object()
        .bucket("team-logs")
        .key("a.log")
        .body(b"log".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(body_of(&app, "team-logs", "a.log").await, b"log");
    assert_eq!(
        app.list_objects_v2()
            .bucket("team-logs")
            .send()
            .await
            .unwrap()
            .contents()
            .len(),
        1
    );
    app.delete_object()
        .bucket("team-logs")
        .key("a.log")
        .send()
        .await
        .unwrap();

    // Denied on the other bucket of the same tenant.
    assert_eq!(
        s3_code(app.list_objects_v2().bucket("team-other").send().await),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(
            app.get_object()
                .bucket("team-other")
                .key("secret")
                .send()
                .await
        ),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(
            app.put_object()
                .bucket("team-other")
                .key("x")
                .body(b"x".to_vec().into())
                .send()
                .await
        ),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(
            app.delete_object()
                .bucket("team-other")
                .key("secret")
                .send()
                .await
        ),
        "AccessDenied"
    );
    // Copying out of the forbidden bucket into the allowed one is denied too.
    assert_eq!(
        s3_code(
            app.copy_object()
                .bucket("team-logs")
                .key("stolen")
                .copy_source("team-other/secret")
                .send()
                .await
        ),
        "AccessDenied"
    );
    // Not allowed to create buckets or list all buckets.
    assert_eq!(
        s3_code(app.create_bucket().bucket("app-made").send().await),
        "AccessDenied"
    );
    assert_eq!(s3_code(app.list_buckets().send().await), "AccessDenied");
    assert_eq!(body_of(&root, "team-other", "secret").await, b"s");

    // A narrower policy: read only, with an explicit Deny on one prefix.
    s.put(
        &format!("/org/groups/{gid}"),
        &t,
        json!({"policies":{"s3":{"Statement":[
            {"Effect":"Allow","Action":["s3:ListBucket","s3:GetObject"],"Resource":["arn:aws:s3:::team-other","arn:aws:s3:::team-other/*"]},
            {"Effect":"Deny","Action":"s3:GetObject","Resource":"arn:aws:s3:::team-other/private/*"}]}}}),
    )
    .await
    .assert_ok(200);
    root.put_object()
        .bucket("team-other")
        .key("private/p")
        .body(b"p".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(body_of(&app, "team-other", "secret").await, b"s");
    assert_eq!(
        s3_code(
            app.get_object()
                .bucket("team-other")
                .key("private/p")
                .send()
                .await
        ),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(
            app.put_object()
                .bucket("team-other")
                .key("y")
                .body(b"y".to_vec().into())
                .send()
                .await
        ),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(app.list_objects_v2().bucket("team-logs").send().await),
        "AccessDenied"
    );
}

#[tokio::test]
async fn tenants_are_isolated() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, a) = s.tenant(&grid, "a").await;
    let (_, b) = s.tenant(&grid, "b").await;
    s.create_bucket(&a, "a-one").await;
    s.create_bucket(&a, "a-two").await;
    s.create_bucket(&b, "b-one").await;
    let sa = s.s3(&s.key(&a, "current-user").await);
    let sb = s.s3(&s.key(&b, "current-user").await);
    sa.put_object()
        .bucket("a-one")
        .key("k")
        .body(b"a".to_vec().into())
        .send()
        .await
        .unwrap();

    assert_eq!(
        s3_code(sb.get_object().bucket("a-one").key("k").send().await),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(sb.list_objects_v2().bucket("a-one").send().await),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(sb.delete_bucket().bucket("a-two").send().await),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(
            sb.put_object()
                .bucket("a-one")
                .key("k")
                .body(b"b".to_vec().into())
                .send()
                .await
        ),
        "AccessDenied"
    );

    let mut la: Vec<String> = sa
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_owned))
        .collect();
    la.sort();
    assert_eq!(la, ["a-one", "a-two"]);
    let lb: Vec<String> = sb
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_owned))
        .collect();
    assert_eq!(lb, ["b-one"]);
}

#[tokio::test]
async fn create_and_delete_bucket_through_s3() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, a) = s.tenant(&grid, "a").await;
    let (_, b) = s.tenant(&grid, "b").await;
    let sa = s.s3(&s.key(&a, "current-user").await);
    let sb = s.s3(&s.key(&b, "current-user").await);

    sa.create_bucket().bucket("via-s3").send().await.unwrap();
    let l = s.get("/org/containers", &a).await.assert_ok(200);
    assert_eq!(l.data()[0]["name"], "via-s3");
    // The name is now taken grid-wide.
    assert_eq!(
        s3_code(sb.create_bucket().bucket("via-s3").send().await),
        "BucketAlreadyExists"
    );
    assert_eq!(
        s3_code(sa.create_bucket().bucket("via-s3").send().await),
        "BucketAlreadyOwnedByYou"
    );
    s.post("/org/containers", &b, json!({"name":"via-s3"}))
        .await
        .assert_error(409);
    // And the reverse: a management-created name cannot be taken through S3.
    s.create_bucket(&b, "b-managed").await;
    assert_eq!(
        s3_code(sa.create_bucket().bucket("b-managed").send().await),
        "BucketAlreadyExists"
    );

    // A failed create does not register anything.
    assert_eq!(
        s3_code(sa.create_bucket().bucket("Not_Valid").send().await),
        "InvalidBucketName"
    );

    sa.put_object()
        .bucket("via-s3")
        .key("k")
        .body(b"v".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(
        s3_code(sa.delete_bucket().bucket("via-s3").send().await),
        "BucketNotEmpty"
    );
    assert_eq!(
        s.get("/org/containers", &a)
            .await
            .assert_ok(200)
            .data()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    sa.delete_object()
        .bucket("via-s3")
        .key("k")
        .send()
        .await
        .unwrap();
    sa.delete_bucket().bucket("via-s3").send().await.unwrap();
    assert_eq!(
        s.get("/org/containers", &a).await.assert_ok(200).data(),
        &json!([])
    );
    // Released: tenant b can have it now.
    sb.create_bucket().bucket("via-s3").send().await.unwrap();

    // A group allowed to create a specific bucket can do so; the bucket belongs to the tenant.
    let g = s
        .post(
            "/org/groups",
            &a,
            json!({"uniqueName":"group/maker","policies":{"s3":{"Statement":[{"Effect":"Allow","Action":["s3:CreateBucket","s3:ListAllMyBuckets"],"Resource":["arn:aws:s3:::made-*","arn:aws:s3:::*"]}]}}}),
        )
        .await
        .assert_ok(201);
    let gid = g.data()["id"].as_str().unwrap().to_owned();
    let u = s
        .post(
            "/org/users",
            &a,
            json!({"uniqueName":"user/maker","memberOf":[gid]}),
        )
        .await
        .assert_ok(201);
    let maker = s.s3(&s.key(&a, u.data()["id"].as_str().unwrap()).await);
    maker
        .create_bucket()
        .bucket("made-by-app")
        .send()
        .await
        .unwrap();
    let names: Vec<String> = maker
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_owned))
        .collect();
    assert!(names.contains(&"made-by-app".to_owned()), "{names:?}");
    assert!(!names.contains(&"via-s3".to_owned()), "{names:?}");
}

#[tokio::test]
async fn presigned_urls_identify_the_key() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "presign").await;
    let s3 = s.s3(&s.key(&t, "current-user").await);
    s3.put_object()
        .bucket("presign")
        .key("p")
        .body(b"presigned".to_vec().into())
        .send()
        .await
        .unwrap();
    let cfg = PresigningConfig::expires_in(Duration::from_secs(300)).unwrap();
    let url = s3
        .get_object()
        .bucket("presign")
        .key("p")
        .presigned(cfg.clone())
        .await
        .unwrap();
    let r = s.http.get(url.uri()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"presigned");

    let unknown = s3_client(s.emu.s3_url(), "SGNEVERISSUED0000000", "x");
    let url = unknown
        .get_object()
        .bucket("presign")
        .key("p")
        .presigned(cfg)
        .await
        .unwrap();
    let r = s.http.get(url.uri()).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("<Code>InvalidAccessKeyId</Code>")
    );
}

#[tokio::test]
async fn s3_faults_and_disabled_users() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "flaky").await;
    let s3 = s.s3(&s.key(&t, "current-user").await);
    let r = s
        .raw(
            reqwest::Method::POST,
            &format!("{}/debug/faults", s.emu.management_url()),
            None,
            Some(json!({"path_prefix":"/flaky","method":"GET","status":503,"count":1})),
        )
        .await;
    assert_eq!(r.status, 201);
    let raw = s
        .http
        .get(format!("{}/flaky", s.emu.s3_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 503);
    s3.list_objects_v2().bucket("flaky").send().await.unwrap();

    // Keys of a disabled user stop working.
    let u = s
        .post(
            "/org/users",
            &t,
            json!({"uniqueName":"user/d","memberOf":[]}),
        )
        .await
        .assert_ok(201);
    let uid = u.data()["id"].as_str().unwrap().to_owned();
    let g = s
        .post("/org/groups", &t, json!({"uniqueName":"group/all","policies":{"s3":{"Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}}}))
        .await
        .assert_ok(201);
    let gid = g.data()["id"].as_str().unwrap().to_owned();
    let du = s.s3(&s.key(&t, &uid).await);
    assert_eq!(
        s3_code(du.list_objects_v2().bucket("flaky").send().await),
        "AccessDenied",
        "no group yet"
    );
    s.put(&format!("/org/users/{uid}"), &t, json!({"memberOf":[gid]}))
        .await
        .assert_ok(200);
    du.list_objects_v2().bucket("flaky").send().await.unwrap();
    s.put(
        &format!("/org/users/{uid}"),
        &t,
        json!({"memberOf":[gid],"disable":true}),
    )
    .await
    .assert_ok(200);
    assert_eq!(
        s3_code(du.list_objects_v2().bucket("flaky").send().await),
        "AccessDenied"
    );
}

#[tokio::test]
async fn expired_keys_stop_working() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "expiring").await;
    let expires = std::time::SystemTime::now() + Duration::from_secs(2);
    let r = s
        .post(
            "/org/users/current-user/s3-access-keys",
            &t,
            json!({"expires": humantime_rfc3339(expires)}),
        )
        .await
        .assert_ok(201);
    let key = (
        r.data()["accessKey"].as_str().unwrap().to_owned(),
        r.data()["secretAccessKey"].as_str().unwrap().to_owned(),
    );
    let s3 = s.s3(&key);
    s3.list_objects_v2()
        .bucket("expiring")
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        s3_code(s3.list_objects_v2().bucket("expiring").send().await),
        "InvalidAccessKeyId"
    );
    // Expired keys are removed from the listing.
    let l = s
        .get("/org/users/current-user/s3-access-keys", &t)
        .await
        .assert_ok(200);
    assert_eq!(l.data(), &json!([]));
}

fn humantime_rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[tokio::test]
async fn prefix_scoped_policy_with_encoded_keys() {
    let s = Stack::start().await;
    let grid = s.grid_token().await;
    let (_, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "prefixed").await;
    let root = s.s3(&s.key(&t, "current-user").await);
    let odd = "dir/with space/ü+x=y.txt";
    root.put_object()
        .bucket("prefixed")
        .key(odd)
        .body(b"odd".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(body_of(&root, "prefixed", odd).await, b"odd");
    root.put_object()
        .bucket("prefixed")
        .key("other/x")
        .body(b"o".to_vec().into())
        .send()
        .await
        .unwrap();

    let g = s
        .post(
            "/org/groups",
            &t,
            json!({"uniqueName":"group/dir","policies":{"s3":{"Statement":[
                {"Effect":"Allow","Action":"s3:Get*","Resource":"arn:aws:s3:::prefixed/dir/*"}]}}}),
        )
        .await
        .assert_ok(201);
    let u = s
        .post(
            "/org/users",
            &t,
            json!({"uniqueName":"user/dir","memberOf":[g.data()["id"]]}),
        )
        .await
        .assert_ok(201);
    let app = s.s3(&s.key(&t, u.data()["id"].as_str().unwrap()).await);
    assert_eq!(body_of(&app, "prefixed", odd).await, b"odd");
    assert_eq!(
        s3_code(
            app.get_object()
                .bucket("prefixed")
                .key("other/x")
                .send()
                .await
        ),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(app.list_objects_v2().bucket("prefixed").send().await),
        "AccessDenied"
    );
    assert_eq!(
        s3_code(app.delete_object().bucket("prefixed").key(odd).send().await),
        "AccessDenied"
    );
}

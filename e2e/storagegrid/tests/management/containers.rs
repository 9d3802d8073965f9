//! Tenant API: containers, versioning, object lock, usage, quota and the server-side drain.

use super::*;

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
    // A bucket never versioned is counted from its objects.
    assert_eq!(s.bucket_usage(&t, "half").await, (30, 30));
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

/// A moto that accepts every connection and closes it after `after` without an answer.
async fn moto_that_never_answers(after: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                drop(stream);
            });
        }
    });
    url
}

#[tokio::test]
async fn a_create_whose_client_went_away_is_carried_out_to_its_end() {
    // The client gives up while the grid waits on moto (a keeper SIGKILLed mid-request): the
    // grid still finishes the request, here by releasing the name moto never created a bucket
    // for, instead of keeping it reserved for good.
    let moto = moto_that_never_answers(Duration::from_millis(300)).await;
    let s = Stack::start_with(|cfg| cfg.moto_endpoint = moto).await;
    let grid = s.grid_token().await;
    let (_, tenant) = s.tenant(&grid, "t").await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let gave_up = impatient
        .post(s.api("/org/containers"))
        .bearer_auth(&tenant)
        .json(&json!({"name": "half-made", "region": "us-east-1"}))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client gave up: {gave_up:?}");
    let released = eventually(Duration::from_secs(5), || async {
        let listed = s.get("/org/containers", &tenant).await.assert_ok(200);
        listed.data().as_array().unwrap().is_empty().then_some(())
    })
    .await;
    assert!(released.is_some(), "the name stays reserved");
}

//! Views: events (both APIs), the request log, tables, OpenAPI, metadata-only clients.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_recorder_and_two_views() {
    let env = Env::new().await;
    env.install_crd().await;
    let client = env.client().await;
    let ar = s3_api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let b = api
        .create(
            &PostParams::default(),
            &bucket("ev", json!({"tenantRef": {"name": "t"}})),
        )
        .await
        .unwrap();
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("keeper.dev/v1alpha1".into()),
        kind: Some("S3Bucket".into()),
        name: b.metadata.name.clone(),
        namespace: Some("default".into()),
        uid: b.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "keeper".into(),
            instance: Some("keeper-0".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Created".into(),
        note: Some("bucket created".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!(
        "involvedObject.name=ev,involvedObject.kind=S3Bucket,involvedObject.uid={}",
        b.metadata.uid.clone().unwrap()
    ));
    let list = core.list(&lp).await.unwrap();
    assert_eq!(list.items.len(), 1, "{:?}", list.items);
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("bucket created"));
    assert_eq!(e.reason.as_deref(), Some("Created"));
    assert_eq!(e.count, Some(2));
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("keeper")
    );
    assert_eq!(e.reporting_component.as_deref(), Some("keeper"));
    assert!(e.last_timestamp.is_some());
    assert_eq!(
        core.list(&ListParams::default().fields("involvedObject.name=other"))
            .await
            .unwrap()
            .items
            .len(),
        0
    );
    assert_eq!(
        core.list(&ListParams::default().fields("reason=Created,type=Normal"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let err = api_err(
        core.list(&ListParams::default().fields("bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 400);
    // A core/v1 event reads back through events.k8s.io/v1.
    let e: CoreEvent = serde_json::from_value(json!({"metadata": {"name": "core.1"}, "involvedObject": {"kind": "S3Bucket", "name": "ev", "namespace": "default"},
        "reason": "Old", "message": "from core", "type": "Warning", "count": 3, "source": {"component": "legacy"},
        "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:05:00Z"}))
    .unwrap();
    core.create(&PostParams::default(), &e).await.unwrap();
    let (code, _, v1) = env
        .raw(
            "GET",
            "/apis/events.k8s.io/v1/namespaces/default/events/core.1",
            None,
            None,
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
    assert_eq!(v1["note"], "from core");
    assert_eq!(v1["regarding"]["name"], "ev");
    assert_eq!(v1["deprecatedCount"], 3);
    assert_eq!(v1["reportingController"], "legacy");
    assert_eq!(v1["deprecatedLastTimestamp"], "2024-01-01T00:05:00Z");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_log_tables_and_openapi() {
    let env = Env::new().await;
    env.install_crd().await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client().await, "default", &s3_api_resource());
    env.raw("DELETE", "/debug/requests", None, None).await;
    api.create(
        &PostParams::default(),
        &bucket("t1", json!({"tenantRef": {"name": "t"}})),
    )
    .await
    .unwrap();
    api.get("t1").await.unwrap();
    let _ = api.get("missing").await;
    let (_, _, log) = env.raw("GET", "/debug/requests", None, None).await;
    let reqs = log["requests"].as_array().unwrap();
    let summary: Vec<(String, String, u64)> = reqs
        .iter()
        .map(|r| {
            (
                r["verb"].as_str().unwrap().to_string(),
                r["name"].as_str().unwrap().to_string(),
                r["code"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("create".into(), "".into(), 201),
            ("get".into(), "t1".into(), 200),
            ("get".into(), "missing".into(), 404)
        ]
    );
    assert_eq!(reqs[0]["resource"], "s3buckets");
    assert_eq!(reqs[0]["namespace"], "default");
    assert!(reqs[0]["userAgent"].is_string(), "{}", reqs[0]);
    // Status patch for a printer column, then a Table.
    api.patch_status("t1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Ready", "bucketName": "bkt", "conditions": [{"type": "Ready", "status": "True"}]}})))
        .await
        .unwrap();
    let (code, _, t) = env
        .raw_accept(
            "GET",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            None,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Phase", "Bucket", "Ready", "Age"]);
    assert_eq!(t["rows"][0]["cells"][0], "t1");
    assert_eq!(t["rows"][0]["cells"][1], "Ready");
    assert_eq!(t["rows"][0]["cells"][2], "bkt");
    assert_eq!(t["rows"][0]["cells"][3], "True");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let (_, _, t) = env
        .raw_accept(
            "GET",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets?includeObject=Object",
            None,
            None,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .await;
    assert_eq!(t["rows"][0]["object"]["spec"]["tenantRef"]["name"], "t");
    let (_, _, t) = env
        .raw_accept(
            "GET",
            "/api/v1/namespaces",
            None,
            None,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .await;
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Status", "Age"]);
    // OpenAPI v3 index and a CRD document.
    let (_, _, idx) = env.raw("GET", "/openapi/v3", None, None).await;
    let url = idx["paths"]["apis/keeper.dev/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(idx["paths"]["api/v1"]["serverRelativeURL"].is_string());
    let (code, _, doc) = env.raw("GET", &url, None, None).await;
    assert_eq!(code, 200);
    let s = &doc["components"]["schemas"]["dev.keeper.v1alpha1.S3Bucket"];
    assert_eq!(s["x-kubernetes-group-version-kind"][0]["kind"], "S3Bucket");
    assert_eq!(
        s["properties"]["spec"]["properties"]["bucketName"]["type"],
        "string"
    );
    assert_eq!(code, 200);
    let (code, _, v2) = env.raw("GET", "/openapi/v2", None, None).await;
    assert_eq!(code, 200);
    assert_eq!(
        v2["definitions"],
        json!({}),
        "OpenAPI v2 carries no schemas"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_clients() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(&PostParams::default(), &cm("m1", json!({"a": "b"})))
        .await
        .unwrap();
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.labels.as_ref().unwrap()["a"], "b");
    let one = api.get_metadata("m1").await.unwrap();
    assert_eq!(one.metadata.name.as_deref(), Some("m1"));
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(env.client().await, "default");
    let w = kube::runtime::watcher(meta_api, kube::runtime::watcher::Config::default());
    let mut objs = Box::pin(kube::runtime::WatchStreamExt::applied_objects(w));
    let first = tokio::time::timeout(Duration::from_secs(5), objs.try_next())
        .await
        .expect("applied")
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("m1"));
    api.create(&PostParams::default(), &cm("m2", json!({})))
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), objs.try_next())
        .await
        .expect("applied")
        .unwrap()
        .unwrap();
    assert_eq!(second.metadata.name.as_deref(), Some("m2"));
    env.stop().await;
}

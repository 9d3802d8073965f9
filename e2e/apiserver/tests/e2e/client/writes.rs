//! Writes: optimistic concurrency, JSON patch, the status subresource, server-side apply, dry run.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_update_gets_409_conflict() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    let created = api
        .create(&PostParams::default(), &cm("c1", json!({})))
        .await
        .unwrap();
    let rv1 = created.metadata.resource_version.clone().unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let mut first = created.clone();
    first.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = api
        .replace("c1", &PostParams::default(), &first)
        .await
        .unwrap();
    let rv2 = updated.metadata.resource_version.clone().unwrap();
    assert!(rv2.parse::<u64>().unwrap() > rv1.parse::<u64>().unwrap());
    let mut stale = created.clone();
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    let err = api_err(
        api.replace("c1", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "Conflict");
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );
    // A body with another object's uid is a failed precondition.
    let mut other = api.get("c1").await.unwrap();
    other.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let err = api_err(
        api.replace("c1", &PostParams::default(), &other)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert!(
        err.message
            .contains("Precondition failed: UID in precondition"),
        "{}",
        err.message
    );
    // A duplicate create is AlreadyExists, a missing object NotFound.
    let err = api_err(
        api.create(&PostParams::default(), &cm("c1", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    let err = api_err(api.get("nope").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "configmaps \"nope\" not found");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_test_failure_and_bad_patches() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(&PostParams::default(), &cm("p", json!({"a": "1"})))
        .await
        .unwrap();
    let ok: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"}
    ]))
    .unwrap();
    let got = api
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(ok))
        .await
        .unwrap();
    assert_eq!(got.data.unwrap()["k"], "w");
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "nope"},
        {"op": "replace", "path": "/data/k", "value": "z"}
    ]))
    .unwrap();
    let err = api_err(
        api.patch("p", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422, "{err:?}");
    assert_eq!(
        api.get("p").await.unwrap().data.unwrap()["k"],
        "w",
        "failed patch must not apply"
    );
    // Strategic merge patch on a built-in, JSON merge patch on anything.
    let (code, _, body) = env
        .raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/p",
            Some("application/strategic-merge-patch+json"),
            Some(json!({"metadata": {"labels": {"x": "1"}}, "data": {"k": null}})),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"], json!({}));
    assert_eq!(body["metadata"]["labels"], json!({"a": "1", "x": "1"}));
    let (code, _, body) = env
        .raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/p",
            Some("text/plain"),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_subresource_split_and_generation() {
    let env = Env::new().await;
    env.install_crd().await;
    let ar = s3_api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(env.client().await, "default", &ar);
    let mut b = bucket("b1", json!({"tenantRef": {"name": "t"}}));
    b.data["status"] = json!({"phase": "Bogus"});
    let created = api.create(&PostParams::default(), &b).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create: {:?}",
        created.data
    );
    // Status through /status only changes status.
    let st = api
        .patch_status(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versioning": true}, "status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Ready");
    assert_eq!(st.data["spec"]["versioning"], false);
    assert_eq!(st.metadata.generation, Some(1));
    // The main endpoint ignores status; metadata changes don't bump generation.
    let m = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Nope"}})),
        )
        .await
        .unwrap();
    assert_eq!(m.data["status"]["phase"], "Ready");
    assert_eq!(m.metadata.generation, Some(1));
    let s = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versioning": true}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(2));
    assert_eq!(s.data["spec"]["versioning"], true);
    // A no-op patch does not change the resourceVersion.
    let again = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versioning": true}})),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, s.metadata.resource_version);
    // Server-side apply of status (kube-rs controllers do this): two managers, conditions merged by type.
    let apply = |c: Value| json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "status": {"conditions": [c]}});
    api.patch_status(
        "b1",
        &PatchParams::apply("keeper").force(),
        &Patch::Apply(apply(json!({"type": "Ready", "status": "True"}))),
    )
    .await
    .unwrap();
    let got = api
        .patch_status(
            "b1",
            &PatchParams::apply("keeper-sync").force(),
            &Patch::Apply(apply(json!({"type": "Synced", "status": "False"}))),
        )
        .await
        .unwrap();
    let types: Vec<&str> = got.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["Ready", "Synced"]);
    assert_eq!(got.metadata.generation, Some(2));
    // PUT on a custom resource needs a resourceVersion.
    let mut no_rv = got.clone();
    no_rv.metadata.resource_version = None;
    let err = api_err(
        api.replace("b1", &PostParams::default(), &no_rv)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_and_merges() {
    let env = Env::new().await;
    env.install_crd().await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client().await, "default", &s3_api_resource());
    let pp = PatchParams::apply("keeper-test");
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa", "labels": {"a": "1"}}, "spec": {"tenantRef": {"name": "t"}}});
    let created = api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.data["spec"]["deletionPolicy"], "Delete");
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa", "labels": {"a": "1", "b": "2"}}, "spec": {"tenantRef": {"name": "t"}, "deletionPolicy": "Retain"}});
    let merged = api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    assert_eq!(merged.data["spec"]["tenantRef"]["name"], "t");
    assert_eq!(merged.data["spec"]["deletionPolicy"], "Retain");
    assert_eq!(merged.metadata.labels.unwrap().len(), 2);
    assert_eq!(merged.metadata.generation, Some(2));
    // Fields this manager applied before but no longer applies are removed; others' fields stay.
    api.patch(
        "ssa",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"other": "x"}}})),
    )
    .await
    .unwrap();
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa", "labels": {"a": "1"}},
        "spec": {"tenantRef": {"name": "t"}, "bucketName": "ssa-bucket"}});
    api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa"}, "spec": {"tenantRef": {"name": "t"}}});
    let pruned = api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    let labels = pruned.metadata.labels.clone().unwrap_or_default();
    assert!(
        !labels.contains_key("a") && labels.contains_key("other"),
        "{labels:?}"
    );
    assert!(
        pruned.data["spec"].get("bucketName").is_none(),
        "{}",
        pruned.data
    );
    // Status conditions applied by a controller: a dropped condition goes away.
    let cond = |types: &[&str]| {
        let c: Vec<Value> = types
            .iter()
            .map(|t| json!({"type": t, "status": "True"}))
            .collect();
        json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "status": {"conditions": c}})
    };
    let spp = PatchParams::apply("keeper").force();
    api.patch_status("ssa", &spp, &Patch::Apply(cond(&["Ready", "Synced"])))
        .await
        .unwrap();
    let got = api
        .patch_status("ssa", &spp, &Patch::Apply(cond(&["Ready"])))
        .await
        .unwrap();
    assert_eq!(
        got.data["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    // Missing fieldManager is refused.
    let (code, _, _) = env
        .raw(
            "PATCH",
            &bucket_path("default", "ssa"),
            Some("application/apply-patch+yaml"),
            Some(json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket"})),
        )
        .await;
    assert_eq!(code, 422);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let got = api.create(&dry, &cm("dry", json!({}))).await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("dry"));
    assert!(api.get_opt("dry").await.unwrap().is_none());
    api.create(&PostParams::default(), &cm("real", json!({})))
        .await
        .unwrap();
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let got = api
        .patch(
            "real",
            &pp,
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        )
        .await
        .unwrap();
    assert_eq!(got.data.unwrap()["k"], "changed");
    assert_eq!(api.get("real").await.unwrap().data.unwrap()["k"], "v");
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete("real", &dp).await.unwrap();
    assert!(api.get_opt("real").await.unwrap().is_some());
    env.stop().await;
}

//! Objects: CRD schema validation, defaulting and pruning; selectors, pagination, generateName.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_validation_defaulting_and_pruning() {
    let env = Env::new().await;
    env.install_crd().await;
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "bad"},
        "spec": {"tenantRef": {}, "bucketName": "X", "deletionPolicy": "Keep", "quotaGiB": 0, "versioning": "yes"}});
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(st["details"]["kind"], "S3Bucket");
    assert_eq!(st["details"]["group"], "keeper.dev");
    let causes = st["details"]["causes"].as_array().unwrap();
    let find = |f: &str| {
        causes
            .iter()
            .find(|c| c["field"] == f)
            .unwrap_or_else(|| panic!("no cause for {f}: {st}"))
            .clone()
    };
    assert_eq!(find("spec.tenantRef.name")["reason"], "FieldValueRequired");
    assert_eq!(
        find("spec.deletionPolicy")["reason"],
        "FieldValueNotSupported"
    );
    assert_eq!(
        find("spec.deletionPolicy")["message"],
        "Unsupported value: \"Keep\": supported values: \"Delete\", \"Retain\""
    );
    assert_eq!(find("spec.bucketName")["reason"], "FieldValueInvalid");
    assert_eq!(
        find("spec.quotaGiB")["message"],
        "Invalid value: 0: spec.quotaGiB in body should be greater than or equal to 1"
    );
    assert_eq!(find("spec.versioning")["reason"], "FieldValueTypeInvalid");
    let msg = st["message"].as_str().unwrap();
    assert!(
        msg.starts_with("S3Bucket.keeper.dev \"bad\" is invalid: ["),
        "{msg}"
    );
    assert!(msg.contains("spec.bucketName: Invalid value: \"X\": spec.bucketName in body should match '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'"), "{msg}");
    // Single error: no brackets.
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "b"}, "spec": {"tenantRef": {"name": "t"}, "bucketName": "X"}});
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        st["message"],
        "S3Bucket.keeper.dev \"b\" is invalid: spec.bucketName: Invalid value: \"X\": spec.bucketName in body should match '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'"
    );
    // Defaults applied, unknown fields pruned (with a warning), preserved subtrees kept, int-or-string.
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ok"},
        "spec": {"tenantRef": {"name": "t", "junk": 1}, "unknown": true, "extra": {"free": {"form": 1}}, "size": "10Gi"}});
    let (code, warnings, obj) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body.clone()),
        )
        .await;
    assert_eq!(code, 201, "{obj}");
    assert_eq!(
        obj["spec"],
        json!({"tenantRef": {"name": "t"}, "extra": {"free": {"form": 1}}, "size": "10Gi", "versioning": false, "deletionPolicy": "Delete"})
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("unknown field \\\"spec.unknown\\\"")),
        "{warnings:?}"
    );
    // fieldValidation=Strict rejects unknown fields instead.
    let mut strict = body.clone();
    strict["metadata"]["name"] = json!("strict");
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets?fieldValidation=Strict",
            None,
            Some(strict),
        )
        .await;
    assert_eq!(code, 400);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.tenantRef.junk\""),
        "{st}"
    );
    // Name validation.
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "Bad_Name"}, "spec": {"tenantRef": {"name": "t"}}});
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_pagination_and_generate_name() {
    let env = Env::new().await;
    let client = env.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "web", "tier": "back"})),
        ("c", json!({"app": "db"})),
        ("d", json!({})),
    ] {
        api.create(&PostParams::default(), &cm(name, labels))
            .await
            .unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    for (sel, want) in [
        ("app=web", vec!["a", "b"]),
        ("app==web,tier!=back", vec!["a"]),
        ("app in (web,db)", vec!["a", "b", "c"]),
        ("app notin (web)", vec!["c", "d"]),
        ("tier", vec!["a", "b"]),
        ("!app", vec!["d"]),
    ] {
        assert_eq!(
            names(api.list(&ListParams::default().labels(sel)).await.unwrap()),
            want,
            "selector {sel}"
        );
    }
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=c"))
                .await
                .unwrap()
        ),
        vec!["c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name!=c,metadata.namespace=default"))
                .await
                .unwrap()
        ),
        vec!["a", "b", "d"]
    );
    // Pagination.
    let p1 = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(p1.metadata.remaining_item_count, Some(1));
    let token = p1.metadata.continue_.clone().unwrap();
    let p2 = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(p1), vec!["a", "b", "c"]);
    assert!(p2.metadata.continue_.as_deref().unwrap_or("").is_empty());
    assert_eq!(names(p2), vec!["d"]);
    // Cluster-wide list and generateName.
    let mut g = cm("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let created = api.create(&PostParams::default(), &g).await.unwrap();
    assert!(created.metadata.name.unwrap().starts_with("gen-"));
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        5
    );
    // deletecollection with a selector.
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=web"),
    )
    .await
    .unwrap();
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app"))
                .await
                .unwrap()
        ),
        vec!["c"]
    );
    env.stop().await;
}

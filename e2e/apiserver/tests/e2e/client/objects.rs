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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_follow_label_changes_across_namespaces_and_pages() {
    let env = Env::new().await;
    let client = env.client().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
    )
    .await
    .unwrap();
    let here: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let there: Api<ConfigMap> = Api::namespaced(client.clone(), "other");
    let all: Api<ConfigMap> = Api::all(client.clone());
    here.create(&PostParams::default(), &cm("a", json!({"app": "web"})))
        .await
        .unwrap();
    there
        .create(&PostParams::default(), &cm("b", json!({"app": "web"})))
        .await
        .unwrap();
    here.create(&PostParams::default(), &cm("c", json!({"app": "db"})))
        .await
        .unwrap();
    let found = async |api: &Api<ConfigMap>, lp: ListParams| {
        api.list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.unwrap(),
                    c.metadata.name.unwrap()
                )
            })
            .collect::<Vec<_>>()
    };
    let labels = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        found(&all, labels("app=web")).await,
        ["default/a", "other/b"]
    );
    assert_eq!(found(&there, labels("app=web")).await, ["other/b"]);
    assert_eq!(found(&all, labels("app in (db)")).await, ["default/c"]);
    // A label that changes or goes moves the object between selections.
    here.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    here.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": null}})),
    )
    .await
    .unwrap();
    assert_eq!(found(&all, labels("app=web")).await, ["other/b"]);
    assert_eq!(found(&here, labels("app=db")).await, ["default/a"]);
    assert_eq!(
        found(&all, labels("app=db,app!=db")).await,
        Vec::<String>::new()
    );
    assert_eq!(found(&all, labels("app=none")).await, Vec::<String>::new());
    // Field selectors on a cluster-wide list.
    assert_eq!(
        found(&all, ListParams::default().fields("metadata.name=b")).await,
        ["other/b"]
    );
    assert_eq!(
        found(
            &all,
            ListParams::default().fields("metadata.namespace=other,metadata.name=b")
        )
        .await,
        ["other/b"]
    );
    assert_eq!(
        found(&here, ListParams::default().fields("metadata.name=b")).await,
        Vec::<String>::new()
    );
    // Pages of a label selection.
    for i in 1..=5 {
        let ns = if i % 2 == 0 { &there } else { &here };
        ns.create(
            &PostParams::default(),
            &cm(&format!("p{i}"), json!({"page": "yes"})),
        )
        .await
        .unwrap();
    }
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = labels("page=yes").limit(2);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = all.list(&lp).await.unwrap();
        pages.push(
            page.items
                .iter()
                .map(|c| c.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
                .join(","),
        );
        if pages.len() == 1 {
            assert_eq!(page.metadata.remaining_item_count, Some(3));
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, ["p1,p3", "p5,p2", "p4"]);
    env.stop().await;
}

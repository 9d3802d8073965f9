//! What managedFields records: per manager, operation and subresource, for creates, updates,
//! patches and applies; what clients may write there themselves.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_fields_per_manager_operation_and_subresource() {
    let env = Env::new().await;
    env.install_crd().await;
    let path = bucket_path("default", "b");
    let bucket = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
        "metadata": {"name": "b"}, "spec": {"tenantRef": {"name": "t"}}});
    // A create owns what it set, defaults included (kube defaults while decoding).
    let created = env
        .ok(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets?fieldManager=creator",
            None,
            bucket,
        )
        .await;
    assert_eq!(
        created["metadata"]["managedFields"],
        json!([{"manager": "creator", "operation": "Update", "apiVersion": "keeper.dev/v1alpha1",
            "time": created["metadata"]["managedFields"][0]["time"], "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {".": {}, "f:deletionPolicy": {}, "f:tenantRef": {".": {}, "f:name": {}},
                "f:versioning": {}}}}])
    );
    assert!(
        created["metadata"]["managedFields"][0]["time"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{created}"
    );
    // A merge patch of a label; a status update; an apply, of spec and of status.
    env.ok(
        "PATCH",
        &format!("{path}?fieldManager=labeler"),
        Some("application/merge-patch+json"),
        json!({"metadata": {"labels": {"team": "a"}}}),
    )
    .await;
    env.ok(
        "PATCH",
        &format!("{path}/status?fieldManager=ctrl"),
        Some("application/merge-patch+json"),
        json!({"status": {"phase": "Ready"}}),
    )
    .await;
    let (code, got) = env
        .apply_as(
            &path,
            "ctrl",
            false,
            json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "b"},
                "spec": {"bucketName": "bkt"}}),
        )
        .await;
    assert_eq!(code, 200, "{got}");
    let (code, got) = env
        .apply_as(
            &format!("{path}/status"),
            "ctrl",
            false,
            json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "b"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .await;
    assert_eq!(code, 200, "{got}");
    let s = |m: &str, o: &str, sub: &str| (m.to_string(), o.to_string(), sub.to_string());
    // Appliers first, then updaters (by time); the same name is another manager per
    // operation and per subresource.
    let all = managers(&got);
    assert_eq!(
        all[..2],
        [s("ctrl", "Apply", ""), s("ctrl", "Apply", "status")]
    );
    let mut updaters = all[2..].to_vec();
    updaters.sort();
    assert_eq!(
        updaters,
        vec![
            s("creator", "Update", ""),
            s("ctrl", "Update", "status"),
            s("labeler", "Update", "")
        ]
    );
    assert_eq!(
        fields(&got, "labeler", "Update"),
        json!({"f:metadata": {"f:labels": {".": {}, "f:team": {}}}})
    );
    assert_eq!(
        fields(&got, "ctrl", "Apply")["f:spec"],
        json!({"f:bucketName": {}})
    );
    let status_apply = got["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["manager"] == "ctrl" && e["subresource"] == "status" && e["operation"] == "Apply"
        })
        .unwrap();
    assert_eq!(
        status_apply["fieldsV1"],
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
    );
    let status_update = got["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["subresource"] == "status" && e["operation"] == "Update")
        .unwrap();
    assert_eq!(
        status_update["fieldsV1"],
        json!({"f:status": {".": {}, "f:phase": {}}})
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_take_the_fields_they_change_and_keep_theirs() {
    let env = Env::new().await;
    let path = cm_path("u");
    let (code, _) = env
        .apply_as(
            &path,
            "applier",
            false,
            cm("u", json!({"a": "1", "b": "1"})),
        )
        .await;
    assert_eq!(code, 201);
    for patch in [json!({"data": {"a": "2"}}), json!({"data": {"c": "3"}})] {
        env.ok(
            "PATCH",
            &format!("{path}?fieldManager=editor"),
            Some("application/merge-patch+json"),
            patch,
        )
        .await;
    }
    // A PUT that changes nothing takes nothing.
    let mut same = env.get_obj(&path).await;
    same["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    let got = env
        .ok("PUT", &format!("{path}?fieldManager=idle"), None, same)
        .await;
    assert_eq!(
        managers(&got)
            .into_iter()
            .map(|(m, o, _)| format!("{m}/{o}"))
            .collect::<Vec<_>>(),
        vec!["applier/Apply", "editor/Update"]
    );
    assert_eq!(
        fields(&got, "applier", "Apply"),
        json!({"f:data": {"f:b": {}}})
    );
    assert_eq!(
        fields(&got, "editor", "Update"),
        json!({"f:data": {"f:a": {}, "f:c": {}}})
    );
    // The applier no longer owns `a`: applying without it leaves it (the editor's) alone.
    let (code, got) = env
        .apply_as(&path, "applier", false, cm("u", json!({"b": "1"})))
        .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["data"], json!({"a": "2", "b": "1", "c": "3"}));
    // The same name updating is another manager than when it applies.
    let got = env
        .ok(
            "PATCH",
            &format!("{path}?fieldManager=applier"),
            Some("application/merge-patch+json"),
            json!({"data": {"e": "5"}}),
        )
        .await;
    assert_eq!(
        fields(&got, "applier", "Apply"),
        json!({"f:data": {"f:b": {}}})
    );
    assert_eq!(
        fields(&got, "applier", "Update"),
        json!({"f:data": {"f:e": {}}})
    );
    // Without fieldManager the manager is the User-Agent up to its first slash.
    let (code, got) = env
        .raw_with_agent(
            "PATCH",
            &path,
            "my-tool/1.2 (linux)",
            json!({"data": {"d": "4"}}),
        )
        .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        fields(&got, "my-tool", "Update"),
        json!({"f:data": {"f:d": {}}})
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_entries_beyond_ten_merge_into_ancient_changes() {
    let env = Env::new().await;
    let path = cm_path("many");
    env.apply_as(&path, "applier", false, cm("many", json!({"k": "v"})))
        .await;
    let mut got = Value::Null;
    for i in 0..12 {
        got = env
            .ok(
                "PATCH",
                &format!("{path}?fieldManager=updater{i:02}"),
                Some("application/merge-patch+json"),
                json!({"metadata": {"labels": {format!("l{i}"): "x"}}}),
            )
            .await;
    }
    let names: Vec<String> = managers(&got).into_iter().map(|(m, ..)| m).collect();
    assert_eq!(names.len(), 11, "{names:?}");
    assert_eq!(names[0], "applier");
    assert!(names.contains(&"ancient-changes".to_string()), "{names:?}");
    assert!(!names.contains(&"updater00".to_string()), "{names:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_may_replace_or_clear_managed_fields() {
    let env = Env::new().await;
    let path = cm_path("mf");
    env.create_cm("creator", "mf", json!({"k": "v"})).await;
    // Entries that do not decode (an unknown operation) are ignored: the live ones stay.
    let mut obj = env.get_obj(&path).await;
    obj["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Patch",
        "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
    let got = env.ok("PUT", &path, None, obj).await;
    assert_eq!(
        managers(&got),
        vec![("creator".into(), "Update".into(), String::new())]
    );
    // Valid entries replace them.
    let mut obj = got.clone();
    obj["metadata"]["managedFields"] = json!([{"manager": "someone", "operation": "Apply",
        "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}]);
    let got = env.ok("PUT", &path, None, obj).await;
    assert_eq!(
        managers(&got),
        vec![("someone".into(), "Apply".into(), String::new())]
    );
    // An empty list clears them, and later updates record nothing ...
    let got = env
        .ok(
            "PATCH",
            &path,
            Some("application/merge-patch+json"),
            json!({"metadata": {"managedFields": []}}),
        )
        .await;
    assert!(got["metadata"].get("managedFields").is_none(), "{got}");
    let got = env
        .ok(
            "PATCH",
            &format!("{path}?fieldManager=editor"),
            Some("application/merge-patch+json"),
            json!({"data": {"k": "w"}}),
        )
        .await;
    assert!(got["metadata"].get("managedFields").is_none(), "{got}");
    // ... until an apply, which gives what was there to `before-first-apply`.
    let (code, got) = env
        .apply_as(&path, "applier", false, cm("mf", json!({"n": "1"})))
        .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        fields(&got, "before-first-apply", "Update"),
        json!({"f:data": {".": {}, "f:k": {}}})
    );
    // A list of one empty entry clears them too.
    let got = env
        .ok(
            "PATCH",
            &path,
            Some("application/json-patch+json"),
            json!([{"op": "replace", "path": "/metadata/managedFields", "value": [{}]}]),
        )
        .await;
    assert!(got["metadata"].get("managedFields").is_none(), "{got}");
    // An apply may not carry managedFields.
    let mut config = cm("mf", json!({}));
    config["metadata"]["managedFields"] = json!([]);
    let (code, body) = env.apply_as(&path, "applier", false, config).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["message"], "metadata.managedFields must be nil");
    env.stop().await;
}

//! Server-side apply against other managers: conflicts, forcing, co-ownership, and removal of
//! what a manager stops applying.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_apply_gets_409_with_kubes_message_and_causes() {
    let env = Env::new().await;
    let path = cm_path("c");
    env.create_cm(
        "kubectl-client-side-apply",
        "c",
        json!({"foo": "bar", "other": "x"}),
    )
    .await;
    let before = env.get_obj(&path).await;
    let (code, body) = env
        .apply_as(&path, "keeper", false, cm("c", json!({"foo": "baz"})))
        .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["reason"], "Conflict");
    assert_eq!(
        body["message"],
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.foo"#
    );
    assert_eq!(
        body["details"],
        json!({"causes": [{"reason": "FieldManagerConflict",
            "message": "conflict with \"kubectl-client-side-apply\" using v1", "field": ".data.foo"}]})
    );
    assert_eq!(
        env.get_obj(&path).await,
        before,
        "a refused apply changes nothing"
    );
    // Several fields of several managers: grouped by manager in the message.
    env.apply_as(&path, "ctrl", false, cm("c", json!({"extra": "1"})))
        .await;
    let (code, body) = env
        .apply_as(
            &path,
            "keeper",
            false,
            cm("c", json!({"foo": "1", "other": "2", "extra": "3"})),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(
        body["message"],
        "Apply failed with 3 conflicts: conflicts with \"ctrl\":\n- .data.extra\n\
         conflicts with \"kubectl-client-side-apply\" using v1:\n- .data.foo\n- .data.other"
    );
    let fields = causes(&body, "field");
    assert_eq!(fields, vec![".data.extra", ".data.foo", ".data.other"]);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_takes_ownership_and_equal_values_are_shared() {
    let env = Env::new().await;
    let path = cm_path("f");
    env.create_cm("creator", "f", json!({"foo": "bar", "same": "s"}))
        .await;
    // Applying the value another manager owns makes both owners, without a conflict.
    let (code, got) = env
        .apply_as(&path, "a", false, cm("f", json!({"same": "s"})))
        .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        fields(&got, "a", "Apply"),
        json!({"f:data": {"f:same": {}}})
    );
    assert_eq!(
        fields(&got, "creator", "Update"),
        json!({"f:data": {".": {}, "f:foo": {}, "f:same": {}}})
    );
    // A change to a shared field conflicts with every other owner.
    let (code, body) = env
        .apply_as(&path, "b", false, cm("f", json!({"same": "t"})))
        .await;
    assert_eq!(code, 409);
    let who = causes(&body, "message");
    assert_eq!(
        who,
        vec!["conflict with \"a\"", "conflict with \"creator\" using v1"]
    );
    // Forced, the applier takes the field over from everyone.
    let (code, got) = env
        .apply_as(
            &path,
            "b",
            true,
            cm("f", json!({"same": "t", "foo": "baz"})),
        )
        .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["data"], json!({"foo": "baz", "same": "t"}));
    assert_eq!(
        fields(&got, "b", "Apply"),
        json!({"f:data": {"f:foo": {}, "f:same": {}}})
    );
    assert_eq!(fields(&got, "creator", "Update"), json!({"f:data": {}}));
    assert!(
        !managers(&got).iter().any(|(m, ..)| m == "a"),
        "a manager left with no fields is dropped: {got}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_an_applier_stops_applying_go_unless_someone_else_owns_them() {
    let env = Env::new().await;
    let path = cm_path("r");
    let labeled = |labels: Value, data: Value| {
        let mut c = cm("r", data);
        c["metadata"]["labels"] = labels;
        c
    };
    env.apply_as(
        &path,
        "a",
        false,
        labeled(json!({"mine": "1", "shared": "1"}), json!({"k": "v"})),
    )
    .await;
    env.apply_as(
        &path,
        "b",
        false,
        labeled(json!({"shared": "1"}), json!({})),
    )
    .await;
    // An update takes `k` (it changes it); an update adds `theirs`.
    env.ok(
        "PATCH",
        &format!("{path}?fieldManager=editor"),
        Some("application/merge-patch+json"),
        json!({"data": {"k": "w", "theirs": "t"}}),
    )
    .await;
    let nothing = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"}});
    let (code, got) = env.apply_as(&path, "a", false, nothing.clone()).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["metadata"]["labels"], json!({"shared": "1"}));
    assert_eq!(got["data"], json!({"k": "w", "theirs": "t"}));
    assert!(
        !managers(&got).iter().any(|(m, ..)| m == "a"),
        "an empty apply drops the manager: {got}"
    );
    // The last owner stops applying it: gone.
    let (code, got) = env.apply_as(&path, "b", false, nothing).await;
    assert_eq!(code, 200, "{got}");
    assert!(got["metadata"].get("labels").is_none(), "{got}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_items_follow_ownership_and_status_is_its_subresources() {
    let env = Env::new().await;
    env.install_crd().await;
    let path = bucket_path("default", "s");
    let status = |types: &[&str]| {
        let c: Vec<Value> = types
            .iter()
            .map(|t| json!({"type": t, "status": "True"}))
            .collect();
        json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "s"},
            "status": {"conditions": c}})
    };
    let mut spec = status(&[]);
    spec["spec"] = json!({"tenantRef": {"name": "t"}});
    // Status sent to the main resource is neither written nor owned.
    let (code, got) = env.apply_as(&path, "gitops", false, spec).await;
    assert_eq!(code, 201, "{got}");
    assert!(
        fields(&got, "gitops", "Apply").get("f:status").is_none(),
        "{got}"
    );
    let status_path = format!("{path}/status");
    env.apply_as(&status_path, "ready", false, status(&["Ready"]))
        .await;
    env.apply_as(&status_path, "synced", false, status(&["Synced", "Ready"]))
        .await;
    // `ready` drops Ready, which `synced` applies too: it stays; `synced` drops Synced: gone.
    env.apply_as(&status_path, "ready", false, status(&[]))
        .await;
    let (code, got) = env
        .apply_as(&status_path, "synced", false, status(&["Ready"]))
        .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        got["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    // Different values of a status condition conflict between status managers.
    let mut other = status(&["Ready"]);
    other["status"]["conditions"][0]["status"] = json!("False");
    let (code, body) = env.apply_as(&status_path, "other", false, other).await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(
        body["message"],
        r#"Apply failed with 1 conflict: conflict with "synced" with subresource "status": .status.conditions[type="Ready"].status"#
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_applies_and_force_on_other_patches_are_refused() {
    let env = Env::new().await;
    let path = cm_path("m");
    let mut wrong = cm("m", json!({}));
    wrong["apiVersion"] = json!("apps/v1");
    let (code, body) = env.apply_as(&path, "a", false, wrong).await;
    assert_eq!(
        (code, body["message"].as_str()),
        (400, Some("invalid object type: apps/v1, Kind=ConfigMap"))
    );
    env.apply_as(&path, "a", false, cm("m", json!({}))).await;
    let (code, _, body) = env
        .raw(
            "PATCH",
            &format!("{path}?force=true"),
            Some("application/merge-patch+json"),
            Some(json!({"data": {"k": "v"}})),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0],
        json!({"reason": "FieldValueForbidden", "message": "Forbidden: may not be specified for non-apply patch", "field": "force"})
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_sees_the_conflict_as_an_api_error_and_forces_through() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};
    let env = Env::new().await;
    env.create_cm("kubectl-create", "k", json!({"foo": "bar"}))
        .await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    let config = cm("k", json!({"foo": "baz"}));
    let err = api
        .patch("k", &PatchParams::apply("keeper"), &Patch::Apply(&config))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.ends_with(": .data.foo"),
        "{}",
        status.message
    );
    let got = api
        .patch(
            "k",
            &PatchParams::apply("keeper").force(),
            &Patch::Apply(&config),
        )
        .await
        .unwrap();
    let entries = got.metadata.managed_fields.unwrap_or_default();
    let keeper = entries
        .iter()
        .find(|e| e.manager.as_deref() == Some("keeper"))
        .expect("keeper's entry");
    assert_eq!(keeper.operation.as_deref(), Some("Apply"));
    env.stop().await;
}

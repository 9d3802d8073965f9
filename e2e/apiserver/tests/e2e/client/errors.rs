//! Bad input: clear errors for invalid requests, client errors (not crashes) for malformed bodies.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors() {
    let env = Env::new().await;
    env.install_crd().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    // Not JSON.
    let resp = env
        .http
        .post(format!("{}{cms}", env.url()))
        .header("Content-Type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let st: Value = resp.json().await.unwrap();
    assert_eq!(
        (st["kind"].as_str(), st["reason"].as_str()),
        (Some("Status"), Some("BadRequest"))
    );
    // Wrong kind for the endpoint.
    let (code, _, st) = env
        .raw(
            "POST",
            cms,
            None,
            Some(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})),
        )
        .await;
    assert_eq!(code, 400, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("does not match the expected kind (ConfigMap)"),
        "{st}"
    );
    // Namespace in the body differs from the URL.
    let (code, _, st) = env
        .raw(
            "POST",
            cms,
            None,
            Some(json!({"metadata": {"name": "x", "namespace": "other"}})),
        )
        .await;
    assert_eq!(code, 400, "{st}");
    // Missing name.
    let (code, _, st) = env
        .raw("POST", cms, None, Some(json!({"metadata": {}})))
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");
    // Invalid label values and finalizer names are refused like kube does.
    let (code, _, st) = env
        .raw("POST", cms, None, Some(json!({"metadata": {"name": "lbl", "labels": {"ok": "has space"}, "finalizers": ["Not Valid"]}})))
        .await;
    assert_eq!(code, 422, "{st}");
    let fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        vec!["metadata.labels", "metadata.finalizers[0]"],
        "{st}"
    );
    // Config keys and immutable Secrets.
    let (code, _, st) = env
        .raw(
            "POST",
            cms,
            None,
            Some(json!({"metadata": {"name": "keys"}, "data": {"bad key": "x"}})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "data[bad key]");
    let secrets = "/api/v1/namespaces/default/secrets";
    let (code, _, _) = env.raw("POST", secrets, None, Some(json!({"metadata": {"name": "frozen"}, "immutable": true, "stringData": {"a": "b"}}))).await;
    assert_eq!(code, 201);
    let (code, _, st) = env
        .raw(
            "PATCH",
            &format!("{secrets}/frozen"),
            Some("application/merge-patch+json"),
            Some(json!({"stringData": {"a": "c"}})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable when `immutable` is set"),
        "{st}"
    );
    let (code, _, _) = env
        .raw(
            "PATCH",
            &format!("{secrets}/frozen"),
            Some("application/merge-patch+json"),
            Some(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await;
    assert_eq!(code, 200, "metadata of an immutable secret can change");
    // Missing namespace.
    let (code, _, st) = env
        .raw(
            "POST",
            "/api/v1/namespaces/nowhere/configmaps",
            None,
            Some(json!({"metadata": {"name": "x"}})),
        )
        .await;
    assert_eq!(
        (code, st["message"].as_str()),
        (404, Some("namespaces \"nowhere\" not found"))
    );
    // Unknown resources and verbs.
    let (code, _, st) = env.raw("GET", "/api/v1/pods", None, None).await;
    assert_eq!((code, st["reason"].as_str()), (404, Some("NotFound")));
    let (code, _, st) = env
        .raw("POST", &format!("{cms}/x"), None, Some(json!({})))
        .await;
    assert_eq!(
        (code, st["reason"].as_str()),
        (405, Some("MethodNotAllowed"))
    );
    let (code, _, _) = env
        .raw(
            "GET",
            "/api/v1/namespaces/default/configmaps/x/status",
            None,
            None,
        )
        .await;
    assert_eq!(code, 404, "configmaps have no status subresource");
    // Bad selectors, bad patch bodies, bad watch versions.
    let (code, _, st) = env
        .raw(
            "GET",
            &format!("{cms}?labelSelector=a%20in%20b"),
            None,
            None,
        )
        .await;
    assert_eq!(code, 400, "{st}");
    env.raw("POST", cms, None, Some(json!({"metadata": {"name": "p"}})))
        .await;
    let (code, _, _) = env
        .raw(
            "PATCH",
            &format!("{cms}/p"),
            Some("application/json-patch+json"),
            Some(json!({"not": "a list"})),
        )
        .await;
    assert!(code == 400 || code == 422, "{code}");
    let (code, _, _) = env
        .raw(
            "GET",
            &format!("{cms}?watch=1&resourceVersion=abc"),
            None,
            None,
        )
        .await;
    assert_eq!(code, 400);
    // CRD objects without their required apiVersion group.
    let (code, _, st) = env
        .raw("POST", "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets", None,
            Some(json!({"apiVersion": "other.dev/v1", "kind": "S3Bucket", "metadata": {"name": "b"}, "spec": {"tenantRef": {"name": "t"}}})))
        .await;
    assert_eq!(code, 400, "{st}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_client_errors_not_crashes() {
    let env = Env::new().await;
    env.install_crd().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    env.raw(
        "POST",
        cms,
        None,
        Some(json!({"metadata": {"name": "base"}})),
    )
    .await;
    let cases: Vec<(&str, String, Option<&str>, Value)> = vec![
        (
            "POST",
            "/api/v1/namespaces".into(),
            None,
            json!({"metadata": {"name": "n1"}, "spec": "x"}),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/secrets".into(),
            None,
            json!({"metadata": {"name": "s"}, "data": "x"}),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/secrets".into(),
            None,
            json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}),
        ),
        (
            "POST",
            cms.into(),
            None,
            json!({"metadata": {"name": "c", "labels": "x"}}),
        ),
        (
            "POST",
            cms.into(),
            None,
            json!({"metadata": {"name": "c", "finalizers": [1]}}),
        ),
        ("POST", cms.into(), None, json!(["not", "an", "object"])),
        (
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets".into(),
            None,
            json!({"metadata": {"name": "b"}, "spec": "x"}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/merge-patch+json"),
            json!({"data": "x"}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/merge-patch+json"),
            json!({"metadata": {"labels": ["x"]}}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/json-patch+json"),
            json!([{"op": "replace", "path": "", "value": "x"}]),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/strategic-merge-patch+json"),
            json!({"data": ["x"]}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/apply-patch+yaml"),
            json!({"kind": "ConfigMap"}),
        ),
        (
            "PUT",
            format!("{cms}/base"),
            None,
            json!({"metadata": {"name": "other"}}),
        ),
        (
            "DELETE",
            format!("{cms}/base"),
            None,
            json!({"preconditions": {"resourceVersion": "1"}}),
        ),
    ];
    for (method, path, ct, body) in cases {
        let path = if ct == Some("application/apply-patch+yaml") {
            format!("{path}?fieldManager=t")
        } else {
            path
        };
        let (code, _, st) = env.raw(method, &path, ct, Some(body.clone())).await;
        assert!(
            (400..500).contains(&code),
            "{method} {path} {body} -> {code} {st}"
        );
        assert_eq!(st["kind"], "Status", "{st}");
    }
    let (code, _, _) = env.raw("GET", "/version", None, None).await;
    assert_eq!(code, 200);
    env.stop().await;
}

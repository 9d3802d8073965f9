//! `kubectl apply --server-side` against other managers, as a user sees it on a real cluster.

use super::*;

const MANIFEST: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  foo: bar\n";

/// The ConfigMap as `kubectl get -o json --show-managed-fields` shows it.
async fn settings(env: &Env) -> Value {
    let out = env
        .kubectl_ok(&[
            "get",
            "cm",
            "settings",
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .await;
    serde_json::from_str(&out).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply_conflict_and_force() {
    let env = Env::new().await;
    env.kubectl_ok(&["create", "configmap", "settings", "--from-literal=foo=old"])
        .await;
    let r = env
        .kubectl_in(&["apply", "--server-side", "-f", "-"], Some(MANIFEST))
        .await;
    assert!(!r.ok, "{}", r.stdout);
    assert!(
        r.stderr.starts_with(
            "error: Apply failed with 1 conflict: conflict with \"kubectl-create\" using v1: .data.foo\n\
             Please review the fields above--they currently have other managers."
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--force-conflicts"), "{}", r.stderr);
    let r = env
        .kubectl_in(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(MANIFEST),
        )
        .await;
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "configmap/settings serverside-applied");
    // kubectl hides managedFields unless asked.
    let plain = env
        .kubectl_ok(&["get", "cm", "settings", "-o", "yaml"])
        .await;
    assert!(!plain.contains("managedFields"), "{plain}");
    let obj = settings(&env).await;
    assert_eq!(obj["data"]["foo"], "bar");
    assert_eq!(
        fields(&obj, "kubectl", "Apply"),
        json!({"f:data": {"f:foo": {}}})
    );
    assert_eq!(
        fields(&obj, "kubectl-create", "Update"),
        json!({"f:data": {}})
    );
    // Re-applying the same manifest is a no-op.
    let r = env
        .kubectl_in(&["apply", "--server-side", "-f", "-"], Some(MANIFEST))
        .await;
    assert!(r.ok, "{}", r.stderr);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply_takes_over_from_client_side_apply() {
    let env = Env::new().await;
    env.apply(MANIFEST).await;
    // Another manager conflicts with client-side apply's fields ...
    let changed = MANIFEST.replace("bar", "baz");
    let r = env
        .kubectl_in(
            &[
                "apply",
                "--server-side",
                "--field-manager=gitops",
                "-f",
                "-",
            ],
            Some(&changed),
        )
        .await;
    assert!(
        r.stderr.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.foo"
        ),
        "{}",
        r.stderr
    );
    // ... kubectl's own server-side apply takes over what the last-applied annotation holds.
    let r = env
        .kubectl_in(&["apply", "--server-side", "-f", "-"], Some(&changed))
        .await;
    assert!(r.ok, "{}", r.stderr);
    let obj = settings(&env).await;
    assert_eq!(obj["data"]["foo"], "baz");
    assert_eq!(
        fields(&obj, "kubectl", "Apply")["f:data"],
        json!({"f:foo": {}})
    );
    let last: Value = serde_json::from_str(
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["data"]["foo"], "baz", "the annotation follows: {obj}");
    env.stop().await;
}

//! Requests, not levels (issue 11, F2): `keeper.dev/drain` is a request identified by its value.
//! A GitOps tool that re-applies its manifest (server-side apply, a field manager of its own)
//! with the same value never drains the bucket again; a new value does. Driven with kubectl as a
//! user (or the tool) would, on provider `s3` (moto, client-side drains).

use std::time::Duration;

use keeper_e2e_scenarios::{
    Env, Keeper, client_for, condition_is, count_objects, put_objects, secret_data, wait_for,
};
use serde_json::Value;

/// `kubectl apply --server-side --field-manager=gitops -f -`, as a GitOps tool applies.
fn gitops_apply(env: &Env, ns: &str, manifest: &str) {
    let out = env
        .kubectl_input(
            &[
                "apply",
                "--server-side",
                "--field-manager=gitops",
                "-n",
                ns,
                "-f",
                "-",
            ],
            manifest,
        )
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl apply --server-side failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The S3Bucket manifest the GitOps tool owns, with the drain request `drain` if any.
fn bucket_manifest(drain: Option<&str>) -> String {
    let annotations = drain.map_or(String::new(), |v| {
        format!("  annotations:\n    keeper.dev/drain: \"{v}\"\n")
    });
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: data\n{annotations}spec:\n  tenantRef:\n    name: t\n  drain:\n    pollInterval: 1s\n"
    )
}

/// How many events of `reason` the bucket has.
fn events_of(env: &Env, ns: &str, reason: &str) -> usize {
    env.events_of(ns, "S3Bucket", "data")
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == reason)
        .count()
}

/// Waits until keeper recorded `value` as the handled drain request, in status and annotation.
fn wait_handled(env: &Env, ns: &str, value: &str) -> Value {
    wait_for(
        env,
        ns,
        "s3bucket/data",
        &format!("drain request {value:?} handled"),
        Duration::from_secs(90),
        |o| {
            o["status"]["phase"] == "Ready"
                && o["status"]["handledRequests"]["drain"] == value
                && o["metadata"]["annotations"]["keeper.dev/drain-handled"] == value
        },
    )
}

/// Tenant `t` on provider `s3` and, applied as the GitOps tool applies it, its Ready bucket `data`
/// holding `count` objects named `prefix...`: the bucket's name and a client with its keys.
async fn ready_bucket(
    env: &Env,
    ns: &str,
    prefix: &str,
    count: usize,
) -> (String, aws_sdk_s3::Client) {
    env.apply(
        ns,
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: t\nspec:\n  provider: s3\n",
    )
    .unwrap();
    gitops_apply(env, ns, &bucket_manifest(None));
    let obj = wait_for(
        env,
        ns,
        "s3bucket/data",
        "Ready",
        Duration::from_secs(90),
        |o| condition_is(o, "Ready", "True"),
    );
    let bucket = obj["status"]["bucketName"].as_str().unwrap().to_string();
    let s3 = client_for(&secret_data(env, ns, "data-credentials").unwrap());
    put_objects(&s3, &bucket, prefix, count).await;
    (bucket, s3)
}

#[tokio::test(flavor = "multi_thread")]
async fn server_side_apply_of_the_same_drain_value_does_not_drain_again_and_a_new_value_does() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-requests").unwrap();
    let ns = ns.name.clone();
    let mut keeper = Keeper::start(&env).unwrap();
    let (bucket, s3) = ready_bucket(&env, &ns, "before", 120).await;

    // The GitOps manifest asks for a drain: it runs to the end; the request stays in place.
    let first = bucket_manifest(Some("2026-01-01T00:00:00Z"));
    gitops_apply(&env, &ns, &first);
    let obj = wait_handled(&env, &ns, "2026-01-01T00:00:00Z");
    assert_eq!(
        count_objects(&s3, &bucket).await,
        Some(0),
        "the drain emptied it"
    );
    assert_eq!(
        obj["metadata"]["annotations"]["keeper.dev/drain"], "2026-01-01T00:00:00Z",
        "keeper leaves the GitOps tool's annotation alone: {obj:#}"
    );
    assert_eq!(events_of(&env, &ns, "BucketDrainingStarted"), 1);

    // New data, then the tool re-applies the very same manifest (a sync, a self-heal).
    put_objects(&s3, &bucket, "after", 35).await;
    gitops_apply(&env, &ns, &first);
    // A restarted keeper reconciles every object afresh (and lists usage again): it still sees
    // a handled request, not a new one.
    keeper.kill();
    keeper = Keeper::start(&env).unwrap();
    let obj = wait_for(
        &env,
        &ns,
        "s3bucket/data",
        "keeper to look at the bucket again (usage 35)",
        Duration::from_secs(60),
        |o| o["status"]["objectCount"] == 35,
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        count_objects(&s3, &bucket).await,
        Some(35),
        "the re-applied request drained the bucket again: {}",
        keeper.log_text()
    );
    let obj = env.get_json(&ns, "s3bucket/data").unwrap().unwrap_or(obj);
    assert_eq!(obj["status"]["phase"], "Ready", "{obj:#}");
    assert_eq!(
        obj["metadata"]["annotations"]["keeper.dev/drain"],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(
        obj["metadata"]["annotations"]["keeper.dev/drain-handled"],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(
        events_of(&env, &ns, "BucketDrainingStarted"),
        1,
        "no second drain"
    );

    // A new value is a new request.
    gitops_apply(&env, &ns, &bucket_manifest(Some("2026-02-01T00:00:00Z")));
    wait_handled(&env, &ns, "2026-02-01T00:00:00Z");
    assert_eq!(count_objects(&s3, &bucket).await, Some(0), "drained again");
    assert_eq!(events_of(&env, &ns, "BucketDrainingStarted"), 2);
    drop(keeper);
}

/// An upgrade from a keeper that removed `keeper.dev/drain: "true"` once it had drained (audit 2,
/// N7): the GitOps tool re-applies its manifest, still saying `true`, to a bucket that older
/// keeper wrote. That `true` counts as handled: the bucket keeps its data; a new value drains.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_keepers_drain_true_reapplied_after_upgrading_drains_nothing() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-legacy-drain").unwrap();
    let ns = ns.name.clone();
    let keeper = Keeper::start(&env).unwrap();
    let (bucket, s3) = ready_bucket(&env, &ns, "kept", 40).await;

    // The status as the older keeper left it: no record of handled requests (it had none).
    drop(keeper);
    env.kubectl(&[
        "patch",
        "-n",
        &ns,
        "s3bucket",
        "data",
        "--subresource=status",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/status/handledRequests"}]"#,
    ])
    .unwrap();
    // The upgraded keeper starts; the tool re-applies the manifest it always had.
    let keeper = Keeper::start(&env).unwrap();
    gitops_apply(&env, &ns, &bucket_manifest(Some("true")));
    let obj = wait_for(
        &env,
        &ns,
        "s3bucket/data",
        "the legacy value recorded as handled",
        Duration::from_secs(60),
        |o| o["status"]["handledRequests"]["drain"] == "true",
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        count_objects(&s3, &bucket).await,
        Some(40),
        "the re-applied true drained the bucket: {}",
        keeper.log_text()
    );
    assert_eq!(obj["status"]["phase"], "Ready", "{obj:#}");
    assert_eq!(events_of(&env, &ns, "BucketDrainingStarted"), 0);

    // A new value is a request.
    gitops_apply(&env, &ns, &bucket_manifest(Some("1767225600")));
    wait_handled(&env, &ns, "1767225600");
    assert_eq!(
        count_objects(&s3, &bucket).await,
        Some(0),
        "drained on request"
    );
    drop(keeper);
}

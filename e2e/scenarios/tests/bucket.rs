//! S3Bucket end to end (issue 5), on the StorageGRID emulator (provider `default`, server-side
//! drain) and on moto (provider `s3`, client-side drain).

use std::collections::BTreeMap;
use std::time::Duration;

use keeper_e2e_scenarios::{
    ApiRequest, AuditLog, Env, Keeper, client_for, condition, condition_is, count_objects, jitter,
    put_objects, secret_data, tenant_wide_credentials, wait_for, wait_until,
};
use serde_json::Value;

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn tenant(name: &str, provider: &str) -> String {
    manifest("S3Tenant", name, &format!("  provider: {provider}\n"))
}

fn bucket(name: &str, tenant: &str, extra: &str) -> String {
    manifest(
        "S3Bucket",
        name,
        &format!("  tenantRef:\n    name: {tenant}\n  drain:\n    pollInterval: 1s\n{extra}"),
    )
}

fn get(env: &Env, ns: &str, resource: &str) -> Option<Value> {
    env.get_json(ns, resource).unwrap()
}

fn ready(obj: &Value) -> bool {
    condition_is(obj, "Ready", "True")
}

fn events(env: &Env, ns: &str, name: &str) -> Vec<String> {
    env.events_of(ns, "S3Bucket", name)
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Sets up a Ready tenant on `provider` and returns keys reaching all its buckets (its root
/// user's on StorageGRID, the provider's on provider `s3`).
fn ready_tenant(env: &Env, ns: &str, name: &str, provider: &str) -> BTreeMap<String, String> {
    env.apply(ns, &tenant(name, provider)).unwrap();
    wait_for(
        env,
        ns,
        &format!("s3tenant/{name}"),
        "Ready",
        Duration::from_secs(60),
        ready,
    );
    tenant_wide_credentials(env, ns, name, provider).unwrap()
}

async fn delete_blocked_then_drained_and_gone(env: &Env, ns: &str, provider: &str) {
    let tenant_creds = ready_tenant(env, ns, "t", provider);
    env.apply(ns, &bucket("big", "t", "")).unwrap();
    let obj = wait_for(
        env,
        ns,
        "s3bucket/big",
        "Ready",
        Duration::from_secs(60),
        ready,
    );
    let name = obj["status"]["bucketName"].as_str().unwrap().to_string();
    assert_default_name(&name, ns, "big");
    let creds = secret_data(env, ns, "big-credentials").unwrap();
    for key in [
        "accessKeyId",
        "secretAccessKey",
        "endpoint",
        "region",
        "bucket",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "S3_BUCKET",
    ] {
        assert!(
            creds.contains_key(key),
            "{key} missing from the bucket's credentials Secret"
        );
    }
    assert_eq!(creds["bucket"], name);
    let s3 = client_for(&creds);
    put_objects(&s3, &name, "data", 2500).await;

    env.kubectl(&["delete", "-n", ns, "s3bucket/big", "--wait=false"])
        .unwrap();
    let obj = wait_for(
        env,
        ns,
        "s3bucket/big",
        "DeletionBlocked",
        Duration::from_secs(30),
        |o| condition_is(o, "DeletionBlocked", "True"),
    );
    let blocked = condition(&obj, "DeletionBlocked").unwrap();
    assert_eq!(blocked["reason"], "BucketNotEmpty");
    assert!(
        blocked["message"]
            .as_str()
            .unwrap()
            .contains("kubectl annotate --overwrite s3bucket big keeper.dev/drain=$(date +%s)"),
        "{blocked}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        count_objects(&s3, &name).await,
        Some(2500),
        "a bucket that was not asked to drain keeps its objects"
    );
    assert!(get(env, ns, "s3bucket/big").is_some());

    // The command the message gives, with the value its `$(date +%s)` expands to.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    env.kubectl(&[
        "annotate",
        "--overwrite",
        "-n",
        ns,
        "s3bucket/big",
        &format!("keeper.dev/drain={now}"),
    ])
    .unwrap();
    wait_until(
        Duration::from_secs(120),
        "the drained bucket's CR to disappear",
        || Ok(get(env, ns, "s3bucket/big").is_none()),
    )
    .unwrap();
    let reasons = events(env, ns, "big");
    for reason in ["BucketDrainingStarted", "BucketDrainingProgress"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event: {reasons:?}"
        );
    }
    let root = client_for(&tenant_creds);
    let head = root.head_bucket().bucket(&name).send().await;
    assert!(head.is_err(), "the bucket is gone from the backend");
}

/// The default bucket name: `<namespace>-<name>-` and 8 hex digits of a hash of both.
fn assert_default_name(bucket: &str, ns: &str, name: &str) {
    let hash = bucket.strip_prefix(&format!("{ns}-{name}-"));
    assert!(
        hash.is_some_and(|h| h.len() == 8 && h.bytes().all(|b| b.is_ascii_hexdigit())),
        "the default bucket name is <namespace>-<name>-<hash>, got {bucket}"
    );
}

/// `a/b-c` and `a-b/c` joined with `-` are the same text: the default names must still differ,
/// so both get a bucket of their own (before, the second was refused `BucketOwnedElsewhere`).
#[tokio::test(flavor = "multi_thread")]
async fn default_bucket_names_of_namespaces_joining_to_the_same_text_differ() {
    let env = Env::from_env().unwrap();
    let first = env.namespace("e2e-nm").unwrap();
    let second = env.namespace(&format!("{}-x", first.name)).unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    // first/x-<rest>-media and second/media both join to `<second>-media`.
    let long_name = format!("{}-media", &second.name[first.name.len() + 1..]);
    let mut names = Vec::new();
    for (ns, name) in [(&first.name, long_name.as_str()), (&second.name, "media")] {
        assert_eq!(format!("{ns}-{name}"), format!("{}-media", second.name));
        ready_tenant(&env, ns, "t", "s3");
        env.apply(ns, &bucket(name, "t", "")).unwrap();
        let obj = wait_for(
            &env,
            ns,
            &format!("s3bucket/{name}"),
            "Ready",
            Duration::from_secs(60),
            ready,
        );
        let bucket_name = obj["status"]["bucketName"].as_str().unwrap().to_string();
        assert_default_name(&bucket_name, ns, name);
        names.push(bucket_name);
    }
    assert_ne!(names[0], names[1], "each S3Bucket has a bucket of its own");
}

#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_a_full_bucket_is_kept_until_drained_then_deleted() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-sgb").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    delete_blocked_then_drained_and_gone(&env, &ns.name, "default").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_compatible_a_full_bucket_is_kept_until_drained_then_deleted() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-s3b").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    delete_blocked_then_drained_and_gone(&env, &ns.name, "s3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_bucket_credentials_work_for_their_bucket_only() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-scope").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    ready_tenant(&env, &ns.name, "t", "default");
    for b in ["one", "two"] {
        env.apply(&ns.name, &bucket(b, "t", "")).unwrap();
    }
    for b in ["one", "two"] {
        wait_for(
            &env,
            &ns.name,
            &format!("s3bucket/{b}"),
            "Ready",
            Duration::from_secs(60),
            ready,
        );
    }
    let one = secret_data(&env, &ns.name, "one-credentials").unwrap();
    let two = secret_data(&env, &ns.name, "two-credentials").unwrap();
    let s3 = client_for(&one);
    put_objects(&s3, &one["bucket"], "mine", 3).await;
    let denied = s3
        .put_object()
        .bucket(&two["bucket"])
        .key("intrusion")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"x"))
        .send()
        .await;
    let err = denied.expect_err("bucket one's keys wrote into bucket two");
    assert_eq!(err.into_service_error().meta().code(), Some("AccessDenied"));
}

#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_drain_without_deletion_empties_the_bucket_and_cancelling_keeps_the_rest() {
    drain_and_cancel("default").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_compatible_drain_without_deletion_empties_the_bucket_and_cancelling_keeps_the_rest() {
    drain_and_cancel("s3").await;
}

/// A StorageGRID drain with no interval configured anywhere (3 minutes by default) is polled
/// within seconds at first: a small drain shows as complete in seconds, not at the first
/// 3-minute poll.
#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_a_small_drain_with_default_polling_completes_in_seconds() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-drain-quick").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    ready_tenant(&env, &ns.name, "t", "default");
    env.apply(
        &ns.name,
        &manifest("S3Bucket", "small", "  tenantRef:\n    name: t\n"),
    )
    .unwrap();
    let small = wait_for(
        &env,
        &ns.name,
        "s3bucket/small",
        "Ready",
        Duration::from_secs(60),
        ready,
    );
    let creds = secret_data(&env, &ns.name, "small-credentials").unwrap();
    let name = small["status"]["bucketName"].as_str().unwrap().to_string();
    put_objects(&client_for(&creds), &name, "a", 20).await;
    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3bucket/small",
        "keeper.dev/drain=quick",
    ])
    .unwrap();
    let obj = wait_for(
        &env,
        &ns.name,
        "s3bucket/small",
        "drained and recorded as handled well before the 3-minute default interval",
        Duration::from_secs(45),
        |o| {
            o["status"]["handledRequests"]["drain"] == "quick"
                && o["status"]["drainStatus"].is_null()
        },
    );
    assert_eq!(obj["status"]["objectCount"], 0, "{obj:#}");
    let reasons = events(&env, &ns.name, "small");
    assert!(
        reasons.iter().any(|r| r == "BucketDrainingComplete"),
        "{reasons:?}"
    );
}

async fn drain_and_cancel(provider: &str) {
    let env = Env::from_env().unwrap();
    let ns = env.namespace(&format!("e2e-drain-{provider}")).unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    ready_tenant(&env, &ns.name, "t", provider);
    env.apply(&ns.name, &bucket("full", "t", "")).unwrap();
    env.apply(&ns.name, &bucket("half", "t", "")).unwrap();
    let full = wait_for(
        &env,
        &ns.name,
        "s3bucket/full",
        "Ready",
        Duration::from_secs(60),
        ready,
    );
    let half = wait_for(
        &env,
        &ns.name,
        "s3bucket/half",
        "Ready",
        Duration::from_secs(60),
        ready,
    );
    let full_creds = secret_data(&env, &ns.name, "full-credentials").unwrap();
    let half_creds = secret_data(&env, &ns.name, "half-credentials").unwrap();
    let full_name = full["status"]["bucketName"].as_str().unwrap().to_string();
    let half_name = half["status"]["bucketName"].as_str().unwrap().to_string();
    put_objects(&client_for(&full_creds), &full_name, "a", 300).await;
    put_objects(&client_for(&half_creds), &half_name, "a", 2500).await;

    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3bucket/full",
        "keeper.dev/drain=true",
    ])
    .unwrap();
    // The request stays (keeper no longer removes it): the handled value is recorded instead.
    let obj = wait_for(
        &env,
        &ns.name,
        "s3bucket/full",
        "drained, Ready, request recorded as handled",
        Duration::from_secs(90),
        |o| {
            o["status"]["phase"] == "Ready"
                && o["status"]["objectCount"] == 0
                && o["metadata"]["annotations"]["keeper.dev/drain-handled"] == "true"
        },
    );
    assert_eq!(
        obj["metadata"]["annotations"]["keeper.dev/drain"], "true",
        "the request annotation stays: {obj:#}"
    );
    assert_eq!(obj["status"]["handledRequests"]["drain"], "true", "{obj:#}");
    assert!(
        obj["status"]["drainStatus"].is_null(),
        "drain status is cleaned up: {obj:#}"
    );
    let reasons = events(&env, &ns.name, "full");
    assert!(
        reasons.iter().any(|r| r == "BucketDrainingComplete"),
        "{reasons:?}"
    );

    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3bucket/half",
        "keeper.dev/drain=true",
    ])
    .unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3bucket/half",
        "Draining",
        Duration::from_secs(30),
        |o| o["status"]["phase"] == "Draining",
    );
    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3bucket/half",
        "keeper.dev/drain-",
    ])
    .unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3bucket/half",
        "Ready after the cancel",
        Duration::from_secs(30),
        |o| o["status"]["phase"] == "Ready",
    );
    let reasons = events(&env, &ns.name, "half");
    assert!(
        reasons.iter().any(|r| r == "BucketDrainingCanceled"),
        "{reasons:?}"
    );
    let s3 = client_for(&half_creds);
    // A stop is asynchronous on the grid: deletions already in flight may still land, so the
    // count is taken once that settles, and must then stay put.
    std::thread::sleep(Duration::from_secs(2));
    let remaining = count_objects(&s3, &half_name).await.unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let later = count_objects(&s3, &half_name).await.unwrap();
    assert!(
        later > 0,
        "the canceled drain kept going until the bucket was empty"
    );
    assert_eq!(
        remaining, later,
        "objects kept disappearing after the cancel"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_a_bucket_someone_else_created_is_never_adopted_or_deleted() {
    foreign_bucket("default").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_compatible_a_bucket_someone_else_created_is_never_adopted_or_deleted() {
    foreign_bucket("s3").await;
}

async fn foreign_bucket(provider: &str) {
    let env = Env::from_env().unwrap();
    let ns = env.namespace(&format!("e2e-foreign-{provider}")).unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    let root = client_for(&ready_tenant(&env, &ns.name, "t", provider));
    let foreign = format!("{}-foreign", ns.name);
    root.create_bucket().bucket(&foreign).send().await.unwrap();
    put_objects(&root, &foreign, "theirs", 5).await;

    env.apply(
        &ns.name,
        &bucket("intruder", "t", &format!("  bucketName: {foreign}\n")),
    )
    .unwrap();
    let obj = wait_for(
        &env,
        &ns.name,
        "s3bucket/intruder",
        "Failed",
        Duration::from_secs(30),
        |o| o["status"]["phase"] == "Failed",
    );
    let ready = condition(&obj, "Ready").expect("a Ready condition explains the conflict");
    assert_eq!(ready["status"], "False");
    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3bucket/intruder",
        "keeper.dev/drain=true",
    ])
    .unwrap();
    env.kubectl(&[
        "delete",
        "-n",
        &ns.name,
        "s3bucket/intruder",
        "--wait=false",
    ])
    .unwrap();
    wait_until(Duration::from_secs(30), "the CR to be released", || {
        Ok(get(&env, &ns.name, "s3bucket/intruder").is_none())
    })
    .unwrap();
    assert_eq!(
        count_objects(&root, &foreign).await,
        Some(5),
        "keeper touched a bucket it did not create"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn steady_state_makes_no_writes_and_no_backend_calls_beyond_usage() {
    let env = Env::from_env().unwrap();
    let Ok(audit) = AuditLog::of(&env) else {
        keeper_e2e_scenarios::skip(
            "keeper's requests are read from the local kube-apiserver's audit log",
        );
        return;
    };
    let ns = env.namespace("e2e-steady").unwrap();
    let keeper = Keeper::start(&env).unwrap();
    ready_tenant(&env, &ns.name, "t", "default");
    for b in ["a", "b"] {
        env.apply(&ns.name, &bucket(b, "t", "")).unwrap();
    }
    for b in ["a", "b"] {
        wait_for(
            &env,
            &ns.name,
            &format!("s3bucket/{b}"),
            "Ready",
            Duration::from_secs(60),
            ready,
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    let client = reqwest::Client::new();
    let grid = env
        .storagegrid_url
        .clone()
        .expect("the StorageGRID emulator runs in the local control plane");
    client
        .delete(format!("{grid}/debug/requests"))
        .send()
        .await
        .unwrap();
    let from = audit.mark().unwrap();
    std::thread::sleep(Duration::from_secs(15));
    // This scenario's objects only: the namespace of an earlier scenario may still be
    // terminating (kube's namespace controller empties it), and keeper's cleanup writes there.
    let writes: Vec<ApiRequest> = audit
        .since(from)
        .unwrap()
        .into_iter()
        .filter(|r| r.user_agent.starts_with("keeper/") && r.namespace == ns.name)
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .collect();
    assert!(
        writes.is_empty(),
        "keeper wrote in steady state: {writes:#?}\nlog: {}",
        keeper.log_text()
    );
    // Beyond the usage refresh, keeper makes no backend call in steady state.
    let grid_log: Value = client
        .get(format!("{grid}/debug/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let calls: Vec<&Value> = grid_log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            !r["path"]
                .as_str()
                .is_some_and(|p| p.contains("usage") || p.starts_with("/debug"))
        })
        .collect();
    assert!(
        calls.is_empty(),
        "backend calls in steady state: {calls:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_sigkills_during_drains_and_deletions_leave_nothing_behind_and_touch_nothing_else()
 {
    sigkills_during_drains("default").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_compatible_sigkills_during_drains_and_deletions_leave_nothing_behind_and_touch_nothing_else()
 {
    sigkills_during_drains("s3").await;
}

async fn sigkills_during_drains(provider: &str) {
    let env = Env::from_env().unwrap();
    let ns = env.namespace(&format!("e2e-kill-{provider}")).unwrap();
    let keeper = Keeper::start(&env).unwrap();
    let root = client_for(&ready_tenant(&env, &ns.name, "t", provider));
    for b in ["doomed", "keep"] {
        env.apply(&ns.name, &bucket(b, "t", "")).unwrap();
    }
    let mut names = BTreeMap::new();
    for b in ["doomed", "keep"] {
        let obj = wait_for(
            &env,
            &ns.name,
            &format!("s3bucket/{b}"),
            "Ready",
            Duration::from_secs(60),
            ready,
        );
        names.insert(b, obj["status"]["bucketName"].as_str().unwrap().to_string());
    }
    put_objects(&root, &names["doomed"], "x", 1500).await;
    put_objects(&root, &names["keep"], "x", 40).await;
    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3bucket/doomed",
        "keeper.dev/drain=true",
    ])
    .unwrap();
    env.kubectl(&["delete", "-n", &ns.name, "s3bucket/doomed", "--wait=false"])
        .unwrap();
    keeper.kill();
    for _ in 0..10 {
        let keeper = Keeper::start(&env).unwrap();
        std::thread::sleep(jitter(1500));
        keeper.kill();
    }
    let _keeper = Keeper::start(&env).unwrap();
    wait_until(
        Duration::from_secs(120),
        "the drained bucket's CR to go",
        || Ok(get(&env, &ns.name, "s3bucket/doomed").is_none()),
    )
    .unwrap();
    assert!(
        root.head_bucket()
            .bucket(&names["doomed"])
            .send()
            .await
            .is_err(),
        "a bucket was left behind for a deleted CR"
    );
    assert_eq!(
        count_objects(&root, &names["keep"]).await,
        Some(40),
        "objects went from a bucket not asked to drain"
    );
    wait_for(
        &env,
        &ns.name,
        "s3bucket/keep",
        "Ready",
        Duration::from_secs(30),
        ready,
    );
}

/// An S3Bucket asking to adopt (`keeper.dev/adopt`) the bucket another S3Bucket owns.
fn adopting_bucket(name: &str, tenant: &str, bucket_name: &str) -> String {
    bucket(name, tenant, &format!("  bucketName: {bucket_name}\n")).replacen(
        &format!("  name: {name}\n"),
        &format!("  name: {name}\n  annotations:\n    keeper.dev/adopt: \"true\"\n"),
        1,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_adopt_never_takes_a_bucket_another_s3bucket_owns() {
    // A StorageGRID tenant lives in one namespace (its account's buckets are invisible to
    // others): the other owner is another S3Bucket of the same tenant.
    adopt_of_an_owned_bucket("default", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_compatible_adopt_never_takes_a_bucket_another_namespaces_s3bucket_owns() {
    // Tenants of one S3-compatible provider share its store: the owner is in another namespace.
    adopt_of_an_owned_bucket("s3", true).await;
}

async fn adopt_of_an_owned_bucket(provider: &str, other_namespace: bool) {
    let env = Env::from_env().unwrap();
    let ns_a = env.namespace(&format!("e2e-owner-a-{provider}")).unwrap();
    let ns_b = if other_namespace {
        Some(env.namespace(&format!("e2e-owner-b-{provider}")).unwrap())
    } else {
        None
    };
    let b_ns = ns_b.as_ref().map_or(&ns_a.name, |ns| &ns.name);
    let _keeper = Keeper::start(&env).unwrap();
    ready_tenant(&env, &ns_a.name, "t", provider);
    if other_namespace {
        ready_tenant(&env, b_ns, "t", provider);
    }
    let shared = format!("{}-owned", ns_a.name);
    env.apply(
        &ns_a.name,
        &bucket("owner", "t", &format!("  bucketName: {shared}\n")),
    )
    .unwrap();
    wait_for(
        &env,
        &ns_a.name,
        "s3bucket/owner",
        "Ready",
        Duration::from_secs(60),
        ready,
    );
    let owner_keys = secret_data(&env, &ns_a.name, "owner-credentials").unwrap();
    let owner_s3 = client_for(&owner_keys);
    put_objects(&owner_s3, &shared, "precious", 5).await;

    env.apply(b_ns, &adopting_bucket("taker", "t", &shared))
        .unwrap();
    let obj = wait_for(
        &env,
        b_ns,
        "s3bucket/taker",
        "Failed BucketOwnedElsewhere",
        Duration::from_secs(60),
        |o| condition(o, "Ready").is_some_and(|c| c["reason"] == "BucketOwnedElsewhere"),
    );
    assert_eq!(obj["status"]["phase"], "Failed");
    let message = condition(&obj, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!("{}/owner", ns_a.name)),
        "the condition names the owner: {message}"
    );
    wait_until(
        Duration::from_secs(30),
        "a BucketOwnedElsewhere event",
        || {
            Ok(events(&env, b_ns, "taker")
                .iter()
                .any(|r| r == "BucketOwnedElsewhere"))
        },
    )
    .unwrap();
    // The owner keeps its bucket, its objects and its working keys.
    assert!(ready(&get(&env, &ns_a.name, "s3bucket/owner").unwrap()));
    assert_eq!(count_objects(&owner_s3, &shared).await, Some(5));

    // Deleting the refused resource, even with a drain asked, never touches the owner's bucket.
    env.kubectl(&[
        "annotate",
        "-n",
        b_ns,
        "s3bucket/taker",
        "keeper.dev/drain=true",
    ])
    .unwrap();
    env.kubectl(&["delete", "-n", b_ns, "s3bucket/taker", "--wait=false"])
        .unwrap();
    wait_until(Duration::from_secs(30), "the CR to be released", || {
        Ok(get(&env, b_ns, "s3bucket/taker").is_none())
    })
    .unwrap();
    assert_eq!(
        count_objects(&owner_s3, &shared).await,
        Some(5),
        "keeper touched a bucket another S3Bucket owns"
    );
    assert!(ready(&get(&env, &ns_a.name, "s3bucket/owner").unwrap()));
}

#[tokio::test(flavor = "multi_thread")]
async fn storagegrid_bucket_keys_cannot_delete_the_bucket_or_change_its_policy() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-least-privilege").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    ready_tenant(&env, &ns.name, "t", "default");
    env.apply(&ns.name, &bucket("mine", "t", "")).unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3bucket/mine",
        "Ready",
        Duration::from_secs(60),
        ready,
    );
    let keys = secret_data(&env, &ns.name, "mine-credentials").unwrap();
    let s3 = client_for(&keys);
    let name = &keys["bucket"];
    // The objects are theirs to use.
    put_objects(&s3, name, "data", 2).await;
    assert_eq!(count_objects(&s3, name).await, Some(2));
    s3.delete_object()
        .bucket(name)
        .key("data/00000")
        .send()
        .await
        .expect("deleting an object is allowed");
    // The bucket itself is keeper's.
    let deleted = s3.delete_bucket().bucket(name).send().await;
    let err = deleted.expect_err("the bucket's keys deleted the bucket");
    assert_eq!(err.into_service_error().meta().code(), Some("AccessDenied"));
    let policy = s3
        .put_bucket_policy()
        .bucket(name)
        .policy(
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"*"}]}"#,
        )
        .send()
        .await;
    let err = policy.expect_err("the bucket's keys changed the bucket policy");
    assert_eq!(err.into_service_error().meta().code(), Some("AccessDenied"));
}

//! Tenancy on a shared S3-compatible store (issue 11, audit F6/F12/F14), on provider `s3`: a moto
//! that enforces IAM, configured with `iam:`. Each bucket's Secret carries keys of the bucket's
//! own IAM user, which reach that bucket's objects and nothing else; the tenant gets no
//! tenant-wide keys; deleting the bucket deletes its user.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use keeper_e2e_scenarios::{
    AwsProxyRules, Env, Keeper, client_for, condition, condition_is, iam_client, iam_users_of,
    s3_client, secret_data, wait_for, wait_until,
};
use serde_json::json;

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// A Ready tenant `t` on provider `s3` with a Ready bucket `data`: the bucket's Secret.
fn ready_bucket(env: &Env, ns: &str) -> BTreeMap<String, String> {
    env.apply(ns, &manifest("S3Tenant", "t", "  provider: s3\n"))
        .unwrap();
    env.apply(
        ns,
        &manifest("S3Bucket", "data", "  tenantRef: {name: t}\n"),
    )
    .unwrap();
    wait_for(
        env,
        ns,
        "s3bucket/data",
        "Ready",
        Duration::from_secs(90),
        |b| condition_is(b, "Ready", "True"),
    );
    secret_data(env, ns, "data-credentials").unwrap()
}

/// The error code of a refused S3 call (panics if it succeeded).
fn refused<T, E: aws_sdk_s3::error::ProvideErrorMetadata + std::fmt::Debug>(
    what: &str,
    result: Result<T, E>,
) -> String {
    match result {
        Ok(_) => panic!("{what} was allowed with the bucket's keys"),
        Err(e) => e.code().unwrap_or_default().to_string(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bucket_keys_reach_their_own_bucket_only_and_their_user_goes_with_the_bucket() {
    let env = Env::from_env().unwrap();
    let mine_ns = env.namespace("e2e-tenancy-a").unwrap();
    let theirs_ns = env.namespace("e2e-tenancy-b").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    let mine = ready_bucket(&env, &mine_ns.name);
    let theirs = ready_bucket(&env, &theirs_ns.name);

    // The store enforces IAM: made-up keys are refused (else nothing below would prove anything).
    let endpoint = env.s3_endpoint.clone().unwrap();
    let anyone = s3_client(&endpoint, "made-up", "made-up", "us-east-1");
    refused(
        "ListBuckets with made-up keys",
        anyone.list_buckets().send().await,
    );

    // No tenant-wide keys on this provider, and the tenant says so.
    let tenant = env.get_json(&mine_ns.name, "s3tenant/t").unwrap().unwrap();
    assert!(
        tenant["status"]["credentialsSecret"].is_null(),
        "{tenant:#}"
    );
    let ready = condition(&tenant, "Ready").unwrap()["message"].to_string();
    assert!(ready.contains("no tenant-wide keys"), "{ready}");
    assert!(
        env.get_json(&mine_ns.name, "secret/t-s3-credentials")
            .unwrap()
            .is_none()
    );
    let admin = env.admin_keys.clone().unwrap();
    assert_ne!(mine["accessKeyId"], admin.0, "not the provider's keys");
    assert_ne!(mine["accessKeyId"], theirs["accessKeyId"]);

    // Own bucket: put, get, list, delete.
    let s3 = client_for(&mine);
    let bucket = mine["bucket"].clone();
    s3.put_object()
        .bucket(&bucket)
        .key("hello")
        .body(ByteStream::from_static(b"hi"))
        .send()
        .await
        .expect("put into the own bucket");
    let body = s3
        .get_object()
        .bucket(&bucket)
        .key("hello")
        .send()
        .await
        .expect("get from the own bucket")
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(&body[..], b"hi");
    let listed = s3
        .list_objects_v2()
        .bucket(&bucket)
        .send()
        .await
        .expect("list the own bucket");
    assert_eq!(listed.key_count(), Some(1));
    s3.delete_object()
        .bucket(&bucket)
        .key("hello")
        .send()
        .await
        .expect("delete from the own bucket");

    // Another namespace's bucket, the bucket itself, its policy: refused.
    let other = theirs["bucket"].clone();
    let code = refused(
        "PutObject into another namespace's bucket",
        s3.put_object()
            .bucket(&other)
            .key("intruder")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await,
    );
    assert_eq!(code, "AccessDenied");
    refused(
        "ListObjects of another namespace's bucket",
        s3.list_objects_v2().bucket(&other).send().await,
    );
    let code = refused(
        "DeleteBucket",
        s3.delete_bucket().bucket(&bucket).send().await,
    );
    assert_eq!(code, "AccessDenied");
    let code = refused(
        "PutBucketPolicy",
        s3.put_bucket_policy()
            .bucket(&bucket)
            .policy(r#"{"Version":"2012-10-17","Statement":[]}"#)
            .send()
            .await,
    );
    assert_eq!(code, "AccessDenied");
    let code = refused("ListBuckets", s3.list_buckets().send().await);
    assert_eq!(code, "AccessDenied", "a known key without the right");

    // Deleting the S3Bucket deletes its IAM user (keys, policy, user); the other stays.
    let iam = iam_client(&env).await;
    assert_eq!(iam_users_of(&iam, &bucket).await.len(), 1);
    env.kubectl(&[
        "delete",
        "-n",
        &mine_ns.name,
        "s3bucket/data",
        "--wait=true",
        "--timeout=90s",
    ])
    .unwrap();
    // The finalizer deletes the user before it lets the resource go.
    assert_eq!(iam_users_of(&iam, &bucket).await, Vec::<String>::new());
    assert_eq!(iam_users_of(&iam, &other).await.len(), 1);
    let code = refused(
        "ListBuckets with a deleted bucket's keys",
        s3.list_buckets().send().await,
    );
    assert_eq!(code, "InvalidAccessKeyId", "the key itself is gone");
}

/// A bucket's IAM user is named after the bucket alone. An S3Bucket whose bucket was deleted
/// behind keeper's back is deleted; while its deletion deletes its key (which the AWS proxy
/// holds for a few seconds), an S3Bucket of another namespace makes a bucket of the same name and
/// gets its key from that user. The first deletion then leaves the user to the second S3Bucket
/// (event `CredentialsLeft`), whose keys keep working. keeper used to delete the user once the
/// first bucket was gone, and the second S3Bucket's key with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_deletion_leaves_the_iam_user_of_a_bucket_another_namespace_made_since_under_its_name() {
    let env = Env::from_env().unwrap();
    let first_ns = env.namespace("e2e-reused-a").unwrap();
    let second_ns = env.namespace("e2e-reused-b").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    let name = format!("{}-shared", first_ns.name);
    let bucket = format!("  tenantRef: {{name: t}}\n  bucketName: {name}\n");
    for ns in [&first_ns.name, &second_ns.name] {
        env.apply(ns, &manifest("S3Tenant", "t", "  provider: s3\n"))
            .unwrap();
    }
    env.apply(&first_ns.name, &manifest("S3Bucket", "data", &bucket))
        .unwrap();
    wait_for(
        &env,
        &first_ns.name,
        "s3bucket/data",
        "Ready",
        Duration::from_secs(90),
        |b| condition_is(b, "Ready", "True"),
    );
    let first = secret_data(&env, &first_ns.name, "data-credentials").unwrap();

    // The bucket goes behind keeper's back (it is empty).
    let direct = env.past_the_aws_proxy().unwrap();
    let (id, secret) = direct.admin_keys.clone().unwrap();
    let admin = s3_client(
        direct.s3_endpoint.as_ref().unwrap(),
        &id,
        &secret,
        "us-east-1",
    );
    admin.delete_bucket().bucket(&name).send().await.unwrap();

    // The first S3Bucket's deletion reaches its key; the proxy holds that call for 10 s, ample
    // time for the second S3Bucket below to make its bucket (well under a second here).
    let held = AwsProxyRules::set(
        &env,
        json!([{"service": "iam", "actions": ["DeleteAccessKey"], "latencyMs": 10000}]),
    )
    .unwrap();
    env.kubectl(&[
        "delete",
        "-n",
        &first_ns.name,
        "s3bucket/data",
        "--wait=false",
    ])
    .unwrap();
    wait_until(
        Duration::from_secs(60),
        "the first deletion's DeleteAccessKey",
        || {
            Ok(held
                .calls()?
                .iter()
                .any(|c| c["action"] == "DeleteAccessKey"))
        },
    )
    .unwrap();
    // Meanwhile the other namespace's S3Bucket makes a bucket of the same name.
    env.apply(&second_ns.name, &manifest("S3Bucket", "data", &bucket))
        .unwrap();

    wait_until(Duration::from_secs(90), "the first S3Bucket gone", || {
        Ok(env.get_json(&first_ns.name, "s3bucket/data")?.is_none())
    })
    .unwrap();
    let ready = wait_for(
        &env,
        &second_ns.name,
        "s3bucket/data",
        "Ready",
        Duration::from_secs(90),
        |b| condition_is(b, "Ready", "True"),
    );
    drop(held);
    assert_eq!(ready["status"]["bucketName"], name.as_str(), "{ready:#}");
    let events = env.events_of(&first_ns.name, "S3Bucket", "data").unwrap();
    let left: Vec<_> = events
        .iter()
        .filter(|e| e["reason"] == "CredentialsLeft")
        .collect();
    assert_eq!(left.len(), 1, "{events:#?}");
    assert!(
        left[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&second_ns.name)),
        "{left:#?}"
    );

    // The user stays, with the second S3Bucket's key only, which works.
    let iam = iam_client(&direct).await;
    assert_eq!(iam_users_of(&iam, &name).await.len(), 1);
    let second = secret_data(&env, &second_ns.name, "data-credentials").unwrap();
    assert_ne!(second["accessKeyId"], first["accessKeyId"]);
    let s3 = client_for(&second);
    s3.put_object()
        .bucket(&name)
        .key("still-mine")
        .body(ByteStream::from_static(b"ok"))
        .send()
        .await
        .expect("the second S3Bucket's keys work after the first one's deletion");
    let code = refused(
        "ListBuckets with the first S3Bucket's key",
        client_for(&first).list_buckets().send().await,
    );
    assert_eq!(
        code, "InvalidAccessKeyId",
        "the first S3Bucket's key is gone"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rotating_a_buckets_keys_replaces_them_and_the_old_key_stops_working() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-rotate").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    let old = ready_bucket(&env, &ns.name);
    let bucket = old["bucket"].clone();
    env.kubectl(&[
        "annotate",
        "--overwrite",
        "-n",
        &ns.name,
        "s3bucket/data",
        "keeper.dev/rotate-credentials=first",
    ])
    .unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3bucket/data",
        "rotation handled and Ready",
        Duration::from_secs(60),
        |b| {
            b["status"]["handledRequests"]["rotateCredentials"] == "first"
                && condition_is(b, "Ready", "True")
        },
    );
    let new = secret_data(&env, &ns.name, "data-credentials").unwrap();
    // One user, one key: the rotation left nothing behind.
    assert_keys_replaced(&env, &bucket, &old, &new).await;
}

/// `new` (the bucket's Secret now) works on `bucket`; `old` (what it carried before) is deleted,
/// and `bucket`'s one IAM user has no key but `new`'s.
async fn assert_keys_replaced(
    env: &Env,
    bucket: &str,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) {
    assert_ne!(new["accessKeyId"], old["accessKeyId"]);
    client_for(new)
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .expect("the new keys work");
    let code = refused(
        "ListObjects with the replaced key",
        client_for(old)
            .list_objects_v2()
            .bucket(bucket)
            .send()
            .await,
    );
    assert_eq!(code, "InvalidAccessKeyId", "the old key is deleted");
    let iam = iam_client(env).await;
    let users = iam_users_of(&iam, bucket).await;
    assert_eq!(users.len(), 1, "{users:?}");
    let keys = iam
        .list_access_keys()
        .user_name(&users[0])
        .send()
        .await
        .unwrap();
    let ids: Vec<&str> = keys
        .access_key_metadata()
        .iter()
        .filter_map(|k| k.access_key_id())
        .collect();
    assert_eq!(ids, [new["accessKeyId"].as_str()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_bucket_secret_is_written_again_at_once_with_new_keys_and_the_old_key_goes() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-secret-deleted").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    let old = ready_bucket(&env, &ns.name);
    let bucket = old["bucket"].clone();
    env.kubectl(&["delete", "secret", "-n", &ns.name, "data-credentials"])
        .unwrap();
    // Well within the resync (5 minutes): the deletion itself wakes the bucket.
    wait_until(
        Duration::from_secs(30),
        "the bucket's Secret written again with new keys",
        || {
            Ok(
                secret_data(&env, &ns.name, "data-credentials").is_ok_and(|s| {
                    s.get("accessKeyId")
                        .is_some_and(|k| *k != old["accessKeyId"])
                }),
            )
        },
    )
    .unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3bucket/data",
        "Ready",
        Duration::from_secs(30),
        |b| condition_is(b, "Ready", "True"),
    );
    let new = secret_data(&env, &ns.name, "data-credentials").unwrap();
    // The key only the deleted Secret carried is deleted: nobody can use or leak it any more.
    assert_keys_replaced(&env, &bucket, &old, &new).await;
}

/// A Secret as an older keeper published it for `owner` (`kind`/`name`), with the provider's keys.
fn old_keeper_secret(env: &Env, ns: &str, kind: &str, owner: &str, name: &str) -> String {
    let obj = env
        .get_json(ns, &format!("{}/{owner}", kind.to_lowercase()))
        .unwrap()
        .unwrap();
    let uid = obj["metadata"]["uid"].as_str().unwrap();
    let (key, secret) = env.admin_keys.clone().unwrap();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  labels: {{app.kubernetes.io/managed-by: keeper}}\n  ownerReferences:\n  - {{apiVersion: keeper.dev/v1alpha1, kind: {kind}, name: {owner}, uid: {uid}}}\nstringData:\n  accessKeyId: {key}\n  secretAccessKey: {secret}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_replaces_the_providers_keys_in_bucket_secrets_and_deletes_the_tenants() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-upgrade").unwrap();
    // What an older keeper left: the provider's keys in the tenant's and the bucket's Secrets.
    env.apply(&ns.name, &manifest("S3Tenant", "t", "  provider: s3\n"))
        .unwrap();
    env.apply(
        &ns.name,
        &manifest("S3Bucket", "data", "  tenantRef: {name: t}\n"),
    )
    .unwrap();
    for (kind, owner, name) in [
        ("S3Tenant", "t", "t-s3-credentials"),
        ("S3Bucket", "data", "data-credentials"),
    ] {
        env.apply(
            &ns.name,
            &old_keeper_secret(&env, &ns.name, kind, owner, name),
        )
        .unwrap();
    }
    let admin = env.admin_keys.clone().unwrap();

    let _keeper = Keeper::start(&env).unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3bucket/data",
        "Ready with keys of its own",
        Duration::from_secs(90),
        |b| condition_is(b, "Ready", "True"),
    );
    let creds = secret_data(&env, &ns.name, "data-credentials").unwrap();
    assert_ne!(
        creds["accessKeyId"], admin.0,
        "the provider's keys are replaced"
    );
    let code = refused(
        "ListBuckets with the bucket's new keys",
        client_for(&creds).list_buckets().send().await,
    );
    assert_eq!(code, "AccessDenied");
    wait_until(
        Duration::from_secs(30),
        "the tenant's Secret with the provider's keys is deleted",
        || Ok(env.get_json(&ns.name, "secret/t-s3-credentials")?.is_none()),
    )
    .unwrap();
}

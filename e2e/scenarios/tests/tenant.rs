//! S3Tenant end to end (issue 4) against the StorageGRID emulator: one account and one key set
//! whatever the crashes, working credentials, and deletion refused while buckets remain.

use std::time::{Duration, Instant};

use keeper_e2e_scenarios::{
    Env, Keeper, accounts_of, condition, condition_is, jitter, s3_client, secret_data,
    storagegrid_debug, storagegrid_state, wait_for, wait_until,
};
use serde_json::{Value, json};

fn tenant(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec:\n  provider: default\n{extra}"
    )
}

fn bucket(name: &str, tenant: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: {name}\nspec:\n  tenantRef:\n    name: {tenant}\n  drain:\n    pollInterval: 1s\n"
    )
}

fn wait_condition(
    env: &Env,
    ns: &str,
    resource: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
) -> Value {
    wait_for(
        env,
        ns,
        resource,
        &format!("{type_}={status}"),
        timeout,
        |o| condition_is(o, type_, status),
    )
}

fn keys_of(env: &Env, account_id: &str) -> Vec<String> {
    let state = storagegrid_state(env).unwrap();
    state["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["accountId"] == account_id)
        .map(|k| k["accessKey"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_survives_ten_sigkills_during_creation_with_one_account_and_one_key_set() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-tenant").unwrap();
    // Slow every management call down so that the kills land inside the create sequence.
    storagegrid_debug(
        &env,
        "POST",
        "/debug/faults",
        json!({"path_prefix": "/api/v4/", "delay_ms": 120, "count": 10000}),
    )
    .unwrap();
    env.apply(&ns.name, &tenant("crashy", "  quota: 10Gi\n"))
        .unwrap();
    for _ in 0..10 {
        let keeper = Keeper::start(&env).unwrap();
        std::thread::sleep(jitter(900));
        keeper.kill();
    }
    storagegrid_debug(&env, "DELETE", "/debug/faults", json!({})).unwrap();

    let keeper = Keeper::start(&env).unwrap();
    let obj = wait_condition(
        &env,
        &ns.name,
        "s3tenant/crashy",
        "Ready",
        "True",
        Duration::from_secs(60),
    );
    let uid = obj["metadata"]["uid"].as_str().unwrap();
    let accounts = accounts_of(&env, uid);
    assert_eq!(accounts.len(), 1, "exactly one account: {accounts:#?}");
    let account_id = accounts[0]["id"].as_str().unwrap();
    assert_eq!(obj["status"]["accountId"], account_id);
    let keys = keys_of(&env, account_id);
    assert_eq!(keys.len(), 1, "exactly one key set: {keys:?}");

    let creds = secret_data(&env, &ns.name, "crashy-s3-credentials").unwrap();
    assert_eq!(creds["accessKeyId"], keys[0]);
    for key in ["accessKeyId", "secretAccessKey", "endpoint", "region"] {
        assert!(
            creds.contains_key(key),
            "{key} missing from the credentials Secret"
        );
    }
    let s3 = s3_client(
        &creds["endpoint"],
        &creds["accessKeyId"],
        &creds["secretAccessKey"],
        &creds["region"],
    );
    s3.create_bucket()
        .bucket(format!("{}-probe", ns.name))
        .send()
        .await
        .expect("the published keys work");
    let listed = s3.list_buckets().send().await.unwrap();
    assert_eq!(listed.buckets().len(), 1);
    s3.delete_bucket()
        .bucket(format!("{}-probe", ns.name))
        .send()
        .await
        .unwrap();

    env.kubectl(&["delete", "-n", &ns.name, "s3tenant/crashy", "--wait=false"])
        .unwrap();
    wait_until(Duration::from_secs(30), "the tenant to go", || {
        Ok(env.get_json(&ns.name, "s3tenant/crashy")?.is_none())
    })
    .unwrap();
    assert!(
        accounts_of(&env, uid).is_empty(),
        "the account went with the tenant"
    );
    drop(keeper);
}

/// Whether the grid signs in the root user of `account` with `password`.
fn root_signs_in(env: &Env, account: &str, password: &str) -> bool {
    keeper_e2e_scenarios::grid_root_sign_in(env, account, password).is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn deleted_tenant_secrets_come_back_with_new_credentials_and_the_old_ones_stop_working() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-tenant-secrets").unwrap();
    let keeper = Keeper::start(&env).unwrap();
    env.apply(&ns.name, &tenant("keys", "")).unwrap();
    let obj = wait_condition(
        &env,
        &ns.name,
        "s3tenant/keys",
        "Ready",
        "True",
        Duration::from_secs(60),
    );
    let account = obj["status"]["accountId"].as_str().unwrap().to_string();
    let root = secret_data(&env, &ns.name, "keys-root-credentials").unwrap();
    let creds = secret_data(&env, &ns.name, "keys-s3-credentials").unwrap();
    assert!(root_signs_in(&env, &account, &root["password"]));

    // kubectl waits until they are gone: a Secret keeper kept Terminating would time it out.
    env.kubectl(&[
        "delete",
        "secret",
        "-n",
        &ns.name,
        "keys-root-credentials",
        "keys-s3-credentials",
        "--timeout=60s",
    ])
    .unwrap();
    let mut written = None;
    wait_until(
        Duration::from_secs(30),
        "both Secrets written again",
        || {
            let new_root = secret_data(&env, &ns.name, "keys-root-credentials").ok();
            let new_creds = secret_data(&env, &ns.name, "keys-s3-credentials").ok();
            written = new_root.zip(new_creds);
            Ok(written.is_some())
        },
    )
    .unwrap();
    let (new_root, new_creds) = written.unwrap();
    assert_ne!(new_root["password"], root["password"]);
    assert!(root_signs_in(&env, &account, &new_root["password"]));
    assert!(
        !root_signs_in(&env, &account, &root["password"]),
        "the deleted password no longer signs in"
    );
    assert_ne!(new_creds["accessKeyId"], creds["accessKeyId"]);
    wait_until(Duration::from_secs(30), "the old key revoked", || {
        Ok(keys_of(&env, &account) == [new_creds["accessKeyId"].clone()])
    })
    .unwrap();
    let events = env.events_of(&ns.name, "S3Tenant", "keys").unwrap();
    assert!(
        events.iter().any(|e| e["reason"] == "SecretDeleted"),
        "{events:#?}"
    );
    wait_condition(
        &env,
        &ns.name,
        "s3tenant/keys",
        "Ready",
        "True",
        Duration::from_secs(30),
    );

    env.kubectl(&["delete", "-n", &ns.name, "s3tenant/keys", "--timeout=60s"])
        .unwrap();
    assert!(
        !keeper_e2e_scenarios::accounts_of(&env, obj["metadata"]["uid"].as_str().unwrap())
            .iter()
            .any(|a| a["id"] == account.as_str()),
        "the account went with the tenant"
    );
    drop(keeper);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_with_buckets_refuses_deletion_until_they_are_gone() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-refuse").unwrap();
    let keeper = Keeper::start_with_webhook(&env).unwrap();
    env.apply(&ns.name, &tenant("t", "")).unwrap();
    let obj = wait_condition(
        &env,
        &ns.name,
        "s3tenant/t",
        "Ready",
        "True",
        Duration::from_secs(60),
    );
    let uid = obj["metadata"]["uid"].as_str().unwrap().to_string();
    for b in ["alpha", "beta"] {
        env.apply(&ns.name, &bucket(b, "t")).unwrap();
    }
    for b in ["alpha", "beta"] {
        wait_condition(
            &env,
            &ns.name,
            &format!("s3bucket/{b}"),
            "Ready",
            "True",
            Duration::from_secs(60),
        );
    }

    // kubectl prints the webhook's warning at once, counting the buckets (the webhook names none:
    // it does not authenticate its caller) with the drain command.
    let out = env
        .kubectl_output(&["delete", "-n", &ns.name, "s3tenant/t", "--wait=false"])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Warning:"),
        "no admission warning: {stderr}"
    );
    for needle in [
        "2 bucket(s)",
        "kubectl describe s3tenant t",
        "keeper.dev/drain=$(date +%s)",
    ] {
        assert!(stderr.contains(needle), "warning lacks {needle}: {stderr}");
    }

    let obj = wait_condition(
        &env,
        &ns.name,
        "s3tenant/t",
        "DeletionBlocked",
        "True",
        Duration::from_secs(30),
    );
    assert!(
        obj["metadata"]["deletionTimestamp"].is_string(),
        "the tenant is Terminating"
    );
    assert_eq!(obj["status"]["phase"], "Deleting");
    assert_eq!(
        condition(&obj, "DeletionBlocked").unwrap()["reason"],
        "BucketsRemain"
    );
    let events = env
        .kubectl(&[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector",
            "involvedObject.name=t,involvedObject.kind=S3Tenant,reason=DeletionBlocked",
            "-o",
            "json",
        ])
        .unwrap();
    let events: Value = serde_json::from_str(&events).unwrap();
    let items = events["items"].as_array().unwrap();
    assert_eq!(
        items.len(),
        1,
        "one DeletionBlocked event, not a storm: {items:#?}"
    );
    assert_eq!(items[0]["type"], "Warning");
    let message = items[0]["message"].as_str().unwrap();
    assert!(
        message.contains("alpha") && message.contains("beta"),
        "{message}"
    );
    assert_eq!(accounts_of(&env, &uid).len(), 1, "the account is intact");

    // Drain and delete the buckets: the tenant and its account follow within seconds.
    for b in ["alpha", "beta"] {
        env.kubectl(&[
            "annotate",
            "-n",
            &ns.name,
            &format!("s3bucket/{b}"),
            "keeper.dev/drain=true",
        ])
        .unwrap();
        env.kubectl(&[
            "delete",
            "-n",
            &ns.name,
            &format!("s3bucket/{b}"),
            "--wait=false",
        ])
        .unwrap();
    }
    let started = Instant::now();
    wait_until(
        Duration::from_secs(60),
        "the buckets and the tenant to go",
        || Ok(env.get_json(&ns.name, "s3tenant/t")?.is_none()),
    )
    .unwrap();
    eprintln!(
        "tenant gone {:?} after the bucket deletions",
        started.elapsed()
    );
    assert!(
        accounts_of(&env, &uid).is_empty(),
        "the account went with the tenant"
    );
    drop(keeper);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_protected_tenant_cannot_be_deleted_until_protection_is_lifted() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-protect").unwrap();
    let keeper = Keeper::start_with_webhook(&env).unwrap();
    env.apply(&ns.name, &tenant("p", "  deletionProtection: true\n"))
        .unwrap();
    wait_condition(
        &env,
        &ns.name,
        "s3tenant/p",
        "Ready",
        "True",
        Duration::from_secs(60),
    );

    let out = env
        .kubectl_output(&["delete", "-n", &ns.name, "s3tenant/p", "--wait=false"])
        .unwrap();
    assert!(
        !out.status.success(),
        "deleting a protected tenant was admitted"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("deletionProtection"), "{stderr}");
    assert!(
        env.get_json(&ns.name, "s3tenant/p").unwrap().unwrap()["metadata"]["deletionTimestamp"]
            .is_null()
    );

    env.kubectl(&[
        "patch",
        "-n",
        &ns.name,
        "s3tenant/p",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"deletionProtection":false}}"#,
    ])
    .unwrap();
    env.kubectl(&["delete", "-n", &ns.name, "s3tenant/p", "--wait=false"])
        .unwrap();
    wait_until(Duration::from_secs(30), "the tenant to go", || {
        Ok(env.get_json(&ns.name, "s3tenant/p")?.is_none())
    })
    .unwrap();
    drop(keeper);
}

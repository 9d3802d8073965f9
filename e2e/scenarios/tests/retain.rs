//! `deletionPolicy: Retain` keeps what the user asked to keep (issue 26, F1, F4/F11): a bucket
//! whose drain start keeper could not record is not emptied by the grid after keeper let go of
//! it, and a namespace deletion does not take the root password of a retained tenant's account
//! or the master password of a retained database.

use std::time::Duration;

use keeper_e2e_scenarios::{
    Env, Keeper, client_for, count_objects, manifest, put_objects, secret_data, storagegrid_state,
    wait_ready, wait_until,
};
use serde_json::Value;

/// The grid's "delete objects" setting of `bucket` (whether the grid is emptying it).
fn grid_draining(env: &Env, bucket: &str) -> Option<bool> {
    storagegrid_state(env).unwrap()["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == bucket)
        .map(|b| b["deleteObjectStatus"]["isDeletingObjects"] == true)
}

/// F1: keeper starts the grid's drain and the status write recording it fails; the bucket is then
/// deleted with `deletionPolicy: Retain`. Keeper asks the grid, not its status, whether it is
/// deleting objects, and turns the drain off before letting go: the objects left stay.
#[tokio::test(flavor = "multi_thread")]
async fn retain_a_bucket_whose_drain_start_was_not_recorded_keeps_its_objects() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-retain-drain").unwrap();
    let n = ns.name.as_str();
    let proxy = env.api_proxy().unwrap();
    let keeper = Keeper::start_through(&env, &proxy).unwrap();
    env.apply(n, &manifest("S3Tenant", "t", "  provider: default\n"))
        .unwrap();
    wait_ready(&env, n, "s3tenant/t");
    env.apply(
        n,
        &manifest(
            "S3Bucket",
            "kept",
            "  tenantRef:\n    name: t\n  deletionPolicy: Retain\n  drain:\n    pollInterval: 1s\n",
        ),
    )
    .unwrap();
    let obj = wait_ready(&env, n, "s3bucket/kept");
    let bucket = obj["status"]["bucketName"].as_str().unwrap().to_string();
    let keys = secret_data(&env, n, "kept-credentials").unwrap();
    let s3 = client_for(&keys);
    // 200 objects/s on the emulator: the drain would run for 20 s.
    put_objects(&s3, &bucket, "o", 4000).await;

    // Every status write of a bucket fails from now on: the drain keeper starts is not recorded.
    proxy.set_faults(
        keeper_e2e_apiproxy::Settings::from_json(serde_json::json!({
            "seed": 1,
            "rules": [{"resource": "s3buckets/status", "share": 1.0, "codes": [500],
                       "verbs": ["patch", "update"]}]
        }))
        .unwrap(),
    );
    env.kubectl(&[
        "annotate",
        "-n",
        n,
        "s3bucket/kept",
        "keeper.dev/drain=once",
    ])
    .unwrap();
    wait_until(Duration::from_secs(60), "the grid to drain", || {
        Ok(grid_draining(&env, &bucket) == Some(true))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", keeper.log_text()));
    let obj = env.get_json(n, "s3bucket/kept").unwrap().unwrap();
    assert!(
        obj["status"]["drainStatus"].is_null(),
        "the drain must not be recorded for this scenario: {obj:#}"
    );

    env.kubectl(&["delete", "-n", n, "s3bucket/kept", "--wait=false"])
        .unwrap();
    // Long enough for a release that needs no status write; then the writes work again.
    std::thread::sleep(Duration::from_secs(3));
    proxy.clear_faults();
    wait_until(Duration::from_secs(60), "the S3Bucket to go", || {
        Ok(env.get_json(n, "s3bucket/kept")?.is_none())
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", keeper.log_text()));

    assert_eq!(
        grid_draining(&env, &bucket),
        Some(false),
        "the grid still empties the retained bucket\n{}",
        keeper.log_text()
    );
    let left = count_objects(&s3, &bucket).await.expect("the bucket stays");
    assert!(left > 0, "the retained bucket was emptied");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        count_objects(&s3, &bucket).await,
        Some(left),
        "objects of the retained bucket were deleted after keeper let go of it"
    );
    // Said in keeper's log (the event goes out with a status write, which is what failed here).
    assert!(
        keeper
            .log_text()
            .contains("although no drain is recorded in its status"),
        "{}",
        keeper.log_text()
    );
}

fn namespace_gone(env: &Env, ns: &str) -> anyhow::Result<bool> {
    let out = env.kubectl_output(&["get", "namespace", ns, "-o", "name"])?;
    Ok(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound"))
}

/// The copy keeper keeps in its namespace of `role` of the resource with `uid`, and its metadata.
fn retained_copy(
    env: &Env,
    uid: &str,
    role: &str,
) -> (std::collections::BTreeMap<String, String>, Value) {
    let name = format!("retained-{uid}-{role}");
    let data = secret_data(env, &env.operator_namespace, &name)
        .unwrap_or_else(|e| panic!("no copy {name} in keeper's namespace: {e:#}"));
    let secret = env
        .get_json(&env.operator_namespace, &format!("secret/{name}"))
        .unwrap()
        .unwrap();
    (data, secret["metadata"].clone())
}

/// F4/F11: deleting the namespace of a retained StorageGRID tenant and a retained database takes
/// every Secret in it, released or not. The account and the instance stay, and their passwords
/// are in keeper's namespace, where docs/operations.md says to look: the grid accepts the root
/// password, and the master password is the one the instance was created with.
#[tokio::test(flavor = "multi_thread")]
async fn retain_a_namespace_deletion_keeps_the_root_and_master_passwords_in_keepers_namespace() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-retain-ns").unwrap();
    let n = ns.name.as_str();
    let keeper = Keeper::start(&env).unwrap();
    keeper_e2e_scenarios::moto_start_recording(&env).unwrap();
    env.apply(
        n,
        &manifest(
            "S3Tenant",
            "grid",
            "  provider: default\n  deletionPolicy: Retain\n",
        ),
    )
    .unwrap();
    env.apply(
        n,
        &manifest(
            "CloudDatabase",
            "db",
            "  engine: postgres\n  size: small\n  databaseName: app\n  deletionPolicy: Retain\n",
        ),
    )
    .unwrap();
    let tenant = wait_ready(&env, n, "s3tenant/grid");
    let tenant_uid = tenant["metadata"]["uid"].as_str().unwrap().to_string();
    let account = tenant["status"]["accountId"].as_str().unwrap().to_string();
    let db = wait_ready(&env, n, "clouddatabase/db");
    let db_uid = db["metadata"]["uid"].as_str().unwrap().to_string();
    let instance = db["status"]["instanceId"].as_str().unwrap().to_string();
    let root = secret_data(&env, n, "grid-root-credentials").unwrap();

    env.kubectl(&["delete", "namespace", n, "--wait=false"])
        .unwrap();
    wait_until(Duration::from_secs(180), "the namespace to go", || {
        namespace_gone(&env, n)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", keeper.log_text()));

    // The account stays, and its root password is in keeper's namespace, labelled with what it
    // belongs to; the grid accepts it.
    let state = storagegrid_state(&env).unwrap();
    assert!(
        state["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == account.as_str()),
        "the retained account is gone"
    );
    let (copy, meta) = retained_copy(&env, &tenant_uid, "root-credentials");
    assert_eq!(copy["password"], root["password"]);
    let labels = &meta["labels"];
    assert_eq!(labels["keeper.dev/retained-kind"], "S3Tenant");
    assert_eq!(labels["keeper.dev/retained-namespace"], n);
    assert_eq!(labels["keeper.dev/retained-name"], "grid");
    assert_eq!(
        meta["annotations"]["keeper.dev/retained-backend-id"],
        account.as_str()
    );
    let token = keeper_e2e_scenarios::grid_root_sign_in(&env, &account, &copy["password"])
        .expect("the grid accepts the retained root password");
    assert!(!token.is_null(), "{token}");
    // Found by the labels docs/operations.md gives.
    let listed = env
        .kubectl(&[
            "get",
            "secret",
            "-n",
            &env.operator_namespace,
            "-l",
            &format!("keeper.dev/retained-namespace={n}"),
            "-o",
            "name",
        ])
        .unwrap();
    for expected in [
        format!("secret/retained-{tenant_uid}-root-credentials"),
        format!("secret/retained-{db_uid}-connection"),
    ] {
        assert!(listed.contains(&expected), "{expected} not in\n{listed}");
    }

    // The instance stays, and the master password in keeper's copy is the one RDS was given.
    let rds = keeper_e2e_scenarios::rds_client(&env).await;
    rds.describe_db_instances()
        .db_instance_identifier(&instance)
        .send()
        .await
        .expect("the retained instance stays");
    let (copy, meta) = retained_copy(&env, &db_uid, "connection");
    assert_eq!(meta["labels"]["keeper.dev/retained-kind"], "CloudDatabase");
    assert_eq!(
        meta["annotations"]["keeper.dev/retained-backend-id"],
        instance.as_str()
    );
    let sent = keeper_e2e_scenarios::master_password_sent(&env, &instance)
        .unwrap()
        .expect("a password was sent to RDS");
    assert_eq!(
        copy["password"], sent,
        "the copy's password is not the instance's"
    );

    // Each copy says so in an event in keeper's namespace (the tenant's namespace was gone).
    for copy in [
        format!("retained-{tenant_uid}-root-credentials"),
        format!("retained-{db_uid}-connection"),
    ] {
        let events = env
            .events_of(&env.operator_namespace, "Secret", &copy)
            .unwrap();
        assert!(
            events
                .iter()
                .any(|e| e["reason"] == "RetainedCredentialsCopied"),
            "{copy}: {events:#?}"
        );
    }
    env.kubectl(&[
        "delete",
        "secret",
        "-n",
        &env.operator_namespace,
        "-l",
        &format!("keeper.dev/retained-namespace={n}"),
    ])
    .unwrap();
}

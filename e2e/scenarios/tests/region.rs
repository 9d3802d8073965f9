//! A CloudDatabase is pinned to the region it was created in (audit F8): keeper restarted with
//! another RDS region reports the mismatch, naming both regions, and neither creates a second
//! instance nor lets the resource go; back in the right region the deletion completes.

use std::time::Duration;

use keeper_e2e_scenarios::{
    Env, Keeper, condition, condition_is, moto_recorded_calls, moto_start_recording, wait_for,
};
use serde_json::Value;

const HOME: &str = "us-east-1";
const OTHER: &str = "eu-west-1";

/// The stack's configuration with `rds.region` set to `region`.
fn config_in(env: &Env, region: &str) -> Env {
    let config = std::fs::read_to_string(&env.keeper_config).unwrap();
    let home = format!("rds:\n  region: {HOME}\n");
    assert!(
        config.contains(&home),
        "unexpected stack configuration:\n{config}"
    );
    let path = std::env::temp_dir().join(format!(
        "keeper-e2e-region-{region}-{}.yaml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        config.replace(&home, &format!("rds:\n  region: {region}\n")),
    )
    .unwrap();
    let mut moved = env.clone();
    moved.keeper_config = path;
    moved
}

fn reason(obj: &Value, type_: &str) -> String {
    condition(obj, type_)
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_is_never_recreated_in_another_region_nor_released_from_it() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-region").unwrap();
    let keeper = Keeper::start(&env).unwrap();
    env.apply(
        &ns.name,
        "apiVersion: keeper.dev/v1alpha1\nkind: CloudDatabase\nmetadata:\n  name: pinned\nspec:\n  engine: postgres\n  size: small\n  deletionPolicy: Delete\n",
    )
    .unwrap();
    let ready = wait_for(
        &env,
        &ns.name,
        "clouddatabase/pinned",
        "Ready",
        Duration::from_secs(90),
        |o| condition_is(o, "Ready", "True"),
    );
    assert_eq!(ready["status"]["region"], HOME, "{ready:#}");
    assert!(ready["status"]["accountId"].is_string(), "{ready:#}");
    let id = ready["status"]["instanceId"].as_str().unwrap().to_string();
    drop(keeper);

    moto_start_recording(&env).unwrap();
    let moved = config_in(&env, OTHER);
    let keeper = Keeper::start(&moved).unwrap();
    let failed = wait_for(
        &env,
        &ns.name,
        "clouddatabase/pinned",
        "Failed with RegionMismatch",
        Duration::from_secs(60),
        |o| o["status"]["phase"] == "Failed" && reason(o, "Ready") == "RegionMismatch",
    );
    let message = condition(&failed, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(HOME) && message.contains(OTHER) && message.contains(&id),
        "{message}"
    );

    // Deleting it in the wrong region is held: "not found" there proves nothing.
    env.kubectl(&[
        "delete",
        "-n",
        &ns.name,
        "clouddatabase/pinned",
        "--wait=false",
    ])
    .unwrap();
    let held = wait_for(
        &env,
        &ns.name,
        "clouddatabase/pinned",
        "DeletionBlocked with RegionMismatch",
        Duration::from_secs(60),
        |o| reason(o, "DeletionBlocked") == "RegionMismatch",
    );
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    let calls = moto_recorded_calls(&env).unwrap();
    assert!(
        calls
            .iter()
            .all(|c| c.get("DBInstanceIdentifier") != Some(&id)),
        "RDS was not asked about {id} in {OTHER}: {calls:#?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| c.get("Action").map(String::as_str) == Some("CreateDBInstance")),
        "no second instance: {calls:#?}"
    );
    drop(keeper);
    let _ = std::fs::remove_file(&moved.keeper_config);

    // Back in its region, keeper deletes it and lets the resource go.
    let _keeper = Keeper::start(&env).unwrap();
    keeper_e2e_scenarios::wait_until(Duration::from_secs(90), "the database to go", || {
        Ok(env.get_json(&ns.name, "clouddatabase/pinned")?.is_none())
    })
    .unwrap();
}

//! keeper pins the backend it created things on (audit 2, N5). A Ready tenant with a bucket on
//! the StorageGRID emulator, and a Ready bucket on the S3-compatible store: keeper restarted with
//! the providers' endpoints pointing at a second, empty grid and a second, empty store (a changed
//! endpoint, a DNS switch to a disaster-recovery grid) creates nothing there: the tenant and the
//! bucket report `BackendIdentityChanged`, naming both backends. A person confirming the new grid
//! (`keeper.dev/confirm-backend-identity`) lets keeper create the account there.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use keeper_e2e_scenarios::{
    Env, Keeper, condition, condition_is, debug_call, free_port, s3_client, storagegrid_state,
    wait_for, wait_until,
};
use serde_json::Value;

const REASON: &str = "BackendIdentityChanged";

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run with e2e/run-e2e.sh"))
}

/// A process this scenario started, killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `path` to hold something, and returns it.
fn ready_file(path: &Path, what: &str) -> String {
    wait_until(Duration::from_secs(30), what, || {
        Ok(std::fs::read_to_string(path).is_ok_and(|s| !s.is_empty()))
    })
    .unwrap();
    std::fs::read_to_string(path).unwrap()
}

/// A second, empty StorageGRID emulator (a grid of its own: another grid id) with the stack's
/// admin credentials, so that keeper signs in to it as to the first: `(process, management URL,
/// S3 URL)`.
fn second_grid(env: &Env, moto: &str) -> (Process, String, String) {
    let bin = env
        .keeper_bin
        .parent()
        .unwrap()
        .join("keeper-e2e-storagegrid");
    let ready = temp("grid2.ready");
    let child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0"])
        .args(["--moto-endpoint", moto])
        .args(["--admin-user", &var("KEEPER_STORAGEGRID_ADMIN_USER")])
        .args([
            "--admin-password",
            &var("KEEPER_STORAGEGRID_ADMIN_PASSWORD"),
        ])
        .args(["--grid-id", "disaster-recovery-grid"])
        .arg("--ready-file")
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let process = Process(child);
    let urls: Value = serde_json::from_str(&ready_file(&ready, "the second grid")).unwrap();
    let _ = std::fs::remove_file(&ready);
    (
        process,
        urls["management"].as_str().unwrap().to_string(),
        urls["s3"].as_str().unwrap().to_string(),
    )
}

/// A second, empty moto: the S3-compatible store keeper is pointed at instead.
fn second_store() -> (Process, String) {
    let port = free_port().unwrap();
    let child = Command::new(var("KEEPER_MOTO_SERVER"))
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let probe = format!("{url}/moto-api/");
    wait_until(Duration::from_secs(30), "the second store", || {
        Ok(keeper_e2e_scenarios::http_get(&probe).is_some_and(|(status, _)| status == 200))
    })
    .unwrap();
    (Process(child), url)
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("keeper-e2e-identity-{}-{name}", std::process::id()))
}

/// The stack's configuration with the StorageGRID provider's endpoints replaced by `grid`'s and
/// the S3-compatible provider's (S3 and IAM) by `store`; RDS stays.
fn moved_config(env: &Env, grid: (&str, &str), store: &str) -> PathBuf {
    let config = std::fs::read_to_string(&env.keeper_config).unwrap();
    let s3 = env.s3_endpoint.clone().unwrap();
    let replacements = [
        (
            format!("adminEndpoint: {}\n", var("KEEPER_STORAGEGRID_ENDPOINT")),
            format!("adminEndpoint: {}\n", grid.0),
        ),
        (
            format!("s3Endpoint: {}\n", var("KEEPER_STORAGEGRID_S3_ENDPOINT")),
            format!("s3Endpoint: {}\n", grid.1),
        ),
        // The provider's endpoint, indented under `s3Compatible:` (rds.endpoint is not).
        (
            format!("      endpoint: {s3}\n"),
            format!("      endpoint: {store}\n"),
        ),
        (
            format!("iam: {{endpoint: {s3}}}"),
            format!("iam: {{endpoint: {store}}}"),
        ),
    ];
    let mut moved = config.clone();
    for (from, to) in &replacements {
        assert!(moved.contains(from.as_str()), "{from:?} not in:\n{config}");
        moved = moved.replace(from.as_str(), to);
    }
    let path = temp("keeper.yaml");
    std::fs::write(&path, moved).unwrap();
    path
}

fn reason(obj: &Value) -> String {
    condition(obj, "Ready")
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn message(obj: &Value) -> String {
    condition(obj, "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn keeper_creates_nothing_on_another_backend_behind_a_changed_endpoint() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-identity").unwrap();
    let keeper = Keeper::start(&env).unwrap();
    env.apply(
        &ns.name,
        &manifest("S3Tenant", "grid", "  provider: default\n"),
    )
    .unwrap();
    env.apply(
        &ns.name,
        &manifest("S3Bucket", "grid-data", "  tenantRef: {name: grid}\n"),
    )
    .unwrap();
    env.apply(&ns.name, &manifest("S3Tenant", "store", "  provider: s3\n"))
        .unwrap();
    env.apply(
        &ns.name,
        &manifest("S3Bucket", "store-data", "  tenantRef: {name: store}\n"),
    )
    .unwrap();
    for bucket in ["s3bucket/grid-data", "s3bucket/store-data"] {
        wait_for(
            &env,
            &ns.name,
            bucket,
            "Ready",
            Duration::from_secs(120),
            |b| condition_is(b, "Ready", "True"),
        );
    }
    let grid_id = storagegrid_state(&env).unwrap()["gridId"]
        .as_str()
        .unwrap()
        .to_string();
    let tenant = env.get_json(&ns.name, "s3tenant/grid").unwrap().unwrap();
    let recorded = format!("storagegrid:{grid_id}");
    assert_eq!(
        tenant["status"]["backendIdentity"],
        recorded.as_str(),
        "{tenant:#}"
    );
    let bucket = env
        .get_json(&ns.name, "s3bucket/store-data")
        .unwrap()
        .unwrap();
    let recorded_store = bucket["status"]["backendIdentity"]
        .as_str()
        .unwrap_or_else(|| panic!("no store recorded: {bucket:#}"))
        .to_string();
    assert!(
        recorded_store.starts_with(&format!(
            "s3:{} owner=",
            env.s3_endpoint.as_deref().unwrap()
        )),
        "{recorded_store}"
    );
    drop(keeper);

    // The endpoints now reach another grid and another store, both empty.
    let (store_process, store) = second_store();
    let (grid_process, grid_admin, grid_s3) = second_grid(&env, env.moto_url.as_deref().unwrap());
    let config = moved_config(&env, (&grid_admin, &grid_s3), &store);
    let keeper = Keeper::start_with_config(&env, &config).unwrap();

    let refused = wait_for(
        &env,
        &ns.name,
        "s3tenant/grid",
        REASON,
        Duration::from_secs(90),
        |t| reason(t) == REASON,
    );
    let text = message(&refused);
    assert!(
        text.contains(&recorded)
            && text.contains("storagegrid:disaster-recovery-grid")
            && text.contains("keeper.dev/confirm-backend-identity"),
        "{text}"
    );
    assert_eq!(refused["status"]["phase"], "Failed", "{refused:#}");
    let refused = wait_for(
        &env,
        &ns.name,
        "s3bucket/store-data",
        REASON,
        Duration::from_secs(90),
        |b| reason(b) == REASON,
    );
    let text = message(&refused);
    assert!(
        text.contains(&recorded_store) && text.contains(&format!("s3:{store} owner=")),
        "{text}"
    );
    let warned = env
        .events_of(&ns.name, "S3Tenant", "grid")
        .unwrap()
        .iter()
        .any(|e| e["reason"] == REASON && e["type"] == "Warning");
    assert!(warned, "a Warning event says so");

    // Nothing was created on either: give the bucket of the grid tenant time to act too.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let grid2 = debug_call("GET", format!("{grid_admin}/debug/state"), None).unwrap();
    assert_eq!(grid2["accounts"], Value::Array(vec![]), "{grid2:#}");
    assert_eq!(grid2["buckets"], Value::Array(vec![]), "{grid2:#}");
    let store2 = s3_client(&store, "any", "any", "us-east-1");
    let buckets = store2.list_buckets().send().await.unwrap();
    assert!(buckets.buckets().is_empty(), "{buckets:?}");

    // A person confirms the new grid: keeper creates the account there and records that grid.
    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3tenant/grid",
        "keeper.dev/confirm-backend-identity=storagegrid:disaster-recovery-grid",
    ])
    .unwrap();
    let ready = wait_for(
        &env,
        &ns.name,
        "s3tenant/grid",
        "Ready on the confirmed grid",
        Duration::from_secs(90),
        |t| condition_is(t, "Ready", "True"),
    );
    assert_eq!(
        ready["status"]["backendIdentity"], "storagegrid:disaster-recovery-grid",
        "{ready:#}"
    );
    let grid2 = debug_call("GET", format!("{grid_admin}/debug/state"), None).unwrap();
    assert_eq!(grid2["accounts"].as_array().unwrap().len(), 1, "{grid2:#}");

    // Deleting the bucket while keeper reaches the other store: that store's "not found" is not
    // "already deleted", so the finalizer stays (the original would be left behind untracked).
    env.kubectl(&[
        "delete",
        "-n",
        &ns.name,
        "s3bucket/store-data",
        "--wait=false",
    ])
    .unwrap();
    let held = wait_for(
        &env,
        &ns.name,
        "s3bucket/store-data",
        "its deletion held",
        Duration::from_secs(90),
        |b| message(b).contains("keeps the finalizer"),
    );
    let live = message(&held)
        .split("keeper.dev/confirm-backend-identity=")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no confirming command: {held:#}"))
        .to_string();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        env.get_json(&ns.name, "s3bucket/store-data")
            .unwrap()
            .is_some(),
        "the finalizer stays"
    );
    // A person says the original store is gone for good: the deletion completes.
    env.kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "s3bucket/store-data",
        &format!("keeper.dev/confirm-backend-identity={live}"),
    ])
    .unwrap();
    wait_until(Duration::from_secs(90), "the bucket released", || {
        Ok(env.get_json(&ns.name, "s3bucket/store-data")?.is_none())
    })
    .unwrap();

    drop(keeper);
    drop(grid_process);
    drop(store_process);
    let _ = std::fs::remove_file(&config);
}

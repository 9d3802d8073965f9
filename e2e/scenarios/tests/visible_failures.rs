//! A failure keeper retries shows on the object (issue 27, "Failures must show on the object"):
//! a tenant on a provider nothing answers for gets `Ready=False` and `Synced=False` with the
//! backend's error within a minute, one Warning event, and no status write per retry; `kubectl
//! wait` and kstatus (the rules Flux applies) judge it, a Ready tenant and a stalled one as a
//! user's tools would.

use std::process::Command;
use std::time::{Duration, Instant};

use keeper_e2e_scenarios::{Env, Keeper, condition, condition_is, wait_for};
use serde_json::Value;

/// A StorageGRID provider at a port nothing listens on (1, tcpmux: only root could bind it, and
/// nothing here does): every call is refused at once, as with a grid that is down.
const UNREACHABLE: &str = "storageGrid:
  adminEndpoint: http://127.0.0.1:1
  adminCredentialsSecret: {name: storagegrid-admin}
  s3Endpoint: http://127.0.0.1:1
  region: us-east-1
  tls: {allowPlainHttp: true}
";

fn tenant(name: &str, provider: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec:\n  provider: {provider}\n"
    )
}

/// kstatus' verdict on an object of a kind it has no rules of its own for: its generic rules
/// (sigs.k8s.io/cli-utils/pkg/kstatus/status), which Flux's health checks apply.
fn kstatus(obj: &Value) -> &'static str {
    if obj["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating";
    }
    let generation = obj["metadata"]["generation"].as_i64();
    let observed = obj["status"]["observedGeneration"].as_i64();
    if observed.is_some() && observed != generation {
        return "InProgress";
    }
    if condition_is(obj, "Reconciling", "True") {
        return "InProgress";
    }
    if condition_is(obj, "Stalled", "True") {
        return "Failed";
    }
    "Current"
}

fn warnings(env: &Env, ns: &str, name: &str) -> Vec<Value> {
    env.events_of(ns, "S3Tenant", name)
        .unwrap()
        .into_iter()
        .filter(|e| e["type"] == "Warning")
        .collect()
}

/// Whether `kubectl wait --for=condition=...` succeeds within `seconds`.
fn kubectl_wait(env: &Env, ns: &str, resource: &str, condition: &str, seconds: u32) -> bool {
    env.kubectl_output(&[
        "wait",
        "-n",
        ns,
        resource,
        &format!("--for=condition={condition}"),
        &format!("--timeout={seconds}s"),
    ])
    .unwrap()
    .status
    .success()
}

#[test]
fn a_tenant_on_an_unreachable_provider_shows_the_error_once_and_tools_judge_it() {
    let env = Env::from_env().unwrap();
    let config = env
        .config_with_provider("unreachable", UNREACHABLE)
        .unwrap();
    let keeper = Keeper::start_with_config(&env, &config).unwrap();
    let ns = env.namespace("e2e-visible").unwrap();

    env.apply(&ns.name, &tenant("down", "unreachable")).unwrap();
    let started = Instant::now();
    let shown = wait_for(
        &env,
        &ns.name,
        "s3tenant/down",
        "Synced=False with the backend's error",
        Duration::from_secs(60),
        |o| condition_is(o, "Synced", "False"),
    );
    eprintln!("shown after {:?}", started.elapsed());
    let synced = condition(&shown, "Synced").unwrap();
    assert_eq!(synced["reason"], "BackendError", "{shown:#}");
    let message = synced["message"].as_str().unwrap();
    assert!(
        message.contains("127.0.0.1:1") || message.contains("connect"),
        "the message names what failed: {message}"
    );
    let ready = condition(&shown, "Ready").expect("a Ready condition");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&Value::from("False"), &Value::from("BackendError"))
    );
    assert!(condition_is(&shown, "Reconciling", "True"), "{shown:#}");
    assert!(
        condition(&shown, "Stalled").is_none(),
        "retrying, not stalled"
    );

    // keeper goes on retrying (backoff from 1 s), and neither writes the status again nor
    // publishes another event while the reason stays: a failure that repeats is shown once.
    let version = shown["metadata"]["resourceVersion"].clone();
    std::thread::sleep(Duration::from_secs(12));
    let later = env.get_json(&ns.name, "s3tenant/down").unwrap().unwrap();
    assert_eq!(
        later["metadata"]["resourceVersion"], version,
        "no write per retry: {later:#}"
    );
    let events = warnings(&env, &ns.name, "down");
    assert_eq!(events.len(), 1, "one Warning event: {events:#?}");
    assert_eq!(events[0]["reason"], "BackendError");
    assert_eq!(
        events[0]["count"].as_i64().unwrap_or(1),
        1,
        "not repeated into a series: {events:#?}"
    );
    let log = keeper.log_text();
    assert!(
        log.matches("reconcile failed").count() >= 4,
        "keeper retried meanwhile:\n{log}"
    );

    // What a user's tools say: kubectl wait does not see it Ready, sees it not Ready and not
    // synced; kstatus says in progress (keeper retries), not failed.
    assert!(!kubectl_wait(&env, &ns.name, "s3tenant/down", "Ready", 3));
    assert!(kubectl_wait(
        &env,
        &ns.name,
        "s3tenant/down",
        "Ready=False",
        10
    ));
    assert!(kubectl_wait(
        &env,
        &ns.name,
        "s3tenant/down",
        "Synced=False",
        10
    ));
    assert_eq!(kstatus(&later), "InProgress");
    // `kubectl get` shows it too, in the READY and REASON columns.
    let row = env
        .kubectl(&["get", "-n", &ns.name, "s3tenant", "down", "--no-headers"])
        .unwrap();
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert!(
        columns.windows(2).any(|w| w == ["False", "BackendError"]),
        "{row}"
    );

    // A tenant that works is Current; one that only a change can fix is Failed (stalled).
    env.apply(&ns.name, &tenant("up", "default")).unwrap();
    env.apply(&ns.name, &tenant("nowhere", "no-such-provider"))
        .unwrap();
    assert!(kubectl_wait(&env, &ns.name, "s3tenant/up", "Ready", 60));
    let up = env.get_json(&ns.name, "s3tenant/up").unwrap().unwrap();
    assert!(condition_is(&up, "Synced", "True"), "{up:#}");
    assert_eq!(kstatus(&up), "Current", "{up:#}");
    let stalled = wait_for(
        &env,
        &ns.name,
        "s3tenant/nowhere",
        "Stalled",
        Duration::from_secs(60),
        |o| condition_is(o, "Stalled", "True"),
    );
    assert_eq!(
        condition(&stalled, "Stalled").unwrap()["reason"],
        "ProviderNotConfigured"
    );
    assert_eq!(kstatus(&stalled), "Failed", "{stalled:#}");

    // Cleanup: the working tenant goes the normal way; the unreachable one cannot be cleaned up
    // (its provider never answers), so, with keeper stopped, its finalizers are released as the
    // docs/operations.md (Day 2) says to for a backend gone for good. The command looks for
    // keeper's Lease in every namespace (by a name no other scenario uses, so that none of
    // theirs counts).
    env.kubectl(&[
        "delete",
        "-n",
        &ns.name,
        "s3tenant",
        "up",
        "nowhere",
        "--timeout=60s",
    ])
    .unwrap();
    env.kubectl(&["delete", "-n", &ns.name, "s3tenant", "down", "--wait=false"])
        .unwrap();
    drop(keeper);
    // Run as a person would, with their kubeconfig (it lists Leases in every namespace).
    let release = |force: bool| {
        Command::new(&env.keeper_bin)
            .args([
                "release-finalizers",
                "--kind",
                "s3tenant",
                "--namespace",
                &ns.name,
            ])
            .args(["--lease-name", "e2e-visible-failures", "--confirm"])
            .args(force.then_some("--force"))
            .env("KUBECONFIG", &env.kubeconfig)
            .output()
            .unwrap()
    };
    // The keeper of this scenario ran without leader election: it held no Lease, so the command
    // cannot tell it stopped, and refuses until told.
    let refused = release(false);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "released without a Lease");
    assert!(
        said.contains("no keeper election Lease") && said.contains("--force"),
        "{said}"
    );
    assert!(
        condition_is(
            &env.get_json(&ns.name, "s3tenant/down").unwrap().unwrap(),
            "Synced",
            "False"
        ),
        "nothing released"
    );
    let released = release(true);
    assert!(
        released.status.success(),
        "{}",
        String::from_utf8_lossy(&released.stderr)
    );
    wait_for(
        &env,
        &ns.name,
        "s3tenant/down",
        "gone",
        Duration::from_secs(30),
        |o| o.is_null(),
    );
    let _ = std::fs::remove_file(config);
}

//! `kubectl keeper` (issue 27) as a user runs it: through kubectl, which finds the
//! `kubectl-keeper` binary on PATH (built next to keeper), with the admin's kubeconfig. `rotate`
//! publishes new keys and ends; `drain` empties a bucket and ends; `release-finalizers` lists; a
//! tenant held by a bucket says why and what to run, and the commands it gives (delete the
//! bucket, drain it) let the tenant go.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use keeper_e2e_scenarios::{
    Env, Keeper, client_for, condition, condition_is, count_objects, put_objects, secret_data,
    wait_for, wait_until,
};

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// The directory the plugin was built into: beside keeper.
fn plugin_dir(env: &Env) -> PathBuf {
    let dir = env
        .keeper_bin
        .parent()
        .expect("KEEPER_BIN is a file in a directory")
        .to_path_buf();
    assert!(
        dir.join("kubectl-keeper").is_file(),
        "no kubectl-keeper beside {} (cargo build -p keeper builds both)",
        env.keeper_bin.display()
    );
    dir
}

/// `kubectl keeper ARGS`, with the plugin's directory first on PATH; its output and exit status
/// (stdout is no terminal: the plain-lines display).
fn kubectl_keeper(env: &Env, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        plugin_dir(env).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("kubectl")
        .arg("keeper")
        .args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .env("PATH", path)
        .output()
        .expect("kubectl runs")
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ready(env: &Env, ns: &str, resource: &str) -> serde_json::Value {
    wait_for(env, ns, resource, "Ready", Duration::from_secs(60), |o| {
        condition_is(o, "Ready", "True")
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_keeper_rotates_drains_lists_and_says_what_lets_a_blocked_tenant_go() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-plugin").unwrap();
    let ns = ns.name.as_str();
    let _keeper = Keeper::start(&env).unwrap();
    env.apply(ns, &manifest("S3Tenant", "t", "  provider: default\n"))
        .unwrap();
    ready(&env, ns, "s3tenant/t");
    env.apply(
        ns,
        &manifest(
            "S3Bucket",
            "b",
            "  tenantRef:\n    name: t\n  drain:\n    pollInterval: 1s\n",
        ),
    )
    .unwrap();
    let bucket = ready(&env, ns, "s3bucket/b");
    let name = bucket["status"]["bucketName"].as_str().unwrap().to_string();
    let creds = secret_data(&env, ns, "b-credentials").unwrap();
    let s3 = client_for(&creds);
    put_objects(&s3, &name, "data", 40).await;

    // rotate: new keys published, the bucket Ready, before it returns.
    let out = kubectl_keeper(&env, &["rotate", "b", "-n", ns, "--timeout", "2m"]);
    assert!(out.status.success(), "{}", text(&out));
    let rotated = secret_data(&env, ns, "b-credentials").unwrap();
    assert_ne!(
        rotated["accessKeyId"], creds["accessKeyId"],
        "new keys are published"
    );
    let s3 = client_for(&rotated);

    // drain: a new request, followed until keeper has emptied the bucket.
    let out = kubectl_keeper(&env, &["drain", "b", "-n", ns, "--timeout", "2m"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("done"),
        "{}",
        text(&out)
    );
    assert_eq!(
        count_objects(&s3, &name).await,
        Some(0),
        "the bucket is empty once drain returns"
    );
    let bucket = env.get_json(ns, "s3bucket/b").unwrap().unwrap();
    let annotations = &bucket["metadata"]["annotations"];
    assert!(annotations["keeper.dev/drain"].is_string(), "{bucket:#}");
    assert_eq!(
        annotations["keeper.dev/drain-handled"], annotations["keeper.dev/drain"],
        "{bucket:#}"
    );
    // Written again: the tenant's deletion below waits for a bucket that holds objects.
    put_objects(&s3, &name, "again", 5).await;

    // release-finalizers as `keeper` has it: lists, touches nothing without --confirm.
    let out = kubectl_keeper(
        &env,
        &[
            "release-finalizers",
            "--kind",
            "s3bucket",
            "-n",
            ns,
            "--lease-name",
            &format!("no-leader-{}", std::process::id()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("keeper.dev/bucket-cleanup"),
        "{}",
        text(&out)
    );

    // A tenant held by its bucket: `why` names the block and the command that lifts it.
    env.kubectl(&["delete", "-n", ns, "s3tenant/t", "--wait=false"])
        .unwrap();
    let tenant = wait_for(
        &env,
        ns,
        "s3tenant/t",
        "DeletionBlocked",
        Duration::from_secs(30),
        |o| condition_is(o, "DeletionBlocked", "True"),
    );
    assert_eq!(
        condition(&tenant, "DeletionBlocked").unwrap()["reason"],
        "BucketsRemain"
    );
    let out = kubectl_keeper(&env, &["why", "s3tenant/t", "-n", ns]);
    assert!(out.status.success(), "{}", text(&out));
    let why = String::from_utf8_lossy(&out.stdout);
    let delete = format!("kubectl delete s3bucket b -n {ns} --wait=false");
    for needle in [
        "Deletion: blocked (BucketsRemain)",
        "S3Buckets of this tenant: b",
        &format!("Next: {delete}"),
    ] {
        assert!(why.contains(needle), "{needle:?} missing:\n{}", text(&out));
    }
    let out = kubectl_keeper(&env, &["status", "-n", ns]);
    assert!(out.status.success(), "{}", text(&out));
    let status = String::from_utf8_lossy(&out.stdout);
    let tenant_line = status.lines().find(|l| l.starts_with("s3tenant/t "));
    assert!(
        tenant_line.is_some_and(|l| l.contains("BucketsRemain") && l.contains(&delete)),
        "{}",
        text(&out)
    );
    assert!(
        status.lines().any(|l| l.starts_with("s3bucket/b ")),
        "{}",
        text(&out)
    );
    let out = kubectl_keeper(&env, &["why", "s3bucket/missing", "-n", ns]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("s3bucket/missing not found"),
        "{}",
        text(&out)
    );

    // The commands it gives, as a user runs them: the bucket deleted, held by its objects...
    env.kubectl(&["delete", "-n", ns, "s3bucket/b", "--wait=false"])
        .unwrap();
    wait_for(
        &env,
        ns,
        "s3bucket/b",
        "DeletionBlocked",
        Duration::from_secs(30),
        |o| condition_is(o, "DeletionBlocked", "True"),
    );
    let out = kubectl_keeper(&env, &["why", "s3bucket/b", "-n", ns]);
    assert!(out.status.success(), "{}", text(&out));
    let why = String::from_utf8_lossy(&out.stdout);
    assert!(
        why.contains("Deletion: blocked (BucketNotEmpty)")
            && why.contains(&format!("Next: kubectl keeper drain b -n {ns}")),
        "{}",
        text(&out)
    );
    // ...drained, which ends once keeper has emptied and deleted it; the tenant follows.
    let out = kubectl_keeper(&env, &["drain", "b", "-n", ns, "--timeout", "2m"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("drained and deleted"),
        "{}",
        text(&out)
    );
    assert!(env.get_json(ns, "s3bucket/b").unwrap().is_none());
    wait_until(Duration::from_secs(60), "the tenant to go", || {
        Ok(env.get_json(ns, "s3tenant/t")?.is_none())
    })
    .unwrap();
}

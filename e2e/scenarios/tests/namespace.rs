//! Deleting everything at once (issue 11, F4): `kubectl delete namespace` over tenants on both
//! providers, buckets (empty, and full being drained) and a database completes and leaves
//! nothing on the backends; what blocks by design (a full bucket nobody asked to drain,
//! deletionProtection) keeps the namespace Terminating while the object says which command
//! unblocks it; and `kubectl delete -f` of one manifest completes whatever the order.
//!
//! keeper runs with its admission webhook registered, and kube-controller-manager's namespace
//! controller empties the namespace with deletes that go through admission.

use std::collections::BTreeMap;
use std::time::Duration;

use keeper_e2e_scenarios::{
    Env, Keeper, Namespace, client_for, condition, condition_is, put_objects, rds_client,
    s3_client, secret_data, storagegrid_state, wait_for, wait_until,
};
use serde_json::Value;

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn tenant(name: &str, provider: &str, extra: &str) -> String {
    manifest(
        "S3Tenant",
        name,
        &format!("  provider: {provider}\n{extra}"),
    )
}

fn bucket(name: &str, tenant: &str) -> String {
    manifest(
        "S3Bucket",
        name,
        &format!("  tenantRef:\n    name: {tenant}\n  drain:\n    pollInterval: 1s\n"),
    )
}

fn database(name: &str, extra: &str) -> String {
    manifest(
        "CloudDatabase",
        name,
        &format!(
            "  engine: postgres\n  size: small\n  databaseName: app\n  deletionPolicy: Delete\n{extra}"
        ),
    )
}

fn ready(env: &Env, ns: &str, resource: &str) -> Value {
    wait_for(env, ns, resource, "Ready", Duration::from_secs(90), |o| {
        condition_is(o, "Ready", "True")
    })
}

/// What a namespace's keeper resources created on the backends, to look for once it is gone.
#[derive(Default, Debug)]
struct Created {
    /// Ownership markers (tenant uids) of StorageGRID accounts.
    grid_tenants: Vec<String>,
    grid_buckets: Vec<String>,
    s3_buckets: Vec<String>,
    rds_instances: Vec<String>,
}

impl Created {
    /// Records what `resource` (Ready) created.
    fn record(&mut self, env: &Env, ns: &str, resource: &str) {
        let obj = ready(env, ns, resource);
        let status = &obj["status"];
        let kind = resource.split('/').next().unwrap_or_default();
        match kind {
            "s3tenant" if status["accountId"].is_string() => self
                .grid_tenants
                .push(obj["metadata"]["uid"].as_str().unwrap().to_string()),
            "s3tenant" => {}
            "s3bucket" => {
                let name = status["bucketName"].as_str().unwrap().to_string();
                // The scenarios' StorageGRID tenants are all named `grid`.
                if obj["spec"]["tenantRef"]["name"] == "grid" {
                    self.grid_buckets.push(name)
                } else {
                    self.s3_buckets.push(name)
                }
            }
            _ => self
                .rds_instances
                .push(status["instanceId"].as_str().unwrap().to_string()),
        }
    }

    /// Asserts that nothing of it is left on any backend.
    async fn assert_gone(&self, env: &Env) {
        let grid = storagegrid_state(env).unwrap();
        let accounts: Vec<&Value> = grid["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| {
                self.grid_tenants.iter().any(|uid| {
                    a["description"]
                        .as_str()
                        .is_some_and(|d| d.contains(uid.as_str()))
                })
            })
            .collect();
        assert!(accounts.is_empty(), "grid accounts left: {accounts:#?}");
        let buckets: Vec<&Value> = grid["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| {
                self.grid_buckets
                    .iter()
                    .any(|n| b["name"].as_str() == Some(n.as_str()))
            })
            .collect();
        assert!(buckets.is_empty(), "grid buckets left: {buckets:#?}");
        let s3 = s3_client(
            env.s3_endpoint.as_deref().unwrap(),
            "testing",
            "testing",
            "us-east-1",
        );
        for name in &self.s3_buckets {
            let head = s3.head_bucket().bucket(name).send().await;
            assert!(head.is_err(), "moto bucket {name} left");
        }
        let rds = rds_client(env).await;
        for id in &self.rds_instances {
            match rds
                .describe_db_instances()
                .db_instance_identifier(id)
                .send()
                .await
            {
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_db_instance_not_found_fault()) => {}
                other => panic!("RDS instance {id} left: {other:?}"),
            }
        }
    }
}

/// Everything still in namespace `ns`, with finalizers and conditions: what a namespace that
/// does not finish is waiting on.
fn leftovers(env: &Env, ns: &str) -> String {
    let namespace = env
        .kubectl_output(&["get", "namespace", ns, "-o", "json"])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let content = env
        .kubectl_output(&[
            "get",
            "-n",
            ns,
            "s3tenants,s3buckets,clouddatabases,secrets",
            "-o",
            "json",
        ])
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    format!("namespace: {namespace}\ncontent: {content}")
}

fn namespace_exists(env: &Env, ns: &str) -> anyhow::Result<bool> {
    let out = env.kubectl_output(&["get", "namespace", ns, "-o", "name"])?;
    if out.status.success() {
        return Ok(true);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(
        stderr.contains("NotFound"),
        "kubectl get namespace: {stderr}"
    );
    Ok(false)
}

fn wait_namespace_gone(env: &Env, ns: &str, timeout: Duration) {
    wait_until(timeout, &format!("namespace {ns} to be gone"), || {
        Ok(!namespace_exists(env, ns)?)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", leftovers(env, ns)));
}

/// Tenants `grid` (StorageGRID) and `moto` (S3-compatible), each with buckets `<tenant>-empty`
/// and `<tenant>-full` (objects in it), and database `db`; returns what they created and the
/// keys of each full bucket.
async fn populate(
    env: &Env,
    ns: &str,
    protect: bool,
) -> (Created, Vec<(String, BTreeMap<String, String>)>) {
    let protection = if protect {
        "  deletionProtection: true\n"
    } else {
        ""
    };
    env.apply(ns, &tenant("grid", "default", protection))
        .unwrap();
    env.apply(ns, &tenant("moto", "s3", "")).unwrap();
    env.apply(ns, &database("db", protection)).unwrap();
    let mut created = Created::default();
    for t in ["grid", "moto"] {
        created.record(env, ns, &format!("s3tenant/{t}"));
        for b in ["empty", "full"] {
            env.apply(ns, &bucket(&format!("{t}-{b}"), t)).unwrap();
        }
    }
    let mut full = Vec::new();
    for t in ["grid", "moto"] {
        for b in ["empty", "full"] {
            created.record(env, ns, &format!("s3bucket/{t}-{b}"));
        }
        let keys = secret_data(env, ns, &format!("{t}-full-credentials")).unwrap();
        put_objects(&client_for(&keys), &keys["bucket"], "data", 40).await;
        full.push((format!("{t}-full"), keys));
    }
    created.record(env, ns, "clouddatabase/db");
    (created, full)
}

fn drain(env: &Env, ns: &str, bucket: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    env.kubectl(&[
        "annotate",
        "--overwrite",
        "-n",
        ns,
        &format!("s3bucket/{bucket}"),
        &format!("keeper.dev/drain={now}"),
    ])
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_namespace_with_every_kind_completes_and_leaves_nothing_on_the_backends() {
    let env = Env::from_env().unwrap();
    let ns: Namespace = env.namespace("e2e-nsdel").unwrap();
    let _keeper = Keeper::start_with_webhook(&env).unwrap();
    let (created, full) = populate(&env, &ns.name, false).await;
    for (bucket, _) in &full {
        drain(&env, &ns.name, bucket);
    }

    env.kubectl(&["delete", "namespace", &ns.name, "--wait=false"])
        .unwrap();
    wait_namespace_gone(&env, &ns.name, Duration::from_secs(180));
    created.assert_gone(&env).await;
}

/// A StorageGRID tenant whose root-credentials Secret an older keeper wrote without the cleanup
/// hold (or `keeper release-finalizers` left so): keeper holds it again while the tenant lives,
/// so that a namespace deletion does not take the password the buckets' and the tenant's cleanup
/// sign in with (safety audit 2, HIGH 2; before, the bucket waited on TenantCredentialsMissing,
/// the tenant on the bucket, and the namespace stayed Terminating).
#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_with_a_tenant_an_older_keeper_left_unheld_is_deleted() {
    let env = Env::from_env().unwrap();
    let ns: Namespace = env.namespace("e2e-nsold").unwrap();
    let n = ns.name.as_str();
    let keeper = Keeper::start(&env).unwrap();
    env.apply(n, &tenant("grid", "default", "")).unwrap();
    env.apply(n, &bucket("grid-b", "grid")).unwrap();
    let mut created = Created::default();
    created.record(&env, n, "s3tenant/grid");
    created.record(&env, n, "s3bucket/grid-b");
    keeper.terminate().unwrap();

    // As the release before the hold left it.
    let secret = "secret/grid-root-credentials";
    env.kubectl(&[
        "patch",
        "-n",
        n,
        secret,
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    let held = wait_for(
        &env,
        n,
        secret,
        "the cleanup hold",
        Duration::from_secs(60),
        |s| {
            s["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == "keeper.dev/needed-for-cleanup"))
        },
    );
    assert_eq!(
        held["metadata"]["ownerReferences"][0]["kind"], "S3Tenant",
        "still the tenant's: {held:#}"
    );

    env.kubectl(&["delete", "namespace", n, "--wait=false"])
        .unwrap();
    wait_namespace_gone(&env, n, Duration::from_secs(180));
    created.assert_gone(&env).await;
}

/// Waits for `resource` to show condition DeletionBlocked with `reason`, naming `command`. Only
/// the condition: in a namespace being deleted the API refuses every new object, events
/// included (NamespaceLifecycle admission), so the DeletionBlocked Warning keeper publishes
/// cannot be recorded there.
fn blocked_with(env: &Env, ns: &str, resource: &str, reason: &str, command: &str) {
    let obj = wait_for(
        env,
        ns,
        resource,
        &format!("DeletionBlocked {reason}"),
        Duration::from_secs(60),
        |o| condition(o, "DeletionBlocked").is_some_and(|c| c["reason"] == reason),
    );
    let blocked = condition(&obj, "DeletionBlocked").unwrap();
    assert_eq!(blocked["status"], "True");
    assert!(
        blocked["message"]
            .as_str()
            .is_some_and(|m| m.contains(command)),
        "{resource}: {blocked:#}\nlacks {command}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_blocks_by_design_keeps_the_namespace_terminating_and_says_how_to_unblock() {
    let env = Env::from_env().unwrap();
    let ns: Namespace = env.namespace("e2e-nsblk").unwrap();
    let n = ns.name.as_str();
    let _keeper = Keeper::start_with_webhook(&env).unwrap();
    let (created, full) = populate(&env, n, true).await;

    env.kubectl(&["delete", "namespace", n, "--wait=false"])
        .unwrap();
    let unprotect = r#" --type merge -p '{"spec":{"deletionProtection":false}}'"#;
    let tenant_command = format!("kubectl patch s3tenant grid -n {n}{unprotect}");
    let database_command = format!("kubectl patch clouddatabase db -n {n}{unprotect}");
    blocked_with(
        &env,
        n,
        "s3tenant/grid",
        "DeletionProtection",
        &tenant_command,
    );
    blocked_with(
        &env,
        n,
        "clouddatabase/db",
        "DeletionProtection",
        &database_command,
    );
    for (bucket, _) in &full {
        blocked_with(
            &env,
            n,
            &format!("s3bucket/{bucket}"),
            "BucketNotEmpty",
            &format!(
                "kubectl annotate --overwrite s3bucket {bucket} keeper.dev/drain=$(date +%s) -n {n}"
            ),
        );
    }
    // Blocked means blocked: a while later the namespace is still there, and so is the data.
    std::thread::sleep(Duration::from_secs(5));
    assert!(namespace_exists(&env, n).unwrap(), "{}", leftovers(&env, n));
    for (bucket, keys) in &full {
        let listed = client_for(keys)
            .list_objects_v2()
            .bucket(&keys["bucket"])
            .send()
            .await
            .unwrap_or_else(|e| panic!("{bucket} kept: {e:?}"));
        assert_eq!(listed.key_count(), Some(40), "{bucket} kept its objects");
    }

    // The commands the conditions name let the deletion finish.
    for (bucket, _) in &full {
        drain(&env, n, bucket);
    }
    for resource in ["s3tenant/grid", "clouddatabase/db"] {
        env.kubectl(&[
            "patch",
            resource,
            "-n",
            n,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"deletionProtection":false}}"#,
        ])
        .unwrap();
    }
    wait_namespace_gone(&env, n, Duration::from_secs(180));
    created.assert_gone(&env).await;
}

/// One manifest with every kind, in the order given.
fn whole_manifest(order: &[&str]) -> String {
    let pieces: BTreeMap<&str, String> = BTreeMap::from([
        ("grid", tenant("grid", "default", "")),
        ("moto", tenant("moto", "s3", "")),
        ("grid-b", bucket("grid-b", "grid")),
        ("moto-b", bucket("moto-b", "moto")),
        ("db", database("db", "")),
    ]);
    order
        .iter()
        .map(|k| pieces[k].clone())
        .collect::<Vec<_>>()
        .join("---\n")
}

async fn delete_manifest_in_order(prefix: &str, order: &[&str]) {
    let env = Env::from_env().unwrap();
    let ns: Namespace = env.namespace(prefix).unwrap();
    let n = ns.name.as_str();
    let _keeper = Keeper::start_with_webhook(&env).unwrap();
    let text = whole_manifest(order);
    env.apply(n, &text).unwrap();
    let mut created = Created::default();
    for resource in [
        "s3tenant/grid",
        "s3tenant/moto",
        "s3bucket/grid-b",
        "s3bucket/moto-b",
        "clouddatabase/db",
    ] {
        created.record(&env, n, resource);
    }
    let file = std::env::temp_dir().join(format!("keeper-e2e-{n}.yaml"));
    std::fs::write(&file, &text).unwrap();
    let out = env
        .kubectl_output(&[
            "delete",
            "-n",
            n,
            "-f",
            file.to_str().unwrap(),
            "--timeout=180s",
        ])
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "kubectl delete -f: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        leftovers(&env, n)
    );
    for resource in ["s3tenants", "s3buckets", "clouddatabases"] {
        let left = env
            .kubectl(&["get", "-n", n, resource, "-o", "name"])
            .unwrap();
        assert!(left.trim().is_empty(), "{resource} left: {left}");
    }
    let secrets = env
        .kubectl(&["get", "-n", n, "secrets", "-o", "name"])
        .unwrap();
    wait_until(Duration::from_secs(30), "keeper's Secrets to go", || {
        Ok(env
            .kubectl(&["get", "-n", n, "secrets", "-o", "name"])?
            .trim()
            .is_empty())
    })
    .unwrap_or_else(|e| panic!("{e:#}: {secrets}"));
    created.assert_gone(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_delete_f_of_every_kind_completes_tenants_first() {
    delete_manifest_in_order("e2e-delf1", &["grid", "moto", "grid-b", "moto-b", "db"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_delete_f_of_every_kind_completes_buckets_and_database_first() {
    delete_manifest_in_order("e2e-delf2", &["db", "moto-b", "grid-b", "moto", "grid"]).await;
}

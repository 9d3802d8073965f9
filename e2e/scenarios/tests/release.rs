//! `keeper release-finalizers` (issue 13, day-2): refuses while a keeper leader holds the Lease,
//! lists what releasing would leave behind without touching anything, and with `--confirm`
//! removes only keeper's finalizers so that a resource keeper can no longer clean up goes away.

use std::process::{Command, Output};
use std::time::Duration;

use keeper_e2e_scenarios::{Env, Keeper, condition_is, wait_for, wait_until};

fn release_finalizers(env: &Env, ns: &str, lease: &str, confirm: bool) -> Output {
    let mut command = Command::new(&env.keeper_bin);
    command
        .args([
            "release-finalizers",
            "--kind",
            "s3tenant",
            "--namespace",
            ns,
        ])
        .args([
            "--lease-namespace",
            &env.operator_namespace,
            "--lease-name",
            lease,
        ])
        .env("KUBECONFIG", &env.keeper_kubeconfig);
    if confirm {
        command.arg("--confirm");
    }
    command.output().expect("keeper runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn finalizers(env: &Env, ns: &str, name: &str) -> Vec<String> {
    env.get_json(ns, &format!("s3tenant/{name}"))
        .unwrap()
        .and_then(|t| t["metadata"]["finalizers"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

#[test]
fn release_finalizers_refuses_with_a_leader_lists_then_releases_only_keepers_finalizers() {
    let env = Env::from_env().unwrap();
    let lease = format!("keeper-release-{}", std::process::id());
    let ns = env.namespace("e2e-release").unwrap();
    let keeper = Keeper::start_elected(&env, &lease).unwrap();
    env.apply(
        &ns.name,
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: stranded\n  finalizers: [example.com/audit]\nspec:\n  provider: s3\n",
    )
    .unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3tenant/stranded",
        "Ready",
        Duration::from_secs(60),
        |t| condition_is(t, "Ready", "True"),
    );

    // A leader holds the Lease: the command refuses and changes nothing.
    let refused = release_finalizers(&env, &ns.name, &lease, true);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(text(&refused).contains("holds Lease"), "{}", text(&refused));
    assert!(finalizers(&env, &ns.name, "stranded").contains(&"keeper.dev/tenant-cleanup".into()));
    // Without --lease-namespace the command finds the Lease in whatever namespace it is (keeper
    // installed outside keeper-system), and refuses just the same. Run as a person would, with
    // their kubeconfig: listing Leases in every namespace is more than keeper's own RBAC allows.
    let found = Command::new(&env.keeper_bin)
        .args([
            "release-finalizers",
            "--kind",
            "s3tenant",
            "--namespace",
            &ns.name,
        ])
        .args(["--lease-name", &lease, "--confirm"])
        .env("KUBECONFIG", &env.kubeconfig)
        .env_remove("KEEPER_NAMESPACE")
        .output()
        .unwrap();
    assert!(!found.status.success(), "{}", text(&found));
    assert!(
        text(&found).contains(&format!("holds Lease {}/{lease}", env.operator_namespace)),
        "{}",
        text(&found)
    );

    // keeper is gone for good (SIGTERM releases the Lease); the tenant's deletion now waits forever.
    keeper.terminate().unwrap();
    env.kubectl(&[
        "delete",
        "s3tenant",
        "stranded",
        "-n",
        &ns.name,
        "--wait=false",
    ])
    .unwrap();

    // Without --confirm: a listing of what stays on the backend, nothing removed.
    let listed = release_finalizers(&env, &ns.name, &lease, false);
    assert!(listed.status.success(), "{}", text(&listed));
    let listing = text(&listed);
    assert!(
        listing.contains(&format!("s3tenant/stranded in {}", ns.name))
            && listing.contains("keeper.dev/tenant-cleanup")
            && listing.contains("provider s3")
            && listing.contains("--confirm"),
        "{listing}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(finalizers(&env, &ns.name, "stranded").contains(&"keeper.dev/tenant-cleanup".into()));

    // --confirm removes keeper's finalizer and only that one.
    let released = release_finalizers(&env, &ns.name, &lease, true);
    assert!(released.status.success(), "{}", text(&released));
    assert!(
        text(&released).contains("released 1 object"),
        "{}",
        text(&released)
    );
    assert_eq!(
        finalizers(&env, &ns.name, "stranded"),
        vec!["example.com/audit"]
    );

    // The other owner lets go too: the object is deleted without keeper.
    env.kubectl(&[
        "patch",
        "s3tenant",
        "stranded",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .unwrap();
    wait_until(
        Duration::from_secs(20),
        "the released tenant to be gone",
        || Ok(env.get_json(&ns.name, "s3tenant/stranded")?.is_none()),
    )
    .unwrap();
}

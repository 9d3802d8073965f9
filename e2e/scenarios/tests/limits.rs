//! Values past what keeper or a backend can take are refused or made to fit (audit F17, F21):
//! a drain poll interval below one second is refused at `kubectl apply`, a `displayName` longer
//! than StorageGRID's 64 characters too, and a tenant whose (long) resource name does not fit an
//! account name gets a cut name with a hash of the whole name.

use std::time::Duration;

use keeper_e2e_scenarios::{Env, Keeper, accounts_of, wait_for};

/// `kubectl apply` of `manifest`: the error text, or `None` when it was accepted.
fn refusal(env: &Env, namespace: &str, manifest: &str) -> Option<String> {
    match env.apply(namespace, manifest) {
        Ok(_) => None,
        Err(e) => Some(format!("{e:#}")),
    }
}

#[test]
fn poll_intervals_below_a_second_and_overlong_display_names_are_refused_at_apply() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-limits").unwrap();
    let bucket = |name: &str, interval: &str| {
        format!(
            "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: {name}\nspec:\n  tenantRef: {{name: t}}\n  drain: {{pollInterval: {interval}}}\n"
        )
    };
    for interval in ["0s", "500ms", "0.5s"] {
        let err = refusal(&env, &ns.name, &bucket("hot", interval))
            .unwrap_or_else(|| panic!("pollInterval {interval} was accepted"));
        assert!(err.contains("pollInterval must be at least 1s"), "{err}");
    }
    assert_eq!(refusal(&env, &ns.name, &bucket("calm", "1s")), None);
    env.kubectl(&["delete", "-n", &ns.name, "s3bucket/calm"])
        .unwrap();
    let tenant = format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: t\nspec:\n  displayName: {}\n",
        "d".repeat(65)
    );
    let err = refusal(&env, &ns.name, &tenant).expect("a 65-character displayName is refused");
    assert!(err.contains("displayName"), "{err}");
}

#[test]
fn a_tenant_name_longer_than_an_account_name_gets_a_cut_name_with_a_hash() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-limits").unwrap();
    let _keeper = Keeper::start(&env).unwrap();
    // Long enough to overflow an account name, short enough for `<name>-s3-credentials`.
    let name = format!("{}-a", "long".repeat(25));
    env.apply(
        &ns.name,
        &format!("apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec: {{}}\n"),
    )
    .unwrap();
    let tenant = wait_for(
        &env,
        &ns.name,
        &format!("s3tenant/{name}"),
        "Ready",
        Duration::from_secs(60),
        |o| o["status"]["phase"] == "Ready",
    );
    let accounts = accounts_of(&env, tenant["metadata"]["uid"].as_str().unwrap());
    assert_eq!(accounts.len(), 1, "{accounts:#?}");
    let account = accounts[0]["name"].as_str().unwrap();
    assert_eq!(account.len(), 64, "{account}");
    assert!(account.starts_with(&name[..55]), "{account}");
    env.kubectl(&[
        "delete",
        "-n",
        &ns.name,
        &format!("s3tenant/{name}"),
        "--timeout=60s",
    ])
    .unwrap();
}

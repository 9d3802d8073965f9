//! Secrets keeper did not create (issue 11, F5/F14): a connection or credentials Secret name
//! that collides with an existing Secret leaves that Secret untouched, through create and
//! delete, and the resource says why (condition SecretConflict, a Warning event).

use std::collections::BTreeMap;
use std::time::Duration;

use keeper_e2e_scenarios::{Env, Keeper, condition, secret_data, wait_for};

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// Creates a Secret as another application would, and returns its data.
fn their_secret(env: &Env, ns: &str, name: &str) -> BTreeMap<String, String> {
    env.kubectl(&[
        "create",
        "secret",
        "generic",
        name,
        "-n",
        ns,
        "--from-literal=password=not-keepers",
        "--from-literal=tls.key=precious",
    ])
    .unwrap();
    secret_data(env, ns, name).unwrap()
}

fn wait_conflict(env: &Env, ns: &str, resource: &str, secret: &str) {
    let obj = wait_for(
        env,
        ns,
        resource,
        "Ready=False with reason SecretConflict",
        Duration::from_secs(60),
        |o| condition(o, "Ready").is_some_and(|c| c["reason"] == "SecretConflict"),
    );
    let message = condition(&obj, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!("{ns}/{secret}")) && message.contains("not created by keeper"),
        "{message}"
    );
    let events = env
        .kubectl(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!(
                "involvedObject.name={}",
                resource.split('/').nth(1).unwrap()
            ),
            "-o",
            "jsonpath={range .items[*]}{.type}/{.reason}{\"\\n\"}{end}",
        ])
        .unwrap();
    assert!(events.contains("Warning/SecretConflict"), "{events}");
}

#[test]
fn a_secret_keeper_did_not_create_survives_a_colliding_database_and_bucket_create_and_delete() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-secrets").unwrap();
    let _keeper = Keeper::start(&env).unwrap();

    let connection = their_secret(&env, &ns.name, "orders-connection");
    let credentials = their_secret(&env, &ns.name, "assets-credentials");

    env.apply(
        &ns.name,
        &manifest(
            "CloudDatabase",
            "orders",
            "  engine: postgres\n  size: small\n  deletionPolicy: Delete\n",
        ),
    )
    .unwrap();
    env.apply(&ns.name, &manifest("S3Tenant", "team", "  provider: s3\n"))
        .unwrap();
    env.apply(
        &ns.name,
        &manifest("S3Bucket", "assets", "  tenantRef: {name: team}\n"),
    )
    .unwrap();

    wait_conflict(&env, &ns.name, "clouddatabase/orders", "orders-connection");
    wait_conflict(&env, &ns.name, "s3bucket/assets", "assets-credentials");
    assert_eq!(
        secret_data(&env, &ns.name, "orders-connection").unwrap(),
        connection
    );
    assert_eq!(
        secret_data(&env, &ns.name, "assets-credentials").unwrap(),
        credentials
    );

    for resource in ["clouddatabase/orders", "s3bucket/assets", "s3tenant/team"] {
        env.kubectl(&[
            "delete",
            "-n",
            &ns.name,
            resource,
            "--wait=true",
            "--timeout=90s",
        ])
        .unwrap();
    }
    assert_eq!(
        secret_data(&env, &ns.name, "orders-connection").unwrap(),
        connection,
        "deleting the database left the Secret it did not create"
    );
    assert_eq!(
        secret_data(&env, &ns.name, "assets-credentials").unwrap(),
        credentials,
        "deleting the bucket left the Secret it did not create"
    );
}

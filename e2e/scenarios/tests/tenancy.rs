//! Providers restricted to namespaces (issue #11, audit F6): keeper runs with its own
//! configuration in which the grid admits only namespaces labelled `keeper-e2e/tenancy=allowed`
//! and the S3-compatible store only one namespace by name. A tenant elsewhere is Failed with a
//! message saying why, and nothing is created on the backend; labelling its namespace lets it
//! proceed.

use std::time::Duration;

use keeper_e2e_scenarios::{Env, Keeper, accounts_of, condition, wait_for};
use serde_json::Value;

const LABEL: &str = "keeper-e2e/tenancy";

fn tenant(name: &str, provider: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec:\n  provider: {provider}\n"
    )
}

/// The stack's configuration with the grid restricted by label and the store by name.
fn restricted_config(env: &Env, store_namespace: &str) -> std::path::PathBuf {
    let config = std::fs::read_to_string(&env.keeper_config).unwrap();
    let grid = "    storageGrid:\n";
    let store = "    s3Compatible:\n";
    assert!(
        config.contains(grid) && config.contains(store),
        "unexpected stack configuration:\n{config}"
    );
    let config = config
        .replacen(
            grid,
            &format!(
                "{grid}      allowedNamespaces:\n        selector: {{matchLabels: {{{LABEL}: allowed}}}}\n"
            ),
            1,
        )
        .replacen(
            store,
            &format!("{store}      allowedNamespaces: {{names: [{store_namespace}]}}\n"),
            1,
        );
    let path = std::env::temp_dir().join(format!("keeper-e2e-tenancy-{}.yaml", std::process::id()));
    std::fs::write(&path, config).unwrap();
    path
}

fn ready_reason(obj: &Value) -> &str {
    condition(obj, "Ready")
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restricted_provider_serves_only_the_namespaces_it_allows() {
    let env = Env::from_env().unwrap();
    let allowed = env.namespace("e2e-tenancy-in").unwrap();
    let denied = env.namespace("e2e-tenancy-out").unwrap();
    env.kubectl(&[
        "label",
        "namespace",
        &allowed.name,
        &format!("{LABEL}=allowed"),
    ])
    .unwrap();
    let mut restricted = env.clone();
    restricted.keeper_config = restricted_config(&env, &allowed.name);
    let _keeper = Keeper::start(&restricted).unwrap();

    env.apply(&allowed.name, &tenant("grid", "default"))
        .unwrap();
    env.apply(&denied.name, &tenant("grid", "default")).unwrap();
    env.apply(&denied.name, &tenant("store", "s3")).unwrap();

    let ok = wait_for(
        &env,
        &allowed.name,
        "s3tenant/grid",
        "Ready",
        Duration::from_secs(60),
        |o| o["status"]["phase"] == "Ready",
    );
    assert_eq!(
        accounts_of(&env, ok["metadata"]["uid"].as_str().unwrap()).len(),
        1
    );

    let refused = |name: &str| {
        wait_for(
            &env,
            &denied.name,
            &format!("s3tenant/{name}"),
            "Failed with NamespaceNotAllowed",
            Duration::from_secs(60),
            |o| o["status"]["phase"] == "Failed" && ready_reason(o) == "NamespaceNotAllowed",
        )
    };
    let grid = refused("grid");
    let message = condition(&grid, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    for needle in [
        "provider \"default\"".to_string(),
        format!("namespace {:?}", denied.name),
        format!("{LABEL}=allowed"),
    ] {
        assert!(
            message.contains(&needle),
            "message lacks {needle}: {message}"
        );
    }
    let grid_uid = grid["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(
        accounts_of(&env, &grid_uid).len(),
        0,
        "no account for a denied tenant"
    );
    let events = env
        .kubectl(&[
            "get",
            "events",
            "-n",
            &denied.name,
            "-o",
            "jsonpath={range .items[*]}{.type}/{.reason} {end}",
        ])
        .unwrap();
    assert!(events.contains("Warning/NamespaceNotAllowed"), "{events}");
    let store = refused("store");
    assert!(
        condition(&store, "Ready").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains(&format!("the namespaces {}", allowed.name)),
        "{store:#}"
    );
    assert!(
        env.get_json(&denied.name, "secret/store-s3-credentials")
            .unwrap()
            .is_none(),
        "the store's keys were not published to a denied namespace"
    );

    // Labelling the namespace admits it: keeper watches namespaces, no restart or edit needed.
    env.kubectl(&[
        "label",
        "namespace",
        &denied.name,
        &format!("{LABEL}=allowed"),
    ])
    .unwrap();
    wait_for(
        &env,
        &denied.name,
        "s3tenant/grid",
        "Ready after the label",
        Duration::from_secs(60),
        |o| o["status"]["phase"] == "Ready",
    );
    assert_eq!(accounts_of(&env, &grid_uid).len(), 1);

    // Deleting the tenants cleans up what keeper created.
    for (ns, name) in [
        (&allowed.name, "grid"),
        (&denied.name, "grid"),
        (&denied.name, "store"),
    ] {
        env.kubectl(&[
            "delete",
            "-n",
            ns,
            &format!("s3tenant/{name}"),
            "--timeout=60s",
        ])
        .unwrap();
    }
    assert_eq!(accounts_of(&env, &grid_uid).len(), 0);
    let _ = std::fs::remove_file(&restricted.keeper_config);
}

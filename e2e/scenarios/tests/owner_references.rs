//! keeper's Secrets on a hardened API server (issue 24). The local kube-apiserver runs the
//! `OwnerReferencesPermissionEnforcement` admission plugin (on in OpenShift and many hardened
//! clusters): setting `blockOwnerDeletion` on an ownerReference needs `update` on the owner's
//! `finalizers` subresource. keeper creates the Secrets of every kind under it with the chart's
//! RBAC, each owned by its resource; when the resource goes, kube's own garbage collector
//! (kube-controller-manager) removes them, after a background delete and after a foreground one
//! (Argo CD's prune), which also waits for them.

use std::time::Duration;

use keeper_e2e_scenarios::{AuditLog, Env, Keeper, condition_is, wait_for, wait_until};
use serde_json::Value;

/// The user kube-controller-manager's garbage collector deletes as.
const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn ready(env: &Env, ns: &str, resource: &str) -> Value {
    wait_for(env, ns, resource, "Ready", Duration::from_secs(90), |o| {
        condition_is(o, "Ready", "True")
    })
}

/// A Secret that names `owner` (kind, name, uid) as its controller, blocking its deletion or not.
fn owned_secret(name: &str, owner: &Value, block: bool) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  ownerReferences:\n  - apiVersion: keeper.dev/v1alpha1\n    kind: {}\n    name: {}\n    uid: {}\n    controller: true\n    blockOwnerDeletion: {block}\nstringData:\n  a: b\n",
        owner["kind"].as_str().unwrap(),
        owner["metadata"]["name"].as_str().unwrap(),
        owner["metadata"]["uid"].as_str().unwrap(),
    )
}

/// `kubectl create -f -` of `manifest` as `user`; the output and whether it succeeded.
fn create_as(env: &Env, ns: &str, user: &str, manifest: &str) -> (bool, String) {
    let out = env
        .kubectl_input(&["create", "-n", ns, "--as", user, "-f", "-"], manifest)
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The Secret's ownerReferences must name exactly `owner`, as its controller, blocking its
/// deletion.
fn assert_owned_by(env: &Env, ns: &str, secret: &str, owner: &Value) {
    let secret_obj = env
        .get_json(ns, &format!("secret/{secret}"))
        .unwrap()
        .unwrap_or_else(|| panic!("Secret {secret} does not exist"));
    let refs = secret_obj["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(refs.len(), 1, "{secret}: {refs:#?}");
    let r = &refs[0];
    assert_eq!(r["kind"], owner["kind"], "{secret}: {r:#}");
    assert_eq!(r["name"], owner["metadata"]["name"], "{secret}: {r:#}");
    assert_eq!(r["uid"], owner["metadata"]["uid"], "{secret}: {r:#}");
    assert_eq!(
        (r["controller"].as_bool(), r["blockOwnerDeletion"].as_bool()),
        (Some(true), Some(true)),
        "{secret}: {r:#}"
    );
}

/// Waits until Secret `secret` is gone, and checks that kube's garbage collector deleted it.
fn assert_collected(
    env: &Env,
    audit: &AuditLog,
    from: keeper_e2e_scenarios::AuditMark,
    ns: &str,
    secret: &str,
) {
    wait_until(
        Duration::from_secs(60),
        &format!("Secret {secret} to be collected"),
        || Ok(env.get_json(ns, &format!("secret/{secret}"))?.is_none()),
    )
    .unwrap();
    // kube logs a request once it has answered it.
    std::thread::sleep(Duration::from_secs(1));
    let deleters: Vec<String> = audit
        .since(from)
        .unwrap()
        .into_iter()
        .filter(|r| {
            r.resource == "secrets"
                && r.namespace == ns
                && r.name == secret
                && r.verb == "delete"
                && r.code < 300
        })
        .map(|r| r.user)
        .collect();
    assert!(
        !deleters.is_empty() && deleters.iter().all(|user| user == GARBAGE_COLLECTOR),
        "Secret {secret} was deleted by {deleters:?}, not by kube's garbage collector alone"
    );
}

#[test]
fn keepers_secrets_pass_owner_reference_enforcement_and_the_garbage_collector_takes_them() {
    let env = Env::from_env().unwrap();
    let Ok(audit) = AuditLog::of(&env) else {
        keeper_e2e_scenarios::skip(
            "who deleted a Secret is read from the local kube-apiserver's audit log",
        );
        return;
    };
    let ns = env.namespace("e2e-owners").unwrap();
    let n = ns.name.as_str();
    let keeper = Keeper::start(&env).unwrap();
    env.apply(n, &manifest("S3Tenant", "grid", "  provider: default\n"))
        .unwrap();
    env.apply(n, &manifest("S3Tenant", "plain", "  provider: s3\n"))
        .unwrap();
    env.apply(
        n,
        &manifest("S3Bucket", "fore", "  tenantRef:\n    name: grid\n"),
    )
    .unwrap();
    env.apply(
        n,
        &manifest("S3Bucket", "back", "  tenantRef:\n    name: plain\n"),
    )
    .unwrap();
    env.apply(
        n,
        &manifest(
            "CloudDatabase",
            "db",
            "  engine: postgres\n  size: small\n  deletionPolicy: Delete\n",
        ),
    )
    .unwrap();
    let grid = ready(&env, n, "s3tenant/grid");
    ready(&env, n, "s3tenant/plain");
    let fore = ready(&env, n, "s3bucket/fore");
    let back = ready(&env, n, "s3bucket/back");
    let db = ready(&env, n, "clouddatabase/db");

    // The plugin is on: without update on the owner's finalizers, a Secret that blocks its
    // owner's deletion is refused, and the same Secret that does not block it is not.
    env.kubectl(&["create", "serviceaccount", "-n", n, "plain-writer"])
        .unwrap();
    env.kubectl(&[
        "create",
        "role",
        "-n",
        n,
        "plain-writer",
        "--verb=create,get,delete",
        "--resource=secrets",
    ])
    .unwrap();
    env.kubectl(&[
        "create",
        "rolebinding",
        "-n",
        n,
        "plain-writer",
        "--role=plain-writer",
        &format!("--serviceaccount={n}:plain-writer"),
    ])
    .unwrap();
    let writer = format!("system:serviceaccount:{n}:plain-writer");
    let (created, out) = create_as(&env, n, &writer, &owned_secret("blocking", &fore, true));
    assert!(!created, "a blocking ownerReference was accepted: {out}");
    assert!(
        out.contains("cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on"),
        "{out}"
    );
    let (created, out) = create_as(&env, n, &writer, &owned_secret("plain", &fore, false));
    assert!(created, "{out}");
    env.kubectl(&["delete", "secret", "-n", n, "plain"])
        .unwrap();

    // keeper, with the chart's RBAC, created every kind's Secret blocking its owner.
    for (secret, owner) in [
        ("grid-root-credentials", &grid),
        ("grid-s3-credentials", &grid),
        ("fore-credentials", &fore),
        ("back-credentials", &back),
        ("db-connection", &db),
    ] {
        assert_owned_by(&env, n, secret, owner);
    }

    // A foreground delete (Argo CD's prune) ends only once the bucket's Secret is gone.
    let from = audit.mark().unwrap();
    env.kubectl(&[
        "delete",
        "-n",
        n,
        "s3bucket/fore",
        "--cascade=foreground",
        "--timeout=90s",
    ])
    .unwrap();
    assert_collected(&env, &audit, from, n, "fore-credentials");
    for resource in ["s3bucket/back", "clouddatabase/db"] {
        env.kubectl(&["delete", "-n", n, resource, "--timeout=90s"])
            .unwrap();
    }
    assert_collected(&env, &audit, from, n, "back-credentials");
    assert_collected(&env, &audit, from, n, "db-connection");
    // The tenant's root password is held until its account is gone, then collected too.
    env.kubectl(&["delete", "-n", n, "s3tenant/grid", "--timeout=90s"])
        .unwrap();
    assert_collected(&env, &audit, from, n, "grid-root-credentials");
    assert_collected(&env, &audit, from, n, "grid-s3-credentials");
    drop(keeper);
}

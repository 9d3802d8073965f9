//! Identity fields are immutable (issue 11), and so is `engineVersion`, used only at create (issue
//! 27): the CRDs' CEL transition rules make the API server refuse a change with the field path and
//! the reason, and the object stays as it was. No keeper process is needed: the API server
//! enforces this on its own.

use keeper_e2e_scenarios::Env;
use serde_json::Value;

/// Runs a kubectl command that must fail; returns its stderr.
fn refused(env: &Env, args: &[&str]) -> String {
    let out = env.kubectl_output(args).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "kubectl {args:?} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// kube-apiserver's refusal of a CEL rule at `field`, as the releases keeper supports word it: up
/// to some release the rule's schema type stands where the value goes (`Invalid value: "object":`,
/// `Invalid value: "string":`); 1.37 prints a scalar's value and omits an object's.
fn cel_refusals(field: &str, schema_type: &str, value: &str, message: &str) -> [String; 2] {
    let newer = if schema_type == "object" {
        format!("{field}: Invalid value: {message}")
    } else {
        format!("{field}: Invalid value: \"{value}\": {message}")
    };
    [
        format!("{field}: Invalid value: \"{schema_type}\": {message}"),
        newer,
    ]
}

/// Whether `stderr` holds one of `refusals`.
fn says_one_of(stderr: &str, refusals: &[String]) -> bool {
    refusals.iter().any(|r| stderr.contains(r.as_str()))
}

/// `kubectl patch -n NS KIND NAME --type TYPE -p PATCH`, which must be refused; its stderr.
fn patch_refused(env: &Env, ns: &str, kind: &str, name: &str, type_: &str, patch: &str) -> String {
    refused(
        env,
        &["patch", "-n", ns, kind, name, "--type", type_, "-p", patch],
    )
}

fn spec(env: &Env, ns: &str, resource: &str) -> Value {
    env.get_json(ns, resource).unwrap().expect("object exists")["spec"].clone()
}

#[test]
fn tenant_provider_cannot_change() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-immut-tenant").unwrap();
    let n = ns.name.as_str();
    env.apply(
        n,
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: fixed\nspec:\n  provider: default\n",
    )
    .unwrap();
    let before = spec(&env, n, "s3tenant/fixed");

    let stderr = patch_refused(
        &env,
        n,
        "s3tenant",
        "fixed",
        "merge",
        r#"{"spec":{"provider":"other"}}"#,
    );
    assert!(stderr.contains("spec.provider"), "{stderr}");
    assert!(stderr.contains("provider is immutable"), "{stderr}");
    assert!(stderr.contains("is invalid"), "{stderr}");
    assert_eq!(spec(&env, n, "s3tenant/fixed"), before);

    // Patching the same value, or another field, still works.
    env.kubectl(&[
        "patch",
        "-n",
        n,
        "s3tenant",
        "fixed",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"provider":"default","quota":"1Gi"}}"#,
    ])
    .unwrap();
    assert_eq!(spec(&env, n, "s3tenant/fixed")["provider"], "default");
}

#[test]
fn database_name_cannot_change() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-immut-db").unwrap();
    let n = ns.name.as_str();
    let manifest = |name: &str| {
        format!(
            "apiVersion: keeper.dev/v1alpha1\nkind: CloudDatabase\nmetadata:\n  name: orders\nspec:\n  engine: postgres\n  size: small\n  databaseName: {name}\n"
        )
    };
    env.apply(n, &manifest("orders")).unwrap();
    let before = spec(&env, n, "clouddatabase/orders");
    assert_eq!(before["databaseName"], "orders");

    let stderr = patch_refused(
        &env,
        n,
        "clouddatabase",
        "orders",
        "merge",
        r#"{"spec":{"databaseName":"other"}}"#,
    );
    // The rule sits on `spec` (it compares presence too) with `fieldPath: .databaseName`, so
    // kube names that field and takes `spec`'s type, an object.
    assert!(
        stderr.contains("The CloudDatabase \"orders\" is invalid: "),
        "{stderr}"
    );
    assert!(
        says_one_of(
            &stderr,
            &cel_refusals(
                "spec.databaseName",
                "object",
                "",
                "databaseName is immutable"
            )
        ),
        "{stderr}"
    );
    assert_eq!(spec(&env, n, "clouddatabase/orders"), before);

    // The same change through `kubectl apply` of an edited manifest, as GitOps would send it.
    let err = env.apply(n, &manifest("other")).unwrap_err().to_string();
    assert!(err.contains("databaseName is immutable"), "{err}");
    // Removing the field is a change too.
    let stderr = patch_refused(
        &env,
        n,
        "clouddatabase",
        "orders",
        "json",
        r#"[{"op":"remove","path":"/spec/databaseName"}]"#,
    );
    assert!(stderr.contains("databaseName is immutable"), "{stderr}");
    assert_eq!(spec(&env, n, "clouddatabase/orders"), before);

    // The engine is an immutable field of its own, with its own path.
    let stderr = patch_refused(
        &env,
        n,
        "clouddatabase",
        "orders",
        "merge",
        r#"{"spec":{"engine":"mysql"}}"#,
    );
    assert!(
        says_one_of(
            &stderr,
            &cel_refusals("spec.engine", "string", "mysql", "engine is immutable")
        ),
        "{stderr}"
    );
    assert_eq!(spec(&env, n, "clouddatabase/orders"), before);

    // The engine version is used only at create: setting it later would change nothing, so the
    // API server refuses it (a spec change that does nothing would tell GitOps a lie).
    let stderr = patch_refused(
        &env,
        n,
        "clouddatabase",
        "orders",
        "merge",
        r#"{"spec":{"engineVersion":"17.2"}}"#,
    );
    assert!(
        says_one_of(
            &stderr,
            &cel_refusals(
                "spec.engineVersion",
                "object",
                "",
                "engineVersion is immutable"
            )
        ),
        "{stderr}"
    );
    assert_eq!(spec(&env, n, "clouddatabase/orders"), before);
}

//! An object that does not decode (issue 25). A looser schema than keeper's types (an older CRD
//! left in place, a field edited around the schema) lets the API store an S3Bucket whose field
//! has the wrong type; one such object must not stall every bucket, and its owner must see what
//! to fix. The scenario loosens the S3Bucket CRD's `spec.versioning` to any value for its
//! duration (the suite runs one test at a time; the schema is put back even when it fails),
//! stores `versioning: "yes"`, and checks that keeper leaves that bucket alone, reports it on the
//! object, keeps reconciling the others, and takes the bucket up once it is fixed.

use std::time::Duration;

use keeper_e2e_scenarios::{Env, Keeper, condition, condition_is, wait_for, wait_until};
use serde_json::{Value, json};

const CRD: &str = "customresourcedefinition/s3buckets.keeper.dev";
const VERSIONING: &str =
    "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/versioning";

/// The S3Bucket CRD with `spec.versioning` loosened to any value, until dropped.
struct LooseVersioning<'a> {
    env: &'a Env,
    original: Value,
}

impl<'a> LooseVersioning<'a> {
    fn loosen(env: &'a Env) -> Self {
        let crd: Value =
            serde_json::from_str(&env.kubectl(&["get", CRD, "-o", "json"]).unwrap()).unwrap();
        let original = crd
            .pointer(VERSIONING)
            .expect("spec.versioning's schema")
            .clone();
        assert_eq!(original["type"], "boolean", "{original}");
        let loose = json!({"x-kubernetes-preserve-unknown-fields": true});
        patch_crd(env, &loose);
        LooseVersioning { env, original }
    }
}

impl Drop for LooseVersioning<'_> {
    fn drop(&mut self) {
        patch_crd(self.env, &self.original);
    }
}

fn patch_crd(env: &Env, schema: &Value) {
    let patch = json!([{"op": "replace", "path": VERSIONING, "value": schema}]);
    env.kubectl(&["patch", CRD, "--type", "json", "-p", &patch.to_string()])
        .unwrap();
}

fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn ready(env: &Env, ns: &str, resource: &str) -> Value {
    wait_for(env, ns, resource, "Ready", Duration::from_secs(60), |o| {
        condition_is(o, "Ready", "True")
    })
}

fn bucket(name: &str, versioning: &str) -> String {
    manifest(
        "S3Bucket",
        name,
        &format!("  tenantRef:\n    name: t\n  versioning: {versioning}\n"),
    )
}

#[test]
fn an_undecodable_bucket_is_reported_on_itself_and_stalls_no_other() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-quarantine").unwrap();
    let n = ns.name.as_str();
    let _keeper = Keeper::start(&env).unwrap();
    env.apply(n, &manifest("S3Tenant", "t", "  provider: default\n"))
        .unwrap();
    ready(&env, n, "s3tenant/t");

    let loose = LooseVersioning::loosen(&env);
    // The API server serves the new schema shortly after the CRD changes.
    wait_until(
        Duration::from_secs(30),
        "the loosened schema is served",
        || {
            let out =
                env.kubectl_input(&["apply", "-n", n, "-f", "-"], &bucket("bad", "\"yes\""))?;
            Ok(out.status.success())
        },
    )
    .unwrap();
    env.apply(n, &bucket("good", "false")).unwrap();

    let bad = wait_for(
        &env,
        n,
        "s3bucket/bad",
        "InvalidObject",
        Duration::from_secs(60),
        |o| condition(o, "Ready").is_some_and(|c| c["reason"] == "InvalidObject"),
    );
    let reported = condition(&bad, "Ready").unwrap();
    assert_eq!(reported["status"], "False", "{reported:#}");
    let message = reported["message"].as_str().unwrap();
    assert!(message.contains("spec.versioning"), "{message}");
    assert!(message.contains("invalid type"), "{message}");
    assert_eq!(bad["status"]["phase"], "Failed", "{bad:#}");
    assert_eq!(
        bad["status"]["observedGeneration"],
        bad["metadata"]["generation"]
    );
    // keeper did nothing with it: not even its finalizer.
    assert!(bad["metadata"]["finalizers"].is_null(), "{bad:#}");
    let events = env.events_of(n, "S3Bucket", "bad").unwrap();
    let warnings: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "InvalidObject")
        .collect();
    assert_eq!(warnings.len(), 1, "{events:#?}");
    assert_eq!(warnings[0]["type"], "Warning");

    // Every other bucket goes on.
    ready(&env, n, "s3bucket/good");

    // Fixed, it is taken up at once.
    env.kubectl(&[
        "patch",
        "-n",
        n,
        "s3bucket",
        "bad",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"versioning":true}}"#,
    ])
    .unwrap();
    let fixed = ready(&env, n, "s3bucket/bad");
    assert_eq!(fixed["status"]["phase"], "Ready", "{fixed:#}");
    drop(loose);
    // Reported once: keeper's own status write did not report it again.
    let events = env.events_of(n, "S3Bucket", "bad").unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e["reason"] == "InvalidObject")
            .count(),
        1,
        "{events:#?}"
    );
}

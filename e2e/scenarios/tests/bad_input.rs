//! The bad-input corpus (issue 14): every field of every keeper CRD gets values of the wrong
//! type, out of range, off its enum or pattern, a 1 MiB string, and (for identity fields) a
//! change after creation. Each one is refused by the API server (schema, CEL) with the field's
//! path in the message and the stored object stays as it was; what the schema lets through but
//! keeper cannot carry out (an unknown provider, a missing tenant, unicode and names at their
//! length limits) is surfaced as a condition on the object. keeper runs the whole time and must
//! not panic.

use std::collections::BTreeSet;
use std::time::Duration;

use keeper_e2e_scenarios::{Env, Keeper, accounts_of, condition, wait_for};
use serde_json::{Value, json};

const API_VERSION: &str = "keeper.dev/v1alpha1";

/// One value the API server must refuse: `spec` (merged into a valid spec of `kind`) is refused
/// with `path` and every one of `words` in the message.
struct Refused {
    kind: &'static str,
    field: &'static str,
    spec: Value,
    words: &'static [&'static str],
}

fn refused(
    kind: &'static str,
    field: &'static str,
    spec: Value,
    words: &'static [&'static str],
) -> Refused {
    Refused {
        kind,
        field,
        spec,
        words,
    }
}

/// A spec of `kind` the API server accepts (and keeper needs no backend for: nothing is made).
fn valid_spec(kind: &str) -> Value {
    match kind {
        "S3Tenant" => json!({"provider": "no-such-provider"}),
        "S3Bucket" => json!({"tenantRef": {"name": "no-such-tenant"}}),
        "CloudDatabase" => {
            json!({"engine": "postgres", "size": "small", "deletionPolicy": "Delete"})
        }
        other => panic!("unknown kind {other}"),
    }
}

fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

fn manifest(kind: &str, name: &str, spec: &Value) -> String {
    json!({"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec})
        .to_string()
}

/// Values the schema or a CEL rule refuses at creation, at least one for every spec field.
fn creation_corpus() -> Vec<Refused> {
    let mib = "x".repeat(1 << 20);
    vec![
        // S3Tenant
        refused(
            "S3Tenant",
            "spec.provider",
            json!({"provider": 7}),
            &["spec.provider", "must be of type string"],
        ),
        refused(
            "S3Tenant",
            "spec.provider",
            json!({"provider": ""}),
            &["spec.provider"],
        ),
        refused(
            "S3Tenant",
            "spec.provider",
            json!({"provider": "p".repeat(64)}),
            &["spec.provider", "Too long"],
        ),
        refused(
            "S3Tenant",
            "spec.displayName",
            json!({"displayName": ["a"]}),
            &["spec.displayName", "must be of type string"],
        ),
        refused(
            "S3Tenant",
            "spec.displayName",
            json!({"displayName": ""}),
            &["spec.displayName"],
        ),
        refused(
            "S3Tenant",
            "spec.displayName",
            json!({"displayName": mib}),
            &["spec.displayName", "Too long"],
        ),
        refused(
            "S3Tenant",
            "spec.displayName",
            json!({"displayName": "ü".repeat(65)}),
            &["spec.displayName", "Too long"],
        ),
        refused(
            "S3Tenant",
            "spec.deletionPolicy",
            json!({"deletionPolicy": "Orphan"}),
            &["spec.deletionPolicy", "Unsupported value", "\"Retain\""],
        ),
        refused(
            "S3Tenant",
            "spec.deletionPolicy",
            json!({"deletionPolicy": "delete"}),
            &["spec.deletionPolicy", "Unsupported value"],
        ),
        refused(
            "S3Tenant",
            "spec.deletionProtection",
            json!({"deletionProtection": "yes"}),
            &["spec.deletionProtection", "must be of type boolean"],
        ),
        refused(
            "S3Tenant",
            "spec.allowPlatformServices",
            json!({"allowPlatformServices": 1}),
            &["spec.allowPlatformServices", "must be of type boolean"],
        ),
        refused(
            "S3Tenant",
            "spec.quota",
            json!({"quota": "lots"}),
            &["spec.quota", "should match"],
        ),
        refused(
            "S3Tenant",
            "spec.quota",
            json!({"quota": "-1Gi"}),
            &["spec.quota", "should match"],
        ),
        refused(
            "S3Tenant",
            "spec.quota",
            json!({"quota": "10 Gi"}),
            &["spec.quota", "should match"],
        ),
        refused(
            "S3Tenant",
            "spec",
            json!("everything"),
            &["spec", "must be of type object"],
        ),
        // S3Bucket
        refused(
            "S3Bucket",
            "spec",
            json!(["a", "list"]),
            &["spec", "must be of type object"],
        ),
        refused(
            "S3Bucket",
            "spec.tenantRef",
            json!({"tenantRef": "t"}),
            &["spec.tenantRef", "must be of type object"],
        ),
        refused(
            "S3Bucket",
            "spec.tenantRef.name",
            json!({"tenantRef": {"name": ""}}),
            &["spec.tenantRef.name"],
        ),
        refused(
            "S3Bucket",
            "spec.tenantRef.name",
            json!({"tenantRef": {"name": "t".repeat(254)}}),
            &["spec.tenantRef.name", "Too long"],
        ),
        refused(
            "S3Bucket",
            "spec.bucketName",
            json!({"bucketName": "Upper-Case"}),
            &["spec.bucketName", "should match"],
        ),
        refused(
            "S3Bucket",
            "spec.bucketName",
            json!({"bucketName": "ab"}),
            &["spec.bucketName"],
        ),
        refused(
            "S3Bucket",
            "spec.bucketName",
            json!({"bucketName": "b".repeat(64)}),
            &["spec.bucketName", "Too long"],
        ),
        refused(
            "S3Bucket",
            "spec.bucketName",
            json!({"bucketName": "192.168.1.10"}),
            &["spec.bucketName"],
        ),
        refused(
            "S3Bucket",
            "spec.bucketName",
            json!({"bucketName": "emoji-🪣"}),
            &["spec.bucketName", "should match"],
        ),
        refused(
            "S3Bucket",
            "spec.bucketName",
            json!({"bucketName": mib}),
            &["spec.bucketName", "Too long"],
        ),
        refused(
            "S3Bucket",
            "spec.deletionPolicy",
            json!({"deletionPolicy": "Snapshot"}),
            &["spec.deletionPolicy", "Unsupported value"],
        ),
        refused(
            "S3Bucket",
            "spec.versioning",
            json!({"versioning": "true"}),
            &["spec.versioning", "must be of type boolean"],
        ),
        refused(
            "S3Bucket",
            "spec.objectLock",
            json!({"objectLock": "no"}),
            &["spec.objectLock", "must be of type boolean"],
        ),
        refused(
            "S3Bucket",
            "spec.region",
            json!({"region": ""}),
            &["spec.region"],
        ),
        refused(
            "S3Bucket",
            "spec.region",
            json!({"region": "r".repeat(65)}),
            &["spec.region", "Too long"],
        ),
        refused(
            "S3Bucket",
            "spec.drain",
            json!({"drain": 30}),
            &["spec.drain", "must be of type object"],
        ),
        refused(
            "S3Bucket",
            "spec.drain.pollInterval",
            json!({"drain": {"pollInterval": "fast"}}),
            &["spec.drain.pollInterval", "should match"],
        ),
        refused(
            "S3Bucket",
            "spec.drain.pollInterval",
            json!({"drain": {"pollInterval": 30}}),
            &["spec.drain.pollInterval", "must be of type string"],
        ),
        refused(
            "S3Bucket",
            "spec.drain.pollInterval",
            json!({"drain": {"pollInterval": "0s"}}),
            &["spec.drain.pollInterval", "at least 1s"],
        ),
        refused(
            "S3Bucket",
            "spec.drain.stuckThreshold",
            json!({"drain": {"stuckThreshold": "1 hour"}}),
            &["spec.drain.stuckThreshold", "should match"],
        ),
        refused(
            "S3Bucket",
            "spec.drain.stuckThreshold",
            json!({"drain": {"stuckThreshold": "-5m"}}),
            &["spec.drain.stuckThreshold", "should match"],
        ),
        // CloudDatabase
        refused(
            "CloudDatabase",
            "spec",
            json!(12),
            &["spec", "must be of type object"],
        ),
        refused(
            "CloudDatabase",
            "spec.engine",
            json!({"engine": "oracle"}),
            &["spec.engine", "Unsupported value", "\"mysql\""],
        ),
        refused(
            "CloudDatabase",
            "spec.engine",
            json!({"engine": 5}),
            &["spec.engine"],
        ),
        refused(
            "CloudDatabase",
            "spec.size",
            json!({"size": "huge"}),
            &["spec.size", "Unsupported value", "\"large\""],
        ),
        refused(
            "CloudDatabase",
            "spec.size",
            json!({"size": "Small"}),
            &["spec.size", "Unsupported value"],
        ),
        refused(
            "CloudDatabase",
            "spec.storageGiB",
            json!({"storageGiB": 19}),
            &["spec.storageGiB", "greater than or equal to 20"],
        ),
        refused(
            "CloudDatabase",
            "spec.storageGiB",
            json!({"storageGiB": 65537}),
            &["spec.storageGiB", "less than or equal to 65536"],
        ),
        refused(
            "CloudDatabase",
            "spec.storageGiB",
            json!({"storageGiB": "20"}),
            &["spec.storageGiB", "must be of type integer"],
        ),
        refused(
            "CloudDatabase",
            "spec.storageGiB",
            json!({"storageGiB": 20.5}),
            &["spec.storageGiB", "must be of type integer"],
        ),
        refused(
            "CloudDatabase",
            "spec.deletionPolicy",
            json!({"deletionPolicy": "Orphan"}),
            &["spec.deletionPolicy", "Unsupported value", "\"Snapshot\""],
        ),
        refused(
            "CloudDatabase",
            "spec.deletionProtection",
            json!({"deletionProtection": "false"}),
            &["spec.deletionProtection", "must be of type boolean"],
        ),
        refused(
            "CloudDatabase",
            "spec.engineVersion",
            json!({"engineVersion": ""}),
            &["spec.engineVersion"],
        ),
        refused(
            "CloudDatabase",
            "spec.engineVersion",
            json!({"engineVersion": "1".repeat(33)}),
            &["spec.engineVersion", "Too long"],
        ),
        refused(
            "CloudDatabase",
            "spec.databaseName",
            json!({"databaseName": "1app"}),
            &["spec.databaseName", "should match"],
        ),
        refused(
            "CloudDatabase",
            "spec.databaseName",
            json!({"databaseName": "app-db"}),
            &["spec.databaseName", "should match"],
        ),
        refused(
            "CloudDatabase",
            "spec.databaseName",
            json!({"databaseName": "d".repeat(64)}),
            &["spec.databaseName", "Too long"],
        ),
        refused(
            "CloudDatabase",
            "spec.databaseName",
            json!({"databaseName": "datenbank_ä"}),
            &["spec.databaseName", "should match"],
        ),
        refused(
            "CloudDatabase",
            "spec.masterUsername",
            json!({"masterUsername": "admin!"}),
            &["spec.masterUsername", "should match"],
        ),
        refused(
            "CloudDatabase",
            "spec.masterUsername",
            json!({"masterUsername": "u".repeat(17)}),
            &["spec.masterUsername", "Too long"],
        ),
        refused(
            "CloudDatabase",
            "spec.connectionSecretName",
            json!({"connectionSecretName": "Bad_Name"}),
            &["spec.connectionSecretName", "should match"],
        ),
        refused(
            "CloudDatabase",
            "spec.connectionSecretName",
            json!({"connectionSecretName": "s".repeat(254)}),
            &["spec.connectionSecretName", "Too long"],
        ),
        refused(
            "CloudDatabase",
            "spec.connectionSecretName",
            json!({"connectionSecretName": mib}),
            &["spec.connectionSecretName", "Too long"],
        ),
    ]
}

/// Identity fields: accepted at creation, refused when changed (or added, or removed) later.
fn change_corpus() -> Vec<(Refused, Value)> {
    let created = |kind: &'static str,
                   field: &'static str,
                   at_creation: Value,
                   change: Value,
                   words: &'static [&'static str]| {
        (refused(kind, field, change, words), at_creation)
    };
    vec![
        created(
            "S3Tenant",
            "spec.provider",
            json!({"provider": "one"}),
            json!({"provider": "two"}),
            &["spec.provider", "immutable"],
        ),
        created(
            "S3Bucket",
            "spec.tenantRef",
            json!({}),
            json!({"tenantRef": {"name": "another"}}),
            &["spec.tenantRef", "immutable"],
        ),
        created(
            "S3Bucket",
            "spec.bucketName",
            json!({"bucketName": "first-name"}),
            json!({"bucketName": "second-name"}),
            &["spec", "bucketName"],
        ),
        created(
            "S3Bucket",
            "spec.bucketName",
            json!({}),
            json!({"bucketName": "named-later"}),
            &["spec", "bucketName"],
        ),
        created(
            "S3Bucket",
            "spec.region",
            json!({"region": "eu-west-1"}),
            json!({"region": "us-east-1"}),
            &["spec", "region"],
        ),
        created(
            "S3Bucket",
            "spec.objectLock",
            json!({"objectLock": false}),
            json!({"objectLock": true}),
            &["spec.objectLock", "immutable"],
        ),
        created(
            "CloudDatabase",
            "spec.engine",
            json!({}),
            json!({"engine": "mysql"}),
            &["spec.engine", "immutable"],
        ),
        created(
            "CloudDatabase",
            "spec.databaseName",
            json!({"databaseName": "app"}),
            json!({"databaseName": "other"}),
            &["spec", "databaseName"],
        ),
        created(
            "CloudDatabase",
            "spec.masterUsername",
            json!({"masterUsername": "owner"}),
            json!({"masterUsername": "root"}),
            &["spec", "masterUsername"],
        ),
    ]
}

/// Every field path under `spec` in `schema` (objects and their members).
fn spec_fields(schema: &Value, path: &str, out: &mut BTreeSet<String>) {
    out.insert(path.to_string());
    for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
        spec_fields(sub, &format!("{path}.{name}"), out);
    }
}

/// The spec fields of `kind` as the API server serves its CRD.
fn served_fields(env: &Env, plural: &str) -> BTreeSet<String> {
    let crd: Value = serde_json::from_str(
        &env.kubectl(&["get", "crd", &format!("{plural}.keeper.dev"), "-o", "json"])
            .unwrap(),
    )
    .unwrap();
    let mut fields = BTreeSet::new();
    for version in crd["spec"]["versions"].as_array().unwrap() {
        spec_fields(
            &version["schema"]["openAPIV3Schema"]["properties"]["spec"],
            "spec",
            &mut fields,
        );
    }
    fields
}

fn kubectl_error(env: &Env, args: &[&str]) -> Option<String> {
    let out = env.kubectl_output(args).unwrap();
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `kubectl create -f -` of `manifest`: the error text, or `None` when it was created. Not
/// `apply`: apply copies the object into its last-applied annotation, whose 256 KiB limit would
/// refuse a 1 MiB value before the field's own rule is reached.
fn create_error(env: &Env, namespace: &str, manifest: &str) -> Option<String> {
    let out = env
        .kubectl_input(&["create", "-n", namespace, "-f", "-"], manifest)
        .expect("kubectl runs");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

fn check_refusal(case: &Refused, error: Option<String>, what: &str) {
    let error = error.unwrap_or_else(|| {
        panic!(
            "{} {} = {}: {what} was accepted",
            case.kind,
            case.field,
            shown(&case.spec)
        )
    });
    for word in case.words {
        assert!(
            error.contains(word),
            "{} {} = {}: {what} refused without {word:?}: {}",
            case.kind,
            case.field,
            shown(&case.spec),
            shown_error(&error)
        );
    }
}

/// A value for a failure message (1 MiB strings shortened).
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 120 {
        format!(
            "{}... ({} bytes)",
            &text[..text.floor_char_boundary(120)],
            text.len()
        )
    } else {
        text
    }
}

fn shown_error(error: &str) -> String {
    if error.len() > 600 {
        format!(
            "{}... ({} bytes)",
            &error[..error.floor_char_boundary(600)],
            error.len()
        )
    } else {
        error.to_string()
    }
}

#[test]
fn the_corpus_covers_every_spec_field_of_every_kind() {
    let env = Env::from_env().unwrap();
    let creation = creation_corpus();
    let changes = change_corpus();
    for (kind, plural) in [
        ("S3Tenant", "s3tenants"),
        ("S3Bucket", "s3buckets"),
        ("CloudDatabase", "clouddatabases"),
    ] {
        let covered: BTreeSet<String> = creation
            .iter()
            .chain(changes.iter().map(|(case, _)| case))
            .filter(|case| case.kind == kind)
            .map(|case| case.field.to_string())
            .collect();
        let missing: Vec<_> = served_fields(&env, plural)
            .difference(&covered)
            .cloned()
            .collect();
        assert!(
            missing.is_empty(),
            "{kind}: no bad-input case for {missing:?}"
        );
    }
}

#[test]
fn every_bad_value_is_refused_with_its_field_path_and_the_object_is_unchanged() {
    // The API server alone refuses these: no keeper process is needed (none sees them).
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-bad-input").unwrap();
    let n = ns.name.as_str();

    for (i, case) in creation_corpus().iter().enumerate() {
        let mut spec = valid_spec(case.kind);
        merge(&mut spec, &case.spec);
        let name = format!("bad-{i}");
        check_refusal(
            case,
            create_error(&env, n, &manifest(case.kind, &name, &spec)),
            "creation",
        );
        let resource = format!("{}/{name}", case.kind.to_lowercase());
        assert_eq!(
            env.get_json(n, &resource).unwrap(),
            None,
            "{resource} exists after a refusal"
        );
    }

    for (i, (case, at_creation)) in change_corpus().iter().enumerate() {
        let mut spec = valid_spec(case.kind);
        merge(&mut spec, at_creation);
        let name = format!("fixed-{i}");
        let resource = format!("{}/{name}", case.kind.to_lowercase());
        env.apply(n, &manifest(case.kind, &name, &spec)).unwrap();
        let before = env.get_json(n, &resource).unwrap().unwrap()["spec"].clone();
        let patch = json!({"spec": case.spec}).to_string();
        let error = kubectl_error(
            &env,
            &["patch", "-n", n, &resource, "--type", "merge", "-p", &patch],
        );
        check_refusal(case, error, "a change");
        let after = env.get_json(n, &resource).unwrap().unwrap()["spec"].clone();
        assert_eq!(
            after, before,
            "{resource}: a refused change altered the spec"
        );
        env.kubectl(&["delete", "-n", n, &resource]).unwrap();
    }

    let error = create_error(
        &env,
        n,
        &manifest("S3Bucket", &"b".repeat(254), &valid_spec("S3Bucket")),
    )
    .expect("a 254-character name was accepted");
    assert!(error.contains("metadata.name"), "{}", shown_error(&error));
}

#[test]
fn what_the_schema_lets_through_but_keeper_cannot_do_is_a_condition_and_keeper_does_not_panic() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-bad-input").unwrap();
    let n = ns.name.as_str();
    let keeper = Keeper::start(&env).unwrap();

    // Names at the API's length limit and unicode pass the schema.
    let long_tenant = "t".repeat(253);
    let long_bucket = "b".repeat(253);
    env.apply(
        n,
        &manifest(
            "S3Tenant",
            &long_tenant,
            &json!({"displayName": "テナント 🚀 ".repeat(8)}),
        ),
    )
    .unwrap();
    env.apply(
        n,
        &manifest(
            "S3Bucket",
            &long_bucket,
            &json!({"tenantRef": {"name": long_tenant}}),
        ),
    )
    .unwrap();
    env.apply(n, &manifest("S3Tenant", "nowhere", &valid_spec("S3Tenant")))
        .unwrap();
    env.apply(n, &manifest("S3Bucket", "orphan", &valid_spec("S3Bucket")))
        .unwrap();

    let nowhere = wait_for(
        &env,
        n,
        "s3tenant/nowhere",
        "Failed: ProviderNotConfigured",
        Duration::from_secs(60),
        |t| {
            t["status"]["phase"] == "Failed"
                && condition(t, "Ready").is_some_and(|c| c["reason"] == "ProviderNotConfigured")
        },
    );
    let message = condition(&nowhere, "Ready").unwrap()["message"].to_string();
    assert!(message.contains("no-such-provider"), "{message}");
    wait_for(
        &env,
        n,
        "s3bucket/orphan",
        "Waiting: TenantNotFound",
        Duration::from_secs(60),
        |b| condition(b, "Ready").is_some_and(|c| c["reason"] == "TenantNotFound"),
    );
    // Its Secrets' names (`<name>-root-credentials`) would pass the API's limit: the API refuses
    // the first Secret, which keeper writes before it asks the grid for anything, so it shows the
    // refusal and makes no account.
    let tenant = wait_for(
        &env,
        n,
        &format!("s3tenant/{long_tenant}"),
        "Failed: KubernetesError",
        Duration::from_secs(60),
        |t| {
            t["status"]["phase"] == "Failed"
                && condition(t, "Ready").is_some_and(|c| c["reason"] == "KubernetesError")
        },
    );
    let message = condition(&tenant, "Ready").unwrap()["message"].to_string();
    assert!(message.contains("metadata.name"), "{message}");
    let uid = tenant["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        accounts_of(&env, uid),
        Vec::<Value>::new(),
        "an account was made for a tenant keeper cannot finish"
    );
    wait_for(
        &env,
        n,
        &format!("s3bucket/{long_bucket}"),
        "Waiting: TenantNotReady",
        Duration::from_secs(60),
        |b| condition(b, "Ready").is_some_and(|c| c["reason"] == "TenantNotReady"),
    );

    for resource in [
        format!("s3bucket/{long_bucket}"),
        "s3bucket/orphan".into(),
        format!("s3tenant/{long_tenant}"),
        "s3tenant/nowhere".into(),
    ] {
        env.kubectl(&["delete", "-n", n, &resource, "--timeout=60s"])
            .unwrap();
    }
    let log = keeper.log_text();
    assert!(!log.contains("panicked"), "keeper panicked:\n{log}");
    keeper.terminate().expect("keeper stops on SIGTERM");
}

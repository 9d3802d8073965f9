//! CEL `x-kubernetes-validations` of keeper's own CRDs (crds/*.yaml): transition rules with
//! `oldSelf` make identity fields immutable, other rules run on create too; failures answer
//! 422 Invalid like kube-apiserver.

use crate::common::*;
use serde_json::{Value, json};

const TENANT_CRD: &str = include_str!("../../../../crds/s3tenants.keeper.dev.yaml");
const BUCKET_CRD: &str = include_str!("../../../../crds/s3buckets.keeper.dev.yaml");
const DATABASE_CRD: &str = include_str!("../../../../crds/clouddatabases.keeper.dev.yaml");

const MERGE: Option<&str> = Some("application/merge-patch+json");

fn path(plural: &str, name: &str) -> String {
    format!("/apis/keeper.dev/v1alpha1/namespaces/default/{plural}/{name}")
}

async fn with_crds() -> Env {
    let env = Env::new().await;
    for crd in [TENANT_CRD, BUCKET_CRD, DATABASE_CRD] {
        env.apply(crd).await;
    }
    env
}

async fn create(env: &Env, plural: &str, kind: &str, name: &str, spec: Value) -> (u16, Value) {
    let (code, _, body) = env
        .raw(
            "POST",
            &format!("/apis/keeper.dev/v1alpha1/namespaces/default/{plural}"),
            None,
            Some(json!({"apiVersion": "keeper.dev/v1alpha1", "kind": kind,
                "metadata": {"name": name}, "spec": spec})),
        )
        .await;
    (code, body)
}

async fn patch(env: &Env, plural: &str, name: &str, body: Value) -> (u16, Value) {
    let (code, _, body) = env
        .raw("PATCH", &path(plural, name), MERGE, Some(body))
        .await;
    (code, body)
}

/// The single cause of a 422 as `field: message`.
fn cause(st: &Value) -> String {
    let causes = st["details"]["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 1, "{st}");
    assert_eq!(causes[0]["reason"], "FieldValueInvalid", "{st}");
    format!(
        "{}: {}",
        causes[0]["field"].as_str().unwrap_or_default(),
        causes[0]["message"].as_str().unwrap_or_default()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_field_change_is_rejected_like_kube() {
    let env = with_crds().await;
    // A transition rule is skipped on create: there is no oldSelf.
    let (code, st) = create(
        &env,
        "s3tenants",
        "S3Tenant",
        "t",
        json!({"provider": "grid"}),
    )
    .await;
    assert_eq!(code, 201, "{st}");
    let (code, st) = patch(
        &env,
        "s3tenants",
        "t",
        json!({"spec": {"provider": "other"}}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "reason": "Invalid", "code": 422,
            "message": "S3Tenant.keeper.dev \"t\" is invalid: spec.provider: Invalid value: \"string\": provider is immutable: the tenant's account lives on that provider",
            "details": {"name": "t", "group": "keeper.dev", "kind": "S3Tenant", "causes": [
                {"reason": "FieldValueInvalid", "field": "spec.provider",
                 "message": "Invalid value: \"string\": provider is immutable: the tenant's account lives on that provider"}]}})
    );
    let (_, _, now) = env.raw("GET", &path("s3tenants", "t"), None, None).await;
    assert_eq!(now["spec"]["provider"], "grid");
    // The same value, or a change elsewhere, passes.
    let (code, st) = patch(
        &env,
        "s3tenants",
        "t",
        json!({"spec": {"provider": "grid", "quota": "1Gi"}}),
    )
    .await;
    assert_eq!(code, 200, "{st}");
    // kubectl shows the field path and the rule's message.
    let r = env
        .kubectl(&[
            "patch",
            "s3tenant",
            "t",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"provider":"other"}}"#,
        ])
        .await;
    assert!(!r.ok);
    assert!(
        r.stderr.contains("The S3Tenant \"t\" is invalid: spec.provider: Invalid value: \"string\": provider is immutable"),
        "{}",
        r.stderr
    );
    // An immutable object field (S3Bucket tenantRef) compares whole objects.
    let (code, st) = create(
        &env,
        "s3buckets",
        "S3Bucket",
        "b",
        json!({"tenantRef": {"name": "t"}}),
    )
    .await;
    assert_eq!(code, 201, "{st}");
    let (code, st) = patch(
        &env,
        "s3buckets",
        "b",
        json!({"spec": {"tenantRef": {"name": "u"}}}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec.tenantRef: Invalid value: \"object\": tenantRef is immutable"
    );
    let (code, st) = patch(
        &env,
        "s3buckets",
        "b",
        json!({"spec": {"objectLock": true}}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec.objectLock: Invalid value: \"boolean\": objectLock is immutable"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn has_rules_forbid_adding_removing_or_changing_optional_identity_fields() {
    let env = with_crds().await;
    let (code, st) = create(
        &env,
        "s3buckets",
        "S3Bucket",
        "b",
        json!({"tenantRef": {"name": "t"}, "region": "eu-west-1"}),
    )
    .await;
    assert_eq!(code, 201, "{st}");
    // bucketName absent at create, added later.
    let (code, st) = patch(
        &env,
        "s3buckets",
        "b",
        json!({"spec": {"bucketName": "late-name"}}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec.bucketName: Invalid value: \"object\": bucketName is immutable"
    );
    // region removed, then changed.
    let (code, st) = patch(&env, "s3buckets", "b", json!({"spec": {"region": null}})).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec.region: Invalid value: \"object\": region is immutable"
    );
    let (code, st) = patch(
        &env,
        "s3buckets",
        "b",
        json!({"spec": {"region": "us-east-1"}}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    // CloudDatabase: databaseName and masterUsername, both wrong at once.
    let spec = json!({"engine": "postgres", "size": "small", "databaseName": "app"});
    let (code, st) = create(&env, "clouddatabases", "CloudDatabase", "d", spec).await;
    assert_eq!(code, 201, "{st}");
    let (code, st) = patch(
        &env,
        "clouddatabases",
        "d",
        json!({"spec": {"databaseName": "other", "masterUsername": "root"}}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        st["message"],
        "CloudDatabase.keeper.dev \"d\" is invalid: [spec.databaseName: Invalid value: \"object\": databaseName is immutable: it is fixed when the instance is created, spec.masterUsername: Invalid value: \"object\": masterUsername is immutable: it is fixed when the instance is created]"
    );
    let (code, st) = patch(
        &env,
        "clouddatabases",
        "d",
        json!({"spec": {"engine": "mysql"}}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec.engine: Invalid value: \"string\": engine is immutable"
    );
    let (code, st) = patch(
        &env,
        "clouddatabases",
        "d",
        json!({"spec": {"size": "large"}}),
    )
    .await;
    assert_eq!(code, 200, "{st}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_rules_run_on_create_and_update() {
    let env = with_crds().await;
    let (code, st) = create(
        &env,
        "s3buckets",
        "S3Bucket",
        "ip",
        json!({"tenantRef": {"name": "t"}, "bucketName": "10.0.0.1"}),
    )
    .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec.bucketName: Invalid value: \"string\": bucketName must not be formatted as an IP address"
    );
    let (code, st) = create(
        &env,
        "s3buckets",
        "S3Bucket",
        "ok",
        json!({"tenantRef": {"name": "t"}, "bucketName": "10.0.0.1x"}),
    )
    .await;
    assert_eq!(code, 201, "{st}");
    // kubectl apply of the same manifest shows the rule's message.
    let bad = "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: ip\nspec:\n  tenantRef: {name: t}\n  bucketName: 192.168.0.1\n";
    let r = env.kubectl_in(&["apply", "-f", "-"], Some(bad)).await;
    assert!(!r.ok);
    assert!(
        r.stderr.contains("spec.bucketName: Invalid value: \"string\": bucketName must not be formatted as an IP address"),
        "{}",
        r.stderr
    );
    env.stop().await;
}

const RULES_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-validations:
        - rule: self.metadata.name.startsWith('w')
        properties:
          spec:
            type: object
            properties:
              min: {type: integer}
              max: {type: integer}
              broken: {type: string, x-kubernetes-validations: [{rule: "self ==="}]}
              lookup: {type: object, x-kubernetes-validations: [{rule: "self.key == 'x'"}]}
              items:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  properties: {name: {type: string}, size: {type: integer}}
                  x-kubernetes-validations:
                  - {rule: "self.size >= oldSelf.size", message: may only grow, reason: FieldValueForbidden, fieldPath: .size}
            x-kubernetes-validations:
            - rule: "!has(self.min) || !has(self.max) || self.min <= self.max"
            - rule: "!has(self.max) || self.max < 100"
              messageExpression: "'max is ' + string(self.max) + ', above 99'"
          status:
            type: object
            properties:
              count: {type: integer, x-kubernetes-validations: [{rule: "self >= 0", message: must not be negative}]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_features_and_failures_answer_422() {
    let env = Env::new().await;
    env.apply(RULES_CRD).await;
    let base = "/apis/example.com/v1/namespaces/default/widgets";
    let envr = &env;
    let post = move |name: &str, spec: Value| {
        let body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec});
        async move { envr.raw("POST", base, None, Some(body)).await }
    };
    // Root rules see metadata.name; their field is kube's `<nil>`; no message: `failed rule: `.
    let (code, _, st) = post("gadget", json!({})).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "<nil>: Invalid value: \"object\": failed rule: self.metadata.name.startsWith('w')"
    );
    let (code, _, st) = post("w1", json!({"min": 5, "max": 3})).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec: Invalid value: \"object\": failed rule: !has(self.min) || !has(self.max) || self.min <= self.max"
    );
    let (code, _, st) = post("w1", json!({"max": 150})).await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "spec: Invalid value: \"object\": max is 150, above 99"
    );
    // A rule that does not compile, or fails to evaluate, is an error, never a pass.
    let (code, _, st) = post("w1", json!({"broken": "x"})).await;
    assert_eq!(code, 422, "{st}");
    let c = cause(&st);
    assert!(
        c.starts_with("spec.broken: Invalid value: \"string\": rule compile error: "),
        "{c}"
    );
    let (code, _, st) = post("w1", json!({"lookup": {}})).await;
    assert_eq!(code, 422, "{st}");
    let c = cause(&st);
    assert!(
        c.starts_with("spec.lookup: Invalid value: \"object\": "),
        "{c}"
    );
    assert!(c.ends_with(" evaluating rule: self.key == 'x'"), "{c}");
    // Type errors keep the rules from running, as in kube-apiserver.
    let (code, _, st) = post("w1", json!({"min": "five", "max": 150})).await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("<nil>: Invalid value: \"null\": some validation rules were not checked"),
        "{st}"
    );
    // Items of a map list correlate by key: a transition rule runs against the same item.
    let (code, _, st) = post("w1", json!({"items": [{"name": "a", "size": 2}]})).await;
    assert_eq!(code, 201, "{st}");
    let w1 = format!("{base}/w1");
    let (code, _, st) = env
        .raw(
            "PATCH",
            &w1,
            MERGE,
            Some(json!({"spec": {"items": [{"name": "b", "size": 1}, {"name": "a", "size": 1}]}})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    let causes = &st["details"]["causes"];
    assert_eq!(causes.as_array().map(Vec::len), Some(1), "{st}");
    assert_eq!(causes[0]["reason"], "FieldValueForbidden");
    assert_eq!(causes[0]["field"], "spec.items[1].size");
    assert_eq!(causes[0]["message"], "Forbidden: may only grow");
    // The status subresource is validated too.
    let (code, _, st) = env
        .raw(
            "PATCH",
            &format!("{w1}/status"),
            MERGE,
            Some(json!({"status": {"count": -1}})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        cause(&st),
        "status.count: Invalid value: \"integer\": must not be negative"
    );
    env.stop().await;
}

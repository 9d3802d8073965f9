use std::path::Path;

use super::policy::NAMESPACE_CONTROLLER_USERS;
use super::*;
use crate::api::{S3Bucket, S3Tenant};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn tenant(spec: Value) -> S3Tenant {
    let mut t = S3Tenant::new("team-a", serde_json::from_value(spec).unwrap());
    t.metadata.namespace = Some("ns".into());
    t
}

fn bucket() -> S3Bucket {
    S3Bucket::new(
        "logs",
        serde_json::from_value(json!({"tenantRef": {"name": "team-a"}})).unwrap(),
    )
}

#[test]
fn protected_tenants_are_denied_with_how_to_lift_it() {
    let t = tenant(json!({"deletionProtection": true}));
    let Verdict::Deny(message) = tenant_delete(&t, 1) else {
        panic!("must deny");
    };
    assert!(message.contains(
        r#"kubectl patch s3tenant team-a -n ns --type merge -p '{"spec":{"deletionProtection":false}}'"#
    ), "{message}");
}

#[test]
fn the_namespace_controller_deleting_a_protected_tenant_is_admitted_with_the_guidance() {
    for user in NAMESPACE_CONTROLLER_USERS {
        assert!(from_namespace_deletion(Some(user)));
    }
    assert!(!from_namespace_deletion(Some("kubernetes-admin")));
    assert!(!from_namespace_deletion(Some(
        "system:serviceaccount:kube-system:generic-garbage-collector"
    )));
    assert!(!from_namespace_deletion(None));
    let t = tenant(json!({"deletionProtection": true}));
    let Verdict::Warn(message) = protected_tenant_in_namespace_deletion(&t) else {
        panic!("must admit");
    };
    assert!(
        message.contains(r#"kubectl patch s3tenant team-a -n ns --type merge"#),
        "{message}"
    );
}

#[test]
fn tenants_with_buckets_are_admitted_with_the_guidance() {
    let t = tenant(json!({}));
    let Verdict::Warn(message) = tenant_delete(&t, 2) else {
        panic!("must warn");
    };
    assert!(message.contains("2 bucket(s)"), "{message}");
    assert!(
        message.contains("kubectl describe s3tenant team-a"),
        "{message}"
    );
    assert!(
        message
            .contains("kubectl annotate --overwrite s3bucket <name> keeper.dev/drain=$(date +%s)")
    );
}

#[test]
fn empty_tenants_are_admitted_silently_whatever_their_policy() {
    assert_eq!(tenant_delete(&tenant(json!({})), 0), Verdict::Allow);
    assert_eq!(
        tenant_delete(&tenant(json!({"deletionPolicy": "Retain"})), 0),
        Verdict::Allow
    );
}

#[test]
fn a_retained_tenant_with_buckets_is_admitted_with_the_same_warning() {
    let Verdict::Warn(message) = tenant_delete(&tenant(json!({"deletionPolicy": "Retain"})), 1)
    else {
        panic!("must warn: its buckets would lose their tenant");
    };
    assert!(message.contains("1 bucket(s)"), "{message}");
}

#[test]
fn buckets_are_refused_only_in_a_tenant_being_deleted() {
    assert_eq!(bucket_create(&bucket(), None), Verdict::Allow);
    let mut t = tenant(json!({}));
    assert_eq!(bucket_create(&bucket(), Some(&t)), Verdict::Allow);
    t.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let Verdict::Deny(message) = bucket_create(&bucket(), Some(&t)) else {
        panic!("must deny");
    };
    assert!(
        message.contains("S3Tenant team-a is being deleted"),
        "{message}"
    );
}

fn review_body(kind: &str, resource: &str, operation: &str, object: Value) -> Value {
    let (object_field, old_field) = if operation == "DELETE" {
        (Value::Null, object)
    } else {
        (object, Value::Null)
    };
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "keeper.dev", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "keeper.dev", "version": "v1alpha1", "resource": resource},
            "name": "team-a", "namespace": "ns", "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object_field, "oldObject": old_field, "dryRun": false
        }
    })
}

fn tenant_json(spec: Value) -> Value {
    json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Tenant",
           "metadata": {"name": "team-a", "namespace": "ns", "uid": "u1"}, "spec": spec})
}

struct Running {
    url: String,
    https: reqwest::Client,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    dir: std::path::PathBuf,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
        std::fs::remove_dir_all(&self.dir).unwrap();
    }

    /// The review of a DELETE of the unprotected tenant `ns/team-a`.
    async fn delete_unprotected_tenant(&self) -> Value {
        self.post(&review_body(
            "S3Tenant",
            "s3tenants",
            "DELETE",
            tenant_json(json!({})),
        ))
        .await
    }

    async fn post(&self, body: &Value) -> Value {
        let response = self
            .https
            .post(format!("{}{PATH}", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }
}

/// The webhook on 127.0.0.1 with a throwaway certificate, reading the cluster from
/// `apiserver` (a mock) through keeper's seam. The mock answers no watch, so the informer stores
/// never sync and every lookup is the live read a webhook makes before they have.
async fn start(apiserver: &MockServer) -> Running {
    let config = kube::Config::new(apiserver.uri().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let informers = Arc::new(crate::cluster::informer::Informers::new(
        client.clone(),
        crate::cluster::informer::Scope::Cluster,
    ));
    start_with(Arc::new(crate::cluster::KubeApi::start(
        client,
        informers,
        &[],
        false,
    )))
    .await
}

/// The webhook on 127.0.0.1 with a throwaway certificate, reading the cluster through `kube`.
async fn start_with(kube: Arc<dyn crate::cluster::Kube>) -> Running {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let dir = std::env::temp_dir().join(format!(
        "keeper-webhook-test-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), generated.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), generated.signing_key.serialize_pem()).unwrap();
    let tls = tls_config(&dir).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(listener, tls, kube, shutdown.clone()));
    let ca = reqwest::Certificate::from_pem(generated.cert.pem().as_bytes()).unwrap();
    let https = reqwest::Client::builder()
        .tls_certs_only([ca])
        .build()
        .unwrap();
    Running {
        url: format!("https://localhost:{port}"),
        https,
        shutdown,
        task,
        dir,
    }
}

async fn apiserver() -> MockServer {
    crate::test_support::mock_server().await
}

#[tokio::test]
async fn deleting_a_tenant_with_buckets_is_admitted_with_a_warning_over_https() {
    let apiserver = apiserver().await;
    Mock::given(method("GET"))
        .and(path("/apis/keeper.dev/v1alpha1/namespaces/ns/s3buckets"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "keeper.dev/v1alpha1", "kind": "S3BucketList", "metadata": {},
            "items": [
                {"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
                 "metadata": {"name": "media", "namespace": "ns"}, "spec": {"tenantRef": {"name": "team-a"}}},
                {"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
                 "metadata": {"name": "other", "namespace": "ns"}, "spec": {"tenantRef": {"name": "team-b"}}},
                {"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
                 "metadata": {"name": "logs", "namespace": "ns"}, "spec": {"tenantRef": {"name": "team-a"}}}
            ]
        })))
        .mount(&apiserver)
        .await;
    let webhook = start(&apiserver).await;
    let answer = webhook.delete_unprotected_tenant().await;
    let response = &answer["response"];
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true, "{answer}");
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(warning.contains("2 bucket(s)"), "{warning}");
    assert!(
        !warning.contains("logs") && !warning.contains("media"),
        "an unauthenticated caller learns no bucket names: {warning}"
    );
    webhook.stop().await;
}

#[tokio::test]
async fn a_review_without_a_namespace_or_for_another_namespace_looks_nothing_up() {
    // No mock is mounted: any lookup would fail the request, and the answer would differ.
    let apiserver = apiserver().await;
    let webhook = start(&apiserver).await;
    for namespace in [Value::Null, json!(""), json!("elsewhere")] {
        let mut body = review_body("S3Tenant", "s3tenants", "DELETE", tenant_json(json!({})));
        body["request"]["namespace"] = namespace;
        let answer = webhook.post(&body).await;
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        assert!(answer["response"]["warnings"].is_null(), "{answer}");
    }
    // The informers' own cluster-wide list and watch attempts aside, nothing was asked.
    let lookups: Vec<String> = apiserver
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.url.path().to_string())
        .filter(|p| p.contains("/namespaces/"))
        .collect();
    assert!(lookups.is_empty(), "the API server was asked: {lookups:?}");
    webhook.stop().await;
}

#[tokio::test]
async fn deleting_a_protected_tenant_is_denied_over_https() {
    let apiserver = apiserver().await;
    let webhook = start(&apiserver).await;
    let answer = webhook
        .post(&review_body(
            "S3Tenant",
            "s3tenants",
            "DELETE",
            tenant_json(json!({"deletionProtection": true})),
        ))
        .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("deletionProtection"), "{message}");

    // As the API server sends it, with a stored object (status and all) and full userInfo.
    let mut stored = tenant_json(json!({"provider": "default", "deletionProtection": true}));
    stored["metadata"]["finalizers"] = json!(["keeper.dev/tenant-cleanup"]);
    stored["metadata"]["resourceVersion"] = json!("12");
    stored["status"] = json!({"phase": "Ready", "accountId": "123", "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]});
    let mut review = review_body("S3Tenant", "s3tenants", "DELETE", stored);
    review["request"]["userInfo"] =
        json!({"username": "keeper-dev", "groups": ["system:masters", "system:authenticated"]});
    review["request"]["requestKind"] = review["request"]["kind"].clone();
    review["request"]["requestResource"] = review["request"]["resource"].clone();
    review["request"]["options"] = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    let answer = webhook.post(&review).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");

    // The namespace controller emptying the namespace is admitted, with the guidance.
    let mut review = review_body(
        "S3Tenant",
        "s3tenants",
        "DELETE",
        tenant_json(json!({"deletionProtection": true})),
    );
    review["request"]["userInfo"]["username"] =
        json!("system:serviceaccount:kube-system:namespace-controller");
    let answer = webhook.post(&review).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert!(
        answer["response"]["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("deletionProtection")),
        "{answer}"
    );
    webhook.stop().await;
}

#[tokio::test]
async fn a_bucket_in_a_tenant_being_deleted_is_denied_and_lookup_failures_admit() {
    let apiserver = apiserver().await;
    let mut deleting = tenant_json(json!({}));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    Mock::given(method("GET"))
        .and(path(
            "/apis/keeper.dev/v1alpha1/namespaces/ns/s3tenants/team-a",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(deleting))
        .mount(&apiserver)
        .await;
    Mock::given(method("GET"))
        .and(path("/apis/keeper.dev/v1alpha1/namespaces/ns/s3tenants/broken"))
        .respond_with(ResponseTemplate::new(500).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcd down", "code": 500
        })))
        .mount(&apiserver)
        .await;
    let webhook = start(&apiserver).await;
    let bucket = |tenant: &str| {
        json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
               "metadata": {"name": "logs", "namespace": "ns"}, "spec": {"tenantRef": {"name": tenant}}})
    };
    let answer = webhook
        .post(&review_body(
            "S3Bucket",
            "s3buckets",
            "CREATE",
            bucket("team-a"),
        ))
        .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    // Fail open: the finalizer and the bucket controller still guard the tenant.
    let answer = webhook
        .post(&review_body(
            "S3Bucket",
            "s3buckets",
            "CREATE",
            bucket("broken"),
        ))
        .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    webhook.stop().await;
}

#[tokio::test]
async fn other_paths_and_bodies_are_refused() {
    let apiserver = apiserver().await;
    let webhook = start(&apiserver).await;
    let response = webhook
        .https
        .post(format!("{}/other", webhook.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let response = webhook
        .https
        .post(format!("{}{PATH}", webhook.url))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    webhook.stop().await;
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let apiserver = apiserver().await;
    let webhook = start(&apiserver).await;
    let rotated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    // Newer modification time than the first pair, whatever the file system's granularity.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(
        webhook.dir.join("tls.key"),
        rotated.signing_key.serialize_pem(),
    )
    .unwrap();
    std::fs::write(webhook.dir.join("tls.crt"), rotated.cert.pem()).unwrap();
    let ca = reqwest::Certificate::from_pem(rotated.cert.pem().as_bytes()).unwrap();
    let trusting_new = reqwest::Client::builder()
        .tls_certs_only([ca])
        .build()
        .unwrap();
    let response = trusting_new
        .post(format!("{}/other", webhook.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    // The old certificate is no longer served.
    assert!(
        webhook
            .https
            .post(format!("{}/other", webhook.url))
            .send()
            .await
            .is_err()
    );
    webhook.stop().await;
}

#[test]
fn a_missing_certificate_is_a_clear_error() {
    let err = tls_config(Path::new("/nonexistent-keeper-certs")).unwrap_err();
    assert!(
        format!("{err:#}").contains("/nonexistent-keeper-certs/tls.crt"),
        "{err:#}"
    );
}

/// keeper's informer stores, filled by the test: the synced cache the webhook reads from.
fn cached(tenants: Vec<S3Tenant>, buckets: Vec<S3Bucket>) -> Arc<crate::cluster::fake::FakeKube> {
    let kube = Arc::new(crate::cluster::fake::FakeKube::default());
    kube.tenants
        .lock()
        .unwrap()
        .extend(tenants.into_iter().map(Arc::new));
    kube.buckets
        .lock()
        .unwrap()
        .extend(buckets.into_iter().map(Arc::new));
    kube
}

fn bucket_in(name: &str, tenant: &str) -> S3Bucket {
    let mut b = S3Bucket::new(
        name,
        serde_json::from_value(json!({"tenantRef": {"name": tenant}})).unwrap(),
    );
    b.metadata.namespace = Some("ns".into());
    b
}

#[tokio::test]
async fn reviews_are_answered_from_the_cache_without_an_api_request() {
    let mut deleting = tenant(json!({}));
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let kube = cached(
        vec![deleting],
        vec![
            bucket_in("logs", "team-a"),
            bucket_in("data", "team-a"),
            bucket_in("other", "team-b"),
        ],
    );
    let webhook = start_with(kube).await;
    let mut new_bucket = serde_json::to_value(bucket_in("new", "team-a")).unwrap();
    new_bucket["apiVersion"] = json!("keeper.dev/v1alpha1");
    new_bucket["kind"] = json!("S3Bucket");
    let answer = webhook
        .post(&review_body("S3Bucket", "s3buckets", "CREATE", new_bucket))
        .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let answer = webhook.delete_unprotected_tenant().await;
    assert_eq!(answer["response"]["allowed"], true);
    let warning = answer["response"]["warnings"][0].as_str().unwrap();
    assert!(warning.contains("2 bucket(s)"), "{warning}");
    webhook.stop().await;
}

//! The validating admission webhook (HTTPS, path `/validate`).
//!
//! - DELETE of an S3Tenant: denied only while `spec.deletionProtection` is true (the message says
//!   how to lift it). If buckets remain it is **admitted with a warning** carrying the same
//!   guidance as the finalizer's `DeletionBlocked` condition, so `kubectl delete` prints it at
//!   once; denying would leave namespace deletion and GitOps pruning retrying forever.
//!   A protected tenant deleted by the namespace controller is admitted too: the namespace's
//!   deletion cannot be taken back, so a denial would only hide the reason in the namespace's
//!   status. Admitted, the tenant's finalizer keeps the account and says on the tenant itself
//!   (condition `DeletionBlocked`, a Warning event) which command lifts the protection.
//! - CREATE of an S3Bucket whose tenant is being deleted: denied.
//!
//! The webhook fails open (any lookup error admits): the tenant finalizer stays the safety net.
//! Register it with `failurePolicy: Ignore` for the same reason: everything it refuses, a
//! finalizer also holds, so an unreachable webhook costs guidance, never safety; `Fail` would
//! instead block every tenant deletion (namespace deletion, GitOps pruning) whenever keeper is
//! down or its certificate is wrong.
//!
//! The webhook does not authenticate its caller (the API server presents no client certificate
//! unless its admission configuration is set up to), so its answers name nothing beyond the
//! objects of the request itself: the tenant and bucket being admitted, and a count of the
//! tenant's buckets in the request's namespace. Which buckets they are, the tenant's
//! `DeletionBlocked` condition says to whoever Kubernetes RBAC lets read the tenant.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::Context as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::{Api, ResourceExt};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::api::{S3Bucket, S3Tenant};
use crate::controllers::tenant::{
    BUCKET_REMOVAL_GUIDANCE, DeletionGate, bucket_resources, deletion_gate,
    deletion_protection_message,
};

/// The path the ValidatingWebhookConfiguration points at.
pub const PATH: &str = "/validate";
/// Largest AdmissionReview accepted (the API server's objects are far smaller).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// What the webhook answers, decided from the objects alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Admit, and show the user this warning.
    Warn(String),
    Deny(String),
}

/// DELETE of a tenant, given how many S3Bucket resources reference it.
pub fn tenant_delete(tenant: &S3Tenant, buckets: usize) -> Verdict {
    let name = tenant.name_any();
    match deletion_gate(&tenant.spec) {
        DeletionGate::Protected => Verdict::Deny(deletion_protection_message(
            &name,
            &tenant.namespace().unwrap_or_default(),
        )),
        DeletionGate::Retain | DeletionGate::Proceed if buckets == 0 => Verdict::Allow,
        DeletionGate::Retain | DeletionGate::Proceed => Verdict::Warn(format!(
            "S3Tenant {name} still holds {buckets} bucket(s); `kubectl describe s3tenant {name} -n {}` \
             names them (condition DeletionBlocked). {} The tenant is deleted as soon as no \
             bucket remains.",
            tenant.namespace().unwrap_or_default(),
            BUCKET_REMOVAL_GUIDANCE
        )),
    }
}

/// Who kube-controller-manager's namespace controller deletes as: its own service account, or the
/// controller manager's user when it runs without per-controller credentials.
const NAMESPACE_CONTROLLER_USERS: [&str; 2] = [
    "system:serviceaccount:kube-system:namespace-controller",
    "system:kube-controller-manager",
];

/// Whether a DELETE comes from the namespace controller emptying a namespace being deleted.
pub fn from_namespace_deletion(username: Option<&str>) -> bool {
    username.is_some_and(|u| NAMESPACE_CONTROLLER_USERS.contains(&u))
}

/// DELETE of a protected tenant by the namespace controller: admitted (the finalizer holds it).
pub fn protected_tenant_in_namespace_deletion(tenant: &S3Tenant) -> Verdict {
    Verdict::Warn(format!(
        "the namespace is being deleted: the S3Tenant's finalizer keeps its account until \
         deletionProtection is lifted. {}",
        deletion_protection_message(&tenant.name_any(), &tenant.namespace().unwrap_or_default())
    ))
}

/// CREATE of a bucket, given its tenant if it exists.
pub fn bucket_create(bucket: &S3Bucket, tenant: Option<&S3Tenant>) -> Verdict {
    match tenant {
        Some(t) if t.metadata.deletion_timestamp.is_some() => Verdict::Deny(format!(
            "S3Tenant {} is being deleted: no bucket can be created in it. S3Bucket {} must \
             reference another tenant, or be created once the tenant is recreated.",
            t.name_any(),
            bucket.name_any()
        )),
        _ => Verdict::Allow,
    }
}

fn typed<K: serde::de::DeserializeOwned>(object: Option<&DynamicObject>) -> Option<K> {
    serde_json::to_value(object?)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// The verdict for one request; lookups that fail admit (fail open), with a log line.
async fn judge(client: &kube::Client, request: &AdmissionRequest<DynamicObject>) -> Verdict {
    // Both kinds are namespaced: a request without a namespace, or about an object of another
    // namespace, did not come from the API server, and an empty namespace would make the lookups
    // below cluster-wide.
    let namespace = match request.namespace.as_deref() {
        Some(namespace) if !namespace.is_empty() => namespace.to_string(),
        _ => return Verdict::Allow,
    };
    let in_namespace = |object: Option<&DynamicObject>| {
        object.and_then(|o| o.metadata.namespace.as_deref()) == Some(namespace.as_str())
    };
    match (request.kind.kind.as_str(), &request.operation) {
        ("S3Tenant", Operation::Delete) => {
            if !in_namespace(request.old_object.as_ref()) {
                return Verdict::Allow;
            }
            let Some(tenant) = typed::<S3Tenant>(request.old_object.as_ref()) else {
                return Verdict::Allow;
            };
            // A protected tenant is denied whatever its buckets: no lookup needed.
            if deletion_gate(&tenant.spec) == DeletionGate::Protected {
                if from_namespace_deletion(request.user_info.username.as_deref()) {
                    return protected_tenant_in_namespace_deletion(&tenant);
                }
                return tenant_delete(&tenant, 0);
            }
            match bucket_resources(client, &namespace, &tenant.name_any()).await {
                Ok(buckets) => tenant_delete(&tenant, buckets.len()),
                Err(e) => {
                    tracing::warn!(error = %e, tenant = %tenant.name_any(), "webhook cannot list buckets; admitting");
                    Verdict::Allow
                }
            }
        }
        ("S3Bucket", Operation::Create) => {
            if !in_namespace(request.object.as_ref()) {
                return Verdict::Allow;
            }
            let Some(bucket) = typed::<S3Bucket>(request.object.as_ref()) else {
                return Verdict::Allow;
            };
            let api: Api<S3Tenant> = Api::namespaced(client.clone(), &namespace);
            match api.get_opt(&bucket.spec.tenant_ref.name).await {
                Ok(tenant) => bucket_create(&bucket, tenant.as_ref()),
                Err(e) => {
                    tracing::warn!(error = %e, bucket = %bucket.name_any(), "webhook cannot read the tenant; admitting");
                    Verdict::Allow
                }
            }
        }
        _ => Verdict::Allow,
    }
}

/// Answers one AdmissionReview body.
async fn review(
    client: &kube::Client,
    body: &[u8],
) -> Result<AdmissionReview<DynamicObject>, String> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| format!("invalid AdmissionReview: {e}"))?;
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|e| format!("invalid AdmissionReview: {e}"))?;
    let mut response = AdmissionResponse::from(&request);
    match judge(client, &request).await {
        Verdict::Allow => {}
        Verdict::Warn(message) => response.warnings = Some(vec![message]),
        Verdict::Deny(message) => response = response.deny(message),
    }
    Ok(response.into_review())
}

fn respond(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

async fn handle(client: kube::Client, req: Request<Incoming>) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.uri().path() != PATH {
        return respond(StatusCode::NOT_FOUND, TEXT, b"not found\n".to_vec());
    }
    if req.method() != Method::POST {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            b"method not allowed\n".to_vec(),
        );
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return respond(
                StatusCode::BAD_REQUEST,
                TEXT,
                format!("cannot read the body: {e}\n").into_bytes(),
            );
        }
    };
    match review(&client, &body).await {
        Ok(answer) => respond(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec(&answer).expect("AdmissionReview serializes"),
        ),
        Err(message) => respond(
            StatusCode::BAD_REQUEST,
            TEXT,
            format!("{message}\n").into_bytes(),
        ),
    }
}

/// The webhook's certificate, read again from its files when they change, so that a rotated
/// certificate (cert-manager renews the mounted Secret in place) is served without a restart.
#[derive(Debug)]
struct CertFiles {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<(Option<SystemTime>, Arc<CertifiedKey>)>,
}

impl CertFiles {
    /// The newest modification time of the two files (a Secret volume swaps both at once).
    fn modified(dir: &Path) -> Option<SystemTime> {
        let crt = std::fs::metadata(dir.join("tls.crt"))
            .ok()?
            .modified()
            .ok()?;
        let key = std::fs::metadata(dir.join("tls.key"))
            .ok()?
            .modified()
            .ok()?;
        Some(crt.max(key))
    }

    fn load(dir: &Path, provider: &CryptoProvider) -> anyhow::Result<Arc<CertifiedKey>> {
        let cert_file = dir.join("tls.crt");
        let key_file = dir.join("tls.key");
        let certs = CertificateDer::pem_file_iter(&cert_file)
            .with_context(|| format!("cannot read {}", cert_file.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("invalid certificate in {}", cert_file.display()))?;
        anyhow::ensure!(
            !certs.is_empty(),
            "no certificate in {}",
            cert_file.display()
        );
        let key = PrivateKeyDer::from_pem_file(&key_file)
            .with_context(|| format!("cannot read a private key from {}", key_file.display()))?;
        let certified = CertifiedKey::from_der(certs, key, provider)
            .context("the webhook certificate and key do not match")?;
        Ok(Arc::new(certified))
    }
}

impl ResolvesServerCert for CertFiles {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().expect("certificate lock");
        let modified = Self::modified(&self.dir);
        if modified.is_some() && modified != current.0 {
            match Self::load(&self.dir, &self.provider) {
                Ok(key) => {
                    tracing::info!(dir = %self.dir.display(), "webhook certificate reloaded");
                    *current = (modified, key);
                }
                // Keep serving the previous certificate; a half-written rotation is retried.
                Err(e) => tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot reload the webhook certificate"
                ),
            }
        }
        Some(current.1.clone())
    }
}

/// TLS from `<dir>/tls.crt` (chain) and `<dir>/tls.key`, the layout of a mounted
/// `kubernetes.io/tls` Secret; the files are read again when they change.
pub fn tls_config(cert_dir: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let modified = CertFiles::modified(cert_dir);
    let key = CertFiles::load(cert_dir, &provider)?;
    let resolver = CertFiles {
        dir: cert_dir.to_path_buf(),
        provider: provider.clone(),
        current: Mutex::new((modified, key)),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves the webhook until `shutdown` is cancelled, then lets open connections finish.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    client: kube::Client,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook failed to accept a connection");
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let acceptor = acceptor.clone();
        let client = client.clone();
        let watcher = graceful.watcher();
        // The handshake runs in its own task so one slow client cannot stall the accept loop.
        tokio::spawn(async move {
            let stream = match acceptor.accept(stream).await {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, %peer, "webhook TLS handshake failed");
                    return;
                }
            };
            let service = service_fn(move |req: Request<Incoming>| {
                let client = client.clone();
                async move { Ok::<_, Infallible>(handle(client, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, %peer, "webhook connection ended with an error");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
            message.contains(
                "kubectl annotate --overwrite s3bucket <name> keeper.dev/drain=$(date +%s)"
            )
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
    /// `apiserver` (a mock).
    async fn start(apiserver: &MockServer) -> Running {
        let generated = rcgen::generate_simple_self_signed(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ])
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
        let config = kube::Config::new(apiserver.uri().parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve(listener, tls, client, shutdown.clone()));
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
        let answer = webhook
            .post(&review_body(
                "S3Tenant",
                "s3tenants",
                "DELETE",
                tenant_json(json!({})),
            ))
            .await;
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
        assert!(
            apiserver
                .received_requests()
                .await
                .unwrap_or_default()
                .is_empty(),
            "the API server was not asked"
        );
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
        review["request"]["options"] =
            json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
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
}

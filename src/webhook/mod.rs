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
//! It reads the tenant and its buckets from keeper's informer stores once they have synced (see
//! [`policy`]'s `judge`), so reviews cost the API server no request.
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
//!
//! [`policy`] decides (pure verdicts and the lookups they need), this module speaks HTTP and
//! AdmissionReview, [`tls`] serves the certificate and reloads it when its files change, and
//! [`certs`] issues, renews and publishes the self-managed one (`--webhook-cert-secret`).

pub mod certs;
mod policy;
#[cfg(test)]
mod tests;
mod tls;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

pub use policy::{
    Verdict, bucket_create, from_namespace_deletion, protected_tenant_in_namespace_deletion,
    tenant_delete,
};
pub use tls::{MemoryCert, tls_config, tls_config_from_memory};

use crate::cluster::Kube;
use crate::server::accept_until;
use policy::judge;

/// The path the ValidatingWebhookConfiguration points at.
pub const PATH: &str = "/validate";
/// Largest AdmissionReview accepted (the API server's objects are far smaller).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Answers one AdmissionReview body.
async fn review(kube: &dyn Kube, body: &[u8]) -> Result<AdmissionReview<DynamicObject>, String> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| format!("invalid AdmissionReview: {e}"))?;
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|e| format!("invalid AdmissionReview: {e}"))?;
    let mut response = AdmissionResponse::from(&request);
    match judge(kube, &request).await {
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

async fn handle(kube: Arc<dyn Kube>, req: Request<Incoming>) -> Response<Full<Bytes>> {
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
    match review(kube.as_ref(), &body).await {
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

/// Serves the webhook until `shutdown` is cancelled, then lets open connections finish. `kube`:
/// keeper's seam, whose tenant and bucket reads come from the process's informer stores.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    kube: Arc<dyn Kube>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    accept_until(listener, shutdown, "webhook", |stream, peer, watcher| {
        let acceptor = acceptor.clone();
        let kube = kube.clone();
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
                let kube = kube.clone();
                async move { Ok::<_, Infallible>(handle(kube, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, %peer, "webhook connection ended with an error");
            }
        });
    })
    .await;
    Ok(())
}

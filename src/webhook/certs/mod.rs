//! The self-managed serving certificate (`--webhook-cert-secret`): keeper issues a CA of its own
//! and a serving certificate signed by it, keeps both in a Secret of its namespace (so that
//! replicas and restarts share them), renews them before they expire and writes the CA into the
//! `caBundle` of its own ValidatingWebhookConfiguration. Nothing random is left to the chart, so
//! `helm template` (Argo CD) renders the same output every time.
//!
//! Every replica runs [`run`]: it reads the Secret, creates it when absent (a create is refused
//! with 409 when another replica created it first: that one is used), replaces what is due with a
//! patch that carries the resourceVersion it read (409 again when another replica was quicker),
//! patches the `caBundle` where it differs, and only then serves the certificate: the API server
//! must trust the CA before keeper presents a certificate signed by it. A new CA is written in
//! front of the previous ones, which stay in `ca.crt` (and so in `caBundle`) until they expire, so
//! a replica still serving a certificate of the previous CA is trusted until it reloads.
//!
//! A failure (a missing permission, the configuration not found) is logged with what is missing
//! and retried; the certificate served so far stays.

mod apply;
mod issue;
mod plan;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use super::tls::MemoryCert;
pub use apply::{CertError, ca_bundle_patch, converge_secret, inject_ca};
pub use issue::issue;
use plan::ders;
pub use plan::{Facts, Material, Plan, facts, plan, renew_at};

/// The Secret's keys: the serving certificate and key (a `kubernetes.io/tls` Secret), the CAs the
/// API server is to trust (the current one first) and the current CA's key.
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
/// Marks the Secret as keeper's own: a Secret of that name without it is never overwritten.
pub const MANAGED_ANNOTATION: &str = "keeper.dev/webhook-certificate";
const MANAGED_VALUE: &str = "self-managed";
/// How long a CA keeper issues is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How often the Secret and the configuration are looked at when nothing is due: another replica
/// may have renewed the certificate, an upgrade may have reset `caBundle`.
const RECHECK: Duration = Duration::from_secs(60);
/// How soon a failed round is tried again.
const RETRY: Duration = Duration::from_secs(10);

/// What the self-managed mode works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// keeper's namespace: where the Secret lives.
    pub namespace: String,
    /// The Secret holding the CA and the serving certificate.
    pub secret: String,
    /// The ValidatingWebhookConfiguration whose `caBundle` keeper sets (its own, and only it).
    pub webhook_configuration: String,
    /// The DNS names and IP addresses the serving certificate covers.
    pub hosts: Vec<String>,
    /// How long a serving certificate is valid; it is renewed two thirds of the way through.
    pub validity: Duration,
}

/// The names the API server may use to reach Service `service` in `namespace`: it verifies
/// `<service>.<namespace>.svc`; the others cover clients inside the cluster.
pub fn service_hosts(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_string(),
    ]
}

/// One round: the Secret converged, the configuration trusting its CA, then its certificate
/// served. Returns when the next round is due (seconds since the epoch).
pub async fn round(
    client: &kube::Client,
    settings: &Settings,
    served: &MemoryCert,
    installed: &mut Option<Material>,
    now: i64,
) -> Result<i64, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let material = converge_secret(&secrets, settings, now).await?;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    inject_ca(
        &configs,
        &settings.webhook_configuration,
        &material.ca_bundle,
    )
    .await?;
    if installed.as_ref() != Some(&material) {
        served
            .install(&material.cert, &material.key)
            .map_err(|error| CertError::Serve {
                secret: settings.secret.clone(),
                error,
            })?;
        let expires = ders(&material.cert)
            .ok()
            .and_then(|d| facts(&d[0]).ok())
            .map(|f| f.not_after);
        tracing::info!(
            secret = %settings.secret,
            expires_at = ?expires,
            "webhook: serving the self-managed certificate"
        );
        *installed = Some(material.clone());
    }
    match plan(Some(&material), &settings.hosts, settings.validity, now) {
        Plan::Keep { renew_at } => Ok(renew_at),
        // Freshly issued material always keeps; anything else is looked at again soon.
        _ => Ok(now),
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Keeps the self-managed certificate issued, renewed, trusted and served until `shutdown`.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    served: Arc<MemoryCert>,
    shutdown: CancellationToken,
) {
    let mut installed = None;
    loop {
        let now = unix_now();
        let wait = match round(&client, &settings, &served, &mut installed, now).await {
            Ok(due) => Duration::from_secs(due.saturating_sub(now).max(1) as u64).min(RECHECK),
            Err(e) => {
                tracing::warn!(error = %e, "webhook: cannot maintain the self-managed certificate");
                RETRY
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests;

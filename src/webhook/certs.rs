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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::tls::MemoryCert;

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

/// The PEM texts the Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    /// Every CA the API server is to trust, the one that signs first.
    pub ca_bundle: String,
    pub ca_key: String,
    /// The serving certificate.
    pub cert: String,
    pub key: String,
}

impl Material {
    /// The Secret's data, or `None` when a key is missing or not text.
    pub fn from_secret(secret: &Secret) -> Option<Material> {
        let data = secret.data.as_ref()?;
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        Some(Material {
            ca_bundle: text(CA_CRT)?,
            ca_key: text(CA_KEY)?,
            cert: text(TLS_CRT)?,
            key: text(TLS_KEY)?,
        })
    }

    fn data(&self) -> BTreeMap<String, ByteString> {
        [
            (CA_CRT, &self.ca_bundle),
            (CA_KEY, &self.ca_key),
            (TLS_CRT, &self.cert),
            (TLS_KEY, &self.key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
        .collect()
    }
}

/// What a certificate says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// DNS names and IP addresses (as text) it covers.
    pub names: Vec<String>,
    pub is_ca: bool,
}

fn ders(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let ders = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid PEM: {e}"))?;
    if ders.is_empty() {
        return Err("no certificate in the PEM".into());
    }
    Ok(ders)
}

/// The facts of a DER certificate.
pub fn facts(der: &[u8]) -> Result<Facts, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("invalid certificate: {e}"))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => names.push(dns.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).ok().map(std::net::IpAddr::from),
                        16 => <[u8; 16]>::try_from(*bytes)
                            .ok()
                            .map(std::net::IpAddr::from),
                        _ => None,
                    };
                    names.extend(ip.map(|ip| ip.to_string()));
                }
                _ => {}
            }
        }
    }
    Ok(Facts {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        names,
        is_ca: cert.is_ca(),
    })
}

/// Whether `leaf` carries a signature of `ca`'s key.
fn signed_by(leaf: &[u8], ca: &[u8]) -> bool {
    let (Ok((_, leaf)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(leaf),
        x509_parser::parse_x509_certificate(ca),
    ) else {
        return false;
    };
    leaf.verify_signature(Some(ca.public_key())).is_ok()
}

/// When a certificate valid from `not_before` to `not_after` is renewed: two thirds of the way
/// through its validity (cert-manager's default), leaving a third to retry in.
pub fn renew_at(not_before: i64, not_after: i64) -> i64 {
    not_before + (not_after - not_before) / 3 * 2
}

/// What the stored material needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing until `renew_at` (seconds since the epoch).
    Keep { renew_at: i64 },
    /// A new serving certificate from the current CA, because of the reason given.
    NewCertificate(String),
    /// A new CA (and a serving certificate from it), because of the reason given.
    NewCa(String),
}

/// Decides what `stored` needs at `now` (seconds since the epoch) for a serving certificate
/// covering `hosts` and valid for `validity`.
pub fn plan(stored: Option<&Material>, hosts: &[String], validity: Duration, now: i64) -> Plan {
    let Some(stored) = stored else {
        return Plan::NewCa("no certificate yet".into());
    };
    let validity = validity.as_secs() as i64;
    let ca = match ders(&stored.ca_bundle).and_then(|d| {
        let der = d[0].clone();
        facts(&der).map(|f| (der, f))
    }) {
        Ok(ca) => ca,
        Err(e) => return Plan::NewCa(format!("the stored CA cannot be read ({e})")),
    };
    let (ca_der, ca) = ca;
    if !ca.is_ca {
        return Plan::NewCa("the stored CA is not a CA certificate".into());
    }
    if KeyPair::from_pem(&stored.ca_key).is_err() {
        return Plan::NewCa("the stored CA key cannot be read".into());
    }
    // A serving certificate gets its whole validity: the CA must outlive it.
    let ca_due = renew_at(ca.not_before, ca.not_after).min(ca.not_after - validity);
    if now >= ca_due {
        return Plan::NewCa(format!(
            "the CA is due for renewal (it expires at {})",
            ca.not_after
        ));
    }
    let leaf = match ders(&stored.cert).and_then(|d| {
        let der = d[0].clone();
        facts(&der).map(|f| (der, f))
    }) {
        Ok(leaf) => leaf,
        Err(e) => {
            return Plan::NewCertificate(format!("the stored certificate cannot be read ({e})"));
        }
    };
    let (leaf_der, leaf) = leaf;
    if !signed_by(&leaf_der, &ca_der) {
        return Plan::NewCertificate("the certificate is not signed by the current CA".into());
    }
    if super::tls::certified_key(
        stored.cert.as_bytes(),
        stored.key.as_bytes(),
        &rustls::crypto::aws_lc_rs::default_provider(),
    )
    .is_err()
    {
        return Plan::NewCertificate("the stored key does not match the certificate".into());
    }
    if let Some(missing) = hosts.iter().find(|h| !leaf.names.contains(h)) {
        return Plan::NewCertificate(format!("the certificate does not cover {missing}"));
    }
    let leaf_due = renew_at(leaf.not_before, leaf.not_after);
    if now >= leaf_due {
        return Plan::NewCertificate(format!(
            "the certificate is due for renewal (it expires at {})",
            leaf.not_after
        ));
    }
    Plan::Keep {
        renew_at: leaf_due.min(ca_due),
    }
}

fn at(seconds: i64) -> Result<time::OffsetDateTime, rcgen::Error> {
    time::OffsetDateTime::from_unix_timestamp(seconds).map_err(|_| rcgen::Error::Time)
}

/// A new CA, valid from `now` for [`CA_VALIDITY`]: (certificate PEM, key PEM).
fn new_ca(now: i64) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, format!("keeper-webhook-ca-{now}"));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = at(now - 60)?;
    params.not_after = at(now + CA_VALIDITY.as_secs() as i64)?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Issues what `plan` asks for: a serving certificate covering `hosts`, from the stored CA or a
/// new one. A new CA goes in front of the stored CAs that have not expired.
pub fn issue(
    plan: &Plan,
    stored: Option<&Material>,
    hosts: &[String],
    validity: Duration,
    now: i64,
) -> Result<Material, rcgen::Error> {
    let reuse = match (plan, stored) {
        (Plan::NewCertificate(_) | Plan::Keep { .. }, Some(stored)) => Some(stored),
        _ => None,
    };
    let (ca_bundle, ca_key) = match reuse {
        Some(stored) => (stored.ca_bundle.clone(), stored.ca_key.clone()),
        None => {
            let (ca, key) = new_ca(now)?;
            let mut bundle = ca;
            for block in stored.map(|s| pem_blocks(&s.ca_bundle)).unwrap_or_default() {
                let current = ders(&block)
                    .is_ok_and(|d| facts(&d[0]).is_ok_and(|f| f.is_ca && f.not_after > now));
                if current {
                    bundle.push_str(&block);
                }
            }
            (bundle, key)
        }
    };
    let ca_der = ders(&ca_bundle).map_err(|_| rcgen::Error::CouldNotParseCertificate)?[0].clone();
    let ca_not_after = facts(&ca_der)
        .map_err(|_| rcgen::Error::CouldNotParseCertificate)?
        .not_after;
    let issuer = Issuer::from_ca_cert_der(&ca_der, KeyPair::from_pem(&ca_key)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        hosts
            .first()
            .cloned()
            .unwrap_or_else(|| "keeper-webhook".into()),
    );
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    // A little before now, for clocks a few seconds apart (the API server's, other replicas').
    let validity = validity.as_secs() as i64;
    params.not_before = at(now - (validity / 10).min(60))?;
    params.not_after = at((now + validity).min(ca_not_after))?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Material {
        ca_bundle,
        ca_key,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The certificate blocks of a PEM text, each as written.
fn pem_blocks(pem: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let end = start + end + END.len();
        blocks.push(format!("{}\n", &rest[start..end]));
        rest = &rest[end..];
    }
    blocks
}

/// Why a round failed. Each names the object and, for a refusal, the permission keeper lacks.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(
        "keeper may not {verb} {what} ({message}): its ServiceAccount needs `{verb}` on it (the \
         chart grants it with webhook.tls.mode=selfManaged); the webhook keeps serving the \
         certificate it has"
    )]
    Forbidden {
        verb: &'static str,
        what: String,
        message: String,
    },
    #[error("cannot {verb} {what}: {source}")]
    Api {
        verb: &'static str,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "ValidatingWebhookConfiguration {0} does not exist: nothing to write the CA into \
         (--webhook-configuration names the chart's, the release's full name)"
    )]
    NoConfiguration(String),
    #[error(
        "Secret {0} exists but keeper did not write it (no annotation {MANAGED_ANNOTATION}); \
         keeper never overwrites it: delete it, or name another with --webhook-cert-secret"
    )]
    NotOurs(String),
    #[error("Secret {0} kept changing under keeper (other replicas writing it); trying again")]
    Contended(String),
    #[error("cannot issue the webhook certificate: {0}")]
    Issue(#[from] rcgen::Error),
    #[error("cannot serve the certificate of Secret {secret}: {error:#}")]
    Serve {
        secret: String,
        error: anyhow::Error,
    },
}

impl CertError {
    fn call(verb: &'static str, what: String, error: kube::Error) -> CertError {
        match error {
            kube::Error::Api(status) if status.code == 403 => CertError::Forbidden {
                verb,
                what,
                message: status.message,
            },
            source => CertError::Api { verb, what, source },
        }
    }
}

fn secret_what(settings: &Settings) -> String {
    format!(
        "secrets {:?} in namespace {}",
        settings.secret, settings.namespace
    )
}

fn configuration_what(name: &str) -> String {
    format!("validatingwebhookconfigurations.admissionregistration.k8s.io {name:?}")
}

fn is_409(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Reads the Secret and makes it hold what [`plan`] wants, creating or replacing it; returns what
/// it holds then.
pub async fn converge_secret(
    secrets: &Api<Secret>,
    settings: &Settings,
    now: i64,
) -> Result<Material, CertError> {
    let what = secret_what(settings);
    for _ in 0..3 {
        let read = secrets
            .get_opt(&settings.secret)
            .await
            .map_err(|e| CertError::call("get", what.clone(), e))?;
        let stored = match &read {
            None => None,
            Some(secret) => {
                let ours = secret
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(MANAGED_ANNOTATION))
                    .is_some_and(|v| v == MANAGED_VALUE);
                if !ours {
                    return Err(CertError::NotOurs(format!(
                        "{}/{}",
                        settings.namespace, settings.secret
                    )));
                }
                Material::from_secret(secret)
            }
        };
        let plan = plan(stored.as_ref(), &settings.hosts, settings.validity, now);
        let reason = match &plan {
            Plan::Keep { .. } => return Ok(stored.expect("kept material exists")),
            Plan::NewCertificate(reason) | Plan::NewCa(reason) => reason.clone(),
        };
        let material = issue(
            &plan,
            stored.as_ref(),
            &settings.hosts,
            settings.validity,
            now,
        )?;
        let written = match &read {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(settings.secret.clone()),
                        namespace: Some(settings.namespace.clone()),
                        annotations: Some(BTreeMap::from([(
                            MANAGED_ANNOTATION.to_string(),
                            MANAGED_VALUE.to_string(),
                        )])),
                        labels: Some(BTreeMap::from([
                            ("app.kubernetes.io/name".to_string(), "keeper".to_string()),
                            (
                                "app.kubernetes.io/component".to_string(),
                                "webhook-certificate".to_string(),
                            ),
                        ])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(material.data()),
                    ..Secret::default()
                };
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .map_err(|e| (e, "create"))
            }
            Some(secret) => {
                // The resourceVersion read: refused with 409 if another replica wrote meanwhile.
                let patch = json!({
                    "metadata": {"resourceVersion": secret.metadata.resource_version},
                    "data": material.data(),
                });
                secrets
                    .patch(
                        &settings.secret,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|e| (e, "patch"))
            }
        };
        match written {
            Ok(_) => {
                let what = if matches!(plan, Plan::NewCa(_)) {
                    "a new CA and serving certificate"
                } else {
                    "a new serving certificate"
                };
                tracing::info!(
                    secret = %settings.secret,
                    reason = %reason,
                    "webhook: issued {what}"
                );
                return Ok(material);
            }
            // Another replica created or renewed it first: read what it wrote.
            Err((e, _)) if is_409(&e) => continue,
            Err((e, verb)) => return Err(CertError::call(verb, what, e)),
        }
    }
    Err(CertError::Contended(format!(
        "{}/{}",
        settings.namespace, settings.secret
    )))
}

/// The JSON patch setting `caBundle` to `bundle` on every webhook of `config` that has another:
/// each guarded by a test of the webhook's name, so that a concurrent edit of the list fails
/// instead of being written over. Empty when nothing differs.
pub fn ca_bundle_patch(config: &ValidatingWebhookConfiguration, bundle: &[u8]) -> Vec<Value> {
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).expect("bytes serialize");
    let mut ops = Vec::new();
    for (i, webhook) in config.webhooks.iter().flatten().enumerate() {
        if webhook.client_config.ca_bundle.as_ref().map(|b| &b.0[..]) == Some(bundle) {
            continue;
        }
        ops.push(
            json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": webhook.name}),
        );
        ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}));
    }
    ops
}

/// Makes the configuration trust `bundle`. Returns whether it patched.
pub async fn inject_ca(
    configs: &Api<ValidatingWebhookConfiguration>,
    name: &str,
    bundle: &str,
) -> Result<bool, CertError> {
    let what = configuration_what(name);
    let config = configs
        .get_opt(name)
        .await
        .map_err(|e| CertError::call("get", what.clone(), e))?
        .ok_or_else(|| CertError::NoConfiguration(name.to_string()))?;
    let ops = ca_bundle_patch(&config, bundle.as_bytes());
    if ops.is_empty() {
        return Ok(false);
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).expect("the operations are JSON patch");
    configs
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .map_err(|e| CertError::call("patch", what, e))?;
    tracing::info!(configuration = %name, "webhook: caBundle set to keeper's CA");
    Ok(true)
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

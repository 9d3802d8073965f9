//! What the stored certificate material needs: read the Secret's PEM texts and decide (pure).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rcgen::KeyPair;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::{CA_CRT, CA_KEY, TLS_CRT, TLS_KEY};

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

    pub(super) fn data(&self) -> BTreeMap<String, ByteString> {
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

pub(super) fn ders(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
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
pub(super) fn signed_by(leaf: &[u8], ca: &[u8]) -> bool {
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
    if crate::webhook::tls::certified_key(
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

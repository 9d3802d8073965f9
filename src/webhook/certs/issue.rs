//! Issuing a CA and a serving certificate signed by it.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::CA_VALIDITY;
use super::plan::{Material, Plan, ders, facts};

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
pub(super) fn pem_blocks(pem: &str) -> Vec<String> {
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

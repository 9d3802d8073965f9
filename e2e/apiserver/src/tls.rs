//! HTTPS on the API port: kubectl (client-go) sends credentials (bearer tokens, impersonation)
//! only to an `https` server, so the kubeconfig points at `https://127.0.0.1:PORT` with a CA made
//! at start; the same port keeps answering plain HTTP (the first byte of a connection tells a TLS
//! handshake apart), for the harness's `/debug` side channel and clients that send tokens anyway.

use std::fmt;
use std::sync::Arc;

/// A throwaway CA and a serving certificate for 127.0.0.1 / localhost signed by it.
pub struct Tls {
    /// The CA certificate (PEM), for `certificate-authority-data`.
    pub ca_pem: String,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    pub fn generate() -> anyhow::Result<Arc<Tls>> {
        let ca_key = rcgen::KeyPair::generate()?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "keeper-e2e-apiserver CA");
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate()?;
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?
            .signed_by(&leaf_key, &issuer)?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )?;
        // HTTP/1.1 only, as on the plain port.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(Tls {
            ca_pem: ca_cert.pem(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        }))
    }
}

/// Whether a connection starts with a TLS handshake record (content type 22).
pub async fn starts_with_tls(stream: &tokio::net::TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0] == 0x16)
}

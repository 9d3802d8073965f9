//! The webhook's serving certificate: either `<dir>/tls.crt` and `<dir>/tls.key`, read again when
//! they change, so that a rotated certificate is served without a restart, or one held in memory
//! ([`MemoryCert`]) that the self-managed mode ([`super::certs`]) replaces when it rotates.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The webhook's certificate, read again from its files when they change, so that a rotated
/// certificate (cert-manager renews the mounted Secret in place) is served without a restart.
#[derive(Debug)]
struct CertFiles {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Mutex<Served>,
}

/// The certificate served, the files' modification time it was read at, and when the files were
/// last looked at.
#[derive(Debug)]
struct Served {
    modified: Option<SystemTime>,
    key: Arc<CertifiedKey>,
    looked: Instant,
}

/// How often the files are looked at, at most: not at every handshake (two `stat`s under the
/// lock), yet a rotation is served within a second.
const LOOK_EVERY: Duration = Duration::from_secs(1);

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
        let now = Instant::now();
        if now.duration_since(current.looked) < LOOK_EVERY {
            return Some(current.key.clone());
        }
        current.looked = now;
        let modified = Self::modified(&self.dir);
        if modified.is_some() && modified != current.modified {
            match Self::load(&self.dir, &self.provider) {
                Ok(key) => {
                    tracing::info!(dir = %self.dir.display(), "webhook certificate reloaded");
                    current.modified = modified;
                    current.key = key;
                }
                // Keep serving the previous certificate; a half-written rotation is retried.
                Err(e) => tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot reload the webhook certificate"
                ),
            }
        }
        Some(current.key.clone())
    }
}

/// A certificate held in memory: none until the self-managed mode has one (handshakes fail until
/// then, and the API server, with `failurePolicy: Ignore`, admits), then the latest it installed.
#[derive(Debug, Default)]
pub struct MemoryCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl MemoryCert {
    /// Serves `chain_pem` (the serving certificate first) with `key_pem` from the next handshake on.
    pub fn install(&self, chain_pem: &str, key_pem: &str) -> anyhow::Result<()> {
        let certified = certified_key(chain_pem.as_bytes(), key_pem.as_bytes(), &provider())?;
        *self.current.write().expect("certificate lock") = Some(certified);
        Ok(())
    }

    /// Whether a certificate is served.
    pub fn is_set(&self) -> bool {
        self.current.read().expect("certificate lock").is_some()
    }
}

impl ResolvesServerCert for MemoryCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().expect("certificate lock").clone()
    }
}

/// A certificate chain and its key, from PEM, checked to belong together.
pub(super) fn certified_key(
    chain_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> anyhow::Result<Arc<CertifiedKey>> {
    let certs = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("invalid certificate PEM")?;
    anyhow::ensure!(!certs.is_empty(), "no certificate in the PEM");
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("invalid private key PEM")?;
    let certified = CertifiedKey::from_der(certs, key, provider)
        .context("the certificate and key do not match")?;
    Ok(Arc::new(certified))
}

fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// TLS from `<dir>/tls.crt` (chain) and `<dir>/tls.key`, the layout of a mounted
/// `kubernetes.io/tls` Secret; the files are read again when they change.
pub fn tls_config(cert_dir: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(provider());
    let modified = CertFiles::modified(cert_dir);
    let key = CertFiles::load(cert_dir, &provider)?;
    let resolver = CertFiles {
        dir: cert_dir.to_path_buf(),
        provider: provider.clone(),
        current: Mutex::new(Served {
            modified,
            key,
            looked: Instant::now(),
        }),
    };
    server_config(provider, Arc::new(resolver))
}

/// TLS serving whatever `cert` holds (the self-managed mode).
pub fn tls_config_from_memory(cert: Arc<MemoryCert>) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    server_config(Arc::new(provider()), cert)
}

fn server_config(
    provider: Arc<CryptoProvider>,
    resolver: Arc<dyn ResolvesServerCert>,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

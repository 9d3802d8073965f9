//! S3 operations keeper runs against S3-compatible stores (AWS S3, MinIO, Ceph RGW, moto) with
//! aws-sdk-s3: bucket creation with versioning, object lock and an ownership tag, ownership
//! lookup, usage by bounded listing, client-side drain in `DeleteObjects` batches, and deletion.
//!
//! This module holds the client core: settings, construction and error classification. The
//! calls are grouped by concern: `bucket` (ownership, creation, tagging, versioning, deletion,
//! listing) and `drain` (usage and the client-side drain).

use std::sync::{Arc, Mutex};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::backends::call::{BackendOutcome, measured};
use crate::backends::rate::RateLimit;
use crate::config::BackendTimeouts;
use crate::error::BackendError;
use crate::metrics::Metrics;

mod access;
mod bucket;
mod drain;
#[cfg(test)]
pub(crate) mod tests;

pub use access::Access;
pub use bucket::{CreateOutcome, DeleteOutcome, OwnerMark, Ownership, Versioning};
pub use drain::{DrainPace, DrainRound, Listing, Usage};

/// The bucket tag that records which S3Bucket (by uid) created the bucket.
pub const OWNER_TAG: &str = "keeper.dev/owner-uid";
/// The namespace of that S3Bucket (written since the uid alone named no one a user can find; a
/// bucket tagged with the uid only, by an older keeper, is still recognised).
pub const OWNER_NAMESPACE_TAG: &str = "keeper.dev/owner-namespace";
/// The name of that S3Bucket.
pub const OWNER_NAME_TAG: &str = "keeper.dev/owner-name";

/// `DeleteObjects` accepts at most this many keys per request (some servers accept more; the
/// limit is enforced here so keeper behaves the same everywhere).
pub const MAX_DELETE_BATCH: usize = 1000;

/// Label of this backend in `keeper_backend_requests_total{backend}`.
const BACKEND: &str = "s3";

/// Where and as whom to connect.
#[derive(Clone)]
pub struct S3Settings {
    pub endpoint: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub force_path_style: bool,
    /// PEM CA certificates to trust in addition to the system roots (self-hosted stores).
    pub ca_bundle: Option<Vec<u8>>,
    /// The provider's request rate, shared with its other clients.
    pub rate_limit: RateLimit,
}

impl std::fmt::Debug for S3Settings {
    // The secret key must never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("force_path_style", &self.force_path_style)
            .field("ca_bundle", &self.ca_bundle.is_some())
            .finish_non_exhaustive()
    }
}

/// How an S3 call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth retrying: 5xx, throttling, timeouts, connection failures.
    Transient,
    /// Needs a change on our side or the user's: bad credentials, validation errors.
    Permanent,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("S3 {operation} failed: {code}: {message}")]
pub struct S3Error {
    /// The operation in snake_case, as in the metrics (`create_bucket`).
    pub operation: &'static str,
    pub class: ErrorClass,
    pub code: String,
    pub message: String,
}

impl S3Error {
    /// The shared classification: the code first (it says what the status alone cannot: a
    /// missing bucket, a bucket not empty), then the transient/permanent split by status.
    pub fn classified(&self) -> crate::error::ErrorClass {
        use crate::error::ErrorClass as Class;
        match (self.class, self.code.as_str()) {
            (_, "NoSuchBucket" | "NotFound" | "NoSuchKey" | "NoSuchTagSet") => Class::NotFound,
            (_, "BucketNotEmpty" | "BucketAlreadyExists" | "OperationAborted") => Class::Conflict,
            (ErrorClass::Transient, _) => Class::Transient,
            (ErrorClass::Permanent, _) => Class::Permanent,
        }
    }
}

// S3 errors map into the one `BackendError` of keeper, so controllers see one type; the client
// classifies per operation and code where the meaning depends on the call (see
// `S3Store::create_bucket`, `S3Store::delete_bucket`).
impl From<S3Error> for BackendError {
    fn from(e: S3Error) -> Self {
        BackendError::new("s3", e.operation, e.classified(), e.code, e.message)
    }
}

impl BackendOutcome for S3Error {
    fn outcome(&self) -> &'static str {
        self.classified().label()
    }
}

/// Service error codes that mean "try again later" even though they arrive as 4xx.
const TRANSIENT_CODES: &[&str] = &[
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "ExpiredToken",
    "InternalError",
    "ServiceUnavailable",
    "OperationAborted",
];

fn classify<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> S3Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match &err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let inner = service.err();
            let code = inner.code().unwrap_or("Unknown").to_string();
            let message = inner.message().unwrap_or_default().to_string();
            let transient = status >= 500 || status == 429 || TRANSIENT_CODES.contains(&&*code);
            S3Error {
                operation,
                class: if transient {
                    ErrorClass::Transient
                } else {
                    ErrorClass::Permanent
                },
                code,
                message,
            }
        }
        SdkError::ConstructionFailure(_) => S3Error {
            operation,
            class: ErrorClass::Permanent,
            code: "ConstructionFailure".into(),
            message: error_chain(&err),
        },
        // Timeouts, dispatch failures and unparseable responses are worth another try.
        _ => S3Error {
            operation,
            class: ErrorClass::Transient,
            code: "Unavailable".into(),
            message: error_chain(&err),
        },
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The SDK's HTTPS client (rustls with aws-lc-rs), trusting the system roots plus `pem`; shared by
/// the S3 and IAM clients of a provider.
pub(crate) fn https_client_trusting(
    pem: &[u8],
) -> Result<aws_sdk_s3::config::SharedHttpClient, String> {
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
    // The SDK loads the certificates lazily and would fail at the first request: check now.
    if !pem_has_certificate(pem) {
        return Err("the CA bundle holds no PEM certificate".to_string());
    }
    let context = TlsContext::builder()
        .with_trust_store(TrustStore::default().with_pem_certificate(pem.to_vec()))
        .build()
        .map_err(|e| format!("invalid CA bundle: {e}"))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https())
}

fn pem_has_certificate(pem: &[u8]) -> bool {
    String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----")
}

/// Fixed keys, as every S3 client of keeper signs with.
fn static_credentials(access_key_id: &str, secret_access_key: &str) -> Credentials {
    Credentials::new(access_key_id, secret_access_key, None, None, "keeper")
}

/// An S3 client bound to one endpoint and one set of credentials.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    rate_limit: RateLimit,
    /// What counts listed for the drains they start (see [`S3Store::count_for_drain`]).
    counted: Arc<Mutex<drain::CountedEntries>>,
}

impl S3Store {
    /// A client for `settings` with the default timeouts (tests; keeper's own clients take the
    /// configured ones); fails only on an unusable CA bundle.
    #[cfg(test)]
    pub fn new(settings: &S3Settings) -> Result<Self, String> {
        Self::with_timeouts(settings, &BackendTimeouts::default())
    }

    /// As `S3Store::new` (tests), with the configured connect and per-attempt timeouts.
    pub fn with_timeouts(
        settings: &S3Settings,
        timeouts: &BackendTimeouts,
    ) -> Result<Self, String> {
        Ok(S3Store {
            client: Client::from_conf(Self::config(settings, timeouts)?.build()),
            rate_limit: settings.rate_limit.clone(),
            counted: Arc::default(),
        })
    }

    /// Runs one S3 call at the provider's request rate, counted in the backend metrics. Not an
    /// async fn: it hands the call on at once, to be boxed (see [`measured`]).
    fn call<'a, T: 'a>(
        &'a self,
        metrics: &'a Metrics,
        operation: &'static str,
        call: impl std::future::Future<Output = Result<T, S3Error>> + 'a,
    ) -> impl std::future::Future<Output = Result<T, S3Error>> + 'a {
        measured(metrics, &self.rate_limit, BACKEND, operation, call)
    }

    /// The SDK configuration of a client for `settings`.
    fn config(
        settings: &S3Settings,
        timeouts: &BackendTimeouts,
    ) -> Result<aws_sdk_s3::config::Builder, String> {
        let mut config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(settings.region.clone()))
            .credentials_provider(static_credentials(
                &settings.access_key_id,
                &settings.secret_access_key,
            ))
            .endpoint_url(settings.endpoint.clone())
            .force_path_style(settings.force_path_style)
            // S3-compatible stores reject or ignore the newer default CRC checksums.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            // A reconcile must not hang on a stalled backend.
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(timeouts.connect)
                    .operation_attempt_timeout(timeouts.request)
                    .build(),
            );
        if let Some(pem) = &settings.ca_bundle {
            config = config.http_client(https_client_trusting(pem)?);
        }
        Ok(config)
    }
}

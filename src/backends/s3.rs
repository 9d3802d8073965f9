//! S3 operations keeper runs against S3-compatible stores (AWS S3, MinIO, Ceph RGW, moto) with
//! aws-sdk-s3: bucket creation with versioning, object lock and an ownership tag, ownership
//! lookup, usage by bounded listing, client-side drain in `DeleteObjects` batches, and deletion.

use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration, Delete,
    ObjectIdentifier, Tag, Tagging, VersioningConfiguration,
};

use crate::metrics::{BackendOutcome, Metrics};

/// The bucket tag that records which S3Bucket (by uid) created the bucket.
pub const OWNER_TAG: &str = "keeper.dev/owner-uid";

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

#[derive(Debug, thiserror::Error)]
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
    pub fn classified(&self) -> super::error::ErrorClass {
        use super::error::ErrorClass as Class;
        match (self.class, self.code.as_str()) {
            (_, "NoSuchBucket" | "NotFound" | "NoSuchKey" | "NoSuchTagSet") => Class::NotFound,
            (_, "BucketNotEmpty" | "BucketAlreadyExists" | "OperationAborted") => Class::Conflict,
            (ErrorClass::Transient, _) => Class::Transient,
            (ErrorClass::Permanent, _) => Class::Permanent,
        }
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

/// The SDK's HTTPS client (rustls with aws-lc-rs), trusting the system roots plus `pem`.
fn https_client_trusting(pem: &[u8]) -> Result<aws_sdk_s3::config::SharedHttpClient, String> {
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

/// Who owns a bucket that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// No bucket of that name is visible with these credentials.
    Missing,
    /// The bucket exists; the value of its owner tag, if any.
    Exists { owner_uid: Option<String> },
}

/// What a create attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// The name is taken (by us or by someone else): check the ownership tag.
    AlreadyExists,
}

/// Objects and bytes in a bucket, counting every version and delete marker (each must go before
/// the bucket can be deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub objects: i64,
    pub bytes: i64,
    /// False when the listing stopped at its bound: the numbers are a lower bound.
    pub complete: bool,
}

/// What one drain round did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainRound {
    /// Versions and delete markers deleted in this round.
    pub deleted: u64,
    /// The last listing came back empty: nothing is left.
    pub empty: bool,
    /// Objects that cannot be deleted because of object lock or a legal hold: the drain must stop.
    pub blocked: Option<String>,
    /// Other per-key failures in the last batch (retried by the next round).
    pub failed: Vec<String>,
}

/// Per-key error codes that mean retention or a legal hold protects the object.
fn is_lock_error(code: &str) -> bool {
    matches!(code, "AccessDenied" | "InvalidRequest" | "ObjectLocked")
}

/// An S3 client bound to one endpoint and one set of credentials.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
}

impl S3Store {
    /// A client for `settings`; fails only on an unusable CA bundle.
    pub fn new(settings: &S3Settings) -> Result<Self, String> {
        let credentials = Credentials::new(
            settings.access_key_id.clone(),
            settings.secret_access_key.clone(),
            None,
            None,
            "keeper",
        );
        let mut config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(settings.region.clone()))
            .credentials_provider(credentials)
            .endpoint_url(settings.endpoint.clone())
            .force_path_style(settings.force_path_style)
            // S3-compatible stores reject or ignore the newer default CRC checksums.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            // A reconcile must not hang on a stalled backend.
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .operation_attempt_timeout(Duration::from_secs(60))
                    .build(),
            );
        if let Some(pem) = &settings.ca_bundle {
            config = config.http_client(https_client_trusting(pem)?);
        }
        Ok(S3Store {
            client: Client::from_conf(config.build()),
        })
    }

    /// Whether the bucket exists and, if so, the value of its ownership tag.
    pub async fn ownership(&self, metrics: &Metrics, bucket: &str) -> Result<Ownership, S3Error> {
        let head = metrics
            .backend_call(BACKEND, "head_bucket", async {
                match self.client.head_bucket().bucket(bucket).send().await {
                    Ok(_) => Ok(true),
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
                    Err(e) => Err(classify("head_bucket", e)),
                }
            })
            .await?;
        if !head {
            return Ok(Ownership::Missing);
        }
        let owner_uid = metrics
            .backend_call(BACKEND, "get_bucket_tagging", async {
                match self.client.get_bucket_tagging().bucket(bucket).send().await {
                    Ok(out) => Ok(out
                        .tag_set()
                        .iter()
                        .find(|t| t.key() == OWNER_TAG)
                        .map(|t| t.value().to_string())),
                    Err(e) if e.code() == Some("NoSuchTagSet") => Ok(None),
                    Err(e) => Err(classify("get_bucket_tagging", e)),
                }
            })
            .await?;
        Ok(Ownership::Exists { owner_uid })
    }

    /// Creates the bucket (object lock can only be chosen at creation).
    pub async fn create_bucket(
        &self,
        metrics: &Metrics,
        bucket: &str,
        region: &str,
        object_lock: bool,
    ) -> Result<CreateOutcome, S3Error> {
        let mut request = self
            .client
            .create_bucket()
            .bucket(bucket)
            .object_lock_enabled_for_bucket(object_lock);
        // us-east-1 is the one region that must not be named as a location constraint.
        if region != "us-east-1" {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region))
                    .build(),
            );
        }
        metrics
            .backend_call(BACKEND, "create_bucket", async {
                match request.send().await {
                    Ok(_) => Ok(CreateOutcome::Created),
                    Err(e)
                        if e.as_service_error().is_some_and(|s| {
                            s.is_bucket_already_exists() || s.is_bucket_already_owned_by_you()
                        }) =>
                    {
                        Ok(CreateOutcome::AlreadyExists)
                    }
                    Err(e) => Err(classify("create_bucket", e)),
                }
            })
            .await
    }

    /// Marks the bucket as created by the S3Bucket with uid `owner_uid`, keeping other tags.
    pub async fn tag_owner(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner_uid: &str,
    ) -> Result<(), S3Error> {
        let mut tags: Vec<Tag> = metrics
            .backend_call(BACKEND, "get_bucket_tagging", async {
                match self.client.get_bucket_tagging().bucket(bucket).send().await {
                    Ok(out) => Ok(out.tag_set().to_vec()),
                    Err(e) if e.code() == Some("NoSuchTagSet") => Ok(Vec::new()),
                    Err(e) => Err(classify("get_bucket_tagging", e)),
                }
            })
            .await?;
        tags.retain(|t| t.key() != OWNER_TAG);
        tags.push(
            Tag::builder()
                .key(OWNER_TAG)
                .value(owner_uid)
                .build()
                .expect("key and value are set"),
        );
        let tagging = Tagging::builder()
            .set_tag_set(Some(tags))
            .build()
            .expect("tag set is set");
        metrics
            .backend_call(BACKEND, "put_bucket_tagging", async {
                self.client
                    .put_bucket_tagging()
                    .bucket(bucket)
                    .tagging(tagging)
                    .send()
                    .await
                    .map_err(|e| classify("put_bucket_tagging", e))
            })
            .await?;
        Ok(())
    }

    /// Enables or suspends versioning (S3 cannot turn it off once enabled). Idempotent, and one
    /// call: reading the state first would cost a call and some servers answer that read with a
    /// body the SDK cannot decode for never-versioned buckets.
    pub async fn set_versioning(
        &self,
        metrics: &Metrics,
        bucket: &str,
        enabled: bool,
    ) -> Result<(), S3Error> {
        let status = if enabled {
            BucketVersioningStatus::Enabled
        } else {
            BucketVersioningStatus::Suspended
        };
        metrics
            .backend_call(BACKEND, "put_bucket_versioning", async {
                self.client
                    .put_bucket_versioning()
                    .bucket(bucket)
                    .versioning_configuration(
                        VersioningConfiguration::builder().status(status).build(),
                    )
                    .send()
                    .await
                    .map_err(|e| classify("put_bucket_versioning", e))
            })
            .await?;
        Ok(())
    }

    /// Counts versions and delete markers, listing at most `max_entries` of them so that a
    /// bucket with millions of objects costs a bounded number of requests. `Ok(None)` when the
    /// bucket does not exist.
    pub async fn usage(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
    ) -> Result<Option<Usage>, S3Error> {
        let mut usage = Usage::default();
        let mut key_marker: Option<String> = None;
        let mut version_marker: Option<String> = None;
        loop {
            let page = metrics
                .backend_call(BACKEND, "list_object_versions", async {
                    match self
                        .client
                        .list_object_versions()
                        .bucket(bucket)
                        .max_keys(MAX_DELETE_BATCH as i32)
                        .set_key_marker(key_marker.clone())
                        .set_version_id_marker(version_marker.clone())
                        .send()
                        .await
                    {
                        Ok(page) => Ok(Some(page)),
                        Err(e) if e.code() == Some("NoSuchBucket") => Ok(None),
                        Err(e) => Err(classify("list_object_versions", e)),
                    }
                })
                .await?;
            let Some(page) = page else {
                return Ok(None);
            };
            usage.objects += (page.versions().len() + page.delete_markers().len()) as i64;
            usage.bytes += page.versions().iter().filter_map(|v| v.size()).sum::<i64>();
            if !page.is_truncated().unwrap_or(false) {
                usage.complete = true;
                return Ok(Some(usage));
            }
            if usage.objects >= max_entries {
                return Ok(Some(usage));
            }
            key_marker = page.next_key_marker().map(str::to_string);
            version_marker = page.next_version_id_marker().map(str::to_string);
        }
    }

    /// Deletes versions and delete markers for about `budget` (at least one batch), at most
    /// `max_per_second` per second.
    ///
    /// Stateless, so a restart resumes where the bucket is: every batch re-lists from the start
    /// (continuing a listing across deletions can end it early on some servers).
    pub async fn drain_round(
        &self,
        metrics: &Metrics,
        bucket: &str,
        budget: Duration,
        max_per_second: u32,
    ) -> Result<DrainRound, S3Error> {
        let started = Instant::now();
        let mut round = DrainRound::default();
        let max_per_second = max_per_second.max(1);
        // Batches never exceed the rate, so one batch never needs more than a second of budget.
        let batch_size = MAX_DELETE_BATCH.min(max_per_second as usize);
        loop {
            let page = metrics
                .backend_call(BACKEND, "list_object_versions", async {
                    self.client
                        .list_object_versions()
                        .bucket(bucket)
                        .max_keys(batch_size as i32)
                        .send()
                        .await
                        .map_err(|e| classify("list_object_versions", e))
                })
                .await?;
            let ids: Vec<ObjectIdentifier> = page
                .versions()
                .iter()
                .filter_map(|v| Some((v.key()?, v.version_id())))
                .chain(
                    page.delete_markers()
                        .iter()
                        .filter_map(|m| Some((m.key()?, m.version_id()))),
                )
                .take(batch_size)
                .map(|(key, version)| {
                    ObjectIdentifier::builder()
                        .key(key)
                        .set_version_id(version.map(str::to_string))
                        .build()
                        .expect("key is set")
                })
                .collect();
            if ids.is_empty() {
                round.empty = true;
                return Ok(round);
            }
            // The budget is checked after the listing, so a round that deleted the last objects
            // still reports the bucket empty.
            if round.deleted > 0 && started.elapsed() >= budget {
                return Ok(round);
            }
            let requested = ids.len() as u64;
            let delete = Delete::builder()
                .set_objects(Some(ids))
                .quiet(true)
                .build()
                .expect("objects are set");
            let out = metrics
                .backend_call(BACKEND, "delete_objects", async {
                    self.client
                        .delete_objects()
                        .bucket(bucket)
                        .delete(delete)
                        .send()
                        .await
                        .map_err(|e| classify("delete_objects", e))
                })
                .await?;
            // Quiet mode reports only failures; everything else was deleted.
            let failures = out.errors();
            round.deleted += requested - failures.len() as u64;
            round.failed = failures
                .iter()
                .map(|f| {
                    format!(
                        "{}: {}: {}",
                        f.key().unwrap_or_default(),
                        f.code().unwrap_or("Unknown"),
                        f.message().unwrap_or_default()
                    )
                })
                .collect();
            if let Some(locked) = failures
                .iter()
                .find(|f| f.code().is_some_and(is_lock_error))
            {
                round.blocked = Some(format!(
                    "object {:?} cannot be deleted ({}: {}); object lock retention or a legal hold protects it",
                    locked.key().unwrap_or_default(),
                    locked.code().unwrap_or_default(),
                    locked.message().unwrap_or_default()
                ));
                return Ok(round);
            }
            // A batch that deleted nothing would be listed again unchanged: let the caller retry later.
            if failures.len() as u64 == requested {
                return Ok(round);
            }
            // Rate limit: never get ahead of `max_per_second` since the round began.
            let due = Duration::from_secs_f64(round.deleted as f64 / f64::from(max_per_second));
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// Deletes the (empty) bucket. A bucket already gone counts as deleted.
    pub async fn delete_bucket(
        &self,
        metrics: &Metrics,
        bucket: &str,
    ) -> Result<DeleteOutcome, S3Error> {
        metrics
            .backend_call(BACKEND, "delete_bucket", async {
                match self.client.delete_bucket().bucket(bucket).send().await {
                    Ok(_) => Ok(DeleteOutcome::Deleted),
                    // DeleteBucket has no modeled errors: match the wire codes.
                    Err(e) if e.code() == Some("NoSuchBucket") => Ok(DeleteOutcome::Deleted),
                    Err(e) if e.code() == Some("BucketNotEmpty") => Ok(DeleteOutcome::NotEmpty),
                    Err(e) => Err(classify("delete_bucket", e)),
                }
            })
            .await
    }

    /// The names of the buckets the credentials can see (ListBuckets); also proves that the
    /// credentials work.
    pub async fn list_buckets(&self, metrics: &Metrics) -> Result<Vec<String>, S3Error> {
        metrics
            .backend_call(BACKEND, "list_buckets", async {
                match self.client.list_buckets().send().await {
                    Ok(out) => Ok(out
                        .buckets()
                        .iter()
                        .filter_map(|b| b.name().map(str::to_string))
                        .collect()),
                    Err(e) => Err(classify("list_buckets", e)),
                }
            })
            .await
    }
}

/// What a delete attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotEmpty,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use aws_sdk_s3::primitives::ByteStream;
    use aws_sdk_s3::types::{ChecksumAlgorithm, ObjectLockLegalHold, ObjectLockLegalHoldStatus};
    use futures::StreamExt;

    use crate::test_support::MotoServer;

    /// moto with the scheme its clients use.
    pub(crate) struct Moto {
        _server: MotoServer,
        pub endpoint: String,
    }

    impl Moto {
        /// Starts moto; a missing moto fails the test (see `MotoServer::start`).
        pub(crate) fn start() -> Option<Moto> {
            Self::start_with(&[], "http")
        }

        /// Starts moto with extra arguments, serving `scheme`.
        fn start_with(extra: &[&str], scheme: &str) -> Option<Moto> {
            let server = MotoServer::start("s3 backend test", extra)?;
            Some(Moto {
                endpoint: server.url(scheme),
                _server: server,
            })
        }

        pub(crate) fn settings(&self) -> S3Settings {
            S3Settings {
                endpoint: self.endpoint.clone(),
                region: "us-east-1".into(),
                access_key_id: "testing".into(),
                secret_access_key: "testing".into(),
                force_path_style: true,
                ca_bundle: None,
            }
        }
    }

    async fn put_objects(store: &S3Store, bucket: &str, keys: impl Iterator<Item = String>) {
        futures::stream::iter(keys)
            .for_each_concurrent(16, |key| async move {
                store
                    .client
                    .put_object()
                    .bucket(bucket)
                    .key(key)
                    .body(ByteStream::from_static(b"0123456789"))
                    .send()
                    .await
                    .expect("put object");
            })
            .await;
    }

    #[tokio::test]
    async fn creates_a_tagged_versioned_bucket_and_reports_ownership() {
        let Some(moto) = Moto::start() else {
            return;
        };
        let metrics = Metrics::new();
        let store = S3Store::new(&moto.settings()).unwrap();
        assert_eq!(
            store.ownership(&metrics, "b-one").await.unwrap(),
            Ownership::Missing
        );
        assert_eq!(
            store
                .create_bucket(&metrics, "b-one", "us-east-1", false)
                .await
                .unwrap(),
            CreateOutcome::Created
        );
        store.tag_owner(&metrics, "b-one", "uid-1").await.unwrap();
        store.set_versioning(&metrics, "b-one", true).await.unwrap();
        assert_eq!(
            store.ownership(&metrics, "b-one").await.unwrap(),
            Ownership::Exists {
                owner_uid: Some("uid-1".into())
            }
        );
        // Versioning keeps both writes of a key (GetBucketVersioning is not decodable from moto).
        put_objects(
            &store,
            "b-one",
            ["k".to_string(), "k".to_string()].into_iter(),
        )
        .await;
        let usage = store.usage(&metrics, "b-one", 1000).await.unwrap().unwrap();
        assert_eq!(usage.objects, 2);
        let text = metrics.encode();
        assert!(
            text.contains(r#"keeper_backend_requests_total{backend="s3",operation="create_bucket",outcome="success"} 1"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_bucket_created_by_someone_else_shows_no_owner_tag() {
        let Some(moto) = Moto::start() else {
            return;
        };
        let metrics = Metrics::new();
        let store = S3Store::new(&moto.settings()).unwrap();
        store
            .client
            .create_bucket()
            .bucket("foreign")
            .send()
            .await
            .unwrap();
        assert_eq!(
            store.ownership(&metrics, "foreign").await.unwrap(),
            Ownership::Exists { owner_uid: None }
        );
    }

    #[tokio::test]
    async fn usage_counts_versions_and_delete_markers_within_a_bound() {
        let Some(moto) = Moto::start() else {
            return;
        };
        let metrics = Metrics::new();
        let store = S3Store::new(&moto.settings()).unwrap();
        assert_eq!(store.usage(&metrics, "nope", 10_000).await.unwrap(), None);
        store
            .create_bucket(&metrics, "usage", "us-east-1", false)
            .await
            .unwrap();
        store.set_versioning(&metrics, "usage", true).await.unwrap();
        put_objects(&store, "usage", (0..1200).map(|i| format!("k{i}"))).await;
        // A second version of 10 objects, and a delete marker on one.
        put_objects(&store, "usage", (0..10).map(|i| format!("k{i}"))).await;
        store
            .client
            .delete_object()
            .bucket("usage")
            .key("k0")
            .send()
            .await
            .unwrap();
        let usage = store.usage(&metrics, "usage", 100_000).await.unwrap();
        assert_eq!(
            usage,
            Some(Usage {
                objects: 1211,
                bytes: 12100,
                complete: true
            })
        );
        // The bound stops the listing after the page that reaches it.
        let bounded = store.usage(&metrics, "usage", 500).await.unwrap().unwrap();
        assert_eq!(bounded.objects, 1000);
        assert!(!bounded.complete);
    }

    #[tokio::test]
    async fn drains_thousands_of_versions_in_batches_of_at_most_1000_then_deletes() {
        let Some(moto) = Moto::start() else {
            return;
        };
        let metrics = Metrics::new();
        let store = S3Store::new(&moto.settings()).unwrap();
        store
            .create_bucket(&metrics, "drain", "us-east-1", false)
            .await
            .unwrap();
        store.set_versioning(&metrics, "drain", true).await.unwrap();
        put_objects(&store, "drain", (0..2300).map(|i| format!("obj/{i}"))).await;
        put_objects(&store, "drain", (0..200).map(|i| format!("obj/{i}"))).await;
        for i in 0..50 {
            store
                .client
                .delete_object()
                .bucket("drain")
                .key(format!("obj/{i}"))
                .send()
                .await
                .unwrap();
        }
        assert_eq!(
            store.delete_bucket(&metrics, "drain").await.unwrap(),
            DeleteOutcome::NotEmpty
        );
        // A short budget stops after some batches; the next round resumes from the bucket's state.
        let first = store
            .drain_round(&metrics, "drain", Duration::ZERO, 100_000)
            .await
            .unwrap();
        assert_eq!(first.deleted, 1000);
        assert!(!first.empty);
        let rest = store
            .drain_round(&metrics, "drain", Duration::from_secs(60), 100_000)
            .await
            .unwrap();
        assert_eq!(first.deleted + rest.deleted, 2550);
        assert!(rest.empty);
        assert!(rest.blocked.is_none() && rest.failed.is_empty());
        assert_eq!(
            store.usage(&metrics, "drain", 10_000).await.unwrap(),
            Some(Usage {
                objects: 0,
                bytes: 0,
                complete: true
            })
        );
        let text = metrics.encode();
        // 2,550 entries need at least three batches; more would mean smaller batches than allowed.
        assert!(
            text.contains(r#"keeper_backend_requests_total{backend="s3",operation="delete_objects",outcome="success"} 3"#),
            "{text}"
        );
        assert_eq!(
            store.delete_bucket(&metrics, "drain").await.unwrap(),
            DeleteOutcome::Deleted
        );
        // Already gone counts as deleted.
        assert_eq!(
            store.delete_bucket(&metrics, "drain").await.unwrap(),
            DeleteOutcome::Deleted
        );
        assert_eq!(
            store.ownership(&metrics, "drain").await.unwrap(),
            Ownership::Missing
        );
    }

    #[tokio::test]
    async fn the_drain_rate_limit_spreads_batches_over_time() {
        let Some(moto) = Moto::start() else {
            return;
        };
        let metrics = Metrics::new();
        let store = S3Store::new(&moto.settings()).unwrap();
        store
            .create_bucket(&metrics, "slow", "us-east-1", false)
            .await
            .unwrap();
        put_objects(&store, "slow", (0..300).map(|i| format!("k{i}"))).await;
        let started = Instant::now();
        let round = store
            .drain_round(&metrics, "slow", Duration::from_secs(60), 100)
            .await
            .unwrap();
        assert_eq!(round.deleted, 300);
        assert!(round.empty);
        // 300 deletes at 100/s take at least 3 seconds; batches were capped at 100 keys.
        assert!(started.elapsed() >= Duration::from_secs(3));
        // A round whose budget runs out with the last batch still reports the bucket empty.
        put_objects(&store, "slow", (0..200).map(|i| format!("k{i}"))).await;
        let round = store
            .drain_round(&metrics, "slow", Duration::from_secs(2), 100)
            .await
            .unwrap();
        assert_eq!(round.deleted, 200);
        assert!(round.empty);
        let text = metrics.encode();
        assert!(
            text.contains(r#"keeper_backend_requests_total{backend="s3",operation="delete_objects",outcome="success"} 5"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_legal_hold_stops_the_drain_with_the_key_named() {
        let Some(moto) = Moto::start() else {
            return;
        };
        let metrics = Metrics::new();
        let store = S3Store::new(&moto.settings()).unwrap();
        store
            .create_bucket(&metrics, "locked", "us-east-1", true)
            .await
            .unwrap();
        put_objects(&store, "locked", (0..5).map(|i| format!("free{i}"))).await;
        store
            .client
            .put_object()
            .bucket("locked")
            .key("held")
            .body(ByteStream::from_static(b"x"))
            .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .send()
            .await
            .unwrap();
        let round = store
            .drain_round(&metrics, "locked", Duration::from_secs(60), 1000)
            .await
            .unwrap();
        let blocked = round.blocked.expect("the held object blocks the drain");
        assert!(blocked.contains("\"held\""), "{blocked}");
        assert_eq!(round.deleted, 5);
        assert_eq!(round.failed.len(), 1);
        // Lifting the hold lets the drain finish.
        let version = store
            .client
            .list_object_versions()
            .bucket("locked")
            .send()
            .await
            .unwrap()
            .versions()[0]
            .version_id()
            .map(str::to_string);
        store
            .client
            .put_object_legal_hold()
            .bucket("locked")
            .key("held")
            .set_version_id(version)
            .legal_hold(
                ObjectLockLegalHold::builder()
                    .status(ObjectLockLegalHoldStatus::Off)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let round = store
            .drain_round(&metrics, "locked", Duration::from_secs(60), 1000)
            .await
            .unwrap();
        assert_eq!(round.deleted, 1);
        assert!(round.empty && round.blocked.is_none());
    }

    #[tokio::test]
    async fn a_ca_bundle_makes_a_self_signed_store_trusted() {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let dir = std::env::temp_dir().join(format!("keeper-s3-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_file, cert.cert.pem()).unwrap();
        std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
        let moto = Moto::start_with(
            &[
                "-s",
                "-c",
                cert_file.to_str().unwrap(),
                "-k",
                key_file.to_str().unwrap(),
            ],
            "https",
        );
        let Some(moto) = moto else {
            return;
        };
        let metrics = Metrics::new();
        // Without the bundle the certificate is refused (a transient error: nothing is "gone").
        let untrusting = S3Store::new(&moto.settings()).unwrap();
        let err = untrusting.ownership(&metrics, "tls").await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient, "{err}");
        let trusting = S3Store::new(&S3Settings {
            ca_bundle: Some(cert.cert.pem().into_bytes()),
            ..moto.settings()
        })
        .unwrap();
        assert_eq!(
            trusting.ownership(&metrics, "tls").await.unwrap(),
            Ownership::Missing
        );
        std::fs::remove_dir_all(&dir).unwrap();
        // A bundle without a certificate is refused up front.
        assert!(
            S3Store::new(&S3Settings {
                ca_bundle: Some(b"not a pem".to_vec()),
                ..moto.settings()
            })
            .is_err()
        );
    }
}

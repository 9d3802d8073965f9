//! The S3 data plane: real buckets on a moto server, driven with `aws-sdk-s3` (path style).
//! moto accepts any credentials, so the emulator uses a fixed pair of its own.

use std::time::SystemTime;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::DateTimeFormat;
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration, DefaultRetention,
    Delete, ObjectIdentifier, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockRetentionMode,
    ObjectLockRule, VersioningConfiguration,
};

/// A failed call to moto.
#[derive(Debug, Clone)]
pub struct BackendError {
    /// HTTP status moto answered, if it answered at all.
    pub status: Option<u16>,
    /// S3 error code (`BucketNotEmpty`, `NoSuchBucket`, ...).
    pub code: Option<String>,
    pub message: String,
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "moto: status={:?} code={:?}: {}",
            self.status, self.code, self.message
        )
    }
}

impl<E: ProvideErrorMetadata + std::fmt::Debug> From<SdkError<E, HttpResponse>> for BackendError {
    fn from(e: SdkError<E, HttpResponse>) -> Self {
        let status = e.raw_response().map(|r| r.status().as_u16());
        BackendError {
            status,
            code: e.code().map(str::to_owned),
            message: format!("{e:?}"),
        }
    }
}

/// Object totals of one bucket: all object versions (noncurrent ones included), delete markers excluded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketUsage {
    pub object_count: u64,
    pub data_bytes: u64,
}

/// Keys per ListObjectsV2 page when counting usage: moto answers pages above S3's 1,000 and sorts
/// the whole bucket for each page, so one large page costs it about what one small one does.
const USAGE_PAGE: usize = 100_000;

#[derive(Clone)]
pub struct Backend {
    client: Client,
    raw: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    endpoint: String,
}

impl Backend {
    pub fn new(endpoint: &str) -> Self {
        let conf = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new(
                "keeper-storagegrid",
                "keeper-storagegrid-emulator",
                None,
                None,
                "static",
            ))
            .endpoint_url(endpoint)
            .force_path_style(true)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .build();
        Backend {
            client: Client::from_conf(conf),
            raw: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http(),
            endpoint: endpoint.trim_end_matches('/').to_owned(),
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub async fn create_bucket(
        &self,
        name: &str,
        region: &str,
        object_lock: bool,
    ) -> Result<(), BackendError> {
        let mut req = self.client.create_bucket().bucket(name);
        if region != "us-east-1" {
            req = req.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region))
                    .build(),
            );
        }
        if object_lock {
            req = req.object_lock_enabled_for_bucket(true);
        }
        req.send().await?;
        Ok(())
    }

    pub async fn delete_bucket(&self, name: &str) -> Result<(), BackendError> {
        self.client.delete_bucket().bucket(name).send().await?;
        Ok(())
    }

    /// Whether versioning was never turned on: ListObjectsV2 then sees everything the bucket
    /// holds, at a fraction of moto's cost for ListObjectVersions (which deep-copies every version
    /// of the bucket at each call: draining 100,000 objects with it took moto past 20 GB).
    async fn never_versioned(&self, name: &str) -> Result<bool, BackendError> {
        Ok(self.get_versioning(name).await? == (false, false))
    }

    /// One ListObjectsV2 page of a never-versioned bucket: its keys and sizes, and where the
    /// listing goes on.
    async fn list_objects(
        &self,
        name: &str,
        max: usize,
        token: Option<String>,
    ) -> Result<(Vec<(String, u64)>, Option<String>), BackendError> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(name)
            .max_keys(max.clamp(1, USAGE_PAGE) as i32)
            .set_continuation_token(token)
            .send()
            .await?;
        let objects = out
            .contents()
            .iter()
            .filter_map(|o| Some((o.key()?.to_owned(), o.size().unwrap_or(0).max(0) as u64)))
            .collect();
        let next = if out.is_truncated() == Some(true) {
            out.next_continuation_token().map(str::to_owned)
        } else {
            None
        };
        Ok((objects, next))
    }

    /// True when the bucket holds no object version and no delete marker.
    pub async fn is_empty(&self, name: &str) -> Result<bool, BackendError> {
        if self.never_versioned(name).await? {
            return Ok(self.list_objects(name, 1, None).await?.0.is_empty());
        }
        let out = self
            .client
            .list_object_versions()
            .bucket(name)
            .max_keys(1)
            .send()
            .await?;
        Ok(out.versions().is_empty() && out.delete_markers().is_empty())
    }

    /// Counts every object version and its bytes by listing the bucket.
    pub async fn usage(&self, name: &str) -> Result<BucketUsage, BackendError> {
        let mut usage = BucketUsage::default();
        if self.never_versioned(name).await? {
            let mut token = None;
            loop {
                let (objects, next) = self.list_objects(name, USAGE_PAGE, token).await?;
                usage.object_count += objects.len() as u64;
                usage.data_bytes += objects.iter().map(|(_, size)| size).sum::<u64>();
                match next {
                    Some(next) => token = Some(next),
                    None => return Ok(usage),
                }
            }
        }
        let mut key_marker: Option<String> = None;
        let mut version_marker: Option<String> = None;
        loop {
            let out = self
                .client
                .list_object_versions()
                .bucket(name)
                .max_keys(1000)
                .set_key_marker(key_marker.clone())
                .set_version_id_marker(version_marker.clone())
                .send()
                .await?;
            for v in out.versions() {
                usage.object_count += 1;
                usage.data_bytes += v.size().unwrap_or(0).max(0) as u64;
            }
            if out.is_truncated() != Some(true) {
                break;
            }
            let next_key = out.next_key_marker().map(str::to_owned);
            if next_key.is_none()
                || (next_key == key_marker
                    && out.next_version_id_marker().map(str::to_owned) == version_marker)
            {
                break;
            }
            key_marker = next_key;
            version_marker = out.next_version_id_marker().map(str::to_owned);
        }
        Ok(usage)
    }

    /// Deletes up to `max` object versions / delete markers, always listing from the start
    /// (moto may end a listing early when deleting while paginating). Returns how many went.
    pub async fn delete_batch(&self, name: &str, max: usize) -> Result<usize, BackendError> {
        let listed: Vec<(String, Option<String>)> = if self.never_versioned(name).await? {
            let (objects, _) = self.list_objects(name, max, None).await?;
            objects.into_iter().map(|(key, _)| (key, None)).collect()
        } else {
            let out = self
                .client
                .list_object_versions()
                .bucket(name)
                .max_keys(max.clamp(1, 1000) as i32)
                .send()
                .await?;
            out.versions()
                .iter()
                .map(|v| (v.key(), v.version_id()))
                .chain(
                    out.delete_markers()
                        .iter()
                        .map(|m| (m.key(), m.version_id())),
                )
                .filter_map(|(key, version)| Some((key?.to_owned(), version.map(str::to_owned))))
                .collect()
        };
        let mut ids = Vec::new();
        for (key, version) in listed {
            let id = ObjectIdentifier::builder()
                .key(key)
                .set_version_id(version)
                .build()
                .map_err(|e| BackendError {
                    status: None,
                    code: None,
                    message: e.to_string(),
                })?;
            ids.push(id);
            if ids.len() >= max {
                break;
            }
        }
        if ids.is_empty() {
            return Ok(0);
        }
        let n = ids.len();
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .map_err(|e| BackendError {
                status: None,
                code: None,
                message: e.to_string(),
            })?;
        let out = self
            .client
            .delete_objects()
            .bucket(name)
            .delete(delete)
            .send()
            .await?;
        if let Some(err) = out.errors().first() {
            return Err(BackendError {
                status: None,
                code: err.code().map(str::to_owned),
                message: format!("DeleteObjects partial failure: {err:?}"),
            });
        }
        Ok(n)
    }

    /// All buckets moto holds, with their creation dates (RFC 3339).
    pub async fn list_buckets(&self) -> Result<Vec<(String, String)>, BackendError> {
        let out = self.client.list_buckets().send().await?;
        Ok(out
            .buckets()
            .iter()
            .filter_map(|b| {
                let name = b.name()?.to_owned();
                let date = b
                    .creation_date()
                    .and_then(|d| d.fmt(DateTimeFormat::DateTime).ok())
                    .unwrap_or_else(|| crate::util::rfc3339(SystemTime::now()));
                Some((name, date))
            })
            .collect())
    }

    /// `(versioningEnabled, versioningSuspended)`.
    ///
    /// Read with a plain HTTP GET: moto answers with a `<GetBucketVersioningResponse>` root
    /// element instead of S3's `<VersioningConfiguration>`, which the SDK refuses to decode.
    pub async fn get_versioning(&self, name: &str) -> Result<(bool, bool), BackendError> {
        let uri: http::Uri = format!("{}/{}?versioning", self.endpoint, name)
            .parse()
            .map_err(|e: http::uri::InvalidUri| BackendError {
                status: None,
                code: None,
                message: e.to_string(),
            })?;
        let req = http::Request::get(uri)
            .header(
                http::header::AUTHORIZATION,
                "AWS4-HMAC-SHA256 Credential=keeper-storagegrid/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0",
            )
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .expect("static request");
        let io = |e: &dyn std::fmt::Display| BackendError {
            status: None,
            code: None,
            message: e.to_string(),
        };
        let resp = self.raw.request(req).await.map_err(|e| io(&e))?;
        let status = resp.status().as_u16();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .map_err(|e| io(&e))?
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        if status != 200 {
            let code = text
                .split("<Code>")
                .nth(1)
                .and_then(|r| r.split("</Code>").next())
                .map(str::to_owned);
            return Err(BackendError {
                status: Some(status),
                code,
                message: text.into_owned(),
            });
        }
        Ok(if text.contains("<Status>Enabled</Status>") {
            (true, false)
        } else if text.contains("<Status>Suspended</Status>") {
            (false, true)
        } else {
            (false, false)
        })
    }

    /// Applies an StorageGRID `defaultRetentionSetting` (`{mode, days|years}`) as the bucket's
    /// S3 Object Lock default retention.
    pub async fn put_default_retention(
        &self,
        name: &str,
        setting: &serde_json::Value,
    ) -> Result<(), BackendError> {
        let mode = match setting.get("mode").and_then(serde_json::Value::as_str) {
            Some("governance") => ObjectLockRetentionMode::Governance,
            _ => ObjectLockRetentionMode::Compliance,
        };
        let num = |k: &str| {
            setting
                .get(k)
                .and_then(crate::util::lenient_u64)
                .map(|n| n.min(i32::MAX as u64) as i32)
        };
        let retention = DefaultRetention::builder()
            .mode(mode)
            .set_days(num("days"))
            .set_years(num("years"))
            .build();
        let conf = ObjectLockConfiguration::builder()
            .object_lock_enabled(ObjectLockEnabled::Enabled)
            .rule(
                ObjectLockRule::builder()
                    .default_retention(retention)
                    .build(),
            )
            .build();
        self.client
            .put_object_lock_configuration()
            .bucket(name)
            .object_lock_configuration(conf)
            .send()
            .await?;
        Ok(())
    }

    pub async fn put_versioning(&self, name: &str, enabled: bool) -> Result<(), BackendError> {
        let status = if enabled {
            BucketVersioningStatus::Enabled
        } else {
            BucketVersioningStatus::Suspended
        };
        self.client
            .put_bucket_versioning()
            .bucket(name)
            .versioning_configuration(VersioningConfiguration::builder().status(status).build())
            .send()
            .await?;
        Ok(())
    }
}

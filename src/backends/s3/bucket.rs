//! Bucket lifecycle: ownership lookup, creation, the ownership tag, versioning, deletion and
//! listing.

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration, Tag, Tagging,
    VersioningConfiguration,
};

use super::{OWNER_NAME_TAG, OWNER_NAMESPACE_TAG, OWNER_TAG, S3Error, S3Store, classify};
use crate::metrics::Metrics;

/// The S3Bucket that owns a bucket, as keeper marks it on the backend (tags on S3-compatible
/// stores, the bucket group's display name on StorageGRID). The uid decides; namespace and name
/// say who that is (absent on marks an older keeper wrote with the uid only).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerMark {
    pub uid: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl OwnerMark {
    pub fn new(namespace: &str, name: &str, uid: &str) -> Self {
        OwnerMark {
            uid: uid.to_string(),
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
        }
    }

    /// The same S3Bucket (by uid, which alone is unique over time).
    pub fn same_owner(&self, other: &OwnerMark) -> bool {
        self.uid == other.uid
    }

    /// Who this is, for messages: `S3Bucket ns/name (uid …)`, or the uid of an old mark.
    pub fn describe(&self) -> String {
        match (&self.namespace, &self.name) {
            (Some(namespace), Some(name)) => {
                format!("S3Bucket {namespace}/{name} (uid {})", self.uid)
            }
            _ => format!("the S3Bucket with uid {}", self.uid),
        }
    }
}

/// Who owns a bucket that exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// No bucket of that name is visible with these credentials.
    Missing,
    /// The bucket exists; keeper's ownership mark on it, if any.
    Exists { mark: Option<OwnerMark> },
}

/// keeper's mark among a bucket's tags (the uid tag decides whether there is one).
fn mark_of(tags: &[Tag]) -> Option<OwnerMark> {
    let value = |key: &str| {
        tags.iter()
            .find(|t| t.key() == key)
            .map(|t| t.value().to_string())
    };
    Some(OwnerMark {
        uid: value(OWNER_TAG)?,
        namespace: value(OWNER_NAMESPACE_TAG),
        name: value(OWNER_NAME_TAG),
    })
}

/// A bucket's versioning state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioning {
    /// Never enabled (no `Status`): every key has exactly one version and there are no delete
    /// markers.
    Never,
    Enabled,
    /// Enabled once, then suspended: older versions and delete markers may remain.
    Suspended,
}

/// The versioning state in a GetBucketVersioning answer the SDK could not decode; `None` when the
/// body is not such an answer.
pub(super) fn versioning_in(body: &str) -> Option<Versioning> {
    if !body.contains("Versioning") {
        return None;
    }
    Some(if body.contains("<Status>Enabled</Status>") {
        Versioning::Enabled
    } else if body.contains("<Status>") {
        Versioning::Suspended
    } else {
        Versioning::Never
    })
}

/// What a create attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// The name is taken (by us or by someone else): check the ownership tag.
    AlreadyExists,
}

/// What a delete attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotEmpty,
}

impl S3Store {
    /// Whether the bucket exists and, if so, keeper's ownership mark on it. One call:
    /// GetBucketTagging tells a missing bucket (`NoSuchBucket`) from an untagged one
    /// (`NoSuchTagSet`) and a tagged one, so no HeadBucket before it.
    pub async fn ownership(&self, metrics: &Metrics, bucket: &str) -> Result<Ownership, S3Error> {
        Ok(match self.tags(metrics, bucket).await? {
            None => Ownership::Missing,
            Some(tags) => Ownership::Exists {
                mark: mark_of(&tags),
            },
        })
    }

    /// The bucket's tags (none for an untagged bucket), `None` when there is no such bucket.
    async fn tags(&self, metrics: &Metrics, bucket: &str) -> Result<Option<Vec<Tag>>, S3Error> {
        self.call(metrics, "get_bucket_tagging", async {
            match self.client.get_bucket_tagging().bucket(bucket).send().await {
                Ok(out) => Ok(Some(out.tag_set().to_vec())),
                Err(e) if e.code() == Some("NoSuchTagSet") => Ok(Some(Vec::new())),
                Err(e) if e.code() == Some("NoSuchBucket") => Ok(None),
                Err(e) => Err(classify("get_bucket_tagging", e)),
            }
        })
        .await
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
        self.call(metrics, "create_bucket", async {
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

    /// Marks the bucket as owned by `owner` (uid, namespace and name tags), keeping other tags.
    pub async fn tag_owner(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
    ) -> Result<(), S3Error> {
        // A bucket gone since it was looked at: the tagging below says so (NoSuchBucket).
        let tags = self.tags(metrics, bucket).await?.unwrap_or_default();
        self.put_owner_tags(metrics, bucket, owner, tags).await
    }

    /// Marks a bucket created a moment ago by this keeper: it has no other tags to keep, so
    /// they are not read.
    pub async fn tag_new_bucket(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
    ) -> Result<(), S3Error> {
        self.put_owner_tags(metrics, bucket, owner, Vec::new())
            .await
    }

    /// Writes `tags` with keeper's mark for `owner` in place of any mark they carry.
    async fn put_owner_tags(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
        mut tags: Vec<Tag>,
    ) -> Result<(), S3Error> {
        let keys = [OWNER_TAG, OWNER_NAMESPACE_TAG, OWNER_NAME_TAG];
        tags.retain(|t| !keys.contains(&t.key()));
        let values = [
            Some(owner.uid.as_str()),
            owner.namespace.as_deref(),
            owner.name.as_deref(),
        ];
        for (key, value) in keys.into_iter().zip(values) {
            if let Some(value) = value {
                tags.push(
                    Tag::builder()
                        .key(key)
                        .value(value)
                        .build()
                        .expect("key and value are set"),
                );
            }
        }
        let tagging = Tagging::builder()
            .set_tag_set(Some(tags))
            .build()
            .expect("tag set is set");
        self.call(metrics, "put_bucket_tagging", async {
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
        self.call(metrics, "put_bucket_versioning", async {
            self.client
                .put_bucket_versioning()
                .bucket(bucket)
                .versioning_configuration(VersioningConfiguration::builder().status(status).build())
                .send()
                .await
                .map_err(|e| classify("put_bucket_versioning", e))
        })
        .await?;
        Ok(())
    }

    /// The bucket's versioning state (GetBucketVersioning). Some stores (moto) name the answer's
    /// root element differently, which the SDK refuses to decode: their `Status` element is read
    /// from the raw answer instead.
    pub async fn versioning(&self, metrics: &Metrics, bucket: &str) -> Result<Versioning, S3Error> {
        self.call(metrics, "get_bucket_versioning", async {
            match self
                .client
                .get_bucket_versioning()
                .bucket(bucket)
                .send()
                .await
            {
                Ok(out) => Ok(match out.status() {
                    None => Versioning::Never,
                    Some(BucketVersioningStatus::Enabled) => Versioning::Enabled,
                    Some(_) => Versioning::Suspended,
                }),
                Err(e) => {
                    let answered = e
                        .raw_response()
                        .filter(|raw| raw.status().is_success())
                        .and_then(|raw| raw.body().bytes())
                        .and_then(|body| versioning_in(&String::from_utf8_lossy(body)));
                    answered.ok_or_else(|| classify("get_bucket_versioning", e))
                }
            }
        })
        .await
    }

    /// Deletes the (empty) bucket. A bucket already gone counts as deleted.
    pub async fn delete_bucket(
        &self,
        metrics: &Metrics,
        bucket: &str,
    ) -> Result<DeleteOutcome, S3Error> {
        self.call(metrics, "delete_bucket", async {
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
        self.call(metrics, "list_buckets", async {
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

    /// The canonical id of the owner of the signing keys' buckets (ListBuckets' `Owner.ID`): with
    /// the endpoint, what tells one store (or AWS account) from another (see
    /// [`crate::backends::identity`]). A store that names no owner is an error: nothing could
    /// then tell it from another one.
    pub async fn owner_id(&self, metrics: &Metrics) -> Result<String, S3Error> {
        self.call(metrics, "list_buckets", async {
            match self.client.list_buckets().max_buckets(1).send().await {
                Ok(out) => out
                    .owner()
                    .and_then(|o| o.id())
                    .filter(|id| !id.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| S3Error {
                        operation: "list_buckets",
                        class: super::ErrorClass::Permanent,
                        code: "NoOwner".into(),
                        message: "ListBuckets names no owner: keeper cannot tell this store \
                                      from another"
                            .into(),
                    }),
                Err(e) => Err(classify("list_buckets", e)),
            }
        })
        .await
    }
}

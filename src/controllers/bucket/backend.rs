//! What the bucket state machines need from a storage backend, behind one small trait so that
//! the controller logic is tested against an in-memory fake; and its S3-compatible implementation.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::api::DrainMode;
use crate::backends::s3::{self, CreateOutcome, DeleteOutcome, ErrorClass, S3Error, S3Store};
use crate::metrics::Metrics;

/// The bucket a resource asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredBucket {
    pub name: String,
    pub region: String,
    pub versioning: bool,
    pub object_lock: bool,
    /// uid of the S3Bucket: the ownership mark.
    pub owner_uid: String,
    /// `status.bucketName` records that keeper created this bucket (for backends without tags).
    pub recorded: bool,
    /// Annotation `keeper.dev/adopt=true`: take over an existing bucket not created by keeper.
    pub adopt: bool,
}

/// Whose bucket it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Missing,
    Us,
    /// Exists and was not created by this resource; the message says what was found.
    Someone(String),
}

/// Objects in a bucket and whether the backend itself is deleting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observed {
    pub objects: i64,
    pub bytes: i64,
    /// A server-side drain is running on the backend.
    pub backend_draining: bool,
}

/// What one round of a client-side drain did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainProgress {
    pub deleted: u64,
    pub empty: bool,
    /// Object lock or a legal hold stops the drain; the message names the object.
    pub blocked: Option<String>,
}

/// Credentials published in `<name>-credentials`.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// What to publish after a credentials check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPlan {
    /// The published keys stay.
    Keep,
    /// Publish these; once published, retire the old access key (if any).
    Publish { keys: Keys, retire: Option<String> },
}

/// A backend error: transient ones are retried with backoff, permanent ones shown as `Failed`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    pub transient: bool,
    pub message: String,
}

impl From<S3Error> for BackendError {
    fn from(e: S3Error) -> Self {
        BackendError {
            transient: e.class == ErrorClass::Transient,
            message: e.to_string(),
        }
    }
}

/// Operations on one tenant's buckets.
pub trait BucketBackend: Send + Sync {
    /// Who deletes objects during a drain.
    fn drain_mode(&self) -> DrainMode;

    /// Whose bucket `desired.name` is.
    fn owner(
        &self,
        desired: &DesiredBucket,
    ) -> impl Future<Output = Result<Owner, BackendError>> + Send;

    /// Creates the bucket (or converges an existing one of ours, or adopts one when asked):
    /// versioning, object lock and the ownership mark. Returns who owns it afterwards: `Someone`
    /// means it exists, is not ours and was left alone.
    fn ensure(
        &self,
        desired: &DesiredBucket,
    ) -> impl Future<Output = Result<Owner, BackendError>> + Send;

    /// Usage and drain state; `None` when the bucket does not exist.
    fn observe(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<Option<Observed>, BackendError>> + Send;

    /// Tells the backend to start deleting every object (server-side drains).
    fn start_drain(&self, bucket: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Tells the backend to stop deleting objects (server-side drains).
    fn stop_drain(&self, bucket: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Deletes objects for a while (client-side drains).
    fn drain_round(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<DrainProgress, BackendError>> + Send;

    /// Deletes the bucket; already gone counts as deleted.
    fn delete(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<DeleteOutcome, BackendError>> + Send;

    /// Decides which keys the bucket's Secret carries. `published` are the keys in it now.
    fn keys(
        &self,
        bucket: &str,
        published: Option<&Keys>,
        rotate: bool,
    ) -> impl Future<Output = Result<KeyPlan, BackendError>> + Send;

    /// Deletes an access key once its replacement is published.
    fn retire_key(
        &self,
        bucket: &str,
        access_key_id: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Deletes the bucket's own credentials (user, group, keys) when the bucket goes.
    fn delete_credentials(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Listing more than this many versions to compute usage is left for the next refresh.
const USAGE_LISTING_BOUND: i64 = 100_000;
/// How long one reconcile deletes objects before it reports and yields its worker.
const DRAIN_ROUND_BUDGET: Duration = Duration::from_secs(20);
const DEFAULT_MAX_DELETES_PER_SECOND: u32 = 1000;

/// A tenant on an S3-compatible store: keeper drains client-side and, lacking a portable user
/// API, publishes the tenant's own keys for each bucket.
pub struct S3Compatible {
    pub store: S3Store,
    pub metrics: Arc<Metrics>,
    pub tenant_keys: Keys,
    pub max_deletes_per_second: Option<u32>,
}

impl BucketBackend for S3Compatible {
    fn drain_mode(&self) -> DrainMode {
        DrainMode::ClientSide
    }

    async fn owner(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
        Ok(
            match self.store.ownership(&self.metrics, &desired.name).await? {
                s3::Ownership::Missing => Owner::Missing,
                s3::Ownership::Exists {
                    owner_uid: Some(uid),
                } if uid == desired.owner_uid => Owner::Us,
                s3::Ownership::Exists {
                    owner_uid: Some(uid),
                } => Owner::Someone(format!(
                    "bucket {:?} exists and is tagged {}={uid}, another resource",
                    desired.name,
                    s3::OWNER_TAG
                )),
                s3::Ownership::Exists { owner_uid: None } => Owner::Someone(format!(
                    "bucket {:?} exists and was not created by keeper (no {} tag)",
                    desired.name,
                    s3::OWNER_TAG
                )),
            },
        )
    }

    async fn ensure(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
        let metrics = &self.metrics;
        let mut owner = self.owner(desired).await?;
        let mut created = false;
        if owner == Owner::Missing {
            match self
                .store
                .create_bucket(metrics, &desired.name, &desired.region, desired.object_lock)
                .await?
            {
                CreateOutcome::Created => {
                    // Mark it at once: the window in which a crash leaves an unmarked bucket is
                    // this one call.
                    self.store
                        .tag_owner(metrics, &desired.name, &desired.owner_uid)
                        .await?;
                    created = true;
                    owner = Owner::Us;
                }
                // Someone created it between our check and our create.
                CreateOutcome::AlreadyExists => owner = self.owner(desired).await?,
            }
        }
        if let Owner::Someone(_) = &owner
            && desired.adopt
        {
            self.store
                .tag_owner(metrics, &desired.name, &desired.owner_uid)
                .await?;
            owner = Owner::Us;
        }
        if owner != Owner::Us {
            return Ok(owner);
        }
        // Object lock implies versioning; a new bucket without versioning needs no call.
        let versioning = desired.versioning || desired.object_lock;
        if versioning || !created {
            self.store
                .set_versioning(metrics, &desired.name, versioning)
                .await?;
        }
        Ok(Owner::Us)
    }

    async fn observe(&self, bucket: &str) -> Result<Option<Observed>, BackendError> {
        Ok(self
            .store
            .usage(&self.metrics, bucket, USAGE_LISTING_BOUND)
            .await?
            .map(|u| Observed {
                objects: u.objects,
                bytes: u.bytes,
                backend_draining: false,
            }))
    }

    // keeper itself deletes the objects: there is no backend drain to start or stop.
    async fn start_drain(&self, _bucket: &str) -> Result<(), BackendError> {
        Ok(())
    }

    async fn stop_drain(&self, _bucket: &str) -> Result<(), BackendError> {
        Ok(())
    }

    async fn drain_round(&self, bucket: &str) -> Result<DrainProgress, BackendError> {
        let round = self
            .store
            .drain_round(
                &self.metrics,
                bucket,
                DRAIN_ROUND_BUDGET,
                self.max_deletes_per_second
                    .unwrap_or(DEFAULT_MAX_DELETES_PER_SECOND),
            )
            .await?;
        if round.blocked.is_none() && round.deleted == 0 && !round.empty {
            // Every key of the batch failed for a reason other than a lock: retry with backoff.
            return Err(BackendError {
                transient: true,
                message: format!(
                    "DeleteObjects deleted nothing; first failure: {}",
                    round.failed.first().map_or("", String::as_str)
                ),
            });
        }
        Ok(DrainProgress {
            deleted: round.deleted,
            empty: round.empty,
            blocked: round.blocked,
        })
    }

    async fn delete(&self, bucket: &str) -> Result<DeleteOutcome, BackendError> {
        Ok(self.store.delete_bucket(&self.metrics, bucket).await?)
    }

    async fn keys(
        &self,
        _bucket: &str,
        published: Option<&Keys>,
        _rotate: bool,
    ) -> Result<KeyPlan, BackendError> {
        // The tenant's keys are the only keys: "rotation" republishes them (the tenant's keys
        // rotate with the tenant).
        Ok(if published == Some(&self.tenant_keys) {
            KeyPlan::Keep
        } else {
            KeyPlan::Publish {
                keys: self.tenant_keys.clone(),
                retire: None,
            }
        })
    }

    // The tenant's keys belong to the tenant: nothing of the bucket's own to delete.
    async fn retire_key(&self, _bucket: &str, _access_key_id: &str) -> Result<(), BackendError> {
        Ok(())
    }

    async fn delete_credentials(&self, _bucket: &str) -> Result<(), BackendError> {
        Ok(())
    }
}

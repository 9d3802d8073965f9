//! What the bucket state machines need from a storage backend, behind one small trait so that
//! the controller logic is tested against an in-memory fake; and its S3-compatible implementation.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::api::DrainMode;
use crate::backends::s3::{self, CreateOutcome, DeleteOutcome, ErrorClass, S3Error, S3Store};
use crate::backends::storagegrid;
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

impl From<storagegrid::Error> for BackendError {
    fn from(e: storagegrid::Error) -> Self {
        BackendError {
            transient: !e.is_permanent(),
            message: e.to_string(),
        }
    }
}

/// A tenant on StorageGRID, managed as the tenant's root user: the grid drains server-side,
/// and each bucket gets its own group (S3 policy on this bucket only), user and access keys.
///
/// Ownership: the container API has no tags, so the bucket's group is created *before* the
/// bucket and carries the S3Bucket's uid in its display name; a bucket counts as ours when its
/// group carries our uid (or `status.bucketName` records that we created it).
pub struct StorageGrid {
    pub client: storagegrid::Client,
    pub tenant: storagegrid::Login,
}

/// Short name of the group and the user of a bucket (`group/keeper-<bucket>`, `user/keeper-<bucket>`).
fn principal_name(bucket: &str) -> String {
    format!("keeper-{bucket}")
}

fn owner_marker(uid: &str) -> String {
    format!("owner-uid={uid}")
}

/// `Ok(None)` for a 404, so callers can treat "not there" as a state.
fn found<T>(result: Result<T, storagegrid::Error>) -> Result<Option<T>, storagegrid::Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The group of a bucket: access to this bucket and its objects only, no management rights.
fn bucket_group(bucket: &str, owner_uid: &str) -> storagegrid::NewGroup {
    storagegrid::NewGroup {
        unique_name: format!("group/{}", principal_name(bucket)),
        display_name: format!("keeper bucket {bucket} {}", owner_marker(owner_uid)),
        management_read_only: false,
        policies: storagegrid::GroupPolicies {
            management: storagegrid::ManagementPolicy::default(),
            s3: Some(serde_json::json!({
                "Statement": [{
                    "Effect": "Allow",
                    "Action": ["s3:*"],
                    "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")],
                }]
            })),
        },
    }
}

impl StorageGrid {
    async fn container(
        &self,
        bucket: &str,
    ) -> Result<Option<storagegrid::Container>, BackendError> {
        Ok(self
            .client
            .list_containers(&self.tenant)
            .await?
            .into_iter()
            .find(|c| c.name == bucket))
    }

    async fn group(&self, bucket: &str) -> Result<Option<storagegrid::Group>, BackendError> {
        Ok(found(
            self.client
                .get_group_by_name(&self.tenant, &principal_name(bucket))
                .await,
        )?)
    }

    /// Creates the bucket's group, or points an existing one at this owner.
    async fn mark(&self, desired: &DesiredBucket) -> Result<storagegrid::Group, BackendError> {
        let wanted = bucket_group(&desired.name, &desired.owner_uid);
        Ok(match self.group(&desired.name).await? {
            Some(group)
                if group.display_name.as_deref() == Some(wanted.display_name.as_str())
                    && group.policies.as_ref() == Some(&wanted.policies) =>
            {
                group
            }
            Some(group) => {
                self.client
                    .update_group(&self.tenant, &group.id, &wanted)
                    .await?
            }
            None => self.client.create_group(&self.tenant, &wanted).await?,
        })
    }

    fn marked_by(group: Option<&storagegrid::Group>, uid: &str) -> bool {
        group
            .and_then(|g| g.display_name.as_deref())
            .is_some_and(|name| name.ends_with(&owner_marker(uid)))
    }

    /// The bucket's user, created in its group when missing.
    async fn user(
        &self,
        bucket: &str,
        group: &storagegrid::Group,
    ) -> Result<storagegrid::User, BackendError> {
        let name = principal_name(bucket);
        if let Some(user) = found(self.client.get_user_by_name(&self.tenant, &name).await)? {
            return Ok(user);
        }
        Ok(self
            .client
            .create_user(
                &self.tenant,
                &storagegrid::NewUser {
                    unique_name: format!("user/{name}"),
                    full_name: format!("keeper bucket {bucket}"),
                    member_of: vec![group.id.clone()],
                    disable: false,
                },
            )
            .await?)
    }
}

impl BucketBackend for StorageGrid {
    fn drain_mode(&self) -> DrainMode {
        DrainMode::ServerSide
    }

    async fn owner(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
        if self.container(&desired.name).await?.is_none() {
            return Ok(Owner::Missing);
        }
        let group = self.group(&desired.name).await?;
        Ok(
            if desired.recorded || Self::marked_by(group.as_ref(), &desired.owner_uid) {
                Owner::Us
            } else {
                Owner::Someone(format!(
                    "bucket {:?} exists in the tenant and was not created by this resource",
                    desired.name
                ))
            },
        )
    }

    async fn ensure(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
        let mut owner = self.owner(desired).await?;
        if owner == Owner::Missing {
            // The mark goes first, so a crash right after the create still finds the bucket ours.
            self.mark(desired).await?;
            let created = self
                .client
                .create_container(
                    &self.tenant,
                    &storagegrid::NewContainer {
                        name: desired.name.clone(),
                        region: Some(desired.region.clone()),
                        versioning: desired.versioning || desired.object_lock,
                        object_lock: desired.object_lock,
                    },
                )
                .await;
            match created {
                Ok(()) => return Ok(Owner::Us),
                // Bucket names are unique across the grid: another tenant may hold it.
                Err(e) if e.is_conflict() => {
                    if self.container(&desired.name).await?.is_none() {
                        return Ok(Owner::Someone(format!(
                            "bucket name {:?} is taken by another tenant of the grid",
                            desired.name
                        )));
                    }
                    owner = self.owner(desired).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if let Owner::Someone(_) = &owner
            && !desired.adopt
        {
            return Ok(owner);
        }
        // Ours (or adopted on request): keep the mark and the policy current.
        self.mark(desired).await?;
        self.client
            .set_versioning(
                &self.tenant,
                &desired.name,
                desired.versioning || desired.object_lock,
            )
            .await?;
        Ok(Owner::Us)
    }

    async fn observe(&self, bucket: &str) -> Result<Option<Observed>, BackendError> {
        let Some(container) = self.container(bucket).await? else {
            return Ok(None);
        };
        let usage = self.client.tenant_usage(&self.tenant).await?;
        // A new bucket may be missing from usage for a while: it holds nothing yet.
        let (objects, bytes) = usage
            .buckets
            .iter()
            .find(|b| b.name == bucket)
            .map_or((0, 0), |b| (b.object_count, b.data_bytes));
        Ok(Some(Observed {
            objects: i64::try_from(objects).unwrap_or(i64::MAX),
            bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
            backend_draining: container
                .delete_object_status
                .is_some_and(|s| s.is_deleting_objects),
        }))
    }

    async fn start_drain(&self, bucket: &str) -> Result<(), BackendError> {
        self.client.set_drain(&self.tenant, bucket, true).await?;
        Ok(())
    }

    async fn stop_drain(&self, bucket: &str) -> Result<(), BackendError> {
        match self.client.set_drain(&self.tenant, bucket, false).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The grid deletes the objects itself: keeper has nothing to delete between polls.
    async fn drain_round(&self, _bucket: &str) -> Result<DrainProgress, BackendError> {
        Ok(DrainProgress::default())
    }

    async fn delete(&self, bucket: &str) -> Result<DeleteOutcome, BackendError> {
        match self.client.delete_container(&self.tenant, bucket).await {
            Ok(()) => Ok(DeleteOutcome::Deleted),
            Err(e) if e.is_not_found() => Ok(DeleteOutcome::Deleted),
            Err(e) if e.is_conflict() => Ok(DeleteOutcome::NotEmpty),
            Err(e) => Err(e.into()),
        }
    }

    async fn keys(
        &self,
        bucket: &str,
        published: Option<&Keys>,
        rotate: bool,
    ) -> Result<KeyPlan, BackendError> {
        if published.is_some() && !rotate {
            return Ok(KeyPlan::Keep);
        }
        let Some(group) = self.group(bucket).await? else {
            return Err(BackendError {
                transient: true,
                message: format!(
                    "the group of bucket {bucket:?} is missing; it is recreated on the next convergence"
                ),
            });
        };
        let user = self.user(bucket, &group).await?;
        let key = self
            .client
            .create_access_key(&self.tenant, storagegrid::KeyOwner::User(&user.id))
            .await?;
        let keys = Keys {
            access_key_id: key.access_key.unwrap_or_default(),
            secret_access_key: key.secret_access_key.map(|s| s.0).unwrap_or_default(),
        };
        Ok(KeyPlan::Publish {
            keys,
            retire: published.map(|p| p.access_key_id.clone()),
        })
    }

    async fn retire_key(&self, bucket: &str, access_key_id: &str) -> Result<(), BackendError> {
        let name = principal_name(bucket);
        let Some(user) = found(self.client.get_user_by_name(&self.tenant, &name).await)? else {
            return Ok(());
        };
        found(
            self.client
                .delete_access_key(
                    &self.tenant,
                    storagegrid::KeyOwner::User(&user.id),
                    access_key_id,
                )
                .await,
        )?;
        Ok(())
    }

    async fn delete_credentials(&self, bucket: &str) -> Result<(), BackendError> {
        let name = principal_name(bucket);
        if let Some(user) = found(self.client.get_user_by_name(&self.tenant, &name).await)? {
            let owner = storagegrid::KeyOwner::User(&user.id);
            for key in self.client.list_access_keys(&self.tenant, owner).await? {
                found(
                    self.client
                        .delete_access_key(&self.tenant, owner, &key.id)
                        .await,
                )?;
            }
            found(self.client.delete_user(&self.tenant, &user.id).await)?;
        }
        if let Some(group) = self.group(bucket).await? {
            found(self.client.delete_group(&self.tenant, &group.id).await)?;
        }
        Ok(())
    }
}

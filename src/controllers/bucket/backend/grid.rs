//! A tenant on StorageGRID, through the grid's management API.

mod principals;

use std::sync::Arc;
use std::time::Duration;

use self::principals::{LastLook, found};
use super::shared::Shared;
use super::{
    BucketBackend, DesiredBucket, DrainProgress, Ensured, KeyCheck, Observed, Owner, Purpose,
};
use crate::api::DrainMode;
use crate::backends::Keys;
use crate::backends::s3::DeleteOutcome;
use crate::backends::storagegrid;
use crate::controllers::bucket::plan::keys::KeySource;
use crate::error::{BackendError, ErrorClass};

/// A tenant on StorageGRID, managed as the tenant's root user: the grid drains server-side,
/// and each bucket gets its own group (S3 policy on this bucket only), user and access keys.
///
/// Ownership: the container API has no tags, so the bucket's group is created *before* the
/// bucket and carries the owning S3Bucket (namespace, name, uid) in its display name; a bucket
/// counts as ours when its group carries our uid (or, with no mark at all, when
/// `status.bucketName` records that we created it), and as another S3Bucket's when its group
/// carries another uid.
pub struct StorageGrid {
    pub client: storagegrid::Client,
    pub tenant: storagegrid::Login,
    /// What the tenant's idle buckets share.
    pub looks: Arc<TenantLooks>,
    pub ttl: LookTtl,
    /// The bucket's group and user as this backend last read or wrote them.
    group: LastLook<storagegrid::Group>,
    user: LastLook<storagegrid::User>,
}

/// The tenant-wide answers the idle looks of a tenant's buckets share: its container listing
/// (existence, the grid's own drains) and its usage (every bucket's objects and bytes).
#[derive(Default)]
pub struct TenantLooks {
    containers: Shared<Vec<storagegrid::Container>>,
    usage: Shared<storagegrid::Usage>,
}

/// How long the shared answers serve: the provider's `usageRefresh.interval` for usage (and the
/// listing that goes with it), its `bucketCheckInterval` for an existence look.
#[derive(Debug, Clone, Copy)]
pub struct LookTtl {
    pub usage: Option<Duration>,
    pub check: Duration,
}

/// The grid's server-side drain: the bucket's "delete objects" setting is on.
fn is_deleting_objects(container: &storagegrid::Container) -> bool {
    container
        .delete_object_status
        .as_ref()
        .is_some_and(|s| s.is_deleting_objects)
}

impl StorageGrid {
    pub fn new(
        client: storagegrid::Client,
        tenant: storagegrid::Login,
        looks: Arc<TenantLooks>,
        ttl: LookTtl,
    ) -> Self {
        StorageGrid {
            client,
            tenant,
            looks,
            ttl,
            group: LastLook::default(),
            user: LastLook::default(),
        }
    }

    /// The bucket's container from the tenant's shared listing (at most `ttl` old, fetched anew
    /// when it does not hold the bucket).
    async fn shared_container(
        &self,
        bucket: &str,
        ttl: Duration,
    ) -> Result<Option<storagegrid::Container>, BackendError> {
        let listed = self
            .looks
            .containers
            .get(
                ttl,
                |listed| listed.iter().any(|c| c.name == bucket),
                || self.client.list_containers(&self.tenant),
            )
            .await?;
        Ok(listed.iter().find(|c| c.name == bucket).cloned())
    }

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
}

impl BucketBackend for StorageGrid {
    /// The tenant pins the grid: its account is found only on the grid it was recorded on.
    async fn identity(&self) -> Result<Option<String>, BackendError> {
        Ok(None)
    }

    fn drain_mode(&self) -> DrainMode {
        DrainMode::ServerSide
    }

    async fn owner(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
        Ok(self.looked_owner(desired).await?.0)
    }

    async fn ensure(&self, desired: &DesiredBucket) -> Result<Ensured, BackendError> {
        let (mut owner, mut group) = self.looked_owner(desired).await?;
        if owner == Owner::Missing {
            // A group another S3Bucket left behind (its bucket is gone) keeps its user and that
            // user's keys: it is not taken over for a new bucket of the same name.
            let left = self.group(&desired.name).await?;
            if let Some(taken) = Self::taken(desired, left.as_ref()) {
                return Ok(Ensured::found(taken));
            }
            // The mark goes first, so a crash right after the create still finds the bucket ours.
            self.mark(desired, left).await?;
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
                Ok(()) => {
                    return Ok(Ensured {
                        owner: Owner::Us,
                        created: true,
                    });
                }
                // Bucket names are unique across the grid: another tenant may hold it.
                Err(e) if e.is_conflict() => {
                    if self.container(&desired.name).await?.is_none() {
                        return Ok(Ensured::found(Owner::Taken(format!(
                            "bucket name {:?} is taken by another tenant of the grid",
                            desired.name
                        ))));
                    }
                    (owner, group) = self.looked_owner(desired).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let adopted = matches!(owner, Owner::Unmarked(_)) && desired.adopt;
        if owner != Owner::Us && !adopted {
            return Ok(Ensured::found(owner));
        }
        // Ours (or adopted on request): keep the mark and the policy current.
        self.mark(desired, group).await?;
        // Versioning is turned on when asked, and never suspended on adoption (F18).
        let versioning = desired.versioning || desired.object_lock;
        if versioning || !adopted {
            self.client
                .set_versioning(&self.tenant, &desired.name, versioning)
                .await?;
        }
        Ok(Ensured::found(Owner::Us))
    }

    // The grid counts (its usage API) and deletes by itself: a drain's count and a poll are the
    // same observation; an idle bucket's refresh shares the tenant's listing and usage.
    async fn observe(
        &self,
        bucket: &str,
        purpose: Purpose,
    ) -> Result<Option<Observed>, BackendError> {
        let (container, usage) = match (purpose, self.ttl.usage) {
            (Purpose::Refresh, Some(ttl)) => {
                let Some(container) = self.shared_container(bucket, ttl).await? else {
                    return Ok(None);
                };
                let usage = self
                    .looks
                    .usage
                    .get(
                        ttl,
                        |usage| usage.buckets.iter().any(|b| b.name == bucket),
                        || self.client.tenant_usage(&self.tenant),
                    )
                    .await?;
                (container, usage)
            }
            _ => {
                let Some(container) = self.container(bucket).await? else {
                    return Ok(None);
                };
                (
                    container,
                    Arc::new(self.client.tenant_usage(&self.tenant).await?),
                )
            }
        };
        // A new bucket may be missing from usage for a while: it holds nothing yet.
        let (objects, bytes) = usage
            .buckets
            .iter()
            .find(|b| b.name == bucket)
            .map_or((0, 0), |b| (b.object_count, b.data_bytes));
        Ok(Some(Observed {
            objects: i64::try_from(objects).unwrap_or(i64::MAX),
            bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
            backend_draining: is_deleting_objects(&container),
        }))
    }

    async fn existence(&self, bucket: &str) -> Result<Option<bool>, BackendError> {
        Ok(self
            .shared_container(bucket, self.ttl.check)
            .await?
            .map(|c| is_deleting_objects(&c)))
    }

    async fn drain_running(&self, bucket: &str) -> Result<bool, BackendError> {
        Ok(self
            .container(bucket)
            .await?
            .is_some_and(|c| is_deleting_objects(&c)))
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
    async fn drain_round(&self, _desired: &DesiredBucket) -> Result<DrainProgress, BackendError> {
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

    fn key_source(&self) -> KeySource {
        KeySource::BucketUser {
            limit: None,
            foreign: None,
        }
    }

    async fn user_keys(
        &self,
        bucket: &str,
        published: Option<&str>,
    ) -> Result<Vec<String>, BackendError> {
        let Some(group) = self.group.known(bucket, self.read_group(bucket)).await? else {
            return Err(BackendError::new(
                "storagegrid",
                "get_group",
                ErrorClass::Transient,
                "GroupMissing",
                format!(
                    "the group of bucket {bucket:?} is missing; it is recreated on the next convergence"
                ),
            ));
        };
        let user = self.user(bucket, &group).await?;
        let owner = storagegrid::KeyOwner::User(&user.id);
        // A listing names keys by their credential id; the Secret carries the access key id,
        // which the grid resolves to the credential id.
        let published_key = match published {
            Some(access_key) => found(
                self.client
                    .get_access_key(&self.tenant, owner, access_key)
                    .await,
            )?,
            None => None,
        };
        let listed = self.client.list_access_keys(&self.tenant, owner).await?;
        Ok(listed
            .into_iter()
            .map(|key| match (&published_key, published) {
                (Some(p), Some(access_key)) if p.id == key.id => access_key.to_string(),
                _ => key.id,
            })
            .collect())
    }

    async fn create_key(&self, bucket: &str) -> Result<Keys, BackendError> {
        let user_missing = |operation| {
            BackendError::new(
                "storagegrid",
                operation,
                ErrorClass::Transient,
                "UserMissing",
                format!(
                    "the user of bucket {bucket:?} is gone; it is created again on the next look"
                ),
            )
        };
        // Listed (and so created) by the same reconcile a moment ago.
        let user = self
            .user
            .known(bucket, self.read_user(bucket))
            .await?
            .ok_or_else(|| user_missing("get_user"))?;
        let created = self
            .client
            .create_access_key(&self.tenant, storagegrid::KeyOwner::User(&user.id))
            .await;
        let key = match created {
            Ok(key) => key,
            // Deleted since the listing (by hand, or by another writer's cleanup).
            Err(e) if e.is_not_found() => {
                self.user.keep(None);
                return Err(user_missing("create_access_key"));
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Keys {
            access_key_id: key.access_key.unwrap_or_default(),
            secret_access_key: key.secret_access_key.map(|s| s.0).unwrap_or_default(),
        })
    }

    async fn delete_key(&self, bucket: &str, id: &str) -> Result<(), BackendError> {
        let Some(user) = self.user.known(bucket, self.read_user(bucket)).await? else {
            return Ok(());
        };
        found(
            self.client
                .delete_access_key(&self.tenant, storagegrid::KeyOwner::User(&user.id), id)
                .await,
        )?;
        Ok(())
    }

    // The user is looked up by name first anyway, and its keys listed with it.
    async fn delete_credentials(
        &self,
        desired: &DesiredBucket,
        _only_key: Option<&str>,
    ) -> Result<Option<String>, BackendError> {
        let bucket = &desired.name;
        // A group and user another S3Bucket made under this name (for its bucket, made after this
        // one's went) are that S3Bucket's, and so are their keys.
        let whose = |group: Option<&storagegrid::Group>| match Self::taken(desired, group) {
            Some(Owner::Taken(why)) => Some(format!(
                "{why}: the group and user named after the bucket and their keys were left alone"
            )),
            _ => None,
        };
        // The group the deletion's ownership check found, when it found one; a bucket found
        // missing was not checked, and its group is read now.
        let group = self.group.known(bucket, self.read_group(bucket)).await?;
        if let Some(why) = whose(group.as_ref()) {
            return Ok(Some(why));
        }
        let user = self.find_user(bucket).await?;
        let group = match group {
            // A user in a group that was not there a moment ago: its group may have been made
            // since, by another S3Bucket.
            None if user.as_ref().is_some_and(|u| !u.member_of.is_empty()) => {
                let group = self.group(bucket).await?;
                if let Some(why) = whose(group.as_ref()) {
                    return Ok(Some(why));
                }
                group
            }
            group => group,
        };
        if let Some(user) = user {
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
        if let Some(group) = group {
            found(self.client.delete_group(&self.tenant, &group.id).await)?;
        }
        Ok(None)
    }

    // The grid's key is in force once the create call returns (one system, no propagation).
    async fn check_keys(&self, _bucket: &str, _keys: &Keys) -> Result<KeyCheck, BackendError> {
        Ok(KeyCheck::Works)
    }
}

#[cfg(test)]
mod tests;

//! Per-bucket IAM users on S3-compatible providers with an IAM API (AWS S3, Ceph RGW): each
//! bucket gets a user of its own (found or created by a deterministic name, tagged with the
//! bucket and its tenant, an inline policy on that bucket only) whose keys the bucket's Secret
//! carries. Which keys to create and delete, and when, is decided in [`plan`] and performed by the
//! reconcile; the IAM and S3 calls sit behind [`Identity`] so that they are tested against an
//! in-memory fake.

use std::future::Future;
use std::sync::Arc;

use super::KeyCheck;
use crate::backends::Keys;
use crate::backends::iam::IamStore;
use crate::backends::s3::{Access, S3Store};
use crate::controllers::bucket::plan::keys as plan;
use crate::error::BackendError;
use crate::metrics::Metrics;

/// Tag on a bucket's IAM user naming the bucket.
pub const BUCKET_TAG: &str = "keeper.dev/bucket";
/// Tag on a bucket's IAM user naming its tenant (`namespace/name`).
pub const TENANT_TAG: &str = "keeper.dev/tenant";

/// What per-bucket users need from the provider: its IAM API, and a check of a key set against
/// a bucket.
pub trait Identity: Send + Sync {
    /// Creates the user (path [`plan::USER_PATH`]) with `tags`; an existing user is left as it is.
    /// Whether this call created it.
    fn create_user(
        &self,
        user: &str,
        tags: &[(&str, &str)],
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Sets the user's inline policy to `document`.
    fn put_policy(
        &self,
        user: &str,
        document: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The user's inline policy document as stored; `None` when the user or the policy does not
    /// exist.
    fn policy(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;

    /// The user's access key ids (none when there is no such user).
    fn access_keys(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;

    /// The user's access key ids; `None` when there is no such user (one read that says both).
    fn existing_keys(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Option<Vec<String>>, BackendError>> + Send;

    fn create_access_key(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Keys, BackendError>> + Send;

    /// Deletes a key; already gone counts as deleted.
    fn delete_access_key(
        &self,
        user: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Deletes the user and its policies (its keys are deleted first); already gone counts as
    /// deleted.
    fn delete_user(&self, user: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Whether `keys` may list `bucket`.
    fn access(
        &self,
        keys: &Keys,
        bucket: &str,
    ) -> impl Future<Output = Result<Access, BackendError>> + Send;
}

/// The per-bucket users of one tenant on one provider.
pub struct BucketUsers<I> {
    pub identity: I,
    /// The provider's own access key id: a Secret carrying it was published before per-bucket
    /// users (a bucket created by an older keeper) and gets the bucket's own keys instead.
    pub admin_key_id: String,
    /// `namespace/name` of the tenant, tagged on the users.
    pub tenant: String,
    /// The AWS partition of the provider's region, for the policy's ARNs ([`plan::partition`]).
    pub partition: &'static str,
}

impl<I: Identity> BucketUsers<I> {
    /// IAM's limit on access keys per user.
    pub const KEY_LIMIT: usize = 2;

    /// The user's access key ids, the user found or created (tagged, with its policy).
    /// `published`: the id of the user's key the bucket's Secret carries, if any.
    ///
    /// Which comes first, the look or the create, is [`plan::user_look`]'s: a bucket whose Secret
    /// carries a key of its user (every settled bucket, at every restart) is looked up with reads
    /// only, and its policy written only when it differs; any other bucket's user is created
    /// first. Either order lists every key another writer may have created and not published yet
    /// (see [`plan::KeySteps`]), after the Secret was read: a user found by the look is listed by
    /// that look; a user not found is created as below, and one found by the create
    /// (`EntityAlreadyExists`: another writer created it since the look) is listed after it.
    pub async fn user_keys(
        &self,
        bucket: &str,
        published: Option<&str>,
    ) -> Result<Vec<String>, BackendError> {
        let user = plan::user_name(bucket);
        let policy = plan::bucket_policy(bucket, self.partition);
        if plan::user_look(published) == plan::UserLook::LookFirst
            && let Some(keys) = self.identity.existing_keys(&user).await?
        {
            let stored = match self.identity.policy(&user).await {
                Ok(stored) => stored,
                // Keys whose IAM rights predate this read (no `iam:GetUserPolicy`): the policy is
                // written as before, which those rights allow.
                Err(e) if e.is_permanent() => None,
                Err(e) => return Err(e),
            };
            if !plan::policy_in_force(stored.as_deref(), &policy) {
                self.identity.put_policy(&user, &policy).await?;
            }
            return Ok(keys);
        }
        let created = self
            .identity
            .create_user(&user, &[(BUCKET_TAG, bucket), (TENANT_TAG, &self.tenant)])
            .await?;
        self.identity.put_policy(&user, &policy).await?;
        if created {
            // A user this call created has no keys: nothing to list. A key another writer
            // issues for it meanwhile is found by whichever of the two loses the Secret's
            // compare-and-swap, which lists again on its retry.
            return Ok(Vec::new());
        }
        self.identity.access_keys(&user).await
    }

    pub async fn create_key(&self, bucket: &str) -> Result<Keys, BackendError> {
        self.identity
            .create_access_key(&plan::user_name(bucket))
            .await
    }

    pub async fn delete_key(&self, bucket: &str, access_key_id: &str) -> Result<(), BackendError> {
        self.identity
            .delete_access_key(&plan::user_name(bucket), access_key_id)
            .await
    }

    /// Deletes the bucket's keys, policy and user. `only_key_deleted`: the user's one key, as the
    /// bucket's Secret carries it, was deleted already ([`Self::delete_key`]), so the user is
    /// deleted without listing its keys; IAM refuses to delete a user that still has a key
    /// (`DeleteConflict`), and then the keys are listed after all.
    pub async fn delete(&self, bucket: &str, only_key_deleted: bool) -> Result<(), BackendError> {
        let user = plan::user_name(bucket);
        if !only_key_deleted {
            self.delete_keys(&user).await?;
            return self.identity.delete_user(&user).await;
        }
        match self.identity.delete_user(&user).await {
            Err(e) if e.code == "DeleteConflict" => {
                self.delete_keys(&user).await?;
                self.identity.delete_user(&user).await
            }
            other => other,
        }
    }

    async fn delete_keys(&self, user: &str) -> Result<(), BackendError> {
        for id in self.identity.access_keys(user).await? {
            self.identity.delete_access_key(user, &id).await?;
        }
        Ok(())
    }

    /// Whether freshly issued keys work yet (IAM is eventually consistent).
    pub async fn check(&self, bucket: &str, keys: &Keys) -> Result<KeyCheck, BackendError> {
        Ok(match self.identity.access(keys, bucket).await? {
            Access::Granted => KeyCheck::Works,
            Access::Refused(code) => KeyCheck::NotYet(code),
        })
    }
}

/// [`Identity`] over the provider's IAM API, checking keys with S3 calls to the provider.
pub struct Iam {
    pub iam: IamStore,
    /// The provider's S3 client; a check signs with the keys under test through it.
    pub s3: S3Store,
    pub metrics: Arc<Metrics>,
}

impl Identity for Iam {
    async fn create_user(&self, user: &str, tags: &[(&str, &str)]) -> Result<bool, BackendError> {
        self.iam
            .create_user(&self.metrics, user, plan::USER_PATH, tags)
            .await
    }

    async fn put_policy(&self, user: &str, document: &str) -> Result<(), BackendError> {
        self.iam
            .put_user_policy(&self.metrics, user, plan::POLICY_NAME, document)
            .await
    }

    async fn policy(&self, user: &str) -> Result<Option<String>, BackendError> {
        self.iam
            .user_policy(&self.metrics, user, plan::POLICY_NAME)
            .await
    }

    async fn access_keys(&self, user: &str) -> Result<Vec<String>, BackendError> {
        self.iam.access_keys(&self.metrics, user).await
    }

    async fn existing_keys(&self, user: &str) -> Result<Option<Vec<String>>, BackendError> {
        self.iam.user_access_keys(&self.metrics, user).await
    }

    async fn create_access_key(&self, user: &str) -> Result<Keys, BackendError> {
        self.iam.create_access_key(&self.metrics, user).await
    }

    async fn delete_access_key(&self, user: &str, id: &str) -> Result<(), BackendError> {
        self.iam.delete_access_key(&self.metrics, user, id).await
    }

    async fn delete_user(&self, user: &str) -> Result<(), BackendError> {
        self.iam
            .delete_user(&self.metrics, user, plan::POLICY_NAME)
            .await
    }

    async fn access(&self, keys: &Keys, bucket: &str) -> Result<Access, BackendError> {
        Ok(self.s3.access(&self.metrics, keys, bucket).await?)
    }
}

#[cfg(test)]
mod tests;

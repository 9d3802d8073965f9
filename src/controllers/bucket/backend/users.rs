//! Per-bucket IAM users on S3-compatible providers with an IAM API (AWS S3, Ceph RGW): each
//! bucket gets a user of its own (found or created by a deterministic name, tagged with the
//! bucket and its tenant, an inline policy on that bucket only) whose keys the bucket's Secret
//! carries. The decisions are [`plan::keys`]; the IAM and S3 calls sit behind [`Identity`] so that
//! the sequence is tested against an in-memory fake.

use std::future::Future;
use std::sync::Arc;

use super::{KeyCheck, KeyPlan};
use crate::backends::error::BackendError;
use crate::backends::iam::IamStore;
use crate::backends::s3::{Access, S3Settings, S3Store};
use crate::controllers::bucket::plan::keys::{self as plan, KeySteps};
use crate::metrics::Metrics;
use crate::providers::Keys;

/// Tag on a bucket's IAM user naming the bucket.
pub const BUCKET_TAG: &str = "keeper.dev/bucket";
/// Tag on a bucket's IAM user naming its tenant (`namespace/name`).
pub const TENANT_TAG: &str = "keeper.dev/tenant";

/// What per-bucket users need from the provider: its IAM API, and a check of a key set against
/// a bucket.
pub trait Identity: Send + Sync {
    /// Creates the user (path [`plan::USER_PATH`]) with `tags`; an existing user is left as it is.
    fn create_user(
        &self,
        user: &str,
        tags: &[(&str, &str)],
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Sets the user's inline policy to `document`.
    fn put_policy(
        &self,
        user: &str,
        document: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The user's access key ids (none when there is no such user).
    fn access_keys(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;

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
}

impl<I: Identity> BucketUsers<I> {
    /// Found-or-created user and the keys to publish. Keys already published for this bucket's
    /// user stay without any IAM call (the steady state); otherwise the user and its policy are
    /// ensured, keys nobody holds are deleted, and a key is created.
    pub async fn keys(
        &self,
        bucket: &str,
        published: Option<&Keys>,
        rotate: bool,
    ) -> Result<KeyPlan, BackendError> {
        let published = published
            .map(|k| k.access_key_id.as_str())
            .filter(|id| *id != self.admin_key_id);
        if published.is_some() && !rotate {
            return Ok(KeyPlan::Keep);
        }
        let user = plan::user_name(bucket);
        self.identity
            .create_user(&user, &[(BUCKET_TAG, bucket), (TENANT_TAG, &self.tenant)])
            .await?;
        self.identity
            .put_policy(&user, &plan::bucket_policy(bucket))
            .await?;
        let existing = self.identity.access_keys(&user).await?;
        let KeySteps {
            delete,
            issue,
            retire,
        } = plan::key_steps(&existing, published, rotate);
        for id in &delete {
            self.identity.delete_access_key(&user, id).await?;
        }
        if !issue {
            return Ok(KeyPlan::Keep);
        }
        let keys = self.identity.create_access_key(&user).await?;
        Ok(KeyPlan::Publish { keys, retire })
    }

    pub async fn retire_key(&self, bucket: &str, access_key_id: &str) -> Result<(), BackendError> {
        self.identity
            .delete_access_key(&plan::user_name(bucket), access_key_id)
            .await
    }

    /// Deletes the bucket's keys, policy and user.
    pub async fn delete(&self, bucket: &str) -> Result<(), BackendError> {
        let user = plan::user_name(bucket);
        for id in self.identity.access_keys(&user).await? {
            self.identity.delete_access_key(&user, &id).await?;
        }
        self.identity.delete_user(&user).await
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
    /// Where the provider's S3 endpoint is; a check signs with the keys under test.
    pub s3: S3Settings,
    pub metrics: Arc<Metrics>,
}

impl Identity for Iam {
    async fn create_user(&self, user: &str, tags: &[(&str, &str)]) -> Result<(), BackendError> {
        self.iam
            .create_user(&self.metrics, user, plan::USER_PATH, tags)
            .await
    }

    async fn put_policy(&self, user: &str, document: &str) -> Result<(), BackendError> {
        self.iam
            .put_user_policy(&self.metrics, user, plan::POLICY_NAME, document)
            .await
    }

    async fn access_keys(&self, user: &str) -> Result<Vec<String>, BackendError> {
        self.iam.access_keys(&self.metrics, user).await
    }

    async fn create_access_key(&self, user: &str) -> Result<Keys, BackendError> {
        self.iam.create_access_key(&self.metrics, user).await
    }

    async fn delete_access_key(&self, user: &str, id: &str) -> Result<(), BackendError> {
        self.iam.delete_access_key(&self.metrics, user, id).await
    }

    async fn delete_user(&self, user: &str) -> Result<(), BackendError> {
        self.iam.delete_user(&self.metrics, user).await
    }

    async fn access(&self, keys: &Keys, bucket: &str) -> Result<Access, BackendError> {
        // A client of its own, not cached: there are as many key sets as buckets.
        let store = S3Store::new(&S3Settings {
            access_key_id: keys.access_key_id.clone(),
            secret_access_key: keys.secret_access_key.clone(),
            ..self.s3.clone()
        })
        .expect("the CA bundle was checked when the registry was built");
        Ok(store.access(&self.metrics, bucket).await?)
    }
}

#[cfg(test)]
mod tests;

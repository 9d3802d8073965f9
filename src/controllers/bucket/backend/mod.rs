//! What the bucket state machines need from a storage backend, behind one small trait so that
//! the controller logic is tested against an in-memory fake; its two implementations
//! ([`s3::S3Compatible`], [`grid::StorageGrid`]); and [`Live`], which connects to the tenant's
//! storage ([`TenantStorage`]): a StorageGRID tenant as its root user, an S3-compatible store
//! with the provider's own keys (read from keeper's namespace, never from a tenant's).

mod grid;
mod s3;
mod shared;
mod users;

use std::future::Future;
use std::sync::Arc;

use kube::ResourceExt;

use super::plan::keys::KeySource;
use super::{BucketFailure, Error};
use crate::api::names::tenant_root_secret_name;
use crate::api::{DrainMode, S3Tenant};
use crate::backends::Keys;
use crate::backends::s3::{DeleteOutcome, OwnerMark};
use crate::backends::storagegrid;
use crate::cluster::{SecretError, Target, owned_secret};
use crate::config::{BucketKeys, Provider, unconfigured_keys_message};
use crate::error::BackendError;
use crate::providers::ProviderClients;
use crate::runtime::{Connect, Shared};

pub use grid::StorageGrid;
pub use s3::{Credentials, S3Compatible};

/// The bucket a resource asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredBucket {
    pub name: String,
    pub region: String,
    pub versioning: bool,
    pub object_lock: bool,
    /// The S3Bucket (namespace, name, uid): the ownership mark written on the backend.
    pub owner: OwnerMark,
    /// `status.bucketName` records that keeper created this bucket (for backends without tags).
    pub recorded: bool,
    /// The create intent (`status.createIntent`) names
    /// this bucket: keeper recorded that it was about to create it,
    /// so the bucket found without a mark is one whose create succeeded but whose tagging did
    /// not (see [`super::reconcile`]).
    pub intent: bool,
    /// Annotation `keeper.dev/adopt=true`: take over an existing bucket no keeper resource owns.
    pub adopt: bool,
}

/// What [`BucketBackend::ensure`] left: who owns the bucket, and whether this call created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    pub owner: Owner,
    /// Created by this call: empty, so its first observation needs no call (listing a bucket
    /// made a moment ago tells nothing new).
    pub created: bool,
}

impl Ensured {
    /// An existing bucket, `owner`'s.
    pub fn found(owner: Owner) -> Self {
        Ensured {
            owner,
            created: false,
        }
    }
}

/// Whose bucket it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Missing,
    Us,
    /// Exists without keeper's mark: left alone unless adoption is asked. The message says what
    /// was found.
    Unmarked(String),
    /// Exists and belongs to someone keeper must never take it from (another S3Bucket in any
    /// namespace, another tenant of the grid): never adopted. The message names the owner.
    Taken(String),
}

impl Owner {
    /// The message of a bucket that is not ours.
    pub fn message(&self) -> Option<&str> {
        match self {
            Owner::Unmarked(message) | Owner::Taken(message) => Some(message),
            Owner::Missing | Owner::Us => None,
        }
    }
}

/// Objects in a bucket and whether the backend itself is deleting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observed {
    pub objects: i64,
    pub bytes: i64,
    /// A server-side drain is running on the backend.
    pub backend_draining: bool,
}

/// Why a bucket is observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Its usage, for status.
    Usage,
    /// The count that starts a drain: a backend that deletes the objects itself may keep what it
    /// listed for the drain's first rounds.
    StartDrain,
    /// An idle bucket's usage on the provider's `usageRefresh` timer: a backend whose one call
    /// answers for every bucket of the tenant may share that answer for the interval.
    Refresh,
}

/// What one round of a client-side drain did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainProgress {
    pub deleted: u64,
    pub empty: bool,
    /// Object lock or a legal hold stops the drain; the message names the object.
    pub blocked: Option<String>,
    /// The bucket lost this resource's ownership mark: the drain stopped before deleting more.
    pub not_ours: Option<String>,
}

/// Whether published keys are accepted by the store yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCheck {
    Works,
    /// Refused for now (IAM is eventually consistent): the store's answer.
    NotYet(String),
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

    /// Creates the bucket (or converges an existing one of ours, or adopts an unmarked one when
    /// asked): versioning (turned on when asked, never suspended on adoption), object lock and
    /// the ownership mark. Returns who owns it afterwards: `Unmarked` or `Taken` means it
    /// exists, is not ours and was left alone.
    fn ensure(
        &self,
        desired: &DesiredBucket,
    ) -> impl Future<Output = Result<Ensured, BackendError>> + Send;

    /// Usage and drain state; `None` when the bucket does not exist.
    fn observe(
        &self,
        bucket: &str,
        purpose: Purpose,
    ) -> impl Future<Output = Result<Option<Observed>, BackendError>> + Send;

    /// Whether an idle bucket still exists (`None`: it does not), and whether the backend itself
    /// deletes its objects (`Some(true)`, a server-side drain). At most one call; a backend whose
    /// one call answers for every bucket of the tenant may share that answer for the provider's
    /// `bucketCheckInterval`, but never answers "missing" from a shared answer.
    fn existence(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<Option<bool>, BackendError>> + Send;

    /// Whether the backend itself is deleting the bucket's objects (a server-side drain: on
    /// StorageGRID the bucket's "delete objects" setting), from the backend, not from status;
    /// `false` when the bucket does not exist. One call, without usage figures.
    fn drain_running(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Tells the backend to start deleting every object (server-side drains).
    fn start_drain(&self, bucket: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Tells the backend to stop deleting objects (server-side drains).
    fn stop_drain(&self, bucket: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Deletes objects for a while (client-side drains), checking before each batch that the
    /// bucket still carries `desired.owner`'s mark.
    fn drain_round(
        &self,
        desired: &DesiredBucket,
    ) -> impl Future<Output = Result<DrainProgress, BackendError>> + Send;

    /// Deletes the bucket; already gone counts as deleted.
    fn delete(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<DeleteOutcome, BackendError>> + Send;

    /// Where the bucket's keys come from: the provider's own, or a user of the bucket's own.
    fn key_source(&self) -> KeySource;

    /// The ids of the access keys of the bucket's user, which is created (with its policy or
    /// group) when missing. The key the Secret carries (`published`), if the user has it, is
    /// listed under that id.
    fn user_keys(
        &self,
        bucket: &str,
        published: Option<&str>,
    ) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;

    /// Creates an access key of the bucket's user.
    fn create_key(&self, bucket: &str) -> impl Future<Output = Result<Keys, BackendError>> + Send;

    /// Deletes an access key of the bucket's user; already gone counts as deleted.
    fn delete_key(
        &self,
        bucket: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Deletes the bucket's own credentials (user, group, keys) when the bucket goes.
    /// `only_key`: the one key the bucket's user is known to have (it may have others all the
    /// same: a backend that skips listing them must find out and delete them too). `Some(what)`:
    /// what was left alone and why, being another S3Bucket's (whose bucket of the same name was
    /// made after this one's went).
    fn delete_credentials(
        &self,
        desired: &DesiredBucket,
        only_key: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;

    /// Whether keys just issued for `bucket` are accepted yet: the bucket is Ready only once they
    /// are.
    fn check_keys(
        &self,
        bucket: &str,
        keys: &Keys,
    ) -> impl Future<Output = Result<KeyCheck, BackendError>> + Send;

    /// The store's identity (see [`crate::backends::identity`]), looked up once per provider and
    /// process; `None` where the tenant pins the backend (StorageGRID: the bucket lives in the
    /// tenant's account, which the tenant finds only on its recorded grid).
    fn identity(&self) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;
}

/// What a bucket connects to: its tenant (Ready, past the bucket's gate) on the tenant's
/// provider.
pub struct TenantStorage {
    pub tenant: Arc<S3Tenant>,
    pub clients: Arc<ProviderClients>,
}

/// How the reconciler reaches a tenant's storage ([`Live`] in production, an in-memory backend in
/// tests): named once, so that the reconciler and its steps carry one bound.
pub trait Connector: Connect<TenantStorage, Backend: BucketBackend, Error = NotConnected> {}

impl<C: Connect<TenantStorage, Backend: BucketBackend, Error = NotConnected>> Connector for C {}

/// Why a tenant's storage cannot be reached now.
#[derive(Debug)]
pub enum NotConnected {
    /// Not yet: something the tenant's setup makes is missing (not an error, the bucket waits).
    Wait(Wait),
    /// An error, for the shared policy.
    Failed(Error),
}

impl From<Error> for NotConnected {
    fn from(e: Error) -> Self {
        NotConnected::Failed(e)
    }
}

impl From<BucketFailure> for NotConnected {
    fn from(e: BucketFailure) -> Self {
        NotConnected::Failed(e.into())
    }
}

impl From<SecretError> for NotConnected {
    fn from(e: SecretError) -> Self {
        NotConnected::Failed(e.into())
    }
}

/// Something outside the bucket that is not there yet: the `Ready=False` reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub reason: &'static str,
    pub message: String,
}

/// The real backends: a StorageGRID tenant signed in with its root credentials, an
/// S3-compatible store with the provider's keys. Keeps what the buckets of one StorageGRID
/// tenant share ([`grid::TenantLooks`]) for as long as the process runs.
#[derive(Default)]
pub struct Live {
    grid_looks: shared::PerTenant<grid::TenantLooks>,
    creations: Arc<s3::Creations>,
}

impl Connect<TenantStorage> for Live {
    type Backend = AnyBackend;
    type Error = NotConnected;

    /// Provider Secrets without a namespace are in keeper's own.
    async fn connect(
        &self,
        shared: &Shared,
        storage: &TenantStorage,
    ) -> Result<AnyBackend, NotConnected> {
        let (tenant, clients) = (storage.tenant.as_ref(), storage.clients.as_ref());
        let (kube, metrics) = (shared.kube.as_ref(), &shared.metrics);
        let tenant_name = tenant.name_any();
        match &clients.config {
            Provider::S3Compatible(p) => {
                // Bucket operations sign with the provider's keys, from keeper's own namespace: a
                // tenant's namespace holds nothing keeper needs (a namespace being deleted can
                // still have its buckets cleaned up).
                let admin = clients
                    .s3_keys(kube, &shared.operator_namespace)
                    .await
                    .map_err(|e| match e {
                        crate::providers::ProviderError::Unavailable { .. } => {
                            BucketFailure::Retry(e.to_string())
                        }
                        _ => BucketFailure::Invalid {
                            reason: "ProviderSecretInvalid",
                            message: e.to_string(),
                        },
                    })?;
                let credentials = match p.bucket_keys() {
                    BucketKeys::Shared => Credentials::Shared(admin.clone()),
                    BucketKeys::PerBucketUser(_) => {
                        Credentials::PerBucketUser(users::BucketUsers {
                            identity: users::Iam {
                                iam: clients
                                    .iam(&admin)
                                    .expect("a provider with `iam` has a client"),
                                s3: clients.s3(&admin),
                                metrics: metrics.clone(),
                            },
                            admin_key_id: admin.access_key_id.clone(),
                            partition: super::plan::keys::partition(&p.region),
                            tenant: format!(
                                "{}/{tenant_name}",
                                tenant.namespace().unwrap_or_default()
                            ),
                        })
                    }
                    BucketKeys::Unconfigured => {
                        return Err(BucketFailure::Invalid {
                            reason: "ProviderKeysUnconfigured",
                            message: unconfigured_keys_message(&clients.name),
                        }
                        .into());
                    }
                };
                Ok(AnyBackend::S3(S3Compatible {
                    store: clients.s3(&admin),
                    metrics: metrics.clone(),
                    credentials,
                    pace: s3::drain_pace(&p.drain),
                    identity: (clients.identity_cache(), clients.s3_endpoint()),
                    creations: self.creations.clone(),
                }))
            }
            Provider::StorageGrid(_) => {
                let client = clients
                    .grid()
                    .cloned()
                    .expect("a StorageGRID provider has a grid client");
                let Some(account_id) = tenant.status.as_ref().and_then(|s| s.account_id.clone())
                else {
                    return Err(NotConnected::Wait(Wait {
                        reason: "TenantAccountMissing",
                        message: format!(
                            "S3Tenant {tenant_name:?} has no StorageGRID account id yet"
                        ),
                    }));
                };
                let secret_name = tenant_root_secret_name(&tenant_name);
                let password = owned_secret(kube, &Target::of(tenant), &secret_name)
                    .await?
                    .and_then(|data| data.get("password").cloned())
                    .filter(|p| !p.is_empty());
                let Some(password) = password else {
                    return Err(NotConnected::Wait(Wait {
                        reason: "TenantCredentialsMissing",
                        message: format!(
                            "the tenant's root credentials Secret {secret_name:?} does not exist yet or lacks a password"
                        ),
                    }));
                };
                let looks = self
                    .grid_looks
                    .of(&format!("{}/{account_id}", clients.name));
                Ok(AnyBackend::Grid(StorageGrid::new(
                    client,
                    storagegrid::Login::tenant_root(account_id, password),
                    looks,
                    grid::LookTtl {
                        usage: clients.config.usage_refresh(),
                        check: clients.config.bucket_check_interval(),
                    },
                )))
            }
        }
    }
}

/// The storage behind a tenant: one of the two implementations, chosen by its provider. An enum,
/// not a trait object ([`BucketBackend`]'s async methods are not object-safe), forwarded by the
/// `either!` macro below, the one place that dispatches: the reconcile never asks which kind it
/// has.
pub enum AnyBackend {
    S3(S3Compatible),
    Grid(StorageGrid),
}

/// Forwards a call to whichever backend the tenant has.
macro_rules! either {
    ($self:ident, $b:ident => $call:expr) => {
        match $self {
            AnyBackend::S3($b) => $call,
            AnyBackend::Grid($b) => $call,
        }
    };
}

impl BucketBackend for AnyBackend {
    fn drain_mode(&self) -> DrainMode {
        either!(self, b => b.drain_mode())
    }

    async fn owner(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
        either!(self, b => b.owner(desired).await)
    }

    async fn ensure(&self, desired: &DesiredBucket) -> Result<Ensured, BackendError> {
        either!(self, b => b.ensure(desired).await)
    }

    async fn observe(
        &self,
        bucket: &str,
        purpose: Purpose,
    ) -> Result<Option<Observed>, BackendError> {
        either!(self, b => b.observe(bucket, purpose).await)
    }

    async fn existence(&self, bucket: &str) -> Result<Option<bool>, BackendError> {
        either!(self, b => b.existence(bucket).await)
    }

    async fn drain_running(&self, bucket: &str) -> Result<bool, BackendError> {
        either!(self, b => b.drain_running(bucket).await)
    }

    async fn start_drain(&self, bucket: &str) -> Result<(), BackendError> {
        either!(self, b => b.start_drain(bucket).await)
    }

    async fn stop_drain(&self, bucket: &str) -> Result<(), BackendError> {
        either!(self, b => b.stop_drain(bucket).await)
    }

    async fn drain_round(&self, desired: &DesiredBucket) -> Result<DrainProgress, BackendError> {
        either!(self, b => b.drain_round(desired).await)
    }

    async fn delete(&self, bucket: &str) -> Result<DeleteOutcome, BackendError> {
        either!(self, b => b.delete(bucket).await)
    }

    fn key_source(&self) -> KeySource {
        either!(self, b => b.key_source())
    }

    async fn user_keys(
        &self,
        bucket: &str,
        published: Option<&str>,
    ) -> Result<Vec<String>, BackendError> {
        either!(self, b => b.user_keys(bucket, published).await)
    }

    async fn create_key(&self, bucket: &str) -> Result<Keys, BackendError> {
        either!(self, b => b.create_key(bucket).await)
    }

    async fn delete_key(&self, bucket: &str, id: &str) -> Result<(), BackendError> {
        either!(self, b => b.delete_key(bucket, id).await)
    }

    async fn delete_credentials(
        &self,
        desired: &DesiredBucket,
        only_key: Option<&str>,
    ) -> Result<Option<String>, BackendError> {
        either!(self, b => b.delete_credentials(desired, only_key).await)
    }

    async fn check_keys(&self, bucket: &str, keys: &Keys) -> Result<KeyCheck, BackendError> {
        either!(self, b => b.check_keys(bucket, keys).await)
    }

    async fn identity(&self) -> Result<Option<String>, BackendError> {
        either!(self, b => b.identity().await)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::S3TenantStatus;
    use crate::api::names::tenant_credentials_secret_name;
    use crate::cluster::fake::FakeKube;
    use crate::cluster::{Hold, Kube};
    use crate::config::OperatorConfig;
    use crate::runtime::testing;

    fn tenant(provider: &str) -> S3Tenant {
        let mut tenant =
            crate::test_support::tenant("t", serde_json::json!({"provider": provider}));
        tenant.metadata.uid = Some("u1".into());
        tenant.status = Some(S3TenantStatus {
            account_id: Some("12345".into()),
            ..S3TenantStatus::default()
        });
        tenant
    }

    /// Connects to `provider` after the namespace controller deleted the tenant's Secrets.
    async fn connect_after_namespace_deletion(provider: &str) -> Result<AnyBackend, Wait> {
        let kube = Arc::new(FakeKube::default());
        let shared = testing::shared(
            kube.clone(),
            OperatorConfig::parse(testing::TWO_PROVIDERS).unwrap(),
        );
        let tenant = tenant(provider);
        let owner = Target::of(&tenant);
        let data = BTreeMap::from([
            ("password".to_string(), "root-pw".to_string()),
            ("accessKeyId".to_string(), "AK".to_string()),
            ("secretAccessKey".to_string(), "SK".to_string()),
        ]);
        // S3-compatible bucket operations sign with the provider's keys, in keeper's namespace.
        kube.put_secret("keeper-system", "store-creds", data.clone());
        for name in [
            tenant_root_secret_name("t"),
            tenant_credentials_secret_name("t"),
        ] {
            kube.apply_secret(&owner, &name, data.clone(), Hold::UntilReleased)
                .await
                .unwrap();
            kube.delete_secret("ns", &name);
            assert!(
                kube.secret("ns", &name)
                    .await
                    .unwrap()
                    .is_some_and(|s| s.metadata.deletion_timestamp.is_some()),
                "held, being deleted"
            );
        }
        let storage = TenantStorage {
            tenant: Arc::new(tenant),
            clients: shared.providers.get(provider).unwrap(),
        };
        match Live::default().connect(&shared, &storage).await {
            Ok(backend) => Ok(backend),
            Err(NotConnected::Wait(wait)) => Err(wait),
            Err(NotConnected::Failed(e)) => panic!("{e}"),
        }
    }

    #[tokio::test]
    async fn bucket_cleanup_signs_in_with_tenant_secrets_that_are_being_deleted() {
        assert!(matches!(
            connect_after_namespace_deletion("default").await,
            Ok(AnyBackend::Grid(_))
        ));
        assert!(matches!(
            connect_after_namespace_deletion("store").await,
            Ok(AnyBackend::S3(_))
        ));
    }
}

//! A tenant on an S3-compatible store (AWS S3, MinIO, Ceph RGW, moto).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::users::{BucketUsers, Iam};
use super::{
    BucketBackend, DesiredBucket, DrainProgress, Ensured, KeyCheck, Observed, Owner, Purpose,
};
use crate::api::DrainMode;
use crate::backends::Keys;
use crate::backends::identity::{self, IdentityCache};
use crate::backends::s3::{self, CreateOutcome, DeleteOutcome, DrainPace, S3Store};
use crate::config::DrainDefaults;
use crate::controllers::bucket::plan::keys::KeySource;
use crate::error::{BackendError, ErrorClass};
use crate::metrics::Metrics;

/// Listing more than this many versions to compute usage is left for the next refresh.
const USAGE_LISTING_BOUND: i64 = 100_000;
/// How long one reconcile deletes objects before it yields its worker, unless configured
/// (`drain.roundDuration`). Short, because removing the annotation takes effect only between
/// rounds.
const DEFAULT_ROUND_DURATION: Duration = Duration::from_secs(5);
const DEFAULT_MAX_DELETES_PER_SECOND: u32 = 1000;
/// `DeleteObjects` calls in flight unless configured (`drain.deletesInFlight`): enough to hide
/// the listing and a store's latency, few enough not to crowd a shared store.
const DEFAULT_DELETES_IN_FLIGHT: u32 = 4;

/// The pace of client-side drains: the provider's configuration over the defaults.
pub fn drain_pace(drain: &DrainDefaults) -> DrainPace {
    DrainPace {
        budget: drain.round_duration.unwrap_or(DEFAULT_ROUND_DURATION),
        max_per_second: drain
            .max_deletes_per_second
            .unwrap_or(DEFAULT_MAX_DELETES_PER_SECOND),
        in_flight: drain.deletes_in_flight.unwrap_or(DEFAULT_DELETES_IN_FLIGHT) as usize,
    }
}

/// A tenant on an S3-compatible store: keeper manages its buckets with the provider's keys,
/// drains client-side, and gives each bucket the keys the provider's configuration says.
pub struct S3Compatible {
    /// Signs with the provider's own keys.
    pub store: S3Store,
    pub metrics: Arc<Metrics>,
    pub credentials: Credentials,
    pub pace: DrainPace,
    /// Where the provider's identity is kept, and the endpoint it names.
    pub identity: (IdentityCache, String),
    pub creations: Arc<Creations>,
}

/// How many locks the bucket names of [`Creations`] share.
const CREATION_LOCKS: usize = 64;

/// One convergence of a bucket at a time per bucket name in this process, from the look that
/// finds it missing to its mark. Two S3Buckets may name the same bucket on one store
/// (`spec.bucketName`): both would find it missing and both creates succeed where the store
/// answers the create of a bucket its account already owns with success (AWS S3 in us-east-1),
/// each then marking the bucket its own, and both would be handed keys to it. One after the
/// other, the second finds the first's mark. The deletion of a gone bucket's IAM user holds the
/// same lock from its last look at the name to the user's deletion (see
/// [`S3Compatible::delete_credentials`](BucketBackend::delete_credentials)). Names share
/// [`CREATION_LOCKS`] locks by hash: no lock per name to keep or forget, and two names rarely
/// wait for each other.
pub struct Creations([tokio::sync::Mutex<()>; CREATION_LOCKS]);

impl Default for Creations {
    fn default() -> Self {
        Creations(std::array::from_fn(|_| tokio::sync::Mutex::new(())))
    }
}

impl Creations {
    /// Waits until no other convergence of `bucket` on the store at `endpoint` runs.
    async fn one_at_a_time(&self, endpoint: &str, bucket: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let mut hasher = DefaultHasher::new();
        (endpoint, bucket).hash(&mut hasher);
        let lock = hasher.finish() % CREATION_LOCKS as u64;
        self.0[lock as usize].lock().await
    }
}

/// The keys a bucket's Secret carries on an S3-compatible provider.
pub enum Credentials {
    /// A user of the bucket's own, through the provider's IAM API.
    PerBucketUser(BucketUsers<Iam>),
    /// The provider's own keys (`sharedCredentials: true`, stores without an identity API).
    Shared(Keys),
}

impl S3Compatible {
    /// The bucket users, on a provider that has them; the provider's shared keys are never
    /// issued or deleted (the plan never asks to: their [`KeySource`] is the provider's).
    fn users(&self) -> Result<&BucketUsers<Iam>, BackendError> {
        match &self.credentials {
            Credentials::PerBucketUser(users) => Ok(users),
            Credentials::Shared(_) => Err(BackendError::new(
                "s3",
                "bucket_user",
                ErrorClass::Permanent,
                "SharedCredentials",
                "this provider publishes its own keys (sharedCredentials: true): buckets have no users of their own",
            )),
        }
    }

    /// Whether the bucket's mark lacks the namespace and name this resource writes (a mark from
    /// an older keeper, uid only, or a bucket whose tagging failed after its create).
    async fn mark_outdated(&self, desired: &DesiredBucket) -> Result<bool, BackendError> {
        Ok(
            match self.store.ownership(&self.metrics, &desired.name).await? {
                s3::Ownership::Exists { mark } => mark.as_ref() != Some(&desired.owner),
                s3::Ownership::Missing => false,
            },
        )
    }
}

impl BucketBackend for S3Compatible {
    /// The endpoint and the owner of the provider keys' buckets.
    async fn identity(&self) -> Result<Option<String>, BackendError> {
        let (cache, endpoint) = &self.identity;
        let live = cache
            .get(|| async {
                let owner = self.store.owner_id(&self.metrics).await?;
                Ok(identity::s3_owner(endpoint, &owner))
            })
            .await?;
        Ok(Some(live))
    }

    fn drain_mode(&self) -> DrainMode {
        DrainMode::ClientSide
    }

    async fn owner(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
        let name = &desired.name;
        Ok(match self.store.ownership(&self.metrics, name).await? {
            s3::Ownership::Missing => Owner::Missing,
            s3::Ownership::Exists { mark: Some(mark) } if mark.same_owner(&desired.owner) => {
                Owner::Us
            }
            s3::Ownership::Exists { mark: Some(mark) } => Owner::Taken(format!(
                "bucket {name:?} belongs to {} (tag {}={})",
                mark.describe(),
                s3::OWNER_TAG,
                mark.uid
            )),
            // Created by this resource, whose tagging failed right after the create.
            s3::Ownership::Exists { mark: None } if desired.intent => Owner::Us,
            s3::Ownership::Exists { mark: None } => Owner::Unmarked(format!(
                "bucket {name:?} exists and was not created by keeper (no {} tag)",
                s3::OWNER_TAG
            )),
        })
    }

    async fn ensure(&self, desired: &DesiredBucket) -> Result<Ensured, BackendError> {
        let metrics = &self.metrics;
        let name = &desired.name;
        let _alone = self.creations.one_at_a_time(&self.identity.1, name).await;
        let mut owner = self.owner(desired).await?;
        // Whether keeper created the bucket in this call (a new bucket needs no versioning call
        // unless versioning is wanted).
        let mut created = false;
        if owner == Owner::Missing {
            match self
                .store
                .create_bucket(metrics, name, &desired.region, desired.object_lock)
                .await?
            {
                CreateOutcome::Created => {
                    created = true;
                    owner = Owner::Us;
                }
                // Someone created it between our check and our create, or our own create whose
                // answer was lost (`BucketAlreadyOwnedByYou`): the mark, or the recorded
                // intent, tells.
                CreateOutcome::AlreadyExists => owner = self.owner(desired).await?,
            }
        }
        let adopted = matches!(owner, Owner::Unmarked(_)) && desired.adopt;
        if owner != Owner::Us && !adopted {
            return Ok(Ensured::found(owner));
        }
        // Marked at once after a create (the intent recorded before it covers a failure here),
        // on adoption, and on buckets an older keeper marked with the uid only.
        if created {
            self.store
                .tag_new_bucket(metrics, name, &desired.owner)
                .await?;
        } else if adopted || self.mark_outdated(desired).await? {
            self.store.tag_owner(metrics, name, &desired.owner).await?;
        }
        // Object lock implies versioning. Versioning is turned on when asked; it is suspended
        // only on a bucket keeper created and converges (the spec turned it off), never on one
        // it adopts (F18: adoption must not change how the owner's data is kept), and a new
        // bucket without versioning needs no call.
        let versioning = desired.versioning || desired.object_lock;
        if versioning || !(created || adopted) {
            self.store.set_versioning(metrics, name, versioning).await?;
        }
        Ok(Ensured {
            owner: Owner::Us,
            created,
        })
    }

    async fn observe(
        &self,
        bucket: &str,
        purpose: Purpose,
    ) -> Result<Option<Observed>, BackendError> {
        let (store, metrics) = (&self.store, &self.metrics);
        let usage = match purpose {
            Purpose::Usage | Purpose::Refresh => {
                store.usage(metrics, bucket, USAGE_LISTING_BOUND).await
            }
            Purpose::StartDrain => {
                store
                    .count_for_drain(metrics, bucket, USAGE_LISTING_BOUND)
                    .await
            }
        };
        Ok(usage?.map(|u| Observed {
            objects: u.objects,
            bytes: u.bytes,
            backend_draining: false,
        }))
    }

    /// One `GetBucketTagging` (the store has no cheaper call that tells a missing bucket apart);
    /// the store never drains by itself.
    async fn existence(&self, bucket: &str) -> Result<Option<bool>, BackendError> {
        Ok(match self.store.ownership(&self.metrics, bucket).await? {
            s3::Ownership::Missing => None,
            s3::Ownership::Exists { .. } => Some(false),
        })
    }

    // keeper itself deletes the objects: there is no backend drain to start or stop, only the
    // entries kept from the count to drop when the drain ends.
    /// Client-side drains run in keeper's reconciles only: the store never deletes by itself.
    async fn drain_running(&self, _bucket: &str) -> Result<bool, BackendError> {
        Ok(false)
    }

    async fn start_drain(&self, _bucket: &str) -> Result<(), BackendError> {
        Ok(())
    }

    async fn stop_drain(&self, bucket: &str) -> Result<(), BackendError> {
        self.store.forget_counted(bucket);
        Ok(())
    }

    async fn drain_round(&self, desired: &DesiredBucket) -> Result<DrainProgress, BackendError> {
        let round = self
            .store
            .drain_round(&self.metrics, &desired.name, &desired.owner, &self.pace)
            .await?;
        let stopped = round.blocked.is_some() || round.not_ours.is_some();
        if !stopped && round.deleted == 0 && round.aborted_uploads == 0 && !round.empty {
            // A call failed before anything was deleted: the reconcile retries with backoff.
            if let Some(e) = round.error {
                return Err(e.into());
            }
            // Every key of the batch failed for a reason other than a lock: retry with backoff.
            return Err(BackendError::new(
                "s3",
                "delete_objects",
                ErrorClass::Transient,
                "NothingDeleted",
                format!(
                    "DeleteObjects deleted nothing; first failure: {}",
                    round.failed.first().map_or("", String::as_str)
                ),
            ));
        }
        if let Some(e) = &round.error {
            // What was deleted counts; the next round lists the bucket again and retries.
            tracing::warn!(bucket = %desired.name, deleted = round.deleted, error = %e, "a drain round ended early");
        }
        Ok(DrainProgress {
            deleted: round.deleted,
            empty: round.empty,
            blocked: round.blocked,
            not_ours: round.not_ours,
        })
    }

    async fn delete(&self, bucket: &str) -> Result<DeleteOutcome, BackendError> {
        Ok(self.store.delete_bucket(&self.metrics, bucket).await?)
    }

    fn key_source(&self) -> KeySource {
        match &self.credentials {
            Credentials::PerBucketUser(users) => KeySource::BucketUser {
                limit: Some(BucketUsers::<Iam>::KEY_LIMIT),
                foreign: Some(users.admin_key_id.clone()),
            },
            Credentials::Shared(keys) => KeySource::Provider(keys.clone()),
        }
    }

    async fn user_keys(
        &self,
        bucket: &str,
        published: Option<&str>,
    ) -> Result<Vec<String>, BackendError> {
        self.users()?.user_keys(bucket, published).await
    }

    async fn create_key(&self, bucket: &str) -> Result<Keys, BackendError> {
        self.users()?.create_key(bucket).await
    }

    async fn delete_key(&self, bucket: &str, id: &str) -> Result<(), BackendError> {
        self.users()?.delete_key(bucket, id).await
    }

    /// A bucket's user is named after the bucket alone: once this S3Bucket's bucket went, another
    /// S3Bucket (of any namespace, or of another keeper on the same account) may have made a
    /// bucket of the same name, and found or made the user for it. The key this S3Bucket published
    /// is its own whoever has the name now, and goes first. Then, under the name's lock (no create
    /// of the bucket by this keeper runs meanwhile, and none can follow before the user is gone),
    /// the bucket is looked at once more: a bucket of that name marked by another S3Bucket keeps
    /// the user and its other keys (that S3Bucket retires the keys it did not publish).
    async fn delete_credentials(
        &self,
        desired: &DesiredBucket,
        only_key: Option<&str>,
    ) -> Result<Option<String>, BackendError> {
        let Credentials::PerBucketUser(users) = &self.credentials else {
            return Ok(None);
        };
        let name = &desired.name;
        if let Some(id) = only_key {
            users.delete_key(name, id).await?;
        }
        let _alone = self.creations.one_at_a_time(&self.identity.1, name).await;
        if let Owner::Taken(whose) = self.owner(desired).await? {
            return Ok(Some(format!(
                "{whose}: the IAM user named after the bucket and its keys were left alone (the key this S3Bucket published aside)"
            )));
        }
        users.delete(name, only_key.is_some()).await?;
        Ok(None)
    }

    async fn check_keys(&self, bucket: &str, keys: &Keys) -> Result<KeyCheck, BackendError> {
        match &self.credentials {
            Credentials::PerBucketUser(users) => users.check(bucket, keys).await,
            // The provider's keys manage the bucket itself: they work whenever keeper does.
            Credentials::Shared(_) => Ok(KeyCheck::Works),
        }
    }
}

#[cfg(test)]
mod tests;

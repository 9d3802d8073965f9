//! An in-memory storage backend for the controller tests, and a connector that hands it to the
//! reconciler.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::DrainMode;
use crate::backends::Keys;
use crate::backends::s3::DeleteOutcome;
use crate::controllers::bucket::backend::{
    BucketBackend, DesiredBucket, DrainProgress, Ensured, KeyCheck, NotConnected, Observed, Owner,
    Purpose, TenantStorage,
};
use crate::controllers::bucket::plan::keys::KeySource;
use crate::error::{BackendError, ErrorClass};
use crate::runtime::{Connect, Shared};
use crate::test_support::Pauses;

#[derive(Debug, Clone, Default)]
pub struct FakeBucket {
    pub owner: Option<String>,
    pub objects: i64,
    pub versioning: bool,
    pub draining: bool,
    /// Objects protected by a legal hold (client-side rounds stop on them).
    pub held: bool,
    /// Entries the usage does not count but that keep the bucket from being deleted.
    pub uncounted: bool,
}

/// An in-memory storage: server-side drains delete `server_rate` objects per observation.
pub struct Fake {
    pub mode: DrainMode,
    pub buckets: Mutex<HashMap<String, FakeBucket>>,
    pub calls: Mutex<Vec<String>>,
    pub round_size: u64,
    pub server_rate: i64,
    pub fail_permanently: Mutex<Option<String>>,
    /// The next call fails with an error of this class.
    pub fail_next: Mutex<Option<ErrorClass>>,
    /// Every call of this name fails transiently (a backend that refuses one operation).
    pub fail_call: Mutex<Option<&'static str>>,
    /// Removes this bucket right after the next ownership check (a concurrent manual delete).
    pub vanish_after_owner: Mutex<Option<String>>,
    /// How many more key checks refuse the keys (an eventually consistent IAM).
    pub keys_not_yet_valid: Mutex<u32>,
    /// The published keys are the provider's own (`sharedCredentials: true`).
    pub shared_keys: bool,
    /// The next create succeeds but its tagging fails (a throttled PutBucketTagging).
    pub fail_tag_after_create: Mutex<bool>,
    /// Listing the user's keys fails with an error of this class (an IAM setup that keeps
    /// failing: a user limit reached, a policy attached by hand).
    pub fail_user_keys: Mutex<Option<ErrorClass>>,
    /// The access key ids of the bucket's user (the tests use one bucket), `AK1`, `AK2`, ... in
    /// the order they were created.
    pub user_keys: Mutex<Vec<String>>,
    pub keys_created: Mutex<u32>,
    /// Keys per user, as IAM limits them (two); `None` as on StorageGRID.
    pub key_limit: Option<usize>,
    /// Calls that stop once they have acted, until the test lets them go.
    pub pauses: Pauses,
    /// The `only_key` of each `delete_credentials` call.
    pub only_keys: Mutex<Vec<Option<String>>>,
    /// `delete_credentials` finds the credentials another S3Bucket's, for this reason.
    pub credentials_taken: Mutex<Option<String>>,
    /// The store's identity; `None`: pinned by the tenant, as on StorageGRID. Not counted in
    /// `calls` (it is looked up once per process).
    pub identity: Mutex<Option<String>>,
}

impl Fake {
    pub fn new(mode: DrainMode) -> Self {
        Fake {
            mode,
            buckets: Mutex::default(),
            calls: Mutex::default(),
            round_size: 1000,
            server_rate: 0,
            fail_permanently: Mutex::default(),
            fail_user_keys: Mutex::default(),
            fail_next: Mutex::default(),
            fail_call: Mutex::default(),
            vanish_after_owner: Mutex::default(),
            keys_not_yet_valid: Mutex::default(),
            shared_keys: false,
            fail_tag_after_create: Mutex::default(),
            user_keys: Mutex::default(),
            keys_created: Mutex::default(),
            key_limit: Some(2),
            pauses: Pauses::default(),
            only_keys: Mutex::default(),
            credentials_taken: Mutex::default(),
            identity: Mutex::default(),
        }
    }

    pub fn keys_of_user(&self) -> Vec<String> {
        self.user_keys.lock().unwrap().clone()
    }

    pub fn with(self, name: &str, bucket: FakeBucket) -> Self {
        self.buckets.lock().unwrap().insert(name.into(), bucket);
        self
    }

    pub fn bucket(&self, name: &str) -> Option<FakeBucket> {
        self.buckets.lock().unwrap().get(name).cloned()
    }

    fn call(&self, what: &str) -> Result<(), BackendError> {
        self.calls.lock().unwrap().push(what.to_string());
        let refused = *self.fail_call.lock().unwrap() == Some(what);
        if let Some(class) = self
            .fail_next
            .lock()
            .unwrap()
            .take()
            .or(refused.then_some(ErrorClass::Transient))
        {
            let code = match class {
                ErrorClass::Transient => "HTTP 503",
                ErrorClass::Permanent => "HTTP 400",
                ErrorClass::NotFound => "HTTP 404",
                ErrorClass::Conflict => "HTTP 409",
            };
            return Err(BackendError::new("fake", "call", class, code, "injected"));
        }
        match self.fail_permanently.lock().unwrap().clone() {
            Some(message) => Err(BackendError::new(
                "fake",
                "call",
                ErrorClass::Permanent,
                "Rejected",
                message,
            )),
            None => Ok(()),
        }
    }

    /// Whose bucket `desired.name` is, the way the real backends decide: by the uid mark, or an
    /// unmarked bucket this resource recorded its intent to create.
    fn owner_of(&self, desired: &DesiredBucket) -> Owner {
        match self.bucket(&desired.name) {
            None => Owner::Missing,
            Some(b) if b.owner.as_deref() == Some(desired.owner.uid.as_str()) => Owner::Us,
            Some(b) if b.owner.is_none() && desired.intent => Owner::Us,
            Some(b) if b.owner.is_none() => Owner::Unmarked("no owner mark".into()),
            Some(b) => Owner::Taken(format!(
                "bucket {:?} belongs to {}",
                desired.name,
                b.owner.unwrap()
            )),
        }
    }

    pub fn take_calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

/// The same in-memory backend, owned by a test or shared with a reconciler.
macro_rules! fake_backend {
    ($t:ty) => {
        impl BucketBackend for $t {
            fn drain_mode(&self) -> DrainMode {
                self.mode
            }

            async fn identity(&self) -> Result<Option<String>, BackendError> {
                Ok(self.identity.lock().unwrap().clone())
            }

            async fn owner(&self, desired: &DesiredBucket) -> Result<Owner, BackendError> {
                self.call("owner")?;
                let owner = self.owner_of(desired);
                if let Some(name) = self.vanish_after_owner.lock().unwrap().take() {
                    self.buckets.lock().unwrap().remove(&name);
                }
                Ok(owner)
            }

            async fn ensure(&self, desired: &DesiredBucket) -> Result<Ensured, BackendError> {
                self.call("ensure")?;
                let owner = self.owner_of(desired);
                let mut buckets = self.buckets.lock().unwrap();
                if owner == Owner::Missing
                    && std::mem::take(&mut *self.fail_tag_after_create.lock().unwrap())
                {
                    buckets.insert(desired.name.clone(), FakeBucket::default());
                    return Err(BackendError::new(
                        "fake",
                        "put_bucket_tagging",
                        ErrorClass::Transient,
                        "SlowDown",
                        "throttled",
                    ));
                }
                let adopted = matches!(owner, Owner::Unmarked(_)) && desired.adopt;
                if !matches!(owner, Owner::Missing | Owner::Us) && !adopted {
                    return Ok(Ensured::found(owner));
                }
                let created = owner == Owner::Missing;
                let bucket = buckets.entry(desired.name.clone()).or_default();
                bucket.owner = Some(desired.owner.uid.clone());
                // Adoption turns versioning on when asked, never off.
                bucket.versioning = desired.versioning || (adopted && bucket.versioning);
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
                self.call(match purpose {
                    Purpose::Usage => "observe",
                    Purpose::StartDrain => "observe to start a drain",
                    Purpose::Refresh => "refresh usage",
                })?;
                let mut buckets = self.buckets.lock().unwrap();
                Ok(buckets.get_mut(bucket).map(|b| {
                    if b.draining {
                        b.objects = (b.objects - self.server_rate).max(0);
                    }
                    Observed {
                        objects: b.objects,
                        bytes: b.objects * 10,
                        backend_draining: b.draining,
                    }
                }))
            }

            async fn existence(&self, bucket: &str) -> Result<Option<bool>, BackendError> {
                self.call("existence")?;
                Ok(self.buckets.lock().unwrap().get(bucket).map(|b| b.draining))
            }

            async fn drain_running(&self, bucket: &str) -> Result<bool, BackendError> {
                self.call("drain_running")?;
                Ok(self
                    .buckets
                    .lock()
                    .unwrap()
                    .get(bucket)
                    .is_some_and(|b| b.draining))
            }

            async fn start_drain(&self, bucket: &str) -> Result<(), BackendError> {
                self.call("start_drain")?;
                if self.mode == DrainMode::ServerSide {
                    self.buckets
                        .lock()
                        .unwrap()
                        .get_mut(bucket)
                        .unwrap()
                        .draining = true;
                }
                Ok(())
            }

            async fn stop_drain(&self, bucket: &str) -> Result<(), BackendError> {
                self.call("stop_drain")?;
                if let Some(b) = self.buckets.lock().unwrap().get_mut(bucket) {
                    b.draining = false;
                }
                Ok(())
            }

            async fn drain_round(
                &self,
                desired: &DesiredBucket,
            ) -> Result<DrainProgress, BackendError> {
                self.call("drain_round")?;
                let mut buckets = self.buckets.lock().unwrap();
                let b = buckets.get_mut(&desired.name).unwrap();
                if b.owner.as_deref() != Some(desired.owner.uid.as_str()) {
                    return Ok(DrainProgress {
                        not_ours: Some(format!("marked {:?}", b.owner)),
                        ..Default::default()
                    });
                }
                if b.held {
                    return Ok(DrainProgress {
                        blocked: Some("object \"x\" is under a legal hold".into()),
                        ..Default::default()
                    });
                }
                let deleted = (self.round_size as i64).min(b.objects);
                b.objects -= deleted;
                Ok(DrainProgress {
                    deleted: deleted as u64,
                    empty: b.objects == 0 && deleted < self.round_size as i64,
                    ..Default::default()
                })
            }

            async fn delete(&self, bucket: &str) -> Result<DeleteOutcome, BackendError> {
                self.call("delete")?;
                let mut buckets = self.buckets.lock().unwrap();
                match buckets.get(bucket) {
                    Some(b) if b.objects > 0 || b.uncounted => Ok(DeleteOutcome::NotEmpty),
                    _ => {
                        buckets.remove(bucket);
                        Ok(DeleteOutcome::Deleted)
                    }
                }
            }

            fn key_source(&self) -> KeySource {
                if self.shared_keys {
                    KeySource::Provider(Keys {
                        access_key_id: "PROVIDER".into(),
                        secret_access_key: "provider-secret".into(),
                    })
                } else {
                    KeySource::BucketUser {
                        limit: self.key_limit,
                        foreign: None,
                    }
                }
            }

            async fn user_keys(
                &self,
                _bucket: &str,
                _published: Option<&str>,
            ) -> Result<Vec<String>, BackendError> {
                self.call("user_keys")?;
                if let Some(class) = *self.fail_user_keys.lock().unwrap() {
                    return Err(BackendError::new(
                        "fake",
                        "user_keys",
                        class,
                        "LimitExceeded",
                        "cannot exceed quota for UsersPerAccount: 5000",
                    ));
                }
                let listed = self.keys_of_user();
                self.pauses.stop_if_asked("user_keys").await;
                Ok(listed)
            }

            async fn create_key(&self, _bucket: &str) -> Result<Keys, BackendError> {
                self.call("create_key")?;
                let keys = {
                    let mut user = self.user_keys.lock().unwrap();
                    if self.key_limit.is_some_and(|limit| user.len() >= limit) {
                        return Err(BackendError::new(
                            "fake",
                            "create_key",
                            ErrorClass::Conflict,
                            "LimitExceeded",
                            "the user has all the keys it may have",
                        ));
                    }
                    let mut created = self.keys_created.lock().unwrap();
                    *created += 1;
                    user.push(format!("AK{created}"));
                    Keys {
                        access_key_id: format!("AK{created}"),
                        secret_access_key: format!("SK{created}"),
                    }
                };
                self.pauses.stop_if_asked("create_key").await;
                Ok(keys)
            }

            async fn delete_key(&self, _bucket: &str, id: &str) -> Result<(), BackendError> {
                self.call("delete_key")?;
                self.user_keys.lock().unwrap().retain(|k| k != id);
                Ok(())
            }

            async fn delete_credentials(
                &self,
                _desired: &DesiredBucket,
                only_key: Option<&str>,
            ) -> Result<Option<String>, BackendError> {
                self.only_keys
                    .lock()
                    .unwrap()
                    .push(only_key.map(str::to_string));
                self.call("delete_credentials")?;
                Ok(self.credentials_taken.lock().unwrap().clone())
            }

            async fn check_keys(
                &self,
                _bucket: &str,
                keys: &Keys,
            ) -> Result<KeyCheck, BackendError> {
                self.call("check_keys")?;
                if !self.shared_keys && !self.keys_of_user().contains(&keys.access_key_id) {
                    return Ok(KeyCheck::NotYet("InvalidAccessKeyId".into()));
                }
                let mut pending = self.keys_not_yet_valid.lock().unwrap();
                Ok(if *pending > 0 {
                    *pending -= 1;
                    KeyCheck::NotYet("InvalidAccessKeyId".into())
                } else {
                    KeyCheck::Works
                })
            }
        }
    };
}

fake_backend!(Fake);
fake_backend!(Arc<Fake>);

/// Hands the shared fake to the reconciler, whatever the tenant.
impl Connect<TenantStorage> for Arc<Fake> {
    type Backend = Arc<Fake>;
    type Error = NotConnected;

    async fn connect(
        &self,
        _shared: &Shared,
        _storage: &TenantStorage,
    ) -> Result<Arc<Fake>, NotConnected> {
        Ok(self.clone())
    }
}

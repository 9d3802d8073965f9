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
/// How long one reconcile deletes objects before it yields its worker. Short, because removing
/// the annotation takes effect only between rounds.
const DRAIN_ROUND_BUDGET: Duration = Duration::from_secs(5);
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

#[cfg(test)]
mod grid_tests {
    //! The StorageGRID side against a local HTTP mock of the management API (127.0.0.1).

    use serde_json::{Value, json};
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use crate::config::TlsConfig;

    const ACCOUNT: &str = "40327589106748163542";
    const UID: &str = "uid-1";

    fn ok(status: u16, data: Value) -> ResponseTemplate {
        ResponseTemplate::new(status).set_body_json(json!({
            "responseTime": "2025-01-15T10:00:00.000Z", "status": "success", "apiVersion": "4.0", "data": data
        }))
    }

    fn error(code: u16) -> ResponseTemplate {
        ResponseTemplate::new(code).set_body_json(json!({
            "responseTime": "2025-01-15T10:00:00.000Z", "status": "error", "apiVersion": "4.0", "code": code,
            "message": {"text": "no", "key": "some.key"}
        }))
    }

    async fn mock_grid() -> (MockServer, StorageGrid) {
        let server = MockServer::builder()
            .listener(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .start()
            .await;
        Mock::given(method("POST"))
            .and(path("/api/v4/authorize"))
            .respond_with(ok(200, json!("token")).insert_header("Cache-Control", "max-age=57599"))
            .mount(&server)
            .await;
        let url = reqwest::Url::parse(&server.uri()).unwrap();
        let client =
            storagegrid::Client::new(&url, &TlsConfig::default(), Arc::new(Metrics::new()))
                .unwrap();
        let backend = StorageGrid {
            client,
            tenant: storagegrid::Login::tenant_root(ACCOUNT, "root-pass"),
        };
        (server, backend)
    }

    async fn on(server: &MockServer, verb: &str, at: &str, response: ResponseTemplate) {
        Mock::given(method(verb))
            .and(path(format!("/api/v4/{at}")))
            .respond_with(response)
            .mount(server)
            .await;
    }

    fn desired(recorded: bool, adopt: bool) -> DesiredBucket {
        DesiredBucket {
            name: "ns-b".into(),
            region: "us-east-1".into(),
            versioning: true,
            object_lock: false,
            owner_uid: UID.into(),
            recorded,
            adopt,
        }
    }

    fn group_json(owner: &str) -> Value {
        json!({"id": "g-1", "uniqueName": "group/keeper-ns-b",
               "displayName": format!("keeper bucket ns-b owner-uid={owner}")})
    }

    /// (method, path, body) of every request but the logins.
    async fn calls(server: &MockServer) -> Vec<(String, String, Value)> {
        server
            .received_requests()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.url.path() != "/api/v4/authorize")
            .map(|r| {
                (
                    r.method.to_string(),
                    r.url.path().trim_start_matches("/api/v4/").to_string(),
                    serde_json::from_slice(&r.body).unwrap_or(Value::Null),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_new_bucket_gets_its_marked_group_before_the_bucket_is_created() {
        let (server, grid) = mock_grid().await;
        on(&server, "GET", "org/containers", ok(200, json!([]))).await;
        on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
        on(&server, "POST", "org/groups", ok(201, group_json(UID))).await;
        on(
            &server,
            "POST",
            "org/containers",
            ok(201, json!({"name": "ns-b"})),
        )
        .await;
        on(
            &server,
            "PUT",
            "org/containers/ns-b/versioning",
            ok(200, json!({})),
        )
        .await;
        assert_eq!(
            grid.ensure(&desired(false, false)).await.unwrap(),
            Owner::Us
        );
        let calls = calls(&server).await;
        let group = calls
            .iter()
            .position(|c| c.0 == "POST" && c.1 == "org/groups")
            .unwrap();
        let bucket = calls
            .iter()
            .position(|c| c.0 == "POST" && c.1 == "org/containers")
            .unwrap();
        assert!(group < bucket, "the mark comes first: {calls:?}");
        let body = &calls[group].2;
        assert_eq!(body["displayName"], "keeper bucket ns-b owner-uid=uid-1");
        assert_eq!(
            body["policies"]["s3"]["Statement"][0]["Resource"],
            json!(["arn:aws:s3:::ns-b", "arn:aws:s3:::ns-b/*"])
        );
        assert_eq!(body["policies"]["management"]["rootAccess"], false);
        assert_eq!(calls[bucket].2["name"], "ns-b");
    }

    #[tokio::test]
    async fn an_unmarked_existing_bucket_is_someone_elses_unless_recorded_or_adopted() {
        let (server, grid) = mock_grid().await;
        on(
            &server,
            "GET",
            "org/containers",
            ok(200, json!([{"name": "ns-b"}])),
        )
        .await;
        on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
        assert!(matches!(
            grid.ensure(&desired(false, false)).await.unwrap(),
            Owner::Someone(m) if m.contains("not created by this resource")
        ));
        assert_eq!(grid.owner(&desired(true, false)).await.unwrap(), Owner::Us);
        // Nothing was written for the refused bucket.
        assert!(calls(&server).await.iter().all(|c| c.0 == "GET"));
        on(&server, "POST", "org/groups", ok(201, group_json(UID))).await;
        on(
            &server,
            "PUT",
            "org/containers/ns-b/versioning",
            ok(200, json!({})),
        )
        .await;
        assert_eq!(grid.ensure(&desired(false, true)).await.unwrap(), Owner::Us);
    }

    #[tokio::test]
    async fn a_bucket_marked_by_another_resource_is_not_ours() {
        let (server, grid) = mock_grid().await;
        on(
            &server,
            "GET",
            "org/containers",
            ok(200, json!([{"name": "ns-b"}])),
        )
        .await;
        on(
            &server,
            "GET",
            "org/groups/group/keeper-ns-b",
            ok(200, group_json("uid-2")),
        )
        .await;
        assert!(matches!(
            grid.owner(&desired(false, false)).await.unwrap(),
            Owner::Someone(_)
        ));
    }

    #[tokio::test]
    async fn a_name_taken_by_another_tenant_is_a_conflict_not_ours() {
        let (server, grid) = mock_grid().await;
        on(&server, "GET", "org/containers", ok(200, json!([]))).await;
        on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
        on(&server, "POST", "org/groups", ok(201, group_json(UID))).await;
        on(&server, "POST", "org/containers", error(409)).await;
        assert!(matches!(
            grid.ensure(&desired(false, false)).await.unwrap(),
            Owner::Someone(m) if m.contains("another tenant")
        ));
    }

    #[tokio::test]
    async fn observe_reads_the_drain_flag_and_the_usage_of_the_bucket() {
        let (server, grid) = mock_grid().await;
        on(
            &server,
            "GET",
            "org/containers",
            ok(200, json!([{"name": "ns-b", "deleteObjectStatus": {"isDeletingObjects": true, "initialObjectCount": "1500"}}])),
        )
        .await;
        on(
            &server,
            "GET",
            "org/usage",
            ok(200, json!({"calculationTime": "2025-01-15T09:58:00.000Z", "objectCount": 9, "dataBytes": 90,
                            "buckets": [{"name": "other", "objectCount": 1, "dataBytes": 1},
                                        {"name": "ns-b", "objectCount": "700", "dataBytes": 7000}]})),
        )
        .await;
        assert_eq!(
            grid.observe("ns-b").await.unwrap(),
            Some(Observed {
                objects: 700,
                bytes: 7000,
                backend_draining: true
            })
        );
        assert_eq!(grid.observe("gone").await.unwrap(), None);
    }

    #[tokio::test]
    async fn drain_toggles_and_deletion_outcomes() {
        let (server, grid) = mock_grid().await;
        on(
            &server,
            "POST",
            "org/containers/ns-b/delete-objects",
            ok(200, json!({"isDeletingObjects": true})),
        )
        .await;
        grid.start_drain("ns-b").await.unwrap();
        assert_eq!(calls(&server).await[0].2, json!({"deleteObjects": true}));
        on(
            &server,
            "POST",
            "org/containers/gone/delete-objects",
            error(404),
        )
        .await;
        grid.stop_drain("gone").await.unwrap();
        on(&server, "DELETE", "org/containers/full", error(409)).await;
        on(&server, "DELETE", "org/containers/gone", error(404)).await;
        on(
            &server,
            "DELETE",
            "org/containers/ns-b",
            ResponseTemplate::new(204),
        )
        .await;
        assert_eq!(grid.delete("full").await.unwrap(), DeleteOutcome::NotEmpty);
        assert_eq!(grid.delete("gone").await.unwrap(), DeleteOutcome::Deleted);
        assert_eq!(grid.delete("ns-b").await.unwrap(), DeleteOutcome::Deleted);
        on(&server, "DELETE", "org/containers/broken", error(500)).await;
        assert!(grid.delete("broken").await.unwrap_err().transient);
    }

    #[tokio::test]
    async fn keys_are_kept_issued_for_the_bucket_user_and_rotated() {
        let (server, grid) = mock_grid().await;
        let old = Keys {
            access_key_id: "OLD".into(),
            secret_access_key: "old-secret".into(),
        };
        assert_eq!(
            grid.keys("ns-b", Some(&old), false).await.unwrap(),
            KeyPlan::Keep
        );
        assert!(calls(&server).await.is_empty(), "keeping costs no call");
        on(
            &server,
            "GET",
            "org/groups/group/keeper-ns-b",
            ok(200, group_json(UID)),
        )
        .await;
        on(&server, "GET", "org/users/user/keeper-ns-b", error(404)).await;
        on(
            &server,
            "POST",
            "org/users",
            ok(201, json!({"id": "u-1", "uniqueName": "user/keeper-ns-b"})),
        )
        .await;
        on(
            &server,
            "POST",
            "org/users/u-1/s3-access-keys",
            ok(
                201,
                json!({"id": "k-2", "accessKey": "NEW", "secretAccessKey": "new-secret"}),
            ),
        )
        .await;
        let plan = grid.keys("ns-b", Some(&old), true).await.unwrap();
        assert_eq!(
            plan,
            KeyPlan::Publish {
                keys: Keys {
                    access_key_id: "NEW".into(),
                    secret_access_key: "new-secret".into()
                },
                retire: Some("OLD".into()),
            }
        );
        let user = calls(&server)
            .await
            .into_iter()
            .find(|c| c.1 == "org/users")
            .unwrap();
        assert_eq!(user.2["memberOf"], json!(["g-1"]));
        assert!(
            !format!("{plan:?}").contains("new-secret"),
            "secrets stay out of Debug"
        );
    }

    #[tokio::test]
    async fn bucket_credentials_go_with_the_bucket() {
        let (server, grid) = mock_grid().await;
        on(
            &server,
            "GET",
            "org/users/user/keeper-ns-b",
            ok(200, json!({"id": "u-1", "uniqueName": "user/keeper-ns-b"})),
        )
        .await;
        on(
            &server,
            "GET",
            "org/users/u-1/s3-access-keys",
            ok(200, json!([{"id": "k-1"}, {"id": "k-2"}])),
        )
        .await;
        on(
            &server,
            "DELETE",
            "org/users/u-1/s3-access-keys/k-1",
            ResponseTemplate::new(204),
        )
        .await;
        on(
            &server,
            "DELETE",
            "org/users/u-1/s3-access-keys/k-2",
            error(404),
        )
        .await;
        on(
            &server,
            "DELETE",
            "org/users/u-1",
            ResponseTemplate::new(204),
        )
        .await;
        on(
            &server,
            "GET",
            "org/groups/group/keeper-ns-b",
            ok(200, group_json(UID)),
        )
        .await;
        on(
            &server,
            "DELETE",
            "org/groups/g-1",
            ResponseTemplate::new(204),
        )
        .await;
        grid.delete_credentials("ns-b").await.unwrap();
        let deleted: Vec<String> = calls(&server)
            .await
            .into_iter()
            .filter(|c| c.0 == "DELETE")
            .map(|c| c.1)
            .collect();
        assert_eq!(
            deleted,
            [
                "org/users/u-1/s3-access-keys/k-1",
                "org/users/u-1/s3-access-keys/k-2",
                "org/users/u-1",
                "org/groups/g-1"
            ]
        );
        // Already gone: nothing to do, no error.
        let (server, grid) = mock_grid().await;
        on(&server, "GET", "org/users/user/keeper-ns-b", error(404)).await;
        on(&server, "GET", "org/groups/group/keeper-ns-b", error(404)).await;
        grid.delete_credentials("ns-b").await.unwrap();
    }
}

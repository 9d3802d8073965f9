//! The AWS RDS client the CloudDatabase controller uses (its trait is in
//! `controllers::database::backend`).
//!
//! [`RdsBackend`] never waits on an SDK waiter: every call returns what RDS says now and the
//! controller requeues while an instance is in a transitional state. Errors are classified once,
//! here, by operation and error code, into a [`BackendError`] that names the operation.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use aws_config::SdkConfig;
use aws_sdk_rds::config::Region;
use aws_sdk_rds::config::http::HttpResponse;
use aws_sdk_rds::config::timeout::TimeoutConfig;
use aws_sdk_rds::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_rds::types::Tag;

use crate::api::{DatabaseEndpoint, Engine};
use crate::backends::call::measured;
use crate::backends::identity::IdentityCache;
use crate::backends::rate::RateLimit;
use crate::config::{BackendTimeouts, RdsConfig};
use crate::error::{BackendError, ErrorClass};
use crate::metrics::Metrics;

mod errors;

pub use errors::is_access_denied;
use errors::{RdsError, classify, instance_fault, message};

/// A master password. `Debug` never shows it, so it cannot leak through a `{:?}` in a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(value: String) -> Self {
        Password(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// What the controller needs to know about an instance.
#[derive(Debug, Clone, PartialEq)]
pub struct DbInstance {
    pub id: String,
    /// ARN, needed to remove tags.
    pub arn: String,
    /// RDS `DBInstanceStatus`, such as `creating`, `available`, `modifying`, `deleting`.
    pub state: String,
    /// Present once RDS has assigned an address.
    pub endpoint: Option<DatabaseEndpoint>,
    pub tags: BTreeMap<String, String>,
    pub deletion_protection: bool,
    pub instance_class: String,
    pub storage_gib: i32,
}

/// Everything `CreateDBInstance` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct NewInstance {
    pub id: String,
    pub engine: Engine,
    pub engine_version: Option<String>,
    pub instance_class: String,
    pub storage_gib: i32,
    pub username: String,
    pub password: Password,
    pub database_name: Option<String>,
    pub deletion_protection: bool,
    pub tags: BTreeMap<String, String>,
    pub db_subnet_group_name: Option<String>,
    pub vpc_security_group_ids: Vec<String>,
}

/// Changes for `ModifyDBInstance`, applied immediately; `None` leaves a setting alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Modification {
    pub instance_class: Option<String>,
    pub storage_gib: Option<i32>,
    pub deletion_protection: Option<bool>,
    pub master_password: Option<Password>,
}

/// Whether `DeleteDBInstance` takes a final snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalSnapshot {
    Take(String),
    Skip,
}

const BACKEND: &str = "rds";

/// The RDS client. Every call goes through [`measured`] under its snake_case
/// operation name and returns a [`BackendError`] carrying that name. Cheap to clone (the SDK
/// client is shared).
#[derive(Clone)]
pub struct RdsBackend {
    client: aws_sdk_rds::Client,
    /// STS with the same credentials and region: the account keeper acts in.
    sts: aws_sdk_sts::Client,
    /// The account, asked of STS once per process.
    account: IdentityCache,
    /// `rds.requestsPerSecond`.
    rate_limit: RateLimit,
    metrics: Arc<Metrics>,
}

impl RdsBackend {
    pub fn new(
        client: aws_sdk_rds::Client,
        sts: aws_sdk_sts::Client,
        rate_limit: RateLimit,
        metrics: Arc<Metrics>,
    ) -> Self {
        RdsBackend {
            client,
            sts,
            account: IdentityCache::default(),
            rate_limit,
            metrics,
        }
    }

    /// A client that is never called: for tests of everything but databases.
    #[cfg(test)]
    pub fn unconnected(metrics: Arc<Metrics>) -> Self {
        let config = aws_sdk_rds::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .build();
        RdsBackend::new(
            aws_sdk_rds::Client::from_conf(config),
            Self::unconnected_sts(),
            RateLimit::default(),
            metrics,
        )
    }

    /// An STS client that is never called (tests).
    #[cfg(test)]
    pub fn unconnected_sts() -> aws_sdk_sts::Client {
        let config = aws_sdk_sts::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_sdk_sts::config::Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .build();
        aws_sdk_sts::Client::from_conf(config)
    }

    /// A client for the configured region and endpoint; credentials come from the standard AWS
    /// chain (environment, profile, web identity, container or instance metadata).
    pub async fn from_config(
        config: &RdsConfig,
        timeouts: &BackendTimeouts,
        metrics: Arc<Metrics>,
    ) -> Self {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(region) = &config.region {
            loader = loader.region(Region::new(region.clone()));
        }
        let sdk = loader.load().await;
        if sdk.region().is_none() {
            tracing::warn!(
                "no AWS region for RDS: set rds.region, --rds-region or AWS_REGION; \
                 CloudDatabase reconciles will fail until one is set"
            );
        }
        RdsBackend::with_sdk_config(&sdk, config, timeouts, metrics)
    }

    /// Region and credentials from `sdk`, the endpoint override from `config`.
    fn with_sdk_config(
        sdk: &SdkConfig,
        config: &RdsConfig,
        timeouts: &BackendTimeouts,
        metrics: Arc<Metrics>,
    ) -> Self {
        // A hung call must not hold a reconcile slot: give up and let backoff retry. The whole
        // call covers the SDK's three attempts.
        let timeout = TimeoutConfig::builder()
            .connect_timeout(timeouts.connect)
            .operation_attempt_timeout(timeouts.request)
            .operation_timeout(timeouts.request * 3)
            .build();
        let mut builder = aws_sdk_rds::config::Builder::from(sdk).timeout_config(timeout.clone());
        let mut sts = aws_sdk_sts::config::Builder::from(sdk).timeout_config(timeout);
        if let Some(endpoint) = &config.endpoint {
            // `rds.endpoint` is for test servers, which serve STS at the same address (moto).
            let url = endpoint.0.as_str().trim_end_matches('/');
            builder = builder.endpoint_url(url);
            sts = sts.endpoint_url(url);
        }
        RdsBackend::new(
            aws_sdk_rds::Client::from_conf(builder.build()),
            aws_sdk_sts::Client::from_conf(sts.build()),
            RateLimit::new(config.request_rate()),
            metrics,
        )
    }

    /// The AWS account keeper's credentials act in (`sts:GetCallerIdentity`, which needs no IAM
    /// permission), asked once per process: the account a missing instance is compared against
    /// before keeper creates it again.
    pub async fn account(&self) -> Result<String, BackendError> {
        self.account
            .get(|| {
                self.call("get_caller_identity", async {
                    let out = self
                        .sts
                        .get_caller_identity()
                        .send()
                        .await
                        .map_err(|e| classify(e, |_| None))?;
                    out.account()
                        .filter(|a| !a.is_empty())
                        .map(str::to_string)
                        .ok_or_else(|| {
                            RdsError::new(
                                ErrorClass::Permanent,
                                "NoAccount",
                                "STS GetCallerIdentity named no account",
                            )
                        })
                })
            })
            .await
    }

    /// The region the client calls (from `rds.region`, `--rds-region` or the AWS chain).
    pub fn region(&self) -> Option<String> {
        self.client.config().region().map(|r| r.to_string())
    }

    /// Runs one call at `rds.requestsPerSecond` with its metrics and names the operation in its
    /// error. Not an async fn: it hands the call on at once, to be boxed (see
    /// [`measured`]).
    fn call<'a, T: 'a>(
        &'a self,
        operation: &'static str,
        call: impl Future<Output = Result<T, RdsError>> + 'a,
    ) -> impl Future<Output = Result<T, BackendError>> + 'a {
        futures::FutureExt::map(
            measured(&self.metrics, &self.rate_limit, BACKEND, operation, call),
            move |result| result.map_err(|e| e.into_backend(operation)),
        )
    }

    /// Sends one RDS request that changes something, whose answer keeper does not read, as
    /// [`Self::call`] does; `modeled` recognises the operation's modeled faults (see [`classify`]).
    fn act<'a, T: 'a, E>(
        &'a self,
        operation: &'static str,
        request: impl Future<Output = Result<T, SdkError<E, HttpResponse>>> + 'a,
        modeled: impl FnOnce(&E) -> Option<RdsError> + 'a,
    ) -> impl Future<Output = Result<(), BackendError>> + 'a
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.call(operation, async move {
            request.await.map(|_| ()).map_err(|e| classify(e, modeled))
        })
    }

    /// The instance, or `None` when RDS reports `DBInstanceNotFound`.
    pub async fn describe_db_instance(&self, id: &str) -> Result<Option<DbInstance>, BackendError> {
        let call = async {
            let output = self
                .client
                .describe_db_instances()
                .db_instance_identifier(id)
                .send()
                .await
                .map_err(|e| {
                    classify(e, |e| {
                        e.is_db_instance_not_found_fault()
                            .then(|| RdsError::not_found(message(e)))
                    })
                })?;
            output
                .db_instances()
                .first()
                .map(instance_from_sdk)
                .ok_or_else(|| RdsError::not_found(format!("DB instance {id} not found")))
        };
        match self.call("describe_db_instances", call).await {
            Ok(instance) => Ok(Some(instance)),
            Err(e) if e.is_gone() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `CreateDBInstance`; an instance with the identifier already there is a conflict with
    /// code `DBInstanceAlreadyExists` (whose it is, the tags decide).
    pub async fn create_db_instance(&self, instance: &NewInstance) -> Result<(), BackendError> {
        let tags: Vec<Tag> = instance
            .tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect();
        let engine = match instance.engine {
            Engine::Postgres => "postgres",
            Engine::Mysql => "mysql",
        };
        let request = self
            .client
            .create_db_instance()
            .db_instance_identifier(&instance.id)
            .engine(engine)
            .set_engine_version(instance.engine_version.clone())
            .db_instance_class(&instance.instance_class)
            .allocated_storage(instance.storage_gib)
            .master_username(&instance.username)
            .master_user_password(instance.password.expose())
            .set_db_name(instance.database_name.clone())
            .deletion_protection(instance.deletion_protection)
            .set_db_subnet_group_name(instance.db_subnet_group_name.clone())
            .set_vpc_security_group_ids(
                (!instance.vpc_security_group_ids.is_empty())
                    .then(|| instance.vpc_security_group_ids.clone()),
            )
            .set_tags(Some(tags));
        self.act("create_db_instance", request.send(), |e| {
            e.is_db_instance_already_exists_fault()
                .then(|| RdsError::already_exists(message(e)))
        })
        .await
    }

    /// `ModifyDBInstance`, applied immediately.
    pub async fn modify_db_instance(
        &self,
        id: &str,
        modification: &Modification,
    ) -> Result<(), BackendError> {
        let request = self
            .client
            .modify_db_instance()
            .db_instance_identifier(id)
            // Drift is corrected now, not in the next maintenance window.
            .apply_immediately(true)
            .set_db_instance_class(modification.instance_class.clone())
            .set_allocated_storage(modification.storage_gib)
            .set_deletion_protection(modification.deletion_protection)
            .set_master_user_password(
                modification
                    .master_password
                    .as_ref()
                    .map(|p| p.expose().to_string()),
            );
        self.act("modify_db_instance", request.send(), instance_fault)
            .await
    }

    /// `DeleteDBInstance` with or without a final snapshot.
    pub async fn delete_db_instance(
        &self,
        id: &str,
        final_snapshot: &FinalSnapshot,
    ) -> Result<(), BackendError> {
        let request = self.client.delete_db_instance().db_instance_identifier(id);
        // RDS requires exactly one of the two: a snapshot id, or an explicit skip.
        let request = match final_snapshot {
            FinalSnapshot::Take(snapshot) => request
                .skip_final_snapshot(false)
                .final_db_snapshot_identifier(snapshot),
            FinalSnapshot::Skip => request.skip_final_snapshot(true),
        };
        self.act("delete_db_instance", request.send(), instance_fault)
            .await
    }

    /// `RemoveTagsFromResource` on an instance's ARN.
    pub async fn remove_tags_from_resource(
        &self,
        arn: &str,
        keys: &[String],
    ) -> Result<(), BackendError> {
        let request = self
            .client
            .remove_tags_from_resource()
            .resource_name(arn)
            .set_tag_keys(Some(keys.to_vec()));
        self.act("remove_tags_from_resource", request.send(), |e| {
            e.is_db_instance_not_found_fault()
                .then(|| RdsError::not_found(message(e)))
        })
        .await
    }
}

fn instance_from_sdk(instance: &aws_sdk_rds::types::DbInstance) -> DbInstance {
    DbInstance {
        id: instance
            .db_instance_identifier()
            .unwrap_or_default()
            .to_string(),
        arn: instance.db_instance_arn().unwrap_or_default().to_string(),
        state: instance
            .db_instance_status()
            .unwrap_or_default()
            .to_string(),
        endpoint: instance.endpoint().and_then(|e| {
            Some(DatabaseEndpoint {
                address: e.address()?.to_string(),
                port: e.port()?,
            })
        }),
        tags: instance
            .tag_list()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect(),
        deletion_protection: instance.deletion_protection().unwrap_or(false),
        instance_class: instance.db_instance_class().unwrap_or_default().to_string(),
        storage_gib: instance.allocated_storage().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests;

/// A moto server on 127.0.0.1 for tests of the real backend, stopped when dropped.
#[cfg(test)]
pub(crate) mod moto {
    use super::*;

    pub(crate) use crate::test_support::MotoServer;

    /// Region `us-east-1` and fixed credentials, which moto (and a local mock) take.
    pub(crate) async fn sdk_config() -> SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_rds::config::Credentials::new(
                "testing", "testing", None, None, "moto",
            ))
            .load()
            .await
    }

    /// A backend pointed at `server` through the endpoint override, with fixed credentials.
    pub(crate) async fn backend(server: &MotoServer, metrics: Arc<Metrics>) -> RdsBackend {
        let sdk = sdk_config().await;
        let config = RdsConfig {
            endpoint: Some(crate::config::Endpoint(
                format!("{}/", server.url("http")).parse().unwrap(),
            )),
            ..RdsConfig::default()
        };
        RdsBackend::with_sdk_config(&sdk, &config, &BackendTimeouts::default(), metrics)
    }

    /// Final snapshots RDS lists for an instance.
    pub(crate) async fn snapshots(rds: &RdsBackend, instance_id: &str) -> Vec<String> {
        rds.client
            .describe_db_snapshots()
            .db_instance_identifier(instance_id)
            .send()
            .await
            .expect("describe snapshots")
            .db_snapshots()
            .iter()
            .filter_map(|s| s.db_snapshot_identifier().map(str::to_string))
            .collect()
    }
}

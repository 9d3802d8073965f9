//! S3Tenant controller: a tenant account on StorageGRID (or a credential scope on an
//! S3-compatible store), its S3 credentials published in Secret `<name>-s3-credentials`, and a
//! deletion that is refused, loudly and helpfully, while buckets remain (keeper does not drain
//! tenants: see the bucket drain annotation).
//!
//! The decisions live in [`plan`] (pure), the crash-safe StorageGRID sequences in [`provision`],
//! the backends behind small traits in [`backend`]; this module observes and acts on Kubernetes.

pub mod backend;
pub mod plan;
pub mod provision;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::api::ListParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;

use self::backend::{
    AccountBackend, BackendError, CredentialScope, GridAccounts, S3Credentials, S3Scope,
};
use self::plan::{DeletionGate, DeletionStep, RemainingBuckets};
use crate::api::names::default_bucket_name;
use crate::api::{S3Bucket, S3Tenant, S3TenantStatus, TenantPhase};
use crate::backends::storagegrid::{self, Login};
use crate::config::{Endpoint, Provider, S3CompatibleProvider, SecretRef, StorageGridProvider};
use crate::runtime::gauges::{self, StoreGauge};
use crate::runtime::legacy::{Cleanup, Context, ReconcileError, Reconciler};
use crate::runtime::{self, Shared, conditions, secrets};
use crate::server::Readiness;

/// How often a tenant in a permanent error looks again (a changed spec triggers at once; a fixed
/// provider Secret is noticed at this pace).
const PERMANENT_ERROR_RETRY: Duration = Duration::from_secs(300);
/// How often a blocked deletion looks again for buckets that live only on the backend (deleted
/// S3Bucket resources trigger a look at once).
const BLOCKED_RECHECK: Duration = Duration::from_secs(60);
/// How soon to confirm that a deleted account is gone (the grid may delete asynchronously).
const DELETE_CONFIRM: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("provider {0:?} is not in keeper's configuration")]
    UnknownProvider(String),
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    #[error("{0}")]
    ProviderSecret(String),
    #[error("cannot use provider {provider:?}: {message}")]
    ProviderClient { provider: String, message: String },
}

impl Error {
    /// Errors that retrying cannot fix: reported in status and retried on change or slowly.
    fn is_permanent(&self) -> bool {
        match self {
            Error::Kube(_) => false,
            Error::Backend(e) => e.is_permanent(),
            Error::UnknownProvider(_)
            | Error::InvalidSpec(_)
            | Error::ProviderSecret(_)
            | Error::ProviderClient { .. } => true,
        }
    }

    /// The `Ready=False` condition reason.
    fn condition_reason(&self) -> &'static str {
        match self {
            Error::Backend(e) if e.is_bad_credentials() => "BackendCredentialsRefused",
            Error::Backend(_) => "BackendRejected",
            Error::UnknownProvider(_) => "UnknownProvider",
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::ProviderSecret(_) => "ProviderSecretInvalid",
            Error::ProviderClient { .. } => "ProviderConfigInvalid",
            Error::Kube(_) => "KubernetesError",
        }
    }
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Backend(_) => "backend",
            Error::UnknownProvider(_) | Error::ProviderClient { .. } => "config",
            Error::InvalidSpec(_) => "spec",
            Error::ProviderSecret(_) => "secret",
        }
    }
}

/// An endpoint as applications configure it: `https://s3.example.com`, without the trailing
/// slash URL parsing adds to a bare host.
fn endpoint_text(endpoint: &Endpoint) -> String {
    endpoint.0.as_str().trim_end_matches('/').to_string()
}

/// The name of the Secret with the tenant's S3 credentials.
pub fn credentials_secret_name(tenant: &str) -> String {
    format!("{tenant}-s3-credentials")
}

/// The name of the Secret with the tenant account's root password (StorageGRID only).
pub fn root_secret_name(tenant: &str) -> String {
    format!("{tenant}-root-credentials")
}

pub struct S3TenantReconciler {
    /// One StorageGRID client per provider (sharing its token cache between tenants), or why
    /// it could not be built (reported on the tenants that use the provider).
    grids: BTreeMap<String, Result<storagegrid::Client, String>>,
}

impl S3TenantReconciler {
    pub fn new(shared: &Shared) -> Self {
        let grids = shared
            .config
            .providers
            .iter()
            .filter_map(|(name, provider)| match provider {
                Provider::StorageGrid(p) => Some((
                    name.clone(),
                    storagegrid::Client::new(&p.admin_endpoint.0, &p.tls, shared.metrics.clone())
                        .map_err(|e| e.to_string()),
                )),
                Provider::S3Compatible(_) => None,
            })
            .collect();
        S3TenantReconciler { grids }
    }

    fn provider<'a>(
        &self,
        ctx: &'a Context<Self>,
        tenant: &S3Tenant,
    ) -> Result<&'a Provider, Error> {
        ctx.shared
            .config
            .providers
            .get(&tenant.spec.provider)
            .ok_or_else(|| Error::UnknownProvider(tenant.spec.provider.clone()))
    }

    /// The grid, signed in as the administrator named by the provider's Secret.
    async fn grid(
        &self,
        ctx: &Context<Self>,
        name: &str,
        provider: &StorageGridProvider,
    ) -> Result<GridAccounts, Error> {
        let client = match self.grids.get(name) {
            Some(Ok(client)) => client.clone(),
            Some(Err(message)) => {
                return Err(Error::ProviderClient {
                    provider: name.to_string(),
                    message: message.clone(),
                });
            }
            None => return Err(Error::UnknownProvider(name.to_string())),
        };
        let data = read_provider_secret(ctx, &provider.admin_credentials_secret).await?;
        let (username, password) = (
            required_key(&data, &provider.admin_credentials_secret, "username", ctx)?,
            required_key(&data, &provider.admin_credentials_secret, "password", ctx)?,
        );
        Ok(GridAccounts {
            client,
            admin: Login::grid(username, password),
        })
    }
}

async fn read_provider_secret(
    ctx: &Context<S3TenantReconciler>,
    secret: &SecretRef,
) -> Result<BTreeMap<String, String>, Error> {
    let namespace = secret
        .namespace
        .as_deref()
        .unwrap_or(&ctx.shared.operator_namespace);
    secrets::read(&ctx.shared.client, namespace, &secret.name)
        .await?
        .ok_or_else(|| {
            Error::ProviderSecret(format!(
                "provider Secret {namespace}/{} does not exist",
                secret.name
            ))
        })
}

fn required_key(
    data: &BTreeMap<String, String>,
    secret: &SecretRef,
    key: &str,
    ctx: &Context<S3TenantReconciler>,
) -> Result<String, Error> {
    data.get(key)
        .filter(|v| !v.is_empty())
        .cloned()
        .ok_or_else(|| {
            let namespace = secret
                .namespace
                .as_deref()
                .unwrap_or(&ctx.shared.operator_namespace);
            Error::ProviderSecret(format!(
                "provider Secret {namespace}/{} has no key {key:?}",
                secret.name
            ))
        })
}

/// The tenant's Secrets and status on Kubernetes, as a [`provision::TenantStore`].
struct KubeStore<'a> {
    ctx: &'a Context<S3TenantReconciler>,
    tenant: &'a S3Tenant,
    status: Mutex<S3TenantStatus>,
    endpoint: String,
    region: String,
}

impl<'a> KubeStore<'a> {
    fn new(
        ctx: &'a Context<S3TenantReconciler>,
        tenant: &'a S3Tenant,
        status: &S3TenantStatus,
        provider: &StorageGridProvider,
    ) -> Self {
        KubeStore {
            ctx,
            tenant,
            status: Mutex::new(status.clone()),
            endpoint: endpoint_text(&provider.s3_endpoint),
            region: provider.region.clone(),
        }
    }

    fn namespace(&self) -> String {
        self.tenant.namespace().unwrap_or_default()
    }
}

impl provision::TenantStore for KubeStore<'_> {
    type Error = Error;

    fn root_password(&self) -> BoxFuture<'_, Result<Option<String>, Error>> {
        async move {
            let data = secrets::read(
                &self.ctx.shared.client,
                &self.namespace(),
                &root_secret_name(&self.tenant.name_any()),
            )
            .await?;
            Ok(data
                .and_then(|d| d.get("password").cloned())
                .filter(|p| !p.is_empty()))
        }
        .boxed()
    }

    fn store_root_password<'a>(&'a self, password: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        async move {
            let data = BTreeMap::from([("password".to_string(), password.to_string())]);
            secrets::apply(
                &self.ctx.shared.client,
                self.tenant,
                &root_secret_name(&self.tenant.name_any()),
                data,
            )
            .await?;
            Ok(())
        }
        .boxed()
    }

    fn recorded_account(&self) -> Option<String> {
        self.status.lock().expect("status lock").account_id.clone()
    }

    fn record_account<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        async move {
            let status = {
                let mut status = self.status.lock().expect("status lock");
                status.account_id = Some(id.to_string());
                status.clone()
            };
            self.ctx.update_status(self.tenant, &status).await?;
            Ok(())
        }
        .boxed()
    }

    fn published(&self) -> BoxFuture<'_, Result<Option<S3Credentials>, Error>> {
        async move {
            let data = secrets::read(
                &self.ctx.shared.client,
                &self.namespace(),
                &credentials_secret_name(&self.tenant.name_any()),
            )
            .await?;
            Ok(data.and_then(|d| {
                let access = d.get("accessKeyId").filter(|v| !v.is_empty())?;
                let secret = d.get("secretAccessKey").filter(|v| !v.is_empty())?;
                Some(S3Credentials {
                    access_key_id: access.clone(),
                    secret_access_key: secret.clone(),
                })
            }))
        }
        .boxed()
    }

    fn publish<'a>(&'a self, credentials: &'a S3Credentials) -> BoxFuture<'a, Result<(), Error>> {
        async move {
            publish_credentials(
                self.ctx,
                self.tenant,
                credentials,
                &self.endpoint,
                &self.region,
            )
            .await
        }
        .boxed()
    }
}

async fn publish_credentials(
    ctx: &Context<S3TenantReconciler>,
    tenant: &S3Tenant,
    credentials: &S3Credentials,
    endpoint: &str,
    region: &str,
) -> Result<(), Error> {
    let data = BTreeMap::from([
        ("accessKeyId".to_string(), credentials.access_key_id.clone()),
        (
            "secretAccessKey".to_string(),
            credentials.secret_access_key.clone(),
        ),
        ("endpoint".to_string(), endpoint.to_string()),
        ("region".to_string(), region.to_string()),
    ]);
    secrets::apply(
        &ctx.shared.client,
        tenant,
        &credentials_secret_name(&tenant.name_any()),
        data,
    )
    .await?;
    Ok(())
}

/// S3Bucket resources in `namespace` that reference `tenant`, sorted: (resource name, bucket
/// name on the backend). The controller and the admission webhook both ask this.
pub async fn bucket_resources(
    client: &kube::Client,
    namespace: &str,
    tenant: &str,
) -> Result<Vec<(String, String)>, kube::Error> {
    let api: Api<S3Bucket> = Api::namespaced(client.clone(), namespace);
    let mut buckets: Vec<(String, String)> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|b| b.spec.tenant_ref.name == tenant)
        .map(|b| {
            let name = b.name_any();
            let bucket = b
                .status
                .as_ref()
                .and_then(|s| s.bucket_name.clone())
                .or_else(|| b.spec.bucket_name.clone())
                .unwrap_or_else(|| default_bucket_name(namespace, &name));
            (name, bucket)
        })
        .collect();
    buckets.sort();
    Ok(buckets)
}

async fn tenant_bucket_resources(
    ctx: &Context<S3TenantReconciler>,
    tenant: &S3Tenant,
) -> Result<Vec<(String, String)>, Error> {
    let namespace = tenant.namespace().unwrap_or_default();
    Ok(bucket_resources(&ctx.shared.client, &namespace, &tenant.name_any()).await?)
}

impl S3TenantReconciler {
    /// Brings the backend to the spec; fills `status` with what it made.
    async fn provision(
        &self,
        tenant: &S3Tenant,
        ctx: &Context<Self>,
        status: &mut S3TenantStatus,
    ) -> Result<(), Error> {
        let name = tenant.name_any();
        match self.provider(ctx, tenant)? {
            Provider::StorageGrid(provider) => {
                let desired =
                    plan::desired_settings(&name, &tenant.spec).map_err(Error::InvalidSpec)?;
                let grid = self.grid(ctx, &tenant.spec.provider, provider).await?;
                let store = KubeStore::new(ctx, tenant, status, provider);
                let marker = plan::ownership_marker(&tenant.uid().unwrap_or_default());
                let id = provision::ensure(&grid, &store, &marker, &desired).await?;
                *status = store.status.into_inner().expect("status lock");
                status.account_id = Some(id);
                status.s3_endpoint = Some(endpoint_text(&provider.s3_endpoint));
            }
            Provider::S3Compatible(provider) => {
                let credentials = self.verified_scope(ctx, provider).await?;
                publish_credentials(
                    ctx,
                    tenant,
                    &credentials,
                    &endpoint_text(&provider.endpoint),
                    &provider.region,
                )
                .await?;
                status.account_id = None;
                status.s3_endpoint = Some(endpoint_text(&provider.endpoint));
            }
        }
        status.credentials_secret = Some(credentials_secret_name(&name));
        status.bucket_count = Some(tenant_bucket_resources(ctx, tenant).await?.len() as i64);
        Ok(())
    }

    /// The provider's keys, checked with ListBuckets.
    async fn verified_scope(
        &self,
        ctx: &Context<Self>,
        provider: &S3CompatibleProvider,
    ) -> Result<S3Credentials, Error> {
        let secret = &provider.credentials_secret;
        let data = read_provider_secret(ctx, secret).await?;
        let credentials = S3Credentials {
            access_key_id: required_key(&data, secret, "accessKeyId", ctx)?,
            secret_access_key: required_key(&data, secret, "secretAccessKey", ctx)?,
        };
        let scope = S3Scope {
            endpoint: endpoint_text(&provider.endpoint),
            region: provider.region.clone(),
            force_path_style: provider.force_path_style,
            metrics: ctx.shared.metrics.clone(),
        };
        scope.verify(&credentials).await?;
        Ok(credentials)
    }

    /// Decides and performs the next deletion step.
    async fn delete(
        &self,
        tenant: &S3Tenant,
        ctx: &Context<Self>,
        status: &mut S3TenantStatus,
    ) -> Result<Cleanup, Error> {
        let name = tenant.name_any();
        let resources = tenant_bucket_resources(ctx, tenant).await?;
        match plan::deletion_gate(&tenant.spec) {
            DeletionGate::Protected => {
                let message = plan::deletion_protection_message(&name);
                let count = resources.len();
                self.blocked(tenant, ctx, status, "DeletionProtection", message, count)
                    .await?;
                // Turning protection off changes the spec, which triggers the next look.
                return Ok(Cleanup::Wait(Action::await_change()));
            }
            DeletionGate::Retain => return Ok(Cleanup::Done),
            DeletionGate::Proceed => {}
        }
        let provider = match self.provider(ctx, tenant) {
            Ok(provider) => provider,
            // Nothing was ever created on a provider keeper does not know.
            Err(_) if status.account_id.is_none() => return Ok(Cleanup::Done),
            Err(e) => return Err(e),
        };
        let marker = plan::ownership_marker(&tenant.uid().unwrap_or_default());
        let (grid, account, backend_buckets) = match provider {
            Provider::StorageGrid(p) => {
                let grid = self.grid(ctx, &tenant.spec.provider, p).await?;
                let store = KubeStore::new(ctx, tenant, status, p);
                let password = provision::TenantStore::root_password(&store).await?;
                let account = provision::locate_account(&grid, &store, &marker).await?;
                let buckets = match &account {
                    Some(a) => {
                        provision::account_buckets(&grid, &a.id, password.as_deref()).await?
                    }
                    None => Vec::new(),
                };
                (Some(grid), account.map(|a| (a.id, password)), buckets)
            }
            Provider::S3Compatible(_) => (None, None, Vec::new()),
        };
        let remaining = RemainingBuckets::new(resources, backend_buckets);
        let account_id = account.as_ref().map(|(id, _)| id.as_str());
        match plan::deletion_step(account_id, remaining) {
            DeletionStep::Release => Ok(Cleanup::Done),
            DeletionStep::Blocked(buckets) => {
                let count = buckets.count();
                let message = plan::buckets_remain_message(&name, &buckets);
                self.blocked(tenant, ctx, status, "BucketsRemain", message, count)
                    .await?;
                Ok(Cleanup::Wait(Action::requeue(BLOCKED_RECHECK)))
            }
            DeletionStep::DeleteAccount { id } => {
                let grid = grid.expect("only grid tenants have accounts");
                let password = account.and_then(|(_, password)| password);
                provision::revoke_keys(&grid, &id, password.as_deref()).await?;
                match grid.delete_account(&id).await {
                    // Only a 404 confirms; a grid that deletes asynchronously is asked again soon.
                    Ok(()) => match grid.get_account(&id, &marker).await? {
                        None => {
                            tracing::info!(account = %id, "deleted StorageGRID account");
                            Ok(Cleanup::Done)
                        }
                        Some(_) => Ok(Cleanup::Wait(Action::requeue(DELETE_CONFIRM))),
                    },
                    Err(e) if e.is_not_found() => Ok(Cleanup::Done),
                    // A bucket appeared since the check: look again, which names it.
                    Err(e) if e.is_conflict() => {
                        tracing::info!(account = %id, error = %e, "account not deletable yet");
                        Ok(Cleanup::Wait(Action::requeue(DELETE_CONFIRM)))
                    }
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Holds the deletion with `DeletionBlocked=True` and one Warning event per change.
    async fn blocked(
        &self,
        tenant: &S3Tenant,
        ctx: &Context<Self>,
        status: &mut S3TenantStatus,
        reason: &str,
        message: String,
        bucket_count: usize,
    ) -> Result<(), Error> {
        status.phase = Some(TenantPhase::Deleting);
        status.bucket_count = Some(bucket_count as i64);
        let changed = conditions::set(
            &mut status.conditions,
            conditions::DELETION_BLOCKED,
            true,
            reason,
            message.clone(),
            tenant.metadata.generation,
        );
        ctx.update_status(tenant, status).await?;
        if changed {
            ctx.publish(
                tenant,
                EventType::Warning,
                "DeletionBlocked",
                message,
                "Delete",
            )
            .await;
        }
        Ok(())
    }
}

impl Reconciler for S3TenantReconciler {
    type Resource = S3Tenant;
    type Error = Error;
    const NAME: &'static str = "s3tenant";
    const FINALIZER: &'static str = "keeper.dev/tenant-cleanup";

    async fn apply(&self, obj: Arc<S3Tenant>, ctx: &Context<Self>) -> Result<Action, Error> {
        let mut status = obj.status.clone().unwrap_or_default();
        status.observed_generation = obj.metadata.generation;
        conditions::remove(&mut status.conditions, conditions::DELETION_BLOCKED);
        match self.provision(&obj, ctx, &mut status).await {
            Ok(()) => {
                status.phase = Some(TenantPhase::Ready);
                let message = format!(
                    "credentials are in Secret {}",
                    credentials_secret_name(&obj.name_any())
                );
                let changed = conditions::set(
                    &mut status.conditions,
                    conditions::READY,
                    true,
                    "Provisioned",
                    message.clone(),
                    obj.metadata.generation,
                );
                ctx.update_status(&obj, &status).await?;
                if changed {
                    ctx.publish(&obj, EventType::Normal, "Ready", message, "Provision")
                        .await;
                }
                Ok(Action::requeue(runtime::RESYNC))
            }
            Err(e) if e.is_permanent() => {
                self.failed(&obj, ctx, &mut status, &e).await?;
                Ok(Action::requeue(PERMANENT_ERROR_RETRY))
            }
            Err(e) => Err(e),
        }
    }

    async fn cleanup(&self, obj: Arc<S3Tenant>, ctx: &Context<Self>) -> Result<Cleanup, Error> {
        let mut status = obj.status.clone().unwrap_or_default();
        match self.delete(&obj, ctx, &mut status).await {
            Ok(cleanup) => Ok(cleanup),
            Err(e) if e.is_permanent() => {
                status.phase = Some(TenantPhase::Deleting);
                self.failed(&obj, ctx, &mut status, &e).await?;
                Ok(Cleanup::Wait(Action::requeue(PERMANENT_ERROR_RETRY)))
            }
            Err(e) => Err(e),
        }
    }
}

impl S3TenantReconciler {
    /// Reports a permanent error: `Ready=False` with the message, one Warning event per change.
    async fn failed(
        &self,
        tenant: &S3Tenant,
        ctx: &Context<Self>,
        status: &mut S3TenantStatus,
        error: &Error,
    ) -> Result<(), Error> {
        if tenant.metadata.deletion_timestamp.is_none() {
            status.phase = Some(TenantPhase::Failed);
        }
        let message = error.to_string();
        let changed = conditions::set(
            &mut status.conditions,
            conditions::READY,
            false,
            error.condition_reason(),
            message.clone(),
            tenant.metadata.generation,
        );
        ctx.update_status(tenant, status).await?;
        if changed {
            tracing::warn!(error = %message, "tenant failed");
            ctx.publish(
                tenant,
                EventType::Warning,
                error.condition_reason(),
                message,
                "Provision",
            )
            .await;
        }
        Ok(())
    }
}

fn phase_label(tenant: &S3Tenant) -> Option<String> {
    let phase = tenant
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or_default();
    Some(format!("{phase:?}"))
}

fn is_deletion_blocked(tenant: &S3Tenant) -> bool {
    tenant
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, conditions::DELETION_BLOCKED))
}

/// The tenant an S3Bucket belongs to: a bucket's change (above all its deletion) re-checks it.
fn bucket_to_tenant(bucket: S3Bucket) -> Option<ObjectRef<S3Tenant>> {
    let namespace = bucket.namespace()?;
    Some(ObjectRef::new(&bucket.spec.tenant_ref.name).within(&namespace))
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let api = Api::<S3Tenant>::all(shared.client.clone());
    let controller = Controller::new(api, watcher::Config::default()).watches(
        Api::<S3Bucket>::all(shared.client.clone()),
        watcher::Config::default(),
        bucket_to_tenant,
    );
    shared.metrics.register(StoreGauge::new(
        "keeper_tenants",
        "S3Tenant resources by phase.",
        controller.store(),
        &[],
        "phase",
        &["Pending", "Ready", "Failed", "Deleting"],
        phase_label,
    ));
    shared.metrics.register(gauges::deletion_blocked(
        "S3Tenant",
        controller.store(),
        is_deletion_blocked,
    ));
    let ctx = Arc::new(Context::new(
        shared.clone(),
        S3TenantReconciler::new(&shared),
    ));
    runtime::legacy::run(controller, ctx, readiness, shutdown).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(status: Option<S3TenantStatus>) -> S3Tenant {
        let mut t = S3Tenant::new("t", serde_json::from_value(serde_json::json!({})).unwrap());
        t.metadata.namespace = Some("ns".into());
        t.status = status;
        t
    }

    #[test]
    fn buckets_map_to_their_tenant_in_their_namespace() {
        let mut bucket = S3Bucket::new(
            "b",
            serde_json::from_value(serde_json::json!({"tenantRef": {"name": "team-a"}})).unwrap(),
        );
        bucket.metadata.namespace = Some("ns".into());
        let target = bucket_to_tenant(bucket).unwrap();
        assert_eq!(target, ObjectRef::new("team-a").within("ns"));
    }

    #[test]
    fn gauges_classify_by_phase_and_blocked_condition() {
        assert_eq!(phase_label(&tenant(None)).as_deref(), Some("Pending"));
        let mut status = S3TenantStatus {
            phase: Some(TenantPhase::Deleting),
            ..Default::default()
        };
        assert_eq!(
            phase_label(&tenant(Some(status.clone()))).as_deref(),
            Some("Deleting")
        );
        assert!(!is_deletion_blocked(&tenant(Some(status.clone()))));
        conditions::set(
            &mut status.conditions,
            conditions::DELETION_BLOCKED,
            true,
            "BucketsRemain",
            "m",
            None,
        );
        assert!(is_deletion_blocked(&tenant(Some(status))));
    }

    #[test]
    fn error_classes() {
        assert!(Error::InvalidSpec("x".into()).is_permanent());
        assert!(Error::UnknownProvider("x".into()).is_permanent());
        assert!(Error::ProviderSecret("x".into()).is_permanent());
        let transient = Error::Backend(BackendError::Grid(storagegrid::Error::Server {
            operation: "get_account",
            status: 503,
            message: "m".into(),
        }));
        assert!(!transient.is_permanent());
        let refused = Error::Backend(BackendError::Grid(storagegrid::Error::BadCredentials {
            operation: "create_account",
            username: "root".into(),
            message: "m".into(),
        }));
        assert!(refused.is_permanent());
        assert_eq!(refused.condition_reason(), "BackendCredentialsRefused");
    }
}

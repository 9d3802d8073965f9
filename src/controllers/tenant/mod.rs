//! S3Tenant controller: a tenant account on StorageGRID (or a credential scope on an
//! S3-compatible store), its S3 credentials published in Secret `<name>-s3-credentials`, and a
//! deletion that is refused, loudly and helpfully, while buckets remain (keeper does not drain
//! tenants: see the bucket drain annotation).
//!
//! Wiring only: the decisions live in [`plan`] (pure), the backends behind small traits in
//! [`backend`], and [`reconcile`] observes, decides and acts (its crash-safe StorageGRID
//! sequences in `reconcile::provision`).

mod backend;
mod plan;
mod reconcile;

// What the admission webhook decides from, as the controller does: one rule in one place.
pub use plan::{BUCKET_REMOVAL_GUIDANCE, DeletionGate, deletion_gate, deletion_protection_message};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use self::backend::{BackendError, Connector, Live, is_bad_credentials};
use self::plan::account_check::AccountInputs;
use crate::api::names::TENANT_FINALIZER;
use crate::api::{S3Bucket, S3Tenant, S3TenantStatus};
use crate::backends::identity;
use crate::cluster::Kube;
use crate::cluster::triggers;
use crate::config::ControllerKind;
use crate::error::ErrorClass;
use crate::providers::ProviderError;
use crate::runtime::{self, Context, ControllerFailure, Failure, Outcome, Reconciler, Shared, Uid};
use crate::server::Readiness;

/// How often a blocked deletion looks again for buckets that live only on the backend (deleted
/// S3Bucket resources trigger a look at once).
const BLOCKED_RECHECK: Duration = Duration::from_secs(60);
/// How soon to confirm that a deleted account is gone (the grid may delete asynchronously).
const DELETE_CONFIRM: Duration = Duration::from_secs(5);
/// How soon a tenant looks again after letting go of Secrets someone deleted, should their
/// removal not wake it.
const LET_GO_RECHECK: Duration = Duration::from_secs(5);

/// What an S3Tenant reconcile fails with.
pub type Error = Failure<TenantFailure>;

/// The failures only the S3Tenant controller meets.
#[derive(Debug, thiserror::Error)]
pub enum TenantFailure {
    #[error("provider {0:?} is not in keeper's configuration")]
    UnknownProvider(String),
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// The provider's Secret is missing or incomplete.
    #[error("{0}")]
    ProviderSecret(String),
    /// The provider's Secret could not be read (transient).
    #[error("cannot read provider Secret {secret}: {message}")]
    ProviderUnavailable { secret: String, message: String },
    #[error("cannot use provider {provider:?}: {message}")]
    ProviderClient { provider: String, message: String },
    /// The provider's `allowedNamespaces` does not admit the tenant's namespace.
    #[error("{0}")]
    NamespaceNotAllowed(String),
}

impl From<ProviderError> for Error {
    fn from(e: ProviderError) -> Self {
        Failure::Own(match e {
            ProviderError::Unknown(name) => TenantFailure::UnknownProvider(name),
            ProviderError::Secret(message) => TenantFailure::ProviderSecret(message),
            ProviderError::Unavailable { secret, message } => {
                TenantFailure::ProviderUnavailable { secret, message }
            }
        })
    }
}

impl ControllerFailure for TenantFailure {
    fn reason(&self) -> &'static str {
        match self {
            TenantFailure::UnknownProvider(_) | TenantFailure::ProviderClient { .. } => "config",
            TenantFailure::NamespaceNotAllowed(_) => "namespace_not_allowed",
            TenantFailure::InvalidSpec(_) => "invalid_spec",
            TenantFailure::ProviderSecret(_) | TenantFailure::ProviderUnavailable { .. } => {
                "secret"
            }
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            TenantFailure::ProviderUnavailable { .. } => ErrorClass::Transient,
            TenantFailure::UnknownProvider(_)
            | TenantFailure::InvalidSpec(_)
            | TenantFailure::ProviderSecret(_)
            | TenantFailure::ProviderClient { .. }
            | TenantFailure::NamespaceNotAllowed(_) => ErrorClass::Permanent,
        }
    }

    fn condition_reason(&self) -> &'static str {
        match self {
            TenantFailure::UnknownProvider(_) => "ProviderNotConfigured",
            TenantFailure::InvalidSpec(_) => "InvalidSpec",
            TenantFailure::ProviderSecret(_) => "ProviderSecretInvalid",
            TenantFailure::ProviderUnavailable { .. } => "ProviderSecretUnavailable",
            TenantFailure::ProviderClient { .. } => "ProviderConfigInvalid",
            TenantFailure::NamespaceNotAllowed(_) => "NamespaceNotAllowed",
        }
    }

    fn backend_condition_reason(e: &BackendError) -> &'static str {
        if is_bad_credentials(e) {
            "BackendCredentialsRefused"
        } else if identity::is_changed(e) {
            identity::IDENTITY_CHANGED
        } else {
            "BackendError"
        }
    }
}

/// The S3Tenant reconciler over its connection to providers ([`Live`] in production, fakes in
/// tests).
pub struct S3TenantReconciler<C: Connector = Live> {
    connector: C,
    /// The last full look at each StorageGRID tenant's account (by uid) in this process: when,
    /// and what it depended on ([`plan::account_check`]).
    account_looks: Mutex<HashMap<Uid, (Instant, AccountInputs)>>,
}

impl<C: Connector> S3TenantReconciler<C> {
    pub fn new(connector: C) -> Self {
        S3TenantReconciler {
            connector,
            account_looks: Mutex::default(),
        }
    }

    /// Whether this process looked at `uid`'s account fully (and has not forgotten it).
    fn account_looked_at(&self, uid: Uid) -> bool {
        let looks = self.account_looks.lock().expect("account looks lock");
        looks.contains_key(&uid)
    }

    /// How long the last full look at `uid`'s account still stands for the tenant, Ready for its
    /// generation, as it is `now`; `None`: look now.
    fn account_look_stands(&self, uid: Uid, now: &AccountInputs) -> Option<Duration> {
        let looks = self.account_looks.lock().expect("account looks lock");
        let last = looks.get(&uid).map(|(at, inputs)| (at.elapsed(), inputs));
        plan::account_check::look_stands(last, now, runtime::RESYNC)
    }

    fn account_looked(&self, uid: Uid, inputs: AccountInputs) {
        let mut looks = self.account_looks.lock().expect("account looks lock");
        looks.insert(uid, (Instant::now(), inputs));
    }

    /// A tenant being deleted is looked at fully every time: what its last look found goes.
    fn forget_account_look(&self, uid: Uid) {
        self.account_looks
            .lock()
            .expect("account looks lock")
            .remove(&uid);
    }
}

/// S3Bucket resources in `namespace` that reference `tenant`, sorted: (resource name, bucket
/// name on the backend), read through the seam (the informer store once synced). For the
/// controller and the admission webhook alike.
pub async fn bucket_resources(
    kube: &dyn Kube,
    namespace: &str,
    tenant: &str,
) -> Result<Vec<(String, String)>, kube::Error> {
    let buckets = kube.buckets(namespace).await?;
    Ok(plan::tenant_buckets(
        buckets.iter().map(|b| b.as_ref()),
        tenant,
    ))
}

/// The tenant an S3Bucket belongs to: a bucket's change (above all its deletion) re-checks it.
fn bucket_to_tenant(bucket: S3Bucket) -> Option<ObjectRef<S3Tenant>> {
    let namespace = bucket.namespace()?;
    Some(ObjectRef::new(&bucket.spec.tenant_ref.name).within(&namespace))
}

impl<C: Connector> Reconciler for S3TenantReconciler<C> {
    type Resource = S3Tenant;
    type Error = Error;
    const NAME: &'static str = "s3tenant";
    const KIND: ControllerKind = ControllerKind::Tenant;
    const FINALIZER: &'static str = TENANT_FINALIZER;
    // A burst of bucket changes (a GitOps sync of many buckets, a namespace deletion) becomes
    // one tenant reconcile and one status write.
    const DEBOUNCE: Duration = Duration::from_secs(1);

    async fn apply(
        &self,
        obj: Arc<S3Tenant>,
        cx: &Context<Self>,
    ) -> Result<Outcome<S3TenantStatus>, Error> {
        reconcile::apply(cx, &obj).await
    }

    async fn cleanup(
        &self,
        obj: Arc<S3Tenant>,
        cx: &Context<Self>,
    ) -> Result<Outcome<S3TenantStatus>, Error> {
        reconcile::cleanup(cx, &obj).await
    }
}

/// The tenants of a namespace: a change of its labels may allow or deny their provider.
fn tenants_in(store: &Store<S3Tenant>, namespace: &Namespace) -> Vec<ObjectRef<S3Tenant>> {
    let name = namespace.name_any();
    triggers::cached_where(store, |t| t.namespace().as_deref() == Some(name.as_str()))
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Only bucket changes that can change a tenant's answer re-reconcile it (not every status
    // write of every bucket).
    let buckets = triggers::changed(
        shared.informers.buckets().changes(),
        plan::bucket_trigger_key,
    );
    let mut controller = runtime::controller::<S3Tenant>(&shared.informers)
        .watches_stream(buckets, bucket_to_tenant);
    if shared.config.uses_namespace_selector() {
        // Labelling or unlabelling a namespace allows or denies its tenants at once (and their
        // buckets follow the tenant's phase).
        let store = controller.store();
        controller = controller
            .watches_stream(shared.informers.namespaces().triggers(), move |namespace| {
                tenants_in(&store, &namespace)
            });
    }
    let cx = Arc::new(Context::new(shared, S3TenantReconciler::new(Live)));
    runtime::run(controller, cx, readiness, shutdown).await;
    Ok(())
}

#[cfg(test)]
mod tests;

//! The Kube layer: the one seam between the controllers and the Kubernetes API (the handful of
//! calls they make, status and metadata patches, Secrets, events, and the reads they need,
//! tenants, buckets, Secrets, from reflector caches instead of a GET per reconcile), the
//! informers those caches are ([`informer`]) and which of their changes trigger a reconcile
//! ([`triggers`]). It may use `api`, `config`, `error` and `metrics`, nothing above.
//!
//! [`KubeApi`] (module `api`) is the real implementation; `fake::FakeKube` keeps everything in
//! memory so that every controller's reconcile is unit-tested the same way, without an API server.
//! Module `secrets` builds the Secrets keeper writes and the patches that let go of them;
//! `written` keeps what keeper wrote until the cache has caught up with it.

mod api;
mod cached;
#[cfg(test)]
pub mod fake;
pub mod informer;
pub mod retained;
mod secrets;
#[cfg(test)]
mod tests;
pub mod triggers;
mod written;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{ApiResource, ObjectMeta};
use kube::runtime::events::EventType;
use serde_json::Value;

use crate::api::{S3Bucket, S3Tenant};

pub use api::KubeApi;
pub use cached::PackedSecret;
pub use secrets::{
    Hold, LetGo, SecretError, Swap, let_go_of_deleted, owned_by, owned_secret, owned_secret_object,
    secret_data, written_content,
};

/// One event to publish about the reconciled object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

impl Note {
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Self {
        Note {
            type_: EventType::Normal,
            reason,
            message: message.into(),
        }
    }

    pub fn warning(reason: &'static str, message: impl Into<String>) -> Self {
        Note {
            type_: EventType::Warning,
            reason,
            message: message.into(),
        }
    }
}

pub type KubeResult<T> = Result<T, kube::Error>;

/// The object a patch or an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub resource: ApiResource,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Target {
    pub fn of<K: Resource<DynamicType = ()>>(obj: &K) -> Self {
        Self::named::<K>(obj.meta())
    }

    /// The object of kind `K` that `meta` describes (one that may not decode as `K`).
    pub fn named<K: Resource<DynamicType = ()>>(meta: &ObjectMeta) -> Self {
        Target {
            resource: ApiResource::erase::<K>(&()),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }

    fn object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.resource.api_version.clone()),
            kind: Some(self.resource.kind.clone()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..ObjectReference::default()
        }
    }

    /// The controller owner reference that ties a Secret's lifetime to this object.
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.resource.api_version.clone(),
            kind: self.resource.kind.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

/// The calls controllers make to Kubernetes. Object-safe, so the shared context holds one
/// `Arc<dyn Kube>` and tests swap in the fake.
pub trait Kube: Send + Sync + 'static {
    /// A Secret, from the cache when keeper's caches hold it (its own Secrets and the provider
    /// Secrets of the configuration), else read from the API.
    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<Secret>>>;

    /// Creates or updates Secret `name` in the owner's namespace holding exactly `data`, owned by
    /// `owner`, labelled as keeper's and, with [`Hold::UntilReleased`], held by
    /// [`CLEANUP_HOLD`](crate::api::names::CLEANUP_HOLD).
    /// Writes nothing when it already is so. A Secret being deleted gets its data but no hold
    /// (the API refuses new finalizers then; asking again would fail forever). A Secret of that
    /// name that keeper did not create for `owner` is never touched: a conflict. Returns whether
    /// it wrote.
    fn apply_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
        data: BTreeMap<String, String>,
        hold: Hold,
    ) -> BoxFuture<'a, Result<bool, SecretError>>;

    /// Writes Secret `swap.name` as [`Kube::apply_secret`] does, but only if it is still what
    /// `swap.read` is: absent when `read` is `None`, else unchanged since `read` (its
    /// resourceVersion). The API refuses the write with 409 when another writer changed the
    /// Secret in between, or created it. Returns the Secret as it is now.
    fn swap_secret<'a>(
        &'a self,
        owner: &'a Target,
        swap: Swap<'a>,
    ) -> BoxFuture<'a, Result<Secret, SecretError>>;

    /// Lets go of Secret `name` that keeper created for `owner` as `what` says (its hold, or its
    /// ownership and the hold). Returns whether there was anything of it to let go of.
    fn let_go_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
        what: LetGo,
    ) -> BoxFuture<'a, KubeResult<bool>>;

    /// Writes `copy`, a [`retained::retained_copy`] in keeper's namespace, as
    /// [`retained::copy_write`] decides (created; brought up to date when the copy for the same
    /// resource exists; never over another Secret). Returns the Secret as it is now.
    fn keep_copy<'a>(&'a self, copy: Secret) -> BoxFuture<'a, Result<Secret, SecretError>>;

    /// Deletes Secret `name` if keeper created it for `owner` (a Secret of that name keeper did
    /// not create is never touched). Returns whether there was one to delete.
    fn delete_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<bool>>;

    /// Whether the API takes new content in `namespace` now, asked with a dry-run create of a
    /// Secret (nothing is stored): `false` once the namespace is being deleted, when the API's
    /// NamespaceLifecycle admission refuses every create there. A namespace's deletion is never
    /// undone, so `true` also says that nothing keeper saw deleted before the question was
    /// deleted by the namespace's deletion.
    fn accepts_new_content<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, KubeResult<bool>>;

    /// A JSON merge patch of the status subresource.
    fn patch_status<'a>(
        &'a self,
        target: &'a Target,
        patch: Value,
    ) -> BoxFuture<'a, KubeResult<()>>;

    /// A JSON patch of the object (finalizers, annotations). `test` operations make a concurrent
    /// change fail instead of being clobbered. A 404 is success: the object is gone.
    fn patch_json<'a>(
        &'a self,
        target: &'a Target,
        patch: json_patch::Patch,
    ) -> BoxFuture<'a, KubeResult<()>>;

    /// Publishes an event. Failures are logged, never returned: events inform.
    fn publish<'a>(&'a self, target: &'a Target, note: &'a Note) -> BoxFuture<'a, ()>;

    /// The S3Buckets of a namespace, from the cache.
    fn buckets<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, KubeResult<Vec<Arc<S3Bucket>>>>;

    /// An S3Tenant, from the cache.
    fn tenant<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<Arc<S3Tenant>>>>;

    /// An S3Tenant read from the API, not the cache: what a compare-and-swap lost to (the cache
    /// may not show the winning write yet).
    fn tenant_from_api<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<S3Tenant>>>;

    /// An object as the API stores it, untyped (`None` when it is gone): how keeper reads an
    /// object that does not decode as its kind, to say which field is wrong. A LIST by name, so
    /// it needs no `get` permission (keeper's role lists and watches buckets and databases).
    fn raw_object<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, KubeResult<Option<Value>>>;

    /// The labels of a namespace (`None` when it does not exist), from the namespace cache when
    /// keeper watches namespaces (some provider admits namespaces by label), else from the API.
    fn namespace_labels<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<BTreeMap<String, String>>>>;
}

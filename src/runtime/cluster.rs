//! The one seam between the controllers and the Kubernetes API: the handful of calls they make
//! (status and metadata patches, Secrets, events) and the reads they need (tenants, buckets,
//! Secrets) from reflector caches instead of a GET per reconcile.
//!
//! [`KubeApi`] is the real implementation; [`fake::FakeKube`] keeps everything in memory so that
//! every controller's reconcile is unit-tested the same way, without an API server.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams, Preconditions,
};
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::Value;

use super::informer::{Informer, Informers};
use super::outcome::Note;
use crate::api::{S3Bucket, S3Tenant};

/// The label on every Secret keeper creates; keeper's Secret cache watches only these.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "keeper");

/// The finalizer that keeps a Secret other resources' cleanup signs in with (a tenant's root
/// password and keys, which its buckets' cleanup uses) until its owner lets go of it. Deleting a
/// namespace deletes every object in it in no particular order: without the hold, the Secret can
/// be gone before the bucket cleanup that needs it runs, and the namespace never finishes.
pub const CLEANUP_HOLD: &str = "keeper.dev/needed-for-cleanup";

/// Whether a Secret keeper writes is held for its owner's cleanup ([`CLEANUP_HOLD`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Nobody's cleanup reads it: it may go whenever it is deleted.
    No,
    /// Cleanup reads it: it stays until [`Kube::unhold_secret`] or [`Kube::release_secret`].
    UntilReleased,
}

fn held(secret: &Secret) -> bool {
    secret.finalizers().iter().any(|f| f == CLEANUP_HOLD)
}

pub type KubeResult<T> = Result<T, kube::Error>;

/// Why keeper will not use or write a Secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The name is taken by a Secret keeper did not create for this resource. keeper never
    /// reads, writes or deletes it.
    #[error(
        "Secret {namespace}/{name} already exists and {holder}; keeper leaves it untouched: remove it or choose another name"
    )]
    Conflict {
        namespace: String,
        name: String,
        holder: String,
    },
}

impl SecretError {
    /// `secret`, named `name` in `owner`'s namespace, is not `owner`'s.
    fn conflict(owner: &Target, name: &str, secret: &Secret) -> Self {
        SecretError::Conflict {
            namespace: owner.namespace.clone(),
            name: name.to_string(),
            holder: holder(secret),
        }
    }

    /// The condition reason it shows (`SecretConflict` names the Secret and its holder).
    pub fn condition_reason(&self) -> &'static str {
        match self {
            SecretError::Kube(_) => "KubernetesError",
            SecretError::Conflict { .. } => "SecretConflict",
        }
    }

    pub fn class(&self) -> crate::backends::error::ErrorClass {
        match self {
            SecretError::Kube(e) => crate::backends::error::classify_kube(e),
            SecretError::Conflict { .. } => crate::backends::error::ErrorClass::Permanent,
        }
    }
}

/// Who holds a Secret that is not `owner`'s, in words for a condition message.
fn holder(secret: &Secret) -> String {
    match secret.owner_references().first() {
        Some(r) => format!("belongs to {} {}", r.kind, r.name),
        None if secret.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1) => {
            "is labelled as keeper's but owned by no resource".to_string()
        }
        None => "was not created by keeper".to_string(),
    }
}

/// Whether `secret` is the one keeper created for `owner`: it carries `owner`'s uid as an
/// owner reference.
pub fn owned_by(secret: &Secret, owner: &Target) -> bool {
    secret.owner_references().iter().any(|r| r.uid == owner.uid)
}

/// The data of Secret `name` in `owner`'s namespace if keeper created it for `owner`; `None`
/// when it does not exist; a conflict when the name is taken by any other Secret (whose data
/// keeper must not use).
pub async fn owned_secret(
    kube: &dyn Kube,
    owner: &Target,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, SecretError> {
    Ok(owned_secret_object(kube, owner, name)
        .await?
        .map(|secret| secret_data(&secret)))
}

/// Like [`owned_secret`], the whole Secret: its resourceVersion is what a later
/// [`Kube::swap_secret`] is conditional on.
pub async fn owned_secret_object(
    kube: &dyn Kube,
    owner: &Target,
    name: &str,
) -> Result<Option<Secret>, SecretError> {
    match kube.secret(&owner.namespace, name).await? {
        None => Ok(None),
        Some(secret) if owned_by(&secret, owner) => Ok(Some(secret)),
        Some(secret) => Err(SecretError::conflict(owner, name, &secret)),
    }
}

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
        Target {
            resource: ApiResource::erase::<K>(&()),
            namespace: obj.meta().namespace.clone().unwrap_or_default(),
            name: obj.meta().name.clone().unwrap_or_default(),
            uid: obj.meta().uid.clone().unwrap_or_default(),
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

/// A Secret's data as text (keeper stores only text; non-UTF-8 values are skipped).
pub fn secret_data(secret: &Secret) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (key, value) in secret.data.iter().flatten() {
        if let Ok(text) = String::from_utf8(value.0.clone()) {
            out.insert(key.clone(), text);
        }
    }
    for (key, value) in secret.string_data.iter().flatten() {
        out.insert(key.clone(), value.clone());
    }
    out
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
    /// `owner`, labelled as keeper's and, with [`Hold::UntilReleased`], held by [`CLEANUP_HOLD`].
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

    /// Writes Secret `name` as [`Kube::apply_secret`] does, but only if it is still what `read`
    /// is: absent when `read` is `None`, else unchanged since `read` (its
    /// resourceVersion). The API refuses the write with 409 when another writer changed the
    /// Secret in between, or created it. `annotation` is set too: a new value changes the Secret
    /// even when `data` does not, so that nobody who read it before can write it any more.
    /// Returns the Secret as it is now.
    fn swap_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
        read: Option<&'a Secret>,
        data: BTreeMap<String, String>,
        hold: Hold,
        annotation: Option<(&'a str, String)>,
    ) -> BoxFuture<'a, Result<Secret, SecretError>>;

    /// Lets go of Secret `name` that keeper created for `owner` (deletion policy Retain): removes
    /// `owner`'s owner reference so the garbage collector keeps it when `owner` goes, and the
    /// credentials in it stay usable; its [`CLEANUP_HOLD`] goes too, since nobody would ever
    /// remove it afterwards. Returns whether there was one to release.
    fn release_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<bool>>;

    /// Deletes Secret `name` if keeper created it for `owner` (a Secret of that name keeper did
    /// not create is never touched). Returns whether there was one to delete.
    fn delete_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<bool>>;

    /// Removes [`CLEANUP_HOLD`] from Secret `name` that keeper created for `owner`, once nothing
    /// needs it for cleanup any more: a Secret being deleted goes then. Returns whether it held.
    fn unhold_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<bool>>;

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

    /// The labels of a namespace (`None` when it does not exist), from the namespace cache when
    /// keeper watches namespaces (some provider admits namespaces by label), else from the API.
    fn namespace_labels<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<BTreeMap<String, String>>>>;
}

/// The real seam: the process's informers for reads (tenants, buckets, keeper's Secrets, the
/// provider Secrets, namespaces), the API for writes.
pub struct KubeApi {
    client: Client,
    informers: Arc<Informers>,
    /// The provider Secrets the configuration names, each watched by name.
    provider_secrets: Vec<((String, String), Informer<Secret>)>,
    /// Whether namespaces are watched (some provider admits namespaces by label).
    watch_namespaces: bool,
    /// Secrets keeper wrote, until the cache has caught up with the write: a reconcile right
    /// after a write must see it, or it would generate a second password or key.
    written: Mutex<HashMap<(String, String), Secret>>,
}

impl KubeApi {
    /// Starts the watches the seam reads from. `provider_secrets` are (namespace, name) pairs
    /// watched by name, so a rotated provider password or key is used without a restart.
    /// `watch_namespaces` caches namespaces (their labels decide which providers a namespace may
    /// use).
    pub fn start(
        client: Client,
        informers: Arc<Informers>,
        provider_secrets: &[(String, String)],
        watch_namespaces: bool,
    ) -> Self {
        informers.tenants();
        informers.buckets();
        informers.managed_secrets();
        if watch_namespaces {
            informers.namespaces();
        }
        KubeApi {
            provider_secrets: provider_secrets
                .iter()
                .map(|(namespace, name)| {
                    (
                        (namespace.clone(), name.clone()),
                        informers.secret(namespace, name),
                    )
                })
                .collect(),
            informers,
            watch_namespaces,
            written: Mutex::default(),
            client,
        }
    }

    /// A recorder for one event. kube's `Recorder` keeps every event it published for six
    /// minutes, to count repeats into a series, and scans that cache on each publish: one
    /// recorder for the process held the last event of every object (35 MB with 10,000 waiting
    /// buckets) and cost more CPU with every object. keeper publishes an event only when
    /// something changed, so there are no repeats to count: each publish gets a fresh recorder.
    fn recorder(&self, resource: &ApiResource) -> Recorder {
        Recorder::new(
            self.client.clone(),
            Reporter {
                controller: format!("keeper-{}", resource.kind.to_lowercase()),
                instance: std::env::var("POD_NAME").ok(),
            },
        )
    }

    /// The cached Secret, when some cache is responsible for it and has synced.
    fn cached_secret(&self, namespace: &str, name: &str) -> Option<Option<Secret>> {
        let key = ObjectRef::<Secret>::new(name).within(namespace);
        if let Some((_, cache)) = self
            .provider_secrets
            .iter()
            .find(|((ns, n), _)| ns == namespace && n == name)
        {
            return cache
                .synced()
                .then(|| cache.store().get(&key).map(|s| (*s).clone()));
        }
        let managed = self.informers.managed_secrets();
        // Every Secret keeper writes carries its label, so once synced the label-filtered cache
        // knows them all: a miss means keeper has none of that name (no GET per reconcile for a
        // Secret not created yet). A Secret of that name that keeper did not create is not
        // cached; it is found when keeper writes (the create answers AlreadyExists) and is never
        // used or changed.
        managed
            .synced()
            .then(|| managed.store().get(&key).map(|s| (*s).clone()))
    }

    /// The newer of the cached Secret and the one keeper last wrote.
    fn fresher(&self, namespace: &str, name: &str, cached: Option<Secret>) -> Option<Secret> {
        let mut written = self.written.lock().expect("written lock");
        let key = (namespace.to_string(), name.to_string());
        let Some(ours) = written.get(&key) else {
            return cached;
        };
        let version = |s: &Secret| {
            s.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        match (&cached, version(ours)) {
            (Some(c), Some(w)) if version(c).is_some_and(|v| v >= w) => {
                written.remove(&key);
                cached
            }
            _ => Some(ours.clone()),
        }
    }
}

impl KubeApi {
    /// Applies the JSON patch `make` builds for `owner`'s Secret `name`, if it builds one.
    /// Returns whether it patched; a Secret gone meanwhile is not an error.
    async fn patch_secret(
        &self,
        owner: &Target,
        name: &str,
        make: fn(&Secret, &Target) -> Option<json_patch::Patch>,
    ) -> KubeResult<bool> {
        let Some(secret) = self.secret(&owner.namespace, name).await? else {
            return Ok(false);
        };
        let Some(patch) = make(&secret, owner) else {
            return Ok(false);
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &owner.namespace);
        match api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(written) => {
                self.written
                    .lock()
                    .expect("written lock")
                    .insert((owner.namespace.clone(), name.to_string()), written);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Kube for KubeApi {
    fn delete_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<bool>> {
        async move {
            let ours = self.secret(&owner.namespace, name).await?;
            let Some(secret) = ours.filter(|s| owned_by(s, owner)) else {
                return Ok(false);
            };
            // A Secret keeper held for cleanup would otherwise stay Terminating for good.
            if secret.finalizers().iter().any(|f| f == CLEANUP_HOLD) {
                self.unhold_secret(owner, name).await?;
            }
            // Only the Secret that was looked at: one replaced meanwhile is left alone.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: secret.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            self.written
                .lock()
                .expect("written lock")
                .remove(&(owner.namespace.clone(), name.to_string()));
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &owner.namespace);
            match api.delete(name, &params).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
                Err(e) => Err(e),
            }
        }
        .boxed()
    }

    fn release_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<bool>> {
        self.patch_secret(owner, name, release_patch).boxed()
    }

    fn unhold_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<bool>> {
        self.patch_secret(owner, name, unhold_patch).boxed()
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<Secret>>> {
        async move {
            let found = match self.cached_secret(namespace, name) {
                Some(cached) => cached,
                None => {
                    Api::<Secret>::namespaced(self.client.clone(), namespace)
                        .get_opt(name)
                        .await?
                }
            };
            Ok(self.fresher(namespace, name, found))
        }
        .boxed()
    }

    fn apply_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
        data: BTreeMap<String, String>,
        hold: Hold,
    ) -> BoxFuture<'a, Result<bool, SecretError>> {
        async move {
            let namespace = owner.namespace.as_str();
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let existing = self.secret(namespace, name).await?;
            let Some(secret) = desired_secret(owner, name, data.clone(), hold, existing)? else {
                return Ok(false);
            };
            let written = match write_secret(&api, &secret).await {
                Ok(written) => written,
                // A create that finds a Secret of that name the cache does not hold: one keeper
                // did not create (a conflict, left untouched) or one that lost keeper's label.
                // Decide again on what is there.
                Err(kube::Error::Api(status))
                    if status.code == 409 && secret.metadata.resource_version.is_none() =>
                {
                    let found = api.get_opt(name).await?;
                    let Some(secret) = desired_secret(owner, name, data, hold, found)? else {
                        return Ok(false);
                    };
                    write_secret(&api, &secret).await?
                }
                Err(e) => return Err(e.into()),
            };
            self.written
                .lock()
                .expect("written lock")
                .insert((namespace.to_string(), name.to_string()), written);
            Ok(true)
        }
        .boxed()
    }

    fn swap_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
        read: Option<&'a Secret>,
        data: BTreeMap<String, String>,
        hold: Hold,
        annotation: Option<(&'a str, String)>,
    ) -> BoxFuture<'a, Result<Secret, SecretError>> {
        async move {
            let namespace = owner.namespace.as_str();
            let Some(secret) = swapped_secret(owner, name, read, data, hold, annotation)? else {
                return Ok(read
                    .cloned()
                    .expect("only an existing Secret needs no write"));
            };
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let written = match read {
                // Refused with 409 AlreadyExists when another writer created it first: a keeper
                // (decide again on what it wrote, on the next look) or someone else, whose
                // Secret keeper's label-filtered cache never holds (a conflict, left untouched).
                None => match api.create(&PostParams::default(), &secret).await {
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        match api.get_opt(name).await? {
                            Some(found) if !owned_by(&found, owner) => {
                                return Err(SecretError::conflict(owner, name, &found));
                            }
                            _ => return Err(kube::Error::Api(status).into()),
                        }
                    }
                    written => written?,
                },
                // `read`'s resourceVersion: refused with 409 Conflict when it changed since.
                Some(_) => api.replace(name, &PostParams::default(), &secret).await?,
            };
            self.written
                .lock()
                .expect("written lock")
                .insert((namespace.to_string(), name.to_string()), written.clone());
            Ok(written)
        }
        .boxed()
    }

    fn patch_status<'a>(
        &'a self,
        target: &'a Target,
        patch: Value,
    ) -> BoxFuture<'a, KubeResult<()>> {
        async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &target.namespace, &target.resource);
            api.patch_status(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn patch_json<'a>(
        &'a self,
        target: &'a Target,
        patch: json_patch::Patch,
    ) -> BoxFuture<'a, KubeResult<()>> {
        async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &target.namespace, &target.resource);
            match api
                .patch(
                    &target.name,
                    &PatchParams::default(),
                    &Patch::Json::<()>(patch),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(e) => Err(e),
            }
        }
        .boxed()
    }

    fn publish<'a>(&'a self, target: &'a Target, note: &'a Note) -> BoxFuture<'a, ()> {
        async move {
            let event = Event {
                type_: note.type_,
                reason: note.reason.to_string(),
                note: Some(note.message.clone()),
                action: "Reconcile".to_string(),
                secondary: None,
            };
            let recorder = self.recorder(&target.resource);
            if let Err(e) = recorder.publish(&event, &target.object_reference()).await {
                tracing::warn!(error = %e, reason = note.reason, "failed to publish event");
            }
        }
        .boxed()
    }

    fn buckets<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, KubeResult<Vec<Arc<S3Bucket>>>> {
        async move {
            let buckets = self.informers.buckets();
            if buckets.synced() {
                return Ok(buckets
                    .store()
                    .state()
                    .into_iter()
                    .filter(|b| b.namespace().as_deref() == Some(namespace))
                    .collect());
            }
            let api: Api<S3Bucket> = Api::namespaced(self.client.clone(), namespace);
            Ok(api
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(Arc::new)
                .collect())
        }
        .boxed()
    }

    fn tenant<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<Arc<S3Tenant>>>> {
        async move {
            let tenants = self.informers.tenants();
            if tenants.synced() {
                return Ok(tenants.store().get(&ObjectRef::new(name).within(namespace)));
            }
            Ok(self.tenant_from_api(namespace, name).await?.map(Arc::new))
        }
        .boxed()
    }

    fn tenant_from_api<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<S3Tenant>>> {
        async move {
            let api: Api<S3Tenant> = Api::namespaced(self.client.clone(), namespace);
            api.get_opt(name).await
        }
        .boxed()
    }

    fn namespace_labels<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<BTreeMap<String, String>>>> {
        async move {
            let cached = self.watch_namespaces.then(|| self.informers.namespaces());
            let found = match cached.filter(|c| c.synced()) {
                Some(cache) => cache.store().get(&ObjectRef::new(name)),
                None => Api::<Namespace>::all(self.client.clone())
                    .get_opt(name)
                    .await?
                    .map(Arc::new),
            };
            Ok(found.map(|ns| ns.labels().clone()))
        }
        .boxed()
    }
}

/// Creates `secret`, or replaces it when it was read (its resourceVersion makes a concurrent
/// change fail with 409 instead of being overwritten).
async fn write_secret(api: &Api<Secret>, secret: &Secret) -> KubeResult<Secret> {
    match &secret.metadata.name {
        Some(name) if secret.metadata.resource_version.is_some() => {
            api.replace(name, &PostParams::default(), secret).await
        }
        _ => api.create(&PostParams::default(), secret).await,
    }
}

/// The JSON patch that removes `owner`'s reference from `secret` and its [`CLEANUP_HOLD`] (each
/// tested, so a concurrent change fails instead of removing another owner's reference or another
/// finalizer), or `None` when `owner` holds none.
fn release_patch(secret: &Secret, owner: &Target) -> Option<json_patch::Patch> {
    let references = secret.owner_references();
    let index = references.iter().position(|r| r.uid == owner.uid)?;
    let path = format!("/metadata/ownerReferences/{index}");
    let mut ops = vec![
        serde_json::json!({"op": "test", "path": format!("{path}/uid"), "value": owner.uid}),
        serde_json::json!({"op": "remove", "path": path}),
    ];
    ops.extend(unhold_ops(secret));
    Some(serde_json::from_value(Value::Array(ops)).expect("well-formed JSON patch"))
}

/// The JSON patch that removes [`CLEANUP_HOLD`] from `owner`'s `secret`, or `None` when it is
/// not `owner`'s or not held.
fn unhold_patch(secret: &Secret, owner: &Target) -> Option<json_patch::Patch> {
    let ops = unhold_ops(secret);
    if ops.is_empty() || !owned_by(secret, owner) {
        return None;
    }
    Some(serde_json::from_value(Value::Array(ops)).expect("well-formed JSON patch"))
}

/// The operations that remove [`CLEANUP_HOLD`] (tested by value), none when it is absent.
fn unhold_ops(secret: &Secret) -> Vec<Value> {
    let Some(index) = secret.finalizers().iter().position(|f| f == CLEANUP_HOLD) else {
        return Vec::new();
    };
    let path = format!("/metadata/finalizers/{index}");
    vec![
        serde_json::json!({"op": "test", "path": path, "value": CLEANUP_HOLD}),
        serde_json::json!({"op": "remove", "path": path}),
    ]
}

/// The Secret to write so that `name` holds exactly `data` for `owner`, or `None` when the
/// existing one already does; a conflict when the name is taken by a Secret keeper did not create
/// for `owner`. Shared by the real seam and the fake, so both decide alike.
fn desired_secret(
    owner: &Target,
    name: &str,
    data: BTreeMap<String, String>,
    hold: Hold,
    existing: Option<Secret>,
) -> Result<Option<Secret>, SecretError> {
    let encoded: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    let finalizers = (hold == Hold::UntilReleased).then(|| vec![CLEANUP_HOLD.to_string()]);
    match existing {
        None => Ok(Some(Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(owner.namespace.clone()),
                owner_references: Some(vec![owner.owner_reference()]),
                labels: Some(BTreeMap::from([(
                    MANAGED_BY.0.to_string(),
                    MANAGED_BY.1.to_string(),
                )])),
                finalizers,
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_string()),
            data: Some(encoded),
            ..Secret::default()
        })),
        Some(existing) if !owned_by(&existing, owner) => {
            Err(SecretError::conflict(owner, name, &existing))
        }
        Some(mut existing) => {
            let labelled =
                existing.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1);
            // The API refuses a new finalizer on an object being deleted.
            let add_hold = hold == Hold::UntilReleased
                && !held(&existing)
                && existing.metadata.deletion_timestamp.is_none();
            if labelled
                && !add_hold
                && existing.data.as_ref() == Some(&encoded)
                && existing.string_data.is_none()
            {
                return Ok(None);
            }
            existing
                .labels_mut()
                .insert(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string());
            if add_hold {
                existing.finalizers_mut().push(CLEANUP_HOLD.to_string());
            }
            existing.data = Some(encoded);
            existing.string_data = None;
            Ok(Some(existing))
        }
    }
}

/// What [`Kube::swap_secret`] writes over `read`: [`desired_secret`] with `annotation` set, or
/// `None` when nothing would change.
fn swapped_secret(
    owner: &Target,
    name: &str,
    read: Option<&Secret>,
    data: BTreeMap<String, String>,
    hold: Hold,
    annotation: Option<(&str, String)>,
) -> Result<Option<Secret>, SecretError> {
    let desired = desired_secret(owner, name, data, hold, read.cloned())?;
    let Some((key, value)) = annotation else {
        return Ok(desired);
    };
    let mut secret = desired
        .or_else(|| read.cloned())
        .expect("a Secret that does not exist is always written");
    secret.annotations_mut().insert(key.to_string(), value);
    Ok(Some(secret))
}

#[cfg(test)]
pub mod fake {
    //! An in-memory [`Kube`] for unit tests: Secrets, tenants and buckets in maps; status
    //! patches applied to stored copies and recorded; events recorded; failures injectable.

    use super::*;

    /// What the fake saw, in order.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Call {
        ApplySecret { namespace: String, name: String },
        ReleaseSecret { namespace: String, name: String },
        DeleteSecret { namespace: String, name: String },
        UnholdSecret { namespace: String, name: String },
        PatchStatus { name: String, patch: Value },
        PatchJson { name: String, patch: Value },
        Publish { name: String, note: Note },
    }

    #[derive(Default)]
    pub struct FakeKube {
        pub secrets: Mutex<BTreeMap<(String, String), Secret>>,
        pub tenants: Mutex<Vec<Arc<S3Tenant>>>,
        pub buckets: Mutex<Vec<Arc<S3Bucket>>>,
        /// Namespaces by name, with their labels.
        pub namespaces: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
        pub calls: Mutex<Vec<Call>>,
        /// The next write (status, JSON patch or Secret) fails with this HTTP status.
        pub fail_next_write: Mutex<Option<u16>>,
        version: Mutex<u64>,
        /// The resourceVersion each object's last status patch gave it.
        status_versions: Mutex<BTreeMap<String, String>>,
        /// Reads of a Secret that stop once they have read (`"secret NAME"`), so that a test can
        /// run a second writer between a read and the write that relies on it.
        pub pauses: crate::runtime::testing::Pauses,
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("injected by FakeKube", "Injected")
                .with_code(code)
                .boxed(),
        )
    }

    impl FakeKube {
        fn take_failure(&self) -> KubeResult<()> {
            match self.fail_next_write.lock().expect("lock").take() {
                Some(code) => Err(api_error(code)),
                None => Ok(()),
            }
        }

        fn record(&self, call: Call) {
            self.calls.lock().expect("lock").push(call);
        }

        /// Every call made so far.
        pub fn calls(&self) -> Vec<Call> {
            self.calls.lock().expect("lock").clone()
        }

        /// The events published so far.
        pub fn notes(&self) -> Vec<Note> {
            self.calls()
                .into_iter()
                .filter_map(|c| match c {
                    Call::Publish { note, .. } => Some(note),
                    _ => None,
                })
                .collect()
        }

        /// The data of a stored Secret.
        pub fn secret_data(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
            self.secrets
                .lock()
                .expect("lock")
                .get(&(namespace.to_string(), name.to_string()))
                .map(secret_data)
        }

        /// Stores a Secret as if someone had created it.
        pub fn put_secret(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(namespace.to_string()),
                    resource_version: Some("1".to_string()),
                    ..ObjectMeta::default()
                },
                data: Some(
                    data.into_iter()
                        .map(|(k, v)| (k, ByteString(v.into_bytes())))
                        .collect(),
                ),
                ..Secret::default()
            };
            self.secrets
                .lock()
                .expect("lock")
                .insert((namespace.to_string(), name.to_string()), secret);
        }

        /// Stores a Secret as keeper would have created it for `owner`.
        pub fn put_owned_secret(&self, owner: &Target, name: &str, data: BTreeMap<String, String>) {
            self.put_secret(&owner.namespace, name, data);
            let mut secrets = self.secrets.lock().expect("lock");
            let secret = secrets
                .get_mut(&(owner.namespace.clone(), name.to_string()))
                .expect("just stored");
            secret.metadata.owner_references = Some(vec![owner.owner_reference()]);
            secret.metadata.labels = Some(BTreeMap::from([(
                MANAGED_BY.0.to_string(),
                MANAGED_BY.1.to_string(),
            )]));
        }
    }

    impl FakeKube {
        /// Deletes a Secret as the API does (as the namespace controller would): marked with a
        /// deletionTimestamp while finalizers hold it, removed otherwise.
        pub fn delete_secret(&self, namespace: &str, name: &str) {
            let key = (namespace.to_string(), name.to_string());
            let mut secrets = self.secrets.lock().expect("lock");
            if let Some(secret) = secrets.get_mut(&key) {
                secret.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::now(),
                    ));
            }
            Self::settle(&mut secrets, &key);
        }

        /// Removes a Secret being deleted that no finalizer holds any more, as the API does.
        fn settle(secrets: &mut BTreeMap<(String, String), Secret>, key: &(String, String)) {
            if secrets.get(key).is_some_and(|s| {
                s.metadata.deletion_timestamp.is_some() && s.finalizers().is_empty()
            }) {
                secrets.remove(key);
            }
        }

        /// Applies `change` to `owner`'s Secret `name` when `applies` says it would change it.
        fn change_owned_secret(
            &self,
            owner: &Target,
            name: &str,
            applies: fn(&Secret, &Target) -> Option<json_patch::Patch>,
            change: impl FnOnce(&mut Secret),
            call: Call,
        ) -> bool {
            let key = (owner.namespace.clone(), name.to_string());
            let mut secrets = self.secrets.lock().expect("lock");
            let Some(secret) = secrets.get_mut(&key) else {
                return false;
            };
            if applies(secret, owner).is_none() {
                return false;
            }
            change(secret);
            Self::settle(&mut secrets, &key);
            drop(secrets);
            self.record(call);
            true
        }
    }

    impl Kube for FakeKube {
        fn delete_secret<'a>(
            &'a self,
            owner: &'a Target,
            name: &'a str,
        ) -> BoxFuture<'a, KubeResult<bool>> {
            async move {
                let key = (owner.namespace.clone(), name.to_string());
                let deleted = {
                    let mut secrets = self.secrets.lock().expect("lock");
                    let ours = secrets.get(&key).is_some_and(|s| owned_by(s, owner));
                    ours && secrets.remove(&key).is_some()
                };
                if deleted {
                    self.record(Call::DeleteSecret {
                        namespace: owner.namespace.clone(),
                        name: name.to_string(),
                    });
                }
                Ok(deleted)
            }
            .boxed()
        }

        fn release_secret<'a>(
            &'a self,
            owner: &'a Target,
            name: &'a str,
        ) -> BoxFuture<'a, KubeResult<bool>> {
            let released = self.change_owned_secret(
                owner,
                name,
                release_patch,
                |secret| {
                    secret.owner_references_mut().retain(|r| r.uid != owner.uid);
                    secret.finalizers_mut().retain(|f| f != CLEANUP_HOLD);
                },
                Call::ReleaseSecret {
                    namespace: owner.namespace.clone(),
                    name: name.to_string(),
                },
            );
            async move { Ok(released) }.boxed()
        }

        fn unhold_secret<'a>(
            &'a self,
            owner: &'a Target,
            name: &'a str,
        ) -> BoxFuture<'a, KubeResult<bool>> {
            let unheld = self.change_owned_secret(
                owner,
                name,
                unhold_patch,
                |secret| secret.finalizers_mut().retain(|f| f != CLEANUP_HOLD),
                Call::UnholdSecret {
                    namespace: owner.namespace.clone(),
                    name: name.to_string(),
                },
            );
            async move { Ok(unheld) }.boxed()
        }

        fn secret<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, KubeResult<Option<Secret>>> {
            let found = self
                .secrets
                .lock()
                .expect("lock")
                .get(&(namespace.to_string(), name.to_string()))
                .cloned();
            async move {
                self.pauses.stop_if_asked(&format!("secret {name}")).await;
                Ok(found)
            }
            .boxed()
        }

        fn apply_secret<'a>(
            &'a self,
            owner: &'a Target,
            name: &'a str,
            data: BTreeMap<String, String>,
            hold: Hold,
        ) -> BoxFuture<'a, Result<bool, SecretError>> {
            async move {
                let key = (owner.namespace.clone(), name.to_string());
                let existing = self.secrets.lock().expect("lock").get(&key).cloned();
                let Some(mut secret) = desired_secret(owner, name, data, hold, existing)? else {
                    return Ok(false);
                };
                self.take_failure().map_err(SecretError::Kube)?;
                let mut version = self.version.lock().expect("lock");
                *version += 1;
                secret.metadata.resource_version = Some(version.to_string());
                self.secrets.lock().expect("lock").insert(key, secret);
                self.record(Call::ApplySecret {
                    namespace: owner.namespace.clone(),
                    name: name.to_string(),
                });
                Ok(true)
            }
            .boxed()
        }

        fn swap_secret<'a>(
            &'a self,
            owner: &'a Target,
            name: &'a str,
            read: Option<&'a Secret>,
            data: BTreeMap<String, String>,
            hold: Hold,
            annotation: Option<(&'a str, String)>,
        ) -> BoxFuture<'a, Result<Secret, SecretError>> {
            async move {
                let key = (owner.namespace.clone(), name.to_string());
                let mut secrets = self.secrets.lock().expect("lock");
                let version = |s: Option<&Secret>| {
                    s.map(|s| s.metadata.resource_version.clone().unwrap_or_default())
                };
                if version(secrets.get(&key)) != version(read) {
                    return Err(SecretError::Kube(api_error(409)));
                }
                let Some(mut secret) = swapped_secret(owner, name, read, data, hold, annotation)?
                else {
                    return Ok(read
                        .cloned()
                        .expect("only an existing Secret needs no write"));
                };
                self.take_failure().map_err(SecretError::Kube)?;
                let mut version = self.version.lock().expect("lock");
                *version += 1;
                secret.metadata.resource_version = Some(version.to_string());
                secrets.insert(key, secret.clone());
                self.record(Call::ApplySecret {
                    namespace: owner.namespace.clone(),
                    name: name.to_string(),
                });
                Ok(secret)
            }
            .boxed()
        }

        fn patch_status<'a>(
            &'a self,
            target: &'a Target,
            patch: Value,
        ) -> BoxFuture<'a, KubeResult<()>> {
            async move {
                // A precondition holds unless another patch came in since: the first patch from
                // a version wins, the next from the same version is refused, as the API does.
                if let Some(expected) = patch["metadata"]["resourceVersion"].as_str() {
                    let patched = self.status_versions.lock().expect("lock");
                    if patched
                        .get(&target.name)
                        .is_some_and(|current| current != expected)
                    {
                        return Err(api_error(409));
                    }
                }
                self.take_failure()?;
                let mut version = self.version.lock().expect("lock");
                *version += 1;
                self.status_versions
                    .lock()
                    .expect("lock")
                    .insert(target.name.clone(), version.to_string());
                self.record(Call::PatchStatus {
                    name: target.name.clone(),
                    patch,
                });
                Ok(())
            }
            .boxed()
        }

        fn patch_json<'a>(
            &'a self,
            target: &'a Target,
            patch: json_patch::Patch,
        ) -> BoxFuture<'a, KubeResult<()>> {
            async move {
                self.take_failure()?;
                self.record(Call::PatchJson {
                    name: target.name.clone(),
                    patch: serde_json::to_value(&patch).expect("patch serializes"),
                });
                Ok(())
            }
            .boxed()
        }

        fn publish<'a>(&'a self, target: &'a Target, note: &'a Note) -> BoxFuture<'a, ()> {
            self.record(Call::Publish {
                name: target.name.clone(),
                note: note.clone(),
            });
            async {}.boxed()
        }

        fn buckets<'a>(
            &'a self,
            namespace: &'a str,
        ) -> BoxFuture<'a, KubeResult<Vec<Arc<S3Bucket>>>> {
            let found = self
                .buckets
                .lock()
                .expect("lock")
                .iter()
                .filter(|b| b.namespace().as_deref() == Some(namespace))
                .cloned()
                .collect();
            async move { Ok(found) }.boxed()
        }

        fn tenant<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, KubeResult<Option<Arc<S3Tenant>>>> {
            let found = self
                .tenants
                .lock()
                .expect("lock")
                .iter()
                .find(|t| t.namespace().as_deref() == Some(namespace) && t.name_any() == name)
                .cloned();
            async move { Ok(found) }.boxed()
        }

        fn tenant_from_api<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
        ) -> BoxFuture<'a, KubeResult<Option<S3Tenant>>> {
            async move {
                Ok(self
                    .tenant(namespace, name)
                    .await?
                    .map(|t| t.as_ref().clone()))
            }
            .boxed()
        }

        fn namespace_labels<'a>(
            &'a self,
            name: &'a str,
        ) -> BoxFuture<'a, KubeResult<Option<BTreeMap<String, String>>>> {
            let found = self.namespaces.lock().expect("lock").get(name).cloned();
            async move { Ok(found) }.boxed()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeKube;
    use super::*;

    fn owner() -> Target {
        Target {
            resource: ApiResource::erase::<S3Bucket>(&()),
            namespace: "ns".into(),
            name: "b".into(),
            uid: "uid-1".into(),
        }
    }

    #[tokio::test]
    async fn a_secret_is_written_once_labelled_and_owned() {
        let kube = FakeKube::default();
        let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
        assert!(
            kube.apply_secret(&owner(), "s", data.clone(), Hold::No)
                .await
                .unwrap()
        );
        assert!(
            !kube
                .apply_secret(&owner(), "s", data.clone(), Hold::No)
                .await
                .unwrap()
        );
        let stored = kube.secret("ns", "s").await.unwrap().unwrap();
        assert_eq!(stored.labels().get(MANAGED_BY.0).unwrap(), MANAGED_BY.1);
        assert_eq!(stored.owner_references()[0].uid, "uid-1");
        assert_eq!(secret_data(&stored), data);
    }

    #[tokio::test]
    async fn an_injected_failure_writes_nothing() {
        let kube = FakeKube::default();
        *kube.fail_next_write.lock().unwrap() = Some(503);
        let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
        assert!(
            kube.apply_secret(&owner(), "s", data, Hold::No)
                .await
                .is_err()
        );
        assert!(kube.secret("ns", "s").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_secret_keeper_did_not_create_for_the_owner_is_never_written_or_read() {
        let kube = FakeKube::default();
        let theirs = BTreeMap::from([("password".to_string(), "theirs".to_string())]);
        kube.put_secret("ns", "s", theirs.clone());
        let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
        let err = kube
            .apply_secret(&owner(), "s", data.clone(), Hold::No)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, SecretError::Conflict { holder, .. } if holder == "was not created by keeper"),
            "{err}"
        );
        assert_eq!(err.condition_reason(), "SecretConflict");
        assert_eq!(kube.secret_data("ns", "s"), Some(theirs.clone()));
        assert!(
            owned_secret(&kube, &owner(), "s").await.is_err(),
            "its data is never used"
        );

        // Another keeper resource's Secret is named as such.
        let other = Target {
            uid: "uid-2".into(),
            name: "other".into(),
            ..owner()
        };
        kube.put_owned_secret(&other, "t", theirs.clone());
        let err = kube
            .apply_secret(&owner(), "t", data, Hold::No)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("belongs to S3Bucket other"),
            "{err}"
        );
        assert_eq!(
            owned_secret(&kube, &other, "t").await.unwrap(),
            Some(theirs),
            "its owner reads it"
        );
    }

    #[tokio::test]
    async fn a_released_secret_stays_with_its_data_and_no_longer_belongs_to_the_owner() {
        let kube = FakeKube::default();
        let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
        kube.apply_secret(&owner(), "s", data.clone(), Hold::No)
            .await
            .unwrap();
        assert!(kube.release_secret(&owner(), "s").await.unwrap());
        let kept = kube.secret("ns", "s").await.unwrap().expect("kept");
        assert!(
            !owned_by(&kept, &owner()),
            "the garbage collector no longer deletes it"
        );
        assert_eq!(secret_data(&kept), data);
        assert!(!kube.release_secret(&owner(), "s").await.unwrap(), "once");
        assert!(!kube.release_secret(&owner(), "missing").await.unwrap());
    }

    #[tokio::test]
    async fn a_held_secret_outlives_its_deletion_and_stays_readable_until_unheld() {
        let kube = FakeKube::default();
        let data = BTreeMap::from([("password".to_string(), "p".to_string())]);
        kube.apply_secret(&owner(), "s", data.clone(), Hold::UntilReleased)
            .await
            .unwrap();
        let stored = kube.secret("ns", "s").await.unwrap().unwrap();
        assert_eq!(stored.finalizers(), [CLEANUP_HOLD]);

        // The namespace controller deletes it: it stays, being deleted, and its owner reads it.
        kube.delete_secret("ns", "s");
        let deleting = kube.secret("ns", "s").await.unwrap().expect("held");
        assert!(deleting.metadata.deletion_timestamp.is_some());
        assert_eq!(
            owned_secret(&kube, &owner(), "s").await.unwrap(),
            Some(data.clone())
        );
        // Applying it again writes nothing: no new finalizer on an object being deleted.
        assert!(
            !kube
                .apply_secret(&owner(), "s", data.clone(), Hold::UntilReleased)
                .await
                .unwrap()
        );

        assert!(kube.unhold_secret(&owner(), "s").await.unwrap());
        assert!(
            kube.secret("ns", "s").await.unwrap().is_none(),
            "gone once unheld"
        );
        assert!(!kube.unhold_secret(&owner(), "s").await.unwrap());
    }

    #[tokio::test]
    async fn a_secret_written_before_holds_existed_gets_the_hold_unless_it_is_being_deleted() {
        let kube = FakeKube::default();
        let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
        kube.put_owned_secret(&owner(), "old", data.clone());
        assert!(
            kube.apply_secret(&owner(), "old", data.clone(), Hold::UntilReleased)
                .await
                .unwrap(),
            "the hold is added even though the data is unchanged"
        );
        assert_eq!(
            kube.secret("ns", "old")
                .await
                .unwrap()
                .unwrap()
                .finalizers(),
            [CLEANUP_HOLD]
        );

        kube.put_owned_secret(&owner(), "going", data.clone());
        kube.secrets
            .lock()
            .unwrap()
            .get_mut(&("ns".to_string(), "going".to_string()))
            .unwrap()
            .finalizers_mut()
            .push("someone.else/finalizer".into());
        kube.delete_secret("ns", "going");
        let changed = BTreeMap::from([("k".to_string(), "new".to_string())]);
        assert!(
            kube.apply_secret(&owner(), "going", changed.clone(), Hold::UntilReleased)
                .await
                .unwrap(),
            "new data is written"
        );
        let going = kube.secret("ns", "going").await.unwrap().unwrap();
        assert_eq!(
            going.finalizers(),
            ["someone.else/finalizer"],
            "no hold added"
        );
        assert_eq!(secret_data(&going), changed);
        assert!(
            !kube
                .apply_secret(&owner(), "going", changed, Hold::UntilReleased)
                .await
                .unwrap(),
            "and nothing more: no write loop"
        );
    }

    #[tokio::test]
    async fn releasing_a_held_secret_drops_the_hold_with_the_owner_reference() {
        let kube = FakeKube::default();
        let data = BTreeMap::from([("k".to_string(), "v".to_string())]);
        kube.apply_secret(&owner(), "s", data.clone(), Hold::UntilReleased)
            .await
            .unwrap();
        assert!(kube.release_secret(&owner(), "s").await.unwrap());
        let kept = kube.secret("ns", "s").await.unwrap().expect("kept");
        assert!(kept.finalizers().is_empty());
        assert!(!owned_by(&kept, &owner()));
        assert!(
            !kube.unhold_secret(&owner(), "s").await.unwrap(),
            "no longer the owner's to unhold"
        );
    }

    #[test]
    fn the_unhold_patch_removes_only_the_hold_and_tests_it() {
        let mut secret = Secret::default();
        secret.metadata.owner_references = Some(vec![owner().owner_reference()]);
        assert!(unhold_patch(&secret, &owner()).is_none(), "not held");
        secret.metadata.finalizers = Some(vec!["other".into(), CLEANUP_HOLD.into()]);
        let patch = serde_json::to_value(unhold_patch(&secret, &owner()).unwrap()).unwrap();
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": CLEANUP_HOLD},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
        let stranger = Target {
            uid: "uid-9".into(),
            ..owner()
        };
        assert!(unhold_patch(&secret, &stranger).is_none(), "not its owner");
        let release = serde_json::to_value(release_patch(&secret, &owner()).unwrap()).unwrap();
        assert_eq!(release.as_array().unwrap().len(), 4, "reference and hold");
    }

    #[test]
    fn the_release_patch_removes_only_the_owners_reference_and_tests_it() {
        let mut secret = Secret::default();
        let other = Target {
            uid: "uid-0".into(),
            ..owner()
        };
        secret.metadata.owner_references =
            Some(vec![other.owner_reference(), owner().owner_reference()]);
        let patch = serde_json::to_value(release_patch(&secret, &owner()).unwrap()).unwrap();
        assert_eq!(patch[0]["path"], "/metadata/ownerReferences/1/uid");
        assert_eq!(patch[0]["value"], "uid-1");
        assert_eq!(patch[1]["op"], "remove");
        assert!(release_patch(&Secret::default(), &owner()).is_none());
    }
}

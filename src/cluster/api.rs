//! The real seam: the process's informers for reads, the API for writes, and what keeper wrote
//! until its caches have caught up.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::Value;

use super::informer::{Informer, Informers};
use super::secrets::{Swap, deleted_by_write, desired_secret, swapped_secret, write_secret};
use super::written::{Written, version, version_of};
use super::{Hold, Kube, KubeResult, LetGo, Note, PackedSecret, SecretError, Target, owned_by};
use crate::api::names::{CLEANUP_HOLD, MANAGED_BY};
use crate::api::{S3Bucket, S3Tenant};

/// The real seam: the process's informers for reads (tenants, buckets, keeper's Secrets, the
/// provider Secrets, namespaces), the API for writes.
pub struct KubeApi {
    client: Client,
    informers: Arc<Informers>,
    /// The provider Secrets the configuration names, each watched by name.
    provider_secrets: Vec<((String, String), Informer<Secret>)>,
    /// Whether namespaces are watched (some provider admits namespaces by label).
    watch_namespaces: bool,
    /// Secrets keeper wrote, until the cache has caught up with the write (see [`Written`]).
    written: Arc<Written>,
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
        let written = Arc::new(Written::default());
        {
            let written = written.clone();
            informers
                .managed_secrets()
                .observe(move |change| written.cache_changed(change));
        }
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
            written,
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
        self.read_cached(namespace, name, Secret::clone, PackedSecret::unpack)
    }

    /// What `read` makes of the cached Secret (`read_packed` of keeper's own, kept packed), when
    /// some cache is responsible for it and has synced.
    fn read_cached<R>(
        &self,
        namespace: &str,
        name: &str,
        read: impl FnOnce(&Secret) -> R,
        read_packed: impl FnOnce(&PackedSecret) -> R,
    ) -> Option<Option<R>> {
        if let Some((_, cache)) = self
            .provider_secrets
            .iter()
            .find(|((ns, n), _)| ns == namespace && n == name)
        {
            let key = ObjectRef::<Secret>::new(name).within(namespace);
            return cache
                .synced()
                .then(|| cache.store().get(&key).map(|s| read(&s)));
        }
        if !self.informers.scope().covers(namespace) {
            // Outside the watched namespaces (keeper's own, for its retained copies): no cache.
            return None;
        }
        let managed = self.informers.managed_secrets();
        // Every Secret keeper writes carries its label, so once synced the label-filtered cache
        // knows them all: a miss means keeper has none of that name (no GET per reconcile for a
        // Secret not created yet). A Secret of that name that keeper did not create is not
        // cached; it is found when keeper writes (the create answers AlreadyExists) and is never
        // used or changed.
        let key = ObjectRef::<PackedSecret>::new(name).within(namespace);
        managed
            .synced()
            .then(|| managed.store().get(&key).map(|s| read_packed(&s)))
    }

    /// keeper wrote `secret`: read back until the cache has it. The cached version is read
    /// without decoding the cached Secret (it is asked under read-your-writes' lock).
    fn wrote(&self, secret: Secret) {
        let (namespace, name) = (secret.namespace().unwrap_or_default(), secret.name_any());
        self.written.wrote(secret, || {
            self.read_cached(&namespace, &name, version, |packed| {
                version_of(packed.meta())
            })
            .flatten()
            .flatten()
        });
    }
}

impl KubeApi {
    /// Lets go of `owner`'s Secret `name` as `what` says, with the JSON patch it makes, if there
    /// is anything to let go of. Returns whether it patched; a Secret gone meanwhile is not an
    /// error.
    async fn patch_secret(&self, owner: &Target, name: &str, what: LetGo) -> KubeResult<bool> {
        let Some(secret) = self.secret(&owner.namespace, name).await? else {
            return Ok(false);
        };
        let Some(patch) = what.patch(&secret, owner) else {
            return Ok(false);
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &owner.namespace);
        match api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            // A Secret being deleted goes with its last finalizer: nothing written is left to
            // remember (kept, it would outlive the deletion its watch event already reported).
            Ok(written) if deleted_by_write(&written) => {
                self.written.forget(&owner.namespace, name);
                Ok(true)
            }
            Ok(written) => {
                self.wrote(written);
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
                self.patch_secret(owner, name, LetGo::Hold).await?;
            }
            // Only the Secret that was looked at: one replaced meanwhile is left alone.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: secret.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            self.written.forget(&owner.namespace, name);
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &owner.namespace);
            match api.delete(name, &params).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
                Err(e) => Err(e),
            }
        }
        .boxed()
    }

    fn let_go_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
        what: LetGo,
    ) -> BoxFuture<'a, KubeResult<bool>> {
        self.patch_secret(owner, name, what).boxed()
    }

    fn accepts_new_content<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, KubeResult<bool>> {
        async move {
            // Labelled as keeper's Secrets are, so that a policy admitting those admits it.
            let probe = Secret {
                metadata: kube::api::ObjectMeta {
                    generate_name: Some("keeper-probe-".to_string()),
                    labels: Some(BTreeMap::from([(
                        MANAGED_BY.0.to_string(),
                        MANAGED_BY.1.to_string(),
                    )])),
                    ..Default::default()
                },
                ..Secret::default()
            };
            let params = PostParams {
                dry_run: true,
                field_manager: None,
            };
            let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            match api.create(&params, &probe).await {
                Ok(_) => Ok(true),
                Err(e) if crate::error::namespace_terminating(&e) => Ok(false),
                Err(e) => Err(e),
            }
        }
        .boxed()
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
            Ok(self.written.fresher(namespace, name, found))
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
            self.wrote(written);
            Ok(true)
        }
        .boxed()
    }

    fn keep_copy<'a>(&'a self, copy: Secret) -> BoxFuture<'a, Result<Secret, SecretError>> {
        async move {
            let namespace = copy.namespace().unwrap_or_default();
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
            // Read from the API: keeper's caches hold only the Secrets it labels as its own.
            let existing = api.get_opt(&copy.name_any()).await?;
            match super::retained::copy_write(existing.clone(), &copy)? {
                Some(secret) => Ok(write_secret(&api, &secret).await?),
                None => Ok(existing.expect("nothing to write only over the copy")),
            }
        }
        .boxed()
    }

    fn swap_secret<'a>(
        &'a self,
        owner: &'a Target,
        swap: Swap<'a>,
    ) -> BoxFuture<'a, Result<Secret, SecretError>> {
        async move {
            let (name, read) = (swap.name, swap.read);
            let namespace = owner.namespace.as_str();
            let Some(secret) = swapped_secret(owner, swap)? else {
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
            self.wrote(written.clone());
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

    fn raw_object<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, KubeResult<Option<Value>>> {
        async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &target.namespace, &target.resource);
            let by_name = ListParams::default().fields(&format!("metadata.name={}", target.name));
            let listed = api.list(&by_name).await?;
            Ok(listed
                .items
                .into_iter()
                .next()
                .map(|obj| serde_json::to_value(obj).expect("a listed object serializes")))
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

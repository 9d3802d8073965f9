//! An in-memory [`Kube`] for unit tests: Secrets, tenants and buckets in maps; status
//! patches applied to stored copies and recorded; events recorded; failures injectable.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde_json::Value;

use crate::api::names::MANAGED_BY;
use crate::api::{S3Bucket, S3Tenant};

use super::secrets::*;
use super::*;

/// What the fake saw, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    ApplySecret { namespace: String, name: String },
    ReleaseSecret { namespace: String, name: String },
    KeepCopy { namespace: String, name: String },
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
    /// Objects as the API stores them, by namespace and name, for [`Kube::raw_object`].
    pub raw_objects: Mutex<BTreeMap<(String, String), Value>>,
    /// The next write (status, JSON patch or Secret) fails with this HTTP status.
    pub fail_next_write: Mutex<Option<u16>>,
    /// The next Secret read fails with this HTTP status.
    pub fail_next_read: Mutex<Option<u16>>,
    /// Namespaces being deleted: a Secret created there is refused, as the API's
    /// NamespaceLifecycle admission refuses it.
    pub terminating: Mutex<std::collections::BTreeSet<String>>,
    version: Mutex<u64>,
    /// The resourceVersion each object's last status patch gave it.
    status_versions: Mutex<BTreeMap<String, String>>,
    /// Reads of a Secret that stop once they have read (`"secret NAME"`), so that a test can
    /// run a second writer between a read and the write that relies on it.
    pub pauses: crate::test_support::Pauses,
}

/// The API's refusal of new content in namespace `namespace`, which is being deleted.
fn refused_as_terminating(namespace: &str) -> kube::Error {
    let status = serde_json::json!({
        "status": "Failure", "code": 403, "reason": "Forbidden",
        "message": format!("unable to create new content in namespace {namespace} because it is being terminated"),
        "details": {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    });
    kube::Error::Api(
        serde_json::from_value::<kube::core::Status>(status)
            .expect("a Status")
            .boxed(),
    )
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

    /// Changes a stored Secret in place, as someone else's write would (the test says what the
    /// write changed, its resourceVersion included).
    pub fn edit_secret(&self, namespace: &str, name: &str, edit: impl FnOnce(&mut Secret)) {
        let key = (namespace.to_string(), name.to_string());
        edit(
            self.secrets
                .lock()
                .expect("lock")
                .get_mut(&key)
                .expect("stored"),
        );
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
        if secrets
            .get(key)
            .is_some_and(|s| s.metadata.deletion_timestamp.is_some() && s.finalizers().is_empty())
        {
            secrets.remove(key);
        }
    }

    /// Lets go of `owner`'s Secret `name` as `what` says, with the JSON patch the API would get.
    fn let_go(&self, owner: &Target, name: &str, what: LetGo) -> bool {
        let key = (owner.namespace.clone(), name.to_string());
        let mut secrets = self.secrets.lock().expect("lock");
        let Some(secret) = secrets.get_mut(&key) else {
            return false;
        };
        let Some(patch) = what.patch(secret, owner) else {
            return false;
        };
        let mut patched = serde_json::to_value(&*secret).expect("a Secret serializes");
        json_patch::patch(&mut patched, &patch)
            .expect("the patch applies to what it was made from");
        *secret = serde_json::from_value(patched).expect("a patched Secret deserializes");
        Self::settle(&mut secrets, &key);
        drop(secrets);
        let (namespace, name) = key;
        self.record(match what {
            LetGo::Hold => Call::UnholdSecret { namespace, name },
            LetGo::Ownership => Call::ReleaseSecret { namespace, name },
        });
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

    fn let_go_secret<'a>(
        &'a self,
        owner: &'a Target,
        name: &'a str,
        what: LetGo,
    ) -> BoxFuture<'a, KubeResult<bool>> {
        let done = self.let_go(owner, name, what);
        async move { Ok(done) }.boxed()
    }

    fn accepts_new_content<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, KubeResult<bool>> {
        let accepts = !self.terminating.lock().expect("lock").contains(namespace);
        async move { Ok(accepts) }.boxed()
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
        let failure = self.fail_next_read.lock().expect("lock").take();
        async move {
            if let Some(code) = failure {
                return Err(api_error(code));
            }
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

    fn keep_copy<'a>(&'a self, copy: Secret) -> BoxFuture<'a, Result<Secret, SecretError>> {
        async move {
            let key = (copy.namespace().unwrap_or_default(), copy.name_any());
            let existing = self.secrets.lock().expect("lock").get(&key).cloned();
            let Some(mut secret) = super::retained::copy_write(existing.clone(), &copy)? else {
                return Ok(existing.expect("nothing to write only over the copy"));
            };
            self.take_failure().map_err(SecretError::Kube)?;
            let mut version = self.version.lock().expect("lock");
            *version += 1;
            secret.metadata.resource_version = Some(version.to_string());
            secret.metadata.uid = Some(format!("uid-{}", key.1));
            self.secrets
                .lock()
                .expect("lock")
                .insert(key.clone(), secret.clone());
            self.record(Call::KeepCopy {
                namespace: key.0,
                name: key.1,
            });
            Ok(secret)
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
            let key = (owner.namespace.clone(), name.to_string());
            let mut secrets = self.secrets.lock().expect("lock");
            let version = |s: Option<&Secret>| {
                s.map(|s| s.metadata.resource_version.clone().unwrap_or_default())
            };
            if version(secrets.get(&key)) != version(read) {
                return Err(SecretError::Kube(api_error(409)));
            }
            if read.is_none() && self.terminating.lock().expect("lock").contains(&key.0) {
                return Err(SecretError::Kube(refused_as_terminating(&key.0)));
            }
            let Some(mut secret) = swapped_secret(owner, swap)? else {
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

    fn buckets<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, KubeResult<Vec<Arc<S3Bucket>>>> {
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

    fn raw_object<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, KubeResult<Option<Value>>> {
        let key = (target.namespace.clone(), target.name.clone());
        let found = self.raw_objects.lock().expect("lock").get(&key).cloned();
        async move { Ok(found) }.boxed()
    }

    fn namespace_labels<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, KubeResult<Option<BTreeMap<String, String>>>> {
        let found = self.namespaces.lock().expect("lock").get(name).cloned();
        async move { Ok(found) }.boxed()
    }
}

//! The Secrets keeper writes: who holds them, whose they are, the Secret a write wants, and the
//! patches that let go of them.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::Kube;
use crate::api::names::{CLEANUP_HOLD, MANAGED_BY};

use super::{KubeResult, Target};

/// Whether a Secret keeper writes is held for its owner's cleanup ([`CLEANUP_HOLD`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Nobody's cleanup reads it: it may go whenever it is deleted.
    No,
    /// Cleanup reads it: it stays until keeper lets go of it ([`Kube::let_go_secret`]).
    UntilReleased,
}

/// What keeper gives up of a Secret it created for an owner ([`Kube::let_go_secret`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetGo {
    /// Its [`CLEANUP_HOLD`], once nothing needs the Secret for cleanup any more: a Secret being
    /// deleted goes then.
    Hold,
    /// The owner's reference and the hold (deletion policy Retain): the garbage collector keeps
    /// the Secret when the owner goes, and the credentials in it stay usable; the hold goes too,
    /// since nobody would ever remove it afterwards.
    Ownership,
}

impl LetGo {
    /// The JSON patch that lets go of `owner`'s `secret` so, or `None` when there is nothing of
    /// it to let go of (not `owner`'s, or not held).
    pub(super) fn patch(self, secret: &Secret, owner: &Target) -> Option<json_patch::Patch> {
        match self {
            LetGo::Hold => unhold_patch(secret, owner),
            LetGo::Ownership => release_patch(secret, owner),
        }
    }
}

pub(super) fn held(secret: &Secret) -> bool {
    secret.finalizers().iter().any(|f| f == CLEANUP_HOLD)
}

/// Whether `written`, as the API answered a write, is gone: being deleted, its last finalizer
/// went with the write, and the API deleted it.
pub(super) fn deleted_by_write(written: &Secret) -> bool {
    written.metadata.deletion_timestamp.is_some() && written.finalizers().is_empty()
}

/// Whether `secret`, one of `owner`'s, is being deleted while keeper's hold keeps it: deleted by
/// someone while `owner` lives, it would stay Terminating until `owner` goes.
fn deleted_under_hold(secret: &Secret, owner: &Target) -> bool {
    owned_by(secret, owner) && held(secret) && secret.metadata.deletion_timestamp.is_some()
}

/// Lets go of those of `owner`'s Secrets `names` that someone deleted while `owner` lives, which
/// keeper's cleanup hold would keep Terminating until `owner` goes; `owner`'s next reconcile,
/// woken by their removal, writes them again as if they had never been written. Not while the
/// namespace is being deleted: that deletion took them, and `owner`'s cleanup needs them. Returns
/// the names let go. Call it last in a reconcile: until they go, the Secrets still hold what
/// the reconcile signs in with.
pub async fn let_go_of_deleted(
    kube: &dyn Kube,
    owner: &Target,
    names: &[String],
) -> KubeResult<Vec<String>> {
    let mut deleted = Vec::new();
    for name in names {
        let read = kube.secret(&owner.namespace, name).await?;
        if read.is_some_and(|s| deleted_under_hold(&s, owner)) {
            deleted.push(name.clone());
        }
    }
    if deleted.is_empty() {
        return Ok(deleted);
    }
    // Asked after the deletion was seen: a namespace whose deletion had started by then refuses,
    // and one that takes new content now was not being deleted when the Secrets were.
    match kube.accepts_new_content(&owner.namespace).await {
        Ok(true) => {}
        Ok(false) => return Ok(Vec::new()),
        Err(e) => {
            // Unknown: the hold stays, as it would have before keeper asked.
            tracing::warn!(error = %e, secrets = ?deleted, "cannot tell whether the namespace is being deleted; deleted Secrets stay held");
            return Ok(Vec::new());
        }
    }
    for name in &deleted {
        kube.let_go_secret(owner, name, LetGo::Hold).await?;
    }
    Ok(deleted)
}

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
    /// The name is taken by the Secret keeper made for an earlier resource of the same kind and
    /// name, deleted since (a bucket deleted and created again): it names that resource as its
    /// owner, so Kubernetes' garbage collector removes it shortly, and keeper writes its own then.
    #[error(
        "Secret {namespace}/{name} still belongs to the {kind} of this name deleted before (uid {uid}); Kubernetes' garbage collector removes it shortly, then keeper writes this {kind}'s own"
    )]
    OfDeletedOwner {
        namespace: String,
        name: String,
        kind: String,
        uid: String,
    },
}

impl SecretError {
    /// `secret`, named `name` in `owner`'s namespace, is not `owner`'s.
    pub(super) fn conflict(owner: &Target, name: &str, secret: &Secret) -> Self {
        let predecessor = secret.owner_references().iter().find(|r| {
            r.controller == Some(true)
                && r.kind == owner.resource.kind
                && r.name == owner.name
                && r.uid != owner.uid
        });
        if let Some(earlier) = predecessor {
            return SecretError::OfDeletedOwner {
                namespace: owner.namespace.clone(),
                name: name.to_string(),
                kind: earlier.kind.clone(),
                uid: earlier.uid.clone(),
            };
        }
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
            SecretError::OfDeletedOwner { .. } => "SecretOfDeletedOwner",
        }
    }

    pub fn class(&self) -> crate::error::ErrorClass {
        match self {
            SecretError::Kube(e) => crate::error::classify_kube(e),
            SecretError::Conflict { .. } => crate::error::ErrorClass::Permanent,
            // Garbage collection settles it: retried with backoff, shown if it lasts.
            SecretError::OfDeletedOwner { .. } => crate::error::ErrorClass::Transient,
        }
    }
}

/// Who holds a Secret that is not `owner`'s, in words for a condition message.
pub(super) fn holder(secret: &Secret) -> String {
    match secret.owner_references().first() {
        Some(r) => format!("belongs to {} {}", r.kind, r.name),
        None if secret.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1) => {
            "is labelled as keeper's but owned by no resource".to_string()
        }
        None => "was not created by keeper".to_string(),
    }
}

/// What keeper wrote of a Secret, hashed (a [`triggers::edited`] key): its data, type, labels,
/// owners and finalizers, and whether it is being deleted. Not its annotations, where keeper
/// records claims of its own.
///
/// [`triggers::edited`]: super::triggers::edited
pub fn written_content(secret: &Secret) -> u64 {
    let meta = &secret.metadata;
    let owners: Vec<_> = secret
        .owner_references()
        .iter()
        .map(|r| (&r.kind, &r.name, &r.uid, r.controller))
        .collect();
    let data: Vec<_> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k, &v.0))
        .collect();
    super::triggers::key_of((
        data,
        &secret.string_data,
        &secret.type_,
        &meta.labels,
        owners,
        &meta.finalizers,
        meta.deletion_timestamp.is_some(),
    ))
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

/// Creates `secret`, or replaces it when it was read (its resourceVersion makes a concurrent
/// change fail with 409 instead of being overwritten).
pub(super) async fn write_secret(api: &Api<Secret>, secret: &Secret) -> KubeResult<Secret> {
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
pub(super) fn unhold_ops(secret: &Secret) -> Vec<Value> {
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
pub(super) fn desired_secret(
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

/// A conditional write of one Secret of an owner ([`Kube::swap_secret`]).
pub struct Swap<'a> {
    pub name: &'a str,
    /// The Secret as read, `None` when it did not exist: the write happens only while it is
    /// still so.
    pub read: Option<&'a Secret>,
    pub data: BTreeMap<String, String>,
    pub hold: Hold,
    /// Set too: a new value changes the Secret even when `data` does not, so that nobody who
    /// read it before can write it any more.
    pub annotation: Option<(&'a str, String)>,
}

/// What [`Kube::swap_secret`] writes over `swap.read`: [`desired_secret`] with the annotation
/// set, or `None` when nothing would change.
pub(super) fn swapped_secret(
    owner: &Target,
    swap: Swap<'_>,
) -> Result<Option<Secret>, SecretError> {
    let Swap {
        name,
        read,
        data,
        hold,
        annotation,
    } = swap;
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

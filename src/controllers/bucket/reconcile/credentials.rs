//! The bucket's credentials Secret: which keys it carries ([`settle_keys`]), published and
//! rotated on request ([`publish_credentials`]), and whether the store accepts them yet
//! ([`KeysVerdict`]), which the Ready decision takes in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::super::backend::{BucketBackend, Connector, KeyCheck};
use super::super::plan::keys::{self as key_plan, FirstLook, KeySource, Publication};
use super::super::plan::lifecycle::{self};
use super::super::plan::ready::KeysVerdict;
use super::super::plan::requests::{Kind, Request};
use super::super::{BucketFailure, Error, S3BucketReconciler};
use super::{View, record_handled, request};
use crate::api::names::bucket_credentials_secret_name;
use crate::api::{S3Bucket, S3BucketStatus};
use crate::backends::Keys;
use crate::cluster::{Hold, SecretError, Swap, Target, owned_secret_object, secret_data};
use crate::config::Provider;
use crate::providers::ProviderClients;
use crate::runtime::{Context, Note, Outcome, Uid};

/// The published endpoint of a provider (as configured, so existing Secrets stay unchanged).
fn published_endpoint(provider: &Provider) -> String {
    match provider {
        Provider::StorageGrid(p) => p.s3_endpoint.to_string(),
        Provider::S3Compatible(p) => p.endpoint.to_string(),
    }
}

/// Annotation set on a bucket's credentials Secret when keeper claims it before deleting access
/// keys the Secret does not carry (see [`key_plan::KeySteps::sweep`]); the value is when.
const KEY_SWEEP_ANNOTATION: &str = "keeper.dev/key-sweep";

/// The keys the credentials Secret carries after [`settle_keys`].
struct Settled {
    keys: Keys,
    /// New keys were published by this reconcile.
    issued: bool,
    /// The key published before was deleted (a rotation).
    replaced: bool,
}

/// The bucket's credentials Secret as read at the start of a reconcile: every write of it is
/// conditional on this version, so that a second writer (another keeper without leader
/// election, or this one behind a stale cache) makes the write fail rather than be overwritten.
struct CredentialsSecret<'a> {
    owner: Target,
    name: &'a str,
    read: Option<Secret>,
}

impl CredentialsSecret<'_> {
    /// Writes `data` if the Secret is still as read. A conflict is the API's 409.
    async fn swap<C: Connector>(
        &mut self,
        cx: &Context<S3BucketReconciler<C>>,
        data: BTreeMap<String, String>,
        annotation: Option<(&'static str, String)>,
    ) -> Result<(), SecretError> {
        let written = cx
            .kube()
            .swap_secret(
                &self.owner,
                Swap {
                    name: self.name,
                    read: self.read.as_ref(),
                    data,
                    // Not held for cleanup: the bucket's cleanup removes its keys on the backend
                    // by the bucket's name, without reading them back.
                    hold: Hold::No,
                    annotation,
                },
            )
            .await?;
        self.read = Some(written);
        Ok(())
    }

    /// Changes the Secret (an annotation only) from the version read, so that no writer that read
    /// it before can publish any more: the keys it was about to publish may then be deleted.
    async fn claim<C: Connector>(
        &mut self,
        cx: &Context<S3BucketReconciler<C>>,
        now: Timestamp,
    ) -> Result<(), SecretError> {
        let data = self.read.as_ref().map(secret_data).unwrap_or_default();
        self.swap(cx, data, Some((KEY_SWEEP_ANNOTATION, now.to_string())))
            .await
    }
}

/// Decides with [`key_plan`] which keys the Secret carries, and makes it so: the published keys
/// stay, the provider's are published, or the user's keys are listed, keys nobody holds deleted
/// and a new key issued and published (see [`key_plan::KeySteps`] for why deletions wait for a
/// write of the Secret). `replace`: new keys are wanted (a rotation, or the published keys are
/// lost).
async fn settle_keys<B: BucketBackend, C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    backend: &B,
    secret: &mut CredentialsSecret<'_>,
    replace: bool,
    data: impl Fn(&Keys) -> BTreeMap<String, String>,
    view: &View<'_>,
) -> Result<Settled, Error> {
    let bucket = &view.desired.name;
    let source = backend.key_source();
    let published = secret
        .read
        .as_ref()
        .map(secret_data)
        .as_ref()
        .and_then(lifecycle::keys_from);
    let users_key = source
        .users_key(published.as_ref())
        .map(|k| k.access_key_id.clone());
    // The last reconcile ended Ready: the published key was checked then, and nothing was left
    // on the user's keys by an interrupted issuance of this process. Another writer's may have
    // left one: this process lists the user's keys once before it trusts that.
    let uid = Uid::of(view.obj);
    let settled = lifecycle::was_ready(view.obj) && cx.reconciler.keys_listed.contains(uid);
    let kept = |keys: Keys| Settled {
        keys,
        issued: false,
        replaced: false,
    };
    let limit = match key_plan::first_look(&source, published.as_ref(), replace, settled) {
        FirstLook::Keep => {
            let keys = published.expect("kept keys are published");
            secret.swap(cx, data(&keys), None).await?;
            return Ok(kept(keys));
        }
        FirstLook::Publish(keys) => {
            secret.swap(cx, data(&keys), None).await?;
            return Ok(Settled {
                issued: published.as_ref() != Some(&keys),
                ..kept(keys)
            });
        }
        FirstLook::Inventory { limit } => limit,
    };
    let listed = backend.user_keys(bucket, users_key.as_deref()).await?;
    cx.reconciler.keys_listed.insert(uid);
    let steps = key_plan::key_steps(&listed, users_key.as_deref(), replace, limit);
    if !steps.sweep.is_empty() {
        secret.claim(cx, view.now).await?;
        for id in &steps.sweep {
            backend.delete_key(bucket, id).await?;
        }
    }
    if !steps.issue {
        let keys = published.expect("keys are issued unless the published key stays");
        secret.swap(cx, data(&keys), None).await?;
        return Ok(kept(keys));
    }
    let keys = backend.create_key(bucket).await?;
    let written = secret.swap(cx, data(&keys), None).await;
    let publication = match &written {
        Ok(()) => Publication::Written,
        Err(SecretError::Kube(kube::Error::Api(status))) if status.code == 409 => Publication::Lost,
        Err(_) => Publication::Unknown,
    };
    let mut deletions = Ok(());
    for id in key_plan::keys_to_delete(&steps, &keys.access_key_id, publication) {
        if let Err(e) = backend.delete_key(bucket, &id).await {
            deletions = Err(e);
        }
    }
    match (written, publication) {
        (Ok(()), _) => {
            // Retried by the next reconcile: this one does not end Ready, so the user's keys are
            // listed again.
            deletions?;
            Ok(Settled {
                replaced: users_key.is_some_and(|id| steps.retire.contains(&id)),
                issued: true,
                keys,
            })
        }
        (Err(_), Publication::Lost) => {
            if let Err(e) = deletions {
                tracing::warn!(error = %e, bucket, "cannot delete the key issued here (another writer published first); it stays on the bucket's user until its keys are next listed");
            }
            Err(BucketFailure::Retry(format!(
                "Secret {:?} was changed by another writer while keys were issued here; they were not published",
                secret.name
            ))
            .into())
        }
        (Err(e), _) => Err(e.into()),
    }
}

/// Publishes `<name>-credentials`, handles `keeper.dev/rotate-credentials`, and says whether
/// the store accepts the keys.
pub(super) async fn publish_credentials<B: BucketBackend, C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    backend: &B,
    obj: &S3Bucket,
    view: &View<'_>,
    clients: &ProviderClients,
    out: &mut Outcome<S3BucketStatus>,
) -> Result<KeysVerdict, Error> {
    let bucket = &view.desired.name;
    let name = bucket_credentials_secret_name(&obj.name_any());
    let owner = Target::of(obj);
    let read = owned_secret_object(cx.kube(), &owner, &name).await?;
    // A Ready bucket's Secret is gone: deleted by hand, or by the deletion of its namespace,
    // which would refuse the new Secret once a key was made for it. Asked first (a dry run), so
    // that a namespace being deleted costs no key; unknown, the key is made as before.
    if read.is_none()
        && lifecycle::was_ready(obj)
        && matches!(
            cx.kube().accepts_new_content(&owner.namespace).await,
            Ok(false)
        )
    {
        return Ok(KeysVerdict::Withheld(
            lifecycle::WITHHELD_NAMESPACE_TERMINATING,
        ));
    }
    let rotation = request(obj, Kind::RotateCredentials);
    if let Request::Handled(value) = &rotation {
        record_handled(out, Kind::RotateCredentials, value);
    }
    let rotate = rotation.is_pending();
    // Only keys the store did not know at the last look can be lost: keys it knows but denies
    // would be replaced by keys denied the same way, and applications holding them would break.
    let lost = key_plan::keys_lost(key_plan::keys_unknown_since(obj.status.as_ref()), view.now);
    let endpoint = published_endpoint(&clients.config);
    let mut secret = CredentialsSecret {
        owner,
        name: &name,
        read,
    };
    let Settled {
        keys,
        issued,
        replaced,
    } = settle_keys(
        cx,
        backend,
        &mut secret,
        rotate || lost,
        |keys| lifecycle::secret_data(keys, &endpoint, &view.desired.region, bucket),
        view,
    )
    .await?;
    // New keys (and keys still refused at the last look) are tried before the bucket is called
    // Ready: an application handed the Secret must be able to use it.
    let unverified = key_plan::keys_unverified_since(obj.status.as_ref()).is_some();
    let refused = if issued || unverified {
        match backend.check_keys(bucket, &keys).await? {
            KeyCheck::Works => None,
            KeyCheck::NotYet(answer) => Some(answer),
        }
    } else {
        None
    };
    if lost && issued {
        out.note(Note::warning(
            "CredentialsReplaced",
            format!(
                "the keys in Secret {name:?} were refused for {}s or more, so they are gone from the store: published new keys",
                key_plan::KEYS_LOST_AFTER.as_secs()
            ),
        ));
    }
    let shared = matches!(backend.key_source(), KeySource::Provider(_));
    if rotate {
        let note = if shared {
            format!(
                "Secret {name:?} carries provider {:?}'s own keys (sharedCredentials: true): rotate the provider's keys instead",
                clients.name
            )
        } else {
            let retired = if replaced {
                " and deleted the old key"
            } else {
                ""
            };
            format!("Published new keys in Secret {name:?}{retired}")
        };
        out.note(Note::normal("CredentialsRotated", note));
        // The request annotation stays (a GitOps tool may own it): the value is recorded.
        if let Some(value) = rotation.value() {
            record_handled(out, Kind::RotateCredentials, value);
        }
    }
    Ok(match refused {
        Some(answer) => KeysVerdict::NotYetValid { answer, issued },
        None if shared => KeysVerdict::Shared(clients.name.clone()),
        None => KeysVerdict::Work,
    })
}

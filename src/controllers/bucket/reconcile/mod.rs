//! Performs the plan: resolves the tenant and its storage, observes the bucket, decides with
//! [`super::plan`], acts through [`BucketBackend`] and reports everything as an [`Outcome`] that
//! the shared runtime writes (status, events, the handled-request annotations).
//!
//! A live bucket's reconcile ([`apply`]) has two halves: the storage ([`apply_bucket`]: create or
//! converge the bucket, refresh usage, run the drain machine, in [`drain`]) and its credentials
//! ([`credentials`]); whether it is Ready is decided once, from both, by [`plan::ready`](ready).
//! A deleted bucket's ([`deletion`]) drains if asked, refuses while objects remain and deletes
//! the bucket once empty. [`intent`] records a create in status before it happens.
//!
//! The storage halves talk to the storage only through the backend trait, so they are tested
//! against an in-memory fake; the rest adds what needs Kubernetes (tenant, Secrets).

mod credentials;
pub(super) mod deletion;
mod drain;
mod intent;

pub use deletion::cleanup;

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::backend::{
    BucketBackend, Connector, DesiredBucket, Ensured, NotConnected, Observed, Owner, TenantStorage,
    Wait,
};
use super::plan::drain::{self as drain_plan, DrainSettings};
use super::plan::lifecycle::{self, Adoption, TenantGate};
use super::plan::ready::{self, KeysVerdict, Usable};
use super::plan::requests::{self, Kind, Request};
use super::plan::usage::{self, IdleCheck, Look, Looks};
use super::{ADOPT_ANNOTATION, BucketFailure, Error, RECHECK, S3BucketReconciler};
use crate::api::names::{bucket_credentials_secret_name, validate_bucket_name};
use crate::api::{BucketPhase, S3Bucket, S3BucketStatus};
use crate::backends::identity;
use crate::backends::s3::OwnerMark;
use crate::config::AdoptionScope;
use crate::providers::ProviderClients;
use crate::runtime::{Context, Lane, Next, Outcome, Uid};

/// Whether an annotation is set to `true`.
pub fn annotated(obj: &S3Bucket, key: &str) -> bool {
    obj.annotations().get(key).is_some_and(|v| v == "true")
}

/// What request annotation `kind` asks for: none, a value already handled, or a new request. On
/// a bucket an older keeper wrote, its `true` counts as handled ([`requests::legacy_record`]).
pub fn request(obj: &S3Bucket, kind: Kind) -> Request {
    let annotation = |key: &str| obj.annotations().get(key).map(String::as_str);
    let status = obj.status.as_ref();
    let handled_annotation = annotation(kind.handled_annotation());
    let recorded = if requests::written_before_requests_by_value(status, handled_annotation) {
        requests::legacy_record(kind, status)
    } else {
        kind.recorded(status.and_then(|s| s.handled_requests.as_ref()))
    };
    requests::state(annotation(kind.annotation()), recorded, handled_annotation)
}

/// The lane a bucket's reconcile runs on ([`crate::runtime::lanes`]): the long one while a drain
/// of it runs or is asked for (a client-side round holds its reconcile for up to a
/// `roundDuration`), the main one otherwise.
pub fn lane(obj: &S3Bucket) -> Lane {
    let draining = obj
        .status
        .as_ref()
        .is_some_and(|s| s.drain_status.is_some());
    if draining || matches!(request(obj, Kind::Drain), Request::Pending(_)) {
        Lane::Long
    } else {
        Lane::Main
    }
}

/// Carries over what [`request`] read of an older keeper's bucket into the status keeper writes:
/// the legacy value as handled, and the mark that this keeper records requests.
pub fn record_requests_by_value(obj: &S3Bucket, status: &mut S3BucketStatus) {
    let before = obj.status.as_ref();
    for kind in [Kind::Drain, Kind::RotateCredentials] {
        let handled_annotation = obj
            .annotations()
            .get(kind.handled_annotation())
            .map(String::as_str);
        if requests::written_before_requests_by_value(before, handled_annotation)
            && kind.recorded(status.handled_requests.as_ref()).is_none()
            && let Some(value) = requests::legacy_record(kind, before)
        {
            kind.record(&mut status.handled_requests, value);
        }
    }
    requests::mark_requests_by_value(status);
}

/// Records `value` as the request of `kind` handled last, in status and in keeper's annotation.
/// Each is written only when it differs, so recording an already handled value again repairs a
/// record that was lost (a failed write, a restore without status) and otherwise writes nothing.
fn record_handled(out: &mut Outcome<S3BucketStatus>, kind: Kind, value: &str) {
    kind.record(&mut out.status.handled_requests, value);
    let key = kind.handled_annotation();
    out.set_annotations.retain(|(k, _)| *k != key);
    out.set_annotations.push((key, value.to_string()));
}

/// Everything the bucket logic reads besides the backend.
#[derive(Clone)]
pub struct View<'a> {
    pub obj: &'a S3Bucket,
    pub desired: DesiredBucket,
    pub drain: DrainSettings,
    pub now: Timestamp,
    /// The last observation, when it is recent enough to stand in for a new one.
    pub cached: Option<Observed>,
    /// What the bucket looks at if it is idle (no drain asked for or running), and when next.
    pub idle: IdleCheck,
    /// For a cleanup: the access key id the bucket's credentials Secret carries, when the last
    /// reconcile ended Ready (it left that key the bucket user's only one, see
    /// `credentials::settle_keys`). It is deleted without listing the user's keys.
    pub only_key: Option<String>,
    /// Why an adoption asked for is refused (the provider's `adoption` setting), if it is.
    pub adoption_refused: Option<String>,
}

/// What a reconcile decided: the [`Outcome`] the runtime writes, plus what only this controller
/// keeps (the drain counter and the usage cache). Derefs to the outcome so that the state
/// machine reads like it writes the outcome directly.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub outcome: Outcome<S3BucketStatus>,
    /// Objects a drain deleted in this reconcile (for `keeper_drain_objects_deleted_total`).
    pub deleted: u64,
    /// A fresh observation to cache, or `Forget` to drop the cached one.
    pub observed: Cache,
    /// Whether the storage half left the bucket usable (a live bucket's reconcile only).
    pub usable: Usable,
    /// The bucket was seen on the backend (its idle look's timer starts again).
    pub seen: bool,
}

impl Report {
    fn new(status: S3BucketStatus, requeue: Duration) -> Self {
        Report {
            outcome: Outcome::new(status, Next::Requeue(requeue)),
            deleted: 0,
            observed: Cache::Keep,
            usable: Usable::No,
            seen: false,
        }
    }
}

impl Deref for Report {
    type Target = Outcome<S3BucketStatus>;
    fn deref(&self) -> &Self::Target {
        &self.outcome
    }
}

impl DerefMut for Report {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.outcome
    }
}

/// What to do with the cached usage observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    Keep,
    Store(Observed),
    Forget,
}

/// The storage half of a live bucket's reconcile: create or converge it, refresh usage, run the
/// drain machine, and say whether the bucket is usable ([`Report::usable`]; [`apply`] decides
/// Ready once its credentials are known too).
pub async fn apply_bucket<B: BucketBackend>(backend: &B, view: &View<'_>) -> Result<Report, Error> {
    let obj = view.obj;
    let generation = obj.metadata.generation;
    let before = obj.status.clone().unwrap_or_default();
    let mut out = Report::new(before.clone(), RECHECK);
    let seeded;
    let mut view = view;
    // The store's identity (looked up once per process): `None` where the tenant pins it.
    let live = backend.identity().await?;
    let confirmed = obj.annotations().get(identity::CONFIRM_ANNOTATION).cloned();
    let pin = |live: &str| {
        identity::on_sight(
            before.backend_identity.as_deref(),
            live,
            confirmed.as_deref(),
        )
    };
    if lifecycle::needs_ensure(&before, generation, &view.desired.name) {
        if let (Some(live), true) = (&live, view.desired.recorded)
            && let Err(refusal) = lifecycle::recreate_bucket(
                &view.desired.name,
                before.backend_identity.as_deref(),
                live,
                confirmed.as_deref(),
                (&obj.namespace().unwrap_or_default(), &obj.name_any()),
            )
            // Only a missing bucket would be created; one found is converged as before.
            && backend.owner(&view.desired).await? == Owner::Missing
        {
            return Err(BucketFailure::Invalid {
                reason: identity::IDENTITY_CHANGED,
                message: refusal,
            }
            .into());
        }
        let Ensured { owner, created } = backend.ensure(&view.desired).await?;
        if created {
            // A bucket this reconcile created is empty: nothing to look at.
            seeded = View {
                cached: Some(Observed::default()),
                idle: IdleCheck {
                    look: Look::Nothing,
                    ..view.idle
                },
                ..view.clone()
            };
            view = &seeded;
            out.observed = Cache::Store(Observed::default());
        }
        if let Some(message) = owner.message() {
            drain::stop_drain_before_letting_go(
                backend,
                &view.desired.name,
                &mut out,
                "the bucket is not keeper's",
            )
            .await?;
            // An intent must not make a bucket someone else created meanwhile ours later.
            out.status.create_intent = None;
            let (reason, message) = match (&owner, &view.adoption_refused) {
                (Owner::Taken(_), _) => (
                    "BucketOwnedElsewhere",
                    format!(
                        "{message}; keeper never takes a bucket from another owner, {ADOPT_ANNOTATION} or not"
                    ),
                ),
                (_, Some(refused)) => ("AdoptionNotAllowed", format!("{message}; {refused}")),
                _ => (
                    "BucketNotOwned",
                    format!(
                        "{message}; keeper does not adopt it unless annotated {ADOPT_ANNOTATION}=true"
                    ),
                ),
            };
            out.fail(reason, message, generation, false);
            out.status.observed_generation = generation;
            return Ok(out);
        }
        if owner == Owner::Missing {
            return Err(BucketFailure::Retry(format!(
                "bucket {:?} disappeared while it was created",
                view.desired.name
            ))
            .into());
        }
        // The intent has done its job (dropped with the next write that converges the bucket;
        // a stale one is harmless: it only counts for a bucket not recorded in bucketName).
        out.status.create_intent = None;
        // Recorded only after a successful create or adoption: the ownership record for
        // backends without tags.
        out.status.bucket_name = Some(view.desired.name.clone());
        out.status.backend_identity = live.as_deref().map(pin);
    }
    out.status.observed_generation = generation;
    out.usable = match drain::run_drain(backend, view, &mut out).await? {
        drain::Drained::Settled(objects) => Usable::Ready { objects },
        drain::Drained::Unsettled if out.status.phase == Some(BucketPhase::Draining) => {
            Usable::Draining
        }
        drain::Drained::Unsettled => Usable::No,
    };
    // Seen on this store: recorded on first sight (a bucket an older keeper made), never while
    // it is missing.
    if out.usable != Usable::No
        && let Some(live) = &live
    {
        out.status.backend_identity = Some(pin(live));
    }
    Ok(out)
}

/// A bucket waiting for something outside it (tenant, Secret): `Pending` with a Normal event when
/// the reason to wait is new. While deleting, the deletion is blocked on it too.
fn waiting(obj: &S3Bucket, wait: Wait, deleting: bool) -> Outcome<S3BucketStatus> {
    let generation = obj.metadata.generation;
    // The tenant's change that ends the wait triggers this bucket through the controller's
    // watch of tenants, after the cache it is read from has it: nothing to poll.
    let mut out = Outcome::new(obj.status.clone().unwrap_or_default(), Next::AwaitChange);
    out.status.observed_generation = generation;
    out.status.phase = Some(BucketPhase::Pending);
    out.ready(false, wait.reason, wait.message.clone(), generation, false);
    if deleting {
        out.deletion_blocked(
            "BackendUnavailable",
            format!("cannot reach the bucket to clean it up: {}", wait.message),
            generation,
        );
    }
    out
}

/// The tenant's storage and the view of the bucket, or what the bucket waits for.
struct Resolved<'a, B> {
    backend: B,
    view: View<'a>,
    clients: std::sync::Arc<ProviderClients>,
}

/// Resolves tenant, provider and credentials into a backend and a view of the bucket. Spec and
/// configuration problems are permanent errors; a tenant not ready yet is a wait.
async fn resolve<'a, C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &'a S3Bucket,
) -> Result<Result<Resolved<'a, C::Backend>, Wait>, Error> {
    let namespace = obj.namespace().unwrap_or_default();
    let tenant = cx
        .kube()
        .tenant(&namespace, &obj.spec.tenant_ref.name)
        .await?;
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let tenant = match lifecycle::tenant_gate(obj, tenant.as_deref(), deleting) {
        TenantGate::Ready => tenant.expect("gate passed"),
        TenantGate::Wait(reason, message) => return Ok(Err(Wait { reason, message })),
    };
    // The registry only fails for a provider the configuration does not define.
    let clients = cx
        .shared
        .providers
        .get(&tenant.spec.provider)
        .map_err(|_| BucketFailure::Invalid {
            reason: "ProviderNotConfigured",
            message: format!(
                "tenant {:?} uses provider {:?}, which keeper's configuration does not define",
                tenant.name_any(),
                tenant.spec.provider
            ),
        })?;
    let bucket = obj.backend_name();
    validate_bucket_name(&bucket).map_err(|e| BucketFailure::Invalid {
        reason: "InvalidBucketName",
        message: e.to_string(),
    })?;
    let drain =
        drain_plan::settings(obj.spec.drain.as_ref(), clients.config.drain()).map_err(|e| {
            BucketFailure::Invalid {
                reason: "InvalidDrainSettings",
                message: e.to_string(),
            }
        })?;
    let region = obj
        .spec
        .region
        .clone()
        .unwrap_or_else(|| clients.region().to_string());
    let storage = TenantStorage {
        tenant,
        clients: clients.clone(),
    };
    let backend = match cx.reconciler.connector.connect(&cx.shared, &storage).await {
        Ok(backend) => backend,
        Err(NotConnected::Wait(wait)) => return Ok(Err(wait)),
        Err(NotConnected::Failed(e)) => return Err(e),
    };
    let adoption = adoption(cx, obj, &clients).await?;
    let uid = obj.uid().unwrap_or_default();
    let looked_key = Uid::of(obj);
    let status = obj.status.as_ref();
    let recorded = status.and_then(|s| s.bucket_name.as_deref()) == Some(bucket.as_str());
    let view = View {
        obj,
        desired: DesiredBucket {
            name: bucket.clone(),
            region,
            versioning: obj.spec.versioning,
            object_lock: obj.spec.object_lock,
            recorded,
            // Only until the bucket is recorded: from then on the mark alone decides.
            intent: !recorded
                && status.and_then(|s| s.create_intent.as_deref()) == Some(bucket.as_str()),
            owner: OwnerMark::new(&namespace, &obj.name_any(), &uid),
            adopt: adoption == Adoption::Allowed,
        },
        drain,
        now: Timestamp::now(),
        cached: cx.reconciler.cached(looked_key),
        idle: usage::idle_check(
            Looks {
                usage_refresh: clients.config.usage_refresh(),
                check: clients.config.bucket_check_interval(),
            },
            cx.reconciler.since(looked_key),
        ),
        only_key: None,
        adoption_refused: match adoption {
            Adoption::Refused(why) => Some(why),
            Adoption::NotAsked | Adoption::Allowed => None,
        },
    };
    Ok(Ok(Resolved {
        backend,
        view,
        clients,
    }))
}

/// Whether the bucket may adopt an existing bucket, as asked (the namespace's labels are read
/// only when the provider's adoption setting selects by label).
async fn adoption<C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
    clients: &ProviderClients,
) -> Result<Adoption, Error> {
    let asked = annotated(obj, ADOPT_ANNOTATION);
    let scope = clients.config.adoption();
    let namespace = obj.namespace().unwrap_or_default();
    let labels = match scope {
        AdoptionScope::Namespaces(Some(allowed)) if asked && allowed.selector.is_some() => {
            cx.kube().namespace_labels(&namespace).await?
        }
        _ => None,
    };
    Ok(lifecycle::adoption(
        asked,
        scope,
        &clients.name,
        &namespace,
        labels.as_ref(),
    ))
}

/// Reconciles a live bucket: create or converge it, refresh usage, run the drain machine, and
/// publish its credentials once it is usable.
pub async fn apply<C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
) -> Result<Outcome<S3BucketStatus>, Error> {
    let Resolved {
        backend,
        mut view,
        clients,
    } = match resolve(cx, obj).await? {
        Ok(resolved) => resolved,
        Err(wait) => return Ok(waiting(obj, wait, false)),
    };
    intent::record_create_intent(cx, &backend, &mut view).await?;
    let report = apply_bucket(&backend, &view).await?;
    cx.reconciler.settle(obj, &report);
    let usable = report.usable;
    let mut out = report.outcome;
    let uid = Uid::of(obj);
    let withheld = cx
        .reconciler
        .namespace_terminating
        .contains(uid)
        .then_some(lifecycle::WITHHELD_NAMESPACE_TERMINATING);
    let keys = match (usable.is_usable(), withheld) {
        (false, _) => None,
        (true, Some(why)) => Some(KeysVerdict::Withheld(why)),
        (true, None) => {
            let terminating = KeysVerdict::Withheld(lifecycle::WITHHELD_NAMESPACE_TERMINATING);
            let verdict = match credentials::publish_credentials(
                cx, &backend, obj, &view, &clients, &mut out,
            )
            .await
            {
                Ok(verdict) => verdict,
                // Nothing to do rather than a failure: the namespace goes, and the bucket with it.
                Err(e) if e.namespace_terminating() => terminating.clone(),
                Err(e) => {
                    record_storage(cx, obj, &out.status).await;
                    return Err(e);
                }
            };
            // Remembered, so that no key is issued for this bucket again.
            if verdict == terminating {
                cx.reconciler.namespace_terminating.insert(uid);
            }
            Some(verdict)
        }
    };
    decide_ready(&mut out, &view, usable, keys.as_ref());
    Ok(out)
}

/// Writes what the storage half recorded (the bucket's name once it was created or adopted, its
/// create intent) when the credentials half fails: the error discards the outcome, and a bucket
/// whose IAM setup keeps failing (a user limit reached) must still be known as this object's, so
/// that deleting the object deletes it. Costs nothing on success, where the outcome carries it.
async fn record_storage<C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
    storage: &S3BucketStatus,
) {
    let mut recorded = obj.status.clone().unwrap_or_default();
    recorded.bucket_name = storage.bucket_name.clone();
    recorded.create_intent = storage.create_intent.clone();
    if let Err(e) = cx.checkpoint(obj, &recorded).await {
        tracing::warn!(error = %e, "could not record the bucket before reporting the failure");
    }
}

/// Decides Ready once, from what the storage half and the credentials half found
/// ([`plan::ready`](ready)).
pub fn decide_ready(
    out: &mut Outcome<S3BucketStatus>,
    view: &View<'_>,
    usable: Usable,
    keys: Option<&KeysVerdict>,
) {
    let obj = view.obj;
    let secret = bucket_credentials_secret_name(&obj.name_any());
    let before = obj.status.clone().unwrap_or_default();
    let subject = ready::Subject {
        before: &before,
        bucket: &view.desired.name,
        secret: &secret,
        generation: obj.metadata.generation,
        now: view.now,
    };
    ready::decide(out, &subject, usable, keys);
}

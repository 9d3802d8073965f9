//! Performs the plan: resolves the tenant and its storage, observes the bucket, decides with
//! [`super::plan`], acts through [`BucketBackend`] and reports everything as an [`Outcome`] that
//! the shared runtime writes (status, events, the handled-request annotations).
//!
//! [`apply_bucket`] and [`cleanup_bucket`] hold the state machine and talk to the storage only
//! through the backend trait, so they are tested against an in-memory fake; [`apply`] and
//! [`cleanup`] wrap them with what needs Kubernetes (tenant, Secrets).

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::backend::{
    BucketBackend, Connect, DesiredBucket, Ensured, KeyCheck, Observed, Owner, Purpose, Wait,
};
use super::plan::drain::{self, DrainSettings, DrainStep};
use super::plan::keys::{self as key_plan, FirstLook, KEYS_NOT_YET_VALID, KeySource, Publication};
use super::plan::lifecycle::{self, TenantGate};
use super::plan::requests::{self, Kind, Request};
use super::{
    ADOPT_ANNOTATION, CLIENT_DRAIN_CONTINUE, CREATE_INTENT_ANNOTATION, Error, S3BucketReconciler,
    SHORT_RETRY, USAGE_REFRESH,
};
use crate::api::names::{
    bucket_credentials_secret_name, default_bucket_name, validate_bucket_name,
};
use crate::api::{BucketPhase, DeletionPolicy, S3Bucket, S3BucketStatus};
use crate::backends::Keys;
use crate::backends::s3::{DeleteOutcome, OwnerMark};
use crate::cluster::{Hold, SecretError, Target, owned_secret_object, secret_data};
use crate::config::Provider;
use crate::providers::ProviderClients;
use crate::runtime::{Context, Next, Note, Outcome, conditions};

/// Whether an annotation is set to `true`.
pub fn annotated(obj: &S3Bucket, key: &str) -> bool {
    obj.annotations().get(key).is_some_and(|v| v == "true")
}

/// What request annotation `kind` asks for: none, a value already handled, or a new request.
pub fn request(obj: &S3Bucket, kind: Kind) -> Request {
    let annotation = |key: &str| obj.annotations().get(key).map(String::as_str);
    requests::state(
        annotation(kind.annotation()),
        kind.recorded(
            obj.status
                .as_ref()
                .and_then(|s| s.handled_requests.as_ref()),
        ),
        annotation(kind.handled_annotation()),
    )
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
    /// For a cleanup: the access key id the bucket's credentials Secret carries, when the last
    /// reconcile ended Ready (it left that key the bucket user's only one, see [`settle_keys`]).
    /// It is deleted without listing the user's keys.
    pub only_key: Option<String>,
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
}

impl Report {
    fn new(status: S3BucketStatus, requeue: Duration) -> Self {
        Report {
            outcome: Outcome::new(status, Next::Requeue(requeue)),
            deleted: 0,
            observed: Cache::Keep,
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

/// `Ready=True`, with a Normal event when the bucket becomes usable (not when only the object
/// count in the message moves).
fn mark_ready(
    out: &mut Report,
    reason: &'static str,
    message: String,
    generation: Option<i64>,
    was_usable: bool,
) {
    out.condition(conditions::READY, true, reason, message.clone(), generation);
    if !was_usable {
        out.note(Note::normal(reason, message));
    }
}

/// The runtime's one "deletion blocked" report, warned once per blocking reason: the message
/// follows the object count, and a moving count is no news worth another warning.
fn block_deletion(
    out: &mut Report,
    reason: &'static str,
    message: String,
    generation: Option<i64>,
) {
    let already = out.status.conditions.iter().any(|c| {
        c.type_ == conditions::DELETION_BLOCKED && c.status == "True" && c.reason == reason
    });
    let before = out.notes.len();
    out.deletion_blocked(reason, message, generation);
    if already {
        out.notes.truncate(before);
    }
}

/// Observes the bucket unless a cached observation is good enough.
async fn observe<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    fresh: bool,
    purpose: Purpose,
    out: &mut Report,
) -> Result<Option<Observed>, Error> {
    if !fresh && let Some(cached) = view.cached {
        return Ok(Some(cached));
    }
    let observed = backend.observe(&view.desired.name, purpose).await?;
    out.observed = observed.map_or(Cache::Forget, Cache::Store);
    Ok(observed)
}

/// The observation after a drain round deleted `deleted` of its objects from a bucket that is
/// not empty yet: at least one object is left, and the bytes follow the mean object size (the
/// exact figures come with the next listing, at the latest when the bucket is found empty).
fn counted_down(observed: Observed, deleted: u64) -> Observed {
    let objects = (observed.objects - i64::try_from(deleted).unwrap_or(i64::MAX)).max(1);
    let bytes = if observed.objects > 0 {
        (i128::from(observed.bytes) * i128::from(objects) / i128::from(observed.objects)) as i64
    } else {
        observed.bytes
    };
    Observed {
        objects,
        bytes,
        ..observed
    }
}

/// Runs the drain state machine on an existing bucket of ours. Returns the object count left
/// when the drain machine is idle or finished (`None` while a drain runs or is blocked).
async fn run_drain<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    out: &mut Report,
) -> Result<Option<i64>, Error> {
    let obj = view.obj;
    let generation = obj.metadata.generation;
    let bucket = &view.desired.name;
    let request = request(obj, Kind::Drain);
    if let Request::Handled(value) = &request {
        record_handled(out, Kind::Drain, value);
    }
    let current = out.status.drain_status.clone();
    let ours = drain::is_ours(current.as_ref());
    let wants = requests::wants_drain(&request, ours);
    let due = current
        .as_ref()
        .is_none_or(|status| drain::poll_due(status, view.now));
    let mode = backend.drain_mode();
    let client_side = mode == crate::api::DrainMode::ClientSide;
    // Starting and canceling a drain need the real count, and so does a poll of the backend's
    // own drain. A client-side drain's poll counts down from the cache, which every round lowers
    // by what it deleted: listing a large bucket at each poll would cost more than its deletes.
    // Once the count is down to one the poll lists again (others may have written meanwhile).
    let counted = client_side && view.cached.is_some_and(|c| c.objects > 1);
    let fresh = if wants {
        !ours || (due && !counted)
    } else {
        ours
    };
    // The count that starts a drain: a client-side drain's first rounds delete what it listed.
    let purpose = if wants && !ours {
        Purpose::StartDrain
    } else {
        Purpose::Usage
    };
    let Some(mut observed) = observe(backend, view, fresh, purpose, out).await? else {
        out.status.drain_status = None;
        out.status.phase = Some(BucketPhase::Pending);
        let message =
            format!("bucket {bucket:?} no longer exists on the backend; creating it again");
        // Someone deleted it behind keeper's back: worth a warning.
        out.ready(false, "BucketMissing", message, generation, true);
        out.next = Next::Requeue(SHORT_RETRY);
        return Ok(None);
    };
    // A client-side drain reports its first deletions at once rather than at the first poll.
    let mut report_now = due;
    // Client-side drains delete between polls: keeper is the one emptying the bucket.
    if wants && ours && client_side {
        let progress = backend.drain_round(&view.desired).await?;
        out.deleted += progress.deleted;
        if let Some(lost) = progress.not_ours {
            lose_ownership(out, lost, generation);
            out.next = Next::Requeue(drain::next_poll_interval(&view.drain, None, Duration::ZERO));
            return Ok(None);
        }
        if let Some(blocked) = progress.blocked {
            out.fail(
                "DrainBlocked",
                format!("drain stopped: {blocked}"),
                generation,
                false,
            );
            out.next = Next::Requeue(drain::next_poll_interval(&view.drain, None, Duration::ZERO));
            out.observed = Cache::Forget;
            return Ok(None);
        }
        if progress.empty {
            observed = Observed {
                objects: 0,
                bytes: 0,
                backend_draining: false,
            };
            out.observed = Cache::Store(observed);
        } else if progress.deleted > 0 {
            observed = counted_down(observed, progress.deleted);
            out.observed = Cache::Store(observed);
            report_now |= current.as_ref().is_some_and(drain::awaiting_first_progress);
        }
    }
    let step = drain::decide(wants, ours, observed.backend_draining, observed.objects);
    match step {
        DrainStep::Idle => {}
        DrainStep::Initiate => {
            if ownership_lost(backend, view, out).await?.is_some() {
                out.next =
                    Next::Requeue(drain::next_poll_interval(&view.drain, None, Duration::ZERO));
                return Ok(None);
            }
            backend.start_drain(bucket).await?;
            let (mut status, note) = drain::initiate(
                observed.objects,
                observed.bytes,
                mode,
                &view.drain,
                view.now,
            );
            status.request = request.value().map(str::to_string);
            out.note(note);
            out.next = Next::Requeue(if client_side {
                CLIENT_DRAIN_CONTINUE
            } else {
                drain::next_poll_interval(&view.drain, Some(mode), Duration::ZERO)
            });
            out.status.drain_status = Some(status);
        }
        DrainStep::AlreadyEmpty => {
            out.note(drain::already_empty());
            if let Some(value) = request.value() {
                record_handled(out, Kind::Drain, value);
            }
        }
        DrainStep::Poll => {
            let status = current.expect("a poll runs on our drain");
            if report_now {
                if !client_side {
                    // The grid deleted these since the last poll (keeper counts its own deletes).
                    out.deleted +=
                        u64::try_from(status.previous_object_count - observed.objects).unwrap_or(0);
                }
                let (next, notes) = drain::poll(&status, observed.objects, &view.drain, view.now);
                out.notes.extend(notes);
                out.status.drain_status = Some(next);
            }
            let polled = out.status.drain_status.as_ref().expect("still draining");
            let interval = polled
                .next_poll_interval
                .as_deref()
                .and_then(|s| crate::api::names::parse_duration(s).ok())
                .unwrap_or(view.drain.initial_poll);
            out.next = Next::Requeue(if client_side {
                CLIENT_DRAIN_CONTINUE
            } else {
                // Wake up when the next poll is due, not a full interval after an unrelated event.
                let since = polled
                    .last_checked_at
                    .as_ref()
                    .and_then(|t| view.now.duration_since(t.0).try_into().ok())
                    .unwrap_or_default();
                interval.saturating_sub(since).max(Duration::from_secs(1))
            });
        }
        DrainStep::Complete => {
            backend.stop_drain(bucket).await?;
            let status = current.expect("completion ends our drain");
            if !client_side {
                out.deleted += u64::try_from(status.previous_object_count).unwrap_or(0);
            }
            out.notes.extend(drain::complete(&status));
            out.status.drain_status = None;
            // The request annotation stays (a GitOps tool may own it): the value is recorded.
            if let Some(value) = requests::drain_handled_value(&request, status.request.as_deref())
            {
                record_handled(out, Kind::Drain, value);
            }
            // The observation still shows the backend draining: drop it, or the next reconcile
            // would take the stopped drain for an orphan.
            out.observed = Cache::Forget;
        }
        DrainStep::Cancel => {
            backend.stop_drain(bucket).await?;
            let status = current.expect("cancellation ends our drain");
            out.notes
                .push(drain::cancel(&status, Some(observed.objects)));
            out.status.drain_status = None;
            // The same value put back later is no new request.
            if let Some(value) = requests::drain_handled_value(&request, status.request.as_deref())
            {
                record_handled(out, Kind::Drain, value);
            }
            out.observed = Cache::Forget;
        }
        DrainStep::CancelOrphan => {
            backend.stop_drain(bucket).await?;
            out.note(drain::cancel_orphan());
            out.observed = Cache::Forget;
        }
    }
    // Between polls the status keeps the counts of the last poll.
    if step != DrainStep::Poll || report_now {
        out.status.object_count = Some(observed.objects);
        out.status.object_bytes = Some(observed.bytes);
    }
    if matches!(step, DrainStep::Initiate | DrainStep::Poll) {
        out.status.phase = Some(BucketPhase::Draining);
        Ok(None)
    } else {
        Ok(Some(observed.objects))
    }
}

/// The bucket no longer carries this resource's mark (someone re-tagged it, or deleted it and
/// another created it again): `Failed` with a Warning naming what was found. Nothing is deleted.
fn lose_ownership(out: &mut Report, lost: String, generation: Option<i64>) {
    out.fail(
        "OwnershipLost",
        format!("keeper deletes nothing in it: {lost}"),
        generation,
        false,
    );
    out.observed = Cache::Forget;
}

/// Checks the ownership mark right before a destructive call (F9: drain start, bucket delete;
/// client-side drains check before each batch themselves). `Some` (and the outcome marked
/// `OwnershipLost`) when the bucket is not, or no longer, ours.
async fn ownership_lost<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    out: &mut Report,
) -> Result<Option<String>, Error> {
    let lost = match backend.owner(&view.desired).await? {
        Owner::Us => return Ok(None),
        Owner::Missing => format!("bucket {:?} no longer exists", view.desired.name),
        Owner::Unmarked(message) | Owner::Taken(message) => message,
    };
    lose_ownership(out, lost.clone(), view.obj.metadata.generation);
    Ok(Some(lost))
}

/// Every path that lets go of a bucket (deletionPolicy Retain, a bucket that turned out not to
/// be ours) stops a drain of ours first, so that the backend does not go on deleting the objects
/// of a bucket keeper no longer looks after, and says so in an event.
async fn stop_drain_before_letting_go<B: BucketBackend>(
    backend: &B,
    bucket: &str,
    out: &mut Report,
    why: &str,
) -> Result<(), Error> {
    let Some(status) = out
        .status
        .drain_status
        .clone()
        .filter(|s| drain::is_ours(Some(s)))
    else {
        return Ok(());
    };
    match backend.stop_drain(bucket).await {
        Ok(()) => {}
        // No bucket, nothing deleting in it.
        Err(e) if e.is_gone() => tracing::info!(error = %e, "the bucket is gone from the backend"),
        Err(e) => return Err(e.into()),
    }
    out.note(drain::stopped_before_letting_go(&status, why));
    out.status.drain_status = None;
    out.observed = Cache::Forget;
    Ok(())
}

/// Reconciles a live bucket: create or converge it, refresh usage, run the drain machine.
pub async fn apply_bucket<B: BucketBackend>(backend: &B, view: &View<'_>) -> Result<Report, Error> {
    let obj = view.obj;
    let generation = obj.metadata.generation;
    let before = obj.status.clone().unwrap_or_default();
    let mut out = Report::new(before.clone(), USAGE_REFRESH);
    let seeded;
    let mut view = view;
    if lifecycle::needs_ensure(&before, generation, &view.desired.name) {
        let Ensured { owner, created } = backend.ensure(&view.desired).await?;
        if created {
            // A bucket this reconcile created is empty: nothing to look at.
            seeded = View {
                cached: Some(Observed::default()),
                ..view.clone()
            };
            view = &seeded;
            out.observed = Cache::Store(Observed::default());
        }
        if let Some(message) = owner.message() {
            stop_drain_before_letting_go(
                backend,
                &view.desired.name,
                &mut out,
                "the bucket is not keeper's",
            )
            .await?;
            // An intent must not make a bucket someone else created meanwhile ours later.
            out.status.create_intent = None;
            if obj.annotations().contains_key(CREATE_INTENT_ANNOTATION) {
                out.remove_annotations.push(CREATE_INTENT_ANNOTATION);
            }
            let (reason, message) = match owner {
                Owner::Taken(_) => (
                    "BucketOwnedElsewhere",
                    format!(
                        "{message}; keeper never takes a bucket from another owner, {ADOPT_ANNOTATION} or not"
                    ),
                ),
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
            return Err(Error::Retry(format!(
                "bucket {:?} disappeared while it was created",
                view.desired.name
            )));
        }
        // The intent has done its job (dropped with the next write that converges the bucket;
        // a stale one is harmless: it only counts for a bucket not recorded in bucketName).
        out.status.create_intent = None;
        // Recorded only after a successful create or adoption: the ownership record for
        // backends without tags.
        out.status.bucket_name = Some(view.desired.name.clone());
    }
    out.status.observed_generation = generation;
    // Becoming usable is news; a changing object count is not.
    let was_usable = matches!(
        before.phase,
        Some(BucketPhase::Ready | BucketPhase::Draining)
    );
    if let Some(objects) = run_drain(backend, view, &mut out).await? {
        out.status.phase = Some(BucketPhase::Ready);
        mark_ready(
            &mut out,
            "BucketReady",
            format!("bucket {:?} holds {objects} objects", view.desired.name),
            generation,
            was_usable,
        );
    } else if out.status.phase == Some(BucketPhase::Draining) {
        mark_ready(
            &mut out,
            "Draining",
            format!("bucket {:?} is being drained", view.desired.name),
            generation,
            was_usable,
        );
    }
    Ok(out)
}

/// Cleans up after a deleted resource: drains if asked, refuses while objects remain, deletes
/// the bucket once empty, and never touches a bucket keeper did not create.
pub async fn cleanup_bucket<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
) -> Result<Report, Error> {
    match delete_bucket(backend, view).await {
        // Only NotFound means gone (the bucket vanished between two calls): nothing is left
        // to delete but the bucket's own credentials.
        Err(Error::Backend(e)) if e.is_gone() => {
            tracing::info!(error = %e, "the bucket is gone from the backend");
            backend
                .delete_credentials(&view.desired.name, view.only_key.as_deref())
                .await?;
            let mut out = Report::new(deleting_status(view.obj), USAGE_REFRESH);
            out.next = Next::Release;
            Ok(out)
        }
        result => result,
    }
}

/// Releases a resource with `deletionPolicy: Retain`: the bucket and its objects stay, and a drain
/// of ours is stopped first (the user chose to keep what is left).
pub async fn retain_bucket<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
) -> Result<Report, Error> {
    let mut out = Report::new(deleting_status(view.obj), USAGE_REFRESH);
    stop_drain_before_letting_go(
        backend,
        &view.desired.name,
        &mut out,
        "deletionPolicy is Retain",
    )
    .await?;
    out.note(Note::normal("BucketRetained", lifecycle::RETAINED_MESSAGE));
    out.next = Next::Release;
    Ok(out)
}

fn deleting_status(obj: &S3Bucket) -> S3BucketStatus {
    let mut status = obj.status.clone().unwrap_or_default();
    status.phase = Some(BucketPhase::Deleting);
    status
}

async fn delete_bucket<B: BucketBackend>(backend: &B, view: &View<'_>) -> Result<Report, Error> {
    let obj = view.obj;
    let generation = obj.metadata.generation;
    let mut out = Report::new(deleting_status(obj), USAGE_REFRESH);
    let bucket = &view.desired.name;
    match backend.owner(&view.desired).await? {
        Owner::Missing => {
            backend
                .delete_credentials(bucket, view.only_key.as_deref())
                .await?;
            out.next = Next::Release;
            return Ok(out);
        }
        Owner::Unmarked(message) | Owner::Taken(message) => {
            stop_drain_before_letting_go(backend, bucket, &mut out, "the bucket is not keeper's")
                .await?;
            out.note(Note::normal(
                "BucketRetained",
                format!("{message}; released without deleting it"),
            ));
            out.next = Next::Release;
            return Ok(out);
        }
        Owner::Us => {}
    }
    // No drain asked or running: the delete itself is the look (the backend refuses a bucket
    // that is not empty), right after the ownership check; only a refused delete lists the
    // bucket below, to say what is left.
    let drain_idle = !drain::is_ours(out.status.drain_status.as_ref())
        && !requests::wants_drain(&request(obj, Kind::Drain), false);
    if drain_idle && backend.delete(bucket).await? == DeleteOutcome::Deleted {
        backend
            .delete_credentials(bucket, view.only_key.as_deref())
            .await?;
        out.next = Next::Release;
        out.observed = Cache::Forget;
        return Ok(out);
    }
    // A cached "empty" must not lead to a delete: look again (the backend would refuse to
    // delete a non-empty bucket anyway, but the status would claim the wrong thing meanwhile).
    let view = &View {
        cached: view.cached.filter(|o| o.objects > 0),
        ..view.clone()
    };
    let remaining = run_drain(backend, view, &mut out).await?;
    if out.status.phase == Some(BucketPhase::Pending) {
        // The bucket disappeared from the backend: nothing left to delete.
        backend
            .delete_credentials(bucket, view.only_key.as_deref())
            .await?;
        out.next = Next::Release;
        return Ok(out);
    }
    let Some(objects) = remaining else {
        if out.status.phase == Some(BucketPhase::Failed) {
            // The drain stopped (object lock, legal hold): deletion waits for the user.
            let message = conditions_message(&out.status, conditions::READY);
            block_deletion(&mut out, "DrainBlocked", message, generation);
        } else {
            // Draining as asked: deletion is no longer waiting for the user.
            out.deletion_unblocked();
        }
        return Ok(out);
    };
    out.status.phase = Some(BucketPhase::Deleting);
    if objects > 0 {
        let message = lifecycle::not_empty_message(obj, objects);
        block_deletion(&mut out, "BucketNotEmpty", message, generation);
        return Ok(out);
    }
    // Checked again right before the delete: the drain and the listing took time.
    if let Some(lost) = ownership_lost(backend, view, &mut out).await? {
        block_deletion(&mut out, "OwnershipLost", lost, generation);
        return Ok(out);
    }
    match backend.delete(bucket).await? {
        DeleteOutcome::Deleted => {
            backend
                .delete_credentials(bucket, view.only_key.as_deref())
                .await?;
            out.next = Next::Release;
            out.observed = Cache::Forget;
        }
        // The usage figure lags behind the bucket or does not count everything the backend
        // counts (delete markers): say so, and look again soon.
        DeleteOutcome::NotEmpty => {
            let message = format!(
                "the backend refuses to delete bucket {bucket:?} because it is not empty, although its usage showed no objects (usage can lag, and delete markers may not be counted); keeper retries"
            );
            block_deletion(&mut out, "BucketNotEmpty", message, generation);
            out.observed = Cache::Forget;
            out.next = Next::Requeue(SHORT_RETRY);
        }
    }
    Ok(out)
}

/// The message of condition `type_`, or an empty string.
fn conditions_message(status: &S3BucketStatus, type_: &str) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
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

/// The published endpoint of a provider (as configured, so existing Secrets stay unchanged).
fn published_endpoint(provider: &Provider) -> String {
    match provider {
        Provider::StorageGrid(p) => p.s3_endpoint.to_string(),
        Provider::S3Compatible(p) => p.endpoint.to_string(),
    }
}

/// The tenant's storage and the view of the bucket, or what the bucket waits for.
struct Resolved<'a, B> {
    backend: B,
    view: View<'a>,
    clients: std::sync::Arc<ProviderClients>,
}

/// Resolves tenant, provider and credentials into a backend and a view of the bucket. Spec and
/// configuration problems are permanent errors; a tenant not ready yet is a wait.
async fn resolve<'a, C: Connect>(
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
        .map_err(|_| Error::Invalid {
            reason: "ProviderNotConfigured",
            message: format!(
                "tenant {:?} uses provider {:?}, which keeper's configuration does not define",
                tenant.name_any(),
                tenant.spec.provider
            ),
        })?;
    let bucket = obj
        .spec
        .bucket_name
        .clone()
        .unwrap_or_else(|| default_bucket_name(&namespace, &obj.name_any()));
    validate_bucket_name(&bucket).map_err(|e| Error::Invalid {
        reason: "InvalidBucketName",
        message: e.to_string(),
    })?;
    let drain = drain::settings(obj.spec.drain.as_ref(), clients.config.drain()).map_err(|e| {
        Error::Invalid {
            reason: "InvalidDrainSettings",
            message: e.to_string(),
        }
    })?;
    let region = obj
        .spec
        .region
        .clone()
        .unwrap_or_else(|| clients.region().to_string());
    let backend = match cx
        .reconciler
        .connector
        .connect(
            cx.kube(),
            &cx.shared.metrics,
            &tenant,
            &clients,
            &cx.shared.operator_namespace,
        )
        .await?
    {
        Ok(backend) => backend,
        Err(wait) => return Ok(Err(wait)),
    };
    let uid = obj.uid().unwrap_or_default();
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
                && (status.and_then(|s| s.create_intent.as_deref()) == Some(bucket.as_str())
                    || obj.annotations().get(CREATE_INTENT_ANNOTATION) == Some(&bucket)),
            owner: OwnerMark::new(&namespace, &obj.name_any(), &uid),
            adopt: annotated(obj, ADOPT_ANNOTATION),
        },
        drain,
        now: Timestamp::now(),
        cached: cx.reconciler.cached(&uid),
        only_key: None,
    };
    Ok(Ok(Resolved {
        backend,
        view,
        clients,
    }))
}

/// Reconciles a live bucket: create or converge it, refresh usage, run the drain machine, and
/// publish its credentials once it is usable.
pub async fn apply<C: Connect>(
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
    record_create_intent(cx, &backend, &mut view).await?;
    let report = apply_bucket(&backend, &view).await?;
    cx.reconciler.settle(obj, &report);
    let mut out = report.outcome;
    if matches!(
        out.status.phase,
        Some(BucketPhase::Ready | BucketPhase::Draining)
    ) {
        publish_credentials(cx, &backend, obj, &view, &clients, &mut out).await?;
    }
    Ok(out)
}

/// F16: before keeper creates a bucket it records so, so that when the create succeeds and the
/// tagging right after it fails, the next reconcile finds an untagged bucket it knows to be its
/// own and tags it, instead of refusing it as someone else's forever. Only a bucket that does not
/// exist yet gets an intent. Whether `view`'s bucket needs one now:
async fn needs_intent<B: BucketBackend>(backend: &B, view: &View<'_>) -> Result<bool, Error> {
    let status = view.obj.status.clone().unwrap_or_default();
    let desired = &view.desired;
    Ok(!desired.recorded
        && !desired.intent
        && lifecycle::needs_ensure(&status, view.obj.metadata.generation, &desired.name)
        && backend.owner(desired).await? == Owner::Missing)
}

/// The intent as an annotation written with the finalizer, in its patch (a write saved); none
/// when the bucket cannot be looked at yet (its tenant not ready, its backend failing), in which
/// case [`record_create_intent`] records it in status before the create.
pub async fn intent_with_finalizer<C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
) -> Vec<(&'static str, String)> {
    let Ok(Ok(Resolved { backend, view, .. })) = resolve(cx, obj).await else {
        return Vec::new();
    };
    match needs_intent(&backend, &view).await {
        Ok(true) => vec![(CREATE_INTENT_ANNOTATION, view.desired.name.clone())],
        Ok(false) => Vec::new(),
        Err(e) => {
            tracing::debug!(error = %e, "no create intent with the finalizer");
            Vec::new()
        }
    }
}

/// The intent in status (`createIntent`, written now, not with the outcome) when the finalizer
/// did not bring one.
async fn record_create_intent<C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    backend: &C::Backend,
    view: &mut View<'_>,
) -> Result<(), Error> {
    if !needs_intent(backend, view).await? {
        return Ok(());
    }
    let desired = &view.desired;
    let status = view.obj.status.clone().unwrap_or_default();
    let status = S3BucketStatus {
        create_intent: Some(desired.name.clone()),
        ..status
    };
    cx.checkpoint(view.obj, &status).await?;
    view.desired.intent = true;
    Ok(())
}

/// Cleans up after a deleted bucket; [`Next::Release`] once nothing of it is left (or it is
/// retained by policy, or was never keeper's).
pub async fn cleanup<C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
) -> Result<Outcome<S3BucketStatus>, Error> {
    let draining = drain::is_ours(obj.status.as_ref().and_then(|s| s.drain_status.as_ref()));
    if obj.spec.deletion_policy == DeletionPolicy::Retain && !draining {
        let mut out = Outcome::new(obj.status.clone().unwrap_or_default(), Next::Release);
        if !lifecycle::never_created(obj) {
            out.note(Note::normal("BucketRetained", lifecycle::RETAINED_MESSAGE));
            keep_credentials(cx, obj, &mut out).await?;
        }
        return Ok(out);
    }
    let mut resolved = match resolve(cx, obj).await {
        Ok(Ok(resolved)) => resolved,
        // Nothing was ever created without a recorded bucket name and a reachable tenant.
        Ok(Err(_)) | Err(Error::Invalid { .. }) if lifecycle::never_created(obj) => {
            return Ok(Outcome::new(
                obj.status.clone().unwrap_or_default(),
                Next::Release,
            ));
        }
        Ok(Err(wait)) => return Ok(waiting(obj, wait, true)),
        Err(e) => return Err(e),
    };
    resolved.view.only_key = only_published_key(cx, obj).await;
    let mut report = if obj.spec.deletion_policy == DeletionPolicy::Retain {
        // A drain runs: it is stopped before the bucket is let go.
        retain_bucket(&resolved.backend, &resolved.view).await?
    } else {
        cleanup_bucket(&resolved.backend, &resolved.view).await?
    };
    if obj.spec.deletion_policy == DeletionPolicy::Retain {
        keep_credentials(cx, obj, &mut report.outcome).await?;
    }
    cx.reconciler.settle(obj, &report);
    Ok(report.outcome)
}

/// See [`View::only_key`]. `None` when the Secret cannot be read: the user's keys are listed.
async fn only_published_key<C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
) -> Option<String> {
    let settled = obj
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, conditions::READY));
    if !settled {
        return None;
    }
    let name = bucket_credentials_secret_name(&obj.name_any());
    let secret = owned_secret_object(cx.kube(), &Target::of(obj), &name)
        .await
        .ok()??;
    lifecycle::keys_from(&secret_data(&secret)).map(|keys| keys.access_key_id)
}

/// A retained bucket keeps working, and so do its keys: the credentials Secret is released from
/// the resource (the garbage collector keeps it), and an event says so.
async fn keep_credentials<C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
    out: &mut Outcome<S3BucketStatus>,
) -> Result<(), Error> {
    let name = bucket_credentials_secret_name(&obj.name_any());
    if cx.kube().release_secret(&Target::of(obj), &name).await? {
        out.note(Note::normal(
            "CredentialsKept",
            format!(
                "the bucket's keys stay usable in Secret {name} (no longer owned by the S3Bucket)"
            ),
        ));
    }
    Ok(())
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
    async fn swap<C: Connect>(
        &mut self,
        cx: &Context<S3BucketReconciler<C>>,
        data: BTreeMap<String, String>,
        annotation: Option<(&'static str, String)>,
    ) -> Result<(), SecretError> {
        let written = cx
            .kube()
            .swap_secret(
                &self.owner,
                self.name,
                self.read.as_ref(),
                data,
                // Not held for cleanup: the bucket's cleanup removes its keys on the backend by
                // the bucket's name, without reading them back.
                Hold::No,
                annotation,
            )
            .await?;
        self.read = Some(written);
        Ok(())
    }

    /// Changes the Secret (an annotation only) from the version read, so that no writer that read
    /// it before can publish any more: the keys it was about to publish may then be deleted.
    async fn claim<C: Connect>(
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
async fn settle_keys<B: BucketBackend, C: Connect>(
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
    let uid = view.obj.uid().unwrap_or_default();
    let settled = view
        .obj
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, conditions::READY))
        && cx.reconciler.has_listed_keys(&uid);
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
    cx.reconciler.listed_keys(&uid);
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
            Err(Error::Retry(format!(
                "Secret {:?} was changed by another writer while keys were issued here; they were not published",
                secret.name
            )))
        }
        (Err(e), _) => Err(e.into()),
    }
}

/// Publishes `<name>-credentials` and handles `keeper.dev/rotate-credentials`.
async fn publish_credentials<B: BucketBackend, C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    backend: &B,
    obj: &S3Bucket,
    view: &View<'_>,
    clients: &ProviderClients,
    out: &mut Outcome<S3BucketStatus>,
) -> Result<(), Error> {
    let bucket = &view.desired.name;
    let name = bucket_credentials_secret_name(&obj.name_any());
    let owner = Target::of(obj);
    let read = owned_secret_object(cx.kube(), &owner, &name).await?;
    let rotation = request(obj, Kind::RotateCredentials);
    if let Request::Handled(value) = &rotation {
        record_handled(out, Kind::RotateCredentials, value);
    }
    let rotate = rotation.is_pending();
    let lost = key_plan::keys_lost(
        key_plan::keys_unverified_since(obj.status.as_ref()),
        view.now,
    );
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
    if let Some(answer) = refused {
        keys_not_yet_valid(obj, &name, &answer, issued, view.now, out);
    } else if shared {
        say_keys_are_shared(out, &name, &clients.name, obj.metadata.generation);
    }
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
    Ok(())
}

/// On a provider with `sharedCredentials: true` a Ready bucket's condition says whose keys its
/// Secret carries: they reach every bucket of the provider, not this one only.
fn say_keys_are_shared(
    out: &mut Outcome<S3BucketStatus>,
    secret: &str,
    provider: &str,
    generation: Option<i64>,
) {
    let Some(ready) = out
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::READY && c.status == "True")
        .cloned()
    else {
        return;
    };
    out.condition(
        conditions::READY,
        true,
        &ready.reason,
        format!(
            "{}; Secret {secret:?} carries provider {provider:?}'s own keys (sharedCredentials: true), which reach every bucket of that provider",
            ready.message
        ),
        generation,
    );
}

/// The bucket's keys are published but the store does not accept them yet (IAM is eventually
/// consistent; AWS takes seconds). Not a failure: `Ready=False` says so, the "ready" event of
/// this reconcile is withdrawn, and keeper looks again, waiting longer the longer it lasts (until
/// the keys count as lost: [`key_plan::KEYS_LOST_AFTER`]).
fn keys_not_yet_valid(
    obj: &S3Bucket,
    secret: &str,
    answer: &str,
    issued: bool,
    now: Timestamp,
    out: &mut Outcome<S3BucketStatus>,
) {
    // Keys issued by this reconcile start their own wait.
    let since = key_plan::keys_unverified_since(obj.status.as_ref()).filter(|_| !issued);
    let waited = since
        .and_then(|since| now.duration_since(since).try_into().ok())
        .unwrap_or(Duration::ZERO);
    let retry = key_plan::keys_check_backoff(waited);
    out.notes.retain(|n| n.reason != "BucketReady");
    if out.status.phase == Some(BucketPhase::Ready) {
        out.status.phase = Some(BucketPhase::Pending);
    }
    out.ready(
        false,
        KEYS_NOT_YET_VALID,
        format!(
            "the keys in Secret {secret:?} are not accepted by the store yet (it answered {answer}; new IAM keys take a few seconds to be in force); keeper tries them again, waiting longer each time (at most a minute), and issues new keys if they are still refused after {}s", key_plan::KEYS_LOST_AFTER.as_secs()
        ),
        obj.metadata.generation,
        false,
    );
    if let Some(since) = since {
        // Still refused, as at the last look: no news (no second event), and the condition has
        // not transitioned (this reconcile's own Ready=True was never written), so the time it
        // has been refused keeps counting for the backoff.
        out.notes.retain(|n| n.reason != KEYS_NOT_YET_VALID);
        if let Some(ready) = out
            .status
            .conditions
            .iter_mut()
            .find(|c| c.type_ == conditions::READY)
        {
            ready.last_transition_time = Time(since);
        }
    }
    out.next = Next::Requeue(retry);
}

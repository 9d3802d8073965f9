//! A deleted S3Bucket: drains if asked, refuses while objects remain, deletes the bucket once
//! empty (never one keeper did not create), or lets go of it by policy.

use kube::ResourceExt;

use super::super::backend::{BucketBackend, Connector, Owner};
use super::super::plan::drain::{self, LettingGo};
use super::super::plan::lifecycle::{self};
use super::super::plan::requests::{self, Kind};
use super::super::{BucketFailure, Error, RECHECK, S3BucketReconciler, SHORT_RETRY};
use super::drain::{Drained, ownership_lost, run_drain, stop_drain_before_letting_go};
use super::{Cache, Report, View, request, resolve, waiting};
use crate::api::names::bucket_credentials_secret_name;
use crate::api::{BucketPhase, DeletionPolicy, DrainMode, S3Bucket, S3BucketStatus};
use crate::backends::identity::{self, OnMissing};
use crate::backends::s3::DeleteOutcome;
use crate::cluster::{LetGo, Target, owned_secret_object, secret_data};
use crate::runtime::{Context, Failure, Next, Note, Outcome, conditions};

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
            gone_gate(backend, view).await?;
            tracing::info!(error = %e, "the bucket is gone from the backend");
            let mut out = Report::new(deleting_status(view.obj), RECHECK);
            delete_credentials(backend, view, &mut out).await?;
            out.next = Next::Release;
            Ok(out)
        }
        result => result,
    }
}

/// Refuses, with `BackendIdentityChanged`, to count a missing bucket as deleted on a store that
/// is not the one it was recorded on (see [`identity::on_missing`]); StorageGRID buckets are
/// pinned by their tenant's account.
async fn gone_gate<B: BucketBackend>(backend: &B, view: &View<'_>) -> Result<(), Error> {
    let Some(live) = backend.identity().await? else {
        return Ok(());
    };
    let obj = view.obj;
    let status = obj.status.as_ref();
    identity::on_missing(
        OnMissing::CountAsGone,
        &format!("bucket {:?}", view.desired.name),
        status.and_then(|s| s.backend_identity.as_deref()),
        &live,
        obj.annotations()
            .get(identity::CONFIRM_ANNOTATION)
            .map(String::as_str),
        (
            "s3bucket",
            &obj.namespace().unwrap_or_default(),
            &obj.name_any(),
        ),
    )
    .map_err(|message| {
        BucketFailure::Invalid {
            reason: identity::IDENTITY_CHANGED,
            message,
        }
        .into()
    })
}

/// Releases a resource with `deletionPolicy: Retain`: the bucket and its objects stay, and a drain
/// of ours is stopped first (the user chose to keep what is left). The backend is asked whether
/// it is deleting objects, not only the status (F1): a drain whose start keeper could not record
/// would otherwise go on emptying the bucket after keeper let go of it.
pub async fn retain_bucket<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
) -> Result<Report, Error> {
    let mut out = Report::new(deleting_status(view.obj), RECHECK);
    let bucket = &view.desired.name;
    let recorded = drain::is_ours(out.status.drain_status.as_ref());
    // Client-side drains run only in keeper's reconciles, which end here: nothing to ask.
    let backend_draining = !recorded
        && backend.drain_mode() == DrainMode::ServerSide
        && backend.drain_running(bucket).await?;
    let ours = backend_draining && backend.owner(&view.desired).await? == Owner::Us;
    match drain::before_letting_go(recorded, backend_draining, ours) {
        LettingGo::Release => {}
        LettingGo::StopRecordedDrain => {
            stop_drain_before_letting_go(backend, bucket, &mut out, "deletionPolicy is Retain")
                .await?;
        }
        LettingGo::StopUnrecordedDrain => {
            // Released only once the backend took the stop: an error retries the whole delete.
            backend.stop_drain(bucket).await?;
            let note = drain::stopped_unrecorded_before_letting_go();
            // Logged too: the event goes out with the status write, and a failing status write
            // is how such a drain came about; the next attempt finds nothing left to stop.
            tracing::warn!(bucket = %bucket, "{}", note.message);
            out.note(note);
            out.observed = Cache::Forget;
        }
    }
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
    let mut out = Report::new(deleting_status(obj), RECHECK);
    let bucket = &view.desired.name;
    match backend.owner(&view.desired).await? {
        Owner::Missing => {
            gone_gate(backend, view).await?;
            delete_credentials(backend, view, &mut out).await?;
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
        delete_credentials(backend, view, &mut out).await?;
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
        delete_credentials(backend, view, &mut out).await?;
        out.next = Next::Release;
        return Ok(out);
    }
    // A bucket being deleted is observed by every reconcile: its count is always there.
    let Drained::Settled(shown) = remaining else {
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
    let objects = shown.unwrap_or_default();
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
            delete_credentials(backend, view, &mut out).await?;
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

/// Deletes the bucket's own credentials once the bucket is gone, unless they are another
/// S3Bucket's (made for its bucket of the same name since this one's went): those stay, and an
/// event says what was left and whose it is.
async fn delete_credentials<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    out: &mut Report,
) -> Result<(), Error> {
    let only_key = view.only_key.as_deref();
    if let Some(left) = backend.delete_credentials(&view.desired, only_key).await? {
        out.note(Note::normal("CredentialsLeft", left));
    }
    Ok(())
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

/// Cleans up after a deleted bucket; [`Next::Release`] once nothing of it is left (or it is
/// retained by policy, or was never keeper's).
pub async fn cleanup<C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
) -> Result<Outcome<S3BucketStatus>, Error> {
    let retain = obj.spec.deletion_policy == DeletionPolicy::Retain;
    let mut resolved = match resolve(cx, obj).await {
        Ok(Ok(resolved)) => resolved,
        // Nothing was ever created without a recorded bucket name and a reachable tenant.
        Ok(Err(_)) | Err(Failure::Own(BucketFailure::Invalid { .. }))
            if lifecycle::never_created(obj) =>
        {
            return Ok(Outcome::new(
                obj.status.clone().unwrap_or_default(),
                Next::Release,
            ));
        }
        // A retained bucket too waits for its backend: keeper cannot tell whether the backend
        // is deleting its objects before it has asked (F1).
        Ok(Err(wait)) => return Ok(waiting(obj, wait, true)),
        Err(e) => return Err(e),
    };
    let mut report = if retain {
        if lifecycle::never_created(obj) {
            // Nothing of it exists on the backend: nothing to retain or to stop.
            return Ok(Outcome::new(
                obj.status.clone().unwrap_or_default(),
                Next::Release,
            ));
        }
        retain_bucket(&resolved.backend, &resolved.view).await?
    } else {
        resolved.view.only_key = only_published_key(cx, obj).await;
        cleanup_bucket(&resolved.backend, &resolved.view).await?
    };
    if retain {
        keep_credentials(cx, obj, &mut report.outcome).await?;
    }
    cx.reconciler.settle(obj, &report);
    Ok(report.outcome)
}

/// See [`View::only_key`]. `None` when the Secret cannot be read: the user's keys are listed.
async fn only_published_key<C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
) -> Option<String> {
    if !lifecycle::was_ready(obj) {
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
async fn keep_credentials<C: Connector>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
    out: &mut Outcome<S3BucketStatus>,
) -> Result<(), Error> {
    let name = bucket_credentials_secret_name(&obj.name_any());
    if cx
        .kube()
        .let_go_secret(&Target::of(obj), &name, LetGo::Ownership)
        .await?
    {
        out.note(Note::normal(
            "CredentialsKept",
            format!(
                "the bucket's keys stay usable in Secret {name} (no longer owned by the S3Bucket)"
            ),
        ));
    }
    Ok(())
}

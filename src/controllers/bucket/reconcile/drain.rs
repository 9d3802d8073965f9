//! The drain state machine performed on a bucket of ours ([`run_drain`]), the ownership checks
//! before destructive calls, and stopping a drain before keeper lets go of a bucket.

use std::time::Duration;

use super::super::backend::{BucketBackend, Observed, Owner, Purpose};
use super::super::plan::drain::{self, DrainStep};
use super::super::plan::requests::{self, Kind, Request};
use super::super::plan::usage::Look;
use super::super::{CLIENT_DRAIN_CONTINUE, Error, SHORT_RETRY};
use super::{Cache, Report, View, record_handled, request};
use crate::api::BucketPhase;
use crate::runtime::Next;

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

/// The bucket is gone from the backend: `Pending`, and created again shortly.
fn missing(out: &mut Report, bucket: &str, generation: Option<i64>) {
    out.status.drain_status = None;
    out.status.phase = Some(BucketPhase::Pending);
    let message = format!("bucket {bucket:?} no longer exists on the backend; creating it again");
    // Someone deleted it behind keeper's back: worth a warning.
    out.ready(false, "BucketMissing", message, generation, true);
    out.next = Next::Requeue(SHORT_RETRY);
    out.observed = Cache::Forget;
}

/// An idle Ready bucket: looks at the backend as [`super::super::plan::usage::idle_check`] decided (existence, usage,
/// or nothing), stops a drain the backend runs that keeper did not start, and shows usage only
/// where the provider refreshes it. Returns the object count when status shows one.
async fn idle<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    out: &mut Report,
) -> Result<Drained, Error> {
    let bucket = &view.desired.name;
    let generation = view.obj.metadata.generation;
    let draining = match view.idle.look {
        Look::Nothing => false,
        Look::Existence => match backend.existence(bucket).await? {
            Some(draining) => draining,
            None => {
                missing(out, bucket, generation);
                return Ok(Drained::Unsettled);
            }
        },
        Look::Usage => match backend.observe(bucket, Purpose::Refresh).await? {
            Some(observed) => {
                out.observed = Cache::Store(observed);
                observed.backend_draining
            }
            None => {
                missing(out, bucket, generation);
                return Ok(Drained::Unsettled);
            }
        },
    };
    out.seen |= view.idle.look != Look::Nothing;
    out.next = Next::Requeue(view.idle.next);
    if draining {
        backend.stop_drain(bucket).await?;
        out.note(drain::cancel_orphan());
        out.observed = Cache::Forget;
    }
    let objects = if view.idle.shows_usage {
        // This look's figures, else the last ones (at most one interval old).
        let observed = match out.observed {
            Cache::Store(observed) => Some(observed),
            Cache::Keep | Cache::Forget => view.cached,
        };
        if let Some(observed) = observed {
            out.status.object_count = Some(observed.objects);
            out.status.object_bytes = Some(observed.bytes);
        }
        out.status.object_count
    } else {
        // Not refreshed: no figures rather than stale ones shown as current.
        out.status.object_count = None;
        out.status.object_bytes = None;
        None
    };
    Ok(Drained::Settled(objects))
}

/// Where the drain machine left a bucket.
#[derive(Debug, Clone, Copy)]
pub(super) enum Drained {
    /// Idle or finished: the object count status shows (`None`: usage is not refreshed).
    Settled(Option<i64>),
    /// A drain runs or is blocked, or the bucket is missing.
    Unsettled,
}

/// Runs the drain state machine on an existing bucket of ours (see [`Drained`]).
pub(super) async fn run_drain<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    out: &mut Report,
) -> Result<Drained, Error> {
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
    // A live bucket with no drain asked for and none of ours running looks at the backend on
    // its own timer only (a bucket being deleted is looked at by every reconcile).
    if !wants && !ours && obj.metadata.deletion_timestamp.is_none() {
        return idle(backend, view, out).await;
    }
    let Some(mut observed) = observe(backend, view, fresh, purpose, out).await? else {
        missing(out, bucket, generation);
        return Ok(Drained::Unsettled);
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
            return Ok(Drained::Unsettled);
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
            return Ok(Drained::Unsettled);
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
                return Ok(Drained::Unsettled);
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
            out.next = Next::Requeue(if client_side {
                CLIENT_DRAIN_CONTINUE
            } else {
                drain::until_next_poll(polled, &view.drain, view.now)
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
        Ok(Drained::Unsettled)
    } else {
        Ok(Drained::Settled(Some(observed.objects)))
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
pub(super) async fn ownership_lost<B: BucketBackend>(
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
pub(super) async fn stop_drain_before_letting_go<B: BucketBackend>(
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

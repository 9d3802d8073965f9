//! The drain round: passes over the bucket, listing ahead while earlier batches are deleted,
//! a few `DeleteObjects` in flight, generic over [`Target`] so that it is tested without a store.

use super::*;

/// Per-key error codes that mean retention or a legal hold protects the object.
pub(super) fn is_lock_error(code: &str) -> bool {
    matches!(code, "AccessDenied" | "InvalidRequest" | "ObjectLocked")
}

/// Awaits `work` while the deletes in flight go on (and are counted as they finish).
pub(super) async fn alongside<T, D>(
    work: impl Future<Output = T>,
    running: &mut FuturesUnordered<D>,
    round: &mut DrainRound,
) -> T
where
    D: Future<Output = (u64, Result<Vec<KeyFailure>, S3Error>)>,
{
    let mut work = pin!(work);
    loop {
        tokio::select! {
            biased;
            Some(done) = running.next(), if !running.is_empty() => round.settle(done),
            out = &mut work => return out,
        }
    }
}

/// Where a pass over the bucket takes its next page from.
pub(super) enum Source {
    /// The entries the count that started the drain listed.
    Counted,
    /// A listing, from this cursor on.
    Listing(Cursor),
}

/// Up to `n` of the counted entries, as a page.
pub(super) fn counted_page(counted: &mut VecDeque<Entry>, n: usize) -> Page {
    Page {
        entries: counted.drain(..n.min(counted.len())).collect(),
        bytes: 0,
        next: None,
    }
}

/// One round of a client-side drain: passes over the bucket, each listing it from the start,
/// until a listing from the start finds nothing, the budget is spent (checked before each
/// listing: the page in hand is deleted whole), a pass deletes nothing (every key failed), or
/// something stops the drain (object lock, ownership, a failed call).
///
/// The first pass deletes the `counted` entries, if any, without listing: the count that started
/// the drain listed them a moment ago, and listing every object twice would cost the drain as
/// much again as its deletes on a store whose listings are slow. What the round leaves of them
/// stays in `counted` for the next round. Only a listing finds the bucket empty: an entry deleted
/// meanwhile costs nothing, an object written meanwhile is found by the pass that follows.
///
/// Within a pass the next page is listed before the current one is deleted, while earlier
/// batches are still in flight: a listing continued from a marker whose entry is already gone
/// ends early on some stores. At most `pace.in_flight` batches run at once, each started only
/// after the ownership check and no sooner than `pace.max_per_second` allows. Every batch is
/// full but the last of a pass, so a bucket of N entries takes ⌈N/1000⌉ `DeleteObjects` calls.
/// Nothing but the counted entries is kept between rounds, and those in memory only: a restart
/// lists the bucket from the start again.
pub(in crate::backends::s3) async fn run_round<T: Target>(
    target: &T,
    mut listing: Listing,
    pace: &DrainPace,
    counted: &mut VecDeque<Entry>,
) -> DrainRound {
    let began = Instant::now();
    let mut round = DrainRound::default();
    let mut running = FuturesUnordered::new();
    // Objects in the batches started so far (the rate cap counts them as they start).
    let mut requested: u64 = 0;
    let spent = |requested: u64| requested > 0 && began.elapsed() >= pace.budget;
    loop {
        let deleted_before = round.deleted;
        let from_count = !counted.is_empty();
        let mut page = if from_count {
            counted_page(counted, pace.page())
        } else {
            match target.list(listing, &Cursor::Start, pace.page()).await {
                Ok(page) => page,
                Err(e) => {
                    round.error = Some(e);
                    return round;
                }
            }
        };
        if page.entries.is_empty() {
            if listing == Listing::Objects {
                // Versions or delete markers (versioning turned on meanwhile) are invisible to
                // ListObjectsV2: emptiness is only believed from ListObjectVersions.
                listing = Listing::Versions;
                continue;
            }
            round.empty = true;
            return round;
        }
        // Checked after the listing, so that a round that deleted the last objects still finds
        // the bucket empty.
        if spent(requested) {
            return round;
        }
        let mut out_of_budget;
        'pages: loop {
            // Once the time is up no further page is listed, and the page in hand is deleted
            // whole: a listing can cost more than the deletes of its page, and a round that
            // stopped mid-page would list it again.
            let source = if from_count {
                (!counted.is_empty()).then_some(Source::Counted)
            } else {
                page.next.take().map(Source::Listing)
            };
            out_of_budget = source.is_some() && spent(requested);
            let next = match source.filter(|_| !out_of_budget) {
                Some(Source::Counted) => Some(counted_page(counted, pace.page())),
                Some(Source::Listing(cursor)) => {
                    match alongside(
                        target.list(listing, &cursor, pace.page()),
                        &mut running,
                        &mut round,
                    )
                    .await
                    {
                        Ok(next) => Some(next),
                        Err(e) => {
                            round.error.get_or_insert(e);
                            break 'pages;
                        }
                    }
                }
                None => None,
            };
            for chunk in page.entries.chunks(pace.batch()) {
                while running.len() >= pace.in_flight.max(1) {
                    let done = running.next().await.expect("deletes are running");
                    round.settle(done);
                }
                if round.stopped() {
                    break 'pages;
                }
                let due = began + pace.due(requested);
                alongside(tokio::time::sleep_until(due), &mut running, &mut round).await;
                match alongside(target.not_owned(), &mut running, &mut round).await {
                    Ok(None) => {}
                    Ok(Some(why)) => round.not_ours = Some(why),
                    Err(e) => {
                        round.error.get_or_insert(e);
                    }
                }
                if round.stopped() {
                    break 'pages;
                }
                let batch = chunk.to_vec();
                let count = batch.len() as u64;
                requested += count;
                running.push(async move { (count, target.delete(batch).await) });
            }
            match next {
                Some(next) => page = next,
                None => break 'pages,
            }
        }
        while let Some(done) = running.next().await {
            round.settle(done);
        }
        if round.stopped() || out_of_budget || round.deleted == deleted_before {
            return round;
        }
    }
}

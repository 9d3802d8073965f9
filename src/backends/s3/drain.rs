//! Usage by bounded listing and the client-side drain in `DeleteObjects` batches.
//!
//! A drain round lists the bucket with the cheapest call that sees everything in it
//! (`ListObjectsV2` for a bucket that was never versioned, `ListObjectVersions` otherwise), lists
//! the next page while the current one is deleted, and keeps a few `DeleteObjects` calls in
//! flight. The pipeline ([`run_round`]) is generic over [`Target`] so that its ordering and
//! bounds are tested without a store.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::{
    ErrorClass, MAX_DELETE_BATCH, OwnerMark, Ownership, S3Error, S3Store, Versioning, classify,
};
use crate::metrics::Metrics;

/// Objects and bytes in a bucket, counting every version and delete marker (each must go before
/// the bucket can be deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub objects: i64,
    pub bytes: i64,
    /// False when the listing stopped at its bound: the numbers are a lower bound.
    pub complete: bool,
}

/// Which call lists what must go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `ListObjectsV2`: one entry per key, complete only in a bucket that was never versioned
    /// (no older versions, no delete markers), and much cheaper on some stores.
    Objects,
    /// `ListObjectVersions`: every version and delete marker.
    Versions,
}

impl Listing {
    /// The cheapest listing that sees everything in a bucket in this versioning state. A
    /// suspended bucket may still hold versions and delete markers.
    pub fn for_versioning(versioning: Versioning) -> Listing {
        match versioning {
            Versioning::Never => Listing::Objects,
            Versioning::Enabled | Versioning::Suspended => Listing::Versions,
        }
    }

    fn operation(self) -> &'static str {
        match self {
            Listing::Objects => "list_objects_v2",
            Listing::Versions => "list_object_versions",
        }
    }
}

/// Where a listing starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cursor {
    Start,
    /// After this entry (`start-after` for objects; key and version-id markers for versions).
    After {
        key: String,
        version: Option<String>,
    },
}

/// One thing to delete: a key, or one version (or delete marker) of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub key: String,
    pub version: Option<String>,
}

/// One listing page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Page {
    pub entries: Vec<Entry>,
    pub bytes: i64,
    /// Where the listing goes on; `None` when this page is the last.
    pub next: Option<Cursor>,
}

/// A key `DeleteObjects` did not delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyFailure {
    pub key: String,
    pub code: String,
    pub message: String,
}

/// What a drain round does to a bucket; the store implements it, the pipeline's tests fake it.
pub(super) trait Target {
    fn list(
        &self,
        listing: Listing,
        from: &Cursor,
        max_keys: usize,
    ) -> impl Future<Output = Result<Page, S3Error>>;

    /// Why the bucket is no longer the drain's owner's, checked right before each batch.
    fn not_owned(&self) -> impl Future<Output = Result<Option<String>, S3Error>>;

    /// One `DeleteObjects` call; the keys it did not delete.
    fn delete(&self, batch: Vec<Entry>) -> impl Future<Output = Result<Vec<KeyFailure>, S3Error>>;
}

/// How fast a client-side drain goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPace {
    /// How long a round starts new batches (it always starts at least one).
    pub budget: Duration,
    /// The user's cap: objects deleted per second.
    pub max_per_second: u32,
    /// `DeleteObjects` calls in flight at once.
    pub in_flight: usize,
}

impl DrainPace {
    /// Keys per `DeleteObjects` call: 1,000, or fewer under a lower rate cap (a batch never
    /// needs more than a second of the budget).
    pub fn batch(&self) -> usize {
        MAX_DELETE_BATCH.min(self.max_per_second.max(1) as usize)
    }

    /// Entries asked of one listing call: enough for every delete in flight. S3 gives at most
    /// 1,000 a page whatever is asked; a store that gives more saves listing calls.
    pub fn page(&self) -> usize {
        self.batch() * self.in_flight.max(1)
    }

    /// How long after the round began the batch that follows `requested` objects may start.
    pub fn due(&self, requested: u64) -> Duration {
        Duration::from_secs_f64(requested as f64 / f64::from(self.max_per_second.max(1)))
    }
}

/// What one drain round did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainRound {
    /// Versions and delete markers deleted in this round.
    pub deleted: u64,
    /// A listing from the start came back empty: nothing is left.
    pub empty: bool,
    /// Objects that cannot be deleted because of object lock or a legal hold: the drain must stop.
    pub blocked: Option<String>,
    /// Other per-key failures in this round (retried by the next round, which lists again).
    pub failed: Vec<String>,
    /// Incomplete multipart uploads aborted in this round.
    pub aborted_uploads: u64,
    /// The bucket no longer carries the drain's owner mark: the round stopped before deleting.
    pub not_ours: Option<String>,
    /// A call that failed and ended the round early; what `deleted` counts was deleted all the
    /// same (the next round lists the bucket again, so the failed batch is retried, not lost).
    pub error: Option<S3Error>,
}

impl DrainRound {
    /// Whether the round must start no further batch.
    fn stopped(&self) -> bool {
        self.blocked.is_some() || self.not_ours.is_some() || self.error.is_some()
    }

    /// Counts a finished `DeleteObjects` call of `requested` keys.
    fn settle(&mut self, (requested, result): (u64, Result<Vec<KeyFailure>, S3Error>)) {
        let failures = match result {
            Ok(failures) => failures,
            Err(e) => {
                self.error.get_or_insert(e);
                return;
            }
        };
        self.deleted += requested - failures.len() as u64;
        if self.blocked.is_none()
            && let Some(locked) = failures.iter().find(|f| is_lock_error(&f.code))
        {
            self.blocked = Some(format!(
                "object {:?} cannot be deleted ({}: {}); object lock retention or a legal hold protects it",
                locked.key, locked.code, locked.message
            ));
        }
        self.failed.extend(
            failures
                .iter()
                .map(|f| format!("{}: {}: {}", f.key, f.code, f.message)),
        );
    }
}

/// Per-key error codes that mean retention or a legal hold protects the object.
fn is_lock_error(code: &str) -> bool {
    matches!(code, "AccessDenied" | "InvalidRequest" | "ObjectLocked")
}

/// Awaits `work` while the deletes in flight go on (and are counted as they finish).
async fn alongside<T, D>(
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

/// How long the entries a count listed are kept for the drain that count starts: its first round
/// follows within seconds, and the entries of a drain that never started must not stay.
const COUNTED_TTL: Duration = Duration::from_secs(300);
/// Memory the kept entries of one store may take, across its buckets (a key is up to 1 KiB): a
/// count beyond it keeps what fits, and the drain lists the rest.
const COUNTED_BYTES: usize = 16 << 20;

/// The entries counts listed for the drains they start, by bucket; shared by a store's clones.
#[derive(Default)]
pub(super) struct CountedEntries {
    buckets: HashMap<String, Counted>,
    bytes: usize,
}

struct Counted {
    listing: Listing,
    entries: VecDeque<Entry>,
    bytes: usize,
    at: Instant,
}

/// What an entry takes in memory, about.
fn entry_bytes(entry: &Entry) -> usize {
    std::mem::size_of::<Entry>() + entry.key.len() + entry.version.as_ref().map_or(0, String::len)
}

impl CountedEntries {
    /// Keeps `entries` of `bucket`, listed with `listing`, in place of what was kept for it;
    /// as many as fit in [`COUNTED_BYTES`] with what other buckets keep.
    fn keep(&mut self, bucket: &str, listing: Listing, entries: VecDeque<Entry>, now: Instant) {
        self.forget(bucket);
        let expired: Vec<String> = self
            .buckets
            .iter()
            .filter(|(_, kept)| now.duration_since(kept.at) >= COUNTED_TTL)
            .map(|(name, _)| name.clone())
            .collect();
        for name in expired {
            self.forget(&name);
        }
        let room = COUNTED_BYTES.saturating_sub(self.bytes);
        let (mut fits, mut bytes) = (0, 0);
        for entry in &entries {
            let size = entry_bytes(entry);
            if bytes + size > room {
                break;
            }
            (fits, bytes) = (fits + 1, bytes + size);
        }
        let mut entries = entries;
        entries.truncate(fits);
        if entries.is_empty() {
            return;
        }
        self.bytes += bytes;
        self.buckets.insert(
            bucket.to_string(),
            Counted {
                listing,
                entries,
                bytes,
                at: now,
            },
        );
    }

    /// Takes what is kept for `bucket`, if it was listed with `listing` (a bucket whose
    /// versioning changed since its count has versions the count did not see) and lately.
    fn take(&mut self, bucket: &str, listing: Listing, now: Instant) -> VecDeque<Entry> {
        match self.buckets.remove(bucket) {
            Some(kept) => {
                self.bytes -= kept.bytes;
                if kept.listing == listing && now.duration_since(kept.at) < COUNTED_TTL {
                    kept.entries
                } else {
                    VecDeque::new()
                }
            }
            None => VecDeque::new(),
        }
    }

    fn forget(&mut self, bucket: &str) {
        if let Some(kept) = self.buckets.remove(bucket) {
            self.bytes -= kept.bytes;
        }
    }
}

/// Where a pass over the bucket takes its next page from.
enum Source {
    /// The entries the count that started the drain listed.
    Counted,
    /// A listing, from this cursor on.
    Listing(Cursor),
}

/// Up to `n` of the counted entries, as a page.
fn counted_page(counted: &mut VecDeque<Entry>, n: usize) -> Page {
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
pub(super) async fn run_round<T: Target>(
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

/// A bucket of a store, as the drain pipeline sees it.
struct Bucket<'a> {
    store: &'a S3Store,
    metrics: &'a Metrics,
    name: &'a str,
    owner: Option<&'a OwnerMark>,
}

impl Target for Bucket<'_> {
    async fn list(
        &self,
        listing: Listing,
        from: &Cursor,
        max_keys: usize,
    ) -> Result<Page, S3Error> {
        let max_keys = i32::try_from(max_keys).unwrap_or(i32::MAX);
        let (key, version) = match from {
            Cursor::Start => (None, None),
            Cursor::After { key, version } => (Some(key.clone()), version.clone()),
        };
        let operation = listing.operation();
        let page = self
            .store
            .call(self.metrics, operation, async {
                match listing {
                    Listing::Objects => {
                        let out = self
                            .store
                            .client
                            .list_objects_v2()
                            .bucket(self.name)
                            .max_keys(max_keys)
                            .set_start_after(key)
                            .send()
                            .await
                            .map_err(|e| classify(operation, e))?;
                        let entries: Vec<Entry> = out
                            .contents()
                            .iter()
                            .filter_map(|o| {
                                Some(Entry {
                                    key: o.key()?.to_string(),
                                    version: None,
                                })
                            })
                            .collect();
                        // `start-after` a key works whatever happened to that key since.
                        let next = out.is_truncated().unwrap_or(false).then(|| Cursor::After {
                            key: entries.last().map(|e| e.key.clone()).unwrap_or_default(),
                            version: None,
                        });
                        Ok(Page {
                            bytes: out.contents().iter().filter_map(|o| o.size()).sum(),
                            entries,
                            next,
                        })
                    }
                    Listing::Versions => {
                        let out = self
                            .store
                            .client
                            .list_object_versions()
                            .bucket(self.name)
                            .max_keys(max_keys)
                            .set_key_marker(key)
                            .set_version_id_marker(version)
                            .send()
                            .await
                            .map_err(|e| classify(operation, e))?;
                        let entries = out
                            .versions()
                            .iter()
                            .map(|v| (v.key(), v.version_id()))
                            .chain(
                                out.delete_markers()
                                    .iter()
                                    .map(|m| (m.key(), m.version_id())),
                            )
                            .filter_map(|(key, version)| {
                                Some(Entry {
                                    key: key?.to_string(),
                                    version: version.map(str::to_string),
                                })
                            })
                            .collect();
                        let next = out.is_truncated().unwrap_or(false).then(|| Cursor::After {
                            key: out.next_key_marker().unwrap_or_default().to_string(),
                            version: out.next_version_id_marker().map(str::to_string),
                        });
                        Ok(Page {
                            bytes: out.versions().iter().filter_map(|v| v.size()).sum(),
                            entries,
                            next,
                        })
                    }
                }
            })
            .await?;
        // A truncated page must say where to go on, and somewhere new: a store that repeats its
        // marker would be listed forever.
        if let Some(Cursor::After { key, .. }) = &page.next
            && (key.is_empty() || page.next.as_ref() == Some(from))
        {
            return Err(S3Error {
                operation,
                class: ErrorClass::Permanent,
                code: "RepeatedContinuationMarker".to_string(),
                message: format!(
                    "the store answered a truncated listing of bucket {} without a new continuation marker ({key:?}); it does not page correctly",
                    self.name
                ),
            });
        }
        Ok(page)
    }

    async fn not_owned(&self) -> Result<Option<String>, S3Error> {
        let Some(owner) = self.owner else {
            return Ok(None);
        };
        self.store
            .not_owned_by(self.metrics, self.name, owner)
            .await
    }

    async fn delete(&self, batch: Vec<Entry>) -> Result<Vec<KeyFailure>, S3Error> {
        let ids = batch
            .into_iter()
            .map(|e| {
                ObjectIdentifier::builder()
                    .key(e.key)
                    .set_version_id(e.version)
                    .build()
                    .expect("key is set")
            })
            .collect();
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .expect("objects are set");
        let out = self
            .store
            .call(self.metrics, "delete_objects", async {
                self.store
                    .client
                    .delete_objects()
                    .bucket(self.name)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(|e| classify("delete_objects", e))
            })
            .await?;
        // Quiet mode reports only failures; everything else was deleted.
        Ok(out
            .errors()
            .iter()
            .map(|f| KeyFailure {
                key: f.key().unwrap_or_default().to_string(),
                code: f.code().unwrap_or("Unknown").to_string(),
                message: f.message().unwrap_or_default().to_string(),
            })
            .collect())
    }
}

impl S3Store {
    /// The bucket's versioning state; `Ok(None)` when the bucket does not exist.
    async fn versioning_if_exists(
        &self,
        metrics: &Metrics,
        bucket: &str,
    ) -> Result<Option<Versioning>, S3Error> {
        match self.versioning(metrics, bucket).await {
            Ok(versioning) => Ok(Some(versioning)),
            Err(e) if e.code == "NoSuchBucket" => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Counts versions and delete markers (with the cheapest listing for the bucket's versioning
    /// state), listing at most about `max_entries` of them so that a bucket with millions of
    /// objects costs a bounded number of requests. `Ok(None)` when the bucket does not exist.
    pub async fn usage(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
    ) -> Result<Option<Usage>, S3Error> {
        self.count(metrics, bucket, max_entries, false).await
    }

    /// As [`S3Store::usage`], for a drain about to start: the entries listed are kept (in memory,
    /// for a few minutes, within [`COUNTED_BYTES`]) for the drain's first rounds, which then
    /// delete them without listing the bucket again.
    pub async fn count_for_drain(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
    ) -> Result<Option<Usage>, S3Error> {
        self.count(metrics, bucket, max_entries, true).await
    }

    /// Drops the entries kept for a drain of `bucket` (it ended, or was canceled).
    pub fn forget_counted(&self, bucket: &str) {
        self.counted
            .lock()
            .expect("counted entries lock")
            .forget(bucket);
    }

    async fn count(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
        for_drain: bool,
    ) -> Result<Option<Usage>, S3Error> {
        let Some(versioning) = self.versioning_if_exists(metrics, bucket).await? else {
            self.forget_counted(bucket);
            return Ok(None);
        };
        let listing = Listing::for_versioning(versioning);
        let target = Bucket {
            store: self,
            metrics,
            name: bucket,
            owner: None,
        };
        let mut usage = Usage::default();
        let mut cursor = Cursor::Start;
        // What a drain may delete without listing again, within the memory it may take.
        let mut listed = VecDeque::new();
        let mut listed_bytes = 0;
        let mut keep = for_drain;
        loop {
            // Ask for what is left to count: S3 gives 1,000 a page, some stores give more.
            let wanted = usize::try_from(max_entries - usage.objects)
                .unwrap_or_default()
                .max(MAX_DELETE_BATCH);
            let page = match target.list(listing, &cursor, wanted).await {
                Ok(page) => page,
                Err(e) if e.code == "NoSuchBucket" => {
                    self.forget_counted(bucket);
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            usage.objects += page.entries.len() as i64;
            usage.bytes += page.bytes;
            if keep {
                listed_bytes += page.entries.iter().map(entry_bytes).sum::<usize>();
                // The entries beyond the bound are listed again by the drain.
                keep = listed_bytes <= COUNTED_BYTES;
                listed.extend(page.entries);
            }
            usage.complete = page.next.is_none();
            match page.next {
                Some(next) if usage.objects < max_entries => cursor = next,
                _ => break,
            }
        }
        // In place of an earlier count's, even when nothing is listed.
        if for_drain {
            self.counted.lock().expect("counted entries lock").keep(
                bucket,
                listing,
                listed,
                Instant::now(),
            );
        }
        Ok(Some(usage))
    }

    /// Why the bucket is not `owner`'s, or `None` when its mark names `owner`. Checked right
    /// before each delete batch: a bucket re-tagged (or re-created by someone else) while a
    /// drain runs loses not one more object.
    async fn not_owned_by(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
    ) -> Result<Option<String>, S3Error> {
        Ok(match self.ownership(metrics, bucket).await? {
            Ownership::Exists { mark: Some(mark) } if mark.same_owner(owner) => None,
            Ownership::Exists { mark: Some(mark) } => Some(format!(
                "bucket {bucket:?} is now marked as owned by {}, not by {}",
                mark.describe(),
                owner.describe()
            )),
            Ownership::Exists { mark: None } => Some(format!(
                "bucket {bucket:?} no longer carries keeper's ownership tags"
            )),
            Ownership::Missing => Some(format!("bucket {bucket:?} no longer exists")),
        })
    }

    /// Deletes versions and delete markers for about `pace.budget` (at least one batch), see
    /// [`run_round`], then, once nothing is left, aborts incomplete multipart uploads (their
    /// parts hold data and keep some stores from deleting the bucket). Each batch first checks
    /// that the bucket still carries `owner`'s mark.
    pub async fn drain_round(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
        pace: &DrainPace,
    ) -> Result<DrainRound, S3Error> {
        let listing = Listing::for_versioning(self.versioning(metrics, bucket).await?);
        let target = Bucket {
            store: self,
            metrics,
            name: bucket,
            owner: Some(owner),
        };
        let mut counted = self.counted.lock().expect("counted entries lock").take(
            bucket,
            listing,
            Instant::now(),
        );
        let mut round = run_round(&target, listing, pace, &mut counted).await;
        // What is left of the count is for the next round, unless the drain must stop.
        if round.blocked.is_none() && round.not_ours.is_none() {
            self.counted.lock().expect("counted entries lock").keep(
                bucket,
                listing,
                counted,
                Instant::now(),
            );
        }
        if round.empty {
            self.abort_uploads(metrics, bucket, owner, &mut round)
                .await?;
            // Aborted uploads are listed again by the next round, which then finds none.
            round.empty = round.not_ours.is_none() && round.aborted_uploads == 0;
        }
        Ok(round)
    }

    /// Aborts one page of the incomplete multipart uploads of a bucket whose objects are gone,
    /// after the ownership check (a page: a store that lists aborted uploads again must not keep
    /// a round going forever).
    async fn abort_uploads(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
        round: &mut DrainRound,
    ) -> Result<(), S3Error> {
        let page = self
            .call(metrics, "list_multipart_uploads", async {
                self.client
                    .list_multipart_uploads()
                    .bucket(bucket)
                    .max_uploads(MAX_DELETE_BATCH as i32)
                    .send()
                    .await
                    .map_err(|e| classify("list_multipart_uploads", e))
            })
            .await?;
        let uploads: Vec<(String, String)> = page
            .uploads()
            .iter()
            .filter_map(|u| Some((u.key()?.to_string(), u.upload_id()?.to_string())))
            .collect();
        if uploads.is_empty() {
            return Ok(());
        }
        round.not_ours = self.not_owned_by(metrics, bucket, owner).await?;
        if round.not_ours.is_some() {
            return Ok(());
        }
        for (key, upload_id) in uploads {
            self.call(metrics, "abort_multipart_upload", async {
                match self
                    .client
                    .abort_multipart_upload()
                    .bucket(bucket)
                    .key(&key)
                    .upload_id(&upload_id)
                    .send()
                    .await
                {
                    Ok(_) => Ok(()),
                    // Completed or aborted meanwhile: gone either way.
                    Err(e) if e.code() == Some("NoSuchUpload") => Ok(()),
                    Err(e) => Err(classify("abort_multipart_upload", e)),
                }
            })
            .await?;
            round.aborted_uploads += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

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

mod counted;
mod pipeline;
mod sdk;

pub(super) use counted::CountedEntries;
use counted::*;
use pipeline::*;

#[cfg(test)]
mod tests;

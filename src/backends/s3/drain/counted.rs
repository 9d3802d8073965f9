//! The entries a count listed, kept for the drain that count starts, so that its first pass
//! deletes them without listing the bucket again.

use super::*;

/// How long the entries a count listed are kept for the drain that count starts: its first round
/// follows within seconds, and the entries of a drain that never started must not stay.
pub(super) const COUNTED_TTL: Duration = Duration::from_secs(300);
/// Memory the kept entries of one store may take, across its buckets (a key is up to 1 KiB): a
/// count beyond it keeps what fits, and the drain lists the rest.
pub(super) const COUNTED_BYTES: usize = 16 << 20;

/// The entries counts listed for the drains they start, by bucket; shared by a store's clones.
#[derive(Default)]
pub(in crate::backends::s3) struct CountedEntries {
    pub(super) buckets: HashMap<String, Counted>,
    pub(super) bytes: usize,
}

pub(super) struct Counted {
    pub(super) listing: Listing,
    pub(super) entries: VecDeque<Entry>,
    pub(super) bytes: usize,
    pub(super) at: Instant,
}

/// What an entry takes in memory, about.
pub(super) fn entry_bytes(entry: &Entry) -> usize {
    std::mem::size_of::<Entry>() + entry.key.len() + entry.version.as_ref().map_or(0, String::len)
}

impl CountedEntries {
    /// Keeps `entries` of `bucket`, listed with `listing`, in place of what was kept for it;
    /// as many as fit in [`COUNTED_BYTES`] with what other buckets keep.
    pub(super) fn keep(
        &mut self,
        bucket: &str,
        listing: Listing,
        entries: VecDeque<Entry>,
        now: Instant,
    ) {
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
    pub(super) fn take(&mut self, bucket: &str, listing: Listing, now: Instant) -> VecDeque<Entry> {
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

    pub(super) fn forget(&mut self, bucket: &str) {
        if let Some(kept) = self.buckets.remove(bucket) {
            self.bytes -= kept.bytes;
        }
    }
}

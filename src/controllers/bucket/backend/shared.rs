//! Answers that one call gives for every bucket of a tenant (StorageGRID's container listing and
//! tenant usage), shared by the tenant's buckets for a while: the idle buckets of a tenant with
//! N buckets cost one call per interval between them, not N (nor N², each listing all N).
//!
//! Only the idle looks of Ready buckets read from here (see [`super::super::plan::usage`]):
//! what decides an action (the ownership look before a create or a delete, a drain's progress)
//! always asks the backend.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One tenant-wide answer and when it was fetched. One fetch at a time: buckets of the tenant
/// that ask meanwhile wait for it and share it.
pub struct Shared<T> {
    slot: tokio::sync::Mutex<Option<(Instant, Arc<T>)>>,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            slot: tokio::sync::Mutex::new(None),
        }
    }
}

impl<T> Shared<T> {
    /// The answer fetched less than `ttl` ago if it `covers` what the caller asks about, else a
    /// fresh one (kept for the next callers). An answer that does not cover it (a bucket created
    /// after the listing) is fetched again rather than taken for "missing".
    pub async fn get<E, Fut>(
        &self,
        ttl: Duration,
        covers: impl Fn(&T) -> bool,
        fetch: impl FnOnce() -> Fut,
    ) -> Result<Arc<T>, E>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some((at, answer)) = slot.as_ref()
            && at.elapsed() < ttl
            && covers(answer)
        {
            return Ok(answer.clone());
        }
        let answer = Arc::new(fetch().await?);
        *slot = Some((Instant::now(), answer.clone()));
        Ok(answer)
    }
}

/// The shared answers of the tenants this process looks at, by key (provider and account).
pub struct PerTenant<V> {
    tenants: Mutex<Tenants<V>>,
}

struct Tenants<V> {
    /// Each tenant's entry and when a bucket last asked for it.
    entries: HashMap<String, (Arc<V>, Instant)>,
    last_pruned: Instant,
}

/// An entry no bucket asked for in this long is dropped: its tenant is gone (deleted, its
/// buckets with it) or its buckets look less often than this, and then pay one fetch per look
/// instead of keeping a listing in memory between looks (the default `bucketCheckInterval` is an
/// hour).
const FORGOTTEN_AFTER: Duration = Duration::from_secs(2 * 3600);

impl<V> Default for PerTenant<V> {
    fn default() -> Self {
        PerTenant {
            tenants: Mutex::new(Tenants {
                entries: HashMap::new(),
                last_pruned: Instant::now(),
            }),
        }
    }
}

impl<V: Default> PerTenant<V> {
    /// The tenant's entry, created empty on first use.
    pub fn of(&self, key: &str) -> Arc<V> {
        self.of_at(key, Instant::now())
    }

    fn of_at(&self, key: &str, now: Instant) -> Arc<V> {
        let mut tenants = self.tenants.lock().expect("per-tenant cache lock");
        if now.saturating_duration_since(tenants.last_pruned) >= FORGOTTEN_AFTER {
            tenants
                .entries
                .retain(|_, (_, used)| now.saturating_duration_since(*used) < FORGOTTEN_AFTER);
            tenants.last_pruned = now;
        }
        let (entry, used) = tenants
            .entries
            .entry(key.to_string())
            .or_insert_with(|| (Arc::default(), now));
        *used = now;
        entry.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const TTL: Duration = Duration::from_secs(3600);
    /// A TTL short enough to see pass in a test.
    const SHORT: Duration = Duration::from_millis(500);

    /// A tenant-wide listing that counts its fetches.
    struct Listing {
        shared: Shared<Vec<String>>,
        fetches: AtomicUsize,
        buckets: Mutex<Vec<String>>,
    }

    impl Listing {
        fn of(buckets: &[&str]) -> Listing {
            Listing {
                shared: Shared::default(),
                fetches: AtomicUsize::new(0),
                buckets: Mutex::new(buckets.iter().map(|b| b.to_string()).collect()),
            }
        }

        async fn has(&self, bucket: &str) -> bool {
            self.has_within(TTL, bucket).await
        }

        async fn has_within(&self, ttl: Duration, bucket: &str) -> bool {
            let listed = self
                .shared
                .get::<(), _>(
                    ttl,
                    |listed| listed.iter().any(|b| b == bucket),
                    || async {
                        self.fetches.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        Ok(self.buckets.lock().unwrap().clone())
                    },
                )
                .await
                .unwrap();
            listed.iter().any(|b| b == bucket)
        }
    }

    #[tokio::test]
    async fn many_buckets_of_a_tenant_share_one_fetch_per_ttl() {
        let names: Vec<String> = (0..100).map(|i| format!("b{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let listing = Listing::of(&refs);
        // A hundred buckets at once (as after a start): one fetch, the others wait for it.
        let all =
            futures::future::join_all(names.iter().map(|b| listing.has_within(SHORT, b))).await;
        assert!(all.iter().all(|found| *found));
        assert_eq!(listing.fetches.load(Ordering::SeqCst), 1);
        // Within the TTL: still that one.
        assert!(listing.has_within(SHORT, "b7").await);
        assert_eq!(listing.fetches.load(Ordering::SeqCst), 1);
        // Past it: one more, shared again.
        std::thread::sleep(SHORT);
        for b in &names {
            assert!(listing.has_within(SHORT, b).await);
        }
        assert_eq!(listing.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_bucket_missing_from_a_cached_answer_is_asked_again_not_taken_as_gone() {
        let listing = Listing::of(&["old"]);
        assert!(listing.has("old").await);
        // Created after the listing: the cached one does not cover it, a fresh one does.
        listing.buckets.lock().unwrap().push("new".into());
        assert!(listing.has("new").await);
        assert_eq!(listing.fetches.load(Ordering::SeqCst), 2);
        // Truly gone: asked fresh, and found missing.
        assert!(!listing.has("gone").await);
        assert_eq!(listing.fetches.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_failed_fetch_is_not_kept() {
        let shared: Shared<u32> = Shared::default();
        let failed = shared
            .get(TTL, |_| true, || async { Err::<u32, &str>("down") })
            .await;
        assert_eq!(failed, Err("down"));
        let fetched = shared
            .get(TTL, |_| true, || async { Ok::<u32, &str>(7) })
            .await;
        assert_eq!(fetched.map(|n| *n), Ok(7));
    }

    #[test]
    fn each_tenant_has_its_own_entry() {
        let tenants: PerTenant<Shared<u32>> = PerTenant::default();
        assert!(Arc::ptr_eq(&tenants.of("grid/1"), &tenants.of("grid/1")));
        assert!(!Arc::ptr_eq(&tenants.of("grid/1"), &tenants.of("grid/2")));
    }

    #[test]
    fn a_tenant_nobody_asked_about_for_long_is_forgotten_and_one_in_use_kept() {
        let tenants: PerTenant<Shared<u32>> = PerTenant::default();
        let start = Instant::now();
        tenants.of_at("grid/gone", start);
        let used = tenants.of_at("grid/used", start);
        let hour = Duration::from_secs(3600);
        assert!(Arc::ptr_eq(
            &used,
            &tenants.of_at("grid/used", start + hour)
        ));
        let later = start + FORGOTTEN_AFTER + Duration::from_secs(1);
        assert!(Arc::ptr_eq(&used, &tenants.of_at("grid/used", later)));
        let kept = tenants.tenants.lock().unwrap();
        assert!(!kept.entries.contains_key("grid/gone"), "dropped");
        assert_eq!(kept.entries.len(), 1);
    }
}

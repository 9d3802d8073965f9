//! The drain pipeline against an in-memory bucket with simulated latencies of a few
//! milliseconds: which listing it uses, how many calls, in which order, how many at once.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::*;

/// What the fake bucket saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    ListStarted(Listing),
    /// A listing returned; its last entry (`None` for an empty page).
    Listed(Option<Entry>),
    Checked,
    /// A delete started; the batch's first and last entries.
    DeleteStarted(Entry, Entry),
    DeleteDone,
}

/// An in-memory bucket. Entries with a version are what ListObjectsV2 does not show (older
/// versions, delete markers); entries without one are plain objects.
struct Fake {
    entries: Mutex<BTreeSet<(String, Option<String>)>>,
    /// Most entries a page holds whatever is asked (S3: 1,000).
    page_cap: usize,
    list_latency: Duration,
    delete_latency: Duration,
    events: Mutex<Vec<Event>>,
    /// Which delete call (1-based) fails, if any.
    failing_delete: Option<usize>,
    /// After this many ownership checks the bucket is someone else's.
    owned_for: usize,
    deletes: Mutex<usize>,
    checks: Mutex<usize>,
    in_flight: Mutex<(usize, usize)>,
    /// Listings that started while deletes were in flight.
    overlapped_listings: Mutex<usize>,
}

impl Fake {
    fn with_objects(n: usize) -> Fake {
        Fake {
            entries: Mutex::new((0..n).map(|i| (format!("k{i:06}"), None)).collect()),
            page_cap: 1000,
            list_latency: Duration::from_millis(5),
            delete_latency: Duration::from_millis(15),
            events: Mutex::default(),
            failing_delete: None,
            owned_for: usize::MAX,
            deletes: Mutex::default(),
            checks: Mutex::default(),
            in_flight: Mutex::default(),
            overlapped_listings: Mutex::default(),
        }
    }

    fn log(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    fn left(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    fn deletes(&self) -> usize {
        *self.deletes.lock().unwrap()
    }

    /// The most deletes that were in flight at once.
    fn most_in_flight(&self) -> usize {
        self.in_flight.lock().unwrap().1
    }
}

impl Target for Fake {
    async fn list(
        &self,
        listing: Listing,
        from: &Cursor,
        max_keys: usize,
    ) -> Result<Page, S3Error> {
        self.log(Event::ListStarted(listing));
        if self.in_flight.lock().unwrap().0 > 0 {
            *self.overlapped_listings.lock().unwrap() += 1;
        }
        tokio::time::sleep(self.list_latency).await;
        let entries: Vec<Entry> = {
            let all = self.entries.lock().unwrap();
            all.iter()
                .filter(|(_, version)| listing == Listing::Versions || version.is_none())
                .filter(|(key, version)| match from {
                    Cursor::Start => true,
                    Cursor::After { key: k, version: v } => (key, version) > (k, v),
                })
                .take(max_keys.min(self.page_cap) + 1)
                .map(|(key, version)| Entry {
                    key: key.clone(),
                    version: version.clone(),
                })
                .collect()
        };
        let truncated = entries.len() > max_keys.min(self.page_cap);
        let entries: Vec<Entry> = entries
            .into_iter()
            .take(max_keys.min(self.page_cap))
            .collect();
        self.log(Event::Listed(entries.last().cloned()));
        Ok(Page {
            next: truncated.then(|| {
                let last = entries.last().expect("a truncated page has entries");
                Cursor::After {
                    key: last.key.clone(),
                    version: last.version.clone(),
                }
            }),
            bytes: 0,
            entries,
        })
    }

    async fn not_owned(&self) -> Result<Option<String>, S3Error> {
        self.log(Event::Checked);
        let mut checks = self.checks.lock().unwrap();
        *checks += 1;
        Ok((*checks > self.owned_for).then(|| "re-tagged".to_string()))
    }

    async fn delete(&self, batch: Vec<Entry>) -> Result<Vec<KeyFailure>, S3Error> {
        let call = {
            let mut deletes = self.deletes.lock().unwrap();
            *deletes += 1;
            *deletes
        };
        self.log(Event::DeleteStarted(
            batch[0].clone(),
            batch.last().unwrap().clone(),
        ));
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            in_flight.0 += 1;
            in_flight.1 = in_flight.1.max(in_flight.0);
        }
        tokio::time::sleep(self.delete_latency).await;
        self.in_flight.lock().unwrap().0 -= 1;
        self.log(Event::DeleteDone);
        if self.failing_delete == Some(call) {
            return Err(S3Error {
                operation: "delete_objects",
                class: ErrorClass::Transient,
                code: "InternalError".into(),
                message: "injected".into(),
            });
        }
        let mut all = self.entries.lock().unwrap();
        for entry in batch {
            all.remove(&(entry.key, entry.version));
        }
        Ok(Vec::new())
    }
}

fn pace(in_flight: usize) -> DrainPace {
    DrainPace {
        budget: Duration::from_secs(600),
        max_per_second: 1_000_000,
        in_flight,
    }
}

#[test]
fn only_a_never_versioned_bucket_is_listed_with_list_objects_v2() {
    assert_eq!(Listing::for_versioning(Versioning::Never), Listing::Objects);
    assert_eq!(
        Listing::for_versioning(Versioning::Enabled),
        Listing::Versions
    );
    // Suspended buckets keep the versions and delete markers of their versioned past.
    assert_eq!(
        Listing::for_versioning(Versioning::Suspended),
        Listing::Versions
    );
}

#[test]
fn pages_feed_the_deletes_in_flight_and_a_low_cap_shrinks_the_batches() {
    let p = pace(4);
    assert_eq!((p.batch(), p.page()), (1000, 4000));
    let capped = DrainPace {
        max_per_second: 200,
        ..pace(4)
    };
    assert_eq!((capped.batch(), capped.page()), (200, 800));
    assert_eq!(capped.due(400), Duration::from_secs(2));
}

#[tokio::test]
async fn n_entries_take_ceil_n_over_1000_deletes_whatever_the_page_size() {
    for (n, page_cap) in [(2500, 1000), (2500, 100_000), (3000, 1000), (999, 1000)] {
        let fake = Fake {
            page_cap,
            ..Fake::with_objects(n)
        };
        let round = run_round(&fake, Listing::Objects, &pace(4), &mut VecDeque::new()).await;
        assert!(round.empty, "{round:?}");
        assert_eq!(round.deleted, n as u64);
        assert_eq!(
            fake.deletes(),
            n.div_ceil(1000),
            "{n} entries, pages of {page_cap}"
        );
        assert_eq!(fake.left(), 0);
        // One ownership check right before each delete.
        let events = fake.events();
        for (i, event) in events.iter().enumerate() {
            if matches!(event, Event::DeleteStarted(..)) {
                assert_eq!(events[i - 1], Event::Checked, "{events:?}");
            }
        }
    }
}

#[tokio::test]
async fn the_next_page_is_listed_before_the_current_one_is_deleted_while_deletes_overlap() {
    // S3 pages of 1,000; deletes three times slower than listings.
    let fake = Fake::with_objects(10_000);
    let round = run_round(&fake, Listing::Objects, &pace(4), &mut VecDeque::new()).await;
    assert_eq!((round.deleted, fake.deletes()), (10_000, 10));
    let events = fake.events();
    // Each page's last entry is listed (the next page's marker used) before that page's batch
    // starts: a marker never points at an entry already deleted.
    let listed = |entry: &Entry| {
        events
            .iter()
            .position(|e| *e == Event::Listed(Some(entry.clone())))
            .unwrap()
    };
    for (i, event) in events.iter().enumerate() {
        // (The last page has no page after it.)
        if let Event::DeleteStarted(_, last) = event
            && last.key != "k009999"
        {
            let next_listed = events[listed(last) + 1..]
                .iter()
                .position(|e| matches!(e, Event::Listed(_)))
                .map(|p| p + listed(last) + 1)
                .expect("the page after it (or the empty listing) was listed");
            assert!(
                next_listed < i,
                "batch ending {last:?} deleted before the next page was listed"
            );
        }
    }
    // Listings run while deletes are in flight, and deletes overlap up to the bound.
    assert!(*fake.overlapped_listings.lock().unwrap() > 0);
    assert!(fake.most_in_flight() > 1);
    assert!(fake.most_in_flight() <= 4);

    let one = Fake::with_objects(3000);
    run_round(&one, Listing::Objects, &pace(1), &mut VecDeque::new()).await;
    assert_eq!(one.most_in_flight(), 1);
}

#[tokio::test]
async fn an_empty_list_objects_v2_is_confirmed_by_list_object_versions() {
    // Versioning turned on after the state was read: delete markers and older versions are
    // invisible to ListObjectsV2 and still found.
    let fake = Fake::with_objects(1500);
    fake.entries
        .lock()
        .unwrap()
        .extend((0..700).map(|i| (format!("v{i:04}"), Some("v1".to_string()))));
    let round = run_round(&fake, Listing::Objects, &pace(4), &mut VecDeque::new()).await;
    assert!(round.empty, "{round:?}");
    assert_eq!(round.deleted, 2200);
    assert_eq!(fake.left(), 0);
    let listings: Vec<Listing> = fake
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::ListStarted(l) => Some(*l),
            _ => None,
        })
        .collect();
    assert_eq!(
        listings,
        [
            // Two pages, then the listing from the start that finds no object left,
            Listing::Objects,
            Listing::Objects,
            Listing::Objects,
            // then the versions, then the listing from the start that finds nothing at all.
            Listing::Versions,
            Listing::Versions
        ]
    );
}

#[tokio::test]
async fn a_failed_delete_stops_the_round_and_counts_only_what_was_deleted() {
    let fake = Fake {
        failing_delete: Some(2),
        ..Fake::with_objects(5000)
    };
    let first = run_round(&fake, Listing::Objects, &pace(4), &mut VecDeque::new()).await;
    assert_eq!(
        first.error.as_ref().map(|e| e.code.as_str()),
        Some("InternalError")
    );
    assert!(!first.empty);
    // Batches already in flight finished and count; none started after the failure was seen.
    assert_eq!(first.deleted as usize, 5000 - fake.left());
    assert!(fake.left() >= 1000);
    // The next round lists again and deletes the rest, the failed batch included.
    let second = run_round(&fake, Listing::Objects, &pace(4), &mut VecDeque::new()).await;
    assert!(second.empty && second.error.is_none());
    assert_eq!(first.deleted + second.deleted, 5000);
}

#[tokio::test]
async fn losing_ownership_stops_before_the_next_batch() {
    let fake = Fake {
        owned_for: 2,
        ..Fake::with_objects(5000)
    };
    let round = run_round(&fake, Listing::Objects, &pace(4), &mut VecDeque::new()).await;
    assert_eq!(round.not_ours.as_deref(), Some("re-tagged"));
    assert_eq!(fake.deletes(), 2);
    assert_eq!(round.deleted, 2000);
    assert_eq!(fake.left(), 3000);
}

#[tokio::test]
async fn the_rate_cap_and_the_budget_hold_with_deletes_in_flight() {
    let fake = Fake::with_objects(500);
    let capped = DrainPace {
        budget: Duration::from_millis(500),
        max_per_second: 100,
        in_flight: 1,
    };
    let started = Instant::now();
    let round = run_round(&fake, Listing::Objects, &capped, &mut VecDeque::new()).await;
    // Pages and batches of 100, started at 0, 1 and 2 s: the time is up when the third page is in
    // hand, which is deleted whole, and no fourth page is listed.
    assert_eq!(fake.deletes(), 3);
    assert_eq!(round.deleted, 300);
    assert!(!round.empty);
    assert!(started.elapsed() >= Duration::from_secs(2));
    let listings = fake
        .events()
        .iter()
        .filter(|e| matches!(e, Event::ListStarted(_)))
        .count();
    assert_eq!(listings, 3);
    // The next round resumes from the bucket as it is.
    let rest = run_round(&fake, Listing::Objects, &pace(4), &mut VecDeque::new()).await;
    assert!(rest.empty);
    assert_eq!(round.deleted + rest.deleted, 500);
    assert_eq!(fake.deletes(), 4);
}

/// Every entry the fake bucket holds, as a count lists them.
fn count(fake: &Fake) -> VecDeque<Entry> {
    fake.entries
        .lock()
        .unwrap()
        .iter()
        .map(|(key, version)| Entry {
            key: key.clone(),
            version: version.clone(),
        })
        .collect()
}

fn listings(fake: &Fake) -> usize {
    fake.events()
        .iter()
        .filter(|e| matches!(e, Event::ListStarted(_)))
        .count()
}

#[tokio::test]
async fn counted_entries_are_deleted_without_listing_and_only_a_listing_finds_the_bucket_empty() {
    let fake = Fake::with_objects(3000);
    let mut counted = count(&fake);
    // Written after the count.
    fake.entries
        .lock()
        .unwrap()
        .extend((0..10).map(|i| (format!("z{i}"), None)));
    let round = run_round(&fake, Listing::Objects, &pace(4), &mut counted).await;
    assert!(round.empty, "{round:?}");
    assert_eq!(round.deleted, 3010);
    assert!(counted.is_empty());
    assert_eq!(fake.left(), 0);
    // The counted entries in three full batches before any listing, then the late ten in one.
    let events = fake.events();
    let first_listing = events
        .iter()
        .position(|e| matches!(e, Event::ListStarted(_)))
        .unwrap();
    let deletes_before = events[..first_listing]
        .iter()
        .filter(|e| matches!(e, Event::DeleteStarted(..)))
        .count();
    assert_eq!(deletes_before, 3, "{events:?}");
    assert_eq!(fake.deletes(), 4);
    // The pass after the counted one: the ten, then empty with both calls.
    assert_eq!(listings(&fake), 3, "{events:?}");
}

#[tokio::test]
async fn what_a_spent_budget_leaves_of_the_count_is_kept_for_the_next_round() {
    let fake = Fake::with_objects(5000);
    let mut counted = count(&fake);
    let capped = DrainPace {
        budget: Duration::from_millis(500),
        max_per_second: 100,
        in_flight: 1,
    };
    let round = run_round(&fake, Listing::Objects, &capped, &mut counted).await;
    // As with listings: batches at 0, 1 and 2 s, the page in hand deleted whole.
    assert_eq!(round.deleted, 300);
    assert!(!round.empty);
    assert_eq!(listings(&fake), 0);
    assert_eq!(counted.len(), 4700);
    assert_eq!(counted.front().unwrap().key, "k000300");
    let rest = run_round(&fake, Listing::Objects, &pace(4), &mut counted).await;
    assert!(rest.empty, "{rest:?}");
    assert_eq!(round.deleted + rest.deleted, 5000);
    // 300 in three batches of 100, 4,700 in five of at most 1,000.
    assert_eq!(fake.deletes(), 8);
}

fn entries(prefix: &str, n: usize) -> VecDeque<Entry> {
    (0..n)
        .map(|i| Entry {
            key: format!("{prefix}{i:06}"),
            version: None,
        })
        .collect()
}

#[tokio::test]
async fn counts_are_kept_for_their_listing_a_few_minutes_within_a_memory_bound() {
    let now = Instant::now();
    let mut kept = CountedEntries::default();
    kept.keep("a", Listing::Objects, entries("a", 10), now);
    // Versioning turned on since the count: the versions were not counted.
    assert!(kept.take("a", Listing::Versions, now).is_empty());
    assert!(kept.take("a", Listing::Objects, now).is_empty(), "taken");
    kept.keep("a", Listing::Objects, entries("a", 10), now);
    assert_eq!(kept.take("a", Listing::Objects, now).len(), 10);
    // Too old.
    kept.keep("b", Listing::Objects, entries("b", 10), now);
    assert!(
        kept.take("b", Listing::Objects, now + COUNTED_TTL)
            .is_empty()
    );
    assert_eq!(kept.bytes, 0);
    // A count beyond the bound keeps what fits; another bucket's then keeps nothing, unless the
    // first expired.
    let per_entry = entry_bytes(&entries("c", 1)[0]);
    let fit = COUNTED_BYTES / per_entry;
    kept.keep("c", Listing::Objects, entries("c", fit + 100), now);
    assert_eq!(kept.buckets["c"].entries.len(), fit);
    kept.keep("d", Listing::Objects, entries("d", 10), now);
    assert!(!kept.buckets.contains_key("d"));
    kept.keep("d", Listing::Objects, entries("d", 10), now + COUNTED_TTL);
    assert!(!kept.buckets.contains_key("c"));
    assert_eq!(kept.buckets["d"].entries.len(), 10);
    kept.forget("d");
    assert_eq!(kept.bytes, 0);
    assert!(kept.buckets.is_empty());
}

//! One watch per kind for the whole process, shared by every reader: the controllers (their own
//! kind and the kinds they watch), the [`super::cluster::Kube`] seam and the gauges.
//!
//! kube's `Controller::new` and `watches` open a watch and a cache each: with the seam's own
//! caches, keeper watched buckets and tenants three times and cached every bucket twice, and a
//! watch event could reach a controller before the cache it reads from had it (a tenant saw its
//! last bucket go but still counted it). An [`Informer`] keeps one store per kind, applies every
//! change to it before any subscriber hears of it, and tells subscribers of deletions too,
//! including those a watch that was cut missed (found when the relist no longer has them).
//! kube's own shared streams (`unstable-runtime-subscribe`) forward no deletions, which the
//! tenant controller needs.
//!
//! Stored objects carry only what keeper reads: `metadata.managedFields` and kubectl's
//! last-applied annotation (often larger than the object itself) are dropped before caching.
//!
//! An object that does not decode as its kind (a field of the wrong type stored under a looser
//! CRD, a bad edit) would fail the whole list of its kind and stall every object of it: the watch
//! reads each object through kube's `DeserializeGuard`, keeps an undecodable one out of the store
//! (dropping the copy it held, so nothing acts on what the object no longer says) and hands it
//! to [`Informer::invalid`] subscribers, which report it on the object itself.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::core::{DeserializeGuard, error_boundary::InvalidObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::mpsc;

use crate::api::names::MANAGED_BY;
use crate::api::{CloudDatabase, S3Bucket, S3Tenant};

/// kubectl's client-side apply record: a copy of the whole object keeper never reads.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A change a subscriber hears of, after the store has it.
#[derive(Debug, Clone)]
pub enum Change<K> {
    /// Added or modified (also every object after a relist, and every cached object when a
    /// subscriber joins late): the stored object.
    Applied(Arc<K>),
    /// Gone from the API: its last known state.
    Deleted(Arc<K>),
}

impl<K> Change<K> {
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Applied(obj) | Change::Deleted(obj) => obj,
        }
    }
}

type Subscribers<K> = Arc<Mutex<Vec<mpsc::Sender<Change<K>>>>>;

/// Changes a subscriber may have waiting before the watch waits for it: a controller that falls
/// behind slows its kind's watch down instead of growing a queue without bound. A relist of many
/// objects goes through it in order, as fast as subscribers take it.
const SUBSCRIBER_BUFFER: usize = 1024;

/// A shared watch of one kind (see the module documentation).
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    synced: Arc<AtomicBool>,
    subscribers: Subscribers<K>,
    quarantine: Arc<Mutex<Quarantine>>,
}

/// The objects of a kind that do not decode, by namespace and name, until they decode or go;
/// and who hears of them.
#[derive(Default)]
struct Quarantine {
    objects: BTreeMap<(String, String), InvalidObject>,
    subscribers: Vec<mpsc::Sender<InvalidObject>>,
    /// During a relist: the undecodable objects it has listed so far.
    relisting: Option<BTreeSet<(String, String)>>,
}

fn key_of(meta: &kube::api::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl Quarantine {
    fn hold(&mut self, invalid: InvalidObject) {
        let key = key_of(&invalid.metadata);
        if let Some(relisting) = self.relisting.as_mut() {
            relisting.insert(key.clone());
        }
        // A subscriber that is behind misses this one; it hears of the object again at its next
        // change or relist.
        self.subscribers.retain(|tx| {
            !matches!(
                tx.try_send(invalid.clone()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        });
        self.objects.insert(key, invalid);
    }

    fn release(&mut self, meta: &kube::api::ObjectMeta) {
        self.objects.remove(&key_of(meta));
    }

    /// A relist ended: what it did not list as undecodable is not (any more).
    fn relisted(&mut self) {
        if let Some(listed) = self.relisting.take() {
            self.objects.retain(|key, _| listed.contains(key));
        }
    }
}

/// A watch event of the guarded kind, as the store takes it: a decoded object as it is; an
/// undecodable one held in quarantine and, if the store had a copy, that copy deleted.
fn sort_out<K: Watched>(
    event: Result<watcher::Event<DeserializeGuard<K>>, watcher::Error>,
    store: &Store<K>,
    quarantine: &Mutex<Quarantine>,
) -> Option<Result<watcher::Event<K>, watcher::Error>> {
    use watcher::Event;
    let mut quarantine = quarantine.lock().expect("quarantine lock");
    let stored = |invalid: &InvalidObject| {
        let (namespace, name) = key_of(&invalid.metadata);
        let mut at = ObjectRef::<K>::new(&name);
        if !namespace.is_empty() {
            at = at.within(&namespace);
        }
        store.get(&at)
    };
    Some(Ok(match event {
        Err(e) => return Some(Err(e)),
        Ok(Event::Init) => {
            quarantine.relisting = Some(BTreeSet::new());
            Event::Init
        }
        Ok(Event::InitDone) => {
            quarantine.relisted();
            Event::InitDone
        }
        Ok(Event::InitApply(DeserializeGuard(Ok(obj)))) => {
            quarantine.release(obj.meta());
            Event::InitApply(obj)
        }
        Ok(Event::InitApply(DeserializeGuard(Err(invalid)))) => {
            quarantine.hold(invalid);
            return None;
        }
        Ok(Event::Apply(DeserializeGuard(Ok(obj)))) => {
            quarantine.release(obj.meta());
            Event::Apply(obj)
        }
        Ok(Event::Delete(DeserializeGuard(Ok(obj)))) => {
            quarantine.release(obj.meta());
            Event::Delete(obj)
        }
        Ok(Event::Apply(DeserializeGuard(Err(invalid)))) => {
            let held = stored(&invalid);
            quarantine.hold(invalid);
            Event::Delete(K::clone(held?.as_ref()))
        }
        Ok(Event::Delete(DeserializeGuard(Err(invalid)))) => {
            quarantine.release(&invalid.metadata);
            Event::Delete(K::clone(stored(&invalid)?.as_ref()))
        }
    }))
}

/// What the objects of a kind need to be watched, cached and shared.
pub trait Watched:
    Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Drops what keeper never reads from an object before it is cached.
pub fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

impl<K: Watched> Informer<K> {
    /// Starts watching `api` filtered by `config`; the watch runs (and retries with backoff)
    /// until the process ends.
    pub fn start(api: Api<DeserializeGuard<K>>, config: watcher::Config) -> Self {
        Self::over(watcher(api, config).default_backoff())
    }

    /// An informer over a stream of watch events (a watcher's, or a test's).
    fn over(
        events: impl Stream<Item = Result<watcher::Event<DeserializeGuard<K>>, watcher::Error>>
        + Send
        + 'static,
    ) -> Self {
        let (store, writer) = reflector::store();
        let subscribers: Subscribers<K> = Arc::default();
        let quarantine: Arc<Mutex<Quarantine>> = Arc::default();
        let synced = Arc::new(AtomicBool::new(false));
        let sorted = {
            let (store, quarantine) = (store.clone(), quarantine.clone());
            events.filter_map(move |event| {
                futures::future::ready(sort_out(event, &store, &quarantine))
            })
        };
        let events = reflector::reflector(writer, sorted.modify(trim::<K>));
        tokio::spawn(dispatch(
            events,
            store.clone(),
            subscribers.clone(),
            synced.clone(),
        ));
        Informer {
            store,
            synced,
            subscribers,
            quarantine,
        }
    }

    /// The objects of the kind that do not decode: those held now, then each one as it comes
    /// (again when it changes and still does not decode).
    pub fn invalid(&self) -> impl Stream<Item = InvalidObject> + Send + 'static {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let mut quarantine = self.quarantine.lock().expect("quarantine lock");
        let held: Vec<InvalidObject> = quarantine.objects.values().cloned().collect();
        quarantine.subscribers.push(tx);
        futures::stream::iter(held).chain(receiver_stream(rx))
    }

    /// The store: every object of the kind (as filtered), read without an API request.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Whether the first listing is complete (until then the store is empty, not authoritative).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Every change from now on, each after the store has it; a subscriber that joins after the
    /// first listing first gets every cached object as `Applied`.
    pub fn changes(&self) -> impl Stream<Item = Change<K>> + Send + 'static {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let mut subscribers = self.subscribers.lock().expect("subscribers lock");
        // Under the lock, so that no change is dispatched between the snapshot and joining:
        // a change is at worst heard twice, never missed.
        let cached = if self.synced() {
            self.store.state()
        } else {
            Vec::new()
        };
        subscribers.push(tx);
        futures::stream::iter(cached.into_iter().map(Change::Applied)).chain(receiver_stream(rx))
    }

    /// The changed objects as a controller's trigger stream (`Controller::for_stream`,
    /// `watches_stream`, `owns_stream`): cloned one at a time as the controller takes them.
    pub fn triggers(&self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        self.changes().map(|change| Ok(K::clone(change.object())))
    }
}

fn receiver_stream<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Drives the watch: the reflector applies each event to the store, then subscribers hear of it.
async fn dispatch<K: Watched>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    store: Store<K>,
    subscribers: Subscribers<K>,
    synced: Arc<AtomicBool>,
) {
    futures::pin_mut!(events);
    // What the store held when a relist began: what the relist does not find again is gone.
    let mut before_relist: Option<Vec<Arc<K>>> = None;
    while let Some(event) = events.next().await {
        let changes = match event {
            Ok(watcher::Event::Apply(obj)) => store
                .get(&ObjectRef::from_obj(&obj))
                .map(|stored| vec![Change::Applied(stored)])
                .unwrap_or_default(),
            Ok(watcher::Event::Delete(obj)) => vec![Change::Deleted(Arc::new(obj))],
            Ok(watcher::Event::Init) => {
                before_relist = Some(store.state());
                Vec::new()
            }
            Ok(watcher::Event::InitApply(_)) => Vec::new(),
            Ok(watcher::Event::InitDone) => {
                synced.store(true, Ordering::Release);
                relisted(before_relist.take().unwrap_or_default(), store.state())
            }
            Err(e) => {
                tracing::debug!(error = %e, kind = %K::kind(&()), "watch error; retrying");
                Vec::new()
            }
        };
        if changes.is_empty() {
            continue;
        }
        // The subscribers as they are now (one joining meanwhile has the store, which already
        // holds these changes); each is waited for while its buffer is full.
        let listeners = subscribers.lock().expect("subscribers lock").clone();
        for tx in &listeners {
            for change in &changes {
                if tx.send(change.clone()).await.is_err() {
                    break;
                }
            }
        }
        subscribers
            .lock()
            .expect("subscribers lock")
            .retain(|tx| !tx.is_closed());
    }
}

/// The changes a relist reveals: objects it no longer lists are `Deleted`, and every object it
/// lists is `Applied` (what changed while the watch was cut is not known object by object).
fn relisted<K: Watched>(before: Vec<Arc<K>>, after: Vec<Arc<K>>) -> Vec<Change<K>> {
    let listed: HashSet<ObjectRef<K>> = after.iter().map(|o| ObjectRef::from_obj(&**o)).collect();
    before
        .into_iter()
        .filter(|o| !listed.contains(&ObjectRef::from_obj(&**o)))
        .map(Change::Deleted)
        .chain(after.into_iter().map(Change::Applied))
        .collect()
}

/// The informers of one process, each started on first use: a process running only some
/// controllers watches only what they and the seam read.
pub struct Informers {
    client: Client,
    tenants: OnceLock<Informer<S3Tenant>>,
    buckets: OnceLock<Informer<S3Bucket>>,
    databases: OnceLock<Informer<CloudDatabase>>,
    managed_secrets: OnceLock<Informer<Secret>>,
    namespaces: OnceLock<Informer<Namespace>>,
}

impl Informers {
    pub fn new(client: Client) -> Self {
        Informers {
            client,
            tenants: OnceLock::new(),
            buckets: OnceLock::new(),
            databases: OnceLock::new(),
            managed_secrets: OnceLock::new(),
            namespaces: OnceLock::new(),
        }
    }

    fn all<'a, K: Watched>(
        &self,
        cell: &'a OnceLock<Informer<K>>,
        config: watcher::Config,
    ) -> &'a Informer<K>
    where
        DeserializeGuard<K>: Resource<DynamicType = ()>,
    {
        cell.get_or_init(|| Informer::start(Api::all(self.client.clone()), config))
    }

    pub fn tenants(&self) -> &Informer<S3Tenant> {
        self.all(&self.tenants, watcher::Config::default())
    }

    pub fn buckets(&self) -> &Informer<S3Bucket> {
        self.all(&self.buckets, watcher::Config::default())
    }

    pub fn databases(&self) -> &Informer<CloudDatabase> {
        self.all(&self.databases, watcher::Config::default())
    }

    /// The Secrets keeper created, cluster-wide (label-filtered: other Secrets are never cached).
    pub fn managed_secrets(&self) -> &Informer<Secret> {
        let managed = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        self.all(
            &self.managed_secrets,
            watcher::Config::default().labels(&managed),
        )
    }

    pub fn namespaces(&self) -> &Informer<Namespace> {
        self.all(&self.namespaces, watcher::Config::default())
    }

    /// One Secret, watched by name (a provider's credentials in keeper's configuration).
    pub fn secret(&self, namespace: &str, name: &str) -> Informer<Secret> {
        Informer::start(
            Api::namespaced(self.client.clone(), namespace),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;

    fn map(name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: Some([("v".to_string(), value.to_string())].into()),
            ..ConfigMap::default()
        }
    }

    /// The watch events a test feeds its informer, as the API sends them.
    struct Feed(mpsc::UnboundedSender<Result<Event<DeserializeGuard<ConfigMap>>, watcher::Error>>);

    impl Feed {
        /// An event of objects that decode.
        fn send(&self, event: Event<ConfigMap>) {
            let guarded = match event {
                Event::Init => Event::Init,
                Event::InitDone => Event::InitDone,
                Event::InitApply(obj) => Event::InitApply(DeserializeGuard(Ok(obj))),
                Event::Apply(obj) => Event::Apply(DeserializeGuard(Ok(obj))),
                Event::Delete(obj) => Event::Delete(DeserializeGuard(Ok(obj))),
            };
            self.0.send(Ok(guarded)).unwrap();
        }

        /// An event of an object `name` that does not decode.
        fn send_invalid(
            &self,
            event: fn(DeserializeGuard<ConfigMap>) -> Event<DeserializeGuard<ConfigMap>>,
            name: &str,
        ) {
            let invalid = InvalidObject {
                error: format!("{name} is broken"),
                metadata: map(name, "").metadata,
            };
            self.0
                .send(Ok(event(DeserializeGuard(Err(invalid)))))
                .unwrap();
        }
    }

    impl Feed {
        /// A (re)list of `objects`.
        fn list(&self, objects: impl IntoIterator<Item = ConfigMap>) {
            self.send(Event::Init);
            for obj in objects {
                self.send(Event::InitApply(obj));
            }
            self.send(Event::InitDone);
        }
    }

    fn informer() -> (Feed, Informer<ConfigMap>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let events = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        (Feed(tx), Informer::over(events))
    }

    /// What a subscriber hears, as `+name=value` / `-name`, and whether the store agreed at the
    /// moment it heard it (an applied object stored, a deleted one gone).
    async fn next(
        changes: &mut (impl Stream<Item = Change<ConfigMap>> + Unpin),
        store: &Store<ConfigMap>,
    ) -> String {
        let change = tokio::time::timeout(std::time::Duration::from_secs(5), changes.next())
            .await
            .expect("a change within 5 s")
            .expect("the stream goes on");
        let obj = change.object();
        let stored = store.get(&ObjectRef::from_obj(&**obj));
        let name = obj.metadata.name.clone().unwrap();
        match &change {
            Change::Applied(_) => {
                assert_eq!(
                    stored.as_deref(),
                    Some(&**obj),
                    "stored before it is heard of"
                );
                format!("+{name}={}", obj.data.as_ref().unwrap()["v"])
            }
            Change::Deleted(_) => {
                assert!(
                    stored.is_none(),
                    "gone from the store before it is heard of"
                );
                format!("-{name}")
            }
        }
    }

    #[tokio::test]
    async fn subscribers_hear_of_each_change_after_the_store_has_it() {
        let (feed, informer) = informer();
        let mut changes = Box::pin(informer.changes());
        let store = informer.store();
        feed.list([map("a", "1")]);
        assert_eq!(next(&mut changes, &store).await, "+a=1");
        assert!(informer.synced());
        feed.send(Event::Apply(map("a", "2")));
        assert_eq!(next(&mut changes, &store).await, "+a=2");
        feed.send(Event::Delete(map("a", "2")));
        assert_eq!(next(&mut changes, &store).await, "-a");
    }

    #[tokio::test]
    async fn a_relist_reports_what_it_no_longer_finds_as_deleted() {
        let (feed, informer) = informer();
        let mut changes = Box::pin(informer.changes());
        let store = informer.store();
        feed.list([map("a", "1"), map("b", "1")]);
        let mut first = vec![
            next(&mut changes, &store).await,
            next(&mut changes, &store).await,
        ];
        first.sort();
        assert_eq!(first, ["+a=1", "+b=1"]);
        // The watch was cut; a was deleted meanwhile and b changed.
        feed.list([map("b", "2")]);
        assert_eq!(next(&mut changes, &store).await, "-a");
        assert_eq!(next(&mut changes, &store).await, "+b=2");
    }

    #[tokio::test]
    async fn a_late_subscriber_first_hears_of_every_cached_object() {
        let (feed, informer) = informer();
        let mut early = Box::pin(informer.changes());
        feed.list([map("a", "1")]);
        let store = informer.store();
        assert_eq!(next(&mut early, &store).await, "+a=1");
        let mut late = Box::pin(informer.changes());
        assert_eq!(next(&mut late, &store).await, "+a=1");
        feed.send(Event::Apply(map("b", "1")));
        assert_eq!(next(&mut late, &store).await, "+b=1");
        assert_eq!(next(&mut early, &store).await, "+b=1");
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_holds_the_watch_back_instead_of_a_growing_queue() {
        let (feed, informer) = informer();
        let mut slow = Box::pin(informer.changes());
        let store = informer.store();
        feed.list([]);
        let total = SUBSCRIBER_BUFFER * 3;
        for i in 0..total {
            feed.send(Event::Apply(map(&format!("m{i}"), "1")));
        }
        // Nothing read yet: the watch stops once the buffer is full (plus the one change being
        // sent and the one the store took before it).
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let stored = store.state().len();
        assert!(
            stored <= SUBSCRIBER_BUFFER + 2,
            "{stored} of {total} taken with nobody reading"
        );
        // Reading lets it go on; every change is heard, in order.
        for i in 0..total {
            let change = tokio::time::timeout(std::time::Duration::from_secs(5), slow.next())
                .await
                .expect("a change within 5 s")
                .expect("the stream goes on");
            assert_eq!(
                change.object().metadata.name.as_deref(),
                Some(format!("m{i}").as_str())
            );
        }
        assert_eq!(store.state().len(), total);
        // A subscriber that goes away is dropped, and holds nothing back.
        drop(slow);
        feed.send(Event::Apply(map("after", "1")));
        let mut late = Box::pin(informer.changes());
        let mut heard = 0;
        while let Ok(Some(_)) =
            tokio::time::timeout(std::time::Duration::from_millis(500), late.next()).await
        {
            heard += 1;
        }
        assert_eq!(
            heard,
            total + 1,
            "the late subscriber hears every cached object"
        );
    }

    #[tokio::test]
    async fn cached_objects_keep_neither_managed_fields_nor_the_last_applied_configuration() {
        let (feed, informer) = informer();
        let mut changes = Box::pin(informer.changes());
        let mut obj = map("a", "1");
        obj.metadata.managed_fields = Some(vec![Default::default()]);
        obj.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_string(), "{...}".to_string()),
                ("keep".to_string(), "me".to_string()),
            ]
            .into(),
        );
        feed.list([obj]);
        next(&mut changes, &informer.store()).await;
        let stored = informer.store().state().pop().unwrap();
        assert_eq!(stored.metadata.managed_fields, None);
        assert_eq!(
            stored.metadata.annotations,
            Some([("keep".to_string(), "me".to_string())].into())
        );
    }

    /// The names of the undecodable objects a subscriber to [`Informer::invalid`] hears of within
    /// 200 ms.
    async fn invalid_now(informer: &Informer<ConfigMap>) -> Vec<String> {
        let mut invalid = Box::pin(informer.invalid());
        let mut names = Vec::new();
        while let Ok(Some(obj)) =
            tokio::time::timeout(std::time::Duration::from_millis(200), invalid.next()).await
        {
            names.push(obj.metadata.name.unwrap_or_default());
        }
        names
    }

    #[tokio::test]
    async fn an_undecodable_object_is_held_apart_and_the_others_go_on() {
        let (feed, informer) = informer();
        let mut changes = Box::pin(informer.changes());
        let store = informer.store();
        feed.send(Event::Init);
        feed.send_invalid(Event::InitApply, "bad");
        feed.send(Event::InitApply(map("good", "1")));
        feed.send(Event::InitDone);
        assert_eq!(next(&mut changes, &store).await, "+good=1");
        assert!(informer.synced());
        assert_eq!(
            store.state().len(),
            1,
            "the undecodable object is not cached"
        );
        let mut invalid = Box::pin(informer.invalid());
        let held = invalid.next().await.unwrap();
        assert_eq!(held.metadata.name.as_deref(), Some("bad"));
        assert_eq!(held.error, "bad is broken");
        // It is heard of again when it changes and still does not decode.
        feed.send_invalid(Event::Apply, "bad");
        let again = tokio::time::timeout(std::time::Duration::from_secs(5), invalid.next())
            .await
            .expect("heard of within 5 s");
        assert_eq!(again.unwrap().metadata.name.as_deref(), Some("bad"));
    }

    #[tokio::test]
    async fn an_object_that_stops_decoding_leaves_the_store_until_it_decodes_again() {
        let (feed, informer) = informer();
        let mut changes = Box::pin(informer.changes());
        let store = informer.store();
        feed.list([map("a", "1")]);
        assert_eq!(next(&mut changes, &store).await, "+a=1");
        // Nothing may act on what the object no longer says.
        feed.send_invalid(Event::Apply, "a");
        assert_eq!(next(&mut changes, &store).await, "-a");
        assert_eq!(invalid_now(&informer).await, ["a"]);
        feed.send(Event::Apply(map("a", "2")));
        assert_eq!(next(&mut changes, &store).await, "+a=2");
        assert!(
            invalid_now(&informer).await.is_empty(),
            "released once it decodes"
        );
    }

    #[tokio::test]
    async fn an_undecodable_object_deleted_or_gone_at_a_relist_is_released() {
        let (feed, informer) = informer();
        feed.list([]);
        feed.send_invalid(Event::Apply, "deleted");
        feed.send_invalid(Event::Apply, "gone");
        feed.send_invalid(Event::Apply, "kept");
        let mut held = invalid_now(&informer).await;
        held.sort();
        assert_eq!(held, ["deleted", "gone", "kept"]);
        feed.send_invalid(Event::Delete, "deleted");
        // The watch was cut; "gone" was deleted meanwhile.
        feed.send(Event::Init);
        feed.send_invalid(Event::InitApply, "kept");
        feed.send(Event::InitDone);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(invalid_now(&informer).await, ["kept"]);
        assert!(informer.store().state().is_empty());
    }
}

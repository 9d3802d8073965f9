//! One watch per kind for the whole process, shared by every reader: the controllers (their own
//! kind and the kinds they watch), the [`super::Kube`] seam and the gauges.
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
//! last-applied annotation (often larger than the object itself) are dropped before caching
//! (`cached::trim`), and keeper's Secrets are kept packed (`cached::PackedSecret`).
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

use super::cached::{PackedSecret, trim};
use crate::api::names::MANAGED_BY;
use crate::api::{CloudDatabase, S3Bucket, S3Tenant};

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

/// Callbacks told of each change before any subscriber hears of it ([`Informer::observe`]).
type Observers<K> = Arc<Mutex<Vec<Box<dyn Fn(&Change<K>) + Send + Sync>>>>;

/// Changes a subscriber may have waiting before the watch waits for it: a controller that falls
/// behind slows its kind's watch down instead of growing a queue without bound. A relist of many
/// objects goes through it in order, as fast as subscribers take it.
const SUBSCRIBER_BUFFER: usize = 1024;

/// Objects per page of a (re)list. A page is in memory at once three times over: the response
/// text, hyper's read buffer, and its objects with their managedFields (not yet trimmed). At
/// kube's default of 500 that was about 7 MB at a start with 2,000 buckets (heaptrack), and the
/// allocator keeps such a high-water mark; 100 keeps it to a fifth, for five times the LIST
/// requests of a start (served from one snapshot either way).
const LIST_PAGE_SIZE: u32 = 100;

/// A shared watch of one kind (see the module documentation).
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    synced: Arc<AtomicBool>,
    subscribers: Subscribers<K>,
    observers: Observers<K>,
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

impl<K: Watched> Informer<K> {
    /// Starts watching `api` filtered by `config`; the watch runs (and retries with backoff)
    /// until the process ends.
    pub fn start(api: Api<DeserializeGuard<K>>, config: watcher::Config) -> Self {
        Self::over(watcher(api, config.page_size(LIST_PAGE_SIZE)).default_backoff())
    }

    /// Starts one watch of the kind per namespace of `namespaces` (filtered by `config`),
    /// merged into one store as one watch would fill it ([`merge`]).
    pub fn start_in(client: &Client, namespaces: &[String], config: &watcher::Config) -> Self
    where
        DeserializeGuard<K>: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        let watches = namespaces.iter().map(|namespace| {
            let api = Api::<DeserializeGuard<K>>::namespaced(client.clone(), namespace);
            let events = watcher(api, config.clone().page_size(LIST_PAGE_SIZE))
                .default_backoff()
                .boxed();
            (namespace.clone(), events)
        });
        Self::over(merged(watches))
    }

    /// An informer over a stream of watch events (a watcher's, or a test's).
    fn over(
        events: impl Stream<Item = Result<watcher::Event<DeserializeGuard<K>>, watcher::Error>>
        + Send
        + 'static,
    ) -> Self {
        let (store, writer) = reflector::store();
        let subscribers: Subscribers<K> = Arc::default();
        let observers: Observers<K> = Arc::default();
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
            Listeners {
                subscribers: subscribers.clone(),
                observers: observers.clone(),
            },
            synced.clone(),
        ));
        Informer {
            store,
            synced,
            subscribers,
            observers,
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

    /// Runs `observer` on every change from now on, after the store has it and before any
    /// subscriber hears of it: for bookkeeping that must be done by the time a reconcile the
    /// change triggers runs. It holds up the watch, so it must be quick and must not block.
    pub fn observe(&self, observer: impl Fn(&Change<K>) + Send + Sync + 'static) {
        self.observers
            .lock()
            .expect("observers lock")
            .push(Box::new(observer));
    }

    /// The changed objects as a controller's trigger stream (`Controller::for_stream`,
    /// `watches_stream`, `owns_stream`): cloned one at a time as the controller takes them.
    pub fn triggers(&self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        self.changes().map(|change| Ok(K::clone(change.object())))
    }
}

/// A watch's events: `DeserializeGuard`ed objects, or the watch's error.
type WatchEvents<K> = futures::stream::BoxStream<
    'static,
    Result<watcher::Event<DeserializeGuard<K>>, watcher::Error>,
>;

/// The events of one watch per namespace, as the events of one watch ([`merge`]).
fn merged<K: Watched>(
    watches: impl IntoIterator<Item = (String, WatchEvents<K>)>,
) -> impl Stream<Item = Result<watcher::Event<DeserializeGuard<K>>, watcher::Error>> + Send + 'static
{
    let (namespaces, watches): (Vec<String>, Vec<WatchEvents<K>>) = watches.into_iter().unzip();
    let mut merge = merge::Merge::new(&namespaces);
    let tagged = namespaces
        .into_iter()
        .zip(watches)
        .map(|(namespace, events)| events.map(move |event| (namespace.clone(), event)));
    futures::stream::select_all(tagged).flat_map(move |(namespace, event)| {
        let events = match event {
            Ok(event) => merge.push(&namespace, event).into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(events)
    })
}

fn receiver_stream<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Who hears of an informer's changes.
struct Listeners<K> {
    subscribers: Subscribers<K>,
    observers: Observers<K>,
}

/// Drives the watch: the reflector applies each event to the store, then observers are told of
/// it, then subscribers hear of it.
async fn dispatch<K: Watched>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    store: Store<K>,
    Listeners {
        subscribers,
        observers,
    }: Listeners<K>,
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
        for observe in observers.lock().expect("observers lock").iter() {
            changes.iter().for_each(observe);
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

/// Where keeper watches its namespaced kinds (`watchNamespaces` in its configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace: one cluster-wide watch per kind.
    Cluster,
    /// These namespaces only, one watch each per kind: objects elsewhere are not seen at all.
    Namespaces(Vec<String>),
}

impl Scope {
    /// Whether the informers of namespaced kinds cache the objects of `namespace`.
    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Scope::Cluster => true,
            Scope::Namespaces(watched) => watched.iter().any(|ns| ns == namespace),
        }
    }
}

/// The informers of one process, each started on first use: a process running only some
/// controllers watches only what they and the seam read.
pub struct Informers {
    client: Client,
    scope: Scope,
    tenants: OnceLock<Informer<S3Tenant>>,
    buckets: OnceLock<Informer<S3Bucket>>,
    databases: OnceLock<Informer<CloudDatabase>>,
    managed_secrets: OnceLock<Informer<PackedSecret>>,
    namespaces: OnceLock<Informer<Namespace>>,
}

impl Informers {
    pub fn new(client: Client, scope: Scope) -> Self {
        Informers {
            client,
            scope,
            tenants: OnceLock::new(),
            buckets: OnceLock::new(),
            databases: OnceLock::new(),
            managed_secrets: OnceLock::new(),
            namespaces: OnceLock::new(),
        }
    }

    /// Where the namespaced kinds are watched.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// A namespaced kind, watched in the scope: cluster-wide, or one watch per namespace.
    fn scoped<'a, K: Watched>(
        &self,
        cell: &'a OnceLock<Informer<K>>,
        config: watcher::Config,
    ) -> &'a Informer<K>
    where
        DeserializeGuard<K>: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        cell.get_or_init(|| match &self.scope {
            Scope::Cluster => Informer::start(Api::all(self.client.clone()), config),
            Scope::Namespaces(watched) => Informer::start_in(&self.client, watched, &config),
        })
    }

    pub fn tenants(&self) -> &Informer<S3Tenant> {
        self.scoped(&self.tenants, watcher::Config::default())
    }

    pub fn buckets(&self) -> &Informer<S3Bucket> {
        self.scoped(&self.buckets, watcher::Config::default())
    }

    pub fn databases(&self) -> &Informer<CloudDatabase> {
        self.scoped(&self.databases, watcher::Config::default())
    }

    /// The Secrets keeper created, in the scope (label-filtered: other Secrets are never cached),
    /// kept packed ([`PackedSecret`]: one per bucket in a fleet). The retained-credential copies
    /// keeper keeps in its own namespace do not carry the label: they are read from the API, and
    /// need no watch there.
    pub fn managed_secrets(&self) -> &Informer<PackedSecret> {
        let managed = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        self.scoped(
            &self.managed_secrets,
            watcher::Config::default().labels(&managed),
        )
    }

    /// Namespaces are cluster-scoped: watched cluster-wide whatever the scope (only when a
    /// provider admits namespaces by label).
    pub fn namespaces(&self) -> &Informer<Namespace> {
        self.namespaces.get_or_init(|| {
            Informer::start(Api::all(self.client.clone()), watcher::Config::default())
        })
    }

    /// One Secret, watched by name (a provider's credentials in keeper's configuration).
    pub fn secret(&self, namespace: &str, name: &str) -> Informer<Secret> {
        Informer::start(
            Api::namespaced(self.client.clone(), namespace),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
    }
}

mod merge;
#[cfg(test)]
mod tests;

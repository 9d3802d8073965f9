//! One watch per watched namespace, merged so that everything after it (the quarantine, the
//! reflector, the dispatch to subscribers) sees one watcher of the kind.
//!
//! A kind has one reflector store (`Controller::for_stream` takes one `Store<K>`), and a watcher's
//! (re)list (`Init`, `InitApply`…, `InitDone`) makes the reflector replace its whole store: the
//! relist of one namespace fed as it is would empty the store of every other namespace. So
//! [`Merge`] turns the namespaces' events into the events of one watcher:
//! - until every namespace has finished its first listing, it holds their objects back and then
//!   gives one `Init`, every object as `InitApply`, one `InitDone` (the informer is synced only
//!   when it has every namespace, as with one cluster-wide listing);
//! - after that, a namespace's relist (its watch was cut) gives `Apply` for each object it lists
//!   and, at its `InitDone`, `Delete` for each object of that namespace the merged stream had and
//!   the relist no longer lists;
//! - `Apply` and `Delete` pass through.

use std::collections::{BTreeMap, BTreeSet};

use kube::Resource;
use kube::api::ObjectMeta;
use kube::core::{DeserializeGuard, error_boundary::InvalidObject};
use kube::runtime::watcher::Event;

type Guarded<K> = DeserializeGuard<K>;

/// The merge of the watch events of several namespaces (see the module documentation).
pub struct Merge<K> {
    namespaces: BTreeMap<String, Namespace<K>>,
    /// Whether the merged first listing has been given.
    synced: bool,
}

/// What the merge knows of one namespace's watch.
struct Namespace<K> {
    /// Until the merged first listing: the objects the namespace's watch has, by name.
    pending: BTreeMap<String, Guarded<K>>,
    /// Whether the namespace's watch has finished its (latest) listing.
    listed: bool,
    /// After the merged first listing: the names of the namespace's objects the merged stream
    /// has given (decodable or not), what a relist that no longer lists one must delete.
    known: BTreeSet<String>,
    /// During a relist after the merged first listing: the names it has listed so far.
    relisting: Option<BTreeSet<String>>,
}

impl<K> Default for Namespace<K> {
    fn default() -> Self {
        Namespace {
            pending: BTreeMap::new(),
            listed: false,
            known: BTreeSet::new(),
            relisting: None,
        }
    }
}

fn meta<K: Resource>(obj: &Guarded<K>) -> &ObjectMeta {
    match &obj.0 {
        Ok(obj) => obj.meta(),
        Err(invalid) => &invalid.metadata,
    }
}

fn name<K: Resource>(obj: &Guarded<K>) -> String {
    meta(obj).name.clone().unwrap_or_default()
}

/// A delete of the object `name` in `namespace` by its key alone (the merge keeps no copy of the
/// objects it passed on). It is given as an object that did not decode, carrying only the
/// metadata: the informer's `sort_out` turns the delete of an undecodable object into "release it
/// from quarantine, and delete the stored copy if the store has one", which is exactly a delete by
/// key, whether the object last decoded or not.
fn delete_by_key<K>(namespace: &str, name: String) -> Event<Guarded<K>> {
    Event::Delete(DeserializeGuard(Err(InvalidObject {
        error: "no longer listed when its namespace's watch relisted".to_string(),
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
    })))
}

impl<K: Resource> Merge<K> {
    /// A merge of the watches of `namespaces`, none of which has listed yet.
    pub fn new<'a>(namespaces: impl IntoIterator<Item = &'a String>) -> Self {
        Merge {
            namespaces: namespaces
                .into_iter()
                .map(|ns| (ns.clone(), Namespace::default()))
                .collect(),
            synced: false,
        }
    }

    /// The merged events that the event `event` of `namespace`'s watch gives.
    pub fn push(&mut self, namespace: &str, event: Event<Guarded<K>>) -> Vec<Event<Guarded<K>>> {
        let synced = self.synced;
        let ns = self.namespaces.entry(namespace.to_string()).or_default();
        if !synced {
            match event {
                Event::Init => {
                    ns.pending.clear();
                    ns.listed = false;
                }
                Event::InitApply(obj) | Event::Apply(obj) => {
                    ns.pending.insert(name(&obj), obj);
                }
                Event::Delete(obj) => {
                    ns.pending.remove(&name(&obj));
                }
                Event::InitDone => {
                    ns.listed = true;
                    return self.first_listing();
                }
            }
            return Vec::new();
        }
        match event {
            Event::Init => {
                ns.relisting = Some(BTreeSet::new());
                Vec::new()
            }
            Event::InitApply(obj) | Event::Apply(obj) => {
                let name = name(&obj);
                if let Some(relisting) = ns.relisting.as_mut() {
                    relisting.insert(name.clone());
                }
                ns.known.insert(name);
                vec![Event::Apply(obj)]
            }
            Event::Delete(obj) => {
                ns.known.remove(&name(&obj));
                vec![Event::Delete(obj)]
            }
            Event::InitDone => {
                let Some(listed) = ns.relisting.take() else {
                    return Vec::new();
                };
                let gone = std::mem::replace(&mut ns.known, listed);
                gone.into_iter()
                    .filter(|name| !ns.known.contains(name))
                    .map(|name| delete_by_key(namespace, name))
                    .collect()
            }
        }
    }

    /// Once every namespace has listed: their objects as one listing.
    fn first_listing(&mut self) -> Vec<Event<Guarded<K>>> {
        if !self.namespaces.values().all(|ns| ns.listed) {
            return Vec::new();
        }
        self.synced = true;
        let mut events = vec![Event::Init];
        for ns in self.namespaces.values_mut() {
            let pending = std::mem::take(&mut ns.pending);
            ns.known = pending.keys().cloned().collect();
            events.extend(pending.into_values().map(Event::InitApply));
        }
        events.push(Event::InitDone);
        events
    }
}

#[cfg(test)]
mod tests;

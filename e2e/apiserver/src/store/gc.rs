//! The garbage collector and the namespace and CRD finalizers, driven by changes: every change
//! of an object queues the objects it can give work to ([`State::notice`]), and [`State::gc`]
//! (after every write) looks only at those, so that a write costs what it affects rather than a
//! pass over every stored object. What each kind of object waits for:
//! - an object with ownerReferences, none of whose owners exist any more: deleted (background);
//!   queued when it is stored with references and when an owner goes;
//! - an object being deleted with `foregroundDeletion`: deletes its dependents (foreground) and
//!   loses the finalizer once none is left; with `orphan`: strips its reference from its
//!   dependents and loses the finalizer; queued when it is marked and when a dependent comes,
//!   goes or changes its references;
//! - a terminating namespace: removed once nothing is stored in it and its finalizers are gone;
//!   queued when it is marked or changed and whenever an object in it goes;
//! - a CRD being deleted with `customresourcecleanup.apiextensions.k8s.io`: deletes its objects
//!   and loses the finalizer once the last is gone; queued when it is marked or changed, and
//!   when its last object goes.

use super::{CRD_KEY, Key, NS_KEY, ObjRef, State, finalizers, is_deleting, meta_str, owner_uids};
use serde_json::{Value, json};

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";
const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The store key of the objects of CRD `crd` (`{group}/{plural}`).
fn crd_store_key(crd: &Value) -> String {
    format!(
        "{}/{}",
        crd["spec"]["group"].as_str().unwrap_or_default(),
        crd["spec"]["names"]["plural"].as_str().unwrap_or_default()
    )
}

/// The name of the CRD serving store key `key` (`{plural}.{group}`), for keys of custom
/// resources.
fn crd_name(key: &str) -> Option<String> {
    let (group, plural) = key.split_once('/')?;
    (!group.is_empty()).then(|| format!("{plural}.{group}"))
}

impl State {
    /// Queue what the change of `r` from `old` to its stored state (absent: removed) may have
    /// given the collector to do. Called by every change of the store.
    pub(super) fn notice(&mut self, r: &ObjRef, old: Option<&Value>) {
        let new = self.get(&r.key, &r.ns, &r.name);
        let mut queue = Vec::new();
        if let Some(obj) = new {
            let deleting = is_deleting(obj);
            let waits = finalizers(obj)
                .iter()
                .any(|f| f == FOREGROUND || f == ORPHAN);
            if (deleting && (waits || r.key == NS_KEY || r.key == CRD_KEY))
                || (!deleting && !owner_uids(obj).is_empty())
            {
                queue.push(r.clone());
            }
        } else if let Some(gone) = old {
            queue.extend(self.index.dependents(meta_str(gone, "uid")));
            if !r.ns.is_empty() && self.namespace_state(&r.ns) == Some(true) {
                queue.push(ObjRef::new(NS_KEY, "", &r.ns));
            }
            if self.objects.get(&r.key).is_none_or(|m| m.is_empty())
                && let Some(crd) = crd_name(&r.key)
                && self.get(CRD_KEY, "", &crd).is_some_and(is_deleting)
            {
                queue.push(ObjRef::new(CRD_KEY, "", &crd));
            }
        }
        // An owner being deleted waits on its dependents: one that comes, goes or drops its
        // reference is news to it.
        let (was, is) = (old.map(owner_uids), new.map(owner_uids));
        if was != is {
            for uid in was.iter().chain(is.iter()).flatten() {
                if let Some(owner) = self.uids.get(uid)
                    && self
                        .get(&owner.key, &owner.ns, &owner.name)
                        .is_some_and(is_deleting)
                {
                    queue.push(owner.clone());
                }
            }
        }
        self.gc_queue.extend(queue);
    }

    /// Run the garbage collector and the namespace and CRD finalizers until what the changes so
    /// far queued is done.
    pub fn gc(&mut self) {
        while let Some(r) = self.gc_queue.pop_front() {
            self.collect(&r);
        }
    }

    fn collect(&mut self, r: &ObjRef) {
        let Some(obj) = self.get(&r.key, &r.ns, &r.name) else {
            return;
        };
        let deleting = is_deleting(obj);
        let fins = finalizers(obj);
        let uid = meta_str(obj, "uid").to_string();
        let owners = owner_uids(obj);
        if deleting && r.key == CRD_KEY && fins.iter().any(|f| f == CRD_CLEANUP) {
            // The rest waits for the cleanup: releasing the CRD queues it again.
            let members = crd_store_key(obj);
            self.delete_crd_objects(r, &members);
            return;
        }
        if deleting && r.key == NS_KEY && fins.is_empty() && self.namespace_empty(&r.name) {
            // As kube's namespace controller leaves it: the `kubernetes` finalizer done (in place:
            // no index follows `spec`, and the removal right after is the change watchers see).
            if let Some(ns) = self
                .objects
                .get_mut(NS_KEY)
                .and_then(|m| m.get_mut(&(String::new(), r.name.clone())))
            {
                ns["spec"]["finalizers"] = json!([]);
            }
            self.remove(NS_KEY, "", &r.name);
            return;
        }
        if deleting && fins.iter().any(|f| f == FOREGROUND) {
            let dependents = self.index.dependents(&uid);
            if dependents.is_empty() {
                self.remove_finalizer(r, FOREGROUND);
            }
            for d in dependents {
                if self
                    .get(&d.key, &d.ns, &d.name)
                    .is_some_and(|o| !is_deleting(o))
                {
                    self.delete(&d.key, &d.ns, &d.name, "Foreground");
                }
            }
        } else if deleting && fins.iter().any(|f| f == ORPHAN) {
            for d in self.index.dependents(&uid) {
                let Some(mut dep) = self.get(&d.key, &d.ns, &d.name).cloned() else {
                    continue;
                };
                if let Some(refs) = dep["metadata"]["ownerReferences"].as_array_mut() {
                    refs.retain(|o| o["uid"].as_str() != Some(uid.as_str()));
                    if refs.is_empty() {
                        dep["metadata"]
                            .as_object_mut()
                            .map(|m| m.remove("ownerReferences"));
                    }
                }
                self.replace(&d.key, &d.ns, &d.name, dep);
            }
            self.remove_finalizer(r, ORPHAN);
        } else if !deleting
            && !owners.is_empty()
            && owners.iter().all(|u| !self.uids.contains_key(u))
        {
            self.delete(&r.key, &r.ns, &r.name, "Background");
        }
    }

    /// Delete the objects of a CRD being deleted; release the CRD once none is left.
    fn delete_crd_objects(&mut self, crd: &ObjRef, members: &str) {
        let live: Vec<Key> = self
            .objects
            .get(members)
            .map(|m| {
                m.iter()
                    .filter(|(_, o)| !is_deleting(o))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        for (ns, name) in &live {
            self.delete(members, ns, name, "Background");
        }
        if self.objects.get(members).is_none_or(|m| m.is_empty()) {
            self.remove_finalizer(crd, CRD_CLEANUP);
        }
    }

    /// Whether nothing is stored in namespace `ns` (cluster-scoped objects have namespace "").
    fn namespace_empty(&self, ns: &str) -> bool {
        self.objects
            .keys()
            .all(|key| self.in_namespace(key, ns).next().is_none())
    }

    fn remove_finalizer(&mut self, r: &ObjRef, fin: &str) {
        if let Some(obj) = self.get(&r.key, &r.ns, &r.name) {
            let mut obj = obj.clone();
            let f: Vec<String> = finalizers(&obj).into_iter().filter(|f| f != fin).collect();
            super::set_finalizers(&mut obj, f);
            self.replace(&r.key, &r.ns, &r.name, obj);
        }
    }
}

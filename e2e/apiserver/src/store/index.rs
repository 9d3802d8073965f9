//! Indexes over the stored objects, kept by every change of the store, so that what a request
//! asks about costs what it concerns rather than the number of stored objects: the dependents of
//! an owner (garbage collection, propagation policies).

use super::{ObjRef, owner_uids};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

#[derive(Default)]
pub(super) struct Index {
    /// Owner uid → the objects whose ownerReferences name it (the owner may be gone already).
    dependents: HashMap<String, BTreeSet<ObjRef>>,
}

impl Index {
    /// Follow one object's change from `old` to `new` (`None`: absent).
    pub(super) fn update(&mut self, r: &ObjRef, old: Option<&Value>, new: Option<&Value>) {
        let (was, is) = (old.map(owner_uids), new.map(owner_uids));
        if was != is {
            for uid in was.iter().flatten() {
                if let Some(set) = self.dependents.get_mut(uid) {
                    set.remove(r);
                    if set.is_empty() {
                        self.dependents.remove(uid);
                    }
                }
            }
            for uid in is.into_iter().flatten() {
                self.dependents.entry(uid).or_default().insert(r.clone());
            }
        }
    }

    /// The objects whose ownerReferences name `uid`.
    pub(super) fn dependents(&self, uid: &str) -> Vec<ObjRef> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn has_dependents(&self, uid: &str) -> bool {
        self.dependents.contains_key(uid)
    }
}

//! Indexes over the stored objects, kept by every change of the store, so that what a request
//! asks about costs what it concerns rather than the number of stored objects: the dependents of
//! an owner (garbage collection, propagation policies) and the objects carrying a label (lists
//! and watches with label selectors), plus the lookup that picks the narrowest way to the
//! objects a selector can match.

use super::{Key, ObjRef, owner_uids};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

#[derive(Default)]
pub(super) struct Index {
    /// Owner uid → the objects whose ownerReferences name it (the owner may be gone already).
    dependents: HashMap<String, BTreeSet<ObjRef>>,
    /// Store key → label key → label value → the objects carrying that label.
    labels: HashMap<String, HashMap<String, HashMap<String, BTreeSet<Key>>>>,
}

fn labels_of(obj: Option<&Value>) -> Vec<(&str, &str)> {
    obj.and_then(|o| o["metadata"]["labels"].as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default()
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
        let (was, is) = (labels_of(old), labels_of(new));
        if was != is {
            let key = (r.ns.clone(), r.name.clone());
            let by_label = self.labels.entry(r.key.clone()).or_default();
            for (k, v) in was {
                let Some(values) = by_label.get_mut(k) else {
                    continue;
                };
                if let Some(set) = values.get_mut(v) {
                    set.remove(&key);
                    if set.is_empty() {
                        values.remove(v);
                    }
                }
                if values.is_empty() {
                    by_label.remove(k);
                }
            }
            for (k, v) in is {
                by_label
                    .entry(k.to_string())
                    .or_default()
                    .entry(v.to_string())
                    .or_default()
                    .insert(key.clone());
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

    fn labelled(&self, key: &str, label: &str, value: &str) -> Option<&BTreeSet<Key>> {
        self.labels.get(key)?.get(label)?.get(value)
    }
}

/// What a list or watch can be narrowed to before its selectors are applied; every field
/// narrows, none widens. Whatever is returned is still matched against the whole selector.
#[derive(Debug, Default)]
pub struct Lookup<'a> {
    /// The namespace (from the path or a `metadata.namespace` field selector).
    pub ns: Option<&'a str>,
    /// An exact name (a `metadata.name` field selector).
    pub name: Option<&'a str>,
    /// Labels every match carries (`key=value` terms of the label selector).
    pub labels: Vec<(&'a str, &'a str)>,
    /// Only objects after this one (a list's `continue`).
    pub after: Option<Key>,
}

type Items<'a> = Box<dyn Iterator<Item = (&'a Key, &'a Value)> + 'a>;

impl super::State {
    /// The objects of store key `key` that `lookup` allows, in (namespace, name) order: by exact
    /// name, through the smallest label index set, or over the namespace's range, so a
    /// selective list costs what it can return rather than every object of its resource.
    pub fn lookup<'a>(&'a self, key: &str, lookup: &Lookup<'_>) -> Items<'a> {
        let Some(objects) = self.objects.get(key) else {
            return Box::new(std::iter::empty());
        };
        let after = lookup.after.clone();
        let later = move |k: &Key| after.as_ref().is_none_or(|a| k > a);
        if let (Some(ns), Some(name)) = (lookup.ns, lookup.name) {
            let found = objects.get_key_value(&(ns.to_string(), name.to_string()));
            return Box::new(found.filter(move |(k, _)| later(k)).into_iter());
        }
        let ns = lookup.ns.map(str::to_string);
        let start = match (&ns, &lookup.after) {
            (Some(n), Some(a)) if a.0 >= *n => Bound::Excluded(a.clone()),
            (Some(n), _) => Bound::Included((n.clone(), String::new())),
            (None, Some(a)) => Bound::Excluded(a.clone()),
            (None, None) => Bound::Unbounded,
        };
        let in_ns = move |k: &Key| ns.as_ref().is_none_or(|n| k.0 == *n);
        let mut sets = Vec::new();
        for (label, value) in &lookup.labels {
            match self.index.labelled(key, label, value) {
                Some(set) => sets.push(set),
                // No object carries a label every match must carry.
                None => return Box::new(std::iter::empty()),
            }
        }
        match sets.into_iter().min_by_key(|s| s.len()) {
            Some(set) => Box::new(
                set.range((start, Bound::Unbounded))
                    .take_while(move |k| in_ns(k))
                    .filter_map(|k| objects.get_key_value(k)),
            ),
            None => Box::new(
                objects
                    .range((start, Bound::Unbounded))
                    .take_while(move |(k, _)| in_ns(k)),
            ),
        }
    }

    /// The objects of store key `key`.
    pub fn objects_of<'a>(&'a self, key: &str) -> Items<'a> {
        self.lookup(key, &Lookup::default())
    }

    /// The objects of store key `key` in namespace `ns`.
    pub fn in_namespace<'a>(&'a self, key: &str, ns: &str) -> Items<'a> {
        self.lookup(
            key,
            &Lookup {
                ns: Some(ns),
                ..Default::default()
            },
        )
    }

    /// The store keys that have held objects.
    pub fn store_keys(&self) -> impl Iterator<Item = &String> {
        self.objects.keys()
    }
}

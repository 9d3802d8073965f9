//! The in-memory object store: objects, resourceVersions, watch history, the indexes that keep
//! lookups proportional to what they concern (module `index`) and the garbage collector
//! (finalizers, ownerReferences, namespaces, CRDs; module `gc`).

use crate::resources::{self, CRD_KEY, NS_KEY, ResDef};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::broadcast;

mod gc;
mod index;

pub use index::Lookup;

/// One change of the store, as watch streams see it.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub ty: &'static str,
    pub store_key: String,
    pub ns: String,
    /// Object before the change (for selector transitions).
    pub old: Option<Value>,
    pub obj: Value,
}

/// Namespace and name of a stored object.
pub type Key = (String, String);

/// A stored object: its resource's store key, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjRef {
    pub key: String,
    pub ns: String,
    pub name: String,
}

impl ObjRef {
    fn new(key: &str, ns: &str, name: &str) -> Self {
        ObjRef {
            key: key.to_string(),
            ns: ns.to_string(),
            name: name.to_string(),
        }
    }
}

pub struct State {
    pub rv: u64,
    /// Objects are added, replaced and removed only through `put` and `take`, which keep
    /// `uids`, `index` and the collector's queue in step.
    objects: HashMap<String, BTreeMap<Key, Value>>,
    uids: HashMap<String, ObjRef>,
    index: index::Index,
    /// Objects the garbage collector has to look at (see module `gc`).
    gc_queue: VecDeque<ObjRef>,
    pub history: VecDeque<Arc<Change>>,
    pub history_limit: usize,
    /// Highest resourceVersion dropped from the history window.
    pub compacted: u64,
    pub builtins: Vec<Arc<ResDef>>,
    pub crds: Vec<Arc<ResDef>>,
    pub tx: broadcast::Sender<Arc<Change>>,
    /// `namespace/name` of a webhook Service → local HTTPS port.
    pub webhook_services: HashMap<String, u16>,
}

pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, f: Vec<String>) {
    if f.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
    } else {
        obj["metadata"]["finalizers"] = json!(f);
    }
}

pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

impl State {
    pub fn new(history_limit: usize, tx: broadcast::Sender<Arc<Change>>) -> Self {
        let mut s = State {
            rv: 0,
            objects: HashMap::new(),
            uids: HashMap::new(),
            index: index::Index::default(),
            gc_queue: VecDeque::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            builtins: resources::builtins(),
            crds: Vec::new(),
            tx,
            webhook_services: HashMap::new(),
        };
        for ns in ["default", "kube-system", "kube-public"] {
            let obj = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now(),
                    "labels": {"kubernetes.io/metadata.name": ns},
                    // As kube-apiserver records creating them.
                    "managedFields": [{"manager": "kube-apiserver", "operation": "Update", "apiVersion": "v1",
                        "time": now(), "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/metadata.name": {}}}}}]},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            s.insert(NS_KEY, "", ns, obj);
        }
        s
    }

    pub fn all_defs(&self) -> impl Iterator<Item = &Arc<ResDef>> {
        self.builtins.iter().chain(self.crds.iter())
    }

    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResDef>> {
        self.all_defs()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
            .cloned()
    }

    pub fn def_for_key(&self, key: &str) -> Option<Arc<ResDef>> {
        self.all_defs()
            .find(|d| d.store_key == key && d.view == resources::View::Plain)
            .cloned()
    }

    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(key)?
            .get(&(ns.to_string(), name.to_string()))
    }

    pub fn namespace_state(&self, ns: &str) -> Option<bool> {
        self.get(NS_KEY, "", ns).map(is_deleting)
    }

    fn push(&mut self, ty: &'static str, key: &str, ns: &str, old: Option<Value>, obj: Value) {
        let c = Arc::new(Change {
            rv: self.rv,
            ty,
            store_key: key.to_string(),
            ns: ns.to_string(),
            old,
            obj,
        });
        self.history.push_back(c.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        let _ = self.tx.send(c);
        if key == CRD_KEY {
            self.refresh_crds();
        }
    }

    fn refresh_crds(&mut self) {
        let crds: Vec<Value> = self
            .objects
            .get(CRD_KEY)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        self.crds = crds.iter().flat_map(resources::from_crd).collect();
    }

    pub fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Every change of an object goes through `put` or `take`: they keep the uid map and the
    /// indexes in step and queue what the change gives the garbage collector to do.
    fn put(&mut self, key: &str, ns: &str, name: &str, obj: Value) -> Option<Value> {
        let r = ObjRef::new(key, ns, name);
        self.uids
            .insert(meta_str(&obj, "uid").to_string(), r.clone());
        let kind = self.objects.entry(key.to_string()).or_default();
        let k = (ns.to_string(), name.to_string());
        let old = kind.insert(k.clone(), obj);
        self.index.update(&r, old.as_ref(), kind.get(&k));
        self.notice(&r, old.as_ref());
        old
    }

    fn take(&mut self, key: &str, ns: &str, name: &str) -> Option<Value> {
        let obj = self
            .objects
            .get_mut(key)?
            .remove(&(ns.to_string(), name.to_string()))?;
        self.uids.remove(meta_str(&obj, "uid"));
        let r = ObjRef::new(key, ns, name);
        self.index.update(&r, Some(&obj), None);
        self.notice(&r, Some(&obj));
        Some(obj)
    }

    /// Store a new object (metadata already filled except resourceVersion).
    pub fn insert(&mut self, key: &str, ns: &str, name: &str, mut obj: Value) -> Value {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.put(key, ns, name, obj.clone());
        self.push("ADDED", key, ns, None, obj.clone());
        obj
    }

    /// Replace an existing object; removes it when it is being deleted and has no finalizers left.
    pub fn replace(&mut self, key: &str, ns: &str, name: &str, mut obj: Value) -> Value {
        if is_deleting(&obj) && finalizers(&obj).is_empty() && key != NS_KEY {
            self.put(key, ns, name, obj.clone());
            return self.remove(key, ns, name).unwrap_or(obj);
        }
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let old = self.put(key, ns, name, obj.clone());
        self.push("MODIFIED", key, ns, old, obj.clone());
        obj
    }

    pub fn remove(&mut self, key: &str, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self.take(key, ns, name)?;
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.push("DELETED", key, ns, None, obj.clone());
        Some(obj)
    }

    /// Delete like the registry does: mark when finalizers hold the object, remove otherwise.
    /// Returns the object as it is afterwards and whether it is gone.
    pub fn delete(
        &mut self,
        key: &str,
        ns: &str,
        name: &str,
        policy: &str,
    ) -> Option<(Value, bool)> {
        let mut obj = self.get(key, ns, name)?.clone();
        let mut fins = finalizers(&obj);
        let deleting = is_deleting(&obj);
        if key == NS_KEY {
            if !deleting {
                obj["metadata"]["deletionTimestamp"] = json!(now());
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                obj["status"]["phase"] = json!("Terminating");
                obj = self.replace(key, ns, name, obj);
            }
            return Some((obj, false));
        }
        if !deleting {
            let has_dependents =
                policy != "Background" && self.index.has_dependents(meta_str(&obj, "uid"));
            match policy {
                "Foreground"
                    if has_dependents && !fins.iter().any(|f| f == "foregroundDeletion") =>
                {
                    fins.push("foregroundDeletion".into())
                }
                "Orphan" if has_dependents && !fins.iter().any(|f| f == "orphan") => {
                    fins.push("orphan".into())
                }
                _ => {}
            }
        }
        if fins.is_empty() {
            let gone = self.remove(key, ns, name)?;
            return Some((gone, true));
        }
        if deleting {
            return Some((obj, false));
        }
        set_finalizers(&mut obj, fins);
        obj["metadata"]["deletionTimestamp"] = json!(now());
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        let obj = self.replace(key, ns, name, obj);
        Some((obj, false))
    }

    /// The names of the namespaces being deleted.
    pub fn terminating_namespaces(&self) -> Vec<String> {
        self.objects
            .get(NS_KEY)
            .map(|m| {
                m.iter()
                    .filter(|(_, o)| is_deleting(o))
                    .map(|((_, n), _)| n.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The changes after resourceVersion `rv` that the history still holds, oldest first.
    pub fn changes_since(&self, rv: u64) -> impl Iterator<Item = &Arc<Change>> {
        let first = self.history.partition_point(|c| c.rv <= rv);
        self.history.range(first..)
    }
}

pub fn owner_uids(o: &Value) -> Vec<String> {
    o["metadata"]["ownerReferences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

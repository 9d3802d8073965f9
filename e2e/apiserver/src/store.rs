//! The in-memory object store: objects, resourceVersions, watch history and
//! the garbage collector (finalizers, ownerReferences, namespaces, CRDs).

use crate::resources::{self, CRD_KEY, NS_KEY, ResDef};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::broadcast;

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

pub type Key = (String, String);

pub struct State {
    pub rv: u64,
    pub objects: HashMap<String, BTreeMap<Key, Value>>,
    pub uids: HashMap<String, (String, String, String)>,
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

    /// Store a new object (metadata already filled except resourceVersion).
    pub fn insert(&mut self, key: &str, ns: &str, name: &str, mut obj: Value) -> Value {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let uid = meta_str(&obj, "uid").to_string();
        self.uids
            .insert(uid, (key.to_string(), ns.to_string(), name.to_string()));
        self.objects
            .entry(key.to_string())
            .or_default()
            .insert((ns.to_string(), name.to_string()), obj.clone());
        self.push("ADDED", key, ns, None, obj.clone());
        obj
    }

    /// Replace an existing object; removes it when it is being deleted and has no finalizers left.
    pub fn replace(&mut self, key: &str, ns: &str, name: &str, mut obj: Value) -> Value {
        if is_deleting(&obj) && finalizers(&obj).is_empty() && key != NS_KEY {
            self.objects
                .entry(key.to_string())
                .or_default()
                .insert((ns.to_string(), name.to_string()), obj.clone());
            return self.remove(key, ns, name).unwrap_or(obj);
        }
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let old = self
            .objects
            .entry(key.to_string())
            .or_default()
            .insert((ns.to_string(), name.to_string()), obj.clone());
        self.push("MODIFIED", key, ns, old, obj.clone());
        obj
    }

    pub fn remove(&mut self, key: &str, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self
            .objects
            .get_mut(key)?
            .remove(&(ns.to_string(), name.to_string()))?;
        let uid = meta_str(&obj, "uid").to_string();
        self.uids.remove(&uid);
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
                policy != "Background" && self.has_dependents(meta_str(&obj, "uid"));
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

    fn has_dependents(&self, uid: &str) -> bool {
        self.objects
            .values()
            .flat_map(|m| m.values())
            .any(|o| owner_uids(o).iter().any(|u| u == uid))
    }

    fn remove_finalizer(&mut self, key: &str, ns: &str, name: &str, fin: &str) {
        if let Some(obj) = self.get(key, ns, name) {
            let mut obj = obj.clone();
            let f: Vec<String> = finalizers(&obj).into_iter().filter(|f| f != fin).collect();
            set_finalizers(&mut obj, f);
            self.replace(key, ns, name, obj);
        }
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

    fn is_namespaced_key(&self, key: &str) -> bool {
        self.def_for_key(key).map(|d| d.namespaced).unwrap_or(false)
    }

    /// Run the garbage collector and the namespace/CRD finalizers until nothing changes.
    pub fn gc(&mut self) {
        for _ in 0..1000 {
            if !self.gc_pass() {
                return;
            }
        }
    }

    fn gc_pass(&mut self) -> bool {
        // Only objects the collector can act on: being deleted, owned, in a terminating
        // namespace, or instances of a CRD being deleted.
        let terminating = self.terminating_namespaces();
        let dying_crds: Vec<String> = self
            .objects
            .get(CRD_KEY)
            .map(|m| {
                m.values()
                    .filter(|o| is_deleting(o))
                    .map(|o| {
                        format!(
                            "{}/{}",
                            o["spec"]["group"].as_str().unwrap_or_default(),
                            o["spec"]["names"]["plural"].as_str().unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut all: Vec<(String, String, String, Value)> = Vec::new();
        for (key, m) in &self.objects {
            let whole = dying_crds.contains(key);
            for ((ns, name), o) in m {
                let relevant = whole
                    || is_deleting(o)
                    || o["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|a| !a.is_empty())
                    || (!ns.is_empty() && terminating.contains(ns));
                if relevant {
                    all.push((key.clone(), ns.clone(), name.clone(), o.clone()));
                }
            }
        }
        if all.is_empty() {
            return false;
        }
        let mut changed = false;
        // CRDs being deleted: delete their objects, then release the CRD.
        for (key, ns, name, o) in all.iter().filter(|(k, ..)| k == CRD_KEY) {
            if !is_deleting(o)
                || !finalizers(o)
                    .iter()
                    .any(|f| f == "customresourcecleanup.apiextensions.k8s.io")
            {
                continue;
            }
            let group = o["spec"]["group"].as_str().unwrap_or_default();
            let plural = o["spec"]["names"]["plural"].as_str().unwrap_or_default();
            let ck = format!("{group}/{plural}");
            let members: Vec<(String, String, Value)> = all
                .iter()
                .filter(|(k, ..)| *k == ck)
                .map(|(_, n, m, v)| (n.clone(), m.clone(), v.clone()))
                .collect();
            if members.is_empty() {
                self.remove_finalizer(key, ns, name, "customresourcecleanup.apiextensions.k8s.io");
                changed = true;
            }
            for (n, m, v) in members {
                if !is_deleting(&v) {
                    self.delete(&ck, &n, &m, "Background");
                    changed = true;
                }
            }
        }
        if changed {
            return true;
        }
        // Terminating namespaces: removed once empty. Their content is deleted by the namespace
        // controller (`server::namespaces`) through the API, admission webhooks included.
        for (_, _, name, o) in all.iter().filter(|(k, ..)| k == NS_KEY) {
            if !is_deleting(o) {
                continue;
            }
            let empty = !all
                .iter()
                .any(|(k, n, ..)| n == name && k != NS_KEY && self.is_namespaced_key(k));
            if empty && finalizers(o).is_empty() {
                self.objects.get_mut(NS_KEY).map(|m| {
                    m.get_mut(&(String::new(), name.clone()))
                        .map(|v| v["spec"]["finalizers"] = json!([]))
                });
                self.remove(NS_KEY, "", name);
                changed = true;
            }
        }
        if changed {
            return true;
        }
        // Foreground and orphan finalizers.
        for (key, ns, name, o) in &all {
            if !is_deleting(o) {
                continue;
            }
            let uid = meta_str(o, "uid");
            let fins = finalizers(o);
            if fins.iter().any(|f| f == "foregroundDeletion") {
                let deps: Vec<&(String, String, String, Value)> = all
                    .iter()
                    .filter(|(.., v)| owner_uids(v).iter().any(|u| u == uid))
                    .collect();
                if deps.is_empty() {
                    self.remove_finalizer(key, ns, name, "foregroundDeletion");
                    changed = true;
                }
                for (k, n, m, v) in deps {
                    if !is_deleting(v) {
                        self.delete(k, n, m, "Foreground");
                        changed = true;
                    }
                }
            } else if fins.iter().any(|f| f == "orphan") {
                for (k, n, m, v) in all
                    .iter()
                    .filter(|(.., v)| owner_uids(v).iter().any(|u| u == uid))
                {
                    let mut v = v.clone();
                    if let Some(refs) = v["metadata"]["ownerReferences"].as_array_mut() {
                        refs.retain(|r| r["uid"].as_str() != Some(uid));
                        if refs.is_empty() {
                            v["metadata"]
                                .as_object_mut()
                                .map(|m| m.remove("ownerReferences"));
                        }
                    }
                    self.replace(k, n, m, v);
                }
                self.remove_finalizer(key, ns, name, "orphan");
                changed = true;
            }
        }
        if changed {
            return true;
        }
        // Background collection of dependents whose owners are all gone.
        for (key, ns, name, o) in &all {
            let owners = owner_uids(o);
            if owners.is_empty() || is_deleting(o) || self.get(key, ns, name).is_none() {
                continue;
            }
            if owners.iter().all(|u| !self.uids.contains_key(u)) {
                self.delete(key, ns, name, "Background");
                changed = true;
            }
        }
        changed
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

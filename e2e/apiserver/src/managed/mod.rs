//! Field ownership (`metadata.managedFields`), as kube-apiserver's field manager keeps it.
//!
//! Every write records which manager owns which fields, per (manager, operation, subresource,
//! and for updates apiVersion): an update (create, PUT, merge/JSON/strategic patch) takes the
//! fields it changes and keeps those it owned; an apply owns exactly the fields it applied,
//! removes the fields it stops applying unless another manager owns them, and fails with a
//! 409 when it would change a field another manager owns (unless forced, which takes the
//! field over). Module [`fieldset`] holds the sets, [`typed`] the object model they are
//! computed on, and [`apply`] the apply operation.
//!
//! The chain of kube's `FieldManager` is followed: managed fields a client writes are used
//! when valid (an empty list, or a list of one empty entry, clears them), an object without
//! managed fields stays without them on updates until the next apply, which first gives every
//! existing field to `before-first-apply`; server-set metadata is never owned; fields a
//! subresource cannot change are not owned through it (and `status` not through the main
//! resource of a kind with a status subresource); update entries beyond ten are merged,
//! oldest first, into `ancient-changes`; `kubectl apply --server-side` takes over, without
//! conflicts, the fields of `kubectl apply`'s last-applied annotation that still hold their
//! applied value, and keeps that annotation up to date.

pub mod apply;
pub mod fieldset;
pub mod typed;

use crate::resources::ResDef;
use fieldset::FieldSet;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use typed::{Comparison, Ty};

/// Update entries kept per object before the oldest are merged (kube's
/// `DefaultMaxUpdateManagers`).
const MAX_UPDATE_MANAGERS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub set: FieldSet,
}

impl Entry {
    /// kube's manager identifier, the JSON of the entry's identifying fields in Go's field
    /// order (conflicts are sorted by it); appliers are one manager whatever version they
    /// apply.
    fn identifier(&self) -> String {
        let quoted = |s: &str| Value::from(s).to_string();
        let mut id = format!(
            "{{\"manager\":{},\"operation\":{}",
            quoted(&self.manager),
            quoted(self.operation.as_str())
        );
        if self.operation == Operation::Update {
            id.push_str(&format!(",\"apiVersion\":{}", quoted(&self.api_version)));
        }
        if !self.subresource.is_empty() {
            id.push_str(&format!(",\"subresource\":{}", quoted(&self.subresource)));
        }
        id.push('}');
        id
    }

    /// kube's order of entries: appliers first, then by time, manager, apiVersion, subresource.
    fn order(&self) -> (Operation, &Option<String>, &str, &str, &str) {
        (
            self.operation,
            &self.time,
            &self.manager,
            &self.api_version,
            &self.subresource,
        )
    }

    fn same_manager(&self, other: &Entry) -> bool {
        self.identifier() == other.identifier()
    }

    /// How conflicts name the manager: `"kubectl-create" using v1`, `"keeper" with
    /// subresource "status"`.
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    fn to_json(&self) -> Value {
        let mut e = Map::new();
        e.insert("manager".into(), json!(self.manager));
        e.insert("operation".into(), json!(self.operation.as_str()));
        e.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            e.insert("time".into(), json!(t));
        }
        e.insert("fieldsType".into(), json!("FieldsV1"));
        e.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            e.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(e)
    }

    fn from_json(v: &Value) -> Result<Entry, String> {
        let operation = match v["operation"].as_str() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version = v["apiVersion"].as_str().unwrap_or_default();
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match v["fieldsType"].as_str() {
            Some("FieldsV1") => {}
            None | Some("") => return Err("missing fieldsType in managed fields entry".into()),
            Some(other) => return Err(format!("invalid fieldsType {other:?}")),
        }
        let set = match &v["fieldsV1"] {
            Value::Null => FieldSet::default(),
            fields => FieldSet::from_fields_v1(fields)?,
        };
        Ok(Entry {
            manager: v["manager"].as_str().unwrap_or_default().to_string(),
            operation,
            api_version: api_version.to_string(),
            time: v["time"].as_str().map(str::to_string),
            subresource: v["subresource"].as_str().unwrap_or_default().to_string(),
            set,
        })
    }
}

/// The managed fields of one object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Managed {
    pub entries: Vec<Entry>,
}

impl Managed {
    /// Read `metadata.managedFields` (`null` or absent: none). A later entry for the same
    /// manager replaces an earlier one.
    pub fn decode(list: &Value) -> Result<Managed, String> {
        let mut m = Managed::default();
        if list.is_null() {
            return Ok(m);
        }
        let items = list.as_array().ok_or("managedFields must be a list")?;
        for item in items {
            m.put(Entry::from_json(item)?);
        }
        Ok(m)
    }

    /// The managed fields of a stored object (they are always valid, the server wrote them).
    pub fn of(stored: &Value) -> Managed {
        Managed::decode(&stored["metadata"]["managedFields"]).unwrap_or_default()
    }

    /// Replace the entry of the same manager, or add one.
    fn put(&mut self, e: Entry) {
        self.entries.retain(|x| !x.same_manager(&e));
        self.entries.push(e);
    }

    fn take(&mut self, like: &Entry) -> Option<Entry> {
        let i = self.entries.iter().position(|x| x.same_manager(like))?;
        Some(self.entries.remove(i))
    }

    /// Write into `obj`'s metadata in kube's order (appliers first, then by time, manager,
    /// apiVersion, subresource); no entries: no `managedFields`.
    pub fn store(&self, obj: &mut Value) {
        let mut entries: Vec<&Entry> = self.entries.iter().filter(|e| !e.set.is_empty()).collect();
        entries.sort_by(|a, b| a.order().cmp(&b.order()));
        if entries.is_empty() {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
        } else {
            obj["metadata"]["managedFields"] =
                Value::Array(entries.iter().map(|e| e.to_json()).collect());
        }
    }

    /// Merge the oldest update entries into `ancient-changes` (one per apiVersion) while there
    /// are more than [`MAX_UPDATE_MANAGERS`], as kube's `capManagersManager` does.
    fn cap(&mut self) {
        let mut updaters: Vec<Entry> = Vec::new();
        self.entries.retain(|e| {
            let update = e.operation == Operation::Update;
            if update {
                updaters.push(e.clone());
            }
            !update
        });
        updaters.sort_by(|a, b| (&a.time, a.identifier()).cmp(&(&b.time, b.identifier())));
        let mut count = updaters.len();
        let mut kept: Vec<Entry> = Vec::new();
        for e in updaters {
            if count <= MAX_UPDATE_MANAGERS {
                kept.push(e);
                continue;
            }
            // Into the version's bucket, or the version's oldest entry becomes the bucket.
            let same = |k: &Entry| k.api_version == e.api_version;
            let bucket = kept
                .iter()
                .position(|k| same(k) && k.manager == ANCIENT && k.subresource.is_empty())
                .or_else(|| kept.iter().position(same));
            match bucket {
                Some(i) => {
                    let b = &mut kept[i];
                    b.manager = ANCIENT.into();
                    b.subresource.clear();
                    b.set = b.set.union(&e.set);
                    b.time = e.time;
                    count -= 1;
                }
                None => kept.push(e),
            }
        }
        self.entries.extend(kept);
    }
}

const ANCIENT: &str = "ancient-changes";

/// Who writes: the field manager (kube's `fieldManager`, else the User-Agent up to its first
/// `/`, else `unknown`), the API version and subresource of the request.
#[derive(Debug, Clone)]
pub struct Writer {
    pub manager: String,
    pub api_version: String,
    pub subresource: String,
}

impl Writer {
    pub fn new(
        field_manager: Option<&str>,
        user_agent: &str,
        api_version: String,
        subresource: &str,
    ) -> Writer {
        let manager = match field_manager.filter(|m| !m.is_empty()) {
            Some(m) => m.to_string(),
            None => user_agent_manager(user_agent),
        };
        Writer {
            manager: if manager.is_empty() {
                "unknown".into()
            } else {
                manager
            },
            api_version,
            subresource: subresource.to_string(),
        }
    }

    fn entry(&self, operation: Operation, set: FieldSet) -> Entry {
        Entry {
            manager: self.manager.clone(),
            operation,
            api_version: self.api_version.clone(),
            time: Some(crate::store::now()),
            subresource: self.subresource.clone(),
            set,
        }
    }
}

/// kube's default manager name: the User-Agent before its first `/`, printable characters
/// only, at most 128 bytes.
fn user_agent_manager(ua: &str) -> String {
    let mut out = String::new();
    for c in ua.split('/').next().unwrap_or_default().chars() {
        if c.is_control() {
            continue;
        }
        if out.len() + c.len_utf8() > 128 {
            break;
        }
        out.push(c);
    }
    out
}

/// The resource a write goes to: every definition that serves the same stored objects (one
/// per version or view, so that each manager's fields are compared in its own version), the
/// one the request used, and the subresource.
pub struct Scope {
    pub defs: Vec<Arc<ResDef>>,
    pub request: Arc<ResDef>,
    pub subresource: String,
}

impl Scope {
    /// `stored` as `api_version` serves it, without managed fields, and its type there.
    fn view(&self, api_version: &str, stored: &Value) -> Option<(Value, Ty<'_>)> {
        let def = self.defs.iter().find(|d| d.api_version() == api_version)?;
        let mut v = crate::server::view(def, stored);
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        Some((v, Ty::of(def)))
    }

    /// The fields this write may own: `status` only through the status subresource, never
    /// through the main resource of a kind that has one.
    fn owned(&self, set: &FieldSet) -> FieldSet {
        let mut out = set.clone();
        if self.subresource == "status" {
            out.nodes.retain(|pe, _| pe == "f:status");
        } else if self.request.status_sub {
            out.nodes.remove("f:status");
        }
        out
    }

    /// Compare two stored objects as `api_version` serves them, leaving out what no manager
    /// can own (`None`: that version is not served any more).
    fn compare(&self, api_version: &str, old: Option<&Value>, new: &Value) -> Option<Comparison> {
        let (new, ty) = self.view(api_version, new)?;
        let old = match old {
            Some(o) => self.view(api_version, o)?.0,
            None => empty_object(&self.request),
        };
        Some(typed::compare(&old, &new, ty).map(|s| self.ownable(s)))
    }

    fn ownable(&self, set: &FieldSet) -> FieldSet {
        self.owned(set).difference(server_fields())
    }
}

/// Metadata the server sets, which no manager owns (kube's `stripMetaManager`).
fn server_fields() -> &'static FieldSet {
    use std::sync::OnceLock;
    static SET: OnceLock<FieldSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut s = FieldSet::default();
        s.insert(&["f:apiVersion".into()]);
        s.insert(&["f:kind".into()]);
        s.insert(&["f:metadata".into()]);
        for f in [
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        ] {
            s.insert(&["f:metadata".into(), format!("f:{f}")]);
        }
        s
    })
}

/// The object a create starts from: kube's zero value of the type, whose non-pointer structs
/// (`spec`, `status`, ...) exist already, so that a create does not own them as new objects.
fn empty_object(def: &ResDef) -> Value {
    let mut obj = json!({"apiVersion": def.api_version(), "kind": def.kind});
    if def.crd {
        return obj;
    }
    obj["metadata"] = json!({});
    let structs: &[&str] = match def.plural.as_str() {
        "namespaces" | "services" | "poddisruptionbudgets" | "customresourcedefinitions" => {
            &["spec", "status"]
        }
        "deployments" => {
            obj["spec"] = json!({"template": {"metadata": {}, "spec": {"containers": null}},
                "strategy": {}});
            &["status"]
        }
        "leases" => &["spec"],
        "rolebindings" | "clusterrolebindings" => &["roleRef"],
        _ => &[],
    };
    for s in structs {
        obj[*s] = json!({});
    }
    obj
}

/// Whether a client's `managedFields` asks to clear them: an empty list, or a list of one
/// empty entry.
fn is_reset(requested: &Value) -> bool {
    match requested.as_array().map(Vec::as_slice) {
        Some([]) => true,
        Some([only]) => only.as_object().is_some_and(|o| {
            o.values()
                .all(|v| v.is_null() || v.as_str().is_some_and(str::is_empty))
        }),
        _ => false,
    }
}

/// Record an update (create, PUT, non-apply patch) by `writer` in `new` (the stored object to
/// write; `old` is the stored object before, `None` for a create; `requested` the
/// `managedFields` the client sent).
pub fn update(
    scope: &Scope,
    writer: &Writer,
    old: Option<&Value>,
    requested: &Value,
    new: &mut Value,
) {
    let live = || old.map(Managed::of).unwrap_or_default();
    let mut managed = if !writer.subresource.is_empty() || requested.is_null() {
        live()
    } else if is_reset(requested) {
        Managed::default()
    } else {
        match Managed::decode(requested) {
            Ok(m) if !m.entries.is_empty() => m,
            _ => live(),
        }
    };
    // An existing object without managed fields keeps none until it is applied to.
    if managed.entries.is_empty() && old.is_some() {
        managed.store(new);
        return;
    }
    let Some(cmp) = scope.compare(&writer.api_version, old, new) else {
        return;
    };
    let entries = std::mem::take(&mut managed.entries);
    for (mut e, c) in per_version(scope, &writer.api_version, &cmp, entries, old, new) {
        e.set = e.set.difference(&c.changed()).difference(&c.removed);
        managed.entries.push(e);
    }
    let changed = cmp.changed();
    if !changed.is_empty() {
        let mut mine = writer.entry(Operation::Update, changed);
        if let Some(before) = managed.take(&mine) {
            mine.set = mine.set.union(&before.set);
        }
        managed.put(mine);
    }
    managed.entries.retain(|e| !e.set.is_empty());
    managed.cap();
    managed.store(new);
}

/// Each entry with the change seen in its own API version (`cmp` for the request's). Entries
/// of versions no longer served are dropped, as kube does.
fn per_version(
    scope: &Scope,
    version: &str,
    cmp: &Comparison,
    entries: Vec<Entry>,
    old: Option<&Value>,
    new: &Value,
) -> Vec<(Entry, Comparison)> {
    entries
        .into_iter()
        .filter_map(|e| {
            let c = if e.api_version == version {
                Some(cmp.clone())
            } else {
                scope.compare(&e.api_version, old, new)
            };
            c.map(|c| (e, c))
        })
        .collect()
}

/// Whether two objects differ only in the times of their managed fields, which then are not a
/// change (kube's `IgnoreManagedFieldsTimestampsTransformer`).
pub fn only_times_differ(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        v
    };
    let untimed = |v: &Value| {
        let mut m = Managed::of(v);
        m.entries.iter_mut().for_each(|e| e.time = None);
        m
    };
    strip(a) == strip(b) && untimed(a) == untimed(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, time: &str) -> Entry {
        let mut set = FieldSet::default();
        set.insert(&["f:data".into(), format!("f:{manager}")]);
        Entry {
            manager: manager.into(),
            operation: Operation::Update,
            api_version: "v1".into(),
            time: Some(time.into()),
            subresource: String::new(),
            set,
        }
    }

    #[test]
    fn eleven_updaters_merge_the_two_oldest_into_ancient_changes() {
        let mut m = Managed::default();
        for i in 0..11 {
            m.put(entry(
                &format!("u{i:02}"),
                &format!("2024-01-01T00:00:{i:02}Z"),
            ));
        }
        m.cap();
        assert_eq!(m.entries.len(), 10);
        let ancient = m.entries.iter().find(|e| e.manager == ANCIENT).unwrap();
        assert_eq!(
            ancient.set.to_fields_v1(),
            json!({"f:data": {"f:u00": {}, "f:u01": {}}})
        );
        assert_eq!(ancient.time.as_deref(), Some("2024-01-01T00:00:01Z"));
    }

    #[test]
    fn entries_round_trip_and_invalid_ones_are_refused() {
        let e = entry("kubectl-create", "2024-01-01T00:00:00Z");
        assert_eq!(Entry::from_json(&e.to_json()).unwrap(), e);
        assert!(Entry::from_json(&json!({"manager": "m", "operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"})).is_err());
        assert!(
            Entry::from_json(&json!({"manager": "m", "operation": "Update", "apiVersion": "v1"}))
                .is_err()
        );
        assert!(is_reset(&json!([])) && is_reset(&json!([{}])) && !is_reset(&json!([e.to_json()])));
        assert_eq!(
            user_agent_manager("kubectl/v1.32.4 (linux/amd64)"),
            "kubectl"
        );
    }
}

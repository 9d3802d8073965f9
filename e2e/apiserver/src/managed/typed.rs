//! Objects seen through their types, as structured-merge-diff sees them: which object keys are
//! named struct fields and which are map entries, which lists merge by key, as sets or
//! atomically. On that view: field sets of an object, the comparison of two objects, removing
//! a field set from an object, and merging an applied configuration into the live object.
//!
//! Custom resources take this from their structural schema (`x-kubernetes-list-type`,
//! `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`, `properties` vs
//! `additionalProperties`). Built-in kinds have no schemas here, so their shape comes from field
//! names: the maps of the Go types (labels, data, ...), the atomic label selectors, and the merge
//! keys strategic merge patch uses.

use super::fieldset::{FieldSet, canonical_json};
use crate::resources::ResDef;
use serde_json::{Map, Value, json};

/// The type of a value inside an object.
#[derive(Debug, Clone, Copy)]
pub enum Ty<'a> {
    /// A node of a custom resource's structural schema (`None`: no schema, as for
    /// `x-kubernetes-preserve-unknown-fields`, where objects are maps and lists are atomic).
    /// `root` is the object itself, whose `metadata` is an ObjectMeta.
    Schema { node: Option<&'a Value>, root: bool },
    /// A value of a built-in kind, known by the name of the field holding it (`""` for list
    /// items and the object itself).
    Builtin {
        plural: &'a str,
        field: &'static str,
    },
}

/// How a list merges.
#[derive(Debug, Clone, PartialEq)]
pub enum ListKind {
    Atomic,
    Set,
    /// Associative: items are identified by these fields (with the value a missing one takes).
    Map(Vec<(String, Option<Value>)>),
}

/// The shape of a value of some type.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Object,
    List(ListKind),
    /// Scalars, null, atomic maps and atomic lists.
    Leaf,
}

/// Built-in fields whose values are maps: their keys are entries, not named fields.
const MAP_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "stringData",
    "nodeSelector",
    "limits",
    "requests",
    "properties",
];

/// Built-in label selectors, atomic structs in kube (`+structType=atomic`).
const ATOMIC_FIELDS: &[&str] = &[
    "selector",
    "namespaceSelector",
    "objectSelector",
    "labelSelector",
];

/// Built-in lists that are not atomic: sets and associative lists (with their keys).
const LIST_FIELDS: &[&str] = &[
    "finalizers",
    "ports",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "env",
    "volumes",
    "imagePullSecrets",
    "volumeMounts",
    "volumeDevices",
    "ownerReferences",
    "conditions",
];

/// The field name as the built-in type model knows it (`""` when nothing depends on it).
fn known(key: &str) -> &'static str {
    [MAP_FIELDS, ATOMIC_FIELDS, LIST_FIELDS]
        .into_iter()
        .flatten()
        .find(|k| **k == key)
        .copied()
        .unwrap_or("")
}

impl<'a> Ty<'a> {
    /// The type of whole objects of a resource.
    pub fn of(def: &'a ResDef) -> Ty<'a> {
        if def.crd {
            Ty::Schema {
                node: def.schema.as_ref().filter(|s| s.is_object()),
                root: true,
            }
        } else {
            Ty::Builtin {
                plural: &def.plural,
                field: "",
            }
        }
    }

    pub fn shape(&self, v: &Value) -> Shape {
        match v {
            Value::Object(_) if self.atomic_object() => Shape::Leaf,
            Value::Object(_) => Shape::Object,
            Value::Array(_) => match self.list_kind() {
                ListKind::Atomic => Shape::Leaf,
                kind => Shape::List(kind),
            },
            _ => Shape::Leaf,
        }
    }

    fn atomic_object(&self) -> bool {
        match *self {
            Ty::Schema { node, .. } => node.is_some_and(|s| s["x-kubernetes-map-type"] == "atomic"),
            Ty::Builtin { plural, field } => {
                ATOMIC_FIELDS.contains(&field) && !service_selector(plural, field)
            }
        }
    }

    /// Whether `key` of an object of this type is a named field of a struct (rather than the
    /// key of a map entry).
    pub fn named(&self, key: &str) -> bool {
        match *self {
            Ty::Schema { node, root } => {
                (root && matches!(key, "apiVersion" | "kind" | "metadata"))
                    || node.is_some_and(|s| s["properties"].get(key).is_some())
            }
            Ty::Builtin { plural, field } => {
                !MAP_FIELDS.contains(&field) && !service_selector(plural, field)
            }
        }
    }

    /// The type of the value under `key`.
    pub fn field(&self, key: &str) -> Ty<'a> {
        match *self {
            Ty::Schema { node, root } => {
                if root && key == "metadata" {
                    return Ty::Builtin {
                        plural: "",
                        field: "",
                    };
                }
                let node = node.and_then(|s| match s["properties"].get(key) {
                    Some(p) => Some(p),
                    None => Some(&s["additionalProperties"]).filter(|a| a.is_object()),
                });
                Ty::Schema { node, root: false }
            }
            Ty::Builtin { plural, .. } => Ty::Builtin {
                plural,
                field: known(key),
            },
        }
    }

    /// The type of a list's items.
    pub fn items(&self) -> Ty<'a> {
        match *self {
            Ty::Schema { node, .. } => Ty::Schema {
                node: node.map(|s| &s["items"]).filter(|i| i.is_object()),
                root: false,
            },
            Ty::Builtin { plural, .. } => Ty::Builtin { plural, field: "" },
        }
    }

    /// The type below a path element (`f:` a field, anything else a list item).
    fn below(&self, pe: &str) -> Ty<'a> {
        match pe.strip_prefix("f:") {
            Some(name) => self.field(name),
            None => self.items(),
        }
    }

    fn list_kind(&self) -> ListKind {
        match *self {
            Ty::Schema { node: Some(s), .. } => match s["x-kubernetes-list-type"].as_str() {
                Some("set") => ListKind::Set,
                Some("map") => ListKind::Map(
                    s["x-kubernetes-list-map-keys"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|k| {
                            let default = &s["items"]["properties"][k]["default"];
                            (
                                k.to_string(),
                                Some(default.clone()).filter(|d| !d.is_null()),
                            )
                        })
                        .collect(),
                ),
                _ => ListKind::Atomic,
            },
            Ty::Schema { node: None, .. } => ListKind::Atomic,
            Ty::Builtin { plural, field } => builtin_list(plural, field),
        }
    }
}

/// A Service's `spec.selector` is a plain map, unlike the label selectors of other kinds.
fn service_selector(plural: &str, field: &str) -> bool {
    plural == "services" && field == "selector"
}

fn builtin_list(plural: &str, field: &str) -> ListKind {
    let tcp = Some(json!("TCP"));
    match field {
        "finalizers" => ListKind::Set,
        // kube keys ports by port and protocol, protocol defaulting to TCP.
        "ports" if plural == "services" => {
            ListKind::Map(vec![("port".into(), None), ("protocol".into(), tcp)])
        }
        "ports" => ListKind::Map(vec![
            ("containerPort".into(), None),
            ("protocol".into(), tcp),
        ]),
        _ => match crate::patch::merge_key(field, None) {
            Some(key) => ListKind::Map(vec![(key.to_string(), None)]),
            None => ListKind::Atomic,
        },
    }
}

/// The path element of a list item.
fn item_element(kind: &ListKind, item: &Value) -> String {
    match kind {
        ListKind::Map(keys) => {
            let mut fields = Map::new();
            for (k, default) in keys {
                if let Some(v) = item.get(k).filter(|v| !v.is_null()).or(default.as_ref()) {
                    fields.insert(k.clone(), v.clone());
                }
            }
            format!("k:{}", canonical_json(&Value::Object(fields)))
        }
        _ => format!("v:{}", canonical_json(item)),
    }
}

/// A list's items by path element; a repeated element counts once (its first item).
fn index_items<'v>(kind: &ListKind, items: &'v [Value]) -> Vec<(String, &'v Value)> {
    let mut out: Vec<(String, &Value)> = Vec::new();
    for item in items {
        let pe = item_element(kind, item);
        if !out.iter().any(|(p, _)| *p == pe) {
            out.push((pe, item));
        }
    }
    out
}

/// The fields `v` sets (structured-merge-diff's `ToFieldSet`): every leaf, every list item, map
/// entries, and struct fields that are null or empty objects.
pub fn field_set(v: &Value, ty: Ty) -> FieldSet {
    let mut set = FieldSet::default();
    walk_set(v, ty, &mut Vec::new(), &mut set);
    set
}

/// Adds the fields of `v` at `path`; true when `v` is a leaf (and so in the set itself).
fn walk_set(v: &Value, ty: Ty, path: &mut Vec<String>, set: &mut FieldSet) -> bool {
    match (ty.shape(v), v) {
        (Shape::List(kind), Value::Array(items)) => {
            for (pe, item) in index_items(&kind, items) {
                path.push(pe);
                walk_set(item, ty.items(), path, set);
                set.insert(path);
                path.pop();
            }
            false
        }
        (Shape::Object, Value::Object(m)) => {
            for (k, val) in m {
                path.push(format!("f:{k}"));
                let leaf = walk_set(val, ty.field(k), path, set);
                let empty = val.is_null() || val.as_object().is_some_and(Map::is_empty);
                if !leaf && (empty || !ty.named(k)) {
                    set.insert(path);
                }
                path.pop();
            }
            false
        }
        _ => {
            set.insert(path);
            true
        }
    }
}

/// What changed between two versions of an object, field by field.
#[derive(Debug, Default, Clone)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// The fields that now have a value they did not have before.
    pub fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }

    /// The comparison restricted by `keep`.
    pub fn map(&self, keep: impl Fn(&FieldSet) -> FieldSet) -> Comparison {
        Comparison {
            added: keep(&self.added),
            modified: keep(&self.modified),
            removed: keep(&self.removed),
        }
    }
}

/// Compare `old` with `new` like structured-merge-diff: leaves (scalars, atomic values, empty
/// containers) are added, modified or removed; objects, lists and list items that appear or
/// disappear are added or removed themselves too (not when they were or become `null`).
pub fn compare(old: &Value, new: &Value, ty: Ty) -> Comparison {
    let mut c = Comparison::default();
    walk_compare(Some(old), Some(new), ty, &mut Vec::new(), &mut c);
    c
}

fn walk_compare(
    l: Option<&Value>,
    r: Option<&Value>,
    ty: Ty,
    path: &mut Vec<String>,
    c: &mut Comparison,
) {
    // A null container is an empty one to descend into (but, unlike a missing one, not added
    // or removed itself), as structured-merge-diff reads it.
    let shape = |v: Option<&Value>| v.filter(|v| !v.is_null()).map(|v| ty.shape(v));
    let (ls, rs) = (shape(l), shape(r));
    let container = match (&ls, &rs) {
        (Some(a), Some(b)) if a != b => None,
        (Some(s), _) | (None, Some(s)) => Some(s.clone()).filter(|s| *s != Shape::Leaf),
        (None, None) => None,
    };
    let empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    match container {
        Some(shape) if !(empty(l) && empty(r)) => {
            match shape {
                Shape::List(kind) => {
                    let (li, ri) = (list_items(&kind, l), list_items(&kind, r));
                    let mut pes: Vec<&String> = li.iter().map(|(p, _)| p).collect();
                    pes.extend(
                        ri.iter()
                            .map(|(p, _)| p)
                            .filter(|p| !li.iter().any(|(q, _)| q == *p)),
                    );
                    for pe in pes {
                        path.push(pe.clone());
                        walk_compare(find_item(&li, pe), find_item(&ri, pe), ty.items(), path, c);
                        path.pop();
                    }
                }
                _ => {
                    let (lm, rm) = (l.and_then(Value::as_object), r.and_then(Value::as_object));
                    let mut keys: Vec<&String> = lm.into_iter().flat_map(Map::keys).collect();
                    keys.extend(
                        rm.into_iter()
                            .flat_map(Map::keys)
                            .filter(|k| lm.is_none_or(|m| !m.contains_key(*k))),
                    );
                    for k in keys {
                        path.push(format!("f:{k}"));
                        let (lv, rv) = (lm.and_then(|m| m.get(k)), rm.and_then(|m| m.get(k)));
                        walk_compare(lv, rv, ty.field(k), path, c);
                        path.pop();
                    }
                }
            }
            if l.is_none() {
                c.added.insert(path);
            } else if r.is_none() {
                c.removed.insert(path);
            }
        }
        _ => match (l, r) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            (Some(a), Some(b)) if a != b => c.modified.insert(path),
            _ => {}
        },
    }
}

fn list_items<'v>(kind: &ListKind, v: Option<&'v Value>) -> Vec<(String, &'v Value)> {
    v.and_then(Value::as_array)
        .map(|a| index_items(kind, a))
        .unwrap_or_default()
}

fn find_item<'v>(items: &[(String, &'v Value)], pe: &str) -> Option<&'v Value> {
    items.iter().find(|(p, _)| p == pe).map(|(_, v)| *v)
}

/// `v` without the members of `set` (each with everything below it). A map or list that
/// loses all its content goes too (`None`).
pub fn remove(v: &Value, set: &FieldSet, ty: Ty) -> Option<Value> {
    match (ty.shape(v), v) {
        (Shape::Object, Value::Object(m)) => {
            let mut out = Map::new();
            for (k, val) in m {
                let pe = format!("f:{k}");
                if set.is_member(&pe) {
                    continue;
                }
                let kept = match set.child(&pe) {
                    Some(sub) => remove(val, sub, ty.field(k)),
                    None => Some(val.clone()),
                };
                if let Some(kept) = kept {
                    out.insert(k.clone(), kept);
                }
            }
            Some(Value::Object(out)).filter(|o| o.as_object().is_some_and(|m| !m.is_empty()))
        }
        (Shape::List(kind), Value::Array(items)) => {
            let mut out = Vec::new();
            for item in items {
                let pe = item_element(&kind, item);
                if set.is_member(&pe) {
                    continue;
                }
                out.push(match set.child(&pe) {
                    Some(sub) => remove(item, sub, ty.items()).unwrap_or_else(|| json!({})),
                    None => item.clone(),
                });
            }
            Some(Value::Array(out)).filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        }
        _ => Some(v.clone()),
    }
}

/// `set` plus the named struct fields on the way to its members (structured-merge-diff's
/// `EnsureNamedFieldsAreMembers`), so that removing a struct field takes the field itself
/// rather than leaving it empty.
pub fn ensure_named(set: &FieldSet, ty: Ty) -> FieldSet {
    let mut out = set.clone();
    for (pe, node) in out.nodes.iter_mut() {
        let below = ty.below(pe);
        node.children = ensure_named(&node.children, below);
        let named = pe.strip_prefix("f:").is_some_and(|name| ty.named(name));
        if named && !node.children.is_empty() {
            node.member = true;
        }
    }
    out
}

/// Merge an applied configuration into the live object (structured-merge-diff's `Merge`):
/// objects recursively, associative lists by key, sets by value, anything atomic replaced;
/// `null` removes.
pub fn merge(live: &mut Value, config: &Value, ty: Ty) {
    match (ty.shape(config), config) {
        (Shape::Object, Value::Object(p)) => {
            if !live.is_object() {
                *live = Value::Object(Map::new());
            }
            let Value::Object(t) = live else { return };
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                    continue;
                }
                merge(t.entry(k.clone()).or_insert(Value::Null), v, ty.field(k));
            }
        }
        (Shape::List(kind), Value::Array(items)) if live.is_array() => {
            let Value::Array(list) = live else { return };
            for item in items {
                let pe = item_element(&kind, item);
                match list.iter().position(|e| item_element(&kind, e) == pe) {
                    Some(i) if matches!(kind, ListKind::Map(_)) => {
                        merge(&mut list[i], item, ty.items())
                    }
                    Some(_) => {}
                    None => list.push(item.clone()),
                }
            }
        }
        _ => *live = config.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(plural: &str) -> Ty<'_> {
        Ty::Builtin { plural, field: "" }
    }

    #[test]
    fn field_sets_name_map_entries_and_list_items_like_kube() {
        let obj = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["f"]},
            "spec": {"selector": {"matchLabels": {"x": "y"}}, "template": {"spec": {"containers": [
                {"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}}}});
        let set = field_set(&obj, builtin("deployments"));
        assert_eq!(
            set.to_fields_v1(),
            json!({"f:metadata": {"f:finalizers": {"v:\"f\"": {}}, "f:labels": {"f:a": {}}},
                "f:spec": {"f:selector": {}, "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}, "f:ports": {
                        "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}})
        );
    }

    #[test]
    fn compare_adds_new_containers_and_modifies_leaves() {
        let old = json!({"data": {"a": "1"}});
        let new = json!({"data": {"a": "2"}, "metadata": {"labels": {"l": "v"}}});
        let c = compare(&old, &new, builtin("configmaps"));
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:metadata": {".": {}, "f:labels": {".": {}, "f:l": {}}}})
        );
        assert_eq!(c.modified.to_fields_v1(), json!({"f:data": {"f:a": {}}}));
        assert!(c.removed.is_empty());
        // A null list is there already: only its new item is added.
        let c = compare(
            &json!({"spec": {"containers": null}}),
            &json!({"spec": {"containers": [{"name": "c"}]}}),
            builtin("deployments"),
        );
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}}}}})
        );
    }

    #[test]
    fn schema_lists_are_atomic_unless_typed() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                "items": {"type": "object", "properties": {"type": {"type": "string"}, "s": {"type": "string"}}}}}}}});
        let ty = Ty::Schema {
            node: Some(&schema),
            root: true,
        };
        let obj = json!({"spec": {"tags": ["a"], "conds": [{"type": "A", "s": "x"}]}});
        assert_eq!(
            field_set(&obj, ty).to_fields_v1(),
            json!({"f:spec": {"f:conds": {"k:{\"type\":\"A\"}": {".": {}, "f:s": {}, "f:type": {}}}, "f:tags": {}}})
        );
        let mut live = json!({"spec": {"tags": ["a", "b"], "conds": [{"type": "A", "s": "x"}, {"type": "B"}]}});
        merge(
            &mut live,
            &json!({"spec": {"tags": ["c"], "conds": [{"type": "B", "s": "y"}]}}),
            ty,
        );
        assert_eq!(
            live,
            json!({"spec": {"tags": ["c"], "conds": [{"type": "A", "s": "x"}, {"type": "B", "s": "y"}]}})
        );
    }

    #[test]
    fn remove_drops_emptied_containers_and_ensure_named_marks_struct_fields() {
        let ty = builtin("configmaps");
        let obj = json!({"metadata": {"name": "n", "labels": {"a": "1"}}, "data": {"k": "v"}});
        let mut set = FieldSet::default();
        set.insert(&["f:metadata".into(), "f:labels".into(), "f:a".into()]);
        set.insert(&["f:data".into(), "f:k".into()]);
        assert_eq!(
            remove(&obj, &set, ty).unwrap(),
            json!({"metadata": {"name": "n"}})
        );
        assert_eq!(
            ensure_named(&set, ty).to_fields_v1(),
            json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {".": {}, "f:labels": {".": {}, "f:a": {}}}})
        );
    }
}

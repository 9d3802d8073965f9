//! Field sets as structured-merge-diff keeps them: trees of path elements (`f:name` for a field
//! or map key, `k:{"name":"x"}` for an item of an associative list, `v:"x"` for an item of a set
//! list, `i:0` for a list index), read and written as kube's `fieldsV1`.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A set of field paths. Each node of the tree is a member of the set (the path itself is in
/// it), the parent of members, or both (written `.` in `fieldsV1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub(super) nodes: BTreeMap<String, Node>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Node {
    pub(super) member: bool,
    pub(super) children: FieldSet,
}

impl Node {
    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Add `path` (one element or more) to the set.
    pub fn insert(&mut self, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let node = self.nodes.entry(first.clone()).or_default();
        if rest.is_empty() {
            node.member = true;
        } else {
            node.children.insert(rest);
        }
    }

    /// Whether the path element `pe` is itself a member.
    pub fn is_member(&self, pe: &str) -> bool {
        self.nodes.get(pe).is_some_and(|n| n.member)
    }

    /// The members under `pe`, relative to it (structured-merge-diff's `WithPrefix`).
    pub fn child(&self, pe: &str) -> Option<&FieldSet> {
        self.nodes
            .get(pe)
            .map(|n| &n.children)
            .filter(|c| !c.is_empty())
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        for (pe, n) in &other.nodes {
            let mine = out.nodes.entry(pe.clone()).or_default();
            mine.member |= n.member;
            mine.children = mine.children.union(&n.children);
        }
        out
    }

    /// The members of `self` that are not members of `other` (exact paths: a member of
    /// `other` does not take its descendants away).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        self.zip(other, |a, b| {
            Some(match b {
                None => a.clone(),
                Some(b) => Node {
                    member: a.member && !b.member,
                    children: a.children.difference(&b.children),
                },
            })
        })
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        self.zip(other, |a, b| {
            b.map(|b| Node {
                member: a.member && b.member,
                children: a.children.intersection(&b.children),
            })
        })
    }

    /// The members of `self` that are neither members of `other` nor below one of them.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        self.zip(other, |a, b| match b {
            None => Some(a.clone()),
            Some(b) if b.member => None,
            Some(b) => Some(Node {
                member: a.member,
                children: a.children.recursive_difference(&b.children),
            }),
        })
    }

    /// Each node of `self` combined by `f` with the node at the same place in `other`; nodes
    /// that come out empty are left out.
    fn zip(&self, other: &FieldSet, f: impl Fn(&Node, Option<&Node>) -> Option<Node>) -> FieldSet {
        let mut out = FieldSet::default();
        for (pe, a) in &self.nodes {
            if let Some(n) = f(a, other.nodes.get(pe)).filter(|n| !n.is_empty()) {
                out.nodes.insert(pe.clone(), n);
            }
        }
        out
    }

    /// Every member path, in structured-merge-diff's order (a level's members before the
    /// paths below it).
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for (pe, n) in &self.nodes {
            if n.member {
                let mut p = prefix.clone();
                p.push(pe.clone());
                out.push(p);
            }
        }
        for (pe, n) in &self.nodes {
            prefix.push(pe.clone());
            n.children.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The set as kube's `fieldsV1` object.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for (pe, n) in &self.nodes {
            let mut inner = Map::new();
            if n.member && !n.children.is_empty() {
                inner.insert(".".into(), Value::Object(Map::new()));
            }
            if let Value::Object(c) = n.children.to_fields_v1() {
                inner.extend(c);
            }
            out.insert(pe.clone(), Value::Object(inner));
        }
        Value::Object(out)
    }

    /// Read a `fieldsV1` object; path elements that kube could not parse are an error.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Some(obj) = v.as_object() else {
            return Err(format!("expected an object, got {v}"));
        };
        let mut out = FieldSet::default();
        for (pe, inner) in obj {
            if pe == "." {
                continue;
            }
            check_path_element(pe)?;
            let inner_obj = inner
                .as_object()
                .ok_or_else(|| format!("expected an object under {pe}"))?;
            let node = Node {
                member: inner_obj.is_empty() || inner_obj.contains_key("."),
                children: FieldSet::from_fields_v1(inner)?,
            };
            out.nodes.insert(pe.clone(), node);
        }
        Ok(out)
    }
}

fn check_path_element(pe: &str) -> Result<(), String> {
    let bad = || format!("invalid path element {pe:?}");
    match pe.split_at_checked(2) {
        Some(("f:", _)) => Ok(()),
        Some(("k:", key)) => serde_json::from_str::<Map<String, Value>>(key)
            .map(|_| ())
            .map_err(|_| bad()),
        Some(("v:", value)) => serde_json::from_str::<Value>(value)
            .map(|_| ())
            .map_err(|_| bad()),
        Some(("i:", index)) => index.parse::<u64>().map(|_| ()).map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// A path as kube prints it in conflicts: `.spec.containers[name="c"].image`, `[="x"]` for a set
/// item, `[0]` for an index.
pub fn display(path: &[String]) -> String {
    path.iter().map(|pe| display_element(pe)).collect()
}

fn display_element(pe: &str) -> String {
    match pe.split_at_checked(2) {
        Some(("f:", name)) => format!(".{name}"),
        Some(("k:", key)) => {
            let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
            let parts: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{k}={}", display_value(v)))
                .collect();
            format!("[{}]", parts.join(","))
        }
        Some(("v:", value)) => {
            let v: Value = serde_json::from_str(value).unwrap_or(Value::Null);
            format!("[={}]", display_value(&v))
        }
        Some(("i:", index)) => format!("[{index}]"),
        _ => pe.to_string(),
    }
}

fn display_value(v: &Value) -> String {
    match v {
        Value::String(_) => v.to_string(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(display_value).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", display_value(v)))
            .collect(),
        other => other.to_string(),
    }
}

/// Compact JSON with object keys sorted, as Go writes maps (path elements and the
/// last-applied annotation must come out the same whatever order the input had).
pub fn canonical_json(v: &Value) -> String {
    serde_json::to_string(&sorted(v)).unwrap_or_default()
}

fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fields_v1_round_trip_with_dot_for_members_that_have_children() {
        let mut s = FieldSet::default();
        s.insert(&path(&["f:data"]));
        s.insert(&path(&["f:data", "f:a"]));
        s.insert(&path(&["f:spec", "f:containers", r#"k:{"name":"c"}"#]));
        s.insert(&path(&[
            "f:spec",
            "f:containers",
            r#"k:{"name":"c"}"#,
            "f:image",
        ]));
        let v1 = s.to_fields_v1();
        assert_eq!(
            v1,
            json!({"f:data": {".": {}, "f:a": {}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}})
        );
        assert_eq!(FieldSet::from_fields_v1(&v1).unwrap(), s);
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
    }

    #[test]
    fn difference_is_exact_and_recursive_difference_takes_subtrees() {
        let mut s = FieldSet::default();
        s.insert(&path(&["f:status"]));
        s.insert(&path(&["f:status", "f:phase"]));
        s.insert(&path(&["f:spec", "f:x"]));
        let mut status = FieldSet::default();
        status.insert(&path(&["f:status"]));
        assert_eq!(
            s.difference(&status).paths(),
            vec![path(&["f:spec", "f:x"]), path(&["f:status", "f:phase"])]
        );
        assert_eq!(
            s.recursive_difference(&status).paths(),
            vec![path(&["f:spec", "f:x"])]
        );
    }

    #[test]
    fn displays_paths_like_kube() {
        assert_eq!(
            display(&path(&[
                "f:spec",
                "f:ports",
                r#"k:{"port":80,"protocol":"TCP"}"#,
                "f:name"
            ])),
            r#".spec.ports[port=80,protocol="TCP"].name"#
        );
        assert_eq!(
            display(&path(&["f:metadata", "f:finalizers", r#"v:"a/b""#])),
            r#".metadata.finalizers[="a/b"]"#
        );
    }
}

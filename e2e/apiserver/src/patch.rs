//! Patch flavours: JSON merge patch (RFC 7386), JSON patch (RFC 6902),
//! strategic merge patch (for built-in kinds) and server-side apply merging.

use serde_json::{Map, Value};

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// RFC 6902 JSON patch, all-or-nothing. Like kube-apiserver (evanphx/json-patch), a `test` for
/// `null` succeeds on a missing path. The error flag says whether a `test` op failed.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), (bool, String)> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| (false, e.to_string()))?;
    let mut work = target.clone();
    for op in p.0 {
        if let json_patch::PatchOperation::Test(t) = &op
            && t.value.is_null()
        {
            match work.pointer(t.path.as_str()) {
                None | Some(Value::Null) => continue,
                Some(_) => {
                    return Err((
                        true,
                        format!("testing value {} failed: test failed", t.path),
                    ));
                }
            }
        }
        json_patch::patch(&mut work, std::slice::from_ref(&op)).map_err(|e| {
            let test = matches!(e.kind, json_patch::PatchErrorKind::TestFailed);
            (test, e.to_string())
        })?;
    }
    *target = work;
    Ok(())
}

/// Merge keys of well-known built-in list fields (strategic merge patch and apply).
fn merge_key(field: &str, sample: Option<&Value>) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ownerReferences" => "uid",
        "conditions" => "type",
        "ports" => {
            if sample.is_some_and(|s| s.get("containerPort").is_some()) {
                "containerPort"
            } else {
                "port"
            }
        }
        _ => return None,
    })
}

/// Primitive lists merged as sets by strategic merge patch.
fn merge_primitive(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch with the usual directives.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(patch);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let mut retain: Option<Vec<String>> = None;
    let mut orders: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$setElementOrder/") {
            orders.push((field.to_string(), v.as_array().cloned().unwrap_or_default()));
            continue;
        }
        if k == "$patch" {
            continue;
        }
        if k == "$retainKeys" {
            retain = v.as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            });
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(del)) = (target[field].as_array_mut(), v.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        let t = target.as_object_mut().expect("object");
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(o) => {
                if o.get("$patch").and_then(Value::as_str) == Some("delete") {
                    t.remove(k);
                } else {
                    strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
            Value::Array(items) => {
                let cur = t.entry(k.clone()).or_insert(Value::Array(vec![]));
                merge_list_smp(cur, items, k);
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    if let (Some(keep), Some(t)) = (retain, target.as_object_mut()) {
        t.retain(|k, _| keep.contains(k));
    }
    for (field, order) in orders {
        if let Some(list) = target[field.as_str()].as_array_mut() {
            set_element_order(list, &order);
        }
    }
}

/// `$setElementOrder`: listed elements first, in the given order; others keep their relative order after.
fn set_element_order(list: &mut Vec<Value>, order: &[Value]) {
    let matches = |item: &Value, o: &Value| match o {
        Value::Object(m) => m.iter().all(|(k, v)| &item[k] == v),
        prim => item == prim,
    };
    let mut rest = std::mem::take(list);
    for o in order {
        if let Some(i) = rest.iter().position(|item| matches(item, o)) {
            list.push(rest.remove(i));
        }
    }
    list.extend(rest);
}

fn merge_list_smp(cur: &mut Value, items: &[Value], field: &str) {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *cur = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip_directives)
                .collect(),
        );
        return;
    }
    if merge_primitive(field) {
        let list = cur.as_array_mut();
        match list {
            Some(l) => {
                for i in items {
                    if !l.contains(i) {
                        l.push(i.clone());
                    }
                }
            }
            None => *cur = Value::Array(items.to_vec()),
        }
        return;
    }
    let key = merge_key(field, items.first());
    let (Some(key), Some(list)) = (key, cur.as_array_mut()) else {
        *cur = Value::Array(items.iter().map(strip_directives).collect());
        return;
    };
    if !items.iter().all(Value::is_object) {
        *cur = Value::Array(items.to_vec());
        return;
    }
    for item in items {
        let kv = &item[key];
        let pos = list.iter().position(|e| &e[key] == kv);
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                list.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut list[i], item),
            (None, false) => list.push(strip_directives(item)),
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// List semantics from a structural schema: (`map` keys) or `set`.
fn schema_list(schema: Option<&Value>) -> Option<(String, Vec<String>)> {
    let s = schema?;
    let t = s["x-kubernetes-list-type"].as_str()?;
    let keys = s["x-kubernetes-list-map-keys"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Some((t.to_string(), keys))
}

fn child_schema<'a>(schema: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = schema?;
    if let Some(p) = s["properties"].get(key) {
        return Some(p);
    }
    if s["additionalProperties"].is_object() {
        return Some(&s["additionalProperties"]);
    }
    None
}

/// How a list merges under apply: `map` (by keys), `set` or `atomic`.
fn list_semantics(schema: Option<&Value>, field: &str, items: &[Value]) -> (String, Vec<String>) {
    match schema_list(schema) {
        Some(x) => x,
        None if merge_primitive(field) => ("set".to_string(), vec![]),
        None => match merge_key(field, items.first()) {
            Some(k) if items.iter().all(Value::is_object) => {
                ("map".to_string(), vec![k.to_string()])
            }
            _ => ("atomic".to_string(), vec![]),
        },
    }
}

/// Server-side apply field removal: what the same manager applied before (`prev`) but no longer
/// applies (`now`) is removed from `live`. Ownership by other managers is not tracked.
pub fn apply_remove_stale(
    live: &mut Value,
    prev: &Value,
    now: &Value,
    schema: Option<&Value>,
    field: &str,
) {
    match (prev, live) {
        (Value::Object(p), Value::Object(l)) => {
            for (k, pv) in p {
                let gone = now.get(k).is_none();
                let nv = match (now.get(k), pv) {
                    (Some(nv), _) => nv.clone(),
                    (None, Value::Object(_)) => Value::Object(Map::new()),
                    (None, Value::Array(_)) => Value::Array(vec![]),
                    (None, _) => {
                        l.remove(k);
                        continue;
                    }
                };
                let sub = child_schema(schema, k);
                if let Some(lv) = l.get_mut(k) {
                    let atomic_list = pv.is_array() && {
                        let sample: Vec<Value> = pv
                            .as_array()
                            .into_iter()
                            .flatten()
                            .take(1)
                            .cloned()
                            .collect();
                        list_semantics(sub, k, &sample).0 == "atomic"
                    };
                    if gone && atomic_list {
                        l.remove(k);
                        continue;
                    }
                    apply_remove_stale(lv, pv, &nv, sub, k);
                    let empty = lv.as_object().is_some_and(Map::is_empty)
                        || lv.as_array().is_some_and(Vec::is_empty);
                    if gone && empty {
                        l.remove(k);
                    }
                }
            }
        }
        (Value::Array(p), Value::Array(l)) => {
            let empty = Vec::new();
            let n = now.as_array().unwrap_or(&empty);
            let sample: Vec<Value> = p.iter().chain(n.iter()).take(1).cloned().collect();
            let (ty, keys) = list_semantics(schema, field, &sample);
            let item_schema = schema.map(|s| &s["items"]);
            match ty.as_str() {
                "map" if !keys.is_empty() => {
                    let same = |a: &Value, b: &Value| keys.iter().all(|k| a[k] == b[k]);
                    for pi in p {
                        match n.iter().find(|ni| same(ni, pi)) {
                            None => l.retain(|li| !same(li, pi)),
                            Some(ni) => {
                                if let Some(li) = l.iter_mut().find(|li| same(li, pi)) {
                                    apply_remove_stale(li, pi, ni, item_schema, "");
                                }
                            }
                        }
                    }
                }
                "set" => l.retain(|li| !p.contains(li) || n.contains(li)),
                _ => {}
            }
        }
        _ => {}
    }
}

/// Server-side apply, without field ownership: the applied configuration is merged
/// into the live object (maps recursively, associative lists by key, other lists replaced).
pub fn apply_merge(live: &mut Value, applied: &Value, schema: Option<&Value>, field: &str) {
    match applied {
        Value::Object(p) => {
            if !live.is_object() {
                *live = Value::Object(Map::new());
            }
            for (k, v) in p {
                let t = live.as_object_mut().expect("object");
                if v.is_null() {
                    t.remove(k);
                    continue;
                }
                let sub = child_schema(schema, k);
                apply_merge(t.entry(k.clone()).or_insert(Value::Null), v, sub, k);
            }
        }
        Value::Array(items) => {
            let (ty, keys) = list_semantics(schema, field, items);
            let item_schema = schema.map(|s| &s["items"]);
            match (ty.as_str(), live.as_array_mut()) {
                ("map", Some(list)) if !keys.is_empty() => {
                    for item in items {
                        let pos = list
                            .iter()
                            .position(|e| keys.iter().all(|k| e[k] == item[k]));
                        match pos {
                            Some(i) => apply_merge(&mut list[i], item, item_schema, ""),
                            None => list.push(item.clone()),
                        }
                    }
                }
                ("set", Some(list)) => {
                    for item in items {
                        if !list.contains(item) {
                            list.push(item.clone());
                        }
                    }
                }
                _ => *live = applied.clone(),
            }
        }
        other => *live = other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn smp_merges_containers_by_name_and_strips_directives() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let p = json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b", "image": "z"}, {"name": "a", "$patch": "delete"}]}});
        strategic_merge(&mut t, &p);
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "b", "image": "z"}]}})
        );
    }

    #[test]
    fn smp_null_deletes_and_finalizers_union() {
        let mut t = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]}});
        strategic_merge(
            &mut t,
            &json!({"metadata": {"labels": {"a": null}, "finalizers": ["y"]}}),
        );
        assert_eq!(
            t,
            json!({"metadata": {"labels": {"b": "2"}, "finalizers": ["x", "y"]}})
        );
    }

    #[test]
    fn json_patch_test_null_on_missing_path_and_atomicity() {
        let mut t = json!({"metadata": {"name": "a"}});
        let p = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]);
        json_patch(&mut t, &p).unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["f"]));
        let p = json!([{"op": "remove", "path": "/metadata/finalizers"},
            {"op": "test", "path": "/metadata/name", "value": "b"}]);
        assert!(json_patch(&mut t, &p).unwrap_err().0);
        assert_eq!(
            t["metadata"]["finalizers"],
            json!(["f"]),
            "nothing applied when a test fails"
        );
    }

    #[test]
    fn apply_removes_what_the_manager_no_longer_applies() {
        let prev = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"]},
            "spec": {"keep": 1, "drop": 2, "containers": [{"name": "c1", "image": "i", "args": ["a"]}, {"name": "c2", "image": "j"}]}});
        let now = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"keep": 1, "containers": [{"name": "c1", "image": "i"}]}});
        let mut live = json!({"metadata": {"labels": {"a": "1", "b": "2", "other": "3"}, "finalizers": ["x", "y", "z"]},
            "spec": {"keep": 1, "drop": 2, "foreign": 3, "containers": [{"name": "c1", "image": "i", "args": ["a"]}, {"name": "c2", "image": "j"}]}});
        apply_remove_stale(&mut live, &prev, &now, None, "");
        assert_eq!(
            live,
            json!({"metadata": {"labels": {"a": "1", "other": "3"}, "finalizers": ["x", "z"]},
            "spec": {"keep": 1, "foreign": 3, "containers": [{"name": "c1", "image": "i"}]}})
        );
    }

    #[test]
    fn apply_merges_list_map_from_schema() {
        let schema = json!({"type": "object", "properties": {"conditions": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}}}});
        let mut live = json!({"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]});
        apply_merge(
            &mut live,
            &json!({"conditions": [{"type": "B", "status": "True"}]}),
            Some(&schema),
            "",
        );
        assert_eq!(
            live,
            json!({"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]})
        );
    }
}

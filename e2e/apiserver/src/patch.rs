//! Patch flavours: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch
//! (for built-in kinds). Server-side apply is in [`crate::managed`].

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
pub(crate) fn merge_key(field: &str, sample: Option<&Value>) -> Option<&'static str> {
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
}

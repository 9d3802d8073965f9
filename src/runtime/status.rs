//! The status write: a merge diff of the object's status against the desired one.

use serde_json::Value;

/// The RFC 7386 merge patch that turns `from` into `to`, or `None` when they are equal.
pub(super) fn merge_diff(from: &Value, to: &Value) -> Option<Value> {
    if from == to {
        return None;
    }
    match (from, to) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in new {
                let old_value = old.get(key).unwrap_or(&Value::Null);
                if let Some(d) = merge_diff(old_value, value) {
                    patch.insert(key.clone(), d);
                }
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Some(Value::Object(patch))
        }
        // A merge patch cannot express "this object, exactly": it would merge into the old one.
        // Objects replacing non-objects are sent whole, which is what we want.
        _ => Some(to.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_values_need_no_patch() {
        assert_eq!(merge_diff(&json!({"a": 1}), &json!({"a": 1})), None);
    }

    #[test]
    fn changed_and_removed_fields_are_patched() {
        let from =
            json!({"phase": "Draining", "drainStatus": {"startedAt": "x"}, "objectCount": 5});
        let to = json!({"phase": "Ready", "objectCount": 5});
        assert_eq!(
            merge_diff(&from, &to),
            Some(json!({"phase": "Ready", "drainStatus": null}))
        );
    }

    #[test]
    fn nested_changes_stay_minimal_and_arrays_are_replaced() {
        let from = json!({"drainStatus": {"a": 1, "b": 2}, "conditions": [{"type": "Ready"}]});
        let to = json!({"drainStatus": {"a": 1, "b": 3}, "conditions": []});
        assert_eq!(
            merge_diff(&from, &to),
            Some(json!({"drainStatus": {"b": 3}, "conditions": []}))
        );
    }

    #[test]
    fn applying_the_diff_gives_the_target() {
        let from = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        let to = json!({"a": {"c": [3]}, "e": {"f": true}});
        let mut patched = from.clone();
        json_patch::merge(&mut patched, &merge_diff(&from, &to).unwrap());
        assert_eq!(patched, to);
    }
}

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Writes `status` through the status subresource if it differs from `obj`'s current status.
///
/// Sends a JSON merge patch that carries changed fields and explicit `null`s for removed ones,
/// so fields dropped from the status (such as a finished drain) really disappear, and a patch
/// computed from a slightly stale cache still applies. Returns whether it wrote.
pub(super) async fn patch_status<K, S>(
    api: &Api<K>,
    obj: &K,
    status: &S,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    let current = serde_json::to_value(obj)
        .ok()
        .and_then(|v| v.get("status").cloned())
        .unwrap_or(Value::Null);
    let desired = serde_json::to_value(status).unwrap_or(Value::Null);
    let Some(diff) = merge_diff(&current, &desired) else {
        return Ok(false);
    };
    let patch = serde_json::json!({ "status": diff });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(true)
}

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

//! One event store, two views: core/v1 Event (stored form) and events.k8s.io/v1 Event.

use serde_json::{Map, Value, json};

fn set(m: &mut Map<String, Value>, k: &str, v: &Value) {
    if !v.is_null() {
        m.insert(k.to_string(), v.clone());
    }
}

/// core/v1 (stored) → events.k8s.io/v1.
pub fn core_to_v1(e: &Value) -> Value {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    m.insert("kind".into(), json!("Event"));
    set(&mut m, "metadata", &e["metadata"]);
    set(&mut m, "eventTime", &e["eventTime"]);
    set(&mut m, "series", &e["series"]);
    let rc = if e["reportingComponent"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        &e["reportingComponent"]
    } else {
        &e["source"]["component"]
    };
    set(&mut m, "reportingController", rc);
    set(&mut m, "reportingInstance", &e["reportingInstance"]);
    set(&mut m, "action", &e["action"]);
    set(&mut m, "reason", &e["reason"]);
    set(&mut m, "regarding", &e["involvedObject"]);
    set(&mut m, "related", &e["related"]);
    set(&mut m, "note", &e["message"]);
    set(&mut m, "type", &e["type"]);
    set(&mut m, "deprecatedSource", &e["source"]);
    set(&mut m, "deprecatedFirstTimestamp", &e["firstTimestamp"]);
    set(&mut m, "deprecatedLastTimestamp", &e["lastTimestamp"]);
    if e["count"].as_i64().is_some_and(|c| c > 0) {
        set(&mut m, "deprecatedCount", &e["count"]);
    }
    Value::Object(m)
}

/// events.k8s.io/v1 → core/v1 (stored form).
pub fn v1_to_core(e: &Value) -> Value {
    let mut m = Map::new();
    m.insert("apiVersion".into(), json!("v1"));
    m.insert("kind".into(), json!("Event"));
    set(&mut m, "metadata", &e["metadata"]);
    set(&mut m, "eventTime", &e["eventTime"]);
    set(&mut m, "series", &e["series"]);
    set(&mut m, "reportingComponent", &e["reportingController"]);
    set(&mut m, "reportingInstance", &e["reportingInstance"]);
    set(&mut m, "action", &e["action"]);
    set(&mut m, "reason", &e["reason"]);
    set(&mut m, "involvedObject", &e["regarding"]);
    set(&mut m, "related", &e["related"]);
    set(&mut m, "message", &e["note"]);
    set(&mut m, "type", &e["type"]);
    let mut source = e["deprecatedSource"].clone();
    if source["component"].as_str().is_none_or(str::is_empty)
        && e["reportingController"].is_string()
    {
        source["component"] = e["reportingController"].clone();
    }
    set(&mut m, "source", &source);
    let first = if e["deprecatedFirstTimestamp"].is_string() {
        &e["deprecatedFirstTimestamp"]
    } else {
        &Value::Null
    };
    set(&mut m, "firstTimestamp", first);
    let last = if e["series"]["lastObservedTime"].is_string() {
        e["series"]["lastObservedTime"].clone()
    } else {
        e["deprecatedLastTimestamp"].clone()
    };
    set(&mut m, "lastTimestamp", &last);
    let count = if e["series"]["count"].is_number() {
        &e["series"]["count"]
    } else {
        &e["deprecatedCount"]
    };
    set(&mut m, "count", count);
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_series() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "d"},
            "eventTime": "2024-01-01T00:00:00.000000Z", "reportingController": "keeper", "reportingInstance": "k-1",
            "action": "Reconcile", "reason": "Created", "note": "hello", "type": "Normal",
            "regarding": {"kind": "S3Bucket", "name": "b", "namespace": "d"},
            "series": {"count": 2, "lastObservedTime": "2024-01-01T00:01:00.000000Z"}});
        let core = v1_to_core(&v1);
        assert_eq!(core["message"], "hello");
        assert_eq!(core["involvedObject"]["name"], "b");
        assert_eq!(core["source"]["component"], "keeper");
        assert_eq!(core["count"], 2);
        assert_eq!(core["lastTimestamp"], "2024-01-01T00:01:00.000000Z");
        let back = core_to_v1(&core);
        assert_eq!(back["note"], "hello");
        assert_eq!(back["regarding"], v1["regarding"]);
        assert_eq!(back["series"], v1["series"]);
        assert_eq!(back["reportingController"], "keeper");
    }
}

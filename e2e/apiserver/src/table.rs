//! meta.k8s.io/v1 Table rendering (server-side printing).

use crate::resources::{Column, ResDef};
use serde_json::{Value, json};

/// Evaluate the JSONPath subset used by printer columns; returns the first match.
pub fn jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let p = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim();
    let mut cur: Vec<Value> = vec![obj.clone()];
    let mut rest = p.strip_prefix('$').unwrap_or(p);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            rest = &r[end..];
            if key.is_empty() {
                continue;
            }
            cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = find_close(r)?;
            let inner = r[..end].trim();
            rest = &r[end + 1..];
            if inner == "*" {
                cur = cur
                    .iter()
                    .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                    .collect();
            } else if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                let (lhs, rhs, neg) = if let Some((l, r)) = f.split_once("!=") {
                    (l, r, true)
                } else if let Some((l, r)) = f.split_once("==") {
                    (l, r, false)
                } else {
                    return None;
                };
                let lhs = lhs.trim().strip_prefix('@')?.to_string();
                let rhs = rhs
                    .trim()
                    .trim_matches(|c| c == '"' || c == '\'')
                    .to_string();
                cur = cur
                    .iter()
                    .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                    .filter(|item| {
                        let got = jsonpath(item, &lhs);
                        let s = match got {
                            Some(Value::String(s)) => s,
                            Some(other) => other.to_string(),
                            None => return neg,
                        };
                        (s == rhs) != neg
                    })
                    .collect();
            } else if let Ok(i) = inner.parse::<i64>() {
                cur = cur
                    .iter()
                    .filter_map(|v| {
                        let a = v.as_array()?;
                        let idx = if i < 0 { a.len() as i64 + i } else { i };
                        a.get(usize::try_from(idx).ok()?).cloned()
                    })
                    .collect();
            } else {
                let key = inner.trim_matches(|c| c == '"' || c == '\'');
                cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
            }
        } else {
            return None;
        }
    }
    cur.into_iter().next()
}

fn find_close(s: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ']' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// kube's duration.HumanDuration.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        return if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        return if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    let d = h / 24;
    if h < 24 * 8 {
        return if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{d}d");
    }
    let y = d / 365;
    if y < 8 {
        format!("{y}y{}d", d % 365)
    } else {
        format!("{y}y")
    }
}

fn age(ts: &Value) -> Value {
    match ts.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) {
        Some(t) => json!(human_duration(
            jiff::Timestamp::now().as_second() - t.as_second()
        )),
        None => json!("<unknown>"),
    }
}

fn name_col() -> Value {
    json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0})
}

fn age_col() -> Value {
    json!({"name": "Age", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0})
}

fn cell(obj: &Value, c: &Column) -> Value {
    match c.json_path.as_str() {
        "#datacount" => {
            let n = obj["data"].as_object().map_or(0, |m| m.len())
                + obj["binaryData"].as_object().map_or(0, |m| m.len());
            json!(n)
        }
        "#involved" => {
            let io = &obj["involvedObject"];
            json!(format!(
                "{}/{}",
                io["kind"].as_str().unwrap_or_default().to_lowercase(),
                io["name"].as_str().unwrap_or_default()
            ))
        }
        "#created" => obj["metadata"]["creationTimestamp"].clone(),
        "#lastseen" => {
            let ts = [
                &obj["lastTimestamp"],
                &obj["series"]["lastObservedTime"],
                &obj["eventTime"],
                &obj["firstTimestamp"],
            ]
            .into_iter()
            .find(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned()
            .unwrap_or(Value::Null);
            age(&ts)
        }
        "#deployready" => json!(format!(
            "{}/{}",
            obj["status"]["readyReplicas"].as_i64().unwrap_or(0),
            obj["spec"]["replicas"].as_i64().unwrap_or(1)
        )),
        path => {
            let v = jsonpath(obj, path);
            match (c.type_.as_str(), v) {
                (_, None) => Value::Null,
                ("date", Some(v)) => age(&v),
                ("integer" | "number" | "boolean", Some(v)) => v,
                (_, Some(Value::String(s))) => json!(s),
                (_, Some(other)) => json!(other.to_string()),
            }
        }
    }
}

/// Build a Table for `objs` (already in the served view).
pub fn table(
    def: &ResDef,
    objs: &[Value],
    include: &str,
    with_columns: bool,
    list_meta: Value,
) -> Value {
    // Events print their name only in wide output, last (like kube's event printer).
    let name_last = def.plural == "events";
    let mut cols = if name_last { vec![] } else { vec![name_col()] };
    for c in &def.columns {
        cols.push(json!({"name": c.name, "type": if c.type_ == "date" { "date" } else { c.type_.as_str() },
            "format": c.format, "description": c.description, "priority": c.priority}));
    }
    let has_age = def.columns.iter().any(|c| {
        c.name.eq_ignore_ascii_case("age")
            || c.json_path == "#lastseen"
            || c.json_path == "#created"
    });
    if !has_age {
        cols.push(age_col());
    }
    if name_last {
        let mut n = name_col();
        n["priority"] = json!(1);
        cols.push(n);
    }
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut cells = if name_last { vec![] } else { vec![o["metadata"]["name"].clone()] };
            for c in &def.columns {
                cells.push(cell(o, c));
            }
            if !has_age {
                cells.push(age(&o["metadata"]["creationTimestamp"]));
            }
            if name_last {
                cells.push(o["metadata"]["name"].clone());
            }
            let mut row = json!({"cells": cells});
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
                }
            }
            row
        })
        .collect();
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows});
    if with_columns {
        t["columnDefinitions"] = json!(cols);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let o = json!({"status": {"phase": "Ready", "conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]},
            "spec": {"items": [{"b": 1}]}});
        assert_eq!(jsonpath(&o, ".status.phase"), Some(json!("Ready")));
        assert_eq!(jsonpath(&o, ".spec.items[0].b"), Some(json!(1)));
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(jsonpath(&o, "{.status.missing}"), None);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(130), "2m10s");
        assert_eq!(human_duration(3600 * 3), "3h");
        assert_eq!(human_duration(86400 * 3 + 3600), "3d1h");
    }
}

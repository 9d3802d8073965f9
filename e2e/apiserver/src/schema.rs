//! Structural openAPIV3Schema handling for custom resources: pruning,
//! defaulting and validation, with kube-apiserver's error wording.

use crate::error::{Cause, render_value};
use regex::Regex;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn preserves(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
}

/// Drop fields the schema does not know; record their paths in `unknown`.
pub fn prune(schema: &Value, v: &mut Value, path: &str, unknown: &mut Vec<String>) {
    let root = path.is_empty();
    match v {
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            let addl = &schema["additionalProperties"];
            let embedded = schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
            let keep_all = preserves(schema) || addl.as_bool() == Some(true) || addl.is_object();
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if (root || embedded) && (k == "apiVersion" || k == "kind" || k == "metadata") {
                    continue;
                }
                let p = join(path, &k);
                match props.and_then(|p| p.get(&k)) {
                    Some(ps) => prune(ps, map.get_mut(&k).expect("key"), &p, unknown),
                    None if addl.is_object() => {
                        prune(addl, map.get_mut(&k).expect("key"), &p, unknown)
                    }
                    None if keep_all => {}
                    None => {
                        map.remove(&k);
                        unknown.push(p);
                    }
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (i, it) in items.iter_mut().enumerate() {
                prune(&schema["items"], it, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Apply schema `default`s (top-down, like the apiextensions defaulter).
pub fn default(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, ps) in props {
                    let missing = match map.get(k) {
                        None => true,
                        Some(Value::Null) => ps["nullable"].as_bool() != Some(true),
                        _ => false,
                    };
                    if missing && !ps["default"].is_null() {
                        map.insert(k.clone(), ps["default"].clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        default(ps, child);
                    }
                }
            }
            if schema["additionalProperties"].is_object() {
                for child in map.values_mut() {
                    default(&schema["additionalProperties"], child);
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for it in items {
                default(&schema["items"], it);
            }
        }
        _ => {}
    }
}

fn regex(p: &str) -> Option<Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();
    let mut c = CACHE.get_or_init(Default::default).lock().ok()?;
    c.entry(p.to_string())
        .or_insert_with(|| Regex::new(p).ok())
        .clone()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_error(path: &str, v: &Value, want: &str) -> Cause {
    let got = type_name(v);
    Cause::new(
        "FieldValueTypeInvalid",
        path,
        format!("Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""),
    )
}

fn valid_against(schema: &Value, v: &Value, path: &str) -> bool {
    let mut e = Vec::new();
    validate(schema, v, path, &mut e);
    e.is_empty()
}

/// `allOf`, `anyOf`, `oneOf` and `not` (value validations in structural schemas).
fn junctors(schema: &Value, v: &Value, path: &str, errs: &mut Vec<Cause>) {
    let shown = format!("\"{}\"", type_name(v));
    let invalid = |msg: String| {
        Cause::new(
            "FieldValueInvalid",
            path,
            format!("Invalid value: {shown}: {msg}"),
        )
    };
    let at = if path.is_empty() {
        "body".to_string()
    } else {
        format!("{path} in body")
    };
    if let Some(all) = schema["allOf"].as_array() {
        for s in all {
            validate(s, v, path, errs);
        }
    }
    if let Some(any) = schema["anyOf"].as_array()
        && !any.iter().any(|s| valid_against(s, v, path))
    {
        errs.push(invalid(format!(
            "{at} must validate at least one schema (anyOf)"
        )));
    }
    if let Some(one) = schema["oneOf"].as_array() {
        let n = one.iter().filter(|s| valid_against(s, v, path)).count();
        if n == 0 {
            errs.push(invalid(format!(
                "{at} must validate one and only one schema (oneOf). Found none valid"
            )));
        } else if n > 1 {
            errs.push(invalid(format!(
                "{at} must validate one and only one schema (oneOf). Found {n} valid alternatives"
            )));
        }
    }
    if schema["not"].is_object() && valid_against(&schema["not"], v, path) {
        errs.push(invalid(format!("{at} must not validate the schema (not)")));
    }
}

/// `x-kubernetes-list-type: set|map` forbid duplicates (of items, or of map keys).
fn list_uniqueness(schema: &Value, items: &[Value], path: &str, errs: &mut Vec<Cause>) {
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let ident = |v: &Value| -> Value {
        match schema["x-kubernetes-list-type"].as_str() {
            Some("map") if !keys.is_empty() => {
                Value::Array(keys.iter().map(|k| v[*k].clone()).collect())
            }
            _ => v.clone(),
        }
    };
    if !matches!(
        schema["x-kubernetes-list-type"].as_str(),
        Some("set" | "map")
    ) {
        return;
    }
    for (i, it) in items.iter().enumerate() {
        let id = ident(it);
        if items[..i].iter().any(|prev| ident(prev) == id) {
            let shown = match &id {
                Value::Array(a) if keys.len() == 1 => render_value(&a[0]),
                other => render_value(other),
            };
            errs.push(Cause::new(
                "FieldValueDuplicate",
                format!("{path}[{i}]"),
                format!("Duplicate value: {shown}"),
            ));
        }
    }
}

/// Validate a value against a structural schema, appending causes.
pub fn validate(schema: &Value, v: &Value, path: &str, errs: &mut Vec<Cause>) {
    let root = path.is_empty();
    if v.is_null() {
        if schema["nullable"].as_bool() == Some(true) || schema.get("type").is_none() && !root {
            return;
        }
        if let Some(t) = schema["type"].as_str() {
            errs.push(type_error(path, v, t));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"].as_bool() == Some(true) {
        if !(is_integer(v) || v.is_string()) {
            errs.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: \"{}\": {path} in body must be of type integer,string: \"{}\"",
                    type_name(v),
                    type_name(v)
                ),
            ));
            return;
        }
    } else if let Some(t) = schema["type"].as_str() {
        let ok = match t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => is_integer(v),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            _ => true,
        };
        if !ok {
            errs.push(type_error(path, v, t));
            return;
        }
    }
    junctors(schema, v, path, errs);
    if let Some(en) = schema["enum"].as_array()
        && !en.contains(v)
    {
        let supported: Vec<String> = en.iter().map(render_value).collect();
        errs.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                render_value(v),
                supported.join(", ")
            ),
        ));
    }
    match v {
        Value::String(s) => {
            if let Some(p) = schema["pattern"].as_str()
                && let Some(re) = regex(p)
                && !re.is_match(s)
            {
                errs.push(Cause::invalid(
                    path,
                    v,
                    format!("{path} in body should match '{p}'"),
                ));
            }
            let n = s.chars().count() as u64;
            if let Some(min) = schema["minLength"].as_u64()
                && n < min
            {
                errs.push(Cause::invalid(
                    path,
                    v,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(max) = schema["maxLength"].as_u64()
                && n > max
            {
                errs.push(Cause::new(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
        }
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or_default();
            if let Some(min) = schema["minimum"].as_f64() {
                let excl = schema["exclusiveMinimum"].as_bool() == Some(true);
                if f < min || (excl && f == min) {
                    let rel = if excl {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    errs.push(Cause::invalid(
                        path,
                        v,
                        format!("{path} in body should be {rel} {}", schema["minimum"]),
                    ));
                }
            }
            if let Some(max) = schema["maximum"].as_f64() {
                let excl = schema["exclusiveMaximum"].as_bool() == Some(true);
                if f > max || (excl && f == max) {
                    let rel = if excl {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    errs.push(Cause::invalid(
                        path,
                        v,
                        format!("{path} in body should be {rel} {}", schema["maximum"]),
                    ));
                }
            }
            let (lo, hi) = match schema["format"].as_str() {
                Some("int32") => (i32::MIN as f64, i32::MAX as f64),
                Some("int64") => (i64::MIN as f64, i64::MAX as f64),
                _ => (f64::MIN, f64::MAX),
            };
            if f < lo || f > hi {
                errs.push(Cause::invalid(
                    path,
                    v,
                    format!(
                        "{path} in body must be of type {}",
                        schema["format"].as_str().unwrap_or_default()
                    ),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(min) = schema["minItems"].as_u64()
                && n < min
            {
                errs.push(Cause::invalid(
                    path,
                    &Value::from(n),
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema["maxItems"].as_u64()
                && n > max
            {
                errs.push(Cause::new(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if schema["items"].is_object() {
                for (i, it) in items.iter().enumerate() {
                    validate(&schema["items"], it, &format!("{path}[{i}]"), errs);
                }
            }
            list_uniqueness(schema, items, path, errs);
        }
        Value::Object(map) => {
            for r in schema["required"].as_array().cloned().unwrap_or_default() {
                if let Some(r) = r.as_str()
                    && !(root && r == "metadata")
                    && map.get(r).is_none_or(|x| {
                        x.is_null() && schema["properties"][r]["nullable"].as_bool() != Some(true)
                    })
                {
                    errs.push(Cause::required(join(path, r)));
                }
            }
            for (k, child) in map {
                if root && (k == "apiVersion" || k == "kind" || k == "metadata") {
                    continue;
                }
                if let Some(ps) = schema["properties"].get(k) {
                    validate(ps, child, &join(path, k), errs);
                } else if schema["additionalProperties"].is_object() {
                    validate(&schema["additionalProperties"], child, &join(path, k), errs);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
            "count": {"type": "integer", "format": "int32", "minimum": 1, "default": 3},
            "mode": {"type": "string", "enum": ["A", "B"]},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "ios": {"x-kubernetes-int-or-string": true}}}}})
    }

    #[test]
    fn validates_with_kube_wording() {
        let mut errs = vec![];
        let v = json!({"spec": {"name": "ABC", "count": 0, "mode": "C", "ios": true}});
        validate(&schema(), &v, "", &mut errs);
        let msgs: Vec<String> = errs
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert!(
            msgs.contains(
                &"spec.name: Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'"
                    .to_string()
            ),
            "{msgs:?}"
        );
        assert!(msgs.contains(&"spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1".to_string()), "{msgs:?}");
        assert!(
            msgs.contains(
                &"spec.mode: Unsupported value: \"C\": supported values: \"A\", \"B\"".to_string()
            ),
            "{msgs:?}"
        );
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("spec.ios: Invalid value: \"boolean\"")),
            "{msgs:?}"
        );
        let mut errs = vec![];
        validate(&schema(), &json!({"spec": {}}), "", &mut errs);
        assert_eq!(errs[0].field, "spec.name");
        assert_eq!(errs[0].reason, "FieldValueRequired");
    }

    #[test]
    fn list_types_forbid_duplicates() {
        let s = json!({"type": "object", "properties": {
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                "items": {"type": "object", "properties": {"type": {"type": "string"}}}}}});
        let mut e = vec![];
        validate(
            &s,
            &json!({"tags": ["a", "b", "a"], "conds": [{"type": "R"}, {"type": "R"}]}),
            "",
            &mut e,
        );
        // Property order depends on serde_json's `preserve_order`, which the workspace may unify in.
        let mut msgs: Vec<String> = e
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        msgs.sort();
        assert_eq!(
            msgs,
            vec![
                "conds[1]: Duplicate value: \"R\"",
                "tags[2]: Duplicate value: \"a\""
            ]
        );
    }

    #[test]
    fn junctors() {
        let s = json!({"type": "object", "properties": {"src": {"type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "n": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
            "p": {"type": "string", "not": {"enum": ["forbidden"]}}}});
        let errs = |v: Value| {
            let mut e = vec![];
            validate(&s, &v, "", &mut e);
            e.iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect::<Vec<_>>()
        };
        assert!(errs(json!({"src": {"a": "x"}, "n": 3, "p": "ok"})).is_empty());
        assert_eq!(
            errs(json!({"src": {"a": "x", "b": "y"}})),
            vec![
                "src: Invalid value: \"object\": src in body must validate one and only one schema (oneOf). Found 2 valid alternatives"
            ]
        );
        assert_eq!(
            errs(json!({"src": {}})),
            vec![
                "src: Invalid value: \"object\": src in body must validate one and only one schema (oneOf). Found none valid"
            ]
        );
        assert_eq!(
            errs(json!({"p": "forbidden"})),
            vec!["p: Invalid value: \"string\": p in body must not validate the schema (not)"]
        );
    }

    #[test]
    fn prunes_and_defaults() {
        let mut v = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "extra": 1,
            "spec": {"name": "a", "junk": 2, "free": {"anything": {"goes": 1}}}});
        let mut unknown = vec![];
        prune(&schema(), &mut v, "", &mut unknown);
        default(&schema(), &mut v);
        assert_eq!(unknown, vec!["extra".to_string(), "spec.junk".to_string()]);
        assert_eq!(
            v["spec"],
            json!({"name": "a", "count": 3, "free": {"anything": {"goes": 1}}})
        );
        assert_eq!(v["metadata"]["name"], "n");
    }
}

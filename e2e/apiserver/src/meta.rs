//! ObjectMeta validation shared by every kind: labels, annotations, finalizers, ownerReferences,
//! with apimachinery's messages.

use crate::error::Cause;
use regex::Regex;
use serde_json::{Value, json};
use std::sync::OnceLock;

const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const DNS1123_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("regex"))
}

fn name_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, &format!("^{NAME_FMT}$"))
}

fn subdomain_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, DNS1123_SUBDOMAIN)
}

fn value_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, &format!("^{VALUE_FMT}$"))
}

/// Problems with a qualified name (`[prefix/]name`), as apimachinery words them.
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".to_string());
        } else if p.len() > 253 || !subdomain_re().is_match(p) {
            errs.push("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string());
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !name_re().is_match(name) || name.contains('/') {
        errs.push(format!("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}')"));
    }
    errs
}

/// (metadata field, shape check, expected shape).
type Shape = (&'static str, fn(&Value) -> bool, &'static str);

/// Validate labels, annotations, finalizers and ownerReferences of an object.
pub fn validate(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = &obj["metadata"];
    // Shapes first: anything else would not decode into ObjectMeta.
    let shapes: [Shape; 4] = [
        (
            "labels",
            |v| {
                v.as_object()
                    .is_some_and(|m| m.values().all(Value::is_string))
            },
            "a map of strings",
        ),
        (
            "annotations",
            |v| {
                v.as_object()
                    .is_some_and(|m| m.values().all(Value::is_string))
            },
            "a map of strings",
        ),
        (
            "finalizers",
            |v| v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "a list of strings",
        ),
        (
            "ownerReferences",
            |v| v.as_array().is_some_and(|a| a.iter().all(Value::is_object)),
            "a list of objects",
        ),
    ];
    for (field, ok, want) in shapes {
        let v = &meta[field];
        if !v.is_null() && !ok(v) {
            causes.push(Cause::new(
                "FieldValueTypeInvalid",
                format!("metadata.{field}"),
                format!(
                    "Invalid value: {}: must be {want}",
                    crate::error::render_value(v)
                ),
            ));
        }
    }
    if !causes.is_empty() {
        return causes;
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (k, v) in labels {
            for e in qualified_name_errors(k) {
                causes.push(Cause::invalid("metadata.labels", &json!(k), e));
            }
            match v.as_str() {
                Some(s) if s.len() > 63 => causes.push(Cause::invalid("metadata.labels", v, "must be no more than 63 characters")),
                Some(s) if !value_re().is_match(s) => causes.push(Cause::invalid(
                    "metadata.labels",
                    v,
                    format!("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '{VALUE_FMT}')"),
                )),
                Some(_) => {}
                None => causes.push(Cause::invalid("metadata.labels", v, "label values must be strings")),
            }
        }
    }
    if let Some(ann) = meta["annotations"].as_object() {
        let mut total = 0usize;
        for (k, v) in ann {
            for e in qualified_name_errors(&k.to_lowercase()) {
                causes.push(Cause::invalid("metadata.annotations", &json!(k), e));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > 256 * 1024 {
            causes.push(Cause::new(
                "FieldValueTooLong",
                "metadata.annotations",
                "Too long: must have at most 262144 bytes",
            ));
        }
    }
    for (i, f) in meta["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let s = f.as_str().unwrap_or_default();
        for e in qualified_name_errors(s) {
            causes.push(Cause::invalid(format!("metadata.finalizers[{i}]"), f, e));
        }
    }
    for (i, r) in meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["apiVersion", "kind", "name", "uid"] {
            if r[field].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::invalid(
                    format!("metadata.ownerReferences[{i}].{field}"),
                    &r[field],
                    format!("{field} must not be empty"),
                ));
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_finalizers() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "keeper", "empty": ""}, "finalizers": ["keeper.dev/cleanup", "kubernetes"]}});
        assert!(validate(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"bad key": "x", "k": "has space", "long": "a".repeat(64)}, "finalizers": ["Bad/Name"]}});
        let causes = validate(&bad);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "metadata.labels",
                "metadata.labels",
                "metadata.labels",
                "metadata.finalizers[0]"
            ],
            "{causes:?}"
        );
        assert!(
            causes[1]
                .message
                .starts_with("Invalid value: \"has space\": a valid label must be an empty string"),
            "{}",
            causes[1].message
        );
    }
}

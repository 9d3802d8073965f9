//! CEL validation rules of CRD schemas (`x-kubernetes-validations`), evaluated like
//! kube-apiserver's apiextensions validator, with the `cel` crate.
//!
//! At every schema node that holds a value, each rule runs with `self` bound to that value.
//! Transition rules (rules that reference `oldSelf`) run only on update, and only where the old
//! object has a value at the same place (object properties, map values, and items of
//! `x-kubernetes-list-type: map` lists matched by their keys), with `oldSelf` bound to it.
//! Failures become `FieldValueInvalid` causes (or the rule's `reason`) at the node's path (plus
//! the rule's `fieldPath`), with kube's wording: `Invalid value: "<schema type>": <message>`, where
//! the message is the rule's `messageExpression`, its `message`, or `failed rule: <rule>`. Rules
//! that fail to compile or evaluate are causes too.
//!
//! Deviations: no static type checking and no cost limits; `optionalOldSelf` is not supported
//! (such rules are skipped on create, like other transition rules); strings with a `format`
//! (`date-time`, `duration`, `byte`) stay strings; only the standard library and the `strings`
//! extension are available (no Kubernetes libraries such as `quantity`, `url` or `ip`).

use crate::error::Cause;
use ::cel::objects::{Key, Map};
use ::cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// kube-apiserver's cause when type errors keep the rules from running.
const NOT_CHECKED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

struct Compiled {
    program: Result<Program, String>,
    transition: bool,
}

thread_local! {
    static ENV: Arc<Env> = Arc::new(env());
    static PROGRAMS: RefCell<HashMap<String, Rc<Compiled>>> = RefCell::new(HashMap::new());
}

fn env() -> Env {
    let mut env = Env::stdlib();
    // The strings extension only declares functions; it cannot conflict with the standard library.
    let _ = env.add_extension(::cel::extensions::strings);
    env
}

fn compile(rule: &str) -> Rc<Compiled> {
    PROGRAMS.with(|p| {
        p.borrow_mut()
            .entry(rule.to_string())
            .or_insert_with(|| {
                let program = ENV.with(|env| env.compile(rule)).map_err(|e| e.to_string());
                let transition = program
                    .as_ref()
                    .is_ok_and(|p| p.references().has_variable("oldSelf"));
                Rc::new(Compiled {
                    program,
                    transition,
                })
            })
            .clone()
    })
}

/// Evaluate every rule of `schema` against `new` (and `old` on update), appending causes to
/// `errs`, which holds structural validation's causes: type errors among them keep the rules
/// from running, as in kube-apiserver.
pub fn validate(schema: &Value, new: &Value, old: Option<&Value>, errs: &mut Vec<Cause>) {
    if errs.iter().any(|c| c.reason == "FieldValueTypeInvalid") {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "<nil>",
            format!("Invalid value: \"null\": {NOT_CHECKED}"),
        ));
        return;
    }
    walk(schema, new, old, "", true, errs);
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(
    schema: &Value,
    new: &Value,
    old: Option<&Value>,
    path: &str,
    root: bool,
    errs: &mut Vec<Cause>,
) {
    if new.is_null() || !schema.is_object() {
        return;
    }
    if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
        let this = to_cel(schema, new, root);
        let that = old.map(|o| to_cel(schema, o, root));
        // Validation ratcheting: an unchanged value keeps passing rules that do not compare it
        // with its old self.
        let unchanged = old == Some(new);
        for rule in rules {
            check(rule, schema, &this, that.as_ref(), unchanged, path, errs);
        }
    }
    let embedded = root || schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
    match new {
        Value::Object(map) => {
            for (k, child) in map {
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let s = match schema["properties"].get(k) {
                    Some(s) => s,
                    None if schema["additionalProperties"].is_object() => {
                        &schema["additionalProperties"]
                    }
                    None => continue,
                };
                let prev = old.and_then(|o| o.get(k));
                walk(s, child, prev, &join(path, k), false, errs);
            }
        }
        Value::Array(items) => {
            let s = &schema["items"];
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let map_list = schema["x-kubernetes-list-type"].as_str() == Some("map");
            for (i, it) in items.iter().enumerate() {
                let prev = old
                    .and_then(Value::as_array)
                    .filter(|_| map_list && !keys.is_empty())
                    .and_then(|olds| {
                        olds.iter()
                            .find(|o| keys.iter().all(|k| o.get(*k) == it.get(*k)))
                    });
                walk(s, it, prev, &format!("{path}[{i}]"), false, errs);
            }
        }
        _ => {}
    }
}

/// Convert a JSON value to CEL as kube does: integers are `int`, `type: number` is `double`, and
/// the root (or an embedded resource) shows only `name` and `generateName` of its metadata.
fn to_cel(schema: &Value, v: &Value, embedded: bool) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Number(n) => match (schema["type"].as_str(), n.as_i64(), n.as_u64()) {
            (Some("number"), _, _) => Cel::Float(n.as_f64().unwrap_or_default()),
            (_, Some(i), _) => Cel::Int(i),
            (_, None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or_default()),
        },
        Value::Array(items) => Cel::List(Arc::new(
            items
                .iter()
                .map(|it| to_cel(&schema["items"], it, false))
                .collect(),
        )),
        Value::Object(map) => {
            let embedded =
                embedded || schema["x-kubernetes-embedded-resource"].as_bool() == Some(true);
            let mut out = HashMap::new();
            for (k, child) in map {
                let value = if embedded && k == "metadata" {
                    let mut meta = HashMap::new();
                    for f in ["name", "generateName"] {
                        if let Some(s) = child[f].as_str() {
                            meta.insert(Key::from(f), Cel::String(Arc::new(s.to_string())));
                        }
                    }
                    Cel::Map(Map {
                        map: Arc::new(meta),
                    })
                } else {
                    let s = match schema["properties"].get(k) {
                        Some(s) => s,
                        None => &schema["additionalProperties"],
                    };
                    to_cel(s, child, false)
                };
                out.insert(Key::from(k.as_str()), value);
            }
            Cel::Map(Map { map: Arc::new(out) })
        }
    }
}

fn check(
    rule: &Value,
    schema: &Value,
    this: &Cel,
    that: Option<&Cel>,
    unchanged: bool,
    path: &str,
    errs: &mut Vec<Cause>,
) {
    let text = rule["rule"].as_str().unwrap_or_default();
    let message = rule["message"].as_str().map(str::trim).unwrap_or_default();
    let shown = if message.is_empty() {
        text.trim()
    } else {
        message
    };
    // kube's `<nil>` field path is the root.
    let at = if path.is_empty() { "<nil>" } else { path };
    let ty = schema["type"].as_str().unwrap_or_default();
    let invalid = |detail: String| {
        Cause::new(
            "FieldValueInvalid",
            at,
            format!("Invalid value: \"{ty}\": {detail}"),
        )
    };
    let compiled = compile(text);
    let program = match &compiled.program {
        Ok(p) => p,
        Err(e) => {
            errs.push(invalid(format!("rule compile error: {e}")));
            return;
        }
    };
    if compiled.transition && that.is_none() {
        return;
    }
    let mut ctx = ENV.with(|env| Context::with_env(env.clone()));
    ctx.add_variable_from_value("self", this.clone());
    if let Some(old) = that {
        ctx.add_variable_from_value("oldSelf", old.clone());
    }
    match program.execute(&ctx) {
        Ok(Cel::Bool(true)) => {}
        Ok(Cel::Bool(false)) if unchanged && !compiled.transition => {}
        Ok(Cel::Bool(false)) => {
            let detail = message_expression(rule, &ctx).unwrap_or_else(|| {
                if message.is_empty() {
                    format!("failed rule: {shown}")
                } else {
                    message.to_string()
                }
            });
            let field = match rule["fieldPath"].as_str() {
                Some(f) if !f.is_empty() && path.is_empty() => {
                    f.trim_start_matches('.').to_string()
                }
                Some(f) if !f.is_empty() => format!("{path}{f}"),
                _ => at.to_string(),
            };
            let cause = match rule["reason"].as_str() {
                Some("FieldValueForbidden") => {
                    Cause::new("FieldValueForbidden", field, format!("Forbidden: {detail}"))
                }
                Some("FieldValueRequired") => Cause::new(
                    "FieldValueRequired",
                    field,
                    format!("Required value: {detail}"),
                ),
                Some("FieldValueDuplicate") => Cause::new(
                    "FieldValueDuplicate",
                    field,
                    format!("Duplicate value: \"{ty}\""),
                ),
                _ => Cause::new(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: \"{ty}\": {detail}"),
                ),
            };
            errs.push(cause);
        }
        Ok(other) => errs.push(invalid(format!(
            "rule compile error: rule must evaluate to a bool, got {:?}: {shown}",
            other.type_of()
        ))),
        Err(e) => errs.push(invalid(format!("{e} evaluating rule: {shown}"))),
    }
}

/// The rule's `messageExpression`, when it evaluates to a non-empty string.
fn message_expression(rule: &Value, ctx: &Context) -> Option<String> {
    let expr = rule["messageExpression"].as_str()?;
    let compiled = compile(expr);
    match compiled.program.as_ref().ok()?.execute(ctx) {
        Ok(Cel::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(schema: &Value, out: &mut Vec<String>) {
        match schema {
            Value::Object(m) => {
                for (k, v) in m {
                    if k == "x-kubernetes-validations" {
                        let list = v.as_array().into_iter().flatten();
                        out.extend(list.filter_map(|r| r["rule"].as_str().map(str::to_string)));
                    } else {
                        rules(v, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| rules(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_rule_of_keepers_crds_compiles() {
        let mut all = Vec::new();
        for crd in [
            include_str!("../../../crds/s3tenants.keeper.dev.yaml"),
            include_str!("../../../crds/s3buckets.keeper.dev.yaml"),
            include_str!("../../../crds/clouddatabases.keeper.dev.yaml"),
        ] {
            let v: Value = serde_yaml::from_str(crd).expect("crd yaml");
            rules(&v, &mut all);
        }
        assert!(all.len() >= 9, "{all:?}");
        for r in &all {
            assert!(
                compile(r).program.is_ok(),
                "{r}: {:?}",
                compile(r).program.as_ref().err()
            );
        }
        assert!(compile("self == oldSelf").transition);
        assert!(!compile("!self.matches('^[0-9]+$')").transition);
    }

    #[test]
    fn transition_rules_need_an_old_value() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "has(self.a) == has(oldSelf.a)", "message": "a is fixed"}]}}});
        let run = |new: Value, old: Option<Value>| {
            let mut errs = Vec::new();
            validate(&s, &new, old.as_ref(), &mut errs);
            errs.iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect::<Vec<_>>()
        };
        assert!(run(json!({"spec": {}}), None).is_empty());
        assert!(run(json!({"spec": {"a": "x"}}), Some(json!({}))).is_empty());
        assert!(
            run(
                json!({"spec": {"a": "x"}}),
                Some(json!({"spec": {"a": "y"}}))
            )
            .is_empty()
        );
        assert_eq!(
            run(json!({"spec": {"a": "x"}}), Some(json!({"spec": {}}))),
            vec!["spec: Invalid value: \"object\": a is fixed"]
        );
    }
}

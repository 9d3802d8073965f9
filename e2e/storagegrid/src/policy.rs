//! IAM-style S3 group policies (`policies.s3` of a tenant group) and their evaluation.
//!
//! Supported: `Statement[]` with `Effect` (`Allow`/`Deny`), `Action`/`NotAction`, `Resource`/`NotResource`
//! as a string or a list, with `*` and `?` wildcards (actions case-insensitive, resources case-sensitive).
//! An explicit `Deny` wins over any `Allow`. Statements with a `Condition` are not evaluated (the emulator
//! does not know request context such as source IPs), so they neither allow nor deny.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// No statement matched: denied by default.
    NotMatched,
}

/// Validates a policy document; returns a message on failure (the caller answers 422).
pub fn validate(policy: &Value) -> Result<(), String> {
    let obj = policy.as_object().ok_or("policies.s3 must be an object")?;
    let statements = obj
        .get("Statement")
        .ok_or("policies.s3.Statement is required")?;
    let statements: Vec<&Value> = match statements {
        Value::Array(a) => a.iter().collect(),
        Value::Object(_) => vec![statements],
        _ => return Err("policies.s3.Statement must be a list".into()),
    };
    for st in statements {
        let st = st.as_object().ok_or("each Statement must be an object")?;
        match st.get("Effect").and_then(Value::as_str) {
            Some("Allow") | Some("Deny") => {}
            _ => return Err("Statement.Effect must be \"Allow\" or \"Deny\"".into()),
        }
        if st.get("Action").is_none() && st.get("NotAction").is_none() {
            return Err("Statement needs Action or NotAction".into());
        }
        if st.get("Resource").is_none() && st.get("NotResource").is_none() {
            return Err("Statement needs Resource or NotResource".into());
        }
        for field in ["Action", "NotAction", "Resource", "NotResource"] {
            if let Some(v) = st.get(field)
                && strings(v).is_none()
            {
                return Err(format!(
                    "Statement.{field} must be a string or a list of strings"
                ));
            }
        }
    }
    Ok(())
}

fn strings(v: &Value) -> Option<Vec<&str>> {
    match v {
        Value::String(s) => Some(vec![s.as_str()]),
        Value::Array(a) => a.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

/// Evaluates one policy document for `action` (e.g. `s3:GetObject`) on `resource` (an ARN).
pub fn evaluate(policy: &Value, action: &str, resource: &str) -> Decision {
    let statements: Vec<&Value> = match policy.get("Statement") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v @ Value::Object(_)) => vec![v],
        _ => return Decision::NotMatched,
    };
    let mut decision = Decision::NotMatched;
    for st in statements {
        if st.get("Condition").is_some() {
            continue;
        }
        let action_ok = match (st.get("Action"), st.get("NotAction")) {
            (Some(a), _) => strings(a)
                .unwrap_or_default()
                .iter()
                .any(|p| glob(&p.to_ascii_lowercase(), &action.to_ascii_lowercase())),
            (None, Some(na)) => !strings(na)
                .unwrap_or_default()
                .iter()
                .any(|p| glob(&p.to_ascii_lowercase(), &action.to_ascii_lowercase())),
            (None, None) => false,
        };
        let resource_ok = match (st.get("Resource"), st.get("NotResource")) {
            (Some(r), _) => strings(r)
                .unwrap_or_default()
                .iter()
                .any(|p| glob(p, resource)),
            (None, Some(nr)) => !strings(nr)
                .unwrap_or_default()
                .iter()
                .any(|p| glob(p, resource)),
            (None, None) => false,
        };
        if action_ok && resource_ok {
            match st.get("Effect").and_then(Value::as_str) {
                Some("Deny") => return Decision::Deny,
                Some("Allow") => decision = Decision::Allow,
                _ => {}
            }
        }
    }
    decision
}

/// Combines several policies (a user's groups): any explicit Deny wins, then any Allow.
pub fn evaluate_all<'a>(
    policies: impl IntoIterator<Item = &'a Value>,
    action: &str,
    resource: &str,
) -> Decision {
    let mut decision = Decision::NotMatched;
    for p in policies {
        match evaluate(p, action, resource) {
            Decision::Deny => return Decision::Deny,
            Decision::Allow => decision = Decision::Allow,
            Decision::NotMatched => {}
        }
    }
    decision
}

/// Wildcard match: `*` = any sequence (also empty), `?` = exactly one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let (mut star, mut mark) = (None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn glob_matches() {
        assert!(glob("*", "anything"));
        assert!(glob("arn:aws:s3:::b/*", "arn:aws:s3:::b/x/y"));
        assert!(!glob("arn:aws:s3:::b/*", "arn:aws:s3:::b"));
        assert!(!glob("arn:aws:s3:::b/*", "arn:aws:s3:::bb/x"));
        assert!(glob("s3:get*", "s3:getobject"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
    }

    #[test]
    fn bucket_scoped_policy() {
        let p = json!({"Statement":[{"Effect":"Allow","Action":["s3:*"],
            "Resource":["arn:aws:s3:::logs","arn:aws:s3:::logs/*"]}]});
        assert!(validate(&p).is_ok());
        assert_eq!(
            evaluate(&p, "s3:GetObject", "arn:aws:s3:::logs/k"),
            Decision::Allow
        );
        assert_eq!(
            evaluate(&p, "s3:ListBucket", "arn:aws:s3:::logs"),
            Decision::Allow
        );
        assert_eq!(
            evaluate(&p, "s3:GetObject", "arn:aws:s3:::other/k"),
            Decision::NotMatched
        );
    }

    #[test]
    fn deny_wins() {
        let a = json!({"Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]});
        let d = json!({"Statement":[{"Effect":"Deny","Action":"s3:DeleteObject","Resource":"arn:aws:s3:::b/*"}]});
        assert_eq!(
            evaluate_all([&a, &d], "s3:DeleteObject", "arn:aws:s3:::b/x"),
            Decision::Deny
        );
        assert_eq!(
            evaluate_all([&a, &d], "s3:GetObject", "arn:aws:s3:::b/x"),
            Decision::Allow
        );
    }

    #[test]
    fn invalid_policies() {
        assert!(validate(&json!({})).is_err());
        assert!(
            validate(&json!({"Statement":[{"Effect":"Maybe","Action":"*","Resource":"*"}]}))
                .is_err()
        );
        assert!(validate(&json!({"Statement":[{"Effect":"Allow","Resource":"*"}]})).is_err());
    }
}

//! Label and field selectors.

use crate::error::ApiError;
use serde_json::Value;

#[derive(Debug, Clone)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (`a=b,c!=d,e in (x,y),f notin (z),g,!h`).
#[derive(Debug, Clone, Default)]
pub struct LabelSelector(Vec<Req>);

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad = |m: String| ApiError::bad_request(format!("unable to parse requirement: {m}"));
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let lower = part.to_string();
            let set_op = [" notin ", " in "]
                .iter()
                .find_map(|op| lower.find(op).map(|i| (i, *op)));
            let r = if let Some((i, op)) = set_op {
                let key = part[..i].trim().to_string();
                let rest = part[i + op.len()..].trim();
                if !rest.starts_with('(') || !rest.ends_with(')') {
                    return Err(bad(format!("found '{rest}', expected: '('")));
                }
                let vals: Vec<String> = rest[1..rest.len() - 1]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                if op == " in " {
                    Req::In(key, vals)
                } else {
                    Req::NotIn(key, vals)
                }
            } else if let Some(i) = part.find("!=") {
                Req::Ne(part[..i].trim().into(), part[i + 2..].trim().into())
            } else if let Some(i) = part.find("==") {
                Req::Eq(part[..i].trim().into(), part[i + 2..].trim().into())
            } else if let Some(i) = part.find('=') {
                Req::Eq(part[..i].trim().into(), part[i + 1..].trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Req::NotExists(k.trim().into())
            } else {
                Req::Exists(part.clone())
            };
            let key = match &r {
                Req::Eq(k, _)
                | Req::Ne(k, _)
                | Req::In(k, _)
                | Req::NotIn(k, _)
                | Req::Exists(k)
                | Req::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(bad(format!("invalid label key {key:?}")));
            }
            reqs.push(r);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels every match carries (`k=v`, `k==v`, `k in (v)`).
    pub fn equalities(&self) -> Vec<(&str, &str)> {
        self.0
            .iter()
            .filter_map(|r| match r {
                Req::Eq(k, v) => Some((k.as_str(), v.as_str())),
                Req::In(k, vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
                _ => None,
            })
            .collect()
    }

    pub fn matches_labels(&self, labels: &Value) -> bool {
        let get = |k: &str| labels.get(k).and_then(|v| v.as_str());
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_labels(&obj["metadata"]["labels"])
    }

    /// Match a `metav1.LabelSelector` object (matchLabels/matchExpressions) against labels.
    pub fn matches_object_selector(sel: &Value, labels: &Value) -> bool {
        if sel.is_null() {
            return true;
        }
        if let Some(m) = sel["matchLabels"].as_object() {
            for (k, v) in m {
                if labels.get(k) != Some(v) {
                    return false;
                }
            }
        }
        for e in sel["matchExpressions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let k = e["key"].as_str().unwrap_or_default();
            let vals: Vec<&str> = e["values"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            let cur = labels.get(k).and_then(|v| v.as_str());
            let ok = match e["operator"].as_str().unwrap_or_default() {
                "In" => cur.is_some_and(|c| vals.contains(&c)),
                "NotIn" => cur.is_none_or(|c| !vals.contains(&c)),
                "Exists" => cur.is_some(),
                "DoesNotExist" => cur.is_none(),
                _ => false,
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

/// A parsed field selector: (json path, value, negated).
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, String, bool)>);

impl FieldSelector {
    /// `labels` maps selector labels to dotted paths in the object.
    pub fn parse(s: &str, labels: &[(&str, &str)]) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v, neg) = if let Some(i) = part.find("!=") {
                (&part[..i], &part[i + 2..], true)
            } else if let Some(i) = part.find("==") {
                (&part[..i], &part[i + 2..], false)
            } else if let Some(i) = part.find('=') {
                (&part[..i], &part[i + 1..], false)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            let path = match k {
                "metadata.name" | "metadata.namespace" => k.to_string(),
                _ => match labels.iter().find(|(l, _)| *l == k) {
                    Some((_, p)) => p.to_string(),
                    None => {
                        return Err(ApiError::bad_request(format!(
                            "field label not supported: {k}"
                        )));
                    }
                },
            };
            out.push((path, v.trim().to_string(), neg));
        }
        Ok(FieldSelector(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value every match has at `path` (a `path=value` term), if the selector asks one.
    pub fn required(&self, path: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, _, neg)| p == path && !neg)
            .map(|(_, v, _)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, want, neg)| {
            let mut cur = obj;
            for seg in path.split('.') {
                cur = &cur[seg];
            }
            let have = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (have == *want) != *neg
        })
    }
}

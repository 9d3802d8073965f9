//! Fault rules: which of keeper's API requests the proxy answers like a kube-apiserver under
//! stress, instead of (or after) passing them on.
//!
//! [`Settings`] (`{"seed": 7, "rules": [RULE, ...]}`) replace the rules and reseed the random
//! generator: the same seed and the same request sequence give the same faults. A RULE
//! (camelCase, unknown fields refused):
//!
//! | Field | Meaning |
//! |---|---|
//! | `resource` | `*` (default), a plural (`s3buckets`: the main resource only) or `plural/subresource` (`s3buckets/status`), as in RBAC |
//! | `group` | API group to match (`""` is core); any group when absent |
//! | `verbs` | `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; all when empty |
//! | `latencyMs` | delay every matching request by this long before it is passed on |
//! | `share` | share (0..=1) of matching requests answered with an error instead of being passed on |
//! | `codes` | the errors to answer, picked at random per hit: 409, 429, 500, 503 |
//! | `retryAfterSeconds` | `Retry-After` of a 429 (default 1) |
//! | `lostShare` | share (0..=1) of the matching requests passed on whose answer is lost: kube-apiserver serves them (a write takes effect), then the proxy closes the client's connection without answering |
//! | `closeWatchAfterSeconds` | a matching watch ends after this many seconds |
//!
//! The first rule that matches a request decides for it. The answers are those of
//! kube-apiserver: 429 `TooManyRequests` with `Retry-After` and `details.retryAfterSeconds` (its
//! max-in-flight and priority-and-fairness limits), 500 `InternalError`, 503 `ServiceUnavailable`,
//! and 409 `Conflict` ("the object has been modified"), which optimistic concurrency gives only to
//! writes of an existing object, so a rule with 409 must name only `update`, `patch` and
//! `delete` among its verbs. A refused request never reaches kube-apiserver. A cut watch ends its
//! response cleanly, as kube-apiserver's watch timeout does: clients must list or watch again.
//!
//! The proxy does not authenticate: every request through it is its one client's (one proxy per
//! keeper process), so rules match requests, not users.

use http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The codes a rule may answer with.
const CODES: [u16; 4] = [409, 429, 500, 503];
/// Optimistic-concurrency conflicts happen only on writes of an object that exists.
const CONFLICT_VERBS: [&str; 3] = ["update", "patch", "delete"];
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// One fault rule (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    #[serde(default = "any_resource")]
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub latency_ms: u64,
    #[serde(default)]
    pub share: f64,
    #[serde(default)]
    pub codes: Vec<u16>,
    #[serde(default = "one_second")]
    pub retry_after_seconds: u64,
    #[serde(default)]
    pub lost_share: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_watch_after_seconds: Option<u64>,
}

fn any_resource() -> String {
    "*".into()
}

fn one_second() -> u64 {
    1
}

/// The fault settings: a seed and the rules.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

impl Settings {
    /// Settings from JSON, each rule checked; the error names the rule and what is wrong.
    pub fn from_json(value: Value) -> Result<Settings, String> {
        let settings: Settings =
            serde_json::from_value(value).map_err(|e| format!("fault settings: {e}"))?;
        for (i, rule) in settings.rules.iter().enumerate() {
            rule.check().map_err(|e| format!("rules[{i}]: {e}"))?;
        }
        Ok(settings)
    }
}

impl Rule {
    fn check(&self) -> Result<(), String> {
        for (name, share) in [("share", self.share), ("lostShare", self.lost_share)] {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!("{name} {share} is not between 0 and 1"));
            }
        }
        if let Some(v) = self.verbs.iter().find(|v| !VERBS.contains(&v.as_str())) {
            return Err(format!("unknown verb {v:?} (one of {VERBS:?})"));
        }
        if let Some(c) = self.codes.iter().find(|c| !CODES.contains(c)) {
            return Err(format!("code {c} cannot be injected (one of {CODES:?})"));
        }
        if self.share > 0.0 && self.codes.is_empty() {
            return Err("a share of failures needs codes to answer with".into());
        }
        if self.codes.contains(&409)
            && (self.verbs.is_empty()
                || self
                    .verbs
                    .iter()
                    .any(|v| !CONFLICT_VERBS.contains(&v.as_str())))
        {
            return Err(format!(
                "409 Conflict is only answered to writes of an existing object: list verbs among {CONFLICT_VERBS:?}"
            ));
        }
        Ok(())
    }

    fn matches(&self, r: &RequestInfo) -> bool {
        let resource = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        (self.resource == "*" || self.resource == resource)
            && self.group.as_deref().is_none_or(|g| g == r.group)
            && (self.verbs.is_empty() || self.verbs.iter().any(|v| v == r.verb))
    }
}

/// What a request is, from its method, path and query (kube-apiserver's "request info").
#[derive(Debug, Clone, PartialEq)]
pub struct RequestInfo {
    pub verb: &'static str,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Classifies an API request; `None` for everything else (discovery, OpenAPI, health).
///
/// It works on the path alone, so `/api/v1/namespaces/NAME/status` and `.../finalize` are taken
/// as subresources of namespaces (the only core paths where that matters).
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> Option<RequestInfo> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", g, _version, rest @ ..] => (*g, rest),
        _ => return None,
    };
    let namespace_subresource =
        group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize");
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() && !namespace_subresource => (*ns, tail),
        _ => ("", rest),
    };
    let (resource, name, subresource) = match rest {
        [r] => (*r, "", ""),
        [r, n] => (*r, *n, ""),
        [r, n, s] => (*r, *n, *s),
        _ => return None,
    };
    let watch = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .any(|pair| matches!(pair, "watch=true" | "watch=1"));
    let verb = match (method.as_str(), !name.is_empty()) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some(RequestInfo {
        verb,
        group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
    })
}

/// Per-rule counters.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    pub matched: u64,
    /// Answers given instead of passing the request on, by code.
    pub answered: BTreeMap<u16, u64>,
    /// Requests passed on whose answer was then lost.
    pub lost: u64,
    pub watches_limited: u64,
}

struct Inner {
    seed: u64,
    rng: StdRng,
    rules: Vec<Rule>,
    counters: Vec<Counters>,
}

/// The fault rules of one proxy.
pub struct Faults {
    inner: Mutex<Inner>,
}

impl Default for Faults {
    fn default() -> Self {
        let seed = rand::rng().random();
        Faults {
            inner: Mutex::new(Inner {
                seed,
                rng: StdRng::seed_from_u64(seed),
                rules: Vec::new(),
                counters: Vec::new(),
            }),
        }
    }
}

/// What the faults decided for one request.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Answer this (status code and `metav1.Status` body) instead of passing the request on.
    pub refuse: Option<(u16, Value)>,
    /// Pass the request on, then close the client's connection without an answer.
    pub lose_answer: bool,
    /// End the watch after this long.
    pub cut_watch_after: Option<Duration>,
    /// Wait this long first.
    pub latency: Duration,
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides for one request.
    pub fn decide(&self, method: &Method, path: &str, query: Option<&str>) -> Decision {
        let Some(info) = classify(method, path, query) else {
            return Decision::default();
        };
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(i) = inner.rules.iter().position(|r| r.matches(&info)) else {
            return Decision::default();
        };
        let rule = &inner.rules[i];
        let counters = &mut inner.counters[i];
        counters.matched += 1;
        let hit = rule.share > 0.0 && inner.rng.random_bool(rule.share);
        let refuse = hit.then(|| {
            let code = rule.codes[inner.rng.random_range(0..rule.codes.len())];
            *counters.answered.entry(code).or_default() += 1;
            (code, status(code, rule.retry_after_seconds, &info))
        });
        let lose_answer =
            refuse.is_none() && rule.lost_share > 0.0 && inner.rng.random_bool(rule.lost_share);
        if lose_answer {
            counters.lost += 1;
        }
        let cut_watch_after = (info.verb == "watch" && refuse.is_none() && !lose_answer)
            .then(|| rule.close_watch_after_seconds.map(Duration::from_secs))
            .flatten();
        if cut_watch_after.is_some() {
            counters.watches_limited += 1;
        }
        Decision {
            refuse,
            lose_answer,
            cut_watch_after,
            latency: Duration::from_millis(rule.latency_ms),
        }
    }

    /// Replaces the rules (and reseeds, with the settings' seed or the last one).
    pub fn set(&self, settings: Settings) {
        let mut inner = self.lock();
        if let Some(seed) = settings.seed {
            inner.seed = seed;
        }
        inner.rng = StdRng::seed_from_u64(inner.seed);
        inner.counters = vec![Counters::default(); settings.rules.len()];
        inner.rules = settings.rules;
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.set(Settings::default());
    }

    /// The counters of each rule, in the rules' order.
    pub fn counters(&self) -> Vec<Counters> {
        self.lock().counters.clone()
    }
}

/// kube-apiserver's `metav1.Status` body for an injected error.
fn status(code: u16, retry_after: u64, info: &RequestInfo) -> Value {
    let qualified = if info.group.is_empty() {
        info.resource.clone()
    } else {
        format!("{}.{}", info.resource, info.group)
    };
    let (reason, message, details) = match code {
        409 => (
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {qualified} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                info.name
            ),
            json!({"name": info.name, "group": info.group, "kind": info.resource}),
        ),
        429 => (
            "TooManyRequests",
            "Too many requests, please try again later.".to_string(),
            json!({"retryAfterSeconds": retry_after}),
        ),
        503 => (
            "ServiceUnavailable",
            "The server is currently unable to handle the request".to_string(),
            Value::Null,
        ),
        _ => (
            "InternalError",
            "Internal error occurred: injected fault".to_string(),
            Value::Null,
        ),
    };
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    if !details.is_null() {
        body["details"] = details;
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, path: &str, query: Option<&str>) -> Option<RequestInfo> {
        classify(&method, path, query)
    }

    fn settings(value: Value) -> Settings {
        Settings::from_json(value).unwrap()
    }

    #[test]
    fn requests_are_classified_like_kube_apiserver_does() {
        let i = info(
            Method::PUT,
            "/apis/keeper.dev/v1alpha1/namespaces/a/s3buckets/b/status",
            None,
        )
        .unwrap();
        assert_eq!(
            (
                i.verb,
                i.group.as_str(),
                i.resource.as_str(),
                i.subresource.as_str()
            ),
            ("update", "keeper.dev", "s3buckets", "status")
        );
        assert_eq!((i.namespace.as_str(), i.name.as_str()), ("a", "b"));
        let w = info(
            Method::GET,
            "/api/v1/namespaces/a/secrets",
            Some("labelSelector=x&watch=true&resourceVersion=1"),
        )
        .unwrap();
        assert_eq!(
            (w.verb, w.resource.as_str(), w.namespace.as_str()),
            ("watch", "secrets", "a")
        );
        let l = info(Method::GET, "/api/v1/secrets", Some("watch=false")).unwrap();
        assert_eq!(l.verb, "list");
        let n = info(Method::GET, "/api/v1/namespaces/a", None).unwrap();
        assert_eq!(
            (n.verb, n.resource.as_str(), n.name.as_str()),
            ("get", "namespaces", "a")
        );
        let s = info(Method::PUT, "/api/v1/namespaces/a/finalize", None).unwrap();
        assert_eq!(
            (s.resource.as_str(), s.name.as_str(), s.subresource.as_str()),
            ("namespaces", "a", "finalize")
        );
        let c = info(
            Method::DELETE,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            None,
        )
        .unwrap();
        assert_eq!(
            (c.verb, c.resource.as_str()),
            ("deletecollection", "clusterroles")
        );
        assert_eq!(info(Method::GET, "/apis/keeper.dev/v1alpha1", None), None);
        assert_eq!(info(Method::GET, "/version", None), None);
        assert_eq!(info(Method::PUT, "/api/v1/secrets", None), None);
    }

    #[test]
    fn rules_match_by_resource_subresource_group_and_verb() {
        let rule: Rule =
            serde_json::from_value(json!({"resource": "s3buckets/status", "verbs": ["update"]}))
                .unwrap();
        let status = info(
            Method::PUT,
            "/apis/keeper.dev/v1alpha1/namespaces/a/s3buckets/b/status",
            None,
        )
        .unwrap();
        let main = info(
            Method::PUT,
            "/apis/keeper.dev/v1alpha1/namespaces/a/s3buckets/b",
            None,
        )
        .unwrap();
        assert!(rule.matches(&status));
        assert!(
            !rule.matches(&main),
            "the main resource is not its subresource"
        );
        let core: Rule = serde_json::from_value(json!({"group": ""})).unwrap();
        assert!(!core.matches(&main));
        assert!(core.matches(&info(Method::GET, "/api/v1/secrets", None).unwrap()));
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        let err = |v: Value| Settings::from_json(v).unwrap_err();
        assert!(err(json!({"rules": [{"share": 0.5, "codes": [409]}]})).contains("409 Conflict"));
        assert!(
            err(json!({"rules": [{"verbs": ["get"], "share": 0.5, "codes": [409]}]}))
                .contains("rules[0]")
        );
        assert!(
            err(json!({"rules": [{"share": 1.5, "codes": [500]}]})).contains("between 0 and 1")
        );
        assert!(err(json!({"rules": [{"lostShare": -0.1}]})).contains("lostShare"));
        assert!(err(json!({"rules": [{"share": 0.5}]})).contains("needs codes"));
        assert!(err(json!({"rules": [{"codes": [404], "share": 1}]})).contains("404"));
        assert!(err(json!({"rules": [{"verbs": ["watchh"]}]})).contains("watchh"));
        assert!(err(json!({"rules": [{"user": "x"}]})).contains("user"));
        assert!(
            Settings::from_json(
                json!({"rules": [{"verbs": ["patch", "update"], "share": 1, "codes": [409]}]})
            )
            .is_ok()
        );
    }

    #[test]
    fn a_refusal_is_kube_apiservers_status_and_counted() {
        let faults = Faults::default();
        faults.set(settings(json!({"seed": 3, "rules": [
            {"resource": "s3buckets", "verbs": ["patch"], "share": 1, "codes": [409]},
            {"resource": "secrets", "share": 1, "codes": [429], "retryAfterSeconds": 4},
        ]})));
        let d = faults.decide(
            &Method::PATCH,
            "/apis/keeper.dev/v1alpha1/namespaces/a/s3buckets/b",
            None,
        );
        let (code, body) = d.refuse.unwrap();
        assert_eq!(code, 409);
        assert_eq!(body["reason"], "Conflict");
        assert_eq!(
            body["message"],
            "Operation cannot be fulfilled on s3buckets.keeper.dev \"b\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let (code, body) = faults
            .decide(&Method::GET, "/api/v1/namespaces/a/secrets/s", None)
            .refuse
            .unwrap();
        assert_eq!(
            (code, &body["details"]["retryAfterSeconds"]),
            (429, &json!(4))
        );
        // Nothing matches a read of buckets: passed on untouched.
        assert_eq!(
            faults.decide(&Method::GET, "/apis/keeper.dev/v1alpha1/s3buckets", None),
            Decision::default()
        );
        let counters = faults.counters();
        assert_eq!(counters[0].matched, 1);
        assert_eq!(counters[0].answered[&409], 1);
        assert_eq!(counters[1].answered[&429], 1);
    }

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        let run = || {
            let faults = Faults::default();
            faults.set(settings(
                json!({"seed": 11, "rules": [{"share": 0.3, "codes": [500, 503], "lostShare": 0.2}]}),
            ));
            (0..200)
                .map(|_| {
                    let d = faults.decide(&Method::GET, "/api/v1/namespaces/a/secrets/s", None);
                    (d.refuse.map(|(code, _)| code), d.lose_answer)
                })
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        let refused = first.iter().filter(|(code, _)| code.is_some()).count();
        let lost = first.iter().filter(|(_, lost)| *lost).count();
        assert!((30..=90).contains(&refused), "{refused} of 200 refused");
        assert!((10..=60).contains(&lost), "{lost} of 200 lost");
        assert!(
            first.iter().all(|(code, lost)| !(code.is_some() && *lost)),
            "a refused request is never also passed on"
        );
    }

    #[test]
    fn watches_of_a_rule_are_cut_and_delayed_and_others_are_not() {
        let faults = Faults::default();
        faults.set(settings(json!({"rules": [
            {"verbs": ["watch"], "closeWatchAfterSeconds": 15, "latencyMs": 20},
        ]})));
        let watch = faults.decide(
            &Method::GET,
            "/apis/keeper.dev/v1alpha1/s3buckets",
            Some("watch=true"),
        );
        assert_eq!(watch.cut_watch_after, Some(Duration::from_secs(15)));
        assert_eq!(watch.latency, Duration::from_millis(20));
        let list = faults.decide(&Method::GET, "/apis/keeper.dev/v1alpha1/s3buckets", None);
        assert_eq!(list, Decision::default());
        assert_eq!(faults.counters()[0].watches_limited, 1);
        faults.clear();
        assert!(faults.counters().is_empty());
    }
}

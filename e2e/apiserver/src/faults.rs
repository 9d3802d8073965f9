//! Fault injection: the emulator answers like a kube-apiserver under stress, on request.
//!
//! `PUT /debug/faults` with `{"seed": 7, "rules": [RULE, ...]}` replaces the rules (and reseeds the
//! random generator: the same seed and the same request sequence give the same faults);
//! `GET /debug/faults` shows them with per-rule counters; `DELETE /debug/faults` removes them.
//! A RULE (camelCase, unknown fields refused):
//!
//! | Field | Meaning |
//! |---|---|
//! | `resource` | `*` (default), a plural (`s3buckets`: the main resource only) or `plural/subresource` (`s3buckets/status`), as in RBAC |
//! | `group` | API group to match (`""` is core); any group when absent |
//! | `user` | the authenticated user name to match (`system:serviceaccount:NS:NAME`), so that only one client's requests fail; any user when absent |
//! | `verbs` | `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; all when empty |
//! | `latencyMs` | delay every matching request by this long before it is served |
//! | `share` | share (0..=1) of matching requests answered with an error instead of being served |
//! | `codes` | the errors to answer, picked at random per hit: 409, 429, 500, 503 |
//! | `retryAfterSeconds` | `Retry-After` of a 429 (default 1) |
//! | `closeWatchAfterEvents` | a matching watch ends after sending this many events (bookmarks do not count) |
//! | `closeWatchAfterSeconds` | a matching watch ends after this many seconds |
//!
//! The first rule that matches a request decides for it. The answers are those of
//! kube-apiserver: 429 `TooManyRequests` with `Retry-After` and `details.retryAfterSeconds` (its
//! max-in-flight and priority-and-fairness limits), 500 `InternalError`, 503 `ServiceUnavailable`,
//! and 409 `Conflict` ("the object has been modified") which optimistic concurrency gives only to
//! writes of an existing object, so a rule with 409 must name only `update`, `patch` and
//! `delete` among its verbs. A refused request is not served (nothing changes) and appears in
//! `/debug/requests` with its code and `"fault": true`. A cut watch ends its response cleanly,
//! as kube-apiserver's watch timeout does: clients must list or watch again.

use crate::error::ApiError;
use http::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_watch_after_events: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_watch_after_seconds: Option<u64>,
}

fn any_resource() -> String {
    "*".into()
}

fn one_second() -> u64 {
    1
}

/// The body of `PUT /debug/faults`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    rules: Vec<Rule>,
}

impl Rule {
    fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.share) {
            return Err(format!("share {} is not between 0 and 1", self.share));
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

    fn matches(&self, r: &RequestInfo, user: &str) -> bool {
        let resource = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        (self.resource == "*" || self.resource == resource)
            && self.group.as_deref().is_none_or(|g| g == r.group)
            && self.user.as_deref().is_none_or(|u| u == user)
            && (self.verbs.is_empty() || self.verbs.iter().any(|v| v == r.verb))
    }

    fn watch_cut(&self) -> Option<WatchCut> {
        (self.close_watch_after_events.is_some() || self.close_watch_after_seconds.is_some()).then(
            || WatchCut {
                after_events: self.close_watch_after_events,
                after: self.close_watch_after_seconds.map(Duration::from_secs),
            },
        )
    }
}

/// When a watch ends although the client did not ask it to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchCut {
    pub after_events: Option<u64>,
    pub after: Option<Duration>,
}

/// What a request is, from its method, path and query (kube-apiserver's "request info").
#[derive(Debug, Clone, PartialEq)]
pub struct RequestInfo {
    pub verb: &'static str,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Classifies an API request; `None` for everything else (discovery, OpenAPI, debug, health).
///
/// It works on the path alone, so `/api/v1/namespaces/NAME/status` and `.../finalize` are taken
/// as subresources of namespaces (the only core paths where that matters).
pub fn classify(
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
) -> Option<RequestInfo> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
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
    let verb = crate::server::request_verb(
        method,
        !name.is_empty(),
        query.get("watch").map(String::as_str),
    );
    if verb == "unsupported" {
        return None;
    }
    Some(RequestInfo {
        verb,
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
    })
}

/// Per-rule counters shown by `GET /debug/faults`.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Counters {
    matched: u64,
    /// Answers given instead of serving, by code.
    answered: BTreeMap<u16, u64>,
    watches_limited: u64,
}

struct Inner {
    seed: u64,
    rng: StdRng,
    rules: Vec<Rule>,
    counters: Vec<Counters>,
}

/// The fault rules of one server.
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
#[derive(Debug, Default)]
pub struct Decision {
    /// Answer this instead of serving the request.
    pub refuse: Option<Refusal>,
    /// End the watch early.
    pub watch_cut: Option<WatchCut>,
}

/// An injected error answer.
#[derive(Debug)]
pub struct Refusal {
    pub error: ApiError,
    pub retry_after: Option<u64>,
    /// The `/debug/requests` entry for it.
    pub log: Value,
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides for one request of `user` and waits out the rule's latency.
    pub async fn decide(
        &self,
        method: &Method,
        path: &str,
        query: &HashMap<String, String>,
        user: &str,
    ) -> Decision {
        let Some(info) = classify(method, path, query) else {
            return Decision::default();
        };
        let (latency, decision) = {
            let mut inner = self.lock();
            let inner = &mut *inner;
            let Some(i) = inner.rules.iter().position(|r| r.matches(&info, user)) else {
                return Decision::default();
            };
            let rule = &inner.rules[i];
            let counters = &mut inner.counters[i];
            counters.matched += 1;
            let hit = rule.share > 0.0 && inner.rng.random_bool(rule.share);
            let code = hit.then(|| rule.codes[inner.rng.random_range(0..rule.codes.len())]);
            let refuse = code.map(|code| {
                *counters.answered.entry(code).or_default() += 1;
                refusal(code, rule.retry_after_seconds, &info)
            });
            let watch_cut = (info.verb == "watch" && refuse.is_none())
                .then(|| rule.watch_cut())
                .flatten();
            if watch_cut.is_some() {
                counters.watches_limited += 1;
            }
            (
                Duration::from_millis(rule.latency_ms),
                Decision { refuse, watch_cut },
            )
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        decision
    }

    /// `GET|PUT|DELETE /debug/faults`: the answer's code and body.
    pub fn endpoint(&self, method: &Method, body: &[u8]) -> (u16, Value) {
        match *method {
            Method::GET => (200, self.describe()),
            Method::DELETE => {
                let mut inner = self.lock();
                inner.rules.clear();
                inner.counters.clear();
                drop(inner);
                (200, self.describe())
            }
            Method::PUT => match parse(body) {
                Ok(settings) => {
                    let mut inner = self.lock();
                    if let Some(seed) = settings.seed {
                        inner.seed = seed;
                    }
                    inner.rng = StdRng::seed_from_u64(inner.seed);
                    inner.counters = vec![Counters::default(); settings.rules.len()];
                    inner.rules = settings.rules;
                    drop(inner);
                    (200, self.describe())
                }
                Err(e) => (400, json!({"error": e})),
            },
            _ => (
                405,
                json!({"error": "use GET, PUT ({\"seed\": N, \"rules\": [...]}) or DELETE"}),
            ),
        }
    }

    fn describe(&self) -> Value {
        let inner = self.lock();
        json!({"seed": inner.seed, "rules": inner.rules, "counters": inner.counters})
    }
}

fn parse(body: &[u8]) -> Result<Settings, String> {
    let settings: Settings =
        serde_json::from_slice(body).map_err(|e| format!("fault settings: {e}"))?;
    for (i, rule) in settings.rules.iter().enumerate() {
        rule.check().map_err(|e| format!("rules[{i}]: {e}"))?;
    }
    Ok(settings)
}

fn refusal(code: u16, retry_after: u64, info: &RequestInfo) -> Refusal {
    let error = match code {
        409 => ApiError::stale(&info.group, &info.resource, &info.name),
        429 => {
            let mut e = ApiError::new(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            );
            e.details = Some(json!({"retryAfterSeconds": retry_after}));
            e
        }
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "The server is currently unable to handle the request",
        ),
        _ => ApiError::internal("injected fault"),
    };
    Refusal {
        error,
        retry_after: (code == 429).then_some(retry_after),
        log: json!({"verb": info.verb, "resource": info.resource, "subresource": info.subresource,
            "namespace": info.namespace, "name": info.name, "apiGroup": info.group,
            "apiVersion": info.version, "fault": true}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, path: &str, query: &[(&str, &str)]) -> Option<RequestInfo> {
        let q = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        classify(&method, path, &q)
    }

    #[test]
    fn requests_are_classified_like_kube_apiserver_does() {
        let i = info(
            Method::PUT,
            "/apis/keeper.dev/v1alpha1/namespaces/a/s3buckets/b/status",
            &[],
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
            &[("watch", "1")],
        )
        .unwrap();
        assert_eq!(
            (w.verb, w.resource.as_str(), w.namespace.as_str()),
            ("watch", "secrets", "a")
        );
        let n = info(Method::GET, "/api/v1/namespaces/a", &[]).unwrap();
        assert_eq!(
            (n.verb, n.resource.as_str(), n.name.as_str()),
            ("get", "namespaces", "a")
        );
        let s = info(Method::PUT, "/api/v1/namespaces/a/finalize", &[]).unwrap();
        assert_eq!(
            (s.resource.as_str(), s.name.as_str(), s.subresource.as_str()),
            ("namespaces", "a", "finalize")
        );
        let c = info(
            Method::DELETE,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            &[],
        )
        .unwrap();
        assert_eq!(
            (c.verb, c.resource.as_str()),
            ("deletecollection", "clusterroles")
        );
        assert_eq!(info(Method::GET, "/apis/keeper.dev/v1alpha1", &[]), None);
        assert_eq!(info(Method::GET, "/debug/requests", &[]), None);
    }

    #[test]
    fn rules_match_by_resource_subresource_group_and_verb() {
        let rule: Rule =
            serde_json::from_value(json!({"resource": "s3buckets/status", "verbs": ["update"]}))
                .unwrap();
        let status = info(
            Method::PUT,
            "/apis/keeper.dev/v1alpha1/namespaces/a/s3buckets/b/status",
            &[],
        )
        .unwrap();
        let main = info(
            Method::PUT,
            "/apis/keeper.dev/v1alpha1/namespaces/a/s3buckets/b",
            &[],
        )
        .unwrap();
        assert!(rule.matches(&status, "admin"));
        assert!(
            !rule.matches(&main, "admin"),
            "the main resource is not its subresource"
        );
        let core: Rule = serde_json::from_value(json!({"group": ""})).unwrap();
        assert!(!core.matches(&main, "admin"));
        assert!(core.matches(&info(Method::GET, "/api/v1/secrets", &[]).unwrap(), "admin"));
        let keeper: Rule =
            serde_json::from_value(json!({"user": "system:serviceaccount:keeper-system:keeper"}))
                .unwrap();
        assert!(keeper.matches(&main, "system:serviceaccount:keeper-system:keeper"));
        assert!(
            !keeper.matches(&main, "admin"),
            "another user's requests are served"
        );
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        let err = |v: Value| parse(v.to_string().as_bytes()).unwrap_err();
        assert!(err(json!({"rules": [{"share": 0.5, "codes": [409]}]})).contains("409 Conflict"));
        assert!(
            err(json!({"rules": [{"verbs": ["get"], "share": 0.5, "codes": [409]}]}))
                .contains("rules[0]")
        );
        assert!(
            err(json!({"rules": [{"share": 1.5, "codes": [500]}]})).contains("between 0 and 1")
        );
        assert!(err(json!({"rules": [{"share": 0.5}]})).contains("needs codes"));
        assert!(err(json!({"rules": [{"codes": [404], "share": 1}]})).contains("404"));
        assert!(err(json!({"rules": [{"verbs": ["watchh"]}]})).contains("watchh"));
        assert!(err(json!({"rules": [{"shares": 1}]})).contains("shares"));
        assert!(
            parse(br#"{"rules": [{"verbs": ["patch", "update"], "share": 1, "codes": [409]}]}"#)
                .is_ok()
        );
    }
}

//! Fault rules: which calls fail, and how, as AWS would fail them.
//!
//! `PUT /_awsproxy/faults` with `{"seed": 7, "rules": [RULE, ...]}` replaces the rules and reseeds
//! the random generator (the same seed and request sequence give the same faults); `GET` shows
//! them with per-rule counters, `DELETE` removes them. A RULE (camelCase, unknown fields refused):
//!
//! | Field | Meaning |
//! |---|---|
//! | `service` | `s3`, `iam`, `rds` or `*` (default) |
//! | `actions` | operation names (`PutObject`, `CreateDBInstance`, ...); all when empty |
//! | `latencyMs` | delay every matching call by this long before it is forwarded |
//! | `share` | share (0..=1) of matching calls that get a fault |
//! | `faults` | the faults to pick from at random per hit (below) |
//!
//! Faults: `"500"` (S3 `InternalError`, IAM/RDS `InternalFailure`), `"503"` (`ServiceUnavailable`),
//! `"throttle"` (S3 503 `SlowDown`, IAM/RDS 400 `Throttling` "Rate exceeded"), `"drop"` (the
//! connection is closed before the call reaches moto: nothing happened), `"lost"` (the call is
//! forwarded and moto acts, then the connection is closed without an answer: the create
//! succeeded, the client never heard) and a named error, `{"code": "LimitExceeded", "status":
//! 409, "message": "Cannot exceed quota for UsersPerAccount: 5000"}` (status 400..=599, message
//! optional): the answer AWS gives for that error code, which moto does not emulate (IAM's
//! `LimitExceeded` and `DeleteConflict` are 409s). Error bodies are the XML AWS sends: S3's
//! `<Error>`, the Query API's `<ErrorResponse>` (`Type` `Sender` below 500, `Receiver` from 500).
//! The first rule that matches a call decides for it; moto's own API (`/moto-api/...`) is never
//! faulted. `GET` counts each rule's faults by name (the error code for a named error).

use crate::classify::Call;
use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How a faulted call fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `"500"`
    InternalError,
    /// `"503"`
    Unavailable,
    /// `"throttle"`
    Throttle,
    /// `"drop"`
    Drop,
    /// `"lost"`
    Lost,
    /// `{"code": ..., "status": ..., "message": ...}`
    Named(NamedError),
}

/// An AWS error by its code, answered as AWS answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedError {
    pub code: String,
    pub status: u16,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The names of the faults that are not named errors.
const FAULT_NAMES: [(&str, Fault); 5] = [
    ("500", Fault::InternalError),
    ("503", Fault::Unavailable),
    ("throttle", Fault::Throttle),
    ("drop", Fault::Drop),
    ("lost", Fault::Lost),
];

impl Fault {
    /// What the counters and the call log call it: its name, or a named error's code.
    pub fn label(&self) -> &str {
        match self {
            Fault::Named(e) => &e.code,
            other => FAULT_NAMES
                .iter()
                .find(|(_, f)| f == other)
                .map_or("?", |(name, _)| name),
        }
    }
}

impl Serialize for Fault {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Fault::Named(e) => e.serialize(s),
            other => s.serialize_str(other.label()),
        }
    }
}

impl<'de> Deserialize<'de> for Fault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Fault, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::String(name) => FAULT_NAMES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| f.clone())
                .ok_or_else(|| {
                    D::Error::custom(format!(
                        "unknown fault {name:?}: one of \"500\", \"503\", \"throttle\", \"drop\", \"lost\" or {{\"code\": ..., \"status\": ...}}"
                    ))
                }),
            other => {
                let e: NamedError = serde_json::from_value(other).map_err(D::Error::custom)?;
                if !(400..=599).contains(&e.status) {
                    return Err(D::Error::custom(format!(
                        "error {}: status {} is not an error status (400..=599)",
                        e.code, e.status
                    )));
                }
                if e.code.is_empty() || !e.code.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') {
                    return Err(D::Error::custom(format!(
                        "error code {:?} is not an AWS error code (letters and digits)",
                        e.code
                    )));
                }
                Ok(Fault::Named(e))
            }
        }
    }
}

/// One rule (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    #[serde(default = "any")]
    pub service: String,
    #[serde(default)]
    pub actions: Vec<String>,
    #[serde(default)]
    pub latency_ms: u64,
    #[serde(default)]
    pub share: f64,
    #[serde(default)]
    pub faults: Vec<Fault>,
}

fn any() -> String {
    "*".into()
}

impl Rule {
    fn matches(&self, call: &Call) -> bool {
        call.service != "moto"
            && (self.service == "*" || self.service == call.service)
            && (self.actions.is_empty() || self.actions.contains(&call.action))
    }

    fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.share) {
            return Err(format!("share {} is not between 0 and 1", self.share));
        }
        if self.share > 0.0 && self.faults.is_empty() {
            return Err("a share of faults needs faults to pick from".into());
        }
        Ok(())
    }
}

/// The fault settings (`PUT /_awsproxy/faults`, `--faults`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

impl Settings {
    pub fn parse(body: &[u8]) -> Result<Settings, String> {
        let settings: Settings =
            serde_json::from_slice(body).map_err(|e| format!("fault settings: {e}"))?;
        for (i, rule) in settings.rules.iter().enumerate() {
            rule.check().map_err(|e| format!("rules[{i}]: {e}"))?;
        }
        Ok(settings)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
struct Counters {
    matched: u64,
    /// By [`Fault::label`].
    faulted: BTreeMap<String, u64>,
}

struct Inner {
    seed: u64,
    rng: StdRng,
    rules: Vec<Rule>,
    counters: Vec<Counters>,
}

/// The rules of one proxy.
pub struct Faults {
    inner: Mutex<Inner>,
}

/// What the rules decided for one call.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    pub latency: Duration,
    pub fault: Option<Fault>,
}

impl Faults {
    pub fn new(settings: Settings) -> Faults {
        let faults = Faults {
            inner: Mutex::new(Inner {
                seed: 0,
                rng: StdRng::seed_from_u64(0),
                rules: Vec::new(),
                counters: Vec::new(),
            }),
        };
        faults.set(settings);
        faults
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the rules; without a seed, a random one (shown by `GET`).
    pub fn set(&self, settings: Settings) {
        let mut inner = self.lock();
        inner.seed = settings.seed.unwrap_or_else(|| rand::rng().random());
        inner.rng = StdRng::seed_from_u64(inner.seed);
        inner.counters = vec![Counters::default(); settings.rules.len()];
        inner.rules = settings.rules;
    }

    pub fn decide(&self, call: &Call) -> Decision {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(i) = inner.rules.iter().position(|r| r.matches(call)) else {
            return Decision::default();
        };
        let rule = &inner.rules[i];
        inner.counters[i].matched += 1;
        let fault = (rule.share > 0.0 && inner.rng.random_bool(rule.share))
            .then(|| rule.faults[inner.rng.random_range(0..rule.faults.len())].clone());
        if let Some(f) = &fault {
            *inner.counters[i]
                .faulted
                .entry(f.label().to_string())
                .or_default() += 1;
        }
        Decision {
            latency: Duration::from_millis(rule.latency_ms),
            fault,
        }
    }

    pub fn describe(&self) -> Value {
        let inner = self.lock();
        json!({"seed": inner.seed, "rules": inner.rules, "counters": inner.counters})
    }
}

/// The answer AWS gives for an error fault (`None` for the connection faults).
pub fn error_response(
    fault: &Fault,
    call: &Call,
    path: &str,
    head: bool,
) -> Option<Response<Full<Bytes>>> {
    let query = call.is_query_api();
    let (status, code, message) = match (fault, query) {
        (Fault::Drop | Fault::Lost, _) => return None,
        (Fault::InternalError, false) => (
            500,
            "InternalError",
            "We encountered an internal error. Please try again.",
        ),
        (Fault::InternalError, true) => (
            500,
            "InternalFailure",
            "The request processing has failed because of an unknown error, exception or failure.",
        ),
        (Fault::Unavailable, _) => (
            503,
            "ServiceUnavailable",
            "Service is unable to handle request.",
        ),
        (Fault::Throttle, false) => (503, "SlowDown", "Please reduce your request rate."),
        (Fault::Throttle, true) => (400, "Throttling", "Rate exceeded"),
        (Fault::Named(e), _) => (
            e.status,
            e.code.as_str(),
            if e.message.is_empty() {
                e.code.as_str()
            } else {
                e.message.as_str()
            },
        ),
    };
    let body = if query {
        query_error(&call.service, status < 500, code, message)
    } else {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message><Resource>{}</Resource><RequestId>{}</RequestId></Error>",
            xml_escape(message),
            xml_escape(path),
            request_id()
        )
    };
    Some(xml(status, if head { String::new() } else { body }))
}

/// A Query API (IAM, RDS) `<ErrorResponse>`; `sender` says whose fault it is (`Type`).
pub fn query_error(service: &str, sender: bool, code: &str, message: &str) -> String {
    let namespace = match service {
        "iam" => "https://iam.amazonaws.com/doc/2010-05-08/",
        _ => "http://rds.amazonaws.com/doc/2014-10-31/",
    };
    format!(
        "<ErrorResponse xmlns=\"{namespace}\"><Error><Type>{}</Type><Code>{code}</Code><Message>{}</Message></Error><RequestId>{}</RequestId></ErrorResponse>",
        if sender { "Sender" } else { "Receiver" },
        xml_escape(message),
        request_id()
    )
}

pub fn xml(status: u16, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        "text/xml".parse().expect("static header"),
    );
    r
}

pub fn request_id() -> String {
    let n: u64 = rand::rng().random();
    format!("{n:016X}")
}

pub fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(service: &str, action: &str) -> Call {
        Call {
            service: service.into(),
            action: action.into(),
            params: Vec::new(),
        }
    }

    #[test]
    fn a_seeded_share_repeats_and_only_matching_calls_are_hit() {
        let settings = || {
            Settings::parse(
                br#"{"seed": 5, "rules": [{"service": "rds", "actions": ["CreateDBInstance"], "share": 0.5, "faults": ["throttle", "lost"]}]}"#,
            )
            .unwrap()
        };
        let run = || {
            let faults = Faults::new(settings());
            let hits: Vec<Option<Fault>> = (0..40)
                .map(|_| faults.decide(&call("rds", "CreateDBInstance")).fault)
                .collect();
            assert_eq!(
                faults.decide(&call("rds", "DescribeDBInstances")),
                Decision::default()
            );
            assert_eq!(
                faults.decide(&call("s3", "CreateDBInstance")),
                Decision::default()
            );
            hits
        };
        let first = run();
        assert_eq!(first, run());
        let hit = first.iter().flatten().count();
        assert!((8..=32).contains(&hit), "{first:?}");
        assert!(first.contains(&Some(Fault::Throttle)) && first.contains(&Some(Fault::Lost)));
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let err = |s: &str| Settings::parse(s.as_bytes()).unwrap_err();
        assert!(err(r#"{"rules": [{"share": 2, "faults": ["500"]}]}"#).contains("between 0 and 1"));
        assert!(err(r#"{"rules": [{"share": 0.5}]}"#).contains("needs faults"));
        assert!(err(r#"{"rules": [{"share": 0.5, "faults": ["404"]}]}"#).contains("404"));
        assert!(err(r#"{"rules": [{"action": "x"}]}"#).contains("action"));
        let named = |fault: &str| {
            err(&format!(
                r#"{{"rules": [{{"share": 1, "faults": [{fault}]}}]}}"#
            ))
        };
        assert!(named(r#"{"code": "LimitExceeded", "status": 200}"#).contains("status 200"));
        assert!(
            named(r#"{"code": "Limit Exceeded", "status": 409}"#).contains("not an AWS error code")
        );
        assert!(named(r#"{"code": "LimitExceeded"}"#).contains("status"));
        assert!(named(r#"{"code": "X", "status": 409, "type": "Sender"}"#).contains("type"));
    }

    #[test]
    fn a_named_error_is_parsed_shown_and_counted_by_its_code() {
        let settings = Settings::parse(
            br#"{"seed": 1, "rules": [{"service": "iam", "actions": ["CreateUser"], "share": 1, "faults": [{"code": "LimitExceeded", "status": 409, "message": "Cannot exceed quota for UsersPerAccount: 5000"}]}]}"#,
        )
        .unwrap();
        let faults = Faults::new(settings);
        let fault = faults.decide(&call("iam", "CreateUser")).fault.unwrap();
        assert_eq!(fault.label(), "LimitExceeded");
        let shown = faults.describe();
        assert_eq!(shown["rules"][0]["faults"][0]["code"], "LimitExceeded");
        assert_eq!(
            shown["counters"][0]["faulted"]["LimitExceeded"], 1,
            "{shown}"
        );
        // What `GET` shows can be put back as it is.
        let again = json!({"rules": shown["rules"]}).to_string();
        assert_eq!(
            Settings::parse(again.as_bytes()).unwrap().rules[0].faults,
            [fault]
        );
    }

    fn body_of(answer: Response<Full<Bytes>>) -> String {
        use http_body_util::BodyExt;
        let Ok(collected) = ready_now(answer.into_body().collect());
        let bytes = collected.to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// The body of a `Full` is ready at once: one poll collects it.
    fn ready_now<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("a full body is ready at once"),
        }
    }

    #[test]
    fn a_named_error_answers_with_its_status_code_and_message_per_api() {
        let named = |status, message: &str| {
            Fault::Named(NamedError {
                code: "DeleteConflict".into(),
                status,
                message: message.into(),
            })
        };
        let conflict = named(409, "Cannot delete entity, must detach all policies first.");
        let iam = error_response(&conflict, &call("iam", "DeleteUser"), "/", false).unwrap();
        assert_eq!(iam.status(), 409);
        let body = body_of(iam);
        assert!(
            body.starts_with("<ErrorResponse xmlns=\"https://iam.amazonaws.com/doc/2010-05-08/\">"),
            "{body}"
        );
        assert!(body.contains("<Type>Sender</Type><Code>DeleteConflict</Code><Message>Cannot delete entity, must detach all policies first.</Message>"), "{body}");
        let s3 = error_response(
            &named(503, "a <b>"),
            &call("s3", "PutObject"),
            "/b/k",
            false,
        )
        .unwrap();
        assert_eq!(s3.status(), 503);
        let body = body_of(s3);
        assert!(body.contains("<Error><Code>DeleteConflict</Code><Message>a &lt;b&gt;</Message><Resource>/b/k</Resource>"), "{body}");
        // Without a message, the code stands for it; from 500 it is the receiver's fault.
        let body = body_of(
            error_response(
                &named(500, ""),
                &call("rds", "CreateDBInstance"),
                "/",
                false,
            )
            .unwrap(),
        );
        assert!(
            body.contains(
                "<Type>Receiver</Type><Code>DeleteConflict</Code><Message>DeleteConflict</Message>"
            ),
            "{body}"
        );
        // A HEAD answer has no body.
        let head = error_response(&conflict, &call("s3", "HeadBucket"), "/b", true).unwrap();
        assert_eq!(
            (head.status().as_u16(), body_of(head)),
            (409, String::new())
        );
    }

    #[test]
    fn errors_have_the_shape_aws_sends() {
        let throttled = error_response(
            &Fault::Throttle,
            &call("rds", "CreateDBInstance"),
            "/",
            false,
        )
        .unwrap();
        assert_eq!(throttled.status(), 400);
        let slow =
            error_response(&Fault::Throttle, &call("s3", "PutObject"), "/b/k", false).unwrap();
        assert_eq!(slow.status(), 503);
        assert!(error_response(&Fault::Lost, &call("s3", "PutObject"), "/b/k", false).is_none());
    }
}

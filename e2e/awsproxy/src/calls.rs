//! Which calls reached the proxy, so that a benchmark or a test can count what a client asked of
//! AWS (`GET /_awsproxy/calls`) and see when it asked (`GET /_awsproxy/calls/log`); `DELETE
//! /_awsproxy/calls` resets both.
//!
//! Every classified call counts once, whether it was forwarded or answered with an injected
//! fault (a client's retries are calls too); moto's own API does not count. The log keeps the
//! last [`LOG_LIMIT`] calls with when they arrived, so that a test can read the intervals
//! between a client's attempts (its retry backoff).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

use crate::classify::Call;
use crate::faults::Fault;

/// How many calls the log keeps (the oldest go first).
pub const LOG_LIMIT: usize = 10_000;

/// One call as the log shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Logged {
    /// When the call arrived, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub service: String,
    pub action: String,
    /// The fault injected into it ([`Fault::label`]), if any.
    pub fault: Option<String>,
}

#[derive(Default)]
pub struct Calls {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    counts: BTreeMap<(String, String), u64>,
    log: VecDeque<Logged>,
}

impl Calls {
    /// Counts and logs `call`, which got `fault`.
    pub fn record(&self, call: &Call, fault: Option<&Fault>) {
        if call.service == "moto" {
            return;
        }
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut inner = self.inner.lock().expect("calls lock");
        *inner
            .counts
            .entry((call.service.clone(), call.action.clone()))
            .or_default() += 1;
        if inner.log.len() == LOG_LIMIT {
            inner.log.pop_front();
        }
        inner.log.push_back(Logged {
            at_ms,
            service: call.service.clone(),
            action: call.action.clone(),
            fault: fault.map(|f| f.label().to_string()),
        });
    }

    /// `{"calls": {"s3": {"CreateBucket": 2, ...}, "iam": {...}}, "total": N}`
    pub fn describe(&self) -> Value {
        let inner = self.inner.lock().expect("calls lock");
        let mut by_service: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for ((service, action), n) in inner.counts.iter() {
            by_service.entry(service).or_default().insert(action, *n);
        }
        json!({"calls": by_service, "total": inner.counts.values().sum::<u64>()})
    }

    /// `{"log": [{"atMs": ..., "service": "iam", "action": "CreateUser", "fault": null}, ...]}`,
    /// oldest first.
    pub fn log(&self) -> Value {
        json!({"log": self.inner.lock().expect("calls lock").log})
    }

    pub fn reset(&self) {
        *self.inner.lock().expect("calls lock") = Inner::default();
    }
}

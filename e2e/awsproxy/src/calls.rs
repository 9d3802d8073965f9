//! How many calls of each service and action reached the proxy, so that a benchmark or a test can
//! count what a client asked of AWS (`GET /_awsproxy/calls`, reset by `DELETE`).
//!
//! Every classified call counts once, whether it was forwarded or answered with an injected
//! fault (a client's retries are calls too); moto's own API does not count.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::classify::Call;

#[derive(Default)]
pub struct Calls {
    counts: Mutex<BTreeMap<(String, String), u64>>,
}

impl Calls {
    pub fn count(&self, call: &Call) {
        if call.service == "moto" {
            return;
        }
        *self
            .counts
            .lock()
            .expect("calls lock")
            .entry((call.service.clone(), call.action.clone()))
            .or_default() += 1;
    }

    /// `{"calls": {"s3": {"CreateBucket": 2, ...}, "iam": {...}}, "total": N}`
    pub fn describe(&self) -> Value {
        let counts = self.counts.lock().expect("calls lock");
        let mut by_service: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for ((service, action), n) in counts.iter() {
            by_service.entry(service).or_default().insert(action, *n);
        }
        json!({"calls": by_service, "total": counts.values().sum::<u64>()})
    }

    pub fn reset(&self) {
        self.counts.lock().expect("calls lock").clear();
    }
}

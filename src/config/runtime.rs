//! `runtime`: how the controllers run (reconciles at once per kind) and how long backend calls may
//! take.

use std::time::Duration;

use serde::Deserialize;

use super::{ControllerKind, duration};
use crate::api::names::format_duration;

/// How the controllers run (audit F17: these were fixed in code).
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Reconciles of one kind that run at once, for every controller (1-64); absent, each
    /// controller's default ([`default_concurrency`]). Each reconcile holds at most one backend
    /// call at a time, so this also bounds the load keeper puts on a backend.
    #[serde(default)]
    pub concurrency: Option<u16>,
    /// Per controller (`tenant`, `bucket`, `database`), what differs from the above.
    #[serde(default)]
    pub controllers: ControllerSettings,
    /// Reconciles of buckets with a drain running or asked for that run at once (1-64, default
    /// [`DEFAULT_DRAIN_CONCURRENCY`]), on workers of their own beside the bucket controller's
    /// `concurrency`: a client-side drain round holds its reconcile for up to a `roundDuration`,
    /// and drains must not take the workers new buckets need.
    #[serde(default)]
    pub drain_concurrency: Option<u16>,
    #[serde(default)]
    pub backend_timeouts: BackendTimeouts,
}

impl RuntimeConfig {
    /// Reconciles of `kind` that run at once: its own setting, else `runtime.concurrency`, else
    /// its default.
    pub fn concurrency_of(&self, kind: ControllerKind) -> u16 {
        self.controllers
            .of(kind)
            .and_then(|c| c.concurrency)
            .or(self.concurrency)
            .unwrap_or_else(|| default_concurrency(kind))
    }

    /// Bucket reconciles with a drain in play that run at once.
    pub fn drain_concurrency(&self) -> u16 {
        self.drain_concurrency.unwrap_or(DEFAULT_DRAIN_CONCURRENCY)
    }
}

/// Drain reconciles at once when nothing is set. Four client-side drains at the default cap of
/// 1,000 deletes a second are 4,000 deletes a second towards one backend; more drains than this
/// take turns, a round each (`make bench`, section "starvation").
pub const DEFAULT_DRAIN_CONCURRENCY: u16 = 4;

/// Settings of single controllers.
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ControllerSettings {
    pub tenant: Option<ControllerRuntime>,
    pub bucket: Option<ControllerRuntime>,
    pub database: Option<ControllerRuntime>,
}

impl ControllerSettings {
    fn of(&self, kind: ControllerKind) -> Option<&ControllerRuntime> {
        match kind {
            ControllerKind::Tenant => self.tenant.as_ref(),
            ControllerKind::Bucket => self.bucket.as_ref(),
            ControllerKind::Database => self.database.as_ref(),
        }
    }
}

/// How one controller runs.
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerRuntime {
    /// Reconciles of this kind that run at once (1-64), instead of `runtime.concurrency`.
    pub concurrency: Option<u16>,
}

/// Reconciles of one kind at once when nothing is set. With a backend 200 ms away (a far
/// region, a busy StorageGRID admin node) a reconcile waits on the network nearly all the
/// time, so the time to bring N objects Ready is their calls × the latency ÷ this (`make
/// bench`, section "latency", in `bench/results.md`); with the backend on the same network, the
/// CPU limits first and more workers change little. Buckets come in the largest numbers and their
/// calls are cheap for S3 and IAM: 16. Tenants and databases: 8, for the StorageGRID admin node
/// (one shared management API) and the RDS API (throttled per account; a database's reconciles
/// are short, it waits for RDS between them). Crossplane runs 10 per controller.
pub fn default_concurrency(kind: ControllerKind) -> u16 {
    match kind {
        ControllerKind::Bucket => 16,
        ControllerKind::Tenant | ControllerKind::Database => 8,
    }
}

/// How long a backend call may take before it counts as a (transient) failure and is retried
/// with backoff, so a stalled backend never holds a reconcile slot for long.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendTimeouts {
    /// Establishing a connection (default 10s).
    #[serde(default = "default_connect_timeout", deserialize_with = "duration")]
    pub connect: Duration,
    /// One request: a StorageGRID management call, one S3 or RDS attempt (default 60s; an RDS
    /// call with the SDK's retries may take three times this).
    #[serde(default = "default_request_timeout", deserialize_with = "duration")]
    pub request: Duration,
}

impl Default for BackendTimeouts {
    fn default() -> Self {
        BackendTimeouts {
            connect: default_connect_timeout(),
            request: default_request_timeout(),
        }
    }
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(60)
}

impl RuntimeConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        let per_controller = [
            ("tenant", &self.controllers.tenant),
            ("bucket", &self.controllers.bucket),
            ("database", &self.controllers.database),
        ]
        .into_iter()
        .filter_map(|(name, c)| {
            Some((
                format!("runtime.controllers.{name}.concurrency"),
                c.as_ref()?.concurrency?,
            ))
        });
        let all = self
            .concurrency
            .map(|c| ("runtime.concurrency".to_string(), c));
        let drains = self
            .drain_concurrency
            .map(|c| ("runtime.drainConcurrency".to_string(), c));
        for (field, concurrency) in all.into_iter().chain(drains).chain(per_controller) {
            if !(1..=64).contains(&concurrency) {
                return Err(format!(
                    "{field}: must be between 1 and 64, got {concurrency}"
                ));
            }
        }
        let BackendTimeouts { connect, request } = self.backend_timeouts;
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&connect) {
            return Err(format!(
                "runtime.backendTimeouts.connect: must be between 1s and 1m, got {}",
                format_duration(connect)
            ));
        }
        if !(Duration::from_secs(5)..=Duration::from_secs(600)).contains(&request) {
            return Err(format!(
                "runtime.backendTimeouts.request: must be between 5s and 10m, got {}",
                format_duration(request)
            ));
        }
        Ok(())
    }
}

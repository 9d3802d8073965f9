//! keeper's figures for many objects of one kind: apply N to Ready, stay idle, delete them all;
//! with the API requests keeper made for them (from kube-apiserver's audit log), the backend
//! calls (from the AWS proxy's and the StorageGRID emulator's counters) and its CPU time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use serde_json::Value;

use crate::lab::{GROUP_VERSION, Lab, Process, Requests};

/// How long after the last object turned Ready the idle period starts.
pub const SETTLE: Duration = Duration::from_secs(5);

/// What one kind's run measured.
#[derive(Debug)]
pub struct Run {
    pub n: usize,
    pub to_ready: Duration,
    pub deleted: Duration,
    pub ready_requests: Requests,
    pub delete_requests: Requests,
    pub ready_calls: BTreeMap<String, u64>,
    pub delete_calls: BTreeMap<String, u64>,
    /// keeper's API requests and backend calls while everything was Ready and nothing changed.
    pub idle: Option<(Duration, Requests, BTreeMap<String, u64>)>,
    /// CPU milliseconds per reconcile over the whole run, and the reconciles.
    pub cpu_ms_per_reconcile: f64,
    pub reconciles: f64,
    /// keeper's mean reconcile time by controller, and its mean backend call time by call.
    pub reconcile_times: String,
    pub backend_times: String,
    /// CPU seconds each process used to Ready and to deletion.
    pub cpu_to_ready: String,
    pub cpu_to_delete: String,
}

pub fn is_ready(obj: &Value) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Creates `objects` in `namespace` (16 requests at a time, as the administrator: the floor
/// has no `kubectl apply` either), waits until all are Ready, idles for `idle` if asked, then
/// deletes them with one DELETE of the collection and waits until they are gone.
pub async fn run(
    lab: &Lab,
    keeper: &Process,
    namespace: &str,
    plural: &str,
    objects: Vec<Value>,
    idle: Option<Duration>,
    timeout: Duration,
) -> anyhow::Result<Run> {
    let n = objects.len();
    let path = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/{plural}");
    lab.clear_counters().await?;
    let before = keeper.mark(&lab.http).await?;
    let cpu_before = lab.cpu_use(keeper);
    let started = Instant::now();
    create_all(lab, plural, objects, CREATES_IN_FLIGHT).await?;
    let ready_at = lab
        .wait_all(namespace, plural, n, timeout, is_ready)
        .await?;
    let to_ready = ready_at - started;
    let ready_requests = lab.keeper_requests().await?;
    let ready_calls = lab.backend_calls().await?;
    let cpu_ready = lab.cpu_use(keeper);
    let idle = match idle {
        Some(idle) => {
            // What the last changes set off (a debounced tenant reconcile) is not idleness.
            tokio::time::sleep(SETTLE).await;
            lab.clear_counters().await?;
            tokio::time::sleep(idle).await;
            Some((
                idle,
                lab.keeper_requests().await?,
                lab.backend_calls().await?,
            ))
        }
        None => None,
    };
    lab.clear_counters().await?;
    let cpu_delete = lab.cpu_use(keeper);
    let started = Instant::now();
    lab.delete(&path).await?;
    let gone_at = lab
        .wait_all(namespace, plural, 0, timeout, |_| true)
        .await?;
    let deleted = gone_at - started;
    let delete_requests = lab.keeper_requests().await?;
    let delete_calls = lab.backend_calls().await?;
    let cpu_deleted = lab.cpu_use(keeper);
    let after = keeper.mark(&lab.http).await?;
    let (cpu_ms_per_reconcile, reconciles) = before.per_reconcile(&after);
    let reconcile_times = before.means(&after, "keeper_reconcile_duration_seconds");
    let backend_times = before.means(&after, "keeper_backend_request_duration_seconds");
    Ok(Run {
        n,
        to_ready,
        deleted,
        ready_requests,
        delete_requests,
        ready_calls,
        delete_calls,
        idle,
        cpu_ms_per_reconcile,
        reconciles,
        reconcile_times,
        backend_times,
        cpu_to_ready: cpu_before.since(&cpu_ready),
        cpu_to_delete: cpu_delete.since(&cpu_deleted),
    })
}

/// How many creates [`run`] (and the sections that create objects as it does) keep in flight.
pub const CREATES_IN_FLIGHT: usize = 16;

/// Creates `objects` of resource `plural` (keeper's group), each in the namespace its metadata
/// names, `in_flight` requests at a time, as the administrator.
pub async fn create_all(
    lab: &Lab,
    plural: &str,
    objects: impl IntoIterator<Item = Value>,
    in_flight: usize,
) -> anyhow::Result<()> {
    futures::stream::iter(objects)
        .map(|obj| async move {
            let namespace = obj["metadata"]["namespace"]
                .as_str()
                .context("an object without a namespace")?;
            let path = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/{plural}");
            lab.create(&path, &obj).await.map(drop)
        })
        .buffer_unordered(in_flight)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The sum of the counts, and the counts as `name n` text, divided by `per`.
pub fn calls_text(calls: &BTreeMap<String, u64>, per: f64) -> (f64, String) {
    let total = calls.values().sum::<u64>() as f64 / per;
    let text = calls
        .iter()
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / per))
        .collect::<Vec<_>>()
        .join(", ");
    (total, text)
}

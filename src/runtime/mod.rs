//! Mechanics every controller shares, so that no controller re-implements them: the finalizer
//! flow, writing a reconcile's [`Outcome`] (one status patch, events, consumed annotations), the
//! one error policy, per-object exponential backoff, reconcile metrics and logging, and the
//! per-kind gauges.
//!
//! A controller implements [`Reconciler`]: `apply` for a live object and `cleanup` for one being
//! deleted, both returning an [`Outcome`] (reporting as data) or a classified error. It talks to
//! Kubernetes only through the [`crate::cluster::Kube`] seam in its [`Context`], and to its
//! backend through a [`Connect`]or it is generic over.

mod backoff;
pub mod conditions;
pub mod connect;
mod drive;
mod failure;
pub mod gauges;
pub mod kinds;
pub mod lanes;
pub mod outcome;
pub mod policy;
pub mod quarantine;
mod requeues;
mod status;
mod uid;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use tracing::Instrument;

pub use crate::cluster::Note;
pub use backoff::Backoff;
pub use connect::Connect;
pub use drive::{controller, run};
pub use failure::{ControllerFailure, Failure};
pub use kinds::Keeper;
pub use lanes::Lane;
pub use outcome::{KeeperStatus, Next, Outcome};
pub use uid::Uid;

use crate::cluster::informer;
use crate::cluster::{Kube, Target};
use crate::config::OperatorConfig;
use crate::error::ErrorClass;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::providers::Providers;
use crate::runtime::policy::{Policy, policy, report_now};

/// What one manager process shares between its controllers.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    pub config: Arc<OperatorConfig>,
    pub metrics: Arc<Metrics>,
    /// keeper's own namespace: where Secrets named by the configuration live by default.
    pub operator_namespace: String,
    /// The Kubernetes seam every controller goes through (caches for reads).
    pub kube: Arc<dyn Kube>,
    /// One watch and one cache per kind, which controllers are triggered from and the seam reads.
    pub informers: Arc<informer::Informers>,
    /// One set of clients per configured provider.
    pub providers: Arc<Providers>,
    /// Whether this process leads (only the leader reconciles).
    pub leadership: Leadership,
}

/// An error a reconciler can return, classified once.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// A short, low-cardinality label for `keeper_reconcile_errors_total{reason}`.
    fn reason(&self) -> &'static str;
    /// What the error means; [`policy`](mod@policy) turns it into backoff, a requeue or a Failed
    /// condition.
    fn class(&self) -> ErrorClass;
    /// The `Ready=False` condition reason (and event reason) a permanent error shows.
    fn condition_reason(&self) -> &'static str;
}

/// The status type of a reconciler's kind.
pub type StatusOf<R> = <<R as Reconciler>::Resource as Keeper>::Status;

/// One controller's business logic; everything else is shared.
pub trait Reconciler: Send + Sync + Sized + 'static {
    type Resource: Keeper;
    type Error: ReconcileError;

    /// Controller name used in metrics, events and logs, such as `s3bucket`.
    const NAME: &'static str;
    /// Which controller it is in the configuration and on the command line.
    const KIND: crate::config::ControllerKind;
    /// The finalizer that keeps the object until its backend resource is cleaned up.
    const FINALIZER: &'static str;
    /// How long triggers of one object are gathered into one reconcile (none by default).
    const DEBOUNCE: Duration = Duration::ZERO;

    /// Which of the controller's [`lanes`] reconciles `obj` (all on the main lane by default).
    fn lane(_obj: &Self::Resource) -> Lane {
        Lane::Main
    }

    /// Long-lane reconciles that run at once, on workers beside the controller's `concurrency`
    /// (none by default).
    fn long_turns(_config: &OperatorConfig) -> u16 {
        0
    }

    /// Brings the backend in line with a live object. Runs only once the finalizer is in place.
    fn apply(
        &self,
        obj: Arc<Self::Resource>,
        cx: &Context<Self>,
    ) -> impl Future<Output = Result<Outcome<StatusOf<Self>>, Self::Error>> + Send;

    /// Cleans up after an object being deleted; [`Next::Release`] lets the finalizer go. Must be
    /// idempotent and must tolerate `apply` never having run.
    fn cleanup(
        &self,
        obj: Arc<Self::Resource>,
        cx: &Context<Self>,
    ) -> impl Future<Output = Result<Outcome<StatusOf<Self>>, Self::Error>> + Send;
}

/// A controller's context: the shared pieces, its reconciler, its backoff state and what its
/// workers have started on.
pub struct Context<R: Reconciler> {
    pub shared: Shared,
    pub reconciler: R,
    backoff: Backoff,
    started: gauges::Started,
    lanes: lanes::Lanes,
    requeues: Arc<requeues::Requeues>,
}

impl<R: Reconciler> Context<R> {
    pub fn new(shared: Shared, reconciler: R) -> Self {
        let lanes = lanes::Lanes::new(
            shared.config.runtime.concurrency_of(R::KIND),
            R::long_turns(&shared.config),
        );
        Context {
            shared,
            reconciler,
            backoff: Backoff::default(),
            started: gauges::Started::default(),
            lanes,
            requeues: Arc::default(),
        }
    }

    /// The Kubernetes seam.
    pub fn kube(&self) -> &dyn Kube {
        self.shared.kube.as_ref()
    }

    /// Writes `status` now, before a backend call that must find it recorded after a crash (an
    /// account id, a password's existence, a final snapshot id). Everything else is reported
    /// through the [`Outcome`]. Writes nothing when nothing changed.
    pub async fn checkpoint(
        &self,
        obj: &R::Resource,
        status: &StatusOf<R>,
    ) -> Result<(), kube::Error> {
        write_status(self.kube(), obj, status).await
    }

    /// Like [`Context::checkpoint`], but only if the object did not change since `obj` was read
    /// (its resourceVersion is the patch's precondition): `Ok(false)` when another writer changed
    /// it first, and nothing was written.
    pub async fn checkpoint_if_unchanged(
        &self,
        obj: &R::Resource,
        status: &StatusOf<R>,
    ) -> Result<bool, kube::Error> {
        let Some(mut patch) = status_patch(obj, status) else {
            return Ok(true);
        };
        patch["metadata"] = serde_json::json!({"resourceVersion": obj.meta().resource_version});
        match self.kube().patch_status(&Target::of(obj), patch).await {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Writes `status` as a merge diff against the object's status (explicit `null`s for removed
/// fields, so a finished drain's fields really go). No diff, no write: steady state writes
/// nothing.
async fn write_status<K: Keeper>(
    kube: &dyn Kube,
    obj: &K,
    status: &K::Status,
) -> Result<(), kube::Error> {
    match status_patch(obj, status) {
        None => Ok(()),
        Some(patch) => kube.patch_status(&Target::of(obj), patch).await,
    }
}

/// The merge patch that takes `obj`'s status to `status`, or `None` when they do not differ.
fn status_patch<K: Keeper>(obj: &K, status: &K::Status) -> Option<Value> {
    let current = obj
        .status()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let desired = serde_json::to_value(status).unwrap_or(Value::Null);
    status::merge_diff(&current, &desired).map(|diff| serde_json::json!({ "status": diff }))
}

/// The one place an outcome is written: the status (one patch, only when changed), the events
/// (each distinct note once), the consumed annotations (with `test` operations, so a value
/// changed meanwhile is a new request and stays) and the annotations keeper sets (in the same
/// JSON patch, each `test`ed against the value read, so a concurrent write fails and retries).
pub async fn write_outcome<K: Keeper>(
    kube: &dyn Kube,
    obj: &K,
    outcome: &Outcome<K::Status>,
) -> Result<(), kube::Error> {
    write_status(kube, obj, &outcome.status).await?;
    publish_notes(kube, obj, &outcome.notes).await;
    let target = Target::of(obj);
    let annotations = obj.meta().annotations.clone().unwrap_or_default();
    let mut ops = Vec::new();
    for key in &outcome.remove_annotations {
        if let Some(value) = annotations.get(*key) {
            let path = annotation_path(key);
            ops.push(serde_json::json!({"op": "test", "path": path, "value": value}));
            ops.push(serde_json::json!({"op": "remove", "path": path}));
        }
    }
    ops.extend(set_annotation_ops(obj, &outcome.set_annotations));
    if !ops.is_empty() {
        let patch = serde_json::from_value(Value::Array(ops)).expect("well-formed JSON patch");
        kube.patch_json(&target, patch).await?;
    }
    Ok(())
}

/// Publishes each distinct note once, as an event on `obj`.
async fn publish_notes<K: Keeper>(kube: &dyn Kube, obj: &K, notes: &[Note]) {
    let target = Target::of(obj);
    let mut published: Vec<&Note> = Vec::new();
    for note in notes {
        if !published.contains(&note) {
            kube.publish(&target, note).await;
            published.push(note);
        }
    }
}

fn annotation_path(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

/// JSON patch operations that set `set` on `obj`'s annotations, each `test`ed against the value
/// read (so a concurrent write fails and retries); none for values already there.
fn set_annotation_ops<K: Resource>(obj: &K, set: &[(&'static str, String)]) -> Vec<Value> {
    let present = obj.meta().annotations.as_ref();
    let annotations = present.cloned().unwrap_or_default();
    let mut set: Vec<&(&'static str, String)> = set
        .iter()
        .filter(|(key, value)| annotations.get(*key) != Some(value))
        .collect();
    let mut ops = Vec::new();
    if present.is_none() && !set.is_empty() {
        // No annotations at all: create the map with every value at once.
        let map: serde_json::Map<String, Value> = set
            .drain(..)
            .map(|(key, value)| (key.to_string(), Value::String(value.clone())))
            .collect();
        ops.push(serde_json::json!({"op": "test", "path": "/metadata/annotations", "value": null}));
        ops.push(serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": map}));
    }
    for (key, value) in set {
        // `test` for null succeeds on a missing key (kube-apiserver's semantics).
        let path = annotation_path(key);
        let current = annotations
            .get(*key)
            .map_or(Value::Null, |v| v.as_str().into());
        ops.push(serde_json::json!({"op": "test", "path": path, "value": current}));
        ops.push(serde_json::json!({"op": "add", "path": path, "value": value}));
    }
    ops
}

/// Errors of the shared flow around a reconciler.
#[derive(Debug, thiserror::Error)]
pub enum Error<E: ReconcileError> {
    #[error(transparent)]
    Reconciler(E),
    #[error("failed to write to the Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
}

impl<E: ReconcileError> Error<E> {
    fn reason(&self) -> &'static str {
        match self {
            Error::Reconciler(e) => e.reason(),
            Error::Kube(_) => "kube",
        }
    }
}

/// What the finalizer flow decides before any business logic runs (pure, unit-tested).
#[derive(Debug, PartialEq, Eq)]
enum Step {
    AddFinalizer,
    Apply,
    Cleanup,
    /// Being deleted without our finalizer: nothing of ours is left to do.
    Ignore,
}

fn next_step(deleting: bool, has_finalizer: bool) -> Step {
    match (deleting, has_finalizer) {
        (false, false) => Step::AddFinalizer,
        (false, true) => Step::Apply,
        (true, true) => Step::Cleanup,
        (true, false) => Step::Ignore,
    }
}

fn json_patch(ops: Value) -> json_patch::Patch {
    serde_json::from_value(ops).expect("well-formed JSON patch")
}

/// The finalizer flow: the finalizer is added before anything is created, never to an object
/// being deleted, and removed only after cleanup releases it. JSON patches carry `test`
/// operations so that a concurrent change of the finalizer list fails and retries instead of
/// clobbering another controller's finalizer. Returns when the object is to be reconciled again
/// (`None`: when it changes).
async fn reconcile<R: Reconciler>(
    obj: Arc<R::Resource>,
    cx: Arc<Context<R>>,
) -> Result<Option<Duration>, Error<R::Error>> {
    let kube = cx.kube();
    let target = Target::of(obj.as_ref());
    let finalizers = obj.finalizers().to_vec();
    let position = finalizers.iter().position(|f| f == R::FINALIZER);
    let deleting = obj.meta().deletion_timestamp.is_some();
    let result = match next_step(deleting, position.is_some()) {
        Step::AddFinalizer => {
            let ops = if obj.meta().finalizers.is_none() {
                vec![
                    serde_json::json!({"op": "test", "path": "/metadata/finalizers", "value": null}),
                    serde_json::json!({"op": "add", "path": "/metadata/finalizers", "value": [R::FINALIZER]}),
                ]
            } else {
                vec![
                    serde_json::json!({"op": "test", "path": "/metadata/finalizers", "value": finalizers}),
                    serde_json::json!({"op": "add", "path": "/metadata/finalizers/-", "value": R::FINALIZER}),
                ]
            };
            kube.patch_json(&target, json_patch(Value::Array(ops)))
                .await
                .map_err(Error::Kube)?;
            // The patch triggers the next reconcile, which applies.
            return Ok(None);
        }
        Step::Ignore => {
            cx.started.forget(obj.as_ref());
            return Ok(None);
        }
        Step::Apply => cx.reconciler.apply(obj.clone(), &cx).await,
        Step::Cleanup => cx.reconciler.cleanup(obj.clone(), &cx).await,
    };
    let outcome = match result {
        Ok(mut outcome) => {
            // An object on its way out is not told it is synced: that write would be its last.
            if !matches!(outcome.next, Next::Release) {
                outcome.succeeded(obj.meta().generation);
            }
            outcome
        }
        Err(e) => match policy(e.class()) {
            Policy::Backoff => {
                report_retrying(&cx, obj.as_ref(), &e).await;
                return Err(Error::Reconciler(e));
            }
            Policy::Fail => {
                tracing::warn!(error = %e, "reconcile failed permanently");
                let mut outcome =
                    Outcome::new(obj.status().cloned().unwrap_or_default(), Next::AwaitChange);
                outcome
                    .status
                    .set_observed_generation(obj.meta().generation);
                outcome.fail(
                    e.condition_reason(),
                    e.to_string(),
                    obj.meta().generation,
                    deleting,
                );
                outcome
            }
        },
    };
    // With our finalizer the object's last, the release lets the API server remove it: a status
    // or annotation written first would be read by nobody, and would double the API writes of a
    // deletion. Its events outlive it, so they are published.
    let last_finalizer = finalizers.len() == 1;
    if deleting && last_finalizer && outcome.next == Next::Release {
        publish_notes(kube, obj.as_ref(), &outcome.notes).await;
    } else {
        write_outcome(kube, obj.as_ref(), &outcome)
            .await
            .map_err(Error::Kube)?;
    }
    Ok(match outcome.next {
        Next::Requeue(after) => Some(after),
        Next::AwaitChange => None,
        Next::Release if deleting => {
            let index = position.expect("cleanup runs only with our finalizer");
            let path = format!("/metadata/finalizers/{index}");
            let patch = serde_json::json!([
                {"op": "test", "path": path, "value": R::FINALIZER},
                {"op": "remove", "path": path},
            ]);
            kube.patch_json(&target, json_patch(patch))
                .await
                .map_err(Error::Kube)?;
            cx.started.forget(obj.as_ref());
            None
        }
        Next::Release => {
            tracing::error!("a live object's reconcile asked to release its finalizer; ignored");
            Some(RESYNC)
        }
    })
}

/// Shows a failure on the object ([`Outcome::retrying`]) when [`report_now`] says so, written
/// only when its reason changes. Best effort: a report that cannot be written (the API server is
/// what fails) is logged, and the retry goes on.
async fn report_retrying<R: Reconciler>(cx: &Context<R>, obj: &R::Resource, error: &R::Error) {
    let attempt = cx.backoff.failures(&object_key(obj)) + 1;
    let status = obj.status().cloned().unwrap_or_default();
    if !report_now(attempt, status.conditions()) {
        return;
    }
    let mut outcome = Outcome::new(status, Next::AwaitChange);
    outcome.retrying(
        error.condition_reason(),
        &error.to_string(),
        obj.meta().generation,
    );
    if let Err(e) = write_outcome(cx.kube(), obj, &outcome).await {
        tracing::warn!(error = %e, "could not show the failure on the object");
    }
}

fn object_key<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

/// Wraps [`reconcile`] with what every reconcile gets: a span naming the object, metrics, a
/// reset of the object's backoff on success, and its next reconcile kept in [`requeues`] (a
/// failure's retry is the error policy's, in kube's queue).
async fn observed<R: Reconciler>(
    obj: Arc<R::Resource>,
    cx: Arc<Context<R>>,
) -> Result<Action, Error<R::Error>> {
    if !cx.shared.leadership.is_leader() {
        // A standby keeps its caches warm but never acts; on taking over it reconciles every
        // object (`Leadership::acquired`), so nothing seen meanwhile is lost.
        return Ok(Action::await_change());
    }
    let key = object_key(obj.as_ref());
    let Some(_admitted) = cx.lanes.admit(R::lane(&obj), &key).await else {
        // Not its turn on the long lane: asked again shortly, holding no worker meanwhile. Not a
        // reconcile (no metric, its backoff kept).
        tracing::debug!(controller = R::NAME, object = %key, "waiting for a long-lane turn");
        return Ok(Action::requeue(lanes::TURN_RETRY));
    };
    let started = Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        kind = %R::Resource::kind(&()),
        namespace = %obj.namespace().unwrap_or_default(),
        name = %obj.name_any(),
    );
    cx.started.record(obj.as_ref());
    // A leader that steps down stops what it is doing at once, not only new reconciles: a drain
    // round or a deletion under way would otherwise go on beside the next leader's. Dropping the
    // reconcile stops it at its next await, as killing the process would, which every step
    // already survives; the next leader reconciles every object.
    let result = tokio::select! {
        result = reconcile(obj, cx.clone()).instrument(span.clone()) => result,
        () = cx.shared.leadership.lost() => {
            span.in_scope(|| tracing::warn!("no longer the leader: reconcile stopped"));
            return Ok(Action::await_change());
        }
    };
    match &result {
        Ok(after) => {
            cx.backoff.reset(&key);
            cx.requeues.set(&key, *after);
            cx.shared.metrics.reconciled(R::NAME, started, None);
        }
        Err(e) => {
            cx.requeues.set(&key, None);
            cx.shared
                .metrics
                .reconciled(R::NAME, started, Some(e.reason()));
            span.in_scope(|| tracing::warn!(error = %e, "reconcile failed"));
        }
    }
    result.map(|_| Action::await_change())
}

/// Retries a failed object with its own exponential backoff, and says how long it waits
/// (`keeper_reconcile_retry_delay_seconds`).
fn error_policy<R: Reconciler>(
    obj: Arc<R::Resource>,
    _error: &Error<R::Error>,
    cx: Arc<Context<R>>,
) -> Action {
    let delay = cx.backoff.next_delay(&object_key(obj.as_ref()));
    cx.shared.metrics.retry_scheduled(R::NAME, delay);
    Action::requeue(delay)
}

/// Default requeue of a healthy object, so that drift on the backend is noticed.
pub const RESYNC: Duration = Duration::from_secs(300);

#[cfg(test)]
pub mod testing;

#[cfg(test)]
mod tests;

//! The reconcile flow before reporting-as-data, kept only while the controllers move to
//! [`super::Reconciler`]; removed once the last one has.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Backoff;
use super::status::patch_status;

use super::Shared;
use crate::server::Readiness;

/// An error a reconciler can return.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// A short, low-cardinality label for `keeper_reconcile_errors_total{reason}`.
    fn reason(&self) -> &'static str;
}

/// The outcome of a cleanup step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// The backend resource is verifiably gone (or retained by policy): remove the finalizer.
    Done,
    /// Cleanup cannot finish yet (blocked or in progress): keep the finalizer and look again.
    Wait(Action),
}

/// One controller's business logic; everything else is shared.
pub trait Reconciler: Send + Sync + Sized + 'static {
    type Resource: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;
    type Error: ReconcileError;

    /// Controller name used in metrics, events and logs, such as `s3bucket`.
    const NAME: &'static str;
    /// The finalizer that keeps the object until its backend resource is cleaned up.
    const FINALIZER: &'static str;

    /// Brings the backend in line with a live object. Runs only once the finalizer is in place.
    fn apply(
        &self,
        obj: Arc<Self::Resource>,
        ctx: &Context<Self>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Cleans up after an object being deleted. Must be idempotent and must tolerate `apply`
    /// never having run.
    fn cleanup(
        &self,
        obj: Arc<Self::Resource>,
        ctx: &Context<Self>,
    ) -> impl Future<Output = Result<Cleanup, Self::Error>> + Send;
}

/// A controller's context: the shared pieces, its event recorder and its backoff state.
pub struct Context<R: Reconciler> {
    pub shared: Shared,
    pub reconciler: R,
    recorder: Recorder,
    backoff: Backoff,
}

impl<R: Reconciler> Context<R> {
    pub fn new(shared: Shared, reconciler: R) -> Self {
        let recorder = Recorder::new(
            shared.client.clone(),
            Reporter {
                controller: format!("keeper-{}", R::NAME),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Context {
            shared,
            reconciler,
            recorder,
            backoff: Backoff::default(),
        }
    }

    /// The API of the reconciled kind in the object's namespace.
    pub fn api(&self, obj: &R::Resource) -> Api<R::Resource> {
        Api::namespaced(
            self.shared.client.clone(),
            &obj.namespace().unwrap_or_default(),
        )
    }

    /// Publishes an event about `obj`. A failure to publish is logged, not returned: events
    /// inform, they must not stop a reconcile.
    pub async fn publish(
        &self,
        obj: &R::Resource,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "failed to publish event");
        }
    }

    /// Writes `status` if it differs from the object's current status (so that steady state
    /// makes no writes).
    pub async fn update_status<S: Serialize>(
        &self,
        obj: &R::Resource,
        status: &S,
    ) -> Result<bool, kube::Error> {
        patch_status(&self.api(obj), obj, status).await
    }
}

/// Errors of the shared flow around a reconciler.
#[derive(Debug, thiserror::Error)]
pub enum Error<E: ReconcileError> {
    #[error(transparent)]
    Reconciler(E),
    #[error("failed to update finalizers: {0}")]
    Finalizer(#[source] kube::Error),
}

impl<E: ReconcileError> Error<E> {
    fn reason(&self) -> &'static str {
        match self {
            Error::Reconciler(e) => e.reason(),
            Error::Finalizer(_) => "finalizer",
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

/// The finalizer flow: the finalizer is added before anything is created, never to an object
/// being deleted, and removed only after cleanup reports `Done`. JSON patches carry `test`
/// operations so that a concurrent change of the finalizer list fails and retries instead of
/// clobbering another controller's finalizer.
async fn reconcile<R: Reconciler>(
    obj: Arc<R::Resource>,
    ctx: Arc<Context<R>>,
) -> Result<Action, Error<R::Error>> {
    let api = ctx.api(&obj);
    let finalizers = obj.finalizers().to_vec();
    let position = finalizers.iter().position(|f| f == R::FINALIZER);
    match next_step(obj.meta().deletion_timestamp.is_some(), position.is_some()) {
        Step::AddFinalizer => {
            let patch = if obj.meta().finalizers.is_none() {
                serde_json::json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": [R::FINALIZER]},
                ])
            } else {
                serde_json::json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                    {"op": "add", "path": "/metadata/finalizers/-", "value": R::FINALIZER},
                ])
            };
            json_patch::<R>(&api, &obj, patch).await?;
            // The patch triggers the next reconcile, which applies.
            Ok(Action::await_change())
        }
        Step::Apply => ctx
            .reconciler
            .apply(obj, &ctx)
            .await
            .map_err(Error::Reconciler),
        Step::Cleanup => match ctx
            .reconciler
            .cleanup(obj.clone(), &ctx)
            .await
            .map_err(Error::Reconciler)?
        {
            Cleanup::Wait(action) => Ok(action),
            Cleanup::Done => {
                let index = position.expect("cleanup runs only with our finalizer");
                let path = format!("/metadata/finalizers/{index}");
                let patch = serde_json::json!([
                    {"op": "test", "path": path, "value": R::FINALIZER},
                    {"op": "remove", "path": path},
                ]);
                json_patch::<R>(&api, &obj, patch).await?;
                Ok(Action::await_change())
            }
        },
        Step::Ignore => Ok(Action::await_change()),
    }
}

async fn json_patch<R: Reconciler>(
    api: &Api<R::Resource>,
    obj: &R::Resource,
    patch: serde_json::Value,
) -> Result<(), Error<R::Error>> {
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("well-formed JSON patch");
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Already gone: removing our finalizer was the last thing holding it.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(Error::Finalizer(e)),
    }
}

fn object_key<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

/// Wraps [`reconcile`] with what every reconcile gets: a span naming the object, metrics, and
/// a reset of the object's backoff on success.
async fn observed<R: Reconciler>(
    obj: Arc<R::Resource>,
    ctx: Arc<Context<R>>,
) -> Result<Action, Error<R::Error>> {
    if !ctx.shared.leadership.is_leader() {
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        kind = %R::Resource::kind(&()),
        namespace = %obj.namespace().unwrap_or_default(),
        name = %obj.name_any(),
    );
    let key = object_key(obj.as_ref());
    let result = reconcile(obj, ctx.clone()).instrument(span.clone()).await;
    match &result {
        Ok(_) => {
            ctx.backoff.reset(&key);
            ctx.shared.metrics.reconciled(R::NAME, started, None);
        }
        Err(e) => {
            ctx.shared
                .metrics
                .reconciled(R::NAME, started, Some(e.reason()));
            span.in_scope(|| tracing::warn!(error = %e, "reconcile failed"));
        }
    }
    result
}

/// Retries a failed object with its own exponential backoff.
fn error_policy<R: Reconciler>(
    obj: Arc<R::Resource>,
    _error: &Error<R::Error>,
    ctx: Arc<Context<R>>,
) -> Action {
    Action::requeue(ctx.backoff.next_delay(&object_key(obj.as_ref())))
}

/// Runs a controller until `shutdown` is cancelled; in-flight reconciles finish first.
pub async fn run<R: Reconciler>(
    controller: Controller<R::Resource>,
    ctx: Arc<Context<R>>,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let store = controller.store();
    tokio::spawn(async move {
        // `Store::wait_until_ready` wakes only the last task that polled it, and the controller's
        // own runner polls it too, so a single await here can sleep forever. Re-polling on a short
        // timer sees the memoized readiness.
        loop {
            match tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await {
                Ok(Ok(())) => {
                    tracing::info!(controller = R::NAME, "cache synced");
                    readiness.controller_synced();
                    break;
                }
                Ok(Err(_)) => break,
                Err(_elapsed) => continue,
            }
        }
    });
    tracing::info!(controller = R::NAME, "starting controller");
    let acquired = ctx.shared.leadership.acquired();
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(4))
        .reconcile_all_on(acquired)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(observed::<R>, error_policy::<R>, ctx)
        .for_each(|result| async move {
            if let Err(kube::runtime::controller::Error::QueueError(e)) = result {
                tracing::warn!(controller = R::NAME, error = %e, "watch failed; retrying");
            }
        })
        .await;
    tracing::info!(controller = R::NAME, "controller stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finalizer_comes_before_anything_else() {
        assert_eq!(next_step(false, false), Step::AddFinalizer);
        assert_eq!(next_step(false, true), Step::Apply);
    }

    #[test]
    fn deletion_cleans_up_only_with_our_finalizer() {
        assert_eq!(next_step(true, true), Step::Cleanup);
        // Never add a finalizer to an object already being deleted.
        assert_eq!(next_step(true, false), Step::Ignore);
    }
}

//! Builds a kind's controller (what wakes an object) and runs it with the shared reconcile,
//! error policy and gauges.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use super::{
    Context, Keeper, KeeperStatus, Reconciler, conditions, error_policy, gauges, observed,
    quarantine,
};
use crate::cluster::{informer, triggers, written_content};
use crate::metrics::Metrics;
use crate::server::Readiness;

/// Registers the gauges every kind has, from the controller's cache: `keeper_<kinds>{phase}`
/// and `keeper_deletion_blocked{kind}`.
fn register_kind_gauges<K: Keeper>(metrics: &Metrics, store: Store<K>) {
    metrics.register(gauges::StoreGauge::new(
        K::PHASE_GAUGE,
        K::PHASE_HELP,
        store.clone(),
        &[],
        "phase",
        K::PHASES,
        |obj: &K| Some(obj.phase()),
    ));
    metrics.register(gauges::deletion_blocked(&K::kind(&()), store, |obj: &K| {
        obj.status()
            .is_some_and(|s| conditions::is_true(s.conditions(), conditions::DELETION_BLOCKED))
    }));
}

/// Registers `keeper_work_queue_depth{controller}` for `R`, from its cache and what its workers
/// started on.
fn register_queue_depth<R: Reconciler>(cx: &Context<R>, store: Store<R::Resource>) {
    cx.shared.metrics.register(gauges::queue_depth(
        R::NAME,
        store,
        cx.started.clone(),
        cx.shared.leadership.clone(),
    ));
}

/// A controller of `K` over its informer, reconciling an object when something asks for work
/// on it ([`triggers::requested`]: not its own status writes), when it is first seen, and when
/// someone else edits or deletes a Secret keeper wrote for it ([`secret_owner`]): the Secret is
/// written again at once instead of at the next resync.
pub fn controller<K: Keeper>(informers: &informer::Informers) -> Controller<K>
where
    K::DynamicType: Default,
{
    let objects = K::informer(informers);
    let controller = Controller::for_stream(
        triggers::changed(objects.changes(), triggers::requested::<K>),
        objects.store(),
    );
    let store = controller.store();
    controller.watches_stream(
        triggers::edited(informers.managed_secrets().changes(), |packed| {
            written_content(&packed.unpack())
        }),
        move |packed| secret_owner(&store, &packed.unpack()),
    )
}

/// The object of `store` that `secret` names as its controlling owner, unless it is being
/// deleted: its cleanup deletes or lets go of its Secrets, and has nothing to write again.
pub(super) fn secret_owner<K: Keeper>(store: &Store<K>, secret: &Secret) -> Option<ObjectRef<K>> {
    let namespace = secret.namespace()?;
    let owner = secret.owner_references().iter().find(|r| {
        r.controller == Some(true) && r.kind == K::kind(&()) && r.api_version == K::api_version(&())
    })?;
    let reference = ObjectRef::new(&owner.name).within(&namespace);
    let live = store.get(&reference).is_some_and(|obj| {
        obj.meta().uid.as_deref() == Some(owner.uid.as_str())
            && obj.meta().deletion_timestamp.is_none()
    });
    live.then_some(reference)
}

/// Runs a controller until `shutdown` is cancelled; in-flight reconciles finish first.
pub async fn run<R: Reconciler>(
    controller: Controller<R::Resource>,
    cx: Arc<Context<R>>,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let store = controller.store();
    register_kind_gauges(&cx.shared.metrics, store.clone());
    register_queue_depth(&cx, store.clone());
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
    let (kube, informers, leadership) = (
        cx.shared.kube.clone(),
        cx.shared.informers.clone(),
        cx.shared.leadership.clone(),
    );
    let reporting = shutdown.clone();
    tokio::spawn(async move {
        let informer = R::Resource::informer(&informers);
        tokio::select! {
            () = quarantine::report_invalid(kube, informer, leadership) => {}
            () = reporting.cancelled() => {}
        }
    });
    tracing::info!(controller = R::NAME, "starting controller");
    let acquired = cx.shared.leadership.acquired();
    controller
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(cx.lanes.workers())
                .debounce(R::DEBOUNCE),
        )
        .reconcile_all_on(acquired)
        .reconcile_on(cx.requeues.due())
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(observed::<R>, error_policy::<R>, cx)
        .for_each(|result| async move {
            if let Err(kube::runtime::controller::Error::QueueError(e)) = result {
                tracing::warn!(controller = R::NAME, error = %e, "watch failed; retrying");
            }
        })
        .await;
    tracing::info!(controller = R::NAME, "controller stopped");
}

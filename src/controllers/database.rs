//! CloudDatabase controller (placeholder until its issue lands: finalizer and observedGeneration only).

use std::sync::Arc;

use kube::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::api::CloudDatabase;
use crate::runtime::{self, Cleanup, Context, ReconcileError, Reconciler, Shared};
use crate::server::Readiness;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        "kube"
    }
}

pub struct CloudDatabaseReconciler;

impl Reconciler for CloudDatabaseReconciler {
    type Resource = CloudDatabase;
    type Error = Error;
    const NAME: &'static str = "clouddatabase";
    const FINALIZER: &'static str = "keeper.dev/database-cleanup";

    async fn apply(&self, obj: Arc<CloudDatabase>, ctx: &Context<Self>) -> Result<Action, Error> {
        let mut status = obj.status.clone().unwrap_or_default();
        status.observed_generation = obj.metadata.generation;
        ctx.update_status(&obj, &status).await?;
        Ok(Action::requeue(runtime::RESYNC))
    }

    async fn cleanup(
        &self,
        _obj: Arc<CloudDatabase>,
        _ctx: &Context<Self>,
    ) -> Result<Cleanup, Error> {
        Ok(Cleanup::Done)
    }
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let api = Api::<CloudDatabase>::all(shared.client.clone());
    let controller = Controller::new(api, watcher::Config::default());
    let ctx = Arc::new(Context::new(shared, CloudDatabaseReconciler));
    runtime::run(controller, ctx, readiness, shutdown).await;
    Ok(())
}

//! S3Tenant controller (placeholder until its issue lands: finalizer and observedGeneration only).

use std::sync::Arc;

use kube::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::api::S3Tenant;
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

pub struct S3TenantReconciler;

impl Reconciler for S3TenantReconciler {
    type Resource = S3Tenant;
    type Error = Error;
    const NAME: &'static str = "s3tenant";
    const FINALIZER: &'static str = "keeper.dev/tenant-cleanup";

    async fn apply(&self, obj: Arc<S3Tenant>, ctx: &Context<Self>) -> Result<Action, Error> {
        let mut status = obj.status.clone().unwrap_or_default();
        status.observed_generation = obj.metadata.generation;
        ctx.update_status(&obj, &status).await?;
        Ok(Action::requeue(runtime::RESYNC))
    }

    async fn cleanup(&self, _obj: Arc<S3Tenant>, _ctx: &Context<Self>) -> Result<Cleanup, Error> {
        Ok(Cleanup::Done)
    }
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let api = Api::<S3Tenant>::all(shared.client.clone());
    let controller = Controller::new(api, watcher::Config::default());
    let ctx = Arc::new(Context::new(shared, S3TenantReconciler));
    runtime::run(controller, ctx, readiness, shutdown).await;
    Ok(())
}

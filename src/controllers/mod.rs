//! The three controllers, each isolated in its own module with its own context and errors.

pub mod bucket;
pub mod database;
pub mod tenant;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::ControllerKind;
use crate::runtime::Shared;
use crate::server::Readiness;

/// Runs the controller of `kind` until `shutdown` is cancelled.
pub async fn run(
    kind: ControllerKind,
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    match kind {
        ControllerKind::Tenant => tenant::run(shared, readiness, shutdown).await,
        ControllerKind::Bucket => bucket::run(shared, readiness, shutdown).await,
        ControllerKind::Database => database::run(shared, readiness, shutdown).await,
    }
}

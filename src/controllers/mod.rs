//! The three controllers, each isolated in its own module with its own context and errors.

pub mod bucket;
pub mod database;
pub mod tenant;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::runtime::Shared;
use crate::server::Readiness;

/// A controller that `keeper run --controllers` can switch on or off.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ControllerKind {
    /// S3Tenant: tenant accounts and their credentials.
    Tenant,
    /// S3Bucket: buckets, drains and bucket credentials.
    Bucket,
    /// CloudDatabase: RDS instances and connection Secrets.
    Database,
}

impl ControllerKind {
    /// Runs the controller until `shutdown` is cancelled.
    pub async fn run(
        self,
        shared: Shared,
        readiness: Arc<Readiness>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        match self {
            ControllerKind::Tenant => tenant::run(shared, readiness, shutdown).await,
            ControllerKind::Bucket => bucket::run(shared, readiness, shutdown).await,
            ControllerKind::Database => database::run(shared, readiness, shutdown).await,
        }
    }
}

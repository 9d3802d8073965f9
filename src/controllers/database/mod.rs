//! CloudDatabase controller: one RDS instance per resource, a connection Secret, and deletion
//! that is verified (the finalizer stays until RDS reports the instance gone), never deadlocks
//! on deletion protection, and takes a final snapshot by default.
//!
//! Each reconcile observes RDS, asks a pure planner ([`plan::plan_apply`],
//! [`plan::plan_cleanup`]) for the next step and performs it ([`reconcile`]). Every step is
//! idempotent and ordered so that a crash between any two of them is harmless:
//! - the instance identifier is derived from namespace and name and recorded in status before
//!   `CreateDBInstance`, so a restarted keeper finds the instance it created;
//! - the master password is stored in the connection Secret before `CreateDBInstance` and reused
//!   after a crash, so the Secret always holds the instance's password;
//! - the final snapshot identifier is recorded in status before `DeleteDBInstance` and reused on
//!   retry, so one deletion never asks for two snapshots.

mod backend;
mod plan;
mod reconcile;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use self::backend::{Connector, Live};
use crate::api::names::DATABASE_FINALIZER;
use crate::api::{CloudDatabase, CloudDatabaseStatus};
use crate::backends::rds;
use crate::config::ControllerKind;
use crate::error::{BackendError, ErrorClass};
use crate::runtime::{self, Context, ControllerFailure, Failure, Outcome, Reconciler, Shared};
use crate::server::Readiness;

/// Tags keeper puts on every instance it creates. The owner UID is what makes an instance ours.
const TAG_OWNER_UID: &str = "keeper.dev/owner-uid";
const TAG_NAMESPACE: &str = "keeper.dev/namespace";
const TAG_NAME: &str = "keeper.dev/name";

/// How often an instance in a transitional state is looked at again.
const POLL: Duration = Duration::from_secs(15);
/// Upper bound of planner steps in one reconcile; each step changes what the planner sees, so
/// this is never reached unless RDS contradicts itself, and then we simply look again later.
const MAX_STEPS: usize = 8;

/// What a CloudDatabase reconcile fails with.
pub type Error = Failure<DatabaseFailure>;

/// The failures only the CloudDatabase controller meets.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseFailure {
    /// The spec asks for something the configuration does not offer (an unconfigured size).
    #[error("{0}")]
    InvalidSpec(String),
}

impl ControllerFailure for DatabaseFailure {
    fn reason(&self) -> &'static str {
        match self {
            DatabaseFailure::InvalidSpec(_) => "invalid_spec",
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            DatabaseFailure::InvalidSpec(_) => ErrorClass::Permanent,
        }
    }

    fn condition_reason(&self) -> &'static str {
        match self {
            DatabaseFailure::InvalidSpec(_) => "InvalidSpec",
        }
    }

    fn backend_condition_reason(e: &BackendError) -> &'static str {
        if rds::is_access_denied(e) {
            "AccessDenied"
        } else {
            "BackendError"
        }
    }
}

/// The CloudDatabase reconciler over its connection to RDS ([`Live`] in production, a fake in
/// tests).
pub struct CloudDatabaseReconciler<C: Connector = Live> {
    connector: C,
}

impl<C: Connector> Reconciler for CloudDatabaseReconciler<C> {
    type Resource = CloudDatabase;
    type Error = Error;
    const NAME: &'static str = "clouddatabase";
    const KIND: ControllerKind = ControllerKind::Database;
    const FINALIZER: &'static str = DATABASE_FINALIZER;

    async fn apply(
        &self,
        obj: Arc<CloudDatabase>,
        cx: &Context<Self>,
    ) -> Result<Outcome<CloudDatabaseStatus>, Error> {
        reconcile::apply(cx, &obj).await
    }

    async fn cleanup(
        &self,
        obj: Arc<CloudDatabase>,
        cx: &Context<Self>,
    ) -> Result<Outcome<CloudDatabaseStatus>, Error> {
        reconcile::cleanup(cx, &obj).await
    }
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let controller = runtime::controller::<CloudDatabase>(&shared.informers);
    let cx = Arc::new(Context::new(
        shared,
        CloudDatabaseReconciler { connector: Live },
    ));
    runtime::run(controller, cx, readiness, shutdown).await;
    Ok(())
}

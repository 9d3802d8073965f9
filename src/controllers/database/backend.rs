//! The RDS calls the CloudDatabase controller makes, as a small trait so that the reconcile
//! runs against an in-memory RDS in tests; its implementation over the RDS client; and [`Live`],
//! which hands that client to the reconciler.

use std::future::Future;

use super::Error;
use crate::api::CloudDatabase;
use crate::backends::rds::{DbInstance, FinalSnapshot, Modification, NewInstance, RdsBackend};
use crate::error::BackendError;
use crate::runtime::{Connect, Shared};

/// What a create call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Requested,
    /// An instance with the identifier already exists: its tags decide whose it is.
    AlreadyExists,
}

/// The RDS operations the CloudDatabase controller uses. Errors are classified by the client:
/// `NotFound` only for `DBInstanceNotFound`, `Conflict` for a busy instance.
pub trait DatabaseBackend: Send + Sync + 'static {
    /// The AWS region the client calls (`None` when none is configured).
    fn region(&self) -> Option<String>;

    /// The AWS account keeper acts in (`sts:GetCallerIdentity`), looked up once per process.
    fn account(&self) -> impl Future<Output = Result<String, BackendError>> + Send;

    /// The instance, or `None` when RDS reports it absent.
    fn describe(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<DbInstance>, BackendError>> + Send;
    fn create(
        &self,
        instance: &NewInstance,
    ) -> impl Future<Output = Result<Created, BackendError>> + Send;
    fn modify(
        &self,
        id: &str,
        modification: &Modification,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    fn delete(
        &self,
        id: &str,
        final_snapshot: &FinalSnapshot,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    fn remove_tags(
        &self,
        instance: &DbInstance,
        keys: &[String],
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// How the reconciler reaches RDS for a database ([`Live`] in production, an in-memory RDS in
/// tests): named once, so that the reconciler and its steps carry one bound.
pub trait Connector: Connect<CloudDatabase, Backend: DatabaseBackend, Error = Error> {}

impl<C: Connect<CloudDatabase, Backend: DatabaseBackend, Error = Error>> Connector for C {}

/// The real RDS: keeper's one client (its region and AWS credentials, from the provider
/// registry) serves every database alike.
pub struct Live;

impl Connect<CloudDatabase> for Live {
    type Backend = RdsBackend;
    type Error = Error;

    async fn connect(&self, shared: &Shared, _db: &CloudDatabase) -> Result<RdsBackend, Error> {
        Ok(shared.providers.rds().clone())
    }
}

impl DatabaseBackend for RdsBackend {
    fn region(&self) -> Option<String> {
        RdsBackend::region(self)
    }

    async fn account(&self) -> Result<String, BackendError> {
        RdsBackend::account(self).await
    }

    async fn describe(&self, id: &str) -> Result<Option<DbInstance>, BackendError> {
        self.describe_db_instance(id).await
    }

    async fn create(&self, instance: &NewInstance) -> Result<Created, BackendError> {
        match self.create_db_instance(instance).await {
            Ok(()) => Ok(Created::Requested),
            // The only conflict CreateDBInstance reports.
            Err(e) if e.is_conflict() => Ok(Created::AlreadyExists),
            Err(e) => Err(e),
        }
    }

    async fn modify(&self, id: &str, modification: &Modification) -> Result<(), BackendError> {
        self.modify_db_instance(id, modification).await
    }

    async fn delete(&self, id: &str, final_snapshot: &FinalSnapshot) -> Result<(), BackendError> {
        self.delete_db_instance(id, final_snapshot).await
    }

    async fn remove_tags(
        &self,
        instance: &DbInstance,
        keys: &[String],
    ) -> Result<(), BackendError> {
        self.remove_tags_from_resource(&instance.arn, keys).await
    }
}

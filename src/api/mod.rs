//! The three custom resources keeper serves (group `keeper.dev`, version `v1alpha1`) and the
//! value types they share. The CRDs in `crds/` are generated from these types (`keeper crdgen`).

// clippy reads the repeated `type_ = ..` inside kube's `printcolumn(..)` lists as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

mod bucket;
mod database;
pub mod names;
mod tenant;

pub use bucket::{
    BucketDrainSpec, BucketPhase, DrainMode, DrainStatus, S3Bucket, S3BucketSpec, S3BucketStatus,
    TenantRef,
};
pub use database::{
    CloudDatabase, CloudDatabaseSpec, CloudDatabaseStatus, DatabaseDeletionPolicy,
    DatabaseEndpoint, DatabasePhase, DatabaseSize, Engine,
};
pub use tenant::{S3Tenant, S3TenantSpec, S3TenantStatus, TenantPhase};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every keeper resource.
pub const GROUP: &str = "keeper.dev";

/// What happens to the backend resource when the custom resource is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the backend resource, then release the custom resource.
    #[default]
    Delete,
    /// Release the custom resource and leave the backend resource in place.
    Retain,
}

/// Every CRD keeper serves, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![S3Tenant::crd(), S3Bucket::crd(), CloudDatabase::crd()]
}

//! The three custom resources keeper serves (group `keeper.dev`, version `v1alpha1`) and the
//! value types they share. The CRDs in `crds/` are generated from these types (`keeper crdgen`).

// clippy reads the repeated `type_ = ..` inside kube's `printcolumn(..)` lists as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

mod bucket;
mod database;
pub mod names;
mod tenant;

pub use bucket::{
    BucketDrainSpec, BucketPhase, DrainMode, DrainStatus, HandledRequests, S3Bucket, S3BucketSpec,
    S3BucketStatus, TenantRef,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buckets_backend_name_is_its_spec_then_what_keeper_recorded_then_the_default() {
        let mut bucket = S3Bucket::new(
            "media",
            serde_json::from_value(serde_json::json!({"tenantRef": {"name": "t"}})).unwrap(),
        );
        bucket.metadata.namespace = Some("team-a".into());
        assert_eq!(
            bucket.backend_name(),
            names::default_bucket_name("team-a", "media")
        );
        // Created before the create was recorded: the intent names it.
        bucket.status = Some(S3BucketStatus {
            create_intent: Some("team-a-media".into()),
            ..S3BucketStatus::default()
        });
        assert_eq!(bucket.backend_name(), "team-a-media");
        // Recorded by an older keeper, whose default was `<namespace>-<name>`: it stays.
        bucket.status = Some(S3BucketStatus {
            bucket_name: Some("team-a-media".into()),
            create_intent: Some("other".into()),
            ..S3BucketStatus::default()
        });
        assert_eq!(bucket.backend_name(), "team-a-media");
        bucket.spec.bucket_name = Some("assets".into());
        assert_eq!(bucket.backend_name(), "assets");
    }

    fn spec<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn a_minimal_tenant_gets_the_documented_defaults() {
        let tenant: S3TenantSpec = spec("{}");
        assert_eq!(tenant.provider, "default");
        assert_eq!(tenant.display_name, None);
        assert_eq!(tenant.quota, None, "no quota means unlimited");
        assert!(!tenant.allow_platform_services);
        assert_eq!(tenant.deletion_policy, DeletionPolicy::Delete);
        assert!(!tenant.deletion_protection);
    }

    #[test]
    fn a_minimal_bucket_gets_the_documented_defaults() {
        let bucket: S3BucketSpec = spec("tenantRef: {name: team-a}");
        assert_eq!(bucket.tenant_ref.name, "team-a");
        assert_eq!(bucket.bucket_name, None);
        assert!(!bucket.versioning && !bucket.object_lock);
        assert_eq!(bucket.deletion_policy, DeletionPolicy::Delete);
        assert_eq!(bucket.drain, None);
        assert!(
            serde_yaml::from_str::<S3BucketSpec>("{}").is_err(),
            "tenantRef is required"
        );
    }

    #[test]
    fn a_minimal_database_gets_the_documented_defaults() {
        let db: CloudDatabaseSpec = spec("engine: postgres\nsize: small");
        assert_eq!(db.engine, Engine::Postgres);
        assert_eq!(db.size, DatabaseSize::Small);
        assert_eq!(
            db.deletion_policy,
            DatabaseDeletionPolicy::Snapshot,
            "final snapshots are the safe default"
        );
        assert!(!db.deletion_protection);
        assert_eq!(db.connection_secret_name, None);
        assert!(serde_yaml::from_str::<CloudDatabaseSpec>("engine: oracle\nsize: small").is_err());
        assert!(serde_yaml::from_str::<CloudDatabaseSpec>("engine: mysql\nsize: huge").is_err());
    }

    #[test]
    fn field_names_are_the_documented_camel_case() {
        let db: CloudDatabaseSpec =
            spec("engine: mysql\nsize: large\nstorageGiB: 200\nconnectionSecretName: x");
        assert_eq!(db.storage_gib, Some(200));
        let json = serde_json::to_value(&db).unwrap();
        assert_eq!(json["storageGiB"], 200);
        assert_eq!(json["connectionSecretName"], "x");
    }

    #[test]
    fn every_field_that_names_a_backend_identity_is_immutable_in_the_crd() {
        let expected = [
            ("S3Tenant", "provider is immutable"),
            ("S3Bucket", "tenantRef is immutable"),
            ("S3Bucket", "bucketName is immutable"),
            ("S3Bucket", "region is immutable"),
            ("S3Bucket", "objectLock is immutable"),
            ("CloudDatabase", "engine is immutable"),
            ("CloudDatabase", "databaseName is immutable"),
            ("CloudDatabase", "masterUsername is immutable"),
        ];
        let crds: Vec<(String, String)> = crds()
            .into_iter()
            .map(|crd| {
                let kind = crd.spec.names.kind.clone();
                (kind, serde_json::to_string(&crd).unwrap())
            })
            .collect();
        for (kind, message) in expected {
            let (_, text) = crds.iter().find(|(k, _)| k == kind).unwrap();
            assert!(
                text.contains(message) && text.contains("oldSelf"),
                "{kind}: no transition rule {message:?}"
            );
        }
    }
}

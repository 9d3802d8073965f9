//! What the shared flow needs to know about each keeper kind: its status type, its phases (for
//! `keeper_<kinds>{phase}`) and how a failure and a blocked deletion show in its phase.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use serde::Serialize;

use super::outcome::KeeperStatus;
use crate::api::{
    BucketPhase, CloudDatabase, CloudDatabaseStatus, DatabasePhase, S3Bucket, S3BucketStatus,
    S3Tenant, S3TenantStatus, TenantPhase,
};
use crate::cluster::informer::{Informer, Informers, Watched};

/// A keeper custom resource: watched and cached as every kind is, namespaced, and written back.
pub trait Keeper: Watched + Resource<Scope = NamespaceResourceScope> + Serialize {
    type Status: KeeperStatus;
    /// `keeper_tenants`, `keeper_buckets`, `keeper_databases`.
    const PHASE_GAUGE: &'static str;
    const PHASE_HELP: &'static str;
    /// Every phase, reported even at zero so dashboards see each one.
    const PHASES: &'static [&'static str];

    fn status(&self) -> Option<&Self::Status>;
    /// The kind's shared informer.
    fn informer(informers: &Informers) -> &Informer<Self>;
    /// The phase label of the object (its default phase before any status).
    fn phase(&self) -> String;
}

macro_rules! keeper_kind {
    ($kind:ty, $status:ty, $phase:ty, failed: $failed:expr, deleting: $deleting:expr,
     informer: $informer:ident, gauge: $gauge:literal, help: $help:literal,
     phases: $phases:expr) => {
        impl KeeperStatus for $status {
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                &mut self.conditions
            }
            fn conditions(&self) -> &[Condition] {
                &self.conditions
            }
            fn mark_failed(&mut self, deleting: bool) {
                self.phase = Some(if deleting { $deleting } else { $failed });
            }
            fn mark_deleting(&mut self) {
                self.phase = Some($deleting);
            }
            fn set_observed_generation(&mut self, generation: Option<i64>) {
                self.observed_generation = generation;
            }
        }

        impl Keeper for $kind {
            type Status = $status;
            const PHASE_GAUGE: &'static str = $gauge;
            const PHASE_HELP: &'static str = $help;
            const PHASES: &'static [&'static str] = $phases;

            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }

            fn informer(informers: &Informers) -> &Informer<Self> {
                informers.$informer()
            }

            fn phase(&self) -> String {
                let phase: $phase = self
                    .status
                    .as_ref()
                    .and_then(|s| s.phase)
                    .unwrap_or_default();
                format!("{phase:?}")
            }
        }
    };
}

keeper_kind!(S3Tenant, S3TenantStatus, TenantPhase,
    failed: TenantPhase::Failed, deleting: TenantPhase::Deleting, informer: tenants,
    gauge: "keeper_tenants", help: "S3Tenant resources by phase.",
    phases: &["Pending", "Ready", "Failed", "Deleting"]);

keeper_kind!(S3Bucket, S3BucketStatus, BucketPhase,
    failed: BucketPhase::Failed, deleting: BucketPhase::Deleting, informer: buckets,
    gauge: "keeper_buckets", help: "S3Buckets by phase.",
    phases: &["Pending", "Ready", "Draining", "Failed", "Deleting"]);

keeper_kind!(CloudDatabase, CloudDatabaseStatus, DatabasePhase,
    failed: DatabasePhase::Failed, deleting: DatabasePhase::Deleting, informer: databases,
    gauge: "keeper_databases", help: "CloudDatabases by phase.",
    phases: &["Provisioning", "Ready", "Failed", "Deleting"]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_of_every_kind_is_listed_for_its_gauge() {
        for phase in [
            TenantPhase::Pending,
            TenantPhase::Ready,
            TenantPhase::Failed,
            TenantPhase::Deleting,
        ] {
            assert!(S3Tenant::PHASES.contains(&format!("{phase:?}").as_str()));
        }
        for phase in [
            BucketPhase::Pending,
            BucketPhase::Ready,
            BucketPhase::Draining,
            BucketPhase::Failed,
            BucketPhase::Deleting,
        ] {
            assert!(S3Bucket::PHASES.contains(&format!("{phase:?}").as_str()));
        }
        for phase in [
            DatabasePhase::Provisioning,
            DatabasePhase::Ready,
            DatabasePhase::Failed,
            DatabasePhase::Deleting,
        ] {
            assert!(CloudDatabase::PHASES.contains(&format!("{phase:?}").as_str()));
        }
    }
}

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DeletionPolicy;
use super::names::QUANTITY_PATTERN;

/// A tenant account on a StorageGRID grid, or a credential scope on an S3-compatible store.
/// Its S3 credentials are published in the Secret `<name>-s3-credentials`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "keeper.dev",
    version = "v1alpha1",
    kind = "S3Tenant",
    plural = "s3tenants",
    shortname = "s3t",
    category = "keeper",
    namespaced,
    doc = "A tenant account on a StorageGRID grid, or a credential scope on an S3-compatible store, managed by keeper. Its S3 credentials are published in the Secret `<name>-s3-credentials`; deleting it is refused while S3Buckets of it remain.",
    status = "S3TenantStatus",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(
        name = "Account",
        type_ = "string",
        json_path = ".status.accountId",
        priority = 1
    ),
    printcolumn(name = "Buckets", type_ = "integer", json_path = ".status.bucketCount"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct S3TenantSpec {
    /// Name of the storage backend in keeper's configuration that hosts this tenant. Immutable:
    /// the account lives on that backend, and moving the resource would orphan it.
    #[serde(default = "default_provider")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("provider is immutable: the tenant's account lives on that provider"))]
    pub provider: String,

    /// Account name shown in the StorageGRID console (at most 64 characters). Defaults to the
    /// resource name, cut to 64 characters with a hash of the whole name when longer.
    /// Account names are not unique in StorageGRID; keeper identifies the account by `status.accountId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub display_name: Option<String>,

    /// Storage quota of the account as a Kubernetes quantity, for example `500Gi` or `2T`.
    /// Absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub quota: Option<String>,

    /// Allow the tenant to use StorageGRID platform services (CloudMirror, notifications, search integration).
    #[serde(default)]
    pub allow_platform_services: bool,

    /// `Delete` removes the account when the resource is deleted (only once it holds no bucket);
    /// `Retain` releases the resource and keeps the account.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// While true, deleting the resource is refused (by the admission webhook) or held (by the finalizer).
    /// Set it to false to allow deletion.
    #[serde(default)]
    pub deletion_protection: bool,
}

fn default_provider() -> String {
    "default".to_string()
}

/// Lifecycle phase of an S3Tenant.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum TenantPhase {
    /// The account is being created or the tenant waits for something it needs.
    #[default]
    Pending,
    /// The account exists and its credentials are published.
    Ready,
    /// The last attempt failed with an error that needs attention; see the conditions.
    Failed,
    /// The resource is being deleted; see the `DeletionBlocked` condition if it stays here.
    Deleting,
}

/// Observed state of an S3Tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3TenantStatus {
    /// Identity of the account on the backend (a 20-digit StorageGRID account id). Empty for S3-compatible providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// The backend the account was created on or first seen on (`storagegrid:<grid id>`):
    /// compared before keeper would create the account again (see `keeper.dev/confirm-backend-identity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_identity: Option<String>,
    /// Current lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<TenantPhase>,
    /// Name of the Secret in this namespace that holds the tenant's S3 credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// S3 endpoint URL applications use with the tenant's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// Number of buckets the tenant holds (S3Bucket resources and buckets on the backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_count: Option<i64>,
    /// Standard conditions: `Ready` (usable), `Synced` (the last reconcile succeeded, or the error
    /// keeper retries), kstatus' `Reconciling` and `Stalled` (present only while true), and
    /// `DeletionBlocked`; one of each type.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

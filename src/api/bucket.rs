use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DeletionPolicy;
use super::names::{
    BUCKET_NAME_PATTERN, DURATION_PATTERN, POLL_INTERVAL_RULE, default_bucket_name,
};

/// A bucket inside an S3Tenant. Annotate it with `keeper.dev/drain=<value>` (a new value, such as a
/// timestamp, per request) to delete every object in it; progress shows in `status.drainStatus`
/// and in events, the value handled last in `status.handledRequests.drain`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "keeper.dev",
    version = "v1alpha1",
    kind = "S3Bucket",
    plural = "s3buckets",
    shortname = "s3b",
    category = "keeper",
    namespaced,
    doc = "An S3 bucket in an S3Tenant, managed by keeper. Its access keys are published in a Secret; the annotation `keeper.dev/drain` deletes every object in it, with progress in status and events; deleting it waits until it is empty.",
    status = "S3BucketStatus",
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
    printcolumn(name = "Tenant", type_ = "string", json_path = ".spec.tenantRef.name"),
    printcolumn(name = "Bucket", type_ = "string", json_path = ".status.bucketName"),
    printcolumn(name = "Objects", type_ = "integer", json_path = ".status.objectCount"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "has(self.bucketName) == has(oldSelf.bucketName) && (!has(self.bucketName) || self.bucketName == oldSelf.bucketName)"
).message("bucketName is immutable").field_path(".bucketName"))]
#[x_kube(validation = Rule::new(
    "has(self.region) == has(oldSelf.region) && (!has(self.region) || self.region == oldSelf.region)"
).message("region is immutable").field_path(".region"))]
#[serde(rename_all = "camelCase")]
pub struct S3BucketSpec {
    /// The S3Tenant (in the same namespace) that owns the bucket. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("tenantRef is immutable"))]
    pub tenant_ref: TenantRef,

    /// Name of the bucket on the backend. Defaults to `<namespace>-<name>-<hash>` (8 hex digits
    /// of a hash of the namespace and name, so no two S3Buckets share a default). Immutable.
    /// S3 rules apply: 3-63 characters of lowercase letters, digits, hyphens and dots, starting and
    /// ending with a letter or digit, no two dots in a row, and not shaped like an IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 63), regex(pattern = BUCKET_NAME_PATTERN))]
    #[x_kube(validation = Rule::new("!self.matches('^[0-9]+\\\\.[0-9]+\\\\.[0-9]+\\\\.[0-9]+$')").message("bucketName must not be formatted as an IP address"))]
    pub bucket_name: Option<String>,

    /// Region to create the bucket in. Defaults to the provider's region. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub region: Option<String>,

    /// Keep every version of every object.
    #[serde(default)]
    pub versioning: bool,

    /// Create the bucket with S3 Object Lock enabled. Immutable.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("objectLock is immutable"))]
    pub object_lock: bool,

    /// `Delete` removes the bucket (once empty) when the resource is deleted; `Retain` keeps it.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Overrides for the drain's polling and stuck detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<BucketDrainSpec>,
}

/// Reference to the S3Tenant that owns a bucket.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct TenantRef {
    /// Name of an S3Tenant in the bucket's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Per-bucket drain settings; they take precedence over the provider's configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketDrainSpec {
    /// How often drain progress is checked, as a duration such as `30s` or `5m` (at least `1s`).
    /// Replaces both the first-hour and the long-running intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new(POLL_INTERVAL_RULE).message("pollInterval must be at least 1s (written with s, m or h)"))]
    pub poll_interval: Option<String>,
    /// How long the object count may stay unchanged before a `BucketDrainingStuck` warning, such as `3h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub stuck_threshold: Option<String>,
}

/// Lifecycle phase of an S3Bucket.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BucketPhase {
    /// Waiting for the tenant or for the bucket to be created.
    #[default]
    Pending,
    /// The bucket exists and is usable.
    Ready,
    /// Objects are being deleted because of the `keeper.dev/drain` annotation.
    Draining,
    /// The last attempt failed with an error that needs attention; see the conditions.
    Failed,
    /// The resource is being deleted; see the `DeletionBlocked` condition if it stays here.
    Deleting,
}

/// How a drain deletes objects.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DrainMode {
    /// The backend deletes the objects itself (StorageGRID delete-objects).
    ServerSide,
    /// keeper lists and deletes the objects in batches (S3-compatible stores).
    ClientSide,
}

/// Progress of a drain.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainStatus {
    /// When the drain began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// Whether the backend is deleting objects right now.
    #[serde(default)]
    pub is_deleting_objects: bool,
    /// Objects in the bucket when the drain began.
    #[serde(default)]
    pub initial_object_count: i64,
    /// Bytes in the bucket when the drain began.
    #[serde(default)]
    pub initial_object_bytes: i64,
    /// When progress was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<Time>,
    /// When the object count last went down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_at: Option<Time>,
    /// Object count at the previous check, to detect progress.
    #[serde(default)]
    pub previous_object_count: i64,
    /// Whether no object was deleted for the stuck threshold (`keeper_drains_stuck` counts these;
    /// the `BucketDrainingStuck` event says so once). Progress clears it.
    #[serde(default)]
    pub stuck: bool,
    /// Human-readable progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Delay before the next progress check, such as `3m0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_poll_interval: Option<String>,
    /// Whether the backend or keeper deletes the objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DrainMode>,
    /// The value of the `keeper.dev/drain` annotation that started this drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// The last request keeper handled per request annotation: the annotation's value, copied
/// literally. The same value again is no new request; a new value is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandledRequests {
    /// The last `keeper.dev/drain` value handled (drained, found empty, or canceled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<String>,
    /// The last `keeper.dev/rotate-credentials` value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate_credentials: Option<String>,
}

/// Observed state of an S3Bucket.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3BucketStatus {
    /// Current lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BucketPhase>,
    /// Name of the bucket on the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,
    /// The store the bucket was created on or first seen on, on an S3-compatible provider
    /// (`s3:<endpoint> owner=<canonical id>`): compared before keeper would create the bucket
    /// again (see `keeper.dev/confirm-backend-identity`). On StorageGRID the tenant's account pins
    /// the grid (S3Tenant `status.backendIdentity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_identity: Option<String>,
    /// The bucket keeper is about to create, recorded before the create: a bucket of this name
    /// found without keeper's ownership tags (its tagging failed right after the create) is
    /// keeper's. It only counts while `bucketName` does not record the bucket. Only here, in
    /// status: an annotation saying so could be written by whoever may edit the S3Bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_intent: Option<String>,
    /// Number of objects in the bucket at the last usage refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_count: Option<i64>,
    /// Bytes stored in the bucket at the last usage refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_bytes: Option<i64>,
    /// Progress of the current drain, absent when no drain runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_status: Option<DrainStatus>,
    /// The last request keeper handled per request annotation (never cleared; also recorded in
    /// the annotations `keeper.dev/drain-handled` and `keeper.dev/rotate-credentials-handled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_requests: Option<HandledRequests>,
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

impl S3Bucket {
    /// The bucket's name on the backend: `spec.bucketName`, else the name keeper recorded
    /// (`status.bucketName`, or the create intent written before the create), else the default
    /// for the namespace and name. The recorded name comes before the default so that a default
    /// that changes between releases never moves an existing bucket.
    pub fn backend_name(&self) -> String {
        let status = self.status.as_ref();
        self.spec
            .bucket_name
            .clone()
            .or_else(|| status.and_then(|s| s.bucket_name.clone()))
            .or_else(|| status.and_then(|s| s.create_intent.clone()))
            .unwrap_or_else(|| {
                default_bucket_name(
                    self.metadata.namespace.as_deref().unwrap_or_default(),
                    self.metadata.name.as_deref().unwrap_or_default(),
                )
            })
    }
}

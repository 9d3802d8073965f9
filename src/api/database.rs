use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An AWS RDS database instance. Its connection details are published in the Secret
/// `connectionSecretName` (default `<name>-connection`).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "keeper.dev",
    version = "v1alpha1",
    kind = "CloudDatabase",
    plural = "clouddatabases",
    shortname = "cdb",
    category = "keeper",
    namespaced,
    doc = "An AWS RDS instance (postgres or mysql, size small, medium or large), managed by keeper. Its connection details are published in the Secret `connectionSecretName` (default `<name>-connection`).",
    status = "CloudDatabaseStatus",
    printcolumn(name = "Engine", type_ = "string", json_path = ".spec.engine"),
    printcolumn(name = "Size", type_ = "string", json_path = ".spec.size"),
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
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".status.endpoint.address",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "has(self.engineVersion) == has(oldSelf.engineVersion) && (!has(self.engineVersion) || self.engineVersion == oldSelf.engineVersion)"
).message("engineVersion is immutable: keeper sets it when the instance is created and does not upgrade it; upgrade in RDS").field_path(".engineVersion"))]
#[x_kube(validation = Rule::new(
    "has(self.databaseName) == has(oldSelf.databaseName) && (!has(self.databaseName) || self.databaseName == oldSelf.databaseName)"
).message("databaseName is immutable: it is fixed when the instance is created").field_path(".databaseName"))]
#[x_kube(validation = Rule::new(
    "has(self.masterUsername) == has(oldSelf.masterUsername) && (!has(self.masterUsername) || self.masterUsername == oldSelf.masterUsername)"
).message("masterUsername is immutable: it is fixed when the instance is created").field_path(".masterUsername"))]
#[serde(rename_all = "camelCase")]
pub struct CloudDatabaseSpec {
    /// Database engine. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("engine is immutable"))]
    pub engine: Engine,

    /// Engine version, such as `16.4` for postgres or `8.0.39` for mysql. Defaults to the RDS default.
    /// Immutable: used when the instance is created (a change would do nothing, so it is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub engine_version: Option<String>,

    /// Instance size; keeper's configuration maps it to an instance class and default storage.
    pub size: DatabaseSize,

    /// Allocated storage in GiB; overrides the size's default. RDS only lets storage grow.
    #[serde(
        default,
        rename = "storageGiB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 20, max = 65536))]
    pub storage_gib: Option<i32>,

    /// Name of the database created in the instance. Defaults to the engine's default database. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = "^[A-Za-z][A-Za-z0-9_]*$"))]
    pub database_name: Option<String>,

    /// Master user name. Defaults to `keeper`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16), regex(pattern = "^[A-Za-z][A-Za-z0-9_]*$"))]
    pub master_username: Option<String>,

    /// `Snapshot` takes a final snapshot before deleting the instance; `Delete` deletes it without one;
    /// `Retain` releases the resource and leaves the instance running.
    #[serde(default)]
    pub deletion_policy: DatabaseDeletionPolicy,

    /// RDS deletion protection. While true, deleting the resource is held until it is set to false.
    #[serde(default)]
    pub deletion_protection: bool,

    /// Name of the Secret that receives the connection details. Defaults to `<name>-connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub connection_secret_name: Option<String>,
}

/// Database engine.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// PostgreSQL.
    Postgres,
    /// MySQL.
    Mysql,
}

/// Instance size.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseSize {
    /// Development and small workloads (default `db.t3.micro`, 20 GiB).
    Small,
    /// Moderate workloads (default `db.t3.medium`, 50 GiB).
    Medium,
    /// Production workloads (default `db.m6i.large`, 100 GiB).
    Large,
}

/// What happens to the instance when the resource is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DatabaseDeletionPolicy {
    /// Delete the instance after a final snapshot.
    #[default]
    Snapshot,
    /// Delete the instance without a final snapshot.
    Delete,
    /// Keep the instance; keeper removes its ownership tags.
    Retain,
}

/// Lifecycle phase of a CloudDatabase.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DatabasePhase {
    /// The instance is being created or modified.
    #[default]
    Provisioning,
    /// The instance is available and the connection Secret is written.
    Ready,
    /// The last attempt failed with an error that needs attention; see the conditions.
    Failed,
    /// The resource is being deleted.
    Deleting,
}

/// Network address of the instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DatabaseEndpoint {
    /// Host name.
    pub address: String,
    /// TCP port.
    pub port: i32,
}

/// Observed state of a CloudDatabase.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudDatabaseStatus {
    /// The RDS `DBInstanceIdentifier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// The AWS region the instance was created in, recorded with the identifier. keeper acts on
    /// the instance only in this region: run with another region and it reports the mismatch
    /// (condition `RegionMismatch`) instead of creating a second instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The AWS account of the instance: keeper's account (`sts:GetCallerIdentity`) recorded with
    /// the identifier before the create, or read from the ARN of an instance found without it.
    /// Compared before keeper would create the instance again: in another account keeper creates
    /// nothing (condition `BackendIdentityChanged`) unless `keeper.dev/confirm-backend-identity`
    /// names that account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// Current lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DatabasePhase>,
    /// Where to connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<DatabaseEndpoint>,
    /// Identifier of the final snapshot requested when the instance was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_snapshot_id: Option<String>,
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

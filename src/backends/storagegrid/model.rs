//! Request and response bodies of the StorageGRID management API (contract:
//! `shared/reference/storagegrid-api.md`). Integers and account ids are read leniently because
//! the sources disagree on whether the server sends numbers or numeric strings (§0.4).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// A value that must never appear in logs: its `Debug` output is redacted.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sensitive(pub String);

impl fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Who signs in: a grid administrator (`account_id: None`) or a user of one tenant account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Login {
    pub username: String,
    pub password: Sensitive,
    pub account_id: Option<String>,
}

impl Login {
    pub fn grid(username: impl Into<String>, password: impl Into<String>) -> Self {
        Login {
            username: username.into(),
            password: Sensitive(password.into()),
            account_id: None,
        }
    }

    /// The tenant's root user (the user every account is created with).
    pub fn tenant_root(account_id: impl Into<String>, password: impl Into<String>) -> Self {
        Login {
            username: "root".to_string(),
            password: Sensitive(password.into()),
            account_id: Some(account_id.into()),
        }
    }
}

/// The top node of `GET /grid/health/topology`: the grid (its children, sites and nodes, are not
/// read).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct TopologyNode {
    #[serde(deserialize_with = "id_string")]
    pub id: String,
}

/// A tenant account as the grid API returns it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    #[serde(deserialize_with = "id_string")]
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default)]
    pub policy: AccountPolicy,
}

/// `policy` of an account. Fields keeper does not manage are kept as they came, so a PUT built
/// from a GET does not reset settings made outside keeper.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountPolicy {
    #[serde(default)]
    pub use_account_identity_source: bool,
    #[serde(default)]
    pub allow_platform_services: bool,
    /// Logical bytes; `None` is unlimited (sent as JSON `null`).
    #[serde(default, deserialize_with = "lenient_u64_opt")]
    pub quota_object_bytes: Option<u64>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The fields of an account keeper sets, for create (with a root password) and update.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountSpec {
    pub name: String,
    pub description: String,
    pub capabilities: Vec<String>,
    pub policy: AccountPolicy,
}

impl AccountSpec {
    /// The capabilities keeper gives every account: `management` to sign in to the tenant API
    /// (keeper needs it to create keys and buckets), `s3` for data access.
    pub fn standard_capabilities() -> Vec<String> {
        vec!["management".to_string(), "s3".to_string()]
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NewAccount<'a> {
    #[serde(flatten)]
    pub spec: &'a AccountSpec,
    pub password: &'a str,
}

/// Usage of an account or tenant (`/grid/accounts/{id}/usage`, `/org/usage`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    #[serde(default, deserialize_with = "lenient_u64")]
    pub object_count: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub data_bytes: u64,
    #[serde(default)]
    pub buckets: Vec<BucketUsage>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketUsage {
    pub name: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub object_count: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub data_bytes: u64,
}

/// A bucket as listed by `GET /org/containers?include=region,s3ObjectLock,deleteObjects`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    #[serde(default)]
    pub creation_time: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub s3_object_lock: Option<ObjectLock>,
    #[serde(default)]
    pub delete_object_status: Option<DrainState>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectLock {
    pub enabled: bool,
}

/// What keeper asks for when it creates a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewContainer {
    pub name: String,
    pub region: Option<String>,
    pub versioning: bool,
    pub object_lock: bool,
}

/// State of a bucket's "delete objects" drain. The counts are only present while a drain
/// runs, and arrive as strings or numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainState {
    #[serde(default)]
    pub is_deleting_objects: bool,
    #[serde(default, deserialize_with = "lenient_u64_opt")]
    pub initial_object_count: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64_opt")]
    pub initial_object_bytes: Option<u64>,
}

/// A local tenant user.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    pub id: String,
    pub unique_name: String,
    #[serde(default)]
    pub full_name: Option<String>,
    #[serde(default)]
    pub member_of: Vec<String>,
    #[serde(default)]
    pub disable: bool,
    #[serde(default, rename = "userURN")]
    pub user_urn: Option<String>,
}

/// What keeper sends to create a local user (`uniqueName` is `user/<short name>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewUser {
    pub unique_name: String,
    pub full_name: String,
    pub member_of: Vec<String>,
    pub disable: bool,
}

/// A tenant group with its management permissions and S3 policy.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    pub id: String,
    pub unique_name: String,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub policies: Option<GroupPolicies>,
}

/// What keeper sends to create or replace a group (`uniqueName` is `group/<short name>`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewGroup {
    pub unique_name: String,
    pub display_name: String,
    pub management_read_only: bool,
    pub policies: GroupPolicies,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupPolicies {
    #[serde(default)]
    pub management: ManagementPolicy,
    /// IAM-style document (`Statement[]`), without `Principal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagementPolicy {
    #[serde(default)]
    pub manage_all_containers: bool,
    #[serde(default)]
    pub manage_endpoints: bool,
    #[serde(default)]
    pub manage_own_s3_credentials: bool,
    #[serde(default)]
    pub manage_own_container_objects: bool,
    #[serde(default)]
    pub view_all_containers: bool,
    #[serde(default)]
    pub root_access: bool,
}

/// An S3 access key. `access_key`/`secret_access_key` are present only in the answer to the
/// POST that created it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessKey {
    pub id: String,
    #[serde(default, deserialize_with = "id_string_opt")]
    pub account_id: Option<String>,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub expires: Option<String>,
    #[serde(default)]
    pub access_key: Option<String>,
    #[serde(default)]
    pub secret_access_key: Option<Sensitive>,
}

/// Whose keys: the signed-in user or a user by id (`root` is the tenant's root user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOwner<'a> {
    CurrentUser,
    User(&'a str),
}

impl KeyOwner<'_> {
    pub(super) fn path_segment(&self) -> &str {
        match self {
            KeyOwner::CurrentUser => "current-user",
            KeyOwner::User(id) => id,
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrString {
    Number(serde_json::Number),
    String(String),
}

impl NumberOrString {
    fn into_string(self) -> String {
        match self {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s,
        }
    }
}

fn parse_u64<E: serde::de::Error>(value: NumberOrString) -> Result<u64, E> {
    let text = value.into_string();
    text.trim()
        .parse::<u64>()
        .map_err(|_| E::custom(format!("expected a non-negative integer, got {text:?}")))
}

/// An integer sent as a JSON number or a numeric string.
pub(super) fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    parse_u64(NumberOrString::deserialize(d)?)
}

/// Like [`lenient_u64`], with `null` (and absence, through `#[serde(default)]`) as `None`.
pub(super) fn lenient_u64_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<NumberOrString>::deserialize(d)?
        .map(parse_u64)
        .transpose()
}

/// An account id: 20 digits, larger than u64, so it is kept as a string. It is accepted as a
/// JSON number too when that number is an exact integer; a number too large for that would have
/// lost digits in parsing, and a wrong id is worse than an error.
fn id_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    exact_id(NumberOrString::deserialize(d)?)
}

fn id_string_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<NumberOrString>::deserialize(d)?
        .map(exact_id)
        .transpose()
}

fn exact_id<E: serde::de::Error>(value: NumberOrString) -> Result<String, E> {
    match value {
        NumberOrString::Number(n) if !n.is_u64() => Err(E::custom(format!(
            "id {n} arrived as a JSON number that cannot be read exactly"
        ))),
        other => Ok(other.into_string()),
    }
}

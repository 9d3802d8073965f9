//! `providers`: the storage backends S3Tenants pick with `spec.provider`, StorageGRID grids and
//! S3-compatible stores, each validating itself.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{
    Endpoint, RequestRate, RequestsPerSecond, burst_without_rate, default_region, default_true,
    duration, duration_opt,
};
use crate::namespaces::AllowedNamespaces;

/// The shortest drain poll interval accepted, in the configuration and in `spec.drain`
/// (`pollInterval: 0s` would poll the backend in a hot loop).
pub const MIN_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How often keeper looks whether a Ready bucket still exists (and, on StorageGRID, whether the
/// grid drains it without keeper having asked), unless the provider sets `bucketCheckInterval`:
/// one backend call per bucket per hour on an S3-compatible store, one container listing per
/// tenant per hour on StorageGRID.
pub const DEFAULT_BUCKET_CHECK_INTERVAL: Duration = Duration::from_secs(3600);

/// One storage backend: exactly one of `storageGrid` or `s3Compatible`.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(try_from = "ProviderEntry")]
pub enum Provider {
    /// A NetApp StorageGRID grid, managed through its grid and tenant management API.
    StorageGrid(StorageGridProvider),
    /// Any S3-compatible store (AWS S3, MinIO, Ceph RGW); a tenant is a credential scope.
    S3Compatible(S3CompatibleProvider),
}

/// The YAML shape of a provider. An enum would be more direct, but serde_yaml drops the path and
/// message of errors inside enum variants, and naming the bad field is the point of strict parsing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderEntry {
    storage_grid: Option<StorageGridProvider>,
    s3_compatible: Option<S3CompatibleProvider>,
}

impl TryFrom<ProviderEntry> for Provider {
    type Error = String;

    fn try_from(entry: ProviderEntry) -> Result<Self, String> {
        match (entry.storage_grid, entry.s3_compatible) {
            (Some(grid), None) => Ok(Provider::StorageGrid(grid)),
            (None, Some(s3)) => Ok(Provider::S3Compatible(s3)),
            _ => Err("a provider needs exactly one of `storageGrid` or `s3Compatible`".to_string()),
        }
    }
}

impl Provider {
    /// Drain settings of the provider, overridable per bucket.
    pub fn drain(&self) -> &DrainDefaults {
        match self {
            Provider::StorageGrid(p) => &p.drain,
            Provider::S3Compatible(p) => &p.drain,
        }
    }

    /// How often a Ready bucket's usage (objects, bytes) is observed; `None` (the default): never
    /// outside drains, and status shows no usage (see `usageRefresh` in docs/configuration.md).
    pub fn usage_refresh(&self) -> Option<Duration> {
        match self {
            Provider::StorageGrid(p) => p.usage_refresh.as_ref(),
            Provider::S3Compatible(p) => p.usage_refresh.as_ref(),
        }
        .map(|u| u.interval)
    }

    /// How often keeper looks whether a Ready bucket still exists.
    pub fn bucket_check_interval(&self) -> Duration {
        match self {
            Provider::StorageGrid(p) => p.bucket_check_interval,
            Provider::S3Compatible(p) => p.bucket_check_interval,
        }
        .unwrap_or(DEFAULT_BUCKET_CHECK_INTERVAL)
    }

    /// The request rate keeper keeps to for this provider; `None`: no limit.
    pub fn request_rate(&self) -> Option<RequestRate> {
        let (per_second, burst) = self.rate_settings();
        RequestRate::of(per_second, burst)
    }

    /// `requestsPerSecond` and `requestBurst` as written.
    fn rate_settings(&self) -> (Option<RequestsPerSecond>, Option<NonZeroU32>) {
        match self {
            Provider::StorageGrid(p) => (p.requests_per_second, p.request_burst),
            Provider::S3Compatible(p) => (p.requests_per_second, p.request_burst),
        }
    }

    /// The namespaces that may use the provider; `None`: every namespace.
    pub fn allowed_namespaces(&self) -> Option<&AllowedNamespaces> {
        match self {
            Provider::StorageGrid(p) => p.allowed_namespaces.as_ref(),
            Provider::S3Compatible(p) => p.allowed_namespaces.as_ref(),
        }
    }

    /// Who may adopt an existing bucket that keeper did not create.
    pub fn adoption(&self) -> AdoptionScope<'_> {
        match self {
            Provider::StorageGrid(_) => AdoptionScope::TenantAccount,
            Provider::S3Compatible(p) => {
                AdoptionScope::Namespaces(p.adoption.as_ref().map(|a| &a.allowed_namespaces))
            }
        }
    }
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageGridProvider {
    /// Base URL of the admin node, such as `https://grid.example.com` (the client adds `/api/v4`).
    pub admin_endpoint: Endpoint,
    /// Secret with keys `username` and `password` of a grid administrator.
    pub admin_credentials_secret: SecretRef,
    /// URL of the grid's S3 endpoint, published to tenants and applications.
    pub s3_endpoint: Endpoint,
    /// Region name published with the credentials.
    #[serde(default = "default_region")]
    pub region: String,
    /// The namespaces whose S3Tenants may use this provider; absent: every namespace.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub drain: DrainDefaults,
    /// Observe Ready buckets' usage this often (absent: never outside drains).
    #[serde(default)]
    pub usage_refresh: Option<UsageRefresh>,
    /// How often keeper looks whether a Ready bucket still exists (default 1h).
    #[serde(default, deserialize_with = "duration_opt")]
    pub bucket_check_interval: Option<Duration>,
    /// Most requests per second keeper sends for this provider: grid and tenant management API
    /// calls and S3 calls to the grid's S3 endpoint, together. Absent: no limit.
    #[serde(default)]
    pub requests_per_second: Option<RequestsPerSecond>,
    /// Requests that may go at once after a quiet spell (default: one second's worth).
    #[serde(default)]
    pub request_burst: Option<NonZeroU32>,
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3CompatibleProvider {
    /// URL of the S3 endpoint.
    pub endpoint: Endpoint,
    #[serde(default = "default_region")]
    pub region: String,
    /// The namespaces whose S3Tenants may use this provider; absent: every namespace.
    #[serde(default)]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    /// Secret with keys `accessKeyId` and `secretAccessKey`.
    pub credentials_secret: SecretRef,
    /// Address buckets as `endpoint/bucket` instead of `bucket.endpoint` (MinIO and most
    /// self-hosted stores need this).
    #[serde(default = "default_true")]
    pub force_path_style: bool,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub drain: DrainDefaults,
    /// Observe Ready buckets' usage this often (absent: never outside drains).
    #[serde(default)]
    pub usage_refresh: Option<UsageRefresh>,
    /// How often keeper looks whether a Ready bucket still exists (default 1h).
    #[serde(default, deserialize_with = "duration_opt")]
    pub bucket_check_interval: Option<Duration>,
    /// The store's IAM API (AWS IAM, Ceph RGW): each bucket gets its own IAM user whose keys
    /// reach that bucket only, and tenants get no tenant-wide keys. Absent: the store has no
    /// identity API keeper can use.
    #[serde(default)]
    pub iam: Option<IamConfig>,
    /// For stores without an identity API (MinIO): publish the provider's own keys in every
    /// tenant's and bucket's Secret. Those keys reach every bucket of the store, so this must be
    /// chosen explicitly.
    #[serde(default)]
    pub shared_credentials: bool,
    /// Most requests per second keeper sends for this provider, S3 and IAM together. Absent: no
    /// limit.
    #[serde(default)]
    pub requests_per_second: Option<RequestsPerSecond>,
    /// Requests that may go at once after a quiet spell (default: one second's worth).
    #[serde(default)]
    pub request_burst: Option<NonZeroU32>,
    /// Which namespaces' S3Buckets may adopt an existing bucket of the store that keeper did not
    /// create (`keeper.dev/adopt`). Absent: none. keeper manages buckets with the provider's
    /// keys, which reach every bucket of the store, so adoption would let any namespace take any
    /// bucket (and delete it); it is allowed only where the platform team says.
    #[serde(default)]
    pub adoption: Option<AdoptionConfig>,
}

/// `adoption` of an S3-compatible provider.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdoptionConfig {
    /// The namespaces that may adopt: by name and/or by a label selector.
    pub allowed_namespaces: AllowedNamespaces,
}

/// Who may adopt an existing bucket of a provider that keeper did not create.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdoptionScope<'a> {
    /// Any S3Bucket of a tenant, within the tenant's own account (StorageGRID): the account
    /// bounds what it can reach.
    TenantAccount,
    /// S3Buckets in the namespaces these admit, none without (an S3-compatible store, whose
    /// keys reach every bucket).
    Namespaces(Option<&'a AllowedNamespaces>),
}

/// Where the IAM API of an S3-compatible provider is (AWS IAM is not at the S3 endpoint).
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IamConfig {
    /// URL of the IAM API; absent: AWS IAM (`https://iam.amazonaws.com`).
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    /// Region IAM requests are signed for (AWS IAM: `us-east-1`).
    #[serde(default = "default_region")]
    pub region: String,
}

/// How the buckets of an S3-compatible provider get their keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BucketKeys<'a> {
    /// A per-bucket IAM user with a policy on that bucket only.
    PerBucketUser(&'a IamConfig),
    /// The provider's own keys (`sharedCredentials: true`).
    Shared,
    /// Neither `iam` nor `sharedCredentials` is set: keeper has no keys to give out.
    Unconfigured,
}

impl S3CompatibleProvider {
    pub fn bucket_keys(&self) -> BucketKeys<'_> {
        match (&self.iam, self.shared_credentials) {
            (Some(iam), _) => BucketKeys::PerBucketUser(iam),
            (None, true) => BucketKeys::Shared,
            (None, false) => BucketKeys::Unconfigured,
        }
    }
}

/// Why an S3-compatible provider without `iam` or `sharedCredentials` cannot serve tenants.
pub fn unconfigured_keys_message(provider: &str) -> String {
    format!(
        "provider {provider:?} has neither `iam` (per-bucket IAM users) nor `sharedCredentials: true` (publish the provider's own keys) in keeper's configuration (providers.{provider}.s3Compatible); keeper gives out no keys until one is set"
    )
}

/// A Secret keeper reads; the namespace defaults to keeper's own namespace.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// TLS settings for a backend's HTTPS endpoints.
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file with the CA certificates to trust in addition to the system roots.
    #[serde(default)]
    pub ca_bundle_file: Option<PathBuf>,
    /// Skip certificate verification. Only for test grids: keeper logs a warning at start.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// Accept `http://` endpoints. Off by default: plain http carries the grid administrator's
    /// password, tokens and every S3 key unencrypted, so keeper refuses to start with one unless
    /// this says it is meant (local emulators, test stores); keeper then logs a warning.
    #[serde(default)]
    pub allow_plain_http: bool,
}

/// `usageRefresh`: keeper observes each Ready bucket's usage this often. On an S3-compatible
/// store that is a listing of the bucket (one LIST call per 1,000 objects, billed on AWS); on
/// StorageGRID one container listing and one tenant usage call per tenant and interval, shared
/// by the tenant's buckets.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageRefresh {
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
}

/// Drain polling settings of a provider (precedence: bucket spec > provider > built-in defaults).
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainDefaults {
    /// Poll interval during the first hour of a drain (default 3m).
    #[serde(default, deserialize_with = "duration_opt")]
    pub initial_poll_interval: Option<Duration>,
    /// Poll interval after the first hour (default 15m).
    #[serde(default, deserialize_with = "duration_opt")]
    pub long_running_poll_interval: Option<Duration>,
    /// Warn when the object count has not moved for this long (default 3h).
    #[serde(default, deserialize_with = "duration_opt")]
    pub stuck_threshold: Option<Duration>,
    /// Client-side drains only: most objects deleted per second (default 1000).
    #[serde(default)]
    pub max_deletes_per_second: Option<u32>,
    /// Client-side drains only: `DeleteObjects` calls in flight at once (default 4).
    #[serde(default)]
    pub deletes_in_flight: Option<u32>,
    /// Client-side drains only: how long one reconcile deletes before it yields its worker; removing
    /// the drain annotation takes effect between rounds (default 5s).
    #[serde(default, deserialize_with = "duration_opt")]
    pub round_duration: Option<Duration>,
    /// Server-side drains only: the first poll interval; polls then back off to the configured
    /// interval (default 2s).
    #[serde(default, deserialize_with = "duration_opt")]
    pub first_poll_interval: Option<Duration>,
}

/// The most `DeleteObjects` calls a client-side drain may keep in flight.
pub const MAX_DELETES_IN_FLIGHT: u32 = 64;

impl Provider {
    /// Checks what parsing alone cannot: the provider's name (`name`), its credentials Secret,
    /// its namespace rules, its request rate and its drain settings. The error names the field.
    pub(super) fn validate(&self, name: &str) -> Result<(), String> {
        let valid_name = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_name {
            return Err(format!(
                "providers.{name}: provider names must be 1-63 lowercase letters, digits or hyphens"
            ));
        }
        let (secret, kind) = match self {
            Provider::StorageGrid(p) => (
                &p.admin_credentials_secret,
                "storageGrid.adminCredentialsSecret",
            ),
            Provider::S3Compatible(p) => (&p.credentials_secret, "s3Compatible.credentialsSecret"),
        };
        if secret.name.is_empty() {
            return Err(format!("providers.{name}.{kind}.name: must not be empty"));
        }
        let kind = kind.split('.').next().unwrap_or_default();
        if let Some(allowed) = self.allowed_namespaces() {
            crate::namespaces::Restriction::new(allowed)
                .map_err(|e| format!("providers.{name}.{kind}.allowedNamespaces: {e}"))?;
        }
        if let AdoptionScope::Namespaces(Some(allowed)) = self.adoption() {
            crate::namespaces::Restriction::new(allowed).map_err(|e| {
                format!("providers.{name}.s3Compatible.adoption.allowedNamespaces: {e}")
            })?;
        }
        if let (None, Some(_)) = self.rate_settings() {
            return Err(burst_without_rate(&format!("providers.{name}.{kind}")));
        }
        if let Provider::S3Compatible(p) = self
            && p.iam.is_some()
            && p.shared_credentials
        {
            return Err(format!(
                "providers.{name}.s3Compatible: `iam` and `sharedCredentials: true` exclude each other (per-bucket IAM users, or the provider's own keys for everyone)"
            ));
        }
        for (field, value) in [
            ("usageRefresh.interval", self.usage_refresh()),
            ("bucketCheckInterval", Some(self.bucket_check_interval())),
        ] {
            if value.is_some_and(|v| v < MIN_POLL_INTERVAL) {
                return Err(format!(
                    "providers.{name}.{kind}.{field}: must be at least {}s",
                    MIN_POLL_INTERVAL.as_secs()
                ));
            }
        }
        self.drain().validate(name)
    }
}

impl DrainDefaults {
    fn validate(&self, provider: &str) -> Result<(), String> {
        for (field, value) in [
            ("initialPollInterval", self.initial_poll_interval),
            ("longRunningPollInterval", self.long_running_poll_interval),
            ("stuckThreshold", self.stuck_threshold),
            ("roundDuration", self.round_duration),
            ("firstPollInterval", self.first_poll_interval),
        ] {
            if value.is_some_and(|v| v < MIN_POLL_INTERVAL) {
                return Err(format!(
                    "providers.{provider}.drain.{field}: must be at least {}s",
                    MIN_POLL_INTERVAL.as_secs()
                ));
            }
        }
        if self.max_deletes_per_second == Some(0) {
            return Err(format!(
                "providers.{provider}.drain.maxDeletesPerSecond: must be at least 1"
            ));
        }
        if self
            .deletes_in_flight
            .is_some_and(|n| !(1..=MAX_DELETES_IN_FLIGHT).contains(&n))
        {
            return Err(format!(
                "providers.{provider}.drain.deletesInFlight: must be between 1 and {MAX_DELETES_IN_FLIGHT}"
            ));
        }
        Ok(())
    }
}

//! Operator configuration: the YAML file named by `--config` (sample in `config/keeper.yaml`),
//! with some values overridable by flags and environment variables.
//!
//! Parsing is strict: an unknown field, a malformed URL or duration, or a missing required value
//! fails at start with a message that names the field, instead of surfacing later as a
//! confusing reconcile error.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::api::DatabaseSize;
use crate::api::names::{format_duration, parse_duration};
use crate::namespaces::AllowedNamespaces;

/// A controller that `keeper run --controllers` can switch on or off, and that
/// `runtime.<kind>` configures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ControllerKind {
    /// S3Tenant: tenant accounts and their credentials.
    Tenant,
    /// S3Bucket: buckets, drains and bucket credentials.
    Bucket,
    /// CloudDatabase: RDS instances and connection Secrets.
    Database,
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration in {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The whole operator configuration.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperatorConfig {
    /// Storage backends by name; an S3Tenant picks one with `spec.provider`.
    #[serde(default)]
    pub providers: BTreeMap<String, Provider>,
    /// Settings for CloudDatabase instances.
    #[serde(default)]
    pub rds: RdsConfig,
    /// How the controllers run and how long backend calls may take.
    #[serde(default)]
    pub runtime: RuntimeConfig,
}

/// How the controllers run (audit F17: these were fixed in code).
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Reconciles of one kind that run at once (default 4, at most 64). Each holds at most one
    /// backend call at a time, so this also bounds the load keeper puts on a backend.
    #[serde(default = "default_concurrency")]
    pub concurrency: u16,
    /// Per controller (`tenant`, `bucket`, `database`), what differs from the above.
    #[serde(default)]
    pub controllers: ControllerSettings,
    #[serde(default)]
    pub backend_timeouts: BackendTimeouts,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            concurrency: default_concurrency(),
            controllers: ControllerSettings::default(),
            backend_timeouts: BackendTimeouts::default(),
        }
    }
}

impl RuntimeConfig {
    /// Reconciles of `kind` that run at once.
    pub fn concurrency_of(&self, kind: ControllerKind) -> u16 {
        self.controllers
            .of(kind)
            .and_then(|c| c.concurrency)
            .unwrap_or(self.concurrency)
    }
}

/// Settings of single controllers.
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ControllerSettings {
    pub tenant: Option<ControllerRuntime>,
    pub bucket: Option<ControllerRuntime>,
    pub database: Option<ControllerRuntime>,
}

impl ControllerSettings {
    fn of(&self, kind: ControllerKind) -> Option<&ControllerRuntime> {
        match kind {
            ControllerKind::Tenant => self.tenant.as_ref(),
            ControllerKind::Bucket => self.bucket.as_ref(),
            ControllerKind::Database => self.database.as_ref(),
        }
    }
}

/// How one controller runs.
#[derive(Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerRuntime {
    /// Reconciles of this kind that run at once (1-64), instead of `runtime.concurrency`.
    pub concurrency: Option<u16>,
}

fn default_concurrency() -> u16 {
    4
}

/// How long a backend call may take before it counts as a (transient) failure and is retried
/// with backoff, so a stalled backend never holds a reconcile slot for long.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendTimeouts {
    /// Establishing a connection (default 10s).
    #[serde(default = "default_connect_timeout", deserialize_with = "duration")]
    pub connect: Duration,
    /// One request: a StorageGRID management call, one S3 or RDS attempt (default 60s; an RDS
    /// call with the SDK's retries may take three times this).
    #[serde(default = "default_request_timeout", deserialize_with = "duration")]
    pub request: Duration,
}

impl Default for BackendTimeouts {
    fn default() -> Self {
        BackendTimeouts {
            connect: default_connect_timeout(),
            request: default_request_timeout(),
        }
    }
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(60)
}

/// The shortest drain poll interval accepted, in the configuration and in `spec.drain`
/// (`pollInterval: 0s` would poll the backend in a hot loop).
pub const MIN_POLL_INTERVAL: Duration = Duration::from_secs(1);

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

/// RDS settings.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RdsConfig {
    /// AWS region; defaults to the standard AWS configuration chain.
    #[serde(default)]
    pub region: Option<String>,
    /// Endpoint override, for RDS-compatible test servers.
    #[serde(default)]
    pub endpoint: Option<Endpoint>,
    /// Instance class and default storage per size.
    #[serde(default = "default_sizes", deserialize_with = "sizes")]
    pub sizes: BTreeMap<DatabaseSize, SizeClass>,
    /// DB subnet group for new instances.
    #[serde(default)]
    pub db_subnet_group_name: Option<String>,
    /// VPC security groups for new instances.
    #[serde(default)]
    pub vpc_security_group_ids: Vec<String>,
    /// Most RDS requests per second keeper sends. Absent: no limit.
    #[serde(default)]
    pub requests_per_second: Option<RequestsPerSecond>,
    /// Requests that may go at once after a quiet spell (default: one second's worth).
    #[serde(default)]
    pub request_burst: Option<NonZeroU32>,
}

impl RdsConfig {
    /// The request rate keeper keeps to towards RDS; `None`: no limit.
    pub fn request_rate(&self) -> Option<RequestRate> {
        RequestRate::of(self.requests_per_second, self.request_burst)
    }
}

impl Default for RdsConfig {
    fn default() -> Self {
        RdsConfig {
            region: None,
            endpoint: None,
            sizes: default_sizes(),
            db_subnet_group_name: None,
            vpc_security_group_ids: Vec::new(),
            requests_per_second: None,
            request_burst: None,
        }
    }
}

/// What a size means on RDS.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SizeClass {
    pub instance_class: String,
    #[serde(rename = "storageGiB")]
    pub storage_gib: i32,
}

fn default_sizes() -> BTreeMap<DatabaseSize, SizeClass> {
    [
        (DatabaseSize::Small, "db.t3.micro", 20),
        (DatabaseSize::Medium, "db.t3.medium", 50),
        (DatabaseSize::Large, "db.m6i.large", 100),
    ]
    .into_iter()
    .map(|(size, class, gib)| {
        (
            size,
            SizeClass {
                instance_class: class.to_string(),
                storage_gib: gib,
            },
        )
    })
    .collect()
}

/// Sizes named in the file replace the defaults one by one; the others keep their default.
fn sizes<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<DatabaseSize, SizeClass>, D::Error> {
    let mut merged = default_sizes();
    merged.extend(BTreeMap::<DatabaseSize, SizeClass>::deserialize(d)?);
    Ok(merged)
}

fn default_region() -> String {
    "us-east-1".to_string()
}

fn default_true() -> bool {
    true
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse_duration(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn duration_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| parse_duration(&s).map_err(serde::de::Error::custom))
        .transpose()
}

/// `requestsPerSecond`: a rate keeper can keep to. Below one request in 100 s a reconcile would
/// wait minutes for its few calls; above 100,000 the limit would not be one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestsPerSecond(f64);

impl RequestsPerSecond {
    const MIN: f64 = 0.01;
    const MAX: f64 = 100_000.0;
}

impl<'de> Deserialize<'de> for RequestsPerSecond {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let rate = f64::deserialize(d)?;
        // Written so that NaN fails too.
        if !(Self::MIN..=Self::MAX).contains(&rate) {
            return Err(serde::de::Error::custom(format!(
                "must be between {} and {} requests per second, got {rate}",
                Self::MIN,
                Self::MAX
            )));
        }
        Ok(RequestsPerSecond(rate))
    }
}

/// A request rate limit: `per_second` on average, `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRate {
    pub per_second: f64,
    pub burst: NonZeroU32,
}

impl RequestRate {
    /// The rate of `requestsPerSecond` and `requestBurst` (which validation refuses alone); the
    /// burst defaults to one second's worth, so a steady rate is never held back.
    fn of(per_second: Option<RequestsPerSecond>, burst: Option<NonZeroU32>) -> Option<Self> {
        let RequestsPerSecond(per_second) = per_second?;
        // At most 100,000 (RequestsPerSecond::MAX): the cast cannot truncate.
        let one_second = NonZeroU32::new(per_second.ceil() as u32).unwrap_or(NonZeroU32::MIN);
        Some(RequestRate {
            per_second,
            burst: burst.unwrap_or(one_second),
        })
    }
}

/// An absolute http(s) URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint(pub reqwest::Url);

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        let url = reqwest::Url::parse(&raw)
            .map_err(|e| serde::de::Error::custom(format!("invalid URL {raw:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(serde::de::Error::custom(format!(
                "invalid URL {raw:?}: expected http:// or https:// with a host"
            )));
        }
        Ok(Endpoint(url))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str().trim_end_matches('/'))
    }
}

impl RuntimeConfig {
    fn validate(&self) -> Result<(), String> {
        let per_controller = [
            ("tenant", &self.controllers.tenant),
            ("bucket", &self.controllers.bucket),
            ("database", &self.controllers.database),
        ]
        .into_iter()
        .filter_map(|(name, c)| {
            Some((
                format!("runtime.controllers.{name}.concurrency"),
                c.as_ref()?.concurrency?,
            ))
        });
        for (field, concurrency) in
            std::iter::once(("runtime.concurrency".to_string(), self.concurrency))
                .chain(per_controller)
        {
            if !(1..=64).contains(&concurrency) {
                return Err(format!(
                    "{field}: must be between 1 and 64, got {concurrency}"
                ));
            }
        }
        let BackendTimeouts { connect, request } = self.backend_timeouts;
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&connect) {
            return Err(format!(
                "runtime.backendTimeouts.connect: must be between 1s and 1m, got {}",
                format_duration(connect)
            ));
        }
        if !(Duration::from_secs(5)..=Duration::from_secs(600)).contains(&request) {
            return Err(format!(
                "runtime.backendTimeouts.request: must be between 5s and 10m, got {}",
                format_duration(request)
            ));
        }
        Ok(())
    }
}

/// `requestBurst` shapes a rate that is not there.
fn burst_without_rate(section: &str) -> String {
    format!("{section}.requestBurst: needs requestsPerSecond (a burst of what rate?)")
}

impl OperatorConfig {
    /// Whether some provider admits namespaces by label: keeper then watches namespaces.
    pub fn uses_namespace_selector(&self) -> bool {
        let by_label = |allowed: Option<&AllowedNamespaces>| {
            allowed.is_some_and(|allowed| allowed.selector.is_some())
        };
        self.providers.values().any(|p| {
            by_label(p.allowed_namespaces())
                || matches!(p.adoption(), AdoptionScope::Namespaces(allowed) if by_label(allowed))
        })
    }

    /// The (namespace, name) of every provider credentials Secret, with `default_namespace`
    /// (keeper's own) where the configuration names none: keeper watches these by name.
    pub fn provider_secrets(&self, default_namespace: &str) -> Vec<(String, String)> {
        let mut secrets: Vec<(String, String)> = self
            .providers
            .values()
            .map(|provider| {
                let secret = match provider {
                    Provider::StorageGrid(p) => &p.admin_credentials_secret,
                    Provider::S3Compatible(p) => &p.credentials_secret,
                };
                (
                    secret
                        .namespace
                        .clone()
                        .unwrap_or_else(|| default_namespace.to_string()),
                    secret.name.clone(),
                )
            })
            .collect();
        secrets.sort();
        secrets.dedup();
        secrets
    }

    /// Reads and validates the configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses configuration text; the error names the offending field.
    pub fn parse(text: &str) -> Result<Self, String> {
        // An empty file is a valid, empty configuration.
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        // serde_path_to_error names the full path of the failing field, which serde_yaml alone
        // stops short of for values rejected by a custom deserializer (URLs, durations).
        let config: OperatorConfig = serde_path_to_error::deserialize(
            serde_yaml::Deserializer::from_str(text),
        )
        .map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // serde_yaml prefixes its own (shorter) path; keep only the full one.
            let inner = inner.to_string();
            let inner = inner
                .split_once(": ")
                .filter(|(p, _)| path.starts_with(p))
                .map_or(inner.as_str(), |(_, m)| m)
                .to_string();
            if path == "." {
                inner
            } else {
                format!("{path}: {inner}")
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), String> {
        for (name, provider) in &self.providers {
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
            let (secret, kind) = match provider {
                Provider::StorageGrid(p) => (
                    &p.admin_credentials_secret,
                    "storageGrid.adminCredentialsSecret",
                ),
                Provider::S3Compatible(p) => {
                    (&p.credentials_secret, "s3Compatible.credentialsSecret")
                }
            };
            if secret.name.is_empty() {
                return Err(format!("providers.{name}.{kind}.name: must not be empty"));
            }
            if let Some(allowed) = provider.allowed_namespaces() {
                crate::namespaces::Restriction::new(allowed).map_err(|e| {
                    let kind = kind.split('.').next().unwrap_or_default();
                    format!("providers.{name}.{kind}.allowedNamespaces: {e}")
                })?;
            }
            if let AdoptionScope::Namespaces(Some(allowed)) = provider.adoption() {
                crate::namespaces::Restriction::new(allowed).map_err(|e| {
                    format!("providers.{name}.s3Compatible.adoption.allowedNamespaces: {e}")
                })?;
            }
            if let (None, Some(_)) = provider.rate_settings() {
                let kind = kind.split('.').next().unwrap_or_default();
                return Err(burst_without_rate(&format!("providers.{name}.{kind}")));
            }
            if let Provider::S3Compatible(p) = provider
                && p.iam.is_some()
                && p.shared_credentials
            {
                return Err(format!(
                    "providers.{name}.s3Compatible: `iam` and `sharedCredentials: true` exclude each other (per-bucket IAM users, or the provider's own keys for everyone)"
                ));
            }
        }
        for (name, provider) in &self.providers {
            let drain = provider.drain();
            for (field, value) in [
                ("initialPollInterval", drain.initial_poll_interval),
                ("longRunningPollInterval", drain.long_running_poll_interval),
                ("stuckThreshold", drain.stuck_threshold),
                ("roundDuration", drain.round_duration),
                ("firstPollInterval", drain.first_poll_interval),
            ] {
                if value.is_some_and(|v| v < MIN_POLL_INTERVAL) {
                    return Err(format!(
                        "providers.{name}.drain.{field}: must be at least {}s",
                        MIN_POLL_INTERVAL.as_secs()
                    ));
                }
            }
            if drain.max_deletes_per_second == Some(0) {
                return Err(format!(
                    "providers.{name}.drain.maxDeletesPerSecond: must be at least 1"
                ));
            }
            if drain
                .deletes_in_flight
                .is_some_and(|n| !(1..=MAX_DELETES_IN_FLIGHT).contains(&n))
            {
                return Err(format!(
                    "providers.{name}.drain.deletesInFlight: must be between 1 and {MAX_DELETES_IN_FLIGHT}"
                ));
            }
        }
        self.runtime.validate()?;
        if let (None, Some(_)) = (self.rds.requests_per_second, self.rds.request_burst) {
            return Err(burst_without_rate("rds"));
        }
        for (size, class) in &self.rds.sizes {
            let size = serde_json::to_value(size).unwrap_or_default();
            let size = size.as_str().unwrap_or_default();
            if class.instance_class.is_empty() {
                return Err(format!("rds.sizes.{size}.instanceClass: must not be empty"));
            }
            if !(20..=65536).contains(&class.storage_gib) {
                return Err(format!(
                    "rds.sizes.{size}.storageGiB: must be between 20 and 65536, got {}",
                    class.storage_gib
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = include_str!("../config/keeper.yaml");

    #[test]
    fn the_sample_configuration_parses() {
        let config = OperatorConfig::parse(SAMPLE).unwrap();
        assert!(matches!(
            config.providers.get("default"),
            Some(Provider::StorageGrid(_))
        ));
        assert!(matches!(
            config.providers.get("s3"),
            Some(Provider::S3Compatible(_))
        ));
        assert_eq!(
            config.providers["s3"].request_rate(),
            Some(RequestRate {
                per_second: 50.0,
                burst: NonZeroU32::new(50).unwrap()
            })
        );
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        let config = OperatorConfig::parse("").unwrap();
        assert!(config.providers.is_empty());
        assert_eq!(
            config.rds.sizes[&DatabaseSize::Small].instance_class,
            "db.t3.micro"
        );
        assert_eq!(config.rds.sizes[&DatabaseSize::Medium].storage_gib, 50);
        assert_eq!(
            config.rds.sizes[&DatabaseSize::Large].instance_class,
            "db.m6i.large"
        );
    }

    #[test]
    fn sizes_override_one_by_one() {
        let config = OperatorConfig::parse(
            "rds:\n  sizes:\n    large:\n      instanceClass: db.r6g.xlarge\n      storageGiB: 500\n",
        )
        .unwrap();
        assert_eq!(
            config.rds.sizes[&DatabaseSize::Large].instance_class,
            "db.r6g.xlarge"
        );
        assert_eq!(
            config.rds.sizes[&DatabaseSize::Small].instance_class,
            "db.t3.micro"
        );
    }

    #[test]
    fn an_unknown_field_is_named() {
        let err = OperatorConfig::parse(
            "providers:\n  default:\n    storageGrid:\n      adminEndpont: https://grid\n",
        )
        .unwrap_err();
        assert!(err.contains("adminEndpont"), "{err}");
        assert!(err.contains("providers.default"), "{err}");
    }

    #[test]
    fn an_unknown_top_level_field_is_named() {
        let err = OperatorConfig::parse("rdss: {}\n").unwrap_err();
        assert!(err.contains("unknown field `rdss`"), "{err}");
    }

    #[test]
    fn an_unknown_provider_kind_is_named() {
        let err = OperatorConfig::parse("providers:\n  x:\n    minio: {}\n").unwrap_err();
        assert!(err.contains("minio"), "{err}");
        let err = OperatorConfig::parse("providers:\n  x: {}\n").unwrap_err();
        assert!(
            err.contains("providers.x") && err.contains("exactly one"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_url_is_named() {
        let err = OperatorConfig::parse(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: not a url\n      credentialsSecret: {name: x}\n",
        )
        .unwrap_err();
        assert!(err.contains("providers.s3.s3Compatible.endpoint"), "{err}");
        assert!(err.contains("invalid URL"), "{err}");
    }

    #[test]
    fn a_bad_duration_is_named() {
        let err = OperatorConfig::parse(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n      drain:\n        stuckThreshold: 3 hours\n",
        )
        .unwrap_err();
        assert!(err.contains("drain.stuckThreshold"), "{err}");
        assert!(err.contains("invalid duration"), "{err}");
    }

    #[test]
    fn a_missing_required_field_is_named() {
        let err = OperatorConfig::parse(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n",
        )
        .unwrap_err();
        assert!(err.contains("credentialsSecret"), "{err}");
    }

    #[test]
    fn allowed_namespaces_parse_and_an_empty_or_bad_one_is_named() {
        let config = OperatorConfig::parse(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n      allowedNamespaces:\n        names: [team-a]\n        selector: {matchLabels: {keeper.dev/s3: allowed}}\n",
        )
        .unwrap();
        let allowed = config.providers["s3"].allowed_namespaces().unwrap();
        assert_eq!(allowed.names, vec!["team-a".to_string()]);
        assert!(config.uses_namespace_selector());
        assert!(
            !OperatorConfig::parse(SAMPLE)
                .unwrap()
                .uses_namespace_selector()
        );
        let err = OperatorConfig::parse(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n      allowedNamespaces: {}\n",
        )
        .unwrap_err();
        assert!(
            err.contains("providers.s3.s3Compatible.allowedNamespaces"),
            "{err}"
        );
        let err = OperatorConfig::parse(
            "providers:\n  g:\n    storageGrid:\n      adminEndpoint: https://grid\n      adminCredentialsSecret: {name: x}\n      s3Endpoint: https://s3\n      allowedNamespaces:\n        selector: {matchExpressions: [{key: a, operator: Near}]}\n",
        )
        .unwrap_err();
        assert!(
            err.contains("providers.g.storageGrid.allowedNamespaces: selector"),
            "{err}"
        );
    }

    #[test]
    fn adoption_is_off_unless_namespaces_are_named_and_only_s3_compatible_stores_have_it() {
        const STORE: &str = "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n";
        let config = OperatorConfig::parse(STORE).unwrap();
        assert_eq!(
            config.providers["s3"].adoption(),
            AdoptionScope::Namespaces(None)
        );
        let config = OperatorConfig::parse(&format!(
            "{STORE}      adoption:\n        allowedNamespaces: {{selector: {{matchLabels: {{adopt: yes}}}}}}\n"
        ))
        .unwrap();
        assert!(matches!(
            config.providers["s3"].adoption(),
            AdoptionScope::Namespaces(Some(allowed)) if allowed.selector.is_some()
        ));
        assert!(config.uses_namespace_selector(), "labels are read for it");
        let err = OperatorConfig::parse(&format!(
            "{STORE}      adoption:\n        allowedNamespaces: {{}}\n"
        ))
        .unwrap_err();
        assert!(
            err.contains("providers.s3.s3Compatible.adoption.allowedNamespaces"),
            "{err}"
        );
        let grid = OperatorConfig::parse(SAMPLE).unwrap();
        assert_eq!(
            grid.providers["default"].adoption(),
            AdoptionScope::TenantAccount
        );
        let err = OperatorConfig::parse(
            "providers:\n  g:\n    storageGrid:\n      adminEndpoint: https://grid\n      adminCredentialsSecret: {name: x}\n      s3Endpoint: https://s3\n      adoption: {allowedNamespaces: {names: [a]}}\n",
        )
        .unwrap_err();
        assert!(err.contains("adoption"), "{err}");
    }

    #[test]
    fn runtime_settings_default_parse_and_are_bounded() {
        let config = OperatorConfig::parse("").unwrap();
        assert_eq!(config.runtime.concurrency, 4);
        assert_eq!(
            config.runtime.backend_timeouts.request,
            Duration::from_secs(60)
        );
        assert_eq!(
            config.runtime.backend_timeouts.connect,
            Duration::from_secs(10)
        );
        assert_eq!(config.runtime.concurrency_of(ControllerKind::Bucket), 4);
        let config = OperatorConfig::parse(
            "runtime:\n  concurrency: 16\n  controllers: {bucket: {concurrency: 32}}\n  backendTimeouts: {connect: 3s, request: 2m}\n",
        )
        .unwrap();
        assert_eq!(config.runtime.concurrency, 16);
        assert_eq!(config.runtime.concurrency_of(ControllerKind::Bucket), 32);
        assert_eq!(config.runtime.concurrency_of(ControllerKind::Tenant), 16);
        assert_eq!(
            config.runtime.backend_timeouts,
            BackendTimeouts {
                connect: Duration::from_secs(3),
                request: Duration::from_secs(120)
            }
        );
        for (yaml, field) in [
            ("runtime: {concurrency: 0}\n", "runtime.concurrency"),
            ("runtime: {concurrency: 500}\n", "runtime.concurrency"),
            (
                "runtime: {controllers: {bucket: {concurrency: 0}}}\n",
                "runtime.controllers.bucket.concurrency: must be between 1 and 64, got 0",
            ),
            (
                "runtime: {controllers: {buckets: {concurrency: 8}}}\n",
                "runtime.controllers.buckets: unknown field `buckets`, expected one of `tenant`, `bucket`, `database`",
            ),
            (
                "runtime: {backendTimeouts: {request: 0s}}\n",
                "runtime.backendTimeouts.request",
            ),
            (
                "runtime: {backendTimeouts: {connect: 5m}}\n",
                "runtime.backendTimeouts.connect",
            ),
            (
                "runtime: {backendTimeouts: {request: soon}}\n",
                "runtime.backendTimeouts.request",
            ),
        ] {
            let err = OperatorConfig::parse(yaml).unwrap_err();
            assert!(err.contains(field), "{yaml}: {err}");
        }
    }

    #[test]
    fn too_small_drain_intervals_are_refused_at_start() {
        for field in [
            "initialPollInterval",
            "longRunningPollInterval",
            "stuckThreshold",
            "roundDuration",
            "firstPollInterval",
        ] {
            let err = OperatorConfig::parse(&format!(
                "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {{name: x}}\n      drain:\n        {field}: 0s\n"
            ))
            .unwrap_err();
            assert!(
                err.contains(&format!("providers.s3.drain.{field}: must be at least 1s")),
                "{err}"
            );
        }
        assert!(
            OperatorConfig::parse(
                "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n      drain: {initialPollInterval: 1s}\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn client_side_drain_pace_is_configured_within_bounds() {
        let parse = |drain: &str| {
            OperatorConfig::parse(&format!(
                "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {{name: x}}\n      drain: {drain}\n"
            ))
        };
        let config = parse("{deletesInFlight: 8, roundDuration: 1m, maxDeletesPerSecond: 5000, firstPollInterval: 5s}").unwrap();
        let drain = config.providers["s3"].drain();
        assert_eq!(drain.deletes_in_flight, Some(8));
        assert_eq!(drain.round_duration, Some(Duration::from_secs(60)));
        assert_eq!(drain.max_deletes_per_second, Some(5000));
        assert_eq!(drain.first_poll_interval, Some(Duration::from_secs(5)));
        for (drain, field) in [
            (
                "{deletesInFlight: 0}",
                "drain.deletesInFlight: must be between 1 and 64",
            ),
            (
                "{deletesInFlight: 65}",
                "drain.deletesInFlight: must be between 1 and 64",
            ),
            (
                "{maxDeletesPerSecond: 0}",
                "drain.maxDeletesPerSecond: must be at least 1",
            ),
        ] {
            let err = parse(drain).unwrap_err();
            assert!(err.contains(field), "{drain}: {err}");
        }
    }

    #[test]
    fn request_rates_are_optional_and_their_burst_defaults_to_one_seconds_worth() {
        let grid = "providers:\n  g:\n    storageGrid:\n      adminEndpoint: https://grid\n      adminCredentialsSecret: {name: x}\n      s3Endpoint: https://s3\n";
        let s3 = "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n";
        let rate = |per_second: f64, burst: u32| {
            Some(RequestRate {
                per_second,
                burst: NonZeroU32::new(burst).unwrap(),
            })
        };
        // Both providers in one file.
        let both =
            |grid: &str, s3: &str| format!("{grid}{}", s3.trim_start_matches("providers:\n"));
        let config = OperatorConfig::parse(&both(grid, s3)).unwrap();
        assert_eq!(config.providers["g"].request_rate(), None);
        assert_eq!(config.providers["s3"].request_rate(), None);
        assert_eq!(config.rds.request_rate(), None);
        let config = OperatorConfig::parse(&format!(
            "{}rds: {{requestsPerSecond: 0.5}}\n",
            both(
                &format!("{grid}      requestsPerSecond: 25\n"),
                &format!("{s3}      requestsPerSecond: 2.5\n      requestBurst: 10\n")
            )
        ))
        .unwrap();
        assert_eq!(config.providers["g"].request_rate(), rate(25.0, 25));
        assert_eq!(config.providers["s3"].request_rate(), rate(2.5, 10));
        assert_eq!(config.rds.request_rate(), rate(0.5, 1));
        for (yaml, message) in [
            (
                format!("{s3}      requestsPerSecond: 0\n"),
                "providers.s3.s3Compatible.requestsPerSecond: must be between 0.01 and 100000 requests per second, got 0",
            ),
            (
                format!("{s3}      requestsPerSecond: -5\n"),
                "providers.s3.s3Compatible.requestsPerSecond: must be between 0.01 and 100000 requests per second, got -5",
            ),
            (
                format!("{grid}      requestsPerSecond: .nan\n"),
                "providers.g.storageGrid.requestsPerSecond: must be between",
            ),
            (
                format!("{grid}      requestsPerSecond: 1e6\n"),
                "providers.g.storageGrid.requestsPerSecond: must be between",
            ),
            (
                format!("{s3}      requestsPerSecond: fast\n"),
                "providers.s3.s3Compatible.requestsPerSecond: invalid type",
            ),
            (
                "rds: {requestsPerSecond: 0}\n".to_string(),
                "rds.requestsPerSecond: must be between",
            ),
            (
                format!("{s3}      requestsPerSecond: 5\n      requestBurst: 0\n"),
                "providers.s3.s3Compatible.requestBurst: invalid value: integer `0`",
            ),
            (
                format!("{grid}      requestBurst: 5\n"),
                "providers.g.storageGrid.requestBurst: needs requestsPerSecond",
            ),
            (
                "rds: {requestBurst: 5}\n".to_string(),
                "rds.requestBurst: needs requestsPerSecond",
            ),
            (
                format!("{s3}      requestsPerSecnd: 5\n"),
                "unknown field `requestsPerSecnd`",
            ),
        ] {
            let err = OperatorConfig::parse(&yaml).unwrap_err();
            assert!(err.contains(message), "{yaml}: {err}");
        }
    }

    #[test]
    fn iam_and_shared_credentials_choose_how_buckets_get_keys() {
        let base = "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n";
        let keys = |extra: &str| {
            let config = OperatorConfig::parse(&format!("{base}{extra}")).unwrap();
            let Some(Provider::S3Compatible(p)) = config.providers.get("s3") else {
                panic!("an S3-compatible provider");
            };
            match p.bucket_keys() {
                BucketKeys::PerBucketUser(iam) => {
                    format!(
                        "iam {:?} {}",
                        iam.endpoint.as_ref().map(|e| e.to_string()),
                        iam.region
                    )
                }
                other => format!("{other:?}"),
            }
        };
        assert_eq!(keys(""), "Unconfigured");
        assert_eq!(keys("      sharedCredentials: true\n"), "Shared");
        assert_eq!(keys("      iam: {}\n"), "iam None us-east-1");
        assert_eq!(
            keys("      iam: {endpoint: http://iam:9000, region: eu-west-1}\n"),
            "iam Some(\"http://iam:9000\") eu-west-1"
        );
        let err = OperatorConfig::parse(&format!(
            "{base}      iam: {{}}\n      sharedCredentials: true\n"
        ))
        .unwrap_err();
        assert!(err.contains("providers.s3.s3Compatible"), "{err}");
        assert!(err.contains("exclude each other"), "{err}");
    }

    #[test]
    fn semantic_errors_are_named() {
        let err = OperatorConfig::parse(
            "rds:\n  sizes:\n    small:\n      instanceClass: db.t3.micro\n      storageGiB: 5\n",
        )
        .unwrap_err();
        assert!(err.contains("rds.sizes.small.storageGiB"), "{err}");
        let err = OperatorConfig::parse(
            "providers:\n  Bad_Name:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n",
        )
        .unwrap_err();
        assert!(err.contains("providers.Bad_Name"), "{err}");
    }
}

//! Operator configuration: the YAML file named by `--config` (sample in `config/keeper.yaml`),
//! with some values overridable by flags and environment variables.
//!
//! Parsing is strict: an unknown field, a malformed URL or duration, or a missing required value
//! fails at start with a message that names the field, instead of surfacing later as a
//! confusing reconcile error.
//!
//! One module per section, each validating itself: [`provider`] (storage backends), [`rds`]
//! (CloudDatabase), [`runtime`] (how the controllers run); this one parses the whole and holds
//! the value types they share (durations, endpoints, request rates).

mod provider;
mod rds;
mod runtime;
mod scope;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::api::names::parse_duration;
use crate::namespaces::AllowedNamespaces;

pub use provider::*;
pub use rds::*;
pub use runtime::*;
pub use scope::WatchNamespaces;

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
    /// The namespaces keeper watches and acts in; absent, every namespace.
    #[serde(default)]
    pub watch_namespaces: Option<WatchNamespaces>,
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
            provider.validate(name)?;
        }
        self.runtime.validate()?;
        self.rds.validate()
    }
}

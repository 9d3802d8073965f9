//! `rds`: where CloudDatabases are created, and what each size means.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::{Deserialize, Deserializer};

use super::{Endpoint, RequestRate, RequestsPerSecond, burst_without_rate};
use crate::api::DatabaseSize;

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

impl RdsConfig {
    /// Checks what parsing alone cannot; the error names the field.
    pub(super) fn validate(&self) -> Result<(), String> {
        if let (None, Some(_)) = (self.requests_per_second, self.request_burst) {
            return Err(burst_without_rate("rds"));
        }
        for (size, class) in &self.sizes {
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

//! Management API (grid + tenant) against a real moto server, one module per concern.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{Stack, TENANT_PASSWORD, eventually};
use reqwest::Method;
use serde_json::json;

mod accounts;
mod auth;
mod containers;
mod debug;
mod users;

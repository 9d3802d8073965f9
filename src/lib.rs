//! keeper: a Kubernetes operator for S3 tenants, S3 buckets and RDS databases.
//!
//! One manager process runs three isolated controllers (one module each under [`controllers`])
//! that share one kube client, one Prometheus registry and the mechanics in [`runtime`].
//!
//! These docs are for keeper's developers (`cargo doc --document-private-items`, checked by
//! `make doc`): a module's doc may name its private parts.
#![allow(rustdoc::private_intra_doc_links)]

pub mod api;
pub mod backends;
pub mod cluster;
pub mod config;
pub mod controllers;
pub mod crdgen;
pub mod error;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod namespaces;
pub mod plugin;
pub mod providers;
pub mod release;
pub mod runtime;
pub mod server;
pub mod telemetry;
#[cfg(test)]
mod test_support;
pub mod webhook;

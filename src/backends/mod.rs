//! Clients of the external systems keeper manages, each behind a small trait.

pub mod rds;

//! Clients of the storage and database backends keeper manages, each behind a small trait.

pub mod error;
pub mod iam;
pub mod rate;
pub mod rds;
pub mod s3;
pub mod storagegrid;

//! Clients of the storage and database backends keeper manages, shared by the controllers.

pub mod s3;
pub mod storagegrid;

//! Clients of the storage and database backends keeper manages, each behind a small trait.

pub mod call;
pub mod iam;
pub mod identity;
pub mod rate;
pub mod rds;
pub mod s3;
pub mod storagegrid;

/// S3 access keys (the secret never reaches a log line).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

//! Whether a set of keys reaches a bucket: how keeper checks freshly issued per-bucket keys
//! before it calls the bucket Ready (IAM is eventually consistent: a new key may be refused for
//! a few seconds).

use super::{S3Error, S3Store, classify};
use crate::metrics::Metrics;

/// What the store answered to a listing signed with the keys under test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Granted,
    /// The store refused the keys or the request (unknown key, bad signature, access denied):
    /// its error code.
    Refused(String),
}

/// Error codes by which a store refuses keys it does not know yet or a policy not yet in force.
const REFUSED_CODES: &[&str] = &[
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
];

impl S3Store {
    /// Lists at most one object of `bucket` (`s3:ListBucket`, which a bucket's own keys have).
    pub async fn access(&self, metrics: &Metrics, bucket: &str) -> Result<Access, S3Error> {
        self.call(metrics, "list_objects_v2", async {
            match self
                .client
                .list_objects_v2()
                .bucket(bucket)
                .max_keys(1)
                .send()
                .await
                .map_err(|e| classify("list_objects_v2", e))
            {
                Ok(_) => Ok(Access::Granted),
                Err(e) if REFUSED_CODES.contains(&e.code.as_str()) => Ok(Access::Refused(e.code)),
                Err(e) => Err(e),
            }
        })
        .await
    }
}

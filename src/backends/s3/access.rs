//! Whether a set of keys reaches a bucket: how keeper checks freshly issued per-bucket keys
//! before it calls the bucket Ready (IAM is eventually consistent: a new key may be refused for
//! a few seconds).

use super::{S3Error, S3Store, classify, static_credentials};
use crate::backends::Keys;
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
    /// Lists at most one object of `bucket` (`s3:ListBucket`, which a bucket's own keys have),
    /// signed with `keys`: this client's endpoint, timeouts, request rate and connections, with
    /// the keys under test overriding its own for this one call. The override, not a client of
    /// their own: building a client per check cost about twice the call itself (measured against
    /// moto: 525 µs against 280 µs of keeper's CPU per check), and an override's identity cache
    /// lives only as long as the call.
    pub async fn access(
        &self,
        metrics: &Metrics,
        keys: &Keys,
        bucket: &str,
    ) -> Result<Access, S3Error> {
        let signed_with_keys = aws_sdk_s3::Config::builder().credentials_provider(
            static_credentials(&keys.access_key_id, &keys.secret_access_key),
        );
        self.call(metrics, "list_objects_v2", async {
            match self
                .client
                .list_objects_v2()
                .bucket(bucket)
                .max_keys(1)
                .customize()
                .config_override(signed_with_keys)
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

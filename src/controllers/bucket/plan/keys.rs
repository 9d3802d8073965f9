//! The keys of a bucket: the IAM user's deterministic name and policy (S3-compatible providers
//! with an IAM API), and, for a user of the bucket's own on either backend, which keys to create
//! and delete, and when, so that neither a crash at any point (above all between creating a key
//! and publishing it) nor two writers issuing keys at once (two keepers without leader election,
//! or one behind a stale cache) piles up keys or publishes a deleted one. IAM allows two access
//! keys per user: one published, one being rotated in.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::api::S3BucketStatus;
use crate::backends::Keys;
use crate::runtime::conditions;

/// `Ready=False` reason while the store does not know a bucket's published keys yet.
pub const KEYS_NOT_YET_VALID: &str = "CredentialsNotYetValid";
/// `Ready=False` reason while the store knows a bucket's published keys but denies keeper's check
/// with them: a policy not in force yet, or one keeper's requests never meet.
pub const KEYS_DENIED: &str = "CredentialsDenied";

/// Whether a store's refusal of a key set says it does not know the keys (deleted, or not
/// propagated yet), as opposed to denying a request it recognised them for (`AccessDenied`: the
/// user's policy not in force yet, or a bucket policy, SCP or VPC-endpoint condition keeper's
/// check does not meet). Only unknown keys are ever taken as lost and replaced: new keys would be
/// denied the same way, and replacing them would break every application holding them.
pub fn keys_unknown(answer: &str) -> bool {
    matches!(
        answer,
        "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken"
    )
}

/// The AWS partition of a region, for the ARNs of a bucket's policy: `aws-cn` in China,
/// `aws-us-gov` in GovCloud, `aws` elsewhere (and on stores that only speak `aws`).
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// Users keeper creates live under this IAM path, so that they are easy to list and to tell
/// apart from the account's own users.
pub const USER_PATH: &str = "/keeper/";
/// The name of the user's inline policy.
pub const POLICY_NAME: &str = "keeper-bucket";

/// The IAM user of `bucket`: `keeper-<start of the bucket name>-<hash of the bucket name>`, at most
/// 56 characters (IAM allows 64). Always hashed, so that no bucket name can be chosen to land
/// on another bucket's user.
pub fn user_name(bucket: &str) -> String {
    let digest = Sha256::digest(bucket.as_bytes());
    let hash: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let start: String = bucket.chars().take(24).collect();
    format!("keeper-{start}-{hash}")
}

/// The user's inline policy: object reads, writes, deletes (with versions and multipart
/// uploads) and listings of `bucket`, and nothing else (no bucket configuration, no deletion of
/// the bucket, no other bucket). `partition`: see [`partition`].
pub fn bucket_policy(bucket: &str, partition: &str) -> String {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListThisBucket",
                "Effect": "Allow",
                "Action": [
                    "s3:ListBucket",
                    "s3:ListBucketVersions",
                    "s3:ListBucketMultipartUploads",
                ],
                "Resource": format!("arn:{partition}:s3:::{bucket}"),
            },
            {
                "Sid": "ObjectsOfThisBucket",
                "Effect": "Allow",
                "Action": [
                    "s3:GetObject",
                    "s3:GetObjectVersion",
                    "s3:PutObject",
                    "s3:DeleteObject",
                    "s3:DeleteObjectVersion",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                ],
                "Resource": format!("arn:{partition}:s3:::{bucket}/*"),
            },
        ],
    })
    .to_string()
}

/// Whether a bucket's IAM user is looked up before it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserLook {
    /// Create the user and write its policy, then list its keys unless the create made it: the
    /// cheapest order for a user that most likely does not exist yet (a new bucket, one whose
    /// Secret an older keeper filled with the provider's own key, or a crash before the first
    /// key was published).
    CreateFirst,
    /// List the user's keys (which says whether it exists) and read its policy, writing only
    /// what is missing or differs: reads only for a user that exists, as every settled bucket's
    /// does. IAM throttles writes hard; a restart must not write once per bucket.
    LookFirst,
}

/// How to find the bucket's user, from the id of the user's key the Secret carries (see
/// [`KeySource::users_key`]): a key of the user was issued to it, so the user exists unless it
/// was deleted behind keeper's back.
pub fn user_look(published: Option<&str>) -> UserLook {
    if published.is_some() {
        UserLook::LookFirst
    } else {
        UserLook::CreateFirst
    }
}

/// Whether the user's inline policy as stored (`None`: there is none) is `wanted`: compared as
/// JSON, since a store may keep the document reformatted (spacing, key order). A document that
/// is not JSON is not keeper's, and is written again.
pub fn policy_in_force(stored: Option<&str>, wanted: &str) -> bool {
    let json = |document: &str| serde_json::from_str::<serde_json::Value>(document).ok();
    stored
        .and_then(json)
        .is_some_and(|stored| Some(stored) == json(wanted))
}

/// Where a bucket's keys come from, as its backend says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The provider's own keys (`sharedCredentials: true`): published as they are, never issued
    /// or deleted by keeper.
    Provider(Keys),
    /// A user of the bucket's own, whose access keys keeper issues and deletes.
    BucketUser {
        /// How many access keys the store lets one user have (IAM: two), if it limits them.
        limit: Option<usize>,
        /// A key id that is never the user's: the provider's own key, which a keeper older than
        /// per-bucket users published. It is replaced, and never deleted.
        foreign: Option<String>,
    },
}

impl KeySource {
    /// The published keys, if they are the bucket user's to keep or replace: not the provider's
    /// own key.
    pub fn users_key<'a>(&self, published: Option<&'a Keys>) -> Option<&'a Keys> {
        match self {
            KeySource::Provider(_) => None,
            KeySource::BucketUser { foreign, .. } => {
                published.filter(|k| Some(&k.access_key_id) != foreign.as_ref())
            }
        }
    }
}

/// What the bucket's Secret gets, decided before any call to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstLook {
    /// The published keys stay, without a call (the steady state).
    Keep,
    /// Publish these (the provider's own keys).
    Publish(Keys),
    /// List the user's keys and decide with [`key_steps`]; the store allows `limit` keys per
    /// user, if it limits them.
    Inventory { limit: Option<usize> },
}

/// `published`: the keys the Secret carries; `replace`: new keys are wanted (a rotation, or the
/// published keys are lost); `settled`: the last reconcile ended with the bucket Ready, so the
/// published key was checked and nothing else was left on the user, and this process has listed
/// the user's keys since it started (another writer killed between creating a key and publishing
/// it leaves one that only a listing finds). Otherwise the user's keys are looked at: what an
/// interrupted issuance left behind goes then.
pub fn first_look(
    source: &KeySource,
    published: Option<&Keys>,
    replace: bool,
    settled: bool,
) -> FirstLook {
    match source {
        // Rotating them is the provider's business: "rotation" republishes them.
        KeySource::Provider(keys) if published == Some(keys) => FirstLook::Keep,
        KeySource::Provider(keys) => FirstLook::Publish(keys.clone()),
        KeySource::BucketUser { limit, .. } => {
            if source.users_key(published).is_some() && !replace && settled {
                FirstLook::Keep
            } else {
                FirstLook::Inventory { limit: *limit }
            }
        }
    }
}

/// What to do with the user's access keys.
///
/// The Secret is the only record of which key is in use, and every write of it is a
/// compare-and-swap on the version read before the user's keys were listed (see
/// [`super::super::reconcile`]). So a key that the Secret does not carry is deleted only by a
/// reconcile that has just changed the Secret from that version: by then every other writer's
/// own swap, from the same or an older version, can only fail, and the key it was about to
/// publish can never be published. A key listed but not published is otherwise indistinguishable
/// from a key another writer (a second keeper, or this one with a stale cache) created a moment
/// ago and is about to publish: deleting it first is how two writers used to delete each
/// other's keys and publish a deleted one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySteps {
    /// Keys to delete before anything is created, each only once the Secret was claimed (changed
    /// from the version read, without new keys): the keys the Secret does not carry, when the
    /// published key stays, or when the user is at the store's key limit and a new key needs the
    /// room.
    pub sweep: Vec<String>,
    /// Create a key and publish it.
    pub issue: bool,
    /// Keys to delete once the new key is published: the key it replaces and every listed key
    /// the Secret did not carry (left by a crash, a failed Secret write, or another writer whose
    /// publication can no longer succeed).
    pub retire: Vec<String>,
}

/// Decides from the user's keys (`listed`), the id of the user's key the Secret carries (if any:
/// see [`KeySource::users_key`]), whether new keys are wanted and the store's per-user key limit.
/// A published key missing from the listing is kept until new keys are wanted: IAM may list a
/// new key late, and a key really gone is replaced once it has been refused for
/// [`KEYS_LOST_AFTER`].
pub fn key_steps(
    listed: &[String],
    published: Option<&str>,
    replace: bool,
    limit: Option<usize>,
) -> KeySteps {
    let live = published.filter(|id| listed.iter().any(|k| k == id));
    let strays: Vec<String> = listed
        .iter()
        .filter(|k| Some(k.as_str()) != live)
        .cloned()
        .collect();
    let issue = replace || published.is_none();
    let replaced = live.filter(|_| issue).map(str::to_string);
    if !issue || limit.is_some_and(|limit| listed.len() >= limit) {
        KeySteps {
            sweep: strays,
            issue,
            retire: replaced.into_iter().collect(),
        }
    } else {
        KeySteps {
            sweep: Vec::new(),
            issue,
            retire: strays.into_iter().chain(replaced).collect(),
        }
    }
}

/// What became of the Secret write that was to publish a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    Written,
    /// Refused because the Secret changed since it was read (409): another writer got there
    /// first, and this key will never be published.
    Lost,
    /// Failed otherwise (5xx, timeout): it may have been written after all.
    Unknown,
}

/// The keys to delete after the publication of `issued` ended as `publication`. A key that may
/// have been published stays: the next issuance lists it and retires it if the Secret does not
/// carry it.
pub fn keys_to_delete(steps: &KeySteps, issued: &str, publication: Publication) -> Vec<String> {
    match publication {
        Publication::Written => steps.retire.clone(),
        Publication::Lost => vec![issued.to_string()],
        Publication::Unknown => Vec::new(),
    }
}

/// Since when the bucket's published keys have been refused, if they were at the last look
/// (unknown or denied): they are tried again before the bucket is Ready.
pub fn keys_unverified_since(status: Option<&S3BucketStatus>) -> Option<Timestamp> {
    refused_since(status, &[KEYS_NOT_YET_VALID, KEYS_DENIED])
}

/// Since when the bucket's published keys have been refused, if the store did not know them at
/// the last look: only such keys can be lost ([`keys_lost`]).
pub fn keys_unknown_since(status: Option<&S3BucketStatus>) -> Option<Timestamp> {
    refused_since(status, &[KEYS_NOT_YET_VALID])
}

fn refused_since(status: Option<&S3BucketStatus>, reasons: &[&str]) -> Option<Timestamp> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::READY && reasons.contains(&c.reason.as_str()))
        .map(|c| c.last_transition_time.0)
}

/// Published keys refused for this long are taken as lost rather than late (IAM takes seconds to
/// put a key in force): deleted behind keeper's back, or by a second keeper racing this one for
/// the same bucket. keeper then issues new keys as a rotation would.
pub const KEYS_LOST_AFTER: Duration = Duration::from_secs(120);

/// Whether the published keys, unknown to the store since `since` (see [`keys_unknown_since`]),
/// are lost.
pub fn keys_lost(since: Option<Timestamp>, now: Timestamp) -> bool {
    since.is_some_and(|since| {
        now.duration_since(since)
            .try_into()
            .is_ok_and(|d: Duration| d >= KEYS_LOST_AFTER)
    })
}

/// How soon to try refused keys again: as long as they have been refused so far (so the wait
/// doubles), in whole seconds between 2 seconds and a minute.
pub fn keys_check_backoff(refused_for: Duration) -> Duration {
    Duration::from_secs(refused_for.as_secs().clamp(2, 60))
}

#[cfg(test)]
mod tests;

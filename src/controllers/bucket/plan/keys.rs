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
mod tests {
    use super::*;

    #[test]
    fn keys_refused_for_two_minutes_are_lost_not_late() {
        let now = Timestamp::now();
        let ago = |s: u64| Some(now - Duration::from_secs(s));
        assert!(!keys_lost(None, now), "keys never refused");
        assert!(!keys_lost(ago(119), now));
        assert!(keys_lost(ago(120), now));
        assert!(keys_lost(ago(3600), now));
        assert!(
            !keys_lost(Some(now + Duration::from_secs(5)), now),
            "a clock ahead"
        );
    }

    #[test]
    fn refused_keys_are_tried_again_sooner_first_then_at_most_every_minute() {
        assert_eq!(keys_check_backoff(Duration::ZERO), Duration::from_secs(2));
        assert_eq!(
            keys_check_backoff(Duration::from_millis(7400)),
            Duration::from_secs(7)
        );
        assert_eq!(
            keys_check_backoff(Duration::from_secs(600)),
            Duration::from_secs(60)
        );
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn keys(id: &str) -> Keys {
        Keys {
            access_key_id: id.into(),
            secret_access_key: "secret".into(),
        }
    }

    const USER: KeySource = KeySource::BucketUser {
        limit: Some(2),
        foreign: None,
    };

    #[test]
    fn published_keys_of_a_settled_bucket_stay_without_a_call() {
        assert_eq!(
            first_look(&USER, Some(&keys("AK1")), false, true),
            FirstLook::Keep
        );
        // Nothing published, new keys wanted, or the last reconcile did not end Ready (it may
        // have left a key behind): the user's keys are listed.
        for (published, replace, settled) in [
            (None, false, true),
            (Some(keys("AK1")), true, true),
            (Some(keys("AK1")), false, false),
        ] {
            assert_eq!(
                first_look(&USER, published.as_ref(), replace, settled),
                FirstLook::Inventory { limit: Some(2) }
            );
        }
    }

    #[test]
    fn the_providers_key_published_by_an_older_keeper_is_never_kept() {
        let user = KeySource::BucketUser {
            limit: Some(2),
            foreign: Some("ADMIN".into()),
        };
        assert_eq!(
            first_look(&user, Some(&keys("ADMIN")), false, true),
            FirstLook::Inventory { limit: Some(2) }
        );
    }

    #[test]
    fn shared_provider_keys_are_published_as_they_are() {
        let shared = KeySource::Provider(keys("PROVIDER"));
        assert_eq!(
            first_look(&shared, Some(&keys("PROVIDER")), true, false),
            FirstLook::Keep,
            "rotating them is the provider's business"
        );
        assert_eq!(
            first_look(&shared, Some(&keys("OLD")), false, true),
            FirstLook::Publish(keys("PROVIDER"))
        );
        assert_eq!(
            first_look(&shared, None, false, true),
            FirstLook::Publish(keys("PROVIDER"))
        );
    }

    #[test]
    fn a_new_user_gets_one_key() {
        assert_eq!(
            key_steps(&[], None, false, Some(2)),
            KeySteps {
                sweep: vec![],
                issue: true,
                retire: vec![]
            }
        );
    }

    #[test]
    fn a_key_nobody_published_is_deleted_only_after_the_next_one_is_published() {
        // AK1 is either left by a Secret write that failed after CreateAccessKey, or another
        // writer's key about to be published: deleting it first would leave that writer
        // publishing a deleted key. Once AK2 is published, AK1 can never be.
        assert_eq!(
            key_steps(&ids(&["AK1"]), None, false, Some(2)),
            KeySteps {
                sweep: vec![],
                issue: true,
                retire: ids(&["AK1"])
            }
        );
    }

    #[test]
    fn a_user_at_the_key_limit_is_swept_first() {
        // Two keys nobody published: no room for a third. They go, after the Secret was claimed.
        assert_eq!(
            key_steps(&ids(&["AK1", "AK2"]), None, false, Some(2)),
            KeySteps {
                sweep: ids(&["AK1", "AK2"]),
                issue: true,
                retire: vec![]
            }
        );
        // The grid has no limit: nothing goes before the new key is published.
        assert_eq!(
            key_steps(&ids(&["AK1", "AK2"]), None, false, None),
            KeySteps {
                sweep: vec![],
                issue: true,
                retire: ids(&["AK1", "AK2"])
            }
        );
    }

    #[test]
    fn the_published_key_stays_and_strays_are_swept() {
        assert_eq!(
            key_steps(&ids(&["AK1", "AK2"]), Some("AK2"), false, Some(2)),
            KeySteps {
                sweep: ids(&["AK1"]),
                issue: false,
                retire: vec![]
            }
        );
        assert_eq!(
            key_steps(&ids(&["AK2"]), Some("AK2"), false, Some(2)),
            KeySteps {
                sweep: vec![],
                issue: false,
                retire: vec![]
            }
        );
    }

    #[test]
    fn a_rotation_retires_the_published_key_once_the_new_one_is_published() {
        assert_eq!(
            key_steps(&ids(&["AK1"]), Some("AK1"), true, Some(2)),
            KeySteps {
                sweep: vec![],
                issue: true,
                retire: ids(&["AK1"])
            }
        );
        // A rotation whose Secret write failed left AK2: it goes (after the claim) before AK3 is
        // created, so the user never holds more than two keys.
        assert_eq!(
            key_steps(&ids(&["AK1", "AK2"]), Some("AK1"), true, Some(2)),
            KeySteps {
                sweep: ids(&["AK2"]),
                issue: true,
                retire: ids(&["AK1"])
            }
        );
    }

    #[test]
    fn a_published_key_missing_from_the_listing_is_kept_until_it_is_lost() {
        // IAM may list a new key late: no new key, only what nobody published goes.
        assert_eq!(
            key_steps(&ids(&["AK1"]), Some("AK2"), false, Some(2)),
            KeySteps {
                sweep: ids(&["AK1"]),
                issue: false,
                retire: vec![]
            }
        );
        // Refused long enough to count as lost: replaced, and never deleted by keeper (it is not
        // the user's, or no longer).
        assert_eq!(
            key_steps(&ids(&["AK1"]), Some("AK2"), true, Some(2)),
            KeySteps {
                sweep: vec![],
                issue: true,
                retire: ids(&["AK1"])
            }
        );
    }

    #[test]
    fn the_providers_key_is_not_the_users() {
        let user = KeySource::BucketUser {
            limit: Some(2),
            foreign: Some("ADMIN".into()),
        };
        assert_eq!(user.users_key(Some(&keys("ADMIN"))), None);
        assert_eq!(user.users_key(Some(&keys("AK1"))), Some(&keys("AK1")));
        assert_eq!(
            KeySource::Provider(keys("ADMIN")).users_key(Some(&keys("ADMIN"))),
            None
        );
    }

    #[test]
    fn after_the_secret_write_only_keys_that_can_never_be_published_go() {
        let steps = key_steps(&ids(&["AK1", "AK2"]), Some("AK1"), true, None);
        assert_eq!(
            keys_to_delete(&steps, "AK3", Publication::Written),
            ids(&["AK2", "AK1"])
        );
        // Another writer changed the Secret first: this key is nobody's.
        assert_eq!(
            keys_to_delete(&steps, "AK3", Publication::Lost),
            ids(&["AK3"])
        );
        // Perhaps written: AK3 may be the published key now, and AK1 still in use.
        assert!(keys_to_delete(&steps, "AK3", Publication::Unknown).is_empty());
    }

    #[test]
    fn user_names_fit_iam_and_differ_per_bucket() {
        let long = "a".repeat(63);
        for bucket in ["b", "team-a-assets", long.as_str()] {
            let name = user_name(bucket);
            assert!(name.len() <= 64, "{name}");
            assert!(name.starts_with("keeper-"), "{name}");
            assert_eq!(name, user_name(bucket), "deterministic");
        }
        // Two long names sharing their first 24 characters still get different users.
        assert_ne!(
            user_name(&format!("{}x", "a".repeat(40))),
            user_name(&format!("{}y", "a".repeat(40)))
        );
    }

    #[test]
    fn the_policy_names_this_bucket_only() {
        let policy: serde_json::Value = serde_json::from_str(&bucket_policy("b1", "aws")).unwrap();
        let resources: Vec<&str> = policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["Resource"].as_str().unwrap())
            .collect();
        assert_eq!(resources, ["arn:aws:s3:::b1", "arn:aws:s3:::b1/*"]);
        let actions = policy.to_string();
        for forbidden in ["s3:*", "DeleteBucket", "PutBucketPolicy", "iam:"] {
            assert!(!actions.contains(forbidden), "{forbidden} in {actions}");
        }
    }

    #[test]
    fn the_policy_is_in_the_regions_partition() {
        assert_eq!(partition("eu-central-1"), "aws");
        assert_eq!(partition("us-east-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
        let policy = bucket_policy("b1", partition("cn-northwest-1"));
        assert!(policy.contains("arn:aws-cn:s3:::b1/*"), "{policy}");
        assert!(!policy.contains("arn:aws:"), "{policy}");
    }

    #[test]
    fn only_keys_the_store_does_not_know_can_be_lost() {
        for unknown in [
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "InvalidToken",
        ] {
            assert!(keys_unknown(unknown), "{unknown}");
        }
        // Denied: the store knows the keys; a policy (in force later, or never for keeper's
        // requests) is what refuses.
        assert!(!keys_unknown("AccessDenied"));
        let now = Timestamp::now();
        let refused = |reason: &str| {
            let mut status = S3BucketStatus::default();
            conditions::set(
                &mut status.conditions,
                conditions::READY,
                false,
                reason,
                "",
                None,
            );
            status.conditions[0].last_transition_time =
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    now - Duration::from_secs(600),
                );
            status
        };
        let denied = refused(KEYS_DENIED);
        assert!(
            keys_unverified_since(Some(&denied)).is_some(),
            "tried again"
        );
        assert!(
            !keys_lost(keys_unknown_since(Some(&denied)), now),
            "never lost"
        );
        let unknown = refused(KEYS_NOT_YET_VALID);
        assert!(keys_lost(keys_unknown_since(Some(&unknown)), now));
    }
}

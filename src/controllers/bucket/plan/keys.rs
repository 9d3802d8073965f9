//! The access keys of a bucket's own IAM user (S3-compatible providers with an IAM API): the
//! user's deterministic name, its policy, and which keys to delete, create and retire so that a
//! crash at any point (above all between creating a key and publishing it) never piles up keys.
//! IAM allows two access keys per user: one published, one being rotated in.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::api::S3BucketStatus;
use crate::runtime::conditions;

/// `Ready=False` reason while the store does not accept a bucket's published keys yet.
pub const KEYS_NOT_YET_VALID: &str = "CredentialsNotYetValid";

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
/// the bucket, no other bucket).
pub fn bucket_policy(bucket: &str) -> String {
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
                "Resource": format!("arn:aws:s3:::{bucket}"),
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
                "Resource": format!("arn:aws:s3:::{bucket}/*"),
            },
        ],
    })
    .to_string()
}

/// What to do with the user's access keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySteps {
    /// Keys of the user that no Secret carries: left by a crash or a failed Secret write after
    /// the key was created. Deleted before anything is created, so that a retry never piles up
    /// keys (nor hits IAM's two-keys limit).
    pub delete: Vec<String>,
    /// Create a key and publish it.
    pub issue: bool,
    /// The published key to delete once the new one is published (a rotation).
    pub retire: Option<String>,
}

/// Decides from the user's keys, the key id the bucket's Secret carries (if any) and whether a
/// rotation is requested. A published key the user does not have (the provider's keys published
/// before keeper issued per-bucket users, or a user deleted behind keeper's back) is replaced.
pub fn key_steps(user_keys: &[String], published: Option<&str>, rotate: bool) -> KeySteps {
    let live = published.filter(|id| user_keys.iter().any(|k| k == id));
    let delete = user_keys
        .iter()
        .filter(|k| Some(k.as_str()) != live)
        .cloned()
        .collect();
    match live {
        Some(_) if !rotate => KeySteps {
            delete,
            issue: false,
            retire: None,
        },
        live => KeySteps {
            delete,
            issue: true,
            retire: live.map(str::to_string),
        },
    }
}

/// Since when the bucket's published keys have been refused, if they were at the last look:
/// they are tried again before the bucket is Ready.
pub fn keys_unverified_since(status: Option<&S3BucketStatus>) -> Option<Timestamp> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::READY && c.reason == KEYS_NOT_YET_VALID)
        .map(|c| c.last_transition_time.0)
}

/// Published keys refused for this long are taken as lost rather than late (IAM takes seconds to
/// put a key in force): deleted behind keeper's back, or by a second keeper racing this one for
/// the same bucket. keeper then issues new keys as a rotation would.
pub const KEYS_LOST_AFTER: Duration = Duration::from_secs(120);

/// Whether the published keys, refused since `since` (see [`keys_unverified_since`]), are lost.
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

    #[test]
    fn a_new_user_gets_one_key() {
        assert_eq!(
            key_steps(&[], None, false),
            KeySteps {
                delete: vec![],
                issue: true,
                retire: None
            }
        );
    }

    #[test]
    fn a_key_created_but_never_published_is_deleted_before_the_next_is_created() {
        // The Secret write failed after CreateAccessKey: the retry must not add a second key.
        assert_eq!(
            key_steps(&ids(&["AK1"]), None, false),
            KeySteps {
                delete: ids(&["AK1"]),
                issue: true,
                retire: None
            }
        );
    }

    #[test]
    fn the_published_key_stays_and_strays_go() {
        assert_eq!(
            key_steps(&ids(&["AK1", "AK2"]), Some("AK2"), false),
            KeySteps {
                delete: ids(&["AK1"]),
                issue: false,
                retire: None
            }
        );
    }

    #[test]
    fn a_rotation_issues_a_key_and_retires_the_published_one_after_dropping_strays() {
        // A rotation whose Secret write failed left AK2: it goes before AK3 is created, so the
        // user never holds more than two keys.
        assert_eq!(
            key_steps(&ids(&["AK1", "AK2"]), Some("AK1"), true),
            KeySteps {
                delete: ids(&["AK2"]),
                issue: true,
                retire: Some("AK1".into())
            }
        );
    }

    #[test]
    fn published_keys_that_are_not_the_users_are_replaced() {
        // The provider's own keys, published before per-bucket users: nothing of the user's to
        // retire, and the provider's key is never deleted.
        assert_eq!(
            key_steps(&ids(&["AK1"]), Some("PROVIDER"), false),
            KeySteps {
                delete: ids(&["AK1"]),
                issue: true,
                retire: None
            }
        );
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
        let policy: serde_json::Value = serde_json::from_str(&bucket_policy("b1")).unwrap();
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
}

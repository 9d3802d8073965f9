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
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now - Duration::from_secs(600));
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

#[test]
fn a_user_whose_key_is_published_is_looked_up_and_any_other_created_first() {
    assert_eq!(user_look(Some("AK1")), UserLook::LookFirst);
    assert_eq!(user_look(None), UserLook::CreateFirst);
}

#[test]
fn a_stored_policy_is_in_force_when_it_is_the_same_json() {
    let wanted = bucket_policy("ns-data", "aws");
    assert!(policy_in_force(Some(&wanted), &wanted));
    // Reformatted by the store: the same policy.
    let reformatted =
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&wanted).unwrap())
            .unwrap();
    assert!(policy_in_force(Some(&reformatted), &wanted));
    // Missing, another bucket's, another partition's, or not JSON: written again.
    for stored in [
        None,
        Some(bucket_policy("ns-other", "aws")),
        Some(bucket_policy("ns-data", "aws-cn")),
        Some("%7B%22Version%22".to_string()),
    ] {
        assert!(!policy_in_force(stored.as_deref(), &wanted), "{stored:?}");
    }
}

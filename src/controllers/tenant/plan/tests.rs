use super::*;
use crate::api::names::default_bucket_name;
use crate::backends::identity::OnMissing;

#[test]
fn account_names_fit_the_grid_and_long_resource_names_never_collide() {
    assert_eq!(account_name("team-a", None).unwrap(), "team-a");
    let exact = "a".repeat(MAX_ACCOUNT_NAME);
    assert_eq!(account_name(&exact, None).unwrap(), exact);
    // Kubernetes names may have 253 characters; two that share a long prefix stay apart.
    let long_a = format!("{}-a", "x".repeat(250));
    let long_b = format!("{}-b", "x".repeat(250));
    let (a, b) = (
        account_name(&long_a, None).unwrap(),
        account_name(&long_b, None).unwrap(),
    );
    assert_eq!(a.len(), MAX_ACCOUNT_NAME);
    assert_eq!(b.len(), MAX_ACCOUNT_NAME);
    assert_ne!(a, b);
    assert_eq!(a, account_name(&long_a, None).unwrap(), "deterministic");
    assert!(a.starts_with(&"x".repeat(50)), "{a}");
    // A cut never leaves a separator before the hash.
    let dashed = format!("{}-{}", "y".repeat(54), "z".repeat(100));
    let cut = account_name(&dashed, None).unwrap();
    assert!(!cut.contains("--"), "{cut}");
    // displayName is the user's: a name too long is an error, never cut silently.
    assert_eq!(account_name(&long_a, Some("Team A")).unwrap(), "Team A");
    let err = account_name("t", Some(&"n".repeat(65))).unwrap_err();
    assert!(err.contains("displayName") && err.contains("64"), "{err}");
    let spec: S3TenantSpec =
        serde_json::from_value(serde_json::json!({"displayName": "d".repeat(65)})).unwrap();
    assert!(desired_settings("t", &spec).is_err());
}

fn spec() -> S3TenantSpec {
    serde_json::from_value(serde_json::json!({})).unwrap()
}

fn settings() -> AccountSettings {
    AccountSettings {
        name: "team-a".into(),
        quota_bytes: Some(1024),
        allow_platform_services: false,
    }
}

fn observed(settings: AccountSettings, ok: bool) -> ObservedAccount {
    ObservedAccount {
        id: "40327589106748163542".into(),
        settings,
        managed_fields_ok: ok,
        marked: true,
    }
}

#[test]
fn the_password_is_stored_before_any_account_is_created() {
    assert_eq!(
        account_step(false, None, &settings()),
        AccountStep::StorePassword
    );
    assert_eq!(account_step(true, None, &settings()), AccountStep::Create);
}

#[test]
fn an_existing_account_is_never_created_again() {
    let account = observed(settings(), true);
    assert_eq!(
        account_step(true, Some(&account), &settings()),
        AccountStep::InSync {
            id: account.id.clone()
        }
    );
    assert_eq!(
        account_step(false, Some(&account), &settings()),
        AccountStep::ResetPassword {
            id: account.id.clone()
        }
    );
}

#[test]
fn spec_changes_and_lost_capabilities_update_the_account() {
    let mut other = settings();
    other.quota_bytes = None;
    let account = observed(other, true);
    assert!(matches!(
        account_step(true, Some(&account), &settings()),
        AccountStep::Update { .. }
    ));
    let account = observed(settings(), false);
    assert!(matches!(
        account_step(true, Some(&account), &settings()),
        AccountStep::Update { .. }
    ));
}

#[test]
fn desired_settings_follow_the_spec() {
    let mut spec = spec();
    assert_eq!(
        desired_settings("t", &spec).unwrap(),
        AccountSettings {
            name: "t".into(),
            quota_bytes: None,
            allow_platform_services: false
        }
    );
    spec.display_name = Some("Team A".into());
    spec.quota = Some("1Ki".into());
    spec.allow_platform_services = true;
    assert_eq!(
        desired_settings("t", &spec).unwrap(),
        AccountSettings {
            name: "Team A".into(),
            quota_bytes: Some(1024),
            allow_platform_services: true
        }
    );
    spec.quota = Some("lots".into());
    assert!(
        desired_settings("t", &spec)
            .unwrap_err()
            .contains("invalid quantity")
    );
    spec.quota = Some("0".into());
    assert!(
        desired_settings("t", &spec)
            .unwrap_err()
            .contains("at least one byte")
    );
}

#[test]
fn keys_converge_to_exactly_the_published_one() {
    let keys = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(key_step(Some("A"), &keys(&["A"])), KeyStep::Keep);
    assert_eq!(
        key_step(Some("A"), &keys(&["B", "A", "C"])),
        KeyStep::Revoke(keys(&["B", "C"]))
    );
    // Published key revoked on the backend, or never published: issue, then revoke the rest.
    assert_eq!(
        key_step(Some("A"), &keys(&["B"])),
        KeyStep::Issue {
            revoke: keys(&["B"])
        }
    );
    assert_eq!(key_step(None, &[]), KeyStep::Issue { revoke: vec![] });
}

#[test]
fn protection_wins_over_retain() {
    let mut spec = spec();
    assert_eq!(deletion_gate(&spec), DeletionGate::Proceed);
    spec.deletion_policy = DeletionPolicy::Retain;
    assert_eq!(deletion_gate(&spec), DeletionGate::Retain);
    spec.deletion_protection = true;
    assert_eq!(deletion_gate(&spec), DeletionGate::Protected);
}

#[test]
fn buckets_block_deletion() {
    let buckets = RemainingBuckets::new(vec![], ["external".to_string()]);
    assert_eq!(
        deletion_step(Some("1"), buckets.clone()),
        DeletionStep::Blocked(buckets.clone())
    );
    // Resources count even when no account exists (S3-compatible scopes).
    let resources = RemainingBuckets::new(vec![("b".into(), "ns-b".into())], []);
    assert_eq!(
        deletion_step(None, resources.clone()),
        DeletionStep::Blocked(resources)
    );
}

#[test]
fn without_buckets_the_account_is_deleted_or_there_is_nothing_to_delete() {
    assert_eq!(
        deletion_step(Some("1"), RemainingBuckets::default()),
        DeletionStep::DeleteAccount { id: "1".into() }
    );
    assert_eq!(
        deletion_step(None, RemainingBuckets::default()),
        DeletionStep::Release
    );
}

#[test]
fn backend_buckets_of_resources_are_not_counted_twice() {
    let buckets = RemainingBuckets::new(
        vec![
            ("media".into(), "ns-media".into()),
            ("logs".into(), "ns-logs".into()),
        ],
        ["ns-logs".to_string(), "legacy".to_string()],
    );
    assert_eq!(buckets.resources, ["logs", "media"]);
    assert_eq!(buckets.unmanaged, ["legacy"]);
    assert_eq!(buckets.count(), 3);
}

#[test]
fn the_guidance_names_the_count_the_buckets_and_the_commands() {
    let buckets = RemainingBuckets::new(
        vec![("logs".into(), "x".into()), ("media".into(), "y".into())],
        [],
    );
    let message = buckets_remain_message("team-a", &buckets);
    assert_eq!(
        message,
        "S3Tenant team-a still holds 2 bucket(s): logs, media. keeper does not delete buckets for you: \
         drain each one with `kubectl annotate --overwrite s3bucket <name> keeper.dev/drain=$(date +%s)`, \
         then delete it with `kubectl delete s3bucket <name>`. \
         The tenant is deleted as soon as no bucket remains."
    );
}

#[test]
fn the_guidance_lists_at_most_ten_names() {
    let resources = (0..12)
        .map(|i| (format!("b{i:02}"), format!("x{i}")))
        .collect();
    let message =
        buckets_remain_message("t", &RemainingBuckets::new(resources, ["ext".to_string()]));
    assert!(message.contains("13 bucket(s): b00, b01"), "{message}");
    assert!(message.contains("b09 and 3 more."), "{message}");
    assert!(!message.contains("b10"), "{message}");
    assert!(message.contains("must be emptied and deleted on the backend"));
}

#[test]
fn a_bucket_retriggers_its_tenant_only_when_what_the_tenant_reads_changes() {
    let mut bucket = crate::test_support::bucket("media", "t");
    bucket.metadata.finalizers = Some(vec![BUCKET_FINALIZER.into()]);
    let key = bucket_trigger_key(&bucket);
    // Progress and conditions: the tenant's answer cannot change.
    let mut progressed = bucket.clone();
    progressed.status = Some(crate::api::S3BucketStatus {
        object_count: Some(42),
        observed_generation: Some(3),
        ..Default::default()
    });
    progressed.metadata.resource_version = Some("99".into());
    assert_eq!(bucket_trigger_key(&progressed), key);
    // What the tenant reads: each one changes the key.
    let mut named = progressed.clone();
    named.status.as_mut().unwrap().bucket_name = Some("ns-media".into());
    let mut deleting = bucket.clone();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let mut released = deleting.clone();
    released.metadata.finalizers = Some(vec!["example.com/other".into()]);
    let mut moved = bucket.clone();
    moved.spec.tenant_ref.name = "u".into();
    let keys: std::collections::BTreeSet<u64> = [&bucket, &named, &deleting, &released, &moved]
        .iter()
        .map(|b| bucket_trigger_key(b))
        .collect();
    assert_eq!(keys.len(), 5);
}

#[test]
fn the_protection_message_says_how_to_lift_it() {
    assert_eq!(
        deletion_protection_message("t", "ns"),
        "S3Tenant t has deletionProtection enabled. To allow its deletion, run \
         `kubectl patch s3tenant t -n ns --type merge -p '{\"spec\":{\"deletionProtection\":false}}'`."
    );
}

#[test]
fn a_tenants_buckets_are_its_own_resources_with_their_backend_names() {
    let bucket = |name: &str, tenant: &str, bucket_name: Option<&str>| {
        crate::test_support::bucket_with(
            name,
            serde_json::json!({"tenantRef": {"name": tenant}, "bucketName": bucket_name}),
        )
    };
    let buckets = [
        bucket("media", "t", None),
        bucket("logs", "t", Some("custom-logs")),
        bucket("other", "u", None),
    ];
    assert_eq!(
        tenant_buckets(&buckets, "t"),
        [
            ("logs".to_string(), "custom-logs".to_string()),
            ("media".to_string(), default_bucket_name("ns", "media")),
        ]
    );

    let mut deleting = buckets.clone();
    for b in deleting
        .iter_mut()
        .filter(|b| b.spec.tenant_ref.name == "t")
    {
        b.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        b.metadata.finalizers = Some(vec![BUCKET_FINALIZER.into()]);
    }

    // Released by keeper, held only by another controller's finalizer: no longer the
    // tenant's; still holding keeper's finalizer: still the tenant's.
    for b in deleting.iter_mut() {
        b.metadata.finalizers = Some(vec!["example.com/audit".into()]);
    }
    deleting[0].metadata.finalizers =
        Some(vec!["example.com/audit".into(), BUCKET_FINALIZER.into()]);
    assert_eq!(
        tenant_buckets(&deleting, "t"),
        [("media".to_string(), default_bucket_name("ns", "media"))]
    );
    deleting[0].metadata.finalizers = None;
    assert!(tenant_buckets(&deleting, "t").is_empty());
}

#[test]
fn racing_writers_record_the_same_account_and_delete_the_others() {
    let marked = [
        "00000000000000000009".to_string(),
        "00000000000000000002".to_string(),
    ];
    assert_eq!(
        account_to_record(&marked).map(String::as_str),
        Some("00000000000000000002")
    );
    assert_eq!(account_to_record(&[]), None);
    assert_eq!(
        stray_accounts(&marked, "00000000000000000002"),
        ["00000000000000000009"]
    );
    // Another writer's account was recorded first: this writer's own is the stray.
    assert_eq!(
        stray_accounts(
            &["00000000000000000009".to_string()],
            "00000000000000000002"
        ),
        ["00000000000000000009"]
    );
}

#[test]
fn the_marker_is_the_uid() {
    assert_eq!(ownership_marker("u-1"), "keeper.dev/owner-uid=u-1");
}

#[test]
fn the_retained_message_says_where_the_credentials_and_their_copies_are() {
    assert_eq!(
        retained_message(" (account 42)", &[], "keeper-system"),
        "deletionPolicy Retain: the tenant's account (account 42) is kept"
    );
    let kept = [
        (
            "t-s3-credentials".to_string(),
            "retained-u-s3-credentials".to_string(),
        ),
        (
            "t-root-credentials".to_string(),
            "retained-u-root-credentials".to_string(),
        ),
    ];
    let message = retained_message("", &kept, "keeper-system");
    assert!(
        message.contains("Secret(s) t-s3-credentials, t-root-credentials"),
        "{message}"
    );
    assert!(
        message.contains(
            "keeper-system/retained-u-s3-credentials, keeper-system/retained-u-root-credentials"
        ),
        "{message}"
    );
}

#[test]
fn a_missing_account_is_created_again_only_on_the_grid_it_was_recorded_on() {
    let at = ("ns", "team-a");
    assert_eq!(
        account_on_missing(
            OnMissing::Recreate,
            "1",
            Some("storagegrid:a"),
            "storagegrid:a",
            None,
            at
        )
        .as_deref(),
        Ok("storagegrid:a")
    );
    let refused = account_on_missing(
        OnMissing::Recreate,
        "1",
        Some("storagegrid:a"),
        "storagegrid:b",
        None,
        at,
    )
    .unwrap_err();
    assert!(
        refused.contains("storagegrid:a")
            && refused.contains("storagegrid:b")
            && refused.contains("account 1")
            && refused.contains(
                "kubectl annotate s3tenant team-a -n ns keeper.dev/confirm-backend-identity=storagegrid:b"
            ),
        "{refused}"
    );
    // Confirmed by a person: recreated there, and that grid is recorded from then on.
    assert_eq!(
        account_on_missing(
            OnMissing::Recreate,
            "1",
            Some("storagegrid:a"),
            "storagegrid:b",
            Some("storagegrid:b"),
            at
        )
        .as_deref(),
        Ok("storagegrid:b")
    );
    // An account an older keeper made, not seen since: created again as before, now pinned.
    assert_eq!(
        account_on_missing(OnMissing::Recreate, "1", None, "storagegrid:b", None, at).as_deref(),
        Ok("storagegrid:b")
    );
}

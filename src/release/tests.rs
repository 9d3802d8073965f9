use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use serde_json::{Value, json};

use super::*;

fn object<K: DeserializeOwned>(kind: &str, name: &str, spec: Value, status: Value) -> K {
    serde_json::from_value(json!({
        "apiVersion": "keeper.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name, "namespace": "apps"},
        "spec": spec, "status": status,
    }))
    .unwrap()
}

fn lease(holder: Option<&str>, renewed_secs_ago: i64, now: Timestamp) -> Lease {
    Lease {
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(now - SignedDuration::from_secs(renewed_secs_ago))),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }),
        ..Lease::default()
    }
}

#[test]
fn a_lease_renewed_within_its_duration_is_held() {
    let now = Timestamp::now();
    assert_eq!(
        live_holder(&lease(Some("keeper-0"), 5, now), now).as_deref(),
        Some("keeper-0")
    );
}

#[test]
fn an_expired_released_or_empty_lease_is_not_held() {
    let now = Timestamp::now();
    assert_eq!(
        live_holder(&lease(Some("keeper-0"), 16, now), now),
        None,
        "expired"
    );
    assert_eq!(live_holder(&lease(None, 1, now), now), None, "released");
    assert_eq!(
        live_holder(&lease(Some(""), 1, now), now),
        None,
        "empty holder"
    );
    assert_eq!(live_holder(&Lease::default(), now), None, "no spec");
}

#[test]
fn releasing_is_refused_while_led_and_without_a_lease_unless_forced() {
    let now = Timestamp::now();
    let held = ("ops/keeper".to_string(), lease(Some("keeper-0"), 5, now));
    let expired = (
        "keeper-system/keeper".to_string(),
        lease(Some("keeper-0"), 60, now),
    );
    // A leader anywhere refuses, --force or not: it would race the release.
    for force in [false, true] {
        assert_eq!(
            may_release(&[expired.clone(), held.clone()], "everywhere", now, force),
            Err(Refusal::Led {
                holder: "keeper-0".into(),
                lease: "ops/keeper".into()
            })
        );
    }
    // An expired Lease is a keeper that stopped.
    assert_eq!(may_release(&[expired], "everywhere", now, false), Ok(()));
    // No Lease: a keeper without leader election cannot be ruled out.
    let refusal = may_release(&[], "Lease keeper-system/keeper", now, false).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::NoLease {
            looked_in: "Lease keeper-system/keeper".into()
        }
    );
    let said = refusal.to_string();
    assert!(
        said.contains("--force") && said.contains("kubectl get deployments"),
        "{said}"
    );
    assert_eq!(may_release(&[], "everywhere", now, true), Ok(()));
}

fn tenant(finalizers: &[&str], account: Option<&str>) -> S3Tenant {
    let mut t: S3Tenant = object(
        "S3Tenant",
        "team-a",
        json!({"provider": "default"}),
        json!({"accountId": account}),
    );
    t.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    t
}

#[test]
fn only_keepers_finalizers_are_released_and_others_are_kept() {
    let t = tenant(
        &["keeper.dev/tenant-cleanup", "example.com/backup-hook"],
        Some("4711"),
    );
    let release = release_of(&t, tenant_orphans(&t)).unwrap();
    assert_eq!(release.what, "s3tenant/team-a in apps");
    assert_eq!(release.finalizers, vec!["keeper.dev/tenant-cleanup"]);
    assert_eq!(release.keep, vec!["example.com/backup-hook"]);
    assert_eq!(
        release.orphans,
        "StorageGRID account 4711 on provider default"
    );
}

#[test]
fn an_object_without_keepers_finalizers_is_not_listed() {
    assert_eq!(
        release_of(&tenant(&["example.com/x"], None), String::new()),
        None
    );
    assert_eq!(release_of(&tenant(&[], None), String::new()), None);
}

#[test]
fn the_listing_says_what_stays_on_the_backends() {
    let mut retained = tenant(&[], None);
    retained.spec.deletion_policy = DeletionPolicy::Retain;
    assert!(tenant_orphans(&retained).contains("kept anyway"));
    assert!(tenant_orphans(&tenant(&[], None)).contains("provider default"));

    let b: S3Bucket = object(
        "S3Bucket",
        "logs",
        json!({"tenantRef": {"name": "team-a"}}),
        json!({"bucketName": "apps-logs", "objectCount": 12}),
    );
    assert_eq!(
        bucket_orphans(&b),
        "bucket \"apps-logs\" with 12 objects and its credentials, of tenant team-a"
    );

    let spec = json!({"engine": "postgres", "size": "small"});
    let d: CloudDatabase = object("CloudDatabase", "orders", spec.clone(), json!({}));
    assert!(database_orphans(&d).starts_with("nothing recorded"));
    let d: CloudDatabase = object(
        "CloudDatabase",
        "orders",
        spec,
        json!({"instanceId": "keeper-apps-orders-1a2b"}),
    );
    assert!(database_orphans(&d).starts_with("RDS instance keeper-apps-orders-1a2b"));
}

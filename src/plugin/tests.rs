use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::follow::{self, Progress, Request, STALE_FAILURE_GRACE};
use super::plan::{self, Kind, Object, State, TargetError, TenantBucket};
use crate::api::{CloudDatabase, S3Bucket, S3Tenant};

const NOW: &str = "2026-05-01T12:00:00Z";
/// A while before [`NOW`], for timestamps in the objects.
const EARLIER: &str = "2026-05-01T11:55:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn object<K: DeserializeOwned>(
    kind: &str,
    name: &str,
    metadata: Value,
    spec: Value,
    status: Value,
) -> K {
    let mut meta = json!({"name": name, "namespace": "apps", "uid": format!("uid-{name}")});
    for (k, v) in metadata.as_object().unwrap() {
        meta[k] = v.clone();
    }
    let mut obj = json!({
        "apiVersion": "keeper.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec,
    });
    if !status.is_null() {
        obj["status"] = status;
    }
    serde_json::from_value(obj).unwrap()
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": EARLIER})
}

fn ready() -> Value {
    condition("Ready", "True", "BucketReady", "bucket ready")
}

fn synced() -> Value {
    condition("Synced", "True", "ReconcileSuccess", "")
}

fn bucket_with(metadata: Value, status: Value) -> S3Bucket {
    object(
        "S3Bucket",
        "assets",
        metadata,
        json!({"tenantRef": {"name": "team-a"}}),
        status,
    )
}

fn bucket(status: Value) -> S3Bucket {
    bucket_with(json!({}), status)
}

fn tenant(metadata: Value, spec: Value, status: Value) -> S3Tenant {
    object("S3Tenant", "team-a", metadata, spec, status)
}

fn deleting() -> Value {
    json!({"deletionTimestamp": EARLIER, "finalizers": ["keeper.dev/bucket-cleanup"]})
}

fn drain_status(initial: i64, previous: i64, stuck: bool) -> Value {
    json!({"startedAt": EARLIER, "isDeletingObjects": true, "initialObjectCount": initial,
           "previousObjectCount": previous, "stuck": stuck, "lastProgressAt": EARLIER,
           "message": format!("{previous} of {initial} objects remain"), "mode": "ClientSide"})
}

fn next(obj: &Object, buckets: &[TenantBucket]) -> Option<String> {
    plan::next_command(obj, &plan::state(obj), buckets)
}

// ---- plan: KIND/NAME ----

#[test]
fn targets_take_every_name_kubectl_takes_for_keepers_kinds() {
    for (text, kind) in [
        ("s3tenant/a", Kind::Tenant),
        ("S3Tenant/a", Kind::Tenant),
        ("s3t/a", Kind::Tenant),
        ("s3buckets/a", Kind::Bucket),
        ("s3bucket.keeper.dev/a", Kind::Bucket),
        ("cdb/a", Kind::Database),
        ("clouddatabases.keeper.dev/a", Kind::Database),
    ] {
        assert_eq!(
            plan::parse_target(text),
            Ok((kind, "a".to_string())),
            "{text}"
        );
    }
    assert_eq!(
        plan::parse_target("assets"),
        Err(TargetError::Malformed("assets".into()))
    );
    assert_eq!(
        plan::parse_target("s3bucket/"),
        Err(TargetError::Malformed("s3bucket/".into()))
    );
    assert_eq!(
        plan::parse_target("pod/assets"),
        Err(TargetError::UnknownKind("pod".into()))
    );
}

// ---- plan: states and next commands ----

#[test]
fn a_ready_object_waits_for_nothing_and_has_no_next_command() {
    let obj = Object::Bucket(bucket(
        json!({"phase": "Ready", "conditions": [ready(), synced()]}),
    ));
    assert_eq!(plan::state(&obj), State::Ready);
    assert_eq!(plan::state(&obj).waits_for(), "nothing");
    assert_eq!(next(&obj, &[]), None);
}

#[test]
fn an_object_without_status_has_not_been_seen_by_keeper() {
    let obj = Object::Bucket(bucket(Value::Null));
    assert_eq!(plan::state(&obj), State::Unobserved);
    assert!(plan::state(&obj).waits_for().contains("is keeper running?"));
    assert_eq!(next(&obj, &[]), None);
}

#[test]
fn a_bucket_waiting_for_its_tenant_points_at_the_tenant_and_other_waits_need_nothing() {
    let waiting = |reason: &str| {
        Object::Bucket(bucket(json!({"phase": "Pending", "conditions": [
            condition("Ready", "False", reason, "the tenant is not Ready yet"),
            condition("Reconciling", "True", reason, "the tenant is not Ready yet"),
        ]})))
    };
    let obj = waiting("TenantNotReady");
    assert_eq!(
        plan::state(&obj),
        State::Waiting {
            reason: "TenantNotReady".into(),
            message: "the tenant is not Ready yet".into()
        }
    );
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some("kubectl keeper why s3tenant/team-a -n apps")
    );
    // Waits keeper sees the end of by itself: nothing to run.
    assert_eq!(next(&waiting("CredentialsNotYetValid"), &[]), None);
    let db: CloudDatabase = object(
        "CloudDatabase",
        "orders",
        json!({}),
        json!({"engine": "postgres", "size": "small"}),
        json!({"phase": "Provisioning", "conditions": [condition("Ready", "False", "Waiting", "RDS reports creating")]}),
    );
    let db = Object::Database(db);
    assert_eq!(
        plan::state(&db).waits_for(),
        "Waiting: RDS reports creating"
    );
    assert_eq!(next(&db, &[]), None);
}

#[test]
fn a_bucket_whose_tenant_is_deleting_has_to_go_too() {
    let obj = Object::Bucket(bucket(
        json!({"phase": "Pending", "objectCount": 3, "conditions": [
            condition("Ready", "False", "TenantDeleting", "the tenant is being deleted"),
        ]}),
    ));
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some(
            "kubectl delete s3bucket assets -n apps --wait=false && kubectl keeper drain assets -n apps"
        )
    );
}

#[test]
fn an_error_keeper_retries_shows_even_on_a_ready_object_and_points_at_why() {
    let obj = Object::Bucket(bucket(json!({"phase": "Ready", "conditions": [
        ready(),
        condition("Synced", "False", "BackendError", "ListObjectVersions: 503 SlowDown"),
    ]})));
    assert_eq!(
        plan::state(&obj),
        State::Retrying {
            reason: "BackendError".into(),
            message: "ListObjectVersions: 503 SlowDown".into()
        }
    );
    assert!(
        plan::state(&obj)
            .waits_for()
            .contains("keeper, which retries")
    );
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some("kubectl keeper why s3bucket/assets -n apps")
    );
}

#[test]
fn a_stalled_object_needs_a_change_and_a_blocked_drain_needs_the_lock_lifted_first() {
    let stalled = |reason: &str| {
        Object::Bucket(bucket(json!({"phase": "Failed", "conditions": [
            condition("Ready", "False", reason, "msg"),
            condition("Synced", "False", reason, "msg"),
            condition("Stalled", "True", reason, "msg"),
        ]})))
    };
    let obj = stalled("BucketNotOwned");
    assert_eq!(
        plan::state(&obj),
        State::Stalled {
            reason: "BucketNotOwned".into(),
            message: "msg".into()
        },
        "Stalled goes before the Synced=False it comes with"
    );
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some("kubectl keeper why s3bucket/assets -n apps")
    );
    assert_eq!(
        next(&stalled("DrainBlocked"), &[]).as_deref(),
        Some("lift the object lock or legal hold, then: kubectl keeper drain assets -n apps")
    );
}

fn blocked_tenant(reason: &str, message: &str) -> Object {
    Object::Tenant(tenant(
        json!({"deletionTimestamp": EARLIER, "finalizers": ["keeper.dev/tenant-cleanup"]}),
        json!({"provider": "default"}),
        json!({"phase": "Deleting", "conditions": [
            condition("Ready", "True", "Provisioned", "ok"),
            condition("DeletionBlocked", "True", reason, message),
        ]}),
    ))
}

fn tenant_bucket(name: &str, objects: Option<i64>, deleting: bool) -> TenantBucket {
    TenantBucket {
        name: name.into(),
        objects,
        deleting,
    }
}

#[test]
fn a_tenant_blocked_by_buckets_drains_those_with_objects_then_deletes_them() {
    let obj = blocked_tenant("BucketsRemain", "S3Tenant team-a still holds 3 bucket(s)");
    assert_eq!(
        plan::state(&obj),
        State::DeletionBlocked {
            reason: "BucketsRemain".into(),
            message: "S3Tenant team-a still holds 3 bucket(s)".into()
        },
        "a deletion block goes before a Ready tenant"
    );
    let buckets = [
        tenant_bucket("alpha", Some(5), false),
        tenant_bucket("beta", Some(0), false),
        tenant_bucket("gamma", None, false),
        tenant_bucket("delta", Some(9), true),
    ];
    assert_eq!(
        next(&obj, &buckets).as_deref(),
        Some(
            "kubectl delete s3bucket alpha beta gamma -n apps --wait=false \
             && kubectl keeper drain alpha -n apps && kubectl keeper drain gamma -n apps"
        ),
        "deleted first (keeper drains a deleting tenant's bucket only once it is deleted too), an \
         unknown count drained (a no-op when empty), a bucket already deleting left to itself"
    );
    // Every bucket already deleting: the tenant waits on them, look at the first.
    assert_eq!(
        next(&obj, &[tenant_bucket("delta", Some(9), true)]).as_deref(),
        Some("kubectl keeper why s3bucket/delta -n apps")
    );
    // Only buckets keeper does not manage (on the backend): the message says what to do.
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some("kubectl keeper why s3tenant/team-a -n apps")
    );
}

#[test]
fn a_bucket_blocked_by_its_objects_is_drained() {
    let obj = Object::Bucket(bucket_with(
        deleting(),
        json!({"phase": "Deleting", "objectCount": 2500, "conditions": [
            ready(),
            condition("DeletionBlocked", "True", "BucketNotEmpty", "bucket holds 2500 objects"),
        ]}),
    ));
    assert!(
        plan::state(&obj)
            .waits_for()
            .starts_with("your decision: deletion blocked (BucketNotEmpty)")
    );
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some("kubectl keeper drain assets -n apps")
    );
}

#[test]
fn a_deletion_blocked_by_a_stopped_drain_goes_before_its_stall() {
    let obj = Object::Bucket(bucket_with(
        deleting(),
        json!({"phase": "Failed", "conditions": [
            condition("Ready", "False", "DrainBlocked", "drain stopped: object lock"),
            condition("Stalled", "True", "DrainBlocked", "drain stopped: object lock"),
            condition("DeletionBlocked", "True", "DrainBlocked", "drain stopped: object lock"),
        ]}),
    ));
    assert!(matches!(plan::state(&obj), State::DeletionBlocked { .. }));
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some("lift the object lock or legal hold, then: kubectl keeper drain assets -n apps")
    );
}

#[test]
fn deletion_protection_is_lifted_with_a_patch_of_the_objects_own_kind() {
    let obj = blocked_tenant(
        "DeletionProtection",
        "S3Tenant team-a has deletionProtection enabled",
    );
    assert_eq!(
        next(&obj, &[]).as_deref(),
        Some(
            "kubectl patch s3tenant team-a -n apps --type merge -p '{\"spec\":{\"deletionProtection\":false}}'"
        )
    );
    let db: CloudDatabase = object(
        "CloudDatabase",
        "orders",
        json!({"deletionTimestamp": EARLIER, "finalizers": ["keeper.dev/database-cleanup"]}),
        json!({"engine": "postgres", "size": "small", "deletionProtection": true}),
        json!({"phase": "Deleting", "conditions": [
            condition("DeletionBlocked", "True", "DeletionProtection", "blocked by deletionProtection"),
        ]}),
    );
    assert_eq!(
        next(&Object::Database(db), &[]).as_deref(),
        Some(
            "kubectl patch clouddatabase orders -n apps --type merge -p '{\"spec\":{\"deletionProtection\":false}}'"
        )
    );
    // A block the message explains (what to restore): look at it.
    assert_eq!(
        next(&blocked_tenant("BackendUnavailable", "provider gone"), &[]).as_deref(),
        Some("kubectl keeper why s3tenant/team-a -n apps")
    );
}

#[test]
fn a_draining_bucket_shows_its_progress_and_a_stuck_drain_points_at_why() {
    let draining = |previous: i64, stuck: bool| {
        Object::Bucket(bucket(json!({"phase": "Draining", "conditions": [
            condition("Ready", "True", "Draining", "draining"), synced(),
        ], "drainStatus": drain_status(300, previous, stuck)})))
    };
    let obj = draining(120, false);
    assert_eq!(
        plan::state(&obj),
        State::Draining {
            deleted: 180,
            total: 300,
            message: "120 of 300 objects remain".into(),
            stuck: false
        }
    );
    assert_eq!(
        plan::state(&obj).waits_for(),
        "its drain: 180 of 300 objects deleted"
    );
    assert_eq!(next(&obj, &[]), None, "keeper drains by itself");
    // Objects written meanwhile never make the count go negative.
    assert!(matches!(
        plan::state(&draining(400, false)),
        State::Draining {
            deleted: 0,
            total: 300,
            ..
        }
    ));
    let stuck = draining(120, true);
    assert!(plan::state(&stuck).waits_for().contains("stuck"));
    assert_eq!(
        next(&stuck, &[]).as_deref(),
        Some("kubectl keeper why s3bucket/assets -n apps")
    );
    // A drain status without a start is no drain of keeper's.
    let idle = Object::Bucket(bucket(json!({"phase": "Ready", "conditions": [ready()],
        "drainStatus": {"initialObjectCount": 5}})));
    assert_eq!(plan::state(&idle), State::Ready);
}

#[test]
fn a_deletion_nothing_blocks_is_keepers_to_finish() {
    let obj = Object::Bucket(bucket_with(
        deleting(),
        json!({"phase": "Deleting", "conditions": [ready()]}),
    ));
    assert_eq!(plan::state(&obj), State::Deleting);
    assert_eq!(next(&obj, &[]), None);
}

#[test]
fn a_tenants_buckets_are_those_of_its_namespace_that_name_it() {
    let t = tenant(json!({}), json!({"provider": "default"}), Value::Null);
    let mine = bucket_with(json!({}), json!({"objectCount": 4}));
    let mut other_tenant = bucket(Value::Null);
    other_tenant.spec.tenant_ref.name = "team-b".into();
    let mut other_namespace = bucket(Value::Null);
    other_namespace.metadata.namespace = Some("elsewhere".into());
    let gone = bucket_with(deleting(), Value::Null);
    assert_eq!(
        plan::buckets_of(&t, &[mine, other_tenant, other_namespace, gone]),
        [
            tenant_bucket("assets", Some(4), false),
            tenant_bucket("assets", None, true)
        ]
    );
}

// ---- plan: what is printed ----

#[test]
fn status_rows_line_up_cut_long_waits_but_never_the_next_command() {
    let long = "x".repeat(300);
    let obj = blocked_tenant("BucketsRemain", &long);
    let row = plan::row(&obj, &[tenant_bucket("alpha", Some(0), false)]);
    assert_eq!(row.what, "s3tenant/team-a");
    assert_eq!(row.phase, "Deleting");
    assert_eq!(row.ready, "True (Provisioned)");
    assert_eq!(row.waits_for.chars().count(), 100);
    assert!(row.waits_for.ends_with('…'));
    assert_eq!(
        row.next,
        "kubectl delete s3bucket alpha -n apps --wait=false"
    );
    let ready_bucket = plan::row(
        &Object::Bucket(bucket(json!({"phase": "Ready", "conditions": [ready()]}))),
        &[],
    );
    assert_eq!(ready_bucket.next, "-");
    let lines = plan::render(&[row.clone(), ready_bucket.clone()], false);
    assert_eq!(lines.len(), 3);
    assert!(
        lines[0].starts_with("NAME             PHASE     READY"),
        "{lines:#?}"
    );
    // Every column starts at the same place on every line.
    let column = lines[0].find("WAITING FOR").unwrap();
    assert_eq!(lines[2].find("nothing"), Some(column), "{lines:#?}");
    assert!(lines[1].ends_with("kubectl delete s3bucket alpha -n apps --wait=false"));
    let all = plan::render(&[row, ready_bucket], true);
    assert!(all[0].starts_with("NAMESPACE  NAME"), "{all:#?}");
    assert!(all[1].starts_with("apps       s3tenant/team-a"), "{all:#?}");
}

#[test]
fn an_object_that_does_not_decode_gets_a_row_that_says_so() {
    let row = plan::undecodable_row(
        Kind::Bucket,
        "apps",
        "broken",
        "spec.versioning: invalid type",
    );
    assert_eq!(row.what, "s3bucket/broken");
    assert!(
        row.waits_for
            .contains("does not decode (spec.versioning: invalid type)")
    );
    assert_eq!(row.next, "kubectl edit s3bucket broken -n apps");
}

#[test]
fn ages_read_like_kubectls() {
    let at = |secs: i64| now() - SignedDuration::from_secs(secs);
    assert_eq!(plan::age(at(42), now()), "42s");
    assert_eq!(plan::age(at(300), now()), "5m");
    assert_eq!(plan::age(at(3 * 3600), now()), "3h");
    assert_eq!(plan::age(at(3 * 86400), now()), "3d");
    assert_eq!(
        plan::age(now() + SignedDuration::from_secs(5), now()),
        "0s",
        "clock skew"
    );
}

fn event(reason: &str, message: &str, at: &str, count: Option<i32>) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("e-{reason}"), "namespace": "apps"},
        "involvedObject": {"kind": "S3Tenant", "name": "team-a"},
        "reason": reason, "message": message, "type": "Warning",
        "lastTimestamp": at, "count": count,
    }))
    .unwrap()
}

#[test]
fn recent_events_are_the_last_ones_oldest_first_with_their_count() {
    let events = [
        event("Newest", "c", "2026-05-01T11:59:30Z", Some(3)),
        event("Oldest", "a", "2026-05-01T10:00:00Z", None),
        event("Middle", "b", "2026-05-01T11:50:00Z", Some(1)),
    ];
    let lines = plan::recent_events(&events, now(), 2);
    assert_eq!(
        lines,
        [
            " 10m ago  Warning  Middle: b",
            " 30s ago  Warning  Newest: c (x3)"
        ]
    );
    // events.k8s.io writers fill eventTime and series instead.
    let series: Event = serde_json::from_value(json!({
        "metadata": {"name": "s", "namespace": "apps"},
        "involvedObject": {"kind": "S3Tenant", "name": "team-a"},
        "reason": "DeletionBlocked", "message": "m", "type": "Warning",
        "eventTime": "2026-05-01T11:00:00.000000Z",
        "series": {"count": 4, "lastObservedTime": "2026-05-01T11:58:00.000000Z"},
    }))
    .unwrap();
    assert_eq!(
        plan::recent_events(&[series], now(), 10),
        ["  2m ago  Warning  DeletionBlocked: m (x4)"]
    );
}

#[test]
fn why_tells_conditions_the_block_the_backend_the_events_and_the_next_command() {
    let t = tenant(
        json!({"deletionTimestamp": EARLIER, "finalizers": ["keeper.dev/tenant-cleanup"]}),
        json!({"provider": "default"}),
        json!({"phase": "Deleting", "accountId": "12345678901234567890",
               "s3Endpoint": "https://s3.grid.example", "bucketCount": 1, "conditions": [
            condition("Ready", "True", "Provisioned", "account ready"),
            condition("DeletionBlocked", "True", "BucketsRemain", "S3Tenant team-a still holds 1 bucket(s): alpha."),
        ]}),
    );
    let buckets = [tenant_bucket("alpha", Some(0), false)];
    let events = [event(
        "DeletionBlocked",
        "still holds alpha",
        "2026-05-01T11:59:00Z",
        None,
    )];
    let text = plan::explain(&Object::Tenant(t), &buckets, &events, now()).join("\n");
    for needle in [
        "s3tenant/team-a in namespace apps: phase Deleting",
        "  Ready=True Provisioned (since 5m ago): account ready",
        "  DeletionBlocked=True BucketsRemain (since 5m ago): S3Tenant team-a still holds 1 bucket(s): alpha.",
        "Deletion: blocked (BucketsRemain): S3Tenant team-a still holds 1 bucket(s): alpha.",
        "S3Buckets of this tenant: alpha (0 objects)",
        "  account id: 12345678901234567890",
        "  S3 endpoint: https://s3.grid.example",
        " 60s ago  Warning  DeletionBlocked: still holds alpha",
        "Next: kubectl delete s3bucket alpha -n apps --wait=false",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let b = bucket(
        json!({"phase": "Draining", "bucketName": "apps-assets", "objectCount": 120,
        "conditions": [ready()], "drainStatus": drain_status(300, 120, false)}),
    );
    let text = plan::explain(&Object::Bucket(b), &[], &[], now()).join("\n");
    for needle in [
        "Deletion: not requested",
        "  bucket name: apps-assets",
        "  credentials Secret: assets-credentials",
        "  objects: 120 (at the last usage refresh)",
        "  drain: 180 of 300 objects deleted, started 5m ago, last progress 5m ago",
        "  none (events expire",
        "Waiting for: its drain: 180 of 300 objects deleted",
        "Next: nothing to do, keeper goes on by itself",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn why_tells_a_databases_instance_and_endpoint() {
    let db: CloudDatabase = object(
        "CloudDatabase",
        "orders",
        json!({}),
        json!({"engine": "postgres", "size": "small"}),
        json!({"phase": "Ready", "instanceId": "apps-orders", "region": "eu-west-1",
               "endpoint": {"address": "orders.rds.example", "port": 5432},
               "conditions": [condition("Ready", "True", "Available", "ok")]}),
    );
    let facts = plan::backend_facts(&Object::Database(db), now());
    assert_eq!(
        facts,
        [
            ("RDS instance", "apps-orders".to_string()),
            ("region", "eu-west-1".to_string()),
            ("endpoint", "orders.rds.example:5432".to_string()),
        ]
    );
}

// ---- follow: drain and rotate requests ----

fn annotated(request: &str, value: &str, handled: Option<&str>, status: Value) -> S3Bucket {
    let mut annotations = json!({request: value});
    if let Some(h) = handled {
        annotations[format!("{request}-handled")] = json!(h);
    }
    bucket_with(json!({"annotations": annotations}), status)
}

fn drain_progress(current: Option<&S3Bucket>, last: Option<&S3Bucket>) -> Progress {
    follow::progress(
        Request::Drain,
        "1700",
        current,
        last,
        None,
        Duration::from_secs(1),
    )
}

#[test]
fn a_fresh_value_is_one_keeper_has_not_seen_on_the_bucket() {
    let plain = bucket(Value::Null);
    assert_eq!(follow::fresh_value(Request::Drain, &plain, 1700), "1700");
    // Taken by the annotation, by keeper's handled annotation, or by the status record.
    let b = bucket_with(
        json!({"annotations": {"keeper.dev/drain": "1700", "keeper.dev/drain-handled": "1701"}}),
        json!({"handledRequests": {"drain": "1702", "rotateCredentials": "1703"}}),
    );
    assert_eq!(follow::fresh_value(Request::Drain, &b, 1700), "1703");
    assert_eq!(follow::fresh_value(Request::Rotate, &b, 1703), "1704");
    assert_eq!(follow::fresh_value(Request::Rotate, &b, 1700), "1700");
}

#[test]
fn a_drain_waits_for_keeper_then_shows_progress_then_ends_when_handled_without_a_drain() {
    let before = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Ready", "conditions": [ready(), synced()]}),
    );
    assert_eq!(
        drain_progress(Some(&before), None),
        Progress::Waiting("waiting for keeper to take up drain request 1700".into())
    );
    let running = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Draining", "conditions": [ready(), synced()], "drainStatus": drain_status(300, 100, false)}),
    );
    let progress = drain_progress(Some(&running), Some(&before));
    assert_eq!(
        progress,
        Progress::Draining {
            deleted: 200,
            total: 300,
            message: "100 of 300 objects remain".into()
        }
    );
    assert_eq!(progress.line(), "200 of 300 objects deleted");
    // The value handled while a drain still runs (a value changed mid-drain): not done yet.
    let still = annotated(
        "keeper.dev/drain",
        "1700",
        Some("1700"),
        json!({"phase": "Draining", "conditions": [ready()], "drainStatus": drain_status(300, 10, false)}),
    );
    assert!(matches!(
        drain_progress(Some(&still), None),
        Progress::Draining { .. }
    ));
    // Done: handled (the annotation or the status record), no drain running.
    let done = annotated(
        "keeper.dev/drain",
        "1700",
        Some("1700"),
        json!({"phase": "Ready", "conditions": [ready()]}),
    );
    assert_eq!(
        drain_progress(Some(&done), Some(&running)),
        Progress::Done("drain 1700 done: 300 objects deleted, the bucket is empty".into())
    );
    let recorded = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Ready", "conditions": [ready()], "handledRequests": {"drain": "1700"}}),
    );
    assert_eq!(
        drain_progress(Some(&recorded), None),
        Progress::Done("drain 1700 done: the bucket is empty".into()),
        "an empty bucket is handled without a drain"
    );
    // Handled before, for another value: not ours.
    let old = annotated(
        "keeper.dev/drain",
        "1700",
        Some("1600"),
        json!({"conditions": [ready()]}),
    );
    assert!(matches!(
        drain_progress(Some(&old), None),
        Progress::Waiting(_)
    ));
}

#[test]
fn a_drain_keeper_retries_is_still_waited_for() {
    let retrying = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"conditions": [ready(), condition("Synced", "False", "BackendError", "DeleteObjects: 503")]}),
    );
    assert_eq!(
        drain_progress(Some(&retrying), None),
        Progress::Waiting("keeper retries an error (BackendError): DeleteObjects: 503".into())
    );
    // A deletion blocked because no drain was asked for yet is what the request lifts.
    let not_empty = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Deleting", "conditions": [ready(),
            condition("DeletionBlocked", "True", "BucketNotEmpty", "holds objects")]}),
    );
    assert!(matches!(
        drain_progress(Some(&not_empty), None),
        Progress::Waiting(_)
    ));
}

#[test]
fn a_drain_fails_on_a_stall_a_drain_blocked_deletion_or_a_stuck_drain() {
    let stalled = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Failed", "conditions": [
            condition("Ready", "False", "DrainBlocked", "drain stopped: AccessDenied (object lock)"),
            condition("Stalled", "True", "DrainBlocked", "drain stopped: AccessDenied (object lock)"),
        ]}),
    );
    assert_eq!(
        drain_progress(Some(&stalled), None),
        Progress::Failed(
            "Stalled (DrainBlocked): drain stopped: AccessDenied (object lock)".into()
        )
    );
    let blocked = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Deleting", "conditions": [
            condition("DeletionBlocked", "True", "DrainBlocked", "drain stopped: legal hold"),
        ]}),
    );
    assert_eq!(
        drain_progress(Some(&blocked), None),
        Progress::Failed("DeletionBlocked (DrainBlocked): drain stopped: legal hold".into())
    );
    let stuck = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Draining", "conditions": [ready()], "drainStatus": drain_status(300, 40, true)}),
    );
    assert_eq!(
        drain_progress(Some(&stuck), None),
        Progress::Failed(
            "the drain is stuck: no object deleted for the stuck threshold (40 of 300 objects remain)"
                .into()
        )
    );
}

#[test]
fn a_failure_from_before_the_request_counts_only_once_keeper_had_time_to_try_again() {
    let stalled = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"phase": "Failed", "conditions": [
            condition("Stalled", "True", "DrainBlocked", "drain stopped: object lock"),
        ]}),
    );
    let baseline = follow::failure(Request::Drain, &stalled);
    assert_eq!(
        baseline.as_deref(),
        Some("Stalled (DrainBlocked): drain stopped: object lock")
    );
    let at = |waited: Duration| {
        follow::progress(
            Request::Drain,
            "1700",
            Some(&stalled),
            None,
            baseline.as_deref(),
            waited,
        )
    };
    assert!(matches!(at(Duration::from_secs(5)), Progress::Waiting(_)));
    assert!(matches!(at(STALE_FAILURE_GRACE), Progress::Failed(_)));
    // A different failure is keeper's answer at once.
    let other = follow::progress(
        Request::Drain,
        "1700",
        Some(&stalled),
        None,
        Some("Stalled (OwnershipLost): mark changed"),
        Duration::from_secs(1),
    );
    assert!(matches!(other, Progress::Failed(_)));
}

#[test]
fn a_request_removed_or_replaced_by_someone_else_ends_the_follow() {
    let removed = bucket(json!({"conditions": [ready()]}));
    assert_eq!(
        drain_progress(Some(&removed), None),
        Progress::Failed(
            "someone removed the keeper.dev/drain annotation: the drain is canceled, what it has not deleted stays"
                .into()
        )
    );
    let replaced = annotated(
        "keeper.dev/drain",
        "1800",
        None,
        json!({"conditions": [ready()]}),
    );
    let Progress::Failed(why) = drain_progress(Some(&replaced), None) else {
        panic!("a replaced request is not ours to follow");
    };
    assert!(why.contains("keeper.dev/drain=1800"), "{why}");
}

#[test]
fn a_bucket_gone_after_deleting_under_delete_was_drained_and_any_other_departure_fails() {
    let deleting_delete = bucket_with(
        json!({"deletionTimestamp": EARLIER, "finalizers": ["keeper.dev/bucket-cleanup"],
               "annotations": {"keeper.dev/drain": "1700"}}),
        json!({"phase": "Deleting", "conditions": [ready()], "drainStatus": drain_status(300, 5, false)}),
    );
    assert!(matches!(
        drain_progress(None, Some(&deleting_delete)),
        Progress::Done(_)
    ));
    let mut retained = deleting_delete.clone();
    retained.spec.deletion_policy = crate::api::DeletionPolicy::Retain;
    assert!(matches!(
        drain_progress(None, Some(&retained)),
        Progress::Failed(_)
    ));
    let live = annotated(
        "keeper.dev/drain",
        "1700",
        None,
        json!({"conditions": [ready()]}),
    );
    assert!(matches!(
        drain_progress(None, Some(&live)),
        Progress::Failed(_)
    ));
    assert!(matches!(
        follow::progress(
            Request::Rotate,
            "1700",
            None,
            Some(&deleting_delete),
            None,
            Duration::ZERO
        ),
        Progress::Failed(_)
    ));
}

#[test]
fn a_rotation_ends_when_handled_and_ready_and_fails_on_a_stall() {
    let rotate = |handled: Option<&str>, status: Value, waited: u64| {
        let b = annotated("keeper.dev/rotate-credentials", "1700", handled, status);
        follow::progress(
            Request::Rotate,
            "1700",
            Some(&b),
            None,
            None,
            Duration::from_secs(waited),
        )
    };
    assert_eq!(
        rotate(None, json!({"conditions": [ready()]}), 1),
        Progress::Waiting("waiting for keeper to take up rotation request 1700".into())
    );
    assert_eq!(
        rotate(
            Some("1700"),
            json!({"conditions": [condition("Ready", "False", "CredentialsNotYetValid", "the store does not accept the new keys yet")]}),
            1
        ),
        Progress::Waiting(
            "rotation handled, waiting for Ready (CredentialsNotYetValid): the store does not accept the new keys yet"
                .into()
        )
    );
    let Progress::Done(summary) = rotate(Some("1700"), json!({"conditions": [ready()]}), 1) else {
        panic!("handled and Ready is done");
    };
    assert!(summary.contains("Secret assets-credentials"), "{summary}");
    // The status record is enough too.
    assert!(matches!(
        rotate(
            None,
            json!({"conditions": [ready()], "handledRequests": {"rotateCredentials": "1700"}}),
            1
        ),
        Progress::Done(_)
    ));
    assert!(matches!(
        rotate(
            None,
            json!({"conditions": [condition("Stalled", "True", "BackendError", "IAM refused")]}),
            1
        ),
        Progress::Failed(_)
    ));
    // A stuck drain is no failure of a rotation.
    assert!(matches!(
        rotate(
            None,
            json!({"conditions": [ready()], "drainStatus": drain_status(5, 5, true)}),
            1
        ),
        Progress::Waiting(_)
    ));
}

#[test]
fn progress_lines_say_what_a_log_needs() {
    assert_eq!(Progress::Waiting("w".into()).line(), "w");
    assert_eq!(Progress::Done("d".into()).line(), "d");
    assert_eq!(Progress::Failed("f".into()).line(), "failed: f");
}

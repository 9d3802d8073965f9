use std::time::{Duration, Instant};

use super::*;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, Delete, ObjectIdentifier, ObjectLockLegalHold, ObjectLockLegalHoldStatus,
};
use futures::StreamExt;

use crate::metrics::Metrics;
use crate::test_support::MotoServer;

/// The owner the drains in these tests run for.
fn owner() -> OwnerMark {
    OwnerMark::new("ns", "b", "uid-1")
}

/// A drain pace with keeper's default concurrency.
fn pace(budget: Duration, max_per_second: u32) -> DrainPace {
    DrainPace {
        budget,
        max_per_second,
        in_flight: 4,
    }
}

/// Creates a bucket the way keeper does: created, then marked as `owner()`'s.
async fn create_owned(store: &S3Store, metrics: &Metrics, bucket: &str, object_lock: bool) {
    store
        .create_bucket(metrics, bucket, "us-east-1", object_lock)
        .await
        .unwrap();
    store.tag_owner(metrics, bucket, &owner()).await.unwrap();
}

/// moto with the scheme its clients use.
pub(crate) struct Moto {
    _server: MotoServer,
    pub endpoint: String,
}

impl Moto {
    /// Starts moto; a missing moto fails the test (see `MotoServer::start`).
    pub(crate) fn start() -> Moto {
        Self::start_with(&[], "http")
    }

    /// Starts moto serving https with a fresh self-signed certificate for 127.0.0.1; returns it
    /// with the certificate's PEM (the CA bundle that trusts it).
    pub(crate) fn start_tls() -> (Moto, Vec<u8>) {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "keeper-moto-tls-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_file, cert.cert.pem()).unwrap();
        std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
        let moto = Moto::start_with(
            &[
                "-s",
                "-c",
                cert_file.to_str().unwrap(),
                "-k",
                key_file.to_str().unwrap(),
            ],
            "https",
        );
        // moto has read its certificate once it answers.
        std::fs::remove_dir_all(&dir).unwrap();
        (moto, cert.cert.pem().into_bytes())
    }

    /// Starts moto with extra arguments, serving `scheme`.
    fn start_with(extra: &[&str], scheme: &str) -> Moto {
        let server = MotoServer::start("s3 backend test", extra);
        Moto {
            endpoint: server.url(scheme),
            _server: server,
        }
    }

    pub(crate) fn settings(&self) -> S3Settings {
        S3Settings {
            endpoint: self.endpoint.clone(),
            region: "us-east-1".into(),
            access_key_id: "testing".into(),
            secret_access_key: "testing".into(),
            force_path_style: true,
            ca_bundle: None,
            rate_limit: crate::backends::rate::RateLimit::default(),
        }
    }
}

async fn put_objects(store: &S3Store, bucket: &str, keys: impl Iterator<Item = String>) {
    futures::stream::iter(keys)
        .for_each_concurrent(16, |key| async move {
            store
                .client
                .put_object()
                .bucket(bucket)
                .key(key)
                .body(ByteStream::from_static(b"0123456789"))
                .send()
                .await
                .expect("put object");
        })
        .await;
}

#[tokio::test]
async fn creates_a_tagged_versioned_bucket_and_reports_ownership() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    assert_eq!(
        store.ownership(&metrics, "b-one").await.unwrap(),
        Ownership::Missing
    );
    assert_eq!(
        store
            .create_bucket(&metrics, "b-one", "us-east-1", false)
            .await
            .unwrap(),
        CreateOutcome::Created
    );
    // A mark from an older keeper (uid only) reads as such.
    store
        .tag_owner(
            &metrics,
            "b-one",
            &OwnerMark {
                uid: "uid-1".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store.ownership(&metrics, "b-one").await.unwrap(),
        Ownership::Exists {
            mark: Some(OwnerMark {
                uid: "uid-1".into(),
                ..Default::default()
            })
        }
    );
    store.tag_owner(&metrics, "b-one", &owner()).await.unwrap();
    store.set_versioning(&metrics, "b-one", true).await.unwrap();
    assert_eq!(
        store.ownership(&metrics, "b-one").await.unwrap(),
        Ownership::Exists {
            mark: Some(owner())
        }
    );
    // Versioning keeps both writes of a key (GetBucketVersioning is not decodable from moto).
    put_objects(
        &store,
        "b-one",
        ["k".to_string(), "k".to_string()].into_iter(),
    )
    .await;
    let usage = store.usage(&metrics, "b-one", 1000).await.unwrap().unwrap();
    assert_eq!(usage.objects, 2);
    let text = metrics.encode();
    assert!(
        text.contains(r#"keeper_backend_requests_total{backend="s3",operation="create_bucket",outcome="success"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_bucket_created_by_someone_else_shows_no_owner_tag() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    store
        .client
        .create_bucket()
        .bucket("foreign")
        .send()
        .await
        .unwrap();
    assert_eq!(
        store.ownership(&metrics, "foreign").await.unwrap(),
        Ownership::Exists { mark: None }
    );
}

#[tokio::test]
async fn usage_counts_versions_and_delete_markers_within_a_bound() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    assert_eq!(store.usage(&metrics, "nope", 10_000).await.unwrap(), None);
    store
        .create_bucket(&metrics, "usage", "us-east-1", false)
        .await
        .unwrap();
    store.set_versioning(&metrics, "usage", true).await.unwrap();
    put_objects(&store, "usage", (0..1200).map(|i| format!("k{i}"))).await;
    // A second version of 10 objects, and a delete marker on one.
    put_objects(&store, "usage", (0..10).map(|i| format!("k{i}"))).await;
    store
        .client
        .delete_object()
        .bucket("usage")
        .key("k0")
        .send()
        .await
        .unwrap();
    let usage = store.usage(&metrics, "usage", 100_000).await.unwrap();
    assert_eq!(
        usage,
        Some(Usage {
            objects: 1211,
            bytes: 12100,
            complete: true
        })
    );
    // The bound stops the listing after the page that reaches it.
    let bounded = store.usage(&metrics, "usage", 500).await.unwrap().unwrap();
    assert_eq!(bounded.objects, 1000);
    assert!(!bounded.complete);
}

#[tokio::test]
async fn drains_thousands_of_versions_in_batches_of_at_most_1000_then_deletes() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    create_owned(&store, &metrics, "drain", false).await;
    store.set_versioning(&metrics, "drain", true).await.unwrap();
    put_objects(&store, "drain", (0..2300).map(|i| format!("obj/{i}"))).await;
    put_objects(&store, "drain", (0..200).map(|i| format!("obj/{i}"))).await;
    for i in 0..50 {
        store
            .client
            .delete_object()
            .bucket("drain")
            .key(format!("obj/{i}"))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(
        store.delete_bucket(&metrics, "drain").await.unwrap(),
        DeleteOutcome::NotEmpty
    );
    // A spent budget lists no further page, and the page in hand (of one batch, one at a time)
    // is deleted whole: the first page and the one listed before it was deleted. The next round
    // resumes from the bucket's state.
    let one_at_a_time = DrainPace {
        in_flight: 1,
        ..pace(Duration::ZERO, 100_000)
    };
    let first = store
        .drain_round(&metrics, "drain", &owner(), &one_at_a_time)
        .await
        .unwrap();
    assert_eq!(first.deleted, 2000);
    assert!(!first.empty);
    let rest = store
        .drain_round(
            &metrics,
            "drain",
            &owner(),
            &pace(Duration::from_secs(60), 100_000),
        )
        .await
        .unwrap();
    assert_eq!(first.deleted + rest.deleted, 2550);
    assert!(rest.empty);
    assert!(rest.blocked.is_none() && rest.failed.is_empty());
    assert_eq!(
        store.usage(&metrics, "drain", 10_000).await.unwrap(),
        Some(Usage {
            objects: 0,
            bytes: 0,
            complete: true
        })
    );
    let text = metrics.encode();
    // 2,550 entries need at least three batches; more would mean smaller batches than allowed.
    assert!(
        text.contains(r#"keeper_backend_requests_total{backend="s3",operation="delete_objects",outcome="success"} 3"#),
        "{text}"
    );
    assert_eq!(
        store.delete_bucket(&metrics, "drain").await.unwrap(),
        DeleteOutcome::Deleted
    );
    // Already gone counts as deleted.
    assert_eq!(
        store.delete_bucket(&metrics, "drain").await.unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(
        store.ownership(&metrics, "drain").await.unwrap(),
        Ownership::Missing
    );
}

#[tokio::test]
async fn the_drain_rate_limit_spreads_batches_over_time() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    create_owned(&store, &metrics, "slow", false).await;
    put_objects(&store, "slow", (0..300).map(|i| format!("k{i}"))).await;
    let started = Instant::now();
    let round = store
        .drain_round(
            &metrics,
            "slow",
            &owner(),
            &pace(Duration::from_secs(60), 100),
        )
        .await
        .unwrap();
    assert_eq!(round.deleted, 300);
    assert!(round.empty);
    // At 100/s, the third batch of 100 starts no sooner than 2 seconds in, however many calls
    // may be in flight; batches were capped at 100 keys.
    assert!(started.elapsed() >= Duration::from_secs(2));
    // A round whose budget runs out with the last batch still reports the bucket empty.
    put_objects(&store, "slow", (0..200).map(|i| format!("k{i}"))).await;
    let round = store
        .drain_round(
            &metrics,
            "slow",
            &owner(),
            &pace(Duration::from_secs(2), 100),
        )
        .await
        .unwrap();
    assert_eq!(round.deleted, 200);
    assert!(round.empty);
    let text = metrics.encode();
    assert!(
        text.contains(r#"keeper_backend_requests_total{backend="s3",operation="delete_objects",outcome="success"} 5"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_legal_hold_stops_the_drain_with_the_key_named() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    create_owned(&store, &metrics, "locked", true).await;
    put_objects(&store, "locked", (0..5).map(|i| format!("free{i}"))).await;
    store
        .client
        .put_object()
        .bucket("locked")
        .key("held")
        .body(ByteStream::from_static(b"x"))
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .send()
        .await
        .unwrap();
    let round = store
        .drain_round(
            &metrics,
            "locked",
            &owner(),
            &pace(Duration::from_secs(60), 1000),
        )
        .await
        .unwrap();
    let blocked = round.blocked.expect("the held object blocks the drain");
    assert!(blocked.contains("\"held\""), "{blocked}");
    assert_eq!(round.deleted, 5);
    assert_eq!(round.failed.len(), 1);
    // Lifting the hold lets the drain finish.
    let version = store
        .client
        .list_object_versions()
        .bucket("locked")
        .send()
        .await
        .unwrap()
        .versions()[0]
        .version_id()
        .map(str::to_string);
    store
        .client
        .put_object_legal_hold()
        .bucket("locked")
        .key("held")
        .set_version_id(version)
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::Off)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let round = store
        .drain_round(
            &metrics,
            "locked",
            &owner(),
            &pace(Duration::from_secs(60), 1000),
        )
        .await
        .unwrap();
    assert_eq!(round.deleted, 1);
    assert!(round.empty && round.blocked.is_none());
}

#[tokio::test]
async fn a_ca_bundle_makes_a_self_signed_store_trusted() {
    let (moto, pem) = Moto::start_tls();
    let metrics = Metrics::new();
    // Without the bundle the certificate is refused (a transient error: nothing is "gone").
    let untrusting = S3Store::new(&moto.settings()).unwrap();
    let err = untrusting.ownership(&metrics, "tls").await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    let trusting = S3Store::new(&S3Settings {
        ca_bundle: Some(pem),
        ..moto.settings()
    })
    .unwrap();
    assert_eq!(
        trusting.ownership(&metrics, "tls").await.unwrap(),
        Ownership::Missing
    );
    // A bundle without a certificate is refused up front.
    assert!(
        S3Store::new(&S3Settings {
            ca_bundle: Some(b"not a pem".to_vec()),
            ..moto.settings()
        })
        .is_err()
    );
}

#[tokio::test]
async fn a_store_that_repeats_its_continuation_marker_is_an_error_not_an_endless_listing() {
    use wiremock::matchers::{method, query_param};
    use wiremock::{Mock, ResponseTemplate};
    let server = crate::test_support::mock_server().await;
    let page = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><Prefix></Prefix><KeyMarker></KeyMarker><VersionIdMarker></VersionIdMarker>
  <NextKeyMarker>a</NextKeyMarker><NextVersionIdMarker>1</NextVersionIdMarker>
  <MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
  <Version><Key>a</Key><VersionId>1</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:00.000Z</LastModified><Size>3</Size></Version>
</ListVersionsResult>"#;
    Mock::given(method("GET"))
        .and(query_param("versioning", ""))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            r#"<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>"#,
            "application/xml",
        ))
        .mount(&server)
        .await;
    // Whatever the markers asked for, the same page (a store that ignores them).
    Mock::given(method("GET"))
        .and(query_param("versions", ""))
        .respond_with(ResponseTemplate::new(200).set_body_raw(page, "application/xml"))
        .mount(&server)
        .await;
    let store = S3Store::new(&S3Settings {
        endpoint: server.uri(),
        region: "us-east-1".into(),
        access_key_id: "AK".into(),
        secret_access_key: "SK".into(),
        force_path_style: true,
        ca_bundle: None,
        rate_limit: crate::backends::rate::RateLimit::default(),
    })
    .unwrap();
    let metrics = Metrics::new();
    let err = tokio::time::timeout(Duration::from_secs(10), store.usage(&metrics, "b", 100_000))
        .await
        .expect("the listing ends")
        .unwrap_err();
    assert_eq!(err.code, "RepeatedContinuationMarker", "{err}");
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        3,
        "the versioning state, one page, then the same marker again"
    );
}

#[tokio::test]
async fn a_drain_checks_the_owner_before_deleting_and_aborts_incomplete_uploads() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    create_owned(&store, &metrics, "owned", false).await;
    put_objects(&store, "owned", (0..3).map(|i| format!("k{i}"))).await;
    store
        .client
        .create_multipart_upload()
        .bucket("owned")
        .key("half-written")
        .send()
        .await
        .unwrap();
    // Another resource's mark: nothing is deleted.
    let other = OwnerMark::new("other", "x", "uid-2");
    store.tag_owner(&metrics, "owned", &other).await.unwrap();
    let round = store
        .drain_round(
            &metrics,
            "owned",
            &owner(),
            &pace(Duration::from_secs(60), 1000),
        )
        .await
        .unwrap();
    let why = round.not_ours.expect("not ours any more");
    assert!(why.contains("S3Bucket other/x"), "{why}");
    assert_eq!(round.deleted, 0);
    assert_eq!(
        store
            .usage(&metrics, "owned", 100)
            .await
            .unwrap()
            .unwrap()
            .objects,
        3
    );
    // Ours again: the objects go, then the incomplete upload, and only then is it empty.
    store.tag_owner(&metrics, "owned", &owner()).await.unwrap();
    let round = store
        .drain_round(
            &metrics,
            "owned",
            &owner(),
            &pace(Duration::from_secs(60), 1000),
        )
        .await
        .unwrap();
    assert_eq!((round.deleted, round.aborted_uploads), (3, 1));
    assert!(!round.empty && round.not_ours.is_none());
    let round = store
        .drain_round(
            &metrics,
            "owned",
            &owner(),
            &pace(Duration::from_secs(60), 1000),
        )
        .await
        .unwrap();
    assert!(round.empty, "{round:?}");
    let uploads = store
        .client
        .list_multipart_uploads()
        .bucket("owned")
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty());
}

/// The count of `operation` calls with `outcome` in the metrics.
fn calls(metrics: &Metrics, operation: &str, outcome: &str) -> u64 {
    let needle = format!(
        r#"keeper_backend_requests_total{{backend="s3",operation="{operation}",outcome="{outcome}"}} "#
    );
    metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&needle)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn the_versioning_state_is_read_even_where_the_sdk_cannot_decode_it() {
    let moto = Moto::start();
    let metrics = Metrics::new();
    let store = S3Store::new(&moto.settings()).unwrap();
    for (bucket, state) in [
        ("never", None),
        ("enabled", Some(true)),
        ("suspended", Some(false)),
    ] {
        create_owned(&store, &metrics, bucket, false).await;
        if let Some(enabled) = state {
            store.set_versioning(&metrics, bucket, true).await.unwrap();
            store
                .set_versioning(&metrics, bucket, enabled)
                .await
                .unwrap();
        }
    }
    // moto names the answer's root element differently; its Status is read all the same.
    assert_eq!(
        store.versioning(&metrics, "never").await.unwrap(),
        Versioning::Never
    );
    assert_eq!(
        store.versioning(&metrics, "enabled").await.unwrap(),
        Versioning::Enabled
    );
    assert_eq!(
        store.versioning(&metrics, "suspended").await.unwrap(),
        Versioning::Suspended
    );
    assert_eq!(
        store
            .versioning(&metrics, "missing")
            .await
            .unwrap_err()
            .code,
        "NoSuchBucket"
    );
}

#[test]
fn a_versioning_answer_is_read_from_its_status_element() {
    use super::bucket::versioning_in;
    assert_eq!(
        versioning_in(r#"<GetBucketVersioningResponse xmlns="x"/>"#),
        Some(Versioning::Never)
    );
    assert_eq!(
        versioning_in(
            "<GetBucketVersioningResponse><Status>Enabled</Status></GetBucketVersioningResponse>"
        ),
        Some(Versioning::Enabled)
    );
    assert_eq!(
        versioning_in(
            "<VersioningConfiguration><Status>Suspended</Status></VersioningConfiguration>"
        ),
        Some(Versioning::Suspended)
    );
    assert_eq!(versioning_in("<html>proxy error</html>"), None);
}

/// Drains `entries` entries of a bucket (`versioned` or never versioned) in one round and
/// returns the metrics of the drain alone. `started`: the count before is the one that starts a
/// drain (what keeper does), not a usage refresh.
async fn drain_counting_calls(
    store: &S3Store,
    bucket: &str,
    versioned: bool,
    entries: usize,
    started: bool,
) -> Metrics {
    let setup = Metrics::new();
    create_owned(store, &setup, bucket, false).await;
    if versioned {
        store.set_versioning(&setup, bucket, true).await.unwrap();
        // 2,000 keys, 500 of them written twice: 2,500 versions.
        put_objects(
            store,
            bucket,
            (0..entries - 500).map(|i| format!("k/{i:05}")),
        )
        .await;
        put_objects(store, bucket, (0..500).map(|i| format!("k/{i:05}"))).await;
    } else {
        put_objects(store, bucket, (0..entries).map(|i| format!("k/{i:05}"))).await;
    }
    let metrics = Metrics::new();
    let usage = if started {
        store.count_for_drain(&metrics, bucket, 100_000).await
    } else {
        store.usage(&metrics, bucket, 100_000).await
    };
    assert_eq!(usage.unwrap().unwrap().objects, entries as i64);
    let metrics = Metrics::new();
    let round = store
        .drain_round(
            &metrics,
            bucket,
            &owner(),
            &pace(Duration::from_secs(60), 100_000),
        )
        .await
        .unwrap();
    assert_eq!(round.deleted, entries as u64, "{round:?}");
    assert!(
        round.empty && round.error.is_none() && round.failed.is_empty(),
        "{round:?}"
    );
    metrics
}

#[tokio::test]
async fn a_drain_lists_with_the_cheapest_call_and_deletes_in_ceil_n_over_1000_calls() {
    let moto = Moto::start();
    let store = S3Store::new(&moto.settings()).unwrap();
    // Never versioned: ListObjectsV2, and one ListObjectVersions to be sure nothing is hidden.
    let metrics = drain_counting_calls(&store, "plain", false, 2500, false).await;
    assert_eq!(calls(&metrics, "delete_objects", "success"), 3);
    assert!(calls(&metrics, "list_objects_v2", "success") >= 2);
    assert_eq!(calls(&metrics, "list_object_versions", "success"), 1);
    // One ownership check per batch.
    assert_eq!(calls(&metrics, "get_bucket_tagging", "success"), 3);
    // Versioned: ListObjectVersions only.
    let metrics = drain_counting_calls(&store, "versioned", true, 2500, false).await;
    assert_eq!(calls(&metrics, "delete_objects", "success"), 3);
    assert_eq!(calls(&metrics, "list_objects_v2", "success"), 0);
    assert_eq!(
        store.usage(&metrics, "versioned", 100).await.unwrap(),
        Some(Usage {
            objects: 0,
            bytes: 0,
            complete: true
        })
    );
}

#[tokio::test]
async fn a_drain_deletes_what_its_count_listed_without_listing_it_again() {
    let moto = Moto::start();
    let store = S3Store::new(&moto.settings()).unwrap();
    // The rounds list only to find the bucket empty: once with each call where the bucket was
    // never versioned, once in a versioned one.
    let metrics = drain_counting_calls(&store, "plain", false, 2500, true).await;
    assert_eq!(calls(&metrics, "delete_objects", "success"), 3);
    assert_eq!(calls(&metrics, "list_objects_v2", "success"), 1);
    assert_eq!(calls(&metrics, "list_object_versions", "success"), 1);
    let metrics = drain_counting_calls(&store, "versioned", true, 2500, true).await;
    assert_eq!(calls(&metrics, "delete_objects", "success"), 3);
    assert_eq!(calls(&metrics, "list_objects_v2", "success"), 0);
    assert_eq!(calls(&metrics, "list_object_versions", "success"), 1);
    // Objects written after the count are found by the listing that follows the counted ones;
    // a count whose drain was stopped is forgotten.
    let setup = Metrics::new();
    create_owned(&store, &setup, "late", false).await;
    put_objects(&store, "late", (0..1500).map(|i| format!("early/{i:05}"))).await;
    store
        .count_for_drain(&setup, "late", 100_000)
        .await
        .unwrap();
    put_objects(&store, "late", (0..10).map(|i| format!("late/{i}"))).await;
    let round = store
        .drain_round(
            &setup,
            "late",
            &owner(),
            &pace(Duration::from_secs(60), 100_000),
        )
        .await
        .unwrap();
    assert!(round.empty, "{round:?}");
    assert_eq!(round.deleted, 1510);
    put_objects(&store, "late", (0..1500).map(|i| format!("again/{i:05}"))).await;
    store
        .count_for_drain(&setup, "late", 100_000)
        .await
        .unwrap();
    store.forget_counted("late");
    let metrics = Metrics::new();
    let round = store
        .drain_round(
            &metrics,
            "late",
            &owner(),
            &pace(Duration::from_secs(60), 100_000),
        )
        .await
        .unwrap();
    assert!(round.empty && round.deleted == 1500, "{round:?}");
    assert!(calls(&metrics, "list_objects_v2", "success") >= 2);
}

/// Fails the `nth` DeleteObjects request it sees (with no SDK retry, the call fails).
#[derive(Debug)]
struct FailNthDelete {
    nth: usize,
    seen: std::sync::atomic::AtomicUsize,
}

impl aws_sdk_s3::config::Intercept for FailNthDelete {
    fn name(&self) -> &'static str {
        "FailNthDelete"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_sdk_s3::config::RuntimeComponents,
        _cfg: &mut aws_sdk_s3::config::ConfigBag,
    ) -> Result<(), aws_sdk_s3::error::BoxError> {
        let request = context.request();
        if request.method() == "POST" && request.uri().contains("delete") {
            let seen = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if seen == self.nth {
                return Err("injected failure of a DeleteObjects call".into());
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_failed_batch_is_retried_by_the_next_round_without_losing_or_double_counting() {
    let moto = Moto::start();
    let setup = S3Store::new(&moto.settings()).unwrap();
    let config = S3Store::config(&moto.settings(), &BackendTimeouts::default())
        .unwrap()
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(1))
        .interceptor(FailNthDelete {
            nth: 2,
            seen: Default::default(),
        });
    let store = S3Store {
        client: Client::from_conf(config.build()),
        rate_limit: crate::backends::rate::RateLimit::default(),
        counted: Default::default(),
    };
    let metrics = Metrics::new();
    create_owned(&setup, &metrics, "flaky", false).await;
    put_objects(&setup, "flaky", (0..2500).map(|i| format!("k/{i:05}"))).await;
    let pace = pace(Duration::from_secs(60), 100_000);
    let first = store
        .drain_round(&metrics, "flaky", &owner(), &pace)
        .await
        .unwrap();
    // The batches that went through were deleted and counted; the failed one was not, and no
    // batch started once the failure was seen.
    assert!(first.error.is_some(), "{first:?}");
    assert!(!first.empty);
    assert!([1000, 1500, 2000].contains(&first.deleted), "{first:?}");
    let second = store
        .drain_round(&metrics, "flaky", &owner(), &pace)
        .await
        .unwrap();
    assert!(second.empty && second.error.is_none(), "{second:?}");
    assert_eq!(first.deleted + second.deleted, 2500);
    assert_eq!(calls(&metrics, "delete_objects", "success"), 3);
    assert_eq!(
        setup.usage(&metrics, "flaky", 10_000).await.unwrap(),
        Some(Usage {
            objects: 0,
            bytes: 0,
            complete: true
        })
    );
}

/// The floor a drain is measured against: list from the start, delete the page, one call after
/// the other, until a listing is empty. Returns the DeleteObjects calls it made.
async fn floor_drain(store: &S3Store, bucket: &str, listing: Listing) -> usize {
    let mut calls = 0;
    loop {
        let ids: Vec<ObjectIdentifier> = match listing {
            Listing::Objects => store
                .client
                .list_objects_v2()
                .bucket(bucket)
                .send()
                .await
                .unwrap()
                .contents()
                .iter()
                .map(|o| (o.key().unwrap().to_string(), None))
                .collect::<Vec<_>>(),
            Listing::Versions => {
                let page = store
                    .client
                    .list_object_versions()
                    .bucket(bucket)
                    .send()
                    .await
                    .unwrap();
                page.versions()
                    .iter()
                    .map(|v| {
                        (
                            v.key().unwrap().to_string(),
                            v.version_id().map(str::to_string),
                        )
                    })
                    .chain(page.delete_markers().iter().map(|m| {
                        (
                            m.key().unwrap().to_string(),
                            m.version_id().map(str::to_string),
                        )
                    }))
                    .collect()
            }
        }
        .into_iter()
        .map(|(key, version)| {
            ObjectIdentifier::builder()
                .key(key)
                .set_version_id(version)
                .build()
                .unwrap()
        })
        .collect();
        if ids.is_empty() {
            return calls;
        }
        store
            .client
            .delete_objects()
            .bucket(bucket)
            .delete(
                Delete::builder()
                    .set_objects(Some(ids))
                    .quiet(true)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
        calls += 1;
    }
}

/// Measures, by hand, a drain the way keeper runs it (the count that starts it, then rounds one
/// after another) against the floor on the same moto, for buckets of `KEEPER_DRAIN_OBJECTS`
/// (default 10,000) objects, and prints objects/s. Asserts only the call counts: the figures
/// depend on the machine.
#[tokio::test]
#[ignore = "a measurement: run by hand with --run-ignored"]
async fn measure_drains_against_the_floor() {
    let moto = Moto::start();
    let n: usize = std::env::var("KEEPER_DRAIN_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let store = S3Store::new(&moto.settings()).unwrap();
    let lifted = |in_flight| DrainPace {
        budget: Duration::from_secs(5),
        max_per_second: 1_000_000,
        in_flight,
    };
    let runs: [(&str, bool, Option<DrainPace>); 6] = [
        ("floor ListObjectsV2", false, None),
        ("keeper, 4 in flight, no cap", false, Some(lifted(4))),
        (
            "keeper, 1 in flight (1,000-key pages), no cap",
            false,
            Some(lifted(1)),
        ),
        (
            "keeper, default cap 1,000/s",
            false,
            Some(pace(Duration::from_secs(5), 1000)),
        ),
        ("floor ListObjectVersions (versioned)", true, None),
        (
            "keeper versioned, 4 in flight, no cap",
            true,
            Some(lifted(4)),
        ),
    ];
    // KEEPER_DRAIN_RUNS=1,3 picks runs by position.
    let picked: Option<Vec<usize>> = std::env::var("KEEPER_DRAIN_RUNS")
        .ok()
        .map(|v| v.split(',').filter_map(|i| i.parse().ok()).collect());
    for (i, (name, versioned, pace)) in runs.into_iter().enumerate() {
        if picked.as_ref().is_some_and(|p| !p.contains(&i)) {
            continue;
        }
        let bucket = format!("measure-{i}");
        let metrics = Metrics::new();
        create_owned(&store, &metrics, &bucket, false).await;
        if versioned {
            store.set_versioning(&metrics, &bucket, true).await.unwrap();
        }
        put_objects(&store, &bucket, (0..n).map(|i| format!("obj/{i:07}"))).await;
        let metrics = Metrics::new();
        let started = Instant::now();
        let deletes = match pace {
            None => {
                let listing = if versioned {
                    Listing::Versions
                } else {
                    Listing::Objects
                };
                floor_drain(&store, &bucket, listing).await
            }
            Some(pace) => {
                // What keeper does: count (the drain's start), then rounds one after another.
                let usage = store
                    .count_for_drain(&metrics, &bucket, 100_000)
                    .await
                    .unwrap();
                assert_eq!(usage.unwrap().objects, n as i64);
                println!("  counted at {:.1} s", started.elapsed().as_secs_f64());
                loop {
                    let round = store
                        .drain_round(&metrics, &bucket, &owner(), &pace)
                        .await
                        .unwrap();
                    assert!(round.error.is_none(), "{round:?}");
                    println!(
                        "  round: {} deleted, at {:.1} s",
                        round.deleted,
                        started.elapsed().as_secs_f64()
                    );
                    if round.empty {
                        break;
                    }
                }
                calls(&metrics, "delete_objects", "success") as usize
            }
        };
        let took = started.elapsed();
        for line in metrics.encode().lines() {
            if line.starts_with("keeper_backend_request_duration_seconds_sum")
                || line.starts_with("keeper_backend_requests_total")
            {
                println!("  {line}");
            }
        }
        assert_eq!(deletes, n.div_ceil(1000), "{name}");
        println!(
            "{name}: {n} objects in {:.1} s = {:.0} objects/s, {deletes} DeleteObjects",
            took.as_secs_f64(),
            n as f64 / took.as_secs_f64()
        );
    }
}

#[test]
fn s3_errors_map_by_code_before_status() {
    use crate::error::{BackendError, ErrorClass as Class};
    let s3 = |class, code: &str| -> BackendError {
        S3Error {
            operation: "delete_bucket",
            class,
            code: code.into(),
            message: String::new(),
        }
        .into()
    };
    assert_eq!(
        s3(ErrorClass::Permanent, "NoSuchBucket").class,
        Class::NotFound
    );
    assert_eq!(
        s3(ErrorClass::Permanent, "BucketNotEmpty").class,
        Class::Conflict
    );
    assert_eq!(
        s3(ErrorClass::Transient, "SlowDown").class,
        Class::Transient
    );
    assert_eq!(
        s3(ErrorClass::Permanent, "AccessDenied").class,
        Class::Permanent
    );
}

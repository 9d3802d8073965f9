//! The S3-compatible side against moto (127.0.0.1).

use super::*;
use crate::backends::s3::OwnerMark;
use crate::backends::s3::tests::Moto;

/// A backend on `moto` with the provider's own keys, sharing `creations` as the backends of one
/// process do.
fn backend(moto: &Moto, creations: &Arc<Creations>) -> S3Compatible {
    let settings = moto.settings();
    S3Compatible {
        store: S3Store::new(&settings).unwrap(),
        metrics: Arc::new(Metrics::new()),
        credentials: Credentials::Shared(Keys {
            access_key_id: settings.access_key_id.clone(),
            secret_access_key: settings.secret_access_key.clone(),
        }),
        pace: drain_pace(&DrainDefaults::default()),
        identity: (IdentityCache::default(), settings.endpoint.clone()),
        creations: creations.clone(),
    }
}

/// S3Bucket `namespace/b` (uid `uid`) for bucket `shared-name`, new.
fn desired(namespace: &str, uid: &str) -> DesiredBucket {
    DesiredBucket {
        name: "shared-name".into(),
        region: "us-east-1".into(),
        versioning: false,
        object_lock: false,
        owner: OwnerMark::new(namespace, "b", uid),
        recorded: false,
        intent: false,
        adopt: false,
    }
}

/// Two S3Buckets of two namespaces name one bucket and are reconciled at the same moment. In
/// us-east-1 the store answers the create of a bucket its account owns with success (moto as
/// AWS does), so both would create it and mark it theirs: one creates it, the other finds it
/// another's.
#[tokio::test]
async fn two_s3buckets_naming_one_bucket_at_once_get_it_once() {
    let moto = Moto::start();
    let creations = Arc::new(Creations::default());
    let (first, second) = (backend(&moto, &creations), backend(&moto, &creations));
    let (team_a, team_b) = (desired("team-a", "uid-a"), desired("team-b", "uid-b"));
    let (a, b) = tokio::join!(first.ensure(&team_a), second.ensure(&team_b));
    let (a, b) = (a.unwrap(), b.unwrap());
    let owners = [&a.owner, &b.owner];
    assert_eq!(
        owners.iter().filter(|o| ***o == Owner::Us).count(),
        1,
        "{a:?} {b:?}"
    );
    assert_eq!(
        owners
            .iter()
            .filter(|o| matches!(o, Owner::Taken(_)))
            .count(),
        1,
        "{a:?} {b:?}"
    );
    assert_eq!(usize::from(a.created) + usize::from(b.created), 1);
    // The mark on the bucket is the one of the S3Bucket that got it.
    let winner = if a.owner == Owner::Us {
        "uid-a"
    } else {
        "uid-b"
    };
    let marked = first
        .store
        .ownership(&first.metrics, "shared-name")
        .await
        .unwrap();
    assert!(
        matches!(&marked, s3::Ownership::Exists { mark: Some(m) } if m.uid == winner),
        "{marked:?}"
    );
}

//! The S3-compatible side against moto (127.0.0.1).

use super::*;
use crate::backends::iam::{IamSettings, IamStore};
use crate::backends::rate::RateLimit;
use crate::backends::s3::OwnerMark;
use crate::backends::s3::tests::Moto;
use crate::config::BackendTimeouts;
use crate::controllers::bucket::plan::keys::user_name;

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

/// [`backend`] giving each bucket an IAM user of its own, on moto's IAM.
fn backend_with_users(moto: &Moto, creations: &Arc<Creations>) -> S3Compatible {
    let settings = moto.settings();
    let admin = Keys {
        access_key_id: settings.access_key_id.clone(),
        secret_access_key: settings.secret_access_key.clone(),
    };
    let shared = backend(moto, creations);
    let iam = IamStore::new(&IamSettings {
        endpoint: Some(moto.endpoint.clone()),
        region: "us-east-1".into(),
        keys: admin.clone(),
        timeouts: BackendTimeouts::default(),
        ca_bundle: None,
        rate_limit: RateLimit::default(),
    });
    S3Compatible {
        credentials: Credentials::PerBucketUser(BucketUsers {
            identity: Iam {
                iam,
                s3: S3Store::new(&settings).unwrap(),
                metrics: shared.metrics.clone(),
            },
            admin_key_id: admin.access_key_id,
            tenant: "ns/tenant".into(),
            partition: "aws",
        }),
        ..shared
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

/// The IAM user is named after the bucket alone. An S3Bucket whose bucket went, and whose name
/// another S3Bucket (another namespace) took for a bucket of its own before the first one's
/// credentials went, deletes its own published key and leaves the user with the other's key;
/// the other's deletion then deletes the user.
#[tokio::test]
async fn a_user_named_after_a_bucket_another_s3bucket_made_since_stays_with_its_key() {
    let moto = Moto::start();
    let creations = Arc::new(Creations::default());
    let (first, second) = (
        backend_with_users(&moto, &creations),
        backend_with_users(&moto, &creations),
    );
    let (team_a, team_b) = (desired("team-a", "uid-a"), desired("team-b", "uid-b"));
    let Credentials::PerBucketUser(users) = &first.credentials else {
        unreachable!()
    };
    let keys_of_the_user = || async {
        users
            .identity
            .iam
            .user_access_keys(&first.metrics, &user_name("shared-name"))
            .await
            .unwrap()
    };
    assert_eq!(first.ensure(&team_a).await.unwrap().owner, Owner::Us);
    first.user_keys("shared-name", None).await.unwrap();
    let a_key = first.create_key("shared-name").await.unwrap().access_key_id;
    assert_eq!(
        first.delete("shared-name").await.unwrap(),
        DeleteOutcome::Deleted
    );
    // team-b's bucket of the same name, and its key on the user it found by that name.
    assert_eq!(second.ensure(&team_b).await.unwrap().owner, Owner::Us);
    second.user_keys("shared-name", None).await.unwrap();
    let b_key = second
        .create_key("shared-name")
        .await
        .unwrap()
        .access_key_id;

    let left = first
        .delete_credentials(&team_a, Some(&a_key))
        .await
        .unwrap();
    assert!(
        left.as_ref().is_some_and(|l| l.contains("team-b/b")),
        "{left:?}"
    );
    assert_eq!(keys_of_the_user().await, Some(vec![b_key.clone()]));

    // Without a published key to go by, the user's keys are left alone all the same.
    assert!(
        first
            .delete_credentials(&team_a, None)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(keys_of_the_user().await, Some(vec![b_key.clone()]));

    assert_eq!(
        second.delete("shared-name").await.unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(
        second
            .delete_credentials(&team_b, Some(&b_key))
            .await
            .unwrap(),
        None
    );
    assert_eq!(keys_of_the_user().await, None);
}

/// The look and the user's deletion run under the name's lock, the one a create of the name
/// holds: while a convergence of the name runs, the deletion waits for it.
#[tokio::test]
async fn a_users_deletion_waits_for_a_convergence_of_its_bucket_name() {
    let moto = Moto::start();
    let creations = Arc::new(Creations::default());
    let backend = backend_with_users(&moto, &creations);
    let team_a = desired("team-a", "uid-a");
    backend.ensure(&team_a).await.unwrap();
    backend.user_keys("shared-name", None).await.unwrap();
    backend.delete("shared-name").await.unwrap();

    let converging = creations
        .one_at_a_time(&backend.identity.1, "shared-name")
        .await;
    let deletion = backend.delete_credentials(&team_a, None);
    tokio::pin!(deletion);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut deletion)
            .await
            .is_err(),
        "the deletion went ahead while the name converged"
    );
    drop(converging);
    assert_eq!(deletion.await.unwrap(), None);
}

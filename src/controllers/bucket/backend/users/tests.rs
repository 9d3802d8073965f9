//! The per-bucket user's calls against an in-memory IAM: found-or-created, keys created, listed
//! and deleted, deletion of the user. Which keys to create and delete is the plan's, tested there
//! and through whole reconciles.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::*;
use crate::error::ErrorClass;

/// A user in the fake: tags, inline policy, access key ids.
type FakeUser = (Vec<(String, String)>, Option<String>, Vec<String>);

/// An in-memory IAM with IAM's two-keys limit; keys work once checked `delay` times.
#[derive(Default)]
struct FakeIam {
    users: Mutex<BTreeMap<String, FakeUser>>,
    issued: Mutex<u32>,
    calls: Mutex<Vec<String>>,
    /// Checks that still refuse a key.
    delay: Mutex<u32>,
    /// A key another writer issues, creating the user, right after the next look misses it.
    racing_key: Mutex<Option<String>>,
    /// Policy reads are refused (keys without `iam:GetUserPolicy`).
    policy_denied: Mutex<bool>,
}

impl FakeIam {
    fn call(&self, what: &str) {
        self.calls.lock().unwrap().push(what.to_string());
    }

    fn keys_of(&self, user: &str) -> Vec<String> {
        self.users
            .lock()
            .unwrap()
            .get(user)
            .map(|u| u.2.clone())
            .unwrap_or_default()
    }

    fn gone() -> BackendError {
        BackendError::new("iam", "x", ErrorClass::NotFound, "NoSuchEntity", "no user")
    }
}

impl Identity for FakeIam {
    async fn create_user(&self, user: &str, tags: &[(&str, &str)]) -> Result<bool, BackendError> {
        self.call("create_user");
        let mut users = self.users.lock().unwrap();
        if users.contains_key(user) {
            return Ok(false);
        }
        let tags = tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        users.insert(user.to_string(), (tags, None, Vec::new()));
        Ok(true)
    }

    async fn put_policy(&self, user: &str, document: &str) -> Result<(), BackendError> {
        self.call("put_policy");
        let mut users = self.users.lock().unwrap();
        let entry = users.get_mut(user).ok_or_else(Self::gone)?;
        entry.1 = Some(document.to_string());
        Ok(())
    }

    async fn policy(&self, user: &str) -> Result<Option<String>, BackendError> {
        self.call("policy");
        if *self.policy_denied.lock().unwrap() {
            return Err(BackendError::new(
                "iam",
                "get_user_policy",
                ErrorClass::Permanent,
                "AccessDenied",
                "not allowed",
            ));
        }
        Ok(self
            .users
            .lock()
            .unwrap()
            .get(user)
            .and_then(|u| u.1.clone()))
    }

    async fn access_keys(&self, user: &str) -> Result<Vec<String>, BackendError> {
        self.call("access_keys");
        Ok(self.keys_of(user))
    }

    async fn existing_keys(&self, user: &str) -> Result<Option<Vec<String>>, BackendError> {
        self.call("existing_keys");
        let mut users = self.users.lock().unwrap();
        let found = users.get(user).map(|u| u.2.clone());
        if let Some(key) = self.racing_key.lock().unwrap().take() {
            users.insert(user.to_string(), (Vec::new(), None, vec![key]));
        }
        Ok(found)
    }

    async fn create_access_key(&self, user: &str) -> Result<Keys, BackendError> {
        self.call("create_access_key");
        let mut users = self.users.lock().unwrap();
        let entry = users.get_mut(user).ok_or_else(Self::gone)?;
        if entry.2.len() >= 2 {
            return Err(BackendError::new(
                "iam",
                "create_access_key",
                ErrorClass::Conflict,
                "LimitExceeded",
                "two keys already",
            ));
        }
        let mut issued = self.issued.lock().unwrap();
        *issued += 1;
        let id = format!("AK{issued}");
        entry.2.push(id.clone());
        Ok(Keys {
            access_key_id: id,
            secret_access_key: format!("SK{issued}"),
        })
    }

    async fn delete_access_key(&self, user: &str, id: &str) -> Result<(), BackendError> {
        self.call(&format!("delete_access_key {id}"));
        if let Some(entry) = self.users.lock().unwrap().get_mut(user) {
            entry.2.retain(|k| k != id);
        }
        Ok(())
    }

    async fn delete_user(&self, user: &str) -> Result<(), BackendError> {
        self.call("delete_user");
        let mut users = self.users.lock().unwrap();
        if users.get(user).is_some_and(|u| !u.2.is_empty()) {
            return Err(BackendError::new(
                "iam",
                "delete_user",
                ErrorClass::Conflict,
                "DeleteConflict",
                "keys remain",
            ));
        }
        users.remove(user);
        Ok(())
    }

    async fn access(&self, keys: &Keys, bucket: &str) -> Result<Access, BackendError> {
        self.call("access");
        let user = plan::user_name(bucket);
        if !self.keys_of(&user).contains(&keys.access_key_id) {
            return Ok(Access::Refused("InvalidAccessKeyId".into()));
        }
        let mut delay = self.delay.lock().unwrap();
        if *delay > 0 {
            *delay -= 1;
            return Ok(Access::Refused("InvalidAccessKeyId".into()));
        }
        Ok(Access::Granted)
    }
}

fn users() -> BucketUsers<FakeIam> {
    BucketUsers {
        identity: FakeIam::default(),
        admin_key_id: "ADMIN".into(),
        tenant: "ns/team".into(),
        partition: "aws",
    }
}

const BUCKET: &str = "ns-data";

#[tokio::test]
async fn the_first_look_creates_a_tagged_user_with_a_bucket_policy_and_no_key() {
    let users = users();
    assert!(users.user_keys(BUCKET, None).await.unwrap().is_empty());
    let user = plan::user_name(BUCKET);
    let state = users.identity.users.lock().unwrap()[&user].clone();
    assert_eq!(
        state.0,
        [
            (BUCKET_TAG.to_string(), BUCKET.to_string()),
            (TENANT_TAG.to_string(), "ns/team".to_string())
        ]
    );
    assert_eq!(
        state.1.as_deref(),
        Some(plan::bucket_policy(BUCKET, "aws").as_str())
    );
    let keys = users.create_key(BUCKET).await.unwrap();
    assert_eq!(
        users.user_keys(BUCKET, None).await.unwrap(),
        std::slice::from_ref(&keys.access_key_id)
    );
    assert_eq!(users.check(BUCKET, &keys).await.unwrap(), KeyCheck::Works);
    users.delete_key(BUCKET, &keys.access_key_id).await.unwrap();
    assert!(users.user_keys(BUCKET, None).await.unwrap().is_empty());
    // Already gone: deleted all the same.
    users.delete_key(BUCKET, &keys.access_key_id).await.unwrap();
}

#[tokio::test]
async fn a_user_this_look_created_is_not_listed_and_an_existing_one_is() {
    let users = users();
    users.user_keys(BUCKET, None).await.unwrap();
    assert_eq!(
        std::mem::take(&mut *users.identity.calls.lock().unwrap()),
        ["create_user", "put_policy"],
        "a new user has no keys to list"
    );
    let keys = users.create_key(BUCKET).await.unwrap();
    users.identity.calls.lock().unwrap().clear();
    // Found (a crash after the create, another writer): its keys are listed.
    assert_eq!(
        users.user_keys(BUCKET, None).await.unwrap(),
        std::slice::from_ref(&keys.access_key_id)
    );
    assert_eq!(
        *users.identity.calls.lock().unwrap(),
        ["create_user", "put_policy", "access_keys"]
    );
}

/// A bucket user with a key, as published in the bucket's Secret; the calls so far forgotten.
async fn settled() -> (BucketUsers<FakeIam>, String) {
    let users = users();
    users.user_keys(BUCKET, None).await.unwrap();
    let published = users.create_key(BUCKET).await.unwrap().access_key_id;
    users.identity.calls.lock().unwrap().clear();
    (users, published)
}

/// A bucket whose Secret carries its user's key, as every settled bucket's does when keeper
/// starts: only reads, however many buckets there are.
#[tokio::test]
async fn a_published_users_key_is_looked_up_with_reads_only() {
    let (users, published) = settled().await;
    assert_eq!(
        users.user_keys(BUCKET, Some(&published)).await.unwrap(),
        std::slice::from_ref(&published)
    );
    assert_eq!(
        *users.identity.calls.lock().unwrap(),
        ["existing_keys", "policy"]
    );
}

#[tokio::test]
async fn a_looked_up_user_gets_its_policy_back_when_it_is_missing_or_differs() {
    let (users, published) = settled().await;
    let user = plan::user_name(BUCKET);
    let wanted = plan::bucket_policy(BUCKET, "aws");
    for stored in [None, Some(r#"{"Statement":[]}"#.to_string())] {
        users
            .identity
            .users
            .lock()
            .unwrap()
            .get_mut(&user)
            .unwrap()
            .1 = stored.clone();
        users.identity.calls.lock().unwrap().clear();
        users.user_keys(BUCKET, Some(&published)).await.unwrap();
        assert_eq!(
            *users.identity.calls.lock().unwrap(),
            ["existing_keys", "policy", "put_policy"],
            "{stored:?}"
        );
        assert_eq!(
            users.identity.users.lock().unwrap()[&user].1.as_deref(),
            Some(wanted.as_str())
        );
    }
}

/// Keys without `iam:GetUserPolicy` (granted before keeper read policies): the policy is written
/// as before, and the bucket is not failed for it.
#[tokio::test]
async fn a_refused_policy_read_writes_the_policy_as_before() {
    let (users, published) = settled().await;
    *users.identity.policy_denied.lock().unwrap() = true;
    users.user_keys(BUCKET, Some(&published)).await.unwrap();
    assert_eq!(
        *users.identity.calls.lock().unwrap(),
        ["existing_keys", "policy", "put_policy"]
    );
}

/// The user deleted behind keeper's back while the Secret still carries its key: created again,
/// tagged and with its policy, as for a new bucket (and nothing to list: it has no keys).
#[tokio::test]
async fn a_published_users_key_whose_user_is_gone_gets_the_user_created_again() {
    let users = users();
    assert!(
        users
            .user_keys(BUCKET, Some("AK-GONE"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        *users.identity.calls.lock().unwrap(),
        ["existing_keys", "create_user", "put_policy"]
    );
    let user = plan::user_name(BUCKET);
    let state = users.identity.users.lock().unwrap()[&user].clone();
    assert_eq!(state.0.len(), 2, "tagged: {:?}", state.0);
    assert_eq!(
        state.1.as_deref(),
        Some(plan::bucket_policy(BUCKET, "aws").as_str())
    );
}

/// Another writer creates the user and issues a key between the look and the create: the create
/// finds the user, and its keys are listed, so the key nobody published yet is seen (and left to
/// the key plan, which deletes it only after a write of the Secret).
#[tokio::test]
async fn a_user_created_by_another_writer_after_the_look_is_listed() {
    let users = users();
    *users.identity.racing_key.lock().unwrap() = Some("AK-OTHER".into());
    assert_eq!(
        users.user_keys(BUCKET, Some("AK-GONE")).await.unwrap(),
        ["AK-OTHER"]
    );
    assert_eq!(
        *users.identity.calls.lock().unwrap(),
        ["existing_keys", "create_user", "put_policy", "access_keys"]
    );
}

#[tokio::test]
async fn new_keys_are_refused_until_iam_catches_up() {
    let users = users();
    users.user_keys(BUCKET, None).await.unwrap();
    let keys = users.create_key(BUCKET).await.unwrap();
    *users.identity.delay.lock().unwrap() = 2;
    for _ in 0..2 {
        assert_eq!(
            users.check(BUCKET, &keys).await.unwrap(),
            KeyCheck::NotYet("InvalidAccessKeyId".into())
        );
    }
    assert_eq!(users.check(BUCKET, &keys).await.unwrap(), KeyCheck::Works);
}

#[tokio::test]
async fn deletion_removes_keys_then_the_user_and_a_missing_user_is_success() {
    let users = users();
    users.user_keys(BUCKET, None).await.unwrap();
    // A rotation in flight: two keys.
    users.create_key(BUCKET).await.unwrap();
    users.create_key(BUCKET).await.unwrap();
    users.delete(BUCKET, false).await.unwrap();
    assert!(users.identity.users.lock().unwrap().is_empty());
    // Already gone: nothing to do, no error.
    users.delete(BUCKET, false).await.unwrap();
}

#[tokio::test]
async fn the_published_key_is_deleted_without_a_listing_unless_iam_finds_another() {
    let users = users();
    users.user_keys(BUCKET, None).await.unwrap();
    let published = users.create_key(BUCKET).await.unwrap().access_key_id;
    users.identity.calls.lock().unwrap().clear();
    users.delete_key(BUCKET, &published).await.unwrap();
    users.delete(BUCKET, true).await.unwrap();
    assert_eq!(
        *users.identity.calls.lock().unwrap(),
        [
            format!("delete_access_key {published}"),
            "delete_user".into()
        ]
    );
    assert!(users.identity.users.lock().unwrap().is_empty());

    // A key issued by a reconcile that crashed before publishing it: IAM refuses to delete the
    // user, and the keys are listed and deleted after all.
    users.user_keys(BUCKET, None).await.unwrap();
    let published = users.create_key(BUCKET).await.unwrap().access_key_id;
    let unpublished = users.create_key(BUCKET).await.unwrap().access_key_id;
    users.identity.calls.lock().unwrap().clear();
    users.delete_key(BUCKET, &published).await.unwrap();
    users.delete(BUCKET, true).await.unwrap();
    assert_eq!(
        *users.identity.calls.lock().unwrap(),
        [
            format!("delete_access_key {published}"),
            "delete_user".into(),
            "access_keys".into(),
            format!("delete_access_key {unpublished}"),
            "delete_user".into(),
        ]
    );
    assert!(users.identity.users.lock().unwrap().is_empty());
    // Already gone: the published key and the user count as deleted.
    users.delete_key(BUCKET, &published).await.unwrap();
    users.delete(BUCKET, true).await.unwrap();
}

/// How many times `operation` was called on IAM, whatever the outcome.
fn iam_calls(metrics: &Metrics, operation: &str) -> u64 {
    let prefix =
        format!(r#"keeper_backend_requests_total{{backend="iam",operation="{operation}","#);
    metrics
        .encode()
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The real IAM calls and policy against a moto that enforces IAM: the keys keeper issues reach
/// their bucket and nothing else, and deletion leaves no user behind.
#[tokio::test]
async fn issued_keys_reach_only_their_bucket_on_a_store_that_enforces_iam() {
    use crate::backends::iam::{IamSettings, IamStore};
    use crate::test_support::MotoServer;

    let moto = MotoServer::start("per-bucket IAM users test", &[]);
    let endpoint = moto.url("http");
    let metrics = Arc::new(Metrics::new());
    let s3 = |keys: &Keys| crate::backends::s3::S3Settings {
        endpoint: endpoint.clone(),
        region: "us-east-1".into(),
        access_key_id: keys.access_key_id.clone(),
        secret_access_key: keys.secret_access_key.clone(),
        force_path_style: true,
        ca_bundle: None,
        rate_limit: crate::backends::rate::RateLimit::default(),
    };
    let iam = |keys: &Keys| {
        IamStore::new(&IamSettings {
            endpoint: Some(endpoint.clone()),
            region: "us-east-1".into(),
            keys: keys.clone(),
            timeouts: crate::config::BackendTimeouts::default(),
            ca_bundle: None,
            rate_limit: crate::backends::rate::RateLimit::default(),
        })
    };
    // An admin user, created while moto still lets everything through.
    let bootstrap = iam(&Keys {
        access_key_id: "bootstrap".into(),
        secret_access_key: "bootstrap".into(),
    });
    bootstrap
        .create_user(&metrics, "admin", "/", &[])
        .await
        .unwrap();
    bootstrap
        .put_user_policy(
            &metrics,
            "admin",
            "all",
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*","iam:*"],"Resource":"*"}]}"#,
        )
        .await
        .unwrap();
    let admin = bootstrap
        .create_access_key(&metrics, "admin")
        .await
        .unwrap();
    // From here on moto checks every request against IAM.
    reqwest::Client::new()
        .post(format!("{endpoint}/moto-api/reset-auth"))
        .body("0")
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    let store = S3Store::new(&s3(&admin)).unwrap();
    for bucket in ["keeper-mine", "keeper-theirs"] {
        store
            .create_bucket(&metrics, bucket, "us-east-1", false)
            .await
            .unwrap();
    }
    let made_up = Keys {
        access_key_id: "made-up".into(),
        secret_access_key: "made-up".into(),
    };
    assert_eq!(
        store
            .access(&metrics, &made_up, "keeper-mine")
            .await
            .unwrap(),
        Access::Refused("InvalidAccessKeyId".into()),
        "moto must enforce IAM, or nothing below proves anything"
    );

    let users = BucketUsers {
        identity: Iam {
            iam: iam(&admin),
            s3: S3Store::new(&s3(&admin)).unwrap(),
            metrics: metrics.clone(),
        },
        admin_key_id: admin.access_key_id.clone(),
        tenant: "ns/team".into(),
        partition: "aws",
    };
    assert!(
        users
            .user_keys("keeper-mine", None)
            .await
            .unwrap()
            .is_empty()
    );
    let keys = users.create_key("keeper-mine").await.unwrap();
    // A restart: the Secret carries the user's key. The user is found and its policy read back
    // (IAM answers it URL-encoded) as keeper's: nothing is written.
    let user = plan::user_name("keeper-mine");
    let writes = || iam_calls(&metrics, "create_user") + iam_calls(&metrics, "put_user_policy");
    let before = writes();
    assert_eq!(
        users
            .user_keys("keeper-mine", Some(&keys.access_key_id))
            .await
            .unwrap(),
        std::slice::from_ref(&keys.access_key_id)
    );
    assert_eq!(writes(), before);
    // A policy changed behind keeper's back is written back.
    users
        .identity
        .iam
        .put_user_policy(&metrics, &user, plan::POLICY_NAME, r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#)
        .await
        .unwrap();
    let before = iam_calls(&metrics, "put_user_policy");
    users
        .user_keys("keeper-mine", Some(&keys.access_key_id))
        .await
        .unwrap();
    assert_eq!(iam_calls(&metrics, "put_user_policy"), before + 1);
    assert_eq!(
        users.identity.policy(&user).await.unwrap().as_deref(),
        Some(plan::bucket_policy("keeper-mine", "aws").as_str())
    );
    assert_eq!(
        users.check("keeper-mine", &keys).await.unwrap(),
        KeyCheck::Works
    );
    assert_eq!(
        users.check("keeper-theirs", &keys).await.unwrap(),
        KeyCheck::NotYet("AccessDenied".into())
    );
    // A rotation: a second key, the first deleted.
    let retried = users.create_key("keeper-mine").await.unwrap();
    users
        .delete_key("keeper-mine", &keys.access_key_id)
        .await
        .unwrap();
    assert_eq!(
        users.user_keys("keeper-mine", None).await.unwrap(),
        std::slice::from_ref(&retried.access_key_id)
    );
    // The published key, deleted without a listing.
    users
        .delete_key("keeper-mine", &retried.access_key_id)
        .await
        .unwrap();
    users.delete("keeper-mine", true).await.unwrap();
    assert_eq!(
        users.check("keeper-mine", &retried).await.unwrap(),
        KeyCheck::NotYet("InvalidAccessKeyId".into())
    );
    assert!(
        users
            .identity
            .iam
            .access_keys(&metrics, &user)
            .await
            .unwrap()
            .is_empty()
    );
    // Already gone: success, with or without the published key.
    users
        .delete_key("keeper-mine", &retried.access_key_id)
        .await
        .unwrap();
    users.delete("keeper-mine", true).await.unwrap();
    users.delete("keeper-mine", false).await.unwrap();
}

/// A key check, a client of its own per bucket, gives up after `runtime.backendTimeouts` like
/// every other call, not after the SDK's defaults.
#[tokio::test]
async fn a_key_check_on_a_stalled_store_gives_up_after_the_configured_timeout() {
    use std::time::{Duration, Instant};
    let server = crate::test_support::mock_server().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(wiremock::ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let keys = Keys {
        access_key_id: "AK".into(),
        secret_access_key: "SK".into(),
    };
    let timeouts = crate::config::BackendTimeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_millis(300),
    };
    let users = BucketUsers {
        identity: Iam {
            iam: IamStore::new(&crate::backends::iam::IamSettings {
                endpoint: Some(server.uri()),
                region: "us-east-1".into(),
                keys: keys.clone(),
                timeouts,
                ca_bundle: None,
                rate_limit: Default::default(),
            }),
            s3: S3Store::with_timeouts(
                &crate::backends::s3::S3Settings {
                    endpoint: server.uri(),
                    region: "us-east-1".into(),
                    access_key_id: "ADMIN".into(),
                    secret_access_key: "ADMIN".into(),
                    force_path_style: true,
                    ca_bundle: None,
                    rate_limit: Default::default(),
                },
                &timeouts,
            )
            .unwrap(),
            metrics: Arc::new(Metrics::new()),
        },
        admin_key_id: "AK".into(),
        tenant: "ns/team".into(),
        partition: "aws",
    };
    let started = Instant::now();
    let checked = users.check(BUCKET, &keys).await;
    assert!(checked.is_err(), "{checked:?}");
    // The SDK's own retries (3 attempts) of 300 ms each, far from the 30 s the store stalls.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

//! Reconcile tests: one reconcile at a time through the whole shared flow
//! ([`runtime::testing::reconcile`]) over the in-memory Kubernetes seam and a fake grid.

pub mod fake;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::Value;

use self::fake::FakeBackends;
use super::*;
use crate::api::names::CLEANUP_HOLD;
use crate::api::names::TENANT_FINALIZER;
use crate::api::{S3TenantStatus, TenantPhase};
use crate::backends::{s3, storagegrid};
use crate::cluster::fake::{Call, FakeKube};
use crate::config::OperatorConfig;
use crate::runtime::policy::PERMANENT_RETRY;
use crate::runtime::{Keeper, Next, Note, ReconcileError, conditions, testing};
use crate::test_support;

/// The shared test providers (`default` grid, `store` with shared keys) plus an S3-compatible
/// provider with an IAM API (`aws`) and one with neither option (`bare`).
fn config() -> String {
    format!(
        "{}  aws:
    s3Compatible:
      endpoint: https://store.example.com
      credentialsSecret: {{name: store-creds}}
      iam: {{endpoint: https://iam.example.com}}
  bare:
    s3Compatible:
      endpoint: https://store.example.com
      credentialsSecret: {{name: store-creds}}
",
        testing::TWO_PROVIDERS
    )
}

type Cx = Context<S3TenantReconciler<FakeBackends>>;

struct Harness {
    kube: Arc<FakeKube>,
    backends: FakeBackends,
    cx: Arc<Cx>,
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn harness() -> Harness {
    let kube = Arc::new(FakeKube::default());
    kube.put_secret(
        "keeper-system",
        "grid-admin",
        data(&[("username", "admin"), ("password", "pw")]),
    );
    kube.put_secret(
        "keeper-system",
        "store-creds",
        data(&[
            ("accessKeyId", "STOREKEY"),
            ("secretAccessKey", "storesecret"),
        ]),
    );
    let backends = FakeBackends::default();
    let shared = testing::shared(kube.clone(), OperatorConfig::parse(&config()).unwrap());
    let cx = Arc::new(Context::new(
        shared,
        S3TenantReconciler::new(backends.clone()),
    ));
    Harness { kube, backends, cx }
}

fn tenant(provider: &str, extra: Value) -> S3Tenant {
    let mut spec = serde_json::json!({"provider": provider});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    let mut tenant = test_support::tenant("t", spec);
    tenant.metadata.uid = Some("u1".into());
    tenant.metadata.generation = Some(1);
    tenant.metadata.finalizers = Some(vec![TENANT_FINALIZER.into()]);
    tenant
}

fn grid_tenant() -> S3Tenant {
    tenant("default", Value::Null)
}

fn deleting(mut tenant: S3Tenant) -> S3Tenant {
    tenant.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    tenant
}

fn bucket(name: &str, tenant: &str) -> Arc<S3Bucket> {
    Arc::new(test_support::bucket(name, tenant))
}

impl Harness {
    async fn reconcile(&self, tenant: &S3Tenant) -> Result<Action, runtime::Error<Error>> {
        testing::reconcile(&self.cx, tenant.clone()).await
    }

    /// `tenant` with the status the status patches so far wrote.
    fn written(&self, tenant: &S3Tenant) -> S3Tenant {
        let mut status = serde_json::to_value(&tenant.status).unwrap();
        for call in self.kube.calls() {
            if let Call::PatchStatus { patch, .. } = call {
                json_patch::merge(&mut status, &patch["status"]);
            }
        }
        let mut out = tenant.clone();
        out.status = serde_json::from_value(status).unwrap();
        out
    }

    fn status_writes(&self) -> usize {
        self.kube
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::PatchStatus { .. }))
            .count()
    }

    fn forget_calls(&self) {
        self.kube.calls.lock().unwrap().clear();
    }

    /// A grid tenant brought to Ready, with the calls of getting there forgotten.
    async fn ready(&self, tenant: S3Tenant) -> S3Tenant {
        self.reconcile(&tenant).await.unwrap();
        let ready = self.written(&tenant);
        self.forget_calls();
        ready
    }

    fn accounts(&self) -> usize {
        self.backends.grid.state.lock().unwrap().accounts.len()
    }

    /// Both of the tenant's Secrets exist, held for cleanup.
    fn assert_secrets_held(&self) {
        for name in TENANT_SECRETS {
            assert_eq!(
                self.secret_finalizers(name),
                Some(vec![CLEANUP_HOLD.to_string()]),
                "{name} held"
            );
        }
    }

    fn released(&self) -> bool {
        self.kube.calls().iter().any(|c| {
            matches!(c, Call::PatchJson { patch, .. }
                if patch.to_string().contains("\"remove\"") && patch.to_string().contains("finalizers"))
        })
    }
}

fn status(tenant: &S3Tenant) -> &S3TenantStatus {
    tenant.status.as_ref().expect("a status was written")
}

fn condition<'a>(
    tenant: &'a S3Tenant,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    status(tenant)
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

fn transient(result: Result<Action, runtime::Error<Error>>) -> bool {
    matches!(result, Err(runtime::Error::Reconciler(e)) if e.class() == ErrorClass::Transient)
}

#[tokio::test]
async fn a_new_grid_tenant_gets_one_account_published_keys_and_a_ready_event() {
    let h = harness();
    let t = grid_tenant();
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::requeue(runtime::RESYNC));
    let t = h.written(&t);
    let status = status(&t);
    assert_eq!(status.phase, Some(TenantPhase::Ready));
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        status.s3_endpoint.as_deref(),
        Some("https://s3.example.com")
    );
    assert_eq!(
        status.credentials_secret.as_deref(),
        Some("t-s3-credentials")
    );
    assert_eq!(status.bucket_count, Some(0));
    let grid = h.backends.grid.state.lock().unwrap();
    assert_eq!(grid.admin.as_deref(), Some("admin"));
    assert_eq!(grid.accounts.len(), 1);
    let (id, account) = grid.accounts.iter().next().unwrap();
    assert_eq!(status.account_id.as_deref(), Some(id.as_str()));
    assert_eq!(account.marker, "keeper.dev/owner-uid=u1");
    assert_eq!(account.settings.name, "t");
    let ready = condition(&t, conditions::READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Provisioned")
    );

    let root = h.kube.secret_data("ns", "t-root-credentials").unwrap();
    assert_eq!(root["password"], account.password);
    let creds = h.kube.secret_data("ns", "t-s3-credentials").unwrap();
    assert_eq!(creds["accessKeyId"], *account.keys.values().next().unwrap());
    assert_eq!(creds["endpoint"], "https://s3.example.com");
    assert_eq!(creds["region"], "eu-1");
    assert!(!creds["secretAccessKey"].is_empty());
    assert_eq!(
        h.kube.notes(),
        [Note::normal(
            "Ready",
            "credentials are in Secret t-s3-credentials"
        )]
    );
    // The account id is checkpointed before the key is issued and published.
    let calls = h.kube.calls();
    let checkpoint = calls
        .iter()
        .position(|c| matches!(c, Call::PatchStatus { patch, .. } if patch["status"]["accountId"].is_string()))
        .expect("the account id is written");
    let published = calls
        .iter()
        .position(|c| matches!(c, Call::ApplySecret { name, .. } if name == "t-s3-credentials"))
        .unwrap();
    assert!(checkpoint < published, "{calls:#?}");
}

#[tokio::test]
async fn a_second_writer_never_stores_a_root_password_of_its_own_over_the_first() {
    // Two keepers without leader election: A read no root password and stops before storing
    // one; B stores its own and creates the account with it. A's password is refused, so the
    // stored password stays the account's.
    let h = harness();
    let t = grid_tenant();
    let listed = h.kube.pauses.after("secret t-root-credentials");
    let (by_a, by_b) = tokio::join!(h.reconcile(&t), async {
        listed.reached().await;
        let by_b = h.reconcile(&t).await;
        listed.release();
        by_b
    });
    by_b.unwrap();
    assert!(
        by_a.is_err(),
        "A's password was refused: it backs off and looks again"
    );
    let stored = h.kube.secret_data("ns", "t-root-credentials").unwrap()["password"].clone();
    let grid = h.backends.grid.state.lock().unwrap();
    assert_eq!(grid.accounts.len(), 1);
    assert_eq!(grid.accounts.values().next().unwrap().password, stored);
}

#[tokio::test]
async fn a_ready_tenant_writes_nothing_on_the_next_look() {
    let h = harness();
    let t = h.ready(grid_tenant()).await;
    let outcome = super::reconcile::apply(&h.cx, &t).await.unwrap();
    // Looked at again when the last full look's interval ends.
    let Next::Requeue(after) = outcome.next else {
        panic!("{:?}", outcome.next)
    };
    assert!(after <= runtime::RESYNC && after > runtime::RESYNC - Duration::from_secs(5));
    h.reconcile(&t).await.unwrap();
    assert_eq!(h.kube.calls(), [], "steady state writes nothing");
    assert_eq!(h.accounts(), 1);
}

/// The grid is down: a reconcile that looks at the account fails, one that does not succeeds.
fn grid_down(h: &Harness, down: bool) {
    h.backends.grid.state.lock().unwrap().fail_lookups_with = down.then_some(503);
}

#[tokio::test]
async fn a_ready_tenant_reconciled_for_its_buckets_does_not_look_at_its_account_again() {
    let h = harness();
    let t = h.ready(grid_tenant()).await;
    grid_down(&h, true);
    // A bucket made or deleted: the count changes, the account is as the last look left it.
    h.kube.buckets.lock().unwrap().push(bucket("alpha", "t"));
    h.reconcile(&t).await.unwrap();
    assert_eq!(status(&h.written(&t)).bucket_count, Some(1));
    assert_eq!(h.backends.grid.state.lock().unwrap().identity_lookups, 1);

    // A spec change is looked at.
    let mut changed = t.clone();
    changed.metadata.generation = Some(2);
    assert!(transient(h.reconcile(&changed).await));
    // So is a tenant whose last outcome was not written (it does not read Ready for its
    // generation), and one whose Secret changed.
    let mut unwritten = t.clone();
    unwritten.status.as_mut().unwrap().observed_generation = None;
    assert!(transient(h.reconcile(&unwritten).await));
    h.kube.edit_secret("ns", "t-s3-credentials", |s| {
        s.metadata.resource_version = Some("edited".into())
    });
    assert!(transient(h.reconcile(&t).await));
    grid_down(&h, false);
    h.reconcile(&t).await.unwrap();
    grid_down(&h, true);
    h.reconcile(&t).await.unwrap();
}

#[tokio::test]
async fn a_tenant_being_deleted_looks_at_its_account_and_forgets_the_last_look() {
    let h = harness();
    let t = h.ready(grid_tenant()).await;
    grid_down(&h, true);
    assert!(transient(h.reconcile(&deleting(t.clone())).await));
    // Had it come back (a deletion cannot), nothing of the look before would stand.
    assert!(transient(h.reconcile(&t).await));
}

/// A tenant whose root password was stored by an earlier reconcile (which may have sent the
/// create): the next one looks for the account before anything else.
fn grid_tenant_with_a_stored_password(h: &Harness) -> S3Tenant {
    let t = grid_tenant();
    h.kube.put_owned_secret(
        &crate::cluster::Target::of(&t),
        "t-root-credentials",
        data(&[("password", &"p".repeat(32))]),
    );
    // Held for cleanup, as keeper stores it.
    h.kube.edit_secret("ns", "t-root-credentials", |s| {
        s.metadata.finalizers = Some(vec![CLEANUP_HOLD.to_string()])
    });
    t
}

#[tokio::test]
async fn a_503_from_the_grid_backs_off_and_writes_nothing() {
    let h = harness();
    let t = grid_tenant_with_a_stored_password(&h);
    h.backends.grid.state.lock().unwrap().fail_lookups_with = Some(503);
    assert!(transient(h.reconcile(&t).await));
    assert_eq!(h.kube.calls(), []);
    assert_eq!(h.accounts(), 0);
}

#[tokio::test]
async fn a_new_tenant_searches_no_account_before_its_first_create() {
    // Nothing can carry its marker before a password is stored: the grid's accounts, which it
    // could only list whole, are not listed.
    let h = harness();
    h.reconcile(&grid_tenant()).await.unwrap();
    assert_eq!(h.accounts(), 1);
    assert_eq!(h.backends.grid.state.lock().unwrap().searches, 0);
    // A stored password may mean a create was sent: then the account is searched for.
    let h = harness();
    h.reconcile(&grid_tenant_with_a_stored_password(&h))
        .await
        .unwrap();
    assert_eq!(h.accounts(), 1);
    assert_eq!(h.backends.grid.state.lock().unwrap().searches, 1);
}

#[tokio::test]
async fn a_409_from_the_grid_backs_off_without_reporting_a_failure_at_once() {
    let h = harness();
    let t = grid_tenant_with_a_stored_password(&h);
    h.backends.grid.state.lock().unwrap().fail_lookups_with = Some(409);
    assert!(h.reconcile(&t).await.is_err());
    assert_eq!(h.status_writes(), 0);
    assert!(h.kube.notes().is_empty());
}

#[tokio::test]
async fn a_rejected_create_fails_the_tenant_with_one_warning() {
    let h = harness();
    h.backends.grid.state.lock().unwrap().reject_create_with = Some(400);
    let t = grid_tenant();
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::requeue(PERMANENT_RETRY));
    let t = h.written(&t);
    assert_eq!(status(&t).phase, Some(TenantPhase::Failed));
    let ready = condition(&t, conditions::READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "BackendError")
    );
    assert!(
        ready.message.contains("quota too large"),
        "{}",
        ready.message
    );
    let notes = h.kube.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        (notes[0].type_, notes[0].reason),
        (EventType::Warning, "BackendError")
    );
    assert_eq!(h.accounts(), 0);
}

/// Runs one apply of `tenant` and returns its Ready condition's reason and message.
async fn failure(h: &Harness, tenant: S3Tenant) -> (String, String) {
    let action = h.reconcile(&tenant).await.unwrap();
    assert_eq!(action, Action::requeue(PERMANENT_RETRY));
    let t = h.written(&tenant);
    assert_eq!(status(&t).phase, Some(TenantPhase::Failed));
    let ready = condition(&t, conditions::READY);
    assert_eq!(ready.status, "False");
    (ready.reason.clone(), ready.message.clone())
}

#[tokio::test]
async fn spec_and_configuration_errors_fail_the_tenant_with_their_reason() {
    let h = harness();
    let (reason, message) = failure(&h, tenant("default", serde_json::json!({"quota": "0"}))).await;
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("at least one byte"), "{message}");

    let (reason, message) = failure(&h, tenant("nowhere", Value::Null)).await;
    assert_eq!(reason, "ProviderNotConfigured");
    assert!(message.contains("nowhere"), "{message}");

    h.kube.secrets.lock().unwrap().clear();
    let (reason, message) = failure(&h, grid_tenant()).await;
    assert_eq!(reason, "ProviderSecretInvalid");
    assert_eq!(
        message,
        "provider Secret keeper-system/grid-admin does not exist"
    );
    assert_eq!(h.accounts(), 0);
}

#[test]
fn a_refused_root_sign_in_is_reported_as_refused_credentials() {
    let refused = Error::Backend(
        storagegrid::Error::BadCredentials {
            operation: "list_access_keys",
            username: "root".into(),
            message: "m".into(),
        }
        .into(),
    );
    assert_eq!(refused.class(), ErrorClass::Permanent);
    assert_eq!(refused.condition_reason(), "BackendCredentialsRefused");
}

#[tokio::test]
async fn a_provider_secret_the_api_cannot_serve_now_backs_off_and_writes_nothing() {
    // Not a missing Secret (that needs a change, see above): the API answered 503 reading it.
    let h = harness();
    *h.kube.fail_next_read.lock().unwrap() = Some(503);
    let result = h.reconcile(&grid_tenant()).await;
    assert!(
        matches!(&result, Err(runtime::Error::Reconciler(e)) if e.to_string().contains("cannot read provider Secret keeper-system/grid-admin")),
        "{result:?}"
    );
    assert!(transient(result));
    assert_eq!(h.kube.calls(), []);
    assert_eq!(h.accounts(), 0);
    // The next look reads it and goes on.
    h.reconcile(&grid_tenant()).await.unwrap();
    assert_eq!(h.accounts(), 1);
}

#[tokio::test]
async fn an_s3_compatible_tenant_publishes_the_verified_provider_keys() {
    let h = harness();
    let t = tenant("store", Value::Null);
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::requeue(runtime::RESYNC));
    let t = h.written(&t);
    let status = status(&t);
    assert_eq!(status.phase, Some(TenantPhase::Ready));
    assert_eq!(status.account_id, None);
    assert_eq!(
        status.s3_endpoint.as_deref(),
        Some("https://store.example.com")
    );
    assert_eq!(
        h.backends.verified.lock().unwrap()[0].access_key_id,
        "STOREKEY"
    );
    let creds = h.kube.secret_data("ns", "t-s3-credentials").unwrap();
    assert_eq!(
        creds,
        data(&[
            ("accessKeyId", "STOREKEY"),
            ("secretAccessKey", "storesecret"),
            ("endpoint", "https://store.example.com"),
            ("region", "us-east-1"),
        ])
    );
    assert_eq!(h.kube.notes()[0].reason, "Ready");
}

#[tokio::test]
async fn a_tenant_on_an_iam_provider_gets_no_tenant_wide_keys_and_loses_old_ones() {
    let h = harness();
    let t = tenant("aws", Value::Null);
    // Published by an older keeper: the provider's own keys in the tenant's namespace.
    h.kube.put_owned_secret(
        &crate::cluster::Target::of(&t),
        "t-s3-credentials",
        data(&[
            ("accessKeyId", "STOREKEY"),
            ("secretAccessKey", "storesecret"),
        ]),
    );
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::requeue(runtime::RESYNC));
    assert_eq!(h.kube.secret_data("ns", "t-s3-credentials"), None);
    assert!(
        h.kube
            .calls()
            .iter()
            .all(|c| !matches!(c, Call::ApplySecret { .. })),
        "no keys are published"
    );
    let t = h.written(&t);
    assert_eq!(status(&t).phase, Some(TenantPhase::Ready));
    assert_eq!(status(&t).credentials_secret, None);
    let ready = condition(&t, conditions::READY);
    assert_eq!(ready.status, "True");
    assert!(
        ready.message.contains("no tenant-wide keys"),
        "{}",
        ready.message
    );
}

#[tokio::test]
async fn a_provider_without_iam_or_shared_credentials_fails_the_tenant_naming_both_options() {
    let h = harness();
    let (reason, message) = failure(&h, tenant("bare", Value::Null)).await;
    assert_eq!(reason, "ProviderConfigInvalid");
    assert!(
        message.contains("`iam`") && message.contains("sharedCredentials: true"),
        "{message}"
    );
    assert_eq!(h.kube.secret_data("ns", "t-s3-credentials"), None);
}

fn s3_error(class: s3::ErrorClass, code: &str) -> BackendError {
    s3::S3Error {
        operation: "list_buckets",
        class,
        code: code.into(),
        message: "m".into(),
    }
    .into()
}

#[tokio::test]
async fn refused_s3_keys_fail_the_tenant_and_an_unavailable_store_backs_off() {
    let h = harness();
    *h.backends.verify.lock().unwrap() =
        Some(s3_error(s3::ErrorClass::Permanent, "InvalidAccessKeyId"));
    let (reason, message) = failure(&h, tenant("store", Value::Null)).await;
    assert_eq!(reason, "BackendError");
    assert!(message.contains("InvalidAccessKeyId"), "{message}");
    assert!(h.kube.secret_data("ns", "t-s3-credentials").is_none());

    let h = harness();
    *h.backends.verify.lock().unwrap() = Some(s3_error(s3::ErrorClass::Transient, "SlowDown"));
    assert!(transient(h.reconcile(&tenant("store", Value::Null)).await));
    assert_eq!(h.kube.calls(), []);
}

#[tokio::test]
async fn buckets_block_the_deletion_with_one_warning_naming_them() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    h.kube.buckets.lock().unwrap().extend([
        bucket("alpha", "t"),
        bucket("beta", "t"),
        bucket("other", "u"),
    ]);
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::requeue(BLOCKED_RECHECK));
    let blocked = h.written(&t);
    assert_eq!(status(&blocked).phase, Some(TenantPhase::Deleting));
    assert_eq!(status(&blocked).bucket_count, Some(2));
    let condition = condition(&blocked, conditions::DELETION_BLOCKED);
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "BucketsRemain")
    );
    let notes = h.kube.notes();
    assert_eq!(notes.len(), 1);
    assert_eq!(
        (notes[0].type_, notes[0].reason),
        (EventType::Warning, "DeletionBlocked")
    );
    assert!(
        notes[0].message.contains("alpha, beta"),
        "{}",
        notes[0].message
    );
    assert!(notes[0].message.contains("keeper.dev/drain=$(date +%s)"));
    assert!(!h.released());
    assert_eq!(h.accounts(), 1, "the account is intact");

    // Looking again while still blocked is no news.
    h.forget_calls();
    h.reconcile(&blocked).await.unwrap();
    assert!(h.kube.notes().is_empty());
    assert_eq!(h.status_writes(), 0);
}

#[tokio::test]
async fn a_bucket_only_on_the_backend_blocks_the_deletion_too() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    for account in h.backends.grid.state.lock().unwrap().accounts.values_mut() {
        account.buckets = vec!["legacy".into()];
    }
    h.reconcile(&t).await.unwrap();
    let message = &h.kube.notes()[0].message;
    assert!(
        message.contains("legacy (on the backend, not managed by keeper)"),
        "{message}"
    );
}

#[tokio::test]
async fn protection_holds_the_deletion_until_the_spec_changes() {
    let h = harness();
    let t = h
        .ready(tenant(
            "default",
            serde_json::json!({"deletionProtection": true}),
        ))
        .await;
    let action = h.reconcile(&deleting(t.clone())).await.unwrap();
    assert_eq!(action, Action::await_change());
    let blocked = h.written(&t);
    assert_eq!(status(&blocked).phase, Some(TenantPhase::Deleting));
    let condition = condition(&blocked, conditions::DELETION_BLOCKED);
    assert_eq!(condition.reason, "DeletionProtection");
    assert!(condition.message.contains("deletionProtection\":false"));
    assert_eq!(h.kube.notes()[0].reason, "DeletionBlocked");
    assert_eq!(h.accounts(), 1);
}

#[tokio::test]
async fn retain_releases_the_tenant_and_keeps_the_account() {
    let h = harness();
    let t = h
        .ready(tenant(
            "default",
            serde_json::json!({"deletionPolicy": "Retain"}),
        ))
        .await;
    h.reconcile(&deleting(t)).await.unwrap();
    assert!(h.released());
    assert_eq!(h.accounts(), 1);
    // Its credentials stay usable: the Secrets are kept, no longer owned by the S3Tenant.
    for name in ["t-s3-credentials", "t-root-credentials"] {
        let kept = h
            .kube
            .secrets
            .lock()
            .unwrap()
            .get(&("ns".to_string(), name.to_string()))
            .cloned()
            .unwrap_or_else(|| panic!("{name} kept"));
        assert!(
            kept.metadata
                .owner_references
                .unwrap_or_default()
                .is_empty(),
            "{name}"
        );
        assert!(
            kept.metadata.finalizers.unwrap_or_default().is_empty(),
            "{name}: nothing would ever remove a hold left on a released Secret"
        );
    }
    let retained = h.kube.notes();
    let note = retained
        .iter()
        .find(|n| n.reason == "Retained")
        .expect("a Retained event");
    assert!(
        note.message.contains("t-s3-credentials"),
        "{}",
        note.message
    );
    // F4/F11: a copy of each in keeper's namespace, which a namespace deletion does not take.
    let uid = "u1";
    for role in ["s3-credentials", "root-credentials"] {
        let copy = format!("retained-{uid}-{role}");
        let original = h.kube.secret_data("ns", &format!("t-{role}")).unwrap();
        assert_eq!(
            h.kube.secret_data("keeper-system", &copy),
            Some(original),
            "{copy}"
        );
        assert!(
            note.message.contains(&format!("keeper-system/{copy}")),
            "{}",
            note.message
        );
        assert!(
            retained
                .iter()
                .any(|n| n.reason == "RetainedCredentialsCopied" && n.message.contains(&copy)),
            "{retained:?}"
        );
    }
}

#[tokio::test]
async fn a_retained_tenant_waits_for_its_bucket_resources_then_keeps_the_account() {
    let h = harness();
    let t = h
        .ready(tenant(
            "default",
            serde_json::json!({"deletionPolicy": "Retain"}),
        ))
        .await;
    h.kube.buckets.lock().unwrap().push(bucket("alpha", "t"));
    let t = deleting(t);
    h.reconcile(&t).await.unwrap();
    assert!(!h.released(), "its buckets would lose their tenant");
    let blocked = h.written(&t);
    assert_eq!(
        condition(&blocked, conditions::DELETION_BLOCKED).reason,
        "BucketsRemain"
    );
    h.kube.buckets.lock().unwrap().clear();
    h.reconcile(&t).await.unwrap();
    assert!(h.released());
    assert_eq!(h.accounts(), 1, "the account is retained");
}

#[tokio::test]
async fn without_buckets_the_keys_and_the_account_go_then_the_tenant() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert!(h.released());
    assert_eq!(h.accounts(), 0);
    assert_eq!(h.status_writes(), 0);
}

impl Harness {
    /// The finalizers of a stored Secret of the tenant, `None` when the Secret is gone.
    fn secret_finalizers(&self, name: &str) -> Option<Vec<String>> {
        self.kube
            .secrets
            .lock()
            .unwrap()
            .get(&("ns".to_string(), name.to_string()))
            .map(|s| s.metadata.finalizers.clone().unwrap_or_default())
    }
}

const TENANT_SECRETS: [&str; 2] = ["t-s3-credentials", "t-root-credentials"];

#[tokio::test]
async fn the_tenant_secrets_are_held_for_cleanup_while_the_tenant_lives() {
    let h = harness();
    h.ready(grid_tenant()).await;
    h.assert_secrets_held();
    let h = harness();
    h.ready(tenant("store", Value::Null)).await;
    assert_eq!(
        h.secret_finalizers("t-s3-credentials"),
        Some(vec![CLEANUP_HOLD.to_string()])
    );
}

#[tokio::test]
async fn a_root_secret_written_without_the_hold_gets_it_while_the_tenant_lives() {
    let h = harness();
    let t = h.ready(grid_tenant()).await;
    // As an older release wrote it, or as `keeper release-finalizers` left it.
    let unheld = |h: &Harness| {
        h.kube.edit_secret("ns", "t-root-credentials", |root| {
            root.metadata.finalizers = None;
            // A write: the API gives the Secret a new resourceVersion.
            root.metadata.resource_version = Some("unheld".into());
        })
    };
    unheld(&h);
    let password = h.kube.secret_data("ns", "t-root-credentials").unwrap();
    h.reconcile(&t).await.unwrap();
    assert_eq!(
        h.secret_finalizers("t-root-credentials"),
        Some(vec![CLEANUP_HOLD.to_string()])
    );
    assert_eq!(
        h.kube.secret_data("ns", "t-root-credentials").unwrap(),
        password,
        "the data stays as it was"
    );
    // Held already: no write.
    let writes = h.kube.calls().len();
    h.reconcile(&t).await.unwrap();
    assert!(
        !h.kube.calls()[writes..]
            .iter()
            .any(|c| matches!(c, Call::ApplySecret { name, .. } if name == "t-root-credentials")),
        "{:#?}",
        &h.kube.calls()[writes..]
    );
    // Never during cleanup: the cleanup lets go of holds.
    unheld(&h);
    h.kube.buckets.lock().unwrap().push(bucket("alpha", "t"));
    h.reconcile(&deleting(t)).await.unwrap();
    assert_eq!(
        h.secret_finalizers("t-root-credentials"),
        Some(vec![]),
        "not held again"
    );
}

#[tokio::test]
async fn secrets_deleted_while_the_tenant_lives_go_and_come_back_with_new_credentials() {
    let h = harness();
    let t = h.ready(grid_tenant()).await;
    let root = h.kube.secret_data("ns", "t-root-credentials").unwrap();
    let creds = h.kube.secret_data("ns", "t-s3-credentials").unwrap();
    // `kubectl delete secret`: held, they stay Terminating until keeper lets go.
    for name in TENANT_SECRETS {
        h.kube.delete_secret("ns", name);
        assert!(h.secret_finalizers(name).is_some(), "{name} held");
    }
    h.reconcile(&t).await.unwrap();
    for name in TENANT_SECRETS {
        assert_eq!(h.secret_finalizers(name), None, "{name} went once let go");
    }
    let notes = h.kube.notes();
    let [note] = notes.as_slice() else {
        panic!("one event: {notes:?}")
    };
    assert_eq!(note.reason, "SecretDeleted");
    assert!(
        note.message
            .contains("t-root-credentials and t-s3-credentials"),
        "{}",
        note.message
    );

    // Their removal wakes the tenant, which writes them again, held.
    h.reconcile(&t).await.unwrap();
    let new_root = h.kube.secret_data("ns", "t-root-credentials").unwrap();
    let new_creds = h.kube.secret_data("ns", "t-s3-credentials").unwrap();
    assert_ne!(new_root["password"], root["password"]);
    assert_ne!(new_creds["accessKeyId"], creds["accessKeyId"]);
    let grid = h.backends.grid.state.lock().unwrap();
    let account = grid.accounts.values().next().unwrap();
    assert_eq!(account.password, new_root["password"], "set on the grid");
    assert_eq!(
        account.keys.values().collect::<Vec<_>>(),
        [&new_creds["accessKeyId"]],
        "the deleted Secret's key is revoked"
    );
    drop(grid);
    h.assert_secrets_held();
}

#[tokio::test]
async fn secrets_deleted_with_their_namespace_stay_held_while_the_tenant_lives() {
    let h = harness();
    let t = h.ready(grid_tenant()).await;
    // The namespace controller may delete the Secrets before the tenant.
    h.kube.terminating.lock().unwrap().insert("ns".to_string());
    for name in TENANT_SECRETS {
        h.kube.delete_secret("ns", name);
    }
    h.reconcile(&t).await.unwrap();
    h.assert_secrets_held();
    assert!(
        !h.kube.notes().iter().any(|n| n.reason == "SecretDeleted"),
        "{:?}",
        h.kube.notes()
    );
}

#[tokio::test]
async fn a_namespace_deletion_leaves_the_secrets_until_the_buckets_are_gone_and_the_account_deleted()
 {
    let h = harness();
    let t = h.ready(grid_tenant()).await;
    h.kube.buckets.lock().unwrap().push(bucket("alpha", "t"));
    // The namespace controller deletes everything at once, the Secrets first.
    for name in TENANT_SECRETS {
        h.kube.delete_secret("ns", name);
    }
    let t = deleting(t);
    h.reconcile(&t).await.unwrap();
    assert!(!h.released());
    for name in TENANT_SECRETS {
        assert!(
            h.secret_finalizers(name).is_some(),
            "{name} stays while a bucket may need it"
        );
    }
    assert!(
        h.kube
            .secret_data("ns", "t-root-credentials")
            .is_some_and(|d| !d["password"].is_empty()),
        "and is still readable"
    );

    h.kube.buckets.lock().unwrap().clear();
    h.reconcile(&t).await.unwrap();
    assert!(h.released());
    assert_eq!(
        h.accounts(),
        0,
        "the cleanup signed in with the held password"
    );
    for name in TENANT_SECRETS {
        assert_eq!(h.secret_finalizers(name), None, "{name} goes once unheld");
    }
    let calls = h.kube.calls();
    let unheld = calls
        .iter()
        .rposition(|c| matches!(c, Call::UnholdSecret { .. }))
        .expect("unheld");
    let released = calls
        .iter()
        .position(|c| matches!(c, Call::PatchJson { patch, .. } if patch.to_string().contains("finalizers")))
        .expect("released");
    assert!(
        unheld < released,
        "the hold goes before the tenant: {calls:#?}"
    );
}

#[tokio::test]
async fn the_hold_stays_while_the_account_delete_is_unconfirmed() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    h.backends.grid.state.lock().unwrap().delete_answers = Some(409);
    h.reconcile(&t).await.unwrap();
    h.assert_secrets_held();
}

#[tokio::test]
async fn an_s3_compatible_tenant_lets_its_secret_go_once_released() {
    let h = harness();
    let t = deleting(h.ready(tenant("store", Value::Null)).await);
    h.kube.delete_secret("ns", "t-s3-credentials");
    h.kube.buckets.lock().unwrap().push(bucket("alpha", "t"));
    h.reconcile(&t).await.unwrap();
    assert!(h.secret_finalizers("t-s3-credentials").is_some());
    h.kube.buckets.lock().unwrap().clear();
    h.reconcile(&t).await.unwrap();
    assert!(h.released());
    assert_eq!(h.secret_finalizers("t-s3-credentials"), None);
}

#[tokio::test]
async fn a_404_from_the_account_delete_counts_as_gone() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    h.backends.grid.state.lock().unwrap().delete_answers = Some(404);
    h.reconcile(&t).await.unwrap();
    assert!(h.released());
}

#[tokio::test]
async fn a_409_from_the_account_delete_looks_again_soon() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    h.backends.grid.state.lock().unwrap().delete_answers = Some(409);
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::requeue(DELETE_CONFIRM));
    assert!(!h.released());
    assert_eq!(h.accounts(), 1);
}

#[tokio::test]
async fn a_503_during_cleanup_backs_off_and_never_reads_as_gone() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    h.backends.grid.state.lock().unwrap().fail_lookups_with = Some(503);
    assert!(transient(h.reconcile(&t).await));
    assert!(!h.released());
    assert_eq!(h.kube.calls(), []);
}

#[tokio::test]
async fn a_permanent_error_during_cleanup_shows_deleting_not_failed() {
    let h = harness();
    let t = deleting(h.ready(grid_tenant()).await);
    h.kube
        .secrets
        .lock()
        .unwrap()
        .remove(&("keeper-system".to_string(), "grid-admin".to_string()));
    let action = h.reconcile(&t).await.unwrap();
    assert_eq!(action, Action::requeue(PERMANENT_RETRY));
    let t = h.written(&t);
    assert_eq!(status(&t).phase, Some(TenantPhase::Deleting));
    assert_eq!(
        condition(&t, conditions::READY).reason,
        "ProviderSecretInvalid"
    );
    assert!(!h.released());
}

#[tokio::test]
async fn a_tenant_of_an_unknown_provider_without_an_account_is_released() {
    let h = harness();
    h.reconcile(&deleting(tenant("nowhere", Value::Null)))
        .await
        .unwrap();
    assert!(h.released());
}

#[tokio::test]
async fn an_s3_compatible_tenant_is_released_once_its_buckets_are_gone() {
    let h = harness();
    let t = deleting(h.ready(tenant("store", Value::Null)).await);
    h.kube.buckets.lock().unwrap().push(bucket("alpha", "t"));
    assert_eq!(
        h.reconcile(&t).await.unwrap(),
        Action::requeue(BLOCKED_RECHECK)
    );
    assert!(!h.released());
    h.kube.buckets.lock().unwrap().clear();
    h.reconcile(&t).await.unwrap();
    assert!(h.released());
}

#[test]
fn buckets_map_to_their_tenant_in_their_namespace() {
    let bucket = bucket("b", "team-a");
    let target = bucket_to_tenant((*bucket).clone()).unwrap();
    assert_eq!(target, ObjectRef::new("team-a").within("ns"));
}

#[test]
fn a_namespace_change_maps_to_the_tenants_in_it() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::runtime::watcher::Event;
    let (store, mut writer) = kube::runtime::reflector::store();
    let mut elsewhere = tenant("default", Value::Null);
    elsewhere.metadata.namespace = Some("other".into());
    elsewhere.metadata.name = Some("u".into());
    writer.apply_watcher_event(&Event::Apply(grid_tenant()));
    writer.apply_watcher_event(&Event::Apply(elsewhere));
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some("ns".into());
    assert_eq!(
        tenants_in(&store, &namespace),
        vec![ObjectRef::new("t").within("ns")]
    );
}

#[test]
fn gauges_classify_by_phase_and_blocked_condition() {
    let mut t = grid_tenant();
    assert_eq!(t.phase(), "Pending");
    let mut status = S3TenantStatus {
        phase: Some(TenantPhase::Deleting),
        ..Default::default()
    };
    t.status = Some(status.clone());
    assert_eq!(t.phase(), "Deleting");
    assert!(!conditions::is_true(
        &status.conditions,
        conditions::DELETION_BLOCKED
    ));
    conditions::set(
        &mut status.conditions,
        conditions::DELETION_BLOCKED,
        true,
        "BucketsRemain",
        "m",
        None,
    );
    assert!(conditions::is_true(
        &status.conditions,
        conditions::DELETION_BLOCKED
    ));
}

/// A harness whose grid serves only namespaces labelled `keeper.dev/grid=allowed`, and whose
/// S3-compatible store serves only namespace `ops`.
fn restricted_harness() -> Harness {
    let config = config()
        .replace(
            "      region: eu-1\n",
            "      region: eu-1\n      allowedNamespaces:\n        selector: {matchLabels: {keeper.dev/grid: allowed}}\n",
        )
        .replace(
            "      credentialsSecret: {name: store-creds}\n",
            "      credentialsSecret: {name: store-creds}\n      allowedNamespaces: {names: [ops]}\n",
        );
    let h = harness();
    let shared = testing::shared(h.kube.clone(), OperatorConfig::parse(&config).unwrap());
    Harness {
        cx: Arc::new(Context::new(
            shared,
            S3TenantReconciler::new(h.backends.clone()),
        )),
        ..h
    }
}

impl Harness {
    /// Namespace `ns` exists with exactly these labels.
    fn label_namespace(&self, labels: &[(&str, &str)]) {
        self.kube
            .namespaces
            .lock()
            .unwrap()
            .insert("ns".into(), data(labels));
    }
}

#[tokio::test]
async fn a_namespace_the_provider_does_not_serve_fails_the_tenant_before_any_backend_call() {
    let h = restricted_harness();
    h.label_namespace(&[("team", "a")]);
    let (reason, message) = failure(&h, grid_tenant()).await;
    assert_eq!(reason, "NamespaceNotAllowed");
    assert!(
        message.contains(r#"provider "default" may not be used from namespace "ns""#)
            && message.contains("keeper.dev/grid=allowed"),
        "{message}"
    );
    assert!(
        h.backends.grid.state.lock().unwrap().admin.is_none(),
        "keeper never signed in to the grid"
    );
    assert_eq!(h.accounts(), 0);
    let (reason, _) = failure(&h, tenant("store", Value::Null)).await;
    assert_eq!(reason, "NamespaceNotAllowed");
    assert!(
        h.backends.verified.lock().unwrap().is_empty(),
        "the store's keys were never used"
    );
    assert!(h.kube.secret_data("ns", "t-s3-credentials").is_none());
    let notes = h.kube.notes();
    assert!(
        notes
            .iter()
            .all(|n| (n.type_, n.reason) == (EventType::Warning, "NamespaceNotAllowed")),
        "{notes:?}"
    );

    // Labelling the namespace lets the tenant proceed.
    h.label_namespace(&[("keeper.dev/grid", "allowed")]);
    let t = h.ready(grid_tenant()).await;
    assert_eq!(status(&t).phase, Some(TenantPhase::Ready));
    assert_eq!(h.accounts(), 1);
}

#[tokio::test]
async fn a_tenant_whose_namespace_stops_being_allowed_is_left_alone_but_still_cleaned_up() {
    let h = restricted_harness();
    h.label_namespace(&[("keeper.dev/grid", "allowed")]);
    let t = h.ready(grid_tenant()).await;
    let steps = h.backends.grid.steps_taken();
    h.kube.namespaces.lock().unwrap().clear();
    let (reason, _) = failure(&h, t.clone()).await;
    assert_eq!(reason, "NamespaceNotAllowed");
    assert_eq!(
        h.backends.grid.steps_taken(),
        steps,
        "no change on the grid"
    );
    assert_eq!(h.accounts(), 1, "nothing is deleted by the denial");
    // Deleting it still removes the account keeper created.
    h.forget_calls();
    h.reconcile(&deleting(t)).await.unwrap();
    assert_eq!(h.accounts(), 0);
    assert!(h.released());
}

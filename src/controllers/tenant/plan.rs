//! The tenant's decisions as pure functions of the object and what was observed on the backend:
//! [`super::reconcile`] observes, asks here what to do next, and does it.

use kube::ResourceExt;
use sha2::{Digest, Sha256};

use crate::api::names::BUCKET_FINALIZER;
use crate::api::names::default_bucket_name;
use crate::api::{DeletionPolicy, S3Bucket, S3TenantSpec};
use crate::config::{BucketKeys, Provider};

/// Most bucket names a message lists before "and N more".
const MAX_NAMED_BUCKETS: usize = 10;

/// The account settings keeper manages, as desired by the spec or as found on the grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountSettings {
    pub name: String,
    pub quota_bytes: Option<u64>,
    pub allow_platform_services: bool,
}

/// An account as observed on the grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedAccount {
    pub id: String,
    pub settings: AccountSettings,
    /// Whether it has the `management` and `s3` capabilities and keeper's ownership marker.
    pub managed_fields_ok: bool,
    /// Whether its description carries this tenant's ownership marker.
    pub marked: bool,
}

/// The ownership marker keeper writes into the description of the accounts it creates: the
/// tenant object's uid, unique for the life of the object (a recreated tenant gets a new one).
pub fn ownership_marker(uid: &str) -> String {
    format!("keeper.dev/owner-uid={uid}")
}

/// Whether a tenant on `provider` gets tenant-wide keys in `<name>-s3-credentials`: a StorageGRID
/// account's root keys, or the provider's own keys where they are shared anyway
/// (`sharedCredentials: true`). On a provider with an IAM API it gets none: keys reaching every
/// bucket of the tenant would need a policy naming them all (beyond IAM's size limits at 1,000
/// buckets) or a bucket-name prefix per tenant; each bucket has keys of its own instead.
pub fn tenant_wide_keys(provider: &Provider) -> bool {
    match provider {
        Provider::StorageGrid(_) => true,
        Provider::S3Compatible(p) => p.bucket_keys() == BucketKeys::Shared,
    }
}

/// The Ready message of a tenant without tenant-wide keys.
pub fn no_tenant_keys_message(provider: &str) -> String {
    format!(
        "ready on provider {provider:?}, which gives each bucket keys of its own (an IAM user per bucket, in the S3Bucket's <name>-credentials Secret); the tenant has no tenant-wide keys"
    )
}

/// What to do about the account on the way to Ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccountStep {
    /// No root password is stored yet: generate and store it first, so that a crash right after
    /// the account is created cannot lose it.
    StorePassword,
    /// No account exists (none under the recorded id, none with our marker): create it, and
    /// record it unless another writer recorded one first (see [`account_to_record`]).
    Create,
    /// The account exists but its root password was lost (the Secret was deleted): set a new one.
    ResetPassword { id: String },
    /// The account exists and differs from the spec.
    Update { id: String },
    /// The account exists as desired.
    InSync { id: String },
}

/// Which of the accounts carrying the tenant's marker to record when none is recorded: the one
/// with the lowest id, so that writers racing each other (two keepers without leader election)
/// pick the same. The record is written only while none exists and only if the tenant did not
/// change since it was read, so one writer wins.
pub fn account_to_record(marked: &[String]) -> Option<&String> {
    marked.iter().min()
}

/// The marked accounts to delete once `recorded` is the tenant's account: every other one this
/// writer knows of. They were left by a crash between create and record, or created by a writer
/// whose record can no longer succeed (a record is kept while its account exists), and nothing
/// was put in them (buckets go only into the recorded account).
pub fn stray_accounts(known: &[String], recorded: &str) -> Vec<String> {
    known.iter().filter(|id| *id != recorded).cloned().collect()
}

pub fn account_step(
    password_stored: bool,
    account: Option<&ObservedAccount>,
    desired: &AccountSettings,
) -> AccountStep {
    match (account, password_stored) {
        (None, false) => AccountStep::StorePassword,
        (None, true) => AccountStep::Create,
        (Some(a), false) => AccountStep::ResetPassword { id: a.id.clone() },
        (Some(a), true) if a.settings != *desired || !a.managed_fields_ok => {
            AccountStep::Update { id: a.id.clone() }
        }
        (Some(a), true) => AccountStep::InSync { id: a.id.clone() },
    }
}

/// The desired account settings from the spec; the quota must be a valid, non-zero quantity
/// (StorageGRID's minimum is one byte; no quota means unlimited).
pub fn desired_settings(tenant_name: &str, spec: &S3TenantSpec) -> Result<AccountSettings, String> {
    let quota_bytes = spec
        .quota
        .as_deref()
        .map(crate::api::names::parse_quantity_bytes)
        .transpose()
        .map_err(|e| format!("quota: {e}"))?;
    if quota_bytes == Some(0) {
        return Err("quota: must be at least one byte; leave it out for no quota".to_string());
    }
    Ok(AccountSettings {
        name: account_name(tenant_name, spec.display_name.as_deref())?,
        quota_bytes,
        allow_platform_services: spec.allow_platform_services,
    })
}

/// The longest account name StorageGRID accepts.
pub const MAX_ACCOUNT_NAME: usize = 64;

/// The account's name on the grid: `displayName`, which must fit (a clear error otherwise), or
/// the resource name. A resource name may be 253 characters; a longer one than the grid takes is
/// cut and followed by a hash of the whole name, so two long names never share an account name
/// (names are display only: keeper finds its account by id and ownership marker, never by name).
pub fn account_name(tenant_name: &str, display_name: Option<&str>) -> Result<String, String> {
    const HASH_LEN: usize = 8;
    if let Some(display) = display_name {
        let length = display.chars().count();
        if length > MAX_ACCOUNT_NAME {
            return Err(format!(
                "displayName: StorageGRID account names have at most {MAX_ACCOUNT_NAME} \
                 characters, this one has {length}"
            ));
        }
        return Ok(display.to_string());
    }
    if tenant_name.len() <= MAX_ACCOUNT_NAME {
        return Ok(tenant_name.to_string());
    }
    let digest = Sha256::digest(tenant_name.as_bytes());
    let hash: String = digest
        .iter()
        .take(HASH_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    // Resource names are ASCII (DNS subdomain), so byte and character lengths agree.
    let mut base = tenant_name[..MAX_ACCOUNT_NAME - HASH_LEN - 1].to_string();
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    Ok(format!("{base}-{hash}"))
}

/// What to do about the tenant's S3 keys so that exactly one key set exists and is published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyStep {
    /// The published key exists and is the only one.
    Keep,
    /// The published key exists; the others are leftovers of an interrupted issue (their secret
    /// was never stored, so nobody can use them): revoke them.
    Revoke(Vec<String>),
    /// No usable key is published: issue a new one, publish it, then revoke the others.
    Issue { revoke: Vec<String> },
}

pub fn key_step(published: Option<&str>, on_backend: &[String]) -> KeyStep {
    match published {
        Some(key) if on_backend.iter().any(|k| k == key) => {
            let others: Vec<String> = on_backend.iter().filter(|k| *k != key).cloned().collect();
            if others.is_empty() {
                KeyStep::Keep
            } else {
                KeyStep::Revoke(others)
            }
        }
        _ => KeyStep::Issue {
            revoke: on_backend.to_vec(),
        },
    }
}

/// The buckets a tenant still holds: S3Bucket resources referencing it, and buckets on the
/// backend that no S3Bucket resource stands for (created outside keeper).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemainingBuckets {
    /// Names of S3Bucket resources in the tenant's namespace.
    pub resources: Vec<String>,
    /// Backend bucket names without a resource.
    pub unmanaged: Vec<String>,
}

impl RemainingBuckets {
    /// `backend` bucket names that are not the bucket of one of the resources are unmanaged.
    pub fn new(
        mut resources: Vec<(String, String)>,
        backend: impl IntoIterator<Item = String>,
    ) -> Self {
        resources.sort();
        let mut unmanaged: Vec<String> = backend
            .into_iter()
            .filter(|b| !resources.iter().any(|(_, bucket)| bucket == b))
            .collect();
        unmanaged.sort();
        unmanaged.dedup();
        RemainingBuckets {
            resources: resources.into_iter().map(|(name, _)| name).collect(),
            unmanaged,
        }
    }

    pub fn count(&self) -> usize {
        self.resources.len() + self.unmanaged.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }
}

/// Whether `bucket` still holds its tenant: every S3Bucket does until keeper has released it. A
/// bucket being deleted whose keeper finalizer is gone has been cleaned up (its backend bucket
/// deleted, or retained by policy) and waits only on another controller's finalizer, which is
/// none of the tenant's business: counting it would hold the tenant forever.
fn holds_tenant(bucket: &S3Bucket, tenant: &str) -> bool {
    bucket.spec.tenant_ref.name == tenant
        && (bucket.metadata.deletion_timestamp.is_none()
            || bucket.finalizers().iter().any(|f| f == BUCKET_FINALIZER))
}

/// What a tenant reads of one of its S3Buckets (which tenant, whether it still holds it, its
/// backend name), hashed: a bucket change that leaves this alone (its status, a drain's
/// progress) does not re-reconcile the tenant. See [`crate::runtime::triggers`].
pub fn bucket_trigger_key(bucket: &S3Bucket) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        &bucket.spec.tenant_ref.name,
        bucket.metadata.deletion_timestamp.is_some(),
        bucket.finalizers().iter().any(|f| f == BUCKET_FINALIZER),
        &bucket.spec.bucket_name,
        bucket.status.as_ref().and_then(|s| s.bucket_name.as_ref()),
    )
        .hash(&mut hasher);
    hasher.finish()
}

/// The S3Bucket resources among `buckets` (of `namespace`) that hold `tenant`, sorted: (resource
/// name, bucket name on the backend). The controller (from its cache) and the admission webhook
/// (from the API) both ask this.
pub fn tenant_buckets<'a>(
    buckets: impl IntoIterator<Item = &'a S3Bucket>,
    namespace: &str,
    tenant: &str,
) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = buckets
        .into_iter()
        .filter(|b| holds_tenant(b, tenant))
        .map(|b| {
            let name = b.name_any();
            let bucket = b
                .status
                .as_ref()
                .and_then(|s| s.bucket_name.clone())
                .or_else(|| b.spec.bucket_name.clone())
                .unwrap_or_else(|| default_bucket_name(namespace, &name));
            (name, bucket)
        })
        .collect();
    found.sort();
    found
}

/// What the spec alone decides about a deletion, before the backend is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionGate {
    /// `deletionProtection` is on: hold the tenant until it is turned off.
    Protected,
    /// Policy `Retain`: once no S3Bucket resource references the tenant, release the resource
    /// and leave the account, without asking the backend (which may be gone for good).
    Retain,
    /// Look at the backend.
    Proceed,
}

pub fn deletion_gate(spec: &S3TenantSpec) -> DeletionGate {
    if spec.deletion_protection {
        DeletionGate::Protected
    } else if spec.deletion_policy == DeletionPolicy::Retain {
        DeletionGate::Retain
    } else {
        DeletionGate::Proceed
    }
}

/// What deleting the tenant does now, given what the backend holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletionStep {
    /// Nothing is left: release the resource.
    Release,
    /// Buckets remain: hold the tenant and say what to do.
    Blocked(RemainingBuckets),
    /// Delete the keys and the account.
    DeleteAccount { id: String },
}

pub fn deletion_step(account_id: Option<&str>, buckets: RemainingBuckets) -> DeletionStep {
    if !buckets.is_empty() {
        return DeletionStep::Blocked(buckets);
    }
    match account_id {
        Some(id) => DeletionStep::DeleteAccount { id: id.to_string() },
        None => DeletionStep::Release,
    }
}

/// The guidance given when a tenant cannot be deleted because buckets remain; the finalizer's
/// condition and event and the admission webhook's warning all use it.
pub fn buckets_remain_message(tenant: &str, buckets: &RemainingBuckets) -> String {
    let mut names: Vec<String> = buckets.resources.clone();
    names.extend(
        buckets
            .unmanaged
            .iter()
            .map(|b| format!("{b} (on the backend, not managed by keeper)")),
    );
    let count = names.len();
    let mut listed = names
        .iter()
        .take(MAX_NAMED_BUCKETS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if count > MAX_NAMED_BUCKETS {
        listed.push_str(&format!(" and {} more", count - MAX_NAMED_BUCKETS));
    }
    let mut message = format!(
        "S3Tenant {tenant} still holds {count} bucket(s): {listed}. {BUCKET_REMOVAL_GUIDANCE}"
    );
    if !buckets.unmanaged.is_empty() {
        message
            .push_str(" Buckets not managed by keeper must be emptied and deleted on the backend.");
    }
    message.push_str(" The tenant is deleted as soon as no bucket remains.");
    message
}

/// How to remove a tenant's buckets, shared by the finalizer's condition and the webhook.
pub const BUCKET_REMOVAL_GUIDANCE: &str = "keeper does not delete buckets for you: drain each one \
     with `kubectl annotate --overwrite s3bucket <name> keeper.dev/drain=$(date +%s)`, then delete \
     it with `kubectl delete s3bucket <name>`.";

/// The guidance given while `deletionProtection` holds a tenant.
pub fn deletion_protection_message(tenant: &str, namespace: &str) -> String {
    format!(
        "S3Tenant {tenant} has deletionProtection enabled. To allow its deletion, run \
         `kubectl patch s3tenant {tenant} -n {namespace} --type merge -p '{{\"spec\":{{\"deletionProtection\":false}}}}'`."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
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
            tenant_buckets(&buckets, "ns", "t"),
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
            b.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
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
            tenant_buckets(&deleting, "ns", "t"),
            [("media".to_string(), default_bucket_name("ns", "media"))]
        );
        deleting[0].metadata.finalizers = None;
        assert!(tenant_buckets(&deleting, "ns", "t").is_empty());
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
}

//! The tenant's decisions as pure functions of the object and what was observed on the backend:
//! [`super::reconcile`] observes, asks here what to do next, and does it.

use kube::ResourceExt;
use sha2::{Digest, Sha256};

use crate::api::names::BUCKET_FINALIZER;
use crate::api::{DeletionPolicy, S3Bucket, S3TenantSpec};
use crate::backends::identity;
use crate::cluster::triggers;
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

/// Whether keeper may `act` on the account recorded in status, which the grid now says does not
/// exist (create it again, or count it as deleted): only on the grid it was recorded on (audit 2,
/// N5: a 404 from another grid is not "deleted outside keeper"), on one a person confirmed, or
/// when no grid was recorded (an account an older keeper made, not seen since: as before). `Ok`
/// carries the identity to record with a new account; `Err` the refusal.
pub fn account_on_missing(
    act: identity::OnMissing,
    recorded_id: &str,
    recorded: Option<&str>,
    live: &str,
    confirmed: Option<&str>,
    (namespace, name): (&str, &str),
) -> Result<String, String> {
    identity::on_missing(
        act,
        &format!("StorageGRID account {recorded_id}"),
        recorded,
        live,
        confirmed,
        ("s3tenant", namespace, name),
    )
    .map(|()| live.to_string())
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
/// progress) does not re-reconcile the tenant. See [`crate::cluster::triggers`].
pub fn bucket_trigger_key(bucket: &S3Bucket) -> u64 {
    triggers::key_of((
        &bucket.spec.tenant_ref.name,
        bucket.metadata.deletion_timestamp.is_some(),
        bucket.finalizers().iter().any(|f| f == BUCKET_FINALIZER),
        &bucket.spec.bucket_name,
        bucket.status.as_ref().and_then(|s| s.bucket_name.as_ref()),
    ))
}

/// The S3Bucket resources among `buckets` (of the tenant's namespace) that hold `tenant`, sorted:
/// (resource name, bucket name on the backend). The controller (from its cache) and the admission webhook
/// (from the API) both ask this.
pub fn tenant_buckets<'a>(
    buckets: impl IntoIterator<Item = &'a S3Bucket>,
    tenant: &str,
) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = buckets
        .into_iter()
        .filter(|b| holds_tenant(b, tenant))
        .map(|b| (b.name_any(), b.backend_name()))
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

/// The `Retained` event: the account is kept, and each of its credentials Secrets (`kept`: the
/// Secret and its copy in keeper's namespace `operator_namespace`) stays usable, the Secret in
/// the tenant's namespace released and a copy where deleting that namespace does not reach.
/// `account`: " (account ID)" or empty.
pub fn retained_message(
    account: &str,
    kept: &[(String, String)],
    operator_namespace: &str,
) -> String {
    if kept.is_empty() {
        return format!("deletionPolicy Retain: the tenant's account{account} is kept");
    }
    let secrets: Vec<&str> = kept.iter().map(|(secret, _)| secret.as_str()).collect();
    let copies: Vec<String> = kept
        .iter()
        .map(|(_, copy)| format!("{operator_namespace}/{copy}"))
        .collect();
    format!(
        "deletionPolicy Retain: the tenant's account{account} is kept, and its credentials stay usable in Secret(s) {} (no longer owned by the S3Tenant) and in keeper's copies {}, which deleting this namespace does not take",
        secrets.join(", "),
        copies.join(", ")
    )
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

/// The `SecretDeleted` event: which of the tenant's Secrets keeper lets go, and what it writes
/// instead (on a StorageGRID provider new credentials, on an S3-compatible one the provider's
/// keys again).
pub fn secrets_let_go_message(secrets: &[String], grid: bool) -> String {
    let instead = if grid {
        "a deleted root password is replaced by a new one set on the grid, a deleted S3 key by a \
         new key (the old key is revoked)"
    } else {
        "the provider's keys are written again"
    };
    format!(
        "Secret {} was deleted while the tenant lives: keeper lets it go and writes it again; {instead}",
        secrets.join(" and ")
    )
}

pub mod account_check;
#[cfg(test)]
mod tests;

//! The crash-safe sequences that bring a StorageGRID tenant to Ready and take it away, over an
//! [`AccountBackend`] and a [`TenantStore`] (Kubernetes in production, memory in tests).
//!
//! Every step persists what the next one needs before doing anything that cannot be repeated:
//! the root password before the account exists, the account id right after the create, the
//! key's secret right after it is issued. A crash between any two steps therefore leaves state
//! from which the next reconcile converges to exactly one account and one published key.

use std::future::Future;

use rand::distr::{Alphanumeric, SampleString};

use crate::backends::Keys;
use crate::backends::identity::{self, OnMissing};
use crate::controllers::tenant::backend::{AccountBackend, BackendError, is_bad_credentials};
use crate::controllers::tenant::plan::{
    self, AccountSettings, AccountStep, KeyStep, ObservedAccount,
};
use crate::error::ErrorClass;

/// Length of generated root passwords: the longest StorageGRID accepts (32), ~190 bits.
pub const ROOT_PASSWORD_LENGTH: usize = 32;

/// A fresh root password from the thread-local CSPRNG (ChaCha, seeded from the OS).
pub fn generate_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), ROOT_PASSWORD_LENGTH)
}

/// Where a tenant's own state lives between reconciles.
pub trait TenantStore: Send + Sync {
    type Error: From<BackendError> + Send;
    /// The stored root password, if any.
    fn root_password(&self) -> impl Future<Output = Result<Option<String>, Self::Error>> + Send;
    fn store_root_password(
        &self,
        password: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// The account id recorded in status.
    fn recorded_account(&self) -> Option<String>;
    /// Records the account id in status now (a checkpoint: the id must survive a crash), only if
    /// the tenant did not change since it was read: two writers must not both record an account.
    fn record_account(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Recorded, Self::Error>> + Send;
    /// The grid recorded in status (`status.backendIdentity`).
    fn recorded_identity(&self) -> Option<String>;
    /// Keeps `identity` as the tenant's grid: written with the next record, else with the status
    /// the reconcile ends with.
    fn keep_identity(&self, identity: &str);
    /// The grid a person confirmed with `keeper.dev/confirm-backend-identity`, if any.
    fn confirmed_identity(&self) -> Option<String>;
    /// The tenant's namespace and name, for messages.
    fn resource(&self) -> (String, String);
    /// The credentials currently published, if the Secret holds a complete set.
    fn published(&self) -> impl Future<Output = Result<Option<Keys>, Self::Error>> + Send;
    fn publish(&self, credentials: &Keys) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// What became of recording an account id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    Yes,
    /// The tenant changed since it was read (another writer): nothing was recorded. The account
    /// recorded now, read again, if any: the one to go on with, and
    /// [`TenantStore::recorded_account`] names it from then on.
    Lost(Option<String>),
}

/// The tenant's account on the grid: by the id in status, else by the ownership marker
/// (a create whose answer was lost). `None` means the backend has no such account; a recorded
/// account counts as gone only on the grid it was recorded on, or one a person confirmed (N5).
///
/// F10: the id in status is trusted only when the account carries this tenant's marker. A
/// status edited to name another account must not lead keeper to update, reset the password
/// of, or delete someone else's account: that is a permanent error, and no call is made on it.
pub async fn locate_account<B: AccountBackend, S: TenantStore>(
    backend: &B,
    store: &S,
    marker: &str,
) -> Result<Option<ObservedAccount>, S::Error> {
    if let Some(account) = recorded_account(backend, store, marker).await? {
        return Ok(Some(account));
    }
    // A recorded account another grid does not have is not gone (audit 2, N5).
    if let Some(id) = store.recorded_account() {
        identity_gate(backend, store, &id, OnMissing::CountAsGone).await?;
    }
    let mut marked = backend.find_accounts(marker).await?;
    if marked.len() > 1 {
        return Err(BackendError::new(
            "storagegrid",
            "find_accounts",
            ErrorClass::Conflict,
            "AccountsMarkedTwice",
            format!(
                "{} accounts carry the ownership marker {marker:?} and none is recorded: {}",
                marked.len(),
                ids(&marked).join(", ")
            ),
        )
        .into());
    }
    Ok(marked.pop())
}

/// The account recorded in status, if it exists (see [`locate_account`] for the marker check).
async fn recorded_account<B: AccountBackend, S: TenantStore>(
    backend: &B,
    store: &S,
    marker: &str,
) -> Result<Option<ObservedAccount>, S::Error> {
    let Some(id) = store.recorded_account() else {
        return Ok(None);
    };
    match backend.get_account(&id, marker).await? {
        Some(account) if !account.marked => Err(BackendError::new(
            "storagegrid",
            "get_account",
            ErrorClass::Permanent,
            "AccountNotOwned",
            format!(
                "status.accountId names StorageGRID account {id}, whose description lacks this tenant's ownership marker {marker:?}: keeper makes no call on an account it cannot prove is this tenant's (correct status.accountId, or mark the account if it really is this tenant's)"
            ),
        )
        .into()),
        Some(account) => Ok(Some(account)),
        None => {
            tracing::warn!(account = %id, "the recorded account no longer exists (404)");
            Ok(None)
        }
    }
}

fn ids(accounts: &[ObservedAccount]) -> Vec<String> {
    accounts.iter().map(|a| a.id.clone()).collect()
}

/// Records `candidate` unless another writer recorded an account first, then deletes the marked
/// accounts in `known` that are not the one recorded (see [`plan::stray_accounts`]). Returns the
/// account recorded.
async fn record<B: AccountBackend, S: TenantStore>(
    backend: &B,
    store: &S,
    marker: &str,
    candidate: &str,
    known: &[String],
) -> Result<ObservedAccount, S::Error> {
    let recorded = match store.record_account(candidate).await? {
        Recorded::Yes => candidate.to_string(),
        Recorded::Lost(Some(recorded)) => recorded,
        Recorded::Lost(None) => {
            return Err(BackendError::new(
                "storagegrid",
                "record_account",
                ErrorClass::Conflict,
                "TenantChanged",
                format!(
                    "the tenant changed while account {candidate} was being recorded; looking again"
                ),
            )
            .into());
        }
    };
    for stray in plan::stray_accounts(known, &recorded) {
        tracing::info!(account = %stray, recorded = %recorded, "deleting an account another writer's record made useless");
        match backend.delete_account(&stray).await {
            Ok(()) => {}
            Err(e) if e.is_gone() => {}
            Err(e) => return Err(e.into()),
        }
    }
    match recorded_account(backend, store, marker).await? {
        Some(account) => Ok(account),
        None => Err(BackendError::new(
            "storagegrid",
            "get_account",
            ErrorClass::Conflict,
            "RecordedAccountGone",
            format!("the recorded account {recorded} does not exist; looking again"),
        )
        .into()),
    }
}

/// Brings the account and its key in line with `desired`; returns the account id.
pub async fn ensure<B: AccountBackend, S: TenantStore>(
    backend: &B,
    store: &S,
    marker: &str,
    desired: &AccountSettings,
) -> Result<String, S::Error> {
    let mut password = store.root_password().await?;
    let mut account = match recorded_account(backend, store, marker).await? {
        Some(account) => {
            // Its grid is this one: recorded on first sight (an account an older keeper made),
            // replaced only when a person confirmed it.
            let live = backend.identity().await?;
            store.keep_identity(&identity::on_sight(
                store.recorded_identity().as_deref(),
                &live,
                store.confirmed_identity().as_deref(),
            ));
            Some(account)
        }
        None => {
            // The recorded account is not on the grid keeper reaches: created again only on
            // the grid it was recorded on (or one a person confirmed), never on another.
            if let Some(id) = store.recorded_account() {
                let live = identity_gate(backend, store, &id, OnMissing::Recreate).await?;
                store.keep_identity(&live);
            }
            match password {
                // No password stored: no create was ever sent (the password is stored before
                // every create, and a second writer that stored it first makes this one's store
                // fail and look again), so there is nothing to search for; the grid has no
                // filter, and listing every account for every new tenant costs in proportion to
                // the whole grid.
                None => None,
                // One carrying the marker was left by a lost create answer, a crash before the
                // record, or another writer; the same one is recorded by every writer.
                Some(_) => marked_account(backend, store, marker).await?,
            }
        }
    };
    let id = loop {
        match plan::account_step(password.is_some(), account.as_ref(), desired) {
            AccountStep::StorePassword => {
                let fresh = generate_password();
                store.store_root_password(&fresh).await?;
                password = Some(fresh);
            }
            AccountStep::Create => {
                // Recorded with the account: the grid it was created on.
                if store.recorded_identity().is_none() {
                    store.keep_identity(&backend.identity().await?);
                }
                let root = password.as_deref().unwrap_or_default();
                let id = backend.create_account(desired, marker, root).await?;
                tracing::info!(account = %id, "created StorageGRID account");
                account =
                    Some(record(backend, store, marker, &id, std::slice::from_ref(&id)).await?);
            }
            AccountStep::ResetPassword { id } => {
                let fresh = generate_password();
                store.store_root_password(&fresh).await?;
                backend.set_root_password(&id, &fresh).await?;
                tracing::info!(account = %id, "set a new root password (none was stored)");
                password = Some(fresh);
            }
            AccountStep::Update { id } => {
                backend.update_account(&id, desired, marker).await?;
                tracing::info!(account = %id, "updated StorageGRID account to the spec");
                break id;
            }
            AccountStep::InSync { id } => break id,
        }
    };
    let root = password.unwrap_or_default();
    ensure_key(backend, store, &id, &root).await?;
    Ok(id)
}

/// The account carrying the tenant's marker, recorded, when none is recorded (see
/// [`plan::account_to_record`]).
async fn marked_account<B: AccountBackend, S: TenantStore>(
    backend: &B,
    store: &S,
    marker: &str,
) -> Result<Option<ObservedAccount>, S::Error> {
    let marked = ids(&backend.find_accounts(marker).await?);
    Ok(match plan::account_to_record(&marked) {
        Some(candidate) => Some(record(backend, store, marker, candidate, &marked).await?),
        None => None,
    })
}

/// Refuses, with a `BackendIdentityChanged` error, to `act` on the recorded account `id`, which
/// the grid keeper reaches does not have, when that grid is not the one recorded (see
/// [`plan::account_on_missing`]); returns the grid to record otherwise.
async fn identity_gate<B: AccountBackend, S: TenantStore>(
    backend: &B,
    store: &S,
    id: &str,
    act: OnMissing,
) -> Result<String, S::Error> {
    let live = backend.identity().await?;
    let (namespace, name) = store.resource();
    plan::account_on_missing(
        act,
        id,
        store.recorded_identity().as_deref(),
        &live,
        store.confirmed_identity().as_deref(),
        (&namespace, &name),
    )
    .map_err(|message| identity::changed_error("storagegrid", "get_account", message).into())
}

/// Calls `call` with the root password; when the tenant sign-in is refused (the stored password
/// is not the account's, say after a crash between storing and setting it), sets the stored
/// password through the grid API once and tries again.
async fn with_root<B, T, F, Fut>(
    backend: &B,
    id: &str,
    root: &str,
    call: F,
) -> Result<T, BackendError>
where
    B: AccountBackend,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, BackendError>>,
{
    match call().await {
        Err(e) if is_bad_credentials(&e) => {
            tracing::warn!(account = %id, "tenant root sign-in refused; setting the stored root password");
            backend.set_root_password(id, root).await?;
            call().await
        }
        other => other,
    }
}

/// Exactly one key for the root user, published.
async fn ensure_key<B: AccountBackend, S: TenantStore>(
    backend: &B,
    store: &S,
    id: &str,
    root: &str,
) -> Result<(), S::Error> {
    let published = store.published().await?;
    let published_id = match &published {
        Some(credentials) => {
            with_root(backend, id, root, || {
                backend.key_id(id, root, &credentials.access_key_id)
            })
            .await?
        }
        None => None,
    };
    let keys = with_root(backend, id, root, || backend.list_keys(id, root)).await?;
    match plan::key_step(published_id.as_deref(), &keys) {
        KeyStep::Keep => {
            // Re-publishing writes only when something (endpoint, region) changed.
            if let Some(credentials) = &published {
                store.publish(credentials).await?;
            }
        }
        KeyStep::Revoke(stale) => {
            for key in &stale {
                backend.revoke_key(id, root, key).await?;
            }
            if let Some(credentials) = &published {
                store.publish(credentials).await?;
            }
        }
        KeyStep::Issue { revoke } => {
            let issued = backend.issue_key(id, root).await?;
            store.publish(&issued.credentials).await?;
            tracing::info!(account = %id, key = %issued.credentials.access_key_id, "issued and published an S3 key");
            for key in &revoke {
                backend.revoke_key(id, root, key).await?;
            }
        }
    }
    Ok(())
}

/// The account's buckets, read as the tenant's root user when its password is known (see
/// [`AccountBackend::list_buckets`]).
pub async fn account_buckets<B: AccountBackend>(
    backend: &B,
    id: &str,
    root: Option<&str>,
) -> Result<Vec<String>, BackendError> {
    match root {
        Some(root) => with_root(backend, id, root, || backend.list_buckets(id, Some(root))).await,
        None => backend.list_buckets(id, None).await,
    }
}

/// Revokes the root user's keys (best done before the account goes, so no key outlives it even
/// if the grid deletes accounts lazily). Without a stored password there is no sign-in; the
/// keys then go with the account.
pub async fn revoke_keys<B: AccountBackend>(
    backend: &B,
    id: &str,
    root: Option<&str>,
) -> Result<(), BackendError> {
    let Some(root) = root else {
        return Ok(());
    };
    let keys = with_root(backend, id, root, || backend.list_keys(id, root)).await?;
    for key in &keys {
        backend.revoke_key(id, root, key).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

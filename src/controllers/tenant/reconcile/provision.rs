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
/// (a create whose answer was lost). `None` means the backend has no such account.
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
        Some(account) => Some(account),
        // No password stored: no create was ever sent (the password is stored before every
        // create, and a second writer that stored it first makes this one's store fail and
        // look again), so there is nothing to search for; the grid has no filter, and listing
        // every account for every new tenant costs in proportion to the whole grid.
        None if password.is_none() => None,
        // None recorded: one carrying the marker was left by a lost create answer, a crash
        // before the record, or another writer; the same one is recorded by every writer.
        None => {
            let marked = ids(&backend.find_accounts(marker).await?);
            match plan::account_to_record(&marked) {
                Some(candidate) => Some(record(backend, store, marker, candidate, &marked).await?),
                None => None,
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
mod tests {

    use super::*;
    use crate::controllers::tenant::tests::fake::{Grid, Store};

    const MARKER: &str = "keeper.dev/owner-uid=u1";

    fn desired() -> AccountSettings {
        AccountSettings {
            name: "team-a".into(),
            quota_bytes: Some(1 << 30),
            allow_platform_services: false,
        }
    }

    fn store(grid: &Grid) -> Store<'_> {
        Store::new(grid)
    }

    /// Exactly one account; it has exactly one key, and that key is the published one.
    fn assert_converged(grid: &Grid, store: &Store<'_>) {
        let grid_state = grid.state.lock().unwrap();
        let state = store.state.lock().unwrap();
        assert_eq!(grid_state.accounts.len(), 1, "{grid_state:?}");
        let (id, account) = grid_state.accounts.iter().next().unwrap();
        assert_eq!(state.account.as_deref(), Some(id.as_str()));
        assert_eq!(state.password.as_deref(), Some(account.password.as_str()));
        assert_eq!(account.keys.len(), 1, "{account:?}");
        let published = state.published.as_ref().unwrap();
        assert_eq!(
            account.keys.values().next().unwrap(),
            &published.access_key_id
        );
        assert_eq!(account.settings, desired());
    }

    #[tokio::test]
    async fn a_fresh_tenant_gets_one_account_and_one_published_key() {
        let grid = Grid::default();
        let store = store(&grid);
        let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        assert_converged(&grid, &store);
        let password = store.state.lock().unwrap().password.clone().unwrap();
        assert_eq!(password.len(), ROOT_PASSWORD_LENGTH);
        // A second run changes nothing.
        let before = grid.steps_taken();
        assert_eq!(ensure(&grid, &store, MARKER, &desired()).await.unwrap(), id);
        assert_eq!(grid.steps_taken(), before);
    }

    #[tokio::test]
    async fn a_crash_between_any_two_steps_converges_to_one_account_and_one_key() {
        // Count the steps of an uninterrupted run, then crash at each of them in turn.
        let reference = Grid::default();
        ensure(&reference, &store(&reference), MARKER, &desired())
            .await
            .unwrap();
        let steps = reference.steps_taken();
        assert!(
            steps >= 4,
            "password, create, record, issue, publish: {steps}"
        );
        for crash in 1..=steps {
            let grid = Grid::default();
            let store = store(&grid);
            grid.crash_at(Some(crash));
            assert!(
                ensure(&grid, &store, MARKER, &desired()).await.is_err(),
                "step {crash} crashes"
            );
            grid.crash_at(None);
            ensure(&grid, &store, MARKER, &desired()).await.unwrap();
            assert_converged(&grid, &store);
        }
    }

    #[tokio::test]
    async fn two_crashes_in_a_row_still_converge() {
        for first in 1..=6 {
            for second in 1..=6 {
                let grid = Grid::default();
                let store = store(&grid);
                grid.crash_at(Some(first));
                let _ = ensure(&grid, &store, MARKER, &desired()).await;
                grid.crash_at(Some(second));
                let _ = ensure(&grid, &store, MARKER, &desired()).await;
                grid.crash_at(None);
                ensure(&grid, &store, MARKER, &desired()).await.unwrap();
                assert_converged(&grid, &store);
            }
        }
    }

    #[tokio::test]
    async fn a_lost_create_answer_is_found_again_by_the_marker_not_recreated() {
        let grid = Grid::default();
        let store = store(&grid);
        store.state.lock().unwrap().password = Some("p".repeat(32));
        grid.create_account(&desired(), MARKER, &"p".repeat(32))
            .await
            .unwrap();
        // Another tenant's account with the same name is not ours.
        grid.create_account(&desired(), "keeper.dev/owner-uid=other", "x")
            .await
            .unwrap();
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        let state = grid.state.lock().unwrap();
        assert_eq!(state.accounts.len(), 2);
        assert_eq!(
            store.recorded_account().as_deref(),
            Some("00000000000000000001")
        );
    }

    #[tokio::test]
    async fn two_writers_creating_the_account_at_once_leave_one_recorded_account() {
        // Both found no account; B created one and recorded it while A was about to create its
        // own. A's record is refused (the tenant changed since A read it): A deletes its account
        // and goes on with B's.
        let grid = Grid::default();
        let a = store(&grid);
        a.state.lock().unwrap().password = Some("p".repeat(32));
        let b = a.beside();
        let desired = desired();
        let listed = grid.pauses.after("find_accounts");
        let (by_a, by_b) = tokio::join!(ensure(&grid, &a, MARKER, &desired), async {
            listed.reached().await;
            let by_b = ensure(&grid, &b, MARKER, &desired).await;
            listed.release();
            by_b
        });
        assert_eq!(by_a.unwrap(), by_b.unwrap());
        assert_converged(&grid, &a);
    }

    #[tokio::test]
    async fn a_writer_behind_a_stale_read_records_nothing_new() {
        let grid = Grid::default();
        let a = store(&grid);
        let b = a.beside();
        let recorded = ensure(&grid, &a, MARKER, &desired()).await.unwrap();
        // B read the tenant before A recorded its account: it finds A's account by the marker,
        // and its record, refused, names A's.
        b.state.lock().unwrap().password = a.state.lock().unwrap().password.clone();
        assert_eq!(
            ensure(&grid, &b, MARKER, &desired()).await.unwrap(),
            recorded
        );
        assert_eq!(grid.state.lock().unwrap().accounts.len(), 1);
    }

    #[tokio::test]
    async fn of_several_unrecorded_marked_accounts_one_is_recorded_and_the_others_deleted() {
        // Left by crashes between create and record (an older keeper, or two writers).
        let grid = Grid::default();
        let store = store(&grid);
        store.state.lock().unwrap().password = Some("p".repeat(32));
        for _ in 0..2 {
            grid.create_account(&desired(), MARKER, &"p".repeat(32))
                .await
                .unwrap();
        }
        let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        assert_eq!(id, "00000000000000000001", "the lowest id");
        assert_converged(&grid, &store);
    }

    #[tokio::test]
    async fn a_status_naming_another_tenants_account_is_refused_and_left_alone() {
        let grid = Grid::default();
        let store = store(&grid);
        let theirs = grid
            .create_account(&desired(), "keeper.dev/owner-uid=other", "theirs")
            .await
            .unwrap();
        // A status edit points this tenant at the other account (and its password is unknown).
        store.state.lock().unwrap().account = Some(theirs.clone());
        let err = ensure(&grid, &store, MARKER, &desired()).await.unwrap_err();
        assert!(!err.is_transient(), "{err:?}");
        assert!(err.to_string().contains(&theirs), "{err}");
        let err = locate_account(&grid, &store, MARKER).await.unwrap_err();
        assert!(err.to_string().contains("ownership marker"), "{err}");
        // Nothing was created, updated or reset: the other account is as it was.
        let state = grid.state.lock().unwrap();
        assert_eq!(state.accounts.len(), 1);
        assert_eq!(state.accounts[&theirs].marker, "keeper.dev/owner-uid=other");
        assert_eq!(state.accounts[&theirs].settings, desired());
    }

    #[tokio::test]
    async fn a_failed_lookup_never_leads_to_a_second_account() {
        let grid = Grid::default();
        let store = store(&grid);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        grid.state.lock().unwrap().fail_lookups_with = Some(500);
        let err = ensure(&grid, &store, MARKER, &desired()).await.unwrap_err();
        assert!(err.is_transient(), "{err:?}");
        assert_eq!(grid.state.lock().unwrap().accounts.len(), 1);
    }

    #[tokio::test]
    async fn spec_changes_are_applied_to_the_account() {
        let grid = Grid::default();
        let store = store(&grid);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        let mut changed = desired();
        changed.quota_bytes = None;
        changed.allow_platform_services = true;
        ensure(&grid, &store, MARKER, &changed).await.unwrap();
        let state = grid.state.lock().unwrap();
        assert_eq!(state.accounts.values().next().unwrap().settings, changed);
    }

    #[tokio::test]
    async fn a_lost_root_password_is_replaced_and_the_key_kept() {
        let grid = Grid::default();
        let store = store(&grid);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        let published = store.state.lock().unwrap().published.clone();
        store.state.lock().unwrap().password = None;
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        assert_converged(&grid, &store);
        assert_eq!(store.state.lock().unwrap().published, published);
    }

    #[tokio::test]
    async fn a_refused_root_password_is_set_again_through_the_grid() {
        let grid = Grid::default();
        let store = store(&grid);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        for account in grid.state.lock().unwrap().accounts.values_mut() {
            account.password = "changed-by-someone".into();
        }
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        assert_converged(&grid, &store);
    }

    #[tokio::test]
    async fn a_key_revoked_on_the_grid_is_replaced() {
        let grid = Grid::default();
        let store = store(&grid);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        for account in grid.state.lock().unwrap().accounts.values_mut() {
            account.keys.clear();
        }
        let before = store.state.lock().unwrap().published.clone();
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        assert_converged(&grid, &store);
        assert_ne!(store.state.lock().unwrap().published, before);
    }

    #[tokio::test]
    async fn an_account_deleted_outside_keeper_is_created_again() {
        let grid = Grid::default();
        let store = store(&grid);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        grid.state.lock().unwrap().accounts.clear();
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        assert_converged(&grid, &store);
    }

    #[tokio::test]
    async fn keys_are_revoked_only_with_a_password() {
        let grid = Grid::default();
        let store = store(&grid);
        let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        revoke_keys(&grid, &id, None).await.unwrap();
        assert_eq!(grid.state.lock().unwrap().accounts[&id].keys.len(), 1);
        let password = store.state.lock().unwrap().password.clone();
        revoke_keys(&grid, &id, password.as_deref()).await.unwrap();
        assert!(grid.state.lock().unwrap().accounts[&id].keys.is_empty());
    }

    #[tokio::test]
    async fn buckets_are_listed_as_the_root_user_or_from_the_grid() {
        let grid = Grid::default();
        let store = store(&grid);
        let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        grid.state
            .lock()
            .unwrap()
            .accounts
            .get_mut(&id)
            .unwrap()
            .buckets = vec!["b".into()];
        assert_eq!(account_buckets(&grid, &id, None).await.unwrap(), ["b"]);
        // A refused root password is set again, then the listing works.
        let buckets = account_buckets(&grid, &id, Some("wrong-but-stored"))
            .await
            .unwrap();
        assert_eq!(buckets, ["b"]);
        grid.state.lock().unwrap().fail_lookups_with = Some(503);
        assert!(account_buckets(&grid, &id, None).await.is_err());
    }

    #[test]
    fn passwords_are_long_random_and_different() {
        let a = generate_password();
        let b = generate_password();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }
}

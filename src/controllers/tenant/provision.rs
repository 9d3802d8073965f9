//! The crash-safe sequences that bring a StorageGRID tenant to Ready and take it away, over an
//! [`AccountBackend`] and a [`TenantStore`] (Kubernetes in production, memory in tests).
//!
//! Every step persists what the next one needs before doing anything that cannot be repeated:
//! the root password before the account exists, the account id right after the create, the
//! key's secret right after it is issued. A crash between any two steps therefore leaves state
//! from which the next reconcile converges to exactly one account and one published key.

use futures::future::BoxFuture;
use rand::distr::{Alphanumeric, SampleString};

use super::backend::{AccountBackend, BackendError, S3Credentials};
use super::plan::{self, AccountSettings, AccountStep, KeyStep, ObservedAccount};

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
    fn root_password(&self) -> BoxFuture<'_, Result<Option<String>, Self::Error>>;
    fn store_root_password<'a>(
        &'a self,
        password: &'a str,
    ) -> BoxFuture<'a, Result<(), Self::Error>>;
    /// The account id recorded in status.
    fn recorded_account(&self) -> Option<String>;
    fn record_account<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Self::Error>>;
    /// The credentials currently published, if the Secret holds a complete set.
    fn published(&self) -> BoxFuture<'_, Result<Option<S3Credentials>, Self::Error>>;
    fn publish<'a>(
        &'a self,
        credentials: &'a S3Credentials,
    ) -> BoxFuture<'a, Result<(), Self::Error>>;
}

/// The tenant's account on the grid: by the id in status, else by the ownership marker
/// (a create whose answer was lost). `None` means the backend has no such account.
pub async fn locate_account<S: TenantStore>(
    backend: &dyn AccountBackend,
    store: &S,
    marker: &str,
) -> Result<Option<ObservedAccount>, S::Error> {
    if let Some(id) = store.recorded_account()
        && let Some(account) = backend.get_account(&id, marker).await?
    {
        return Ok(Some(account));
    }
    Ok(backend.find_account(marker).await?)
}

/// Brings the account and its key in line with `desired`; returns the account id.
pub async fn ensure<S: TenantStore>(
    backend: &dyn AccountBackend,
    store: &S,
    marker: &str,
    desired: &AccountSettings,
) -> Result<String, S::Error> {
    let mut password = store.root_password().await?;
    let mut account = locate_account(backend, store, marker).await?;
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
                store.record_account(&id).await?;
                account = Some(ObservedAccount {
                    id,
                    settings: desired.clone(),
                    managed_fields_ok: true,
                });
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
    if store.recorded_account().as_deref() != Some(id.as_str()) {
        store.record_account(&id).await?;
    }
    let root = password.unwrap_or_default();
    ensure_key(backend, store, &id, &root).await?;
    Ok(id)
}

/// Calls `call` with the root password; when the tenant sign-in is refused (the stored password
/// is not the account's, say after a crash between storing and setting it), sets the stored
/// password through the grid API once and tries again.
async fn with_root<'a, T, F>(
    backend: &'a dyn AccountBackend,
    id: &'a str,
    root: &'a str,
    call: F,
) -> Result<T, BackendError>
where
    F: Fn() -> BoxFuture<'a, Result<T, BackendError>>,
{
    match call().await {
        Err(e) if e.is_bad_credentials() => {
            tracing::warn!(account = %id, "tenant root sign-in refused; setting the stored root password");
            backend.set_root_password(id, root).await?;
            call().await
        }
        other => other,
    }
}

/// Exactly one key for the root user, published.
async fn ensure_key<S: TenantStore>(
    backend: &dyn AccountBackend,
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
pub async fn account_buckets(
    backend: &dyn AccountBackend,
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
pub async fn revoke_keys(
    backend: &dyn AccountBackend,
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
pub(super) mod fake {
    //! An in-memory grid and store that can "crash" before any chosen backend or store step.

    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use futures::FutureExt;

    use super::*;
    use crate::backends::storagegrid;
    use crate::controllers::tenant::backend::IssuedKey;

    #[derive(Default)]
    pub struct Grid {
        pub state: Mutex<GridState>,
        /// Step counter shared with the store: the step numbered `crash_at` fails.
        pub steps: Mutex<(usize, Option<usize>)>,
    }

    #[derive(Default, Debug)]
    pub struct GridState {
        pub next_id: u64,
        /// id → (settings, marker, root password, key ids, bucket names)
        pub accounts: BTreeMap<String, FakeAccount>,
        pub fail_lookups_with: Option<u16>,
    }

    #[derive(Debug, Clone)]
    pub struct FakeAccount {
        pub settings: AccountSettings,
        pub marker: String,
        pub password: String,
        pub keys: BTreeMap<String, String>,
        pub buckets: Vec<String>,
    }

    impl Grid {
        pub fn step(&self) -> Result<(), BackendError> {
            let mut steps = self.steps.lock().unwrap();
            steps.0 += 1;
            if Some(steps.0) == steps.1 {
                return Err(BackendError::Grid(storagegrid::Error::InvalidResponse {
                    operation: "crash",
                    message: "simulated crash".into(),
                }));
            }
            Ok(())
        }

        pub fn crash_at(&self, step: Option<usize>) {
            *self.steps.lock().unwrap() = (0, step);
        }

        pub fn steps_taken(&self) -> usize {
            self.steps.lock().unwrap().0
        }

        fn not_found(op: &'static str) -> BackendError {
            BackendError::Grid(storagegrid::Error::NotFound {
                operation: op,
                message: "no such account".into(),
            })
        }

        fn login(&self, id: &str, root: &str) -> Result<(), BackendError> {
            let state = self.state.lock().unwrap();
            match state.accounts.get(id) {
                Some(a) if a.password == root => Ok(()),
                Some(_) => Err(BackendError::Grid(storagegrid::Error::BadCredentials {
                    operation: "sign_in",
                    username: "root".into(),
                    message: "bad password".into(),
                })),
                None => Err(Self::not_found("sign_in")),
            }
        }

        fn lookup_failure(&self) -> Result<(), BackendError> {
            match self.state.lock().unwrap().fail_lookups_with {
                Some(status) => Err(BackendError::Grid(storagegrid::Error::Server {
                    operation: "get_account",
                    status,
                    message: "unavailable".into(),
                })),
                None => Ok(()),
            }
        }

        fn observe(id: &str, a: &FakeAccount, marker: &str) -> ObservedAccount {
            ObservedAccount {
                id: id.to_string(),
                settings: a.settings.clone(),
                managed_fields_ok: a.marker == marker,
            }
        }
    }

    impl AccountBackend for Grid {
        fn get_account<'a>(
            &'a self,
            id: &'a str,
            marker: &'a str,
        ) -> BoxFuture<'a, Result<Option<ObservedAccount>, BackendError>> {
            async move {
                self.lookup_failure()?;
                let state = self.state.lock().unwrap();
                Ok(state.accounts.get(id).map(|a| Self::observe(id, a, marker)))
            }
            .boxed()
        }

        fn find_account<'a>(
            &'a self,
            marker: &'a str,
        ) -> BoxFuture<'a, Result<Option<ObservedAccount>, BackendError>> {
            async move {
                self.lookup_failure()?;
                let state = self.state.lock().unwrap();
                Ok(state
                    .accounts
                    .iter()
                    .find(|(_, a)| a.marker == marker)
                    .map(|(id, a)| Self::observe(id, a, marker)))
            }
            .boxed()
        }

        fn create_account<'a>(
            &'a self,
            settings: &'a AccountSettings,
            marker: &'a str,
            root_password: &'a str,
        ) -> BoxFuture<'a, Result<String, BackendError>> {
            async move {
                self.step()?;
                let mut state = self.state.lock().unwrap();
                state.next_id += 1;
                let id = format!("{:020}", state.next_id);
                state.accounts.insert(
                    id.clone(),
                    FakeAccount {
                        settings: settings.clone(),
                        marker: marker.to_string(),
                        password: root_password.to_string(),
                        keys: BTreeMap::new(),
                        buckets: Vec::new(),
                    },
                );
                Ok(id)
            }
            .boxed()
        }

        fn update_account<'a>(
            &'a self,
            id: &'a str,
            settings: &'a AccountSettings,
            marker: &'a str,
        ) -> BoxFuture<'a, Result<(), BackendError>> {
            async move {
                self.step()?;
                let mut state = self.state.lock().unwrap();
                let account = state
                    .accounts
                    .get_mut(id)
                    .ok_or_else(|| Self::not_found("update_account"))?;
                account.settings = settings.clone();
                account.marker = marker.to_string();
                Ok(())
            }
            .boxed()
        }

        fn set_root_password<'a>(
            &'a self,
            id: &'a str,
            password: &'a str,
        ) -> BoxFuture<'a, Result<(), BackendError>> {
            async move {
                self.step()?;
                let mut state = self.state.lock().unwrap();
                let account = state
                    .accounts
                    .get_mut(id)
                    .ok_or_else(|| Self::not_found("set_root_password"))?;
                account.password = password.to_string();
                Ok(())
            }
            .boxed()
        }

        fn list_keys<'a>(
            &'a self,
            id: &'a str,
            root_password: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
            async move {
                self.login(id, root_password)?;
                let state = self.state.lock().unwrap();
                Ok(state.accounts[id].keys.keys().cloned().collect())
            }
            .boxed()
        }

        fn key_id<'a>(
            &'a self,
            id: &'a str,
            root_password: &'a str,
            access_key_id: &'a str,
        ) -> BoxFuture<'a, Result<Option<String>, BackendError>> {
            async move {
                self.login(id, root_password)?;
                let state = self.state.lock().unwrap();
                Ok(state.accounts[id]
                    .keys
                    .iter()
                    .find(|(_, access)| *access == access_key_id)
                    .map(|(key, _)| key.clone()))
            }
            .boxed()
        }

        fn issue_key<'a>(
            &'a self,
            id: &'a str,
            root_password: &'a str,
        ) -> BoxFuture<'a, Result<IssuedKey, BackendError>> {
            async move {
                self.step()?;
                self.login(id, root_password)?;
                let mut state = self.state.lock().unwrap();
                state.next_id += 1;
                let n = state.next_id;
                let account = state.accounts.get_mut(id).unwrap();
                account.keys.insert(format!("cred-{n}"), format!("AK{n}"));
                Ok(IssuedKey {
                    id: format!("cred-{n}"),
                    credentials: S3Credentials {
                        access_key_id: format!("AK{n}"),
                        secret_access_key: format!("secret-{n}"),
                    },
                })
            }
            .boxed()
        }

        fn revoke_key<'a>(
            &'a self,
            id: &'a str,
            root_password: &'a str,
            key_id: &'a str,
        ) -> BoxFuture<'a, Result<(), BackendError>> {
            async move {
                self.step()?;
                self.login(id, root_password)?;
                let mut state = self.state.lock().unwrap();
                state.accounts.get_mut(id).unwrap().keys.remove(key_id);
                Ok(())
            }
            .boxed()
        }

        fn list_buckets<'a>(
            &'a self,
            id: &'a str,
            root_password: Option<&'a str>,
        ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
            async move {
                self.lookup_failure()?;
                if let Some(root) = root_password {
                    self.login(id, root)?;
                }
                let state = self.state.lock().unwrap();
                state
                    .accounts
                    .get(id)
                    .map(|a| a.buckets.clone())
                    .ok_or_else(|| Self::not_found("list_buckets"))
            }
            .boxed()
        }

        fn delete_account<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
            async move {
                self.step()?;
                let mut state = self.state.lock().unwrap();
                match state.accounts.get(id) {
                    None => Err(Self::not_found("delete_account")),
                    Some(a) if !a.buckets.is_empty() => {
                        Err(BackendError::Grid(storagegrid::Error::Conflict {
                            operation: "delete_account",
                            message: "account has buckets".into(),
                        }))
                    }
                    Some(_) => {
                        state.accounts.remove(id);
                        Ok(())
                    }
                }
            }
            .boxed()
        }
    }

    /// The tenant's persisted state; its writes are crash points too.
    pub struct Store<'g> {
        pub grid: &'g Grid,
        pub state: Mutex<StoreState>,
    }

    #[derive(Default, Debug, Clone)]
    pub struct StoreState {
        pub password: Option<String>,
        pub account: Option<String>,
        pub published: Option<S3Credentials>,
    }

    impl TenantStore for Store<'_> {
        type Error = BackendError;

        fn root_password(&self) -> BoxFuture<'_, Result<Option<String>, BackendError>> {
            async move { Ok(self.state.lock().unwrap().password.clone()) }.boxed()
        }

        fn store_root_password<'a>(
            &'a self,
            password: &'a str,
        ) -> BoxFuture<'a, Result<(), BackendError>> {
            async move {
                self.grid.step()?;
                self.state.lock().unwrap().password = Some(password.to_string());
                Ok(())
            }
            .boxed()
        }

        fn recorded_account(&self) -> Option<String> {
            self.state.lock().unwrap().account.clone()
        }

        fn record_account<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
            async move {
                self.grid.step()?;
                self.state.lock().unwrap().account = Some(id.to_string());
                Ok(())
            }
            .boxed()
        }

        fn published(&self) -> BoxFuture<'_, Result<Option<S3Credentials>, BackendError>> {
            async move { Ok(self.state.lock().unwrap().published.clone()) }.boxed()
        }

        fn publish<'a>(
            &'a self,
            credentials: &'a S3Credentials,
        ) -> BoxFuture<'a, Result<(), BackendError>> {
            async move {
                let mut state = self.state.lock().unwrap();
                if state.published.as_ref() != Some(credentials) {
                    self.grid.step()?;
                    state.published = Some(credentials.clone());
                }
                Ok(())
            }
            .boxed()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::fake::{Grid, Store, StoreState};
    use super::*;

    const MARKER: &str = "keeper.dev/owner-uid=u1";

    fn desired() -> AccountSettings {
        AccountSettings {
            name: "team-a".into(),
            quota_bytes: Some(1 << 30),
            allow_platform_services: false,
        }
    }

    fn store(grid: &Grid) -> Store<'_> {
        Store {
            grid,
            state: Mutex::new(StoreState::default()),
        }
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
    async fn a_failed_lookup_never_leads_to_a_second_account() {
        let grid = Grid::default();
        let store = store(&grid);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        grid.state.lock().unwrap().fail_lookups_with = Some(500);
        let err = ensure(&grid, &store, MARKER, &desired()).await.unwrap_err();
        assert!(!err.is_permanent() && !err.is_not_found());
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

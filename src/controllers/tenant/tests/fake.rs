//! An in-memory grid and tenant store that can "crash" before any chosen backend or store step,
//! and a connector to them for reconcile tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::backends::Keys;
use crate::backends::storagegrid;
use crate::controllers::tenant::Error;
use crate::controllers::tenant::backend::{
    AccountBackend, BackendError, GridAdmin, IssuedKey, StoreLogin,
};
use crate::controllers::tenant::plan::{AccountSettings, ObservedAccount};
use crate::controllers::tenant::reconcile::provision::Recorded;
use crate::controllers::tenant::reconcile::provision::TenantStore;
use crate::runtime::{Connect, Shared};
use crate::test_support::Pauses;

/// A grid; clones share their state (the reconciler gets a clone, the test keeps one).
#[derive(Clone, Default)]
pub struct Grid {
    pub state: Arc<Mutex<GridState>>,
    /// Step counter shared with the store: the step numbered `crash_at` fails.
    pub steps: Arc<Mutex<(usize, Option<usize>)>>,
    /// Calls that stop once they have acted, until the test lets them go.
    pub pauses: Arc<Pauses>,
}

#[derive(Default, Debug)]
pub struct GridState {
    pub next_id: u64,
    pub accounts: BTreeMap<String, FakeAccount>,
    /// Account lookups and bucket listings fail with this HTTP status (409 is a conflict,
    /// anything else a server error).
    pub fail_lookups_with: Option<u16>,
    /// The next account create fails with this HTTP status (a 4xx rejection).
    pub reject_create_with: Option<u16>,
    /// The next account delete answers this HTTP status (404 or 409) without deleting.
    pub delete_answers: Option<u16>,
    /// The admin login the reconciler signed in with.
    pub admin: Option<String>,
    /// Searches for marked accounts (each lists the whole grid).
    pub searches: usize,
    /// The grid's identity (`storagegrid:grid-a` unless a test moves keeper to another grid).
    pub identity: Option<String>,
    /// Identity lookups.
    pub identity_lookups: usize,
}

#[derive(Debug, Clone)]
pub struct FakeAccount {
    pub settings: AccountSettings,
    pub marker: String,
    pub password: String,
    /// credential id → access key id
    pub keys: BTreeMap<String, String>,
    pub buckets: Vec<String>,
}

impl Grid {
    pub fn step(&self) -> Result<(), BackendError> {
        let mut steps = self.steps.lock().unwrap();
        steps.0 += 1;
        if Some(steps.0) == steps.1 {
            return Err(storagegrid::Error::InvalidResponse {
                operation: "crash",
                message: "simulated crash".into(),
            }
            .into());
        }
        Ok(())
    }

    pub fn crash_at(&self, step: Option<usize>) {
        *self.steps.lock().unwrap() = (0, step);
    }

    pub fn steps_taken(&self) -> usize {
        self.steps.lock().unwrap().0
    }

    fn not_found(operation: &'static str) -> BackendError {
        storagegrid::Error::NotFound {
            operation,
            message: "no such account".into(),
        }
        .into()
    }

    fn login(&self, id: &str, root: &str) -> Result<(), BackendError> {
        let state = self.state.lock().unwrap();
        match state.accounts.get(id) {
            Some(a) if a.password == root => Ok(()),
            Some(_) => Err(storagegrid::Error::BadCredentials {
                operation: "sign_in",
                username: "root".into(),
                message: "bad password".into(),
            }
            .into()),
            None => Err(Self::not_found("sign_in")),
        }
    }

    fn lookup_failure(&self) -> Result<(), BackendError> {
        match self.state.lock().unwrap().fail_lookups_with {
            Some(409) => Err(storagegrid::Error::Conflict {
                operation: "get_account",
                message: "busy".into(),
            }
            .into()),
            Some(status) => Err(storagegrid::Error::Server {
                operation: "get_account",
                status,
                message: "unavailable".into(),
            }
            .into()),
            None => Ok(()),
        }
    }

    fn observe(id: &str, a: &FakeAccount, marker: &str) -> ObservedAccount {
        ObservedAccount {
            id: id.to_string(),
            settings: a.settings.clone(),
            managed_fields_ok: a.marker == marker,
            marked: a.marker == marker,
        }
    }
}

impl AccountBackend for Grid {
    async fn identity(&self) -> Result<String, BackendError> {
        let mut state = self.state.lock().unwrap();
        state.identity_lookups += 1;
        Ok(state
            .identity
            .clone()
            .unwrap_or_else(|| "storagegrid:grid-a".to_string()))
    }

    async fn get_account(
        &self,
        id: &str,
        marker: &str,
    ) -> Result<Option<ObservedAccount>, BackendError> {
        self.lookup_failure()?;
        let state = self.state.lock().unwrap();
        Ok(state.accounts.get(id).map(|a| Self::observe(id, a, marker)))
    }

    async fn find_accounts(&self, marker: &str) -> Result<Vec<ObservedAccount>, BackendError> {
        self.lookup_failure()?;
        let found = {
            let mut state = self.state.lock().unwrap();
            state.searches += 1;
            state
                .accounts
                .iter()
                .filter(|(_, a)| a.marker == marker)
                .map(|(id, a)| Self::observe(id, a, marker))
                .collect()
        };
        self.pauses.stop_if_asked("find_accounts").await;
        Ok(found)
    }

    async fn create_account(
        &self,
        settings: &AccountSettings,
        marker: &str,
        root_password: &str,
    ) -> Result<String, BackendError> {
        self.step()?;
        let mut state = self.state.lock().unwrap();
        if let Some(status) = state.reject_create_with.take() {
            return Err(storagegrid::Error::Rejected {
                operation: "create_account",
                status,
                message: "quota too large".into(),
            }
            .into());
        }
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

    async fn update_account(
        &self,
        id: &str,
        settings: &AccountSettings,
        marker: &str,
    ) -> Result<(), BackendError> {
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

    async fn set_root_password(&self, id: &str, password: &str) -> Result<(), BackendError> {
        self.step()?;
        let mut state = self.state.lock().unwrap();
        let account = state
            .accounts
            .get_mut(id)
            .ok_or_else(|| Self::not_found("set_root_password"))?;
        account.password = password.to_string();
        Ok(())
    }

    async fn list_keys(&self, id: &str, root_password: &str) -> Result<Vec<String>, BackendError> {
        self.login(id, root_password)?;
        let state = self.state.lock().unwrap();
        Ok(state.accounts[id].keys.keys().cloned().collect())
    }

    async fn key_id(
        &self,
        id: &str,
        root_password: &str,
        access_key_id: &str,
    ) -> Result<Option<String>, BackendError> {
        self.login(id, root_password)?;
        let state = self.state.lock().unwrap();
        Ok(state.accounts[id]
            .keys
            .iter()
            .find(|(_, access)| *access == access_key_id)
            .map(|(key, _)| key.clone()))
    }

    async fn issue_key(&self, id: &str, root_password: &str) -> Result<IssuedKey, BackendError> {
        self.step()?;
        self.login(id, root_password)?;
        let mut state = self.state.lock().unwrap();
        state.next_id += 1;
        let n = state.next_id;
        let account = state.accounts.get_mut(id).unwrap();
        account.keys.insert(format!("cred-{n}"), format!("AK{n}"));
        Ok(IssuedKey {
            id: format!("cred-{n}"),
            credentials: Keys {
                access_key_id: format!("AK{n}"),
                secret_access_key: format!("secret-{n}"),
            },
        })
    }

    async fn revoke_key(
        &self,
        id: &str,
        root_password: &str,
        key_id: &str,
    ) -> Result<(), BackendError> {
        self.step()?;
        self.login(id, root_password)?;
        let mut state = self.state.lock().unwrap();
        state.accounts.get_mut(id).unwrap().keys.remove(key_id);
        Ok(())
    }

    async fn list_buckets(
        &self,
        id: &str,
        root_password: Option<&str>,
    ) -> Result<Vec<String>, BackendError> {
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

    async fn delete_account(&self, id: &str) -> Result<(), BackendError> {
        self.step()?;
        let mut state = self.state.lock().unwrap();
        match state.delete_answers.take() {
            Some(404) => return Err(Self::not_found("delete_account")),
            Some(409) => {
                return Err(storagegrid::Error::Conflict {
                    operation: "delete_account",
                    message: "account has buckets".into(),
                }
                .into());
            }
            _ => {}
        }
        match state.accounts.get(id) {
            None => Err(Self::not_found("delete_account")),
            Some(a) if !a.buckets.is_empty() => Err(storagegrid::Error::Conflict {
                operation: "delete_account",
                message: "account has buckets".into(),
            }
            .into()),
            Some(_) => {
                state.accounts.remove(id);
                Ok(())
            }
        }
    }
}

/// The tenant's persisted state as one writer read it; its writes are crash points too.
pub struct Store<'g> {
    pub grid: &'g Grid,
    pub state: Mutex<StoreState>,
    /// The account the tenant records as the API holds it, and how often it was recorded:
    /// shared by writers racing each other (see [`Store::beside`]).
    pub recorded: Arc<Mutex<(Option<String>, u64)>>,
}

#[derive(Default, Debug, Clone)]
pub struct StoreState {
    pub password: Option<String>,
    pub account: Option<String>,
    pub published: Option<Keys>,
    /// How often the account was recorded when this writer read the tenant.
    pub read_version: u64,
    /// `status.backendIdentity`.
    pub identity: Option<String>,
    /// The value of `keeper.dev/confirm-backend-identity`.
    pub confirmed: Option<String>,
}

impl<'g> Store<'g> {
    pub fn new(grid: &'g Grid) -> Self {
        Store {
            grid,
            state: Mutex::default(),
            recorded: Arc::default(),
        }
    }

    /// A second writer that read the tenant as this one did (a second keeper).
    pub fn beside(&self) -> Store<'g> {
        Store {
            grid: self.grid,
            state: Mutex::new(self.state.lock().unwrap().clone()),
            recorded: self.recorded.clone(),
        }
    }
}

impl TenantStore for Store<'_> {
    type Error = BackendError;

    async fn root_password(&self) -> Result<Option<String>, BackendError> {
        Ok(self.state.lock().unwrap().password.clone())
    }

    async fn store_root_password(&self, password: &str) -> Result<(), BackendError> {
        self.grid.step()?;
        self.state.lock().unwrap().password = Some(password.to_string());
        Ok(())
    }

    fn recorded_account(&self) -> Option<String> {
        self.state.lock().unwrap().account.clone()
    }

    async fn record_account(&self, id: &str) -> Result<Recorded, BackendError> {
        self.grid.step()?;
        let mut recorded = self.recorded.lock().unwrap();
        let mut state = self.state.lock().unwrap();
        if recorded.1 != state.read_version {
            state.account = recorded.0.clone();
            return Ok(Recorded::Lost(recorded.0.clone()));
        }
        *recorded = (Some(id.to_string()), recorded.1 + 1);
        state.account = Some(id.to_string());
        state.read_version = recorded.1;
        Ok(Recorded::Yes)
    }

    fn recorded_identity(&self) -> Option<String> {
        self.state.lock().unwrap().identity.clone()
    }

    fn keep_identity(&self, identity: &str) {
        self.state.lock().unwrap().identity = Some(identity.to_string());
    }

    fn confirmed_identity(&self) -> Option<String> {
        self.state.lock().unwrap().confirmed.clone()
    }

    fn resource(&self) -> (String, String) {
        ("ns".to_string(), "t".to_string())
    }

    async fn published(&self) -> Result<Option<Keys>, BackendError> {
        Ok(self.state.lock().unwrap().published.clone())
    }

    async fn publish(&self, credentials: &Keys) -> Result<(), BackendError> {
        let mut state = self.state.lock().unwrap();
        if state.published.as_ref() != Some(credentials) {
            self.grid.step()?;
            state.published = Some(credentials.clone());
        }
        Ok(())
    }
}

/// Connects to the fake grid, and to a store whose credential check is scripted.
#[derive(Clone, Default)]
pub struct FakeBackends {
    pub grid: Grid,
    /// What the next S3 credential checks answer (`None`: the keys work).
    pub verify: Arc<Mutex<Option<BackendError>>>,
    /// The keys the S3 credential check was asked about.
    pub verified: Arc<Mutex<Vec<Keys>>>,
}

impl Connect<GridAdmin> for FakeBackends {
    type Backend = Grid;
    type Error = Error;

    async fn connect(&self, _shared: &Shared, grid: &GridAdmin) -> Result<Grid, Error> {
        self.grid.state.lock().unwrap().admin = Some(grid.login.username.clone());
        Ok(self.grid.clone())
    }
}

impl Connect<StoreLogin> for FakeBackends {
    type Backend = ();
    type Error = Error;

    async fn connect(&self, _shared: &Shared, store: &StoreLogin) -> Result<(), Error> {
        self.verified.lock().unwrap().push(store.keys.clone());
        match self.verify.lock().unwrap().clone() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

//! In-memory RDS with the semantics keeper relies on (and moto lacks): instances can start in
//! `creating` and stay `deleting` until told otherwise; failures are injectable per operation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::{CloudDatabase, DatabaseEndpoint};
use crate::backends::rds::{DbInstance, FinalSnapshot, Modification, NewInstance, Password};
use crate::controllers::database::Error;
use crate::controllers::database::backend::{Created, DatabaseBackend};
use crate::error::{BackendError, ErrorClass};
use crate::runtime::{Connect, Shared};
use crate::test_support::Pauses;

/// An RDS error as the client classifies it.
pub fn rds_error(class: ErrorClass, code: &str, message: &str) -> BackendError {
    BackendError::new("rds", "fake", class, code, message)
}

fn not_found() -> BackendError {
    rds_error(ErrorClass::NotFound, "DBInstanceNotFound", "not found")
}

/// Clones share their state (the reconciler connects to a clone, the test keeps one).
#[derive(Clone, Default)]
pub struct FakeRds {
    pub state: Arc<Mutex<FakeRdsState>>,
    /// Calls that stop once they have acted, until the test lets them go.
    pub pauses: Arc<Pauses>,
}

/// Hands the shared fake to the reconciler, whatever the database.
impl Connect<CloudDatabase> for FakeRds {
    type Backend = FakeRds;
    type Error = Error;

    async fn connect(&self, _shared: &Shared, _db: &CloudDatabase) -> Result<FakeRds, Error> {
        Ok(self.clone())
    }
}

#[derive(Default)]
pub struct FakeRdsState {
    /// The region the client calls (`None`: none configured).
    pub region: Option<String>,
    /// The account keeper acts in (`None`: `000000000000`, the account of the fake's ARNs).
    pub account: Option<String>,
    pub instances: BTreeMap<String, DbInstance>,
    pub passwords: BTreeMap<String, Password>,
    /// snapshot id -> instance id
    pub snapshots: BTreeMap<String, String>,
    /// State of a new instance; `available` when unset.
    pub initial_state: Option<String>,
    /// Deleted instances stay `deleting` until `finish_deletion`.
    pub slow_delete: bool,
    /// Describe misses this many times (an eventually consistent read).
    pub stale_describes: usize,
    /// One-shot failures by operation.
    failures: BTreeMap<&'static str, BackendError>,
    pub calls: Vec<&'static str>,
    pub modifications: Vec<Modification>,
}

impl FakeRds {
    fn call(&self, op: &'static str) -> Result<MutexGuard<'_, FakeRdsState>, BackendError> {
        let mut state = self.state.lock().unwrap();
        state.calls.push(op);
        match state.failures.remove(op) {
            Some(e) => Err(e),
            None => Ok(state),
        }
    }

    pub fn fail_next(&self, op: &'static str, error: BackendError) {
        self.state.lock().unwrap().failures.insert(op, error);
    }

    pub fn calls(&self, op: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| **c == op)
            .count()
    }

    pub fn only_instance(&self) -> DbInstance {
        let state = self.state.lock().unwrap();
        assert_eq!(state.instances.len(), 1, "{:?}", state.instances.keys());
        state.instances.values().next().unwrap().clone()
    }

    pub fn password(&self, id: &str) -> String {
        self.state.lock().unwrap().passwords[id]
            .expose()
            .to_string()
    }

    pub fn set_state(&self, id: &str, value: &str) {
        self.state
            .lock()
            .unwrap()
            .instances
            .get_mut(id)
            .unwrap()
            .state = value.into();
    }

    pub fn finish_deletion(&self, id: &str) {
        self.state.lock().unwrap().instances.remove(id);
    }
}

impl DatabaseBackend for FakeRds {
    /// Not counted in `calls`: it is looked up once per process.
    async fn account(&self) -> Result<String, BackendError> {
        let state = self.state.lock().unwrap();
        Ok(state
            .account
            .clone()
            .unwrap_or_else(|| "000000000000".to_string()))
    }

    fn region(&self) -> Option<String> {
        self.state.lock().unwrap().region.clone()
    }

    async fn describe(&self, id: &str) -> Result<Option<DbInstance>, BackendError> {
        let found = {
            let mut state = self.call("describe")?;
            if state.stale_describes > 0 {
                state.stale_describes -= 1;
                None
            } else {
                state.instances.get(id).cloned()
            }
        };
        self.pauses.stop_if_asked("describe").await;
        Ok(found)
    }

    async fn create(&self, new: &NewInstance) -> Result<Created, BackendError> {
        let mut state = self.call("create")?;
        if state.instances.contains_key(&new.id) {
            return Ok(Created::AlreadyExists);
        }
        let instance = DbInstance {
            id: new.id.clone(),
            arn: format!("arn:aws:rds:fake:000000000000:db:{}", new.id),
            state: state
                .initial_state
                .clone()
                .unwrap_or_else(|| "available".into()),
            endpoint: Some(DatabaseEndpoint {
                address: format!("{}.fake.rds", new.id),
                port: 5432,
            }),
            tags: new.tags.clone(),
            deletion_protection: new.deletion_protection,
            instance_class: new.instance_class.clone(),
            storage_gib: new.storage_gib,
        };
        state.passwords.insert(new.id.clone(), new.password.clone());
        state.instances.insert(new.id.clone(), instance);
        Ok(Created::Requested)
    }

    async fn modify(&self, id: &str, modification: &Modification) -> Result<(), BackendError> {
        let mut state = self.call("modify")?;
        state.modifications.push(modification.clone());
        if let Some(password) = &modification.master_password {
            state.passwords.insert(id.into(), password.clone());
        }
        let instance = state.instances.get_mut(id).ok_or_else(not_found)?;
        if instance.state != "available" {
            return Err(rds_error(
                ErrorClass::Conflict,
                "InvalidDBInstanceState",
                &instance.state,
            ));
        }
        if let Some(class) = &modification.instance_class {
            instance.instance_class = class.clone();
        }
        if let Some(gib) = modification.storage_gib {
            instance.storage_gib = gib;
        }
        if let Some(protection) = modification.deletion_protection {
            instance.deletion_protection = protection;
        }
        Ok(())
    }

    async fn delete(&self, id: &str, final_snapshot: &FinalSnapshot) -> Result<(), BackendError> {
        let mut state = self.call("delete")?;
        let slow = state.slow_delete;
        let instance = state.instances.get_mut(id).ok_or_else(not_found)?;
        if instance.deletion_protection {
            return Err(rds_error(
                ErrorClass::Permanent,
                "InvalidParameterCombination",
                "Cannot delete protected DB Instance",
            ));
        }
        if instance.state == "deleting" {
            return Err(rds_error(
                ErrorClass::Conflict,
                "InvalidDBInstanceState",
                "deleting",
            ));
        }
        if slow {
            instance.state = "deleting".into();
        } else {
            state.instances.remove(id);
        }
        if let FinalSnapshot::Take(snapshot) = final_snapshot {
            state.snapshots.insert(snapshot.clone(), id.into());
        }
        Ok(())
    }

    async fn remove_tags(
        &self,
        instance: &DbInstance,
        keys: &[String],
    ) -> Result<(), BackendError> {
        let mut state = self.call("remove_tags")?;
        let found = state
            .instances
            .get_mut(&instance.id)
            .ok_or_else(not_found)?;
        found.tags.retain(|k, _| !keys.contains(k));
        Ok(())
    }
}

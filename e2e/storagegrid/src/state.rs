//! In-memory model of the grid: accounts, tokens, buckets, users, groups, S3 keys, plus the debug
//! request log and fault rules. Guarded by one `std::sync::Mutex`; never held across an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::util::rfc3339;

#[derive(Debug, Clone)]
pub(crate) struct Account {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub capabilities: Vec<String>,
    pub policy: Map<String, Value>,
    pub root_user_id: String,
    pub grant_root_access_to_group: Option<String>,
}

impl Account {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "name": self.name,
            "capabilities": self.capabilities,
            "policy": self.policy,
            "accountReplica": false,
        });
        if let Some(d) = &self.description {
            v["description"] = json!(d);
        }
        v
    }

    pub fn has_capability(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c == cap)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    Grid,
    Tenant { account_id: String, user_id: String },
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub scope: Scope,
    pub expires: SystemTime,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Drain {
    pub active: bool,
    pub initial_count: u64,
    pub initial_bytes: u64,
    /// Bumped on every start so a stale background task notices and exits.
    pub epoch: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    pub name: String,
    pub account_id: String,
    pub region: String,
    pub creation_time: SystemTime,
    pub s3_object_lock: Value,
    /// Per-bucket quota (11.9+); stored and reported, not enforced.
    pub quota_object_bytes: Option<u64>,
    pub drain: Drain,
}

impl Bucket {
    pub fn delete_object_status(&self) -> Value {
        json!({
            "isDeletingObjects": self.drain.active,
            "initialObjectCount": self.drain.initial_count.to_string(),
            "initialObjectBytes": self.drain.initial_bytes.to_string(),
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct User {
    pub id: String,
    pub account_id: String,
    /// `root` for the tenant root user, `user/<short>` for local users.
    pub unique_name: String,
    pub full_name: String,
    pub member_of: Vec<String>,
    pub disable: bool,
    pub password: Option<String>,
    pub root: bool,
}

impl User {
    pub fn urn(&self) -> String {
        format!(
            "urn:sgws:identity::{}:{}",
            self.account_id, self.unique_name
        )
    }

    pub fn short_name(&self) -> &str {
        self.unique_name
            .strip_prefix("user/")
            .unwrap_or(&self.unique_name)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "accountId": self.account_id,
            "uniqueName": self.unique_name,
            "fullName": self.full_name,
            "memberOf": self.member_of,
            "disable": self.disable,
            "federated": false,
            "userURN": self.urn(),
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub id: String,
    pub account_id: String,
    pub unique_name: String,
    pub display_name: String,
    pub management_read_only: bool,
    pub policies: Value,
}

impl Group {
    pub fn urn(&self) -> String {
        format!(
            "urn:sgws:identity::{}:{}",
            self.account_id, self.unique_name
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "accountId": self.account_id,
            "uniqueName": self.unique_name,
            "displayName": self.display_name,
            "managementReadOnly": self.management_read_only,
            "policies": self.policies,
            "federated": false,
            "groupURN": self.urn(),
        })
    }

    pub fn s3_policy(&self) -> Option<&Value> {
        self.policies.get("s3").filter(|v| !v.is_null())
    }

    pub fn management_flag(&self, flag: &str) -> bool {
        self.policies
            .get("management")
            .and_then(|m| m.get(flag))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct AccessKey {
    pub id: String,
    pub access_key: String,
    pub secret: String,
    pub account_id: String,
    pub user_id: String,
    pub expires: Option<SystemTime>,
}

impl AccessKey {
    pub fn display_name(&self) -> String {
        let tail = &self.access_key[self.access_key.len().saturating_sub(4)..];
        format!("****************{tail}")
    }

    pub fn expired(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|e| e <= now)
    }

    /// The key as listed (never with the secret).
    pub fn to_json(&self, user: Option<&User>) -> Value {
        json!({
            "id": self.id,
            "accountId": self.account_id,
            "displayName": self.display_name(),
            "userURN": user.map(User::urn),
            "userUUID": self.user_id,
            "expires": self.expires.map(rfc3339),
        })
    }
}

/// One entry of `GET /debug/requests`.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub operation: String,
    pub account: Option<String>,
    pub code: u16,
}

/// A fault rule from `POST /debug/faults`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Fault {
    pub path_prefix: String,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// How many matching requests this rule applies to (default 1; with `share`, how many it
    /// hits, default unlimited).
    #[serde(default)]
    pub count: Option<u64>,
    /// Share (0..=1) of the matching requests the rule hits, at random (seeded by
    /// `POST /debug/faults {"seed": N, ...}`): the share-based mode. Without it the rule hits
    /// the next `count` matching requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// How many requests the rule hit so far (shown by `GET /debug/faults`).
    #[serde(default, skip_deserializing)]
    pub hits: u64,
}

impl Fault {
    fn matches(&self, method: &str, path: &str) -> bool {
        path.starts_with(&self.path_prefix)
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub accounts: BTreeMap<String, Account>,
    pub tokens: HashMap<String, Token>,
    pub buckets: BTreeMap<String, Bucket>,
    pub users: BTreeMap<String, User>,
    pub groups: BTreeMap<String, Group>,
    /// Keyed by access key id.
    pub keys: BTreeMap<String, AccessKey>,
    pub requests: Vec<RequestRecord>,
    pub faults: Vec<Fault>,
    /// Draws the share-based faults; reseeded by `POST /debug/faults` with a `seed`, so a test
    /// can repeat the same faults.
    pub fault_rng: Option<StdRng>,
}

/// What a matching fault rule asks for.
pub(crate) struct FaultHit {
    pub status: Option<u16>,
    pub delay: Option<Duration>,
}

impl State {
    /// Consumes one use of the first fault rule that matches the request and hits it (a rule
    /// with a `share` hits that share of its requests; one without hits every one), if any.
    pub fn take_fault(&mut self, method: &str, path: &str) -> Option<FaultHit> {
        let rng = self
            .fault_rng
            .get_or_insert_with(|| StdRng::from_rng(&mut rand::rng()));
        let idx = self
            .faults
            .iter()
            .position(|f| f.matches(method, path) && f.share.is_none_or(|p| rng.random_bool(p)))?;
        let f = &mut self.faults[idx];
        f.hits += 1;
        let hit = FaultHit {
            status: f.status,
            delay: f.delay_ms.map(Duration::from_millis),
        };
        let left = match (f.count, f.share) {
            (None, Some(_)) => return Some(hit),
            (count, _) => count.unwrap_or(1).saturating_sub(1),
        };
        if left == 0 {
            self.faults.remove(idx);
        } else {
            f.count = Some(left);
        }
        Some(hit)
    }

    /// Restarts the share-based faults' random draws from `seed`.
    pub fn seed_faults(&mut self, seed: u64) {
        self.fault_rng = Some(StdRng::seed_from_u64(seed));
    }

    pub fn user_groups<'a>(&'a self, user: &'a User) -> impl Iterator<Item = &'a Group> + 'a {
        user.member_of
            .iter()
            .filter_map(|g| self.groups.get(g))
            .filter(move |g| g.account_id == user.account_id)
    }

    pub fn account_buckets(&self, account_id: &str) -> Vec<&Bucket> {
        self.buckets
            .values()
            .filter(|b| b.account_id == account_id)
            .collect()
    }

    /// Removes an account and everything that belongs to it.
    pub fn remove_account(&mut self, id: &str) {
        self.accounts.remove(id);
        self.users.retain(|_, u| u.account_id != id);
        self.groups.retain(|_, g| g.account_id != id);
        self.keys.retain(|_, k| k.account_id != id);
        self.tokens.retain(
            |_, t| !matches!(&t.scope, Scope::Tenant { account_id, .. } if account_id == id),
        );
    }

    /// `GET /debug/state`: everything except passwords and secret keys.
    pub fn dump(&self) -> Value {
        json!({
            "accounts": self.accounts.values().map(|a| {
                let mut v = a.to_json();
                v["rootUserId"] = json!(a.root_user_id);
                v["grantRootAccessToGroup"] = json!(a.grant_root_access_to_group);
                v
            }).collect::<Vec<_>>(),
            "buckets": self.buckets.values().map(|b| json!({
                "name": b.name,
                "accountId": b.account_id,
                "region": b.region,
                "creationTime": rfc3339(b.creation_time),
                "s3ObjectLock": b.s3_object_lock,
                "quotaObjectBytes": b.quota_object_bytes,
                "deleteObjectStatus": b.delete_object_status(),
            })).collect::<Vec<_>>(),
            "users": self.users.values().map(|u| {
                let mut v = u.to_json();
                v["root"] = json!(u.root);
                v["hasPassword"] = json!(u.password.is_some());
                v
            }).collect::<Vec<_>>(),
            "groups": self.groups.values().map(Group::to_json).collect::<Vec<_>>(),
            "keys": self.keys.values().map(|k| {
                let mut v = k.to_json(self.users.get(&k.user_id));
                v["accessKey"] = json!(k.access_key);
                v
            }).collect::<Vec<_>>(),
            "tokens": self.tokens.len(),
            "faults": self.faults,
        })
    }
}

//! What `kubectl keeper status` and `why` print, decided from the objects alone (no client): the
//! state an object is in (read from its conditions, in the order a person has to act on them),
//! what it waits for, and the next command to run.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::names::bucket_credentials_secret_name;
use crate::api::{CloudDatabase, DeletionPolicy, DrainStatus, S3Bucket, S3Tenant};
use crate::runtime::conditions::{DELETION_BLOCKED, READY, RECONCILING, STALLED, SYNCED};

mod print;

pub use print::*;

/// keeper's three kinds, as kubectl names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tenant,
    Bucket,
    Database,
}

impl Kind {
    /// The resource name kubectl takes (`kubectl get s3bucket`).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Tenant => "s3tenant",
            Kind::Bucket => "s3bucket",
            Kind::Database => "clouddatabase",
        }
    }

    /// The kind from any name kubectl accepts for it: singular, plural, short name, the kind
    /// itself, each optionally qualified with the group (`s3buckets.keeper.dev`).
    pub fn parse(text: &str) -> Option<Kind> {
        let lower = text.to_ascii_lowercase();
        let name = lower.strip_suffix(".keeper.dev").unwrap_or(&lower);
        match name {
            "s3tenant" | "s3tenants" | "s3t" => Some(Kind::Tenant),
            "s3bucket" | "s3buckets" | "s3b" => Some(Kind::Bucket),
            "clouddatabase" | "clouddatabases" | "cdb" => Some(Kind::Database),
            _ => None,
        }
    }
}

/// Why a `KIND/NAME` argument names no keeper object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("expected KIND/NAME, such as s3tenant/team-a or s3bucket/assets; got {0:?}")]
    Malformed(String),
    #[error("{0:?} is none of keeper's kinds: s3tenant, s3bucket, clouddatabase")]
    UnknownKind(String),
}

/// Reads `KIND/NAME` as kubectl writes it (`s3bucket/assets`, `s3b/assets`).
pub fn parse_target(text: &str) -> Result<(Kind, String), TargetError> {
    let (kind, name) = text
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| TargetError::Malformed(text.to_string()))?;
    let kind = Kind::parse(kind).ok_or_else(|| TargetError::UnknownKind(kind.to_string()))?;
    Ok((kind, name.to_string()))
}

/// One of keeper's objects. The plugin holds a handful at a time: their sizes do not matter.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Object {
    Tenant(S3Tenant),
    Bucket(S3Bucket),
    Database(CloudDatabase),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Tenant(_) => Kind::Tenant,
            Object::Bucket(_) => Kind::Bucket,
            Object::Database(_) => Kind::Database,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Object::Tenant(o) => o.name_any(),
            Object::Bucket(o) => o.name_any(),
            Object::Database(o) => o.name_any(),
        }
    }

    pub fn namespace(&self) -> String {
        match self {
            Object::Tenant(o) => o.namespace(),
            Object::Bucket(o) => o.namespace(),
            Object::Database(o) => o.namespace(),
        }
        .unwrap_or_default()
    }

    /// `s3bucket/assets`.
    pub fn what(&self) -> String {
        format!("{}/{}", self.kind().resource(), self.name())
    }

    fn deleting(&self) -> bool {
        match self {
            Object::Tenant(o) => o.metadata.deletion_timestamp.is_some(),
            Object::Bucket(o) => o.metadata.deletion_timestamp.is_some(),
            Object::Database(o) => o.metadata.deletion_timestamp.is_some(),
        }
    }

    fn has_status(&self) -> bool {
        match self {
            Object::Tenant(o) => o.status.is_some(),
            Object::Bucket(o) => o.status.is_some(),
            Object::Database(o) => o.status.is_some(),
        }
    }

    fn conditions(&self) -> &[Condition] {
        match self {
            Object::Tenant(o) => o.status.as_ref().map(|s| s.conditions.as_slice()),
            Object::Bucket(o) => o.status.as_ref().map(|s| s.conditions.as_slice()),
            Object::Database(o) => o.status.as_ref().map(|s| s.conditions.as_slice()),
        }
        .unwrap_or_default()
    }

    fn phase(&self) -> Option<String> {
        match self {
            Object::Tenant(o) => o.status.as_ref()?.phase.map(|p| format!("{p:?}")),
            Object::Bucket(o) => o.status.as_ref()?.phase.map(|p| format!("{p:?}")),
            Object::Database(o) => o.status.as_ref()?.phase.map(|p| format!("{p:?}")),
        }
    }

    /// The drain keeper runs on a bucket, if any.
    fn drain(&self) -> Option<&DrainStatus> {
        match self {
            Object::Bucket(b) => running_drain(b),
            _ => None,
        }
    }
}

/// The drain keeper records as running (one it started: `startedAt` set), if any.
pub fn running_drain(bucket: &S3Bucket) -> Option<&DrainStatus> {
    bucket
        .status
        .as_ref()?
        .drain_status
        .as_ref()
        .filter(|d| d.started_at.is_some())
}

/// Condition `type_` when its status is `True`.
pub fn true_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

pub(super) fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A bucket of a tenant, as the tenant's next step needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantBucket {
    pub name: String,
    /// The object count keeper last recorded; `None` before its first usage refresh.
    pub objects: Option<i64>,
    pub deleting: bool,
}

/// The S3Buckets among `buckets` that belong to tenant `tenant` (same namespace, `tenantRef`).
pub fn buckets_of(tenant: &S3Tenant, buckets: &[S3Bucket]) -> Vec<TenantBucket> {
    buckets
        .iter()
        .filter(|b| {
            b.namespace() == tenant.namespace() && b.spec.tenant_ref.name == tenant.name_any()
        })
        .map(|b| TenantBucket {
            name: b.name_any(),
            objects: b.status.as_ref().and_then(|s| s.object_count),
            deleting: b.metadata.deletion_timestamp.is_some(),
        })
        .collect()
}

/// Where an object stands, in the order a person has to act on it: a deletion waiting on a
/// decision comes first, then a failure only a change can fix, then an error keeper retries.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// No status yet: keeper has not reported on the object.
    Unobserved,
    /// `DeletionBlocked=True`: the deletion waits on a decision of yours.
    DeletionBlocked {
        reason: String,
        message: String,
    },
    /// `Stalled=True`: a failure retrying cannot fix.
    Stalled {
        reason: String,
        message: String,
    },
    /// `Synced=False` without `Stalled`: an error keeper retries with backoff.
    Retrying {
        reason: String,
        message: String,
    },
    /// A bucket's drain: objects deleted so far of those there were when it started.
    Draining {
        deleted: i64,
        total: i64,
        message: String,
        stuck: bool,
    },
    /// Being deleted, with nothing blocking.
    Deleting,
    /// `Ready` not True: keeper waits for something and looks again by itself.
    Waiting {
        reason: String,
        message: String,
    },
    Ready,
}

/// How much of a drain is done: objects deleted (never negative, never past the start count) and
/// the count it started with.
pub fn drain_progress(drain: &DrainStatus) -> (i64, i64) {
    let total = drain.initial_object_count.max(0);
    let deleted = (total - drain.previous_object_count).clamp(0, total);
    (deleted, total)
}

pub fn state(obj: &Object) -> State {
    if !obj.has_status() {
        return State::Unobserved;
    }
    let conditions = obj.conditions();
    let reported = |c: &Condition| (c.reason.clone(), c.message.clone());
    if let Some((reason, message)) = true_condition(conditions, DELETION_BLOCKED).map(reported) {
        return State::DeletionBlocked { reason, message };
    }
    if let Some((reason, message)) = true_condition(conditions, STALLED).map(reported) {
        return State::Stalled { reason, message };
    }
    if let Some((reason, message)) = condition(conditions, SYNCED)
        .filter(|c| c.status == "False")
        .map(reported)
    {
        return State::Retrying { reason, message };
    }
    if let Some(drain) = obj.drain() {
        let (deleted, total) = drain_progress(drain);
        return State::Draining {
            deleted,
            total,
            message: drain.message.clone().unwrap_or_default(),
            stuck: drain.stuck,
        };
    }
    if obj.deleting() {
        return State::Deleting;
    }
    if true_condition(conditions, READY).is_some() {
        return State::Ready;
    }
    // Not Ready: Ready's reason, or Reconciling's (the same) while Ready is not written yet.
    let (reason, message) = condition(conditions, READY)
        .or_else(|| condition(conditions, RECONCILING))
        .map(reported)
        .unwrap_or_else(|| {
            (
                "NotReady".to_string(),
                "keeper has not reported Ready yet".to_string(),
            )
        });
    State::Waiting { reason, message }
}

impl State {
    /// What the object waits for, in one phrase.
    pub fn waits_for(&self) -> String {
        match self {
            State::Unobserved => {
                "keeper has not reported on it yet (is keeper running?)".to_string()
            }
            State::DeletionBlocked { reason, message } => {
                format!("your decision: deletion blocked ({reason}): {message}")
            }
            State::Stalled { reason, message } => {
                format!("a change by you, retrying cannot fix it ({reason}): {message}")
            }
            State::Retrying { reason, message } => {
                format!("keeper, which retries an error ({reason}): {message}")
            }
            State::Draining {
                deleted,
                total,
                stuck: false,
                ..
            } => format!("its drain: {deleted} of {total} objects deleted"),
            State::Draining {
                stuck: true,
                message,
                ..
            } => format!("its drain, stuck: no object deleted for the stuck threshold ({message})"),
            State::Deleting => "keeper, which is deleting it".to_string(),
            State::Waiting { reason, message } => format!("{reason}: {message}"),
            State::Ready => "nothing".to_string(),
        }
    }
}

/// The command that turns off `deletionProtection`.
pub(super) fn lift_protection(resource: &str, name: &str, ns: &str) -> String {
    format!(
        "kubectl patch {resource} {name} -n {ns} --type merge -p '{{\"spec\":{{\"deletionProtection\":false}}}}'"
    )
}

/// What to run for a tenant whose deletion waits for its buckets: delete them all, then drain
/// those that may hold objects; when every one is already being deleted, look at the first (the
/// tenant waits on it). Deleting comes first because keeper drains the bucket of a tenant being
/// deleted only on the bucket's own deletion (a live one changes nothing, reason
/// `TenantDeleting`), and `--wait=false` because a bucket with objects stays until drained.
pub(super) fn remove_buckets(buckets: &[TenantBucket], ns: &str) -> Option<String> {
    let live: Vec<&TenantBucket> = buckets.iter().filter(|b| !b.deleting).collect();
    if live.is_empty() {
        return buckets
            .first()
            .map(|b| format!("kubectl keeper why s3bucket/{} -n {ns}", b.name));
    }
    let names: Vec<&str> = live.iter().map(|b| b.name.as_str()).collect();
    let mut commands = vec![format!(
        "kubectl delete s3bucket {} -n {ns} --wait=false",
        names.join(" ")
    )];
    // An unknown count may hide objects; draining an empty bucket is a no-op. A count of 0 may
    // be stale (usage is refreshed every few minutes): the bucket then says BucketNotEmpty.
    commands.extend(
        live.iter()
            .filter(|b| b.objects != Some(0))
            .map(|b| format!("kubectl keeper drain {} -n {ns}", b.name)),
    );
    Some(commands.join(" && "))
}

/// The next command for `obj` in `state`; `None` when nothing is yours to do (keeper goes on by
/// itself). `buckets` are the tenant's buckets (empty for the other kinds).
pub fn next_command(obj: &Object, state: &State, buckets: &[TenantBucket]) -> Option<String> {
    let ns = obj.namespace();
    let name = obj.name();
    let resource = obj.kind().resource();
    let why = format!("kubectl keeper why {} -n {ns}", obj.what());
    let drain_again =
        || format!("lift the object lock or legal hold, then: kubectl keeper drain {name} -n {ns}");
    match state {
        State::DeletionBlocked { reason, .. } => Some(match reason.as_str() {
            "BucketsRemain" => remove_buckets(buckets, &ns).unwrap_or(why),
            "BucketNotEmpty" => format!("kubectl keeper drain {name} -n {ns}"),
            "DrainBlocked" => drain_again(),
            "DeletionProtection" => lift_protection(resource, &name, &ns),
            // The message names what to restore (OwnershipLost, BackendUnavailable, ...).
            _ => why,
        }),
        State::Stalled { reason, .. } if reason == "DrainBlocked" => Some(drain_again()),
        State::Stalled { .. } | State::Retrying { .. } => Some(why),
        State::Draining { stuck: true, .. } => Some(why),
        State::Waiting { reason, .. } => match obj {
            Object::Bucket(b) => {
                let tenant = &b.spec.tenant_ref.name;
                match reason.as_str() {
                    "TenantNotReady" | "TenantAccountMissing" | "TenantCredentialsMissing" => {
                        Some(format!("kubectl keeper why s3tenant/{tenant} -n {ns}"))
                    }
                    // The tenant goes only once its buckets are gone: this one has to go too.
                    "TenantDeleting" => remove_buckets(
                        &[TenantBucket {
                            name: name.clone(),
                            objects: b.status.as_ref().and_then(|s| s.object_count),
                            deleting: false,
                        }],
                        &ns,
                    ),
                    _ => None,
                }
            }
            _ => None,
        },
        State::Draining { stuck: false, .. }
        | State::Deleting
        | State::Ready
        | State::Unobserved => None,
    }
}

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

/// One of keeper's objects.
#[derive(Debug, Clone)]
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

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
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
fn lift_protection(resource: &str, name: &str, ns: &str) -> String {
    format!(
        "kubectl patch {resource} {name} -n {ns} --type merge -p '{{\"spec\":{{\"deletionProtection\":false}}}}'"
    )
}

/// What to run for a tenant whose deletion waits for its buckets: delete them all, then drain
/// those that may hold objects; when every one is already being deleted, look at the first (the
/// tenant waits on it). Deleting comes first because keeper drains the bucket of a tenant being
/// deleted only on the bucket's own deletion (a live one changes nothing, reason
/// `TenantDeleting`), and `--wait=false` because a bucket with objects stays until drained.
fn remove_buckets(buckets: &[TenantBucket], ns: &str) -> Option<String> {
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

/// One line of `kubectl keeper status`, in columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub namespace: String,
    pub what: String,
    pub phase: String,
    pub ready: String,
    pub waits_for: String,
    pub next: String,
}

/// `True (BucketReady)`, `False (TenantNotReady)`, `-` without a Ready condition.
fn ready_column(conditions: &[Condition]) -> String {
    condition(conditions, READY)
        .map(|c| format!("{} ({})", c.status, c.reason))
        .unwrap_or_else(|| "-".to_string())
}

/// The longest text a `status` column shows; `why` shows it whole.
const MAX_WAITS_FOR: usize = 100;

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

pub fn row(obj: &Object, buckets: &[TenantBucket]) -> Row {
    let state = state(obj);
    Row {
        namespace: obj.namespace(),
        what: obj.what(),
        phase: obj.phase().unwrap_or_else(|| "-".to_string()),
        ready: ready_column(obj.conditions()),
        // The next command is never cut: it is meant to be copied.
        waits_for: shorten(&state.waits_for(), MAX_WAITS_FOR),
        next: next_command(obj, &state, buckets).unwrap_or_else(|| "-".to_string()),
    }
}

/// A row for an object that does not decode as its kind (keeper holds such objects apart).
pub fn undecodable_row(kind: Kind, namespace: &str, name: &str, error: &str) -> Row {
    Row {
        namespace: namespace.to_string(),
        what: format!("{}/{name}", kind.resource()),
        phase: "-".to_string(),
        ready: "-".to_string(),
        waits_for: shorten(
            &format!("a fix: it does not decode ({error})"),
            MAX_WAITS_FOR,
        ),
        next: format!("kubectl edit {} {name} -n {namespace}", kind.resource()),
    }
}

/// The rows as aligned columns under a header; the namespace column only with `-A`.
pub fn render(rows: &[Row], all_namespaces: bool) -> Vec<String> {
    let mut table: Vec<Vec<&str>> = vec![];
    let header = ["NAMESPACE", "NAME", "PHASE", "READY", "WAITING FOR", "NEXT"];
    let skip = usize::from(!all_namespaces);
    table.push(header[skip..].to_vec());
    for r in rows {
        let cells = [
            r.namespace.as_str(),
            &r.what,
            &r.phase,
            &r.ready,
            &r.waits_for,
            &r.next,
        ];
        table.push(cells[skip..].to_vec());
    }
    let columns = table[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            table
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    table
        .iter()
        .map(|cells| {
            let mut line = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// How long ago `then` was, as kubectl prints ages: `42s`, `5m`, `3h`, `2d`.
pub fn age(then: Timestamp, now: Timestamp) -> String {
    let seconds = now.duration_since(then).as_secs().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// When an event last happened: the newest of the times it may carry (core/v1 and
/// events.k8s.io writers fill different ones).
fn event_time(event: &Event) -> Option<Timestamp> {
    [
        event
            .series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref())
            .map(|t| t.0),
        event.event_time.as_ref().map(|t| t.0),
        event.last_timestamp.as_ref().map(|t| t.0),
        event.first_timestamp.as_ref().map(|t| t.0),
        event.metadata.creation_timestamp.as_ref().map(|t| t.0),
    ]
    .into_iter()
    .flatten()
    .max()
}

/// The last `limit` events, oldest first, one line each: age, type, reason, message, and how
/// often it happened when more than once.
pub fn recent_events(events: &[Event], now: Timestamp, limit: usize) -> Vec<String> {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| event_time(e));
    let skip = sorted.len().saturating_sub(limit);
    sorted[skip..]
        .iter()
        .map(|e| {
            let when = event_time(e).map_or_else(|| "-".to_string(), |t| age(t, now));
            let count = e
                .series
                .as_ref()
                .map(|s| s.count.unwrap_or(1))
                .or(e.count)
                .filter(|n| *n > 1)
                .map(|n| format!(" (x{n})"))
                .unwrap_or_default();
            format!(
                "{when:>4} ago  {:<7}  {}: {}{count}",
                e.type_.as_deref().unwrap_or("-"),
                e.reason.as_deref().unwrap_or("-"),
                e.message.as_deref().unwrap_or("").trim()
            )
        })
        .collect()
}

/// The backend state keeper records in status, as `(label, value)` pairs.
pub fn backend_facts(obj: &Object, now: Timestamp) -> Vec<(&'static str, String)> {
    let mut facts = Vec::new();
    match obj {
        Object::Tenant(t) => {
            facts.push(("provider", t.spec.provider.clone()));
            let Some(s) = &t.status else { return facts };
            if let Some(id) = &s.account_id {
                facts.push(("account id", id.clone()));
            }
            if let Some(endpoint) = &s.s3_endpoint {
                facts.push(("S3 endpoint", endpoint.clone()));
            }
            if let Some(secret) = &s.credentials_secret {
                facts.push(("credentials Secret", secret.clone()));
            }
            if let Some(n) = s.bucket_count {
                facts.push(("buckets", n.to_string()));
            }
        }
        Object::Bucket(b) => {
            facts.push(("tenant", b.spec.tenant_ref.name.clone()));
            if b.spec.deletion_policy == DeletionPolicy::Retain {
                facts.push(("deletion policy", "Retain: the bucket stays".to_string()));
            }
            let Some(s) = &b.status else { return facts };
            if let Some(name) = &s.bucket_name {
                facts.push(("bucket name", name.clone()));
            }
            facts.push((
                "credentials Secret",
                bucket_credentials_secret_name(&b.name_any()),
            ));
            if let Some(n) = s.object_count {
                let bytes = s
                    .object_bytes
                    .map(|b| format!(", {b} bytes"))
                    .unwrap_or_default();
                facts.push(("objects", format!("{n}{bytes} (at the last usage refresh)")));
            }
            if let Some(drain) = running_drain(b) {
                let (deleted, total) = drain_progress(drain);
                let started = drain
                    .started_at
                    .as_ref()
                    .map(|t| format!(", started {} ago", age(t.0, now)))
                    .unwrap_or_default();
                let progress_at = drain
                    .last_progress_at
                    .as_ref()
                    .map(|t| format!(", last progress {} ago", age(t.0, now)))
                    .unwrap_or_default();
                let stuck = if drain.stuck { ", STUCK" } else { "" };
                let request = drain
                    .request
                    .as_deref()
                    .map(|r| format!(", request {r}"))
                    .unwrap_or_default();
                facts.push((
                    "drain",
                    format!(
                        "{deleted} of {total} objects deleted{started}{progress_at}{stuck}{request}"
                    ),
                ));
            }
            if let Some(handled) = &s.handled_requests {
                for (label, value) in [
                    ("drain handled", &handled.drain),
                    ("rotation handled", &handled.rotate_credentials),
                ] {
                    if let Some(v) = value {
                        facts.push((label, v.clone()));
                    }
                }
            }
        }
        Object::Database(d) => {
            let Some(s) = &d.status else { return facts };
            if let Some(id) = &s.instance_id {
                facts.push(("RDS instance", id.clone()));
            }
            if let Some(region) = &s.region {
                facts.push(("region", region.clone()));
            }
            if let Some(account) = &s.account_id {
                facts.push(("AWS account", account.clone()));
            }
            if let Some(e) = &s.endpoint {
                facts.push(("endpoint", format!("{}:{}", e.address, e.port)));
            }
            if let Some(snapshot) = &s.final_snapshot_id {
                facts.push(("final snapshot", snapshot.clone()));
            }
        }
    }
    facts
}

/// The whole story of one object for `kubectl keeper why`: its conditions, what blocks its
/// deletion, the backend state status records, its recent events, what it waits for and the
/// next command.
pub fn explain(
    obj: &Object,
    buckets: &[TenantBucket],
    events: &[Event],
    now: Timestamp,
) -> Vec<String> {
    let state = state(obj);
    let mut lines = vec![format!(
        "{} in namespace {}: phase {}",
        obj.what(),
        obj.namespace(),
        obj.phase().unwrap_or_else(|| "-".to_string())
    )];
    lines.push("Conditions:".to_string());
    if obj.conditions().is_empty() {
        lines.push("  none yet".to_string());
    }
    for c in obj.conditions() {
        let message = if c.message.is_empty() {
            String::new()
        } else {
            format!(": {}", c.message)
        };
        lines.push(format!(
            "  {}={} {} (since {} ago){message}",
            c.type_,
            c.status,
            c.reason,
            age(c.last_transition_time.0, now)
        ));
    }
    lines.push(
        match (
            true_condition(obj.conditions(), DELETION_BLOCKED),
            obj.deleting(),
        ) {
            (Some(c), _) => format!("Deletion: blocked ({}): {}", c.reason, c.message),
            (None, true) => "Deletion: in progress, nothing blocks it".to_string(),
            (None, false) => "Deletion: not requested".to_string(),
        },
    );
    if obj.kind() == Kind::Tenant && !buckets.is_empty() {
        let listed: Vec<String> = buckets
            .iter()
            .map(|b| {
                let objects = b
                    .objects
                    .map_or("objects unknown".to_string(), |n| format!("{n} objects"));
                let deleting = if b.deleting { ", being deleted" } else { "" };
                format!("{} ({objects}{deleting})", b.name)
            })
            .collect();
        lines.push(format!("S3Buckets of this tenant: {}", listed.join(", ")));
    }
    lines.push("Backend:".to_string());
    for (label, value) in backend_facts(obj, now) {
        lines.push(format!("  {label}: {value}"));
    }
    let shown = recent_events(events, now, 10);
    lines.push(if shown.len() < events.len() {
        format!("Events (the last {} of {}):", shown.len(), events.len())
    } else {
        "Events:".to_string()
    });
    if shown.is_empty() {
        lines.push("  none (events expire after an hour by default)".to_string());
    }
    lines.extend(shown.into_iter().map(|l| format!("  {l}")));
    lines.push(format!("Waiting for: {}", state.waits_for()));
    lines.push(match next_command(obj, &state, buckets) {
        Some(command) => format!("Next: {command}"),
        None => "Next: nothing to do, keeper goes on by itself".to_string(),
    });
    lines
}

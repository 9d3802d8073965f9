//! How the decisions read on a terminal: the rows of `status`, ages, recent events, the backend
//! state status records, and the whole text of `why`.

use super::*;

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
pub(super) fn ready_column(conditions: &[Condition]) -> String {
    condition(conditions, READY)
        .map(|c| format!("{} ({})", c.status, c.reason))
        .unwrap_or_else(|| "-".to_string())
}

/// The longest text a `status` column shows; `why` shows it whole.
pub(super) const MAX_WAITS_FOR: usize = 100;

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
pub(super) fn event_time(event: &Event) -> Option<Timestamp> {
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

//! Server-side apply: merge the applied configuration, remove what the manager stops applying
//! unless someone else owns it, refuse (409) changes to fields other managers own unless
//! forced, and record the applier's fields.

use super::fieldset::{FieldSet, canonical_json, display};
use super::typed::{self, Ty};
use super::{Entry, Managed, Operation, Scope, Writer, per_version, server_fields};
use crate::error::{ApiError, ApiResult};
use serde_json::{Value, json};

/// The annotation `kubectl apply` (client-side) keeps its configuration in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// kube treats this manager as kubectl's server-side apply, which takes over from client-side
/// apply.
const KUBECTL: &str = "kubectl";

/// The result of an apply: the object (as the request's version serves it, before the
/// kind's defaults and rules) and its managed fields.
pub struct Applied {
    pub object: Value,
    pub managed: Managed,
}

/// The managed fields of an object an apply creates.
pub fn create(scope: &Scope, writer: &Writer, config: &Value) -> Managed {
    let set = scope.ownable(&typed::field_set(config, Ty::of(&scope.request)));
    let mut managed = Managed::default();
    managed.put(writer.entry(Operation::Apply, set));
    managed.entries.retain(|e| !e.set.is_empty());
    managed
}

/// Apply `config` (the request's version, unknown fields pruned) to the stored object `live`.
pub fn apply(
    scope: &Scope,
    writer: &Writer,
    live: &Value,
    config: &Value,
    force: bool,
) -> ApiResult<Applied> {
    let ty = Ty::of(&scope.request);
    let version = &writer.api_version;
    let (live_view, _) = scope
        .view(version, live)
        .ok_or_else(|| ApiError::internal("the requested version is not served"))?;
    let mut managed = Managed::of(live);
    if managed.entries.is_empty() {
        // Whatever the object holds before its first apply belongs to someone else.
        if let Some(c) = scope.compare(version, None, live) {
            let mut before = writer.entry(Operation::Update, c.changed());
            before.manager = "before-first-apply".into();
            managed.put(before);
            managed.entries.retain(|e| !e.set.is_empty());
        }
    }
    let applied = scope.owned(&typed::field_set(config, ty));
    let mine = writer.entry(Operation::Apply, FieldSet::default());
    let last = managed.take(&mine);
    let mut owned = applied.union(server_fields());
    for e in &managed.entries {
        owned = owned.union(&e.set);
    }
    let mut merged = live_view.clone();
    typed::merge(&mut merged, config, ty);
    let object = prune(&merged, last.as_ref().map(|e| &e.set), &owned, ty);

    let stored = crate::server::unview(&scope.request, &object);
    let Some(cmp) = scope.compare(version, Some(live), &stored) else {
        return Err(ApiError::internal("the requested version is not served"));
    };
    let others = per_version(
        scope,
        version,
        &cmp,
        std::mem::take(&mut managed.entries),
        Some(live),
        &stored,
    );
    let conflicts: Vec<(&Entry, FieldSet)> = others
        .iter()
        .map(|(e, c)| (e, e.set.intersection(&c.changed())))
        .filter(|(_, s)| !s.is_empty())
        .collect();
    if !conflicts.is_empty() && !force {
        let allowed = (writer.manager == KUBECTL)
            .then(|| last_applied_fields(&live_view, ty, version))
            .flatten()
            .unwrap_or_default();
        let refused: Vec<(&Entry, FieldSet)> = conflicts
            .iter()
            .map(|(e, s)| (*e, s.difference(&allowed)))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        if !refused.is_empty() {
            return Err(conflict_error(refused));
        }
    }
    for (mut e, c) in others {
        // Forced: the applier takes the fields over; removed fields belong to no one.
        e.set = e.set.difference(&c.changed()).difference(&c.removed);
        managed.entries.push(e);
    }
    managed.entries.retain(|e| !e.set.is_empty());
    let mut mine = writer.entry(Operation::Apply, applied.difference(server_fields()));
    if object == live_view {
        // Nothing changed: the entry keeps its time (a new co-owner has none), as in kube.
        mine.time = last.and_then(|e| e.time);
    }
    if !mine.set.is_empty() {
        managed.put(mine);
    }
    managed.cap();
    let mut object = object;
    if writer.manager == KUBECTL {
        update_last_applied(&mut object, config);
    }
    Ok(Applied { object, managed })
}

/// Remove from `merged` the fields the applier applied last time (`last`) and no manager owns
/// now (`owned`, the new configuration included), as structured-merge-diff's `prune` does:
/// struct fields go with their last owned child, list items and map entries with everything
/// in them.
fn prune(merged: &Value, last: Option<&FieldSet>, owned: &FieldSet, ty: Ty) -> Value {
    let Some(last) = last.filter(|l| !l.is_empty()) else {
        return merged.clone();
    };
    let named = |s: &FieldSet| typed::ensure_named(s, ty);
    let fields_of = |v: &Value| named(&typed::field_set(v, ty));
    let without = |s: &FieldSet| typed::remove(merged, s, ty).unwrap_or_else(|| json!({}));
    let last = named(last);
    let all = fields_of(merged);
    let unowned_last = without(&last);
    let orphans = all.difference(&fields_of(&unowned_last).union(&named(owned)));
    let kept = without(&orphans);
    without(&all.difference(&fields_of(&kept)).intersection(&last))
}

/// The fields of `kubectl apply`'s last-applied annotation that still hold the applied value:
/// kubectl's server-side apply may take them over from client-side apply without a conflict.
fn last_applied_fields(live: &Value, ty: Ty, version: &str) -> Option<FieldSet> {
    let text = live["metadata"]["annotations"][LAST_APPLIED].as_str()?;
    let last: Value = serde_json::from_str(text).ok()?;
    if last["apiVersion"] != version {
        return None;
    }
    let c = typed::compare(&last, live, ty);
    Some(
        typed::field_set(&last, ty)
            .difference(&c.modified)
            .difference(&c.added)
            .difference(&c.removed),
    )
}

/// After kubectl's server-side apply, the last-applied annotation (when the object has one)
/// holds the applied configuration, so that a later client-side apply diffs against it.
fn update_last_applied(object: &mut Value, config: &Value) {
    let has = object["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .is_some_and(|s| !s.is_empty());
    if !has {
        return;
    }
    let mut config = config.clone();
    if let Some(a) = config
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED);
    }
    object["metadata"]["annotations"][LAST_APPLIED] =
        json!(format!("{}\n", canonical_json(&config)));
}

/// kube's 409 for apply conflicts: one cause per field, the message grouped by manager.
fn conflict_error(mut conflicts: Vec<(&Entry, FieldSet)>) -> ApiError {
    conflicts.sort_by_key(|(e, _)| e.identifier());
    let mut causes = Vec::new();
    let mut lines = Vec::new();
    for (e, set) in &conflicts {
        let who = e.describe();
        lines.push(format!("conflicts with {who}:"));
        for p in set.paths() {
            let field = display(&p);
            lines.push(format!("- {field}"));
            causes.push(json!({"reason": "FieldManagerConflict", "message": format!("conflict with {who}"), "field": field}));
        }
    }
    let message = match causes.as_slice() {
        [only] => format!(
            "Apply failed with 1 conflict: {}: {}",
            only["message"].as_str().unwrap_or_default(),
            only["field"].as_str().unwrap_or_default()
        ),
        _ => format!(
            "Apply failed with {} conflicts: {}",
            causes.len(),
            lines.join("\n")
        ),
    };
    let mut e = ApiError::new(409, "Conflict", message);
    e.details = Some(json!({ "causes": causes }));
    e
}

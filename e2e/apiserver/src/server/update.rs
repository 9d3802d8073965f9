//! Updates and patches (merge, JSON, strategic merge, server-side apply), status subresource.

use super::*;

/// Shared tail of update and patch: `new` is the client's desired object (stored form).
fn finish_update(
    st: &State,
    t: &Target,
    ctx: &Ctx,
    current: &Value,
    mut new: Value,
    require_rv: bool,
    ownership: Ownership,
) -> ApiResult<Plan> {
    let def = &t.def;
    let requested = new["metadata"]["managedFields"].clone();
    let name = meta_str(current, "name").to_string();
    let ns = ns_of(t).to_string();
    let new_name = meta_str(&new, "name");
    if !new_name.is_empty() && new_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({new_name}) does not match the name on the URL ({name})"
        )));
    }
    if def.namespaced {
        let nns = meta_str(&new, "namespace");
        if !nns.is_empty() && nns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let cur_rv = meta_str(current, "resourceVersion").to_string();
    let new_rv = meta_str(&new, "resourceVersion").to_string();
    let new_uid = meta_str(&new, "uid");
    if !new_uid.is_empty() && new_uid != meta_str(current, "uid") {
        return Err(ApiError::conflict(
            &def.group,
            &def.plural,
            &name,
            &format!(
                "Precondition failed: UID in precondition: {new_uid}, UID in object meta: {}",
                meta_str(current, "uid")
            ),
        ));
    }
    if new_rv.is_empty() {
        if require_rv {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                &name,
                vec![Cause::invalid(
                    "metadata.resourceVersion",
                    &json!("0x0"),
                    "must be specified for an update",
                )],
            ));
        }
    } else if new_rv != cur_rv {
        return Err(ApiError::stale(&def.group, &def.plural, &name));
    }
    if t.sub == "status" {
        let status = new.get("status").cloned();
        new = current.clone();
        match status {
            Some(s) => new["status"] = s,
            None => {
                new.as_object_mut().map(|o| o.remove("status"));
            }
        }
    } else {
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "name",
            "namespace",
        ] {
            match current["metadata"].get(k) {
                Some(v) => new["metadata"][k] = v.clone(),
                None => {
                    new["metadata"].as_object_mut().map(|m| m.remove(k));
                }
            }
        }
        new["metadata"]
            .as_object_mut()
            .map(|m| m.remove("managedFields"));
        if def.status_sub {
            match current.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|o| o.remove("status"));
                }
            }
        }
    }
    new["metadata"]["resourceVersion"] = json!(cur_rv);
    if is_deleting(current) {
        let old_f = finalizers(current);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .collect();
        if !added.is_empty() {
            let list = added
                .iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                &name,
                vec![Cause::forbidden(
                    "metadata.finalizers",
                    format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                    ),
                )],
            ));
        }
    }
    let causes = crate::meta::validate(&new);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&def.group, &def.kind, &name, causes));
    }
    strategy(st, def, &mut new, Some(current))?;
    let mut warnings = Vec::new();
    cr_schema(def, &mut new, Some(current), ctx, &mut warnings, &name)?;
    let spec_keys: &[&str] = if def.status_sub {
        &["metadata", "status"]
    } else {
        &["metadata"]
    };
    if without(&new, spec_keys) != without(current, spec_keys) {
        let g = current["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(g);
    }
    match ownership {
        Ownership::Update => managed::update(
            &scope(st, t),
            &ctx.writer(t),
            Some(current),
            &requested,
            &mut new,
        ),
        Ownership::Decided(m) => m.store(&mut new),
    }
    if managed::only_times_differ(&new, current) {
        new = current.clone();
    }
    let noop = new == *current;
    let hooks = if noop {
        vec![]
    } else {
        webhook::matching(
            st,
            def,
            "UPDATE",
            &t.sub,
            &ns,
            Some(&view(def, &new)),
            Some(&view(def, current)),
        )
    };
    Ok(Plan {
        op: Op::Update,
        ns,
        name,
        old: Some(current.clone()),
        new: Some(new),
        noop,
        policy: String::new(),
        warnings,
        hooks,
        code: 200,
    })
}

fn current(st: &State, t: &Target) -> ApiResult<Value> {
    let name = t.name.as_deref().unwrap_or_default();
    st.get(&t.def.store_key, ns_of(t), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&t.def.group, &t.def.plural, name))
}

pub(super) fn plan_update(st: &State, t: &Target, ctx: &Ctx) -> ApiResult<Plan> {
    let body = ctx.body_value()?;
    check_type(&t.def, &body)?;
    let cur = current(st, t)?;
    let new = unview(&t.def, &body);
    finish_update(st, t, ctx, &cur, new, t.def.crd, Ownership::Update)
}

pub(super) fn plan_patch(st: &State, t: &Target, ctx: &Ctx) -> ApiResult<Plan> {
    let def = &t.def;
    let ct = ctx.content_type();
    let name = t.name.clone().unwrap_or_default();
    if ct == "application/apply-patch+yaml" || ct == "application/apply-patch+json" {
        if ctx.q("fieldManager").is_none_or(str::is_empty) {
            return Err(invalid_patch_options(Cause::new(
                "FieldValueRequired",
                "fieldManager",
                "Required value: is required for apply patch",
            )));
        }
        let applied: Value = serde_yaml::from_slice(&ctx.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !applied.is_object()
            || applied["apiVersion"].as_str().is_none_or(str::is_empty)
            || applied["kind"].as_str().is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply patch",
            ));
        }
        let an = applied["metadata"]["name"].as_str().unwrap_or_default();
        if !an.is_empty() && an != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({an}) does not match the name on the URL ({name})"
            )));
        }
        return plan_apply(st, t, ctx, applied);
    }
    if ctx.q("force").is_some() {
        return Err(invalid_patch_options(Cause::forbidden(
            "force",
            "may not be specified for non-apply patch",
        )));
    }
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media_type(&ct));
    }
    let cur = current(st, t)?;
    let mut patched = view(def, &cur);
    let p: Value = serde_json::from_slice(&ctx.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    match ct.as_str() {
        "application/merge-patch+json" => {
            if !p.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            patch::merge_patch(&mut patched, &p)
        }
        "application/json-patch+json" => {
            if let Err((test, msg)) = patch::json_patch(&mut patched, &p) {
                return Err(if test {
                    ApiError::new(422, "Invalid", msg)
                } else {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {msg}"
                        ),
                    )
                });
            }
        }
        "application/strategic-merge-patch+json" => {
            if def.crd {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".to_string(),
                ));
            }
            patch::strategic_merge(&mut patched, &p)
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    }
    check_type(def, &patched)?;
    let new = unview(def, &patched);
    finish_update(st, t, ctx, &cur, new, false, Ownership::Update)
}

fn invalid_patch_options(cause: Cause) -> ApiError {
    ApiError::invalid("meta.k8s.io", "PatchOptions", "", vec![cause])
}

/// Server-side apply of `applied` (already checked for apiVersion, kind and name).
fn plan_apply(st: &State, t: &Target, ctx: &Ctx, mut applied: Value) -> ApiResult<Plan> {
    let def = &t.def;
    let name = t.name.clone().unwrap_or_default();
    let av = applied["apiVersion"].as_str().unwrap_or_default();
    let kind = applied["kind"].as_str().unwrap_or_default();
    if av != def.api_version() || kind != def.kind {
        // Go's GroupVersionKind as kube prints it: `group/version, Kind=kind`.
        let (g, v) = av.split_once('/').unwrap_or(("", av));
        return Err(ApiError::bad_request(format!(
            "invalid object type: {g}/{v}, Kind={kind}"
        )));
    }
    if !applied["metadata"]["managedFields"].is_null() {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let wanted_rv = applied["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string);
    if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    let mut warnings = Vec::new();
    prune_unknown(def, &mut applied, ctx, &mut warnings)?;
    let scope = scope(st, t);
    let writer = ctx.writer(t);
    let Some(cur) = st.get(&def.store_key, ns_of(t), &name).cloned() else {
        if !t.sub.is_empty() {
            return Err(ApiError::not_found(&def.group, &def.plural, &name));
        }
        let owners = managed::apply::create(&scope, &writer, &applied);
        applied["metadata"]["name"] = json!(name);
        let mut plan = plan_create(st, t, ctx, Some(applied), Ownership::Decided(owners))?;
        plan.warnings.splice(0..0, warnings);
        return Ok(plan);
    };
    let force = ctx.q("force") == Some("true");
    let result = managed::apply::apply(&scope, &writer, &cur, &applied, force)?;
    let mut merged = result.object;
    if let Some(rv) = wanted_rv {
        merged["metadata"]["resourceVersion"] = json!(rv);
    }
    check_type(def, &merged)?;
    let new = unview(def, &merged);
    let mut plan = finish_update(
        st,
        t,
        ctx,
        &cur,
        new,
        false,
        Ownership::Decided(result.managed),
    )?;
    plan.warnings.splice(0..0, warnings);
    Ok(plan)
}

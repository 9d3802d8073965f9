//! Deletes: preconditions, finalizers, propagation policies, deletecollection.

use super::*;

pub(super) fn plan_delete(
    st: &State,
    t: &Target,
    ctx: &Ctx,
    only: Option<(String, String)>,
) -> ApiResult<Plan> {
    let def = &t.def;
    let (ns, name) =
        only.unwrap_or_else(|| (ns_of(t).to_string(), t.name.clone().unwrap_or_default()));
    let cur = st
        .get(&def.store_key, &ns, &name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, &name))?;
    if def.group.is_empty()
        && def.plural == "namespaces"
        && matches!(name.as_str(), "default" | "kube-system" | "kube-public")
    {
        return Err(ApiError::forbidden(
            "",
            "namespaces",
            &name,
            "this namespace may not be deleted",
        ));
    }
    let opts: Value = if ctx.body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&ctx.body).unwrap_or(json!({}))
    };
    let pre = &opts["preconditions"];
    if let Some(uid) = pre["uid"].as_str().filter(|u| !u.is_empty())
        && uid != meta_str(&cur, "uid")
    {
        return Err(ApiError::conflict(
            &def.group,
            &def.plural,
            &name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&cur, "uid")
            ),
        ));
    }
    if let Some(rv) = pre["resourceVersion"].as_str().filter(|u| !u.is_empty())
        && rv != meta_str(&cur, "resourceVersion")
    {
        return Err(ApiError::conflict(
            &def.group,
            &def.plural,
            &name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(&cur, "resourceVersion")
            ),
        ));
    }
    let mut policy = opts["propagationPolicy"]
        .as_str()
        .or(ctx.q("propagationPolicy"))
        .unwrap_or("Background")
        .to_string();
    if opts["orphanDependents"].as_bool() == Some(true) || ctx.q("orphanDependents") == Some("true")
    {
        policy = "Orphan".into();
    }
    if !matches!(policy.as_str(), "Background" | "Foreground" | "Orphan") {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![Cause::new(
                "FieldValueNotSupported",
                "propagationPolicy",
                format!(
                    "Unsupported value: {policy:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )],
        ));
    }
    let hooks = webhook::matching(st, def, "DELETE", "", &ns, None, Some(&view(def, &cur)));
    Ok(Plan {
        op: Op::Delete,
        ns,
        name,
        old: Some(cur),
        new: None,
        noop: false,
        policy,
        warnings: vec![],
        hooks,
        code: 200,
    })
}

pub(super) async fn delete_collection(
    shared: &Arc<Shared>,
    t: &Target,
    ctx: &Ctx,
) -> ApiResult<Out> {
    let filter = Filter::new(t, ctx)?;
    let keys: Vec<(String, String)> = {
        let st = shared.lock();
        st.lookup(&t.def.store_key, &filter.lookup(None))
            .filter(|(_, o)| filter.matches(o))
            .map(|(k, _)| k.clone())
            .collect()
    };
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    for k in keys {
        let before = shared.lock().get(&t.def.store_key, &k.0, &k.1).cloned();
        match write(shared, "delete", t, ctx, Some(k)).await {
            Ok(o) => {
                warnings.extend(o.warnings);
                if let Some(b) = before {
                    items.push(view(&t.def, &b));
                }
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = shared.lock().rv;
    Ok(Out {
        code: 200,
        body: Ok(
            json!({"kind": t.def.list_kind(), "apiVersion": t.def.api_version(), "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
        ),
        warnings,
    })
}

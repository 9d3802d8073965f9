//! Writes: plan under the lock, run admission webhooks unlocked, commit under the lock.

use super::*;

// ---------------------------------------------------------------------------------------------
// Writes: plan under the lock, run admission webhooks unlocked, commit under the lock.

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    Create,
    Update,
    Delete,
}

pub(super) struct Plan {
    pub(super) op: Op,
    pub(super) ns: String,
    pub(super) name: String,
    /// Stored object the plan was based on.
    pub(super) old: Option<Value>,
    /// Stored object to write.
    pub(super) new: Option<Value>,
    pub(super) noop: bool,
    pub(super) policy: String,
    pub(super) warnings: Vec<String>,
    pub(super) hooks: Vec<webhook::Hook>,
    pub(super) code: u16,
}

/// How a create or update records field ownership.
pub(super) enum Ownership {
    /// The writer takes the fields it changes.
    Update,
    /// Decided already (server-side apply).
    Decided(managed::Managed),
}

pub(super) async fn write(
    shared: &Arc<Shared>,
    verb: &str,
    t: &Target,
    ctx: &Ctx,
    only: Option<(String, String)>,
) -> ApiResult<Out> {
    for _ in 0..20 {
        let plan = {
            let st = shared.lock();
            match verb {
                "create" => plan_create(&st, t, ctx, None, Ownership::Update)?,
                "update" => plan_update(&st, t, ctx)?,
                "patch" => plan_patch(&st, t, ctx)?,
                _ => plan_delete(&st, t, ctx, only.clone())?,
            }
        };
        let mut warnings = plan.warnings.clone();
        if !plan.hooks.is_empty() {
            let request = admission_request(t, ctx, &plan);
            warnings.extend(webhook::call_all(&plan.hooks, &request).await?);
        }
        let mut st = shared.lock();
        let current = st.get(&t.def.store_key, &plan.ns, &plan.name).cloned();
        let cur_rv = current
            .as_ref()
            .map(|c| meta_str(c, "resourceVersion").to_string());
        let plan_rv = plan
            .old
            .as_ref()
            .map(|c| meta_str(c, "resourceVersion").to_string());
        if cur_rv != plan_rv {
            continue;
        }
        let mut out = commit(&mut st, t, ctx, plan)?;
        out.warnings.extend(warnings);
        return Ok(out);
    }
    Err(ApiError::new(
        409,
        "Conflict",
        "too many concurrent modifications; try again",
    ))
}

fn admission_request(t: &Target, ctx: &Ctx, plan: &Plan) -> Value {
    let op = match plan.op {
        Op::Create => "CREATE",
        Op::Update => "UPDATE",
        Op::Delete => "DELETE",
    };
    let d = &t.def;
    let to_view = |o: &Option<Value>| o.as_ref().map(|o| view(d, o)).unwrap_or(Value::Null);
    let opts_kind = match plan.op {
        Op::Create => "CreateOptions",
        Op::Update => "UpdateOptions",
        Op::Delete => "DeleteOptions",
    };
    let mut options = json!({"kind": opts_kind, "apiVersion": "meta.k8s.io/v1"});
    if let Some(fm) = ctx.q("fieldManager") {
        options["fieldManager"] = json!(fm);
    }
    let kind = json!({"group": d.group, "version": d.version, "kind": d.kind});
    let resource = json!({"group": d.group, "version": d.version, "resource": d.plural});
    let mut r = json!({
        "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": plan.name, "operation": op,
        "userInfo": ctx.user,
        "object": if plan.op == Op::Delete { Value::Null } else { to_view(&plan.new) },
        "oldObject": if plan.op == Op::Create { Value::Null } else { to_view(&plan.old) },
        "dryRun": ctx.dry_run(),
        "options": options,
    });
    if d.namespaced {
        r["namespace"] = json!(plan.ns);
    }
    if !t.sub.is_empty() {
        r["subResource"] = json!(t.sub);
    }
    r
}

fn commit(st: &mut State, t: &Target, ctx: &Ctx, plan: Plan) -> ApiResult<Out> {
    let def = &t.def;
    let key = def.store_key.clone();
    let dry = ctx.dry_run();
    let out = match plan.op {
        Op::Create => {
            if st.get(&key, &plan.ns, &plan.name).is_some() {
                return Err(ApiError::already_exists(
                    &def.group,
                    &def.plural,
                    &plan.name,
                ));
            }
            check_namespace(st, def, &plan.ns, &plan.name)?;
            let new = plan.new.expect("create has an object");
            let mut new = if dry {
                new
            } else {
                st.insert(&key, &plan.ns, &plan.name, new)
            };
            if dry {
                new["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("resourceVersion"));
            }
            Out::json(plan.code, view(def, &new))
        }
        Op::Update => {
            let new = plan.new.expect("update has an object");
            if plan.noop || dry {
                Out::json(
                    200,
                    view(
                        def,
                        if plan.noop {
                            plan.old.as_ref().expect("old")
                        } else {
                            &new
                        },
                    ),
                )
            } else {
                let stored = st.replace(&key, &plan.ns, &plan.name, new);
                Out::json(200, view(def, &stored))
            }
        }
        Op::Delete => {
            let old = plan.old.expect("delete has an object");
            if dry {
                Out::json(200, view(def, &old))
            } else {
                let (obj, gone) = st
                    .delete(&key, &plan.ns, &plan.name, &plan.policy)
                    .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, &plan.name))?;
                if gone {
                    let mut details = json!({"name": plan.name, "kind": def.plural, "uid": meta_str(&obj, "uid")});
                    if !def.group.is_empty() {
                        details["group"] = json!(def.group);
                    }
                    Out::json(
                        200,
                        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
                    )
                } else {
                    Out::json(200, view(def, &obj))
                }
            }
        }
    };
    if !dry {
        st.gc();
    }
    let mut out = out;
    if let Ok(v) = out.body {
        out.body = Ok(if plan.op == Op::Delete && v["kind"] == "Status" {
            v
        } else {
            shape_one(def, v, ctx, st.rv)
        });
    }
    Ok(out)
}

//! The tenant API (`/org/*`, tenant token): the caller's permissions and the routing of its
//! endpoints to containers, users, groups and S3 access keys.

use super::*;

// ---------------------------------------------------------------------------------------------
// Tenant API
// ---------------------------------------------------------------------------------------------

pub(super) struct Caller {
    pub(super) account_id: String,
    pub(super) user_id: String,
}

/// Management permissions of the caller (root user: everything; others: their groups' flags).
#[derive(Default)]
pub(super) struct Perms {
    pub(super) root_access: bool,
    pub(super) manage_all_containers: bool,
    pub(super) view_all_containers: bool,
    pub(super) manage_own_s3_credentials: bool,
}

fn perms(ctx: &Ctx, caller: &Caller) -> Result<Perms, ApiError> {
    let st = ctx.lock();
    let user = st.users.get(&caller.user_id).ok_or_else(unauthorized)?;
    if user.root {
        return Ok(Perms {
            root_access: true,
            manage_all_containers: true,
            view_all_containers: true,
            manage_own_s3_credentials: true,
        });
    }
    let mut p = Perms::default();
    for g in st.user_groups(user) {
        p.root_access |= g.management_flag("rootAccess");
        p.manage_all_containers |= g.management_flag("manageAllContainers");
        p.view_all_containers |= g.management_flag("viewAllContainers");
        p.manage_own_s3_credentials |= g.management_flag("manageOwnS3Credentials");
    }
    if p.root_access {
        p.manage_all_containers = true;
        p.view_all_containers = true;
        p.manage_own_s3_credentials = true;
    }
    Ok(p)
}

pub(super) fn need(cond: bool, what: &str) -> Result<(), ApiError> {
    if cond {
        Ok(())
    } else {
        Err(forbidden(format!(
            "the caller lacks the permission to {what}"
        )))
    }
}

pub(super) async fn org(ctx: &Arc<Ctx>, rq: &mut Rq, caller: &Caller, rest: &[&str]) -> ApiResult {
    let m = rq.method.clone();
    let p = perms(ctx, caller)?;
    let view = p.view_all_containers || p.manage_all_containers;
    match rest {
        ["config"] => {
            rq.op = "getConfig";
            let token = bearer(&rq.headers).unwrap_or_default();
            let st = ctx.lock();
            let expires = st.tokens.get(&token).map(|t| rfc3339(t.expires));
            let user = st.users.get(&caller.user_id).map(User::to_json);
            ok(json!({
                "auth": {"accountId": caller.account_id},
                "token": {"expires": expires},
                "user": user,
                "productVersion": PRODUCT_VERSION,
            }))
        }
        ["config", "product-version"] => {
            rq.op = "getProductVersion";
            ok(json!({"productVersion": PRODUCT_VERSION}))
        }
        ["regions"] => {
            rq.op = "listRegions";
            ok(json!(ctx.cfg.regions))
        }
        ["usage"] => {
            rq.op = "getUsage";
            need(view, "view bucket usage")?;
            let detail = rq.q_bool("includeBucketDetail")?;
            rq.q_bool("strictConsistency")?;
            ok(account_usage(ctx, &caller.account_id, detail).await?)
        }
        ["containers"] => match m {
            Method::GET => {
                rq.op = "listContainers";
                need(view, "view buckets")?;
                list_containers(ctx, rq, caller)
            }
            Method::POST => {
                rq.op = "createContainer";
                need(p.manage_all_containers, "create buckets")?;
                create_container(ctx, rq, caller).await
            }
            _ => Err(method_not_allowed()),
        },
        ["containers", name, sub @ ..] => {
            let bucket = owned_bucket(ctx, caller, name)?;
            container(ctx, rq, &p, bucket, sub).await
        }
        ["users", "user", short] => {
            rq.op = "getUserByName";
            need(p.root_access, "manage users")?;
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            let st = ctx.lock();
            let u = st
                .users
                .values()
                .find(|u| u.account_id == caller.account_id && u.short_name() == *short)
                .ok_or_else(|| not_found(format!("user {short} not found")))?;
            ok(u.to_json())
        }
        ["users"] => match m {
            Method::GET => {
                rq.op = "listUsers";
                need(p.root_access, "manage users")?;
                let st = ctx.lock();
                let federated = rq.q("type") == Some("federated");
                let items = st
                    .users
                    .values()
                    .filter(|u| u.account_id == caller.account_id && !federated)
                    .map(|u| (u.urn(), u.to_json()))
                    .collect();
                ok(Value::Array(page(items, rq, Some(500))?))
            }
            Method::POST => {
                rq.op = "createUser";
                need(p.root_access, "manage users")?;
                create_user(ctx, rq, caller)
            }
            _ => Err(method_not_allowed()),
        },
        ["users", uref, "s3-access-keys", rest @ ..] => {
            let user_id = resolve_user(ctx, caller, uref)?;
            if user_id == caller.user_id && *uref == "current-user" {
                need(p.manage_own_s3_credentials, "manage own S3 credentials")?;
            } else {
                need(p.root_access, "manage other users' S3 credentials")?;
            }
            keys(ctx, rq, caller, &user_id, rest)
        }
        ["users", uref, "change-password"] => {
            rq.op = "changeUserPassword";
            if m != Method::POST {
                return Err(method_not_allowed());
            }
            let user_id = resolve_user(ctx, caller, uref)?;
            need(
                p.root_access || user_id == caller.user_id,
                "change passwords",
            )?;
            let body = rq.json_object()?;
            let password = password_field(&body, 8, 32)?;
            if let Some(u) = ctx.lock().users.get_mut(&user_id) {
                u.password = Some(password);
            }
            no_content()
        }
        ["users", uref] => {
            let user_id = resolve_user(ctx, caller, uref)?;
            match m {
                Method::GET => {
                    rq.op = "getUser";
                    need(p.root_access || user_id == caller.user_id, "view users")?;
                    let st = ctx.lock();
                    ok(st
                        .users
                        .get(&user_id)
                        .map(User::to_json)
                        .unwrap_or(Value::Null))
                }
                Method::PUT => {
                    rq.op = "updateUser";
                    need(p.root_access, "manage users")?;
                    update_user(ctx, rq, caller, &user_id)
                }
                Method::DELETE => {
                    rq.op = "deleteUser";
                    need(p.root_access, "manage users")?;
                    let mut st = ctx.lock();
                    if st.users.get(&user_id).is_some_and(|u| u.root) {
                        return Err(unprocessable("the tenant root user cannot be deleted"));
                    }
                    st.users.remove(&user_id);
                    st.keys.retain(|_, k| k.user_id != user_id);
                    st.tokens.retain(
                        |_, t| !matches!(&t.scope, Scope::Tenant { user_id: u, .. } if *u == user_id),
                    );
                    no_content()
                }
                _ => Err(method_not_allowed()),
            }
        }
        ["groups"] => match m {
            Method::GET => {
                rq.op = "listGroups";
                need(p.root_access, "manage groups")?;
                let st = ctx.lock();
                let items = st
                    .groups
                    .values()
                    .filter(|g| {
                        g.account_id == caller.account_id && rq.q("type") != Some("federated")
                    })
                    .map(|g| (g.urn(), g.to_json()))
                    .collect();
                ok(Value::Array(page(items, rq, Some(500))?))
            }
            Method::POST => {
                rq.op = "createGroup";
                need(p.root_access, "manage groups")?;
                create_group(ctx, rq, caller)
            }
            _ => Err(method_not_allowed()),
        },
        ["groups", "group", short] => {
            rq.op = "getGroupByName";
            need(p.root_access, "manage groups")?;
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            let st = ctx.lock();
            let unique = format!("group/{short}");
            let g = st
                .groups
                .values()
                .find(|g| g.account_id == caller.account_id && g.unique_name == unique)
                .ok_or_else(|| not_found(format!("group {short} not found")))?;
            ok(g.to_json())
        }
        ["groups", id] => {
            need(p.root_access, "manage groups")?;
            let exists = ctx
                .lock()
                .groups
                .get(*id)
                .is_some_and(|g| g.account_id == caller.account_id);
            if !exists {
                return Err(not_found(format!("group {id} not found")));
            }
            match m {
                Method::GET => {
                    rq.op = "getGroup";
                    ok(ctx
                        .lock()
                        .groups
                        .get(*id)
                        .map(Group::to_json)
                        .unwrap_or(Value::Null))
                }
                Method::PUT => {
                    rq.op = "updateGroup";
                    update_group(ctx, rq, id)
                }
                Method::DELETE => {
                    rq.op = "deleteGroup";
                    let mut st = ctx.lock();
                    st.groups.remove(*id);
                    for u in st.users.values_mut() {
                        u.member_of.retain(|g| g != id);
                    }
                    no_content()
                }
                _ => Err(method_not_allowed()),
            }
        }
        _ => Err(not_found("no such tenant endpoint")),
    }
}

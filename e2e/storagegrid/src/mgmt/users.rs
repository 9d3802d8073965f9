//! Tenant users, groups and S3 access keys.

use super::*;

// ----- users -----------------------------------------------------------------------------------

pub(super) fn resolve_user(ctx: &Ctx, caller: &Caller, uref: &str) -> Result<String, ApiError> {
    let st = ctx.lock();
    let found = match uref {
        "current-user" => st.users.get(&caller.user_id),
        "root" => st
            .users
            .values()
            .find(|u| u.account_id == caller.account_id && u.root),
        id => st
            .users
            .get(id)
            .filter(|u| u.account_id == caller.account_id),
    };
    found.map(|u| u.id.clone()).ok_or_else(|| {
        err(
            StatusCode::NOT_FOUND,
            "users.not_found",
            format!("user {uref} not found"),
        )
    })
}

fn member_of(
    ctx: &Ctx,
    caller: &Caller,
    body: &Map<String, Value>,
) -> Result<Vec<String>, ApiError> {
    let groups = match body.get("memberOf") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|g| g.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| unprocessable("memberOf must be a list of group ids"))?,
        Some(_) => return Err(unprocessable("memberOf must be a list of group ids")),
    };
    let st = ctx.lock();
    for g in &groups {
        if st
            .groups
            .get(g)
            .is_none_or(|g| g.account_id != caller.account_id)
        {
            return Err(unprocessable(format!("memberOf: group {g} does not exist")));
        }
    }
    Ok(groups)
}

fn valid_short_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@+=,".contains(c))
}

pub(super) fn create_user(ctx: &Ctx, rq: &Rq, caller: &Caller) -> ApiResult {
    let body = rq.json_object()?;
    let unique =
        str_field(&body, "uniqueName")?.ok_or_else(|| unprocessable("uniqueName is required"))?;
    let short = unique
        .strip_prefix("user/")
        .filter(|s| valid_short_name(s))
        .ok_or_else(|| unprocessable("uniqueName must be user/<name>"))?;
    let full_name = str_field(&body, "fullName")?.unwrap_or(short).to_owned();
    let disable = bool_field(&body, "disable", false)?;
    let groups = member_of(ctx, caller, &body)?;
    let mut st = ctx.lock();
    if st
        .users
        .values()
        .any(|u| u.account_id == caller.account_id && u.unique_name == unique)
    {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "users.duplicate_unique_name",
            format!("a user named {unique} already exists"),
        ));
    }
    let user = User {
        id: uuid(),
        account_id: caller.account_id.clone(),
        unique_name: unique.to_owned(),
        full_name,
        member_of: groups,
        disable,
        password: None,
        root: false,
    };
    let data = user.to_json();
    st.users.insert(user.id.clone(), user);
    created(data)
}

pub(super) fn update_user(ctx: &Ctx, rq: &Rq, caller: &Caller, user_id: &str) -> ApiResult {
    let body = rq.json_object()?;
    let groups = member_of(ctx, caller, &body)?;
    let full_name = str_field(&body, "fullName")?.map(str::to_owned);
    let disable = bool_field(&body, "disable", false)?;
    let unique = str_field(&body, "uniqueName")?.map(str::to_owned);
    let mut st = ctx.lock();
    let u = st
        .users
        .get_mut(user_id)
        .ok_or_else(|| not_found(format!("user {user_id} not found")))?;
    if unique.as_deref().is_some_and(|n| n != u.unique_name) {
        return Err(unprocessable("uniqueName cannot be changed"));
    }
    if let Some(f) = full_name {
        u.full_name = f;
    }
    u.member_of = groups;
    u.disable = disable && !u.root;
    ok(u.to_json())
}

// ----- groups ----------------------------------------------------------------------------------

fn group_policies(body: &Map<String, Value>) -> Result<Value, ApiError> {
    let policies = match body.get("policies") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(unprocessable("policies must be an object")),
    };
    if let Some(s3) = policies.get("s3").filter(|v| !v.is_null()) {
        crate::policy::validate(s3).map_err(unprocessable)?;
    }
    if let Some(mgmt) = policies.get("management").filter(|v| !v.is_null()) {
        let obj = mgmt
            .as_object()
            .ok_or_else(|| unprocessable("policies.management must be an object"))?;
        for (k, v) in obj {
            if !v.is_boolean() {
                return Err(unprocessable(format!(
                    "policies.management.{k} must be a boolean"
                )));
            }
        }
    }
    Ok(policies)
}

pub(super) fn create_group(ctx: &Ctx, rq: &Rq, caller: &Caller) -> ApiResult {
    let body = rq.json_object()?;
    let unique =
        str_field(&body, "uniqueName")?.ok_or_else(|| unprocessable("uniqueName is required"))?;
    let short = unique
        .strip_prefix("group/")
        .filter(|s| valid_short_name(s))
        .ok_or_else(|| unprocessable("uniqueName must be group/<name>"))?;
    let display = str_field(&body, "displayName")?.unwrap_or(short).to_owned();
    let read_only = bool_field(&body, "managementReadOnly", false)?;
    let policies = group_policies(&body)?;
    let mut st = ctx.lock();
    if st
        .groups
        .values()
        .any(|g| g.account_id == caller.account_id && g.unique_name == unique)
    {
        return Err(err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "groups.duplicate_unique_name",
            format!("a group named {unique} already exists"),
        ));
    }
    let group = Group {
        id: uuid(),
        account_id: caller.account_id.clone(),
        unique_name: unique.to_owned(),
        display_name: display,
        management_read_only: read_only,
        policies,
    };
    let data = group.to_json();
    st.groups.insert(group.id.clone(), group);
    created(data)
}

pub(super) fn update_group(ctx: &Ctx, rq: &Rq, id: &str) -> ApiResult {
    let body = rq.json_object()?;
    let policies = group_policies(&body)?;
    let display = str_field(&body, "displayName")?.map(str::to_owned);
    let read_only = bool_field(&body, "managementReadOnly", false)?;
    let unique = str_field(&body, "uniqueName")?.map(str::to_owned);
    let mut st = ctx.lock();
    let g = st
        .groups
        .get_mut(id)
        .ok_or_else(|| not_found(format!("group {id} not found")))?;
    if unique.as_deref().is_some_and(|n| n != g.unique_name) {
        return Err(unprocessable("uniqueName cannot be changed"));
    }
    if let Some(d) = display {
        g.display_name = d;
    }
    g.management_read_only = read_only;
    g.policies = policies;
    ok(g.to_json())
}

// ----- S3 access keys --------------------------------------------------------------------------

pub(super) fn keys(
    ctx: &Ctx,
    rq: &mut Rq,
    caller: &Caller,
    user_id: &str,
    rest: &[&str],
) -> ApiResult {
    let m = rq.method.clone();
    let now = SystemTime::now();
    let mut st = ctx.lock();
    // Expired keys are removed automatically.
    st.keys.retain(|_, k| !k.expired(now));
    match rest {
        [] => match m {
            Method::GET => {
                rq.op = "listS3AccessKeys";
                let user = st.users.get(user_id);
                let list: Vec<Value> = st
                    .keys
                    .values()
                    .filter(|k| k.user_id == user_id)
                    .map(|k| k.to_json(user))
                    .collect();
                ok(Value::Array(list))
            }
            Method::POST => {
                rq.op = "createS3AccessKey";
                let body = rq.json_object()?;
                let expires = match body.get("expires") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => {
                        let t = parse_rfc3339(s).ok_or_else(|| {
                            unprocessable("expires must be an RFC 3339 date-time")
                        })?;
                        if t <= now {
                            return Err(unprocessable("expires must be in the future"));
                        }
                        Some(t)
                    }
                    Some(_) => return Err(unprocessable("expires must be a date-time or null")),
                };
                let mut access_key = format!("SG{}", random_string(18, UPPER_ALNUM));
                while st.keys.contains_key(&access_key) {
                    access_key = format!("SG{}", random_string(18, UPPER_ALNUM));
                }
                let key = AccessKey {
                    id: format!("{}==", random_string(30, B64URL)),
                    access_key: access_key.clone(),
                    secret: random_string(40, B64),
                    account_id: caller.account_id.clone(),
                    user_id: user_id.to_owned(),
                    expires,
                };
                let mut data = key.to_json(st.users.get(user_id));
                data["accessKey"] = json!(key.access_key);
                data["secretAccessKey"] = json!(key.secret);
                st.keys.insert(access_key, key);
                created(data)
            }
            _ => Err(method_not_allowed()),
        },
        [key_ref] => {
            let found = st
                .keys
                .values()
                .find(|k| k.user_id == user_id && (k.id == *key_ref || k.access_key == *key_ref))
                .map(|k| k.access_key.clone())
                .ok_or_else(|| {
                    err(
                        StatusCode::NOT_FOUND,
                        "s3_access_keys.not_found",
                        "S3 access key not found",
                    )
                })?;
            match m {
                Method::GET => {
                    rq.op = "getS3AccessKey";
                    let user = st.users.get(user_id);
                    ok(st
                        .keys
                        .get(&found)
                        .map(|k| k.to_json(user))
                        .unwrap_or(Value::Null))
                }
                Method::DELETE => {
                    rq.op = "deleteS3AccessKey";
                    st.keys.remove(&found);
                    no_content()
                }
                _ => Err(method_not_allowed()),
            }
        }
        _ => Err(not_found("no such endpoint")),
    }
}

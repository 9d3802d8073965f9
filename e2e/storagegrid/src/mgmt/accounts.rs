//! The grid API (`/grid/*`, grid admin token): tenant accounts, their paging and usage.

use super::*;

// ---------------------------------------------------------------------------------------------
// Grid API
// ---------------------------------------------------------------------------------------------

pub(super) async fn grid(ctx: &Arc<Ctx>, rq: &mut Rq, rest: &[&str]) -> ApiResult {
    let m = rq.method.clone();
    match rest {
        ["accounts"] => match m {
            Method::GET => {
                rq.op = "listAccounts";
                list_accounts(ctx, rq)
            }
            Method::POST => {
                rq.op = "createAccount";
                create_account(ctx, rq)
            }
            _ => Err(method_not_allowed()),
        },
        ["accounts", id] => {
            rq.account = Some((*id).to_owned());
            match m {
                Method::GET => {
                    rq.op = "getAccount";
                    let st = ctx.lock();
                    let a = st.accounts.get(*id).ok_or_else(|| account_not_found(id))?;
                    ok(a.to_json())
                }
                Method::PUT => {
                    rq.op = "updateAccount";
                    update_account(ctx, rq, id)
                }
                Method::DELETE => {
                    rq.op = "deleteAccount";
                    let mut st = ctx.lock();
                    if !st.accounts.contains_key(*id) {
                        return Err(account_not_found(id));
                    }
                    let buckets = st.account_buckets(id).len();
                    if buckets > 0 {
                        return Err(err(
                            StatusCode::CONFLICT,
                            "accounts.account_has_buckets",
                            format!(
                                "the tenant account still has {buckets} bucket(s); delete them first"
                            ),
                        ));
                    }
                    st.remove_account(id);
                    no_content()
                }
                _ => Err(method_not_allowed()),
            }
        }
        ["accounts", id, "usage"] => {
            rq.account = Some((*id).to_owned());
            rq.op = "getAccountUsage";
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            if !ctx.lock().accounts.contains_key(*id) {
                return Err(account_not_found(id));
            }
            let detail = rq.q_bool("includeBucketDetail")?;
            rq.q_bool("strictConsistency")?;
            ok(account_usage(ctx, id, detail).await?)
        }
        ["accounts", id, "change-password"] => {
            rq.account = Some((*id).to_owned());
            rq.op = "changeAccountRootPassword";
            if m != Method::POST {
                return Err(method_not_allowed());
            }
            let body = rq.json_object()?;
            let password = password_field(&body, 8, 256)?;
            let mut st = ctx.lock();
            let root = st
                .accounts
                .get(*id)
                .ok_or_else(|| account_not_found(id))?
                .root_user_id
                .clone();
            if let Some(u) = st.users.get_mut(&root) {
                u.password = Some(password);
            }
            no_content()
        }
        ["config", "product-version"] => {
            rq.op = "getProductVersion";
            ok(json!({"productVersion": PRODUCT_VERSION}))
        }
        // The grid is the top node of its topology; sites and nodes (its children) are not
        // emulated. `depth` is accepted and ignored.
        ["health", "topology"] => {
            rq.op = "getTopology";
            ok(json!({
                "id": ctx.cfg.grid_id,
                "name": "keeper-e2e grid",
                "type": "grid",
                "severity": "normal",
                "state": "connected",
                "children": [],
            }))
        }
        _ => Err(not_found("no such grid endpoint")),
    }
}

fn account_not_found(id: &str) -> ApiError {
    err(
        StatusCode::NOT_FOUND,
        "accounts.not_found",
        format!("tenant account {id} not found"),
    )
}

pub(super) fn password_field(
    body: &Map<String, Value>,
    min: usize,
    max: usize,
) -> Result<String, ApiError> {
    let p = str_field(body, "password")?.ok_or_else(|| unprocessable("password is required"))?;
    let n = p.chars().count();
    if n < min || n > max {
        return Err(unprocessable(format!(
            "password must be {min} to {max} characters"
        )));
    }
    Ok(p.to_owned())
}

/// Validated name/description/capabilities/policy of an account create or update body.
struct AccountSpec {
    name: String,
    description: Option<String>,
    capabilities: Vec<String>,
    policy: Map<String, Value>,
}

fn account_spec(
    body: &Map<String, Value>,
    previous: Option<&Account>,
) -> Result<AccountSpec, ApiError> {
    let name = str_field(body, "name")?.ok_or_else(|| unprocessable("name is required"))?;
    if name.trim().is_empty() || name.chars().count() > 64 {
        return Err(unprocessable("name must be 1 to 64 characters"));
    }
    let description = str_field(body, "description")?.map(str::to_owned);
    let capabilities = match body.get("capabilities") {
        Some(Value::Array(a)) => {
            let mut caps = Vec::new();
            for c in a {
                match c.as_str() {
                    Some(c @ ("management" | "s3" | "swift")) => {
                        if !caps.iter().any(|x: &String| x == c) {
                            caps.push(c.to_owned());
                        }
                    }
                    _ => {
                        return Err(unprocessable(
                            "capabilities may only contain management, s3 and swift",
                        ));
                    }
                }
            }
            caps
        }
        None | Some(Value::Null) => match previous {
            Some(p) => p.capabilities.clone(),
            None => return Err(unprocessable("capabilities is required")),
        },
        Some(_) => return Err(unprocessable("capabilities must be a list")),
    };
    let given = match body.get("policy") {
        Some(Value::Object(p)) => p.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(unprocessable("policy must be an object")),
    };
    let mut policy = Map::new();
    for (k, v) in &given {
        policy.insert(k.clone(), v.clone());
    }
    for (key, default) in [
        ("useAccountIdentitySource", true),
        ("allowPlatformServices", false),
        ("allowSelectObjectContent", false),
    ] {
        let b = bool_field(&given, key, default)?;
        policy.insert(key.to_owned(), json!(b));
    }
    match given.get("quotaObjectBytes") {
        None | Some(Value::Null) => {
            policy.insert("quotaObjectBytes".into(), Value::Null);
        }
        Some(v) => match lenient_u64(v) {
            Some(q) if q >= 1 => {
                policy.insert("quotaObjectBytes".into(), json!(q));
            }
            _ => {
                return Err(unprocessable(
                    "policy.quotaObjectBytes must be an integer >= 1 or null",
                ));
            }
        },
    }
    Ok(AccountSpec {
        name: name.to_owned(),
        description,
        capabilities,
        policy,
    })
}

fn create_account(ctx: &Ctx, rq: &mut Rq) -> ApiResult {
    let body = rq.json_object()?;
    let spec = account_spec(&body, None)?;
    let grant = str_field(&body, "grantRootAccessToGroup")?.map(str::to_owned);
    let password = match body.get("password") {
        None | Some(Value::Null) => None,
        Some(_) => Some(password_field(&body, 8, 256)?),
    };
    if password.is_none() && grant.is_none() {
        return Err(unprocessable(
            "password or grantRootAccessToGroup is required",
        ));
    }
    let mut st = ctx.lock();
    let mut id = crate::util::account_id();
    while st.accounts.contains_key(&id) {
        id = crate::util::account_id();
    }
    let root = User {
        id: uuid(),
        account_id: id.clone(),
        unique_name: "root".into(),
        full_name: "Root".into(),
        member_of: Vec::new(),
        disable: false,
        password,
        root: true,
    };
    let account = Account {
        id: id.clone(),
        name: spec.name,
        description: spec.description,
        capabilities: spec.capabilities,
        policy: spec.policy,
        root_user_id: root.id.clone(),
        grant_root_access_to_group: grant,
    };
    let data = account.to_json();
    st.users.insert(root.id.clone(), root);
    st.accounts.insert(id.clone(), account);
    rq.account = Some(id);
    created(data)
}

fn update_account(ctx: &Ctx, rq: &mut Rq, id: &str) -> ApiResult {
    let body = rq.json_object()?;
    let mut st = ctx.lock();
    let account = st
        .accounts
        .get_mut(id)
        .ok_or_else(|| account_not_found(id))?;
    let spec = account_spec(&body, Some(account))?;
    account.name = spec.name;
    account.description = spec.description;
    account.capabilities = spec.capabilities;
    account.policy = spec.policy;
    ok(account.to_json())
}

fn paging(rq: &Rq, max: Option<usize>) -> Result<(usize, Option<String>, bool, bool), ApiError> {
    let limit = match rq.q("limit") {
        None | Some("") => 25,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| *l >= 1 && max.is_none_or(|m| *l <= m))
            .ok_or_else(|| unprocessable("limit must be a positive integer within the maximum"))?,
    };
    let marker = rq.q("marker").filter(|m| !m.is_empty()).map(str::to_owned);
    let include = rq.q_bool("includeMarker")?;
    let desc = match rq.q("order") {
        None | Some("") | Some("asc") => false,
        Some("desc") => true,
        Some(_) => return Err(unprocessable("order must be asc or desc")),
    };
    Ok((limit, marker, include, desc))
}

/// Marker paging over items sorted ascending by `key`.
pub(super) fn page<T: Clone>(
    items: Vec<(String, T)>,
    rq: &Rq,
    max: Option<usize>,
) -> Result<Vec<T>, ApiError> {
    let (limit, marker, include, desc) = paging(rq, max)?;
    let mut items = items;
    items.sort_by(|a, b| a.0.cmp(&b.0));
    if desc {
        items.reverse();
    }
    Ok(items
        .into_iter()
        .filter(|(k, _)| match &marker {
            None => true,
            Some(m) if desc => k < m || (include && k == m),
            Some(m) => k > m || (include && k == m),
        })
        .take(limit)
        .map(|(_, v)| v)
        .collect())
}

fn list_accounts(ctx: &Ctx, rq: &Rq) -> ApiResult {
    let st = ctx.lock();
    let items = st
        .accounts
        .values()
        .map(|a| (a.id.clone(), a.to_json()))
        .collect();
    ok(Value::Array(page(items, rq, None)?))
}

pub(super) async fn account_usage(
    ctx: &Ctx,
    account_id: &str,
    detail: bool,
) -> Result<Value, ApiError> {
    let buckets: Vec<(String, String)> = ctx
        .lock()
        .account_buckets(account_id)
        .iter()
        .map(|b| (b.name.clone(), b.region.clone()))
        .collect();
    let mut out = Vec::new();
    let (mut count, mut bytes) = (0u64, 0u64);
    for (name, region) in buckets {
        let u = ctx.backend.usage(&name).await.map_err(|e| {
            err(
                StatusCode::SERVICE_UNAVAILABLE,
                "usage.unavailable",
                format!("usage of {name} unavailable: {e}"),
            )
        })?;
        count += u.object_count;
        bytes += u.data_bytes;
        let mut b = json!({"name": name, "objectCount": u.object_count, "dataBytes": u.data_bytes});
        if detail {
            let (enabled, suspended) = ctx
                .backend
                .get_versioning(&name)
                .await
                .unwrap_or((false, false));
            b["region"] = json!(region);
            b["versioningEnabled"] = json!(enabled);
            b["versioningSuspended"] = json!(suspended);
            b["consistency"] = json!("read-after-new-write");
            b["encryption"] = json!("none");
        }
        out.push(b);
    }
    Ok(json!({
        "calculationTime": now_rfc3339(),
        "objectCount": count,
        "dataBytes": bytes,
        "buckets": out,
    }))
}

//! Authentication: `/authorize` (grid and tenant logins), bearer tokens and their expiry.

use super::*;

pub(super) fn unauthorized() -> ApiError {
    err(
        StatusCode::UNAUTHORIZED,
        "auth.unauthorized",
        "missing, invalid or expired token",
    )
}

pub(super) fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
        .filter(|t| !t.is_empty())
}

pub(super) fn authenticate(ctx: &Ctx, headers: &HeaderMap) -> Result<Scope, ApiError> {
    let token = bearer(headers).ok_or_else(unauthorized)?;
    let mut st = ctx.lock();
    let now = SystemTime::now();
    st.tokens.retain(|_, t| t.expires > now);
    let t = st.tokens.get(&token).ok_or_else(unauthorized)?;
    Ok(t.scope.clone())
}

pub(super) fn authorize(ctx: &Ctx, rq: &mut Rq) -> ApiResult {
    let body = rq.json_object()?;
    let username =
        str_field(&body, "username")?.ok_or_else(|| unprocessable("username is required"))?;
    let password =
        str_field(&body, "password")?.ok_or_else(|| unprocessable("password is required"))?;
    let account_id = match body.get("accountId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => return Err(unprocessable("accountId must be a string")),
    };
    let bad = || {
        err(
            StatusCode::UNAUTHORIZED,
            "auth.invalid_credentials",
            "invalid username or password",
        )
    };
    let mut st = ctx.lock();
    let scope = match account_id {
        None => {
            if username != ctx.cfg.admin_user || password != ctx.cfg.admin_password {
                return Err(bad());
            }
            Scope::Grid
        }
        Some(account_id) => {
            rq.account = Some(account_id.clone());
            let account = st.accounts.get(&account_id).ok_or_else(bad)?;
            let user = st
                .users
                .values()
                .find(|u| {
                    u.account_id == account_id
                        && u.short_name() == username
                        && (u.root == (username == "root"))
                })
                .ok_or_else(bad)?;
            if user.password.as_deref() != Some(password) {
                return Err(bad());
            }
            if user.disable {
                return Err(bad());
            }
            if !account.has_capability("management") {
                return Err(forbidden(
                    "the tenant account does not have the management capability",
                ));
            }
            Scope::Tenant {
                account_id,
                user_id: user.id.clone(),
            }
        }
    };
    let token = uuid();
    let expires = SystemTime::now() + ctx.cfg.token_ttl;
    st.tokens.insert(token.clone(), Token { scope, expires });
    Ok(Reply {
        status: StatusCode::OK,
        data: Some(json!(token)),
        headers: vec![
            (header::EXPIRES, httpdate::fmt_http_date(expires)),
            (
                header::CACHE_CONTROL,
                format!(
                    "private, no-cache, max-age={}",
                    ctx.cfg.token_ttl.as_secs().saturating_sub(1)
                ),
            ),
        ],
    })
}

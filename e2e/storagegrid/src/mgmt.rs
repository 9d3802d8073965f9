//! The management API: `/api/versions`, `/authorize`, the grid API (`/grid/*`, grid admin token)
//! and the tenant API (`/org/*`, tenant token), plus the `/debug/*` endpoints for tests.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};

use crate::Ctx;
use crate::state::{
    AccessKey, Account, Bucket, Drain, Fault, Group, RequestRecord, Scope, Token, User,
};
use crate::util::{
    B64, B64URL, Body, UPPER_ALNUM, envelope, error_envelope, json_response, lenient_bool,
    lenient_u64, now_rfc3339, parse_rfc3339, random_string, rfc3339, uuid,
};

/// Versions `GET /api/versions` reports; 2 and 3 are served but marked deprecated.
const VERSIONS: [u32; 3] = [2, 3, 4];
const CURRENT_VERSION: u32 = 4;
pub(crate) const PRODUCT_VERSION: &str = "11.8.0-20240131.1502.emulated";

/// An API error rendered as the contract's error envelope.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    text: String,
    key: &'static str,
}

fn err(status: StatusCode, key: &'static str, text: impl Into<String>) -> ApiError {
    ApiError {
        status,
        text: text.into(),
        key,
    }
}

fn unprocessable(text: impl Into<String>) -> ApiError {
    err(StatusCode::UNPROCESSABLE_ENTITY, "validation.failed", text)
}

fn not_found(text: impl Into<String>) -> ApiError {
    err(StatusCode::NOT_FOUND, "not_found", text)
}

fn forbidden(text: impl Into<String>) -> ApiError {
    err(StatusCode::FORBIDDEN, "auth.forbidden", text)
}

fn internal(text: impl Into<String>) -> ApiError {
    err(StatusCode::INTERNAL_SERVER_ERROR, "server.error", text)
}

type ApiResult = Result<Reply, ApiError>;

/// A successful answer: `data` goes into the success envelope; `None` means an empty 204.
struct Reply {
    status: StatusCode,
    data: Option<Value>,
    headers: Vec<(header::HeaderName, String)>,
}

fn ok(data: Value) -> ApiResult {
    Ok(Reply {
        status: StatusCode::OK,
        data: Some(data),
        headers: Vec::new(),
    })
}

fn created(data: Value) -> ApiResult {
    Ok(Reply {
        status: StatusCode::CREATED,
        data: Some(data),
        headers: Vec::new(),
    })
}

fn no_content() -> ApiResult {
    Ok(Reply {
        status: StatusCode::NO_CONTENT,
        data: None,
        headers: Vec::new(),
    })
}

/// One parsed management request.
struct Rq {
    method: Method,
    segments: Vec<String>,
    query: Vec<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
    /// Operation name for the request log.
    op: &'static str,
    /// Account the request acted on or for (request log).
    account: Option<String>,
}

impl Rq {
    fn q(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn q_bool(&self, name: &str) -> Result<bool, ApiError> {
        match self.q(name) {
            None | Some("") => Ok(false),
            Some(v) => lenient_bool(&Value::String(v.to_owned())).ok_or_else(|| {
                unprocessable(format!("query parameter {name} must be true or false"))
            }),
        }
    }

    fn json(&self) -> Result<Value, ApiError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            err(
                StatusCode::BAD_REQUEST,
                "request.invalid_json",
                format!("invalid JSON body: {e}"),
            )
        })
    }

    fn json_object(&self) -> Result<Map<String, Value>, ApiError> {
        match self.json()? {
            Value::Object(m) => Ok(m),
            _ => Err(unprocessable("the request body must be a JSON object")),
        }
    }
}

fn pct_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Entry point of the management listener.
pub(crate) async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Response<crate::util::Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    if path == "/debug" || path.starts_with("/debug/") {
        return debug(ctx, req).await;
    }

    let fault = ctx.lock().take_fault(method.as_str(), &path);
    if let Some(hit) = fault {
        if let Some(delay) = hit.delay {
            tokio::time::sleep(delay).await;
        }
        if let Some(code) = hit.status {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            record(&ctx, &method, &path, "injectedFault", None, status);
            return json_response(
                status,
                &error_envelope("4.0", status, "injected fault", "debug.injected_fault"),
            );
        }
    }

    let query: Vec<(String, String)> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let headers = req.headers().clone();
    let body = match Limited::new(req.into_body(), 4 * 1024 * 1024)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let status = StatusCode::BAD_REQUEST;
            record(&ctx, &method, &path, "readBody", None, status);
            return json_response(
                status,
                &error_envelope(
                    "4.0",
                    status,
                    &format!("cannot read body: {e}"),
                    "request.body",
                ),
            );
        }
    };

    // Version: `/api/v{N}/...` or `/api/...` with `Api-Version: N` (the header wins).
    let raw: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if raw.first() != Some(&"api") {
        let status = StatusCode::NOT_FOUND;
        record(&ctx, &method, &path, "unknown", None, status);
        return json_response(
            status,
            &error_envelope("4.0", status, "not found", "not_found"),
        );
    }
    let mut rest: Vec<String> = raw[1..].iter().map(|s| pct_decode(s)).collect();
    let mut version = CURRENT_VERSION;
    if let Some(v) = rest
        .first()
        .and_then(|s| s.strip_prefix('v'))
        .and_then(|n| n.parse::<u32>().ok())
    {
        version = v;
        rest.remove(0);
    }
    if let Some(v) = headers
        .get("api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split('.').next()?.parse::<u32>().ok())
    {
        version = v;
    }
    while rest.last().is_some_and(String::is_empty) {
        rest.pop();
    }
    let api_version = format!("{version}.0");
    let deprecated = version < CURRENT_VERSION;

    let mut rq = Rq {
        method: method.clone(),
        segments: rest,
        query,
        headers,
        body,
        op: "unknown",
        account: None,
    };
    let result = if !VERSIONS.contains(&version) {
        Err(not_found(format!("API version {version} is not supported")))
    } else {
        route(&ctx, &mut rq).await
    };
    let (status, mut resp) = match result {
        Ok(reply) => {
            let mut resp = match reply.data {
                Some(data) => {
                    let mut env = envelope(&api_version, data);
                    if deprecated {
                        env["deprecated"] = json!(true);
                    }
                    json_response(reply.status, &env)
                }
                None => {
                    let mut r = Response::new(crate::util::empty());
                    *r.status_mut() = reply.status;
                    r
                }
            };
            for (name, value) in reply.headers {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    resp.headers_mut().insert(name, v);
                }
            }
            (reply.status, resp)
        }
        Err(e) => {
            let mut env = error_envelope(&api_version, e.status, &e.text, e.key);
            if deprecated {
                env["deprecated"] = json!(true);
            }
            (e.status, json_response(e.status, &env))
        }
    };
    if deprecated {
        resp.headers_mut()
            .insert("deprecated", HeaderValue::from_static("true"));
    }
    record(&ctx, &method, &path, rq.op, rq.account.clone(), status);
    resp
}

fn record(
    ctx: &Ctx,
    method: &Method,
    path: &str,
    op: &str,
    account: Option<String>,
    status: StatusCode,
) {
    let mut st = ctx.lock();
    st.requests.push(RequestRecord {
        method: method.to_string(),
        path: path.to_owned(),
        operation: op.to_owned(),
        account,
        code: status.as_u16(),
    });
    // Bounded so a long-running stack does not grow without limit.
    if st.requests.len() > 10_000 {
        st.requests.drain(..1_000);
    }
}

fn method_not_allowed() -> ApiError {
    err(
        StatusCode::METHOD_NOT_ALLOWED,
        "request.method_not_allowed",
        "method not allowed",
    )
}

async fn route(ctx: &Arc<Ctx>, rq: &mut Rq) -> ApiResult {
    let segs: Vec<String> = rq.segments.clone();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let m = rq.method.clone();
    match s.as_slice() {
        ["versions"] => {
            rq.op = "getVersions";
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            ok(json!(VERSIONS))
        }
        ["authorize"] => match m {
            Method::POST => {
                rq.op = "authorize";
                authorize(ctx, rq)
            }
            Method::DELETE => {
                rq.op = "logout";
                let token = bearer(&rq.headers).ok_or_else(unauthorized)?;
                let removed = ctx.lock().tokens.remove(&token);
                match removed {
                    Some(t) if t.expires > SystemTime::now() => no_content(),
                    _ => Err(unauthorized()),
                }
            }
            _ => Err(method_not_allowed()),
        },
        ["grid", rest @ ..] => {
            let scope = authenticate(ctx, &rq.headers)?;
            if scope != Scope::Grid {
                if let Scope::Tenant { account_id, .. } = &scope {
                    rq.account = Some(account_id.clone());
                }
                return Err(forbidden(
                    "a tenant token cannot call the grid management API",
                ));
            }
            grid(ctx, rq, rest).await
        }
        ["org", rest @ ..] => {
            let scope = authenticate(ctx, &rq.headers)?;
            let Scope::Tenant {
                account_id,
                user_id,
            } = scope
            else {
                return Err(forbidden(
                    "a grid token cannot call the tenant management API",
                ));
            };
            rq.account = Some(account_id.clone());
            let caller = Caller {
                account_id,
                user_id,
            };
            org(ctx, rq, &caller, rest).await
        }
        _ => Err(not_found(format!("no such endpoint: /{}", segs.join("/")))),
    }
}

fn unauthorized() -> ApiError {
    err(
        StatusCode::UNAUTHORIZED,
        "auth.unauthorized",
        "missing, invalid or expired token",
    )
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
        .filter(|t| !t.is_empty())
}

fn authenticate(ctx: &Ctx, headers: &HeaderMap) -> Result<Scope, ApiError> {
    let token = bearer(headers).ok_or_else(unauthorized)?;
    let mut st = ctx.lock();
    let now = SystemTime::now();
    st.tokens.retain(|_, t| t.expires > now);
    let t = st.tokens.get(&token).ok_or_else(unauthorized)?;
    Ok(t.scope.clone())
}

fn str_field<'a>(body: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(unprocessable(format!("{name} must be a string"))),
    }
}

fn bool_field(body: &Map<String, Value>, name: &str, default: bool) -> Result<bool, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(unprocessable(format!("{name} must be a boolean"))),
    }
}

fn authorize(ctx: &Ctx, rq: &mut Rq) -> ApiResult {
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

// ---------------------------------------------------------------------------------------------
// Grid API
// ---------------------------------------------------------------------------------------------

async fn grid(ctx: &Arc<Ctx>, rq: &mut Rq, rest: &[&str]) -> ApiResult {
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

fn password_field(body: &Map<String, Value>, min: usize, max: usize) -> Result<String, ApiError> {
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
fn page<T: Clone>(
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

async fn account_usage(ctx: &Ctx, account_id: &str, detail: bool) -> Result<Value, ApiError> {
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

// ---------------------------------------------------------------------------------------------
// Tenant API
// ---------------------------------------------------------------------------------------------

struct Caller {
    account_id: String,
    user_id: String,
}

/// Management permissions of the caller (root user: everything; others: their groups' flags).
#[derive(Default)]
struct Perms {
    root_access: bool,
    manage_all_containers: bool,
    view_all_containers: bool,
    manage_own_s3_credentials: bool,
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

fn need(cond: bool, what: &str) -> Result<(), ApiError> {
    if cond {
        Ok(())
    } else {
        Err(forbidden(format!(
            "the caller lacks the permission to {what}"
        )))
    }
}

async fn org(ctx: &Arc<Ctx>, rq: &mut Rq, caller: &Caller, rest: &[&str]) -> ApiResult {
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

// ----- containers ------------------------------------------------------------------------------

fn owned_bucket(ctx: &Ctx, caller: &Caller, name: &str) -> Result<Bucket, ApiError> {
    ctx.lock()
        .buckets
        .get(name)
        .filter(|b| b.account_id == caller.account_id)
        .cloned()
        .ok_or_else(|| {
            err(
                StatusCode::NOT_FOUND,
                "containers.not_found",
                format!("bucket {name} not found"),
            )
        })
}

fn list_containers(ctx: &Ctx, rq: &Rq, caller: &Caller) -> ApiResult {
    let include: Vec<String> = rq
        .query
        .iter()
        .filter(|(k, _)| k == "include")
        .flat_map(|(_, v)| {
            v.split(',')
                .map(|s| s.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty())
        .collect();
    for i in &include {
        if !matches!(
            i.as_str(),
            "compliance"
                | "region"
                | "s3ObjectLock"
                | "deleteObjects"
                | "crossGridReplication"
                | "quotaObjectBytes"
        ) {
            return Err(unprocessable(format!("unknown include value {i}")));
        }
    }
    let has = |k: &str| include.iter().any(|i| i == k);
    let st = ctx.lock();
    let mut out = Vec::new();
    for b in st.account_buckets(&caller.account_id) {
        let mut v = json!({"name": b.name, "creationTime": rfc3339(b.creation_time)});
        if has("region") {
            v["region"] = json!(b.region);
        }
        if has("compliance") {
            v["compliance"] =
                json!({"autoDelete": false, "legalHold": false, "retentionPeriodMinutes": 0});
        }
        if has("s3ObjectLock") {
            v["s3ObjectLock"] = b.s3_object_lock.clone();
        }
        if has("deleteObjects") {
            v["deleteObjectStatus"] = b.delete_object_status();
        }
        if has("crossGridReplication") {
            v["crossGridReplication"] = json!({"rules": []});
        }
        if has("quotaObjectBytes") {
            v["quotaObjectBytes"] = json!(b.quota_object_bytes);
        }
        out.push(v);
    }
    ok(Value::Array(out))
}

/// DNS-compliant S3 bucket name: 3-63 characters of `a-z0-9.-`, starting and ending with a letter
/// or digit, no `..`, not an IPv4 address.
pub(crate) fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && name.parse::<std::net::Ipv4Addr>().is_err()
}

/// Validates an `s3ObjectLock` object; `days`/`years` are kept as strings (as the server returns them).
fn parse_object_lock(v: Option<&Value>) -> Result<Value, ApiError> {
    Ok(match v {
        None | Some(Value::Null) => json!({"enabled": false}),
        Some(Value::Object(o)) => {
            let enabled = bool_field(o, "enabled", false)?;
            let mut v = json!({"enabled": enabled});
            if let Some(d) = o.get("defaultRetentionSetting").filter(|d| !d.is_null()) {
                if !enabled {
                    return Err(unprocessable(
                        "defaultRetentionSetting requires s3ObjectLock.enabled",
                    ));
                }
                let mode = d.get("mode").and_then(Value::as_str).unwrap_or("");
                if !matches!(mode, "compliance" | "governance") {
                    return Err(unprocessable(
                        "defaultRetentionSetting.mode must be compliance or governance",
                    ));
                }
                let days = d.get("days").and_then(lenient_u64);
                let years = d.get("years").and_then(lenient_u64);
                let mut r = json!({"mode": mode});
                match (days, years) {
                    (Some(n), None) if n >= 1 => r["days"] = json!(n.to_string()),
                    (None, Some(n)) if n >= 1 => r["years"] = json!(n.to_string()),
                    _ => {
                        return Err(unprocessable(
                            "defaultRetentionSetting needs exactly one of days or years",
                        ));
                    }
                }
                v["defaultRetentionSetting"] = r;
            }
            v
        }
        Some(_) => return Err(unprocessable("s3ObjectLock must be an object")),
    })
}

async fn create_container(ctx: &Arc<Ctx>, rq: &mut Rq, caller: &Caller) -> ApiResult {
    let body = rq.json_object()?;
    let name = str_field(&body, "name")?
        .ok_or_else(|| unprocessable("name is required"))?
        .to_owned();
    if !valid_bucket_name(&name) {
        return Err(unprocessable(format!("invalid bucket name {name:?}")));
    }
    let region = str_field(&body, "region")?
        .unwrap_or("us-east-1")
        .to_owned();
    if !ctx.cfg.regions.contains(&region) {
        return Err(unprocessable(format!("unknown region {region}")));
    }
    let lock = parse_object_lock(body.get("s3ObjectLock"))?;
    if body.get("compliance").is_some_and(|c| !c.is_null()) && lock["enabled"] == json!(true) {
        return Err(unprocessable(
            "legacy compliance cannot be combined with s3ObjectLock",
        ));
    }
    let versioning = bool_field(&body, "enableVersioning", false)?;
    let object_lock = lock["enabled"] == json!(true);
    {
        let mut st = ctx.lock();
        let account = st
            .accounts
            .get(&caller.account_id)
            .ok_or_else(unauthorized)?;
        if !account.has_capability("s3") {
            return Err(forbidden(
                "the tenant account does not have the s3 capability",
            ));
        }
        if st.buckets.contains_key(&name) {
            return Err(err(
                StatusCode::CONFLICT,
                "containers.bucket_already_exists",
                format!("the bucket name {name} is already in use"),
            ));
        }
        // Reserve the name before talking to moto so a concurrent create conflicts.
        st.buckets.insert(
            name.clone(),
            Bucket {
                name: name.clone(),
                account_id: caller.account_id.clone(),
                region: region.clone(),
                creation_time: SystemTime::now(),
                s3_object_lock: lock.clone(),
                quota_object_bytes: None,
                drain: Drain::default(),
            },
        );
    }
    let mut result = ctx.backend.create_bucket(&name, &region, object_lock).await;
    if result.is_ok()
        && let Some(r) = lock.get("defaultRetentionSetting")
    {
        result = ctx.backend.put_default_retention(&name, r).await;
        if result.is_err() {
            let _ = ctx.backend.delete_bucket(&name).await;
        }
    }
    if result.is_ok() && versioning && !object_lock {
        result = ctx.backend.put_versioning(&name, true).await;
    }
    if let Err(e) = result {
        ctx.lock().buckets.remove(&name);
        return Err(match e.code.as_deref() {
            Some("BucketAlreadyExists" | "BucketAlreadyOwnedByYou") => err(
                StatusCode::CONFLICT,
                "containers.bucket_already_exists",
                format!("the bucket name {name} is already in use"),
            ),
            _ => internal(format!("cannot create bucket: {e}")),
        });
    }
    let mut data = json!({"name": name, "region": region, "s3ObjectLock": lock});
    if versioning {
        data["enableVersioning"] = json!(true);
    }
    created(data)
}

async fn container(
    ctx: &Arc<Ctx>,
    rq: &mut Rq,
    p: &Perms,
    bucket: Bucket,
    sub: &[&str],
) -> ApiResult {
    let m = rq.method.clone();
    let view = p.view_all_containers || p.manage_all_containers;
    let name = bucket.name.clone();
    match sub {
        [] => match m {
            Method::DELETE => {
                rq.op = "deleteContainer";
                need(p.manage_all_containers, "delete buckets")?;
                let empty = ctx
                    .backend
                    .is_empty(&name)
                    .await
                    .map_err(|e| internal(format!("cannot check bucket: {e}")))?;
                if !empty {
                    return Err(bucket_not_empty(&name));
                }
                match ctx.backend.delete_bucket(&name).await {
                    Ok(()) => {}
                    Err(e) if e.code.as_deref() == Some("NoSuchBucket") => {}
                    Err(e) if e.code.as_deref() == Some("BucketNotEmpty") => {
                        return Err(bucket_not_empty(&name));
                    }
                    Err(e) => return Err(internal(format!("cannot delete bucket: {e}"))),
                }
                ctx.lock().buckets.remove(&name);
                no_content()
            }
            _ => Err(method_not_allowed()),
        },
        ["versioning"] => match m {
            Method::GET => {
                rq.op = "getContainerVersioning";
                need(view, "view buckets")?;
                let (enabled, suspended) = ctx
                    .backend
                    .get_versioning(&name)
                    .await
                    .map_err(|e| internal(format!("cannot read versioning: {e}")))?;
                ok(json!({"versioningEnabled": enabled, "versioningSuspended": suspended}))
            }
            Method::PUT => {
                rq.op = "updateContainerVersioning";
                need(p.manage_all_containers, "change buckets")?;
                let body = rq.json_object()?;
                let enabled = bool_field(&body, "versioningEnabled", false)?;
                let suspended = bool_field(&body, "versioningSuspended", false)?;
                if enabled && suspended {
                    return Err(unprocessable(
                        "versioningEnabled and versioningSuspended are mutually exclusive",
                    ));
                }
                let (cur_enabled, cur_suspended) = ctx
                    .backend
                    .get_versioning(&name)
                    .await
                    .map_err(|e| internal(format!("cannot read versioning: {e}")))?;
                if enabled || suspended {
                    if suspended && bucket.s3_object_lock["enabled"] == json!(true) {
                        return Err(unprocessable(
                            "versioning cannot be suspended on an S3 Object Lock bucket",
                        ));
                    }
                    ctx.backend
                        .put_versioning(&name, enabled)
                        .await
                        .map_err(|e| internal(format!("cannot change versioning: {e}")))?;
                } else if cur_enabled || cur_suspended {
                    return Err(unprocessable(
                        "versioning cannot be turned off once enabled; suspend it instead",
                    ));
                }
                ok(json!({"versioningEnabled": enabled, "versioningSuspended": suspended}))
            }
            _ => Err(method_not_allowed()),
        },
        ["object-lock"] => match m {
            Method::GET => {
                rq.op = "getContainerObjectLock";
                need(view, "view buckets")?;
                ok(bucket.s3_object_lock.clone())
            }
            Method::PUT => {
                rq.op = "updateContainerObjectLock";
                need(p.manage_all_containers, "change buckets")?;
                let lock = parse_object_lock(Some(&rq.json()?))?;
                if bucket.s3_object_lock["enabled"] != json!(true) || lock["enabled"] != json!(true)
                {
                    return Err(unprocessable(
                        "S3 Object Lock can only be enabled when the bucket is created",
                    ));
                }
                if let Some(r) = lock.get("defaultRetentionSetting") {
                    ctx.backend
                        .put_default_retention(&name, r)
                        .await
                        .map_err(|e| internal(format!("cannot set default retention: {e}")))?;
                }
                if let Some(b) = ctx.lock().buckets.get_mut(&name) {
                    b.s3_object_lock = lock.clone();
                }
                ok(lock)
            }
            _ => Err(method_not_allowed()),
        },
        ["quota-object-bytes"] => match m {
            Method::GET => {
                rq.op = "getContainerQuota";
                need(view, "view buckets")?;
                ok(json!({"quotaObjectBytes": bucket.quota_object_bytes}))
            }
            Method::PUT => {
                rq.op = "updateContainerQuota";
                need(p.manage_all_containers, "change buckets")?;
                let body = rq.json_object()?;
                let quota = match body.get("quotaObjectBytes") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(lenient_u64(v).filter(|q| *q >= 1).ok_or_else(|| {
                        unprocessable("quotaObjectBytes must be an integer >= 1 or null")
                    })?),
                };
                if let Some(b) = ctx.lock().buckets.get_mut(&name) {
                    b.quota_object_bytes = quota;
                }
                ok(json!({"quotaObjectBytes": quota}))
            }
            _ => Err(method_not_allowed()),
        },
        ["region"] => {
            rq.op = "getContainerRegion";
            need(view, "view buckets")?;
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            ok(json!(bucket.region))
        }
        ["usage"] => {
            rq.op = "getContainerUsage";
            need(view, "view buckets")?;
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            let u = ctx.backend.usage(&name).await.map_err(|e| {
                err(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "usage.unavailable",
                    format!("usage unavailable: {e}"),
                )
            })?;
            ok(json!({"objectCount": u.object_count, "dataBytes": u.data_bytes}))
        }
        ["delete-objects"] => match m {
            Method::GET => {
                rq.op = "getContainerDeleteObjects";
                need(view, "view buckets")?;
                ok(bucket.delete_object_status())
            }
            Method::POST => {
                rq.op = "setContainerDeleteObjects";
                need(p.manage_all_containers, "delete bucket objects")?;
                let body = rq.json_object()?;
                let flag = body
                    .get("deleteObjects")
                    .and_then(lenient_bool)
                    .ok_or_else(|| unprocessable("deleteObjects must be true or false"))?;
                set_drain(ctx, &name, flag).await
            }
            _ => Err(method_not_allowed()),
        },
        _ => Err(not_found("no such bucket endpoint")),
    }
}

fn bucket_not_empty(name: &str) -> ApiError {
    err(
        StatusCode::CONFLICT,
        "containers.bucket_not_empty",
        format!("the bucket {name} is not empty"),
    )
}

/// Starts (`true`) or stops (`false`) the server-side "delete objects in bucket" drain.
async fn set_drain(ctx: &Arc<Ctx>, name: &str, start: bool) -> ApiResult {
    if !start {
        let mut st = ctx.lock();
        let b = st
            .buckets
            .get_mut(name)
            .ok_or_else(|| not_found(format!("bucket {name} not found")))?;
        b.drain.active = false;
        return ok(json!({"isDeletingObjects": false}));
    }
    if ctx.lock().buckets.get(name).is_some_and(|b| b.drain.active) {
        return ok(json!({"isDeletingObjects": true}));
    }
    let usage = ctx
        .backend
        .usage(name)
        .await
        .map_err(|e| internal(format!("cannot count objects: {e}")))?;
    let epoch = {
        let mut st = ctx.lock();
        let b = st
            .buckets
            .get_mut(name)
            .ok_or_else(|| not_found(format!("bucket {name} not found")))?;
        if b.drain.active {
            return ok(json!({"isDeletingObjects": true}));
        }
        b.drain.active = true;
        b.drain.initial_count = usage.object_count;
        b.drain.initial_bytes = usage.data_bytes;
        b.drain.epoch += 1;
        b.drain.epoch
    };
    tokio::spawn(drain_loop(ctx.clone(), name.to_owned(), epoch));
    ok(json!({"isDeletingObjects": true}))
}

/// Deletes the bucket's object versions and delete markers at `drain_rate` objects per second
/// until stopped, restarted, or the bucket is deleted. An empty, still-draining bucket stays
/// draining (read-only), as on StorageGRID.
async fn drain_loop(ctx: Arc<Ctx>, name: String, epoch: u64) {
    let rate = ctx.cfg.drain_rate.max(1) as usize;
    let batch = rate.div_ceil(10).clamp(1, 1000);
    loop {
        if ctx.is_shut_down() {
            return;
        }
        let still = ctx
            .lock()
            .buckets
            .get(&name)
            .is_some_and(|b| b.drain.active && b.drain.epoch == epoch);
        if !still {
            return;
        }
        let started = Instant::now();
        match ctx.backend.delete_batch(&name, batch).await {
            Ok(0) => tokio::time::sleep(Duration::from_millis(500)).await,
            Ok(n) => {
                let budget = Duration::from_secs_f64(n as f64 / rate as f64);
                if let Some(left) = budget.checked_sub(started.elapsed()) {
                    tokio::time::sleep(left).await;
                }
            }
            Err(e) => {
                if e.code.as_deref() == Some("NoSuchBucket") {
                    return;
                }
                tracing::warn!(bucket = %name, error = %e, "drain batch failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

// ----- users -----------------------------------------------------------------------------------

fn resolve_user(ctx: &Ctx, caller: &Caller, uref: &str) -> Result<String, ApiError> {
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

fn create_user(ctx: &Ctx, rq: &Rq, caller: &Caller) -> ApiResult {
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

fn update_user(ctx: &Ctx, rq: &Rq, caller: &Caller, user_id: &str) -> ApiResult {
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

fn create_group(ctx: &Ctx, rq: &Rq, caller: &Caller) -> ApiResult {
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

fn update_group(ctx: &Ctx, rq: &Rq, id: &str) -> ApiResult {
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

fn keys(ctx: &Ctx, rq: &mut Rq, caller: &Caller, user_id: &str, rest: &[&str]) -> ApiResult {
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

// ---------------------------------------------------------------------------------------------
// Debug endpoints (not part of StorageGRID; for tests)
// ---------------------------------------------------------------------------------------------

async fn debug(ctx: Arc<Ctx>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let body = match Limited::new(req.into_body(), 1024 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                json!({"error": "cannot read body"}),
            );
        }
    };
    match (method, path.as_str()) {
        (Method::GET, "/debug/requests") => {
            let st = ctx.lock();
            plain(StatusCode::OK, json!({"requests": st.requests}))
        }
        (Method::DELETE, "/debug/requests") => {
            ctx.lock().requests.clear();
            no_body()
        }
        (Method::GET, "/debug/state") => plain(StatusCode::OK, ctx.lock().dump()),
        (Method::GET, "/debug/faults") => {
            plain(StatusCode::OK, json!({"faults": ctx.lock().faults}))
        }
        (Method::POST, "/debug/faults") => {
            let parsed: Result<Vec<Fault>, _> = match serde_json::from_slice::<Value>(&body) {
                Ok(v @ Value::Array(_)) => serde_json::from_value(v),
                Ok(Value::Object(mut o)) if o.contains_key("faults") => {
                    serde_json::from_value(o.remove("faults").unwrap_or_default())
                }
                Ok(v) => serde_json::from_value::<Fault>(v).map(|f| vec![f]),
                Err(e) => Err(e),
            };
            match parsed {
                Ok(faults) => {
                    if let Some(bad) = faults.iter().find(|f| {
                        f.status.is_some_and(|s| StatusCode::from_u16(s).is_err())
                            || (f.status.is_none() && f.delay_ms.is_none())
                    }) {
                        return plain(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            json!({"error": format!("a fault needs a valid status and/or delay_ms: {bad:?}")}),
                        );
                    }
                    let mut st = ctx.lock();
                    st.faults.extend(faults);
                    plain(StatusCode::CREATED, json!({"faults": st.faults}))
                }
                Err(e) => plain(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"error": e.to_string()}),
                ),
            }
        }
        (Method::DELETE, "/debug/faults") => {
            ctx.lock().faults.clear();
            no_body()
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            json!({"error": "no such debug endpoint"}),
        ),
    }
}

fn plain(status: StatusCode, v: Value) -> Response<Body> {
    json_response(status, &v)
}

fn no_body() -> Response<Body> {
    let mut r = Response::new(crate::util::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names() {
        assert!(valid_bucket_name("team-a-logs"));
        assert!(valid_bucket_name("a.b.c"));
        assert!(!valid_bucket_name("ab"));
        assert!(!valid_bucket_name("Upper"));
        assert!(!valid_bucket_name("-start"));
        assert!(!valid_bucket_name("end-"));
        assert!(!valid_bucket_name("a..b"));
        assert!(!valid_bucket_name("192.168.1.1"));
        assert!(!valid_bucket_name(&"a".repeat(64)));
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(pct_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(pct_decode("100%"), "100%");
    }
}

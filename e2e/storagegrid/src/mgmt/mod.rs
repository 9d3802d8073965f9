//! The management API: `/api/versions`, `/authorize`, the grid API (`/grid/*`, grid admin token)
//! and the tenant API (`/org/*`, tenant token), plus the `/debug/*` endpoints for tests. Errors,
//! replies, request parsing and routing are here; `auth`, `accounts` (grid), `tenant`, `containers`,
//! `users` (users, groups, S3 keys) and `debug` (request log, state, faults) hold the endpoints.

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

mod accounts;
mod auth;
mod containers;
mod debug;
mod tenant;
mod users;

use accounts::{account_usage, grid, page, password_field};
use auth::{authenticate, authorize, bearer, unauthorized};
pub(crate) use containers::valid_bucket_name;
use containers::{container, create_container, list_containers, owned_bucket};
use debug::debug;
use tenant::{Caller, Perms, need, org};
use users::{create_group, create_user, keys, resolve_user, update_group, update_user};

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
    let (result, rq) = if !VERSIONS.contains(&version) {
        (
            Err(not_found(format!("API version {version} is not supported"))),
            rq,
        )
    } else {
        // Carried out to its end even when the client goes away (a client SIGKILLed while it
        // waits): a handler dropped halfway would leave, say, a bucket name reserved on the grid
        // that was never created in moto, which no real grid does.
        let task_ctx = ctx.clone();
        let routed = tokio::spawn(async move {
            let result = route(&task_ctx, &mut rq).await;
            (result, rq)
        });
        match routed.await {
            Ok(done) => done,
            Err(e) => {
                let status = StatusCode::INTERNAL_SERVER_ERROR;
                record(&ctx, &method, &path, "panicked", None, status);
                return json_response(
                    status,
                    &error_envelope("4.0", status, &format!("handler failed: {e}"), "internal"),
                );
            }
        }
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

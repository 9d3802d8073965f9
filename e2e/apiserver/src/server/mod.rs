//! HTTP routing and the API verbs: the request entry point ([`handle`]) and the types the verbs
//! share live here; `routing` maps a path to a verb, `discovery` answers the discovery documents,
//! `read` and `watch` serve get/list/watch, `write` runs every write (plan, admission, commit) with
//! the plans of `create`, `update` and `delete`, and `strategy` holds the kind-specific rules.

use crate::auth::{self, Authenticator, Gate, UserInfo};
use crate::error::{ApiError, ApiResult, Cause};
use crate::events;
use crate::managed;
use crate::patch;
use crate::resources::{ResDef, View};
use crate::schema;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{self, Change, Key, Lookup, State, finalizers, is_deleting, meta_str};
use crate::table;
use crate::webhook;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

mod create;
mod delete;
mod discovery;
pub mod namespaces;
mod read;
mod routing;
mod strategy;
mod update;
mod watch;
mod write;

use create::{check_namespace, check_type, plan_create};
use delete::{delete_collection, plan_delete};
use discovery::{api_groups, openapi_v2, resource_list, version};
use read::{Filter, get, list, shape_one};
pub(crate) use routing::request_verb;
use routing::{Target, route};
use strategy::{cr_schema, prune_unknown, strategy, without};
use update::{plan_patch, plan_update};
use watch::watch;
use write::{Op, Ownership, Plan, write};

pub type Body = BoxBody<Bytes, Infallible>;

/// The request log keeps at most this many entries (oldest dropped first).
const REQUEST_LOG_LIMIT: usize = 100_000;

/// Tunables of one server instance.
#[derive(Debug, Clone)]
pub struct Config {
    /// How many changes the watch history keeps (older resourceVersions get 410 Gone).
    pub watch_history: usize,
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Webhook `clientConfig.service` references (`namespace/name`) served on a local port;
    /// they are called as `https://127.0.0.1:<port><path>`.
    pub webhook_services: HashMap<String, u16>,
    /// Bearer tokens besides the admin's (kube-apiserver's `--token-auth-file`, see [`auth`]).
    pub static_tokens: HashMap<String, UserInfo>,
    /// Every logged request is also appended here as a JSON line (kube's `--audit-log-path`):
    /// unlike `GET /debug/requests` it is never cleared nor bounded.
    pub audit_log: Option<PathBuf>,
    /// The HTTPS identity; `None`: a new CA and certificate at start.
    pub tls: Option<Arc<crate::tls::Tls>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(10),
            webhook_services: HashMap::new(),
            static_tokens: HashMap::new(),
            audit_log: None,
            tls: None,
        }
    }
}

pub struct Shared {
    pub state: Mutex<State>,
    pub config: Config,
    pub requests: Mutex<Vec<Value>>,
    pub server_address: String,
    pub faults: crate::faults::Faults,
    pub authn: Authenticator,
    audit: Option<Mutex<std::fs::File>>,
}

impl Shared {
    pub fn new(config: Config, server_address: String) -> std::io::Result<Self> {
        let (tx, _) = broadcast::channel(16_384);
        let mut state = State::new(config.watch_history, tx);
        state.webhook_services = config.webhook_services.clone();
        let audit = match &config.audit_log {
            Some(path) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            )),
            None => None,
        };
        Ok(Shared {
            state: Mutex::new(state),
            authn: Authenticator::new(&config.static_tokens),
            config,
            requests: Mutex::new(Vec::new()),
            server_address,
            faults: Default::default(),
            audit,
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Out {
    code: u16,
    body: Result<Value, Body>,
    warnings: Vec<String>,
}

impl Out {
    fn json(code: u16, v: Value) -> Self {
        Out {
            code,
            body: Ok(v),
            warnings: vec![],
        }
    }
    fn err(e: ApiError) -> Self {
        Out {
            code: e.code,
            body: Ok(e.to_status()),
            warnings: e.warnings.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Json,
    Table,
    Meta,
}

fn want(headers: &HeaderMap) -> Want {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=Table")
            && p.contains("g=meta.k8s.io")
            && p.contains("v=v1")
            && !p.contains("v=v1beta1")
        {
            return Want::Table;
        }
        if p.contains("as=PartialObjectMetadata") && p.contains("v=v1") && !p.contains("v=v1beta1")
        {
            return Want::Meta;
        }
        if (p.starts_with("application/json") || p.starts_with("*/*")) && !p.contains("as=") {
            return Want::Json;
        }
    }
    Want::Json
}

struct Ctx {
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
    /// Who asks, as admission webhooks see it (`userInfo`).
    user: Value,
    /// An injected early end of a watch (`crate::faults`).
    watch_cut: Option<crate::faults::WatchCut>,
}

impl Ctx {
    fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }
    fn dry_run(&self) -> bool {
        if self.q("dryRun") == Some("All") {
            return true;
        }
        // DeleteOptions carry dryRun in the body.
        serde_json::from_slice::<Value>(&self.body).is_ok_and(|b| {
            (b["kind"] == "DeleteOptions" || b.get("metadata").is_none())
                && b["dryRun"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|v| v == "All"))
        })
    }
    /// Who writes, for field ownership: the `fieldManager` parameter or the User-Agent.
    fn writer(&self, t: &Target) -> managed::Writer {
        let ua = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        managed::Writer::new(self.q("fieldManager"), ua, t.def.api_version(), &t.sub)
    }
    fn content_type(&self) -> String {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    }
    fn body_value(&self) -> ApiResult<Value> {
        if self.body.is_empty() {
            return Err(ApiError::bad_request("the request body is empty"));
        }
        let ct = self.content_type();
        if ct == "application/vnd.kubernetes.protobuf" {
            return crate::protobuf::decode(&self.body).map_err(|e| {
                ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!("the body of the request could not be decoded: {e}"),
                )
            });
        }
        if ct.contains("protobuf") || ct.contains("cbor") {
            return Err(ApiError::unsupported_media_type(&ct));
        }
        let v: Value = if ct.contains("yaml") {
            serde_yaml::from_slice(&self.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
        } else {
            serde_json::from_slice(&self.body).map_err(|e| {
                ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
            })?
        };
        Ok(v)
    }
}

/// Entry point for one HTTP request.
pub async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(render(Out::err(ApiError::bad_request(format!(
                "reading body: {e}"
            )))));
        }
    };
    let query: HashMap<String, String> = parts
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let ua = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let gate = auth::gate(
        &shared.authn,
        &shared.lock(),
        &parts.method,
        &path,
        &query,
        &parts.headers,
        &body,
    );
    let user = match gate {
        Gate::Pass(user) => user,
        Gate::Answered(answer) => {
            let out = match answer.result {
                Ok((code, v)) => Out::json(code, v),
                Err(e) => Out::err(e),
            };
            record(&shared, answer.log, &out, &ua, answer.user.as_ref());
            return Ok(render(out));
        }
    };
    if parts.method == Method::GET && path == "/openapi/v2" {
        return Ok(openapi_v2(&parts.headers));
    }
    let faults = shared
        .faults
        .decide(&parts.method, &path, &query, &user.name)
        .await;
    let ctx = Ctx {
        query,
        headers: parts.headers.clone(),
        body,
        user: user.to_json(),
        watch_cut: faults.watch_cut,
    };
    if let Some(refusal) = faults.refuse {
        let out = Out::err(refusal.error);
        record(&shared, Some(refusal.log), &out, &ua, Some(&user));
        let mut response = render(out);
        if let Some(seconds) = refusal.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, seconds.into());
        }
        return Ok(response);
    }
    let routed = std::panic::AssertUnwindSafe(route(&shared, &parts.method, &path, &ctx));
    let (out, log) = match futures::FutureExt::catch_unwind(routed).await {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            tracing::error!(%path, panic = %what, "request handler panicked");
            (
                Out::err(ApiError::internal(format!(
                    "the emulator failed to handle the request: {what}"
                ))),
                None,
            )
        }
    };
    record(&shared, log, &out, &ua, Some(&user));
    tracing::debug!(method = %parts.method, %path, code = out.code, "request");
    Ok(render(out))
}

/// Adds a resource request to the request log (and the audit log file), with who made it.
fn record(shared: &Shared, entry: Option<Value>, out: &Out, ua: &str, user: Option<&UserInfo>) {
    let Some(mut entry) = entry else {
        return;
    };
    entry["userAgent"] = json!(ua);
    entry["code"] = json!(out.code);
    entry["user"] = json!(user.map(|u| u.name.as_str()).unwrap_or_default());
    if let Some(file) = &shared.audit {
        let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = writeln!(file, "{entry}") {
            tracing::warn!(error = %e, "cannot write the audit log");
        }
    }
    let mut log = shared.requests.lock().unwrap_or_else(|e| e.into_inner());
    if log.len() >= REQUEST_LOG_LIMIT {
        log.drain(..REQUEST_LOG_LIMIT / 10);
    }
    log.push(entry);
}

fn render(out: Out) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(out.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for w in &out.warnings {
        let v = format!("299 - \"{}\"", w.replace('"', "\\\""));
        if let Ok(hv) = http::HeaderValue::from_str(&v) {
            b = b.header("Warning", hv);
        }
    }
    b = b.header(header::CONTENT_TYPE, "application/json");
    let body = match out.body {
        Ok(v) => Full::new(Bytes::from(serde_json::to_vec(&v).unwrap_or_default())).boxed(),
        Err(stream) => {
            b = b.header(header::CACHE_CONTROL, "no-cache, private");
            stream
        }
    };
    b.body(body)
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// Present a stored object through a resource definition.
pub fn view(def: &ResDef, stored: &Value) -> Value {
    match def.view {
        View::EventsV1 => events::core_to_v1(stored),
        View::Plain => {
            let mut v = stored.clone();
            v["apiVersion"] = json!(def.api_version());
            v["kind"] = json!(def.kind);
            v
        }
    }
}

/// A served object in stored form (the inverse of [`view`]).
pub(crate) fn unview(def: &ResDef, obj: &Value) -> Value {
    match def.view {
        View::EventsV1 => events::v1_to_core(obj),
        View::Plain => {
            let mut v = obj.clone();
            v["apiVersion"] = json!(def.api_version());
            v["kind"] = json!(def.kind);
            v
        }
    }
}

/// The resource a write goes to, for field ownership: every definition serving the same
/// stored objects (other versions and views compare in their own form).
fn scope(st: &State, t: &Target) -> managed::Scope {
    managed::Scope {
        defs: st
            .all_defs()
            .filter(|d| d.store_key == t.def.store_key)
            .cloned()
            .collect(),
        request: t.def.clone(),
        subresource: t.sub.clone(),
    }
}

fn ns_of(t: &Target) -> &str {
    t.ns.as_deref().unwrap_or("")
}

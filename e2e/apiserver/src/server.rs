//! HTTP routing and the API verbs.

use crate::error::{ApiError, ApiResult, Cause};
use crate::events;
use crate::patch;
use crate::resources::{ResDef, View};
use crate::schema;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{self, Change, State, finalizers, is_deleting, meta_str};
use crate::table;
use crate::webhook;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(10),
            webhook_services: HashMap::new(),
        }
    }
}

pub struct Shared {
    pub state: Mutex<State>,
    pub config: Config,
    pub requests: Mutex<Vec<Value>>,
    pub server_address: String,
}

impl Shared {
    pub fn new(config: Config, server_address: String) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        let mut state = State::new(config.watch_history, tx);
        state.webhook_services = config.webhook_services.clone();
        Shared {
            state: Mutex::new(state),
            config,
            requests: Mutex::new(Vec::new()),
            server_address,
        }
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
    if parts.method == Method::GET && path == "/openapi/v2" {
        return Ok(openapi_v2(&parts.headers));
    }
    let ctx = Ctx {
        query,
        headers: parts.headers.clone(),
        body,
    };
    let ua = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
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
    if let Some(mut entry) = log {
        entry["userAgent"] = json!(ua);
        entry["code"] = json!(out.code);
        let mut log = shared.requests.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() >= REQUEST_LOG_LIMIT {
            log.drain(..REQUEST_LOG_LIMIT / 10);
        }
        log.push(entry);
    }
    tracing::debug!(method = %parts.method, %path, code = out.code, "request");
    Ok(render(out))
}

/// An OpenAPI v2 document without definitions: kubectl's client-side validation (used for
/// `kind: List` manifests) then skips the schema check instead of failing; the real schemas are
/// served as OpenAPI v3.
fn openapi_v2(headers: &HeaderMap) -> Response<Body> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (ct, body) = if accept.contains("protobuf") {
        // gnostic openapi_v2.Document { swagger: "2.0" (1), info: Info { title (1), version (2) } (2) }
        let mut info = vec![0x0a, 10];
        info.extend_from_slice(b"Kubernetes");
        info.extend_from_slice(&[0x12, 7]);
        info.extend_from_slice(b"v1.32.0");
        let mut doc = vec![0x0a, 3];
        doc.extend_from_slice(b"2.0");
        doc.push(0x12);
        doc.push(info.len() as u8);
        doc.extend_from_slice(&info);
        (
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            Bytes::from(doc),
        )
    } else {
        let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": {}, "definitions": {}});
        ("application/json", Bytes::from(doc.to_string()))
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, ct)
        .body(Full::new(body).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
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

fn decode(seg: &str) -> String {
    percent_encoding::percent_decode_str(seg)
        .decode_utf8_lossy()
        .into_owned()
}

async fn route(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    ctx: &Ctx,
) -> (Out, Option<Value>) {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let get = method == Method::GET;
    let plain = |v: Value| (Out::json(200, v), None);
    match s.as_slice() {
        ["version"] if get => return plain(version()),
        ["healthz" | "readyz" | "livez"] if get => {
            return (
                Out {
                    code: 200,
                    body: Ok(json!("ok")),
                    warnings: vec![],
                },
                None,
            );
        }
        ["api"] if get => {
            return plain(json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.server_address}]}));
        }
        ["apis"] if get => return plain(api_groups(&shared.lock())),
        ["apis", g] if get => {
            let groups = api_groups(&shared.lock());
            return match groups["groups"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["name"] == *g))
            {
                Some(grp) => {
                    let mut grp = grp.clone();
                    grp["kind"] = json!("APIGroup");
                    grp["apiVersion"] = json!("v1");
                    plain(grp)
                }
                None => (Out::err(ApiError::not_found_path()), None),
            };
        }
        ["api", "v1"] if get => return plain(resource_list(&shared.lock(), "", "v1")),
        ["apis", g, v] if get => {
            let st = shared.lock();
            if st.all_defs().any(|d| d.group == *g && d.version == *v) {
                return plain(resource_list(&st, g, v));
            }
            return (Out::err(ApiError::not_found_path()), None);
        }
        ["openapi", "v3"] if get => return plain(crate::openapi::index(&shared.lock())),
        ["openapi", "v3", rest @ ..] if get => {
            return match crate::openapi::document(&shared.lock(), &rest.join("/")) {
                Some(d) => plain(d),
                None => (Out::err(ApiError::not_found_path()), None),
            };
        }
        ["debug", "requests"] => {
            let mut reqs = shared.requests.lock().unwrap_or_else(|e| e.into_inner());
            if method == Method::DELETE {
                reqs.clear();
                return plain(json!({"requests": []}));
            }
            return plain(json!({"requests": *reqs}));
        }
        _ => {}
    }
    let (group, version, rest) = match s.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return (Out::err(ApiError::not_found_path()), None),
    };
    let target = {
        let st = shared.lock();
        parse_target(&st, group, version, rest)
    };
    let target = match target {
        Some(t) => t,
        None => return (Out::err(ApiError::not_found_path()), None),
    };
    let verb = match (method.as_str(), target.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if matches!(ctx.q("watch"), Some("true" | "1")) => "watch",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unsupported",
    };
    let log = json!({"verb": verb, "resource": target.def.plural, "subresource": target.sub,
        "namespace": target.ns.clone().unwrap_or_default(), "name": target.name.clone().unwrap_or_default(),
        "apiGroup": target.def.group, "apiVersion": target.def.version});
    let out = match dispatch(shared, verb, &target, ctx).await {
        Ok(o) => o,
        Err(e) => Out::err(e),
    };
    (out, Some(log))
}

fn version() -> Value {
    json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-keeper-emulator", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.4", "compiler": "gc", "platform": "linux/amd64"})
}

fn api_groups(st: &State) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for d in st.all_defs().filter(|d| !d.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, vs)) => {
                if !vs.contains(&d.version) {
                    vs.push(d.version.clone())
                }
            }
            None => groups.push((d.group.clone(), vec![d.version.clone()])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(st: &State, group: &str, version: &str) -> Value {
    let resources: Vec<Value> = st
        .all_defs()
        .filter(|d| d.group == group && d.version == version)
        .flat_map(|d| d.discovery())
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

struct Target {
    def: Arc<ResDef>,
    ns: Option<String>,
    name: Option<String>,
    sub: String,
}

fn parse_target(st: &State, group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(def) = st.resolve(group, version, rest[2]).filter(|d| d.namespaced)
    {
        return match rest.len() {
            3 => Some(Target {
                def,
                ns: Some(rest[1].into()),
                name: None,
                sub: String::new(),
            }),
            4 => Some(Target {
                def,
                ns: Some(rest[1].into()),
                name: Some(rest[3].into()),
                sub: String::new(),
            }),
            5 => Some(Target {
                def,
                ns: Some(rest[1].into()),
                name: Some(rest[3].into()),
                sub: rest[4].into(),
            }),
            _ => None,
        };
    }
    let def = st.resolve(group, version, rest.first()?)?;
    let t = match rest.len() {
        1 => Target {
            def,
            ns: None,
            name: None,
            sub: String::new(),
        },
        2 if !def.namespaced => Target {
            def,
            ns: None,
            name: Some(rest[1].into()),
            sub: String::new(),
        },
        3 if !def.namespaced => Target {
            def,
            ns: None,
            name: Some(rest[1].into()),
            sub: rest[2].into(),
        },
        _ => return None,
    };
    Some(t)
}

async fn dispatch(shared: &Arc<Shared>, verb: &str, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let status_ok = t.sub == "status" && t.def.status_sub;
    if !t.sub.is_empty() && !status_ok {
        return Err(ApiError::not_found_path());
    }
    if !t.sub.is_empty() && !matches!(verb, "get" | "update" | "patch") {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource".to_string(),
        ));
    }
    match verb {
        "get" => get(shared, t, ctx),
        "list" => list(shared, t, ctx),
        "watch" => watch(shared, t, ctx),
        "create" | "update" | "patch" | "delete" => write(shared, verb, t, ctx, None).await,
        "deletecollection" => delete_collection(shared, t, ctx).await,
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
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

fn unview(def: &ResDef, obj: &Value) -> Value {
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

fn ns_of(t: &Target) -> &str {
    t.ns.as_deref().unwrap_or("")
}

fn get(shared: &Arc<Shared>, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let st = shared.lock();
    let name = t.name.as_deref().unwrap_or_default();
    let obj = st
        .get(&t.def.store_key, ns_of(t), name)
        .ok_or_else(|| ApiError::not_found(&t.def.group, &t.def.plural, name))?;
    let v = view(&t.def, obj);
    Ok(Out::json(200, shape_one(&t.def, v, ctx, st.rv)))
}

fn shape_one(def: &ResDef, v: Value, ctx: &Ctx, rv: u64) -> Value {
    match want(&ctx.headers) {
        Want::Json => v,
        Want::Meta => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": v["metadata"]})
        }
        Want::Table => table::table(
            def,
            &[v],
            ctx.q("includeObject").unwrap_or("Metadata"),
            true,
            json!({"resourceVersion": rv.to_string()}),
        ),
    }
}

struct Filter {
    store_key: String,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn new(t: &Target, ctx: &Ctx) -> ApiResult<Self> {
        let labels = LabelSelector::parse(ctx.q("labelSelector").unwrap_or(""))?;
        let fields =
            FieldSelector::parse(ctx.q("fieldSelector").unwrap_or(""), &t.def.field_labels)?;
        Ok(Filter {
            store_key: t.def.store_key.clone(),
            ns: t.ns.clone(),
            labels,
            fields,
        })
    }
    fn matches(&self, stored: &Value) -> bool {
        self.labels.matches(stored) && self.fields.matches(stored)
    }
}

fn list(shared: &Arc<Shared>, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let filter = Filter::new(t, ctx)?;
    let limit: usize = ctx
        .q("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let start_after: Option<(String, String)> = match ctx.q("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c).ok_or_else(|| {
            ApiError::bad_request("continue key is not valid: illegal base64 data")
        })?),
        None => None,
    };
    let st = shared.lock();
    let mut items = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    if let Some(m) = st.objects.get(&t.def.store_key) {
        for ((ns, name), obj) in m {
            if filter.ns.as_deref().is_some_and(|f| f != ns) {
                continue;
            }
            if let Some((sns, sname)) = &start_after
                && (ns, name) <= (sns, sname)
            {
                continue;
            }
            if !filter.matches(obj) {
                continue;
            }
            if items.len() >= limit {
                remaining += 1;
                continue;
            }
            items.push(view(&t.def, obj));
            if items.len() == limit {
                next = Some((ns.clone(), name.clone()));
            }
        }
    }
    let mut meta = json!({"resourceVersion": st.rv.to_string()});
    if remaining > 0
        && let Some((ns, name)) = next
    {
        meta["continue"] = json!(encode_continue(&ns, &name));
        meta["remainingItemCount"] = json!(remaining);
    }
    let body = match want(&ctx.headers) {
        Want::Table => table::table(
            &t.def,
            &items,
            ctx.q("includeObject").unwrap_or("Metadata"),
            true,
            meta,
        ),
        Want::Meta => {
            let items: Vec<Value> = items
                .iter()
                .map(|o| json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}))
                .collect();
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items})
        }
        Want::Json => {
            json!({"kind": t.def.list_kind(), "apiVersion": t.def.api_version(), "metadata": meta, "items": items})
        }
    };
    Ok(Out::json(200, body))
}

fn encode_continue(ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&json!([ns, name])).unwrap_or_default())
}

fn decode_continue(c: &str) -> Option<(String, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c)
        .ok()?;
    let v: (String, String) = serde_json::from_slice(&raw).ok()?;
    Some(v)
}

fn watch_line(ty: &str, obj: Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": ty, "object": obj})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn watch(shared: &Arc<Shared>, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let filter = Filter::new(t, ctx)?;
    let def = t.def.clone();
    let rv_param = ctx.q("resourceVersion").unwrap_or("").to_string();
    let bookmarks = matches!(ctx.q("allowWatchBookmarks"), Some("true" | "1"));
    let send_initial = matches!(ctx.q("sendInitialEvents"), Some("true" | "1"));
    let timeout = ctx
        .q("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let want = want(&ctx.headers);
    let include = ctx.q("includeObject").unwrap_or("Metadata").to_string();
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut first: Vec<(String, Value)> = Vec::new();
    let (mut brx, start_rv, gone) = {
        let st = shared.lock();
        let brx = st.tx.subscribe();
        let mut gone = None;
        if rv_param.is_empty() || rv_param == "0" || send_initial {
            if let Some(m) = st.objects.get(&def.store_key) {
                for ((ns, _), obj) in m {
                    if filter.ns.as_deref().is_none_or(|f| f == ns) && filter.matches(obj) {
                        first.push(("ADDED".into(), view(&def, obj)));
                    }
                }
            }
        } else {
            let req: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?;
            if req < st.compacted {
                gone = Some(req);
            } else {
                for c in st.history.iter().filter(|c| c.rv > req) {
                    if let Some(ev) = translate(&def, &filter, c) {
                        first.push(ev);
                    }
                }
            }
        }
        let compacted = st.compacted;
        (brx, st.rv, gone.map(|r| (r, compacted)))
    };
    let interval = shared.config.bookmark_interval;
    tokio::spawn(async move {
        let mut headers_sent = false;
        let mut render = |ty: &str, obj: Value| -> Bytes {
            match want {
                Want::Table if ty != "ERROR" && ty != "BOOKMARK" => {
                    let t = table::table(&def, &[obj], &include, !headers_sent, json!({}));
                    headers_sent = true;
                    watch_line(ty, t)
                }
                Want::Meta if ty != "ERROR" && ty != "BOOKMARK" => watch_line(
                    ty,
                    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}),
                ),
                _ => watch_line(ty, obj),
            }
        };
        let bookmark = |rv: u64, initial_end: bool| -> Value {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta})
        };
        if let Some((req, compacted)) = gone {
            let e = ApiError::gone(format!(
                "too old resource version: {req} ({})",
                compacted + 1
            ));
            let _ = tx.send(render("ERROR", e.to_status())).await;
            return;
        }
        for (ty, obj) in first {
            if tx.send(render(&ty, obj)).await.is_err() {
                return;
            }
        }
        let mut progress = start_rv;
        if send_initial
            && bookmarks
            && tx
                .send(render("BOOKMARK", bookmark(progress, true)))
                .await
                .is_err()
        {
            return;
        }
        let deadline = timeout.map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        loop {
            let sleep_until = deadline
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400));
            tokio::select! {
                ev = brx.recv() => match ev {
                    Ok(c) => {
                        if c.rv <= progress {
                            continue;
                        }
                        progress = c.rv;
                        // Like kube-apiserver, watches of a custom resource end with its CRD.
                        if def.crd && c.ty == "DELETED" && c.store_key == crate::resources::CRD_KEY
                            && c.obj["spec"]["group"] == def.group.as_str()
                            && c.obj["spec"]["names"]["plural"] == def.plural.as_str() {
                            return;
                        }
                        if let Some((ty, obj)) = translate(&def, &filter, &c)
                            && tx.send(render(&ty, obj)).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let e = ApiError::gone("the watch fell too far behind; restart it");
                        let _ = tx.send(render("ERROR", e.to_status())).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    // Every change passes through this watcher's receiver (filtered or not), so
                    // `progress` is exactly how far this watch has seen; queued changes beyond it
                    // are still delivered after the bookmark.
                    if tx.send(render("BOOKMARK", bookmark(progress, false))).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(sleep_until) => return,
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Ok(Out {
        code: 200,
        body: Err(BodyExt::boxed(StreamBody::new(stream))),
        warnings: vec![],
    })
}

/// Turn a store change into a watch event for one watcher (selector transitions included).
fn translate(def: &ResDef, f: &Filter, c: &Change) -> Option<(String, Value)> {
    if c.store_key != f.store_key || f.ns.as_deref().is_some_and(|n| n != c.ns) {
        return None;
    }
    let new_m = f.matches(&c.obj);
    let ty = match c.ty {
        "MODIFIED" => {
            let old_m = c.old.as_ref().is_some_and(|o| f.matches(o));
            match (old_m, new_m) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            }
        }
        other if new_m => other,
        _ => return None,
    };
    Some((ty.to_string(), view(def, &c.obj)))
}

// ---------------------------------------------------------------------------------------------
// Writes: plan under the lock, run admission webhooks unlocked, commit under the lock.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Create,
    Update,
    Delete,
}

struct Plan {
    op: Op,
    ns: String,
    name: String,
    /// Stored object the plan was based on.
    old: Option<Value>,
    /// Stored object to write.
    new: Option<Value>,
    noop: bool,
    policy: String,
    warnings: Vec<String>,
    hooks: Vec<webhook::Hook>,
    code: u16,
    /// Server-side apply: remember this configuration for (field manager key) once committed.
    applied: Option<(String, Value)>,
}

async fn write(
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
                "create" => plan_create(&st, t, ctx, None)?,
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
        "userInfo": {"username": "keeper-dev", "groups": ["system:masters", "system:authenticated"]},
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
    if !dry && let Some((manager, record)) = &plan.applied {
        let uid = plan
            .new
            .as_ref()
            .or(plan.old.as_ref())
            .map(|o| meta_str(o, "uid").to_string())
            .unwrap_or_default();
        st.applied.insert((uid, manager.clone()), record.clone());
    }
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

fn check_namespace(st: &State, def: &ResDef, ns: &str, name: &str) -> ApiResult<()> {
    if !def.namespaced {
        return Ok(());
    }
    match st.namespace_state(ns) {
        None => Err(ApiError::not_found("", "namespaces", ns)),
        Some(true) => {
            let mut e = ApiError::forbidden(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            e.message = format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                crate::error::qualified(&def.plural, &def.group)
            );
            Err(e)
        }
        Some(false) => Ok(()),
    }
}

fn check_type(def: &ResDef, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    if let Some(av) = obj["apiVersion"].as_str()
        && av != def.api_version()
        && !(def.crd && av.starts_with(&format!("{}/", def.group)))
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(k) = obj["kind"].as_str()
        && k != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            def.kind
        )));
    }
    Ok(())
}

fn valid_name(def: &ResDef, name: &str) -> Option<String> {
    use regex::Regex;
    use std::sync::OnceLock;
    static SUB: OnceLock<Regex> = OnceLock::new();
    static LABEL: OnceLock<Regex> = OnceLock::new();
    let sub = SUB.get_or_init(|| {
        Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
            .expect("regex")
    });
    let label =
        LABEL.get_or_init(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("regex"));
    if def.group == "rbac.authorization.k8s.io" {
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            return Some("may not contain '/' or '%' and may not be '.' or '..'".to_string());
        }
        return None;
    }
    if def.plural == "namespaces" && def.group.is_empty() {
        if name.len() > 63 || !label.is_match(name) {
            return Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
        }
        return None;
    }
    if name.len() > 253 || !sub.is_match(name) {
        return Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    None
}

fn random_suffix() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = rand::rng();
    (0..5)
        .map(|_| CHARS[r.random_range(0..CHARS.len())] as char)
        .collect()
}

fn strip_server_fields(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            m.remove(k);
        }
    }
}

fn plan_create(st: &State, t: &Target, ctx: &Ctx, body: Option<Value>) -> ApiResult<Plan> {
    let def = &t.def;
    let body = match body {
        Some(b) => b,
        None => ctx.body_value()?,
    };
    check_type(def, &body)?;
    let mut obj = unview(def, &body);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let ns = if def.namespaced {
        let path_ns = ns_of(t).to_string();
        match obj["metadata"]["namespace"].as_str() {
            Some(n) if !n.is_empty() && n != path_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
        obj["metadata"]["namespace"] = json!(path_ns);
        path_ns
    } else {
        obj["metadata"]
            .as_object_mut()
            .map(|m| m.remove("namespace"));
        String::new()
    };
    let mut name = meta_str(&obj, "name").to_string();
    let gen_name = meta_str(&obj, "generateName").to_string();
    if name.is_empty() && !gen_name.is_empty() {
        for _ in 0..10 {
            name = format!("{gen_name}{}", random_suffix());
            if st.get(&def.store_key, &ns, &name).is_none() {
                break;
            }
        }
        obj["metadata"]["name"] = json!(name);
    }
    if name.is_empty() {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            "",
            vec![Cause::new(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )],
        ));
    }
    if let Some(why) = valid_name(def, &name) {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            &name,
            vec![Cause::invalid("metadata.name", &json!(name), why)],
        ));
    }
    if st.get(&def.store_key, &ns, &name).is_some() {
        return Err(ApiError::already_exists(&def.group, &def.plural, &name));
    }
    let causes = crate::meta::validate(&obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&def.group, &def.kind, &name, causes));
    }
    if def.crd
        && st
            .get(
                crate::resources::CRD_KEY,
                "",
                &format!("{}.{}", def.plural, def.group),
            )
            .is_some_and(is_deleting)
    {
        return Err(ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        ));
    }
    check_namespace(st, def, &ns, &name)?;
    strip_server_fields(&mut obj);
    let m = &mut obj["metadata"];
    m["uid"] = json!(uuid::Uuid::new_v4().to_string());
    m["creationTimestamp"] = json!(store::now());
    m["generation"] = json!(1);
    if def.status_sub {
        obj.as_object_mut().map(|o| o.remove("status"));
    }
    let mut warnings = Vec::new();
    strategy(st, def, &mut obj, None)?;
    cr_schema(def, &mut obj, ctx, &mut warnings, &name)?;
    let hooks = webhook::matching(st, def, "CREATE", &t.sub, &ns, Some(&view(def, &obj)), None);
    Ok(Plan {
        op: Op::Create,
        ns,
        name,
        old: None,
        new: Some(obj),
        noop: false,
        policy: String::new(),
        warnings,
        hooks,
        code: 201,
        applied: None,
    })
}

/// Kind-specific rules (the registry "strategies").
fn strategy(_st: &State, def: &ResDef, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    for field in ["spec", "status", "data", "stringData", "binaryData"] {
        let v = &obj[field];
        let kind_ok = match field {
            "data" | "stringData" | "binaryData" => v
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string)),
            _ => v.is_object(),
        };
        if !v.is_null() && !kind_ok && !def.crd {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {field} has the wrong type",
                def.kind, def.version, def.kind
            )));
        }
    }
    if def.crd {
        return Ok(());
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => {
            let name = meta_str(obj, "name").to_string();
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            if old.is_none() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
                obj["status"] = json!({"phase": "Active"});
            }
        }
        ("", "secrets") => {
            use base64::Engine;
            if let Some(sd) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
                && let Some(sd) = sd.as_object()
            {
                for (k, v) in sd {
                    let enc = base64::engine::general_purpose::STANDARD
                        .encode(v.as_str().unwrap_or_default());
                    obj["data"][k] = json!(enc);
                }
            }
            if obj["type"].is_null() {
                obj["type"] = json!("Opaque");
            }
            if let Some(d) = obj["data"].as_object() {
                for (k, v) in d {
                    let ok = v.as_str().is_some_and(|s| {
                        base64::engine::general_purpose::STANDARD.decode(s).is_ok()
                    });
                    if !ok {
                        return Err(ApiError::bad_request(format!(
                            "illegal base64 data in Secret data key {k:?}"
                        )));
                    }
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_strategy(obj, old)?,
        ("", "services") if obj["spec"]["type"].is_null() => {
            obj["spec"]["type"] = json!("ClusterIP");
        }
        _ => {}
    }
    if def.group.is_empty() && matches!(def.plural.as_str(), "secrets" | "configmaps") {
        config_data_rules(def, obj, old)?;
    }
    Ok(())
}

/// Secret/ConfigMap data keys and `immutable`, as kube validates them.
fn config_data_rules(def: &ResDef, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    use regex::Regex;
    use std::sync::OnceLock;
    static KEY: OnceLock<Regex> = OnceLock::new();
    let key_re = KEY.get_or_init(|| Regex::new(r"^[-._a-zA-Z0-9]+$").expect("regex"));
    let name = meta_str(obj, "name").to_string();
    let mut causes = Vec::new();
    for field in ["data", "binaryData"] {
        for k in obj[field]
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            if k.len() > 253 || !key_re.is_match(&k) {
                causes.push(Cause::invalid(
                    format!("{field}[{k}]"),
                    &json!(k),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ));
            }
        }
    }
    if let Some(old) = old
        && old["immutable"].as_bool() == Some(true)
    {
        for field in ["data", "binaryData"] {
            if obj[field] != old[field] {
                causes.push(Cause::forbidden(
                    field,
                    "field is immutable when `immutable` is set",
                ));
            }
        }
        if obj["immutable"] != old["immutable"] {
            causes.push(Cause::forbidden(
                "immutable",
                "field is immutable when `immutable` is set",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&def.group, &def.kind, &name, causes))
    }
}

fn crd_strategy(obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let name = meta_str(obj, "name").to_string();
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let plural = spec["names"]["plural"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = spec["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    }
    if kind.is_empty() {
        causes.push(Cause::required("spec.names.kind"));
    }
    if !matches!(spec["scope"].as_str(), Some("Namespaced" | "Cluster")) {
        causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                crate::error::render_value(&spec["scope"])
            ),
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!([]),
            "must have exactly one version marked as storage version",
        ));
    } else if versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        causes.push(Cause::invalid(
            "spec.versions",
            &spec["versions"],
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if !v["schema"]["openAPIV3Schema"].is_object() {
            causes.push(Cause::required(format!(
                "spec.versions[{i}].schema.openAPIV3Schema"
            )));
        }
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            &name,
            causes,
        ));
    }
    if obj["spec"]["names"]["singular"].is_null() {
        obj["spec"]["names"]["singular"] = json!(kind.to_lowercase());
    }
    if obj["spec"]["names"]["listKind"].is_null() {
        obj["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
    }
    if obj["spec"]["conversion"].is_null() {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    let storage = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default();
    // Conditions keep their transition time while they stay true.
    let now = old
        .and_then(|o| o["status"]["conditions"][0]["lastTransitionTime"].as_str())
        .map(str::to_string)
        .unwrap_or_else(store::now);
    let mut stored_versions: Vec<Value> = old
        .and_then(|o| o["status"]["storedVersions"].as_array().cloned())
        .unwrap_or_default();
    if !stored_versions.iter().any(|v| v == storage) {
        stored_versions.push(json!(storage));
    }
    obj["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "acceptedNames": obj["spec"]["names"].clone(),
        "storedVersions": stored_versions,
    });
    if old.is_none() {
        let mut f = finalizers(obj);
        if !f
            .iter()
            .any(|x| x == "customresourcecleanup.apiextensions.k8s.io")
        {
            f.push("customresourcecleanup.apiextensions.k8s.io".into());
        }
        store::set_finalizers(obj, f);
    }
    Ok(())
}

/// Custom resources: prune unknown fields, apply defaults, validate.
fn cr_schema(
    def: &ResDef,
    obj: &mut Value,
    ctx: &Ctx,
    warnings: &mut Vec<String>,
    name: &str,
) -> ApiResult<()> {
    let Some(s) = def.schema.as_ref().filter(|s| s.is_object()) else {
        return Ok(());
    };
    let mut unknown = Vec::new();
    schema::prune(s, obj, "", &mut unknown);
    if !unknown.is_empty() {
        let msgs: Vec<String> = unknown
            .iter()
            .map(|u| format!("unknown field \"{u}\""))
            .collect();
        match ctx.q("fieldValidation") {
            Some("Strict") => {
                return Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    msgs.join(", ")
                )));
            }
            Some("Ignore") => {}
            _ => warnings.extend(msgs),
        }
    }
    schema::default(s, obj);
    let mut causes = Vec::new();
    schema::validate(s, obj, "", &mut causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&def.group, &def.kind, name, causes));
    }
    Ok(())
}

fn without(v: &Value, keys: &[&str]) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    v
}

/// Shared tail of update and patch: `new` is the client's desired object (stored form).
fn finish_update(
    st: &State,
    t: &Target,
    ctx: &Ctx,
    current: &Value,
    mut new: Value,
    require_rv: bool,
) -> ApiResult<Plan> {
    let def = &t.def;
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
    cr_schema(def, &mut new, ctx, &mut warnings, &name)?;
    let spec_keys: &[&str] = if def.status_sub {
        &["metadata", "status"]
    } else {
        &["metadata"]
    };
    if without(&new, spec_keys) != without(current, spec_keys) {
        let g = current["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(g);
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
        applied: None,
    })
}

fn current(st: &State, t: &Target) -> ApiResult<Value> {
    let name = t.name.as_deref().unwrap_or_default();
    st.get(&t.def.store_key, ns_of(t), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&t.def.group, &t.def.plural, name))
}

fn plan_update(st: &State, t: &Target, ctx: &Ctx) -> ApiResult<Plan> {
    let body = ctx.body_value()?;
    check_type(&t.def, &body)?;
    let cur = current(st, t)?;
    let new = unview(&t.def, &body);
    finish_update(st, t, ctx, &cur, new, t.def.crd)
}

fn plan_patch(st: &State, t: &Target, ctx: &Ctx) -> ApiResult<Plan> {
    let def = &t.def;
    let ct = ctx.content_type();
    let name = t.name.clone().unwrap_or_default();
    if ct == "application/apply-patch+yaml" || ct == "application/apply-patch+json" {
        if ctx.q("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause::new(
                    "FieldValueRequired",
                    "fieldManager",
                    "Required value: is required for apply patch",
                )],
            ));
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
        let manager = format!(
            "{}{}",
            ctx.q("fieldManager").unwrap_or_default(),
            if t.sub.is_empty() {
                String::new()
            } else {
                format!("/{}", t.sub)
            }
        );
        let mut record = applied.clone();
        if let Some(o) = record.as_object_mut() {
            o.remove("apiVersion");
            o.remove("kind");
        }
        if let Some(m) = record["metadata"].as_object_mut() {
            for k in ["name", "namespace", "resourceVersion", "uid"] {
                m.remove(k);
            }
        }
        let Some(cur) = st.get(&def.store_key, ns_of(t), &name).cloned() else {
            if !t.sub.is_empty() {
                return Err(ApiError::not_found(&def.group, &def.plural, &name));
            }
            let mut body = applied.clone();
            body["metadata"]["name"] = json!(name);
            let mut plan = plan_create(st, t, ctx, Some(body))?;
            plan.applied = Some((manager, record));
            return Ok(plan);
        };
        let mut merged = view(def, &cur);
        let wanted_rv = applied["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        let mut applied = applied;
        applied["metadata"]
            .as_object_mut()
            .map(|m| m.remove("resourceVersion"));
        if let Some(prev) = st
            .applied
            .get(&(meta_str(&cur, "uid").to_string(), manager.clone()))
        {
            patch::apply_remove_stale(&mut merged, prev, &record, def.schema.as_ref(), "");
        }
        patch::apply_merge(&mut merged, &applied, def.schema.as_ref(), "");
        if let Some(rv) = wanted_rv {
            merged["metadata"]["resourceVersion"] = json!(rv);
        }
        check_type(def, &merged)?;
        let new = unview(def, &merged);
        let mut plan = finish_update(st, t, ctx, &cur, new, false)?;
        plan.applied = Some((manager, record));
        return Ok(plan);
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
    finish_update(st, t, ctx, &cur, new, false)
}

fn plan_delete(
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
        applied: None,
    })
}

async fn delete_collection(shared: &Arc<Shared>, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let filter = Filter::new(t, ctx)?;
    let keys: Vec<(String, String)> = {
        let st = shared.lock();
        st.objects
            .get(&t.def.store_key)
            .map(|m| {
                m.iter()
                    .filter(|((ns, _), o)| {
                        filter.ns.as_deref().is_none_or(|f| f == ns) && filter.matches(o)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
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

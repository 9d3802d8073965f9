//! # keeper-e2e-awsproxy: moto as AWS behaves under load, and RDS that takes time
//!
//! An HTTP proxy in front of a moto server for keeper's local control plane and tests. It
//! forwards every request unchanged (method, path, query, headers with `Host`, so SigV4
//! signatures still verify, and body) and can
//!
//! - inject faults by share, per service (`s3`, `iam`, `rds`) and action: 500/503, S3 `SlowDown`,
//!   IAM/RDS `Throttling`, any AWS error by its code and status (IAM's `LimitExceeded`,
//!   `DeleteConflict`) with the XML bodies AWS sends, connections dropped before the call reaches
//!   moto, and answers lost after moto acted (module [`faults`]);
//! - give RDS instances `creating` → `backing-up` → `available`, `modifying` and `deleting`
//!   phases of configurable length (module [`rds`]).
//!
//! Requests are classified (module [`classify`]) by the SigV4 signing name and the S3 REST
//! method/path/query or the Query API `Action=`. moto's own API (`/moto-api/...`) passes
//! untouched. It binds loopback addresses only; with no rules and zero-length phases it is a
//! plain pass-through.
//!
//! ```text
//! keeper-e2e-awsproxy --moto-endpoint http://127.0.0.1:PORT [--listen 127.0.0.1:0]
//!     [--ready-file PATH] [--rds-creating 2s] [--rds-backing-up 2s] [--rds-modifying 2s]
//!     [--rds-deleting 2s] [--faults '{"seed": 1, "rules": [...]}']
//! ```
//!
//! Debug endpoints (JSON; the path cannot be an S3 bucket, names have no `_`):
//! - `GET|PUT|DELETE /_awsproxy/faults`: the fault rules and their counters (see [`faults`]), e.g.
//!   `curl -X PUT $URL/_awsproxy/faults -d '{"seed": 1, "rules": [{"service": "rds", "share": 0.2, "faults": ["throttle", "500", "lost"]}]}'`
//! - `GET|PUT /_awsproxy/rds`: phase lengths in milliseconds,
//!   `{"creating": 2000, "backingUp": 2000, "modifying": 2000, "deleting": 2000}`.
//! - `GET|DELETE /_awsproxy/calls`: calls by service and action since the last reset (see
//!   [`calls`]), `{"calls": {"s3": {"CreateBucket": 2}}, "total": 2}`; `GET
//!   /_awsproxy/calls/log`: the last calls with when they arrived and the fault they got,
//!   `{"log": [{"atMs": 1700000000000, "service": "iam", "action": "CreateUser", "fault": "LimitExceeded"}]}`.

pub mod calls;
pub mod classify;
pub mod faults;
pub mod rds;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use faults::Settings;
pub use rds::Phases;

/// Headers that belong to one connection, not to the request.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// Largest request body the proxy buffers (it reads whole bodies to classify and forward them).
const BODY_LIMIT: usize = 256 * 1024 * 1024;

/// How to start a proxy.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// e.g. `http://127.0.0.1:5000`
    pub moto_endpoint: String,
    pub phases: Phases,
    pub faults: Settings,
}

impl Config {
    /// A pass-through proxy on a free 127.0.0.1 port.
    pub fn new(moto_endpoint: impl Into<String>) -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            moto_endpoint: moto_endpoint.into().trim_end_matches('/').to_string(),
            phases: Phases::default(),
            faults: Settings::default(),
        }
    }
}

struct Ctx {
    moto: String,
    http: Client<HttpConnector, Full<Bytes>>,
    faults: faults::Faults,
    rds: rds::Rds,
    calls: calls::Calls,
}

/// A running proxy; stops on drop.
pub struct Proxy {
    url: String,
    stop: watch::Sender<bool>,
}

impl Proxy {
    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Binds and starts serving.
pub async fn start(config: Config) -> anyhow::Result<Proxy> {
    if !config.listen.ip().is_loopback() {
        anyhow::bail!(
            "refusing to listen on {}: loopback addresses only",
            config.listen
        );
    }
    let listener = TcpListener::bind(config.listen).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let ctx = Arc::new(Ctx {
        moto: config.moto_endpoint,
        http: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
        faults: faults::Faults::new(config.faults),
        rds: rds::Rds::new(config.phases),
        calls: calls::Calls::default(),
    });
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(serve(listener, ctx, stop_rx));
    Ok(Proxy { url, stop })
}

/// The connection is closed without an answer (a dropped connection or a lost response).
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by fault injection")
    }
}

impl std::error::Error for Dropped {}

async fn serve(listener: TcpListener, ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let ctx = ctx.clone();
                let mut stop = stop.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(ctx.clone(), req));
                    // A service error makes hyper close the connection without answering: that
                    // is how the connection faults are delivered.
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        r = conn => if let Err(e) = r { tracing::debug!(error = %e, "connection ended") },
                        _ = stop.changed() => {}
                    }
                });
            }
            _ = stop.changed() => return,
        }
    }
}

async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Dropped> {
    let (mut parts, body) = req.into_parts();
    let body = match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(plain(
                StatusCode::BAD_REQUEST,
                json!({"error": format!("reading the body: {e}")}),
            ));
        }
    };
    let path = parts.uri.path().to_string();
    if let Some(rest) = path.strip_prefix("/_awsproxy/") {
        return Ok(debug(&ctx, &parts.method, rest, &body));
    }
    let call = classify::classify(
        &parts.method,
        &path,
        parts.uri.query(),
        &parts.headers,
        &body,
    );
    let decision = ctx.faults.decide(&call);
    ctx.calls.record(&call, decision.fault.as_ref());
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    let head = parts.method == Method::HEAD;
    match &decision.fault {
        Some(faults::Fault::Drop) => return Err(Dropped),
        Some(faults::Fault::Lost) | None => {}
        Some(fault) => {
            if let Some(answer) = faults::error_response(fault, &call, &path, head) {
                return Ok(answer);
            }
        }
    }
    let rds = call.service == "rds";
    if rds && let Some(refusal) = ctx.rds.refuse(&call) {
        return Ok(refusal);
    }
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    parts.uri = match format!("{}{pq}", ctx.moto).parse::<Uri>() {
        Ok(u) => u,
        Err(e) => {
            return Ok(plain(
                StatusCode::BAD_REQUEST,
                json!({"error": e.to_string()}),
            ));
        }
    };
    parts.version = http::Version::HTTP_11;
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    let answer = match ctx
        .http
        .request(Request::from_parts(parts, Full::new(body)))
        .await
    {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "moto unreachable");
            return Ok(plain(
                StatusCode::BAD_GATEWAY,
                json!({"error": format!("moto unreachable: {e}")}),
            ));
        }
    };
    let (mut parts, body) = answer.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Err(Dropped);
    };
    let (status, body) = if rds {
        ctx.rds.present(&call, parts.status.as_u16(), body)
    } else {
        (parts.status.as_u16(), body)
    };
    // moto acted; the client is never told.
    if decision.fault == Some(faults::Fault::Lost) {
        return Err(Dropped);
    }
    parts.status = StatusCode::from_u16(status).unwrap_or(parts.status);
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    if !head {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// `/_awsproxy/faults`, `/_awsproxy/rds` and `/_awsproxy/calls`.
fn debug(ctx: &Ctx, method: &Method, path: &str, body: &[u8]) -> Response<Full<Bytes>> {
    match (method.clone(), path) {
        (Method::GET, "faults") => plain(StatusCode::OK, ctx.faults.describe()),
        (Method::PUT, "faults") => match Settings::parse(body) {
            Ok(s) => {
                ctx.faults.set(s);
                plain(StatusCode::OK, ctx.faults.describe())
            }
            Err(e) => plain(StatusCode::BAD_REQUEST, json!({"error": e})),
        },
        (Method::DELETE, "faults") => {
            ctx.faults.set(Settings::default());
            plain(StatusCode::OK, ctx.faults.describe())
        }
        (Method::GET, "calls") => plain(StatusCode::OK, ctx.calls.describe()),
        (Method::GET, "calls/log") => plain(StatusCode::OK, ctx.calls.log()),
        (Method::DELETE, "calls") => {
            ctx.calls.reset();
            plain(StatusCode::OK, ctx.calls.describe())
        }
        (Method::GET, "rds") => plain(StatusCode::OK, json!(ctx.rds.phases())),
        (Method::PUT, "rds") => match serde_json::from_slice::<Phases>(body) {
            Ok(p) => {
                ctx.rds.set_phases(p);
                plain(StatusCode::OK, json!(p))
            }
            Err(e) => plain(
                StatusCode::BAD_REQUEST,
                json!({"error": format!("phases: {e}")}),
            ),
        },
        _ => plain(
            StatusCode::NOT_FOUND,
            json!({"error": "GET|PUT|DELETE /_awsproxy/faults, GET|PUT /_awsproxy/rds, GET|DELETE /_awsproxy/calls, GET /_awsproxy/calls/log"}),
        ),
    }
}

fn plain(status: StatusCode, v: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("static header"),
    );
    r
}

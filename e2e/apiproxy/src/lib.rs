//! # keeper-e2e-apiproxy: kube-apiserver under stress, for one client
//!
//! A TLS proxy in front of a real kube-apiserver, for the scenarios that need API faults
//! (`make chaos`, the fault and leader scenarios). A keeper process is pointed at it with a copy
//! of its kubeconfig whose `server` is the proxy (the proxy serves kube-apiserver's own
//! certificate, so the kubeconfig's CA and token stay as they are). It passes every request on
//! unchanged, headers (the client's bearer token included) and body streamed both ways, watches
//! unbuffered, and, by the rules of module [`faults`]:
//!
//! - answers a share of requests with kube-apiserver's 409/429/500/503 instead;
//! - loses a share of answers: the request reaches kube-apiserver and takes effect, the client
//!   sees its connection close;
//! - ends watches after N seconds, as kube-apiserver's watch timeout does;
//! - delays requests.
//!
//! It does not authenticate, so it tells clients apart only by port: one proxy per client
//! process (every keeper authenticates as the same ServiceAccount). Each proxy runs on a thread
//! and runtime of its own, so the synchronous scenario harness can hold it, and stops when
//! dropped. It binds 127.0.0.1 only.

pub mod faults;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use faults::{Counters, Settings};

/// Headers that belong to one connection, not to the request.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Where the proxy sends requests and how it serves its client.
#[derive(Debug, Clone)]
pub struct Config {
    /// kube-apiserver, `https://127.0.0.1:PORT`.
    pub upstream: String,
    /// The CA that signed kube-apiserver's certificate (PEM).
    pub upstream_ca: PathBuf,
    /// The certificate and key the proxy serves (PEM): kube-apiserver's own, so that its
    /// client's kubeconfig needs no other CA.
    pub cert: PathBuf,
    pub key: PathBuf,
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

struct Ctx {
    /// `https://HOST:PORT`, without a path.
    upstream: String,
    client: Client<HttpsConnector<HttpConnector>, Incoming>,
    faults: faults::Faults,
}

/// A running proxy; stops (and closes every connection) when dropped.
pub struct ApiProxy {
    url: String,
    ctx: Arc<Ctx>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ApiProxy {
    /// Binds a free 127.0.0.1 port and starts serving on a thread of its own.
    pub fn start(config: Config) -> anyhow::Result<ApiProxy> {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let upstream = config.upstream.trim_end_matches('/').to_string();
        let parsed: Uri = upstream
            .parse()
            .with_context(|| format!("upstream {:?}", config.upstream))?;
        anyhow::ensure!(
            parsed.scheme_str() == Some("https") && parsed.path() == "/",
            "upstream {upstream:?}: kube-apiserver's https://HOST:PORT"
        );
        let mut roots = rustls::RootCertStore::empty();
        for cert in certificates(&config.upstream_ca)? {
            roots.add(cert)?;
        }
        let upstream_tls = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(upstream_tls)
            .https_only()
            .enable_http1()
            .build();
        let mut serving = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                certificates(&config.cert)?,
                PrivateKeyDer::from_pem_file(&config.key)
                    .with_context(|| format!("key {}", config.key.display()))?,
            )?;
        serving.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(serving));
        let ctx = Arc::new(Ctx {
            upstream,
            client: Client::builder(TokioExecutor::new()).build(connector),
            faults: faults::Faults::default(),
        });
        let listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        listener.set_nonblocking(true)?;
        let url = format!("https://{}", listener.local_addr()?);
        let (stop, stopped) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let thread = {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => serve(listener, acceptor, ctx, stopped).await,
                        Err(e) => eprintln!("keeper-e2e-apiproxy: {e}"),
                    }
                });
                // Connections still open (a watch) end with the runtime.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
        };
        Ok(ApiProxy {
            url,
            ctx,
            stop,
            thread: Some(thread),
        })
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Replaces the fault rules.
    pub fn set_faults(&self, settings: Settings) {
        self.ctx.faults.set(settings);
    }

    /// Removes every fault rule: a plain pass-through again.
    pub fn clear_faults(&self) {
        self.ctx.faults.clear();
    }

    /// The counters of each rule, in the rules' order.
    pub fn counters(&self) -> Vec<Counters> {
        self.ctx.faults.counters()
    }

    /// A copy of `kubeconfig` (YAML or JSON, as kubectl writes it) with every cluster's `server`
    /// pointed at this proxy, written to `to`.
    pub fn kubeconfig(&self, kubeconfig: &Path, to: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(kubeconfig)
            .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
        let pointed: Vec<String> = text
            .lines()
            .map(|line| match line.split_once("server:") {
                Some((indent, _)) if indent.trim().is_empty() => {
                    format!("{indent}server: {}", self.url)
                }
                _ => line.to_string(),
            })
            .collect();
        anyhow::ensure!(
            pointed
                .iter()
                .any(|l| l.trim_start().starts_with("server: ")),
            "kubeconfig {} names no server",
            kubeconfig.display()
        );
        std::fs::write(to, pointed.join("\n") + "\n")?;
        Ok(())
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("certificates {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("certificates {}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "no certificate in {}", path.display());
    Ok(certs)
}

async fn serve(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    ctx: Arc<Ctx>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => continue,
            },
            _ = stopped.changed() => return,
        };
        let (acceptor, ctx) = (acceptor.clone(), ctx.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = hyper::service::service_fn(move |request| {
                let ctx = ctx.clone();
                async move { handle(&ctx, request).await }
            });
            // An error ends this connection: how a lost answer reaches the client.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

/// The proxy's own answers (a refusal, or kube-apiserver unreachable).
fn answer(status: u16, body: serde_json::Value) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Why the proxy closes a connection instead of answering.
#[derive(Debug, thiserror::Error)]
#[error("answer lost on purpose")]
struct LostAnswer;

async fn handle(ctx: &Ctx, request: Request<Incoming>) -> Result<Response<ProxyBody>, LostAnswer> {
    let decision = ctx.faults.decide(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if let Some((code, body)) = decision.refuse {
        let retry_after = body["details"]["retryAfterSeconds"].as_u64();
        let mut response = answer(code, body);
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, seconds.into());
        }
        return Ok(response);
    }
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = match format!("{}{path}", ctx.upstream).parse() {
        Ok(uri) => uri,
        Err(e) => return Ok(answer(400, serde_json::json!({"message": e.to_string()}))),
    };
    for name in HOP_BY_HOP.iter().chain(&["host"]) {
        parts.headers.remove(*name);
    }
    let response = match ctx.client.request(Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(e) => {
            return Ok(answer(
                502,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": format!("keeper-e2e-apiproxy: kube-apiserver unreachable: {e}"),
                    "reason": "ServiceUnavailable", "code": 502}),
            ));
        }
    };
    if decision.lose_answer {
        // kube-apiserver has served the request; its answer never reaches the client.
        return Err(LostAnswer);
    }
    let (mut parts, body) = response.into_parts();
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    let body = match decision.cut_watch_after {
        Some(after) => CutAfter {
            inner: body,
            deadline: Box::pin(tokio::time::sleep(after)),
        }
        .boxed(),
        None => body.boxed(),
    };
    Ok(Response::from_parts(parts, body))
}

/// A response body that ends cleanly at a deadline, as a watch kube-apiserver times out does.
struct CutAfter {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Body for CutAfter {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }
}

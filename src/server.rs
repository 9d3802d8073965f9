//! The manager's HTTP endpoint: `/metrics` (Prometheus text format), `/healthz` (the process
//! runs) and `/readyz` (every enabled controller has synced its cache).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Counts the controllers that still have to sync their caches.
#[derive(Debug)]
pub struct Readiness {
    pending: AtomicUsize,
}

impl Readiness {
    pub fn new(controllers: usize) -> Arc<Self> {
        Arc::new(Readiness {
            pending: AtomicUsize::new(controllers),
        })
    }

    /// Called once by each controller when its cache is synced.
    pub fn controller_synced(&self) {
        let _ = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    pub fn is_ready(&self) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
    }
}

#[derive(Clone)]
pub struct ServerState {
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<Readiness>,
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body.into()))
        .expect("static response parts are valid")
}

fn route(state: &ServerState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
    }
    match req.uri().path() {
        "/metrics" => respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            state.metrics.encode(),
        ),
        "/healthz" => respond(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" if state.readiness.is_ready() => respond(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "controllers are syncing their caches\n",
        ),
        _ => respond(StatusCode::NOT_FOUND, TEXT, "not found\n"),
    }
}

/// Serves until `shutdown` is cancelled, then lets open connections finish.
pub async fn serve(
    listener: TcpListener,
    state: ServerState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    accept_until(listener, shutdown, "metrics", |stream, _peer, watcher| {
        let state = state.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let response = route(&state, &req);
            async move { Ok::<_, Infallible>(response) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
        });
    })
    .await;
    Ok(())
}

/// Accepts connections on `listener` and hands each to `serve`, with the watcher that a graceful
/// shutdown waits on, until `shutdown` is cancelled; then waits for the watched connections to
/// finish. `what` names the server in the log. `serve` must not block: it spawns the connection.
pub async fn accept_until(
    listener: TcpListener,
    shutdown: CancellationToken,
    what: &'static str,
    mut serve: impl FnMut(TcpStream, SocketAddr, Watcher),
) {
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, server = what, "failed to accept a connection");
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        serve(stream, peer, graceful.watcher());
    }
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let response = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let readiness = Readiness::new(2);
        let metrics = Arc::new(Metrics::new());
        metrics.reconciled("s3bucket", std::time::Instant::now(), None);
        let state = ServerState {
            metrics,
            readiness: readiness.clone(),
        };
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener, state, shutdown.clone()));

        assert_eq!(get(addr, "/healthz").await.0, 200);
        assert_eq!(get(addr, "/readyz").await.0, 503);
        readiness.controller_synced();
        assert_eq!(get(addr, "/readyz").await.0, 503);
        readiness.controller_synced();
        assert_eq!(get(addr, "/readyz").await.0, 200);
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("keeper_reconcile_duration_seconds"), "{body}");
        assert_eq!(get(addr, "/nope").await.0, 404);

        shutdown.cancel();
        server.await.unwrap().unwrap();
    }
}

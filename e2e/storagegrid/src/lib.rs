//! keeper's StorageGRID emulator: the grid + tenant management API subset of
//! `shared/reference/storagegrid-api.md` on one listener and a tenant S3 endpoint (a proxy in
//! front of a moto server that adds keys, tenant isolation and group policies) on another.
//!
//! Start it in-process with [`start`] (tests) or through the `keeper-e2e-storagegrid` binary.

mod backend;
mod mgmt;
pub mod moto;
pub mod policy;
mod s3proxy;
mod state;
mod util;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use state::{Fault, RequestRecord};
pub use util::parse_duration;

/// Emulator settings (the CLI flags of `keeper-e2e-storagegrid`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Management API listener (grid + tenant API); port 0 picks a free port.
    pub listen: SocketAddr,
    /// Tenant S3 endpoint listener.
    pub s3_listen: SocketAddr,
    /// Base URL of the moto server holding the buckets, e.g. `http://127.0.0.1:5000`.
    pub moto_endpoint: String,
    /// Grid admin user name accepted by `POST /authorize` without `accountId`.
    pub admin_user: String,
    pub admin_password: String,
    /// Lifetime of management API tokens (StorageGRID: 16 hours).
    pub token_ttl: Duration,
    /// Objects deleted per second by a bucket drain ("delete objects in bucket").
    pub drain_rate: u32,
    /// Regions `GET /org/regions` lists and bucket creation accepts.
    pub regions: Vec<String>,
    /// The grid's id, the top node of `GET /grid/health/topology`: a random UUID unless set, so
    /// that every emulator is a grid of its own.
    pub grid_id: String,
}

impl Config {
    /// Loopback listeners on free ports, 16 h tokens, 500 objects/s drain, region `us-east-1`.
    pub fn new(
        moto_endpoint: impl Into<String>,
        admin_user: impl Into<String>,
        admin_password: impl Into<String>,
    ) -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            s3_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            moto_endpoint: moto_endpoint.into(),
            admin_user: admin_user.into(),
            admin_password: admin_password.into(),
            token_ttl: Duration::from_secs(16 * 3600),
            drain_rate: 500,
            regions: vec!["us-east-1".into()],
            grid_id: util::uuid(),
        }
    }
}

/// Shared state of one running emulator.
pub(crate) struct Ctx {
    state: Mutex<state::State>,
    backend: backend::Backend,
    cfg: Config,
    http: Client<HttpConnector, util::Body>,
    shutdown: AtomicBool,
}

impl Ctx {
    pub(crate) fn lock(&self) -> MutexGuard<'_, state::State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }
}

/// A running emulator. Dropping it (or calling [`Emulator::shutdown`]) stops both listeners and
/// every drain task.
pub struct Emulator {
    management_url: String,
    s3_url: String,
    ctx: Arc<Ctx>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Emulator {
    /// Base URL of the management API, e.g. `http://127.0.0.1:40123`.
    pub fn management_url(&self) -> &str {
        &self.management_url
    }

    /// Base URL of the tenant S3 endpoint (path-style).
    pub fn s3_url(&self) -> &str {
        &self.s3_url
    }

    /// Stops accepting connections and ends the drain tasks.
    pub fn shutdown(&mut self) {
        self.ctx.shutdown.store(true, Ordering::Relaxed);
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }

    /// Resolves when a shutdown was requested through [`Emulator::shutdown`].
    pub async fn wait(&mut self) {
        for t in self.tasks.iter_mut() {
            let _ = t.await;
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds both listeners on the configured addresses and starts serving.
pub async fn start(cfg: Config) -> anyhow::Result<Emulator> {
    let mgmt_listener = TcpListener::bind(cfg.listen).await?;
    let s3_listener = TcpListener::bind(cfg.s3_listen).await?;
    let management_url = format!("http://{}", mgmt_listener.local_addr()?);
    let s3_url = format!("http://{}", s3_listener.local_addr()?);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let http = Client::builder(TokioExecutor::new()).build(connector);
    let ctx = Arc::new(Ctx {
        state: Mutex::new(state::State::default()),
        backend: backend::Backend::new(&cfg.moto_endpoint),
        cfg,
        http,
        shutdown: AtomicBool::new(false),
    });
    let (stop, stop_rx) = watch::channel(false);
    let c1 = ctx.clone();
    let c2 = ctx.clone();
    let tasks = vec![
        tokio::spawn(serve(mgmt_listener, stop_rx.clone(), move |req| {
            mgmt::handle(c1.clone(), req)
        })),
        tokio::spawn(serve(s3_listener, stop_rx, move |req| {
            s3proxy::handle(c2.clone(), req)
        })),
    ];
    Ok(Emulator {
        management_url,
        s3_url,
        ctx,
        stop,
        tasks,
    })
}

async fn serve<F, Fut>(listener: TcpListener, mut stop: watch::Receiver<bool>, handler: F)
where
    F: Fn(hyper::Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<util::Body>> + Send + 'static,
{
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let mut stop = stop.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let handler = handler.clone();
                        async move { Ok::<_, Infallible>(handler(req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::pin!(conn);
                    tokio::select! {
                        r = conn.as_mut() => {
                            if let Err(e) = r {
                                tracing::debug!(error = %e, "connection ended with an error");
                            }
                        }
                        _ = stop.changed() => {}
                    }
                });
            }
            _ = stop.changed() => return,
        }
    }
}

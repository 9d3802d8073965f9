//! `keeper run`: one process running the enabled controllers with a shared client, registry
//! and HTTP endpoint, stopping gracefully on SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::backends::rds::RdsBackend;
use crate::cluster::KubeApi;
use crate::cluster::informer::Informers;
use crate::config::ControllerKind;
use crate::config::{Endpoint, OperatorConfig};
use crate::leader::{self, Leadership};
use crate::metrics::Metrics;
use crate::providers::Providers;
use crate::runtime::Shared;
use crate::server::{self, Readiness, ServerState};
use crate::telemetry::LogFormat;
use crate::webhook;

/// Flags of `keeper run`. Each flag can also be set by the environment variable it names.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Operator configuration file (YAML; see config/keeper.yaml). Without it keeper runs with
    /// no storage providers and the default RDS settings.
    #[arg(long, env = "KEEPER_CONFIG")]
    pub config: Option<PathBuf>,

    /// Controllers to run, comma-separated. Leave one out to switch it off.
    #[arg(
        long,
        env = "KEEPER_CONTROLLERS",
        value_delimiter = ',',
        default_value = "tenant,bucket,database"
    )]
    pub controllers: Vec<ControllerKind>,

    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "KEEPER_METRICS_BIND_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_bind_address: SocketAddr,

    /// Address of the admission webhook's HTTPS endpoint (path /validate). The webhook is
    /// served only when --webhook-cert-dir is given.
    #[arg(
        long,
        env = "KEEPER_WEBHOOK_BIND_ADDRESS",
        default_value = "0.0.0.0:9443"
    )]
    pub webhook_bind_address: SocketAddr,

    /// Directory holding the webhook's `tls.crt` and `tls.key` (a mounted kubernetes.io/tls
    /// Secret). Without it the admission webhook is off and the finalizers alone guard deletion.
    #[arg(long, env = "KEEPER_WEBHOOK_CERT_DIR")]
    pub webhook_cert_dir: Option<PathBuf>,

    /// keeper's own namespace: where Secrets named in the configuration are read by default.
    #[arg(long, env = "POD_NAMESPACE", default_value = "keeper-system")]
    pub namespace: String,

    /// Take part in leader election on a Lease in keeper's namespace, so that of several replicas
    /// only one reconciles. Switch it off for a single local process (development, tests).
    #[arg(
        long,
        env = "KEEPER_LEADER_ELECTION",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub leader_election: bool,

    /// Name of the leader-election Lease (in keeper's namespace).
    #[arg(long, env = "KEEPER_LEADER_ELECTION_LEASE", default_value = "keeper")]
    pub leader_election_lease: String,

    /// Log format.
    #[arg(long, env = "KEEPER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// AWS region for RDS; overrides `rds.region` in the configuration.
    #[arg(long, env = "KEEPER_RDS_REGION")]
    pub rds_region: Option<String>,

    /// RDS endpoint override (for RDS-compatible test servers); overrides `rds.endpoint`.
    #[arg(long, env = "KEEPER_RDS_ENDPOINT")]
    pub rds_endpoint: Option<String>,
}

impl RunArgs {
    /// Loads the configuration file and applies the flag overrides.
    pub fn load_config(&self) -> anyhow::Result<OperatorConfig> {
        let mut config = match &self.config {
            Some(path) => OperatorConfig::load(path)?,
            None => OperatorConfig::default(),
        };
        if let Some(region) = &self.rds_region {
            config.rds.region = Some(region.clone());
        }
        if let Some(endpoint) = &self.rds_endpoint {
            let url = reqwest::Url::parse(endpoint)
                .with_context(|| format!("--rds-endpoint: invalid URL {endpoint:?}"))?;
            config.rds.endpoint = Some(Endpoint(url));
        }
        Ok(config)
    }
}

/// The kube configuration (in-cluster or kubeconfig), identified as `keeper/<version>` in
/// API-server logs.
async fn kube_config() -> anyhow::Result<kube::Config> {
    let mut config = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes configuration (in-cluster or kubeconfig)")?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("keeper/", env!("CARGO_PKG_VERSION"))),
    ));
    Ok(config)
}

/// This machine's host name (a pod's name in a cluster), for the leader-election identity.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "keeper".to_string())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = args.load_config()?;
    let kube_config = kube_config().await?;
    let client = kube::Client::try_from(kube_config.clone())
        .context("cannot build the Kubernetes client")?;
    let metrics = Arc::new(Metrics::new());
    let mut controllers = args.controllers.clone();
    controllers.sort();
    controllers.dedup();
    let readiness = Readiness::new(controllers.len());
    let informers = Arc::new(Informers::new(client.clone()));
    let kube = Arc::new(KubeApi::start(
        client.clone(),
        informers.clone(),
        &config.provider_secrets(&args.namespace),
        config.uses_namespace_selector(),
    ));
    let rds = RdsBackend::from_config(
        &config.rds,
        &config.runtime.backend_timeouts,
        metrics.clone(),
    )
    .await;
    let providers = Arc::new(Providers::build(&config, metrics.clone(), rds)?);
    let shutdown = CancellationToken::new();
    let (leadership, election) = if args.leader_election {
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("{}-{}", hostname(), std::process::id()));
        let (leadership, task) = leader::elect(
            leader::lease_client(kube_config)?,
            leader::Election {
                namespace: args.namespace.clone(),
                lease_name: args.leader_election_lease.clone(),
                identity,
            },
            &metrics,
            shutdown.clone(),
        )
        .await?;
        (leadership, Some(task))
    } else {
        tracing::info!("leader election off (--leader-election=false): this process reconciles");
        leader::leader_gauge(&metrics)?.set(1);
        (Leadership::always(), None)
    };
    let shared = Shared {
        informers,
        leadership,
        client,
        kube,
        providers,
        config: Arc::new(config),
        metrics: metrics.clone(),
        operator_namespace: args.namespace.clone(),
    };

    let listener = tokio::net::TcpListener::bind(args.metrics_bind_address)
        .await
        .with_context(|| format!("cannot listen on {}", args.metrics_bind_address))?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    let server = tokio::spawn(server::serve(
        listener,
        ServerState {
            metrics,
            readiness: readiness.clone(),
        },
        shutdown.clone(),
    ));

    let webhook = match &args.webhook_cert_dir {
        Some(dir) => {
            let tls = webhook::tls_config(dir)?;
            let listener = tokio::net::TcpListener::bind(args.webhook_bind_address)
                .await
                .with_context(|| format!("cannot listen on {}", args.webhook_bind_address))?;
            tracing::info!(address = %listener.local_addr()?, path = webhook::PATH, "serving the admission webhook");
            Some(tokio::spawn(webhook::serve(
                listener,
                tls,
                shared.client.clone(),
                shutdown.clone(),
            )))
        }
        None => {
            tracing::info!("admission webhook off (no --webhook-cert-dir)");
            None
        }
    };

    let mut tasks = tokio::task::JoinSet::new();
    for kind in controllers {
        let (shared, readiness, shutdown) = (shared.clone(), readiness.clone(), shutdown.clone());
        tasks
            .spawn(async move { crate::controllers::run(kind, shared, readiness, shutdown).await });
    }

    tokio::select! {
        () = shutdown_signal() => {}
        Some(result) = tasks.join_next() => {
            // A controller only returns on its own when it cannot start.
            shutdown.cancel();
            result.context("controller task panicked")??;
            anyhow::bail!("a controller stopped unexpectedly");
        }
    }
    shutdown.cancel();
    while let Some(result) = tasks.join_next().await {
        result.context("controller task panicked")??;
    }
    if let Some(election) = election {
        election.await.context("leader election task panicked")?;
    }
    server.await.context("HTTP server task panicked")??;
    if let Some(webhook) = webhook {
        webhook.await.context("webhook task panicked")??;
    }
    tracing::info!("all controllers stopped");
    Ok(())
}

//! `keeper run`: one process running the enabled controllers with a shared client, registry
//! and HTTP endpoint, stopping gracefully on SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::backends::rds::RdsBackend;
use crate::cluster::KubeApi;
use crate::cluster::informer::{Informers, Scope};
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
    /// served only when --webhook-cert-dir or --webhook-cert-secret is given.
    #[arg(
        long,
        env = "KEEPER_WEBHOOK_BIND_ADDRESS",
        default_value = "0.0.0.0:9443"
    )]
    pub webhook_bind_address: SocketAddr,

    /// Directory holding the webhook's `tls.crt` and `tls.key` (a mounted kubernetes.io/tls
    /// Secret, from cert-manager or your own). Without it or --webhook-cert-secret the admission
    /// webhook is off and the finalizers alone guard deletion.
    #[arg(
        long,
        env = "KEEPER_WEBHOOK_CERT_DIR",
        conflicts_with = "webhook_cert_secret"
    )]
    pub webhook_cert_dir: Option<PathBuf>,

    /// Self-managed certificate: keeper issues a CA and a serving certificate itself, keeps them
    /// in this Secret of its namespace (created if absent, shared by replicas), renews them before
    /// they expire and sets the caBundle of --webhook-configuration.
    #[arg(
        long,
        env = "KEEPER_WEBHOOK_CERT_SECRET",
        requires = "webhook_configuration"
    )]
    pub webhook_cert_secret: Option<String>,

    /// With --webhook-cert-secret: the ValidatingWebhookConfiguration whose caBundle keeper sets
    /// (its own; it patches no other).
    #[arg(
        long,
        env = "KEEPER_WEBHOOK_CONFIGURATION",
        requires = "webhook_cert_secret"
    )]
    pub webhook_configuration: Option<String>,

    /// With --webhook-cert-secret: the webhook's Service in keeper's namespace; the certificate
    /// covers `<service>.<namespace>.svc` (the name the API server verifies) and its shorter forms.
    #[arg(long, env = "KEEPER_WEBHOOK_SERVICE", requires = "webhook_cert_secret")]
    pub webhook_service: Option<String>,

    /// With --webhook-cert-secret: more DNS names or IP addresses the certificate covers,
    /// comma-separated (127.0.0.1 for a keeper outside the cluster called by URL).
    #[arg(
        long,
        env = "KEEPER_WEBHOOK_CERT_HOSTS",
        value_delimiter = ',',
        requires = "webhook_cert_secret"
    )]
    pub webhook_cert_hosts: Vec<String>,

    /// With --webhook-cert-secret: how long a serving certificate is valid (at least 30s); it is
    /// renewed two thirds of the way through. The CA keeper issues is valid for ten years.
    #[arg(
        long,
        env = "KEEPER_WEBHOOK_CERT_VALIDITY",
        default_value = "8760h",
        value_parser = parse_validity
    )]
    pub webhook_cert_validity: Duration,

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

fn parse_validity(value: &str) -> Result<Duration, String> {
    let duration = crate::api::names::parse_duration(value).map_err(|e| e.to_string())?;
    if duration < Duration::from_secs(30) {
        return Err(format!(
            "{value}: a certificate must be valid for at least 30s"
        ));
    }
    if duration >= webhook::certs::CA_VALIDITY {
        return Err(format!(
            "{value}: a certificate must expire before the CA that signs it (ten years)"
        ));
    }
    Ok(duration)
}

/// How the webhook gets its certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookTls {
    Off,
    /// `tls.crt` and `tls.key` in a directory.
    Files(PathBuf),
    /// Issued by keeper itself.
    SelfManaged(webhook::certs::Settings),
}

impl RunArgs {
    /// The webhook's certificate source from the flags.
    pub fn webhook_tls(&self) -> anyhow::Result<WebhookTls> {
        if let Some(dir) = &self.webhook_cert_dir {
            return Ok(WebhookTls::Files(dir.clone()));
        }
        let Some(secret) = &self.webhook_cert_secret else {
            return Ok(WebhookTls::Off);
        };
        let mut hosts = match &self.webhook_service {
            Some(service) => webhook::certs::service_hosts(service, &self.namespace),
            None => Vec::new(),
        };
        for host in &self.webhook_cert_hosts {
            let host = host.trim();
            if !host.is_empty() && !hosts.iter().any(|h| h == host) {
                hosts.push(host.to_string());
            }
        }
        anyhow::ensure!(
            !hosts.is_empty(),
            "--webhook-cert-secret needs --webhook-service or --webhook-cert-hosts: the names the \
             certificate covers"
        );
        Ok(WebhookTls::SelfManaged(webhook::certs::Settings {
            namespace: self.namespace.clone(),
            secret: secret.clone(),
            webhook_configuration: self
                .webhook_configuration
                .clone()
                .context("--webhook-cert-secret needs --webhook-configuration")?,
            hosts,
            validity: self.webhook_cert_validity,
        }))
    }

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
    let scope = match &config.watch_namespaces {
        Some(watched) => {
            tracing::info!(namespaces = ?watched.names(), "watching only the namespaces of watchNamespaces");
            Scope::Namespaces(watched.names().to_vec())
        }
        None => Scope::Cluster,
    };
    let informers = Arc::new(Informers::new(client.clone(), scope));
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
    // The lease is given up only after the controllers stopped: a reconcile under way at SIGTERM
    // finishes as the leader, and one that is under way when leadership is lost stops at once
    // (`runtime::observed`), never going on beside the next leader.
    let resign = CancellationToken::new();
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
            resign.clone(),
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

    let (tls, certificates) = match args.webhook_tls()? {
        WebhookTls::Off => {
            tracing::info!(
                "admission webhook off (no --webhook-cert-dir or --webhook-cert-secret)"
            );
            (None, None)
        }
        WebhookTls::Files(dir) => (Some(webhook::tls_config(&dir)?), None),
        WebhookTls::SelfManaged(settings) => {
            let served = Arc::new(webhook::MemoryCert::default());
            tracing::info!(
                secret = %settings.secret,
                configuration = %settings.webhook_configuration,
                hosts = ?settings.hosts,
                "admission webhook certificate: self-managed"
            );
            let task = tokio::spawn(webhook::certs::run(
                shared.client.clone(),
                settings,
                served.clone(),
                shutdown.clone(),
            ));
            (Some(webhook::tls_config_from_memory(served)?), Some(task))
        }
    };
    let webhook = match tls {
        Some(tls) => {
            let listener = tokio::net::TcpListener::bind(args.webhook_bind_address)
                .await
                .with_context(|| format!("cannot listen on {}", args.webhook_bind_address))?;
            tracing::info!(address = %listener.local_addr()?, path = webhook::PATH, "serving the admission webhook");
            Some(tokio::spawn(webhook::serve(
                listener,
                tls,
                shared.kube.clone(),
                shutdown.clone(),
            )))
        }
        None => None,
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
            resign.cancel();
            result.context("controller task panicked")??;
            anyhow::bail!("a controller stopped unexpectedly");
        }
    }
    shutdown.cancel();
    while let Some(result) = tasks.join_next().await {
        result.context("controller task panicked")??;
    }
    resign.cancel();
    if let Some(election) = election {
        election.await.context("leader election task panicked")?;
    }
    server.await.context("HTTP server task panicked")??;
    if let Some(webhook) = webhook {
        webhook.await.context("webhook task panicked")??;
    }
    if let Some(certificates) = certificates {
        certificates
            .await
            .context("webhook certificate task panicked")?;
    }
    tracing::info!("all controllers stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("keeper").chain(args.iter().copied())).map(|c| c.run)
    }

    #[test]
    fn self_managed_flags_name_the_secret_the_configuration_and_what_the_certificate_covers() {
        let args = parse(&[
            "--namespace=ops",
            "--webhook-cert-secret=keeper-webhook-tls",
            "--webhook-configuration=keeper",
            "--webhook-service=keeper",
            "--webhook-cert-hosts=127.0.0.1,keeper.example.com,keeper.ops.svc",
        ])
        .unwrap();
        let WebhookTls::SelfManaged(settings) = args.webhook_tls().unwrap() else {
            panic!("self-managed");
        };
        assert_eq!(settings.namespace, "ops");
        assert_eq!(settings.secret, "keeper-webhook-tls");
        assert_eq!(settings.webhook_configuration, "keeper");
        assert_eq!(
            settings.hosts,
            [
                "keeper.ops.svc",
                "keeper.ops.svc.cluster.local",
                "keeper.ops",
                "keeper",
                "127.0.0.1",
                "keeper.example.com"
            ]
        );
        assert_eq!(settings.validity, Duration::from_secs(365 * 24 * 3600));

        let args = parse(&[
            "--webhook-cert-secret=s",
            "--webhook-configuration=keeper",
            "--webhook-cert-hosts=127.0.0.1",
            "--webhook-cert-validity=90s",
        ])
        .unwrap();
        let WebhookTls::SelfManaged(settings) = args.webhook_tls().unwrap() else {
            panic!("self-managed");
        };
        assert_eq!(settings.hosts, ["127.0.0.1"]);
        assert_eq!(settings.validity, Duration::from_secs(90));
    }

    #[test]
    fn webhook_certificate_flags_that_cannot_work_are_refused() {
        assert_eq!(parse(&[]).unwrap().webhook_tls().unwrap(), WebhookTls::Off);
        assert_eq!(
            parse(&["--webhook-cert-dir=/certs"])
                .unwrap()
                .webhook_tls()
                .unwrap(),
            WebhookTls::Files("/certs".into())
        );
        // Two sources at once, or a half-given self-managed mode.
        for args in [
            &[
                "--webhook-cert-dir=/certs",
                "--webhook-cert-secret=s",
                "--webhook-configuration=keeper",
            ][..],
            &["--webhook-cert-secret=s", "--webhook-service=keeper"],
            &["--webhook-configuration=keeper"],
            &["--webhook-service=keeper"],
        ] {
            assert!(parse(args).is_err(), "{args:?} accepted");
        }
        let err = parse(&[
            "--webhook-cert-secret=s",
            "--webhook-configuration=keeper",
            "--webhook-cert-validity=10s",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("at least 30s"), "{err}");
        let err = parse(&[
            "--webhook-cert-secret=s",
            "--webhook-configuration=keeper",
            "--webhook-cert-validity=87600h",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("before the CA"), "{err}");
        let err = parse(&["--webhook-cert-secret=s", "--webhook-configuration=keeper"])
            .unwrap()
            .webhook_tls()
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("needs --webhook-service or --webhook-cert-hosts"),
            "{err}"
        );
    }
}

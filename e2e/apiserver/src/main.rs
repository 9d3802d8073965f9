//! `keeper-e2e-apiserver --listen 127.0.0.1:0 --kubeconfig <path> [--ready-file <path>]
//! [--token-auth-file <path>] [--audit-log-path <path>]`

use clap::Parser;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "keeper-e2e-apiserver",
    about = "Kubernetes API emulator for keeper's tests"
)]
struct Args {
    /// Address to listen on; must be a loopback address (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Where to write the kubeconfig for this server.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Written (atomically) with the server URL once the server accepts connections.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Number of changes kept for watches; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    watch_history: usize,
    /// Seconds between watch BOOKMARK events.
    #[arg(long, default_value_t = 10)]
    bookmark_interval: u64,
    /// Map a webhook Service reference to a local port: `namespace/name=port` (repeatable).
    #[arg(long = "webhook-service", value_name = "NS/NAME=PORT")]
    webhook_services: Vec<String>,
    /// Bearer tokens besides the admin token of --kubeconfig, in kube-apiserver's
    /// --token-auth-file format: `token,user,uid[,"group1,group2"]` per line.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Append every API request (verb, resource, user, code, ...) as a JSON line to this file.
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
}

fn write_atomic(path: &Path, content: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    std::fs::write(&tmp, content)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // One rustls crypto provider for the whole process (webhook calls use rustls).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = Args::parse();
    let addr: std::net::SocketAddr = args
        .listen
        .parse()
        .map_err(|e| anyhow::anyhow!("--listen {:?}: {e}", args.listen))?;
    if !addr.ip().is_loopback() {
        anyhow::bail!("--listen must be a loopback address (got {addr})");
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let tls = keeper_e2e_apiserver::tls::Tls::generate()?;
    write_atomic(
        &args.kubeconfig,
        &keeper_e2e_apiserver::kubeconfig(&url, &tls.ca_pem),
    )?;
    let mut webhook_services = std::collections::HashMap::new();
    for m in &args.webhook_services {
        let (svc, port) = m
            .split_once('=')
            .filter(|(s, _)| s.contains('/'))
            .ok_or_else(|| {
                anyhow::anyhow!("--webhook-service {m:?}: expected namespace/name=port")
            })?;
        let port: u16 = port
            .parse()
            .map_err(|e| anyhow::anyhow!("--webhook-service {m:?}: bad port: {e}"))?;
        webhook_services.insert(svc.to_string(), port);
    }
    let static_tokens = match &args.token_auth_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--token-auth-file {}: {e}", path.display()))?;
            keeper_e2e_apiserver::auth::parse_token_file(&text)
                .map_err(|e| anyhow::anyhow!("--token-auth-file {}: {e}", path.display()))?
        }
        None => Default::default(),
    };
    let config = keeper_e2e_apiserver::Config {
        watch_history: args.watch_history,
        bookmark_interval: Duration::from_secs(args.bookmark_interval.max(1)),
        webhook_services,
        static_tokens,
        audit_log: args.audit_log_path,
        tls: Some(tls),
    };
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    let server = tokio::spawn(keeper_e2e_apiserver::serve(listener, config, shutdown));
    println!("listening on {url}");
    std::io::stdout().flush()?;
    if let Some(p) = &args.ready_file {
        write_atomic(p, &url)?;
    }
    server.await??;
    Ok(())
}

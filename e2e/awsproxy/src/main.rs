//! `keeper-e2e-awsproxy --moto-endpoint URL [--listen 127.0.0.1:0] [--ready-file PATH] ...`

use clap::Parser;
use keeper_e2e_awsproxy::{Config, Phases, Settings};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "keeper-e2e-awsproxy",
    about = "A proxy in front of moto: AWS-shaped faults and RDS phases that take time"
)]
struct Args {
    /// Address to listen on; loopback only (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The moto server to forward to, e.g. http://127.0.0.1:5000.
    #[arg(long)]
    moto_endpoint: String,
    /// Written (atomically) with the proxy's URL once it accepts connections.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// How long a new RDS instance shows `creating` (e.g. 2s; 0 skips the phase).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    rds_creating: Duration,
    /// How long it then shows `backing-up`.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    rds_backing_up: Duration,
    /// How long a modified instance shows `modifying`.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    rds_modifying: Duration,
    /// How long a deleted instance is still listed as `deleting`.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    rds_deleting: Duration,
    /// Initial fault settings, as `PUT /_awsproxy/faults` takes them (JSON).
    #[arg(long)]
    faults: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut config = Config::new(args.moto_endpoint);
    config.listen = args.listen;
    config.phases = Phases {
        creating: args.rds_creating,
        backing_up: args.rds_backing_up,
        modifying: args.rds_modifying,
        deleting: args.rds_deleting,
    };
    if let Some(f) = &args.faults {
        config.faults =
            Settings::parse(f.as_bytes()).map_err(|e| anyhow::anyhow!("--faults: {e}"))?;
    }
    let proxy = keeper_e2e_awsproxy::start(config).await?;
    println!("listening on {}", proxy.url());
    std::io::stdout().flush()?;
    if let Some(path) = args.ready_file {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, proxy.url())?;
        std::fs::rename(&tmp, &path)?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    drop(proxy);
    Ok(())
}

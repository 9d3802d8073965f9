//! `keeper-e2e-storagegrid`: StorageGRID management API + tenant S3 endpoint emulator.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use keeper_e2e_storagegrid::{Config, parse_duration, start};

#[derive(Parser, Debug)]
#[command(
    name = "keeper-e2e-storagegrid",
    about = "StorageGRID emulator in front of a moto server"
)]
struct Args {
    /// Management API (grid + tenant) listen address.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Tenant S3 endpoint listen address.
    #[arg(long, default_value = "127.0.0.1:0")]
    s3_listen: SocketAddr,
    /// moto server base URL, e.g. http://127.0.0.1:5000
    #[arg(long)]
    moto_endpoint: String,
    /// Grid admin user name.
    #[arg(long, default_value = "root")]
    admin_user: String,
    /// Grid admin password.
    #[arg(long)]
    admin_password: String,
    /// Token lifetime (e.g. 16h, 1h, 30s).
    #[arg(long, default_value = "16h", value_parser = parse_duration)]
    token_ttl: Duration,
    /// Objects deleted per second by a bucket drain.
    #[arg(long, default_value_t = 500)]
    drain_rate: u32,
    /// The grid's id (`GET /grid/health/topology`); default: a random UUID, so every emulator is
    /// a grid of its own.
    #[arg(long)]
    grid_id: Option<String>,
    /// Write {"management": URL, "s3": URL} here once listening (temp file + rename).
    #[arg(long)]
    ready_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    for addr in [args.listen, args.s3_listen] {
        if !addr.ip().is_loopback() {
            anyhow::bail!("refusing to listen on {addr}: loopback addresses only");
        }
    }
    if args.drain_rate == 0 {
        anyhow::bail!("--drain-rate must be at least 1");
    }
    let mut cfg = Config::new(args.moto_endpoint, args.admin_user, args.admin_password);
    cfg.listen = args.listen;
    cfg.s3_listen = args.s3_listen;
    cfg.token_ttl = args.token_ttl;
    cfg.drain_rate = args.drain_rate;
    if let Some(grid_id) = args.grid_id {
        cfg.grid_id = grid_id;
    }
    let mut emulator = start(cfg).await?;
    println!("management on {}", emulator.management_url());
    println!("s3 on {}", emulator.s3_url());
    if let Some(path) = args.ready_file {
        let tmp = path.with_extension("tmp");
        let body =
            serde_json::json!({"management": emulator.management_url(), "s3": emulator.s3_url()});
        std::fs::write(&tmp, serde_json::to_vec(&body)?)?;
        std::fs::rename(&tmp, &path)?;
    }
    use std::io::Write;
    std::io::stdout().flush()?;

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    emulator.shutdown();
    Ok(())
}

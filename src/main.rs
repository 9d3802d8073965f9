use std::path::PathBuf;

use clap::{Parser, Subcommand};

use keeper::manager::{self, RunArgs};
use keeper::{crdgen, release, telemetry};

/// keeper: S3 tenants, S3 buckets and RDS databases for Kubernetes, safe from creation to teardown.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator: the S3Tenant, S3Bucket and CloudDatabase controllers in one process.
    Run(Box<RunArgs>),
    /// Write the CustomResourceDefinitions generated from the API types.
    Crdgen {
        /// Directory to write one YAML file per CRD into.
        #[arg(long, default_value = "crds")]
        output_dir: PathBuf,
    },
    /// List what removing keeper's finalizers would leave behind on the backends, and remove them
    /// with --confirm: for the day keeper is uninstalled for good or a backend is gone. Refuses
    /// while a keeper leader holds the election Lease.
    ReleaseFinalizers(release::Args),
}

/// jemalloc rather than glibc's malloc: less memory and CPU with a large fleet cached (see
/// Cargo.toml for the figures).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole cause chain on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    // One rustls crypto provider for kube, reqwest and the AWS SDK, installed before any of them
    // builds a TLS config (two providers in one process make rustls panic).
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .expect("no other rustls provider is installed this early");
    match Cli::parse().command {
        Command::Run(args) => {
            telemetry::init(args.log_format);
            manager::run(*args).await
        }
        Command::ReleaseFinalizers(args) => release::run(args).await,
        Command::Crdgen { output_dir } => {
            for name in crdgen::write(&output_dir)? {
                println!("wrote {}", output_dir.join(name).display());
            }
            Ok(())
        }
    }
}

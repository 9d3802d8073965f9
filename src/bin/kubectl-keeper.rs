//! `kubectl-keeper`: the kubectl plugin (`kubectl keeper ...` once the binary is on PATH); its
//! logic is `keeper::plugin`.

use clap::Parser as _;

use keeper::plugin::{self, Cli};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // One rustls crypto provider for the kube client, installed before it builds a TLS config.
    rustls::crypto::aws_lc_rs::default_provider()
        .install_default()
        .expect("no other rustls provider is installed this early");
    match plugin::run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole cause chain on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! Logging through `tracing`: human-readable by default, JSON with `--log-format json`.
//! The level comes from `RUST_LOG` (default `info`). Text logs carry ANSI colours only when
//! stdout is a terminal, so log files and log collectors get plain text.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stdout().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}
